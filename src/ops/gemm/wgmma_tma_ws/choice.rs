//! A launch's resolved choice (tile, split factor, group, tail, stream-K) and how it is resolved:
//! the tuned config (the context's table) or the heuristic, then the env overrides.

use super::swap::{swap_choice, swap_costs, swap_pays, Swap};
use super::{k_blocks, GemmOverrides, Notes, TileConfig};
use crate::ops::gemm::GemmProblem;
use crate::ops::space::Config;

/// A launch fully resolved: the tile config, the split-K factor and the grouped order's
/// tile-rows. `launch` derives it from the context's tuned config or [`TileConfig::choose`]
/// (then the env overrides); `launch_with` parses it from a config of the space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    pub tile: TileConfig,
    pub splits: u32,
    pub group_m: u32,
    /// Split only the tiles of the last, partial wave (else every tile).
    pub tail: bool,
    /// Stream-K over the last partial wave and one whole wave ([`TileConfig::stream_k_from`];
    /// where the problem has no partial wave, plain tiles).
    pub stream_k: bool,
    /// Swap-AB ([`super::swap`]): the tile runs over Cᵀ = Bᵀ·Aᵀ and stores C transposed.
    pub swap: bool,
}

impl Choice {
    /// What `launch` runs: the tuned config for `p`'s shape class when there is a valid one
    /// (its split factor capped at `p`'s K blocks: the class spans K up to half as deep), else
    /// the heuristic; then the env overrides, which win (`KILN_WGMMA_PAIRS=0` turns a tuned
    /// pair into single CTAs; `KILN_WGMMA_CFG` takes that config's best split unless
    /// `KILN_WGMMA_SPLITS` is set). A pure function, for tests.
    pub fn resolve(
        p: &GemmProblem,
        sm_count: u32,
        tuned: Option<&Config>,
        env: &GemmOverrides,
    ) -> Choice {
        Choice::resolve_noted(p, sm_count, tuned, env, &mut Notes::off())
    }

