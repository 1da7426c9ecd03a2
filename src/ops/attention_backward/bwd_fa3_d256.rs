//! Host side of `kernels/attention/bwd_fa3_d256.cu`: the WGMMA backwards at head dim 256, three
//! versions of one kernel file (`D256`). The other WGMMA versions give each MMA warpgroup 64 keys
//! and both of their gradients (dK and dV, 64 x D fp32 each: 256 registers a thread at d256, over
//! the 240 a consumer has); here a block holds 64 keys, warpgroup 0 computes Sᵀ, Pᵀ and dV,
//! warpgroup 1 dPᵀ, dSᵀ and dK (Pᵀ handed over in fp32 through shared memory), and each adds dQ
//! for 128 of the 256 columns. K and V resident (64 KB), Q and dO through a 2-stage ring (64 KB a
//! stage), two dSᵀ buffers (16 KB) and the Pᵀ buffer (16 KB): 231,464 B of shared memory. Same
//! passes, argument block and maps as `bwd_fa3_wgmma` (`launch_main`), with K and V loaded in
//! boxes of 64 rows and a block per 64 keys.
//!   `bwd_fa3_d256`: dQ by fp32 atomics (in key block order in deterministic mode). The default
//!   at d256 since its first H200 run (2026-11-29): verified, 1.80-1.89x `bwd_fa2_mma_sync`
//!   (ledger row D1).
//!   `bwd_fa3_d256_tma` (`KILN_D256_DQ`): each consumer's 64 x 128 fp32 partial stored into the
//!   half of the ring stage that both consumers have finished reading and added by
//!   `cp.reduce.async.bulk.tensor` through the accumulator's rank-5 map (`bwd_fa3_tma_dq`'s, in
//!   boxes of 32 columns: four a consumer, one swizzle row each, so that the stores take no bank
//!   conflicts); the stage goes back to the producer once the reduces have read it. An H200
//!   profile of `bwd_fa3_d256` (2026-11-29, B4 H16 S4096, 315.5 TFLOPS) had the L2 at 90 % of its
//!   throughput and about 44 % of the stall samples on its dQ atomics (ledger row D2).
//!   `bwd_fa3_d256_pair` (`KILN_BWD_CLUSTER`, with the staged dQ): two adjacent key blocks a
//!   cluster walking the same query blocks (causal: from the first that the pair's first key
//!   block sees); each stage's Q is loaded by the first CTA and dO by the second, each multicast
//!   to both, so the L2 serves a stage once a pair (a block's L2 traffic 128 -> 96 KB). The grid
//!   is rounded up to whole pairs (a key block past the end computes zeros and stores nothing);
//!   in deterministic mode a pair's second block waits for its first at every query block, in the
//!   same step (ledger row D3). Its first device run (7cc6536) gave wrong gradients: rank 1's
//!   wgmma descriptors took the cluster rank bit of its shared addresses; fixed since (the kernel's
//!   `d256_at16`), not yet run again.
//! The staged two keep the ordered atomics in deterministic mode; neither is the default until
//! the device shows it verified and faster (`bwd_fa3_d256_tma`, mid-way run at 7cc6536: verified
//! on three problems, 1.27x / 1.36x `bwd_fa3_d256` at B4 H16 S4096 / causal).

use super::bwd_fa3_wgmma::{launch_main, Sched};
use super::knobs::{Knob, Knobs};
use super::{
    bwd_prep, check_shape, refuse_window, AttentionBackwardKernel, BackwardOperands,
    BackwardProblem,
};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::attention::DTYPES;
use crate::ops::gemm::DType;
use crate::overrides::AttentionOverrides;

/// One of the d256 versions (`D256`: how it adds dQ, whether its CTAs pair up).
pub struct BwdFa3D256(pub D256);

/// The head dim it covers.
const DIM: u32 = 256;
/// Keys per block (both warpgroups' M), query rows a step, ring stages.
pub(super) const BN: u32 = 64;
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

