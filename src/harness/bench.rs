//! Benchmarking: CUDA events around each launch, warm-up excluded, L2 flushed before every timed
//! repetition, random inputs made on the GPU, median/min/max, TFLOPS, and the ratio to the vendor measured in
//! the same run on the same inputs.

use serde::Serialize;

use super::device_data;
use crate::device::{Context, DeviceBuffer, LaunchConfig};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::gemm::{GemmKernel, GemmOperands, GemmProblem};

#[derive(Debug, Clone, Copy, Serialize)]
pub struct BenchOptions {
    pub warmup: usize,
    /// Warm up for at least this much GPU time too (ms; 0: `warmup` launches only), measured
    /// with events around chunks of warm-up launches ([`warm_up`]), not extrapolated from the
    /// first launch (which can carry one-time costs). On an H100 the first moments of heavy load
    /// run faster than the power cap sustains (d256 attention: 790-808 TF launches in short runs,
    /// 720 once warm, results/2026-11-22-h100/attention-ragged-tail/warm/), so sustained-load figures need
    /// about a second of it.
    pub warmup_ms: f64,
    pub reps: usize,
    /// Flush L2 before each timed repetition (else repeated runs may measure the cache).
    pub flush_l2: bool,
    /// GEMM bench (`suite::bench_all`): time the versions of a problem in rounds, one launch of
    /// each per round (A B C A B C ...), rather than each version's repetitions back to back, so
    /// that clock and power drift (+-5 % between runs on a 700 W H200) lands on all of them
    /// alike and their ratios stay honest.
    pub interleave: bool,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            warmup: 5,
            warmup_ms: 0.0,
            reps: 30,
            flush_l2: true,
            interleave: true,
        }
    }
}

/// Timings of one version on one problem.
#[derive(Debug, Clone, Serialize)]
pub struct Timing {
    pub version: String,
    pub problem: GemmProblem,
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub reps: usize,
    pub tflops: f64,
    pub gbps: f64,
    /// Median host time of the launch call (µs), where measured (interleaved timing): the
    /// library's own work per launch (dispatch, tensor maps, the driver's launch). A small
    /// kernel's timed span also holds whatever part of it outlasts the L2 flush before it,
    /// since the GPU then waits on the host between the start event and the kernel.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host_us: Option<f64>,
}

/// The row of `version`'s `times` (ms, in launch order) on `problem` of `flops` (attention's
/// forward and backward): `version`, `problem` (the problem's own keys), the times in ms,
/// `tflops`, and `times_ms`, every timed launch in launch order (bimodal runs and drift show
/// there, not in the median).
pub fn kernel_row(version: &str, problem: impl Serialize, flops: f64, times: Vec<f64>) -> Row {
    let s = Summary::of(times.clone());
    Row::timed(&s, Times::Ms)
        .with("version", version)
        .with("problem", problem)
        .with("tflops", s.rate(flops, 1e12))
        .with("times_ms", times)
}

/// A set of timed launches summarised: the median, the fastest and the slowest (ms), and how
/// many there were. Every family's timing row is made from one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub reps: usize,
}

impl Summary {
    pub fn of(mut times: Vec<f64>) -> Summary {
        let (median_ms, min_ms, max_ms) = stats(&mut times);
        Summary {
            median_ms,
            min_ms,
            max_ms,
            reps: times.len(),
        }
    }

    /// `amount` (FLOPs or bytes) per second of the median, in `unit`s (1e12: TFLOPS or TB/s,
    /// 1e9: GB/s).
    pub fn rate(&self, amount: f64, unit: f64) -> f64 {
        amount / (self.median_ms * 1e-3) / unit
    }
}

/// One timed line of any family's bench, as its users read it: what ran, the [`Summary`] of its
/// launches in the family's unit ([`Times`]), its rates, the peer's figures and whatever else the
/// family writes, each under the JSON key the family has always used. The handlers print rows
/// through `json!`, whose objects order their keys by name (as every family's typed rows printed),
/// so the order keys are set in never shows; a key set to `None` is written as null.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(transparent)]
pub struct Row(serde_json::Map<String, serde_json::Value>);

