//! The shape suites verification runs: the boundaries that broke the seeds (1, 40, 64, 127, 128,
//! 129, 4096+1), K values that are multiples of no tile, primes, tall-skinny, every layout,
//! every dtype pair, alpha/beta and padded leading dimensions.

use crate::ops::gemm::{DType, GemmProblem, Layout};

pub const EDGES: [usize; 7] = [1, 40, 64, 127, 128, 129, 4097];
/// K values: primes and odd sizes that divide no tile (16, 32, 64, 128).
pub const ODD_K: [usize; 6] = [1, 13, 67, 251, 1031, 4099];
/// K values that keep 16-byte row alignment (multiples of 8) but divide no 64-wide K tile, so the
/// TMA and cp.async rungs (which need aligned rows) run their K tails on the boundary shapes too.
pub const ALIGNED_K: [usize; 5] = [8, 72, 264, 1032, 4104];

/// Packed problems whose rows TMA cannot address, each layout: row strides that allow 4-, 8- and
/// 2-byte copies in A and in B (K 178, 36, 4095; N 876, 178, 1457 in the row-major Bs), C's rows
/// off 16 bytes, a tile-row of 129 and 127 columns with a long K, and few tiles over a long K
/// (split 2-4 ways in one wave). The dispatch copies these operands first (`KILN_WGMMA_INPLACE=1`
/// reads them in place, each copy width in A and in B, under split-K).
pub const IN_PLACE: [(usize, usize, usize, Layout); 8] = [
    (433, 876, 178, Layout::RR),
    (301, 1457, 36, Layout::RC),
    (129, 127, 4095, Layout::RR),
    (700, 178, 36, Layout::CR),
    (517, 300, 178, Layout::CC),
    (300, 333, 8, Layout::RR),
    (1000, 1000, 4010, Layout::RC),
    (1000, 1002, 4010, Layout::CR),
];

/// Packed problems with a K of one or two stages whose operands the dispatch reads in place (its
/// cost model, `wgmma_tma_ws::in_place_pays`), each layout: 4- and 8-byte copies of A, of B and of
/// both, C stored by rows (N 1457, 1100, 1300) and by TMA, in 128x192 and 128x256 tiles (two of
/// them picked as pairs, which read in place as single CTAs).
pub const SHORT_K_IN_PLACE: [(usize, usize, usize, Layout); 6] = [
    (2000, 1457, 34, Layout::RC),
    (1500, 2000, 20, Layout::RR),
    (2500, 1100, 100, Layout::CC),
    (2000, 2000, 66, Layout::RR),
    (1800, 1300, 98, Layout::CR),
    (2600, 2600, 60, Layout::CC),
];

/// Which suite to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suite {
    /// A handful of shapes per layout: seconds.
    Quick,
    /// The whole boundary suite.
    Full,
}

impl std::str::FromStr for Suite {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        match s {
            "quick" => Ok(Suite::Quick),
            "full" => Ok(Suite::Full),
            _ => Err(crate::Error::invalid(format!(
                "unknown suite `{s}`; use quick or full"
            ))),
        }
    }
}

