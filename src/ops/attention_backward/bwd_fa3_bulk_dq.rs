//! Host side of `kernels/attention/bwd_fa3_bulk_dq.cu`: `bwd_fa3_wgmma`'s block (a producer warp,
//! two WGMMA warpgroups of 64 keys, dK and dV in registers) with dQ staged per warpgroup in shared
//! memory and added into the fp32 accumulator by bulk reduce-adds, one 256-byte row per lane,
//! instead of per-thread atomics; LSE and D read ahead of the wgmma waits; d64 with a 4-stage
//! ring; at d128 dQ split by columns, or by keys with `KILN_BWD_DQ_KEYS=1` (no meeting between
//! the warpgroups). Same arguments, maps and passes as `bwd_fa3_wgmma` (its `launch_tile`). The
//! default at d64/d128 from its first H200 run (2026-11-29: verified, 1.03-1.05x bwd_fa3_wgmma)
//! until `bwd_fa3_tma_dq`'s, which is above it.

use super::bwd_fa3_wgmma::wgmma_knobs;
use super::bwd_fa3_wgmma::{launch_tile, supports_tile, variants_of, DqAdd, WgmmaBwdTile};
use super::knobs::{Knob, Knobs};
use super::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::attention::DTYPES;
use crate::overrides::AttentionOverrides;

pub struct BwdFa3BulkDq;

impl AttentionBackwardKernel for BwdFa3BulkDq {
    fn name(&self) -> &'static str {
        "bwd_fa3_bulk_dq"
    }
    fn summary(&self) -> &'static str {
        "bwd_fa3_wgmma with dQ staged in shared memory and added by bulk reduce-adds (cp.reduce.async.bulk), not per-thread atomics"
    }
    fn rung(&self) -> u32 {
        3
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        // the larger of the two d128 splits (by keys), so that the knob never makes it refuse
        supports_tile(
            p,
            dev,
            WgmmaBwdTile::staged_for(p.attn.head_dim, true, DqAdd::BulkRows),
        )
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        let mut v = variants_of(arch, |d| {
            WgmmaBwdTile::staged_for(d, false, DqAdd::BulkRows)
        });
        for dt in DTYPES {
            v.push(WgmmaBwdTile::staged_for(128, true, DqAdd::BulkRows).spec(arch, dt));
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
        launch_tile(
            self.name(),
            ctx,
            p,
            ops,
            o,
            WgmmaBwdTile::staged_for(p.attn.head_dim, o.bwd_dq_keys, DqAdd::BulkRows),
        )
    }
    fn knobs(&self, p: &BackwardProblem) -> Knobs {
        let d = p.attn.head_dim;
        let mut v = wgmma_knobs(p, &WgmmaBwdTile::staged_for(d, false, DqAdd::BulkRows));
        if d == 128 {
            v.push((Knob::DqKeys, 0));
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;
    use crate::ops::attention_backward::bwd_fa3_wgmma::BWD_WGMMA_DIMS;

    #[test]
    fn staged_tiles_fit_the_h100_and_keep_the_atomic_version_apart() {
        for d in BWD_WGMMA_DIMS {
            let (t, old) = (
                WgmmaBwdTile::staged_for(d, false, DqAdd::BulkRows),
                WgmmaBwdTile::for_dim(d),
            );
            assert_eq!((t.dq, old.dq), (DqAdd::BulkRows, DqAdd::Atomic));
            assert_eq!((t.d, t.dq_split), (old.d, old.dq_split));
            assert!(t.smem_bytes() <= 227 * 1024, "d{d}: {}", t.smem_bytes());
            // two staging buffers of 64 rows x (64 + 8) fp32 (both default splits give 64 columns)
            let extra = (t.stages - old.stages) * (2 * 64 * d as u32 * 2 + 2 * 64 * 4 + 16);
            assert_eq!(t.smem_bytes() - old.smem_bytes(), 2 * 64 * 72 * 4 + extra);
        }
        assert_eq!(
            WgmmaBwdTile::staged_for(64, false, DqAdd::BulkRows).stages,
            4
        );
        // KILN_BWD_DQ_KEYS: d128 by keys, 128 + 8 columns a staging row, one dSᵀ buffer
        let keys = WgmmaBwdTile::staged_for(128, true, DqAdd::BulkRows);
        assert_eq!((keys.dq_split, keys.stages), (1, 2));
        assert_eq!(keys.smem_bytes(), 219_176);
        assert_eq!(
            WgmmaBwdTile::staged_for(64, true, DqAdd::BulkRows),
            WgmmaBwdTile::staged_for(64, false, DqAdd::BulkRows)
        );
        let h100 = DeviceInfo::h100_sxm();
        let p = |d| BackwardProblem::new(AttentionProblem::new(1, 2, 129, d), true);
        assert!(BwdFa3BulkDq.supports(&p(128), &h100).is_ok());
        assert!(BwdFa3BulkDq.supports(&p(64), &h100).is_ok());
        assert!(BwdFa3BulkDq
            .supports(&p(256), &h100)
            .unwrap_err()
            .contains("use 64, 128"));
        let v = BwdFa3BulkDq.variants("sm_90a");
        assert_eq!(v.len(), 8);
        let unique: std::collections::HashSet<_> = v.iter().map(|s| s.label()).collect();
        assert_eq!(unique.len(), 8);
        assert!(v[2..]
            .iter()
            .all(|s| s.label().starts_with("bwd_fa3_bulk_dq")));
        // verified (36/36 quick, deterministic bitwise) and 1.03-1.05x bwd_fa3_wgmma at four
        // shapes on an H200 (2026-11-29): the default, above it
        assert!(BwdFa3BulkDq.by_default());
        assert!(BwdFa3BulkDq.rung() > super::super::bwd_fa3_wgmma::BwdFa3Wgmma.rung());
    }

    /// Every variant compiles for sm_90a with no local memory, no wgmma serialisation (ptxas's
    /// C751x notes) and its register split honoured (C7507, C7508: setmaxnreg ignored).
    #[test]
    fn every_variant_compiles_without_spills() {
        crate::ops::attention_backward::assert_compiles_clean(
            BwdFa3BulkDq.variants("sm_90a"),
            &["C751", "C7507", "C7508"],
        );
    }
}