    /// [`Choice::resolve`], saying in `notes` where the choice came from.
    pub fn resolve_noted(
        p: &GemmProblem,
        sm_count: u32,
        tuned: Option<&Config>,
        env: &GemmOverrides,
        notes: &mut Notes,
    ) -> Choice {
        let mut c = match tuned.and_then(|cfg| Choice::from_config(cfg).ok()) {
            Some(t) => {
                notes.add(|| format!("the tuned config for this shape class: {}", t.to_config()));
                let mut t = t;
                t.splits = t.splits.min(k_blocks(p.k)).max(1);
                if !env.pairs && t.tile.cluster > 1 {
                    t.tile.cluster = 1;
                }
                t
            }
            None => {
                notes.add(|| match tuned {
                    Some(cfg) => {
                        format!("the tuned config {cfg} is not one this build takes: the heuristic")
                    }
                    None => "no tuned config for this shape class: the heuristic".into(),
                });
                Choice::heuristic_noted(p, sm_count, (env.pairs, env.widths, env.long_k), notes)
            }
        };
        if let Some(t) = env.tile {
            c.tile = t;
            c.splits = t.best_splits(p.m, p.n, p.k, sm_count);
            notes.add(|| format!("KILN_WGMMA_CFG forces {}", t.label(c.splits)));
        }
        if let Some(s) = env.splits {
            c.splits = s;
            notes.add(|| format!("KILN_WGMMA_SPLITS forces {s} K slices"));
        }
        if let Some(g) = env.group_m {
            c.group_m = g;
            notes.add(|| format!("KILN_WGMMA_GROUP_M forces {g} tile-rows per group"));
        }
        if let Some(t) = env.tail {
            c.tail = t;
            notes.add(|| {
                format!(
                    "KILN_WGMMA_TAIL forces {}",
                    if t {
                        "the last wave's tiles only split"
                    } else {
                        "every tile split"
                    }
                )
            });
        }
        if let Some(sk) = env.stream_k {
            c.stream_k = sk;
            notes.add(|| {
                format!(
                    "KILN_WGMMA_SK forces stream-K {}",
                    if sk { "on" } else { "off" }
                )
            });
        }
        match env.swap {
            Swap::Never => c,
            Swap::Always => {
                notes.add(|| {
                    "KILN_WGMMA_SWAP=1 forces swap-AB: C^T = B^T A^T, C stored transposed".into()
                });
                swap_choice(c, env.tile, env.splits)
            }
            // (a tuned or forced choice is taken as it is)
            Swap::Auto if tuned.is_some() || env.tile.is_some() || env.splits.is_some() => c,
            Swap::Auto => match swap_costs(p, sm_count, &c) {
                Some(costs) if swap_pays(p, sm_count, &c) => {
                    notes.add(|| super::swap::note(p, sm_count, costs));
                    swap_choice(c, None, None)
                }
                Some(costs) => {
                    notes.add(|| {
                        format!(
                            "swap-AB (C^T = B^T A^T in 128x144 tiles) modelled {} block-steps against                              {}: not 10 % under, C = A B kept",
                            costs.1, costs.0
                        )
                    });
                    c
                }
                None => c,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::bf16;
    use super::*;
    use crate::device::DeviceInfo;
    use crate::ops::gemm::wgmma_tma_ws::WgmmaTmaWs;
    use crate::ops::gemm::{GemmKernel, Layout};

    /// Problems spanning the heuristic's regimes (pairs, large, small, tiny, split-K).
    const SHAPES: [(usize, usize, usize); 12] = [
        (8192, 8192, 8192),
        (4096, 4096, 4096),
        (2048, 2048, 2048),
        (1024, 1024, 1024),
        (512, 512, 512),
        (128, 128, 128),
        (128, 65536, 4096),
        (128, 4096, 4096),
        (128, 4096, 14336),
        (128, 14336, 4096),
        (16, 4096, 64),
        (1000, 1500, 700),
    ];

    /// Without a tuned entry or env overrides, `launch` runs exactly the heuristic's pick
    /// (`TileConfig::choose`, the last-wave split, the default group size), and that pick is a
    /// point of the space (the tuner's baseline).
    #[test]
    fn without_a_tuned_config_launch_keeps_the_heuristic() {
        let h100 = DeviceInfo::h100_sxm();
        for (m, n, k) in SHAPES {
            for sms in [132, 114, 78] {
                for pairs in [true, false] {
                    let p = bf16(m, n, k, Layout::RC);
                    let env = GemmOverrides {
                        pairs,
                        ..GemmOverrides::NONE
                    };
                    let got = Choice::resolve(&p, sms, None, &env);
                    assert_eq!(
                        got,
                        Choice::heuristic(&p, sms, pairs),
                        "{m}x{n}x{k} on {sms} SMs, pairs {pairs}"
                    );
                    let space = WgmmaTmaWs.space(&p, &h100).unwrap();
                    assert!(space.is_valid(&got.to_config()), "{}", got.to_config());
                }
            }
        }
        // an entry that does not parse falls back to the heuristic too
        let p = bf16(4096, 4096, 4096, Layout::RC);
        let junk = Config::new(&[("BN", 96)]);
        assert_eq!(
            Choice::resolve(&p, 132, Some(&junk), &GemmOverrides::NONE),
            Choice::heuristic(&p, 132, true)
        );
    }

    #[test]
    fn a_tuned_config_wins_over_the_heuristic_and_env_overrides_win_over_both() {
        let p = bf16(4096, 4096, 4096, Layout::RC);
        let tuned = Config::new(&[("BN", 128), ("PAIRS", 0), ("SPLITS", 2), ("GROUP_M", 8)]);
        let c = Choice::resolve(&p, 132, Some(&tuned), &GemmOverrides::NONE);
        assert_eq!(c, Choice::from_config(&tuned).unwrap());
        assert_eq!(c.tile, TileConfig::SMALL);
        // the class spans shallower K: the split factor is capped at the K blocks
        let shallow = bf16(4096, 4096, 64, Layout::RC);
        assert_eq!(
            Choice::resolve(&shallow, 132, Some(&tuned), &GemmOverrides::NONE).splits,
            1
        );
        let env = GemmOverrides {
            tile: Some(TileConfig::TINY),
            ..GemmOverrides::NONE
        };
        let c = Choice::resolve(&p, 132, Some(&tuned), &env);
        assert_eq!(c.tile, TileConfig::TINY);
        assert_eq!(
            c.splits,
            TileConfig::TINY.best_splits(4096, 4096, 4096, 132)
        );
        let env = GemmOverrides {
            splits: Some(4),
            group_m: Some(16),
            ..GemmOverrides::NONE
        };
        let c = Choice::resolve(&p, 132, Some(&tuned), &env);
        assert_eq!((c.tile, c.splits, c.group_m), (TileConfig::SMALL, 4, 16));
        let pair = Config::new(&[("BN", 256), ("PAIRS", 1), ("SPLITS", 1), ("GROUP_M", 8)]);
        assert_eq!(
            Choice::resolve(&p, 132, Some(&pair), &GemmOverrides::NONE).tile,
            TileConfig::LARGE_PAIR
        );
        let no_pairs = GemmOverrides {
            pairs: false,
            ..GemmOverrides::NONE
        };
        assert_eq!(
            Choice::resolve(&p, 132, Some(&pair), &no_pairs).tile,
            TileConfig::LARGE
        );
    }
}
