//! FP4 verification on the GPU: quantisation to NVFP4 and MXFP4 from every input dtype bit for bit
//! against the CPU formats (random tensors of odd shapes, every code and scale, zeros, huge and
//! tiny values, NaN and infinity refused at the same element), dequantisation to every output
//! dtype against the exact value rounded once, and the NVFP4 GEMV against float64; the suite as
//! one list of checks is [`super::fp4_checks`].

use half::bf16;
use rand::{Rng, SeedableRng};

use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::formats::{fp4, mxfp4, nvfp4};
use crate::harness::fp8::as_input;
use crate::harness::outcome::{Extra, Outcome};
use crate::harness::runner::{self, Check};
use crate::harness::verify::{fresh_seed, rel_l2};
use crate::ops::fp4::nvfp4_gemv::{self, GemvOperands, GemvProblem};
use crate::ops::fp4::nvfp4_gemv_pack;
use crate::ops::fp4::{dequantize_into, quantize, Fp4Format, Fp4View};
use crate::ops::gemm::DType;
use crate::reference::fp4 as reference;

/// The bound on ‖y − round(ref)‖ / ‖ref‖ for the GEMV: what fp32 accumulation may add to the
/// output's own rounding (the 1e-3).
pub const GEMV_BOUND: f64 = 1e-3;

/// An FP4 check of kind `check` on `case`, not yet judged.
pub(crate) fn fp4_outcome(check: &str, case: String, seed: u64) -> Outcome {
    Outcome::new(check, case, seed, f64::NAN, Extra::Fp4)
}

/// How a test tensor is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Values {
    /// [-1, 1) times 2^[-20, 20] (2^[-20, 14] for f16, whose largest finite value is 65504),
    /// varying by element: every block scale differs.
    Spread,
    /// All zero.
    Zeros,
    /// Near the input type's largest finite value.
    Huge,
    /// Near the input type's smallest normal (and below it, subnormal).
    Tiny,
    /// Each e2m1 magnitude, the midpoints between them and their neighbours, times the block's
    /// amax / 6: every code and every tie.
    Ties,
}

/// A [rows, K] tensor of `values` for `input`, as f32 values the input type holds exactly.
pub fn tensor(values: Values, input: DType, rows: usize, k: usize, seed: u64) -> Vec<f32> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let top = match input {
        DType::F16 => 65504.0f32,
        DType::Bf16 => 3.38e38,
        DType::F32 => f32::MAX,
    };
    let low = match input {
        DType::F16 => 6.1e-5f32,
        _ => f32::MIN_POSITIVE,
    };
    // 2^15 and more would round to infinity in f16, which the quantisers rightly refuse.
    let spread_top = if input == DType::F16 { 14 } else { 20 };
    let ties: Vec<f32> = {
        let mut t = vec![6.0f32];
        for c in 0..7u8 {
            let (lo, hi) = (fp4::decode(c), fp4::decode(c + 1));
            let mid = (lo + hi) / 2.0;
            t.extend([
                lo,
                mid,
                f32::from_bits(mid.to_bits() - 1),
                f32::from_bits(mid.to_bits() + 1),
            ]);
        }
        t
    };
    let raw: Vec<f32> = (0..rows * k)
        .map(|i| {
            let sign = if rng.gen::<bool>() { -1.0 } else { 1.0 };
            match values {
                Values::Spread => {
                    rng.gen_range(-1.0f32..1.0) * 2f32.powi(rng.gen_range(-20..=spread_top))
                }
                Values::Zeros => 0.0,
                Values::Huge => sign * top * rng.gen_range(0.25f32..1.0),
                Values::Tiny => sign * low * rng.gen_range(0.01f32..4.0),
                // the first element of each 32 is 6: the amax of every block of 16 or 32
                Values::Ties if i % 16 == 0 => sign * 6.0,
                Values::Ties => sign * ties[rng.gen_range(0..ties.len())],
            }
        })
        .collect();
    // what the input type holds
    as_input(&raw, input).1
}

/// `xs` on the device as `input`.
pub fn upload(xs: &[f32], input: DType) -> Result<DeviceBuffer> {
    DeviceBuffer::from_host(&as_input(xs, input).0)
}

