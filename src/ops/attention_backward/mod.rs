//! Attention backward: dQ, dK and dV from Q, K, V, O, dO and the forward's LSE; the problem, the
//! versions (one host file per device file under `kernels/attention/bwd_*`), and their interface.

pub mod bwd_fa2_mma_sync;
pub mod bwd_fa3_bulk_dq;
pub mod bwd_fa3_d256;
pub mod bwd_fa3_d256_lpt;
pub mod bwd_fa3_d256_ordered;
pub mod bwd_fa3_d256_persist;
pub mod bwd_fa3_dq_late;
pub mod bwd_fa3_lookahead;
pub mod bwd_fa3_m128;
pub mod bwd_fa3_m128_fma;
pub mod bwd_fa3_m128_rows;
pub mod bwd_fa3_ordered_eager;
pub mod bwd_fa3_ordered_w2;
pub mod bwd_fa3_tail;
pub mod bwd_fa3_tma_dq;
pub mod bwd_fa3_wgmma;
pub mod bwd_prep;
pub mod det_schedule;
pub mod dq_fused;
pub mod knobs;
pub mod lpt;
pub mod problem;
pub mod tail;
pub mod varlen;

use std::ffi::c_void;

pub use problem::BackwardProblem;

use crate::device::{Context, DeviceBuffer, DeviceInfo};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::attention::{Window, DTYPES, WINDOW_UNBOUNDED};
use crate::ops::gemm::alignment;
use crate::overrides::AttentionOverrides;

/// The device buffers of one backward call. O, dO and dQ have Q's layout, dK and dV K's; LSE is
/// fp32 [B, H, Sq] as the forward writes it.
pub struct BackwardOperands<'a> {
    pub q: &'a DeviceBuffer,
    pub k: &'a DeviceBuffer,
    pub v: &'a DeviceBuffer,
    pub o: &'a DeviceBuffer,
    pub d_o: &'a DeviceBuffer,
    pub lse: &'a DeviceBuffer,
    pub dq: &'a DeviceBuffer,
    pub dk: &'a DeviceBuffer,
    pub dv: &'a DeviceBuffer,
}

impl<'a> BackwardOperands<'a> {
    /// The operands from nine buffers in the order q, k, v, o, dO, LSE, dQ, dK, dV.
    pub fn from_array(b: &'a [DeviceBuffer; 9]) -> Self {
        let [q, k, v, o, d_o, lse, dq, dk, dv] = b.each_ref();
        BackwardOperands {
            q,
            k,
            v,
            o,
            d_o,
            lse,
            dq,
            dk,
            dv,
        }
    }

