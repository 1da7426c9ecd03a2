//! Host side of the warp-specialised persistent WGMMA + TMA GEMM for sm_90a, in two schedules:
//! cooperative (`kernels/gemm/wgmma_tma_ws.cu`, both consumers on one tile) and ping-pong
//! (`kernels/gemm/wgmma_tma_ws_pingpong.cu`, each consumer its own tile, in turns). Picks a tile
//! shape and schedule (and whether CTAs pair up in clusters to share B tiles), builds the two
//! operand tensor maps for the problem, and launches one block of 384 threads per SM (or per
//! tile, when there are fewer tiles).
//!
//! Tunable: the space is (BM, BN, PAIRS, SPLITS, GROUP_M, TAIL, SK, PINGPONG) over the compiled
//! tile configs ([`Choice`]); `launch` runs the tuning cache's config for the problem's shape
//! class when there is one, else [`Choice::heuristic`] ([`TileConfig::choose`], then
//! [`pingpong_for`]), and the `KILN_WGMMA_*` env overrides win over both.

use super::{with_problem_defines, DType, GemmArgs, GemmKernel, GemmOperands, GemmProblem, Layout};
use crate::device::{
    Context, DeviceBuffer, DeviceInfo, Function, LaunchConfig, Scratch, Tma2d, TmaSwizzle,
};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::tune::space::{Config, ParamSpace};

pub struct WgmmaTmaWs;

/// What the dispatch's rules say about one problem, for `kiln plan`: each note is built only when
/// collecting ([`Notes::on`]), so the launch path, which passes [`Notes::off`], formats nothing.
#[derive(Debug, Default)]
pub struct Notes(Option<Vec<String>>);

impl Notes {
    pub fn on() -> Notes {
        Notes(Some(Vec::new()))
    }

    pub fn off() -> Notes {
        Notes(None)
    }

    /// Adds the note `f` makes, when collecting.
    pub fn add(&mut self, f: impl FnOnce() -> String) {
        if let Some(v) = self.0.as_mut() {
            v.push(f());
        }
    }

    /// The notes collected, in order (none when off).
    pub fn into_vec(self) -> Vec<String> {
        self.0.unwrap_or_default()
    }
}

/// Block tile rows of the 128-row configs (two consumer warpgroups of 64) and the K depth of
/// one stage. The 64-row configs ([`TileConfig::bm`] 64) split each tile's K blocks between the
/// two consumers instead.
pub const BM: u32 = 128;
pub const BK: u32 = 64;
/// Tile-rows swept together in the grouped tile order (the kernel's `KILN_GROUP_M`).
pub const GROUP_M: u32 = 8;
/// Threads per block: one producer and two consumer warpgroups.
pub const THREADS: u32 = 384;
/// The epilogue's staging buffers: 2 consumers x 2 buffers x a 64 x 64 chunk of 16-bit C
/// (the kernel's `C_BYTES`; 64-row tiles need half, [`TileConfig::staging_bytes`]).
pub const C_STAGING_BYTES: u32 = 2 * 2 * 64 * 64 * 2;

/// One tile shape: `bm` x `bn` x BK with a ring of `stages` shared buffers, run by clusters of
/// `cluster` CTAs along M that share (multicast) each B tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileConfig {
    /// 128 (each consumer 64 rows), or 64 (both consumers on the same rows, alternate K blocks).
    pub bm: u32,
    pub bn: u32,
    pub stages: u32,
    pub cluster: u32,
    /// The ping-pong schedule (`wgmma_tma_ws_pingpong.cu`): each consumer computes whole
    /// 128 x `bn` tiles, the two taking turns on the tensor cores, so one's epilogue runs under
    /// the other's K loop. Else cooperative: both consumers on one tile.
    pub pingpong: bool,
}

impl TileConfig {
    /// The default: 128 x 256 tiles, 4 stages of 48 KB.
    pub const LARGE: TileConfig = TileConfig {
        bm: 128,
        bn: 256,
        stages: 4,
        cluster: 1,
        pingpong: false,
    };
    /// As LARGE, with pairs of CTAs along M loading half of the shared B tile each (multicast).
    pub const LARGE_PAIR: TileConfig = TileConfig {
        bm: 128,
        bn: 256,
        stages: 4,
        cluster: 2,
        pingpong: false,
    };
    /// For problems too small to fill the GPU with 128 x 256 tiles: 6 stages of 32 KB.
    pub const SMALL: TileConfig = TileConfig {
        bm: 128,
        bn: 128,
        stages: 6,
        cluster: 1,
        pingpong: false,
    };
    /// For latency-bound problems with few tiles (512^3 .. 1024^3): 128 x 64 tiles, twice the
    /// tiles of SMALL, 8 stages of 24 KB.
    pub const TINY: TileConfig = TileConfig {
        bm: 128,
        bn: 64,
        stages: 8,
        cluster: 1,
        pingpong: false,
    };
    /// For problems that fit in one wave of 64 x 64 tiles (512^3, M = 128 decode shapes): twice
    /// the tiles of TINY, the two consumers taking alternate K blocks of the same tile and
    /// consumer 0 adding consumer 1's partial sums before the epilogue (no split-K workspace);
    /// 12 stages of 16 KB (an even ring: each consumer keeps to its own stages, which an odd ring
    /// breaks; see the kernel). On an H100 (session 7, 11 stages): 512^3 0.80x -> 0.96x cuBLAS,
    /// 128x4096x4096 0.92x -> 0.99x, 128x4096x14336 0.93x -> 1.01x; slower than the 128-row
    /// tiles wherever it needs more than one wave (1024^3: 256 tiles, 0.83x against 0.98x).
    pub const TINY64: TileConfig = TileConfig {
        bm: 64,
        bn: 64,
        stages: 12,
        cluster: 1,
        pingpong: false,
    };
    /// Ping-pong: 128 x 128 tiles, one per consumer at a time, 6 stages of 32 KB.
    pub const PINGPONG: TileConfig = TileConfig {
        bm: 128,
        bn: 128,
        stages: 6,
        cluster: 1,
        pingpong: true,
    };
    /// Ping-pong with 128 x 64 tiles, 8 stages of 24 KB.
    pub const PINGPONG64: TileConfig = TileConfig {
        bm: 128,
        bn: 64,
        stages: 8,
        cluster: 1,
        pingpong: true,
    };
    /// Ping-pong with 64 x 64 tiles (one wgmma per k step), 12 stages of 16 KB.
    pub const PINGPONG_TINY: TileConfig = TileConfig {
        bm: 64,
        bn: 64,
        stages: 12,
        cluster: 1,
        pingpong: true,
    };
    /// 128 x 192 tiles, 4 stages of 40 KB, single CTAs: where N is a multiple of 192 and
    /// 256-wide tiles quantise badly (3072^3: 288 tiles of 128 x 256 on 132 SMs, 2.2 waves;
    /// 384 of 128 x 192, 2.9 waves).
    pub const MEDIUM: TileConfig = TileConfig {
        bm: 128,
        bn: 192,
        stages: 4,
        cluster: 1,
        pingpong: false,
    };
    /// As MEDIUM, in pairs of CTAs along M sharing each B tile (multicast): where rows straddle
    /// 128-byte lines (3000^3: 6000-byte rows) and 192 columns quantise better than 256.
    pub const MEDIUM_PAIR: TileConfig = TileConfig {
        bm: 128,
        bn: 192,
        stages: 4,
        cluster: 2,
        pingpong: false,
    };
    /// 128 x 320 tiles, 3 stages of 56 KB, single CTAs, TMA-store epilogue only
    /// ([`with_epilogue`]): where N is a multiple of 320 and narrower tiles quantise badly
    /// (1024x5120: 128 tiles of 128 x 320, one wave; cuBLAS's pick there).
    pub const WIDE: TileConfig = TileConfig {
        bm: 128,
        bn: 320,
        stages: 3,
        cluster: 1,
        pingpong: false,
    };
    /// 128 x 168 tiles, 4 stages, single CTAs, TMA-store epilogue only ([`with_epilogue`]): a
    /// width that makes whole waves where multiples of 64 do not (1024x11008: 528 tiles, four
    /// waves on 132 SMs, where 128 x 256 makes 344, 2.6 waves; cuBLAS's 168-wide pick there).
    pub const N168: TileConfig = TileConfig {
        bm: 128,
        bn: 168,
        stages: 4,
        cluster: 1,
        pingpong: false,
    };
    /// 128 x 224 tiles, 4 stages, single CTAs, TMA-store epilogue only: as N168 (1024x3584: 128
    /// tiles, one wave, where 128 x 256 leaves 20 of 132 SMs idle).
    pub const N224: TileConfig = TileConfig {
        bm: 128,
        bn: 224,
        stages: 4,
        cluster: 1,
        pingpong: false,
    };
    pub const ALL: [TileConfig; 13] = [
        TileConfig::LARGE,
        TileConfig::LARGE_PAIR,
        TileConfig::SMALL,
        TileConfig::TINY,
        TileConfig::TINY64,
        TileConfig::PINGPONG,
        TileConfig::PINGPONG64,
        TileConfig::PINGPONG_TINY,
        TileConfig::MEDIUM,
        TileConfig::MEDIUM_PAIR,
        TileConfig::WIDE,
        TileConfig::N168,
        TileConfig::N224,
    ];

    /// `128x256`, `128x256 pair`, `128x128 ping-pong`, `128x128 split 3`: the tile, how it
    /// runs, and its K slices.
    pub fn label(self, splits: u32) -> String {
        let mut l = format!("{}x{}", self.bm, self.bn);
        if self.cluster > 1 {
            l += " pair";
        }
        if self.pingpong {
            l += " ping-pong";
        }
        if splits > 1 {
            l += &format!(" split {splits}");
        }
        l
    }

    /// Shared memory of one stage: A and B, with an MN-major B as whole 64-column boxes (the
    /// 168- and 224-wide tiles load 192 and 256 columns). The kernel's stage is at most this.
    pub fn stage_bytes(self) -> u32 {
        (self.bm + self.bn.next_multiple_of(64)) * BK * 2
    }

    /// Bytes one stage's TMA loads deliver to each CTA (the kernel's `STAGE_BYTES`): a K-major B
    /// is exactly the tile's columns.
    pub fn stage_tx_bytes(self, b_k_major: bool) -> u32 {
        if b_k_major {
            (self.bm + self.bn) * BK * 2
        } else {
            self.stage_bytes()
        }
    }

    /// Shared memory of the 64-row configs' hand-off of consumer 1's fp32 partial tile to
    /// consumer 0: the buffer (the kernel's `X_BYTES`) and its two mbarriers (`X_BARS`).
    pub fn handoff_bytes(self) -> u32 {
        if self.bm == 64 && !self.pingpong {
            self.bm * self.bn * 4 + 2 * 8
        } else {
            0
        }
    }

    /// The TMA-store epilogue's staging buffers: two chunks per consumer that stores (64-row
    /// tiles: consumer 0 alone).
    pub fn staging_bytes(self) -> u32 {
        if self.bm == 64 && !self.pingpong {
            C_STAGING_BYTES / 2
        } else {
            C_STAGING_BYTES
        }
    }

    /// Dynamic shared memory: 1 KB of slack to round the base up to the 1024-byte swizzle
    /// repeat, the stages, the TMA-store epilogue's C staging buffers (two 8 KB chunks of 64 rows
    /// x 128 bytes per consumer; unused by the register epilogue), a full and an empty mbarrier
    /// per stage, and the C-load epilogue's four (reserved in every variant).
    pub fn smem_bytes(self) -> u32 {
        1024 + self.stages * self.stage_bytes()
            + self.staging_bytes()
            + self.handoff_bytes()
            + 2 * self.stages * 8
            + C_LOAD_BARS * 8
    }

    /// (tiles along M, tiles along N).
    pub fn tiles(self, m: usize, n: usize) -> (u32, u32) {
        (
            m.div_ceil(self.bm as usize) as u32,
            n.div_ceil(self.bn as usize) as u32,
        )
    }

    /// Cluster tiles (`cluster` block tiles stacked along M): the units the grid walks.
    pub fn cluster_tiles(self, m: usize, n: usize) -> u32 {
        let (tm, tn) = self.tiles(m, n);
        tm.div_ceil(self.cluster) * tn
    }

    /// Persistent grid in CTAs: one cluster per `max_clusters` slot (SMs / cluster size, or what
    /// the occupancy query allows), or per cluster tile when there are fewer.
    pub fn grid(self, m: usize, n: usize, max_clusters: u32) -> u32 {
        self.cluster_tiles(m, n).min(max_clusters).max(1) * self.cluster
    }

    /// How `splits` K slices are laid over the cluster tiles of an `m` x `n` problem run on
    /// `max_clusters` resident clusters: every tile split, or with `tail` only the tiles of the
    /// last, partial wave (none when the waves are whole). Mirrors the kernel's work units.
    pub fn split_plan(
        self,
        m: usize,
        n: usize,
        splits: u32,
        tail: bool,
        max_clusters: u32,
    ) -> SplitPlan {
        let ctiles = self.cluster_tiles(m, n);
        let slots = max_clusters.max(1);
        let split_from = match (splits > 1, tail) {
            (false, _) => ctiles,
            (true, false) => 0,
            (true, true) => ctiles / slots * slots,
        };
        let splits = if split_from == ctiles { 1 } else { splits };
        let units = split_from + (ctiles - split_from) * splits;
        SplitPlan {
            splits,
            split_from,
            split_block_tiles: (ctiles - split_from) * self.cluster,
            grid: units.min(slots).max(1) * self.cluster,
        }
    }

    /// Stream-K: the first cluster tile whose K blocks are spread over the CTAs (the kernel's
    /// `Extras.sk_from`), for an `m` x `n` x `k` problem on `max_clusters` resident CTAs; `None`
    /// where the kernel has no stream-K (pairs, 64-row tiles), the waves are whole, or there is
    /// at most one. The stream-K region is the last partial wave plus one whole wave, so each
    /// CTA's range is 1-2 tiles long and a tile has at most two contributors (one fp32 partial
    /// written and read back); the whole waves before it run as plain tiles.
    pub fn stream_k_from(self, m: usize, n: usize, k: usize, max_clusters: u32) -> Option<u32> {
        if self.cluster != 1 || self.bm != BM {
            return None;
        }
        let slots = max_clusters.max(1);
        let ctiles = self.cluster_tiles(m, n);
        let rem = ctiles % slots;
        if ctiles <= slots || rem == 0 {
            return None;
        }
        let from = ctiles - rem - slots;
        // The kernel's range arithmetic is 32-bit: K blocks x CTAs under 2^31.
        let w = (ctiles - from) as u64 * k_blocks(k) as u64;
        (w * slots as u64 <= i32::MAX as u64).then_some(from)
    }

    /// Wave-quantised cost of running the tiles as `splits` K slices each, in 128 x 64 x 64
    /// block-steps: waves of work units (tiles x splits over the SMs), each unit its share of
    /// the K blocks plus ~3 blocks of pipeline fill and epilogue, plus, when split, ~8 + 3 per
    /// slice for writing and re-reading fp32 partial tiles (8 + 3s: measured on H200, 1024^3
    /// split in 2 ran 12 % slower than unsplit, which 3s alone predicted faster). Lower is
    /// better. A model, not a measurement: it only has to rank the few candidates `choose`
    /// weighs.
    fn cost(self, m: usize, n: usize, k: usize, sm_count: u32, splits: u32) -> u64 {
        let (tm, tn) = self.tiles(m, n);
        let units = tm as u64 * tn as u64 * splits as u64;
        let kb = k.div_ceil(BK as usize).max(1) as u64;
        let split_extra = if splits > 1 { 8 + 3 * splits as u64 } else { 0 };
        let per_unit = kb.div_ceil(splits as u64) + 3 + split_extra;
        // Time of one block-step, in eighths of a 128 x 64 x 64 one at full tensor rate: the
        // width, with m64n64 wgmma charged 25 % extra (each 64 x 64 x 16 step reads 4 KB of
        // shared memory for 131 kFLOP, near the 128 B/clk an SM can feed).
        let step = if self.bn == 64 {
            10
        } else {
            self.bn as u64 / 8
        };
        units.div_ceil(sm_count.max(1) as u64) * per_unit * step
    }

    /// The split-K factor (1..=MAX_SPLITS, never more than the K blocks) with the lowest
    /// `cost`; ties keep fewer slices. Only single CTAs with tiles at most 128 wide are weighed
    /// (the 256-wide tile splits only its last wave, [`TileConfig::tail_splits`]).
    pub fn best_splits(self, m: usize, n: usize, k: usize, sm_count: u32) -> u32 {
        if self.cluster != 1 || self.bn > 128 || self.bm != BM {
            return 1;
        }
        let kb = k.div_ceil(BK as usize).max(1) as u32;
        (1..=MAX_SPLITS.min(kb))
            .min_by_key(|&s| (self.cost(m, n, k, sm_count, s), s))
            .unwrap_or(1)
    }

