//! float64 references of RMSNorm and the rotary embedding, and the per-element error bounds
//! that follow from the storage formats' rounding.

use crate::ops::gemm::DType;

/// The unit roundoff of a storage type: half its spacing at 1 (bf16 8 significant bits, f16 11,
/// f32 24).
pub fn unit_roundoff(d: DType) -> f64 {
    match d {
        DType::Bf16 => 2f64.powi(-8),
        DType::F16 => 2f64.powi(-11),
        DType::F32 => 2f64.powi(-24),
    }
}

/// The absolute error a rounding adds below the format's normal range (half the subnormal
/// spacing: f16 2^-25; bf16's and f32's are below any value these checks meet).
pub fn subnormal_slack(d: DType) -> f64 {
    match d {
        DType::F16 => 2f64.powi(-25),
        DType::Bf16 => 2f64.powi(-134),
        DType::F32 => 2f64.powi(-150),
    }
}

/// Relative error of the kernel's f32 statistics: a sum of squares of at most 64 terms per
/// thread then a tree of at most 9 levels (73 f32 roundings of 2^-24 at worst) and rsqrtf's
/// 2 ulp: under 1e-5.
pub const RSTD_REL: f64 = 1e-5;

/// x · rsqrt(mean(x²) + eps) · w, exactly.
pub fn rms_norm_row(x: &[f64], w: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let r = 1.0 / (ms + eps).sqrt();
    x.iter().zip(w).map(|(v, w)| v * r * w).collect()
}

/// The bound on |out − ref| of one RMSNorm output (`reference` its exact value): the kernel
/// rounds x·rstd and then the product with w (two roundings of u), with rstd within
/// [`RSTD_REL`].
pub fn rms_norm_bound(d: DType, reference: f64) -> f64 {
    let u = unit_roundoff(d);
    ((1.0 + u) * (1.0 + u) * (1.0 + RSTD_REL) - 1.0) * reference.abs() + 2.0 * subnormal_slack(d)
}

/// The bound on the stored residual `res + x` (one f32 addition of two 16-bit values, then
/// one rounding).
pub fn residual_bound(d: DType, reference: f64) -> f64 {
    (unit_roundoff(d) + 2f64.powi(-24)) * reference.abs() + subnormal_slack(d)
}

/// The (first, second) element of each rotated pair of a head's first `rot` dims:
/// (i, i + rot/2) for rotate_half, (2i, 2i + 1) interleaved.
pub fn rope_pairs(rot: usize, interleaved: bool) -> Vec<(usize, usize)> {
    (0..rot / 2)
        .map(|i| {
            if interleaved {
                (2 * i, 2 * i + 1)
            } else {
                (i, i + rot / 2)
            }
        })
        .collect()
}

/// One rotated pair, exactly: a' = a cos[a] − b sin[a], b' = b cos[b] + a sin[b]; with the
/// bound on each output (f32 products and sum, 3 roundings of 2^-24 on the terms' magnitude,
/// then one rounding to `d`).
pub fn rope_pair(d: DType, a: f64, b: f64, ca: f64, sa: f64, cb: f64, sb: f64) -> [(f64, f64); 2] {
    let f32_err = |t1: f64, t2: f64| 3.0 * 2f64.powi(-24) * (t1.abs() + t2.abs());
    let (ra, rb) = (a * ca - b * sa, b * cb + a * sb);
    let u = unit_roundoff(d);
    let bound = |r: f64, e: f64| u * r.abs() + (1.0 + u) * e + subnormal_slack(d);
    [
        (ra, bound(ra, f32_err(a * ca, b * sa))),
        (rb, bound(rb, f32_err(b * cb, a * sb))),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rms_norm_of_a_constant_row_is_the_weight() {
        let y = rms_norm_row(&[3.0; 4], &[1.0, 2.0, -1.0, 0.5], 0.0);
        for (a, b) in y.iter().zip([1.0, 2.0, -1.0, 0.5]) {
            assert!((a - b).abs() < 1e-15);
        }
    }

    #[test]
    fn rope_pairs_follow_each_convention() {
        assert_eq!(rope_pairs(8, false), vec![(0, 4), (1, 5), (2, 6), (3, 7)]);
        assert_eq!(rope_pairs(4, true), vec![(0, 1), (2, 3)]);
        // a quarter turn maps (1, 0) to (0, 1)
        let [(a, _), (b, _)] = rope_pair(DType::Bf16, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0);
        assert_eq!((a, b), (0.0, 1.0));
    }

    #[test]
    fn bounds_are_the_formats_roundings() {
        let b = rms_norm_bound(DType::Bf16, 1.0);
        assert!(b > 2.0 * 2f64.powi(-8) && b < 2.1 * 2f64.powi(-8));
        assert!(residual_bound(DType::F16, 1.0) < 2f64.powi(-10));
    }
}
