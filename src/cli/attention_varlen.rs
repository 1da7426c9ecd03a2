//! `kiln attn verify|bench --varlen`: the packed forward against the float64 reference (given or
//! seeded lengths, else the boundary suite), and timed beside one dense call of the same work.

use std::process::ExitCode;

use clap::Args;
use kiln::error::{Error, Result};
use kiln::harness::attention::bench::{time_attention, AttnBuffers};
use kiln::harness::attention::varlen::{
    blank, dense_equal_batch, dense_equivalent, seeded_lengths, varlen_flops, varlen_label,
    varlen_suite, verify_varlen, VarlenBounds, VarlenBuffers,
};
use kiln::harness::attention::varlen_bad::verify_bad_offsets;
use kiln::harness::bench::{Bench, Row};
use kiln::harness::outcome::Outcome;
use kiln::harness::verify::{fresh_seed, or_failed};
use kiln::ops::attention::fa3_wgmma::Fa3Wgmma;
use kiln::ops::attention::{AttentionProblem, VarlenProblem, Window};
use kiln::report::Table;
use serde_json::json;

use super::attention::{AttnBenchArgs, AttnVerifyArgs};
use super::env::Env;
use super::verdicts::{fail_line, table, Column, Landing, PROBLEM};

/// The packed batch of `kiln attn verify|bench`: its lengths, given or drawn.
#[derive(Debug, Args, Clone, Default)]
pub struct VarlenArgs {
    /// Packed sequences of these lengths, a comma list; `Q:K` for a query length that differs
    /// from the key length (e.g. 1,63,4097,100:300).
    #[arg(long)]
    pub varlen: Option<String>,
    /// Packed sequences of seeded lengths: this many, drawn from --varlen-range.
    #[arg(long)]
    pub varlen_count: Option<usize>,
    /// LO:HI, the range --varlen-count draws lengths from (default 128:8192).
    #[arg(long)]
    pub varlen_range: Option<String>,
    /// Seed of the drawn lengths and of the inputs, packed or decode (default: fresh).
    #[arg(long)]
    pub seed: Option<u64>,
}

impl VarlenArgs {
    /// Whether a packed batch was asked for.
    pub fn given(&self) -> bool {
        self.varlen.is_some() || self.varlen_count.is_some()
    }

    /// The (query, key) lengths asked for; `None` with neither --varlen nor --varlen-count.
    pub fn lengths(&self, seed: u64) -> Result<Option<Vec<(usize, usize)>>> {
        if let (Some(_), Some(_)) = (&self.varlen, self.varlen_count) {
            return Err(Error::invalid(
                "--varlen gives the lengths and --varlen-count draws them: pass one",
            ));
        }
        if let Some(list) = &self.varlen {
            return parse_lengths(list).map(Some);
        }
        let Some(n) = self.varlen_count else {
            if self.varlen_range.is_some() {
                return Err(Error::invalid(
                    "--varlen-range needs --varlen-count (how many lengths to draw)",
                ));
            }
            return Ok(None);
        };
        let (lo, hi) = parse_range(self.varlen_range.as_deref().unwrap_or("128:8192"))?;
        if n == 0 {
            return Err(Error::invalid(
                "--varlen-count 0: draw at least one sequence",
            ));
        }
        Ok(Some(seeded_lengths(n, lo, hi, seed)))
    }
}

fn number(s: &str, what: &str) -> Result<usize> {
    s.trim()
        .parse()
        .map_err(|_| Error::invalid(format!("{what} `{s}` is not a whole number")))
}

/// `1,63,100:300` to [(1, 1), (63, 63), (100, 300)].
pub fn parse_lengths(list: &str) -> Result<Vec<(usize, usize)>> {
    list.split(',')
        .map(|item| match item.split_once(':') {
            Some((q, k)) => Ok((number(q, "--varlen length")?, number(k, "--varlen length")?)),
            None => number(item, "--varlen length").map(|l| (l, l)),
        })
        .collect()
}

/// `LO:HI` with 1 <= LO <= HI.
pub fn parse_range(s: &str) -> Result<(usize, usize)> {
    let (lo, hi) = s
        .split_once(':')
        .ok_or_else(|| Error::invalid(format!("--varlen-range `{s}` is not LO:HI")))?;
    let (lo, hi) = (
        number(lo, "--varlen-range bound")?,
        number(hi, "--varlen-range bound")?,
    );
    if lo == 0 || lo > hi {
        return Err(Error::invalid(format!(
            "--varlen-range {lo}:{hi} must have 1 <= LO <= HI"
        )));
    }
    Ok((lo, hi))
}

