//! kiln's FP8 ops as candle ops, with DeepGEMM's layouts: the casts of bf16, f16 or f32 tensors
//! to e4m3 codes with f32 scales per 1x128 group (per token) or 128x128 block, and the MoE grouped
//! GEMM over rows sorted by expert (DeepGEMM's `m_grouped_gemm_fp8_fp8_bf16_nt_contiguous`).
//!
//! Codes are candle's `DType::F8E4M3` (`U8` tensors holding e4m3fn bytes are taken too); scales
//! are f32. Scales are never read on the host (that would wait for the GPU): a NaN or infinite
//! scale gives NaN where it applies; the casts' own scales are always finite.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::CudaView;
use candle_core::cuda_backend::CudaDType;
use candle_core::{
    CpuStorage, CudaStorage, CustomOp1, CustomOp2, DType, Layout, Result, Shape, Tensor,
};
use float8::F8E4M3;
use half::{bf16, f16};
use kiln::{KilnElem, TensorMut, TensorRef};

use crate::{handle, keep_side, kerr, no_cpu, out, taken_side, with_view, wrap, In, SideOut};

/// The group of the scales along K (and along rows for the weights' blocks).
const GROUP: usize = 128;

/// The e4m3 codes of argument `arg` as kiln's byte view (`F8E4M3` or `U8` storage).
fn codes<'a>(s: &'a CudaStorage, l: &Layout, arg: &str) -> Result<In<'a, u8>> {
    let view: CudaView<'a, u8> = match s.dtype() {
        DType::U8 => s.as_cuda_slice::<u8>()?.slice(l.start_offset()..),
        DType::F8E4M3 => {
            let v = s.as_cuda_slice::<F8E4M3>()?.slice(l.start_offset()..);
            // SAFETY: e4m3 codes are bytes: the view has the same address and length.
            unsafe { v.transmute::<u8>(v.len()) }
                .ok_or_else(|| candle_core::Error::msg(format!("`{arg}`: its bytes")))?
        }
        d => candle_core::bail!("{}", not_codes(arg, d)),
    };
    Ok(In {
        view,
        dims: l.dims().to_vec(),
        strides: l.stride().iter().map(|&s| s as isize).collect(),
    })
}

fn not_codes(arg: &str, d: DType) -> String {
    format!(
        "`{arg}` holds {d:?}; kiln's FP8 ops take e4m3 codes (DType::F8E4M3, or U8 bytes): make them with per_token_cast_to_fp8 (activations) or per_block_cast_to_fp8 (weights)"
    )
}

fn is_codes(d: DType) -> bool {
    matches!(d, DType::F8E4M3 | DType::U8)
}

// ---------------------------------------------------------------------------------------------
// Casts

/// The cast of x to e4m3 codes and f32 scales: per token (x [rows, cols], scales per 1x128
/// group of a row) or per block (x [rows, cols] or experts [E, rows, cols], scales per 128x128
/// block, per expert). Used through [`per_token_cast_to_fp8`] and [`per_block_cast_to_fp8`],
/// which return the scales beside the codes.
struct Fp8Cast {
    per_block: bool,
    scales: SideOut,
}

/// (experts, rows, cols) of a cast's input, after checking its dtype and rank.
fn cast_dims(per_block: bool, dtype: DType, dims: &[usize]) -> Result<(usize, usize, usize)> {
    if !matches!(dtype, DType::BF16 | DType::F16 | DType::F32) {
        candle_core::bail!(
            "`x` holds {dtype:?}; kiln's FP8 casts read bf16, f16 or f32: convert with `to_dtype(DType::BF16)`"
        );
    }
    match (per_block, dims) {
        (_, &[rows, cols]) => Ok((1, rows, cols)),
        (true, &[e, rows, cols]) => Ok((e, rows, cols)),
        (false, d) => candle_core::bail!(
            "`x` is {d:?}; the per-token cast takes x [rows, cols]: reshape it to 2-D"
        ),
        (true, d) => candle_core::bail!(
            "`x` is {d:?}; the per-block cast takes weights [rows, cols] or experts [E, rows, cols]"
        ),
    }
}

