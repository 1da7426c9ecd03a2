//! TEST-ONLY GEMM "version" `planted`, registered only when `KILN_TEST_KERNELS=1`: a space of one
//! parameter, MODE, where 0 is a correct GEMM (the naive rung), 1 launches `kernels/test/hang.cu`
//! (spins forever) and 2 launches `kernels/test/oob.cu` (writes far out of bounds). It exists so
//! that `KILN_TEST_KERNELS=1 kiln tune --version planted` shows the tuner catching, recording and
//! skipping a hang and a crash on a real GPU. Its kernels are compiled here with NVRTC directly
//! (they are not among the JIT's embedded sources), so nothing else can reach them.

use std::time::Instant;

use super::{GemmArgs, GemmKernel, GemmOperands, GemmProblem};
use crate::device::{Context, DeviceInfo, Function, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::{nvrtc, Compiled, KernelSpec, Resources};
use crate::ops::space::{Config, ParamSpace};
use crate::ops::tuned::TunedTable;

pub const NAME: &str = "planted";

/// Whether the test-only kernels are switched on (`KILN_TEST_KERNELS=1`).
pub fn enabled() -> bool {
    std::env::var("KILN_TEST_KERNELS").is_ok_and(|v| v == "1")
}

pub struct Planted;

const HANG: &str = include_str!("../../../kernels/test/hang.cu");
const OOB: &str = include_str!("../../../kernels/test/oob.cu");

fn load(ctx: &Context, path: &str, source: &str, entry: &str) -> Result<Function> {
    let spec = KernelSpec::new(path, entry, &ctx.arch());
    let t = Instant::now();
    let out = nvrtc::compile(path, source, &[], &spec.options())?;
    let ms = t.elapsed().as_secs_f64() * 1e3;
    Function::load(&Compiled {
        resources: Resources::parse(&out.log, entry),
        spec,
        cubin_sha256: crate::jit::sha256_hex(&out.cubin),
        cubin: out.cubin,
        compile_ms: ms,
        compile_cpu_ms: None,
        load_ms: ms,
        cached: false,
        log: out.log,
    })
}

impl GemmKernel for Planted {
    fn name(&self) -> &'static str {
        NAME
    }
    fn summary(&self) -> &'static str {
        "TEST ONLY: MODE=0 correct (naive), 1 hangs, 2 writes out of bounds"
    }
    fn rung(&self) -> u32 {
        0
    }
    fn supports(&self, _p: &GemmProblem, _dev: &DeviceInfo) -> std::result::Result<(), String> {
        Ok(())
    }
    fn variants(&self, _arch: &str) -> Vec<KernelSpec> {
        Vec::new()
    }
    fn specs_for(&self, p: &GemmProblem, dev: &DeviceInfo, tuned: &TunedTable) -> Vec<KernelSpec> {
        super::simt_naive::SimtNaive.specs_for(p, dev, tuned)
    }
    fn launch(&self, ctx: &Context, p: &GemmProblem, ops: &GemmOperands) -> Result<()> {
        super::simt_naive::SimtNaive.launch(ctx, p, ops)
    }
    fn space(&self, _p: &GemmProblem, _dev: &DeviceInfo) -> Option<ParamSpace> {
        Some(ParamSpace::new().param("MODE", &[0, 1, 2]))
    }
    fn launch_with(
        &self,
        ctx: &Context,
        p: &GemmProblem,
        ops: &GemmOperands,
        cfg: &Config,
    ) -> Result<()> {
        let f = match cfg.get("MODE") {
            Some(0) => return self.launch(ctx, p, ops),
            Some(1) => load(ctx, "test/hang.cu", HANG, "planted_hang")?,
            Some(2) => load(ctx, "test/oob.cu", OOB, "planted_oob")?,
            _ => {
                return Err(Error::Unsupported {
                    kernel: NAME.into(),
                    reason: format!("{cfg}: MODE must be 0, 1 or 2"),
                })
            }
        };
        let mut args = GemmArgs::new(p, ops);
        // SAFETY: deliberately unsafe test kernels; the tuner runs them only in a worker process
        // whose death or hang it expects. The one parameter matches their PlantedArgs layout.
        unsafe {
            f.launch(
                ctx.stream,
                &LaunchConfig::simple((1, 1, 1), 32),
                &mut [args.as_param()],
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planted_kernels_compile_and_stay_out_of_the_check() {
        assert!(Planted.variants("sm_90a").is_empty());
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        for (path, src, entry) in [
            ("test/hang.cu", HANG, "planted_hang"),
            ("test/oob.cu", OOB, "planted_oob"),
        ] {
            let spec = KernelSpec::new(path, entry, "sm_90a");
            let out =
                nvrtc::compile(path, src, &[], &spec.options()).unwrap_or_else(|e| panic!("{e}"));
            assert!(!out.cubin.is_empty());
        }
    }
}
