//! The MoE ops a model on FP8 or W4A8 experts runs, through kiln's candle ops on the block's
//! routed rows: the FP8 SwiGLU (bf16 out; e4m3 out with its 1x128 scales, then the down
//! projection's FP8 grouped GEMM straight on those codes), DeepGEMM's masked layout (decode:
//! experts' rows in fixed slots, counts on the GPU) for the grouped GEMM and the SwiGLU, and the
//! W4A8 experts (MXFP4 weights, e4m3 activations) by offsets and masked.
//!
//! Every reference is the float64 product of the values the codes stand for (the casts are
//! checked bit for bit in `lowprec`; MXFP4 values times a power of two are exact in e4m3, so the
//! W4A8 weights are the MXFP4 dequantised weights exactly). What is left is the FP8 tensor
//! cores' accumulation and the output's rounding: the FP8 MoE checks' bounds, 4e-3 against the
//! exact values and 1e-3 before the bf16 rounding; the e4m3 output as kiln's FP8 MoE verify
//! judges it (each 1x128 scale within 1 % of the reference's, the dequantised output within the
//! CPU quantisation's own error of the reference, the scales' difference and twice 1e-3).
//! Slots past an expert's count and rows no expert owns must stay exactly zero.

use anyhow::Result;
use candle_core::{Device, Tensor};
use kiln::harness::fp8_moe_judge::judge_quantized;
use kiln::harness::outcome::{Extra, Outcome};
use kiln::ops::moe::fp8_problem::Fp8MoeProblem;
use kiln_candle::{ExpertRows, Fp4Format, W4a8Experts};

use crate::lowprec::{block_cast, codes, dequantised, f32s, fp8_rows, token_cast, Cast, Moe};
use crate::reference::{ref_grouped, ref_swiglu};
use crate::{host, Report, E, HID, INTER};

/// Slots per expert of the masked layout, and each expert's count: empty, one, full, one short
/// of full, and in between.
const MAX_ROWS: usize = 64;
const COUNTS: [i32; E] = [0, 1, 64, 63, 17, 0, 40, 5];

/// The masked layout's view of `x` [rows, k] (its first E * MAX_ROWS rows, every slot filled,
/// so a kernel that reads past a count computes from real data), cast per token as one matrix:
/// codes [E, MAX_ROWS, k] and the scales of the E * MAX_ROWS rows.
fn masked_cast(x: &Tensor, xh: &[f64]) -> Result<Cast> {
    let k = x.dims2()?.1;
    let (c, _) = token_cast(&x.narrow(0, 0, E * MAX_ROWS)?, &xh[..E * MAX_ROWS * k])?;
    Ok(Cast {
        q: c.q.reshape((E, MAX_ROWS, k))?,
        ..c
    })
}

/// The masked product's reference: every slot as if owned (offsets e * MAX_ROWS), then the
/// slots past each count compared as rows no expert owns.
fn masked_ref(f: impl Fn(&[i32]) -> Vec<f64>) -> Vec<f64> {
    let slots: Vec<i32> = (0..=E).map(|e| (e * MAX_ROWS) as i32).collect();
    f(&slots)
}

/// The owned slots of a masked output (as rows, for [`fp8_rows`]) and whether every other slot
/// is exactly zero: (got, want, owned rows), with the unowned slots' values appended to got as
/// the rows past the owned ones.
fn masked_rows(got: &[f64], want: &[f64], n: usize) -> (Vec<f64>, Vec<f64>, usize) {
    let (mut g, mut w, mut rest) = (Vec::new(), Vec::new(), Vec::new());
    for (e, &c) in COUNTS.iter().enumerate() {
        let (r0, r1, r2) = (e * MAX_ROWS, e * MAX_ROWS + c as usize, (e + 1) * MAX_ROWS);
        g.extend_from_slice(&got[r0 * n..r1 * n]);
        w.extend_from_slice(&want[r0 * n..r1 * n]);
        rest.extend_from_slice(&got[r1 * n..r2 * n]);
    }
    let owned = g.len() / n;
    g.extend(rest);
    (g, w, owned)
}

