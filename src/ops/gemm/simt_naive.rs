//! Host side of `kernels/gemm/simt_naive.cu`: one thread per output, any shape, layout, stride.

use super::{with_problem_defines, GemmArgs, GemmKernel, GemmOperands, GemmProblem};
use crate::device::{Context, DeviceInfo, LaunchConfig};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::tuned::TunedTable;

pub struct SimtNaive;

impl SimtNaive {
    fn spec(arch: &str, p: &GemmProblem) -> KernelSpec {
        with_problem_defines(
            KernelSpec::new("gemm/simt_naive.cu", "gemm_simt_naive", arch),
            p.layout,
            p.input,
            p.output,
        )
    }
}

impl GemmKernel for SimtNaive {
    fn name(&self) -> &'static str {
        "simt_naive"
    }
    fn summary(&self) -> &'static str {
        "one thread per output, fp32 FMA from global memory"
    }
    fn rung(&self) -> u32 {
        0
    }
    fn supports(&self, _p: &GemmProblem, _dev: &DeviceInfo) -> std::result::Result<(), String> {
        Ok(())
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        super::all_combinations()
            .into_iter()
            .map(|(l, i, o)| Self::spec(arch, &GemmProblem::new(1, 1, 1, l, i, o)))
            .collect()
    }
    fn specs_for(&self, p: &GemmProblem, dev: &DeviceInfo, _tuned: &TunedTable) -> Vec<KernelSpec> {
        vec![Self::spec(&dev.arch(), p)]
    }
    fn launch(&self, ctx: &Context, p: &GemmProblem, ops: &GemmOperands) -> Result<()> {
        let f = ctx.function(&Self::spec(&ctx.arch(), p))?;
        let mut args = GemmArgs::new(p, ops);
        let cfg = LaunchConfig::simple((p.n.div_ceil(16) as u32, p.m.div_ceil(16) as u32, 1), 256);
        // SAFETY: one parameter, a GemmArgs, whose buffers the caller keeps alive and checked.
        unsafe { f.launch(ctx.stream, &cfg, &mut [args.as_param()]) }
    }
}
