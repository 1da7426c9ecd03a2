//! FP8 MoE verification: the block-scaled grouped GEMM and fused SwiGLU against the float64
//! reference on the dequantised operands (the kernel's error before the output's rounding within
//! 1e-3), the quantised SwiGLU output against the reference (within what the CPU quantisation of
//! the reference itself misses; verdicts in [`super::fp8_moe_judge`]) and bit for bit against
//! kiln's quantisation kernel run on the kernel's own f32 output;
//! rows of no expert must stay poisoned. Masked problems also run replayed from a CUDA graph
//! captured while the device counts were zero.

use std::time::Duration;

use rayon::prelude::*;
use serde::Serialize;

use super::fp8::{fp8_outcome, random_matrix, Data};
use super::fp8_moe_judge::{judge_float, judge_quantized};
use super::moe_verify::{replay_with_rows, settle};
use super::outcome::Outcome;
use super::runner::Check;
use super::verify::{fresh_seed, spread_rows};
use crate::device::{Context, DeviceBuffer};
use crate::error::Result;
use crate::formats::ScaleRecipe;
use crate::ops::fp8::{self, Granularity, QuantSpec};
use crate::ops::gemm::DType;
use crate::ops::moe::fp8_problem::{Fp8MoeOperands, Fp8MoeProblem};
use crate::ops::moe::schedule::sched_bytes;
use crate::ops::moe::{fp8_grouped, fp8_swiglu};
use crate::reference::fp8 as reference;

pub use super::fp8_moe_judge::{BOUND, EXACT_BOUND};
/// The reference samples rows above this many float64 multiply-adds.
const FULL_REFERENCE_LIMIT: f64 = 1.0e9;

/// One verification case: a problem, and whether to replay it from a CUDA graph.
#[derive(Debug, Clone, Serialize)]
pub struct Fp8MoeCase {
    pub p: Fp8MoeProblem,
    pub graph: bool,
}

impl Fp8MoeCase {
    pub fn label(&self) -> String {
        format!(
            "{}{}",
            self.p.label(),
            if self.graph { " (graph)" } else { "" }
        )
    }
}

/// The suite: empty experts, one expert with every row, ragged counts (1, 64, 129, 300), a
/// partial last K block, N not a multiple of 128, both layouts, the masked ones also replayed
/// from a graph; the SwiGLU plain, routed, f32 and quantised.
pub fn suite(quick: bool) -> Vec<Fp8MoeCase> {
    let c = |p: Fp8MoeProblem, graph| Fp8MoeCase { p, graph };
    let (cont, masked) = (Fp8MoeProblem::contiguous, Fp8MoeProblem::masked);
    let decode = masked(&[3, 256, 0, 100], 256, 512, 768);
    let mut v = vec![
        c(cont(&[0, 300, 0, 129, 1, 64], 384, 1024), false),
        c(decode.clone(), true),
        c(
            cont(&[0, 200, 57], 256, 512).with_swiglu(true, false),
            false,
        ),
        c(
            masked(&[3, 256, 0, 100], 256, 256, 512).with_swiglu(true, true),
            true,
        ),
    ];
    if quick {
        return v;
    }
    let f32_out = Fp8MoeProblem {
        out: DType::F32,
        ..cont(&[130, 0, 1, 64], 256, 512).with_swiglu(true, false)
    };
    v.extend([
        c(cont(&[0, 0, 515, 0], 256, 2048), false),
        c(cont(&[77, 140, 3], 200, 1040), false),
        c(decode, false),
        c(masked(&[256; 4], 256, 512, 7168), true),
        c(
            cont(&[130, 0, 1, 64], 200, 1040).with_swiglu(false, false),
            false,
        ),
        c(f32_out, false),
        c(
            cont(&[0, 300, 0, 129, 1], 208, 1024).with_swiglu(true, true),
            false,
        ),
        c(
            cont(&[0, 300, 0, 129, 1], 208, 1024).with_swiglu(false, true),
            false,
        ),
    ]);
    v
}

/// Host operands of one case: the codes and scales uploaded, and their dequantised values.
pub struct Inputs {
    x_deq: Vec<f64>,
    w_deq: Vec<Vec<f64>>,
    w3_deq: Vec<Vec<f64>>,
    route: Vec<f32>,
    x: DeviceBuffer,
    sx: DeviceBuffer,
    w: CodesAndScales,
    w3: Option<CodesAndScales>,
    route_dev: Option<DeviceBuffer>,
    rows: DeviceBuffer,
    sched: DeviceBuffer,
}