/// The GEMM problems of `suite`.
pub fn gemm_suite(suite: Suite) -> Vec<GemmProblem> {
    let mut v = Vec::new();
    let bf = |m, n, k, l| GemmProblem::new(m, n, k, l, DType::Bf16, DType::Bf16);
    match suite {
        Suite::Quick => {
            for l in Layout::ALL {
                for &(m, n, k) in &[
                    (1, 1, 1),
                    (129, 127, 67),
                    (128, 256, 1024),
                    (257, 263, 4099),
                ] {
                    v.push(bf(m, n, k, l));
                }
                for &(m, n, k) in &[(1, 1, 1), (129, 127, 67), (257, 263, 4099)] {
                    v.push(padded(bf(m, n, k, l)));
                }
            }
            for (i, o) in dtype_pairs() {
                v.push(GemmProblem::new(200, 136, 250, Layout::RC, i, o));
                v.push(padded(GemmProblem::new(200, 136, 250, Layout::CR, i, o)));
            }
            v.extend(IN_PLACE[..2].iter().map(|&(m, n, k, l)| bf(m, n, k, l)));
            v.extend(
                SHORT_K_IN_PLACE[..2]
                    .iter()
                    .map(|&(m, n, k, l)| bf(m, n, k, l)),
            );
        }
        Suite::Full => {
            for l in Layout::ALL {
                // The boundaries, then the same with every leading dimension padded to a
                // multiple of 8 elements, as frameworks allocate: the aligned rungs must cover
                // them too. 4097 x 4097 with a long K is slow on the naive rung; K is moderate
                // there.
                for (ks, k_4097, pad) in [(&ODD_K[..], 251, false), (&ALIGNED_K[..], 264, true)] {
                    let mut ki = 0;
                    for &m in &EDGES {
                        for &n in &EDGES {
                            let k = if m == 4097 && n == 4097 {
                                k_4097
                            } else {
                                ks[ki % ks.len()]
                            };
                            ki += 1;
                            let p = bf(m, n, k, l);
                            v.push(if pad { padded(p) } else { p });
                        }
                    }
                }
                for &(m, n, k) in &[
                    (1024, 1024, 1024),
                    (8192, 16, 1024),
                    (16, 8192, 1024),
                    (2053, 1031, 509),
                    (256, 256, 65),
                    // 16-byte rows, few tiles, long K: CTA pairs with every tile split
                    // (the heuristic's few-tile rule, ledger #79)
                    (1000, 1000, 4008),
                ] {
                    v.push(bf(m, n, k, l));
                }
                for (i, o) in dtype_pairs() {
                    for &(m, n, k) in &[(129, 200, 131), (512, 384, 1000)] {
                        v.push(GemmProblem::new(m, n, k, l, i, o));
                    }
                }
            }
        }
    }
    // Operands and C that TMA cannot address, copied or read in place (the producer's cp.async
    // copies at each width), C stored by rows, in every output type, with alpha and beta.
    if suite == Suite::Full {
        for &(m, n, k, l) in IN_PLACE.iter().chain(&SHORT_K_IN_PLACE) {
            for (i, o) in dtype_pairs() {
                v.push(GemmProblem::new(m, n, k, l, i, o));
            }
            let mut p = GemmProblem::new(m, n, k, l, DType::F16, DType::F32);
            p.alpha = 0.75;
            p.beta = -0.5;
            v.push(p);
        }
    }
    // beta = 1 (C += alpha * A * B), which the TMA-store epilogue applies by adding its chunks
    // to C (TMA's reduce-add), and beta = -0.5, for which it loads C into its staging chunks
    // first: every layout and output type, one tile and several (a ragged last wave), C padded.
    if suite == Suite::Full {
        for beta in [1.0, -0.5] {
            for l in Layout::ALL {
                for &o in &DType::OUTPUTS {
                    for &(m, n, k) in &[(200, 136, 264), (1000, 1504, 700)] {
                        let mut p = padded(GemmProblem::new(m, n, k, l, DType::Bf16, o));
                        p.alpha = 0.75;
                        p.beta = beta;
                        p.ldc += 8;
                        v.push(p);
                    }
                }
            }
        }
    }
    // alpha/beta with a padded, aligned C and padded A/B leading dimensions.
    for l in Layout::ALL {
        let mut p = GemmProblem::new(200, 136, 264, l, DType::Bf16, DType::F32);
        p.alpha = 0.75;
        p.beta = -0.5;
        p.ldc += 8;
        p.lda += 16;
        p.ldb += 8;
        v.push(p);
    }
    v
}

/// `p` with each leading dimension rounded up to a multiple of 8 elements.
pub fn padded(mut p: GemmProblem) -> GemmProblem {
    let up = |x: usize| x.div_ceil(8) * 8;
    p.lda = up(p.lda);
    p.ldb = up(p.ldb);
    p.ldc = up(p.ldc);
    p
}

/// Every (input, output) dtype pair kiln supports (the MoE kernels' list, which is the GEMM's).
pub use crate::ops::moe::dtype_pairs;

#[cfg(test)]
mod tests {
    use super::*;

