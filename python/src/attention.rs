//! The attention ops of the extension: the forward (`flash_attn`), the packed forward and
//! backward (`flash_attn_varlen`, `flash_attn_varlen_backward`) on torch tensors (read here,
//! checked by kiln, outputs allocated through torch, launched on torch's current stream), the
//! dense backward on described tensors, and what the decode ops (`kvcache.rs`) share with them.

use std::sync::Arc;

use kiln::api::{
    raw, AttentionBackwardOptions, AttentionOptions, DType, RawTensor, VarlenOffsets, Window,
};
use kiln::Kiln;
use pyo3::exceptions::PyValueError;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::torch::{self, Arg};
use crate::{handle, renamed, stream_of, tensor, to_py, PyTensor};

/// Bytes each stride and the start of a tensor must be a multiple of for the attention kernels'
/// TMA and 16-byte copies.
const ALIGN: usize = 16;

/// Whether kiln's attention kernels read `t` where it lies: the last stride 1, every other
/// stride of a dimension longer than 1 a positive multiple of 16 bytes, the start 16-byte
/// aligned.
fn addressable(t: &RawTensor) -> bool {
    let e = t.dtype.size() as isize;
    let n = t.shape.len();
    if n == 0 || (t.shape[n - 1] > 1 && t.strides[n - 1] != 1) {
        return n == 0;
    }
    let strides_ok = t.shape[..n - 1]
        .iter()
        .zip(&t.strides)
        .all(|(&d, &s)| d <= 1 || (s > 0 && (s * e) % ALIGN as isize == 0));
    strides_ok && t.ptr.is_multiple_of(ALIGN as u64)
}

/// `a` itself where the kernels read it in place, else its packed copy (`.contiguous()`): only
/// memory they cannot address is copied (a last stride other than 1, a stride or start not a
/// multiple of 16 bytes).
pub(crate) fn in_place<'py>(name: &'static str, a: Arg<'py>) -> PyResult<Arg<'py>> {
    match addressable(&a.raw) {
        true => Ok(a),
        false => torch::contiguous(name, &a),
    }
}

/// flash-attention's `window_size` (left, right; -1 for no bound), or a ValueError.
pub(crate) fn window_arg(w: Option<&Bound<'_, PyAny>>) -> PyResult<Window> {
    let Some(w) = w else {
        return Ok(Window::UNBOUNDED);
    };
    let bad = || {
        PyValueError::new_err(format!(
            "`window_size` is {}; give (left, right), each -1 (no bound) or a key count",
            w.repr().map_or("?".into(), |r| r.to_string())
        ))
    };
    let (left, right) = match w.extract::<Vec<i64>>().map_err(|_| bad())?[..] {
        [left, right] => (left, right),
        _ => return Err(bad()),
    };
    for (side, x) in [("left", left), ("right", right)] {
        if x < -1 {
            return Err(PyValueError::new_err(format!(
                "`window_size` {side} is {x}; use -1 for no bound or a key count >= 0"
            )));
        }
    }
    Ok(Window { left, right })
}

/// A bool argument that may be left out (`None`: false).
pub(crate) fn flag(name: &str, v: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
    v.map_or(Ok(false), |v| torch::bool_arg(name, v))
}

/// The softmax scale: given, or 1 / sqrt(head_dim).
pub(crate) fn scale_of(given: Option<f64>, head_dim: usize) -> f32 {
    given.map_or(1.0 / (head_dim.max(1) as f32).sqrt(), |s| s as f32)
}

/// The forward's options for a query of `shape` (its last dimension the head dim).
fn options(causal: bool, window: Window, scale: Option<f64>, shape: &[usize]) -> AttentionOptions {
    AttentionOptions {
        causal,
        softmax_scale: Some(scale_of(scale, shape.last().copied().unwrap_or(0))),
        window,
        ..AttentionOptions::default()
    }
}

/// The handle of `device`, or (where none opens: no GPU, no driver) `check`'s argument error
/// before the handle's: bad input is reported as such on any machine.
pub(crate) fn handle_or_check(
    device: usize,
    check: impl FnOnce() -> kiln::Result<()>,
) -> PyResult<Arc<Kiln>> {
    handle(device).or_else(|e| {
        check().map_err(to_py)?;
        Err(e)
    })
}

/// A new tensor of `shape` on `like`'s device in `like`'s dtype (`dtype`: None) or `dtype`,
/// read back as `name`.
pub(crate) fn output<'py>(
    name: &'static str,
    like: &Arg<'py>,
    shape: &[usize],
    dtype: Option<DType>,
) -> PyResult<Arg<'py>> {
    let py = like.obj.py();
    let dt = match dtype {
        Some(d) => torch::torch_dtype(py, d)?,
        None => like.obj.getattr(intern!(py, "dtype"))?,
    };
    torch::read(name, &torch::new_empty(&like.obj, shape, &dt)?)
}

