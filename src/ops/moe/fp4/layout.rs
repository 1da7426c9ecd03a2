//! The bit layout of prepacked 4-bit weights, mirrored by `kernels/moe/fp4_weights.cuh`: where
//! each code of an atom goes, how a code word decodes to a bf16 or f16 pair, and the scale bytes.

use super::Fp4Format;
use crate::formats::Fp8Format;

/// Weight rows and K of one atom (one consumer warpgroup's stage).
pub const ATOM_ROWS: usize = 64;
pub const ATOM_K: usize = 64;
/// Code bytes of an atom: 128 threads x 16 bytes.
pub const CODE_BYTES: usize = 2048;
/// Output columns of a kernel tile (two consumers of 64): prepacked N is rounded up to it.
pub const TILE_N: usize = 128;

/// Rotations (left) that bring pair p's magnitudes to bf16 bits 8:6 / 24:22 and its signs to
/// bits 15 / 31: four translates that tile the 32 bits of a word.
pub const MAG_ROT: [u32; 4] = [0, 3, 6, 9];
pub const SIGN_ROT: [u32; 4] = [4, 3, 6, 5];

/// Scale bytes of an atom: 64 rows x 4 (NVFP4, per 16) or 2 (MXFP4, per 32).
pub fn scale_bytes(f: Fp4Format) -> usize {
    ATOM_ROWS * ATOM_K / f.block()
}

/// Bytes of one atom: codes, then scales.
pub fn atom_bytes(f: Fp4Format) -> usize {
    CODE_BYTES + scale_bytes(f)
}

/// The weight row (of the atom's 64) and k (of its 64) of the first element of pair p of word j
/// of thread t: the m64nNk16 A fragment of warp t/32, lane t%32, k16 step j. The pair's second
/// element is at k + 1.
pub fn pair_position(t: usize, j: usize, p: usize) -> (usize, usize) {
    let (w, lane) = (t / 32, t % 32);
    let (g, q) = (lane / 4, lane % 4);
    (16 * w + g + 8 * (p & 1), 16 * j + 8 * (p >> 1) + 2 * q)
}

/// Sets the bits of code `c` (4 bits) as element `half` (0 first, 1 second) of pair p in `word`.
pub fn place(word: &mut u32, p: usize, half: usize, c: u8) {
    for i in 0..3 {
        if c >> i & 1 != 0 {
            let target = 6 + i as u32 + 16 * half as u32;
            *word |= 1 << ((target + 32 - MAG_ROT[p]) % 32);
        }
    }
    if c & 0x8 != 0 {
        let target = 15 + 16 * half as u32;
        *word |= 1 << ((target + 32 - SIGN_ROT[p]) % 32);
    }
}

/// Pair p of `word` as the kernel decodes it: two 16-bit patterns, value x 2^-126 as bf16
/// (`bf16`) or value x 2^-14 as f16.
pub fn decode_pair(word: u32, p: usize, bf16: bool) -> u32 {
    let mag = MAG_ROT[p] + if bf16 { 0 } else { 3 };
    let mag_mask = if bf16 { 0x01C0_01C0 } else { 0x0E00_0E00 };
    (word.rotate_left(mag) & mag_mask) | (word.rotate_left(SIGN_ROT[p]) & 0x8000_8000)
}

/// Byte of an NVFP4 block scale: the bf16 of s x 2^118 as (exponent - 236) << 3 | mantissa,
/// and whether the block is zero (scale 0: the prepack zeroes its codes, byte 0).
pub fn nvfp4_scale_byte(code: u8) -> (u8, bool) {
    let s = Fp8Format::E4m3.decode(code);
    if s == 0.0 {
        return (0, true);
    }
    // s <= 448 < 2^9, so s x 2^118 < 2^127 is a normal f32 with at most 3 mantissa bits
    let bits = (s * 2f32.powi(118)).to_bits();
    let exponent = bits >> 23;
    debug_assert!(bits & 0xF_FFFF == 0 && (236..=253).contains(&exponent));
    ((((exponent - 236) << 3) | ((bits >> 20) & 7)) as u8, false)
}

/// The 16-bit multiplier pattern the kernel builds from a scale byte (`fp4_multipliers`, two to a word).
pub fn multiplier_bits(f: Fp4Format, byte: u8, bf16: bool) -> u16 {
    let b = byte as u32;
    let bits = match (f, bf16) {
        (Fp4Format::Nvfp4, true) => b * 16 + 0x7600,
        (Fp4Format::Nvfp4, false) => b * 128 + 0x3000,
        (Fp4Format::Mxfp4, true) => b * 128,
        // byte - 224 for the bytes f16 takes (225..=254), as a mask: a zero block's 0 stays 0
        (Fp4Format::Mxfp4, false) => (b & 31) * 1024,
    };
    bits as u16
}

/// The word of two multipliers the kernel builds at once from scale bytes `lo` and `hi`
/// (`fp4_multipliers`): lo's in bits 15:0, hi's in 31:16, the arithmetic done on the whole word
/// as the kernel does it, so a carry across the halves would show.
pub fn multiplier_pair_bits(f: Fp4Format, lo: u8, hi: u8, bf16: bool) -> u32 {
    let b = lo as u32 | (hi as u32) << 16;
    match (f, bf16) {
        (Fp4Format::Nvfp4, true) => b.wrapping_mul(16).wrapping_add(0x7600_7600),
        (Fp4Format::Nvfp4, false) => b.wrapping_mul(128).wrapping_add(0x3000_3000),
        (Fp4Format::Mxfp4, true) => b.wrapping_mul(128),
        (Fp4Format::Mxfp4, false) => (b & 0x001F_001F) * 1024,
    }
}

/// A 16-bit pattern as the value it stands for in bf16 or f16.
pub fn half_value(bits: u16, bf16: bool) -> f64 {
    if bf16 {
        f32::from_bits((bits as u32) << 16) as f64
    } else {
        half::f16::from_bits(bits).to_f64()
    }
}

/// The smallest MXFP4 scale byte (s + 254 - max s of the matrix) whose products stay exact: in
/// bf16 0.5 x 2^(byte - 253) must be at least 2^-126; in f16 a multiple of 2^-24 (and the f16
/// multiplier's exponent byte - 224 positive).
pub fn mxfp4_min_byte(bf16: bool) -> u8 {
    if bf16 {
        128
    } else {
        230
    }
}
