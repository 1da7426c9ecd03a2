//! kiln's FP8 ops as candle ops, with DeepGEMM's layouts: the casts of bf16, f16 or f32 tensors
//! to e4m3 codes with f32 scales per 1x128 group (per token) or 128x128 block, and the MoE grouped
//! GEMM over rows sorted by expert (DeepGEMM's `m_grouped_gemm_fp8_fp8_bf16_nt_contiguous`).
//!
//! Codes are candle's `DType::F8E4M3` (`U8` tensors holding e4m3fn bytes are taken too); scales
//! are f32. Scales are never read on the host (that would wait for the GPU): a NaN or infinite
//! scale gives NaN where it applies; the casts' own scales are always finite.

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, DeviceRepr, ValidAsZeroBits};
use candle_core::cuda_backend::{CudaDType, CudaDevice};
use candle_core::{
    CpuStorage, CudaStorage, CustomOp1, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor,
};
use float8::F8E4M3;
use half::{bf16, f16};
use kiln::{KilnElem, MoeRows, TensorMut, TensorRef};

use crate::moe::{with_expert_rows, ExpertRows};
use crate::{handle, keep_side, kerr, no_cpu, out, taken_side, with_view, wrap, In, SideOut};

/// The group of the scales along K (and along rows for the weights' blocks).
const GROUP: usize = 128;

/// The e4m3 codes of argument `arg` as kiln's byte view (`F8E4M3` or `U8` storage).
pub(crate) fn codes<'a>(s: &'a CudaStorage, l: &Layout, arg: &str) -> Result<In<'a, u8>> {
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

/// The checks candle's side makes of an FP8 MoE op's f32 and i32 tensors: each `(arg, tensor)`
/// must hold f32.
pub(crate) fn f32_args(op: &str, args: &[(&str, &Tensor)]) -> Result<()> {
    for (arg, t) in args {
        if t.dtype() != DType::F32 {
            candle_core::bail!(
                "`{arg}` holds {:?}; {op} takes f32 {arg}: convert with `to_dtype(DType::F32)`",
                t.dtype()
            );
        }
    }
    Ok(())
}

/// Each `(arg, dtype)` must be e4m3 codes.
pub(crate) fn codes_args(args: &[(&str, DType)]) -> Result<()> {
    for &(arg, d) in args {
        if !is_codes(d) {
            candle_core::bail!("{}", not_codes(arg, d));
        }
    }
    Ok(())
}

/// N of weights `w` [E, N, K] (argument `arg`) for `op`.
fn experts_n(arg: &str, w: &[usize], op: &str) -> Result<usize> {
    match w {
        &[_, n, _] => Ok(n),
        d => candle_core::bail!("`{arg}` is {d:?}; {op} takes {arg} [E, N, K]"),
    }
}

/// The FP8 MoE grouped GEMM, y[rows of e] = dequant(x[rows of e]) @ dequant(w[e])ᵀ in bf16: w
/// [E, N, K] codes with `sw` [E, ceil(N/128), ceil(K/128)] (as [`per_block_cast_to_fp8`] of
/// the experts gives); x e4m3 codes with `sx` its 1x128 scales over all its rows (as
/// [`per_token_cast_to_fp8`] of x as one [rows, K] matrix gives), by `rows`:
/// [`ExpertRows::Offsets`] (DeepGEMM's `m_grouped_gemm_fp8_fp8_bf16_nt_contiguous`: x
/// [rows, K] sorted by expert, any count per expert, no padding; y [rows, N]) or
/// [`ExpertRows::Counts`] (`..._masked`: x [E, max_rows, K]; y [E, max_rows, N]). y is zero
/// where no expert owns the row. K a multiple of 16.
pub struct Fp8GroupedGemm {
    pub sx: Tensor,
    pub sw: Tensor,
    pub rows: ExpertRows,
}

const GROUPED: &str = "the FP8 grouped GEMM";

impl Fp8GroupedGemm {
    /// y's dims after the checks candle's side makes (dtypes and ranks); kiln checks the rest
    /// (K, the scales' shapes and strides, the rows' length) at the launch.
    fn out_dims(&self, x: (DType, &[usize]), w: (DType, &[usize])) -> Result<Vec<usize>> {
        codes_args(&[("x", x.0), ("w", w.0)])?;
        f32_args(GROUPED, &[("sx", &self.sx), ("sw", &self.sw)])?;
        let n = experts_n("w", w.1, GROUPED)?;
        self.rows.out_dims(x.1, n, GROUPED)
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
        let dims = self.out_dims((x.dtype(), lx.dims()), (w.dtype(), lw.dims()))?;
        let dev = &x.device;
        let (ix, iw) = (codes(x, lx, "x")?, codes(w, lw, "w")?);
        let y = new_out::<bf16>(dev, &dims, |ty| {
            with_view::<f32, _>(&self.sx, "sx", |sx| {
                with_view::<f32, _>(&self.sw, "sw", |sw| {
                    with_expert_rows(&self.rows, None, |rows, _| {
                        let (k, s) = (handle(dev)?, dev.cuda_stream());
                        let (x, w) = ((&ix.t()?, &sx), (&iw.t()?, &sw));
                        match rows {
                            MoeRows::Offsets { offsets, .. } => {
                                k.fp8_grouped_gemm_contiguous(&s, x, w, &offsets, ty)
                            }
                            MoeRows::Counts { counts, .. } => {
                                k.fp8_grouped_gemm_masked(&s, x, w, &counts, ty)
                            }
                        }
                        .map_err(kerr)
                    })
                })
            })
        })?;
        Ok((wrap(y, dev), Shape::from(dims)))
    }
}

