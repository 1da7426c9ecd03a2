//! What `launch` would run for a problem, worked out without a GPU (`kiln plan`), and the steps
//! it shares with `launch`: the tile that runs and how its work is laid out.

use super::{
    as_read, c_through_scratch, needs_pack, needs_split_code, output_map, pack_shape, ring_for,
    transposes_a, with_epilogue,
};
use super::{Choice, Epilogue, Notes, Overrides, SplitPlan, TileConfig, BM};
use crate::ops::gemm::{DType, GemmProblem};
use crate::tune::space::Config;

/// Says once per process that a tile forced by `KILN_WGMMA_CFG` ran as another: where C takes
/// only the register epilogue, a tile without one runs the next that has it ([`with_epilogue`]).
/// Unsaid, a timing or a sanitizer run forced to a tile is taken for that tile's (ledger #75:
/// `kiln sanitize` with n224 forced ran 128x256 on every problem).
pub(super) fn warn_forced_fallback(forced: TileConfig, ran: TileConfig) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!(
            "kiln: KILN_WGMMA_CFG forces {0}, but this problem's C takes only the register \
             epilogue, which {0} does not have: {1} runs instead (`kiln plan` says why)",
            forced.label(1),
            ran.label(1)
        );
    }
}

/// The tile a launch of `choice` runs (`KILN_WGMMA_STAGES` applied, then [`with_epilogue`]) and
/// its K slices: 64-row tiles split K inside the CTA instead, and the ping-pong kernel does not
/// split. Shared by `launch` and [`plan`].
pub(super) fn launch_tile(
    choice: &Choice,
    tma_epi: bool,
    stages: Option<u32>,
) -> (TileConfig, u32) {
    let cfg = match stages {
        Some(stages) => TileConfig {
            stages: ring_for(choice.tile, stages),
            ..choice.tile
        },
        None => choice.tile,
    };
    let splits = if cfg.bm != BM || cfg.pingpong {
        1
    } else {
        choice.splits.max(1)
    };
    (with_epilogue(cfg, tma_epi), splits)
}

/// How `cfg`'s tiles of `p` are laid over `slots` resident clusters: the first stream-K tile
/// (where `choice` asks for stream-K and the tile config takes it) and the split plan. Stream-K
/// replaces split-K where both are asked for (the kernel ignores splits then). Shared by `launch`
/// and [`plan`].
pub(super) fn work_layout(
    cfg: TileConfig,
    choice: &Choice,
    splits: u32,
    p: &GemmProblem,
    slots: u32,
) -> (Option<u32>, SplitPlan) {
    let sk_from = (choice.stream_k && !cfg.pingpong)
        .then(|| cfg.stream_k_from(p.m, p.n, p.k, slots))
        .flatten();
    let plan = match sk_from {
        Some(_) => cfg.split_plan(p.m, p.n, 1, false, slots),
        None => cfg.split_plan(p.m, p.n, splits, choice.tail, slots),
    };
    (sk_from, plan)
}

/// What `launch` would run for a problem, worked out without a GPU ([`plan`]): the copies made
/// first, the tile that runs and how, the grid, and the notes of every rule that decided.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LaunchPlan {
    /// The tile that runs ([`TileConfig::label`], K slices included).
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
    /// The TMA-store epilogue (else the register one).
    pub tma_epilogue: bool,
    /// The TMA-store epilogue with C loaded first (beta other than 0 and 1).
    pub c_loaded: bool,
    /// The variant with the split-K and stream-K code ([`needs_split_code`]), else the one
    /// without, which compiles faster.
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

