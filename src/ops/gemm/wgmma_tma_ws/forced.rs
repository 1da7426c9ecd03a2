//! The launches `kiln sanitize --configs` forces: every tile config whole, with each C type and
//! epilogue it has, and the cooperative 128-row tiles split, last-wave split and under stream-K.

use super::FORCED_CONFIGS;
use super::{has_split_code, k_blocks, plan, with_epilogue, Epilogue, TileConfig};
use crate::ops::gemm::{DType, ForcedSetup, GemmProblem};

/// How a forced tile's work is laid out in a [`Setup`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Whole tiles, unsplit.
    Whole,
    /// Every tile split in 3 along K, reduced through the fp32 workspace.
    Split,
    /// Only the last, partial wave's tiles split in 3, on a grid of 4 clusters.
    LastWave,
    /// Stream-K over the last waves, on a grid of 4 CTAs.
    StreamK,
}

/// One launch that `kiln sanitize --configs` forces: a tile config, how its work is laid
/// out, C's type and its epilogue (TMA stores, or from registers under `KILN_WGMMA_EPI=0`), and
/// beta (0.5: the TMA epilogue that loads C first).
#[derive(Debug, Clone)]
pub struct Setup {
    pub name: String,
    pub config: &'static str,
    pub tile: TileConfig,
    pub mode: Mode,
    pub out: DType,
    pub tma_epi: bool,
    pub beta: f32,
}

impl Setup {
    /// Every setup: each forced config whole with a 16-bit C; with an f32 C through TMA stores
    /// and from registers (where the tile has that epilogue); 16-bit and f32 C loaded first
    /// (beta 0.5, where the tile has that epilogue); and the tiles with the split-K code split,
    /// last-wave split and (single CTAs) under stream-K.
    pub fn all() -> Vec<Setup> {
        let mut v = Vec::new();
        for &(config, tile) in FORCED_CONFIGS {
            let mut add = |mode, out, tma_epi, beta, what: &str| {
                v.push(Setup {
                    name: format!("{config}{what}"),
                    config,
                    tile,
                    mode,
                    out,
                    tma_epi,
                    beta,
                })
            };
            add(Mode::Whole, DType::Bf16, true, 0.0, "");
            add(Mode::Whole, DType::F32, true, 0.0, " f32 C");
            if with_epilogue(tile, Epilogue::Registers) == tile {
                add(Mode::Whole, DType::F32, false, 0.0, " f32 C from registers");
            }
            if with_epilogue(tile, Epilogue::TmaLoadC) == tile {
                add(Mode::Whole, DType::Bf16, true, 0.5, " C loaded");
                add(Mode::Whole, DType::F32, true, 0.5, " f32 C loaded");
            }
            if has_split_code(tile) {
                add(Mode::Split, DType::Bf16, true, 0.0, " split 3");
                add(Mode::LastWave, DType::Bf16, true, 0.0, " last-wave split 3");
                if tile.cluster == 1 {
                    add(Mode::StreamK, DType::Bf16, true, 0.0, " stream-K");
                }
            }
        }
        v
    }

