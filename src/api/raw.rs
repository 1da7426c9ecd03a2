//! The ops for foreign callers (the Python package): tensors as raw descriptions, streams as
//! `CUstream` handles. The `check_*` functions run the same argument checks without a handle
//! or a GPU, so bindings can raise the same errors anywhere.

use cudarc::driver::sys::CUstream;

use super::handle::Kiln;
use super::info::TensorInfo;
use super::options::{
    AttentionBackwardOptions, AttentionOptions, GemmOptions, MoeRows, SwigluWeights,
};
use super::tensor::RawTensor;
use super::validate::{
    self, AttentionBackwardPlan, AttentionPlan, GemmPlan, MoePlan, VarlenBackwardPlan,
};
use super::varlen::VarlenOffsets;
use crate::error::Result;

pub use super::fp4_experts_raw::{
    check_fp4_experts, fp4_experts, fp4_prepack_experts, RawFp4Experts,
};
pub use super::fp4_layer::{check_fp4_moe_layer, fp4_moe_layer, Fp4LayerLayout};
pub use super::fp4_raw::{
    check_fp4_dequantize, check_fp4_quantize, check_nvfp4_gemv, check_nvfp4_gemv_layout,
    fp4_dequantize, fp4_quantize, nvfp4_gemv, nvfp4_gemv_layout, RawBytes, RawFp4,
};
pub use super::fp8::{
    check_fp8_cast, check_fp8_gemm_nt, check_fp8_grouped_gemm, fp8_cast, fp8_gemm_nt,
    fp8_grouped_gemm,
};
pub use super::fp8_layer::{
    check_fp8_moe_layer, fp8_moe_layer, Fp8LayerLayout, Fp8LayerWeights, RawFp8Experts,
};
pub use super::moe_layer::{check_moe_layer, moe_layer, moe_layer_workspace_bytes};
pub use super::moe_route::{moe_combine, moe_route, moe_route_layout};
pub use super::pointwise::{check_rms_norm, check_rope, rms_norm, rope};
pub use super::raw_paged::{
    attention_paged, check_attention_paged, check_errors, check_kv_append, kv_append, DecodeTables,
};
pub use crate::ops::moe::route::RouteLayout;

fn gemm_plan(
    device: usize,
    a: &RawTensor,
    b: &RawTensor,
    c: &RawTensor,
    opts: &GemmOptions,
) -> Result<Option<GemmPlan>> {
    validate::gemm(
        device,
        &a.info("a", false)?,
        &b.info("b", false)?,
        &c.info("c", false)?,
        opts,
    )
}

#[allow(clippy::too_many_arguments)]
fn attention_plan(
    device: usize,
    q: &RawTensor,
    k: &RawTensor,
    v: &RawTensor,
    o: &RawTensor,
    lse: Option<&RawTensor>,
    opts: &AttentionOptions,
) -> Result<Option<AttentionPlan>> {
    validate::attention(
        device,
        &q.info("q", false)?,
        &k.info("k", false)?,
        &v.info("v", false)?,
        &o.info("o", false)?,
        optional("lse", lse)?.as_ref(),
        opts,
    )
}

/// The backward's tensors: the forward's (q, k, v, o), dO, the LSE and the gradients (dq, dk,
/// dv); dense ([`attention_backward`]) or packed ([`attention_varlen_backward`]).
pub struct RawBackward<'a> {
    pub q: &'a RawTensor,
    pub k: &'a RawTensor,
    pub v: &'a RawTensor,
    pub o: &'a RawTensor,
    pub dout: &'a RawTensor,
    pub lse: Option<&'a RawTensor>,
    pub dq: &'a RawTensor,
    pub dk: &'a RawTensor,
    pub dv: &'a RawTensor,
}

/// A [`RawBackward`]'s tensors described: q, k, v, o, dout, dq, dk, dv, and the LSE if given.
struct BackwardInfos {
    t: [TensorInfo; 8],
    lse: Option<TensorInfo>,
}

