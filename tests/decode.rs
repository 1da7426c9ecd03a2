//! Decode over a KV cache on the CPU: the API's refusals (one per bad argument, naming it), the
//! dense cache transformers keeps read in place, and `kiln attn verify|bench --decode` refusing
//! bad problems with exit code 2 before any GPU.

mod common;

use std::process::{Command, Output};

use common::{assert_refused as refused, text};
use kiln::api::validate;
use kiln::api::{raw, RawTensor, TensorInfo};
use kiln::{ArgumentKind, DType, PagedOptions};

const BF: DType = DType::Bf16;
const I32: DType = DType::I32;
/// Distinct, 256-byte aligned fake addresses (never dereferenced).
const ADDR: [u64; 8] = [
    0x1000_0000,
    0x2000_0000,
    0x3000_0000,
    0x4000_0000,
    0x5000_0000,
    0x6000_0000,
    0x7000_0000,
    0x8000_0000,
];

fn t(i: usize, dtype: DType, shape: &[usize]) -> TensorInfo {
    RawTensor::contiguous(ADDR[i], dtype, shape, 0)
        .info("t", false)
        .unwrap()
}

/// A valid step: batch 2, 1 query token, 8 heads over 2 KV heads, d128, 10 pages of 16, 5
/// pages per sequence; `edit` replaces some of (q, k_cache, v_cache, table, lens, o, lse).
fn paged(edit: impl FnOnce(&mut [TensorInfo; 7])) -> kiln::Result<Option<validate::PagedPlan>> {
    let mut a = [
        t(0, BF, &[2, 1, 8, 128]),
        t(1, BF, &[10, 16, 2, 128]),
        t(2, BF, &[10, 16, 2, 128]),
        t(3, I32, &[2, 5]),
        t(4, I32, &[2]),
        t(5, BF, &[2, 1, 8, 128]),
        t(6, DType::F32, &[2, 8, 1]),
    ];
    edit(&mut a);
    let [q, k, v, bt, lens, o, lse] = &a;
    validate::paged(
        0,
        q,
        k,
        v,
        Some(bt),
        Some(lens),
        None,
        o,
        Some(lse),
        true,
        None,
    )
}

/// A dense cache per sequence as transformers keeps it: [2, 2, 300, 128] memory seen as
/// [2, 300, 2, 128] (k_cache, v_cache), for q [2, 1, 8, 128].
fn bhsd_cache(i: usize, seq: usize) -> TensorInfo {
    RawTensor {
        ptr: ADDR[i],
        dtype: BF,
        shape: vec![2, seq, 2, 128],
        strides: vec![(2 * seq * 128) as isize, 128, (seq * 128) as isize, 1],
        device: 0,
    }
    .info("cache", false)
    .unwrap()
}

#[test]
fn a_valid_step_plans_its_shape() {
    let p = paged(|_| {}).unwrap().unwrap();
    let s = p.shape;
    assert_eq!(
        (
            s.batch,
            s.heads_q,
            s.heads_kv,
            s.page_size,
            s.max_pages,
            s.num_pages
        ),
        (2, 8, 2, 16, 5, 10)
    );
    assert!((s.scale - 128f32.powf(-0.5)).abs() < 1e-7 && s.causal);
}

