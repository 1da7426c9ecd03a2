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
use super::bwd_fa3_wgmma::{launch_main, supports_tile, PackedGrid, Sched, WgmmaBwdTile, BM, BN};
use super::dq_fused::DqFused;
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
    let o = &ctx.overrides.attention;
    let t = bwd_fa3_lookahead::varlen_tile(p.head_dim, o.bwd_varlen_m128);
    let compact = o.bwd_varlen_compact && p.batch <= COMPACT_MAX_SEQS;
    let fused = dq_fused_for(o.bwd_dq_fused, &t, compact);
    let t = WgmmaBwdTile {
        varlen_compact: compact,
        dq_fused: fused,
        ..t
    };
    let (key_blocks, seqs) = packed_grid(p, compact);
    let grid = PackedGrid {
        key_blocks,
        seqs,
        // (in 64-row blocks, the argument block's m_block, whatever the tile's rows a step)
        m_blocks: (p.max_q.max(1) as u32).div_ceil(BM),
        cu_q: ops.cu_q.ptr(),
        cu_k: ops.cu_k.ptr(),
        errors: ops.errors,
        dq_fused: fused,
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
        Sched::of(o),
    )
}

/// What `KILN_BWD_DQ_FUSED` (`knob`: 0 to 3; unset, 2 on d64's 128-row tile and 3 on d128's)
/// makes of the packed tile `t`'s dQ: converted in the main kernel on the row split's 128-row
/// tile (d64) or the column split's 64-row one (d128), with the grid of sequences along z (the
/// kernel's counters are per sequence); elsewhere [`DqFused::Off`], the postprocess converts it.
/// The default is the H200's (ledger B27, B28, B31): at d64 the fused form with the accumulator
/// left zero is 0.6-1.2 % faster; at d128 the writer warp falls behind the 64-row steps (9-10 %
/// slower), and the conversion by each sequence's last key block (no writer) is 2.6-2.9 % faster
/// than the postprocess.
pub fn dq_fused_for(knob: Option<u32>, t: &WgmmaBwdTile, compact: bool) -> DqFused {
    let d64_rows = t.bm == 128 && t.dq_split == 2;
    let tile = d64_rows || (t.d == 128 && t.bm == BM && t.dq_split == 0);
    if tile && !compact {
        DqFused::from_knob(knob.unwrap_or(if d64_rows { 2 } else { 3 }))
    } else {
        DqFused::Off
    }
}

/// The most sequences the compact grid takes (`KILN_BWD_VARLEN_COMPACT`): a warp finds a block's
/// sequence among offsets it holds two a lane (`kernels/attention/bwd_varlen_grid.cuh`).
pub const COMPACT_MAX_SEQS: usize = 63;

