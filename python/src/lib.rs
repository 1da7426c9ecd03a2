//! The `kiln._kiln` extension module: kiln's ops on (pointer, dtype, shape, strides) tuples that
//! the Python layer reads off torch tensors, one handle per GPU, launched on the caller's stream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use kiln::api::{
    raw, AttentionBackwardOptions, AttentionOptions, DType, GemmOptions, Kiln, MoeRows,
    PagedOptions, Problem, RawTensor, SwigluWeights, Window,
};
use kiln::error::ArgumentKind;
use kiln::Error;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// What Python passes for a tensor: its data pointer, kiln's dtype name, shape and strides.
type PyTensor = (u64, String, Vec<usize>, Vec<isize>);

/// kiln's errors as the Python exceptions a PyTorch user expects: a wrong dtype is a TypeError,
/// any other wrong argument a ValueError, everything else (no GPU, CUDA) a RuntimeError.
fn to_py(e: Error) -> PyErr {
    let msg = e.to_string();
    match e {
        Error::Argument {
            kind: ArgumentKind::DType,
            ..
        } => PyTypeError::new_err(msg),
        Error::Argument { .. } | Error::InvalidInput(_) | Error::Unsupported { .. } => {
            PyValueError::new_err(msg)
        }
        _ => PyRuntimeError::new_err(msg),
    }
}

fn dtype(arg: &str, name: &str) -> PyResult<DType> {
    match name {
        "bf16" => Ok(DType::Bf16),
        "f16" => Ok(DType::F16),
        "f32" => Ok(DType::F32),
        "i32" => Ok(DType::I32),
        "e4m3" => Ok(DType::E4m3),
        other => Err(PyTypeError::new_err(format!(
            "`{arg}` is {other}; kiln's views are bf16, f16, f32, i32 or e4m3"
        ))),
    }
}

fn tensor(arg: &str, t: PyTensor, device: usize) -> PyResult<RawTensor> {
    let (ptr, dt, shape, strides) = t;
    Ok(RawTensor {
        ptr,
        dtype: dtype(arg, &dt)?,
        shape,
        strides,
        device,
    })
}

/// The handle of GPU `device`, opened on first use and kept for the process: the Python
/// package's one piece of process state, as torch keeps one cuBLAS handle per device.
fn handle(device: usize) -> PyResult<Arc<Kiln>> {
    static HANDLES: OnceLock<Mutex<HashMap<usize, Arc<Kiln>>>> = OnceLock::new();
    let mut map = HANDLES.get_or_init(Default::default).lock().map_err(|_| {
        PyRuntimeError::new_err("kiln's handle table is poisoned by an earlier panic")
    })?;
    if let Some(k) = map.get(&device) {
        return Ok(k.clone());
    }
    let k = Arc::new(Kiln::open(device).map_err(to_py)?);
    map.insert(device, k.clone());
    Ok(k)
}

fn stream_of(stream: usize) -> cudarc::driver::sys::CUstream {
    stream as cudarc::driver::sys::CUstream
}

/// Whether a GPU kiln can run on is present (driver loaded, at least one device).
#[pyfunction]
fn gpu_available() -> bool {
    kiln::device::init().is_ok()
}

#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn gemm(
    py: Python<'_>,
    device: usize,
    stream: usize,
    a: PyTensor,
    b: PyTensor,
    c: PyTensor,
    alpha: f32,
    beta: f32,
) -> PyResult<()> {
    let (a, b, c) = (
        tensor("a", a, device)?,
        tensor("b", b, device)?,
        tensor("out", c, device)?,
    );
    let opts = GemmOptions {
        alpha,
        beta,
        version: None,
    };
    raw::check_gemm(device, &a, &b, &c, &opts).map_err(to_py)?;
    let k = handle(device)?;
    // SAFETY: the Python layer passes live torch tensors of `device` that it keeps alive until
    // torch's stream (`stream`, that device's current stream) has run the launch.
    py.allow_threads(|| unsafe { raw::gemm(&k, stream_of(stream), &a, &b, &c, &opts) })
        .map_err(to_py)
}

