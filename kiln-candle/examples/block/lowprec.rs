//! The block's MoE on low-precision expert weights through kiln's candle ops: the FP8 casts and
//! grouped GEMM (DeepGEMM's layouts) and the 4-bit (NVFP4, MXFP4) SwiGLU and grouped GEMM, each
//! against the float64 reference of the values its codes stand for.
//!
//! Bounds: the casts must give kiln's host quantisation bit for bit (codes and scales, no
//! mismatch); the GEMMs' inputs are then exact (the dequantised codes), so what is left is the
//! bf16 output's rounding and f32 accumulation: the bf16 GEMM bound (4e-3) against the exact
//! values, and for FP8 also the error before the output's rounding (1e-3, the FP8 MoE checks'
//! bound: the tensor cores keep ~14 bits of each 128-deep block before the f32 promotion).
//! The boundary rows give experts 0, 1, 127, 129 rows and leave rows no expert owns, which must
//! stay exactly zero.

use anyhow::Result;
use candle_core::{Device, Tensor};
use float8::F8E4M3;
use kiln::formats::ScaleRecipe;
use kiln::harness::fp8_moe_judge::{error_before_rounding, BOUND, EXACT_BOUND};
use kiln::harness::verify::bound;
use kiln::ops::fp8::{Granularity, QuantSpec};
use kiln::ops::moe::fp4::Fp4Weights;
use kiln::reference::fp8 as fp8ref;
use kiln_candle::{Fp4Experts, Fp4Format};

use crate::reference::{ref_grouped, ref_swiglu};
use crate::{host, rel, Report, E, HID, INTER};

/// The routed MoE inputs of the block (rows sorted by expert) and their host copies.
pub struct Moe<'a> {
    pub xs: &'a Tensor,
    pub xsh: &'a [f64],
    pub hm: &'a Tensor,
    pub hmh: &'a [f64],
    pub routing: &'a Tensor,
    pub wt: &'a [f32],
    pub offsets: &'a Tensor,
    pub off: &'a [i32],
    /// W1, W3 [E, INTER, HID] and W2 [E, HID, INTER], with their values.
    pub w: [(&'a Tensor, &'a [f64]); 3],
}

/// Rows per expert of the boundary case (experts with 0, 1, 127 and 129 rows), and the rows of
/// x past the last expert's, which no expert owns.
const BOUNDARY: [i32; E] = [0, 1, 127, 0, 129, 43, 54, 0];
const UNOWNED: usize = 6;

fn boundary_offsets() -> Vec<i32> {
    let mut off = vec![0];
    for c in BOUNDARY {
        off.push(off.last().unwrap() + c);
    }
    off
}

/// The relative L2 error over the owned rows (`owned` rows of `n`), infinite when any element
/// of a row no expert owns is not exactly zero.
fn rel_owned(got: &[f64], want: &[f64], owned: usize, n: usize) -> f64 {
    if got[owned * n..].iter().any(|&v| v != 0.0) {
        return f64::INFINITY;
    }
    rel(&got[..owned * n], &want[..owned * n])
}

/// The e4m3 codes of a tensor, as bytes.
fn codes(t: &Tensor) -> Result<Vec<u8>> {
    Ok(t.flatten_all()?
        .to_vec1::<F8E4M3>()?
        .iter()
        .map(|c| c.to_bits())
        .collect())
}

fn f32s(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.flatten_all()?.to_vec1::<f32>()?)
}

/// Mismatched codes and scales of a cast against kiln's host quantisation of the same values.
fn mismatches(got: (&[u8], &[f32]), want: (&[u8], &[f32])) -> usize {
    let c = got.0.iter().zip(want.0).filter(|(a, b)| a != b).count();
    let s = got.1.iter().zip(want.1);
    c + s.filter(|(a, b)| a.to_bits() != b.to_bits()).count()
}

pub fn check(dev: &Device, rep: &mut Report, m: &Moe) -> Result<()> {
    fp8(dev, rep, m)?;
    for format in [Fp4Format::Nvfp4, Fp4Format::Mxfp4] {
        fp4(dev, rep, m, format)?;
    }
    Ok(())
}

