//! `kiln suite`, the main job: compile the variants the suite runs, then on a GPU verify every
//! GEMM version and time it against the vendor; without one, the CPU references. A line per version.

use super::args::TimingArgs;
use std::process::ExitCode;

use kiln::device::DeviceInfo;
use kiln::error::{Error, Result};
use kiln::harness::bench_versions::BenchVersions;
use kiln::harness::outcome::Outcome;
use kiln::harness::{check, shapes, suite};
use kiln::ops::gemm::{GemmKernel, GemmProblem};
use kiln::report::Table;
use serde_json::json;

use super::args::SuiteArgs;
use super::check::{check_summary, check_table, compile_items};
use super::env::{bench_options, Env};
use super::gemm::{run_bench, run_verify};
use super::verdicts::{exit_if, verified};

/// Flagged variants listed by name without `--verbose`; the rest are counted.
const FLAGGED_SHOWN: usize = 12;

pub fn suite(env: &Env, a: &SuiteArgs) -> Result<ExitCode> {
    // Checked before anything else, so a bad name is said at once.
    if let Some(s) = &a.verify {
        s.parse::<shapes::Suite>()?;
    }
    let say = |s: &str| env.say(s);
    let ctx = match env.context() {
        Ok(ctx) => Ok(ctx),
        Err(Error::NoGpu(why)) => Err(why),
        Err(e) => return Err(e),
    };
    let dev = match &ctx {
        Ok(ctx) => ctx.info.clone(),
        Err(_) => DeviceInfo::h100_sxm(),
    };
    let arch = dev.arch();
    // The quick suite by default, with or without a GPU: the main job runs in a minute (the full
    // suite's compile and verify take about two on an H100); `--verify full` for every shape.
    let verify_name = a.verify.as_deref().unwrap_or("quick");
    let verify_suite: shapes::Suite = verify_name.parse()?;
    let ks: Vec<&dyn GemmKernel> = env.registry.gemm().iter().map(|k| k.as_ref()).collect();
    let verify_problems = shapes::gemm_suite(verify_suite);
    let bench_problems = suite::ladder_problems();

    // What the suite runs, not the whole registry: the dispatch's variants for its problems.
    let all: Vec<GemmProblem> = verify_problems
        .iter()
        .chain(&bench_problems)
        .copied()
        .collect();
    let work = suite::suite_items(&ks, &all, &dev, &env.tuned());
    let registry_total = check::check_items(&env.registry, &arch, None).len();
    say(&format!(
        "== compile ({arch}): the {} variants the suite runs ({} problems; `kiln check` compiles all {registry_total}) ==",
        work.len(),
        all.len(),
    ));
    if ctx.is_err() {
        say(&format!(
            "no GPU: the dispatch is resolved for an H100 ({} SMs) with its limits, on the {verify_name} suite's problems (--verify full: the full suite's)",
            dev.sm_count
        ));
    }
    let (check_rows, wall_ms) = compile_items(env, &arch, &work, &dev)?;
    let check_failed = check_rows.iter().any(|r| !r.ok());
    let per_version = check::by_version(&check_rows);
    if a.verbose {
        say(check_table(&check_rows).render().trim_end());
    } else {
        say(version_table(&per_version).render().trim_end());
    }
    say(&check_summary(&check_rows, &arch, wall_ms));
    if !a.verbose {
        let flagged: Vec<&check::CheckRow> = check_rows.iter().filter(|r| !r.ok()).collect();
        for r in flagged.iter().take(FLAGGED_SHOWN) {
            say(&format!(
                "flagged: {} {}: {}",
                r.version,
                r.variant,
                r.problems.join("; ")
            ));
        }
        if flagged.len() > FLAGGED_SHOWN {
            say(&format!(
                "flagged: {} more (--verbose lists every variant)",
                flagged.len() - FLAGGED_SHOWN
            ));
        }
    }

    let ctx = match ctx {
        Ok(ctx) => ctx,
        Err(why) => {
            say("\n== CPU references ==");
            say(&kiln::harness::cpu::reference_selftest()?);
            say(&format!("\nGPU part skipped: {why}"));
            say("(the compile and the CPU references ran; verify and bench need a GPU)");
            let v = json!({"kiln_commit": kiln::store::kiln_commit(), "date": kiln::store::utc_now(), "command": env.command, "assumed_device": dev, "check": check_rows, "check_by_version": per_version, "gpu": null, "gpu_skipped": why});
            emit(env, a, &v)?;
            return Ok(exit_if(check_failed, 1));
        }
    };
    say(&format!("\n== {} ==", ctx.info.name));
    say(&format!("\n== verify ({verify_name} suite) =="));
    let outcomes = run_verify(env, &ctx, &ks, &verify_problems, a.verbose)?;
    if !a.verbose {
        let run: Vec<&Outcome> = outcomes.iter().filter(|o| o.skipped.is_none()).collect();
        say(&format!(
            "{} checks of {} versions on {} problems: {} passed, {} failed, {} skipped (unsupported)",
            outcomes.len(),
            ks.len(),
            verify_problems.len(),
            run.iter().filter(|o| o.passed).count(),
            run.iter().filter(|o| !o.passed).count(),
            outcomes.len() - run.len(),
        ));
    }
    say("\n== bench (ratio to the vendor measured in the same run) ==");
    let vendor = env.registry.gemm_version("cublas")?;
    let ours: Vec<&dyn GemmKernel> = ks.iter().copied().filter(|k| !k.is_vendor()).collect();
    let rows = run_bench(
        env,
        &ctx,
        BenchVersions::Listed(&ours),
        vendor,
        &bench_problems,
        &bench_options(env, &TimingArgs::default()),
        (1, 1),
        None,
        a.verbose,
    )?;
    let fp8_rung =
        super::fp8_gemm::ladder_rung(env, &ctx, &bench_options(env, &TimingArgs::default()), &say)?;
    say("\n== summary: verified checks and TFLOPS (ratio to the vendor) ==");
    say(ladder_table(&ks, &outcomes, &rows).render().trim_end());
    let v = json!({"device": ctx.info, "kiln_commit": kiln::store::kiln_commit(), "date": kiln::store::utc_now(), "command": env.command, "check": check_rows, "check_by_version": per_version, "verify": outcomes, "bench": rows, "fp8_rung": fp8_rung});
    emit(env, a, &v)?;
    let ok = !check_failed && outcomes.iter().all(|o| o.passed);
    Ok(verified(!ok))
}