/// What [`WgmmaTmaWs`]'s `launch` would run for `p` on a GPU of `sm_count` SMs, given the
/// tuning cache's config for its shape class (`tuned`) and the env overrides, without a GPU (for
/// `kiln plan`). It calls the functions `launch` calls; it assumes C aligned as allocations are
/// and one resident CTA per SM (the GPU's occupancy query may give pairs fewer slots).
pub fn plan(p: &GemmProblem, sm_count: u32, tuned: Option<&Config>, env: &Overrides) -> LaunchPlan {
    let mut notes = Notes::on();
    let pc = p.canonical();
    let es = pc.input.size();
    let mut copies = Vec::new();
    if transposes_a(&pc) {
        copies.push(format!(
            "A ({} rows, column-major) copied transposed (transpose_rows): its MN-major boxes \
             would be mostly zero fill",
            pc.m
        ));
    } else if needs_pack(pc.lda, es, None) {
        copies.push(format!(
            "A copied to 128-byte rows (pack_rows): lda = {} is not a multiple of 16 bytes",
            pc.lda
        ));
    }
    if needs_pack(pc.ldb, es, None) {
        copies.push(format!(
            "B copied to 128-byte rows (pack_rows): ldb = {} is not a multiple of 16 bytes",
            pc.ldb
        ));
    }
    // C's address is known only at launch: as allocations are, aligned.
    let c_addr = 1u64 << 20;
    let c_back = c_through_scratch(&pc, c_addr);
    if c_back {
        copies.push(format!(
            "C written through scratch with 128-byte rows and copied back (pack_rows): ldc = {} \
             is not a multiple of 16 bytes{}",
            pc.ldc,
            if pc.beta != 0.0 {
                "; C copied in first, for beta"
            } else {
                ""
            }
        ));
    }
    let read = as_read(&pc);
    let choice = Choice::resolve_noted(&read, sm_count, tuned, env, &mut notes);
    if let Some(stages) = env.stages {
        notes.add(|| format!("KILN_WGMMA_STAGES forces {stages} stages"));
    }
    let pcc = if c_back {
        GemmProblem {
            ldc: pack_shape(pc.m, pc.n, pc.output.size()).0,
            ..read
        }
    } else {
        read
    };
    let epi = Epilogue::for_problem(&pcc, !c_back && output_map(&pcc, c_addr).is_some(), env);
    let tma_epi = epi.tma();
    notes.add(|| {
        if epi == Epilogue::TmaLoadC {
            format!(
                "epilogue: C loaded by TMA into the staging chunks (beta = {}), blended, stored by TMA",
                pcc.beta
            )
        } else if tma_epi && pcc.beta != 0.0 {
            let rounding = if pcc.output == DType::F32 {
                ""
            } else {
                "; 16-bit C: alpha * A * B is rounded to 16 bits before the add, one rounding more \
                 than the register epilogue's (KILN_WGMMA_CLOAD=1 loads C instead)"
            };
            format!(
                "epilogue: TMA reduce-add (C += alpha * A * B, beta = 1) from swizzled staging \
                 chunks{rounding}"
            )
        } else if tma_epi {
            "epilogue: TMA stores from swizzled staging chunks".into()
        } else {
            let why = if c_back {
                "C goes through scratch"
            } else if !env.epi {
                "KILN_WGMMA_EPI=0"
            } else {
                "TMA cannot address C (a row of N elements is not a multiple of 16 bytes)"
            };
            format!("epilogue: from registers ({why})")
        }
    });
    let (cfg, splits) = launch_tile(&choice, tma_epi, env.stages);
    if (cfg.bm, cfg.bn) != (choice.tile.bm, choice.tile.bn) {
        notes.add(|| {
            format!(
                "{} has the TMA-store epilogue only: {} runs",
                choice.tile.label(1),
                cfg.label(1)
            )
        });
    }
    let slots = (sm_count / cfg.cluster).max(1);
    let slots = env.grid.map_or(slots, |g| slots.min(g));
    let ctiles = cfg.cluster_tiles(read.m, read.n);
    let (sk_from, sp) = work_layout(cfg, &choice, splits, &read, slots);
    let units = sp.split_from + (ctiles - sp.split_from) * sp.splits;
    LaunchPlan {
        tile: cfg.label(sp.splits),
        bm: cfg.bm,
        bn: cfg.bn,
        stages: cfg.stages,
        cluster: cfg.cluster,
        pingpong: cfg.pingpong,
        splits: sp.splits,
        tail: sp.splits > 1 && sp.split_from > 0,
        stream_k_from: sk_from,
        tma_epilogue: tma_epi,
        c_loaded: epi == Epilogue::TmaLoadC,
        split_code: needs_split_code(cfg, splits, choice.stream_k, env),
        copies,
        tiles: ctiles,
        slots,
        grid: sp.grid,
        waves: units as f64 / slots as f64,
        notes: notes.into_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::bf16;
    use super::*;
    use crate::ops::gemm::Layout;

    /// Collecting notes changes no choice, and `plan` runs what `resolve` picks.
    #[test]
    fn plans_and_notes_follow_the_dispatch() {
        let dims = [
            1, 16, 72, 128, 500, 1000, 1024, 2048, 3000, 4096, 5120, 11008, 14336,
        ];
        for l in Layout::ALL {
            for &m in &dims {
                for &n in &dims {
                    for &k in &[64, 1000, 4096, 18944] {
                        let p = bf16(m, n, k, l);
                        let read = as_read(&p);
                        for widths in [false, true] {
                            let env = Overrides {
                                widths,
                                ..Overrides::NONE
                            };
                            let quiet = Choice::resolve(&read, 132, None, &env);
                            let mut notes = Notes::on();
                            let noted = Choice::resolve_noted(&read, 132, None, &env, &mut notes);
                            assert_eq!(quiet, noted, "{m}x{n}x{k} {l}");
                            assert!(notes.into_vec().len() >= 3);
                            let plan = plan(&p, 132, None, &env);
                            let tile = with_epilogue(quiet.tile, plan.tma_epilogue);
                            assert_eq!((plan.bm, plan.bn), (tile.bm, tile.bn), "{m}x{n}x{k} {l}");
                            // one cluster per work unit, up to the slots
                            assert!(plan.grid <= plan.slots * plan.cluster, "{m}x{n}x{k} {l}");
                            if plan.splits == 1 {
                                assert_eq!(
                                    plan.grid,
                                    plan.tiles.min(plan.slots) * plan.cluster,
                                    "{m}x{n}x{k} {l}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
