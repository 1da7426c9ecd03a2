//! The deterministic mode's order of dQ adds with a writer warp (`bwd_fa3_ordered_eager`), modelled on
//! the CPU: each key block's walk and its rank at every (head, query block) as the device computes
//! them (`det_walk`, `det_group`, `det_rank` in `kernels/attention/bwd_fa3_block.cuh`), the number
//! of key blocks that add into each dQ tile, and a run of the writers' waits over blocks launched
//! in order onto a fixed number of SMs (one block each), which either finishes or stops with every
//! resident block waiting: a hang. Its quick suite hung on the device at Sq 65 Skv 200 d128 and
//! its d64 timing (B4 H16 S4096) never returned (2026-11-29): in both the rotated order puts a
//! group's blocks one step apart, and a writer that waited for its counter while still holding
//! the previous block's bump closed a ring of waits; `Release::Held` reproduces it. The d256
//! ordered writers (`bwd_fa3_d256_w2`) take the same walks and order at 64 keys a block.

use super::{BackwardProblem, DetOrder};

/// When a writer bumps the counter of its previous block (whose adds it issued).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// Only after the next block's adds are issued (the first device version: it could wait for
    /// its own turn while holding the bump another block waits for).
    Held,
    /// As `Held` when the next block's turn has come; else first, before it waits
    /// (`bwd_fa3_ordered_dq`, removed 2026-11-30): a waiting writer holds nothing.
    BeforeWait,
    /// As soon as the add is complete, before anything else (`bwd_fa3_ordered_eager`).
    AtOnce,
}

/// One add of a block's dQ tile: batch, query head, query block, and its rank (how many key blocks
/// add into that tile before it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Add {
    pub b: usize,
    pub h: usize,
    pub mb: usize,
    pub rank: usize,
}

/// The grid of `p` at `bm` query rows a step and `bn` keys a block: key blocks per (batch, key/value
/// head), and the query blocks.
fn grid(p: &BackwardProblem, bm: usize, bn: usize) -> (usize, usize) {
    (p.attn.seqlen_kv.div_ceil(bn), p.attn.seqlen_q.div_ceil(bm))
}

/// How many key blocks add into each dQ tile of query block `mb`: every key block, or (causal,
/// bottom-right) those whose first key some query of the block sees; 0 where none does (Sq > Skv:
/// rows that see nothing, whose dQ stays 0).
pub fn adders(p: &BackwardProblem, bm: usize, bn: usize, mb: usize) -> usize {
    let (nx, _) = grid(p, bm, bn);
    if !p.attn.causal {
        return nx;
    }
    // key block n sees mb iff n·bn < (mb + 1)·bm + Skv - Sq
    let x = ((mb + 1) * bm + p.attn.seqlen_kv) as i64 - p.attn.seqlen_q as i64;
    if x <= 0 {
        0
    } else {
        nx.min((x as usize).div_ceil(bn))
    }
}

/// Every block's adds in walk order, the blocks in launch order (grid x fastest, then key/value
/// head, then batch), as the device runs `p` in the deterministic mode with `sms` blocks at once.
pub fn walks(p: &BackwardProblem, bm: usize, bn: usize, sms: usize) -> Vec<Vec<Add>> {
    walks_launched(p, bm, bn, sms, 0)
}

/// [`walks`] with the argument block's `lpt_heads` = `lpt` (`KILN_BWD_DET_LPT`,
/// [`super::bwd_fa3_ordered_eager::det_lpt_heads`]): under the descending order, `lpt` > 0
/// launches the blocks longest walk first in chunks of `lpt` (key/value head, batch) pairs
/// (`lpt_block`) instead of each head's key blocks in reverse (the rotated order ignores it).
pub fn walks_launched(
    p: &BackwardProblem,
    bm: usize,
    bn: usize,
    sms: usize,
    lpt: usize,
) -> Vec<Vec<Add>> {
    let a = &p.attn;
    let (nx, _) = grid(p, bm, bn);
    let order = DetOrder::of(p);
    let blocks = nx * a.heads_kv * a.batch;
    (0..blocks)
        .map(|l| {
            let (x, hk, b) = (l % nx, (l / nx) % a.heads_kv, l / (nx * a.heads_kv));
            let (nb, hk, b) = if lpt > 0 && order == DetOrder::Descending {
                let (nb, hk, b) = super::lpt::lpt_block(
                    l as u32,
                    lpt as u32,
                    nx as u32,
                    a.heads_kv as u32,
                    a.batch as u32,
                );
                (nb as usize, hk as usize, b as usize)
            } else if order == DetOrder::Descending {
                (nx - 1 - x, hk, b) // launched in reverse
            } else {
                (x, hk, b)
            };
            block_walk(p, bm, bn, sms, nb, hk, b)
        })
        .collect()
}

