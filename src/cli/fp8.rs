//! `kiln fp8 verify`, `kiln fp8 bench` and `kiln fp8 check`: the FP8 conversions, quantisation
//! and GEMM against the CPU and the float64 reference, the GEMM timed against cuBLASLt's FP8 in
//! the same run, and every FP8 kernel variant compiled (no GPU).

use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde_json::json;

use kiln::device::DeviceInfo;
use kiln::error::{Error, Result};
use kiln::formats::{Fp8Format, ScaleRecipe};
use kiln::harness::bench::Row;
use kiln::harness::fp8::{verify_gemm_seeded, Data, GemmCase};
use kiln::harness::fp8_bench::{bench_fp8, deepseek_shapes};
use kiln::harness::fp8_chain::bench_fp8_chain;
use kiln::harness::fp8_checks::{suite, verify as verify_check, Fp8Check};
use kiln::harness::outcome::Outcome;
use kiln::harness::shapes::Suite;
use kiln::ops::fp8::gemm::{check_config, choose_by, Fp8Rule};
use kiln::ops::fp8::{Fp8Config, Fp8Problem, ScaleMode};
use kiln::ops::gemm::{parse_shape, DType};

use super::bench_table::{self, Col, MAX, MEDIAN_MS, MIN, PROBLEM, TFLOPS, VERSION};
use super::env::Env;
use super::verdicts::{
    self, verified, Column, Landing, BEYOND_ROUNDING, BOUND_SCI, CASE, CHECK, REL_ERR, ROWS,
    VERDICT,
};

#[derive(Debug, Args)]
pub struct Fp8CliArgs {
    #[command(subcommand)]
    pub action: Fp8Action,
}

#[derive(Debug, Subcommand)]
pub enum Fp8Action {
    /// Check the conversions and quantisation bit for bit against the CPU, and the FP8 GEMM
    /// against the float64 product of the dequantised operands; exit 7 if any check fails.
    Verify(Fp8VerifyArgs),
    /// Time the FP8 GEMM against cuBLASLt's FP8 GEMM on the same operands, in the same run.
    Bench(Fp8BenchArgs),
    /// Compile every FP8 kernel variant (no GPU needed): registers, spills, serialisation.
    Check(super::args::ArchArgs),
}

#[derive(Debug, Args)]
pub struct Fp8VerifyArgs {
    /// quick, full, or promotion (the K = 16,384 promotion check alone: every promoted tile
    /// against the unpromoted accumulation, seconds).
    #[arg(long, default_value = "full")]
    pub suite: String,
    /// Also check cuBLASLt's FP8 GEMM on every GEMM case.
    #[arg(long)]
    pub vendor: bool,
    /// Instead of the suite: the GEMM at --shape / --set, once per --tile (`all`: every compiled
    /// config), on the inputs of --seed.
    #[command(flatten)]
    pub problem: Fp8ProblemArgs,
    /// The inputs' seed (a fuzz failure's, to rerun it under other configs or outputs);
    /// default: fresh.
    #[arg(long)]
    pub seed: Option<u64>,
    #[command(flatten)]
    pub grouped: super::fp8_moe::Fp8GroupedArgs,
}

