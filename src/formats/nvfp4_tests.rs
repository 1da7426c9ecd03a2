use super::*;
use crate::formats::fp4_blocks::Lcg;

/// Half the gap between e2m1 neighbours around magnitude `q`, with saturation above 6.
fn half_gap(q: f64) -> f64 {
    match q.abs() {
        a if a < 2.0 => 0.25,
        a if a < 4.0 => 0.5,
        _ => 1.0,
    }
}

#[test]
fn the_recipe_gives_the_scales_nvidia_describes_on_known_blocks() {
    assert_eq!(tensor_scale(2688.0), 1.0);
    assert_eq!(tensor_scale(5376.0), 2.0);
    assert_eq!(tensor_scale(0.0), f32::MIN_POSITIVE);
    assert_eq!(tensor_scale(1.0), 1.0 / 2688.0);
    // under a tensor scale of 1 the block scale is amax / 6 in e4m3
    assert_eq!(block_scale(6.0, 1.0), 0x38); // 1.0
    assert_eq!(block_scale(3.0, 1.0), 0x30); // 0.5
    assert_eq!(block_scale(2688.0, 1.0), 0x7E); // 448
    assert_eq!(block_scale(1e9, 1.0), 0x7E); // saturates
    assert_eq!(block_scale(0.0, 1.0), 0x00);
    assert_eq!(block_scale(7.0, 1.0), 0x39); // 7 / 6 = 1.1666.. rounds to 1.125
                                             // the tensor's largest block lands on scale 448 and its largest element on ±6
    let mut x = vec![0.0f32; 32];
    x[5] = -2688.0;
    x[20] = 6.0;
    x[21] = -3.0;
    x[22] = 1.5;
    x[23] = 7.0;
    let q = quantize(&x, 1, 32).unwrap();
    assert_eq!(q.tensor_scale, 1.0);
    assert_eq!(q.scales, vec![0x7E, 0x39]);
    assert_eq!(fp4::code_at(&q.codes, 5), 0xF);
    // 6 / 1.125 = 5.33 -> 6 (code 7: 6.75); -3 / 1.125 = -2.67 -> -3 (-3.375); 1.5 / 1.125 =
    // 1.33 -> 1.5 (1.6875); 7 / 1.125 = 6.22 saturates to 6 (6.75)
    let codes: Vec<u8> = (20..24).map(|i| fp4::code_at(&q.codes, i)).collect();
    assert_eq!(codes, vec![0x7, 0xD, 0x3, 0x7]);
    let d = q.dequantize().unwrap();
    assert_eq!(&d[20..24], &[6.75, -3.375, 1.6875, 6.75]);
    assert_eq!(d[5], -2688.0);
}

#[test]
fn representable_values_round_trip_bit_exactly() {
    let mut r = Lcg(7);
    let (rows, k) = (9, 96);
    for trial in 0..20 {
        // a power-of-two tensor scale keeps amax / 2688 and amax_block / 6 / g exact
        let g = 2f32.powi(r.below(40) as i32 - 20);
        let blocks = rows * k / BLOCK;
        let mut scales: Vec<u8> = (0..blocks)
            .map(|_| loop {
                let s = (r.below(0x7F)) as u8; // positive, not NaN
                if s != 0 {
                    break s;
                }
            })
            .collect();
        scales[r.below(blocks as u32) as usize] = 0x7E; // the tensor's amax block
        let mut codes: Vec<u8> = (0..rows * k).map(|_| r.below(16) as u8).collect();
        for b in 0..blocks {
            // each block holds a ±6, so its amax is 6 x s x g
            codes[b * BLOCK + r.below(BLOCK as u32) as usize] =
                if r.below(2) == 0 { 7 } else { 15 };
        }
        let packed = fp4::pack(&codes);
        let values = dequantize(&packed, &scales, g, rows, k).unwrap();
        let x: Vec<f32> = values.iter().map(|&v| v as f32).collect();
        assert!(x.iter().zip(&values).all(|(&a, &b)| a as f64 == b));
        let q = quantize(&x, rows, k).unwrap();
        assert_eq!(q.tensor_scale, g, "trial {trial}");
        assert_eq!(q.scales, scales, "trial {trial}");
        assert_eq!(q.codes, packed, "trial {trial}");
        // the sign of zero survives too: the dequantised values match bit for bit
        let back = q.dequantize().unwrap();
        assert!(back
            .iter()
            .zip(&values)
            .all(|(a, b)| a.to_bits() == b.to_bits()));
    }
}

