//! `bwd_fa3_d256_ordered`: the deterministic mode at d256 with `bwd_fa3_d256_tma`'s staged dQ
//! added by TMA reduce in a fixed order (`bwd_fa3_d256.cu` with the define `KILN_D256_DET`). The
//! other d256 versions' deterministic mode adds dQ by ordered per-thread atomics with every key
//! block walking the query blocks in the same order, so that at each query block block n waits for
//! block n - 1's adds, fence and bump: 0.30-0.55x the non-deterministic run (H200, 2026-11-30,
//! interleaved), against the 0.85x that issue 47 asks. Here each consumer's adder waits for the
//! block's turn on the (head, query block) counter and adds its staged 64 x 128 tile by one TMA
//! reduce, in the d64/d128 dQ writer's order (`DetOrder`, `det_rank`) and on its walks
//! (non-causal rotated within each wave, causal key blocks launched in reverse), so that a block's
//! turn has mostly come when it gets there. The order of adds is fixed, so runs are bitwise
//! equal; the sums are the non-deterministic staged version's in another order (its error
//! bounds). Problems that are not deterministic run `bwd_fa3_d256_tma`. The deterministic default
//! at d256 from 2026-11-30 (ledger D14, D15: 0.60-0.70x the non-deterministic run in two rounds,
//! where the ordered atomics it replaced ran 0.30-0.54x) until `bwd_fa3_d256_w2` replaced it.
//!   `bwd_fa3_d256_ordered_early` (`KILN_D256_DET=2`): the same, each adder waiting for its
//!   previous reduce's completion, bumping and reading its next counter before the consumers meet
//!   rather than at the block's first product and at the add. Refuted in round 2 (H200,
//!   2026-11-30: 0.92-0.98x the first form, ledger D15); kept for the record.
//!   `bwd_fa3_d256_writer` (`KILN_D256_DET=3`, one writer warp) and `bwd_fa3_d256_w2` (two, taking
//!   the query blocks in turn): the same order and walks, the adds by writer warps of the producer
//!   warpgroup (warps 1 and 2, idle at d256 until now): the consumers hand both staged tiles over
//!   and go on; the writer waits for the block's turn, issues both reduces, releases the stage once
//!   they have read it, waits for their completion and bumps the counter once. Neither the turn
//!   nor the completion is then in a consumer's path (ledger D31). `bwd_fa3_d256_w2` is the
//!   deterministic default at d256 (D31, D33: 0.84-0.95x the non-deterministic run in two rounds
//!   on an H200, 1.32-1.46x `bwd_fa3_d256_ordered`).
//!   The chains of adds (`bwd_fa3_d256_chains`, `_chains4`: the fixed order split over 2 or 4 fp32
//!   accumulators) lost two rounds (0.68-0.92x one chain, ledger D22-D24: the live dQ grew past
//!   the L2) and were deleted on 2026-11-30 (ledger D30).
//! `trace_launch` (`kiln attn bench --backward --det-trace`): one launch of a form compiled with
//! `KILN_D256_TRACE`, whose adders stamp their turns, issues, completions and bumps (the record's
//! layout: `bwd_fa3_d256.cu`), for scripts/det_trace.py.

use super::bwd_fa3_d256::{self, BwdFa3D256, D256, DQ_BOX_COLS};
use super::bwd_fa3_wgmma::{launch_main, Sched};
use super::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceBuffer, DeviceInfo};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::attention::DTYPES;
use crate::ops::gemm::DType;

/// Who adds the ordered tiles, and when: the kernel's `KILN_D256_DET`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetForm {
    /// Each consumer's adder, bumping at the next block's first product (1).
    Ordered,
    /// The same, bumping before the consumers meet (2).
    Early,
    /// Writer warps of the producer warpgroup, 1 or 2 (3; the argument block's `det_writers`).
    Writers(u32),
}

impl DetForm {
    fn define(self) -> u32 {
        match self {
            DetForm::Ordered => 1,
            DetForm::Early => 2,
            DetForm::Writers(_) => 3,
        }
    }
}

/// A d256 ordered-reduce version: `form`, who adds and when; `rotated`, its problems that are not
/// deterministic run on the ordered kernel's rotated walks (non-causal) with no order of adds,
/// where the others run `bwd_fa3_d256_tma`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BwdFa3D256Ordered {
    pub form: DetForm,
    pub rotated: bool,
}

