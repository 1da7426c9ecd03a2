//! RMSNorm (with the fused residual add) and the rotary embedding on torch tensors, straight
//! to the library: tensors read in one pass, the output allocated through torch, the checks
//! and the launch on torch's current stream in Rust.

use kiln::api::raw;
use pyo3::prelude::*;

use crate::torch;
use crate::{handle, stream_of, to_py};

/// `kiln.rms_norm` whole: out = rmsnorm(x) * weight over x's last dim (with `residual`:
/// residual += x first, in place, and the sum normalised); `out` allocated like x when
/// `None`; returns out.
#[pyfunction]
#[pyo3(signature = (x, weight, eps, residual=None, out=None))]
pub fn rms_norm<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    weight: &Bound<'py, PyAny>,
    eps: f32,
    residual: Option<&Bound<'py, PyAny>>,
    out: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let ([x, weight, residual, out], device) = torch::read_all([
        ("x", Some(x)),
        ("weight", Some(weight)),
        ("residual", residual),
        ("out", out),
    ])?;
    let (x, weight) = (x.expect("read"), weight.expect("read"));
    let out = match out {
        Some(o) => o,
        None => {
            let dt = x.obj.getattr(pyo3::intern!(py, "dtype"))?;
            torch::read("out", &torch::new_empty(&x.obj, &x.raw.shape, &dt)?)?
        }
    };
    let res = residual.as_ref().map(|r| &r.raw);
    raw::check_rms_norm(device, &x.raw, &weight.raw, res, &out.raw, eps).map_err(to_py)?;
    let k = handle(device)?;
    let stream = torch::current_stream(py, device)?;
    // SAFETY: live torch tensors of `device`, kept alive by the caller until torch's current
    // stream there has run the launch; `out` and `residual` were checked not to overlap the
    // inputs.
    py.allow_threads(|| unsafe {
        raw::rms_norm(
            &k,
            stream_of(stream),
            &x.raw,
            &weight.raw,
            res,
            &out.raw,
            eps,
        )
    })
    .map_err(to_py)?;
    Ok(out.obj)
}

/// `kiln.apply_rotary` whole: q [B, Hq, S, D] and k [B, Hk, S, D] rotated in place by cos and
/// sin ([B, S, R] or [S, R]), rotate_half or `interleaved` pairs.
#[pyfunction]
pub fn rope<'py>(
    py: Python<'py>,
    q: &Bound<'py, PyAny>,
    k: &Bound<'py, PyAny>,
    cos: &Bound<'py, PyAny>,
    sin: &Bound<'py, PyAny>,
    interleaved: bool,
) -> PyResult<()> {
    let ([q, k, cos, sin], device) = torch::read_all([
        ("q", Some(q)),
        ("k", Some(k)),
        ("cos", Some(cos)),
        ("sin", Some(sin)),
    ])?;
    let [q, k, cos, sin] = [q, k, cos, sin].map(|t| t.expect("read").raw);
    raw::check_rope(device, &q, &k, &cos, &sin, interleaved).map_err(to_py)?;
    let kiln = handle(device)?;
    let stream = torch::current_stream(py, device)?;
    // SAFETY: as in `rms_norm`; q and k were checked not to overlap each other or the tables.
    py.allow_threads(|| unsafe {
        raw::rope(&kiln, stream_of(stream), &q, &k, &cos, &sin, interleaved)
    })
    .map_err(to_py)
}
