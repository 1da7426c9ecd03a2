//! Host side of `bwd_fa3_lookahead.cu` at 128 query rows a step (the define `KILN_BM`): d64's
//! block with twice the query rows per step, so that each step's products are m64n128 (Sᵀ, dPᵀ)
//! and k128 (dV, dK) and its fixed costs (the loop head, the waits, the barriers, the dQ tile's
//! fence and reduce issue) are paid once per 128 rows instead of per 64. H200 profiles of
//! `bwd_fa3_lookahead` (2026-11-29) put a step at about 1,800 cycles beyond its tensor work at
//! both head dims: d64's tensor work a step is half of d128's, hence its lower ratio to cuDNN.
//! FlashAttention-3 takes 128 x 128 at d64 for this reason.
//!
//! What changes against `bwd_fa3_lookahead` at d64: a 2-stage ring (Q and dO boxes of 128 rows,
//! each loaded as two 64-row boxes of the same maps), one dSᵀ buffer of two [128][64] boxes (the
//! key split: each warpgroup meets its own warps before it rewrites its rows), dQ as two m64n64
//! products per warpgroup into a [128][64] fp32 staging tile added by two tensor reduces (the
//! accumulator map's 64-row boxes), LSE and D read where they are used (32 registers each
//! ahead of the waits would not fit beside Sᵀ, dPᵀ, dK and dV). The next block's Sᵀ is still
//! issued before this block's dQ is staged (`KILN_BWD_NO_AHEAD=1`: at the block's top).
//! Deterministic mode: the ordered atomics, one counter per 128-row block (the host zeroes one
//! per 64 rows: more than enough). d64 only: at d128 dK and dV take 64 registers each and Sᵀ
//! and dPᵀ of 128 queries 64 each, over what a consumer can hold.

use super::bwd_fa3_wgmma::wgmma_knobs;
use super::bwd_fa3_wgmma::{launch_tile, supports_tile, Ahead, DqAdd, WgmmaBwdTile};
use super::knobs::{Knob, Knobs};
use super::{bwd_prep, AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::attention::DTYPES;
use crate::overrides::AttentionOverrides;

pub struct BwdFa3M128;

/// The head dim it covers.
const DIM: usize = 64;

/// Its tile: `bwd_fa3_lookahead`'s at d64 (split by keys, dQ by tensor tiles) with 128 query
/// rows a step and 2 ring stages; `no_ahead` (`KILN_BWD_NO_AHEAD`): each block's Sᵀ at its top.
pub(super) fn tile(no_ahead: bool) -> WgmmaBwdTile {
    WgmmaBwdTile {
        bm: 128,
        stages: 2,
        ahead: if no_ahead {
            Ahead::DescOnly
        } else {
            Ahead::SAhead
        },
        ..WgmmaBwdTile::staged_for(DIM, false, DqAdd::TensorTile)
    }
}

impl AttentionBackwardKernel for BwdFa3M128 {
    fn name(&self) -> &'static str {
        "bwd_fa3_m128"
    }
    fn summary(&self) -> &'static str {
        "bwd_fa3_lookahead at d64 with 128 query rows a step (m64n128 S^T/dP^T, k128 dV/dK): half the steps' fixed costs"
    }
    fn rung(&self) -> u32 {
        6
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        supports_m128(p, dev, tile(false))
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        // the default walk only: `KILN_BWD_NO_AHEAD`'s (measured the same at 902a3c0, ledger B7;
        // never dispatched) compiles when asked for, outside the variant budget
        let mut v = vec![bwd_prep::pre_spec(arch), bwd_prep::post_spec(arch)];
        for dt in DTYPES {
            v.push(tile(false).spec(arch, dt));
        }
        v
    }
    fn launch_knobs(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
        o: &AttentionOverrides,
    ) -> Result<()> {
        let no_ahead = o.bwd_no_ahead;
        launch_tile(self.name(), ctx, p, ops, o, tile(no_ahead))
    }
    fn knobs(&self, p: &BackwardProblem) -> Knobs {
        let mut v = wgmma_knobs(p, &tile(false));
        v.push((Knob::NoAhead, 0));
        v
    }
    fn by_default(&self) -> bool {
        // not at every shape: below 16,384 query rows non-causal the lookahead is faster
        false
    }
    fn by_default_for(&self, p: &BackwardProblem) -> bool {
        m128_wins(p)
    }
}

/// Whether a 128-row tile `t` (this version's, `bwd_fa3_m128_rows`', `bwd_fa3_m128_fma`'s) can run
/// `p` on `dev`: d64 only, then the tile's own limits.
pub(super) fn supports_m128(
    p: &BackwardProblem,
    dev: &DeviceInfo,
    t: WgmmaBwdTile,
) -> std::result::Result<(), String> {
    if p.attn.head_dim != DIM {
        return Err(format!(
            "head_dim {} is not supported (128 query rows a step fit only at d64); use 64, or bwd_fa3_lookahead",
            p.attn.head_dim
        ));
    }
    supports_tile(p, dev, t)
}