impl Inputs {
    /// The kernel's operands: these inputs, into `y` (and its scales `sy`).
    fn operands<'a>(
        &'a self,
        y: &'a DeviceBuffer,
        sy: Option<&'a DeviceBuffer>,
    ) -> Fp8MoeOperands<'a> {
        Fp8MoeOperands {
            x: &self.x,
            sx: &self.sx,
            w: &self.w.0,
            sw: &self.w.1,
            w3: self.w3.as_ref().map(|(a, b)| (a, b)),
            y,
            sy,
            rows: &self.rows,
            route: self.route_dev.as_ref(),
            sched: &self.sched,
        }
    }
}

/// e4m3 with fp32 scales at `g`.
fn e4m3(g: Granularity) -> QuantSpec {
    QuantSpec::e4m3(g, ScaleRecipe::Fp32)
}

/// FP8 codes and their scales on the device.
type CodesAndScales = (DeviceBuffer, DeviceBuffer);

/// Every expert's [N, K] drawn and quantised 128x128 on the CPU: codes and scales back to back,
/// and each expert's dequantised values.
fn weights(p: &Fp8MoeProblem, seed: u64) -> Result<(CodesAndScales, Vec<Vec<f64>>)> {
    let (mut codes, mut scales, mut deq) = (Vec::new(), Vec::new(), Vec::new());
    let spec = e4m3(Granularity::Block128x128);
    for e in 0..p.experts {
        let w = random_matrix(p.n, p.k, Data::Signed, seed.wrapping_add(e as u64));
        let (c, s) = reference::quantize(&w, p.n, p.k, p.k, spec);
        deq.push(reference::dequantize(&c, &s, p.n, p.k, spec));
        codes.extend(c);
        scales.extend(s);
    }
    Ok((
        (
            DeviceBuffer::from_host(&codes)?,
            DeviceBuffer::from_host(&scales)?,
        ),
        deq,
    ))
}

fn inputs(p: &Fp8MoeProblem, seed: u64) -> Result<Inputs> {
    let xr = p.x_rows();
    let spec = e4m3(Granularity::Block1x128);
    let x = random_matrix(xr, p.k, Data::Signed, seed);
    let (xc, xs) = reference::quantize(&x, xr, p.k, p.k, spec);
    let x_deq = reference::dequantize(&xc, &xs, xr, p.k, spec);
    let (w, w_deq) = weights(p, seed ^ 0x1000)?;
    let (w3, w3_deq) = match p.swiglu {
        Some(_) => {
            let (b, d) = weights(p, seed ^ 0x2000)?;
            (Some(b), d)
        }
        None => (None, Vec::new()),
    };
    let route: Vec<f32> = (0..xr)
        .map(|r| 0.5 + ((r as u64 * 2654435761 + seed) % 1000) as f32 / 1000.0)
        .collect();
    let route_dev = match p.swiglu {
        Some(s) if s.routed => Some(DeviceBuffer::from_host(&route)?),
        _ => None,
    };
    Ok(Inputs {
        x_deq,
        w_deq,
        w3_deq,
        route,
        x: DeviceBuffer::from_host(&xc)?,
        sx: DeviceBuffer::from_host(&xs)?,
        w,
        w3,
        route_dev,
        rows: DeviceBuffer::from_host(p.layout().rows_array())?,
        sched: DeviceBuffer::new(sched_bytes(p.experts))?,
    })
}

/// (X row, expert) of every routed row the reference computes: all of them for small
/// problems, else each expert's first and last rows and a spread.
fn rows_to_check(p: &Fp8MoeProblem, seed: u64) -> Vec<(usize, usize)> {
    let spans = p.layout().spans();
    let owner = |r: usize| {
        spans
            .iter()
            .position(|&(s, c)| r >= s && r < s + c)
            .map(|e| (r, e))
    };
    let all: Vec<usize> = spans.iter().flat_map(|&(s, c)| s..s + c).collect();
    let macs = all.len() as f64 * p.n as f64 * p.k as f64;
    let rows = if macs <= FULL_REFERENCE_LIMIT {
        all
    } else {
        let edges: Vec<usize> = spans
            .iter()
            .filter(|s| s.1 > 0)
            .flat_map(|&(s, c)| [s, s + c - 1])
            .collect();
        let picked = spread_rows(edges, all.len(), 48, seed, |i| all[i]);
        picked.into_iter().filter(|r| owner(*r).is_some()).collect()
    };
    rows.into_iter().filter_map(owner).collect()
}

