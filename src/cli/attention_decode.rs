//! `kiln attn verify|bench --decode`: decode over a paged KV cache against the float64 reference
//! (one problem or the suite), and timed as GB/s of the cache it reads beside the copy ceiling.

use std::process::ExitCode;

use clap::Args;
use kiln::error::{Error, Result};
use kiln::harness::attention::decode::{
    bad_table_specs, decode_suite, time_decode, verify_bad_tables, verify_decode, DecodeSpec,
};
use kiln::harness::bench::Row;
use kiln::harness::outcome::{Extra, Outcome};
use kiln::harness::peak;
use kiln::harness::verify::fresh_seed;
use kiln::report::Table;
use kiln::store::rows;
use serde_json::json;

use super::attention::{AttnBenchArgs, AttnProblemArgs, AttnVerifyArgs};
use super::attention_varlen::{LSE_ERROR, O_ERROR};
use super::env::{finish, record, refuse_given, Env};
use super::verdicts::{table, Column, Landing, PROBLEM};

/// The flags of a decode step over a paged cache (with --batch --heads --kv-heads --dim
/// --seqlen-q --causal --dtype of the attention problem).
#[derive(Debug, Args, Clone)]
pub struct DecodeFlags {
    /// Decode over a paged KV cache (flash-decoding) instead of the dense forward.
    #[arg(long)]
    pub decode: bool,
    /// Tokens per page: 16, 64 or 256.
    #[arg(long)]
    pub page_size: Option<usize>,
    /// Cached tokens per sequence (the longest, with --random-lengths).
    #[arg(long)]
    pub context: Option<usize>,
    /// Draw each sequence's context from seqlen_q..=context.
    #[arg(long)]
    pub random_lengths: bool,
    /// Append this many new K/V tokens per sequence before the step (verify only).
    #[arg(long)]
    pub append: Option<usize>,
    /// A dense cache per sequence, as transformers keeps it ([batch, kv heads, S, dim] memory
    /// read through its [batch, S, kv heads, dim] view), instead of pages: S = --context, every
    /// sequence attending to all of it, or with --random-lengths 40 spare rows and lengths.
    #[arg(long)]
    pub dense: bool,
    /// Left padding: each sequence's keys start at a seeded position (flash-attention's
    /// cache_leftpad), needs --random-lengths.
    #[arg(long)]
    pub left_pad: bool,
}

