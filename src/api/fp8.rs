//! The FP8 ops on cudarc buffers, with DeepGEMM's signatures and layouts (`validate::fp8`): the
//! dense block-scaled GEMM, the grouped GEMM over contiguous or masked rows, and the casts to
//! e4m3 per token (1x128) or per block (128x128), each enqueued on the caller's stream.
//!
//! Device scales are not read on the host (that would synchronise): a NaN or infinite scale
//! gives NaN results where it applies. Scales straight from [`Kiln::per_token_cast_to_fp8`] or
//! [`Kiln::per_block_cast_to_fp8`] are always finite; the Python layer checks scales given on
//! the CPU before copying them.

use cudarc::driver::{sys, CudaStream};

use super::handle::Kiln;
use super::options::MoeRows;
use super::tensor::{RawTensor, TensorMut, TensorRef};
use super::validate::{self, Fp8CastPlan, Fp8GemmPlan, Fp8GroupedPlan, Operand};
use crate::device::DeviceBuffer;
use crate::error::Result;
use crate::formats::ScaleRecipe;
use crate::ops::fp8::{self, Fp8Operands, Granularity, QuantSpec, Scales};
use crate::ops::moe::fp8_problem::Fp8MoeOperands;
use crate::ops::moe::schedule;
use crate::ops::moe::{fp8_grouped, fp8_swiglu};

/// A buffer over an operand's memory.
///
/// # Safety
/// The operand must describe memory of the current context that outlives the launch.
pub(super) unsafe fn borrow(op: Operand) -> DeviceBuffer {
    DeviceBuffer::borrowed(op.ptr, op.bytes)
}

impl Kiln {
    fn launch_fp8_gemm(&self, stream: sys::CUstream, plan: &Fp8GemmPlan) -> Result<()> {
        let key = format!("fp8 gemm {}", plan.problem);
        self.run(
            Some(stream),
            &key,
            &plan.problem.to_string(),
            |ctx, _, _| {
                // SAFETY: the plan's operands are the caller's views, alive until the stream has run.
                let (a, sa, b, sb, c) = unsafe {
                    (
                        borrow(plan.a),
                        borrow(plan.sa),
                        borrow(plan.b),
                        borrow(plan.sb),
                        borrow(plan.c),
                    )
                };
                let ops = Fp8Operands {
                    a: &a,
                    b: &b,
                    sa: Scales::Device(&sa),
                    sb: Scales::Device(&sb),
                    c: &c,
                };
                fp8::gemm(ctx, &plan.problem, &ops)
            },
        )
    }

    fn launch_fp8_grouped(&self, stream: sys::CUstream, plan: &Fp8GroupedPlan) -> Result<()> {
        let p = &plan.problem;
        let key = format!("{} x_rows {}", p.label(), p.x_rows());
        self.run(Some(stream), &key, &p.label(), |ctx, ws, capturing| {
            let sched_bytes = schedule::sched_bytes(p.experts);
            let sched = Operand {
                ptr: ws.moe_sched.at_least(ctx, sched_bytes, capturing)?,
                bytes: sched_bytes,
            };
            // SAFETY: as above; the schedule workspace lives as long as the handle.
            let (x, sx, w, sw, rows, y, sched) = unsafe {
                (
                    borrow(plan.x),
                    borrow(plan.sx),
                    borrow(plan.w),
                    borrow(plan.sw),
                    borrow(plan.rows),
                    borrow(plan.y),
                    borrow(sched),
                )
            };
            // SAFETY: as above (the SwiGLU's W3, routing weights and output scales).
            let w3 = plan.w3.map(|(w, s)| unsafe { (borrow(w), borrow(s)) });
            let route = plan.route.map(|r| unsafe { borrow(r) });
            let sy = plan.sy.map(|s| unsafe { borrow(s) });
            let ops = Fp8MoeOperands {
                x: &x,
                sx: &sx,
                w: &w,
                sw: &sw,
                w3: w3.as_ref().map(|(w, s)| (w, s)),
                y: &y,
                sy: sy.as_ref(),
                rows: &rows,
                route: route.as_ref(),
                sched: &sched,
            };
            if p.swiglu.is_some() {
                fp8_swiglu::launch(ctx, p, &ops)
            } else {
                fp8_grouped::launch(ctx, p, &ops)
            }
        })
    }

