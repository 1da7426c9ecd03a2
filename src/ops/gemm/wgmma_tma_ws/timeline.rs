//! The instrumented variant for `kiln profile --timeline`: the events it stamps, and one
//! instrumented launch.

use super::WgmmaTmaWs;
use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::ops::gemm::{CtaStamps, GemmKernel, GemmOperands, GemmProblem};

/// What the instrumented variant stamps (the kernel's `TraceEvent`, in order), each once per CTA
/// by the one thread that sees it.
pub const TRACE_EVENTS: [&str; crate::ops::gemm::MAX_TRACE_EVENTS] = [
    "entry",
    "block synced (barriers set up; single CTAs' first loads out)",
    "first stage's loads issued",
    "last loads issued",
    "consumer 0: first stage full",
    "consumer 0: mainloop end (last unit)",
    "consumer 0: done (stores complete)",
    "consumer 1: done (stores complete)",
];

impl WgmmaTmaWs {
    /// One instrumented launch of `p` (the config `launch` would run, unsplit: the stamps take
    /// the split-K workspace's place): the stamps of every CTA, in launch order. For
    /// `kiln profile --timeline`; never part of dispatch.
    pub(super) fn trace_launch(
        &self,
        ctx: &Context,
        p: &GemmProblem,
        ops: &GemmOperands,
    ) -> Result<Vec<CtaStamps>> {
        let env = ctx.overrides.gemm;
        let choice = self.choice_for(ctx, p, &env);
        if choice.tile.pingpong {
            return Err(Error::Unsupported {
                kernel: self.name().into(),
                reason: "the timeline stamps are in the cooperative kernel only; unset \
                         KILN_WGMMA_CFG=pingpong (or tune the problem to another config)"
                    .into(),
            });
        }
        // A persistent grid has at most one CTA per SM.
        let ctas = ctx.info.sm_count as usize;
        let buf = DeviceBuffer::new(ctas * CtaStamps::WORDS * 8)?;
        buf.fill_bytes(0, ctx)?;
        self.launch_choice(ctx, p, ops, choice, Some(buf.ptr()), &env)?;
        ctx.synchronize()?;
        let raw: Vec<u64> = buf.download(ctas * CtaStamps::WORDS)?;
        Ok(CtaStamps::records(&raw)
            .take_while(CtaStamps::entered)
            .collect())
    }
}
