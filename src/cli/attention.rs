//! `kiln attn verify` and `kiln attn bench`: the attention forward's versions against the float64
//! reference on the boundary suite, and timed on one shape (TFLOPS over unmasked pairs).

use std::process::ExitCode;

use clap::{Args, Subcommand};
use kiln::error::{Error, Result};
use kiln::harness::attention::{
    bench::{time_attention, AttnBuffers},
    shapes::{attention_suite, strided_suite},
    verify::{blank, verify_attention, LSE_BOUND},
};
use kiln::harness::bench::{L2Flusher, Row};
use kiln::harness::memory;
use kiln::harness::outcome::Outcome;
use kiln::harness::verify::{fresh_seed, or_failed};
use kiln::ops::attention::{AttentionProblem, AttnLayout};
use kiln::ops::gemm::DType;
use kiln::store::rows;
use serde_json::json;

use super::bench_table::{self, Col};
use super::env::{bench_options, finish, named, record, refuse_given, Env};
use super::verdicts::{by_version, fail_line, largest, table, Landing, Summary};

#[derive(Debug, Args)]
pub struct AttnCliArgs {
    #[command(subcommand)]
    pub action: AttnAction,
}

#[derive(Debug, Subcommand)]
pub enum AttnAction {
    /// Verify versions against the float64 reference on a shape suite or one problem.
    Verify(AttnVerifyArgs),
    /// Time versions on one problem (L2 flushed, median of CUDA events, TFLOPS).
    Bench(AttnBenchArgs),
}

/// The flags that shape an attention problem, shared by `kiln attn verify|bench` and
/// `kiln tune attn` (which takes --dtype and --layout from its GEMM flags).
#[derive(Debug, Args, Clone)]
pub struct AttnShapeArgs {
    #[arg(long)]
    pub batch: Option<usize>,
    /// Query heads.
    #[arg(long)]
    pub heads: Option<usize>,
    /// Key/value heads (default: the query heads); must divide them.
    #[arg(long, visible_alias = "heads-kv")]
    pub kv_heads: Option<usize>,
    /// Query and key length (both).
    #[arg(long)]
    pub seqlen: Option<usize>,
    /// Query length (overrides --seqlen).
    #[arg(long)]
    pub seqlen_q: Option<usize>,
    /// Key/value length (overrides --seqlen).
    #[arg(long)]
    pub seqlen_kv: Option<usize>,
    /// Head dim: 64, 128 or 256 (`attn verify` without --seqlen: only that head dim of the suite).
    #[arg(long)]
    pub dim: Option<usize>,
    /// Causal mask, aligned bottom-right when the lengths differ.
    #[arg(long)]
    pub causal: bool,
    /// Softmax scale (default 1/sqrt(dim)).
    #[arg(long)]
    pub scale: Option<f32>,
    /// Sliding window LEFT,RIGHT (flash-attention's window_size; -1 for no bound), e.g. 256,0.
    #[arg(long, allow_hyphen_values = true, value_parser = super::attention_varlen::parse_window)]
    pub window: Option<kiln::ops::attention::Window>,
}

impl AttnShapeArgs {
    /// Whether a sequence length was given (else `attn verify` runs its suite).
    pub fn given(&self) -> bool {
        self.seqlen.is_some() || self.seqlen_q.is_some() || self.seqlen_kv.is_some()
    }

    /// Refuses the flags that shape one problem when a suite runs: the suite takes only --dim,
    /// and any other would be silently ignored.
    pub fn suite_takes_only_dim(&self) -> Result<()> {
        let shaping = [
            ("--batch", self.batch.is_some()),
            ("--heads", self.heads.is_some()),
            ("--kv-heads", self.kv_heads.is_some()),
            ("--causal", self.causal),
            ("--scale", self.scale.is_some()),
            ("--window", self.window.is_some()),
        ];
        refuse_given(&shaping, |flag| {
            format!(
                "{flag} describes one problem, which needs its length: add --seqlen (or --seqlen-q and --seqlen-kv), or leave {flag} out to verify the suite"
            )
        })
    }

