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
        }
        Suite::Full => {
            for l in Layout::ALL {
                let mut ki = 0;
                for &m in &EDGES {
                    for &n in &EDGES {
                        // 4097 x 4097 with a long K is slow on the naive rung; keep K moderate there.
                        let k = if m == 4097 && n == 4097 {
                            251
                        } else {
                            ODD_K[ki % ODD_K.len()]
                        };
                        ki += 1;
                        v.push(bf(m, n, k, l));
                    }
                }
                // The same boundaries with every leading dimension padded to a multiple of 8
                // elements, as frameworks allocate: the aligned rungs must cover them too.
                let mut ki = 0;
                for &m in &EDGES {
                    for &n in &EDGES {
                        let k = if m == 4097 && n == 4097 {
                            264
                        } else {
                            ALIGNED_K[ki % ALIGNED_K.len()]
                        };
                        ki += 1;
                        v.push(padded(bf(m, n, k, l)));
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

/// Every (input, output) dtype pair kiln supports.
pub fn dtype_pairs() -> Vec<(DType, DType)> {
    DType::INPUTS
        .iter()
        .flat_map(|&i| DType::OUTPUTS.iter().map(move |&o| (i, o)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // Boundary M/N with aligned rows exist for every layout, so the TMA rungs meet them.
        for l in Layout::ALL {
            assert!(full.iter().any(|p| p.layout == l
                && p.m == 127
                && p.lda % 8 == 0
                && p.ldb % 8 == 0
                && p.ldc % 8 == 0));
        }
    }
}
