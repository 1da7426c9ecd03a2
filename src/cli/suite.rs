//! `kiln suite`: the main job: the compile check, then (with a GPU) every GEMM version verified
//! and benched on the ladder against the vendor, with one summary table.

use std::process::ExitCode;

use kiln::error::{Error, Result};
use kiln::harness::{shapes, suite, verify::CheckOutcome};
use kiln::ops::gemm::GemmKernel;
use kiln::report::Table;
use serde_json::json;

use super::args::SuiteArgs;
use super::check::run_check;
use super::env::{bench_options, Env};
use super::gemm::{run_bench, run_verify};

pub fn suite(env: &Env, a: &SuiteArgs) -> Result<ExitCode> {
    let verify_suite: shapes::Suite = a.verify.parse()?;
    // Section headers and the summary go to stderr under --json, so stdout stays one JSON value.
    let say = |s: &str| {
        if env.json {
            eprintln!("{s}")
        } else {
            println!("{s}")
        }
    };
    say("== compile check (sm_90a) ==");
    let (check_rows, check_failed) = run_check(env, "sm_90a", None)?;
    let ctx = match env.context() {
        Ok(ctx) => ctx,
        Err(Error::NoGpu(why)) => {
            say("\n== CPU references ==");
            say(&kiln::harness::cpu::reference_selftest()?);
            say(&format!("\nGPU part skipped: {why}"));
            say("(the compile check and the CPU references ran; verify and bench need a GPU)");
            let v = json!({"kiln_commit": kiln::store::kiln_commit(), "date": kiln::store::utc_now(), "command": env.command, "check": check_rows, "gpu": null, "gpu_skipped": why});
            emit(env, a, &v)?;
            return Ok(if check_failed {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            });
        }
        Err(e) => return Err(e),
    };
    say(&format!("\n== {} ==", ctx.info.name));
    let ks: Vec<&dyn GemmKernel> = env.registry.gemm().iter().map(|k| k.as_ref()).collect();
    say(&format!("\n== verify ({} suite) ==", a.verify));
    let outcomes = run_verify(env, &ctx, &ks, &shapes::gemm_suite(verify_suite))?;
    say("\n== bench (ratio to the vendor measured in the same run) ==");
    let vendor = env.registry.gemm_version("cublas")?;
    let ours: Vec<&dyn GemmKernel> = ks.iter().copied().filter(|k| !k.is_vendor()).collect();
    let rows = run_bench(
        env,
        &ctx,
        &ours,
        vendor,
        &suite::ladder_problems(),
        &bench_options(env, None, None, None, false),
        1,
        1,
    )?;
    say("\n== summary: verified checks and TFLOPS (ratio to the vendor) ==");
    say(ladder_table(&ks, &outcomes, &rows).render().trim_end());
    let v = json!({"device": ctx.info, "kiln_commit": kiln::store::kiln_commit(), "date": kiln::store::utc_now(), "command": env.command, "check": check_rows, "verify": outcomes, "bench": rows});
    emit(env, a, &v)?;
    let ok = !check_failed && outcomes.iter().all(|o| o.passed);
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(7)
    })
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
fn ladder_table(
    ks: &[&dyn GemmKernel],
    outcomes: &[CheckOutcome],
    rows: &[suite::BenchRow],
) -> Table {
    let mut header = vec!["version".to_string(), "verified".to_string()];
    header.extend(rows.iter().map(|r| r.problem.label()));
    let mut t = Table::new(&header);
    for k in ks {
        let mine: Vec<&CheckOutcome> = outcomes
            .iter()
            .filter(|o| o.version == k.name() && o.skipped.is_none())
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
