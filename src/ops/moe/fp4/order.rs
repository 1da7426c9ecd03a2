//! The order in which the 4-bit experts' register path hands out its wide tiles
//! (`KILN_FP4_ORDER`): each expert's m-tiles in a row (the tables' order), every whole m-tile
//! before the experts' short last ones (`whole-first`), or whole-first only where the host's
//! counts say it pays (`auto`, [`whole_first_pays`]).
//!
//! Why a gate: whole-first ran the folds (144,145,16,272,0,130,160,161, fused SwiGLU, N 2048,
//! K 7168) 14 % faster on an H200 but E64 8,192 rows (K 2048, N 1408) 12 % slower (docs/moe.md,
//! ledger F101). The folds are 7 whole and 7 short m-tiles of 16 n-tiles on 132 CTAs, where the
//! tables' order leaves CTAs that took a short tile early to take a whole one late: a greedy
//! simulation of the kernel's tile counter ([`makespan_us`]) gives whole-first 19 % less time.
//! At E64 it gives 3 % (most experts are one whole and one short m-tile, ~11 tiles a CTA, so
//! the last wave is short either way), less than what the order costs there: each tile's
//! m-tile found by a walk over 64 experts, and an expert's short tile no longer beside its whole
//! ones, so its weights come back from DRAM rather than L2.

use super::dispatch::{width, Paces};
use super::kernel::{Fp4Path, Fp4Tile, ORDER_EXPERTS};
use crate::ops::gemm::DType;
use crate::ops::moe::MoeProblem;
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// `KILN_FP4_ORDER`: the order of the wide tiles' m-tiles.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp4Order {
    /// Each expert's m-tiles in a row, heaviest expert first (the tables' order).
    Experts,
    /// Every whole m-tile first, then each expert's short last one (ledger F101).
    WholeFirst,
    /// `WholeFirst` where [`whole_first_pays`] for the launch, else `Experts` (ledger F141;
    /// the default from 2026-11-30 night, F161: it won two rounds).
    Auto,
}

impl Fp4Order {
    pub fn parse(s: &str) -> Option<Fp4Order> {
        match s {
            "experts" => Some(Fp4Order::Experts),
            "whole-first" => Some(Fp4Order::WholeFirst),
            "auto" => Some(Fp4Order::Auto),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Fp4Order::Experts => "experts",
            Fp4Order::WholeFirst => "whole-first",
            Fp4Order::Auto => "auto",
        }
    }
}

/// The most time whole-first may simulate at, as a share of the tables' order, for `auto` to
/// take it: it simulated at 0.81 where it ran 14 % faster (the folds) and at 0.97 where it ran
/// 12 % slower (E64), so the order's own cost is ~5-15 % of a launch; a gain the simulation
/// puts under that is not taken.
pub const WHOLE_FIRST_SHARE: f64 = 0.88;

/// The most experts `auto` takes whole-first on: the kernel walks the experts to place every
/// tile (`fp4_whole_first` in kernels/moe/fp4_order.cuh), on the consumers' path between tiles.
pub const AUTO_EXPERTS: usize = 16;

/// Whether `auto` may take whole-first on `p`'s `tile`: the fused SwiGLU's 128-token tile with
/// bf16 activations, the one tile the device timed it on (the folds, two rounds; ledger F141),
/// and so the one whose whole-first form `kiln check` compiles (`Fp4Experts::variants`, both
/// formats; ledger F161). `whole-first` itself takes any wide tile, compiled when asked for.
pub fn auto_tile(p: &MoeProblem, tile: Fp4Tile) -> bool {
    p.swiglu.is_some()
        && p.input == DType::Bf16
        && tile.path == Fp4Path::Rs
        && tile == Fp4Tile::prefill(true)
}

/// Whether whole-first pays for `p` on `tile` over `sms` SMs: [`auto_tile`] over counts the
/// host knows, at most [`AUTO_EXPERTS`] experts with rows, and the simulated launch at most
/// [`WHOLE_FIRST_SHARE`] of the tables' order. Never a launch of one round (at most a tile a
/// CTA: every tile starts at once in either order, so the simulation gives 1.0), hence never
/// with the wide tiles' split, whose launches are of at most half the CTAs.
pub fn whole_first_pays(p: &MoeProblem, tile: Fp4Tile, sms: u32) -> bool {
    if p.is_masked() || !auto_tile(p, tile) || p.experts > ORDER_EXPERTS {
        return false;
    }
    let experts = p.spans().iter().filter(|s| s.1 > 0).count();
    if experts > AUTO_EXPERTS {
        return false;
    }
    let tables = makespan_us(p, tile, sms, false);
    tables > 0.0 && makespan_us(p, tile, sms, true) <= WHOLE_FIRST_SHARE * tables
}

/// The simulated time of `p`'s unsplit launch on `tile` over `sms` SMs in the tables' order or
/// whole-first: each CTA takes the next tile from the counter when its last one ends (the first
/// wave by block index), a tile lasting its K stages at [`Paces::Pair`] of its own width. Only to
/// compare orders: no DRAM term, no tile overhead.
pub fn makespan_us(p: &MoeProblem, tile: Fp4Tile, sms: u32, whole_first: bool) -> f64 {
    let swiglu = p.swiglu.is_some();
    makespan_by(p, tile, sms, whole_first, |w| {
        Paces::Pair.stage_us(tile, w, swiglu)
    })
}