    /// K slices for the tiles of the last wave when that wave is at most half full: about as many
    /// as fill the SMs it leaves idle (slots / tail tiles, 2..=5 and at most a quarter of the K
    /// blocks); `None` when the waves are whole or the last one is more than half full. On an
    /// H200, 512x128256x4096 (2004 tiles of 128x256 on 132 SMs: 24 in a 16th wave) ran at
    /// 764 TFLOPS with the last wave split in 5 (3 and 4: 760), 742 unsplit, 743 in CTA pairs.
    pub fn tail_splits(self, m: usize, n: usize, k: usize, sm_count: u32) -> Option<u32> {
        let slots = (sm_count / self.cluster).max(1);
        last_wave_slices(self.cluster_tiles(m, n), slots, 5, k_blocks(k))
    }

    /// (tile config, split-K factor). From the widest tile down (256, 192, 128, 64), a narrower one
    /// (at its best split) replaces the current pick only where it takes clearly (10 %) less
    /// modelled time: wider tiles reuse each A tile more, so they win ties. Pairs of CTAs
    /// (multicast B) for the 256- or 192-wide tile as `pairing` allows, with at least two
    /// tile-rows.
    ///
    /// `widths`: whether to weigh the 224-wide tile too ([`Widths`]), which makes whole waves
    /// where the multiples of 64 do not. The 168-wide tile is never weighed: it runs only when
    /// forced.
    pub fn choose(
        m: usize,
        n: usize,
        k: usize,
        sm_count: u32,
        pairing: Pairing,
        widths: Widths,
    ) -> (TileConfig, u32) {
        Self::choose_noted(m, n, k, sm_count, pairing, widths, &mut Notes::off())
    }

    /// [`TileConfig::choose`], saying in `notes` what it weighed and why it picked.
    #[allow(clippy::too_many_arguments)]
    pub fn choose_noted(
        m: usize,
        n: usize,
        k: usize,
        sm_count: u32,
        pairing: Pairing,
        widths: Widths,
        notes: &mut Notes,
    ) -> (TileConfig, u32) {
        let mut pick = (TileConfig::LARGE, 1);
        let mut pick_cost = TileConfig::LARGE.cost(m, n, k, sm_count, 1);
        notes.add(|| {
            format!(
                "cost model (block-steps): {} {pick_cost}",
                TileConfig::LARGE.label(1)
            )
        });
        for cfg in [
            TileConfig::WIDE,
            TileConfig::N224,
            TileConfig::MEDIUM,
            TileConfig::SMALL,
            TileConfig::TINY,
        ] {
            // The 224-wide tile only where N is a multiple of 224, rows are on lines (single
            // CTAs: it has no pair variant), there are two tile-rows and B is K-major. H100,
            // session 17 (us, default -> 128 x 224), RC: 1024x3584x18944 185.9 -> 171.5,
            // 2048x3584x3584 77.6 -> 70.5, 2048x3584x18944 367 -> 341, 4096x3584x18944 758 ->
            // 697, 1024x7168x7168 146.8 -> 134.5, 512x14336x4096 89.2 -> 80.7; but
            // 1024x13824x5120 188.4 -> 190.5, 1x28672x8192 165.1 -> 164.9; an MN-major B
            // (whole 64-column boxes: 256 columns loaded) -7 to +7 %: CR 2048x3584x18944 369 ->
            // 391, RR 4096x3584x18944 721 -> 763, RR 512x14336x4096 89.5 -> 83.0 (ledger #72).
            if cfg == TileConfig::N224 {
                let why = match widths {
                    Widths::Off => Some("KILN_WGMMA_WIDTHS=0"),
                    _ if pairing != Pairing::Never => {
                        Some("rows off lines: it runs in single CTAs only")
                    }
                    _ if !n.is_multiple_of(224) => Some("it needs N a multiple of 224"),
                    _ if m <= BM as usize => Some("one tile-row: B's bandwidth bounds it"),
                    Widths::MnMajorB => Some("an MN-major B: timed 7 % slower to 7 % faster"),
                    Widths::KMajorB => None,
                };
                if let Some(why) = why {
                    notes.add(|| format!("{} not weighed ({why})", cfg.label(1)));
                    continue;
                }
            }
            // The 320-wide tile only where it wastes no columns, makes at most one wave, and runs
            // in single CTAs (rows on lines; it has no pair variant). H100, session 15 (us,
            // 128 x 192 or 256 -> 128 x 320): one wave, 1024x5120x5120 83.2 -> 70.8,
            // 1024x5120x13824 204.7 -> 179.1; two or more, 1024x10240x4096 111.1 -> 113.3,
            // 4096x2560x2560 69.6 -> 73.0, 4096x6400x6400 419.2 -> 426.6.
            if cfg == TileConfig::WIDE
                && (!n.is_multiple_of(320)
                    || pairing != Pairing::Never
                    || cfg.cluster_tiles(m, n) > sm_count)
            {
                notes.add(|| {
                    format!(
                        "{} not weighed (it needs N a multiple of 320, rows on lines, one wave)",
                        cfg.label(1)
                    )
                });
                continue;
            }
            let s = cfg.best_splits(m, n, k, sm_count);
            let c = cfg.cost(m, n, k, sm_count, s);
            let taken = c * 10 < pick_cost * 9;
            notes.add(|| {
                format!(
                    "{} {c}{}",
                    cfg.label(s),
                    if taken {
                        " (10 % under the pick so far: taken)"
                    } else {
                        ""
                    }
                )
            });
            if taken {
                pick = (cfg, s);
                pick_cost = c;
            }
        }
        notes.add(|| {
            format!(
                "{} never weighed: forced only (KILN_WGMMA_CFG=n168), 2-4x slower with an \
                 MN-major B (ledger #72)",
                TileConfig::N168.label(1)
            )
        });
        // Pairs where there are two tile-rows to pair and, unless rows are at 16-byte alignment,
        // more than one wave (H100, session 15, us, one wave: 2048x2048x1000 (2000-byte rows)
        // 19.9 in pairs against 22.8 single, 2000^3 (4000-byte rows) 29.5 against 28.8; H200,
        // rows on lines: 2048^3 591-597 TF in pairs against 608).
        let (tm, tn) = pick.0.tiles(m, n);
        let paired = match pairing {
            Pairing::Never => false,
            Pairing::SeveralWaves => tm >= 2 && tm * tn > sm_count,
            Pairing::Always => tm >= 2,
        };
        let single = pick.0;
        if paired {
            match pick.0 {
                TileConfig::LARGE => pick = (TileConfig::LARGE_PAIR, 1),
                TileConfig::MEDIUM => pick = (TileConfig::MEDIUM_PAIR, 1),
                _ => {}
            }
        }
        notes.add(|| {
            let rule = match pairing {
                Pairing::Never => "rows on 128-byte lines (or pairs off): single CTAs",
                Pairing::SeveralWaves => {
                    "rows off lines, 32-byte aligned: pairs with two tile-rows and more than one wave"
                }
                Pairing::Always => "rows at 16-byte alignment: pairs with two tile-rows",
            };
            if pick.0 != single {
                format!("{rule}: {}", pick.0.label(1))
            } else if pairing != Pairing::Never {
                format!("{rule}: {} stays single", single.label(1))
            } else {
                rule.to_string()
            }
        });
        // One wave of 64 x 64 tiles beats every 128-row tile (and split-K) measured: more SMs
        // busy, no workspace; with a second wave it loses (H100, session 7: 1024^3 0.83x
        // against 0.98x, 256x4096x4096 0.84x against 0.99x).
        if TileConfig::TINY64.cluster_tiles(m, n) <= sm_count {
            notes.add(|| "one wave of 64x64 tiles covers the problem: 64x64".into());
            pick = (TileConfig::TINY64, 1);
        }
        pick
    }
}

/// Whether [`TileConfig::choose`] weighs the 224-wide tile, and with which B: it takes only a
/// K-major B; an MN-major B loads whole 64-column boxes (256 columns for 224), timed from 7 %
/// faster to 7 % slower (ledger #72).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Widths {
    Off,
    KMajorB,
    MnMajorB,
}

impl Widths {
    /// `on` (the rule, [`WIDTHS_BY_DEFAULT`] or `KILN_WGMMA_WIDTHS`) for `p`'s B.
    pub fn of(p: &GemmProblem, on: bool) -> Widths {
        match (on, p.layout.b_k_major()) {
            (false, _) => Widths::Off,
            (true, true) => Widths::KMajorB,
            (true, false) => Widths::MnMajorB,
        }
    }
}

/// A launch's split-K layout ([`TileConfig::split_plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitPlan {
    /// K slices per split tile (1: nothing is split).
    pub splits: u32,
    /// The first cluster tile that is split (the kernel's `Extras.split_from`).
    pub split_from: u32,
    /// Block tiles that are split: one arrival counter each, `splits` fp32 partials each.
    pub split_block_tiles: u32,
    /// CTAs to launch: one cluster per work unit, up to the resident slots.
    pub grid: u32,
}

impl SplitPlan {
    /// fp32 workspace bytes of stream-K on `grid` CTAs: two partial tiles per CTA (the tile
    /// its range starts in and the one it ends in).
    pub fn stream_k_workspace_bytes(grid: u32, bn: u32) -> usize {
        2 * grid as usize * (BM * bn) as usize * 4
    }

    /// fp32 workspace bytes for the partial tiles of a `bn`-wide tile (0 when not split).
    pub fn workspace_bytes(&self, bn: u32) -> usize {
        if self.splits <= 1 {
            return 0;
        }
        self.split_block_tiles as usize * self.splits as usize * (BM * bn) as usize * 4
        // (only 128-row tiles split: the 64-row ones already split K inside the CTA)
    }
}

/// Where [`TileConfig::choose`] may pair CTAs (multicast B), from how the rows of A and B lie
/// ([`Pairing::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pairing {
    /// Rows on 128-byte lines, or pairs turned off: single CTAs.
    Never,
    /// Rows off lines, at 32-byte alignment or better: pairs with more than one wave of tiles.
    SeveralWaves,
    /// Some rows at 16-byte alignment only, each 128-byte box row straddling two lines and five
    /// sectors: pairs at one wave too.
    Always,
}

impl Pairing {
    /// The pairing for `p`'s leading dimensions, when pairs are allowed at all.
    pub fn of(p: &GemmProblem, allowed: bool) -> Pairing {
        match (allowed, rows_aligned_to(p, 128), rows_aligned_to(p, 32)) {
            (false, _, _) | (_, true, _) => Pairing::Never,
            (true, false, true) => Pairing::SeveralWaves,
            (true, false, false) => Pairing::Always,
        }
    }
}

/// Whether every row of A and B starts on a 128-byte line (the leading dimensions are multiples
/// of 128 bytes), so that a 128-byte TMA box row is one line.
pub fn rows_on_lines(p: &GemmProblem) -> bool {
    rows_aligned_to(p, 128)
}

/// Whether the row strides of A and B are both multiples of `bytes`.
fn rows_aligned_to(p: &GemmProblem, bytes: usize) -> bool {
    let es = p.input.size();
    (p.lda * es).is_multiple_of(bytes) && (p.ldb * es).is_multiple_of(bytes)
}

/// The ping-pong tile that beats the unsplit cooperative tile `coop` the heuristic would run, if
/// one does. Where rows lie on 128-byte lines, in two regimes (H100, session 12,
/// ratio to cuBLAS, cooperative -> ping-pong; f32 C, the register epilogue, gained as much:
/// 2048^3 0.854 -> 0.907, 512x4096x4096 0.884 -> 0.929):
/// - 128 x 256 tiles making at most one wave, 128 x 128 ones more than one (so both consumers of
///   most CTAs have a tile, one's epilogue under the other's K loop), K <= 2048: 2048^3 0.956 ->
///   0.969 (RC), 0.926 -> 0.980 (CR), 0.956 -> 0.980 (RR), 0.955 -> 0.974 (CC); 2048x2048x1024
///   0.912 -> 0.966; 1024x4096x1024 0.905 -> 0.974. At K >= 4096 it lost (1024x4096x4096
///   1.023 -> 0.973, 2048x2048x4096 1.030 -> 0.924).
/// - one wave of 128 x 128, 128 x 64 or 64 x 64 tiles, where the cooperative pick is that tile:
///   the same tiles on the same grid, each CTA's one tile computed by one consumer instead of two
///   (64 x 64: instead of two consumers taking alternate K blocks and adding up).
///   128 x 128: 512x4096x4096 0.916-0.953 -> 0.948-1.019 in the four layouts, 512x4096x14336 CR
///   0.970 -> 1.000, 128x14336x4096 kiln 0.7 % faster. 128 x 64: 1024^3 0.841-0.855 ->
///   0.922-0.982 in the four layouts, 256x4096x4096 0.946 -> 0.994, 512x2048x4096 0.966 -> 1.064.
///   64 x 64: 128x4096x4096 kiln 1.6-4.7 % faster in the four layouts, 128x4096x14336 3.0 %,
///   64x4096x4096 2.0 %, 512^3 -0.4 to +3.3 %.
///
/// It lost at every shape of several waves timed but 4096x4096x1024 (4096^3 1.002 -> 0.869: its
/// 37 % more L2 traffic costs ~7 % of clock at the 700 W cap), in a bigger tile than the
/// cooperative pick (128x4096x4096 1.005 -> 0.924 with 128 x 64 instead of 64 x 64) and by
/// 30-50 % where rows straddle lines (4000^3, 4096x4096x4088). Off lines it takes only one
/// wave's worth of 128 x 64 tiles (below).
pub fn pingpong_for(p: &GemmProblem, coop: TileConfig, sm_count: u32) -> Option<TileConfig> {
    if !rows_on_lines(p) {
        // Rows off lines: where one wave of 128 x 128 tiles covers what the cooperative pick
        // would run as 128 x 64 tiles, the 128 x 128 ping-pong tile, which loads a third fewer
        // straddled rows per output (H100, session 15, us: 1000^3 12.3 against 14.4,
        // 1000x1000x4000 24.6 against 28.3).
        return match coop {
            TileConfig::TINY if TileConfig::PINGPONG.cluster_tiles(p.m, p.n) <= sm_count => {
                Some(TileConfig::PINGPONG)
            }
            _ => None,
        };
    }
    match coop {
        TileConfig::SMALL => Some(TileConfig::PINGPONG),
        TileConfig::TINY => Some(TileConfig::PINGPONG64),
        // 64 < M < 104 with a K-major A: the second 64-row tile would be over a third zero
        // fill, which TMA does not do for free; one 128-row tile loads an A box trimmed to M
        // (`a_box_rows`), on half the CTAs. H100, session 14 (us, 64x64 -> 128x64 ping-pong):
        // at N = K = 4096 (64 tiles) M = 72 24.1 -> 18.3, 80 22.8 -> 18.1, 96 20.4 -> 18.2,
        // 100 18.9 -> 18.1, but 110 17.5 -> 18.3; 96x4096x14336 61.0 -> 51.5. With 32 tiles
        // (96x2048x4096) 13.9 -> 16.0: too few CTAs to stream B, so at least 48 % of the SMs.
        TileConfig::TINY64
            if p.m > 64
                && p.m < 104
                && p.layout.a_k_major()
                && TileConfig::PINGPONG64.cluster_tiles(p.m, p.n) * 100 >= sm_count * 48 =>
        {
            Some(TileConfig::PINGPONG64)
        }
        TileConfig::TINY64 => Some(TileConfig::PINGPONG_TINY),
        TileConfig::LARGE
            if p.k <= 2048
                && TileConfig::LARGE.cluster_tiles(p.m, p.n) <= sm_count
                && TileConfig::PINGPONG.cluster_tiles(p.m, p.n) > sm_count =>
        {
            Some(TileConfig::PINGPONG)
        }
        _ => None,
    }
}

/// One tile-row (M <= 128) where the split-K cost model picks split 128 x 128 tiles and one wave
/// of 128 x 64 tiles covers the problem: those, unsplit, in the ping-pong schedule. The model
/// charges split-K's partials too little at these memory-bound shapes. H100, session 15 (us,
/// split 128 x 128 -> 128 x 64 ping-pong): 128x5120x5120 29.1 -> 25.0, 128x4608x4096 24.8 ->
/// 20.4, 128x6144x6144 36.4 -> 32.5, 128x8192x8192 57.1 -> 52.5, 128x5120x13824 59.1 -> 57.8,
/// 96x5120x5120 28.9 -> 24.9; but 128x8192x28672 168.5 -> 175.6, hence K <= 16384 (not measured
/// between 13824 and 28672). Rows on lines only, where the ping-pong tile was measured.
fn unsplit_one_wave(
    p: &GemmProblem,
    tile: TileConfig,
    splits: u32,
    sm_count: u32,
) -> (TileConfig, u32) {
    let one_wave = TileConfig::PINGPONG64.cluster_tiles(p.m, p.n) <= sm_count;
    if tile == TileConfig::SMALL
        && splits > 1
        && p.m <= BM as usize
        && p.k <= 16384
        && one_wave
        && rows_on_lines(p)
    {
        (TileConfig::PINGPONG64, 1)
    } else {
        (tile, splits)
    }
}

