//! The operand tensor maps and what the producer loads per stage (mirrors of the kernels' boxes),
//! and the grouped tile order.

use super::{TileConfig, GROUP_M};
use crate::device::Tma2d;
use crate::ops::gemm::GemmProblem;

/// Tile `t` of the grouped order as (tile row, tile column): GROUP_M tile-rows are swept column
/// by column, then the next group. Mirrors `tile_coords` in the kernel.
pub fn tile_coords(t: u32, tiles_m: u32, tiles_n: u32) -> (u32, u32) {
    let per_group = GROUP_M * tiles_n;
    let group = t / per_group;
    let first_m = group * GROUP_M;
    let rows = (tiles_m - first_m).min(GROUP_M);
    let r = t - group * per_group;
    (first_m + r % rows, r / rows)
}

/// The tensor maps of A and B for `p` at these addresses: B's K-major box holds the CTA's share
/// of the tile's columns when a cluster multicasts B.
pub fn operand_maps(p: &GemmProblem, a: u64, b: u64, cfg: TileConfig) -> (Tma2d, Tma2d) {
    crate::ops::gemm::tma_operands::operand_maps(p, a, b, a_box_rows(p.m, cfg.bm), b_box_rows(cfg))
}

/// Rows of the K-major B box: the CTA's share of the tile's columns, in two boxes where that is
/// over TMA's 256 (the 320-wide tile: two of 160). Mirrors the kernel's `B_BOXES_K`.
pub fn b_box_rows(cfg: TileConfig) -> u32 {
    let part = cfg.bn / cfg.cluster;
    if part > 256 {
        part / 2
    } else {
        part
    }
}

/// Rows of the K-major A box: the tile's, or for a problem with fewer rows only those, rounded
/// up to 8 (whole 128B-swizzle atoms). Mirrors the kernels' `a_box_rows` (common/gemm_ws.cuh),
/// which expect that many bytes per stage. TMA's zero fill of a tile's rows past M is not free:
/// at N = K = 4096 with 64-row tiles, M = 8 ran 21.7 us and M = 64 17.1 (H100, ledger #54).
pub fn a_box_rows(m: usize, bm: u32) -> u32 {
    if m < bm as usize {
        (m.div_ceil(8) * 8) as u32
    } else {
        bm
    }
}

/// TMA loads one CTA issues per stage for `rows` (M or N) of an operand: one box if K-major,
/// else one per 64 rows. Mirrors the producer's loop.
pub fn loads_per_stage(k_major: bool, rows: u32) -> u32 {
    if k_major {
        1
    } else {
        rows / 64
    }
}

/// TMA loads of B all CTAs of a cluster issue together per stage (each multicast to all): one
/// box of bn / cluster rows per CTA if K-major, else one 64 x 64 box per 64 columns or part of
/// them, shared out whole (128 x 192 in pairs: 2 and 1). Mirrors the producer's loop.
pub fn b_loads_per_cluster(k_major: bool, bn: u32, cluster: u32) -> u32 {
    if k_major {
        cluster * (bn / cluster).div_ceil(256)
    } else {
        bn.div_ceil(64)
    }
}

#[cfg(test)]
mod tests {
    use super::super::bf16;
    use super::*;
    use crate::ops::gemm::{DType, Layout};

    #[test]
    fn grouped_order_visits_every_tile_once() {
        for (tm, tn) in [(1, 1), (3, 5), (8, 8), (9, 2), (17, 3), (64, 32)] {
            let mut seen = vec![false; (tm * tn) as usize];
            for t in 0..tm * tn {
                let (r, c) = tile_coords(t, tm, tn);
                assert!(r < tm && c < tn, "t={t} -> ({r},{c}) outside {tm}x{tn}");
                let i = (r * tn + c) as usize;
                assert!(!seen[i], "({r},{c}) twice");
                seen[i] = true;
            }
        }
        // within a group, consecutive tiles walk down the group's rows first
        assert_eq!(tile_coords(0, 16, 4), (0, 0));
        assert_eq!(tile_coords(1, 16, 4), (1, 0));
        assert_eq!(tile_coords(8, 16, 4), (0, 1));
        assert_eq!(tile_coords(32, 16, 4), (8, 0));
        // a short last group
        assert_eq!(tile_coords(8 * 4, 10, 4), (8, 0));
        assert_eq!(tile_coords(8 * 4 + 1, 10, 4), (9, 0));
        assert_eq!(tile_coords(8 * 4 + 2, 10, 4), (8, 1));
    }

    #[test]
    fn maps_follow_the_layout_and_fill_a_stage_exactly() {
        for cfg in TileConfig::ALL {
            for l in Layout::ALL {
                let p = GemmProblem::new(1000, 1500, 700, l, DType::Bf16, DType::F32);
                let p = GemmProblem {
                    lda: p.lda.next_multiple_of(8),
                    ldb: p.ldb.next_multiple_of(8),
                    ..p
                };
                let (ta, tb) = operand_maps(&p, 1 << 20, 2 << 20, cfg);
                ta.validate().unwrap();
                tb.validate().unwrap();
                // expect_tx in the kernel is the stage size: the loads must deliver exactly that
                // (each CTA of a cluster loads bn / cluster rows of B and multicasts them to all)
                let bytes = loads_per_stage(l.a_k_major(), cfg.bm) as u64 * ta.box_bytes()
                    + b_loads_per_cluster(l.b_k_major(), cfg.bn, cfg.cluster) as u64
                        * tb.box_bytes();
                assert_eq!(
                    bytes,
                    cfg.stage_tx_bytes(l.b_k_major()) as u64,
                    "{l} {cfg:?}"
                );
                assert!(cfg.stage_tx_bytes(l.b_k_major()) <= cfg.stage_bytes());
                if l.a_k_major() {
                    assert_eq!((ta.dims, ta.box_dims), ([700, 1000], [64, cfg.bm]));
                } else {
                    assert_eq!((ta.dims, ta.box_dims), ([1000, 700], [64, 64]));
                }
                if l.b_k_major() {
                    // (the 320-wide tile: two boxes of 160)
                    assert_eq!((tb.dims, tb.box_dims), ([700, 1500], [64, b_box_rows(cfg)]));
                } else {
                    assert_eq!((tb.dims, tb.box_dims), ([1500, 700], [64, 64]));
                }
                assert_eq!(ta.row_stride_bytes, p.lda as u64 * 2);
                assert_eq!(tb.row_stride_bytes, p.ldb as u64 * 2);
            }
        }
    }

    #[test]
    fn a_problem_shorter_than_the_tile_loads_only_its_rows_of_a() {
        assert_eq!(a_box_rows(1, 64), 8);
        assert_eq!(a_box_rows(8, 64), 8);
        assert_eq!(a_box_rows(9, 64), 16);
        assert_eq!(a_box_rows(63, 64), 64);
        assert_eq!(a_box_rows(64, 64), 64);
        assert_eq!(a_box_rows(100, 128), 104);
        assert_eq!(a_box_rows(4096, 128), 128);
        // The kernels expect this many bytes of A per stage (common/gemm_ws.cuh); only a K-major
        // A's box is trimmed: an MN-major one's rows are K.
        for l in Layout::ALL {
            for cfg in TileConfig::ALL {
                let p = bf16(40, 1504, 704, l);
                let (ta, _) = operand_maps(&p, 1 << 20, 2 << 20, cfg);
                ta.validate().unwrap();
                let want = if l.a_k_major() { [64, 40] } else { [64, 64] };
                assert_eq!(ta.box_dims, want, "{l} {cfg:?}");
            }
        }
    }
}
