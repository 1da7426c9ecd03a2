//! Where an operand that TMA cannot address (a row stride or base off 16 bytes) is read in place
//! by the producer warpgroup's cp.async copies (`KILN_CPA` variants) rather than copied to
//! 128-byte rows first (`pack_rows`): the rule, its cost model, and `KILN_WGMMA_INPLACE`.
//!
//! The H200 at 279a9fa (2026-11-29, ledger "operands read in place") read every such operand in
//! place and showed both sides of it: a short K gained (15104x7420x64 CR 1.18x, 12031x4096x62 RR
//! 1.10x over the copy), a long one lost up to 3.3x (8042x2510x11050 CC, 4-byte copies of both
//! operands), because the producer's narrow copies fill a stage several times slower than TMA
//! (a 128 x 256 stage of two 4-byte operands, 12,288 lane copies, took ~2.6-2.8 us against ~0.7
//! us of MMA; one 8-byte operand of a 128-row tile, 2,048 copies, ~1 us). Where the whole K of a
//! tile is a stage or a few, that time hides under the epilogue's stores; where it is many, it is
//! the kernel's time.

use super::{k_blocks, TileConfig};
use crate::ops::gemm::GemmProblem;

/// `KILN_WGMMA_INPLACE`: how operands TMA cannot address are read, and how C is written where
/// TMA cannot address it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InPlace {
    /// `0`: the dispatch before 2026-11-29: such operands are copied to 128-byte rows first, and
    /// a large C off 16 bytes is written through scratch and copied back.
    Copy,
    /// `auto` (the default): C is always written in place (the row-store epilogue, a large C's
    /// ping-pong tile run as its cooperative twin), and an operand is read in place where
    /// [`in_place_pays`] says the producer's copies cost less than the copy.
    Auto,
    /// `1`: as `auto`, with every operand TMA cannot address read in place, at any K, in the
    /// nearest tile that has the variant (`with_cpa`): the 279a9fa dispatch, to time the rule.
    All,
}

impl InPlace {
    pub const ALL: [InPlace; 3] = [InPlace::Copy, InPlace::Auto, InPlace::All];

    /// Its value in `KILN_WGMMA_INPLACE`.
    pub fn name(self) -> &'static str {
        match self {
            InPlace::Copy => "0",
            InPlace::Auto => "auto",
            InPlace::All => "1",
        }
    }

    pub fn parse(v: &str) -> Option<InPlace> {
        InPlace::ALL.into_iter().find(|i| i.name() == v)
    }
}

/// The widest copy (16, 8, 4 or 2 bytes) that every row of an operand with rows `row_bytes` apart
/// at `ptr` allows: the kernel's `cp_tile_bytes`.
pub(super) fn copy_width(row_bytes: usize, ptr: u64) -> u32 {
    let x = ptr | row_bytes as u64 | 16;
    (x & x.wrapping_neg()) as u32
}

/// SMs the model lays tiles over (H100 and H200).
const SMS: u64 = 132;
/// A stage filled by the producer's copies: microseconds per stage and per lane copy, fitted to
/// 279a9fa's long-K shapes (stages of 2,048 to 12,288 copies took ~0.9-1.1 to ~2.6-2.8 us).
const STAGE_US: f64 = 0.66;
const US_PER_LANE_COPY: f64 = 0.166e-3;
/// One SM's share of the MMA rate (FLOP per microsecond: ~800 TF over 132 SMs) and of the HBM
/// write rate (bytes per microsecond: ~4 TB/s over 132).
const SM_FLOP_PER_US: f64 = 6.0e6;
const SM_BYTES_PER_US: f64 = 30.0e3;
/// A copy to 128-byte rows: its launch, which the GEMM waits for even as its programmatic
/// dependent (microseconds: ~3-3.8 for a small transposed copy, H100, ledger #56 and #58), and its
/// read and write of the operand (bytes per microsecond).
const COPY_LAUNCH_US: f64 = 3.5;
const COPY_BYTES_PER_US: f64 = 3.0e6;

