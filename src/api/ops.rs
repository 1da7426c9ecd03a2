//! The ops on cudarc buffers: GEMM, attention forward, the MoE grouped GEMM and fused SwiGLU,
//! each enqueued on the caller's stream without synchronising, into a caller's output or (the
//! `*_alloc` twins) a new `CudaSlice` allocated on that stream.

use std::sync::Arc;

use cudarc::driver::{sys, CudaSlice, CudaStream, DeviceRepr, ValidAsZeroBits};

use super::dtype::KilnElem;
use super::handle::{is_capturing, Kiln};
use super::info::TensorInfo;
use super::launch;
use super::options::{AttentionOptions, GemmOptions, MoeRows, SwigluWeights};
use super::tensor::{TensorMut, TensorRef};
use super::validate::{self, AttentionPlan, GemmPlan, MoePlan};
use crate::device::memory;
use crate::error::{ArgumentKind, Error, Result};

/// The rows of an MoE call as descriptions.
fn rows_info<'a>(rows: &MoeRows<'a>) -> MoeRows<'a, TensorInfo> {
    rows.map(|t| t.info)
}

impl Kiln {
    pub(crate) fn launch_gemm(
        &self,
        stream: Option<sys::CUstream>,
        plan: &GemmPlan,
        opts: &GemmOptions,
    ) -> Result<()> {
        let v = opts.version.as_deref();
        self.run_graphed(
            stream,
            plan.key(v),
            plan.addresses(),
            || plan.problem.label(),
            |ctx, _, _| launch::gemm(&self.registry, ctx, plan, v),
        )
    }

    pub(crate) fn launch_attention(
        &self,
        stream: Option<sys::CUstream>,
        plan: &AttentionPlan,
        opts: &AttentionOptions,
    ) -> Result<()> {
        let v = opts.version.as_deref();
        self.run_graphed(
            stream,
            plan.key(v),
            plan.addresses(),
            || plan.problem.label(),
            |ctx, ws, capturing| launch::attention(&self.registry, ctx, ws, capturing, plan, v),
        )
    }

    pub(crate) fn launch_moe(&self, stream: Option<sys::CUstream>, plan: &MoePlan) -> Result<()> {
        let choice = launch::moe_choice(plan, self.device(), &self.overrides.moe);
        self.run_graphed(
            stream,
            plan.key(choice),
            plan.addresses(),
            || plan.problem.label(),
            |ctx, ws, capturing| launch::moe(&self.registry, ctx, ws, capturing, plan),
        )
    }

    /// `c = alpha * a @ b + beta * c` (a [M, K], b [K, N], c [M, N]). `a` and `b` are bf16 or
    /// f16 (one dtype) stored row- or column-major (from their strides: a transposed view is
    /// read in place); `c` is bf16, f16 or f32, row- or column-major, with any leading
    /// dimension.
    pub fn gemm(
        &self,
        stream: &CudaStream,
        a: &TensorRef,
        b: &TensorRef,
        c: &mut TensorMut,
        opts: &GemmOptions,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let Some(plan) = validate::gemm(self.ordinal(), &a.info, &b.info, &c.info, opts)? else {
            return Ok(());
        };
        let _order = (a.track(stream), b.track(stream), c.track(stream));
        self.launch_gemm(Some(stream.cu_stream()), &plan, opts)
    }

    /// Attention forward with flash-attention's semantics: q [B, Sq, Hq, D], k and v
    /// [B, Sk, Hkv, D] (or [B, H, S, D] with `opts.layout = Bhsd`), Hq a multiple of Hkv (GQA),
    /// causal aligned bottom-right, D of 64, 128 or 256; o like q; lse f32 [B, Hq, Sq] if wanted.
    #[allow(clippy::too_many_arguments)]
    pub fn attention(
        &self,
        stream: &CudaStream,
        q: &TensorRef,
        k: &TensorRef,
        v: &TensorRef,
        o: &mut TensorMut,
        mut lse: Option<&mut TensorMut>,
        opts: &AttentionOptions,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let lse_info = lse.as_ref().map(|l| l.info);
        let Some(plan) = validate::attention(
            self.ordinal(),
            &q.info,
            &k.info,
            &v.info,
            &o.info,
            lse_info.as_ref(),
            opts,
        )?
        else {
            return Ok(());
        };
        let _order = (
            q.track(stream),
            k.track(stream),
            v.track(stream),
            o.track(stream),
            lse.as_mut().and_then(|l| l.track(stream)),
        );
        self.launch_attention(Some(stream.cu_stream()), &plan, opts)
    }

