//! The attention backward on cudarc buffers: dQ, dK and dV from the forward's tensors and dO,
//! dense (`Kiln::attention_backward`) or packed (`Kiln::attention_varlen_backward`), enqueued
//! on the caller's stream with the handle's context's workspaces.

use cudarc::driver::{sys, CudaStream};

use super::handle::Kiln;
use super::launch::{borrow, only_version};
use super::options::AttentionBackwardOptions;
use super::tensor::{TensorMut, TensorRef};
use super::validate::{self, AttentionBackwardPlan, VarlenBackwardPlan};
use super::varlen::VarlenOffsets;
use super::workspace::{pending_errors, Workspaces, PACKED_OFFSETS_WORD};
use crate::device::Context;
use crate::error::{Error, Result};
use crate::ops::attention_backward::varlen::{
    launch_varlen, VarlenBackwardOperands, VARLEN_VERSION,
};
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

    /// The backward of [`Kiln::attention_varlen`] (flash-attention's varlen backward): from the
    /// packed forward's q, k, v, o and lse (`saved`: q [total_q, Hq, D], k and v [total_k, Hkv,
    /// D], lse f32 [Hq, total_q], as the forward took and wrote them), the same `offsets`, and
    /// the output's gradient `dout` (q's shape), writes dq (q's shape), dk and dv (k's shape;
    /// summed over the query heads that share a key/value head), all packed rows. `opts` as the
    /// forward ran (causal, scale, window); `opts.deterministic` is refused for now and
    /// `opts.layout` does not apply. Offsets that are bad, when not checked on the host, leave
    /// their sequences' gradients unwritten and are reported as the forward's are.
    pub fn attention_varlen_backward(
        &self,
        stream: &CudaStream,
        saved: ForwardSaved<'_>,
        dout: &TensorRef,
        (dq, dk, dv): (&mut TensorMut, &mut TensorMut, &mut TensorMut),
        offsets: VarlenOffsets<'_, TensorRef>,
        opts: &AttentionBackwardOptions,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let Some(plan) = validate::attention_varlen_backward(
            self.ordinal(),
            (&saved.q.info, &saved.k.info, &saved.v.info, &saved.o.info),
            &dout.info,
            Some(&saved.lse.info),
            (&dq.info, &dk.info, &dv.info),
            &offsets.with(&offsets.cu_q.info, &offsets.cu_k.info),
            opts,
        )?
        else {
            return Ok(());
        };
        let _order = (
            [
                saved.q,
                saved.k,
                saved.v,
                saved.o,
                saved.lse,
                dout,
                offsets.cu_q,
                offsets.cu_k,
            ]
            .map(|t| t.track(stream)),
            dq.track(stream),
            dk.track(stream),
            dv.track(stream),
        );
        self.launch_attention_varlen_backward(Some(stream.cu_stream()), &plan, opts)
    }

    pub(crate) fn launch_attention_varlen_backward(
        &self,
        stream: Option<sys::CUstream>,
        plan: &VarlenBackwardPlan,
        opts: &AttentionBackwardOptions,
    ) -> Result<()> {
        let v = opts.version.as_deref();
        self.run_graphed_polled(
            stream,
            plan.key(v),
            plan.addresses(),
            || "this packed attention backward".to_string(),
            |ws| pending_errors(ws, self.ordinal()),
            |ctx, ws, capturing| launch_varlen_backward(ctx, ws, capturing, plan, v),
        )
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
    reg.select_attention_backward_tuned(p, &ctx.info, &ctx.tuned, version)?
        .launch(ctx, p, &ops)
}

/// Enqueues the packed `plan` on the context's stream with the packed backward's version (the
/// one that runs packed batches; another asked for is refused). The kernel records bad offsets
/// in the handle's error word of the packed forward.
fn launch_varlen_backward(
    ctx: &Context,
    ws: &mut Workspaces,
    capturing: bool,
    plan: &VarlenBackwardPlan,
    version: Option<&str>,
) -> Result<()> {
    only_version(
        version,
        VARLEN_VERSION,
        "the packed (variable-length) backward",
    )?;
    let f = &plan.fwd;
    let lse = f.lse.ok_or_else(|| {
        Error::invalid("the packed backward's plan has no LSE (validate requires one)")
    })?;
    let errors = ws.bad_input(capturing)? + 4 * PACKED_OFFSETS_WORD as u64;
    // SAFETY: as in `launch`.
    let (b, cu_q, cu_k) = unsafe {
        (
            [f.q, f.k, f.v, f.o, plan.d_o, lse, plan.dq, plan.dk, plan.dv].map(|o| borrow(o)),
            borrow(f.cu_q),
            borrow(f.cu_k),
        )
    };
    let ops = VarlenBackwardOperands {
        dense: BackwardOperands::from_array(&b),
        cu_q: &cu_q,
        cu_k: &cu_k,
        errors,
    };
    launch_varlen(ctx, &f.shape, false, &ops)
}
