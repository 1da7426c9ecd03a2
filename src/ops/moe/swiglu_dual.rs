//! Host side of `kernels/moe/swiglu_dual.cu`: the fused SwiGLU dual GEMM over experts,
//! H = silu(X·W1ᵀ) ⊙ (X·W3ᵀ) (⊙ routing weight), one X tile feeding two accumulators. W1 and W3
//! come as two [E, N, K] maps, or one [E, 2N, K] map over the interleaved W13 whose 256-row box
//! brings a W1 block and its W3 block at once.

use super::schedule::{order_for, TileConfig, INDEX_RING_BYTES, MAX_EXPERTS};
use super::tma3d::Tma3d;
use super::{
    common_support, gather_x_map, tile_prefix, tma_dtype, with_dtypes, x_map, LayerRows, MoeArgs,
    MoeKernel, MoeOperands, MoeProblem, SwiGlu, WeightLayout,
};
use crate::device::{Context, DeviceInfo, Function, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;
use crate::ops::waves::last_wave_slices;
use crate::overrides::{MoeGather, Overrides};

pub struct SwiGluDual;

/// The epilogue's silu (the kernel's `KILN_SWIGLU_SILU`): 1 for 16-bit outputs, one MUFU tanh an
/// element (~2^-11 relative on σ; the verify errors did not move: bf16 1.66e-3, f16 2.05e-4), and
/// -1.3 % at prefill (2026-11-22, c02f3ac); 0 for f32 outputs, ex2 and rcp (~2 ulp). The
/// `KILN_SWIGLU_SILU` override (0 or 1) applies to 16-bit outputs, to time both.
fn silu_mode(output: DType, o: &Overrides) -> u32 {
    if output == DType::F32 {
        0
    } else {
        o.swiglu.silu
    }
}

/// Bytes a stage adds for the folded rows (the kernel's `KILN_SWIGLU_FOLD`, rows an expert's last
/// m-tile takes past 128: 32 by default, [`crate::overrides::SwigluOverrides::fold`]): one 32-row X box.
fn fold_stage_bytes(o: &Overrides) -> u32 {
    if o.swiglu.fold > 0 {
        X_BOX_ROWS * super::schedule::BK * 2
    } else {
        0
    }
}

/// Dynamic shared memory: the grouped kernels' layout plus the unit ring, and for the cp.async
/// gather ([`Gather::CpAsync`]) the tile's row ids. The defaults take the most (the overrides
/// only take stages or the folded rows' box away), so [`MoeKernel::supports`], which has no
/// context, checks them (with the row ids).
fn smem_bytes(o: &Overrides, gather: Gather) -> u32 {
    let stages = o.swiglu.stages;
    let ids = match gather {
        Gather::CpAsync => (CFG.bm + o.swiglu.fold) * 4,
        _ => 0,
    };
    TileConfig { stages, ..CFG }.smem_bytes(2)
        + INDEX_RING_BYTES
        + stages * fold_stage_bytes(o)
        + ids
}

/// How the MoE layer's gate/up projection reads its gathered X rows (the kernel's
/// `KILN_GATHER`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Gather {
    /// X's own rows in 32-row TMA boxes (not the layer).
    None,
    /// One 1-row TMA box per row (the default).
    Tma,
    /// 16-byte cp.async chunks into the swizzled tile (`KILN_MOE_GATHER=cp_async`).
    CpAsync,
}

impl Gather {
    /// How `p` reads X under `o`.
    pub fn of(p: &MoeProblem, o: &Overrides) -> Gather {
        match (p.layer, o.moe.gather) {
            (Some(LayerRows::Gather { .. }), MoeGather::CpAsync) => Gather::CpAsync,
            (Some(LayerRows::Gather { .. }), _) => Gather::Tma,
            _ => Gather::None,
        }
    }

    fn define(self) -> u32 {
        match self {
            Gather::None => 0,
            Gather::Tma => 1,
            Gather::CpAsync => 2,
        }
    }
}

/// The kernel's `SwigluSplit`: the last wave's split workspace and how units are handed out (see
/// the kernel's top comment).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct SwigluSplit {
    pub ws: u64,
    pub counters: u64,
    pub max_splits: i32,
    /// 1: units after the first wave come from the tile counter `moe_tile_prefix` zeroes.
    pub dynamic: i32,
}

