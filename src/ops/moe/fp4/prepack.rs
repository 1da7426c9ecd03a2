//! The prepack: 4-bit expert weights from the standard layout to the kernel's atoms (see
//! `layout`), with the scales re-encoded as multipliers and the per-expert epilogue factors.

use super::layout::{
    atom_bytes, decode_pair, half_value, multiplier_pair_bits, mxfp4_min_byte, nvfp4_scale_byte,
    pair_position, place, scale_bytes, ATOM_K, ATOM_ROWS, CODE_BYTES, TILE_N,
};
use super::{Fp4Format, Fp4Weights};
use crate::error::{Error, Result};

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
type Source<'a> = dyn Fn(usize, usize) -> (&'a Fp4Weights, usize) + 'a;

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
    let halves = out.halves();
    out.bytes = vec![0u8; experts * out.expert_bytes()];
    let (katoms, ab, per_row) = (out.katoms(), atom_bytes(f), scale_bytes(f) / ATOM_ROWS);
    for e in 0..experts {
        for h in 0..halves {
            let (scale_of, factor) = scale_encoding(f, e, h, n, k, src)?;
            out.escale.push(factor);
            for b in 0..out.n_pad() / ATOM_ROWS {
                let block = if swiglu { 2 * b + h } else { b };
                for ka in 0..katoms {
                    let atom = e * out.expert_bytes() + (block * katoms + ka) * ab;
                    fill_atom(
                        &mut out,
                        atom,
                        per_row,
                        e,
                        h,
                        64 * b,
                        64 * ka,
                        &scale_of,
                        src,
                    );
                }
            }
        }
    }
    Ok(out)
}

/// A block's stored scale byte, or None when the block is all zero (its codes are then left
/// zero and its byte is irrelevant).
type ScaleOf = dyn Fn(&Fp4Weights, usize, usize) -> Option<u8>;

/// The scale byte of each block of half h of expert e, and the half's epilogue factor. MXFP4:
/// c = the largest scale code - 128, byte = code + 126 - c (so the largest is 254), factor 2^c.
fn scale_encoding(
    f: Fp4Format,
    e: usize,
    h: usize,
    n: usize,
    k: usize,
    src: &Source,
) -> Result<(Box<ScaleOf>, f32)> {
    let all_zero = move |w: &Fp4Weights, row: usize, kk: usize| {
        let b0 = kk / f.block() * f.block();
        (b0..b0 + f.block()).all(|i| w.code(e, row, i) & 0x7 == 0)
    };
    match f {
        Fp4Format::Nvfp4 => {
            let (w, _) = src(h, 0);
            let factor = w.tensor_scales[e] * 256.0;
            if !factor.is_finite() {
                return Err(Error::invalid(format!(
                    "the NVFP4 tensor scale {} of expert {e} is too large: the kernel applies it times 2^8 in f32",
                    w.tensor_scales[e]
                )));
            }
            let of = move |w: &Fp4Weights, row: usize, kk: usize| {
                let (byte, zero) = nvfp4_scale_byte(w.scale(e, row, kk));
                (!zero).then_some(byte)
            };
            Ok((Box::new(of), factor))
        }
        Fp4Format::Mxfp4 => {
            let (mut lo, mut hi) = (255u8, 0u8);
            for r in 0..n {
                let (w, row) = src(h, r);
                for kk in (0..k).step_by(f.block()) {
                    if !all_zero(w, row, kk) {
                        let s = w.scale(e, row, kk);
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
            let of = move |w: &Fp4Weights, row: usize, kk: usize| {
                (!all_zero(w, row, kk)).then(|| (w.scale(e, row, kk) as i32 + 126 - c) as u8)
            };
            Ok((Box::new(of), 2f32.powi(c)))
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn fill_atom(
    out: &mut Fp4Prepacked,
    atom: usize,
    per_row: usize,
    e: usize,
    h: usize,
    row0: usize,
    k0: usize,
    scale_of: &ScaleOf,
    src: &Source,
) {
    let (n, k, bs) = (out.n, out.k, out.format.block());
    // scales first: a block that is all zero keeps codes 0 whatever its scale says
    let mut live = [[false; 4]; ATOM_ROWS];
    let real_rows = ATOM_ROWS.min(n.saturating_sub(row0));
    for (r, live_row) in live.iter_mut().enumerate().take(real_rows) {
        let (w, row) = src(h, row0 + r);
        for (s, is_live) in live_row.iter_mut().enumerate().take(per_row) {
            let kk = k0 + s * bs;
            if kk >= k {
                continue;
            }
            if let Some(byte) = scale_of(w, row, kk) {
                out.bytes[atom + CODE_BYTES + r * per_row + s] = byte;
                out.min_scale_byte = out.min_scale_byte.min(byte);
                *is_live = true;
            }
        }
    }
    for t in 0..128 {
        for j in 0..4 {
            let mut word = 0u32;
            for p in 0..4 {
                let (r, kk) = pair_position(t, j, p);
                if row0 + r >= n || !live[r][kk / bs] {
                    continue;
                }
                let (w, row) = src(h, row0 + r);
                for el in 0..2 {
                    if k0 + kk + el < k {
                        place(&mut word, p, el, w.code(e, row, k0 + kk + el));
                    }
                }
            }
            let o = atom + t * 16 + 4 * j;
            out.bytes[o..o + 4].copy_from_slice(&word.to_le_bytes());
        }
    }
}
