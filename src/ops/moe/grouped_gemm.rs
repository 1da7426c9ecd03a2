//! Host side of `kernels/moe/grouped_gemm.cu`: the persistent grouped GEMM over experts (the MoE
//! up projection without a gate, and the down projection). Chooses a tile shape against wave
//! quantisation, launches the prefix-sum kernel, then the GEMM with one 2D map over X and one 3D
//! map over W [E, N, K].

use super::schedule::{order_for, TileConfig, MAX_EXPERTS};
use super::tma3d::Tma3d;
use super::trace::TraceBuffer;
use super::{
    common_support, gather_x_map, layer_defines, tile_prefix, tma_dtype, with_dtypes, x_map,
    LayerRows, MoeArgs, MoeKernel, MoeOperands, MoeProblem,
};
use crate::device::{Context, DeviceInfo, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;
use crate::overrides::MoeOverrides;

pub struct GroupedGemm;

pub const ENTRY: &str = "moe_grouped_gemm";
pub const THREADS: u32 = 384;
/// X rows per TMA box of the single-CTA tiles (the kernel's `XBOX`).
pub const X_BOX: u32 = 32;

impl GroupedGemm {
    pub fn spec(arch: &str, input: DType, output: DType, cfg: TileConfig) -> KernelSpec {
        Self::spec_layer(arch, input, output, cfg, None)
    }

    /// The variant for the MoE layer's row maps `layer` (`None`: the plain kernel).
    pub fn spec_layer(
        arch: &str,
        input: DType,
        output: DType,
        cfg: TileConfig,
        layer: Option<LayerRows>,
    ) -> KernelSpec {
        let (gather, combine) = layer_defines(layer);
        with_dtypes(
            KernelSpec::new("moe/grouped_gemm.cu", ENTRY, arch),
            input,
            output,
        )
        .define("KILN_BM", cfg.bm)
        .define("KILN_BN", cfg.bn)
        .define("KILN_STAGES", cfg.stages)
        .define("KILN_MAX_EXPERTS", MAX_EXPERTS)
        .define("KILN_SMEM", cfg.smem_bytes(1))
        .define("KILN_CLUSTER", cfg.cluster)
        .define("KILN_GATHER", gather)
        .define("KILN_COMBINE", combine)
    }

    /// The MoE layer's variants: for each single-CTA tile and input dtype, the gathered up
    /// projection (output in the input dtype), the combine (f32 accumulator) and the scaled rows
    /// of the ordered combine (input dtype).
    pub fn layer_variants(arch: &str) -> Vec<KernelSpec> {
        let mut v = Vec::new();
        for cfg in TileConfig::SINGLE {
            for &i in &DType::INPUTS {
                for (layer, out) in [
                    (LayerRows::Gather { source_rows: 1 }, i),
                    (LayerRows::Combine { tokens: 1 }, DType::F32),
                    (LayerRows::Scaled, i),
                ] {
                    v.push(Self::spec_layer(arch, i, out, cfg, Some(layer)));
                }
            }
        }
        v
    }

    /// The tile shape for `p` on `sms` SMs, from the host copy of its rows; `KILN_MOE_TILE`
    /// (`128x256`, `128x192`, `128x128`, `64x256`, each optionally with ` c2` / `c2` for CTA pairs,
    /// [`MoeOverrides::tile`]) overrides the choice, to time the others.
    pub fn config(p: &MoeProblem, sms: u32, o: &MoeOverrides) -> TileConfig {
        if let Some(c) = o.tile {
            // (the layer's row maps run on single CTAs)
            return if p.layer.is_some() {
                TileConfig { cluster: 1, ..c }
            } else {
                c
            };
        }
        let rows: Vec<usize> = p.spans().iter().map(|s| s.1).collect();
        TileConfig::choose(&rows, p.n, sms)
    }

    /// `BMxBN` as one of the compiled tile shapes.
    pub fn parse_tile(v: &str) -> Option<TileConfig> {
        let v: String = v.split_whitespace().collect();
        TileConfig::ALL
            .into_iter()
            .find(|c| c.label().split_whitespace().collect::<String>() == v)
    }

    /// Rows of one X box: each CTA of a pair loads (and multicasts) half of the X tile's rows;
    /// a single CTA loads only the [`X_BOX`]-row boxes that hold the tile's valid rows.
    pub fn x_box_rows(cfg: TileConfig) -> u32 {
        if cfg.cluster > 1 {
            cfg.bm / cfg.cluster
        } else {
            X_BOX
        }
    }

    /// The W map: [E, N, K] in boxes of {64 k, bn rows, 1 expert}.
    pub fn w_map(p: &MoeProblem, addr: u64, cfg: TileConfig) -> Tma3d {
        Tma3d::packed(
            tma_dtype(p.input),
            addr,
            p.k as u64,
            p.n as u64,
            p.experts as u64,
            64,
            cfg.bn,
        )
        .with_outer_stride(p.w_expert_stride)
    }
}

impl MoeKernel for GroupedGemm {
    fn name(&self) -> &'static str {
        "grouped_gemm"
    }
    fn summary(&self) -> &'static str {
        "persistent grouped WGMMA + TMA over experts: tile->expert by binary search over GPU-built \
         m-tile prefix sums, one 3D W map, 128x256 / 128x192 / 128x128 / 64x256 tiles chosen against waves"
    }
    fn supports(&self, p: &MoeProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        if p.swiglu.is_some() {
            return Err("computes a plain grouped GEMM; the SwiGLU pair is swiglu_dual's".into());
        }
        common_support(p, dev)?;
        let smem = TileConfig::ALL
            .iter()
            .map(|c| c.smem_bytes(1))
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
        for cfg in TileConfig::ALL {
            for (i, o) in super::dtype_pairs() {
                v.push(Self::spec(arch, i, o, cfg));
            }
        }
        v.extend(Self::layer_variants(arch));
        v
    }
    fn launch(&self, ctx: &Context, p: &MoeProblem, ops: &MoeOperands) -> Result<()> {
        self.launch_tables(ctx, p, ops, true)
    }
}

