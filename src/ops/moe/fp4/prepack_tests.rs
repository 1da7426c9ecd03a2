//! The prepack on the CPU: every weight the kernel would compute from the prepacked bytes (its
//! decode emulated bit for bit) equals the format's exact dequantisation; and the refusals.

use super::layout::{
    decode_pair, half_value, multiplier_bits, multiplier_pair_bits, pair_position, place,
};
use super::*;
use crate::formats::fp4;

/// Deterministic weights spanning several binades per expert (so scales differ block to block),
/// with zero blocks and negative zeros.
fn values(experts: usize, rows: usize, k: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..experts * rows * k)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            let u = (s >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
            let (row, kk) = ((i / k) % rows, i % k);
            if (row + kk / 32) % 7 == 3 {
                return if i % 2 == 0 { 0.0 } else { -0.0 };
            }
            (u * 2f64.powi((row % 5) as i32 - 3 + (kk / 16 % 3) as i32)) as f32
        })
        .collect()
}

fn weights(f: Fp4Format, experts: usize, rows: usize, k: usize, seed: u64) -> Fp4Weights {
    Fp4Weights::quantize(f, experts, rows, k, &values(experts, rows, k, seed)).unwrap()
}

/// Every element of half `h` of the prepacked weights against `want` (expert e's [rows, K]).
fn assert_matches(p: &Fp4Prepacked, h: usize, e: usize, want: &[f64], bf16: bool) {
    for row in 0..p.n {
        for kk in 0..p.k {
            let got = p.value(e, h, row, kk, bf16);
            assert_eq!(
                got,
                want[row * p.k + kk],
                "{} e{e} h{h} ({row}, {kk}) bf16 {bf16}",
                p.format
            );
            // the kernel's one mul.bf16x2 / mul.f16x2 is exact: its result is a 16-bit value
            let op = p.operand(e, h, row, kk, bf16);
            let rounded = if bf16 {
                half::bf16::from_f64(op).to_f64()
            } else {
                half::f16::from_f64(op).to_f64()
            };
            assert_eq!(
                rounded, op,
                "{} operand ({row}, {kk}) bf16 {bf16}",
                p.format
            );
        }
    }
}

#[test]
fn the_decode_tiles_every_bit_of_a_word_once() {
    let mut seen = 0u32;
    for p in 0..4 {
        for half in 0..2 {
            let mut w = 0u32;
            place(&mut w, p, half, 0xF);
            assert_eq!(seen & w, 0, "pair {p} half {half}");
            seen |= w;
        }
    }
    assert_eq!(seen, u32::MAX);
}

#[test]
fn every_code_decodes_to_its_value_in_bf16_and_f16() {
    for p in 0..4 {
        for c in 0..16u8 {
            for half in 0..2 {
                let mut w = 0u32;
                place(&mut w, p, half, c);
                // a neighbour's code must not leak in
                place(&mut w, p, 1 - half, 0x5);
                for (bf16, unit) in [(true, 2f64.powi(-126)), (false, 2f64.powi(-14))] {
                    let bits = (decode_pair(w, p, bf16) >> (16 * half)) as u16;
                    assert_eq!(
                        half_value(bits, bf16),
                        fp4::decode(c) as f64 * unit,
                        "pair {p} code {c}"
                    );
                }
            }
        }
    }
}

#[test]
fn two_multipliers_to_a_word_are_each_the_multiplier_of_its_byte() {
    for f in Fp4Format::ALL {
        for bf16 in [true, false] {
            for lo in 0..=255u8 {
                for hi in 0..=255u8 {
                    let word = multiplier_pair_bits(f, lo, hi, bf16);
                    let want = (multiplier_bits(f, lo, bf16), multiplier_bits(f, hi, bf16));
                    assert_eq!(
                        (word as u16, (word >> 16) as u16),
                        want,
                        "{f} bf16 {bf16} bytes {lo} {hi}"
                    );
                }
            }
        }
    }
}

#[test]
fn fragments_cover_the_atom_once() {
    let mut seen = vec![false; 64 * 64];
    for t in 0..128 {
        for j in 0..4 {
            for p in 0..4 {
                let (r, k) = pair_position(t, j, p);
                for el in 0..2 {
                    assert!(!seen[r * 64 + k + el]);
                    seen[r * 64 + k + el] = true;
                }
            }
        }
    }
    assert!(seen.iter().all(|&s| s));
}

