//! W4A8 experts as a candle op: MXFP4 expert weights (quantised with kiln's recipe and prepacked
//! for the FP8 tensor cores on the host once, [`W4a8Experts::prepack`]; uploaded on candle's
//! stream, [`W4a8Experts::upload`]) with e4m3 activations and their 1x128 scales (what
//! [`crate::per_token_cast_to_fp8`] gives): the grouped GEMM or the fused SwiGLU
//! ([`w4a8_experts`]), bf16 out.

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::{
    CpuStorage, CudaStorage, CustomOp1, DType, Device, Layout, Result, Shape, Tensor,
};
use half::bf16;
use kiln::api::W4a8ExpertWeights;
use kiln::ops::moe::fp4::w4a8::{prepack_w4a8, prepack_w4a8_swiglu};
use kiln::TensorMut;

pub use kiln::ops::moe::fp4::kernel_w4a8::W4a8Layout;
pub use kiln::ops::moe::fp4::w4a8::W4a8Prepacked;

use crate::fp4::{host_experts, Fp4Format};
use crate::fp8::{codes, codes_args, f32_args, new_out};
use crate::moe::{with_expert_rows, ExpertRows};
use crate::{handle, kerr, no_cpu, wrap};

/// W4A8-prepacked MXFP4 expert weights on one GPU: a grouped GEMM's W [E, N, K], or a
/// SwiGLU's W1 and W3. Cheap to clone (shared).
#[derive(Clone)]
pub struct W4a8Experts {
    weights: Arc<W4a8ExpertWeights>,
    ordinal: usize,
}

impl W4a8Experts {
    /// Quantises `w` to MXFP4 with kiln's recipe and prepacks it for the FP8 tensor cores on
    /// the host: `w` [E, N, K] a grouped GEMM's weights, or with `w3` a SwiGLU's W1 (gate, `w`)
    /// and W3 (up). Any float dtype on any device; K a multiple of 32. A row whose blocks'
    /// scales span more than 2^14 has no exact e4m3 form and is refused (bf16 activations,
    /// [`crate::Fp4Experts`], take it). A one-time conversion: the weights are copied to the
    /// host as f32.
    pub fn prepack(w: &Tensor, w3: Option<&Tensor>) -> Result<W4a8Prepacked> {
        let q = host_experts("w", w, Fp4Format::Mxfp4)?;
        let p = match w3 {
            None => prepack_w4a8(&q),
            Some(w3) => prepack_w4a8_swiglu(&q, Some(&host_experts("w3", w3, Fp4Format::Mxfp4)?)),
        };
        p.map_err(|err| candle_core::Error::msg(err.to_string()))
    }

    /// Prepacked weights uploaded to `dev` on candle's stream (ordered before any op on it).
    pub fn upload(p: &W4a8Prepacked, dev: &Device) -> Result<W4a8Experts> {
        let cdev = dev.as_cuda_device()?;
        let weights = handle(cdev)?
            .upload_w4a8(&cdev.cuda_stream(), p)
            .map_err(kerr)?;
        Ok(W4a8Experts {
            weights: Arc::new(weights),
            ordinal: cdev.cuda_stream().context().ordinal(),
        })
    }

    /// [`W4a8Experts::prepack`] then [`W4a8Experts::upload`].
    pub fn quantize(w: &Tensor, w3: Option<&Tensor>, dev: &Device) -> Result<W4a8Experts> {
        W4a8Experts::upload(&W4a8Experts::prepack(w, w3)?, dev)
    }

    /// Experts, N, K and whether they are a SwiGLU pair.
    pub fn layout(&self) -> W4a8Layout {
        self.weights.layout()
    }
}

