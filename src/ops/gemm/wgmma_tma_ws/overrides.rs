//! The `KILN_WGMMA_*` environment overrides, for A/B timing, parsed in one place (a module of
//! its own, so that one crate-wide overrides value can take its place).

use super::{forced_config, TileConfig, GROUP_M, MAX_SPLITS, WIDTHS_BY_DEFAULT};

/// The env overrides, for A/B timing: they win over both the tuned config and the heuristic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Overrides {
    /// `KILN_WGMMA_CFG`
    pub tile: Option<TileConfig>,
    /// `KILN_WGMMA_SPLITS`
    pub splits: Option<u32>,
    /// `KILN_WGMMA_GROUP_M`
    pub group_m: Option<u32>,
    /// `KILN_WGMMA_PAIRS` (default on; 0: large problems run in single CTAs, to time or rule out
    /// the cluster path)
    pub pairs: bool,
    /// `KILN_WGMMA_TAIL` (1: split only the last wave's tiles, 0: all)
    pub tail: Option<bool>,
    /// `KILN_WGMMA_SK` (1: stream-K where the tile config takes it, 0: never)
    pub stream_k: Option<bool>,
    /// `KILN_WGMMA_WIDTHS` (0: the heuristic leaves the 224-wide tile out; default
    /// [`WIDTHS_BY_DEFAULT`])
    pub widths: bool,
    /// `KILN_WGMMA_GRID` (at most this many resident clusters)
    pub grid: Option<u32>,
    /// `KILN_WGMMA_STAGES` (the ring depth of whichever tile runs)
    pub stages: Option<u32>,
    /// `KILN_WGMMA_EPI` (default on; 0: the register epilogue even where C takes TMA stores, to
    /// time one against the other or check the register one)
    pub epi: bool,
    /// `KILN_WGMMA_CLOAD` (1: beta = 1 loads C into the staging chunks as other betas do, instead
    /// of TMA's reduce-add: 16-bit C rounded once)
    pub c_load: bool,
    /// `KILN_WGMMA_SPLITK` (1: unsplit launches too run the variant with the split-K code, as
    /// every launch did before ledger #91, to time one against the other)
    pub split_code: bool,
}

impl Overrides {
    /// No overrides: what an unset environment gives.
    pub const NONE: Overrides = Overrides {
        tile: None,
        splits: None,
        group_m: None,
        pairs: true,
        tail: None,
        stream_k: None,
        widths: WIDTHS_BY_DEFAULT,
        grid: None,
        stages: None,
        epi: true,
        c_load: false,
        split_code: false,
    };

    /// The overrides this process's environment sets.
    pub fn from_env() -> Overrides {
        Overrides::from_lookup(&|name| std::env::var(name).ok())
    }

    /// The overrides a child process given `vars` (on top of an environment without any) would
    /// read: for working out, before launching it, what a run under those variables will do
    /// (`kiln sanitize --configs`).
    pub fn from_vars(vars: &[(String, String)]) -> Overrides {
        Overrides::from_lookup(&|name| {
            vars.iter()
                .rev()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        })
    }

    fn from_lookup(var: &dyn Fn(&str) -> Option<String>) -> Overrides {
        Overrides {
            tile: var("KILN_WGMMA_CFG").and_then(|v| forced_config(&v)),
            splits: parse_splits(var("KILN_WGMMA_SPLITS")),
            group_m: parse_group_m(var("KILN_WGMMA_GROUP_M")),
            pairs: var("KILN_WGMMA_PAIRS").is_none_or(|v| v != "0"),
            tail: var("KILN_WGMMA_TAIL").map(|v| v == "1"),
            stream_k: var("KILN_WGMMA_SK").map(|v| v == "1"),
            widths: var("KILN_WGMMA_WIDTHS").map_or(WIDTHS_BY_DEFAULT, |v| v.trim() == "1"),
            grid: parse_grid(var("KILN_WGMMA_GRID")),
            stages: parse_stages(var("KILN_WGMMA_STAGES")),
            epi: var("KILN_WGMMA_EPI").is_none_or(|v| v != "0"),
            c_load: var("KILN_WGMMA_CLOAD").is_some_and(|v| v.trim() == "1"),
            split_code: var("KILN_WGMMA_SPLITK").is_some_and(|v| v.trim() == "1"),
        }
    }
}

/// Whether the TMA-store epilogue goes out chunk by chunk under the next unit's K blocks (the
/// kernel's `KILN_EPI_DEFER`); `KILN_WGMMA_DEFER=0` compiles the epilogue that stores the whole
/// tile before the next unit starts, for timing one against the other.
pub(super) fn epi_defer() -> bool {
    std::env::var("KILN_WGMMA_DEFER").map_or(true, |v| v.trim() != "0")
}

