//! The 4-bit MoE kernels timed against kiln's bf16 kernel of the same counts in one run: µs, and
//! GB/s of the bytes each must move (touched experts only) as a fraction of the copy ceiling.

use super::bench::{sample_launches_after, Bench, BenchOptions, Row, Summary, Times};
use super::device_data::random_buffer;
use super::moe_bench::{random_buffers, tile_label};
use super::moe_fp4::Fp4Buffers;
use super::moe_verify::settle;
use super::moe_verify::MoeBuffers;
use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::ops::gemm::DType;
use crate::ops::moe::fp4::kernel::{Fp4Experts, Fp4Layout, NAME};
use crate::ops::moe::fp4::Fp4Format;
use crate::ops::moe::schedule::sched_bytes;
use crate::ops::moe::{check_operands, version_for, MoeKernel, MoeProblem, WeightLayout};
use crate::ops::registry::Registry;

/// What `kiln moe bench --weights` runs.
#[derive(Debug, Clone)]
pub struct Fp4BenchRequest {
    pub counts: Vec<usize>,
    pub n: usize,
    pub k: usize,
    pub dtype: DType,
    pub format: Fp4Format,
    /// The fused SwiGLU (its W1/W3 layout matters to the bf16 kernel only) and routing.
    pub swiglu: Option<(WeightLayout, bool)>,
}

impl Fp4BenchRequest {
    /// The 4-bit weights' layout of the request's problem.
    pub fn layout(&self) -> Fp4Layout {
        Fp4Layout {
            format: self.format,
            experts: self.counts.len(),
            n: self.n,
            k: self.k,
            swiglu: self.swiglu.is_some(),
            min_scale_byte: 255,
        }
    }

    pub fn problem(&self) -> MoeProblem {
        let p = MoeProblem::contiguous(&self.counts, self.n, self.k, self.dtype, self.dtype);
        match self.swiglu {
            Some((l, routed)) => p.with_swiglu(l, routed),
            None => p,
        }
    }
}

/// Random buffers of the 4-bit kernel on `p` in layout `l` (settled: the uploads have landed).
/// Random bytes are valid codes; their scale bytes give finite or infinite multipliers, which time
/// the same.
pub fn fp4_buffers(ctx: &Context, p: &MoeProblem, l: &Fp4Layout, seed: u64) -> Result<Fp4Buffers> {
    let s = |i: u64| seed.wrapping_add(i);
    let wbytes = p.experts * l.expert_bytes();
    let bufs = Fp4Buffers {
        x: random_buffer(ctx, p.input, p.x_elems(), s(20))?,
        w: random_buffer(ctx, DType::Bf16, wbytes / 2, s(21))?,
        escale: random_buffer(ctx, DType::F32, p.experts * l.halves(), s(22))?,
        y: ctx.alloc(p.y_elems() * p.output.size())?,
        rows: DeviceBuffer::from_host(p.rows_array())?,
        route: p
            .swiglu
            .is_some_and(|sw| sw.routed)
            .then(|| random_buffer(ctx, DType::F32, p.x_rows(), s(23)))
            .transpose()?,
        sched: ctx.alloc(sched_bytes(p.experts))?,
    };
    settle()?;
    Ok(bufs)
}

/// The median of a 4-bit bench's row (µs).
pub fn median_us(r: &Row) -> f64 {
    r.num("median_us").unwrap_or(f64::NAN)
}

/// Bytes of X and Y's routed rows.
fn activation_bytes(p: &MoeProblem) -> f64 {
    p.routed_rows() as f64 * (p.k + p.n) as f64 * p.input.size() as f64
}

/// Experts with at least one row: the only ones whose weights are read.
pub fn touched(p: &MoeProblem) -> usize {
    p.spans().iter().filter(|s| s.1 > 0).count()
}

/// Bytes the bf16 kernel must move.
pub fn bf16_bytes(p: &MoeProblem) -> f64 {
    let gemms = if p.swiglu.is_some() { 2.0 } else { 1.0 };
    touched(p) as f64 * gemms * (p.n * p.k * p.input.size()) as f64 + activation_bytes(p)
}