#[test]
fn prepacked_weights_dequantise_exactly_for_every_format_and_padding() {
    // N and K off the 128 / 64 grid, so padding rows and K are exercised
    for f in Fp4Format::ALL {
        for (rows, k) in [(64, 64), (72, 96), (130, 160)] {
            let w = weights(f, 3, rows, k, rows as u64 + k as u64);
            let p = prepack(&w).unwrap();
            assert_eq!(p.bytes.len(), 3 * p.expert_bytes());
            for e in 0..3 {
                let want = w.dequantize_expert(e).unwrap();
                for bf16 in [true, false] {
                    if p.check_activation(bf16).is_ok() {
                        assert_matches(&p, 0, e, &want, bf16);
                    }
                }
            }
            assert!(p.check_activation(true).is_ok());
        }
    }
}

#[test]
fn swiglu_pairs_prepack_from_separate_and_interleaved_weights() {
    for f in Fp4Format::ALL {
        let (w1, w3) = (weights(f, 2, 128, 64, 1), weights(f, 2, 128, 64, 2));
        let p = prepack_swiglu(&w1, Some(&w3)).unwrap();
        for e in 0..2 {
            assert_matches(&p, 0, e, &w1.dequantize_expert(e).unwrap(), true);
            assert_matches(&p, 1, e, &w3.dequantize_expert(e).unwrap(), true);
        }
        // W13 [E, 256, K]: rows 0..128 are W1's, 128..256 W3's
        let w13 = weights(f, 2, 256, 64, 3);
        let q = prepack_swiglu(&w13, None).unwrap();
        assert_eq!((q.n, q.swiglu), (128, true));
        for e in 0..2 {
            let all = w13.dequantize_expert(e).unwrap();
            let (gate, up) = all.split_at(128 * 64);
            assert_matches(&q, 0, e, gate, true);
            assert_matches(&q, 1, e, up, true);
        }
    }
}

#[test]
fn the_file_round_trips_and_refuses_anything_else() {
    let p = prepack(&weights(Fp4Format::Nvfp4, 2, 64, 64, 9)).unwrap();
    assert_eq!(
        Fp4Prepacked::from_file_bytes(&p.to_file_bytes()).unwrap(),
        p
    );
    let mut short = p.to_file_bytes();
    short.pop();
    assert!(Fp4Prepacked::from_file_bytes(&short)
        .unwrap_err()
        .to_string()
        .contains("truncated"));
    let raw = vec![0u8; 4096];
    assert!(Fp4Prepacked::from_file_bytes(&raw)
        .unwrap_err()
        .to_string()
        .contains("not a prepacked"));
}

#[test]
fn bad_weights_are_refused_with_a_reason() {
    let good = weights(Fp4Format::Nvfp4, 2, 64, 64, 4);
    let msg = |w: &Fp4Weights| prepack(w).unwrap_err().to_string();
    let odd_k = Fp4Weights {
        k: 40,
        ..good.clone()
    };
    assert!(msg(&odd_k).contains("K = 40"), "{}", msg(&odd_k));
    let mut short = good.clone();
    short.scales.pop();
    assert!(msg(&short).contains("scales hold"), "{}", msg(&short));
    let mut nan = good.clone();
    nan.scales[5] = 0x7F;
    assert!(msg(&nan).contains("expert 0"), "{}", msg(&nan));
    let mut zero = good.clone();
    zero.tensor_scales[1] = 0.0;
    assert!(msg(&zero).contains("expert 1"), "{}", msg(&zero));
    let mx = weights(Fp4Format::Mxfp4, 1, 64, 64, 5);
    let mut wide = mx.clone();
    wide.scales[0] = 0;
    wide.scales[1] = 200;
    assert!(msg(&wide).contains("span"), "{}", msg(&wide));
    let mut mx_nan = mx;
    mx_nan.scales[2] = 0xFF;
    assert!(msg(&mx_nan).contains("expert 0"), "{}", msg(&mx_nan));
    let w3 = weights(Fp4Format::Nvfp4, 2, 72, 64, 6);
    assert!(prepack_swiglu(&good, Some(&w3))
        .unwrap_err()
        .to_string()
        .contains("must match"));
    assert!(prepack_swiglu(&w3, None)
        .unwrap_err()
        .to_string()
        .contains("multiple of 256"));
}

#[test]
fn mxfp4_scales_too_wide_for_f16_are_refused_for_f16_only() {
    let mut w = weights(Fp4Format::Mxfp4, 1, 64, 64, 7);
    // two blocks 2^40 apart, both non-zero
    w.scales[0] = 127;
    w.scales[1] = 87;
    let p = prepack(&w).unwrap();
    assert!(p.check_activation(true).is_ok());
    assert!(p
        .check_activation(false)
        .unwrap_err()
        .to_string()
        .contains("f16"));
    assert_matches(&p, 0, 0, &w.dequantize_expert(0).unwrap(), true);
}
