//! `bwd_fa3_ordered_w2`: `bwd_fa3_ordered_eager` with two dQ writer warps (warps 1 and 2 of the
//! producer warpgroup taking a block's query blocks in turn), what `KILN_BWD_DET_WRITERS=2` asks
//! of it, as a version: the Python package reads no knob, and knob A/Bs in separate CLI processes
//! spread ±6 % at the H200's power cap (the morning of 2026-11-30: d64 B4 H16 S4096 causal 1.124
//! ms with one writer, 0.942 with two, one process each), so a bench times it beside the one
//! writer in one process (`--version bwd_fa3_ordered_eager --version bwd_fa3_ordered_w2`). The
//! same kernels (the writers are a run-time argument, `det_writers`): no variant of its own.
//! Problems that are not deterministic run the one-writer version's choice (the default's kernels).
//! The deterministic mode's default at d64 and d128 since 2026-11-30 (ledger D12, D13): faster than
//! one writer in two rounds and never slower.

use super::bwd_fa3_ordered_eager::{tile, BwdFa3OrderedEager};
use super::bwd_fa3_wgmma::launch_tile_writers;
use super::bwd_fa3_wgmma::wgmma_knobs;
use super::knobs::{Knob, Knobs};
use super::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::overrides::AttentionOverrides;

/// The writer warps it asks for.
pub const WRITERS: u32 = 2;

pub struct BwdFa3OrderedW2;

impl AttentionBackwardKernel for BwdFa3OrderedW2 {
    fn name(&self) -> &'static str {
        "bwd_fa3_ordered_w2"
    }
    fn summary(&self) -> &'static str {
        "bwd_fa3_ordered_eager with two dQ writer warps taking a block's query blocks in turn (KILN_BWD_DET_WRITERS=2 as a version)"
    }
    fn rung(&self) -> u32 {
        9
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        BwdFa3OrderedEager.supports(p, dev)
    }
    fn variants(&self, _arch: &str) -> Vec<KernelSpec> {
        // `bwd_fa3_ordered_eager`'s kernels, which it lists
        Vec::new()
    }
    fn launch_knobs(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
        o: &AttentionOverrides,
    ) -> Result<()> {
        // the one writer's launch with the writers asked for (not deterministic: no writer, the
        // default's kernels)
        launch_tile_writers(self.name(), ctx, p, ops, o, tile(p), Some(WRITERS))
    }
    fn knobs(&self, p: &BackwardProblem) -> Knobs {
        // (its writers are its own: the knob is not read)
        match (p.deterministic, p.attn.causal) {
            (false, _) => wgmma_knobs(p, &tile(p)),
            (true, true) => vec![(Knob::DetLpt, 0)],
            (true, false) => Vec::new(),
        }
    }
    fn by_default(&self) -> bool {
        false
    }
    /// The deterministic mode's default at d64 and d128 (H200, 2026-11-30). The early call (main
    /// f559116, separate processes, ledger D12): d128 B2 H16 S8192 1.02x / 1.14x one writer, causal
    /// 1.08x / 1.04x; the morning's pair at d64 B4 H16 S4096 causal 1.19x. Round 1 (merged
    /// 19f8979, one process, `--vs-nondeterministic`, ledger D13): 1.24x at d128 B2 H16 S8192,
    /// 1.20x causal, 1.16x B4 H32 causal, 1.20x d64 B4 causal, 1.00x d64 B4 S4096, 1.01x / 1.02x
    /// d64 B1 S16384 and causal; against the non-deterministic default (`bwd_fa3_tail`) in the same
    /// processes 0.88-1.00x at all seven shapes (one writer 0.80-0.94x). Verified: d64 causal
    /// over two launch chunks and, as the knob, d128 and GQA causal (runs bitwise equal).
    fn by_default_for(&self, p: &BackwardProblem) -> bool {
        p.deterministic
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;
    use crate::ops::attention_backward::bwd_fa3_wgmma::DetWriter;
    use crate::ops::registry::Registry;

    #[test]
    fn it_runs_the_one_writers_kernels_and_is_asked_for_by_name() {
        let h100 = DeviceInfo::h100_sxm();
        let p = |d, det| BackwardProblem::new(AttentionProblem::new(2, 16, 4096, d), det);
        for d in [64, 128] {
            assert!(BwdFa3OrderedW2.supports(&p(d, true), &h100).is_ok());
            assert_eq!(tile(&p(d, true)).det_writer, DetWriter::Eager);
        }
        assert!(BwdFa3OrderedW2.supports(&p(256, true), &h100).is_err());
        assert!(BwdFa3OrderedW2.variants("sm_90a").is_empty());
        let r = Registry::default();
        let k = r
            .select_attention_backward(&p(128, true), &h100, Some("bwd_fa3_ordered_w2"))
            .unwrap();
        assert_eq!(k.name(), "bwd_fa3_ordered_w2");
        // the deterministic default at d64 and d128 (two rounds faster than one writer); a problem
        // that is not deterministic keeps the other mode's default
        for d in [64, 128] {
            let k = r
                .select_attention_backward(&p(d, true), &h100, None)
                .unwrap();
            assert_eq!(k.name(), "bwd_fa3_ordered_w2");
            let k = r
                .select_attention_backward(&p(d, false), &h100, None)
                .unwrap();
            assert_ne!(k.name(), "bwd_fa3_ordered_w2");
        }
    }
}
