//! FP8 on the CPU, exact: e4m3fn and e5m2 codes to and from f32 with round-to-nearest-even and
//! saturation (OCP FP8 "saturating" conversion, as PTX `cvt.rn.satfinite` does on the GPU).
//!
//! - e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits. No infinities; S.1111.111 is NaN,
//!   so the largest finite value is S.1111.110 = 448. Smallest subnormal 2^-9.
//! - e5m2: 1 sign, 5 exponent (bias 15), 2 mantissa bits, IEEE-like: S.11111.00 is infinity,
//!   S.11111.{01,10,11} NaN, largest finite 57344. Smallest subnormal 2^-16.
//!
//! Encoding rounds the exact f32 value once, to nearest with ties to even; anything whose
//! magnitude is at or above the largest finite value (infinities included) becomes that value
//! with its sign; NaN becomes the canonical NaN code 0x7F; the sign of zero is kept. Decoding is
//! exact (every FP8 value is an f32), NaN codes decode to NaN and e5m2's infinity to infinity.

use std::fmt;
use std::str::FromStr;

use crate::error::Error;

/// The two FP8 formats Hopper's tensor cores take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Fp8Format {
    /// e4m3fn: more precision, range ±448 (activations and weights).
    E4m3,
    /// e5m2: more range, ±57344 (gradients).
    E5m2,
}

impl Fp8Format {
    pub const ALL: [Fp8Format; 2] = [Fp8Format::E4m3, Fp8Format::E5m2];

    /// Exponent bias.
    pub const fn bias(self) -> i32 {
        match self {
            Fp8Format::E4m3 => 7,
            Fp8Format::E5m2 => 15,
        }
    }

    /// Mantissa (fraction) bits.
    pub const fn mantissa_bits(self) -> u32 {
        match self {
            Fp8Format::E4m3 => 3,
            Fp8Format::E5m2 => 2,
        }
    }

    /// The largest finite magnitude: 448 or 57344.
    pub const fn max(self) -> f32 {
        match self {
            Fp8Format::E4m3 => 448.0,
            Fp8Format::E5m2 => 57344.0,
        }
    }

    /// The code of the largest finite positive value (0x7E or 0x7B).
    pub const fn max_code(self) -> u8 {
        match self {
            Fp8Format::E4m3 => 0x7E,
            Fp8Format::E5m2 => 0x7B,
        }
    }

    /// The NaN code encoding produces.
    pub const CANONICAL_NAN: u8 = 0x7F;

    /// The value of the lowest mantissa bit of a subnormal, 2^(1 - bias - mantissa bits).
    pub fn min_subnormal(self) -> f32 {
        2f32.powi(1 - self.bias() - self.mantissa_bits() as i32)
    }

    /// The value's code (RNE, saturating; see the module doc).
    pub fn encode(self, x: f32) -> u8 {
        if x.is_nan() {
            return Self::CANONICAL_NAN;
        }
        let sign = if x.is_sign_negative() { 0x80u8 } else { 0 };
        let a = x.abs();
        if a >= self.max() {
            return sign | self.max_code();
        }
        let mb = self.mantissa_bits() as i32;
        // The binade of `a` (exact for f32 normals; f32 subnormals are far below any FP8
        // subnormal and take the subnormal branch), clamped at the format's minimum normal
        // exponent: below it the quantum stays that of the subnormals.
        let e = if a == 0.0 {
            i32::MIN
        } else {
            (a.to_bits() >> 23) as i32 - 127
        };
        let emin = 1 - self.bias();
        let ex = e.max(emin);
        // a / quantum is exact in f64 (a power-of-two scaling of a 24-bit significand), so
        // rounding it to an integer is the single rounding of the conversion.
        let n = (a as f64 * 2f64.powi(mb - ex)).round_ties_even() as u32;
        // n counts quanta: below 2^mb a subnormal (exponent field 0), else 2^mb..=2^(mb+1),
        // where 2^(mb+1) carries into the next exponent as adding it to the field does.
        let code = if e < emin {
            n
        } else {
            (((ex + self.bias()) as u32) << mb) + (n - (1 << mb))
        };
        sign | code as u8
    }

    /// The exact value of `code` (NaN for NaN codes, ±infinity for e5m2's infinities).
    pub fn decode(self, code: u8) -> f32 {
        let mb = self.mantissa_bits();
        let ebits = 7 - mb;
        let exp = ((code & 0x7F) >> mb) as i32;
        let man = (code & ((1 << mb) - 1)) as i32;
        let top = (1 << ebits) - 1;
        let sign = if code & 0x80 != 0 { -1.0f32 } else { 1.0 };
        match self {
            Fp8Format::E4m3 if exp == top && man == (1 << mb) - 1 => return f32::NAN,
            Fp8Format::E5m2 if exp == top => {
                return if man == 0 {
                    sign * f32::INFINITY
                } else {
                    f32::NAN
                }
            }
            _ => {}
        }
        let v = if exp == 0 {
            man as f32 * self.min_subnormal()
        } else {
            (((1 << mb) + man) as f32) * 2f32.powi(exp - self.bias() - mb as i32)
        };
        sign * v
    }

