//! Host side of the warp-specialised persistent WGMMA + TMA GEMM for sm_90a, in two schedules:
//! cooperative (`kernels/gemm/wgmma_tma_ws.cu`, both consumers on one tile) and ping-pong
//! (`kernels/gemm/wgmma_tma_ws_pingpong.cu`, each consumer its own tile, in turns). Picks a tile
//! shape and schedule (and whether CTAs pair up in clusters to share B tiles), builds the two
//! operand tensor maps for the problem, and launches one block of 384 threads per SM (or per
//! tile, when there are fewer tiles).
//!
//! Tunable: the space is (BM, BN, PAIRS, SPLITS, GROUP_M, TAIL, SK, PINGPONG) over the compiled
//! tile configs ([`Choice`]); `launch` runs the context's tuned config for the problem's shape
//! class when there is one, else [`Choice::heuristic`] ([`TileConfig::choose`], then
//! [`pingpong_for`]), and the `KILN_WGMMA_*` env overrides win over both.
//!
//! One concern per file: the tile catalogue (`tiles`), the cost model and split layouts (`cost`),
//! the cost model's pick (`choose`) and the heuristic's rules (`heuristic`), the resolved choice
//! (`choice`), the tuning space (`space`), the env overrides (`overrides`), the copies made first
//! (`repack`) and where operands are read in place instead (`inplace`), the tensor maps
//! (`maps`), swap-AB (`swap`), the epilogues (`epilogue`), the device-file specs (`spec`), the launch worked out before it runs, which `kiln plan` shows (`plan`), its
//! execution (`launch`), the instrumented launch (`timeline`) and the launches `kiln sanitize
//! --configs` forces (`forced`).

mod choice;
mod choose;
mod cost;
mod epilogue;
mod forced;
mod heuristic;
mod inplace;
mod launch;
mod maps;
mod notes;
mod plan;
mod repack;
mod space;
mod spec;
mod swap;
mod tiles;
mod timeline;

pub use choice::Choice;
pub use choose::{rows_on_lines, Pairing, Widths};
pub use cost::{k_blocks, SplitPlan, MAX_SPLITS};
pub use epilogue::{
    c_store_map, cooperative_twin, output_map, with_cpa, with_epilogue, Epilogue, CPA_TILES,
};
pub use heuristic::{pingpong_for, WIDTHS_BY_DEFAULT};
pub use inplace::{in_place_pays, InPlace};
pub use maps::{
    a_box_rows, b_box_rows, b_loads_per_cluster, loads_per_stage, operand_maps, tile_coords,
};
pub use notes::Notes;
pub use plan::{launch_specs, plan};
pub use repack::{as_read, c_through_scratch, pack_bytes, transposes_a, MAX_PACK_BYTES};
pub use spec::{has_split_code, needs_split_code};
pub use swap::{swap_costs, swap_pays, swap_registered, swapped, Swap};
pub use tiles::{forced_config, TileConfig, C_STAGING_BYTES, FORCED_CONFIGS};
pub use timeline::TRACE_EVENTS;

use crate::overrides::{GemmOverrides, Overrides};
use plan::{warn_forced_fallback, Prepared, ReadA};
use repack::{c_target, needs_pack, pack_shape, packed_ld, repack, with_a_row_major};
use tiles::ring_for;

use super::small_k;
use super::{CtaStamps, ForcedSetup, GemmKernel, GemmOperands, GemmProblem, LaunchPlan};
use crate::device::{Context, DeviceInfo};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::space::{Config, ParamSpace};
use crate::ops::tuned::TunedTable;

pub struct WgmmaTmaWs;

