//! Host side of `kernels/gemm/wgmma_tma_ws.cu`: the warp-specialised persistent WGMMA + TMA
//! GEMM for sm_90a. Picks a tile shape (and whether CTAs pair up in clusters to share B tiles),
//! builds the two operand tensor maps for the problem, and launches one block of 384 threads per
//! SM (or per tile, when there are fewer tiles).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use cudarc::driver::{result, sys};

use super::{
    alignment, with_problem_defines, DType, GemmArgs, GemmKernel, GemmOperands, GemmProblem, Layout,
};
use crate::device::{Context, DeviceBuffer, DeviceInfo, Function, LaunchConfig, Tma2d, TmaSwizzle};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;

pub struct WgmmaTmaWs;

/// Block tile rows (two consumer warpgroups of 64) and the K depth of one stage.
pub const BM: u32 = 128;
pub const BK: u32 = 64;
/// Tile-rows swept together in the grouped tile order (the kernel's `KILN_GROUP_M`).
pub const GROUP_M: u32 = 8;
/// Threads per block: one producer and two consumer warpgroups.
pub const THREADS: u32 = 384;
/// The epilogue's staging buffers: 2 consumers x 2 buffers x a 64 x 64 chunk of 16-bit C
/// (the kernel's `C_BYTES`).
pub const C_STAGING_BYTES: u32 = 2 * 2 * 64 * 64 * 2;

/// One tile shape: BM x `bn` x BK with a ring of `stages` shared buffers, run by clusters of
/// `cluster` CTAs along M that share (multicast) each B tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileConfig {
    pub bn: u32,
    pub stages: u32,
    pub cluster: u32,
}

impl TileConfig {
    /// The default: 128 x 256 tiles, 4 stages of 48 KB.
    pub const LARGE: TileConfig = TileConfig {
        bn: 256,
        stages: 4,
        cluster: 1,
    };
    /// As LARGE, with pairs of CTAs along M loading half of the shared B tile each (multicast).
    pub const LARGE_PAIR: TileConfig = TileConfig {
        bn: 256,
        stages: 4,
        cluster: 2,
    };
    /// For problems too small to fill the GPU with 128 x 256 tiles: 6 stages of 32 KB.
    pub const SMALL: TileConfig = TileConfig {
        bn: 128,
        stages: 6,
        cluster: 1,
    };
    /// For latency-bound problems with few tiles (512^3 .. 1024^3): 128 x 64 tiles, twice the
    /// tiles of SMALL, 8 stages of 24 KB.
    pub const TINY: TileConfig = TileConfig {
        bn: 64,
        stages: 8,
        cluster: 1,
    };
    pub const ALL: [TileConfig; 4] = [
        TileConfig::LARGE,
        TileConfig::LARGE_PAIR,
        TileConfig::SMALL,
        TileConfig::TINY,
    ];

    /// Bytes of A and B one stage holds (and one stage's TMA loads deliver to each CTA).
    pub fn stage_bytes(self) -> u32 {
        (BM + self.bn) * BK * 2
    }

    /// Dynamic shared memory: 1 KB of slack to round the base up to the 1024-byte swizzle
    /// repeat, the stages, the TMA-store epilogue's C staging buffers (two 64 x 64 16-bit chunks
    /// per consumer; unused by f32 outputs, which keep the register epilogue), and a full and an
    /// empty mbarrier per stage.
    pub fn smem_bytes(self) -> u32 {
        1024 + self.stages * self.stage_bytes() + C_STAGING_BYTES + 2 * self.stages * 8
    }

