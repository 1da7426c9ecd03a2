//! `fp4 verify`'s suite as one list of checks: for NVFP4 and MXFP4, every code dequantised, the
//! GPU's quantisation bit for bit against the CPU's (a problem on the runner: a tensor drawn
//! from a seed, the GPU's quantiser, judged against the CPU format; its dequantisation checked
//! after it), NaN and infinity refused; then the NVFP4 GEMV suite.

use super::fp4::{
    cpu_quantize, every_code_tensor_scales, fp4_outcome, gemv_suite, outcomes_or_failure, tensor,
    upload, verify_dequantization, verify_every_code, verify_gemv, verify_refusal, Values,
};
use super::outcome::Outcome;
use super::runner::{self, Check};
use super::verify::fresh_seed;
use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::formats::fp4;
use crate::ops::fp4::{quantize, Fp4Format, Fp4Matrix, GemvProblem};
use crate::ops::gemm::DType;

/// One check of `fp4 verify`'s suite.
pub enum Fp4Check {
    /// Every code times every scale code of a format, under one tensor scale.
    EveryCode(Fp4Format, f32),
    Quantize(QuantCase),
    /// A NaN or an infinity in a tensor of the input type: refused at the element the CPU names.
    Refuse(Fp4Format, DType, f32),
    Gemv(GemvProblem),
}

/// The suite (`quick`: without the 300-row tensors, the quick GEMV shapes), in the order the
/// table lists it.
pub fn suite(quick: bool) -> Vec<Fp4Check> {
    let mut v = Vec::new();
    for format in Fp4Format::ALL {
        let scales = every_code_tensor_scales(format);
        v.extend(scales.into_iter().map(|g| Fp4Check::EveryCode(format, g)));
        let b = format.block();
        for input in [DType::Bf16, DType::F16, DType::F32] {
            let mut cases = vec![
                (Values::Spread, 37, 7 * b),
                (Values::Spread, 1, b),
                (Values::Ties, 3, 4 * b),
                (Values::Zeros, 2, 2 * b),
                (Values::Huge, 5, 3 * b),
                (Values::Tiny, 5, 3 * b),
            ];
            if !quick {
                cases.push((Values::Spread, 300, 64 * b));
            }
            for (values, rows, k) in cases {
                let case = QuantCase {
                    format,
                    input,
                    values,
                    rows,
                    k,
                };
                v.push(Fp4Check::Quantize(case));
            }
            let poisons = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY];
            v.extend(poisons.map(|poison| Fp4Check::Refuse(format, input, poison)));
        }
    }
    v.extend(gemv_suite(quick).into_iter().map(Fp4Check::Gemv));
    v
}

/// Runs one check of the suite on fresh inputs: its outcomes, or, when the case could not run
/// (an input or a shape refused), one failed outcome saying why. A refusal check's refusal is
/// its expected result: a passed check, not an error.
pub fn verify(ctx: &Context, c: &Fp4Check) -> Result<Vec<Outcome>> {
    let one = |o: Result<Outcome>| o.map(|o| vec![o]);
    let (kind, case, r) = match c {
        &Fp4Check::EveryCode(f, g) => (
            "dequantize",
            format!("{f}: every code, tensor scale {g}"),
            verify_every_code(ctx, f, g),
        ),
        Fp4Check::Quantize(q) => ("quantize", q.label(), q.verify(ctx)),
        &Fp4Check::Refuse(f, input, poison) => (
            "refuse",
            format!("{f} from {input}, {poison}"),
            one(verify_refusal(ctx, f, input, poison)),
        ),
        Fp4Check::Gemv(p) => ("gemv", p.label(), one(verify_gemv(ctx, p))),
    };
    outcomes_or_failure(kind, case, r)
}

/// A rows x K tensor of `values` in `input`, quantised to `format` on the GPU and checked bit for
/// bit against the CPU's quantisation; the GPU's codes then dequantised to every output dtype.
#[derive(Debug, Clone, Copy)]
pub struct QuantCase {
    pub format: Fp4Format,
    pub input: DType,
    pub values: Values,
    pub rows: usize,
    pub k: usize,
}

impl QuantCase {
    fn label(&self) -> String {
        let (format, input, values) = (self.format, self.input, self.values);
        format!(
            "{format} from {input}, {}x{}, {values:?}",
            self.rows, self.k
        )
    }

