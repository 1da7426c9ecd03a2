//! The packed (variable-length) attention backward: flash-attention's `varlen` layout (Q, O, dO
//! and dQ [total_q, H, D], K, V, dK and dV [total_k, Hkv, D], LSE [H, total_q], the cumulative
//! offsets), on `bwd_fa3_lookahead`'s kernel with `KILN_BWD_VARLEN` (d64, d128). The passes see
//! the packed rows as one dense batch ([`dense_view`]: the preprocess's D and the fp32 dQ
//! accumulator over every packed row, the postprocess's conversion); the main kernel's grid is
//! the longest sequence's key blocks x key/value heads x sequences, and each block reads its
//! sequence's rows from the offsets (checked there, as the forward checks them). Nothing here
//! reads the offsets' contents. d64 runs on `bwd_fa3_m128_fma`'s 128-row tile (the dense d64
//! default's from 4,096 rows) unless `KILN_BWD_VARLEN_M128=0` (the 64-row tile, the default until
//! 2026-11-30).

use super::bwd_fa3_lookahead;
use super::bwd_fa3_wgmma::{launch_main, supports_tile, PackedGrid, Sched, BM, BN};
use super::{check_aligned, check_buffers, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceBuffer, DeviceInfo};
use crate::error::{Error, Result};
use crate::ops::attention::{AttentionProblem, AttnLayout, VarlenShape};

/// The device buffers of one packed backward: the forward's packed tensors, dO and the gradients
/// as one dense batch's (dQ as Q, dK and dV as K), and the offsets.
pub struct VarlenBackwardOperands<'a> {
    pub dense: BackwardOperands<'a>,
    pub cu_q: &'a DeviceBuffer,
    pub cu_k: &'a DeviceBuffer,
    /// A host-mapped word ([`crate::device::HostFlags`]) the kernel sets to 1 when a sequence's
    /// offsets are bad (nothing of that sequence is written); 0: not recorded.
    pub errors: u64,
}

/// The packed rows as one dense batch (BSHD, batch 1: [total, H, D] is [1, total, H, D], and LSE
/// [H, total_q] is [1, H, total_q]), the masks and scale of `p`: what the passes, the maps and
/// the workspaces are sized by.
pub fn dense_view(p: &VarlenShape) -> AttentionProblem {
    AttentionProblem {
        heads_kv: p.heads_kv,
        seqlen_kv: p.total_k,
        dtype: p.dtype,
        causal: p.causal,
        scale: p.scale,
        window: p.window,
        layout: AttnLayout::Bshd,
        ..AttentionProblem::new(1, p.heads_q, p.total_q, p.head_dim)
    }
}

/// `Ok` or why the packed backward cannot run `p` on `dev`: `bwd_fa3_lookahead`'s limits (sm_90,
/// d64/d128, bf16/f16, the grid), and no deterministic mode.
pub fn supports_varlen(
    p: &VarlenShape,
    deterministic: bool,
    dev: &DeviceInfo,
) -> std::result::Result<(), String> {
    if deterministic {
        return Err(
            "the packed backward has no deterministic mode (dQ's additions come in any order); leave deterministic off, or run each sequence as a dense call".into(),
        );
    }
    if p.batch > 65535 {
        return Err(format!(
            "{} sequences exceed the grid's 65535 (z); split the batch",
            p.batch
        ));
    }
    let dense = BackwardProblem::new(dense_view(p), false);
    // (both packed d64 tiles take the same problems: the 64-row one decides)
    supports_tile(
        &dense,
        dev,
        bwd_fa3_lookahead::varlen_tile(p.head_dim, false),
    )
}

/// Checks that the buffers hold the packed tensors and offsets of `p`.
pub fn check_varlen_backward_buffers(p: &VarlenShape, ops: &VarlenBackwardOperands) -> Result<()> {
    check_buffers(&BackwardProblem::new(dense_view(p), false), &ops.dense)?;
    let need = (p.batch + 1) * 4;
    for (name, b) in [("cu_seqlens_q", ops.cu_q), ("cu_seqlens_k", ops.cu_k)] {
        if b.bytes() < need {
            return Err(Error::invalid(format!(
                "{name} needs {need} bytes ({} sequences + 1 offsets of i32) but its buffer has {}",
                p.batch,
                b.bytes()
            )));
        }
    }
    Ok(())
}