impl GroupedGemm {
    /// The (tile height, fold) its tile tables are built for: the tile `launch` picks for `p`.
    pub fn tables(ctx: &Context, p: &MoeProblem) -> (u32, u32) {
        (Self::config(p, ctx.info.sm_count, &ctx.overrides.moe).bm, 0)
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
        self.launch_stamped(ctx, p, ops, build_tables, None)
    }

    /// As [`MoeKernel::launch`], the variants that stamp their phases into `trace` (the prefix
    /// kernel's and the plain kernel's `KILN_MOE_TRACE`; `kiln moe bench --timeline`, never
    /// dispatched).
    pub fn launch_traced(
        &self,
        ctx: &Context,
        p: &MoeProblem,
        ops: &MoeOperands,
        trace: &TraceBuffer,
    ) -> Result<()> {
        self.launch_stamped(ctx, p, ops, true, Some(trace))
    }

    fn launch_stamped(
        &self,
        ctx: &Context,
        p: &MoeProblem,
        ops: &MoeOperands,
        build_tables: bool,
        trace: Option<&TraceBuffer>,
    ) -> Result<()> {
        // The tile, its loaded variant and the clusters resident at once depend on the problem
        // alone (and the context's overrides): worked out once per problem.
        let (cfg, f, slots, order) = ctx.memo.get_or_try(&(p.clone(), GroupedLaunch), || {
            let cfg = Self::config(p, ctx.info.sm_count, &ctx.overrides.moe);
            let f = ctx.function(&Self::spec_layer(
                &ctx.arch(),
                p.input,
                p.output,
                cfg,
                p.layer,
            ))?;
            let slots = ctx.max_active_clusters(&f, cfg.cluster, THREADS, cfg.smem_bytes(1));
            Ok((cfg, f, slots, order_for(p, cfg.bm, &ctx.overrides.moe)))
        })?;
        let unsupported = |reason: String| Error::Unsupported {
            kernel: "grouped_gemm".into(),
            reason,
        };
        let f = match trace {
            Some(_) if cfg.cluster > 1 || p.layer.is_some() => {
                return Err(unsupported(
                    "--timeline: the stamps are the plain single-CTA kernel's".into(),
                ))
            }
            Some(_) => ctx.function(
                &Self::spec(&ctx.arch(), p.input, p.output, cfg).define("KILN_MOE_TRACE", 1),
            )?,
            None => f,
        };
        let tx = match p.layer {
            Some(LayerRows::Gather { .. }) => gather_x_map(p, ops.x.ptr()),
            _ => x_map(p, ops.x.ptr(), Self::x_box_rows(cfg)),
        };
        tx.validate().map_err(unsupported)?;
        let tw = Self::w_map(p, ops.w.ptr(), cfg);
        tw.validate().map_err(unsupported)?;
        let (mut map_x, mut map_w) = (tx.encode_with(ctx.overrides.tma.promotion)?, tw.encode()?);
        let mut args = MoeArgs::new(p, ops, cfg.bn);
        args.set_order(order);
        if let Some(t) = trace {
            tile_prefix::launch_traced(ctx, p, ops, cfg.bm, false, t)?;
        } else if build_tables {
            tile_prefix::launch(ctx, p, ops, cfg.bm, false)?;
        }
        let lc = LaunchConfig {
            grid: (cfg.grid(p, slots), 1, 1),
            block: (THREADS, 1, 1),
            smem_bytes: cfg.smem_bytes(1),
            cluster: (cfg.cluster > 1).then_some((cfg.cluster, 1, 1)),
        };
        let mut stamps = trace.map(|t| t.gemm(lc.grid.0)).transpose()?.unwrap_or(0);
        let mut params = vec![map_x.as_param(), map_w.as_param(), args.as_param()];
        if trace.is_some() {
            params.push(&mut stamps as *mut u64 as *mut std::ffi::c_void);
        }
        // SAFETY: the kernel takes (TmaMap, TmaMap, MoeArgs) in this order, and under
        // KILN_MOE_TRACE (defined exactly when `trace` is given) the trace buffer's u64* last
        // (`TraceBuffer::gemm` has checked its room for this grid). The maps address X and W,
        // the args Y, the schedule workspace and nothing else; `check_operands` has matched
        // every buffer to the problem and the caller keeps them alive until the stream has run.
        unsafe { f.launch(ctx.stream, &lc, &mut params) }
    }
}