#[pyfunction]
#[pyo3(signature = (device, stream, q, k, v, o, lse, softmax_scale, causal, window=(-1, -1)))]
#[allow(clippy::too_many_arguments)]
fn attention(
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

/// Decode over a paged KV cache (`flash_attn_with_kvcache` without the append).
#[pyfunction]
#[pyo3(signature = (device, stream, q, k_cache, v_cache, block_table, cache_seqlens, o, lse, softmax_scale, causal, check_tables))]
#[allow(clippy::too_many_arguments)]
fn attention_paged(
    py: Python<'_>,
    device: usize,
    stream: usize,
    q: PyTensor,
    k_cache: PyTensor,
    v_cache: PyTensor,
    block_table: PyTensor,
    cache_seqlens: PyTensor,
    o: PyTensor,
    lse: Option<PyTensor>,
    softmax_scale: f32,
    causal: bool,
    check_tables: bool,
) -> PyResult<()> {
    let (q, kc, vc, bt, sl, o) = (
        tensor("q", q, device)?,
        tensor("k_cache", k_cache, device)?,
        tensor("v_cache", v_cache, device)?,
        tensor("block_table", block_table, device)?,
        tensor("cache_seqlens", cache_seqlens, device)?,
        tensor("out", o, device)?,
    );
    let lse = lse.map(|l| tensor("lse", l, device)).transpose()?;
    let opts = PagedOptions {
        causal,
        softmax_scale: Some(softmax_scale),
        check_tables,
    };
    raw::check_attention_paged(device, &q, &kc, &vc, &bt, &sl, &o, lse.as_ref(), &opts)
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
            &bt,
            &sl,
            &o,
            lse.as_ref(),
            &opts,
        )
    })
    .map_err(to_py)
}

