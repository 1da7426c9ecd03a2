//! Replays of the evolutionary search against a recorded landscape (config -> time): how often,
//! and how fast, it lands within a margin of the exhaustive best.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::{search_from, EvoParams, Strategy};
use crate::tune::space::{Config, ParamSpace};

/// What replaying the evolutionary search against a recorded landscape found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ReplaySummary {
    pub trials: usize,
    pub space_size: usize,
    pub budget: usize,
    pub best_ms: f64,
    pub within: f64,
    /// Trials whose best was within `within` of the exhaustive best.
    pub hits: usize,
    pub hit_rate: f64,
    /// Median over trials of the evaluations spent until the trial first got within `within`.
    pub median_evals_to_hit: Option<usize>,
    pub worst_ratio: f64,
    /// Mean over trials of the evaluations spent on configs that failed (guard rejections and
    /// other untimed outcomes). They count against `budget`: the tuner spends a compile on each.
    #[serde(default)]
    pub mean_failed_evals: f64,
}

/// Replays the evolutionary search `trials` times (seeds `seed0..`) on a landscape (config →
/// time, infinite = failed) with `budget` evaluations each.
pub fn replay(
    landscape: &[(Config, f64)],
    space: &ParamSpace,
    trials: usize,
    budget: usize,
    within: f64,
    seed0: u64,
) -> ReplaySummary {
    replay_with(
        landscape,
        space,
        trials,
        budget,
        within,
        EvoParams::seeded(seed0),
    )
}

/// [`replay`] with explicit evolutionary knobs (trial `t` uses seed `base.seed + t`).
pub fn replay_with(
    landscape: &[(Config, f64)],
    space: &ParamSpace,
    trials: usize,
    budget: usize,
    within: f64,
    base: EvoParams,
) -> ReplaySummary {
    replay_from(landscape, space, trials, budget, within, base, &[])
}

/// [`replay_with`], each trial evaluating `start` first ([`search_from`]).
pub fn replay_from(
    landscape: &[(Config, f64)],
    space: &ParamSpace,
    trials: usize,
    budget: usize,
    within: f64,
    base: EvoParams,
    start: &[Config],
) -> ReplaySummary {
    let seed0 = base.seed;
    let times: HashMap<Config, f64> = landscape.iter().cloned().collect();
    let best = landscape
        .iter()
        .map(|(_, t)| *t)
        .filter(|t| t.is_finite())
        .fold(f64::INFINITY, f64::min);
    let (mut hits, mut worst, mut evals, mut failed) = (0, 1.0f64, Vec::new(), 0usize);
    for t in 0..trials {
        let h = search_from(
            space,
            Strategy::Evolutionary(EvoParams {
                seed: seed0 + t as u64,
                ..base
            }),
            budget,
            start,
            |batch| {
                batch
                    .iter()
                    .map(|c| times.get(c).copied().unwrap_or(f64::INFINITY))
                    .collect()
            },
        );
        failed += h.order.iter().filter(|(_, t)| !t.is_finite()).count();
        let got = h.best().map(|(_, t)| t).unwrap_or(f64::INFINITY);
        worst = worst.max(got / best);
        if got <= best * (1.0 + within) {
            hits += 1;
            if let Some(i) = h
                .order
                .iter()
                .position(|(_, t)| *t <= best * (1.0 + within))
            {
                evals.push(i + 1);
            }
        }
    }
    evals.sort_unstable();
    ReplaySummary {
        trials,
        space_size: landscape.len(),
        budget,
        best_ms: best,
        within,
        hits,
        hit_rate: hits as f64 / trials.max(1) as f64,
        median_evals_to_hit: evals.get(evals.len() / 2).copied(),
        worst_ratio: worst,
        mean_failed_evals: failed as f64 / trials.max(1) as f64,
    }
}
#[cfg(test)]
mod tests {
    use super::super::landscapes::*;
    use super::*;