#[test]
fn quantisation_error_is_within_half_an_e2m1_step_of_the_block_scale() {
    let mut r = Lcg(11);
    let (rows, k) = (33, 160);
    for spread in [0, 3, 12] {
        let x: Vec<f32> = (0..rows * k).map(|_| r.spread(spread) * 37.0).collect();
        let q = quantize(&x, rows, k).unwrap();
        let d = q.dequantize().unwrap();
        let g = q.tensor_scale as f64;
        for (i, (&v, &dv)) in x.iter().zip(&d).enumerate() {
            let s = Fp8Format::E4m3.decode(q.scales[i / BLOCK]) as f64;
            if s == 0.0 {
                // the block's scale rounded to zero: amax / 6 / g <= 2^-10, the e4m3 tie
                assert_eq!(dv, 0.0);
                assert!(
                    (v as f64).abs() <= 6.0 * 2f64.powi(-10) * g * 1.000001,
                    "{i}: {v}"
                );
                continue;
            }
            let step = s * g;
            let q = v as f64 / step;
            if q.abs() <= 6.0 {
                let bound = half_gap(q) * step * (1.0 + 1e-6);
                assert!(
                    (v as f64 - dv).abs() <= bound,
                    "{i}: {v} -> {dv}, step {step}"
                );
            } else {
                // beyond 6 steps (the e4m3 scale rounded down): saturated at ±6
                assert_eq!(dv, 6.0 * step * q.signum(), "{i}: {v}");
                if s >= 2f64.powi(-6) {
                    // a normal e4m3 scale is within 2^-4 of amax / 6 / g
                    assert!(q.abs() < 6.5, "{i}: {v} is {q} steps");
                }
            }
        }
    }
}

#[test]
fn ties_go_to_the_even_code_inside_a_block() {
    let mut x = vec![0.0f32; 16];
    let ties = [0.25f32, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0];
    x[..7].copy_from_slice(&ties);
    for (i, t) in ties.iter().enumerate() {
        x[8 + i] = -t;
    }
    x[15] = 6.0; // the block's amax: under a tensor scale of 1, a block scale of 1
    let q = quantize_with_tensor_scale(&x, 1, 16, 1.0).unwrap();
    assert_eq!(q.scales, vec![0x38]);
    let codes = fp4::unpack(&q.codes);
    assert_eq!(&codes[..7], &[0, 2, 2, 4, 4, 6, 6]);
    assert_eq!(&codes[8..15], &[8, 10, 10, 12, 12, 14, 14]);
}

#[test]
fn a_given_tensor_scale_saturates_blocks_beyond_its_range() {
    let mut x = vec![0.0f32; 16];
    x[0] = 10752.0; // 4 x 2688: scale 1792 saturates at 448, value 24 at 6
    x[1] = -300.0; // -300 / 448 = -0.67 -> -0.5
    x[2] = -100.0; // -100 / 448 = -0.22 -> -0
    let q = quantize_with_tensor_scale(&x, 1, 16, 1.0).unwrap();
    assert_eq!(q.scales, vec![0x7E]);
    let d = q.dequantize().unwrap();
    assert_eq!(&d[..3], &[2688.0, -224.0, -0.0]);
    assert_eq!(fp4::unpack(&q.codes)[..3], [0x7, 0x9, 0x8]);
}

