//! FP4 on Hopper: quantisation to and from NVFP4 and MXFP4 on the GPU (bit-exact with the CPU
//! formats), and the NVFP4 GEMV / small-M GEMM that decodes weights in registers.

pub mod fp4_dequant;
pub mod fp4_quant;
pub mod nvfp4_gemv;
pub mod nvfp4_gemv_pack;

pub use fp4_dequant::{dequantize_into, Dequantize};
pub use fp4_quant::{quantize, quantize_into, Fp4Format, Fp4Matrix, Fp4View};
pub use nvfp4_gemv::{GemvOperands, GemvProblem};

/// Every FP4 kernel specialisation for `arch`, as (version, spec) pairs for the compile check.
pub fn variants(arch: &str) -> Vec<(&'static str, crate::jit::KernelSpec)> {
    let mut v: Vec<_> = fp4_quant::variants(arch)
        .into_iter()
        .map(|s| ("fp4_quant", s))
        .collect();
    v.extend(
        fp4_dequant::variants(arch)
            .into_iter()
            .map(|s| (fp4_dequant::NAME, s)),
    );
    v.extend(
        nvfp4_gemv::variants(arch)
            .into_iter()
            .map(|s| (nvfp4_gemv::NAME, s)),
    );
    v
}
