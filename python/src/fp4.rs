//! The 4-bit ops of the extension: NVFP4/MXFP4 quantise and dequantise, and the NVFP4 GEMV, on
//! packed uint8 codes and scale codes as Python passes them.

use kiln::api::raw;
use pyo3::prelude::*;

use crate::{handle, stream_of, tensor, to_py, PyTensor};

/// A contiguous uint8 tensor as Python passes it: (data pointer, bytes).
type PyBytes = (u64, usize);

pub fn fp4_format(name: &str) -> PyResult<kiln::ops::fp4::Fp4Format> {
    name.parse().map_err(to_py)
}

pub fn raw_bytes(b: PyBytes, device: usize) -> raw::RawBytes {
    raw::RawBytes {
        ptr: b.0,
        len: b.1,
        device,
    }
}

/// Packed codes, scale codes and the tensor scale of a [rows, K] matrix in `format`.
#[allow(clippy::too_many_arguments)]
pub fn raw_fp4(
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
pub fn fp4_quantize(
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
pub fn fp4_dequantize(
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

/// Writes the codes and scales of an NVFP4 [rows, K] matrix (K a multiple of 128) into `dst` and
/// `dst_scales` in the GEMV layout (buffers of their own: the layout moves bytes between rows);
/// enqueued, not waited for.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn nvfp4_gemv_layout(
    py: Python<'_>,
    device: usize,
    stream: usize,
    rows: usize,
    k: usize,
    codes: PyBytes,
    scales: PyBytes,
    dst: PyBytes,
    dst_scales: PyBytes,
) -> PyResult<()> {
    let w = raw_fp4("nvfp4", rows, k, codes, scales, 1.0, device)?;
    let (dst, dst_scales) = (raw_bytes(dst, device), raw_bytes(dst_scales, device));
    raw::check_nvfp4_gemv_layout(device, &w, &dst, &dst_scales).map_err(to_py)?;
    let kh = handle(device)?;
    // SAFETY: as in `gemm`.
    py.allow_threads(|| unsafe {
        raw::nvfp4_gemv_layout(&kh, stream_of(stream), &w, &dst, &dst_scales)
    })
    .map_err(to_py)
}

/// out [M, N] = g * x [M, K] . w^T: bf16 x (M 1..16), NVFP4 w [N, K], bf16 or f16 out;
/// `gemv_layout`: w's codes are in the GEMV layout (`nvfp4_gemv_layout`).
#[pyfunction]
#[pyo3(signature = (device, stream, x, n, k, codes, scales, tensor_scale, out, gemv_layout=false))]
#[allow(clippy::too_many_arguments)]
pub fn nvfp4_gemv(
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
    gemv_layout: bool,
) -> PyResult<()> {
    let x = tensor("x", x, device)?;
    let w = raw_fp4("nvfp4", n, k, codes, scales, tensor_scale, device)?;
    let out = tensor("out", out, device)?;
    raw::check_nvfp4_gemv(device, &x, &w, &out).map_err(to_py)?;
    let kh = handle(device)?;
    // SAFETY: as in `gemm`.
    py.allow_threads(|| unsafe {
        raw::nvfp4_gemv(&kh, stream_of(stream), &x, &w, &out, gemv_layout)
    })
    .map_err(to_py)
}
