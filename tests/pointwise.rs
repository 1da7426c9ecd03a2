//! RMSNorm's and the rotary embedding's checks on the CPU (the validation layer called on
//! descriptions, no GPU): each refusal names its argument, and the plans read rows, strides
//! and the 16-byte variant's eligibility from the views transformers hands over.

mod common;

use common::{assert_refused, view as ts};
use kiln::api::{validate, RawTensor, TensorInfo};
use kiln::{ArgumentKind, DType};

const BF: DType = DType::Bf16;
/// Distinct, 256-byte aligned fake addresses (never dereferenced).
const A: u64 = 0x1000_0000;
const B: u64 = 0x2000_0000;
const C: u64 = 0x3000_0000;
const D: u64 = 0x4000_0000;

fn t(ptr: u64, dtype: DType, shape: &[usize]) -> TensorInfo {
    RawTensor::contiguous(ptr, dtype, shape, 0)
        .info("t", false)
        .unwrap()
}

fn norm(
    x: TensorInfo,
    w: TensorInfo,
    res: Option<TensorInfo>,
    out: TensorInfo,
) -> kiln::Result<Option<validate::NormPlan>> {
    validate::rms_norm(0, &x, &w, res.as_ref(), &out, 1e-6)
}

#[test]
fn rms_norm_reads_rows_of_any_nesting_view() {
    // [B, S, H] packed: B x S rows of H, 16-byte variant
    let p = norm(
        t(A, BF, &[2, 7, 4096]),
        t(B, BF, &[4096]),
        Some(t(C, BF, &[2, 7, 4096])),
        t(D, BF, &[2, 7, 4096]),
    )
    .unwrap()
    .unwrap();
    assert_eq!((p.shape.rows, p.shape.cols, p.shape.vec8), (14, 4096, true));
    assert!(p.shape.residual);
    // Qwen3's q_norm input: [B, S, heads, head_dim], rows of 128
    let x = t(A, BF, &[2, 5, 4, 128]);
    let p = norm(x, t(B, BF, &[128]), None, t(D, BF, &[2, 5, 4, 128]))
        .unwrap()
        .unwrap();
    assert_eq!((p.shape.rows, p.ops.x.stride), (40, 128));
    // the first 128 columns of rows of 256: one row stride over both leading dims
    let x = ts(A, BF, &[2, 5, 128], &[5 * 256, 256, 1]);
    let p = norm(x, t(B, BF, &[128]), None, t(D, BF, &[2, 5, 128]))
        .unwrap()
        .unwrap();
    assert_eq!(
        (p.shape.rows, p.ops.x.stride, p.shape.vec8),
        (10, 256, true)
    );
    // rows of an odd width or an odd stride take the one-element variant
    let p = norm(
        ts(A, BF, &[3, 100], &[104, 1]),
        t(B, BF, &[100]),
        None,
        t(D, BF, &[3, 100]),
    )
    .unwrap()
    .unwrap();
    assert_eq!((p.shape.vec8, p.ops.x.stride), (false, 104));
    // no rows: nothing to do
    let empty = norm(
        t(A, BF, &[0, 64]),
        t(B, BF, &[64]),
        None,
        t(D, BF, &[0, 64]),
    );
    assert!(empty.unwrap().is_none());
}

#[test]
fn rms_norm_refuses_what_it_cannot_take() {
    let x = t(A, BF, &[4, 64]);
    let w = t(B, BF, &[64]);
    let out = t(D, BF, &[4, 64]);
    assert_refused(
        norm(t(A, DType::F32, &[4, 64]), w, None, out),
        "x",
        ArgumentKind::DType,
        "bf16 or f16",
    );
    assert_refused(
        norm(x, t(B, DType::F16, &[64]), None, out),
        "weight",
        ArgumentKind::DType,
        "one dtype",
    );
    assert_refused(
        norm(x, t(B, BF, &[65]), None, out),
        "weight",
        ArgumentKind::Shape,
        "contiguous [64]",
    );
    assert_refused(
        norm(x, w, None, t(D, BF, &[4, 32])),
        "out",
        ArgumentKind::Shape,
        "one shape",
    );
    assert_refused(
        norm(ts(A, BF, &[4, 64], &[1, 4]), w, None, out),
        "x",
        ArgumentKind::Stride,
        "contiguous columns",
    );
    // leading dims that do not nest: [2, 3, 64] with a batch stride shorter than 3 rows
    assert_refused(
        norm(
            ts(A, BF, &[2, 3, 64], &[128, 64, 1]),
            w,
            None,
            t(D, BF, &[2, 3, 64]),
        ),
        "x",
        ArgumentKind::Stride,
        "whole rows",
    );
    assert_refused(
        norm(x, w, None, t(A + 64, BF, &[4, 64])),
        "out",
        ArgumentKind::Value,
        "overlaps `x`",
    );
    assert_refused(
        norm(x, w, Some(x), out),
        "residual",
        ArgumentKind::Value,
        "overlaps `x`",
    );
    assert_refused(
        validate::rms_norm(0, &x, &w, None, &out, f32::NAN),
        "eps",
        ArgumentKind::Value,
        "finite",
    );
    assert_refused(
        validate::rms_norm(0, &x, &w, None, &out, -1.0),
        "eps",
        ArgumentKind::Value,
        "0 or more",
    );
}