/// Tags the memo entry of a grouped GEMM's launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct GroupedLaunch;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_tile_config_and_dtype_pair_is_a_variant() {
        let v = GroupedGemm.variants("sm_90a");
        // the prefix kernel, 8 tiles x 6 dtype pairs, and the layer's 4 tiles x 2 inputs x 3
        assert_eq!(v.len(), 1 + 8 * 6 + 4 * 2 * 3);
        assert_eq!(v[0].entry, "moe_tile_prefix");
        assert!(v[1].label().contains("KILN_BM=128,KILN_BN=256"));
        assert!(v[1].label().contains("KILN_GATHER=0,KILN_COMBINE=0"));
        assert!(v[49].label().contains("KILN_GATHER=1,KILN_COMBINE=0"));
    }

    #[test]
    fn w_map_boxes_fill_the_stage() {
        let p = MoeProblem::contiguous(&[100, 0, 30], 3072, 4096, DType::Bf16, DType::Bf16);
        for cfg in TileConfig::ALL {
            let w = GroupedGemm::w_map(&p, 1 << 20, cfg);
            assert_eq!(w.validate(), Ok(()));
            let x = x_map(&p, 1 << 21, GroupedGemm::x_box_rows(cfg));
            assert_eq!(x.validate(), Ok(()));
            // a full tile's expect_tx is the stage size: the X boxes of every CTA of the cluster
            // (a pair: one each; a single CTA: bm / 32) plus this CTA's W box
            let x_boxes = (cfg.bm / GroupedGemm::x_box_rows(cfg)) as u64;
            assert_eq!(
                w.box_bytes() + x_boxes * x.box_bytes(),
                cfg.stage_bytes(1) as u64,
                "{cfg:?}"
            );
        }
    }

    #[test]
    fn tile_override_names_a_compiled_shape() {
        assert_eq!(GroupedGemm::parse_tile("64x256"), Some(TileConfig::SHORT));
        assert_eq!(GroupedGemm::parse_tile("128x128"), Some(TileConfig::NARROW));
        assert_eq!(GroupedGemm::parse_tile("128x192"), Some(TileConfig::MID));
        assert_eq!(
            GroupedGemm::parse_tile("128x192 c2"),
            Some(TileConfig::MID.paired())
        );
        assert_eq!(GroupedGemm::parse_tile("96x256"), None);
        assert_eq!(
            GroupedGemm::parse_tile("128x128c2"),
            Some(TileConfig::NARROW.paired())
        );
        assert_eq!(
            GroupedGemm::parse_tile("128x128 c2"),
            Some(TileConfig::NARROW.paired())
        );
    }

    #[test]
    fn refuses_swiglu_and_other_gpus() {
        let h100 = DeviceInfo::h100_sxm();
        let p = MoeProblem::contiguous(&[1, 2], 64, 64, DType::Bf16, DType::F32);
        assert_eq!(GroupedGemm.supports(&p, &h100), Ok(()));
        let s = p
            .clone()
            .with_swiglu(super::super::WeightLayout::Separate, false);
        assert!(GroupedGemm.supports(&s, &h100).is_err());
    }
}
