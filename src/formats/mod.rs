//! Number formats kiln computes in beyond the 16-bit ones: FP8 (e4m3fn, e5m2) encode and decode,
//! and the scale recipes (fp32, UE8M0 powers of two) that map a block's range onto them.

pub mod fp8;
pub mod scale;

pub use fp8::Fp8Format;
pub use scale::ScaleRecipe;
