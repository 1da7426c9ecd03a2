//! `bwd_fa3_tail`: the d64/d128 default's kernels (`bwd_fa3_m128_fma` at d64 from 4,096 query
//! rows, `bwd_fa3_lookahead` otherwise) with the grid's end mended: the non-causal grid's last
//! partial wave split into parts ([`super::tail`]; `KILN_BWD_TAIL` 2 to 4 names the parts, 0 runs
//! the grid whole), and the causal blocks longest walk first ([`super::lpt`]) unless
//! `KILN_BWD_LPT=0`.
//!
//! The default at d64 from 4,096 query rows and at d128, not deterministic, no window, since
//! 2026-11-30 ([`BwdFa3Tail::by_default_for`]): timed beside the older default in one process
//! (`kiln attn bench --backward --version bwd_fa3_m128_fma --version bwd_fa3_tail`) it won every
//! pair in three rounds on an H200 (ledger B20-B22): d64 B4 H16 S4096 1.022 / 1.045x, 1.056 /
//! 1.038x, 1.012 / 1.026x; d64 B1 H16 S16384 1.026 / 1.011x; d128 B2 H16 S8192 1.019x; d128 B4
//! H32 S4096 causal 1.039x and 1.020x (longest first, which the older rule took at d64 only).
//! The older default stays by name (`bwd_fa3_m128_fma`, `bwd_fa3_lookahead`: the grid whole, the
//! order longest first at d64 from 4,096 rows only) for A/B in one process. d64 below 4,096 rows
//! (the 64-row tile) is not measured: there it runs when asked for by name.

use super::bwd_fa3_wgmma::wgmma_knobs;
use super::bwd_fa3_wgmma::{
    launch_tile, supports_tile, tail_knob, tail_plan_for, WgmmaBwdTile, BN,
};
use super::knobs::Knobs;
use super::tail;
use super::{bwd_fa3_lookahead, bwd_fa3_m128_fma};
use super::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::attention::{Window, DTYPES};
use crate::overrides::AttentionOverrides;

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
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        // the split main kernels the default dispatches to (d64 on the 128-row tile, d128); a
        // problem with no split (causal, a full last wave) runs the older default's kernels, and
        // d64 below 4,096 rows (asked for by name) compiles when asked for, outside the budget
        default_tiles()
            .into_iter()
            .flat_map(|t| DTYPES.iter().map(move |&dt| t.spec(arch, dt)))
            .collect()
    }
    fn launch_knobs(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
        o: &AttentionOverrides,
    ) -> Result<()> {
        launch_tile(self.name(), ctx, p, ops, o, tile(p))
    }
    fn knobs(&self, p: &BackwardProblem) -> Knobs {
        wgmma_knobs(p, &tile(p))
    }
    fn launch_plan(
        &self,
        p: &BackwardProblem,
        dev: &DeviceInfo,
        o: &AttentionOverrides,
    ) -> Vec<String> {
        let (a, t) = (&p.attn, tile(p));
        let units = p.key_blocks(BN);
        let steps = a.group() as u32 * (a.seqlen_q as u32).div_ceil(t.bm);
        let knob = tail_knob(o.bwd_tail, t.tail);
        let mut v = vec![
            tail::grid_line(units, BN, dev.sm_count),
            format!(
                "tile: {} query rows a step, {steps} steps a key block",
                t.bm
            ),
        ];
        v.push(match tail_plan_for(knob, p, &t, dev.sm_count) {
            Some(s) => tail::split_line(&s, steps, false),
            None if a.causal => "no split (causal): the blocks longest walk first".into(),
            None => "no split: no partial last wave, the model's split no faster, deterministic, or KILN_BWD_TAIL 0".into(),
        });
        v
    }
    /// The default where it won (d64 from 4,096 rows, d128; ledger B20-B22), not deterministic
    /// (the ordered dQ counts whole key blocks) and without a window (its walks differ in
    /// length): the older default's problems at those head dims.
    fn by_default_for(&self, p: &BackwardProblem) -> bool {
        let a = &p.attn;
        let rows = a.head_dim == 128 || (a.head_dim == 64 && a.seqlen_q >= 4096);
        rows && !p.deterministic && a.window == Window::UNBOUNDED
    }
}

/// The split tiles the default dispatches to: d64's 128-row one and d128's.
fn default_tiles() -> [WgmmaBwdTile; 2] {
    [
        bwd_fa3_m128_fma::tile(bwd_fa3_m128_fma::EXP_POLY),
        bwd_fa3_lookahead::tile(128, false, false),
    ]
    .map(|t| WgmmaBwdTile { tail: true, ..t })
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
        // the default at d64 from 4,096 rows and d128, causal or not; not deterministic, no
        // window, not d64's 64-row tile
        assert!(BwdFa3Tail.by_default_for(&p(4096, 64)));
        assert!(BwdFa3Tail.by_default_for(&p(16384, 64)));
        assert!(BwdFa3Tail.by_default_for(&p(8192, 128)));
        assert!(BwdFa3Tail.by_default_for(&p(1000, 128)));
        assert!(!BwdFa3Tail.by_default_for(&p(2048, 64)));
        let mut causal = p(4096, 128);
        causal.attn.causal = true;
        assert!(BwdFa3Tail.by_default_for(&causal));
        assert!(!BwdFa3Tail.by_default_for(&BackwardProblem::new(causal.attn, true)));
        let mut w = p(4096, 128);
        w.attn.window = Window {
            left: 128,
            right: 0,
        };
        assert!(!BwdFa3Tail.by_default_for(&w));
    }

    /// Its variants are the split kernels of the two tiles the default runs, each dtype; the
    /// same specs `tail::tests` compiles clean.
    #[test]
    fn its_variants_are_the_defaults_split_kernels() {
        let v = BwdFa3Tail.variants("sm_90a");
        assert_eq!(v.len(), 4);
        let labels: std::collections::HashSet<_> = v.iter().map(|s| s.label()).collect();
        assert_eq!(labels.len(), 4);
        assert!(
            labels.iter().all(|l| l.contains("KILN_BWD_TAIL=1")),
            "{labels:?}"
        );
    }

    /// The knob: unset, only the version that asks for the split gets it; 0 runs every grid
    /// whole (the older default's arrangement in this version); 1-4 asks everywhere.
    #[test]
    fn kiln_bwd_tail_turns_the_split_off_or_on() {
        use super::super::bwd_fa3_wgmma::{tail_knob, tail_plan_for};
        assert_eq!(tail_knob(None, true), 1);
        assert_eq!(tail_knob(None, false), 0);
        assert_eq!(tail_knob(Some(0), true), 0);
        assert_eq!(tail_knob(Some(3), false), 3);
        let p = BackwardProblem::new(AttentionProblem::new(4, 16, 4096, 64), false);
        let t = tile(&p);
        let split = tail_plan_for(tail_knob(None, true), &p, &t, 132).unwrap();
        assert_eq!((split.full, split.split, split.parts), (1980, 68, 3));
        assert_eq!(tail_plan_for(tail_knob(Some(0), true), &p, &t, 132), None);
        let old = bwd_fa3_m128_fma::tile(bwd_fa3_m128_fma::EXP_POLY);
        assert_eq!(tail_plan_for(tail_knob(None, false), &p, &old, 132), None);
    }
}
