//! Host side of `kernels/attention/bwd_fa3_d256.cu`: the WGMMA backward at head dim 256. The other
//! WGMMA versions give each MMA warpgroup 64 keys and both of their gradients (dK and dV, 64 x D
//! fp32 each: 256 registers a thread at d256, over the 240 a consumer has); here a block holds 64
//! keys, warpgroup 0 computes Sᵀ, Pᵀ and dV, warpgroup 1 dPᵀ, dSᵀ and dK (Pᵀ handed over in fp32
//! through shared memory), and each adds dQ for 128 of the 256 columns by fp32 atomics (in key
//! block order in deterministic mode). K and V resident (64 KB), Q and dO through a 2-stage ring
//! (64 KB a stage), two dSᵀ buffers (16 KB) and the Pᵀ buffer (16 KB): 231,464 B of shared memory.
//! Same passes, argument block and maps as `bwd_fa3_wgmma` (`launch_main`), with K and V loaded
//! in boxes of 64 rows and a block per 64 keys. The default at d256 since its first H200 run
//! (2026-11-29): verified, 1.80-1.89x `bwd_fa2_mma_sync` (ledger row D1).

use super::bwd_fa3_wgmma::launch_main;
use super::{
    bwd_prep, check_shape, refuse_window, AttentionBackwardKernel, BackwardOperands,
    BackwardProblem,
};
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

fn spec(arch: &str, dtype: DType) -> KernelSpec {
    KernelSpec::new("attention/bwd_fa3_d256.cu", "attn_bwd_fa3_d256", arch)
        .define("KILN_IN", dtype.code())
        .define("KILN_D", DIM)
        .define("KILN_BN", BN)
        .define("KILN_STAGES", STAGES)
        .define("KILN_DQ_SPLIT", 0)
        .define("KILN_SMEM", smem_bytes())
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
        refuse_window(p)?;
        dev.check_smem(smem_bytes())
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        let mut v = vec![bwd_prep::pre_spec(arch), bwd_prep::post_spec(arch)];
        v.extend(DTYPES.iter().map(|&dt| spec(arch, dt)));
        v
    }
    fn launch(&self, ctx: &Context, p: &BackwardProblem, ops: &BackwardOperands) -> Result<()> {
        let main = spec(&ctx.arch(), p.attn.dtype);
        launch_main(
            self.name(),
            ctx,
            p,
            ops,
            &main,
            smem_bytes(),
            BN,
            None,
            false,
            None,
        )
    }
    fn by_default(&self) -> bool {
        // verified (the quick suite's 18 d256 problems, 6 of 6 deterministic runs bitwise equal,
        // GQA causal, ragged BHSD f16) and 1.80-1.89x `bwd_fa2_mma_sync` at three d256 shapes on
        // an H200 (2026-11-29): the default at d256, the only head dim it takes
        true
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
        // the default at d256 (verified and faster on an H200); d64 and d128 keep theirs
        let reg = Registry::default();
        let k = reg.select_attention_backward(&p(256), &h100, None).unwrap();
        assert_eq!(k.name(), "bwd_fa3_d256");
        let k = reg.select_attention_backward(&p(128), &h100, None).unwrap();
        assert_ne!(k.name(), "bwd_fa3_d256");
        let k = reg
            .select_attention_backward(&p(256), &h100, Some("bwd_fa3_d256"))
            .unwrap();
        assert_eq!(k.name(), "bwd_fa3_d256");
    }

    /// Every variant compiles for sm_90a with no local memory, no wgmma serialisation (ptxas's
    /// C751x notes) and its register split honoured (C7507, C7508: setmaxnreg ignored).
    #[test]
    fn every_variant_compiles_without_spills() {
        crate::ops::attention_backward::assert_compiles_clean(
            BwdFa3D256.variants("sm_90a"),
            &["C751", "C7507", "C7508"],
        );
    }
}
