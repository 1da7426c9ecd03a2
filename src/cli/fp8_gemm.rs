//! `kiln verify`, `bench`, `plan`, `inspect`, `tune` and `sanitize` with `--dtype e4m3|e5m2`:
//! the same commands routed to the dense FP8 GEMM (`kiln::ops::fp8`), and the ladder's FP8 rung.

use super::args::TimingArgs;
use std::process::ExitCode;

use kiln::error::{Error, Result};
use kiln::harness::bench::BenchOptions;
use kiln::harness::bench::Row;
use kiln::harness::fp8::{gemm_suite, verify_gemm};
use kiln::harness::fp8_bench::{bench_fp8, ladder_problems};
use kiln::harness::outcome::Outcome;
use kiln::ops::fp8::gemm::NAME;
use kiln::ops::fp8::request::{fp8_problem, fp8_request, GemmFlags};
use kiln::ops::fp8::Fp8Problem;
use kiln::report::Table;
use serde_json::json;

use super::args::{BenchArgs, InspectArgs, PlanArgs, ProblemArgs, TuneArgs, VerifyArgs};
use super::bench_table::{self, Col, MEDIAN_MS, PROBLEM, TFLOPS, VERSION};
use super::env::{bench_options, device_or_h100, Env};
use super::progress::bar;
use super::verdicts::{
    failures, print_outcomes, verified, Landing, BEYOND_ROUNDING, BOUND_SCI, CASE, REL_ERR, VERDICT,
};

/// The generic GEMM flags as the library's request reads them.
fn flags(a: &ProblemArgs) -> GemmFlags<'_> {
    GemmFlags {
        shape: a.shape.as_deref(),
        layout: &a.layout,
        dtype: &a.dtype,
        out: a.out.as_deref(),
        scale: a.scale.as_deref(),
        alpha: a.alpha,
        beta: a.beta,
        lda: a.lda,
        ldb: a.ldb,
        ldc: a.ldc,
    }
}

/// True when the flags ask for the FP8 GEMM (after refusing --scale without an FP8 dtype).
pub(super) fn wanted(a: &ProblemArgs) -> Result<bool> {
    Ok(fp8_request(&flags(a))?.is_some())
}

/// The only version an FP8 request runs: refuses any other name.
fn only_fp8_version<'a>(names: impl IntoIterator<Item = &'a String>) -> Result<()> {
    match names.into_iter().find(|v| v.as_str() != NAME) {
        Some(v) => Err(Error::invalid(format!(
            "--version {v} does not take FP8 operands: --dtype e4m3 runs {NAME} (and cuBLASLt's \
             FP8 beside it); leave --version out or name {NAME}"
        ))),
        None => Ok(()),
    }
}

/// Refuses `p` as the FP8 GEMM does on an H100 SXM, before any GPU is touched.
pub(super) fn refuse_unsupported(p: &Fp8Problem) -> Result<()> {
    kiln::ops::fp8::gemm::supports(p, &kiln::device::DeviceInfo::h100_sxm())
        .map_err(Error::refused(NAME))
}

/// `kiln verify --dtype e4m3`: one problem, or the FP8 GEMM suite's cases of that format (and
/// scale mode, if given); exit 7 if any fails.
pub(super) fn verify(env: &Env, a: &VerifyArgs) -> Result<ExitCode> {
    only_fp8_version(&a.versions)?;
    let f = flags(&a.problem);
    let (format, scale, _) = fp8_request(&f)?.expect("an FP8 request");
    let cases: Vec<_> = match fp8_problem(&f, None)? {
        Some(p) => vec![kiln::harness::fp8::GemmCase {
            p,
            cfg: None,
            recipe: kiln::formats::ScaleRecipe::Fp32,
            data: kiln::harness::fp8::Data::Signed,
        }],
        None => gemm_suite(
            a.suite.parse::<kiln::harness::shapes::Suite>()? == kiln::harness::shapes::Suite::Quick,
        )
        .into_iter()
        .filter(|c| c.p.a == format && (f.scale.is_none() || c.p.scale == scale))
        .collect(),
    };
    let ctx = env.context()?;
    let landing = Landing::begin(env, &ctx, None, Some((cases.len(), "verify fp8")))?;
    let mut outcomes: Vec<Outcome> = Vec::new();
    for case in &cases {
        landing.land(&mut outcomes, verify_gemm(&ctx, case, false)?);
    }
    landing.end(false)?;
    // the shape of `kiln verify`'s JSON: one object per check, with `skipped` for a refusal
    let failed = failures(&outcomes);
    let columns = [CASE, REL_ERR, BEYOND_ROUNDING, BOUND_SCI, VERDICT];
    print_outcomes(env, None, &outcomes, &columns, || {
        format!(
            "{} checks of {NAME} on {}, {failed} failed",
            outcomes.len(),
            ctx.info.name
        )
    });
    Ok(verified(failed > 0))
}

