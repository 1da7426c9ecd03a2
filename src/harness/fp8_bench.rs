//! FP8 GEMM timing: kiln's kernel and cuBLASLt's FP8 GEMM on the same quantised operands and
//! scales, interleaved launch by launch with L2 flushed before each (`harness::bench`), medians,
//! TFLOPS and the ratio to cuBLASLt; the two outputs are compared too, so the race is between
//! equal results. The operands are drawn on the GPU in f32 and quantised there, so a large
//! problem is set up in one pass over device memory.

use serde::Serialize;

use crate::device::Context;
use crate::error::{Error, Result};
use crate::formats::{Fp8Format, ScaleRecipe};
use crate::harness::bench::{Bench, BenchOptions, Summary};
use crate::harness::device_data::random_buffer;
use crate::ops::fp8::quant::{Granularity, QuantSpec};
use crate::ops::fp8::{self, Fp8Config, Fp8Operands, Fp8Problem, Scales};
use crate::ops::gemm::DType;
use crate::reference::data::HostData;
use crate::vendor::cublaslt_fp8::LtFp8;

/// One version's timing on one problem.
#[derive(Debug, Clone, Serialize)]
pub struct Fp8Timing {
    pub version: String,
    pub problem: String,
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub scale: String,
    pub promote: bool,
    /// kiln's config (None for the vendor).
    pub config: Option<String>,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub reps: usize,
    pub tflops: f64,
    /// kiln's time over cuBLASLt's inverted (> 1: kiln faster), when cuBLASLt ran.
    pub speedup_vs_cublaslt: Option<f64>,
    /// ‖kiln − cuBLASLt‖ / ‖cuBLASLt‖ over the whole C, when cuBLASLt ran.
    pub rel_diff_vs_cublaslt: Option<f64>,
    /// Why cuBLASLt did not run, if it did not.
    pub vendor_note: Option<String>,
}

/// Times `p` with each of `cfgs` (none: the default choice) and, with `vendor`, cuBLASLt, all
/// interleaved launch by launch on the same operands: one row per kiln config (in `cfgs`'s
/// order; a config given twice is timed twice, the spread of one version), then cuBLASLt's.
pub fn bench_fp8(
    ctx: &Context,
    p: &Fp8Problem,
    cfgs: &[Fp8Config],
    vendor: bool,
    opt: &BenchOptions,
) -> Result<Vec<Fp8Timing>> {
    p.validate()?;
    crate::harness::memory::plan_fp8_bench(p, &ctx.info)
        .ensure(ctx, &format!("the problem {p}"))?;
    fp8::gemm::supports(p, &ctx.info).map_err(Error::refused(fp8::gemm::NAME))?;
    let chosen = [fp8::gemm::choose_by(p, &ctx.info, ctx.overrides.fp8.rule)];
    let cfgs: &[Fp8Config] = if cfgs.is_empty() { &chosen } else { cfgs };
    for &c in cfgs {
        fp8::gemm::check_config(p, c)?;
    }
    let a = operand(ctx, p.m, p.k, p.a, p.scale.a_granularity(), 0x5EED)?;
    let b = operand(ctx, p.n, p.k, p.b, p.scale.b_granularity(), 0x5EEE)?;
    let bytes = p.m * p.ldc * p.out.size();
    let outs: Vec<_> = cfgs
        .iter()
        .map(|_| ctx.alloc(bytes))
        .collect::<Result<_>>()?;
    let dv = ctx.alloc(bytes)?;
    // What ran, splits and reduction included (for the table).
    let shown = |c: &Fp8Config| Fp8Config {
        splits: fp8::gemm::splits_for(p, c, &ctx.info),
        reduce: Some(c.reduction()),
        ..*c
    };
    let run = Bench::new(ctx, opt)?;
    let (ap, bp, dvp) = (a.codes.ptr(), b.codes.ptr(), dv.ptr());
    let mut note = None;
    let lt = if vendor {
        match LtFp8::new(ctx, p, a.scales.ptr(), b.scales.ptr()) {
            Ok(mut lt) => {
                lt.select(ctx, &run.flusher, ap, bp, dvp)?;
                Some(lt)
            }
            Err(e) => {
                note = Some(e.to_string());
                None
            }
        }
    } else {
        None
    };
    let mut kiln_launches: Vec<_> = cfgs
        .iter()
        .zip(&outs)
        .map(|(&cfg, c)| {
            let ops = Fp8Operands {
                a: &a.codes,
                b: &b.codes,
                sa: Scales::Device(&a.scales),
                sb: Scales::Device(&b.scales),
                c,
            };
            move || fp8::gemm_with(ctx, p, &ops, cfg)
        })
        .collect();
    let mut vendor_launch = lt.as_ref().map(|lt| move || lt.launch(ctx, ap, bp, dvp));
    let mut launches: Vec<&mut dyn FnMut() -> Result<()>> = kiln_launches
        .iter_mut()
        .map(|l| l as &mut dyn FnMut() -> Result<()>)
        .collect();
    if let Some(v) = vendor_launch.as_mut() {
        launches.push(v);
    }
    let times = run.interleaved(&mut launches)?;
    let row = |version: &str, config: Option<String>, t: &Summary| Fp8Timing {
        version: version.into(),
        problem: p.to_string(),
        m: p.m,
        n: p.n,
        k: p.k,
        scale: p.scale.to_string(),
        promote: p.promote,
        config,
        median_ms: t.median_ms,
        min_ms: t.min_ms,
        max_ms: t.max_ms,
        reps: t.reps,
        tflops: t.rate(p.flops(), 1e12),
        speedup_vs_cublaslt: None,
        rel_diff_vs_cublaslt: None,
        vendor_note: note.clone(),
    };
    let mut out: Vec<Fp8Timing> = cfgs
        .iter()
        .zip(&times)
        .map(|(c, t)| row(fp8::gemm::NAME, Some(shown(c).to_string()), t))
        .collect();
    if lt.is_some() {
        let v = row("cublaslt", None, &times[cfgs.len()]);
        let get = |b: &crate::device::DeviceBuffer| -> Result<HostData> {
            Ok(HostData::from_bytes(p.out, &b.download::<u8>(bytes)?))
        };
        let c = get(&dv)?;
        for (r, dc) in out.iter_mut().zip(&outs) {
            r.speedup_vs_cublaslt = Some(v.median_ms / r.median_ms);
            let k = get(dc)?;
            let (mut d2, mut r2) = (0.0, 0.0);
            for m in 0..p.m {
                for n in 0..p.n {
                    let i = m * p.ldc + n;
                    let (x, y) = (k.get(i), c.get(i));
                    d2 += (x - y) * (x - y);
                    r2 += y * y;
                }
            }
            r.rel_diff_vs_cublaslt = Some(crate::harness::verify::rel_l2(d2, r2));
        }
        out.push(v);
    }
    Ok(out)
}

