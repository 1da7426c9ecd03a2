//! Attention forward: the problem type, the versions (one host file per device file under
//! `kernels/attention/`), and what they share: the kernel interface and the argument block.

pub mod composed;
pub mod decode_combine;
pub mod decode_paged;
pub mod fa2_mma_sync;
pub mod fa3_wgmma;
pub mod kv_append;
pub mod paged;
pub mod problem;
pub mod varlen;

use std::ffi::c_void;

pub use paged::PagedProblem;
pub use problem::{AttentionProblem, AttnLayout, OperandStrides, Strides, HEAD_DIMS, STRIDE_ALIGN};
pub use varlen::{VarlenProblem, VarlenShape, Window};

use crate::device::{Context, DeviceBuffer, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;
use crate::ops::space::{Config as TuneConfig, ParamSpace};

/// The device buffers of one attention call, each holding its tensor under the problem's strides
/// for it; LSE is fp32 [B, H, Sq].
pub struct AttentionOperands<'a> {
    pub q: &'a DeviceBuffer,
    pub k: &'a DeviceBuffer,
    pub v: &'a DeviceBuffer,
    pub o: &'a DeviceBuffer,
    pub lse: &'a DeviceBuffer,
}

/// One version of the attention forward.
pub trait AttentionKernel: Send + Sync {
    /// Registry name, the same as its device file's stem.
    fn name(&self) -> &'static str;
    /// One line: the technique this rung adds.
    fn summary(&self) -> &'static str;
    /// Position on the ladder (higher is expected faster).
    fn rung(&self) -> u32;
    /// `Ok` or the reason this version cannot compute `p` on `dev` (never a wrong result).
    fn supports(&self, p: &AttentionProblem, dev: &DeviceInfo) -> std::result::Result<(), String>;
    /// Every specialisation this version can compile to for `arch` (for `kiln check`).
    fn variants(&self, arch: &str) -> Vec<KernelSpec>;
    /// Enqueues the forward on the context's stream. Callers have validated `p`, checked the
    /// buffers and `supports`.
    fn launch(&self, ctx: &Context, p: &AttentionProblem, ops: &AttentionOperands) -> Result<()>;

    /// The tuner's parameter space for `p` on `dev` (`None`: nothing to tune); the same shape as
    /// [`crate::ops::gemm::GemmKernel::space`].
    fn space(&self, _p: &AttentionProblem, _dev: &DeviceInfo) -> Option<ParamSpace> {
        None
    }
    /// The config an untuned launch of `p` runs, as a point of the space (evaluated first).
    fn baseline(&self, _p: &AttentionProblem, _dev: &DeviceInfo) -> Option<TuneConfig> {
        None
    }
    /// The specialisation `cfg` compiles to (for the guard).
    fn spec_for(
        &self,
        _arch: &str,
        _p: &AttentionProblem,
        _cfg: &TuneConfig,
    ) -> Option<KernelSpec> {
        None
    }
    /// [`AttentionKernel::launch`] with an explicit config from [`AttentionKernel::space`].
    fn launch_with(
        &self,
        ctx: &Context,
        p: &AttentionProblem,
        ops: &AttentionOperands,
        _cfg: &TuneConfig,
    ) -> Result<()> {
        self.launch(ctx, p, ops)
    }
}