    /// A made-up d128 landscape over the real space, shaped like the kernel's measured one
    /// (results/2026-11-22-h200/attention): the key tile and the ring matter most, overlap helps,
    /// ping-pong and emulation cost a little, three consumer warpgroups spill past 96-key tiles.
    /// The search, alone and from the default, finds within 2% of its best with 15% of the
    /// evaluations in most trials (a regression in the space or the search shows here first).
    #[test]
    fn replay_on_a_synthetic_attention_landscape() {
        use crate::ops::attention::fa3_wgmma::Fa3Wgmma;
        use crate::ops::attention::{AttentionKernel, AttentionProblem};
        let h100 = crate::device::DeviceInfo::h100_sxm();
        let p = AttentionProblem::new(4, 16, 4096, 128);
        let s = Fa3Wgmma.space(&p, &h100).unwrap();
        let land: Vec<(Config, f64)> = s
            .enumerate()
            .into_iter()
            .map(|c| {
                let g = |k: &str| c.get(k).unwrap() as f64;
                let t = if g("CWG") == 3.0 && g("BN") > 96.0 {
                    f64::INFINITY
                } else {
                    1.0 + 0.25 * ((g("BN") / 144.0).log2()).abs()
                        + 0.04 * (g("STAGES") - 3.0).abs()
                        + if g("OVERLAP") == 1.0 { 0.0 } else { 0.08 }
                        + 0.02 * g("PINGPONG")
                        + 0.01 * g("EMU") / 4.0
                        + if g("PERSIST") == 2.0 { 0.0 } else { 0.015 }
                        + 0.03 * (g("CWG") - 2.0)
                };
                (c, t)
            })
            .collect();
        let budget = (land.len() as f64 * 0.15).floor() as usize;
        let alone = replay(&land, &s, 20, budget, 0.02, 1);
        let start = [Fa3Wgmma.baseline(&p, &h100).unwrap()];
        let from = replay_from(&land, &s, 20, budget, 0.02, EvoParams::seeded(1), &start);
        eprintln!("alone {alone:?}\nfrom the default {from:?}");
        assert!(alone.hits >= 17, "{alone:?}");
        assert!(from.hits >= 17, "{from:?}");
    }

    /// The success rates over seeds 1..=100 (within 2% with 15% of the evaluations), pinned at
    /// or a little under what this search measures (see results/2026-11-22-h200/tune/): a
    /// regression in the model, the batch choice or the first generation breaks these.
    #[test]
    fn replay_success_rates_are_pinned() {
        for (name, (s, land), trials, min_hits) in [
            ("committed mma_sync", committed(), 100, 97),
            ("synthetic", synthetic(), 100, 98),
            ("hard", synthetic_hard(), 100, 98),
            ("deceptive", synthetic_deceptive(), 100, 97),
            ("noisy", synthetic_noisy(), 100, 97),
            // 768 configs, 115 evaluations a trial: fewer trials keep the test short
            ("ridge", synthetic_ridge(), 20, 20),
        ] {
            let budget = (land.len() as f64 * 0.15).floor() as usize;
            let r = replay(&land, &s, trials, budget, 0.02, 1);
            assert!(r.hits >= min_hits, "{name}: {r:?}");
            assert_eq!(r.budget, budget);
        }
    }

