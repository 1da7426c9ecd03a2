//! What an instrumented GEMM launch stamps (`kiln profile --timeline`): per CTA, the time of
//! each event of the version's instrumented variant.

/// The stamps of one CTA of an instrumented launch ([`super::GemmKernel::timeline`]): per
/// event, the global timer (ns, comparable across SMs) and the SM's clock (cycles, finer; its
/// own SM only); 0 where the event was not stamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CtaStamps {
    pub ns: [u64; MAX_TRACE_EVENTS],
    pub clk: [u64; MAX_TRACE_EVENTS],
}

/// The most events an instrumented variant stamps per CTA.
pub const MAX_TRACE_EVENTS: usize = 8;