/// The CPU's quantisation of `xs`: (codes, scales, tensor scale).
pub(crate) fn cpu_quantize(
    format: Fp4Format,
    xs: &[f32],
    rows: usize,
    k: usize,
) -> Result<(Vec<u8>, Vec<u8>, f32)> {
    Ok(match format {
        Fp4Format::Nvfp4 => {
            let q = nvfp4::quantize(xs, rows, k)?;
            (q.codes, q.scales, q.tensor_scale)
        }
        Fp4Format::Mxfp4 => {
            let q = mxfp4::quantize(xs, rows, k)?;
            (q.codes, q.scales, 1.0)
        }
    })
}

/// The outcomes of one case, or, when the case could not run (an input or a shape refused), one
/// failed outcome saying why: a bad case must not stop the rest of the suite. CUDA errors still
/// end it (the context is unusable after one).
pub fn outcomes_or_failure(
    check: &str,
    case: impl Into<String>,
    r: Result<Vec<Outcome>>,
) -> Result<Vec<Outcome>> {
    match r {
        Ok(v) => Ok(v),
        Err(
            e @ (Error::InvalidInput(_)
            | Error::Argument { .. }
            | Error::Unsupported { .. }
            | Error::Verification(_)),
        ) => {
            let mut o = fp4_outcome(check, case.into(), 0);
            o.message = format!("could not run: {e}");
            Ok(vec![o])
        }
        Err(e) => Err(e),
    }
}

/// The GPU's dequantisation of `m` (whose codes and scales the CPU holds too) to every output
/// dtype against the exact values rounded once: every dtype dense, then rows with padding,
/// 16-byte aligned (the vector stores) and not (the element-wise path); each layout a check on
/// the runner.
pub fn verify_dequantization(
    ctx: &Context,
    m: &Fp4View,
    codes: &[u8],
    scales: &[u8],
    case: &str,
    seed: u64,
) -> Result<Vec<Outcome>> {
    let (rows, k) = (m.rows, m.k);
    let g = if m.format == Fp4Format::Nvfp4 {
        m.tensor_scale as f64
    } else {
        1.0
    };
    let mut exact = vec![0.0; rows * k];
    for (r, row) in exact.chunks_mut(k).enumerate() {
        reference::decode_row(m.format, codes, scales, k, r, g, row);
    }
    let layouts = [
        (DType::Bf16, k),
        (DType::F16, k),
        (DType::F32, k),
        (DType::Bf16, k + 8),
        (DType::F32, k + 4),
        (DType::F16, k + 3),
    ];
    let exact = &exact;
    let each = |(dt, ldy)| {
        runner::run(
            ctx,
            &Dequant {
                m,
                exact,
                case,
                dt,
                ldy,
            },
            seed,
        )
    };
    layouts.into_iter().map(each).collect()
}

/// One output layout of a dequantisation: `dt` rows `ldy` apart, poisoned before the launch;
/// the padding must stay as it was.
struct Dequant<'a> {
    m: &'a Fp4View<'a>,
    exact: &'a [f64],
    case: &'a str,
    dt: DType,
    ldy: usize,
}

impl Check for Dequant<'_> {
    type Drawn = DeviceBuffer;

    fn blank(&self, seed: u64) -> Outcome {
        let (case, dt, ldy) = (self.case, self.dt, self.ldy);
        let layout = match ldy == self.m.k {
            true => String::new(),
            false => format!(", ldy {ldy}"),
        };
        fp4_outcome("dequantize", format!("{case} -> {dt}{layout}"), seed)
    }

    fn supports(&self, _ctx: &Context) -> std::result::Result<(), String> {
        Ok(())
    }

    fn draw(&self, ctx: &Context, _seed: u64) -> Result<DeviceBuffer> {
        let (rows, k) = (self.m.rows, self.m.k);
        let y = ctx.alloc(((rows - 1) * self.ldy + k) * self.dt.size())?;
        y.fill_bytes(0xFF, ctx)?;
        Ok(y)
    }

    fn launch(&self, ctx: &Context, y: &mut DeviceBuffer) -> Result<()> {
        dequantize_into(ctx, self.m, self.dt, y, self.ldy, true)
    }

    fn flops(&self) -> f64 {
        0.0
    }

    fn judge(&self, y: &DeviceBuffer, o: &mut Outcome) -> Result<()> {
        let (rows, k, dt, ldy, exact) = (self.m.rows, self.m.k, self.dt, self.ldy, self.exact);
        let len = (rows - 1) * ldy + k;
        let got: Vec<u32> = match dt {
            DType::F32 => y.download::<u32>(len)?,
            _ => y.download::<u16>(len)?.into_iter().map(u32::from).collect(),
        };
        let untouched = if dt == DType::F32 { u32::MAX } else { 0xFFFF };
        let mut bad = 0;
        let mut first = None;
        for (i, &a) in got.iter().enumerate() {
            let (r, c) = (i / ldy, i % ldy);
            let want = if c < k {
                reference::round_bits(exact[r * k + c], dt)
            } else {
                untouched
            };
            if a != want {
                bad += 1;
                first.get_or_insert_with(|| {
                    if c < k {
                        format!(
                            "element ({r}, {c}): {a:#x}, exact {:e} rounds to {want:#x}",
                            exact[r * k + c]
                        )
                    } else {
                        format!("padding ({r}, {c}) was overwritten with {a:#x}")
                    }
                });
            }
        }
        *o = o.clone().judge_bits(bad, first);
        Ok(())
    }
}

