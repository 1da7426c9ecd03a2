//! MoE tile scheduling, on the host: the tables `moe_tile_prefix` builds on the GPU (m-tile prefix
//! sums, each expert's rows), the binary search from a tile to its expert and the grouped tile
//! order the kernels walk (mirrors of `kernels/moe/tile_prefix.cu` and `kernels/moe/sched.cuh`,
//! so the schedule can be simulated and tested without a GPU), and the wave-quantisation-aware
//! choice of tile shape.

use super::problem::{MoeProblem, Rows};

/// Tile-rows swept together in the grouped order (the kernels' `KILN_GROUP_M`).
pub const GROUP_M: u32 = 8;
/// Host m-tiles at or below which one group holds them all (see [`group_for`]).
pub const ONE_GROUP_MAX: u32 = 32;
/// ... as long as their X rows take at most this much of L2 (H100/H200: 50 MB), leaving the rest
/// to the W stream. Measured: one group won at E=8, 40-196 rows, N=7168, K=2048 (X of 18 m-tiles
/// of 64 rows: 4.5 MiB; H200 0.0841 vs 0.0879 ms) and at 40-248 rows, N=4096, K=7168 with 128x192
/// tiles (12 m-tiles of 128 rows: 21 MiB; H100 0.1923 vs 0.2051 ms, 2026-11-22 session 3 run 1:
/// on H100's slower HBM the second read of the W of an expert straddling two groups of 8 costs
/// 6%). It lost 1.5% at that shape with 128x128 tiles on an H200 (0.1753 vs 0.1728 ms, within
/// that run-to-run noise), when the budget was 12 MiB. Half of L2.
pub const ONE_GROUP_X_BYTES: usize = 24 << 20;

/// Most m-tiles of one group in the expert-aligned order: 16 m-tiles of 128 rows at K = 4096 keep
/// 16 MiB of X in L2 while its group sweeps the expert's n-tiles.
pub const EXPERT_GROUP_MAX: u32 = 16;

/// The order in which the kernels walk the tiles (`MoeArgs.group_m` and `by_expert`). Any order is
/// correct; it only decides which tiles run at once, and so what L2 can share.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TileOrder {
    /// Groups of this many m-tiles over all experts, each swept column by column
    /// (`moe_tile_coords`); a group may straddle two experts.
    Fixed(u32),
    /// Expert by expert, each expert's m-tiles cut into groups of at most this many, as equal as
    /// possible, each swept column by column (`moe_expert_coords`).
    ByExpert(u32),
}

impl TileOrder {
    /// `(group_m, by_expert)` as the kernels take them.
    pub fn args(self) -> (i32, i32) {
        match self {
            TileOrder::Fixed(g) => (g.max(1) as i32, 0),
            TileOrder::ByExpert(g) => (g.max(1) as i32, 1),
        }
    }
}

/// The tile order for `p` with tile height `bm`. When the host copy of the rows gives at most
/// [`ONE_GROUP_MAX`] m-tiles whose X rows fit in [`ONE_GROUP_X_BYTES`] (short experts: tens to
/// hundreds of rows each), one fixed group holds them all, so every concurrently running CTA of an
/// n-column reads the same W tiles and each W tile (an expert's m-tiles are adjacent) leaves HBM
/// once. Else the expert-aligned order with groups of at most [`EXPERT_GROUP_MAX`]: the fixed
/// groups of 8 used before straddled experts, and an expert whose m-tiles fall in two groups had
/// its W read twice from HBM (prefill SwiGLU: W1 and W3, 403 MB, left HBM about twice, ncu
/// 2026-11-22 session 7). `KILN_MOE_GROUP` sets the width and `KILN_MOE_ORDER` (`fixed` or
/// `expert`) the kind, to time them against each other.
pub fn order_for(p: &MoeProblem, bm: u32) -> TileOrder {
    let width = std::env::var("KILN_MOE_GROUP")
        .ok()
        .and_then(|v| v.trim().parse::<u32>().ok())
        .filter(|&g| g >= 1);
    let kind = std::env::var("KILN_MOE_ORDER").ok();
    let tiles_m: usize = p.spans().iter().map(|s| s.1.div_ceil(bm as usize)).sum();
    let x_bytes = tiles_m * bm as usize * p.k * p.input.size();
    let default = if tiles_m as u32 <= ONE_GROUP_MAX && x_bytes <= ONE_GROUP_X_BYTES {
        TileOrder::Fixed(tiles_m.max(1) as u32)
    } else {
        TileOrder::ByExpert(EXPERT_GROUP_MAX)
    };
    match (kind.as_deref().map(str::trim), width, default) {
        (Some("fixed"), w, d) => TileOrder::Fixed(w.unwrap_or(match d {
            TileOrder::Fixed(g) => g,
            TileOrder::ByExpert(_) => GROUP_M,
        })),
        (Some("expert"), w, _) => TileOrder::ByExpert(w.unwrap_or(EXPERT_GROUP_MAX)),
        (_, Some(w), TileOrder::Fixed(_)) => TileOrder::Fixed(w),
        (_, Some(w), TileOrder::ByExpert(_)) => TileOrder::ByExpert(w),
        (_, None, d) => d,
    }
}

