//! `kiln attn verify --backward` and `kiln attn bench --backward`: the attention backward's
//! versions against the float64 gradients on its boundary suite, and timed on one shape.

use std::process::ExitCode;

use clap::Args;
use kiln::device::Context;
use kiln::error::{Error, Result};
use kiln::harness::attention::{
    backward_bench::{time_backward, BackwardBuffers},
    backward_shapes::backward_suite,
    backward_varlen::{
        blank as varlen_blank, random_inputs, varlen_backward_flops, varlen_backward_label,
        varlen_backward_suite, verify_varlen_backward, VarlenBackwardBuffers,
    },
    backward_verify::{blank, grad_errors, reproducible, verify_backward},
    varlen::dense_equivalent,
};
use kiln::harness::bench::{
    kernel_row, sample_interleaved, Bench, BenchOptions, L2Flusher, Row, Summary as TimeSummary,
};
use kiln::harness::outcome::Outcome;
use kiln::harness::shapes::Suite;
use kiln::harness::verify::{fresh_seed, or_failed};
use kiln::ops::attention_backward::bwd_fa3_d256_ordered::{BwdFa3D256Ordered, TRACE_WORDS};
use kiln::ops::attention_backward::varlen::{
    dense_view, launch_varlen, supports_varlen, VARLEN_VERSION,
};
use kiln::ops::attention_backward::{AttentionBackwardKernel, BackwardProblem};
use kiln::report::Table;
use kiln::store::rows;

use super::attention::{
    only_dim, time_versions, versions_text, versions_to_time, AttnBenchArgs, AttnVerifyArgs,
};
use super::attention_varlen::{calls_table, timed, RESULT, SEED};
use super::env::{finish, named, record, Env};
use super::verdicts::{
    by_version, fail_line, largest, table as verdict_table, Column, Landing, Summary, PROBLEM,
};

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
    /// With --deterministic (`bench`): the non-deterministic default timed too, in interleaved
    /// rounds with the versions (one launch of each a round, after the warm-up), and each row's
    /// ratio to it: what the deterministic mode costs, at one clock.
    #[arg(long, requires = "deterministic")]
    pub vs_nondeterministic: bool,
    /// With --deterministic (`bench`, d256 ordered forms): after the timing, one more launch of
    /// each such version on a kernel that stamps its ordered adds (turn awaited and seen, issue,
    /// completion, bump), written to PREFIX-VERSION.bin (u32 records; scripts/det_trace.py
    /// reads them). A diagnostic: the stamped launch is not timed.
    #[arg(long, requires = "deterministic", value_name = "PREFIX")]
    pub det_trace: Option<String>,
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
    if a.backward.vs_nondeterministic || a.backward.det_trace.is_some() {
        return Err(Error::invalid(
            "--vs-nondeterministic and --det-trace go with the timing: use them with `attn bench`",
        ));
    }
    if a.varlen.given() || a.varlen_suite {
        return verify_varlen(env, a);
    }
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
    if a.varlen.given() || a.varlen.varlen_range.is_some() {
        return bench_varlen(env, a);
    }
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
        r.select_attention_backward_tuned(&p, &ctx.info, &ctx.tuned, None)?;
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
    let code = if a.backward.vs_nondeterministic {
        bench_vs_nondeterministic(env, &ctx, &ks, &p, &bufs, &flusher, &opt, header)?
    } else if ks.len() > 1 && opt.interleave {
        // several versions: one launch of each a round after the warm-up, so that their ratios
        // are read at one clock (the H200 at its power cap drifts ±5 % within a process)
        let ops = bufs.operands();
        let mut each: Vec<Box<dyn FnMut() -> Result<()> + '_>> = ks
            .iter()
            .map(|k| Box::new(|| k.launch(&ctx, &p, &ops)) as Box<dyn FnMut() -> Result<()>>)
            .collect();
        let names = ks.iter().map(|k| k.name().to_string()).collect();
        let base = ks[0].name().to_string();
        report_interleaved(
            env, &ctx, &p, &flusher, &opt, &mut each, names, base, header,
        )?
    } else {
        time_versions(
            env,
            &ctx,
            "attn-bench-backward",
            &ks,
            |k| time_backward(&ctx, k, &p, &bufs, &flusher, &opt),
            rows::attention_backward_bench_row,
            header,
            None,
        )?
    };
    if let Some(prefix) = &a.backward.det_trace {
        let ks = if ks.is_empty() {
            vec![r.select_attention_backward_tuned(&p, &ctx.info, &ctx.tuned, None)?]
        } else {
            ks
        };
        write_traces(&ctx, &ks, &p, &bufs, prefix)?;
    }
    Ok(code)
}

