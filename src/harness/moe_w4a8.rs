//! Verification of the W4A8 experts (MXFP4 weights, e4m3 activations on the FP8 tensor cores):
//! random MXFP4 weights for the experts that own rows (the others poisoned so that a stray read
//! is NaN), X drawn in bf16 and quantised by kiln's FP8 quantiser (1x128 scales), one launch into
//! a poisoned Y, scored against the float64 reference on the dequantised operands (X's codes
//! times their scales, the weights' exact MXFP4 values); and its shape suite.

use super::moe_fp4::OUTPUT_BOUND;
use super::moe_fp4_data::{random_expert_weights, reference_by_expert, touched_experts};
use super::moe_verify::{rows_to_check, score_against, settle, Mode};
use super::outcome::{Extra, Outcome};
use super::runner::Check;
use super::verify::{bound, fresh_seed};
use crate::device::{Context, DeviceBuffer};
use crate::error::Result;
use crate::formats::scale::dequantize_one;
use crate::formats::{Fp8Format, ScaleRecipe};
use crate::ops::fp8::{self, Granularity, QuantSpec};
use crate::ops::gemm::DType;
use crate::ops::moe::fp4::kernel_w4a8::{W4a8Layout, NAME};
use crate::ops::moe::fp4::w4a8::{prepack_w4a8, prepack_w4a8_swiglu, POISON};
use crate::ops::moe::fp4::{Fp4Format, Fp4Weights, W4a8Experts, W4a8Operands};
use crate::ops::moe::fp8_problem::Fp8MoeProblem;
use crate::ops::moe::schedule::sched_bytes;
use crate::ops::moe::{MoeProblem, WeightLayout};
use crate::reference::data::HostData;

/// The rows layout of `p` as the 16-bit MoE problem the scoring and reference read (bf16 out,
/// the SwiGLU's W1 and W3 separate).
pub fn scored_problem(p: &Fp8MoeProblem) -> MoeProblem {
    let m = p.layout();
    match p.swiglu {
        Some(s) => m.with_swiglu(WeightLayout::Separate, s.routed),
        None => m,
    }
}

/// The W4A8 suite: empty experts, one expert with every row, 256 experts, ragged counts (1, 63,
/// 64, 65, 129, 200: a tile's second consumer idle or partly filled), K not a multiple of 128, N
/// not a multiple of 128, the masked layout; GEMM and SwiGLU, routed or not.
pub fn w4a8_suite() -> Vec<Fp8MoeProblem> {
    let ragged = [0, 1, 63, 64, 65, 0, 129, 200, 7];
    let many = super::moe_shapes::many_experts();
    let c = Fp8MoeProblem::contiguous;
    vec![
        c(&ragged, 256, 512),
        c(&[0, 0, 300, 0], 200, 160),
        c(&[1], 128, 128),
        c(&many, 128, 256),
        Fp8MoeProblem::masked(&[0, 3, 64, 1, 100], 128, 256, 384),
        c(&ragged, 256, 512).with_swiglu(true, false),
        c(&ragged, 136, 224).with_swiglu(false, false),
        c(&[0, 300, 0, 129, 1], 128, 1024).with_swiglu(true, false),
        c(&many, 128, 128).with_swiglu(true, false),
        Fp8MoeProblem::masked(&[0, 3, 64, 1, 100], 128, 256, 384).with_swiglu(true, false),
    ]
}

/// Verifies the W4A8 kernel on `p` once, with fresh inputs.
pub fn verify_w4a8(ctx: &Context, p: &Fp8MoeProblem) -> Result<Outcome> {
    verify_w4a8_seeded(ctx, p, fresh_seed())
}

pub fn verify_w4a8_seeded(ctx: &Context, p: &Fp8MoeProblem, seed: u64) -> Result<Outcome> {
    p.validate()?;
    super::runner::run(ctx, &W4a8Check(p), seed)
}

