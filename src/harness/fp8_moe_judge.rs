//! The verdicts of the FP8 MoE checks on downloaded outputs (pure, no GPU): bf16 / f32 output
//! against the float64 reference, and the e4m3-quantised SwiGLU output against the reference.

use super::fp8::round_to;
use super::outcome::Outcome;
use super::verify::{rel_l2, verdict, within};
use crate::formats::scale::{amax, dequantize_one, quantize_one, scale_for};
use crate::formats::{Fp8Format, ScaleRecipe};
use crate::ops::gemm::DType;
use crate::ops::moe::fp8_problem::Fp8MoeProblem;
use crate::reference::data::HostData;

/// The bound on the kernel's error before the output's rounding (the 1e-3).
pub const BOUND: f64 = 1e-3;
/// Against the exact reference (bf16's own rounding is about 1.6e-3 of it).
pub const EXACT_BOUND: f64 = 4e-3;

/// The kernel's relative error before its output was rounded, estimated from the rounded output:
/// √(‖out − ref‖² − ‖round(ref) − ref‖²) / ‖ref‖ (`d2`, `q2`, `r2` those squared norms).
///
/// Why not ‖out − round(ref)‖: where the kernel's f32 value v lies a distance d (≪ one ulp) from
/// the reference, out = round(v) differs from round(ref) only where a rounding boundary falls
/// between them, with probability d / ulp, and then by a whole ulp; its square sums to d · ulp,
/// so that norm grows as √(δ · u) of the kernel's relative error δ and bf16's relative ulp u
/// (about 5.6e-3 on average): a bound of 1e-3 on it held the kernel to δ ≤ 1.8e-4, which a fused
/// SwiGLU (two FP8 GEMMs whose tensor cores keep about 14 bits of each 128-deep block, each near
/// 1.3e-4, and silu) does not always meet, though it is five times inside the 1e-3.
/// The difference of squares has expectation d² per element whatever d is: a flip that
/// happens where the reference sits ε from a midpoint (ε < d) turns the rounding error ulp/2 − ε
/// into ulp/2 + ε, adding 2ε · ulp to the square, and ∫₀ᵈ 2ε dε = d² (in ulps). So it estimates
/// δ itself, and δ = 1e-3 of real error (a bf16 intermediate, a wrong scale) shows as 1e-3.
pub fn error_before_rounding(d2: f64, q2: f64, r2: f64) -> f64 {
    rel_l2((d2 - q2).max(0.0), r2)
}

/// bf16 / f32 output against the reference: unwritten (NaN) elements of routed rows, the error
/// against the exact values and the kernel's error before the output's rounding
/// ([`error_before_rounding`]), whose bound is the 1e-3.
pub fn judge_float(
    p: &Fp8MoeProblem,
    raw: &[u8],
    rows: &[(usize, usize)],
    reference: &[Vec<f64>],
    o: &mut Outcome,
) {
    let got = HostData::from_bytes(p.out, raw);
    let (mut d2, mut q2, mut r2) = (0.0f64, 0.0f64, 0.0f64);
    for (want_row, &(r, _)) in reference.iter().zip(rows) {
        for (n, &want) in want_row.iter().enumerate() {
            let have = got.get(r * p.n + n);
            if !have.is_finite() {
                o.mismatches += 1;
                continue;
            }
            let rounded = round_to(p.out, want);
            d2 += (have - want) * (have - want);
            q2 += (rounded - want) * (rounded - want);
            r2 += want * want;
        }
    }
    o.rel_error = rel_l2(d2, r2);
    let rounded = error_before_rounding(d2, q2, r2);
    o.set_fp8(rounded, o.cancellation());
    o.bound = BOUND;
    let exact = if p.out == DType::Bf16 {
        EXACT_BOUND
    } else {
        BOUND
    };
    (o.passed, o.message) = verdict(&[
        (o.mismatches > 0, &|| {
            format!(
                "{} elements of routed rows are NaN or were never written",
                o.mismatches
            )
        }),
        (o.written_outside > 0, &|| {
            format!(
                "{} elements of rows no expert owns were overwritten",
                o.written_outside
            )
        }),
        (!within(o.rel_error, exact), &|| {
            format!(
                "relative error {:.2e} exceeds the {} bound {exact:.0e}",
                o.rel_error, p.out
            )
        }),
        (!within(rounded, o.bound), &|| {
            format!(
                "error before the output's rounding {:.2e} exceeds {:.0e}",
                rounded, o.bound
            )
        }),
    ]);
}

