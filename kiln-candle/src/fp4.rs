//! kiln's MoE ops on 4-bit expert weights as a candle op. NVFP4 (e2m1 values, an e4m3 scale per
//! 16 along K and an f32 scale per expert) or MXFP4 (e2m1, an e8m0 scale per 32): the weights
//! are quantised with kiln's recipe and prepacked on the host once ([`Fp4Experts::prepack`]),
//! uploaded on candle's stream ([`Fp4Experts::upload`]), and then run as the grouped GEMM or the
//! fused SwiGLU on bf16 or f16 activations ([`fp4_experts`]), dequantised inside the kernel.

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use candle_core::cuda_backend::CudaDType;
use candle_core::{
    CpuStorage, CudaStorage, CustomOp1, DType, Device, Layout, Result, Shape, Tensor,
};
use kiln::api::Fp4ExpertWeights;
use kiln::ops::moe::fp4::{prepack, prepack_swiglu, Fp4Weights};
use kiln::{KilnElem, TensorMut};

pub use kiln::ops::moe::fp4::kernel::Fp4Layout;
pub use kiln::ops::moe::fp4::{Fp4Format, Fp4Prepacked};

use crate::moe::with_rows;
use crate::{handle, kerr, no_cpu, out, wrap, In};

/// Prepacked 4-bit expert weights on one GPU: a grouped GEMM's W [E, N, K], or a SwiGLU's W1
/// and W3. Cheap to clone (shared).
#[derive(Clone)]
pub struct Fp4Experts {
    weights: Arc<Fp4ExpertWeights>,
    ordinal: usize,
}

/// Argument `arg`, experts [E, N, K] of any float dtype on any device, quantised on the host.
pub(crate) fn host_experts(arg: &str, t: &Tensor, format: Fp4Format) -> Result<Fp4Weights> {
    let &[e, n, k] = t.dims() else {
        candle_core::bail!(
            "`{arg}` is {:?}; 4-bit expert weights are [E, N, K] (experts, output columns, K)",
            t.dims()
        );
    };
    if !t.dtype().is_float() {
        candle_core::bail!(
            "`{arg}` holds {:?}; quantise float weights (bf16, f16 or f32)",
            t.dtype()
        );
    }
    let v = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    Fp4Weights::quantize(format, e, n, k, &v)
        .map_err(|err| candle_core::Error::msg(format!("`{arg}`: {err}")))
}

impl Fp4Experts {
    /// Quantises `w` to `format` with kiln's recipe and prepacks it on the host: `w` [E, N, K]
    /// a grouped GEMM's weights, or with `w3` a SwiGLU's W1 (gate, `w`) and W3 (up), each
    /// [E, N, K]. Any float dtype on any device; K a multiple of the format's block (16 for
    /// NVFP4, 32 for MXFP4). A one-time conversion: the weights are copied to the host as f32.
    pub fn prepack(w: &Tensor, w3: Option<&Tensor>, format: Fp4Format) -> Result<Fp4Prepacked> {
        let q = host_experts("w", w, format)?;
        let p = match w3 {
            None => prepack(&q),
            Some(w3) => prepack_swiglu(&q, Some(&host_experts("w3", w3, format)?)),
        };
        p.map_err(|err| candle_core::Error::msg(err.to_string()))
    }

    /// Prepacked weights uploaded to `dev` on candle's stream (ordered before any op on it).
    pub fn upload(p: &Fp4Prepacked, dev: &Device) -> Result<Fp4Experts> {
        let cdev = dev.as_cuda_device()?;
        let weights = handle(cdev)?
            .upload_fp4(&cdev.cuda_stream(), p)
            .map_err(kerr)?;
        Ok(Fp4Experts {
            weights: Arc::new(weights),
            ordinal: cdev.cuda_stream().context().ordinal(),
        })
    }

    /// [`Fp4Experts::prepack`] then [`Fp4Experts::upload`].
    pub fn quantize(
        w: &Tensor,
        w3: Option<&Tensor>,
        format: Fp4Format,
        dev: &Device,
    ) -> Result<Fp4Experts> {
        Fp4Experts::upload(&Fp4Experts::prepack(w, w3, format)?, dev)
    }

    /// Format, experts, N, K and whether they are a SwiGLU pair.
    pub fn layout(&self) -> Fp4Layout {
        self.weights.layout()
    }
}