    /// (tiles along M, tiles along N).
    pub fn tiles(self, m: usize, n: usize) -> (u32, u32) {
        (
            m.div_ceil(BM as usize) as u32,
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

    /// As `grid`, for `splits` K slices per tile (work units = cluster tiles x splits).
    pub fn grid_split(self, m: usize, n: usize, splits: u32, max_clusters: u32) -> u32 {
        (self.cluster_tiles(m, n) * splits.max(1))
            .min(max_clusters)
            .max(1)
            * self.cluster
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
        // Time of one block-step, in quarters of a 128 x 64 x 64 one at full tensor rate: the
        // width, with m64n64 wgmma charged 25 % extra (each 64 x 64 x 16 step reads 4 KB of
        // shared memory for 131 kFLOP, near the 128 B/clk an SM can feed).
        let step = if self.bn == 64 {
            5
        } else {
            self.bn as u64 / 16
        };
        units.div_ceil(sm_count.max(1) as u64) * per_unit * step
    }

    /// The split-K factor (1..=MAX_SPLITS, never more than the K blocks) with the lowest
    /// `cost`; ties keep fewer slices. Only single CTAs with tiles at most 128 wide split (the
    /// kernel ignores `splits` otherwise: at BN = 256 the split bookkeeping spilled in the CR
    /// variants).
    pub fn best_splits(self, m: usize, n: usize, k: usize, sm_count: u32) -> u32 {
        if self.cluster != 1 || self.bn > 128 {
            return 1;
        }
        let kb = k.div_ceil(BK as usize).max(1) as u32;
        (1..=MAX_SPLITS.min(kb))
            .min_by_key(|&s| (self.cost(m, n, k, sm_count, s), s))
            .unwrap_or(1)
    }

    /// (tile config, split-K factor). From the widest tile down (256, 128, 64), a narrower one
    /// (at its best split) replaces the current pick only where it takes clearly (10 %) less
    /// modelled time: wider tiles reuse each A tile more, so they win ties. Pairs of CTAs
    /// (multicast B) for the 256-wide tile when `pairs`, there are at least two tile-rows and
    /// more tiles than SMs.
    pub fn choose(m: usize, n: usize, k: usize, sm_count: u32, pairs: bool) -> (TileConfig, u32) {
        let mut pick = (TileConfig::LARGE, 1);
        let mut pick_cost = TileConfig::LARGE.cost(m, n, k, sm_count, 1);
        for cfg in [TileConfig::SMALL, TileConfig::TINY] {
            let s = cfg.best_splits(m, n, k, sm_count);
            let c = cfg.cost(m, n, k, sm_count, s);
            if c * 10 < pick_cost * 9 {
                pick = (cfg, s);
                pick_cost = c;
            }
        }
        // Pairs only with more than one wave of tiles: at 2048^3 (128 tiles, one wave) pairs ran
        // 591-597 TF in four runs, single CTAs 608 (H200).
        let (tm, tn) = TileConfig::LARGE.tiles(m, n);
        if pick.0 == TileConfig::LARGE && pairs && tm >= 2 && tm * tn > sm_count {
            pick = (TileConfig::LARGE_PAIR, 1);
        }
        pick
    }

    /// fp32 workspace bytes for `splits` partial tiles per block tile (0 when not split).
    pub fn workspace_bytes(self, m: usize, n: usize, splits: u32) -> usize {
        if splits <= 1 {
            return 0;
        }
        let (tm, tn) = self.tiles(m, n);
        tm as usize * tn as usize * splits as usize * (BM * self.bn) as usize * 4
    }
}

/// The most K slices a tile is split into.
pub const MAX_SPLITS: u32 = 8;

/// The kernel's `Extras` parameter: split-K workspace and counters, the split factor, and
/// whether C is stored through its tensor map.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct Extras {
    ws: u64,
    counters: u64,
    splits: i32,
    epi_tma: i32,
}

/// The split-K workspace (fp32 partial tiles) and per-tile arrival counters, kept across
/// launches and grown on demand. Counters start at 0 and the kernel returns each to 0 (the last
/// unit of a tile resets it), so they are zeroed once, at allocation. One per process: kiln
/// drives one device.
struct Workspace {
    ws: DeviceBuffer,
    counters: DeviceBuffer,
}

static WORKSPACE: Mutex<Option<Workspace>> = Mutex::new(None);

/// Device addresses of a workspace of at least `ws_bytes` and `counters` counters.
fn workspace(ctx: &Context, ws_bytes: usize, counters: usize) -> Result<(u64, u64)> {
    let mut guard = WORKSPACE
        .lock()
        .map_err(|_| Error::invalid("the split-K workspace lock is poisoned"))?;
    let fits = guard
        .as_ref()
        .is_some_and(|w| w.ws.bytes() >= ws_bytes && w.counters.bytes() >= counters * 4);
    if !fits {
        // Earlier launches may still use the old buffers.
        ctx.synchronize()?;
        let (old_ws, old_c) = guard
            .as_ref()
            .map_or((0, 0), |w| (w.ws.bytes(), w.counters.bytes()));
        let w = Workspace {
            ws: ctx.alloc(ws_bytes.max(old_ws))?,
            counters: ctx.alloc((counters * 4).max(old_c))?,
        };
        w.counters.fill_bytes(0, ctx)?;
        *guard = Some(w);
    }
    let w = guard.as_ref().expect("allocated above");
    Ok((w.ws.ptr(), w.counters.ptr()))
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
    super::tma_operands::operand_maps(p, a, b, BM, cfg.bn / cfg.cluster)
}

/// The tensor map the TMA-store epilogue writes C through: boxes of 64 x 64 elements
/// (128-byte rows, 128B swizzle, as the kernel stages them), global extents the true N x M, so
/// stores outside C are dropped. `None` when the epilogue must stay in registers: f32 output
/// (stmatrix moves 16-bit elements), beta != 0 (C is read), or a C that TMA cannot address
/// (unaligned base or a row stride that is not a multiple of 16 bytes).
pub fn output_map(p: &GemmProblem, c: u64) -> Option<Tma2d> {
    if p.output == DType::F32 {
        return None;
    }
    let dtype = p.output.tma();
    // beta != 0 reads C. A row whose byte length is not a multiple of 16 ends inside a 16-byte
    // granule, and TMA stores the whole granule (measured on H200: the ldc padding after N = 127
    // was overwritten), so N must be a multiple of 8 elements.
    if p.beta != 0.0 || !(p.n * p.output.size()).is_multiple_of(16) {
        return None;
    }
    let map = Tma2d {
        dtype,
        addr: c,
        dims: [p.n as u64, p.m as u64],
        row_stride_bytes: p.ldc as u64 * p.output.size() as u64,
        box_dims: [64, 64],
        swizzle: TmaSwizzle::B128,
    };
    map.validate().ok().map(|()| map)
}

/// TMA loads one CTA issues per stage for `rows` (M or N) of an operand: one box if K-major,
/// else one per 64 rows. For B in a cluster, `rows` is the CTA's part, bn / cluster. Mirrors
/// the producer's loop.
pub fn loads_per_stage(k_major: bool, rows: u32) -> u32 {
    if k_major {
        1
    } else {
        rows / 64
    }
}

impl WgmmaTmaWs {
    fn spec(
        arch: &str,
        layout: Layout,
        input: DType,
        output: DType,
        cfg: TileConfig,
    ) -> KernelSpec {
        with_problem_defines(
            KernelSpec::new("gemm/wgmma_tma_ws.cu", "gemm_wgmma_tma_ws", arch),
            layout,
            input,
            output,
        )
        .define("KILN_BN", cfg.bn)
        .define("KILN_STAGES", cfg.stages)
        .define("KILN_GROUP_M", group_m())
        .define("KILN_CLUSTER", cfg.cluster)
        .define("KILN_SMEM", cfg.smem_bytes())
    }
}

impl GemmKernel for WgmmaTmaWs {
    fn name(&self) -> &'static str {
        "wgmma_tma_ws"
    }
    fn summary(&self) -> &'static str {
        "persistent warp-specialised WGMMA + TMA: 1 producer and 2 consumer warpgroups, \
         128x256x64 tiles in CTA pairs multicasting B (128x128 / 128x64 and split-K for small \
         grids), 4-8 stage mbarrier ring, 128B swizzle, stmatrix + TMA-store epilogue"
    }
    fn rung(&self) -> u32 {
        10
    }
    fn supports(&self, p: &GemmProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        if !dev.is_hopper() {
            return Err(format!(
                "needs a Hopper GPU (sm_90a: wgmma, TMA); {} is sm_{}{}",
                dev.name, dev.compute_capability.0, dev.compute_capability.1
            ));
        }
        let es = p.input.size();
        for (name, ld) in [("lda", p.lda), ("ldb", p.ldb)] {
            if !(ld * es).is_multiple_of(16) {
                return Err(format!(
                    "{name} = {ld} is not a multiple of {} elements: TMA needs row strides that \
                     are multiples of 16 bytes",
                    16 / es
                ));
            }
            if (ld * es) as u64 >= 1 << 40 {
                return Err(format!(
                    "{name} = {ld} gives a row stride of 2^40 bytes or more"
                ));
            }
        }
        let smem = TileConfig::ALL
            .iter()
            .map(|c| c.smem_bytes())
            .max()
            .unwrap_or(0);
        if smem > dev.smem_optin_bytes {
            return Err(format!(
                "needs {smem} B of shared memory per block; this GPU allows {}",
                dev.smem_optin_bytes
            ));
        }
        Ok(())
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        let mut v = Vec::new();
        for cfg in TileConfig::ALL {
            for (l, i, o) in super::all_combinations() {
                v.push(Self::spec(arch, l, i, o, cfg));
            }
        }
        v
    }
    fn launch(&self, ctx: &Context, p: &GemmProblem, ops: &GemmOperands) -> Result<()> {
        for (name, ptr) in [("A", ops.a.ptr()), ("B", ops.b.ptr())] {
            if alignment(ptr) < 16 {
                return Err(Error::Unsupported {
                    kernel: self.name().into(),
                    reason: format!("{name} at {ptr:#x} is not 16-byte aligned, which TMA needs"),
                });
            }
        }
        let sms = ctx.info.sm_count;
        let (cfg, splits) = TileConfig::choose(p.m, p.n, p.k, sms, pairs_enabled());
        let (cfg, splits) = match config_override() {
            Some(c) => (c, c.best_splits(p.m, p.n, p.k, sms)),
            None => (cfg, splits),
        };
        let splits = splits_override().unwrap_or(splits).max(1);
        let splits = if cfg.cluster > 1 || cfg.bn > 128 {
            1
        } else {
            splits
        };
        let (ws, counters) = if splits > 1 {
            let (tm, tn) = cfg.tiles(p.m, p.n);
            workspace(
                ctx,
                cfg.workspace_bytes(p.m, p.n, splits),
                (tm * tn) as usize,
            )?
        } else {
            (0, 0)
        };
        let (ta, tb) = operand_maps(p, ops.a.ptr(), ops.b.ptr(), cfg);
        for t in [&ta, &tb] {
            t.validate().map_err(|reason| Error::Unsupported {
                kernel: self.name().into(),
                reason,
            })?;
        }
        let mut map_a = ta.encode()?;
        let mut map_b = tb.encode()?;
        // The TMA-store epilogue where C allows it (`output_map`), unless KILN_WGMMA_EPI=0; else
        // the register epilogue, and the C parameter is a copy of A's map that is never used.
        let tc = output_map(p, ops.c.ptr()).filter(|_| tma_epilogue_enabled());
        let mut extras = Extras {
            ws,
            counters,
            splits: splits as i32,
            epi_tma: tc.is_some() as i32,
        };
        let mut map_c = match tc {
            Some(t) => t.encode()?,
            None => map_a,
        };
        let f = ctx.function(&Self::spec(&ctx.arch(), p.layout, p.input, p.output, cfg))?;
        let mut args = GemmArgs::new(p, ops);
        let slots = max_clusters(&f, ctx, cfg);
        let lc = LaunchConfig {
            // split-K: one CTA per work unit (tile x slice) up to the resident slots
            grid: (cfg.grid_split(p.m, p.n, splits, slots), 1, 1),
            block: (THREADS, 1, 1),
            smem_bytes: cfg.smem_bytes(),
            cluster: (cfg.cluster > 1).then_some((cfg.cluster, 1, 1)),
        };
        // SAFETY: the kernel takes (TmaMap, TmaMap, TmaMap, GemmArgs, Extras): three 128-byte
        // maps, the argument block and the extras (workspace sized for this problem's tiles and
        // splits above), in that order. The maps address A, B and C
        // (C's only when the flag is set), which the caller keeps alive and has checked against
        // the problem; the register epilogue reaches C through `args`.
        unsafe {
            f.launch(
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
        }
    }
}

