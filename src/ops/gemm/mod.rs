//! GEMM: the problem type, the versions (one host file per device file under `kernels/gemm/`),
//! and what they share: the kernel interface and the argument block every GEMM kernel receives.

pub mod mma_sync;
pub mod pack_rows;
pub mod plan;
pub mod planted;
pub mod problem;
pub mod simt_naive;
pub mod simt_tiled;
pub mod small_k;
pub mod tile_grid;
pub mod tma_operands;
pub mod trace;
pub mod transpose_rows;
pub mod wgmma_cp_async;
pub mod wgmma_tma;
pub mod wgmma_tma_ws;

use std::ffi::c_void;

pub use plan::{ForcedSetup, LaunchPlan};
pub use problem::{parse_shape, DType, GemmKey, GemmProblem, Layout};
pub use trace::{CtaStamps, MAX_TRACE_EVENTS};

use crate::device::{Context, DeviceBuffer, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::space::{Config, ParamSpace};
use crate::ops::tuned::TunedTable;
use crate::overrides::Overrides;

/// The device buffers of one GEMM call.
pub struct GemmOperands<'a> {
    pub a: &'a DeviceBuffer,
    pub b: &'a DeviceBuffer,
    pub c: &'a DeviceBuffer,
}

/// One version of the GEMM op.
pub trait GemmKernel: Send + Sync {
    /// Registry name, e.g. `simt_tiled`; the same as its device file's stem.
    fn name(&self) -> &'static str;
    /// One line: the technique this rung adds.
    fn summary(&self) -> &'static str;
    /// Position on the ladder (higher is expected faster); the default picks the highest that
    /// supports the problem, after any tuned or configured choice.
    fn rung(&self) -> u32;
    /// The vendor baseline is never picked by default dispatch.
    fn is_vendor(&self) -> bool {
        false
    }
    /// `Ok` or the reason this version cannot compute `p` on `dev` (never a wrong result).
    fn supports(&self, p: &GemmProblem, dev: &DeviceInfo) -> std::result::Result<(), String>;
    /// Every specialisation this version can compile to for `arch` (for `kiln check`).
    fn variants(&self, arch: &str) -> Vec<KernelSpec>;
    /// The specialisations a launch of `p` on `dev` compiles with the tuned configs of `tuned`
    /// (what the context carries), worked out without a GPU (for `kiln suite`, which compiles
    /// only what it runs), taking the operands and C as aligned as allocations are. The default,
    /// every variant for `dev`'s arch, is right for any version; a version with many variants
    /// narrows it to what its dispatch picks for `p`.
    fn specs_for(
        &self,
        _p: &GemmProblem,
        dev: &DeviceInfo,
        _tuned: &TunedTable,
    ) -> Vec<KernelSpec> {
        self.variants(&dev.arch())
    }
    /// Enqueues the GEMM on the context's stream. Callers have validated `p` and the buffers and
    /// checked `supports`. Versions with a parameter space launch the tuned config for `p`'s
    /// shape class when the context's table ([`Context::tuned`]) has one, else their heuristic.
    fn launch(&self, ctx: &Context, p: &GemmProblem, ops: &GemmOperands) -> Result<()>;
    /// The parameters the tuner may vary for `p` on `dev`, with the rules between them; `None`
    /// for a version with nothing to tune. Every config the space allows must compute `p`
    /// correctly (resource limits are left to the tuner's guard).
    fn space(&self, _p: &GemmProblem, _dev: &DeviceInfo) -> Option<ParamSpace> {
        None
    }
    /// The config an untuned launch of `p` runs (the version's heuristic), as a point of its
    /// space: the tuner evaluates it first, so a search never ends worse than the default.
    fn baseline(&self, _p: &GemmProblem, _dev: &DeviceInfo) -> Option<Config> {
        None
    }
    /// The specialisation `cfg` compiles to (for the guard to compile before any launch).
    fn spec_for(&self, _arch: &str, _p: &GemmProblem, _cfg: &Config) -> Option<KernelSpec> {
        None
    }
    /// [`GemmKernel::launch`] with an explicit config from [`GemmKernel::space`].
    fn launch_with(
        &self,
        ctx: &Context,
        p: &GemmProblem,
        ops: &GemmOperands,
        _cfg: &Config,
    ) -> Result<()> {
        self.launch(ctx, p, ops)
    }
    /// What [`GemmKernel::launch`] would run for `p` on a GPU like `dev`, worked out without one
    /// (for `kiln plan`), with a context that carries `tuned` and `overrides` (`tuned`'s config
    /// for `p`, looked up as `launch` looks it up). `None` for a version whose launch has nothing
    /// to plan beyond its config ([`GemmKernel::baseline`]).
    fn plan(
        &self,
        _p: &GemmProblem,
        _dev: &DeviceInfo,
        _tuned: &TunedTable,
        _overrides: &Overrides,
    ) -> Option<LaunchPlan> {
        None
    }
    /// The launches `kiln sanitize --configs` forces, each through its own `KILN_*` variables
    /// (every tile config, epilogue and split layout the version can run); none by default.
    fn forced_setups(&self) -> Vec<ForcedSetup> {
        Vec::new()
    }
    /// The events this version's instrumented variant stamps, in order (for `kiln profile
    /// --timeline`; at most [`MAX_TRACE_EVENTS`]); none for a version without one.
    fn trace_events(&self) -> &'static [&'static str] {
        &[]
    }
    /// One instrumented launch of `p`: every CTA's stamps of [`GemmKernel::trace_events`], in
    /// launch order. Refused by a version without an instrumented variant.
    fn timeline(
        &self,
        _ctx: &Context,
        _p: &GemmProblem,
        _ops: &GemmOperands,
    ) -> Result<Vec<CtaStamps>> {
        Err(crate::error::Error::Unsupported {
            kernel: self.name().into(),
            reason: "it has no instrumented variant (`kiln profile --timeline`)".into(),
        })
    }
}

