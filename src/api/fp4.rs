//! The 4-bit formats on the caller's cudarc buffers: quantise a row-major matrix to NVFP4 or
//! MXFP4 in the standard layout, dequantise it, and the NVFP4 GEMV (M 1..16).

use cudarc::driver::{CudaSlice, CudaStream, DevicePtr, DevicePtrMut};
use half::bf16;

use super::dtype::KilnElem;
use super::handle::Kiln;
use crate::device::DeviceBuffer;
use crate::error::{ArgumentKind, Error, Result};
use crate::ops::fp4::nvfp4_gemv::{self, GemvOperands, GemvProblem};
use crate::ops::fp4::nvfp4_gemv_pack;
use crate::ops::fp4::{dequantize_into, quantize_into, Fp4Format, Fp4View};

/// A [rows, K] matrix in a 4-bit format in the caller's memory: codes [rows, K/2] (two e2m1
/// per byte, element 0 in the low nibble), scales [rows, K/block] (e4m3 for NVFP4, E8M0 for
/// MXFP4) and NVFP4's tensor scale (ignored for MXFP4).
pub struct Fp4Tensor<'a> {
    pub format: Fp4Format,
    pub rows: usize,
    pub k: usize,
    pub codes: &'a CudaSlice<u8>,
    pub scales: &'a CudaSlice<u8>,
    pub tensor_scale: f32,
}

fn ops_dtype<T: KilnElem>(arg: &str) -> Result<crate::ops::gemm::DType> {
    T::DTYPE.float().ok_or_else(|| {
        Error::argument(
            arg,
            ArgumentKind::DType,
            format!("`{arg}` holds i32; the 4-bit formats take bf16, f16 or f32"),
        )
    })
}

impl Kiln {
    /// Quantises the row-major [rows, K] matrix `x` into `codes` and `scales` (at least
    /// [rows, K/2] and [rows, K/block] bytes) with the format's recipe, and returns the tensor
    /// scale (NVFP4: `tensor_scale` if given, else amax / 2688; MXFP4: 1). Waits for the
    /// stream: a NaN or infinite element is refused with its position.
    #[allow(clippy::too_many_arguments)]
    pub fn fp4_quantize<T: KilnElem>(
        &self,
        stream: &CudaStream,
        x: &CudaSlice<T>,
        rows: usize,
        k: usize,
        format: Fp4Format,
        tensor_scale: Option<f32>,
        codes: &mut CudaSlice<u8>,
        scales: &mut CudaSlice<u8>,
    ) -> Result<f32> {
        self.check_stream(stream)?;
        let input = ops_dtype::<T>("x")?;
        let (nc, ns) = (codes.len(), scales.len());
        let (px, _gx) = x.device_ptr(stream);
        let (pc, _gc) = codes.device_ptr_mut(stream);
        let (ps, _gs) = scales.device_ptr_mut(stream);
        let label = format!("{format} quantise {rows}x{k} {input}");
        self.run(Some(stream.cu_stream()), &label, &label, |ctx, _, _| {
            // SAFETY: each range is the whole of a live cudarc allocation of this context, held
            // by the borrows above until the call returns (it waits for the stream).
            let (bx, bc, bs) = unsafe {
                (
                    DeviceBuffer::borrowed(px, x.len() * input.size()),
                    DeviceBuffer::borrowed(pc, nc),
                    DeviceBuffer::borrowed(ps, ns),
                )
            };
            quantize_into(ctx, &bx, input, rows, k, k, format, tensor_scale, &bc, &bs)
        })
    }

    /// Dequantises `w` into the row-major [rows, K] `y` (bf16, f16 or f32): each value the
    /// exact e2m1 x scale (x tensor scale) rounded once. Waits for the stream: a scale with no
    /// value (a negative or NaN e4m3, E8M0's NaN) is refused.
    pub fn fp4_dequantize<T: KilnElem>(
        &self,
        stream: &CudaStream,
        w: &Fp4Tensor,
        y: &mut CudaSlice<T>,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let output = ops_dtype::<T>("y")?;
        let (pc, _gc) = w.codes.device_ptr(stream);
        let (ps, _gs) = w.scales.device_ptr(stream);
        let ny = y.len();
        let (py, _gy) = y.device_ptr_mut(stream);
        let label = format!("{} dequantise {}x{} {output}", w.format, w.rows, w.k);
        self.run(Some(stream.cu_stream()), &label, &label, |ctx, _, _| {
            // SAFETY: as in fp4_quantize: whole live allocations, borrowed until the call returns.
            let (bc, bs, by) = unsafe {
                (
                    DeviceBuffer::borrowed(pc, w.codes.len()),
                    DeviceBuffer::borrowed(ps, w.scales.len()),
                    DeviceBuffer::borrowed(py, ny * output.size()),
                )
            };
            let view = Fp4View {
                format: w.format,
                rows: w.rows,
                k: w.k,
                codes: &bc,
                scales: &bs,
                tensor_scale: w.tensor_scale,
            };
            dequantize_into(ctx, &view, output, &by, w.k, true)
        })
    }