    /// The validated problem in `dtype` and `layout`, with `defaults` (batch, heads, seqlen,
    /// dim) for what is not given.
    pub fn problem(
        &self,
        defaults: (usize, usize, usize, usize),
        dtype: DType,
        layout: AttnLayout,
    ) -> Result<AttentionProblem> {
        let (b, h, s, d) = defaults;
        let heads = self.heads.unwrap_or(h);
        let dim = self.dim.unwrap_or(d);
        let seq = self.seqlen.unwrap_or(s);
        let p = AttentionProblem {
            heads_kv: self.kv_heads.unwrap_or(heads),
            seqlen_q: self.seqlen_q.unwrap_or(seq),
            seqlen_kv: self.seqlen_kv.unwrap_or(seq),
            dtype,
            layout,
            causal: self.causal,
            scale: self.scale.unwrap_or(1.0 / (dim as f32).sqrt()),
            window: self.window.unwrap_or_default(),
            ..AttentionProblem::new(self.batch.unwrap_or(b), heads, seq, dim)
        };
        if p.dtype == DType::F32 {
            return Err(Error::invalid(
                "--dtype f32 is not supported; attention inputs are bf16 or f16",
            ));
        }
        p.validate()?;
        Ok(p)
    }
}

/// An attention problem on the command line: its shape, dtype and layout.
#[derive(Debug, Args, Clone)]
pub struct AttnProblemArgs {
    #[command(flatten)]
    pub shape: AttnShapeArgs,
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// BSHD or BHSD.
    #[arg(long, default_value = "BSHD")]
    pub layout: String,
}

impl AttnProblemArgs {
    pub(super) fn given(&self) -> bool {
        self.shape.given()
    }

    /// The validated problem, with `defaults` (batch, heads, seqlen, dim) for what is not given.
    pub(super) fn problem(
        &self,
        defaults: (usize, usize, usize, usize),
    ) -> Result<AttentionProblem> {
        self.shape.problem(
            defaults,
            self.dtype.parse()?,
            self.layout.parse::<AttnLayout>()?,
        )
    }
}

#[derive(Debug, Args)]
pub struct AttnVerifyArgs {
    #[command(flatten)]
    pub problem: AttnProblemArgs,
    /// Versions to verify (default: all).
    #[arg(long = "version")]
    pub versions: Vec<String>,
    /// Shape suite when no --seqlen is given: quick or full.
    #[arg(long, default_value = "full")]
    pub suite: String,
    /// A packed batch (fa3_wgmma's variable-length forward) instead of a dense problem.
    #[command(flatten)]
    pub varlen: super::attention_varlen::VarlenArgs,
    /// The packed boundary suite (fa3_wgmma's variable-length forward; with --backward, the packed
    /// backward's).
    #[arg(long)]
    pub varlen_suite: bool,
    /// The strided suite: Q, K, V and O each with its own strides (a KV cache in BHSD beside
    /// BSHD queries, slices of a fused projection, mixed orders), as models hand them over.
    #[arg(long)]
    pub strided: bool,
    #[command(flatten)]
    pub backward: super::attention_backward::BackwardFlags,
    #[command(flatten)]
    pub decode: super::attention_decode::DecodeFlags,
}

#[derive(Debug, Args)]
pub struct AttnBenchArgs {
    #[command(flatten)]
    pub problem: AttnProblemArgs,
    /// Versions to time (default: every version that supports the problem).
    #[arg(long = "version")]
    pub versions: Vec<String>,
    #[command(flatten)]
    pub timing: super::args::TimingArgs,
    /// A packed batch (fa3_wgmma's variable-length forward), timed beside one dense call of the
    /// same work.
    #[command(flatten)]
    pub varlen: super::attention_varlen::VarlenArgs,
    #[command(flatten)]
    pub backward: super::attention_backward::BackwardFlags,
    #[command(flatten)]
    pub decode: super::attention_decode::DecodeFlags,
}

impl AttnBenchArgs {
    /// The timing options of the flags and the config file, at least one repetition.
    pub(super) fn options(&self, env: &Env) -> kiln::harness::bench::BenchOptions {
        let mut opt = bench_options(env, &self.timing);
        opt.reps = opt.reps.max(1);
        opt
    }
}

/// `suite` narrowed to head dim `dim` (`head_dim` of a problem), when one is given; a dim the
/// suite (`name`) does not hold is said.
pub(super) fn only_dim<T>(
    name: &str,
    mut suite: Vec<T>,
    dim: Option<usize>,
    head_dim: impl Fn(&T) -> usize,
) -> Result<Vec<T>> {
    if let Some(d) = dim {
        suite.retain(|p| head_dim(p) == d);
        if suite.is_empty() {
            return Err(Error::invalid(format!(
                "the {name} suite has no problem with head dim {d} (it covers 64, 128 and 256)"
            )));
        }
    }
    Ok(suite)
}

