//! The mixture-of-experts ops of the extension: the grouped GEMM and the fused SwiGLU over
//! experts, rows given by offsets (contiguous) or counts (masked).

use kiln::api::{raw, MoeRows, SwigluWeights};
use pyo3::prelude::*;

use crate::{handle, stream_of, tensor, to_py, PyTensor};

#[pyfunction]
pub fn grouped_gemm(
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
pub fn swiglu(
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
