//! The 4-bit MoE ops for foreign callers: expert weights quantised and prepacked on the host
//! from transformers' layout, held by the caller as two device byte buffers (the prepacked
//! bytes and the f32 factors), and the grouped GEMM or fused SwiGLU on raw tensors. The
//! `check_*` functions and the prepack need no handle or GPU.

use cudarc::driver::sys::CUstream;

use super::fp4_experts::fp4_plan;
use super::fp4_raw::RawBytes;
use super::handle::Kiln;
use super::options::MoeRows;
use super::raw::rows_info;
use super::tensor::RawTensor;
use super::validate::{MoePlan, Operand};
use crate::error::{ArgumentKind, Error, Result};
use crate::ops::moe::fp4::kernel::Fp4Layout;
use crate::ops::moe::fp4::Fp4Format;
use crate::ops::moe::fp4::{prepack, prepack_swiglu, Fp4Prepacked, Fp4Weights};

/// Prepacked 4-bit expert weights in the caller's device memory: `bytes` as
/// [`Fp4Prepacked::bytes`], `escale` its f32 factors (experts x halves of them).
#[derive(Debug, Clone, Copy)]
pub struct RawFp4Experts {
    pub layout: Fp4Layout,
    pub bytes: RawBytes,
    pub escale: RawBytes,
}

/// Quantises and prepacks expert weights given as f32 `values` in transformers' layout: with
/// `swiglu`, gate_up_proj [E, 2 n, k] (rows 0..n gate, n..2n up, as separate W1 and W3);
/// otherwise a projection [E, n, k] (down_proj is [E, hidden, intermediate]: n = hidden).
pub fn fp4_prepack_experts(
    values: &[f32],
    format: Fp4Format,
    experts: usize,
    n: usize,
    k: usize,
    swiglu: bool,
) -> Result<Fp4Prepacked> {
    let halves = if swiglu { 2 } else { 1 };
    if values.len() != experts * halves * n * k {
        return Err(Error::invalid(format!(
            "{} values cannot be {experts} experts of [{}, {k}]",
            values.len(),
            halves * n
        )));
    }
    if !swiglu {
        return prepack(&Fp4Weights::quantize(format, experts, n, k, values)?);
    }
    // each expert's gate rows then its up rows, as two [E, n, k] tensors
    let per = n * k;
    let half = |h: usize| -> Vec<f32> {
        (0..experts)
            .flat_map(|e| {
                values[(2 * e + h) * per..(2 * e + h + 1) * per]
                    .iter()
                    .copied()
            })
            .collect()
    };
    let w1 = Fp4Weights::quantize(format, experts, n, k, &half(0))?;
    let w3 = Fp4Weights::quantize(format, experts, n, k, &half(1))?;
    prepack_swiglu(&w1, Some(&w3))
}

/// The device operands of `w` after checking them against its layout: on `device`, the whole
/// prepacked size, 16-byte aligned.
fn weight_operands(device: usize, w: &RawFp4Experts) -> Result<(Operand, Operand)> {
    let l = w.layout;
    let want = [
        ("the 4-bit weights", w.bytes, l.experts * l.expert_bytes()),
        (
            "the 4-bit weights' factors",
            w.escale,
            l.experts * l.halves() * 4,
        ),
    ];
    for (arg, b, bytes) in want {
        if b.device != device {
            return Err(Error::argument(
                arg,
                ArgumentKind::Device,
                format!(
                    "{arg} are on GPU {} but x is on GPU {device}; move them there",
                    b.device
                ),
            ));
        }
        if b.len != bytes {
            return Err(Error::argument(
                arg,
                ArgumentKind::Shape,
                format!(
                    "{arg} hold {} bytes but {} experts of [{}, {}] {} prepack to {bytes}: \
                     pass what quantize_experts made for these weights",
                    b.len, l.experts, l.n, l.k, l.format
                ),
            ));
        }
        if b.ptr == 0 || !b.ptr.is_multiple_of(16) {
            return Err(Error::argument(
                arg,
                ArgumentKind::Bounds,
                format!("{arg} must start on a 16-byte boundary (a fresh allocation does)"),
            ));
        }
    }
    Ok((
        Operand {
            ptr: w.bytes.ptr,
            bytes: w.bytes.len,
        },
        Operand {
            ptr: w.escale.ptr,
            bytes: w.escale.len,
        },
    ))
}

pub(crate) fn fp4_raw_plan(
    device: usize,
    x: &RawTensor,
    w: &RawFp4Experts,
    rows: &MoeRows<'_, RawTensor>,
    routing: Option<&RawTensor>,
    y: &RawTensor,
) -> Result<(Option<MoePlan>, (Operand, Operand))> {
    let routing = routing.map(|t| t.info("routing", false)).transpose()?;
    let plan = fp4_plan(
        device,
        &x.info("x", false)?,
        &w.layout,
        &rows_info(rows)?,
        routing.as_ref(),
        &y.info("y", false)?,
    )?;
    Ok((plan, weight_operands(device, w)?))
}

