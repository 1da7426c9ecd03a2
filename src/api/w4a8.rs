//! The W4A8 experts on cudarc buffers: MXFP4 expert weights prepacked on the host for the FP8
//! tensor cores ([`crate::ops::moe::fp4::w4a8`]) and uploaded once, then the grouped GEMM or
//! fused SwiGLU on e4m3 activations with their 1x128 scales (kiln's FP8 per-token cast).

use std::sync::Arc;

use cudarc::driver::{CudaSlice, CudaStream};

use super::fp4_experts::{prepacked_operands, upload_prepacked};
use super::fp8::borrow;
use super::handle::Kiln;
use super::options::MoeRows;
use super::tensor::{TensorMut, TensorRef};
use super::validate::{self, Operand, W4a8Plan};
use crate::error::Result;
use crate::ops::moe::fp4::kernel_w4a8::W4a8Layout;
use crate::ops::moe::fp4::w4a8::W4a8Prepacked;
use crate::ops::moe::fp4::{W4a8Experts, W4a8Operands};
use crate::ops::moe::schedule;

/// W4A8-prepacked MXFP4 expert weights on one GPU: a grouped GEMM's W, or a SwiGLU's W1 and W3.
pub struct W4a8ExpertWeights {
    layout: W4a8Layout,
    bytes: CudaSlice<u8>,
    escale: CudaSlice<f32>,
}

impl W4a8ExpertWeights {
    /// Experts, N, K and whether they are a SwiGLU pair.
    pub fn layout(&self) -> W4a8Layout {
        self.layout
    }
}

impl Kiln {
    /// Uploads W4A8-prepacked weights on `stream` (asynchronously, as [`Kiln::upload_fp4`]).
    pub fn upload_w4a8(
        &self,
        stream: &Arc<CudaStream>,
        w: &W4a8Prepacked,
    ) -> Result<W4a8ExpertWeights> {
        self.check_stream(stream)?;
        let l = w.layout();
        let whole =
            w.bytes.len() == w.experts * w.expert_bytes() && w.escale.len() == l.escale_len();
        let (bytes, escale) = upload_prepacked(
            stream,
            (&w.bytes, &w.escale),
            whole,
            "prepack_w4a8 or prepack_w4a8_swiglu",
        )?;
        Ok(W4a8ExpertWeights {
            layout: l,
            bytes,
            escale,
        })
    }

    /// The MoE op of the weights' kind with MXFP4 weights and e4m3 activations on the FP8 tensor
    /// cores: y[rows of e] = dequant(x[rows of e]) @ W[e]ᵀ, or for SwiGLU weights
    /// h = silu(x W1ᵀ) * (x W3ᵀ), times the row's f32 routing weight when `routing` is given.
    /// x [rows, K] e4m3 (offsets) or [E, max_rows, K] (counts) with `sx` its 1x128 scales
    /// ([rows, ceil(K/128)] M-major, as [`Kiln::per_token_cast_to_fp8`] gives); y bf16 [rows, N]
    /// or [E, max_rows, N]; rows of no expert are not written.
    pub fn w4a8_experts(
        &self,
        stream: &CudaStream,
        (x, sx): (&TensorRef, &TensorRef),
        w: &W4a8ExpertWeights,
        rows: MoeRows<'_>,
        routing: Option<&TensorRef>,
        y: &mut TensorMut,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let Some(plan) = validate::w4a8_experts(
            self.ordinal(),
            (&x.info, &sx.info),
            &w.layout,
            &rows.tensor().info,
            routing.map(|r| &r.info),
            &y.info,
            rows.is_counts(),
        )?
        else {
            return Ok(());
        };
        let (weights, _w_order) = prepacked_operands((&w.bytes, &w.escale), stream);
        let _order = (
            [x, sx, rows.tensor()].map(|t| t.track(stream)),
            routing.and_then(|t| t.track(stream)),
            y.track(stream),
        );
        self.launch_w4a8(stream, &plan, &w.layout, weights)
    }

    fn launch_w4a8(
        &self,
        stream: &CudaStream,
        plan: &W4a8Plan,
        l: &W4a8Layout,
        (w, escale): (Operand, Operand),
    ) -> Result<()> {
        let p = &plan.problem;
        let key = format!("w4a8 {} x_rows {} {l:?}", p.label(), p.x_rows());
        self.run(
            Some(stream.cu_stream()),
            &key,
            &p.label(),
            |ctx, ws, capturing| {
                let sched_bytes = schedule::sched_bytes(p.experts);
                let sched = Operand {
                    ptr: ws.moe_sched.at_least(ctx, sched_bytes, capturing)?,
                    bytes: sched_bytes,
                };
                // SAFETY: every operand is memory the caller's views (and the weights) hold for the
                // duration of this call, ordered on `stream`.
                let op = |o: Operand| unsafe { borrow(o) };
                let route = plan.route.map(op);
                let ops = W4a8Operands {
                    x: &op(plan.x),
                    sx: &op(plan.sx),
                    w: &op(w),
                    escale: &op(escale),
                    y: &op(plan.y),
                    rows: &op(plan.rows),
                    route: route.as_ref(),
                    sched: &op(sched),
                };
                W4a8Experts::launch(ctx, p, l, &ops)
            },
        )
    }
}