/// The FP8 grouped GEMM (see [`Fp8GroupedGemm`]): `(x, sx)` and `(w, sw)` as the casts give
/// them; `rows` by offsets (x [rows, K], `offsets` i32 [E + 1]) or, DeepGEMM's masked layout,
/// by counts (x [E, max_rows, K] with `sx` the scales of x as one [E * max_rows, K] matrix,
/// `counts` i32 [E]).
pub fn fp8_grouped_gemm(
    (x, sx): (&Tensor, &Tensor),
    (w, sw): (&Tensor, &Tensor),
    rows: &ExpertRows,
) -> Result<Tensor> {
    x.apply_op2_no_bwd(
        w,
        &Fp8GroupedGemm {
            sx: sx.clone(),
            sw: sw.clone(),
            rows: rows.clone(),
        },
    )
}

// ---------------------------------------------------------------------------------------------
// SwiGLU

/// The fused MoE SwiGLU on FP8 operands, h = silu(x W1ᵀ) * (x W3ᵀ) per expert, times the row's
/// f32 routing weight when `routing` (f32, one per row of x) is given: x, `sx` and `rows` as
/// [`Fp8GroupedGemm`], W1 (gate) and W3 (up) [E, N, K] codes with `sw1`, `sw3` their 128x128
/// scales. `out` is the output's dtype: BF16 or F32, or F8E4M3 for e4m3 codes with their 1x128
/// scales ([`fp8_swiglu_to_fp8`]: the down projection's x and sx, N a multiple of 16). h is
/// [rows, N] (masked: [E, max_rows, N]), zero where no expert owns the row.
pub struct Fp8Swiglu {
    pub sx: Tensor,
    pub sw1: Tensor,
    pub sw3: Tensor,
    pub rows: ExpertRows,
    pub routing: Option<Tensor>,
    pub out: DType,
    scales: SideOut,
}

const SWIGLU: &str = "the FP8 SwiGLU";

impl Fp8Swiglu {
    fn new(
        (sx, sw1, sw3): (&Tensor, &Tensor, &Tensor),
        rows: &ExpertRows,
        routing: Option<&Tensor>,
        out: DType,
    ) -> Self {
        Fp8Swiglu {
            sx: sx.clone(),
            sw1: sw1.clone(),
            sw3: sw3.clone(),
            rows: rows.clone(),
            routing: routing.cloned(),
            out,
            scales: (out == DType::F8E4M3).then(Default::default),
        }
    }

    /// h's dims after the checks candle's side makes; kiln checks the rest at the launch.
    fn out_dims(&self, [x, w1, w3]: [(DType, &[usize]); 3]) -> Result<Vec<usize>> {
        codes_args(&[("x", x.0), ("w1", w1.0), ("w3", w3.0)])?;
        let mut f32s = vec![("sx", &self.sx), ("sw1", &self.sw1), ("sw3", &self.sw3)];
        f32s.extend(self.routing.as_ref().map(|r| ("routing", r)));
        f32_args(SWIGLU, &f32s)?;
        if !matches!(self.out, DType::BF16 | DType::F32 | DType::F8E4M3) {
            candle_core::bail!(
                "`out` is {:?}; {SWIGLU} writes BF16, F32 or F8E4M3 (codes with their scales)",
                self.out
            );
        }
        let n = experts_n("w1", w1.1, SWIGLU)?;
        if w3.1 != w1.1 {
            candle_core::bail!(
                "`w3` is {:?} but `w1` is {:?}; the gate (w1) and up (w3) weights are both [E, N, K]",
                w3.1,
                w1.1
            );
        }
        self.rows.out_dims(x.1, n, SWIGLU)
    }
}