    /// Every buffer with its name, inputs first.
    pub fn named(&self) -> [(&'static str, &DeviceBuffer); 9] {
        [
            ("Q", self.q),
            ("K", self.k),
            ("V", self.v),
            ("O", self.o),
            ("dO", self.d_o),
            ("LSE", self.lse),
            ("dQ", self.dq),
            ("dK", self.dk),
            ("dV", self.dv),
        ]
    }
}

/// One version of the attention backward.
pub trait AttentionBackwardKernel: Send + Sync {
    /// Registry name, the same as its device file's stem.
    fn name(&self) -> &'static str;
    /// One line: the technique this rung adds.
    fn summary(&self) -> &'static str;
    /// Position on the ladder (higher is expected faster).
    fn rung(&self) -> u32;
    /// `Ok` or the reason this version cannot compute `p` on `dev` (never a wrong result).
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String>;
    /// Every specialisation this version compiles to for `arch` (for `kiln check`), the
    /// preprocess and postprocess included.
    fn variants(&self, arch: &str) -> Vec<KernelSpec>;
    /// Enqueues the backward (every pass) on the context's stream, with the context's scratch
    /// workspaces and the run-time knobs `o` (the `KILN_BWD_*` ones it reads; [`Self::knobs`]).
    /// Callers have validated `p`, checked the buffers and `supports`.
    fn launch_knobs(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
        o: &AttentionOverrides,
    ) -> Result<()>;
    /// [`Self::launch_knobs`] with the knobs the context gives this version on `p`: the
    /// environment's, or the tuned config's where the environment sets none ([`knobs::resolve`]).
    fn launch(&self, ctx: &Context, p: &BackwardProblem, ops: &BackwardOperands) -> Result<()> {
        self.launch_knobs(ctx, p, ops, &knobs::resolve(ctx, self.name(), p))
    }
    /// The knobs its launch reads on `p`, each with the value it takes unset: the space `kiln
    /// tune attn --backward` searches (empty: nothing to tune on `p`).
    fn knobs(&self, p: &BackwardProblem) -> knobs::Knobs {
        let _ = p;
        Vec::new()
    }
    /// Whether the default choice (no version requested) may pick it: false for a version the
    /// GPU has not yet shown verified and faster than the one below it.
    fn by_default(&self) -> bool {
        true
    }
    /// How its launch would put `p` on `dev`'s SMs under the knobs `o` (`kiln plan --op
    /// attn-backward`): the grid, its split or order, a line each; empty where the version says
    /// nothing beyond its grid of key blocks.
    fn launch_plan(
        &self,
        _p: &BackwardProblem,
        _dev: &DeviceInfo,
        _o: &AttentionOverrides,
    ) -> Vec<String> {
        Vec::new()
    }
    /// The same for `p`: `by_default()`, unless the version measured faster at some shapes only.
    fn by_default_for(&self, p: &BackwardProblem) -> bool {
        let _ = p;
        self.by_default()
    }
}

/// The argument block, laid out as `AttnBwdArgs` in `kernels/attention/attn_bwd_args.cuh`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AttnBwdArgs {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub d_o: u64,
    pub lse: u64,
    /// fp32 [B, H, Sq]: rowsum(dO ∘ O).
    pub delta: u64,
    /// fp32 [B, H, Sq, D]: dQ before scaling and rounding.
    pub dq_acc: u64,
    pub dq: u64,
    pub dk: u64,
    pub dv: u64,
    /// Deterministic mode: u32 [B, H, m_blocks] counters; 0: atomics in any order.
    pub dq_sem: u64,
    /// Q, O, dO and dQ strides (elements): batch, head, sequence.
    pub q_sb: i64,
    pub q_sh: i64,
    pub q_ss: i64,
    /// K, V, dK and dV strides (elements).
    pub kv_sb: i64,
    pub kv_sh: i64,
    pub kv_ss: i64,
    pub batch: i32,
    pub heads_q: i32,
    pub group: i32,
    pub sq: i32,
    pub skv: i32,
    pub d: i32,
    pub causal: i32,
    pub scale_log2: f32,
    pub scale: f32,
    /// The main kernel's query rows per block, and the number of such blocks.
    pub m_block: i32,
    pub m_blocks: i32,
    /// 0 bf16, 1 f16 (the preprocess and postprocess take it at run time).
    pub dtype: i32,
    /// The deterministic mode's order of dQ adds with a dQ writer warp (`DetOrder`; ignored by
    /// every kernel without one).
    pub det_order: i32,
    /// Blocks that run at once (one per SM): the groups of `DetOrder::Rotated`.
    pub det_sms: i32,
    /// `KILN_BWD_WINDOW`: the window's bounds, causal folded into the right one, an unbounded side
    /// as [`WINDOW_UNBOUNDED`] ([`Window::bounds`]).
    pub win_left: i32,
    pub win_right: i32,
    /// `KILN_BWD_VARLEN`: the cumulative query and key offsets, i32 [sequences + 1] (the grid's
    /// z); 0 for a dense problem.
    pub cu_q: u64,
    pub cu_k: u64,
    /// `KILN_BWD_VARLEN`: a host-mapped word the kernel sets to 1 when the offsets are bad; 0:
    /// not recorded.
    pub errors: u64,
    /// The WGMMA kernels' block order: 0 the grid's; g > 0 (`KILN_BWD_LPT`, causal) longest walk
    /// first in chunks of g (key/value head, batch) pairs ([`lpt`]).
    pub lpt_heads: i32,
    /// The deterministic mode's dQ writer warps (`KILN_BWD_DET_WRITERS`): 2, warps 1 and 2 take
    /// the query blocks in turn; else 1 (ignored by every kernel without a writer).
    pub det_writers: i32,
    /// `KILN_BWD_TAIL` ([`tail`]): 0, or the blocks each split key block becomes (the grid then
    /// 1D: `tail_full` whole key blocks first, in the grid's order, then the split ones' parts).
    pub tail_parts: i32,
    pub tail_full: i32,
    /// u32 [split key blocks] counters, zero between launches; then (`tail_acc`) the parts' fp32
    /// dK and dV partials. (`bwd_fa3_d256_persist`: `tail_sem` its two work counters.)
    pub tail_sem: u64,
    pub tail_acc: u64,
    /// A diagnostic (`kiln attn bench --backward --det-trace`; 0 otherwise): u32 records of the
    /// d256 ordered adds' time stamps ([`bwd_fa3_d256_ordered::TRACE_WORDS`] a record), written
    /// only by the kernels compiled with `KILN_D256_TRACE`.
    pub det_trace: u64,
}

