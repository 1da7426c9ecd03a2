//! `kiln fp8` on a machine without a GPU: every bad input of issue 34 is one clear error with its
//! exit code (2 bad input, 3 unsupported) before any GPU is touched, and the compile check runs.

mod common;

use std::process::{Command, Output};

use common::text;

fn kiln(args: &[&str]) -> Output {
    let store = std::env::temp_dir().join(format!("kiln-fp8-test-{}.db", std::process::id()));
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KILN_STORE", store)
        .output()
        .expect("kiln runs")
}

#[test]
fn bad_fp8_requests_are_one_clear_error_each() {
    for (args, code, says) in [
        (&["--shape", "128x128x100"][..], 2, "not a multiple of 16"),
        (
            &["--shape", "128x128x128", "--scale", "block", "--unpromoted"][..],
            3,
            "promoted accumulation",
        ),
        (
            &[
                "--shape",
                "128x128x128",
                "--dtype",
                "e5m2",
                "--scale",
                "row",
            ][..],
            3,
            "e5m2 x e5m2",
        ),
        (
            &["--shape", "128x128x128", "--scale", "blocks"][..],
            2,
            "unknown scale mode",
        ),
        (
            &["--shape", "128x128x128", "--dtype", "e3m4"][..],
            2,
            "unknown fp8 format",
        ),
        (
            &["--shape", "128x128x128", "--tile", "200"][..],
            2,
            "not compiled",
        ),
        (
            &["--shape", "128x128x128", "--tile", "128p/9"][..],
            2,
            "at most 8",
        ),
        (&["--set", "llama"][..], 2, "unknown shape set"),
        (
            &["--shape", "64x2112x7168", "--tile", "64x128ps/17"][..],
            2,
            "16 atomically",
        ),
        (
            &[
                "--shape",
                "64x2112x7168",
                "--tile",
                "bytes",
                "--tile",
                "64x96ps",
            ][..],
            2,
            "not compiled",
        ),
        (
            &["--shape", "64x2112x7168", "--tile", "64x128ps/7q"][..],
            2,
            "is not an FP8 tile config",
        ),
    ] {
        let mut all = vec!["--no-store", "fp8", "bench"];
        all.extend_from_slice(args);
        let o = kiln(&all);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {t}");
        assert!(t.contains(says), "{args:?}: {t}");
        assert!(!t.contains("panicked"), "{args:?}: {t}");
    }
}

#[test]
fn bad_grouped_fp8_requests_are_one_clear_error_each() {
    for (args, code, says) in [
        (
            &["bench", "--grouped", "--k", "100"][..],
            2,
            "K = 100 is not a multiple of 16",
        ),
        (
            &["bench", "--grouped", "--quantize"][..],
            2,
            "options of the SwiGLU",
        ),
        (
            &[
                "verify",
                "--grouped",
                "--swiglu",
                "--quantize",
                "--counts",
                "3,4",
                "--n",
                "200",
            ][..],
            2,
            "N = 200 is not a multiple of 16",
        ),
        (&["verify", "--grouped", "--counts", "3,x"][..], 2, "x"),
        (
            &[
                "verify",
                "--grouped",
                "--masked",
                "--counts",
                "3,9",
                "--max-rows",
                "4",
            ][..],
            2,
            "counts[1] = 9",
        ),
    ] {
        let mut all = vec!["--no-store", "fp8"];
        all.extend_from_slice(args);
        let o = kiln(&all);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {t}");
        assert!(t.contains(says), "{args:?}: {t}");
        assert!(!t.contains("panicked"), "{args:?}: {t}");
    }
}

#[test]
fn fp8_gpu_commands_without_a_gpu_exit_4() {
    if kiln::device::init().is_ok() {
        return;
    }
    for args in [
        &["fp8", "verify", "--suite", "quick"][..],
        &["fp8", "bench", "--shape", "256x256x256"],
        &["fp8", "verify", "--grouped", "--suite", "quick"],
        &["fp8", "bench", "--grouped", "--masked", "--rows", "256"],
    ] {
        let o = kiln(args);
        assert_eq!(o.status.code(), Some(4), "{args:?}: {}", text(&o));
        assert!(text(&o).contains("needs a GPU"), "{args:?}: {}", text(&o));
    }
}

#[test]
fn fp8_check_compiles_every_fp8_variant() {
    let required =
        std::env::var_os("KILN_REQUIRE_NVRTC").is_some() || std::env::var_os("CI").is_some();
    if kiln::jit::nvrtc::version().is_err() {
        assert!(
            !required,
            "NVRTC is required here but missing: run scripts/setup.sh"
        );
        return;
    }
    let o = kiln(&["--no-store", "fp8", "check"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(text(&o).contains("155 variants, 0 failed"), "{}", text(&o));
}

#[test]
fn versions_lists_every_kernel_family_a_user_can_pick() {
    let o = kiln(&["--no-store", "versions"]);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(0), "{t}");
    for v in [
        "wgmma_tma_ws",
        "fa3_wgmma",
        "bwd_fa2_mma_sync",
        "decode_paged",
        "fp8_wgmma",
        "fp8_grouped",
        "fp8_swiglu",
        "nvfp4_gemv",
        "fp4_experts",
    ] {
        assert!(t.contains(v), "{v} missing:\n{t}");
    }
}
