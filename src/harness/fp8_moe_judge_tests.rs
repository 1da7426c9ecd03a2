use rand::{Rng, SeedableRng};

use super::*;

/// Two experts of 96 rows, N = 256, K = 128: 192 rows to judge.
fn problem(quantize: bool) -> Fp8MoeProblem {
    Fp8MoeProblem::contiguous(&[96, 96], 256, 128).with_swiglu(true, quantize)
}

fn rows(p: &Fp8MoeProblem) -> Vec<(usize, usize)> {
    (0..p.x_rows()).map(|r| (r, r / 96)).collect()
}

/// SwiGLU-like reference rows, silu(g) · u · route with g, u of spread about 8 (as K = 512 gives):
/// half the gates negative, so many values near zero.
fn swiglu_reference(p: &Fp8MoeProblem, seed: u64) -> Vec<Vec<f64>> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let mut normal = || (0..4).map(|_| rng.gen_range(-1.0..1.0f64)).sum::<f64>() * 7.0;
    (0..p.x_rows())
        .map(|r| {
            let route = 0.5 + (r % 7) as f64 / 7.0;
            (0..p.n)
                .map(|_| {
                    let (g, u) = (normal(), normal());
                    g / (1.0 + (-g).exp()) * u * route
                })
                .collect()
        })
        .collect()
}

fn rms(row: &[f64]) -> f64 {
    (row.iter().map(|x| x * x).sum::<f64>() / row.len() as f64).sqrt()
}

/// The kernel's f32 values: the reference with `rel` relative and `abs` (of the row's rms)
/// absolute error, uniform with those standard deviations.
fn kernel_values(reference: &[Vec<f64>], rel: f64, abs: f64, seed: u64) -> Vec<Vec<f64>> {
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    let s3 = 3f64.sqrt();
    reference
        .iter()
        .map(|row| {
            let a = abs * rms(row);
            row.iter()
                .map(|&x| x * (1.0 + rel * rng.gen_range(-s3..s3)) + a * rng.gen_range(-s3..s3))
                .collect()
        })
        .collect()
}

fn bf16_bytes(values: &[Vec<f64>]) -> Vec<u8> {
    values
        .iter()
        .flatten()
        .flat_map(|&x| half::bf16::from_f64(x).to_le_bytes())
        .collect()
}

/// ‖round(v) − round(ref)‖ / ‖ref‖: the criterion the bf16 check used to apply.
fn flips(reference: &[Vec<f64>], v: &[Vec<f64>]) -> f64 {
    let (mut d2, mut r2) = (0.0, 0.0);
    for (a, b) in reference.iter().flatten().zip(v.iter().flatten()) {
        let d = round_to(DType::Bf16, *b) - round_to(DType::Bf16, *a);
        d2 += d * d;
        r2 += a * a;
    }
    rel_l2(d2, r2)
}

fn judge_bf16(rel: f64) -> (Outcome, f64) {
    let p = problem(false);
    let reference = swiglu_reference(&p, 1);
    let v = kernel_values(&reference, rel, 0.0, 2);
    let mut o = crate::harness::fp8::fp8_outcome("fp8_swiglu", "test".into(), 0);
    judge_float(&p, &bf16_bytes(&v), &rows(&p), &reference, &mut o);
    (o, flips(&reference, &v))
}

#[test]
fn a_kernel_error_of_3e_4_passes_though_it_flips_bf16_roundings_beyond_1e_3() {
    let (o, old) = judge_bf16(3e-4);
    assert!(old > 1e-3, "the old criterion saw {old:.2e}");
    assert!(o.passed, "{}", o.message);
    assert!(
        (2e-4..4.5e-4).contains(&o.rel_error_rounded()),
        "estimated {:.2e} for 3e-4",
        o.rel_error_rounded()
    );
}

#[test]
fn a_kernel_error_of_2e_3_before_rounding_fails() {
    let (o, _) = judge_bf16(2e-3);
    assert!(!o.passed);
    assert!(
        o.message.contains("before the output's rounding"),
        "{}",
        o.message
    );
    assert!((1.6e-3..2.5e-3).contains(&o.rel_error_rounded()));
}

#[test]
fn an_exact_kernel_is_estimated_at_zero() {
    let (o, old) = judge_bf16(0.0);
    assert_eq!(old, 0.0);
    assert_eq!(o.rel_error_rounded(), 0.0);
    assert!(o.passed);
}