/// `out`, or `(out, lse)` when the caller asked for the LSE.
pub(crate) fn returned<'py>(out: Arg<'py>, lse: Option<Arg<'py>>) -> PyResult<Bound<'py, PyAny>> {
    let py = out.obj.py();
    match lse {
        Some(l) => Ok(PyTuple::new(py, [out.obj, l.obj])?.into_any()),
        None => Ok(out.obj),
    }
}

/// `kiln.flash_attn_func` whole (inference): q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D] read
/// where they lie (copied only where the kernels cannot address them), out packed
/// [B, Sq, Hq, D] (allocated when not given), the LSE [B, Hq, Sq] f32 with `return_lse` (or
/// written into `lse`); returns out or (out, lse).
#[pyfunction]
#[pyo3(signature = (q, k, v, softmax_scale=None, causal=None, return_lse=false, out=None, window_size=None, deterministic=None, lse=None))]
#[allow(clippy::too_many_arguments)]
pub fn flash_attn<'py>(
    py: Python<'py>,
    q: &Bound<'py, PyAny>,
    k: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    softmax_scale: Option<f64>,
    causal: Option<&Bound<'py, PyAny>>,
    return_lse: bool,
    out: Option<&Bound<'py, PyAny>>,
    window_size: Option<&Bound<'py, PyAny>>,
    deterministic: Option<&Bound<'py, PyAny>>,
    lse: Option<&Bound<'py, PyAny>>,
) -> PyResult<Bound<'py, PyAny>> {
    let causal = flag("causal", causal)?;
    flag("deterministic", deterministic)?; // (the backward's: checked, unused here)
    let window = window_arg(window_size)?;
    let ([q, k, v, out, lse], device) = torch::read_all([
        ("q", Some(q)),
        ("k", Some(k)),
        ("v", Some(v)),
        ("out", out),
        ("lse", lse),
    ])?;
    let (q, k, v) = (
        in_place("q", q.expect("read"))?,
        in_place("k", k.expect("read"))?,
        in_place("v", v.expect("read"))?,
    );
    let shape = q.raw.shape.clone();
    let opts = options(causal, window, softmax_scale, &shape);
    let o = match out {
        Some(o) => o,
        None => output("out", &q, &shape, None)?,
    };
    let lse = match (lse, &shape[..]) {
        (Some(l), _) => Some(l),
        (None, &[b, s, h, _]) if return_lse => {
            Some(output("lse", &q, &[b, h, s], Some(DType::F32))?)
        }
        _ => None,
    };
    let (qr, kr, vr, or) = (&q.raw, &k.raw, &v.raw, &o.raw);
    let lr = lse.as_ref().map(|l| &l.raw);
    let name_out = |e| to_py(renamed(e, "o", "out"));
    let check = || {
        raw::check_attention(device, qr, kr, vr, or, lr, &opts).map_err(|e| renamed(e, "o", "out"))
    };
    let h = handle_or_check(device, check)?;
    let stream = torch::current_stream(py, device)?;
    // SAFETY: the tensors are live torch tensors of `device`, which the caller keeps alive until
    // torch's current stream there (`stream`) has run the launch (torch's own contract for the
    // tensors of an op); `out` and `lse` are checked not to overlap the inputs.
    py.allow_threads(|| unsafe {
        raw::attention(&h, stream_of(stream), qr, kr, vr, or, lr, &opts)
    })
    .map_err(name_out)?;
    returned(o, lse.filter(|_| return_lse))
}

/// `max_seqlen_q` and `max_seqlen_k`, or a ValueError for a negative one.
fn maxima(max_seqlen_q: i64, max_seqlen_k: i64) -> PyResult<(usize, usize)> {
    for (name, m) in [
        ("max_seqlen_q", max_seqlen_q),
        ("max_seqlen_k", max_seqlen_k),
    ] {
        if m < 0 {
            return Err(PyValueError::new_err(format!(
                "`{name}` is {m}; give the longest sequence's length (0 or more)"
            )));
        }
    }
    Ok((max_seqlen_q as usize, max_seqlen_k as usize))
}

/// The offsets' host copies: both or neither.
#[allow(clippy::type_complexity)]
fn host_offsets<'a>(
    host_q: &'a Option<Vec<i32>>,
    host_k: &'a Option<Vec<i32>>,
) -> PyResult<Option<(&'a [i32], &'a [i32])>> {
    match (host_q, host_k) {
        (Some(hq), Some(hk)) => Ok(Some((&hq[..], &hk[..]))),
        (None, None) => Ok(None),
        _ => Err(PyValueError::new_err(
            "give the host copies of both offsets (`host_q` and `host_k`) or neither",
        )),
    }
}