/// New K/V tokens written into their pages (`flash_attn_with_kvcache`'s `k` and `v`).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn kv_append(
    py: Python<'_>,
    device: usize,
    stream: usize,
    k: PyTensor,
    v: PyTensor,
    k_cache: PyTensor,
    v_cache: PyTensor,
    block_table: PyTensor,
    cache_seqlens: PyTensor,
    check_tables: bool,
) -> PyResult<()> {
    let (k, v, kc, vc, bt, sl) = (
        tensor("k", k, device)?,
        tensor("v", v, device)?,
        tensor("k_cache", k_cache, device)?,
        tensor("v_cache", v_cache, device)?,
        tensor("block_table", block_table, device)?,
        tensor("cache_seqlens", cache_seqlens, device)?,
    );
    raw::check_kv_append(device, &k, &v, &kc, &vc, &bt, &sl).map_err(to_py)?;
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
            &bt,
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
fn attention_backward(
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
fn attention_varlen(
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

#[pyfunction]
fn grouped_gemm(
    py: Python<'_>,
    device: usize,
    stream: usize,
    x: PyTensor,
    w: PyTensor,
    offsets: PyTensor,
    y: PyTensor,
) -> PyResult<()> {
    let (x, w, y) = (
        tensor("x", x, device)?,
        tensor("w", w, device)?,
        tensor("y", y, device)?,
    );
    let rows = MoeRows::Offsets {
        offsets: tensor("offsets", offsets, device)?,
        host: None,
    };
    raw::check_grouped_gemm(device, &x, &w, &rows, &y).map_err(to_py)?;
    let k = handle(device)?;
    // SAFETY: as in `gemm`.
    py.allow_threads(|| unsafe { raw::grouped_gemm(&k, stream_of(stream), &x, &w, &rows, &y) })
        .map_err(to_py)
}

#[pyfunction]
#[pyo3(signature = (device, stream, x, w1, w3, offsets, routing, h))]
#[allow(clippy::too_many_arguments)]
fn swiglu(
    py: Python<'_>,
    device: usize,
    stream: usize,
    x: PyTensor,
    w1: PyTensor,
    w3: Option<PyTensor>,
    offsets: PyTensor,
    routing: Option<PyTensor>,
    h: PyTensor,
) -> PyResult<()> {
    let x = tensor("x", x, device)?;
    let w = match w3 {
        None => SwigluWeights::Interleaved(tensor("w13", w1, device)?),
        Some(w3) => SwigluWeights::Separate {
            w1: tensor("w1", w1, device)?,
            w3: tensor("w3", w3, device)?,
        },
    };
    let rows = MoeRows::Offsets {
        offsets: tensor("offsets", offsets, device)?,
        host: None,
    };
    let routing = routing
        .map(|r| tensor("routing_weights", r, device))
        .transpose()?;
    let h = tensor("h", h, device)?;
    raw::check_swiglu(device, &x, &w, &rows, routing.as_ref(), &h).map_err(to_py)?;
    let k = handle(device)?;
    // SAFETY: as in `gemm`.
    py.allow_threads(|| unsafe {
        raw::swiglu(&k, stream_of(stream), &x, &w, &rows, routing.as_ref(), &h)
    })
    .map_err(to_py)
}

fn get<'py, T: FromPyObject<'py>>(
    d: &Bound<'py, PyDict>,
    key: &str,
    default: Option<T>,
) -> PyResult<T> {
    match d.get_item(key)? {
        Some(v) => v.extract(),
        None => default.ok_or_else(|| {
            PyValueError::new_err(format!("a precompile problem needs the key `{key}`"))
        }),
    }
}

/// One problem dict as the op's argument descriptions: {"op": "gemm", "m", "n", "k", "dtype",
/// "out_dtype", "a_transposed", "b_transposed"} or {"op": "attention", "batch", "seqlen_q",
/// "seqlen_k", "heads", "kv_heads", "head_dim", "dtype", "causal"}.
fn problem(d: &Bound<'_, PyDict>) -> PyResult<Problem<'static>> {
    let op: String = get(d, "op", None)?;
    let dt = dtype("dtype", &get::<String>(d, "dtype", Some("bf16".into()))?)?;
    match op.as_str() {
        "gemm" => {
            let (m, n, k): (usize, usize, usize) =
                (get(d, "m", None)?, get(d, "n", None)?, get(d, "k", None)?);
            let out = dtype(
                "out_dtype",
                &get::<String>(d, "out_dtype", Some(dt.name().into()))?,
            )?;
            let a = if get(d, "a_transposed", Some(false))? {
                [1, m as isize]
            } else {
                [k as isize, 1]
            };
            let b = if get(d, "b_transposed", Some(false))? {
                [1, k as isize]
            } else {
                [n as isize, 1]
            };
            Ok(Problem::Gemm {
                a: RawTensor::describe(dt, &[m, k], &a),
                b: RawTensor::describe(dt, &[k, n], &b),
                c: RawTensor::describe(out, &[m, n], &[n as isize, 1]),
                opts: GemmOptions::default(),
            })
        }
        "attention" => {
            let b: usize = get(d, "batch", Some(1))?;
            let (sq, hq, hd): (usize, usize, usize) = (
                get(d, "seqlen_q", None)?,
                get(d, "heads", None)?,
                get(d, "head_dim", None)?,
            );
            let sk: usize = get(d, "seqlen_k", Some(sq))?;
            let hk: usize = get(d, "kv_heads", Some(hq))?;
            let bshd = |s: usize, h: usize| {
                RawTensor::describe(
                    dt,
                    &[b, s, h, hd],
                    &[(s * h * hd) as isize, (h * hd) as isize, hd as isize, 1],
                )
            };
            Ok(Problem::Attention {
                q: bshd(sq, hq),
                k: bshd(sk, hk),
                v: bshd(sk, hk),
                o: bshd(sq, hq),
                lse: Some(RawTensor::describe(
                    DType::F32,
                    &[b, hq, sq],
                    &[(hq * sq) as isize, sq as isize, 1],
                )),
                opts: AttentionOptions {
                    causal: get(d, "causal", Some(false))?,
                    ..AttentionOptions::default()
                },
            })
        }
        other => Err(PyValueError::new_err(format!(
            "a precompile problem's `op` is {other:?}; use \"gemm\" or \"attention\""
        ))),
    }
}

/// Compiles and loads what `problems` need on GPU `device`; returns the kernels newly loaded.
#[pyfunction]
fn precompile(py: Python<'_>, device: usize, problems: Vec<Bound<'_, PyDict>>) -> PyResult<usize> {
    let problems = problems.iter().map(problem).collect::<PyResult<Vec<_>>>()?;
    let k = handle(device)?;
    py.allow_threads(|| k.precompile(&problems)).map_err(to_py)
}

/// The dense FP8 GEMM (DeepGEMM's `gemm_fp8_fp8_bf16_nt`).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn fp8_gemm_nt(
    py: Python<'_>,
    device: usize,
    stream: usize,
    a: PyTensor,
    sa: PyTensor,
    b: PyTensor,
    sb: PyTensor,
    out: PyTensor,
) -> PyResult<()> {
    let (a, sa, b, sb, out) = (
        tensor("a", a, device)?,
        tensor("sa", sa, device)?,
        tensor("b", b, device)?,
        tensor("sb", sb, device)?,
        tensor("out", out, device)?,
    );
    raw::check_fp8_gemm_nt(device, &a, &sa, &b, &sb, &out).map_err(to_py)?;
    let k = handle(device)?;
    // SAFETY: as in `gemm`.
    py.allow_threads(|| unsafe { raw::fp8_gemm_nt(&k, stream_of(stream), &a, &sa, &b, &sb, &out) })
        .map_err(to_py)
}

/// The FP8 grouped GEMM over offsets (contiguous) or counts (masked).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn fp8_grouped_gemm(
    py: Python<'_>,
    device: usize,
    stream: usize,
    x: PyTensor,
    sx: PyTensor,
    w: PyTensor,
    sw: PyTensor,
    rows: PyTensor,
    out: PyTensor,
    masked: bool,
) -> PyResult<()> {
    let (x, sx, w, sw, rows, out) = (
        tensor("x", x, device)?,
        tensor("sx", sx, device)?,
        tensor("w", w, device)?,
        tensor("sw", sw, device)?,
        tensor(if masked { "masked_m" } else { "offsets" }, rows, device)?,
        tensor("out", out, device)?,
    );
    raw::check_fp8_grouped_gemm(device, &x, &sx, &w, &sw, &rows, &out, masked).map_err(to_py)?;
    let k = handle(device)?;
    // SAFETY: as in `gemm`.
    py.allow_threads(|| unsafe {
        raw::fp8_grouped_gemm(&k, stream_of(stream), &x, &sx, &w, &sw, &rows, &out, masked)
    })
    .map_err(to_py)
}

/// The casts to e4m3: 1x128 (per token) or 128x128 (per block) scales.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn fp8_cast(
    py: Python<'_>,
    device: usize,
    stream: usize,
    x: PyTensor,
    codes: PyTensor,
    scales: PyTensor,
    per_block: bool,
) -> PyResult<()> {
    let (x, codes, scales) = (
        tensor("x", x, device)?,
        tensor("codes", codes, device)?,
        tensor("scales", scales, device)?,
    );
    raw::check_fp8_cast(device, &x, &codes, &scales, per_block).map_err(to_py)?;
    let k = handle(device)?;
    // SAFETY: as in `gemm`.
    py.allow_threads(|| unsafe {
        raw::fp8_cast(&k, stream_of(stream), &x, &codes, &scales, per_block)
    })
    .map_err(to_py)
}

/// A contiguous uint8 tensor as Python passes it: (data pointer, bytes).
type PyBytes = (u64, usize);

fn fp4_format(name: &str) -> PyResult<kiln::ops::fp4::Fp4Format> {
    name.parse().map_err(to_py)
}

fn raw_bytes(b: PyBytes, device: usize) -> raw::RawBytes {
    raw::RawBytes {
        ptr: b.0,
        len: b.1,
        device,
    }
}

/// Packed codes, scale codes and the tensor scale of a [rows, K] matrix in `format`.
#[allow(clippy::too_many_arguments)]
fn raw_fp4(
    format: &str,
    rows: usize,
    k: usize,
    codes: PyBytes,
    scales: PyBytes,
    tensor_scale: f32,
    device: usize,
) -> PyResult<raw::RawFp4> {
    Ok(raw::RawFp4 {
        format: fp4_format(format)?,
        rows,
        k,
        codes: raw_bytes(codes, device),
        scales: raw_bytes(scales, device),
        tensor_scale,
    })
}

/// Quantises `x` [rows, K] to NVFP4 or MXFP4 into `codes` and `scales`; returns the tensor
/// scale. Waits for the stream (a NaN or infinite element is refused with its position).
#[pyfunction]
#[pyo3(signature = (device, stream, x, format, tensor_scale, codes, scales))]
#[allow(clippy::too_many_arguments)]
fn fp4_quantize(
    py: Python<'_>,
    device: usize,
    stream: usize,
    x: PyTensor,
    format: &str,
    tensor_scale: Option<f32>,
    codes: PyBytes,
    scales: PyBytes,
) -> PyResult<f32> {
    let x = tensor("x", x, device)?;
    let format = fp4_format(format)?;
    let (codes, scales) = (raw_bytes(codes, device), raw_bytes(scales, device));
    raw::check_fp4_quantize(device, &x, format, tensor_scale, &codes, &scales).map_err(to_py)?;
    let k = handle(device)?;
    // SAFETY: as in `gemm`; the call waits for the stream before returning.
    py.allow_threads(|| unsafe {
        raw::fp4_quantize(
            &k,
            stream_of(stream),
            &x,
            format,
            tensor_scale,
            &codes,
            &scales,
        )
    })
    .map_err(to_py)
}

/// Dequantises a packed [rows, K] matrix into `out` (bf16, f16 or f32). Waits for the stream.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn fp4_dequantize(
    py: Python<'_>,
    device: usize,
    stream: usize,
    format: &str,
    rows: usize,
    k: usize,
    codes: PyBytes,
    scales: PyBytes,
    tensor_scale: f32,
    out: PyTensor,
) -> PyResult<()> {
    let w = raw_fp4(format, rows, k, codes, scales, tensor_scale, device)?;
    let out = tensor("out", out, device)?;
    raw::check_fp4_dequantize(device, &w, &out).map_err(to_py)?;
    let k = handle(device)?;
    // SAFETY: as in `gemm`.
    py.allow_threads(|| unsafe { raw::fp4_dequantize(&k, stream_of(stream), &w, &out) })
        .map_err(to_py)
}