/// `L,R` (each -1 or a key count) to a window.
pub fn parse_window(s: &str) -> std::result::Result<Window, String> {
    let (l, r) = s
        .split_once(',')
        .ok_or_else(|| format!("`{s}` is not LEFT,RIGHT (e.g. 256,0; -1 for no bound)"))?;
    let side = |v: &str| {
        v.trim()
            .parse::<i64>()
            .map_err(|_| format!("`{v}` is not a number (-1 for no bound)"))
    };
    Ok(Window {
        left: side(l)?,
        right: side(r)?,
    })
}

/// The packed problem from the verify/bench shape flags and `lengths`.
pub(super) fn problem(
    sh: &super::attention::AttnShapeArgs,
    dtype: &str,
    lengths: &[(usize, usize)],
) -> Result<VarlenProblem> {
    let (heads, dim) = (sh.heads.unwrap_or(16), sh.dim.unwrap_or(128));
    let p = VarlenProblem {
        heads_kv: sh.kv_heads.unwrap_or(heads),
        causal: sh.causal,
        window: sh.window.unwrap_or(Window::UNBOUNDED),
        scale: sh.scale.unwrap_or(1.0 / (dim as f32).sqrt()),
        dtype: dtype.parse()?,
        ..VarlenProblem::new(lengths, heads, dim)
    };
    p.validate()?;
    Ok(p)
}

/// Every problem twice, sized by its longest sequences (the host-checked path) and by looser
/// bounds (the path without host copies, the kernel alone checking the offsets); with the suite,
/// then the GPU's check of bad offsets.
pub fn verify(env: &Env, a: &AttnVerifyArgs) -> Result<ExitCode> {
    let seed = a.varlen.seed.unwrap_or_else(fresh_seed);
    let (problems, suite) = match a.varlen.lengths(seed)? {
        Some(lengths) => (
            vec![problem(&a.problem.shape, &a.problem.dtype, &lengths)?],
            false,
        ),
        None => (varlen_suite(), true),
    };
    let ctx = env.context()?;
    let landing = Landing::begin(env, &ctx, None, None)?;
    let runs = problems
        .iter()
        .flat_map(|p| [(p, VarlenBounds::Exact), (p, VarlenBounds::Loose)]);
    let checks = runs.enumerate().map(|(i, (p, bounds))| {
        let checked = verify_varlen(&ctx, p, seed.wrapping_add(i as u64 / 2), bounds);
        or_failed(checked, |message| Outcome {
            message,
            ..blank(varlen_label(p), seed, 0.0)
        })
    });
    // After the suite, the GPU's check of bad offsets (run when reached).
    let bad =
        std::iter::once(suite)
            .filter(|s| *s)
            .flat_map(|_| match verify_bad_offsets(&ctx, seed) {
                Ok(v) => v.into_iter().map(Ok).collect(),
                Err(e) => vec![Err(e)],
            });
    let outcomes = landing.each(checks.chain(bad), fail_line, None)?;
    landing.report(env, &outcomes, |outcomes| {
        table(&[PROBLEM, RESULT, O_ERROR, LSE_ERROR, SEED], outcomes).render()
    })
}

/// "ok", "FAIL: " and the message, or "skipped: " and the reason (the packed checks' tables).
pub(super) const RESULT: Column = ("result", |o| match (&o.skipped, o.passed) {
    (Some(r), _) => format!("skipped: {r}"),
    (None, true) => "ok".into(),
    (None, false) => format!("FAIL: {}", o.message),
});
pub(super) const SEED: Column = ("seed", |o| o.seed.to_string());

/// The O error with its bound, and the largest LSE error (decode and the packed forward).
pub(super) const O_ERROR: Column = ("O rel error", |o| {
    format!("{:.2e} (bound {:.0e})", o.rel_error, o.bound)
});
pub(super) const LSE_ERROR: Column = ("LSE error", |o| format!("{:.2e}", o.lse_max_error()));