/// The staged versions' map box over the dQ accumulator: 64 rows of 32 columns (one 128-byte
/// piece a row, so that a store's 8 rows fall on 8 swizzle patterns; four boxes a consumer).
pub(super) const DQ_BOX_COLS: u32 = 32;

/// How a d256 version adds dQ and whether its CTAs pair up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum D256 {
    /// `bwd_fa3_d256`: fp32 atomics.
    Atomics,
    /// `bwd_fa3_d256_tma`: staged in the ring stage the block has read, added by TMA reduce.
    Staged,
    /// `bwd_fa3_d256_pair`: staged, and two key blocks a cluster sharing each stage's loads.
    Pair,
}

impl D256 {
    fn staged(self) -> bool {
        self != D256::Atomics
    }
    /// CTAs a cluster.
    fn cluster(self) -> u32 {
        if self == D256::Pair {
            2
        } else {
            1
        }
    }
}

/// The knobs a d256 launch reads on `p`: Pᵀ's hand-over in 16-bit pairs, and the causal order
/// (not deterministic, one CTA a cluster) taking `lpt` unset.
pub(super) fn d256_knobs(p: &BackwardProblem, cluster: u32, lpt: bool) -> Knobs {
    let mut v = vec![(Knob::P16, 0)];
    if p.attn.causal && !p.deterministic && cluster == 1 {
        v.push((Knob::Lpt, lpt as i64));
    }
    v
}

/// The kernel of version `v` for `dtype` (the pair's define only where it pairs, so that the
/// others' sources stay as they were); `p16`: Pᵀ handed over in 16-bit pairs instead of fp32
/// (`KILN_BWD_D256_P16`, the define `KILN_D256_P16`; the shared memory as in fp32).
pub(super) fn spec(arch: &str, dtype: DType, v: D256, p16: bool) -> KernelSpec {
    let s = KernelSpec::new("attention/bwd_fa3_d256.cu", "attn_bwd_fa3_d256", arch)
        .define("KILN_IN", dtype.code())
        .define("KILN_D", DIM)
        .define("KILN_BN", BN)
        .define("KILN_STAGES", STAGES)
        .define("KILN_DQ_SPLIT", 0)
        .define("KILN_D256_DQ", v.staged() as u32)
        .define("KILN_SMEM", smem_bytes());
    let s = if v.cluster() > 1 {
        s.define("KILN_BWD_CLUSTER", v.cluster())
    } else {
        s
    };
    if p16 {
        s.define("KILN_D256_P16", 1)
    } else {
        s
    }
}

/// The staged kernel made persistent (`bwd_fa3_d256_persist`, the define `KILN_D256_PERSIST`):
/// `spec`'s `D256::Staged` kernel with 16 bytes more shared memory (a barrier and the tile's
/// index), compiled when asked for (outside the variant budget).
pub(super) fn persist_spec(arch: &str, dtype: DType, p16: bool) -> KernelSpec {
    let s = KernelSpec::new("attention/bwd_fa3_d256.cu", "attn_bwd_fa3_d256", arch)
        .define("KILN_IN", dtype.code())
        .define("KILN_D", DIM)
        .define("KILN_BN", BN)
        .define("KILN_STAGES", STAGES)
        .define("KILN_DQ_SPLIT", 0)
        .define("KILN_D256_DQ", 1)
        .define("KILN_SMEM", persist_smem_bytes())
        .define("KILN_D256_PERSIST", 1);
    if p16 {
        s.define("KILN_D256_P16", 1)
    } else {
        s
    }
}

/// [`smem_bytes`] and the persistent kernel's barrier between tiles and the tile's index.
pub fn persist_smem_bytes() -> u32 {
    smem_bytes() + 16
}

/// The rung of `bwd_fa3_d256_tma`; the versions on its kernels sit above it (`bwd_fa3_d256_lpt`
/// beside the pair, the ordered writers above both).
pub(super) const RUNG_STAGED: u32 = 9;

/// What every version on the staged kernel supports: `bwd_fa3_d256_tma`'s problems.
pub(super) fn supports_staged(
    p: &BackwardProblem,
    dev: &DeviceInfo,
) -> std::result::Result<(), String> {
    BwdFa3D256(D256::Staged).supports(p, dev)
}

