//! Host side of `kernels/gemm/pack_rows.cu`: a copy of a matrix between two row pitches, on the
//! stream. `wgmma_tma_ws` reads operands whose rows TMA cannot address from such copies, and
//! writes C through one when C's rows are off 16 bytes.

use crate::device::{Context, Function, LaunchConfig};
use crate::error::Result;
use crate::jit::KernelSpec;

pub const ENTRY: &str = "pack_rows";

/// Columns one block copies per row: 256 threads x 4 elements.
const COLS_PER_BLOCK: usize = 1024;
/// Blocks a launch aims for: enough to keep every SM's loads in flight, few enough to launch fast.
const TARGET_BLOCKS: usize = 8192;

/// The variant for `es`-byte elements (2: bf16 / f16; 4: f32).
pub fn spec(arch: &str, es: usize) -> KernelSpec {
    KernelSpec::new("gemm/pack_rows.cu", ENTRY, arch).define("KILN_ES", es as u32)
}

/// Enqueues the copy of `rows` x `cols` elements of `es` bytes from `src` (rows `src_ld` elements
/// apart) to `dst` (rows `dst_ld` apart).
///
/// # Safety
/// Both ranges must lie in live device allocations, `es` must be 2 or 4, and nothing may use
/// `dst` meanwhile except work enqueued after this on the same stream.
#[allow(clippy::too_many_arguments)]
pub unsafe fn launch(
    ctx: &Context,
    es: usize,
    src: u64,
    src_ld: usize,
    dst: u64,
    dst_ld: usize,
    rows: usize,
    cols: usize,
) -> Result<()> {
    let f = ctx.function(&spec(&ctx.arch(), es))?;
    let bx = cols.div_ceil(COLS_PER_BLOCK).max(1);
    let by = rows.clamp(1, (TARGET_BLOCKS / bx).clamp(1, 65535));
    let lc = LaunchConfig::simple((bx as u32, by as u32, 1), 256);
    // SAFETY: the kernel takes the pitched-copy parameters; the caller guarantees the ranges.
    unsafe { launch_pitched(&f, ctx, &lc, src, src_ld, dst, dst_ld, rows, cols) }
}

/// Launches a copy kernel taking `(const elem*, long long, elem*, long long, int, int)`: the
/// source and its row pitch, the destination and its row pitch, rows, columns (this file's and
/// `transpose_rows.cu`'s).
///
/// # Safety
/// `f` must take those parameters, and the ranges must be as its caller's contract says.
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn launch_pitched(
    f: &Function,
    ctx: &Context,
    lc: &LaunchConfig,
    src: u64,
    src_ld: usize,
    dst: u64,
    dst_ld: usize,
    rows: usize,
    cols: usize,
) -> Result<()> {
    let (mut src, mut dst) = (src, dst);
    let (mut src_ld, mut dst_ld) = (src_ld as i64, dst_ld as i64);
    let (mut rows, mut cols) = (rows as i32, cols as i32);
    // SAFETY: the parameters in the kernel's order; the caller guarantees the ranges.
    unsafe {
        f.launch(
            ctx.stream,
            lc,
            &mut [
                &mut src as *mut u64 as *mut _,
                &mut src_ld as *mut i64 as *mut _,
                &mut dst as *mut u64 as *mut _,
                &mut dst_ld as *mut i64 as *mut _,
                &mut rows as *mut i32 as *mut _,
                &mut cols as *mut i32 as *mut _,
            ],
        )
    }
}
