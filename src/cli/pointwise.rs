//! `kiln pointwise verify` and `kiln pointwise bench`: RMSNorm and the rotary embedding
//! against their float64 references on their suite, and their times at the model shapes.

use std::process::ExitCode;

use clap::{Args, Subcommand};
use kiln::error::Result;
use kiln::harness::bench::Row;
use kiln::harness::bench::{Bench, BenchOptions};
use kiln::harness::outcome::Extra;
use kiln::harness::pointwise::{bench, suite, verify, Case};
use serde_json::json;

use super::bench_table::Col;
use super::env::Env;
use super::verdicts::{failures, print_outcomes, table, verified, Column, PROBLEM};

#[derive(Debug, Args)]
pub struct PointwiseCmdArgs {
    #[command(subcommand)]
    pub action: PointwiseAction,
}

#[derive(Debug, Subcommand)]
pub enum PointwiseAction {
    /// Verify RMSNorm (with and without the fused residual) and the rotary embedding against
    /// float64 on their suite: model shapes, strided rows, widths the 16-byte variant cannot
    /// take, partial and interleaved rotary dims, every cos/sin shape.
    Verify(PointwiseVerifyArgs),
    /// Time them at the model shapes (L2 flushed before each launch), in µs and TB/s.
    Bench(PointwiseBenchArgs),
}

#[derive(Debug, Args)]
pub struct PointwiseVerifyArgs {
    /// Only this kernel's cases: rmsnorm or rope.
    #[arg(long)]
    pub only: Option<String>,
}

#[derive(Debug, Args)]
pub struct PointwiseBenchArgs {
    /// Timed launches per problem.
    #[arg(long, default_value_t = 50)]
    pub reps: usize,
}

pub fn run(env: &Env, a: &PointwiseCmdArgs) -> Result<ExitCode> {
    match &a.action {
        PointwiseAction::Verify(v) => run_verify(env, v),
        PointwiseAction::Bench(b) => run_bench(env, b),
    }
}

fn run_verify(env: &Env, a: &PointwiseVerifyArgs) -> Result<ExitCode> {
    let ctx = env.context()?;
    let cases: Vec<Case> = suite()
        .into_iter()
        .filter(|c| match a.only.as_deref() {
            Some("rmsnorm") => matches!(c, Case::Norm(_)),
            Some("rope") => matches!(c, Case::Rope(_)),
            _ => true,
        })
        .collect();
    if let Some(o) = a
        .only
        .as_deref()
        .filter(|o| !matches!(*o, "rmsnorm" | "rope"))
    {
        return Err(kiln::Error::invalid(format!(
            "--only {o}: give rmsnorm or rope"
        )));
    }
    let outcomes = cases
        .iter()
        .map(|c| verify(&ctx, c))
        .collect::<Result<Vec<_>>>()?;
    let failed = failures(&outcomes);
    const VARIANT: Column = ("variant", |o| match &o.extra {
        Extra::Pointwise { variant } => variant.to_string(),
        _ => String::new(),
    });
    const WORST: Column = ("worst / bound", |o| format!("{:.3}", o.rel_error));
    const NAN: Column = ("NaN", |o| o.mismatches.to_string());
    const OUTSIDE: Column = ("outside", |o| o.written_outside.to_string());
    const SAID: Column = ("verdict", |o| match o.passed {
        true => "ok".into(),
        false => format!("FAIL {} (seed {})", o.message, o.seed),
    });
    let columns = [PROBLEM, VARIANT, WORST, NAN, OUTSIDE, SAID];
    print_outcomes(env, None, &outcomes, &columns, || {
        format!("{} pointwise checks, {failed} failed", outcomes.len())
    });
    Ok(verified(failed > 0))
}

fn run_bench(env: &Env, a: &PointwiseBenchArgs) -> Result<ExitCode> {
    let ctx = env.context()?;
    // the model shapes of the suite (the first two of each kernel's)
    let cases: Vec<Case> = suite()
        .into_iter()
        .filter(|c| match c {
            Case::Norm(n) => n.pad == 0 && n.rows >= 4096,
            Case::Rope(r) => r.seq >= 2048,
        })
        .collect();
    let opt = BenchOptions {
        reps: a.reps,
        ..BenchOptions::default()
    };
    let run = Bench::new(&ctx, &opt)?;
    let timings = cases
        .iter()
        .map(|c| bench(&run, c))
        .collect::<Result<Vec<_>>>()?;
    if env.json {
        env.print_json(&json!(timings));
    } else {
        print!("{}", bench_text(&timings));
    }
    Ok(ExitCode::SUCCESS)
}

/// `kiln pointwise bench`'s table (without --json): a row per timed kernel.
pub(super) fn bench_text(timings: &[Row]) -> String {
    const TIMED: Col = ("problem", |m| m.text("problem"));
    const MEDIAN: Col = ("median µs", |m| m.fixed("median_us", 1));
    const MIN: Col = ("min µs", |m| m.fixed("min_us", 1));
    const MAX: Col = ("max µs", |m| m.fixed("max_us", 1));
    const MOVED: Col = ("MB moved", |m| {
        format!("{:.1}", m.num("bytes").unwrap_or(f64::NAN) / 1e6)
    });
    const TBPS: Col = ("TB/s", |m| m.fixed("tb_per_s", 2));
    let columns = [TIMED, MEDIAN, MIN, MAX, MOVED, TBPS];
    table(&columns, timings).render()
}