impl BwdFa3D256Ordered {
    /// `bwd_fa3_d256_ordered`: the first ordered form (the d256 deterministic default before w2).
    pub const ORDERED: Self = BwdFa3D256Ordered {
        form: DetForm::Ordered,
        rotated: false,
    };
    /// `bwd_fa3_d256_ordered_early`.
    pub const EARLY: Self = BwdFa3D256Ordered {
        form: DetForm::Early,
        rotated: false,
    };
    /// `bwd_fa3_d256_writer`: one writer warp.
    pub const WRITER: Self = BwdFa3D256Ordered {
        form: DetForm::Writers(1),
        rotated: false,
    };
    /// `bwd_fa3_d256_w2`: two writer warps taking the query blocks in turn; the deterministic
    /// default at d256.
    pub const W2: Self = BwdFa3D256Ordered {
        form: DetForm::Writers(2),
        rotated: false,
    };
    /// `bwd_fa3_d256_rotated`: a diagnostic, `bwd_fa3_d256_ordered` whose problems that are not
    /// deterministic run on its rotated walks (non-causal) without the order: what the walk alone
    /// costs beside `bwd_fa3_d256_tma`'s, where every block of a head is on the same query tile
    /// (the writers' ceiling: the same walk with no wait for the order).
    pub const ROTATED: Self = BwdFa3D256Ordered {
        form: DetForm::Ordered,
        rotated: true,
    };
    /// Every version, in the registry's order.
    pub const ALL: [Self; 5] = [
        Self::ORDERED,
        Self::EARLY,
        Self::WRITER,
        Self::W2,
        Self::ROTATED,
    ];

    /// The version called `name`, if it is one of these.
    pub fn by_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }

    /// One launch of the deterministic `p` on the kernel compiled with `KILN_D256_TRACE`, and its
    /// stamps: [`TRACE_WORDS`] u32 a record, record `(block · 2 + role) · group · m_blocks + it`
    /// (`bwd_fa3_d256.cu` says what each word holds; a record never stamped stays 0). For `kiln
    /// attn bench --backward --det-trace`; never part of dispatch.
    pub fn trace_launch(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
    ) -> Result<Vec<u32>> {
        if !p.deterministic || self.rotated {
            return Err(Error::Unsupported {
                kernel: self.name().into(),
                reason: "the trace stamps the deterministic mode's ordered adds; add --deterministic (and name an ordered form, not the rotated diagnostic)".into(),
            });
        }
        let a = &p.attn;
        let blocks = a.seqlen_kv.div_ceil(bwd_fa3_d256::BN as usize) * a.heads_kv * a.batch;
        let words = blocks * 2 * a.group() * a.seqlen_q.div_ceil(64) * TRACE_WORDS;
        let buf = DeviceBuffer::new(words * 4)?;
        buf.fill_bytes(0, ctx)?;
        self.launch_with(ctx, p, ops, true, buf.ptr())?;
        ctx.synchronize()?;
        buf.download(words)
    }

    fn launch_with(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
        trace: bool,
        det_trace: u64,
    ) -> Result<()> {
        let main = spec(
            &ctx.arch(),
            p.attn.dtype,
            self.form,
            ctx.overrides.attention.bwd_d256_p16,
            trace,
        );
        // det_writer: the argument block's order of adds and SMs (`det_args`), and the writer
        // warps of the writer forms (the others ignore the count)
        let det_writers = match self.form {
            DetForm::Writers(n) => Some(n),
            _ => None,
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
            true,
            1,
            None,
            Sched {
                det_writers,
                det_trace,
                rotate: self.rotated,
                ..Sched::of(ctx)
            },
        )
    }
}

/// The u32 words of one trace record (`bwd_fa3_d256.cu`'s `TRACE_WORDS`).
pub const TRACE_WORDS: usize = 16;

/// The kernel for `dtype`: the staged version's with the define `KILN_D256_DET` of `form` (`p16`:
/// `KILN_BWD_D256_P16`; `trace`: `KILN_D256_TRACE`, the diagnostic's stamps).
pub fn spec(arch: &str, dtype: DType, form: DetForm, p16: bool, trace: bool) -> KernelSpec {
    let s =
        bwd_fa3_d256::spec(arch, dtype, D256::Staged, p16).define("KILN_D256_DET", form.define());
    if trace {
        s.define("KILN_D256_TRACE", 1)
    } else {
        s
    }
}

