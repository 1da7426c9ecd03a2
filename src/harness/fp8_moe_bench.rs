//! FP8 MoE timing: the block-scaled grouped GEMM or fused SwiGLU on operands drawn and quantised
//! on the GPU (X 1x128, W 128x128 per expert), L2 flushed before each launch, medians, TFLOPS
//! and TB/s of the fewest bytes the problem moves against the device's measured copy ceiling.

use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::formats::Fp8Format;
use crate::harness::bench::{Bench, BenchOptions, Row, Summary, Times};
use crate::harness::device_data::random_buffer;
use crate::harness::fp8_bench::operand;
use crate::harness::fp8_moe_vendor::{self, VendorLoop};
use crate::ops::fp8::Granularity;
use crate::ops::gemm::DType;
use crate::ops::moe::fp8_problem::{Fp8MoeOperands, Fp8MoeProblem};
use crate::ops::moe::schedule::sched_bytes;
use crate::ops::moe::{fp8_grouped, fp8_swiglu};

/// Times `p` (the grouped GEMM, or the SwiGLU when `p.swiglu` is set): a row of `version`,
/// `problem`, the times in ms, `tflops`, `tbps` (the fewest bytes the problem moves,
/// [`Fp8MoeProblem::min_bytes`], per second) and `copy_tbps` (the device's copy rate, bytes read
/// plus written per second over 1 GiB). With `vendor`, cuBLASLt's per-expert loop of the same
/// work on the same operands is timed interleaved with it ([`fp8_moe_vendor`]): the kiln row
/// gains `vs_cublaslt_loop` (the loop's median over kiln's) and `rel_diff_vs_cublaslt_loop`, and
/// a second row is the loop's; or, where the loop does not run, why in `vendor_note`.
pub fn bench_fp8_moe(
    ctx: &Context,
    p: &Fp8MoeProblem,
    opt: &BenchOptions,
    vendor: bool,
) -> Result<Vec<Row>> {
    p.validate()?;
    if !p.n.is_multiple_of(128) {
        return Err(Error::invalid(format!(
            "the bench quantises all experts' weights as one [E * N, K] matrix, which gives each \
             expert its own 128x128 blocks only when N is a multiple of 128; N = {} is not",
            p.n
        )));
    }
    // X 1x128 and the weights 128x128, drawn on the GPU in f32 and quantised there to e4m3
    let quantized = |rows, g, seed| operand(ctx, rows, p.k, Fp8Format::E4m3, g, seed);
    let (xr, wr) = (p.x_rows(), p.experts * p.n);
    let x = quantized(xr, Granularity::Block1x128, 0x5EED)?;
    let w = quantized(wr, Granularity::Block128x128, 0x5EEE)?;
    let w3 = p
        .swiglu
        .map(|_| quantized(wr, Granularity::Block128x128, 0x5EEF))
        .transpose()?;
    let route = match p.swiglu {
        Some(s) if s.routed => Some(random_buffer(ctx, DType::F32, xr, 0x5EF0)?),
        _ => None,
    };
    let y = ctx.alloc(xr * p.n * p.out_size())?;
    let sy = ctx.alloc(4 * p.y_scales())?;
    let rows = DeviceBuffer::from_host(p.layout().rows_array())?;
    let sched = ctx.alloc(sched_bytes(p.experts))?;
    let ops = Fp8MoeOperands {
        x: &x.codes,
        sx: &x.scales,
        w: &w.codes,
        sw: &w.scales,
        w3: w3.as_ref().map(|q| (&q.codes, &q.scales)),
        y: &y,
        sy: p.quantized_out().then_some(&sy),
        rows: &rows,
        route: route.as_ref(),
        sched: &sched,
    };
    let version = if p.swiglu.is_some() {
        fp8_swiglu::NAME
    } else {
        fp8_grouped::NAME
    };
    let mut launch = || match p.swiglu {
        Some(_) => fp8_swiglu::launch(ctx, p, &ops),
        None => fp8_grouped::launch(ctx, p, &ops),
    };
    let run = Bench::new(ctx, opt)?;
    let (lt, note) = match (vendor, fp8_moe_vendor::refusal(p)) {
        (false, _) => (None, None),
        (true, Some(why)) => (None, Some(why)),
        (true, None) => match VendorLoop::new(ctx, &run, p, &ops) {
            Ok(l) => (Some(l), None),
            Err(e) => (None, Some(format!("cuBLASLt's per-expert loop: {e}"))),
        },
    };
    let mut vendor_launch = lt.as_ref().map(|l| move || l.launch(ctx));
    let mut launches: Vec<&mut dyn FnMut() -> Result<()>> = vec![&mut launch];
    if let Some(v) = vendor_launch.as_mut() {
        launches.push(v);
    }
    let times = run.interleaved(&mut launches)?;
    let copy = super::peak::copy_ceiling_tbps(ctx)?;
    let row = |version: &str, t: &Summary| {
        Row::timed(t, Times::Ms)
            .with("version", version)
            .with("problem", p.label())
            .with("tflops", t.rate(p.flops(), 1e12))
            .with("tbps", t.rate(p.min_bytes(), 1e12))
            .with("copy_tbps", copy)
            .with("vs_cublaslt_loop", None::<f64>)
            .with("rel_diff_vs_cublaslt_loop", None::<f64>)
            .with("vendor_note", &note)
    };
    let mut rows = vec![row(version, &times[0])];
    if let Some(l) = &lt {
        let vt = &times[1];
        rows[0].set("vs_cublaslt_loop", vt.median_ms / times[0].median_ms);
        rows[0].set("rel_diff_vs_cublaslt_loop", l.rel_diff(p, &y)?);
        rows.push(row(fp8_moe_vendor::NAME, vt));
    }
    Ok(rows)
}
