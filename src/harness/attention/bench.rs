//! Attention timing: CUDA events around each launch, warm-up excluded, L2 flushed before every
//! timed repetition, random inputs made on the GPU, median/min/max and TFLOPS (unmasked pairs only).

use crate::device::{Context, DeviceBuffer};
use crate::error::Result;

use super::decode::DecodeSpec;
use super::decode_check::DecodeBuffers;
use super::device_inputs;
use crate::harness::bench::{
    kernel_row, sample_launches, BenchOptions, L2Flusher, Row, Summary, Times,
};
use crate::ops::attention::decode_paged;
use crate::ops::attention::{AttentionKernel, AttentionOperands, AttentionProblem};
use crate::ops::gemm::DType;

/// Random Q, K, V and output buffers for one problem.
pub struct AttnBuffers {
    pub q: DeviceBuffer,
    pub k: DeviceBuffer,
    pub v: DeviceBuffer,
    pub o: DeviceBuffer,
    pub lse: DeviceBuffer,
}

impl AttnBuffers {
    /// Q, K and V of `p` (their spans under its strides) filled on the GPU from `seed`
    /// ([`device_inputs`]), O and LSE as allocated (every launch writes them whole). Waits until
    /// the fills are done.
    pub fn random(ctx: &Context, p: &AttentionProblem, seed: u64) -> Result<AttnBuffers> {
        let [qn, kn, vn, on] = p.spans();
        let [q, k, v] = device_inputs(ctx, p.dtype, [qn, kn, vn], seed)?;
        let bufs = AttnBuffers {
            q,
            k,
            v,
            o: ctx.alloc(on * p.dtype.size())?,
            lse: ctx.alloc(p.lse_elems() * DType::F32.size())?,
        };
        ctx.synchronize()?;
        Ok(bufs)
    }
    pub fn operands(&self) -> AttentionOperands<'_> {
        AttentionOperands {
            q: &self.q,
            k: &self.k,
            v: &self.v,
            o: &self.o,
            lse: &self.lse,
        }
    }
}

/// Times `kernel` on `p` with the given buffers: its [`kernel_row`], TFLOPS over unmasked pairs.
pub fn time_attention(
    ctx: &Context,
    kernel: &dyn AttentionKernel,
    p: &AttentionProblem,
    bufs: &AttnBuffers,
    flusher: &L2Flusher,
    opt: &BenchOptions,
) -> Result<Row> {
    let ops = bufs.operands();
    let times = sample_launches(ctx, flusher, opt, || kernel.launch(ctx, p, &ops))?;
    Ok(kernel_row(kernel.name(), p, p.flops(), times))
}

/// Times one decode step of `spec` (random data made on the GPU; the append is not timed).
pub fn time_decode(ctx: &Context, spec: &DecodeSpec, seed: u64, opt: &BenchOptions) -> Result<Row> {
    let p = spec.problem(seed)?;
    let s = spec.shape(&p);
    let bufs = DecodeBuffers::random(ctx, spec, &p, seed)?;
    ctx.synchronize()?;
    let ops = bufs.operands(0);
    decode_paged::check_operands(&s, &ops)?;
    let flusher = L2Flusher::new(ctx)?;
    let mut splits = 1;
    let times = sample_launches(ctx, &flusher, opt, || {
        splits = decode_paged::launch(ctx, &s, &ops)?.splits;
        Ok(())
    })?;
    let cache_bytes = s.cache_bytes_read(&p.context_lens);
    Ok(decode_row(spec, splits, times, cache_bytes))
}

/// The row of a decode step of `spec` in `splits` from its launches' `times` (ms, in launch
/// order): the times in µs with `reps`, `spec`, `splits`, `cache_bytes` (the K and V bytes of
/// every context, once), `gbps` of them, and `times_ms`.
pub fn decode_row(spec: &DecodeSpec, splits: usize, times: Vec<f64>, cache_bytes: u64) -> Row {
    let s = Summary::of(times.clone());
    Row::timed(&s, Times::Us)
        .with("reps", s.reps)
        .with("spec", spec)
        .with("splits", splits)
        .with("cache_bytes", cache_bytes)
        .with("gbps", s.rate(cache_bytes as f64, 1e9))
        .with("times_ms", times)
}