/// The tensor scales the every-code check runs under: NVFP4's 1, an inexact one, the smallest
/// (every product far below f32's normals: bf16 subnormals) and a huge one (products beyond
/// f32: infinity); MXFP4 has none.
pub fn every_code_tensor_scales(format: Fp4Format) -> Vec<f32> {
    match format {
        Fp4Format::Nvfp4 => vec![1.0, 0.0371, f32::MIN_POSITIVE, 3e35],
        Fp4Format::Mxfp4 => vec![1.0],
    }
}

/// Every code times every scale code: rows hold one scale code each (all valid ones: e4m3 0 to
/// 0x7e, E8M0 0 to 254) and K = 512 holds the 256 bytes, dequantised to every dtype.
pub fn verify_every_code(
    ctx: &Context,
    format: Fp4Format,
    tensor_scale: f32,
) -> Result<Vec<Outcome>> {
    let scale_codes: Vec<u8> = match format {
        Fp4Format::Nvfp4 => (0..=0x7E).collect(),
        Fp4Format::Mxfp4 => (0..=254).collect(),
    };
    let (rows, k) = (scale_codes.len(), 512);
    let codes: Vec<u8> = (0..rows * k / 2).map(|i| (i % 256) as u8).collect();
    let scales: Vec<u8> = (0..rows * k / format.block())
        .map(|i| scale_codes[i / (k / format.block())])
        .collect();
    let (dc, ds) = (
        DeviceBuffer::from_host(&codes)?,
        DeviceBuffer::from_host(&scales)?,
    );
    let view = Fp4View {
        format,
        rows,
        k,
        codes: &dc,
        scales: &ds,
        tensor_scale,
    };
    let case = format!("{format}: all 256 bytes x {rows} scale codes, tensor scale {tensor_scale}");
    verify_dequantization(ctx, &view, &codes, &scales, &case, 0)
}

/// A NaN or an infinity in the input: the GPU must refuse it at the element the CPU names.
pub fn verify_refusal(
    ctx: &Context,
    format: Fp4Format,
    input: DType,
    poison: f32,
) -> Result<Outcome> {
    let seed = fresh_seed();
    let (rows, k) = (5, 4 * format.block());
    let mut xs = tensor(Values::Spread, input, rows, k, seed);
    let at = (seed as usize % (rows * k)).max(1);
    xs[at] = poison;
    xs[rows * k - 1] = poison; // a later one must not be named instead
    let want = format!("element ({}, {})", at / k, at % k);
    let cpu = cpu_quantize(format, &xs, rows, k)
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    let gpu = match quantize(ctx, &upload(&xs, input)?, input, rows, k, k, format, None) {
        Ok(_) => String::new(),
        Err(e @ Error::InvalidInput(_)) => e.to_string(),
        Err(e) => return Err(e),
    };
    let mut o = fp4_outcome(
        "refuse",
        format!("{format} from {input}, {poison} at {want}"),
        seed,
    );
    o.passed = cpu.contains(&want) && gpu.contains(&want);
    o.message = if o.passed {
        "refused at the same element".into()
    } else {
        format!("CPU: `{cpu}`; GPU: `{gpu}`")
    };
    Ok(o)
}

