//! FP8 (e4m3fn, e5m2) on Hopper: the device conversions checked against the CPU's, the
//! quantisation kernels, and the scaled FP8 GEMM on WGMMA (the grouped MoE ones live in
//! `ops::moe`, their variants are listed here with the rest).

pub mod convert;
pub mod gemm;
pub mod pdl;
pub mod plan;
pub mod problem;
pub mod quant;
pub mod request;
pub mod tma;

use crate::ops::moe::{fp8_grouped, fp8_swiglu};

pub use gemm::{gemm, gemm_launch, gemm_with, Fp8Config, Fp8Operands};
pub use pdl::Fp8Pdl;
pub use problem::{Fp8Problem, ScaleMode, Scales};
pub use quant::{quantize, quantize_into, Granularity, QuantSpec, Quantized};

/// Every FP8 kernel specialisation for `arch` (conversions, quantisation, GEMM), as
/// (version, spec) pairs for the compile check.
pub fn variants(arch: &str) -> Vec<(&'static str, crate::jit::KernelSpec)> {
    let mut v = vec![("fp8_convert", convert::spec(arch))];
    v.extend(quant::variants(arch).into_iter().map(|s| ("fp8_quant", s)));
    v.extend(gemm::variants(arch).into_iter().map(|s| (gemm::NAME, s)));
    v.extend(
        fp8_grouped::variants(arch)
            .into_iter()
            .map(|s| (fp8_grouped::NAME, s)),
    );
    v.extend(
        fp8_swiglu::variants(arch)
            .into_iter()
            .map(|s| (fp8_swiglu::NAME, s)),
    );
    v
}
