//! Swap-AB: run C = A·B as Cᵀ = Bᵀ·Aᵀ, a problem of N rows and M columns over the same buffers
//! (A and B exchanged, each layout letter flipped), with the row-store epilogue writing each tile
//! transposed into C (the kernel's `KILN_C_T`, `store_cols_staged` in kernels/common/c_rows.cuh).
//! Where M is small and N large, M then runs along the tile's width, which comes in steps of 8,
//! rather than its height, which comes in steps of 64 or 128.
//!
//! The case that asked for it (issue 48): 281x8320x8512 RC bf16, 0.76x cuBLAS at b78ecb6. kiln ran
//! one wave of 128x192 tiles (3 tile-rows x 44 = 132), 384 rows for M's 281: 27 % of the MMA on
//! zero rows. cuBLAS (ncu, H200) ran its 128x144 tile on the transposed problem: 8320 / 128 = 65
//! tile-rows by 281 / 144 = 2 tile-columns, 130 tiles on a persistent grid of 130, 98 % of the
//! MMA inside C. In the cost model's block-steps: 128x192 one wave 136 x 24 = 3264, swapped 128x144
//! one wave 136 x 18 = 2448 (25 % less).

use super::{k_blocks, Choice, TileConfig};
use crate::ops::gemm::{DType, GemmProblem, Layout};

/// `KILN_WGMMA_SWAP`: whether the dispatch runs problems as Cᵀ = Bᵀ·Aᵀ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Swap {
    /// `0`: never (the dispatch before 2026-11-29's swap-AB).
    Never,
    /// `auto` (the default): where [`swap_pays`] says so.
    Auto,
    /// `1`: every problem, in the 128x144 tile unless `KILN_WGMMA_CFG` names another (to check
    /// the transposed store on every shape, and to time it).
    Always,
}

impl Swap {
    pub const ALL: [Swap; 3] = [Swap::Never, Swap::Auto, Swap::Always];

    /// Its value in `KILN_WGMMA_SWAP`.
    pub fn name(self) -> &'static str {
        match self {
            Swap::Never => "0",
            Swap::Auto => "auto",
            Swap::Always => "1",
        }
    }

    pub fn parse(v: &str) -> Option<Swap> {
        Swap::ALL.into_iter().find(|s| s.name() == v)
    }
}

/// Cᵀ = Bᵀ·Aᵀ as a problem of its own: N x M, A' = Bᵀ (row-major where B is column-major, at
/// B's leading dimension), B' = Aᵀ (likewise from A). C keeps its leading dimension: the kernel
/// stores element (i, j) of Cᵀ at C(j, i). Canonical where `p` is.
pub fn swapped(p: &GemmProblem) -> GemmProblem {
    let (a_row, b_row) = (!p.layout.b_row_major(), !p.layout.a_row_major());
    GemmProblem {
        m: p.n,
        n: p.m,
        layout: match (a_row, b_row) {
            (true, false) => Layout::RC,
            (false, true) => Layout::CR,
            (true, true) => Layout::RR,
            (false, false) => Layout::CC,
        },
        lda: p.ldb,
        ldb: p.lda,
        ..*p
    }
    .canonical()
}

/// The shortest K swap-AB is weighed at: 32 K blocks. The transposed store writes 32-byte runs
/// where the TMA store writes whole tiles, which the model (3 blocks of fill and epilogue a unit)
/// does not see; a long K hides it (385x14000x181 CC, 3 K blocks, would swap for the padding
/// alone).
const MIN_K: usize = 2048;

/// Whether swap-AB's variants for (`input`, `output`) are in the registry (`kiln check`), so that
/// the dispatch's rule may take them: C of the input's dtype or f32, 16 of the 24 (layout, input,
/// output) combinations within the variant budget. A cross output (bf16 in, f16 out, or the
/// reverse) is not swapped by the rule; `KILN_WGMMA_SWAP=1` compiles it on demand.
pub fn swap_registered(input: DType, output: DType) -> bool {
    output == input || output == DType::F32
}

/// The modelled block-steps of `choice` on `p` (as the kernel reads it) and of swap-AB's 128x144
/// tiles on its transpose ([`TileConfig::cost`]), where the dispatch weighs swapping at all: the
/// choice an unsplit cooperative 128-row tile (the model's own regime: the ping-pong, 64-row and
/// split picks are rules measured where it is wrong), at least two of its tile-rows (one
/// tile-row is the decode rules'), C's M at most three 144-wide tiles, and K at least
/// [`MIN_K`], its dtypes [`swap_registered`]. An operand TMA cannot address is copied either way (the same buffer: A' is B, B'
/// is A); swapped, the 128x144 tile has no in-place variant, so it is always copied.
pub fn swap_costs(p: &GemmProblem, sm_count: u32, choice: &Choice) -> Option<(u64, u64)> {
    let t = choice.tile;
    let weighed = p.k >= MIN_K
        && swap_registered(p.input, p.output)
        && t.bm == 128
        && !t.pingpong
        && choice.splits == 1
        && !choice.stream_k
        && p.m > t.bm as usize
        && p.m <= 3 * TileConfig::N144.bn as usize;
    weighed.then(|| {
        (
            t.cost(p.m, p.n, p.k, sm_count, 1),
            TileConfig::N144.cost(p.n, p.m, p.k, sm_count, 1),
        )
    })
}