/// [`walks`] with the grid's last partial wave split as `plan` splits it
/// (`bwd_fa3_d256_w2_cols2t`, `KILN_BWD_TAIL`): the first `plan.full` blocks whole, then each
/// split key block's walk in `plan.parts` contiguous shares (`bwd_tail.cuh`'s `tail_share`), a
/// block each, launched in that order; every add keeps its key block's rank.
pub fn walks_split(
    p: &BackwardProblem,
    bm: usize,
    bn: usize,
    sms: usize,
    plan: &super::tail::TailPlan,
) -> Vec<Vec<Add>> {
    let mut whole = walks(p, bm, bn, sms);
    let split = whole.split_off(plan.full as usize);
    let parts = plan.parts as usize;
    for w in split {
        let n = w.len();
        whole.extend((0..parts).map(|q| w[n * q / parts..n * (q + 1) / parts].to_vec()));
    }
    whole
}

/// The rotated order's group of key block `nb` of pair `pair` (key/value head + heads · batch),
/// `nx` key blocks each, launched in the grid's order in waves of `sms`: the first key block of
/// the pair in `nb`'s wave and their count, as the device's `det_group` has them.
pub fn rotated_group(nx: usize, sms: usize, nb: usize, pair: usize) -> (usize, usize) {
    let base = nx * pair; // key block n of the pair launched at base + n
    let w0 = (base + nb) / sms * sms;
    let g0 = w0.saturating_sub(base);
    (g0, nx.min(w0 + sms - base) - g0)
}

/// The adds of key block `nb` of key/value head `hk`, batch `b`, in walk order.
fn block_walk(
    p: &BackwardProblem,
    bm: usize,
    bn: usize,
    sms: usize,
    nb: usize,
    hk: usize,
    b: usize,
) -> Vec<Add> {
    let a = &p.attn;
    let (nx, m_blocks) = grid(p, bm, bn);
    let (group, off) = (a.group(), a.seqlen_kv as i64 - a.seqlen_q as i64);
    let order = DetOrder::of(p);
    let m_first = if a.causal {
        ((nb * bn) as i64 - off).max(0) as usize / bm
    } else {
        0
    };
    let per_head = m_blocks - m_first;
    // the rotated order's group: the key blocks of this head in this block's wave
    let (g0, gn) = rotated_group(nx, sms, nb, hk + a.heads_kv * b);
    let gs = m_blocks / gn;
    let start = if order == DetOrder::Rotated {
        (nb - g0) * gs
    } else {
        m_first
    };
    let mut adds = Vec::with_capacity(group * per_head);
    for it in 0..group * per_head {
        let h = hk * group + it / per_head;
        let mut mb = start + it % per_head;
        if !a.causal && mb >= per_head {
            mb -= per_head;
        }
        let rank = match order {
            DetOrder::Descending => {
                let x = ((mb + 1) * bm) as i64 + off;
                ((nx - 1).min(((x - 1) / bn as i64) as usize)) - nb
            }
            DetOrder::Rotated if gs > 0 => g0 + ((gn - 1).min(mb / gs) + gn - (nb - g0)) % gn,
            _ => nb,
        };
        adds.push(Add { b, h, mb, rank });
    }
    adds
}

