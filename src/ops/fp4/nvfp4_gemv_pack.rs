//! The GEMV layout of NVFP4 weights (`Kiln::nvfp4_gemv_layout`, `kiln.fp4.to_gemv_layout`):
//! the standard codes with the bits of each 32-bit word placed so that the GEMV decodes the
//! word's four bf16 pairs in 9 instructions (the kernel's `packed_pairs`) where the standard word
//! takes 13, and the words and scales tiled: in each full 16-row tile a step of 128 K, its 16
//! rows' codes (1 KB) and scales (128 bytes), contiguous, step after step, so that the GEMV's
//! copies read whole lines (docs/fp4.md G52, G60; the one layout from G61 on).
//!
//! A standard word holds code j (element j of its 8) at bits 4j .. 4j + 3: magnitude m, e0, e1,
//! then the sign. The GEMV's pair i is codes 2i and 2i + 1 (adjacent pairs, G21, the layout from
//! G30 on: the mma's B pair is then a word of X as it lies in memory) as two bf16 halves, each
//! the e2m1 value times 2^-126: m, e0, e1 at bits 6, 7, 8 of the half and the sign at 15. The GEMV layout keeps
//! pair 0 at those bits, pair 1 six bits lower and pair 2 twelve lower (mod 32: a rotation
//! brings each back), and pair 3, which no rotation of the same pattern fits into the 8 bits
//! left, with m, e0 and the sign two bits lower and e1 ten lower.

use std::ffi::c_void;

use crate::device::{Context, DeviceBuffer, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;

/// A weight's standard codes and scales and the buffers its GEMV layout goes into.
pub struct LayoutBuffers<'a> {
    pub codes: &'a DeviceBuffer,
    pub scales: &'a DeviceBuffer,
    pub dst_codes: &'a DeviceBuffer,
    pub dst_scales: &'a DeviceBuffer,
}

impl<'a> LayoutBuffers<'a> {
    /// The four buffers in their order: codes, scales, then the destinations of each.
    pub fn of(b: &'a [DeviceBuffer; 4]) -> Self {
        LayoutBuffers {
            codes: &b[0],
            scales: &b[1],
            dst_codes: &b[2],
            dst_scales: &b[3],
        }
    }
}

/// Checks that `b` holds the codes and scales of a [rows, K] NVFP4 matrix that the GEMV can read
/// in its layout (K a multiple of 128), each buffer 16-byte aligned and the destinations apart
/// from the sources (the layout moves bytes between rows).
pub fn check_gemv_layout(rows: usize, k: usize, b: &LayoutBuffers) -> Result<()> {
    if rows == 0 || k == 0 || !k.is_multiple_of(128) {
        return Err(Error::invalid(format!(
            "the GEMV layout is for [rows, K] codes with K a multiple of 128 (the GEMV's rings \
             read it), not [{rows}, {k}]: keep the standard layout for this shape"
        )));
    }
    let (codes, scales) = (rows * k / 2, rows * k / 16);
    let all = [
        ("the codes", b.codes, codes),
        ("the scales", b.scales, scales),
        ("the GEMV-layout codes", b.dst_codes, codes),
        ("the GEMV-layout scales", b.dst_scales, scales),
    ];
    for (name, buf, bytes) in all {
        if buf.bytes() < bytes {
            return Err(Error::invalid(format!(
                "{name} hold {} bytes; a [{rows}, {k}] NVFP4 matrix has {bytes}",
                buf.bytes()
            )));
        }
        if !buf.ptr().is_multiple_of(16) {
            return Err(Error::invalid(format!(
                "{name} must start on a 16-byte boundary (the kernel's vector loads)"
            )));
        }
    }
    let overlap = |(_, a, la): (&str, &DeviceBuffer, usize),
                   (_, b, lb): (&str, &DeviceBuffer, usize)| {
        a.ptr() < b.ptr() + lb as u64 && b.ptr() < a.ptr() + la as u64
    };
    if all[..2]
        .iter()
        .any(|&s| all[2..].iter().any(|&d| overlap(s, d)))
        || overlap(all[2], all[3])
    {
        return Err(Error::invalid(
            "the GEMV layout moves bytes between rows: write its codes and scales into two \
             buffers of their own, apart from the standard codes and scales",
        ));
    }
    Ok(())
}

