//! The autotuner: parameter spaces declared by kernel versions ([`space`]), a guard that compiles
//! each candidate and rejects what cannot fit before anything runs ([`guard`]), exhaustive and
//! evolutionary search ([`search`]), worker processes with a watchdog so that a candidate that
//! hangs, traps or computes garbage is recorded and skipped ([`worker`]), the tuning run that
//! ties them together and records every result at once ([`run`], [`record`]), and the tuning
//! cache the default dispatch reads ([`cache`]).

pub mod cache;
pub mod fp8;
pub mod guard;
pub mod landscape;
pub mod record;
pub mod run;
pub mod search;
/// The parameter-space types are op-level data ([`crate::ops::space`]); kept here for tune's users.
pub use crate::ops::space;
pub mod surrogate;
pub mod target;
pub mod watchdog;
pub mod worker;

use serde::{Deserialize, Serialize};

use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::attention::{AttentionKernel, AttentionOperands, AttentionProblem};
use crate::ops::attention_backward::{
    knobs, AttentionBackwardKernel, BackwardOperands, BackwardProblem,
};
use crate::ops::gemm::{GemmKernel, GemmOperands, GemmProblem};
use crate::overrides::AttentionOverrides;
use space::{Config, ParamSpace};

/// How one candidate ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Verified and timed.
    Ok,
    /// Verified, timed briefly and stopped early: far behind the best so far.
    Slow,
    /// The guard refused it before launch (shared memory, registers, spills, compile error).
    Rejected,
    /// Its CUBIN is byte-identical to an earlier candidate's.
    Duplicate,
    /// Ran past the watchdog; the worker was killed.
    Timeout,
    /// The worker died or the context was corrupted (trap, illegal address).
    Crash,
    /// Ran, but the result was wrong.
    Wrong,
    /// Any other failure (launch refused, CUDA error that left the worker alive).
    Error,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Slow => "slow",
            Status::Rejected => "rejected",
            Status::Duplicate => "duplicate",
            Status::Timeout => "timeout",
            Status::Crash => "crash",
            Status::Wrong => "wrong",
            Status::Error => "error",
        }
    }
    pub fn parse(s: &str) -> Status {
        match s {
            "ok" => Status::Ok,
            "slow" => Status::Slow,
            "rejected" => Status::Rejected,
            "duplicate" => Status::Duplicate,
            "timeout" => Status::Timeout,
            "crash" => Status::Crash,
            "wrong" => Status::Wrong,
            _ => Status::Error,
        }
    }
    /// Whether the candidate produced a usable time.
    pub fn timed(self) -> bool {
        matches!(self, Status::Ok | Status::Slow)
    }
}

/// One candidate's result: what the search sees (a time, infinite unless timed) and what the
/// store keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    pub config: Config,
    pub status: Status,
    /// The reason for anything but `ok`.
    pub reason: String,
    pub median_ms: Option<f64>,
    pub tflops: Option<f64>,
    /// NVRTC time of this candidate's CUBIN (when it was first built).
    pub compile_ms: Option<f64>,
    /// The compiling thread's CPU time for the same build (unaffected by parallel compiles
    /// waiting for cores); absent in outcomes recorded before it was kept.
    #[serde(default)]
    pub compile_cpu_ms: Option<f64>,
    /// Whether this run found the CUBIN in the JIT cache.
    pub cached: bool,
    pub registers: Option<u32>,
    /// Static plus dynamic shared memory per block.
    pub smem: Option<u32>,
    /// The GPU (ordinal) whose worker measured it; none where nothing ran, or in outcomes
    /// recorded before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
}

impl Outcome {
    pub fn new(config: Config, status: Status, reason: impl Into<String>) -> Outcome {
        Outcome {
            config,
            status,
            reason: reason.into(),
            median_ms: None,
            tflops: None,
            compile_ms: None,
            compile_cpu_ms: None,
            cached: false,
            registers: None,
            smem: None,
            gpu: None,
        }
    }
    /// The search's view: the time, or infinity for anything that was not timed in full.
    pub fn time(&self) -> f64 {
        match (self.status, self.median_ms) {
            (Status::Ok, Some(t)) => t,
            // Early-stopped candidates keep their (bad) quick time: they rank, but last.
            (Status::Slow, Some(t)) => t,
            _ => f64::INFINITY,
        }
    }
}

/// A version pinned to one config: its `launch` is the version's `launch_with(cfg)`, so the
/// harness's verify and bench run the candidate unchanged.
pub struct Configured<'a> {
    pub inner: &'a dyn GemmKernel,
    pub config: Config,
}

