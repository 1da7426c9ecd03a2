//! `kiln bench --set random`: shapes drawn from a seed, each run by the version the dispatch picks
//! (or those named) beside cuBLAS in the same run; a row per shape, then how the ratios spread.

use std::process::ExitCode;

use kiln::device::Context;
use kiln::error::{Error, Result};
use kiln::harness::bench_versions::BenchVersions;
use kiln::harness::random_set::{self, RatioDistribution, ShapeResult, FLOOR, TARGET_GEOMEAN};
use kiln::ops::gemm::GemmKernel;
use kiln::report::Table;
use serde::Serialize;
use serde_json::json;

use super::args::BenchArgs;
use super::check::{check_summary, compile_items};
use super::env::{bench_options, Env};
use super::gemm::{kernels, run_bench};

/// Shapes drawn without --count: issue 36's target is stated over 300.
const DEFAULT_COUNT: u32 = 300;
const DEFAULT_SEED: u64 = 1;
/// The lowest ratios listed again after the summary.
const WORST_SHOWN: usize = 10;

/// One version's shapes (or the dispatch's) and the distribution of their ratios.
#[derive(Serialize)]
struct Outcome {
    version: String,
    shapes: Vec<ShapeResult>,
    summary: Option<RatioDistribution>,
}

pub fn bench_random(env: &Env, a: &BenchArgs) -> Result<ExitCode> {
    if a.problem.shape.is_some() {
        return Err(Error::invalid(
            "--set random draws its own shapes; leave out --shape, or leave out --set to time that shape",
        ));
    }
    let count = a.count.unwrap_or(DEFAULT_COUNT) as usize;
    let seed = a.seed.unwrap_or(DEFAULT_SEED);
    // Named versions are resolved before the GPU is touched, so a bad name is said at once.
    let listed: Vec<&dyn GemmKernel> = if a.all {
        let ours = env.registry.gemm().iter().filter(|k| !k.is_vendor());
        ours.map(|k| k.as_ref()).collect()
    } else if a.versions.is_empty() {
        Vec::new()
    } else {
        kernels(env, &a.versions)?
    };
    let problems = random_set::problems(count, seed);
    let ctx = env.context()?;
    let versions = if listed.is_empty() {
        BenchVersions::Dispatched {
            registry: &env.registry,
            tuned: &ctx.tuned,
            requested: env.config.version_for("gemm"),
        }
    } else {
        BenchVersions::Listed(&listed)
    };
    let say = |s: &str| env.say(s);
    // Every variant the shapes run, compiled in parallel before the first timing rather than one
    // at a time at each shape's first launch.
    let arch = ctx.info.arch();
    let work = versions.compile_items(&problems, &ctx.info, &ctx.tuned);
    let (compiled, wall_ms) = compile_items(env, &arch, &work, &ctx.info)?;
    say(&format!(
        "{count} shapes drawn from seed {seed}; {}",
        check_summary(&compiled, &arch, wall_ms)
    ));
    let vendor = env.registry.gemm_version("cublas")?;
    let mut opt = bench_options(env, &a.timing);
    opt.interleave = !a.sequential;
    let passes = a.passes as usize;
    let order = (passes, a.order_seed);
    let rows = run_bench(
        env,
        &ctx,
        versions,
        vendor,
        &problems,
        &opt,
        order,
        Some(seed),
        false,
    )?;
    let names: Vec<Option<&str>> = if listed.is_empty() {
        vec![None]
    } else {
        listed.iter().map(|k| Some(k.name())).collect()
    };
    let outcomes: Vec<Outcome> = names
        .into_iter()
        .map(|name| {
            let mut shapes = random_set::shape_results(&rows, &problems, name);
            for s in &mut shapes {
                s.config = config_of(env, &ctx, s);
            }
            let ratios: Vec<f64> = shapes.iter().filter_map(|s| s.ratio).collect();
            Outcome {
                version: name.unwrap_or("kiln").into(),
                summary: random_set::distribution(&ratios, WORST_SHOWN),
                shapes,
            }
        })
        .collect();
    if env.json {
        env.print_json(&json!({
            "device": ctx.info, "kiln_commit": kiln::store::kiln_commit(),
            "date": kiln::store::utc_now(), "command": env.command, "seed": seed,
            "count": count, "passes": passes, "results": outcomes,
        }));
    } else {
        for o in &outcomes {
            print!("{}", shape_table(o.shapes.iter()).render());
        }
    }
    for o in &outcomes {
        let who = match o.version.as_str() {
            "kiln" => "kiln (the dispatch's version per shape)".to_string(),
            v => v.to_string(),
        };
        for line in summary_lines(&who, o, seed, passes) {
            say(&line);
        }
        if let Some(d) = &o.summary {
            let timed: Vec<&ShapeResult> = o.shapes.iter().filter(|s| s.ratio.is_some()).collect();
            say(&format!("the {} lowest:", d.worst.len()));
            say(shape_table(d.worst.iter().map(|&i| timed[i]))
                .render()
                .trim_end());
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The summary of one outcome: the spread of its ratios, the target, and the shapes not run.
fn summary_lines(who: &str, o: &Outcome, seed: u64, passes: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let per = if passes > 1 {
        format!(", each its median of {passes} passes")
    } else {
        String::new()
    };
    match &o.summary {
        Some(d) => {
            lines.push(format!(
                "{who} over {} shapes (seed {seed}{per}), speed ratio to cuBLAS: min {:.3}x, 5% {:.3}x, median {:.3}x, geometric mean {:.3}x; {} below {FLOOR:.2}x",
                d.count, d.min, d.p5, d.median, d.geomean, d.below_floor
            ));
            lines.push(format!(
                "target (geometric mean at least {TARGET_GEOMEAN:.2}x, none below {FLOOR:.2}x): {}",
                if d.meets_target() { "met" } else { "missed" }
            ));
        }
        None => lines.push(format!("{who}: no shape was timed against cuBLAS")),
    }
    let skipped: Vec<&ShapeResult> = o.shapes.iter().filter(|s| s.ratio.is_none()).collect();
    if let Some(first) = skipped.first() {
        lines.push(format!(
            "{} of {} shapes have no ratio; the first, {}: {}",
            skipped.len(),
            o.shapes.len(),
            first.problem.label(),
            first.skipped.as_deref().unwrap_or("no cuBLAS time")
        ));
    }
    lines
}

/// What `version` launches for the shape, as `kiln plan` shows it: its tile and any copies first.
fn config_of(env: &Env, ctx: &Context, s: &ShapeResult) -> Option<String> {
    let k = env.registry.gemm_version(s.version.as_deref()?).ok()?;
    let plan = k.plan(&s.problem, &ctx.info, &ctx.tuned, &ctx.overrides)?;
    Some(match plan.copies.len() {
        0 => plan.tile,
        n => format!("{} after {n} copies", plan.tile),
    })
}

/// A row per shape: its place in the draw, shape, layout, dtype, both times, the ratio and what ran.
fn shape_table<'a>(shapes: impl Iterator<Item = &'a ShapeResult>) -> Table {
    let mut t = Table::new(&[
        "#",
        "shape",
        "layout",
        "dtype",
        "kiln µs",
        "cuBLAS µs",
        "x cuBLAS",
        "version / config",
    ]);
    let us = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.1}"));
    for s in shapes {
        let p = &s.problem;
        let ran = match (&s.version, &s.config) {
            (Some(v), Some(c)) => format!("{v} {c}"),
            (Some(v), None) => v.clone(),
            (None, _) => format!("skipped: {}", s.skipped.as_deref().unwrap_or("-")),
        };
        t.row(&[
            s.index.to_string(),
            format!("{}x{}x{}", p.m, p.n, p.k),
            p.layout.to_string(),
            p.input.to_string(),
            us(s.kiln_us),
            us(s.vendor_us),
            s.ratio.map_or("-".into(), |r| format!("{r:.3}")),
            ran,
        ]);
    }
    t
}
