//! Attention backward timing: random Q, K, V and dO made on the GPU, O and LSE from kiln's forward
//! (once, untimed), then the whole backward (its three passes) timed with CUDA events, L2
//! flushed before every repetition; TFLOPS counted as FlashAttention does, 2.5 forwards.

use super::device_inputs;
use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::harness::bench::{kernel_row, sample_launches, BenchOptions, L2Flusher, Row};
use crate::harness::verify::refusal;
use crate::ops::attention::{check_buffers, AttentionKernel, AttentionOperands};
use crate::ops::attention_backward::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};

/// The nine buffers of one backward: inputs random, O and LSE from the forward.
pub struct BackwardBuffers {
    bufs: [DeviceBuffer; 9],
}

impl BackwardBuffers {
    /// Q, K, V and dO of `p` filled on the GPU from `seed`, then `forward` run once for O and
    /// LSE. Waits until done.
    pub fn new(
        ctx: &Context,
        forward: &dyn AttentionKernel,
        p: &BackwardProblem,
        seed: u64,
    ) -> Result<BackwardBuffers> {
        let (a, q, kv) = (&p.attn, p.attn.q_elems(), p.attn.kv_elems());
        let inputs = device_inputs(ctx, a.dtype, [q, kv, kv, q], seed)?;
        let bufs = BackwardBuffers::around(ctx, forward, p, inputs)?;
        ctx.synchronize()?;
        Ok(bufs)
    }

    /// The buffers around `inputs` (Q, K, V and dO): O and LSE from `forward`, launched and not
    /// waited for (its refusal said as the forward's), and the gradients allocated.
    pub fn around(
        ctx: &Context,
        forward: &dyn AttentionKernel,
        p: &BackwardProblem,
        [q, k, v, d_o]: [DeviceBuffer; 4],
    ) -> Result<BackwardBuffers> {
        let a = &p.attn;
        let e = a.dtype.size();
        let bufs = [
            q,
            k,
            v,
            ctx.alloc(a.q_elems() * e)?,
            d_o,
            ctx.alloc(a.lse_elems() * 4)?,
            ctx.alloc(a.q_elems() * e)?,
            ctx.alloc(a.kv_elems() * e)?,
            ctx.alloc(a.kv_elems() * e)?,
        ];
        let fwd = AttentionOperands {
            q: &bufs[0],
            k: &bufs[1],
            v: &bufs[2],
            o: &bufs[3],
            lse: &bufs[5],
        };
        check_buffers(a, &fwd)?;
        if let Some(reason) = refusal(forward.launch(ctx, a, &fwd))? {
            return Err(Error::Unsupported {
                kernel: forward.name().into(),
                reason: format!("the forward that makes O and LSE refused: {reason}"),
            });
        }
        Ok(BackwardBuffers { bufs })
    }

    pub fn operands(&self) -> BackwardOperands<'_> {
        BackwardOperands::from_array(&self.bufs)
    }
}

/// Every timed launch of `k` on `p`'s buffers `bufs`, L2 flushed as `opt` says: the version
/// table's row (median, TFLOPS as FlashAttention counts).
pub fn time_backward(
    ctx: &Context,
    k: &dyn AttentionBackwardKernel,
    p: &BackwardProblem,
    bufs: &BackwardBuffers,
    flusher: &L2Flusher,
    opt: &BenchOptions,
) -> Result<Row> {
    let ops = bufs.operands();
    let times = sample_launches(ctx, flusher, opt, || k.launch(ctx, p, &ops))?;
    Ok(kernel_row(k.name(), p, p.flops(), times))
}
