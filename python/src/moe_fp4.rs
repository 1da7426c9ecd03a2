//! The 4-bit experts of the extension: quantise and prepack transformers' expert tensors on the
//! host (`kiln.moe.quantize_experts`), and the 4-bit grouped GEMM or fused SwiGLU over
//! expert-sorted rows on weights Python holds as uint8 and f32 device tensors.

use kiln::api::{raw, MoeRows};
use kiln::ops::moe::fp4::kernel::Fp4Layout;
use kiln::ops::moe::fp4::Fp4Format;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes as PyByteString;

use crate::fp4::raw_bytes;
use crate::moe::{routing, PyRouting};
use crate::{handle, stream_of, tensor, to_py, PyTensor};

/// A contiguous tensor as Python passes it: (data pointer, bytes).
type PyBytes = (u64, usize);

fn format_of(name: &str) -> PyResult<Fp4Format> {
    match name {
        "nvfp4" => Ok(Fp4Format::Nvfp4),
        "mxfp4" => Ok(Fp4Format::Mxfp4),
        _ => Err(PyValueError::new_err(format!(
            "the 4-bit format is {name:?}; kiln knows 'nvfp4' and 'mxfp4'"
        ))),
    }
}

/// Quantises and prepacks `values` (a contiguous f32 tensor on the host, as (pointer, elements)):
/// with `swiglu` transformers' gate_up_proj [E, 2n, k], else a projection [E, n, k]. Returns
/// (prepacked bytes, f32 factors, smallest scale byte).
#[pyfunction]
pub fn fp4_prepack_experts<'py>(
    py: Python<'py>,
    values: (u64, usize),
    format: &str,
    experts: usize,
    n: usize,
    k: usize,
    swiglu: bool,
) -> PyResult<(Bound<'py, PyByteString>, Vec<f32>, u8)> {
    let format = format_of(format)?;
    let (ptr, len) = values;
    if ptr == 0 || ptr % 4 != 0 {
        return Err(PyValueError::new_err(
            "the weights to quantise must be a contiguous float32 tensor on the CPU",
        ));
    }
    let p = py
        .allow_threads(|| {
            // SAFETY: Python passes the data pointer and element count of a contiguous f32 CPU
            // tensor it keeps alive for this call (kiln.moe.quantize_experts).
            let v = unsafe { std::slice::from_raw_parts(ptr as *const f32, len) };
            raw::fp4_prepack_experts(v, format, experts, n, k, swiglu)
        })
        .map_err(to_py)?;
    Ok((PyByteString::new(py, &p.bytes), p.escale, p.min_scale_byte))
}

/// A `Fp4Experts` as Python passes it: (prepacked bytes, factors, format, experts, n, k, swiglu,
/// smallest scale byte).
type PyFp4Experts = (PyBytes, PyBytes, String, usize, usize, usize, bool, u8);

fn experts_of(device: usize, w: PyFp4Experts) -> PyResult<raw::RawFp4Experts> {
    let (bytes, escale, format, experts, n, k, swiglu, min_scale_byte) = w;
    Ok(raw::RawFp4Experts {
        layout: Fp4Layout {
            format: format_of(&format)?,
            experts,
            n,
            k,
            swiglu,
            min_scale_byte,
        },
        bytes: raw_bytes(bytes, device),
        escale: raw_bytes(escale, device),
    })
}

/// The whole MoE layer on 4-bit experts into `out` (kiln's routing, the sorted copy of x's
/// rows, the 4-bit SwiGLU and down projection, each token's rows summed in pair order), on
/// torch's stream `stream`.
#[pyfunction]
#[pyo3(signature = (device, stream, x, w13, w2, route, out))]
#[allow(clippy::too_many_arguments)]
pub fn fp4_moe_layer(
    py: Python<'_>,
    device: usize,
    stream: usize,
    x: PyTensor,
    w13: PyFp4Experts,
    w2: PyFp4Experts,
    route: PyRouting,
    out: PyTensor,
) -> PyResult<()> {
    let x = tensor("x", x, device)?;
    let (w13, w2) = (experts_of(device, w13)?, experts_of(device, w2)?);
    let r = routing(device, route)?;
    let out = tensor("out", out, device)?;
    raw::check_fp4_moe_layer(device, &x, &w13, &w2, &r, &out).map_err(to_py)?;
    let kh = handle(device)?;
    // SAFETY: as in `gemm`; the weights are the uint8 and f32 tensors of two Fp4Experts that
    // Python holds for the call.
    py.allow_threads(|| unsafe {
        raw::fp4_moe_layer(&kh, stream_of(stream), &x, &w13, &w2, &r, &out)
    })
    .map_err(to_py)
}

/// y = the 4-bit grouped GEMM (or, with `swiglu`, the fused SwiGLU times the optional routing
/// weights) of `x`'s expert-sorted rows, rows by `offsets` [E + 1], on torch's stream `stream`.
#[pyfunction]
#[pyo3(signature = (device, stream, x, w, escale, format, experts, n, k, swiglu, min_scale_byte, offsets, routing, y))]
#[allow(clippy::too_many_arguments)]
pub fn fp4_experts(
    py: Python<'_>,
    device: usize,
    stream: usize,
    x: PyTensor,
    w: PyBytes,
    escale: PyBytes,
    format: &str,
    experts: usize,
    n: usize,
    k: usize,
    swiglu: bool,
    min_scale_byte: u8,
    offsets: PyTensor,
    routing: Option<PyTensor>,
    y: PyTensor,
) -> PyResult<()> {
    let x = tensor("x", x, device)?;
    let weights = experts_of(
        device,
        (
            w,
            escale,
            format.to_string(),
            experts,
            n,
            k,
            swiglu,
            min_scale_byte,
        ),
    )?;
    let rows = MoeRows::Offsets {
        offsets: tensor("offsets", offsets, device)?,
        host: None,
    };
    let routing = routing
        .map(|r| tensor("routing_weights", r, device))
        .transpose()?;
    let y = tensor("y", y, device)?;
    raw::check_fp4_experts(device, &x, &weights, &rows, routing.as_ref(), &y).map_err(to_py)?;
    let kh = handle(device)?;
    // SAFETY: as in `gemm`; the weights are the uint8 and f32 tensors of a Fp4Experts that
    // Python holds for the call.
    py.allow_threads(|| unsafe {
        raw::fp4_experts(
            &kh,
            stream_of(stream),
            &x,
            &weights,
            &rows,
            routing.as_ref(),
            &y,
        )
    })
    .map_err(to_py)
}
