//! FP4 e2m1 on the CPU, exact: codes to and from f32 (round-to-nearest-even, saturating at ±6)
//! and the packing of two codes per byte, element 0 in the low nibble, that NVFP4 and MXFP4 store.

// e2m1 (OCP MX v1.0, section 5.3.3): 1 sign, 2 exponent (bias 1), 1 mantissa bit; codes 0..=7
// are 0, 0.5, 1, 1.5, 2, 3, 4, 6 and bit 3 is the sign. There is no infinity and no NaN.

/// The largest e2m1 magnitude.
pub const MAX: f32 = 6.0;

/// The code of +6, the largest positive value.
pub const MAX_CODE: u8 = 0x7;

/// The sign bit of a code.
pub const SIGN: u8 = 0x8;

/// The magnitudes of codes 0..=7.
const MAGNITUDES: [f32; 8] = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];

/// The value's code, rounded once to nearest with ties to the even code (0.25 -> 0, 0.75 -> 1,
/// 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4); magnitudes above 6, infinities included,
/// become ±6; the sign of zero is kept. NaN has no code: it becomes +6 (saturated, so a NaN never
/// passes for a zero), and the block quantisers refuse NaN and infinite inputs with an error
/// before they encode anything.
pub fn encode(x: f32) -> u8 {
    if x.is_nan() {
        return MAX_CODE;
    }
    let sign = if x.is_sign_negative() { SIGN } else { 0 };
    let a = x.abs();
    // The midpoints between neighbouring magnitudes, each exact in f32; at a midpoint `<=` picks
    // the lower neighbour when its code is even and `<` the upper one when that is even.
    let magnitude = if a <= 0.25 {
        0
    } else if a < 0.75 {
        1
    } else if a <= 1.25 {
        2
    } else if a < 1.75 {
        3
    } else if a <= 2.5 {
        4
    } else if a < 3.5 {
        5
    } else if a <= 5.0 {
        6
    } else {
        MAX_CODE
    };
    sign | magnitude
}

/// The exact value of the low nibble of `code` (the high nibble is ignored).
pub fn decode(code: u8) -> f32 {
    let m = MAGNITUDES[(code & 0x7) as usize];
    if code & SIGN != 0 {
        -m
    } else {
        m
    }
}

/// One byte holding `first` (an element at an even index) in its low nibble and `second` in
/// its high nibble.
pub fn pack_pair(first: u8, second: u8) -> u8 {
    (first & 0xF) | ((second & 0xF) << 4)
}

/// The codes of an even number of elements, two per byte: element 2i in the low nibble of byte
/// i, element 2i + 1 in the high nibble. This is torch's `float4_e2m1fn_x2`
/// (torch/headeronly/util/Float4_e2m1fn_x2.h: "val1 : val0" in bits "7654 : 3210") and PTX's
/// `cvt.rn.satfinite.e2m1x2.f32 d, a, b`, which puts `a` in the upper four bits of `d` and `b`
/// in the lower four (so element 0 is `b`).
pub fn pack(codes: &[u8]) -> Vec<u8> {
    debug_assert!(codes.len().is_multiple_of(2), "pack takes pairs of codes");
    codes
        .chunks_exact(2)
        .map(|p| pack_pair(p[0], p[1]))
        .collect()
}

/// The codes packed in `bytes`, two per byte, element 0 first.
pub fn unpack(bytes: &[u8]) -> Vec<u8> {
    bytes.iter().flat_map(|&b| [b & 0xF, b >> 4]).collect()
}

/// The code of element `i` of a packed row.
pub fn code_at(bytes: &[u8], i: usize) -> u8 {
    (bytes[i / 2] >> (4 * (i % 2))) & 0xF
}

