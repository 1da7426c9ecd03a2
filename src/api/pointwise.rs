//! RMSNorm (with the residual add fused in front) and the rotary embedding in place, on
//! cudarc buffers and on raw tensors: the per-token ops of a transformer block around its
//! matmuls, each one memory-bound launch on the caller's stream.

use cudarc::driver::{sys, CudaStream};

use super::handle::Kiln;
use super::tensor::{RawTensor, TensorMut, TensorRef};
use super::validate::{self, NormPlan, RopePlan};
use crate::error::Result;
use crate::ops::pointwise::{rmsnorm, rope};

impl Kiln {
    fn launch_rms_norm(&self, stream: Option<sys::CUstream>, plan: &NormPlan) -> Result<()> {
        self.run_keyed(
            stream,
            plan.key(),
            || format!("rmsnorm {:?}", plan.shape),
            |ctx, _, _| rmsnorm::launch(ctx, &plan.shape, &plan.ops),
        )
    }

    fn launch_rope(&self, stream: Option<sys::CUstream>, plan: &RopePlan) -> Result<()> {
        self.run_keyed(
            stream,
            plan.key(),
            || format!("rope {:?}", plan.shape),
            |ctx, _, _| rope::launch(ctx, &plan.shape, &plan.ops),
        )
    }

    /// `out = rmsnorm(x) * weight` over x's last dim H (f32 statistics, `eps` added to the
    /// mean square, rounded as transformers' RMSNorm rounds); with `residual`, first
    /// `residual += x` and the stored sum is normalised (FlashInfer's fused_add_rmsnorm). x,
    /// residual and out share one shape (leading dims nesting by whole rows, H contiguous),
    /// weight is [H]; all bf16 or f16.
    pub fn rms_norm(
        &self,
        stream: &CudaStream,
        x: &TensorRef,
        weight: &TensorRef,
        mut residual: Option<&mut TensorMut>,
        out: &mut TensorMut,
        eps: f32,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let res = residual.as_ref().map(|r| *r.info());
        let Some(plan) = validate::rms_norm(
            self.ordinal(),
            x.info(),
            weight.info(),
            res.as_ref(),
            out.info(),
            eps,
        )?
        else {
            return Ok(());
        };
        let _order = (
            x.track(stream),
            weight.track(stream),
            residual.as_mut().and_then(|r| r.track(stream)),
            out.track(stream),
        );
        self.launch_rms_norm(Some(stream.cu_stream()), &plan)
    }

    /// The rotary embedding applied in place to q [B, Hq, S, D] and k [B, Hk, S, D] (any
    /// strides, the last 1: transformers' views after its projections) in one launch: the
    /// first R dims of each head become `x * cos + rot(x) * sin` (f32, rounded once), cos and
    /// sin [B, S, R] or [S, R] in q's dtype or f32, rot transformers' rotate_half or, with
    /// `interleaved`, the pairs (2i, 2i + 1).
    pub fn rope(
        &self,
        stream: &CudaStream,
        q: &mut TensorMut,
        k: &mut TensorMut,
        cos: &TensorRef,
        sin: &TensorRef,
        interleaved: bool,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let Some(plan) = validate::rope(
            self.ordinal(),
            q.info(),
            k.info(),
            cos.info(),
            sin.info(),
            interleaved,
        )?
        else {
            return Ok(());
        };
        let _order = (
            q.track(stream),
            k.track(stream),
            cos.track(stream),
            sin.track(stream),
        );
        self.launch_rope(Some(stream.cu_stream()), &plan)
    }
}

fn norm_plan(
    device: usize,
    x: &RawTensor,
    weight: &RawTensor,
    residual: Option<&RawTensor>,
    out: &RawTensor,
    eps: f32,
) -> Result<Option<NormPlan>> {
    let residual = residual.map(|r| r.info("residual", false)).transpose()?;
    validate::rms_norm(
        device,
        &x.info("x", false)?,
        &weight.info("weight", false)?,
        residual.as_ref(),
        &out.info("out", false)?,
        eps,
    )
}

fn rope_plan(
    device: usize,
    q: &RawTensor,
    k: &RawTensor,
    cos: &RawTensor,
    sin: &RawTensor,
    interleaved: bool,
) -> Result<Option<RopePlan>> {
    validate::rope(
        device,
        &q.info("q", false)?,
        &k.info("k", false)?,
        &cos.info("cos", false)?,
        &sin.info("sin", false)?,
        interleaved,
    )
}

/// [`Kiln::rms_norm`]'s checks alone (no handle, no GPU).
pub fn check_rms_norm(
    device: usize,
    x: &RawTensor,
    weight: &RawTensor,
    residual: Option<&RawTensor>,
    out: &RawTensor,
    eps: f32,
) -> Result<()> {
    norm_plan(device, x, weight, residual, out, eps).map(drop)
}

/// [`Kiln::rope`]'s checks alone (no handle, no GPU).
pub fn check_rope(
    device: usize,
    q: &RawTensor,
    k: &RawTensor,
    cos: &RawTensor,
    sin: &RawTensor,
    interleaved: bool,
) -> Result<()> {
    rope_plan(device, q, k, cos, sin, interleaved).map(drop)
}

/// [`Kiln::rms_norm`] on raw tensors and a raw stream.
///
/// # Safety
/// As [`super::raw::gemm`] (`out` and `residual` are written).
pub unsafe fn rms_norm(
    k: &Kiln,
    stream: sys::CUstream,
    x: &RawTensor,
    weight: &RawTensor,
    residual: Option<&RawTensor>,
    out: &RawTensor,
    eps: f32,
) -> Result<()> {
    k.on_raw_stream(
        stream,
        |device| norm_plan(device, x, weight, residual, out, eps),
        |plan| k.launch_rms_norm(Some(stream), plan),
    )
}

/// [`Kiln::rope`] on raw tensors and a raw stream.
///
/// # Safety
/// As [`super::raw::gemm`] (`q` and `k` are written).
pub unsafe fn rope(
    kiln: &Kiln,
    stream: sys::CUstream,
    q: &RawTensor,
    k: &RawTensor,
    cos: &RawTensor,
    sin: &RawTensor,
    interleaved: bool,
) -> Result<()> {
    kiln.on_raw_stream(
        stream,
        |device| rope_plan(device, q, k, cos, sin, interleaved),
        |plan| kiln.launch_rope(Some(stream), plan),
    )
}
