//! The public API's checks on the CPU: views made with `from_raw` (no GPU, no allocation) and
//! the validation layer called directly, one test per refusal, each pinning the argument named,
//! the kind of error and the sentence.

use kiln::api::validate;
use kiln::api::{raw, RawTensor, TensorInfo};
use kiln::ops::attention::AttnLayout;
use kiln::ops::gemm::Layout;
use kiln::ops::moe::Rows;
use kiln::{
    ArgumentKind, AttentionOptions, DType, Error, GemmOptions, MoeRows, SwigluWeights, TensorMut,
    TensorRef,
};

const BF: DType = DType::Bf16;
/// Distinct, 256-byte aligned fake addresses (never dereferenced).
const A: u64 = 0x1000_0000;
const B: u64 = 0x2000_0000;
const C: u64 = 0x3000_0000;
const D: u64 = 0x4000_0000;
const E: u64 = 0x5000_0000;
const F: u64 = 0x6000_0000;

fn t(ptr: u64, dtype: DType, shape: &[usize]) -> TensorInfo {
    RawTensor::contiguous(ptr, dtype, shape, 0)
        .info("t", false)
        .unwrap()
}

fn ts(ptr: u64, dtype: DType, shape: &[usize], strides: &[isize]) -> TensorInfo {
    RawTensor {
        ptr,
        dtype,
        shape: shape.to_vec(),
        strides: strides.to_vec(),
        device: 0,
    }
    .info("t", false)
    .unwrap()
}

fn on(device: usize, info: TensorInfo) -> TensorInfo {
    let mut r = info.to_raw();
    r.device = device;
    r.info("t", false).unwrap()
}

/// The argument, kind and message of an `Error::Argument`.
fn arg_err<T: std::fmt::Debug>(r: kiln::Result<T>) -> (String, ArgumentKind, String) {
    match r {
        Err(Error::Argument { arg, kind, message }) => (arg, kind, message),
        other => panic!("expected an argument error, got {other:?}"),
    }
}

fn assert_refused<T: std::fmt::Debug>(
    r: kiln::Result<T>,
    arg: &str,
    kind: ArgumentKind,
    says: &str,
) {
    let (a, k, m) = arg_err(r);
    assert_eq!((a.as_str(), k), (arg, kind), "{m}");
    assert!(m.contains(says), "`{m}` does not say `{says}`");
}

// ---------------------------------------------------------------- views

#[test]
fn views_check_rank_and_stride_count() {
    // SAFETY (all `from_raw` calls here): the views are only checked, never launched.
    let r = unsafe { TensorRef::from_raw(A, BF, &[], &[], 0) };
    assert_refused(r, "view", ArgumentKind::Shape, "0 dimensions");
    let r = unsafe { TensorRef::from_raw(A, BF, &[1, 2, 3, 4, 5], &[120, 60, 20, 5, 1], 0) };
    assert_refused(
        r,
        "view",
        ArgumentKind::Shape,
        "5 dimensions; kiln's views have 1 to 4",
    );
    let r = unsafe { TensorRef::from_raw(A, BF, &[4, 4], &[1], 0) };
    assert_refused(r, "view", ArgumentKind::Shape, "2 dimensions but 1 strides");
}

#[test]
fn views_refuse_negative_strides() {
    let r = unsafe { TensorRef::from_raw(A, BF, &[4, 4], &[-4, 1], 0) };
    assert_refused(r, "view", ArgumentKind::Stride, "stride -4 in dimension 0");
}

#[test]
fn views_refuse_misaligned_and_null_bases() {
    let r = unsafe { TensorRef::from_raw(A + 1, BF, &[4], &[1], 0) };
    assert_refused(
        r,
        "view",
        ArgumentKind::Bounds,
        "not aligned to its 2-byte bf16",
    );
    let r = unsafe { TensorRef::from_raw(A + 2, DType::F32, &[4], &[1], 0) };
    assert_refused(r, "view", ArgumentKind::Bounds, "4-byte f32");
    let r = unsafe { TensorMut::from_raw(0, BF, &[4], &[1], 0) };
    assert_refused(r, "view", ArgumentKind::Bounds, "null pointer");
    // an empty tensor may have no memory (torch gives a null data_ptr)
    let empty = unsafe { TensorRef::from_raw(0, BF, &[0, 8], &[8, 1], 0) }.unwrap();
    assert_eq!(empty.info().span(), 0);
}

#[test]
fn views_must_lie_inside_their_memory() {
    let v = ts(A, BF, &[4, 8], &[16, 1]);
    assert_eq!(v.span(), 3 * 16 + 8);
    assert_eq!(v.span_bytes(), 112);
    assert!(v.within("view", 56).is_ok());
    assert_refused(
        v.within("view", 55),
        "view",
        ArgumentKind::Bounds,
        "reaches element 55 but its buffer holds 55 elements",
    );
    let huge = RawTensor {
        ptr: A,
        dtype: BF,
        shape: vec![usize::MAX / 2, 4],
        strides: vec![4, 1],
        device: 0,
    };
    assert_refused(
        huge.info("x", false),
        "x",
        ArgumentKind::Shape,
        "more memory",
    );
}

