//! Isolation, the worker's side: candidates run in a worker process (`kiln tune-worker`, hidden),
//! which reads jobs as JSON lines on stdin, verifies and times each, and answers one JSON line per
//! job on stdout; after a hang or a CUDA error (its context is poisoned) it answers and exits. The
//! parent's watchdog is in [`super::watchdog`].
//!
//! TEST-ONLY: `KILN_TUNE_FAKE=hang@3,crash@5,wrong@7` ([`Fake`], in the overrides the CLI
//! passes) makes the worker skip the GPU and answer every job with a synthetic time, except that
//! job 3 sleeps forever, job 5 aborts the process and job 7 reports a wrong result (job ids count
//! the jobs a tuning run sends, from 0). Tests use it to exercise the watchdog on machines
//! without a GPU.

use std::io::{BufRead, Write};
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::search::far_behind;
use super::space::Config;
use super::target::{Target, TuneProblem};
use super::{AttnConfigured, BwdConfigured, Configured, Status};
use crate::device::Context;
use crate::error::{Error, Result};
use crate::harness::attention::backward_bench::{time_backward, BackwardBuffers};
use crate::harness::attention::backward_verify::verify_backward;
use crate::harness::attention::bench::{time_attention, AttnBuffers};
use crate::harness::attention::verify::verify_attention;
use crate::harness::bench::{
    sample_interleaved, time_gemm, BenchBuffers, BenchOptions, L2Flusher, Summary,
};
use crate::harness::verify::verify_gemm;
use crate::jit::Jit;
use crate::ops::attention::AttentionKernel;
use crate::ops::attention_backward::AttentionBackwardKernel;
use crate::ops::gemm::GemmKernel;
use crate::ops::registry::Registry;
use crate::ops::tuned::TunedTable;
use crate::overrides::Overrides;

/// The test-only fault plan (`KILN_TUNE_FAKE`).
pub use crate::overrides::TuneFake as Fake;

/// A candidate whose short timing is this many times the best so far is not timed in full.
pub const EARLY_STOP_FACTOR: f64 = 1.5;

/// One candidate for the worker: verify on `verify` (in order), then time on `problem`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: u64,
    pub version: String,
    pub config: Config,
    pub problem: TuneProblem,
    pub verify: Vec<TuneProblem>,
    /// The best median so far (for the early stop).
    pub best_ms: Option<f64>,
    pub warmup: usize,
    pub reps: usize,
    /// Configs (already verified) to time beside `config`, one launch of each a round, so that
    /// their ratios are read at one clock: a run's leaders timed again, or every version's best
    /// ([`super::run`]). Empty: verify and time `config` alone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rivals: Vec<Rival>,
}

/// A config of `version` (the job's own where `None`) timed beside a job's config.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Rival {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    pub config: Config,
}

/// The worker's answer to one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobResult {
    pub id: u64,
    pub status: Status,
    pub reason: String,
    pub median_ms: Option<f64>,
    pub tflops: Option<f64>,
    /// The worker's context is unusable after this job (it exits after answering).
    pub fatal: bool,
    /// The rivals' medians, in the job's order (`median_ms` is `config`'s).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rivals_ms: Vec<f64>,
}

impl JobResult {
    /// A result without a time: the candidate failed with `status` for `reason`.
    pub fn failed(id: u64, status: Status, reason: impl Into<String>, fatal: bool) -> JobResult {
        JobResult {
            id,
            status,
            reason: reason.into(),
            median_ms: None,
            tflops: None,
            fatal,
            rivals_ms: Vec::new(),
        }
    }
}

