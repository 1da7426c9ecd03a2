//! `bwd_fa3_d256_tail`: `bwd_fa3_tail`'s mending of the grid's end at d256. Non-causal, the last
//! partial wave split ([`super::tail`]: `bwd_fa3_d256_tma`'s kernel with the define
//! `KILN_BWD_TAIL`, each consumer's gradient summed over the parts by the last to finish,
//! `d256_tail_fixup` in `kernels/attention/bwd_fa3_d256.cu`); causal, the blocks longest walk
//! first (`bwd_fa3_d256_lpt`'s launch). Off by default; its two split kernels (bf16, f16) compile
//! when asked for, outside the variant budget.
//!
//! Why: the non-causal d256 grids of the issue (B4 H16 S4096, B1 H16 S16384: 4,096 key blocks of
//! 64 keys, one CTA a SM) are 31.03 waves on 132 SMs; the last holds 4 blocks while 128 SMs idle.
//! The early ncu (H200, main 5e674b5, B4 H16 S4096) had the SMs idle 3.12 % of the cycles. The
//! model (`tail::plan`, a block its steps plus one) splits the 4 last blocks in 4 parts: 2,080 ->
//! 2,032 step-times at 64 steps a block, 8,224 -> 8,032 at 256 (2.3 %). `KILN_BWD_TAIL` 0 runs
//! the grid whole, 2-4 forces that many parts; `KILN_BWD_LPT=0` the causal grid's order.

use super::bwd_fa3_d256::{self, BwdFa3D256, D256, DQ_BOX_COLS};
use super::bwd_fa3_d256_lpt::lpt_asked;
use super::bwd_fa3_wgmma::{launch_main, tail_knob, Sched};
use super::tail::{self, TailPlan};
use super::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;

pub struct BwdFa3D256Tail;

/// The split of `p`'s grid on `sms` SMs under `KILN_BWD_TAIL` (`knob`; unset: the model's), if
/// `p` may run split (non-causal, not deterministic, no window) and has a partial last wave.
pub fn split_for(knob: Option<u32>, p: &BackwardProblem, sms: u32) -> Option<TailPlan> {
    let knob = tail_knob(knob, true);
    if knob == 0 || !tail::applies(p) {
        return None;
    }
    let a = &p.attn;
    let bn = bwd_fa3_d256::BN;
    let units = (a.seqlen_kv as u32).div_ceil(bn) * a.heads_kv as u32 * a.batch as u32;
    let steps = a.group() as u32 * (a.seqlen_q as u32).div_ceil(64);
    tail::plan(knob, units, sms, steps)
}

/// The split kernel for `dtype` (`p16`: `KILN_BWD_D256_P16`).
pub fn spec(arch: &str, dtype: DType, p16: bool) -> KernelSpec {
    bwd_fa3_d256::spec(arch, dtype, D256::Staged, p16).define("KILN_BWD_TAIL", 1)
}