#[test]
fn writable_views_never_alias_themselves() {
    let r = unsafe { TensorMut::from_raw(A, BF, &[4, 8], &[0, 1], 0) };
    assert_refused(
        r,
        "view",
        ArgumentKind::Stride,
        "addresses some elements twice",
    );
    let r = unsafe { TensorMut::from_raw(A, BF, &[4, 8], &[4, 1], 0) };
    assert_refused(r, "view", ArgumentKind::Stride, "twice");
    // a padded or transposed output is fine; a broadcast input is a valid view
    assert!(unsafe { TensorMut::from_raw(A, BF, &[4, 8], &[16, 1], 0) }.is_ok());
    assert!(unsafe { TensorMut::from_raw(A, BF, &[4, 8], &[1, 4], 0) }.is_ok());
    assert!(unsafe { TensorRef::from_raw(A, BF, &[4, 8], &[0, 1], 0) }.is_ok());
}

#[test]
fn transposing_swaps_the_last_two_dimensions() {
    let v = unsafe { TensorRef::from_raw(A, BF, &[3, 5], &[5, 1], 0) }.unwrap();
    let vt = v.t();
    assert_eq!(
        (vt.shape(), vt.info().strides()),
        (&[5, 3][..], &[1, 5][..])
    );
    assert!(v.info().is_contiguous() && !vt.info().is_contiguous());
    let m = unsafe { TensorMut::from_raw(A, BF, &[2, 3, 4], &[12, 4, 1], 0) }.unwrap();
    assert_eq!(m.t().shape(), &[2, 4, 3]);
    // extent-1 dimensions take any stride
    assert!(ts(A, BF, &[1, 8], &[999, 1]).is_contiguous());
}

// ---------------------------------------------------------------- GEMM

fn gemm(a: TensorInfo, b: TensorInfo, c: TensorInfo) -> kiln::Result<Option<validate::GemmPlan>> {
    validate::gemm(0, &a, &b, &c, &GemmOptions::default())
}

#[test]
fn gemm_reads_layouts_and_leading_dimensions_from_strides() {
    let p = gemm(
        t(A, BF, &[128, 64]),
        t(B, BF, &[64, 256]),
        t(C, BF, &[128, 256]),
    )
    .unwrap()
    .unwrap()
    .problem;
    assert_eq!((p.m, p.n, p.k, p.layout), (128, 256, 64, Layout::RR));
    assert_eq!((p.lda, p.ldb, p.ldc), (64, 256, 256));
    // b given as the transpose of a [N, K] weight: K-contiguous, the "TN" GEMM
    let w = t(B, BF, &[256, 64]).transposed();
    let p = gemm(t(A, BF, &[128, 64]), w, t(C, DType::F32, &[128, 256]))
        .unwrap()
        .unwrap()
        .problem;
    assert_eq!(
        (p.layout, p.ldb, p.output),
        (Layout::RC, 64, kiln::ops::gemm::DType::F32)
    );
    // padded rows of a and c
    let p = gemm(
        ts(A, BF, &[128, 64], &[80, 1]),
        t(B, BF, &[64, 256]),
        ts(C, BF, &[128, 256], &[264, 1]),
    )
    .unwrap()
    .unwrap()
    .problem;
    assert_eq!((p.lda, p.ldc), (80, 264));
}

#[test]
fn gemm_writes_a_column_major_c_as_the_transposed_product() {
    let plan = gemm(
        t(A, BF, &[128, 64]),
        t(B, BF, &[64, 256]),
        t(C, BF, &[256, 128]).transposed(),
    )
    .unwrap()
    .unwrap();
    let p = plan.problem;
    assert!(plan.transposed);
    // cᵀ [256, 128] = bᵀ · aᵀ: bᵀ column-major (ld 256), aᵀ column-major (ld 64)
    assert_eq!((p.m, p.n, p.k, p.layout), (256, 128, 64, Layout::CC));
    assert_eq!((p.lda, p.ldb, p.ldc), (256, 64, 128));
    assert_eq!((plan.a.ptr, plan.b.ptr, plan.c.ptr), (B, A, C));
}

#[test]
fn gemm_refuses_wrong_dtypes() {
    let r = gemm(
        t(A, DType::F32, &[8, 8]),
        t(B, DType::F32, &[8, 8]),
        t(C, BF, &[8, 8]),
    );
    assert_refused(
        r,
        "a",
        ArgumentKind::DType,
        "`a` is f32; kiln's GEMM takes bf16 or f16 inputs",
    );
    let r = gemm(
        t(A, BF, &[8, 8]),
        t(B, DType::F16, &[8, 8]),
        t(C, BF, &[8, 8]),
    );
    assert_refused(r, "b", ArgumentKind::DType, "`b` is f16 but `a` is bf16");
    let r = gemm(
        t(A, BF, &[8, 8]),
        t(B, BF, &[8, 8]),
        t(C, DType::I32, &[8, 8]),
    );
    assert_refused(r, "c", ArgumentKind::DType, "writes bf16, f16 or f32");
}

#[test]
fn gemm_refuses_tensors_of_another_gpu() {
    let r = gemm(
        t(A, BF, &[8, 8]),
        on(1, t(B, BF, &[8, 8])),
        t(C, BF, &[8, 8]),
    );
    assert_refused(
        r,
        "b",
        ArgumentKind::Device,
        "`b` is on GPU 1 but the handle is on GPU 0",
    );
}

