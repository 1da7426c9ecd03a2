//! The 4-bit ops for foreign callers: FP4 quantise, dequantise and the NVFP4 GEMV on raw tensor
//! descriptions and byte buffers. The `check_*` functions need no handle or GPU.

use cudarc::driver::sys::CUstream;

use super::handle::Kiln;
use super::tensor::RawTensor;
use crate::device::DeviceBuffer;
use crate::error::{ArgumentKind, Error, Result};
use crate::ops::fp4::nvfp4_gemv::{self, GemvOperands, GemvProblem};
use crate::ops::fp4::nvfp4_gemv_pack;
use crate::ops::fp4::{dequantize_into, quantize_into, Fp4Format, Fp4View};
use crate::ops::gemm::DType as OpDType;

/// A contiguous byte buffer on GPU `device` (packed codes or scale codes): its address and
/// length.
#[derive(Debug, Clone, Copy)]
pub struct RawBytes {
    pub ptr: u64,
    pub len: usize,
    pub device: usize,
}

/// A [rows, K] matrix in a 4-bit format: codes [rows, K/2], scales [rows, K/block], NVFP4's
/// tensor scale.
#[derive(Debug, Clone, Copy)]
pub struct RawFp4 {
    pub format: Fp4Format,
    pub rows: usize,
    pub k: usize,
    pub codes: RawBytes,
    pub scales: RawBytes,
    pub tensor_scale: f32,
}

/// `t`'s shape [rows, K] and dtype, after checking it is a row-major matrix of bf16, f16 or
/// f32 on `device`.
fn matrix(arg: &str, t: &RawTensor, device: usize) -> Result<(usize, usize, OpDType)> {
    let dtype = t.dtype.float().ok_or_else(|| {
        Error::argument(
            arg,
            ArgumentKind::DType,
            format!(
                "`{arg}` holds {}; the 4-bit ops take bf16, f16 or f32",
                t.dtype.name()
            ),
        )
    })?;
    if t.shape.len() != 2 {
        return Err(Error::argument(
            arg,
            ArgumentKind::Shape,
            format!(
                "`{arg}` has {} dimensions; pass a 2-D [rows, K] matrix",
                t.shape.len()
            ),
        ));
    }
    let (rows, k) = (t.shape[0], t.shape[1]);
    let row_major =
        t.strides.len() == 2 && t.strides[1] == 1 && (rows <= 1 || t.strides[0] == k as isize);
    if !row_major {
        return Err(Error::argument(
            arg,
            ArgumentKind::Stride,
            format!(
                "`{arg}` has strides {:?}; pass a contiguous row-major matrix (.contiguous())",
                t.strides
            ),
        ));
    }
    check_device(arg, t.device, device)?;
    Ok((rows, k, dtype))
}

fn check_device(arg: &str, got: usize, want: usize) -> Result<()> {
    if got == want {
        return Ok(());
    }
    Err(Error::argument(
        arg,
        ArgumentKind::Device,
        format!("`{arg}` is on GPU {got} but the op runs on GPU {want}; move it there"),
    ))
}

/// Checks a packed matrix against its format (K whole blocks, buffer lengths, the tensor scale).
fn check_packed(w: &RawFp4, device: usize) -> Result<()> {
    check_device("codes", w.codes.device, device)?;
    check_device("scales", w.scales.device, device)?;
    crate::ops::fp4::fp4_quant::check_packed(w.format, w.rows, w.k, w.codes.len, w.scales.len)?;
    if w.format == Fp4Format::Nvfp4 {
        crate::ops::fp4::fp4_quant::check_tensor_scale(w.tensor_scale)?;
    }
    Ok(())
}

/// The checks of [`fp4_quantize`]: `x` a row-major [rows, K] bf16/f16/f32 matrix, K whole
/// blocks, codes and scales long enough, a given tensor scale valid (NVFP4 only).
pub fn check_fp4_quantize(
    device: usize,
    x: &RawTensor,
    format: Fp4Format,
    tensor_scale: Option<f32>,
    codes: &RawBytes,
    scales: &RawBytes,
) -> Result<()> {
    let (rows, k, _) = matrix("x", x, device)?;
    let w = RawFp4 {
        format,
        rows,
        k,
        codes: *codes,
        scales: *scales,
        tensor_scale: tensor_scale.unwrap_or(1.0),
    };
    check_packed(&w, device)?;
    if tensor_scale.is_some() && format == Fp4Format::Mxfp4 {
        return Err(Error::invalid(
            "mxfp4 has no tensor scale: its E8M0 block scales cover the whole range",
        ));
    }
    Ok(())
}