/// The order in which a dQ writer warp (`bwd_fa3_ordered_eager`) adds the key blocks' partials of a
/// query block in the deterministic mode (the argument block's `det_order`; `det_rank` in
/// `kernels/attention/bwd_fa3_block.cuh`). Any fixed order gives the same bits run after run;
/// these make a block's turn come about when it gets there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(i32)]
pub enum DetOrder {
    /// Key block 0 first: each waits only for blocks launched before it (the fallback).
    Ascending = 0,
    /// Non-causal: the blocks of a (batch, head) launched in one wave each start their walk a
    /// few query blocks after the previous one, and add in the order they reach a query block.
    Rotated = 1,
    /// Causal: the last key block first (it reaches a query block first: its walk starts later),
    /// and the key blocks launched in reverse, so that every block waited for started earlier.
    Descending = 2,
}

impl DetOrder {
    /// The order for `p`. A block may wait only for blocks launched before it or beside it (one
    /// block a SM): the rotated order waits within a wave of SM-count blocks; the descending one,
    /// launched in reverse, on earlier blocks only, at any length (until 2026-11-29, launched in
    /// order, it needed a head's key blocks on the SMs at once and fell back to ascending past
    /// that). `det_schedule` checks both on the CPU.
    pub fn of(p: &BackwardProblem) -> DetOrder {
        if p.attn.causal {
            DetOrder::Descending
        } else {
            DetOrder::Rotated
        }
    }
}

/// The workspaces of one call (device addresses): D, the dQ accumulator and the counters.
#[derive(Debug, Clone, Copy)]
pub struct BackwardWorkspace {
    pub delta: u64,
    pub dq_acc: u64,
    pub dq_sem: u64,
}

impl BackwardWorkspace {
    /// The context's scratch buffers grown to what `p` needs with query blocks of `m_block`
    /// rows (the counters only in deterministic mode).
    pub fn of(ctx: &Context, p: &BackwardProblem, m_block: usize) -> Result<BackwardWorkspace> {
        Self::with_parts(ctx, p, m_block, 1)
    }

    /// [`BackwardWorkspace::of`] with `parts` counters a query block (`bwd_fa3_d256_w2_cols2`,
    /// `_cols4`: one a column part).
    pub fn with_parts(
        ctx: &Context,
        p: &BackwardProblem,
        m_block: usize,
        parts: usize,
    ) -> Result<BackwardWorkspace> {
        let a = &p.attn;
        let s = &ctx.scratch;
        let sems = a.batch * a.heads_q * a.seqlen_q.div_ceil(m_block) * parts;
        Ok(BackwardWorkspace {
            delta: s.attn_bwd_delta.at_least(ctx, a.lse_elems() * 4)?,
            dq_acc: s.attn_bwd_dq_acc.at_least(ctx, a.q_elems() * 4)?,
            dq_sem: if p.deterministic {
                s.attn_bwd_dq_sem.at_least(ctx, sems * 4)?
            } else {
                0
            },
        })
    }
}