/// `kiln bench --dtype e4m3`: the FP8 GEMM and cuBLASLt's FP8 on the same operands, in the same
/// run, the ratio to cuBLASLt per problem.
pub(super) fn bench(env: &Env, a: &BenchArgs) -> Result<ExitCode> {
    only_fp8_version(&a.versions)?;
    if a.set.is_some() || a.all || a.passes > 1 {
        return Err(Error::invalid(
            "--set, --all and --passes time the bf16 versions; for FP8 give --shape (the ladder \
             already has an FP8 rung, `kiln fp8 bench --set deepseek` DeepSeek-V3's shapes)",
        ));
    }
    let p = fp8_problem(&flags(&a.problem), Some("4096x4096x4096"))?.expect("a default shape");
    refuse_unsupported(&p)?;
    let ctx = env.context()?;
    let mut opt = bench_options(env, &a.timing);
    opt.interleave = !a.sequential;
    let rows = bench_fp8(&ctx, &p, &[], true, &opt)?;
    if env.json {
        env.print_json(&json!(rows));
    } else {
        print!("{}", timings_text(&rows, &ctx.info.name));
    }
    Ok(ExitCode::SUCCESS)
}

/// `kiln bench --dtype e4m3`'s table (without --json): a row per timing, the device under it.
pub(super) fn timings_text(rows: &[Row], device: &str) -> String {
    const CONFIG: Col = ("config", |r| r.text("config"));
    const VS: Col = ("vs cuBLASLt FP8", |r| match r.num("speedup_vs_cublaslt") {
        Some(s) => format!("{s:.3}x"),
        None => r.text("vendor_note"),
    });
    let columns = [VERSION, PROBLEM, CONFIG, MEDIAN_MS, TFLOPS, VS];
    bench_table::text(&columns, rows, &format!("on {device}"))
}

/// The ladder's FP8 rung: [`ladder_problems`] timed beside cuBLASLt's FP8 (a table, or the rows
/// for JSON). `say` prints the section lines (stderr under --json).
pub(super) fn ladder_rung(
    env: &Env,
    ctx: &kiln::device::Context,
    opt: &BenchOptions,
    say: &dyn Fn(&str),
) -> Result<Vec<Row>> {
    say("\n== FP8 rung: fp8_wgmma against cuBLASLt's FP8 (e4m3, bf16 out) ==");
    let mut rows = Vec::new();
    for p in ladder_problems() {
        rows.extend(bench_fp8(ctx, &p, &[], true, opt)?);
    }
    if !env.json {
        say(rung_text(&rows).trim_end());
    }
    Ok(rows)
}

/// The ladder's FP8 rung as a table: a row per problem, kiln's TFLOPS beside cuBLASLt's.
pub(super) fn rung_text(rows: &[Row]) -> String {
    let mut t = Table::new(&["problem", "fp8_wgmma TFLOPS", "cuBLASLt TFLOPS", "ratio"]);
    let or_dash = |s: String| if s.is_empty() { "-".into() } else { s };
    for r in rows.iter().filter(|r| r.has("config")) {
        let vendor = rows
            .iter()
            .find(|v| !v.has("config") && v.text("problem") == r.text("problem"));
        t.row(&[
            r.text("problem"),
            r.fixed("tflops", 0),
            or_dash(vendor.map(|v| v.fixed("tflops", 0)).unwrap_or_default()),
            or_dash(r.ratio("speedup_vs_cublaslt", 3)),
        ]);
    }
    t.render()
}

/// `kiln plan --dtype e4m3`: the config, the rules that chose it, every compiled config's cost.
pub(super) fn plan(env: &Env, a: &PlanArgs) -> Result<ExitCode> {
    if let Some(v) = &a.version {
        only_fp8_version([v])?;
    }
    let Some(p) = fp8_problem(&flags(&a.problem), None)? else {
        return Err(Error::invalid(
            "kiln plan needs a problem: add --shape MxNxK",
        ));
    };
    let mut dev = device_or_h100();
    if let Some(sms) = a.sms {
        dev.sm_count = sms;
    }
    let plan = kiln::ops::fp8::plan::plan(&p, &dev, None, env.config.overrides.fp8.rule)?;
    if env.json {
        env.print_json(&json!(plan));
        return Ok(ExitCode::SUCCESS);
    }
    println!("{p} on {} ({} SMs)", dev.name, dev.sm_count);
    println!("version: {NAME}");
    println!("config: {}", plan.config);
    for w in &plan.why {
        println!("  because {w}");
    }
    let mut t = Table::new(&[
        "config",
        "tiles",
        "waves",
        "cost (waves)",
        "us (bytes)",
        "slices",
        "fits",
    ]);
    for c in &plan.candidates {
        t.row(&[
            c.config.to_string(),
            c.tiles.to_string(),
            c.waves.to_string(),
            c.cost.to_string(),
            format!("{:.1}", c.predicted_us),
            c.best_splits.to_string(),
            c.fits.to_string(),
        ]);
    }
    print!("{}", t.render());
    println!("{}", plan.launch_text());
    Ok(ExitCode::SUCCESS)
}