/// `--det-trace PREFIX`: one stamped launch of each d256 ordered form among `ks` (after the
/// timing, so at the clock it left), its records written to PREFIX-VERSION.bin; the others named
/// as having no stamps.
fn write_traces(
    ctx: &Context,
    ks: &[&dyn AttentionBackwardKernel],
    p: &BackwardProblem,
    bufs: &BackwardBuffers,
    prefix: &str,
) -> Result<()> {
    for k in ks {
        let Some(v) = BwdFa3D256Ordered::by_name(k.name()) else {
            eprintln!(
                "--det-trace: {} stamps nothing (only the d256 ordered forms do)",
                k.name()
            );
            continue;
        };
        let words = v.trace_launch(ctx, p, &bufs.operands())?;
        let path = format!("{prefix}-{}.bin", k.name());
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        std::fs::write(&path, bytes)
            .map_err(|e| Error::invalid(format!("--det-trace could not write {path}: {e}")))?;
        eprintln!(
            "--det-trace: {} records of {} stamped into {path}",
            words.len() / TRACE_WORDS,
            k.name()
        );
    }
    Ok(())
}

/// `--deterministic --vs-nondeterministic`: the non-deterministic default (the dispatcher's
/// choice for `p` without the mode, its row named "NAME (non-det)") and `ks` on the
/// deterministic `p`, timed in interleaved rounds on the same buffers, so that the ratio the
/// deterministic mode is held to (>= 0.85x the other) is read at one clock; separate processes at
/// the H200's power cap spread ±6 %.
#[allow(clippy::too_many_arguments)]
fn bench_vs_nondeterministic(
    env: &Env,
    ctx: &Context,
    ks: &[&dyn AttentionBackwardKernel],
    p: &BackwardProblem,
    bufs: &BackwardBuffers,
    flusher: &L2Flusher,
    opt: &BenchOptions,
    header: impl FnOnce() -> String,
) -> Result<ExitCode> {
    let free = BackwardProblem::new(p.attn, false);
    let kfree = env
        .registry
        .select_attention_backward_tuned(&free, &ctx.info, &ctx.tuned, None)?;
    let ks: Vec<&dyn AttentionBackwardKernel> = if ks.is_empty() {
        vec![env
            .registry
            .select_attention_backward_tuned(p, &ctx.info, &ctx.tuned, None)?]
    } else {
        ks.to_vec()
    };
    let ops = bufs.operands();
    let mut each: Vec<Box<dyn FnMut() -> Result<()> + '_>> =
        vec![Box::new(|| kfree.launch(ctx, &free, &ops))];
    each.extend(
        ks.iter()
            .map(|k| Box::new(|| k.launch(ctx, p, &ops)) as Box<dyn FnMut() -> Result<()>>),
    );
    let base_name = format!("{} (non-det)", kfree.name());
    let names = std::iter::once(base_name.clone())
        .chain(ks.iter().map(|k| k.name().to_string()))
        .collect();
    report_interleaved(
        env, ctx, p, flusher, opt, &mut each, names, base_name, header,
    )
}

