//! The device-file specs: the defines of each variant of the cooperative and ping-pong kernels,
//! and which launches take the variant with the split-K code.

use super::{epi_defer, Epilogue, Overrides, TileConfig, WgmmaTmaWs, BM, THREADS};
use crate::jit::KernelSpec;
use crate::ops::gemm::{with_problem_defines, DType, Layout};

impl WgmmaTmaWs {
    /// The variant of tile `cfg` for a (layout, input dtype, output dtype), with the split-K
    /// and stream-K code where `split_code` is set and the tile has it ([`has_split_code`]).
    pub(super) fn spec(
        arch: &str,
        (layout, input, output): (Layout, DType, DType),
        cfg: TileConfig,
        group_m: u32,
        epilogue: Epilogue,
        split_code: bool,
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
        with_problem_defines(
            KernelSpec::new("gemm/wgmma_tma_ws.cu", "gemm_wgmma_tma_ws", arch),
            layout,
            input,
            output,
        )
        .define("KILN_BM", cfg.bm)
        .define("KILN_BN", cfg.bn)
        .define("KILN_STAGES", cfg.stages)
        .define("KILN_GROUP_M", group_m)
        .define("KILN_CLUSTER", cfg.cluster)
        .define("KILN_EPI_DEFER", epi_defer() as u32)
        .define("KILN_EPI", epi)
        .define("KILN_SPLITK", (split_code && has_split_code(cfg)) as u32)
        .define("KILN_SMEM", cfg.smem_bytes())
        .define("KILN_THREADS", THREADS)
    }
}

/// Whether `cfg` comes in a second variant with the split-K and stream-K code (the kernel's
/// `KILN_SPLITK`): the cooperative 128-row tiles. The 64-row tiles split K between their
/// consumers instead, and the ping-pong kernel has no split-K.
pub fn has_split_code(cfg: TileConfig) -> bool {
    cfg.bm == BM && !cfg.pingpong
}

/// Whether a launch of `cfg` that asks for `splits` K slices, or for stream-K, runs the variant
/// with the split-K and stream-K code. Every other launch runs the variant without it, which
/// compiles in 25-37 % less time (ledger #91). Decided from what is asked, before the grid is
/// known: a launch whose plan then splits nothing runs the split variant unsplit, which it can.
/// `KILN_WGMMA_SPLITK=1` ([`Overrides::split_code`]) takes it for every launch.
pub fn needs_split_code(cfg: TileConfig, splits: u32, stream_k: bool, env: &Overrides) -> bool {
    has_split_code(cfg) && (env.split_code || splits > 1 || (stream_k && cfg.cluster == 1))
}

#[cfg(test)]
mod tests {
    use super::super::{bf16, with_epilogue, Choice};
    use super::*;
    use crate::device::DeviceInfo;
    use crate::ops::gemm::{GemmKernel, GemmProblem};
    use crate::tune::space::Config;

    /// The guard compiles what `launch` runs: every config of the space names a spec that
    /// `variants()` lists (so `kiln check` covers it), for every layout and dtype pair.
    #[test]
    fn every_config_of_the_space_is_a_checked_variant() {
        let h100 = DeviceInfo::h100_sxm();
        let variants: std::collections::HashSet<KernelSpec> =
            WgmmaTmaWs.variants("sm_90a").into_iter().collect();
        // TMA-store, C-load and register epilogues for each C (the 320-, 224- and 168-wide
        // tiles: the two TMA ones only), each without and, for the cooperative 128-row tiles
        // (six with three epilogues, the three wide ones), with the split-K code; pack_rows (2-
        // and 4-byte elements) and transpose_rows
        assert_eq!(variants.len(), 3 + (10 + 6) * (24 * 3) + (3 + 3) * (24 * 2));
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
                let tile = with_epilogue(ch.tile, true);
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
                    split && !ch.tile.pingpong && ch.tile.bm == BM,
                    "{c}"
                );
            }
        }
        let p = bf16(64, 64, 64, Layout::RC);
        assert!(WgmmaTmaWs
            .spec_for("sm_90a", &p, &Config::new(&[("BN", 256)]))
            .is_none());
    }
}
