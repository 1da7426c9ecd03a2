//! MXFP4 on the CPU, exact: e2m1 values and one E8M0 (power-of-two) scale per 32 consecutive
//! elements along K, quantised with the OCP MX v1.0 recipe and dequantised to f64 or f32.

use super::fp4;
use super::fp4_blocks::{amax, check_buffers, finite_input};
use crate::error::{Error, Result};

/// Elements per block scale, along K.
pub const BLOCK: usize = 32;

/// e2m1's largest exponent: 6 = 1.5 x 2^2.
pub const E2M1_EMAX: i32 = 2;

/// E8M0's exponent bias, and its NaN code.
pub const E8M0_BIAS: i32 = 127;
pub const E8M0_NAN: u8 = 0xFF;

const NAME: &str = "mxfp4";

/// A [rows, K] matrix in MXFP4: codes [rows, K/2] (two e2m1 per byte, element 0 in the low
/// nibble, [`fp4::pack`]) and scales [rows, K/32] row-major as E8M0 codes: code c stands for
/// 2^(c - 127), 0 ..= 254 (2^-127 .. 2^127); 0xFF is E8M0's NaN and is refused.
#[derive(Debug, Clone, PartialEq)]
pub struct Mxfp4 {
    pub rows: usize,
    pub k: usize,
    /// [rows, K/2], two e2m1 codes per byte.
    pub codes: Vec<u8>,
    /// [rows, K/32] E8M0 codes.
    pub scales: Vec<u8>,
}

impl Mxfp4 {
    /// The exact values, row-major [rows, K].
    pub fn dequantize(&self) -> Result<Vec<f64>> {
        dequantize(&self.codes, &self.scales, self.rows, self.k)
    }
}

/// floor(log2(a)) of a positive finite f32, exactly; None for zero.
pub fn floor_log2(a: f32) -> Option<i32> {
    let bits = a.abs().to_bits();
    let field = (bits >> 23) as i32;
    match (field, bits & 0x007F_FFFF) {
        (0, 0) => None,
        // subnormal: 2^-149 times the mantissa, whose top set bit gives the binade
        (0, m) => Some(-149 + 31 - m.leading_zeros() as i32),
        _ => Some(field - 127),
    }
}

/// The E8M0 code of the scale of a block whose largest magnitude is `block_amax`.
pub fn block_scale(block_amax: f32) -> u8 {
    let e = floor_log2(block_amax).map_or(-E8M0_BIAS, |l| l - E2M1_EMAX);
    (e.clamp(-E8M0_BIAS, E8M0_BIAS) + E8M0_BIAS) as u8
}

/// The value of a (non-NaN) E8M0 code, 2^(code - 127), exact in f32 (2^-127 is subnormal).
pub fn scale_value(code: u8) -> f32 {
    debug_assert!(code != E8M0_NAN);
    let e = code as i32 - E8M0_BIAS;
    if e >= -126 {
        f32::from_bits(((e + 127) as u32) << 23)
    } else {
        f32::from_bits(1 << 22)
    }
}

/// The e2m1 code of `x` in a block with scale code `scale`.
pub fn quantize_one(x: f32, scale: u8) -> u8 {
    fp4::encode(x / scale_value(scale))
}

/// `x` ([rows, K] row-major, f32, bf16 or f16) in MXFP4 with the OCP MX v1.0 recipe (section
/// 6.3): the block's scale exponent is `floor(log2(amax_block)) - 2` (2 is e2m1's largest
/// exponent), clamped to E8M0's -127 ..= 127; an all-zero block takes -127. `floor(log2)` is read
/// from the f32's bits, exactly (a float `log2` rounds up just below powers of two). Each code is
/// `e2m1(x / 2^e)`: dividing by a power of two is exact unless the quotient falls below 2^-126,
/// where e2m1 rounds to zero anyway. As amax_block / 2^e lies in [4, 8), elements above 6 x 2^e
/// saturate to ±6, as the spec says. For finite f32 input the exponent never exceeds 125, so
/// every value dequantises exactly in f32 and in bf16.
pub fn quantize<T: Copy + Into<f32>>(x: &[T], rows: usize, k: usize) -> Result<Mxfp4> {
    let xs = finite_input(NAME, BLOCK, x, rows, k)?;
    let mut codes = Vec::with_capacity(rows * k);
    let mut scales = Vec::with_capacity(rows * k / BLOCK);
    for block in xs.chunks_exact(BLOCK) {
        let s = block_scale(amax(block));
        scales.push(s);
        codes.extend(block.iter().map(|&x| quantize_one(x, s)));
    }
    Ok(Mxfp4 {
        rows,
        k,
        codes: fp4::pack(&codes),
        scales,
    })
}

/// Checks packed MXFP4 buffers without decoding them: the lengths [rows, K/2] and [rows, K/32],
/// and no scale E8M0's NaN.
pub fn check(codes: &[u8], scales: &[u8], rows: usize, k: usize) -> Result<()> {
    check_buffers(NAME, BLOCK, rows, k, codes.len(), scales.len())?;
    if let Some(i) = scales.iter().position(|&s| s == E8M0_NAN) {
        return Err(Error::invalid(format!(
            "block scale {i} of the mxfp4 tensor is 0xff, E8M0's NaN: every scale must be a \
             power of two, codes 0 to 254"
        )));
    }
    Ok(())
}

/// The exact values of packed MXFP4 codes, row-major [rows, K].
pub fn dequantize(codes: &[u8], scales: &[u8], rows: usize, k: usize) -> Result<Vec<f64>> {
    let mut out = Vec::new();
    dequantize_into(codes, scales, rows, k, &mut out)?;
    Ok(out)
}

/// [`dequantize`] into `out` (resized), which a caller may reuse.
pub fn dequantize_into(
    codes: &[u8],
    scales: &[u8],
    rows: usize,
    k: usize,
    out: &mut Vec<f64>,
) -> Result<()> {
    check(codes, scales, rows, k)?;
    let scale = |s| scale_value(s) as f64;
    fp4::dequantize_blocks(codes, scales, BLOCK, scale, out);
    Ok(())
}

/// The values of packed MXFP4 codes in f32: exact for scales up to 2^125 (all the recipe
/// writes); a hand-made scale of 2^126 or more overflows ±4 and ±6 to infinity.
pub fn dequantize_f32(codes: &[u8], scales: &[u8], rows: usize, k: usize) -> Result<Vec<f32>> {
    let exact = dequantize(codes, scales, rows, k)?;
    Ok(exact.into_iter().map(|v| v as f32).collect())
}

#[cfg(test)]
#[path = "mxfp4_tests.rs"]
mod tests;
