//! kiln's MoE ops on bf16/f16 weights as candle ops: the grouped GEMM and the fused SwiGLU.

use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use candle_core::cuda_backend::CudaDType;
use candle_core::{
    CpuStorage, CudaStorage, CustomOp2, CustomOp3, DType, Layout, Result, Shape, Tensor,
};
use kiln::{KilnElem, MoeRows, SwigluWeights, TensorMut, TensorRef};

use crate::{handle, kerr, no_cpu, out, with_opt_view, with_view, wrap, In};

/// Which rows of x each expert owns, as an i32 tensor on the GPU (read there: no host sync).
#[derive(Clone, Debug)]
pub enum ExpertRows {
    /// x [rows, K] sorted by expert: expert e owns rows `offsets[e]..offsets[e + 1]` (i32
    /// [E + 1]); the output is [rows, N].
    Offsets(Tensor),
    /// DeepGEMM's masked layout (decode): x [E, max_rows, K], expert e owning its first
    /// `counts[e]` rows (i32 [E]); the output is [E, max_rows, N]. One CUDA graph serves any
    /// counts.
    Counts(Tensor),
}

impl ExpertRows {
    /// The argument's name in errors.
    pub fn name(&self) -> &'static str {
        match self {
            ExpertRows::Offsets(_) => "offsets",
            ExpertRows::Counts(_) => "counts",
        }
    }

    pub fn tensor(&self) -> &Tensor {
        match self {
            ExpertRows::Offsets(t) | ExpertRows::Counts(t) => t,
        }
    }

    /// The output's dims for x `x` (rows or masked rows) and N columns, after the checks
    /// candle's side makes (the rows' dtype, x's rank for the layout); `op` names the op.
    pub(crate) fn out_dims(&self, x: &[usize], n: usize, op: &str) -> Result<Vec<usize>> {
        let (what, t) = (self.name(), self.tensor());
        if t.dtype() != DType::I32 {
            candle_core::bail!(
                "`{what}` holds {:?}; the expert {what} are i32: convert with `to_dtype(DType::I32)`",
                t.dtype()
            );
        }
        match (self, x) {
            (ExpertRows::Offsets(_), &[rows, _]) => Ok(vec![rows, n]),
            (ExpertRows::Counts(_), &[e, max_rows, _]) => Ok(vec![e, max_rows, n]),
            (ExpertRows::Offsets(_), d) => candle_core::bail!(
                "`x` is {d:?}; {op} by offsets takes x [rows, K] (the masked x [E, max_rows, K] goes with counts)"
            ),
            (ExpertRows::Counts(_), d) => candle_core::bail!(
                "`x` is {d:?}; {op} by counts takes the masked x [E, max_rows, K]"
            ),
        }
    }
}

/// The MoE rows and the optional f32 `routing` weights as kiln's views, given to `f`.
pub(crate) fn with_expert_rows<R>(
    rows: &ExpertRows,
    routing: Option<&Tensor>,
    f: impl FnOnce(MoeRows, Option<TensorRef>) -> Result<R>,
) -> Result<R> {
    with_opt_view::<f32, _>(routing, "routing", |routing| {
        with_view::<i32, _>(rows.tensor(), rows.name(), |t| {
            let rows = match rows {
                ExpertRows::Offsets(_) => MoeRows::Offsets {
                    offsets: t,
                    host: None,
                },
                ExpertRows::Counts(_) => MoeRows::Counts {
                    counts: t,
                    host: None,
                },
            };
            f(rows, routing)
        })
    })
}

/// [`with_expert_rows`] by `offsets` (i32 [E + 1]).
pub(crate) fn with_rows<R>(
    offsets: &Tensor,
    routing: Option<&Tensor>,
    f: impl FnOnce(MoeRows, Option<TensorRef>) -> Result<R>,
) -> Result<R> {
    with_expert_rows(&ExpertRows::Offsets(offsets.clone()), routing, f)
}

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
    with_rows(&op.offsets, None, |r, _| {
        let mut ty = TensorMut::from_slice(&mut y, &[rows, n]).map_err(kerr)?;
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
    with_rows(&op.offsets, op.routing.as_ref(), |r, routing| {
        let mut th = TensorMut::from_slice(&mut h, &[rows, n]).map_err(kerr)?;
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
                routing.as_ref(),
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
