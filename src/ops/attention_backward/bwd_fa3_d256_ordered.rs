//! `bwd_fa3_d256_ordered`: the deterministic mode at d256 with `bwd_fa3_d256_tma`'s staged dQ
//! added by TMA reduce in a fixed order (`bwd_fa3_d256.cu` with the define `KILN_D256_DET`). The
//! other d256 versions' deterministic mode adds dQ by ordered per-thread atomics with every key
//! block walking the query blocks in the same order, so that at each query block block n waits for
//! block n - 1's adds, fence and bump: 0.30-0.55x the non-deterministic run (H200, 2026-11-30,
//! interleaved), against the 0.85x that issue 47 asks. Here each consumer's adder waits for the
//! block's turn on the (head, query block) counter and adds its staged 64 x 128 tile by one TMA
//! reduce, in the d64/d128 dQ writer's order (`DetOrder`, `det_rank`) and on its walks
//! (non-causal rotated within each wave, causal key blocks launched in reverse), so that a block's
//! turn has mostly come when it gets there. The order of adds is fixed, so runs are bitwise
//! equal; the sums are the non-deterministic staged version's in another order (its error
//! bounds). Problems that are not deterministic run `bwd_fa3_d256_tma`. Not the default until the
//! device shows it verified and faster; its kernels compile when asked for, outside the variant
//! budget.
//!   `bwd_fa3_d256_ordered_early` (`KILN_D256_DET=2`): the same, each adder waiting for its
//!   previous reduce's completion, bumping and reading its next counter before the consumers meet
//!   rather than at the block's first product and at the add (the first round, H200 2026-11-30:
//!   the ordered reduces 0.60-0.70x the non-deterministic run, a step ~1.9 us longer, about a
//!   reduce's completion).

use super::bwd_fa3_d256::{self, BwdFa3D256, D256, DQ_BOX_COLS};
use super::bwd_fa3_wgmma::{launch_main, Sched};
use super::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;

/// `BwdFa3D256Ordered(early)`: `early`, the counter read before the consumers meet.
pub struct BwdFa3D256Ordered(pub bool);

/// The kernel for `dtype`: the staged version's with the define, 1 or (`early`) 2 (`p16`:
/// `KILN_BWD_D256_P16`).
pub fn spec(arch: &str, dtype: DType, early: bool, p16: bool) -> KernelSpec {
    bwd_fa3_d256::spec(arch, dtype, D256::Staged, p16).define("KILN_D256_DET", 1 + early as u32)
}

impl AttentionBackwardKernel for BwdFa3D256Ordered {
    fn name(&self) -> &'static str {
        if self.0 {
            "bwd_fa3_d256_ordered_early"
        } else {
            "bwd_fa3_d256_ordered"
        }
    }
    fn summary(&self) -> &'static str {
        if self.0 {
            "bwd_fa3_d256_ordered with each adder's completion wait, bump and next counter read before the consumers meet"
        } else {
            "bwd_fa3_d256_tma whose deterministic mode adds the staged dQ tiles by TMA reduce in the dQ writer's fixed order, on its rotated (causal: reversed) walks"
        }
    }
    fn rung(&self) -> u32 {
        11 + self.0 as u32
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        BwdFa3D256(D256::Staged).supports(p, dev)
    }
    fn variants(&self, _arch: &str) -> Vec<KernelSpec> {
        // compiled when asked for, outside the variant budget (the test below compiles them)
        Vec::new()
    }
    fn launch(&self, ctx: &Context, p: &BackwardProblem, ops: &BackwardOperands) -> Result<()> {
        if !p.deterministic {
            return BwdFa3D256(D256::Staged).launch(ctx, p, ops);
        }
        let main = spec(
            &ctx.arch(),
            p.attn.dtype,
            self.0,
            ctx.overrides.attention.bwd_d256_p16,
        );
        // det_writer: the argument block's order of adds and SMs (`det_args`; its writer count
        // and launch order are ignored by this kernel)
        launch_main(
            self.name(),
            ctx,
            p,
            ops,
            &main,
            bwd_fa3_d256::smem_bytes(),
            bwd_fa3_d256::BN,
            Some(DQ_BOX_COLS),
            true,
            1,
            None,
            Sched::of(ctx),
        )
    }
    fn by_default(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::{AttentionProblem, DTYPES};
    use crate::ops::registry::Registry;

    #[test]
    fn they_take_d256_by_name_only() {
        let h100 = DeviceInfo::h100_sxm();
        let p = |d, det| BackwardProblem::new(AttentionProblem::new(1, 2, 129, d), det);
        let r = Registry::default();
        for early in [false, true] {
            let v = BwdFa3D256Ordered(early);
            assert!(v.supports(&p(256, true), &h100).is_ok());
            assert!(v.supports(&p(128, true), &h100).is_err());
            assert!(v.variants("sm_90a").is_empty());
            let k = r
                .select_attention_backward(&p(256, true), &h100, Some(v.name()))
                .unwrap();
            assert_eq!(k.name(), v.name());
            let label = spec("sm_90a", DTYPES[0], early, false).label();
            let det = format!("KILN_D256_DET={}", 1 + early as u32);
            assert!(
                label.contains(&det) && label.contains("KILN_D256_DQ=1"),
                "{label}"
            );
        }
        let k = r
            .select_attention_backward(&p(256, true), &h100, None)
            .unwrap();
        assert_eq!(k.name(), "bwd_fa3_d256_tma");
    }

    /// Their kernels (bf16, f16; early or not; with and without `KILN_BWD_D256_P16`) compile for
    /// sm_90a with no local memory, no wgmma serialisation and the register split honoured.
    #[test]
    fn every_variant_compiles_without_spills() {
        let mut specs = Vec::new();
        for dt in DTYPES {
            for early in [false, true] {
                for p16 in [false, true] {
                    specs.push(spec("sm_90a", dt, early, p16));
                }
            }
        }
        crate::ops::attention_backward::assert_compiles_clean(specs, &["C751", "C7507", "C7508"]);
    }
}