pub fn run(env: &Env, a: &AttnCliArgs) -> Result<ExitCode> {
    match &a.action {
        AttnAction::Verify(v) if v.backward.backward => super::attention_backward::verify(env, v),
        AttnAction::Bench(b) if b.backward.backward => super::attention_backward::bench(env, b),
        AttnAction::Verify(v) => {
            v.backward.forward_only()?;
            verify(env, v)
        }
        AttnAction::Bench(b) => {
            b.backward.forward_only()?;
            bench(env, b)
        }
    }
}

fn verify(env: &Env, a: &AttnVerifyArgs) -> Result<ExitCode> {
    if a.varlen.given() || a.varlen_suite {
        return super::attention_varlen::verify(env, a);
    }
    if a.decode.decode {
        return super::attention_decode::verify(env, a);
    }
    a.decode.refuse_without_decode()?;
    let problems = if a.strided {
        if a.problem.given() {
            return Err(Error::invalid(
                "--strided runs its own suite of strided problems; leave out the shape flags",
            ));
        }
        strided_suite()
    } else if a.problem.given() {
        vec![a.problem.problem((1, 1, 1, 128))?]
    } else {
        a.problem.shape.suite_takes_only_dim()?;
        // Without a sequence length, --dim narrows the suite to that head dim.
        let s = attention_suite(a.suite.parse()?);
        only_dim(&a.suite, s, a.problem.shape.dim, |p| p.head_dim)?
    };
    let r = &env.registry;
    let ks = named(r.attention(), &a.versions, |n| r.attention_version(n))?;
    let ctx = env.context()?;
    let landing = Landing::begin(env, &ctx, Some("attn-verify"), None)?;
    let checks = ks
        .iter()
        .flat_map(|k| problems.iter().map(move |p| (*k, p)));
    let checks = checks.map(|(k, p)| {
        or_failed(verify_attention(&ctx, k, p), |message| Outcome {
            message,
            bound: 0.0,
            ..blank(k.name(), p, 0)
        })
    });
    let outcomes = landing.each(checks, fail_line, Some(&rows::attention_verify_row))?;
    let names: Vec<&str> = ks.iter().map(|k| k.name()).collect();
    landing.report(env, &outcomes, |outcomes| {
        let o_err = |ran: &[&Outcome]| format!("{:.2e}", largest(ran, |o| o.rel_error));
        let lse = |ran: &[&Outcome]| {
            let e = largest(ran, |o| o.lse_max_error());
            format!("{e:.2e} (bound {LSE_BOUND:.0e})")
        };
        let extra: [Summary<Outcome>; 2] = [("max O rel error", &o_err), ("max LSE error", &lse)];
        by_version(&names, outcomes, &extra).render()
    })
}

fn bench(env: &Env, a: &AttnBenchArgs) -> Result<ExitCode> {
    if a.varlen.given() || a.varlen.varlen_range.is_some() {
        return super::attention_varlen::bench(env, a);
    }
    if a.decode.decode {
        return super::attention_decode::bench(env, a);
    }
    a.decode.refuse_without_decode()?;
    let p = a.problem.problem((2, 16, 8192, 128))?;
    let ctx = env.context()?;
    let r = &env.registry;
    let ks = versions_to_time(
        r.attention(),
        &a.versions,
        |k| k.supports(&p, &ctx.info).is_ok(),
        |n| r.select_attention(&p, &ctx.info, Some(n)),
    )?;
    let opt = a.options(env);
    memory::plan_attention_bench(&p, &ctx.info)
        .ensure(&ctx, &format!("the problem {}", p.label()))?;
    let bufs = AttnBuffers::random(&ctx, &p, fresh_seed())?;
    let flusher = L2Flusher::new(&ctx)?;
    let header = || {
        let (label, flops) = (p.label(), p.flops());
        format!(
            "{label} ({flops:.3e} FLOPs over unmasked pairs) on {}",
            ctx.info.name
        )
    };
    time_versions(
        env,
        &ctx,
        "attn-bench",
        &ks,
        |k| time_attention(&ctx, k, &p, &bufs, &flusher, &opt),
        |t| rows::attention_bench_row(&p, t),
        header,
        Some("composed"),
    )
}

/// The versions a bench times: each of `names` as `select` finds it for the problem, else every
/// one that `supports` it.
pub(super) fn versions_to_time<'a, K: ?Sized>(
    all: &'a [Box<K>],
    names: &[String],
    supports: impl Fn(&K) -> bool,
    select: impl Fn(&str) -> Result<&'a K>,
) -> Result<Vec<&'a K>> {
    if names.is_empty() {
        return Ok(all
            .iter()
            .map(|k| k.as_ref())
            .filter(|k| supports(k))
            .collect());
    }
    names.iter().map(|n| select(n)).collect()
}

