//! Host side of `kernels/moe/swiglu_dual.cu`: the fused SwiGLU dual GEMM over experts,
//! H = silu(X·W1ᵀ) ⊙ (X·W3ᵀ) (⊙ routing weight), one X tile feeding two accumulators. W1 and W3
//! come as two [E, N, K] maps, or one [E, 2N, K] map over the interleaved W13 whose 256-row box
//! brings a W1 block and its W3 block at once.

use super::schedule::{group_for, TileConfig, MAX_EXPERTS};
use super::tma3d::Tma3d;
use super::{
    common_support, tile_prefix, tma_dtype, with_dtypes, x_map, MoeArgs, MoeKernel, MoeOperands,
    MoeProblem, SwiGlu, WeightLayout,
};
use crate::device::{Context, DeviceInfo, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;

pub struct SwiGluDual;

/// `KILN_SWIGLU_SPLIT=1` compiles the earlier mainloop (two m64n128k16 per k16, one per weight)
/// instead of one m64n256k16 over the adjacent W1 and W3 tiles, to time both in one run.
fn split_mainloop() -> bool {
    std::env::var("KILN_SWIGLU_SPLIT").is_ok_and(|v| v.trim() == "1")
}

pub const ENTRY: &str = "moe_swiglu_dual";
pub const THREADS: u32 = 384;
const CFG: TileConfig = TileConfig::SWIGLU;

impl SwiGluDual {
    pub fn spec(arch: &str, input: DType, output: DType) -> KernelSpec {
        with_dtypes(
            KernelSpec::new("moe/swiglu_dual.cu", ENTRY, arch),
            input,
            output,
        )
        .define("KILN_STAGES", CFG.stages)
        .define("KILN_MAX_EXPERTS", MAX_EXPERTS)
        .define("KILN_SMEM", CFG.smem_bytes(2))
        .define("KILN_SWIGLU_SPLIT", split_mainloop() as u32)
    }

    /// The weight maps: (W1, W3) over [E, N, K] in 128-row boxes, or W13 over [E, 2N, K] in
    /// 256-row boxes (W3's map is then unused and repeats W1's).
    pub fn w_maps(p: &MoeProblem, w: u64, w3: Option<u64>) -> (Tma3d, Tma3d) {
        let (dt, k, n, e) = (tma_dtype(p.input), p.k as u64, p.n as u64, p.experts as u64);
        match (p.swiglu.map(|s| s.weights), w3) {
            (Some(WeightLayout::Separate), Some(w3)) => (
                Tma3d::packed(dt, w, k, n, e, 64, CFG.bn),
                Tma3d::packed(dt, w3, k, n, e, 64, CFG.bn),
            ),
            _ => {
                let m = Tma3d::packed(dt, w, k, 2 * n, e, 64, 2 * CFG.bn);
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
        dev.check_smem(CFG.smem_bytes(2))?;
        Ok(())
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        super::dtype_pairs()
            .into_iter()
            .map(|(i, o)| Self::spec(arch, i, o))
            .collect()
    }
    fn launch(&self, ctx: &Context, p: &MoeProblem, ops: &MoeOperands) -> Result<()> {
        let sms = ctx.info.sm_count;
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
        let tx = x_map(p, ops.x.ptr(), CFG.bm);
        tx.validate().map_err(unsupported)?;
        let (t1, t3) = Self::w_maps(p, ops.w.ptr(), ops.w3.map(|b| b.ptr()));
        t1.validate().map_err(unsupported)?;
        t3.validate().map_err(unsupported)?;
        let (mut map_x, mut map_1, mut map_3) = (tx.encode()?, t1.encode()?, t3.encode()?);
        let f = ctx.function(&Self::spec(&ctx.arch(), p.input, p.output))?;
        let mut args = MoeArgs::new(p, ops, CFG.bn);
        args.group_m = group_for(p, CFG.bm);
        if !p.swiglu.is_some_and(|s| s.routed) {
            args.route = 0;
        }
        tile_prefix::launch(ctx, p, ops, CFG.bm, false)?;
        let lc = LaunchConfig {
            grid: (CFG.grid(p, sms), 1, 1),
            block: (THREADS, 1, 1),
            smem_bytes: CFG.smem_bytes(2),
            cluster: None,
        };
        // SAFETY: the kernel takes (TmaMap, TmaMap, TmaMap, MoeArgs) in this order. The maps
        // address X, W1 (or W13) and W3, the args Y, the routing weights (or null) and the
        // schedule workspace; `check_operands` has matched each buffer to the problem and the
        // caller keeps them alive until the stream has run.
        unsafe {
            f.launch(
                ctx.stream,
                &lc,
                &mut [
                    map_x.as_param(),
                    map_1.as_param(),
                    map_3.as_param(),
                    args.as_param(),
                ],
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let x = x_map(&p, 1 << 22, CFG.bm);
            let w_bytes = match layout {
                WeightLayout::Separate => w1.box_bytes() + w3m.box_bytes(),
                WeightLayout::Interleaved => w1.box_bytes(),
            };
            // expect_tx: one X box and both weight tiles
            assert_eq!(
                x.box_bytes() + w_bytes,
                CFG.stage_bytes(2) as u64,
                "{layout:?}"
            );
            if layout == WeightLayout::Interleaved {
                assert_eq!((w1.dims, w1.box_dims), ([4096, 1536, 3], [64, 256, 1]));
            }
        }
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
        assert_eq!(SwiGluDual.variants("sm_90a").len(), 6);
    }
}
