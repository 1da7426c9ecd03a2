//! `kiln attn` on any machine: bad problems are refused before any GPU is touched, with one
//! clear error naming the argument and the invalid-input exit code (2).

mod common;

use std::process::{Command, Output};

use common::text;

fn kiln(args: &[&str]) -> Output {
    let store = std::env::temp_dir().join(format!("kiln-attn-cli-test-{}.db", std::process::id()));
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KILN_STORE", store)
        .output()
        .expect("kiln runs")
}

#[test]
fn bad_attention_problems_name_the_argument_and_exit_2() {
    for (args, needle) in [
        (vec!["attn", "bench", "--dim", "96"], "head_dim = 96"),
        (
            vec!["attn", "bench", "--heads", "8", "--kv-heads", "3"],
            "kv_heads = 3",
        ),
        (vec!["attn", "verify", "--seqlen", "0"], "seqlen_q is 0"),
        (vec!["attn", "bench", "--dtype", "f32"], "f32"),
        (vec!["attn", "bench", "--layout", "SBHD"], "BSHD or BHSD"),
        (
            vec!["attn", "verify", "--suite", "quick", "--dim", "96"],
            "no problem with head dim 96",
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

#[test]
fn unknown_attention_versions_are_listed() {
    let o = kiln(&[
        "--no-store",
        "attn",
        "verify",
        "--seqlen",
        "4",
        "--version",
        "fa9",
    ]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    for v in ["composed", "fa2_mma_sync", "fa3_wgmma"] {
        assert!(t.contains(v), "{v} missing from: {t}");
    }
}

#[test]
fn attention_verify_takes_one_problem_and_refuses_shape_flags_without_its_length() {
    for flag in [
        &["--batch", "2"][..],
        &["--heads", "8"],
        &["--heads-kv", "2"],
        &["--causal"],
    ] {
        let mut all = vec!["--no-store", "attn", "verify"];
        all.extend_from_slice(flag);
        let o = kiln(&all);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{flag:?}: {t}");
        assert!(t.contains("add --seqlen"), "{flag:?}: {t}");
    }
    // --heads-kv is --kv-heads: the same check of the GQA ratio.
    let o = kiln(&[
        "--no-store",
        "attn",
        "verify",
        "--seqlen",
        "4",
        "--heads",
        "8",
        "--heads-kv",
        "3",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("kv_heads = 3"), "{}", text(&o));
}
