//! Host side of `kernels/attention/bwd_fa3_tma_dq.cu`: `bwd_fa3_bulk_dq`'s block (a producer warp,
//! two WGMMA warpgroups of 64 keys, dK and dV in registers, LSE and D read ahead of the wgmma
//! waits, d64 with a 4-stage ring) with each warpgroup's dQ partial staged as one swizzled tile
//! and added into the fp32 accumulator by one TMA tensor reduce-add (a rank-5 map over the
//! accumulator, `dq_acc_args`) instead of 16 bulk row adds per warp. Same arguments, maps and
//! passes as `bwd_fa3_wgmma` plus that map (its `launch_tile`); `KILN_BWD_DQ_KEYS=1` splits
//! d128's dQ by keys as for `bwd_fa3_bulk_dq`. The default at d64/d128 from its first H200 run
//! (2026-11-29: verified, 1.05-1.08x `bwd_fa3_bulk_dq`) until `bwd_fa3_lookahead`'s; the
//! choice again wherever the one above it refuses a problem.

use super::bwd_fa3_wgmma::wgmma_knobs;
use super::bwd_fa3_wgmma::{launch_tile, supports_tile, variants_of, DqAdd, WgmmaBwdTile};
use super::knobs::{Knob, Knobs};
use super::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::attention::DTYPES;
use crate::overrides::AttentionOverrides;

pub struct BwdFa3TmaDq;

/// Its tile at head dim `d`: `keys` (`KILN_BWD_DQ_KEYS`) splits d128's dQ by keys, `pingpong`
/// (`KILN_BWD_PINGPONG`) has the warpgroups take turns at Sᵀ and dPᵀ.
fn tile(d: usize, keys: bool, pingpong: bool) -> WgmmaBwdTile {
    WgmmaBwdTile {
        pingpong,
        ..WgmmaBwdTile::staged_for(d, keys, DqAdd::TensorTile)
    }
}

