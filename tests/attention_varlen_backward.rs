//! The packed attention backward's refusals on the CPU: the library's checks through the raw
//! API (views described, never dereferenced), one per bad argument with the argument named, and
//! the well-formed calls (GQA, causal with a window, no host copies, empty batches) accepted.

mod common;

use common::assert_refused;
use kiln::api::raw::{self, RawBackward};
use kiln::api::RawTensor;
use kiln::api::Window;
use kiln::{ArgumentKind, AttentionBackwardOptions, DType, VarlenOffsets};

const BF: DType = DType::Bf16;

/// Three sequences of (30, 50), (70, 40), (0, 10) rows: q, o, dout and dq [100, 8, 64], k, v,
/// dk and dv [100, 2, 64].
const CU_Q: [i32; 4] = [0, 30, 100, 100];
const CU_K: [i32; 4] = [0, 50, 90, 100];

/// q, k, v, o, dout, lse, dq, dk, dv, cu_seqlens_q, cu_seqlens_k at distinct fake addresses.
fn tensors() -> [RawTensor; 11] {
    let (q, kv, lse, cu) = (vec![100, 8, 64], vec![100, 2, 64], vec![8, 100], vec![4]);
    let shapes = [&q, &kv, &kv, &q, &q, &lse, &q, &kv, &kv, &cu, &cu];
    let mut i = 0u64;
    shapes.map(|s| {
        i += 1;
        let dtype = match s.len() {
            1 => DType::I32,
            2 => DType::F32,
            _ => BF,
        };
        RawTensor::contiguous(i << 28, dtype, s, 0)
    })
}

/// The packed backward's checks on `t`, with the offsets' host copies when `host` is given.
fn check_with(
    t: &[RawTensor; 11],
    lse: bool,
    host: Option<(&[i32], &[i32])>,
    (max_q, max_k): (usize, usize),
    opts: &AttentionBackwardOptions,
) -> kiln::Result<()> {
    let offsets = VarlenOffsets {
        cu_q: &t[9],
        cu_k: &t[10],
        max_seqlen_q: max_q,
        max_seqlen_k: max_k,
        host,
    };
    raw::check_attention_varlen_backward(
        0,
        &RawBackward {
            q: &t[0],
            k: &t[1],
            v: &t[2],
            o: &t[3],
            dout: &t[4],
            lse: lse.then_some(&t[5]),
            dq: &t[6],
            dk: &t[7],
            dv: &t[8],
        },
        &offsets,
        opts,
    )
}

fn check(t: &[RawTensor; 11]) -> kiln::Result<()> {
    check_with(t, true, Some((&CU_Q, &CU_K)), (70, 50), &Default::default())
}

fn with(i: usize, dtype: DType, shape: &[usize]) -> [RawTensor; 11] {
    let mut t = tensors();
    t[i] = RawTensor::contiguous(t[i].ptr, dtype, shape, 0);
    t
}

#[test]
fn a_well_formed_gqa_backward_passes_with_or_without_host_offsets() {
    check(&tensors()).unwrap();
    let windowed = AttentionBackwardOptions {
        causal: true,
        window: Window { left: 16, right: 0 },
        ..Default::default()
    };
    check_with(&tensors(), true, None, (70, 50), &windowed).unwrap();
    // without host copies the grid is sized by the maxima given; the GPU checks the contents
    check_with(&tensors(), true, None, (500, 500), &Default::default()).unwrap();
}

#[test]
fn a_missing_lse_is_refused() {
    assert_refused(
        check_with(&tensors(), false, None, (70, 50), &Default::default()),
        "lse",
        ArgumentKind::Value,
        "f32 [heads, total_q]",
    );
}

#[test]
fn deterministic_is_refused_by_name() {
    let det = AttentionBackwardOptions {
        deterministic: true,
        ..Default::default()
    };
    assert_refused(
        check_with(&tensors(), true, Some((&CU_Q, &CU_K)), (70, 50), &det),
        "deterministic",
        ArgumentKind::Value,
        "no deterministic mode",
    );
}

