//! `bwd_fa3_d256_w2` and the versions on its kernel: the deterministic mode at d256 with
//! `bwd_fa3_d256_tma`'s staged dQ added by TMA reduce in a fixed order (`bwd_fa3_d256.cu` with the
//! define `KILN_D256_DET` 3). The other d256 versions' deterministic mode adds dQ by ordered
//! per-thread atomics with every key block walking the query blocks in the same order, so that at
//! each query block block n waits for block n - 1's adds, fence and bump: 0.30-0.55x the
//! non-deterministic run (H200, 2026-11-30), against the 0.85x that issue 47 asks. Here two writer
//! warps of the producer warpgroup (warps 1 and 2, idle at d256 otherwise, taking the query blocks
//! in turn) add both consumers' staged tiles of a block: the consumers hand them over and go on;
//! the writer waits for the block's turn on the (head, query block) counter, issues both reduces,
//! releases the stage once they have read it, waits for their completion and bumps the counter
//! once. The order is the d64/d128 dQ writer's (`DetOrder`, `det_rank`) on its walks (non-causal
//! rotated within each wave, causal key blocks launched in reverse), so runs are bitwise equal;
//! the sums are the staged version's in another order (its error bounds). Problems that are not
//! deterministic run `bwd_fa3_d256_tma`.
//!   `bwd_fa3_d256_w2`: the deterministic default at d256 (ledger D31, D33: 0.84-0.95x the
//!   non-deterministic run in two rounds on an H200, 1.32-1.46x the consumers' own ordered adds);
//!   since 2026-12-01 for causal problems only (D113).
//!   `bwd_fa3_d256_rotated`: a diagnostic, w2's kernel run on a problem that is not deterministic
//!   on its rotated walks (non-causal) with no order of adds: the walk's own cost beside
//!   `bwd_fa3_d256_tma`'s, where every block of a head is on the same query tile (the ceiling of
//!   any form on that walk). Until 2026-11-30 it ran the first ordered form's kernel.
//!   `bwd_fa3_d256_w2_cols2` (`KILN_D256_DQ_PARTS` 2; ledger D110): w2 whose order is split into
//!   two column parts of each dQ tile (128 columns each), each with its own counter, so that a
//!   hop of the chain waits for one part's reduce, not the whole tile's; the same sums
//!   in the same order per element as w2 (bitwise w2's results). The deterministic default at
//!   d256 for non-causal problems from 2026-12-01 to `_cols2t` (D113: 1.015-1.055x w2 at B1 H16 S16384 and B4
//!   H16 S4096 in two calls on an H200; causal 0.984x and 0.997x in one, not a win); its kernels
//!   compile at first use, outside the variant budget (as `bwd_fa3_d256_persist`'s).
//!   `bwd_fa3_d256_w2_cols2t` (`KILN_BWD_TAIL`; ledger D120): `_cols2` with the grid's last
//!   partial wave split into parts that fit on the SMs together, each walking a share of its key
//!   block's rotated walk at the key block's rank (the same dQ sums), dK and dV summed over the
//!   parts in part order: the deterministic default at d256 for non-causal problems since
//!   2026-12-02 (1.020-1.030x `_cols2` at B1 H16 S16384 and B4 H16 S4096 on an H200).
//! Deleted on 2026-11-30 (ledger D50): the first ordered form `bwd_fa3_d256_ordered` (each
//! consumer's adder waiting for the turn; the default before w2), its early-bump form
//! `bwd_fa3_d256_ordered_early` (refuted, D15) and the one-writer `bwd_fa3_d256_writer` (0.77-0.88x,
//! below w2 in two rounds): no A/B needs them now that w2 is the default, and w2's kernel holds
//! their code no more. The chains of adds (`bwd_fa3_d256_chains`, `_chains4`) went before (D30).
//! Deleted on 2026-11-30 night (ledger D60), each having lost two rounds to w2 (D51, D52):
//! `bwd_fa3_d256_w2_spread` (the non-causal blocks launched in chunks of heads, so that a query
//! block's adders came two or more steps apart: 0.988-1.000x w2) and `bwd_fa3_d256_w2_halves`
//! (`KILN_D256_DET` 4, each block's two dQ halves ordered apart: 0.990-0.999x).
//! Deleted on 2026-12-01 (ledger D90): `bwd_fa3_d256_w2_pair` (w2 in clusters of two key blocks,
//! the two CTAs' dQ partials summed in shared memory by one warp before one ordered reduce a
//! pair: 0.51-0.56x w2, a serial cost of ~3 us a step), for `bwd_fa3_d256_w2_persist`.
//! Deleted on 2026-12-01 (ledger D105): `bwd_fa3_d256_w2_pf` (D103: w2's writers prefetching their
//! next dQ tile into L2, 0.87-0.94x w2 in two calls).
//! Deleted on 2026-12-01 (ledger D100), each having lost two rounds to w2:
//! `bwd_fa3_d256_w2_persist` (D91: w2's writers on the persistent walk, 0.960-0.968x) and its
//! diagnostic `bwd_fa3_d256_w2_r232` (D92: w2 at the persistent kernel's 40 / 232 register
//! split, 0.967-0.985x).
//! Deleted on 2026-12-01 (ledger D106): `bwd_fa3_d256_w2_gs1` (D102: every rotated group's blocks
//! one query block apart, `KILN_BWD_DET_GS1`; in three calls 1.004-1.024x w2 at B1 H16 S16384,
//! within the spread, and 0.981-0.987x at B4 H16 S4096) and its diagnostic
//! `bwd_fa3_d256_rotated_gs1` (0.986x `bwd_fa3_d256_rotated`).
//! Deleted on 2026-12-01 (ledger D112): `bwd_fa3_d256_w2_cols4` (the same in four parts of 64
//! columns: 0.78-0.87x w2 in two calls, the stage held through four turns and bumps).
//! Deleted on 2026-12-02 (ledger D121): `bwd_fa3_d256_w2_cols2e` (`KILN_D256_DQ_EAGER`, D111:
//! `_cols2` whose last part was bumped before the next block's counter was read; level with
//! `_cols2` in two calls, +0.3-1.1 % and -0.9 to +0.4 %).
//! `trace_launch` (`kiln attn bench --backward --det-trace`): one launch of the version's kernel
//! (w2's, or a column-parts form's: part 0's chain) compiled with `KILN_D256_TRACE`, whose
//! writers stamp their turns, issues, completions and bumps (the record's layout:
//! `bwd_fa3_d256.cu`), for scripts/det_trace.py.

