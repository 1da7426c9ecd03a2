//! Argument checks of the public ops, apart from any launch: from checked tensor descriptions
//! and options to the ops' problem types (a plan), or one sentence naming the argument that is
//! wrong. Pure: runs on machines without a GPU, so every refusal is unit-tested.

mod attention;
mod attention_backward;
mod attention_varlen;
mod attention_varlen_backward;
mod fp8;
mod gemm;
mod moe;
pub mod moe_layer;
mod paged;
mod pointwise;

pub use attention::{attention, AttentionPlan};
pub use attention_backward::{attention_backward, AttentionBackwardPlan};
pub use attention_varlen::{attention_varlen, VarlenPlan};
pub use attention_varlen_backward::{attention_varlen_backward, VarlenBackwardPlan};
pub(crate) use fp8::fp8_experts;
pub use fp8::{
    fp8_cast, fp8_gemm, fp8_grouped, fp8_swiglu, w4a8_experts, Fp8CastPlan, Fp8GemmPlan,
    Fp8GroupedPlan, W4a8Plan,
};
pub use gemm::{gemm, gemm_output_shape, GemmPlan};
pub use moe::{grouped_gemm, swiglu, MoePlan};
pub use paged::{append, paged, AppendPlan, PagedPlan};
pub use pointwise::{rms_norm, rope, NormPlan, RopePlan};

use super::dtype::DType;
use super::info::TensorInfo;
use crate::error::{ArgumentKind, Error, Result};
use crate::ops::gemm::alignment;

/// Device memory an op reads or writes: its base and the bytes its view spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Operand {
    pub ptr: u64,
    pub bytes: usize,
}

impl Operand {
    pub fn of(t: &TensorInfo) -> Operand {
        Operand {
            ptr: t.ptr(),
            bytes: t.span_bytes(),
        }
    }

    /// The base's alignment as far as any kernel's choice depends on it (16 bytes).
    pub fn align_class(&self) -> u64 {
        alignment(self.ptr).min(16)
    }
}

pub(crate) fn err(arg: &str, kind: ArgumentKind, msg: String) -> Error {
    Error::argument(arg, kind, msg)
}

pub(crate) fn on_device(arg: &str, t: &TensorInfo, device: usize) -> Result<()> {
    if t.device() != device {
        return Err(err(
            arg,
            ArgumentKind::Device,
            format!(
                "`{arg}` is on GPU {} but the handle is on GPU {device}; pass tensors of the handle's GPU (or use a handle per GPU)",
                t.device()
            ),
        ));
    }
    Ok(())
}

pub(crate) fn rank(arg: &str, t: &TensorInfo, want: usize, takes: &str) -> Result<()> {
    if t.rank() != want {
        return Err(err(
            arg,
            ArgumentKind::Shape,
            format!(
                "`{arg}` has {} dimensions ({}); {takes}",
                t.rank(),
                t.shape_text()
            ),
        ));
    }
    Ok(())
}

pub(crate) fn dtype_in(arg: &str, t: &TensorInfo, allowed: &[DType], takes: &str) -> Result<()> {
    if !allowed.contains(&t.dtype()) {
        return Err(err(
            arg,
            ArgumentKind::DType,
            format!("`{arg}` is {}; {takes}", t.dtype()),
        ));
    }
    Ok(())
}

pub(crate) fn same_dtype(
    arg: &str,
    t: &TensorInfo,
    other: &str,
    o: &TensorInfo,
    takes: &str,
) -> Result<()> {
    if t.dtype() != o.dtype() {
        return Err(err(
            arg,
            ArgumentKind::DType,
            format!(
                "`{arg}` is {} but `{other}` is {}; {takes}",
                t.dtype(),
                o.dtype()
            ),
        ));
    }
    Ok(())
}

/// `t` starts on a 16-byte boundary; `why` says what reads it so.
pub(crate) fn aligned16(arg: &str, t: &TensorInfo, why: &str) -> Result<()> {
    if !t.ptr().is_multiple_of(16) {
        return Err(err(
            arg,
            ArgumentKind::Bounds,
            format!(
                "`{arg}` starts at {:#x}, which is not 16-byte aligned; {why}",
                t.ptr()
            ),
        ));
    }
    Ok(())
}

pub(crate) fn contiguous(arg: &str, t: &TensorInfo, why: &str) -> Result<()> {
    if !t.is_contiguous() {
        return Err(err(
            arg,
            ArgumentKind::Stride,
            format!(
                "`{arg}` has strides {} for shape {}; {why}: make it contiguous",
                t.strides_text(),
                t.shape_text()
            ),
        ));
    }
    Ok(())
}

/// An output whose elements do not repeat.
pub(crate) fn writable(arg: &str, t: &TensorInfo) -> Result<()> {
    if !t.is_non_overlapping() {
        return Err(err(
            arg,
            ArgumentKind::Stride,
            format!(
                "`{arg}` has strides {} for shape {}, which address some elements twice; an output needs one element of memory per index",
                t.strides_text(),
                t.shape_text()
            ),
        ));
    }
    Ok(())
}

/// Refuses an output whose memory overlaps an input's (descriptions without memory, base 0,
/// are not compared).
pub(crate) fn no_alias(out: &str, o: &TensorInfo, inputs: &[(&str, &TensorInfo)]) -> Result<()> {
    let range = |t: &TensorInfo| (t.ptr(), t.ptr().saturating_add(t.span_bytes() as u64));
    let (o0, o1) = range(o);
    if o.ptr() == 0 || o0 == o1 {
        return Ok(());
    }
    for (name, t) in inputs {
        let (i0, i1) = range(t);
        if t.ptr() != 0 && i0 < i1 && i0 < o1 && o0 < i1 {
            return Err(err(
                out,
                ArgumentKind::Value,
                format!(
                    "`{out}` overlaps `{name}` in memory; kiln writes its outputs to memory no input uses"
                ),
            ));
        }
    }
    Ok(())
}

pub(crate) fn finite(arg: &str, v: f32) -> Result<()> {
    if !v.is_finite() {
        return Err(err(
            arg,
            ArgumentKind::Value,
            format!("`{arg}` is {v}; it must be finite"),
        ));
    }
    Ok(())
}

/// The ops' float type of a tensor whose dtype was checked to be one.
pub(crate) fn float(arg: &str, t: &TensorInfo) -> Result<crate::ops::gemm::DType> {
    t.dtype().float().ok_or_else(|| {
        err(
            arg,
            ArgumentKind::DType,
            format!("`{arg}` is {}; this op takes float tensors", t.dtype()),
        )
    })
}

/// The GEMM and MoE input types.
pub(crate) const HALF: [DType; 2] = [DType::Bf16, DType::F16];
/// The GEMM and MoE output types.
pub(crate) const OUTPUTS: [DType; 3] = [DType::Bf16, DType::F16, DType::F32];