/// The GEMV's NVFP4 weights, [batch x N, K]: codes of every byte and scale codes in 0x20..0x58,
/// on the host and the device.
pub struct GemvWeights {
    pub codes: Vec<u8>,
    pub scales: Vec<u8>,
    pub tensor_scale: f32,
    dc: DeviceBuffer,
    ds: DeviceBuffer,
    /// The device codes and scales are in the GEMV layout (`KILN_FP4_GEMV=pack`, written by
    /// kiln's device kernel from the standard ones, which the judge holds to the CPU's);
    /// `codes` and `scales` stay standard.
    packed: bool,
}

impl GemvWeights {
    /// Draws the weights of `p` from `rng`, codes first; on the device in the GEMV layout where
    /// the pack path is asked for.
    pub fn draw(
        ctx: &Context,
        p: &GemvProblem,
        rng: &mut impl Rng,
        tensor_scale: f32,
    ) -> Result<GemvWeights> {
        let rows = p.n * p.batch;
        let codes: Vec<u8> = (0..rows * p.k / 2).map(|_| rng.gen()).collect();
        let scales: Vec<u8> = (0..rows * p.k / 16)
            .map(|_| rng.gen_range(0x20..0x58))
            .collect();
        let packed = nvfp4_gemv::gemv_layout_asked(ctx, p);
        let (dc, ds) = if packed {
            // kiln's own layout on the GPU, from the standard codes and scales
            let (sc, ss) = (
                DeviceBuffer::from_host(&codes)?,
                DeviceBuffer::from_host(&scales)?,
            );
            // poisoned: a byte the layout misses shows in the judge's comparison
            let (dc, ds) = (
                DeviceBuffer::new(codes.len())?,
                DeviceBuffer::new(scales.len())?,
            );
            dc.fill_bytes(0xA5, ctx)?;
            ds.fill_bytes(0xA5, ctx)?;
            let bufs = nvfp4_gemv_pack::LayoutBuffers {
                codes: &sc,
                scales: &ss,
                dst_codes: &dc,
                dst_scales: &ds,
            };
            nvfp4_gemv_pack::to_gemv_layout(ctx, p.n, p.batch, p.k, &bufs)?;
            (dc, ds)
        } else {
            (
                DeviceBuffer::from_host(&codes)?,
                DeviceBuffer::from_host(&scales)?,
            )
        };
        Ok(GemvWeights {
            codes,
            scales,
            tensor_scale,
            dc,
            ds,
            packed,
        })
    }

    /// The GEMV on these weights: the pack path where the device codes are in its layout.
    pub fn launch(&self, ctx: &Context, p: &GemvProblem, ops: &GemvOperands) -> Result<()> {
        if self.packed {
            nvfp4_gemv::launch_packed(ctx, p, ops)
        } else {
            nvfp4_gemv::launch(ctx, p, ops)
        }
    }

    /// The GEMV's operands: X [batch x M, K] into Y [batch x M, N].
    pub fn operands<'a>(
        &'a self,
        p: &GemvProblem,
        x: &'a DeviceBuffer,
        y: &'a DeviceBuffer,
    ) -> GemvOperands<'a> {
        GemvOperands {
            x,
            ldx: p.k,
            w: Fp4View {
                format: Fp4Format::Nvfp4,
                rows: p.n * p.batch,
                k: p.k,
                codes: &self.dc,
                scales: &self.ds,
                tensor_scale: self.tensor_scale,
            },
            y,
            ldy: p.n,
        }
    }
}

/// Random NVFP4 weights (tensor scale 0.0123) and bf16 X; the GEMV against the float64 product
/// of the dequantised operands.
pub fn verify_gemv(ctx: &Context, p: &GemvProblem) -> Result<Outcome> {
    runner::run(ctx, p, fresh_seed())
}

/// The drawn weights, X (host and device) and the poisoned Y.
pub struct GemvDrawn {
    w: GemvWeights,
    xs: Vec<bf16>,
    dx: DeviceBuffer,
    y: DeviceBuffer,
}

impl Check for GemvProblem {
    type Drawn = GemvDrawn;

