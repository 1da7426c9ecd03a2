//! The block's MoE on low-precision expert weights through kiln's candle ops: the FP8 casts and
//! grouped GEMM (DeepGEMM's layouts) and the 4-bit (NVFP4, MXFP4) SwiGLU and grouped GEMM, each
//! against the float64 reference of the values its codes stand for (the FP8 SwiGLU, the masked
//! layout and W4A8 in `fp8moe`).
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
use kiln_candle::{ExpertRows, Fp4Experts, Fp4Format};

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
pub const BOUNDARY: [i32; E] = [0, 1, 127, 0, 129, 43, 54, 0];
pub const UNOWNED: usize = 6;

pub fn boundary_offsets() -> Vec<i32> {
    let mut off = vec![0];
    for c in BOUNDARY {
        off.push(off.last().unwrap() + c);
    }
    off
}

/// The relative L2 error over the owned rows (`owned` rows of `n`), infinite when any element
/// of a row no expert owns is not exactly zero.
pub fn rel_owned(got: &[f64], want: &[f64], owned: usize, n: usize) -> f64 {
    if got[owned * n..].iter().any(|&v| v != 0.0) {
        return f64::INFINITY;
    }
    rel(&got[..owned * n], &want[..owned * n])
}

/// The e4m3 codes of a tensor, as bytes.
pub fn codes(t: &Tensor) -> Result<Vec<u8>> {
    Ok(t.flatten_all()?
        .to_vec1::<F8E4M3>()?
        .iter()
        .map(|c| c.to_bits())
        .collect())
}

pub fn f32s(t: &Tensor) -> Result<Vec<f32>> {
    Ok(t.flatten_all()?.to_vec1::<f32>()?)
}

/// Mismatched codes and scales of a cast against kiln's host quantisation of the same values.
fn mismatches(got: (&[u8], &[f32]), want: (&[u8], &[f32])) -> usize {
    let c = got.0.iter().zip(want.0).filter(|(a, b)| a != b).count();
    let s = got.1.iter().zip(want.1);
    c + s.filter(|(a, b)| a.to_bits() != b.to_bits()).count()
}

pub fn check(dev: &Device, rep: &mut Report, m: &Moe) -> Result<()> {
    let (x8, w1) = fp8(dev, rep, m)?;
    crate::fp8moe::check(dev, rep, m, &x8, &w1)?;
    for format in [Fp4Format::Nvfp4, Fp4Format::Mxfp4] {
        fp4(dev, rep, m, format)?;
    }
    crate::fp8moe::w4a8(dev, rep, m, &x8)
}

pub fn f64_to_f32(v: &[f64]) -> Vec<f32> {
    v.iter().map(|&x| x as f32).collect()
}

/// Rows of x cast per token by kiln's candle op: codes, scales (as the op returns them) and
/// the values the codes stand for.
pub struct Cast {
    pub q: Tensor,
    pub s: Tensor,
    pub dq: Vec<f64>,
}

pub fn token() -> QuantSpec {
    QuantSpec::e4m3(Granularity::Block1x128, ScaleRecipe::Fp32)
}

fn block() -> QuantSpec {
    QuantSpec::e4m3(Granularity::Block128x128, ScaleRecipe::Fp32)
}

/// `x` [rows, k] cast per token, with its mismatches against kiln's host quantisation of `xh`
/// (its values).
pub fn token_cast(x: &Tensor, xh: &[f64]) -> Result<(Cast, usize)> {
    let (rows, k) = x.dims2()?;
    let (q, s) = kiln_candle::per_token_cast_to_fp8(x)?;
    // the scales [rows, k/128] M-major: stored [k/128, rows]
    let (c, sc) = (codes(&q)?, f32s(&s.t()?)?);
    let (hc, hs) = fp8ref::quantize(&f64_to_f32(xh), rows, k, k, token());
    let bad = mismatches((&c, &sc), (&hc, &hs));
    let dq = fp8ref::dequantize(&c, &sc, rows, k, token());
    Ok((Cast { q, s, dq }, bad))
}

