//! The packed (variable-length) attention forward on cudarc views: `Kiln::attention_varlen`, and
//! its launch on fa3_wgmma, the one version that runs packed batches. The offsets need not be
//! on the host: the grid is sized by the longest sequences the caller names (flash-attention's
//! `max_seqlen_q`), and the kernel checks each sequence's offsets, recording bad ones for the
//! handle to report (as the decode kernels record bad tables).

use cudarc::driver::{sys, CudaStream};

use super::handle::Kiln;
use super::launch::{borrow, only_version};
use super::options::AttentionOptions;
use super::tensor::{TensorMut, TensorRef};
use super::validate::{self, Operand, VarlenPlan};
use super::workspace::{pending_errors, Workspaces, PACKED_OFFSETS_WORD};
use crate::device::Context;
use crate::error::{Error, Result};
use crate::ops::attention::fa3_wgmma::{Fa3Wgmma, VarlenOperands};
use crate::ops::attention::AttentionKernel;

/// The version that runs packed batches.
const VARLEN_VERSION: &str = "fa3_wgmma";

/// The offsets of a packed call: `cu_q` and `cu_k`, i32 [batch + 1] on the GPU (sequence s owns
/// query rows `cu_q[s]..cu_q[s + 1]` and key rows `cu_k[s]..cu_k[s + 1]`), the longest query and
/// key sequences (flash-attention's `max_seqlen_q`, `max_seqlen_k`: the grid covers
/// `max_seqlen_q` rows of each sequence), and, when the caller has them, the offsets' host
/// copies: then they are checked before the launch (and the grid sized by the longest they
/// hold); without, the GPU checks them (capturable; a sequence whose offsets are bad, or longer
/// than `max_seqlen_q`, comes out NaN and the handle reports it at its next call outside
/// capture or at [`Kiln::check_errors`]).
#[derive(Debug, Clone, Copy)]
pub struct VarlenOffsets<'a, T> {
    pub cu_q: &'a T,
    pub cu_k: &'a T,
    pub max_seqlen_q: usize,
    pub max_seqlen_k: usize,
    pub host: Option<(&'a [i32], &'a [i32])>,
}

impl<'a, T> VarlenOffsets<'a, T> {
    /// The same lengths and host copies with other views of the offsets.
    pub fn with<'b, U>(&self, cu_q: &'b U, cu_k: &'b U) -> VarlenOffsets<'b, U>
    where
        'a: 'b,
    {
        VarlenOffsets {
            cu_q,
            cu_k,
            max_seqlen_q: self.max_seqlen_q,
            max_seqlen_k: self.max_seqlen_k,
            host: self.host,
        }
    }
}

impl Kiln {
    pub(crate) fn launch_attention_varlen(
        &self,
        stream: Option<sys::CUstream>,
        plan: &VarlenPlan,
        opts: &AttentionOptions,
    ) -> Result<()> {
        let v = opts.version.as_deref();
        let what = || "this packed attention".to_string();
        self.run_graphed_polled(
            stream,
            plan.key(v),
            plan.addresses(),
            what,
            |ws| pending_errors(ws, self.ordinal()),
            |ctx, ws, capturing| launch_varlen(ctx, ws, capturing, plan, v),
        )
    }

    /// Attention forward over a packed batch, flash-attention's `flash_attn_varlen_func`: q
    /// [total_q, Hq, D], k and v [total_k, Hkv, D], the sequences' rows given by `offsets`
    /// ([`VarlenOffsets`]); causal aligned bottom-right per sequence, `opts.window` the
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
        offsets: VarlenOffsets<'_, TensorRef>,
        opts: &AttentionOptions,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let lse_info = lse.as_ref().map(|l| l.info);
        let infos = offsets.with(&offsets.cu_q.info, &offsets.cu_k.info);
        let Some(plan) = validate::attention_varlen(
            self.ordinal(),
            &q.info,
            &k.info,
            &v.info,
            &o.info,
            lse_info.as_ref(),
            &infos,
            opts,
        )?
        else {
            return Ok(());
        };
        let _order = (
            q.track(stream),
            k.track(stream),
            v.track(stream),
            offsets.cu_q.track(stream),
            offsets.cu_k.track(stream),
            o.track(stream),
            lse.as_mut().and_then(|l| l.track(stream)),
        );
        self.launch_attention_varlen(Some(stream.cu_stream()), &plan, opts)
    }
}

/// Enqueues `plan` on the context's stream; without a caller's LSE the kernel writes the
/// handle's. The kernel records bad offsets in the handle's error words.
pub(crate) fn launch_varlen(
    ctx: &Context,
    ws: &mut Workspaces,
    capturing: bool,
    plan: &VarlenPlan,
    version: Option<&str>,
) -> Result<()> {
    only_version(version, VARLEN_VERSION, "packed (variable-length) batches")?;
    let p = &plan.shape;
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
    let errors = ws.bad_input(capturing)? + 4 * PACKED_OFFSETS_WORD as u64;
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
        errors,
    };
    Fa3Wgmma.launch_varlen(ctx, p, &ops)
}
