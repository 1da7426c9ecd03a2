//! Host side of `kernels/attention/bwd_prep.cu`: the backward's first pass (D = rowsum(dO ∘ O),
//! the dQ accumulator and counters zeroed) and last (dQ scaled and rounded), one compile each.

use super::AttnBwdArgs;
use crate::device::{Context, LaunchConfig};
use crate::error::Result;
use crate::jit::KernelSpec;

/// Query rows per block and threads per block (PREP_ROWS, PREP_THREADS in the device file).
const ROWS: u32 = 64;
const THREADS: u32 = 256;

/// The preprocess's specification: head dim and dtype are run-time arguments.
pub fn pre_spec(arch: &str) -> KernelSpec {
    KernelSpec::new("attention/bwd_prep.cu", "attn_bwd_pre", arch).define("KILN_PASS", 0)
}

/// The postprocess's specification.
pub fn post_spec(arch: &str) -> KernelSpec {
    KernelSpec::new("attention/bwd_prep.cu", "attn_bwd_post", arch).define("KILN_PASS", 1)
}

/// One block per 64 query rows of each (batch, head).
fn config(args: &AttnBwdArgs) -> LaunchConfig {
    let blocks = (args.sq as u32).div_ceil(ROWS);
    LaunchConfig::simple((blocks, args.heads_q as u32, args.batch as u32), THREADS)
}

/// Enqueues the preprocess.
///
/// # Safety
/// `args` holds the addresses of live buffers that fit its shape: O and dO (16-byte aligned
/// rows), D and the accumulator (16-byte aligned), and the counters when not null.
pub unsafe fn launch_pre(ctx: &Context, args: &mut AttnBwdArgs) -> Result<()> {
    let f = ctx.function(&pre_spec(&ctx.arch()))?;
    let cfg = config(args);
    f.launch(ctx.stream, &cfg, &mut [args.as_param()])
}

/// Enqueues the postprocess.
///
/// # Safety
/// As [`launch_pre`], for the accumulator and dQ (16-byte aligned rows).
pub unsafe fn launch_post(ctx: &Context, args: &mut AttnBwdArgs) -> Result<()> {
    let f = ctx.function(&post_spec(&ctx.arch()))?;
    let cfg = config(args);
    f.launch(ctx.stream, &cfg, &mut [args.as_param()])
}