#[test]
fn gemm_refuses_mismatched_shapes() {
    let r = gemm(
        t(A, BF, &[128, 64]),
        t(B, BF, &[32, 256]),
        t(C, BF, &[128, 256]),
    );
    assert_refused(
        r,
        "b",
        ArgumentKind::Shape,
        "`a` is 128x64 but `b` is 32x256: inner dimensions differ",
    );
    let r = gemm(
        t(A, BF, &[128, 64]),
        t(B, BF, &[64, 256]),
        t(C, BF, &[128, 128]),
    );
    assert_refused(
        r,
        "c",
        ArgumentKind::Shape,
        "`c` is 128x128 but `a` @ `b` is 128x256",
    );
    let r = gemm(
        t(A, BF, &[2, 128, 64]),
        t(B, BF, &[64, 256]),
        t(C, BF, &[128, 256]),
    );
    assert_refused(r, "a", ArgumentKind::Shape, "`a` has 3 dimensions");
    let r = gemm(
        t(A, BF, &[128, 0]),
        t(B, BF, &[0, 256]),
        t(C, BF, &[128, 256]),
    );
    assert_refused(r, "a", ArgumentKind::Shape, "K is 0");
    // an empty output is nothing to do
    assert_eq!(
        gemm(t(A, BF, &[0, 64]), t(B, BF, &[64, 8]), t(C, BF, &[0, 8])).unwrap(),
        None
    );
}

#[test]
fn gemm_refuses_operands_without_a_unit_stride() {
    let r = gemm(
        ts(A, BF, &[8, 8], &[16, 2]),
        t(B, BF, &[8, 8]),
        t(C, BF, &[8, 8]),
    );
    assert_refused(r, "a", ArgumentKind::Stride, "row- or column-major");
    // a broadcast row: rows overlap, which no GEMM kernel reads
    let r = gemm(
        t(A, BF, &[8, 8]),
        ts(B, BF, &[8, 8], &[0, 1]),
        t(C, BF, &[8, 8]),
    );
    assert_refused(r, "b", ArgumentKind::Stride, "strides [0, 1]");
    let r = gemm(
        t(A, BF, &[8, 8]),
        t(B, BF, &[8, 8]),
        ts(C, BF, &[8, 8], &[32, 2]),
    );
    assert_refused(
        r,
        "c",
        ArgumentKind::Stride,
        "`c` stored row- or column-major",
    );
}

#[test]
fn gemm_refuses_bad_scalars_and_aliased_outputs() {
    let r = validate::gemm(
        0,
        &t(A, BF, &[8, 8]),
        &t(B, BF, &[8, 8]),
        &t(C, BF, &[8, 8]),
        &GemmOptions {
            alpha: f32::NAN,
            ..Default::default()
        },
    );
    assert_refused(
        r,
        "alpha",
        ArgumentKind::Value,
        "`alpha` is NaN; it must be finite",
    );
    let r = gemm(t(A, BF, &[8, 8]), t(B, BF, &[8, 8]), t(A + 64, BF, &[8, 8]));
    assert_refused(r, "c", ArgumentKind::Value, "`c` overlaps `a`");
}

#[test]
fn raw_checks_name_the_argument() {
    let a = RawTensor::contiguous(A, BF, &[16, 32], 0);
    let b = RawTensor::contiguous(0, BF, &[32, 16], 0);
    let c = RawTensor::contiguous(C, DType::F32, &[16, 16], 0);
    let r = raw::check_gemm(0, &a, &b, &c, &GemmOptions::default());
    assert_refused(r, "b", ArgumentKind::Bounds, "`b` is a null pointer");
    let b = RawTensor::contiguous(B, BF, &[32, 16], 0);
    raw::check_gemm(0, &a, &b, &c, &GemmOptions::default()).unwrap();
    let r = raw::check_gemm(2, &a, &b, &c, &GemmOptions::default());
    assert_refused(
        r,
        "a",
        ArgumentKind::Device,
        "on GPU 0 but the handle is on GPU 2",
    );
}

// ---------------------------------------------------------------- attention

fn attn(
    q: TensorInfo,
    k: TensorInfo,
    v: TensorInfo,
    o: TensorInfo,
    lse: Option<TensorInfo>,
    opts: &AttentionOptions,
) -> kiln::Result<Option<validate::AttentionPlan>> {
    validate::attention(0, &q, &k, &v, &o, lse.as_ref(), opts)
}

/// q, k, v, o packed BSHD: q [2, 100, 8, 128], k/v [2, 300, 2, 128].
fn bshd() -> [TensorInfo; 4] {
    [
        t(A, BF, &[2, 100, 8, 128]),
        t(B, BF, &[2, 300, 2, 128]),
        t(C, BF, &[2, 300, 2, 128]),
        t(D, BF, &[2, 100, 8, 128]),
    ]
}