/// The most K slices the kernel cuts a last-wave tile into (it picks min(CTAs / tail tiles, this)).
/// `KILN_SWIGLU_TAIL` overrides it for timing (0 or 1: never split).
pub const MAX_TAIL_SPLITS: u32 = 4;

/// The kernel's last-wave split for `tiles` tiles on a grid of `ctas` with `kblocks` K blocks:
/// (first split tile, slices per split tile); (tiles, 1) when nothing is split. Mirrors the
/// kernel (which alone knows `tiles`, from the prefix sums built on the GPU).
pub fn tail_split(tiles: u32, ctas: u32, max_splits: u32, kblocks: u32) -> (u32, u32) {
    match last_wave_slices(tiles, ctas, max_splits, kblocks) {
        Some(s) => (tiles - tiles % ctas.max(1), s),
        None => (tiles, 1),
    }
}

/// Bytes of the split workspace for a grid of `ctas`: a tail of at most ctas / 2 tiles in at most
/// ctas / tail slices gives at most `ctas` fp32 partial tiles of BM x 2BN (gate and up), then as
/// many partials of the folded rows (2 x 16 floats per consumer thread at most).
pub fn split_workspace_bytes(ctas: u32) -> usize {
    ctas as usize * ((CFG.bm * 2 * CFG.bn) as usize + 256 * 32) * 4
}

pub const ENTRY: &str = "moe_swiglu_dual";
pub const THREADS: u32 = 384;
const CFG: TileConfig = TileConfig::SWIGLU;
/// X rows per TMA box (the kernel's `XBOX`): a tile loads only the boxes holding its valid rows.
const X_BOX_ROWS: u32 = 32;

impl SwiGluDual {
    /// The variant for (`input`, `output`) under `o` (its SwiGLU knobs pick the mainloop, the
    /// epilogue, the silu, the fold and the ring depth).
    pub fn spec(arch: &str, input: DType, output: DType, o: &Overrides) -> KernelSpec {
        Self::spec_gather(arch, input, output, o, Gather::None)
    }

    /// As [`SwiGluDual::spec`], rows read through the MoE layer's row map as `gather` says.
    pub fn spec_gather(
        arch: &str,
        input: DType,
        output: DType,
        o: &Overrides,
        gather: Gather,
    ) -> KernelSpec {
        with_dtypes(
            KernelSpec::new("moe/swiglu_dual.cu", ENTRY, arch),
            input,
            output,
        )
        .define("KILN_STAGES", o.swiglu.stages)
        .define("KILN_MAX_EXPERTS", MAX_EXPERTS)
        .define("KILN_SMEM", smem_bytes(o, gather))
        .define("KILN_SWIGLU_SPLIT", o.swiglu.split as u32)
        .define("KILN_SWIGLU_DEFER", o.swiglu.defer as u32)
        .define("KILN_SWIGLU_SILU", silu_mode(output, o))
        .define("KILN_SWIGLU_FOLD", o.swiglu.fold)
        .define("KILN_GATHER", gather.define())
    }

    /// The weight maps: (W1, W3) over [E, N, K] in 128-row boxes, or W13 over [E, 2N, K] in
    /// 256-row boxes (W3's map is then unused and repeats W1's).
    pub fn w_maps(p: &MoeProblem, w: u64, w3: Option<u64>) -> (Tma3d, Tma3d) {
        let (dt, k, n, e) = (tma_dtype(p.input), p.k as u64, p.n as u64, p.experts as u64);
        match (p.swiglu.map(|s| s.weights), w3) {
            (Some(WeightLayout::Separate), Some(w3)) => (
                Tma3d::packed(dt, w, k, n, e, 64, CFG.bn).with_outer_stride(p.w_expert_stride),
                Tma3d::packed(dt, w3, k, n, e, 64, CFG.bn).with_outer_stride(p.w_expert_stride),
            ),
            _ => {
                let m = Tma3d::packed(dt, w, k, 2 * n, e, 64, 2 * CFG.bn)
                    .with_outer_stride(p.w_expert_stride);
                (m, m)
            }
        }
    }
}

