//! The packed (variable-length) attention forward on cudarc views: `Kiln::attention_varlen`, and
//! its launch on fa3_wgmma, the one version that runs packed batches.

use cudarc::driver::{sys, CudaStream};

use super::handle::Kiln;
use super::launch::borrow;
use super::options::AttentionOptions;
use super::tensor::{TensorMut, TensorRef};
use super::validate::{self, Operand, VarlenPlan};
use super::workspace::Workspaces;
use crate::device::Context;
use crate::error::{Error, Result};
use crate::ops::attention::fa3_wgmma::{Fa3Wgmma, VarlenOperands};
use crate::ops::attention::AttentionKernel;

/// The version that runs packed batches.
const VARLEN_VERSION: &str = "fa3_wgmma";

impl Kiln {
    pub(crate) fn launch_attention_varlen(
        &self,
        stream: Option<sys::CUstream>,
        plan: &VarlenPlan,
        opts: &AttentionOptions,
    ) -> Result<()> {
        let v = opts.version.as_deref();
        self.run(
            stream,
            &plan.key(v),
            "packed attention",
            |ctx, ws, capturing| launch_varlen(ctx, ws, capturing, plan, v),
        )
    }

    /// Attention forward over a packed batch, flash-attention's `flash_attn_varlen_func`: q
    /// [total_q, Hq, D], k and v [total_k, Hkv, D], sequence s owning rows
    /// `cu_seqlens_q[s]..cu_seqlens_q[s + 1]` of q and `cu_seqlens_k[s]..cu_seqlens_k[s + 1]` of
    /// k and v (i32 [batch + 1] on the GPU; `host_q`, `host_k` are their contents, which are
    /// checked and size the grid); causal aligned bottom-right per sequence, `opts.window` the
    /// sliding window; o like q; lse f32 [Hq, total_q] if wanted. `opts.layout` does not apply.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_varlen(
        &self,
        stream: &CudaStream,
        q: &TensorRef,
        k: &TensorRef,
        v: &TensorRef,
        o: &mut TensorMut,
        mut lse: Option<&mut TensorMut>,
        (cu_q, host_q): (&TensorRef, &[i32]),
        (cu_k, host_k): (&TensorRef, &[i32]),
        opts: &AttentionOptions,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let lse_info = lse.as_ref().map(|l| l.info);
        let Some(plan) = validate::attention_varlen(
            self.ordinal(),
            &q.info,
            &k.info,
            &v.info,
            &o.info,
            lse_info.as_ref(),
            (&cu_q.info, host_q),
            (&cu_k.info, host_k),
            opts,
        )?
        else {
            return Ok(());
        };
        let _order = (
            q.track(stream),
            k.track(stream),
            v.track(stream),
            cu_q.track(stream),
            cu_k.track(stream),
            o.track(stream),
            lse.as_mut().and_then(|l| l.track(stream)),
        );
        self.launch_attention_varlen(Some(stream.cu_stream()), &plan, opts)
    }
}

/// Enqueues `plan` on the context's stream; without a caller's LSE the kernel writes the
/// handle's.
pub(crate) fn launch_varlen(
    ctx: &Context,
    ws: &mut Workspaces,
    capturing: bool,
    plan: &VarlenPlan,
    version: Option<&str>,
) -> Result<()> {
    if let Some(v) = version.filter(|&v| v != VARLEN_VERSION) {
        return Err(Error::Unsupported {
            kernel: v.into(),
            reason: format!("only {VARLEN_VERSION} runs packed (variable-length) batches"),
        });
    }
    let p = &plan.problem;
    let lse = match plan.lse {
        Some(l) => l,
        None => {
            let bytes = p.heads_q * p.total_q * 4;
            Operand {
                ptr: ws.lse.at_least(ctx, bytes, capturing)?,
                bytes,
            }
        }
    };
    Fa3Wgmma
        .supports_varlen(p, &ctx.info)
        .map_err(|reason| Error::Unsupported {
            kernel: Fa3Wgmma.name().into(),
            reason,
        })?;
    // SAFETY: the plan's operands are the caller's live views (checked by validate), and the
    // LSE workspace lives as long as the handle.
    let (q, k, v, o, l, cq, ck) = unsafe {
        (
            borrow(plan.q),
            borrow(plan.k),
            borrow(plan.v),
            borrow(plan.o),
            borrow(lse),
            borrow(plan.cu_q),
            borrow(plan.cu_k),
        )
    };
    let ops = VarlenOperands {
        q: &q,
        k: &k,
        v: &v,
        o: &o,
        lse: &l,
        cu_q: &cq,
        cu_k: &ck,
    };
    Fa3Wgmma.launch_varlen(ctx, p, &ops)
}
