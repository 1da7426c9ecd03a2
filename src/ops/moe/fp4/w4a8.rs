//! The W4A8 prepack: MXFP4 expert weights for the FP8 tensor cores (`kernels/moe/
//! fp4_experts_w4a8.cu`), where they meet e4m3 activations.
//!
//! Every e2m1 value times a power of two 2^u is exact in e4m3 for u in -8..=6 (0.5 x 2^-8 is
//! e4m3's smallest subnormal, 6 x 2^6 = 384 is below its 448). So each row of an expert gets a
//! reference exponent, c_ref = its largest block scale code - 6, and each block the offset
//! u = code - c_ref; the kernel turns a block's codes into e4m3 bytes through a table of the
//! eight magnitudes times 2^u (one byte permute per four codes), and the epilogue multiplies the
//! row's fp32 sum by 2^(c_ref - 127). A row whose non-zero blocks span more than 2^14 has no
//! exact e4m3 form: it is refused (the bf16-activation path takes it).
//!
//! Layout: per expert, 64-row blocks (N rounded up to 128; the SwiGLU's W1 and W3 blocks of each
//! 64 output columns alternate, as in [`super::prepack`]), each a run of K/128 atoms (K rounded
//! up to 128). An atom is 64 rows x 128 k: 4096 bytes of codes, then per row four bytes, its
//! blocks' table offsets 8 (u + 8). Thread t of a consumer warpgroup decodes row t / 2, k
//! 64 (t % 2) .. + 63: eight words, word i (k 8i ..) at byte 2048 (i / 4) + 16 t + 4 (i % 4). A
//! word holds eight codes: magnitudes (3 bits) in nibbles 0..7, and the signs of codes 0..3 at
//! bits 8j + 7, of codes 4..7 at bits 8j + 3 (the nibbles' free top bits), so that
//! prmt(table, w & 0x7777) | (w & 0x80808080) is the first four e4m3 bytes and the same of
//! (w >> 16, w << 4) the next four.
//! (The register forms' second order of the code words, their A fragments', went with them on
//! 2026-12-01, ledger F190.)

use rayon::prelude::*;

use super::layout::{ATOM_ROWS, TILE_N};
use super::{Fp4Format, Fp4Weights};
use crate::error::{Error, Result};
use crate::formats::{mxfp4, Fp8Format};

/// K of one atom: one 128-deep promotion block of the FP8 tensor cores.
pub const W4A8_K: usize = 128;
pub const W4A8_CODE_BYTES: usize = 4096;
pub const W4A8_ATOM_BYTES: usize = W4A8_CODE_BYTES + ATOM_ROWS * 4;
/// The block offsets e4m3 holds exactly, and the table index of u = 0 (zero blocks use it).
pub const U_MIN: i32 = -8;
pub const U_MAX: i32 = 6;
const ZERO_BLOCK: u8 = (-U_MIN * 8) as u8;
/// A byte that, filling an expert's prepacked weights, makes every table lookup hit the kernel's
/// NaN table (offset 120, which no block names): a stray read of such an expert gives NaN.
pub const POISON: u8 = 120;

/// The mask the kernel puts on a block's offset byte before it reads the table there
/// (`LUT_MASK` in `kernels/moe/fp4_experts_w4a8.cu`): eight bytes times 0..15.
pub const LUT_MASK: u8 = 0x78;

/// The byte offset of the table the kernel reads for a block whose offset byte is `byte`: a
/// multiple of 8 inside the 16 tables for any byte (the 8-byte shared-memory load must be
/// aligned; random weight bytes with an unmasked offset faulted with a misaligned address on
/// an H200 at 7eb2e34), equal to `byte` for every byte the prepack writes.
pub fn table_offset(byte: u8) -> u32 {
    (byte & LUT_MASK) as u32
}

/// The e4m3 byte of magnitude code m (0..8) times 2^u: the kernel's table.
pub fn table_byte(m: u8, u: i32) -> u8 {
    Fp8Format::E4m3.encode(crate::formats::fp4::decode(m & 7) * 2f32.powi(u))
}