    /// y [M, N] = g * x [M, K] . w^T for bf16 `x` with M 1..=16 and NVFP4 `w` [N, K], bf16 or
    /// f16 `y`; enqueued on `stream`, never waited for.
    pub fn nvfp4_gemv<T: KilnElem>(
        &self,
        stream: &CudaStream,
        x: &CudaSlice<bf16>,
        m: usize,
        w: &Fp4Tensor,
        y: &mut CudaSlice<T>,
    ) -> Result<()> {
        self.gemv(stream, x, m, w, y, false)
    }

    /// Writes the codes and scales of NVFP4 `w` [rows, K] (K a multiple of 128) into `dst` and
    /// `dst_scales` in the GEMV layout: the bits of each 32-bit word placed for the GEMV's faster
    /// decode (docs/fp4.md G10) and, in each whole 16-row tile, a step's codes and scales
    /// contiguous (G52, G60, G61); the tensor scale stays `w`'s. `dst` and `dst_scales` are
    /// buffers of their own (the layout moves bytes between rows). Done once per weight, at load
    /// time; enqueued on `stream`. [`Kiln::nvfp4_gemv_packed`] reads the result.
    pub fn nvfp4_gemv_layout(
        &self,
        stream: &CudaStream,
        w: &Fp4Tensor,
        dst: &mut CudaSlice<u8>,
        dst_scales: &mut CudaSlice<u8>,
    ) -> Result<()> {
        self.check_stream(stream)?;
        if w.format != Fp4Format::Nvfp4 {
            return Err(Error::invalid(format!(
                "the GEMV layout is NVFP4's, not {}",
                w.format
            )));
        }
        let (nd, nds) = (dst.len(), dst_scales.len());
        let (pc, _gc) = w.codes.device_ptr(stream);
        let (ps, _gs) = w.scales.device_ptr(stream);
        let (pd, _gd) = dst.device_ptr_mut(stream);
        let (pds, _gds) = dst_scales.device_ptr_mut(stream);
        let label = format!("nvfp4 GEMV layout {}x{}", w.rows, w.k);
        self.run(Some(stream.cu_stream()), &label, &label, |ctx, _, _| {
            // SAFETY: whole live allocations of this context, borrowed until the launch is
            // enqueued; cudarc's guards order later use after it.
            let b = unsafe {
                [
                    DeviceBuffer::borrowed(pc, w.codes.len()),
                    DeviceBuffer::borrowed(ps, w.scales.len()),
                    DeviceBuffer::borrowed(pd, nd),
                    DeviceBuffer::borrowed(pds, nds),
                ]
            };
            let bufs = nvfp4_gemv_pack::LayoutBuffers::of(&b);
            nvfp4_gemv_pack::to_gemv_layout(ctx, w.rows, 1, w.k, &bufs)
        })
    }

    /// [`Kiln::nvfp4_gemv`] on weights whose codes and scales are in the GEMV layout
    /// ([`Kiln::nvfp4_gemv_layout`]; K a multiple of 128).
    pub fn nvfp4_gemv_packed<T: KilnElem>(
        &self,
        stream: &CudaStream,
        x: &CudaSlice<bf16>,
        m: usize,
        w: &Fp4Tensor,
        y: &mut CudaSlice<T>,
    ) -> Result<()> {
        self.gemv(stream, x, m, w, y, true)
    }

    fn gemv<T: KilnElem>(
        &self,
        stream: &CudaStream,
        x: &CudaSlice<bf16>,
        m: usize,
        w: &Fp4Tensor,
        y: &mut CudaSlice<T>,
        gemv_layout: bool,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let output = ops_dtype::<T>("y")?;
        let p = GemvProblem::new(m, w.rows, w.k, output);
        p.validate()?;
        let (px, _gx) = x.device_ptr(stream);
        let (pc, _gc) = w.codes.device_ptr(stream);
        let (ps, _gs) = w.scales.device_ptr(stream);
        let ny = y.len();
        let (py, _gy) = y.device_ptr_mut(stream);
        let label = format!("{} {}", nvfp4_gemv::NAME, p.label());
        self.run(Some(stream.cu_stream()), &label, &label, |ctx, _, _| {
            // SAFETY: whole live allocations of this context; cudarc's guards order later use
            // of them after this launch on the stream.
            let (bx, bc, bs, by) = unsafe {
                (
                    DeviceBuffer::borrowed(px, x.len() * 2),
                    DeviceBuffer::borrowed(pc, w.codes.len()),
                    DeviceBuffer::borrowed(ps, w.scales.len()),
                    DeviceBuffer::borrowed(py, ny * output.size()),
                )
            };
            let ops = GemvOperands {
                x: &bx,
                ldx: w.k,
                w: Fp4View {
                    format: w.format,
                    rows: w.rows,
                    k: w.k,
                    codes: &bc,
                    scales: &bs,
                    tensor_scale: w.tensor_scale,
                },
                y: &by,
                ldy: w.rows,
            };
            if gemv_layout {
                nvfp4_gemv::launch_packed(ctx, &p, &ops)
            } else {
                nvfp4_gemv::launch(ctx, &p, &ops)
            }
        })
    }
}
