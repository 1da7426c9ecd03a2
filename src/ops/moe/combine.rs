//! Host side of `kernels/moe/combine.cu`: each token's output row from its k expert rows, either
//! converted from the f32 accumulator the down projection added into atomically, or summed in
//! pair order from the expert rows (deterministic). A token with a dropped pair comes out NaN.

use std::ffi::c_void;

use crate::device::{Context, LaunchConfig};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;

pub const FINISH: &str = "moe_combine_finish";
pub const ROWS: &str = "moe_combine_rows";
const THREADS: u32 = 256;

pub fn spec(arch: &str, entry: &str) -> KernelSpec {
    KernelSpec::new("moe/combine.cu", entry, arch)
}

pub fn variants(arch: &str) -> Vec<KernelSpec> {
    vec![spec(arch, FINISH), spec(arch, ROWS)]
}

/// One block per token (grid x) and 2048 columns (grid y; 256 threads of 8).
fn config(tokens: usize, hidden: usize) -> LaunchConfig {
    let y = hidden.div_ceil(8 * THREADS as usize).max(1) as u32;
    LaunchConfig::simple((tokens as u32, y, 1), THREADS)
}

/// The shape of one combine: `tokens` rows of `hidden` (a multiple of 8) columns out, `top_k`
/// pairs each.
#[derive(Debug, Clone, Copy)]
pub struct CombineShape {
    pub tokens: usize,
    pub top_k: usize,
    pub hidden: usize,
    pub out: DType,
}

/// out = the f32 accumulator `acc` [T, H] in `out`'s dtype (NaN for tokens with a dropped pair).
pub fn launch_finish(
    ctx: &Context,
    s: &CombineShape,
    acc: u64,
    out: u64,
    pair_row: u64,
) -> Result<()> {
    let f = ctx.function_memo(&FINISH, |arch| spec(arch, FINISH))?;
    let (mut acc, mut out, mut pair_row) = (acc, out, pair_row);
    let (mut t, mut k, mut h, mut od) = (
        s.tokens as i32,
        s.top_k as i32,
        s.hidden as i32,
        s.out.code() as i32,
    );
    let mut params: [*mut c_void; 7] = [
        &mut acc as *mut u64 as *mut c_void,
        &mut out as *mut u64 as *mut c_void,
        &mut pair_row as *mut u64 as *mut c_void,
        &mut t as *mut i32 as *mut c_void,
        &mut k as *mut i32 as *mut c_void,
        &mut h as *mut i32 as *mut c_void,
        &mut od as *mut i32 as *mut c_void,
    ];
    // SAFETY: the kernel takes (const float*, void*, const int*, int, int, int, int) in this
    // order; acc holds T x H f32, out T x H of `out`'s dtype, pair_row T x k ints, all kept
    // alive by the caller until the stream has run.
    unsafe { f.launch(ctx.stream, &config(s.tokens, s.hidden), &mut params) }
}

/// The rows a token's pairs point into: `count` rows of `dtype` at `ptr` (H columns each).
#[derive(Debug, Clone, Copy)]
pub struct Rows {
    pub ptr: u64,
    pub dtype: DType,
    pub count: usize,
}

/// out[t] = the sum over its pairs j (in order) of w[r] * rows[r], r = pair_row[t k + j], with
/// `row_weight` (f32 per row) or 1 when 0; a pair outside the rows drops its token (NaN).
pub fn launch_rows(
    ctx: &Context,
    s: &CombineShape,
    rows: Rows,
    row_weight: u64,
    pair_row: u64,
    out: u64,
) -> Result<()> {
    let f = ctx.function_memo(&ROWS, |arch| spec(arch, ROWS))?;
    let (mut rp, mut rw, mut pr, mut out) = (rows.ptr, row_weight, pair_row, out);
    let (mut rd, mut n, mut od, mut t, mut k, mut h) = (
        rows.dtype.code() as i32,
        rows.count.min(i32::MAX as usize) as i32,
        s.out.code() as i32,
        s.tokens as i32,
        s.top_k as i32,
        s.hidden as i32,
    );
    let mut params: [*mut c_void; 10] = [
        &mut rp as *mut u64 as *mut c_void,
        &mut rd as *mut i32 as *mut c_void,
        &mut rw as *mut u64 as *mut c_void,
        &mut pr as *mut u64 as *mut c_void,
        &mut n as *mut i32 as *mut c_void,
        &mut out as *mut u64 as *mut c_void,
        &mut od as *mut i32 as *mut c_void,
        &mut t as *mut i32 as *mut c_void,
        &mut k as *mut i32 as *mut c_void,
        &mut h as *mut i32 as *mut c_void,
    ];
    // SAFETY: the kernel takes (const void*, int, const float*, const int*, int, void*, int,
    // int, int, int) in this order; rows holds `count` rows of H values (the kernel reads only
    // rows below it), row_weight (when not null) one f32 per row, pair_row T x k ints, out T x
    // H; the caller keeps them alive until the stream has run.
    unsafe { f.launch(ctx.stream, &config(s.tokens, s.hidden), &mut params) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_block_per_token_and_2048_columns_any_token_count() {
        assert_eq!(config(5, 2048).grid, (5, 1, 1));
        assert_eq!(config(5, 2056).grid, (5, 2, 1));
        assert_eq!(config(100_000, 8).grid, (100_000, 1, 1));
    }
}
