//! Host side of `bwd_fa3_lookahead.cu` at 128 query rows a step with dQ split by query rows (the
//! define `KILN_DQ_SPLIT=2`): `bwd_fa3_m128`'s block, where each warpgroup computes dQ for its 64
//! keys over all 128 rows and both add into every element, changed so that the warpgroups meet
//! once every dSᵀ row is stored and warpgroup c computes dQ for the step's rows 64c .. 64c + 63
//! over all 128 keys (one m64n64k128 product from its dSᵀ box).
//!
//! Why: an H200 profile of `bwd_fa3_lookahead` at d64 B4 H16 S4096 (2026-11-29, ncu speed of light)
//! put the L2 at 73.5 % of its peak and the SMs at 44 %: a 64-row step moves 16 KB of Q and dO in
//! and 32 KB of dQ partials out through the reduce (64 rows x 64 columns fp32, twice: the key
//! split's two warpgroups each add the whole tile), as a 128-row step does 32 and 64 KB. Split by
//! rows each element is added once a block: 32 KB of reduce a 128-row step instead of 64, a
//! third less L2 traffic in all; dQ takes 32 accumulators a warpgroup instead of 64; the staging
//! tiles shrink to [64][64] fp32 each, which leaves room for the second dSᵀ buffer that the meet
//! needs (a block's rows stored while the other warpgroup may still read the previous block's).
//! The cost: the 256-thread barrier of the column split at every step in place of each
//! warpgroup's own. Deterministic mode: the ordered atomics, each warpgroup its own rows. Not the
//! default until the device shows it verified and faster than `bwd_fa3_m128` and
//! `bwd_fa3_lookahead` at d64.

use super::bwd_fa3_m128;
use super::bwd_fa3_wgmma::wgmma_knobs;
use super::bwd_fa3_wgmma::{launch_tile, WgmmaBwdTile};
use super::knobs::Knobs;
use super::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::attention::DTYPES;
use crate::overrides::AttentionOverrides;

pub struct BwdFa3M128Rows;

/// Its tile: `bwd_fa3_m128`'s (d64, 128 rows a step, 2 stages, the next block's Sᵀ early) with dQ
/// split by query rows.
pub(super) fn tile() -> WgmmaBwdTile {
    WgmmaBwdTile {
        dq_split: 2,
        ..bwd_fa3_m128::tile(false)
    }
}

impl AttentionBackwardKernel for BwdFa3M128Rows {
    fn name(&self) -> &'static str {
        "bwd_fa3_m128_rows"
    }
    fn summary(&self) -> &'static str {
        "bwd_fa3_m128 with dQ split by query rows (each warpgroup 64 rows over all 128 keys): each dQ element added once a block"
    }
    fn rung(&self) -> u32 {
        7
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        bwd_fa3_m128::supports_m128(p, dev, tile())
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        // its main kernels only: the preprocess and postprocess are the default's, compiled with
        // its versions
        DTYPES.iter().map(|&dt| tile().spec(arch, dt)).collect()
    }
    fn launch_knobs(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
        o: &AttentionOverrides,
    ) -> Result<()> {
        launch_tile(self.name(), ctx, p, ops, o, tile())
    }
    fn knobs(&self, p: &BackwardProblem) -> Knobs {
        wgmma_knobs(p, &tile())
    }
    fn by_default(&self) -> bool {
        false
    }
    /// Not the default anywhere since `bwd_fa3_m128_fma` (this tile with dSᵀ in packed bf16
    /// pairs) measured 1.025-1.04x faster at its shapes (H200, 2026-11-29, mid-way call on
    /// 5e97a8c); it was the default at d64, non-causal, not deterministic, from 4,096 query rows
    /// since 4cad1b1 (final call of bc5de42: B4 H16 S4096 427.4 TFLOPS against
    /// `bwd_fa3_lookahead`'s 412.9 and `bwd_fa3_m128`'s 408.5; B1 H16 S16384 454.1 against 438.8
    /// and 443.4), a rule `bwd_fa3_m128_fma` keeps.
    fn by_default_for(&self, _p: &BackwardProblem) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;

    #[test]
    fn the_row_split_fits_two_ds_buffers_in_the_staging_tiles_half() {
        let (t, m128) = (tile(), bwd_fa3_m128::tile(false));
        // two dSᵀ [128][128] 64 KB (m128: one, 32 KB); two dQ tiles [64][64] fp32 32 KB (m128:
        // [128][64], 64 KB): the same total
        assert_eq!(t.smem_bytes(), m128.smem_bytes());
        assert_eq!(
            t.smem_bytes(),
            1024 + 32768 + 65536 + 65536 + 2048 + 32768 + 40
        );
        let label = t.spec("sm_90a", DTYPES[0]).label();
        assert!(
            label.contains("KILN_DQ_SPLIT=2") && label.contains("KILN_BM=128"),
            "{label}"
        );
        let h100 = DeviceInfo::h100_sxm();
        let p = |d| BackwardProblem::new(AttentionProblem::new(1, 2, 129, d), true);
        assert!(BwdFa3M128Rows.supports(&p(64), &h100).is_ok());
        assert!(BwdFa3M128Rows.supports(&p(128), &h100).is_err());
        assert!(!BwdFa3M128Rows.by_default_for(&p(64)));
    }

    /// Every variant compiles for sm_90a with no local memory, no wgmma serialisation (ptxas's
    /// C751x notes) and its register split honoured (C7507, C7508: setmaxnreg ignored).
    #[test]
    fn every_variant_compiles_without_spills() {
        crate::ops::attention_backward::assert_compiles_clean(
            BwdFa3M128Rows.variants("sm_90a"),
            &["C751", "C7507", "C7508"],
        );
    }
}
