//! `kiln verify` and `kiln bench`: the GEMM versions against the reference on a shape suite or one
//! problem, and timed against the vendor in the same run (one pass or several in rotated orders).

use std::process::ExitCode;

use kiln::device::Context;
use kiln::error::{Error, Result};
use kiln::harness::bench::{BenchOptions, Timing};
use kiln::harness::bench_versions::BenchVersions;
use kiln::harness::outcome::Outcome;
use kiln::harness::{peak, shapes, suite};
use kiln::ops::gemm::{parse_shape, DType, GemmKernel, GemmProblem, Layout};
use kiln::ops::registry::Registry;
use kiln::report::Table;
use kiln::store::rows;
use serde_json::json;

use super::args::{BenchArgs, ProblemArgs, VerifyArgs};
use super::env::{bench_options, finish, named, record, refuse_given, Env};
use super::progress::bar;
use super::verdicts::{by_version, fail_line, largest, verified, Landing};

/// The typed problem from command-line arguments.
pub(super) fn problem_from(
    a: &ProblemArgs,
    default_shape: Option<&str>,
) -> Result<Option<GemmProblem>> {
    Registry::check_op(&a.op)?;
    let Some(shape) = a.shape.as_deref().or(default_shape) else {
        return Ok(None);
    };
    let (m, n, k) = parse_shape(shape)?;
    let input: DType = a.dtype.parse()?;
    let output: DType = match &a.out {
        Some(o) => o.parse()?,
        None => input,
    };
    let mut p = GemmProblem::new(m, n, k, a.layout.parse::<Layout>()?, input, output);
    p.alpha = a.alpha;
    p.beta = a.beta;
    p.lda = a.lda.unwrap_or(p.lda);
    p.ldb = a.ldb.unwrap_or(p.ldb);
    p.ldc = a.ldc.unwrap_or(p.ldc);
    p.validate()?;
    Ok(Some(p))
}

/// Without --shape, a flag that describes one problem would be silently ignored by the suite.
fn no_problem_flags(a: &ProblemArgs) -> Result<()> {
    let shaping = [
        ("--out-dtype", a.out.is_some()),
        ("--alpha", a.alpha != 1.0),
        ("--beta", a.beta != 0.0),
        ("--lda", a.lda.is_some()),
        ("--ldb", a.ldb.is_some()),
        ("--ldc", a.ldc.is_some()),
    ];
    refuse_given(&shaping, |flag| {
        format!(
            "{flag} describes one problem, which needs its shape: add --shape MxNxK, or leave {flag} out to verify the suite"
        )
    })
}

pub(super) fn kernels<'r>(env: &'r Env, names: &[String]) -> Result<Vec<&'r dyn GemmKernel>> {
    let r = &env.registry;
    named(r.gemm(), names, |n| r.gemm_version(n))
}

pub fn verify(env: &Env, a: &VerifyArgs) -> Result<ExitCode> {
    if let Some(path) = &a.repro {
        return super::fuzz::repro(env, path);
    }
    if super::fp8_gemm::wanted(&a.problem)? {
        return super::fp8_gemm::verify(env, a);
    }
    let problems = match problem_from(&a.problem, None)? {
        Some(p) => vec![p],
        None => {
            no_problem_flags(&a.problem)?;
            shapes::gemm_suite(a.suite.parse()?)
        }
    };
    let ks = kernels(env, &a.versions)?;
    let ctx = env.context()?;
    let outcomes = run_verify(env, &ctx, &ks, &problems, true)?;
    if env.json {
        env.print_json(&json!(outcomes));
    }
    Ok(verified(outcomes.iter().any(|o| !o.passed)))
}

/// Checks `ks` on `problems` in a run of the store, the FAIL lines as they land; the table of
/// them by version unless --json, when `table`.
pub(super) fn run_verify(
    env: &Env,
    ctx: &Context,
    ks: &[&dyn GemmKernel],
    problems: &[GemmProblem],
    table: bool,
) -> Result<Vec<Outcome>> {
    let checks = Some((ks.len() * problems.len(), "verify"));
    let landing = Landing::begin(env, ctx, Some("verify"), checks)?;
    let mut store_err = None;
    let outcomes = suite::verify_all(ctx, ks, problems, |o| {
        landing.fail(!o.passed, || fail_line(o));
        if let Err(e) = landing.record(rows::gemm_verify_row(o)) {
            store_err.get_or_insert(e);
        }
        landing.tick();
    })?;
    if let Some(e) = store_err {
        return Err(e);
    }
    landing.end(outcomes.iter().any(|o| !o.passed))?;
    if table && !env.json {
        print!("{}", verify_table(ks, &outcomes).render());
    }
    Ok(outcomes)
}