/// Times each of `ks` (`time`), each timing's row recorded in a run of `kind` as it lands; then
/// the timings as JSON, or the `header` line and their table (with each one's speed-up over
/// `base`'s median, where a base is named).
#[allow(clippy::too_many_arguments)]
pub(super) fn time_versions<K: ?Sized>(
    env: &Env,
    ctx: &kiln::device::Context,
    kind: &str,
    ks: &[&K],
    time: impl Fn(&K) -> Result<Row>,
    row: impl Fn(&Row) -> kiln::store::ResultRow,
    header: impl FnOnce() -> String,
    base: Option<&str>,
) -> Result<ExitCode> {
    let run = env.begin(kind, Some(&ctx.info))?;
    let mut timings = Vec::new();
    for k in ks {
        let t = time(k)?;
        record(&run, row(&t))?;
        timings.push(t);
    }
    finish(&run, "ok")?;
    if env.json {
        env.print_json(&json!(timings));
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", versions_text(&header(), &timings, base));
    Ok(ExitCode::SUCCESS)
}

/// The text of [`time_versions`] without --json: the `header` line, then a row per timing (with
/// its speed-up over `base`'s median, where a base is named).
pub(super) fn versions_text(header: &str, timings: &[Row], base: Option<&str>) -> String {
    const MEDIAN: Col = ("median ms", |r| r.fixed("median_ms", 3));
    const MIN: Col = ("min ms", |r| r.fixed("min_ms", 3));
    const TFLOPS: Col = ("TFLOPS", |r| r.fixed("tflops", 1));
    let mut t = table(&[bench_table::VERSION, MEDIAN, MIN, TFLOPS], timings);
    if let Some(b) = base {
        let base_row = timings.iter().find(|t| t.text("version") == b);
        let vs = timings.iter().map(|r| match base_row {
            Some(v) => format!("{:.2}x", v.number("median_ms") / r.number("median_ms")),
            None => String::new(),
        });
        t.column(&format!("vs {b}"), vs);
    }
    format!("{header}\n{}", t.render())
}
/// The attention problem of a command that flattens the GEMM's flags (`problem`) beside the
/// attention shape's (`attn`): `kiln tune attn`, `kiln plan --op attn-backward` (`cmd` in the
/// errors), with a clear error for what is missing or given for the other op.
pub(super) fn attention_problem_of(
    problem: &super::args::ProblemArgs,
    attn: &AttnShapeArgs,
    cmd: &str,
) -> Result<AttentionProblem> {
    // The GEMM's --scale (its FP8 scales) and attention's (the softmax scale) are flattened
    // together: for attention it is the softmax scale.
    let mut shape: AttnShapeArgs = attn.clone();
    if let (None, Some(s)) = (shape.scale, &problem.scale) {
        shape.scale = Some(s.parse().map_err(|_| {
            Error::invalid(format!(
                "--scale {s}: {cmd} takes the softmax scale, a number"
            ))
        })?);
    }
    let t = &shape;
    if problem.shape.is_some() {
        return Err(Error::invalid(format!(
            "--shape is a GEMM shape; {cmd} takes --batch, --heads, --seqlen and --dim"
        )));
    }
    let seq = t.seqlen.or(t.seqlen_q.and(t.seqlen_kv));
    let missing: Vec<&str> = [
        ("--batch", t.batch.is_none()),
        ("--heads", t.heads.is_none()),
        (
            "--seqlen",
            seq.is_none() && (t.seqlen_q.is_none() || t.seqlen_kv.is_none()),
        ),
        ("--dim", t.dim.is_none()),
    ]
    .into_iter()
    .filter(|(_, m)| *m)
    .map(|(f, _)| f)
    .collect();
    if !missing.is_empty() {
        return Err(Error::invalid(format!(
            "{cmd} needs {} (e.g. --batch 4 --heads 16 --seqlen 4096 --dim 128)",
            missing.join(", ")
        )));
    }
    // --layout is shared with GEMM, whose default (RC) means "not given" here.
    let layout = match problem.layout.as_str() {
        "RC" => AttnLayout::Bshd,
        other => other.parse::<AttnLayout>().map_err(|_| {
            Error::invalid(format!(
                "--layout {other}: attention layouts are BSHD and BHSD"
            ))
        })?,
    };
    // Every dimension was given (checked above); the defaults only fill a length given as
    // --seqlen-q with --seqlen-kv.
    t.problem(
        (1, 1, seq.unwrap_or(1), 128),
        problem.dtype.parse()?,
        layout,
    )
}
