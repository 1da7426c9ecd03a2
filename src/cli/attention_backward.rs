//! `kiln attn verify --backward` and `kiln attn bench --backward`: the attention backward's
//! versions against the float64 gradients on its boundary suite, and timed on one shape.

use std::process::ExitCode;

use clap::Args;
use kiln::error::{Error, Result};
use kiln::harness::attention::{
    backward_bench::{BackwardBuffers, BackwardTiming},
    backward_shapes::backward_suite,
    backward_verify::{blank, grad_errors, reproducible, verify_backward},
};
use kiln::harness::bench::{sample_launches, L2Flusher};
use kiln::harness::outcome::Outcome;
use kiln::harness::shapes::Suite;
use kiln::harness::verify::{fresh_seed, or_failed};
use kiln::ops::attention_backward::BackwardProblem;
use kiln::report::Table;
use kiln::store::rows;

use super::attention::{only_dim, time_versions, versions_to_time, AttnBenchArgs, AttnVerifyArgs};
use super::env::{named, Env};
use super::verdicts::{by_version, fail_line, largest, Landing, Summary};

/// The backward's flags of `kiln attn verify|bench`.
#[derive(Debug, Args, Clone)]
pub struct BackwardFlags {
    /// The backward (dQ, dK, dV) instead of the forward; --version names backward versions.
    #[arg(long)]
    pub backward: bool,
    /// With --backward: dQ summed in a fixed order, so two runs give the same bits (`verify`
    /// also runs twice and compares). The suite alternates it by itself.
    #[arg(long, requires = "backward")]
    pub deterministic: bool,
}

impl BackwardFlags {
    /// The forward takes neither flag (clap already ties --deterministic to --backward).
    pub fn forward_only(&self) -> Result<()> {
        if self.deterministic {
            return Err(Error::invalid(
                "--deterministic applies to the backward; add --backward",
            ));
        }
        Ok(())
    }
}

fn problems(a: &AttnVerifyArgs) -> Result<Vec<BackwardProblem>> {
    if a.problem.given() {
        let p = a.problem.problem((1, 1, 1, 128))?;
        return Ok(vec![BackwardProblem::new(p, a.backward.deterministic)]);
    }
    a.problem.shape.suite_takes_only_dim()?;
    if a.backward.deterministic {
        return Err(Error::invalid(
            "--deterministic describes one problem; the suite alternates it by itself: add --seqlen, or leave --deterministic out",
        ));
    }
    let mut s = backward_suite();
    // quick: the suite without its 4097-long problems (the float64 reference's minutes).
    if a.suite.parse::<Suite>()? == Suite::Quick {
        s.retain(|p| p.attn.seqlen_q < 4096);
    }
    only_dim("backward", s, a.problem.shape.dim, |p| p.attn.head_dim)
}

pub fn verify(env: &Env, a: &AttnVerifyArgs) -> Result<ExitCode> {
    let problems = problems(a)?;
    let r = &env.registry;
    let ks = named(r.attention_backward(), &a.versions, |n| {
        r.attention_backward_version(n)
    })?;
    let ctx = env.context()?;
    let landing = Landing::begin(env, &ctx, Some("attn-verify-backward"), None)?;
    let checks = ks
        .iter()
        .flat_map(|k| problems.iter().map(move |p| (*k, p)));
    let checks = checks.map(|(k, p)| {
        let forward = env.registry.select_attention(&p.attn, &ctx.info, None)?;
        or_failed(verify_backward(&ctx, forward, k, p), |message| Outcome {
            message,
            ..blank(k.name(), p, 0)
        })
    });
    let row = rows::attention_backward_verify_row;
    let outcomes = landing.each(checks, fail_line, Some(&row))?;
    let names: Vec<&str> = ks.iter().map(|k| k.name()).collect();
    landing.report(env, &outcomes, |o| table(&names, o).render())
}

/// One row per version: passed, failed, skipped, the largest relative error of each gradient
/// (bounds: `backward_verify::grad_bound`), deterministic problems that reproduced their bits,
/// and the first failure.
fn table(names: &[&str], outcomes: &[Outcome]) -> Table {
    let grad =
        |i: usize| move |ran: &[&Outcome]| format!("{:.2e}", largest(ran, |o| grad_errors(o)[i]));
    let (dq, dk, dv) = (grad(0), grad(1), grad(2));
    let det = |ran: &[&Outcome]| {
        let det: Vec<bool> = ran.iter().filter_map(|o| reproducible(o)).collect();
        let equal = det.iter().filter(|d| **d).count();
        format!("{equal} of {} bitwise equal", det.len())
    };
    let extra: [Summary<Outcome>; 4] = [
        ("max dQ error", &dq),
        ("max dK error", &dk),
        ("max dV error", &dv),
        ("deterministic", &det),
    ];
    by_version(names, outcomes, &extra)
}

pub fn bench(env: &Env, a: &AttnBenchArgs) -> Result<ExitCode> {
    let p = BackwardProblem::new(
        a.problem.problem((2, 16, 8192, 128))?,
        a.backward.deterministic,
    );
    let ctx = env.context()?;
    let r = &env.registry;
    let ks = versions_to_time(
        r.attention_backward(),
        &a.versions,
        |k| k.supports(&p, &ctx.info).is_ok(),
        |n| r.select_attention_backward(&p, &ctx.info, Some(n)),
    )?;
    if ks.is_empty() {
        r.select_attention_backward(&p, &ctx.info, None)?;
    }
    let opt = a.options(env);
    let flusher_bytes = kiln::harness::memory::flusher_bytes(&ctx.info);
    ctx.ensure_fits(
        &format!("the problem {}", p.label()),
        p.device_bytes() + flusher_bytes,
    )?;
    let forward = r.select_attention(&p.attn, &ctx.info, None)?;
    let bufs = BackwardBuffers::new(&ctx, forward, &p, fresh_seed())?;
    let flusher = L2Flusher::new(&ctx)?;
    let header = || {
        format!(
            "backward of {} ({:.3e} FLOPs: 2.5x the forward's over unmasked pairs, as FlashAttention counts) on {}; O and LSE from {}",
            p.label(),
            p.flops(),
            ctx.info.name,
            forward.name()
        )
    };
    time_versions(
        env,
        &ctx,
        "attn-bench-backward",
        &ks,
        |k| {
            let launch = || k.launch(&ctx, &p, &bufs.operands());
            let times = sample_launches(&ctx, &flusher, &opt, launch)?;
            Ok(BackwardTiming::of(k.name(), p, p.flops(), times))
        },
        rows::attention_backward_bench_row,
        header,
        None,
    )
}
