//! The prepack: 4-bit expert weights from the standard layout to the kernel's atoms (see
//! `layout`), with the scales re-encoded as multipliers and the per-expert epilogue factors.

use super::layout::{
    atom_bytes, decode_pair, half_value, multiplier_pair_bits, mxfp4_min_byte, nvfp4_scale_byte,
    pair_position, place, scale_bytes, ATOM_K, ATOM_ROWS, CODE_BYTES, TILE_N,
};
use super::{Fp4Format, Fp4Weights};
use crate::error::{Error, Result};
use rayon::prelude::*;

/// Weights in the kernel's layout: per expert, 64-row blocks (N rounded up to 128; for the SwiGLU
/// the W1 and W3 blocks of each 64 output columns alternate), each a run of K/64 atoms (K
/// rounded up to 64; padding is zero codes). Only [`prepack`] and [`prepack_swiglu`] make one.
#[derive(Debug, Clone, PartialEq)]
pub struct Fp4Prepacked {
    pub format: Fp4Format,
    pub experts: usize,
    /// Output columns (N of W, or of each of W1 and W3).
    pub n: usize,
    pub k: usize,
    /// Holds W1 and W3 for the fused SwiGLU.
    pub swiglu: bool,
    pub bytes: Vec<u8>,
    /// Per expert (SwiGLU: gate, up) the f32 factor the epilogue applies: the NVFP4 tensor scale
    /// x 2^8, or MXFP4's 2^c.
    pub escale: Vec<f32>,
    /// The smallest scale byte of any non-zero block (255 when there is none).
    pub min_scale_byte: u8,
}

impl Fp4Prepacked {
    pub fn n_pad(&self) -> usize {
        self.n.div_ceil(TILE_N) * TILE_N
    }
    pub fn katoms(&self) -> usize {
        self.k.div_ceil(ATOM_K)
    }
    /// 64-row blocks per expert.
    pub fn blocks(&self) -> usize {
        self.n_pad() / ATOM_ROWS * if self.swiglu { 2 } else { 1 }
    }
    pub fn expert_bytes(&self) -> usize {
        self.blocks() * self.katoms() * atom_bytes(self.format)
    }
    /// Epilogue factors per expert: 2 for the SwiGLU, else 1.
    pub fn halves(&self) -> usize {
        if self.swiglu {
            2
        } else {
            1
        }
    }

    /// Whether the kernel can dequantise these weights exactly into `bf16` (else f16) operands.
    pub fn check_activation(&self, bf16: bool) -> Result<()> {
        if self.format == Fp4Format::Mxfp4 && self.min_scale_byte < mxfp4_min_byte(bf16) {
            let span = 254 - self.min_scale_byte as u32;
            return Err(Error::invalid(format!(
                "the MXFP4 block scales of one expert span 2^{span}, more than {} dequantised \
                 weights can hold exactly ({} octaves); use {} activations",
                if bf16 { "bf16" } else { "f16" },
                254 - mxfp4_min_byte(bf16) as u32,
                if bf16 {
                    "narrower-ranged scales or NVFP4"
                } else {
                    "bf16"
                }
            )));
        }
        Ok(())
    }

    /// Element (row, kk) of one half (0: W or W1, 1: W3) of expert e, as the kernel computes it
    /// from the prepacked bytes (decode, multiplier, epilogue factor), in f64; `bf16` picks the
    /// activation type's decode. For tests and the round trip check.
    pub fn value(&self, e: usize, half: usize, row: usize, kk: usize, bf16: bool) -> f64 {
        self.operand(e, half, row, kk, bf16) * self.escale[e * self.halves() + half] as f64
    }

