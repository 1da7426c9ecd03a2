//! `bwd_fa3_d256_persist`: `bwd_fa3_d256_tma`'s kernel made persistent (`KILN_D256_PERSIST`):
//! one CTA a SM (at most one a key block) taking key blocks from a global counter as it frees up,
//! the ring, the dSᵀ buffers and the Pᵀ hand-over counting on across its blocks, so that the
//! next block's first stage loads under the current block's last steps and its K and V under the
//! dK and dV stores; launched as a programmatic dependent of the preprocess (the kernel waits for
//! it, griddepcontrol.wait, once its first K and V loads are issued). Causal problems take the
//! blocks longest walk first (`bwd_fa3_d256_lpt`'s order over the counter's index).
//!
//! Why (issue 47: d256 B4 H16 S4096 non-causal at 1.008 / 0.999 / 1.012x cuDNN in main a31706b's
//! three rounds): an H200 profile of `bwd_fa3_d256_tma` (2026-11-30, main 5e674b5) fitted a
//! block's fixed cost at ~12,400 cycles, ~2.3 of its 64 steps (the launch, K, V and the first
//! stage loaded with nothing under them, the last reduce waited for, dK and dV stored, the drain):
//! 3.5 % of a non-causal walk at S4096 (0.9 % at S16384, where kiln runs 1.27x cuDNN), 6.7 % of a
//! causal one. cuDNN's backward there is persistent (132 CTAs).
//! The default for d256 problems that are not deterministic since 2026-12-01 (ledger D81): won
//! in three H200 calls, each version interleaved in one process (2026-11-30 night round 1 on
//! merged 7fe2f34, round 2 on cf63f1d, and the early call of 2026-12-01 on main c36773e): B4 H16
//! S4096 1.014-1.016x `bwd_fa3_d256_tma`, causal 1.014-1.024x `bwd_fa3_d256_lpt`; B1 H16 S16384
//! 1.009-1.021x (one tie, 0.994x by median, in round 2), causal 1.007-1.014x; verified and
//! memcheck clean (D70). `bwd_fa3_d256_tma` (non-causal) and `bwd_fa3_d256_lpt` (causal) stay
//! named versions and the fallback where this one does not fit (16 bytes more shared memory).
//! Kernels compiled when asked for (bf16 and f16; outside the variant budget, which is full).
//! Its sibling with the postprocess in the tail, `bwd_fa3_d256_overlap` (D71), ran 0.915-0.935x
//! this and was deleted on 2026-12-01 (D80).

use super::bwd_fa3_d256;
use super::bwd_fa3_d256_lpt::lpt_asked;
use super::bwd_fa3_wgmma::{launch_main, Sched};
use super::knobs::Knobs;
use super::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::overrides::AttentionOverrides;

/// The persistent d256 backward.
pub struct BwdFa3D256Persist;

