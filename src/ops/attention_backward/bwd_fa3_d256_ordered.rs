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
//! bounds). Problems that are not deterministic run `bwd_fa3_d256_tma`. The deterministic default
//! at d256 since 2026-11-30 (ledger D14, D15: 0.60-0.70x the non-deterministic run in two rounds,
//! where the ordered atomics it replaces ran 0.30-0.54x).
//!   `bwd_fa3_d256_ordered_early` (`KILN_D256_DET=2`): the same, each adder waiting for its
//!   previous reduce's completion, bumping and reading its next counter before the consumers meet
//!   rather than at the block's first product and at the add (the first round, H200 2026-11-30:
//!   the ordered reduces 0.60-0.70x the non-deterministic run, a step ~1.9 us longer, about a
//!   reduce's completion). Refuted in round 2 (0.92-0.98x the first form, ledger D15); kept for
//!   `bwd_fa3_d256_chains`, whose kernel it is.
//!   `bwd_fa3_d256_chains` (`bwd_fa3_d256_ordered_early`'s kernel, the argument block's
//!   `dq_chains` at 2; `bwd_fa3_d256_chains4`: 4): the fixed order split into interleaved chains,
//!   rank r adding into chain r mod c, each chain with its own fp32 accumulator and counters, the
//!   postprocess summing the chains in order (runs stay bitwise equal). With one chain consecutive
//!   adders of a query block are one step apart (gs = 1 at d256's shapes, causal or rotated), so
//!   the hop from one adder's reduce to the next one's (completion, bump, acquire) bounds the
//!   step; with c chains it has c steps. The early form's late bump, which cost it the hop with
//!   one chain, is then free, and it keeps the completion wait and the counter's round trip off
//!   the warpgroups' path. Cost: (c - 1) more fp32 dQ accumulators zeroed and read (256 MiB each
//!   at B1 H16 S16384). No variant of its own. Refuted in its first round (H200, 2026-11-30,
//!   ledger D22, D23): two chains 0.68-0.92x one chain, four 0.56-0.70x, slower with every chain
//!   and most at S16384 (the live dQ in the L2 grows with the chains, docs/attention-backward.md);
//!   off, to be deleted once it has lost a second round.

use super::bwd_fa3_d256::{self, BwdFa3D256, D256, DQ_BOX_COLS};
use super::bwd_fa3_wgmma::{launch_main, Sched};
use super::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::attention::DTYPES;
use crate::ops::gemm::DType;

/// A d256 ordered-reduce version: `early`, the completion wait, bump and counter read before the
/// consumers meet (`KILN_D256_DET=2`); `chains`, the fixed order's chains (1, 2 or 4); `rotated`,
/// its problems that are not deterministic run on the ordered kernel's rotated walks (non-causal)
/// with no order of adds, where the others run `bwd_fa3_d256_tma`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BwdFa3D256Ordered {
    pub early: bool,
    pub chains: u32,
    pub rotated: bool,
}

impl BwdFa3D256Ordered {
    /// `bwd_fa3_d256_ordered`: the deterministic default at d256.
    pub const ORDERED: Self = BwdFa3D256Ordered {
        early: false,
        chains: 1,
        rotated: false,
    };
    /// `bwd_fa3_d256_ordered_early`.
    pub const EARLY: Self = BwdFa3D256Ordered {
        early: true,
        chains: 1,
        rotated: false,
    };
    /// `bwd_fa3_d256_chains`.
    pub const CHAINS: Self = BwdFa3D256Ordered {
        early: true,
        chains: 2,
        rotated: false,
    };
    /// `bwd_fa3_d256_chains4`.
    pub const CHAINS4: Self = BwdFa3D256Ordered {
        early: true,
        chains: 4,
        rotated: false,
    };
    /// `bwd_fa3_d256_rotated`: a diagnostic, `bwd_fa3_d256_ordered` whose problems that are not
    /// deterministic run on its rotated walks (non-causal) without the order: what the walk alone
    /// costs beside `bwd_fa3_d256_tma`'s, where every block of a head is on the same query tile.
    pub const ROTATED: Self = BwdFa3D256Ordered {
        early: false,
        chains: 1,
        rotated: true,
    };
    /// Every version, in the registry's order.
    pub const ALL: [Self; 5] = [
        Self::ORDERED,
        Self::EARLY,
        Self::CHAINS,
        Self::CHAINS4,
        Self::ROTATED,
    ];
}

/// The kernel for `dtype`: the staged version's with the define, 1 or (`early`) 2 (`p16`:
/// `KILN_BWD_D256_P16`).
pub fn spec(arch: &str, dtype: DType, early: bool, p16: bool) -> KernelSpec {
    bwd_fa3_d256::spec(arch, dtype, D256::Staged, p16).define("KILN_D256_DET", 1 + early as u32)
}

