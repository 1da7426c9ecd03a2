//! `kiln fp4 verify`, `kiln fp4 bench --gemv`, `kiln fp4 seeds` and `kiln fp4 check`: the 4-bit
//! formats on the GPU against the CPU, the NVFP4 GEMV against cuBLAS bf16, the NVFP4 contest
//! shapes verified and timed, and every FP4 kernel variant compiled (no GPU).

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::json;

use kiln::error::{Error, Result};
use kiln::harness::bench::BenchOptions;
use kiln::harness::bench::Row;
use kiln::harness::fp4_bench::bench_gemv;
use kiln::harness::fp4_checks::{suite, verify as verify_check};
use kiln::harness::fp4_seeds::{geomean, run_shape, shapes, SeedResult};
use kiln::harness::outcome::Outcome;
use kiln::harness::shapes::Suite;
use kiln::ops::fp4::GemvProblem;
use kiln::ops::gemm::DType;

use super::bench_table::{self, Col, PROBLEM, VERSION};
use super::env::Env;
use super::verdicts::{
    failures, print_outcomes, table, verified, Cell, Column, Landing, CASE, CHECK, REL_ERR,
};

#[derive(Debug, Args)]
pub struct Fp4CliArgs {
    #[command(subcommand)]
    pub action: Fp4Action,
}

#[derive(Debug, Subcommand)]
pub enum Fp4Action {
    /// Check NVFP4 and MXFP4 quantisation bit for bit against the CPU (every input dtype, odd
    /// shapes, every code, zeros, huge and tiny values, NaN and infinity refused), dequantisation
    /// to every dtype, and the NVFP4 GEMV against float64; exit 7 if any check fails.
    Verify(Fp4VerifyArgs),
    /// Time the NVFP4 GEMV against cuBLAS bf16 on the same shape, in the same run.
    Bench(Fp4BenchArgs),
    /// The NVFP4 contest shapes (gemv, gemm, dual gemm, group gemm) with the contest's data:
    /// verified against the float64 reference rounded to fp16 (overflows must match as
    /// infinity; rtol = atol = 1e-3 elsewhere) and timed, dequantisation included; exit 7 if any
    /// fails.
    Seeds(Fp4SeedsArgs),
    /// Compile every FP4 kernel variant (no GPU needed): registers, spills.
    Check(super::args::ArchArgs),
}

#[derive(Debug, Args)]
pub struct Fp4VerifyArgs {
    /// quick or full.
    #[arg(long, default_value = "full")]
    pub suite: String,
}

#[derive(Debug, Args)]
pub struct Fp4BenchArgs {
    /// Bench the NVFP4 GEMV (the only FP4 bench so far).
    #[arg(long)]
    pub gemv: bool,
    #[arg(long, default_value_t = 1)]
    pub m: usize,
    #[arg(long, default_value_t = 8192)]
    pub n: usize,
    #[arg(long, default_value_t = 8192)]
    pub k: usize,
    /// bf16 or f16.
    #[arg(long, default_value = "bf16")]
    pub out: String,
    /// Time kiln alone.
    #[arg(long)]
    pub no_vendor: bool,
    #[arg(long, default_value_t = 50)]
    pub reps: usize,
    #[arg(long, default_value_t = 10)]
    pub warmup: usize,
    /// Warm up for at least this many ms of GPU time too (the clock under sustained load; 0:
    /// `--warmup` launches only).
    #[arg(long, value_parser = super::args::warmup_ms, default_value_t = 0.0)]
    pub warmup_ms: f64,
    /// Launches a sample (1 to 16), back to back, each on its own copy of the weights (so each
    /// reads DRAM): 1 times a lone call from a flushed L2, more a decode step's chain of layers.
    #[arg(long, default_value_t = 1)]
    pub chain: usize,
}

#[derive(Debug, Args)]
pub struct Fp4SeedsArgs {
    /// One problem only: gemv, gemm, dual or group.
    #[arg(long)]
    pub problem: Option<String>,
    #[arg(long, default_value_t = 20)]
    pub reps: usize,
}