/// Where 128 query rows a step measured faster than `bwd_fa3_lookahead`'s 64 at d64 (H200, main
/// at 18d83d3, 2026-11-29, both in one call, two rounds at eight shapes; ledger row B9): causal
/// at 4,096 query rows or more (B4 H16 S4096 +2 %, B2 H32 S8192 +3 to +4 %, B1 H16 S16384 +3 to
/// +5 %), non-causal at 16,384 or more (B1 H16 S16384 +0.4 to +3.6 %), and the deterministic mode
/// (B4 H16 S4096 176.5 against 159.1 TFLOPS, +11 %: one ordered dQ add per 128 rows instead of
/// two). Elsewhere the lookahead stays: B4 H16 S4096 -1 %, B8 H16 S2048 -6 % (causal -3 %), B16
/// H16 S1024 -9 % (shorter walks: the 2-stage ring and the step's larger tile weigh more).
pub fn m128_wins(p: &BackwardProblem) -> bool {
    let a = &p.attn;
    a.head_dim == DIM
        && (p.deterministic || (a.causal && a.seqlen_q >= 4096) || a.seqlen_q >= 16384)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;

    #[test]
    fn the_tile_fits_with_two_stages_and_one_ds_buffer() {
        let t = tile(false);
        // K, V 32 KB; 2 stages of Q and dO 64 KB; one dSᵀ [128][128] 32 KB; two dQ tiles
        // [128][64] fp32 64 KB; LSE and D 2 KB; barriers; 1 KB of alignment
        assert_eq!(
            t.smem_bytes(),
            1024 + 32768 + 65536 + 32768 + 2048 + 65536 + 40
        );
        assert!(t.smem_bytes() <= 227 * 1024);
        let more = WgmmaBwdTile { stages: 3, ..t };
        assert!(more.smem_bytes() > 227 * 1024);
        let label = t.spec("sm_90a", DTYPES[0]).label();
        assert!(label.starts_with("bwd_fa3_lookahead"), "{label}");
        assert!(
            label.contains("KILN_BM=128") && label.contains("KILN_BWD_SAHEAD=1"),
            "{label}"
        );
        // the 64-row tiles keep their labels (no KILN_BM)
        let old = WgmmaBwdTile::staged_for(64, false, DqAdd::TensorTile);
        assert!(!old.spec("sm_90a", DTYPES[0]).label().contains("KILN_BM"));
        let h100 = DeviceInfo::h100_sxm();
        let p = |d| BackwardProblem::new(AttentionProblem::new(1, 2, 129, d), true);
        assert!(BwdFa3M128.supports(&p(64), &h100).is_ok());
        assert!(BwdFa3M128
            .supports(&p(128), &h100)
            .unwrap_err()
            .contains("use 64"));
        let v = BwdFa3M128.variants("sm_90a");
        assert_eq!(v.len(), 4);
        let unique: std::collections::HashSet<_> = v.iter().map(|s| s.label()).collect();
        assert_eq!(unique.len(), 4);
        assert!(BwdFa3M128.rung() > super::super::bwd_fa3_lookahead::BwdFa3Lookahead.rung());
    }

    /// The eight d64 shapes measured on an H200 (18d83d3, two rounds) each get the version that
    /// was faster there, and no other head dim gets this one.
    #[test]
    fn the_default_takes_it_where_it_measured_faster() {
        let shape = |b, h, s, causal, det| {
            let mut a = AttentionProblem::new(b, h, s, 64);
            a.causal = causal;
            BackwardProblem::new(a, det)
        };
        let measured = [
            // (batch, heads, seqlen, causal, m128 faster)
            (4, 16, 4096, false, false),
            (4, 16, 4096, true, true),
            (1, 16, 16384, false, true),
            (1, 16, 16384, true, true),
            (8, 16, 2048, false, false),
            (8, 16, 2048, true, false),
            (16, 16, 1024, false, false),
            (2, 32, 8192, true, true),
        ];
        for (b, h, s, causal, wins) in measured {
            assert_eq!(
                BwdFa3M128.by_default_for(&shape(b, h, s, causal, false)),
                wins,
                "B{b} H{h} S{s} causal {causal}"
            );
        }
        // deterministic: B4 H16 S4096 176.5 against 159.1 TFLOPS
        assert!(BwdFa3M128.by_default_for(&shape(4, 16, 4096, false, true)));
        let mut d128 = shape(1, 16, 16384, true, true);
        d128.attn.head_dim = 128;
        assert!(!BwdFa3M128.by_default_for(&d128));
    }

    /// Every variant compiles for sm_90a with no local memory, no wgmma serialisation (ptxas's
    /// C751x notes) and its register split honoured (C7507, C7508: setmaxnreg ignored).
    #[test]
    fn every_variant_compiles_without_spills() {
        crate::ops::attention_backward::assert_compiles_clean(
            BwdFa3M128.variants("sm_90a"),
            &["C751", "C7507", "C7508"],
        );
    }
}