/// The fake worker's answer to `job`: hang, crash, a wrong result, or a synthetic time.
fn fake_answer(fake: &Fake, job: &Job, ordinal: u32) -> JobResult {
    if fake.hang.contains(&job.id) {
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
    if fake.crash.contains(&job.id) {
        std::process::abort();
    }
    if fake.wrong.contains(&job.id) {
        return JobResult::failed(job.id, Status::Wrong, "fake: planted wrong result", false);
    }
    let ms = fake_ms(&job.config);
    JobResult {
        id: job.id,
        status: Status::Ok,
        reason: format!("fake worker on GPU {ordinal}"),
        median_ms: Some(ms),
        tflops: Some(job.problem.flops() / (ms * 1e-3) / 1e12),
        fatal: false,
        rivals_ms: job.rivals.iter().map(|r| fake_ms(&r.config)).collect(),
    }
}

/// The fake worker's time of `config`: a deterministic hash of its label, 1 to 2 ms.
fn fake_ms(config: &Config) -> f64 {
    let h = config.label().bytes().fold(1469598103934665603u64, |h, b| {
        (h ^ b as u64).wrapping_mul(1099511628211)
    });
    1.0 + (h % 1000) as f64 / 1000.0
}

/// The worker loop: answers every job on `input` until it closes (or the context dies, after
/// answering that job), on GPU `ordinal` with `overrides` and `tuned` (what the `kiln
/// tune-worker` process's environment and store give, as for the parent; the jobs pin their
/// configs). Returns whether the worker ended on a fatal error.
pub fn serve(
    ordinal: u32,
    jit: Jit,
    overrides: Overrides,
    tuned: Arc<TunedTable>,
    input: impl BufRead,
    mut output: impl Write,
) -> Result<bool> {
    let fake = overrides.tune.fake.clone();
    let registry = Registry::default();
    let mut gpu: Option<Gpu> = None;
    let mut jit = Some(jit);
    for line in input.lines() {
        let line = line.map_err(|e| Error::invalid(format!("reading a tuning job: {e}")))?;
        if line.trim().is_empty() {
            continue;
        }
        let job: Job = serde_json::from_str(&line)
            .map_err(|e| Error::invalid(format!("bad tuning job: {e}")))?;
        let result = match &fake {
            Some(f) => fake_answer(f, &job, ordinal),
            None => {
                if gpu.is_none() {
                    let jit = jit.take().unwrap_or_default();
                    match Context::open_with(ordinal, jit, overrides.clone()) {
                        Ok(ctx) => {
                            let ctx = ctx.with_tuned(tuned.clone());
                            gpu = Some(Gpu {
                                ctx,
                                buffers: None,
                                flusher: None,
                            })
                        }
                        Err(e) => {
                            let r = JobResult::failed(
                                job.id,
                                Status::Error,
                                format!("worker cannot open GPU {ordinal}: {e}"),
                                true,
                            );
                            answer(&mut output, &r)?;
                            return Ok(true);
                        }
                    }
                }
                match (
                    gpu.as_mut(),
                    Target::find(&registry, &job.version, &job.problem),
                ) {
                    (Some(g), Ok(k)) => g.run(&registry, k, &job),
                    (_, Err(e)) => JobResult::failed(job.id, Status::Error, e.to_string(), false),
                    (None, _) => JobResult::failed(job.id, Status::Error, "no GPU", true),
                }
            }
        };
        answer(&mut output, &result)?;
        if result.fatal {
            return Ok(true);
        }
    }
    Ok(false)
}

fn answer(out: &mut impl Write, r: &JobResult) -> Result<()> {
    let line = serde_json::to_string(r).map_err(|e| Error::invalid(e.to_string()))?;
    writeln!(out, "{line}")
        .and_then(|_| out.flush())
        .map_err(|e| Error::invalid(format!("writing a tuning result: {e}")))
}

/// Random inputs of the timed problem, kept across jobs.
enum Buffers {
    Gemm(BenchBuffers),
    Attention(AttnBuffers),
    /// (O and LSE from the default forward)
    Backward(BackwardBuffers),
}

/// The worker's GPU state, kept across jobs: buffers for the timed problem, the L2 flusher.
struct Gpu {
    ctx: Context,
    buffers: Option<(TuneProblem, Buffers)>,
    flusher: Option<L2Flusher>,
}

/// What one verification found: `None` passed, else the failed job result.
fn verdict(id: u64, label: String, r: Result<(bool, Option<String>, String)>) -> Option<JobResult> {
    match r {
        Ok((_, Some(skipped), _)) => Some(JobResult::failed(
            id,
            Status::Error,
            format!("unsupported on {label}: {skipped}"),
            false,
        )),
        Ok((false, _, message)) => Some(JobResult::failed(
            id,
            Status::Wrong,
            format!("{label}: {message}"),
            false,
        )),
        Ok(_) => None,
        Err(e) => Some(classify(id, e, &format!("verifying on {label}"))),
    }
}

/// A failure as the tuner sees it: a hang or a CUDA error poisons the context (fatal).
fn classify(id: u64, e: Error, during: &str) -> JobResult {
    match e {
        Error::Hang { .. } => {
            JobResult::failed(id, Status::Timeout, format!("{during}: {e}"), true)
        }
        Error::Cuda { .. } => JobResult::failed(id, Status::Crash, format!("{during}: {e}"), true),
        Error::Unsupported { reason, .. } => JobResult::failed(
            id,
            Status::Error,
            format!("{during}: unsupported: {reason}"),
            false,
        ),
        other => JobResult::failed(id, Status::Error, format!("{during}: {other}"), false),
    }
}

impl Gpu {
    fn run(&mut self, registry: &Registry, target: Target, job: &Job) -> JobResult {
        if !job.rivals.is_empty() {
            return self
                .time_rivals(registry, target, job)
                .unwrap_or_else(|e| classify(job.id, e, "timing the leaders again"));
        }
        let config = job.config.clone();
        for vp in &job.verify {
            let r = match (target, vp) {
                (Target::Gemm(k), TuneProblem::Gemm(q)) => {
                    let k = Configured {
                        inner: k,
                        config: config.clone(),
                    };
                    verify_gemm(&self.ctx, &k, q).map(|o| (o.passed, o.skipped, o.message))
                }
                (Target::Attention(k), TuneProblem::Attention(q)) => {
                    let k = AttnConfigured {
                        inner: k,
                        config: config.clone(),
                    };
                    verify_attention(&self.ctx, &k, q).map(|o| (o.passed, o.skipped, o.message))
                }
                (Target::AttentionBackward(k), TuneProblem::AttentionBackward(q)) => {
                    let k = BwdConfigured {
                        inner: k,
                        config: config.clone(),
                    };
                    registry
                        .select_attention(&q.attn, &self.ctx.info, None)
                        .and_then(|forward| verify_backward(&self.ctx, forward, &k, q))
                        .map(|o| (o.passed, o.skipped, o.message))
                }
                _ => Err(Error::invalid(format!(
                    "{} cannot verify a {} problem",
                    target.name(),
                    vp.op()
                ))),
            };
            if let Some(failed) = verdict(job.id, vp.label(), r) {
                return failed;
            }
        }
        match self.time(registry, target, job) {
            Ok(r) => r,
            Err(e) => classify(job.id, e, "timing"),
        }
    }

    /// One timing of the job's candidate: (median ms, TFLOPS).
    fn time_once(&self, target: Target, job: &Job, opt: &BenchOptions) -> Result<(f64, f64)> {
        let (Some((_, bufs)), Some(fl)) = (&self.buffers, &self.flusher) else {
            return Err(Error::invalid("no buffers"));
        };
        match (target, &job.problem, bufs) {
            (Target::Gemm(k), TuneProblem::Gemm(p), Buffers::Gemm(b)) => {
                let k = Configured {
                    inner: k,
                    config: job.config.clone(),
                };
                let t = time_gemm(&self.ctx, &k, p, b, fl, opt)?;
                Ok((t.median_ms, t.tflops))
            }
            (Target::Attention(k), TuneProblem::Attention(p), Buffers::Attention(b)) => {
                let k = AttnConfigured {
                    inner: k,
                    config: job.config.clone(),
                };
                let t = time_attention(&self.ctx, &k, p, b, fl, opt)?;
                Ok((t.number("median_ms"), t.number("tflops")))
            }
            (
                Target::AttentionBackward(k),
                TuneProblem::AttentionBackward(p),
                Buffers::Backward(b),
            ) => {
                let k = BwdConfigured {
                    inner: k,
                    config: job.config.clone(),
                };
                let t = time_backward(&self.ctx, &k, p, b, fl, opt)?;
                Ok((t.number("median_ms"), t.number("tflops")))
            }
            _ => Err(Error::invalid(format!(
                "{} cannot time a {} problem",
                target.name(),
                job.problem.op()
            ))),
        }
    }

    /// `job`'s config and rivals, one launch of each a round after the warm-up (L2 flushed before
    /// each): every one's median at one clock.
    fn time_rivals(&mut self, registry: &Registry, target: Target, job: &Job) -> Result<JobResult> {
        self.ensure_buffers(registry, &job.problem)?;
        let (Some((_, bufs)), Some(fl)) = (&self.buffers, &self.flusher) else {
            return Err(Error::invalid("no buffers"));
        };
        let ctx = &self.ctx;
        let mut each = vec![(target, job.config.clone())];
        for r in &job.rivals {
            let t = match &r.version {
                Some(v) => Target::find(registry, v, &job.problem)?,
                None => target,
            };
            each.push((t, r.config.clone()));
        }
        let mut launches: Vec<Box<dyn FnMut() -> Result<()> + '_>> = Vec::new();
        for (target, c) in each {
            let mismatch = || {
                Error::invalid(format!(
                    "{} cannot time a {} problem",
                    target.name(),
                    job.problem.op()
                ))
            };
            launches.push(match (target, &job.problem, bufs) {
                (Target::Gemm(k), TuneProblem::Gemm(p), Buffers::Gemm(b)) => {
                    let (k, ops) = (
                        Configured {
                            inner: k,
                            config: c,
                        },
                        b.operands(),
                    );
                    Box::new(move || k.launch(ctx, p, &ops))
                }
                (Target::Attention(k), TuneProblem::Attention(p), Buffers::Attention(b)) => {
                    let (k, ops) = (
                        AttnConfigured {
                            inner: k,
                            config: c,
                        },
                        b.operands(),
                    );
                    Box::new(move || k.launch(ctx, p, &ops))
                }
                (
                    Target::AttentionBackward(k),
                    TuneProblem::AttentionBackward(p),
                    Buffers::Backward(b),
                ) => {
                    let (k, ops) = (
                        BwdConfigured {
                            inner: k,
                            config: c,
                        },
                        b.operands(),
                    );
                    Box::new(move || k.launch(ctx, p, &ops))
                }
                _ => return Err(mismatch()),
            });
        }
        let mut each: Vec<&mut dyn FnMut() -> Result<()>> =
            launches.iter_mut().map(|l| &mut **l as _).collect();
        let opt = BenchOptions {
            warmup: job.warmup,
            reps: job.reps,
            flush_l2: true,
            interleave: true,
            ..BenchOptions::default()
        };
        let medians: Vec<f64> = sample_interleaved(ctx, fl, &opt, &mut each)?
            .into_iter()
            .map(|(t, _)| Summary::of(t).median_ms)
            .collect();
        let ms = medians[0];
        Ok(JobResult {
            id: job.id,
            status: Status::Ok,
            reason: String::new(),
            median_ms: Some(ms),
            tflops: Some(job.problem.flops() / (ms * 1e-3) / 1e12),
            fatal: false,
            rivals_ms: medians[1..].to_vec(),
        })
    }

    /// Random inputs of `p` (kept while the jobs keep the problem) and the L2 flusher.
    fn ensure_buffers(&mut self, registry: &Registry, p: &TuneProblem) -> Result<()> {
        if self.buffers.as_ref().is_none_or(|(q, _)| q != p) {
            self.buffers = None; // free the old ones first
            p.ensure_fits(&self.ctx)?;
            let b = match p {
                TuneProblem::Gemm(q) => Buffers::Gemm(BenchBuffers::random(&self.ctx, q, 17)?),
                TuneProblem::Attention(q) => {
                    Buffers::Attention(AttnBuffers::random(&self.ctx, q, 17)?)
                }
                TuneProblem::AttentionBackward(q) => {
                    let forward = registry.select_attention(&q.attn, &self.ctx.info, None)?;
                    Buffers::Backward(BackwardBuffers::new(&self.ctx, forward, q, 17)?)
                }
            };
            self.buffers = Some((*p, b));
        }
        if self.flusher.is_none() {
            self.flusher = Some(L2Flusher::new(&self.ctx)?);
        }
        Ok(())
    }

    fn time(&mut self, registry: &Registry, target: Target, job: &Job) -> Result<JobResult> {
        self.ensure_buffers(registry, &job.problem)?;
        let (quick_ms, quick_tflops) = self.time_once(
            target,
            job,
            &BenchOptions {
                warmup: 1,
                reps: 3,
                flush_l2: true,
                interleave: false,
                ..BenchOptions::default()
            },
        )?;
        if far_behind(quick_ms, job.best_ms, EARLY_STOP_FACTOR) {
            return Ok(JobResult {
                id: job.id,
                status: Status::Slow,
                reason: format!(
                    "stopped early: {quick_ms:.3} ms over {EARLY_STOP_FACTOR}x the best so far"
                ),
                median_ms: Some(quick_ms),
                tflops: Some(quick_tflops),
                fatal: false,
                rivals_ms: Vec::new(),
            });
        }
        let (median_ms, tflops) = self.time_once(
            target,
            job,
            &BenchOptions {
                warmup: job.warmup,
                reps: job.reps,
                flush_l2: true,
                interleave: false,
                ..BenchOptions::default()
            },
        )?;
        Ok(JobResult {
            id: job.id,
            status: Status::Ok,
            reason: String::new(),
            median_ms: Some(median_ms),
            tflops: Some(tflops),
            fatal: false,
            rivals_ms: Vec::new(),
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ops::gemm::{DType, GemmProblem, Layout};

    /// A small mma_sync job, for the worker's and the watchdog's tests.
    pub(crate) fn job(id: u64) -> Job {
        Job {
            id,
            version: "mma_sync".into(),
            config: Config::new(&[("BM", 128)]),
            problem: GemmProblem::new(64, 64, 64, Layout::RC, DType::Bf16, DType::Bf16).into(),
            verify: vec![],
            best_ms: None,
            warmup: 5,
            reps: 30,
            rivals: vec![],
        }
    }

    #[test]
    fn fake_plans_answer_as_planned() {
        let f = Fake::parse("hang@3, crash@5,wrong@7").unwrap();
        assert_eq!(
            f,
            Fake {
                hang: vec![3],
                crash: vec![5],
                wrong: vec![7]
            }
        );
        assert_eq!(fake_answer(&f, &job(1), 0).status, Status::Ok);
        assert_eq!(fake_answer(&f, &job(1), 0), fake_answer(&f, &job(1), 0));
        assert_eq!(fake_answer(&f, &job(7), 0).status, Status::Wrong);
    }

    #[test]
    fn jobs_and_results_round_trip_as_json_lines() {
        let j = job(4);
        let line = serde_json::to_string(&j).unwrap();
        assert!(!line.contains('\n'));
        assert_eq!(serde_json::from_str::<Job>(&line).unwrap(), j);
        let r = JobResult::failed(4, Status::Crash, "x", true);
        assert_eq!(
            serde_json::from_str::<JobResult>(&serde_json::to_string(&r).unwrap()).unwrap(),
            r
        );
    }
}