pub fn run(env: &Env, a: &Fp4CliArgs) -> Result<ExitCode> {
    match &a.action {
        Fp4Action::Verify(v) => verify(env, v),
        Fp4Action::Bench(b) => bench(env, b),
        Fp4Action::Seeds(s) => seeds(env, s),
        Fp4Action::Check(c) => check(env, c),
    }
}

fn verify(env: &Env, a: &Fp4VerifyArgs) -> Result<ExitCode> {
    let quick = a.suite.parse::<Suite>()? == Suite::Quick;
    let ctx = env.context()?;
    let checks = suite(quick);
    let landing = Landing::begin(env, &ctx, None, Some((checks.len(), "fp4 verify")))?;
    let mut outcomes: Vec<Outcome> = Vec::new();
    for c in &checks {
        landing.land(&mut outcomes, verify_check(&ctx, c)?);
    }
    landing.end(false)?;
    let failed = failures(&outcomes);
    const MISMATCHES: Column = ("mismatches", |o| o.mismatches.to_string());
    const MESSAGE: Column = ("verdict", |o| o.message.clone());
    let columns = [CHECK, CASE, MISMATCHES, REL_ERR, MESSAGE];
    print_outcomes(env, Some(&ctx.info), &outcomes, &columns, || {
        format!(
            "{} checks on {}, {failed} failed. NaN and infinite inputs are refused (e2m1 has \
             neither), naming the first such element; magnitudes beyond a block's range saturate \
             to ±6; zeros keep their sign; an all-zero NVFP4 tensor gets the tensor scale 2^-126.",
            outcomes.len(),
            ctx.info.name
        )
    });
    Ok(verified(failed > 0))
}

fn bench(env: &Env, a: &Fp4BenchArgs) -> Result<ExitCode> {
    if !a.gemv {
        return Err(Error::invalid(
            "say what to bench: --gemv (the NVFP4 GEMV against cuBLAS bf16)",
        ));
    }
    let out: DType = a.out.parse()?;
    let p = GemvProblem::new(a.m, a.n, a.k, out);
    p.validate()?;
    kiln::harness::fp4_bench::check_chain(a.chain)?;
    let ctx = env.context()?;
    let opt = BenchOptions {
        warmup: a.warmup,
        warmup_ms: a.warmup_ms,
        reps: a.reps,
        ..BenchOptions::default()
    };
    let rows = bench_gemv(&ctx, &p, a.no_vendor, a.chain, &opt)?;
    if env.json {
        env.print_json(&json!({ "device": ctx.info, "timings": rows }));
    } else {
        print!("{}", gemv_text(&rows, &ctx.info.name));
    }
    Ok(ExitCode::SUCCESS)
}

/// `kiln fp4 bench --gemv`'s table (without --json): a row per timing, the device under it.
pub(super) fn gemv_text(rows: &[Row], device: &str) -> String {
    const MEDIAN: Col = ("median us", |r| r.fixed("median_us", 2));
    const MIN: Col = ("min us", |r| r.fixed("min_us", 2));
    const GBPS: Col = ("GB/s", |r| r.fixed("gbps", 0));
    const OF_COPY: Col = ("of copy", |r| {
        format!(
            "{:.0}%",
            100.0 * r.num("of_copy_ceiling").unwrap_or(f64::NAN)
        )
    });
    const OF_READ: Col = ("of read", |r| match r.num("of_read_ceiling") {
        Some(f) => format!("{:.0}%", 100.0 * f),
        None => "-".into(),
    });
    const VS: Col = ("vs cuBLAS bf16", |r| r.ratio("speedup_vs_cublas", 2));
    let columns = [VERSION, PROBLEM, MEDIAN, MIN, GBPS, OF_COPY, OF_READ, VS];
    let chain = rows.first().and_then(|r| r.num("chain")).unwrap_or(1.0);
    let how = if chain > 1.0 {
        format!(
            "L2 flushed, then {chain} launches back to back over as many copies of the weights; \
             per launch"
        )
    } else {
        "L2 flushed before every launch".into()
    };
    let footer = format!(
        "on {device} ({how}; `read`: a plain read of the GEMV's bytes timed the same way, the \
         ceiling at this size)"
    );
    bench_table::text(&columns, rows, &footer)
}

