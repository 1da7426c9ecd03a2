//! The guard: compiles a candidate (through the JIT, so its disk cache makes the worker's own
//! compile a hit) and refuses it before any launch, with the reason, when it cannot fit or will
//! run badly: shared memory over the opt-in limit, registers x threads over the register file,
//! spills or a stack frame, zero occupancy, a failed compile. A CUBIN byte-identical to an
//! earlier candidate's is skipped as a duplicate.

use std::collections::HashMap;
use std::sync::Mutex;

use sha2::{Digest, Sha256};

use super::space::Config;
use super::{Outcome, Status};
use crate::device::DeviceInfo;
use crate::harness::check::{dynamic_smem, judge};
use crate::jit::{Jit, KernelSpec};

/// Shared memory the driver reserves per block on sm_80 and newer.
const RESERVED_SMEM: u32 = 1024;
const MAX_THREADS_PER_SM: u32 = 2048;
const MAX_BLOCKS_PER_SM: u32 = 32;

/// Resident blocks per SM, and what limits them.
pub fn occupancy(registers: u32, threads: u32, smem: u32, dev: &DeviceInfo) -> (u32, &'static str) {
    let warps = threads.div_ceil(32).max(1);
    // Registers are allocated per warp in units of 256.
    let per_warp = (registers.max(1) * 32).div_ceil(256) * 256;
    let by_regs = dev.registers_per_sm / (per_warp * warps);
    let by_smem = if smem == 0 {
        MAX_BLOCKS_PER_SM
    } else {
        dev.smem_per_sm_bytes / (smem + RESERVED_SMEM)
    };
    let by_threads = MAX_THREADS_PER_SM / (warps * 32);
    [
        (by_regs, "registers"),
        (by_smem, "shared memory"),
        (by_threads, "threads"),
        (MAX_BLOCKS_PER_SM, "blocks"),
    ]
    .into_iter()
    .min_by_key(|(n, _)| *n)
    .unwrap_or((0, "registers"))
}

/// Threads per block a spec launches with, when it declares them (`KILN_THREADS`).
pub fn threads(spec: &KernelSpec) -> Option<u32> {
    spec.defines
        .iter()
        .find(|(k, _)| k == "KILN_THREADS")
        .and_then(|(_, v)| v.parse().ok())
}

/// What the guard let through: the compile's facts, for the record.
#[derive(Debug, Clone, Default)]
pub struct Passed {
    pub compile_ms: Option<f64>,
    pub compile_cpu_ms: Option<f64>,
    pub load_ms: f64,
    pub cached: bool,
    pub registers: Option<u32>,
    pub smem: Option<u32>,
}

pub struct Guard<'a> {
    pub jit: &'a Jit,
    pub dev: DeviceInfo,
    seen: Mutex<HashMap<([u8; 32], String), String>>,
}

