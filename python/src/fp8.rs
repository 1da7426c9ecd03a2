//! The FP8 ops of the extension, with DeepGEMM's shapes: the dense NT GEMM, the grouped GEMM
//! (contiguous or masked), the casts to e4m3 with 1x128 or 128x128 scales, and the MoE layer on
//! FP8 experts.

use kiln::api::raw;
use pyo3::prelude::*;

use crate::moe::{routing, PyRouting};
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

/// One FP8 projection as Python passes it: (codes [E, N, K] e4m3, scales [E, N/128, K/128] f32).
type PyFp8Experts = (PyTensor, PyTensor);

/// The whole MoE layer on FP8 experts into `out` (kiln's routing, x's sorted rows cast to e4m3,
/// the FP8 SwiGLU and down projection, each token's rows summed in pair order), on torch's
/// stream `stream`; `w1`, `w3`, `w2` are gate, up and down.
#[pyfunction]
#[pyo3(signature = (device, stream, x, w1, w3, w2, route, out))]
#[allow(clippy::too_many_arguments)]
pub fn fp8_moe_layer(
    py: Python<'_>,
    device: usize,
    stream: usize,
    x: PyTensor,
    w1: PyFp8Experts,
    w3: PyFp8Experts,
    w2: PyFp8Experts,
    route: PyRouting,
    out: PyTensor,
) -> PyResult<()> {
    let x = tensor("x", x, device)?;
    let fp8 = |name: &str, (codes, scales): PyFp8Experts| -> PyResult<raw::RawFp8Experts> {
        Ok(raw::RawFp8Experts {
            codes: tensor(name, codes, device)?,
            scales: tensor(&format!("{name}_scale"), scales, device)?,
        })
    };
    let (g, u, d) = (fp8("w1", w1)?, fp8("w3", w3)?, fp8("w2", w2)?);
    let w = raw::Fp8LayerWeights {
        gate: &g,
        up: &u,
        down: &d,
    };
    let r = routing(device, route)?;
    let out = tensor("out", out, device)?;
    raw::check_fp8_moe_layer(device, &x, &w, &r, &out).map_err(to_py)?;
    let kh = handle(device)?;
    // SAFETY: as in `gemm`; the weights are e4m3 and f32 tensors Python holds for the call.
    py.allow_threads(|| unsafe { raw::fp8_moe_layer(&kh, stream_of(stream), &x, &w, &r, &out) })
        .map_err(to_py)
}