/// The unit of a family's times, and so their keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Times {
    /// `median_ms`, `min_ms`, `max_ms` and `reps`.
    Ms,
    /// `median_us`, `min_us` and `max_us` (the GEMV, the 4-bit experts and the pointwise kernels,
    /// which never wrote `reps`).
    Us,
}

impl Row {
    /// The times of `s` under `times`' keys.
    pub fn timed(s: &Summary, times: Times) -> Row {
        let r = Row::default();
        match times {
            Times::Ms => r
                .with("median_ms", s.median_ms)
                .with("min_ms", s.min_ms)
                .with("max_ms", s.max_ms)
                .with("reps", s.reps),
            Times::Us => r
                .with("median_us", s.median_ms * 1e3)
                .with("min_us", s.min_ms * 1e3)
                .with("max_us", s.max_ms * 1e3),
        }
    }

    /// The row with `key` set to `value`.
    pub fn with(mut self, key: &str, value: impl Serialize) -> Row {
        self.set(key, value);
        self
    }

    /// Sets `key` to `value` (null for a value JSON cannot hold).
    pub fn set(&mut self, key: &str, value: impl Serialize) {
        let v = serde_json::to_value(value).unwrap_or(serde_json::Value::Null);
        self.0.insert(key.into(), v);
    }

    /// The number under `key` (None where it is absent or null).
    pub fn num(&self, key: &str) -> Option<f64> {
        self.0.get(key).and_then(serde_json::Value::as_f64)
    }

    /// The text under `key`: a string as it is, "" where absent or null, else its JSON.
    pub fn text(&self, key: &str) -> String {
        match self.0.get(key) {
            Some(serde_json::Value::String(s)) => s.clone(),
            None | Some(serde_json::Value::Null) => String::new(),
            Some(v) => v.to_string(),
        }
    }

    /// The number under `key`, NaN where it is absent or null.
    pub fn number(&self, key: &str) -> f64 {
        self.num(key).unwrap_or(f64::NAN)
    }

    /// The value under `key`, if any.
    pub fn get(&self, key: &str) -> Option<&serde_json::Value> {
        self.0.get(key)
    }

    /// A row of `keys` only (those it has).
    pub fn only(&self, keys: &[&str]) -> Row {
        let kept = keys
            .iter()
            .filter_map(|&k| Some((k.to_string(), self.0.get(k)?.clone())));
        Row(kept.collect())
    }

    /// Whether `key` holds something other than null.
    pub fn has(&self, key: &str) -> bool {
        self.0.get(key).is_some_and(|v| !v.is_null())
    }

    /// The number under `key` with `digits` decimals ("" where absent or null).
    pub fn fixed(&self, key: &str, digits: usize) -> String {
        self.num(key)
            .map(|x| format!("{x:.digits$}"))
            .unwrap_or_default()
    }

    /// The number under `key` as a ratio with `digits` decimals, `1.046x` ("" where absent or
    /// null).
    pub fn ratio(&self, key: &str, digits: usize) -> String {
        self.num(key)
            .map(|x| format!("{x:.digits$}x"))
            .unwrap_or_default()
    }
}

/// The one bench runner: a family's bench names its launches and makes its rows from the
/// [`Summary`] of each; the warm-up, the L2 flush before every timed launch, the events and
/// the cut for a launch far behind (over 100 ms) are the same for every family.
pub struct Bench<'c> {
    pub ctx: &'c Context,
    pub opt: BenchOptions,
    pub flusher: L2Flusher,
}

