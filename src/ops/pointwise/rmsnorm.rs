//! Host side of `kernels/pointwise/rmsnorm.cu`: out = rmsnorm(x) * weight over rows, f32
//! statistics, transformers' rounding order; with a residual, residual += x first and the
//! stored sum is what is normalised (FlashInfer's fused_add_rmsnorm).

use std::ffi::c_void;

use super::aligned16;
use crate::device::{Context, LaunchConfig};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;

pub const NAME: &str = "rmsnorm";
const SOURCE: &str = "pointwise/rmsnorm.cu";
const THREADS: usize = 256;
/// Vectors of 8 a thread of the 16-byte variant keeps in registers (the kernel's `PER`).
const PER: usize = 8;
/// The widest row the 16-byte variant holds in registers; wider rows take the other variant.
pub const MAX_VEC_COLS: usize = THREADS * PER * 8;

pub fn spec(arch: &str, dtype: DType, vec8: bool) -> KernelSpec {
    super::spec(SOURCE, NAME, arch, dtype, vec8)
}

/// One RMSNorm: `rows` rows of `cols` values of `dtype`, with or without a residual, on the
/// 16-byte variant or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NormShape {
    pub rows: usize,
    pub cols: usize,
    pub dtype: DType,
    pub residual: bool,
    pub vec8: bool,
}

/// Rows in memory: the first's address and the distance between rows (elements).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rows {
    pub ptr: u64,
    pub stride: usize,
}

/// The memory of one RMSNorm.
#[derive(Debug, Clone, Copy)]
pub struct NormOperands {
    pub x: Rows,
    pub out: Rows,
    pub weight: u64,
    pub residual: Option<Rows>,
    pub eps: f32,
}

/// Whether the 16-byte variant can take `ops` with `cols` columns of `dtype`.
pub fn vec8_fits(cols: usize, dtype: DType, ops: &NormOperands) -> bool {
    let rows = [Some(ops.x), Some(ops.out), ops.residual];
    let rows = rows.iter().flatten();
    cols.is_multiple_of(8)
        && cols <= MAX_VEC_COLS
        && aligned16(
            &rows
                .clone()
                .map(|r| r.ptr)
                .chain([ops.weight])
                .collect::<Vec<_>>(),
            &rows.map(|r| r.stride).collect::<Vec<_>>(),
            dtype.size(),
        )
}

/// Threads per row: a power of two giving each thread about 4 vectors of 8 (16-byte variant)
/// or 4 values, at most a block.
fn group(s: &NormShape) -> usize {
    let per_thread = if s.vec8 { 32 } else { 4 };
    s.cols
        .div_ceil(per_thread)
        .next_power_of_two()
        .clamp(1, THREADS)
}

/// Blocks of 256 threads, 256 / group rows each.
fn config(s: &NormShape) -> (LaunchConfig, usize) {
    let g = group(s);
    let blocks = s.rows.div_ceil(THREADS / g).max(1) as u32;
    (LaunchConfig::simple((blocks, 1, 1), THREADS as u32), g)
}

/// The kernel's argument block (`NormArgs` in rmsnorm.cu).
#[repr(C)]
struct NormArgs {
    x: u64,
    out: u64,
    weight: u64,
    residual: u64,
    x_rs: i64,
    out_rs: i64,
    res_rs: i64,
    rows: i32,
    cols: i32,
    group: i32,
    eps: f32,
}

/// Tags the memo entry of an RMSNorm's launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct NormLaunch;

/// Enqueues the RMSNorm; the kernel and grid are worked out once per shape (the context's
/// memo). The caller has checked that the operands hold `s` (the library's validation).
pub fn launch(ctx: &Context, s: &NormShape, ops: &NormOperands) -> Result<()> {
    if s.rows == 0 {
        return Ok(());
    }
    let (f, (cfg, g)) = ctx.memo.get_or_try(&(*s, NormLaunch), || {
        Ok((
            ctx.function(&spec(&ctx.arch(), s.dtype, s.vec8))?,
            config(s),
        ))
    })?;
    let res = ops.residual.unwrap_or(Rows { ptr: 0, stride: 0 });
    let mut args = NormArgs {
        x: ops.x.ptr,
        out: ops.out.ptr,
        weight: ops.weight,
        residual: res.ptr,
        x_rs: ops.x.stride as i64,
        out_rs: ops.out.stride as i64,
        res_rs: res.stride as i64,
        rows: s.rows as i32,
        cols: s.cols as i32,
        group: g as i32,
        eps: ops.eps,
    };
    let mut params = [&mut args as *mut NormArgs as *mut c_void];
    // SAFETY: one parameter, a NormArgs laid out as the kernel's; the validation measured x,
    // out and the residual against rows x cols with their strides, and the weight against
    // cols, and refused outputs that overlap inputs.
    unsafe { f.launch(ctx.stream, &cfg, &mut params) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(rows: usize, cols: usize, vec8: bool) -> NormShape {
        NormShape {
            rows,
            cols,
            dtype: DType::Bf16,
            residual: false,
            vec8,
        }
    }

    #[test]
    fn the_args_match_the_device_layout() {
        assert_eq!(std::mem::offset_of!(NormArgs, x_rs), 32);
        assert_eq!(std::mem::offset_of!(NormArgs, rows), 56);
        assert_eq!(std::mem::offset_of!(NormArgs, eps), 68);
        assert_eq!(std::mem::size_of::<NormArgs>(), 72);
    }

    #[test]
    fn a_row_takes_a_power_of_two_of_threads_with_about_four_vectors_each() {
        // hidden 4096: 512 vectors, 128 threads, 2 rows a block
        let (cfg, g) = config(&shape(4096, 4096, true));
        assert_eq!((g, cfg.grid.0), (128, 2048));
        // a head dim (Qwen3's q_norm): 16 vectors, 4 threads, 64 rows a block
        let (cfg, g) = config(&shape(1000, 128, true));
        assert_eq!((g, cfg.grid.0), (4, 16));
        // the widest row in registers: 256 threads of 8 vectors
        assert_eq!(config(&shape(3, MAX_VEC_COLS, true)).1, 256);
        assert_eq!(config(&shape(3, 100_000, false)).1, 256);
        assert_eq!(config(&shape(3, 3, false)).1, 1);
    }

    #[test]
    fn the_16_byte_variant_needs_aligned_rows_of_multiples_of_8() {
        let rows = |ptr, stride| Rows { ptr, stride };
        let ops = NormOperands {
            x: rows(0x1000, 4096),
            out: rows(0x2000, 4096),
            weight: 0x3000,
            residual: None,
            eps: 1e-6,
        };
        assert!(vec8_fits(4096, DType::Bf16, &ops));
        assert!(!vec8_fits(4100, DType::Bf16, &ops));
        assert!(!vec8_fits(MAX_VEC_COLS + 8, DType::Bf16, &ops));
        let odd_stride = NormOperands {
            x: rows(0x1000, 4100),
            ..ops
        };
        assert!(!vec8_fits(4096, DType::Bf16, &odd_stride));
        let odd_residual = NormOperands {
            residual: Some(rows(0x4002, 4096)),
            ..ops
        };
        assert!(!vec8_fits(4096, DType::Bf16, &odd_residual));
    }
}
