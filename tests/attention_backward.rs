//! The attention backward's refusals on the CPU: the library's checks (views described with
//! `from_raw`, never dereferenced), one per bad argument with the argument named, and the CLI's
//! `attn verify|bench --backward` flags refused before any GPU is touched (exit code 2).

mod common;

use std::process::{Command, Output};

use common::{assert_refused, text};
use kiln::api::raw::{self, RawBackward};
use kiln::api::{RawTensor, TensorInfo};
use kiln::{ArgumentKind, AttentionBackwardOptions, AttnLayout, DType};

const BF: DType = DType::Bf16;

/// q, k, v, o, dout, lse, dq, dk, dv: BSHD, q [2, 100, 8, 128], k/v [2, 300, 2, 128], at
/// distinct 256-byte aligned fake addresses.
fn tensors() -> [RawTensor; 9] {
    let (q, kv, lse) = (vec![2, 100, 8, 128], vec![2, 300, 2, 128], vec![2, 8, 100]);
    let shapes = [&q, &kv, &kv, &q, &q, &lse, &q, &kv, &kv];
    let mut i = 0u64;
    shapes.map(|s| {
        i += 1;
        let dtype = if s.len() == 3 { DType::F32 } else { BF };
        RawTensor::contiguous(i << 28, dtype, s, 0)
    })
}

fn check(t: &[RawTensor; 9], lse: bool, opts: &AttentionBackwardOptions) -> kiln::Result<()> {
    raw::check_attention_backward(
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
        opts,
    )
}

fn with(i: usize, dtype: DType, shape: &[usize]) -> [RawTensor; 9] {
    let mut t = tensors();
    t[i] = RawTensor::contiguous(t[i].ptr, dtype, shape, 0);
    t
}

#[test]
fn a_well_formed_gqa_backward_passes_in_either_view_order() {
    let opts = AttentionBackwardOptions {
        causal: true,
        deterministic: true,
        ..Default::default()
    };
    check(&tensors(), true, &opts).unwrap();
    // views ordered [B, H, S, D] over packed BSHD memory (torch's transpose(1, 2)) throughout
    let t = tensors().map(|r| {
        if r.shape.len() == 4 {
            let (mut shape, mut strides) = (r.shape.clone(), r.strides.clone());
            shape.swap(1, 2);
            strides.swap(1, 2);
            RawTensor {
                shape,
                strides,
                ..r
            }
        } else {
            r
        }
    });
    let bhsd = AttentionBackwardOptions {
        layout: AttnLayout::Bhsd,
        ..opts
    };
    check(&t, true, &bhsd).unwrap();
}

#[test]
fn a_missing_lse_is_refused() {
    assert_refused(
        check(&tensors(), false, &Default::default()),
        "lse",
        ArgumentKind::Value,
        "needs the forward's `lse`",
    );
}

#[test]
fn an_lse_of_the_wrong_shape_or_dtype_is_refused() {
    assert_refused(
        check(
            &with(5, DType::F32, &[2, 100, 8]),
            true,
            &Default::default(),
        ),
        "lse",
        ArgumentKind::Shape,
        "[2, 8, 100]",
    );
    assert_refused(
        check(&with(5, BF, &[2, 8, 100]), true, &Default::default()),
        "lse",
        ArgumentKind::DType,
        "f32",
    );
}

#[test]
fn gradients_and_dout_of_the_wrong_shape_are_refused() {
    for (i, name, shape) in [
        (4, "dout", vec![2, 100, 8, 64]),
        (6, "dq", vec![2, 99, 8, 128]),
        (7, "dk", vec![2, 300, 8, 128]),
        (8, "dv", vec![1, 300, 2, 128]),
    ] {
        assert_refused(
            check(&with(i, BF, &shape), true, &Default::default()),
            name,
            ArgumentKind::Shape,
            "the backward takes",
        );
    }
}

#[test]
fn gradients_of_another_dtype_are_refused() {
    assert_refused(
        check(
            &with(4, DType::F16, &[2, 100, 8, 128]),
            true,
            &Default::default(),
        ),
        "dout",
        ArgumentKind::DType,
        "`q`'s dtype",
    );
    assert_refused(
        check(
            &with(7, DType::F32, &[2, 300, 2, 128]),
            true,
            &Default::default(),
        ),
        "dk",
        ArgumentKind::DType,
        "`k`'s dtype",
    );
}

#[test]
fn gradients_stored_in_another_order_are_refused() {
    // dq stored BHSD, viewed [B, S, H, D], while q is stored BSHD.
    let mut t = tensors();
    t[6] = RawTensor {
        strides: vec![100 * 8 * 128, 128, 100 * 128, 1],
        ..t[6].clone()
    };
    assert_refused(
        check(&t, true, &Default::default()),
        "dq",
        ArgumentKind::Stride,
        "BSHD order",
    );
}

