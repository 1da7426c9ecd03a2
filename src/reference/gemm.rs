//! Float64 GEMM reference: C = alpha * op(A) * op(B) + beta * C for any layout and stride,
//! computed for all rows or a chosen subset (large shapes), in parallel.

use rayon::prelude::*;

use crate::ops::gemm::GemmProblem;

/// Reference rows of C: for each requested row `m`, the `n` exact values alpha*(A·B)[m,:] +
/// beta*c_in[m,:]. `a`, `b`, `c_in` are the stored elements (as f64) with `p`'s strides.
pub fn gemm_rows(
    p: &GemmProblem,
    a: &[f64],
    b: &[f64],
    c_in: Option<&[f64]>,
    rows: &[usize],
) -> Vec<Vec<f64>> {
    // Gather B as column-contiguous (n-major over k) once so each row's dot products stream.
    let mut bt = vec![0.0f64; p.n * p.k];
    for n in 0..p.n {
        for k in 0..p.k {
            let idx = if p.layout.b_row_major() {
                k * p.ldb + n
            } else {
                n * p.ldb + k
            };
            bt[n * p.k + k] = b[idx];
        }
    }
    rows.par_iter()
        .map(|&m| {
            let arow: Vec<f64> = (0..p.k)
                .map(|k| {
                    a[if p.layout.a_row_major() {
                        m * p.lda + k
                    } else {
                        k * p.lda + m
                    }]
                })
                .collect();
            (0..p.n)
                .map(|n| {
                    let col = &bt[n * p.k..(n + 1) * p.k];
                    let dot: f64 = arow.iter().zip(col).map(|(x, y)| x * y).sum();
                    let mut v = p.alpha as f64 * dot;
                    if p.beta != 0.0 {
                        v += p.beta as f64 * c_in.map(|c| c[m * p.ldc + n]).unwrap_or(0.0);
                    }
                    v
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::{DType, Layout};

    #[test]
    fn small_product_in_every_layout() {
        // A = [[1,2,3],[4,5,6]] (2x3), B = [[1,0],[0,1],[1,1]] (3x2) => AB = [[4,5],[10,11]]
        let a_rm = [1., 2., 3., 4., 5., 6.];
        let a_cm = [1., 4., 2., 5., 3., 6.];
        let b_rm = [1., 0., 0., 1., 1., 1.];
        let b_cm = [1., 0., 1., 0., 1., 1.];
        for layout in Layout::ALL {
            let p = GemmProblem::new(2, 2, 3, layout, DType::Bf16, DType::F32);
            let a: &[f64] = if layout.a_row_major() { &a_rm } else { &a_cm };
            let b: &[f64] = if layout.b_row_major() { &b_rm } else { &b_cm };
            assert_eq!(
                gemm_rows(&p, a, b, None, &[0, 1]),
                vec![vec![4., 5.], vec![10., 11.]],
                "{layout}"
            );
        }
    }

    #[test]
    fn alpha_beta_and_padded_ldc() {
        let mut p = GemmProblem::new(1, 2, 1, Layout::RC, DType::Bf16, DType::F32);
        p.alpha = 2.0;
        p.beta = 0.5;
        p.ldc = 3;
        let r = gemm_rows(&p, &[3.0], &[1.0, 2.0], Some(&[10.0, 20.0, 99.0]), &[0]);
        assert_eq!(r, vec![vec![2.0 * 3.0 + 5.0, 2.0 * 6.0 + 10.0]]);
    }
}