impl AttnBwdArgs {
    pub fn new(
        p: &BackwardProblem,
        ops: &BackwardOperands,
        ws: &BackwardWorkspace,
        m_block: usize,
    ) -> Self {
        let a = &p.attn;
        // (the backward's tensors are packed in one order: K's strides are V's, Q's are O's)
        let (qs, ks) = (a.q_strides(), a.k_strides());
        let win = a.window.bounds(a.causal, WINDOW_UNBOUNDED);
        AttnBwdArgs {
            q: ops.q.ptr(),
            k: ops.k.ptr(),
            v: ops.v.ptr(),
            o: ops.o.ptr(),
            d_o: ops.d_o.ptr(),
            lse: ops.lse.ptr(),
            delta: ws.delta,
            dq_acc: ws.dq_acc,
            dq: ops.dq.ptr(),
            dk: ops.dk.ptr(),
            dv: ops.dv.ptr(),
            dq_sem: ws.dq_sem,
            q_sb: qs.batch as i64,
            q_sh: qs.head as i64,
            q_ss: qs.seq as i64,
            kv_sb: ks.batch as i64,
            kv_sh: ks.head as i64,
            kv_ss: ks.seq as i64,
            batch: a.batch as i32,
            heads_q: a.heads_q as i32,
            group: a.group() as i32,
            sq: a.seqlen_q as i32,
            skv: a.seqlen_kv as i32,
            d: a.head_dim as i32,
            causal: a.causal as i32,
            scale_log2: a.scale * std::f32::consts::LOG2_E,
            scale: a.scale,
            m_block: m_block as i32,
            m_blocks: a.seqlen_q.div_ceil(m_block) as i32,
            dtype: a.dtype.code() as i32,
            det_order: DetOrder::Ascending as i32,
            det_sms: 0,
            win_left: win.0,
            win_right: win.1,
            cu_q: 0,
            cu_k: 0,
            errors: 0,
            lpt_heads: 0,
            det_writers: 1,
            tail_parts: 0,
            tail_full: 0,
            tail_sem: 0,
            tail_acc: 0,
            det_trace: 0,
        }
    }

    pub fn as_param(&mut self) -> *mut c_void {
        self as *mut AttnBwdArgs as *mut c_void
    }
}

/// The limits every version shares: bf16 or f16, a head dim among `dims`, the grid's batch and
/// heads, and the i32 index of the LSE and D rows.
pub fn check_shape(p: &BackwardProblem, dims: &[usize]) -> std::result::Result<(), String> {
    let a = &p.attn;
    if !DTYPES.contains(&a.dtype) {
        return Err(format!(
            "dtype {} is not supported; use bf16 or f16",
            a.dtype
        ));
    }
    if !dims.contains(&a.head_dim) {
        let list: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
        return Err(format!(
            "head_dim {} is not supported; use {}",
            a.head_dim,
            list.join(", ")
        ));
    }
    if a.batch > 65535 || a.heads_q > 65535 {
        return Err("batch and heads must each be at most 65535 (grid z and y)".into());
    }
    // The accumulator's index (row · d) is an i64, but D's and the rows' are i32 products.
    if a.lse_elems() > i32::MAX as usize {
        return Err(format!(
            "batch · heads · seqlen_q = {} exceeds {}",
            a.lse_elems(),
            i32::MAX
        ));
    }
    Ok(())
}

/// Refuses a sliding window in a version that has none, naming the one that has.
pub fn refuse_window(p: &BackwardProblem) -> std::result::Result<(), String> {
    if p.attn.window != Window::UNBOUNDED {
        return Err("has no sliding window; bwd_fa3_lookahead (d64, d128) has one".into());
    }
    Ok(())
}