/// Block tile rows of the 128-row configs (two consumer warpgroups of 64) and the K depth of
/// one stage. The 64-row configs ([`TileConfig::bm`] 64) split each tile's K blocks between the
/// two consumers instead.
pub const BM: u32 = 128;
pub const BK: u32 = 64;
/// Tile-rows swept together in the grouped tile order (the kernel's `KILN_GROUP_M`).
pub const GROUP_M: u32 = 8;
/// Threads per block: one producer and two consumer warpgroups.
pub const THREADS: u32 = 384;

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
        spec::variants(arch)
    }
    fn launch(&self, ctx: &Context, p: &GemmProblem, ops: &GemmOperands) -> Result<()> {
        let env = &ctx.overrides.gemm;
        if runs_small_k(p, ops.c.ptr(), env) {
            return small_k::launch(ctx, p, ops, env.small_k_vec);
        }
        self.launch_memoised(ctx, p, ops)
    }
    fn space(&self, p: &GemmProblem, _dev: &DeviceInfo) -> Option<ParamSpace> {
        Some(space::space(p))
    }
    fn baseline(&self, p: &GemmProblem, dev: &DeviceInfo) -> Option<Config> {
        Some(Choice::heuristic_with(p, dev.sm_count, true, GemmOverrides::NONE.widths).to_config())
    }
    fn spec_for(&self, arch: &str, p: &GemmProblem, cfg: &Config) -> Option<KernelSpec> {
        Choice::from_config(cfg).ok().map(|c| {
            // C's address is known only at launch: assume it aligned (as allocations are); no
            // context here, so the default overrides.
            let env = GemmOverrides::NONE;
            let epi = Epilogue::for_problem(p, output_map(p, 1 << 20).is_some(), &env);
            let tile = with_epilogue(c.tile, epi);
            let split_code = needs_split_code(tile, c.splits, c.stream_k, epi, &env);
            Self::spec(
                arch,
                (p.layout, p.input, p.output),
                tile,
                c.group_m,
                epi,
                split_code,
                env.defer,
                (false, false),
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
        self.launch_choice(ctx, p, ops, choice, None, &ctx.overrides.gemm)
    }
    fn plan(
        &self,
        p: &GemmProblem,
        dev: &DeviceInfo,
        tuned: &TunedTable,
        overrides: &Overrides,
    ) -> Option<LaunchPlan> {
        let env = &overrides.gemm;
        // (C as aligned as allocations are)
        if runs_small_k(p, 1 << 20, env) {
            let why = match env.small_k {
                small_k::SmallK::Always => "KILN_WGMMA_SMALLK=1 runs every problem in the small-K \
                                            kernel"
                    .to_string(),
                _ => format!(
                    "K = {} is at most {} and TMA cannot store C (a row of N or ldc off 16 bytes): \
                     the small-K kernel, where C's write is the problem (KILN_WGMMA_SMALLK)",
                    p.k,
                    small_k::MAX_K
                ),
            };
            return Some(small_k::plan(p, dev.sm_count, env.small_k_vec, why));
        }
        // (looked up as `launch` looks it up: for the problem as the kernel reads it)
        let tuned = tuned.gemm(dev, self.name(), &as_read(p));
        Some(plan(p, dev.sm_count, tuned.as_ref(), env))
    }
    fn specs_for(&self, p: &GemmProblem, dev: &DeviceInfo, tuned: &TunedTable) -> Vec<KernelSpec> {
        if runs_small_k(p, 1 << 20, &GemmOverrides::NONE) {
            return vec![small_k::spec(&dev.arch())];
        }
        // (the tuned config looked up as `launch` looks it up)
        let tuned = tuned.gemm(dev, self.name(), &as_read(p));
        launch_specs(
            &dev.arch(),
            p,
            dev.sm_count,
            tuned.as_ref(),
            &crate::overrides::GemmOverrides::default(),
        )
    }
    fn forced_setups(&self) -> Vec<ForcedSetup> {
        forced::forced_setups()
    }
    fn trace_events(&self) -> &'static [&'static str] {
        &TRACE_EVENTS
    }
    fn timeline(
        &self,
        ctx: &Context,
        p: &GemmProblem,
        ops: &GemmOperands,
    ) -> Result<Vec<CtaStamps>> {
        self.trace_launch(ctx, p, ops)
    }
}

/// Whether the dispatch runs `p` (C at device address `c`) in the small-K kernel
/// ([`small_k::runs`]): by the rule only where no tile or split is forced.
fn runs_small_k(p: &GemmProblem, c: u64, env: &GemmOverrides) -> bool {
    let forced = env.tile.is_some() || env.splits.is_some();
    let mode = match env.small_k {
        small_k::SmallK::Auto if forced => small_k::SmallK::Never,
        m => m,
    };
    small_k::runs(p, output_map(p, c).is_some(), mode)
}

/// A bf16 problem in `layout`, for the tests of every module here.
#[cfg(test)]
fn bf16(m: usize, n: usize, k: usize, layout: super::Layout) -> GemmProblem {
    GemmProblem::new(m, n, k, layout, super::DType::Bf16, super::DType::Bf16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::{DType, Layout};

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
}
