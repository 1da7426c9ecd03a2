//! Host side of `KILN_BWD_DQ_FUSED` (`kernels/attention/bwd_dq_fused.cuh`): the packed backward's
//! dQ converted in its main kernel, the counters that kernel keeps and how the preprocess zeroes them.
//!
//! The kernel counts each 64-row unit of a sequence's query blocks on a u32 [heads_q][slots]
//! array, slot `row / 64 + sequence` (`row` the packed row the unit starts on), so `slots` is
//! `(total_q - 1) / 64 + sequences`. The preprocess zeroes counter `m` of each head when its
//! `m_block` x `m_blocks` grid of rows holds `m`: with `m_block` 1 it zeroes the first
//! min(slots, total_q) of them, at no cost beyond the launch it makes anyway; a batch with more
//! slots than rows (almost every sequence empty) has them zeroed by a memset first.
//!
//! [`DqFused::LeaveZero`] (`KILN_BWD_DQ_FUSED=2`): the fp32 accumulator is the context's
//! `attn_bwd_dq_acc_zero`, zeroed when it is allocated (or grows) and left zero by every call
//! (the converters store zeros over the sums they read; every row that gets an add is converted
//! after it), so that the preprocess computes D only: at the packed d128 batch it no
//! longer writes 1.2 GB of zeros. A launch cannot stop part-way and leave sums behind: a kernel
//! either completes or ends the context with a sticky error (a fault, a trap, a timeout), and a
//! launch refused before it runs adds nothing.
//!
//! [`DqFused::LastBlock`] (`KILN_BWD_DQ_FUSED=3`): no writer warp; one counter per (sequence,
//! key/value head), [heads_q][sequences] words of which [heads_kv][sequences] are used, counts the
//! sequence's key blocks at their ends, and the last converts the sequence's rows of the group's
//! heads, leaving the accumulator zero as [`DqFused::LeaveZero`] does.

use super::bwd_prep;
use super::{AttnBwdArgs, BackwardProblem, BackwardWorkspace};
use crate::device::{Context, DeviceBuffer};
use crate::error::Result;
use crate::ops::attention::AttentionProblem;

/// What `KILN_BWD_DQ_FUSED` makes of the packed backward's dQ (the define's value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DqFused {
    /// The postprocess converts it (no define).
    Off,
    /// The main kernel's last adder of each 64 query rows converts them; the preprocess zeroes the
    /// shared accumulator (1).
    Convert,
    /// As `Convert`, the converters leaving the accumulator (its own workspace) zero (2).
    LeaveZero,
    /// No writer warp: the last key block of each (sequence, key/value head) converts the
    /// sequence's rows of its heads and leaves the accumulator zero (3).
    LastBlock,
}

impl DqFused {
    /// The knob's value (0, 1, 2, 3).
    pub fn from_knob(n: u32) -> DqFused {
        match n {
            0 => DqFused::Off,
            1 => DqFused::Convert,
            2 => DqFused::LeaveZero,
            _ => DqFused::LastBlock,
        }
    }

    /// The define `KILN_BWD_DQ_FUSED`'s value (0: none).
    pub fn define(self) -> u32 {
        self as u32
    }

    pub fn on(self) -> bool {
        self != DqFused::Off
    }

    /// Whether the kernel has the writer warp and its conversion queue (1, 2).
    pub fn queue(self) -> bool {
        matches!(self, DqFused::Convert | DqFused::LeaveZero)
    }

    /// Whether the call leaves its own accumulator zero (2, 3): the preprocess computes D only.
    pub fn leaves_zero(self) -> bool {
        matches!(self, DqFused::LeaveZero | DqFused::LastBlock)
    }

    /// The counters a head holds for a packed batch of `total_q` rows in `seqs` sequences: the
    /// kernel's `fused_slots` (1, 2), or one a sequence (3).
    pub fn slots(self, total_q: usize, seqs: u32) -> usize {
        if self == DqFused::LastBlock {
            seqs as usize
        } else {
            slots(total_q, seqs)
        }
    }
}