/// The dense FP8 problems and configs `fp8 bench` times and `fp8 verify --shape` checks.
#[derive(Debug, Clone, Args)]
pub struct Fp8ProblemArgs {
    /// Shapes MxNxK (repeatable; default 4096x7168x16384).
    #[arg(long = "shape")]
    pub shapes: Vec<String>,
    /// A preset set of shapes instead: `deepseek` (DeepSeek-V3's 18 GEMMs).
    #[arg(long)]
    pub set: Option<String>,
    /// Scales: tensor, row or block (1x128 activations, 128x128 weights).
    #[arg(long, default_value = "block")]
    pub scale: String,
    /// The FP8 format of A and B: e4m3 or e5m2 (`--dtype e4m3`), or each with --a / --b.
    #[arg(long, default_value = "e4m3")]
    pub dtype: String,
    #[arg(long)]
    pub a: Option<String>,
    #[arg(long)]
    pub b: Option<String>,
    /// Output type: bf16, f16 or f32.
    #[arg(long, default_value = "bf16")]
    pub out: String,
    /// Accumulate the whole K in the tensor cores (cuBLASLt's fast accumulation): not for block
    /// scales.
    #[arg(long)]
    pub unpromoted: bool,
    /// kiln's tile config, repeatable (bench: each timed in turn with the others and cuBLASLt,
    /// launch by launch; verify: each checked, `all` for every compiled one):
    /// `[64x]WIDTH[p|o][r][s|t][b|q][z|u][m][n][g][e|h|d][l][/S][a|w|c]` (128, 160, 128p for the pipelined promotion,
    /// r for A's fragments from registers (256prtmh: lost, not compiled now),
    /// s for the block scales through shared memory, 176se and C through the TMA-store
    /// epilogue (h: one staging buffer a consumer, a stage more: 256tmh; d: deferred under the
    /// next tile's K blocks, unpromoted tensor scales: 256md), 128te and the A scales by TMA
    /// (128otbe: by one bulk copy, no map; 128otqe: both scales by bulk copies, no copier warp; 128ptqze: the lean short-K form, A's 4 K blocks resident and a ring of B alone, where M <= the tile's rows and K is 385..512; 64x128psu/1: whole tiles only, split-K and stream-K compiled out), 128ote the consumers taking turns to issue K
    /// blocks, m for pairs of CTAs along M multicasting B (128ptme), n along N multicasting A,
    /// g for the consumers taking whole tiles in turn (192mgh, unpromoted tensor scales),
    /// l for a CTA's last tile staged in the ring (256thl),
    /// 64x128ps the
    /// 64-row tile, /S for S split-K slices (/k: stream-K, the last wave's tiles shared out by K
    /// block), a, w or c to reduce them atomically, through slots or in a cluster's shared
    /// memory),
    /// or a rule's choice: `large` (the default: `measured`, but from M = 1024 128pte, or
    /// 128te below K = 2048), `measured` (the 64-row tile at M <= 128, above it `waves`),
    /// `waves` (the rule of a8381a5), `bytes` (the cost model) or `fill` (`measured` at M <=
    /// 128, above it the TMA-store tile whose width fills the SMs); default: KILN_FP8_RULE's
    /// choice.
    #[arg(long)]
    pub tile: Vec<String>,
}

#[derive(Debug, Args)]
pub struct Fp8BenchArgs {
    #[command(flatten)]
    pub problem: Fp8ProblemArgs,
    /// Time kiln alone.
    #[arg(long)]
    pub no_vendor: bool,
    /// Time chains of N launches of each problem instead (each on its own copy of B, captured
    /// in a CUDA graph, the figure per launch): kiln plainly, as programmatic dependents
    /// (KILN_FP8_PDL=1) and with the weights' first stages before the wait (2), beside
    /// cuBLASLt's chain.
    #[arg(long, value_name = "N")]
    pub chain: Option<usize>,
    #[command(flatten)]
    pub timing: super::args::TimingArgs,
    #[command(flatten)]
    pub grouped: super::fp8_moe::Fp8GroupedArgs,
}

pub fn run(env: &Env, a: &Fp8CliArgs) -> Result<ExitCode> {
    match &a.action {
        Fp8Action::Verify(v) => verify(env, v),
        Fp8Action::Bench(b) => bench(env, b),
        Fp8Action::Check(c) => check(env, c),
    }
}