impl Fp8Cast {
    /// The scales' dims as they are stored (per token: [ceil(cols/128), rows], which the
    /// caller sees transposed, DeepGEMM's M-major [rows, ceil(cols/128)]).
    fn scale_dims(&self, (e, rows, cols): (usize, usize, usize)) -> Vec<usize> {
        let kb = cols.div_ceil(GROUP);
        match (self.per_block, e) {
            (false, _) => vec![kb, rows],
            (true, 1) => vec![rows.div_ceil(GROUP), kb],
            (true, _) => vec![e, rows.div_ceil(GROUP), kb],
        }
    }
}

fn cast_fwd<T: CudaDType + KilnElem>(
    op: &Fp8Cast,
    x: &CudaStorage,
    l: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let dev = &x.device;
    let (e, rows, cols) = cast_dims(op.per_block, x.dtype(), l.dims())?;
    let ix = In::<T>::new(x, l)?;
    let sdims = op.scale_dims((e, rows, cols));
    let per_scales: usize = sdims.iter().product::<usize>() / e;
    let mut codes = out::<F8E4M3>(dev, e * rows * cols, false)?;
    let mut scales = out::<f32>(dev, e * per_scales, false)?;
    let (kiln, stream) = (handle(dev)?, dev.cuda_stream());
    let s = &ix.strides;
    for i in 0..e {
        // expert i's [rows, cols] (the whole x when it is 2-D)
        let (xv, xs) = if s.len() == 3 {
            (ix.view.slice(i * s[0] as usize..), [s[1], s[2]])
        } else {
            (ix.view.slice(0..), [s[0], s[1]])
        };
        let tx = TensorRef::from_slice_strided(&xv, &[rows, cols], &xs).map_err(kerr)?;
        let mut cv = codes.slice_mut(i * rows * cols..(i + 1) * rows * cols);
        // SAFETY: e4m3 codes are bytes: the same address and length.
        let mut cb = unsafe { cv.transmute_mut::<u8>(rows * cols) }
            .ok_or_else(|| candle_core::Error::msg("the codes' bytes"))?;
        let mut tc = TensorMut::from_slice(&mut cb, &[rows, cols]).map_err(kerr)?;
        let mut sv = scales.slice_mut(i * per_scales..(i + 1) * per_scales);
        if op.per_block {
            let d = &sdims[sdims.len() - 2..];
            let mut ts = TensorMut::from_slice(&mut sv, d).map_err(kerr)?;
            kiln.per_block_cast_to_fp8(&stream, &tx, &mut tc, &mut ts)
        } else {
            let kb = cols.div_ceil(GROUP);
            let mut ts = TensorMut::from_slice_strided(&mut sv, &[rows, kb], &[1, rows as isize])
                .map_err(kerr)?;
            kiln.per_token_cast_to_fp8(&stream, &tx, &mut tc, &mut ts)
        }
        .map_err(kerr)?;
    }
    keep_side(&op.scales, Some(scales), dev);
    Ok((wrap(codes, dev), Shape::from(l.dims())))
}

impl CustomOp1 for Fp8Cast {
    fn name(&self) -> &'static str {
        "kiln-fp8-cast"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        cast_dims(self.per_block, s.dtype(), l.dims())?;
        Err(no_cpu(self.name()))
    }
    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> Result<(CudaStorage, Shape)> {
        match s.dtype() {
            DType::BF16 => cast_fwd::<bf16>(self, s, l),
            DType::F16 => cast_fwd::<f16>(self, s, l),
            _ => cast_fwd::<f32>(self, s, l),
        }
    }
}

fn cast(x: &Tensor, per_block: bool) -> Result<(Tensor, Tensor)> {
    let op = Fp8Cast {
        per_block,
        scales: Some(Default::default()),
    };
    let codes = x.apply_op1_no_bwd(&op)?;
    let dims = cast_dims(per_block, x.dtype(), x.dims())?;
    let scales = taken_side(&op.scales, Shape::from(op.scale_dims(dims)))?;
    Ok((codes, if per_block { scales } else { scales.t()? }))
}

/// DeepGEMM's `per_token_cast_to_fp8`: x [rows, cols] (bf16, f16 or f32) to e4m3 codes
/// [rows, cols] (`F8E4M3`) and f32 scales [rows, ceil(cols/128)], one per 1x128 group (its
/// amax / 448), stored M-major (strides [1, rows]) as the FP8 GEMMs read them.
pub fn per_token_cast_to_fp8(x: &Tensor) -> Result<(Tensor, Tensor)> {
    cast(x, false)
}

