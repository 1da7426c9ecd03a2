//! Search strategies over a [`ParamSpace`]: exhaustive for small spaces, evolutionary (seeded
//! population, tournament selection, uniform crossover, neighbour mutation, elitism) for large
//! ones. Pure logic: the caller's `evaluate` turns a batch of configs into times, and a failed
//! candidate is data (an infinite time), never an error.

use std::collections::HashMap;

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::space::{Config, ParamSpace};

/// How to search.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Strategy {
    Exhaustive,
    Evolutionary(EvoParams),
}

/// The evolutionary search's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct EvoParams {
    pub seed: u64,
    /// Individuals per generation; 0 = a fifth of the budget, between 4 and 16.
    pub population: usize,
    /// Candidates drawn per tournament; the fastest wins.
    pub tournament: usize,
    /// The best this many survive every generation unchanged.
    pub elites: usize,
    /// Chance that a child is a crossover of two parents (else a copy of one) before mutation.
    pub crossover: f64,
    /// Spend one child per generation on an untried neighbour of the best (local refinement).
    pub exploit: bool,
}

impl EvoParams {
    pub fn seeded(seed: u64) -> EvoParams {
        EvoParams {
            seed,
            population: 0,
            tournament: 4,
            elites: 2,
            crossover: 0.5,
            exploit: true,
        }
    }
}

/// Every config evaluated so far, in evaluation order, with its time (ms; infinite = failed).
#[derive(Debug, Clone, Default)]
pub struct History {
    pub order: Vec<(Config, f64)>,
    index: HashMap<Config, usize>,
}

impl History {
    pub fn len(&self) -> usize {
        self.order.len()
    }
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }
    pub fn contains(&self, c: &Config) -> bool {
        self.index.contains_key(c)
    }
    pub fn time(&self, c: &Config) -> Option<f64> {
        self.index.get(c).map(|&i| self.order[i].1)
    }
    fn push(&mut self, c: Config, t: f64) {
        if !self.index.contains_key(&c) {
            self.index.insert(c.clone(), self.order.len());
            self.order.push((c, t));
        }
    }
    /// The fastest config that did not fail.
    pub fn best(&self) -> Option<(&Config, f64)> {
        self.order
            .iter()
            .filter(|(_, t)| t.is_finite())
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(c, t)| (c, *t))
    }
}

/// Whether a candidate whose first, short timing gave `quick_ms` is far enough behind the best so
/// far that timing it in full would be wasted (Triton-style early stop).
pub fn far_behind(quick_ms: f64, best_ms: Option<f64>, factor: f64) -> bool {
    matches!(best_ms, Some(b) if b.is_finite() && quick_ms > b * factor)
}

/// Runs `strategy` over `space` for at most `budget` evaluations. `evaluate` receives batches of
/// new configs (never one seen before) and returns one time per config, in order.
pub fn search(
    space: &ParamSpace,
    strategy: Strategy,
    budget: usize,
    mut evaluate: impl FnMut(&[Config]) -> Vec<f64>,
) -> History {
    let mut h = History::default();
    let mut run = |batch: Vec<Config>, h: &mut History| {
        if batch.is_empty() {
            return;
        }
        let times = evaluate(&batch);
        for (c, t) in batch
            .into_iter()
            .zip(times.into_iter().chain(std::iter::repeat(f64::INFINITY)))
        {
            h.push(c, if t.is_nan() { f64::INFINITY } else { t });
        }
    };
    match strategy {
        Strategy::Exhaustive => {
            let all: Vec<Config> = space.enumerate().into_iter().take(budget).collect();
            run(all, &mut h);
        }
        Strategy::Evolutionary(p) => evolve(space, p, budget, &mut h, &mut run),
    }
    h
}