/// Places code `c` (4 bits) as element j (0..8) of a word.
fn place(word: &mut u32, j: usize, c: u8) {
    *word |= ((c & 7) as u32) << (4 * j);
    if c & 8 != 0 {
        *word |= 1 << if j < 4 { 8 * j + 7 } else { 8 * (j - 4) + 3 };
    }
}

/// The e4m3 bytes of a word's eight codes under table offset `u` (the kernel's decode).
pub fn decode_word(word: u32, u: i32) -> [u8; 8] {
    let mut out = [0u8; 8];
    for (j, o) in out.iter_mut().enumerate() {
        let mag = ((word >> (4 * j)) & 7) as u8;
        let sign = word >> if j < 4 { 8 * j + 7 } else { 8 * (j - 4) + 3 } & 1;
        *o = table_byte(mag, u) | (sign as u8) << 7;
    }
    out
}

/// Byte offset in an atom of the word holding codes k4 .. k4 + 3 of row r (k4 a multiple of 4
/// under 128: thread 2r + k4 / 64's word (k4 % 64) / 8), and whether they are its codes 4..7.
pub fn word_at(r: usize, k4: usize) -> (usize, bool) {
    let (t, i) = (2 * r + k4 / 64, (k4 % 64) / 8);
    (2048 * (i / 4) + 16 * t + 4 * (i % 4), k4 % 8 >= 4)
}

/// MXFP4 weights in the W4A8 layout, with each row's epilogue factor.
#[derive(Debug, Clone, PartialEq)]
pub struct W4a8Prepacked {
    pub experts: usize,
    pub n: usize,
    pub k: usize,
    pub swiglu: bool,
    pub bytes: Vec<u8>,
    /// [E][halves][N rounded up to 128]: 2^(c_ref - 127) of each row (1 for padding rows).
    pub escale: Vec<f32>,
}

impl W4a8Prepacked {
    pub fn n_pad(&self) -> usize {
        self.n.div_ceil(TILE_N) * TILE_N
    }
    pub fn katoms(&self) -> usize {
        self.k.div_ceil(W4A8_K)
    }
    pub fn halves(&self) -> usize {
        if self.swiglu {
            2
        } else {
            1
        }
    }
    pub fn expert_bytes(&self) -> usize {
        self.halves() * self.n_pad() / ATOM_ROWS * self.katoms() * W4A8_ATOM_BYTES
    }

    /// Element (row, kk) of half `half` of expert e as the kernel computes it: the e4m3 byte its
    /// table gives, times the row's factor. For tests.
    pub fn value(&self, e: usize, half: usize, row: usize, kk: usize) -> f64 {
        let block = if self.swiglu {
            2 * (row / ATOM_ROWS) + half
        } else {
            row / ATOM_ROWS
        };
        let atom =
            e * self.expert_bytes() + (block * self.katoms() + kk / W4A8_K) * W4A8_ATOM_BYTES;
        let (r, k) = (row % ATOM_ROWS, kk % W4A8_K);
        let (w, hi) = word_at(r, k & !3);
        let o = atom + w;
        let word = u32::from_le_bytes(self.bytes[o..o + 4].try_into().expect("4 bytes"));
        let u =
            table_offset(self.bytes[atom + W4A8_CODE_BYTES + 4 * r + k / 32]) as i32 / 8 + U_MIN;
        let byte = decode_word(word, u)[4 * hi as usize + k % 4];
        let f = self.escale[(e * self.halves() + half) * self.n_pad() + row];
        Fp8Format::E4m3.decode(byte) as f64 * f as f64
    }
}

/// Where row `r` of half `h` comes from: a tensor and its row.
type Source<'a> = dyn Fn(usize, usize) -> (&'a Fp4Weights, usize) + Sync + 'a;

