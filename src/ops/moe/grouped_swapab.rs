//! Host side of `kernels/moe/grouped_swapab.cu`: the grouped GEMM with swapped operands for
//! experts of few rows. Yᵀ = W·Xᵀ per expert: weight rows fill wgmma's M = 64, the expert's
//! tokens are the instruction's N, sized per tile on the GPU (multiples of 16 up to the token
//! tile), so short experts compute no padding rows. Tiles are taken from a global counter
//! (dynamic persistent scheduling), which `moe_tile_prefix` zeroes before every launch.

use super::schedule::{order_for, table_bytes, TileOrder, INDEX_RING_BYTES, MAX_EXPERTS};
use super::tma3d::Tma3d;
use super::{
    common_support, tile_prefix, tma_dtype, with_dtypes, x_map, MoeArgs, MoeKernel, MoeOperands,
    MoeProblem, Rows,
};
use crate::device::{Context, DeviceInfo, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;
use crate::overrides::MoeOverrides;

pub struct GroupedSwapAb;

pub const ENTRY: &str = "moe_grouped_swapab";
pub const THREADS: u32 = 384;
/// Token rows per X box: a tile loads only the boxes its tokens need.
pub const XBOX: u32 = 32;
/// K depth of one stage.
const BK: u32 = 64;

/// A tile shape: 2·`wm` weight rows (output columns; each consumer warpgroup `wm`) by up to `tt`
/// tokens of one expert, with `stages` pipeline stages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwapConfig {
    pub wm: u32,
    pub tt: u32,
    pub stages: u32,
}

impl SwapConfig {
    /// 128 weight rows x up to 256 tokens: one tile per expert of up to 256 rows.
    pub const W128_T256: SwapConfig = SwapConfig {
        wm: 64,
        tt: 256,
        stages: 4,
    };
    /// 256 weight rows x up to 128 tokens: half the X re-reads per weight byte, more tiles per expert.
    pub const W256_T128: SwapConfig = SwapConfig {
        wm: 128,
        tt: 128,
        stages: 4,
    };
    /// 128 x 128: the most tiles, for balance.
    pub const W128_T128: SwapConfig = SwapConfig {
        wm: 64,
        tt: 128,
        stages: 6,
    };
    pub const ALL: [SwapConfig; 3] = [Self::W128_T256, Self::W256_T128, Self::W128_T128];

    /// Weight rows per tile.
    pub fn bw(self) -> u32 {
        2 * self.wm
    }

    pub fn stage_bytes(self) -> u32 {
        (self.bw() + self.tt) * BK * 2
    }

    /// Slack to align to 1024, the stages, 2 mbarriers per stage, the tile ring (4 mbarriers and
    /// 2 slots), and the expert tables for up to MAX_EXPERTS (plus the tile counter's int).
    pub fn smem_bytes(self) -> u32 {
        1024 + self.stages * self.stage_bytes()
            + 16 * self.stages
            + INDEX_RING_BYTES
            + table_bytes(MAX_EXPERTS) as u32
    }

    pub fn label(self) -> String {
        format!("swapAB {}x{}", self.bw(), self.tt)
    }

    /// `WxT` (weight rows x tokens) as one of the compiled shapes.
    pub fn parse(v: &str) -> Option<SwapConfig> {
        Self::ALL
            .into_iter()
            .find(|c| format!("{}x{}", c.bw(), c.tt) == v.trim())
    }

    /// Token tiles that can exist for any rows the GPU may hold (the grid never depends on the
    /// counts).
    pub fn max_tiles_m(self, p: &MoeProblem) -> u64 {
        let tt = self.tt as usize;
        match &p.rows {
            Rows::Contiguous { x_rows, .. } => (x_rows / tt + p.experts) as u64,
            Rows::Masked { max_rows, .. } => (p.experts * max_rows.div_ceil(tt)) as u64,
        }
    }

    /// Persistent grid: one CTA per SM, or per possible tile when there are fewer.
    pub fn grid(self, p: &MoeProblem, sms: u32) -> u32 {
        let tiles = self.max_tiles_m(p) * p.n.div_ceil(self.bw() as usize) as u64;
        tiles.min(sms as u64).max(1) as u32
    }
}

/// Whether the counter hands out tiles heaviest expert first (experts sorted by rows on the GPU,
/// each expert's n-tiles in a row): longest-processing-time-first against the tail of CTAs that
/// drew the longest tiles last (H200, 2026-11-22: the unsorted grouped order left SMs idle 26% of
/// the time at E=8, 40-248 rows, N=4096, K=7168). `KILN_MOE_LPT=0` keeps the grouped order.
pub fn heaviest_first(o: &MoeOverrides) -> bool {
    o.lpt
}

impl GroupedSwapAb {
    pub fn spec(arch: &str, input: DType, output: DType, cfg: SwapConfig) -> KernelSpec {
        with_dtypes(
            KernelSpec::new("moe/grouped_swapab.cu", ENTRY, arch),
            input,
            output,
        )
        .define("KILN_WM", cfg.wm)
        .define("KILN_TT", cfg.tt)
        .define("KILN_STAGES", cfg.stages)
        .define("KILN_MAX_EXPERTS", MAX_EXPERTS)
        .define("KILN_SMEM", cfg.smem_bytes())
    }

    /// The shape for `p`: `KILN_MOE_SWAP` (`128x256`, `256x128`, `128x128`) overrides, else 128
    /// weight rows by 256 tokens.
    pub fn config(_p: &MoeProblem, o: &MoeOverrides) -> SwapConfig {
        o.swap.unwrap_or(SwapConfig::W128_T256)
    }