    /// The wgmma operand the kernel builds for that element (decoded pair times multiplier,
    /// before the epilogue factor), in f64: exactly representable in bf16 (or f16) when the
    /// kernel's one multiplication is exact.
    pub fn operand(&self, e: usize, half: usize, row: usize, kk: usize, bf16: bool) -> f64 {
        let block = if self.swiglu {
            2 * (row / ATOM_ROWS) + half
        } else {
            row / ATOM_ROWS
        };
        let atom = e * self.expert_bytes()
            + (block * self.katoms() + kk / ATOM_K) * atom_bytes(self.format);
        let (r, k) = (row % ATOM_ROWS, kk % ATOM_K);
        // invert pair_position: warp, lane, step, pair, element
        let (w, g, p_row) = (r / 16, r % 8, (r % 16) / 8);
        let (j, p_k, q, el) = (k / 16, (k % 16) / 8, (k % 8) / 2, k % 2);
        let t = 32 * w + 4 * g + q;
        let p = p_row + 2 * p_k;
        debug_assert_eq!(pair_position(t, j, p), (r, k - el));
        let o = atom + t * 16 + 4 * j;
        let word = u32::from_le_bytes([
            self.bytes[o],
            self.bytes[o + 1],
            self.bytes[o + 2],
            self.bytes[o + 3],
        ]);
        let decoded = (decode_pair(word, p, bf16) >> (16 * el)) as u16;
        // the kernel builds the multipliers of a row's scales two to a word (scales 2i and
        // 2i + 1) and multiplies by the half of this weight's scale
        let per_row = scale_bytes(self.format) / ATOM_ROWS;
        let (scale, row_scales) = (k / self.format.block(), atom + CODE_BYTES + r * per_row);
        let pair = row_scales + (scale & !1);
        let word = multiplier_pair_bits(self.format, self.bytes[pair], self.bytes[pair + 1], bf16);
        let mult = (word >> (16 * (scale & 1))) as u16;
        half_value(decoded, bf16) * half_value(mult, bf16)
    }
}

/// Prepacks the weights of a grouped GEMM, W [E, N, K].
pub fn prepack(w: &Fp4Weights) -> Result<Fp4Prepacked> {
    w.validate()?;
    pack(w.format, w.experts, w.rows, w.k, false, &|_, r| (w, r))
}

/// Prepacks the SwiGLU pair: W1 and W3 each [E, N, K] (`w3` given), or one W13 [E, 2N, K] whose
/// rows alternate blocks of 128 rows of W1 and of W3 (`w3` None; N a multiple of 128).
pub fn prepack_swiglu(w1: &Fp4Weights, w3: Option<&Fp4Weights>) -> Result<Fp4Prepacked> {
    w1.validate()?;
    match w3 {
        Some(w3) => {
            w3.validate()?;
            if (w3.format, w3.experts, w3.rows, w3.k) != (w1.format, w1.experts, w1.rows, w1.k) {
                return Err(Error::invalid(format!(
                    "W1 is {} [{}, {}, {}] but W3 is {} [{}, {}, {}]: the SwiGLU pair must match",
                    w1.format, w1.experts, w1.rows, w1.k, w3.format, w3.experts, w3.rows, w3.k
                )));
            }
            pack(w1.format, w1.experts, w1.rows, w1.k, true, &|h, r| {
                (if h == 0 { w1 } else { w3 }, r)
            })
        }
        None => {
            let il = crate::ops::moe::problem::INTERLEAVE_ROWS;
            if !w1.rows.is_multiple_of(2 * il) {
                return Err(Error::invalid(format!(
                    "the interleaved W13 has {} rows per expert; it holds blocks of {il} rows of W1 \
                     and W3 in turn, so its rows must be a multiple of {}",
                    w1.rows,
                    2 * il
                )));
            }
            pack(w1.format, w1.experts, w1.rows / 2, w1.k, true, &|h, r| {
                (w1, 2 * il * (r / il) + r % il + h * il)
            })
        }
    }
}

/// Where row `r` of half `h` (0: W or W1, 1: W3) comes from: a tensor and its row.
type Source<'a> = dyn Fn(usize, usize) -> (&'a Fp4Weights, usize) + Sync + 'a;