use super::bwd_fa3_d256::{self, D256};
use super::bwd_fa3_wgmma::{tail_knob, Sched};
use super::knobs::{Knob, Knobs};
use super::tail::{self, TailPlan};
use super::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceBuffer, DeviceInfo};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::attention::DTYPES;
use crate::ops::gemm::DType;
use crate::overrides::AttentionOverrides;

/// A version on the two-writer kernel: how its blocks are launched and walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum D256Det {
    /// `bwd_fa3_d256_w2`: the grid's order, the waves' rotated walks (non-causal).
    W2,
    /// `bwd_fa3_d256_rotated`: the diagnostic, w2's walks without the order on problems that are
    /// not deterministic.
    Rotated,
    /// `bwd_fa3_d256_w2_cols2`: w2 with each tile's order in two column parts (128 columns each,
    /// a counter each).
    Cols2,
    /// `bwd_fa3_d256_w2_cols2t`: `Cols2` with the grid's last partial wave split into parts
    /// (`KILN_BWD_TAIL`, non-causal; [`tail::plan_ordered`]).
    Cols2t,
}

impl D256Det {
    /// The counters (column parts) a dQ tile's order has: `KILN_D256_DQ_PARTS`.
    pub fn parts(self) -> u32 {
        match self {
            D256Det::W2 | D256Det::Rotated => 1,
            D256Det::Cols2 | D256Det::Cols2t => 2,
        }
    }

