//! Number formats kiln computes in beyond the 16-bit ones: FP8 (e4m3fn, e5m2) and FP4 (e2m1)
//! encode and decode, the block-scaled NVFP4 and MXFP4 layouts, and the scale recipes.

pub mod fp4;
mod fp4_blocks;
pub mod fp8;
pub mod mxfp4;
pub mod nvfp4;
pub mod scale;

pub use fp8::Fp8Format;
pub use mxfp4::Mxfp4;
pub use nvfp4::Nvfp4;
pub use scale::ScaleRecipe;
