//! Host side of `kernels/pointwise/rope.cu`: the rotary embedding applied in place to q and k
//! ([B, H, S, D] views with their own strides) in one launch, cos and sin [B, S, R] or [S, R],
//! transformers' rotate_half or the interleaved pairs, the first R of D dims rotated.

use std::ffi::c_void;

use super::aligned16;
use crate::device::{Context, LaunchConfig};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;

pub const NAME: &str = "rope";
const SOURCE: &str = "pointwise/rope.cu";
const THREADS: u32 = 256;

pub fn spec(arch: &str, dtype: DType, vec8: bool) -> KernelSpec {
    super::spec(SOURCE, NAME, arch, dtype, vec8)
}

/// One rotary application: q [batch, hq, seq, D] and k [batch, hk, seq, D] of `dtype`, the
/// first `rot` dims rotated; cos and sin in f32 (`cs_f32`) or `dtype`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RopeShape {
    pub batch: usize,
    pub seq: usize,
    pub hq: usize,
    pub hk: usize,
    pub rot: usize,
    pub dtype: DType,
    pub cs_f32: bool,
    pub interleaved: bool,
    pub vec8: bool,
}

/// Heads in memory: [B, H, S, D] with element strides (batch, head, position); D contiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    pub ptr: u64,
    pub sb: usize,
    pub sh: usize,
    pub ss: usize,
}

/// A cos or sin table: [B, S, R] with element strides (batch, position); 0 for [S, R].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Table {
    pub ptr: u64,
    pub sb: usize,
    pub ss: usize,
}

/// The memory of one rotary application.
#[derive(Debug, Clone, Copy)]
pub struct RopeOperands {
    pub q: Heads,
    pub k: Heads,
    pub cos: Table,
    pub sin: Table,
}

/// Whether the 16-byte variant can take `ops` (R a multiple of 16, every base and stride
/// 16-byte aligned).
pub fn vec8_fits(rot: usize, dtype: DType, cs_f32: bool, ops: &RopeOperands) -> bool {
    let (q, k) = (ops.q, ops.k);
    let cs = if cs_f32 { 4 } else { dtype.size() };
    rot.is_multiple_of(16)
        && aligned16(
            &[q.ptr, k.ptr],
            &[q.sb, q.sh, q.ss, k.sb, k.sh, k.ss],
            dtype.size(),
        )
        && aligned16(
            &[ops.cos.ptr, ops.sin.ptr],
            &[ops.cos.sb, ops.cos.ss, ops.sin.sb, ops.sin.ss],
            cs,
        )
}

/// Items (one thread each): per token and head, R / 2 pairs in runs of 8 or 1.
fn items(s: &RopeShape) -> u64 {
    let per_head = s.rot / if s.vec8 { 16 } else { 2 };
    (s.batch * s.seq * (s.hq + s.hk) * per_head) as u64
}

/// Enough blocks for one item a thread, at most 16 a multiprocessor (the rest loop).
fn config(s: &RopeShape, sms: u32) -> LaunchConfig {
    let blocks = items(s)
        .div_ceil(THREADS as u64)
        .clamp(1, sms.max(1) as u64 * 16) as u32;
    LaunchConfig::simple((blocks, 1, 1), THREADS)
}

/// The kernel's argument block (`RopeArgs` in rope.cu).
#[repr(C)]
struct RopeArgs {
    q: u64,
    k: u64,
    cos: u64,
    sin: u64,
    q_sb: i64,
    q_sh: i64,
    q_ss: i64,
    k_sb: i64,
    k_sh: i64,
    k_ss: i64,
    c_sb: i64,
    c_ss: i64,
    s_sb: i64,
    s_ss: i64,
    batch: i32,
    seq: i32,
    hq: i32,
    hk: i32,
    rot: i32,
    interleaved: i32,
    cs_f32: i32,
    pad: i32,
}

/// Tags the memo entry of a rotary launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct RopeLaunch;