    /// Whether the kernel splits the last partial wave (`KILN_BWD_TAIL`; where the problem has
    /// one and the walk allows it: [`tail::plan_ordered`]).
    pub fn tail(self) -> bool {
        self == D256Det::Cols2t
    }
}

/// One of the versions on the d256 two-writer kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BwdFa3D256Ordered(pub D256Det);

/// The writer warps every version asks for (the argument block's `det_writers`).
const WRITERS: u32 = 2;

impl BwdFa3D256Ordered {
    /// `bwd_fa3_d256_w2`: the deterministic default at d256 for causal problems.
    pub const W2: Self = BwdFa3D256Ordered(D256Det::W2);
    /// `bwd_fa3_d256_rotated`.
    pub const ROTATED: Self = BwdFa3D256Ordered(D256Det::Rotated);
    /// `bwd_fa3_d256_w2_cols2`.
    pub const COLS2: Self = BwdFa3D256Ordered(D256Det::Cols2);
    /// `bwd_fa3_d256_w2_cols2t`.
    pub const COLS2T: Self = BwdFa3D256Ordered(D256Det::Cols2t);
    /// Every version, in the registry's order.
    pub const ALL: [Self; 4] = [Self::W2, Self::ROTATED, Self::COLS2, Self::COLS2T];

    /// The version called `name`, if it is one of these.
    pub fn by_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|v| v.name() == name)
    }

    /// One launch of the deterministic `p` on w2's kernel compiled with `KILN_D256_TRACE`, and its
    /// stamps: [`TRACE_WORDS`] u32 a record, record `(block · 2 + role) · group · m_blocks + it`
    /// (`bwd_fa3_d256.cu` says what each word holds; a record never stamped stays 0). For `kiln
    /// attn bench --backward --det-trace`; never part of dispatch.
    pub fn trace_launch(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
    ) -> Result<Vec<u32>> {
        if !p.deterministic || self.0 == D256Det::Rotated {
            return Err(Error::Unsupported {
                kernel: self.name().into(),
                reason: "the trace stamps the deterministic mode's ordered adds; add --deterministic and name bwd_fa3_d256_w2 or a _cols version".into(),
            });
        }
        let a = &p.attn;
        // (the traced kernel runs the grid whole: launch_traced)
        let blocks = p.key_blocks(bwd_fa3_d256::BN) as usize;
        let words = blocks * 2 * a.group() * a.seqlen_q.div_ceil(64) * TRACE_WORDS;
        let buf = DeviceBuffer::new(words * 4)?;
        buf.fill_bytes(0, ctx)?;
        let o = super::knobs::resolve(ctx, self.name(), p);
        self.launch_traced(ctx, p, ops, &o, true, buf.ptr())?;
        ctx.synchronize()?;
        buf.download(words)
    }

    /// The launch under the knobs `o`; `trace`: on the kernel that stamps its ordered adds into
    /// `det_trace`.
    fn launch_traced(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
        o: &AttentionOverrides,
        trace: bool,
        det_trace: u64,
    ) -> Result<()> {
        let p16 = o.bwd_d256_p16;
        // the split where the version asks for it and the problem has a last partial wave (the
        // traced kernel stamps whole blocks only)
        let split = if self.0.tail() && !trace {
            split_for(o.bwd_tail, p, ctx.info.sm_count)
        } else {
            None
        };
        let form = if self.0.tail() && split.is_none() {
            D256Det::Cols2
        } else {
            self.0
        };
        let main = spec(&ctx.arch(), p.attn.dtype, p16, trace, form);
        let sched = Sched {
            split,
            det_writers: WRITERS,
            det_trace,
            rotate: self.0 == D256Det::Rotated,
            dq_parts: self.0.parts(),
            ..Sched::of(o)
        };
        bwd_fa3_d256::launch_staged(self.name(), ctx, p, ops, &main, true, sched)
    }
}

/// The u32 words of one trace record (`bwd_fa3_d256.cu`'s `TRACE_WORDS`).
pub const TRACE_WORDS: usize = 16;

