//! The transformer block's memory-bound ops around its matmuls, on CUDA cores: RMSNorm (with
//! the residual add fused in front of it) and the rotary embedding applied in place to q and k.
//! Each kernel has a 16-byte variant for aligned rows and a one-element variant for any layout.

pub mod rmsnorm;
pub mod rope;

use crate::jit::KernelSpec;
use crate::ops::gemm::{alignment, DType};

/// The dtypes the pointwise kernels are specialised for.
pub const DTYPES: [DType; 2] = [DType::Bf16, DType::F16];

/// The spec of `source`'s kernel `entry` for `dtype`, 16-byte (`vec8`) or one-element accesses.
fn spec(source: &str, entry: &str, arch: &str, dtype: DType, vec8: bool) -> KernelSpec {
    KernelSpec::new(source, entry, arch)
        .define("KILN_IN", dtype.code())
        .define("KILN_VEC", if vec8 { 8 } else { 1 })
}

/// Whether 16-byte accesses reach every element: each base 16-byte aligned and each stride (in
/// elements of `elem` bytes) a whole number of 16-byte steps.
pub(crate) fn aligned16(ptrs: &[u64], strides: &[usize], elem: usize) -> bool {
    ptrs.iter().all(|&p| alignment(p) >= 16)
        && strides.iter().all(|&s| (s * elem).is_multiple_of(16))
}

/// Every variant of the pointwise kernels for `arch` (for `kiln check`), by name.
pub fn variants(arch: &str) -> Vec<(&'static str, KernelSpec)> {
    let mut v = Vec::new();
    for d in DTYPES {
        for vec8 in [true, false] {
            v.push((rmsnorm::NAME, rmsnorm::spec(arch, d, vec8)));
            v.push((rope::NAME, rope::spec(arch, d, vec8)));
        }
    }
    v
}