/// Experts `w` [E, n, k] cast per 128x128 block, with the mismatches against kiln's host
/// quantisation of `wh` (their values).
pub fn block_cast(w: &Tensor, wh: &[f64]) -> Result<(Cast, usize)> {
    let (_, n, k) = w.dims3()?;
    let (q, s) = kiln_candle::per_block_cast_to_fp8(w)?;
    let (qc, sc) = (codes(&q)?, f32s(&s)?);
    let (per_c, per_s) = (n * k, sc.len() / E);
    let mut bad = 0;
    let mut dq = Vec::with_capacity(E * per_c);
    for e in 0..E {
        let (gc, gs) = (&qc[e * per_c..][..per_c], &sc[e * per_s..][..per_s]);
        let (hc, hs) = fp8ref::quantize(&f64_to_f32(&wh[e * per_c..][..per_c]), n, k, k, block());
        bad += mismatches((gc, gs), (&hc, &hs));
        dq.extend(fp8ref::dequantize(gc, gs, n, k, block()));
    }
    Ok((Cast { q, s, dq }, bad))
}

/// The two rows of an FP8 tensor-core product's bf16 output against the exact product of its
/// dequantised inputs: the error against it (4e-3) and the error before the bf16 rounding
/// (1e-3). `owned` rows of `n` (the rest must be exactly zero).
pub fn fp8_rows(rep: &mut Report, what: &str, got: &[f64], want: &[f64], owned: usize, n: usize) {
    rep.row(what, rel_owned(got, want, owned, n), EXACT_BOUND);
    let (mut d2, mut q2, mut r2) = (0.0, 0.0, 0.0);
    for (g, w) in got[..owned * n].iter().zip(want) {
        let q = half::bf16::from_f64(*w).to_f64();
        (d2, q2, r2) = (d2 + (g - w) * (g - w), q2 + (q - w) * (q - w), r2 + w * w);
    }
    rep.row(
        "  its error before the bf16 rounding",
        error_before_rounding(d2, q2, r2),
        BOUND,
    );
}

/// The per-token cast of the routed rows and W1's experts' per-block cast (each bit for bit
/// against kiln's host quantisation), the FP8 grouped GEMM on them and on the boundary rows.
/// Returns the rows' and W1's casts.
fn fp8(dev: &Device, rep: &mut Report, m: &Moe) -> Result<(Cast, Cast)> {
    let rows = m.xsh.len() / HID;
    let (x8, bad) = token_cast(m.xs, m.xsh)?;
    rep.row(
        "kiln FP8 per-token cast of x (codes, scales ≠ host)",
        bad as f64,
        0.0,
    );
    let (w1, bad) = block_cast(m.w[0].0, m.w[0].1)?;
    rep.row(
        "kiln FP8 per-block cast of W1's experts (≠ host)",
        bad as f64,
        0.0,
    );

    // The grouped GEMM against the values the codes stand for.
    let y = host(&kiln_candle::fp8_grouped_gemm(
        (&x8.q, &x8.s),
        (&w1.q, &w1.s),
        &ExpertRows::Offsets(m.offsets.clone()),
    )?)?;
    let want = ref_grouped(&x8.dq, &w1.dq, m.off, HID, INTER);
    fp8_rows(
        rep,
        "kiln FP8 grouped GEMM x W1ᵀ (dequantised codes)",
        &y,
        &want,
        rows,
        INTER,
    );

    // Boundary rows: the first rows of x, experts of 0, 1, 127, 129 rows, rows no one owns.
    let off = boundary_offsets();
    let owned = off[E] as usize;
    let nb = owned + UNOWNED;
    let (xb, _) = token_cast(&m.xs.narrow(0, 0, nb)?, &m.xsh[..nb * HID])?;
    let ob = ExpertRows::Offsets(Tensor::new(off.as_slice(), dev)?);
    let yb = host(&kiln_candle::fp8_grouped_gemm(
        (&xb.q, &xb.s),
        (&w1.q, &w1.s),
        &ob,
    )?)?;
    let want = ref_grouped(&xb.dq, &w1.dq, &off, HID, INTER);
    rep.row(
        "kiln FP8 grouped GEMM, boundary rows",
        rel_owned(&yb, &want, owned, INTER),
        EXACT_BOUND,
    );
    Ok((x8, w1))
}

/// `w` [E, n, k] (its values `h`) quantised by kiln's recipe on the host: the exact values the
/// uploaded weights stand for.
pub fn dequantised(format: Fp4Format, h: &[f64], n: usize, k: usize) -> Result<Vec<f64>> {
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
