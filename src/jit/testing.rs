//! What the kernels' compile tests share: whether NVRTC is here (a missing one skips the test
//! unless `KILN_REQUIRE_NVRTC` is set), and a family's variants compiled and judged as `kiln check`.

use super::{nvrtc, Jit, KernelSpec};
use crate::device::DeviceInfo;
use crate::harness::check::judge;

/// True when NVRTC can compile here. Without it a compile test passes as skipped, except where
/// `KILN_REQUIRE_NVRTC` says this machine must have it (CI): then it fails.
pub(crate) fn nvrtc_here() -> bool {
    let here = nvrtc::version().is_ok();
    let required = std::env::var_os("KILN_REQUIRE_NVRTC").is_some();
    assert!(here || !required, "NVRTC is required here but missing");
    here
}

/// Compiles every spec and fails on the first one with a resource problem on an H100 (spills,
/// too many registers or too much shared memory).
pub(crate) fn assert_compile_clean<'a>(specs: impl IntoIterator<Item = &'a KernelSpec>) {
    let jit = Jit::default();
    let dev = DeviceInfo::h100_sxm();
    for s in specs {
        let c = jit.compile(s).unwrap();
        let problems = judge(s, &c.resources, &dev);
        assert!(problems.is_empty(), "{}: {problems:?}", s.label());
    }
}
