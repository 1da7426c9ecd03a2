//! Host side of `kernels/gemm/transpose_rows.cu`: a transposed copy of a matrix of 16-bit
//! elements, on the stream. `wgmma_tma_ws` reads a column-major A with few rows from one.

use crate::device::{Context, LaunchConfig};
use crate::error::Result;
use crate::jit::KernelSpec;

pub const ENTRY: &str = "transpose_rows";

/// Rows and columns of the tile one block transposes.
const TILE: usize = 32;
/// The most row-tiles one launch spreads over blocks; the kernel loops over the rest.
const MAX_BLOCKS_Y: usize = 65535;

pub fn spec(arch: &str) -> KernelSpec {
    KernelSpec::new("gemm/transpose_rows.cu", ENTRY, arch)
}

/// Enqueues the copy of the `rows` x `cols` matrix at `src` (rows `src_ld` elements apart) to
/// `dst` as `cols` x `rows` (rows `dst_ld` apart).
///
/// # Safety
/// Both ranges must lie in live device allocations of 16-bit elements, and nothing may use
/// `dst` meanwhile except work enqueued after this on the same stream.
pub unsafe fn launch(
    ctx: &Context,
    src: u64,
    src_ld: usize,
    dst: u64,
    dst_ld: usize,
    rows: usize,
    cols: usize,
) -> Result<()> {
    let f = ctx.function(&spec(&ctx.arch()))?;
    let bx = cols.div_ceil(TILE).max(1);
    let by = rows.div_ceil(TILE).clamp(1, MAX_BLOCKS_Y);
    let lc = LaunchConfig {
        grid: (bx as u32, by as u32, 1),
        block: (TILE as u32, 8, 1),
        smem_bytes: 0,
        cluster: None,
    };
    // SAFETY: the kernel takes the pitched-copy parameters; the caller guarantees the ranges.
    unsafe { super::pack_rows::launch_pitched(&f, ctx, &lc, src, src_ld, dst, dst_ld, rows, cols) }
}