/// The MoE op of the weights' kind on W4A8 weights: y[rows of e] = dequant(x[rows of e]) @
/// W[e]ᵀ, or for SwiGLU weights h = silu(x W1ᵀ) * (x W3ᵀ), times the row's f32 routing weight
/// when `routing` is given (one per row of x). x e4m3 codes (`F8E4M3` or `U8`) with `sx` its
/// 1x128 scales over all its rows, by `rows`: offsets (x [rows, K], y [rows, N]) or counts
/// (the masked x [E, max_rows, K], y [E, max_rows, N]). y is bf16, zero where no expert owns
/// the row.
pub struct W4a8ExpertsOp {
    pub weights: W4a8Experts,
    pub sx: Tensor,
    pub rows: ExpertRows,
    pub routing: Option<Tensor>,
}

const OP: &str = "the W4A8 experts";

/// y's dims for x (`dtype`, `dims`) on weights of layout `l`, after the checks candle's side
/// makes; kiln checks the rest at the launch.
fn out_dims(
    l: &W4a8Layout,
    (dtype, dims): (DType, &[usize]),
    sx: &Tensor,
    rows: &ExpertRows,
    routing: Option<&Tensor>,
) -> Result<Vec<usize>> {
    codes_args(&[("x", dtype)])?;
    let mut f32s = vec![("sx", sx)];
    f32s.extend(routing.map(|r| ("routing", r)));
    f32_args(OP, &f32s)?;
    if routing.is_some() && !l.swiglu {
        candle_core::bail!(
            "`routing` scales the SwiGLU's rows, but these W4A8 weights are a grouped GEMM's: prepack W1 and W3 together (W4a8Experts::prepack with w3) or drop the routing"
        );
    }
    let y = rows.out_dims(dims, l.n, OP)?;
    let k = dims[dims.len() - 1];
    if k != l.k {
        candle_core::bail!(
            "`x` is {dims:?} but the W4A8 weights have K = {}; x's last dim must be K",
            l.k
        );
    }
    Ok(y)
}

impl W4a8ExpertsOp {
    fn out_dims(&self, x: (DType, &[usize])) -> Result<Vec<usize>> {
        out_dims(
            &self.weights.layout(),
            x,
            &self.sx,
            &self.rows,
            self.routing.as_ref(),
        )
    }
}

impl CustomOp1 for W4a8ExpertsOp {
    fn name(&self) -> &'static str {
        "kiln-w4a8-experts"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> Result<(CpuStorage, Shape)> {
        self.out_dims((s.dtype(), l.dims()))?;
        Err(no_cpu(self.name()))
    }
    fn cuda_fwd(&self, x: &CudaStorage, lx: &Layout) -> Result<(CudaStorage, Shape)> {
        let dims = self.out_dims((x.dtype(), lx.dims()))?;
        let dev = &x.device;
        let ordinal = dev.cuda_stream().context().ordinal();
        if self.weights.ordinal != ordinal {
            candle_core::bail!(
                "the W4A8 weights are on GPU {} but `x` is on GPU {ordinal}: upload them to x's device",
                self.weights.ordinal
            );
        }
        let ix = codes(x, lx, "x")?;
        let y = new_out::<bf16>(dev, &dims, |ty: &mut TensorMut| {
            crate::with_view::<f32, _>(&self.sx, "sx", |sx| {
                with_expert_rows(&self.rows, self.routing.as_ref(), |rows, routing| {
                    handle(dev)?
                        .w4a8_experts(
                            &dev.cuda_stream(),
                            (&ix.t()?, &sx),
                            &self.weights.weights,
                            rows,
                            routing.as_ref(),
                            ty,
                        )
                        .map_err(kerr)
                })
            })
        })?;
        Ok((wrap(y, dev), Shape::from(dims)))
    }
}