#[test]
fn each_bad_decode_argument_is_refused_by_name() {
    let page32 = t(1, BF, &[10, 32, 2, 128]);
    refused(
        paged(|a| {
            a[1] = page32;
            a[2] = t(2, BF, &[10, 32, 2, 128]);
        }),
        "k_cache",
        ArgumentKind::Shape,
        "pages of 32 tokens; kiln's decode takes 16, 64 or 256",
    );
    refused(
        paged(|a| {
            a[0] = t(0, BF, &[2, 17, 8, 128]);
            a[5] = t(5, BF, &[2, 17, 8, 128]);
            a[6] = t(6, DType::F32, &[2, 8, 17]);
        }),
        "q",
        ArgumentKind::Shape,
        "17 query tokens per sequence; kiln's decode takes 1 to 16",
    );
    refused(
        paged(|a| a[3] = t(3, DType::F32, &[2, 5])),
        "block_table",
        ArgumentKind::DType,
        "i32",
    );
    refused(
        paged(|a| a[3] = t(3, I32, &[3, 5])),
        "block_table",
        ArgumentKind::Shape,
        "batch 2",
    );
    refused(
        paged(|a| a[4] = t(4, I32, &[2, 1])),
        "cache_seqlens",
        ArgumentKind::Shape,
        "1-D",
    );
    refused(
        paged(|a| a[2] = t(2, BF, &[11, 16, 2, 128])),
        "v_cache",
        ArgumentKind::Shape,
        "one shape",
    );
    refused(
        paged(|a| {
            a[1] = t(1, BF, &[10, 16, 2, 64]);
            a[2] = t(2, BF, &[10, 16, 2, 64]);
        }),
        "k_cache",
        ArgumentKind::Shape,
        "head dim 64",
    );
    refused(
        paged(|a| a[1] = t(1, BF, &[10, 16, 128])),
        "k_cache",
        ArgumentKind::Shape,
        "num_pages, page_size",
    );
    refused(
        paged(|a| a[5] = t(5, BF, &[2, 2, 8, 128])),
        "o",
        ArgumentKind::Shape,
        "query's shape",
    );
    refused(
        paged(|a| a[6] = t(6, DType::F32, &[2, 1, 8])),
        "lse",
        ArgumentKind::Shape,
        "[2, 8, 1]",
    );
    refused(
        paged(|a| a[5] = t(0, BF, &[2, 1, 8, 128])),
        "o",
        ArgumentKind::Value,
        "overlaps `q`",
    );
    refused(
        paged(|a| {
            a[1] = t(1, BF, &[10, 16, 3, 128]);
            a[2] = t(2, BF, &[10, 16, 3, 128]);
        }),
        "k_cache",
        ArgumentKind::Shape,
        "`q` has 8 heads and `k_cache` 3",
    );
    // rows 12 elements (24 bytes) apart: the kernels copy 16 bytes at a time
    let odd = RawTensor {
        ptr: ADDR[1],
        dtype: BF,
        shape: vec![10, 16, 2, 128],
        strides: vec![16 * 2 * 256, 2 * 256, 12, 1],
        device: 0,
    }
    .info("k_cache", false)
    .unwrap();
    refused(
        paged(|a| a[1] = odd),
        "k_cache",
        ArgumentKind::Stride,
        "stride 12 in dimension 2",
    );
}