/// A config forced by `KILN_WGMMA_CFG` (`large`, `pair`, `small`, `tiny`), for timing one against
/// another on the same problem; unset or unknown leaves the choice to `TileConfig::choose`.
fn config_override() -> Option<TileConfig> {
    match std::env::var("KILN_WGMMA_CFG").ok()?.as_str() {
        "large" => Some(TileConfig::LARGE),
        "pair" => Some(TileConfig::LARGE_PAIR),
        "small" => Some(TileConfig::SMALL),
        "tiny" => Some(TileConfig::TINY),
        _ => None,
    }
}

/// A split-K factor forced by `KILN_WGMMA_SPLITS` (ignored by clusters), for timing.
fn splits_override() -> Option<u32> {
    std::env::var("KILN_WGMMA_SPLITS")
        .ok()?
        .parse()
        .ok()
        .map(|s: u32| s.clamp(1, MAX_SPLITS))
}

/// The grouped order's tile-rows: GROUP_M, or `KILN_WGMMA_GROUP_M` (1..=64) to time another
/// (an override compiles variants outside `variants()`; for experiments only).
fn group_m() -> u32 {
    std::env::var("KILN_WGMMA_GROUP_M")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|g: &u32| (1..=64).contains(g))
        .unwrap_or(GROUP_M)
}