/// The MoE op of the weights' kind on 4-bit weights: y[rows of e] = x[rows of e] @ W[e]ᵀ, or for
/// SwiGLU weights h = silu(x W1ᵀ) * (x W3ᵀ), times the row's f32 routing weight when `routing`
/// (f32 [rows]) is given. x [rows, K] bf16 or f16 (MXFP4: bf16) sorted by expert, expert e
/// owning rows `offsets[e]..offsets[e + 1]` (i32 [E + 1] on the GPU); the output [rows, N] has
/// x's dtype and is zero where no expert owns the row.
pub struct Fp4ExpertsOp {
    pub weights: Fp4Experts,
    pub offsets: Tensor,
    pub routing: Option<Tensor>,
}

/// The output's [rows, N] for x (`dtype`, `dims`) on weights of layout `l`, after the checks
/// candle's side makes; kiln checks the rest at the launch.
fn out_dims(
    l: &Fp4Layout,
    (dtype, dims): (DType, &[usize]),
    offsets: &Tensor,
    routing: Option<&Tensor>,
) -> Result<(usize, usize)> {
    if !matches!(dtype, DType::BF16 | DType::F16) {
        candle_core::bail!(
            "`x` holds {dtype:?}; kiln's 4-bit experts take bf16 or f16 activations: convert with `to_dtype(DType::BF16)`"
        );
    }
    let &[rows, k] = dims else {
        candle_core::bail!(
            "`x` is {dims:?}; these 4-bit weights take x [rows, {}]: flatten the tokens to rows",
            l.k
        );
    };
    if k != l.k {
        candle_core::bail!(
            "`x` is [{rows}, {k}] but the 4-bit weights have K = {}; x's last dim must be K",
            l.k
        );
    }
    if offsets.dtype() != DType::I32 {
        candle_core::bail!(
            "`offsets` holds {:?}; the expert offsets are i32: convert with `to_dtype(DType::I32)`",
            offsets.dtype()
        );
    }
    if let Some(r) = routing {
        if !l.swiglu {
            candle_core::bail!(
                "`routing` scales the SwiGLU's rows, but these 4-bit weights are a grouped GEMM's: quantise W1 and W3 together (Fp4Experts::prepack with w3) or drop the routing"
            );
        }
        if r.dtype() != DType::F32 {
            candle_core::bail!(
                "`routing` holds {:?}; the routing weights are f32: convert with `to_dtype(DType::F32)`",
                r.dtype()
            );
        }
    }
    Ok((rows, l.n))
}

fn fp4_fwd<T: CudaDType + KilnElem + DeviceRepr + ValidAsZeroBits>(
    op: &Fp4ExpertsOp,
    x: &CudaStorage,
    lx: &Layout,
) -> Result<(CudaStorage, Shape)> {
    let dev = &x.device;
    let l = op.weights.layout();
    let (rows, n) = out_dims(&l, (x.dtype(), lx.dims()), &op.offsets, op.routing.as_ref())?;
    let ordinal = dev.cuda_stream().context().ordinal();
    if op.weights.ordinal != ordinal {
        candle_core::bail!(
            "the 4-bit weights are on GPU {} but `x` is on GPU {ordinal}: upload them to x's device",
            op.weights.ordinal
        );
    }
    let ix = In::<T>::new(x, lx)?;
    let mut y = out::<T>(dev, rows * n, true)?;
    with_rows(&op.offsets, op.routing.as_ref(), |r, routing| {
        let mut ty = TensorMut::from_slice(&mut y, &[rows, n]).map_err(kerr)?;
        handle(dev)?
            .fp4_experts(
                &dev.cuda_stream(),
                &ix.t()?,
                &op.weights.weights,
                r,
                routing.as_ref(),
                &mut ty,
            )
            .map_err(kerr)
    })?;
    Ok((wrap(y, dev), Shape::from((rows, n))))
}

impl CustomOp1 for Fp4ExpertsOp {
    fn name(&self) -> &'static str {
        "kiln-fp4-experts"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        let lw = self.weights.layout();
        out_dims(
            &lw,
            (s.dtype(), l.dims()),
            &self.offsets,
            self.routing.as_ref(),
        )?;
        Err(no_cpu(self.name()))
    }
    fn cuda_fwd(&self, s: &CudaStorage, l: &Layout) -> Result<(CudaStorage, Shape)> {
        by_dtype!(s.dtype(), "kiln-fp4-experts", fp4_fwd(self, s, l))
    }
}