/// The argument block, laid out as `GemmArgs` in `kernels/common/gemm_args.cuh`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct GemmArgs {
    pub a: u64,
    pub b: u64,
    pub c: u64,
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub lda: i64,
    pub ldb: i64,
    pub ldc: i64,
    pub alpha: f32,
    pub beta: f32,
}

impl GemmArgs {
    pub fn new(p: &GemmProblem, ops: &GemmOperands) -> Self {
        GemmArgs {
            a: ops.a.ptr(),
            b: ops.b.ptr(),
            c: ops.c.ptr(),
            m: p.m as i32,
            n: p.n as i32,
            k: p.k as i32,
            lda: p.lda as i64,
            ldb: p.ldb as i64,
            ldc: p.ldc as i64,
            alpha: p.alpha,
            beta: p.beta,
        }
    }

    pub fn as_param(&mut self) -> *mut c_void {
        self as *mut GemmArgs as *mut c_void
    }
}

/// Adds the dtype and layout defines every GEMM kernel reads.
pub fn with_problem_defines(
    spec: KernelSpec,
    layout: Layout,
    input: DType,
    output: DType,
) -> KernelSpec {
    spec.define("KILN_IN", input.code())
        .define("KILN_OUT", output.code())
        .define("KILN_A_ROW", layout.a_row_major() as u32)
        .define("KILN_B_ROW", layout.b_row_major() as u32)
}

/// Every (layout, input, output) combination, for variant listings.
pub fn all_combinations() -> Vec<(Layout, DType, DType)> {
    let mut v = Vec::new();
    for l in Layout::ALL {
        for i in DType::INPUTS {
            for o in DType::OUTPUTS {
                v.push((l, i, o));
            }
        }
    }
    v
}

/// Refuses (as `Unsupported`, so the dispatcher falls back) operands A or B whose base is not
/// 16-byte aligned; `needs` says which copy engine needs it (cp.async, TMA).
pub fn require_aligned_operands(kernel: &str, ops: &GemmOperands, needs: &str) -> Result<()> {
    for (name, ptr) in [("A", ops.a.ptr()), ("B", ops.b.ptr())] {
        if alignment(ptr) < 16 {
            return Err(crate::error::Error::Unsupported {
                kernel: kernel.into(),
                reason: format!(
                    "{name} starts at {ptr:#x}, which is not 16-byte aligned ({needs})"
                ),
            });
        }
    }
    Ok(())
}

/// Byte alignment of a device pointer (capped at 256).
pub fn alignment(ptr: u64) -> u64 {
    if ptr == 0 {
        256
    } else {
        (ptr & ptr.wrapping_neg()).min(256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gemm_args_match_the_device_layout() {
        // pointers 3x8, three ints, pad to 8, three i64, two floats
        assert_eq!(std::mem::size_of::<GemmArgs>(), 72);
        assert_eq!(std::mem::offset_of!(GemmArgs, lda), 40);
        assert_eq!(std::mem::offset_of!(GemmArgs, alpha), 64);
    }
}
