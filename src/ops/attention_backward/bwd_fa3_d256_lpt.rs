//! `bwd_fa3_d256_lpt`: the d256 default's kernels (`bwd_fa3_d256_tma`, no variant of its own)
//! with the causal blocks launched longest walk first ([`super::lpt`]: chunks of SMs / key blocks
//! (key/value head, batch) pairs, key block slowest within a chunk), as `bwd_fa3_tail` asks at
//! d64/d128. A version, not only the knob, so that `kiln attn bench --backward --version
//! bwd_fa3_d256_tma --version bwd_fa3_d256_lpt` times the two orders in one process: the knob
//! `KILN_BWD_LPT=1` at d256, timed in alternate processes on 2026-11-30, moved within their ±6 %.
//!
//! Why (issue 47: d256 B4 H16 S4096 causal at 0.999x cuDNN in both rounds of main 34f2fa4): one
//! CTA a SM (231 KB of shared memory), 4,096 blocks whose causal walks run 64 .. 1 steps (key
//! block nb walks query blocks nb .. 63). In the grid's order (key blocks fastest) each head's
//! short walks come right after its long ones, but the last heads' long walks start only near the
//! end: a list schedule of the walks onto 132 SMs (a block its steps plus 0.5-2 steps of fixed
//! cost) ends 2.7-2.9 % past the mean; longest first in chunks of 2 heads, 0.05-0.14 % past it.
//! Non-causal walks are all equal: the order changes nothing there (the launch is the default's).
//! Deterministic problems run the staged kernel's deterministic mode, the ordered atomics
//! (`lpt_heads` is 0 there; the deterministic default at d256 causal is `bwd_fa3_d256_w2`, which this
//! does not touch).
//! `KILN_BWD_LPT=0` runs the grid's order here too (the knob, where set, wins).
//!
//! The default for causal d256 problems that are not deterministic from 2026-11-30 (ledger D40)
//! until `bwd_fa3_d256_persist`'s (2026-12-01, D81: the same order over its counter), which it
//! backs where the persistent kernel does not fit:
//! at B4 H16 S4096 causal it took 1.77 % fewer cycles than the grid's order in the early ncu
//! (main 5e674b5, one launch each, SMs idle 0.98 % against 3.08 %) and ran 1.017x and 1.018x
//! `bwd_fa3_d256_tma` interleaved in one process, both orders (round 1, merged 263eb42), verified
//! (the d256 quick suite 18/18, 6 of 6 deterministic runs bitwise; B1 H9 S2049 causal over chunks
//! of 4 heads; GQA ragged BHSD f16 causal). `--version bwd_fa3_d256_tma` keeps the grid's order
//! for the A/B.

use super::bwd_fa3_d256::{self, D256};
use super::bwd_fa3_wgmma::Sched;
use super::knobs::Knobs;
use super::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::overrides::AttentionOverrides;

pub struct BwdFa3D256Lpt;

/// The order this version asks for under the knob `KILN_BWD_LPT` (`knob`; unset: longest first).
pub fn lpt_asked(knob: Option<bool>) -> Option<bool> {
    Some(knob.unwrap_or(true))
}