impl AttentionBackwardKernel for BwdFa3TmaDq {
    fn name(&self) -> &'static str {
        "bwd_fa3_tma_dq"
    }
    fn summary(&self) -> &'static str {
        "bwd_fa3_bulk_dq with each warpgroup's dQ tile added by one TMA tensor reduce-add (cp.reduce.async.bulk.tensor), not 64 row adds"
    }
    fn rung(&self) -> u32 {
        4
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        // the larger of the two d128 splits (by keys), so that the knob never makes it refuse
        supports_tile(p, dev, tile(p.attn.head_dim, true, false))
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        let mut v = variants_of(arch, |d| tile(d, false, false));
        // d128 by keys, then the turns at each split
        let more = [
            (128, true, false),
            (64, false, true),
            (128, false, true),
            (128, true, true),
        ];
        for (d, keys, pp) in more {
            for dt in DTYPES {
                v.push(tile(d, keys, pp).spec(arch, dt));
            }
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
            tile(p.attn.head_dim, o.bwd_dq_keys, o.bwd_pingpong),
        )
    }
    fn knobs(&self, p: &BackwardProblem) -> Knobs {
        let d = p.attn.head_dim;
        let mut v = wgmma_knobs(p, &tile(d, false, false));
        if d == 128 {
            v.push((Knob::DqKeys, 0));
        }
        v.push((Knob::Pingpong, 0));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;
    use crate::ops::attention_backward::bwd_fa3_wgmma::{dq_acc_args, BWD_WGMMA_DIMS};

    #[test]
    fn tiles_fit_and_drop_the_row_padding_of_the_bulk_version() {
        for d in BWD_WGMMA_DIMS {
            for keys in [false, true] {
                let (t, bulk) = (
                    tile(d, keys, false),
                    WgmmaBwdTile::staged_for(d, keys, DqAdd::BulkRows),
                );
                assert_eq!(
                    (t.d, t.stages, t.dq_split),
                    (bulk.d, bulk.stages, bulk.dq_split)
                );
                assert!(t.smem_bytes() <= 227 * 1024, "d{d}: {}", t.smem_bytes());
                // two staging tiles of 64 rows, each row 8 floats shorter
                assert_eq!(bulk.smem_bytes() - t.smem_bytes(), 2 * 64 * 8 * 4);
            }
        }
        assert_eq!(tile(128, false, false).smem_bytes(), 198_696);
        assert_eq!(tile(128, true, false).smem_bytes(), 215_080);
        assert_eq!(tile(64, false, false).smem_bytes(), 166_984);
        // the turns change no memory, only the define
        let pp = tile(128, false, true);
        assert_eq!(pp.smem_bytes(), 198_696);
        assert_ne!(
            pp.spec("sm_90a", DTYPES[0]).label(),
            tile(128, false, false).spec("sm_90a", DTYPES[0]).label()
        );
        let h100 = DeviceInfo::h100_sxm();
        let p = |d| BackwardProblem::new(AttentionProblem::new(1, 2, 129, d), true);
        assert!(BwdFa3TmaDq.supports(&p(128), &h100).is_ok());
        assert!(BwdFa3TmaDq.supports(&p(64), &h100).is_ok());
        assert!(BwdFa3TmaDq
            .supports(&p(256), &h100)
            .unwrap_err()
            .contains("use 64, 128"));
        let v = BwdFa3TmaDq.variants("sm_90a");
        assert_eq!(v.len(), 14);
        let unique: std::collections::HashSet<_> = v.iter().map(|s| s.label()).collect();
        assert_eq!(unique.len(), 14);
        assert!(v[2..]
            .iter()
            .all(|s| s.label().starts_with("bwd_fa3_tma_dq")));
        // verified (36/36 quick, deterministic bitwise, keys 18/18) and 1.05-1.08x bwd_fa3_bulk_dq
        // at three shapes on an H200 (2026-11-29): the default, above it
        assert!(BwdFa3TmaDq.by_default());
        assert!(BwdFa3TmaDq.rung() > super::super::bwd_fa3_bulk_dq::BwdFa3BulkDq.rung());
    }

    /// The accumulator [B, H, Sq, D] as [B, H, Sq, D/32, 32]: 128-byte pieces (one swizzle row),
    /// the pieces of a row 128 bytes apart, rows D·4, heads Sq·D·4; a box of 64 rows x the
    /// warpgroup's columns; rows past Sq outside dim 2 (dropped, never another head's).
    #[test]
    fn the_accumulator_map_cuts_rows_into_swizzle_rows() {
        let a = AttentionProblem::new(3, 5, 1000, 128);
        let p = BackwardProblem::new(a, false);
        let m = dq_acc_args(&p, 0x7f00_0000_0000, 64);
        assert_eq!(m.rank(), 5);
        assert_eq!(m.dims(), [32, 4, 1000, 5, 3]);
        assert_eq!(m.strides(), [128, 512, 512 * 1000, 512 * 1000 * 5]);
        assert_eq!(m.box_dims(), [32, 2, 64, 1, 1]);
        // the box's bytes are one staging tile: 64 rows x 64 fp32
        let bytes: u32 = m.box_dims().iter().product::<u32>() * 4;
        assert_eq!(bytes, 64 * 64 * 4);
        let k = dq_acc_args(
            &BackwardProblem::new(AttentionProblem::new(1, 1, 64, 64), false),
            0,
            64,
        );
        assert_eq!((k.dims()[1], k.box_dims()[1]), (2, 2));
    }

    /// Every variant compiles for sm_90a with no local memory, no wgmma serialisation (ptxas's
    /// C751x notes) and its register split honoured (C7507, C7508: setmaxnreg ignored).
    #[test]
    fn every_variant_compiles_without_spills() {
        crate::ops::attention_backward::assert_compiles_clean(
            BwdFa3TmaDq.variants("sm_90a"),
            &["C751", "C7507", "C7508"],
        );
    }
}