impl BackwardInfos {
    fn of(t: &RawBackward) -> Result<BackwardInfos> {
        let [q, k, v, o, dout, dq, dk, dv] = [
            ("q", t.q),
            ("k", t.k),
            ("v", t.v),
            ("o", t.o),
            ("dout", t.dout),
            ("dq", t.dq),
            ("dk", t.dk),
            ("dv", t.dv),
        ]
        .map(|(arg, r)| r.info(arg, false));
        Ok(BackwardInfos {
            t: [q?, k?, v?, o?, dout?, dq?, dk?, dv?],
            lse: optional("lse", t.lse)?,
        })
    }

    fn forward(&self) -> (&TensorInfo, &TensorInfo, &TensorInfo, &TensorInfo) {
        (&self.t[0], &self.t[1], &self.t[2], &self.t[3])
    }

    fn grads(&self) -> (&TensorInfo, &TensorInfo, &TensorInfo) {
        (&self.t[5], &self.t[6], &self.t[7])
    }
}

/// `t` described as argument `arg`, when given.
fn optional(arg: &str, t: Option<&RawTensor>) -> Result<Option<TensorInfo>> {
    t.map(|t| t.info(arg, false)).transpose()
}

/// The offsets' tensors described (`cu_seqlens_q`, `cu_seqlens_k`).
fn offset_infos(offsets: &VarlenOffsets<'_, RawTensor>) -> Result<[TensorInfo; 2]> {
    Ok([
        offsets.cu_q.info("cu_seqlens_q", false)?,
        offsets.cu_k.info("cu_seqlens_k", false)?,
    ])
}

fn attention_backward_plan(
    device: usize,
    t: &RawBackward,
    opts: &AttentionBackwardOptions,
) -> Result<Option<AttentionBackwardPlan>> {
    let i = BackwardInfos::of(t)?;
    validate::attention_backward(
        device,
        i.forward(),
        &i.t[4],
        i.lse.as_ref(),
        i.grads(),
        opts,
    )
}

fn attention_varlen_backward_plan(
    device: usize,
    t: &RawBackward,
    offsets: &VarlenOffsets<'_, RawTensor>,
    opts: &AttentionBackwardOptions,
) -> Result<Option<VarlenBackwardPlan>> {
    let i = BackwardInfos::of(t)?;
    let [cu_q, cu_k] = offset_infos(offsets)?;
    validate::attention_varlen_backward(
        device,
        i.forward(),
        &i.t[4],
        i.lse.as_ref(),
        i.grads(),
        &offsets.with(&cu_q, &cu_k),
        opts,
    )
}

/// The checks of [`attention_backward`], without a handle.
pub fn check_attention_backward(
    device: usize,
    t: &RawBackward,
    opts: &AttentionBackwardOptions,
) -> Result<()> {
    attention_backward_plan(device, t, opts).map(drop)
}

/// [`Kiln::attention_backward`] on raw tensors and a raw stream.
///
/// # Safety
/// As [`gemm`] (`dq`, `dk` and `dv` are the outputs).
pub unsafe fn attention_backward(
    kiln: &Kiln,
    stream: CUstream,
    t: &RawBackward,
    opts: &AttentionBackwardOptions,
) -> Result<()> {
    kiln.on_raw_stream(
        stream,
        |device| attention_backward_plan(device, t, opts),
        |plan| kiln.launch_attention_backward(Some(stream), plan, opts),
    )
}

/// The checks of [`attention_varlen_backward`], without a handle.
pub fn check_attention_varlen_backward(
    device: usize,
    t: &RawBackward,
    offsets: &VarlenOffsets<'_, RawTensor>,
    opts: &AttentionBackwardOptions,
) -> Result<()> {
    attention_varlen_backward_plan(device, t, offsets, opts).map(drop)
}

/// [`Kiln::attention_varlen_backward`] on raw tensors (each [total, heads, head_dim], the LSE
/// [heads, total_q]) and a raw stream.
///
/// # Safety
/// As [`gemm`] (`dq`, `dk` and `dv` are the outputs; host copies in `offsets`, if any, must be
/// the offsets tensors' contents).
pub unsafe fn attention_varlen_backward(
    kiln: &Kiln,
    stream: CUstream,
    t: &RawBackward,
    offsets: &VarlenOffsets<'_, RawTensor>,
    opts: &AttentionBackwardOptions,
) -> Result<()> {
    kiln.on_raw_stream(
        stream,
        |device| attention_varlen_backward_plan(device, t, offsets, opts),
        |plan| kiln.launch_attention_varlen_backward(Some(stream), plan, opts),
    )
}

