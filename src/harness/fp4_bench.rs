//! The NVFP4 GEMV timed against cuBLAS's bf16 GEMM of the same shape and against a plain read of
//! the GEMV's own bytes, in the same run (interleaved, L2 flushed before every sample):
//! microseconds, GB/s of the bytes each must read, the fraction of the measured copy ceiling and
//! the fraction of the read ceiling at the problem's size (a ~36 MB stream pays its launch and
//! ramp on ~9 us of bytes, so the copy rate over 1 GiB is out of any kernel's reach there).
//!
//! A sample is one launch (`chain` 1: what a lone call costs from a flushed L2) or `chain`
//! launches back to back over as many copies of the weights, each from DRAM (a decode step's
//! chain of layers; the GEMV, a programmatic dependent by default (`KILN_FP4_GEMV_PDL`), then
//! overlaps its start with the launch before it).

use rand::SeedableRng;

use super::bench::{read_buffer, Bench, BenchBuffers, BenchOptions, Row, Summary, Times};
use super::peak;
use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::ops::fp4::nvfp4_gemv::{self, GemvProblem};
use crate::ops::gemm::{DType, GemmKernel, GemmOperands, GemmProblem, Layout};
use crate::vendor::cublas::Cublas;

/// The most launches a chained sample takes (its copies of the weights must fit beside the flush
/// buffer: 16 x 128 MB of cuBLAS's bf16 weights at 8192 x 8192).
pub const MAX_CHAIN: usize = 16;

/// Checks a chain length (launches a sample): 1 to [`MAX_CHAIN`].
pub fn check_chain(chain: usize) -> Result<()> {
    if chain == 0 || chain > MAX_CHAIN {
        return Err(Error::invalid(format!(
            "--chain {chain} is outside 1..={MAX_CHAIN}: give the launches a sample, each on its \
             own copy of the weights"
        )));
    }
    Ok(())
}

/// `n` device copies of `src` (a device-to-device copy each), so that chained launches each read
/// their weights from DRAM.
fn copies(ctx: &Context, src: &DeviceBuffer, n: usize) -> Result<Vec<DeviceBuffer>> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let b = ctx.alloc(src.bytes())?;
        // SAFETY: both buffers hold `src.bytes()` bytes and belong to this context.
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(b.ptr(), src.ptr(), src.bytes(), ctx.stream)
        }
        .map_err(|e| Error::cuda("copying a bench operand", format!("{e:?}")))?;
        out.push(b);
    }
    Ok(out)
}

/// `s` divided by `chain`: the per-launch figures of a chained sample.
fn per_launch(s: &Summary, chain: usize) -> Summary {
    let c = chain.max(1) as f64;
    Summary {
        median_ms: s.median_ms / c,
        min_ms: s.min_ms / c,
        max_ms: s.max_ms / c,
        reps: s.reps,
    }
}