/// The shape of the prepacked weights and the tables the packing reads.
struct Packer<'a, 'b> {
    f: Fp4Format,
    n: usize,
    k: usize,
    n_pad: usize,
    katoms: usize,
    swiglu: bool,
    src: &'a Source<'b>,
    /// Per pair p and standard code byte (the pair's two codes): the pair's bits in a word.
    place: [[u32; 256]; 4],
    /// NVFP4: the stored byte of each e4m3 scale code, None for a zero scale (or a code
    /// `validate` refuses).
    nvfp4: [Option<u8>; 256],
}

fn pack(
    f: Fp4Format,
    experts: usize,
    n: usize,
    k: usize,
    swiglu: bool,
    src: &Source,
) -> Result<Fp4Prepacked> {
    let mut out = Fp4Prepacked {
        format: f,
        experts,
        n,
        k,
        swiglu,
        bytes: Vec::new(),
        escale: Vec::new(),
        min_scale_byte: 255,
    };
    let mut place_lut = [[0u32; 256]; 4];
    for (p, lut) in place_lut.iter_mut().enumerate() {
        for (b, word) in lut.iter_mut().enumerate() {
            place(word, p, 0, b as u8 & 0xF);
            place(word, p, 1, b as u8 >> 4);
        }
    }
    let mut nvfp4 = [None; 256];
    for (code, slot) in nvfp4.iter_mut().enumerate().take(0x7F) {
        let (byte, zero) = nvfp4_scale_byte(code as u8);
        *slot = (!zero).then_some(byte);
    }
    let packer = Packer {
        f,
        n,
        k,
        n_pad: out.n_pad(),
        katoms: out.katoms(),
        swiglu,
        src,
        place: place_lut,
        nvfp4,
    };
    let eb = out.expert_bytes();
    out.bytes = vec![0u8; experts * eb];
    // experts in parallel, each into its own bytes; the first failure in expert order wins
    let per_expert: Vec<Result<(Vec<f32>, u8)>> = out
        .bytes
        .par_chunks_mut(eb.max(1))
        .enumerate()
        .map(|(e, dst)| packer.expert(e, dst))
        .collect();
    for r in per_expert {
        let (factors, min) = r?;
        out.escale.extend(factors);
        out.min_scale_byte = out.min_scale_byte.min(min);
    }
    Ok(out)
}

/// How a half's block scales become stored bytes.
#[derive(Clone, Copy)]
enum ScaleEncoding {
    Nvfp4,
    /// byte = code + 126 - c
    Mxfp4 {
        c: i32,
    },
}

/// Whether a block's codes (bytes of two) are all ±0.
fn all_zero(codes: &[u8]) -> bool {
    codes.iter().all(|&b| b & 0x77 == 0)
}

impl Packer<'_, '_> {
    /// The codes (K/2 bytes) and scales (K/block) of row `r` of half `h` of expert e.
    fn row(&self, e: usize, h: usize, r: usize) -> (&[u8], &[u8]) {
        let (w, row) = (self.src)(h, r);
        let (cb, sb) = (self.k / 2, self.k / self.f.block());
        let i = e * w.rows + row;
        (
            &w.codes[i * cb..(i + 1) * cb],
            &w.scales[i * sb..(i + 1) * sb],
        )
    }

    /// Expert e's bytes and its halves' epilogue factors, and its smallest stored scale byte.
    fn expert(&self, e: usize, dst: &mut [u8]) -> Result<(Vec<f32>, u8)> {
        let halves = if self.swiglu { 2 } else { 1 };
        let (ab, mut min, mut factors) = (atom_bytes(self.f), 255u8, Vec::new());
        for h in 0..halves {
            let (enc, factor) = self.scale_encoding(e, h)?;
            factors.push(factor);
            for b in 0..self.n_pad / ATOM_ROWS {
                let block = if self.swiglu { 2 * b + h } else { b };
                let rows: Vec<Option<(&[u8], &[u8])>> = (0..ATOM_ROWS)
                    .map(|r| (64 * b + r < self.n).then(|| self.row(e, h, 64 * b + r)))
                    .collect();
                for ka in 0..self.katoms {
                    let at = (block * self.katoms + ka) * ab;
                    min = min.min(self.fill_atom(&mut dst[at..at + ab], &rows, ka, enc));
                }
            }
        }
        Ok((factors, min))
    }

