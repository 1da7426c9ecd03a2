//! `kiln profile`: Nsight Compute metrics of one version on one shape, a timeline, or a time split
//! by differencing two timed variants.

use super::args::TimingArgs;
use std::process::ExitCode;

use kiln::error::{Error, Result};
use kiln::ops::gemm::{GemmKernel, GemmProblem};
use kiln::ops::registry::Registry;
use kiln::report::Table;
use kiln::tools::{inspect as insp, profile as prof};
use serde_json::json;

use super::args::*;
use super::env::{bench_options, Env};
use super::gemm::problem_from;

fn problem_args(shape: &str, layout: &str, dtype: &str, out: &Option<String>) -> ProblemArgs {
    ProblemArgs {
        op: "gemm".into(),
        shape: Some(shape.into()),
        layout: layout.into(),
        dtype: dtype.into(),
        out: out.clone(),
        alpha: 1.0,
        beta: 0.0,
        lda: None,
        ldb: None,
        ldc: None,
        scale: None,
    }
}

pub fn profile(env: &Env, a: &ProfileArgs) -> Result<ExitCode> {
    Registry::check_op(&a.op)?;
    let kernel = env.registry.gemm_version(&a.version)?;
    let p = problem_from(&problem_args(&a.shape, &a.layout, &a.dtype, &a.out), None)?
        .expect("a shape is given");
    if let Some(other) = &a.split {
        return split(env, a, kernel, &p, other);
    }
    if a.timeline {
        return timeline(env, a, kernel, &p);
    }
    if kernel.is_vendor() {
        return Err(Error::invalid(
            "profile one of kiln's own versions; the vendor's kernels have other names",
        ));
    }
    kiln::device::init()?;
    let entry = insp::pick_variant(kernel, "sm_90a", p.layout, p.input, p.output)?.entry;
    let mut bench: Vec<String> = [
        "--version",
        kernel.name(),
        "--shape",
        &a.shape,
        "--layout",
        &a.layout,
        "--dtype",
        &a.dtype,
    ]
    .map(String::from)
    .to_vec();
    if let Some(o) = &a.out {
        bench.extend(["--out".to_string(), o.clone()]);
    }
    let (rows, dropped) = prof::profile(&kiln::tools::this_kiln()?, &entry, &bench)?;
    if env.json {
        env.print_json(
            &json!({"version": kernel.name(), "problem": p, "metrics": rows, "dropped": dropped}),
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{} on {} (ncu, 4th launch, clocks not locked)",
        kernel.name(),
        p.label()
    );
    let mut t = Table::new(&["metric", "value", "ncu name"]);
    for r in &rows {
        t.row(&[r.label().to_string(), r.shown(), r.name.clone()]);
    }
    print!("{}", t.render());
    if !dropped.is_empty() {
        println!("not available here: {}", dropped.join(", "));
    }
    Ok(ExitCode::SUCCESS)
}

/// `kiln profile --timeline`: the instrumented launch's events over the CTAs.
fn timeline(
    env: &Env,
    a: &ProfileArgs,
    kernel: &dyn GemmKernel,
    p: &GemmProblem,
) -> Result<ExitCode> {
    use kiln::tools::timeline as tl;
    let events = kernel.trace_events();
    if events.is_empty() {
        let instrumented: Vec<&str> = env
            .registry
            .gemm()
            .iter()
            .filter(|k| !k.trace_events().is_empty())
            .map(|k| k.name())
            .collect();
        return Err(Error::invalid(format!(
            "--timeline is instrumented in {} only, not {}; profile that version, or drop \
             --timeline for counters",
            instrumented.join(", "),
            kernel.name()
        )));
    }
    let ctx = env.context()?;
    if let Err(why) = kernel.supports(p, &ctx.info) {
        return Err(Error::invalid(format!(
            "{} cannot run {}: {why}",
            kernel.name(),
            p.label()
        )));
    }
    use kiln::harness::memory;
    memory::plan_bench(p, &ctx.info).ensure(&ctx, &memory::what(p))?;
    let bufs = kiln::harness::bench::BenchBuffers::random(&ctx, p, 7)?;
    let flusher = kiln::harness::bench::L2Flusher::new(&ctx)?;
    let warm = a.reps.unwrap_or(3);
    for _ in 0..warm {
        kernel.timeline(&ctx, p, &bufs.operands())?;
    }
    flusher.flush(&ctx)?;
    let stamps = kernel.timeline(&ctx, p, &bufs.operands())?;
    let rows = tl::summarize(&stamps, events);
    let span = tl::span_ns(&stamps);
    if env.json {
        let raw: Vec<_> = stamps
            .iter()
            .map(|s| json!({"ns": s.ns, "clk": s.clk}))
            .collect();
        env.print_json(
            &json!({"version": kernel.name(), "problem": p, "ctas": stamps.len(),
            "span_ns": span, "events": rows, "stamps": raw}),
        );
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{} on {}: one instrumented launch after {warm} warm ones, L2 flushed; {} CTAs, {:.2} us \
         from the first CTA's entry to the last stamp",
        kernel.name(),
        p.label(),
        stamps.len(),
        span as f64 / 1e3
    );
    let mut t = Table::new(&[
        "event",
        "CTAs",
        "cycles since own entry: median [min, max]",
        "us since first entry: median [min, max]",
    ]);
    for r in &rows {
        t.row(&[
            r.event.clone(),
            r.ctas.to_string(),
            format!("{} [{}, {}]", r.cycles[0], r.cycles[1], r.cycles[2]),
            format!(
                "{:.2} [{:.2}, {:.2}]",
                r.since_start_us[0], r.since_start_us[1], r.since_start_us[2]
            ),
        ]);
    }
    print!("{}", t.render());
    Ok(ExitCode::SUCCESS)
}

fn split(
    env: &Env,
    a: &ProfileArgs,
    ka: &dyn GemmKernel,
    pa: &GemmProblem,
    other: &str,
) -> Result<ExitCode> {
    let (name, shape) = other.split_once('@').unwrap_or((other, &a.shape));
    let kb = env.registry.gemm_version(name)?;
    let pb = problem_from(&problem_args(shape, &a.layout, &a.dtype, &a.out), None)?
        .expect("a shape is given");
    let ctx = env.context()?;
    let s = prof::split(
        &ctx,
        ka,
        pa,
        kb,
        &pb,
        &bench_options(
            env,
            &TimingArgs {
                reps: a.reps,
                ..TimingArgs::default()
            },
        ),
    )?;
    if env.json {
        env.print_json(&json!(s));
    } else {
        let mut t = Table::new(&["", "version", "problem", "median ms", "min ms", "max ms"]);
        for (tag, tm) in [("A", &s.a), ("B", &s.b)] {
            t.row(&[
                tag.to_string(),
                tm.version.clone(),
                tm.problem.label(),
                format!("{:.4}", tm.median_ms),
                format!("{:.4}", tm.min_ms),
                format!("{:.4}", tm.max_ms),
            ]);
        }
        print!("{}", t.render());
        println!("A - B = {:.4} ms = {:.1}% of A's time (compare with the min-max spread above before trusting it)", s.delta_ms, s.share_pct);
    }
    Ok(ExitCode::SUCCESS)
}