#[test]
fn attention_takes_gqa_with_flash_attention_semantics() {
    let [q, k, v, o] = bshd();
    let lse = t(E, DType::F32, &[2, 8, 100]);
    let opts = AttentionOptions {
        causal: true,
        ..Default::default()
    };
    let plan = attn(q, k, v, o, Some(lse), &opts).unwrap().unwrap();
    let p = plan.problem;
    assert_eq!(
        (p.batch, p.heads_q, p.heads_kv, p.seqlen_q, p.seqlen_kv),
        (2, 8, 2, 100, 300)
    );
    assert_eq!(
        (p.head_dim, p.layout, p.causal),
        (128, AttnLayout::Bshd, true)
    );
    assert!((p.scale - 1.0 / 128f32.sqrt()).abs() < 1e-7);
    assert!(plan.lse.is_some());
}

#[test]
fn attention_reads_bhsd_memory_and_transposed_views_in_place() {
    let opts = AttentionOptions {
        layout: AttnLayout::Bhsd,
        softmax_scale: Some(0.5),
        ..Default::default()
    };
    // views ordered [B, H, S, D] over packed BHSD memory
    let q = t(A, BF, &[2, 8, 100, 64]);
    let kv = t(B, BF, &[2, 2, 300, 64]);
    let p = attn(
        q,
        kv,
        on(0, t(C, BF, &[2, 2, 300, 64])),
        t(D, BF, &[2, 8, 100, 64]),
        None,
        &opts,
    )
    .unwrap()
    .unwrap()
    .problem;
    assert_eq!((p.layout, p.scale, p.heads_q), (AttnLayout::Bhsd, 0.5, 8));
    // views ordered [B, H, S, D] over packed BSHD memory (torch's q.transpose(1, 2))
    let bhsd_of = |ptr, s: usize, h: usize| {
        ts(
            ptr,
            BF,
            &[2, h, s, 64],
            &[(s * h * 64) as isize, 64, (h * 64) as isize, 1],
        )
    };
    let p = attn(
        bhsd_of(A, 100, 8),
        bhsd_of(B, 300, 2),
        bhsd_of(C, 300, 2),
        bhsd_of(D, 100, 8),
        None,
        &opts,
    )
    .unwrap()
    .unwrap()
    .problem;
    assert_eq!(p.layout, AttnLayout::Bshd);
}

#[test]
fn attention_refuses_unsupported_head_dims() {
    let q = t(A, BF, &[1, 16, 4, 96]);
    let k = t(B, BF, &[1, 16, 4, 96]);
    let r = attn(
        q,
        k,
        t(C, BF, &[1, 16, 4, 96]),
        t(D, BF, &[1, 16, 4, 96]),
        None,
        &Default::default(),
    );
    assert_refused(
        r,
        "q",
        ArgumentKind::Shape,
        "`q` has head dim 96; kiln's attention takes head dims 64, 128 or 256",
    );
}

#[test]
fn attention_refuses_heads_that_do_not_group() {
    let q = t(A, BF, &[1, 16, 8, 64]);
    let k = t(B, BF, &[1, 16, 3, 64]);
    let r = attn(
        q,
        k,
        t(C, BF, &[1, 16, 3, 64]),
        t(D, BF, &[1, 16, 8, 64]),
        None,
        &Default::default(),
    );
    assert_refused(r, "k", ArgumentKind::Shape, "`q` has 8 heads and `k` 3");
}

#[test]
fn attention_refuses_mismatched_shapes() {
    let [q, k, v, o] = bshd();
    let r = attn(
        q,
        k,
        t(C, BF, &[2, 299, 2, 128]),
        o,
        None,
        &Default::default(),
    );
    assert_refused(
        r,
        "v",
        ArgumentKind::Shape,
        "`v` is [2, 299, 2, 128] but `k` is [2, 300, 2, 128]",
    );
    let r = attn(
        q,
        t(B, BF, &[2, 300, 2, 64]),
        v,
        o,
        None,
        &Default::default(),
    );
    assert_refused(
        r,
        "k",
        ArgumentKind::Shape,
        "`k` has head dim 64 but `q` has 128",
    );
    let r = attn(
        q,
        t(B, BF, &[3, 300, 2, 128]),
        t(C, BF, &[3, 300, 2, 128]),
        o,
        None,
        &Default::default(),
    );
    assert_refused(r, "k", ArgumentKind::Shape, "`k` has batch 3 but `q` has 2");
    let r = attn(
        q,
        k,
        v,
        t(D, BF, &[2, 100, 8, 64]),
        None,
        &Default::default(),
    );
    assert_refused(
        r,
        "o",
        ArgumentKind::Shape,
        "the output has the query's shape",
    );
    let r = attn(t(A, BF, &[100, 8, 128]), k, v, o, None, &Default::default());
    assert_refused(
        r,
        "q",
        ArgumentKind::Shape,
        "ordered [batch, seqlen, heads, head_dim]",
    );
    let r = attn(
        q,
        k,
        v,
        o,
        Some(t(E, DType::F32, &[2, 100, 8])),
        &Default::default(),
    );
    assert_refused(
        r,
        "lse",
        ArgumentKind::Shape,
        "[batch, heads, seqlen_q] = [2, 8, 100]",
    );
}

