//! The grouped GEMM's wide tile fitted to the launch (`KILN_FP4_TILE=count-fit`): of the tiles
//! of 128, 160, 192, 224 and 256 tokens (one wgmma batch in flight a consumer: `tt / 2`
//! accumulators a thread), the one whose busiest CTA ends first.
//!
//! Why: the 256-token tile is the largest unit of work a CTA can get, 256 tokens x 128 columns,
//! and a launch of one round lasts as long as its largest unit. At one expert of 300 rows
//! (N 7168, K 2048) kiln's bf16 kernel runs 128 x 192 tiles, the 4-bit 56 of 256 x 128 and 56
//! of 44 x 128: its busiest CTA does 1.33x bf16's tensor work and it ran at 0.75-0.78x (H200,
//! ledger F164). 300 rows as 160 + 140 is 112 tiles of width 160 in the same round; 200 rows
//! as 128 + 72 is 112 of width 128 or less where the 256-token tile ran 56 of width 224. A
//! narrower tile has more tiles: where the launch spills into a second round (1,024 rows) the
//! 256-token tile stays.

use super::dispatch::width;
use super::kernel::{Fp4Path, Fp4Tile};
use super::order::makespan_by;
use crate::ops::gemm::DType;
use crate::ops::moe::MoeProblem;

/// The token counts a grouped GEMM's wide tile may take (the kernel's `KILN_TT`: a multiple of
/// 32, at most 256 accumulators' worth of tokens, 128 at least so that one batch in flight
/// is the form: two batches fit only up to 64 tokens, ledger F130).
pub const GEMM_TOKENS: [u32; 5] = [128, 160, 192, 224, 256];

/// The fitted tiles `kiln check` compiles (both formats): those `count-fit` takes at the
/// measured counts (N 7168, K 2048: 300 rows 160 tokens, 200 rows 128); 192 and 224 compile
/// when a launch asks for them (the variant budget is spent).
pub const COMPILED: [u32; 2] = [160, 128];

/// The GEMM's wide tiles `kiln check` compiles cut in K (both formats): the 256-token tile
/// where a launch of few tiles keeps it, and the 128-token one that `count-fit` takes cut at
/// one expert of 300 rows, N 2048, K 7168 (48 tiles on 132 CTAs).
pub const COMPILED_CUT: [u32; 2] = [256, 128];

/// Microseconds a CTA of a grouped GEMM wide tile spends on one 64-deep stage at wgmma width
/// `w` (one batch in flight), beyond the launch's fixed part: the larger of a floor a stage
/// whatever the width (the stage wait, the next stage's decode, the batch's issue and drain)
/// and the tensor work of the width. Only to compare the tiles of one launch.
pub fn stage_us(w: usize) -> f64 {
    STAGE_FLOOR_US.max(STAGE_PER_COL_US * w as f64)
}

/// The 256-token tile forced on one expert of 128 / 160 / 192 / 224 / 256 rows (N 7168, K 2048:
/// 56 tiles, one round, 32 stages), H200, 2026-11-30 night early call on main c36773e
/// (`results/2026-11-30-h200/fp4big-early-c36773e/`): 25.5 / 25.9 / 26.8 / 28.8 / 32.4 us, so
/// with the launch's ~12 us (ledger F164) 0.42 / 0.43 / 0.46 / 0.52 / 0.64 us a stage: flat to
/// width ~160, then the tensor work's.
const STAGE_FLOOR_US: f64 = 0.41;

/// A column of wgmma width a stage where the tensor work sets it (0.64 us at 256: two
/// consumers' 4 k16 steps of 64 rows, 4 nominal tensor cycles a column, ~1,090 cycles at the
/// capped clock for 1,024 nominal).
const STAGE_PER_COL_US: f64 = 0.0025;

/// The most a fitted tile's simulated launch may take, as a share of the 256-token tile's, to
/// replace it: the 256-token tile is the one measured everywhere, the model is new.
pub const FIT_SHARE: f64 = 0.95;

/// The simulated launch of `p` on the grouped GEMM's wide tile of `tt` tokens over `sms` SMs
/// (each CTA takes the next tile when its last ends, a tile `stages` x [`stage_us`]).
pub fn makespan_us(p: &MoeProblem, tt: u32, sms: u32) -> f64 {
    makespan_by(p, Fp4Tile::gemm_wide(tt), sms, false, stage_us)
}