    /// The MoE grouped GEMM: y[rows of e] = x[rows of e] @ w[e]ᵀ for every expert e, with
    /// w [E, N, K]; x [rows, K] and y [rows, N] (offsets) or [E, max_rows, K] and
    /// [E, max_rows, N] (counts). Rows no expert owns are not written.
    pub fn grouped_gemm(
        &self,
        stream: &CudaStream,
        x: &TensorRef,
        w: &TensorRef,
        rows: MoeRows<'_>,
        y: &mut TensorMut,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let Some(plan) =
            validate::grouped_gemm(self.ordinal(), &x.info, &w.info, &rows_info(&rows), &y.info)?
        else {
            return Ok(());
        };
        let _order = (
            x.track(stream),
            w.track(stream),
            rows.tensor().track(stream),
            y.track(stream),
        );
        self.launch_moe(Some(stream.cu_stream()), &plan)
    }

    /// The fused MoE SwiGLU: h = silu(x W1ᵀ) * (x W3ᵀ), times the row's f32 routing weight
    /// when `routing` is given; shapes as [`Kiln::grouped_gemm`] with N the rows of W1.
    pub fn swiglu(
        &self,
        stream: &CudaStream,
        x: &TensorRef,
        w: SwigluWeights<TensorRef>,
        rows: MoeRows<'_>,
        routing: Option<&TensorRef>,
        h: &mut TensorMut,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let Some(plan) = validate::swiglu(
            self.ordinal(),
            &x.info,
            &w.map(|t| t.info),
            &rows_info(&rows),
            routing.map(|r| r.info).as_ref(),
            &h.info,
        )?
        else {
            return Ok(());
        };
        let (w1, w3) = match &w {
            SwigluWeights::Interleaved(w) => (w, None),
            SwigluWeights::Separate { w1, w3 } => (w1, Some(w3)),
        };
        let _order = (
            x.track(stream),
            w1.track(stream),
            w3.and_then(|t| t.track(stream)),
            rows.tensor().track(stream),
            routing.and_then(|t| t.track(stream)),
            h.track(stream),
        );
        self.launch_moe(Some(stream.cu_stream()), &plan)
    }

    /// [`Kiln::gemm`] into a new row-major [M, N] `CudaSlice<T>` (T: the output type).
    pub fn gemm_alloc<T: KilnElem + DeviceRepr + ValidAsZeroBits>(
        &self,
        stream: &Arc<CudaStream>,
        a: &TensorRef,
        b: &TensorRef,
        opts: &GemmOptions,
    ) -> Result<CudaSlice<T>> {
        let (m, n) = (a.shape().first().copied(), b.shape().get(1).copied());
        let shape = [m.unwrap_or(0), n.unwrap_or(0)];
        let mut out = self.alloc::<T>(stream, shape[0] * shape[1])?;
        let mut c = TensorMut::from_slice(&mut out, &shape)?;
        self.gemm(
            stream,
            a,
            b,
            &mut c,
            &GemmOptions {
                beta: 0.0,
                ..opts.clone()
            },
        )?;
        Ok(out)
    }

    /// [`Kiln::attention`] into a new output shaped like `q` (packed) and, with `want_lse`, a
    /// new f32 LSE [B, Hq, Sq].
    pub fn attention_alloc<T: KilnElem + DeviceRepr + ValidAsZeroBits>(
        &self,
        stream: &Arc<CudaStream>,
        q: &TensorRef,
        k: &TensorRef,
        v: &TensorRef,
        want_lse: bool,
        opts: &AttentionOptions,
    ) -> Result<(CudaSlice<T>, Option<CudaSlice<f32>>)> {
        self.same_type::<T>("q", q)?;
        let mut out = self.alloc::<T>(stream, q.info.numel())?;
        let mut o = TensorMut::from_slice(&mut out, q.shape())?;
        let lse_shape = match (q.shape(), opts.layout) {
            ([b, s, h, _], crate::api::AttnLayout::Bshd) => vec![*b, *h, *s],
            ([b, h, s, _], crate::api::AttnLayout::Bhsd) => vec![*b, *h, *s],
            _ => vec![0, 0, 0],
        };
        let mut lse = match want_lse {
            true => Some(self.alloc::<f32>(stream, lse_shape.iter().product())?),
            false => None,
        };
        let mut lse_view = match lse.as_mut() {
            Some(l) => Some(TensorMut::from_slice(l, &lse_shape)?),
            None => None,
        };
        self.attention(stream, q, k, v, &mut o, lse_view.as_mut(), opts)?;
        Ok((out, lse))
    }