fn evolve(
    space: &ParamSpace,
    p: EvoParams,
    budget: usize,
    h: &mut History,
    run: &mut impl FnMut(Vec<Config>, &mut History),
) {
    let mut rng = SmallRng::seed_from_u64(p.seed);
    // Small budgets want small populations (more generations); 0 picks one from the budget.
    let pop_n = if p.population == 0 {
        (budget / 5).clamp(4, 16)
    } else {
        p.population
    }
    .max(2)
    .min(budget);
    let mut first = Vec::new();
    for _ in 0..pop_n * 20 {
        if first.len() == pop_n {
            break;
        }
        if let Some(c) = space.sample(&mut rng) {
            if !first.contains(&c) {
                first.push(c);
            }
        }
    }
    let mut population = first.clone();
    run(first, h);
    while h.len() < budget && !population.is_empty() {
        let fit = |c: &Config| h.time(c).unwrap_or(f64::INFINITY);
        population.sort_by(|a, b| fit(a).total_cmp(&fit(b)));
        let need = (pop_n - p.elites.min(pop_n - 1)).min(budget - h.len());
        let mut children: Vec<Config> = Vec::new();
        // Exploitation: one child per generation is an untried neighbour of the best so far.
        if p.exploit {
            let untried: Vec<Config> = space
                .neighbours(&population[0])
                .into_iter()
                .filter(|c| !h.contains(c))
                .collect();
            if !untried.is_empty() {
                children.push(untried[rng.gen_range(0..untried.len())].clone());
            }
        }
        let mut tries = 0;
        while children.len() < need && tries < need * 40 {
            tries += 1;
            let a = tournament(&population, p.tournament, &fit, &mut rng);
            let b = tournament(&population, p.tournament, &fit, &mut rng);
            let mut child = if rng.gen_bool(p.crossover.clamp(0.0, 1.0)) {
                space.crossover(a, b, &mut rng).unwrap_or_else(|| a.clone())
            } else {
                a.clone()
            };
            // Mutate always when the child copies a parent or repeats a point, else half the time.
            if child == *a || child == *b || h.contains(&child) || rng.gen_bool(0.5) {
                match space.mutate(&child, &mut rng) {
                    Some(m) => child = m,
                    None => continue,
                }
            }
            if !h.contains(&child) && !children.contains(&child) {
                children.push(child);
            }
        }
        // Stuck in an explored corner: fresh random points keep the search going.
        let mut tries = 0;
        while children.len() < need && tries < need * 40 {
            tries += 1;
            if let Some(c) = space
                .sample(&mut rng)
                .filter(|c| !h.contains(c) && !children.contains(c))
            {
                children.push(c);
            }
        }
        if children.len() < need && space.raw_size() <= 1 << 20 {
            // Nearly explored: take untried configs straight from the enumeration.
            let rest: Vec<Config> = space
                .enumerate()
                .into_iter()
                .filter(|c| !h.contains(c) && !children.contains(c))
                .collect();
            children.extend(rest.into_iter().take(need - children.len()));
        }
        if children.is_empty() {
            break; // the space is exhausted
        }
        run(children.clone(), h);
        // (mu + lambda) with elitism: the best of parents and children form the next generation.
        population.extend(children);
        let fit = |c: &Config| h.time(c).unwrap_or(f64::INFINITY);
        population.sort_by(|a, b| fit(a).total_cmp(&fit(b)));
        population.truncate(pop_n);
    }
}