#[test]
fn attention_refuses_wrong_dtypes_and_devices() {
    let [q, k, v, o] = bshd();
    let f32s = |x: TensorInfo| t(x.ptr(), DType::F32, x.shape());
    let r = attn(
        f32s(q),
        f32s(k),
        f32s(v),
        f32s(o),
        None,
        &Default::default(),
    );
    assert_refused(
        r,
        "q",
        ArgumentKind::DType,
        "`q` is f32; kiln's attention takes bf16 or f16",
    );
    let r = attn(
        q,
        t(B, DType::F16, k.shape()),
        v,
        o,
        None,
        &Default::default(),
    );
    assert_refused(r, "k", ArgumentKind::DType, "`k` is f16 but `q` is bf16");
    let r = attn(
        q,
        k,
        v,
        o,
        Some(t(E, BF, &[2, 8, 100])),
        &Default::default(),
    );
    assert_refused(r, "lse", ArgumentKind::DType, "writes an f32 `lse`");
    let r = attn(q, k, on(3, v), o, None, &Default::default());
    assert_refused(r, "v", ArgumentKind::Device, "`v` is on GPU 3");
}

#[test]
fn attention_refuses_strides_it_cannot_read() {
    let [q, k, v, o] = bshd();
    // head_dim not contiguous
    let r = attn(
        q,
        ts(
            B,
            BF,
            k.shape(),
            &[2 * 300 * 2 * 128, 2 * 2 * 128, 2 * 128, 2],
        ),
        v,
        o,
        None,
        &Default::default(),
    );
    assert_refused(r, "k", ArgumentKind::Stride, "stride 2 on head_dim");
    // rows 12 elements (24 bytes) apart: TMA addresses multiples of 16 bytes
    let r = attn(
        q,
        ts(B, BF, k.shape(), &[300 * 2 * 304, 304, 12, 1]),
        v,
        o,
        None,
        &Default::default(),
    );
    assert_refused(r, "k", ArgumentKind::Stride, "stride 12 on heads");
    // a broadcast (expanded) view reads one row for many
    let r = attn(
        q,
        k,
        ts(C, BF, v.shape(), &[0, 2 * 128, 128, 1]),
        o,
        None,
        &Default::default(),
    );
    assert_refused(r, "v", ArgumentKind::Stride, "stride 0 on batch");
    // an output whose rows overlap
    let r = attn(
        q,
        k,
        v,
        ts(D, BF, o.shape(), &[100 * 8 * 128, 8, 128, 1]),
        None,
        &Default::default(),
    );
    assert_refused(r, "o", ArgumentKind::Stride, "address some elements twice");
    let r = attn(
        q,
        k,
        v,
        o,
        Some(ts(E, DType::F32, &[2, 8, 100], &[1600, 1, 8])),
        &Default::default(),
    );
    assert_refused(r, "lse", ArgumentKind::Stride, "make it contiguous");
}

#[test]
fn attention_reads_each_tensor_where_it_lies() {
    use kiln::ops::attention::Strides;
    let [q, k, v, o] = bshd();
    let st = |batch, head, seq| Strides { batch, head, seq };
    // transformers with a cache: q BSHD memory, k and v BHSD memory with room for 512 tokens
    // ([2, 2, 512, 128] seen as [2, 300, 2, 128]), o BHSD memory.
    let cache = |ptr| {
        ts(
            ptr,
            BF,
            &[2, 300, 2, 128],
            &[2 * 512 * 128, 128, 512 * 128, 1],
        )
    };
    let o_bhsd = ts(
        D,
        BF,
        &[2, 100, 8, 128],
        &[8 * 100 * 128, 128, 100 * 128, 1],
    );
    let p = attn(q, cache(B), cache(C), o_bhsd, None, &Default::default())
        .unwrap()
        .unwrap()
        .problem;
    let s = p.strides.expect("mixed orders keep each tensor's strides");
    assert_eq!(s.q, st(100 * 8 * 128, 128, 8 * 128));
    assert_eq!((s.k, s.v), (st(2 * 512 * 128, 512 * 128, 128), s.k));
    assert_eq!(s.o, st(8 * 100 * 128, 100 * 128, 128));
    // k and v sliced out of a fused KV tensor [B, S, 2, Hkv, D]
    let kv = |ptr| {
        ts(
            ptr,
            BF,
            k.shape(),
            &[300 * 2 * 2 * 128, 2 * 2 * 128, 128, 1],
        )
    };
    let p = attn(q, kv(B), kv(B + 256), o, None, &Default::default())
        .unwrap()
        .unwrap()
        .problem;
    assert_eq!(p.strides.unwrap().k, st(300 * 512, 128, 512));
    // one query token: its sequence stride is never stepped, whatever it is
    let q1 = ts(A, BF, &[2, 1, 8, 128], &[8 * 128, 3, 128, 1]);
    let o1 = t(D, BF, &[2, 1, 8, 128]);
    let p = attn(q1, cache(B), cache(C), o1, None, &Default::default())
        .unwrap()
        .unwrap()
        .problem;
    assert_eq!(p.strides.unwrap().q, st(8 * 128, 128, 8 * 128));
    // one packed order for all four keeps the packed problem
    let p = attn(q, k, v, o, None, &Default::default())
        .unwrap()
        .unwrap()
        .problem;
    assert_eq!((p.strides, p.layout), (None, AttnLayout::Bshd));
}