/// A rows x cols operand drawn on the GPU in f32 from `seed` ([`random_buffer`]) and quantised
/// there to `format` at granularity `g` (fp32 scales); the f32 copy is freed before the next.
pub(super) fn operand(
    ctx: &Context,
    rows: usize,
    cols: usize,
    format: Fp8Format,
    g: Granularity,
    seed: u64,
) -> Result<fp8::Quantized> {
    let x = random_buffer(ctx, DType::F32, rows * cols, seed)?;
    let spec = QuantSpec {
        format,
        granularity: g,
        recipe: ScaleRecipe::Fp32,
    };
    let q = fp8::quantize(ctx, &x, DType::F32, rows, cols, cols, spec)?;
    ctx.synchronize()?;
    Ok(q)
}

/// DeepSeek-V3's GEMM shapes (the target set): M in {64, 128, 4096} by (N, K).
pub fn deepseek_shapes() -> Vec<(usize, usize, usize)> {
    let nk = [
        (2112, 7168),
        (24576, 1536),
        (32768, 512),
        (7168, 16384),
        (4096, 7168),
        (7168, 2048),
    ];
    let mut v = Vec::new();
    for m in [64, 128, 4096] {
        for (n, k) in nk {
            v.push((m, n, k));
        }
    }
    v
}

/// The FP8 rung of the ladder (`kiln bench --set ladder`, `kiln suite`): the bf16 ladder's cubes
/// in e4m3 with block scales, per-tensor at 8192³ (the per-tensor target) and the
/// block-scaled target shape 4096x7168x16384, bf16 out.
pub fn ladder_problems() -> Vec<Fp8Problem> {
    use crate::ops::fp8::ScaleMode;
    let p = |m, n, k, s| Fp8Problem::new(m, n, k, DType::Bf16, s);
    vec![
        p(4096, 4096, 4096, ScaleMode::Block),
        p(8192, 8192, 8192, ScaleMode::Block),
        p(8192, 8192, 8192, ScaleMode::Tensor),
        p(4096, 7168, 16384, ScaleMode::Block),
    ]
}