pub fn check(dev: &Device, rep: &mut Report, m: &Moe, x8: &Cast, w1: &Cast) -> Result<()> {
    let rows = m.xsh.len() / HID;
    let (w3, _) = block_cast(m.w[1].0, m.w[1].1)?;
    let (w2, _) = block_cast(m.w[2].0, m.w[2].1)?;
    let by_offsets = ExpertRows::Offsets(m.offsets.clone());
    let (xp, w1p, w3p) = ((&x8.q, &x8.s), (&w1.q, &w1.s), (&w3.q, &w3.s));

    // The SwiGLU, routed, bf16 out.
    let h = host(&kiln_candle::fp8_swiglu(
        xp,
        w1p,
        w3p,
        &by_offsets,
        Some(m.routing),
    )?)?;
    let want = ref_swiglu(&x8.dq, (&w1.dq, &w3.dq), m.off, Some(m.wt), HID, INTER);
    fp8_rows(
        rep,
        "kiln FP8 SwiGLU (W1, W3; routing weights)",
        &h,
        &want,
        rows,
        INTER,
    );

    // The same to e4m3 with its scales, then W2's FP8 grouped GEMM on those codes.
    let (hq, sh) = kiln_candle::fp8_swiglu_to_fp8(xp, w1p, w3p, &by_offsets, Some(m.routing))?;
    let (hc, hs) = (codes(&hq)?, f32s(&sh.t()?)?);
    let counts: Vec<usize> = m.off.windows(2).map(|w| (w[1] - w[0]) as usize).collect();
    let p = Fp8MoeProblem::contiguous(&counts, INTER, HID).with_swiglu(true, true);
    let checked: Vec<(usize, usize)> = (0..rows).map(|r| (r, 0)).collect();
    let reference: Vec<Vec<f64>> = want.chunks(INTER).map(|r| r.to_vec()).collect();
    let mut o = Outcome::new("fp8 swiglu", p.label(), 0, 0.0, Extra::FP8);
    judge_quantized(&p, &hc, &hs, &checked, &reference, &mut o);
    if !o.passed {
        println!("  (the e4m3 SwiGLU output: {})", o.message);
    }
    rep.row(
        "kiln FP8 SwiGLU → e4m3 + 1x128 scales (dequantised)",
        if o.passed { o.rel_error } else { f64::INFINITY },
        o.bound,
    );
    let hdq = kiln::reference::fp8::dequantize(&hc, &hs, rows, INTER, crate::lowprec::token());
    let y = host(&kiln_candle::fp8_grouped_gemm(
        (&hq, &sh),
        (&w2.q, &w2.s),
        &by_offsets,
    )?)?;
    fp8_rows(
        rep,
        "kiln FP8 grouped GEMM W2 on the SwiGLU's e4m3 output",
        &y,
        &ref_grouped(&hdq, &w2.dq, m.off, INTER, HID),
        rows,
        HID,
    );

    // DeepGEMM's masked layout: the grouped GEMM and the routed SwiGLU.
    let xm = masked_cast(m.xs, m.xsh)?;
    let by_counts = ExpertRows::Counts(Tensor::new(&COUNTS, dev)?);
    let y = host(&kiln_candle::fp8_grouped_gemm(
        (&xm.q, &xm.s),
        w1p,
        &by_counts,
    )?)?;
    let want = masked_ref(|slots| ref_grouped(&xm.dq, &w1.dq, slots, HID, INTER));
    let (g, w, owned) = masked_rows(&y, &want, INTER);
    fp8_rows(
        rep,
        "kiln FP8 grouped GEMM, masked (counts 0, 1, 64, 63, …)",
        &g,
        &w,
        owned,
        INTER,
    );
    let routing = m.routing.narrow(0, 0, E * MAX_ROWS)?;
    let h = host(&kiln_candle::fp8_swiglu(
        (&xm.q, &xm.s),
        w1p,
        w3p,
        &by_counts,
        Some(&routing),
    )?)?;
    let wt = &m.wt[..E * MAX_ROWS];
    let want =
        masked_ref(|slots| ref_swiglu(&xm.dq, (&w1.dq, &w3.dq), slots, Some(wt), HID, INTER));
    let (g, w, owned) = masked_rows(&h, &want, INTER);
    fp8_rows(
        rep,
        "kiln FP8 SwiGLU, masked, routing weights",
        &g,
        &w,
        owned,
        INTER,
    );
    Ok(())
}

/// The W4A8 experts: the routed SwiGLU on the rows' e4m3 codes, W2's grouped GEMM on the
/// candle path's SwiGLU output cast per token, and the same masked.
pub fn w4a8(dev: &Device, rep: &mut Report, m: &Moe, x8: &Cast) -> Result<()> {
    let rows = m.xsh.len() / HID;
    let [(w1, w1h), (w3, w3h), (w2, w2h)] = m.w;
    let f = Fp4Format::Mxfp4;
    let w13 = W4a8Experts::quantize(w1, Some(w3), dev)?;
    let w2q = W4a8Experts::quantize(w2, None, dev)?;
    let (d1, d3) = (
        dequantised(f, w1h, INTER, HID)?,
        dequantised(f, w3h, INTER, HID)?,
    );
    let d2 = dequantised(f, w2h, HID, INTER)?;
    let by_offsets = ExpertRows::Offsets(m.offsets.clone());

    let h = host(&kiln_candle::w4a8_experts(
        (&x8.q, &x8.s),
        &w13,
        &by_offsets,
        Some(m.routing),
    )?)?;
    let want = ref_swiglu(&x8.dq, (&d1, &d3), m.off, Some(m.wt), HID, INTER);
    fp8_rows(
        rep,
        "kiln W4A8 SwiGLU (MXFP4 W1, W3; e4m3 x; routing)",
        &h,
        &want,
        rows,
        INTER,
    );
    let (h8, _) = token_cast(m.hm, m.hmh)?;
    let y = host(&kiln_candle::w4a8_experts(
        (&h8.q, &h8.s),
        &w2q,
        &by_offsets,
        None,
    )?)?;
    fp8_rows(
        rep,
        "kiln W4A8 grouped GEMM (MXFP4 W2; e4m3 h)",
        &y,
        &ref_grouped(&h8.dq, &d2, m.off, INTER, HID),
        rows,
        HID,
    );
    let hm = masked_cast(m.hm, m.hmh)?;
    let by_counts = ExpertRows::Counts(Tensor::new(&COUNTS, dev)?);
    let y = host(&kiln_candle::w4a8_experts(
        (&hm.q, &hm.s),
        &w2q,
        &by_counts,
        None,
    )?)?;
    let want = masked_ref(|slots| ref_grouped(&hm.dq, &d2, slots, INTER, HID));
    let (g, w, owned) = masked_rows(&y, &want, HID);
    fp8_rows(rep, "kiln W4A8 grouped GEMM, masked", &g, &w, owned, HID);
    Ok(())
}
