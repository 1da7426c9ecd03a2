//! kiln's kernels as candle custom ops: GEMM (any row- or column-major layout, read in place
//! from the strides), flash attention (BSHD, GQA, causal, LSE), packed (variable-length)
//! attention, the MoE grouped GEMM and the fused SwiGLU, the FP8 grouped GEMM (contiguous or
//! masked rows) and fused SwiGLU (bf16, f32 or e4m3 out) with the casts, and the MoE ops on
//! 4-bit (NVFP4, MXFP4) expert weights with bf16/f16 activations or, MXFP4, e4m3 (W4A8).
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

use candle_core::cuda_backend::cudarc::driver::{CudaSlice, CudaView, DeviceRepr, ValidAsZeroBits};
use candle_core::cuda_backend::{CudaDType, CudaDevice};
use candle_core::op::BackpropOp;
use candle_core::{CudaStorage, Error, Layout, Result, Shape, Storage, Tensor, WithDType};
use kiln::{Kiln, KilnElem, TensorRef};

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

/// Where an op with a second output (an f32 tensor: attention's LSE, a cast's scales) keeps it
/// until the caller takes it (candle's custom ops return one tensor).
type SideOut = Option<Mutex<Option<(CudaSlice<f32>, CudaDevice)>>>;

/// Keeps the second output an op made.
fn keep_side(slot: &SideOut, side: Option<CudaSlice<f32>>, dev: &CudaDevice) {
    if let (Some(slot), Some(l)) = (slot, side) {
        *slot.lock().unwrap() = Some((l, dev.clone()));
    }
}

/// The second output an op kept, as a tensor of `shape`.
fn taken_side(slot: &SideOut, shape: Shape) -> Result<Tensor> {
    let Some((l, dev)) = slot.as_ref().and_then(|s| s.lock().unwrap().take()) else {
        candle_core::bail!("the op ran without returning its second output");
    };
    let s = Storage::Cuda(wrap(l, &dev));
    Ok(Tensor::from_storage(s, shape, BackpropOp::none(), false))
}

fn wrap<T: CudaDType>(s: CudaSlice<T>, dev: &CudaDevice) -> CudaStorage {
    CudaStorage::wrap_cuda_slice(s, dev.clone())
}

/// The tensor `t` (offsets, counts, routing weights, scales: argument `what`) as a kiln view of
/// `T`, with the storage guard it borrows, given to `f`.
fn with_view<T, R>(t: &Tensor, what: &str, f: impl FnOnce(TensorRef) -> Result<R>) -> Result<R>
where
    T: CudaDType + KilnElem + WithDType,
{
    let want = <T as WithDType>::DTYPE;
    if t.dtype() != want {
        candle_core::bail!(
            "`{what}` must be a {want:?} tensor, got {:?}: convert it with `to_dtype(DType::{want:?})`",
            t.dtype()
        );
    }
    let (s, l) = t.storage_and_layout();
    let Storage::Cuda(s) = &*s else {
        candle_core::bail!("`{what}` must be on the GPU of the op's other tensors");
    };
    let v = In::<T>::new(s, l)?;
    f(v.t()?)
}

/// [`with_view`] of an optional tensor.
fn with_opt_view<T, R>(
    t: Option<&Tensor>,
    what: &str,
    f: impl FnOnce(Option<TensorRef>) -> Result<R>,
) -> Result<R>
where
    T: CudaDType + KilnElem + WithDType,
{
    match t {
        Some(t) => with_view::<T, R>(t, what, |v| f(Some(v))),
        None => f(None),
    }
}

fn no_cpu(name: &str) -> Error {
    Error::msg(format!(
        "{name} is kiln's CUDA kernel: move the tensors to a CUDA device (Device::new_cuda)"
    ))
}

macro_rules! by_dtype {
    ($dt:expr, $name:expr, $f:ident ( $($a:expr),* )) => {
        match $dt {
            candle_core::DType::BF16 => $f::<half::bf16>($($a),*),
            candle_core::DType::F16 => $f::<half::f16>($($a),*),
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
                by_dtype!(
                    candle_core::backend::BackendStorage::dtype(s1),
                    $name,
                    $fwd(self, s1, l1, s2, l2)
                )
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
                by_dtype!(
                    candle_core::backend::BackendStorage::dtype(s1),
                    $name,
                    $fwd(self, s1, l1, s2, l2, s3, l3)
                )
            }
        }
    };
}

/// Float expert weights [E, N, K] with values in ±0.8 on the CPU, for the prepacks' tests.
#[cfg(test)]
fn test_weights(dims: &[usize]) -> Tensor {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n)
        .map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0)
        .collect();
    Tensor::from_vec(v, dims, &candle_core::Device::Cpu).unwrap()
}

mod attention;
mod fp4;
mod fp8;
mod gemm;
mod moe;
mod w4a8;

pub use attention::{flash_attn, flash_attn_lse, FlashAttn, FlashAttnVarlen};
pub use fp4::{fp4_experts, Fp4Experts, Fp4ExpertsOp, Fp4Format, Fp4Layout, Fp4Prepacked};
pub use fp8::{
    fp8_grouped_gemm, fp8_swiglu, fp8_swiglu_to_fp8, per_block_cast_to_fp8, per_token_cast_to_fp8,
    Fp8GroupedGemm, Fp8Swiglu,
};
pub use gemm::{linear, matmul, Matmul};
pub use moe::{grouped_gemm, swiglu, ExpertRows, GroupedGemm, Swiglu};
pub use w4a8::{w4a8_experts, W4a8Experts, W4a8ExpertsOp, W4a8Layout, W4a8Prepacked};