/// The device kernel that writes codes and scales in the GEMV layout
/// (`kernels/gemm/nvfp4_gemv_pack.cu`; compiled only when asked for, the variant budget).
pub fn spec_gemv_layout(arch: &str) -> KernelSpec {
    KernelSpec::new("gemm/nvfp4_gemv_pack.cu", "nvfp4_gemv_layout", arch)
}

/// The standard codes and scales of `batch` NVFP4 [n, K] blocks (in `src`, `src_scales`)
/// written into `dst`, `dst_scales` in the GEMV layout, bit for bit [`gemv_layout`]: each
/// word's bits placed for the GEMV's decode, and in each full 16-row tile a step's codes (1 KB)
/// and scales (128 bytes) contiguous, step after step. Bytes move between rows, so the
/// destinations are other buffers than the sources. The tensor scale stays as it is; a GEMV on
/// the result goes through `nvfp4_gemv::launch_packed`. It returns once they are written (a
/// load-time step): the GEMV, a programmatic dependent, asks for its weights before it waits for
/// the kernel ahead of it, which here would be this one writing them.
pub fn to_gemv_layout(
    ctx: &Context,
    n: usize,
    batch: usize,
    k: usize,
    b: &LayoutBuffers,
) -> Result<()> {
    let rows = n * batch;
    check_gemv_layout(rows, k, b)?;
    let f = ctx.function(&spec_gemv_layout(&ctx.arch()))?;
    let units = rows * k / 32 + rows * k / 128;
    let (mut s, mut ss) = (b.codes.ptr(), b.scales.ptr());
    let (mut d, mut ds) = (b.dst_codes.ptr(), b.dst_scales.ptr());
    let (mut r, mut nn, mut kk) = (rows as u64, n as u64, k as u64);
    let blocks = units
        .div_ceil(256)
        .clamp(1, 8 * ctx.info.sm_count.max(1) as usize);
    // SAFETY: the kernel takes (const u32x4*, const uint2*, u32x4*, uint2*, u64, u64, u64) in
    // this order and touches the first rows x K / 2 code bytes and rows x K / 16 scale bytes of
    // each pair, which the checks above proved inside the buffers, aligned and not overlapping.
    unsafe {
        f.launch(
            ctx.stream,
            &LaunchConfig::simple((blocks as u32, 1, 1), 256),
            &mut [
                &mut s as *mut u64 as *mut c_void,
                &mut ss as *mut u64 as *mut c_void,
                &mut d as *mut u64 as *mut c_void,
                &mut ds as *mut u64 as *mut c_void,
                &mut r as *mut u64 as *mut c_void,
                &mut nn as *mut u64 as *mut c_void,
                &mut kk as *mut u64 as *mut c_void,
            ],
        )
    }?;
    ctx.synchronize()
}

/// Where the GEMV layout puts each bit of a standard word: bit 4j + b (code j's bit b) goes to
/// `GEMV_BIT[4j + b]`. Code j is half j % 2 of pair j / 2, so that a pair is two neighbouring
/// elements of K and the mma's B pair a word of X as it lies in memory.
pub const GEMV_BIT: [u32; 32] = gemv_bits();

const fn gemv_bits() -> [u32; 32] {
    // a half's bits m, e0, e1, sign, as the decoded bf16 has them
    const TARGET: [u32; 4] = [6, 7, 8, 15];
    let mut out = [0u32; 32];
    let mut j = 0;
    while j < 8 {
        let (pair, half) = (j / 2, j % 2);
        let mut b = 0;
        while b < 4 {
            let t = TARGET[b] + 16 * half as u32;
            // the rotation (left) the kernel applies to bring the bit to t
            let rot = match pair {
                0 => 0,
                1 => 6,
                2 => 12,
                _ if b == 2 => 10,
                _ => 2,
            };
            out[4 * j + b] = (t + 32 - rot) % 32;
            b += 1;
        }
        j += 1;
    }
    out
}