impl AttentionBackwardKernel for BwdFa3D256Ordered {
    fn name(&self) -> &'static str {
        match self.form {
            _ if self.rotated => "bwd_fa3_d256_rotated",
            DetForm::Ordered => "bwd_fa3_d256_ordered",
            DetForm::Early => "bwd_fa3_d256_ordered_early",
            DetForm::Writers(1) => "bwd_fa3_d256_writer",
            DetForm::Writers(_) => "bwd_fa3_d256_w2",
        }
    }
    fn summary(&self) -> &'static str {
        match self.form {
            _ if self.rotated => "bwd_fa3_d256_ordered whose non-deterministic runs take its rotated walks without the order (a diagnostic of the walk's cost)",
            DetForm::Ordered => "bwd_fa3_d256_tma whose deterministic mode adds the staged dQ tiles by TMA reduce in the dQ writer's fixed order, on its rotated (causal: reversed) walks",
            DetForm::Early => "bwd_fa3_d256_ordered with each adder's completion wait, bump and next counter read before the consumers meet",
            DetForm::Writers(1) => "bwd_fa3_d256_ordered with the adds by a writer warp of the producer warpgroup: the consumers wait for no turn and no completion",
            DetForm::Writers(_) => "bwd_fa3_d256_writer with two writer warps taking the query blocks in turn",
        }
    }
    fn rung(&self) -> u32 {
        11 + match self.form {
            _ if self.rotated => 4,
            DetForm::Ordered => 0,
            DetForm::Early => 1,
            DetForm::Writers(n) => 1 + n,
        }
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        BwdFa3D256(D256::Staged).supports(p, dev)
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        // the deterministic default's kernels (its preprocess and postprocess are the other d256
        // versions'); the other forms' compile when asked for, outside the variant budget (the
        // test below compiles them)
        if *self == Self::W2 {
            DTYPES
                .iter()
                .map(|&dt| spec(arch, dt, self.form, false, false))
                .collect()
        } else {
            Vec::new()
        }
    }
    fn launch(&self, ctx: &Context, p: &BackwardProblem, ops: &BackwardOperands) -> Result<()> {
        if !p.deterministic && !self.rotated {
            return BwdFa3D256(D256::Staged).launch(ctx, p, ops);
        }
        self.launch_with(ctx, p, ops, false, 0)
    }
    fn by_default(&self) -> bool {
        false
    }
    /// The deterministic mode's default at d256: `bwd_fa3_d256_w2` (H200, 2026-11-30, ledger D31,
    /// D33: verified over two and three waves, GQA causal f16 and Sq 65 Skv 200, runs bitwise
    /// equal, memcheck clean; in one process with the non-deterministic run, 0.84-0.95x it at B4
    /// H16 S4096 and B1 H16 S16384, causal or not, in two rounds, where `bwd_fa3_d256_ordered` ran
    /// 0.59-0.70x). Not the non-deterministic mode's (it runs `bwd_fa3_d256_tma` there anyway).
    fn by_default_for(&self, p: &BackwardProblem) -> bool {
        *self == Self::W2 && p.deterministic
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;
    use crate::ops::registry::Registry;

    #[test]
    fn they_take_d256_by_name_and_two_writers_are_the_deterministic_default() {
        let h100 = DeviceInfo::h100_sxm();
        let p = |d, det| BackwardProblem::new(AttentionProblem::new(1, 2, 129, d), det);
        let r = Registry::default();
        let names: Vec<&str> = BwdFa3D256Ordered::ALL.iter().map(|v| v.name()).collect();
        assert_eq!(
            names,
            [
                "bwd_fa3_d256_ordered",
                "bwd_fa3_d256_ordered_early",
                "bwd_fa3_d256_writer",
                "bwd_fa3_d256_w2",
                "bwd_fa3_d256_rotated"
            ]
        );
        let mut rungs: Vec<u32> = BwdFa3D256Ordered::ALL.iter().map(|v| v.rung()).collect();
        rungs.dedup();
        assert_eq!(rungs.len(), 5);
        for v in BwdFa3D256Ordered::ALL {
            assert_eq!(BwdFa3D256Ordered::by_name(v.name()), Some(v));
            assert!(v.supports(&p(256, true), &h100).is_ok());
            assert!(v.supports(&p(128, true), &h100).is_err());
            // only the default's kernels count in `kiln check`
            let n = if v == BwdFa3D256Ordered::W2 { 2 } else { 0 };
            assert_eq!(v.variants("sm_90a").len(), n);
            let k = r
                .select_attention_backward(&p(256, true), &h100, Some(v.name()))
                .unwrap();
            assert_eq!(k.name(), v.name());
            let label = spec("sm_90a", DTYPES[0], v.form, false, false).label();
            let det = format!("KILN_D256_DET={}", v.form.define());
            assert!(
                label.contains(&det)
                    && label.contains("KILN_D256_DQ=1")
                    && !label.contains("KILN_D256_TRACE"),
                "{label}"
            );
            assert_eq!(v.by_default_for(&p(256, true)), v == BwdFa3D256Ordered::W2);
            assert!(!v.by_default_for(&p(256, false)));
        }
        assert_eq!(BwdFa3D256Ordered::by_name("bwd_fa3_d256_chains"), None);
        // the deterministic default at d256; the non-deterministic one stays the staged version,
        // and d64/d128 keep the two writers
        let pick = |d, det| {
            r.select_attention_backward(&p(d, det), &h100, None)
                .unwrap()
                .name()
        };
        assert_eq!(pick(256, true), "bwd_fa3_d256_w2");
        assert_eq!(pick(256, false), "bwd_fa3_d256_tma");
        assert_eq!(pick(128, true), "bwd_fa3_ordered_w2");
        assert_eq!(pick(64, true), "bwd_fa3_ordered_w2");
    }

    /// Their kernels (bf16, f16; each form; with and without `KILN_BWD_D256_P16`; the writer and
    /// the first form traced) compile for sm_90a with no local memory, no wgmma serialisation and
    /// the register split honoured.
    #[test]
    fn every_variant_compiles_without_spills() {
        let mut specs = Vec::new();
        for dt in DTYPES {
            for form in [DetForm::Ordered, DetForm::Early, DetForm::Writers(1)] {
                for p16 in [false, true] {
                    specs.push(spec("sm_90a", dt, form, p16, false));
                }
            }
        }
        for form in [DetForm::Ordered, DetForm::Writers(1)] {
            specs.push(spec("sm_90a", DTYPES[0], form, false, true));
        }
        crate::ops::attention_backward::assert_compiles_clean(specs, &["C751", "C7507", "C7508"]);
    }
}
