//! Search strategies over a [`ParamSpace`]: exhaustive for small spaces, and for large ones an
//! evolutionary search steered by a surrogate model (a space-filling first generation, then
//! small batches picked by expected improvement from a Gaussian-process model of the log-time,
//! weighted by a model of which configs run at all; see `evolve`). Pure logic: the caller's
//! `evaluate` turns a batch of configs into times, and a failed candidate is data (an infinite
//! time), never an error. Every config handed to `evaluate` counts against the budget, a guard
//! rejection included, and no config is ever handed over twice.

use std::collections::{HashMap, HashSet};

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::space::{Config, ParamSpace};
use super::surrogate::{expected_improvement, feasibility, standardise, Gp};

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
    /// Size of the space-filling first generation; 0 = a quarter of the budget, 4 to 12.
    pub population: usize,
    /// Candidates drawn per tournament when breeding (large spaces); the fastest wins.
    pub tournament: usize,
    /// Chance that a bred child is a crossover of two parents (else a mutated copy of one).
    pub crossover: f64,
    /// Configs evaluated per step after the first generation (smaller: each pick sees more
    /// results; larger: more compiles in parallel).
    #[serde(default = "default_batch")]
    pub batch: usize,
    /// Spaces of at most this many raw points offer every untried config to the model; larger
    /// ones offer `pool` children bred from the fastest configs plus fresh samples.
    #[serde(default = "default_enumerate")]
    pub enumerate_up_to: usize,
    /// Bred candidates per step in a large space.
    #[serde(default = "default_pool")]
    pub pool: usize,
    /// Fit one length scale per parameter of the time model (relevance), not one for all. Off:
    /// over 300 replays it fitted the few points too closely (97/98/94% on the mma_sync,
    /// synthetic and separable landscapes against 98/100/100% with one shared length scale).
    /// The feasibility model always fits them (failures hang on a few parameters).
    #[serde(default = "default_false")]
    pub ard: bool,
}

fn default_batch() -> usize {
    2
}
fn default_enumerate() -> usize {
    20_000
}
fn default_pool() -> usize {
    256
}
fn default_false() -> bool {
    false
}

