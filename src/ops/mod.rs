//! The ops kiln runs, each with its ladder of versions, and the registry that picks one.

pub mod attention;
pub mod attention_backward;
pub mod fp4;
pub mod fp8;
pub mod gemm;
pub mod moe;
pub mod pointwise;
pub mod registry;
pub mod space;
pub mod stamps;
pub mod tuned;
pub mod waves;