/// A zeroed output of `dims` on `dev`'s stream, written by `f` through kiln's view.
pub(crate) fn new_out<T: DeviceRepr + ValidAsZeroBits + KilnElem>(
    dev: &CudaDevice,
    dims: &[usize],
    f: impl FnOnce(&mut TensorMut) -> Result<()>,
) -> Result<CudaSlice<T>> {
    let mut y = out::<T>(dev, dims.iter().product(), true)?;
    f(&mut TensorMut::from_slice(&mut y, dims).map_err(kerr)?)?;
    Ok(y)
}

impl CustomOp3 for Fp8Swiglu {
    fn name(&self) -> &'static str {
        "kiln-fp8-swiglu"
    }
    #[allow(clippy::too_many_arguments)]
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
        s3: &CpuStorage,
        l3: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.out_dims([
            (s1.dtype(), l1.dims()),
            (s2.dtype(), l2.dims()),
            (s3.dtype(), l3.dims()),
        ])?;
        Err(no_cpu(self.name()))
    }
    #[allow(clippy::too_many_arguments)]
    fn cuda_fwd(
        &self,
        x: &CudaStorage,
        lx: &Layout,
        w1: &CudaStorage,
        l1: &Layout,
        w3: &CudaStorage,
        l3: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let dims = self.out_dims([
            (x.dtype(), lx.dims()),
            (w1.dtype(), l1.dims()),
            (w3.dtype(), l3.dims()),
        ])?;
        let dev = &x.device;
        let (ix, i1, i3) = (
            codes(x, lx, "x")?,
            codes(w1, l1, "w1")?,
            codes(w3, l3, "w3")?,
        );
        let launch = |h: &mut TensorMut, sh: Option<&mut TensorMut>| {
            with_view::<f32, _>(&self.sx, "sx", |sx| {
                with_view::<f32, _>(&self.sw1, "sw1", |sw1| {
                    with_view::<f32, _>(&self.sw3, "sw3", |sw3| {
                        with_expert_rows(&self.rows, self.routing.as_ref(), |rows, routing| {
                            handle(dev)?
                                .fp8_swiglu(
                                    &dev.cuda_stream(),
                                    (&ix.t()?, &sx),
                                    (&i1.t()?, &sw1),
                                    (&i3.t()?, &sw3),
                                    rows,
                                    routing.as_ref(),
                                    h,
                                    sh,
                                )
                                .map_err(kerr)
                        })
                    })
                })
            })
        };
        let h = match self.out {
            DType::BF16 => wrap(new_out::<bf16>(dev, &dims, |h| launch(h, None))?, dev),
            DType::F32 => wrap(new_out::<f32>(dev, &dims, |h| launch(h, None))?, dev),
            _ => {
                let n = dims[dims.len() - 1];
                let x_rows = dims.iter().product::<usize>() / n.max(1);
                let nb = n.div_ceil(GROUP);
                let mut sh = out::<f32>(dev, nb * x_rows, true)?;
                let mut h = out::<F8E4M3>(dev, x_rows * n, true)?;
                {
                    let mut hv = h.slice_mut(..);
                    // SAFETY: e4m3 codes are bytes: the same address and length.
                    let mut hb = unsafe { hv.transmute_mut::<u8>(x_rows * n) }
                        .ok_or_else(|| candle_core::Error::msg("the codes' bytes"))?;
                    let mut th = TensorMut::from_slice(&mut hb, &dims).map_err(kerr)?;
                    let mut tsh = TensorMut::from_slice_strided(
                        &mut sh,
                        &[x_rows, nb],
                        &[1, x_rows as isize],
                    )
                    .map_err(kerr)?;
                    launch(&mut th, Some(&mut tsh))?;
                }
                keep_side(&self.scales, Some(sh), dev);
                wrap(h, dev)
            }
        };
        Ok((h, Shape::from(dims)))
    }
}

/// The FP8 SwiGLU (see [`Fp8Swiglu`]) with bf16 output: `(x, sx)`, `(w1, sw1)`, `(w3, sw3)` as
/// the casts give them, `rows` by offsets or counts, optional f32 `routing` weights.
pub fn fp8_swiglu(
    (x, sx): (&Tensor, &Tensor),
    (w1, sw1): (&Tensor, &Tensor),
    (w3, sw3): (&Tensor, &Tensor),
    rows: &ExpertRows,
    routing: Option<&Tensor>,
) -> Result<Tensor> {
    x.apply_op3_no_bwd(
        w1,
        w3,
        &Fp8Swiglu::new((sx, sw1, sw3), rows, routing, DType::BF16),
    )
}

