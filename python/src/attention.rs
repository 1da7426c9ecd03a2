//! The attention ops of the extension: the forward (dense and packed), its backward, decode over
//! a paged or dense KV cache and the KV append, each checked by kiln before it launches, and the
//! report of bad tables the GPU found.

use kiln::api::{raw, AttentionBackwardOptions, AttentionOptions, PagedOptions, Window};
use pyo3::prelude::*;

use crate::{handle, stream_of, tensor, to_py, PyTensor};

#[pyfunction]
#[pyo3(signature = (device, stream, q, k, v, o, lse, softmax_scale, causal, window=(-1, -1)))]
#[allow(clippy::too_many_arguments)]
pub fn attention(
    py: Python<'_>,
    device: usize,
    stream: usize,
    q: PyTensor,
    k: PyTensor,
    v: PyTensor,
    o: PyTensor,
    lse: Option<PyTensor>,
    softmax_scale: f32,
    causal: bool,
    window: (i64, i64),
) -> PyResult<()> {
    let (q, kt, v, o) = (
        tensor("q", q, device)?,
        tensor("k", k, device)?,
        tensor("v", v, device)?,
        tensor("out", o, device)?,
    );
    let lse = lse.map(|l| tensor("lse", l, device)).transpose()?;
    let opts = AttentionOptions {
        causal,
        softmax_scale: Some(softmax_scale),
        window: Window {
            left: window.0,
            right: window.1,
        },
        ..AttentionOptions::default()
    };
    raw::check_attention(device, &q, &kt, &v, &o, lse.as_ref(), &opts).map_err(to_py)?;
    let h = handle(device)?;
    // SAFETY: as in `gemm`.
    py.allow_threads(|| unsafe {
        raw::attention(&h, stream_of(stream), &q, &kt, &v, &o, lse.as_ref(), &opts)
    })
    .map_err(to_py)
}

/// Decode over a KV cache (`flash_attn_with_kvcache` without the append): paged with a block
/// table, else a dense cache per sequence (with or without lengths).
#[pyfunction]
#[pyo3(signature = (device, stream, q, k_cache, v_cache, block_table, cache_seqlens, o, lse, softmax_scale, causal, check_tables))]
#[allow(clippy::too_many_arguments)]
pub fn attention_paged(
    py: Python<'_>,
    device: usize,
    stream: usize,
    q: PyTensor,
    k_cache: PyTensor,
    v_cache: PyTensor,
    block_table: Option<PyTensor>,
    cache_seqlens: Option<PyTensor>,
    o: PyTensor,
    lse: Option<PyTensor>,
    softmax_scale: f32,
    causal: bool,
    check_tables: bool,
) -> PyResult<()> {
    let (q, kc, vc, o) = (
        tensor("q", q, device)?,
        tensor("k_cache", k_cache, device)?,
        tensor("v_cache", v_cache, device)?,
        tensor("out", o, device)?,
    );
    let bt = block_table
        .map(|t| tensor("block_table", t, device))
        .transpose()?;
    let sl = cache_seqlens
        .map(|t| tensor("cache_seqlens", t, device))
        .transpose()?;
    let lse = lse.map(|l| tensor("lse", l, device)).transpose()?;
    let opts = PagedOptions {
        causal,
        softmax_scale: Some(softmax_scale),
        check_tables,
    };
    let (bt, sl) = (bt.as_ref(), sl.as_ref());
    raw::check_attention_paged(device, &q, &kc, &vc, bt, sl, &o, lse.as_ref(), &opts)
        .map_err(to_py)?;
    let h = handle(device)?;
    // SAFETY: as in `gemm`.
    py.allow_threads(|| unsafe {
        raw::attention_paged(
            &h,
            stream_of(stream),
            &q,
            &kc,
            &vc,
            bt,
            sl,
            &o,
            lse.as_ref(),
            &opts,
        )
    })
    .map_err(to_py)
}

/// Waits for GPU `device`, then raises for bad tables its decode kernels found since the last
/// report (nothing when the handle has not run).
#[pyfunction]
pub fn check_errors(py: Python<'_>, device: usize) -> PyResult<()> {
    let h = handle(device)?;
    py.allow_threads(|| raw::check_errors(&h)).map_err(to_py)
}