/// [`makespan_us`] with `stage_us(w)` the microseconds a stage of `tile` at wgmma width `w`
/// (the grouped GEMM's wide tiles by their own width, [`super::gemm_tile::stage_us`]).
pub fn makespan_by(
    p: &MoeProblem,
    tile: Fp4Tile,
    sms: u32,
    whole_first: bool,
    stage_us: impl Fn(usize) -> f64,
) -> f64 {
    let swiglu = p.swiglu.is_some();
    let tt = tile.tt as usize;
    let tiles_n = p.n.div_ceil(tile.bn(swiglu));
    let stages = p.k.div_ceil(64) as f64;
    // the tables' order: heaviest expert first (the prefix kernel's sort), empty ones dropped
    let mut counts: Vec<usize> = p.spans().iter().map(|s| s.1).filter(|&c| c > 0).collect();
    counts.sort_by_key(|&c| Reverse(c));
    let mut whole = Vec::new();
    let mut short = Vec::new();
    let mut tables = Vec::new();
    for &c in &counts {
        for _ in 0..c / tt {
            whole.push(tt);
            tables.push(tt);
        }
        if c % tt > 0 {
            short.push(c % tt);
            tables.push(c % tt);
        }
    }
    let m_tiles = if whole_first {
        whole.extend(short);
        whole
    } else {
        tables
    };
    // nanoseconds, so that the heap orders integers
    let mut free: BinaryHeap<Reverse<u64>> =
        (0..(tile.ctas * sms).max(1)).map(|_| Reverse(0)).collect();
    let mut end = 0u64;
    for rows in m_tiles {
        let ns = (1e3 * stages * stage_us(width(rows))) as u64;
        for _ in 0..tiles_n {
            let Reverse(at) = free.pop().unwrap_or(Reverse(0));
            end = end.max(at + ns);
            free.push(Reverse(at + ns));
        }
    }
    end as f64 / 1e3
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::moe::{uneven_counts, WeightLayout};

    fn sw(counts: &[usize], n: usize, k: usize) -> MoeProblem {
        MoeProblem::contiguous(counts, n, k, DType::Bf16, DType::Bf16)
            .with_swiglu(WeightLayout::Separate, true)
    }

    fn share(p: &MoeProblem) -> f64 {
        let t = Fp4Tile::prefill(true);
        makespan_us(p, t, 132, true) / makespan_us(p, t, 132, false)
    }

    #[test]
    fn the_order_parses_and_names_each_value() {
        for v in ["experts", "whole-first", "auto"] {
            assert_eq!(Fp4Order::parse(v).unwrap().name(), v);
        }
        assert_eq!(Fp4Order::parse("whole"), None);
    }

    #[test]
    fn auto_takes_whole_first_at_the_folds_not_at_e64() {
        let wide = Fp4Tile::prefill(true);
        let folds = sw(&[144, 145, 16, 272, 0, 130, 160, 161], 2048, 7168);
        let e64 = sw(&uneven_counts(8192, 64, 1), 1408, 2048);
        // the simulation of ledger F101: the folds ~16 % less time, E64 ~3 %
        assert!(share(&folds) < 0.86, "{}", share(&folds));
        assert!(share(&e64) > 0.95, "{}", share(&e64));
        assert!(whole_first_pays(&folds, wide, 132));
        assert!(!whole_first_pays(&e64, wide, 132));
    }

    #[test]
    fn auto_keeps_the_tables_order_where_the_simulation_gains_little() {
        let wide = Fp4Tile::prefill(true);
        for counts in [
            uneven_counts(7516, 8, 1),
            vec![40, 248, 112, 176, 64, 200, 136, 96],
            vec![0, 1, 40, 64, 128, 129, 0, 200, 255, 7, 1000, 3, 513],
            vec![300],
            vec![128; 8],
        ] {
            let p = sw(&counts, 2048, 7168);
            assert!(
                !whole_first_pays(&p, wide, 132),
                "{counts:?}: {}",
                share(&p)
            );
        }
        // no wide tile, no host counts: never
        let folds = sw(&[144, 145, 16, 272, 0, 130, 160, 161], 2048, 7168);
        assert!(!whole_first_pays(&folds, Fp4Tile::narrow(16, true), 132));
        // only the SwiGLU's 128-token tile with bf16 (what `kiln check` compiles): not its
        // 64-token tile, the grouped GEMM's tiles nor f16 activations
        assert!(!whole_first_pays(&folds, Fp4Tile::decode(true), 132));
        let counts = [144, 145, 16, 272, 0, 130, 160, 161];
        let gemm = MoeProblem::contiguous(&counts, 2048, 7168, DType::Bf16, DType::Bf16);
        assert!(!whole_first_pays(&gemm, Fp4Tile::prefill(false), 132));
        let f16 = MoeProblem::contiguous(&counts, 2048, 7168, DType::F16, DType::F16)
            .with_swiglu(WeightLayout::Separate, true);
        assert!(!whole_first_pays(&f16, Fp4Tile::prefill(true), 132));
    }
}
