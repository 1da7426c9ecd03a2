//! Host side of `bwd_fa3_lookahead.cu` with its dQ tiles added one block late (the define
//! `KILN_BWD_DQ_LATE`): `bwd_fa3_lookahead`'s block, walk and maps with two staging tiles a
//! warpgroup. Each block's dQ tile is stored with no fence or barrier of its own; the dSᵀ fence of
//! the next block (which orders every earlier shared store of the thread for the async proxy)
//! and its dSᵀ barrier make it readable, and one thread adds it by tensor reduce right after that
//! barrier; the last block's tile is fenced, met and added after the loop. H200 profiles of
//! `bwd_fa3_lookahead` (2026-11-29) put 17.6 % (d128) and 13.9 % (d64) of the stall samples in
//! the dQ tile's stores, fence, barrier and reduce; the fence after the stores and the warps'
//! arrival at the tile's barrier alone held about 4 % at d128 and 6 % at d64 (long_sb: waiting for
//! the stores to land). Deterministic mode: the ordered atomics, as before. Shared memory: 231,464
//! B at d128 (of 232,448), 199,752 at d64. Measured slower than `bwd_fa3_lookahead` (ledger B8),
//! so not the default; its kernels compile when asked for, outside the variant budget (since
//! 2026-11-30: their four made room for `bwd_fa3_tail`'s, the default's split kernels).

use super::bwd_fa3_wgmma::wgmma_knobs;
use super::bwd_fa3_wgmma::{launch_tile, supports_tile, Ahead, DqAdd, WgmmaBwdTile};
use super::knobs::Knobs;
use super::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::overrides::AttentionOverrides;

pub struct BwdFa3DqLate;

/// Its tile at head dim `d`: `bwd_fa3_lookahead`'s (Sᵀ ahead) with two dQ tiles a warpgroup.
fn tile(d: usize) -> WgmmaBwdTile {
    WgmmaBwdTile {
        ahead: Ahead::SAhead,
        dq_late: true,
        ..WgmmaBwdTile::staged_for(d, false, DqAdd::TensorTile)
    }
}

impl AttentionBackwardKernel for BwdFa3DqLate {
    fn name(&self) -> &'static str {
        "bwd_fa3_dq_late"
    }
    fn summary(&self) -> &'static str {
        "bwd_fa3_lookahead with two dQ tiles a warpgroup, each added after the next block's dS^T barrier (no fence or barrier of its own)"
    }
    fn rung(&self) -> u32 {
        7
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        supports_tile(p, dev, tile(p.attn.head_dim))
    }
    fn variants(&self, _arch: &str) -> Vec<KernelSpec> {
        // never dispatched (slower than `bwd_fa3_lookahead`, ledger B8): compiled when asked for,
        // outside the variant budget (its test compiles them)
        Vec::new()
    }
    fn launch_knobs(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
        o: &AttentionOverrides,
    ) -> Result<()> {
        launch_tile(self.name(), ctx, p, ops, o, tile(p.attn.head_dim))
    }
    fn knobs(&self, p: &BackwardProblem) -> Knobs {
        wgmma_knobs(p, &tile(p.attn.head_dim))
    }
    fn by_default(&self) -> bool {
        // not until the device shows it faster than bwd_fa3_lookahead
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::{AttentionProblem, DTYPES};
    use crate::ops::attention_backward::bwd_fa3_wgmma::BWD_WGMMA_DIMS;

    #[test]
    fn two_dq_tiles_fit_at_both_head_dims() {
        for d in BWD_WGMMA_DIMS {
            let (t, one) = (
                tile(d),
                WgmmaBwdTile {
                    dq_late: false,
                    ..tile(d)
                },
            );
            // a second [64][64] fp32 tile a warpgroup (d128 by columns, d64 by keys)
            assert_eq!(t.smem_bytes() - one.smem_bytes(), 2 * 64 * 64 * 4);
            assert!(t.smem_bytes() <= 227 * 1024, "d{d}: {}", t.smem_bytes());
            let label = t.spec("sm_90a", DTYPES[0]).label();
            assert!(label.starts_with("bwd_fa3_lookahead"), "{label}");
            assert!(label.contains("KILN_BWD_DQ_LATE=1"), "{label}");
            assert!(!one
                .spec("sm_90a", DTYPES[0])
                .label()
                .contains("KILN_BWD_DQ_LATE"));
        }
        assert_eq!(tile(128).smem_bytes(), 231_464);
        assert_eq!(tile(64).smem_bytes(), 199_752);
        let h100 = DeviceInfo::h100_sxm();
        let p = |d| BackwardProblem::new(AttentionProblem::new(1, 2, 129, d), true);
        assert!(BwdFa3DqLate.supports(&p(128), &h100).is_ok());
        assert!(BwdFa3DqLate.supports(&p(64), &h100).is_ok());
        assert!(BwdFa3DqLate
            .supports(&p(256), &h100)
            .unwrap_err()
            .contains("use 64, 128"));
        assert!(BwdFa3DqLate.variants("sm_90a").is_empty());
        assert!(!BwdFa3DqLate.by_default());
    }

    /// Its kernels (asked for by name) compile for sm_90a with no local memory, no wgmma serialisation (ptxas's
    /// C751x notes) and its register split honoured (C7507, C7508: setmaxnreg ignored).
    #[test]
    fn every_variant_compiles_without_spills() {
        let v = crate::ops::attention_backward::bwd_fa3_wgmma::variants_of("sm_90a", tile);
        crate::ops::attention_backward::assert_compiles_clean(v, &["C751", "C7507", "C7508"]);
    }
}