#[test]
fn attention_refuses_bad_scales_and_empty_keys_and_skips_empty_queries() {
    let [q, k, v, o] = bshd();
    let neg = AttentionOptions {
        softmax_scale: Some(-1.0),
        ..Default::default()
    };
    let r = attn(q, k, v, o, None, &neg);
    assert_refused(
        r,
        "softmax_scale",
        ArgumentKind::Value,
        "`softmax_scale` is -1; it must be finite and positive",
    );
    let r = attn(
        q,
        t(B, BF, &[2, 0, 2, 128]),
        t(C, BF, &[2, 0, 2, 128]),
        o,
        None,
        &Default::default(),
    );
    assert_refused(r, "k", ArgumentKind::Shape, "seqlen 0");
    let empty = |p| t(p, BF, &[2, 0, 8, 128]);
    assert_eq!(
        attn(empty(A), k, v, empty(D), None, &Default::default()).unwrap(),
        None
    );
    let r = attn(
        q,
        k,
        v,
        t(B + 64, BF, &[2, 100, 8, 128]),
        None,
        &Default::default(),
    );
    assert_refused(r, "o", ArgumentKind::Value, "`o` overlaps `k`");
}

// ---------------------------------------------------------------- MoE

/// x [12, 64], w [4, 128, 64], y [12, 128], offsets i32 [5].
fn moe_parts() -> (TensorInfo, TensorInfo, TensorInfo, TensorInfo) {
    (
        t(A, BF, &[12, 64]),
        t(B, BF, &[4, 128, 64]),
        t(C, BF, &[12, 128]),
        t(D, DType::I32, &[5]),
    )
}

fn offsets(r: TensorInfo, host: Option<&[i32]>) -> MoeRows<'_, TensorInfo> {
    MoeRows::Offsets { offsets: r, host }
}

#[test]
fn grouped_gemm_takes_the_host_offsets_or_splits_evenly() {
    let (x, w, y, r) = moe_parts();
    let host = [0, 3, 3, 10, 12];
    let p = validate::grouped_gemm(0, &x, &w, &offsets(r, Some(&host)), &y)
        .unwrap()
        .unwrap()
        .problem;
    assert_eq!((p.experts, p.n, p.k, p.swiglu), (4, 128, 64, None));
    assert_eq!(
        p.rows,
        Rows::Contiguous {
            x_rows: 12,
            offsets: host.to_vec()
        }
    );
    let p = validate::grouped_gemm(0, &x, &w, &offsets(r, None), &y)
        .unwrap()
        .unwrap()
        .problem;
    assert_eq!(
        p.rows,
        Rows::Contiguous {
            x_rows: 12,
            offsets: vec![0, 3, 6, 9, 12]
        }
    );
}

#[test]
fn offsets_that_decrease_or_overrun_are_refused() {
    let (x, w, y, r) = moe_parts();
    let check = |h: &[i32]| validate::grouped_gemm(0, &x, &w, &offsets(r, Some(h)), &y);
    assert_refused(
        check(&[0, 5, 3, 10, 12]),
        "offsets",
        ArgumentKind::Value,
        "`offsets` decreases: offsets[2] = 3 < offsets[1] = 5; sort the rows by expert",
    );
    assert_refused(
        check(&[0, 5, 6, 10, 13]),
        "offsets",
        ArgumentKind::Value,
        "`offsets[4]` = 13 overruns the 12 rows of `x`",
    );
    assert_refused(
        check(&[-1, 5, 6, 10, 12]),
        "offsets",
        ArgumentKind::Value,
        "negative",
    );
    assert_refused(
        check(&[0, 5, 6, 12]),
        "offsets",
        ArgumentKind::Value,
        "has 4 entries but the tensor has 5",
    );
}

#[test]
fn counts_outside_the_rows_per_expert_are_refused() {
    let x = t(A, BF, &[4, 8, 64]);
    let w = t(B, BF, &[4, 128, 64]);
    let y = t(C, DType::F32, &[4, 8, 128]);
    let c = t(D, DType::I32, &[4]);
    let rows = |h| MoeRows::Counts { counts: c, host: h };
    let p = validate::grouped_gemm(0, &x, &w, &rows(None), &y)
        .unwrap()
        .unwrap()
        .problem;
    assert_eq!(
        p.rows,
        Rows::Masked {
            max_rows: 8,
            counts: vec![8; 4]
        }
    );
    let r = validate::grouped_gemm(0, &x, &w, &rows(Some(&[1, 9, 0, 2])), &y);
    assert_refused(
        r,
        "counts",
        ArgumentKind::Value,
        "`counts[1]` = 9 is outside 0..=8",
    );
    let r = validate::grouped_gemm(0, &t(A, BF, &[3, 8, 64]), &w, &rows(None), &y);
    assert_refused(
        r,
        "x",
        ArgumentKind::Shape,
        "`x` has 3 experts but `w` has 4",
    );
    let r = validate::grouped_gemm(0, &t(A, BF, &[32, 64]), &w, &rows(None), &y);
    assert_refused(
        r,
        "x",
        ArgumentKind::Shape,
        "with counts kiln's MoE takes `x` as [E, max_rows, K]",
    );
}