fn tournament<'a>(
    pop: &'a [Config],
    k: usize,
    fit: &impl Fn(&Config) -> f64,
    rng: &mut SmallRng,
) -> &'a Config {
    let mut best = &pop[rng.gen_range(0..pop.len())];
    for _ in 1..k.max(1) {
        let c = &pop[rng.gen_range(0..pop.len())];
        if fit(c) < fit(best) {
            best = c;
        }
    }
    best
}

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
    let seed0 = base.seed;
    let times: HashMap<Config, f64> = landscape.iter().cloned().collect();
    let best = landscape
        .iter()
        .map(|(_, t)| *t)
        .filter(|t| t.is_finite())
        .fold(f64::INFINITY, f64::min);
    let (mut hits, mut worst, mut evals) = (0, 1.0f64, Vec::new());
    for t in 0..trials {
        let h = search(
            space,
            Strategy::Evolutionary(EvoParams {
                seed: seed0 + t as u64,
                ..base
            }),
            budget,
            |batch| {
                batch
                    .iter()
                    .map(|c| times.get(c).copied().unwrap_or(f64::INFINITY))
                    .collect()
            },
        );
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
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GEMM-like synthetic landscape: a smooth bowl over tile sizes and stages, a narrow
    /// optimum, small ripples from a nuisance parameter, and an infeasible (failed) corner.
    pub(crate) fn synthetic() -> (ParamSpace, Vec<(Config, f64)>) {
        let s = ParamSpace::new()
            .param("BM", &[64, 128, 256])
            .param("BN", &[64, 128, 256])
            .param("BK", &[32, 64])
            .param("STAGES", &[2, 3, 4, 5, 6])
            .param("GROUP_M", &[4, 8, 16])
            .rule("at most 128 accumulators per thread", |c| {
                c.get("BM").unwrap() * c.get("BN").unwrap() <= 128 * 256
            });
        let land = s
            .enumerate()
            .into_iter()
            .map(|c| {
                let g = |k| c.get(k).unwrap() as f64;
                let smem = (g("BM") + g("BN")) * g("BK") * 2.0 * g("STAGES");
                let t = if smem > 232448.0 {
                    f64::INFINITY
                } else {
                    let tile = (g("BM") * g("BN")).log2();
                    1.0 + 0.08 * (tile - 15.0).powi(2)
                        + 0.03 * (g("STAGES") - 4.0).powi(2)
                        + 0.02 * (g("BK") / 32.0 - 1.0)
                        + 0.004 * (g("GROUP_M").log2() - 3.0).abs()
                };
                (c, t)
            })
            .collect();
        (s, land)
    }

    #[test]
    fn exhaustive_visits_every_valid_config_once() {
        let (s, land) = synthetic();
        let mut calls = 0;
        let h = search(&s, Strategy::Exhaustive, usize::MAX, |b| {
            calls += 1;
            b.iter()
                .map(|c| land.iter().find(|(d, _)| d == c).unwrap().1)
                .collect()
        });
        assert_eq!(calls, 1);
        assert_eq!(h.len(), land.len());
        let best = h.best().unwrap();
        assert_eq!(best.0.get("STAGES"), Some(4));
        assert_eq!(best.1, 1.0 - 0.0 + 0.004 * 0.0);
    }

    #[test]
    fn evolutionary_is_reproducible_from_its_seed() {
        let (s, land) = synthetic();
        let run = |seed| {
            let h = search(
                &s,
                Strategy::Evolutionary(EvoParams::seeded(seed)),
                30,
                |b| {
                    b.iter()
                        .map(|c| land.iter().find(|(d, _)| d == c).unwrap().1)
                        .collect()
                },
            );
            h.order.iter().map(|(c, _)| c.label()).collect::<Vec<_>>()
        };
        assert_eq!(run(11), run(11));
        assert_ne!(run(11), run(12));
        assert_eq!(run(11).len(), 30);
    }

    #[test]
    fn evolutionary_never_repeats_and_respects_the_budget_and_rules() {
        let (s, land) = synthetic();
        let h = search(&s, Strategy::Evolutionary(EvoParams::seeded(3)), 40, |b| {
            b.iter()
                .map(|c| land.iter().find(|(d, _)| d == c).unwrap().1)
                .collect()
        });
        assert_eq!(h.len(), 40);
        let unique: std::collections::HashSet<_> = h.order.iter().map(|(c, _)| c).collect();
        assert_eq!(unique.len(), 40);
        assert!(h.order.iter().all(|(c, _)| s.is_valid(c)));
        // a budget larger than the space stops when the space is exhausted
        let all = search(
            &s,
            Strategy::Evolutionary(EvoParams::seeded(3)),
            10_000,
            |b| vec![1.0; b.len()],
        );
        assert_eq!(all.len(), land.len());
    }

    #[test]
    fn failures_are_data_not_errors() {
        let (s, _) = synthetic();
        let h = search(&s, Strategy::Evolutionary(EvoParams::seeded(5)), 20, |b| {
            b.iter()
                .map(|c| {
                    if c.get("BM") == Some(64) {
                        f64::INFINITY
                    } else {
                        f64::NAN
                    }
                })
                .collect()
        });
        assert_eq!(h.len(), 20);
        assert!(h.best().is_none());
    }

    #[test]
    fn replay_reaches_two_percent_with_fifteen_percent_of_the_evaluations() {
        for (s, land) in [synthetic(), synthetic_hard()] {
            let budget = (land.len() as f64 * 0.15).floor() as usize;
            let r = replay(&land, &s, 100, budget, 0.02, 1);
            assert!(r.hit_rate >= 0.95, "{r:?}");
        }
    }

    /// Like `synthetic`, but with no BK, failures inside the space and a steeper bowl.
    fn synthetic_hard() -> (ParamSpace, Vec<(Config, f64)>) {
        let s = ParamSpace::new()
            .param("BM", &[64, 128, 256])
            .param("BN", &[64, 128, 256])
            .param("STAGES", &[2, 3, 4, 5, 6])
            .param("GROUP_M", &[4, 8, 16]);
        let land = s
            .enumerate()
            .into_iter()
            .map(|c| {
                let g = |k| c.get(k).unwrap() as f64;
                let t = if g("BM") * g("BN") > 32768.0 {
                    f64::INFINITY
                } else {
                    1.0 + 0.1 * ((g("BM") * g("BN")).log2() - 15.0).powi(2)
                        + 0.04 * (g("STAGES") - 4.0).powi(2)
                        + 0.003 * g("GROUP_M").log2()
                };
                (c, t)
            })
            .collect();
        (s, land)
    }

    #[test]
    #[ignore]
    fn sweep_evo_knobs() {
        let (s, land) = synthetic_hard();
        let budget = (land.len() as f64 * 0.15).floor() as usize;
        for pop in [4, 6, 8, 10] {
            for k in [2, 3, 4] {
                for x in [0.0, 0.3, 0.6] {
                    for el in [1, 2] {
                        for ex in [false, true] {
                            let p = EvoParams {
                                seed: 1,
                                population: pop,
                                tournament: k,
                                elites: el,
                                crossover: x,
                                exploit: ex,
                            };
                            let r = replay_with(&land, &s, 300, budget, 0.02, p);
                            let r2 = replay_with(
                                &synthetic().1,
                                &synthetic().0,
                                300,
                                (synthetic().1.len() as f64 * 0.15) as usize,
                                0.02,
                                p,
                            );
                            eprintln!(
                                "pop {pop} k {k} x {x} el {el} ex {ex}: {:.3} {:.3} med {:?}",
                                r.hit_rate, r2.hit_rate, r.median_evals_to_hit
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn early_stop_only_when_far_behind_a_finite_best() {
        assert!(far_behind(2.0, Some(1.0), 1.5));
        assert!(!far_behind(1.2, Some(1.0), 1.5));
        assert!(!far_behind(9.0, None, 1.5));
        assert!(!far_behind(9.0, Some(f64::INFINITY), 1.5));
    }
}
