//! Host side of `kernels/attention/decode_combine.cu`: the second pass of flash-decoding, which
//! merges the splits' fp32 partial O and LSE into O and LSE (one warp per query row).

use crate::device::{Context, Function, LaunchConfig};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::attention::decode_paged::{DecodeArgs, DecodeShape};
use crate::ops::attention::DTYPES;
use crate::ops::gemm::DType;

/// Query rows per block (one warp each).
const ROWS_PER_BLOCK: u32 = 4;

/// One variant per dtype: the head dim is the argument block's.
pub fn spec(arch: &str, dtype: DType) -> KernelSpec {
    KernelSpec::new("attention/decode_combine.cu", "decode_combine", arch)
        .define("KILN_IN", dtype.code())
}

/// Every specialisation for `arch`: one per dtype.
pub fn variants(arch: &str) -> Vec<KernelSpec> {
    DTYPES.iter().map(|&dt| spec(arch, dt)).collect()
}

/// The loaded variant for `dtype`.
pub fn function(ctx: &Context, dtype: DType) -> Result<Function> {
    ctx.function(&spec(&ctx.arch(), dtype))
}

/// Enqueues the merge of `args.splits` partials (already written by decode_paged on this
/// stream) into `args.o` and `args.lse`, with `f` ([`function`]).
pub fn launch(ctx: &Context, f: &Function, s: &DecodeShape, args: &mut DecodeArgs) -> Result<()> {
    let blocks = (s.lse_elems() as u32).div_ceil(ROWS_PER_BLOCK);
    let cfg = LaunchConfig::simple((blocks, 1, 1), 32 * ROWS_PER_BLOCK);
    // SAFETY: one parameter, the DecodeArgs of the decode_paged launch before it, whose partials
    // hold `splits` x rows x (D + 1) floats and whose O and LSE the caller checked.
    unsafe { f.launch(ctx.stream, &cfg, &mut [args.as_param()]) }
}
