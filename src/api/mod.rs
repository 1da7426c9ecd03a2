//! kiln's public API: a handle per GPU (`Kiln`) and typed views of cudarc buffers, with which a
//! model runs kiln's GEMM, attention and MoE kernels on its own memory and streams.
//!
//! ```no_run
//! use kiln::{GemmOptions, Kiln, TensorMut, TensorRef};
//! # fn main() -> kiln::Result<()> {
//! let kiln = Kiln::open(0)?;
//! let stream = kiln.cuda().default_stream();
//! let a = stream.clone_htod(&vec![half::bf16::ONE; 128 * 64]).unwrap();
//! let b = stream.clone_htod(&vec![half::bf16::ONE; 64 * 256]).unwrap();
//! let mut c = stream.alloc_zeros::<f32>(128 * 256).unwrap();
//! let (ta, tb) = (TensorRef::from_slice(&a, &[128, 64])?, TensorRef::from_slice(&b, &[64, 256])?);
//! let mut tc = TensorMut::from_slice(&mut c, &[128, 256])?;
//! kiln.gemm(&stream, &ta, &tb, &mut tc, &GemmOptions::default())?;
//! # Ok(()) }
//! ```
//!
//! Every op checks its arguments (one [`crate::Error::Argument`] naming the argument that is
//! wrong), launches on the given stream and never waits for it. The first call of a problem
//! compiles its kernels (JIT, cached on disk) and sizes the handle's workspaces; on a stream
//! that captures a CUDA graph that is refused ([`crate::Error::Capture`]): call
//! [`Kiln::precompile`] (or the op once) before capturing. [`raw`] serves foreign callers.

mod backward;
mod dtype;
mod fp4;
mod fp4_experts;
mod fp4_experts_raw;
mod fp4_layer;
mod fp4_raw;
mod fp8;
mod fp8_layer;
mod graphs;
mod handle;
mod info;
mod launch;
mod moe_layer;
mod moe_route;
mod ops;
mod options;
mod paged;
mod pointwise;
mod precompile;
pub mod raw;
mod raw_paged;
mod sorted_layer;
mod tensor;
pub mod validate;
mod varlen;
mod w4a8;
mod workspace;

pub use crate::ops::moe::layer::CombineMode;
pub use crate::ops::moe::route::{RouteOptions, Scoring};
pub use crate::ops::tuned::TunedTable;
pub use backward::ForwardSaved;
pub use dtype::{DType, KilnElem};
pub use fp4::Fp4Tensor;
pub use fp4_experts::Fp4ExpertWeights;
pub use handle::Kiln;
pub use info::{contiguous_strides, TensorInfo, MAX_RANK};
pub use moe_layer::MoeLayerOptions;
pub use options::{
    AttentionBackwardOptions, AttentionOptions, AttnLayout, GemmOptions, KilnOptions, MoeRows,
    Problem, SwigluWeights, Window,
};
pub use paged::PagedOptions;
pub use tensor::{DeviceRead, DeviceWrite, RawTensor, TensorMut, TensorRef};
pub use validate::moe_layer::MoeRouting;
pub use varlen::VarlenOffsets;
pub use w4a8::W4a8ExpertWeights;
pub use workspace::{Workspace, Workspaces};
