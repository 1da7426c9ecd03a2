//! FP8 references on the CPU: the quantisation the GPU kernels do (bit for bit: the same amax,
//! scale and rounding, `crate::formats::scale`), dequantisation to exact float64 values, and the
//! float64 NT GEMM on dequantised operands that FP8 GEMM results are checked against.

use rayon::prelude::*;

use crate::formats::scale::{amax, dequantize_one, quantize_one, scale_for};
use crate::ops::fp8::quant::{Granularity, QuantSpec};

/// The rows x cols row-major matrix `x` (leading dimension `ldx`) quantised as `spec` says:
/// codes packed row-major (leading dimension `cols`) and the scales in
/// [`Granularity::scale_index`] order, exactly as `kernels/quant/fp8_quant.cu` writes them.
pub fn quantize(
    x: &[f32],
    rows: usize,
    cols: usize,
    ldx: usize,
    spec: QuantSpec,
) -> (Vec<u8>, Vec<f32>) {
    let g = spec.granularity;
    let at = |r: usize, c: usize| x[r * ldx + c];
    // amax per scale slot, over the elements that map to it
    let mut amaxes = vec![0.0f32; g.scale_count(rows, cols)];
    match g {
        Granularity::Tensor => {
            amaxes[0] = amax(
                (0..rows)
                    .flat_map(|r| (0..cols).map(move |c| (r, c)))
                    .map(|(r, c)| at(r, c)),
            );
        }
        _ => {
            for r in 0..rows {
                for c in 0..cols {
                    let i = g.scale_index(rows, cols, r, c);
                    amaxes[i] = amaxes[i].max(at(r, c).abs());
                }
            }
        }
    }
    let scales: Vec<f32> = amaxes
        .iter()
        .map(|&m| scale_for(m, spec.format, spec.recipe))
        .collect();
    let mut codes = vec![0u8; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            codes[r * cols + c] = quantize_one(
                at(r, c),
                scales[g.scale_index(rows, cols, r, c)],
                spec.format,
            );
        }
    }
    (codes, scales)
}

/// The exact values the codes stand for, row-major [rows, cols].
pub fn dequantize(
    codes: &[u8],
    scales: &[f32],
    rows: usize,
    cols: usize,
    spec: QuantSpec,
) -> Vec<f64> {
    let g = spec.granularity;
    let mut out = vec![0.0f64; rows * cols];
    for r in 0..rows {
        for c in 0..cols {
            out[r * cols + c] = dequantize_one(
                codes[r * cols + c],
                scales[g.scale_index(rows, cols, r, c)],
                spec.format,
            );
        }
    }
    out
}

/// C[m, n] = sum_k A[m, k] * B[n, k] in float64 for the requested rows of C: A is [M, K] and B
/// [N, K], both row-major (K contiguous: the NT GEMM). Each returned row holds N values.
pub fn gemm_nt_rows(a: &[f64], b: &[f64], n: usize, k: usize, rows: &[usize]) -> Vec<Vec<f64>> {
    rows.par_iter()
        .map(|&m| {
            let arow = &a[m * k..(m + 1) * k];
            (0..n)
                .map(|j| {
                    let brow = &b[j * k..(j + 1) * k];
                    arow.iter().zip(brow).map(|(x, y)| x * y).sum()
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::formats::{Fp8Format, ScaleRecipe};

    fn data(rows: usize, cols: usize) -> Vec<f32> {
        (0..rows * cols)
            .map(|i| ((i * 7919 % 1013) as f32 - 506.0) * 0.0137 * (1.0 + (i / cols) as f32))
            .collect()
    }

    #[test]
    fn each_group_reaches_the_largest_code_and_dequantises_close() {
        let (rows, cols) = (130, 300);
        let x = data(rows, cols);
        for g in Granularity::ALL {
            for recipe in ScaleRecipe::ALL {
                for format in Fp8Format::ALL {
                    let spec = QuantSpec {
                        format,
                        granularity: g,
                        recipe,
                    };
                    let (codes, scales) = quantize(&x, rows, cols, cols, spec);
                    assert_eq!(scales.len(), g.scale_count(rows, cols));
                    let deq = dequantize(&codes, &scales, rows, cols, spec);
                    // relative error per element at most half an ulp of the format (2^-4 e4m3,
                    // 2^-3 e5m2) of the group's range, for values that are not tiny
                    let ulp = 2f64.powi(-(format.mantissa_bits() as i32) - 1);
                    for r in 0..rows {
                        for c in 0..cols {
                            let (v, d) = (x[r * cols + c] as f64, deq[r * cols + c]);
                            let s = scales[g.scale_index(rows, cols, r, c)] as f64;
                            let tol = (v.abs() * ulp).max(s * format.min_subnormal() as f64);
                            assert!(
                                (v - d).abs() <= tol * 1.0001,
                                "{spec} ({r},{c}): {v} vs {d}"
                            );
                        }
                    }
                    if recipe == ScaleRecipe::Fp32 {
                        // the group's largest element lands on the largest code
                        let top = codes
                            .iter()
                            .filter(|&&q| q & 0x7F == format.max_code())
                            .count();
                        assert!(top >= scales.len(), "{spec}: {top} codes at the top");
                    } else {
                        assert!(scales
                            .iter()
                            .all(|&s| crate::formats::scale::ue8m0_code(s).is_some()));
                    }
                }
            }
        }
    }

    #[test]
    fn the_nt_reference_multiplies_rows_by_rows() {
        let a = [1.0, 2.0, 3.0, 4.0]; // 2 x 2
        let b = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0]; // 3 x 2
        assert_eq!(
            gemm_nt_rows(&a, &b, 3, 2, &[0, 1]),
            vec![vec![1.0, 2.0, 3.0], vec![3.0, 4.0, 7.0]]
        );
    }
}