fn verify_table(ks: &[&dyn GemmKernel], outcomes: &[Outcome]) -> Table {
    let names: Vec<&str> = ks.iter().map(|k| k.name()).collect();
    let err = |ran: &[&Outcome]| format!("{:.2e}", largest(ran, |o| o.rel_error));
    by_version(&names, outcomes, &[("max rel error", &err)])
}
pub fn bench(env: &Env, a: &BenchArgs) -> Result<ExitCode> {
    if a.set.as_deref() == Some("random") {
        return super::bench_random::bench_random(env, a);
    }
    if a.count.is_some() || a.seed.is_some() {
        return Err(Error::invalid(
            "--count and --seed draw the shapes of --set random; add --set random or leave them out",
        ));
    }
    if super::fp8_gemm::wanted(&a.problem)? {
        return super::fp8_gemm::bench(env, a);
    }
    let problems =
        match a.set.as_deref() {
            None => vec![problem_from(&a.problem, Some("4096x4096x4096"))?
                .expect("a default shape is given")],
            Some("ladder") => suite::ladder_problems(),
            Some("targets") => {
                let layouts: Vec<Layout> = a
                    .layouts
                    .split(',')
                    .map(|l| l.trim().parse())
                    .collect::<Result<_>>()?;
                suite::target_problems(&layouts)
            }
            Some(other) => {
                return Err(Error::invalid(format!(
                    "unknown shape set `{other}`; use ladder, targets or random"
                )))
            }
        };
    let ctx = env.context()?;
    let ks: Vec<&dyn GemmKernel> = if a.all {
        env.registry
            .gemm()
            .iter()
            .filter(|k| !k.is_vendor())
            .map(|k| k.as_ref())
            .collect()
    } else if a.versions.is_empty() {
        vec![env.registry.select_gemm(
            &problems[0],
            &ctx.info,
            &ctx.tuned,
            env.config.version_for("gemm"),
        )?]
    } else {
        let ks = kernels(env, &a.versions)?;
        if a.set.is_none() {
            for k in &ks {
                k.supports(&problems[0], &ctx.info)
                    .map_err(|reason| Error::Unsupported {
                        kernel: k.name().into(),
                        reason,
                    })?;
            }
        }
        ks
    };
    let vendor = env.registry.gemm_version("cublas")?;
    let mut opt = bench_options(env, &a.timing);
    opt.interleave = !a.sequential;
    let passes = a.passes as usize;
    let rows = run_bench(
        env,
        &ctx,
        BenchVersions::Listed(&ks),
        vendor,
        &problems,
        &opt,
        (passes, a.order_seed),
        None,
        true,
    )?;
    if a.set.as_deref() == Some("ladder") {
        let say = |s: &str| env.say(s);
        let fp8 = super::fp8_gemm::ladder_rung(env, &ctx, &opt, &say)?;
        if env.json {
            eprintln!("{}", json!({ "fp8_rung": fp8 }));
        }
    }
    // Each version's ratios per problem, gathered once for the passes table and the summary.
    let per_version: Vec<(&str, Vec<suite::PassRatios>)> = ks
        .iter()
        .map(|k| (k.name(), suite::ratios_over_passes(&rows, k.name())))
        .collect();
    if env.json {
        env.print_json(&json!(rows));
    } else if passes > 1 {
        for (name, ratios) in &per_version {
            print!("{}", passes_table(ratios, name).render());
        }
    }
    if problems.len() > 1 || passes > 1 {
        for (name, ratios) in &per_version {
            if let Some((g, min, n)) = suite::summary_of(ratios) {
                let per = if passes > 1 {
                    format!(" (each its median of {passes} passes in different orders)")
                } else {
                    String::new()
                };
                let mut line = format!(
                    "{name}: geometric mean {g:.3}x the vendor over {n} problems{per}, lowest {min:.3}x"
                );
                if passes > 1 {
                    if let Some((p, (pass, pos, r))) = ratios
                        .iter()
                        .map(|o| (o.problem, o.lowest()))
                        .min_by(|a, b| a.1 .2.total_cmp(&b.1 .2))
                    {
                        line += &format!(
                            "; lowest single pass {r:.3}x ({}, pass {}, place {} of {})",
                            p.label(),
                            pass + 1,
                            pos + 1,
                            problems.len()
                        );
                    }
                }
                // On stderr under --json, so stdout stays one JSON value.
                if env.json {
                    eprintln!("{line}")
                } else {
                    println!("{line}")
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Times `versions` beside `vendor` on `problems` (`passes` times, later passes in orders shuffled
/// from `order_seed`), recording every timing (with the `draw_seed` of drawn problems); the table
/// of them unless --json, when `table` and one pass.
#[allow(clippy::too_many_arguments)]
pub(super) fn run_bench(
    env: &Env,
    ctx: &Context,
    versions: BenchVersions,
    vendor: &dyn GemmKernel,
    problems: &[GemmProblem],
    opt: &BenchOptions,
    (passes, order_seed): (usize, u64),
    draw_seed: Option<u64>,
    table: bool,
) -> Result<Vec<suite::BenchRow>> {
    let run = env.begin("bench", Some(&ctx.info))?;
    let pb = bar(problems.len() * passes, "bench", env.json);
    let mut store_err = None;
    let rows = suite::bench_passes(
        ctx,
        versions,
        Some(vendor),
        problems,
        opt,
        passes,
        order_seed,
        |row| {
            pb.inc(1);
            for (t, ratio) in timings(row) {
                let flush = ctx.overrides.bench.flush;
                if let Err(e) = record(
                    &run,
                    rows::gemm_bench_row(row, t, ratio, opt.flush_l2, flush, draw_seed),
                ) {
                    store_err.get_or_insert(e);
                }
            }
        },
    )?;
    pb.finish_and_clear();
    if let Some(e) = store_err {
        return Err(e);
    }
    finish(&run, "ok")?;
    if table && !env.json && passes == 1 {
        print!(
            "{}",
            bench_table(&rows, latest_peak(env, &ctx.info.name).as_ref()).render()
        );
    }
    Ok(rows)
}

/// A row's timings with their ratio to the vendor: each version's, then the vendor's own (1).
fn timings(row: &suite::BenchRow) -> impl Iterator<Item = (&Timing, Option<f64>)> {
    let versions = row.versions.iter().map(|(t, r)| (t, *r));
    versions.chain(row.vendor.iter().map(|v| (v, Some(1.0))))
}

/// One version's ratio to the vendor per problem over the passes of `--passes`: the median, the
/// lowest and highest pass, and where in its pass's order the lowest fell.
fn passes_table(ratios: &[suite::PassRatios], version: &str) -> Table {
    let mut t = Table::new(&[
        "problem",
        "version",
        "x vendor (median)",
        "lowest",
        "highest",
        "lowest at (pass, place)",
    ]);
    for r in ratios {
        let (pass, pos, low) = r.lowest();
        let high = r.passes.iter().map(|p| p.2).fold(f64::MIN, f64::max);
        t.row(&[
            r.problem.label(),
            version.into(),
            format!("{:.3}", r.median),
            format!("{low:.3}"),
            format!("{high:.3}"),
            format!("{}, {}", pass + 1, pos + 1),
        ]);
    }
    t
}

/// The newest `kiln peak` measured on a device of this name, if the store has one.
fn latest_peak(env: &Env, device_name: &str) -> Option<peak::Peak> {
    if env.no_store {
        return None;
    }
    let rows = env.store().ok()?.results(Some("peak"), None, 50).ok()?;
    let r = rows
        .into_iter()
        .find(|r| r.device.as_deref() == Some(device_name))?;
    serde_json::from_value(r.metrics).ok()
}

fn bench_table(rows: &[suite::BenchRow], peak: Option<&peak::Peak>) -> Table {
    let mut t = Table::new(&[
        "problem",
        "version",
        "median ms",
        "min ms",
        "max ms",
        "TFLOPS",
        "x vendor",
        "of peak",
        "host µs",
    ]);
    for row in rows {
        for (tm, ratio) in timings(row) {
            t.row(&[
                row.problem.label(),
                tm.version.clone(),
                format!("{:.4}", tm.median_ms),
                format!("{:.4}", tm.min_ms),
                format!("{:.4}", tm.max_ms),
                format!("{:.1}", tm.tflops),
                ratio
                    .map(|r| format!("{r:.3}"))
                    .unwrap_or_else(|| "-".into()),
                peak.map(|pk| {
                    format!(
                        "{:.0}% gemm, {:.0}% bw",
                        100.0 * tm.tflops / pk.gemm_bf16_tflops,
                        100.0 * tm.gbps / 1e3 / pk.bandwidth_tbps()
                    )
                })
                .unwrap_or_else(|| "run `kiln peak`".into()),
                tm.host_us
                    .map(|h| format!("{h:.1}"))
                    .unwrap_or_else(|| "-".into()),
            ]);
        }
        for (v, why) in &row.skipped {
            t.row(&[
                row.problem.label(),
                v.clone(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                format!("skipped: {why}"),
                String::new(),
                String::new(),
            ]);
        }
    }
    t
}
