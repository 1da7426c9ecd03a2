use super::*;
use crate::formats::fp4_blocks::Lcg;

#[test]
fn the_ocp_recipe_gives_the_scales_of_known_blocks() {
    assert_eq!(block_scale(6.0), 127); // floor(log2 6) = 2: 2^0
    assert_eq!(block_scale(4.0), 127);
    assert_eq!(block_scale(7.9), 127); // 7.9 saturates to 6 under 2^0
    assert_eq!(block_scale(8.0), 128); // 2^1: 8 is 4 x 2
    assert_eq!(block_scale(0.75), 124); // floor(log2 0.75) = -1: 2^-3, 0.75 is 6 x 2^-3
    assert_eq!(block_scale(0.0), 0); // an all-zero block: 2^-127
    assert_eq!(block_scale(f32::MAX), 127 + 125);
    assert_eq!(block_scale(2f32.powi(-120)), 5); // 2^-122
    assert_eq!(block_scale(2f32.powi(-125)), 0); // 2^-127, the smallest
    assert_eq!(block_scale(f32::from_bits(1)), 0); // clamped from 2^-151
                                                   // just below a power of two the exponent stays below it (a float log2 rounds to 0 here)
    assert_eq!(block_scale(f32::from_bits(1f32.to_bits() - 1)), 124);
    assert_eq!(scale_value(127), 1.0);
    assert_eq!(scale_value(0), 2f32.powi(-127));
    assert_eq!(scale_value(254), 2f32.powi(127));
}

#[test]
fn floor_log2_is_exact_from_subnormals_to_the_largest_f32() {
    let mut bits = 1u32;
    while bits < f32::INFINITY.to_bits() {
        let a = f32::from_bits(bits);
        let l = floor_log2(a).unwrap();
        assert!(
            2f64.powi(l) <= a as f64 && (a as f64) < 2f64.powi(l + 1),
            "{a}: {l}"
        );
        assert_eq!(floor_log2(-a), Some(l));
        bits += bits / 64 + 1;
    }
    for l in -149..128 {
        let p = 2f64.powi(l) as f32; // exact; f32 powi underflows early
        assert_eq!(floor_log2(p), Some(l), "2^{l}");
        if l > -149 {
            assert_eq!(
                floor_log2(f32::from_bits(p.to_bits() - 1)),
                Some(l - 1),
                "2^{l}-"
            );
        }
    }
    assert_eq!(floor_log2(0.0), None);
}

#[test]
fn representable_values_round_trip_bit_exactly() {
    let mut r = Lcg(5);
    let (rows, k) = (7, 128);
    let blocks = rows * k / BLOCK;
    for trial in 0..40 {
        // exponents -127 ..= 125: each block's amax, 4 or 6 x 2^e, stays a finite f32
        let scales: Vec<u8> = (0..blocks).map(|_| r.below(253) as u8).collect();
        let mut codes: Vec<u8> = (0..rows * k).map(|_| r.below(16) as u8).collect();
        for b in 0..blocks {
            let top = [6u8, 7, 14, 15][r.below(4) as usize]; // ±4 or ±6
            codes[b * BLOCK + r.below(BLOCK as u32) as usize] = top;
        }
        let packed = fp4::pack(&codes);
        let values = dequantize(&packed, &scales, rows, k).unwrap();
        let x = dequantize_f32(&packed, &scales, rows, k).unwrap();
        assert!(
            x.iter().zip(&values).all(|(&a, &b)| a as f64 == b),
            "trial {trial}"
        );
        let q = quantize(&x, rows, k).unwrap();
        assert_eq!(q.scales, scales, "trial {trial}");
        assert_eq!(q.codes, packed, "trial {trial}");
    }
}

#[test]
fn quantisation_error_is_within_half_an_e2m1_step_and_overflow_saturates() {
    let mut r = Lcg(9);
    let (rows, k) = (21, 256);
    let x: Vec<f32> = (0..rows * k)
        .map(|_| {
            let u = r.next() as f32 / (1u32 << 31) as f32 - 1.0;
            u * 2f32.powi(r.below(60) as i32 - 30)
        })
        .collect();
    let q = quantize(&x, rows, k).unwrap();
    let d = q.dequantize().unwrap();
    let mut saturated = 0;
    for (i, (&v, &dv)) in x.iter().zip(&d).enumerate() {
        let step = scale_value(q.scales[i / BLOCK]) as f64;
        let qv = v as f64 / step;
        assert!(qv.abs() < 8.0, "{i}: amax / 2^e lies in [4, 8)");
        if qv.abs() <= 6.0 {
            let half_gap = match qv.abs() {
                a if a < 2.0 => 0.25,
                a if a < 4.0 => 0.5,
                _ => 1.0,
            };
            assert!((v as f64 - dv).abs() <= half_gap * step, "{i}: {v} -> {dv}");
        } else {
            saturated += 1;
            assert_eq!(dv, 6.0 * step * qv.signum(), "{i}: {v}");
        }
    }
    assert!(saturated > 0, "some block's amax lies in (6, 8) x 2^e");
}

#[test]
fn ties_go_to_the_even_code_inside_a_block() {
    let mut x = vec![0.0f32; 32];
    let ties = [0.25f32, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0];
    for (i, t) in ties.iter().enumerate() {
        x[i] = *t;
        x[8 + i] = -t;
    }
    x[31] = 6.0; // scale 2^0
    let q = quantize(&x, 1, 32).unwrap();
    assert_eq!(q.scales, vec![127]);
    let codes = fp4::unpack(&q.codes);
    assert_eq!(&codes[..7], &[0, 2, 2, 4, 4, 6, 6]);
    assert_eq!(&codes[8..15], &[8, 10, 10, 12, 12, 14, 14]);
}

#[test]
fn an_e2m1_value_times_any_scale_the_recipe_writes_is_exact_in_bf16() {
    for c in 0..16u8 {
        for s in 0..=252u8 {
            let p = fp4::decode(c) as f64 * scale_value(s) as f64;
            assert_eq!(
                half::bf16::from_f64(p).to_f64(),
                p,
                "{c:#x} x 2^{}",
                s as i32 - 127
            );
        }
    }
    // 2^126 and above: 4 x 2^126 is past bf16's (and f32's) largest finite value
    assert!(half::bf16::from_f64(4.0 * 2f64.powi(126)).is_infinite());
}

#[test]
fn bad_input_is_refused_with_one_sentence() {
    let x = vec![1.0f32; 48];
    let e = quantize(&x, 3, 16).unwrap_err();
    assert!(e.to_string().contains("not a multiple of 32"), "{e}");
    assert_eq!(e.exit_code(), 2);
    let mut y = vec![1.0f32; 64];
    y[40] = f32::NAN;
    assert!(quantize(&y, 2, 32)
        .unwrap_err()
        .to_string()
        .contains("(1, 8)"));
    y[40] = f32::NEG_INFINITY;
    assert!(quantize(&y, 2, 32).is_err());
    let q = quantize(&[0.5f32; 64], 2, 32).unwrap();
    assert!(dequantize(&q.codes, &q.scales[..1], 2, 32).is_err());
    assert!(dequantize(&q.codes[..31], &q.scales, 2, 32).is_err());
    assert!(
        dequantize(&q.codes, &q.scales, 1, 64).is_ok(),
        "same bytes, another shape"
    );
    let e = dequantize(&q.codes, &[127, E8M0_NAN], 2, 32).unwrap_err();
    assert!(e.to_string().contains("NaN"), "{e}");
}