/// The float64 output rows: X·Wᵀ, or silu(X·W1ᵀ) ⊙ (X·W3ᵀ) ⊙ route.
fn reference_rows(p: &Fp8MoeProblem, inp: &Inputs, rows: &[(usize, usize)]) -> Vec<Vec<f64>> {
    let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
    rows.par_iter()
        .map(|&(r, e)| {
            let x = &inp.x_deq[r * p.k..(r + 1) * p.k];
            (0..p.n)
                .map(|n| {
                    let y = dot(x, &inp.w_deq[e][n * p.k..(n + 1) * p.k]);
                    match p.swiglu {
                        None => y,
                        Some(s) => {
                            let u = dot(x, &inp.w3_deq[e][n * p.k..(n + 1) * p.k]);
                            let w = if s.routed { inp.route[r] as f64 } else { 1.0 };
                            y / (1.0 + (-y).exp()) * u * w
                        }
                    }
                })
                .collect()
        })
        .collect()
}

/// Runs one case; returns the kernel's outcome (and, for a quantised SwiGLU, the bit-for-bit
/// check against kiln's quantisation kernel).
pub fn verify_case(ctx: &Context, case: &Fp8MoeCase) -> Result<Vec<Outcome>> {
    let p = &case.p;
    p.validate()?;
    let seed = fresh_seed();
    let (o, drawn) = super::runner::run_keeping(ctx, case, seed)?;
    let mut out = vec![o];
    if let (true, Some(d)) = (p.quantized_out(), drawn) {
        let raw: Vec<u8> = d.y.download(p.x_rows() * p.n * p.out_size())?;
        let scales: Vec<f32> = d.sy.download(p.y_scales())?;
        let routed = routed_rows(p);
        out.push(bits_against_quant_kernel(
            ctx, case, &d.inp, &raw, &scales, &routed, seed,
        )?);
    }
    Ok(out)
}

/// Which rows of X (and Y) belong to an expert.
fn routed_rows(p: &Fp8MoeProblem) -> Vec<bool> {
    let mut v = vec![false; p.x_rows()];
    for (s, c) in p.layout().spans() {
        v[s..s + c].iter_mut().for_each(|b| *b = true);
    }
    v
}

/// The drawn operands of one case and its poisoned Y and Y scales.
pub struct Drawn {
    inp: Inputs,
    y: DeviceBuffer,
    sy: DeviceBuffer,
}

impl Fp8MoeCase {
    /// The kernel the case runs.
    fn kernel(&self) -> &'static str {
        if self.p.swiglu.is_some() {
            fp8_swiglu::NAME
        } else {
            fp8_grouped::NAME
        }
    }
}

/// The grouped GEMM or SwiGLU on one case, as the runner checks it (masked problems replayed
/// from a CUDA graph captured while the device counts were zero, when the case says so).
impl Check for Fp8MoeCase {
    type Drawn = Drawn;

    fn blank(&self, seed: u64) -> Outcome {
        fp8_outcome(self.kernel(), self.label(), seed)
    }

    fn supports(&self, _ctx: &Context) -> std::result::Result<(), String> {
        Ok(())
    }

    fn draw(&self, ctx: &Context, seed: u64) -> Result<Drawn> {
        let p = &self.p;
        let inp = inputs(p, seed)?;
        let y = DeviceBuffer::new(p.x_rows() * p.n * p.out_size())?;
        y.fill_bytes(0xFF, ctx)?;
        let sy = DeviceBuffer::new(4 * p.y_scales().max(1))?;
        sy.fill_bytes(0xFF, ctx)?;
        Ok(Drawn { inp, y, sy })
    }

    fn launch(&self, ctx: &Context, d: &mut Drawn) -> Result<()> {
        let p = &self.p;
        let sy = p.quantized_out().then_some(&d.sy);
        let ops = d.inp.operands(&d.y, sy);
        let launch = || match p.swiglu {
            Some(_) => fp8_swiglu::launch(ctx, p, &ops),
            None => fp8_grouped::launch(ctx, p, &ops),
        };
        if !self.graph {
            settle()?;
            return launch();
        }
        let zeros = vec![0i32; p.layout().rows_array().len()];
        replay_with_rows(
            ctx,
            &launch,
            &d.inp.rows,
            &zeros,
            p.layout().rows_array(),
            Duration::from_secs_f64(10.0 + p.flops() / 1e11),
            &format!("{} on {}", self.kernel(), self.label()),
        )
    }