/// Few tiles, long K, rows at 16-byte alignment: a 128 x 192 or 128 x 256 pair with every tile
/// split into 2-4 K slices, as many clusters as fit in one wave, where the cooperative pick would
/// leave SMs idle or run single CTAs that each load their straddled rows. Applies where some rows
/// are at 16-byte alignment only ([`Pairing::Always`]), at least six tile-rows, at most one wave
/// of 128 x 128 tiles and K >= 4000. H100, session 18 (ledger #78, us, default -> this): RC
/// 1000x1000x4008 30.0 -> 28.5, 760x1000x4008 30.0 -> 26.8, 1240x1000x4008 38.0 -> 31.9; CR
/// 1000x1000x4000 37.2 -> 29.0, 1000x1000x8000 59.3 -> 40.3, 1000x2000x4000 42.3 -> 36.3,
/// 1000x1512x6000 65.7 -> 40.9, 1000x520x4000 25.8 -> 25.4; CC 1000x1000x4000 29.2 -> 28.3. With
/// five tile-rows (one cluster row in three half empty) it lost 7 % at 520x1000x4000 CR; at
/// K <= 3000 it tied or lost (1000x1000x2008 RC 18.2 -> 22.3). A tile with a fifth or more of
/// its columns past N is not weighed: 1400x600x4008 RC (768 columns for 600) lost 3 % (#79).
///
/// Among the candidates, the lowest of a fit to those runs (1000x1000x4000 CR), us:
/// `14.5 + 3.8e-5 BN K / s + 0.0133 BN (s - 1)`: the K share of one CTA, plus a serial
/// reduction of `s - 1` fp32 partial tiles the last slice reads back. It ranked the measured best
/// first at every shape with six tile-rows or more. Session 19 (#79, held out, us): RC
/// 1000x1000x6008 42.3 -> 38.2, 800x800x12008 67.6 -> 53.2, 1000x1000x16008 99.7 -> 61.1,
/// 2000x500x8008 61.8 -> 46.7; CR 888x1000x5000 42.8 -> 34.8; RR 1000x2000x5000 49.8 -> 41.0;
/// CC 1240x1240x4008 43.9 -> 35.7.
fn few_tiles_long_k(p: &GemmProblem, pairing: Pairing, sm_count: u32) -> Option<(TileConfig, u32)> {
    let tile_rows = p.m.div_ceil(BM as usize);
    if pairing != Pairing::Always
        || tile_rows < 6
        || p.k < 4000
        || TileConfig::PINGPONG.cluster_tiles(p.m, p.n) > sm_count
    {
        return None;
    }
    let slots = sm_count / 2;
    let modelled = |cfg: TileConfig, s: u32| {
        let bn = cfg.bn as f64;
        14.5 + 3.8e-5 * bn * p.k as f64 / s as f64 + 0.0133 * bn * (s - 1) as f64
    };
    [TileConfig::MEDIUM_PAIR, TileConfig::LARGE_PAIR]
        .into_iter()
        .flat_map(|cfg| (2..=4).map(move |s| (cfg, s)))
        .filter(|&(cfg, s)| {
            let used = p.n as f64 / (cfg.tiles(p.m, p.n).1 * cfg.bn) as f64;
            cfg.cluster_tiles(p.m, p.n) * s <= slots && used >= 0.8
        })
        .min_by(|&(a, s), &(b, t)| modelled(a, s).total_cmp(&modelled(b, t)))
}

/// The last-wave split rule (GEMM's tail split, the fused SwiGLU's in-kernel split): when `tiles`
/// on `slots` resident CTAs leave a last wave at most half full, its tiles are cut into as many K
/// slices as fill the idle slots (slots / tail tiles), at most `max_slices` and a quarter of the
/// `kblocks`; `None` when the waves are whole, there is one wave or less, or that is under 2.
pub fn last_wave_slices(tiles: u32, slots: u32, max_slices: u32, kblocks: u32) -> Option<u32> {
    let slots = slots.max(1);
    let tail = tiles % slots;
    if tiles <= slots || tail == 0 || tail * 2 > slots {
        return None;
    }
    let s = (slots / tail).min(max_slices).min(kblocks / 4);
    (s >= 2).then_some(s)
}

/// The most K slices a tile is split into.
pub const MAX_SPLITS: u32 = 8;

/// K blocks (BK deep) of a problem with depth `k` (at least 1).
pub fn k_blocks(k: usize) -> u32 {
    k.div_ceil(BK as usize).max(1).min(u32::MAX as usize) as u32
}

/// The values each parameter of [`WgmmaTmaWs`]'s space may take. BN picks the tile config (its
/// stage count is the most that fits: 4, 6 or 8), PAIRS the CTA-pair (multicast B) variant of the
/// 256- or 192-wide tile, SPLITS the split-K factor, GROUP_M the grouped tile order's rows (the value the
/// compiled variants cover).
const BMS: [i64; 2] = [128, 64];
/// (168 is not in it: 2-4x slower with an MN-major B, ledger #72; `KILN_WGMMA_CFG=n168` forces it.)
const BNS: [i64; 6] = [64, 128, 192, 224, 256, 320];
const PAIRS: [i64; 2] = [0, 1];
const SPLITS: [i64; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
const GROUP_MS: [i64; 1] = [GROUP_M as i64];

const PAIRS_RULE: &str =
    "PAIRS=1 (clusters of 2 CTAs multicasting B) only with BN=256 or 192: the \
     pair variants compiled are 128x256 and 128x192";
const BM64_RULE: &str = "BM=64 (one 64-row tile whose K blocks the two consumers share) only \
     with BN=64, PAIRS=0 and SPLITS=1: the 64x64 single-CTA tile is the one compiled";
const TAILS: [i64; 2] = [0, 1];
const TAIL_RULE: &str = "TAIL=1 (split only the last, partial wave's tiles) only with SPLITS>1";
const SKS: [i64; 2] = [0, 1];
const PINGPONGS: [i64; 2] = [0, 1];
const PINGPONG_RULE: &str = "PINGPONG=1 (each consumer its own tile, the two taking turns) only \
     with BN=128 or 64, PAIRS=0, SPLITS=1 and SK=0: the ping-pong kernel is compiled for 128x128, \
     128x64 and 64x64 tiles, in single CTAs, unsplit";
const SK_RULE: &str = "SK=1 (stream-K over the last partial wave and one whole wave) only with \
     BM=128, PAIRS=0 and SPLITS=1: single 128-row CTAs are the variants that take it";
const SPLITS_K_RULE: &str = "SPLITS at most the K blocks (K / 64): more slices than K blocks \
     leaves some empty";

/// A launch fully resolved: the tile config, the split-K factor and the grouped order's
/// tile-rows. `launch` derives it from the tuning cache or [`TileConfig::choose`] (then the env
/// overrides); `launch_with` parses it from a config of the space.
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
}

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

/// The reasons a (BM, BN, PAIRS, SPLITS, GROUP_M, TAIL, SK, PINGPONG) point breaks the kernel's
/// limits, independent of the problem (the space adds SPLITS <= K blocks).
#[allow(clippy::too_many_arguments)]
fn space_rules(
    bm: i64,
    bn: i64,
    pairs: i64,
    splits: i64,
    group_m: i64,
    tail: i64,
    sk: i64,
    pingpong: i64,
) -> Vec<String> {
    let mut broken = Vec::new();
    if !BMS.contains(&bm) {
        broken.push(format!("BM={bm} is not one of {BMS:?}"));
    }
    if bm == 64 && (bn != 64 || pairs != 0 || splits != 1) {
        broken.push(BM64_RULE.into());
    }
    if !BNS.contains(&bn) {
        broken.push(format!("BN={bn} is not one of {BNS:?}"));
    }
    if !PAIRS.contains(&pairs) {
        broken.push(format!("PAIRS={pairs} is not 0 or 1"));
    }
    if !SPLITS.contains(&splits) {
        broken.push(format!("SPLITS={splits} is not in 1..={MAX_SPLITS}"));
    }
    if !GROUP_MS.contains(&group_m) {
        broken.push(format!(
            "GROUP_M={group_m} is not one of {GROUP_MS:?} (the compiled variants)"
        ));
    }
    if pairs == 1 && !(bn == 256 || bn == 192) {
        broken.push(PAIRS_RULE.into());
    }
    if !TAILS.contains(&tail) {
        broken.push(format!("TAIL={tail} is not 0 or 1"));
    }
    if tail == 1 && splits <= 1 {
        broken.push(TAIL_RULE.into());
    }
    if !SKS.contains(&sk) {
        broken.push(format!("SK={sk} is not 0 or 1"));
    }
    if sk == 1 && (bm != BM as i64 || pairs != 0 || splits != 1) {
        broken.push(SK_RULE.into());
    }
    if !PINGPONGS.contains(&pingpong) {
        broken.push(format!("PINGPONG={pingpong} is not 0 or 1"));
    }
    if pingpong == 1 && (!(bn == 128 || bn == 64) || pairs != 0 || splits != 1 || sk != 0) {
        broken.push(PINGPONG_RULE.into());
    }
    broken
}

impl Choice {
    /// The choice a config of [`WgmmaTmaWs`]'s space names, or why the kernel cannot take it.
    pub fn from_config(cfg: &Config) -> std::result::Result<Choice, String> {
        // Configs tuned before BM existed are 128-row tiles.
        let bm = cfg.get("BM").unwrap_or(BM as i64);
        let bn = cfg.require("BN")?;
        let pairs = cfg.require("PAIRS")?;
        let splits = cfg.require("SPLITS")?;
        let group_m = cfg.require("GROUP_M")?;
        // Configs tuned before TAIL existed split every tile.
        let tail = cfg.get("TAIL").unwrap_or(0);
        // Configs tuned before SK existed ran plain tiles.
        let sk = cfg.get("SK").unwrap_or(0);
        // Configs tuned before PINGPONG existed are cooperative.
        let pingpong = cfg.get("PINGPONG").unwrap_or(0);
        if let Some(reason) =
            space_rules(bm, bn, pairs, splits, group_m, tail, sk, pingpong).first()
        {
            return Err(format!("{cfg}: {reason}"));
        }
        let tile = match (bm, bn, pairs) {
            (64, _, _) if pingpong == 1 => TileConfig::PINGPONG_TINY,
            (_, 64, _) if pingpong == 1 => TileConfig::PINGPONG64,
            _ if pingpong == 1 => TileConfig::PINGPONG,
            (64, _, _) => TileConfig::TINY64,
            (_, 256, 1) => TileConfig::LARGE_PAIR,
            (_, 256, _) => TileConfig::LARGE,
            (_, 192, 1) => TileConfig::MEDIUM_PAIR,
            (_, 192, _) => TileConfig::MEDIUM,
            (_, 320, _) => TileConfig::WIDE,
            (_, 224, _) => TileConfig::N224,
            (_, 128, _) => TileConfig::SMALL,
            _ => TileConfig::TINY,
        };
        Ok(Choice {
            tile,
            splits: splits as u32,
            group_m: group_m as u32,
            tail: tail == 1,
            stream_k: sk == 1,
        })
    }

    /// The config naming this choice, in the space's parameter order.
    pub fn to_config(&self) -> Config {
        Config::new(&[
            ("BM", self.tile.bm as i64),
            ("BN", self.tile.bn as i64),
            ("PAIRS", (self.tile.cluster > 1) as i64),
            ("SPLITS", self.splits as i64),
            ("GROUP_M", self.group_m as i64),
            ("TAIL", self.tail as i64),
            ("SK", self.stream_k as i64),
            ("PINGPONG", self.tile.pingpong as i64),
        ])
    }

    /// The heuristic's choice: [`TileConfig::choose`] with the default group size; a 128x256 or
    /// 128x192 pick (single or paired) whose last wave is at most half full gets that wave split
    /// ([`TileConfig::tail_splits`]). The 224-wide tile is weighed as [`WIDTHS_BY_DEFAULT`]
    /// says ([`Choice::heuristic_with`] to choose).
    pub fn heuristic(p: &GemmProblem, sm_count: u32, pairs: bool) -> Choice {
        Choice::heuristic_with(p, sm_count, pairs, WIDTHS_BY_DEFAULT)
    }

    /// [`Choice::heuristic`], weighing the 224-wide tile when `widths`.
    pub fn heuristic_with(p: &GemmProblem, sm_count: u32, pairs: bool, widths: bool) -> Choice {
        Choice::heuristic_noted(p, sm_count, pairs, widths, &mut Notes::off())
    }

    /// [`Choice::heuristic_with`], saying in `notes` which of its rules applied.
    pub fn heuristic_noted(
        p: &GemmProblem,
        sm_count: u32,
        pairs: bool,
        widths: bool,
        notes: &mut Notes,
    ) -> Choice {
        // Pairs (multicast B) only where rows straddle 128-byte lines (4096 x 4096 x 4088 ran
        // 0.77x cuBLAS in single CTAs, 1.0x in pairs). Elsewhere single CTAs,
        // whose epilogue goes out under the next tile's mainloop (all four chunks; pairs defer
        // one): H100, session 7, ratio to cuBLAS pairs -> single: 4096^3 0.990 -> 1.011,
        // 8192^3 0.968 -> 0.981, 4096x4096x1024 0.896 -> 0.965, 8192x14336x4096 0.967 -> 0.984.
        let pairing = Pairing::of(p, pairs);
        let (tile, splits) = TileConfig::choose_noted(
            p.m,
            p.n,
            p.k,
            sm_count,
            pairing,
            Widths::of(p, widths),
            notes,
        );
        let (tile0, splits0) = (tile, splits);
        let (tile, splits) = unsplit_one_wave(p, tile, splits, sm_count);
        if (tile, splits) != (tile0, splits0) {
            notes.add(|| {
                format!(
                    "one tile-row and one wave of 128x64 tiles: {} rather than {}",
                    tile.label(splits),
                    tile0.label(splits0)
                )
            });
        }
        let (tile, splits) = match few_tiles_long_k(p, pairing, sm_count) {
            Some((t, s)) => {
                notes.add(|| {
                    format!(
                        "rows at 16-byte alignment, at most a wave of 128x128 tiles, K >= 4000: \
                         {} (one wave of clusters) rather than {}",
                        t.label(s),
                        tile.label(splits)
                    )
                });
                (t, s)
            }
            None => (tile, splits),
        };
        // The tiles wider than 128 split only a last wave that is at most half full. A pair
        // (rows off lines) splits it as a pair: single CTAs lose far more there than a sparse
        // last wave does (H100, session 15, us: 6000x3000x3000 single with the last wave split
        // 234.1, pair unsplit 174.0, pair with it split in 2 166.9; 5000^3 387.2 -> 361.7 split
        // in 5, the slices `tail_splits` gives both).
        let tail = (tile.bn > 128 && splits == 1)
            .then(|| tile.tail_splits(p.m, p.n, p.k, sm_count))
            .flatten();
        if let Some(t) = tail {
            notes.add(|| format!("the last wave is at most half full: its tiles split in {t}"));
        }
        let splits = tail.unwrap_or(splits);
        let coop = tile;
        let tile = match splits {
            1 => pingpong_for(p, tile, sm_count).unwrap_or(tile),
            _ => tile,
        };
        if tile != coop {
            notes.add(|| {
                format!(
                    "the ping-pong schedule beats the cooperative {} here: {}",
                    coop.label(1),
                    tile.label(1)
                )
            });
        }
        Choice {
            tile,
            splits,
            group_m: GROUP_M,
            tail: tail.is_some(),
            stream_k: false,
        }
    }

    /// What `launch` runs: the tuned config for `p`'s shape class when there is a valid one
    /// (its split factor capped at `p`'s K blocks: the class spans K up to half as deep), else
    /// the heuristic; then the env overrides, which win (`KILN_WGMMA_PAIRS=0` turns a tuned
    /// pair into single CTAs; `KILN_WGMMA_CFG` takes that config's best split unless
    /// `KILN_WGMMA_SPLITS` is set). A pure function, for tests.
    pub fn resolve(
        p: &GemmProblem,
        sm_count: u32,
        tuned: Option<&Config>,
        env: &Overrides,
    ) -> Choice {
        Choice::resolve_noted(p, sm_count, tuned, env, &mut Notes::off())
    }