/// One standard word of 8 codes in the GEMV layout.
pub fn pack_gemv_word(w: u32) -> u32 {
    place_bits(w, &GEMV_BIT)
}

fn place_bits(w: u32, to: &[u32; 32]) -> u32 {
    to.iter()
        .enumerate()
        .fold(0, |acc, (b, &to)| acc | ((w >> b) & 1) << to)
}

/// Standard NVFP4 codes (rows of K / 2 bytes, K a multiple of 8) in the GEMV layout: each
/// little-endian 32-bit word through [`pack_gemv_word`].
pub fn pack_gemv_codes(codes: &[u8]) -> Vec<u8> {
    pack_words(codes, pack_gemv_word)
}

/// The GEMV layout's tiles (docs/fp4.md G52, the layout from G61 on): in each of `batch` [n, k]
/// blocks, every full tile of 16 rows holds its codes step by step (step s of 128 K: 16 rows x
/// 64 bytes, row after row, at 1,024 s from the tile's start) and its scales likewise (16 rows x
/// 8 bytes at 128 s), so that a GEMV step copies whole 128-byte lines. A partial last tile (n
/// not a multiple of 16) stays row by row, as the bounded copies read it. A permutation of the
/// bytes of each buffer: the same sizes, a full tile in the same place as its rows. `codes` may
/// be standard or with the GEMV layout's words (whole 64-byte pieces move); k a multiple of 128.
pub fn tile_gemv_layout(
    codes: &[u8],
    scales: &[u8],
    n: usize,
    k: usize,
    batch: usize,
) -> (Vec<u8>, Vec<u8>) {
    assert!(
        k.is_multiple_of(128),
        "the tiled GEMV layout needs K a multiple of 128"
    );
    assert_eq!(codes.len(), batch * n * k / 2, "codes of [batch x n, k]");
    assert_eq!(scales.len(), batch * n * k / 16, "scales of [batch x n, k]");
    let (mut c, mut sc) = (codes.to_vec(), scales.to_vec());
    let steps = k / 128;
    for b in 0..batch {
        for t in 0..n / 16 {
            let row0 = b * n + 16 * t;
            let (c0, s0) = (row0 * k / 2, row0 * k / 16);
            for s in 0..steps {
                for i in 0..16 {
                    let (src, dst) = ((row0 + i) * k / 2 + 64 * s, c0 + 1024 * s + 64 * i);
                    c[dst..dst + 64].copy_from_slice(&codes[src..src + 64]);
                    let (src, dst) = ((row0 + i) * k / 16 + 8 * s, s0 + 128 * s + 8 * i);
                    sc[dst..dst + 8].copy_from_slice(&scales[src..src + 8]);
                }
            }
        }
    }
    (c, sc)
}

/// Standard NVFP4 codes and scales of `batch` [n, k] blocks (k a multiple of 128) in the GEMV
/// layout, on the CPU: each word's bits placed ([`pack_gemv_codes`]), then tiled
/// ([`tile_gemv_layout`]). [`to_gemv_layout`] writes the same bytes on the GPU.
pub fn gemv_layout(
    codes: &[u8],
    scales: &[u8],
    n: usize,
    k: usize,
    batch: usize,
) -> (Vec<u8>, Vec<u8>) {
    tile_gemv_layout(&pack_gemv_codes(codes), scales, n, k, batch)
}