/// Times the NVFP4 GEMV of `p`, a plain read of its bytes and, unless `no_vendor`, cuBLAS bf16 on
/// [M, K] x [N, K]^T, each sample `chain` launches (1..=[`MAX_CHAIN`]): a row each of `version`,
/// `problem`, `chain`, the times per launch in µs, `gbps` (the bytes it must read and write per
/// second), `of_copy_ceiling` (`gbps` over the copy rate `kiln peak` measures), `of_read_ceiling`
/// (the read's median over this one's: the fraction of what a plain read of the GEMV's bytes
/// reaches at this size, timed the same way; null on cuBLAS's row, which reads 3.6x the bytes)
/// and, on kiln's, `speedup_vs_cublas` (cuBLAS bf16's median over this one's; null without
/// cuBLAS's row).
pub fn bench_gemv(
    ctx: &Context,
    p: &GemvProblem,
    no_vendor: bool,
    chain: usize,
    opt: &BenchOptions,
) -> Result<Vec<Row>> {
    p.validate()?;
    check_chain(chain)?;
    let ceiling = peak::measure(ctx, &Cublas)?.copy_tbps;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
    let w = super::fp4::GemvWeights::draw(ctx, p, &mut rng, 0.01)?;
    let x = ctx.alloc(p.batch * p.m * p.k * 2)?;
    super::device_data::fill(ctx, &x, DType::Bf16, (p.batch * p.m, p.k, p.k), 3)?;
    let y = ctx.alloc(p.batch * p.m * p.n * p.output.size())?;
    // chained samples: copies of the codes and scales (the first launch's are `w`'s own)
    let ops0 = w.operands(p, &x, &y);
    let codes = copies(ctx, ops0.w.codes, chain - 1)?;
    let scales = copies(ctx, ops0.w.scales, chain - 1)?;
    let mut all_ops = vec![ops0];
    for (c, s) in codes.iter().zip(&scales) {
        let mut o = w.operands(p, &x, &y);
        o.w.codes = c;
        o.w.scales = s;
        all_ops.push(o);
    }
    // the plain read: the GEMV's bytes (weights, scales, X, Y), one copy a launch
    let read_bytes = (p.min_bytes() as usize).next_multiple_of(16);
    let reads = ctx.alloc(read_bytes * chain)?;
    // zeros: the read kernel's sink test holds for them
    reads.fill_bytes(0, ctx)?;
    let sink = ctx.alloc(16)?;
    let vendor_p = GemmProblem::new(p.m, p.n, p.k, Layout::RC, DType::Bf16, p.output);
    let vendor = if no_vendor || p.batch > 1 {
        None
    } else {
        let first = BenchBuffers::random(ctx, &vendor_p, 5)?;
        let bs = copies(ctx, &first.b, chain - 1)?;
        Some((first, bs))
    };
    ctx.synchronize()?;
    let run = Bench::new(ctx, opt)?;
    let mut ours = || all_ops.iter().try_for_each(|o| w.launch(ctx, p, o));
    let mut read = || {
        (0..chain).try_for_each(|i| {
            // SAFETY: `reads` holds `chain` slices of `read_bytes`; this is slice i.
            let slice = unsafe {
                DeviceBuffer::borrowed(reads.ptr() + (i * read_bytes) as u64, read_bytes)
            };
            read_buffer(ctx, &slice, read_bytes, &sink)
        })
    };
    let times = match &vendor {
        None => run.interleaved(&mut [&mut ours, &mut read])?,
        Some((first, bs)) => {
            // one X and one C for every launch (X is L2-resident, as the GEMV's), B copied
            let vops: Vec<GemmOperands> = std::iter::once(&first.b)
                .chain(bs)
                .map(|b| GemmOperands {
                    a: &first.a,
                    b,
                    c: &first.c,
                })
                .collect();
            let mut theirs = || {
                vops.iter()
                    .try_for_each(|o| Cublas.launch(ctx, &vendor_p, o))
            };
            run.interleaved(&mut [&mut ours, &mut read, &mut theirs])?
        }
    };
    let times: Vec<Summary> = times.iter().map(|t| per_launch(t, chain)).collect();
    let read_us = times[1].median_ms * 1e3;
    let ours_us = times[0].median_ms * 1e3;
    let bf16_bytes = (p.n * p.k * 2 + p.m * p.k * 2 + p.m * p.n * p.output.size()) as f64;
    let row = |version: &str, t: &Summary, bytes: f64, of_read: Option<f64>| {
        Row::timed(t, Times::Us)
            .with("version", version)
            .with("problem", p.label())
            .with("chain", chain)
            .with("gbps", t.rate(bytes, 1e9))
            .with("of_copy_ceiling", t.rate(bytes, 1e9) / (ceiling * 1e3))
            .with("of_read_ceiling", of_read)
            .with("speedup_vs_cublas", None::<f64>)
    };
    let mut out = vec![
        row(
            nvfp4_gemv::NAME,
            &times[0],
            p.min_bytes(),
            Some(read_us / ours_us),
        ),
        row("read", &times[1], read_bytes as f64, Some(1.0)),
    ];
    if let Some(t) = times.get(2) {
        out[0].set("speedup_vs_cublas", t.median_ms * 1e3 / ours_us);
        out.push(row("cublas bf16", t, bf16_bytes, None));
    }
    Ok(out)
}