impl DecodeFlags {
    /// Each flag of one decode problem (but --decode) and whether it was given.
    fn flags(&self) -> [(&'static str, bool); 6] {
        [
            ("--page-size", self.page_size.is_some()),
            ("--context", self.context.is_some()),
            ("--random-lengths", self.random_lengths),
            ("--append", self.append.is_some()),
            ("--dense", self.dense),
            ("--left-pad", self.left_pad),
        ]
    }

    /// A decode flag without --decode: an error rather than a dense run that ignores it.
    pub fn refuse_without_decode(&self) -> Result<()> {
        refuse_given(&self.flags(), |flag| {
            format!("{flag} belongs to decode over a paged cache; add --decode")
        })
    }

    fn given(&self) -> bool {
        self.context.is_some()
    }

    /// The problem of the flags, with `defaults` (batch, heads, kv heads, dim, context).
    fn spec(
        &self,
        a: &AttnProblemArgs,
        defaults: (usize, usize, usize, usize, usize),
    ) -> Result<DecodeSpec> {
        let sh = &a.shape;
        if sh.seqlen.is_some() || sh.seqlen_kv.is_some() || sh.scale.is_some() {
            return Err(Error::invalid(
                "--decode takes --context (and --seqlen-q for the query tokens), not --seqlen, --seqlen-kv or --scale",
            ));
        }
        let (b, h, hkv, d, ctx) = defaults;
        let heads = sh.heads.unwrap_or(h);
        let spec = DecodeSpec {
            batch: sh.batch.unwrap_or(b),
            heads_q: heads,
            heads_kv: sh.kv_heads.unwrap_or(hkv.min(heads)),
            head_dim: sh.dim.unwrap_or(d),
            seqlen_q: sh.seqlen_q.unwrap_or(1),
            page_size: self.page_size.unwrap_or(16),
            context: self.context.unwrap_or(ctx),
            random_lengths: self.random_lengths,
            causal: sh.causal,
            dtype: a.dtype.parse()?,
            append: self.append.unwrap_or(0),
            dense: self.dense,
            left_pad: self.left_pad,
        };
        if self.left_pad && !self.random_lengths {
            return Err(Error::invalid(
                "--left-pad draws each sequence's first key below its length: add --random-lengths",
            ));
        }
        if self.dense && self.page_size.is_some() {
            return Err(Error::invalid(
                "--dense reads a cache per sequence, not pages: leave out --page-size",
            ));
        }
        if spec.context == 0 {
            return Err(Error::invalid(
                "--context 0: a sequence needs at least one cached token",
            ));
        }
        if spec.append > spec.context {
            return Err(Error::invalid(format!(
                "--append {} is more than --context {}: the context counts the appended tokens",
                spec.append, spec.context
            )));
        }
        spec.problem(0)?;
        Ok(spec)
    }
}

pub fn verify(env: &Env, a: &AttnVerifyArgs) -> Result<ExitCode> {
    let f = &a.decode;
    let specs = if f.given() {
        vec![f.spec(&a.problem, (4, 32, 8, 128, 0))?]
    } else {
        if f.flags().iter().any(|f| f.1) || a.problem.shape.batch.is_some() {
            return Err(Error::invalid(
                "these flags describe one decode problem, which needs its length: add --context, or leave them out to verify the suite",
            ));
        }
        decode_suite()
    };
    let ctx = env.context()?;
    let landing = Landing::begin(env, &ctx, Some("attn-decode-verify"), None)?;
    let seed = || a.varlen.seed.unwrap_or_else(fresh_seed);
    let bad = if f.given() {
        Vec::new()
    } else {
        bad_table_specs().to_vec()
    };
    let checks = specs.iter().map(|s| verify_decode(&ctx, s, seed()));
    let bad_checks = bad.iter().map(|s| verify_bad_tables(&ctx, s, seed()));
    let fail = |o: &Outcome| format!("FAIL {} (seed {}): {}", o.label, o.seed, o.message);
    let row = rows::decode_verify_row;
    let outcomes = landing.each(checks.chain(bad_checks), fail, Some(&row))?;
    landing.report(env, &outcomes, |outcomes| {
        let splits: Column = ("splits", |o| match o.extra {
            Extra::Decode { splits, .. } => splits.to_string(),
            _ => String::new(),
        });
        let columns = [
            PROBLEM,
            splits,
            O_ERROR,
            LSE_ERROR,
            ("verdict", |o| o.message.clone()),
        ];
        let passed = outcomes.iter().filter(|o| o.passed).count();
        format!(
            "{}{passed} of {} decode problems passed\n",
            table(&columns, outcomes).render(),
            outcomes.len()
        )
    })
}

pub fn bench(env: &Env, a: &AttnBenchArgs) -> Result<ExitCode> {
    let spec = a.decode.spec(&a.problem, (64, 32, 8, 128, 8192))?;
    if spec.append > 0 {
        return Err(Error::invalid(
            "--append is verified, not timed; leave it out of `attn bench`",
        ));
    }
    let ctx = env.context()?;
    let opt = a.options(env);
    let seed = a.varlen.seed.unwrap_or_else(fresh_seed);
    let run = env.begin("attn-decode-bench", Some(&ctx.info))?;
    let t = time_decode(&ctx, &spec, seed, &opt)?;
    // The copy ceiling of `kiln peak`, measured now on the same GPU (1 GiB each way).
    let copy = peak::copy_ceiling_tbps(&ctx)?;
    record(&run, rows::decode_bench_row(&t, copy))?;
    finish(&run, "ok")?;
    if env.json {
        env.print_json(&decode_json(&t, copy));
    } else {
        print!("{}", decode_text(&spec.label(), &ctx.info.name, &t, copy));
    }
    Ok(ExitCode::SUCCESS)
}

/// `attn bench --decode --json`: the timing, the copy ceiling (TB/s) and the share of it reached.
pub(super) fn decode_json(t: &Row, copy: f64) -> serde_json::Value {
    json!({"timing": t, "copy_tbps": copy, "of_copy": t.number("gbps") / (copy * 1e3)})
}

/// `attn bench --decode` without --json: what ran on `device` (the problem's `label`), then the
/// times beside the copy ceiling (`copy`, TB/s).
pub(super) fn decode_text(label: &str, device: &str, t: &Row, copy: f64) -> String {
    let head = format!(
        "{label} on {device}: {} splits, {:.1} MB of K/V read\n",
        t.text("splits"),
        t.number("cache_bytes") / 1e6
    );
    let columns = [
        "median us",
        "min us",
        "max us",
        "GB/s",
        "copy GB/s",
        "of copy",
    ];
    let mut tb = Table::new(&columns);
    let gbps = t.number("gbps");
    tb.row(&[
        t.fixed("median_us", 1),
        t.fixed("min_us", 1),
        t.fixed("max_us", 1),
        format!("{gbps:.0}"),
        format!("{:.0}", copy * 1e3),
        format!("{:.1}%", 100.0 * (gbps / (copy * 1e3))),
    ]);
    head + &tb.render()
}
