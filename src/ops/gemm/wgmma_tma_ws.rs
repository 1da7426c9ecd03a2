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
use crate::device::{Context, DeviceInfo, Function, LaunchConfig, Tma2d, TmaDType, TmaSwizzle};
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
    pub const ALL: [TileConfig; 3] = [TileConfig::LARGE, TileConfig::LARGE_PAIR, TileConfig::SMALL];

    /// Bytes of A and B one stage holds (and one stage's TMA loads deliver to each CTA).
    pub fn stage_bytes(self) -> u32 {
        (BM + self.bn) * BK * 2
    }

    /// Dynamic shared memory: 1 KB of slack to round the base up to the 1024-byte swizzle
    /// repeat, the stages, and a full and an empty mbarrier per stage.
    pub fn smem_bytes(self) -> u32 {
        1024 + self.stages * self.stage_bytes() + 2 * self.stages * 8
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

    /// Wave-quantised cost: full waves of tiles, each costing its width. Lower is better.
    fn cost(self, m: usize, n: usize, sm_count: u32) -> u64 {
        let (tm, tn) = self.tiles(m, n);
        let tiles = tm as u64 * tn as u64;
        tiles.div_ceil(sm_count.max(1) as u64) * self.bn as u64
    }

    /// The 128-wide tile only where it takes clearly fewer waves' worth of work: the 256-wide
    /// one reuses each A tile twice as much, so it wins ties. Pairs of CTAs (multicast B) when
    /// `pairs` and there are at least two tile-rows to pair.
    pub fn choose(m: usize, n: usize, sm_count: u32, pairs: bool) -> TileConfig {
        let (large, small) = (TileConfig::LARGE, TileConfig::SMALL);
        if small.cost(m, n, sm_count) * 10 < large.cost(m, n, sm_count) * 9 {
            small
        } else if pairs && large.tiles(m, n).0 >= 2 {
            TileConfig::LARGE_PAIR
        } else {
            large
        }
    }
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

/// The tensor maps of A and B for `p` at these addresses. The K-major operand (A row-major,
/// B column-major) loads one box {64 k, rows} (B: rows / cluster per CTA); the MN-major one
/// loads boxes {64 m|n, 64 k}, one per 64 elements of M or N. Global extents are the true
/// M, N, K: TMA zero-fills the rest.
pub fn operand_maps(p: &GemmProblem, a: u64, b: u64, cfg: TileConfig) -> (Tma2d, Tma2d) {
    let dtype = match p.input {
        DType::Bf16 => TmaDType::Bf16,
        DType::F16 => TmaDType::F16,
        DType::F32 => TmaDType::F32,
    };
    let es = p.input.size() as u64;
    let (m, n, k) = (p.m as u64, p.n as u64, p.k as u64);
    let map = |addr, dims, ld: usize, box_dims| Tma2d {
        dtype,
        addr,
        dims,
        row_stride_bytes: ld as u64 * es,
        box_dims,
        swizzle: TmaSwizzle::B128,
    };
    let ta = if p.layout.a_k_major() {
        map(a, [k, m], p.lda, [BK, BM])
    } else {
        map(a, [m, k], p.lda, [64, BK])
    };
    let tb = if p.layout.b_k_major() {
        map(b, [k, n], p.ldb, [BK, cfg.bn / cfg.cluster])
    } else {
        map(b, [n, k], p.ldb, [64, BK])
    };
    (ta, tb)
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
        .define("KILN_GROUP_M", GROUP_M)
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
         128x256x64 tiles in CTA pairs multicasting B (128x128 for small grids), 4-6 stage \
         mbarrier ring, 128B swizzle"
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
        let cfg = TileConfig::choose(p.m, p.n, sms, pairs_enabled());
        let (ta, tb) = operand_maps(p, ops.a.ptr(), ops.b.ptr(), cfg);
        for t in [&ta, &tb] {
            t.validate().map_err(|reason| Error::Unsupported {
                kernel: self.name().into(),
                reason,
            })?;
        }
        let mut map_a = ta.encode()?;
        let mut map_b = tb.encode()?;
        let f = ctx.function(&Self::spec(&ctx.arch(), p.layout, p.input, p.output, cfg))?;
        let mut args = GemmArgs::new(p, ops);
        let slots = max_clusters(&f, ctx, cfg);
        let lc = LaunchConfig {
            grid: (cfg.grid(p.m, p.n, slots), 1, 1),
            block: (THREADS, 1, 1),
            smem_bytes: cfg.smem_bytes(),
            cluster: (cfg.cluster > 1).then_some((cfg.cluster, 1, 1)),
        };
        // SAFETY: the kernel takes (TmaMap, TmaMap, GemmArgs): two 128-byte maps and the
        // argument block, in that order. The maps address A and B, which the caller keeps alive
        // and has checked against the problem; C is reached through `args`.
        unsafe {
            f.launch(
                ctx.stream,
                &lc,
                &mut [map_a.as_param(), map_b.as_param(), args.as_param()],
            )
        }
    }
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
        assert_eq!(TileConfig::LARGE.smem_bytes(), 1024 + 4 * 49152 + 64);
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
        assert_eq!(
            TileConfig::choose(8192, 8192, 132, false),
            TileConfig::LARGE
        );
        assert_eq!(
            TileConfig::choose(4096, 4096, 132, false),
            TileConfig::LARGE
        );
        assert_eq!(
            TileConfig::choose(4096, 4096, 132, true),
            TileConfig::LARGE_PAIR
        );
        assert_eq!(TileConfig::choose(1024, 1024, 132, true), TileConfig::SMALL);
        assert_eq!(TileConfig::choose(128, 128, 132, true), TileConfig::SMALL);
        // one tile-row: nothing to pair
        assert_eq!(TileConfig::choose(128, 65536, 132, true), TileConfig::LARGE);
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