pub(super) fn rows_info<'a>(rows: &MoeRows<'a, RawTensor>) -> Result<MoeRows<'a, TensorInfo>> {
    let (arg, t) = match rows {
        MoeRows::Offsets { offsets, .. } => ("offsets", offsets),
        MoeRows::Counts { counts, .. } => ("counts", counts),
    };
    let info = t.info(arg, false)?;
    Ok(rows.map(|_| info))
}

fn grouped_plan(
    device: usize,
    x: &RawTensor,
    w: &RawTensor,
    rows: &MoeRows<'_, RawTensor>,
    y: &RawTensor,
) -> Result<Option<MoePlan>> {
    validate::grouped_gemm(
        device,
        &x.info("x", false)?,
        &w.info("w", false)?,
        &rows_info(rows)?,
        &y.info("y", false)?,
    )
}

fn swiglu_plan(
    device: usize,
    x: &RawTensor,
    w: &SwigluWeights<RawTensor>,
    rows: &MoeRows<'_, RawTensor>,
    routing: Option<&RawTensor>,
    h: &RawTensor,
) -> Result<Option<MoePlan>> {
    let w = match w {
        SwigluWeights::Interleaved(w) => SwigluWeights::Interleaved(w.info("w13", false)?),
        SwigluWeights::Separate { w1, w3 } => SwigluWeights::Separate {
            w1: w1.info("w1", false)?,
            w3: w3.info("w3", false)?,
        },
    };
    let routing = optional("routing", routing)?;
    validate::swiglu(
        device,
        &x.info("x", false)?,
        &w,
        &rows_info(rows)?,
        routing.as_ref(),
        &h.info("h", false)?,
    )
}

/// The shape `[M, N]` of `a @ b`, checked as [`check_gemm`] checks `a` and `b`: for callers
/// that allocate the output first.
pub fn gemm_output_shape(a: &RawTensor, b: &RawTensor) -> Result<[usize; 2]> {
    validate::gemm_output_shape(&a.info("a", false)?, &b.info("b", false)?)
}

/// The checks of [`gemm`] for a handle on GPU `device`, without a handle.
pub fn check_gemm(
    device: usize,
    a: &RawTensor,
    b: &RawTensor,
    c: &RawTensor,
    opts: &GemmOptions,
) -> Result<()> {
    gemm_plan(device, a, b, c, opts).map(drop)
}

/// The checks of [`attention`], without a handle.
#[allow(clippy::too_many_arguments)]
pub fn check_attention(
    device: usize,
    q: &RawTensor,
    k: &RawTensor,
    v: &RawTensor,
    o: &RawTensor,
    lse: Option<&RawTensor>,
    opts: &AttentionOptions,
) -> Result<()> {
    attention_plan(device, q, k, v, o, lse, opts).map(drop)
}

/// The checks of [`grouped_gemm`], without a handle.
pub fn check_grouped_gemm(
    device: usize,
    x: &RawTensor,
    w: &RawTensor,
    rows: &MoeRows<'_, RawTensor>,
    y: &RawTensor,
) -> Result<()> {
    grouped_plan(device, x, w, rows, y).map(drop)
}

/// The checks of [`swiglu`], without a handle.
pub fn check_swiglu(
    device: usize,
    x: &RawTensor,
    w: &SwigluWeights<RawTensor>,
    rows: &MoeRows<'_, RawTensor>,
    routing: Option<&RawTensor>,
    h: &RawTensor,
) -> Result<()> {
    swiglu_plan(device, x, w, rows, routing, h).map(drop)
}

/// [`Kiln::gemm`] on raw tensors and a raw stream.
///
/// # Safety
/// `stream` must be a live stream of the handle's context. Every tensor must describe device
/// memory of that context holding its dtype, alive and (for `c`) not used by anyone else until
/// the stream has run the launch; the caller orders the stream after the inputs' producers.
pub unsafe fn gemm(
    k: &Kiln,
    stream: CUstream,
    a: &RawTensor,
    b: &RawTensor,
    c: &RawTensor,
    opts: &GemmOptions,
) -> Result<()> {
    k.on_raw_stream(
        stream,
        |device| gemm_plan(device, a, b, c, opts),
        |plan| k.launch_gemm(Some(stream), plan, opts),
    )
}