#[test]
fn moe_refuses_mismatched_shapes() {
    let (x, w, y, r) = moe_parts();
    let g = |x: &TensorInfo, w: &TensorInfo, r: TensorInfo, y: &TensorInfo| {
        validate::grouped_gemm(0, x, w, &offsets(r, None), y)
    };
    assert_refused(
        g(&x, &w, t(D, DType::I32, &[4]), &y),
        "offsets",
        ArgumentKind::Shape,
        "`offsets` has 4 entries but `w` has 4 experts: offsets need E + 1 = 5",
    );
    assert_refused(
        g(&t(A, BF, &[12, 32]), &w, r, &y),
        "x",
        ArgumentKind::Shape,
        "`x` has K = 32 but `w` has K = 64",
    );
    assert_refused(
        g(&x, &w, r, &t(C, BF, &[11, 128])),
        "y",
        ArgumentKind::Shape,
        "`y` is [11, 128] but `x` is [12, 64]",
    );
    assert_refused(
        g(&x, &w, r, &t(C, BF, &[12, 64])),
        "y",
        ArgumentKind::Shape,
        "`y` has 64 columns but `w` gives N = 128",
    );
    assert_refused(
        g(&x, &t(B, BF, &[512, 64]), r, &y),
        "w",
        ArgumentKind::Shape,
        "as [E, N, K]",
    );
    assert_refused(
        g(
            &x,
            &t(B, BF, &[2000, 128, 64]),
            t(D, DType::I32, &[2001]),
            &y,
        ),
        "w",
        ArgumentKind::Shape,
        "at most 1024",
    );
    let odd = (t(A, BF, &[12, 60]), t(B, BF, &[4, 128, 60]));
    assert_refused(
        g(&odd.0, &odd.1, r, &y),
        "x",
        ArgumentKind::Shape,
        "K to be a multiple of 8",
    );
}

#[test]
fn moe_refuses_wrong_dtypes_devices_strides_and_alignment() {
    let (x, w, y, r) = moe_parts();
    let g = |x: &TensorInfo, w: &TensorInfo, r: TensorInfo, y: &TensorInfo| {
        validate::grouped_gemm(0, x, w, &offsets(r, None), y)
    };
    assert_refused(
        g(&t(A, DType::F32, &[12, 64]), &w, r, &y),
        "x",
        ArgumentKind::DType,
        "`x` is f32; kiln's MoE kernels take bf16 or f16 inputs",
    );
    assert_refused(
        g(&x, &t(B, DType::F16, &[4, 128, 64]), r, &y),
        "w",
        ArgumentKind::DType,
        "`w` is f16 but `x` is bf16",
    );
    assert_refused(
        g(&x, &w, t(D, DType::F32, &[5]), &y),
        "offsets",
        ArgumentKind::DType,
        "`offsets` is f32; kiln's MoE reads i32 `offsets`",
    );
    assert_refused(
        g(&x, &on(1, w), r, &y),
        "w",
        ArgumentKind::Device,
        "`w` is on GPU 1",
    );
    assert_refused(
        g(&ts(A, BF, &[12, 64], &[128, 1]), &w, r, &y),
        "x",
        ArgumentKind::Stride,
        "packed rows",
    );
    assert_refused(
        g(&t(A + 8, BF, &[12, 64]), &w, r, &y),
        "x",
        ArgumentKind::Bounds,
        "`x` starts at 0x10000008, which is not 16-byte aligned",
    );
    assert_refused(
        g(&x, &w, r, &t(A + 64, BF, &[12, 128])),
        "y",
        ArgumentKind::Value,
        "`y` overlaps `x`",
    );
    // nothing routed: nothing to launch
    assert_eq!(
        g(&t(A, BF, &[0, 64]), &w, r, &t(C, BF, &[0, 128])).unwrap(),
        None
    );
}

#[test]
fn swiglu_takes_interleaved_or_separate_weights_and_routing() {
    let (x, _, _, r) = moe_parts();
    let h = t(C, BF, &[12, 256]);
    let w13 = SwigluWeights::Interleaved(t(B, BF, &[4, 512, 64]));
    let p = validate::swiglu(0, &x, &w13, &offsets(r, None), None, &h)
        .unwrap()
        .unwrap()
        .problem;
    assert_eq!(p.n, 256);
    assert_eq!(
        p.swiglu.map(|s| (s.weights, s.routed)),
        Some((kiln::ops::moe::WeightLayout::Interleaved, false))
    );
    let sep = SwigluWeights::Separate {
        w1: t(B, BF, &[4, 256, 64]),
        w3: t(E, BF, &[4, 256, 64]),
    };
    let route = t(F, DType::F32, &[12]);
    let p = validate::swiglu(0, &x, &sep, &offsets(r, None), Some(&route), &h)
        .unwrap()
        .unwrap()
        .problem;
    assert_eq!(
        p.swiglu.map(|s| (s.weights, s.routed)),
        Some((kiln::ops::moe::WeightLayout::Separate, true))
    );
}

