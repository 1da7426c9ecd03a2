//! Host side of `kernels/gemm/simt_tiled.cu`: 128x128 tiles through shared memory, fp32 FFMA.

use super::{alignment, with_problem_defines, GemmArgs, GemmKernel, GemmOperands, GemmProblem};
use crate::device::{Context, DeviceInfo, LaunchConfig};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::tuned::TunedTable;

pub struct SimtTiled;

impl SimtTiled {
    fn spec(arch: &str, p: &GemmProblem, vec: bool) -> KernelSpec {
        with_problem_defines(
            KernelSpec::new("gemm/simt_tiled.cu", "gemm_simt_tiled", arch),
            p.layout,
            p.input,
            p.output,
        )
        .define("KILN_VEC", vec as u32)
    }

    /// 16-byte loads need 16-byte aligned bases and leading dimensions that keep rows aligned.
    fn vectorisable(p: &GemmProblem, ops: &GemmOperands) -> bool {
        alignment(ops.a.ptr()) >= 16 && alignment(ops.b.ptr()) >= 16 && Self::rows_aligned(p)
    }

    /// Whether the leading dimensions keep every row of A and B 16-byte aligned.
    fn rows_aligned(p: &GemmProblem) -> bool {
        let es = p.input.size() as u64;
        (p.lda as u64 * es).is_multiple_of(16) && (p.ldb as u64 * es).is_multiple_of(16)
    }
}

impl GemmKernel for SimtTiled {
    fn name(&self) -> &'static str {
        "simt_tiled"
    }
    fn summary(&self) -> &'static str {
        "128x128 block tile in shared memory, 8x8 per thread, 16-byte loads, fp32 FFMA"
    }
    fn rung(&self) -> u32 {
        1
    }
    fn supports(&self, _p: &GemmProblem, _dev: &DeviceInfo) -> std::result::Result<(), String> {
        Ok(())
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        let mut v = Vec::new();
        for (l, i, o) in super::all_combinations() {
            for vec in [true, false] {
                v.push(Self::spec(arch, &GemmProblem::new(1, 1, 1, l, i, o), vec));
            }
        }
        v
    }
    fn specs_for(&self, p: &GemmProblem, dev: &DeviceInfo, _tuned: &TunedTable) -> Vec<KernelSpec> {
        vec![Self::spec(&dev.arch(), p, Self::rows_aligned(p))]
    }
    fn launch(&self, ctx: &Context, p: &GemmProblem, ops: &GemmOperands) -> Result<()> {
        let f = ctx.function(&Self::spec(&ctx.arch(), p, Self::vectorisable(p, ops)))?;
        let mut args = GemmArgs::new(p, ops);
        let cfg =
            LaunchConfig::simple((p.n.div_ceil(128) as u32, p.m.div_ceil(128) as u32, 1), 256);
        // SAFETY: one parameter, a GemmArgs, whose buffers the caller keeps alive and checked.
        unsafe { f.launch(ctx.stream, &cfg, &mut [args.as_param()]) }
    }
}
