//! The device-file specs: the defines of each variant of the cooperative and ping-pong kernels,
//! and which launches take the variant with the split-K code.

use super::{
    swap_registered, with_epilogue, Epilogue, GemmOverrides, TileConfig, WgmmaTmaWs, CPA_TILES,
};
use super::{BM, GROUP_M, THREADS};
use crate::jit::KernelSpec;
use crate::ops::gemm::{with_problem_defines, DType, Layout};

impl WgmmaTmaWs {
    /// The variant of tile `cfg` for a (layout, input dtype, output dtype), with the split-K
    /// and stream-K code where `split_code` is set and the tile has it ([`has_split_code`]);
    /// `defer`: the kernel's `KILN_EPI_DEFER` ([`GemmOverrides::defer`], on by default); `cpa`:
    /// the producer warpgroup reads operands TMA cannot address in place (`KILN_CPA`; single
    /// cooperative CTAs); `c_t`: C stored transposed (swap-AB, `KILN_C_T`; the row-store
    /// epilogue in a cooperative tile).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn spec(
        arch: &str,
        (layout, input, output): (Layout, DType, DType),
        cfg: TileConfig,
        group_m: u32,
        epilogue: Epilogue,
        split_code: bool,
        defer: bool,
        (cpa, c_t): (bool, bool),
    ) -> KernelSpec {
        let epi = epilogue.define();
        if cfg.pingpong {
            return with_problem_defines(
                KernelSpec::new(
                    "gemm/wgmma_tma_ws_pingpong.cu",
                    "gemm_wgmma_tma_ws_pingpong",
                    arch,
                ),
                layout,
                input,
                output,
            )
            .define("KILN_BM", cfg.bm)
            .define("KILN_BN", cfg.bn)
            .define("KILN_STAGES", cfg.stages)
            .define("KILN_GROUP_M", group_m)
            .define("KILN_EPI", epi)
            .define("KILN_SMEM", cfg.smem_bytes())
            .define("KILN_THREADS", THREADS);
        }
        let s = with_problem_defines(
            KernelSpec::new("gemm/wgmma_tma_ws.cu", "gemm_wgmma_tma_ws", arch),
            layout,
            input,
            output,
        );
        // (only where set, so that the other variants keep their specs and cache entries)
        let s = if cpa { s.define("KILN_CPA", 1u32) } else { s };
        let s = if c_t { s.define("KILN_C_T", 1u32) } else { s };
        s.define("KILN_BM", cfg.bm)
            .define("KILN_BN", cfg.bn)
            .define("KILN_STAGES", cfg.stages)
            .define("KILN_GROUP_M", group_m)
            .define("KILN_CLUSTER", cfg.cluster)
            .define("KILN_EPI_DEFER", defer as u32)
            .define("KILN_EPI", epi)
            .define("KILN_SPLITK", (split_code && has_split_code(cfg)) as u32)
            .define("KILN_SMEM", cfg.smem_bytes())
            .define("KILN_THREADS", THREADS)
    }
}

/// Whether `cfg` comes in a variant with the split-K and stream-K code (the kernel's
/// `KILN_SPLITK`): the cooperative 128-row tiles but the 320-wide one, which runs at one wave
/// (where nothing splits) and is not split in the tuning space either. The 64-row tiles split K
/// between their consumers instead, and the ping-pong kernel has no split-K.
pub fn has_split_code(cfg: TileConfig) -> bool {
    cfg.bm == BM && !cfg.pingpong && cfg.bn != TileConfig::WIDE.bn && cfg.bn != TileConfig::N144.bn
}

/// Whether a launch of `cfg` through `epi` that asks for `splits` K slices, or for stream-K, runs
/// the variant with the split-K and stream-K code. Every other launch through the TMA-store
/// epilogue runs the variant without it, which compiles in 25-37 % less time (ledger #91);
/// through the C-load and register epilogues (beta other than 0 and 1, a C that TMA cannot
/// address) a tile that has the split code comes only with it, and runs it unsplit (fewer
/// variants for the rarer Cs). Decided from what is asked, before the grid is known: a launch
/// whose plan then splits nothing runs the split variant unsplit, which it can.
/// `KILN_WGMMA_SPLITK=1` ([`GemmOverrides::split_code`]) takes it for every launch.
pub fn needs_split_code(
    cfg: TileConfig,
    splits: u32,
    stream_k: bool,
    epi: Epilogue,
    env: &GemmOverrides,
) -> bool {
    has_split_code(cfg)
        && (epi != Epilogue::TmaStore
            || env.split_code
            || splits > 1
            || (stream_k && cfg.cluster == 1))
}