    fn blank(&self, seed: u64) -> Outcome {
        Outcome {
            bound: GEMV_BOUND,
            ..fp4_outcome("gemv", self.label(), seed)
        }
    }

    fn supports(&self, _ctx: &Context) -> std::result::Result<(), String> {
        Ok(())
    }

    fn draw(&self, ctx: &Context, seed: u64) -> Result<GemvDrawn> {
        let p = self;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let w = GemvWeights::draw(ctx, p, &mut rng, 0.0123)?;
        let xs: Vec<bf16> = (0..p.batch * p.m * p.k)
            .map(|_| bf16::from_f32(rng.gen_range(-1.0f32..1.0)))
            .collect();
        let dx = DeviceBuffer::from_host(&xs)?;
        let y = ctx.alloc(p.batch * p.m * p.n * p.output.size())?;
        y.fill_bytes(0xFF, ctx)?; // NaN in both 16-bit types: a skipped write shows
        Ok(GemvDrawn { w, xs, dx, y })
    }

    fn launch(&self, ctx: &Context, d: &mut GemvDrawn) -> Result<()> {
        d.w.launch(ctx, self, &d.w.operands(self, &d.dx, &d.y))
    }

    fn flops(&self) -> f64 {
        2.0 * (self.batch * self.m * self.n * self.k) as f64
    }

    fn judge(&self, d: &GemvDrawn, o: &mut Outcome) -> Result<()> {
        let p = self;
        let (xs, w) = (&d.xs, &d.w);
        let got: Vec<u16> = d.y.download(p.batch * p.m * p.n)?;
        let (mut diff2, mut ref2, mut nan) = (0.0, 0.0, 0usize);
        let mut wrow = vec![0.0; p.k];
        for b in 0..p.batch {
            let xb: Vec<Vec<f64>> = (0..p.m)
                .map(|m| {
                    xs[(b * p.m + m) * p.k..][..p.k]
                        .iter()
                        .map(|v| v.to_f64())
                        .collect()
                })
                .collect();
            for n in 0..p.n {
                reference::decode_row(
                    Fp4Format::Nvfp4,
                    &w.codes,
                    &w.scales,
                    p.k,
                    b * p.n + n,
                    w.tensor_scale as f64,
                    &mut wrow,
                );
                for (m, x) in xb.iter().enumerate() {
                    let r = reference::dot(x, &wrow);
                    let v = reference::value_of(got[(b * p.m + m) * p.n + n] as u32, p.output);
                    let rounded = reference::value_of(reference::round_bits(r, p.output), p.output);
                    if !v.is_finite() {
                        nan += 1;
                        continue;
                    }
                    diff2 += (v - rounded) * (v - rounded);
                    ref2 += r * r;
                }
            }
        }
        // the GPU's prepack into the GEMV layout, byte for byte the CPU's
        let layout_bad = if w.packed {
            let dev: Vec<u8> = w.dc.download(w.codes.len())?;
            let (want, want_scales) =
                nvfp4_gemv::gemv_layout(&w.codes, &w.scales, p.n, p.k, p.batch);
            let dev_scales: Vec<u8> = w.ds.download(w.scales.len())?;
            dev.iter().zip(&want).filter(|(a, b)| a != b).count()
                + dev_scales
                    .iter()
                    .zip(&want_scales)
                    .filter(|(a, b)| a != b)
                    .count()
        } else {
            0
        };
        o.rel_error = rel_l2(diff2, ref2);
        o.mismatches = nan + layout_bad;
        o.passed = nan == 0 && layout_bad == 0 && o.rel_error <= GEMV_BOUND;
        o.message = if layout_bad > 0 {
            format!(
                "{layout_bad} code and scale bytes of the GPU's GEMV layout differ from the CPU's"
            )
        } else if nan > 0 {
            format!("{nan} outputs not written or not finite")
        } else if o.passed {
            "ok".into()
        } else {
            format!("relative error {:.2e} over {GEMV_BOUND:.0e}", o.rel_error)
        };
        Ok(())
    }
}