/// The checks of [`fp4_experts`], without a handle.
pub fn check_fp4_experts(
    device: usize,
    x: &RawTensor,
    w: &RawFp4Experts,
    rows: &MoeRows<'_, RawTensor>,
    routing: Option<&RawTensor>,
    y: &RawTensor,
) -> Result<()> {
    fp4_raw_plan(device, x, w, rows, routing, y).map(drop)
}

/// [`Kiln::fp4_experts`] on raw tensors, weights in the caller's memory and a raw stream.
///
/// # Safety
/// `stream` must be a live stream of the handle's context. Every tensor and both weight buffers
/// must describe device memory of that context holding what they say (the weights: what
/// [`fp4_prepack_experts`] made for their layout), alive and (for `y`) not used by anyone else
/// until the stream has run the launch; the caller orders the stream after the inputs'
/// producers.
pub unsafe fn fp4_experts(
    k: &Kiln,
    stream: CUstream,
    x: &RawTensor,
    w: &RawFp4Experts,
    rows: &MoeRows<'_, RawTensor>,
    routing: Option<&RawTensor>,
    y: &RawTensor,
) -> Result<()> {
    k.check_raw_stream(stream)?;
    match fp4_raw_plan(k.ordinal(), x, w, rows, routing, y)? {
        (Some(plan), weights) => k.launch_fp4(Some(stream), &plan, &w.layout, weights),
        (None, _) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::DType;

    fn values(n: usize) -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 16.0)
            .collect()
    }

    #[test]
    fn gate_up_proj_prepacks_as_the_separate_gate_and_up_halves() {
        let (e, n, k) = (2, 128, 64);
        let v = values(e * 2 * n * k);
        let p = fp4_prepack_experts(&v, Fp4Format::Nvfp4, e, n, k, true).unwrap();
        let half = |h: usize| -> Vec<f32> {
            (0..e)
                .flat_map(|x| v[(2 * x + h) * n * k..(2 * x + h + 1) * n * k].to_vec())
                .collect()
        };
        let w1 = Fp4Weights::quantize(Fp4Format::Nvfp4, e, n, k, &half(0)).unwrap();
        let w3 = Fp4Weights::quantize(Fp4Format::Nvfp4, e, n, k, &half(1)).unwrap();
        assert_eq!(p, prepack_swiglu(&w1, Some(&w3)).unwrap());
        assert!(p.swiglu && p.n == n && p.k == k && p.experts == e);
        let down = fp4_prepack_experts(&v[..e * n * k], Fp4Format::Mxfp4, e, n, k, false).unwrap();
        assert!(!down.swiglu && down.format == Fp4Format::Mxfp4);
        let e2 = fp4_prepack_experts(&v[1..], Fp4Format::Nvfp4, e, n, k, true).unwrap_err();
        assert!(
            e2.to_string().contains("cannot be 2 experts of [256, 64]"),
            "{e2}"
        );
    }

    #[test]
    fn weights_that_are_not_their_layouts_prepack_are_refused_by_name() {
        let (e, n, k) = (2, 128, 64);
        let p =
            fp4_prepack_experts(&values(e * 2 * n * k), Fp4Format::Nvfp4, e, n, k, true).unwrap();
        let l = p.layout();
        let bytes = |ptr, len| RawBytes {
            ptr,
            len,
            device: 0,
        };
        let good = RawFp4Experts {
            layout: l,
            bytes: bytes(1 << 20, p.bytes.len()),
            escale: bytes(2 << 20, p.escale.len() * 4),
        };
        assert!(weight_operands(0, &good).is_ok());
        let short = RawFp4Experts {
            bytes: bytes(1 << 20, p.bytes.len() - 16),
            ..good
        };
        let err = weight_operands(0, &short).unwrap_err();
        assert!(err.to_string().contains("quantize_experts"), "{err}");
        let odd = RawFp4Experts {
            escale: bytes((2 << 20) + 4, p.escale.len() * 4),
            ..good
        };
        assert!(weight_operands(0, &odd)
            .unwrap_err()
            .to_string()
            .contains("16-byte"));
        assert!(weight_operands(1, &good)
            .unwrap_err()
            .to_string()
            .contains("GPU 0 but x is on GPU 1"));
        // the activations are checked as the 16-bit MoE's: a 2-D x of H = K columns
        let x = RawTensor::contiguous(4 << 20, DType::Bf16, &[10, k], 0);
        let y = RawTensor::contiguous(8 << 20, DType::Bf16, &[10, n], 0);
        let off = RawTensor::contiguous(16 << 20, DType::I32, &[e + 1], 0);
        let rows = MoeRows::Offsets {
            offsets: off,
            host: None,
        };
        assert!(check_fp4_experts(0, &x, &good, &rows, None, &y).is_ok());
        let wide = RawTensor::contiguous(4 << 20, DType::Bf16, &[10, k + 8], 0);
        assert!(check_fp4_experts(0, &wide, &good, &rows, None, &y).is_err());
    }
}