/// Whether reading in place the operands of `p` whose copy widths are `widths` (A, B: 4 or 8
/// bytes; 16 for one TMA loads) costs less than copying them first, in `tile` split `splits`
/// ways: the producer's time per stage ([`STAGE_US`] and its lane copies) over a unit's K blocks,
/// beyond what the unit takes anyway (its MMA or its epilogue's stores, whichever is longer),
/// for each unit a CTA takes; against each copy's launch and its read and write of the operand.
/// So a K of one or two stages reads in place wherever C is written (15104x7420x64 CR: B's 4,096
/// 8-byte copies a stage, 1.3 us, under 2.2 us of stores), a long K only where the copies nearly
/// hide under the MMA and the copy is large (6684x248x6460 RR: an 86 MB A at 8 bytes) and not
/// where they do not (8042x2510x11050 CC: 2.7 us a stage against 0.7, over 173 K blocks).
pub fn in_place_pays(p: &GemmProblem, tile: TileConfig, splits: u32, widths: [u32; 2]) -> bool {
    let (bm, bn) = (tile.bm as f64, tile.bn as f64);
    let rows = [bm, bn.max(64.0)];
    let (mut lane_copies, mut copy_us) = (0.0, 0.0);
    for ((w, rows), bytes) in widths.iter().zip(rows).zip([p.a_storage(), p.b_storage()]) {
        if *w < 16 {
            lane_copies += rows * 128.0 / *w as f64;
            let bytes = (bytes.0 * bytes.1 * p.input.size()) as f64;
            copy_us += COPY_LAUNCH_US + 2.0 * bytes / COPY_BYTES_PER_US;
        }
    }
    let stage_us = STAGE_US + lane_copies * US_PER_LANE_COPY;
    let splits = splits.max(1);
    let kb = k_blocks(p.k).div_ceil(splits) as f64;
    let units = tile.cluster_tiles(p.m, p.n) as u64 * splits as u64;
    let per_cta = units.div_ceil(SMS) as f64;
    let mma_us = 2.0 * bm * bn * 64.0 / SM_FLOP_PER_US;
    let store_us = bm * bn * p.output.size() as f64 / SM_BYTES_PER_US;
    let extra_us = per_cta * (kb * stage_us - (kb * mma_us).max(store_us)).max(0.0);
    extra_us <= copy_us
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::{DType, Layout};

    #[test]
    fn copy_widths_follow_the_row_stride_and_base() {
        assert_eq!(copy_width(356, 1 << 20), 4);
        assert_eq!(copy_width(72, 1 << 20), 8);
        assert_eq!(copy_width(17666, 1 << 20), 2);
        assert_eq!(copy_width(4096, 1 << 20), 16);
        assert_eq!(copy_width(4096, (1 << 20) + 4), 4);
    }

    #[test]
    fn the_knob_takes_its_three_values() {
        for i in InPlace::ALL {
            assert_eq!(InPlace::parse(i.name()), Some(i));
        }
        assert_eq!(InPlace::parse("yes"), None);
    }

    /// 279a9fa's H200 figures (all in place, against the copies before): the rule keeps the
    /// copies where in place lost and reads in place where it won.
    #[test]
    fn the_model_follows_the_h200_s_wins_and_losses() {
        let f16 = |m, n, k, l| GemmProblem::new(m, n, k, l, DType::F16, DType::F16);
        let bf = |m, n, k, l| GemmProblem::new(m, n, k, l, DType::Bf16, DType::Bf16);
        let (large, medium) = (TileConfig::LARGE, TileConfig::MEDIUM);
        // won: a K of one stage
        assert!(in_place_pays(
            &f16(15104, 7420, 64, Layout::CR),
            large,
            1,
            [16, 8]
        ));
        assert!(in_place_pays(
            &bf(12031, 4096, 62, Layout::RR),
            large,
            1,
            [4, 16]
        ));
        // won: one 8-byte operand under a long K's MMA (A 86 MB, its copy ~60 us)
        assert!(in_place_pays(
            &f16(6684, 248, 6460, Layout::RR),
            large,
            2,
            [8, 16]
        ));
        // lost: 0.30x, 0.33x, 0.41x, 0.56x (4-byte A alone, 35 K blocks)
        assert!(!in_place_pays(
            &f16(8042, 2510, 11050, Layout::CC),
            large,
            1,
            [4, 4]
        ));
        assert!(!in_place_pays(
            &bf(8319, 2048, 1906, Layout::RC),
            large,
            1,
            [4, 4]
        ));
        assert!(!in_place_pays(
            &bf(5248, 2063, 2266, Layout::RC),
            large,
            1,
            [4, 4]
        ));
        assert!(!in_place_pays(
            &f16(2043, 6080, 2214, Layout::RR),
            large,
            1,
            [4, 16]
        ));
        // lost: 24 tiles a CTA of three 4-byte stages each (C's row store gained what this lost)
        assert!(!in_place_pays(
            &f16(13568, 7194, 138, Layout::RR),
            large,
            1,
            [4, 4]
        ));
        // lost: 0.93x at 9 K blocks of 128 x 192
        assert!(!in_place_pays(
            &bf(5434, 534, 575, Layout::CR),
            medium,
            1,
            [4, 4]
        ));
    }
}
