//! The vendor baseline: cuBLASLt (fastest of its heuristic candidates) and cublasGemmEx.
//! (Stub: being written.)

use crate::device::{Context, DeviceInfo};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::{GemmKernel, GemmOperands, GemmProblem};

pub struct Cublas;

impl GemmKernel for Cublas {
    fn name(&self) -> &'static str {
        "cublas"
    }
    fn summary(&self) -> &'static str {
        "vendor: fastest of cuBLASLt's heuristic algorithms and cublasGemmEx"
    }
    fn rung(&self) -> u32 {
        1000
    }
    fn is_vendor(&self) -> bool {
        true
    }
    fn supports(&self, _p: &GemmProblem, _dev: &DeviceInfo) -> std::result::Result<(), String> {
        Err("not yet wired".into())
    }
    fn variants(&self, _arch: &str) -> Vec<KernelSpec> {
        Vec::new()
    }
    fn launch(&self, _ctx: &Context, _p: &GemmProblem, _ops: &GemmOperands) -> Result<()> {
        Err(Error::invalid("cublas baseline not wired yet"))
    }
}
