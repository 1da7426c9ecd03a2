//! kiln's flash attention as candle ops: BSHD, GQA, causal, the LSE, and packed (variable-length)
//! batches.

use std::sync::Mutex;

use candle_core::cuda_backend::cudarc::driver::{DeviceRepr, ValidAsZeroBits};
use candle_core::cuda_backend::{CudaDType, CudaDevice};
use candle_core::{CpuStorage, CudaStorage, CustomOp3, Layout, Result, Shape, Tensor};
use kiln::api::Window;
use kiln::{AttentionOptions, KilnElem, TensorMut, TensorRef, VarlenOffsets};

use crate::{handle, keep_side, kerr, no_cpu, out, taken_side, with_view, wrap, In, SideOut};

/// Flash attention forward: q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D] (BSHD, any strides with
/// a unit last one), Hq a multiple of Hkv (GQA), D 64, 128 or 256; causal aligned bottom-right;
/// `softmax_scale` `None` for 1/sqrt(D); `window` flash-attention's (left, right), -1 unbounded.
/// The output is like q, packed. With `lse` set, [`flash_attn_lse`] also returns the f32
/// log-sum-exp [B, Hq, Sq].
pub struct FlashAttn {
    pub softmax_scale: Option<f32>,
    pub causal: bool,
    pub window: (i64, i64),
    lse: SideOut,
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

/// q, k and v as kiln's views and a new packed output like q on their device's stream, given to
/// `f`; returns the output.
fn attend<T: CudaDType + KilnElem + DeviceRepr + ValidAsZeroBits>(
    (q, lq): (&CudaStorage, &Layout),
    (k, lk): (&CudaStorage, &Layout),
    (v, lv): (&CudaStorage, &Layout),
    f: impl FnOnce(&CudaDevice, [TensorRef; 3], &mut TensorMut) -> Result<()>,
) -> Result<(CudaStorage, Shape)> {
    let dev = &q.device;
    let [iq, ik, iv] = [(q, lq), (k, lk), (v, lv)].map(|(s, l)| In::<T>::new(s, l));
    let (iq, ik, iv) = (iq?, ik?, iv?);
    let mut o = out::<T>(dev, iq.dims.iter().product(), false)?;
    f(
        dev,
        [iq.t()?, ik.t()?, iv.t()?],
        &mut TensorMut::from_slice(&mut o, &iq.dims).map_err(kerr)?,
    )?;
    Ok((wrap(o, dev), Shape::from(iq.dims.clone())))
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
    let &[b, sq, hq, _] = lq.dims() else {
        candle_core::bail!(
            "kiln flash attention takes q [B, S, H, D], got {:?}",
            lq.dims()
        );
    };
    attend::<T>((q, lq), (k, lk), (v, lv), |dev, [q, k, v], o| {
        let mut lse = match op.lse {
            Some(_) => Some(out::<f32>(dev, b * hq * sq, false)?),
            None => None,
        };
        {
            let mut tl = match lse.as_mut() {
                Some(l) => Some(TensorMut::from_slice(l, &[b, hq, sq]).map_err(kerr)?),
                None => None,
            };
            handle(dev)?
                .attention(
                    &dev.cuda_stream(),
                    &q,
                    &k,
                    &v,
                    o,
                    tl.as_mut(),
                    &op.options(),
                )
                .map_err(kerr)?;
        }
        keep_side(&op.lse, lse, dev);
        Ok(())
    })
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
    let lse = taken_side(&op.lse, Shape::from((b, hq, sq)))?;
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
    let opts = AttentionOptions {
        causal: op.causal,
        softmax_scale: op.softmax_scale,
        ..AttentionOptions::default()
    };
    attend::<T>((q, lq), (k, lk), (v, lv), |dev, [q, k, v], o| {
        with_view::<i32, _>(&op.cu_seqlens_q, "cu_seqlens_q", |cq| {
            with_view::<i32, _>(&op.cu_seqlens_k, "cu_seqlens_k", |ck| {
                let offsets = VarlenOffsets {
                    cu_q: &cq,
                    cu_k: &ck,
                    max_seqlen_q: op.max_seqlen_q,
                    max_seqlen_k: op.max_seqlen_k,
                    host: None,
                };
                handle(dev)?
                    .attention_varlen(&dev.cuda_stream(), &q, &k, &v, o, None, offsets, &opts)
                    .map_err(kerr)
            })
        })
    })
}

op3!(FlashAttnVarlen, "kiln-flash-attn-varlen", varlen_fwd);