/// Quantises `x` into `codes` and `scales`; returns the tensor scale (MXFP4: 1). Waits for the
/// stream: a NaN or infinite element is refused with its position.
///
/// # Safety
/// Every tensor and buffer must describe live device memory of the handle's GPU that stays
/// valid (and unwritten by others) until the call returns.
pub unsafe fn fp4_quantize(
    k: &Kiln,
    stream: CUstream,
    x: &RawTensor,
    format: Fp4Format,
    tensor_scale: Option<f32>,
    codes: &RawBytes,
    scales: &RawBytes,
) -> Result<f32> {
    check_fp4_quantize(k.ordinal(), x, format, tensor_scale, codes, scales)?;
    let (rows, kk, input) = matrix("x", x, k.ordinal())?;
    let label = format!("{format} quantise {rows}x{kk} {input}");
    k.run(Some(stream), &label, &label, |ctx, _, _| {
        // SAFETY: the caller vouches for the memory (this function's contract).
        let (bx, bc, bs) = unsafe {
            (
                DeviceBuffer::borrowed(x.ptr, rows * kk * input.size()),
                DeviceBuffer::borrowed(codes.ptr, codes.len),
                DeviceBuffer::borrowed(scales.ptr, scales.len),
            )
        };
        quantize_into(
            ctx,
            &bx,
            input,
            rows,
            kk,
            kk,
            format,
            tensor_scale,
            &bc,
            &bs,
        )
    })
}

/// The checks of [`fp4_dequantize`]: `w` consistent, `y` a row-major [rows, K] bf16/f16/f32.
pub fn check_fp4_dequantize(device: usize, w: &RawFp4, y: &RawTensor) -> Result<()> {
    check_packed(w, device)?;
    let (rows, k, _) = matrix("out", y, device)?;
    if (rows, k) != (w.rows, w.k) {
        return Err(Error::argument(
            "out",
            ArgumentKind::Shape,
            format!(
                "`out` is [{rows}, {k}] but the {} tensor is [{}, {}]",
                w.format, w.rows, w.k
            ),
        ));
    }
    Ok(())
}