#[test]
fn a_dense_cache_is_read_where_transformers_keeps_it() {
    let (q, o, lse) = (
        t(0, BF, &[2, 1, 8, 128]),
        t(5, BF, &[2, 1, 8, 128]),
        t(6, DType::F32, &[2, 8, 1]),
    );
    let (k, v) = (bhsd_cache(1, 300), bhsd_cache(2, 300));
    let lens = t(4, I32, &[2]);
    let s = validate::paged(
        0,
        &q,
        &k,
        &v,
        None,
        Some(&lens),
        None,
        &o,
        Some(&lse),
        false,
        None,
    )
    .unwrap()
    .unwrap()
    .shape;
    assert!(!s.paged && s.lengths && !s.starts);
    assert_eq!((s.num_pages, s.page_size, s.max_pages), (2, 300, 1));
    assert_eq!(s.strides.k, [2 * 300 * 128, 128, 300 * 128]);
    assert_eq!(s.strides.q, [8 * 128, 8 * 128, 128]);
    // without lengths every sequence attends to its whole cache (any length, not a page size)
    let (k, v) = (bhsd_cache(1, 577), bhsd_cache(2, 577));
    let s = validate::paged(0, &q, &k, &v, None, None, None, &o, None, false, None)
        .unwrap()
        .unwrap()
        .shape;
    assert!(!s.lengths && s.max_context() == 577);
    // the batch must be the cache's rows
    let q3 = t(0, BF, &[3, 1, 8, 128]);
    let o3 = t(5, BF, &[3, 1, 8, 128]);
    refused(
        validate::paged(0, &q3, &k, &v, None, None, None, &o3, None, false, None),
        "k_cache",
        ArgumentKind::Shape,
        "one sequence per row of the batch",
    );
    // a paged cache needs lengths
    let (kc, vc, bt) = (
        t(1, BF, &[10, 16, 2, 128]),
        t(2, BF, &[10, 16, 2, 128]),
        t(3, I32, &[2, 5]),
    );
    refused(
        validate::paged(
            0,
            &q,
            &kc,
            &vc,
            Some(&bt),
            None,
            None,
            &o,
            None,
            false,
            None,
        ),
        "cache_seqlens",
        ArgumentKind::Value,
        "needs `cache_seqlens`",
    );
    // a q in [batch, heads, 1, D] memory (transformers' query, transposed) is read in place
    let qt = RawTensor {
        ptr: ADDR[0],
        dtype: BF,
        shape: vec![2, 1, 8, 128],
        strides: vec![8 * 128, 128, 128, 1],
        device: 0,
    }
    .info("q", false)
    .unwrap();
    validate::paged(0, &qt, &k, &v, None, None, None, &o, None, false, None)
        .unwrap()
        .unwrap();
    // left padding: each sequence's first key, i32 [batch], with the lengths
    let starts = t(7, I32, &[2]);
    let s = validate::paged(
        0,
        &q,
        &k,
        &v,
        None,
        Some(&lens),
        Some(&starts),
        &o,
        None,
        false,
        None,
    )
    .unwrap()
    .unwrap()
    .shape;
    assert!(s.starts && s.lengths);
    refused(
        validate::paged(
            0,
            &q,
            &k,
            &v,
            None,
            None,
            Some(&starts),
            &o,
            None,
            false,
            None,
        ),
        "cache_leftpad",
        ArgumentKind::Value,
        "needs `cache_seqlens`",
    );
    refused(
        validate::paged(
            0,
            &q,
            &k,
            &v,
            None,
            Some(&lens),
            Some(&t(7, I32, &[3])),
            &o,
            None,
            false,
            None,
        ),
        "cache_leftpad",
        ArgumentKind::Shape,
        "batch 2 needs [2]",
    );
    refused(
        validate::paged(
            0,
            &q,
            &k,
            &v,
            None,
            Some(&lens),
            Some(&t(7, BF, &[2])),
            &o,
            None,
            false,
            None,
        ),
        "cache_leftpad",
        ArgumentKind::DType,
        "i32 first keys",
    );
    // and the append writes into the dense cache's positions
    let new = t(6, BF, &[2, 1, 2, 128]);
    let plan = validate::append(0, &new, &t(7, BF, &[2, 1, 2, 128]), &k, &v, None, &lens)
        .unwrap()
        .unwrap();
    assert!(!plan.shape.paged && plan.block_table.is_none());
}

#[test]
fn each_bad_append_argument_is_refused_by_name() {
    let (kc, vc, bt, lens) = (
        t(1, BF, &[10, 16, 2, 128]),
        t(2, BF, &[10, 16, 2, 128]),
        t(3, I32, &[2, 5]),
        t(4, I32, &[2]),
    );
    let ok = t(5, BF, &[2, 3, 2, 128]);
    let bt = Some(&bt);
    let plan = validate::append(0, &ok, &t(6, BF, &[2, 3, 2, 128]), &kc, &vc, bt, &lens)
        .unwrap()
        .unwrap();
    assert_eq!(plan.n_new, 3);
    let bad = t(6, BF, &[2, 3, 4, 128]);
    refused(
        validate::append(0, &bad, &bad, &kc, &vc, bt, &lens),
        "k",
        ArgumentKind::Shape,
        "[batch, n_new, 2, 128]",
    );
    let f16 = t(6, DType::F16, &[2, 3, 2, 128]);
    refused(
        validate::append(0, &ok, &f16, &kc, &vc, bt, &lens),
        "v",
        ArgumentKind::DType,
        "cache's dtype",
    );
    refused(
        validate::append(0, &ok, &ok, &kc, &vc, bt, &t(4, I32, &[3])),
        "cache_seqlens",
        ArgumentKind::Shape,
        "batch 2",
    );
}