/// Lowers one block scale in 8 of the W4A8 check's weights (drawn over 6 binades a row, which
/// names only the tables of offsets u 0..6) so that the prepack names every table: in experts
/// whose id is 2 mod 3 by 6-9 binades (u down to -8: tables 0..2, whose e4m3 bytes are
/// subnormal), in the others by 1-6 (u down to -5: every normal table, F191). A row's
/// scales then span at most 2^14, what the prepack takes.
fn spread_scales(w: &mut Fp4Weights, ids: &[usize], seed: u64) {
    let per = w.scales.len() / ids.len().max(1);
    for (e, &id) in ids.iter().enumerate() {
        for (i, s) in w.scales[e * per..(e + 1) * per].iter_mut().enumerate() {
            let h = (seed ^ ((id * per + i) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
                .wrapping_mul(0xBF58_476D_1CE4_E5B9)
                >> 40;
            if h.is_multiple_of(8) {
                let by = if id % 3 == 2 {
                    6 + (h >> 3) % 4
                } else {
                    1 + (h >> 3) % 6
                };
                *s -= by as u8;
            }
        }
    }
}

/// The W4A8 kernel on one problem, as the runner checks it.
struct W4a8Check<'a>(&'a Fp8MoeProblem);

/// The drawn weights (host, and prepacked on the GPU with the untouched experts poisoned), X
/// quantised on the GPU, the routing weights, Y's poison and the call's buffers.
struct W4a8Drawn {
    mp: MoeProblem,
    touched: Vec<usize>,
    w: Fp4Weights,
    w3: Option<Fp4Weights>,
    layout: W4a8Layout,
    wbuf: DeviceBuffer,
    /// X in bf16, kept until the quantiser that reads it has run.
    _x: DeviceBuffer,
    q: fp8::Quantized,
    route: Option<HostData>,
    poison: HostData,
    /// escale, Y, the rows array, the routing weights, the schedule.
    bufs: (
        DeviceBuffer,
        DeviceBuffer,
        DeviceBuffer,
        Option<DeviceBuffer>,
        DeviceBuffer,
    ),
}

impl Check for W4a8Check<'_> {
    type Drawn = W4a8Drawn;

    fn blank(&self, seed: u64) -> Outcome {
        Outcome::new(
            format!("{NAME} (mxfp4 x e4m3)"),
            self.0.label(),
            seed,
            bound(DType::Bf16),
            Extra::Moe { mode: Mode::Direct },
        )
    }

    fn supports(&self, ctx: &Context) -> std::result::Result<(), String> {
        W4a8Experts::supports(self.0, &ctx.info)
    }

    fn draw(&self, ctx: &Context, seed: u64) -> Result<W4a8Drawn> {
        let p = self.0;
        let mp = scored_problem(p);
        // the touched experts' MXFP4 weights, prepacked; the others poisoned on the GPU
        let touched = touched_experts(&mp);
        let f = Fp4Format::Mxfp4;
        let mut w = random_expert_weights(f, &touched, p.n, p.k, seed.wrapping_add(1))?;
        spread_scales(&mut w, &touched, seed);
        let w3 = match p.swiglu {
            Some(_) => {
                let mut w3 = random_expert_weights(f, &touched, p.n, p.k, seed ^ 0x5A5A_5A5A)?;
                spread_scales(&mut w3, &touched, seed ^ 0x3C3C);
                Some(w3)
            }
            None => None,
        };
        let packed = match &w3 {
            Some(w3) => prepack_w4a8_swiglu(&w, Some(w3))?,
            None => prepack_w4a8(&w)?,
        };
        let layout = W4a8Layout {
            experts: p.experts,
            ..packed.layout()
        };
        let eb = layout.expert_bytes();
        let wbuf = DeviceBuffer::new(p.experts * eb)?;
        wbuf.fill_bytes(POISON, ctx)?;
        let per = packed.escale.len() / touched.len().max(1);
        let mut escale = vec![f32::NAN; layout.escale_len()];
        settle()?;
        for (i, &e) in touched.iter().enumerate() {
            wbuf.upload_at(e * eb, &packed.bytes[i * eb..(i + 1) * eb])?;
            escale[e * per..(e + 1) * per].copy_from_slice(&packed.escale[i * per..(i + 1) * per]);
        }
        // X in bf16, quantised on the GPU with 1x128 scales (the codes and scales come back for
        // the reference)
        let (xr, k) = (p.x_rows(), p.k);
        let x = HostData::random(DType::Bf16, xr * k, seed);
        let xbuf = DeviceBuffer::from_host(x.bytes())?;
        let spec = QuantSpec::e4m3(Granularity::Block1x128, ScaleRecipe::Fp32);
        let q = fp8::quantize(ctx, &xbuf, DType::Bf16, xr, k, k, spec)?;
        let x = xbuf;
        let route = p
            .swiglu
            .is_some_and(|s| s.routed)
            .then(|| HostData::random(DType::F32, xr, seed.wrapping_add(3)));
        let poison = HostData::poison(DType::Bf16, xr * p.n);
        let bufs = (
            DeviceBuffer::from_host(&escale)?,
            DeviceBuffer::from_host(poison.bytes())?,
            DeviceBuffer::from_host(mp.rows_array())?,
            route
                .as_ref()
                .map(|r| DeviceBuffer::from_host(r.bytes()))
                .transpose()?,
            DeviceBuffer::new(sched_bytes(p.experts))?,
        );
        settle()?;
        Ok(W4a8Drawn {
            mp,
            touched,
            w,
            w3,
            layout,
            wbuf,
            _x: x,
            q,
            route,
            poison,
            bufs,
        })
    }

    fn launch(&self, ctx: &Context, d: &mut W4a8Drawn) -> Result<()> {
        let ops = W4a8Operands {
            x: &d.q.codes,
            sx: &d.q.scales,
            w: &d.wbuf,
            escale: &d.bufs.0,
            y: &d.bufs.1,
            rows: &d.bufs.2,
            route: d.bufs.3.as_ref(),
            sched: &d.bufs.4,
        };
        W4a8Experts::check(self.0, &d.layout, &ops)?;
        W4a8Experts::launch(ctx, self.0, &d.layout, &ops)
    }

    fn flops(&self) -> f64 {
        self.0.flops()
    }

    fn judge(&self, d: &W4a8Drawn, out: &mut Outcome) -> Result<()> {
        let (p, mp) = (self.0, &d.mp);
        let (xr, k) = (p.x_rows(), p.k);
        let got = HostData::from_bytes(DType::Bf16, &d.bufs.1.download::<u8>(xr * p.n * 2)?);
        let codes = d.q.codes.download::<u8>(xr * k)?;
        let scales =
            d.q.scales
                .download::<f32>(Granularity::Block1x128.scale_count(xr, k))?;
        let rows = rows_to_check(mp, out.seed);
        let x_row = |r: usize| -> Vec<f64> {
            (0..k)
                .map(|c| {
                    dequantize_one(
                        codes[r * k + c],
                        scales[(c / 128) * xr + r],
                        Fp8Format::E4m3,
                    )
                })
                .collect()
        };
        let rt = |r: usize| d.route.as_ref().map_or(1.0, |h| h.get(r));
        let reference =
            reference_by_expert(mp, &d.touched, &d.w, d.w3.as_ref(), &x_row, &rt, &rows)?;
        score_against(mp, &reference, &got, &d.poison, &rows).judge(out, rows.len(), OUTPUT_BOUND);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suite_is_valid_and_covers_the_edges() {
        let s = w4a8_suite();
        for p in &s {
            p.validate().unwrap();
        }
        assert!(s.iter().any(|p| p.experts == 256));
        assert!(s.iter().any(|p| p.k % 128 != 0) && s.iter().any(|p| p.n % 128 != 0));
        assert!(s.iter().any(|p| p.swiglu.is_some()) && s.iter().any(|p| p.swiglu.is_none()));
        assert!(s.iter().any(|p| p.layout().is_masked()));
        // a tile whose second consumer has no tokens, one token, some
        let c = &s[0];
        for rows in [1, 64, 65, 129, 200] {
            assert!(c.layout().spans().iter().any(|x| x.1 == rows), "{rows}");
        }
    }
}