/// [`Kiln::attention`] on raw tensors and a raw stream.
///
/// # Safety
/// As [`gemm`] (`o` and `lse` are the outputs).
#[allow(clippy::too_many_arguments)]
pub unsafe fn attention(
    kiln: &Kiln,
    stream: CUstream,
    q: &RawTensor,
    k: &RawTensor,
    v: &RawTensor,
    o: &RawTensor,
    lse: Option<&RawTensor>,
    opts: &AttentionOptions,
) -> Result<()> {
    kiln.on_raw_stream(
        stream,
        |device| attention_plan(device, q, k, v, o, lse, opts),
        |plan| kiln.launch_attention(Some(stream), plan, opts),
    )
}

/// [`Kiln::grouped_gemm`] on raw tensors and a raw stream.
///
/// # Safety
/// As [`gemm`] (`y` is the output).
pub unsafe fn grouped_gemm(
    k: &Kiln,
    stream: CUstream,
    x: &RawTensor,
    w: &RawTensor,
    rows: &MoeRows<'_, RawTensor>,
    y: &RawTensor,
) -> Result<()> {
    k.on_raw_stream(
        stream,
        |device| grouped_plan(device, x, w, rows, y),
        |plan| k.launch_moe(Some(stream), plan),
    )
}

/// [`Kiln::swiglu`] on raw tensors and a raw stream.
///
/// # Safety
/// As [`gemm`] (`h` is the output).
pub unsafe fn swiglu(
    k: &Kiln,
    stream: CUstream,
    x: &RawTensor,
    w: &SwigluWeights<RawTensor>,
    rows: &MoeRows<'_, RawTensor>,
    routing: Option<&RawTensor>,
    h: &RawTensor,
) -> Result<()> {
    k.on_raw_stream(
        stream,
        |device| swiglu_plan(device, x, w, rows, routing, h),
        |plan| k.launch_moe(Some(stream), plan),
    )
}

#[allow(clippy::too_many_arguments)]
fn attention_varlen_plan(
    device: usize,
    q: &RawTensor,
    k: &RawTensor,
    v: &RawTensor,
    o: &RawTensor,
    lse: Option<&RawTensor>,
    offsets: &VarlenOffsets<'_, RawTensor>,
    opts: &AttentionOptions,
) -> Result<Option<validate::VarlenPlan>> {
    let [cu_q, cu_k] = offset_infos(offsets)?;
    validate::attention_varlen(
        device,
        &q.info("q", false)?,
        &k.info("k", false)?,
        &v.info("v", false)?,
        &o.info("o", false)?,
        optional("lse", lse)?.as_ref(),
        &offsets.with(&cu_q, &cu_k),
        opts,
    )
}

/// The checks of [`attention_varlen`], without a handle.
#[allow(clippy::too_many_arguments)]
pub fn check_attention_varlen(
    device: usize,
    q: &RawTensor,
    k: &RawTensor,
    v: &RawTensor,
    o: &RawTensor,
    lse: Option<&RawTensor>,
    offsets: &VarlenOffsets<'_, RawTensor>,
    opts: &AttentionOptions,
) -> Result<()> {
    attention_varlen_plan(device, q, k, v, o, lse, offsets, opts).map(drop)
}

/// [`Kiln::attention_varlen`] on raw tensors and a raw stream.
///
/// # Safety
/// As [`gemm`] (`o` and `lse` are the outputs; host copies in `offsets`, if any, must be the
/// offsets tensors' contents).
#[allow(clippy::too_many_arguments)]
pub unsafe fn attention_varlen(
    kiln: &Kiln,
    stream: CUstream,
    q: &RawTensor,
    k: &RawTensor,
    v: &RawTensor,
    o: &RawTensor,
    lse: Option<&RawTensor>,
    offsets: &VarlenOffsets<'_, RawTensor>,
    opts: &AttentionOptions,
) -> Result<()> {
    kiln.on_raw_stream(
        stream,
        |device| attention_varlen_plan(device, q, k, v, o, lse, offsets, opts),
        |plan| kiln.launch_attention_varlen(Some(stream), plan, opts),
    )
}
