//! `kiln moe verify`, `kiln moe bench` and `kiln moe check`: the MoE kernels against the float64
//! reference on the MoE shape suite, timed alone or as a whole expert FFN, and compiled.

use std::path::Path;
use std::process::ExitCode;

use kiln::error::{Error, Result};
use kiln::harness::bench::Row;
use kiln::harness::check::check_all;
use kiln::harness::moe_bench::{bench_moe, problems, MoeBenchRequest};
use kiln::harness::moe_shapes::moe_suite;
use kiln::harness::moe_verify::{verify_moe, Mode};
use kiln::harness::outcome::Outcome;
use kiln::ops::gemm::DType;
use kiln::ops::moe::{parse_counts, uneven_counts, versions_of_kind, MoeProblem, WeightLayout};
use kiln::report::Table;
use kiln::store::rows;
use serde_json::json;

use super::args::{ArchArgs, MoeAction, MoeBenchArgs, MoeCmdArgs, MoeVerifyArgs};
use super::bench_table::{self, Col, MEDIAN_MS};
use super::env::{bench_options, device_or_h100, finish, record, Env};
use super::verdicts::{
    exit_if, failures, print_outcomes, table, verified, Column, Landing, BOUND, PROBLEM, REL_ERROR,
    ROWS, VERDICT, VERSION,
};

pub fn moe(env: &Env, a: &MoeCmdArgs) -> Result<ExitCode> {
    match &a.action {
        MoeAction::Verify(v) => verify(env, v),
        MoeAction::Bench(b) => bench(env, b),
        MoeAction::Check(c) => check(env, c),
        MoeAction::Prepack(p) => super::moe_fp4::prepack(env, p),
    }
}

fn verify(env: &Env, a: &MoeVerifyArgs) -> Result<ExitCode> {
    if a.layer {
        return super::moe_layer::verify(env, a);
    }
    if let Some(w) = &a.four_bit.weights {
        if a.version.is_some() || a.suite.is_some() {
            return Err(Error::invalid(
                "--weights verifies the 4-bit kernel on its own suite or on --counts; leave out --version and --suite",
            ));
        }
        return super::moe_fp4::verify(env, own_problem(a)?, w, a.graph, a.four_bit.act.as_deref());
    }
    if let Some(v) = &a.version {
        env.registry.moe_version(v)?;
    }
    let own = own_problem(a)?;
    let cases = match &own {
        Some(p) => {
            let kind = versions_of_kind(p);
            if let Some(v) = a.version.as_deref().filter(|v| !kind.contains(v)) {
                return Err(Error::invalid(format!(
                    "{v} does not compute {}; use {}",
                    p.label(),
                    kind.join(" or ")
                )));
            }
            let mode = if a.graph { Mode::Graph } else { Mode::Direct };
            vec![(p.clone(), mode)]
        }
        None => moe_suite(a.suite.as_deref().unwrap_or("quick").parse()?),
    };
    let ctx = env.context()?;
    let landing = Landing::begin(env, &ctx, Some("verify"), Some((cases.len(), "moe verify")))?;
    let mut outcomes: Vec<Outcome> = Vec::new();
    for (p, mode) in &cases {
        // every version that computes this kind of problem (both grouped GEMM kernels)
        for name in versions_of_kind(p) {
            if a.version.as_deref().is_some_and(|v| v != *name) {
                continue;
            }
            let k = env.registry.moe_version(name)?;
            let o = verify_moe(&ctx, k, p, *mode)?;
            landing.fail(!o.passed, || {
                format!("FAIL {} {} ({:?}): {}", o.check, o.label, mode, o.message)
            });
            landing.record(rows::moe_verify_row(p, &o))?;
            outcomes.push(o);
        }
        landing.tick();
    }
    let failed = failures(&outcomes);
    landing.end(failed > 0)?;
    const MODE: Column = ("mode", |o| {
        o.mode()
            .map(|m| format!("{m:?}").to_lowercase())
            .unwrap_or_default()
    });
    let columns = [VERSION, PROBLEM, MODE, REL_ERROR, BOUND, ROWS, VERDICT];
    print_outcomes(env, None, &outcomes, &columns, || {
        format!("{} checks, {failed} failed", outcomes.len())
    });
    // A problem of the user's that no version ran is said as such, not passed as a skip.
    if let (Some(p), true) = (&own, outcomes.iter().all(|o| o.skipped.is_some())) {
        return Err(Error::Unsupported {
            kernel: outcomes
                .iter()
                .map(|o| o.check.as_str())
                .collect::<Vec<_>>()
                .join(", "),
            reason: format!(
                "{}: {}",
                p.label(),
                outcomes
                    .iter()
                    .find_map(|o| o.skipped.clone())
                    .unwrap_or_default()
            ),
        });
    }
    Ok(verified(failed > 0))
}

