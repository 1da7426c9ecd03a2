//! Scale recipes: how a block's largest magnitude (amax) becomes the scale that maps it onto an
//! FP8 format's range, and how one value is quantised with it. The quantisation kernels
//! (`kernels/quant/fp8_quant.cu`, `common/fp8.cuh`) do exactly this arithmetic, so CPU and GPU
//! agree bit for bit.
//!
//! - amax = the largest |x| of the block, NaN ignored (as `fmaxf`), starting from 0.
//! - fp32 recipe: scale = max(amax / fmt.max(), 2^-126), one f32 division rounded to nearest
//!   (DeepSeek's amax / 448; the floor keeps an all-zero or tiny block's scale a normal number).
//! - UE8M0 recipe: the fp32 scale rounded up to a power of two (the next one unless it already
//!   is one), so the scale is an 8-bit exponent and scaling loses nothing; amax / scale stays
//!   within the format's range.
//! - quantised code = fmt.encode(x / scale) (f32 division, rounded to nearest, then the
//!   saturating FP8 conversion); its value is decode(code) * scale.
//!
//! Non-finite input: a NaN stays NaN (code 0x7F) and does not enter amax; an infinite input
//! makes its block's scale infinite, so that block's finite values quantise to zero.

use std::fmt;
use std::str::FromStr;

use super::fp8::Fp8Format;
use crate::error::Error;

/// How a scale is derived from a block's amax.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ScaleRecipe {
    /// amax / max, any fp32 value.
    Fp32,
    /// amax / max rounded up to a power of two (an unsigned 8-bit exponent, OCP E8M0).
    Ue8m0,
}

impl ScaleRecipe {
    pub const ALL: [ScaleRecipe; 2] = [ScaleRecipe::Fp32, ScaleRecipe::Ue8m0];

    pub fn name(self) -> &'static str {
        match self {
            ScaleRecipe::Fp32 => "fp32",
            ScaleRecipe::Ue8m0 => "ue8m0",
        }
    }
}

impl fmt::Display for ScaleRecipe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ScaleRecipe {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        match s.to_ascii_lowercase().as_str() {
            "fp32" | "f32" => Ok(ScaleRecipe::Fp32),
            "ue8m0" | "e8m0" | "pow2" => Ok(ScaleRecipe::Ue8m0),
            _ => Err(Error::Unknown {
                what: "scale recipe",
                name: s.into(),
                known: "fp32, ue8m0".into(),
            }),
        }
    }
}

/// The largest magnitude of `xs`, NaN ignored, 0 for none.
pub fn amax(xs: impl IntoIterator<Item = f32>) -> f32 {
    xs.into_iter().fold(0.0f32, |m, x| m.max(x.abs()))
}

/// The scale of a block whose largest magnitude is `amax`.
pub fn scale_for(amax: f32, fmt: Fp8Format, recipe: ScaleRecipe) -> f32 {
    let s = (amax / fmt.max()).max(f32::MIN_POSITIVE);
    match recipe {
        ScaleRecipe::Fp32 => s,
        ScaleRecipe::Ue8m0 => round_up_pow2(s),
    }
}

/// The smallest power of two at or above `s` (a positive normal f32 or +infinity).
pub fn round_up_pow2(s: f32) -> f32 {
    let bits = s.to_bits();
    if bits & 0x007F_FFFF == 0 {
        s
    } else {
        f32::from_bits((bits & 0x7F80_0000) + 0x0080_0000)
    }
}

/// The UE8M0 code of a power-of-two scale: its biased exponent (2^-127 .. 2^127; 0xFF NaN).
pub fn ue8m0_code(scale: f32) -> Option<u8> {
    let bits = scale.to_bits();
    (bits & 0x807F_FFFF == 0 && scale.is_finite()).then_some((bits >> 23) as u8)
}

/// `x`'s code under `scale`.
pub fn quantize_one(x: f32, scale: f32, fmt: Fp8Format) -> u8 {
    fmt.encode(x / scale)
}