impl MoeKernel for SwiGluDual {
    fn name(&self) -> &'static str {
        "swiglu_dual"
    }
    fn summary(&self) -> &'static str {
        "fused SwiGLU dual GEMM over experts: X tile loaded once, gate and up accumulators, \
         silu(g)*u (*routing weight) in the epilogue, W1/W3 separate or interleaved, 128x128 tiles"
    }
    fn supports(&self, p: &MoeProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        if p.swiglu.is_none() {
            return Err(
                "computes the fused SwiGLU pair; a plain grouped GEMM is grouped_gemm's".into(),
            );
        }
        common_support(p, dev)?;
        dev.check_smem(smem_bytes(&Overrides::NONE, Gather::CpAsync))?;
        Ok(())
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        if !crate::jit::arch::has_wgmma(arch) {
            return Vec::new();
        }
        let mut v: Vec<KernelSpec> = super::dtype_pairs()
            .into_iter()
            .map(|(i, o)| Self::spec(arch, i, o, &Overrides::NONE))
            .collect();
        // the MoE layer's gate/up projection (both gathers): H in the input dtype
        for g in [Gather::Tma, Gather::CpAsync] {
            v.extend(
                DType::INPUTS
                    .iter()
                    .map(|&i| Self::spec_gather(arch, i, i, &Overrides::NONE, g)),
            );
        }
        v
    }
    fn launch(&self, ctx: &Context, p: &MoeProblem, ops: &MoeOperands) -> Result<()> {
        self.launch_tables(ctx, p, ops, true)
    }
}

impl SwiGluDual {
    /// The (tile height, fold) its tile tables are built for under the context's overrides.
    pub fn tables(ctx: &Context) -> (u32, u32) {
        (CFG.bm, ctx.overrides.swiglu.fold)
    }