impl<'c> Bench<'c> {
    /// A run on `ctx` under `opt`, with its L2 flusher (`KILN_FLUSH`'s mode).
    pub fn new(ctx: &'c Context, opt: &BenchOptions) -> Result<Bench<'c>> {
        Ok(Bench {
            ctx,
            opt: *opt,
            flusher: L2Flusher::new(ctx)?,
        })
    }

    /// `launch` timed on its own ([`sample_launches`]).
    pub fn one(&self, launch: impl FnMut() -> Result<()>) -> Result<Summary> {
        sample_launches(self.ctx, &self.flusher, &self.opt, launch).map(Summary::of)
    }

    /// `launches` timed in interleaved rounds ([`sample_interleaved`]): each one's summary, in
    /// order, once the stream is idle.
    pub fn interleaved(
        &self,
        launches: &mut [&mut dyn FnMut() -> Result<()>],
    ) -> Result<Vec<Summary>> {
        let times = sample_interleaved(self.ctx, &self.flusher, &self.opt, launches)?;
        self.ctx.synchronize()?;
        Ok(times.into_iter().map(|(t, _)| Summary::of(t)).collect())
    }
}

/// Summary statistics of a set of times (ms).
pub fn stats(times: &mut [f64]) -> (f64, f64, f64) {
    times.sort_by(|a, b| a.total_cmp(b));
    let n = times.len();
    let median = if n % 2 == 1 {
        times[n / 2]
    } else {
        0.5 * (times[n / 2 - 1] + times[n / 2])
    };
    (median, times[0], times[n - 1])
}

/// Device buffers for one problem filled with random data (C random too, in case beta != 0).
pub struct BenchBuffers {
    pub a: DeviceBuffer,
    pub b: DeviceBuffer,
    pub c: DeviceBuffer,
}

impl BenchBuffers {
    /// A, B and C of `p` filled on the GPU from `seed` ([`device_data`]): one pass over device
    /// memory, so the largest problem that fits is set up in well under a second (the host
    /// generator took minutes). The padding between a row's end and its leading dimension is
    /// left as allocated: no kernel reads it. Waits until the fills are done.
    pub fn random(ctx: &Context, p: &GemmProblem, seed: u64) -> Result<BenchBuffers> {
        let made = |dtype: crate::ops::gemm::DType, elems, (rows, cols), ld, seed| {
            let buf = ctx.alloc(elems * dtype.size())?;
            device_data::fill(ctx, &buf, dtype, (rows, cols, ld), seed)?;
            Ok::<_, crate::error::Error>(buf)
        };
        let bufs = BenchBuffers {
            a: made(p.input, p.a_elems(), p.a_storage(), p.lda, seed)?,
            b: made(
                p.input,
                p.b_elems(),
                p.b_storage(),
                p.ldb,
                seed.wrapping_add(1),
            )?,
            c: made(
                p.output,
                p.c_elems(),
                (p.m, p.n),
                p.ldc,
                seed.wrapping_add(2),
            )?,
        };
        ctx.synchronize()?;
        Ok(bufs)
    }

    pub fn operands(&self) -> GemmOperands<'_> {
        GemmOperands {
            a: &self.a,
            b: &self.b,
            c: &self.c,
        }
    }
}

/// How [`L2Flusher`] empties L2 before a timed launch (`KILN_FLUSH`, carried by the context's
/// overrides).
pub use crate::overrides::FlushMode;

/// The read flush's kernel.
pub fn read_flush_spec(arch: &str) -> KernelSpec {
    KernelSpec::new("harness/l2_read_flush.cu", "l2_read_flush", arch)
}

/// A buffer twice the L2 size, read or overwritten ([`FlushMode`]) before each timed launch to
/// evict whatever the last launch left in L2.
pub struct L2Flusher {
    buf: DeviceBuffer,
    sink: DeviceBuffer,
    pub mode: FlushMode,
}

impl L2Flusher {
    /// A flusher in the mode the context's overrides name (`KILN_FLUSH`).
    pub fn new(ctx: &Context) -> Result<L2Flusher> {
        L2Flusher::with_mode(ctx, ctx.overrides.bench.flush)
    }

    pub fn with_mode(ctx: &Context, mode: FlushMode) -> Result<L2Flusher> {
        let buf = DeviceBuffer::new((ctx.info.l2_bytes as usize * 2).max(64 << 20))?;
        // Zeroed once, so that the read flush reads initialised memory and never hits its sink.
        buf.fill_bytes(0, ctx)?;
        if mode == FlushMode::Read {
            ctx.function(&read_flush_spec(&ctx.arch()))?;
        }
        Ok(L2Flusher {
            buf,
            sink: DeviceBuffer::new(16)?,
            mode,
        })
    }