fn seeds(env: &Env, a: &Fp4SeedsArgs) -> Result<ExitCode> {
    let list = shapes(a.problem.as_deref())?;
    let ctx = env.context()?;
    let peak = kiln::harness::peak::measure(&ctx, &kiln::vendor::cublas::Cublas)?;
    let opt = BenchOptions {
        reps: a.reps,
        ..BenchOptions::default()
    };
    let landing = Landing::begin(env, &ctx, None, Some((list.len(), "fp4 seeds")))?;
    let mut results: Vec<SeedResult> = Vec::new();
    for s in &list {
        let r = run_shape(&ctx, &env.registry, s, &opt, peak.copy_tbps)?;
        landing.fail(!r.passed, || {
            format!("FAIL {} {}: {}", r.problem, r.shape, r.message)
        });
        results.push(r);
        landing.tick();
    }
    landing.end(false)?;
    let failed = results.iter().filter(|r| !r.passed).count();
    let mean = geomean(&results.iter().map(|r| r.median_us).collect::<Vec<_>>());
    if env.json {
        env.print_json(
            &json!({ "device": ctx.info, "peak": peak, "results": results, "geomean_us": mean }),
        );
    } else {
        type C = Cell<SeedResult>;
        const PROBLEM: C = ("problem", |r| r.problem.clone());
        const SHAPE: C = ("shape", |r| r.shape.clone());
        const MEDIAN: C = ("median us", |r| format!("{:.2}", r.median_us));
        const TFLOPS: C = ("TFLOPS", |r| format!("{:.1}", r.tflops));
        const OF_PEAK: C = ("of bf16 peak", |r| {
            format!("{:.1}%", 100.0 * r.of_bf16_peak)
        });
        const GBPS: C = ("GB/s", |r| format!("{:.0}", r.gbps));
        const OF_COPY: C = ("of copy", |r| format!("{:.0}%", 100.0 * r.of_copy));
        const WORST: C = ("worst", |r| format!("{:.2}", r.worst));
        const SAID: C = ("verdict", |r| r.message.clone());
        let columns = [
            PROBLEM, SHAPE, MEDIAN, TFLOPS, OF_PEAK, GBPS, OF_COPY, WORST, SAID,
        ];
        print!("{}", table(&columns, &results).render());
        for p in ["gemv", "gemm", "dual", "group"] {
            let us: Vec<f64> = results
                .iter()
                .filter(|r| r.problem == p)
                .map(|r| r.median_us)
                .collect();
            if !us.is_empty() {
                println!(
                    "{p}: geomean {:.2} us over {} shapes",
                    geomean(&us),
                    us.len()
                );
            }
        }
        println!(
            "geomean {mean:.2} us over {} shapes, {failed} failed, on {} (bf16 peak {:.0} TFLOPS \
             nominal, copy {:.2} TB/s measured; as the contest compares: ref = the float64 \
             reference rounded to fp16, an overflow there must be the same infinity, else worst \
             = max |c - ref| / (1e-3 + 1e-3 |ref|) <= 1; operands drawn as each problem's \
             reference.py draws them)",
            results.len(),
            ctx.info.name,
            kiln::harness::fp4_seeds::H100_BF16_TFLOPS,
            peak.copy_tbps
        );
    }
    Ok(verified(failed > 0))
}

fn check(env: &Env, a: &super::args::ArchArgs) -> Result<ExitCode> {
    kiln::jit::arch::check(&a.arch)?;
    let items = kiln::ops::fp4::variants(&a.arch)
        .into_iter()
        .map(|(version, spec)| ("fp4", version, spec))
        .collect();
    super::check::check_listed(env, items, "fp4 check")
}
