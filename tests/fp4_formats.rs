//! NVFP4 and MXFP4 through the library's public surface: a caller's bf16 matrix quantised into
//! the standard layout, handed back as plain buffers, and refused when those are malformed.

use kiln::formats::{fp4, mxfp4, nvfp4};

fn weights(rows: usize, k: usize) -> Vec<half::bf16> {
    (0..rows * k)
        .map(|i| half::bf16::from_f32(((i * 7919 % 1013) as f32 - 506.0) / 97.0))
        .collect()
}

#[test]
fn nvfp4_buffers_have_the_standard_shapes_and_dequantise_from_plain_slices() {
    let (rows, k) = (24, 64);
    let w = weights(rows, k);
    let q = nvfp4::quantize(&w, rows, k).unwrap();
    assert_eq!(q.codes.len(), rows * k / 2);
    assert_eq!(q.scales.len(), rows * k / 16);
    let d = nvfp4::dequantize(&q.codes, &q.scales, q.tensor_scale, rows, k).unwrap();
    let f = nvfp4::dequantize_f32(&q.codes, &q.scales, q.tensor_scale, rows, k).unwrap();
    for (i, x) in w.iter().enumerate() {
        let step =
            kiln::formats::Fp8Format::E4m3.decode(q.scales[i / 16]) as f64 * q.tensor_scale as f64;
        assert!((x.to_f64() - d[i]).abs() <= step * 1.000001, "{i}");
        assert_eq!(f[i], d[i] as f32);
    }
    let e = nvfp4::dequantize(&q.codes, &q.scales[1..], q.tensor_scale, rows, k).unwrap_err();
    assert_eq!(e.exit_code(), 2, "{e}");
}

#[test]
fn mxfp4_buffers_have_the_standard_shapes_and_power_of_two_scales() {
    let (rows, k) = (5, 96);
    let w = weights(rows, k);
    let q = mxfp4::quantize(&w, rows, k).unwrap();
    assert_eq!(q.codes.len(), rows * k / 2);
    assert_eq!(q.scales.len(), rows * k / 32);
    let d = mxfp4::dequantize(&q.codes, &q.scales, rows, k).unwrap();
    for (i, v) in d.iter().enumerate() {
        let s = mxfp4::scale_value(q.scales[i / 32]) as f64;
        assert_eq!(*v, fp4::decode(fp4::code_at(&q.codes, i)) as f64 * s);
    }
    let e = mxfp4::quantize(&w[..rows * 80], rows, 80).unwrap_err();
    assert!(e.to_string().contains("multiple of 32"), "{e}");
}