/// One row per (op, version) the suite compiled.
fn version_table(per_version: &[check::VersionCheck]) -> Table {
    let mut t = Table::new(&[
        "op",
        "version",
        "variants",
        "from cache",
        "max regs",
        "max smem KiB",
        "spilling",
        "flagged",
        "compile CPU s",
    ]);
    for v in per_version {
        t.row(&[
            v.op.clone(),
            v.version.clone(),
            v.variants.to_string(),
            v.cached.to_string(),
            v.max_registers.to_string(),
            format!("{:.1}", v.max_smem as f64 / 1024.0),
            v.spilling.to_string(),
            v.flagged.to_string(),
            format!("{:.1}", v.compile_cpu_s),
        ]);
    }
    t
}

/// Prints the suite's JSON under --json and writes it to --save.
fn emit(env: &Env, a: &SuiteArgs, v: &serde_json::Value) -> Result<()> {
    if env.json {
        env.print_json(v);
    }
    save(a, v)
}

fn save(a: &SuiteArgs, v: &serde_json::Value) -> Result<()> {
    if let Some(path) = &a.save {
        std::fs::write(path, serde_json::to_string_pretty(v).unwrap_or_default()).map_err(
            |source| Error::Io {
                what: "writing the suite results",
                path: path.clone(),
                source,
            },
        )?;
    }
    Ok(())
}

/// One row per version: verification counts, then TFLOPS (and ratio) per ladder problem.
fn ladder_table(ks: &[&dyn GemmKernel], outcomes: &[Outcome], rows: &[suite::BenchRow]) -> Table {
    let mut header = vec!["version".to_string(), "verified".to_string()];
    header.extend(rows.iter().map(|r| r.problem.label()));
    let mut t = Table::new(&header);
    for k in ks {
        let mine: Vec<&Outcome> = outcomes
            .iter()
            .filter(|o| o.check == k.name() && o.skipped.is_none())
            .collect();
        let mut cells = vec![
            k.name().to_string(),
            format!(
                "{}/{}",
                mine.iter().filter(|o| o.passed).count(),
                mine.len()
            ),
        ];
        for r in rows {
            let cell = if k.is_vendor() {
                r.vendor.as_ref().map(|v| format!("{:.1}", v.tflops))
            } else {
                r.versions
                    .iter()
                    .find(|(tm, _)| tm.version == k.name())
                    .map(|(tm, ratio)| {
                        format!("{:.1} ({:.2}x)", tm.tflops, ratio.unwrap_or(f64::NAN))
                    })
            };
            cells.push(cell.unwrap_or_else(|| "-".into()));
        }
        t.row(&cells);
    }
    t
}