    fn launch_fp8_cast(
        &self,
        stream: sys::CUstream,
        plan: &Fp8CastPlan,
        g: Granularity,
    ) -> Result<()> {
        let key = format!("fp8 cast {g} {} {}x{}", plan.input, plan.rows, plan.cols);
        self.run(Some(stream), &key, &key, |ctx, _, _| {
            // SAFETY: as above.
            let (x, codes, scales) =
                unsafe { (borrow(plan.x), borrow(plan.codes), borrow(plan.scales)) };
            let spec = QuantSpec::e4m3(g, ScaleRecipe::Fp32);
            fp8::quantize_into(
                ctx, &x, plan.input, plan.rows, plan.cols, plan.ldx, spec, &codes, plan.cols,
                &scales,
            )
        })
    }

    /// DeepGEMM's `gemm_fp8_fp8_bf16_nt`: out [M, N] bf16 = dequant(a) · dequant(b)ᵀ with a
    /// [M, K] and b [N, K] e4m3 (`u8` views), `sa` a's 1x128 scales ([M, ceil(K/128)] with
    /// strides [1, M], or a contiguous [ceil(K/128), M]) and `sb` b's 128x128 scales
    /// ([ceil(N/128), ceil(K/128)]), fp32 promotion every 128 of K. K: a multiple of 16.
    pub fn fp8_gemm_nt(
        &self,
        stream: &CudaStream,
        (a, sa): (&TensorRef, &TensorRef),
        (b, sb): (&TensorRef, &TensorRef),
        out: &mut TensorMut,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let Some(plan) = validate::fp8_gemm(
            self.ordinal(),
            &a.info,
            &sa.info,
            &b.info,
            &sb.info,
            &out.info,
        )?
        else {
            return Ok(());
        };
        let _order = (
            a.track(stream),
            sa.track(stream),
            b.track(stream),
            sb.track(stream),
            out.track(stream),
        );
        self.launch_fp8_gemm(stream.cu_stream(), &plan)
    }

    /// DeepGEMM's `m_grouped_gemm_fp8_fp8_bf16_nt_contiguous`, on kiln's layout: x [rows, K] holds
    /// the tokens sorted by expert, expert e owning rows offsets[e] .. offsets[e + 1] (i32
    /// [E + 1] on the GPU; any count per expert, no padding), w [E, N, K], sx 1x128 over x's rows,
    /// sw [E, ceil(N/128), ceil(K/128)]; out [rows, N] bf16 (rows of no expert are not written).
    pub fn fp8_grouped_gemm_contiguous(
        &self,
        stream: &CudaStream,
        (x, sx): (&TensorRef, &TensorRef),
        (w, sw): (&TensorRef, &TensorRef),
        offsets: &TensorRef,
        out: &mut TensorMut,
    ) -> Result<()> {
        self.fp8_grouped(stream, (x, sx), (w, sw), offsets, out, false)
    }

    /// DeepGEMM's `m_grouped_gemm_fp8_fp8_bf16_nt_masked`: x [E, max_rows, K] with counts[e]
    /// (i32 [E] on the GPU, so one CUDA graph serves any counts) valid rows per expert, sx the
    /// 1x128 scales of x as one [E * max_rows, K] matrix (what `per_token_cast_to_fp8` of that
    /// view gives), w and sw as the contiguous call; out [E, max_rows, N] bf16.
    pub fn fp8_grouped_gemm_masked(
        &self,
        stream: &CudaStream,
        (x, sx): (&TensorRef, &TensorRef),
        (w, sw): (&TensorRef, &TensorRef),
        counts: &TensorRef,
        out: &mut TensorMut,
    ) -> Result<()> {
        self.fp8_grouped(stream, (x, sx), (w, sw), counts, out, true)
    }

