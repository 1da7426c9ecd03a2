//! Host side of `kernels/attention/bwd_fa3_d256.cu`: the WGMMA backward at head dim 256. The other
//! WGMMA versions give each MMA warpgroup 64 keys and both of their gradients (dK and dV, 64 x D
//! fp32 each: 256 registers a thread at d256, over the 240 a consumer has); here a block holds 64
//! keys, warpgroup 0 computes Sᵀ, Pᵀ and dV, warpgroup 1 dPᵀ, dSᵀ and dK (Pᵀ handed over in fp32
//! through shared memory), and each adds dQ for 128 of the 256 columns by fp32 atomics (in key
//! block order in deterministic mode). K and V resident (64 KB), Q and dO through a 2-stage ring
//! (64 KB a stage), two dSᵀ buffers (16 KB) and the Pᵀ buffer (16 KB): 231,464 B of shared memory.
//! Same passes, argument block and maps as `bwd_fa3_wgmma` (`launch_main`), with K and V loaded
//! in boxes of 64 rows and a block per 64 keys. Two walks (the define `KILN_BWD_SAHEAD`): by
//! default each warpgroup issues the next block's Sᵀ or dPᵀ before this block's dQ (which then
//! goes in two halves of 64 columns, for registers); `KILN_BWD_NO_AHEAD=1` issues each block's at
//! its top and dQ's 128 columns at once. Not the default until the device shows it faster than
//! `bwd_fa2_mma_sync` at d256; `--version bwd_fa3_d256` picks it.

use super::bwd_fa3_wgmma::launch_main;
use super::{bwd_prep, check_shape, AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::attention::DTYPES;
use crate::ops::gemm::DType;

pub struct BwdFa3D256;

/// The head dim it covers.
const DIM: u32 = 256;
/// Keys per block (both warpgroups' M), query rows a step, ring stages.
const BN: u32 = 64;
const BM: u32 = 64;
const STAGES: u32 = 2;

/// K and V, the ring of Q and dO, two dSᵀ buffers [64][64], the Pᵀ buffer (64 x 64 fp32), LSE
/// and D per stage, the barriers, and 1 KB to align the base to the 128B swizzle's repeat.
pub fn smem_bytes() -> u32 {
    let kv = 2 * BN * DIM * 2;
    let stage = 2 * BM * DIM * 2;
    let ds = 2 * BN * BM * 2;
    let px = BN * BM * 4;
    let vec = STAGES * 2 * BM * 4;
    let bars = 8 * (1 + 2 * STAGES);
    1024 + kv + STAGES * stage + ds + px + vec + bars
}

/// `ahead`: the next block's Sᵀ and dPᵀ issued before this block's dQ (`KILN_BWD_NO_AHEAD`
/// unset).
fn spec(arch: &str, dtype: DType, ahead: bool) -> KernelSpec {
    KernelSpec::new("attention/bwd_fa3_d256.cu", "attn_bwd_fa3_d256", arch)
        .define("KILN_IN", dtype.code())
        .define("KILN_D", DIM)
        .define("KILN_BN", BN)
        .define("KILN_STAGES", STAGES)
        .define("KILN_DQ_SPLIT", 0)
        .define("KILN_SMEM", smem_bytes())
        .define("KILN_BWD_SAHEAD", ahead as u32)
}

impl AttentionBackwardKernel for BwdFa3D256 {
    fn name(&self) -> &'static str {
        "bwd_fa3_d256"
    }
    fn summary(&self) -> &'static str {
        "FA3 backward at d256: 64 keys a block, one warpgroup S^T/P^T/dV, the other dP^T/dS^T/dK (P^T through shared memory), dQ halves by fp32 atomics"
    }
    fn rung(&self) -> u32 {
        8
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        if dev.compute_capability != (9, 0) {
            let (maj, min) = dev.compute_capability;
            return Err(format!(
                "needs compute capability 9.0 (sm_90a: wgmma, TMA); this GPU is {maj}.{min}"
            ));
        }
        check_shape(p, &[DIM as usize])?;
        dev.check_smem(smem_bytes())
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        // the default walk only: the plain one (`KILN_BWD_NO_AHEAD=1`, for the device's A/B)
        // compiles when asked for, outside the variant budget; the test below compiles it
        let mut v = vec![bwd_prep::pre_spec(arch), bwd_prep::post_spec(arch)];
        v.extend(DTYPES.iter().map(|&dt| spec(arch, dt, true)));
        v
    }
    fn launch(&self, ctx: &Context, p: &BackwardProblem, ops: &BackwardOperands) -> Result<()> {
        let ahead = !ctx.overrides.attention.bwd_no_ahead;
        let main = spec(&ctx.arch(), p.attn.dtype, ahead);
        launch_main(self.name(), ctx, p, ops, &main, smem_bytes(), BN, None)
    }
    fn by_default(&self) -> bool {
        // not yet run on a GPU: `bwd_fa2_mma_sync` stays the d256 default until this is verified
        // and measured faster
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;
    use crate::ops::registry::Registry;

    #[test]
    fn it_takes_d256_only_and_fits_the_h100() {
        assert_eq!(smem_bytes(), 231_464);
        let h100 = DeviceInfo::h100_sxm();
        assert!(smem_bytes() <= h100.smem_optin_bytes);
        let p = |d| BackwardProblem::new(AttentionProblem::new(1, 2, 129, d), true);
        assert!(BwdFa3D256.supports(&p(256), &h100).is_ok());
        assert!(BwdFa3D256
            .supports(&p(128), &h100)
            .unwrap_err()
            .contains("use 256"));
        let v = BwdFa3D256.variants("sm_90a");
        assert_eq!(v.len(), 4);
        let unique: std::collections::HashSet<_> = v.iter().map(|s| s.label()).collect();
        assert_eq!(unique.len(), 4);
        let label = v[2].label();
        assert!(
            label.contains("KILN_BN=64") && label.contains("KILN_D=256"),
            "{label}"
        );
        assert!(label.contains("KILN_BWD_SAHEAD=1"), "{label}");
        // not the default until the device has shown it: d256 still picks the mma.sync kernel
        let reg = Registry::default();
        let k = reg.select_attention_backward(&p(256), &h100, None).unwrap();
        assert_eq!(k.name(), "bwd_fa2_mma_sync");
        let k = reg
            .select_attention_backward(&p(256), &h100, Some("bwd_fa3_d256"))
            .unwrap();
        assert_eq!(k.name(), "bwd_fa3_d256");
    }

    /// Every variant, and the plain walk, compiles for sm_90a with no local memory, no wgmma
    /// serialisation (ptxas's C751x notes) and its register split honoured (C7507, C7508:
    /// setmaxnreg ignored).
    #[test]
    fn every_variant_compiles_without_spills() {
        let mut specs = BwdFa3D256.variants("sm_90a");
        specs.extend(DTYPES.iter().map(|&dt| spec("sm_90a", dt, false)));
        crate::ops::attention_backward::assert_compiles_clean(specs, &["C751", "C7507", "C7508"]);
    }
}