/// Bytes the 4-bit kernel must move (the prepacked weights carry their padding and scales).
pub fn fp4_bytes(p: &MoeProblem, l: &Fp4Layout) -> f64 {
    touched(p) as f64 * l.expert_bytes() as f64 + activation_bytes(p)
}

/// What a 4-bit bench shares between its kernels: the bench runner, the copy ceiling measured
/// in the same run (GB/s), the seed.
pub struct BenchRun<'c> {
    pub bench: Bench<'c>,
    pub copy: f64,
    pub seed: u64,
}

impl<'c> BenchRun<'c> {
    pub fn new(ctx: &'c Context, opt: &BenchOptions) -> Result<BenchRun<'c>> {
        Ok(BenchRun {
            bench: Bench::new(ctx, opt)?,
            copy: super::peak::copy_ceiling_tbps(ctx)? * 1e3,
            seed: super::verify::fresh_seed(),
        })
    }

    /// `launch` of `kernel` (with its `tile`) on `p` timed: a row of `kernel` (`bf16
    /// swiglu_dual`, `nvfp4 fp4_experts`, ...), `problem`, `tile`, the times in µs, `bytes` (what
    /// it must move: touched experts' weights, routed X and Y rows), `gbps`, `copy_fraction`
    /// (`gbps` over the measured device-to-device copy rate) and `speedup` (1; the caller sets
    /// the bf16 kernel's median over this one's).
    pub fn time(
        &self,
        p: &MoeProblem,
        (kernel, tile): (String, String),
        bytes: f64,
        launch: impl FnMut() -> Result<()>,
    ) -> Result<Row> {
        self.time_after(p, (kernel, tile), bytes, || Ok(()), launch)
    }

    /// [`time`](Self::time) with `pre` enqueued, untimed, after each timed launch's L2 flush
    /// (`KILN_MOE_WARM_CODE`: the same kernel on other buffers, its code warm and data cold).
    pub fn time_after(
        &self,
        p: &MoeProblem,
        what: (String, String),
        bytes: f64,
        pre: impl FnMut() -> Result<()>,
        launch: impl FnMut() -> Result<()>,
    ) -> Result<Row> {
        let (b, ctx) = (&self.bench, self.bench.ctx);
        let t = sample_launches_after(ctx, &b.flusher, &b.opt, pre, launch)?;
        Ok(self.row(p, what, bytes, &Summary::of(t)))
    }

    /// [`time`](Self::time)'s row from times taken elsewhere (interleaved rounds).
    pub fn row(
        &self,
        p: &MoeProblem,
        (kernel, tile): (String, String),
        bytes: f64,
        t: &Summary,
    ) -> Row {
        let gbps = t.rate(bytes, 1e9);
        Row::timed(t, Times::Us)
            .with("kernel", kernel)
            .with("problem", p.label())
            .with("tile", tile)
            .with("bytes", bytes)
            .with("gbps", gbps)
            .with("copy_fraction", gbps / self.copy)
            .with("speedup", 1.0)
    }

    /// kiln's bf16 kernel on `p`, its random buffers and its row's (kernel, tile) labels, for a
    /// caller that times it beside its own kernel.
    pub fn bf16_parts<'r>(
        &self,
        reg: &'r Registry,
        p: &MoeProblem,
    ) -> Result<(&'r dyn MoeKernel, MoeBuffers, (String, String))> {
        let ctx = self.bench.ctx;
        let (sms, o) = (ctx.info.sm_count, &ctx.overrides.moe);
        let k = reg.moe_version(version_for(p, o))?;
        k.supports(p, &ctx.info).map_err(Error::refused(k.name()))?;
        let b = random_buffers(ctx, p, self.seed)?;
        check_operands(p, &b.operands())?;
        let what = (format!("{} {}", p.input, k.name()), tile_label(p, sms, o));
        Ok((k, b, what))
    }

