//! The evolutionary search's steps: a space-filling first generation, then batches picked by
//! expected improvement from a surrogate model, over candidates enumerated or bred.

use std::collections::HashSet;

use rand::rngs::SmallRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

use super::{EvoParams, History};
use crate::tune::space::{Config, ParamSpace};
use crate::tune::surrogate::{expected_improvement, feasibility, standardise, Gp};

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
pub(super) fn evolve(
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
            let cur = p.index_in(&m);
            let next = if rng.gen_bool(0.6) {
                p.step_from(cur, rng)
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