fn fp8(dev: &Device, rep: &mut Report, m: &Moe) -> Result<()> {
    let rows = m.xsh.len() / HID;
    let token = QuantSpec::e4m3(Granularity::Block1x128, ScaleRecipe::Fp32);
    let block = QuantSpec::e4m3(Granularity::Block128x128, ScaleRecipe::Fp32);
    let f = |v: &[f64]| -> Vec<f32> { v.iter().map(|&x| x as f32).collect() };

    // The activations, per token (the scales [rows, HID/128] M-major: stored [HID/128, rows]).
    let (xq, sx) = kiln_candle::per_token_cast_to_fp8(m.xs)?;
    let (xc, xsc) = (codes(&xq)?, f32s(&sx.t()?)?);
    let (wc, ws) = fp8ref::quantize(&f(m.xsh), rows, HID, HID, token);
    rep.row(
        "kiln FP8 per-token cast of x (codes, scales ≠ host)",
        mismatches((&xc, &xsc), (&wc, &ws)) as f64,
        0.0,
    );
    // W1's experts, per 128x128 block.
    let (w1, w1h) = m.w[0];
    let (wq, sw) = kiln_candle::per_block_cast_to_fp8(w1)?;
    let (wqc, swc) = (codes(&wq)?, f32s(&sw)?);
    let (per_c, per_s) = (INTER * HID, swc.len() / E);
    let mut bad = 0;
    let mut wdq = Vec::with_capacity(E * per_c);
    for e in 0..E {
        let (gc, gs) = (&wqc[e * per_c..][..per_c], &swc[e * per_s..][..per_s]);
        let (hc, hs) = fp8ref::quantize(&f(&w1h[e * per_c..][..per_c]), INTER, HID, HID, block);
        bad += mismatches((gc, gs), (&hc, &hs));
        wdq.extend(fp8ref::dequantize(gc, gs, INTER, HID, block));
    }
    rep.row(
        "kiln FP8 per-block cast of W1's experts (≠ host)",
        bad as f64,
        0.0,
    );

    // The grouped GEMM against the values the codes stand for.
    let xdq = fp8ref::dequantize(&xc, &xsc, rows, HID, token);
    let y = host(&kiln_candle::fp8_grouped_gemm(
        (&xq, &sx),
        (&wq, &sw),
        m.offsets,
    )?)?;
    let want = ref_grouped(&xdq, &wdq, m.off, HID, INTER);
    rep.row(
        "kiln FP8 grouped GEMM x W1ᵀ (dequantised codes)",
        rel(&y, &want),
        EXACT_BOUND,
    );
    let (mut d2, mut q2, mut r2) = (0.0, 0.0, 0.0);
    for (g, w) in y.iter().zip(&want) {
        let q = half::bf16::from_f64(*w).to_f64();
        (d2, q2, r2) = (d2 + (g - w) * (g - w), q2 + (q - w) * (q - w), r2 + w * w);
    }
    rep.row(
        "  its error before the bf16 rounding",
        error_before_rounding(d2, q2, r2),
        BOUND,
    );

    // Boundary rows: the first rows of x, experts of 0, 1, 127, 129 rows, rows no one owns.
    let off = boundary_offsets();
    let owned = off[E] as usize;
    let nb = owned + UNOWNED;
    let xb = m.xs.narrow(0, 0, nb)?;
    let (xbq, sxb) = kiln_candle::per_token_cast_to_fp8(&xb)?;
    let (xbc, xbs) = (codes(&xbq)?, f32s(&sxb.t()?)?);
    let ob = Tensor::new(off.as_slice(), dev)?;
    let yb = host(&kiln_candle::fp8_grouped_gemm(
        (&xbq, &sxb),
        (&wq, &sw),
        &ob,
    )?)?;
    let want = ref_grouped(
        &fp8ref::dequantize(&xbc, &xbs, nb, HID, token),
        &wdq,
        &off,
        HID,
        INTER,
    );
    rep.row(
        "kiln FP8 grouped GEMM, boundary rows",
        rel_owned(&yb, &want, owned, INTER),
        EXACT_BOUND,
    );
    Ok(())
}

/// `w` [E, n, k] (its values `h`) quantised by kiln's recipe on the host: the exact values the
/// uploaded weights stand for.
fn dequantised(format: Fp4Format, h: &[f64], n: usize, k: usize) -> Result<Vec<f64>> {
    let v: Vec<f32> = h.iter().map(|&x| x as f32).collect();
    Ok(Fp4Weights::quantize(format, E, n, k, &v)?.dequantize()?)
}

fn fp4(dev: &Device, rep: &mut Report, m: &Moe, format: Fp4Format) -> Result<()> {
    let gb = bound(kiln::ops::gemm::DType::Bf16);
    let [(w1, w1h), (w3, w3h), (w2, w2h)] = m.w;
    let w13 = Fp4Experts::quantize(w1, Some(w3), format, dev)?;
    let w2q = Fp4Experts::quantize(w2, None, format, dev)?;
    let (d1, d3) = (
        dequantised(format, w1h, INTER, HID)?,
        dequantised(format, w3h, INTER, HID)?,
    );
    let d2 = dequantised(format, w2h, HID, INTER)?;

    let h = host(&kiln_candle::fp4_experts(
        m.xs,
        &w13,
        m.offsets,
        Some(m.routing),
    )?)?;
    let want = ref_swiglu(m.xsh, (&d1, &d3), m.off, Some(m.wt), HID, INTER);
    rep.row(
        &format!("kiln {format} SwiGLU (W1, W3; routing weights)"),
        rel(&h, &want),
        gb,
    );
    let y = host(&kiln_candle::fp4_experts(m.hm, &w2q, m.offsets, None)?)?;
    rep.row(
        &format!("kiln {format} grouped GEMM (W2)"),
        rel(&y, &ref_grouped(m.hmh, &d2, m.off, INTER, HID)),
        gb,
    );
    if format == Fp4Format::Nvfp4 {
        let off = boundary_offsets();
        let owned = off[E] as usize;
        let nb = owned + UNOWNED;
        let ob = Tensor::new(off.as_slice(), dev)?;
        let hb = host(&kiln_candle::fp4_experts(
            &m.xs.narrow(0, 0, nb)?,
            &w13,
            &ob,
            Some(&m.routing.narrow(0, 0, nb)?),
        )?)?;
        let want = ref_swiglu(
            &m.xsh[..nb * HID],
            (&d1, &d3),
            &off,
            Some(&m.wt[..nb]),
            HID,
            INTER,
        );
        rep.row(
            &format!("kiln {format} SwiGLU, boundary rows"),
            rel_owned(&hb, &want, owned, INTER),
            gb,
        );
    }
    Ok(())
}
