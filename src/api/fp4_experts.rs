//! The MoE ops with 4-bit expert weights on cudarc buffers: weights prepacked on the host
//! ([`crate::ops::moe::fp4::prepack`]) and uploaded once, then the grouped GEMM or fused SwiGLU.

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr};

use super::handle::Kiln;
use super::info::{contiguous_strides, TensorInfo};
use super::options::{MoeRows, SwigluWeights};
use super::tensor::{TensorMut, TensorRef};
use super::validate::{self, Operand};
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
        if w.bytes.len() != w.experts * w.expert_bytes() || w.escale.len() != w.experts * w.halves()
        {
            return Err(Error::invalid(
                "these 4-bit weights are not whole prepacked weights: make them with prepack or prepack_swiglu",
            ));
        }
        let copy = |e: cudarc::driver::DriverError| {
            Error::cuda("uploading 4-bit weights", format!("{e:?}"))
        };
        Ok(Fp4ExpertWeights {
            layout: w.layout(),
            bytes: stream.clone_htod(&w.bytes).map_err(copy)?,
            escale: stream.clone_htod(&w.escale).map_err(copy)?,
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
        let l = w.layout;
        // The shapes, dtypes, rows and aliasing are checked as for the 16-bit MoE, with the
        // weights described as the [E, N, K] tensor they dequantise to (placed at x, which the
        // kernels never read through it); the prepacked bytes are checked by Fp4Experts.
        let wdesc = TensorInfo::new(
            "w",
            x.info.ptr(),
            x.info.dtype(),
            &[l.experts, l.n, l.k],
            &contiguous_strides(&[l.experts, l.n, l.k]),
            x.info.device(),
        )?;
        let rows_info = rows.map(|t| t.info);
        let plan = if l.swiglu {
            let pair = SwigluWeights::Separate {
                w1: wdesc,
                w3: wdesc,
            };
            let r = routing.map(|t| t.info);
            validate::swiglu(
                self.ordinal(),
                &x.info,
                &pair,
                &rows_info,
                r.as_ref(),
                &y.info,
            )?
        } else {
            if routing.is_some() {
                return Err(Error::invalid(
                    "routing weights scale the SwiGLU's rows; these weights are a grouped GEMM's",
                ));
            }
            validate::grouped_gemm(self.ordinal(), &x.info, &wdesc, &rows_info, &y.info)?
        };
        let Some(plan) = plan else {
            return Ok(());
        };
        let (wptr, _w_order) = w.bytes.device_ptr(stream);
        let (eptr, _e_order) = w.escale.device_ptr(stream);
        let _order = (
            x.track(stream),
            rows.tensor().track(stream),
            routing.and_then(|t| t.track(stream)),
            y.track(stream),
        );
        let p = &plan.problem;
        let key = format!(
            "{:?} fp4 {:?} tile {}",
            plan.key(()),
            l.format,
            Fp4Tile::choose(p).tt
        );
        self.run(
            Some(stream.cu_stream()),
            &key,
            &p.label(),
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
                let wb = op(Operand {
                    ptr: wptr,
                    bytes: w.bytes.len(),
                });
                let eb = op(Operand {
                    ptr: eptr,
                    bytes: w.escale.len() * 4,
                });
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
                Fp4Experts::launch(ctx, p, &l, &ops)
            },
        )
    }
}