/// Runs the writers' waits: blocks launched in order onto `sms` slots, each adding its tiles in
/// walk order once the tile's counter reads its rank, a slot freed when its block has bumped its
/// last counter. Some(adds in the order they happened) when every block finishes, None on a
/// hang. Panics if a tile is added out of its order (two equal ranks).
pub fn run(walks: &[Vec<Add>], sms: usize, rule: Release) -> Option<Vec<Add>> {
    use std::collections::HashMap;
    let mut counter: HashMap<(usize, usize, usize), usize> = HashMap::new();
    let mut done = Vec::new();
    // resident blocks: (index, next add, the add whose bump is held)
    let mut resident: Vec<(usize, usize, Option<Add>)> = Vec::new();
    let mut next = 0;
    let bump = |c: &mut HashMap<_, usize>, a: Add| *c.entry((a.b, a.h, a.mb)).or_insert(0) += 1;
    loop {
        while resident.len() < sms && next < walks.len() {
            resident.push((next, 0, None));
            next += 1;
        }
        if resident.is_empty() {
            return Some(done);
        }
        let mut moved = false;
        for r in resident.iter_mut() {
            let w = &walks[r.0];
            while r.1 < w.len() {
                let a = w[r.1];
                let at = counter.get(&(a.b, a.h, a.mb)).copied().unwrap_or(0);
                if at < a.rank {
                    if rule == Release::BeforeWait {
                        if let Some(held) = r.2.take() {
                            bump(&mut counter, held);
                            moved = true;
                        }
                    }
                    break;
                }
                assert_eq!(at, a.rank, "{a:?} added out of order");
                done.push(a);
                if rule == Release::AtOnce {
                    bump(&mut counter, a);
                } else if let Some(held) = r.2.replace(a) {
                    bump(&mut counter, held);
                }
                r.1 += 1;
                moved = true;
            }
            if r.1 == w.len() {
                if let Some(held) = r.2.take() {
                    bump(&mut counter, held);
                }
                moved = true;
            }
        }
        resident.retain(|r| r.1 < walks[r.0].len());
        if !moved {
            return None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;
    use crate::ops::attention_backward::bwd_fa3_ordered_eager::det_lpt_heads;
    use std::collections::HashMap;

    fn problem(
        b: usize,
        hq: usize,
        hkv: usize,
        sq: usize,
        skv: usize,
        causal: bool,
    ) -> BackwardProblem {
        let mut a = AttentionProblem::new(b, hq, sq, 128);
        a.heads_kv = hkv;
        a.seqlen_kv = skv;
        a.causal = causal;
        BackwardProblem::new(a, true)
    }

    /// Every tile's adds are ranked 0 .. adders - 1, once each, and the run finishes, with the
    /// blocks launched as `KILN_BWD_DET_LPT` unset and set would launch them.
    fn check(p: &BackwardProblem, bm: usize, sms: usize) {
        let (nx, m_blocks) = grid(p, bm, 128);
        let lpt = det_lpt_heads(true, p, true, nx as u32, sms as u32) as usize;
        for w in [walks(p, bm, 128, sms), walks_launched(p, bm, 128, sms, lpt)] {
            let mut ranks: HashMap<(usize, usize, usize), Vec<usize>> = HashMap::new();
            for a in w.iter().flatten() {
                ranks.entry((a.b, a.h, a.mb)).or_default().push(a.rank);
            }
            for b in 0..p.attn.batch {
                for h in 0..p.attn.heads_q {
                    for mb in 0..m_blocks {
                        let mut r = ranks.remove(&(b, h, mb)).unwrap_or_default();
                        r.sort_unstable();
                        let n = adders(p, bm, 128, mb);
                        assert_eq!(
                            r,
                            (0..n).collect::<Vec<_>>(),
                            "{} bm {bm} mb {mb}",
                            p.label()
                        );
                    }
                }
            }
            assert!(ranks.is_empty());
            for rule in [Release::BeforeWait, Release::AtOnce] {
                assert!(
                    run(&w, sms, rule).is_some(),
                    "{} bm {bm} on {sms} SMs hangs ({rule:?}, lpt {lpt})",
                    p.label()
                );
            }
        }
    }

    #[test]
    fn the_causal_chunks_run_where_a_head_fits_on_the_sms_and_would_hang_past_that() {
        // KILN_BWD_DET_LPT: the causal shapes (d128 64-row steps, d64 128-row steps) on
        // 132 SMs take chunks of SMs / key blocks heads and finish
        for (b, h, s, bm, g) in [
            (2, 16, 8192, 64, 2),
            (4, 32, 4096, 64, 4),
            (4, 16, 4096, 128, 4),
            (1, 16, 16384, 128, 1),
        ] {
            let p = problem(b, h, h, s, s, true);
            let nx = s.div_ceil(128);
            assert_eq!(det_lpt_heads(true, &p, true, nx as u32, 132), g);
            let w = walks_launched(&p, bm, 128, 132, g as usize);
            assert!(run(&w, 132, Release::AtOnce).is_some(), "{}", p.label());
            // longest walks first: the first block launched walks the whole head
            assert_eq!(w[0].len(), s.div_ceil(bm));
        }
        // a head of 8 key blocks on 3 SMs: key blocks 0-2 take the SMs and wait for key block 3,
        // which never gets one; the rule refuses it (the reversed launch runs)
        let p = problem(1, 2, 2, 1000, 1000, true);
        assert!(run(&walks_launched(&p, 64, 128, 3, 1), 3, Release::AtOnce).is_none());
        assert_eq!(det_lpt_heads(true, &p, true, 8, 3), 0);
        assert!(run(&walks(&p, 64, 128, 3), 3, Release::AtOnce).is_some());
        // not without the knob, nor non-causal, nor past a dense grid
        assert_eq!(det_lpt_heads(false, &p, true, 8, 132), 0);
        assert_eq!(det_lpt_heads(true, &p, false, 8, 132), 0);
        let q = problem(1, 2, 2, 1000, 1000, false);
        assert_eq!(det_lpt_heads(true, &q, true, 8, 132), 0);
    }

    #[test]
    fn the_writer_that_held_its_bump_hung_where_the_rotated_blocks_are_one_step_apart() {
        // the device's hangs (H200, 2026-11-29): the quick suite's Sq 65 Skv 200 d128 (64-row
        // steps) and B4 H16 S4096 d64 (128-row steps): a group of 2 or 32 key blocks over as
        // many query blocks
        for (p, bm) in [
            (problem(2, 4, 2, 65, 200, false), 64),
            (problem(4, 16, 16, 4096, 4096, false), 128),
        ] {
            let w = walks(&p, bm, 128, 132);
            assert!(run(&w, 132, Release::Held).is_none(), "{}", p.label());
            assert!(run(&w, 132, Release::BeforeWait).is_some(), "{}", p.label());
            assert!(run(&w, 132, Release::AtOnce).is_some(), "{}", p.label());
        }
        // two query blocks a step apart or more: no ring (B2 H16 S8192 d128 ran)
        let p = problem(2, 16, 16, 8192, 8192, false);
        assert!(run(&walks(&p, 64, 128, 132), 132, Release::Held).is_some());
    }

    #[test]
    fn every_tile_has_its_adders_once_each_and_every_run_finishes() {
        // the verify suite's lengths and groupings, both steps, waves of 132 blocks and of a few
        let lens = [1, 17, 63, 64, 65, 127, 130, 200, 257, 1000];
        for causal in [false, true] {
            for (hq, hkv) in [(1, 1), (4, 2), (3, 1)] {
                for sq in lens {
                    for skv in lens {
                        for bm in [64, 128] {
                            for sms in [132, 3] {
                                check(&problem(2, hq, hkv, sq, skv, causal), bm, sms);
                            }
                        }
                    }
                }
            }
        }
        // longer: more key blocks than a wave, a ragged tail
        for causal in [false, true] {
            for s in [4097, 8192] {
                check(&problem(1, 3, 3, s, s, causal), 64, 132);
                check(&problem(1, 2, 1, s, s, causal), 128, 20);
            }
        }
    }

    #[test]
    fn the_d256_walks_keep_each_tiles_order_and_every_run_finishes() {
        // bwd_fa3_d256_w2's walks (64 keys a block, 64-row steps): each tile's adds pass in
        // rank order (`run` panics otherwise) and no run hangs, the verify suite's lengths and
        // the d256 grids (scaled down in heads), on 132 SMs and on a few
        let lens = [1, 63, 65, 200, 1000, 2049];
        for causal in [false, true] {
            for (hq, hkv) in [(1, 1), (4, 2)] {
                for s in lens {
                    for sms in [132, 5] {
                        let mut p = problem(2, hq, hkv, s, s, causal);
                        p.attn.head_dim = 256;
                        let w = walks(&p, 64, 64, sms);
                        let done = run(&w, sms, Release::BeforeWait);
                        let n: usize = w.iter().map(|b| b.len()).sum();
                        assert_eq!(done.map(|d| d.len()), Some(n), "{}", p.label());
                    }
                }
            }
            for (b, h, s) in [(4, 3, 4096), (1, 2, 16384)] {
                let mut p = problem(b, h, h, s, s, causal);
                p.attn.head_dim = 256;
                let w = walks(&p, 64, 64, 132);
                assert!(run(&w, 132, Release::BeforeWait).is_some());
            }
        }
    }

    #[test]
    fn the_split_last_wave_keeps_each_tiles_order_and_every_run_finishes() {
        // bwd_fa3_d256_w2_cols2t: the last partial wave's key blocks in parts that fit on the
        // SMs together (tail::plan_ordered); the same adds as the whole grid, each tile's in
        // rank order, and no run hangs, where a wave's group wraps, crosses heads (GQA) or is
        // one block
        use super::super::tail::plan_ordered;
        for (b, hq, hkv, s, sms) in [
            (1, 3, 3, 4096, 132),
            (2, 4, 2, 2049, 5),
            (1, 2, 1, 1000, 7),
            (1, 16, 16, 1100, 132),
            (2, 1, 1, 65, 3),
        ] {
            let mut p = problem(b, hq, hkv, s, s, false);
            p.attn.head_dim = 256;
            let (nx, m) = grid(&p, 64, 64);
            let units = (nx * hkv * b) as u32;
            let steps = (m * p.attn.group()) as u32;
            let plan = plan_ordered(1, units, sms as u32, steps).unwrap();
            assert!(plan.split * plan.parts <= sms as u32, "{}", p.label());
            let w = walks_split(&p, 64, 64, sms, &plan);
            assert_eq!(w.len(), plan.blocks() as usize);
            let mut all: Vec<Add> = w.iter().flatten().copied().collect();
            let mut whole: Vec<Add> = walks(&p, 64, 64, sms).into_iter().flatten().collect();
            let key = |a: &Add| (a.b, a.h, a.mb, a.rank);
            all.sort_by_key(key);
            whole.sort_by_key(key);
            assert_eq!(all, whole, "{}", p.label());
            for rule in [Release::BeforeWait, Release::AtOnce] {
                let done = run(&w, sms, rule);
                assert_eq!(done.map(|d| d.len()), Some(all.len()), "{}", p.label());
            }
        }
    }

    #[test]
    fn causal_blocks_wait_only_for_blocks_launched_before_them() {
        // descending, launched in reverse: on a single SM every block still finishes
        for (sq, skv) in [(1000, 1000), (300, 1000), (1000, 300)] {
            let p = problem(1, 2, 2, sq, skv, true);
            let w = walks(&p, 64, 128, 1);
            assert!(run(&w, 1, Release::BeforeWait).is_some(), "{}", p.label());
            assert!(run(&w, 1, Release::AtOnce).is_some(), "{}", p.label());
        }
    }

    #[test]
    fn adders_count_the_key_blocks_a_query_block_sees() {
        let p = problem(1, 1, 1, 256, 256, true);
        assert_eq!(
            (0..4).map(|m| adders(&p, 64, 128, m)).collect::<Vec<_>>(),
            [1, 1, 2, 2]
        );
        // Sq > Skv: the first rows see no key
        let p = problem(1, 1, 1, 300, 100, true);
        assert_eq!(adders(&p, 64, 128, 0), 0);
        assert_eq!(adders(&p, 64, 128, 4), 1);
        assert_eq!(adders(&problem(1, 1, 1, 65, 200, false), 64, 128, 1), 2);
    }
}
