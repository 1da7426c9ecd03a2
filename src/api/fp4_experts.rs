//! The MoE ops with 4-bit expert weights on cudarc buffers: weights prepacked on the host
//! ([`crate::ops::moe::fp4::prepack`]) and uploaded once, then the grouped GEMM or fused SwiGLU.

use std::sync::Arc;

use cudarc::driver::sys::CUstream;
use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, SyncOnDrop};

use super::handle::Kiln;
use super::info::{contiguous_strides, TensorInfo};
use super::options::{MoeRows, SwigluWeights};
use super::tensor::{TensorMut, TensorRef};
use super::validate::{self, MoePlan, Operand};
use crate::device::DeviceBuffer;
use crate::error::{Error, Result};
use crate::ops::moe::fp4::kernel::{Fp4Layout, Fp4Tile};
use crate::ops::moe::fp4::{Fp4Experts, Fp4Operands, Fp4Prepacked};
use crate::ops::moe::schedule;

/// Prepacked 4-bit expert weights on one GPU: a grouped GEMM's W, or a SwiGLU's W1 and W3.
pub struct Fp4ExpertWeights {
    layout: Fp4Layout,
    bytes: CudaSlice<u8>,
    escale: CudaSlice<f32>,
}

impl Fp4ExpertWeights {
    /// Format, experts, N, K and whether they are a SwiGLU pair.
    pub fn layout(&self) -> Fp4Layout {
        self.layout
    }
}

impl Kiln {
    /// Uploads prepacked weights on `stream` (asynchronously: the host copy may be dropped, the
    /// stream orders the copy before any op that uses the weights on it).
    pub fn upload_fp4(
        &self,
        stream: &Arc<CudaStream>,
        w: &Fp4Prepacked,
    ) -> Result<Fp4ExpertWeights> {
        self.check_stream(stream)?;
        let whole = w.bytes.len() == w.experts * w.expert_bytes()
            && w.escale.len() == w.experts * w.halves();
        let (bytes, escale) = upload_prepacked(
            stream,
            (&w.bytes, &w.escale),
            whole,
            "prepack or prepack_swiglu",
        )?;
        Ok(Fp4ExpertWeights {
            layout: w.layout(),
            bytes,
            escale,
        })
    }

    /// The MoE op of the weights' kind with 4-bit weights: y[rows of e] = x[rows of e] @ W[e]ᵀ,
    /// or for SwiGLU weights h = silu(x W1ᵀ) * (x W3ᵀ), times the row's f32 routing weight when
    /// `routing` is given. x, y and rows as [`Kiln::grouped_gemm`] (offsets or counts, read on
    /// the GPU); y has x's dtype (bf16 or f16).
    pub fn fp4_experts(
        &self,
        stream: &CudaStream,
        x: &TensorRef,
        w: &Fp4ExpertWeights,
        rows: MoeRows<'_>,
        routing: Option<&TensorRef>,
        y: &mut TensorMut,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let plan = fp4_plan(
            self.ordinal(),
            &x.info,
            &w.layout,
            &rows.map(|t| t.info),
            routing.map(|t| t.info).as_ref(),
            &y.info,
        )?;
        let Some(plan) = plan else {
            return Ok(());
        };
        let (weights, _w_order) = prepacked_operands((&w.bytes, &w.escale), stream);
        let _order = (
            x.track(stream),
            rows.tensor().track(stream),
            routing.and_then(|t| t.track(stream)),
            y.track(stream),
        );
        self.launch_fp4(Some(stream.cu_stream()), &plan, &w.layout, weights)
    }

    /// Enqueues a checked 4-bit plan on `stream` with the prepacked bytes and factors `w`.
    pub(super) fn launch_fp4(
        &self,
        stream: Option<CUstream>,
        plan: &MoePlan,
        l: &Fp4Layout,
        w: (Operand, Operand),
    ) -> Result<()> {
        let p = &plan.problem;
        // (the tile, chosen from the problem's rows, picks the kernel: part of what has run)
        let key = (plan.key(()), *l, Fp4Tile::choose(p).tt);
        self.run_graphed(
            stream,
            key,
            (plan.addresses(), w),
            || p.label(),
            |ctx, ws, capturing| {
                let sched_bytes = schedule::sched_bytes(p.experts);
                let sched = ws.moe_sched.at_least(ctx, sched_bytes, capturing)?;
                let op = |o: Operand| {
                    // SAFETY: every operand is memory the caller's views (and the weights) hold for
                    // the duration of this call, ordered on `stream`; the borrowed buffers only
                    // carry pointers and sizes and never free them.
                    unsafe { DeviceBuffer::borrowed(o.ptr, o.bytes) }
                };
                let (xb, yb, rb) = (op(plan.x), op(plan.y), op(plan.rows));
                let route = plan.route.map(op);
                let (wb, eb) = (op(w.0), op(w.1));
                let sb = op(Operand {
                    ptr: sched,
                    bytes: sched_bytes,
                });
                let ops = Fp4Operands {
                    x: &xb,
                    w: &wb,
                    escale: &eb,
                    y: &yb,
                    rows: &rb,
                    route: route.as_ref(),
                    sched: &sb,
                };
                Fp4Experts::launch(ctx, p, l, &ops)
            },
        )
    }
}

