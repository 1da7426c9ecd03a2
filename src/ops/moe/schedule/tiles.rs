//! The tile shapes of the grouped kernels, their shared memory and grid, and the wave-quantised
//! choice among them.

use super::{table_bytes, MAX_EXPERTS};
use crate::ops::moe::problem::{MoeProblem, Rows};
use crate::ops::waves::waves;

/// K depth of one pipeline stage.
pub const BK: u32 = 64;

/// A tile shape of the grouped kernels: BM x BN x 64 with `stages` pipeline stages, run by
/// clusters of `cluster` CTAs along N that share (multicast) each X tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
        waves(tiles, sms) as f64 * (self.bm * self.bn) as f64 / self.efficiency()
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
    use super::super::contiguous;
    use super::*;
    use crate::ops::gemm::DType;

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