    /// The scale encoding of half h of expert e, and the half's epilogue factor. MXFP4:
    /// c = the largest scale code - 128, byte = code + 126 - c (so the largest is 254), factor 2^c.
    fn scale_encoding(&self, e: usize, h: usize) -> Result<(ScaleEncoding, f32)> {
        match self.f {
            Fp4Format::Nvfp4 => {
                let (w, _) = (self.src)(h, 0);
                let factor = w.tensor_scales[e] * 256.0;
                if !factor.is_finite() {
                    return Err(Error::invalid(format!(
                        "the NVFP4 tensor scale {} of expert {e} is too large: the kernel applies it times 2^8 in f32",
                        w.tensor_scales[e]
                    )));
                }
                Ok((ScaleEncoding::Nvfp4, factor))
            }
            Fp4Format::Mxfp4 => {
                let (mut lo, mut hi) = (255u8, 0u8);
                let half_block = self.f.block() / 2;
                for r in 0..self.n {
                    let (codes, scales) = self.row(e, h, r);
                    for (c, &s) in codes.chunks_exact(half_block).zip(scales) {
                        if !all_zero(c) {
                            (lo, hi) = (lo.min(s), hi.max(s));
                        }
                    }
                }
                if lo > hi {
                    (lo, hi) = (128, 128); // no non-zero block: any scale will do
                }
                if (hi - lo) as u32 > 254 - mxfp4_min_byte(true) as u32 {
                    return Err(Error::invalid(format!(
                        "the MXFP4 block scales of expert {e} span 2^{} to 2^{}: more than the 2^126 \
                         range in which bf16 holds every dequantised weight exactly",
                        lo as i32 - 127,
                        hi as i32 - 127
                    )));
                }
                let c = hi as i32 - 128;
                Ok((ScaleEncoding::Mxfp4 { c }, 2f32.powi(c)))
            }
        }
    }

    /// One atom (64 rows from `rows`, K atom `ka`): the scale bytes of its live blocks (a block
    /// whose NVFP4 scale is zero or whose MXFP4 codes are all ±0 keeps codes and byte 0), then
    /// each thread's code words. Returns the smallest stored byte (255 if none).
    fn fill_atom(
        &self,
        atom: &mut [u8],
        rows: &[Option<(&[u8], &[u8])>],
        ka: usize,
        enc: ScaleEncoding,
    ) -> u8 {
        let bs = self.f.block();
        let per_row = scale_bytes(self.f) / ATOM_ROWS;
        let mut min = 255u8;
        // the live code bytes of the atom, row by row (64 k = 32 bytes); zero elsewhere
        let mut live = [[0u8; ATOM_K / 2]; ATOM_ROWS];
        for (r, row) in rows.iter().enumerate() {
            let Some((codes, scales)) = row else { continue };
            for s in 0..per_row {
                let kk = ATOM_K * ka + s * bs;
                if kk >= self.k {
                    break;
                }
                let c = &codes[kk / 2..(kk + bs) / 2];
                let byte = match enc {
                    ScaleEncoding::Nvfp4 => self.nvfp4[scales[kk / bs] as usize],
                    ScaleEncoding::Mxfp4 { c: top } => {
                        (!all_zero(c)).then(|| (scales[kk / bs] as i32 + 126 - top) as u8)
                    }
                };
                if let Some(byte) = byte {
                    atom[CODE_BYTES + r * per_row + s] = byte;
                    min = min.min(byte);
                    live[r][s * bs / 2..(s + 1) * bs / 2].copy_from_slice(c);
                }
            }
        }
        // pair p of word j of thread t is one standard code byte: row pair_position's, byte k/2
        for t in 0..128 {
            for j in 0..4 {
                let mut word = 0u32;
                for p in 0..4 {
                    let (r, kk) = pair_position(t, j, p);
                    word |= self.place[p][live[r][kk / 2] as usize];
                }
                atom[t * 16 + 4 * j..t * 16 + 4 * j + 4].copy_from_slice(&word.to_le_bytes());
            }
        }
        min
    }
}