    /// [`Kiln::grouped_gemm`] into a new zero-filled output (rows no expert owns stay 0).
    pub fn grouped_gemm_alloc<T: KilnElem + DeviceRepr + ValidAsZeroBits>(
        &self,
        stream: &Arc<CudaStream>,
        x: &TensorRef,
        w: &TensorRef,
        rows: MoeRows<'_>,
    ) -> Result<CudaSlice<T>> {
        let shape = moe_out_shape(x, w.shape().get(1).copied().unwrap_or(0));
        let mut out = self.alloc_zeros::<T>(stream, shape.iter().product())?;
        let mut y = TensorMut::from_slice(&mut out, &shape)?;
        self.grouped_gemm(stream, x, w, rows, &mut y)?;
        Ok(out)
    }

    /// [`Kiln::swiglu`] into a new zero-filled output (rows no expert owns stay 0).
    pub fn swiglu_alloc<T: KilnElem + DeviceRepr + ValidAsZeroBits>(
        &self,
        stream: &Arc<CudaStream>,
        x: &TensorRef,
        w: SwigluWeights<TensorRef>,
        rows: MoeRows<'_>,
        routing: Option<&TensorRef>,
    ) -> Result<CudaSlice<T>> {
        let n = match &w {
            SwigluWeights::Interleaved(w) => w.shape().get(1).copied().unwrap_or(0) / 2,
            SwigluWeights::Separate { w1, .. } => w1.shape().get(1).copied().unwrap_or(0),
        };
        let shape = moe_out_shape(x, n);
        let mut out = self.alloc_zeros::<T>(stream, shape.iter().product())?;
        let mut h = TensorMut::from_slice(&mut out, &shape)?;
        self.swiglu(stream, x, w, rows, routing, &mut h)?;
        Ok(out)
    }

    fn same_type<T: KilnElem>(&self, arg: &str, t: &TensorRef) -> Result<()> {
        if T::DTYPE != t.dtype() {
            return Err(Error::argument(
                arg,
                ArgumentKind::DType,
                format!(
                    "the output type {} differs from `{arg}`'s {}; allocate the output as `{arg}`'s type",
                    T::DTYPE,
                    t.dtype()
                ),
            ));
        }
        Ok(())
    }

    /// Refuses an output of `n` elements of `T` on a capturing stream, or one the GPU has no
    /// free memory for (before allocating); its bytes otherwise.
    fn may_allocate<T>(&self, stream: &Arc<CudaStream>, n: usize) -> Result<usize> {
        self.check_stream(stream)?;
        self.cuda()
            .bind_to_thread()
            .map_err(|e| Error::cuda("binding the context", format!("{e:?}")))?;
        if is_capturing(stream.cu_stream())? {
            return Err(Error::Capture(
                "an `*_alloc` call would allocate its output during CUDA-graph capture; allocate the output before capturing and call the op that takes it".into(),
            ));
        }
        let bytes = n * std::mem::size_of::<T>();
        memory::ensure_free("this call's output", bytes as u64)?;
        Ok(bytes)
    }

    fn alloc<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        stream: &Arc<CudaStream>,
        n: usize,
    ) -> Result<CudaSlice<T>> {
        let bytes = self.may_allocate::<T>(stream, n)?;
        // SAFETY: every element is written by the op before anyone reads it (the GEMM and
        // attention outputs are written whole).
        unsafe { stream.alloc::<T>(n) }.map_err(|e| memory::alloc_error(bytes, e))
    }

    fn alloc_zeros<T: DeviceRepr + ValidAsZeroBits>(
        &self,
        stream: &Arc<CudaStream>,
        n: usize,
    ) -> Result<CudaSlice<T>> {
        let bytes = self.may_allocate::<T>(stream, n)?;
        stream
            .alloc_zeros::<T>(n)
            .map_err(|e| memory::alloc_error(bytes, e))
    }
}

/// x's leading dimensions and `n`.
fn moe_out_shape(x: &TensorRef, n: usize) -> Vec<usize> {
    let s = x.shape();
    let mut shape = s[..s.len().saturating_sub(1)].to_vec();
    shape.push(n);
    shape
}