/// transformers' q (or k) after its projection: [B, S, H, D] memory seen as [B, H, S, D].
fn heads(ptr: u64, b: usize, h: usize, s: usize, d: usize) -> TensorInfo {
    let (sb, sh, ss) = ((s * h * d) as isize, d as isize, (h * d) as isize);
    ts(ptr, BF, &[b, h, s, d], &[sb, sh, ss, 1])
}

fn rope(
    q: TensorInfo,
    k: TensorInfo,
    cos: TensorInfo,
    sin: TensorInfo,
) -> kiln::Result<Option<validate::RopePlan>> {
    validate::rope(0, &q, &k, &cos, &sin, false)
}

#[test]
fn rope_reads_transformers_views_and_either_table_shape() {
    let (q, k) = (heads(A, 2, 32, 9, 128), heads(B, 2, 8, 9, 128));
    let p = rope(q, k, t(C, BF, &[2, 9, 128]), t(D, BF, &[2, 9, 128]))
        .unwrap()
        .unwrap();
    let s = p.shape;
    assert_eq!((s.batch, s.seq, s.hq, s.hk, s.rot), (2, 9, 32, 8, 128));
    assert!(s.vec8 && !s.cs_f32);
    assert_eq!(
        (p.ops.q.sh, p.ops.q.ss, p.ops.cos.sb),
        (128, 32 * 128, 9 * 128)
    );
    // [S, R] tables, f32, and a batch of 1 serve every sequence (batch stride 0); partial rotary
    let p = rope(
        q,
        k,
        t(C, DType::F32, &[1, 9, 64]),
        t(D, DType::F32, &[1, 9, 64]),
    )
    .unwrap()
    .unwrap();
    assert_eq!((p.shape.rot, p.ops.cos.sb, p.shape.cs_f32), (64, 0, true));
    let p = rope(q, k, t(C, BF, &[9, 40]), t(D, BF, &[9, 40]))
        .unwrap()
        .unwrap();
    assert_eq!((p.shape.rot, p.shape.vec8), (40, false));
}

#[test]
fn rope_refuses_what_it_cannot_take() {
    let (q, k) = (heads(A, 2, 4, 9, 64), heads(B, 2, 2, 9, 64));
    let cs = t(C, BF, &[2, 9, 64]);
    let sn = t(D, BF, &[2, 9, 64]);
    assert_refused(
        rope(t(A, BF, &[2, 9, 64]), k, cs, sn),
        "q",
        ArgumentKind::Shape,
        "[batch, heads, seq, head_dim]",
    );
    assert_refused(
        rope(q, heads(B, 2, 2, 8, 64), cs, sn),
        "k",
        ArgumentKind::Shape,
        "share batch, seq and head_dim",
    );
    let k16 = ts(B, DType::F16, &[2, 2, 9, 64], &[9 * 128, 64, 128, 1]);
    assert_refused(rope(q, k16, cs, sn), "k", ArgumentKind::DType, "one dtype");
    assert_refused(
        rope(q, k, t(C, DType::F16, &[2, 9, 64]), sn),
        "cos",
        ArgumentKind::DType,
        "or f32",
    );
    assert_refused(
        rope(q, k, cs, t(D, BF, &[2, 9, 32])),
        "sin",
        ArgumentKind::Shape,
        "one shape",
    );
    assert_refused(
        rope(q, k, t(C, BF, &[3, 9, 64]), t(D, BF, &[3, 9, 64])),
        "cos",
        ArgumentKind::Shape,
        "[2 or 1, 9, rot_dim]",
    );
    assert_refused(
        rope(q, k, t(C, BF, &[9, 66]), t(D, BF, &[9, 66])),
        "cos",
        ArgumentKind::Shape,
        "even number from 2 to 64",
    );
    assert_refused(
        rope(q, k, ts(C, BF, &[9, 64], &[128, 2]), t(D, BF, &[9, 64])),
        "cos",
        ArgumentKind::Stride,
        "contiguous (stride 1)",
    );
    assert_refused(
        rope(q, heads(A + 128, 2, 2, 9, 64), cs, sn),
        "q",
        ArgumentKind::Value,
        "overlaps `k`",
    );
}