    pub fn flush(&self, ctx: &Context) -> Result<()> {
        match self.mode {
            FlushMode::Memset => self.buf.fill_bytes(0, ctx),
            FlushMode::Read => read_buffer(ctx, &self.buf, self.buf.bytes(), &self.sink),
        }
    }
}

/// Enqueues `l2_read_flush` over the first `bytes` (rounded down to 16) of `buf`; `sink` (at
/// least 4 bytes) takes the write that never happens on a zeroed buffer. Also the read ceiling
/// `kiln peak` measures.
pub fn read_buffer(
    ctx: &Context,
    buf: &DeviceBuffer,
    bytes: usize,
    sink: &DeviceBuffer,
) -> Result<()> {
    let f = ctx.function(&read_flush_spec(&ctx.arch()))?;
    let lc = LaunchConfig::simple((ctx.info.sm_count * 4, 1, 1), 512);
    let (mut src, mut out) = (buf.ptr(), sink.ptr());
    let mut n16 = (bytes.min(buf.bytes()) / 16) as u64;
    // SAFETY: the kernel takes (const u32x4*, u64, u32*) in this order; it reads `n16` 16-byte
    // words of `buf` (inside it) and may write the first word of `sink`.
    unsafe {
        f.launch(
            ctx.stream,
            &lc,
            &mut [
                &mut src as *mut u64 as *mut _,
                &mut n16 as *mut u64 as *mut _,
                &mut out as *mut u64 as *mut _,
            ],
        )
    }
}

impl BenchOptions {
    /// (warm-up rounds, warm-up ms, timed repetitions) after a first launch of `first_ms`: one
    /// over 100 ms (a version far behind, such as the naive rung at 8192^3) gets no warm-up and
    /// at most 5 repetitions instead of holding the run for minutes.
    fn plan(&self, first_ms: f64) -> (usize, f64, usize) {
        if first_ms > 100.0 {
            (0, 0.0, self.reps.min(5))
        } else {
            (self.warmup, self.warmup_ms, self.reps)
        }
    }
}

/// GPU time (ms) of one chunk of timed warm-up: about 50 ms, so a chunk's events measure the
/// load and the host waits on them rarely.
const WARMUP_CHUNK_MS: f64 = 50.0;

/// Rounds in the next warm-up chunk: enough to cover `remaining_ms` (at most one chunk) at
/// `round_ms` a round, at least one.
fn chunk_rounds(remaining_ms: f64, round_ms: f64) -> usize {
    let rounds = remaining_ms.min(WARMUP_CHUNK_MS) / round_ms.max(1e-4);
    rounds.ceil().clamp(1.0, 1e6) as usize
}

/// Warm-up after the first launches: `rounds` rounds (each launch once per round), then, for
/// `warmup_ms` > 0, chunks of rounds between events until their measured GPU time reaches it. Each
/// chunk is sized from the last one's time, never from the first launch's alone: that can
/// carry one-time costs (a workspace allocated, a library's plan built) and would cut a
/// second of warm-up to a few launches.
pub fn warm_up(
    ctx: &Context,
    rounds: usize,
    warmup_ms: f64,
    first_round_ms: f64,
    launches: &mut [&mut dyn FnMut() -> Result<()>],
) -> Result<()> {
    let round = |launches: &mut [&mut dyn FnMut() -> Result<()>]| -> Result<()> {
        launches.iter_mut().try_for_each(|launch| launch())
    };
    for _ in 0..rounds {
        round(launches)?;
    }
    let (mut done, mut round_ms) = (0.0, first_round_ms);
    while done < warmup_ms {
        let n = chunk_rounds(warmup_ms - done, round_ms);
        let (start, end) = (ctx.event()?, ctx.event()?);
        start.record(ctx)?;
        for _ in 0..n {
            round(launches)?;
        }
        end.record(ctx)?;
        let ms = start.elapsed_ms(&end)? as f64;
        done += ms;
        round_ms = ms / n as f64;
    }
    ctx.synchronize()
}

/// The time (ms) of one launch between its own pair of events.
pub fn time_one(ctx: &Context, launch: &mut dyn FnMut() -> Result<()>) -> Result<f64> {
    let (s0, e0) = (ctx.event()?, ctx.event()?);
    s0.record(ctx)?;
    launch()?;
    e0.record(ctx)?;
    Ok(s0.elapsed_ms(&e0)? as f64)
}

