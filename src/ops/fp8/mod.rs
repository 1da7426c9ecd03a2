//! FP8 (e4m3fn, e5m2) on Hopper: the device conversions checked against the CPU's, the
//! quantisation kernels, and the scaled FP8 GEMM on WGMMA.

pub mod convert;
pub mod quant;

pub use quant::{quantize, quantize_into, Granularity, QuantSpec, Quantized};