impl AttentionBackwardKernel for BwdFa3D256Lpt {
    fn name(&self) -> &'static str {
        "bwd_fa3_d256_lpt"
    }
    fn summary(&self) -> &'static str {
        "bwd_fa3_d256_tma with the causal blocks launched longest walk first, in chunks of SMs / key blocks heads"
    }
    fn rung(&self) -> u32 {
        // above the staged version it runs, beside the pair, below the ordered writers
        bwd_fa3_d256::RUNG_STAGED + 1
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        bwd_fa3_d256::supports_staged(p, dev)
    }
    fn variants(&self, _arch: &str) -> Vec<KernelSpec> {
        // `bwd_fa3_d256_tma`'s kernels, counted there: the order is a run-time argument
        Vec::new()
    }
    fn launch_knobs(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
        o: &AttentionOverrides,
    ) -> Result<()> {
        let main = bwd_fa3_d256::spec(&ctx.arch(), p.attn.dtype, D256::Staged, o.bwd_d256_p16);
        let sched = Sched {
            lpt: lpt_asked(o.bwd_lpt),
            ..Sched::of(o)
        };
        bwd_fa3_d256::launch_staged(self.name(), ctx, p, ops, &main, false, sched)
    }
    fn knobs(&self, p: &BackwardProblem) -> Knobs {
        bwd_fa3_d256::d256_knobs(p, 1, true)
    }
    /// The default where it measured faster (ledger D40): causal, not deterministic (the
    /// deterministic default at d256 causal is `bwd_fa3_d256_w2`, with its own order). Non-causal
    /// problems launch the same as `bwd_fa3_d256_tma`, which stays their default by name.
    fn by_default_for(&self, p: &BackwardProblem) -> bool {
        p.attn.causal && !p.deterministic
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;
    use crate::ops::attention_backward::lpt::{lpt_block, lpt_heads};
    use crate::ops::registry::Registry;

    fn causal(b: usize, h: usize, s: usize) -> BackwardProblem {
        let mut a = AttentionProblem::new(b, h, s, 256);
        a.causal = true;
        BackwardProblem::new(a, false)
    }

    #[test]
    fn it_is_the_causal_d256_fallback_and_adds_no_variant() {
        let h100 = DeviceInfo::h100_sxm();
        let r = Registry::default();
        let p = causal(4, 16, 4096);
        assert!(BwdFa3D256Lpt.supports(&p, &h100).is_ok());
        let d128 = BackwardProblem::new(AttentionProblem::new(1, 2, 129, 128), false);
        assert!(BwdFa3D256Lpt.supports(&d128, &h100).is_err());
        assert!(BwdFa3D256Lpt.variants("sm_90a").is_empty());
        // the default for causal problems below `bwd_fa3_d256_persist` (the default above it,
        // which takes the same order); non-causal ones fall back to `bwd_fa3_d256_tma` (the same
        // launch), which also runs the grid's order by name
        assert!(BwdFa3D256Lpt.by_default_for(&p));
        let k = r.select_attention_backward(&p, &h100, None).unwrap();
        assert_eq!(k.name(), "bwd_fa3_d256_persist");
        let free = BackwardProblem::new(AttentionProblem::new(4, 16, 4096, 256), false);
        assert!(!BwdFa3D256Lpt.by_default_for(&free));
        let k = r
            .select_attention_backward(&p, &h100, Some("bwd_fa3_d256_lpt"))
            .unwrap();
        assert_eq!(k.name(), "bwd_fa3_d256_lpt");
        let k = r
            .select_attention_backward(&p, &h100, Some("bwd_fa3_d256_tma"))
            .unwrap();
        assert_eq!(k.name(), "bwd_fa3_d256_tma");
        // the deterministic default at d256 is untouched
        let det = BackwardProblem::new(p.attn, true);
        let k = r.select_attention_backward(&det, &h100, None).unwrap();
        assert_eq!(k.name(), "bwd_fa3_d256_w2");
    }

    #[test]
    fn it_asks_for_the_order_unless_the_knob_says_0() {
        assert_eq!(lpt_asked(None), Some(true));
        assert_eq!(lpt_asked(Some(true)), Some(true));
        assert_eq!(lpt_asked(Some(false)), Some(false));
        // at the causal d256 shapes: chunks of 2 heads at B4 H16 S4096 (64 key blocks),
        // 1 at B1 H16 S16384 (256); nothing for non-causal or deterministic problems
        let p = causal(4, 16, 4096);
        assert_eq!(lpt_heads(lpt_asked(None), &p, true, 64, 132), 2);
        assert_eq!(
            lpt_heads(lpt_asked(None), &causal(1, 16, 16384), true, 256, 132),
            1
        );
        let free = BackwardProblem::new(AttentionProblem::new(4, 16, 4096, 256), false);
        assert_eq!(lpt_heads(lpt_asked(None), &free, true, 64, 132), 0);
        let det = BackwardProblem::new(p.attn, true);
        assert_eq!(lpt_heads(lpt_asked(None), &det, true, 64, 132), 0);
        assert_eq!(lpt_heads(lpt_asked(Some(false)), &p, true, 64, 132), 0);
    }

    /// The list schedule behind the prediction (ledger D40): 4,096 causal walks of B4 H16 S4096
    /// (key block nb: 64 - nb steps, plus one step of fixed cost) onto 132 SMs, one CTA each,
    /// each block to the SM that frees first, in launch order. The grid's order ends about 2.8 %
    /// past the mean; longest first in chunks of 2 heads within 0.2 %.
    #[test]
    fn longest_first_ends_the_causal_d256_grid_within_a_fraction_of_a_step() {
        let (nx, ny, nz, sms) = (64u32, 16u32, 4u32, 132usize);
        let makespan = |order: &dyn Fn(u32) -> u32| {
            let mut free = vec![0.0f64; sms];
            for l in 0..nx * ny * nz {
                let w = (nx - order(l)) as f64 + 1.0;
                let (i, _) = free
                    .iter()
                    .enumerate()
                    .min_by(|a, b| a.1.total_cmp(b.1))
                    .unwrap();
                free[i] += w;
            }
            free.iter().cloned().fold(0.0, f64::max)
        };
        let mean = (ny * nz) as f64 * (1..=nx).map(|w| w as f64 + 1.0).sum::<f64>() / sms as f64;
        let grid = makespan(&|l| l % nx) / mean;
        let lpt = makespan(&|l| lpt_block(l, 2, nx, ny, nz).0) / mean;
        assert!(grid > 1.025 && grid < 1.035, "grid order {grid}");
        assert!(lpt < 1.002, "longest first {lpt}");
    }
}