/// The argument block, laid out as `AttnArgs` in `kernels/attention/attn_args.cuh`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct AttnArgs {
    pub q: u64,
    pub k: u64,
    pub v: u64,
    pub o: u64,
    pub lse: u64,
    /// Q strides (elements): batch, head, sequence.
    pub q_sb: i64,
    pub q_sh: i64,
    pub q_ss: i64,
    /// K strides (elements).
    pub kv_sb: i64,
    pub kv_sh: i64,
    pub kv_ss: i64,
    pub batch: i32,
    pub heads_q: i32,
    /// Query heads per key/value head.
    pub group: i32,
    pub sq: i32,
    pub skv: i32,
    pub causal: i32,
    /// scale · log2(e): scores go straight to exp2.
    pub scale_log2: f32,
    pub scale: f32,
    /// fa3_wgmma's dynamic scheduler: two u32 counters (next item, blocks done), 0 between
    /// launches; 0 for every other kernel.
    pub work: u64,
    /// fa3_wgmma: the first row of its grid of query blocks: 0, or `sq - blocks * bm` (<= 0) when
    /// causal blocks are aligned to the last query row; 0 for every other kernel.
    pub q_row0: i32,
    /// fa3_wgmma: (batch, head) pairs per group of its work-item order (1: head after head).
    pub order_bh: i32,
    /// fa3_wgmma without overlap or ping-pong: [blocks][consumers - 1][d / 2 + 4][128] fp32,
    /// where the consumers of a split item (a non-causal block of at most 64 rows) hand their
    /// partial softmax state and O to consumer 0; 0: no item is split.
    pub split_ws: u64,
    /// fa3_wgmma (not ping-pong): the first item run in `parts` shares of its key tiles by as
    /// many blocks (the last, partial wave's items); `i32::MAX`: none.
    pub parts_from: i32,
    /// 2 or 3 (1: none).
    pub parts: i32,
    /// Per such item, every part's partial softmax state and O ([item][part][consumer]
    /// [d / 2 + 4][128] fp32), and the parts finished (u32, 0 between launches).
    pub parts_ws: u64,
    pub parts_done: u64,
    /// fa3_wgmma's packed variant: the cumulative query and key offsets (i32, batch + 1 each;
    /// `batch` is then the sequences and `sq`, `skv` the longest); 0 for every other kernel.
    pub cu_q: u64,
    pub cu_k: u64,
    /// The packed variant: rows of packed Q (LSE is [heads_q, total_q]).
    pub total_q: i32,
    /// fa3_wgmma's window variant: query i sees keys i + skv − sq − win_left ..= i + skv − sq +
    /// win_right, causal folded into win_right, an unbounded side as [`WINDOW_UNBOUNDED`].
    pub win_left: i32,
    pub win_right: i32,
    /// The packed variant: rows of packed K and V.
    pub total_k: i32,
    /// V strides (elements): batch, head, sequence.
    pub v_sb: i64,
    pub v_sh: i64,
    pub v_ss: i64,
    /// O strides (elements).
    pub o_sb: i64,
    pub o_sh: i64,
    pub o_ss: i64,
    /// The packed variant: a host-mapped word the kernel sets to 1 when the offsets are bad
    /// (checked on the GPU, since they may never have been on the host); 0: not recorded.
    pub errors: u64,
}

/// An unbounded window side in [`AttnArgs`]: farther than any sequence reaches, and far enough
/// from `i32::MAX` that row + offset ± it does not overflow.
pub const WINDOW_UNBOUNDED: i32 = 1 << 30;

impl AttnArgs {
    pub fn new(p: &AttentionProblem, ops: &AttentionOperands) -> Self {
        AttnArgs::of(p).at(ops)
    }

    /// This block with the operands' addresses.
    pub fn at(self, ops: &AttentionOperands) -> Self {
        AttnArgs {
            q: ops.q.ptr(),
            k: ops.k.ptr(),
            v: ops.v.ptr(),
            o: ops.o.ptr(),
            lse: ops.lse.ptr(),
            ..self
        }
    }