/// The quantised output (e4m3 codes, 1x128 fp32 scales `scales[g * x_rows + row]`) against the
/// reference. Each group's scale within 1 % of the CPU's for the reference's values; then the
/// dequantised output's norm-wise error against the float64 reference within what rounding can
/// explain, `bound` below. The codes themselves are checked bit for bit elsewhere (against kiln's
/// quantisation kernel on the f32 kernel's output).
///
/// Why not "each code within one e4m3 step of the reference's": an element near zero carries
/// the GEMMs' absolute error, a few 1e-4 of the row's magnitude, which is many steps of a tiny
/// value (e4m3's smallest step is 2⁻⁹ of the scale, 1/229,376 of the group's maximum), so about
/// 0.1 % of correct codes failed it.
///
/// The bound. The kernel quantises its f32 values v (scale s' from their group maximum) where
/// the reference has r (scale s); q_s(x) rounds x to the grid s · (e4m3 values). The distance
/// from x to a grid is 1-Lipschitz in x and dist(x, λG) ≤ λ · dist(x, G) + |1 − λ| · |x|, so per
/// element, with λ = s'/s,
///   |q_s'(v) − r| ≤ |q_s'(v) − v| + |v − r| ≤ λ · |q_s(r) − r| + |1 − λ| · |r| + 2 |v − r|.
/// By the triangle inequality over the vector, ‖out − r‖ is at most ‖λ ⊙ (q_s(r) − r)‖ plus
/// ‖(1 − λ) ⊙ r‖ plus 2 ‖v − r‖: the first two terms are measured here (the CPU quantisation's own error of the
/// reference, same recipe, and what the scales' difference can move), the last is at most twice
/// the bf16 output's bound on v. A wrong code of any size, scale or layout adds to the left side
/// only.
pub fn judge_quantized(
    p: &Fp8MoeProblem,
    codes: &[u8],
    scales: &[f32],
    rows: &[(usize, usize)],
    reference: &[Vec<f64>],
    o: &mut Outcome,
) {
    let f = Fp8Format::E4m3;
    let xr = p.x_rows();
    let (mut bad_scales, mut exact_codes, mut total, mut non_finite) = (0usize, 0, 0, 0);
    // squared norms: out − r, λ(q_s(r) − r), (1 − λ) r, r
    let (mut d2, mut q2, mut l2, mut r2) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
    for (want_row, &(r, _)) in reference.iter().zip(rows) {
        for g in 0..p.n.div_ceil(128) {
            let cols = g * 128..((g + 1) * 128).min(p.n);
            let vals: Vec<f32> = want_row[cols.clone()].iter().map(|&v| v as f32).collect();
            let s_ref = scale_for(amax(vals.iter().copied()), f, ScaleRecipe::Fp32);
            let s_got = scales[g * xr + r];
            if !s_got.is_finite() || ((s_got - s_ref) / s_ref).abs() > 1e-2 {
                bad_scales += 1;
                continue;
            }
            let lambda = s_got as f64 / s_ref as f64;
            for (i, c) in cols.enumerate() {
                let code_ref = quantize_one(vals[i], s_ref, f);
                let code = codes[r * p.n + c];
                let got = dequantize_one(code, s_got, f);
                let exact = want_row[c];
                total += 1;
                exact_codes += (code == code_ref) as usize;
                if !got.is_finite() {
                    non_finite += 1;
                    continue;
                }
                let q = lambda * (dequantize_one(code_ref, s_ref, f) - exact);
                let l = (1.0 - lambda) * exact;
                d2 += (got - exact) * (got - exact);
                q2 += q * q;
                l2 += l * l;
                r2 += exact * exact;
            }
        }
    }
    o.rel_error = rel_l2(d2, r2);
    o.mismatches = non_finite;
    o.bound = rel_l2(q2, r2) + rel_l2(l2, r2) + 2.0 * BOUND;
    (o.passed, o.message) = verdict(&[
        (o.written_outside > 0, &|| {
            format!(
                "{} codes of rows no expert owns were overwritten",
                o.written_outside
            )
        }),
        (bad_scales > 0, &|| {
            format!("{bad_scales} 1x128 scales are NaN, unwritten or over 1 % from the reference's")
        }),
        (non_finite > 0, &|| {
            format!("{non_finite} of {total} codes are NaN")
        }),
        (!within(o.rel_error, o.bound), &|| {
            format!(
                "the dequantised output's relative error {:.2e} exceeds {:.2e}: the CPU \
                 quantisation's own error of the reference and the scales' difference plus \
                 twice {BOUND:.0e}",
                o.rel_error, o.bound
            )
        }),
    ]);
    if o.passed {
        o.message =
            format!("{exact_codes} of {total} codes equal the CPU quantisation's of the reference");
    }
}

#[cfg(test)]
#[path = "fp8_moe_judge_tests.rs"]
mod tests;