/// Dequantises `w` into `y`: each value the exact e2m1 x scale (x tensor scale) rounded once.
/// Waits for the stream: a scale with no value is refused.
///
/// # Safety
/// As [`fp4_quantize`].
pub unsafe fn fp4_dequantize(k: &Kiln, stream: CUstream, w: &RawFp4, y: &RawTensor) -> Result<()> {
    check_fp4_dequantize(k.ordinal(), w, y)?;
    let (_, _, output) = matrix("out", y, k.ordinal())?;
    let label = format!("{} dequantise {}x{} {output}", w.format, w.rows, w.k);
    k.run(Some(stream), &label, &label, |ctx, _, _| {
        // SAFETY: the caller vouches for the memory (this function's contract).
        let (bc, bs, by) = unsafe {
            (
                DeviceBuffer::borrowed(w.codes.ptr, w.codes.len),
                DeviceBuffer::borrowed(w.scales.ptr, w.scales.len),
                DeviceBuffer::borrowed(y.ptr, w.rows * w.k * output.size()),
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

/// The checks of [`nvfp4_gemv`]: `x` bf16 [M, K] (M 1..=16), `w` NVFP4 [N, K], `y` bf16 or
/// f16 [M, N], all row-major; returns the problem.
pub fn check_nvfp4_gemv(
    device: usize,
    x: &RawTensor,
    w: &RawFp4,
    y: &RawTensor,
) -> Result<GemvProblem> {
    let (m, k, xt) = matrix("x", x, device)?;
    if xt != OpDType::Bf16 {
        return Err(Error::argument(
            "x",
            ArgumentKind::DType,
            format!("`x` is {xt}; the NVFP4 GEMV takes bf16 activations"),
        ));
    }
    if w.format != Fp4Format::Nvfp4 {
        return Err(Error::invalid(format!(
            "the GEMV takes NVFP4 weights, not {}",
            w.format
        )));
    }
    check_packed(w, device)?;
    let (ym, yn, out) = matrix("out", y, device)?;
    if k != w.k || (ym, yn) != (m, w.rows) {
        return Err(Error::argument(
            "out",
            ArgumentKind::Shape,
            format!(
                "x [{m}, {k}] . w^T ([{}, {}]) is [{m}, {}], but `out` is [{ym}, {yn}]",
                w.rows, w.k, w.rows
            ),
        ));
    }
    let p = GemvProblem::new(m, w.rows, k, out);
    p.validate()?;
    for (name, ptr) in [
        ("x", x.ptr),
        ("codes", w.codes.ptr),
        ("scales", w.scales.ptr),
    ] {
        if !ptr.is_multiple_of(16) {
            return Err(Error::invalid(format!(
                "`{name}` must start on a 16-byte boundary (the kernel's vector loads)"
            )));
        }
    }
    Ok(p)
}

/// The checks of [`nvfp4_gemv_layout`]: `w` NVFP4 [rows, K] with K a multiple of 128, `dst`
/// and `dst_scales` on its GPU, as long as its codes and scales and apart from them.
pub fn check_nvfp4_gemv_layout(
    device: usize,
    w: &RawFp4,
    dst: &RawBytes,
    dst_scales: &RawBytes,
) -> Result<()> {
    if w.format != Fp4Format::Nvfp4 {
        return Err(Error::invalid(format!(
            "the GEMV layout is NVFP4's, not {}",
            w.format
        )));
    }
    check_packed(w, device)?;
    check_device("out", dst.device, device)?;
    check_device("out_scales", dst_scales.device, device)?;
    // SAFETY: never dereferenced: the check reads the sizes and addresses only.
    let b = unsafe { layout_buffers(w, dst, dst_scales) };
    let bufs = nvfp4_gemv_pack::LayoutBuffers::of(&b);
    nvfp4_gemv_pack::check_gemv_layout(w.rows, w.k, &bufs)
}

/// `w`'s codes and scales and the GEMV layout's, borrowed.
///
/// # Safety
/// As [`DeviceBuffer::borrowed`]: dereferenced only while the caller's memory is alive.
unsafe fn layout_buffers(w: &RawFp4, dst: &RawBytes, dst_scales: &RawBytes) -> [DeviceBuffer; 4] {
    // SAFETY: the caller's contract.
    unsafe {
        [
            DeviceBuffer::borrowed(w.codes.ptr, w.codes.len),
            DeviceBuffer::borrowed(w.scales.ptr, w.scales.len),
            DeviceBuffer::borrowed(dst.ptr, dst.len),
            DeviceBuffer::borrowed(dst_scales.ptr, dst_scales.len),
        ]
    }
}

/// Writes `w`'s codes and scales into `dst` and `dst_scales` in the GEMV layout (each word's
/// bits placed for the GEMV's decode, a whole 16-row tile's step of codes and scales
/// contiguous; other buffers than `w`'s: the layout moves bytes between rows), enqueued on
/// `stream`; [`nvfp4_gemv`] with `gemv_layout` reads them, with `w`'s tensor scale.
///
/// # Safety
/// As [`fp4_quantize`], until `stream` has run the launch.
pub unsafe fn nvfp4_gemv_layout(
    k: &Kiln,
    stream: CUstream,
    w: &RawFp4,
    dst: &RawBytes,
    dst_scales: &RawBytes,
) -> Result<()> {
    check_nvfp4_gemv_layout(k.ordinal(), w, dst, dst_scales)?;
    let label = format!("nvfp4 GEMV layout {}x{}", w.rows, w.k);
    k.run(Some(stream), &label, &label, |ctx, _, _| {
        // SAFETY: the caller vouches for the memory (this function's contract).
        let b = unsafe { layout_buffers(w, dst, dst_scales) };
        let bufs = nvfp4_gemv_pack::LayoutBuffers::of(&b);
        nvfp4_gemv_pack::to_gemv_layout(ctx, w.rows, 1, w.k, &bufs)
    })
}

/// y = g * x . w^T, enqueued on `stream` and not waited for; `gemv_layout`: `w`'s codes are in
/// the GEMV layout ([`nvfp4_gemv_layout`]; K a multiple of 128), read by its faster decode.
///
/// # Safety
/// As [`fp4_quantize`], until `stream` has run the launch.
pub unsafe fn nvfp4_gemv(
    k: &Kiln,
    stream: CUstream,
    x: &RawTensor,
    w: &RawFp4,
    y: &RawTensor,
    gemv_layout: bool,
) -> Result<()> {
    let p = check_nvfp4_gemv(k.ordinal(), x, w, y)?;
    let label = format!("{} {}", nvfp4_gemv::NAME, p.label());
    k.run(Some(stream), &label, &label, |ctx, _, _| {
        // SAFETY: the caller vouches for the memory (this function's contract).
        let (bx, bc, bs, by) = unsafe {
            (
                DeviceBuffer::borrowed(x.ptr, p.m * p.k * 2),
                DeviceBuffer::borrowed(w.codes.ptr, w.codes.len),
                DeviceBuffer::borrowed(w.scales.ptr, w.scales.len),
                DeviceBuffer::borrowed(y.ptr, p.m * p.n * p.output.size()),
            )
        };
        let ops = GemvOperands {
            x: &bx,
            ldx: p.k,
            w: Fp4View {
                format: w.format,
                rows: w.rows,
                k: w.k,
                codes: &bc,
                scales: &bs,
                tensor_scale: w.tensor_scale,
            },
            y: &by,
            ldy: p.n,
        };
        if gemv_layout {
            nvfp4_gemv::launch_packed(ctx, &p, &ops)
        } else {
            nvfp4_gemv::launch(ctx, &p, &ops)
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::DType;

    fn bytes(len: usize) -> RawBytes {
        RawBytes {
            ptr: 0x1000,
            len,
            device: 0,
        }
    }

    fn nvfp4(rows: usize, k: usize) -> RawFp4 {
        RawFp4 {
            format: Fp4Format::Nvfp4,
            rows,
            k,
            codes: bytes(rows * k / 2),
            scales: bytes(rows * k / 16),
            tensor_scale: 0.5,
        }
    }

    #[test]
    fn bad_fp4_arguments_are_refused_without_a_gpu() {
        let x = RawTensor::contiguous(0x1000, DType::Bf16, &[4, 64], 0);
        let ok = check_fp4_quantize(0, &x, Fp4Format::Nvfp4, None, &bytes(128), &bytes(16));
        assert!(ok.is_ok(), "{ok:?}");
        let e = check_fp4_quantize(0, &x, Fp4Format::Nvfp4, None, &bytes(127), &bytes(16));
        assert!(e.unwrap_err().to_string().contains("packs into 128"));
        let odd = RawTensor::contiguous(0x1000, DType::Bf16, &[4, 40], 0);
        let e = check_fp4_quantize(0, &odd, Fp4Format::Nvfp4, None, &bytes(80), &bytes(10));
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("pad K with zeros to 48"));
        let e = check_fp4_quantize(0, &x, Fp4Format::Mxfp4, Some(1.0), &bytes(128), &bytes(8));
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("mxfp4 has no tensor scale"));
        let ints = RawTensor::contiguous(0x1000, DType::I32, &[4, 64], 0);
        let e = check_fp4_quantize(0, &ints, Fp4Format::Nvfp4, None, &bytes(128), &bytes(16));
        assert!(e.unwrap_err().to_string().contains("bf16, f16 or f32"));
        let mut strided = x.clone();
        strided.strides = vec![128, 1];
        let e = check_fp4_quantize(0, &strided, Fp4Format::Nvfp4, None, &bytes(128), &bytes(16));
        assert!(e.unwrap_err().to_string().contains("contiguous"));
        let e = check_fp4_quantize(1, &x, Fp4Format::Nvfp4, None, &bytes(128), &bytes(16));
        assert!(e.unwrap_err().to_string().contains("GPU 0"));

        let w = nvfp4(4, 64);
        let y = RawTensor::contiguous(0x1000, DType::F32, &[4, 64], 0);
        assert!(check_fp4_dequantize(0, &w, &y).is_ok());
        let y2 = RawTensor::contiguous(0x1000, DType::F32, &[4, 32], 0);
        let e = check_fp4_dequantize(0, &w, &y2).unwrap_err();
        assert!(e.to_string().contains("[4, 32]"), "{e}");
        let bad_g = RawFp4 {
            tensor_scale: 0.0,
            ..w
        };
        assert!(check_fp4_dequantize(0, &bad_g, &y).is_err());

        let w = nvfp4(256, 128);
        let xv = RawTensor::contiguous(0x1000, DType::Bf16, &[1, 128], 0);
        let yv = RawTensor::contiguous(0x1000, DType::Bf16, &[1, 256], 0);
        let p = check_nvfp4_gemv(0, &xv, &w, &yv).unwrap();
        assert_eq!((p.m, p.n, p.k), (1, 256, 128));
        let y_wrong = RawTensor::contiguous(0x1000, DType::Bf16, &[1, 255], 0);
        assert!(check_nvfp4_gemv(0, &xv, &w, &y_wrong).is_err());
        let x17 = RawTensor::contiguous(0x1000, DType::Bf16, &[17, 128], 0);
        let y17 = RawTensor::contiguous(0x1000, DType::Bf16, &[17, 256], 0);
        let e = check_nvfp4_gemv(0, &x17, &w, &y17).unwrap_err();
        assert!(e.to_string().contains("1..=16"), "{e}");
        let xf = RawTensor::contiguous(0x1000, DType::F16, &[1, 128], 0);
        let e = check_nvfp4_gemv(0, &xf, &w, &yv).unwrap_err();
        assert!(e.to_string().contains("bf16 activations"), "{e}");
    }
}
