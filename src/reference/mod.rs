//! CPU references in float64 that every GPU result is checked against, and the host-side data
//! they read (random bf16/f16/f32 matrices, never zeros).

pub mod attention;
pub mod attention_backward;
pub mod attention_head;
pub mod attention_paged;
pub mod attention_varlen;
pub mod data;
pub mod fp4;
pub mod fp8;
pub mod gemm;
pub mod moe;
pub mod moe_layer;
pub mod pointwise;
pub mod route;