/// `kiln.flash_attn_varlen_func` whole: q [total_q, Hq, D], k and v [total_k, Hkv, D], the
/// offsets i32 [batch + 1] on the GPU and the longest sequences; `host_q`, `host_k` (optional)
/// the offsets' contents, checked before the launch (else the GPU checks them). out like q
/// (allocated), the LSE [Hq, total_q] f32 with `return_lse`; returns out or (out, lse).
#[pyfunction]
#[pyo3(signature = (q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None, causal=None, window_size=None, return_lse=false, host_q=None, host_k=None))]
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen<'py>(
    py: Python<'py>,
    q: &Bound<'py, PyAny>,
    k: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    cu_seqlens_q: &Bound<'py, PyAny>,
    cu_seqlens_k: &Bound<'py, PyAny>,
    max_seqlen_q: i64,
    max_seqlen_k: i64,
    softmax_scale: Option<f64>,
    causal: Option<&Bound<'py, PyAny>>,
    window_size: Option<&Bound<'py, PyAny>>,
    return_lse: bool,
    host_q: Option<Vec<i32>>,
    host_k: Option<Vec<i32>>,
) -> PyResult<Bound<'py, PyAny>> {
    let causal = flag("causal", causal)?;
    let window = window_arg(window_size)?;
    let maxima = maxima(max_seqlen_q, max_seqlen_k)?;
    let host = host_offsets(&host_q, &host_k)?;
    let ([q, k, v, cu_q, cu_k], device) = torch::read_all([
        ("q", Some(q)),
        ("k", Some(k)),
        ("v", Some(v)),
        ("cu_seqlens_q", Some(cu_seqlens_q)),
        ("cu_seqlens_k", Some(cu_seqlens_k)),
    ])?;
    let [q, k, v, cu_q, cu_k] = [q, k, v, cu_q, cu_k].map(|a| a.expect("read"));
    let shape = q.raw.shape.clone();
    let opts = options(causal, window, softmax_scale, &shape);
    let o = output("out", &q, &shape, None)?;
    let lse = match &shape[..] {
        &[total, h, _] if return_lse => Some(output("lse", &q, &[h, total], Some(DType::F32))?),
        _ => None,
    };
    let offsets = VarlenOffsets {
        cu_q: &cu_q.raw,
        cu_k: &cu_k.raw,
        max_seqlen_q: maxima.0,
        max_seqlen_k: maxima.1,
        host,
    };
    let (qr, kr, vr, or) = (&q.raw, &k.raw, &v.raw, &o.raw);
    let lr = lse.as_ref().map(|l| &l.raw);
    let check = || raw::check_attention_varlen(device, qr, kr, vr, or, lr, &offsets, &opts);
    let h = handle_or_check(device, check)?;
    let stream = torch::current_stream(py, device)?;
    // SAFETY: as in `flash_attn`; host copies, when given, are the offsets' contents (the
    // Python layer read them from these tensors).
    py.allow_threads(|| unsafe {
        raw::attention_varlen(&h, stream_of(stream), qr, kr, vr, or, lr, &offsets, &opts)
    })
    .map_err(to_py)?;
    returned(o, lse)
}