/// Event times (ms) of `launch` under `opt`, warm-up excluded. The first launch is timed on
/// its own, to plan the rest ([`BenchOptions::plan`]).
pub fn sample_launches(
    ctx: &Context,
    flusher: &L2Flusher,
    opt: &BenchOptions,
    launch: impl FnMut() -> Result<()>,
) -> Result<Vec<f64>> {
    sample_launches_after(ctx, flusher, opt, || Ok(()), launch)
}

/// [`sample_launches`] with `pre` enqueued, untimed, between each timed launch's L2 flush and its
/// start event (a lab bench's warm code before cold data).
pub fn sample_launches_after(
    ctx: &Context,
    flusher: &L2Flusher,
    opt: &BenchOptions,
    pre: impl FnMut() -> Result<()>,
    mut launch: impl FnMut() -> Result<()>,
) -> Result<Vec<f64>> {
    let first_ms = time_one(ctx, &mut launch)?;
    let (rounds, warmup_ms, reps) = opt.plan(first_ms);
    warm_up(ctx, rounds, warmup_ms, first_ms, &mut [&mut launch])?;
    timed_reps_after(ctx, flusher, opt.flush_l2, reps, pre, launch)
}

/// `reps` (at least one) launches, each between its own pair of events, L2 flushed before each
/// when `flush_l2`; their times in ms.
pub fn timed_reps(
    ctx: &Context,
    flusher: &L2Flusher,
    flush_l2: bool,
    reps: usize,
    launch: impl FnMut() -> Result<()>,
) -> Result<Vec<f64>> {
    timed_reps_after(ctx, flusher, flush_l2, reps, || Ok(()), launch)
}

/// [`timed_reps`] with `pre` enqueued, untimed, after each flush and before each start event.
pub fn timed_reps_after(
    ctx: &Context,
    flusher: &L2Flusher,
    flush_l2: bool,
    reps: usize,
    mut pre: impl FnMut() -> Result<()>,
    mut launch: impl FnMut() -> Result<()>,
) -> Result<Vec<f64>> {
    let events: Vec<_> = (0..reps.max(1))
        .map(|_| Ok((ctx.event()?, ctx.event()?)))
        .collect::<Result<_>>()?;
    for (start, end) in &events {
        if flush_l2 {
            flusher.flush(ctx)?;
        }
        pre()?;
        start.record(ctx)?;
        launch()?;
        end.record(ctx)?;
    }
    events
        .iter()
        .map(|(s, e)| s.elapsed_ms(e).map(|t| t as f64))
        .collect()
}

/// Interleaved timing of several launches (see [`BenchOptions::interleave`]): each launched
/// once (timed: over 100 ms for any of them cuts the warm-up and repetitions as in
/// [`sample_launches`]), warmed up, then `reps` rounds of one launch each, every launch between
/// its own events with L2 flushed before it. Each launch's GPU times (ms) and host times of its
/// launch calls (µs), in order.
pub fn sample_interleaved(
    ctx: &Context,
    flusher: &L2Flusher,
    opt: &BenchOptions,
    launches: &mut [&mut dyn FnMut() -> Result<()>],
) -> Result<Vec<(Vec<f64>, Vec<f64>)>> {
    let (mut first_ms, mut first_round_ms) = (0.0f64, 0.0);
    for launch in launches.iter_mut() {
        let ms = time_one(ctx, launch)?;
        first_ms = first_ms.max(ms);
        first_round_ms += ms;
    }
    let (rounds, warmup_ms, reps) = opt.plan(first_ms);
    warm_up(ctx, rounds, warmup_ms, first_round_ms, launches)?;
    let n = launches.len();
    let events: Vec<_> = (0..reps.max(1) * n)
        .map(|_| Ok((ctx.event()?, ctx.event()?)))
        .collect::<Result<_>>()?;
    let mut host_us = vec![Vec::with_capacity(reps.max(1)); n];
    for round in events.chunks(n) {
        for (i, ((start, end), launch)) in round.iter().zip(launches.iter_mut()).enumerate() {
            if opt.flush_l2 {
                flusher.flush(ctx)?;
            }
            start.record(ctx)?;
            let t = std::time::Instant::now();
            launch()?;
            host_us[i].push(t.elapsed().as_secs_f64() * 1e6);
            end.record(ctx)?;
        }
    }
    let mut times = vec![Vec::with_capacity(reps.max(1)); n];
    for round in events.chunks(n) {
        for (i, (s, e)) in round.iter().enumerate() {
            times[i].push(s.elapsed_ms(e)? as f64);
        }
    }
    Ok(times.into_iter().zip(host_us).collect())
}