#[test]
fn bf16_and_f16_inputs_quantise_as_their_f32_values() {
    let mut r = Lcg(3);
    let x: Vec<f32> = (0..4 * 64).map(|_| r.spread(4)).collect();
    let xb: Vec<half::bf16> = x.iter().map(|&v| half::bf16::from_f32(v)).collect();
    let xh: Vec<half::f16> = x.iter().map(|&v| half::f16::from_f32(v)).collect();
    let fb: Vec<f32> = xb.iter().map(|v| v.to_f32()).collect();
    let fh: Vec<f32> = xh.iter().map(|v| v.to_f32()).collect();
    assert_eq!(quantize(&xb, 4, 64).unwrap(), quantize(&fb, 4, 64).unwrap());
    assert_eq!(quantize(&xh, 4, 64).unwrap(), quantize(&fh, 4, 64).unwrap());
}

#[test]
fn an_e2m1_value_times_an_e4m3_scale_is_exact_in_bf16_and_f16() {
    let mut pairs = 0;
    for c in 0..16u8 {
        for s in 0..=255u8 {
            let scale = Fp8Format::E4m3.decode(s);
            if scale.is_nan() {
                continue;
            }
            pairs += 1;
            let p = fp4::decode(c) as f64 * scale as f64;
            let b = half::bf16::from_f64(p).to_f64();
            let h = half::f16::from_f64(p).to_f64();
            assert_eq!(b, p, "bf16: {} x {scale}", fp4::decode(c));
            assert_eq!(h, p, "f16: {} x {scale}", fp4::decode(c));
            // the f32 product a kernel computes is the same number
            assert_eq!((fp4::decode(c) * scale) as f64, p);
        }
    }
    assert_eq!(pairs, 16 * 254);
}

#[test]
fn the_fp32_tensor_scale_breaks_that_exactness() {
    // A typical tensor scale carries a full 24-bit significand: folding it into the weights
    // would round every nonzero product in bf16, so kernels apply it to the fp32 sum instead.
    let g = tensor_scale(1.0) as f64;
    let mut inexact = 0;
    let mut nonzero = 0;
    for c in 0..16u8 {
        for s in 0..0x7Fu8 {
            let p = fp4::decode(c) as f64 * Fp8Format::E4m3.decode(s) as f64 * g;
            if p != 0.0 {
                nonzero += 1;
                inexact += (half::bf16::from_f64(p).to_f64() != p) as usize;
            }
        }
    }
    assert!(nonzero > 0);
    assert_eq!(inexact, nonzero, "every nonzero product rounds in bf16");
}

#[test]
fn bad_input_is_refused_with_one_sentence() {
    let x = vec![1.0f32; 48];
    let e = quantize(&x, 2, 24).unwrap_err();
    assert!(e.to_string().contains("not a multiple of 16"), "{e}");
    assert_eq!(e.exit_code(), 2);
    let mut y = vec![1.0f32; 32];
    y[17] = f32::NAN;
    assert!(quantize(&y, 1, 32).unwrap_err().to_string().contains("NaN"));
    y[17] = f32::INFINITY;
    assert!(quantize(&y, 1, 32).unwrap_err().to_string().contains("inf"));
    for g in [0.0f32, -1.0, f32::NAN, f32::INFINITY, 1e-40] {
        let e = quantize_with_tensor_scale(&x, 3, 16, g).unwrap_err();
        assert!(e.to_string().contains("tensor scale"), "{g}: {e}");
        let e = dequantize(&[0; 8], &[0x38], g, 1, 16).unwrap_err();
        assert!(e.to_string().contains("tensor scale"), "{g}: {e}");
    }
    let q = quantize(&x, 3, 16).unwrap();
    assert!(dequantize(&q.codes, &q.scales[..2], 1.0, 3, 16).is_err());
    assert!(dequantize(&q.codes[1..], &q.scales, 1.0, 3, 16).is_err());
    assert!(dequantize(&q.codes, &q.scales, 1.0, 3, 8).is_err());
    for bad in [0x7Fu8, 0xFF, 0xB8, 0x80] {
        let e = dequantize(&[0; 8], &[bad], 1.0, 1, 16).unwrap_err();
        assert!(e.to_string().contains("UE4M3"), "{bad:#x}: {e}");
    }
    // an empty tensor is a valid one
    assert_eq!(quantize::<f32>(&[], 0, 16).unwrap().codes, Vec::<u8>::new());
}
