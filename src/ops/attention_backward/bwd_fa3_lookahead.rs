//! Host side of `kernels/attention/bwd_fa3_lookahead.cu`: `bwd_fa3_tma_dq`'s block, ring, maps
//! and dQ tile with the next query block's Sᵀ issued before this block's dQ is staged (so that
//! the tensor cores have work while the warpgroups store, fence and reduce dQ and start the next
//! block) and every wgmma descriptor an add on a base built once. d128 splits dQ by columns only
//! (`KILN_BWD_DQ_KEYS` is ignored: dQ's 64 accumulators by keys would not fit beside dK, dV and
//! the next Sᵀ), and the warpgroups take no turns (`KILN_BWD_PINGPONG` is ignored).
//! `KILN_BWD_NO_AHEAD=1` keeps the descriptors by adds but issues each block's Sᵀ at its top, as
//! `bwd_fa3_tma_dq` does: what each change buys, in two runs. The default at d64/d128 since its
//! first H200 run (2026-11-29): verified, 1.08-1.17x `bwd_fa3_tma_dq` (ledger row B6).

use super::bwd_fa3_wgmma::{launch_tile, supports_tile, variants_of, Ahead, DqAdd, WgmmaBwdTile};
use super::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;

pub struct BwdFa3Lookahead;

/// Its tile at head dim `d`: `bwd_fa3_tma_dq`'s (d128 by columns, d64 by keys with 4 stages);
/// `no_ahead` (`KILN_BWD_NO_AHEAD`): the descriptors by adds only.
pub(super) fn tile(d: usize, no_ahead: bool) -> WgmmaBwdTile {
    WgmmaBwdTile {
        ahead: if no_ahead {
            Ahead::DescOnly
        } else {
            Ahead::SAhead
        },
        ..WgmmaBwdTile::staged_for(d, false, DqAdd::TensorTile)
    }
}

impl AttentionBackwardKernel for BwdFa3Lookahead {
    fn name(&self) -> &'static str {
        "bwd_fa3_lookahead"
    }
    fn summary(&self) -> &'static str {
        "bwd_fa3_tma_dq with the next query block's S^T issued before this block's dQ is staged, and wgmma descriptors by adds"
    }
    fn rung(&self) -> u32 {
        5
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        supports_tile(p, dev, tile(p.attn.head_dim, false))
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        // the default walk only: `KILN_BWD_NO_AHEAD`'s (measured against it at f35f0e6, ledger
        // B6; never dispatched) compiles when asked for, outside the variant budget
        variants_of(arch, |d| tile(d, false))
    }
    fn launch(&self, ctx: &Context, p: &BackwardProblem, ops: &BackwardOperands) -> Result<()> {
        let no_ahead = ctx.overrides.attention.bwd_no_ahead;
        launch_tile(self.name(), ctx, p, ops, tile(p.attn.head_dim, no_ahead))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::{AttentionProblem, DTYPES};
    use crate::ops::attention_backward::bwd_fa3_wgmma::BWD_WGMMA_DIMS;

    #[test]
    fn tiles_are_the_tma_dq_column_split_in_another_file() {
        for d in BWD_WGMMA_DIMS {
            for no_ahead in [false, true] {
                let (t, old) = (
                    tile(d, no_ahead),
                    WgmmaBwdTile::staged_for(d, false, DqAdd::TensorTile),
                );
                assert_eq!(t.smem_bytes(), old.smem_bytes());
                assert_eq!((t.stages, t.dq_split), (old.stages, old.dq_split));
                let label = t.spec("sm_90a", DTYPES[0]).label();
                assert!(label.starts_with("bwd_fa3_lookahead"), "{label}");
                // no turns in this file; the walk as a define
                assert!(!label.contains("KILN_BWD_PP"), "{label}");
                let sa = format!("KILN_BWD_SAHEAD={}", !no_ahead as u32);
                assert!(label.contains(&sa), "{label}");
            }
        }
        let h100 = DeviceInfo::h100_sxm();
        let p = |d| BackwardProblem::new(AttentionProblem::new(1, 2, 129, d), true);
        assert!(BwdFa3Lookahead.supports(&p(128), &h100).is_ok());
        assert!(BwdFa3Lookahead.supports(&p(64), &h100).is_ok());
        assert!(BwdFa3Lookahead
            .supports(&p(256), &h100)
            .unwrap_err()
            .contains("use 64, 128"));
        let v = BwdFa3Lookahead.variants("sm_90a");
        assert_eq!(v.len(), 6);
        let unique: std::collections::HashSet<_> = v.iter().map(|s| s.label()).collect();
        assert_eq!(unique.len(), 6);
        // verified (36/36 quick, deterministic bitwise) and 1.08-1.17x bwd_fa3_tma_dq at four
        // shapes on an H200 (2026-11-29): the default, above it
        assert!(BwdFa3Lookahead.by_default());
        assert!(BwdFa3Lookahead.rung() > super::super::bwd_fa3_tma_dq::BwdFa3TmaDq.rung());
    }

    /// Every variant compiles for sm_90a with no local memory, no wgmma serialisation (ptxas's
    /// C751x notes) and its register split honoured (C7507, C7508: setmaxnreg ignored).
    #[test]
    fn every_variant_compiles_without_spills() {
        crate::ops::attention_backward::assert_compiles_clean(
            BwdFa3Lookahead.variants("sm_90a"),
            &["C751", "C7507", "C7508"],
        );
    }
}