    /// The fused MoE SwiGLU on FP8 operands, h = silu(x W1ᵀ) * (x W3ᵀ), times the row's f32
    /// routing weight when `routing` is given (one per row of x): x and sx as the grouped GEMMs
    /// (contiguous by offsets or masked by counts, `rows`; read on the GPU), w1 and w3 [E, N, K]
    /// e4m3 with sw1 and sw3 [E, ceil(N/128), ceil(K/128)]. `h` [rows, N] (masked
    /// [E, max_rows, N]) is bf16 or f32, or with `sh` e4m3 codes and `sh` their 1x128 scales
    /// ([rows, ceil(N/128)] M-major, N a multiple of 16): the down projection's x and sx. Rows
    /// of no expert are not written.
    #[allow(clippy::too_many_arguments)]
    pub fn fp8_swiglu(
        &self,
        stream: &CudaStream,
        (x, sx): (&TensorRef, &TensorRef),
        (w1, sw1): (&TensorRef, &TensorRef),
        (w3, sw3): (&TensorRef, &TensorRef),
        rows: MoeRows<'_>,
        routing: Option<&TensorRef>,
        h: &mut TensorMut,
        mut sh: Option<&mut TensorMut>,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let Some(plan) = validate::fp8_swiglu(
            self.ordinal(),
            (&x.info, &sx.info),
            (&w1.info, &sw1.info),
            (&w3.info, &sw3.info),
            &rows.tensor().info,
            routing.map(|r| &r.info),
            (&h.info, sh.as_ref().map(|s| &s.info)),
            rows.is_counts(),
        )?
        else {
            return Ok(());
        };
        let _order = (
            [x, sx, w1, sw1, w3, sw3, rows.tensor()].map(|t| t.track(stream)),
            routing.and_then(|t| t.track(stream)),
            h.track(stream),
            sh.as_mut().and_then(|t| t.track(stream)),
        );
        self.launch_fp8_grouped(stream.cu_stream(), &plan)
    }

    fn fp8_grouped(
        &self,
        stream: &CudaStream,
        (x, sx): (&TensorRef, &TensorRef),
        (w, sw): (&TensorRef, &TensorRef),
        rows: &TensorRef,
        out: &mut TensorMut,
        masked: bool,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let Some(plan) = validate::fp8_grouped(
            self.ordinal(),
            &x.info,
            &sx.info,
            &w.info,
            &sw.info,
            &rows.info,
            &out.info,
            masked,
        )?
        else {
            return Ok(());
        };
        let _order = (
            x.track(stream),
            sx.track(stream),
            w.track(stream),
            sw.track(stream),
            rows.track(stream),
            out.track(stream),
        );
        self.launch_fp8_grouped(stream.cu_stream(), &plan)
    }

    /// x [rows, cols] (bf16, f16, f32) to e4m3 codes [rows, cols] and 1x128 scales
    /// ([rows, ceil(cols/128)] M-major, or a contiguous [ceil(cols/128), rows]): kiln's
    /// quantisation kernel, amax / 448 fp32 scales.
    pub fn per_token_cast_to_fp8(
        &self,
        stream: &CudaStream,
        x: &TensorRef,
        codes: &mut TensorMut,
        scales: &mut TensorMut,
    ) -> Result<()> {
        self.fp8_cast(stream, x, codes, scales, false)
    }

    /// x [rows, cols] to e4m3 codes and 128x128 scales [ceil(rows/128), ceil(cols/128)].
    pub fn per_block_cast_to_fp8(
        &self,
        stream: &CudaStream,
        x: &TensorRef,
        codes: &mut TensorMut,
        scales: &mut TensorMut,
    ) -> Result<()> {
        self.fp8_cast(stream, x, codes, scales, true)
    }

    fn fp8_cast(
        &self,
        stream: &CudaStream,
        x: &TensorRef,
        codes: &mut TensorMut,
        scales: &mut TensorMut,
        per_block: bool,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let Some(plan) = validate::fp8_cast(
            self.ordinal(),
            &x.info,
            &codes.info,
            &scales.info,
            per_block,
        )?
        else {
            return Ok(());
        };
        let _order = (x.track(stream), codes.track(stream), scales.track(stream));
        self.launch_fp8_cast(stream.cu_stream(), &plan, granularity(per_block))
    }
}

fn granularity(per_block: bool) -> Granularity {
    if per_block {
        Granularity::Block128x128
    } else {
        Granularity::Block1x128
    }
}

/// The checks of [`fp8_gemm_nt`] without a handle or a GPU.
pub fn check_fp8_gemm_nt(
    device: usize,
    a: &RawTensor,
    sa: &RawTensor,
    b: &RawTensor,
    sb: &RawTensor,
    out: &RawTensor,
) -> Result<()> {
    let a = a.info("a", false)?;
    let sa = sa.info("sa", false)?;
    let b = b.info("b", false)?;
    let sb = sb.info("sb", false)?;
    let c = out.info("out", false)?;
    validate::fp8_gemm(device, &a, &sa, &b, &sb, &c).map(|_| ())
}

