//! One tuning run: the search proposes batches of configs; for each batch a compile-ahead thread
//! guards every candidate (in parallel) while worker threads, one per GPU, time those that
//! passed as soon as they pass, each behind its watchdog. Every outcome goes to `on_result` (the
//! store) the moment it is known; outcomes of a resumed run are answered from what was recorded.

use std::collections::HashMap;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rayon::prelude::*;
use serde::Serialize;

use super::guard::{Guard, Passed};
use super::search::{search_from, Strategy};
use super::space::{Config, ParamSpace};
use super::target::{Target, TuneProblem};
use super::watchdog::{Spawner, WorkerHandle};
use super::worker::{Job, JobResult, Rival};
use super::{Outcome, Status};
use crate::device::DeviceInfo;
use crate::error::{Error, Result};
use crate::jit::Jit;
use crate::ops::gemm::GemmProblem;

/// Everything one tuning run needs.
pub struct TuneRequest<'a> {
    pub target: Target<'a>,
    pub problem: TuneProblem,
    /// The device the guard judges against (GPU 0's).
    pub dev: DeviceInfo,
    pub strategy: Strategy,
    pub budget: usize,
    /// GPU ordinals: one worker each.
    pub gpus: Vec<u32>,
    pub spawner: Spawner,
    pub timeout_floor: Duration,
    pub warmup: usize,
    pub reps: usize,
    /// Outcomes recorded by an earlier attempt of this run (`--resume`).
    pub known: HashMap<Config, Outcome>,
}

/// What a run found.
#[derive(Debug, Clone, Serialize)]
pub struct TuneReport {
    /// Every candidate, in evaluation order.
    pub outcomes: Vec<Outcome>,
    pub best: Option<Outcome>,
    /// The leaders timed again together at the end (one launch of each a round), the best
    /// among them: their times are of one clock, the others' of the search's.
    pub together: Vec<Config>,
    pub space_size: usize,
    /// Median NVRTC time of one candidate (compiled cold in this run, or when first cached).
    pub cold_compile_median_ms: Option<f64>,
    /// The same median over the compiling threads' CPU time: one compile's cost without the
    /// waits for a core that parallel compiles add to the wall time.
    pub cold_compile_cpu_median_ms: Option<f64>,
    /// Loading every passing candidate's CUBIN from the JIT cache, in total.
    pub warm_start_ms: Option<f64>,
    pub wall_s: f64,
}

/// The problems a candidate is verified on before it is timed: a small one of the same class
/// (dimensions capped, plus 8 so that tails are exercised; multiples of 8 keep rows aligned), and
/// the real one when its reference is cheap.
pub fn verify_problems(p: &GemmProblem) -> Vec<GemmProblem> {
    let cap = |d: usize, c: usize| if d > c { c + 8 } else { d };
    let small = GemmProblem::new(
        cap(p.m, 384),
        cap(p.n, 384),
        cap(p.k, 512),
        p.layout,
        p.input,
        p.output,
    );
    // Leading dimensions keep the real ones' residue mod 8 elements (16 bytes for 16-bit
    // operands), so a problem with unaligned rows is verified on unaligned rows too: kernels pick
    // another variant for those (mma_sync's element loads).
    let like = |ld_small: usize, ld_real: usize| ld_small.next_multiple_of(8) + ld_real % 8;
    let small = if (small.m, small.n, small.k) == (p.m, p.n, p.k) {
        *p
    } else {
        GemmProblem {
            alpha: p.alpha,
            beta: p.beta,
            lda: like(small.lda, p.lda),
            ldb: like(small.ldb, p.ldb),
            ldc: like(small.ldc, p.ldc),
            ..small
        }
    };
    let mut v = vec![small];
    if (p.m as f64) * (p.n as f64) * (p.k as f64) <= (1u64 << 30) as f64 && small != *p {
        v.push(*p);
    }
    v
}