/// The MoE op on 4-bit weights (see [`Fp4ExpertsOp`]): the grouped GEMM for a grouped GEMM's
/// weights, the fused SwiGLU (with the optional `routing` weights) for a SwiGLU pair.
pub fn fp4_experts(
    x: &Tensor,
    weights: &Fp4Experts,
    offsets: &Tensor,
    routing: Option<&Tensor>,
) -> Result<Tensor> {
    x.apply_op1_no_bwd(&Fp4ExpertsOp {
        weights: weights.clone(),
        offsets: offsets.clone(),
        routing: routing.cloned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_weights as weights;

    #[test]
    fn the_prepack_runs_on_the_host_and_names_the_weight_it_refuses() {
        let (e, n, k) = (2, 128, 64);
        let w1 = weights(&[e, n, k]);
        let p = Fp4Experts::prepack(&w1, Some(&weights(&[e, n, k])), Fp4Format::Nvfp4).unwrap();
        let l = p.layout();
        assert!(l.swiglu && (l.experts, l.n, l.k) == (e, n, k));
        let down = Fp4Experts::prepack(&w1, None, Fp4Format::Mxfp4).unwrap();
        assert!(!down.swiglu && down.format == Fp4Format::Mxfp4);
        let flat = Fp4Experts::prepack(&weights(&[n, k]), None, Fp4Format::Nvfp4).unwrap_err();
        assert!(flat.to_string().contains("`w` is [128, 64]"), "{flat}");
        let odd = Fp4Experts::prepack(&weights(&[e, n, 40]), None, Fp4Format::Mxfp4).unwrap_err();
        assert!(odd.to_string().contains("`w`: K = 40"), "{odd}");
        let pair = Fp4Experts::prepack(&w1, Some(&weights(&[e, 64, k])), Fp4Format::Nvfp4);
        assert!(pair.unwrap_err().to_string().contains("must match"));
        let ints = Tensor::zeros((e, n, k), DType::I64, &Device::Cpu).unwrap();
        let err = Fp4Experts::prepack(&w1, Some(&ints), Fp4Format::Nvfp4).unwrap_err();
        assert!(err.to_string().contains("`w3` holds I64"), "{err}");
    }

    #[test]
    fn the_ops_checks_name_the_argument() {
        let (e, n, k) = (4, 256, 512);
        let mut l = Fp4Layout {
            format: Fp4Format::Nvfp4,
            experts: e,
            n,
            k,
            swiglu: false,
            min_scale_byte: 0,
        };
        let cpu = &Device::Cpu;
        let off = Tensor::new(&[0i32, 3, 3, 7, 10], cpu).unwrap();
        let x = (DType::BF16, &[10usize, k][..]);
        assert_eq!(out_dims(&l, x, &off, None).unwrap(), (10, n));
        let cases: [(DType, &[usize], &str); 3] = [
            (DType::F32, &[10, k], "`x` holds F32"),
            (DType::BF16, &[2, 5, k], "`x` is [2, 5, 512]"),
            (DType::BF16, &[10, 256], "K = 512"),
        ];
        for (dt, dims, want) in cases {
            let err = out_dims(&l, (dt, dims), &off, None).unwrap_err();
            assert!(err.to_string().contains(want), "{err}");
        }
        let off64 = off.to_dtype(DType::I64).unwrap();
        assert!(out_dims(&l, x, &off64, None)
            .unwrap_err()
            .to_string()
            .contains("`offsets` holds I64"));
        let routing = Tensor::ones(10, DType::F32, cpu).unwrap();
        let err = out_dims(&l, x, &off, Some(&routing)).unwrap_err();
        assert!(
            err.to_string().contains("`routing` scales the SwiGLU"),
            "{err}"
        );
        l.swiglu = true;
        assert!(out_dims(&l, x, &off, Some(&routing)).is_ok());
        let r16 = routing.to_dtype(DType::BF16).unwrap();
        let err = out_dims(&l, x, &off, Some(&r16)).unwrap_err();
        assert!(err.to_string().contains("`routing` holds BF16"), "{err}");
    }
}