#[test]
fn raw_paged_checks_run_without_a_gpu() {
    let r = |shape: &[usize], dtype, i: usize| RawTensor::contiguous(ADDR[i], dtype, shape, 0);
    let opts = PagedOptions::default();
    // the GPU checks the tables by default: no read back, so a CUDA graph captures the step
    assert!(!opts.check_tables && !opts.causal);
    raw::check_attention_paged(
        0,
        &r(&[2, 1, 8, 128], BF, 0),
        &r(&[10, 16, 2, 128], BF, 1),
        &r(&[10, 16, 2, 128], BF, 2),
        (Some(&r(&[2, 5], I32, 3)), Some(&r(&[2], I32, 4)), None),
        &r(&[2, 1, 8, 128], BF, 5),
        None,
        &opts,
    )
    .unwrap();
    let e = raw::check_kv_append(
        0,
        &r(&[2, 1, 2, 128], BF, 0),
        &r(&[2, 1, 2, 128], BF, 5),
        &r(&[10, 16, 2, 128], BF, 1),
        &r(&[10, 16, 2, 128], BF, 2),
        Some(&r(&[2, 5], DType::F32, 3)),
        &r(&[2], I32, 4),
    )
    .unwrap_err();
    assert!(e.to_string().contains("i32 page ids"), "{e}");
}

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("--no-store")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("kiln runs")
}

#[test]
fn bad_decode_problems_on_the_command_line_exit_2_before_any_gpu() {
    for (args, needle) in [
        (
            vec![
                "attn",
                "verify",
                "--decode",
                "--page-size",
                "32",
                "--context",
                "100",
            ],
            "page size 32",
        ),
        (
            vec!["attn", "bench", "--decode", "--seqlen-q", "17"],
            "seqlen_q = 17",
        ),
        (
            vec!["attn", "bench", "--decode", "--dim", "96"],
            "head_dim = 96",
        ),
        (
            vec![
                "attn",
                "bench",
                "--decode",
                "--heads",
                "8",
                "--kv-heads",
                "3",
            ],
            "kv_heads = 3",
        ),
        (vec!["attn", "verify", "--page-size", "16"], "add --decode"),
        (vec!["attn", "bench", "--context", "64"], "add --decode"),
        (
            vec![
                "attn",
                "verify",
                "--decode",
                "--append",
                "5",
                "--context",
                "4",
            ],
            "--append 5 is more than --context 4",
        ),
        (
            vec!["attn", "bench", "--decode", "--seqlen", "4"],
            "takes --context",
        ),
        (
            vec!["attn", "verify", "--decode", "--batch", "2"],
            "needs its length",
        ),
        (
            vec!["attn", "bench", "--decode", "--context", "0"],
            "--context 0",
        ),
        (
            vec!["attn", "bench", "--decode", "--append", "1"],
            "verified, not timed",
        ),
        (
            vec!["attn", "bench", "--decode", "--dense", "--page-size", "16"],
            "leave out --page-size",
        ),
        (vec!["attn", "bench", "--dense"], "add --decode"),
    ] {
        let o = kiln(&args);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(needle), "{args:?}: expected `{needle}` in {t}");
    }
}

#[test]
fn every_decode_variant_compiles_for_sm90a_without_spills() {
    require_nvrtc!();
    for (v, n) in [("decode_paged", 6), ("decode_combine", 2), ("kv_append", 1)] {
        let o = kiln(&["check", "--arch", "sm_90a", "--version", v]);
        let t = text(&o);
        assert!(o.status.success(), "{v}: {t}");
        assert!(t.contains(&format!("{n} variants for sm_90a")), "{v}: {t}");
        assert!(t.contains("0 with problems"), "{v}: {t}");
    }
}