/// Packed codes times their block scales, in f64, into `out` (resized to two values a byte; a
/// buffer reused from call to call saves the page faults of a fresh one): block b (of `block`
/// elements, `block / 2` bytes) takes `scale(scales[b])`. Each value is one product of two exact
/// f64 numbers (the callers' scales have at most 28 significant bits), so it is exact. The
/// buffers' lengths must agree (the formats' `check`).
pub(crate) fn dequantize_blocks(
    codes: &[u8],
    scales: &[u8],
    block: usize,
    scale: impl Fn(u8) -> f64,
    out: &mut Vec<f64>,
) {
    let value: [f64; 16] = std::array::from_fn(|c| decode(c as u8) as f64);
    if out.len() != codes.len() * 2 {
        out.clear();
        out.resize(codes.len() * 2, 0.0);
    }
    for ((bytes, dst), &s) in codes
        .chunks_exact(block / 2)
        .zip(out.chunks_exact_mut(block))
        .zip(scales)
    {
        let s = scale(s);
        for (&b, pair) in bytes.iter().zip(dst.chunks_exact_mut(2)) {
            pair[0] = value[(b & 0xF) as usize] * s;
            pair[1] = value[(b >> 4) as usize] * s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The code nearest to `x` by brute force over all 16 codes, ties to the even code (the
    /// lowest mantissa bit clear), saturating beyond ±6.
    fn nearest(x: f32) -> u8 {
        let sign = if x.is_sign_negative() { SIGN } else { 0 };
        let a = (x.abs() as f64).min(6.0);
        let mut best = 0u8;
        for c in 1..8u8 {
            let (d, db) = (
                (MAGNITUDES[c as usize] as f64 - a).abs(),
                (MAGNITUDES[best as usize] as f64 - a).abs(),
            );
            if d < db || (d == db && c % 2 == 0) {
                best = c;
            }
        }
        sign | best
    }

    #[test]
    fn every_code_decodes_to_the_ocp_table() {
        let want = [
            0.0f32, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0,
            -6.0,
        ];
        for (c, w) in want.iter().enumerate() {
            assert_eq!(decode(c as u8).to_bits(), w.to_bits(), "code {c:#x}");
            // From the fields: exponent bits 2..1 (bias 1), mantissa bit 0; exponent 0 is
            // subnormal (0.m x 2^0).
            let (e, m) = ((c >> 1) & 3, c & 1);
            let v = if e == 0 {
                m as f32 * 0.5
            } else {
                (1.0 + m as f32 * 0.5) * 2f32.powi(e as i32 - 1)
            };
            assert_eq!(decode(c as u8).abs(), v, "code {c:#x}");
        }
        // the high nibble does not leak into the value
        assert_eq!(decode(0xF5), 3.0);
    }

    #[test]
    fn every_code_round_trips_bit_exactly() {
        for c in 0..16u8 {
            assert_eq!(encode(decode(c)), c, "code {c:#x} = {}", decode(c));
        }
    }

    #[test]
    fn midpoints_tie_to_the_even_code_and_their_neighbours_to_the_nearest() {
        for c in 0..7u8 {
            let (lo, hi) = (decode(c), decode(c + 1));
            let mid = (lo + hi) / 2.0;
            assert_eq!(mid as f64, (lo as f64 + hi as f64) / 2.0);
            let even = if c % 2 == 0 { c } else { c + 1 };
            assert_eq!(encode(mid), even, "tie {mid} between {lo} and {hi}");
            assert_eq!(encode(-mid), SIGN | even, "tie {}", -mid);
            assert_eq!(encode(f32::from_bits(mid.to_bits() - 1)), c, "below {mid}");
            assert_eq!(
                encode(f32::from_bits(mid.to_bits() + 1)),
                c + 1,
                "above {mid}"
            );
        }
        // the table `encode` documents
        let ties = [
            (0.25, 0),
            (0.75, 2),
            (1.25, 2),
            (1.75, 4),
            (2.5, 4),
            (3.5, 6),
            (5.0, 6),
        ];
        for (x, c) in ties {
            assert_eq!(encode(x), c, "{x}");
        }
    }

    #[test]
    fn magnitudes_above_six_saturate_and_zero_keeps_its_sign() {
        for x in [6.0f32, 6.5, 7.0, 8.0, 1e30, f32::MAX, f32::INFINITY] {
            assert_eq!(encode(x), 0x7, "{x}");
            assert_eq!(encode(-x), 0xF, "{}", -x);
        }
        assert_eq!(encode(0.0), 0x0);
        assert_eq!(encode(-0.0), 0x8);
        assert_eq!(encode(f32::from_bits(1)), 0x0);
        assert_eq!(encode(-f32::MIN_POSITIVE), 0x8);
        assert_eq!(encode(f32::NAN), MAX_CODE);
        assert_eq!(encode(-f32::NAN), MAX_CODE);
    }

    #[test]
    fn encode_is_the_nearest_code_over_a_dense_sweep() {
        // every f32 from 2^-10 to 16 at a stride, both signs, against the brute-force nearest
        let (lo, hi) = (2f32.powi(-10).to_bits(), 16f32.to_bits());
        let mut bits = lo;
        while bits <= hi {
            let x = f32::from_bits(bits);
            assert_eq!(encode(x), nearest(x), "{x}");
            assert_eq!(encode(-x), nearest(-x), "{}", -x);
            bits += 101;
        }
    }

    #[test]
    fn element_zero_sits_in_the_low_nibble() {
        assert_eq!(pack_pair(0x1, 0xF), 0xF1);
        assert_eq!(pack(&[0x1, 0xF, 0x7, 0x8]), vec![0xF1, 0x87]);
        // torch: float4_e2m1fn_x2 holding [0.5, -6.0] is the byte 0xF1
        assert_eq!(pack(&[encode(0.5), encode(-6.0)]), vec![0xF1]);
        let codes: Vec<u8> = (0..32).map(|i| (i * 7 % 16) as u8).collect();
        let packed = pack(&codes);
        assert_eq!(unpack(&packed), codes);
        for (i, &c) in codes.iter().enumerate() {
            assert_eq!(code_at(&packed, i), c, "element {i}");
        }
    }
}