/// Whether swap-AB's modelled time ([`swap_costs`]) is at least 10 % under the choice's: the
/// margin the cost model asks of a narrower tile.
pub fn swap_pays(p: &GemmProblem, sm_count: u32, choice: &Choice) -> bool {
    swap_costs(p, sm_count, choice).is_some_and(|(now, swapped)| 10 * swapped <= 9 * now)
}

/// The choice `choice` becomes when the dispatch swaps: 128x144 tiles unsplit (or the forced
/// tile and splits, `KILN_WGMMA_SWAP=1`), the group kept.
pub(super) fn swap_choice(
    choice: Choice,
    forced: Option<TileConfig>,
    splits: Option<u32>,
) -> Choice {
    Choice {
        tile: forced.unwrap_or(TileConfig::N144),
        splits: splits.unwrap_or(1),
        tail: false,
        stream_k: false,
        swap: true,
        ..choice
    }
}

/// The plan's note on a swap: the transposed problem, its tiles and the two modelled costs.
pub(super) fn note(p: &GemmProblem, sm_count: u32, costs: (u64, u64)) -> String {
    let q = swapped(p);
    let (tm, tn) = TileConfig::N144.tiles(q.m, q.n);
    format!(
        "swap-AB: C^T = B^T A^T ({}x{}) in 128x144 tiles, {tm} x {tn} = {} on {sm_count} SMs, {} K \
         blocks each; modelled {} block-steps against {} (10 % under: taken; KILN_WGMMA_SWAP=0 \
         keeps C = A B)",
        q.m,
        q.n,
        tm * tn,
        k_blocks(q.k),
        costs.1,
        costs.0
    )
}

#[cfg(test)]
mod tests {
    use super::super::{as_read, bf16, GemmOverrides};
    use super::*;

    #[test]
    fn the_transpose_exchanges_operands_and_flips_layouts() {
        for (l, want) in [
            (Layout::RC, Layout::RC),
            (Layout::CR, Layout::CR),
            (Layout::RR, Layout::CC),
            (Layout::CC, Layout::RR),
        ] {
            let mut p = bf16(281, 8320, 8512, l);
            p.lda += 8;
            let q = swapped(&p);
            assert_eq!((q.m, q.n, q.k), (8320, 281, 8512));
            assert_eq!(q.layout, want, "{l}");
            assert_eq!((q.lda, q.ldb, q.ldc), (p.ldb, p.lda, p.ldc));
            // each operand's storage is the other's
            assert_eq!(q.a_storage(), p.b_storage());
            assert_eq!(q.b_storage(), p.a_storage());
            assert_eq!(swapped(&q), p);
        }
    }

    /// Issue 48's aligned skinny case swaps (one wave of 130 128x144 tiles against one of 132
    /// 128x192); square, tall and one-tile-row problems do not.
    #[test]
    fn swaps_where_c_has_few_rows_and_many_columns() {
        // (as the dispatch resolves it: for the problem as the kernel reads it)
        let resolve =
            |p: &GemmProblem| Choice::resolve(&as_read(p), 132, None, &GemmOverrides::NONE);
        for l in Layout::ALL {
            let p = as_read(&bf16(281, 8320, 8512, l));
            let c = resolve(&p);
            assert!(c.swap, "{l}: {c:?}");
            assert_eq!(c.tile, TileConfig::N144);
            let now = Choice::heuristic(&p, 132, true);
            assert_eq!(now.tile, TileConfig::MEDIUM, "{l}");
            assert_eq!(swap_costs(&p, 132, &now), Some((3264, 2448)));
        }
        for (m, n, k) in [
            (4096, 4096, 4096),
            (8192, 281, 8512),
            (128, 8192, 8192),
            (64, 4096, 4096),
        ] {
            let c = resolve(&bf16(m, n, k, Layout::RC));
            assert!(!c.swap, "{m}x{n}x{k}: {c:?}");
        }
        let never = GemmOverrides {
            swap: Swap::Never,
            ..GemmOverrides::NONE
        };
        assert!(!Choice::resolve(&bf16(281, 8320, 8512, Layout::RC), 132, None, &never).swap);
        let always = GemmOverrides {
            swap: Swap::Always,
            ..GemmOverrides::NONE
        };
        let c = Choice::resolve(&bf16(4096, 4096, 4096, Layout::RC), 132, None, &always);
        assert!(c.swap && c.tile == TileConfig::N144 && c.splits == 1);
    }
}
