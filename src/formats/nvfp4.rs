//! NVFP4 on the CPU, exact: e2m1 values, one e4m3 scale per 16 consecutive elements along K and
//! an fp32 tensor scale, quantised with NVIDIA's recipe and dequantised to f64 or f32.

use super::fp4;
use super::fp4_blocks::{amax, check_buffers, finite_input};
use super::fp8::Fp8Format;
use crate::error::{Error, Result};

/// Elements per block scale, along K.
pub const BLOCK: usize = 16;

/// The tensor amax that gives a tensor scale of 1: the largest e2m1 times the largest e4m3.
pub const TENSOR_RANGE: f32 = fp4::MAX * 448.0;

const NAME: &str = "nvfp4";

/// A [rows, K] matrix in NVFP4, in the standard layout users hand in: codes [rows, K/2] (two
/// e2m1 per byte, element 0 in the low nibble, [`fp4::pack`]), block scales [rows, K/16]
/// row-major as e4m3 codes, and one f32 tensor scale. Block scales are unsigned e4m3 (cuBLASLt's
/// `UE4M3`): a code with its sign bit set, or the NaN code 0x7F, is refused.
///
/// An e2m1 value times its e4m3 block scale is exact in bf16 and f16 (tested over all pairs), so
/// a kernel may dequantise weights to bf16 and get exactly `e2m1 x s`. The f32 tensor scale
/// breaks that (it carries up to 24 significant bits): it belongs in the epilogue, applied to
/// the fp32 sum.
#[derive(Debug, Clone, PartialEq)]
pub struct Nvfp4 {
    pub rows: usize,
    pub k: usize,
    /// [rows, K/2], two e2m1 codes per byte.
    pub codes: Vec<u8>,
    /// [rows, K/16] e4m3 codes.
    pub scales: Vec<u8>,
    pub tensor_scale: f32,
}

impl Nvfp4 {
    /// The exact values, row-major [rows, K].
    pub fn dequantize(&self) -> Result<Vec<f64>> {
        dequantize(
            &self.codes,
            &self.scales,
            self.tensor_scale,
            self.rows,
            self.k,
        )
    }
}

/// The tensor scale of a tensor whose largest magnitude is `amax`.
pub fn tensor_scale(amax: f32) -> f32 {
    (amax / TENSOR_RANGE).max(f32::MIN_POSITIVE)
}

/// The e4m3 code of the scale of a block whose largest magnitude is `block_amax`.
pub fn block_scale(block_amax: f32, tensor_scale: f32) -> u8 {
    Fp8Format::E4m3.encode(block_amax / fp4::MAX / tensor_scale)
}

/// The e2m1 code of `x` in a block with scale code `scale` under `tensor_scale`.
pub fn quantize_one(x: f32, scale: u8, tensor_scale: f32) -> u8 {
    let s = Fp8Format::E4m3.decode(scale);
    if s == 0.0 {
        return 0;
    }
    fp4::encode(x / (s * tensor_scale))
}

/// `x` ([rows, K] row-major, f32, bf16 or f16) in NVFP4 with NVIDIA's recipe, each step one f32
/// operation rounded to nearest (what a kernel must repeat to agree bit for bit):
/// - tensor scale `g = max(amax_tensor / 2688, 2^-126)` (2688 = 6 x 448, the largest e2m1 value
///   times the largest e4m3; the floor keeps an all-zero tensor's scale a normal number);
/// - block scale `s = e4m3(amax_block / 6 / g)` (two divisions, then the saturating e4m3 RNE);
/// - code `e2m1(x / (s * g))` (a product, a division, then the saturating e2m1 RNE); a block
///   whose scale is zero holds code 0 everywhere (its values all dequantise to zero).
pub fn quantize<T: Copy + Into<f32>>(x: &[T], rows: usize, k: usize) -> Result<Nvfp4> {
    let xs = finite_input(NAME, BLOCK, x, rows, k)?;
    let g = tensor_scale(amax(&xs));
    Ok(quantize_finite(&xs, rows, k, g))
}