/// The version that runs packed batches backward (`bwd_fa3_lookahead`'s `KILN_BWD_VARLEN`
/// variants): what the library, the CLI and the check name.
pub const VARLEN_VERSION: &str = "bwd_fa3_lookahead";

/// Enqueues the packed backward of `p` (validated; [`supports_varlen`] holds). A batch with no
/// query rows has zero dK and dV, one with no keys zero dQ.
pub fn launch_varlen(
    ctx: &Context,
    p: &VarlenShape,
    deterministic: bool,
    ops: &VarlenBackwardOperands,
) -> Result<()> {
    check_varlen_backward_buffers(p, ops)?;
    if let Err(reason) = supports_varlen(p, deterministic, &ctx.info) {
        return Err(Error::Unsupported {
            kernel: VARLEN_VERSION.into(),
            reason,
        });
    }
    if p.total_q == 0 || p.total_k == 0 {
        for g in [ops.dense.dq, ops.dense.dk, ops.dense.dv] {
            g.fill_bytes(0, ctx)?;
        }
        return Ok(());
    }
    let dense = BackwardProblem::new(dense_view(p), false);
    check_aligned(VARLEN_VERSION, &ops.dense)?;
    for (name, b) in [("cu_seqlens_q", ops.cu_q), ("cu_seqlens_k", ops.cu_k)] {
        if b.ptr() % 4 != 0 {
            return Err(Error::Unsupported {
                kernel: VARLEN_VERSION.into(),
                reason: format!(
                    "{name} starts at {:#x}, which is not 4-byte aligned (i32)",
                    b.ptr()
                ),
            });
        }
    }
    let t = bwd_fa3_lookahead::varlen_tile(p.head_dim, ctx.overrides.attention.bwd_varlen_m128);
    let grid = PackedGrid {
        key_blocks: (p.max_k.max(1) as u32).div_ceil(BN),
        seqs: p.batch as u32,
        // (in 64-row blocks, the argument block's m_block, whatever the tile's rows a step)
        m_blocks: (p.max_q.max(1) as u32).div_ceil(BM),
        cu_q: ops.cu_q.ptr(),
        cu_k: ops.cu_k.ptr(),
        errors: ops.errors,
    };
    let main = t.spec(&ctx.arch(), p.dtype);
    launch_main(
        VARLEN_VERSION,
        ctx,
        &dense,
        &ops.dense,
        &main,
        t.smem_bytes(),
        BN,
        Some(t.dq_cols()),
        false,
        1,
        Some(grid),
        Sched::of(ctx),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::{VarlenProblem, Window};

    #[test]
    fn the_dense_view_is_the_packed_rows_as_one_batch() {
        let p = VarlenProblem {
            heads_kv: 2,
            causal: true,
            window: Window { left: 7, right: -1 },
            ..VarlenProblem::new(&[(3, 5), (70, 4), (0, 2)], 4, 128)
        }
        .shape();
        let d = dense_view(&p);
        assert_eq!((d.batch, d.seqlen_q, d.seqlen_kv), (1, 73, 11));
        assert_eq!((d.heads_q, d.heads_kv, d.head_dim), (4, 2, 128));
        assert!(d.causal && d.window == p.window && d.layout == AttnLayout::Bshd);
        // [total, H, D] and LSE [H, total_q]: the dense view's sizes
        assert_eq!(d.q_elems(), p.q_elems());
        assert_eq!(d.kv_elems(), p.kv_elems());
        assert_eq!(d.lse_elems(), 4 * 73);
    }

    #[test]
    fn refusals_name_the_reason() {
        let h100 = DeviceInfo::h100_sxm();
        let p = |d| VarlenProblem::new(&[(100, 100), (1, 300)], 4, d).shape();
        assert!(supports_varlen(&p(128), false, &h100).is_ok());
        assert!(supports_varlen(&p(64), false, &h100).is_ok());
        assert!(supports_varlen(&p(256), false, &h100)
            .unwrap_err()
            .contains("use 64, 128"));
        assert!(supports_varlen(&p(128), true, &h100)
            .unwrap_err()
            .contains("no deterministic mode"));
    }
}