/// The GEMV shapes `fp4 verify` checks: M 1..16 (one and two mma tiles), N not a multiple of 16
/// (nor of 32, both ways), K not a multiple of 128, a batch, eight-warp and four-warp CTAs, both
/// outputs.
pub fn gemv_suite(quick: bool) -> Vec<GemvProblem> {
    let mut v = vec![
        GemvProblem::new(1, 8192, 8192, DType::Bf16),
        GemvProblem::new(1, 1000, 544, DType::F16),
        GemvProblem::new(3, 4096, 4096, DType::Bf16),
        GemvProblem::new(16, 257, 2080, DType::Bf16),
        GemvProblem {
            batch: 3,
            ..GemvProblem::new(2, 300, 1024, DType::F16)
        },
        // M over 8 with K a multiple of 128 and a ragged N: KILN_FP4_GEMV=async's 16-column
        // variant (the case above it runs the register path: K 2080)
        GemvProblem::new(12, 520, 1152, DType::Bf16),
        // the lean ring's largest M with an odd number of steps (a last stage of one) and a
        // ragged N (a last CTA on the bounded copies)
        GemvProblem::new(4, 520, 1152, DType::F16),
        // a last 32-row CTA whose first tile is whole and second ragged (the two-tile X ring,
        // `xswz2`: rows 304..311 of 288..319), an odd M between the rings' 4 and 8
        GemvProblem::new(5, 312, 1280, DType::Bf16),
        // `pack`'s two-tile form (G20: at least 16 steps of K a warp, here 192 steps over 12
        // warps): a last 32-row CTA whose first tile is whole and second ragged (rows 80..87)
        GemvProblem::new(3, 88, 24576, DType::Bf16),
        // M 1 on the GEMV layout (`pack`: the lean ring on its tiles, G60): two [200, 1152] blocks,
        // each with 12 whole tiles and a ragged 13th (the bounded copies) and 9 steps (a last
        // stage of one step in a whole tile); the device tiling starts the second block's tiles
        // at its row 200
        GemvProblem {
            batch: 2,
            ..GemvProblem::new(1, 200, 1152, DType::Bf16)
        },
    ];
    if !quick {
        v.extend([
            GemvProblem::new(9, 100, 32, DType::F16),
            GemvProblem::new(8, 7168, 2048, DType::Bf16),
            GemvProblem::new(1, 16, 16384, DType::Bf16),
        ]);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `fp4 verify --suite quick` under `pack` runs its two-tile form (G20) on the H200's and
    /// H100's SM counts, not only the one-tile ring.
    #[test]
    fn the_quick_suite_runs_packs_two_tile_form() {
        for sms in [132, 114] {
            assert!(
                gemv_suite(true).iter().any(|p| p.two_tiles_pay(sms)),
                "{sms} SMs"
            );
        }
    }

    /// `fp4 verify` stopped at its first f16 case: 2^20-scaled inputs round to infinity in f16,
    /// which the CPU quantiser refuses. Every drawn tensor must be finite in its type and
    /// quantisable on the CPU, at every shape the suite uses.
    #[test]
    fn every_verify_tensor_is_finite_in_its_type_so_the_suite_runs() {
        let all = [
            Values::Spread,
            Values::Zeros,
            Values::Huge,
            Values::Tiny,
            Values::Ties,
        ];
        for format in Fp4Format::ALL {
            for input in [DType::Bf16, DType::F16, DType::F32] {
                for values in all {
                    for seed in 0..4 {
                        let (rows, k) = (37, 7 * format.block());
                        let xs = tensor(values, input, rows, k, seed);
                        assert!(xs.iter().all(|v| v.is_finite()), "{values:?} {input}");
                        let q = cpu_quantize(format, &xs, rows, k);
                        assert!(q.is_ok(), "{format} {values:?} {input}: {:?}", q.err());
                    }
                }
            }
        }
    }

    #[test]
    fn a_case_that_cannot_run_is_one_failed_outcome_and_the_suite_goes_on() {
        let r = outcomes_or_failure("quantize", "a case", Err(Error::invalid("element (0, 10)")));
        let v = r.unwrap();
        assert_eq!(v.len(), 1);
        assert!(!v[0].passed && v[0].message.contains("element (0, 10)"));
        let fatal = Err(Error::Cuda {
            context: "launch".into(),
            message: "illegal address".into(),
        });
        assert!(outcomes_or_failure("quantize", "a case", fatal).is_err());
        let ok = outcomes_or_failure("gemv", "x", Ok(Vec::new())).unwrap();
        assert!(ok.is_empty());
    }
}