/// Whether `kiln check` compiles tile `cfg` for `epi`, with the split-K code or without
/// (`split_code`): the variants a launch can run ([`with_epilogue`], [`needs_split_code`]) of
/// every tile the dispatch or the tuning space can pick. The 168-wide tile, forced only
/// ([`TileConfig::in_registry`]), compiles on demand.
pub fn in_registry(cfg: TileConfig, epi: Epilogue, split_code: bool) -> bool {
    cfg.in_registry()
        && with_epilogue(cfg, epi) == cfg
        && if split_code {
            has_split_code(cfg)
        } else {
            !has_split_code(cfg) || epi == Epilogue::TmaStore
        }
}

/// Every variant `kiln check` compiles ([`in_registry`]): per tile, per (layout, input, output)
/// and per epilogue, with and without the split-K code; the in-place reads (`KILN_CPA`) in the
/// three [`CPA_TILES`] with the split-K code, through the TMA-store and row-store epilogues; and
/// the copies (`repack`: 16-bit operands and C of either width through 128-byte rows, a
/// transposed A). Per (layout, input, output), 42: the TMA-store epilogue in all 12 tiles, and
/// again with the split-K code in the 7 that have it (128 x 64 to 128 x 256, single or paired);
/// the C-load epilogue with the split-K code in the 6 of those whose widths are multiples of 64,
/// and in the cooperative 64 x 64 tile; `KILN_EPI=0` in the same 7 (the row store) and in the
/// three ping-pong tiles (registers); the in-place reads in 6; and swap-AB's transposed row store
/// in the 128x144 tile for 16 of the 24 combinations ([`swap_registered`]); and the small-K
/// kernel (one variant: its dtypes and layout are run-time values).
pub(super) fn variants(arch: &str) -> Vec<KernelSpec> {
    if !crate::jit::arch::has_wgmma(arch) {
        return Vec::new();
    }
    let mut v = vec![
        crate::ops::gemm::pack_rows::spec(arch, 2),
        crate::ops::gemm::pack_rows::spec(arch, 4),
        crate::ops::gemm::transpose_rows::spec(arch),
    ];
    // the small-K kernel its dispatch runs a short K with a C that TMA cannot store in
    v.extend(crate::ops::gemm::small_k::variants(arch));
    let spec = |cfg, combo, epi, split_code, cpa_ct| {
        let defer = GemmOverrides::NONE.defer;
        WgmmaTmaWs::spec(arch, combo, cfg, GROUP_M, epi, split_code, defer, cpa_ct)
    };
    // Each (layout, input, output) first in the 128x256 tile's TMA-store variant without the
    // split-K code: what most launches run, and what `kiln inspect` shows.
    let epilogues = [Epilogue::TmaStore, Epilogue::TmaLoadC, Epilogue::Registers];
    for cfg in TileConfig::ALL {
        for combo in crate::ops::gemm::all_combinations() {
            for epi in epilogues {
                for split_code in [false, true] {
                    if in_registry(cfg, epi, split_code) {
                        v.push(spec(cfg, combo, epi, split_code, (false, false)));
                    }
                }
            }
        }
    }
    for cfg in CPA_TILES {
        for combo in crate::ops::gemm::all_combinations() {
            for epi in [Epilogue::TmaStore, Epilogue::Registers] {
                v.push(spec(cfg, combo, epi, true, (true, false)));
            }
        }
    }
    // swap-AB's transposed row store in its 128x144 tile (no split-K code: it runs unsplit), for
    // the dtypes its rule takes
    for combo in crate::ops::gemm::all_combinations() {
        if swap_registered(combo.1, combo.2) {
            let cfg = TileConfig::N144;
            v.push(spec(cfg, combo, Epilogue::Registers, false, (false, true)));
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::super::{as_read, bf16, with_epilogue, Choice, InPlace, Notes, Prepared};
    use super::*;
    use crate::device::DeviceInfo;
    use crate::ops::gemm::{GemmKernel, GemmProblem};
    use crate::ops::space::Config;

    /// The guard compiles what `launch` runs: every config of the space names a spec that
    /// `variants()` lists (so `kiln check` covers it), for every layout and dtype pair.
    #[test]
    fn every_config_of_the_space_is_a_checked_variant() {
        let h100 = DeviceInfo::h100_sxm();
        let variants: std::collections::HashSet<KernelSpec> =
            WgmmaTmaWs.variants("sm_90a").into_iter().collect();
        // per (layout, input, output): the TMA-store epilogue in the 12 tiles of the registry
        // (the 168-wide one is forced only) and again with the split-K code in 7; the C-load
        // epilogue in 7 and `KILN_EPI=0` in 10, the in-place reads in 6 (`variants`), swap-AB's 16; pack_rows
        // (2- and 4-byte elements), transpose_rows and the small-K kernel
        assert_eq!(variants.len(), 3 + 1 + 24 * (12 + 7 + 7 + 10 + 6) + 16);
        for (l, i, o) in crate::ops::gemm::all_combinations() {
            let p = GemmProblem::new(4096, 4096, 4096, l, i, o);
            let all = WgmmaTmaWs.space(&p, &h100).unwrap().enumerate();
            assert!(!all.is_empty());
            for c in &all {
                let spec = WgmmaTmaWs.spec_for("sm_90a", &p, c).unwrap();
                assert!(
                    variants.contains(&spec),
                    "{l} {i}->{o} {c}: {}",
                    spec.label()
                );
                let ch = Choice::from_config(c).unwrap();
                // (C takes the TMA-store epilogue at this shape, so every tile runs as itself)
                let tile = with_epilogue(ch.tile, Epilogue::TmaStore);
                assert!(spec
                    .defines
                    .contains(&("KILN_THREADS".into(), THREADS.to_string())));
                assert!(spec
                    .defines
                    .contains(&("KILN_SMEM".into(), tile.smem_bytes().to_string())));
                // the ping-pong kernel has no clusters (nor the define)
                assert!(
                    ch.tile.pingpong
                        || spec
                            .defines
                            .contains(&("KILN_CLUSTER".into(), ch.tile.cluster.to_string()))
                );
                assert_eq!(spec.source.ends_with("_pingpong.cu"), ch.tile.pingpong);
                // the split-K code where the launch may split (SPLITS > 1, SK), else not
                let split = ch.splits > 1 || (ch.stream_k && ch.tile.cluster == 1);
                assert_eq!(
                    spec.defines
                        .contains(&("KILN_SPLITK".into(), "1".to_string())),
                    split && has_split_code(ch.tile),
                    "{c}"
                );
            }
        }
        let p = bf16(64, 64, 64, Layout::RC);
        assert!(WgmmaTmaWs
            .spec_for("sm_90a", &p, &Config::new(&[("BN", 256)]))
            .is_none());
    }

    /// Every launch the dispatch can make is a variant `kiln check` compiles: the heuristic's
    /// choice and every config of the space, over shapes of every regime, each dtype pair and
    /// layout, with C stored (beta 0), added to (beta 1), loaded (beta 0.5) and off 16 bytes
    /// (the `KILN_EPI=0` epilogues), and with A and B off 16 bytes too (read in place,
    /// `KILN_CPA`), under each `KILN_WGMMA_INPLACE`.
    #[test]
    fn every_launch_the_dispatch_makes_is_a_checked_variant() {
        let h100 = DeviceInfo::h100_sxm();
        let variants: std::collections::HashSet<KernelSpec> =
            WgmmaTmaWs.variants("sm_90a").into_iter().collect();
        let aligned = 1u64 << 20;
        let mut seen = std::collections::HashSet::new();
        for (l, i, o) in crate::ops::gemm::all_combinations() {
            for (m, n, k) in [
                (4096, 4096, 4096),
                (512, 512, 512),
                (128, 4096, 14336),
                (1024, 5120, 5120),
                (1024, 3584, 18944),
                (3000, 3000, 3000),
                (1000, 1000, 4008),
                (512, 128256, 4096),
                (72, 4096, 4096),
                (1023, 1023, 1024),
                (281, 8320, 8512),
            ] {
                for (beta, odd_c, odd_ab) in [
                    (0.0, false, false),
                    (1.0, false, false),
                    (0.5, false, false),
                    (0.0, true, false),
                    (0.0, false, true),
                    (1.0, true, true),
                ] {
                    let mut p = GemmProblem::new(m, n, k, l, i, o);
                    p.beta = beta;
                    if odd_c {
                        p.ldc += 1;
                    }
                    if odd_ab {
                        // (rows 4-byte aligned: the cp.async copies, which any tile takes)
                        p.lda += 2;
                        p.ldb += 2;
                    }
                    let space = WgmmaTmaWs.space(&p, &h100).unwrap().enumerate();
                    let heuristic = Choice::resolve(&as_read(&p), 132, None, &GemmOverrides::NONE);
                    let choices = space
                        .iter()
                        .map(|c| Choice::from_config(c).unwrap())
                        .chain([heuristic]);
                    for (choice, inplace) in choices.flat_map(|c| InPlace::ALL.map(|i| (c, i))) {
                        let env = GemmOverrides {
                            inplace,
                            ..GemmOverrides::NONE
                        };
                        let prep = Prepared::new(
                            &p,
                            (aligned, aligned, aligned),
                            choice,
                            &env,
                            &mut Notes::off(),
                        );
                        let spec = prep.spec("sm_90a");
                        assert!(
                            variants.contains(&spec),
                            "{} beta {beta} {}: {}",
                            p.label(),
                            choice.to_config(),
                            spec.label()
                        );
                        seen.insert(spec);
                    }
                }
            }
        }
        // and those launches reach every variant of the tiles (none is unreachable; the copies'
        // three and the small-K kernel's are not `Prepared` launches)
        assert_eq!(seen.len(), variants.len() - 3 - 1);
    }
}