#[test]
fn offsets_that_decrease_or_end_elsewhere_are_refused() {
    let cases: [(&[i32], &[i32], &str, &str); 4] = [
        (
            &[0, 30, 20, 100],
            &CU_K,
            "cu_seqlens_q",
            "decreases at entry 2",
        ),
        (
            &CU_Q,
            &[0, 50, 90, 99],
            "cu_seqlens_k",
            "falls short of the 100 rows",
        ),
        (
            &[0, 30, 100, 120],
            &CU_K,
            "cu_seqlens_q",
            "overruns the 100 rows",
        ),
        (&[3, 30, 100, 100], &CU_K, "cu_seqlens_q", "start at 0"),
    ];
    for (cu_q, cu_k, arg, says) in cases {
        assert_refused(
            check_with(
                &tensors(),
                true,
                Some((cu_q, cu_k)),
                (200, 200),
                &Default::default(),
            ),
            arg,
            ArgumentKind::Value,
            says,
        );
    }
}

#[test]
fn maxima_below_the_longest_sequence_are_refused() {
    for (max, arg, says) in [
        (
            (69, 50),
            "max_seqlen_q",
            "`max_seqlen_q` is 69 but the longest sequence has 70",
        ),
        (
            (70, 49),
            "max_seqlen_k",
            "`max_seqlen_k` is 49 but the longest sequence has 50",
        ),
    ] {
        assert_refused(
            check_with(
                &tensors(),
                true,
                Some((&CU_Q, &CU_K)),
                max,
                &Default::default(),
            ),
            arg,
            ArgumentKind::Value,
            says,
        );
    }
    // without host copies, a maximum of 0 over packed rows
    assert_refused(
        check_with(&tensors(), true, None, (0, 50), &Default::default()),
        "max_seqlen_q",
        ArgumentKind::Value,
        "max_seqlen_q is 0",
    );
}

#[test]
fn offsets_of_another_count_or_dtype_are_refused() {
    assert_refused(
        check_with(
            &with(10, DType::I32, &[5]),
            true,
            None,
            (70, 50),
            &Default::default(),
        ),
        "cu_seqlens_k",
        ArgumentKind::Shape,
        "`cu_seqlens_q` has 4 entries and `cu_seqlens_k` 5",
    );
    assert_refused(
        check(&with(9, DType::I64, &[4])),
        "cu_seqlens_q",
        ArgumentKind::DType,
        "i32 [batch + 1]",
    );
}

#[test]
fn dtypes_are_checked_for_inputs_and_gradients() {
    assert_refused(
        check(&with(4, DType::F16, &[100, 8, 64])),
        "dout",
        ArgumentKind::DType,
        "`q`'s dtype",
    );
    assert_refused(
        check(&with(7, DType::F32, &[100, 2, 64])),
        "dk",
        ArgumentKind::DType,
        "`k`'s dtype",
    );
    assert_refused(
        check(&with(5, BF, &[8, 100])),
        "lse",
        ArgumentKind::DType,
        "f32",
    );
    let mut t = tensors();
    for i in [1, 2, 7, 8] {
        t[i] = RawTensor::contiguous(t[i].ptr, DType::F16, &[100, 2, 64], 0);
    }
    assert_refused(check(&t), "k", ArgumentKind::DType, "one dtype");
}

#[test]
fn a_gqa_ratio_that_does_not_divide_is_refused() {
    let mut t = tensors();
    for i in [1, 2, 7, 8] {
        t[i] = RawTensor::contiguous(t[i].ptr, BF, &[100, 3, 64], 0);
    }
    assert_refused(
        check(&t),
        "k",
        ArgumentKind::Shape,
        "a multiple of the key/value heads",
    );
}

