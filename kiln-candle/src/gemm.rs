//! kiln's GEMM as a candle op: any row- or column-major layout, read in place from the strides.

use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use candle_core::cuda_backend::CudaDType;
use candle_core::{CpuStorage, CudaStorage, CustomOp2, Layout, Result, Shape, Tensor};
use kiln::{GemmOptions, KilnElem, TensorMut};

use crate::{handle, kerr, no_cpu, out, wrap, In};

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