fn pack_words(codes: &[u8], word: fn(u32) -> u32) -> Vec<u8> {
    codes
        .chunks_exact(4)
        .flat_map(|c| word(u32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's `packed_pairs`: pair 0 masked, pair 1 shifted by 6 and pair 2 rotated by
    /// 12, each masked, pair 3 from a shift by 2 (m, e0, sign) and a rotation by 10 (e1).
    fn packed_pairs(w: u32) -> [u32; 4] {
        const PAIR: u32 = 0x81C0_81C0;
        const TOP: u32 = 0x0100_0100;
        [
            w & PAIR,
            (w << 6) & PAIR,
            w.rotate_left(12) & PAIR,
            ((w << 2) & (PAIR & !TOP)) | (w.rotate_left(10) & TOP),
        ]
    }

    fn bf16_half(bits: u32, hi: bool) -> f64 {
        let h = if hi { bits >> 16 } else { bits & 0xFFFF } as u16;
        half::bf16::from_bits(h).to_f64()
    }

    /// The device kernel compiles cleanly (only when asked for: the variant budget), and a
    /// shape the GEMV cannot read in its layout is refused before any launch.
    #[test]
    fn the_gemv_layout_kernel_compiles_and_refuses_what_the_gemv_cannot_read() {
        if crate::jit::testing::nvrtc_here() {
            crate::jit::testing::assert_compile_clean(&[spec_gemv_layout("sm_90a")]);
        }
        // SAFETY: never dereferenced: the checks look at the sizes and addresses only.
        let b = |ptr: u64, bytes: usize| unsafe { DeviceBuffer::borrowed(ptr, bytes) };
        // [128, 128]: 8 KB of codes, 1 KB of scales
        let (c, s, dc, ds) = (
            b(0x10000, 8192),
            b(0x20000, 1024),
            b(0x30000, 8192),
            b(0x40000, 1024),
        );
        let bufs = |codes, scales, dst_codes, dst_scales| LayoutBuffers {
            codes,
            scales,
            dst_codes,
            dst_scales,
        };
        let err =
            |rows, k, l: LayoutBuffers| check_gemv_layout(rows, k, &l).unwrap_err().to_string();
        assert!(check_gemv_layout(128, 128, &bufs(&c, &s, &dc, &ds)).is_ok());
        assert!(err(128, 96, bufs(&c, &s, &dc, &ds)).contains("multiple of 128"));
        assert!(err(129, 128, bufs(&c, &s, &dc, &ds)).contains("hold"));
        let odd = b(0x30008, 8192);
        assert!(err(128, 128, bufs(&c, &s, &odd, &ds)).contains("16-byte"));
        // in place, or the codes over the scales: refused
        assert!(err(128, 128, bufs(&c, &s, &c, &ds)).contains("apart"));
        let over = b(0x30000 + 4096, 1024);
        assert!(err(128, 128, bufs(&c, &s, &dc, &over)).contains("apart"));
    }

    /// The tiled layout puts step s of row i of a full tile at 1,024 s + 64 i (codes) and at
    /// 128 s + 8 i (scales) from the tile's start, leaves a partial tile's rows where they were,
    /// and moves every byte once.
    #[test]
    fn the_tiled_layout_keeps_a_step_of_a_tile_contiguous() {
        let (n, k, batch) = (37, 256, 2);
        let codes: Vec<u8> = (0..batch * n * k / 2)
            .map(|i| (i * 7 + i / 251) as u8)
            .collect();
        let scales: Vec<u8> = (0..batch * n * k / 16)
            .map(|i| (i * 13 + i / 97) as u8)
            .collect();
        let (c, s) = tile_gemv_layout(&codes, &scales, n, k, batch);
        let (mut cs, mut ss) = (c.clone(), s.clone());
        let (mut cw, mut sw) = (codes.clone(), scales.clone());
        cs.sort_unstable();
        cw.sort_unstable();
        ss.sort_unstable();
        sw.sort_unstable();
        assert_eq!((cs, ss), (cw, sw));
        for b in 0..batch {
            for t in 0..2 {
                let row0 = b * n + 16 * t;
                for step in 0..2 {
                    for i in 0..16 {
                        let src = (row0 + i) * k / 2 + 64 * step;
                        let dst = row0 * k / 2 + 1024 * step + 64 * i;
                        assert_eq!(&c[dst..dst + 64], &codes[src..src + 64]);
                        let src = (row0 + i) * k / 16 + 8 * step;
                        let dst = row0 * k / 16 + 128 * step + 8 * i;
                        assert_eq!(&s[dst..dst + 8], &scales[src..src + 8]);
                    }
                }
            }
            // the 5 rows of the partial tile stay row by row
            let tail = (b * n + 32) * k / 2..(b * n + n) * k / 2;
            assert_eq!(&c[tail.clone()], &codes[tail]);
        }
    }

    /// The device kernel's bit map (`gemv_bit(j, b)`: rotations right by 0, 6, 12 and 2/10 of
    /// each half's bf16 bits) is the host's GEMV_BIT.
    #[test]
    fn the_device_bit_map_is_the_hosts() {
        for j in 0..8 {
            for b in 0..4 {
                let (half, pair) = (j % 2, j / 2);
                let target = if b == 3 { 15 } else { 6 + b } + 16 * half;
                let rot = match (pair, b) {
                    (0, _) => 0,
                    (1, _) => 6,
                    (2, _) => 12,
                    (_, 2) => 10,
                    _ => 2,
                };
                assert_eq!(
                    GEMV_BIT[4 * j + b] as usize,
                    (target + 32 - rot) % 32,
                    "code {j} bit {b}"
                );
            }
        }
    }

    #[test]
    fn the_gemv_layout_moves_every_bit_of_a_word_to_its_own_place() {
        let mut seen = [false; 32];
        for &to in &GEMV_BIT {
            assert!(!seen[to as usize], "bit {to} taken twice");
            seen[to as usize] = true;
        }
        assert_eq!(pack_gemv_word(0), 0);
        assert_eq!(pack_gemv_word(u32::MAX), u32::MAX);
        // the bytes of a row are words as they are, in order
        let codes: Vec<u8> = (0..16u8).map(|i| i.wrapping_mul(37)).collect();
        let packed = pack_gemv_codes(&codes);
        for (i, c) in codes.chunks_exact(4).enumerate() {
            let w = pack_gemv_word(u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
            assert_eq!(&packed[4 * i..4 * i + 4], &w.to_le_bytes());
        }
    }

    /// Every code in every position, the other seven random: pair i of the decoded GEMV word must
    /// be codes 2i (low half) and 2i + 1 (high half), each the e2m1 value times 2^-126 (the
    /// standard decode's bits, which the scale then multiplies by 2^118 x s).
    #[test]
    fn the_kernels_packed_decode_gives_each_pair_its_two_codes() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(0x2545_F491);
        for j in 0..8u32 {
            for code in 0u32..16 {
                for _ in 0..64 {
                    let rest: u32 = rng.gen();
                    let w = (rest & !(0xF << (4 * j))) | code << (4 * j);
                    check_pairs(w, packed_pairs(pack_gemv_word(w)));
                }
            }
        }
    }

    /// The decoded pairs of standard word `w`: pair i is codes 2i and 2i + 1, low half first.
    fn check_pairs(w: u32, pairs: [u32; 4]) {
        for (i, &pair) in pairs.iter().enumerate() {
            for hi in [false, true] {
                let j = 2 * i + hi as usize;
                let c = (w >> (4 * j)) & 0xF;
                let want = crate::formats::fp4::decode(c as u8) as f64;
                let got = bf16_half(pair, hi) * 2f64.powi(126);
                // -0 and +0 both decode to zero; the sign bit must still be the code's
                assert_eq!(got, want, "word {w:#010x} pair {i} hi {hi}");
                let sign = (pair >> if hi { 31 } else { 15 }) & 1;
                assert_eq!(sign, c >> 3, "word {w:#010x} pair {i} hi {hi}");
            }
        }
    }
}