/// The key blocks of `p`'s grid and each one's query-block steps.
fn units_steps(p: &BackwardProblem) -> (u32, u32) {
    let a = &p.attn;
    (
        p.key_blocks(bwd_fa3_d256::BN),
        a.group() as u32 * (a.seqlen_q as u32).div_ceil(64),
    )
}

/// The split of `p`'s grid on `sms` SMs for `bwd_fa3_d256_w2_cols2t`: `KILN_BWD_TAIL`'s parts
/// (`knob`; unset: the model's) where `p` is non-causal and deterministic and its grid has a
/// last partial wave.
fn split_for(knob: Option<u32>, p: &BackwardProblem, sms: u32) -> Option<TailPlan> {
    if !tail::applies_ordered(p) {
        return None;
    }
    let (units, steps) = units_steps(p);
    tail::plan_ordered(tail_knob(knob, true), units, sms, steps)
}

/// The two-writer kernel of `form` for `dtype`: the staged version's with the define
/// `KILN_D256_DET` 3 (`p16`: `KILN_BWD_D256_P16`; `trace`: `KILN_D256_TRACE`, the diagnostic's
/// stamps); the form's column parts (`KILN_D256_DQ_PARTS`, the tile's order in parts) and split
/// last wave (`KILN_BWD_TAIL`).
pub fn spec(arch: &str, dtype: DType, p16: bool, trace: bool, form: D256Det) -> KernelSpec {
    let mut s = bwd_fa3_d256::spec(arch, dtype, D256::Staged, p16).define("KILN_D256_DET", 3);
    if form.parts() > 1 {
        s = s.define("KILN_D256_DQ_PARTS", form.parts() as i64);
    }
    if form.tail() {
        s = s.define("KILN_BWD_TAIL", 1);
    }
    if trace {
        s.define("KILN_D256_TRACE", 1)
    } else {
        s
    }
}