    fn flops(&self) -> f64 {
        self.p.flops()
    }

    fn judge(&self, d: &Drawn, o: &mut Outcome) -> Result<()> {
        let p = &self.p;
        let raw: Vec<u8> = d.y.download(p.x_rows() * p.n * p.out_size())?;
        // Rows of no expert must keep their poison.
        let routed = routed_rows(p);
        let row_bytes = p.n * p.out_size();
        o.written_outside = (0..p.x_rows())
            .filter(|&r| !routed[r])
            .map(|r| {
                raw[r * row_bytes..(r + 1) * row_bytes]
                    .iter()
                    .filter(|&&b| b != 0xFF)
                    .count()
            })
            .sum();
        let rows = rows_to_check(p, o.seed);
        let reference = reference_rows(p, &d.inp, &rows);
        o.rows_checked = rows.len();
        if p.quantized_out() {
            let scales: Vec<f32> = d.sy.download(p.y_scales())?;
            judge_quantized(p, &raw, &scales, &rows, &reference, o);
        } else {
            judge_float(p, &raw, &rows, &reference, o);
        }
        Ok(())
    }
}

/// Runs the f32-output SwiGLU on the same inputs, quantises its output with kiln's quantisation
/// kernel (1x128, e4m3, fp32 scales) and compares codes and scales of every routed row with the
/// quantised epilogue's, bit for bit.
fn bits_against_quant_kernel(
    ctx: &Context,
    case: &Fp8MoeCase,
    inp: &Inputs,
    codes: &[u8],
    scales: &[f32],
    routed: &[bool],
    seed: u64,
) -> Result<Outcome> {
    let q = Fp8MoeProblem {
        out: DType::F32,
        swiglu: case
            .p
            .swiglu
            .map(|s| crate::ops::moe::fp8_problem::Fp8SwiGlu {
                quantize: false,
                ..s
            }),
        ..case.p.clone()
    };
    let mut o = fp8_outcome("swiglu-quant-bits", case.label(), seed);
    let xr = q.x_rows();
    let y32 = DeviceBuffer::new(xr * q.n * 4)?;
    y32.fill_bytes(0, ctx)?;
    let ops = inp.operands(&y32, None);
    settle()?;
    fp8_swiglu::launch(ctx, &q, &ops)?;
    let kq = fp8::quantize(
        ctx,
        &y32,
        DType::F32,
        xr,
        q.n,
        q.n,
        e4m3(Granularity::Block1x128),
    )?;
    ctx.synchronize()?;
    let kc: Vec<u8> = kq.codes.download(xr * q.n)?;
    let ks: Vec<f32> = kq.scales.download(q.y_scales())?;
    let groups = q.n.div_ceil(128);
    for r in (0..xr).filter(|&r| routed[r]) {
        o.rows_checked += 1;
        o.mismatches += (0..q.n)
            .filter(|&c| kc[r * q.n + c] != codes[r * q.n + c])
            .count();
        o.mismatches += (0..groups)
            .filter(|&g| ks[g * xr + r].to_bits() != scales[g * xr + r].to_bits())
            .count();
    }
    o.passed = o.mismatches == 0;
    o.message = if o.passed {
        "bit-exact".into()
    } else {
        format!(
            "{} codes or scales differ from kiln's quantisation of the f32 output",
            o.mismatches
        )
    };
    Ok(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_suite_covers_the_edges() {
        let s = suite(false);
        assert!(s.iter().any(|c| c.graph && c.p.quantized_out()));
        assert!(s
            .iter()
            .any(|c| c.p.layout().spans().iter().any(|x| x.1 == 0)));
        assert!(s.iter().any(|c| !c.p.k.is_multiple_of(128)));
        assert!(s.iter().any(|c| !c.p.n.is_multiple_of(128)));
        for c in &s {
            assert!(c.p.validate().is_ok(), "{}", c.label());
        }
        assert!(suite(true).len() < s.len());
    }

    #[test]
    fn sampled_rows_keep_every_experts_edges() {
        let p = Fp8MoeProblem::masked(&[256, 3, 0, 256], 256, 4096, 7168);
        let r = rows_to_check(&p, 5);
        for must in [(0, 0), (255, 0), (256, 1), (258, 1), (768, 3), (1023, 3)] {
            assert!(r.contains(&must), "{must:?}");
        }
        assert!(r
            .iter()
            .all(|&(row, e)| row / 256 == e && row % 256 < [256, 3, 0, 256][e]));
    }
}
