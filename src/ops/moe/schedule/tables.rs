//! The tables `moe_tile_prefix` builds on the GPU (m-tile prefix sums, each expert's rows) and
//! the walk from a tile to its expert and rows, mirrored so the schedule can be simulated.

use super::{expert_coords, tile_coords, TileOrder};
use crate::ops::moe::problem::{MoeProblem, Rows};

/// Shared memory of the index ring of the dynamically scheduled kernels (`MoeIndexRing` in
/// `kernels/moe/sched.cuh`): 4 mbarriers and 2 slots.
pub const INDEX_RING_BYTES: u32 = 40;

/// Most experts one launch takes: the kernels keep 3E + 1 table ints in shared memory.
pub const MAX_EXPERTS: usize = 1024;

/// Most experts `moe_tile_prefix` sorts heaviest first (its ranking is all-pairs); past this it
/// keeps the experts' own order.
pub const SORT_MAX: usize = 64;

/// What `moe_tile_prefix` writes: per-position m-tile prefix sums (E + 1), first X rows and row
/// counts, clamped to X exactly as the device does, and the expert at each position (`ids`: the
/// identity, or the experts heaviest first when sorted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    pub prefix: Vec<i32>,
    pub start: Vec<i32>,
    pub rows: Vec<i32>,
    pub ids: Vec<i32>,
    /// Rows an expert's last m-tile may take past the tile height (`Schedule::build_folded`).
    pub fold: i32,
}

/// An expert's m-tiles for `rows` rows at tile height `bm`, its last tile taking up to `fold` rows
/// past `bm`. Mirrors `moe_expert_tiles`.
pub fn expert_tiles(rows: i32, bm: u32, fold: u32) -> i32 {
    if rows <= 0 {
        0
    } else {
        ((rows - fold as i32 + bm as i32 - 1) / bm as i32).max(1)
    }
}

impl Schedule {
    /// The tables for `rows_in` (offsets or counts, as uploaded) and tile height `bm`, in the
    /// experts' order.
    pub fn build(p: &MoeProblem, rows_in: &[i32], bm: u32) -> Schedule {
        Self::build_ordered(p, rows_in, bm, false)
    }

    /// As [`Schedule::build`]; with `sorted` (and at most [`SORT_MAX`] experts) the positions
    /// list the experts by rows descending, ties by index.
    pub fn build_ordered(p: &MoeProblem, rows_in: &[i32], bm: u32, sorted: bool) -> Schedule {
        Self::build_with(p, rows_in, bm, sorted, 0)
    }

    /// As [`Schedule::build`], each expert's last m-tile taking up to `fold` rows past `bm` (a
    /// short remainder rides on the tile before it). Mirrors `moe_tile_prefix` with `fold`.
    pub fn build_folded(p: &MoeProblem, rows_in: &[i32], bm: u32, fold: u32) -> Schedule {
        Self::build_with(p, rows_in, bm, false, fold)
    }

    fn build_with(p: &MoeProblem, rows_in: &[i32], bm: u32, sorted: bool, fold: u32) -> Schedule {
        let e = p.experts;
        let x_rows = p.x_rows().min(i32::MAX as usize) as i32;
        let span = |i: usize| match &p.rows {
            Rows::Masked { max_rows, .. } => {
                let m = *max_rows as i32;
                (i as i32 * m, rows_in[i].clamp(0, m))
            }
            Rows::Contiguous { .. } => {
                let lo = rows_in[i].clamp(0, x_rows);
                let hi = rows_in[i + 1].max(lo).min(x_rows);
                (lo, hi - lo)
            }
        };
        let mut ids: Vec<i32> = (0..e as i32).collect();
        if sorted && e <= SORT_MAX {
            // stable: equal rows keep the lower index first, as the device's ranks do
            ids.sort_by_key(|&i| std::cmp::Reverse(span(i as usize).1));
        }
        let (mut prefix, mut start, mut rows) = (vec![0i32; e + 1], vec![0i32; e], vec![0i32; e]);
        let mut run = 0i32;
        for i in 0..e {
            let (s, r) = span(ids[i] as usize);
            prefix[i] = run;
            start[i] = s;
            rows[i] = r;
            run += expert_tiles(r, bm, fold);
        }
        prefix[e] = run;
        Schedule {
            prefix,
            start,
            rows,
            ids,
            fold: fold as i32,
        }
    }

    /// The tables the kernels copy to shared memory, as the device lays them out (3E + 1 ints;
    /// `ids` follow the tile counter in the workspace).
    pub fn flat(&self) -> Vec<i32> {
        let mut v = self.prefix.clone();
        v.extend(&self.start);
        v.extend(&self.rows);
        v
    }