/// The summary of `kernel`'s `times` (ms) on `p`.
pub fn timing_of(kernel: &dyn GemmKernel, p: &GemmProblem, times: Vec<f64>) -> Timing {
    let s = Summary::of(times);
    Timing {
        version: kernel.name().into(),
        problem: *p,
        median_ms: s.median_ms,
        min_ms: s.min_ms,
        max_ms: s.max_ms,
        reps: s.reps,
        tflops: s.rate(p.flops(), 1e12),
        gbps: s.rate(p.min_bytes(), 1e9),
        host_us: None,
    }
}

/// Times `kernel` on `p` with the given buffers.
pub fn time_gemm(
    ctx: &Context,
    kernel: &dyn GemmKernel,
    p: &GemmProblem,
    bufs: &BenchBuffers,
    flusher: &L2Flusher,
    opt: &BenchOptions,
) -> Result<Timing> {
    let ops = bufs.operands();
    let times = sample_launches(ctx, flusher, opt, || kernel.launch(ctx, p, &ops))?;
    Ok(timing_of(kernel, p, times))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timed_warmup_runs_in_measured_chunks() {
        assert_eq!(chunk_rounds(1000.0, 6.0), 9); // a chunk is ~50 ms: ceil(50 / 6)
        assert_eq!(chunk_rounds(20.0, 6.0), 4); // the remainder only
        assert_eq!(chunk_rounds(1000.0, 400.0), 1); // at least one round
        assert_eq!(chunk_rounds(1000.0, 0.0), 500_000); // an unmeasurable round: capped by 1e-4 ms
        let timed = BenchOptions {
            warmup_ms: 1000.0,
            ..BenchOptions::default()
        };
        assert_eq!(timed.plan(6.0), (5, 1000.0, 30));
        assert_eq!(timed.plan(150.0), (0, 0.0, 5)); // a version far behind is not held
    }

    #[test]
    fn flush_labels_say_the_mode_that_ran() {
        assert_eq!(FlushMode::Read.label(false), "none");
        assert_eq!(FlushMode::Read.label(true), "read");
        assert_eq!(FlushMode::Memset.label(true), "memset");
        assert_eq!(FlushMode::Memset.label(false), "none");
    }

    #[test]
    fn a_row_keeps_each_familys_keys_and_formats_its_cells() {
        let s = Summary::of(vec![0.5, 0.25, 1.0]);
        let ms = Row::timed(&s, Times::Ms)
            .with("version", "v")
            .with("config", None::<String>)
            .with("speedup", 1.0463);
        let keys: Vec<&String> = ms.0.keys().collect();
        let want = [
            "config",
            "max_ms",
            "median_ms",
            "min_ms",
            "reps",
            "speedup",
            "version",
        ];
        assert_eq!(keys, want);
        assert_eq!(ms.0["reps"], serde_json::json!(3));
        assert_eq!(
            (ms.text("version"), ms.text("config")),
            ("v".into(), String::new())
        );
        assert_eq!(
            (ms.fixed("median_ms", 4), ms.ratio("speedup", 3)),
            ("0.5000".into(), "1.046x".into())
        );
        assert_eq!(
            (ms.fixed("config", 2), ms.has("config"), ms.has("reps")),
            (String::new(), false, true)
        );
        let us = Row::timed(&s, Times::Us);
        assert_eq!(
            (us.num("median_us"), us.num("max_us"), us.has("reps")),
            (Some(500.0), Some(1000.0), false)
        );
    }

    #[test]
    fn stats_are_median_min_max() {
        assert_eq!(stats(&mut [3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(stats(&mut [4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
    }
}