/// The W4A8 prepack of a grouped GEMM's W [E, N, K] in MXFP4.
pub fn prepack_w4a8(w: &Fp4Weights) -> Result<W4a8Prepacked> {
    check_format(w)?;
    pack(w.experts, w.rows, w.k, false, &|_, r| (w, r))
}

/// The W4A8 prepack of the SwiGLU's W1 and W3 (or one interleaved W13), as [`super::prepack_swiglu`].
pub fn prepack_w4a8_swiglu(w1: &Fp4Weights, w3: Option<&Fp4Weights>) -> Result<W4a8Prepacked> {
    check_format(w1)?;
    match w3 {
        Some(w3) => {
            check_format(w3)?;
            if (w3.experts, w3.rows, w3.k) != (w1.experts, w1.rows, w1.k) {
                return Err(Error::invalid(format!(
                    "W1 is [{}, {}, {}] but W3 is [{}, {}, {}]: the SwiGLU pair must match",
                    w1.experts, w1.rows, w1.k, w3.experts, w3.rows, w3.k
                )));
            }
            pack(w1.experts, w1.rows, w1.k, true, &|h, r| {
                (if h == 0 { w1 } else { w3 }, r)
            })
        }
        None => {
            let il = crate::ops::moe::problem::INTERLEAVE_ROWS;
            if !w1.rows.is_multiple_of(2 * il) {
                return Err(Error::invalid(format!(
                    "the interleaved W13 has {} rows per expert; its rows must be a multiple of {}",
                    w1.rows,
                    2 * il
                )));
            }
            pack(w1.experts, w1.rows / 2, w1.k, true, &|h, r| {
                (w1, 2 * il * (r / il) + r % il + h * il)
            })
        }
    }
}

fn check_format(w: &Fp4Weights) -> Result<()> {
    if w.format != Fp4Format::Mxfp4 {
        return Err(Error::invalid(
            "e4m3 activations take MXFP4 weights (an NVFP4 value times its e4m3 block scale is not exact in e4m3); use bf16 activations for NVFP4",
        ));
    }
    w.validate()
}

fn pack(experts: usize, n: usize, k: usize, swiglu: bool, src: &Source) -> Result<W4a8Prepacked> {
    let mut out = W4a8Prepacked {
        experts,
        n,
        k,
        swiglu,
        bytes: Vec::new(),
        escale: Vec::new(),
    };
    let eb = out.expert_bytes();
    let (n_pad, katoms, halves) = (out.n_pad(), out.katoms(), out.halves());
    out.bytes = vec![0u8; experts * eb];
    let factors: Vec<Result<Vec<f32>>> = out
        .bytes
        .par_chunks_mut(eb.max(1))
        .enumerate()
        .map(|(e, dst)| {
            let mut f = vec![1.0f32; halves * n_pad];
            for h in 0..halves {
                for row in 0..n {
                    let (w, wr) = src(h, row);
                    let i = e * w.rows + wr;
                    let codes = &w.codes[i * k / 2..(i + 1) * k / 2];
                    let scales = &w.scales[i * k / 32..(i + 1) * k / 32];
                    let at = (e, h, row);
                    f[h * n_pad + row] = pack_row(dst, at, codes, scales, swiglu, katoms)?;
                }
            }
            Ok(f)
        })
        .collect();
    for f in factors {
        out.escale.extend(f?);
    }
    Ok(out)
}