pub fn bench(env: &Env, a: &AttnBenchArgs) -> Result<ExitCode> {
    let (p, seed) = bench_problem(a)?;
    let ctx = env.context()?;
    let run = Bench::new(&ctx, &a.options(env))?;
    let (_, bufs) = VarlenBuffers::random(&p, seed)?;
    let (ops, shape) = (bufs.operands(), p.shape());
    let packed = run.one(|| Fa3Wgmma.launch_varlen(&ctx, &shape, &ops))?;
    let (median, min) = (packed.median_ms, packed.min_ms);
    let tflops = packed.rate(varlen_flops(&p), 1e12);
    // fa3_wgmma's dense forward on `d`, beside the packed call.
    let dense_call = |d: &AttentionProblem| {
        let fa3 = env
            .registry
            .select_attention(d, &ctx.info, Some("fa3_wgmma"))?;
        let bufs = AttnBuffers::random(&ctx, d, seed)?;
        time_attention(&ctx, fa3, d, &bufs, &run.flusher, &run.opt)
    };
    // The same work in one dense call: its TFLOPS are what the packed call's are measured against.
    let dense = dense_equivalent(&p);
    let dt = dense_call(&dense)?;
    let ratio = tflops / dt.number("tflops");
    // The same batch at one length: what raggedness alone costs (the packed call against it).
    let even = dense_equal_batch(&p);
    let et = dense_call(&even)?;
    if env.json {
        env.print_json(&json!({
            "problem": varlen_label(&p),
            "flops": varlen_flops(&p),
            "median_ms": median,
            "min_ms": min,
            "tflops": tflops,
            "dense": dt,
            "vs_dense": ratio,
            "equal_lengths": et,
            "vs_equal_lengths": tflops / et.number("tflops"),
            "seed": seed,
        }));
    } else {
        println!(
            "{} ({:.3e} FLOPs over real pairs, seed {seed}) on {}",
            varlen_label(&p),
            varlen_flops(&p),
            ctx.info.name
        );
        let rows = [
            ("fa3_wgmma packed".to_string(), median, min, tflops),
            timed(format!("fa3_wgmma dense {}", dense.label()), &dt),
            timed(format!("fa3_wgmma equal lengths {}", even.label()), &et),
        ];
        print!("{}", calls_table(&rows, dt.number("tflops")));
        println!(
            "packed vs equal lengths (the cost of raggedness alone): {:.3}x",
            tflops / et.number("tflops")
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The packed problem a bench times (`--varlen` or `--varlen-count`, the packed forward's or
/// backward's) and the seed of its lengths and inputs.
pub(super) fn bench_problem(a: &AttnBenchArgs) -> Result<(VarlenProblem, u64)> {
    let seed = a.varlen.seed.unwrap_or_else(fresh_seed);
    let lengths = a
        .varlen
        .lengths(seed)?
        .ok_or_else(|| Error::invalid("--varlen-range needs --varlen-count"))?;
    Ok((problem(&a.problem.shape, &a.problem.dtype, &lengths)?, seed))
}

/// A call of a packed bench's table: its name, median and minimum ms, TFLOPS.
pub(super) type Call = (String, f64, f64, f64);

/// The call `name` timed as `row`.
pub(super) fn timed(name: String, row: &Row) -> Call {
    let n = |k| row.number(k);
    (name, n("median_ms"), n("min_ms"), n("tflops"))
}

/// A packed bench's table: a row per call, each with its speed over the dense call's TFLOPS.
pub(super) fn calls_table(calls: &[Call], dense_tflops: f64) -> String {
    let mut t = Table::new(&["call", "median ms", "min ms", "TFLOPS", "vs dense"]);
    for (call, median, min, tflops) in calls {
        t.row(&[
            call.clone(),
            format!("{median:.3}"),
            format!("{min:.3}"),
            format!("{tflops:.1}"),
            format!("{:.3}x", tflops / dense_tflops),
        ]);
    }
    t.render()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_packed_benches_table_has_a_row_per_call_against_the_dense_one() {
        let calls = [
            ("fa3_wgmma packed".to_string(), 1.25, 1.2, 300.0),
            ("fa3_wgmma dense 1x4x1000x1000".to_string(), 2.0, 1.9, 400.0),
        ];
        assert_eq!(
            calls_table(&calls, 400.0),
            "| call                          | median ms | min ms | TFLOPS | vs dense |\n\
             |-------------------------------|-----------|--------|--------|----------|\n\
             | fa3_wgmma packed              | 1.250     | 1.200  | 300.0  | 0.750x   |\n\
             | fa3_wgmma dense 1x4x1000x1000 | 2.000     | 1.900  | 400.0  | 1.000x   |\n"
        );
    }

    #[test]
    fn lengths_ranges_and_windows_parse_or_say_why_not() {
        assert_eq!(
            parse_lengths("1,63,100:300").unwrap(),
            vec![(1, 1), (63, 63), (100, 300)]
        );
        assert!(parse_lengths("1,x")
            .unwrap_err()
            .to_string()
            .contains("`x`"));
        assert_eq!(parse_range("128:8192").unwrap(), (128, 8192));
        assert!(parse_range("9:3").is_err() && parse_range("0:3").is_err());
        assert_eq!(parse_window("-1,0").unwrap(), Window { left: -1, right: 0 });
        assert!(parse_window("5").unwrap_err().contains("LEFT,RIGHT"));
        let both = VarlenArgs {
            varlen: Some("3".into()),
            varlen_count: Some(2),
            ..VarlenArgs::default()
        };
        assert!(both.lengths(1).is_err());
        let drawn = VarlenArgs {
            varlen_count: Some(4),
            varlen_range: Some("10:20".into()),
            ..VarlenArgs::default()
        };
        assert_eq!(drawn.lengths(3).unwrap().unwrap().len(), 4);
    }
}
