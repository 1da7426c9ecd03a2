//! kiln's kernels as candle custom ops: GEMM (any row- or column-major layout, read in place
//! from the strides), flash attention (BSHD, GQA, causal, LSE), packed (variable-length)
//! attention, the MoE grouped GEMM and the fused SwiGLU.
//!
//! Every op runs on the tensors' own memory and candle's own stream (`CudaDevice::cuda_stream`):
//! the inputs are borrowed where they lie (a transposed weight is not copied), the output is
//! allocated on that stream, and nothing waits for the GPU. One kiln handle per GPU is opened
//! on candle's context (the device's primary context, which candle's cudarc retains) at the
//! first call and kept.
//!
//! ```no_run
//! use candle_core::{DType, Device, Tensor};
//! # fn main() -> candle_core::Result<()> {
//! let dev = Device::new_cuda(0)?;
//! let q = Tensor::randn(0f32, 1.0, (2, 1024, 16, 128), &dev)?.to_dtype(DType::BF16)?;
//! let k = Tensor::randn(0f32, 1.0, (2, 1024, 4, 128), &dev)?.to_dtype(DType::BF16)?;
//! let v = Tensor::randn(0f32, 1.0, (2, 1024, 4, 128), &dev)?.to_dtype(DType::BF16)?;
//! let o = kiln_candle::flash_attn(&q, &k, &v, None, true)?; // [2, 1024, 16, 128]
//! let w = Tensor::randn(0f32, 1.0, (4096, 2048), &dev)?.to_dtype(DType::BF16)?;
//! let y = kiln_candle::matmul(&o.reshape((2048, 2048))?, &w.t()?)?; // W read in place
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, DeviceRepr, ValidAsZeroBits};
use candle_core::cuda_backend::{CudaDType, CudaDevice};
use candle_core::op::BackpropOp;
use candle_core::{
    CpuStorage, CudaStorage, CustomOp2, CustomOp3, DType, Error, Layout, Result, Shape, Storage,
    Tensor,
};
use half::{bf16, f16};
use kiln::api::Window;
use kiln::{
    AttentionOptions, GemmOptions, Kiln, KilnElem, MoeRows, SwigluWeights, TensorMut, TensorRef,
    VarlenOffsets,
};

/// kiln's error as candle's.
fn kerr(e: kiln::Error) -> Error {
    Error::wrap(e)
}

/// The kiln handle of `dev`'s GPU, opened on candle's context at the first call.
pub fn handle(dev: &CudaDevice) -> Result<Arc<Kiln>> {
    static HANDLES: OnceLock<Mutex<HashMap<usize, Arc<Kiln>>>> = OnceLock::new();
    let ctx = dev.cuda_stream().context().clone();
    let mut map = HANDLES.get_or_init(Default::default).lock().unwrap();
    if let Some(k) = map.get(&ctx.ordinal()) {
        return Ok(k.clone());
    }
    let k = Arc::new(Kiln::new(ctx.clone()).map_err(kerr)?);
    map.insert(ctx.ordinal(), k.clone());
    Ok(k)
}

/// A candle tensor's memory as kiln sees it: the view from its first element, its dims and
/// element strides.
struct In<'a, T> {
    view: CudaView<'a, T>,
    dims: Vec<usize>,
    strides: Vec<isize>,
}

impl<'a, T: CudaDType + KilnElem> In<'a, T> {
    fn new(s: &'a CudaStorage, l: &Layout) -> Result<Self> {
        let slice = s.as_cuda_slice::<T>()?;
        Ok(In {
            view: slice.slice(l.start_offset()..),
            dims: l.dims().to_vec(),
            strides: l.stride().iter().map(|&s| s as isize).collect(),
        })
    }

    fn t(&self) -> Result<TensorRef<'_>> {
        TensorRef::from_slice_strided(&self.view, &self.dims, &self.strides).map_err(kerr)
    }
}

/// A new packed output of `n` elements on `dev`'s stream (zeroed when the op may leave rows
/// unwritten).
fn out<T: DeviceRepr + ValidAsZeroBits>(
    dev: &CudaDevice,
    n: usize,
    zeroed: bool,
) -> Result<CudaSlice<T>> {
    if zeroed {
        dev.alloc_zeros::<T>(n)
    } else {
        // SAFETY: the op writes every element before anything reads it.
        unsafe { dev.alloc::<T>(n) }
    }
}

fn wrap<T: CudaDType>(s: CudaSlice<T>, dev: &CudaDevice) -> CudaStorage {
    CudaStorage::wrap_cuda_slice(s, dev.clone())
}

