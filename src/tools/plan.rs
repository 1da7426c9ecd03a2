//! `kiln plan`: what the GEMM dispatch would run for one problem, and why, without a GPU: the
//! version, the tuned or heuristic config with every rule that decided it, the copies, the grid.

use serde::Serialize;

use crate::device::DeviceInfo;
use crate::error::Result;
use crate::ops::gemm::{GemmProblem, LaunchPlan};
use crate::ops::registry::Registry;
use crate::overrides::Overrides;
use crate::tune::cache;

/// The dispatch's decision for one problem on one GPU model.
#[derive(Debug, Clone, Serialize)]
pub struct GemmPlan {
    /// The version that runs, its rung, and why it was picked.
    pub version: String,
    pub rung: u32,
    pub why: String,
    /// Its config as the tuning space names it (the tuned one, else its heuristic's), when it
    /// has a space.
    pub config: Option<String>,
    /// The launch worked out in full, for a version that plans one ([`GemmKernel::plan`]).
    ///
    /// [`GemmKernel::plan`]: crate::ops::gemm::GemmKernel::plan
    pub launch: Option<LaunchPlan>,
}

/// The plan for `p` on `dev`: `requested` if given (refused as the dispatch refuses it), else the
/// version the dispatch selects (the tuning cache included), with `overrides` applied as
/// `launch` applies a context's.
pub fn plan_gemm(
    registry: &Registry,
    p: &GemmProblem,
    dev: &DeviceInfo,
    requested: Option<&str>,
    overrides: &Overrides,
) -> Result<GemmPlan> {
    let k = registry.select_gemm(p, dev, requested)?;
    let tuned = cache::lookup(dev, k.name(), p);
    let why = match (requested, &tuned) {
        (Some(_), _) => "asked for (--version, else the config file's [gemm] version)".to_string(),
        (None, Some(_)) => "the highest rung that supports the problem, or a tuned version that \
                            measured faster in its own tuning"
            .to_string(),
        (None, None) => "the highest rung that supports the problem".to_string(),
    };
    let launch = k.plan(p, dev, true, overrides);
    // (a version with a launch plan: the tile in `launch`, resolved as `launch` resolves it)
    let config = match launch {
        Some(_) => None,
        None => tuned.or_else(|| k.baseline(p, dev)).map(|c| c.to_string()),
    };
    Ok(GemmPlan {
        version: k.name().to_string(),
        rung: k.rung(),
        why,
        config,
        launch,
    })
}