fn verify(env: &Env, a: &Fp8VerifyArgs) -> Result<ExitCode> {
    let promotion_only = a.suite == "promotion" && !a.grouped.grouped;
    let quick = promotion_only
        || match a.suite.parse::<Suite>() {
            Ok(s) => s == Suite::Quick,
            Err(_) if a.grouped.grouped => {
                return Err(Error::invalid(format!(
                    "unknown suite `{}` for the grouped kernels; use quick or full",
                    a.suite
                )))
            }
            Err(_) => {
                return Err(Error::invalid(format!(
                    "unknown suite `{}`; use quick, full or promotion (the K = 16,384 promotion \
                     check alone)",
                    a.suite
                )))
            }
        };
    if a.grouped.grouped {
        return super::fp8_moe::verify(env, &a.grouped, quick);
    }
    if !a.problem.shapes.is_empty() || a.problem.set.is_some() {
        return verify_at(env, a);
    }
    let ctx = env.context()?;
    if promotion_only && !a.problem.tile.is_empty() {
        // the check with the named promoted tensor-scale tiles only (no block-scaled family)
        let tiles = a
            .problem
            .tile
            .iter()
            .map(|t| t.parse::<Fp8Config>())
            .collect::<Result<Vec<_>>>()?;
        let o = kiln::harness::fp8::verify_promotion_of(&ctx, &tiles, false)?;
        return print_outcomes(env, &ctx.info, &[o]);
    }
    let checks = if promotion_only {
        vec![Fp8Check::Promotion]
    } else {
        suite(quick)
    };
    let landing = Landing::begin(env, &ctx, None, Some((checks.len(), "fp8 verify")))?;
    let mut outcomes: Vec<Outcome> = Vec::new();
    for c in &checks {
        landing.land(&mut outcomes, verify_check(&ctx, c, a.vendor)?);
    }
    landing.end(false)?;
    print_outcomes(env, &ctx.info, &outcomes)
}

/// The outcomes as JSON or a table, with the count of failures (cuBLASLt's apart); exit 7 if
/// any of kiln's failed.
fn print_outcomes(env: &Env, info: &DeviceInfo, outcomes: &[Outcome]) -> Result<ExitCode> {
    // cuBLASLt's outcomes are reported, not held against kiln.
    let (vendor, kiln): (Vec<&Outcome>, _) = outcomes.iter().partition(|o| o.check == "cublaslt");
    let failed = kiln.iter().filter(|o| !o.passed).count();
    let vendor_failed = vendor.iter().filter(|o| !o.passed).count();
    const CANCELLATION: Column = ("cancellation", |o| {
        o.cancellation()
            .map(|c| format!("{c:.1}"))
            .unwrap_or_default()
    });
    let columns = [
        CHECK,
        CASE,
        REL_ERR,
        BEYOND_ROUNDING,
        BOUND_SCI,
        CANCELLATION,
        ROWS,
        VERDICT,
    ];
    verdicts::print_outcomes(env, Some(info), outcomes, &columns, || {
        format!(
            "{} checks on {}, {failed} failed (cuBLASLt: {vendor_failed} failed)",
            outcomes.len(),
            info.name
        )
    });
    Ok(verified(failed > 0))
}

/// `kiln fp8 verify --shape ... [--tile ...] [--seed S]`: the GEMM at the named shapes, once per
/// config, each on inputs of one seed (the same seed gives the same inputs whatever the config
/// or output type).
fn verify_at(env: &Env, a: &Fp8VerifyArgs) -> Result<ExitCode> {
    let request = Fp8ProblemArgs {
        tile: a
            .problem
            .tile
            .iter()
            .filter(|t| *t != "all")
            .cloned()
            .collect(),
        ..a.problem.clone()
    };
    let problems = bench_problems(&request)?;
    let ctx = env.context()?;
    let seed = a.seed.unwrap_or_else(kiln::harness::verify::fresh_seed);
    let landing = Landing::begin(env, &ctx, None, None)?;
    let mut outcomes = Vec::new();
    for p in &problems {
        let mut cfgs = tiles_for(p, &request.tile, &ctx.info)?;
        if a.problem.tile.iter().any(|t| t == "all") {
            cfgs.extend(kiln::ops::fp8::gemm::configs(p.a, p.b, p.scale, p.promote));
        }
        let cfgs: Vec<Option<Fp8Config>> = if cfgs.is_empty() {
            vec![None]
        } else {
            cfgs.into_iter().map(Some).collect()
        };
        for cfg in cfgs {
            let case = GemmCase {
                p: *p,
                cfg,
                recipe: ScaleRecipe::Fp32,
                data: Data::Signed,
            };
            for o in verify_gemm_seeded(&ctx, &case, a.vendor, seed)? {
                landing.say(|| check_line(&o, p));
                outcomes.push(o);
            }
        }
    }
    print_outcomes(env, &ctx.info, &outcomes)
}