    /// [`Choice::resolve`], saying in `notes` where the choice came from.
    pub fn resolve_noted(
        p: &GemmProblem,
        sm_count: u32,
        tuned: Option<&Config>,
        env: &Overrides,
        notes: &mut Notes,
    ) -> Choice {
        let mut c = match tuned.and_then(|cfg| Choice::from_config(cfg).ok()) {
            Some(t) => {
                notes.add(|| {
                    format!(
                        "the tuning cache's config for this shape class: {}",
                        t.to_config()
                    )
                });
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
                Choice::heuristic_noted(p, sm_count, env.pairs, env.widths, notes)
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
        c
    }
}

/// The kernel's `Extras` parameter: split-K / stream-K workspace and counters, the split factor,
/// the first split (or stream-K) tile, and the stream-K K blocks (0: none).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct Extras {
    ws: u64,
    counters: u64,
    splits: i32,
    split_from: i32,
    sk_w: u32,
}

/// The split-K workspace (fp32 partial tiles) and per-tile arrival counters, kept across
/// launches and grown on demand. Counters start at 0 and the kernel returns each to 0 (the last
/// unit of a tile resets it), so they are zeroed once, at allocation. One per process: kiln
/// drives one device.
static SPLIT_WS: Scratch = Scratch::new("split-K workspace", false);
static SPLIT_COUNTERS: Scratch = Scratch::new("split-K counter", true);

/// Device addresses of a workspace of at least `ws_bytes` and `counters` counters.
static A_PACK: Scratch = Scratch::new("repacked A", false);
static B_PACK: Scratch = Scratch::new("repacked B", false);
static C_PACK: Scratch = Scratch::new("C through 128-byte rows", false);
/// Elements of C below which its scalar stores are left in place rather than paying a copy's
/// launch (H100, session 13: 1023x1023x1024, 1.0 M elements, gained 2.7 us through scratch;
/// 500^3, 0.25 M, lost 2.1 us with it and the operand copies together).
const C_PACK_MIN: usize = 1 << 19;

/// Whether the kernel writes C (at `c`) through scratch with 128-byte rows: when C's rows cost
/// the epilogue its vector and TMA stores (a row stride or base off 16 bytes) and C is large
/// enough (`C_PACK_MIN` elements) to repay the copy's launch, up to `MAX_PACK_BYTES`. (An N off
/// 16 bytes alone keeps C in place: the register epilogue's stores stay vectors but a row's last.)
pub fn c_through_scratch(p: &GemmProblem, c: u64) -> bool {
    let oes = p.output.size();
    needs_pack(p.ldc, oes, Some(c))
        && p.m * p.n >= C_PACK_MIN
        && pack_shape(p.m, p.n, oes).1 <= MAX_PACK_BYTES
}

/// Where the kernel writes C: `c` itself, or (`Some` copy-back) scratch (`c_through_scratch`),
/// filled from C first when beta != 0 and written by the register epilogue. 4096x4095x4096 ran
/// 286 us with C's scalar stores against 173 at 4096^3.
fn c_target(ctx: &Context, p: &GemmProblem, c: u64) -> Result<(u64, GemmProblem, Option<usize>)> {
    if !c_through_scratch(p, c) {
        return Ok((c, *p, None));
    }
    let oes = p.output.size();
    let (pld, bytes) = pack_shape(p.m, p.n, oes);
    let dst = C_PACK.at_least(ctx, bytes)?;
    if p.beta != 0.0 {
        // SAFETY: C spans M rows of N elements at pitch ldc (validated); the scratch M x pld.
        unsafe { super::pack_rows::launch(ctx, oes, c, p.ldc, dst, pld, p.m, p.n) }?;
    }
    Ok((dst, GemmProblem { ldc: pld, ..*p }, Some(p.ldc)))
}

/// The largest padded copy of one operand `repack` makes; a bigger operand that TMA cannot
/// address is refused (`supports`) and the dispatcher falls to a rung without TMA.
pub const MAX_PACK_BYTES: usize = 2 << 30;

/// Whether TMA cannot read an operand as stored: a row stride that is not a multiple of 16
/// bytes, or (`ptr`, when known) a base that is not 16-byte aligned.
fn needs_pack(ld: usize, es: usize, ptr: Option<u64>) -> bool {
    !(ld * es).is_multiple_of(16) || ptr.is_some_and(|p| super::alignment(p) < 16)
}

/// (padded leading dimension, bytes) of the copy `repack` makes of a stored `rows` x `cols`
/// operand: rows padded to 128 bytes (64 elements), so each TMA box row is one line.
fn pack_shape(rows: usize, cols: usize, es: usize) -> (usize, usize) {
    let ld = cols.next_multiple_of(128 / es);
    (ld, rows * ld * es)
}

/// The leading dimension of the copy an operand stored `(rows, cols)` at `ld` is read from, or
/// `None` when it is read in place (`needs_pack`; `ptr` when known).
fn packed_ld(
    ld: usize,
    (rows, cols): (usize, usize),
    es: usize,
    ptr: Option<u64>,
) -> Option<usize> {
    needs_pack(ld, es, ptr).then(|| pack_shape(rows, cols, es).0)
}

/// Whether A is read from a row-major copy (`transpose_rows`): a column-major A with fewer
/// than 128 rows, not a multiple of 64, where its MN-major boxes cost more than the copy (about
/// 3.8 us at 8x4096 A: a launch, and the GEMM waits for it). A row-major copy's boxes are
/// K-contiguous and trimmed to M (`a_box_rows`). H100, session 14 (transpose-a/, us, read in
/// place -> from the copy, at N = K = 4096 unless said):
/// - a tile with at most 8 rows of M (M mod 64 <= 8), whose box is 56 or more elements of zero
///   fill in its contiguous dimension: CC M = 8 27.1 -> 20.7, M = 72 26.1 -> 22.5,
///   8x14336x4096 56.1 -> 48.9;
/// - B row-major too (CR), whose small-M problems ran slowly in place at every M measured:
///   M = 8 27.1 -> 20.1, 40 26.0 -> 20.5, 100 30.4 -> 21.9.
///
/// CC with more rows per tile lost (M = 16 19.9 -> 20.6, 32 19.7 -> 20.7, 96 19.4 -> 22.6)
/// and reads A in place.
pub fn transposes_a(p: &GemmProblem) -> bool {
    let tail = p.m % 64;
    !p.layout.a_k_major() && p.m < 128 && tail != 0 && (p.layout.b_row_major() || tail <= 8)
}

/// `layout` with A row-major (the layout of a problem whose A is read from its transposed copy).
fn with_a_row_major(layout: Layout) -> Layout {
    match layout {
        Layout::CC => Layout::RC,
        Layout::CR => Layout::RR,
        other => other,
    }
}

/// The problem as the kernel reads it: canonical, with A row-major where it is read from a
/// transposed copy (`transposes_a`), and the leading dimensions of the operands `repack` copies
/// (row strides TMA cannot take) replaced by their copies'. Choices (tuned or heuristic) are
/// made for it.
pub fn as_read(p: &GemmProblem) -> GemmProblem {
    let mut q = p.canonical();
    let es = q.input.size();
    if transposes_a(&q) {
        q.layout = with_a_row_major(q.layout);
        q.lda = pack_shape(q.m, q.k, es).0;
    } else {
        q.lda = packed_ld(q.lda, q.a_storage(), es, None).unwrap_or(q.lda);
    }
    q.ldb = packed_ld(q.ldb, q.b_storage(), es, None).unwrap_or(q.ldb);
    q
}

/// The operands the kernel reads, and the problem with their leading dimensions. An operand TMA
/// cannot address (`needs_pack`: 1023x1023x1023, 777x1234x999, a base off 16 bytes) is copied
/// first, on the stream, into scratch with 128-byte rows (`pack_rows`: one read and one write of
/// the operand, before the GEMM reads it); a column-major A with few rows (`transposes_a`) is
/// copied transposed (`transpose_rows`), and the problem's layout then has A row-major; the
/// others are read in place.
fn repack(ctx: &Context, p: &GemmProblem, a: u64, b: u64) -> Result<(u64, u64, GemmProblem)> {
    let es = p.input.size();
    let mut q = *p;
    // The operand at `src`, stored `(rows, cols)` at `*ld`: in place, or its copy (and `*ld`
    // becomes the copy's).
    let read = |scratch: &Scratch, src: u64, ld: &mut usize, (rows, cols): (usize, usize)| {
        let Some(pld) = packed_ld(*ld, (rows, cols), es, Some(src)) else {
            return Ok(src);
        };
        let dst = scratch.at_least(ctx, pack_shape(rows, cols, es).1)?;
        // SAFETY: the source spans `rows` rows of `cols` elements at pitch `ld` inside the
        // caller's operand (validated); the scratch holds `rows` x `pld` elements and is only
        // read by this launch, after the copy on the same stream.
        unsafe { super::pack_rows::launch(ctx, es, src, *ld, dst, pld, rows, cols) }?;
        *ld = pld;
        Ok::<u64, Error>(dst)
    };
    let a = if transposes_a(p) {
        let (pld, bytes) = pack_shape(p.m, p.k, es);
        let dst = A_PACK.at_least(ctx, bytes)?;
        // SAFETY: A is stored as K rows of M elements at pitch lda (validated); the scratch
        // holds M x pld elements and is only read by this launch, after the copy on the stream.
        unsafe { super::transpose_rows::launch(ctx, a, p.lda, dst, pld, p.k, p.m) }?;
        (q.layout, q.lda) = (with_a_row_major(p.layout), pld);
        dst
    } else {
        read(&A_PACK, a, &mut q.lda, p.a_storage())?
    };
    let b = read(&B_PACK, b, &mut q.ldb, p.b_storage())?;
    Ok((a, b, q))
}

fn workspace(ctx: &Context, ws_bytes: usize, counters: usize) -> Result<(u64, u64)> {
    Ok((
        SPLIT_WS.at_least(ctx, ws_bytes)?,
        SPLIT_COUNTERS.at_least(ctx, counters * 4)?,
    ))
}

/// Tile `t` of the grouped order as (tile row, tile column): GROUP_M tile-rows are swept column
/// by column, then the next group. Mirrors `tile_coords` in the kernel.
pub fn tile_coords(t: u32, tiles_m: u32, tiles_n: u32) -> (u32, u32) {
    let per_group = GROUP_M * tiles_n;
    let group = t / per_group;
    let first_m = group * GROUP_M;
    let rows = (tiles_m - first_m).min(GROUP_M);
    let r = t - group * per_group;
    (first_m + r % rows, r / rows)
}

/// The tensor maps of A and B for `p` at these addresses: B's K-major box holds the CTA's share
/// of the tile's columns when a cluster multicasts B.
pub fn operand_maps(p: &GemmProblem, a: u64, b: u64, cfg: TileConfig) -> (Tma2d, Tma2d) {
    super::tma_operands::operand_maps(p, a, b, a_box_rows(p.m, cfg.bm), b_box_rows(cfg))
}

/// Rows of the K-major B box: the CTA's share of the tile's columns, in two boxes where that is
/// over TMA's 256 (the 320-wide tile: two of 160). Mirrors the kernel's `B_BOXES_K`.
pub fn b_box_rows(cfg: TileConfig) -> u32 {
    let part = cfg.bn / cfg.cluster;
    if part > 256 {
        part / 2
    } else {
        part
    }
}

/// The tile that runs where `tile` was picked, given whether C takes the TMA-store epilogue:
/// the 320-wide tile's register epilogue spills (160 accumulators beside its transposes), so
/// where C needs that one (beta not 0 or 1, a C that TMA cannot address) the 128 x 192 tile runs;
/// the 168- and 224-wide tiles are compiled with the TMA-store epilogue only (fewer variants for
/// tiles chosen at few shapes), and the next multiple of 64 runs instead.
pub fn with_epilogue(tile: TileConfig, tma_epi: bool) -> TileConfig {
    match tile {
        _ if tma_epi => tile,
        TileConfig::WIDE => TileConfig::MEDIUM,
        TileConfig::N168 => TileConfig::MEDIUM,
        TileConfig::N224 => TileConfig::LARGE,
        _ => tile,
    }
}

/// Rows of the K-major A box: the tile's, or for a problem with fewer rows only those, rounded
/// up to 8 (whole 128B-swizzle atoms). Mirrors the kernels' `a_box_rows` (common/gemm_ws.cuh),
/// which expect that many bytes per stage. TMA's zero fill of a tile's rows past M is not free:
/// at N = K = 4096 with 64-row tiles, M = 8 ran 21.7 us and M = 64 17.1 (H100, session 14).
pub fn a_box_rows(m: usize, bm: u32) -> u32 {
    if m < bm as usize {
        (m.div_ceil(8) * 8) as u32
    } else {
        bm
    }
}

/// The tensor map the TMA-store epilogue writes C through: boxes of 64 rows of 128 bytes (64
/// 16-bit or 32 f32 elements; 128B swizzle, as the kernel stages them), global extents the true
/// N x M, so stores outside C are dropped. The same map adds chunks to C (beta = 1, TMA's
/// reduce-add) and loads C's old values ([`Epilogue::TmaLoadC`]). `None` when the epilogue must
/// stay in registers: a C that TMA cannot address (unaligned base or a row stride that is not a
/// multiple of 16 bytes).
pub fn output_map(p: &GemmProblem, c: u64) -> Option<Tma2d> {
    let dtype = p.output.tma();
    // A row whose byte length is not a multiple of 16 ends inside a 16-byte granule, and TMA
    // stores the whole granule (measured on H200: the ldc padding after N = 127 was
    // overwritten), so N must be a multiple of 8 elements (16-bit) or 4 (f32).
    if !(p.n * p.output.size()).is_multiple_of(16) {
        return None;
    }
    let map = Tma2d {
        dtype,
        addr: c,
        dims: [p.n as u64, p.m as u64],
        row_stride_bytes: p.ldc as u64 * p.output.size() as u64,
        box_dims: [128 / p.output.size() as u32, 64],
        swizzle: TmaSwizzle::B128,
    };
    map.validate().ok().map(|()| map)
}

/// The C-load epilogue's mbarriers: one per staging buffer, two per consumer.
const C_LOAD_BARS: u32 = 4;

/// How a launch writes C. Each is a variant of its own (`KILN_EPI`): compiled side by side, the
/// TMA and register epilogues more than doubled the code and spilled the 256-wide tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epilogue {
    /// From registers (`KILN_EPI=0`): a C that TMA cannot address, C through scratch, or
    /// `KILN_WGMMA_EPI=0`; reads C for any beta != 0.
    Registers,
    /// Staged chunks stored by TMA (`KILN_EPI=1`); beta = 1 adds them to C (TMA's reduce-add).
    TmaStore,
    /// Staged chunks blended with C's old values, which TMA loads into the staging buffers two
    /// chunks ahead, then stored by TMA (`KILN_EPI=2`): beta other than 0 and 1.
    TmaLoadC,
}

impl Epilogue {
    pub const ALL: [Epilogue; 3] = [Epilogue::Registers, Epilogue::TmaStore, Epilogue::TmaLoadC];

    /// The kernels' `KILN_EPI`.
    pub fn define(self) -> u32 {
        match self {
            Epilogue::Registers => 0,
            Epilogue::TmaStore => 1,
            Epilogue::TmaLoadC => 2,
        }
    }

    /// Whether C goes out through TMA (either TMA epilogue).
    pub fn tma(self) -> bool {
        self != Epilogue::Registers
    }

    /// The epilogue for `p` whose C TMA can (`map_ok`, see [`output_map`]) or cannot address:
    /// beta 0 stores, beta 1 adds (TMA's reduce-add; `KILN_WGMMA_CLOAD=1` loads C instead, for
    /// 16-bit C the one rounding the register epilogue has), other betas load C first.
    pub fn for_problem(p: &GemmProblem, map_ok: bool, env: &Overrides) -> Epilogue {
        if !map_ok || !env.epi {
            Epilogue::Registers
        } else if p.beta == 0.0 || (p.beta == 1.0 && !env.c_load) {
            Epilogue::TmaStore
        } else {
            Epilogue::TmaLoadC
        }
    }
}

/// TMA loads one CTA issues per stage for `rows` (M or N) of an operand: one box if K-major,
/// else one per 64 rows. Mirrors the producer's loop.
pub fn loads_per_stage(k_major: bool, rows: u32) -> u32 {
    if k_major {
        1
    } else {
        rows / 64
    }
}

/// TMA loads of B all CTAs of a cluster issue together per stage (each multicast to all): one
/// box of bn / cluster rows per CTA if K-major, else one 64 x 64 box per 64 columns or part of
/// them, shared out whole (128 x 192 in pairs: 2 and 1). Mirrors the producer's loop.
pub fn b_loads_per_cluster(k_major: bool, bn: u32, cluster: u32) -> u32 {
    if k_major {
        cluster * (bn / cluster).div_ceil(256)
    } else {
        bn.div_ceil(64)
    }
}

