//! Float64 MoE routing: scores, the (grouped) top-k with ties to the lower expert index, the
//! weights, and the expert-sorted row order, as `kernels/moe/route.cu` defines them; and the
//! judgement of a GPU routing against it, which lets two experts whose f64 keys differ by less
//! than f32 arithmetic resolves trade places (never two whose keys are equal: there the lower
//! index must win).

use crate::ops::moe::route::{RouteOptions, Scoring};

/// Keys closer than this (relative to 1 + their size) are a tie f32 arithmetic may break either
/// way: the f32 softmax of up to 1024 logits is within a few 1e-7 of the f64 one.
pub const TIE_TOL: f64 = 1e-5;

/// A routing: each token's k experts (-1: a dropped pair) and weights.
#[derive(Debug, Clone, PartialEq)]
pub struct RouteRef {
    pub tokens: usize,
    pub experts: usize,
    pub top_k: usize,
    pub ids: Vec<i32>,
    pub weights: Vec<f64>,
}

/// The tables the expert GEMMs read, from a routing.
#[derive(Debug, Clone, PartialEq)]
pub struct RowOrder {
    pub counts: Vec<i32>,
    pub offsets: Vec<i32>,
    pub row_token: Vec<i32>,
    pub row_weight: Vec<f64>,
    pub pair_row: Vec<i32>,
}

/// One token's logits and the options, in f64: scores and selection keys.
struct Token<'a> {
    logits: &'a [f64],
    bias: Option<&'a [f64]>,
    opts: &'a RouteOptions,
    max: f64,
    sum: f64,
}

