//! The GEMM commands with `--dtype e4m3|e5m2` on a machine without a GPU: bad combinations are
//! one sentence and exit 2 or 3, `plan` explains the FP8 choice, `sanitize --list` plans the FP8
//! runs, and the GPU commands say they need one.

mod common;

use std::process::{Command, Output};

use common::text;

fn kiln(args: &[&str]) -> Output {
    kiln_env(args, &[])
}

fn kiln_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    let store = std::env::temp_dir().join(format!("kiln-fp8e-test-{}.db", std::process::id()));
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KILN_STORE", store)
        .envs(env.iter().copied())
        .output()
        .expect("kiln runs")
}

#[test]
fn bad_fp8_combinations_of_the_gemm_commands_are_one_clear_error_each() {
    let e4 = ["--dtype", "e4m3", "--shape", "256x256x256"];
    let with = |cmd: &'static [&'static str], more: &'static [&'static str]| {
        let mut v: Vec<&str> = cmd.to_vec();
        v.extend_from_slice(&e4);
        v.extend_from_slice(more);
        v
    };
    for (args, code, says) in [
        (with(&["verify"], &["--layout", "CR"]), 2, "layout RC only"),
        (with(&["bench"], &["--beta", "1"]), 2, "--beta is not taken"),
        (with(&["plan"], &["--lda", "512"]), 2, "--lda is not taken"),
        (
            with(&["verify"], &["--version", "wgmma_tma_ws"]),
            2,
            "does not take FP8",
        ),
        (with(&["bench"], &["--set", "ladder"]), 2, "FP8 rung"),
        (with(&["tune"], &["--resume", "3"]), 2, "--resume"),
        (
            with(&["plan"], &["--scale", "blocks"]),
            2,
            "unknown scale mode",
        ),
        (
            vec!["plan", "--dtype", "e4m3", "--shape", "128x128x100"],
            2,
            "not a multiple of 16",
        ),
        (
            vec!["bench", "--shape", "256x256x256", "--scale", "row"],
            2,
            "--scale row is for the FP8 GEMM",
        ),
        (
            vec![
                "plan",
                "--dtype",
                "e5m2",
                "--scale",
                "row",
                "--shape",
                "256x256x256",
            ],
            3,
            "e5m2 x e5m2",
        ),
        (
            vec!["inspect", "gemm", "wgmma_tma_ws", "--dtype", "e4m3"],
            2,
            "does not take FP8",
        ),
    ] {
        let mut all = vec!["--no-store"];
        all.extend_from_slice(&args);
        let o = kiln(&all);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {t}");
        assert!(t.contains(says), "{args:?}: {t}");
        assert!(!t.contains("panicked"), "{args:?}: {t}");
    }
}

#[test]
fn plan_explains_the_fp8_config_and_split_k() {
    let args = [
        "plan",
        "--dtype",
        "e4m3",
        "--scale",
        "block",
        "--shape",
        "64x2112x7168",
        "--sms",
        "132",
    ];
    let o = kiln(&args);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    // the default rule: the 64-row tile at M <= 128, its slices as `--tile 64x128ps` runs them
    for says in [
        "version: fp8_wgmma",
        "config: 64x128ps/7",
        "rule `measured`",
        "split-K into 7",
        "atomic adds",
        "waves",
        "128p",
    ] {
        assert!(t.contains(says), "{says}: {t}");
    }
    let o = kiln_env(&args, &[("KILN_FP8_RULE", "waves")]);
    let t = text(&o);
    assert!(
        t.contains("config: 128p/7") && t.contains("rule `waves`"),
        "{t}"
    );
    let o = kiln(&[
        "--json",
        "plan",
        "--dtype",
        "e4m3",
        "--shape",
        "4096x7168x16384",
    ]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert_eq!(v["splits"], 1, "{v}");
    assert!(
        v["candidates"].as_array().is_some_and(|c| c.len() >= 2),
        "{v}"
    );
}

#[test]
fn sanitize_lists_the_fp8_runs() {
    let o = kiln(&[
        "sanitize",
        "--list",
        "--version",
        "fp8_wgmma",
        "--tool",
        "memcheck",
    ]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    assert!(
        t.contains("fp8_wgmma: 129x200x272 RC e4m3->bf16 block scales"),
        "{t}"
    );
    assert!(t.contains("e5m2"), "{t}");
    assert!(!t.contains("wgmma_tma_ws"), "{t}");
}

#[test]
fn fp8_gemm_commands_without_a_gpu_exit_4() {
    if kiln::device::init().is_ok() {
        return;
    }
    for args in [
        &["verify", "--dtype", "e4m3", "--suite", "quick"][..],
        &[
            "verify",
            "--dtype",
            "e4m3",
            "--scale",
            "tensor",
            "--shape",
            "128x256x512",
        ],
        &["bench", "--dtype", "e4m3", "--shape", "256x256x256"],
        &["tune", "--dtype", "e4m3", "--shape", "256x256x1024"],
    ] {
        let o = kiln(args);
        assert_eq!(o.status.code(), Some(4), "{args:?}: {}", text(&o));
        assert!(text(&o).contains("needs a GPU"), "{args:?}: {}", text(&o));
    }
}