/// One check's progress line (`fp8 verify`): each error beside the bound it is judged against. A GEMM check's
/// `bound` is on the error beyond the output's rounding, not on the error against the exact
/// product (which has the output type's own bound): the two side by side read as a failure
/// that passed (`1.67e-3 (bound 1e-3) ok` for a bf16 C).
fn check_line(o: &Outcome, p: &Fp8Problem) -> String {
    let rounded = o.rel_error_rounded();
    let errors = if rounded.is_finite() {
        format!(
            "{rounded:.2e} beyond the output's rounding (bound {:.0e}), {:.2e} against the exact \
             product (bound {:.0e})",
            o.bound,
            o.rel_error,
            kiln::harness::fp8::exact_bound(p)
        )
    } else {
        format!("{:.2e} (bound {:.0e})", o.rel_error, o.bound)
    };
    format!("{} {}: {errors} {}", o.check, o.label, o.message)
}

/// The problems a bench request names, validated before any GPU is touched.
pub fn bench_problems(a: &Fp8ProblemArgs) -> Result<Vec<Fp8Problem>> {
    let scale: ScaleMode = a.scale.parse()?;
    let fmt: Fp8Format = a.dtype.parse()?;
    let fa: Fp8Format = a.a.as_deref().map(str::parse).transpose()?.unwrap_or(fmt);
    let fb: Fp8Format = a.b.as_deref().map(str::parse).transpose()?.unwrap_or(fmt);
    let out: DType = a.out.parse()?;
    let shapes: Vec<(usize, usize, usize)> = match (a.set.as_deref(), a.shapes.is_empty()) {
        (Some("deepseek"), true) => deepseek_shapes(),
        (Some(other), true) => {
            return Err(Error::invalid(format!(
                "unknown shape set `{other}`; use deepseek"
            )))
        }
        (Some(_), false) => return Err(Error::invalid("give --shape or --set, not both")),
        (None, true) => vec![(4096, 7168, 16384)],
        (None, false) => a
            .shapes
            .iter()
            .map(|s| parse_shape(s))
            .collect::<Result<_>>()?,
    };
    let problems: Vec<Fp8Problem> = shapes
        .into_iter()
        .map(|(m, n, k)| Fp8Problem {
            a: fa,
            b: fb,
            promote: !a.unpromoted,
            ..Fp8Problem::new(m, n, k, out, scale)
        })
        .collect();
    for p in &problems {
        p.validate()?;
        super::fp8_gemm::refuse_unsupported(p)?;
        tiles_for(p, &a.tile, &DeviceInfo::h100_sxm())?;
    }
    Ok(problems)
}

/// The configs `--tile` names for `p` on `dev`: each a config (checked against what is
/// compiled) or a rule whose choice it is.
pub fn tiles_for(p: &Fp8Problem, tiles: &[String], dev: &DeviceInfo) -> Result<Vec<Fp8Config>> {
    tiles
        .iter()
        .map(|t| match Fp8Rule::parse(t) {
            Some(rule) => Ok(choose_by(p, dev, rule)),
            None => {
                let c: Fp8Config = t.parse()?;
                check_config(p, c)?;
                Ok(c)
            }
        })
        .collect()
}