impl EvoParams {
    pub fn seeded(seed: u64) -> EvoParams {
        EvoParams {
            seed,
            population: 0,
            tournament: 3,
            crossover: 0.5,
            batch: default_batch(),
            enumerate_up_to: default_enumerate(),
            pool: default_pool(),
            ard: false,
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
    evaluate: impl FnMut(&[Config]) -> Vec<f64>,
) -> History {
    search_from(space, strategy, budget, &[], evaluate)
}

/// [`search`], the evolutionary one evaluating the valid configs of `start` first (the
/// version's baseline, [`crate::ops::gemm::GemmKernel::baseline`]): they count against the
/// budget like any other, and the model learns from them.
pub fn search_from(
    space: &ParamSpace,
    strategy: Strategy,
    budget: usize,
    start: &[Config],
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
        Strategy::Evolutionary(p) => {
            let mut first: Vec<Config> = Vec::new();
            for c in start {
                if space.is_valid(c) && !first.contains(c) && first.len() < budget {
                    first.push(c.clone());
                }
            }
            run(first, &mut h);
            evolve(space, p, budget, &mut h, &mut run)
        }
    }
    h
}

/// The evolutionary search. Both phases draw on one budget (every config handed to `run`
/// counts, a guard rejection included: the tuner spends a compile on it):
///
/// 1. a space-filling first generation: a Latin hypercube over each parameter's values (every
///    value of every parameter appears about equally often), repaired to valid, unseen configs;
/// 2. steps of `batch` configs until the budget is spent. Each step offers the model a set of
///    untried candidates: every one when the space is small enough to enumerate, else children
///    bred from the fastest configs so far (tournament selection, uniform crossover, mutation
///    of one to all parameters), the untried neighbours of the best, and fresh space-filling
///    samples. A Gaussian process of the log-time (`surrogate::Gp`, one length scale per
///    parameter) scores them by expected improvement over the best so far, times the chance
///    that they run at all (a second GP over ran / failed); the batch is picked greedily, each
///    pick assumed to come out as predicted before the next is chosen (kriging believer), so a
///    batch spreads instead of piling onto one spot.
///
/// Why a model and not selection alone: with 15% of a 240-point space there are 36
/// evaluations, too few generations for selection pressure to cross a valley between two
/// basins (a 256x128 tile and a 128x256 one are two parameters apart, with failing configs
/// around the better one). Expected improvement trades the two off from the data: it keeps
/// sampling where the model is unsure until the model is sure, then descends.
fn evolve(
    space: &ParamSpace,
    p: EvoParams,
    budget: usize,
    h: &mut History,
    run: &mut impl FnMut(Vec<Config>, &mut History),
) {
    let mut rng = SmallRng::seed_from_u64(p.seed);
    let first_n = if p.population == 0 {
        (budget / 4).clamp(4, 12)
    } else {
        p.population
    }
    .max(2)
    .min(budget.saturating_sub(h.len()));
    let first = stratified(space, first_n, h, &[], &mut rng);
    if first.is_empty() {
        return;
    }
    run(first, h);
    let all: Option<Vec<Config>> =
        (space.raw_size() <= p.enumerate_up_to as u128).then(|| space.enumerate());
    while h.len() < budget {
        let k = p.batch.max(1).min(budget - h.len());
        let timed = h.order.iter().filter(|(_, t)| t.is_finite()).count();
        if timed < 2 {
            // Nothing to model yet: keep filling the space.
            let more = stratified(space, k, h, &[], &mut rng);
            if more.is_empty() {
                return;
            }
            run(more, h);
            continue;
        }
        let cands: Vec<Config> = match &all {
            Some(all) => all.iter().filter(|c| !h.contains(c)).cloned().collect(),
            None => bred(space, p, h, &mut rng),
        };
        if cands.is_empty() {
            return; // the space is exhausted
        }
        let picks = pick_batch(space, p, h, &cands, k);
        run(picks, h);
    }
}

/// At most this many of the fastest timed configs enter the time model (its cost grows with
/// the cube of its points; the slow tail says little about where the optimum is).
const MODEL_POINTS: usize = 160;

/// A config's position: each parameter's value index scaled to [0, 1].
fn coords(space: &ParamSpace, c: &Config) -> Vec<f64> {
    space
        .params
        .iter()
        .map(|p| {
            let i = p
                .values
                .iter()
                .position(|&v| Some(v) == c.get(&p.name))
                .unwrap_or(0);
            i as f64 / (p.values.len().max(2) - 1) as f64
        })
        .collect()
}

/// The `k` candidates with the highest expected improvement times feasibility, chosen one at
/// a time with each pick added to the time model at its predicted value.
fn pick_batch(
    space: &ParamSpace,
    p: EvoParams,
    h: &History,
    cands: &[Config],
    k: usize,
) -> Vec<Config> {
    let mut timed: Vec<&(Config, f64)> = h
        .order
        .iter()
        .filter(|(_, t)| t.is_finite() && *t > 0.0)
        .collect();
    timed.sort_by(|a, b| a.1.total_cmp(&b.1));
    timed.truncate(MODEL_POINTS);
    let x: Vec<Vec<f64>> = timed.iter().map(|(c, _)| coords(space, c)).collect();
    let logs: Vec<f64> = timed.iter().map(|(_, t)| t.ln()).collect();
    let (y, _, _) = standardise(&logs);
    let z: Vec<Vec<f64>> = cands.iter().map(|c| coords(space, c)).collect();
    let seen: Vec<Vec<f64>> = h.order.iter().map(|(c, _)| coords(space, c)).collect();
    let failed: Vec<bool> = h.order.iter().map(|(_, t)| !t.is_finite()).collect();
    let runs = feasibility(&seen, &failed, &z);
    let Some(mut gp) = Gp::fit_ml(&x, &y, &[1e-4, 1e-2, 0.1], p.ard) else {
        // A degenerate fit (should not happen with a noise floor): take them in order.
        return cands.iter().take(k).cloned().collect();
    };
    let best = y.iter().cloned().fold(f64::INFINITY, f64::min);
    let mut ys = y.clone();
    // A failed config says nothing about how fast its region is, but it is no longer unknown:
    // it enters the model at the value the model predicts there, which leaves the mean alone
    // and removes the uncertainty around it. Without this, expected improvement keeps paying
    // for the uncertainty of a failing block (the rest of a tile shape that never fits) and
    // spends a third of the budget there; imputing the worst time instead pulls down the good
    // configs next to the failing ones (128x256 with BK=32 next to the rejected BK=64).
    {
        let fx: Vec<Vec<f64>> = h
            .order
            .iter()
            .filter(|(_, t)| !t.is_finite())
            .take(MODEL_POINTS / 2)
            .map(|(c, _)| coords(space, c))
            .collect();
        let fm: Vec<f64> = fx.iter().map(|z| gp.predict(z).0).collect();
        let mut x2 = x.clone();
        x2.extend(fx);
        ys.extend(fm);
        if let Some(g) = Gp::fit(&x2, &ys, gp.length_scales(), gp.noise()) {
            gp = g;
        } else {
            ys.truncate(y.len());
        }
    }
    let mut chosen: Vec<usize> = Vec::new();
    for _ in 0..k.min(cands.len()) {
        let mut top: Option<(usize, f64, f64)> = None;
        for (i, zi) in z.iter().enumerate() {
            if chosen.contains(&i) {
                continue;
            }
            let (m, s) = gp.predict(zi);
            let score = expected_improvement(best, m, s) * runs[i];
            if top.is_none_or(|(_, b, _)| score > b) {
                top = Some((i, score, m));
            }
        }
        let Some((i, _, m)) = top else { break };
        chosen.push(i);
        if chosen.len() < k {
            // On a failed refit the old model stays; the next pick is still a new config.
            if let Some(g) = gp.with_point(&z[i], m, &ys) {
                gp = g;
                ys.push(m);
            }
        }
    }
    chosen.into_iter().map(|i| cands[i].clone()).collect()
}

/// Candidates for a space too large to enumerate: `pool` children bred from the fastest timed
/// configs (tournament, uniform crossover, mutation of one parameter or more), the untried
/// neighbours of the three fastest, and a quarter of `pool` in fresh space-filling samples.
fn bred(space: &ParamSpace, p: EvoParams, h: &History, rng: &mut SmallRng) -> Vec<Config> {
    let mut timed: Vec<&(Config, f64)> = h.order.iter().filter(|(_, t)| t.is_finite()).collect();
    timed.sort_by(|a, b| a.1.total_cmp(&b.1));
    let parents: Vec<Config> = timed.iter().take(12).map(|(c, _)| c.clone()).collect();
    let mut out: Vec<Config> = Vec::new();
    let mut have: HashSet<Config> = HashSet::new();
    for c in parents.iter().take(3) {
        for n in space.neighbours(c) {
            if !h.contains(&n) && have.insert(n.clone()) {
                out.push(n);
            }
        }
    }
    let fit = |c: &Config| h.time(c).unwrap_or(f64::INFINITY);
    let mut tries = 0;
    while !parents.is_empty() && out.len() < p.pool && tries < p.pool * 20 {
        tries += 1;
        let a = tournament(&parents, p.tournament, &fit, rng);
        let b = tournament(&parents, p.tournament, &fit, rng);
        let mut child = if rng.gen_bool(p.crossover.clamp(0.0, 1.0)) {
            space.crossover(a, b, rng).unwrap_or_else(|| a.clone())
        } else {
            a.clone()
        };
        if child == *a || child == *b || h.contains(&child) || rng.gen_bool(0.5) {
            let strength = rng.gen_range(1..=space.params.len().max(1));
            match mutate_n(space, &child, strength, rng) {
                Some(m) => child = m,
                None => continue,
            }
        }
        if !h.contains(&child) && have.insert(child.clone()) {
            out.push(child);
        }
    }
    let fresh = stratified(space, p.pool.div_ceil(4), h, &out, rng);
    out.extend(fresh);
    out
}

/// A valid, different config with `k` parameters moved (fewer when the space has fewer movable
/// ones), each mostly to an adjacent value.
fn mutate_n(space: &ParamSpace, c: &Config, k: usize, rng: &mut SmallRng) -> Option<Config> {
    let movable: Vec<usize> = (0..space.params.len())
        .filter(|&i| space.params[i].values.len() > 1)
        .collect();
    if movable.is_empty() {
        return None;
    }
    for _ in 0..200 {
        let mut m = c.clone();
        let mut which = movable.clone();
        which.shuffle(rng);
        for &i in which.iter().take(k.clamp(1, movable.len())) {
            let p = &space.params[i];
            let cur = p
                .values
                .iter()
                .position(|&v| Some(v) == m.get(&p.name))
                .unwrap_or(0);
            let next = if rng.gen_bool(0.6) {
                if cur == 0 {
                    1
                } else if cur + 1 == p.values.len() || rng.gen_bool(0.5) {
                    cur - 1
                } else {
                    cur + 1
                }
            } else {
                // any other value
                let j = rng.gen_range(0..p.values.len() - 1);
                if j >= cur {
                    j + 1
                } else {
                    j
                }
            };
            m.set(&p.name, p.values[next]);
        }
        if m != *c && space.is_valid(&m) {
            return Some(m);
        }
    }
    None
}

/// Up to `n` valid configs neither in `h` nor in `also`, space-filling: a Latin hypercube over
/// the parameters' values (each column is every value repeated evenly, the values tried least
/// so far first, shuffled independently), with invalid or repeated rows repaired by redrawing
/// their values, and uniform draws (then the enumeration) when repair fails.
fn stratified(
    space: &ParamSpace,
    n: usize,
    h: &History,
    also: &[Config],
    rng: &mut SmallRng,
) -> Vec<Config> {
    let mut out: Vec<Config> = Vec::new();
    if n == 0 || space.params.iter().any(|p| p.values.is_empty()) {
        return out;
    }
    let fresh = |c: &Config, out: &[Config]| {
        space.is_valid(c) && !h.contains(c) && !also.contains(c) && !out.contains(c)
    };
    let columns: Vec<Vec<usize>> = space
        .params
        .iter()
        .map(|p| {
            // Values ordered by how often they were tried (least first, ties at random).
            let mut order: Vec<(usize, usize)> = (0..p.values.len())
                .map(|i| {
                    let used = h
                        .order
                        .iter()
                        .filter(|(c, _)| c.get(&p.name) == Some(p.values[i]))
                        .count();
                    (used, i)
                })
                .collect();
            order.shuffle(rng);
            order.sort_by_key(|&(used, _)| used);
            let mut col: Vec<usize> = (0..n).map(|j| order[j % order.len()].1).collect();
            col.shuffle(rng);
            col
        })
        .collect();
    for row in 0..n {
        let mut c = Config(
            space
                .params
                .iter()
                .zip(&columns)
                .map(|(p, col)| (p.name.clone(), p.values[col[row]]))
                .collect(),
        );
        let mut tries = 0;
        while !fresh(&c, &out) && tries < 100 {
            tries += 1;
            // Redraw one parameter at random (a second after many tries).
            for _ in 0..1 + tries / 25 {
                let p = &space.params[rng.gen_range(0..space.params.len())];
                c.set(&p.name, p.values[rng.gen_range(0..p.values.len())]);
            }
        }
        if !fresh(&c, &out) {
            match (0..50)
                .filter_map(|_| space.sample(rng))
                .find(|c| fresh(c, &out))
            {
                Some(s) => c = s,
                None => continue,
            }
        }
        out.push(c);
    }
    if out.len() < n && space.raw_size() <= 1 << 20 {
        // Nearly explored: take untried configs straight from the enumeration.
        let rest: Vec<Config> = space
            .enumerate()
            .into_iter()
            .filter(|c| !h.contains(c) && !also.contains(c) && !out.contains(c))
            .collect();
        out.extend(rest.into_iter().take(n - out.len()));
    }
    out
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

    /// A deceptive landscape: a broad smooth bowl whose floor (time 1.0) sits near the low
    /// corner of A, B, C, and a narrow basin around the far corner A = B = C = 3 (10% faster at
    /// its peak) that the bowl's slope points away from: only configs at most one of A, B, C away
    /// from the peak see it. 576 configs, none invalid.
    pub(crate) fn synthetic_deceptive() -> (ParamSpace, Vec<(Config, f64)>) {
        let s = ParamSpace::new()
            .param("A", &[0, 1, 2, 3])
            .param("B", &[0, 1, 2, 3])
            .param("C", &[0, 1, 2, 3])
            .param("D", &[0, 1, 2])
            .param("E", &[0, 1, 2]);
        let land = s
            .enumerate()
            .into_iter()
            .map(|c| {
                let g = |k| c.get(k).unwrap() as f64;
                let off = ["A", "B", "C"].iter().filter(|&&k| g(k) != 3.0).count() as f64;
                let t = if off <= 1.0 {
                    0.90 + 0.04 * off + 0.01 * (g("D") - 2.0).abs() + 0.002 * g("E")
                } else {
                    1.0 + 0.05 * ((g("A") - 1.0).powi(2) + (g("B") - 1.0).powi(2))
                        + 0.05 * (g("C") - 1.0).powi(2)
                        + 0.03 * (g("D") - 1.0).powi(2)
                        + 0.01 * g("E")
                };
                (c, t)
            })
            .collect();
        (s, land)
    }

    /// The GEMM-like `synthetic` landscape with every time multiplied by a fixed pseudo-random
    /// factor in [0.97, 1.03] (measurement noise frozen into the landscape): the bowl is rugged,
    /// with many one-step local optima.
    pub(crate) fn synthetic_noisy() -> (ParamSpace, Vec<(Config, f64)>) {
        let (s, land) = synthetic();
        let mut rng = SmallRng::seed_from_u64(42);
        let land = land
            .into_iter()
            .map(|(c, t)| (c, t * rng.gen_range(0.97..1.03)))
            .collect();
        (s, land)
    }

    /// A narrow ridge: the time grows fast with the distance from the diagonal X = Y + 1 of an
    /// 8 x 8 grid (an interaction no single parameter shows), gently along it; 768 configs.
    pub(crate) fn synthetic_ridge() -> (ParamSpace, Vec<(Config, f64)>) {
        let s = ParamSpace::new()
            .param("X", &[0, 1, 2, 3, 4, 5, 6, 7])
            .param("Y", &[0, 1, 2, 3, 4, 5, 6, 7])
            .param("Z", &[0, 1, 2, 3])
            .param("W", &[0, 1, 2]);
        let land = s
            .enumerate()
            .into_iter()
            .map(|c| {
                let g = |k| c.get(k).unwrap() as f64;
                let t = 1.0
                    + 0.15 * (g("X") - g("Y") - 1.0).abs()
                    + 0.01 * (g("X") - 5.0).powi(2)
                    + 0.03 * (g("Z") - 2.0).powi(2)
                    + 0.005 * g("W");
                (c, t)
            })
            .collect();
        (s, land)
    }

    /// Many failures: 240 configs of which those over a size product fail (a region), and
    /// another 15% fail at random (scattered, as compile or verification failures come), with the
    /// optimum next to the failing region.
    pub(crate) fn synthetic_failing() -> (ParamSpace, Vec<(Config, f64)>) {
        let s = ParamSpace::new()
            .param("A", &[1, 2, 4, 8])
            .param("B", &[1, 2, 4, 8])
            .param("C", &[2, 3, 4, 5, 6])
            .param("D", &[0, 1, 2]);
        let mut rng = SmallRng::seed_from_u64(7);
        let land = s
            .enumerate()
            .into_iter()
            .map(|c| {
                let g = |k| c.get(k).unwrap() as f64;
                let scattered = rng.gen_bool(0.15);
                let t = if g("A") * g("B") * g("C") > 48.0 || scattered {
                    f64::INFINITY
                } else {
                    1.0 + 0.2 * ((g("A") * g("B")).log2() - 4.0).abs()
                        + 0.05 * (g("C") - 4.0).abs()
                        + 0.01 * g("D")
                        + if g("A") != g("B") { 0.03 } else { 0.0 }
                };
                (c, t)
            })
            .collect();
        (s, land)
    }

    /// A landscape committed under the repository root.
    fn load_committed(path: &str) -> crate::tune::landscape::Landscape {
        crate::tune::landscape::Landscape::load(
            &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path),
        )
        .unwrap()
    }