/// The packed attention backward whole (`kiln.flash_attn_varlen_backward`): from the packed
/// forward's q [total_q, Hq, D], k and v [total_k, Hkv, D], out and lse [Hq, total_q] f32, the
/// output's gradient dout (q's shape; all packed), the offsets and maxima as the forward took
/// them; dq, dk and dv allocated (q's and k's shapes), checked by kiln, launched on torch's
/// current stream; returns (dq, dk, dv).
#[pyfunction]
#[pyo3(signature = (dout, q, k, v, out, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, softmax_scale=None, causal=None, window_size=None, deterministic=None, host_q=None, host_k=None))]
#[allow(clippy::too_many_arguments)]
pub fn flash_attn_varlen_backward<'py>(
    py: Python<'py>,
    dout: &Bound<'py, PyAny>,
    q: &Bound<'py, PyAny>,
    k: &Bound<'py, PyAny>,
    v: &Bound<'py, PyAny>,
    out: &Bound<'py, PyAny>,
    lse: Option<&Bound<'py, PyAny>>,
    cu_seqlens_q: &Bound<'py, PyAny>,
    cu_seqlens_k: &Bound<'py, PyAny>,
    max_seqlen_q: i64,
    max_seqlen_k: i64,
    softmax_scale: Option<f64>,
    causal: Option<&Bound<'py, PyAny>>,
    window_size: Option<&Bound<'py, PyAny>>,
    deterministic: Option<&Bound<'py, PyAny>>,
    host_q: Option<Vec<i32>>,
    host_k: Option<Vec<i32>>,
) -> PyResult<Bound<'py, PyAny>> {
    let opts = AttentionBackwardOptions {
        causal: flag("causal", causal)?,
        deterministic: flag("deterministic", deterministic)?,
        window: window_arg(window_size)?,
        ..AttentionBackwardOptions::default()
    };
    let maxima = maxima(max_seqlen_q, max_seqlen_k)?;
    let host = host_offsets(&host_q, &host_k)?;
    let ([dout, q, k, v, out, lse, cu_q, cu_k], device) = torch::read_all([
        ("dout", Some(dout)),
        ("q", Some(q)),
        ("k", Some(k)),
        ("v", Some(v)),
        ("out", Some(out)),
        ("lse", lse),
        ("cu_seqlens_q", Some(cu_seqlens_q)),
        ("cu_seqlens_k", Some(cu_seqlens_k)),
    ])?;
    let [dout, q, k, v, out, cu_q, cu_k] =
        [dout, q, k, v, out, cu_q, cu_k].map(|a| a.expect("read"));
    let opts = AttentionBackwardOptions {
        softmax_scale: Some(scale_of(
            softmax_scale,
            q.raw.shape.last().copied().unwrap_or(0),
        )),
        ..opts
    };
    let (q_shape, k_shape) = (q.raw.shape.clone(), k.raw.shape.clone());
    let dq = output("dq", &q, &q_shape, None)?;
    let dk = output("dk", &k, &k_shape, None)?;
    let dv = output("dv", &k, &k_shape, None)?;
    let t = raw::RawBackward {
        q: &q.raw,
        k: &k.raw,
        v: &v.raw,
        o: &out.raw,
        dout: &dout.raw,
        lse: lse.as_ref().map(|l| &l.raw),
        dq: &dq.raw,
        dk: &dk.raw,
        dv: &dv.raw,
    };
    let offsets = VarlenOffsets {
        cu_q: &cu_q.raw,
        cu_k: &cu_k.raw,
        max_seqlen_q: maxima.0,
        max_seqlen_k: maxima.1,
        host,
    };
    let name_out = |e| to_py(renamed(e, "o", "out"));
    let check = || {
        raw::check_attention_varlen_backward(device, &t, &offsets, &opts)
            .map_err(|e| renamed(e, "o", "out"))
    };
    let h = handle_or_check(device, check)?;
    let stream = torch::current_stream(py, device)?;
    // SAFETY: as in `flash_attn_varlen`; dq, dk and dv are new tensors.
    py.allow_threads(|| unsafe {
        raw::attention_varlen_backward(&h, stream_of(stream), &t, &offsets, &opts)
    })
    .map_err(name_out)?;
    Ok(PyTuple::new(py, [dq.obj, dk.obj, dv.obj])?.into_any())
}

/// The attention backward: dq, dk and dv from the forward's q, k, v, out and lse and dout.
#[pyfunction]
#[pyo3(signature = (device, stream, q, k, v, o, lse, dout, dq, dk, dv, softmax_scale, causal, deterministic, window_size=None))]
#[allow(clippy::too_many_arguments)]
pub fn attention_backward(
    py: Python<'_>,
    device: usize,
    stream: usize,
    q: PyTensor,
    k: PyTensor,
    v: PyTensor,
    o: PyTensor,
    lse: Option<PyTensor>,
    dout: PyTensor,
    dq: PyTensor,
    dk: PyTensor,
    dv: PyTensor,
    softmax_scale: f32,
    causal: bool,
    deterministic: bool,
    window_size: Option<&Bound<'_, PyAny>>,
) -> PyResult<()> {
    let window = window_arg(window_size)?;
    let (q, kt, v, o, dout) = (
        tensor("q", q, device)?,
        tensor("k", k, device)?,
        tensor("v", v, device)?,
        tensor("out", o, device)?,
        tensor("dout", dout, device)?,
    );
    let lse = lse.map(|l| tensor("lse", l, device)).transpose()?;
    let (dq, dk, dv) = (
        tensor("dq", dq, device)?,
        tensor("dk", dk, device)?,
        tensor("dv", dv, device)?,
    );
    let t = raw::RawBackward {
        q: &q,
        k: &kt,
        v: &v,
        o: &o,
        dout: &dout,
        lse: lse.as_ref(),
        dq: &dq,
        dk: &dk,
        dv: &dv,
    };
    let opts = AttentionBackwardOptions {
        causal,
        softmax_scale: Some(softmax_scale),
        deterministic,
        window,
        ..AttentionBackwardOptions::default()
    };
    raw::check_attention_backward(device, &t, &opts).map_err(to_py)?;
    let h = handle(device)?;
    // SAFETY: as in `gemm`.
    py.allow_threads(|| unsafe { raw::attention_backward(&h, stream_of(stream), &t, &opts) })
        .map_err(to_py)
}