/// The i32 tensor `t` (offsets, counts) as a kiln view, with the storage guard it borrows.
fn with_i32<R>(t: &Tensor, what: &str, f: impl FnOnce(TensorRef) -> Result<R>) -> Result<R> {
    if t.dtype() != DType::I32 {
        candle_core::bail!(
            "{what} must be an i32 tensor, got {:?}: convert it with `to_dtype(DType::I32)`",
            t.dtype()
        );
    }
    let (s, l) = t.storage_and_layout();
    let Storage::Cuda(s) = &*s else {
        candle_core::bail!("{what} must be on the GPU of the op's other tensors");
    };
    let v = In::<i32>::new(s, l)?;
    f(v.t()?)
}

fn no_cpu(name: &str) -> Error {
    Error::msg(format!(
        "{name} is kiln's CUDA kernel: move the tensors to a CUDA device (Device::new_cuda)"
    ))
}

macro_rules! by_dtype {
    ($dt:expr, $name:expr, $f:ident ( $($a:expr),* )) => {
        match $dt {
            DType::BF16 => $f::<bf16>($($a),*),
            DType::F16 => $f::<f16>($($a),*),
            d => candle_core::bail!("{}: kiln's kernels take bf16 or f16 tensors, got {d:?}: convert with `to_dtype(DType::BF16)`", $name),
        }
    };
}

/// The custom-op impl of `$op` (two or three tensors): `$fwd::<T>(self, storages and layouts)`
/// for bf16 or f16 tensors; on the CPU, an error saying the op is CUDA's.
macro_rules! op2 {
    ($op:ty, $name:literal, $fwd:ident) => {
        impl CustomOp2 for $op {
            fn name(&self) -> &'static str {
                $name
            }
            fn cpu_fwd(
                &self,
                _: &CpuStorage,
                _: &Layout,
                _: &CpuStorage,
                _: &Layout,
            ) -> Result<(CpuStorage, Shape)> {
                Err(no_cpu($name))
            }
            fn cuda_fwd(
                &self,
                s1: &CudaStorage,
                l1: &Layout,
                s2: &CudaStorage,
                l2: &Layout,
            ) -> Result<(CudaStorage, Shape)> {
                by_dtype!(s1.dtype(), $name, $fwd(self, s1, l1, s2, l2))
            }
        }
    };
}

macro_rules! op3 {
    ($op:ty, $name:literal, $fwd:ident) => {
        impl CustomOp3 for $op {
            fn name(&self) -> &'static str {
                $name
            }
            #[allow(clippy::too_many_arguments)]
            fn cpu_fwd(
                &self,
                _: &CpuStorage,
                _: &Layout,
                _: &CpuStorage,
                _: &Layout,
                _: &CpuStorage,
                _: &Layout,
            ) -> Result<(CpuStorage, Shape)> {
                Err(no_cpu($name))
            }
            #[allow(clippy::too_many_arguments)]
            fn cuda_fwd(
                &self,
                s1: &CudaStorage,
                l1: &Layout,
                s2: &CudaStorage,
                l2: &Layout,
                s3: &CudaStorage,
                l3: &Layout,
            ) -> Result<(CudaStorage, Shape)> {
                by_dtype!(s1.dtype(), $name, $fwd(self, s1, l1, s2, l2, s3, l3))
            }
        }
    };
}

// ---------------------------------------------------------------------------------------------
// GEMM

/// `alpha * a @ b`: a [M, K], b [K, N] (bf16 or f16, one dtype), each row- or column-major
/// (a transposed view, `w.t()`, is read in place); the output [M, N] is packed, of their dtype.
pub struct Matmul {
    pub alpha: f32,
}

fn matmul_fwd<T: CudaDType + KilnElem + DeviceRepr + ValidAsZeroBits>(
    op: &Matmul,
    a: &CudaStorage,
    la: &Layout,
    b: &CudaStorage,
    lb: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let dev = &a.device;
    let (ia, ib) = (In::<T>::new(a, la)?, In::<T>::new(b, lb)?);
    let (&[m, _], &[_, n]) = (ia.dims.as_slice(), ib.dims.as_slice()) else {
        candle_core::bail!(
            "kiln matmul takes a [M, K] and b [K, N], got {:?} and {:?}: reshape them to 2-D",
            ia.dims,
            ib.dims
        );
    };
    let mut c = out::<T>(dev, m * n, false)?;
    let mut tc = TensorMut::from_slice(&mut c, &[m, n]).map_err(kerr)?;
    let opts = GemmOptions {
        alpha: op.alpha,
        ..GemmOptions::default()
    };
    handle(dev)?
        .gemm(&dev.cuda_stream(), &ia.t()?, &ib.t()?, &mut tc, &opts)
        .map_err(kerr)?;
    Ok((wrap(c, dev), Shape::from((m, n))))
}

