//! One handler per subcommand: build the typed request, call the library, print, record.

use std::process::ExitCode;

use kiln::device::{self, Context, DeviceInfo};
use kiln::error::{Error, Result};
use kiln::harness::{bench::BenchOptions, check, peak, shapes, suite, verify::CheckOutcome};
use kiln::jit::{cache, Jit};
use kiln::ops::gemm::{parse_shape, DType, GemmKernel, GemmProblem, Layout};
use kiln::ops::registry::Registry;
use kiln::report::Table;
use kiln::store::{ResultRow, RunInfo, Store};
use serde_json::json;

use super::args::*;
use super::progress::bar;

/// What every handler needs: flags, config, registry, and (lazily) the store.
pub struct Env {
    pub json: bool,
    pub no_store: bool,
    pub config: kiln::config::Config,
    pub registry: Registry,
    pub(super) command: String,
}

impl Env {
    pub fn new(cli: &Cli, config: kiln::config::Config) -> Env {
        Env {
            json: cli.json,
            no_store: cli.no_store,
            config,
            registry: Registry::default(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
        }
    }

    pub(super) fn jit(&self) -> Jit {
        match &self.config.jit.cache_dir {
            Some(d) => Jit {
                cache: Some(cache::DiskCache { root: d.clone() }),
            },
            None => Jit::default(),
        }
    }

    pub(super) fn context(&self) -> Result<Context> {
        Context::open(0, self.jit())
    }

    /// Opens the store and starts a run; `None` with --no-store.
    pub(super) fn begin(
        &self,
        kind: &str,
        device: Option<&DeviceInfo>,
    ) -> Result<Option<(Store, i64)>> {
        if self.no_store {
            return Ok(None);
        }
        let store = match &self.config.store.path {
            Some(p) => Store::open(p)?,
            None => Store::open_default()?,
        };
        let id = store.begin_run(&RunInfo {
            kind: kind.into(),
            command: self.command.clone(),
            device: device.cloned(),
            kiln_commit: kiln::store::kiln_commit(),
        })?;
        Ok(Some((store, id)))
    }

    pub(super) fn print_json(&self, v: &serde_json::Value) {
        println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
    }
}

pub(super) fn record(run: &Option<(Store, i64)>, row: ResultRow) -> Result<()> {
    if let Some((s, id)) = run {
        s.record(*id, &row)?;
    }
    Ok(())
}

pub(super) fn finish(run: &Option<(Store, i64)>, status: &str) -> Result<()> {
    if let Some((s, id)) = run {
        s.finish_run(*id, status)?;
    }
    Ok(())
}

fn problem_json(p: &GemmProblem) -> serde_json::Value {
    serde_json::to_value(p).unwrap_or_default()
}

pub fn devices(env: &Env) -> Result<ExitCode> {
    let list = device::list()?;
    if env.json {
        env.print_json(&json!(list));
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&[
        "#",
        "name",
        "cc",
        "SMs",
        "L2 MiB",
        "smem opt-in KiB",
        "SM MHz",
        "mem MHz",
        "bus bits",
        "memory GiB",
    ]);
    for d in &list {
        t.row(&[
            d.ordinal.to_string(),
            d.name.clone(),
            format!("{}.{}", d.compute_capability.0, d.compute_capability.1),
            d.sm_count.to_string(),
            format!("{:.0}", d.l2_bytes as f64 / 1048576.0),
            (d.smem_optin_bytes / 1024).to_string(),
            d.sm_clock_mhz.to_string(),
            d.mem_clock_mhz.to_string(),
            d.mem_bus_bits.to_string(),
            format!("{:.1}", d.total_mem_bytes as f64 / (1u64 << 30) as f64),
        ]);
    }
    print!("{}", t.render());
    Ok(ExitCode::SUCCESS)
}

pub fn peak(env: &Env) -> Result<ExitCode> {
    let ctx = env.context()?;
    let run = env.begin("peak", Some(&ctx.info))?;
    let vendor = env.registry.gemm_version("cublas")?;
    let pk = peak::measure(&ctx, vendor)?;
    record(
        &run,
        ResultRow {
            op: "peak".into(),
            version: "device".into(),
            variant: String::new(),
            problem: json!({}),
            metrics: json!(pk),
            passed: None,
        },
    )?;
    finish(&run, "ok")?;
    if env.json {
        env.print_json(&json!({"device": ctx.info, "peak": pk}));
    } else {
        println!(
            "{}: copy {:.2} TB/s (read+write), read {:.2} TB/s, 32 MiB read from a flushed L2 {:.1} us, vendor bf16 GEMM 8192^3 {:.0} TFLOPS",
            ctx.info.name, pk.copy_tbps, pk.read_tbps, pk.read_32mib_us, pk.gemm_bf16_tflops
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn versions(env: &Env) -> Result<ExitCode> {
    let mut t = Table::new(&["op", "version", "rung", "what it adds"]);
    for k in env.registry.gemm() {
        t.row(&["gemm", k.name(), &k.rung().to_string(), k.summary()]);
    }
    for k in env.registry.attention() {
        t.row(&["attention", k.name(), &k.rung().to_string(), k.summary()]);
    }
    for k in env.registry.moe() {
        t.row(&["moe", k.name(), "-", k.summary()]);
    }
    print!("{}", t.render());
    Ok(ExitCode::SUCCESS)
}

/// The device limits to judge a compile against: the GPU present, else an H100.
pub(super) fn device_or_h100() -> DeviceInfo {
    device::init()
        .ok()
        .and_then(|_| DeviceInfo::query(0).ok())
        .unwrap_or_else(DeviceInfo::h100_sxm)
}

pub fn check(env: &Env, a: &CheckArgs) -> Result<ExitCode> {
    let (rows, failed) = run_check(env, &a.arch, a.version.as_deref())?;
    if env.json {
        env.print_json(&json!(rows));
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Compiles every variant, prints the table (unless --json), records, and says if any failed.
fn run_check(env: &Env, arch: &str, only: Option<&str>) -> Result<(Vec<check::CheckRow>, bool)> {
    if let Some(v) = only {
        if env.registry.attention_version(v).is_err() && env.registry.moe_version(v).is_err() {
            env.registry.gemm_version(v)?;
        }
    }
    let dev = device_or_h100();
    let work = check::check_items(&env.registry, arch, only);
    let (rows, wall_ms) = compile_items(env, arch, &work, &dev)?;
    let failed = rows.iter().any(|r| !r.ok());
    if !env.json {
        print!("{}", check_table(&rows).render());
        println!("{}", check_summary(&rows, arch, wall_ms));
        if rows.iter().all(|r| r.cached) && !rows.is_empty() {
            println!(
                "warm start: all {} variants loaded from the JIT cache in {wall_ms:.1} ms",
                rows.len()
            );
        }
    }
    Ok((rows, failed))
}

/// Compiles `work` for `arch` (judged against `dev`'s limits) with a progress bar, and records
/// each row as a `check` run: the rows, in `work`'s order, and the wall time in ms.
pub(super) fn compile_items(
    env: &Env,
    arch: &str,
    work: &[check::CheckItem],
    dev: &DeviceInfo,
) -> Result<(Vec<check::CheckRow>, f64)> {
    kiln::jit::nvrtc::version()?;
    let jit = env.jit();
    let pb = bar(work.len(), "check", env.json);
    let started = std::time::Instant::now();
    let rows: Vec<check::CheckRow> = check::check_each(&jit, work, dev, |r| {
        pb.inc(1);
        pb.set_message(r.variant.clone());
    });
    pb.finish_and_clear();
    let wall_ms = started.elapsed().as_secs_f64() * 1e3;
    let run = env.begin("check", None)?;
    for r in &rows {
        record(
            &run,
            ResultRow {
                op: r.op.clone(),
                version: r.version.clone(),
                variant: r.variant.clone(),
                problem: json!({"arch": arch}),
                metrics: json!(r),
                passed: Some(r.ok()),
            },
        )?;
    }
    let failed = rows.iter().any(|r| !r.ok());
    finish(&run, if failed { "failed" } else { "ok" })?;
    Ok((rows, wall_ms))
}

/// Every compiled variant in a row: its resources, compile time and verdict.
pub(super) fn check_table(rows: &[check::CheckRow]) -> Table {
    let mut t = Table::new(&[
        "version",
        "variant",
        "regs",
        "smem B",
        "stack B",
        "spills B",
        "compile ms",
        "verdict",
    ]);
    for r in rows {
        let res = r.resources.clone().unwrap_or_default();
        t.row(&[
            r.version.clone(),
            r.variant.clone(),
            res.registers.to_string(),
            (res.static_smem + r.dynamic_smem).to_string(),
            res.stack_frame.to_string(),
            (res.spill_stores + res.spill_loads).to_string(),
            format!(
                "{:.0}{}",
                r.compile_ms,
                if r.cached { " (cached)" } else { "" }
            ),
            if r.ok() {
                "ok".to_string()
            } else {
                r.problems.join("; ")
            },
        ]);
    }
    t
}

/// One line on a compile: how many variants in how long, compiled or from the cache, and how
/// many have problems.
pub(super) fn check_summary(rows: &[check::CheckRow], arch: &str, wall_ms: f64) -> String {
    let mut cold: Vec<f64> = rows
        .iter()
        .filter(|r| !r.cached && r.resources.is_some())
        .map(|r| r.compile_ms)
        .collect();
    // The compiling threads' CPU time next to the wall time: with more compiles in parallel
    // than free cores, each compile's wall time includes waiting for a core; its CPU time is
    // what one compile costs on its own (NVRTC compiles on the calling thread).
    let mut cold_cpu: Vec<f64> = rows
        .iter()
        .filter(|r| !r.cached && r.resources.is_some())
        .filter_map(|r| r.compile_cpu_ms)
        .collect();
    let cached = rows.iter().filter(|r| r.cached).count();
    let median = if cold.is_empty() {
        0.0
    } else {
        kiln::harness::bench::stats(&mut cold).0
    };
    let cpu = if cold_cpu.is_empty() {
        String::new()
    } else {
        format!(
            ", {:.0} ms CPU",
            kiln::harness::bench::stats(&mut cold_cpu).0
        )
    };
    format!(
        "{} variants for {arch} in {:.1} s ({} compiles in parallel): {} compiled (median {:.0} ms cold{cpu}), {} from the cache; {} with problems",
        rows.len(),
        wall_ms / 1e3,
        rayon::current_num_threads(),
        cold.len(),
        median,
        cached,
        rows.iter().filter(|r| !r.ok()).count()
    )
}

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

fn kernels<'r>(env: &'r Env, names: &[String]) -> Result<Vec<&'r dyn GemmKernel>> {
    if names.is_empty() {
        return Ok(env.registry.gemm().iter().map(|k| k.as_ref()).collect());
    }
    names.iter().map(|n| env.registry.gemm_version(n)).collect()
}

pub fn verify(env: &Env, a: &VerifyArgs) -> Result<ExitCode> {
    let problems = match problem_from(&a.problem, None)? {
        Some(p) => vec![p],
        None => shapes::gemm_suite(a.suite.parse()?),
    };
    let ks = kernels(env, &a.versions)?;
    let ctx = env.context()?;
    let outcomes = run_verify(env, &ctx, &ks, &problems, true)?;
    if env.json {
        env.print_json(&json!(outcomes));
    }
    Ok(if outcomes.iter().all(|o| o.passed) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(7)
    })
}

/// Verifies `ks` on `problems` and records each check; `table`: print a row per version (unless
/// --json).
pub(super) fn run_verify(
    env: &Env,
    ctx: &Context,
    ks: &[&dyn GemmKernel],
    problems: &[GemmProblem],
    table: bool,
) -> Result<Vec<CheckOutcome>> {
    let run = env.begin("verify", Some(&ctx.info))?;
    let pb = bar(ks.len() * problems.len(), "verify", env.json);
    let mut store_err = None;
    let outcomes = suite::verify_all(ctx, ks, problems, |o| {
        pb.inc(1);
        pb.set_message(format!("{} {}", o.version, o.problem.label()));
        if !o.passed {
            pb.println(format!(
                "FAIL {} {}: {}",
                o.version,
                o.problem.label(),
                o.message
            ));
        }
        let row = ResultRow {
            op: "gemm".into(),
            version: o.version.clone(),
            variant: String::new(),
            problem: problem_json(&o.problem),
            metrics: json!({"rel_error": o.rel_error, "bound": o.bound, "nan_or_unwritten": o.nan_or_unwritten, "written_outside": o.written_outside, "rows_checked": o.rows_checked, "seed": o.seed, "skipped": o.skipped, "message": o.message}),
            passed: Some(o.passed),
        };
        if let Err(e) = record(&run, row) {
            store_err.get_or_insert(e);
        }
    })?;
    pb.finish_and_clear();
    if let Some(e) = store_err {
        return Err(e);
    }
    let failed = outcomes.iter().any(|o| !o.passed);
    finish(&run, if failed { "failed" } else { "ok" })?;
    if table && !env.json {
        print!("{}", verify_table(ks, &outcomes).render());
    }
    Ok(outcomes)
}

fn verify_table(ks: &[&dyn GemmKernel], outcomes: &[CheckOutcome]) -> Table {
    let mut t = Table::new(&[
        "version",
        "passed",
        "failed",
        "skipped",
        "max rel error",
        "first failure",
    ]);
    for k in ks {
        let mine: Vec<&CheckOutcome> = outcomes.iter().filter(|o| o.version == k.name()).collect();
        let run: Vec<&&CheckOutcome> = mine.iter().filter(|o| o.skipped.is_none()).collect();
        let passed = run.iter().filter(|o| o.passed).count();
        let failed: Vec<&&&CheckOutcome> = run.iter().filter(|o| !o.passed).collect();
        let max_err = run
            .iter()
            .map(|o| o.rel_error)
            .filter(|e| e.is_finite())
            .fold(0.0f64, f64::max);
        t.row(&[
            k.name().to_string(),
            passed.to_string(),
            failed.len().to_string(),
            (mine.len() - run.len()).to_string(),
            format!("{max_err:.2e}"),
            failed
                .first()
                .map(|o| format!("{}: {}", o.problem.label(), o.message))
                .unwrap_or_default(),
        ]);
    }
    t
}

pub(super) fn bench_options(
    env: &Env,
    reps: Option<usize>,
    warmup: Option<usize>,
    warmup_ms: Option<f64>,
    no_flush: bool,
) -> BenchOptions {
    let d = BenchOptions::default();
    BenchOptions {
        reps: reps.or(env.config.bench.reps).unwrap_or(d.reps),
        warmup: warmup.or(env.config.bench.warmup).unwrap_or(d.warmup),
        warmup_ms: warmup_ms
            .or(env.config.bench.warmup_ms)
            .unwrap_or(d.warmup_ms),
        flush_l2: !no_flush,
        interleave: d.interleave,
    }
}

pub fn bench(env: &Env, a: &BenchArgs) -> Result<ExitCode> {
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
                    "unknown shape set `{other}`; use ladder or targets"
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
        vec![env
            .registry
            .select_gemm(&problems[0], &ctx.info, env.config.version_for("gemm"))?]
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
    let mut opt = bench_options(env, a.reps, a.warmup, a.warmup_ms, a.no_flush);
    opt.interleave = !a.sequential;
    let passes = a.passes as usize;
    let rows = run_bench(
        env,
        &ctx,
        &ks,
        vendor,
        &problems,
        &opt,
        passes,
        a.order_seed,
        true,
    )?;
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

/// Times `ks` and the vendor on `problems` over `passes` and records each timing; `table`: print
/// a row per problem and version after a single pass (unless --json).
#[allow(clippy::too_many_arguments)]
pub(super) fn run_bench(
    env: &Env,
    ctx: &Context,
    ks: &[&dyn GemmKernel],
    vendor: &dyn GemmKernel,
    problems: &[GemmProblem],
    opt: &BenchOptions,
    passes: usize,
    order_seed: u64,
    table: bool,
) -> Result<Vec<suite::BenchRow>> {
    let run = env.begin("bench", Some(&ctx.info))?;
    let pb = bar(problems.len() * passes, "bench", env.json);
    let mut store_err = None;
    let rows = suite::bench_passes(
        ctx,
        ks,
        Some(vendor),
        problems,
        opt,
        passes,
        order_seed,
        |row| {
            pb.inc(1);
            let mut all: Vec<(&kiln::harness::bench::Timing, Option<f64>)> =
                row.versions.iter().map(|(t, r)| (t, *r)).collect();
            if let Some(v) = &row.vendor {
                all.push((v, Some(1.0)));
            }
            for (t, ratio) in all {
                let r = ResultRow {
                    op: "gemm".into(),
                    version: t.version.clone(),
                    variant: String::new(),
                    problem: problem_json(&t.problem),
                    metrics: json!({"median_ms": t.median_ms, "min_ms": t.min_ms, "max_ms": t.max_ms, "reps": t.reps, "tflops": t.tflops, "gbps": t.gbps, "ratio_to_vendor": ratio, "flush_l2": opt.flush_l2, "flush": kiln::harness::bench::flush_label(opt.flush_l2), "pass": row.pass, "position": row.position, "host_us": t.host_us}),
                    passed: None,
                };
                if let Err(e) = record(&run, r) {
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
    let store = match &env.config.store.path {
        Some(p) => Store::open(p).ok()?,
        None => Store::open_default().ok()?,
    };
    let rows = store.results(Some("peak"), None, 50).ok()?;
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
        let mut all: Vec<(&kiln::harness::bench::Timing, Option<f64>)> =
            row.versions.iter().map(|(t, r)| (t, *r)).collect();
        if let Some(v) = &row.vendor {
            all.push((v, Some(1.0)));
        }
        for (tm, ratio) in all {
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

pub fn cache(env: &Env, a: &CacheArgs) -> Result<ExitCode> {
    let jit = env.jit();
    let dc = jit.cache.expect("the default JIT has a cache");
    match a.action.as_str() {
        "path" => println!("{}", dc.root.display()),
        "clear" => println!(
            "removed {} cached kernels from {}",
            dc.clear()?,
            dc.root.display()
        ),
        other => {
            return Err(Error::invalid(format!(
                "unknown cache action `{other}`; use `path` or `clear`"
            )))
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn results(env: &Env, a: &ResultsArgs) -> Result<ExitCode> {
    let store = match &env.config.store.path {
        Some(p) => Store::open(p)?,
        None => Store::open_default()?,
    };
    let rows = store.results(a.op.as_deref(), a.version.as_deref(), a.limit)?;
    if env.json {
        env.print_json(&json!(rows));
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&[
        "run", "started", "kind", "device", "commit", "version", "problem", "passed", "metrics",
    ]);
    for r in rows {
        t.row(&[
            r.run_id.to_string(),
            r.started,
            r.kind,
            r.device.unwrap_or_default(),
            r.kiln_commit,
            r.version,
            r.problem.to_string(),
            r.passed.map(|p| p.to_string()).unwrap_or_default(),
            r.metrics.to_string(),
        ]);
    }
    print!("{}", t.render());
    println!("store: {}", store.path().display());
    Ok(ExitCode::SUCCESS)
}
