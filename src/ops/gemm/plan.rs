//! What a GEMM version's launch runs for a problem, worked out without a GPU: the plan `kiln plan`
//! prints, the forced launches `kiln sanitize --configs` checks, and where their overrides come from.

use std::sync::Arc;

use serde::Serialize;

use super::{DType, GemmProblem};

/// What a launch would run, worked out without a GPU ([`super::GemmKernel::plan`]): the copies
/// made first, the tile that runs and how, the grid, and the notes of every rule that decided.
#[derive(Debug, Clone, Serialize)]
pub struct LaunchPlan {
    /// The tile that runs (e.g. `128x256 pair`, K slices included).
    pub tile: String,
    pub bm: u32,
    pub bn: u32,
    pub stages: u32,
    /// CTAs per cluster (2: pairs sharing B through multicast).
    pub cluster: u32,
    pub pingpong: bool,
    /// K slices of the split tiles (1: none).
    pub splits: u32,
    /// Only the last, partial wave's tiles are split.
    pub tail: bool,
    /// Stream-K over the cluster tiles from here on.
    pub stream_k_from: Option<u32>,
    /// The TMA-store epilogue (else the row-store one, C staged in shared memory and stored by
    /// rows; in a ping-pong tile the register one).
    pub tma_epilogue: bool,
    /// The TMA-store epilogue with C loaded first (beta other than 0 and 1).
    pub c_loaded: bool,
    /// The variant with the split-K and stream-K code, else the one without, which compiles
    /// faster.
    pub split_code: bool,
    /// Copies launched before the GEMM, each with its reason.
    pub copies: Vec<String>,
    /// Cluster tiles, resident cluster slots assumed, CTAs launched, and work units per slot.
    pub tiles: u32,
    pub slots: u32,
    pub grid: u32,
    pub waves: f64,
    /// Why: where the choice came from and each rule that applied, in order.
    pub notes: Vec<String>,
}

impl LaunchPlan {
    /// The plan as `kiln plan` prints it: the notes, then what runs, the grid and the copies.
    pub fn lines(&self) -> Vec<String> {
        let mut v = vec!["why:".to_string()];
        v.extend(self.notes.iter().map(|n| format!("  - {n}")));
        v.push(format!(
            "runs: {} tiles, {} stages{}, {} epilogue{}{}",
            self.tile,
            self.stages,
            if self.pingpong {
                ", ping-pong"
            } else {
                ", cooperative"
            },
            if self.c_loaded {
                "C-load TMA-store"
            } else if self.tma_epilogue {
                "TMA-store"
            } else if self.pingpong {
                "register"
            } else {
                "row-store"
            },
            match self.stream_k_from {
                Some(t) => format!(", stream-K from cluster tile {t}"),
                None => String::new(),
            },
            if self.split_code {
                ", the variant with split-K code"
            } else {
                ""
            }
        ));
        v.push(format!(
            "grid: {} CTAs for {} {}tiles on {} slots ({:.2} waves of work units)",
            self.grid,
            self.tiles,
            if self.cluster > 1 { "cluster " } else { "" },
            self.slots,
            self.waves
        ));
        if self.copies.is_empty() {
            v.push("copies: none".into());
        } else {
            v.extend(self.copies.iter().map(|c| format!("copy: {c}")));
        }
        v
    }
}

/// Whether a problem on a GPU of this many SMs runs a [`ForcedSetup`] as forced.
pub type RunsAt = dyn Fn(&GemmProblem, u32) -> bool + Send + Sync;

/// One launch that `kiln sanitize --configs` forces through `KILN_*` variables
/// ([`super::GemmKernel::forced_setups`]): its name, the variables, C's type and beta, and the
/// check that a problem really runs it (a forced tile can fall back to another, and a sanitizer
/// run of the fallback says nothing about the tile).
#[derive(Clone)]
pub struct ForcedSetup {
    pub name: String,
    /// The variables that force it, in place of this process's `KILN_*` ones.
    pub env: Vec<(String, String)>,
    pub out: DType,
    /// C's scale (0: C only written; other values read C, and pick the epilogue that does).
    pub beta: f32,
    runs_at: Arc<RunsAt>,
}

impl ForcedSetup {
    pub fn new(
        name: String,
        env: Vec<(String, String)>,
        out: DType,
        beta: f32,
        runs_at: impl Fn(&GemmProblem, u32) -> bool + Send + Sync + 'static,
    ) -> ForcedSetup {
        ForcedSetup {
            name,
            env,
            out,
            beta,
            runs_at: Arc::new(runs_at),
        }
    }

    /// Whether `p` (of this setup's C type and beta) on `sm_count` SMs, run with
    /// [`ForcedSetup::env`], launches this setup as asked rather than a fallback.
    pub fn runs_at(&self, p: &GemmProblem, sm_count: u32) -> bool {
        (self.runs_at)(p, sm_count)
    }
}

impl std::fmt::Debug for ForcedSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForcedSetup")
            .field("name", &self.name)
            .field("env", &self.env)
            .field("out", &self.out)
            .field("beta", &self.beta)
            .finish_non_exhaustive()
    }
}