impl AttentionBackwardKernel for BwdFa3D256Ordered {
    fn name(&self) -> &'static str {
        match self.0 {
            D256Det::W2 => "bwd_fa3_d256_w2",
            D256Det::Rotated => "bwd_fa3_d256_rotated",
            D256Det::Cols2 => "bwd_fa3_d256_w2_cols2",
            D256Det::Cols2t => "bwd_fa3_d256_w2_cols2t",
        }
    }
    fn summary(&self) -> &'static str {
        match self.0 {
            D256Det::W2 => "bwd_fa3_d256_tma whose deterministic mode adds the staged dQ tiles by two writer warps' TMA reduces in the dQ writer's fixed order, on its rotated (causal: reversed) walks",
            D256Det::Rotated => "bwd_fa3_d256_w2 whose non-deterministic runs take its rotated walks without the order (a diagnostic of the walk's cost)",
            D256Det::Cols2 => "bwd_fa3_d256_w2 with each dQ tile's order in two column parts, a counter each, so that a hop waits for one part's reduce",
            D256Det::Cols2t => "bwd_fa3_d256_w2_cols2 with the grid's last partial wave split into parts, each adding at its key block's rank",
        }
    }
    fn rung(&self) -> u32 {
        bwd_fa3_d256::RUNG_STAGED
            + 2
            + match self.0 {
                D256Det::W2 => 0,
                D256Det::Rotated => 1,
                D256Det::Cols2 => 2,
                D256Det::Cols2t => 3,
            }
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        bwd_fa3_d256::supports_staged(p, dev)
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        // w2's kernels (its preprocess and postprocess are the other d256 versions'); the
        // diagnostic launches the same kernels
        if self.0 == D256Det::W2 {
            DTYPES
                .iter()
                .map(|&dt| spec(arch, dt, false, false, D256Det::W2))
                .collect()
        } else {
            Vec::new()
        }
    }
    fn launch_knobs(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
        o: &AttentionOverrides,
    ) -> Result<()> {
        if !p.deterministic && self.0 != D256Det::Rotated {
            return bwd_fa3_d256::BwdFa3D256(D256::Staged).launch_knobs(ctx, p, ops, o);
        }
        self.launch_traced(ctx, p, ops, o, false, 0)
    }
    fn knobs(&self, p: &BackwardProblem) -> Knobs {
        if !p.deterministic && self.0 != D256Det::Rotated {
            return bwd_fa3_d256::BwdFa3D256(D256::Staged).knobs(p);
        }
        let mut v = vec![(Knob::P16, 0)];
        if self.0.tail() && tail::applies_ordered(p) {
            v.push((Knob::Tail, 1));
        }
        v
    }
    fn by_default(&self) -> bool {
        false
    }
    fn launch_plan(
        &self,
        p: &BackwardProblem,
        dev: &DeviceInfo,
        o: &AttentionOverrides,
    ) -> Vec<String> {
        if !p.deterministic && self.0 != D256Det::Rotated {
            return vec!["not deterministic: runs bwd_fa3_d256_tma's launch".into()];
        }
        let (units, steps) = units_steps(p);
        let mut v = vec![tail::grid_line(units, bwd_fa3_d256::BN, dev.sm_count)];
        v.push(if p.attn.causal {
            "order: key blocks launched in reverse, each query tile added to from the last key block that sees it down (a block waits only for blocks launched before it)".into()
        } else {
            "order: the blocks of a head in one wave walk rotated, reaching each query tile one after another, and add in that order after the earlier waves'".into()
        });
        v.push(format!(
            "adds: two writer warps, each dQ tile's order in {} (a counter each)",
            if self.0.parts() > 1 {
                "two column parts"
            } else {
                "one"
            }
        ));
        if self.0.tail() {
            v.push(match split_for(o.bwd_tail, p, dev.sm_count) {
                Some(t) => tail::split_line(&t, steps, true),
                None => "no split: causal, no partial last wave, or fewer than 2 parts fit on the SMs beside it (KILN_BWD_TAIL 0 turns it off)".into(),
            });
        }
        v
    }
    /// The deterministic mode's default at d256: `bwd_fa3_d256_w2_cols2t` for non-causal problems
    /// (`_cols2`, H200, 2026-12-01, ledger D110, D113: verified over three waves, causal, GQA BHSD
    /// f16, one-step tiles and Sq 65 Skv 200 under memcheck, runs bitwise equal; in one process
    /// with w2, 1.015-1.055x it at B1 H16 S16384 and B4 H16 S4096 in two calls; with the last
    /// partial wave split, 2026-12-02, ledger D120), `bwd_fa3_d256_w2` for
    /// causal ones (2026-11-30, D31, D33, D34: 0.90-0.95x the non-deterministic run in two rounds;
    /// `_cols2` 0.984x and 0.997x w2 there, D113). Not the non-deterministic mode's (it runs
    /// `bwd_fa3_d256_tma` there anyway).
    fn by_default_for(&self, p: &BackwardProblem) -> bool {
        let want = if p.attn.causal {
            D256Det::W2
        } else {
            D256Det::Cols2t
        };
        self.0 == want && p.deterministic
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
                "bwd_fa3_d256_w2",
                "bwd_fa3_d256_rotated",
                "bwd_fa3_d256_w2_cols2",
                "bwd_fa3_d256_w2_cols2t"
            ]
        );
        let mut rungs: Vec<u32> = BwdFa3D256Ordered::ALL.iter().map(|v| v.rung()).collect();
        rungs.dedup();
        assert_eq!(rungs.len(), 4);
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
            assert_eq!(
                v.by_default_for(&p(256, true)),
                v == BwdFa3D256Ordered::COLS2T
            );
            let mut causal = p(256, true);
            causal.attn.causal = true;
            assert_eq!(v.by_default_for(&causal), v == BwdFa3D256Ordered::W2);
            assert!(!v.by_default_for(&p(256, false)));
        }
        let label = spec("sm_90a", DTYPES[0], false, false, D256Det::W2).label();
        assert!(
            label.contains("KILN_D256_DET=3")
                && label.contains("KILN_D256_DQ=1")
                && !label.contains("KILN_D256_TRACE")
                && !label.contains("KILN_D256_DQ_PARTS")
                && !label.contains("KILN_BWD_TAIL"),
            "{label}"
        );
        // the column parts: the define, and as many counters a query block; the split's define
        for (v, n) in [
            (BwdFa3D256Ordered::COLS2, 2),
            (BwdFa3D256Ordered::COLS2T, 2),
        ] {
            assert_eq!(v.0.parts(), n);
            let label = spec("sm_90a", DTYPES[0], false, false, v.0).label();
            assert!(
                label.contains(&format!("KILN_D256_DQ_PARTS={n}")),
                "{label}"
            );
            assert_eq!(
                label.contains("KILN_BWD_TAIL=1"),
                v == BwdFa3D256Ordered::COLS2T,
                "{label}"
            );
        }
        assert_eq!(BwdFa3D256Ordered::W2.0.parts(), 1);
        // deleted (ledger D30, D50, D60, D90, D100, D105, D106, D112, D121)
        for gone in [
            "bwd_fa3_d256_chains",
            "bwd_fa3_d256_ordered",
            "bwd_fa3_d256_ordered_early",
            "bwd_fa3_d256_writer",
            "bwd_fa3_d256_tail",
            "bwd_fa3_d256_w2_spread",
            "bwd_fa3_d256_w2_halves",
            "bwd_fa3_d256_w2_pair",
            "bwd_fa3_d256_w2_persist",
            "bwd_fa3_d256_w2_r232",
            "bwd_fa3_d256_w2_pf",
            "bwd_fa3_d256_w2_gs1",
            "bwd_fa3_d256_rotated_gs1",
            "bwd_fa3_d256_w2_cols4",
            "bwd_fa3_d256_w2_cols2e",
        ] {
            assert_eq!(BwdFa3D256Ordered::by_name(gone), None);
            assert!(r
                .select_attention_backward(&p(256, true), &h100, Some(gone))
                .is_err());
        }
        // the deterministic default at d256; the non-deterministic one is the persistent staged
        // kernel (since 2026-12-01), and d64/d128 keep the two writers
        let pick = |d, det| {
            r.select_attention_backward(&p(d, det), &h100, None)
                .unwrap()
                .name()
        };
        assert_eq!(pick(256, true), "bwd_fa3_d256_w2_cols2t");
        let mut causal = p(256, true);
        causal.attn.causal = true;
        let k = r.select_attention_backward(&causal, &h100, None).unwrap();
        assert_eq!(k.name(), "bwd_fa3_d256_w2");
        assert_eq!(pick(256, false), "bwd_fa3_d256_persist");
        assert_eq!(pick(128, true), "bwd_fa3_ordered_w2");
        assert_eq!(pick(64, true), "bwd_fa3_ordered_w2");
    }

    /// Their kernels (`KILN_BWD_D256_P16`'s; traced; the column parts', among them the non-causal
    /// default's in both types; the split last wave's) compile for sm_90a with no local memory, no
    /// wgmma serialisation and the register split honoured (w2's own in tests/compile.rs).
    #[test]
    fn every_variant_compiles_without_spills() {
        let specs = vec![
            spec("sm_90a", DTYPES[0], true, false, D256Det::W2),
            spec("sm_90a", DTYPES[0], false, true, D256Det::W2),
            // (the non-causal default's, compiled at first use)
            spec("sm_90a", DTYPES[0], false, false, D256Det::Cols2),
            spec("sm_90a", DTYPES[1], false, false, D256Det::Cols2),
            spec("sm_90a", DTYPES[0], false, true, D256Det::Cols2),
            // the split last wave's, both types
            spec("sm_90a", DTYPES[0], false, false, D256Det::Cols2t),
            spec("sm_90a", DTYPES[1], false, false, D256Det::Cols2t),
        ];
        crate::ops::attention_backward::assert_compiles_clean(specs, &["C751", "C7507", "C7508"]);
    }
}