op2!(Matmul, "kiln-matmul", matmul_fwd);

/// `a @ b` by kiln's GEMM (see [`Matmul`]).
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    a.apply_op2_no_bwd(b, &Matmul { alpha: 1.0 })
}

/// A linear layer without bias, `x @ wᵀ` with w [out, in] as candle-nn stores it: x [.., in]
/// is flattened to rows, w read in place as the column-major [in, out].
pub fn linear(x: &Tensor, w: &Tensor) -> Result<Tensor> {
    let dims = x.dims().to_vec();
    let rows: usize = dims[..dims.len() - 1].iter().product();
    let y = matmul(&x.reshape((rows, dims[dims.len() - 1]))?, &w.t()?)?;
    let mut od = dims;
    *od.last_mut().unwrap() = w.dim(0)?;
    y.reshape(od)
}

// ---------------------------------------------------------------------------------------------
// Attention

/// Where an attention op that was asked for its LSE keeps it until the caller takes it (candle's
/// custom ops return one tensor).
type LseSlot = Option<Mutex<Option<(CudaSlice<f32>, CudaDevice)>>>;

/// Flash attention forward: q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D] (BSHD, any strides with
/// a unit last one), Hq a multiple of Hkv (GQA), D 64, 128 or 256; causal aligned bottom-right;
/// `softmax_scale` `None` for 1/sqrt(D); `window` flash-attention's (left, right), -1 unbounded.
/// The output is like q, packed. With `lse` set, [`flash_attn_lse`] also returns the f32
/// log-sum-exp [B, Hq, Sq].
pub struct FlashAttn {
    pub softmax_scale: Option<f32>,
    pub causal: bool,
    pub window: (i64, i64),
    lse: LseSlot,
}

impl FlashAttn {
    pub fn new(softmax_scale: Option<f32>, causal: bool) -> Self {
        FlashAttn {
            softmax_scale,
            causal,
            window: (-1, -1),
            lse: None,
        }
    }

    fn options(&self) -> AttentionOptions {
        AttentionOptions {
            causal: self.causal,
            softmax_scale: self.softmax_scale,
            window: Window {
                left: self.window.0,
                right: self.window.1,
            },
            ..AttentionOptions::default()
        }
    }
}

/// Keeps the LSE an op made (candle's custom ops return one tensor).
fn keep_lse(slot: &LseSlot, lse: Option<CudaSlice<f32>>, dev: &CudaDevice) {
    if let (Some(slot), Some(l)) = (slot, lse) {
        *slot.lock().unwrap() = Some((l, dev.clone()));
    }
}

fn taken_lse(slot: &LseSlot, shape: Shape) -> Result<Tensor> {
    let Some((l, dev)) = slot.as_ref().and_then(|s| s.lock().unwrap().take()) else {
        candle_core::bail!("the attention op ran without returning its LSE");
    };
    let s = Storage::Cuda(wrap(l, &dev));
    Ok(Tensor::from_storage(s, shape, BackpropOp::none(), false))
}

fn attn_fwd<T: CudaDType + KilnElem + DeviceRepr + ValidAsZeroBits>(
    op: &FlashAttn,
    q: &CudaStorage,
    lq: &Layout,
    k: &CudaStorage,
    lk: &Layout,
    v: &CudaStorage,
    lv: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let dev = &q.device;
    let (iq, ik, iv) = (
        In::<T>::new(q, lq)?,
        In::<T>::new(k, lk)?,
        In::<T>::new(v, lv)?,
    );
    let &[b, sq, hq, d] = iq.dims.as_slice() else {
        candle_core::bail!(
            "kiln flash attention takes q [B, S, H, D], got {:?}",
            iq.dims
        );
    };
    let mut o = out::<T>(dev, b * sq * hq * d, false)?;
    let mut lse = match op.lse {
        Some(_) => Some(out::<f32>(dev, b * hq * sq, false)?),
        None => None,
    };
    {
        let mut to = TensorMut::from_slice(&mut o, &iq.dims).map_err(kerr)?;
        let mut tl = match lse.as_mut() {
            Some(l) => Some(TensorMut::from_slice(l, &[b, hq, sq]).map_err(kerr)?),
            None => None,
        };
        handle(dev)?
            .attention(
                &dev.cuda_stream(),
                &iq.t()?,
                &ik.t()?,
                &iv.t()?,
                &mut to,
                tl.as_mut(),
                &op.options(),
            )
            .map_err(kerr)?;
    }
    keep_lse(&op.lse, lse, dev);
    Ok((wrap(o, dev), Shape::from(iq.dims.clone())))
}