/// The value `code` stands for under `scale`, exactly (in f64).
pub fn dequantize_one(code: u8, scale: f32, fmt: Fp8Format) -> f64 {
    fmt.decode(code) as f64 * scale as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fp32_scale_is_amax_over_max_with_a_floor() {
        let e4 = Fp8Format::E4m3;
        assert_eq!(scale_for(448.0, e4, ScaleRecipe::Fp32), 1.0);
        assert_eq!(scale_for(896.0, e4, ScaleRecipe::Fp32), 2.0);
        assert_eq!(scale_for(1.0, e4, ScaleRecipe::Fp32), 1.0 / 448.0);
        assert_eq!(scale_for(0.0, e4, ScaleRecipe::Fp32), f32::MIN_POSITIVE);
        assert_eq!(scale_for(1e-40, e4, ScaleRecipe::Fp32), f32::MIN_POSITIVE);
        assert_eq!(scale_for(57344.0, Fp8Format::E5m2, ScaleRecipe::Fp32), 1.0);
        assert_eq!(
            scale_for(f32::INFINITY, e4, ScaleRecipe::Fp32),
            f32::INFINITY
        );
    }

    #[test]
    fn ue8m0_rounds_up_to_a_power_of_two() {
        let e4 = Fp8Format::E4m3;
        assert_eq!(scale_for(448.0, e4, ScaleRecipe::Ue8m0), 1.0);
        assert_eq!(scale_for(449.0, e4, ScaleRecipe::Ue8m0), 2.0);
        assert_eq!(scale_for(447.0, e4, ScaleRecipe::Ue8m0), 1.0);
        assert_eq!(scale_for(224.0, e4, ScaleRecipe::Ue8m0), 0.5);
        assert_eq!(scale_for(1.0, e4, ScaleRecipe::Ue8m0), 2f32.powi(-8));
        assert_eq!(scale_for(0.0, e4, ScaleRecipe::Ue8m0), f32::MIN_POSITIVE);
        assert_eq!(round_up_pow2(f32::MAX), f32::INFINITY);
        assert_eq!(ue8m0_code(1.0), Some(127));
        assert_eq!(ue8m0_code(2f32.powi(-126)), Some(1));
        assert_eq!(ue8m0_code(3.0), None);
        // Whatever amax, amax / scale stays within range and the scale is a power of two.
        let mut x = 1e-30f32;
        while x < 1e30 {
            for fmt in Fp8Format::ALL {
                let s = scale_for(x, fmt, ScaleRecipe::Ue8m0);
                assert!(ue8m0_code(s).is_some(), "{x}: {s}");
                assert!(x / s <= fmt.max(), "{x}: {s}");
                assert!(
                    x / s > fmt.max() / 2.0 || s == f32::MIN_POSITIVE,
                    "{x}: {s}"
                );
                let f = scale_for(x, fmt, ScaleRecipe::Fp32);
                assert!(s >= f && s < 2.0 * f, "{x}");
            }
            x *= 1.37;
        }
    }

    #[test]
    fn a_blocks_amax_lands_on_the_largest_code_and_nan_is_ignored() {
        let xs = [0.5f32, -3.0, f32::NAN, 2.0];
        assert_eq!(amax(xs), 3.0);
        assert_eq!(amax([]), 0.0);
        for fmt in Fp8Format::ALL {
            let s = scale_for(amax(xs), fmt, ScaleRecipe::Fp32);
            assert_eq!(quantize_one(-3.0, s, fmt), 0x80 | fmt.max_code());
            assert_eq!(quantize_one(f32::NAN, s, fmt), 0x7F);
            assert!((dequantize_one(quantize_one(-3.0, s, fmt), s, fmt) + 3.0).abs() < 1e-6);
        }
    }

    #[test]
    fn names_parse() {
        assert_eq!("ue8m0".parse::<ScaleRecipe>().unwrap(), ScaleRecipe::Ue8m0);
        assert_eq!("FP32".parse::<ScaleRecipe>().unwrap(), ScaleRecipe::Fp32);
        assert!("e4m3".parse::<ScaleRecipe>().is_err());
    }
}