    /// Whether `code` is a NaN of this format.
    pub fn is_nan(self, code: u8) -> bool {
        self.decode(code).is_nan()
    }

    /// The lowercase name (`e4m3`, `e5m2`) the CLI and the store use.
    pub fn name(self) -> &'static str {
        match self {
            Fp8Format::E4m3 => "e4m3",
            Fp8Format::E5m2 => "e5m2",
        }
    }

    /// The value the kernels' `KILN_FP8_*` defines give this format (0 e4m3, 1 e5m2).
    pub fn define(self) -> u32 {
        match self {
            Fp8Format::E4m3 => 0,
            Fp8Format::E5m2 => 1,
        }
    }
}

impl fmt::Display for Fp8Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Fp8Format {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().as_str() {
            "e4m3" | "e4m3fn" | "fp8" => Ok(Fp8Format::E4m3),
            "e5m2" => Ok(Fp8Format::E5m2),
            _ => Err(Error::Unknown {
                what: "fp8 format",
                name: s.into(),
                known: "e4m3, e5m2".into(),
            }),
        }
    }
}

/// Encodes every value of `xs`.
pub fn encode_all(fmt: Fp8Format, xs: &[f32]) -> Vec<u8> {
    xs.iter().map(|&x| fmt.encode(x)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every finite value of the format, sorted, with its code (positive codes only).
    fn finite_positive(fmt: Fp8Format) -> Vec<(f32, u8)> {
        let mut v: Vec<(f32, u8)> = (0u8..0x80)
            .map(|c| (fmt.decode(c), c))
            .filter(|(x, _)| x.is_finite())
            .collect();
        v.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        v
    }

    #[test]
    fn every_code_decodes_as_the_spec_tables_say() {
        let e4 = Fp8Format::E4m3;
        assert_eq!(e4.decode(0x00), 0.0);
        assert!(e4.decode(0x80).is_sign_negative() && e4.decode(0x80) == 0.0);
        assert_eq!(e4.decode(0x01), 2f32.powi(-9));
        assert_eq!(e4.decode(0x07), 7.0 * 2f32.powi(-9));
        assert_eq!(e4.decode(0x08), 2f32.powi(-6)); // min normal
        assert_eq!(e4.decode(0x38), 1.0);
        assert_eq!(e4.decode(0x7E), 448.0);
        assert_eq!(e4.decode(0xFE), -448.0);
        assert_eq!(e4.decode(0x78), 256.0);
        assert_eq!(e4.decode(0x77), 240.0);
        let nans: Vec<u8> = (0..=255u8).filter(|&c| e4.decode(c).is_nan()).collect();
        assert_eq!(nans, vec![0x7F, 0xFF]);
        assert!((0..=255u8).all(|c| !e4.decode(c).is_infinite()));

        let e5 = Fp8Format::E5m2;
        assert_eq!(e5.decode(0x01), 2f32.powi(-16));
        assert_eq!(e5.decode(0x04), 2f32.powi(-14));
        assert_eq!(e5.decode(0x3C), 1.0);
        assert_eq!(e5.decode(0x7B), 57344.0);
        assert_eq!(e5.decode(0x7C), f32::INFINITY);
        assert_eq!(e5.decode(0xFC), f32::NEG_INFINITY);
        let nans: Vec<u8> = (0..=255u8).filter(|&c| e5.decode(c).is_nan()).collect();
        assert_eq!(nans, vec![0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF]);
        // e5m2 is the top byte of an IEEE half: decode agrees with f16 for every code.
        for c in 0..=255u8 {
            let h = half::f16::from_bits((c as u16) << 8).to_f32();
            let d = e5.decode(c);
            if h.is_nan() {
                assert!(d.is_nan(), "{c:#x}");
            } else {
                assert_eq!(h.to_bits(), d.to_bits(), "{c:#x}: {h} vs {d}");
            }
        }
    }

    #[test]
    fn every_non_nan_code_round_trips() {
        for fmt in Fp8Format::ALL {
            for c in 0..=255u8 {
                let x = fmt.decode(c);
                if x.is_nan() {
                    assert_eq!(fmt.encode(x), Fp8Format::CANONICAL_NAN);
                    continue;
                }
                let back = fmt.encode(x);
                if x.is_infinite() {
                    // saturating: infinity becomes the largest finite value
                    assert_eq!(back, (c & 0x80) | fmt.max_code(), "{fmt} {c:#x}");
                } else {
                    assert_eq!(back, c, "{fmt} {c:#x} = {x}");
                }
            }
        }
    }

    #[test]
    fn midpoints_round_to_even_and_neighbours_to_nearest() {
        for fmt in Fp8Format::ALL {
            let vals = finite_positive(fmt);
            for w in vals.windows(2) {
                let ((lo, clo), (hi, chi)) = (w[0], w[1]);
                if lo == 0.0 && hi == 0.0 {
                    continue;
                }
                let mid = ((lo as f64 + hi as f64) / 2.0) as f32;
                assert_eq!(
                    mid as f64,
                    (lo as f64 + hi as f64) / 2.0,
                    "midpoint exact in f32"
                );
                let even = if clo % 2 == 0 { clo } else { chi };
                assert_eq!(
                    fmt.encode(mid),
                    even,
                    "{fmt}: tie {mid} between {lo} and {hi}"
                );
                assert_eq!(fmt.encode(-mid), 0x80 | even);
                let below = f32::from_bits(mid.to_bits() - 1);
                let above = f32::from_bits(mid.to_bits() + 1);
                assert_eq!(fmt.encode(below), clo, "{fmt}: just below {mid}");
                assert_eq!(fmt.encode(above), chi, "{fmt}: just above {mid}");
                // values strictly inside keep to their neighbour
                assert_eq!(fmt.encode(f32::from_bits(lo.to_bits() + 1)), clo);
                assert_eq!(fmt.encode(f32::from_bits(hi.to_bits() - 1)), chi);
            }
        }
    }

    #[test]
    fn saturation_infinities_nan_zero_and_tiny_values() {
        let e4 = Fp8Format::E4m3;
        for x in [448.0f32, 449.0, 464.0, 480.0, 1e6, f32::MAX, f32::INFINITY] {
            assert_eq!(e4.encode(x), 0x7E, "{x}");
            assert_eq!(e4.encode(-x), 0xFE, "{x}");
        }
        assert_eq!(e4.encode(447.99), 0x7E);
        assert_eq!(e4.encode(432.0), 0x7E); // tie between 416 and 448: even mantissa 110
        assert_eq!(e4.encode(431.99), 0x7D);
        let e5 = Fp8Format::E5m2;
        for x in [57344.0f32, 61440.0, 1e9, f32::INFINITY] {
            assert_eq!(e5.encode(x), 0x7B, "{x}");
            assert_eq!(e5.encode(-x), 0xFB, "{x}");
        }
        for fmt in Fp8Format::ALL {
            assert_eq!(fmt.encode(f32::NAN), 0x7F);
            assert_eq!(fmt.encode(-f32::NAN), 0x7F);
            assert_eq!(fmt.encode(0.0), 0x00);
            assert_eq!(fmt.encode(-0.0), 0x80);
            let s = fmt.min_subnormal();
            // half the smallest subnormal is a tie with zero: to zero (even)
            assert_eq!(fmt.encode(s / 2.0), 0x00);
            assert_eq!(fmt.encode(-s / 2.0), 0x80);
            assert_eq!(fmt.encode(f32::from_bits((s / 2.0).to_bits() + 1)), 0x01);
            assert_eq!(fmt.encode(1.5 * s), 0x02); // tie between 1 and 2 quanta: 2
            assert_eq!(fmt.encode(f32::from_bits(1)), 0x00); // f32 subnormal
            assert_eq!(fmt.encode(f32::MIN_POSITIVE), 0x00);
        }
    }

    #[test]
    fn encode_is_monotone_and_nearest_over_a_dense_sweep() {
        // Every f32 in a range covering both formats' subnormals to beyond saturation, at a
        // stride: the code decodes to the nearest value (ties to even, checked above).
        for fmt in Fp8Format::ALL {
            let vals = finite_positive(fmt);
            let lo = (fmt.min_subnormal() / 8.0).to_bits();
            let hi = (fmt.max() * 2.0).to_bits();
            let mut prev = 0u8;
            let mut x = lo;
            while x <= hi {
                let v = f32::from_bits(x);
                let c = fmt.encode(v);
                assert!(c >= prev, "{fmt}: not monotone at {v}");
                prev = c;
                let d = fmt.decode(c) as f64;
                let best = vals
                    .iter()
                    .map(|(y, _)| (*y as f64 - v as f64).abs())
                    .fold(f64::INFINITY, f64::min);
                assert!(
                    (d - v as f64).abs() <= best || v >= fmt.max(),
                    "{fmt}: {v} -> {d}"
                );
                x += 997;
            }
        }
    }

    #[test]
    fn names_parse() {
        assert_eq!("e4m3".parse::<Fp8Format>().unwrap(), Fp8Format::E4m3);
        assert_eq!("E4M3FN".parse::<Fp8Format>().unwrap(), Fp8Format::E4m3);
        assert_eq!("e5m2".parse::<Fp8Format>().unwrap(), Fp8Format::E5m2);
        assert_eq!("e3m4".parse::<Fp8Format>().unwrap_err().exit_code(), 2);
    }
}
