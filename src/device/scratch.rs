//! Scratch memory that kernels keep across launches (split-K partials, work counters, partial
//! softmax states): one buffer per use and per context, grown on demand and never shrunk.

use std::sync::Mutex;

use super::{Context, DeviceBuffer};
use crate::error::{Error, Result};

/// A grow-only device buffer behind a lock, owned by a context ([`Workspaces`]). With `zeroed`,
/// every allocation is filled with zeros: for counters that the kernels return to 0 themselves,
/// so that zeroing once per allocation keeps them at 0 between launches.
pub struct Scratch {
    what: &'static str,
    zeroed: bool,
    buf: Mutex<Option<DeviceBuffer>>,
}

impl Scratch {
    /// `what` names the buffer in errors.
    pub const fn new(what: &'static str, zeroed: bool) -> Scratch {
        Scratch {
            what,
            zeroed,
            buf: Mutex::new(None),
        }
    }

    /// The device address of a buffer of at least `bytes`. Growing waits for the launches in
    /// flight first (they may still use the old buffer), and is refused while the context's
    /// stream captures a CUDA graph ([`Context::capturing`]).
    pub fn at_least(&self, ctx: &Context, bytes: usize) -> Result<u64> {
        let mut guard = self
            .buf
            .lock()
            .map_err(|_| Error::invalid(format!("the {} lock is poisoned", self.what)))?;
        let old = guard.as_ref().map_or(0, |b| b.bytes());
        if guard.is_none() || old < bytes {
            if ctx.capturing() {
                return Err(Error::Capture(format!(
                    "the {} would grow to {bytes} bytes during CUDA-graph capture; call `Kiln::precompile` with this problem (or run it once) before capturing",
                    self.what
                )));
            }
            ctx.synchronize()?;
            let b = ctx.alloc(bytes.max(old))?;
            if self.zeroed {
                b.fill_bytes(0, ctx)?;
            }
            *guard = Some(b);
        }
        Ok(guard.as_ref().expect("allocated above").ptr())
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.buf
            .lock()
            .map_or(0, |g| g.as_ref().map_or(0, DeviceBuffer::bytes))
    }
}

/// The scratch buffers of one context, one per use: two contexts (two GPUs, two handles) never
/// share one.
pub struct Workspaces {
    /// `wgmma_tma_ws`: the split-K workspace (fp32 partial tiles) and per-tile arrival counters.
    pub gemm_split: Scratch,
    pub gemm_split_counters: Scratch,
    /// `wgmma_tma_ws`: the copies of A, B and C it reads or writes through.
    pub gemm_a_pack: Scratch,
    pub gemm_b_pack: Scratch,
    pub gemm_c_pack: Scratch,
    /// `fa3_wgmma`: the dynamic scheduler's counters, the split items' workspace, and the parted
    /// items' partial states and counters.
    pub attn_work_counters: Scratch,
    pub attn_split: Scratch,
    pub attn_parts: Scratch,
    pub attn_parts_done: Scratch,
    /// The attention backward: D = rowsum(dO ∘ O), the fp32 dQ accumulator, and the
    /// deterministic mode's per-query-block counters (its preprocess zeroes the last two).
    pub attn_bwd_delta: Scratch,
    pub attn_bwd_dq_acc: Scratch,
    pub attn_bwd_dq_sem: Scratch,
    /// The packed backward's fp32 dQ accumulator under `KILN_BWD_DQ_FUSED=2`: zeroed when
    /// allocated, and left zero by every call (its converters zero what they read), so that no
    /// pass zeroes it; no other kernel writes it.
    pub attn_bwd_dq_acc_zero: Scratch,
    /// The attention backward's split tail (`KILN_BWD_TAIL`): the parts' fp32 dK and dV partials
    /// and a counter per split key block (zero between launches: the last part resets it).
    pub attn_bwd_tail: Scratch,
    pub attn_bwd_tail_counters: Scratch,
    /// `bwd_fa3_d256_persist`: the next key block's counter and the CTAs done (its kernel returns
    /// both to 0).
    pub attn_bwd_work: Scratch,
    /// `decode_paged`: every split's fp32 partial O and LSE.
    pub decode_partials: Scratch,
    /// `swiglu_dual`: the split tiles' workspace and counters.
    pub swiglu_split: Scratch,
    pub swiglu_split_counters: Scratch,
    /// The FP8 GEMM: the split-K workspace (per-slice slots), the atomic sums (one fp32 tile
    /// per split tile, zero between launches) and the counters.
    pub fp8_split: Scratch,
    pub fp8_split_sum: Scratch,
    pub fp8_split_counters: Scratch,
}

impl Workspaces {
    /// Every buffer empty (allocated on first use).
    pub const fn new() -> Workspaces {
        Workspaces {
            gemm_split: Scratch::new("split-K workspace", false),
            gemm_split_counters: Scratch::new("split-K counter", true),
            gemm_a_pack: Scratch::new("repacked A", false),
            gemm_b_pack: Scratch::new("repacked B", false),
            gemm_c_pack: Scratch::new("C through 128-byte rows", false),
            attn_work_counters: Scratch::new("attention work-counter", true),
            attn_split: Scratch::new("attention split-workspace", false),
            attn_parts: Scratch::new("attention parts-workspace", false),
            attn_parts_done: Scratch::new("attention parts-counter", true),
            attn_bwd_delta: Scratch::new("attention backward D workspace", false),
            attn_bwd_dq_acc: Scratch::new("attention backward dQ accumulator", false),
            attn_bwd_dq_sem: Scratch::new("attention backward dQ counter", false),
            attn_bwd_dq_acc_zero: Scratch::new("attention backward dQ accumulator kept zero", true),
            attn_bwd_tail: Scratch::new("attention backward tail partials", false),
            attn_bwd_tail_counters: Scratch::new("attention backward tail counter", true),
            attn_bwd_work: Scratch::new("attention backward work counter", true),
            decode_partials: Scratch::new("decode partials workspace", false),
            swiglu_split: Scratch::new("SwiGLU split workspace", false),
            swiglu_split_counters: Scratch::new("SwiGLU split counter", true),
            fp8_split: Scratch::new("FP8 split-K workspace", false),
            fp8_split_sum: Scratch::new("FP8 split-K sums", true),
            fp8_split_counters: Scratch::new("FP8 split-K counters", true),
        }
    }
}

impl Default for Workspaces {
    fn default() -> Self {
        Workspaces::new()
    }
}