/// The counters a head holds for a packed batch of `total_q` rows in `seqs` sequences (the
/// kernel's `fused_slots`).
pub fn slots(total_q: usize, seqs: u32) -> usize {
    total_q.max(1).saturating_sub(1) / 64 + seqs as usize
}

/// The counters' scratch of `mode` for the packed batch whose dense view is `a` (one batch of the
/// packed rows) in `seqs` sequences: its device address.
pub fn counters(ctx: &Context, a: &AttentionProblem, seqs: u32, mode: DqFused) -> Result<u64> {
    let bytes = a.heads_q * mode.slots(a.seqlen_q, seqs) * 4;
    ctx.scratch.attn_bwd_dq_sem.at_least(ctx, bytes)
}

/// The workspaces of a [`DqFused::LeaveZero`] or [`DqFused::LastBlock`] launch of the packed batch whose dense view is `p`:
/// D's, and the accumulator kept zero (not the shared one, which the other backwards leave
/// holding sums); the counters are [`counters`].
pub fn leave_zero_workspace(ctx: &Context, p: &BackwardProblem) -> Result<BackwardWorkspace> {
    let a = &p.attn;
    let s = &ctx.scratch;
    Ok(BackwardWorkspace {
        delta: s.attn_bwd_delta.at_least(ctx, a.lse_elems() * 4)?,
        dq_acc: s.attn_bwd_dq_acc_zero.at_least(ctx, a.q_elems() * 4)?,
        dq_sem: 0,
    })
}

/// The preprocess for the fused main kernel of a packed batch in `seqs` sequences: `args` as the
/// main kernel takes them (the counters in `dq_sem`), launched with the counters' grid
/// (`m_block` 1, `m_blocks` the slots); under a `mode` that leaves the accumulator zero it
/// leaves the accumulator alone (D only).
///
/// # Safety
/// As [`bwd_prep::launch_pre`]; `args.dq_sem` holds [`counters`]' bytes for `args` and `seqs`.
pub unsafe fn launch_pre(
    ctx: &Context,
    args: &AttnBwdArgs,
    seqs: u32,
    mode: DqFused,
) -> Result<()> {
    let mut pre = *args;
    if mode.leaves_zero() {
        pre.dq_acc = 0;
    }
    let n = mode.slots(args.sq as usize, seqs);
    if n > args.sq as usize {
        // SAFETY: the counters' scratch holds heads_q x n words ([`counters`]).
        let bytes = args.heads_q as usize * n * 4;
        unsafe { DeviceBuffer::borrowed(args.dq_sem, bytes) }.fill_bytes(0, ctx)?;
        pre.dq_sem = 0;
    } else {
        (pre.m_block, pre.m_blocks) = (1, n as i32);
    }
    unsafe { bwd_prep::launch_pre(ctx, &mut pre) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every 64-row half of every sequence gets its own slot below `slots` (the kernel's
    /// `row / 64 + sequence`), whatever the lengths, empty ones included.
    #[test]
    fn each_half_has_its_own_slot() {
        for lens in [
            vec![6698usize, 5067, 658, 8103, 128, 0, 1, 129, 255, 256, 257, 7],
            vec![1; 200],
            vec![0, 0, 5, 0, 63, 64, 65, 0],
            vec![130],
        ] {
            let total: usize = lens.iter().sum();
            let n = slots(total, lens.len() as u32);
            let mut seen = std::collections::HashSet::new();
            let mut q0 = 0;
            for (z, &l) in lens.iter().enumerate() {
                for r in (0..l).step_by(64) {
                    let slot = (q0 + r) / 64 + z;
                    assert!(slot < n, "{lens:?}: {slot} of {n}");
                    assert!(seen.insert(slot), "{lens:?}: slot {slot} twice");
                }
                q0 += l;
            }
        }
    }
}