/// The FP8 SwiGLU (see [`Fp8Swiglu`]) quantised: h as e4m3 codes (`F8E4M3`, [rows, N] or
/// [E, max_rows, N]) and their f32 1x128 scales [rows, ceil(N/128)] (all E * max_rows rows when
/// masked) stored M-major, as [`per_token_cast_to_fp8`] gives: the down projection's `(x, sx)`.
pub fn fp8_swiglu_to_fp8(
    (x, sx): (&Tensor, &Tensor),
    (w1, sw1): (&Tensor, &Tensor),
    (w3, sw3): (&Tensor, &Tensor),
    rows: &ExpertRows,
    routing: Option<&Tensor>,
) -> Result<(Tensor, Tensor)> {
    let op = Fp8Swiglu::new((sx, sw1, sw3), rows, routing, DType::F8E4M3);
    let h = x.apply_op3_no_bwd(w1, w3, &op)?;
    let n = h.dims()[h.rank() - 1];
    let x_rows = h.elem_count() / n.max(1);
    let sh = taken_side(&op.scales, Shape::from((n.div_ceil(GROUP), x_rows)))?;
    Ok((h, sh.t()?))
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
            err_of(fp8_grouped_gemm(
                (x, sx),
                (w, sw),
                &ExpertRows::Offsets(off.clone()),
            ))
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

    #[test]
    fn the_swiglus_and_masked_checks_name_the_argument() {
        let cpu = &Device::Cpu;
        let (rows, e, n, k) = (10, 4, 256, 512);
        let codes = |d: &[usize]| Tensor::zeros(d, DType::F8E4M3, cpu).unwrap();
        let f32s = |d: &[usize]| Tensor::zeros(d, DType::F32, cpu).unwrap();
        let (x, w1, w3) = (codes(&[rows, k]), codes(&[e, n, k]), codes(&[e, n, k]));
        let sx = f32s(&[rows, k / 128]);
        let (sw1, sw3) = (f32s(&[e, n / 128, k / 128]), f32s(&[e, n / 128, k / 128]));
        let off = ExpertRows::Offsets(Tensor::new(&[0i32, 3, 3, 7, 10], cpu).unwrap());
        let counts = ExpertRows::Counts(Tensor::new(&[0i32, 1, 2, 3], cpu).unwrap());
        let route = Tensor::ones(rows, DType::F32, cpu).unwrap();
        let call =
            |x: &Tensor, w3: &Tensor, sw3: &Tensor, rows: &ExpertRows, r: Option<&Tensor>| {
                err_of(fp8_swiglu((x, &sx), (&w1, &sw1), (w3, sw3), rows, r))
            };
        assert!(call(&x, &w3, &sw3, &off, Some(&route)).contains("CUDA"));
        let q = fp8_swiglu_to_fp8((&x, &sx), (&w1, &sw1), (&w3, &sw3), &off, None);
        assert!(err_of(q).contains("CUDA"));
        let xm = codes(&[e, 8, k]);
        assert!(call(&xm, &w3, &sw3, &counts, None).contains("CUDA"));
        let cases = [
            (
                call(&x, &codes(&[e, 128, k]), &sw3, &off, None),
                "`w3` is [4, 128, 512] but `w1` is [4, 256, 512]",
            ),
            (
                call(&x.to_dtype(DType::BF16).unwrap(), &w3, &sw3, &off, None),
                "`x` holds BF16",
            ),
            (
                call(&x, &w3, &sw3.to_dtype(DType::BF16).unwrap(), &off, None),
                "`sw3` holds BF16",
            ),
            (
                call(
                    &x,
                    &w3,
                    &sw3,
                    &off,
                    Some(&route.to_dtype(DType::BF16).unwrap()),
                ),
                "`routing` holds BF16",
            ),
            (
                call(&x, &w3, &sw3, &counts, None),
                "`x` is [10, 512]; the FP8 SwiGLU by counts takes the masked x",
            ),
            (
                call(&xm, &w3, &sw3, &off, None),
                "`x` is [4, 8, 512]; the FP8 SwiGLU by offsets takes x [rows, K]",
            ),
        ];
        for (got, want) in cases {
            assert!(got.contains(want), "{got} (wanted {want})");
        }
        let c64 = ExpertRows::Counts(Tensor::new(&[0i64, 1, 2, 3], cpu).unwrap());
        assert!(call(&xm, &w3, &sw3, &c64, None).contains("`counts` holds I64"));
        let op = Fp8Swiglu::new((&sx, &sw1, &sw3), &off, None, DType::F16);
        let err = op.out_dims([
            (DType::F8E4M3, &[rows, k]),
            (DType::F8E4M3, &[e, n, k]),
            (DType::F8E4M3, &[e, n, k]),
        ]);
        assert!(err_of(err).contains("`out` is F16"));
        // the masked grouped GEMM: x [E, max_rows, K] with counts
        let masked = fp8_grouped_gemm((&xm, &sx), (&w1, &sw1), &counts);
        assert!(err_of(masked).contains("CUDA"));
        let flat = fp8_grouped_gemm((&x, &sx), (&w1, &sw1), &counts);
        assert!(err_of(flat).contains("`x` is [10, 512]; the FP8 grouped GEMM by counts"));
    }
}
