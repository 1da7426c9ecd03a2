//! `fp8 verify`'s suite as one list of checks: the GPU's conversions and quantisation bit for bit
//! against the CPU's (each a problem on the runner: drawn from a seed, the GPU's kernel, judged
//! against the CPU formats), then the GEMM cases, then the promotion check.

use super::fp8::{
    as_input, bits_differ, fp8_outcome, gemm_suite, random_matrix, verify_gemm, verify_promotion,
    Data, GemmCase,
};
use super::outcome::Outcome;
use super::runner::{self, Check};
use super::verify::fresh_seed;
use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::formats::{Fp8Format, ScaleRecipe};
use crate::ops::fp8::convert;
use crate::ops::fp8::{self, Granularity, QuantSpec};
use crate::ops::gemm::DType;
use crate::reference::fp8 as reference;

/// One check of `fp8 verify`'s suite.
pub enum Fp8Check {
    /// The probe values' encodings and every code's decoding, e4m3 and e5m2.
    Convert,
    /// A rows x cols tensor of `input` quantised as `spec`.
    Quantize(QuantCase),
    Gemm(GemmCase),
    /// Unpromoted against promoted accumulation at K = 16,384.
    Promotion,
}

/// The suite (`quick`: bf16 inputs and the quick GEMM cases): the conversions, every format,
/// granularity and recipe quantised from each input type, the GEMM cases, the promotion check.
pub fn suite(quick: bool) -> Vec<Fp8Check> {
    let inputs: &[DType] = if quick {
        &[DType::Bf16]
    } else {
        &[DType::Bf16, DType::F16, DType::F32]
    };
    let mut v = vec![Fp8Check::Convert];
    for &input in inputs {
        for format in Fp8Format::ALL {
            for granularity in Granularity::ALL {
                for recipe in ScaleRecipe::ALL {
                    let spec = QuantSpec {
                        format,
                        granularity,
                        recipe,
                    };
                    let (rows, cols) = (300, 1000);
                    v.push(Fp8Check::Quantize(QuantCase {
                        input,
                        spec,
                        rows,
                        cols,
                    }));
                }
            }
        }
    }
    v.extend(gemm_suite(quick).into_iter().map(Fp8Check::Gemm));
    v.push(Fp8Check::Promotion);
    v
}

/// Runs one check of the suite on fresh inputs (the GEMM's with cuBLASLt's beside it when
/// `vendor`).
pub fn verify(ctx: &Context, c: &Fp8Check, vendor: bool) -> Result<Vec<Outcome>> {
    Ok(match c {
        Fp8Check::Convert => vec![verify_conversions(ctx)?],
        Fp8Check::Quantize(q) => vec![runner::run(ctx, q, fresh_seed())?],
        Fp8Check::Gemm(g) => verify_gemm(ctx, g, vendor)?,
        Fp8Check::Promotion => vec![verify_promotion(ctx)?],
    })
}

/// The GPU's encodings of the probe values and decodings of all 256 codes against the CPU's.
pub fn verify_conversions(ctx: &Context) -> Result<Outcome> {
    let seed = fresh_seed();
    let xs = convert::probe_values(200_000, seed);
    let bad = convert::mismatches(&xs, &convert::convert_on_device(ctx, &xs)?);
    let case = format!("{} values, 256 codes, e4m3 and e5m2", xs.len());
    let first = (!bad.is_empty()).then(|| bad[..bad.len().min(3)].join("; "));
    Ok(fp8_outcome("convert", case, seed).judge_bits(bad.len(), first))
}

/// A rows x cols tensor of `input` quantised on the GPU as `spec`, its codes and scales checked
/// bit for bit against the CPU's quantisation of the same values.
#[derive(Debug, Clone, Copy)]
pub struct QuantCase {
    pub input: DType,
    pub spec: QuantSpec,
    pub rows: usize,
    pub cols: usize,
}

/// The values as the input type holds them, on the device, and the GPU's quantisation once
/// launched.
pub struct QuantDrawn {
    vals: Vec<f32>,
    x: DeviceBuffer,
    q: Option<fp8::Quantized>,
}

impl Check for QuantCase {
    type Drawn = QuantDrawn;

    fn blank(&self, seed: u64) -> Outcome {
        let (input, rows, cols, spec) = (self.input, self.rows, self.cols, self.spec);
        fp8_outcome("quantize", format!("{input} {rows}x{cols} -> {spec}"), seed)
    }

    fn supports(&self, _ctx: &Context) -> std::result::Result<(), String> {
        Ok(())
    }

    /// Signed random data with special values: a zero block, a NaN, a value beyond the
    /// format's range, a signed zero.
    fn draw(&self, _ctx: &Context, seed: u64) -> Result<QuantDrawn> {
        let (rows, cols) = (self.rows, self.cols);
        let mut x = random_matrix(rows, cols, Data::Signed, seed);
        x.iter_mut().take(cols.min(128)).for_each(|v| *v = 0.0);
        if rows * cols > 300 {
            x[200] = f32::NAN;
            x[260] = -0.0;
            x[rows * cols - 1] = 1e6;
        }
        let (bytes, vals) = as_input(&x, self.input);
        let x = DeviceBuffer::from_host(&bytes)?;
        Ok(QuantDrawn { vals, x, q: None })
    }

    fn launch(&self, ctx: &Context, d: &mut QuantDrawn) -> Result<()> {
        let (rows, cols) = (self.rows, self.cols);
        d.q = Some(fp8::quantize(
            ctx, &d.x, self.input, rows, cols, cols, self.spec,
        )?);
        Ok(())
    }

    fn flops(&self) -> f64 {
        0.0
    }

    fn judge(&self, d: &QuantDrawn, o: &mut Outcome) -> Result<()> {
        let (rows, cols, spec) = (self.rows, self.cols, self.spec);
        let Some(q) = &d.q else {
            return Err(Error::invalid(
                "the FP8 quantisation was judged before its launch",
            ));
        };
        let codes: Vec<u8> = q.codes.download(rows * cols)?;
        let scales: Vec<f32> = q
            .scales
            .download(spec.granularity.scale_count(rows, cols))?;
        let (want_codes, want_scales) = reference::quantize(&d.vals, rows, cols, cols, spec);
        let (bad_codes, bad_scales) = bits_differ(&codes, &want_codes, &scales, &want_scales);
        o.mismatches = bad_codes + bad_scales;
        o.passed = o.mismatches == 0;
        o.message = if o.passed {
            "bit-exact".into()
        } else {
            let first = codes.iter().zip(&want_codes).position(|(a, b)| a != b);
            format!(
                "{bad_codes} codes and {bad_scales} scales differ (first code at {first:?}: GPU {:?}, CPU {:?})",
                first.map(|i| codes[i]),
                first.map(|i| want_codes[i])
            )
        };
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suite_lists_the_format_checks_then_the_gemms_then_the_promotion() {
        for (quick, inputs) in [(true, 1), (false, 3)] {
            let s = suite(quick);
            let quantize = s.iter().filter(|c| matches!(c, Fp8Check::Quantize(_)));
            assert_eq!(quantize.count(), inputs * 2 * 4 * 2);
            let gemms = s.iter().filter(|c| matches!(c, Fp8Check::Gemm(_)));
            assert_eq!(gemms.count(), gemm_suite(quick).len());
            assert!(
                matches!(s[0], Fp8Check::Convert) && matches!(s.last(), Some(Fp8Check::Promotion))
            );
        }
    }
}