impl GemmKernel for Configured<'_> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn summary(&self) -> &'static str {
        self.inner.summary()
    }
    fn rung(&self) -> u32 {
        self.inner.rung()
    }
    fn supports(&self, p: &GemmProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        self.inner.supports(p, dev)
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        self.inner.variants(arch)
    }
    fn launch(&self, ctx: &Context, p: &GemmProblem, ops: &GemmOperands) -> Result<()> {
        self.inner.launch_with(ctx, p, ops, &self.config)
    }
}

/// An attention version pinned to one config (see [`Configured`]).
pub struct AttnConfigured<'a> {
    pub inner: &'a dyn AttentionKernel,
    pub config: Config,
}

impl AttentionKernel for AttnConfigured<'_> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn summary(&self) -> &'static str {
        self.inner.summary()
    }
    fn rung(&self) -> u32 {
        self.inner.rung()
    }
    fn supports(&self, p: &AttentionProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        // The pinned config's own limits, not those of whatever the default dispatch would run.
        match self.inner.space(p, dev) {
            Some(space) => {
                self.inner.supports(p, dev)?;
                match space.violations(&self.config).first() {
                    Some(v) => Err(format!("config {}: {v}", self.config)),
                    None => Ok(()),
                }
            }
            None => self.inner.supports(p, dev),
        }
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        self.inner.variants(arch)
    }
    fn launch(&self, ctx: &Context, p: &AttentionProblem, ops: &AttentionOperands) -> Result<()> {
        self.inner.launch_with(ctx, p, ops, &self.config)
    }
    fn space(&self, p: &AttentionProblem, dev: &DeviceInfo) -> Option<ParamSpace> {
        self.inner.space(p, dev)
    }
}

/// An attention backward version pinned to one config of its knobs: every launch runs them laid
/// over the environment's ([`knobs::apply`]), whatever the tuned table says.
pub struct BwdConfigured<'a> {
    pub inner: &'a dyn AttentionBackwardKernel,
    pub config: Config,
}

impl AttentionBackwardKernel for BwdConfigured<'_> {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn summary(&self) -> &'static str {
        self.inner.summary()
    }
    fn rung(&self) -> u32 {
        self.inner.rung()
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        self.inner.supports(p, dev)
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        self.inner.variants(arch)
    }
    fn launch_knobs(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
        o: &AttentionOverrides,
    ) -> Result<()> {
        self.inner.launch_knobs(ctx, p, ops, o)
    }
    fn launch(&self, ctx: &Context, p: &BackwardProblem, ops: &BackwardOperands) -> Result<()> {
        let o = knobs::apply(&ctx.overrides.attention, &self.config);
        self.inner.launch_knobs(ctx, p, ops, &o)
    }
    fn knobs(&self, p: &BackwardProblem) -> knobs::Knobs {
        self.inner.knobs(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pinned_attention_config_is_judged_by_its_own_limits() {
        use crate::ops::attention::fa3_wgmma::Fa3Wgmma;
        let h100 = DeviceInfo::h100_sxm();
        let p = AttentionProblem::new(1, 2, 256, 128);
        let fits = AttnConfigured {
            inner: &Fa3Wgmma,
            config: Config::parse(
                "BN=176,CWG=2,STAGES=2,OVERLAP=1,PINGPONG=0,EMU=0,DYNAMIC=0,PERSIST=0",
            )
            .unwrap(),
        };
        assert!(fits.supports(&p, &h100).is_ok());
        // 3 stages of 176-key tiles: past the opt-in limit, said before any launch
        let over = AttnConfigured {
            config: Config::parse(
                "BN=176,CWG=2,STAGES=3,OVERLAP=1,PINGPONG=0,EMU=0,DYNAMIC=0,PERSIST=0",
            )
            .unwrap(),
            ..fits
        };
        let e = over.supports(&p, &h100).unwrap_err();
        assert!(e.contains("shared memory") && e.contains("STAGES=3"), "{e}");
    }

    #[test]
    fn only_timed_outcomes_have_a_finite_time() {
        let c = Config::new(&[("X", 1)]);
        let mut o = Outcome::new(c.clone(), Status::Ok, "");
        o.median_ms = Some(2.0);
        assert_eq!(o.time(), 2.0);
        for s in [
            Status::Rejected,
            Status::Timeout,
            Status::Crash,
            Status::Wrong,
            Status::Duplicate,
            Status::Error,
        ] {
            let mut o = Outcome::new(c.clone(), s, "x");
            o.median_ms = Some(1.0);
            assert_eq!(o.time(), f64::INFINITY, "{s:?}");
            assert_eq!(Status::parse(s.name()), s);
        }
    }
}
