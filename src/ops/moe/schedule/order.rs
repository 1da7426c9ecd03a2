//! The grouped tile orders the MoE kernels walk (fixed groups of m-tiles, or expert by expert)
//! and the choice between them: mirrors of `moe_tile_coords` and `moe_expert_coords`.

use crate::ops::moe::problem::MoeProblem;
use crate::overrides::{MoeOrder, MoeOverrides};

/// Tile-rows swept together in the grouped order (the kernels' `KILN_GROUP_M`).
pub const GROUP_M: u32 = 8;
/// Host m-tiles at or below which one group holds them all (see [`group_for`]).
pub const ONE_GROUP_MAX: u32 = 32;
/// ... as long as their X rows take at most this much of L2 (H100/H200: 50 MB), leaving the rest
/// to the W stream. Measured: one group won at E=8, 40-196 rows, N=7168, K=2048 (X of 18 m-tiles
/// of 64 rows: 4.5 MiB; H200 0.0841 vs 0.0879 ms) and at 40-248 rows, N=4096, K=7168 with 128x192
/// tiles (12 m-tiles of 128 rows: 21 MiB; H100 0.1923 vs 0.2051 ms, MoE ledger #1, 2026-11-22:
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
/// 2026-11-22, MoE ledger #5 and #6). `KILN_MOE_GROUP` ([`MoeOverrides::group`]) sets the width
/// and `KILN_MOE_ORDER` ([`MoeOverrides::order`]) the kind, to time them against each other.
pub fn order_for(p: &MoeProblem, bm: u32, overrides: &MoeOverrides) -> TileOrder {
    let width = overrides.group.filter(|&g| g >= 1);
    let kind = overrides.order;
    let tiles_m: usize = p.spans().iter().map(|s| s.1.div_ceil(bm as usize)).sum();
    let x_bytes = tiles_m * bm as usize * p.k * p.input.size();
    let default = if tiles_m as u32 <= ONE_GROUP_MAX && x_bytes <= ONE_GROUP_X_BYTES {
        TileOrder::Fixed(tiles_m.max(1) as u32)
    } else {
        TileOrder::ByExpert(EXPERT_GROUP_MAX)
    };
    match (kind, width, default) {
        (Some(MoeOrder::Fixed), w, d) => TileOrder::Fixed(w.unwrap_or(match d {
            TileOrder::Fixed(g) => g,
            TileOrder::ByExpert(_) => GROUP_M,
        })),
        (Some(MoeOrder::Expert), w, _) => TileOrder::ByExpert(w.unwrap_or(EXPERT_GROUP_MAX)),
        (_, Some(w), TileOrder::Fixed(_)) => TileOrder::Fixed(w),
        (_, Some(w), TileOrder::ByExpert(_)) => TileOrder::ByExpert(w),
        (_, None, d) => d,
    }
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

#[cfg(test)]
mod tests {
    use super::super::contiguous;
    use super::*;
    use crate::ops::gemm::DType;

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

    #[test]
    fn short_experts_sweep_all_m_tiles_in_one_group() {
        // small M at K = 2048: 18 m-tiles of 64 rows, 4.5 MiB of X: one group
        let counts = [40, 196, 88, 152, 64, 120, 180, 104];
        let k2048 = MoeProblem::contiguous(&counts, 7168, 2048, DType::Bf16, DType::Bf16);
        assert_eq!(
            order_for(&k2048, 64, &MoeOverrides::NONE),
            TileOrder::Fixed(18)
        );
        // at K = 7168, 12 m-tiles of 128 rows hold 21 MiB of X: within the budget, one group
        let k7168 = MoeProblem::contiguous(
            &[40, 248, 112, 176, 64, 200, 136, 96],
            4096,
            7168,
            DType::Bf16,
            DType::Bf16,
        );
        assert_eq!(
            order_for(&k7168, 128, &MoeOverrides::NONE),
            TileOrder::Fixed(12)
        );
        // twice the rows: 24 m-tiles, 42 MiB of X: past it, expert by expert
        let k7168x2 = MoeProblem::contiguous(
            &[80, 496, 224, 352, 128, 400, 272, 192],
            4096,
            7168,
            DType::Bf16,
            DType::Bf16,
        );
        assert_eq!(
            order_for(&k7168x2, 128, &MoeOverrides::NONE),
            TileOrder::ByExpert(EXPERT_GROUP_MAX)
        );
        // prefill: 63 m-tiles
        let prefill = contiguous(&[1512, 1091, 539, 772, 779, 979, 880, 964], 3072);
        assert_eq!(
            order_for(&prefill, 128, &MoeOverrides::NONE),
            TileOrder::ByExpert(EXPERT_GROUP_MAX)
        );
        assert_eq!(
            order_for(&contiguous(&[0, 0], 64), 128, &MoeOverrides::NONE),
            TileOrder::Fixed(1)
        );
    }
}
