//! The attention backward on cudarc buffers: dQ, dK and dV from the forward's tensors and dO,
//! enqueued on the caller's stream with the handle's context's workspaces.

use cudarc::driver::{sys, CudaStream};

use super::handle::Kiln;
use super::options::AttentionBackwardOptions;
use super::tensor::{TensorMut, TensorRef};
use super::validate::{self, AttentionBackwardPlan, Operand};
use crate::device::{Context, DeviceBuffer};
use crate::error::Result;
use crate::ops::attention_backward::{check_buffers, BackwardOperands};
use crate::ops::registry::Registry;

/// The forward's tensors a backward reads: q, k, v, the output o and its f32 LSE.
#[derive(Clone, Copy)]
pub struct ForwardSaved<'a> {
    pub q: &'a TensorRef<'a>,
    pub k: &'a TensorRef<'a>,
    pub v: &'a TensorRef<'a>,
    pub o: &'a TensorRef<'a>,
    pub lse: &'a TensorRef<'a>,
}

impl Kiln {
    /// Attention backward with flash-attention's semantics: from the forward's q, k, v, o and
    /// lse (`saved`, shaped as [`Kiln::attention`] takes them) and the output's gradient `dout`
    /// (q's shape), writes dq (q's shape), dk and dv (k's shape; summed over the query heads that
    /// share a key/value head). Every gradient is stored in the same order as the inputs.
    pub fn attention_backward(
        &self,
        stream: &CudaStream,
        saved: ForwardSaved<'_>,
        dout: &TensorRef,
        (dq, dk, dv): (&mut TensorMut, &mut TensorMut, &mut TensorMut),
        opts: &AttentionBackwardOptions,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let Some(plan) = validate::attention_backward(
            self.ordinal(),
            (&saved.q.info, &saved.k.info, &saved.v.info, &saved.o.info),
            &dout.info,
            Some(&saved.lse.info),
            (&dq.info, &dk.info, &dv.info),
            opts,
        )?
        else {
            return Ok(());
        };
        let _order = (
            [saved.q, saved.k, saved.v, saved.o, saved.lse, dout].map(|t| t.track(stream)),
            dq.track(stream),
            dk.track(stream),
            dv.track(stream),
        );
        self.launch_attention_backward(Some(stream.cu_stream()), &plan, opts)
    }

    pub(crate) fn launch_attention_backward(
        &self,
        stream: Option<sys::CUstream>,
        plan: &AttentionBackwardPlan,
        opts: &AttentionBackwardOptions,
    ) -> Result<()> {
        let v = opts.version.as_deref();
        self.run(stream, &plan.key(v), &plan.problem.label(), |ctx, _, _| {
            launch(&self.registry, ctx, plan, v)
        })
    }
}

/// A buffer over an operand's memory.
///
/// # Safety
/// The operand must describe memory of the current context that outlives the launch.
unsafe fn borrow(op: Operand) -> DeviceBuffer {
    DeviceBuffer::borrowed(op.ptr, op.bytes)
}

/// Enqueues `plan` on the context's stream with the version asked for, else the highest rung
/// that supports it.
pub(super) fn launch(
    reg: &Registry,
    ctx: &Context,
    plan: &AttentionBackwardPlan,
    version: Option<&str>,
) -> Result<()> {
    let p = &plan.problem;
    // SAFETY: the plan's operands are checked views of the caller's memory, which the caller
    // keeps alive until the stream has run the launch.
    let b = unsafe {
        [
            plan.q, plan.k, plan.v, plan.o, plan.d_o, plan.lse, plan.dq, plan.dk, plan.dv,
        ]
        .map(|o| borrow(o))
    };
    let ops = BackwardOperands::from_array(&b);
    check_buffers(p, &ops)?;
    reg.select_attention_backward(p, &ctx.info, version)?
        .launch(ctx, p, &ops)
}