/// Shared memory of the index ring of the dynamically scheduled kernels (`MoeIndexRing` in
/// `kernels/moe/sched.cuh`): 4 mbarriers and 2 slots.
pub const INDEX_RING_BYTES: u32 = 40;

/// Most experts one launch takes: the kernels keep 3E + 1 table ints in shared memory.
pub const MAX_EXPERTS: usize = 1024;
/// K depth of one pipeline stage.
pub const BK: u32 = 64;

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

/// Tile `t` of the grouped order as (global m-tile, n-tile). Mirrors `moe_tile_coords`.
pub fn tile_coords(t: u32, tiles_m: u32, tiles_n: u32, group: u32) -> (u32, u32) {
    let per_group = group * tiles_n;
    let first = (t / per_group) * group;
    let rows = (tiles_m - first).min(group);
    let r = t - (first / group) * per_group;
    (first + r % rows, r / rows)
}

/// Tile `local` of one expert's `m_e` m-tiles in the expert-aligned order, as (m-tile within the
/// expert, n-tile): groups of at most `cap` m-tiles, sizes differing by at most one. Mirrors
/// `moe_expert_coords`.
pub fn expert_coords(local: u32, m_e: u32, tiles_n: u32, cap: u32) -> (u32, u32) {
    let groups = m_e.div_ceil(cap);
    let (small, extra) = (m_e / groups, m_e % groups);
    let big_tiles = (small + 1) * tiles_n;
    let (first, r, rows) = if local < extra * big_tiles {
        (
            (local / big_tiles) * (small + 1),
            local % big_tiles,
            small + 1,
        )
    } else {
        let (l, per) = (local - extra * big_tiles, small * tiles_n);
        (extra * (small + 1) + (l / per) * small, l % per, small)
    };
    (first + r % rows, r / rows)
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

/// A tile shape of the grouped kernels: BM x BN x 64 with `stages` pipeline stages, run by
/// clusters of `cluster` CTAs along N that share (multicast) each X tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileConfig {
    pub bm: u32,
    pub bn: u32,
    pub stages: u32,
    pub cluster: u32,
}