/// The problem of `moe verify`'s flags (`None`: the suite), validated before any GPU is touched.
fn own_problem(a: &MoeVerifyArgs) -> Result<Option<MoeProblem>> {
    let counts = match (&a.counts, &a.counts_file) {
        (Some(c), _) => parse_counts(c)?,
        (None, Some(path)) => read_counts(path)?,
        (None, None) => {
            let shaping = [
                ("--n", a.n.is_some()),
                ("--k", a.k.is_some()),
                ("--masked", a.masked),
                ("--max-rows", a.max_rows.is_some()),
                ("--swiglu", a.swiglu.is_some()),
                ("--routed", a.routed),
                ("--dtype", a.dtype.is_some()),
                ("--out-dtype", a.out_dtype.is_some()),
                ("--graph", a.graph),
            ];
            if let Some((flag, _)) = shaping.iter().find(|(_, given)| *given) {
                return Err(Error::invalid(format!(
                    "{flag} describes one problem, given by --counts or --counts-file; add one, or leave {flag} out to verify the suite"
                )));
            }
            return Ok(None);
        }
    };
    if a.suite.is_some() {
        return Err(Error::invalid(
            "--suite runs the built-in problems; leave it out to verify the problem of --counts",
        ));
    }
    let (Some(n), Some(k)) = (a.n, a.k) else {
        return Err(Error::invalid(
            "a problem given by --counts needs --n (output columns) and --k (reduction depth)",
        ));
    };
    let input: DType = a.dtype.as_deref().unwrap_or("bf16").parse()?;
    let output: DType = match &a.out_dtype {
        Some(o) => o.parse()?,
        None => input,
    };
    let p = match (a.masked, a.max_rows) {
        (true, rows) => {
            let largest = counts.iter().copied().max().unwrap_or(0);
            MoeProblem::masked(&counts, rows.unwrap_or(largest.max(1)), n, k, input, output)
        }
        (false, Some(_)) => {
            return Err(Error::invalid(
                "--max-rows sizes the masked layout; add --masked, or leave it out for tokens sorted by expert",
            ))
        }
        (false, None) => MoeProblem::contiguous(&counts, n, k, input, output),
    };
    let p = match a.swiglu.as_deref() {
        Some(w) => p.with_swiglu(swiglu_weights(w)?, a.routed),
        None if a.routed => {
            return Err(Error::invalid(
                "--routed scales the SwiGLU's rows by their routing weights; add --swiglu",
            ))
        }
        None => p,
    };
    p.validate()?;
    Ok(Some(p))
}

/// The SwiGLU weights `--swiglu` names (`moe verify`, `moe prepack`).
pub(super) fn swiglu_weights(v: &str) -> Result<WeightLayout> {
    match v {
        "separate" => Ok(WeightLayout::Separate),
        "interleaved" => Ok(WeightLayout::Interleaved),
        other => Err(Error::invalid(format!(
            "--swiglu {other}: the SwiGLU weights are `separate` or `interleaved`"
        ))),
    }
}

/// Row counts from a file: numbers separated by commas, spaces or newlines.
fn read_counts(path: &Path) -> Result<Vec<usize>> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::invalid(format!(
            "cannot read the counts file {}: {e}",
            path.display()
        ))
    })?;
    let counts: Vec<usize> = text
        .split(|c: char| c == ',' || c.is_whitespace())
        .filter(|t| !t.is_empty())
        .map(|t| {
            t.parse().map_err(|_| {
                Error::invalid(format!(
                    "counts file {}: `{t}` is not a row count; write counts separated by commas, spaces or newlines",
                    path.display()
                ))
            })
        })
        .collect::<Result<_>>()?;
    if counts.is_empty() {
        return Err(Error::invalid(format!(
            "the counts file {} holds no row counts",
            path.display()
        )));
    }
    Ok(counts)
}

impl MoeBenchArgs {
    /// The rows per expert: --counts, else --tokens spread unevenly over --experts.
    pub(super) fn row_counts(&self) -> Result<Vec<usize>> {
        match &self.counts {
            Some(c) => parse_counts(c),
            None => Ok(uneven_counts(self.tokens, self.experts, self.seed)),
        }
    }

