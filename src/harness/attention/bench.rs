//! Attention timing: CUDA events around each launch, warm-up excluded, L2 flushed before every
//! timed repetition, random inputs made on the GPU, median/min/max and TFLOPS (unmasked pairs only).

use crate::device::{Context, DeviceBuffer};
use crate::error::Result;
use crate::harness::bench::{sample_launches, BenchOptions, KernelTiming, L2Flusher};
use crate::harness::device_data::random_buffer;
use crate::ops::attention::{AttentionKernel, AttentionOperands, AttentionProblem};
use crate::ops::gemm::DType;

/// The forward's timings: TFLOPS over unmasked pairs.
pub type AttnTiming = KernelTiming<AttentionProblem>;

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
    /// ([`random_buffer`]), O and LSE as allocated (every launch writes them whole). Waits until the fills are done.
    pub fn random(ctx: &Context, p: &AttentionProblem, seed: u64) -> Result<AttnBuffers> {
        let [q, k, v, o] = p.spans();
        let bufs = AttnBuffers {
            q: random_buffer(ctx, p.dtype, q, seed)?,
            k: random_buffer(ctx, p.dtype, k, seed.wrapping_add(1))?,
            v: random_buffer(ctx, p.dtype, v, seed.wrapping_add(2))?,
            o: ctx.alloc(o * p.dtype.size())?,
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

/// Times `kernel` on `p` with the given buffers.
pub fn time_attention(
    ctx: &Context,
    kernel: &dyn AttentionKernel,
    p: &AttentionProblem,
    bufs: &AttnBuffers,
    flusher: &L2Flusher,
    opt: &BenchOptions,
) -> Result<AttnTiming> {
    let ops = bufs.operands();
    let times = sample_launches(ctx, flusher, opt, || kernel.launch(ctx, p, &ops))?;
    Ok(AttnTiming::of(kernel.name(), *p, p.flops(), times))
}