/// `x` in NVFP4 under a given tensor scale (a calibrated one, or one shared by several
/// tensors): blocks beyond its range saturate, scales at 448 and values at ±6.
pub fn quantize_with_tensor_scale<T: Copy + Into<f32>>(
    x: &[T],
    rows: usize,
    k: usize,
    tensor_scale: f32,
) -> Result<Nvfp4> {
    check_tensor_scale(tensor_scale)?;
    let xs = finite_input(NAME, BLOCK, x, rows, k)?;
    Ok(quantize_finite(&xs, rows, k, tensor_scale))
}

fn quantize_finite(xs: &[f32], rows: usize, k: usize, g: f32) -> Nvfp4 {
    let mut codes = Vec::with_capacity(rows * k);
    let mut scales = Vec::with_capacity(rows * k / BLOCK);
    for block in xs.chunks_exact(BLOCK) {
        let s = block_scale(amax(block), g);
        scales.push(s);
        codes.extend(block.iter().map(|&x| quantize_one(x, s, g)));
    }
    Nvfp4 {
        rows,
        k,
        codes: fp4::pack(&codes),
        scales,
        tensor_scale: g,
    }
}

/// Checks packed NVFP4 buffers without decoding them: the lengths [rows, K/2] and [rows, K/16],
/// the tensor scale, and every block scale a non-negative finite e4m3 code.
pub fn check(codes: &[u8], scales: &[u8], tensor_scale: f32, rows: usize, k: usize) -> Result<()> {
    check_buffers(NAME, BLOCK, rows, k, codes.len(), scales.len())?;
    check_tensor_scale(tensor_scale)?;
    if let Some(i) = scales.iter().position(|&s| s & 0x80 != 0 || s == 0x7F) {
        return Err(Error::invalid(format!(
            "block scale {i} of the nvfp4 tensor is the e4m3 code {:#04x}, {}: NVFP4 block \
             scales are non-negative finite e4m3 (UE4M3)",
            scales[i],
            Fp8Format::E4m3.decode(scales[i])
        )));
    }
    Ok(())
}

/// The exact values of packed NVFP4 codes, row-major [rows, K] (each is a product of at most
/// 30 significant bits, so f64 holds it exactly; the block's scale times the tensor scale is
/// formed first, also exactly).
pub fn dequantize(
    codes: &[u8],
    scales: &[u8],
    tensor_scale: f32,
    rows: usize,
    k: usize,
) -> Result<Vec<f64>> {
    let mut out = Vec::new();
    dequantize_into(codes, scales, tensor_scale, rows, k, &mut out)?;
    Ok(out)
}

/// [`dequantize`] into `out` (resized), which a caller may reuse.
pub fn dequantize_into(
    codes: &[u8],
    scales: &[u8],
    tensor_scale: f32,
    rows: usize,
    k: usize,
    out: &mut Vec<f64>,
) -> Result<()> {
    check(codes, scales, tensor_scale, rows, k)?;
    let g = tensor_scale as f64;
    let scale = |s| Fp8Format::E4m3.decode(s) as f64 * g;
    fp4::dequantize_blocks(codes, scales, BLOCK, scale, out);
    Ok(())
}

/// The values of packed NVFP4 codes in f32, each the exact value rounded once.
pub fn dequantize_f32(
    codes: &[u8],
    scales: &[u8],
    tensor_scale: f32,
    rows: usize,
    k: usize,
) -> Result<Vec<f32>> {
    let exact = dequantize(codes, scales, tensor_scale, rows, k)?;
    Ok(exact.into_iter().map(|v| v as f32).collect())
}

/// Refuses a tensor scale that is not a positive normal f32.
fn check_tensor_scale(g: f32) -> Result<()> {
    if g.is_finite() && g >= f32::MIN_POSITIVE {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "the nvfp4 tensor scale is {g}: it must be a finite f32 of at least 2^-126 (the recipe \
         uses amax / 2688, floored there)"
    )))
}

#[cfg(test)]
#[path = "nvfp4_tests.rs"]
mod tests;