    /// A landscape committed under the repository root, as its space and points.
    fn committed_at(path: &str) -> (ParamSpace, Vec<(Config, f64)>) {
        let l = load_committed(path);
        (l.space(), l.points())
    }

    /// The exhaustive landscapes of today's `wgmma_tma_ws` space (H100, 2026-11-24, ledger #90 and #92),
    /// each with its column name in the sweep.
    const CURRENT_WS_LANDSCAPES: [(&str, &str); 10] = [
        (
            "ws4096",
            "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-4096x4096x4096.json",
        ),
        (
            "ws2048",
            "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-2048x2048x2048.json",
        ),
        (
            "ws512L",
            "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-512x4096x14336.json",
        ),
        (
            "ws128L",
            "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-128x4096x14336.json",
        ),
        (
            "ws4000",
            "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-4000x4000x4000.json",
        ),
        (
            "ws512S",
            "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-512x4096x4096.json",
        ),
        (
            "ws3000",
            "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-3000x3000x3000.json",
        ),
        (
            "ws8192L",
            "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-8192x14336x4096.json",
        ),
        (
            "ws1024",
            "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-1024x1024x1024.json",
        ),
        (
            "ws16k",
            "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-16384x16384x16384.json",
        ),
    ];

    fn committed() -> (ParamSpace, Vec<(Config, f64)>) {
        committed_at("tests/fixtures/landscapes/mma_sync-h200.json")
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
    /// trial, on the ten landscapes of today's `wgmma_tma_ws` space timed on an H100 (sessions 22
    /// and 23). At 4000^3 and 16384^3 the heuristic's config is not the best (1.007x, 1.023x),
    /// so there the search has to find a better one. A landscape of an older space fails here
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

    #[test]
    fn early_stop_only_when_far_behind_a_finite_best() {
        assert!(far_behind(2.0, Some(1.0), 1.5));
        assert!(!far_behind(1.2, Some(1.0), 1.5));
        assert!(!far_behind(9.0, None, 1.5));
        assert!(!far_behind(9.0, Some(f64::INFINITY), 1.5));
    }

    #[test]
    fn a_search_from_a_baseline_evaluates_it_first_within_the_budget() {
        let space = ParamSpace::new()
            .param("A", &[1, 2, 3, 4])
            .param("B", &[1, 2, 3, 4]);
        let base = Config::new(&[("A", 3), ("B", 2)]);
        let mut seen = Vec::new();
        let h = search_from(
            &space,
            Strategy::Evolutionary(EvoParams::seeded(7)),
            5,
            &[base.clone(), Config::new(&[("A", 9), ("B", 1)])],
            |batch| {
                seen.extend(batch.iter().cloned());
                batch.iter().map(|c| c.get("A").unwrap() as f64).collect()
            },
        );
        assert_eq!(seen[0], base, "the baseline goes first");
        assert!(
            !seen.contains(&Config::new(&[("A", 9), ("B", 1)])),
            "invalid start skipped"
        );
        assert_eq!(h.len(), 5);
        let unique: std::collections::HashSet<_> = seen.iter().collect();
        assert_eq!(unique.len(), seen.len());
    }
}
