//! Handlers of the toolchain subcommands (inspect, plan, exp, report): build the
//! typed request, call `kiln::tools` / `kiln::report`, print.

use super::args::TimingArgs;
use std::process::ExitCode;

use kiln::error::{Error, Result};
use kiln::ops::gemm::{DType, Layout};
use kiln::ops::registry::Registry;
use kiln::report::Table;
use kiln::tools::inspect as insp;
use kiln::tools::ledger::{BenchMeasurer, Ledger, NewExperiment};
use kiln::tools::ledger_text::{self, Arm, Gate, Prediction};
use serde_json::json;

use super::args::*;
use super::env::{bench_options, device_or_h100, Env};
use super::gemm::problem_from;
use super::verdicts::exit_if;

pub fn inspect(env: &Env, a: &InspectArgs) -> Result<ExitCode> {
    kiln::jit::arch::check(&a.arch)?;
    Registry::check_op(&a.op)?;
    let (name, spec) = match super::fp8_gemm::inspect_problem(a)? {
        Some(p) => (
            kiln::ops::fp8::gemm::NAME,
            super::fp8_gemm::inspect_spec(a, &p)?,
        ),
        None => {
            let kernel = env.registry.gemm_version(&a.version)?;
            let (layout, input): (Layout, DType) = (a.layout.parse()?, a.dtype.parse()?);
            let output: DType = a
                .out
                .as_deref()
                .map(str::parse)
                .transpose()?
                .unwrap_or(input);
            (
                kernel.name(),
                insp::pick_variant(kernel, &a.arch, layout, input, output)?,
            )
        }
    };
    kiln::jit::nvrtc::version()?;
    let r = insp::inspect(&env.jit(), name, &spec, &device_or_h100())?;
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
    Ok(exit_if(!r.flags.is_empty(), 1))
}

/// A plan as JSON with the experiment knobs set for the run (the plan honours them).
fn print_plan_json<K: std::fmt::Display, V: serde::Serialize>(
    env: &Env,
    mut v: serde_json::Value,
    active: &[(K, V)],
) {
    v["overrides"] = active
        .iter()
        .map(|(k, v)| (k.to_string(), json!(v)))
        .collect::<serde_json::Map<_, _>>()
        .into();
    env.print_json(&v);
}

/// The experiment knobs set for the run, a line (none: nothing).
fn print_overrides<K: std::fmt::Display, V: std::fmt::Display>(active: &[(K, V)]) {
    if !active.is_empty() {
        let set: Vec<String> = active.iter().map(|(k, v)| format!("{k}={v}")).collect();
        println!("overrides: {}", set.join(" "));
    }
}

/// `kiln plan --op attn-backward`: what the backward's dispatch would run and why.
fn plan_attn_backward(env: &Env, a: &PlanArgs) -> Result<ExitCode> {
    let attn = super::attention::attention_problem_of(
        &a.problem,
        &a.attn,
        "kiln plan --op attn-backward",
    )?;
    let p = kiln::ops::attention_backward::BackwardProblem::new(attn, a.deterministic);
    let mut dev = device_or_h100();
    if let Some(sms) = a.sms {
        dev.sm_count = sms;
    }
    let o = &env.config.overrides;
    let plan = kiln::tools::plan_attn_bwd::plan_backward(
        &env.registry,
        &p,
        &dev,
        a.version.as_deref(),
        &o.attention,
        &env.tuned(),
    )?;
    let active = o.active();
    if env.json {
        print_plan_json(env, json!(plan), &active);
        return Ok(ExitCode::SUCCESS);
    }
    println!("{} on {} ({} SMs)", plan.problem, dev.name, dev.sm_count);
    print_overrides(&active);
    println!(
        "version: {} (rung {}): {}",
        plan.version, plan.rung, plan.why
    );
    println!("  {}", plan.summary);
    if let Some(k) = &plan.tuned_knobs {
        println!("knobs: {k} (the tuning cache's, `kiln tune attn --backward`)");
    }
    for l in &plan.launch {
        println!("{l}");
    }
    let gb = |b: u64| b as f64 / (1u64 << 30) as f64;
    println!(
        "memory: operands {:.2} GiB, workspace {:.2} GiB, of {:.1} GiB{}",
        gb(plan.operand_bytes),
        gb(plan.workspace_bytes),
        gb(plan.device_bytes),
        if plan.fits {
            ""
        } else {
            ": DOES NOT FIT (the call refuses before allocating)"
        }
    );
    println!("candidates (highest rung first):");
    for c in &plan.candidates {
        println!(
            "  {:<26} rung {:>2}  {}",
            c.version,
            c.rung,
            match (&c.refused, c.by_default) {
                (Some(r), _) => format!("refuses: {r}"),
                (None, true) => "takes it by default".into(),
                (None, false) => "takes it by name".into(),
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn plan(env: &Env, a: &PlanArgs) -> Result<ExitCode> {
    if matches!(
        a.problem.op.as_str(),
        "attn-backward" | "attention-backward" | "attention_backward"
    ) {
        return plan_attn_backward(env, a);
    }
    let t = &a.attn;
    if a.deterministic
        || t.given()
        || t.batch.is_some()
        || t.heads.is_some()
        || t.dim.is_some()
        || t.causal
    {
        return Err(Error::invalid(
            "--batch, --heads, --seqlen, --dim, --causal and --deterministic describe the attention \
             backward: add --op attn-backward",
        ));
    }
    if super::fp8_gemm::wanted(&a.problem)? {
        return super::fp8_gemm::plan(env, a);
    }
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
        print_plan_json(env, json!(plan), &active);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{}x{}x{} {} {} -> {} on {} ({} SMs)",
        p.m, p.n, p.k, p.layout, p.input, p.output, dev.name, dev.sm_count
    );
    print_overrides(&active);
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
                options: bench_options(
                    env,
                    &TimingArgs {
                        reps: r.reps,
                        warmup: r.warmup,
                        ..TimingArgs::default()
                    },
                ),
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