/// out [M, N] = g * x [M, K] . w^T: bf16 x (M 1..16), NVFP4 w [N, K], bf16 or f16 out.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn nvfp4_gemv(
    py: Python<'_>,
    device: usize,
    stream: usize,
    x: PyTensor,
    n: usize,
    k: usize,
    codes: PyBytes,
    scales: PyBytes,
    tensor_scale: f32,
    out: PyTensor,
) -> PyResult<()> {
    let x = tensor("x", x, device)?;
    let w = raw_fp4("nvfp4", n, k, codes, scales, tensor_scale, device)?;
    let out = tensor("out", out, device)?;
    raw::check_nvfp4_gemv(device, &x, &w, &out).map_err(to_py)?;
    let kh = handle(device)?;
    // SAFETY: as in `gemm`.
    py.allow_threads(|| unsafe { raw::nvfp4_gemv(&kh, stream_of(stream), &x, &w, &out) })
        .map_err(to_py)
}

#[pymodule]
fn _kiln(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_function(wrap_pyfunction!(gpu_available, m)?)?;
    m.add_function(wrap_pyfunction!(gemm, m)?)?;
    m.add_function(wrap_pyfunction!(attention, m)?)?;
    m.add_function(wrap_pyfunction!(attention_paged, m)?)?;
    m.add_function(wrap_pyfunction!(kv_append, m)?)?;
    m.add_function(wrap_pyfunction!(attention_backward, m)?)?;
    m.add_function(wrap_pyfunction!(attention_varlen, m)?)?;
    m.add_function(wrap_pyfunction!(grouped_gemm, m)?)?;
    m.add_function(wrap_pyfunction!(swiglu, m)?)?;
    m.add_function(wrap_pyfunction!(fp8_gemm_nt, m)?)?;
    m.add_function(wrap_pyfunction!(fp8_grouped_gemm, m)?)?;
    m.add_function(wrap_pyfunction!(fp8_cast, m)?)?;
    m.add_function(wrap_pyfunction!(precompile, m)?)?;
    m.add_function(wrap_pyfunction!(fp4_quantize, m)?)?;
    m.add_function(wrap_pyfunction!(fp4_dequantize, m)?)?;
    m.add_function(wrap_pyfunction!(nvfp4_gemv, m)?)?;
    Ok(())
}