op3!(FlashAttn, "kiln-flash-attn", attn_fwd);

/// Flash attention (see [`FlashAttn`]): q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D].
pub fn flash_attn(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: Option<f32>,
    causal: bool,
) -> Result<Tensor> {
    q.apply_op3_no_bwd(k, v, &FlashAttn::new(softmax_scale, causal))
}

/// Flash attention with its f32 log-sum-exp [B, Hq, Sq] (natural log of the scaled scores'
/// exponentials' sum).
pub fn flash_attn_lse(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    softmax_scale: Option<f32>,
    causal: bool,
) -> Result<(Tensor, Tensor)> {
    let op = FlashAttn {
        lse: Some(Mutex::new(None)),
        ..FlashAttn::new(softmax_scale, causal)
    };
    let o = q.apply_op3_no_bwd(k, v, &op)?;
    let (b, sq, hq, _) = q.dims4()?;
    let lse = taken_lse(&op.lse, Shape::from((b, hq, sq)))?;
    Ok((o, lse))
}

/// Packed (variable-length) attention, flash-attention's `flash_attn_varlen_func`: q
/// [total_q, Hq, D], k and v [total_k, Hkv, D]; sequence s owns query rows
/// `cu_seqlens_q[s]..cu_seqlens_q[s + 1]` and key rows likewise (i32 [batch + 1] on the GPU);
/// `max_seqlen_q`/`_k` the longest sequences. Causal aligned bottom-right per sequence.
pub struct FlashAttnVarlen {
    pub cu_seqlens_q: Tensor,
    pub cu_seqlens_k: Tensor,
    pub max_seqlen_q: usize,
    pub max_seqlen_k: usize,
    pub softmax_scale: Option<f32>,
    pub causal: bool,
}

fn varlen_fwd<T: CudaDType + KilnElem + DeviceRepr + ValidAsZeroBits>(
    op: &FlashAttnVarlen,
    q: &CudaStorage,
    lq: &Layout,
    k: &CudaStorage,
    lk: &Layout,
    v: &CudaStorage,
    lv: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let dev = &q.device;
    let (iq, ik, iv) = (
        In::<T>::new(q, lq)?,
        In::<T>::new(k, lk)?,
        In::<T>::new(v, lv)?,
    );
    let n: usize = iq.dims.iter().product();
    let mut o = out::<T>(dev, n, false)?;
    let opts = AttentionOptions {
        causal: op.causal,
        softmax_scale: op.softmax_scale,
        ..AttentionOptions::default()
    };
    with_i32(&op.cu_seqlens_q, "cu_seqlens_q", |cq| {
        with_i32(&op.cu_seqlens_k, "cu_seqlens_k", |ck| {
            let offsets = VarlenOffsets {
                cu_q: &cq,
                cu_k: &ck,
                max_seqlen_q: op.max_seqlen_q,
                max_seqlen_k: op.max_seqlen_k,
                host: None,
            };
            let mut to = TensorMut::from_slice(&mut o, &iq.dims).map_err(kerr)?;
            handle(dev)?
                .attention_varlen(
                    &dev.cuda_stream(),
                    &iq.t()?,
                    &ik.t()?,
                    &iv.t()?,
                    &mut to,
                    None,
                    offsets,
                    &opts,
                )
                .map_err(kerr)
        })
    })?;
    Ok((wrap(o, dev), Shape::from(iq.dims.clone())))
}

op3!(FlashAttnVarlen, "kiln-flash-attn-varlen", varlen_fwd);

// ---------------------------------------------------------------------------------------------
// MoE

/// The MoE grouped GEMM, y[rows of e] = x[rows of e] @ w[e]ᵀ: x [rows, K] sorted by expert,
/// w [E, N, K], expert e owning rows `offsets[e]..offsets[e + 1]` (i32 [E + 1] on the GPU).
/// y [rows, N] is zero where no expert owns the row.
pub struct GroupedGemm {
    pub offsets: Tensor,
}