/// New K/V tokens written into their pages, or a dense cache's positions without a block table
/// (`flash_attn_with_kvcache`'s `k` and `v`).
#[pyfunction]
#[pyo3(signature = (device, stream, k, v, k_cache, v_cache, block_table, cache_seqlens, check_tables))]
#[allow(clippy::too_many_arguments)]
pub fn kv_append(
    py: Python<'_>,
    device: usize,
    stream: usize,
    k: PyTensor,
    v: PyTensor,
    k_cache: PyTensor,
    v_cache: PyTensor,
    block_table: Option<PyTensor>,
    cache_seqlens: PyTensor,
    check_tables: bool,
) -> PyResult<()> {
    let (k, v, kc, vc, sl) = (
        tensor("k", k, device)?,
        tensor("v", v, device)?,
        tensor("k_cache", k_cache, device)?,
        tensor("v_cache", v_cache, device)?,
        tensor("cache_seqlens", cache_seqlens, device)?,
    );
    let bt = block_table
        .map(|t| tensor("block_table", t, device))
        .transpose()?;
    let bt = bt.as_ref();
    raw::check_kv_append(device, &k, &v, &kc, &vc, bt, &sl).map_err(to_py)?;
    let h = handle(device)?;
    // SAFETY: as in `gemm` (the caches are the outputs).
    py.allow_threads(|| unsafe {
        raw::kv_append(
            &h,
            stream_of(stream),
            &k,
            &v,
            &kc,
            &vc,
            bt,
            &sl,
            check_tables,
        )
    })
    .map_err(to_py)
}

/// The attention backward: dq, dk and dv from the forward's q, k, v, out and lse and dout.
#[pyfunction]
#[pyo3(signature = (device, stream, q, k, v, o, lse, dout, dq, dk, dv, softmax_scale, causal, deterministic))]
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
) -> PyResult<()> {
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
        ..AttentionBackwardOptions::default()
    };
    raw::check_attention_backward(device, &t, &opts).map_err(to_py)?;
    let h = handle(device)?;
    // SAFETY: as in `gemm`.
    py.allow_threads(|| unsafe { raw::attention_backward(&h, stream_of(stream), &t, &opts) })
        .map_err(to_py)
}

/// The packed forward: `cu_q`, `cu_k` are the offsets tensors with their contents (`host_q`,
/// `host_k`), which kiln checks and sizes the grid by.
#[pyfunction]
#[pyo3(signature = (device, stream, q, k, v, o, lse, cu_q, host_q, cu_k, host_k, softmax_scale, causal, window))]
#[allow(clippy::too_many_arguments)]
pub fn attention_varlen(
    py: Python<'_>,
    device: usize,
    stream: usize,
    q: PyTensor,
    k: PyTensor,
    v: PyTensor,
    o: PyTensor,
    lse: Option<PyTensor>,
    cu_q: PyTensor,
    host_q: Vec<i32>,
    cu_k: PyTensor,
    host_k: Vec<i32>,
    softmax_scale: f32,
    causal: bool,
    window: (i64, i64),
) -> PyResult<()> {
    let (q, kt, v, o) = (
        tensor("q", q, device)?,
        tensor("k", k, device)?,
        tensor("v", v, device)?,
        tensor("out", o, device)?,
    );
    let (cq, ck) = (
        tensor("cu_seqlens_q", cu_q, device)?,
        tensor("cu_seqlens_k", cu_k, device)?,
    );
    let lse = lse.map(|l| tensor("lse", l, device)).transpose()?;
    let opts = AttentionOptions {
        causal,
        softmax_scale: Some(softmax_scale),
        window: Window {
            left: window.0,
            right: window.1,
        },
        ..AttentionOptions::default()
    };
    let (oq, ok) = ((&cq, &host_q[..]), (&ck, &host_k[..]));
    raw::check_attention_varlen(device, &q, &kt, &v, &o, lse.as_ref(), oq, ok, &opts)
        .map_err(to_py)?;
    let h = handle(device)?;
    // SAFETY: as in `gemm`; the offsets tensors hold `host_q` and `host_k` (the Python layer
    // copied them from these tensors).
    py.allow_threads(|| unsafe {
        raw::attention_varlen(
            &h,
            stream_of(stream),
            &q,
            &kt,
            &v,
            &o,
            lse.as_ref(),
            oq,
            ok,
            &opts,
        )
    })
    .map_err(to_py)
}