#[test]
fn swiglu_refuses_bad_weights_and_routing() {
    let (x, _, _, r) = moe_parts();
    let rows = offsets(r, None);
    let h = t(C, BF, &[12, 100]);
    let w13 = SwigluWeights::Interleaved(t(B, BF, &[4, 200, 64]));
    assert_refused(
        validate::swiglu(0, &x, &w13, &rows, None, &h),
        "w13",
        ArgumentKind::Shape,
        "`w13` has 200 rows per expert",
    );
    let h = t(C, BF, &[12, 256]);
    let sep = SwigluWeights::Separate {
        w1: t(B, BF, &[4, 256, 64]),
        w3: t(E, BF, &[4, 128, 64]),
    };
    assert_refused(
        validate::swiglu(0, &x, &sep, &rows, None, &h),
        "w3",
        ArgumentKind::Shape,
        "`w3` is [4, 128, 64] but `w1` is [4, 256, 64]",
    );
    let sep = SwigluWeights::Separate {
        w1: t(B, BF, &[4, 256, 64]),
        w3: t(E, DType::F16, &[4, 256, 64]),
    };
    assert_refused(
        validate::swiglu(0, &x, &sep, &rows, None, &h),
        "w3",
        ArgumentKind::DType,
        "`w3` is f16 but `x` is bf16",
    );
    let sep = SwigluWeights::Separate {
        w1: t(B, BF, &[4, 256, 64]),
        w3: t(E, BF, &[4, 256, 64]),
    };
    let r10 = t(F, DType::F32, &[10]);
    assert_refused(
        validate::swiglu(0, &x, &sep, &rows, Some(&r10), &h),
        "routing",
        ArgumentKind::Shape,
        "`routing` has 10 weights but `x` has 12 rows",
    );
    let rbf = t(F, BF, &[12]);
    assert_refused(
        validate::swiglu(0, &x, &sep, &rows, Some(&rbf), &h),
        "routing",
        ArgumentKind::DType,
        "`routing` is bf16; kiln's SwiGLU takes f32 routing weights",
    );
}

/// transformers' `gate_up_proj` [E, 2N, K] is read in place: its gate and up halves are W1 and
/// W3 with an expert stride of 2NK.
#[test]
fn swiglu_reads_gate_up_halves_in_place() {
    let (x, _, _, r) = moe_parts();
    let h = t(C, BF, &[12, 256]);
    let half = |base: u64| ts(base, BF, &[4, 256, 64], &[512 * 64, 64, 1]);
    let sep = SwigluWeights::Separate {
        w1: half(B),
        w3: half(B + 256 * 64 * 2),
    };
    let p = validate::swiglu(0, &x, &sep, &offsets(r, None), None, &h)
        .unwrap()
        .unwrap()
        .problem;
    assert_eq!(p.w_expert_stride, Some(512 * 64));
    assert_eq!(p.w_span_elems(), 3 * 512 * 64 + 256 * 64);
    // packed weights keep the packed stride
    let packed = SwigluWeights::Separate {
        w1: t(B, BF, &[4, 256, 64]),
        w3: t(E, BF, &[4, 256, 64]),
    };
    let p = validate::swiglu(0, &x, &packed, &offsets(r, None), None, &h)
        .unwrap()
        .unwrap()
        .problem;
    assert_eq!(p.w_expert_stride, None);
    // W1 and W3 must share the stride, rows must be packed, and the stride must suit TMA
    let other = SwigluWeights::Separate {
        w1: half(B),
        w3: t(E, BF, &[4, 256, 64]),
    };
    assert_refused(
        validate::swiglu(0, &x, &other, &offsets(r, None), None, &h),
        "w3",
        ArgumentKind::Stride,
        "kiln reads both with one expert stride",
    );
    let rows_apart = SwigluWeights::Separate {
        w1: ts(B, BF, &[4, 256, 64], &[512 * 64, 128, 1]),
        w3: half(E),
    };
    assert_refused(
        validate::swiglu(0, &x, &rows_apart, &offsets(r, None), None, &h),
        "w1",
        ArgumentKind::Stride,
        "reads each expert's [N, K] rows packed",
    );
    let odd = SwigluWeights::Separate {
        w1: ts(B, BF, &[4, 256, 64], &[256 * 64 + 4, 64, 1]),
        w3: ts(E, BF, &[4, 256, 64], &[256 * 64 + 4, 64, 1]),
    };
    assert_refused(
        validate::swiglu(0, &x, &odd, &offsets(r, None), None, &h),
        "w1",
        ArgumentKind::Stride,
        "not a multiple of 16 bytes",
    );
}

#[test]
fn argument_errors_print_their_sentence_and_exit_2() {
    let e = gemm(
        t(A, DType::F32, &[8, 8]),
        t(B, DType::F32, &[8, 8]),
        t(C, BF, &[8, 8]),
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        "`a` is f32; kiln's GEMM takes bf16 or f16 inputs"
    );
    assert_eq!(e.exit_code(), 2);
    assert_eq!(Error::Capture("x".into()).exit_code(), 2);
}

#[test]
fn the_handle_can_be_shared_between_threads() {
    fn shared<T: Send + Sync>() {}
    shared::<kiln::Kiln>();
}

// ---------------------------------------------------------------- threads

/// A handle moves to and is shared between threads: its workspaces, tuned table and loaded
/// kernels are its own (one handle per GPU, or several on one GPU), and calls on one handle take
/// turns on its lock. Nothing process-wide is written but caches of read-only facts (the JIT's
/// disk cache, occupancy answers), so two handles on two threads never share mutable state.
#[test]
fn handles_and_views_cross_threads() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<kiln::Kiln>();
    send_sync::<kiln::api::TunedTable>();
    send_sync::<kiln::api::Workspaces>();
    send_sync::<kiln::device::Workspaces>();
    send_sync::<Error>();
    send_sync::<RawTensor>();
    send_sync::<TensorInfo>();
}
