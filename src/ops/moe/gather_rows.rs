//! Host side of `kernels/moe/gather_rows.cu`: X's rows copied into the MoE layer's
//! expert-sorted order, for the gate/up GEMM's plain (non-gathering) kernel.

use std::ffi::c_void;

use crate::device::{Context, LaunchConfig};
use crate::error::Result;
use crate::jit::KernelSpec;

const ENTRY: &str = "moe_gather_rows";
const THREADS: u32 = 256;

pub fn spec(arch: &str) -> KernelSpec {
    KernelSpec::new("moe/gather_rows.cu", ENTRY, arch)
}

/// Blocks for `units` 16-byte units: enough to cover them, at most 16 a multiprocessor (the
/// kernel strides over the rest).
fn config(units: usize, sms: u32) -> LaunchConfig {
    let blocks = units
        .div_ceil(THREADS as usize)
        .clamp(1, 16 * sms.max(1) as usize) as u32;
    LaunchConfig::simple((blocks, 1, 1), THREADS)
}

/// xs [rows, H] = x [tokens, H] at row_token[r] (zeros where that is not a token); H a multiple
/// of 8 bf16/f16 elements (`row_bytes` a multiple of 16).
pub fn launch(
    ctx: &Context,
    x: u64,
    xs: u64,
    row_token: u64,
    tokens: usize,
    rows: usize,
    row_bytes: usize,
) -> Result<()> {
    debug_assert!(row_bytes.is_multiple_of(16));
    let f = ctx.function(&spec(&ctx.arch()))?;
    let units = row_bytes / 16;
    let (mut x, mut xs, mut row_token) = (x, xs, row_token);
    let (mut t, mut r, mut u) = (tokens as i32, rows as i32, units as i32);
    let mut params: [*mut c_void; 6] = [
        &mut x as *mut u64 as *mut c_void,
        &mut xs as *mut u64 as *mut c_void,
        &mut row_token as *mut u64 as *mut c_void,
        &mut t as *mut i32 as *mut c_void,
        &mut r as *mut i32 as *mut c_void,
        &mut u as *mut i32 as *mut c_void,
    ];
    // SAFETY: the kernel takes (const u32x4*, u32x4*, const int*, int, int, int) in this order;
    // x holds tokens rows and xs `rows` rows of `row_bytes`, row_token `rows` ints, all kept
    // alive by the caller until the stream has run.
    unsafe {
        f.launch(
            ctx.stream,
            &config(rows * units, ctx.info.sm_count),
            &mut params,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_the_units_up_to_sixteen_a_multiprocessor() {
        assert_eq!(config(1, 132).grid.0, 1);
        assert_eq!(config(256 * 10, 132).grid.0, 10);
        assert_eq!(config(256 * 10_000, 132).grid.0, 16 * 132);
    }
}