/// Enqueues the rotation of q and k in place; the kernel and grid are worked out once per
/// shape (the context's memo). The caller has checked the operands against `s`.
pub fn launch(ctx: &Context, s: &RopeShape, ops: &RopeOperands) -> Result<()> {
    if items(s) == 0 {
        return Ok(());
    }
    let (f, cfg) = ctx.memo.get_or_try(&(*s, RopeLaunch), || {
        Ok((
            ctx.function(&spec(&ctx.arch(), s.dtype, s.vec8))?,
            config(s, ctx.info.sm_count),
        ))
    })?;
    let (q, k, c, sn) = (ops.q, ops.k, ops.cos, ops.sin);
    let mut args = RopeArgs {
        q: q.ptr,
        k: k.ptr,
        cos: c.ptr,
        sin: sn.ptr,
        q_sb: q.sb as i64,
        q_sh: q.sh as i64,
        q_ss: q.ss as i64,
        k_sb: k.sb as i64,
        k_sh: k.sh as i64,
        k_ss: k.ss as i64,
        c_sb: c.sb as i64,
        c_ss: c.ss as i64,
        s_sb: sn.sb as i64,
        s_ss: sn.ss as i64,
        batch: s.batch as i32,
        seq: s.seq as i32,
        hq: s.hq as i32,
        hk: s.hk as i32,
        rot: s.rot as i32,
        interleaved: s.interleaved as i32,
        cs_f32: s.cs_f32 as i32,
        pad: 0,
    };
    let mut params = [&mut args as *mut RopeArgs as *mut c_void];
    // SAFETY: one parameter, a RopeArgs laid out as the kernel's; the validation measured q
    // and k against [batch, heads, seq, D >= rot] and cos and sin against [batch or 1, seq,
    // rot] in their strides, and refused q and k overlapping each other or the tables.
    unsafe { f.launch(ctx.stream, &cfg, &mut params) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_args_match_the_device_layout() {
        assert_eq!(std::mem::offset_of!(RopeArgs, q_sb), 32);
        assert_eq!(std::mem::offset_of!(RopeArgs, batch), 112);
        assert_eq!(std::mem::offset_of!(RopeArgs, cs_f32), 136);
        assert_eq!(std::mem::size_of::<RopeArgs>(), 144);
    }

    #[test]
    fn one_thread_per_run_of_pairs_and_at_most_16_blocks_a_multiprocessor() {
        let s = RopeShape {
            batch: 1,
            seq: 4096,
            hq: 32,
            hk: 8,
            rot: 128,
            dtype: DType::Bf16,
            cs_f32: false,
            interleaved: false,
            vec8: true,
        };
        assert_eq!(items(&s), 4096 * 40 * 8);
        assert_eq!(config(&s, 132).grid.0, 132 * 16);
        let small = RopeShape { seq: 3, ..s };
        assert_eq!(config(&small, 132).grid.0, 4); // 960 items
        assert_eq!(
            items(&RopeShape {
                vec8: false,
                ..small
            }),
            3 * 40 * 64
        );
    }

    #[test]
    fn the_16_byte_variant_needs_16_rotated_dims_and_aligned_strides() {
        let heads = Heads {
            ptr: 0x1000,
            sb: 4096 * 4096,
            sh: 128,
            ss: 4096,
        };
        let table = Table {
            ptr: 0x8000,
            sb: 0,
            ss: 128,
        };
        let ops = RopeOperands {
            q: heads,
            k: heads,
            cos: table,
            sin: table,
        };
        assert!(vec8_fits(128, DType::Bf16, false, &ops));
        assert!(!vec8_fits(24, DType::Bf16, false, &ops));
        let odd = RopeOperands {
            cos: Table { ss: 68, ..table },
            ..ops
        };
        assert!(!vec8_fits(64, DType::Bf16, false, &odd));
        // the same table as f32: 68 floats is 272 bytes, a multiple of 16
        assert!(vec8_fits(64, DType::Bf16, true, &odd));
    }
}