impl<'a> Guard<'a> {
    pub fn new(jit: &'a Jit, dev: DeviceInfo) -> Guard<'a> {
        Guard {
            jit,
            dev,
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Compiles `spec` (for `cfg`) and judges it: `Ok` with the compile's facts, or the
    /// rejected / duplicate outcome with its reason. `None` (a version that compiles in its own
    /// way) passes unjudged. `launch_key` names the config's launch-time parameters
    /// ([`super::space::ParamSpace::launch_key`]): a CUBIN seen before is a duplicate only with
    /// the same launch-time values.
    pub fn check(
        &self,
        cfg: &Config,
        spec: Option<&KernelSpec>,
        launch_key: &str,
    ) -> Result<Passed, Box<Outcome>> {
        let Some(spec) = spec else {
            return Ok(Passed::default());
        };
        let c = match self.jit.compile(spec) {
            Ok(c) => c,
            Err(e) => {
                let first: String = e
                    .to_string()
                    .lines()
                    .filter(|l| l.contains("error"))
                    .take(2)
                    .collect::<Vec<_>>()
                    .join("; ");
                let msg = if first.is_empty() {
                    e.to_string().lines().next().unwrap_or("").to_string()
                } else {
                    first
                };
                return Err(Box::new(Outcome::new(
                    cfg.clone(),
                    Status::Rejected,
                    format!("compile failed: {msg}"),
                )));
            }
        };
        let r = &c.resources;
        let smem = r.static_smem + dynamic_smem(spec);
        let mut problems = judge(spec, r, &self.dev);
        if let Some(t) = threads(spec) {
            if r.registers * t > self.dev.registers_per_sm {
                problems.push(format!(
                    "{} registers x {t} threads over the {}-register file",
                    r.registers, self.dev.registers_per_sm
                ));
            } else if smem <= self.dev.smem_optin_bytes {
                let (blocks, limit) = occupancy(r.registers, t, smem, &self.dev);
                if blocks == 0 {
                    problems.push(format!("zero occupancy: no block fits an SM ({limit})"));
                }
            }
        }
        let facts = |o: &mut Outcome| {
            o.compile_ms = Some(c.compile_ms);
            o.compile_cpu_ms = c.compile_cpu_ms;
            o.cached = c.cached;
            o.registers = Some(r.registers);
            o.smem = Some(smem);
        };
        if !problems.is_empty() {
            let mut o = Outcome::new(cfg.clone(), Status::Rejected, problems.join("; "));
            facts(&mut o);
            return Err(Box::new(o));
        }
        let digest: [u8; 32] = Sha256::digest(&c.cubin).into();
        if let Ok(mut seen) = self.seen.lock() {
            let key = (digest, launch_key.to_string());
            if let Some(first) = seen.get(&key) {
                let mut o = Outcome::new(
                    cfg.clone(),
                    Status::Duplicate,
                    format!("same CUBIN as {first}"),
                );
                facts(&mut o);
                return Err(Box::new(o));
            }
            seen.insert(key, cfg.label());
        }
        Ok(Passed {
            compile_ms: Some(c.compile_ms),
            compile_cpu_ms: c.compile_cpu_ms,
            load_ms: c.load_ms,
            cached: c.cached,
            registers: Some(r.registers),
            smem: Some(smem),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::mma_sync::TileConfig;
    use crate::ops::gemm::{DType, GemmProblem, Layout};

    #[test]
    fn occupancy_counts_registers_shared_memory_and_threads() {
        let h100 = DeviceInfo::h100_sxm();
        assert_eq!(occupancy(168, 256, 96 * 1024, &h100), (1, "registers"));
        assert_eq!(occupancy(64, 256, 96 * 1024, &h100), (2, "shared memory"));
        assert_eq!(occupancy(16, 1024, 0, &h100), (2, "threads"));
        assert_eq!(occupancy(255, 1024, 0, &h100).0, 0);
    }

    fn nvrtc() -> bool {
        crate::jit::nvrtc::version().is_ok()
    }

    #[test]
    fn shared_memory_over_the_limit_is_rejected_with_its_reason() {
        if !nvrtc() {
            return;
        }
        let jit = Jit::default();
        let g = Guard::new(&jit, DeviceInfo::h100_sxm());
        let p = GemmProblem::new(1, 1, 1, Layout::RC, DType::Bf16, DType::Bf16);
        // 128x256 with BK 64 and 5 stages: 240 KB of shared memory
        let t = TileConfig {
            bm: 128,
            bn: 256,
            bk: 64,
            stages: 5,
            group_m: 8,
        };
        let o = g
            .check(
                &t.to_config(),
                Some(&TileConfig::spec_for_tests(&t, &p)),
                "",
            )
            .unwrap_err();
        assert_eq!(o.status, Status::Rejected);
        assert!(o.reason.contains("shared memory over"), "{}", o.reason);
        let ok = TileConfig::DEFAULT;
        let passed = g
            .check(
                &ok.to_config(),
                Some(&TileConfig::spec_for_tests(&ok, &p)),
                "",
            )
            .unwrap();
        assert!(passed.registers.unwrap() > 0);
        // the same CUBIN again is a duplicate
        let again = g
            .check(
                &Config::new(&[("again", 1)]),
                Some(&TileConfig::spec_for_tests(&ok, &p)),
                "",
            )
            .unwrap_err();
        assert_eq!(again.status, Status::Duplicate);
        assert!(again.reason.contains("BM=128,BN=256"), "{}", again.reason);
        // ... unless a launch-time parameter differs: same CUBIN, another candidate
        assert!(g
            .check(
                &Config::new(&[("again", 2)]),
                Some(&TileConfig::spec_for_tests(&ok, &p)),
                "SPLITS=2",
            )
            .is_ok());
    }

    #[test]
    fn a_compile_error_is_a_rejection_not_a_failure() {
        if !nvrtc() {
            return;
        }
        let jit = Jit::without_cache();
        let g = Guard::new(&jit, DeviceInfo::h100_sxm());
        let p = GemmProblem::new(1, 1, 1, Layout::RC, DType::Bf16, DType::Bf16);
        let bad = TileConfig {
            bm: 96,
            bn: 128,
            bk: 32,
            stages: 2,
            group_m: 8,
        };
        let o = g
            .check(
                &bad.to_config(),
                Some(&TileConfig::spec_for_tests(&bad, &p)),
                "",
            )
            .unwrap_err();
        assert_eq!(o.status, Status::Rejected);
        assert!(o.reason.starts_with("compile failed"), "{}", o.reason);
    }
}
