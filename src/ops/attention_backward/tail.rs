//! The non-causal backward's last partial wave split into shorter blocks (`KILN_BWD_TAIL`; the
//! argument block's `tail_*`, `kernels/attention/bwd_tail.cuh`).
//!
//! A non-causal grid's key blocks all walk the same query blocks, one CTA a SM at a time: U
//! blocks on S SMs take ceil(U / S) waves of time for U / S of work. The issue's non-causal
//! shapes (d64 B4 H16 S4096 and B1 H16 S16384, d128 B2 H16 S8192) are 2,048 blocks on an H200's
//! 132 SMs, 15.52 waves: in the 16th, 68 SMs work and 64 idle, about 3 % of the call, and the
//! H200 profile of d64 B4 H16 S4096 (2026-11-29) had its SMs idle 3.7 % of the cycles. cuDNN's
//! persistent kernel idles as long (4.1 %): the two tie there (1.002 / 0.9996 / 1.003 / 0.999x in
//! four interleaved rounds, 2026-11-30). Split each of the last wave's r = U mod S key blocks
//! into P parts that walk a share of its query blocks each: r·P blocks of about 1/P the work
//! after the whole waves, so the last wave ends after ceil(r·P / S) short blocks. dQ is added
//! per query block as before; dK and dV are summed over the parts by the last one to finish.
//!
//! The model that picks P (2 to 4): a block costs its steps (query blocks walked) plus
//! [`OVERHEAD_STEPS`] (its start, the K and V loads and the first stage, dK and dV stored; and
//! for a part, its partials written and read); the time is the whole waves plus
//! ceil(r·P / S) parts, against one more whole wave unsplit.

use super::BackwardProblem;
use crate::device::Context;
use crate::error::Result;

/// A block's fixed cost in query-block steps (the model's; about 2-3 µs a block, a d64 128-row
/// step ~3.1 µs and a d128 64-row step ~2.4 µs on an H200).
pub const OVERHEAD_STEPS: f64 = 1.0;
/// At most this many parts a split key block.
pub const MAX_PARTS: u32 = 4;

/// How a grid of key blocks is split: the first `full` run whole (in the grid's order), each of
/// the last `split` is `parts` blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TailPlan {
    pub parts: u32,
    pub full: u32,
    pub split: u32,
}

impl TailPlan {
    /// Blocks in the (1D) grid.
    pub fn blocks(&self) -> u32 {
        self.full + self.split * self.parts
    }
}

/// The model's time for `units` blocks of `steps` each on `sms` SMs, the last `r = units mod
/// sms` split into `parts` (1: none), in steps.
pub fn modelled_steps(units: u32, sms: u32, steps: u32, parts: u32) -> f64 {
    let (w, r) = (units / sms, units % sms);
    let whole = steps as f64 + OVERHEAD_STEPS;
    if r == 0 {
        return w as f64 * whole;
    }
    let part = steps.div_ceil(parts) as f64 + OVERHEAD_STEPS;
    w as f64 * whole + (r * parts).div_ceil(sms) as f64 * part
}

/// The split of `units` key blocks of `steps` query-block steps each on `sms` SMs: `knob` 1 the
/// model's best P of 2..=4 (none where no split beats the whole last wave), 2 to 4 that many
/// parts wherever there is a partial wave; `None`: run the grid whole. A part walks at least
/// one step.
pub fn plan(knob: u32, units: u32, sms: u32, steps: u32) -> Option<TailPlan> {
    let r = units % sms.max(1);
    if knob == 0 || r == 0 || steps < 2 {
        return None;
    }
    let parts = if knob >= 2 {
        knob.min(steps)
    } else {
        let whole = modelled_steps(units, sms, steps, 1);
        let (best, t) = (2..=MAX_PARTS.min(steps))
            .map(|p| (p, modelled_steps(units, sms, steps, p)))
            .min_by(|a, b| a.1.total_cmp(&b.1))?;
        if t >= whole {
            return None;
        }
        best
    };
    Some(TailPlan {
        parts,
        full: units - r,
        split: r,
    })
}

/// At most this many parts a split key block of the deterministic d256 split
/// ([`plan_ordered`]), where a part's partials (128 KB) are read by the last part to finish.
pub const MAX_ORDERED_PARTS: u32 = 16;

