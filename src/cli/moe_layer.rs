//! `kiln moe verify --layer` and `kiln moe bench --layer`: the whole MoE layer against its
//! float64 reference on its suite, and its steps timed.

use std::process::ExitCode;

use kiln::error::{Error, Result};
use kiln::harness::bench::Row;
use kiln::harness::moe_layer::{layer_suite, parse_suite};
use kiln::harness::moe_layer_bench::{bench_layer, issue_layers, parse_layers};
use kiln::harness::moe_layer_verify::verify_layer;
use kiln::harness::outcome::{Extra, Outcome};
use kiln::ops::moe::layer::CombineMode;
use kiln::store::rows;
use serde_json::json;

use super::args::{MoeBenchArgs, MoeVerifyArgs};
use super::bench_table;
use super::env::{bench_options, finish, record, Env};
use super::verdicts::{
    failures, print_outcomes, table, verified, Column, Landing, BOUND, PROBLEM, REL_ERROR, ROWS,
    VERDICT,
};

pub fn verify(env: &Env, a: &MoeVerifyArgs) -> Result<ExitCode> {
    let shaping = [
        ("--version", a.version.is_some()),
        ("--counts", a.counts.is_some() || a.counts_file.is_some()),
        ("--weights", a.four_bit.weights.is_some()),
        ("--swiglu", a.swiglu.is_some()),
        ("--masked", a.masked),
    ];
    if let Some((flag, _)) = shaping.iter().find(|(_, given)| *given) {
        return Err(Error::invalid(format!(
            "--layer verifies the layer on its own suite; leave out {flag}"
        )));
    }
    let full = parse_suite(a.suite.as_deref().unwrap_or("quick"))?;
    let cases = layer_suite(full);
    let ctx = env.context()?;
    let progress = Some((cases.len(), "moe layer verify"));
    let landing = Landing::begin(env, &ctx, Some("verify"), progress)?;
    let mut outcomes: Vec<Outcome> = Vec::new();
    for c in &cases {
        let o = verify_layer(&ctx, c)?;
        landing.fail(!o.passed, || format!("FAIL {}: {}", o.label, o.message));
        landing.record(rows::moe_layer_verify_row(c, &o))?;
        outcomes.push(o);
        landing.tick();
    }
    let failed = failures(&outcomes);
    landing.end(failed > 0)?;
    const ROUTE: Column = ("route", |o| match &o.extra {
        Extra::Layer {
            route, near_ties, ..
        } if *near_ties > 0 => format!("{route} ({near_ties} near ties)"),
        Extra::Layer { route, .. } => route.clone(),
        _ => String::new(),
    });
    const H_ERROR: Column = ("H error", |o| match &o.extra {
        Extra::Layer { h_error, .. } => format!("{h_error:.2e}"),
        _ => format!("{:.2e}", f64::NAN),
    });
    const ERROR: Column = ("error", REL_ERROR.1);
    const TOKENS: Column = ("tokens", ROWS.1);
    let columns = [PROBLEM, ROUTE, H_ERROR, ERROR, BOUND, TOKENS, VERDICT];
    print_outcomes(env, None, &outcomes, &columns, || {
        format!("{} layer checks, {failed} failed", outcomes.len())
    });
    Ok(verified(failed > 0))
}

pub fn bench(env: &Env, a: &MoeBenchArgs, shapes: &str) -> Result<ExitCode> {
    let combine: CombineMode = a.combine.as_deref().unwrap_or("atomic").parse()?;
    let layers = if shapes == "issue" {
        issue_layers(combine)
    } else {
        parse_layers(shapes, combine)?
    };
    let ctx = env.context()?;
    let opt = bench_options(env, &a.timing);
    let run = env.begin("bench", Some(&ctx.info))?;
    let mut all = Vec::new();
    for p in &layers {
        for t in bench_layer(&ctx, p, &opt, a.seed)? {
            record(&run, rows::moe_layer_bench_row(p, &t))?;
            all.push(t);
        }
    }
    finish(&run, "ok")?;
    if env.json {
        env.print_json(&json!({"device": ctx.info.name, "flush_l2": opt.flush_l2, "rows": all}));
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", bench_text(&all));
    Ok(ExitCode::SUCCESS)
}

/// `kiln moe bench --layer`'s table (without --json): a row per timed step of each layer.
pub(super) fn bench_text(rows: &[Row]) -> String {
    use super::bench_table::{Col, MEDIAN_MS};
    use super::moe::{GBPS, MAX, MIN, TFLOPS};
    const STEP: Col = ("step", |x| x.text("piece"));
    let columns = [
        bench_table::PROBLEM,
        STEP,
        MEDIAN_MS,
        MIN,
        MAX,
        TFLOPS,
        GBPS,
    ];
    table(&columns, rows).render()
}