impl AttentionBackwardKernel for BwdFa3D256Persist {
    fn name(&self) -> &'static str {
        "bwd_fa3_d256_persist"
    }
    fn summary(&self) -> &'static str {
        "bwd_fa3_d256_tma persistent: one CTA a SM taking key blocks from a counter, the next block's loads under the current one's end"
    }
    fn rung(&self) -> u32 {
        bwd_fa3_d256::RUNG_STAGED + 1
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        bwd_fa3_d256::supports_staged(p, dev)?;
        if p.deterministic {
            return Err("runs the non-deterministic mode only; the deterministic mode at d256 is `bwd_fa3_d256_w2_cols2t` (the default; causal: `bwd_fa3_d256_w2`)".into());
        }
        dev.check_smem(bwd_fa3_d256::persist_smem_bytes())
    }
    fn variants(&self, _arch: &str) -> Vec<KernelSpec> {
        // (its two kernels are compiled when asked for, outside the variant budget)
        Vec::new()
    }
    fn launch_knobs(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
        o: &AttentionOverrides,
    ) -> Result<()> {
        let main = bwd_fa3_d256::persist_spec(&ctx.arch(), p.attn.dtype, o.bwd_d256_p16);
        let sched = Sched {
            lpt: lpt_asked(o.bwd_lpt),
            persist: true,
            ..Sched::of(o)
        };
        launch_main(
            self.name(),
            ctx,
            p,
            ops,
            &main,
            bwd_fa3_d256::persist_smem_bytes(),
            bwd_fa3_d256::BN,
            Some(bwd_fa3_d256::DQ_BOX_COLS),
            false,
            1,
            None,
            sched,
        )
    }
    fn knobs(&self, p: &BackwardProblem) -> Knobs {
        bwd_fa3_d256::d256_knobs(p, 1, true)
    }
    /// The default where it measured faster (ledger D81): every d256 problem it supports, none
    /// deterministic (`supports` refuses those: `bwd_fa3_d256_w2_cols2t` is their default, causal `bwd_fa3_d256_w2`).
    fn by_default(&self) -> bool {
        true
    }
    fn launch_plan(
        &self,
        p: &BackwardProblem,
        dev: &DeviceInfo,
        _o: &AttentionOverrides,
    ) -> Vec<String> {
        let a = &p.attn;
        let tiles = p.key_blocks(bwd_fa3_d256::BN);
        let ctas = tiles.min(dev.sm_count);
        vec![format!(
            "grid: {ctas} persistent CTAs (one a SM) taking {tiles} key blocks of {} keys from a counter{}, {:.2} each",
            bwd_fa3_d256::BN,
            if a.causal { ", longest walk first" } else { "" },
            tiles as f64 / ctas.max(1) as f64
        )]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::{AttentionProblem, DTYPES};
    use crate::ops::registry::Registry;

    #[test]
    fn it_is_the_d256_default_causal_or_not_and_refuses_the_deterministic_mode() {
        let h100 = DeviceInfo::h100_sxm();
        let r = Registry::default();
        let free = BackwardProblem::new(AttentionProblem::new(4, 16, 4096, 256), false);
        assert!(BwdFa3D256Persist.supports(&free, &h100).is_ok());
        assert!(BwdFa3D256Persist.by_default());
        let k = r
            .select_attention_backward(&free, &h100, Some("bwd_fa3_d256_persist"))
            .unwrap();
        assert_eq!(k.name(), "bwd_fa3_d256_persist");
        assert!(r
            .select_attention_backward(&free, &h100, Some("bwd_fa3_d256_overlap"))
            .is_err());
        assert!(bwd_fa3_d256::persist_smem_bytes() <= h100.smem_optin_bytes);
        let k = r.select_attention_backward(&free, &h100, None).unwrap();
        assert_eq!(k.name(), "bwd_fa3_d256_persist");
        let mut causal = free.attn;
        causal.causal = true;
        let k = r
            .select_attention_backward(&BackwardProblem::new(causal, false), &h100, None)
            .unwrap();
        assert_eq!(k.name(), "bwd_fa3_d256_persist");
        // the versions it replaced stay asked for by name
        for v in ["bwd_fa3_d256_tma", "bwd_fa3_d256_lpt"] {
            let k = r.select_attention_backward(&free, &h100, Some(v)).unwrap();
            assert_eq!(k.name(), v);
        }
        let det = BackwardProblem::new(free.attn, true);
        let k = r.select_attention_backward(&det, &h100, None).unwrap();
        assert_eq!(k.name(), "bwd_fa3_d256_w2_cols2t");
        assert!(BwdFa3D256Persist
            .supports(&det, &h100)
            .unwrap_err()
            .contains("bwd_fa3_d256_w2_cols2t"));
        let d128 = BackwardProblem::new(AttentionProblem::new(1, 2, 129, 128), false);
        assert!(BwdFa3D256Persist.supports(&d128, &h100).is_err());
        assert!(BwdFa3D256Persist.variants("sm_90a").is_empty());
    }

    /// Its kernels (bf16, f16) compile for sm_90a with no local memory, no wgmma serialisation
    /// and the register split honoured.
    #[test]
    fn its_kernels_compile_without_spills() {
        let specs: Vec<KernelSpec> = DTYPES
            .iter()
            .map(|&dt| bwd_fa3_d256::persist_spec("sm_90a", dt, false))
            .collect();
        assert!(specs
            .iter()
            .all(|s| s.label().contains("KILN_D256_PERSIST=1")));
        crate::ops::attention_backward::assert_compiles_clean(specs, &["C751", "C7507", "C7508"]);
    }
}
