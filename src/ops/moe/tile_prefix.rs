//! Host side of `kernels/moe/tile_prefix.cu`: the one-warp kernel that turns the per-expert rows
//! on the GPU into the m-tile prefix sums and row tables the grouped kernels search, launched on
//! the same stream just before them (no host synchronisation, graph-capturable).

use super::trace::TraceBuffer;
use super::{MoeOperands, MoeProblem};
use crate::device::{Context, LaunchConfig};
use crate::error::Result;
use crate::jit::KernelSpec;

pub const ENTRY: &str = "moe_tile_prefix";

pub fn spec(arch: &str) -> KernelSpec {
    KernelSpec::new("moe/tile_prefix.cu", ENTRY, arch)
}

/// Enqueues the tables of `p` for tile height `bm` into `ops.sched`; `sorted` lists the experts
/// heaviest first (up to [`super::schedule::SORT_MAX`] experts; see `Schedule::build`).
pub fn launch(
    ctx: &Context,
    p: &MoeProblem,
    ops: &MoeOperands,
    bm: u32,
    sorted: bool,
) -> Result<()> {
    launch_folded(ctx, p, ops, bm, sorted, 0)
}

/// As [`launch`], with an expert's last m-tile taking up to `fold` rows past `bm`
/// (`Schedule::build_folded`).
pub fn launch_folded(
    ctx: &Context,
    p: &MoeProblem,
    ops: &MoeOperands,
    bm: u32,
    sorted: bool,
    fold: u32,
) -> Result<()> {
    launch_stamped(ctx, p, ops, bm, sorted, fold, None)
}

/// As [`launch`], its variant that stamps its entry and end into the prefix record of `trace`
/// (`KILN_MOE_TRACE`; `kiln moe bench --timeline`, never dispatched).
pub fn launch_traced(
    ctx: &Context,
    p: &MoeProblem,
    ops: &MoeOperands,
    bm: u32,
    sorted: bool,
    trace: &TraceBuffer,
) -> Result<()> {
    launch_stamped(ctx, p, ops, bm, sorted, 0, Some(trace.prefix()))
}

/// The kernel's (x_rows, max_rows, masked) arguments for `p`'s rows: X's rows, and the masked
/// layout's rows an expert (0 for contiguous offsets).
pub fn rows_args(p: &MoeProblem) -> (i32, i32, i32) {
    match &p.rows {
        super::Rows::Masked { max_rows, .. } => (p.x_rows() as i32, *max_rows as i32, 1),
        super::Rows::Contiguous { .. } => (p.x_rows() as i32, 0, 0),
    }
}

fn launch_stamped(
    ctx: &Context,
    p: &MoeProblem,
    ops: &MoeOperands,
    bm: u32,
    sorted: bool,
    fold: u32,
    trace: Option<u64>,
) -> Result<()> {
    let f = match trace {
        Some(_) => ctx.function(&spec(&ctx.arch()).define("KILN_MOE_TRACE", 1))?,
        None => ctx.function_memo(&ENTRY, spec)?,
    };
    let mut stamps = trace.unwrap_or(0);
    let mut rows_in = ops.rows.ptr();
    let mut sched = ops.sched.ptr();
    let mut experts = p.experts as i32;
    let (mut x_rows, mut max_rows, mut masked) = rows_args(p);
    let mut bm = bm as i32;
    let mut sorted = sorted as i32;
    let mut fold = fold as i32;
    let lc = LaunchConfig::simple((1, 1, 1), 32);
    // SAFETY: the kernel takes (const int*, int*, int, int, int, int, int, int, int) in this order,
    // and with KILN_MOE_TRACE (compiled exactly when `trace` is given) a u64* last, the prefix
    // record of a live trace buffer; the rows buffer holds the E + 1 offsets or E counts and the
    // workspace 4E + 2 ints, both checked by `check_operands` and kept alive by the caller until
    // the stream has run.
    let mut params = [
        &mut rows_in as *mut u64 as *mut _,
        &mut sched as *mut u64 as *mut _,
        &mut experts as *mut i32 as *mut _,
        &mut x_rows as *mut i32 as *mut _,
        &mut max_rows as *mut i32 as *mut _,
        &mut masked as *mut i32 as *mut _,
        &mut bm as *mut i32 as *mut _,
        &mut sorted as *mut i32 as *mut _,
        &mut fold as *mut i32 as *mut _,
        &mut stamps as *mut u64 as *mut _,
    ];
    let n = if trace.is_some() { 10 } else { 9 };
    unsafe { f.launch(ctx.stream, &lc, &mut params[..n]) }
}