impl TileConfig {
    /// Prefill: 128 x 256, each consumer 64 rows.
    pub const LARGE: TileConfig = TileConfig {
        bm: 128,
        bn: 256,
        stages: 4,
        cluster: 1,
    };
    /// More, narrower tiles, for grids that 128 x 256 tiles leave short of a wave.
    pub const NARROW: TileConfig = TileConfig {
        bm: 128,
        bn: 128,
        stages: 6,
        cluster: 1,
    };
    /// 128 x 192: between the two, for grids where 128-column tiles leave a ragged last wave and
    /// 256-column ones too few tiles (E=8, 40-248 rows, N=4096: 12 x 22 = 264 tiles, two full
    /// waves on 132 SMs, where 128 x 128 runs 384 = 2.9 waves and 128 x 256 192 = 1.45). The last
    /// n-tile of N=4096 is a third full (its W box past N is zero-filled, its columns not stored).
    pub const MID: TileConfig = TileConfig {
        bm: 128,
        bn: 192,
        stages: 5,
        cluster: 1,
    };
    /// Short experts (tens of rows): 64 x 256, the consumers split the columns.
    pub const SHORT: TileConfig = TileConfig {
        bm: 64,
        bn: 256,
        stages: 5,
        cluster: 1,
    };
    /// The single-CTA shapes, among which the cost model chooses.
    pub const SINGLE: [TileConfig; 4] = [
        TileConfig::LARGE,
        TileConfig::NARROW,
        TileConfig::MID,
        TileConfig::SHORT,
    ];
    /// Every compiled shape: each single-CTA one also as CTA pairs along N multicasting X.
    pub const ALL: [TileConfig; 8] = [
        TileConfig::LARGE,
        TileConfig::NARROW,
        TileConfig::MID,
        TileConfig::SHORT,
        TileConfig::LARGE.paired(),
        TileConfig::NARROW.paired(),
        TileConfig::MID.paired(),
        TileConfig::SHORT.paired(),
    ];
    /// The fused SwiGLU: 128 rows x 128 columns of each of W1 and W3.
    pub const SWIGLU: TileConfig = TileConfig {
        bm: 128,
        bn: 128,
        stages: 4,
        cluster: 1,
    };

    /// The same tile run by 2-CTA clusters along N that multicast the X tile.
    pub const fn paired(self) -> TileConfig {
        TileConfig { cluster: 2, ..self }
    }

    /// `BMxBN`, with ` c2` for CTA pairs.
    pub fn label(self) -> String {
        if self.cluster > 1 {
            format!("{}x{} c{}", self.bm, self.bn, self.cluster)
        } else {
            format!("{}x{}", self.bm, self.bn)
        }
    }

    /// Bytes of one stage: the X tile and `w_tiles` W tiles.
    pub fn stage_bytes(self, w_tiles: u32) -> u32 {
        (self.bm + w_tiles * self.bn) * BK * 2
    }

    /// Dynamic shared memory: slack to align to 1024, the stages, 2 mbarriers per stage, and the
    /// expert tables for up to MAX_EXPERTS.
    pub fn smem_bytes(self, w_tiles: u32) -> u32 {
        1024 + self.stages * self.stage_bytes(w_tiles)
            + 16 * self.stages
            + table_bytes(MAX_EXPERTS) as u32
    }

    /// Relative tile throughput: wide tiles reuse each loaded byte more.
    fn efficiency(self) -> f64 {
        match (self.bm, self.bn) {
            (128, 256) => 1.0,
            (128, 192) => 0.95,
            (128, 128) => 0.9,
            _ => 0.85,
        }
    }

    /// Wave-quantised cost of `tiles` tiles on `sms` SMs: the tiles the busiest CTA runs, each
    /// costing its area over its efficiency. Lower is better.
    pub fn cost(self, tiles: u64, sms: u32) -> f64 {
        tiles.div_ceil(sms.max(1) as u64) as f64 * (self.bm * self.bn) as f64 / self.efficiency()
    }

    /// Tiles for these per-expert row counts and N.
    pub fn tiles(self, rows: &[usize], n: usize) -> u64 {
        let tm: u64 = rows
            .iter()
            .map(|&r| r.div_ceil(self.bm as usize) as u64)
            .sum();
        tm * n.div_ceil(self.bn as usize) as u64
    }

    /// The cheapest of [`TileConfig::ALL`] for the expected rows per expert (the host copy; for
    /// the masked layout, the counts it was given as a hint).
    pub fn choose(rows: &[usize], n: usize, sms: u32) -> TileConfig {
        let mut best = TileConfig::LARGE;
        let mut best_cost = f64::INFINITY;
        for c in TileConfig::SINGLE {
            let cost = c.cost(c.tiles(rows, n), sms);
            if cost < best_cost * 0.97 {
                best = c;
                best_cost = cost;
            }
        }
        best
    }

