//! The lab's tools over the attention backward on a machine without a GPU: `kiln plan --op
//! attn-backward` says what the dispatch would run and why, and `kiln sanitize --list` plans the
//! backward's sanitizer runs; bad flags are one sentence and exit 2.

mod common;

use std::process::{Command, Output};

use common::text;

fn kiln(args: &[&str]) -> Output {
    let store = std::env::temp_dir().join(format!("kiln-bwdtools-test-{}.db", std::process::id()));
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KILN_STORE", store)
        .env_remove("KILN_BWD_TAIL")
        .output()
        .expect("kiln runs")
}

const S16: [&str; 8] = [
    "--batch", "1", "--heads", "16", "--seqlen", "16384", "--dim", "256",
];

#[test]
fn plan_names_the_deterministic_d256_default_and_its_split() {
    let mut args = vec![
        "plan",
        "--op",
        "attn-backward",
        "--deterministic",
        "--sms",
        "132",
    ];
    args.extend(S16);
    let o = kiln(&args);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(t.contains("version: bwd_fa3_d256_w2_cols2t"), "{t}");
    assert!(t.contains("31 whole waves and a last wave of 4"), "{t}");
    assert!(t.contains("4 key blocks in 16 parts each"), "{t}");
    assert!(
        t.contains("bwd_fa3_d256_persist") && t.contains("refuses"),
        "{t}"
    );
    // on 114 SMs the last wave is 106 blocks: no 2 parts fit beside it
    let mut args = vec![
        "plan",
        "--op",
        "attn-backward",
        "--deterministic",
        "--sms",
        "114",
    ];
    args.extend(S16);
    let t = text(&kiln(&args));
    assert!(t.contains("on 114 SMs") || t.contains("(114 SMs)"), "{t}");
    assert!(t.contains("no split"), "{t}");
    // the JSON carries the same
    let mut args = vec!["--json", "plan", "--op", "attn-backward", "--sms", "132"];
    args.extend(S16);
    let o = kiln(&args);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["version"], "bwd_fa3_d256_persist", "{v}");
    assert!(
        v["candidates"].as_array().is_some_and(|c| c.len() > 10),
        "{v}"
    );
}

#[test]
fn plan_refuses_a_half_given_problem_in_one_sentence() {
    let o = kiln(&[
        "plan",
        "--op",
        "attn-backward",
        "--batch",
        "1",
        "--heads",
        "2",
        "--dim",
        "128",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("needs --seqlen"), "{}", text(&o));
    // attention flags without the op
    let o = kiln(&[
        "plan", "--batch", "1", "--heads", "2", "--seqlen", "64", "--dim", "128",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("add --op attn-backward"), "{}", text(&o));
    // a version that cannot take it, refused as the dispatch refuses
    let mut args = vec![
        "plan",
        "--op",
        "attn-backward",
        "--version",
        "bwd_fa3_ordered_w2",
    ];
    args.extend(S16);
    let o = kiln(&args);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("256"), "{}", text(&o));
}

#[test]
fn sanitize_lists_the_backward_runs_at_the_dims_a_version_takes() {
    let o = kiln(&[
        "sanitize",
        "--list",
        "--version",
        "bwd_fa3_d256_w2_cols2t",
        "--version",
        "bwd_fa3_d256_persist",
        "--tool",
        "memcheck",
    ]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(
        t.contains("bwd_fa3_d256_w2_cols2t: d256 GQA 2/1 Sq 65 Skv 200, deterministic"),
        "{t}"
    );
    assert!(
        t.contains("bwd_fa3_d256_w2_cols2t: d256 causal S130, deterministic"),
        "{t}"
    );
    // the persistent kernel runs the non-deterministic mode only
    assert_eq!(t.matches("bwd_fa3_d256_persist:").count(), 1, "{t}");
    assert!(t.contains("4 runs (1 tools)"), "{t}");
    assert!(!t.contains("wgmma_tma_ws"), "{t}");
}
