//! `bwd_fa3_ordered_w2`: `bwd_fa3_ordered_eager` with two dQ writer warps (warps 1 and 2 of the
//! producer warpgroup taking a block's query blocks in turn), what `KILN_BWD_DET_WRITERS=2` asks
//! of it, as a version: the Python package reads no knob, and knob A/Bs in separate CLI processes
//! spread ±6 % at the H200's power cap (the morning of 2026-11-30: d64 B4 H16 S4096 causal 1.124
//! ms with one writer, 0.942 with two, one process each), so a bench times it beside the one
//! writer in one process (`--version bwd_fa3_ordered_eager --version bwd_fa3_ordered_w2`). The
//! same kernels (the writers are a run-time argument, `det_writers`): no variant of its own.
//! Problems that are not deterministic run the one-writer version's choice (the default's kernels).

use super::bwd_fa3_ordered_eager::{tile, BwdFa3OrderedEager};
use super::bwd_fa3_wgmma::{launch_main, launch_tile, Sched, BN};
use super::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;

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
    fn launch(&self, ctx: &Context, p: &BackwardProblem, ops: &BackwardOperands) -> Result<()> {
        let t = tile(p);
        if !p.deterministic {
            return launch_tile(self.name(), ctx, p, ops, t);
        }
        // launch_tile's launch of a writer tile (no split: the writer's walk has none), with the
        // writers asked for
        let main = t.spec(&ctx.arch(), p.attn.dtype);
        launch_main(
            self.name(),
            ctx,
            p,
            ops,
            &main,
            t.smem_bytes(),
            BN,
            Some(t.dq_cols()),
            true,
            1,
            None,
            Sched {
                det_writers: Some(WRITERS),
                ..Sched::of(ctx)
            },
        )
    }
    fn by_default(&self) -> bool {
        false
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
        // not the default (one writer stays until the device says otherwise)
        let k = r
            .select_attention_backward(&p(128, true), &h100, None)
            .unwrap();
        assert_eq!(k.name(), "bwd_fa3_ordered_eager");
    }
}