    /// The SwiGLU's weight layout and routing, with --swiglu (refusing their flags without it).
    pub(super) fn swiglu_of(&self) -> Result<Option<(WeightLayout, bool)>> {
        if (self.interleaved || self.routed) && !self.swiglu {
            return Err(Error::invalid(
                "--interleaved and --routed describe the SwiGLU weights; add --swiglu",
            ));
        }
        let weights = match self.interleaved {
            true => WeightLayout::Interleaved,
            false => WeightLayout::Separate,
        };
        Ok(self.swiglu.then_some((weights, self.routed)))
    }
}

/// The typed request from the flags, validated before any GPU is touched.
fn request(a: &MoeBenchArgs) -> Result<MoeBenchRequest> {
    let counts = a.row_counts()?;
    let dtype: DType = a.dtype.parse()?;
    let r = MoeBenchRequest {
        counts,
        n: a.n,
        k: a.k,
        dtype,
        swiglu: a.swiglu_of()?,
    };
    let (first, down) = problems(&r);
    first.validate()?;
    if let Some(d) = down {
        d.validate()?;
    }
    Ok(r)
}

fn bench(env: &Env, a: &MoeBenchArgs) -> Result<ExitCode> {
    if let Some(shapes) = &a.layer {
        return super::moe_layer::bench(env, a, shapes);
    }
    if let Some(w) = &a.four_bit.weights {
        return super::moe_fp4::bench(env, a, w);
    }
    let r = request(a)?;
    let ctx = env.context()?;
    let opt = bench_options(env, &a.timing);
    let run = env.begin("bench", Some(&ctx.info))?;
    let rows = bench_moe(&ctx, &env.registry, &r, &opt)?;
    for t in &rows {
        record(&run, rows::moe_bench_row(&r, t))?;
    }
    finish(&run, "ok")?;
    if env.json {
        env.print_json(&json!({"device": ctx.info.name, "counts": r.counts, "n": r.n, "k": r.k, "dtype": r.dtype, "flush_l2": opt.flush_l2, "flush": ctx.overrides.bench.flush.label(opt.flush_l2), "rows": rows}));
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", bench_text(&r.counts, &rows));
    Ok(ExitCode::SUCCESS)
}

/// `kiln moe bench`'s text (without --json): the counts, then a row per timed piece.
pub(super) fn bench_text(counts: &[usize], rows: &[Row]) -> String {
    const PIECE: Col = ("piece", |x| x.text("piece"));
    const TILE: Col = ("tile", |x| x.text("tile"));
    let columns = [
        PIECE,
        bench_table::PROBLEM,
        TILE,
        MEDIAN_MS,
        MIN,
        MAX,
        TFLOPS,
        GBPS,
    ];
    format!(
        "rows per expert: {counts:?}\n{}",
        table(&columns, rows).render()
    )
}

/// The columns of a MoE timing (`kiln moe bench`, `--layer`).
pub(super) const MIN: Col = ("min ms", |x| x.fixed("min_ms", 4));
pub(super) const MAX: Col = ("max ms", |x| x.fixed("max_ms", 4));
pub(super) const TFLOPS: Col = ("TFLOPS", |x| x.fixed("tflops", 1));
pub(super) const GBPS: Col = ("GB/s", |x| x.fixed("gbps", 0));

fn check(env: &Env, a: &ArchArgs) -> Result<ExitCode> {
    kiln::jit::arch::check(&a.arch)?;
    kiln::jit::nvrtc::version()?;
    let dev = device_or_h100();
    let jit = env.jit();
    let mut rows = Vec::new();
    let names = env.registry.moe().iter().map(|k| k.name());
    for name in names.chain([
        kiln::ops::moe::fp4::kernel::NAME,
        kiln::ops::moe::layer::NAME,
    ]) {
        rows.extend(check_all(
            &jit,
            &env.registry,
            &a.arch,
            &dev,
            Some(name),
            |_| {},
        ));
    }
    let failed = rows.iter().any(|r| !r.ok());
    if env.json {
        env.print_json(&json!(rows));
    } else {
        let mut t = Table::new(&[
            "version", "variant", "regs", "smem B", "spills B", "verdict",
        ]);
        for r in &rows {
            let res = r.resources.clone().unwrap_or_default();
            t.row(&[
                r.version.clone(),
                r.variant.clone(),
                res.registers.to_string(),
                (res.static_smem + r.dynamic_smem).to_string(),
                (res.spill_stores + res.spill_loads).to_string(),
                if r.ok() {
                    "ok".to_string()
                } else {
                    r.problems.join("; ")
                },
            ]);
        }
        print!("{}", t.render());
        println!(
            "{} MoE variants for {}: {} with problems",
            rows.len(),
            a.arch,
            rows.iter().filter(|r| !r.ok()).count()
        );
    }
    Ok(exit_if(failed, 1))
}