impl WgmmaTmaWs {
    /// The variant of tile `cfg` for a (layout, input dtype, output dtype), with the split-K
    /// and stream-K code where `split_code` is set and the tile has it ([`has_split_code`]).
    fn spec(
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

impl GemmKernel for WgmmaTmaWs {
    fn name(&self) -> &'static str {
        "wgmma_tma_ws"
    }
    fn summary(&self) -> &'static str {
        "persistent warp-specialised WGMMA + TMA: 1 producer and 2 consumer warpgroups, \
         128x256x64 tiles (128x192 where they quantise better; CTA pairs multicasting B where rows \
         straddle 128-byte lines; 128x128 / \
         128x64 and split-K for small grids, 64x64 with the consumers sharing K for one-wave \
         problems, stream-K opt-in), 4-12 stage mbarrier ring, 128B swizzle, stmatrix + \
         TMA-store epilogue under the next tile's K loop; or ping-pong (one-wave and short-K \
         problems): each consumer its own 128x128, 128x64 or 64x64 tile, one's epilogue under the \
         other's K loop"
    }
    fn rung(&self) -> u32 {
        10
    }
    fn supports(&self, p: &GemmProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        // A degenerate operand (one row, leading dimension 1) is taken in the orientation
        // whose rows TMA can address; `launch_choice` runs the same canonical problem.
        let p = &p.canonical();
        if !dev.is_hopper() {
            return Err(format!(
                "needs a Hopper GPU (sm_90a: wgmma, TMA); {} is sm_{}{}",
                dev.name, dev.compute_capability.0, dev.compute_capability.1
            ));
        }
        let es = p.input.size();
        for (name, ld, (rows, cols)) in
            [("lda", p.lda, p.a_storage()), ("ldb", p.ldb, p.b_storage())]
        {
            // Such an operand is read from a padded copy (`repack`), up to a size.
            let bytes = pack_shape(rows, cols, es).1;
            if needs_pack(ld, es, None) && bytes > MAX_PACK_BYTES {
                return Err(format!(
                    "{name} = {ld} is not a multiple of {} elements (TMA needs row strides that \
                     are multiples of 16 bytes), and a padded copy would take {} MiB, over the \
                     {} MiB kept for one",
                    16 / es,
                    bytes >> 20,
                    MAX_PACK_BYTES >> 20
                ));
            }
            if (ld * es) as u64 >= 1 << 40 {
                return Err(format!(
                    "{name} = {ld} gives a row stride of 2^40 bytes or more"
                ));
            }
        }
        if transposes_a(p) && pack_shape(p.m, p.k, es).1 > MAX_PACK_BYTES {
            return Err(format!(
                "a column-major A of {} rows is read from a row-major copy, and that copy would \
                 take {} MiB, over the {} MiB kept for one",
                p.m,
                pack_shape(p.m, p.k, es).1 >> 20,
                MAX_PACK_BYTES >> 20
            ));
        }
        let smem = TileConfig::ALL
            .iter()
            .map(|c| c.smem_bytes())
            .max()
            .unwrap_or(0);
        dev.check_smem(smem)?;
        Ok(())
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        // The copies through 128-byte rows (`repack`, `c_target`): 16-bit operands, C of either
        // width.
        let mut v = vec![
            super::pack_rows::spec(arch, 2),
            super::pack_rows::spec(arch, 4),
            super::transpose_rows::spec(arch),
        ];
        for cfg in TileConfig::ALL {
            for (l, i, o) in super::all_combinations() {
                // The TMA epilogues (beta 0 and 1; other betas, C loaded first), and the register
                // one for a C that TMA cannot address.
                for epi in Epilogue::ALL {
                    if with_epilogue(cfg, epi.tma()) != cfg {
                        continue;
                    }
                    for split_code in [false, true] {
                        if !split_code || has_split_code(cfg) {
                            v.push(Self::spec(arch, (l, i, o), cfg, group_m(), epi, split_code));
                        }
                    }
                }
            }
        }
        v
    }
    fn specs_for(&self, p: &GemmProblem, dev: &DeviceInfo) -> Vec<KernelSpec> {
        let tuned = crate::tune::cache::lookup(dev, self.name(), &as_read(p));
        let env = Overrides::from_env();
        launch_specs(&dev.arch(), p, dev.sm_count, tuned.as_ref(), &env)
    }
    fn launch(&self, ctx: &Context, p: &GemmProblem, ops: &GemmOperands) -> Result<()> {
        let env = Overrides::from_env();
        self.launch_choice(ctx, p, ops, self.choice_for(ctx, p, &env), None, &env)
    }
    fn space(&self, p: &GemmProblem, _dev: &DeviceInfo) -> Option<ParamSpace> {
        let kb = k_blocks(p.k) as i64;
        Some(
            ParamSpace::new()
                .param("BM", &BMS)
                .param("BN", &BNS)
                .param("PAIRS", &PAIRS)
                .launch_param("SPLITS", &SPLITS)
                .param("GROUP_M", &GROUP_MS)
                .launch_param("TAIL", &TAILS)
                .launch_param("SK", &SKS)
                .param("PINGPONG", &PINGPONGS)
                .rule(PAIRS_RULE, |c| {
                    c.get("PAIRS") == Some(0) || matches!(c.get("BN"), Some(256) | Some(192))
                })
                .rule(BM64_RULE, |c| {
                    c.get("BM") != Some(64)
                        || (c.get("BN") == Some(64)
                            && c.get("PAIRS") == Some(0)
                            && c.get("SPLITS") == Some(1))
                })
                .rule(TAIL_RULE, |c| {
                    c.get("TAIL") == Some(0) || c.get("SPLITS").unwrap_or(1) > 1
                })
                .rule(SK_RULE, |c| {
                    c.get("SK") != Some(1)
                        || (c.get("BM") == Some(BM as i64)
                            && c.get("PAIRS") == Some(0)
                            && c.get("SPLITS") == Some(1))
                })
                .rule(PINGPONG_RULE, |c| {
                    c.get("PINGPONG") != Some(1)
                        || (matches!(c.get("BN"), Some(128) | Some(64))
                            && c.get("PAIRS") == Some(0)
                            && c.get("SPLITS") == Some(1)
                            && c.get("SK") == Some(0))
                })
                .rule(SPLITS_K_RULE, move |c| c.get("SPLITS").unwrap_or(1) <= kb),
        )
    }
    fn baseline(&self, p: &GemmProblem, dev: &DeviceInfo) -> Option<Config> {
        Some(
            Choice::heuristic_with(p, dev.sm_count, true, Overrides::from_env().widths).to_config(),
        )
    }
    fn spec_for(&self, arch: &str, p: &GemmProblem, cfg: &Config) -> Option<KernelSpec> {
        Choice::from_config(cfg).ok().map(|c| {
            // C's address is known only at launch: assume it aligned (as allocations are).
            let env = Overrides::from_env();
            let epi = Epilogue::for_problem(p, output_map(p, 1 << 20).is_some(), &env);
            let tile = with_epilogue(c.tile, epi.tma());
            let split_code = needs_split_code(tile, c.splits, c.stream_k, &env);
            Self::spec(
                arch,
                (p.layout, p.input, p.output),
                tile,
                c.group_m,
                epi,
                split_code,
            )
        })
    }
    fn launch_with(
        &self,
        ctx: &Context,
        p: &GemmProblem,
        ops: &GemmOperands,
        cfg: &Config,
    ) -> Result<()> {
        let choice = Choice::from_config(cfg).map_err(|reason| Error::Unsupported {
            kernel: self.name().into(),
            reason,
        })?;
        self.launch_choice(ctx, p, ops, choice, None, &Overrides::from_env())
    }
}

/// What the instrumented variant stamps (the kernel's `TraceEvent`, in order), each once per CTA
/// by the one thread that sees it.
pub const TRACE_EVENTS: [&str; 8] = [
    "entry",
    "block synced (barriers set up; single CTAs' first loads out)",
    "first stage's loads issued",
    "last loads issued",
    "consumer 0: first stage full",
    "consumer 0: mainloop end (last unit)",
    "consumer 0: done (stores complete)",
    "consumer 1: done (stores complete)",
];

/// The stamps of one CTA of an instrumented launch: per event of [`TRACE_EVENTS`], the global
/// timer (ns, comparable across SMs) and the SM's clock (cycles, finer; its own SM only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CtaStamps {
    pub ns: [u64; TRACE_EVENTS.len()],
    pub clk: [u64; TRACE_EVENTS.len()],
}

impl WgmmaTmaWs {
    /// What `launch` runs for `p`: the tuned config or the heuristic, then the env overrides.
    fn choice_for(&self, ctx: &Context, p: &GemmProblem, env: &Overrides) -> Choice {
        let p = &as_read(p);
        let tuned = crate::tune::cache::lookup(&ctx.info, self.name(), p);
        Choice::resolve(p, ctx.info.sm_count, tuned.as_ref(), env)
    }

    /// One instrumented launch of `p` (the config `launch` would run, unsplit: the stamps take
    /// the split-K workspace's place): the stamps of every CTA, in launch order. For
    /// `kiln profile --timeline`; never part of dispatch.
    pub fn timeline(
        &self,
        ctx: &Context,
        p: &GemmProblem,
        ops: &GemmOperands,
    ) -> Result<Vec<CtaStamps>> {
        let env = Overrides::from_env();
        let choice = self.choice_for(ctx, p, &env);
        if choice.tile.pingpong {
            return Err(Error::Unsupported {
                kernel: self.name().into(),
                reason: "the timeline stamps are in the cooperative kernel only; unset \
                         KILN_WGMMA_CFG=pingpong (or tune the problem to another config)"
                    .into(),
            });
        }
        // A persistent grid has at most one CTA per SM.
        let ctas = ctx.info.sm_count as usize;
        let n = TRACE_EVENTS.len();
        let buf = DeviceBuffer::new(ctas * 2 * n * 8)?;
        buf.fill_bytes(0, ctx)?;
        self.launch_choice(ctx, p, ops, choice, Some(buf.ptr()), &env)?;
        ctx.synchronize()?;
        let raw: Vec<u64> = buf.download(ctas * 2 * n)?;
        Ok(raw
            .chunks(2 * n)
            .map(|c| {
                let mut s = CtaStamps::default();
                s.ns.copy_from_slice(&c[..n]);
                s.clk.copy_from_slice(&c[n..]);
                s
            })
            .take_while(|s| s.ns[0] != 0)
            .collect())
    }

    /// The one launch path: `launch` (tuned config or heuristic, then env overrides) and
    /// `launch_with` (a config of the space) both end here with the resolved choice.
    /// `trace`: a buffer for the instrumented variant's stamps (the launch is then unsplit).
    /// `env`: the overrides, read once per launch (the choice came from the same ones).
    fn launch_choice(
        &self,
        ctx: &Context,
        p: &GemmProblem,
        ops: &GemmOperands,
        choice: Choice,
        trace: Option<u64>,
        env: &Overrides,
    ) -> Result<()> {
        let p = &p.canonical();
        let choice = match trace {
            Some(_) => Choice {
                splits: 1,
                tail: false,
                stream_k: false,
                ..choice
            },
            None => choice,
        };
        // Operands TMA cannot address are read from padded copies (`repack`), and `p` then
        // describes the copies' leading dimensions.
        let (a_ptr, b_ptr, p) = repack(ctx, p, ops.a.ptr(), ops.b.ptr())?;
        let p = &p;
        // The TMA-store epilogue where C allows it (`output_map`), unless KILN_WGMMA_EPI=0; else
        // the register epilogue (a variant of its own), and the C parameter is a copy of A's map
        // that is never used.
        // C through scratch is written by the register epilogue, whose rows are then aligned:
        // compute-sanitizer's initcheck does not see TMA's stores, and flagged the copy-back's
        // reads of them.
        let (c_ptr, pc, c_back) = c_target(ctx, p, ops.c.ptr())?;
        let tc = output_map(&pc, c_ptr).filter(|_| c_back.is_none());
        let epi = Epilogue::for_problem(&pc, tc.is_some(), env);
        let (cfg, splits) = launch_tile(&choice, epi.tma(), env.stages);
        if cfg.bn != choice.tile.bn && env.tile == Some(choice.tile) {
            warn_forced_fallback(choice.tile, cfg);
        }
        let split_code = needs_split_code(cfg, splits, choice.stream_k, env);
        let spec = Self::spec(
            &ctx.arch(),
            (p.layout, p.input, p.output),
            cfg,
            choice.group_m,
            epi,
            split_code,
        );
        let f = ctx.function(&match trace {
            Some(_) => spec.define("KILN_TRACE", 1u32),
            None => spec,
        })?;
        let slots = ctx.max_active_clusters(&f, cfg.cluster, THREADS, cfg.smem_bytes());
        let slots = env.grid.map_or(slots, |g| slots.min(g));
        let ctiles = cfg.cluster_tiles(p.m, p.n);
        let (sk_from, plan) = work_layout(cfg, &choice, splits, p, slots);
        // The plan splits at most what was asked for, so never without the split code.
        debug_assert!(split_code || (plan.splits <= 1 && sk_from.is_none()));
        let (ws, counters) = match sk_from {
            Some(from) => workspace(
                ctx,
                SplitPlan::stream_k_workspace_bytes(plan.grid, cfg.bn),
                (ctiles - from) as usize,
            )?,
            None if plan.splits > 1 => workspace(
                ctx,
                plan.workspace_bytes(cfg.bn),
                plan.split_block_tiles as usize,
            )?,
            None => (0, 0),
        };
        let (ta, tb) = operand_maps(p, a_ptr, b_ptr, cfg);
        for t in [&ta, &tb] {
            t.validate().map_err(|reason| Error::Unsupported {
                kernel: self.name().into(),
                reason,
            })?;
        }
        let mut map_a = ta.encode()?;
        let mut map_b = tb.encode()?;
        let mut extras = Extras {
            ws: trace.unwrap_or(ws),
            counters,
            splits: plan.splits as i32,
            split_from: sk_from.unwrap_or(plan.split_from) as i32,
            sk_w: sk_from.map_or(0, |from| (ctiles - from) * k_blocks(p.k)),
        };
        let mut map_c = match tc {
            Some(t) => t.encode()?,
            None => map_a,
        };
        let mut args = GemmArgs {
            a: a_ptr,
            b: b_ptr,
            c: c_ptr,
            ldc: pc.ldc as i64,
            ..GemmArgs::new(p, ops)
        };
        let lc = LaunchConfig {
            grid: (plan.grid, 1, 1),
            block: (THREADS, 1, 1),
            smem_bytes: cfg.smem_bytes(),
            cluster: (cfg.cluster > 1).then_some((cfg.cluster, 1, 1)),
        };
        // After a copy of ours (an operand read from scratch, or C's scratch filled for beta),
        // the kernel is launched as that copy's dependent: its CTAs are placed while the copy
        // runs, and wait for it in `grid_dependency_wait` before anything else.
        let after_copy =
            a_ptr != ops.a.ptr() || b_ptr != ops.b.ptr() || (c_back.is_some() && p.beta != 0.0);
        // SAFETY: the kernel takes (TmaMap, TmaMap, TmaMap, GemmArgs, Extras): three 128-byte
        // maps, the argument block and the extras (workspace sized for this problem's tiles and
        // splits above), in that order. The maps address A, B and C
        // (C's only when the flag is set), which the caller keeps alive and has checked against
        // the problem (or, `c_target`, C's scratch); the register epilogue reaches C through
        // `args`. The kernel executes `grid_dependency_wait` first, so it may be launched as a
        // dependent.
        unsafe {
            let launch = if after_copy && dependent_launch() {
                Function::launch_dependent
            } else {
                Function::launch
            };
            launch(
                &f,
                ctx.stream,
                &lc,
                &mut [
                    map_a.as_param(),
                    map_b.as_param(),
                    map_c.as_param(),
                    args.as_param(),
                    &mut extras as *mut Extras as *mut std::ffi::c_void,
                ],
            )
        }?;
        match c_back {
            // SAFETY: the scratch holds M rows of N elements at pitch pc.ldc, written by the
            // launch above on this stream; C spans M rows of N at pitch ldc (validated).
            Some(ldc) => unsafe {
                super::pack_rows::launch(
                    ctx,
                    p.output.size(),
                    c_ptr,
                    pc.ldc,
                    ops.c.ptr(),
                    ldc,
                    p.m,
                    p.n,
                )
            },
            None => Ok(()),
        }
    }
}