/// [`Kiln::fp8_gemm_nt`] on raw tensors.
///
/// # Safety
/// Every tensor must describe live device memory of the handle's GPU that stays valid (and
/// unwritten by others) until `stream` has run the launch.
pub unsafe fn fp8_gemm_nt(
    k: &Kiln,
    stream: sys::CUstream,
    a: &RawTensor,
    sa: &RawTensor,
    b: &RawTensor,
    sb: &RawTensor,
    out: &RawTensor,
) -> Result<()> {
    let a = a.info("a", false)?;
    let sa = sa.info("sa", false)?;
    let b = b.info("b", false)?;
    let sb = sb.info("sb", false)?;
    let c = out.info("out", false)?;
    match validate::fp8_gemm(k.ordinal(), &a, &sa, &b, &sb, &c)? {
        Some(plan) => k.launch_fp8_gemm(stream, &plan),
        None => Ok(()),
    }
}

/// The checks of [`fp8_grouped_gemm`] without a handle or a GPU.
#[allow(clippy::too_many_arguments)]
pub fn check_fp8_grouped_gemm(
    device: usize,
    x: &RawTensor,
    sx: &RawTensor,
    w: &RawTensor,
    sw: &RawTensor,
    rows: &RawTensor,
    out: &RawTensor,
    masked: bool,
) -> Result<()> {
    let x = x.info("x", false)?;
    let sx = sx.info("sx", false)?;
    let w = w.info("w", false)?;
    let sw = sw.info("sw", false)?;
    let r = rows.info("rows", false)?;
    let y = out.info("out", false)?;
    validate::fp8_grouped(device, &x, &sx, &w, &sw, &r, &y, masked).map(|_| ())
}

/// [`Kiln::fp8_grouped_gemm_contiguous`] (`masked` false: rows are offsets) or
/// [`Kiln::fp8_grouped_gemm_masked`] (counts) on raw tensors.
///
/// # Safety
/// As [`fp8_gemm_nt`].
#[allow(clippy::too_many_arguments)]
pub unsafe fn fp8_grouped_gemm(
    k: &Kiln,
    stream: sys::CUstream,
    x: &RawTensor,
    sx: &RawTensor,
    w: &RawTensor,
    sw: &RawTensor,
    rows: &RawTensor,
    out: &RawTensor,
    masked: bool,
) -> Result<()> {
    let x = x.info("x", false)?;
    let sx = sx.info("sx", false)?;
    let w = w.info("w", false)?;
    let sw = sw.info("sw", false)?;
    let r = rows.info("rows", false)?;
    let y = out.info("out", false)?;
    match validate::fp8_grouped(k.ordinal(), &x, &sx, &w, &sw, &r, &y, masked)? {
        Some(plan) => k.launch_fp8_grouped(stream, &plan),
        None => Ok(()),
    }
}

/// The checks of [`fp8_cast`] without a handle or a GPU.
pub fn check_fp8_cast(
    device: usize,
    x: &RawTensor,
    codes: &RawTensor,
    scales: &RawTensor,
    per_block: bool,
) -> Result<()> {
    let x = x.info("x", false)?;
    let c = codes.info("codes", false)?;
    let s = scales.info("scales", false)?;
    validate::fp8_cast(device, &x, &c, &s, per_block).map(|_| ())
}

/// [`Kiln::per_token_cast_to_fp8`] (or, `per_block`, [`Kiln::per_block_cast_to_fp8`]) on raw
/// tensors.
///
/// # Safety
/// As [`fp8_gemm_nt`].
pub unsafe fn fp8_cast(
    k: &Kiln,
    stream: sys::CUstream,
    x: &RawTensor,
    codes: &RawTensor,
    scales: &RawTensor,
    per_block: bool,
) -> Result<()> {
    let x = x.info("x", false)?;
    let c = codes.info("codes", false)?;
    let s = scales.info("scales", false)?;
    match validate::fp8_cast(k.ordinal(), &x, &c, &s, per_block)? {
        Some(plan) => k.launch_fp8_cast(stream, &plan, granularity(per_block)),
        None => Ok(()),
    }
}