    /// The problem's fields; the addresses are 0 until [`AttnArgs::at`] sets them.
    pub fn of(p: &AttentionProblem) -> Self {
        let (qs, ks, vs, os) = (p.q_strides(), p.k_strides(), p.v_strides(), p.o_strides());
        AttnArgs {
            q: 0,
            k: 0,
            v: 0,
            o: 0,
            lse: 0,
            q_sb: qs.batch as i64,
            q_sh: qs.head as i64,
            q_ss: qs.seq as i64,
            kv_sb: ks.batch as i64,
            kv_sh: ks.head as i64,
            kv_ss: ks.seq as i64,
            batch: p.batch as i32,
            heads_q: p.heads_q as i32,
            group: p.group() as i32,
            sq: p.seqlen_q as i32,
            skv: p.seqlen_kv as i32,
            causal: p.causal as i32,
            scale_log2: p.scale * std::f32::consts::LOG2_E,
            scale: p.scale,
            work: 0,
            q_row0: 0,
            order_bh: 1,
            split_ws: 0,
            parts_from: i32::MAX,
            parts: 1,
            parts_ws: 0,
            parts_done: 0,
            cu_q: 0,
            cu_k: 0,
            total_q: 0,
            win_left: WINDOW_UNBOUNDED,
            win_right: WINDOW_UNBOUNDED,
            total_k: 0,
            v_sb: vs.batch as i64,
            v_sh: vs.head as i64,
            v_ss: vs.seq as i64,
            o_sb: os.batch as i64,
            o_sh: os.head as i64,
            o_ss: os.seq as i64,
            errors: 0,
        }
    }

    pub fn as_param(&mut self) -> *mut c_void {
        self as *mut AttnArgs as *mut c_void
    }
}

/// Checks that the buffers hold the problem's tensors (their spans under their strides).
pub fn check_buffers(p: &AttentionProblem, ops: &AttentionOperands) -> Result<()> {
    let e = p.dtype.size();
    let [q, k, v, o] = p.spans();
    for (name, need, have) in [
        ("Q", q * e, ops.q.bytes()),
        ("K", k * e, ops.k.bytes()),
        ("V", v * e, ops.v.bytes()),
        ("O", o * e, ops.o.bytes()),
        ("LSE", p.lse_elems() * 4, ops.lse.bytes()),
    ] {
        if have < need {
            return Err(crate::Error::invalid(format!(
                "{name} needs {need} bytes for this shape but its buffer has {have}"
            )));
        }
    }
    Ok(())
}

/// The decode kernels' names and variants for `arch` (for `kiln check`).
pub fn decode_variants(arch: &str) -> [(&'static str, Vec<KernelSpec>); 3] {
    [
        ("decode_paged", decode_paged::variants(arch)),
        ("decode_combine", decode_combine::variants(arch)),
        ("kv_append", vec![kv_append::spec(arch)]),
    ]
}

/// The dtypes attention kernels are specialised for.
pub const DTYPES: [DType; 2] = [DType::Bf16, DType::F16];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attn_args_match_the_device_layout() {
        assert_eq!(std::mem::offset_of!(AttnArgs, q_sb), 40);
        assert_eq!(std::mem::offset_of!(AttnArgs, batch), 88);
        assert_eq!(std::mem::offset_of!(AttnArgs, scale_log2), 112);
        assert_eq!(std::mem::offset_of!(AttnArgs, work), 120);
        assert_eq!(std::mem::offset_of!(AttnArgs, q_row0), 128);
        assert_eq!(std::mem::offset_of!(AttnArgs, split_ws), 136);
        assert_eq!(std::mem::offset_of!(AttnArgs, parts_from), 144);
        assert_eq!(std::mem::offset_of!(AttnArgs, parts), 148);
        assert_eq!(std::mem::offset_of!(AttnArgs, parts_ws), 152);
        assert_eq!(std::mem::offset_of!(AttnArgs, parts_done), 160);
        assert_eq!(std::mem::offset_of!(AttnArgs, cu_q), 168);
        assert_eq!(std::mem::offset_of!(AttnArgs, cu_k), 176);
        assert_eq!(std::mem::offset_of!(AttnArgs, total_q), 184);
        assert_eq!(std::mem::offset_of!(AttnArgs, win_left), 188);
        assert_eq!(std::mem::offset_of!(AttnArgs, win_right), 192);
        assert_eq!(std::mem::offset_of!(AttnArgs, total_k), 196);
        assert_eq!(std::mem::offset_of!(AttnArgs, v_sb), 200);
        assert_eq!(std::mem::offset_of!(AttnArgs, o_ss), 240);
        assert_eq!(std::mem::offset_of!(AttnArgs, errors), 248);
        assert_eq!(std::mem::size_of::<AttnArgs>(), 256);
    }
}