    /// m-tiles that can exist for any rows the GPU may hold (so the grid never depends on the
    /// counts): x_rows / BM + E for the contiguous layout, E·⌈max_rows / BM⌉ masked.
    pub fn max_tiles_m(self, p: &MoeProblem) -> u64 {
        let bm = self.bm as usize;
        match &p.rows {
            Rows::Contiguous { x_rows, .. } => (x_rows / bm + p.experts) as u64,
            Rows::Masked { max_rows, .. } => (p.experts * max_rows.div_ceil(bm)) as u64,
        }
    }

    /// Persistent grid in CTAs: one CTA per SM (one cluster per `max_clusters` slot for pairs),
    /// or per possible unit (m-tile x `cluster` n-tiles) when there are fewer.
    pub fn grid(self, p: &MoeProblem, max_clusters: u32) -> u32 {
        let units = self.max_tiles_m(p) * p.n.div_ceil((self.bn * self.cluster) as usize) as u64;
        units.min(max_clusters as u64).max(1) as u32 * self.cluster
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::DType;

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

    fn contiguous(counts: &[usize], n: usize) -> MoeProblem {
        MoeProblem::contiguous(counts, n, 64, DType::Bf16, DType::Bf16)
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

    #[test]
    fn tile_order_visits_every_tile_once() {
        for group in [1, GROUP_M, 12, 16] {
            for (tm, tn) in [(1, 1), (3, 5), (8, 8), (9, 2), (17, 3), (64, 12)] {
                let mut seen = vec![false; (tm * tn) as usize];
                for t in 0..tm * tn {
                    let (r, c) = tile_coords(t, tm, tn, group);
                    assert!(r < tm && c < tn);
                    assert!(!std::mem::replace(&mut seen[(r * tn + c) as usize], true));
                }
            }
        }
    }

    /// The expert-aligned order: every tile of an expert once, the expert's tiles one after
    /// another, its groups at most `cap` m-tiles and within one of each other, each swept column
    /// by column.
    #[test]
    fn expert_order_visits_every_tile_once_in_balanced_groups() {
        for cap in [1u32, 2, 3, 8, 16] {
            for (m_e, tn) in [
                (1u32, 1u32),
                (1, 24),
                (5, 3),
                (8, 24),
                (9, 24),
                (12, 7),
                (33, 5),
            ] {
                let mut seen = vec![false; (m_e * tn) as usize];
                let mut groups: Vec<(u32, u32)> = Vec::new(); // (first m-tile, m-tiles)
                for t in 0..m_e * tn {
                    let (m, n) = expert_coords(t, m_e, tn, cap);
                    assert!(
                        m < m_e && n < tn,
                        "cap {cap} m_e {m_e} tn {tn}: t {t} -> {m},{n}"
                    );
                    assert!(!std::mem::replace(&mut seen[(m * tn + n) as usize], true));
                    // a group's first tile is its first m-tile at column 0
                    if n == 0 && groups.last().is_none_or(|&(f, c)| m >= f + c) {
                        let rows = (t..m_e * tn)
                            .take_while(|&u| expert_coords(u, m_e, tn, cap).1 == 0)
                            .count() as u32;
                        groups.push((m, rows));
                    }
                }
                let sizes: Vec<u32> = groups.iter().map(|g| g.1).collect();
                assert_eq!(sizes.iter().sum::<u32>(), m_e, "{sizes:?}");
                assert!(sizes.iter().all(|&g| g <= cap), "{sizes:?}");
                let (lo, hi) = (sizes.iter().min().unwrap(), sizes.iter().max().unwrap());
                assert!(hi - lo <= 1, "cap {cap} m_e {m_e}: {sizes:?}");
            }
        }
        // prefill's largest expert (12 m-tiles) stays one group at the default cap
        assert_eq!(expert_coords(11, 12, 24, EXPERT_GROUP_MAX), (11, 0));
        assert_eq!(expert_coords(12, 12, 24, EXPERT_GROUP_MAX), (0, 1));
        // ... and splits 6 + 6 at a cap of 8
        assert_eq!(expert_coords(6, 12, 24, 8), (0, 1));
        assert_eq!(expert_coords(6 * 24, 12, 24, 8), (6, 0));
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

    #[test]
    fn short_experts_sweep_all_m_tiles_in_one_group() {
        if std::env::var_os("KILN_MOE_GROUP").is_some()
            || std::env::var_os("KILN_MOE_ORDER").is_some()
        {
            return;
        }
        // small M at K = 2048: 18 m-tiles of 64 rows, 4.5 MiB of X: one group
        let counts = [40, 196, 88, 152, 64, 120, 180, 104];
        let k2048 = MoeProblem::contiguous(&counts, 7168, 2048, DType::Bf16, DType::Bf16);
        assert_eq!(order_for(&k2048, 64), TileOrder::Fixed(18));
        // at K = 7168, 12 m-tiles of 128 rows hold 21 MiB of X: within the budget, one group
        let k7168 = MoeProblem::contiguous(
            &[40, 248, 112, 176, 64, 200, 136, 96],
            4096,
            7168,
            DType::Bf16,
            DType::Bf16,
        );
        assert_eq!(order_for(&k7168, 128), TileOrder::Fixed(12));
        // twice the rows: 24 m-tiles, 42 MiB of X: past it, expert by expert
        let k7168x2 = MoeProblem::contiguous(
            &[80, 496, 224, 352, 128, 400, 272, 192],
            4096,
            7168,
            DType::Bf16,
            DType::Bf16,
        );
        assert_eq!(
            order_for(&k7168x2, 128),
            TileOrder::ByExpert(EXPERT_GROUP_MAX)
        );
        // prefill: 63 m-tiles
        let prefill = contiguous(&[1512, 1091, 539, 772, 779, 979, 880, 964], 3072);
        assert_eq!(
            order_for(&prefill, 128),
            TileOrder::ByExpert(EXPERT_GROUP_MAX)
        );
        assert_eq!(
            order_for(&contiguous(&[0, 0], 64), 128),
            TileOrder::Fixed(1)
        );
    }

    #[test]
    fn shared_memory_fits_an_h100_block() {
        for c in TileConfig::ALL {
            assert!(c.smem_bytes(1) <= 227 * 1024, "{c:?}");
            assert_eq!(c.stage_bytes(1) % 1024, 0);
        }
        assert!(TileConfig::SWIGLU.smem_bytes(2) <= 227 * 1024);
        assert_eq!(TileConfig::SWIGLU.stage_bytes(2), 48 * 1024);
    }

    #[test]
    fn tile_choice_follows_the_waves() {
        // prefill: ~940 rows per expert, N = 3072: 128 x 256 fills 6 waves evenly
        let prefill = [1124, 731, 1002, 860, 1231, 655, 990, 923];
        assert_eq!(TileConfig::choose(&prefill, 3072, 132), TileConfig::LARGE);
        // small M (40-248 rows), N = 4096: 192 wide tiles need 2 waves, the narrow ones 3 smaller
        let small = [40, 248, 112, 176, 64, 200, 136, 96];
        assert_ne!(TileConfig::choose(&small, 4096, 132), TileConfig::LARGE);
        // ... and 128 x 192 gives 12 x 22 = 264 tiles: two full waves
        assert_eq!(TileConfig::choose(&small, 4096, 132), TileConfig::MID);
        // at N = 7168, K = 2048 the 64-row tiles stay (18 x 28 tiles, 3.8 waves)
        let small2 = [40, 196, 88, 152, 64, 120, 180, 104];
        assert_eq!(TileConfig::choose(&small2, 7168, 132), TileConfig::SHORT);
        // one short expert and a narrow N: only short tiles stop wasting rows
        assert_eq!(TileConfig::choose(&[40; 64], 2048, 132), TileConfig::SHORT);
    }

    #[test]
    fn grid_never_depends_on_the_counts() {
        let p = contiguous(&[1000, 0, 3], 512);
        let a = TileConfig::LARGE.grid(&p, 132);
        let q = contiguous(&[1, 1001, 1], 512);
        assert_eq!(a, TileConfig::LARGE.grid(&q, 132));
        assert_eq!(TileConfig::LARGE.grid(&contiguous(&[1], 8), 132), 1);
        let m = MoeProblem::masked(&[0, 0], 64, 256, 64, DType::Bf16, DType::Bf16);
        assert_eq!(TileConfig::SHORT.grid(&m, 132), 2);
    }
}