impl AttentionBackwardKernel for BwdFa3D256Tail {
    fn name(&self) -> &'static str {
        "bwd_fa3_d256_tail"
    }
    fn summary(&self) -> &'static str {
        "bwd_fa3_d256_tma with the grid's end mended: the non-causal last partial wave split into parts (each gradient summed by the last), causal blocks longest walk first"
    }
    fn rung(&self) -> u32 {
        10
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        BwdFa3D256(D256::Staged).supports(p, dev)
    }
    fn variants(&self, _arch: &str) -> Vec<KernelSpec> {
        // the split kernels compile when asked for, outside the variant budget (the test below
        // compiles them); the rest is `bwd_fa3_d256_tma`'s
        Vec::new()
    }
    fn launch(&self, ctx: &Context, p: &BackwardProblem, ops: &BackwardOperands) -> Result<()> {
        let o = &ctx.overrides.attention;
        let split = split_for(o.bwd_tail, p, ctx.info.sm_count);
        let main = match split {
            Some(_) => spec(&ctx.arch(), p.attn.dtype, o.bwd_d256_p16),
            None => bwd_fa3_d256::spec(&ctx.arch(), p.attn.dtype, D256::Staged, o.bwd_d256_p16),
        };
        launch_main(
            self.name(),
            ctx,
            p,
            ops,
            &main,
            bwd_fa3_d256::smem_bytes(),
            bwd_fa3_d256::BN,
            Some(DQ_BOX_COLS),
            false,
            1,
            None,
            Sched {
                split,
                lpt: lpt_asked(o.bwd_lpt),
                ..Sched::of(ctx)
            },
        )
    }
    fn by_default(&self) -> bool {
        // not until the split has measured faster than `bwd_fa3_d256_tma` in two rounds (D41)
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::{AttentionProblem, DTYPES};

    fn problem(b: usize, h: usize, s: usize, causal: bool) -> BackwardProblem {
        let mut a = AttentionProblem::new(b, h, s, 256);
        a.causal = causal;
        BackwardProblem::new(a, false)
    }

    #[test]
    fn the_issue_shapes_split_their_four_last_blocks_in_four() {
        // 4,096 key blocks on 132 SMs: 4,092 whole (31 waves), then the 4 left in 4 parts each
        // (16 or 64 steps a part)
        for (b, s) in [(4, 4096), (1, 16384)] {
            let t = split_for(None, &problem(b, 16, s, false), 132).unwrap();
            assert_eq!((t.full, t.split, t.parts), (4092, 4, 4), "B{b} S{s}");
        }
        // none causal, deterministic, or with the knob at 0; 2 forces two parts
        assert_eq!(split_for(None, &problem(4, 16, 4096, true), 132), None);
        let det = BackwardProblem::new(problem(4, 16, 4096, false).attn, true);
        assert_eq!(split_for(None, &det, 132), None);
        assert_eq!(split_for(Some(0), &problem(4, 16, 4096, false), 132), None);
        let two = split_for(Some(2), &problem(4, 16, 4096, false), 132).unwrap();
        assert_eq!(two.parts, 2);
        // a full last wave: nothing to split (132 key blocks: 33 x 4 heads)
        assert_eq!(split_for(None, &problem(1, 4, 2112, false), 132), None);
        // GQA: a block walks every query block of its group's heads (B1 H9/3 S2049: 33 key
        // blocks x 3 kv heads = 99 blocks, one partial wave of 99: split)
        let mut g = problem(1, 9, 2049, false);
        g.attn.heads_kv = 3;
        let t = split_for(None, &g, 132).unwrap();
        assert_eq!((t.full, t.split), (0, 99));
    }

    #[test]
    fn it_is_asked_for_by_name_only() {
        let h100 = DeviceInfo::h100_sxm();
        let r = crate::ops::registry::Registry::default();
        let p = problem(4, 16, 4096, false);
        assert!(BwdFa3D256Tail.supports(&p, &h100).is_ok());
        assert!(BwdFa3D256Tail.variants("sm_90a").is_empty());
        let k = r.select_attention_backward(&p, &h100, None).unwrap();
        assert_eq!(k.name(), "bwd_fa3_d256_tma");
        let k = r
            .select_attention_backward(&p, &h100, Some("bwd_fa3_d256_tail"))
            .unwrap();
        assert_eq!(k.name(), "bwd_fa3_d256_tail");
    }

    /// Its split kernels (bf16, f16) compile for sm_90a with no spills, no wgmma serialisation and
    /// the register split honoured, under labels of their own.
    #[test]
    fn the_split_kernels_compile_without_spills() {
        let specs: Vec<KernelSpec> = DTYPES.iter().map(|&dt| spec("sm_90a", dt, false)).collect();
        assert!(specs.iter().all(|s| s.label().contains("KILN_BWD_TAIL=1")));
        crate::ops::attention_backward::assert_compiles_clean(specs, &["C751", "C7507", "C7508"]);
    }
}