/// `launches` (named `names`, in order) timed in interleaved rounds on `p`, recorded and printed
/// with each row's ratio to the row named `base`.
#[allow(clippy::too_many_arguments)]
fn report_interleaved(
    env: &Env,
    ctx: &Context,
    p: &BackwardProblem,
    flusher: &L2Flusher,
    opt: &BenchOptions,
    each: &mut [Box<dyn FnMut() -> Result<()> + '_>],
    names: Vec<String>,
    base_name: String,
    header: impl FnOnce() -> String,
) -> Result<ExitCode> {
    let mut launches: Vec<&mut dyn FnMut() -> Result<()>> = each
        .iter_mut()
        .map(|f| f.as_mut() as &mut dyn FnMut() -> Result<()>)
        .collect();
    let times = sample_interleaved(ctx, flusher, opt, &mut launches)?;
    ctx.synchronize()?;
    let rows: Vec<Row> = names
        .iter()
        .zip(times)
        .map(|(n, (t, _))| kernel_row(n, p, p.flops(), t))
        .collect();
    let run = env.begin("attn-bench-backward", Some(&ctx.info))?;
    for r in &rows {
        record(&run, rows::attention_backward_bench_row(r))?;
    }
    finish(&run, "ok")?;
    if env.json {
        env.print_json(&serde_json::json!(rows));
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", versions_text(&header(), &rows, Some(&base_name)));
    Ok(ExitCode::SUCCESS)
}

/// The packed backward has no deterministic mode: said before anything runs.
fn refuse_deterministic_varlen(f: &BackwardFlags) -> Result<()> {
    if f.deterministic {
        return Err(Error::invalid(
            "the packed backward has no deterministic mode (dQ's additions come in any order); leave out --deterministic",
        ));
    }
    Ok(())
}

/// `--backward --varlen ...` (one packed problem) or `--backward --varlen-suite`: the packed
/// backward against each sequence's float64 gradients, one row a problem.
fn verify_varlen(env: &Env, a: &AttnVerifyArgs) -> Result<ExitCode> {
    refuse_deterministic_varlen(&a.backward)?;
    let seed = a.varlen.seed.unwrap_or_else(fresh_seed);
    let problems = match a.varlen.lengths(seed)? {
        Some(lengths) => vec![super::attention_varlen::problem(
            &a.problem.shape,
            &a.problem.dtype,
            &lengths,
        )?],
        None => varlen_backward_suite(),
    };
    let ctx = env.context()?;
    let landing = Landing::begin(env, &ctx, None, None)?;
    let checks = problems.iter().enumerate().map(|(i, p)| {
        let s = seed.wrapping_add(i as u64);
        or_failed(verify_varlen_backward(&ctx, p, s), |message| Outcome {
            message,
            ..varlen_blank(p, s)
        })
    });
    let outcomes = landing.each(checks, fail_line, None)?;
    landing.report(env, &outcomes, |outcomes| {
        let grads: Column = ("dQ / dK / dV rel error", |o| {
            let [q, k, v] = grad_errors(o);
            format!("{q:.2e} / {k:.2e} / {v:.2e} (bound {:.0e})", o.bound)
        });
        verdict_table(&[PROBLEM, RESULT, grads, SEED], outcomes).render()
    })
}

/// `--backward --varlen-count N` (or `--varlen`): the packed backward timed beside one dense
/// backward of the same work (the default version on one sequence of the same pairs), one
/// launch of each a round.
fn bench_varlen(env: &Env, a: &AttnBenchArgs) -> Result<ExitCode> {
    refuse_deterministic_varlen(&a.backward)?;
    let (p, seed) = super::attention_varlen::bench_problem(a)?;
    let ctx = env.context()?;
    supports_varlen(&p.shape(), false, &ctx.info).map_err(|reason| Error::Unsupported {
        kernel: VARLEN_VERSION.into(),
        reason,
    })?;
    // The same work in one dense backward: what the packed call is measured against. Both
    // problems' buffers are held at once (their launches interleave), said before allocating.
    let dense = BackwardProblem::new(dense_equivalent(&p), false);
    let packed_bytes = BackwardProblem::new(dense_view(&p.shape()), false).device_bytes();
    ctx.ensure_fits(
        &format!("{} and its dense reference", varlen_backward_label(&p)),
        packed_bytes + dense.device_bytes() + kiln::harness::memory::flusher_bytes(&ctx.info),
    )?;
    let run = Bench::new(&ctx, &a.options(env))?;
    let [q, k, v, d_o] = &random_inputs(&p, seed);
    let bufs = VarlenBackwardBuffers::new(&ctx, &p, [q, k, v, d_o])?;
    let (ops, shape) = (bufs.operands(0), p.shape());
    let r = &env.registry;
    let kernel = r.select_attention_backward_tuned(&dense, &ctx.info, &ctx.tuned, None)?;
    let forward = r.select_attention(&dense.attn, &ctx.info, None)?;
    let dbufs = BackwardBuffers::new(&ctx, forward, &dense, seed)?;
    let dops = dbufs.operands();
    // One launch of each a round after the warm-up, so that the ratio is read at one clock: timed
    // one after the other in a process, the same binary's ratio read 0.866-0.918x (H200 at its
    // power cap, 2026-12-02), the dense call's median 17.6-18.6 ms.
    let times = sample_interleaved(
        &ctx,
        &run.flusher,
        &run.opt,
        &mut [
            &mut || launch_varlen(&ctx, &shape, false, &ops),
            &mut || kernel.launch(&ctx, &dense, &dops),
        ],
    )?;
    ctx.synchronize()?;
    let Ok([(packed_ms, _), (dense_ms, _)]) = <[_; 2]>::try_from(times) else {
        unreachable!("sample_interleaved returns one set of times a launch")
    };
    let packed = TimeSummary::of(packed_ms);
    let dense_label = dense.label();
    let dense_flops = dense.flops();
    let dt = kernel_row(kernel.name(), dense, dense_flops, dense_ms);
    let (median, min) = (packed.median_ms, packed.min_ms);
    let tflops = packed.rate(varlen_backward_flops(&p), 1e12);
    let (dt_tflops, ratio) = (dt.number("tflops"), tflops / dt.number("tflops"));
    if env.json {
        env.print_json(&serde_json::json!({
            "problem": varlen_backward_label(&p),
            "flops": varlen_backward_flops(&p),
            "median_ms": median,
            "min_ms": min,
            "tflops": tflops,
            "dense": dt,
            "vs_dense": ratio,
            "seed": seed,
        }));
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{} ({:.3e} FLOPs: 2.5x the forward's over real pairs, seed {seed}) on {}",
        varlen_backward_label(&p),
        varlen_backward_flops(&p),
        ctx.info.name
    );
    let rows = [
        ("bwd_fa3_lookahead packed".to_string(), median, min, tflops),
        timed(format!("{} dense {}", kernel.name(), dense_label), &dt),
    ];
    print!("{}", calls_table(&rows, dt_tflops));
    Ok(ExitCode::SUCCESS)
}
