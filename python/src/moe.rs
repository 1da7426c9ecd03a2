//! The mixture-of-experts ops of the extension: the grouped GEMM and the fused SwiGLU over
//! experts, rows given by offsets (contiguous) or counts (masked).

use kiln::api::{raw, MoeRows, SwigluWeights};
use pyo3::prelude::*;

use crate::torch::{self, Arg};
use crate::{handle, renamed, stream_of, to_py};

/// The output [rows, n] of an MoE op on `x`, allocated in x's dtype when `x` is 2-D and the
/// weights `w` 3-D; otherwise `x` stands in for it (the checks refuse `x` or `w` first).
fn moe_output<'py>(x: &Arg<'py>, w: &Arg<'py>, n: impl Fn(usize) -> usize) -> PyResult<Arg<'py>> {
    match (x.raw.shape.as_slice(), w.raw.shape.as_slice()) {
        ([rows, _], [_, wrows, _]) => {
            let dtype = x.obj.getattr(pyo3::intern!(x.obj.py(), "dtype"))?;
            torch::read("y", &torch::new_empty(&x.obj, &[*rows, n(*wrows)], &dtype)?)
        }
        _ => Ok(Arg {
            obj: x.obj.clone(),
            raw: x.raw.clone(),
        }),
    }
}

/// `kiln.moe.grouped_gemm` past its offsets' conversions: y[rows of e] = x[rows of e] @ w[e]ᵀ
/// on torch's current stream; returns y (rows no expert owns are left unwritten).
#[pyfunction]
pub fn grouped_gemm<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    w: &Bound<'py, PyAny>,
    offsets: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let ([x, w, offsets], device) =
        torch::read_all([("x", Some(x)), ("w", Some(w)), ("offsets", Some(offsets))])?;
    let (x, w, offsets) = (x.expect("read"), w.expect("read"), offsets.expect("read"));
    let y = moe_output(&x, &w, |wrows| wrows)?;
    let rows = MoeRows::Offsets {
        offsets: offsets.raw,
        host: None,
    };
    raw::check_grouped_gemm(device, &x.raw, &w.raw, &rows, &y.raw).map_err(to_py)?;
    let k = handle(device)?;
    let stream = torch::current_stream(py, device)?;
    // SAFETY: as in `gemm`.
    py.allow_threads(|| unsafe {
        raw::grouped_gemm(&k, stream_of(stream), &x.raw, &w.raw, &rows, &y.raw)
    })
    .map_err(to_py)?;
    Ok(y.obj)
}

/// `kiln.moe.swiglu` past its weight layouts and offsets' conversions: h = silu(x W1ᵀ) *
/// (x W3ᵀ) [* routing] per expert, W1 and W3 separate (`w3`) or interleaved in `w1`; returns h.
#[pyfunction]
#[pyo3(signature = (x, w1, w3, offsets, routing=None))]
pub fn swiglu<'py>(
    py: Python<'py>,
    x: &Bound<'py, PyAny>,
    w1: &Bound<'py, PyAny>,
    w3: Option<&Bound<'py, PyAny>>,
    offsets: &Bound<'py, PyAny>,
    routing: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let w1_name = if w3.is_some() { "w1" } else { "w13" };
    let ([x, w1, w3, offsets, routing], device) = torch::read_all([
        ("x", Some(x)),
        (w1_name, Some(w1)),
        ("w3", w3),
        ("offsets", Some(offsets)),
        ("routing_weights", routing),
    ])?;
    let (x, w1, offsets) = (x.expect("read"), w1.expect("read"), offsets.expect("read"));
    let interleaved = w3.is_none();
    let h = moe_output(&x, &w1, |wrows| if interleaved { wrows / 2 } else { wrows })?;
    let w = match w3 {
        None => SwigluWeights::Interleaved(w1.raw),
        Some(w3) => SwigluWeights::Separate {
            w1: w1.raw,
            w3: w3.raw,
        },
    };
    let rows = MoeRows::Offsets {
        offsets: offsets.raw,
        host: None,
    };
    let routing = routing.map(|r| r.raw);
    let named = |e| to_py(renamed(e, "routing", "routing_weights"));
    raw::check_swiglu(device, &x.raw, &w, &rows, routing.as_ref(), &h.raw).map_err(named)?;
    let k = handle(device)?;
    let stream = torch::current_stream(py, device)?;
    // SAFETY: as in `gemm`.
    py.allow_threads(|| unsafe {
        raw::swiglu(
            &k,
            stream_of(stream),
            &x.raw,
            &w,
            &rows,
            routing.as_ref(),
            &h.raw,
        )
    })
    .map_err(named)?;
    Ok(h.obj)
}