/// `base` (the rows rule's tile), or in place of the grouped GEMM's 256-token tile with bf16
/// activations over counts the host knows, the tile of [`GEMM_TOKENS`] whose simulated launch
/// ends first, where that is at most [`FIT_SHARE`] of the 256-token tile's.
pub fn fit(p: &MoeProblem, base: Fp4Tile, sms: u32) -> Fp4Tile {
    let applies = p.swiglu.is_none()
        && !p.is_masked()
        && p.input == DType::Bf16
        && base.path == Fp4Path::Rs
        && base == Fp4Tile::prefill(false);
    if !applies {
        return base;
    }
    let whole = makespan_us(p, 256, sms);
    let mut best = (256, whole);
    for tt in GEMM_TOKENS {
        let t = makespan_us(p, tt, sms);
        if t < best.1 {
            best = (tt, t);
        }
    }
    if best.0 != 256 && best.1 <= FIT_SHARE * whole {
        Fp4Tile::gemm_wide(best.0)
    } else {
        base
    }
}

/// The widest wgmma width a launch of `p` on the tile of `tt` tokens runs (its largest unit).
pub fn largest_width(p: &MoeProblem, tt: u32) -> usize {
    p.spans()
        .iter()
        .map(|&(_, c)| width(c.min(tt as usize)))
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gemm(counts: &[usize]) -> MoeProblem {
        MoeProblem::contiguous(counts, 7168, 2048, DType::Bf16, DType::Bf16)
    }

    fn fitted(counts: &[usize]) -> u32 {
        fit(&gemm(counts), Fp4Tile::prefill(false), 132).tt
    }

    #[test]
    fn each_tile_fits_and_keeps_stages_in_flight() {
        for tt in GEMM_TOKENS {
            let t = Fp4Tile::gemm_wide(tt);
            assert!(t.smem_bytes(false) <= t.smem_limit(), "{t:?}");
            assert!(t.stages >= 5, "{t:?}");
            assert_eq!(t.bn(false), 128);
        }
        assert_eq!(Fp4Tile::gemm_wide(256), Fp4Tile::prefill(false));
        assert_eq!(Fp4Tile::gemm_wide(128).stages, 10);
    }

    #[test]
    fn the_busiest_cta_picks_the_tile_at_200_and_300_rows() {
        // 300 rows: 160 + 140, 112 tiles of width 160 in one round, where 256 + 44 leaves the
        // busiest CTA a tile of width 256
        assert_eq!(fitted(&[300]), 160);
        assert_eq!(largest_width(&gemm(&[300]), 160), 160);
        // 200 rows: 128 + 72, 112 tiles of width 128 at most, against 56 of width 224
        assert_eq!(fitted(&[200]), 128);
        assert_eq!(largest_width(&gemm(&[200]), 256), 224);
    }

    #[test]
    fn launches_of_more_than_a_round_keep_the_256_token_tile() {
        // 1,024 rows: 224 tiles of 256 (1.7 rounds) against 280-448 narrower ones
        assert_eq!(fitted(&[1024]), 256);
        // 8 experts of 7,516 rows and E256 prefill alike
        assert_eq!(fitted(&crate::ops::moe::uneven_counts(7516, 8, 1)), 256);
        // a tile that the rows do not reach changes nothing: 77 rows are width 96 on any
        assert_eq!(fitted(&[0, 0, 77, 0]), 256);
    }

    #[test]
    fn only_the_gemms_256_token_tile_with_known_counts() {
        let sw = gemm(&[300]).with_swiglu(crate::ops::moe::WeightLayout::Separate, true);
        assert_eq!(
            fit(&sw, Fp4Tile::prefill(true), 132),
            Fp4Tile::prefill(true)
        );
        let dec = Fp4Tile::decode(false);
        assert_eq!(fit(&gemm(&[300]), dec, 132), dec);
        let f16 = MoeProblem::contiguous(&[300], 7168, 2048, DType::F16, DType::F16);
        assert_eq!(
            fit(&f16, Fp4Tile::prefill(false), 132),
            Fp4Tile::prefill(false)
        );
    }
}
