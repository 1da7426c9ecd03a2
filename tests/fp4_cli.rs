//! `kiln fp4` on a machine without a GPU: bad requests are one clear error each (exit 2) before
//! any GPU is touched, the GPU commands say they need one (exit 4), and the compile check runs.

mod common;

use std::process::{Command, Output};

use common::text;

fn kiln(args: &[&str]) -> Output {
    let store = std::env::temp_dir().join(format!("kiln-fp4-test-{}.db", std::process::id()));
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KILN_STORE", store)
        .output()
        .expect("kiln runs")
}

#[test]
fn bad_fp4_requests_are_one_clear_error_each() {
    for (args, says) in [
        (&["bench"][..], "--gemv"),
        (
            &["bench", "--gemv", "--m", "17"],
            "outside the NVFP4 GEMV's 1..=16",
        ),
        (
            &["bench", "--gemv", "--m", "0"],
            "outside the NVFP4 GEMV's 1..=16",
        ),
        (&["bench", "--gemv", "--k", "8208"], "not a multiple of 32"),
        (&["bench", "--gemv", "--out", "f32"], "bf16 or f16"),
        (&["bench", "--gemv", "--out", "fp4"], "unknown"),
        (&["bench", "--gemv", "--chain", "17"], "outside 1..=16"),
        (&["bench", "--gemv", "--chain", "0"], "outside 1..=16"),
        (&["seeds", "--problem", "conv"], "gemv, gemm, dual, group"),
        (&["verify", "--suite", "huge"], "use quick or full"),
    ] {
        let mut all = vec!["--no-store", "fp4"];
        all.extend_from_slice(args);
        let o = kiln(&all);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(says), "{args:?}: {t}");
        assert!(!t.contains("panicked"), "{args:?}: {t}");
    }
}

#[test]
fn fp4_gpu_commands_without_a_gpu_exit_4() {
    if kiln::device::init().is_ok() {
        return;
    }
    for args in [
        &["fp4", "verify", "--suite", "quick"][..],
        &["fp4", "bench", "--gemv"],
        &["fp4", "seeds", "--problem", "gemv"],
    ] {
        let o = kiln(args);
        assert_eq!(o.status.code(), Some(4), "{args:?}: {}", text(&o));
        assert!(text(&o).contains("needs a GPU"), "{args:?}: {}", text(&o));
    }
}

#[test]
fn fp4_check_compiles_every_fp4_variant() {
    let required =
        std::env::var_os("KILN_REQUIRE_NVRTC").is_some() || std::env::var_os("CI").is_some();
    if kiln::jit::nvrtc::version().is_err() {
        assert!(
            !required,
            "NVRTC is required here but missing: run scripts/setup.sh"
        );
        return;
    }
    let o = kiln(&["--no-store", "fp4", "check"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // the quantiser's and dequantiser's variants, and the GEMV's two widths, each with its
    // weights through registers, the async ring and the wide ring (KILN_FP4_GEMV=async, wide),
    // and the lean ring's one (M up to 4: KILN_FP4_GEMV=lean); and pack's two-tile ring at M
    // 2-8 (G20)
    assert!(text(&o).contains("19 variants, 0 failed"), "{}", text(&o));
}