    /// Issue 4's target as `kiln tune` runs the search (the heuristic's config first, then the
    /// model-guided steps, 15 % of the space in all): within 2 % of the exhaustive best in every
    /// trial, on the ten landscapes of today's `wgmma_tma_ws` space timed on an H100 (2026-11-24,
    /// GEMM ledger #92). At 4000^3 and 16384^3 the heuristic's config is not the best (1.007x,
    /// 1.023x), so there the search has to find a better one. A landscape of an older space fails here
    /// (its configs lack today's parameters): time it again.
    #[test]
    fn from_the_heuristic_every_current_gemm_landscape_is_solved() {
        use crate::ops::gemm::{wgmma_tma_ws::WgmmaTmaWs, GemmKernel};
        use crate::tune::target::TuneProblem;
        for (_, path) in CURRENT_WS_LANDSCAPES {
            let l = load_committed(path);
            let TuneProblem::Gemm(p) = &l.problem else {
                panic!("{path}: not a GEMM landscape")
            };
            let dev = l.device.clone().expect("the landscape names its device");
            let base = WgmmaTmaWs.baseline(p, &dev).unwrap();
            let (space, land) = (l.space(), l.points());
            assert!(
                space.is_valid(&base),
                "{path}: {base} is not in the landscape"
            );
            let budget = (land.len() as f64 * 0.15).floor() as usize;
            let r = replay_from(
                &land,
                &space,
                100,
                budget,
                0.02,
                EvoParams::seeded(1),
                &[base],
            );
            assert_eq!(r.hits, 100, "{path}: {r:?}");
        }
    }

    /// On a landscape where 45% of the configs fail and the optimum sits on the edge of the
    /// failing region (with only two configs within 2%), every trial still ends with a timed
    /// best and the search finds the optimum more often than uniform draws of the same budget
    /// would (about 28%). It measures 32/100 and spends about 21 of its 36 evaluations on
    /// failures: the search is drawn to the boundary, where the optimum is.
    #[test]
    fn a_failing_landscape_is_survived() {
        let (s, land) = synthetic_failing();
        let failing = land.iter().filter(|(_, t)| !t.is_finite()).count() as f64;
        assert!(failing / land.len() as f64 > 0.4);
        let budget = (land.len() as f64 * 0.15).floor() as usize;
        let r = replay(&land, &s, 100, budget, 0.02, 1);
        assert!(r.worst_ratio.is_finite(), "{r:?}");
        assert!(r.hits >= 28, "{r:?}");
    }

    #[test]
    #[ignore]
    /// `cargo test --release --lib sweep_rates -- --ignored --nocapture` prints the success rate
    /// on every landscape, for the default search and variants (PROBE_TRIALS=300 for more seeds;
    /// `bred` forces the large-space path: candidates bred, not enumerated).
    fn sweep_rates_on_every_landscape() {
        let mut lands: Vec<_> = CURRENT_WS_LANDSCAPES
            .iter()
            .map(|&(name, path)| (name, committed_at(path)))
            .collect();
        lands.extend([
            ("committed", committed()),
            ("synthetic", synthetic()),
            ("hard", synthetic_hard()),
            ("deceptive", synthetic_deceptive()),
            ("noisy", synthetic_noisy()),
            ("ridge", synthetic_ridge()),
            ("failing", synthetic_failing()),
        ]);
        let d = EvoParams::seeded(1);
        let variants = [
            ("default", d),
            (
                "bred",
                EvoParams {
                    enumerate_up_to: 0,
                    pool: 24,
                    ..d
                },
            ),
            ("batch 4", EvoParams { batch: 4, ..d }),
            ("first 6", EvoParams { population: 6, ..d }),
            (
                "first 12",
                EvoParams {
                    population: 12,
                    ..d
                },
            ),
            ("ard", EvoParams { ard: true, ..d }),
        ];
        let trials = std::env::var("PROBE_TRIALS")
            .ok()
            .and_then(|x| x.parse().ok())
            .unwrap_or(100);
        let names: Vec<&str> = lands.iter().map(|(n, _)| *n).collect();
        eprintln!("{:>10}: {}", "", names.join(" "));
        for (name, p) in variants {
            let mut line = format!("{name:>10}:");
            for (lname, (s, land)) in &lands {
                if std::env::var("PROBE_SKIP").is_ok_and(|v| v.split(',').any(|x| x == *lname)) {
                    line += "   -";
                    continue;
                }
                let budget = (land.len() as f64 * 0.15).floor() as usize;
                let r = replay_with(land, s, trials, budget, 0.02, p);
                line += &format!(" {:>3}/{trials} ({:.1}f)", r.hits, r.mean_failed_evals);
            }
            eprintln!("{line}");
        }
    }
}