enum Event {
    Guarded(usize, std::result::Result<Passed, Box<Outcome>>),
    /// A candidate's result and the GPU whose worker measured it.
    Measured(usize, u32, JobResult),
}

/// The leaders timed again together (one launch of each a round) at the end of a run, besides the
/// baseline.
pub const FINALISTS: usize = 4;

/// Runs the tuning; `on_result(outcome, fresh)` sees every outcome at once (`fresh` = measured in
/// this process, not read back from a resumed run).
pub fn tune(
    req: &TuneRequest,
    jit: &Jit,
    mut on_result: impl FnMut(&Outcome, bool) -> Result<()>,
) -> Result<TuneReport> {
    let space: ParamSpace = req.target.require_space(&req.problem, &req.dev)?;
    let started = Instant::now();
    let space_size = space.enumerate().len();
    let guard = Guard::new(jit, req.dev.clone());
    let arch = req.dev.arch();
    let mut workers: Vec<Option<WorkerHandle>> = req.gpus.iter().map(|_| None).collect();
    let mut outcomes: Vec<Outcome> = Vec::new();
    let mut best: Option<f64> = req
        .known
        .values()
        .filter(|o| o.status == Status::Ok)
        .filter_map(|o| o.median_ms)
        .reduce(f64::min);
    let mut next_id = 0u64;
    let mut failure: Option<Error> = None;

    // The heuristic's config first: a search never ends worse than the untuned default.
    let start: Vec<Config> = req
        .target
        .baseline(&req.problem, &req.dev)
        .into_iter()
        .collect();
    let history = search_from(&space, req.strategy, req.budget, &start, |batch| {
        let mut times = vec![f64::INFINITY; batch.len()];
        if failure.is_some() {
            return times;
        }
        let mut fresh = Vec::new();
        for (i, c) in batch.iter().enumerate() {
            match req.known.get(c) {
                Some(o) => {
                    times[i] = o.time();
                    outcomes.push(o.clone());
                    if let Err(e) = on_result(o, false) {
                        failure = Some(e);
                    }
                }
                None => fresh.push(i),
            }
        }
        let results = run_batch(
            req,
            &guard,
            &space,
            &arch,
            batch,
            &fresh,
            &mut workers,
            &mut best,
            &mut next_id,
            &mut |o| {
                let r = on_result(o, true);
                outcomes.push(o.clone());
                r
            },
        );
        match results {
            Ok(done) => {
                for (i, o) in done {
                    times[i] = o.time();
                }
            }
            Err(e) => failure = Some(e),
        }
        times
    });
    if let Some(e) = failure {
        return Err(e);
    }
    debug_assert!(history.len() <= req.budget.max(1));
    // The best is a fully timed candidate (an early-stopped one only has its short timing).
    let timed = |o: &&Outcome| o.status == Status::Ok && o.median_ms.is_some();
    let mut best = outcomes
        .iter()
        .filter(timed)
        .min_by(|a, b| a.time().total_cmp(&b.time()))
        .cloned();
    // The leaders are timed again on the first GPU, one launch of each a round, so that their
    // ratios are read at one clock: an H200 at its power cap drifts ±5 % within a process, more
    // than the attention backward's knobs move it (its tuned split measured 1.03x the default's
    // alone and 0.98x in the next process, 2026-12-02), and with several GPUs a time also
    // depends on the GPU (4 % between the fastest and the slowest of 4 H200s). The baseline
    // joins them: a config replaces the untuned one only by beating it at the same clock.
    let mut leaders: Vec<Outcome> = outcomes.iter().filter(timed).cloned().collect();
    leaders.sort_by(|a, b| a.time().total_cmp(&b.time()));
    leaders.truncate(FINALISTS);
    if let Some(b) = start
        .first()
        .and_then(|c| outcomes.iter().filter(timed).find(|o| &o.config == c))
    {
        if !leaders.iter().any(|o| o.config == b.config) {
            leaders.push(b.clone());
        }
    }
    let mut together = Vec::new();
    if leaders.len() > 1 {
        if let Some(ms) = time_together(req, &mut workers[0], req.gpus[0], &leaders, &mut next_id) {
            let (flops, n) = (req.problem.flops(), leaders.len());
            for (o, t) in leaders.iter_mut().zip(ms) {
                o.median_ms = Some(t);
                o.tflops = Some(flops / (t * 1e-3) / 1e12);
                o.gpu = Some(req.gpus[0]);
                o.reason = format!(
                    "timed again with the {n} leaders, one launch of each a round, on GPU {}",
                    req.gpus[0]
                );
                on_result(o, true)?;
                if let Some(old) = outcomes.iter_mut().find(|x| x.config == o.config) {
                    *old = o.clone();
                }
            }
            together = leaders.iter().map(|o| o.config.clone()).collect();
            best = leaders
                .into_iter()
                .min_by(|a, b| a.time().total_cmp(&b.time()));
        }
    }
    drop(workers);
    let mut cold: Vec<f64> = outcomes.iter().filter_map(|o| o.compile_ms).collect();
    cold.sort_by(f64::total_cmp);
    let mut cold_cpu: Vec<f64> = outcomes.iter().filter_map(|o| o.compile_cpu_ms).collect();
    cold_cpu.sort_by(f64::total_cmp);
    let warm_start_ms = warm_start(req, jit, &arch, &outcomes);
    Ok(TuneReport {
        cold_compile_median_ms: cold.get(cold.len() / 2).copied(),
        cold_compile_cpu_median_ms: cold_cpu.get(cold_cpu.len() / 2).copied(),
        warm_start_ms,
        best,
        together,
        outcomes,
        space_size,
        wall_s: started.elapsed().as_secs_f64(),
    })
}

