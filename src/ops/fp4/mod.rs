//! FP4 on Hopper: quantisation to and from NVFP4 and MXFP4 on the GPU (bit-exact with the CPU
//! formats), and the NVFP4 GEMV / small-M GEMM that decodes weights in registers.

pub mod fp4_dequant;
pub mod fp4_quant;
pub mod nvfp4_gemv;

pub use fp4_dequant::{dequantize_into, Dequantize};
pub use fp4_quant::{quantize, quantize_into, Fp4Format, Fp4Matrix, Fp4View};
pub use nvfp4_gemv::{GemvOperands, GemvProblem};

/// Test support for the 4-bit kernels (here and in `ops::moe::fp4`): compiles each spec for
/// sm_90a and asserts it has no problem on an H100 (spills, a stack frame, serialised wgmma,
/// ignored setmaxnreg, shared memory over the limit); returns the resources, or `None` with
/// nothing checked where NVRTC is missing (a failure under `KILN_REQUIRE_NVRTC`).
#[cfg(test)]
pub(crate) fn compile_clean(
    specs: &[crate::jit::KernelSpec],
) -> Option<Vec<crate::jit::Resources>> {
    use crate::jit::{nvrtc, Jit};
    if nvrtc::version().is_err() {
        assert!(
            std::env::var_os("KILN_REQUIRE_NVRTC").is_none(),
            "NVRTC is required here but missing"
        );
        return None;
    }
    let (jit, dev) = (Jit::default(), crate::device::DeviceInfo::h100_sxm());
    let compiled = specs.iter().map(|s| {
        let c = jit.compile(s).unwrap();
        let problems = crate::harness::check::judge(s, &c.resources, &dev);
        assert!(problems.is_empty(), "{}: {problems:?}", s.label());
        c.resources
    });
    Some(compiled.collect())
}

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