fn bench(env: &Env, a: &Fp8BenchArgs) -> Result<ExitCode> {
    let opt = super::env::bench_options(env, &a.timing);
    if a.grouped.grouped {
        return super::fp8_moe::bench(env, &a.grouped, &opt, !a.no_vendor);
    }
    let problems = bench_problems(&a.problem)?;
    let ctx = env.context()?;
    let mut rows = Vec::new();
    for p in &problems {
        let cfgs = tiles_for(p, &a.problem.tile, &ctx.info)?;
        let r = match a.chain {
            Some(n) => bench_fp8_chain(&ctx, p, &cfgs, !a.no_vendor, &opt, n)?,
            None => bench_fp8(&ctx, p, &cfgs, !a.no_vendor, &opt)?,
        };
        if !env.json {
            for t in &r {
                eprintln!("{}", progress_line(t));
            }
        }
        rows.extend(r);
    }
    if env.json {
        env.print_json(&json!({ "device": ctx.info, "timings": rows }));
    } else {
        print!("{}", bench_text(&rows, &ctx.info.name));
    }
    Ok(ExitCode::SUCCESS)
}

/// The line `kiln fp8 bench` says on stderr as each timing lands (without --json); cuBLASLt's
/// names the algorithm it chose.
pub(super) fn progress_line(t: &Row) -> String {
    let vs = t.ratio("speedup_vs_cublaslt", 3);
    let algo = t.text("vendor_algo");
    format!(
        "{} {}: {} ms, {} TFLOPS{}{}",
        t.text("version"),
        t.text("problem"),
        t.fixed("median_ms", 3),
        t.fixed("tflops", 0),
        if vs.is_empty() {
            vs
        } else {
            format!(", {vs} cuBLASLt")
        },
        if algo.is_empty() {
            algo
        } else {
            format!(" ({algo})")
        }
    )
}

/// `kiln fp8 bench`'s table (without --json): a row per timing, the device under it.
pub(super) fn bench_text(rows: &[Row], device: &str) -> String {
    const BN: Col = ("bn", |r| r.text("config"));
    const VS: Col = ("vs cuBLASLt", |r| r.ratio("speedup_vs_cublaslt", 3));
    const DIFF: Col = ("diff vs cuBLASLt", |r| {
        match r.num("rel_diff_vs_cublaslt") {
            Some(d) => format!("{d:.1e}"),
            None => r.text("vendor_note"),
        }
    });
    let columns = [VERSION, PROBLEM, BN, MEDIAN_MS, MIN, MAX, TFLOPS, VS, DIFF];
    bench_table::text(&columns, rows, &format!("on {device}"))
}

fn check(env: &Env, a: &super::args::ArchArgs) -> Result<ExitCode> {
    kiln::jit::arch::check(&a.arch)?;
    let items = kiln::ops::fp8::variants(&a.arch)
        .into_iter()
        .map(|(version, spec)| ("fp8", version, spec))
        .collect();
    super::check::check_listed(env, items, "fp8 check")
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln::harness::outcome::Extra;

    #[test]
    fn the_progress_line_pairs_each_error_with_its_own_bound() {
        // 2026-11-30 evening: `1.67e-3 (bound 1e-3) ok` printed the error against the exact
        // product beside the bound on the error beyond the output's rounding
        let p = Fp8Problem::new(128, 32768, 512, DType::Bf16, ScaleMode::Block);
        let mut o = Outcome::new("gemm", p.to_string(), 1, 1e-3, Extra::FP8);
        o.rel_error = 1.67e-3;
        o.set_fp8(6.5e-4, None);
        o.message = "ok".into();
        let line = check_line(&o, &p);
        assert!(
            line.contains("6.50e-4 beyond the output's rounding (bound 1e-3)"),
            "{line}"
        );
        assert!(
            line.contains("1.67e-3 against the exact product (bound 4e-3)"),
            "{line}"
        );
        // a check with no error beyond rounding (the promotion check) keeps one pair
        let mut q = Outcome::new("promotion", "x".into(), 1, 1e-3, Extra::FP8);
        q.rel_error = 5.5e-4;
        assert!(check_line(&q, &p).contains("5.50e-4 (bound 1e-3)"));
    }
}