#[test]
fn shapes_of_gradients_lse_and_inputs_are_checked() {
    for (i, name, shape) in [
        (4, "dout", vec![100, 8, 128]),
        (6, "dq", vec![99, 8, 64]),
        (7, "dk", vec![100, 8, 64]),
        (8, "dv", vec![1, 100, 2, 64]),
    ] {
        assert_refused(
            check(&with(i, BF, &shape)),
            name,
            ArgumentKind::Shape,
            "the backward takes",
        );
    }
    assert_refused(
        check(&with(5, DType::F32, &[100, 8])),
        "lse",
        ArgumentKind::Shape,
        "[heads, total_q] = [8, 100]",
    );
    let mut t = tensors();
    for i in [0, 3, 4, 6] {
        t[i] = RawTensor::contiguous(t[i].ptr, BF, &[1, 100, 8, 64], 0);
    }
    assert_refused(check(&t), "q", ArgumentKind::Shape, "3-D");
    let mut t = tensors();
    for i in [0, 3, 4, 6] {
        t[i] = RawTensor::contiguous(t[i].ptr, BF, &[100, 8, 96], 0);
    }
    assert_refused(check(&t), "k", ArgumentKind::Shape, "head dim");
    // d256: the packed forward's, not yet the packed backward's
    let mut t = tensors();
    for i in [0, 3, 4, 6] {
        t[i] = RawTensor::contiguous(t[i].ptr, BF, &[100, 8, 256], 0);
    }
    for i in [1, 2, 7, 8] {
        t[i] = RawTensor::contiguous(t[i].ptr, BF, &[100, 2, 256], 0);
    }
    assert_refused(
        check(&t),
        "q",
        ArgumentKind::Shape,
        "`q` has head dim 256; kiln's packed backward takes head dims [64, 128]",
    );
}

#[test]
fn gradients_not_packed_or_overlapping_are_refused() {
    // dq every other row of a larger buffer
    let mut t = tensors();
    t[6] = RawTensor {
        strides: vec![2 * 8 * 64, 64, 1],
        ..t[6].clone()
    };
    assert_refused(check(&t), "dq", ArgumentKind::Stride, "packed rows");
    let mut t = tensors();
    t[8].ptr = t[2].ptr; // dv over v
    assert_refused(check(&t), "dv", ArgumentKind::Value, "overlaps `v`");
    let mut t = tensors();
    t[7].ptr = t[6].ptr; // dk over dq
    assert_refused(check(&t), "dk", ArgumentKind::Value, "overlaps `dq`");
}

#[test]
fn a_bad_scale_or_window_is_refused() {
    let bad_scale = AttentionBackwardOptions {
        softmax_scale: Some(-1.0),
        ..Default::default()
    };
    assert_refused(
        check_with(&tensors(), true, Some((&CU_Q, &CU_K)), (70, 50), &bad_scale),
        "softmax_scale",
        ArgumentKind::Value,
        "finite and positive",
    );
    let wide = AttentionBackwardOptions {
        window: Window { left: 60, right: 0 },
        ..Default::default()
    };
    assert_refused(
        check_with(&tensors(), true, Some((&CU_Q, &CU_K)), (70, 50), &wide),
        "window_size",
        ArgumentKind::Value,
        "window left = 60",
    );
}

#[test]
fn empty_batches_are_nothing_to_do_or_zero_fills() {
    // no rows at all: nothing to launch
    let mut t = tensors();
    for i in [0, 3, 4, 6] {
        t[i] = RawTensor::contiguous(t[i].ptr, BF, &[0, 8, 64], 0);
    }
    for i in [1, 2, 7, 8] {
        t[i] = RawTensor::contiguous(t[i].ptr, BF, &[0, 2, 64], 0);
    }
    t[5] = RawTensor::contiguous(t[5].ptr, DType::F32, &[8, 0], 0);
    let zeros: &[i32] = &[0, 0, 0, 0];
    check_with(&t, true, Some((zeros, zeros)), (0, 0), &Default::default()).unwrap();
    // keys but no queries: accepted (dK and dV are written as zeros)
    let mut t = tensors();
    for i in [0, 3, 4, 6] {
        t[i] = RawTensor::contiguous(t[i].ptr, BF, &[0, 8, 64], 0);
    }
    t[5] = RawTensor::contiguous(t[5].ptr, DType::F32, &[8, 0], 0);
    check_with(&t, true, Some((zeros, &CU_K)), (0, 50), &Default::default()).unwrap();
}