    pub fn tiles_m(&self) -> u32 {
        *self.prefix.last().unwrap_or(&0) as u32
    }
}

/// Bytes of the device workspace `moe_tile_prefix` writes for `experts`: the 3E + 1 table ints,
/// the tile counter the dynamically scheduled kernels take tiles from, and the E expert ids.
pub fn sched_bytes(experts: usize) -> usize {
    (4 * experts + 2) * 4
}

/// Shared memory the kernels reserve for the tables of up to `experts` (the 3E + 1 table ints,
/// rounded up by one int).
pub fn table_bytes(experts: usize) -> usize {
    (3 * experts + 2) * 4
}

/// The expert owning global m-tile `g` (prefix[e] <= g < prefix[e + 1]). Mirrors
/// `moe_find_expert`.
pub fn find_expert(prefix: &[i32], g: i32) -> usize {
    let (mut lo, mut hi) = (0usize, prefix.len() - 1);
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if prefix[mid] <= g {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// One tile as a kernel sees it. Mirrors `MoeTile`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tile {
    pub expert: usize,
    pub row0: i32,
    pub valid_rows: i32,
    pub n0: u32,
}

/// Tile `t` of schedule `s` walked in `order`. Mirrors `moe_tile`.
pub fn tile(s: &Schedule, t: u32, tiles_n: u32, order: TileOrder, bm: u32, bn: u32) -> Tile {
    let (g, tn) = match order {
        TileOrder::Fixed(group) => tile_coords(t, s.tiles_m(), tiles_n, group),
        TileOrder::ByExpert(cap) => {
            let e = find_expert(&s.prefix, (t / tiles_n) as i32);
            let first = s.prefix[e] as u32;
            let m_e = s.prefix[e + 1] as u32 - first;
            let (lm, tn) = expert_coords(t - first * tiles_n, m_e, tiles_n, cap);
            (first + lm, tn)
        }
    };
    tile_in(s, g, tn, bm, bn)
}

/// Global m-tile `g`, n-tile `tn` of schedule `s` (its expert through `s.ids`).
pub fn tile_in(s: &Schedule, g: u32, tn: u32, bm: u32, bn: u32) -> Tile {
    let e = find_expert(&s.prefix, g as i32);
    let local = (g as i32 - s.prefix[e]) * bm as i32;
    let rest = s.rows[e] - local;
    let last = g as i32 == s.prefix[e + 1] - 1;
    Tile {
        expert: s.ids[e] as usize,
        row0: s.start[e] + local,
        valid_rows: if s.fold > 0 && last {
            rest
        } else {
            rest.min(bm as i32)
        },
        n0: tn * bn,
    }
}

#[cfg(test)]
mod tests {
    use super::super::contiguous;
    use super::*;
    use crate::ops::gemm::DType;
    use crate::ops::moe::schedule::{TileConfig, EXPERT_GROUP_MAX, GROUP_M};

    #[test]
    fn a_folded_schedule_covers_every_row_once() {
        // Each expert's rows exactly once; only an expert's last tile is taller than bm, by at
        // most the fold, and only when its remainder was at most the fold.
        for counts in [
            vec![1512, 1091, 539, 772, 779, 979, 880, 964],
            vec![0, 1, 16, 17, 128, 129, 144, 145, 256, 272, 273],
        ] {
            let p = contiguous(&counts, 256);
            for fold in [0, 16, 32] {
                let s = Schedule::build_folded(&p, p.rows_array(), 128, fold);
                let mut covered = vec![0u8; p.x_rows()];
                for t in 0..s.tiles_m() * 2 {
                    let tile = tile(&s, t, 2, TileOrder::ByExpert(16), 128, 128);
                    assert!(tile.valid_rows > 0 && tile.valid_rows <= 128 + fold as i32);
                    if tile.n0 == 0 {
                        for r in 0..tile.valid_rows {
                            covered[(tile.row0 + r) as usize] += 1;
                        }
                    }
                }
                assert!(covered.iter().all(|&c| c == 1), "{counts:?} fold {fold}");
                for (e, &rows) in counts.iter().enumerate() {
                    let tiles = s.prefix[e + 1] - s.prefix[e];
                    let folded = rows > 128 && (rows - 1) % 128 < fold as usize;
                    assert_eq!(
                        tiles as usize,
                        rows.div_ceil(128) - folded as usize,
                        "{rows} {fold}"
                    );
                }
            }
        }
    }

    /// Every output element of every expert is produced by exactly one tile of the walk, no tile
    /// is wasted, and no tile starts a row outside X: what the kernels rely on.
    fn simulate(p: &MoeProblem, cfg: TileConfig, order: TileOrder) {
        let s = Schedule::build(p, p.rows_array(), cfg.bm);
        let tiles_n = p.n.div_ceil(cfg.bn as usize) as u32;
        let mut covered = vec![0u8; p.x_rows() * tiles_n as usize];
        for t in 0..s.tiles_m() * tiles_n {
            let tl = tile(&s, t, tiles_n, order, cfg.bm, cfg.bn);
            assert!(
                tl.valid_rows >= 1 && tl.valid_rows <= cfg.bm as i32,
                "{tl:?}"
            );
            assert!((tl.row0 as usize) < p.x_rows(), "{tl:?}");
            let (start, len) = p.spans()[tl.expert];
            for r in tl.row0..tl.row0 + tl.valid_rows {
                assert!(
                    (r as usize) >= start && (r as usize) < start + len,
                    "row {r} outside expert {}",
                    tl.expert
                );
                covered[r as usize * tiles_n as usize + (tl.n0 / cfg.bn) as usize] += 1;
            }
        }
        for (e, &(start, len)) in p.spans().iter().enumerate() {
            for r in start..start + len {
                for tn in 0..tiles_n as usize {
                    assert_eq!(
                        covered[r * tiles_n as usize + tn],
                        1,
                        "expert {e} row {r} n-tile {tn}"
                    );
                }
            }
        }
        let routed = p.routed_rows() * tiles_n as usize;
        assert_eq!(covered.iter().map(|&c| c as usize).sum::<usize>(), routed);
        assert!(s.tiles_m() as u64 <= cfg.max_tiles_m(p));
    }

    /// The CTA-pair walk of `kernels/moe/grouped_gemm.cu` (KILN_CLUSTER = 2): units of one m-tile
    /// by two n-tiles, CTA `rank` takes n-tile 2u + rank; n-tiles past N store nothing. Every
    /// (row, n-tile) is covered once.
    #[test]
    fn the_pair_walk_covers_every_n_tile_once() {
        for counts in [
            vec![40usize, 248, 112, 176, 64, 200, 136, 96],
            vec![1],
            vec![0, 300, 0, 7],
        ] {
            for (n, order) in [130usize, 256, 4096, 7168]
                .into_iter()
                .flat_map(|n| [(n, TileOrder::Fixed(GROUP_M)), (n, TileOrder::ByExpert(3))])
            {
                let p = contiguous(&counts, n);
                let cfg = TileConfig::NARROW.paired();
                let s = Schedule::build(&p, p.rows_array(), cfg.bm);
                let tiles_n = n.div_ceil(cfg.bn as usize) as u32;
                let units_n = tiles_n.div_ceil(2);
                let mut covered = vec![0u8; p.x_rows() * tiles_n as usize];
                for u in 0..s.tiles_m() * units_n {
                    let pair = tile(&s, u, units_n, order, cfg.bm, 2 * cfg.bn);
                    for rank in 0..2 {
                        let tn = (pair.n0 + rank * cfg.bn) / cfg.bn;
                        if tn >= tiles_n {
                            continue;
                        }
                        for r in pair.row0..pair.row0 + pair.valid_rows {
                            covered[r as usize * tiles_n as usize + tn as usize] += 1;
                        }
                    }
                }
                assert!(covered.iter().all(|&c| c == 1), "{counts:?} n={n}");
            }
        }
    }

    /// The swap-AB kernel's order: tables sorted heaviest expert first, group 1. Every routed
    /// element is still covered once, the first tiles are the heaviest expert's, and past
    /// SORT_MAX experts the order is the identity.
    #[test]
    fn sorted_tables_cover_every_element_heaviest_first() {
        for counts in [
            vec![40usize, 248, 112, 176, 64, 200, 136, 96],
            vec![0, 300, 0, 7, 7, 513],
            vec![5; 70],
        ] {
            let p = contiguous(&counts, 256);
            let tt = 128u32;
            let s = Schedule::build_ordered(&p, p.rows_array(), tt, true);
            let mut ids = s.ids.clone();
            ids.sort();
            assert_eq!(ids, (0..counts.len() as i32).collect::<Vec<_>>());
            if counts.len() <= SORT_MAX {
                assert!(s.rows.windows(2).all(|w| w[0] >= w[1]), "{:?}", s.rows);
            } else {
                assert_eq!(s.ids, (0..counts.len() as i32).collect::<Vec<_>>());
            }
            let tiles_n = 2u32;
            let mut covered = vec![0u8; p.x_rows() * tiles_n as usize];
            for t in 0..s.tiles_m() * tiles_n {
                let (g, tn) = tile_coords(t, s.tiles_m(), tiles_n, 1);
                let tl = tile_in(&s, g, tn, tt, 128);
                let (start, len) = p.spans()[tl.expert];
                assert!(
                    tl.row0 as usize >= start && (tl.row0 + tl.valid_rows) as usize <= start + len
                );
                for r in tl.row0..tl.row0 + tl.valid_rows {
                    covered[r as usize * tiles_n as usize + tn as usize] += 1;
                }
            }
            assert!(covered.iter().all(|&c| c == 1), "{counts:?}");
            let first = tile_in(&s, 0, 0, tt, 128).expert;
            assert_eq!(counts[first], *counts.iter().max().unwrap());
        }
    }

    #[test]
    fn prefix_sums_skip_empty_experts() {
        let p = contiguous(&[0, 1, 40, 64, 128, 129, 0], 64);
        let s = Schedule::build(&p, p.rows_array(), 64);
        assert_eq!(s.prefix, vec![0, 0, 1, 2, 3, 5, 8, 8]);
        assert_eq!(s.start, vec![0, 0, 1, 41, 105, 233, 362]);
        assert_eq!(s.rows, vec![0, 1, 40, 64, 128, 129, 0]);
        assert_eq!(s.flat().len(), 3 * 7 + 1);
        // tiles land on non-empty experts only
        assert_eq!(find_expert(&s.prefix, 0), 1);
        assert_eq!(find_expert(&s.prefix, 1), 2);
        assert_eq!(find_expert(&s.prefix, 4), 4);
        assert_eq!(find_expert(&s.prefix, 7), 5);
    }

    #[test]
    fn the_walk_covers_every_routed_element_once() {
        let mut ragged = vec![0usize, 1, 40, 64, 128, 129, 255, 256, 257, 0, 0, 3];
        ragged.extend((0..244).map(|i| (i * 37) % 23));
        for counts in [
            vec![1usize],
            vec![300],
            vec![0, 0, 5, 0],
            ragged.clone(),
            vec![7; 256],
            vec![1000, 0, 1],
        ] {
            for n in [8usize, 130, 256, 600] {
                for cfg in TileConfig::ALL.into_iter().chain([TileConfig::SWIGLU]) {
                    for order in [
                        TileOrder::Fixed(GROUP_M),
                        TileOrder::Fixed(5),
                        TileOrder::ByExpert(EXPERT_GROUP_MAX),
                        TileOrder::ByExpert(2),
                    ] {
                        simulate(&contiguous(&counts, n), cfg, order);
                        let max = counts.iter().copied().max().unwrap_or(0).max(1);
                        simulate(
                            &MoeProblem::masked(&counts, max + 3, n, 64, DType::Bf16, DType::F32),
                            cfg,
                            order,
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn bad_device_rows_are_clamped_inside_x() {
        // offsets the host would refuse still give tables inside X (the device does the same)
        let p = contiguous(&[10, 10], 64);
        let s = Schedule::build(&p, &[5, 100, 3], 128);
        assert_eq!(
            (s.start.clone(), s.rows.clone()),
            (vec![5, 20], vec![15, 0])
        );
        let m = MoeProblem::masked(&[4, 4], 8, 64, 64, DType::Bf16, DType::Bf16);
        let s = Schedule::build(&m, &[-3, 99], 64);
        assert_eq!((s.start, s.rows), (vec![0, 8], vec![0, 8]));
    }

    /// The expert-aligned walk keeps each expert's tiles contiguous in t (its W is swept by
    /// its own m-tiles only).
    #[test]
    fn expert_order_keeps_experts_contiguous() {
        let p = contiguous(&[1512, 1091, 0, 539, 772, 4, 979, 880, 964], 3072);
        let s = Schedule::build(&p, p.rows_array(), 128);
        let tiles_n = 24;
        let experts: Vec<usize> = (0..s.tiles_m() * tiles_n)
            .map(|t| tile(&s, t, tiles_n, TileOrder::ByExpert(8), 128, 128).expert)
            .collect();
        let mut runs = experts.clone();
        runs.dedup();
        assert_eq!(runs, vec![0, 1, 3, 4, 5, 6, 7, 8]);
    }
}