/// Prepacked weights' bytes and factors copied to the GPU on `stream` (asynchronously), unless
/// they are not `whole` (not what `prepacked_by` makes).
pub(super) fn upload_prepacked(
    stream: &Arc<CudaStream>,
    (bytes, escale): (&[u8], &[f32]),
    whole: bool,
    prepacked_by: &str,
) -> Result<(CudaSlice<u8>, CudaSlice<f32>)> {
    if !whole {
        return Err(Error::invalid(format!(
            "these 4-bit weights are not whole prepacked weights: make them with {prepacked_by}"
        )));
    }
    let copy =
        |e: cudarc::driver::DriverError| Error::cuda("uploading 4-bit weights", format!("{e:?}"));
    Ok((
        stream.clone_htod(bytes).map_err(copy)?,
        stream.clone_htod(escale).map_err(copy)?,
    ))
}

/// Uploaded weights' bytes and factors as operands, with the guards that order `stream` after
/// their upload (kept until the launch is enqueued).
pub(super) fn prepacked_operands<'a>(
    (bytes, escale): (&'a CudaSlice<u8>, &'a CudaSlice<f32>),
    stream: &'a CudaStream,
) -> ((Operand, Operand), [SyncOnDrop<'a>; 2]) {
    let (wptr, w_order) = bytes.device_ptr(stream);
    let (eptr, e_order) = escale.device_ptr(stream);
    let ops = (
        Operand {
            ptr: wptr,
            bytes: bytes.len(),
        },
        Operand {
            ptr: eptr,
            bytes: escale.len() * 4,
        },
    );
    (ops, [w_order, e_order])
}

/// The checks of a 4-bit MoE op: shapes, dtypes, rows and aliasing as for the 16-bit MoE, with
/// the weights described as the [E, N, K] tensor they dequantise to, without memory (base 0:
/// the kernels never read through it, and a base anywhere else would make its span overlap
/// outputs that merely lie near, e.g. torch's next allocation after x); the prepacked bytes are
/// checked by the caller (upload) or [`super::raw::check_fp4_experts`].
pub(super) fn fp4_plan(
    device: usize,
    x: &TensorInfo,
    l: &Fp4Layout,
    rows: &MoeRows<'_, TensorInfo>,
    routing: Option<&TensorInfo>,
    y: &TensorInfo,
) -> Result<Option<MoePlan>> {
    let wdesc = TensorInfo::new(
        "w",
        0,
        x.dtype(),
        &[l.experts, l.n, l.k],
        &contiguous_strides(&[l.experts, l.n, l.k]),
        x.device(),
    )?;
    if l.swiglu {
        let pair = SwigluWeights::Separate {
            w1: wdesc,
            w3: wdesc,
        };
        validate::swiglu(device, x, &pair, rows, routing, y)
    } else {
        if routing.is_some() {
            return Err(Error::invalid(
                "routing weights scale the SwiGLU's rows; these weights are a grouped GEMM's",
            ));
        }
        validate::grouped_gemm(device, x, &wdesc, rows, y)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::DType;

    /// The weights' description has no memory: an output right after x is not taken for an
    /// overlap with the [E, N, K] tensor the weights dequantise to (it was, from Python, where
    /// torch places the next allocation just past x).
    #[test]
    fn an_output_next_to_x_is_not_an_overlap_with_the_weights() {
        let (t, e, n, k) = (8usize, 4usize, 256usize, 512usize);
        let x_at = 1u64 << 32;
        let info = |name: &str, ptr: u64, shape: &[usize]| {
            TensorInfo::new(name, ptr, DType::Bf16, shape, &contiguous_strides(shape), 0).unwrap()
        };
        let x = info("x", x_at, &[t, k]);
        let y = info("y", x_at + (t * k * 2) as u64, &[t, n]);
        let offsets =
            TensorInfo::new("offsets", x_at + (1 << 24), DType::I32, &[e + 1], &[1], 0).unwrap();
        let rows = MoeRows::Offsets {
            offsets,
            host: None,
        };
        for swiglu in [false, true] {
            let l = Fp4Layout {
                format: crate::ops::moe::fp4::Fp4Format::Nvfp4,
                experts: e,
                n,
                k,
                swiglu,
                min_scale_byte: 0,
            };
            let r = fp4_plan(0, &x, &l, &rows, None, &y);
            assert!(r.is_ok(), "swiglu {swiglu}: {:?}", r.err());
        }
    }
}