/// The launch of a staged d256 kernel `main` (`bwd_fa3_d256_tma`'s, or a deterministic writer
/// form of it): its shared memory, a block per 64 keys, the dQ accumulator's map in boxes of
/// [`DQ_BOX_COLS`] columns, one CTA a cluster; `deterministic`: the kernel runs the dQ writer's
/// order (the argument block's order, SMs and writers, [`launch_main`]'s `det_writer`); `sched`:
/// the blocks' order. The one launch of `bwd_fa3_d256_lpt` and the ordered writers.
pub(super) fn launch_staged(
    name: &str,
    ctx: &Context,
    p: &BackwardProblem,
    ops: &BackwardOperands,
    main: &KernelSpec,
    deterministic: bool,
    sched: Sched,
) -> Result<()> {
    launch_main(
        name,
        ctx,
        p,
        ops,
        main,
        smem_bytes(),
        BN,
        Some(DQ_BOX_COLS),
        deterministic,
        1,
        None,
        sched,
    )
}

impl AttentionBackwardKernel for BwdFa3D256 {
    fn name(&self) -> &'static str {
        match self.0 {
            D256::Atomics => "bwd_fa3_d256",
            D256::Staged => "bwd_fa3_d256_tma",
            D256::Pair => "bwd_fa3_d256_pair",
        }
    }
    fn summary(&self) -> &'static str {
        match self.0 {
            D256::Atomics => "FA3 backward at d256: 64 keys a block, one warpgroup S^T/P^T/dV, the other dP^T/dS^T/dK (P^T through shared memory), dQ halves by fp32 atomics",
            D256::Staged => "bwd_fa3_d256 with dQ staged in the ring stage it has read and added by TMA tensor reduce",
            D256::Pair => "bwd_fa3_d256_tma with two key blocks a cluster, each stage's Q and dO loaded once a pair and multicast",
        }
    }
    fn rung(&self) -> u32 {
        match self.0 {
            D256::Atomics => RUNG_STAGED - 1,
            D256::Staged => RUNG_STAGED,
            D256::Pair => RUNG_STAGED + 1,
        }
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
        // (`KILN_BWD_D256_P16`'s compile when asked for, outside the variant budget)
        v.extend(DTYPES.iter().map(|&dt| spec(arch, dt, self.0, false)));
        v
    }
    fn launch_knobs(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
        o: &AttentionOverrides,
    ) -> Result<()> {
        let p16 = o.bwd_d256_p16;
        let main = spec(&ctx.arch(), p.attn.dtype, self.0, p16);
        launch_main(
            self.name(),
            ctx,
            p,
            ops,
            &main,
            smem_bytes(),
            BN,
            self.0.staged().then_some(DQ_BOX_COLS),
            false,
            self.0.cluster(),
            None,
            Sched::of(o),
        )
    }
    fn knobs(&self, p: &BackwardProblem) -> Knobs {
        d256_knobs(p, self.0.cluster(), super::lpt::lpt_by_default(p))
    }
    fn by_default(&self) -> bool {
        // bwd_fa3_d256_tma: verified (the quick suite's 18 d256 problems, 6 of 6 deterministic runs
        // bitwise equal, GQA causal ragged BHSD f16) and 1.29-1.33x the atomics' `bwd_fa3_d256` at
        // the four d256 shapes on an H200 (2026-11-29, final call of bc5de42: 414-427
        // TFLOPS, 1.04-1.19x cuDNN): the default at d256. The pair ties it (375-430 TFLOPS) with a
        // cluster launch more; the atomics are kept for the A/B. Since 2026-12-01 the persistent
        // form of its kernel (`bwd_fa3_d256_persist`, ledger D81) sits above it as the default;
        // this one is the fallback where that does not fit.
        self.0 == D256::Staged
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;
    use crate::ops::registry::Registry;

    const ALL: [D256; 3] = [D256::Atomics, D256::Staged, D256::Pair];

    #[test]
    fn they_take_d256_only_and_fit_the_h100() {
        assert_eq!(smem_bytes(), 231_464);
        let h100 = DeviceInfo::h100_sxm();
        assert!(smem_bytes() <= h100.smem_optin_bytes);
        let p = |d| BackwardProblem::new(AttentionProblem::new(1, 2, 129, d), true);
        let mut labels = std::collections::HashSet::new();
        for v in ALL {
            let k = BwdFa3D256(v);
            assert!(k.supports(&p(256), &h100).is_ok());
            assert!(k.supports(&p(128), &h100).unwrap_err().contains("use 256"));
            let specs = k.variants("sm_90a");
            assert_eq!(specs.len(), 4);
            let label = specs[2].label();
            assert!(
                label.contains("KILN_BN=64") && label.contains("KILN_D=256"),
                "{label}"
            );
            assert!(
                label.contains(&format!("KILN_D256_DQ={}", v.staged() as u32)),
                "{label}"
            );
            assert_eq!(
                label.contains("KILN_BWD_CLUSTER=2"),
                v == D256::Pair,
                "{label}"
            );
            labels.extend(specs[2..].iter().map(|s| s.label()));
        }
        // two kernels (bf16, f16) a version, none shared
        assert_eq!(labels.len(), 6);
    }

    #[test]
    fn only_the_staged_dq_is_the_default_and_each_can_be_asked_for() {
        let h100 = DeviceInfo::h100_sxm();
        let p = |d| BackwardProblem::new(AttentionProblem::new(1, 2, 129, d), true);
        let free = |d| BackwardProblem::new(AttentionProblem::new(1, 2, 129, d), false);
        let reg = Registry::default();
        // the default at d256 (verified and faster on an H200) made persistent
        // (`bwd_fa3_d256_persist`, since 2026-12-01); in deterministic mode its ordered reduces by
        // two writer warps in two column parts (`bwd_fa3_d256_w2_cols2`; causal `bwd_fa3_d256_w2`);
        // d64 and d128 keep theirs
        let k = reg
            .select_attention_backward(&free(256), &h100, None)
            .unwrap();
        assert_eq!(k.name(), "bwd_fa3_d256_persist");
        assert!(BwdFa3D256(D256::Staged).by_default());
        let k = reg.select_attention_backward(&p(256), &h100, None).unwrap();
        assert_eq!(k.name(), "bwd_fa3_d256_w2_cols2t");
        let k = reg.select_attention_backward(&p(128), &h100, None).unwrap();
        assert!(!k.name().starts_with("bwd_fa3_d256"), "{}", k.name());
        for v in ALL {
            let name = BwdFa3D256(v).name();
            let k = reg
                .select_attention_backward(&p(256), &h100, Some(name))
                .unwrap();
            assert_eq!(k.name(), name);
            assert_eq!(k.by_default(), v == D256::Staged);
        }
    }

    /// Every variant compiles for sm_90a with no local memory, no wgmma serialisation (ptxas's
    /// C751x notes) and its register split honoured (C7507, C7508: setmaxnreg ignored).
    #[test]
    fn every_variant_compiles_without_spills() {
        for v in ALL {
            crate::ops::attention_backward::assert_compiles_clean(
                BwdFa3D256(v).variants("sm_90a"),
                &["C751", "C7507", "C7508"],
            );
        }
    }

    /// `KILN_BWD_D256_P16`'s kernels (the default's, bf16 and f16) compile the same way, under a
    /// label of their own; without it the labels stay.
    #[test]
    fn the_16_bit_p_exchange_compiles_without_spills() {
        let specs: Vec<KernelSpec> = DTYPES
            .iter()
            .map(|&dt| spec("sm_90a", dt, D256::Staged, true))
            .collect();
        assert!(specs.iter().all(|s| s.label().contains("KILN_D256_P16=1")));
        assert!(!spec("sm_90a", DType::Bf16, D256::Staged, false)
            .label()
            .contains("P16"));
        crate::ops::attention_backward::assert_compiles_clean(specs, &["C751", "C7507", "C7508"]);
    }
}
