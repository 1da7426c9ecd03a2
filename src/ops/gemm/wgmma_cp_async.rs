//! Host side of `kernels/gemm/wgmma_cp_async.cu`: the first WGMMA rung (sm_90a). One warpgroup
//! per 128 x 128 block tile (two m64n128k16 fp32 accumulators) reading its operands through
//! shared-memory descriptors from 128B-swizzled tiles that every thread fills with cp.async
//! (the swizzle computed by hand), through a 3-stage pipeline. One block per tile.

use super::tile_grid::TileGrid;
use super::{with_problem_defines, DType, GemmArgs, GemmKernel, GemmOperands, GemmProblem, Layout};
use crate::device::{Context, DeviceInfo, LaunchConfig};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::tuned::TunedTable;

pub struct WgmmaCpAsync;

/// Block tile (two m64 accumulators of one warpgroup) and the K depth of one stage.
pub const BM: u32 = 128;
pub const BN: u32 = 128;
pub const BK: u32 = 64;
/// Shared stages of the cp.async pipeline (STAGES - 1 K tiles in flight ahead of the one computed).
pub const STAGES: u32 = 3;
/// Tile rows per group in the block order (blocks sweep a group column by column).
pub const GROUP_M: u32 = 8;
/// Threads per block: one warpgroup.
pub const THREADS: u32 = 128;

/// Bytes of A and B one stage holds: 32 KB.
pub const fn stage_bytes() -> u32 {
    (BM + BN) * BK * 2
}

/// Dynamic shared memory: 1 KB of slack to round the base up to the 1024-byte swizzle repeat,
/// then the stages (97 KB: two blocks fit an SM).
pub const fn smem_bytes() -> u32 {
    1024 + STAGES * stage_bytes()
}

/// The output tiling and block order (one block per tile).
pub const GRID: TileGrid = TileGrid {
    bm: BM,
    bn: BN,
    group_m: GROUP_M,
};

fn spec(arch: &str, layout: Layout, input: DType, output: DType) -> KernelSpec {
    with_problem_defines(
        KernelSpec::new("gemm/wgmma_cp_async.cu", "gemm_wgmma_cp_async", arch),
        layout,
        input,
        output,
    )
    .define("KILN_STAGES", STAGES)
    .define("KILN_GROUP_M", GROUP_M)
    .define("KILN_SMEM", smem_bytes())
}

impl GemmKernel for WgmmaCpAsync {
    fn name(&self) -> &'static str {
        "wgmma_cp_async"
    }
    fn summary(&self) -> &'static str {
        "WGMMA m64n128k16 from smem descriptors, one warpgroup per 128x128 tile, operands by \
         cp.async into hand-swizzled 128B tiles, 3-stage pipeline"
    }
    fn rung(&self) -> u32 {
        3
    }
    fn supports(&self, p: &GemmProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        if !dev.is_hopper() {
            return Err(format!(
                "needs a Hopper GPU (sm_90a: wgmma); {} is sm_{}{}",
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
                    "{name} = {ld} puts rows {} bytes apart; 16-byte cp.async copies need a \
                     multiple of 16 (pad the leading dimension to a multiple of {} elements)",
                    ld * es,
                    16 / es
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
        super::require_aligned_operands(self.name(), ops, "cp.async copies 16 bytes")?;
        let blocks = GRID.launch_blocks(self.name(), p)?;
        let f = ctx.function(&spec(&ctx.arch(), p.layout, p.input, p.output))?;
        let mut args = GemmArgs::new(p, ops);
        let cfg = LaunchConfig {
            smem_bytes: smem_bytes(),
            ..LaunchConfig::simple((blocks, 1, 1), THREADS)
        };
        // SAFETY: one parameter, a GemmArgs, whose buffers the caller keeps alive and checked;
        // both operand bases are 16-byte aligned (checked above) and supports() checked that the
        // row strides keep every row start 16-byte aligned.
        unsafe { f.launch(ctx.stream, &cfg, &mut [args.as_param()]) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(m: usize, n: usize, k: usize, layout: Layout) -> GemmProblem {
        GemmProblem::new(m, n, k, layout, DType::Bf16, DType::Bf16)
    }

    #[test]
    fn shared_memory_and_grid() {
        assert_eq!(stage_bytes(), 32 * 1024);
        assert_eq!(stage_bytes() % 1024, 0);
        assert_eq!(smem_bytes(), 1024 + 3 * 32 * 1024);
        // two blocks per SM on an H100 (228 KB per SM, 1 KB reserved per block)
        assert!(2 * (smem_bytes() + 1024) <= 228 * 1024);
        assert_eq!(
            GRID.blocks(&problem(4096, 4096, 4096, Layout::RC)),
            Some(32 * 32)
        );
    }

    #[test]
    fn supports_needs_hopper_16_bit_inputs_and_16_byte_rows() {
        let h100 = DeviceInfo::h100_sxm();
        for l in Layout::ALL {
            assert_eq!(
                WgmmaCpAsync.supports(&problem(4096, 4096, 4096, l), &h100),
                Ok(())
            );
            // any M, N, K once the leading dimensions keep rows 16-byte aligned
            let odd = problem(13, 7, 3, l);
            let odd = GemmProblem {
                lda: odd.lda.next_multiple_of(8),
                ldb: odd.ldb.next_multiple_of(8),
                ..odd
            };
            assert_eq!(WgmmaCpAsync.supports(&odd, &h100), Ok(()));
        }
        let e = WgmmaCpAsync
            .supports(&problem(64, 64, 12, Layout::RC), &h100)
            .unwrap_err();
        assert!(e.contains("lda = 12"), "{e}");
        let e = WgmmaCpAsync
            .supports(&problem(64, 100, 64, Layout::RR), &h100)
            .unwrap_err();
        assert!(e.contains("ldb = 100"), "{e}");
        let f32_in = GemmProblem {
            input: DType::F32,
            ..problem(64, 64, 64, Layout::RC)
        };
        assert!(WgmmaCpAsync.supports(&f32_in, &h100).is_err());
        let a100 = DeviceInfo {
            compute_capability: (8, 0),
            ..h100.clone()
        };
        let e = WgmmaCpAsync
            .supports(&problem(64, 64, 64, Layout::RC), &a100)
            .unwrap_err();
        assert!(e.contains("Hopper"), "{e}");
        let small_smem = DeviceInfo {
            smem_optin_bytes: 48 * 1024,
            ..h100.clone()
        };
        assert!(WgmmaCpAsync
            .supports(&problem(64, 64, 64, Layout::RC), &small_smem)
            .unwrap_err()
            .contains("shared memory"));
    }

    #[test]
    fn variants_cover_every_layout_and_dtype() {
        let v = WgmmaCpAsync.variants("sm_90a");
        assert_eq!(v.len(), 4 * 2 * 3);
        for s in &v {
            assert!(s
                .defines
                .contains(&("KILN_SMEM".into(), smem_bytes().to_string())));
        }
        let unique: std::collections::HashSet<_> = v.iter().map(|s| s.label()).collect();
        assert_eq!(unique.len(), v.len());
    }
}