    /// The GEMM with its tile tables built first (`build_tables`, as [`MoeKernel::launch`]
    /// does) or already in `ops.sched` (the MoE layer's routing builds them: [`Self::tables`]).
    pub fn launch_tables(
        &self,
        ctx: &Context,
        p: &MoeProblem,
        ops: &MoeOperands,
        build_tables: bool,
    ) -> Result<()> {
        let sms = ctx.info.sm_count;
        let o = &ctx.overrides;
        let unsupported = |reason: String| Error::Unsupported {
            kernel: "swiglu_dual".into(),
            reason,
        };
        if let Some(SwiGlu {
            weights: WeightLayout::Separate,
            ..
        }) = p.swiglu
        {
            if ops.w3.is_none() {
                return Err(Error::invalid("SwiGLU with separate weights needs W3"));
            }
        }
        let gather = Gather::of(p, o);
        let tx = if gather != Gather::None {
            gather_x_map(p, ops.x.ptr())
        } else {
            x_map(p, ops.x.ptr(), X_BOX_ROWS)
        };
        tx.validate().map_err(unsupported)?;
        let (t1, t3) = Self::w_maps(p, ops.w.ptr(), ops.w3.map(|b| b.ptr()));
        t1.validate().map_err(unsupported)?;
        t3.validate().map_err(unsupported)?;
        let (mut map_x, mut map_1, mut map_3) = (
            tx.encode_with(ctx.overrides.tma.promotion)?,
            t1.encode()?,
            t3.encode()?,
        );
        let f = ctx.function_memo(&(ENTRY, p.input, p.output, gather), |arch| {
            Self::spec_gather(arch, p.input, p.output, o, gather)
        })?;
        let mut args = MoeArgs::new(p, ops, CFG.bn);
        args.set_order(order_for(p, CFG.bm, &ctx.overrides.moe));
        if !p.swiglu.is_some_and(|s| s.routed) {
            args.route = 0;
        }
        let grid = CFG.grid(p, o.swiglu.grid.map_or(sms, |g| g.min(sms)));
        let max_splits = o.swiglu.tail.max(1);
        let mut split = SwigluSplit {
            ws: 0,
            counters: 0,
            max_splits: max_splits as i32,
            dynamic: o.swiglu.dynamic as i32,
        };
        // The kernel decides whether to split (only it knows the tile count); the workspace is
        // kept for the largest split this grid allows. (Allocated before the prefix kernel, so
        // that nothing comes between it and its dependent launch.)
        if max_splits > 1 {
            split.ws = ctx
                .scratch
                .swiglu_split
                .at_least(ctx, split_workspace_bytes(grid))?;
            split.counters = ctx
                .scratch
                .swiglu_split_counters
                .at_least(ctx, grid as usize / 2 * 4 + 4)?;
        }
        if build_tables {
            tile_prefix::launch_folded(ctx, p, ops, CFG.bm, false, o.swiglu.fold)?;
        }
        let lc = LaunchConfig {
            grid: (grid, 1, 1),
            block: (THREADS, 1, 1),
            smem_bytes: smem_bytes(o, gather),
            cluster: None,
        };
        // SAFETY: the kernel takes (TmaMap, TmaMap, TmaMap, MoeArgs, SwigluSplit) in this order.
        // The maps address X, W1 (or W13) and W3, the args Y, the routing weights (or null) and
        // the schedule workspace; `check_operands` has matched each buffer to the problem and the
        // caller keeps them alive until the stream has run. The split workspace and its counters
        // are sized for this grid (or the split is off).
        // The kernel waits for moe_tile_prefix's tables in `grid_dependency_wait` before its first
        // read of anything earlier work wrote, so it may be launched as that kernel's dependent.
        unsafe {
            // `KILN_MOE_PDL=0` launches it plainly, to time both.
            let launch = if o.moe.pdl {
                Function::launch_dependent
            } else {
                Function::launch
            };
            launch(
                &f,
                ctx.stream,
                &lc,
                &mut [
                    map_x.as_param(),
                    map_1.as_param(),
                    map_3.as_param(),
                    args.as_param(),
                    &mut split as *mut SwigluSplit as *mut std::ffi::c_void,
                ],
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_args_match_the_device_layout() {
        // two pointers, two ints
        assert_eq!(std::mem::size_of::<SwigluSplit>(), 24);
        assert_eq!(std::mem::offset_of!(SwigluSplit, dynamic), 20);
    }

    #[test]
    fn maps_deliver_one_stage_in_both_weight_layouts() {
        for (layout, w3) in [
            (WeightLayout::Separate, Some(2u64 << 20)),
            (WeightLayout::Interleaved, None),
        ] {
            let p = MoeProblem::contiguous(&[40, 0, 300], 768, 4096, DType::Bf16, DType::Bf16)
                .with_swiglu(layout, true);
            p.validate().unwrap();
            let (w1, w3m) = SwiGluDual::w_maps(&p, 1 << 20, w3);
            assert_eq!(w1.validate(), Ok(()));
            let x = x_map(&p, 1 << 22, X_BOX_ROWS);
            let w_bytes = match layout {
                WeightLayout::Separate => w1.box_bytes() + w3m.box_bytes(),
                WeightLayout::Interleaved => w1.box_bytes(),
            };
            // expect_tx of a full tile: four X boxes and both weight tiles
            assert_eq!(
                4 * x.box_bytes() + w_bytes,
                CFG.stage_bytes(2) as u64,
                "{layout:?}"
            );
            if layout == WeightLayout::Interleaved {
                assert_eq!((w1.dims, w1.box_dims), ([4096, 1536, 3], [64, 256, 1]));
            }
        }
    }

    #[test]
    fn only_a_sparse_last_wave_is_split() {
        // prefill (62 m-tiles x 24 n-tiles = 1488 on 132 SMs): 36 in a 12th wave, 3 slices each
        assert_eq!(tail_split(1488, 132, 4, 64), (1452, 3));
        // every slice of every split tile has a partial in the workspace: at most `ctas` of them
        for tiles in 1..2000 {
            let (from, s) = tail_split(tiles, 132, 4, 64);
            assert!((tiles - from) * s <= 132, "{tiles}");
            assert!(s == 1 || (tiles - from) * 2 <= 132);
        }
        // a last wave over half full, whole waves, a single wave, no split asked: whole tiles
        for tiles in [132 + 67, 264, 100] {
            assert_eq!(tail_split(tiles, 132, 4, 64), (tiles, 1));
        }
        assert_eq!(tail_split(1488, 132, 1, 64), (1488, 1));
        // too shallow: each slice keeps at least 4 K blocks
        assert_eq!(tail_split(1488, 132, 4, 7), (1488, 1));
        assert_eq!(tail_split(1488, 132, 4, 8), (1452, 2));
        assert!(split_workspace_bytes(132) >= 132 * 128 * 256 * 4);
    }

    #[test]
    fn only_swiglu_problems() {
        let h100 = DeviceInfo::h100_sxm();
        let p = MoeProblem::contiguous(&[1, 2], 128, 64, DType::F16, DType::F32);
        assert!(SwiGluDual.supports(&p, &h100).is_err());
        assert_eq!(
            SwiGluDual.supports(&p.with_swiglu(WeightLayout::Separate, false), &h100),
            Ok(())
        );
        // six dtype pairs, and the layer's two gathering variants per input dtype
        assert_eq!(SwiGluDual.variants("sm_90a").len(), 10);
    }
}