fn grouped_fwd<T: CudaDType + KilnElem + DeviceRepr + ValidAsZeroBits>(
    op: &GroupedGemm,
    x: &CudaStorage,
    lx: &Layout,
    w: &CudaStorage,
    lw: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let dev = &x.device;
    let (ix, iw) = (In::<T>::new(x, lx)?, In::<T>::new(w, lw)?);
    let (&[rows, _], &[_, n, _]) = (ix.dims.as_slice(), iw.dims.as_slice()) else {
        candle_core::bail!(
            "kiln grouped GEMM takes x [rows, K] and w [E, N, K], got {:?} and {:?}",
            ix.dims,
            iw.dims
        );
    };
    let mut y = out::<T>(dev, rows * n, true)?;
    with_i32(&op.offsets, "offsets", |off| {
        let mut ty = TensorMut::from_slice(&mut y, &[rows, n]).map_err(kerr)?;
        let r = MoeRows::Offsets {
            offsets: off,
            host: None,
        };
        handle(dev)?
            .grouped_gemm(&dev.cuda_stream(), &ix.t()?, &iw.t()?, r, &mut ty)
            .map_err(kerr)
    })?;
    Ok((wrap(y, dev), Shape::from((rows, n))))
}

op2!(GroupedGemm, "kiln-grouped-gemm", grouped_fwd);

/// The grouped GEMM (see [`GroupedGemm`]).
pub fn grouped_gemm(x: &Tensor, w: &Tensor, offsets: &Tensor) -> Result<Tensor> {
    x.apply_op2_no_bwd(
        w,
        &GroupedGemm {
            offsets: offsets.clone(),
        },
    )
}

/// The fused MoE SwiGLU, h = silu(x W1ᵀ) * (x W3ᵀ) per expert, times the row's f32 routing
/// weight when `routing` (f32 [rows]) is given: x [rows, K] sorted by expert, W1 and W3
/// [E, N, K], rows by `offsets` as [`GroupedGemm`]; h [rows, N], zero where no expert owns it.
pub struct Swiglu {
    pub offsets: Tensor,
    pub routing: Option<Tensor>,
}

fn swiglu_fwd<T: CudaDType + KilnElem + DeviceRepr + ValidAsZeroBits>(
    op: &Swiglu,
    x: &CudaStorage,
    lx: &Layout,
    w1: &CudaStorage,
    l1: &Layout,
    w3: &CudaStorage,
    l3: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let dev = &x.device;
    let (ix, i1, i3) = (
        In::<T>::new(x, lx)?,
        In::<T>::new(w1, l1)?,
        In::<T>::new(w3, l3)?,
    );
    let (&[rows, _], &[_, n, _]) = (ix.dims.as_slice(), i1.dims.as_slice()) else {
        candle_core::bail!(
            "kiln SwiGLU takes x [rows, K] and W1, W3 [E, N, K], got {:?} and {:?}",
            ix.dims,
            i1.dims
        );
    };
    let mut h = out::<T>(dev, rows * n, true)?;
    // The routing weights' view (and the storage guard it borrows), when given.
    let routing = match &op.routing {
        Some(r) if r.dtype() != DType::F32 => {
            candle_core::bail!(
                "routing must be f32, got {:?}: convert with `to_dtype(DType::F32)`",
                r.dtype()
            )
        }
        Some(r) => Some(r.storage_and_layout()),
        None => None,
    };
    let routing_in = match &routing {
        Some((s, l)) => match &**s {
            Storage::Cuda(s) => Some(In::<f32>::new(s, l)?),
            _ => candle_core::bail!("routing must be on the GPU of x"),
        },
        None => None,
    };
    let routing_t = match &routing_in {
        Some(r) => Some(r.t()?),
        None => None,
    };
    with_i32(&op.offsets, "offsets", |off| {
        let mut th = TensorMut::from_slice(&mut h, &[rows, n]).map_err(kerr)?;
        let r = MoeRows::Offsets {
            offsets: off,
            host: None,
        };
        let w = SwigluWeights::Separate {
            w1: i1.t()?,
            w3: i3.t()?,
        };
        handle(dev)?
            .swiglu(
                &dev.cuda_stream(),
                &ix.t()?,
                w,
                r,
                routing_t.as_ref(),
                &mut th,
            )
            .map_err(kerr)
    })?;
    Ok((wrap(h, dev), Shape::from((rows, n))))
}

op3!(Swiglu, "kiln-swiglu", swiglu_fwd);

/// The fused SwiGLU (see [`Swiglu`]).
pub fn swiglu(
    x: &Tensor,
    w1: &Tensor,
    w3: &Tensor,
    offsets: &Tensor,
    routing: Option<&Tensor>,
) -> Result<Tensor> {
    x.apply_op3_no_bwd(
        w1,
        w3,
        &Swiglu {
            offsets: offsets.clone(),
            routing: routing.cloned(),
        },
    )
}