/// `leaders` (verified and timed) timed again together on the worker in `slot` (GPU `ordinal`):
/// their medians in order, or `None` where the job did not end with every time (the search's
/// times stand then).
fn time_together(
    req: &TuneRequest,
    slot: &mut Option<WorkerHandle>,
    ordinal: u32,
    leaders: &[Outcome],
    next_id: &mut u64,
) -> Option<Vec<f64>> {
    let entries: Vec<Entry> = leaders
        .iter()
        .map(|o| Entry {
            version: req.target.name().into(),
            config: o.config.clone(),
            median_ms: o.median_ms.unwrap_or(f64::INFINITY),
        })
        .collect();
    let together = Together {
        problem: req.problem,
        spawner: &req.spawner,
        timeout_floor: req.timeout_floor,
        warmup: req.warmup,
        reps: req.reps,
    };
    together.time(slot, ordinal, &entries, next_id)
}

/// One version's config and its median so far, to be timed beside others.
#[derive(Debug, Clone)]
pub struct Entry {
    pub version: String,
    pub config: Config,
    pub median_ms: f64,
}

/// Configs of one problem, of one version or several, timed together in one worker job: one
/// launch of each a round after the warm-up, every median read at one clock.
pub struct Together<'a> {
    pub problem: TuneProblem,
    pub spawner: &'a Spawner,
    pub timeout_floor: Duration,
    pub warmup: usize,
    pub reps: usize,
}

impl Together<'_> {
    /// The medians of `entries` in order, timed on the worker in `slot` (spawned on GPU
    /// `ordinal` if empty), or `None` where the job did not end with every time.
    pub fn time(
        &self,
        slot: &mut Option<WorkerHandle>,
        ordinal: u32,
        entries: &[Entry],
        next_id: &mut u64,
    ) -> Option<Vec<f64>> {
        let (first, rest) = entries.split_first()?;
        let job = Job {
            id: *next_id,
            version: first.version.clone(),
            config: first.config.clone(),
            problem: self.problem,
            verify: Vec::new(),
            // (the watchdog's deadline scales with one launch: here a round of every entry)
            best_ms: Some(
                entries
                    .iter()
                    .map(|e| e.median_ms)
                    .filter(|t| t.is_finite())
                    .sum(),
            ),
            warmup: self.warmup,
            reps: self.reps,
            rivals: rest
                .iter()
                .map(|e| Rival {
                    version: (e.version != first.version).then(|| e.version.clone()),
                    config: e.config.clone(),
                })
                .collect(),
        };
        *next_id += 1;
        let handle = match slot.take() {
            Some(h) => h,
            None => self.spawner.spawn(ordinal).ok()?,
        };
        let (r, h) = handle.run(&job, self.timeout_floor);
        *slot = h;
        match (r.status, r.median_ms) {
            (Status::Ok, Some(t)) if r.rivals_ms.len() == rest.len() => {
                Some(std::iter::once(t).chain(r.rivals_ms).collect())
            }
            _ => None,
        }
    }
}