    /// kiln's bf16 kernel on `p` (its buffers freed before the caller makes its own).
    pub fn bf16_baseline(&self, reg: &Registry, p: &MoeProblem) -> Result<Row> {
        let ctx = self.bench.ctx;
        let (sms, o) = (ctx.info.sm_count, &ctx.overrides.moe);
        let k = reg.moe_version(version_for(p, o))?;
        k.supports(p, &ctx.info).map_err(Error::refused(k.name()))?;
        let b = random_buffers(ctx, p, self.seed)?;
        let ops = b.operands();
        check_operands(p, &ops)?;
        let what = (format!("{} {}", p.input, k.name()), tile_label(p, sms, o));
        if !ctx.overrides.bench.warm_code {
            return self.time(p, what, bf16_bytes(p), || k.launch(ctx, p, &ops));
        }
        // the same launch on other buffers warms the code only
        let warm = random_buffers(ctx, p, self.seed.wrapping_add(1))?;
        let warm_ops = warm.operands();
        self.time_after(
            p,
            what,
            bf16_bytes(p),
            || k.launch(ctx, p, &warm_ops),
            || k.launch(ctx, p, &ops),
        )
    }
}

/// Times kiln's bf16 kernel and the 4-bit one on the request's problem.
pub fn bench_fp4(
    ctx: &Context,
    reg: &Registry,
    r: &Fp4BenchRequest,
    opt: &BenchOptions,
) -> Result<Vec<Row>> {
    let p = r.problem();
    p.validate()?;
    let run = BenchRun::new(ctx, opt)?;
    let base = run.bf16_baseline(reg, &p)?;
    let l = r.layout();
    Fp4Experts::supports(&p, &l, &ctx.info).map_err(Error::refused(NAME))?;
    let bufs = fp4_buffers(ctx, &p, &l, run.seed)?;
    let ops = bufs.operands();
    Fp4Experts::check(&p, &l, &ops)?;
    // tt bounds a tile's tokens; wgmma N is the narrowest of 8, 16, 32.. that holds them
    let what = (
        format!("{} {NAME}", r.format),
        Fp4Experts::tile(ctx, &p)?.label(),
    );
    let launch = || Fp4Experts::launch(ctx, &p, &l, &ops);
    let mut fp4 = if ctx.overrides.bench.warm_code {
        // the same launch on other buffers warms the code only
        let warm = fp4_buffers(ctx, &p, &l, run.seed.wrapping_add(1))?;
        let warm_ops = warm.operands();
        let pre = || Fp4Experts::launch(ctx, &p, &l, &warm_ops);
        run.time_after(&p, what, fp4_bytes(&p, &l), pre, launch)?
    } else {
        run.time(&p, what, fp4_bytes(&p, &l), launch)?
    };
    fp4.set("speedup", median_us(&base) / median_us(&fp4));
    Ok(vec![base, fp4])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_touched_experts_count_and_fp4_reads_about_a_quarter() {
        let r = Fp4BenchRequest {
            counts: vec![3, 0, 5, 0],
            n: 2048,
            k: 7168,
            dtype: DType::Bf16,
            format: Fp4Format::Nvfp4,
            swiglu: Some((WeightLayout::Separate, true)),
        };
        let p = r.problem();
        let l = Fp4Layout {
            format: Fp4Format::Nvfp4,
            experts: 4,
            n: 2048,
            k: 7168,
            swiglu: true,
            min_scale_byte: 255,
        };
        let act = 8.0 * (7168.0 + 2048.0) * 2.0;
        assert_eq!(bf16_bytes(&p), 2.0 * 2.0 * 2048.0 * 7168.0 * 2.0 + act);
        // 4.5 bits a weight: codes and one e4m3 per 16
        assert_eq!(
            fp4_bytes(&p, &l),
            2.0 * 2.0 * 2048.0 * 7168.0 * 4.5 / 8.0 + act
        );
    }
}