impl AttentionBackwardKernel for BwdFa3D256Ordered {
    fn name(&self) -> &'static str {
        match (self.early, self.chains) {
            _ if self.rotated => "bwd_fa3_d256_rotated",
            (false, _) => "bwd_fa3_d256_ordered",
            (true, 1) => "bwd_fa3_d256_ordered_early",
            (true, 2) => "bwd_fa3_d256_chains",
            (true, _) => "bwd_fa3_d256_chains4",
        }
    }
    fn summary(&self) -> &'static str {
        match (self.early, self.chains) {
            _ if self.rotated => "bwd_fa3_d256_ordered whose non-deterministic runs take its rotated walks without the order (a diagnostic of the walk's cost)",
            (false, _) => "bwd_fa3_d256_tma whose deterministic mode adds the staged dQ tiles by TMA reduce in the dQ writer's fixed order, on its rotated (causal: reversed) walks",
            (true, 1) => "bwd_fa3_d256_ordered with each adder's completion wait, bump and next counter read before the consumers meet",
            (true, 2) => "bwd_fa3_d256_ordered_early with the fixed order in two interleaved chains (even and odd ranks), an fp32 dQ accumulator and counters each, summed in order",
            (true, _) => "bwd_fa3_d256_chains with four chains",
        }
    }
    fn rung(&self) -> u32 {
        11 + self.early as u32 + self.chains.trailing_zeros() + 4 * self.rotated as u32
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        BwdFa3D256(D256::Staged).supports(p, dev)
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        // the deterministic default's kernels (its preprocess and postprocess are the other d256
        // versions'); the early form's compile when asked for, outside the variant budget (the
        // test below compiles them)
        if *self == Self::ORDERED {
            DTYPES
                .iter()
                .map(|&dt| spec(arch, dt, false, false))
                .collect()
        } else {
            Vec::new()
        }
    }
    fn launch(&self, ctx: &Context, p: &BackwardProblem, ops: &BackwardOperands) -> Result<()> {
        if !p.deterministic && !self.rotated {
            return BwdFa3D256(D256::Staged).launch(ctx, p, ops);
        }
        let main = spec(
            &ctx.arch(),
            p.attn.dtype,
            self.early,
            ctx.overrides.attention.bwd_d256_p16,
        );
        // det_writer: the argument block's order of adds and SMs (`det_args`; its writer count
        // and launch order are ignored by this kernel); the chains of that order
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
            Sched {
                det_chains: self.chains,
                rotate: self.rotated,
                ..Sched::of(ctx)
            },
        )
    }
    fn by_default(&self) -> bool {
        false
    }
    /// The deterministic mode's default at d256 (H200, 2026-11-30, ledger D14, D15: verified over
    /// two and three waves, GQA causal f16 and Sq 65 Skv 200, runs bitwise equal; in one process
    /// with the non-deterministic run, 0.60-0.70x it at B4 H16 S4096 and B1 H16 S16384, causal or
    /// not, in two rounds, where the ordered atomics of `bwd_fa3_d256_tma` ran 0.30-0.54x). Not
    /// the non-deterministic mode's (it runs `bwd_fa3_d256_tma` there anyway).
    fn by_default_for(&self, p: &BackwardProblem) -> bool {
        *self == Self::ORDERED && p.deterministic
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;
    use crate::ops::registry::Registry;

    #[test]
    fn they_take_d256_by_name_and_the_first_form_is_the_deterministic_default() {
        let h100 = DeviceInfo::h100_sxm();
        let p = |d, det| BackwardProblem::new(AttentionProblem::new(1, 2, 129, d), det);
        let r = Registry::default();
        let names: Vec<&str> = BwdFa3D256Ordered::ALL.iter().map(|v| v.name()).collect();
        assert_eq!(
            names,
            [
                "bwd_fa3_d256_ordered",
                "bwd_fa3_d256_ordered_early",
                "bwd_fa3_d256_chains",
                "bwd_fa3_d256_chains4",
                "bwd_fa3_d256_rotated"
            ]
        );
        for v in BwdFa3D256Ordered::ALL {
            assert!(v.supports(&p(256, true), &h100).is_ok());
            assert!(v.supports(&p(128, true), &h100).is_err());
            // only the default's kernels count in `kiln check` (the early form's: the same
            // kernel for the chains, a run-time argument)
            let n = if v == BwdFa3D256Ordered::ORDERED {
                2
            } else {
                0
            };
            assert_eq!(v.variants("sm_90a").len(), n);
            let k = r
                .select_attention_backward(&p(256, true), &h100, Some(v.name()))
                .unwrap();
            assert_eq!(k.name(), v.name());
            let label = spec("sm_90a", DTYPES[0], v.early, false).label();
            // (the diagnostic's kernel is the default's)
            assert_eq!(v.rotated, v == BwdFa3D256Ordered::ROTATED);
            let det = format!("KILN_D256_DET={}", 1 + v.early as u32);
            assert!(
                label.contains(&det) && label.contains("KILN_D256_DQ=1"),
                "{label}"
            );
            assert_eq!(
                v.by_default_for(&p(256, true)),
                v == BwdFa3D256Ordered::ORDERED
            );
            assert!(!v.by_default_for(&p(256, false)));
        }
        // the deterministic default at d256; the non-deterministic one stays the staged version,
        // and d64/d128 keep the two writers
        let pick = |d, det| {
            r.select_attention_backward(&p(d, det), &h100, None)
                .unwrap()
                .name()
        };
        assert_eq!(pick(256, true), "bwd_fa3_d256_ordered");
        assert_eq!(pick(256, false), "bwd_fa3_d256_tma");
        assert_eq!(pick(128, true), "bwd_fa3_ordered_w2");
        assert_eq!(pick(64, true), "bwd_fa3_ordered_w2");
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