    /// The quantisation's outcome, then the dequantisation's of its codes.
    fn verify(&self, ctx: &Context) -> Result<Vec<Outcome>> {
        let (o, drawn) = runner::run_keeping(ctx, self, fresh_seed())?;
        let seed = o.seed;
        let mut out = vec![o];
        if let Some(QuantDrawn {
            codes,
            scales,
            q: Some(q),
            ..
        }) = drawn
        {
            let (view, label) = (q.view(), self.label());
            out.extend(verify_dequantization(
                ctx, &view, &codes, &scales, &label, seed,
            )?);
        }
        Ok(out)
    }
}

/// The tensor as the input type holds it (host and device), the CPU's codes, scales and tensor
/// scale of it, and the GPU's quantisation once launched.
pub struct QuantDrawn {
    xs: Vec<f32>,
    x: DeviceBuffer,
    codes: Vec<u8>,
    scales: Vec<u8>,
    tensor_scale: f32,
    q: Option<Fp4Matrix>,
}

impl Check for QuantCase {
    type Drawn = QuantDrawn;

    fn blank(&self, seed: u64) -> Outcome {
        fp4_outcome("quantize", self.label(), seed)
    }

    fn supports(&self, _ctx: &Context) -> std::result::Result<(), String> {
        Ok(())
    }

    fn draw(&self, _ctx: &Context, seed: u64) -> Result<QuantDrawn> {
        let xs = tensor(self.values, self.input, self.rows, self.k, seed);
        let (codes, scales, tensor_scale) = cpu_quantize(self.format, &xs, self.rows, self.k)?;
        let x = upload(&xs, self.input)?;
        Ok(QuantDrawn {
            xs,
            x,
            codes,
            scales,
            tensor_scale,
            q: None,
        })
    }

    fn launch(&self, ctx: &Context, d: &mut QuantDrawn) -> Result<()> {
        let (input, rows, k, format) = (self.input, self.rows, self.k, self.format);
        d.q = Some(quantize(ctx, &d.x, input, rows, k, k, format, None)?);
        Ok(())
    }

    fn flops(&self) -> f64 {
        0.0
    }

    fn judge(&self, d: &QuantDrawn, o: &mut Outcome) -> Result<()> {
        let k = self.k;
        let Some(q) = &d.q else {
            return Err(Error::invalid(
                "the FP4 quantisation was judged before its launch",
            ));
        };
        let gc: Vec<u8> = q.codes.download(d.codes.len())?;
        let gs: Vec<u8> = q.scales.download(d.scales.len())?;
        let (mut bad, mut first) = (0, None);
        let g = d.tensor_scale;
        if q.tensor_scale.to_bits() != g.to_bits() {
            bad += 1;
            first = Some(format!("tensor scale {} (CPU {g})", q.tensor_scale));
        }
        for (i, (a, b)) in gs.iter().zip(&d.scales).enumerate() {
            if a != b {
                bad += 1;
                first.get_or_insert_with(|| format!("scale {i}: {a:#04x} (CPU {b:#04x})"));
            }
        }
        for (i, x) in d.xs.iter().enumerate() {
            let (a, b) = (fp4::code_at(&gc, i), fp4::code_at(&d.codes, i));
            if a != b {
                bad += 1;
                first.get_or_insert_with(|| {
                    format!(
                        "element ({}, {}) = {x}: code {a:#x} (CPU {b:#x})",
                        i / k,
                        i % k
                    )
                });
            }
        }
        *o = o.clone().judge_bits(bad, first);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suite_keeps_each_formats_checks_in_order_then_the_gemvs() {
        for (quick, tensors) in [(true, 6), (false, 7)] {
            let s = suite(quick);
            let quantize = s.iter().filter(|c| matches!(c, Fp4Check::Quantize(_)));
            assert_eq!(quantize.count(), 2 * 3 * tensors);
            let refuse = s.iter().filter(|c| matches!(c, Fp4Check::Refuse(..)));
            assert_eq!(refuse.count(), 2 * 3 * 3);
            let gemvs = s.iter().filter(|c| matches!(c, Fp4Check::Gemv(_)));
            assert_eq!(gemvs.count(), gemv_suite(quick).len());
            assert!(matches!(s[0], Fp4Check::EveryCode(Fp4Format::Nvfp4, _)));
        }
    }
}
