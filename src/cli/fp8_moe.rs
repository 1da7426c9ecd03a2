//! `kiln fp8 verify --grouped` and `kiln fp8 bench --grouped`: the block-scaled FP8 MoE kernels
//! (grouped GEMM, fused SwiGLU) against float64, and timed with TFLOPS and TB/s.

use std::process::ExitCode;

use clap::Args;
use serde_json::json;

use kiln::error::{Error, Result};
use kiln::harness::bench::BenchOptions;
use kiln::harness::bench::Row;
use kiln::harness::fp8_moe::{suite, verify_case, Fp8MoeCase};
use kiln::harness::fp8_moe_bench::bench_fp8_moe;
use kiln::harness::outcome::Outcome;
use kiln::ops::moe::fp8_problem::Fp8MoeProblem;
use kiln::ops::moe::parse_counts;

use super::bench_table::{self, Col, MAX, MEDIAN_MS, MIN, PROBLEM, TFLOPS, VERSION};
use super::env::Env;
use super::verdicts::{
    failures, print_outcomes, verified, Column, Landing, BEYOND_ROUNDING, CASE, CHECK, REL_ERR,
    ROWS, VERDICT,
};

/// The grouped FP8 problem flags `fp8 verify` and `fp8 bench` share.
#[derive(Debug, Clone, Args)]
pub struct Fp8GroupedArgs {
    /// The FP8 MoE kernels instead of the dense GEMM: block-scaled grouped GEMM (or, with
    /// --swiglu, the fused SwiGLU).
    #[arg(long)]
    pub grouped: bool,
    /// Rows per expert, comma-separated (`0,300,1`); verify runs this one case instead of the
    /// suite. Default for bench: --groups experts of --rows rows.
    #[arg(long)]
    pub counts: Option<String>,
    /// Experts (bench, without --counts).
    #[arg(long, default_value_t = 4)]
    pub groups: usize,
    /// Rows per expert (bench, without --counts); with --masked, max_rows.
    #[arg(long, default_value_t = 8192)]
    pub rows: usize,
    /// The masked layout: X [E, max_rows, K] with the counts read on the GPU.
    #[arg(long)]
    pub masked: bool,
    /// max_rows of the masked layout (default: the largest count).
    #[arg(long)]
    pub max_rows: Option<usize>,
    #[arg(long = "n", default_value_t = 4096)]
    pub n: usize,
    #[arg(long = "k", default_value_t = 7168)]
    pub k: usize,
    /// The fused SwiGLU dual GEMM (W1, W3) instead of the plain grouped GEMM.
    #[arg(long)]
    pub swiglu: bool,
    /// The SwiGLU times each row's routing weight.
    #[arg(long)]
    pub routed: bool,
    /// The SwiGLU output quantised to e4m3 with 1x128 scales.
    #[arg(long)]
    pub quantize: bool,
}

impl Fp8GroupedArgs {
    /// The one problem the flags name (`default_counts` when --counts is absent).
    pub fn problem(&self, default_counts: Option<Vec<usize>>) -> Result<Option<Fp8MoeProblem>> {
        let counts = match (&self.counts, default_counts) {
            (Some(c), _) => parse_counts(c)?,
            (None, Some(d)) => d,
            (None, None) => return Ok(None),
        };
        if (self.routed || self.quantize) && !self.swiglu {
            return Err(Error::invalid(
                "--routed and --quantize are options of the SwiGLU; add --swiglu",
            ));
        }
        let p = if self.masked {
            let max_rows = self
                .max_rows
                .unwrap_or_else(|| counts.iter().copied().max().unwrap_or(0));
            Fp8MoeProblem::masked(&counts, max_rows, self.n, self.k)
        } else {
            Fp8MoeProblem::contiguous(&counts, self.n, self.k)
        };
        let p = if self.swiglu {
            p.with_swiglu(self.routed, self.quantize)
        } else {
            p
        };
        p.validate()?;
        Ok(Some(p))
    }
}

