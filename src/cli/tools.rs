//! Handlers of the toolchain subcommands (inspect, sanitize, profile, exp, report): build the
//! typed request, call `kiln::tools` / `kiln::report`, print.

use std::process::ExitCode;
use std::time::Duration;

use kiln::error::{Error, Result};
use kiln::ops::gemm::{DType, GemmKernel, GemmProblem, Layout};
use kiln::ops::registry::Registry;
use kiln::report::grid::Grid;
use kiln::report::Table;
use kiln::store::rows;
use kiln::tools::ledger::{BenchMeasurer, Ledger, NewExperiment};
use kiln::tools::ledger_text::{self, Arm, Gate, Prediction};
use kiln::tools::{inspect as insp, profile as prof, sanitize as san};
use serde_json::json;

use super::args::*;
use super::env::{bench_options, device_or_h100, finish, record, Env};
use super::gemm::problem_from;
use super::progress::bar;

pub fn inspect(env: &Env, a: &InspectArgs) -> Result<ExitCode> {
    kiln::jit::arch::check(&a.arch)?;
    Registry::check_op(&a.op)?;
    let kernel = env.registry.gemm_version(&a.version)?;
    let (layout, input): (Layout, DType) = (a.layout.parse()?, a.dtype.parse()?);
    let output: DType = a
        .out
        .as_deref()
        .map(str::parse)
        .transpose()?
        .unwrap_or(input);
    let spec = insp::pick_variant(kernel, &a.arch, layout, input, output)?;
    kiln::jit::nvrtc::version()?;
    let r = insp::inspect(&env.jit(), kernel.name(), &spec, &device_or_h100())?;
    if env.json {
        env.print_json(&json!(r));
    } else {
        let res = &r.resources;
        println!("{} for {}: {}", r.version, r.arch, r.variant);
        println!(
            "resources: {} registers, {} B shared memory ({} static + {} dynamic), {} B stack, spills {} B stored / {} B loaded; compile {:.0} ms{}",
            res.registers,
            res.static_smem + r.dynamic_smem,
            res.static_smem,
            r.dynamic_smem,
            res.stack_frame,
            res.spill_stores,
            res.spill_loads,
            r.compile_ms,
            if r.cached { format!(" (cached: read in {:.0} ms)", r.load_ms) } else { String::new() }
        );
        println!(
            "SASS of {}: {} instructions, {} distinct opcodes",
            r.sass.functions.join(", "),
            r.sass.total,
            r.sass.counts.len()
        );
        let mut t = Table::new(&["opcode", "count", "share"]);
        for (op, n) in r.sass.shown(a.top) {
            t.row(&[
                op.to_string(),
                n.to_string(),
                format!("{:.1}%", 100.0 * n as f64 / r.sass.total.max(1) as f64),
            ]);
        }
        print!("{}", t.render());
        if r.flags.is_empty() {
            println!("flags: none");
        }
        for f in &r.flags {
            println!("FLAG: {f}");
        }
    }
    Ok(if r.flags.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

pub fn plan(env: &Env, a: &PlanArgs) -> Result<ExitCode> {
    let Some(p) = problem_from(&a.problem, None)? else {
        return Err(Error::invalid(
            "kiln plan needs a problem: --shape MxNxK (and --layout, --dtype, --out, --beta, \
             --lda/--ldb/--ldc as for bench)",
        ));
    };
    let mut dev = device_or_h100();
    if let Some(sms) = a.sms {
        dev.sm_count = sms;
    }
    let plan = kiln::tools::plan::plan_gemm(
        &env.registry,
        &p,
        &dev,
        // The dispatch's order: --version, then the config file's.
        a.version.as_deref().or(env.config.version_for("gemm")),
        &env.tuned(),
        &env.config.overrides,
    )?;
    // The experiment knobs set for this run (the plan above honours them).
    let active = env.config.overrides.active();
    if env.json {
        let mut v = json!(plan);
        v["overrides"] = active
            .iter()
            .map(|(k, v)| (k.to_string(), json!(v)))
            .collect::<serde_json::Map<_, _>>()
            .into();
        env.print_json(&v);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{}x{}x{} {} {} -> {} on {} ({} SMs)",
        p.m, p.n, p.k, p.layout, p.input, p.output, dev.name, dev.sm_count
    );
    if !active.is_empty() {
        let set: Vec<String> = active.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("overrides: {}", set.join(" "));
    }
    println!(
        "version: {} (rung {}): {}",
        plan.version, plan.rung, plan.why
    );
    if let Some(c) = &plan.config {
        println!("config: {c}");
    }
    if let Some(l) = &plan.launch {
        for line in l.lines() {
            println!("{line}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn sanitize(env: &Env, a: &SanitizeArgs) -> Result<ExitCode> {
    // --configs: the versions with forced setups (`wgmma_tma_ws`'s tile configs)
    let forced: Vec<&dyn GemmKernel> = env
        .registry
        .gemm()
        .iter()
        .map(|k| k.as_ref())
        .filter(|k| !k.forced_setups().is_empty())
        .collect();
    let versions: Vec<String> = if a.configs {
        forced.iter().map(|k| k.name().to_string()).collect()
    } else if a.versions.is_empty() {
        env.registry
            .gemm()
            .iter()
            .filter(|k| !k.is_vendor())
            .map(|k| k.name().to_string())
            .collect()
    } else {
        a.versions
            .iter()
            .map(|v| env.registry.gemm_version(v).map(|k| k.name().to_string()))
            .collect::<Result<_>>()?
    };
    let tools: Vec<String> = if a.tools.is_empty() {
        san::TOOLS.iter().map(|s| s.to_string()).collect()
    } else {
        a.tools.clone()
    };
    if let Some(t) = tools.iter().find(|t| !san::TOOLS.contains(&t.as_str())) {
        return Err(Error::Unknown {
            what: "sanitizer tool",
            name: t.clone(),
            known: san::TOOLS.join(", "),
        });
    }
    if a.jobs == 0 {
        return Err(Error::invalid("--jobs 0 would run nothing: give 1 or more"));
    }
    let problems: Vec<san::Problem> = if a.problems.is_empty() {
        san::default_problems()
    } else {
        a.problems
            .iter()
            .map(|p| san::parse_problem(p))
            .collect::<Result<_>>()?
    };
    // --configs plans each case for this GPU's SMs (--list without one: an H100's)
    let dev = kiln::device::init()
        .ok()
        .and_then(|_| kiln::device::DeviceInfo::query(0).ok());
    let sm_count = dev
        .as_ref()
        .map_or(kiln::device::DeviceInfo::h100_sxm().sm_count, |d| {
            d.sm_count
        });
    let (cases, uncovered) = if a.configs {
        san::config_cases(&forced, &tools, sm_count)
    } else if let Some(n) = a.fuzz {
        if n == 0 {
            return Err(Error::invalid("--fuzz 0 draws no problem: give 1 or more"));
        }
        let mut d = kiln::harness::draw::Draw::new(a.seed);
        let small = kiln::harness::draw::GemmDraw {
            max_dim: 320,
            ..kiln::harness::draw::GemmDraw::fuzz()
        };
        let cases = (0..n)
            .flat_map(|_| san::Case::drawn(&versions, &tools, &d.gemm(&small)))
            .collect();
        (cases, Vec::new())
    } else {
        (san::Case::all(&versions, &tools, &problems), Vec::new())
    };
    if a.list {
        if env.json {
            env.print_json(&json!({"cases": cases, "uncovered": uncovered}));
        } else {
            for c in cases.iter().filter(|c| c.tool == tools[0]) {
                println!("{}: {}", c.version, c.problem());
            }
            for u in &uncovered {
                println!("NOT COVERED: {u} (no problem of the list runs it)");
            }
            println!(
                "{} runs ({} tools) planned for {} SMs",
                cases.len(),
                tools.len(),
                sm_count
            );
        }
        return Ok(if uncovered.is_empty() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        });
    }
    kiln::device::init()?;
    let sanitizer = san::SANITIZER.find()?;
    let kiln_bin = kiln::tools::this_kiln()?;
    let run = env.begin("sanitize", dev.as_ref())?;
    let pb = bar(cases.len(), "sanitize", env.json);
    let mut found: Vec<Option<san::Finding>> = vec![None; cases.len()];
    san::run_cases(
        &sanitizer,
        &kiln_bin,
        &cases,
        Duration::from_secs(a.timeout),
        a.jobs,
        |i, f| {
            let c = &cases[i];
            pb.set_message(format!("{} {}", c.tool, c.problem()));
            record(&run, rows::sanitize_row(c, &f))?;
            if !f.clean() {
                pb.println(format!(
                    "{} {} {}: {}",
                    c.tool,
                    c.version,
                    c.problem(),
                    f.first.clone().unwrap_or_default()
                ));
            }
            pb.inc(1);
            found[i] = Some(f);
            Ok(())
        },
    )?;
    pb.finish_and_clear();
    let found: Vec<san::Finding> = found.into_iter().flatten().collect();
    let dirty = found.iter().any(|f| !f.clean()) || !uncovered.is_empty();
    finish(&run, if dirty { "failed" } else { "ok" })?;
    if env.json {
        env.print_json(&json!({"findings": found, "uncovered": uncovered}));
    } else {
        let mut rows: Vec<&str> = Vec::new();
        for f in &found {
            if !rows.contains(&f.case.row()) {
                rows.push(f.case.row());
            }
        }
        let mut g = Grid::new(
            &std::iter::once(if a.configs { "setup" } else { "version" })
                .chain(tools.iter().map(String::as_str))
                .collect::<Vec<_>>(),
        );
        for row in rows {
            let mut cells = vec![row.to_string()];
            for t in &tools {
                let mine: Vec<&san::Finding> = found
                    .iter()
                    .filter(|f| f.case.row() == row && &f.case.tool == t)
                    .collect();
                let errors: usize = mine.iter().filter_map(|f| f.errors).sum();
                let skipped = mine.iter().filter(|f| f.skipped.is_some()).count();
                cells.push(if mine.iter().all(|f| f.clean()) && skipped == mine.len() {
                    "skipped (refused every problem)".into()
                } else if mine.iter().all(|f| f.clean()) {
                    format!(
                        "clean ({} of {} problems ran)",
                        mine.len() - skipped,
                        mine.len()
                    )
                } else if mine.iter().any(|f| f.timed_out) {
                    "TIMED OUT".into()
                } else if errors > 0 {
                    format!("{errors} errors")
                } else {
                    "FAILED".into()
                });
            }
            g.row(&cells);
        }
        print!("{}", g.to_table().render());
        for f in found.iter().filter(|f| !f.clean()) {
            println!(
                "{} {} {}: {}",
                f.case.tool,
                f.case.version,
                f.case.problem(),
                f.first.clone().unwrap_or_default()
            );
        }
        for u in &uncovered {
            println!("NOT COVERED: {u} (no problem of the list runs it)");
        }
        println!(
            "{} runs over {}{} with {}; {}",
            found.len(),
            if a.configs {
                format!(
                    "{} setups of {}",
                    found
                        .iter()
                        .map(|f| f.case.row())
                        .collect::<std::collections::BTreeSet<_>>()
                        .len(),
                    versions.join(", ")
                )
            } else {
                format!("{} versions", versions.len())
            },
            if a.jobs > 1 {
                format!(" ({} at a time)", a.jobs)
            } else {
                String::new()
            },
            sanitizer.display(),
            if dirty {
                "some reported errors"
            } else {
                "all clean"
            }
        );
    }
    Ok(if dirty {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

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
        &bench_options(env, a.reps, None, None, false),
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

pub fn exp(env: &Env, a: &ExpArgs) -> Result<ExitCode> {
    let store = env.store()?;
    let ledger = Ledger::open(&store)?;
    match &a.action {
        ExpAction::New(n) => {
            let problem = problem_from(&n.problem, None)?
                .ok_or_else(|| Error::invalid("an experiment needs its problem: --shape MxNxK"))?;
            let (baseline, candidate): (Arm, Arm) = (n.baseline.parse()?, n.candidate.parse()?);
            for arm in [&baseline, &candidate] {
                env.registry.gemm_version(&arm.version)?;
            }
            let e = NewExperiment {
                title: n.title.clone(),
                hypothesis: n.hypothesis.clone(),
                baseline,
                candidate,
                problem,
                prediction: n.predict.parse::<Prediction>()?,
                gate: n.gate.as_deref().map(str::parse::<Gate>).transpose()?,
            };
            let id = ledger.create(&e)?;
            let e = ledger.get(id)?;
            println!(
                "experiment {id} recorded at commit {}: {} -> {} on {}, predicted {}{}",
                e.kiln_commit,
                e.baseline,
                e.candidate,
                e.problem.label(),
                e.prediction,
                if e.gate.is_empty() {
                    String::new()
                } else {
                    format!(", gate `{}`", e.gate)
                }
            );
            println!("measure it with `kiln exp run {id}` (needs a GPU), then `kiln exp close {id} --verdict kept|eliminated|inconclusive`");
        }
        ExpAction::Run(r) => {
            let e = ledger.get(r.id)?;
            let ctx = env.context()?;
            let mut m = BenchMeasurer {
                ctx: &ctx,
                registry: &env.registry,
                options: bench_options(env, r.reps, r.warmup, None, false),
            };
            let e2 = ledger.run(e.id, &mut m, r.rounds)?;
            if env.json {
                env.print_json(&json!(e2));
                return Ok(ExitCode::SUCCESS);
            }
            let o = e2.result.as_ref().expect("just measured");
            let mut t = Table::new(&[
                "round",
                "baseline ms",
                "candidate ms",
                "vendor ms",
                "baseline TFLOPS",
                "candidate TFLOPS",
            ]);
            for (i, r) in o.rounds.iter().enumerate() {
                t.row(&[
                    (i + 1).to_string(),
                    format!("{:.4}", r.baseline.median_ms),
                    format!("{:.4}", r.candidate.median_ms),
                    r.vendor_median_ms
                        .map(|v| format!("{v:.4}"))
                        .unwrap_or_default(),
                    format!("{:.1}", r.baseline.tflops),
                    format!("{:.1}", r.candidate.tflops),
                ]);
            }
            print!("{}", t.render());
            println!(
                "experiment {}: {} -> {} on {}: measured {}, predicted {}; {}",
                e2.id,
                e2.baseline,
                e2.candidate,
                e2.problem.label(),
                ledger_text::measured_cell(&e2),
                e2.prediction,
                ledger_text::gate_cell(&e2)
            );
            if e2.baseline.contains(':') || e2.candidate.contains(':') {
                println!("note: kiln's versions take no parameters yet; the k=v parameters are recorded, and both arms ran with their version's defaults");
            }
        }
        ExpAction::Close(c) => {
            let e = ledger.close(c.id, &c.verdict, c.note.as_deref())?;
            println!(
                "experiment {} ({}) closed: {}; measured: {}",
                e.id,
                e.title,
                c.verdict,
                ledger_text::measured_cell(&e)
            );
        }
        ExpAction::Log(l) => {
            let all = ledger.list()?;
            if env.json {
                env.print_json(&json!(all));
            } else if l.markdown {
                print!("{}", ledger_text::markdown(&all, "##"));
            } else {
                println!("iteration log");
                print!("{}", ledger_text::iteration_log(&all).to_table().render());
                println!("\neliminated ideas (promise vs reality)");
                print!("{}", ledger_text::eliminated(&all).to_table().render());
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn report(env: &Env, a: &ReportArgs) -> Result<ExitCode> {
    let store = env.store()?;
    let order: Vec<String> = env
        .registry
        .gemm()
        .iter()
        .map(|k| k.name().to_string())
        .collect();
    let w = kiln::report::document::write(&store, &order, &a.out)?;
    if env.json {
        env.print_json(&json!(w));
    } else {
        println!(
            "wrote {} and {} ({} charts) from {}",
            w.html.display(),
            w.markdown.display(),
            w.charts.len(),
            store.path().display()
        );
    }
    Ok(ExitCode::SUCCESS)
}