/// DeepGEMM's `per_block_cast_to_fp8`: weights [rows, cols] to e4m3 codes and f32 scales
/// [ceil(rows/128), ceil(cols/128)], one per 128x128 block; experts [E, N, K] each alike, the
/// scales [E, ceil(N/128), ceil(K/128)] (what [`fp8_grouped_gemm`] takes as `sw`).
pub fn per_block_cast_to_fp8(w: &Tensor) -> Result<(Tensor, Tensor)> {
    cast(w, true)
}

// ---------------------------------------------------------------------------------------------
// Grouped GEMM

/// The FP8 MoE grouped GEMM, y[rows of e] = dequant(x[rows of e]) @ dequant(w[e])ᵀ in bf16: x
/// [rows, K] e4m3 codes sorted by expert with `sx` its 1x128 scales ([rows, ceil(K/128)]
/// M-major, as [`per_token_cast_to_fp8`] gives, or a contiguous [ceil(K/128), rows]); w
/// [E, N, K] codes with `sw` [E, ceil(N/128), ceil(K/128)] (as [`per_block_cast_to_fp8`] of the
/// experts gives); expert e owns rows `offsets[e]..offsets[e + 1]` (i32 [E + 1] on the GPU, any
/// count, no padding). y [rows, N] bf16 is zero where no expert owns the row. K a multiple of 16.
pub struct Fp8GroupedGemm {
    pub sx: Tensor,
    pub sw: Tensor,
    pub offsets: Tensor,
}

impl Fp8GroupedGemm {
    /// y's [rows, N] after the checks candle's side makes (dtypes and ranks); kiln checks the
    /// rest (K, the scales' shapes and strides, the offsets' length) at the launch.
    fn out_dims(&self, x: (DType, &[usize]), w: (DType, &[usize])) -> Result<(usize, usize)> {
        for (arg, d) in [("x", x.0), ("w", w.0)] {
            if !is_codes(d) {
                candle_core::bail!("{}", not_codes(arg, d));
            }
        }
        for (arg, t, want) in [
            ("sx", &self.sx, DType::F32),
            ("sw", &self.sw, DType::F32),
            ("offsets", &self.offsets, DType::I32),
        ] {
            if t.dtype() != want {
                candle_core::bail!(
                    "`{arg}` holds {:?}; the FP8 grouped GEMM takes {want:?} {arg}: convert with `to_dtype(DType::{want:?})`",
                    t.dtype()
                );
            }
        }
        match (x.1, w.1) {
            (&[rows, _], &[_, n, _]) => Ok((rows, n)),
            (&[_, _], d) => {
                candle_core::bail!("`w` is {d:?}; the FP8 grouped GEMM takes w [E, N, K]")
            }
            (d, _) => {
                candle_core::bail!("`x` is {d:?}; the FP8 grouped GEMM takes x [rows, K]")
            }
        }
    }
}

impl CustomOp2 for Fp8GroupedGemm {
    fn name(&self) -> &'static str {
        "kiln-fp8-grouped-gemm"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.out_dims((s1.dtype(), l1.dims()), (s2.dtype(), l2.dims()))?;
        Err(no_cpu(self.name()))
    }
    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        lx: &Layout,
        w: &CudaStorage,
        lw: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let (rows, n) = self.out_dims((x.dtype(), lx.dims()), (w.dtype(), lw.dims()))?;
        let dev = &x.device;
        let (ix, iw) = (codes(x, lx, "x")?, codes(w, lw, "w")?);
        let mut y = out::<bf16>(dev, rows * n, true)?;
        with_view::<f32, _>(&self.sx, "sx", |sx| {
            with_view::<f32, _>(&self.sw, "sw", |sw| {
                with_view::<i32, _>(&self.offsets, "offsets", |off| {
                    let mut ty = TensorMut::from_slice(&mut y, &[rows, n]).map_err(kerr)?;
                    handle(dev)?
                        .fp8_grouped_gemm_contiguous(
                            &dev.cuda_stream(),
                            (&ix.t()?, &sx),
                            (&iw.t()?, &sw),
                            &off,
                            &mut ty,
                        )
                        .map_err(kerr)
                })
            })
        })?;
        Ok((wrap(y, dev), Shape::from((rows, n))))
    }
}