/// Codes and 1x128 scales as the epilogue makes them from the kernel's values `v`.
fn quantise_like_the_epilogue(p: &Fp8MoeProblem, v: &[Vec<f64>]) -> (Vec<u8>, Vec<f32>) {
    let f = Fp8Format::E4m3;
    let xr = p.x_rows();
    let groups = p.n.div_ceil(128);
    let (mut codes, mut scales) = (vec![0u8; xr * p.n], vec![0f32; groups * xr]);
    for (r, row) in v.iter().enumerate() {
        for g in 0..groups {
            let vals: Vec<f32> = row[g * 128..(g + 1) * 128]
                .iter()
                .map(|&x| x as f32)
                .collect();
            let s = scale_for(amax(vals.iter().copied()), f, ScaleRecipe::Fp32);
            scales[g * xr + r] = s;
            for (i, &x) in vals.iter().enumerate() {
                codes[r * p.n + g * 128 + i] = quantize_one(x, s, f);
            }
        }
    }
    (codes, scales)
}

fn judge_codes(p: &Fp8MoeProblem, reference: &[Vec<f64>], codes: &[u8], scales: &[f32]) -> Outcome {
    let mut o = crate::harness::fp8::fp8_outcome("fp8_swiglu", "test".into(), 0);
    judge_quantized(p, codes, scales, &rows(p), reference, &mut o);
    o
}

/// Codes whose value is more than one e4m3 step from the CPU quantisation's of the reference:
/// the criterion the quantised check used to apply.
fn codes_off_by_more_than_a_step(p: &Fp8MoeProblem, reference: &[Vec<f64>], codes: &[u8]) -> usize {
    let f = Fp8Format::E4m3;
    let (ref_codes, _) = quantise_like_the_epilogue(p, reference);
    codes
        .iter()
        .zip(&ref_codes)
        .filter(|(&a, &b)| {
            (f.decode(a) as f64 - f.decode(b) as f64).abs()
                > 0.126 * f.decode(a).abs().max(f.decode(b).abs()).max(2f32.powi(-6)) as f64
        })
        .count()
}

#[test]
fn near_zero_codes_many_steps_off_pass_when_the_values_are_right() {
    let p = problem(true);
    let reference = swiglu_reference(&p, 3);
    // 2e-4 of the row's rms as absolute error: the GEMMs' error on elements near zero.
    let v = kernel_values(&reference, 1e-4, 2e-4, 4);
    let (codes, scales) = quantise_like_the_epilogue(&p, &v);
    assert!(codes_off_by_more_than_a_step(&p, &reference, &codes) > 0);
    let o = judge_codes(&p, &reference, &codes, &scales);
    assert!(o.passed, "{}", o.message);
    assert!(o.rel_error > 5e-3 && o.rel_error < o.bound, "{o:?}");
}

#[test]
fn codes_of_the_wrong_columns_or_an_unwritten_group_fail() {
    let p = problem(true);
    let reference = swiglu_reference(&p, 5);
    let v = kernel_values(&reference, 1e-4, 2e-4, 6);
    let (codes, scales) = quantise_like_the_epilogue(&p, &v);
    // two neighbouring columns swapped throughout (a transposed quad)
    let mut swapped = codes.clone();
    swapped.chunks_mut(2).for_each(|c| c.swap(0, 1));
    let o = judge_codes(&p, &reference, &swapped, &scales);
    assert!(
        !o.passed && o.message.contains("relative error"),
        "{}",
        o.message
    );
    // the second 128-column group of every row left zero
    let mut unwritten = codes.clone();
    unwritten.chunks_mut(p.n).for_each(|row| row[128..].fill(0));
    let o = judge_codes(&p, &reference, &unwritten, &scales);
    assert!(
        !o.passed && o.message.contains("relative error"),
        "{}",
        o.message
    );
    // a NaN code
    let mut nan = codes.clone();
    nan[7] = 0x7F;
    let o = judge_codes(&p, &reference, &nan, &scales);
    assert!(!o.passed && o.message.contains("NaN"), "{}", o.message);
    // a scale of another row
    let mut wrong = scales.clone();
    wrong.swap(0, 1);
    let o = judge_codes(&p, &reference, &codes, &wrong);
    assert!(!o.passed, "{}", o.message);
}