/// The split of the deterministic d256 grid (`bwd_fa3_d256_w2_cols2t`): `units` key blocks of
/// `steps` each on `sms` SMs, launched in waves whose blocks wait for each other at every query
/// block (the order), so that the waves end together and a last partial wave of r blocks costs
/// a whole wave. Its r blocks each become P parts, P as many as fit on the SMs at once (r·P <=
/// `sms`: a part waits for parts of lower rank in the same wave, so every part must be resident
/// together), at most [`MAX_ORDERED_PARTS`] and `steps`; `knob` 0 none, 1 that P, 2 or more at
/// most that many. `None` where there is no partial wave or fewer than 2 parts fit.
pub fn plan_ordered(knob: u32, units: u32, sms: u32, steps: u32) -> Option<TailPlan> {
    let r = units % sms.max(1);
    if knob == 0 || r == 0 {
        return None;
    }
    let cap = if knob >= 2 { knob } else { MAX_ORDERED_PARTS };
    let parts = cap.min(sms / r).min(steps);
    (parts >= 2).then_some(TailPlan {
        parts,
        full: units - r,
        split: r,
    })
}

/// Whether the deterministic d256 grid of `p` may run split ([`plan_ordered`]): non-causal (the
/// causal order launches its key blocks in reverse), deterministic, no window.
pub fn applies_ordered(p: &BackwardProblem) -> bool {
    let a = &p.attn;
    !a.causal && p.deterministic && a.window == crate::ops::attention::Window::UNBOUNDED
}

/// The grid's line of a launch plan: `units` key blocks of `bn` keys, one CTA each, on `sms`
/// SMs, in whole waves and a last partial one.
pub fn grid_line(units: u32, bn: u32, sms: u32) -> String {
    let (w, r) = (units / sms.max(1), units % sms.max(1));
    let last = if r == 0 {
        String::new()
    } else {
        format!(
            " and a last wave of {r} ({:.1} % of the SMs busy)",
            100.0 * r as f64 / sms as f64
        )
    };
    format!(
        "grid: {units} key blocks of {bn} keys, one CTA each, on {sms} SMs: {w} whole waves{last}"
    )
}

/// A split's line of a launch plan.
pub fn split_line(t: &TailPlan, steps: u32, ordered: bool) -> String {
    format!(
        "last partial wave split: {} key blocks in {} parts each ({}-{} of {steps} query-block steps a part), {} blocks in all; dK and dV summed over the parts by the last to finish{}",
        t.split,
        t.parts,
        steps / t.parts,
        steps.div_ceil(t.parts),
        t.blocks(),
        if ordered { ", in part order" } else { "" }
    )
}

/// Whether `p` may run split: non-causal (the causal walks differ in length: `KILN_BWD_LPT`),
/// not deterministic (its dQ order counts whole key blocks), no window (its walks differ too).
pub fn applies(p: &BackwardProblem) -> bool {
    let a = &p.attn;
    !a.causal && !p.deterministic && a.window == crate::ops::attention::Window::UNBOUNDED
}