/// Refuses a buffer whose start is not 16-byte aligned (LSE: 4), naming it.
pub fn check_aligned(kernel: &str, ops: &BackwardOperands) -> Result<()> {
    for (name, buf) in ops.named() {
        let need = if name == "LSE" { 4 } else { 16 };
        if alignment(buf.ptr()) < need {
            return Err(Error::Unsupported {
                kernel: kernel.into(),
                reason: format!(
                    "{name} starts at {:#x}, which is not {need}-byte aligned",
                    buf.ptr()
                ),
            });
        }
    }
    Ok(())
}

/// Checks that the buffers hold the problem's tensors.
pub fn check_buffers(p: &BackwardProblem, ops: &BackwardOperands) -> Result<()> {
    let a = &p.attn;
    let e = a.dtype.size();
    let (q, kv, lse) = (a.q_elems() * e, a.kv_elems() * e, a.lse_elems() * 4);
    let need = [q, kv, kv, q, q, lse, q, kv, kv];
    for ((name, buf), need) in ops.named().into_iter().zip(need) {
        if buf.bytes() < need {
            return Err(Error::invalid(format!(
                "{name} needs {need} bytes for this shape but its buffer has {} (the backward takes {name} shaped as {})",
                buf.bytes(),
                match name {
                    "LSE" => "[batch, heads, seqlen_q] f32, as the forward writes it",
                    "K" | "V" | "dK" | "dV" => "K",
                    _ => "Q",
                }
            )));
        }
    }
    Ok(())
}

/// Compiles every spec for sm_90a without the cache and fails on local memory (spills or a
/// stack frame) and on any of ptxas's `notes` in the log (the versions' compile tests).
#[cfg(test)]
pub(crate) fn assert_compiles_clean(specs: Vec<KernelSpec>, notes: &[&str]) {
    for spec in specs {
        let c = crate::jit::Jit::without_cache()
            .compile(&spec)
            .unwrap_or_else(|e| panic!("{}: {e}", spec.label()));
        assert!(!c.resources.spills(), "{}: {}", spec.label(), c.log);
        assert_eq!(c.resources.stack_frame, 0, "{}: {}", spec.label(), c.log);
        for note in notes {
            assert!(!c.log.contains(note), "{}: {}", spec.label(), c.log);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attn_bwd_args_match_the_device_layout() {
        assert_eq!(std::mem::offset_of!(AttnBwdArgs, dq_sem), 88);
        assert_eq!(std::mem::offset_of!(AttnBwdArgs, q_sb), 96);
        assert_eq!(std::mem::offset_of!(AttnBwdArgs, batch), 144);
        assert_eq!(std::mem::offset_of!(AttnBwdArgs, causal), 168);
        assert_eq!(std::mem::offset_of!(AttnBwdArgs, scale_log2), 172);
        assert_eq!(std::mem::offset_of!(AttnBwdArgs, m_block), 180);
        assert_eq!(std::mem::offset_of!(AttnBwdArgs, dtype), 188);
        assert_eq!(std::mem::offset_of!(AttnBwdArgs, det_sms), 196);
        assert_eq!(std::mem::offset_of!(AttnBwdArgs, win_left), 200);
        assert_eq!(std::mem::offset_of!(AttnBwdArgs, cu_q), 208);
        assert_eq!(std::mem::offset_of!(AttnBwdArgs, errors), 224);
        assert_eq!(std::mem::offset_of!(AttnBwdArgs, lpt_heads), 232);
        assert_eq!(std::mem::offset_of!(AttnBwdArgs, det_writers), 236);
        assert_eq!(std::mem::offset_of!(AttnBwdArgs, tail_parts), 240);
        assert_eq!(std::mem::offset_of!(AttnBwdArgs, tail_full), 244);
        assert_eq!(std::mem::offset_of!(AttnBwdArgs, tail_sem), 248);
        assert_eq!(std::mem::offset_of!(AttnBwdArgs, tail_acc), 256);
        assert_eq!(std::mem::offset_of!(AttnBwdArgs, det_trace), 264);
        assert_eq!(std::mem::size_of::<AttnBwdArgs>(), 272);
    }
}
