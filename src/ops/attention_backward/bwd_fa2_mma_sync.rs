//! Host side of `kernels/attention/bwd_fa2_mma_sync.cu`: the FlashAttention-2-style backward on
//! mma.sync tensor cores (one block per key block and key/value head, looping over its query
//! heads and blocks), between `bwd_prep`'s two passes. Specialised per head dim and dtype; the
//! causal mask and the deterministic mode are run-time arguments.

use super::{
    bwd_prep, check_aligned, check_buffers, check_shape, AttentionBackwardKernel, AttnBwdArgs,
    BackwardOperands, BackwardProblem, BackwardWorkspace,
};
use crate::device::{Context, DeviceInfo, LaunchConfig};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::attention::{DTYPES, HEAD_DIMS};
use crate::ops::gemm::DType;
use crate::overrides::AttentionOverrides;

pub struct BwdFa2MmaSync;

/// The tile a head dim is specialised with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BwdTile {
    pub d: u32,
    /// Query rows per step of the loop.
    pub bm: u32,
    /// Keys per block.
    pub bn: u32,
    /// Warps that share 16 keys, each holding d / dsplit columns of their dK and dV.
    pub dsplit: u32,
}

impl BwdTile {
    /// 128 keys and 64 query rows at d 64 and 128 (8 warps of 16 keys); d 256: 64 keys, 32 rows,
    /// two warps per 16 keys, so that dK and dV (16 x 128 fp32 each per warp) fit in registers,
    /// each reducing Sᵀ and dPᵀ over half of D.
    pub fn for_dim(d: usize) -> BwdTile {
        match d {
            256 => BwdTile {
                d: 256,
                bm: 32,
                bn: 64,
                dsplit: 2,
            },
            128 => BwdTile {
                d: 128,
                bm: 64,
                bn: 128,
                dsplit: 1,
            },
            _ => BwdTile {
                d: 64,
                bm: 64,
                bn: 128,
                dsplit: 1,
            },
        }
    }
    pub fn threads(&self) -> u32 {
        self.bn / 16 * self.dsplit * 32
    }
    /// K and V, two buffers each of Q and dO, dSᵀ [bn][bm], two buffers of LSE and D, and
    /// with two warps per 16 keys their partial Sᵀ and dPᵀ (fp32, [2][warps][16·bm]).
    pub fn smem_bytes(&self) -> u32 {
        let row = self.d * 2;
        let exchange = match self.dsplit {
            2 => 2 * (self.threads() / 32) * 16 * self.bm * 4,
            _ => 0,
        };
        2 * self.bn * row + 4 * self.bm * row + self.bn * self.bm * 2 + 4 * self.bm * 4 + exchange
    }
    pub fn spec(&self, arch: &str, dtype: DType) -> KernelSpec {
        KernelSpec::new(
            "attention/bwd_fa2_mma_sync.cu",
            "attn_bwd_fa2_mma_sync",
            arch,
        )
        .define("KILN_IN", dtype.code())
        .define("KILN_D", self.d)
        .define("KILN_BM", self.bm)
        .define("KILN_BN", self.bn)
        .define("KILN_DSPLIT", self.dsplit)
        .define("KILN_SMEM", self.smem_bytes())
    }
}

impl AttentionBackwardKernel for BwdFa2MmaSync {
    fn name(&self) -> &'static str {
        "bwd_fa2_mma_sync"
    }
    fn summary(&self) -> &'static str {
        "FA2 backward: a block per key block, mma.sync m16n8k16 + ldmatrix, GQA heads summed in registers, dQ by fp32 atomics (ordered when deterministic)"
    }
    fn rung(&self) -> u32 {
        1
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        let a = &p.attn;
        if dev.compute_capability < (8, 0) {
            let (maj, min) = dev.compute_capability;
            return Err(format!("needs compute capability 8.0 or newer for mma.sync and cp.async; this GPU is {maj}.{min}"));
        }
        check_shape(p, &HEAD_DIMS)?;
        super::refuse_window(p)?;
        dev.check_smem(BwdTile::for_dim(a.head_dim).smem_bytes())
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        let mut v = vec![bwd_prep::pre_spec(arch), bwd_prep::post_spec(arch)];
        for d in HEAD_DIMS {
            for dt in DTYPES {
                v.push(BwdTile::for_dim(d).spec(arch, dt));
            }
        }
        v
    }
    fn launch_knobs(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
        _o: &AttentionOverrides,
    ) -> Result<()> {
        check_buffers(p, ops)?;
        check_aligned(self.name(), ops)?;
        let a = &p.attn;
        let t = BwdTile::for_dim(a.head_dim);
        let main = ctx.function(&t.spec(&ctx.arch(), a.dtype))?;
        let ws = BackwardWorkspace::of(ctx, p, t.bm as usize)?;
        let mut args = AttnBwdArgs::new(p, ops, &ws, t.bm as usize);
        let cfg = LaunchConfig {
            smem_bytes: t.smem_bytes(),
            ..LaunchConfig::simple(
                (
                    (a.seqlen_kv as u32).div_ceil(t.bn),
                    a.heads_kv as u32,
                    a.batch as u32,
                ),
                t.threads(),
            )
        };
        // SAFETY: one parameter, an AttnBwdArgs, whose buffers the caller keeps alive and were
        // checked against `p` (above); every base is 16-byte aligned (LSE 4) and packed rows of
        // 64, 128 or 256 16-bit elements keep every row 16-byte aligned; the workspaces are the
        // context's, sized for `p` by `BackwardWorkspace::of`. The three launches run in order on
        // one stream: the main kernel reads what the preprocess wrote, the postprocess what the
        // main kernel accumulated.
        unsafe {
            bwd_prep::launch_pre(ctx, &mut args)?;
            main.launch(ctx.stream, &cfg, &mut [args.as_param()])?;
            bwd_prep::launch_post(ctx, &mut args)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;

    #[test]
    fn tiles_fit_the_h100_and_variants_are_distinct() {
        for d in HEAD_DIMS {
            let t = BwdTile::for_dim(d);
            assert_eq!(t.d as usize, d);
            assert_eq!(t.threads(), 256, "d{d}");
            assert!(t.smem_bytes() <= 227 * 1024, "d{d}: {}", t.smem_bytes());
        }
        let v = BwdFa2MmaSync.variants("sm_90a");
        assert_eq!(v.len(), 8);
        let unique: std::collections::HashSet<_> = v.iter().map(|s| s.label()).collect();
        assert_eq!(unique.len(), 8);
    }

    #[test]
    fn supports_needs_sm80_and_names_what_it_refuses() {
        let h100 = DeviceInfo::h100_sxm();
        let p = BackwardProblem::new(AttentionProblem::new(1, 2, 129, 128), true);
        assert!(BwdFa2MmaSync.supports(&p, &h100).is_ok());
        let turing = DeviceInfo {
            compute_capability: (7, 5),
            ..h100.clone()
        };
        assert!(BwdFa2MmaSync
            .supports(&p, &turing)
            .unwrap_err()
            .contains("8.0"));
        let small = DeviceInfo {
            smem_optin_bytes: 99 * 1024,
            ..h100
        };
        assert!(BwdFa2MmaSync.supports(&p, &small).is_err());
    }

    /// Every variant compiles for sm_90a with no local memory (spills or stack): a spill in
    /// the inner loop would cost more than the tile gains.
    #[test]
    fn every_variant_compiles_without_spills() {
        crate::ops::attention_backward::assert_compiles_clean(
            BwdFa2MmaSync.variants("sm_90a"),
            &[],
        );
    }
}
