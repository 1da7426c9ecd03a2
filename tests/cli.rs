//! Behaviour of the `kiln` command line on a machine without a GPU: the suite (its compile of
//! what it runs and the CPU references), and one clear error (with its exit code) for bad input.
//! The compile of every variant is `tests/compile.rs`.

mod common;

use std::path::PathBuf;
use std::process::{Command, Output};

use common::text;

fn kiln(args: &[&str]) -> Output {
    let store = std::env::temp_dir().join(format!("kiln-cli-test-{}.db", std::process::id()));
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KILN_STORE", store)
        .output()
        .expect("kiln runs")
}

#[test]
fn check_json_lists_resources_per_variant() {
    require_nvrtc!();
    let o = kiln(&["--no-store", "--json", "check", "--version", "simt_naive"]);
    assert!(o.status.success(), "{}", text(&o));
    let rows: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    let rows = rows.as_array().unwrap();
    // 4 layouts x 6 dtype pairs
    assert_eq!(rows.len(), 24);
    assert!(rows
        .iter()
        .all(|r| r["resources"]["registers"].as_u64().unwrap() > 0));
    assert!(rows
        .iter()
        .all(|r| r["cubin_sha256"].as_str().unwrap().len() == 64));
}

#[test]
fn suite_without_gpu_compiles_what_it_runs_and_says_the_gpu_part_was_skipped() {
    require_no_gpu!();
    require_nvrtc!();
    let o = kiln(&["suite"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.lines().count() <= 60,
        "{} lines, over 60:\n{t}",
        t.lines().count()
    );
    assert!(
        t.contains("no GPU: the dispatch is resolved for an H100 (132 SMs)"),
        "{t}"
    );
    assert!(t.contains("on the quick suite's problems"), "{t}");
    // a line per version that compiles (the vendor has no variants) and the bench's own kernel
    for v in [
        "simt_naive",
        "simt_tiled",
        "mma_sync",
        "wgmma_cp_async",
        "wgmma_tma",
        "wgmma_tma_ws",
        "l2_read_flush",
        "counter_fill",
    ] {
        let lines = t.lines().filter(|l| l.contains(&format!("| {v} "))).count();
        assert_eq!(lines, 1, "{v}: {lines} lines\n{t}");
    }
    assert!(t.contains("0 with problems"), "{t}");
    assert!(t.contains("float64 GEMM reference"), "{t}");
    assert!(t.contains("GPU part skipped"), "{t}");

    // --json: every compiled variant as a row; --verbose: every row in the text too (stderr)
    let o = kiln(&["--no-store", "--json", "suite", "--verbose"]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    let rows = v["check"].as_array().unwrap();
    let per_version = v["check_by_version"].as_array().unwrap();
    let total: u64 = per_version
        .iter()
        .map(|r| r["variants"].as_u64().unwrap())
        .sum();
    assert_eq!(rows.len() as u64, total);
    assert!(rows.len() > 60, "{} rows", rows.len());
    let stderr = String::from_utf8_lossy(&o.stderr);
    for r in rows {
        let variant = r["variant"].as_str().unwrap();
        assert!(stderr.contains(variant), "{variant} not listed:\n{stderr}");
    }
    assert_eq!(v["gpu"], serde_json::Value::Null);
}

#[test]
fn gpu_commands_without_a_gpu_exit_4_with_one_sentence() {
    require_no_gpu!();
    for args in [
        &["devices"][..],
        &["bench", "--shape", "64"],
        &["verify", "--shape", "64"],
        &["peak"],
    ] {
        let o = kiln(args);
        assert_eq!(o.status.code(), Some(4), "{args:?}: {}", text(&o));
        assert!(text(&o).contains("needs a GPU"), "{args:?}: {}", text(&o));
    }
}

#[test]
fn bad_shapes_are_one_clear_error() {
    for (shape, says) in [
        ("0x4x4", "at least 1"),
        ("-5x4x4", "at least 1"),
        ("4x4", "MxNxK"),
        ("ax4x4", "not a number"),
    ] {
        let arg = format!("--shape={shape}");
        let o = kiln(&["bench", &arg]);
        assert_eq!(o.status.code(), Some(2), "{shape}: {}", text(&o));
        let t = text(&o);
        assert!(t.contains(says), "{shape}: {t}");
        assert!(!t.contains("panicked"), "{t}");
    }
}

#[test]
fn strides_that_do_not_fit_are_rejected() {
    let o = kiln(&[
        "bench", "--shape", "64x64x64", "--layout", "RC", "--lda", "32",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("lda = 32"), "{}", text(&o));
}

#[test]
fn passes_must_be_from_1_to_100() {
    for bad in ["0", "101", "two"] {
        let o = kiln(&["bench", "--set", "targets", "--passes", bad]);
        assert_eq!(o.status.code(), Some(2), "{bad}: {}", text(&o));
        assert!(text(&o).contains("--passes"), "{bad}: {}", text(&o));
    }
}

#[test]
fn negative_alpha_and_beta_parse() {
    // Validation runs before any GPU is touched: a bad ldc still gets its own message, so the
    // negative scales themselves parsed.
    let o = kiln(&[
        "verify", "--shape", "64x64x64", "--alpha", "-1", "--beta", "-0.5", "--ldc", "32",
    ]);
    assert!(!text(&o).contains("unexpected argument"), "{}", text(&o));
    assert!(text(&o).contains("ldc = 32"), "{}", text(&o));
}

#[test]
fn unknown_op_version_layout_dtype_are_rejected() {
    let cases: [(&[&str], &str); 5] = [
        (
            &["bench", "--op", "conv", "--shape", "8"],
            "unknown op `conv`",
        ),
        (
            &["check", "--version", "nope"],
            "unknown gemm version `nope`",
        ),
        (
            &["bench", "--shape", "8", "--layout", "XY"],
            "unknown layout",
        ),
        (
            &["bench", "--shape", "8", "--dtype", "int8"],
            "unknown dtype",
        ),
        (
            &["bench", "--shape", "8", "--dtype", "f32"],
            "f32 inputs are not supported",
        ),
    ];
    for (args, says) in cases {
        let o = kiln(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(says), "{args:?}: {}", text(&o));
    }
}

#[test]
fn config_with_unknown_key_is_rejected_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg: PathBuf = dir.path().join("kiln.toml");
    std::fs::write(&cfg, "[gemm]\nverison = \"simt_tiled\"\n").unwrap();
    let o = kiln(&["--config", cfg.to_str().unwrap(), "versions"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("verison"), "{}", text(&o));
    let o = kiln(&["--config", "/nonexistent/kiln.toml", "versions"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).contains("does not exist"), "{}", text(&o));
}

#[test]
fn versions_lists_the_ladder() {
    let o = kiln(&["versions"]);
    assert!(o.status.success());
    let t = text(&o);
    assert!(t.contains("simt_naive") && t.contains("cublas"), "{t}");
    assert!(
        t.contains("fa3_wgmma") && t.contains("grouped_gemm"),
        "attention and MoE versions listed: {t}"
    );
}

#[test]
fn cache_path_and_clear() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["cache", "clear"])
        .env("KILN_CACHE_DIR", dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("removed 0"));
    let o = kiln(&["cache", "bogus"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn plan_says_what_the_dispatch_runs_and_why_without_a_gpu() {
    // with a GPU the plan follows that GPU, not the H100 this test expects
    require_no_gpu!();
    let o = kiln(&["plan", "--shape", "1024x11008x4096"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let t = text(&o);
    assert!(t.contains("version: wgmma_tma_ws"), "{t}");
    assert!(t.contains("132 SMs"), "{t}");
    assert!(t.contains("runs: 128x256 tiles"), "{t}");
    assert!(t.contains("344 tiles"), "{t}");
    // 3584 columns as 16 tiles of 224 make one whole wave of 128; KILN_WGMMA_WIDTHS=0 leaves
    // the 224-wide tile out (112 tiles of 128 x 256)
    let plan_json = |widths: &str| {
        let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
            .args(["--json", "plan", "--shape", "1024x3584x18944"])
            .env("KILN_WGMMA_WIDTHS", widths)
            .env("KILN_STORE", std::env::temp_dir().join("kiln-cli-plan.db"))
            .output()
            .expect("kiln runs");
        serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("plan --json is JSON")
    };
    let v = plan_json("1");
    assert_eq!(v["launch"]["tile"], "128x224", "{v}");
    assert_eq!(v["launch"]["tiles"], 128, "{v}");
    assert_eq!(v["launch"]["grid"], 128, "{v}");
    let v = plan_json("0");
    assert_eq!(v["launch"]["tile"], "128x256", "{v}");
    assert_eq!(v["launch"]["tiles"], 112, "{v}");
    // a column-major A of few rows is copied transposed first; f32 C goes out through TMA
    // stores (ledger #79, cb82396), added to C by TMA where beta = 1, and for other betas C is loaded by
    // TMA first (ledger #81, 84f4c5c); a C that TMA cannot address goes out from registers
    let o = kiln(&[
        "plan",
        "--shape",
        "72x4096x4096",
        "--layout",
        "CC",
        "--out",
        "f32",
    ]);
    let t = text(&o);
    assert!(t.contains("copied transposed"), "{t}");
    assert!(t.contains("TMA-store epilogue"), "{t}");
    let o = kiln(&["plan", "--shape", "2048", "--out", "f32", "--beta", "1"]);
    let t = text(&o);
    assert!(t.contains("TMA reduce-add"), "{t}");
    assert!(t.contains("TMA-store epilogue"), "{t}");
    let o = kiln(&["plan", "--shape", "2048", "--out", "f32", "--beta", "0.5"]);
    let t = text(&o);
    assert!(t.contains("C-load TMA-store epilogue"), "{t}");
    assert!(t.contains("C loaded by TMA"), "{t}");
    let o = kiln(&[
        "plan",
        "--shape",
        "2048x2046x2048",
        "--out",
        "f32",
        "--beta",
        "0.5",
    ]);
    let t = text(&o);
    assert!(t.contains("row-store epilogue"), "{t}");
    // another version on request; a problem is required
    let o = kiln(&["plan", "--shape", "512", "--version", "mma_sync"]);
    assert!(text(&o).contains("version: mma_sync"), "{}", text(&o));
    let o = kiln(&["plan"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--shape"), "{}", text(&o));
}

#[test]
fn random_set_arguments_are_checked_before_the_gpu() {
    let cases: [(&[&str], &str); 6] = [
        (&["bench", "--count", "5"], "add --set random"),
        (
            &["bench", "--set", "targets", "--seed", "3"],
            "add --set random",
        ),
        (
            &["bench", "--set", "random", "--shape", "64"],
            "leave out --shape",
        ),
        (&["bench", "--set", "random", "--count", "0"], "--count"),
        (
            &["bench", "--set", "random", "--version", "nope"],
            "unknown gemm version `nope`",
        ),
        (
            &["bench", "--set", "randm"],
            "use ladder, targets or random",
        ),
    ];
    for (args, says) in cases {
        let o = kiln(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
        assert!(text(&o).contains(says), "{args:?}: {}", text(&o));
    }
}

#[test]
fn random_set_without_a_gpu_exits_4() {
    require_no_gpu!();
    let o = kiln(&["bench", "--set", "random", "--count", "3", "--seed", "9"]);
    assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    assert!(text(&o).contains("needs a GPU"), "{}", text(&o));
}

#[test]
fn random_set_json_has_a_row_per_shape_and_the_ratios_spread() {
    require_gpu!();
    let o = kiln(&[
        "--no-store",
        "--json",
        "bench",
        "--set",
        "random",
        "--count",
        "4",
        "--seed",
        "5",
        "--reps",
        "3",
        "--warmup",
        "1",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON value");
    assert_eq!(v["seed"], 5);
    let results = v["results"].as_array().unwrap();
    assert_eq!(results.len(), 1, "the dispatch's choice, one outcome");
    let shapes = results[0]["shapes"].as_array().unwrap();
    assert_eq!(shapes.len(), 4);
    for (i, s) in shapes.iter().enumerate() {
        assert_eq!(s["index"], i);
        assert!(s["vendor_us"].as_f64().unwrap() > 0.0, "{s}");
        assert!(s["ratio"].as_f64().unwrap() > 0.0, "{s}");
    }
    let summary = &results[0]["summary"];
    assert_eq!(summary["count"], 4);
    let (min, median) = (
        summary["min"].as_f64().unwrap(),
        summary["median"].as_f64().unwrap(),
    );
    assert!(min <= summary["p5"].as_f64().unwrap() && min <= median);
    assert!(text(&o).contains("geometric mean"), "{}", text(&o));
}

#[test]
fn verify_without_a_shape_refuses_flags_that_describe_one_problem() {
    for flag in [
        &["--out-dtype", "f32"][..],
        &["--beta", "1"],
        &["--alpha", "-1"],
        &["--ldc", "4096"],
    ] {
        let mut all = vec!["verify"];
        all.extend_from_slice(flag);
        let o = kiln(&all);
        assert_eq!(o.status.code(), Some(2), "{flag:?}: {}", text(&o));
        assert!(
            text(&o).contains("add --shape MxNxK"),
            "{flag:?}: {}",
            text(&o)
        );
    }
    // --out-dtype is --out: an f32 output with a bad ldc is refused for the ldc, so it parsed.
    let o = kiln(&[
        "verify",
        "--shape",
        "64",
        "--out-dtype",
        "f32",
        "--ldc",
        "32",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("ldc = 32"), "{}", text(&o));
}