/// Whether the TMA-store epilogue may be used. On by default; `KILN_WGMMA_EPI=0` keeps the
/// register epilogue, to time or rule out the store path.
fn tma_epilogue_enabled() -> bool {
    std::env::var("KILN_WGMMA_EPI").map_or(true, |v| v != "0")
}

/// Whether large problems run as CTA pairs sharing B through multicast. On by default;
/// `KILN_WGMMA_PAIRS=0` turns it off, to time or rule out the cluster path.
fn pairs_enabled() -> bool {
    std::env::var("KILN_WGMMA_PAIRS").map_or(true, |v| v != "0")
}

/// Clusters of `cfg` that can be resident at once: the SM count for single CTAs; for pairs, the
/// driver's occupancy answer (GPC boundaries can leave SMs unpaired), else SMs / 2. Cached per
/// loaded function.
fn max_clusters(f: &Function, ctx: &Context, cfg: TileConfig) -> u32 {
    let sms = ctx.info.sm_count;
    let fallback = (sms / cfg.cluster).max(1);
    if cfg.cluster == 1 {
        return sms.max(1);
    }
    static CACHE: OnceLock<Mutex<HashMap<usize, u32>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let key = f.raw as usize;
    if let Some(n) = cache.lock().ok().and_then(|c| c.get(&key).copied()) {
        return n;
    }
    // SAFETY: `f` is a loaded function of the current context; the config and its one
    // attribute live across the calls, which only read them.
    let n = unsafe {
        let _ = result::function::set_function_attribute(
            f.raw,
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            cfg.smem_bytes() as i32,
        );
        let mut attr: sys::CUlaunchAttribute = std::mem::zeroed();
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr.value.clusterDim.x = cfg.cluster;
        attr.value.clusterDim.y = 1;
        attr.value.clusterDim.z = 1;
        let lc = sys::CUlaunchConfig {
            gridDimX: fallback * cfg.cluster,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: THREADS,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: cfg.smem_bytes(),
            hStream: ctx.stream,
            attrs: &mut attr,
            numAttrs: 1,
        };
        let mut n: std::ffi::c_int = 0;
        match sys::cuOccupancyMaxActiveClusters(&mut n, f.raw, &lc).result() {
            Ok(()) if n > 0 => (n as u32).min(fallback),
            _ => fallback,
        }
    };
    if let Ok(mut c) = cache.lock() {
        c.insert(key, n);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

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
            1024 + 4 * 49152 + 32768 + 64
        );
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
    fn small_tiles_only_when_they_cut_waves() {
        let c = |m, n, k, pairs| TileConfig::choose(m, n, k, 132, pairs);
        assert_eq!(c(8192, 8192, 8192, false), (TileConfig::LARGE, 1));
        assert_eq!(c(4096, 4096, 4096, false), (TileConfig::LARGE, 1));
        assert_eq!(c(4096, 4096, 4096, true), (TileConfig::LARGE_PAIR, 1));
        assert_eq!(c(2048, 2048, 2048, true), (TileConfig::LARGE, 1));
        assert_eq!(c(128, 128, 128, true), (TileConfig::TINY, 1));
        assert_eq!(c(1024, 1024, 1024, true), (TileConfig::TINY, 1));
        // one tile-row: nothing to pair
        assert_eq!(c(128, 65536, 4096, true), (TileConfig::LARGE, 1));
        // few tiles, long K: split K across the idle SMs
        assert_eq!(c(128, 4096, 4096, true), (TileConfig::TINY, 2));
        assert_eq!(c(128, 4096, 14336, true), (TileConfig::SMALL, 4));
        assert_eq!(c(128, 14336, 4096, true).1, 1);
        assert_eq!(TileConfig::SMALL.grid_split(128, 4096, 4, 132), 128);
        // never more slices than K blocks
        assert_eq!(TileConfig::SMALL.best_splits(128, 128, 64, 132), 1);
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
                let b_part = cfg.bn / cfg.cluster;
                let bytes = loads_per_stage(l.a_k_major(), BM) as u64 * ta.box_bytes()
                    + cfg.cluster as u64
                        * loads_per_stage(l.b_k_major(), b_part) as u64
                        * tb.box_bytes();
                assert_eq!(bytes, cfg.stage_bytes() as u64, "{l} {cfg:?}");
                if l.a_k_major() {
                    assert_eq!((ta.dims, ta.box_dims), ([700, 1000], [64, 128]));
                } else {
                    assert_eq!((ta.dims, ta.box_dims), ([1000, 700], [64, 64]));
                }
                if l.b_k_major() {
                    assert_eq!(
                        (tb.dims, tb.box_dims),
                        ([700, 1500], [64, cfg.bn / cfg.cluster])
                    );
                } else {
                    assert_eq!((tb.dims, tb.box_dims), ([1500, 700], [64, 64]));
                }
                assert_eq!(ta.row_stride_bytes, p.lda as u64 * 2);
                assert_eq!(tb.row_stride_bytes, p.ldb as u64 * 2);
            }
        }
    }

    #[test]
    fn refuses_unaligned_strides_and_other_gpus() {
        let h100 = DeviceInfo::h100_sxm();
        let ok = GemmProblem::new(64, 64, 64, Layout::RC, DType::Bf16, DType::Bf16);
        assert_eq!(WgmmaTmaWs.supports(&ok, &h100), Ok(()));
        let odd = GemmProblem::new(64, 64, 65, Layout::RC, DType::Bf16, DType::Bf16);
        assert!(WgmmaTmaWs
            .supports(&odd, &h100)
            .unwrap_err()
            .contains("lda = 65"));
        let a100 = DeviceInfo {
            compute_capability: (8, 0),
            ..h100.clone()
        };
        assert!(WgmmaTmaWs
            .supports(&ok, &a100)
            .unwrap_err()
            .contains("Hopper"));
    }
}