/// Runs the suite (or the one --counts case); exit 7 if any check fails.
pub fn verify(env: &Env, a: &Fp8GroupedArgs, quick: bool) -> Result<ExitCode> {
    let cases: Vec<Fp8MoeCase> = match a.problem(None)? {
        Some(p) => vec![Fp8MoeCase {
            graph: p.layout().is_masked(),
            p,
        }],
        None => suite(quick),
    };
    let ctx = env.context()?;
    let landing = Landing::begin(env, &ctx, None, None)?;
    let mut outcomes: Vec<Outcome> = Vec::new();
    for case in &cases {
        let got = verify_case(&ctx, case)?;
        for o in &got {
            landing.say(|| format!("{} {}: {}", o.check, o.label, o.message));
        }
        outcomes.extend(got);
    }
    let failed = failures(&outcomes);
    const BEFORE: Column = ("before rounding", BEYOND_ROUNDING.1);
    let columns = [CHECK, CASE, REL_ERR, BEFORE, ROWS, VERDICT];
    print_outcomes(env, Some(&ctx.info), &outcomes, &columns, || {
        format!(
            "{} checks on {}, {failed} failed",
            outcomes.len(),
            ctx.info.name
        )
    });
    Ok(verified(failed > 0))
}

/// Times the problem the flags name (with `vendor`, beside cuBLASLt's per-expert loop).
pub fn bench(env: &Env, a: &Fp8GroupedArgs, opt: &BenchOptions, vendor: bool) -> Result<ExitCode> {
    let Some(p) = a.problem(Some(vec![a.rows; a.groups]))? else {
        return Err(Error::invalid("give --counts or --groups and --rows"));
    };
    let ctx = env.context()?;
    let t = bench_fp8_moe(&ctx, &p, opt, vendor)?;
    if env.json {
        env.print_json(&json!({ "device": ctx.info, "timings": t }));
    } else {
        print!("{}", bench_text(&t, &ctx.info.name));
    }
    Ok(ExitCode::SUCCESS)
}

/// `kiln fp8 bench --grouped`'s table (without --json): the timings (kiln's, then cuBLASLt's
/// per-expert loop where it ran), the device under it, and why the loop did not run if so.
pub(super) fn bench_text(t: &[Row], device: &str) -> String {
    const TBPS: Col = ("TB/s", |t| t.fixed("tbps", 2));
    const OF_COPY: Col = ("of copy", |t| {
        let (tbps, c) = (
            t.num("tbps").unwrap_or(f64::NAN),
            t.num("copy_tbps").unwrap_or(f64::NAN),
        );
        format!("{:.0} % of {c:.2}", 100.0 * tbps / c)
    });
    const VS: Col = ("vs cuBLASLt loop", |t| t.ratio("vs_cublaslt_loop", 3));
    const DIFF: Col = ("diff vs loop", |t| {
        match t.num("rel_diff_vs_cublaslt_loop") {
            Some(d) => format!("{d:.1e}"),
            None => String::new(),
        }
    });
    let columns = [
        VERSION, PROBLEM, MEDIAN_MS, MIN, MAX, TFLOPS, TBPS, OF_COPY, VS, DIFF,
    ];
    let mut s = bench_table::text(&columns, t, &format!("on {device}"));
    let note = t.first().map(|r| r.text("vendor_note")).unwrap_or_default();
    if !note.is_empty() {
        s.push_str(&format!("{note}\n"));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> Fp8GroupedArgs {
        Fp8GroupedArgs {
            grouped: true,
            counts: None,
            groups: 4,
            rows: 256,
            masked: false,
            max_rows: None,
            n: 4096,
            k: 7168,
            swiglu: false,
            routed: false,
            quantize: false,
        }
    }

    #[test]
    fn flags_name_one_problem() {
        let p = args().problem(Some(vec![256; 4])).unwrap().unwrap();
        assert_eq!(p.routed_rows(), 1024);
        assert!(args().problem(None).unwrap().is_none());
        let m = Fp8GroupedArgs {
            masked: true,
            counts: Some("3,256,0".into()),
            ..args()
        };
        let p = m.problem(None).unwrap().unwrap();
        assert_eq!((p.x_rows(), p.routed_rows()), (768, 259));
        let bad = Fp8GroupedArgs {
            quantize: true,
            ..args()
        };
        let e = bad.problem(Some(vec![1])).unwrap_err();
        assert!(e.to_string().contains("--swiglu"), "{e}");
        let odd = Fp8GroupedArgs { k: 100, ..args() };
        let e = odd.problem(Some(vec![1])).unwrap_err();
        assert!(e.to_string().contains("K = 100"), "{e}");
    }
}