/// Says once per process that a tile forced by `KILN_WGMMA_CFG` ran as another: where C takes
/// only the register epilogue, a tile without one runs the next that has it ([`with_epilogue`]).
/// Unsaid, a timing or a sanitizer run forced to a tile is taken for that tile's (session 17's
/// `kiln sanitize` with n224 forced ran 128x256 on every problem).
fn warn_forced_fallback(forced: TileConfig, ran: TileConfig) {
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
fn launch_tile(choice: &Choice, tma_epi: bool, stages: Option<u32>) -> (TileConfig, u32) {
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
fn work_layout(
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

/// The specialisations [`WgmmaTmaWs`]'s `launch` compiles for `p` on a GPU of `sm_count` SMs
/// (`tuned` and `env` as for [`plan`]), without a GPU: the copies' kernels (operands TMA cannot
/// read, C through scratch), then the GEMM's variant. It takes the operands and C as aligned as
/// allocations are, and follows `launch_choice` step for step (a test holds it to [`plan`]).
pub fn launch_specs(
    arch: &str,
    p: &GemmProblem,
    sm_count: u32,
    tuned: Option<&Config>,
    env: &Overrides,
) -> Vec<KernelSpec> {
    let pc = p.canonical();
    let es = pc.input.size();
    let mut specs = Vec::new();
    if transposes_a(&pc) {
        specs.push(super::transpose_rows::spec(arch));
    } else if needs_pack(pc.lda, es, None) {
        specs.push(super::pack_rows::spec(arch, es));
    }
    if needs_pack(pc.ldb, es, None) {
        specs.push(super::pack_rows::spec(arch, es));
    }
    let c_addr = 1u64 << 20;
    let c_back = c_through_scratch(&pc, c_addr);
    if c_back {
        specs.push(super::pack_rows::spec(arch, pc.output.size()));
    }
    let read = as_read(&pc);
    let choice = Choice::resolve(&read, sm_count, tuned, env);
    let pcc = if c_back {
        GemmProblem {
            ldc: pack_shape(pc.m, pc.n, pc.output.size()).0,
            ..read
        }
    } else {
        read
    };
    let epi = Epilogue::for_problem(&pcc, !c_back && output_map(&pcc, c_addr).is_some(), env);
    let (cfg, splits) = launch_tile(&choice, epi.tma(), env.stages);
    let split_code = needs_split_code(cfg, splits, choice.stream_k, env);
    specs.push(WgmmaTmaWs::spec(
        arch,
        (read.layout, read.input, read.output),
        cfg,
        choice.group_m,
        epi,
        split_code,
    ));
    specs.dedup();
    specs
}

/// The tile configs `KILN_WGMMA_CFG` can force, by name: every config the dispatch or the tuning
/// space can run (for timing one against another on the same problem, and for
/// `kiln sanitize --configs`, which checks each).
pub const FORCED_CONFIGS: &[(&str, TileConfig)] = &[
    ("large", TileConfig::LARGE),
    ("medium", TileConfig::MEDIUM),
    ("pair", TileConfig::LARGE_PAIR),
    ("medium-pair", TileConfig::MEDIUM_PAIR),
    ("wide", TileConfig::WIDE),
    ("n168", TileConfig::N168),
    ("n224", TileConfig::N224),
    ("small", TileConfig::SMALL),
    ("tiny", TileConfig::TINY),
    ("tiny64", TileConfig::TINY64),
    ("pingpong", TileConfig::PINGPONG),
    ("pingpong64", TileConfig::PINGPONG64),
    ("pingpong-tiny", TileConfig::PINGPONG_TINY),
];

/// The config `name` forces ([`FORCED_CONFIGS`]); unknown leaves the choice to the tuned config
/// or the heuristic.
pub fn forced_config(name: &str) -> Option<TileConfig> {
    FORCED_CONFIGS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, t)| t)
}

/// Whether the TMA-store epilogue goes out chunk by chunk under the next unit's K blocks (the
/// kernel's `KILN_EPI_DEFER`); `KILN_WGMMA_DEFER=0` compiles the epilogue that stores the whole
/// tile before the next unit starts, for timing one against the other.
fn epi_defer() -> bool {
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

/// The ring `stages` asks for, made one the tile can run: 64-row tiles need an even ring of at
/// least 4 (the kernel's static_assert says why), so an odd request rounds down.
fn ring_for(tile: TileConfig, stages: u32) -> u32 {
    if tile.bm == 64 {
        (stages & !1).max(4)
    } else {
        stages
    }
}

/// The grouped order's tile-rows: GROUP_M, or `KILN_WGMMA_GROUP_M` (1..=64) to time another
/// (an override compiles variants outside `variants()`; for experiments only).
fn group_m() -> u32 {
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
fn dependent_launch() -> bool {
    std::env::var("KILN_WGMMA_PDL").map_or(true, |v| v.trim() != "0")
}

/// Whether the heuristic weighs the 224-wide tile by default (N a multiple of 224, two
/// tile-rows, rows on lines, a K-major B: [`TileConfig::choose`]). On since session 17 verified
/// both widths on an H100 and timed them (`scripts/gpu-widths.sh`, ledger #72): 128 x 224 is
/// 5-10 % faster there; 128 x 168 is forced only.
pub const WIDTHS_BY_DEFAULT: bool = true;

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn shared_memory_fits_an_h100_block() {
        assert_eq!(TileConfig::LARGE.stage_bytes(), 48 * 1024);
        assert_eq!(TileConfig::SMALL.stage_bytes(), 32 * 1024);
        for c in TileConfig::ALL {
            assert!(c.smem_bytes() <= 227 * 1024, "{c:?}: {}", c.smem_bytes());
            assert_eq!(c.stage_bytes() % 1024, 0);
        }
        assert_eq!(
            TileConfig::LARGE.smem_bytes(),
            1024 + 4 * 49152 + 32768 + 64 + 32
        );
        // 64-row tiles: consumer 0's staging only, the hand-off and its two barriers, an even
        // ring
        assert_eq!(
            TileConfig::TINY64.smem_bytes(),
            1024 + 12 * 16384 + 16384 + 16384 + 16 + 192 + 32
        );
    }

    #[test]
    fn rings_of_64_row_tiles_are_even_and_at_least_4() {
        for c in TileConfig::ALL.iter().filter(|c| c.bm == 64) {
            assert!(c.stages % 2 == 0 && c.stages >= 4, "{c:?}");
        }
        let t = TileConfig::TINY64;
        assert_eq!(
            (2..=12).map(|s| ring_for(t, s)).collect::<Vec<_>>(),
            [4, 4, 4, 4, 6, 6, 8, 8, 10, 10, 12]
        );
        assert_eq!(ring_for(TileConfig::SMALL, 3), 3);
    }

    #[test]
    fn grouped_order_visits_every_tile_once() {
        for (tm, tn) in [(1, 1), (3, 5), (8, 8), (9, 2), (17, 3), (64, 32)] {
            let mut seen = vec![false; (tm * tn) as usize];
            for t in 0..tm * tn {
                let (r, c) = tile_coords(t, tm, tn);
                assert!(r < tm && c < tn, "t={t} -> ({r},{c}) outside {tm}x{tn}");
                let i = (r * tn + c) as usize;
                assert!(!seen[i], "({r},{c}) twice");
                seen[i] = true;
            }
        }
        // within a group, consecutive tiles walk down the group's rows first
        assert_eq!(tile_coords(0, 16, 4), (0, 0));
        assert_eq!(tile_coords(1, 16, 4), (1, 0));
        assert_eq!(tile_coords(8, 16, 4), (0, 1));
        assert_eq!(tile_coords(32, 16, 4), (8, 0));
        // a short last group
        assert_eq!(tile_coords(8 * 4, 10, 4), (8, 0));
        assert_eq!(tile_coords(8 * 4 + 1, 10, 4), (9, 0));
        assert_eq!(tile_coords(8 * 4 + 2, 10, 4), (8, 1));
    }

    #[test]
    fn grid_is_persistent_and_tiles_cover_edges() {
        let c = TileConfig::LARGE;
        assert_eq!(c.tiles(8192, 8192), (64, 32));
        assert_eq!(c.grid(8192, 8192, 132), 132);
        assert_eq!(c.tiles(1, 1), (1, 1));
        assert_eq!(c.grid(1, 1, 132), 1);
        assert_eq!(c.tiles(129, 257), (2, 2));
        // pairs: cluster tiles stack two tile-rows; the grid is whole clusters
        let pair = TileConfig::LARGE_PAIR;
        assert_eq!(pair.cluster_tiles(8192, 8192), 32 * 32);
        assert_eq!(pair.grid(8192, 8192, 66), 132);
        assert_eq!(pair.cluster_tiles(129, 257), 2);
        assert_eq!(pair.grid(129, 257, 66), 4);
        assert_eq!(pair.grid(1, 1, 66), 2);
    }

    #[test]
    fn one_tile_row_takes_one_unsplit_wave_over_split_k() {
        let h = |m, n, k| Choice::heuristic(&bf16(m, n, k, Layout::RC), 132, true);
        for (m, n, k) in [
            (128, 5120, 5120),
            (96, 5120, 5120),
            (128, 8192, 8192),
            (128, 4608, 4096),
        ] {
            let c = h(m, n, k);
            assert_eq!(
                (c.tile, c.splits),
                (TileConfig::PINGPONG64, 1),
                "{m}x{n}x{k}"
            );
        }
        // very long K keeps split-K; two tile-rows, or more than a wave of 128 x 64 tiles, too
        for (m, n, k) in [(128, 8192, 28672), (256, 5120, 5120), (128, 14336, 4096)] {
            assert_ne!(h(m, n, k).tile, TileConfig::PINGPONG64, "{m}x{n}x{k}");
        }
        // issue 3's set: untouched (M = 128 there takes 64 x 64 tiles or two waves)
        for p in crate::harness::suite::target_problems(&Layout::ALL) {
            let pick = TileConfig::choose(p.m, p.n, p.k, 132, Pairing::of(&p, true), Widths::Off);
            assert_eq!(
                unsplit_one_wave(&p, pick.0, pick.1, 132),
                pick,
                "{}x{}x{}",
                p.m,
                p.n,
                p.k
            );
        }
    }

    #[test]
    fn pingpong_where_it_measured_faster() {
        let h = |m, n, k| Choice::heuristic(&bf16(m, n, k, Layout::RC), 132, true).tile;
        for (m, n, k) in [(2048, 2048, 2048), (2048, 2048, 1024), (1024, 4096, 1024)] {
            assert_eq!(h(m, n, k), TileConfig::PINGPONG, "{m}x{n}x{k}");
        }
        // long K or several waves of 128 x 256 tiles: cooperative
        for (m, n, k) in [(2048, 2048, 4096), (4096, 4096, 1024), (4096, 4096, 4096)] {
            assert!(!h(m, n, k).pingpong, "{m}x{n}x{k}");
        }
        // one wave of 128 x 128 or 128 x 64 tiles: one consumer per tile instead of two
        for (m, n, k) in [(512, 4096, 4096), (512, 4096, 14336), (128, 14336, 4096)] {
            assert_eq!(h(m, n, k), TileConfig::PINGPONG, "{m}x{n}x{k}");
        }
        for (m, n, k) in [(1024, 1024, 1024), (256, 4096, 4096), (512, 2048, 4096)] {
            assert_eq!(h(m, n, k), TileConfig::PINGPONG64, "{m}x{n}x{k}");
        }
        for (m, n, k) in [(512, 512, 512), (128, 4096, 4096), (128, 4096, 14336)] {
            assert_eq!(h(m, n, k), TileConfig::PINGPONG_TINY, "{m}x{n}x{k}");
        }
        // M between 64 and 104: one 128-row tile with A's box trimmed to M, not two 64-row
        // tiles, the second mostly zero fill; with less fill, or too few 128-row tiles to fill
        // half the SMs, the 64-row tiles stay
        for (m, n, k) in [(72, 4096, 4096), (100, 4096, 4096), (96, 4096, 14336)] {
            assert_eq!(h(m, n, k), TileConfig::PINGPONG64, "{m}x{n}x{k}");
        }
        for (m, n, k) in [(110, 4096, 4096), (120, 4096, 4096), (96, 2048, 4096)] {
            assert_eq!(h(m, n, k), TileConfig::PINGPONG_TINY, "{m}x{n}x{k}");
        }
        // rows off 128-byte lines: cooperative; f32 C and beta != 0 take ping-pong as 16-bit C does
        let large = TileConfig::LARGE;
        let mut odd = bf16(2048, 2048, 2048, Layout::RC);
        odd.lda = 2056;
        assert_eq!(pingpong_for(&odd, large, 132), None);
        assert_eq!(pingpong_for(&odd, TileConfig::SMALL, 132), None);
        let mut f32c = bf16(2048, 2048, 2048, Layout::RC);
        f32c.output = DType::F32;
        assert_eq!(pingpong_for(&f32c, large, 132), Some(TileConfig::PINGPONG));
        let mut beta = bf16(2048, 2048, 2048, Layout::RC);
        beta.beta = 1.0;
        assert_eq!(pingpong_for(&beta, large, 132), Some(TileConfig::PINGPONG));
        // split tiles stay cooperative (the ping-pong kernel does not split K)
        for m in [128, 256, 512, 1024, 2048] {
            for k in [1024, 4096, 14336] {
                let c = Choice::heuristic(&bf16(m, 4096, k, Layout::RC), 132, true);
                assert!(!c.tile.pingpong || c.splits == 1, "{m}x4096x{k}");
            }
        }
        // the ping-pong tile is never split
        let c = Choice::heuristic(&bf16(2048, 2048, 2048, Layout::RC), 132, true);
        assert_eq!((c.splits, c.tail, c.stream_k), (1, false, false));
    }

    #[test]
    fn small_tiles_only_when_they_cut_waves() {
        let c = |m, n, k, pairs: bool| {
            let pairing = match pairs {
                true => Pairing::SeveralWaves,
                false => Pairing::Never,
            };
            TileConfig::choose(m, n, k, 132, pairing, Widths::Off)
        };
        assert_eq!(c(8192, 8192, 8192, false), (TileConfig::LARGE, 1));
        assert_eq!(c(4096, 4096, 4096, false), (TileConfig::LARGE, 1));
        assert_eq!(c(4096, 4096, 4096, true), (TileConfig::LARGE_PAIR, 1));
        // one wave: pairs only for rows at 16-byte alignment
        assert_eq!(c(2048, 2048, 2048, true), (TileConfig::LARGE, 1));
        let one_wave = TileConfig::choose(2048, 2048, 2048, 132, Pairing::Always, Widths::Off);
        assert_eq!(one_wave, (TileConfig::LARGE_PAIR, 1));
        assert_eq!(c(1024, 1024, 1024, true), (TileConfig::TINY, 1));
        // one tile-row: nothing to pair
        assert_eq!(c(128, 65536, 4096, true), (TileConfig::LARGE, 1));
        // one wave of 64 x 64 tiles: that tile, unsplit (its consumers share the K blocks)
        for (m, n, k) in [
            (128, 128, 128),
            (512, 512, 512),
            (128, 4096, 4096),
            (128, 4096, 14336),
        ] {
            assert_eq!(c(m, n, k, true), (TileConfig::TINY64, 1), "{m}x{n}x{k}");
        }
        // more than a wave of them: the 128-row tiles
        assert_eq!(c(256, 4096, 4096, true).0.bm, 128);
        assert_eq!(c(128, 14336, 4096, true).1, 1);
        // few 128-row tiles, long K: split K across the idle SMs
        assert_eq!(TileConfig::TINY.best_splits(128, 4096, 4096, 132), 2);
        assert_eq!(TileConfig::SMALL.best_splits(128, 4096, 14336, 132), 4);
        assert_eq!(TileConfig::TINY64.best_splits(128, 4096, 14336, 132), 1);
        let all = TileConfig::SMALL.split_plan(128, 4096, 4, false, 132);
        assert_eq!((all.splits, all.split_from, all.grid), (4, 0, 128));
        assert_eq!(all.workspace_bytes(128), 32 * 4 * 128 * 128 * 4);
        // the last wave only: 1002 pair tiles on 66 clusters leave 12 for a 16th wave, whose
        // 5 slices each fill 60 of its 66 slots
        let tail = TileConfig::LARGE_PAIR.split_plan(512, 128256, 5, true, 66);
        assert_eq!(
            (
                tail.splits,
                tail.split_from,
                tail.split_block_tiles,
                tail.grid
            ),
            (5, 990, 24, 132)
        );
        // whole waves: nothing to split
        let whole = TileConfig::LARGE.split_plan(4096, 8448, 4, true, 132);
        assert_eq!((whole.splits, whole.workspace_bytes(256)), (1, 0));
        // never more slices than K blocks
        assert_eq!(TileConfig::SMALL.best_splits(128, 128, 64, 132), 1);
    }

    #[test]
    fn few_tiles_with_long_k_at_16_byte_rows_run_split_pairs() {
        let c = |m, n, k, l| {
            let c = Choice::heuristic(&bf16(m, n, k, l), 132, true);
            (c.tile, c.splits, c.tail)
        };
        let medium = |s| (TileConfig::MEDIUM_PAIR, s, false);
        let large = |s| (TileConfig::LARGE_PAIR, s, false);
        // the best configs of ledger #78's sweeps, each within one wave of clusters
        assert_eq!(c(1000, 1000, 4008, Layout::RC), medium(2));
        assert_eq!(c(1000, 1000, 4000, Layout::CR), medium(2));
        assert_eq!(c(1000, 1000, 4000, Layout::CC), medium(2));
        assert_eq!(c(1000, 1000, 8000, Layout::CR), large(4));
        assert_eq!(c(1000, 2000, 4000, Layout::CR), large(2));
        assert_eq!(c(760, 1000, 4008, Layout::RC), medium(3));
        assert_eq!(c(1240, 1000, 4008, Layout::RC), medium(2));
        assert_eq!(c(1000, 1512, 6000, Layout::CR), medium(2));
        // one wave of clusters at most: 48 + 8 clusters of 128x192 over 66 slots
        assert_eq!(c(1000, 1240, 4000, Layout::CR), medium(2));
        // not with five tile-rows, a fifth of the columns wasted, K under 4000, rows 32-byte
        // aligned, more than a wave of 128x128 tiles, or pairs turned off
        for (m, n, k, l) in [
            (520, 1000, 4000, Layout::CR),
            (1400, 600, 4008, Layout::RC),
            (1000, 1000, 3000, Layout::RC),
            (1000, 1000, 4000, Layout::RC),
            (2000, 2000, 4008, Layout::RC),
        ] {
            let got = c(m, n, k, l);
            assert!(
                !(got.0.cluster == 2 && got.1 > 1),
                "{m}x{n}x{k} {l:?}: {got:?}"
            );
        }
        let p = bf16(1000, 1000, 4008, Layout::RC);
        assert_eq!(Choice::heuristic(&p, 132, false).tile.cluster, 1);
        // the cap: every split pair the rule picks fits in one wave of clusters
        for m in (600..=2000).step_by(40) {
            for k in [4008, 6008, 16008] {
                let p = bf16(m, 1000, k, Layout::RC);
                if let Some((t, s)) = few_tiles_long_k(&p, Pairing::of(&p, true), 132) {
                    assert!(t.cluster_tiles(m, 1000) * s <= 66, "{m}x1000x{k}");
                    assert!((2..=4).contains(&s));
                }
            }
        }
    }

    #[test]
    fn pairs_only_where_rows_straddle_lines() {
        let h = |m, n, k| Choice::heuristic(&bf16(m, n, k, Layout::RC), 132, true).tile;
        assert_eq!(h(4096, 4096, 4096), TileConfig::LARGE);
        assert_eq!(h(8192, 8192, 8192), TileConfig::LARGE);
        // K 4088: 8176-byte rows, 7 in 8 box rows straddle two lines
        assert_eq!(h(4096, 4096, 4088), TileConfig::LARGE_PAIR);
        assert!(!rows_on_lines(&bf16(4096, 4096, 4080, Layout::RC)));
        assert!(rows_on_lines(&bf16(4096, 4096, 4096, Layout::CR)));
        // one wave of tiles pairs too where rows are at 16-byte alignment: 2048x2048x1000
        // (2000-byte rows), not 2000^3 (4000-byte rows, 32-byte aligned)
        assert_eq!(h(2048, 2048, 1000), TileConfig::LARGE_PAIR);
        assert_eq!(h(2000, 2000, 2000), TileConfig::LARGE);
        let p = |k| bf16(4096, 4096, k, Layout::RC);
        assert_eq!(Pairing::of(&p(4096), true), Pairing::Never);
        assert_eq!(Pairing::of(&p(4080), true), Pairing::SeveralWaves);
        assert_eq!(Pairing::of(&p(4088), true), Pairing::Always);
        assert_eq!(Pairing::of(&p(4088), false), Pairing::Never);
        // and one wave of 128 x 64 tiles becomes one of 128 x 128 ping-pong tiles
        for (m, n, k) in [(1000, 1000, 1000), (1000, 1000, 4000)] {
            assert_eq!(h(m, n, k), TileConfig::PINGPONG, "{m}x{n}x{k}");
        }
        // a pair with a sparse last wave stays a pair and splits that wave (288 cluster tiles
        // on 66 clusters: 24 in a 5th wave, split in 2; 5000^3: 4 in a 7th, split in 5)
        for (m, n) in [(6000, 3000), (3000, 6000)] {
            let c = Choice::heuristic(&bf16(m, n, 3000, Layout::RC), 132, true);
            assert_eq!(
                (c.tile, c.splits, c.tail),
                (TileConfig::LARGE_PAIR, 2, true)
            );
        }
        let c = Choice::heuristic(&bf16(5000, 5000, 5000, Layout::RC), 132, true);
        assert_eq!(
            (c.tile, c.splits, c.tail),
            (TileConfig::LARGE_PAIR, 5, true)
        );
        // issue 3's set: its shapes off lines (4000^3, 4096x4096x4088) stay unsplit 128x256
        // pairs in every layout, as before session 15's rules
        for p in crate::harness::suite::target_problems(&Layout::ALL) {
            if !rows_on_lines(&p) {
                let c = Choice::heuristic(&p, 132, true);
                let got = (c.tile, c.splits, c.tail);
                assert_eq!(
                    got,
                    (TileConfig::LARGE_PAIR, 1, false),
                    "{}x{}x{}",
                    p.m,
                    p.n,
                    p.k
                );
            }
        }
        // the env's KILN_WGMMA_PAIRS=0 still wins
        let p = bf16(4096, 4096, 4088, Layout::RC);
        assert_eq!(Choice::heuristic(&p, 132, false).tile, TileConfig::LARGE);
        // the 192-wide tile pairs up too: 3000^3 (6000-byte rows), where 192 columns quantise
        // better than 256; on lines (3072^3) it stays single
        assert_eq!(h(3000, 3000, 3000), TileConfig::MEDIUM_PAIR);
        assert_eq!(h(3072, 3072, 3072), TileConfig::MEDIUM);
        let p = bf16(3000, 3000, 3000, Layout::RC);
        assert_eq!(Choice::heuristic(&p, 132, false).tile, TileConfig::MEDIUM);
        // a tuned pair falls back to its single tile under KILN_WGMMA_PAIRS=0
        let env = Overrides {
            pairs: false,
            ..Overrides::NONE
        };
        let tuned = Choice::heuristic(&p, 132, true).to_config();
        assert_eq!(
            Choice::resolve(&p, 132, Some(&tuned), &env).tile,
            TileConfig::MEDIUM
        );
    }

    #[test]
    fn a_sparse_last_wave_is_split() {
        let h = |m, n, k| Choice::heuristic(&bf16(m, n, k, Layout::RC), 132, true);
        // 2004 tiles: 24 in the 16th wave, split in 5 (measured best on an H200)
        let c = h(512, 128256, 4096);
        assert_eq!((c.tile, c.splits, c.tail), (TileConfig::LARGE, 5, true));
        // 8192 tiles: 8 in the 63rd wave
        assert!(h(16384, 16384, 16384).tail);
        // whole waves, a last wave over half full, a single wave: unchanged
        for (m, n, k) in [(4096, 8448, 4096), (4096, 4096, 4096), (2048, 2048, 2048)] {
            assert!(!h(m, n, k).tail, "{m}x{n}x{k}");
        }
        // every layout splits a sparse last wave
        assert!(Choice::heuristic(&bf16(512, 128256, 4096, Layout::CR), 132, true).tail);
        // too shallow to split
        assert_eq!(TileConfig::LARGE.tail_splits(512, 128256, 256, 132), None);
    }

    #[test]
    fn c_goes_through_scratch_only_when_its_rows_cost_vector_stores() {
        let big = bf16(1023, 1023, 1024, Layout::RC);
        assert!(c_through_scratch(&big, 0x1000));
        // an aligned C, or only N off 16 bytes (rows still aligned): in place
        assert!(!c_through_scratch(
            &bf16(1024, 1024, 1024, Layout::RC),
            0x1000
        ));
        assert!(!c_through_scratch(
            &GemmProblem { ldc: 1024, ..big },
            0x1000
        ));
        // a base off 16 bytes
        assert!(c_through_scratch(&GemmProblem { ldc: 1024, ..big }, 0x1002));
        // too small to repay the copy
        assert!(!c_through_scratch(&bf16(500, 500, 500, Layout::RC), 0x1000));
        // f32 C with an odd ldc
        let f = GemmProblem::new(1023, 1023, 64, Layout::RC, DType::Bf16, DType::F32);
        assert!(c_through_scratch(&f, 0x1000));
    }

    #[test]
    fn the_192_wide_tile_takes_what_256_wide_tiles_quantise_badly() {
        let h = |m, n, k| Choice::heuristic(&bf16(m, n, k, Layout::RC), 132, true);
        // 3072^3: 288 tiles of 128 x 256 (2.2 waves) against 384 of 128 x 192 (2.9 waves)
        assert_eq!(h(3072, 3072, 3072).tile, TileConfig::MEDIUM);
        assert_eq!(h(3072, 3072, 3072).splits, 1);
        // where 256 columns quantise well, or as well, the 256-wide tile stays
        for (m, n, k) in [(4096, 4096, 4096), (8192, 8192, 8192), (6144, 6144, 6144)] {
            assert_ne!(h(m, n, k).tile, TileConfig::MEDIUM, "{m}x{n}x{k}");
        }
        // issue 3's target set is untouched by it, and by the 320-wide tile
        for p in crate::harness::suite::target_problems(&Layout::ALL) {
            let c = Choice::heuristic(&p, 132, true);
            assert!(
                c.tile.bn != 192 && c.tile.bn != 320,
                "{}x{}x{}",
                p.m,
                p.n,
                p.k
            );
        }
    }

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

    #[test]
    fn the_224_wide_tile_where_it_makes_whole_waves() {
        let h = |m, n, k, l| Choice::heuristic(&bf16(m, n, k, l), 132, true);
        // On by default (`WIDTHS_BY_DEFAULT`) with a K-major B (RC, CC): 1024x3584 as 128
        // tiles of 128 x 224 (one wave; 128 x 256: 112, 20 SMs idle), 512x14336 as 256 (1.94
        // waves; 128 x 256: 224, 1.7), 2048x3584 as 256, 4096x3584 as 512 (3.9 waves). Not
        // with an MN-major B (CR, RR), whose whole 64-column boxes load 256 columns.
        for l in Layout::ALL {
            for (m, n, k) in [
                (1024, 3584, 18944),
                (512, 14336, 4096),
                (2048, 3584, 3584),
                (4096, 3584, 18944),
            ] {
                let t = h(m, n, k, l).tile;
                assert_eq!(t == TileConfig::N224, l.b_k_major(), "{m}x{n}x{k} {l}");
            }
        }
        // KILN_WGMMA_WIDTHS=0 leaves it out
        let off = Choice::heuristic_with(&bf16(1024, 3584, 18944, Layout::RC), 132, true, false);
        assert!(off.tile.bn.is_multiple_of(64), "{off:?}");
        // not where N is no multiple of 224 (1024x13824: measured 1 % slower), at one tile-row
        // (bound by B's bandwidth), where the multiples of 64 already make whole waves, nor off
        // lines (single CTAs only: it has no pair variant); and the 168-wide tile never (2-4x
        // slower with an MN-major B)
        for (m, n, k) in [
            (1024, 13824, 5120),
            (1, 28672, 8192),
            (128, 28672, 8192),
            (1024, 11008, 4096),
            (2048, 11008, 4096),
            (4096, 4096, 4096),
            (8192, 8192, 8192),
            (2048, 4096, 4096),
        ] {
            for l in Layout::ALL {
                assert!(h(m, n, k, l).tile.bn.is_multiple_of(64), "{m}x{n}x{k} {l}");
            }
        }
        let off_lines = GemmProblem {
            lda: 3592,
            ..bf16(1024, 3584, 18944, Layout::RC)
        };
        assert!(Choice::heuristic(&off_lines, 132, true)
            .tile
            .bn
            .is_multiple_of(64));
        // A C the TMA-store epilogue cannot take runs the next multiple of 64.
        assert_eq!(with_epilogue(TileConfig::N168, false), TileConfig::MEDIUM);
        assert_eq!(with_epilogue(TileConfig::N224, false), TileConfig::LARGE);
        assert_eq!(with_epilogue(TileConfig::N224, true), TileConfig::N224);
        // K-major B: one box of the tile's rows; MN-major: whole 64-column boxes (a 32-column
        // box in the 64B swizzle, whole atoms for 224, ran 3-21 % slower: ledger #73)
        assert_eq!(b_box_rows(TileConfig::N168), 168);
        assert_eq!(b_loads_per_cluster(false, 168, 1), 3);
        assert_eq!(b_loads_per_cluster(false, 224, 1), 4);
        assert_eq!(TileConfig::N168.stage_tx_bytes(true), (128 + 168) * 128);
        assert_eq!(TileConfig::N168.stage_tx_bytes(false), (128 + 192) * 128);
        assert_eq!(TileConfig::N224.stage_tx_bytes(false), (128 + 256) * 128);
        assert_eq!(
            TileConfig::N224.stage_bytes(),
            TileConfig::LARGE.stage_bytes()
        );
    }

    #[test]
    fn the_320_wide_tile_where_it_makes_whole_waves_on_lines() {
        let h = |m, n, k, l| Choice::heuristic(&bf16(m, n, k, l), 132, true);
        // 1024x5120: 128 tiles of 128 x 320, one wave (128 x 192: 1.6 waves)
        for l in Layout::ALL {
            assert_eq!(h(1024, 5120, 5120, l).tile, TileConfig::WIDE, "{l}");
        }
        // columns it would waste (3072 = 9.6 x 320), rows off lines (no pair variant), more
        // than one wave (4096x2560: 256 tiles)
        assert_eq!(h(3072, 3072, 3072, Layout::RC).tile, TileConfig::MEDIUM);
        assert_ne!(h(4096, 2560, 2560, Layout::RC).tile, TileConfig::WIDE);
        assert_ne!(h(1024, 10240, 4096, Layout::RC).tile, TileConfig::WIDE);
        assert_ne!(h(1024, 5120, 5000, Layout::RC).tile, TileConfig::WIDE);
        // where C takes the register epilogue (a C that TMA cannot address) the 128 x 192 tile
        // runs instead
        assert_eq!(with_epilogue(TileConfig::WIDE, false), TileConfig::MEDIUM);
        assert_eq!(with_epilogue(TileConfig::WIDE, true), TileConfig::WIDE);
        assert_eq!(b_box_rows(TileConfig::WIDE), 160);
    }

    #[test]
    fn the_epilogue_follows_beta_and_what_tma_can_address() {
        let env = Overrides::NONE;
        let with = |beta: f32, out: DType| GemmProblem {
            beta,
            ..GemmProblem::new(2048, 2048, 2048, Layout::RC, DType::Bf16, out)
        };
        for out in DType::OUTPUTS {
            assert_eq!(
                Epilogue::for_problem(&with(0.0, out), true, &env),
                Epilogue::TmaStore
            );
            assert_eq!(
                Epilogue::for_problem(&with(1.0, out), true, &env),
                Epilogue::TmaStore
            );
            for beta in [0.5, -1.0, 2.0] {
                assert_eq!(
                    Epilogue::for_problem(&with(beta, out), true, &env),
                    Epilogue::TmaLoadC
                );
            }
            for beta in [0.0, 1.0, 0.5] {
                assert_eq!(
                    Epilogue::for_problem(&with(beta, out), false, &env),
                    Epilogue::Registers
                );
            }
        }
        // KILN_WGMMA_CLOAD=1 loads C at beta = 1 too; never at beta = 0 (C may be garbage)
        let c_load = Overrides {
            c_load: true,
            ..env
        };
        assert_eq!(
            Epilogue::for_problem(&with(1.0, DType::Bf16), true, &c_load),
            Epilogue::TmaLoadC
        );
        assert_eq!(
            Epilogue::for_problem(&with(0.0, DType::Bf16), true, &c_load),
            Epilogue::TmaStore
        );
        let regs = Overrides { epi: false, ..env };
        assert_eq!(
            Epilogue::for_problem(&with(0.5, DType::F32), true, &regs),
            Epilogue::Registers
        );
        // every beta takes a TMA map; N off 16 bytes does not
        assert!(output_map(&with(0.5, DType::F32), 1 << 20).is_some());
        let odd = GemmProblem::new(2048, 2046, 2048, Layout::RC, DType::Bf16, DType::F32);
        assert!(output_map(&odd, 1 << 20).is_none());
        // the kernels' defines
        let defs: Vec<u32> = Epilogue::ALL.iter().map(|e| e.define()).collect();
        assert_eq!(defs, [0, 1, 2]);
    }

    #[test]
    fn maps_follow_the_layout_and_fill_a_stage_exactly() {
        for cfg in TileConfig::ALL {
            for l in Layout::ALL {
                let p = GemmProblem::new(1000, 1500, 700, l, DType::Bf16, DType::F32);
                let p = GemmProblem {
                    lda: p.lda.next_multiple_of(8),
                    ldb: p.ldb.next_multiple_of(8),
                    ..p
                };
                let (ta, tb) = operand_maps(&p, 1 << 20, 2 << 20, cfg);
                ta.validate().unwrap();
                tb.validate().unwrap();
                // expect_tx in the kernel is the stage size: the loads must deliver exactly that
                // (each CTA of a cluster loads bn / cluster rows of B and multicasts them to all)
                let bytes = loads_per_stage(l.a_k_major(), cfg.bm) as u64 * ta.box_bytes()
                    + b_loads_per_cluster(l.b_k_major(), cfg.bn, cfg.cluster) as u64
                        * tb.box_bytes();
                assert_eq!(
                    bytes,
                    cfg.stage_tx_bytes(l.b_k_major()) as u64,
                    "{l} {cfg:?}"
                );
                assert!(cfg.stage_tx_bytes(l.b_k_major()) <= cfg.stage_bytes());
                if l.a_k_major() {
                    assert_eq!((ta.dims, ta.box_dims), ([700, 1000], [64, cfg.bm]));
                } else {
                    assert_eq!((ta.dims, ta.box_dims), ([1000, 700], [64, 64]));
                }
                if l.b_k_major() {
                    // (the 320-wide tile: two boxes of 160)
                    assert_eq!((tb.dims, tb.box_dims), ([700, 1500], [64, b_box_rows(cfg)]));
                } else {
                    assert_eq!((tb.dims, tb.box_dims), ([1500, 700], [64, 64]));
                }
                assert_eq!(ta.row_stride_bytes, p.lda as u64 * 2);
                assert_eq!(tb.row_stride_bytes, p.ldb as u64 * 2);
            }
        }
    }

    #[test]
    fn a_problem_shorter_than_the_tile_loads_only_its_rows_of_a() {
        assert_eq!(a_box_rows(1, 64), 8);
        assert_eq!(a_box_rows(8, 64), 8);
        assert_eq!(a_box_rows(9, 64), 16);
        assert_eq!(a_box_rows(63, 64), 64);
        assert_eq!(a_box_rows(64, 64), 64);
        assert_eq!(a_box_rows(100, 128), 104);
        assert_eq!(a_box_rows(4096, 128), 128);
        // The kernels expect this many bytes of A per stage (common/gemm_ws.cuh); only a K-major
        // A's box is trimmed: an MN-major one's rows are K.
        for l in Layout::ALL {
            for cfg in TileConfig::ALL {
                let p = bf16(40, 1504, 704, l);
                let (ta, _) = operand_maps(&p, 1 << 20, 2 << 20, cfg);
                ta.validate().unwrap();
                let want = if l.a_k_major() { [64, 40] } else { [64, 64] };
                assert_eq!(ta.box_dims, want, "{l} {cfg:?}");
            }
        }
    }

    #[test]
    fn a_column_major_a_with_few_rows_is_read_row_major() {
        for (l, read, ms) in [
            (Layout::CC, Layout::RC, &[8, 72][..]),
            (Layout::CR, Layout::RR, &[8, 40, 72, 127][..]),
        ] {
            for &m in ms {
                let q = as_read(&bf16(m, 4096, 1000, l));
                assert_eq!((q.layout, q.lda), (read, 1024), "{l} {m}");
                assert!(!transposes_a(&q));
            }
            // whole 64-row tiles, many rows, and a 1-row A that is already a row stay
            for m in [64, 128, 4096] {
                assert_eq!(as_read(&bf16(m, 4096, 1024, l)).layout, l, "{l} {m}");
            }
            let row = GemmProblem {
                lda: 1,
                ..bf16(1, 4096, 1024, l)
            };
            assert_eq!(as_read(&row).layout, read);
            assert_eq!(as_read(&row).lda, 1024);
        }
        assert!(!transposes_a(&bf16(8, 4096, 4096, Layout::RC)));
        // CC with more than 8 rows in the last tile: read in place, where the copy lost
        for m in [16, 32, 96, 127] {
            assert!(!transposes_a(&bf16(m, 4096, 4096, Layout::CC)), "{m}");
        }
    }

    #[test]
    fn repacks_unaligned_strides_up_to_a_size_and_refuses_other_gpus() {
        let h100 = DeviceInfo::h100_sxm();
        let ok = GemmProblem::new(64, 64, 64, Layout::RC, DType::Bf16, DType::Bf16);
        assert_eq!(WgmmaTmaWs.supports(&ok, &h100), Ok(()));
        // rows of 130 bytes: read from a copy with 192-byte rows (a multiple of 128)
        let odd = GemmProblem::new(64, 64, 65, Layout::RC, DType::Bf16, DType::Bf16);
        assert_eq!(WgmmaTmaWs.supports(&odd, &h100), Ok(()));
        let read = as_read(&odd);
        assert_eq!((read.lda, read.ldb), (128, 128));
        assert!(rows_on_lines(&read));
        // a column-major 1023 x 1023 A: 1024-element columns; B's rows are fine and stay
        let p = GemmProblem {
            ldb: 1024,
            ..bf16(1023, 512, 1023, Layout::CC)
        };
        assert_eq!((as_read(&p).lda, as_read(&p).ldb), (1024, 1024));
        // aligned problems are read in place
        for l in Layout::ALL {
            assert_eq!(
                as_read(&bf16(4096, 4096, 4096, l)),
                bf16(4096, 4096, 4096, l)
            );
        }
        // over the copy's size limit: refused, so the dispatcher falls to a rung without TMA
        let huge = bf16(50_000, 64, 50_001, Layout::RC);
        assert!(WgmmaTmaWs
            .supports(&huge, &h100)
            .unwrap_err()
            .contains("lda = 50001"));
        let a100 = DeviceInfo {
            compute_capability: (8, 0),
            ..h100.clone()
        };
        assert!(WgmmaTmaWs
            .supports(&ok, &a100)
            .unwrap_err()
            .contains("Hopper"));
    }

    fn bf16(m: usize, n: usize, k: usize, layout: Layout) -> GemmProblem {
        GemmProblem::new(m, n, k, layout, DType::Bf16, DType::Bf16)
    }

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

    /// The kernel's stream-K pieces of CTA g in the order it runs them (`sk_start`, `next_unit`,
    /// `unit_of`, `sk_piece`): (tile, kb0, kb1, slice, slices), tiles counted from the first
    /// stream-K tile.
    fn stream_k_pieces(g: u32, w: u32, grid: u32, kb: u32) -> Vec<(u32, u32, u32, u32, u32)> {
        let start = |g: u32| g * w / grid;
        let (s0, e) = (start(g), start(g + 1));
        let h = e % kb;
        let mut v = Vec::new();
        let mut i = 0;
        while s0 + i < e {
            let (pos, end) = if i < h {
                (e - h + i, e)
            } else {
                (s0 + i - h, e - h)
            };
            let (tr, tile0) = (pos / kb, pos / kb * kb);
            let (kb0, kb1) = (pos - tile0, kb.min(pos - tile0 + (end - pos)));
            let ns = if kb1 - kb0 < kb { 2 } else { 1 };
            v.push((tr, kb0, kb1, (kb0 != 0) as u32, ns));
            i += kb1 - kb0;
        }
        v
    }

    /// Every K block of the stream-K tiles is taken by exactly one CTA; a tile has one piece
    /// (whole) or two (a head, slice 0, and a tail, slice 1, of neighbouring CTAs); the partial
    /// slots the kernel derives (2g + 1 - 2 slice, plus the slice) are the writer's on both sides.
    #[test]
    fn stream_k_ranges_cover_each_k_block_once() {
        for (m, n, k, sms) in [
            (4096, 4096, 4096, 132),
            (8192, 8192, 8192, 132),
            (4000, 4000, 4000, 132),
            (2048, 14336, 4096, 132),
            (8192, 14336, 4096, 132),
            (16384, 16384, 16384, 132),
            (1000, 3000, 700, 7),
            (640, 512, 64, 3),
        ] {
            let cfg = TileConfig::LARGE;
            let Some(from) = cfg.stream_k_from(m, n, k, sms) else {
                panic!("{m}x{n}x{k}: no stream-K");
            };
            let ctiles = cfg.cluster_tiles(m, n);
            assert_eq!((ctiles - from) % sms, ctiles % sms, "{m}x{n}x{k}");
            let kb = k_blocks(k);
            let w = (ctiles - from) * kb;
            let mut seen = vec![0u32; w as usize];
            // tile -> [(cta, slice, slot)]
            let mut by_tile = std::collections::BTreeMap::<u32, Vec<(u32, u32, u32)>>::new();
            for g in 0..sms {
                for (tr, kb0, kb1, sp, ns) in stream_k_pieces(g, w, sms, kb) {
                    for x in kb0..kb1 {
                        seen[(tr * kb + x) as usize] += 1;
                    }
                    if ns == 2 {
                        by_tile
                            .entry(tr)
                            .or_default()
                            .push((g, sp, 2 * g + 1 - 2 * sp + sp));
                    }
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "{m}x{n}x{k}");
            // in step along K: a CTA's first piece starts at k = 0 (its range's head), unless its
            // range ends on a tile boundary (no head): then it starts where the others are
            // after their heads, L K blocks behind (mod the tile's K)
            for g in 0..sms {
                let (first, e) = (stream_k_pieces(g, w, sms, kb)[0], (g + 1) * w / sms);
                let l = e - g * w / sms;
                let expect = if e % kb == 0 { (kb - l % kb) % kb } else { 0 };
                assert_eq!(first.1, expect, "{m}x{n}x{k} CTA {g}");
            }
            for (tr, v) in by_tile {
                assert_eq!(v.len(), 2, "{m}x{n}x{k} tile {tr}: {v:?}");
                let (head, tail) = (v[0], v[1]);
                assert_eq!((head.1, tail.1, tail.0), (0, 1, head.0 + 1), "tile {tr}");
                // each reads the other's slot as base + other slice
                assert_eq!(2 * head.0 + 1 + 1, tail.2);
                assert_eq!(2 * tail.0 + 1 - 2, head.2);
            }
        }
        // no stream-K: whole waves, one wave or less, pairs, 64-row tiles
        assert_eq!(TileConfig::LARGE.stream_k_from(4224, 4096, 4096, 132), None);
        assert_eq!(TileConfig::LARGE.stream_k_from(2048, 2048, 2048, 132), None);
        assert_eq!(
            TileConfig::LARGE_PAIR.stream_k_from(4096, 4096, 4096, 66),
            None
        );
        assert_eq!(
            TileConfig::TINY64.stream_k_from(4096, 4096, 4096, 132),
            None
        );
        assert_eq!(
            TileConfig::LARGE.stream_k_from(4096, 4096, 4096, 132),
            Some(512 - 116 - 132)
        );
    }

    #[test]
    fn the_space_is_what_the_kernel_takes() {
        let h100 = DeviceInfo::h100_sxm();
        let p = bf16(4096, 4096, 4096, Layout::RC);
        let space = WgmmaTmaWs.space(&p, &h100).unwrap();
        let all = space.enumerate();
        // (BM, BN, PAIRS) in (128, 320, 0), (128, 256, 0), (128, 256, 1), (128, 224, 0),
        // (128, 192, 0), (128, 192, 1), (128, 128, 0), (128, 64, 0); each unsplit, or split
        // 2..=8 over every tile or the last wave only; and (64, 64, 0) unsplit; the six single
        // 128-row tiles unsplit also with stream-K; and ping-pong 128x128, 128x64 and 64x64
        assert_eq!(all.len(), 8 * (1 + 7 * 2) + 1 + 6 + 3);
        for c in &all {
            let ch = Choice::from_config(c).unwrap();
            assert_eq!(ch.to_config(), *c);
            assert_eq!(Config::parse(&c.label()).unwrap(), *c);
            assert!(TileConfig::ALL.contains(&ch.tile));
            assert!(ch.splits > 1 || !ch.tail);
        }
        // CR: the same space (its 256-wide tiles split since the register epilogue became a
        // variant of its own, which left room for the split bookkeeping)
        let cr = WgmmaTmaWs
            .space(&bf16(4096, 4096, 4096, Layout::CR), &h100)
            .unwrap();
        assert_eq!(cr.enumerate().len(), all.len());
        // short K: no more slices than K blocks
        let short = bf16(4096, 4096, 128, Layout::RC);
        let few = WgmmaTmaWs.space(&short, &h100).unwrap().enumerate();
        assert_eq!(few.len(), 8 * (1 + 2) + 1 + 6 + 3);
        assert!(few.iter().all(|c| c.get("SPLITS").unwrap() <= 2));
        let bad = |pairs: &[(&str, i64)]| Choice::from_config(&Config::new(pairs)).unwrap_err();
        let e = bad(&[("BN", 128), ("PAIRS", 1), ("SPLITS", 1), ("GROUP_M", 8)]);
        assert!(e.contains("PAIRS=1"), "{e}");
        let e = bad(&[
            ("BN", 256),
            ("PAIRS", 1),
            ("SPLITS", 1),
            ("GROUP_M", 8),
            ("TAIL", 1),
        ]);
        assert!(e.contains("TAIL=1"), "{e}");
        for (bn, pairs, splits) in [(256, 1, 1), (128, 0, 2)] {
            let e = bad(&[
                ("BN", bn),
                ("PAIRS", pairs),
                ("SPLITS", splits),
                ("GROUP_M", 8),
                ("SK", 1),
            ]);
            assert!(e.contains("SK=1"), "{e}");
        }
        let e = bad(&[("BN", 96), ("PAIRS", 0), ("SPLITS", 1), ("GROUP_M", 8)]);
        assert!(e.contains("BN=96"), "{e}");
        let e = bad(&[("BN", 64), ("PAIRS", 0), ("SPLITS", 9), ("GROUP_M", 8)]);
        assert!(e.contains("SPLITS=9"), "{e}");
        let e = bad(&[("BN", 64), ("PAIRS", 0), ("SPLITS", 1), ("GROUP_M", 4)]);
        assert!(e.contains("GROUP_M=4"), "{e}");
        assert!(bad(&[("BN", 64), ("PAIRS", 0), ("SPLITS", 1)]).contains("GROUP_M"));
        for (bn, pairs, splits) in [(128, 0, 1), (64, 1, 1), (64, 0, 2)] {
            let e = bad(&[
                ("BM", 64),
                ("BN", bn),
                ("PAIRS", pairs),
                ("SPLITS", splits),
                ("GROUP_M", 8),
            ]);
            assert!(e.contains("BM=64"), "{e}");
        }
        assert!(bad(&[
            ("BM", 96),
            ("BN", 64),
            ("PAIRS", 0),
            ("SPLITS", 1),
            ("GROUP_M", 8)
        ])
        .contains("BM=96"));
        for (bn, splits, sk) in [(256, 1, 0), (128, 2, 0), (128, 1, 1), (64, 2, 0)] {
            let e = bad(&[
                ("BN", bn),
                ("PAIRS", 0),
                ("SPLITS", splits),
                ("GROUP_M", 8),
                ("SK", sk),
                ("PINGPONG", 1),
            ]);
            assert!(e.contains("PINGPONG=1"), "{e}");
        }
        let pp = Config::new(&[
            ("BN", 128),
            ("PAIRS", 0),
            ("SPLITS", 1),
            ("GROUP_M", 8),
            ("PINGPONG", 1),
        ]);
        assert_eq!(Choice::from_config(&pp).unwrap().tile, TileConfig::PINGPONG);
        // configs tuned before BM existed are 128-row tiles
        let old = Config::new(&[("BN", 64), ("PAIRS", 0), ("SPLITS", 1), ("GROUP_M", 8)]);
        assert_eq!(Choice::from_config(&old).unwrap().tile, TileConfig::TINY);
    }

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
                    let env = Overrides {
                        pairs,
                        ..Overrides::NONE
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
            Choice::resolve(&p, 132, Some(&junk), &Overrides::NONE),
            Choice::heuristic(&p, 132, true)
        );
    }

    #[test]
    fn a_tuned_config_wins_over_the_heuristic_and_env_overrides_win_over_both() {
        let p = bf16(4096, 4096, 4096, Layout::RC);
        let tuned = Config::new(&[("BN", 128), ("PAIRS", 0), ("SPLITS", 2), ("GROUP_M", 8)]);
        let c = Choice::resolve(&p, 132, Some(&tuned), &Overrides::NONE);
        assert_eq!(c, Choice::from_config(&tuned).unwrap());
        assert_eq!(c.tile, TileConfig::SMALL);
        // the class spans shallower K: the split factor is capped at the K blocks
        let shallow = bf16(4096, 4096, 64, Layout::RC);
        assert_eq!(
            Choice::resolve(&shallow, 132, Some(&tuned), &Overrides::NONE).splits,
            1
        );
        let env = Overrides {
            tile: Some(TileConfig::TINY),
            ..Overrides::NONE
        };
        let c = Choice::resolve(&p, 132, Some(&tuned), &env);
        assert_eq!(c.tile, TileConfig::TINY);
        assert_eq!(
            c.splits,
            TileConfig::TINY.best_splits(4096, 4096, 4096, 132)
        );
        let env = Overrides {
            splits: Some(4),
            group_m: Some(16),
            ..Overrides::NONE
        };
        let c = Choice::resolve(&p, 132, Some(&tuned), &env);
        assert_eq!((c.tile, c.splits, c.group_m), (TileConfig::SMALL, 4, 16));
        let pair = Config::new(&[("BN", 256), ("PAIRS", 1), ("SPLITS", 1), ("GROUP_M", 8)]);
        assert_eq!(
            Choice::resolve(&p, 132, Some(&pair), &Overrides::NONE).tile,
            TileConfig::LARGE_PAIR
        );
        let no_pairs = Overrides {
            pairs: false,
            ..Overrides::NONE
        };
        assert_eq!(
            Choice::resolve(&p, 132, Some(&pair), &no_pairs).tile,
            TileConfig::LARGE
        );
    }
}