    /// The full suite's boundary problems, as the two loops wrote them before they were one.
    #[test]
    fn the_boundary_loop_draws_what_its_two_loops_drew() {
        let bf = |m, n, k, l| GemmProblem::new(m, n, k, l, DType::Bf16, DType::Bf16);
        let full = gemm_suite(Suite::Full);
        let per_layout = 2 * EDGES.len() * EDGES.len() + 6 + 2 * dtype_pairs().len();
        for (li, l) in Layout::ALL.into_iter().enumerate() {
            let mut want = Vec::new();
            for (i, (&m, &n)) in EDGES
                .iter()
                .flat_map(|m| EDGES.iter().map(move |n| (m, n)))
                .enumerate()
            {
                let k = if m == 4097 && n == 4097 {
                    251
                } else {
                    ODD_K[i % ODD_K.len()]
                };
                want.push(bf(m, n, k, l));
            }
            for (i, (&m, &n)) in EDGES
                .iter()
                .flat_map(|m| EDGES.iter().map(move |n| (m, n)))
                .enumerate()
            {
                let k = if m == 4097 && n == 4097 {
                    264
                } else {
                    ALIGNED_K[i % ALIGNED_K.len()]
                };
                want.push(padded(bf(m, n, k, l)));
            }
            let at = li * per_layout;
            assert_eq!(full[at..at + want.len()], want[..], "{l:?}");
        }
    }

    #[test]
    fn suites_are_valid_and_cover_the_boundaries() {
        for s in [Suite::Quick, Suite::Full] {
            let v = gemm_suite(s);
            assert!(v.iter().all(|p| p.validate().is_ok()));
            for l in Layout::ALL {
                assert!(v.iter().any(|p| p.layout == l));
            }
        }
        let full = gemm_suite(Suite::Full);
        for e in EDGES {
            assert!(full.iter().any(|p| p.m == e) && full.iter().any(|p| p.n == e));
        }
        assert!(full.iter().any(|p| p.beta != 0.0 && p.ldc > p.n));
        for o in DType::OUTPUTS {
            for beta in [1.0, -0.5] {
                assert!(full.iter().any(|p| p.beta == beta && p.output == o));
            }
        }
        // Rows that allow 2-, 4- and 8-byte copies only, in A (row-major: K) and B (row-major: N)
        for width in [2, 4, 8] {
            let w = |ld: usize| ((ld * 2) | 16) & ((ld * 2) | 16).wrapping_neg();
            assert!(full
                .iter()
                .any(|p| p.layout.a_k_major() && w(p.lda) == width));
            assert!(full
                .iter()
                .any(|p| p.layout.b_row_major() && w(p.ldb) == width));
        }
        // Boundary M/N with aligned rows exist for every layout, so the TMA rungs meet them.
        for l in Layout::ALL {
            assert!(full.iter().any(|p| p.layout == l
                && p.m == 127
                && p.lda % 8 == 0
                && p.ldb % 8 == 0
                && p.ldc % 8 == 0));
        }
    }

    /// The short-K shapes reach the in-place variants under the default dispatch (each width in
    /// A and in B, C by rows and by TMA), the quick suite's two among them.
    #[test]
    fn the_short_k_shapes_are_read_in_place_by_default() {
        use crate::ops::gemm::wgmma_tma_ws::plan;
        let env = crate::overrides::GemmOverrides::NONE;
        let mut seen = std::collections::HashSet::new();
        for &(m, n, k, l) in &SHORT_K_IN_PLACE {
            let p = GemmProblem::new(m, n, k, l, DType::Bf16, DType::Bf16);
            let pl = plan(&p, 132, None, &env);
            assert!(pl.copies.is_empty(), "{m}x{n}x{k} {l}: {:?}", pl.copies);
            for n in pl.notes.iter().filter(|n| n.contains("read in place")) {
                seen.insert((n.starts_with('A'), n.contains("8-byte"), pl.tma_epilogue));
            }
        }
        assert!(seen.len() >= 6, "{seen:?}");
        let quick = gemm_suite(Suite::Quick);
        assert!(SHORT_K_IN_PLACE[..2]
            .iter()
            .all(|&(m, n, k, _)| quick.iter().any(|p| (p.m, p.n, p.k) == (m, n, k))));
    }
}
