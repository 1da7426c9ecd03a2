//! Host side of `kernels/gemm/wgmma_tma.cu`: WGMMA fed by TMA (sm_90a), not warp-specialised.
//! One warpgroup per 128 x 128 block tile (two m64n128k16 fp32 accumulators); its thread 0
//! issues the TMA loads (128B swizzle) of K tiles up to 4 stages ahead through full/empty
//! mbarriers, and all 128 threads compute. One block per tile. Builds the two operand tensor maps
//! for the problem at launch.

use super::tile_grid::TileGrid;
use super::{with_problem_defines, DType, GemmArgs, GemmKernel, GemmOperands, GemmProblem, Layout};
use crate::device::{Context, DeviceInfo, LaunchConfig, Tma2d};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::tuned::TunedTable;

pub struct WgmmaTma;

/// Block tile (two m64 accumulators of one warpgroup) and the K depth of one stage.
pub const BM: u32 = 128;
pub const BN: u32 = 128;
pub const BK: u32 = 64;
/// Shared stages in the TMA ring.
pub const STAGES: u32 = 4;
/// Tile rows per group in the block order (blocks sweep a group column by column).
pub const GROUP_M: u32 = 8;
/// Threads per block: one warpgroup.
pub const THREADS: u32 = 128;

/// Bytes of A and B one stage holds (and one stage's TMA loads deliver): 32 KB.
pub const fn stage_bytes() -> u32 {
    (BM + BN) * BK * 2
}

/// Dynamic shared memory: 1 KB of slack to round the base up to the 1024-byte swizzle repeat,
/// the stages, and a full and an empty mbarrier per stage.
pub const fn smem_bytes() -> u32 {
    1024 + STAGES * stage_bytes() + 2 * STAGES * 8
}

/// The output tiling and block order (one block per tile).
pub const GRID: TileGrid = TileGrid {
    bm: BM,
    bn: BN,
    group_m: GROUP_M,
};

/// The tensor maps of A and B for `p` at these addresses (one 128-row box per K-major stage).
pub fn operand_maps(p: &GemmProblem, a: u64, b: u64) -> (Tma2d, Tma2d) {
    super::tma_operands::operand_maps(p, a, b, BM, BN)
}

/// TMA loads thread 0 issues per stage for `rows` (M or N) of an operand: one box if K-major,
/// else one per 64 rows. Mirrors the kernel's `issue_stage`.
pub fn loads_per_stage(k_major: bool, rows: u32) -> u32 {
    if k_major {
        1
    } else {
        rows / 64
    }
}

fn spec(arch: &str, layout: Layout, input: DType, output: DType) -> KernelSpec {
    with_problem_defines(
        KernelSpec::new("gemm/wgmma_tma.cu", "gemm_wgmma_tma", arch),
        layout,
        input,
        output,
    )
    .define("KILN_STAGES", STAGES)
    .define("KILN_GROUP_M", GROUP_M)
    .define("KILN_SMEM", smem_bytes())
}

