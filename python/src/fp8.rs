//! The FP8 ops of the extension, with DeepGEMM's shapes: the dense NT GEMM, the grouped GEMM
//! (contiguous or masked) and the casts to e4m3 with 1x128 or 128x128 scales.

use kiln::api::raw;
use pyo3::prelude::*;

use crate::{handle, stream_of, tensor, to_py, PyTensor};

/// The dense FP8 GEMM (DeepGEMM's `gemm_fp8_fp8_bf16_nt`).
#[pyfunction]
#[allow(clippy::too_many_arguments)]
pub fn fp8_gemm_nt(
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
pub fn fp8_grouped_gemm(
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
pub fn fp8_cast(
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
