//! The CPU side of the suite on machines without a GPU: the float64 references run on the quick
//! shape suite against an independent plain triple loop, and timed.

use std::time::Instant;

use super::shapes::{gemm_suite, Suite};
use crate::error::{Error, Result};
use crate::ops::gemm::GemmProblem;
use crate::reference::{data::HostData, gemm::gemm_rows};

/// The straightforward definition, element by element, for cross-checking the reference.
fn triple_loop(
    p: &GemmProblem,
    a: &[f64],
    b: &[f64],
    c: Option<&[f64]>,
    m: usize,
    n: usize,
) -> f64 {
    let mut acc = 0.0;
    for k in 0..p.k {
        let av = if p.layout.a_row_major() {
            a[m * p.lda + k]
        } else {
            a[k * p.lda + m]
        };
        let bv = if p.layout.b_row_major() {
            b[k * p.ldb + n]
        } else {
            b[n * p.ldb + k]
        };
        acc += av * bv;
    }
    p.alpha as f64 * acc
        + if p.beta != 0.0 {
            p.beta as f64 * c.map(|c| c[m * p.ldc + n]).unwrap_or(0.0)
        } else {
            0.0
        }
}

/// Runs the reference over the quick suite, cross-checks sampled elements, returns a summary.
pub fn reference_selftest() -> Result<String> {
    let t = Instant::now();
    let problems = gemm_suite(Suite::Quick);
    let mut flops = 0.0;
    for (i, p) in problems.iter().enumerate() {
        let seed = 1000 + i as u64;
        let a = HostData::random(p.input, p.a_elems(), seed).to_f64();
        let b = HostData::random(p.input, p.b_elems(), seed + 1).to_f64();
        let c = (p.beta != 0.0).then(|| HostData::random(p.output, p.c_elems(), seed + 2).to_f64());
        let rows: Vec<usize> = (0..p.m).collect();
        let r = gemm_rows(p, &a, &b, c.as_deref(), &rows);
        flops += p.flops();
        for &(m, n) in &[(0, 0), (p.m - 1, p.n - 1), (p.m / 2, p.n / 3)] {
            let want = triple_loop(p, &a, &b, c.as_deref(), m, n);
            if (r[m][n] - want).abs() > 1e-9 * (1.0 + want.abs()) {
                return Err(Error::Verification(format!(
                    "the float64 reference disagrees with the triple loop on {} at ({m},{n})",
                    p.label()
                )));
            }
        }
    }
    let s = t.elapsed().as_secs_f64();
    Ok(format!("float64 GEMM reference: {} problems of the quick suite, cross-checked, {:.2} GFLOP in {:.2} s", problems.len(), flops / 1e9, s))
}