impl<'a> Token<'a> {
    fn new(logits: &'a [f64], bias: Option<&'a [f64]>, opts: &'a RouteOptions) -> Token<'a> {
        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let sum = logits.iter().map(|l| (l - max).exp()).sum();
        Token {
            logits,
            bias,
            opts,
            max,
            sum,
        }
    }

    /// Whether the keys are the logits themselves (no bias, no groups): exact, no tolerance.
    fn by_logit(&self) -> bool {
        self.bias.is_none() && self.opts.groups.is_none()
    }

    fn score(&self, e: usize) -> f64 {
        let l = self.logits[e];
        match self.opts.scoring {
            Scoring::Softmax => (l - self.max).exp() / self.sum,
            Scoring::Sigmoid => 1.0 / (1.0 + (-l).exp()),
        }
    }

    fn key(&self, e: usize) -> f64 {
        let k = if self.by_logit() {
            self.logits[e]
        } else {
            self.score(e) + self.bias.map_or(0.0, |b| b[e])
        };
        if k.is_nan() {
            f64::NEG_INFINITY
        } else {
            k
        }
    }

    /// Two keys f32 arithmetic may order either way (never equal ones).
    fn close(&self, a: f64, b: f64) -> bool {
        !self.by_logit() && a != b && (a - b).abs() <= TIE_TOL * (1.0 + a.abs().max(b.abs()))
    }

    /// Each group's two best keys, best first (one for one-expert groups).
    fn group_tops(&self, groups: usize) -> Vec<Vec<f64>> {
        let per = self.logits.len() / groups;
        (0..groups)
            .map(|g| {
                let mut k: Vec<f64> = (g * per..(g + 1) * per).map(|e| self.key(e)).collect();
                k.sort_by(|a, b| b.total_cmp(a));
                k.truncate(2);
                k
            })
            .collect()
    }

    /// Group scores: the sum of each group's two best keys (its one key for one-expert groups).
    fn group_scores(&self, groups: usize) -> Vec<f64> {
        self.group_tops(groups)
            .iter()
            .map(|t| t.iter().sum())
            .collect()
    }

    /// The experts the kept groups hold (all of them without groups), and the kept groups.
    fn pool(&self) -> (Vec<usize>, Vec<usize>) {
        let e = self.logits.len();
        match self.opts.groups {
            None => ((0..e).collect(), Vec::new()),
            Some((g, kg)) => {
                let gs = self.group_scores(g);
                let kept = top(&gs, kg);
                let per = e / g;
                let mut pool: Vec<usize> =
                    kept.iter().flat_map(|&g| g * per..(g + 1) * per).collect();
                pool.sort_unstable();
                (pool, kept)
            }
        }
    }

    fn select(&self) -> Vec<usize> {
        let (pool, _) = self.pool();
        let keys: Vec<f64> = pool.iter().map(|&e| self.key(e)).collect();
        top(&keys, self.opts.top_k)
            .into_iter()
            .map(|i| pool[i])
            .collect()
    }

    /// Routing weights of `chosen`: scores, renormalised, scaled.
    fn weights(&self, chosen: &[usize]) -> Vec<f64> {
        let w: Vec<f64> = chosen.iter().map(|&e| self.score(e)).collect();
        let norm = if self.opts.renormalize {
            w.iter().sum::<f64>()
        } else {
            1.0
        };
        let s = self.opts.routed_scaling as f64;
        w.iter().map(|x| x / norm * s).collect()
    }

    /// Whether `better` may legitimately be chosen over `worse` (higher key, a near tie, or an
    /// equal key at a lower index).
    fn may_beat(&self, kb: f64, better: usize, kw: f64, worse: usize) -> bool {
        kb > kw || self.close(kb, kw) || (kb == kw && better < worse)
    }

    /// Whether a GPU routing's choice for this token is a legitimate top-k (see the module).
    fn accepts(&self, got: &[usize]) -> bool {
        let e = self.logits.len();
        let mut seen = vec![false; e];
        for &x in got {
            if x >= e || seen[x] {
                return false;
            }
            seen[x] = true;
        }
        let pool: Vec<usize> = match self.opts.groups {
            None => (0..e).collect(),
            Some((g, kg)) => {
                let per = e / g;
                let gs = self.group_scores(g);
                // the groups the choice uses, topped up by the reference's order
                let mut kept: Vec<usize> = Vec::new();
                for &x in got {
                    if !kept.contains(&(x / per)) {
                        kept.push(x / per);
                    }
                }
                if kept.len() > kg {
                    return false;
                }
                for gi in top(&gs, g) {
                    if kept.len() == kg {
                        break;
                    }
                    if !kept.contains(&gi) {
                        kept.push(gi);
                    }
                }
                // Equal sums of different keys are a near tie (f32 rounds the two sums
                // differently); only groups whose best keys are the same go to the lower index.
                let tops = self.group_tops(g);
                for &a in &kept {
                    for b in (0..g).filter(|b| !kept.contains(b)) {
                        let sums_tie = gs[a] == gs[b] && tops[a] != tops[b];
                        if !sums_tie && !self.may_beat(gs[a], a, gs[b], b) {
                            return false;
                        }
                    }
                }
                kept.iter().flat_map(|&g| g * per..(g + 1) * per).collect()
            }
        };
        got.iter().all(|&a| {
            pool.iter()
                .filter(|b| !seen[**b])
                .all(|&b| self.may_beat(self.key(a), a, self.key(b), b))
        })
    }
}

/// Indices of the `k` largest values, largest first, equal values by lower index.
fn top(v: &[f64], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[b].total_cmp(&v[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

/// Routing from logits [T, E] (and a bias [E]) in f64.
pub fn route_logits(
    logits: &[f64],
    bias: Option<&[f64]>,
    tokens: usize,
    experts: usize,
    opts: &RouteOptions,
) -> RouteRef {
    let k = opts.top_k;
    let mut r = RouteRef {
        tokens,
        experts,
        top_k: k,
        ids: Vec::with_capacity(tokens * k),
        weights: Vec::with_capacity(tokens * k),
    };
    for t in 0..tokens {
        let tok = Token::new(&logits[t * experts..(t + 1) * experts], bias, opts);
        let chosen = tok.select();
        r.weights.extend(tok.weights(&chosen));
        r.ids.extend(chosen.iter().map(|&e| e as i32));
    }
    r
}

/// A precomputed routing: ids [T, k] (out of range: dropped), weights [T, k] or (`full`) [T, E].
pub fn route_given(
    ids: &[i64],
    weights: &[f64],
    tokens: usize,
    experts: usize,
    top_k: usize,
    full: bool,
) -> RouteRef {
    let mut r = RouteRef {
        tokens,
        experts,
        top_k,
        ids: Vec::with_capacity(tokens * top_k),
        weights: Vec::with_capacity(tokens * top_k),
    };
    for (p, &id) in ids.iter().enumerate().take(tokens * top_k) {
        let ok = id >= 0 && (id as u64) < experts as u64;
        r.ids.push(if ok { id as i32 } else { -1 });
        r.weights.push(match (ok, full) {
            (false, _) => 0.0,
            (true, false) => weights[p],
            (true, true) => weights[(p / top_k) * experts + id as usize],
        });
    }
    r
}

/// The GPU routing `got_ids` judged against the logits: `Ok` with the routing to compare the rest
/// against (the reference's weights for the GPU's choices, which differ from the reference's
/// only at near ties), or `Err` naming the first token whose choice no f32 rounding explains.
pub fn accept(
    logits: &[f64],
    bias: Option<&[f64]>,
    tokens: usize,
    experts: usize,
    opts: &RouteOptions,
    got_ids: &[i32],
) -> Result<RouteRef, String> {
    let want = route_logits(logits, bias, tokens, experts, opts);
    let k = opts.top_k;
    let mut r = want.clone();
    for t in 0..tokens {
        let span = t * k..(t + 1) * k;
        let mut a: Vec<i32> = got_ids[span.clone()].to_vec();
        let mut b: Vec<i32> = want.ids[span.clone()].to_vec();
        a.sort_unstable();
        b.sort_unstable();
        let tok = Token::new(&logits[t * experts..(t + 1) * experts], bias, opts);
        if a != b || got_ids[span.clone()] != want.ids[span.clone()] {
            let got: Vec<usize> = got_ids[span.clone()]
                .iter()
                .map(|&x| if x < 0 { usize::MAX } else { x as usize })
                .collect();
            if !tok.accepts(&got) {
                return Err(format!(
                    "token {t} chose experts {:?}; the f64 routing chooses {:?}",
                    &got_ids[span.clone()],
                    &want.ids[span]
                ));
            }
            r.ids[span.clone()].copy_from_slice(&got_ids[span.clone()]);
            r.weights[span].copy_from_slice(&tok.weights(&got));
        }
    }
    Ok(r)
}

/// The expert-sorted row order of a routing: by expert, then by pair index t k + j.
pub fn row_order(r: &RouteRef) -> RowOrder {
    let (e, k) = (r.experts, r.top_k);
    let mut counts = vec![0i32; e];
    for &id in &r.ids {
        if id >= 0 {
            counts[id as usize] += 1;
        }
    }
    let mut offsets = vec![0i32; e + 1];
    for i in 0..e {
        offsets[i + 1] = offsets[i] + counts[i];
    }
    let rows = offsets[e] as usize;
    let mut next = offsets.clone();
    let mut o = RowOrder {
        counts,
        offsets,
        row_token: vec![0; rows],
        row_weight: vec![0.0; rows],
        pair_row: vec![-1; r.ids.len()],
    };
    for (p, &id) in r.ids.iter().enumerate() {
        if id < 0 {
            continue;
        }
        let row = next[id as usize] as usize;
        next[id as usize] += 1;
        o.row_token[row] = (p / k) as i32;
        o.row_weight[row] = r.weights[p];
        o.pair_row[p] = row as i32;
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(k: usize, scoring: Scoring) -> RouteOptions {
        RouteOptions::top_k(k, scoring)
    }

    #[test]
    fn softmax_top_k_renormalised_matches_its_definition() {
        let l = [0.5, 2.0, -1.0, 2.0, 1.0];
        let o = RouteOptions {
            renormalize: true,
            ..opts(2, Scoring::Softmax)
        };
        let r = route_logits(&l, None, 1, 5, &o);
        // equal logits 2.0 at experts 1 and 3: the lower index first
        assert_eq!(r.ids, vec![1, 3]);
        assert!((r.weights[0] - 0.5).abs() < 1e-15 && (r.weights[1] - 0.5).abs() < 1e-15);
        let plain = route_logits(&l, None, 1, 5, &opts(3, Scoring::Softmax));
        assert_eq!(plain.ids, vec![1, 3, 4]);
        let z: f64 = l.iter().map(|x: &f64| x.exp()).sum();
        assert!((plain.weights[2] - 1f64.exp() / z).abs() < 1e-15);
    }

    #[test]
    fn every_expert_chosen_when_top_k_is_e() {
        let l = [3.0, 3.0, 3.0, 3.0];
        let r = route_logits(&l, None, 1, 4, &opts(4, Scoring::Sigmoid));
        assert_eq!(r.ids, vec![0, 1, 2, 3]);
    }

    #[test]
    fn bias_moves_the_choice_not_the_weight() {
        let l = [0.0, 0.1];
        let bias = [0.5, 0.0];
        let o = RouteOptions {
            routed_scaling: 2.5,
            ..opts(1, Scoring::Sigmoid)
        };
        let r = route_logits(&l, Some(&bias), 1, 2, &o);
        assert_eq!(r.ids, vec![0]);
        assert!((r.weights[0] - 0.5 * 2.5).abs() < 1e-15);
    }

    #[test]
    fn grouped_top_k_keeps_the_best_groups() {
        // 4 groups of 2: group scores (sigmoid sums) rank groups 3, 1, 0, 2
        let l = [0.0, 0.0, 1.0, 1.0, -1.0, -3.0, 2.0, 2.0];
        let o = RouteOptions {
            groups: Some((4, 2)),
            ..opts(3, Scoring::Sigmoid)
        };
        let r = route_logits(&l, None, 1, 8, &o);
        assert_eq!(r.ids, vec![6, 7, 2]);
        // with one group kept, only its experts (and then the lower index on equal keys)
        let one = RouteOptions {
            groups: Some((4, 1)),
            ..opts(2, Scoring::Sigmoid)
        };
        assert_eq!(route_logits(&l, None, 1, 8, &one).ids, vec![6, 7]);
    }

    #[test]
    fn near_ties_may_trade_places_equal_keys_may_not() {
        let o = RouteOptions {
            groups: Some((2, 2)),
            ..opts(1, Scoring::Sigmoid)
        };
        // experts 0 and 1 differ by 1e-9 in key: either is a legitimate choice
        let l = [1.0, 1.0 + 4e-9, -2.0, -2.0];
        let want = route_logits(&l, None, 1, 4, &o);
        assert_eq!(want.ids, vec![1]);
        let ok = accept(&l, None, 1, 4, &o, &[0]).unwrap();
        assert_eq!(ok.ids, vec![0]);
        assert!((ok.weights[0] - 1.0 / (1.0 + (-1f64).exp())).abs() < 1e-15);
        // equal keys: the lower index, only
        let tie = [1.0, 1.0, -2.0, -2.0];
        assert!(accept(&tie, None, 1, 4, &o, &[0]).is_ok());
        assert!(accept(&tie, None, 1, 4, &o, &[1]).is_err());
        // logits as keys are exact: no tolerance at all
        let flat = opts(1, Scoring::Softmax);
        assert!(accept(&l, None, 1, 4, &flat, &[0]).is_err());
        // a clear loser, a repeat, an id out of range
        assert!(accept(&l, None, 1, 4, &o, &[2]).is_err());
        let two = RouteOptions {
            groups: None,
            ..opts(2, Scoring::Sigmoid)
        };
        assert!(accept(&l, Some(&[0.0; 4]), 1, 4, &two, &[1, 1]).is_err());
        assert!(accept(&l, Some(&[0.0; 4]), 1, 4, &two, &[1, 9]).is_err());
    }

    #[test]
    fn a_near_tie_between_groups_may_trade_them() {
        // groups {0,1} and {2,3} score within 1e-9; topk_group 1, top_k 1
        let l = [1.0, 0.0, 1.0 + 2e-9, 0.0];
        let o = RouteOptions {
            groups: Some((2, 1)),
            ..opts(1, Scoring::Sigmoid)
        };
        assert_eq!(route_logits(&l, None, 1, 4, &o).ids, vec![2]);
        assert!(accept(&l, None, 1, 4, &o, &[0]).is_ok());
        assert!(accept(&l, None, 1, 4, &o, &[1]).is_err());
    }

    #[test]
    fn groups_whose_sums_tie_from_different_keys_may_go_either_way() {
        // keys (sigmoid, bias): group 0 = {s(0), s(0.5) + 0.25}, group 1 = {s(0.5), s(0) + 0.25}:
        // the same sum mathematically, from different keys
        let l = [0.0, 0.5, 0.5, 0.0];
        let bias = [0.0, 0.25, 0.0, 0.25];
        let o = RouteOptions {
            groups: Some((2, 1)),
            ..opts(1, Scoring::Sigmoid)
        };
        let want = route_logits(&l, Some(&bias), 1, 4, &o).ids;
        for got in [[1], [3]] {
            // each group's best expert
            assert!(
                accept(&l, Some(&bias), 1, 4, &o, &got).is_ok(),
                "{got:?} (want {want:?})"
            );
        }
        // but never a group's weaker expert
        assert!(accept(&l, Some(&bias), 1, 4, &o, &[0]).is_err());
    }

    #[test]
    fn given_routing_drops_ids_out_of_range() {
        let ids = [3, -1, 0, 7];
        let w = [0.25, 0.5, 0.75, 1.0];
        let r = route_given(&ids, &w, 2, 4, 2, false);
        assert_eq!(r.ids, vec![3, -1, 0, -1]);
        assert_eq!(r.weights, vec![0.25, 0.0, 0.75, 0.0]);
        // [T, E] weights are read at the id
        let full = [0.0, 0.1, 0.2, 0.3, 1.0, 1.1, 1.2, 1.3];
        let r = route_given(&[3, 1, 0, 2], &full, 2, 4, 2, true);
        assert_eq!(r.weights, vec![0.3, 0.1, 1.0, 1.2]);
    }

    #[test]
    fn rows_go_by_expert_then_pair_order() {
        let r = RouteRef {
            tokens: 3,
            experts: 3,
            top_k: 2,
            ids: vec![2, 0, 0, 2, -1, 2],
            weights: vec![0.1, 0.2, 0.3, 0.4, 0.0, 0.6],
        };
        let o = row_order(&r);
        assert_eq!(o.counts, vec![2, 0, 3]);
        assert_eq!(o.offsets, vec![0, 2, 2, 5]);
        assert_eq!(o.row_token, vec![0, 1, 0, 1, 2]);
        assert_eq!(o.row_weight, vec![0.2, 0.3, 0.1, 0.4, 0.6]);
        assert_eq!(o.pair_row, vec![2, 0, 1, 3, -1, 4]);
    }
}
