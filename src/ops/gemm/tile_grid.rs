//! The 1-D grid of the one-block-per-tile GEMM kernels (cp.async, TMA, mma.sync): BM x BN tiles
//! visited in groups of `group_m` tile rows, each group column by column (the device's `block_tile`).

use super::GemmProblem;
use crate::error::{Error, Result};

/// A kernel's output tiling and block order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TileGrid {
    pub bm: u32,
    pub bn: u32,
    pub group_m: u32,
}

impl TileGrid {
    /// Tiles along M and N.
    pub fn tiles(&self, p: &GemmProblem) -> (u64, u64) {
        (
            (p.m as u64).div_ceil(self.bm as u64),
            (p.n as u64).div_ceil(self.bn as u64),
        )
    }

    /// Blocks of the grid (one per tile), or `None` when they would not fit the kernel's `int`
    /// block index.
    pub fn blocks(&self, p: &GemmProblem) -> Option<u32> {
        let (tm, tn) = self.tiles(p);
        let blocks = tm.checked_mul(tn)?;
        (blocks <= i32::MAX as u64).then_some(blocks as u32)
    }

    /// `supports`' refusal of a grid that does not fit.
    pub fn check(&self, p: &GemmProblem) -> std::result::Result<(), String> {
        match self.blocks(p) {
            Some(_) => Ok(()),
            None => Err(format!(
                "{}x{} outputs need more than 2^31 - 1 blocks of {}x{}",
                p.m, p.n, self.bm, self.bn
            )),
        }
    }

    /// The blocks a launch of `kernel` runs, refused as `Unsupported` (the dispatcher falls
    /// back) when they do not fit.
    pub fn launch_blocks(&self, kernel: &str, p: &GemmProblem) -> Result<u32> {
        self.blocks(p).ok_or_else(|| Error::Unsupported {
            kernel: kernel.into(),
            reason: "too many blocks for a 1-D grid".into(),
        })
    }

    /// The tile (row, column) block `pid` computes, for tests and tools.
    pub fn block_tile(&self, pid: u32, tiles_m: u32, tiles_n: u32) -> (u32, u32) {
        let per_group = self.group_m * tiles_n;
        let group = pid / per_group;
        let first = group * self.group_m;
        let rows = (tiles_m - first).min(self.group_m);
        let in_group = pid - group * per_group;
        (first + in_group % rows, in_group / rows)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::{DType, Layout};

    fn problem(m: usize, n: usize) -> GemmProblem {
        GemmProblem::new(m, n, 8, Layout::RC, DType::Bf16, DType::Bf16)
    }

    #[test]
    fn blocks_cover_the_output_and_refuse_an_int_overflow() {
        let g = TileGrid {
            bm: 128,
            bn: 128,
            group_m: 8,
        };
        assert_eq!(g.blocks(&problem(4096, 4096)), Some(32 * 32));
        assert_eq!(g.blocks(&problem(1, 1)), Some(1));
        assert_eq!(g.blocks(&problem(129, 257)), Some(2 * 3));
        let huge = problem(i32::MAX as usize, i32::MAX as usize);
        assert_eq!(g.blocks(&huge), None);
        assert!(g.check(&huge).unwrap_err().contains("blocks of 128x128"));
        assert!(g.launch_blocks("k", &huge).is_err());
    }

    #[test]
    fn block_order_visits_every_tile_once() {
        for (tm, tn) in [(1, 1), (3, 5), (8, 8), (17, 3), (9, 40), (16, 1)] {
            for group_m in [1, 4, 8] {
                let g = TileGrid {
                    bm: 128,
                    bn: 128,
                    group_m,
                };
                let mut seen = vec![false; (tm * tn) as usize];
                for pid in 0..tm * tn {
                    let (r, c) = g.block_tile(pid, tm, tn);
                    assert!(r < tm && c < tn, "pid {pid} of {tm}x{tn} -> ({r}, {c})");
                    let i = (r * tn + c) as usize;
                    assert!(!seen[i], "tile ({r}, {c}) visited twice");
                    seen[i] = true;
                }
            }
        }
    }

    #[test]
    fn block_order_sweeps_a_group_column_by_column() {
        let g = TileGrid {
            bm: 128,
            bn: 128,
            group_m: 3,
        };
        let order: Vec<_> = (0..6).map(|pid| g.block_tile(pid, 10, 4)).collect();
        assert_eq!(order, [(0, 0), (1, 0), (2, 0), (0, 1), (1, 1), (2, 1)]);
        // the last group holds the single leftover row
        assert_eq!(g.block_tile(36, 10, 4), (9, 0));
        assert_eq!(g.block_tile(39, 10, 4), (9, 3));
        let g8 = TileGrid { group_m: 8, ..g };
        assert_eq!(g8.block_tile(1, 16, 4), (1, 0));
        assert_eq!(g8.block_tile(8, 16, 4), (0, 1));
    }
}
