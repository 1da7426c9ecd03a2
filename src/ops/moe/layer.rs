//! The whole MoE layer on the GPU (placeholder while the pipeline is built).

use crate::jit::KernelSpec;

pub const NAME: &str = "moe_layer";

/// The layer's own small kernels: routing and combine.
pub fn own_variants(arch: &str) -> Vec<KernelSpec> {
    let mut v = super::route::variants(arch);
    v.extend(super::combine::variants(arch));
    v
}