/// The MoE op on W4A8 weights (see [`W4a8ExpertsOp`]): the grouped GEMM for a grouped GEMM's
/// weights, the fused SwiGLU (with the optional `routing` weights) for a SwiGLU pair.
pub fn w4a8_experts(
    (x, sx): (&Tensor, &Tensor),
    weights: &W4a8Experts,
    rows: &ExpertRows,
    routing: Option<&Tensor>,
) -> Result<Tensor> {
    x.apply_op1_no_bwd(&W4a8ExpertsOp {
        weights: weights.clone(),
        sx: sx.clone(),
        rows: rows.clone(),
        routing: routing.cloned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::test_weights as weights;

    #[test]
    fn the_prepack_runs_on_the_host_and_names_the_weight_it_refuses() {
        let (e, n, k) = (2, 128, 256);
        let w1 = weights(&[e, n, k]);
        let p = W4a8Experts::prepack(&w1, Some(&weights(&[e, n, k]))).unwrap();
        let l = p.layout();
        assert!(l.swiglu && (l.experts, l.n, l.k) == (e, n, k));
        assert_eq!(p.bytes.len(), e * l.expert_bytes());
        assert!(!W4a8Experts::prepack(&w1, None).unwrap().swiglu);
        let flat = W4a8Experts::prepack(&weights(&[n, k]), None).unwrap_err();
        assert!(flat.to_string().contains("`w` is [128, 256]"), "{flat}");
        let odd = W4a8Experts::prepack(&weights(&[e, n, 40]), None).unwrap_err();
        assert!(odd.to_string().contains("`w`: K = 40"), "{odd}");
        let pair = W4a8Experts::prepack(&w1, Some(&weights(&[e, 64, k]))).unwrap_err();
        assert!(pair.to_string().contains("must match"), "{pair}");
    }

    #[test]
    fn the_ops_checks_name_the_argument() {
        let (e, n, k, rows) = (4, 256, 512, 10);
        let mut l = W4a8Layout {
            experts: e,
            n,
            k,
            swiglu: false,
        };
        let cpu = &Device::Cpu;
        let sx = Tensor::zeros((rows, k / 128), DType::F32, cpu).unwrap();
        let off = ExpertRows::Offsets(Tensor::new(&[0i32, 3, 3, 7, 10], cpu).unwrap());
        let counts = ExpertRows::Counts(Tensor::new(&[0i32, 1, 2, 3], cpu).unwrap());
        let x = (DType::F8E4M3, &[rows, k][..]);
        assert_eq!(out_dims(&l, x, &sx, &off, None).unwrap(), [rows, n]);
        let xm = (DType::U8, &[e, 8, k][..]);
        assert_eq!(out_dims(&l, xm, &sx, &counts, None).unwrap(), [e, 8, n]);
        let cases: [(DType, &[usize], &ExpertRows, &str); 4] = [
            (DType::BF16, &[rows, k], &off, "`x` holds BF16"),
            (
                DType::F8E4M3,
                &[e, 8, k],
                &off,
                "`x` is [4, 8, 512]; the W4A8 experts by offsets",
            ),
            (
                DType::F8E4M3,
                &[rows, k],
                &counts,
                "`x` is [10, 512]; the W4A8 experts by counts",
            ),
            (DType::F8E4M3, &[rows, 256], &off, "K = 512"),
        ];
        for (dt, dims, r, want) in cases {
            let err = out_dims(&l, (dt, dims), &sx, r, None).unwrap_err();
            assert!(err.to_string().contains(want), "{err}");
        }
        let sx16 = sx.to_dtype(DType::BF16).unwrap();
        let err = out_dims(&l, x, &sx16, &off, None).unwrap_err();
        assert!(err.to_string().contains("`sx` holds BF16"), "{err}");
        let routing = Tensor::ones(rows, DType::F32, cpu).unwrap();
        let err = out_dims(&l, x, &sx, &off, Some(&routing)).unwrap_err();
        assert!(
            err.to_string().contains("`routing` scales the SwiGLU"),
            "{err}"
        );
        l.swiglu = true;
        assert!(out_dims(&l, x, &sx, &off, Some(&routing)).is_ok());
        let off64 = ExpertRows::Offsets(Tensor::new(&[0i64, 3, 3, 7, 10], cpu).unwrap());
        let err = out_dims(&l, x, &sx, &off64, None).unwrap_err();
        assert!(err.to_string().contains("`offsets` holds I64"), "{err}");
    }
}