/// Writes one row's codes and block offsets into expert e's bytes `dst`; returns the row's
/// factor 2^(c_ref - 127).
fn pack_row(
    dst: &mut [u8],
    (e, h, row): (usize, usize, usize),
    codes: &[u8],
    scales: &[u8],
    swiglu: bool,
    katoms: usize,
) -> Result<f32> {
    let live = |b: usize| codes[16 * b..16 * (b + 1)].iter().any(|&c| c & 0x77 != 0);
    let blocks = scales.len();
    let top = (0..blocks).filter(|&b| live(b)).map(|b| scales[b]).max();
    let c_ref = top.map_or(127, |t| t as i32 - U_MAX);
    let block_row = if swiglu {
        2 * (row / ATOM_ROWS) + h
    } else {
        row / ATOM_ROWS
    };
    let r = row % ATOM_ROWS;
    for ka in 0..katoms {
        let atom = (block_row * katoms + ka) * W4A8_ATOM_BYTES;
        for b in 0..4 {
            let gb = 4 * ka + b;
            let byte = if gb < blocks && live(gb) {
                let u = scales[gb] as i32 - c_ref;
                if u < U_MIN {
                    return Err(Error::invalid(format!(
                        "row {row} of expert {e}{}: its MXFP4 block scales span 2^{} to 2^{}, more \
                         than the 2^{} an e4m3 operand holds exactly; use bf16 activations for \
                         these weights",
                        if swiglu { [" (W1)", " (W3)"][h] } else { "" },
                        scales[gb] as i32 - mxfp4::E8M0_BIAS,
                        top.unwrap_or(0) as i32 - mxfp4::E8M0_BIAS,
                        U_MAX - U_MIN
                    )));
                }
                (8 * (u - U_MIN)) as u8
            } else {
                ZERO_BLOCK
            };
            dst[atom + W4A8_CODE_BYTES + 4 * r + b] = byte;
        }
        // each word: its low half's 4 codes from k4, its high half's from the word's other k4
        for k4 in (0..W4A8_K).step_by(4) {
            let (o, hi) = word_at(r, k4);
            let k0 = W4A8_K * ka + k4;
            if k0 >= codes.len() * 2 || !live(k0 / 32) {
                continue;
            }
            let mut word = u32::from_le_bytes(dst[atom + o..atom + o + 4].try_into().expect("4"));
            for j in 0..4 {
                let c = codes[(k0 + j) / 2] >> (4 * ((k0 + j) % 2)) & 0xF;
                place(&mut word, 4 * hi as usize + j, c);
            }
            dst[atom + o..atom + o + 4].copy_from_slice(&word.to_le_bytes());
        }
    }
    Ok(2f64.powi(c_ref - mxfp4::E8M0_BIAS) as f32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::moe_fp4_data::random_expert_weights;

    #[test]
    fn every_magnitude_times_every_offset_is_exact_in_e4m3() {
        for u in U_MIN..=U_MAX {
            for m in 0..8u8 {
                let want = crate::formats::fp4::decode(m) as f64 * 2f64.powi(u);
                assert_eq!(
                    Fp8Format::E4m3.decode(table_byte(m, u)) as f64,
                    want,
                    "m {m} u {u}"
                );
            }
        }
        // one further on either side is not
        assert_ne!(
            Fp8Format::E4m3.decode(table_byte(1, U_MIN - 1)) as f64,
            2f64.powi(-10)
        );
        assert_ne!(
            Fp8Format::E4m3.decode(table_byte(7, U_MAX + 1)) as f64,
            768.0
        );
    }

    #[test]
    fn every_offset_byte_names_an_aligned_table_and_the_prepacks_pass_unchanged() {
        // the kernel's tables: 16 of 8 bytes (`LUT_BYTES` = 128), read 8 bytes at a time
        for byte in 0..=255u8 {
            let o = table_offset(byte);
            assert!(
                o.is_multiple_of(8) && o + 8 <= 128,
                "byte {byte}: offset {o}"
            );
        }
        let written = (U_MIN..=U_MAX).map(|u| (8 * (u - U_MIN)) as u8);
        for byte in written.chain([ZERO_BLOCK, POISON]) {
            assert_eq!(table_offset(byte), byte as u32);
        }
        assert_eq!(table_offset(POISON) / 8, 15, "the NaN table");
        // the bytes of a bench's random fill: most were off the multiples of 8 before the mask
        assert_eq!(table_offset(0x3B), 0x38);
        assert_eq!(table_offset(0xC1), 0x40);
    }

    #[test]
    fn a_word_decodes_to_its_codes_and_every_bit_has_one_owner() {
        let mut seen = 0u32;
        for j in 0..8 {
            let mut w = 0;
            place(&mut w, j, 0xF);
            assert_eq!(seen & w, 0);
            seen |= w;
        }
        assert_eq!(seen, u32::MAX);
        for c in 0..16u8 {
            for j in 0..8 {
                let mut w = 0;
                place(&mut w, j, c);
                let got = decode_word(w, 0)[j];
                let want = crate::formats::fp4::decode(c);
                assert_eq!(Fp8Format::E4m3.decode(got), want, "code {c} at {j}");
            }
        }
    }

    #[test]
    fn every_four_codes_sit_in_one_half_word_where_the_kernel_reads_them() {
        let mut seen = std::collections::HashSet::new();
        for r in 0..ATOM_ROWS {
            for k4 in (0..W4A8_K).step_by(4) {
                let (o, hi) = word_at(r, k4);
                assert!(o % 4 == 0 && o < W4A8_CODE_BYTES);
                assert!(seen.insert((o, hi)), "r {r} k {k4}");
            }
        }
        assert_eq!(seen.len(), W4A8_CODE_BYTES / 2);
        // the shared-memory form's: thread 2r + k / 64, word (k % 64) / 8
        assert_eq!(word_at(3, 72 + 4), (16 * 7 + 4, true));
    }

    #[test]
    fn prepacked_weights_are_the_exact_mxfp4_values() {
        // N and K off the 128 grid, zero blocks, both SwiGLU layouts
        for (rows, k) in [(64, 128), (72, 96), (130, 224)] {
            let w = random_expert_weights(Fp4Format::Mxfp4, &[0, 3, 4], rows, k, 7).unwrap();
            let p = prepack_w4a8(&w).unwrap();
            assert_eq!(p.bytes.len(), 3 * p.expert_bytes());
            for e in 0..3 {
                let want = w.dequantize_expert(e).unwrap();
                for row in 0..rows {
                    for kk in 0..k {
                        assert_eq!(
                            p.value(e, 0, row, kk),
                            want[row * k + kk],
                            "e{e} ({row},{kk})"
                        );
                    }
                }
            }
            let w3 = random_expert_weights(Fp4Format::Mxfp4, &[1, 2, 5], rows, k, 8).unwrap();
            let s = prepack_w4a8_swiglu(&w, Some(&w3)).unwrap();
            for e in 0..3 {
                let (a, b) = (
                    w.dequantize_expert(e).unwrap(),
                    w3.dequantize_expert(e).unwrap(),
                );
                for row in (0..rows).step_by(7) {
                    for kk in 0..k {
                        assert_eq!(s.value(e, 0, row, kk), a[row * k + kk]);
                        assert_eq!(s.value(e, 1, row, kk), b[row * k + kk]);
                    }
                }
            }
        }
        let w13 = random_expert_weights(Fp4Format::Mxfp4, &[2], 256, 64, 3).unwrap();
        let il = prepack_w4a8_swiglu(&w13, None).unwrap();
        let v = w13.dequantize_expert(0).unwrap();
        assert_eq!(il.value(0, 1, 100, 5), v[(100 + 128) * 64 + 5]);
        assert_eq!(il.value(0, 0, 100, 5), v[100 * 64 + 5]);
    }

    #[test]
    fn rows_beyond_e4m3s_reach_and_nvfp4_are_refused() {
        let mut w = random_expert_weights(Fp4Format::Mxfp4, &[0], 64, 64, 1).unwrap();
        w.scales[0] = 140;
        w.scales[1] = 120; // 20 binades apart in row 0
        w.codes[0] = 0x11;
        w.codes[16] = 0x11;
        let e = prepack_w4a8(&w).unwrap_err().to_string();
        assert!(
            e.contains("row 0 of expert 0") && e.contains("bf16 activations"),
            "{e}"
        );
        let nv = random_expert_weights(Fp4Format::Nvfp4, &[0], 64, 64, 1).unwrap();
        let e = prepack_w4a8(&nv).unwrap_err().to_string();
        assert!(e.contains("MXFP4"), "{e}");
    }
}