impl GemmKernel for WgmmaTma {
    fn name(&self) -> &'static str {
        "wgmma_tma"
    }
    fn summary(&self) -> &'static str {
        "WGMMA m64n128k16 fed by TMA (128B swizzle): one warpgroup per 128x128 tile, thread 0 \
         loads 4 stages ahead through full/empty mbarriers, not warp-specialised"
    }
    fn rung(&self) -> u32 {
        4
    }
    fn supports(&self, p: &GemmProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        if !dev.is_hopper() {
            return Err(format!(
                "needs a Hopper GPU (sm_90a: wgmma, TMA); {} is sm_{}{}",
                dev.name, dev.compute_capability.0, dev.compute_capability.1
            ));
        }
        if p.input == DType::F32 {
            return Err("inputs must be bf16 or f16".into());
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
        dev.check_smem(smem_bytes())?;
        GRID.check(p)
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        if !crate::jit::arch::has_wgmma(arch) {
            return Vec::new();
        }
        super::all_combinations()
            .into_iter()
            .map(|(l, i, o)| spec(arch, l, i, o))
            .collect()
    }
    fn specs_for(&self, p: &GemmProblem, dev: &DeviceInfo, _tuned: &TunedTable) -> Vec<KernelSpec> {
        vec![spec(&dev.arch(), p.layout, p.input, p.output)]
    }
    fn launch(&self, ctx: &Context, p: &GemmProblem, ops: &GemmOperands) -> Result<()> {
        super::require_aligned_operands(self.name(), ops, "TMA needs it")?;
        let blocks = GRID.launch_blocks(self.name(), p)?;
        let (ta, tb) = operand_maps(p, ops.a.ptr(), ops.b.ptr());
        for t in [&ta, &tb] {
            t.validate().map_err(|reason| Error::Unsupported {
                kernel: self.name().into(),
                reason,
            })?;
        }
        let promotion = ctx.overrides.tma.promotion;
        let mut map_a = ta.encode_with(promotion)?;
        let mut map_b = tb.encode_with(promotion)?;
        let f = ctx.function(&spec(&ctx.arch(), p.layout, p.input, p.output))?;
        let mut args = GemmArgs::new(p, ops);
        let cfg = LaunchConfig {
            smem_bytes: smem_bytes(),
            ..LaunchConfig::simple((blocks, 1, 1), THREADS)
        };
        // SAFETY: the kernel takes (TmaMap, TmaMap, GemmArgs): two 128-byte maps and the
        // argument block, in that order. The maps address A and B, which the caller keeps alive
        // and has checked against the problem; C is reached through `args`.
        unsafe {
            f.launch(
                ctx.stream,
                &cfg,
                &mut [map_a.as_param(), map_b.as_param(), args.as_param()],
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::TmaSwizzle;

    fn problem(m: usize, n: usize, k: usize, layout: Layout) -> GemmProblem {
        GemmProblem::new(m, n, k, layout, DType::Bf16, DType::Bf16)
    }

    #[test]
    fn shared_memory_and_grid() {
        assert_eq!(stage_bytes(), 32 * 1024);
        assert_eq!(stage_bytes() % 1024, 0);
        assert_eq!(smem_bytes(), 1024 + 4 * 32 * 1024 + 64);
        assert!(smem_bytes() <= 227 * 1024);
        assert_eq!(
            GRID.blocks(&problem(4096, 4096, 4096, Layout::RC)),
            Some(32 * 32)
        );
    }

    #[test]
    fn maps_follow_the_layout_and_fill_a_stage_exactly() {
        for l in Layout::ALL {
            let p = GemmProblem::new(1000, 1500, 700, l, DType::Bf16, DType::F32);
            let p = GemmProblem {
                lda: p.lda.next_multiple_of(8),
                ldb: p.ldb.next_multiple_of(8),
                ..p
            };
            let (ta, tb) = operand_maps(&p, 1 << 20, 2 << 20);
            ta.validate().unwrap();
            tb.validate().unwrap();
            // expect_tx in the kernel is the stage size: the loads must deliver exactly that
            let bytes = loads_per_stage(l.a_k_major(), BM) as u64 * ta.box_bytes()
                + loads_per_stage(l.b_k_major(), BN) as u64 * tb.box_bytes();
            assert_eq!(bytes, stage_bytes() as u64, "{l}");
            if l.a_k_major() {
                assert_eq!((ta.dims, ta.box_dims), ([700, 1000], [64, 128]));
            } else {
                assert_eq!((ta.dims, ta.box_dims), ([1000, 700], [64, 64]));
            }
            if l.b_k_major() {
                assert_eq!((tb.dims, tb.box_dims), ([700, 1500], [64, 128]));
            } else {
                assert_eq!((tb.dims, tb.box_dims), ([1500, 700], [64, 64]));
            }
            assert_eq!(ta.row_stride_bytes, p.lda as u64 * 2);
            assert_eq!(tb.row_stride_bytes, p.ldb as u64 * 2);
            assert_eq!(ta.swizzle, TmaSwizzle::B128);
        }
        // tiny problems: boxes larger than the tensor are fine (TMA zero-fills)
        let p = problem(1, 1, 8, Layout::RC);
        let (ta, tb) = operand_maps(&p, 1 << 20, 2 << 20);
        assert_eq!(ta.validate(), Ok(()));
        assert_eq!(tb.validate(), Ok(()));
    }

    #[test]
    fn supports_refuses_unaligned_strides_and_other_gpus() {
        let h100 = DeviceInfo::h100_sxm();
        for l in Layout::ALL {
            assert_eq!(WgmmaTma.supports(&problem(64, 64, 64, l), &h100), Ok(()));
        }
        let e = WgmmaTma
            .supports(&problem(64, 64, 65, Layout::RC), &h100)
            .unwrap_err();
        assert!(e.contains("lda = 65"), "{e}");
        let e = WgmmaTma
            .supports(&problem(64, 100, 64, Layout::CR), &h100)
            .unwrap_err();
        assert!(e.contains("ldb = 100"), "{e}");
        let a100 = DeviceInfo {
            compute_capability: (8, 0),
            ..h100.clone()
        };
        assert!(WgmmaTma
            .supports(&problem(64, 64, 64, Layout::RC), &a100)
            .unwrap_err()
            .contains("Hopper"));
        let small_smem = DeviceInfo {
            smem_optin_bytes: 100 * 1024,
            ..h100.clone()
        };
        assert!(WgmmaTma
            .supports(&problem(64, 64, 64, Layout::RC), &small_smem)
            .unwrap_err()
            .contains("shared memory"));
    }

    #[test]
    fn variants_cover_every_layout_and_dtype() {
        let v = WgmmaTma.variants("sm_90a");
        assert_eq!(v.len(), 4 * 2 * 3);
        for s in &v {
            assert!(s
                .defines
                .contains(&("KILN_SMEM".into(), smem_bytes().to_string())));
        }
    }
}