/// The workspace of `plan` at head dim `d`: the counters (zero between launches) and the
/// partials, a part's dK and dV in fp32 from 256 consumer threads of d/2 + d/2 values each (at
/// d256 each consumer thread holds one gradient's 128: half of that).
pub fn workspace(ctx: &Context, plan: &TailPlan, d: usize) -> Result<(u64, u64)> {
    let s = &ctx.scratch;
    let sems = s
        .attn_bwd_tail_counters
        .at_least(ctx, plan.split as usize * 4)?;
    let part_bytes = 256 * d * 4;
    let acc = s
        .attn_bwd_tail
        .at_least(ctx, (plan.split * plan.parts) as usize * part_bytes)?;
    Ok((sems, acc))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::{AttentionProblem, Window};

    #[test]
    fn the_issue_shapes_split_their_last_wave_in_three() {
        // 2,048 key blocks on 132 SMs (15.52 waves): the 68 of the last wave in 3 parts each,
        // 204 blocks of a third, two rounds of them: 2 % under the whole 16th wave at d64 (32
        // steps of 128 rows) and at d128 (128 steps of 64 rows)
        for steps in [32, 128] {
            let p = plan(1, 2048, 132, steps).unwrap();
            assert_eq!(
                p,
                TailPlan {
                    parts: 3,
                    full: 1980,
                    split: 68
                }
            );
            assert_eq!(p.blocks(), 1980 + 204);
            let (whole, split) = (
                modelled_steps(2048, 132, steps, 1),
                modelled_steps(2048, 132, steps, 3),
            );
            assert!(
                split < 0.985 * whole && split > 0.97 * whole,
                "{steps}: {split} / {whole}"
            );
        }
    }

    #[test]
    fn the_ordered_split_takes_as_many_parts_as_fit_on_the_sms() {
        // B1 H16 S16384 d256 (4,096 key blocks of 256 steps on 132 SMs): the 4 of the 32nd wave
        // in 16 parts each, 64 blocks of 16 steps
        let p = plan_ordered(1, 4096, 132, 256).unwrap();
        assert_eq!(
            p,
            TailPlan {
                parts: 16,
                full: 4092,
                split: 4
            }
        );
        assert_eq!(p.blocks(), 4092 + 64);
        // 60 left over: 2 parts each fit (120 <= 132); 70 left over: not 2
        assert_eq!(plan_ordered(1, 192, 132, 64).map(|p| p.parts), Some(2));
        assert_eq!(plan_ordered(1, 202, 132, 64), None);
        // the knob: off, or at most that many (and never more than fit, nor than the steps)
        assert_eq!(plan_ordered(0, 4096, 132, 256), None);
        assert_eq!(plan_ordered(8, 4096, 132, 256).map(|p| p.parts), Some(8));
        assert_eq!(plan_ordered(32, 4096, 132, 256).map(|p| p.parts), Some(32));
        assert_eq!(plan_ordered(32, 4100, 132, 256).map(|p| p.parts), Some(16));
        assert_eq!(plan_ordered(1, 4096, 132, 3).map(|p| p.parts), Some(3));
        // a full last wave
        assert_eq!(plan_ordered(1, 4092, 132, 256), None);
    }

    #[test]
    fn a_full_last_wave_or_a_short_walk_runs_whole() {
        assert_eq!(plan(1, 2112, 132, 32), None); // 16.00 waves
        assert_eq!(plan(1, 2048, 132, 1), None); // one step: nothing to share
        assert_eq!(plan(0, 2048, 132, 32), None); // the knob off
                                                  // a last wave nearly full: 130 blocks in 2 parts take two rounds, worse than one
        assert_eq!(plan(1, 132 + 130, 132, 32), None);
        // fewer blocks than SMs: split to fill them (64 blocks -> 128 halves)
        assert_eq!(
            plan(1, 64, 132, 32),
            Some(TailPlan {
                parts: 2,
                full: 0,
                split: 64
            })
        );
        // forced parts, at most one step each
        assert_eq!(
            plan(4, 132 + 130, 132, 32),
            Some(TailPlan {
                parts: 4,
                full: 132,
                split: 130
            })
        );
        assert_eq!(plan(4, 10, 132, 3).map(|p| p.parts), Some(3));
    }

    #[test]
    fn only_non_causal_free_problems_split() {
        let dense = BackwardProblem::new(AttentionProblem::new(4, 16, 4096, 64), false);
        assert!(applies(&dense));
        let mut causal = dense;
        causal.attn.causal = true;
        assert!(!applies(&causal));
        assert!(!applies(&BackwardProblem::new(dense.attn, true)));
        let mut w = dense;
        w.attn.window = Window {
            left: 128,
            right: 0,
        };
        assert!(!applies(&w));
    }

    /// The split walk compiles for sm_90a with no local memory, no wgmma serialisation and its
    /// register split honoured, on each tile the knob takes: `bwd_fa3_m128_fma`'s (d64 from 4,096
    /// rows), `bwd_fa3_lookahead`'s at d64 and d128. These variants compile when the knob asks for
    /// them, outside the variant budget.
    #[test]
    fn every_split_variant_compiles_without_spills() {
        use super::super::bwd_fa3_wgmma::WgmmaBwdTile;
        use super::super::{bwd_fa3_lookahead, bwd_fa3_m128_fma};
        use crate::ops::attention::DTYPES;
        let tiles = [
            bwd_fa3_m128_fma::tile(0),
            bwd_fa3_lookahead::tile(64, false, false),
            bwd_fa3_lookahead::tile(128, false, false),
        ];
        let mut v = Vec::new();
        for t in tiles {
            let split = WgmmaBwdTile { tail: true, ..t };
            for dt in DTYPES {
                let spec = split.spec("sm_90a", dt);
                assert!(spec.label().contains("KILN_BWD_TAIL=1"), "{}", spec.label());
                assert!(!t.spec("sm_90a", dt).label().contains("TAIL"));
                v.push(spec);
            }
        }
        crate::ops::attention_backward::assert_compiles_clean(v, &["C751", "C7507", "C7508"]);
    }
}
