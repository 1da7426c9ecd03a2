//! `bwd_fa3_tail`: the d64/d128 default's kernels (`bwd_fa3_m128_fma` at d64 from 4,096 query
//! rows, `bwd_fa3_lookahead` otherwise) with the grid's end mended: the non-causal grid's last
//! partial wave split into parts ([`super::tail`]) whether or not `KILN_BWD_TAIL` is set (the knob
//! still names the parts, 2 to 4; 0 or 1: the model's choice), and the causal blocks longest walk
//! first ([`super::lpt`]) unless `KILN_BWD_LPT=0` (the default's rule takes it at d64 from 4,096
//! rows only: at d128 the A/B in alternate processes moved within their ±6 % spread, ledger B18).
//! The knobs' paths as a version, so that a bench times them beside the default in one process
//! (`--version bwd_fa3_m128_fma --version bwd_fa3_tail`):
//! timed in alternate processes the two moved 4-7 % process to process at the H200's power cap
//! (round 1a, 2026-11-30), more than the ~2 % the split is for. Not the default until the device
//! shows it faster. Its kernels are the knob's `KILN_BWD_TAIL` variants, which compile when asked
//! for, outside the variant budget.

use super::bwd_fa3_wgmma::{launch_tile, supports_tile, WgmmaBwdTile};
use super::{bwd_fa3_lookahead, bwd_fa3_m128_fma};
use super::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;

pub struct BwdFa3Tail;

/// The tile `p` runs on: the default's for its head dim and rows, with the split asked for.
fn tile(p: &BackwardProblem) -> WgmmaBwdTile {
    let a = &p.attn;
    let t = if a.head_dim == 64 && a.seqlen_q >= 4096 {
        bwd_fa3_m128_fma::tile(bwd_fa3_m128_fma::EXP_POLY)
    } else {
        bwd_fa3_lookahead::tile(a.head_dim, false, false)
    };
    WgmmaBwdTile { tail: true, ..t }
}

impl AttentionBackwardKernel for BwdFa3Tail {
    fn name(&self) -> &'static str {
        "bwd_fa3_tail"
    }
    fn summary(&self) -> &'static str {
        "the d64/d128 default's kernels with the grid's end mended: the non-causal last partial wave split into parts (dK, dV summed by the last), causal blocks longest walk first"
    }
    fn rung(&self) -> u32 {
        9
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        supports_tile(p, dev, tile(p))
    }
    fn variants(&self, _arch: &str) -> Vec<KernelSpec> {
        // the knob's `KILN_BWD_TAIL` variants, compiled when asked for (outside the variant
        // budget; `tail::tests` compiles them)
        Vec::new()
    }
    fn launch(&self, ctx: &Context, p: &BackwardProblem, ops: &BackwardOperands) -> Result<()> {
        launch_tile(self.name(), ctx, p, ops, tile(p))
    }
    fn by_default(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;

    #[test]
    fn it_runs_the_defaults_tile_with_the_split_asked_for() {
        let p = |s, d| BackwardProblem::new(AttentionProblem::new(4, 16, s, d), false);
        let m128 = bwd_fa3_m128_fma::tile(bwd_fa3_m128_fma::EXP_POLY);
        assert_eq!(tile(&p(4096, 64)), WgmmaBwdTile { tail: true, ..m128 });
        let la = bwd_fa3_lookahead::tile(128, false, false);
        assert_eq!(tile(&p(8192, 128)), WgmmaBwdTile { tail: true, ..la });
        assert!(tile(&p(2048, 64)).bm == 64 && tile(&p(2048, 64)).tail);
        let h100 = DeviceInfo::h100_sxm();
        assert!(BwdFa3Tail.supports(&p(4096, 64), &h100).is_ok());
        assert!(BwdFa3Tail.supports(&p(4096, 256), &h100).is_err());
        assert!(!BwdFa3Tail.by_default_for(&p(4096, 64)));
    }
}
