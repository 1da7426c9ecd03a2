//! FP8 GEMM timing: kiln's kernel and cuBLASLt's FP8 GEMM on the same quantised operands and
//! scales, interleaved launch by launch with L2 flushed before each (`harness::bench`), medians,
//! TFLOPS and the ratio to cuBLASLt; the two outputs are compared too, so the race is between
//! equal results. The operands are drawn on the GPU in f32 and quantised there, so a large
//! problem is set up in one pass over device memory.

use crate::device::Context;
use crate::error::{Error, Result};
use crate::formats::{Fp8Format, ScaleRecipe};
use crate::harness::bench::{Bench, BenchOptions, Row, Summary, Times};
use crate::harness::device_data::random_buffer;
use crate::ops::fp8::quant::{Granularity, QuantSpec};
use crate::ops::fp8::{self, Fp8Config, Fp8Operands, Fp8Problem, Scales};
use crate::ops::gemm::DType;
use crate::reference::data::HostData;
use crate::vendor::cublaslt_fp8::LtFp8;

/// Times `p` with each of `cfgs` (none: the default choice) and, with `vendor`, cuBLASLt, all
/// interleaved launch by launch on the same operands: one row per kiln config (in `cfgs`'s
/// order; a config given twice is timed twice, the spread of one version), then cuBLASLt's.
/// Each row: `version`, `problem`, `m`, `n`, `k`, `scale`, `promote`, `config` (kiln's, splits and
/// reduction included; null for the vendor), the times in ms, `tflops`, and against cuBLASLt
/// `speedup_vs_cublaslt` (its median over this one's), `rel_diff_vs_cublaslt` (‖kiln − cuBLASLt‖
/// / ‖cuBLASLt‖ over the whole C) or, when it did not run, why in `vendor_note` (null keys
/// where they do not apply); cuBLASLt's row also names the algorithm it chose in `vendor_algo`
/// ([`LtFp8::chosen_label`]).
pub fn bench_fp8(
    ctx: &Context,
    p: &Fp8Problem,
    cfgs: &[Fp8Config],
    vendor: bool,
    opt: &BenchOptions,
) -> Result<Vec<Row>> {
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
    let run = Bench::new(ctx, opt)?;
    let (ap, bp, dvp) = (a.codes.ptr(), b.codes.ptr(), dv.ptr());
    let (lt, note) = vendor_peer(
        ctx,
        &run,
        vendor,
        p,
        [a.scales.ptr(), b.scales.ptr()],
        [ap, bp, dvp],
    )?;
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
    let row =
        |version: &str, config: Option<String>, t: &Summary| fp8_row(p, version, config, t, &note);
    let mut out: Vec<Row> = cfgs
        .iter()
        .zip(&times)
        .map(|(c, t)| row(fp8::gemm::NAME, Some(shown(ctx, p, c).to_string()), t))
        .collect();
    if lt.is_some() {
        let vt = &times[cfgs.len()];
        let get = |b: &crate::device::DeviceBuffer| -> Result<HostData> {
            Ok(HostData::from_bytes(p.out, &b.download::<u8>(bytes)?))
        };
        let c = get(&dv)?;
        for ((r, dc), t) in out.iter_mut().zip(&outs).zip(&times) {
            r.set("speedup_vs_cublaslt", vt.median_ms / t.median_ms);
            r.set("rel_diff_vs_cublaslt", c_rel_diff(p, &get(dc)?, &c));
        }
        let mut v = row("cublaslt", None, vt);
        if let Some(lt) = &lt {
            v.set("vendor_algo", lt.chosen_label());
        }
        out.push(v);
    }
    Ok(out)
}

/// `c` as it runs `p` on `ctx`'s device: its split-K slices and their reduction filled in (the
/// bench tables' config column, the one-launch bench's and the chain's).
pub(super) fn shown(ctx: &Context, p: &Fp8Problem, c: &Fp8Config) -> Fp8Config {
    let splits = fp8::gemm::splits_for(p, c, &ctx.info);
    // (the lean short-K form, `z`, where it runs; else what runs in its place)
    let c = match !c.a_resident || c.lean_fits(p, splits as u64) {
        true => *c,
        false => c.without_lean(),
    };
    Fp8Config {
        splits,
        reduce: Some(c.reduction()),
        ..c
    }
}

/// ‖x − y‖ / ‖y‖ over `p`'s C (the first N of each row of `ldc`): kiln's output `x` against
/// cuBLASLt's `y` (NaN where x holds one).
pub(super) fn c_rel_diff(p: &Fp8Problem, x: &HostData, y: &HostData) -> f64 {
    let (mut d2, mut r2) = (0.0, 0.0);
    for m in 0..p.m {
        for n in 0..p.n {
            let i = m * p.ldc + n;
            let (a, b) = (x.get(i), y.get(i));
            d2 += (a - b) * (a - b);
            r2 += b * b;
        }
    }
    crate::harness::verify::rel_l2(d2, r2)
}

/// One FP8 bench row of `p` (the one-launch bench's and, with its extra keys, the chain's):
/// `version`, `problem`, `m`, `n`, `k`, `scale`, `promote`, `config`, the times `t` in ms,
/// `tflops`, and `speedup_vs_cublaslt` and `rel_diff_vs_cublaslt` left null for the caller to
/// set, `vendor_note` why cuBLASLt did not run (null if it did).
pub(super) fn fp8_row(
    p: &Fp8Problem,
    version: &str,
    config: Option<String>,
    t: &Summary,
    note: &Option<String>,
) -> Row {
    Row::timed(t, Times::Ms)
        .with("version", version)
        .with("problem", p.to_string())
        .with("m", p.m)
        .with("n", p.n)
        .with("k", p.k)
        .with("scale", p.scale.to_string())
        .with("promote", p.promote)
        .with("config", config)
        .with("tflops", t.rate(p.flops(), 1e12))
        .with("speedup_vs_cublaslt", None::<f64>)
        .with("rel_diff_vs_cublaslt", None::<f64>)
        .with("vendor_note", note)
}

/// A rows x cols operand drawn on the GPU in f32 from `seed` ([`random_buffer`]) and quantised
/// there to `format` at granularity `g` (fp32 scales); the f32 copy is freed before the next.
/// cuBLASLt's FP8 GEMM for `p` with its fastest algorithm selected on `run`'s flusher (scales
/// `[sa, sb]`, operands `[a, b, c]`), or, when cuBLASLt refuses the problem, why (the table's note);
/// nothing when `vendor` is off.
pub(super) fn vendor_peer(
    ctx: &Context,
    run: &Bench,
    vendor: bool,
    p: &Fp8Problem,
    [sa, sb]: [u64; 2],
    [a, b, c]: [u64; 3],
) -> Result<(Option<LtFp8>, Option<String>)> {
    if !vendor {
        return Ok((None, None));
    }
    match LtFp8::new(ctx, p, sa, sb) {
        Ok(mut lt) => {
            lt.select(ctx, &run.flusher, a, b, c)?;
            Ok((Some(lt), None))
        }
        Err(e) => Ok((None, Some(e.to_string()))),
    }
}

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
