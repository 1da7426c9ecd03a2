//! What an instrumented GEMM launch stamps (`kiln profile --timeline`): per CTA, the time of
//! each event of the version's instrumented variant.

/// The stamps of one CTA of an instrumented launch ([`super::GemmKernel::timeline`]).
pub type CtaStamps = crate::ops::stamps::Stamps<MAX_TRACE_EVENTS>;

/// The most events an instrumented variant stamps per CTA.
pub const MAX_TRACE_EVENTS: usize = 8;