/// The FP8 grouped GEMM (see [`Fp8GroupedGemm`]): `(x, sx)` and `(w, sw)` as the casts give
/// them, `offsets` i32 [E + 1].
pub fn fp8_grouped_gemm(
    (x, sx): (&Tensor, &Tensor),
    (w, sw): (&Tensor, &Tensor),
    offsets: &Tensor,
) -> Result<Tensor> {
    x.apply_op2_no_bwd(
        w,
        &Fp8GroupedGemm {
            sx: sx.clone(),
            sw: sw.clone(),
            offsets: offsets.clone(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn err_of(r: Result<impl Sized>) -> String {
        match r {
            Ok(_) => panic!("accepted"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn the_casts_checks_name_x_and_then_ask_for_a_gpu() {
        let cpu = &Device::Cpu;
        let x = Tensor::zeros((4, 256), DType::BF16, cpu).unwrap();
        let ints = Tensor::zeros((4, 256), DType::I64, cpu).unwrap();
        assert!(err_of(per_token_cast_to_fp8(&ints)).contains("`x` holds I64"));
        let e3 = Tensor::zeros((2, 4, 256), DType::F32, cpu).unwrap();
        assert!(err_of(per_token_cast_to_fp8(&e3)).contains("`x` is [2, 4, 256]"));
        // the experts' per-block cast takes [E, N, K]
        assert!(err_of(per_block_cast_to_fp8(&e3)).contains("CUDA"));
        assert!(err_of(per_token_cast_to_fp8(&x)).contains("CUDA"));
        let scales = Fp8Cast {
            per_block: false,
            scales: None,
        }
        .scale_dims((1, 300, 200));
        assert_eq!(scales, [2, 300]);
        let blocks = Fp8Cast {
            per_block: true,
            scales: None,
        };
        assert_eq!(blocks.scale_dims((1, 300, 200)), [3, 2]);
        assert_eq!(blocks.scale_dims((8, 256, 512)), [8, 2, 4]);
    }

    #[test]
    fn the_grouped_gemms_checks_name_the_argument() {
        let cpu = &Device::Cpu;
        let (rows, e, n, k) = (10, 4, 256, 512);
        let codes = |d: &[usize]| Tensor::zeros(d, DType::F8E4M3, cpu).unwrap();
        let f32s = |d: &[usize]| Tensor::zeros(d, DType::F32, cpu).unwrap();
        let (x, w) = (codes(&[rows, k]), codes(&[e, n, k]));
        let (sx, sw) = (f32s(&[rows, k / 128]), f32s(&[e, n / 128, k / 128]));
        let off = Tensor::new(&[0i32, 3, 3, 7, 10], cpu).unwrap();
        let call = |x: &Tensor, sx: &Tensor, w: &Tensor, sw: &Tensor, off: &Tensor| {
            err_of(fp8_grouped_gemm((x, sx), (w, sw), off))
        };
        assert!(call(&x, &sx, &w, &sw, &off).contains("CUDA"));
        let bytes = Tensor::zeros((rows, k), DType::U8, cpu).unwrap();
        assert!(call(&bytes, &sx, &w, &sw, &off).contains("CUDA"));
        let bf = Tensor::zeros((rows, k), DType::BF16, cpu).unwrap();
        assert!(call(&bf, &sx, &w, &sw, &off).contains("`x` holds BF16"));
        let w2 = codes(&[n, k]);
        assert!(call(&x, &sx, &w2, &sw, &off).contains("`w` is [256, 512]"));
        let x3 = codes(&[1, rows, k]);
        assert!(call(&x3, &sx, &w, &sw, &off).contains("`x` is [1, 10, 512]"));
        let sw16 = sw.to_dtype(DType::BF16).unwrap();
        assert!(call(&x, &sx, &w, &sw16, &off).contains("`sw` holds BF16"));
        let off64 = off.to_dtype(DType::I64).unwrap();
        assert!(call(&x, &sx, &w, &sw, &off64).contains("`offsets` holds I64"));
    }
}