#[test]
fn forward_tensors_in_mixed_orders_are_refused_by_name() {
    // The forward reads k stored BHSD beside q stored BSHD; the backward reads one order.
    let mut t = tensors();
    let [b, s, h, d] = [2, 300, 2, 128];
    t[1] = RawTensor {
        strides: vec![(s * h * d) as isize, d as isize, (s * d) as isize, 1],
        ..t[1].clone()
    };
    assert_eq!(t[1].shape, vec![b, s, h, d]);
    assert_refused(
        check(&t, true, &Default::default()),
        "k",
        ArgumentKind::Stride,
        "`q` is stored BSHD but `k` BHSD",
    );
}

#[test]
fn gradients_that_overlap_an_input_or_each_other_are_refused() {
    let mut t = tensors();
    t[7].ptr = t[1].ptr; // dk over k
    assert_refused(
        check(&t, true, &Default::default()),
        "dk",
        ArgumentKind::Value,
        "overlaps `k`",
    );
    let mut t = tensors();
    t[8].ptr = t[7].ptr; // dv over dk
    assert_refused(
        check(&t, true, &Default::default()),
        "dv",
        ArgumentKind::Value,
        "overlaps `dk`",
    );
}

#[test]
fn forward_arguments_are_checked_as_the_forward_checks_them() {
    let mut t = tensors();
    for i in [0, 3, 4, 6] {
        t[i] = RawTensor::contiguous(t[i].ptr, BF, &[2, 100, 8, 96], 0);
    }
    assert_refused(
        check(&t, true, &Default::default()),
        "k",
        ArgumentKind::Shape,
        "head dim",
    );
    let bad_scale = AttentionBackwardOptions {
        softmax_scale: Some(f32::NAN),
        ..Default::default()
    };
    assert_refused(
        check(&tensors(), true, &bad_scale),
        "softmax_scale",
        ArgumentKind::Value,
        "finite and positive",
    );
}

#[test]
fn no_query_is_refused_and_no_batch_is_nothing_to_do() {
    let mut t = tensors();
    for i in [0, 3, 4, 6] {
        t[i] = RawTensor::contiguous(t[i].ptr, BF, &[2, 0, 8, 128], 0);
    }
    t[5] = RawTensor::contiguous(t[5].ptr, DType::F32, &[2, 8, 0], 0);
    assert_refused(
        check(&t, true, &Default::default()),
        "q",
        ArgumentKind::Shape,
        "zero them",
    );
    let empty = tensors().map(|r| {
        let mut shape = r.shape.clone();
        shape[0] = 0;
        RawTensor::contiguous(r.ptr, r.dtype, &shape, 0)
    });
    check(&empty, true, &Default::default()).unwrap();
}

#[test]
fn described_views_keep_their_layout() {
    // The views above are what `TensorInfo` makes of them: a sanity check on the helper.
    let t = tensors();
    let q: TensorInfo = t[0].info("q", false).unwrap();
    assert_eq!(q.strides(), &[100 * 8 * 128, 8 * 128, 128, 1]);
}

fn kiln(args: &[&str]) -> Output {
    let store = std::env::temp_dir().join(format!("kiln-attn-bwd-test-{}.db", std::process::id()));
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KILN_STORE", store)
        .output()
        .expect("kiln runs")
}

#[test]
fn bad_backward_flags_name_the_problem_and_exit_2() {
    for (args, needle) in [
        (vec!["attn", "verify", "--deterministic"], "--backward"),
        (
            vec!["attn", "verify", "--backward", "--deterministic"],
            "--deterministic describes one problem",
        ),
        (
            vec!["attn", "verify", "--backward", "--causal"],
            "--causal describes one problem",
        ),
        (
            vec!["attn", "bench", "--backward", "--vs-nondeterministic"],
            "--deterministic",
        ),
        (
            vec![
                "attn",
                "verify",
                "--backward",
                "--deterministic",
                "--vs-nondeterministic",
                "--seqlen",
                "8",
            ],
            "use them with `attn bench`",
        ),
        (
            vec![
                "attn",
                "verify",
                "--backward",
                "--deterministic",
                "--det-trace",
                "t",
                "--seqlen",
                "8",
            ],
            "use them with `attn bench`",
        ),
        (
            vec!["attn", "bench", "--backward", "--det-trace", "t"],
            "--deterministic",
        ),
        (
            vec!["attn", "verify", "--backward", "--dim", "96"],
            "no problem with head dim 96",
        ),
        (
            vec!["attn", "bench", "--backward", "--dim", "96"],
            "head_dim = 96",
        ),
        (
            vec![
                "attn",
                "verify",
                "--backward",
                "--seqlen",
                "8",
                "--version",
                "fa9",
            ],
            "bwd_fa2_mma_sync",
        ),
    ] {
        let mut all = vec!["--no-store"];
        all.extend(args.iter().copied());
        let o = kiln(&all);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(needle), "{args:?}: expected `{needle}` in {t}");
    }
}
