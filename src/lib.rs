//! kiln: Hopper GEMM/attention/MoE kernels and the lab that builds them (JIT compile, verify
//! against float64 references, time against the vendor in the same run, record every result).

pub mod api;
pub mod config;
pub mod device;
pub mod error;
pub mod formats;
pub mod harness;
pub mod jit;
pub mod libs;
pub mod ops;
pub mod overrides;
pub mod reference;
pub mod report;
pub mod store;
pub mod tools;
pub mod tune;
pub mod vendor;

pub use api::{
    AttentionBackwardOptions, AttentionOptions, AttnLayout, CombineMode, DType, ForwardSaved,
    GemmOptions, Kiln, KilnElem, KilnOptions, MoeLayerOptions, MoeRouting, MoeRows, PagedOptions,
    Problem, RawTensor, RouteOptions, Scoring, SwigluWeights, TensorMut, TensorRef, VarlenOffsets,
};
pub use error::{ArgumentKind, Error, Result};
