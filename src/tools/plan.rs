//! `kiln plan`: what the GEMM dispatch would run for one problem, and why, without a GPU: the
//! version, the tuned or heuristic config with every rule that decided it, the copies, the grid.

use serde::Serialize;

use crate::device::DeviceInfo;
use crate::error::Result;
use crate::ops::gemm::{GemmProblem, LaunchPlan};
use crate::ops::registry::Registry;
use crate::ops::tuned::TunedTable;
use crate::overrides::Overrides;

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
/// version the dispatch selects, for a context that carries `tuned` and `overrides` (applied as
/// `launch` applies them).
pub fn plan_gemm(
    registry: &Registry,
    p: &GemmProblem,
    dev: &DeviceInfo,
    requested: Option<&str>,
    tuned: &TunedTable,
    overrides: &Overrides,
) -> Result<GemmPlan> {
    let k = registry.select_gemm(p, dev, tuned, requested)?;
    let tuned_config = tuned.gemm(dev, k.name(), p);
    let why = match (requested, &tuned_config) {
        (Some(_), _) => "asked for (--version, else the config file's [gemm] version)".to_string(),
        (None, Some(_)) => "the highest rung that supports the problem, or a tuned version that \
                            measured faster in its own tuning"
            .to_string(),
        (None, None) => "the highest rung that supports the problem".to_string(),
    };
    let launch = k.plan(p, dev, tuned, overrides);
    // (a version with a launch plan: the tile in `launch`, resolved as `launch` resolves it)
    let config = match launch {
        Some(_) => None,
        None => tuned_config
            .or_else(|| k.baseline(p, dev))
            .map(|c| c.to_string()),
    };
    Ok(GemmPlan {
        version: k.name().to_string(),
        rung: k.rung(),
        why,
        config,
        launch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::wgmma_tma_ws::as_read;
    use crate::ops::gemm::{DType, Layout};
    use crate::ops::space::Config;
    use crate::ops::tuned::TuneKey;

    fn square(n: usize) -> GemmProblem {
        GemmProblem::new(n, n, n, Layout::RC, DType::Bf16, DType::Bf16)
    }

    fn plan(p: &GemmProblem, version: Option<&str>, tuned: &TunedTable) -> GemmPlan {
        let h100 = DeviceInfo::h100_sxm();
        plan_gemm(
            &Registry::default(),
            p,
            &h100,
            version,
            tuned,
            &Overrides::NONE,
        )
        .unwrap()
    }

    #[test]
    fn a_tuned_table_changes_the_plan_and_no_table_gives_the_heuristic() {
        let h100 = DeviceInfo::h100_sxm();
        let p = square(4096);
        let heuristic = plan(&p, None, &TunedTable::empty());
        assert_eq!(heuristic.version, "wgmma_tma_ws");
        let untuned = heuristic.launch.unwrap();
        assert!(
            untuned.notes.iter().any(|n| n.contains("no tuned config")),
            "{:?}",
            untuned.notes
        );

        let mut table = TunedTable::empty();
        let cfg = Config::new(&[("BN", 128), ("PAIRS", 0), ("SPLITS", 2), ("GROUP_M", 8)]);
        // (keyed as `launch` looks it up: for the problem as the kernel reads it)
        table.insert(
            TuneKey::new(&h100, "gemm", "wgmma_tma_ws", &as_read(&p)),
            cfg,
            None,
        );
        let tuned = plan(&p, None, &table).launch.unwrap();
        assert_eq!((tuned.bn, tuned.splits, tuned.cluster), (128, 2, 1));
        assert_ne!(
            (untuned.bn, untuned.splits),
            (tuned.bn, tuned.splits),
            "the heuristic picks another config here"
        );
        assert!(
            tuned.notes.iter().any(|n| n.contains("the tuned config")),
            "{:?}",
            tuned.notes
        );
        // another shape class is left to the heuristic
        let other = plan(&square(1024), None, &table).launch.unwrap();
        assert!(other.notes.iter().any(|n| n.contains("no tuned config")));
    }

    #[test]
    fn a_version_without_a_launch_plan_shows_the_tuned_config_or_its_heuristic() {
        let h100 = DeviceInfo::h100_sxm();
        let p = square(4096);
        let mma = Some("mma_sync");
        let heuristic = plan(&p, mma, &TunedTable::empty()).config.unwrap();
        assert_eq!(heuristic, "BM=128,BN=256,BK=32,STAGES=4,GROUP_M=8");
        let cfg = Config::new(&[
            ("BM", 64),
            ("BN", 128),
            ("BK", 64),
            ("STAGES", 3),
            ("GROUP_M", 4),
        ]);
        let mut table = TunedTable::empty();
        table.insert(
            TuneKey::new(&h100, "gemm", "mma_sync", &p),
            cfg.clone(),
            None,
        );
        assert_eq!(plan(&p, mma, &table).config, Some(cfg.to_string()));
    }

    #[test]
    fn a_version_tuned_faster_runs_in_place_of_a_tuned_top_rung_only() {
        let h100 = DeviceInfo::h100_sxm();
        let p = square(4096);
        let key = |version| TuneKey::new(&h100, "gemm", version, &p);
        let mma = Config::new(&[
            ("BM", 128),
            ("BN", 256),
            ("BK", 32),
            ("STAGES", 4),
            ("GROUP_M", 8),
        ]);
        let ws = Config::new(&[("BN", 256), ("PAIRS", 1), ("SPLITS", 1), ("GROUP_M", 8)]);
        // an untuned top rung is never demoted
        let mut table = TunedTable::empty();
        table.insert(key("mma_sync"), mma, Some(700.0));
        assert_eq!(plan(&p, None, &table).version, "wgmma_tma_ws");
        // a tuned one is, by a version that measured faster in its own tuning
        table.insert(key("wgmma_tma_ws"), ws.clone(), Some(600.0));
        let faster = plan(&p, None, &table);
        assert_eq!(faster.version, "mma_sync");
        assert!(faster.why.contains("measured faster"), "{}", faster.why);
        table.insert(key("wgmma_tma_ws"), ws, Some(800.0));
        assert_eq!(plan(&p, None, &table).version, "wgmma_tma_ws");
    }
}