    /// The environment that forces this setup in a child kiln.
    pub fn env(&self) -> Vec<(String, String)> {
        let mut e = vec![("KILN_WGMMA_CFG", self.config)];
        if !self.tma_epi {
            e.push(("KILN_WGMMA_EPI", "0"));
        }
        e.extend(match self.mode {
            Mode::Whole => vec![("KILN_WGMMA_SPLITS", "1"), ("KILN_WGMMA_SK", "0")],
            Mode::Split => vec![("KILN_WGMMA_SPLITS", "3"), ("KILN_WGMMA_TAIL", "0")],
            Mode::LastWave => vec![
                ("KILN_WGMMA_SPLITS", "3"),
                ("KILN_WGMMA_TAIL", "1"),
                ("KILN_WGMMA_GRID", "4"),
            ],
            Mode::StreamK => vec![("KILN_WGMMA_SK", "1"), ("KILN_WGMMA_GRID", "4")],
        });
        e.into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// Whether `p` on `sm_count` SMs, run with [`Setup::env`], launches this setup as asked: the
    /// tile itself (not a fallback) with its own ring, no copy first, laid out as `mode` says
    /// (split: a K block or more in every slice), through the epilogue `out` asks for.
    pub fn runs_at(&self, p: &GemmProblem, sm_count: u32) -> bool {
        // (the variables are this module's own, so they parse)
        let Ok(o) = crate::overrides::Overrides::parse(self.env()) else {
            return false;
        };
        let l = plan(p, sm_count, None, &o.gemm);
        let t = self.tile;
        (l.bm, l.bn, l.cluster, l.pingpong, l.stages)
            == (t.bm, t.bn, t.cluster, t.pingpong, t.stages)
            && l.copies.is_empty()
            && k_blocks(p.k) >= l.splits
            && l.tma_epilogue == self.tma_epi
            && l.c_loaded == (self.tma_epi && self.beta != 0.0 && self.beta != 1.0)
            && match self.mode {
                Mode::Whole => l.splits == 1 && l.stream_k_from.is_none(),
                Mode::Split => l.splits == 3 && !l.tail && l.stream_k_from.is_none(),
                Mode::LastWave => l.splits == 3 && l.tail,
                Mode::StreamK => l.stream_k_from.is_some(),
            }
    }
}

/// Every setup as the sanitizer tool takes it: named, with its variables, and checked against
/// [`plan`] under those variables.
pub(super) fn forced_setups() -> Vec<ForcedSetup> {
    Setup::all()
        .into_iter()
        .map(|s| {
            let (name, env, out, beta) = (s.name.clone(), s.env(), s.out, s.beta);
            ForcedSetup::new(name, env, out, beta, move |p, sm_count| {
                s.runs_at(p, sm_count)
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::Layout;

    #[test]
    fn every_setup_parses_and_plans_with_its_grid_and_stages() {
        use crate::overrides::Overrides;
        for s in Setup::all() {
            assert!(Overrides::parse(s.env()).is_ok(), "{}", s.name);
        }
        // plan() honours the grid and stages the variables force, as a launch honours a
        // context's
        let o = Overrides::parse([
            ("KILN_WGMMA_CFG", "large"),
            ("KILN_WGMMA_GRID", "4"),
            ("KILN_WGMMA_STAGES", "3"),
        ])
        .unwrap();
        let p = GemmProblem::new(600, 1344, 640, Layout::RC, DType::Bf16, DType::Bf16);
        let l = plan(&p, 132, None, &o.gemm);
        assert_eq!((l.slots, l.grid, l.stages), (4, 4, 3));
    }

    #[test]
    fn every_forced_config_has_setups_and_fallbacks_are_refused() {
        let setups = Setup::all();
        for (name, _) in FORCED_CONFIGS {
            assert!(setups.iter().any(|s| s.name == *name), "{name}");
        }
        assert_eq!(forced_setups().len(), setups.len());
        // the 224-wide tile has the TMA-store epilogue only: f32 C through TMA stores, every
        // split mode
        let n224: Vec<&str> = setups
            .iter()
            .filter(|s| s.config == "n224")
            .map(|s| s.name.as_str())
            .collect();
        assert_eq!(
            n224,
            [
                "n224",
                "n224 f32 C",
                "n224 split 3",
                "n224 last-wave split 3",
                "n224 stream-K"
            ]
        );
        // the ping-pong tiles load no C (it runs their cooperative twins); the 320-wide tile
        // does not split
        let names: Vec<&str> = setups.iter().map(|s| s.name.as_str()).collect();
        assert!(names.contains(&"pingpong f32 C from registers"));
        assert!(!names.contains(&"pingpong C loaded"));
        assert!(names.contains(&"small C loaded") && names.contains(&"tiny64 C loaded"));
        assert!(!names.contains(&"wide split 3") && !names.contains(&"wide stream-K"));
        // the check refuses what falls back: n224 from registers runs 128x256
        let fallback = Setup {
            name: "n224 f32 C from registers".into(),
            config: "n224",
            tile: TileConfig::N224,
            mode: Mode::Whole,
            out: DType::F32,
            tma_epi: false,
            beta: 0.0,
        };
        let p = GemmProblem::new(300, 2000, 200, Layout::RC, DType::Bf16, DType::F32);
        assert!(!fallback.runs_at(&p, 132));
        // and a problem of one wave has no last wave to split
        let tail = setups
            .iter()
            .find(|s| s.name == "large last-wave split 3")
            .unwrap();
        let one = GemmProblem::new(129, 344, 72, Layout::RC, DType::Bf16, DType::Bf16);
        assert!(!tail.runs_at(&one, 132));
    }
}
