//! The NVFP4 GEMV timed against cuBLAS's bf16 GEMM of the same shape in the same run (interleaved,
//! L2 flushed before every launch): microseconds, GB/s of the bytes each must read, and the
//! fraction of the measured copy ceiling.

use rand::SeedableRng;

use super::bench::{Bench, BenchBuffers, BenchOptions, Row, Summary, Times};
use super::peak;
use crate::device::Context;
use crate::error::Result;
use crate::ops::fp4::nvfp4_gemv::{self, GemvProblem};
use crate::ops::gemm::{DType, GemmKernel, GemmProblem, Layout};
use crate::vendor::cublas::Cublas;

/// Times the NVFP4 GEMV of `p` and, unless `no_vendor`, cuBLAS bf16 on [M, K] x [N, K]^T: a row
/// each of `version`, `problem`, the times in µs, `gbps` (the bytes it must read and write per
/// second), `of_copy_ceiling` (`gbps` over the copy rate `kiln peak` measures) and, on kiln's,
/// `speedup_vs_cublas` (cuBLAS bf16's median over this one's; null without cuBLAS's row).
pub fn bench_gemv(
    ctx: &Context,
    p: &GemvProblem,
    no_vendor: bool,
    opt: &BenchOptions,
) -> Result<Vec<Row>> {
    p.validate()?;
    let ceiling = peak::measure(ctx, &Cublas)?.copy_tbps;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let w = super::fp4::GemvWeights::draw(ctx, p, &mut rng, 0.01)?;
    let x = ctx.alloc(p.batch * p.m * p.k * 2)?;
    super::device_data::fill(ctx, &x, DType::Bf16, (p.batch * p.m, p.k, p.k), 3)?;
    let y = ctx.alloc(p.batch * p.m * p.n * p.output.size())?;
    let ops = w.operands(p, &x, &y);
    let vendor_p = GemmProblem::new(p.m, p.n, p.k, Layout::RC, DType::Bf16, p.output);
    let vendor_bufs = if no_vendor || p.batch > 1 {
        None
    } else {
        Some(BenchBuffers::random(ctx, &vendor_p, 5)?)
    };
    ctx.synchronize()?;
    let run = Bench::new(ctx, opt)?;
    let mut ours = || w.launch(ctx, p, &ops);
    let times = match &vendor_bufs {
        Some(b) => {
            let vops = b.operands();
            let mut theirs = || Cublas.launch(ctx, &vendor_p, &vops);
            run.interleaved(&mut [&mut ours, &mut theirs])?
        }
        None => run.interleaved(&mut [&mut ours])?,
    };
    let bf16_bytes = (p.n * p.k * 2 + p.m * p.k * 2 + p.m * p.n * p.output.size()) as f64;
    let row = |version: &str, t: &Summary, bytes: f64| {
        Row::timed(t, Times::Us)
            .with("version", version)
            .with("problem", p.label())
            .with("gbps", t.rate(bytes, 1e9))
            .with("of_copy_ceiling", t.rate(bytes, 1e9) / (ceiling * 1e3))
            .with("speedup_vs_cublas", None::<f64>)
    };
    let mut out = vec![row(nvfp4_gemv::NAME, &times[0], p.min_bytes())];
    if let Some(t) = times.get(1) {
        let us = |t: &Summary| t.median_ms * 1e3;
        out[0].set("speedup_vs_cublas", us(t) / us(&times[0]));
        out.push(row("cublas bf16", t, bf16_bytes));
    }
    Ok(out)
}