/// The FP8 problem class `kiln inspect` compiles for (its shape only picks the config).
pub(super) fn inspect_problem(a: &InspectArgs) -> Result<Option<Fp8Problem>> {
    let f = GemmFlags {
        shape: Some("4096x4096x4096"),
        layout: &a.layout,
        dtype: &a.dtype,
        out: a.out.as_deref(),
        scale: a.scale.as_deref(),
        alpha: 1.0,
        ..GemmFlags::default()
    };
    let p = fp8_problem(&f, None)?;
    if p.is_some() && a.version != NAME {
        only_fp8_version([&a.version])?;
    }
    Ok(p)
}

/// `kiln inspect gemm fp8_wgmma --dtype e4m3 --scale S`: the variant the dispatch runs at
/// 4096³ of that class, compiled, its resources and SASS.
pub(super) fn inspect_spec(a: &InspectArgs, p: &Fp8Problem) -> Result<kiln::jit::KernelSpec> {
    refuse_unsupported(p)?;
    let cfg = kiln::ops::fp8::gemm::choose(p, &device_or_h100());
    Ok(kiln::ops::fp8::gemm::spec(&a.arch, p, cfg))
}

/// `kiln tune --dtype e4m3 --shape S`: every config of the FP8 space verified and timed beside
/// cuBLASLt's FP8, recorded in the store; the fastest verified first.
pub(super) fn tune(env: &Env, a: &TuneArgs) -> Result<ExitCode> {
    if let Some(v) = &a.version {
        only_fp8_version([v])?;
    }
    if a.target.as_deref().is_some_and(|t| t != "gemm")
        || a.resume.is_some()
        || a.landscape.is_some()
    {
        return Err(Error::invalid(
            "--dtype e4m3 tunes the FP8 GEMM over its whole config space in this process: \
             leave out OP other than gemm, --resume and --landscape",
        ));
    }
    let Some(p) = fp8_problem(&flags(&a.problem), None)? else {
        return Err(Error::invalid("kiln tune --dtype e4m3 needs --shape MxNxK"));
    };
    refuse_unsupported(&p)?;
    let space = kiln::tune::fp8::space(&p);
    let ctx = env.context()?;
    let opt = BenchOptions {
        reps: a.reps,
        warmup: a.warmup,
        ..bench_options(env, &TimingArgs::default())
    };
    let run = env.begin("tune", Some(&ctx.info))?;
    let pb = bar(space.len(), "tune fp8", env.json);
    let mut store_err = None;
    let ranked = kiln::tune::fp8::tune_fp8(&ctx, &p, &opt, |c| {
        pb.inc(1);
        if let Err(e) = super::env::record(&run, kiln::store::rows::fp8_tune_row(&p, c)) {
            store_err.get_or_insert(e);
        }
    })?;
    pb.finish_and_clear();
    if let Some(e) = store_err {
        return Err(e);
    }
    super::env::finish(&run, "ok")?;
    if env.json {
        env.print_json(&json!({ "device": ctx.info, "problem": p, "candidates": ranked }));
    } else {
        let mut t = Table::new(&[
            "config",
            "verified",
            "median ms",
            "TFLOPS",
            "vs cuBLASLt FP8",
        ]);
        for c in ranked.iter().take(a.top) {
            t.row(&[
                c.config.to_string(),
                if c.verified {
                    "yes".into()
                } else {
                    c.message.clone()
                },
                c.median_ms.map(|m| format!("{m:.4}")).unwrap_or_default(),
                c.tflops.map(|x| format!("{x:.0}")).unwrap_or_default(),
                c.speedup_vs_cublaslt
                    .map(|s| format!("{s:.3}x"))
                    .unwrap_or_default(),
            ]);
        }
        print!("{}", t.render());
        let chosen = kiln::ops::fp8::gemm::choose(&p, &ctx.info);
        println!(
            "{p}: {} configs on {}; the heuristic picks {chosen} (best {})",
            ranked.len(),
            ctx.info.name,
            ranked
                .first()
                .map(|c| c.config.to_string())
                .unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}