    /// The W map: [E, N, K] in boxes of {64 k, bw rows, 1 expert}.
    pub fn w_map(p: &MoeProblem, addr: u64, cfg: SwapConfig) -> Tma3d {
        Tma3d::packed(
            tma_dtype(p.input),
            addr,
            p.k as u64,
            p.n as u64,
            p.experts as u64,
            BK,
            cfg.bw(),
        )
        .with_outer_stride(p.w_expert_stride)
    }
}

impl MoeKernel for GroupedSwapAb {
    fn name(&self) -> &'static str {
        "grouped_swapab"
    }
    fn summary(&self) -> &'static str {
        "grouped GEMM with swapped operands for few rows per expert: weight rows as wgmma M, an \
         expert's tokens as N sized per tile (multiples of 16), dynamic persistent scheduling"
    }
    fn supports(&self, p: &MoeProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        if p.layer.is_some() {
            return Err(
                "reads X's and writes Y's own rows; the MoE layer's row maps are grouped_gemm's"
                    .into(),
            );
        }
        if p.swiglu.is_some() {
            return Err("computes a plain grouped GEMM; the SwiGLU pair is swiglu_dual's".into());
        }
        common_support(p, dev)?;
        let smem = SwapConfig::ALL
            .iter()
            .map(|c| c.smem_bytes())
            .max()
            .unwrap_or(0);
        dev.check_smem(smem)?;
        Ok(())
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        if !crate::jit::arch::has_wgmma(arch) {
            return Vec::new();
        }
        let mut v = vec![tile_prefix::spec(arch)];
        for cfg in SwapConfig::ALL {
            for (i, o) in super::dtype_pairs() {
                v.push(Self::spec(arch, i, o, cfg));
            }
        }
        v
    }
    fn launch(&self, ctx: &Context, p: &MoeProblem, ops: &MoeOperands) -> Result<()> {
        let sms = ctx.info.sm_count;
        let cfg = Self::config(p, &ctx.overrides.moe);
        let unsupported = |reason: String| Error::Unsupported {
            kernel: "grouped_swapab".into(),
            reason,
        };
        let tx = x_map(p, ops.x.ptr(), XBOX);
        tx.validate().map_err(unsupported)?;
        let tw = Self::w_map(p, ops.w.ptr(), cfg);
        tw.validate().map_err(unsupported)?;
        let (mut map_x, mut map_w) = (tx.encode_with(ctx.overrides.tma.promotion)?, tw.encode()?);
        let f = ctx.function(&Self::spec(&ctx.arch(), p.input, p.output, cfg))?;
        let mut args = MoeArgs::new(p, ops, cfg.bw());
        let lpt = heaviest_first(&ctx.overrides.moe);
        // heaviest first: an expert's n-tiles one after another (group 1), experts by rows
        args.set_order(if lpt {
            TileOrder::Fixed(1)
        } else {
            order_for(p, cfg.tt, &ctx.overrides.moe)
        });
        tile_prefix::launch(ctx, p, ops, cfg.tt, lpt)?;
        let lc = LaunchConfig {
            grid: (cfg.grid(p, sms), 1, 1),
            block: (THREADS, 1, 1),
            smem_bytes: cfg.smem_bytes(),
            cluster: None,
        };
        // SAFETY: the kernel takes (TmaMap, TmaMap, MoeArgs) in this order. The maps address X and
        // W, the args Y and the schedule workspace (tables and the tile counter after them);
        // `check_operands` has matched every buffer to the problem and the caller keeps them alive
        // until the stream has run.
        unsafe {
            f.launch(
                ctx.stream,
                &lc,
                &mut [map_x.as_param(), map_w.as_param(), args.as_param()],
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shape_and_dtype_pair_is_a_variant_that_fits() {
        let v = GroupedSwapAb.variants("sm_90a");
        assert_eq!(v.len(), 1 + 3 * 6);
        for c in SwapConfig::ALL {
            assert!(c.smem_bytes() <= 227 * 1024, "{c:?}");
            assert_eq!(c.stage_bytes() % 1024, 0);
            // accumulators: (wm / 64) m64 fragments of tt / 2 registers each
            assert!(c.wm / 64 * c.tt / 2 <= 128, "{c:?}");
            assert_eq!(SwapConfig::parse(&format!("{}x{}", c.bw(), c.tt)), Some(c));
        }
    }

    #[test]
    fn maps_fit_the_tma_rules() {
        let p = MoeProblem::contiguous(&[40, 0, 248], 4096, 7168, DType::Bf16, DType::Bf16);
        for c in SwapConfig::ALL {
            assert_eq!(GroupedSwapAb::w_map(&p, 1 << 20, c).validate(), Ok(()));
        }
        let x = x_map(&p, 1 << 21, XBOX);
        assert_eq!(x.validate(), Ok(()));
        assert_eq!(x.box_dims, [64, 32]);
    }

    #[test]
    fn grid_covers_the_possible_tiles() {
        let p = MoeProblem::contiguous(&[40, 248, 112], 4096, 7168, DType::Bf16, DType::Bf16);
        // at most 400 / 256 + 3 = 4 token tiles x 32 column tiles: 128 CTAs, under 132 SMs
        assert_eq!(SwapConfig::W128_T256.grid(&p, 132), 128);
        assert_eq!(SwapConfig::W128_T128.grid(&p, 132), 132);
        let tiny = MoeProblem::contiguous(&[1], 136, 64, DType::Bf16, DType::Bf16);
        assert_eq!(SwapConfig::W128_T256.grid(&tiny, 132), 2);
    }
}
