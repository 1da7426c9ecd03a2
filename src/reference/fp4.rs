//! CPU references for the 4-bit kernels: an exact value rounded once to bf16, f16 or f32 (what
//! the dequantiser must write), packed bytes decoded to float64, and float64 dot products.

use half::{bf16, f16};

use crate::formats::{fp4, fp8::Fp8Format, mxfp4};
use crate::ops::fp4::Fp4Format;
use crate::ops::gemm::DType;

/// `p` rounded to f32 toward zero, its last bit set when that lost anything (round to odd):
/// rounding this once more to 8 or 11 significant bits is the single rounding of `p`.
pub fn to_f32_odd(p: f64) -> f32 {
    let t = p as f32;
    if t as f64 == p {
        return t;
    }
    let mut bits = t.to_bits();
    if t.is_infinite() || (t as f64).abs() > p.abs() {
        bits -= 1; // one step toward zero (infinity steps to the largest finite value)
    }
    f32::from_bits(bits | 1)
}

/// The bits of `p` rounded once to `out` (to nearest, ties to even; f32 bits in the low 32, the
/// 16-bit types in the low 16).
pub fn round_bits(p: f64, out: DType) -> u32 {
    match out {
        DType::F32 => (p as f32).to_bits(),
        DType::Bf16 => bf16::from_f32(to_f32_odd(p)).to_bits() as u32,
        DType::F16 => f16::from_f32(to_f32_odd(p)).to_bits() as u32,
    }
}

/// The value of `bits` (as [`round_bits`] lays them out) of `out`.
pub fn value_of(bits: u32, out: DType) -> f64 {
    match out {
        DType::F32 => f32::from_bits(bits) as f64,
        DType::Bf16 => bf16::from_bits(bits as u16).to_f64(),
        DType::F16 => f16::from_bits(bits as u16).to_f64(),
    }
}

/// The value of one scale code of `format` (e4m3 or E8M0), without the tensor scale.
pub fn scale_value(format: Fp4Format, code: u8) -> f64 {
    match format {
        Fp4Format::Nvfp4 => Fp8Format::E4m3.decode(code) as f64,
        Fp4Format::Mxfp4 => mxfp4::scale_value(code) as f64,
    }
}

/// Row `r` of a packed [rows, K] matrix decoded exactly into `out` (K values), times `g`.
pub fn decode_row(
    format: Fp4Format,
    codes: &[u8],
    scales: &[u8],
    k: usize,
    r: usize,
    g: f64,
    out: &mut [f64],
) {
    let block = format.block();
    let row = &codes[r * k / 2..(r + 1) * k / 2];
    let srow = &scales[r * k / block..(r + 1) * k / block];
    for (i, o) in out.iter_mut().enumerate().take(k) {
        let s = scale_value(format, srow[i / block]) * g;
        *o = fp4::decode(fp4::code_at(row, i)) as f64 * s;
    }
}

/// The dot product of two float64 rows.
pub fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The nearest of a type's neighbouring values by brute force over the bits around `p`.
    fn nearest_bf16(p: f64) -> u16 {
        let c = bf16::from_f32(p as f32).to_bits();
        let mut best = c;
        for b in [c.wrapping_sub(1), c, c.wrapping_add(1)] {
            let (d, db) = (
                (bf16::from_bits(b).to_f64() - p).abs(),
                (bf16::from_bits(best).to_f64() - p).abs(),
            );
            if d < db || (d == db && b % 2 == 0) {
                best = b;
            }
        }
        best
    }

    #[test]
    fn rounding_through_odd_f32_is_one_rounding() {
        // A bf16 midpoint plus a bit far below f32's precision: one rounding goes up, rounding
        // to f32 first (to nearest) would land on the midpoint and tie to even, down.
        let mid = 1.0 + 2f64.powi(-8); // halfway between 1 and 1 + 2^-7
        let p = mid + 2f64.powi(-40);
        assert_eq!(round_bits(p, DType::Bf16), 0x3F81);
        assert_eq!(bf16::from_f32(p as f32).to_bits(), 0x3F80); // the double rounding
        assert_eq!(round_bits(mid, DType::Bf16), 0x3F80); // an exact tie goes to even
        let mut x = 1e-30f64;
        while x < 1e30 {
            for p in [x, -x, x * (1.0 + 2f64.powi(-30))] {
                assert_eq!(round_bits(p, DType::Bf16) as u16, nearest_bf16(p), "{p}");
            }
            x *= 1.618;
        }
        assert_eq!(to_f32_odd(1e300), f32::MAX);
        assert_eq!(to_f32_odd(1e-300), f32::from_bits(1));
        assert_eq!(
            value_of(round_bits(70000.0, DType::F16), DType::F16),
            f64::INFINITY
        );
    }

    #[test]
    fn rows_decode_with_their_block_scales() {
        let codes = fp4::pack(&[
            0x1, 0xF, 0x7, 0x2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x3, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0, 0, 0,
        ]);
        let scales = [Fp8Format::E4m3.encode(2.0), Fp8Format::E4m3.encode(0.5)];
        let mut out = vec![0.0; 32];
        decode_row(Fp4Format::Nvfp4, &codes, &scales, 32, 0, 3.0, &mut out);
        assert_eq!(&out[..4], &[3.0, -36.0, 36.0, 6.0]);
        assert_eq!(out[16], 2.25);
        assert_eq!(dot(&out[..2], &[1.0, 1.0]), -33.0);
    }
}