/// The packed grid's x and z (a block per `BN` keys of each key/value head, y): the longest
/// sequence's key blocks x the sequences, or `compact` the sequences' key blocks back to back
/// (floor(total_k / BN) + sequences: sequence z owns floor(cu_k[z] / BN) + z onwards, at least
/// its ceil(keys / BN)) x 1.
pub fn packed_grid(p: &VarlenShape, compact: bool) -> (u32, u32) {
    if compact {
        ((p.total_k / BN as usize + p.batch) as u32, 1)
    } else {
        ((p.max_k.max(1) as u32).div_ceil(BN), p.batch as u32)
    }
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

    /// The compact grid gives each sequence at least its key blocks, starting where the device's
    /// `varlen_compact_block` puts them (floor(cu_k[z] / BN) + z), and ends with the last one.
    #[test]
    fn the_compact_grid_holds_every_sequences_key_blocks() {
        let lens = [6698, 5067, 658, 8103, 128, 0, 1, 129, 255, 256, 257, 7];
        let pairs: Vec<(usize, usize)> = lens.iter().map(|&l| (l, l)).collect();
        let p = VarlenProblem::new(&pairs, 4, 64).shape();
        let (x, z) = packed_grid(&p, true);
        assert_eq!(z, 1);
        let bn = BN as usize;
        let mut cu = 0;
        let base = |cu: usize, i: usize| cu / bn + i;
        for (i, &l) in lens.iter().enumerate() {
            let owned = base(cu + l, i + 1) - base(cu, i);
            assert!(
                owned >= l.div_ceil(bn) && owned <= l.div_ceil(bn) + 1,
                "{i}: {owned}"
            );
            cu += l;
        }
        assert_eq!(base(cu, lens.len()), x as usize);
        // the dense-style grid: the longest sequence's blocks x sequences
        assert_eq!(
            packed_grid(&p, false),
            (8103u32.div_ceil(BN), lens.len() as u32)
        );
        // 32 sequences of 128..8192 (seed 1's): 1,192 + 32 blocks a head for 2,048 x 32
        let drawn: Vec<(usize, usize)> = [
            6698, 5067, 658, 8103, 2679, 7591, 648, 3906, 2293, 5738, 5155, 6498, 3202, 4775, 6769,
            1207, 4243, 924, 4937, 1185, 6609, 6887, 4163, 6944, 6491, 7162, 7417, 1769, 4709,
            6977, 5214, 4185,
        ]
        .iter()
        .map(|&l| (l, l))
        .collect();
        let d = VarlenProblem::new(&drawn, 16, 64).shape();
        assert_eq!(packed_grid(&d, true), (150803 / 128 + 32, 1));
        assert_eq!(packed_grid(&d, false), (64, 32));
    }

    /// The compact grid's kernels (`KILN_BWD_VARLEN_COMPACT`: the define `KILN_BWD_VARLEN` 2) on
    /// the packed tiles the knob takes, d64's 128-row one and d128's, compile for sm_90a with no
    /// local memory, no wgmma serialisation and the register split honoured; they compile when
    /// the knob asks for them, outside the variant budget.
    #[test]
    fn the_compact_grids_variants_compile_without_spills() {
        use crate::ops::attention::DTYPES;
        let mut v = Vec::new();
        for t in [
            bwd_fa3_lookahead::varlen_tile(64, true),
            bwd_fa3_lookahead::varlen_tile(128, true),
        ] {
            let c = WgmmaBwdTile {
                varlen_compact: true,
                ..t
            };
            for dt in DTYPES {
                let spec = c.spec("sm_90a", dt);
                assert!(
                    spec.label().contains("KILN_BWD_VARLEN=2"),
                    "{}",
                    spec.label()
                );
                assert!(t.spec("sm_90a", dt).label().contains("KILN_BWD_VARLEN=1"));
                v.push(spec);
            }
        }
        crate::ops::attention_backward::assert_compiles_clean(v, &["C751", "C7507", "C7508"]);
    }

    /// `KILN_BWD_DQ_FUSED` applies to d64's packed 128-row tile and d128's, on the grid of
    /// sequences along z; the 64-row d64 tile and the compact grid keep the postprocess.
    #[test]
    fn the_fused_conversion_applies_to_the_row_and_column_splits() {
        let (d64, d128) = (
            bwd_fa3_lookahead::varlen_tile(64, true),
            bwd_fa3_lookahead::varlen_tile(128, true),
        );
        for t in [d64, d128] {
            assert_eq!(dq_fused_for(Some(1), &t, false), DqFused::Convert);
            assert_eq!(dq_fused_for(Some(2), &t, false), DqFused::LeaveZero);
            assert_eq!(dq_fused_for(Some(3), &t, false), DqFused::LastBlock);
            assert_eq!(dq_fused_for(Some(0), &t, false), DqFused::Off);
            assert_eq!(dq_fused_for(Some(2), &t, true), DqFused::Off);
            assert_eq!(dq_fused_for(Some(3), &t, true), DqFused::Off);
            assert_eq!(dq_fused_for(None, &t, true), DqFused::Off);
        }
        // unset: d64's 128-row tile leaves the accumulator zero through the writer warp, d128's
        // through each sequence's last key block
        assert_eq!(dq_fused_for(None, &d64, false), DqFused::LeaveZero);
        assert_eq!(dq_fused_for(None, &d128, false), DqFused::LastBlock);
        let d64_rows64 = bwd_fa3_lookahead::varlen_tile(64, false);
        assert_eq!(dq_fused_for(Some(2), &d64_rows64, false), DqFused::Off);
        assert_eq!(dq_fused_for(None, &d64_rows64, false), DqFused::Off);
    }

    /// The fused conversion's kernels (`KILN_BWD_DQ_FUSED` 1 to 3) on the packed tiles it takes,
    /// d64's 128-row one (`d` 64) and d128's (128), compile for sm_90a with no local memory, no
    /// wgmma serialisation and the register split honoured (the writer and converter warps at the
    /// producer's 24 registers); they compile when the knob asks for them, outside the variant
    /// budget.
    fn fused_variants_compile_clean(d: usize) {
        use crate::ops::attention::DTYPES;
        let t = bwd_fa3_lookahead::varlen_tile(d, true);
        let mut v = Vec::new();
        for mode in [DqFused::Convert, DqFused::LeaveZero, DqFused::LastBlock] {
            let f = WgmmaBwdTile {
                dq_fused: mode,
                ..t
            };
            assert!(f.smem_bytes() <= 227 * 1024);
            for dt in DTYPES {
                let s = f.spec("sm_90a", dt);
                let want = format!("KILN_BWD_DQ_FUSED={}", mode.define());
                assert!(s.label().contains(&want), "{}", s.label());
                v.push(s);
            }
        }
        assert!(!t.spec("sm_90a", DTYPES[0]).label().contains("FUSED"));
        crate::ops::attention_backward::assert_compiles_clean(v, &["C751", "C7507", "C7508"]);
    }

    #[test]
    fn the_fused_conversions_d64_variants_compile_without_spills() {
        fused_variants_compile_clean(64);
    }

    #[test]
    fn the_fused_conversions_d128_variants_compile_without_spills() {
        fused_variants_compile_clean(128);
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