/// Time to load every timed candidate's CUBIN from the JIT cache (all hits by now).
fn warm_start(req: &TuneRequest, jit: &Jit, arch: &str, outcomes: &[Outcome]) -> Option<f64> {
    jit.cache.as_ref()?;
    let specs: Vec<_> = outcomes
        .iter()
        .filter(|o| o.status.timed())
        .filter_map(|o| req.target.spec_for(arch, &req.problem, &o.config))
        .collect();
    if specs.is_empty() {
        return None;
    }
    let t = Instant::now();
    for s in &specs {
        jit.compile(s).ok()?;
    }
    Some(t.elapsed().as_secs_f64() * 1e3)
}

#[allow(clippy::too_many_arguments)]
fn run_batch(
    req: &TuneRequest,
    guard: &Guard,
    space: &ParamSpace,
    arch: &str,
    batch: &[Config],
    fresh: &[usize],
    workers: &mut [Option<WorkerHandle>],
    best: &mut Option<f64>,
    next_id: &mut u64,
    on_result: &mut dyn FnMut(&Outcome) -> Result<()>,
) -> Result<Vec<(usize, Outcome)>> {
    if fresh.is_empty() {
        return Ok(Vec::new());
    }
    let (ev_tx, ev_rx) = mpsc::channel::<Event>();
    let (job_tx, job_rx) = mpsc::channel::<(usize, Job)>();
    let job_rx = Arc::new(Mutex::new(job_rx));
    let mut done: Vec<(usize, Outcome)> = Vec::new();
    let mut passed: HashMap<usize, Passed> = HashMap::new();
    let mut first_error: Option<Error> = None;
    // The best time so far, read by the worker threads at dispatch (early stop, watchdog).
    let shared_best = Arc::new(Mutex::new(*best));
    std::thread::scope(|s| {
        // Compile ahead: every candidate of the batch guarded in parallel, each reported as soon
        // as it is judged, so that timing starts while the rest still compile.
        let tx = ev_tx.clone();
        s.spawn(move || {
            fresh.par_iter().for_each_with(tx, |tx, &i| {
                let spec = req.target.spec_for(arch, &req.problem, &batch[i]);
                let launch_key = space.launch_key(&batch[i]);
                let _ = tx.send(Event::Guarded(
                    i,
                    guard.check(&batch[i], spec.as_ref(), &launch_key),
                ));
            });
        });
        for (slot, ordinal) in workers.iter_mut().zip(&req.gpus) {
            let (tx, rx, shared) = (ev_tx.clone(), job_rx.clone(), shared_best.clone());
            s.spawn(move || loop {
                let next = rx.lock().ok().and_then(|r| r.recv().ok());
                let Some((i, mut job)) = next else { break };
                job.best_ms = shared.lock().ok().and_then(|b| *b);
                let handle = match slot.take() {
                    Some(h) => Ok(h),
                    None => req.spawner.spawn(*ordinal),
                };
                let result = match handle {
                    Ok(h) => {
                        let (r, h) = h.run(&job, req.timeout_floor);
                        *slot = h;
                        r
                    }
                    Err(e) => JobResult {
                        id: job.id,
                        status: Status::Error,
                        reason: e.to_string(),
                        median_ms: None,
                        tflops: None,
                        fatal: true,
                        rivals_ms: Vec::new(),
                    },
                };
                // Update the best here too, before the next job is taken (the main thread may
                // not have seen this result yet).
                if let (Status::Ok, Some(t)) = (result.status, result.median_ms) {
                    if let Ok(mut b) = shared.lock() {
                        *b = Some(b.map_or(t, |x: f64| x.min(t)));
                    }
                }
                if tx.send(Event::Measured(i, *ordinal, result)).is_err() {
                    break;
                }
            });
        }
        drop(ev_tx);
        let mut left = fresh.len();
        let mut job_tx = Some(job_tx);
        while left > 0 {
            let Ok(ev) = ev_rx.recv() else { break };
            let outcome = match ev {
                Event::Guarded(i, Err(o)) => (i, *o),
                Event::Guarded(i, Ok(p)) => {
                    passed.insert(i, p);
                    let job = Job {
                        id: *next_id,
                        version: req.target.name().into(),
                        config: batch[i].clone(),
                        problem: req.problem,
                        verify: req.problem.verify_problems(),
                        best_ms: *best,
                        warmup: req.warmup,
                        reps: req.reps,
                        rivals: Vec::new(),
                    };
                    *next_id += 1;
                    if let Some(tx) = &job_tx {
                        let _ = tx.send((i, job));
                    }
                    continue;
                }
                Event::Measured(i, gpu, r) => {
                    let p = passed.remove(&i).unwrap_or_default();
                    let o = Outcome {
                        config: batch[i].clone(),
                        status: r.status,
                        reason: r.reason,
                        median_ms: r.median_ms,
                        tflops: r.tflops,
                        compile_ms: p.compile_ms,
                        compile_cpu_ms: p.compile_cpu_ms,
                        cached: p.cached,
                        registers: p.registers,
                        smem: p.smem,
                        gpu: Some(gpu),
                    };
                    if o.status == Status::Ok {
                        if let Some(t) = o.median_ms {
                            *best = Some(best.map_or(t, |b: f64| b.min(t)));
                            if let Ok(mut b) = shared_best.lock() {
                                *b = *best;
                            }
                        }
                    }
                    (i, o)
                }
            };
            left -= 1;
            if let Err(e) = on_result(&outcome.1) {
                first_error.get_or_insert(e);
            }
            done.push(outcome);
        }
        // All judged and measured: the workers' queue closes and their threads end.
        job_tx.take();
    });
    match first_error {
        Some(e) => Err(e),
        None => Ok(done),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::{DType, Layout};

    #[test]
    fn verification_uses_a_small_problem_of_the_same_class_with_tails() {
        let p = GemmProblem::new(4096, 4096, 4096, Layout::CR, DType::F16, DType::F32);
        let v = verify_problems(&p);
        assert_eq!(v.len(), 1);
        assert_eq!((v[0].m, v[0].n, v[0].k), (392, 392, 520));
        assert_eq!(
            (v[0].layout, v[0].input, v[0].output),
            (p.layout, p.input, p.output)
        );
        let small = GemmProblem::new(256, 512, 128, Layout::RC, DType::Bf16, DType::Bf16);
        let v = verify_problems(&small);
        assert_eq!(v.len(), 2);
        assert_eq!(v[1], small);
        let cube = GemmProblem::new(300, 300, 300, Layout::RC, DType::Bf16, DType::Bf16);
        assert_eq!(verify_problems(&cube), vec![cube]);
        // rows not 16-byte aligned (K = 4095, A and B K-major): the small problem's are not either
        let odd = GemmProblem::new(4096, 4096, 4095, Layout::RC, DType::Bf16, DType::Bf16);
        let v = verify_problems(&odd);
        assert_eq!((v[0].k, v[0].lda % 8, v[0].ldb % 8), (520, 7, 7));
        assert!(v[0].lda >= v[0].k && v[0].ldb >= v[0].k);
        v[0].validate().unwrap();
    }
}