/// A split-K factor forced by `KILN_WGMMA_SPLITS` (single CTAs and pairs alike), for timing.
fn parse_splits(v: Option<String>) -> Option<u32> {
    v?.parse().ok().map(|s: u32| s.clamp(1, MAX_SPLITS))
}

/// `KILN_WGMMA_GRID`: at most this many resident clusters (for tests: a small problem then has
/// several waves, a partial last one, and stream-K or last-wave splits to run).
fn parse_grid(v: Option<String>) -> Option<u32> {
    v.and_then(|v| v.parse().ok()).filter(|&g: &u32| g >= 1)
}

/// `KILN_WGMMA_STAGES` (2..=12): the ring depth of whichever tile config runs, for timing a
/// shallower or deeper ring (compiles variants outside `variants()`; for experiments only; a
/// ring that does not fit in shared memory fails at launch).
fn parse_stages(v: Option<String>) -> Option<u32> {
    v?.parse().ok().map(|s: u32| s.clamp(2, 12))
}

/// The grouped order's tile-rows: GROUP_M, or `KILN_WGMMA_GROUP_M` (1..=64) to time another
/// (an override compiles variants outside `variants()`; for experiments only).
pub(super) fn group_m() -> u32 {
    Overrides::from_env().group_m.unwrap_or(GROUP_M)
}

/// `KILN_WGMMA_GROUP_M` when set to 1..=64.
fn parse_group_m(v: Option<String>) -> Option<u32> {
    v.and_then(|v| v.parse().ok())
        .filter(|g: &u32| (1..=64).contains(g))
}

/// Whether the GEMM after a copy of ours is launched as its programmatic dependent. On by
/// default; `KILN_WGMMA_PDL=0` launches it after the copy has finished, to time one against the
/// other.
pub(super) fn dependent_launch() -> bool {
    std::env::var("KILN_WGMMA_PDL").map_or(true, |v| v.trim() != "0")
}

#[cfg(test)]
mod tests {
    use super::super::{plan, FORCED_CONFIGS};
    use super::*;
    use crate::ops::gemm::{DType, GemmProblem, Layout};

    #[test]
    fn overrides_from_vars_read_what_a_child_process_would() {
        let vars = |pairs: &[(&str, &str)]| {
            Overrides::from_vars(
                &pairs
                    .iter()
                    .map(|&(k, v)| (k.to_string(), v.to_string()))
                    .collect::<Vec<_>>(),
            )
        };
        assert_eq!(vars(&[]), Overrides::NONE);
        let o = vars(&[
            ("KILN_WGMMA_CFG", "n224"),
            ("KILN_WGMMA_SPLITS", "3"),
            ("KILN_WGMMA_TAIL", "1"),
            ("KILN_WGMMA_GRID", "4"),
            ("KILN_WGMMA_STAGES", "40"),
            ("KILN_WGMMA_PAIRS", "0"),
            ("KILN_WGMMA_WIDTHS", "0"),
            ("KILN_WGMMA_SK", "1"),
        ]);
        assert_eq!(o.tile, Some(TileConfig::N224));
        assert_eq!(
            (o.splits, o.tail, o.stream_k),
            (Some(3), Some(true), Some(true))
        );
        // the stages clamp to the kernel's range
        assert_eq!((o.grid, o.stages), (Some(4), Some(12)));
        assert!(!o.pairs && !o.widths);
        // the last of a repeated variable wins, as in an environment built up in order; an
        // unknown config name forces nothing
        assert_eq!(
            vars(&[("KILN_WGMMA_GRID", "4"), ("KILN_WGMMA_GRID", "9")]).grid,
            Some(9)
        );
        assert_eq!(vars(&[("KILN_WGMMA_CFG", "huge")]).tile, None);
        // every forced name resolves, and to a distinct config
        for (i, (name, t)) in FORCED_CONFIGS.iter().enumerate() {
            assert_eq!(forced_config(name), Some(*t));
            assert!(FORCED_CONFIGS[..i].iter().all(|(_, u)| u != t), "{name}");
        }
        // plan() honours the grid and stages given, as launch does from the environment
        let p = GemmProblem::new(600, 1344, 640, Layout::RC, DType::Bf16, DType::Bf16);
        let l = plan(
            &p,
            132,
            None,
            &vars(&[
                ("KILN_WGMMA_CFG", "large"),
                ("KILN_WGMMA_GRID", "4"),
                ("KILN_WGMMA_STAGES", "3"),
            ]),
        );
        assert_eq!((l.slots, l.grid, l.stages), (4, 4, 3));
    }
}
