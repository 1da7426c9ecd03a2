//! The toolchain commands on a machine without a GPU: `inspect` (SASS histogram), the experiment
//! ledger through the CLI, `report` from a store of synthetic bench rows (opened in headless
//! Chromium), and the GPU-only commands refusing clearly.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::text;
use kiln::store::{ResultRow, RunInfo, Store};
use serde_json::json;

fn kiln_with_store(store: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KILN_STORE", store)
        .output()
        .expect("kiln runs")
}

#[test]
fn inspect_simt_tiled_counts_ffma_and_raises_no_hgmma_flag() {
    require_nvrtc!();
    let dir = tempfile::tempdir().unwrap();
    let o = kiln_with_store(&dir.path().join("k.db"), &["inspect", "gemm", "simt_tiled"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("| FFMA"), "{t}");
    assert!(!t.contains("no HGMMA") && t.contains("flags: none"), "{t}");

    let o = kiln_with_store(
        &dir.path().join("k.db"),
        &[
            "--json",
            "inspect",
            "gemm",
            "wgmma_tma_ws",
            "--layout",
            "CR",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("JSON");
    assert!(v["sass"]["counts"]["HGMMA"].as_u64().unwrap() > 0, "{v}");
    assert!(
        v["variant"]
            .as_str()
            .unwrap()
            .contains("KILN_A_ROW=0,KILN_B_ROW=1"),
        "{v}"
    );
}

#[test]
fn exp_new_close_and_log_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    let o = kiln_with_store(
        &db,
        &[
            "exp",
            "new",
            "--title",
            "pipeline stages 4 -> 6",
            "--hypothesis",
            "memory-bound",
            "--baseline",
            "wgmma_tma_ws",
            "--candidate",
            "wgmma_tma_ws:stages=6",
            "--shape",
            "4096",
            "--predict",
            "1.5x",
            "--gate",
            "abort if < 3%",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("experiment 1 recorded"), "{}", text(&o));
    let o = kiln_with_store(
        &db,
        &[
            "exp",
            "new",
            "--title",
            "t",
            "--hypothesis",
            "h",
            "--baseline",
            "simt_tiled",
            "--candidate",
            "simt_tiled",
            "--shape",
            "64",
            "--predict",
            "+5%",
            "--gate",
            "abort when slow",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    let o = kiln_with_store(
        &db,
        &[
            "exp",
            "close",
            "1",
            "--verdict",
            "eliminated",
            "--note",
            "compute-bound",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = kiln_with_store(&db, &["exp", "log", "--markdown"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("## Iteration log")
            && t.contains("## Eliminated ideas")
            && t.contains("compute-bound"),
        "{t}"
    );
    if !common::gpu_present() {
        let o = kiln_with_store(&db, &["exp", "run", "1"]);
        assert_eq!(o.status.code(), Some(4), "{}", text(&o));
    }
}

#[test]
fn gpu_tools_without_a_gpu_exit_4_with_one_sentence() {
    require_no_gpu!();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    for args in [
        &["sanitize", "--version", "simt_tiled"][..],
        &["profile", "gemm", "simt_tiled", "--shape", "256"],
        &[
            "profile",
            "gemm",
            "simt_tiled",
            "--shape",
            "256",
            "--split",
            "simt_naive",
        ],
        &[
            "profile",
            "gemm",
            "wgmma_tma_ws",
            "--shape",
            "256",
            "--timeline",
        ],
    ] {
        let o = kiln_with_store(&db, args);
        assert_eq!(o.status.code(), Some(4), "{args:?}: {}", text(&o));
        assert!(text(&o).contains("needs a GPU"), "{args:?}: {}", text(&o));
    }
    let o = kiln_with_store(&db, &["sanitize", "--tool", "leakcheck"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    // a malformed --problem is bad input, said before any GPU or sanitizer is looked for
    let o = kiln_with_store(&db, &["sanitize", "--problem", "300x2000x200:XY"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("unknown layout `XY`"), "{}", text(&o));
}

#[test]
fn sanitize_configs_lists_every_setup_without_a_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    let o = kiln_with_store(
        &db,
        &["sanitize", "--configs", "--list", "--tool", "racecheck"],
    );
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    // 75 setups in 4 layouts, one tool (swap-AB's n144 tile added three)
    assert!(out.contains("300 runs (1 tools)"), "{out}");
    assert!(
        out.contains("n224 stream-K at 264x1000x136 CC bf16->bf16"),
        "{out}"
    );
    assert!(out.contains("pingpong-tiny f32 C at"), "{out}");
    assert!(
        out.contains("pingpong-tiny f32 C from registers at"),
        "{out}"
    );
    // C loaded in the cooperative 64x64 tile, which the ping-pong one runs as for beta 0.5
    assert!(out.contains("tiny64 C loaded at"), "{out}");
    assert!(out.contains("tiny64 f32 C loaded at"), "{out}");
    assert!(!out.contains("pingpong-tiny C loaded at"), "{out}");
    assert!(!out.contains("NOT COVERED"), "{out}");
    // --configs chooses its own version and problems; --jobs 0 runs nothing
    for args in [
        &["sanitize", "--configs", "--version", "simt_tiled"][..],
        &["sanitize", "--configs", "--problem", "300x2000x200"],
        &["sanitize", "--jobs", "0"],
    ] {
        let o = kiln_with_store(&db, args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o));
    }
    let o = kiln_with_store(&db, &["sanitize", "--jobs", "0"]);
    assert!(
        text(&o).contains("--jobs 0 would run nothing"),
        "{}",
        text(&o)
    );
}

#[test]
fn the_timeline_is_refused_for_versions_without_the_instrumentation() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    let o = kiln_with_store(
        &db,
        &[
            "profile",
            "gemm",
            "mma_sync",
            "--shape",
            "256",
            "--timeline",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("instrumented in wgmma_tma_ws only"),
        "{}",
        text(&o)
    );
    let o = kiln_with_store(
        &db,
        &[
            "profile",
            "gemm",
            "wgmma_tma_ws",
            "--shape",
            "256",
            "--timeline",
            "--split",
            "mma_sync",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
}

/// Two commits of bench rows: `wgmma_tma_ws` on 4096^3 gets 10% slower in the second.
fn fill_synthetic(db: &Path) {
    let store = Store::open(db).unwrap();
    let problems = [
        json!({"m": 4096, "n": 4096, "k": 4096, "layout": "RC", "input": "bf16", "output": "bf16", "lda": 4096, "ldb": 4096, "ldc": 4096, "alpha": 1.0, "beta": 0.0}),
        json!({"m": 8192, "n": 8192, "k": 8192, "layout": "RC", "input": "bf16", "output": "bf16", "lda": 8192, "ldb": 8192, "ldc": 8192, "alpha": 1.0, "beta": 0.0}),
    ];
    for (commit, slow) in [("aaaaaaa", 1.0), ("bbbbbbb", 1.10)] {
        let run = store
            .begin_run(&RunInfo {
                kind: "bench".into(),
                command: "kiln bench --all".into(),
                device: None,
                kiln_commit: commit.into(),
            })
            .unwrap();
        for (pi, p) in problems.iter().enumerate() {
            let scale = if pi == 0 { 1.0 } else { 8.0 };
            let vendor_ms = 0.16 * scale;
            for (version, ms) in [
                ("simt_tiled", 4.0 * scale),
                ("mma_sync", 0.45 * scale),
                (
                    "wgmma_tma_ws",
                    0.2 * scale * if pi == 0 { slow } else { 1.0 },
                ),
                ("cublas", vendor_ms),
            ] {
                let flops = 2.0 * 4096f64.powi(3) * scale;
                let metrics = json!({"median_ms": ms, "min_ms": ms * 0.98, "max_ms": ms * 1.03, "reps": 30, "tflops": flops / (ms * 1e-3) / 1e12, "ratio_to_vendor": vendor_ms / ms});
                store
                    .record(
                        run,
                        &ResultRow {
                            op: "gemm".into(),
                            version: version.into(),
                            variant: String::new(),
                            problem: p.clone(),
                            metrics,
                            passed: None,
                        },
                    )
                    .unwrap();
            }
        }
        store.finish_run(run, "ok").unwrap();
    }
}

#[test]
fn report_from_a_synthetic_store_renders_in_headless_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    fill_synthetic(&db);
    let o = kiln_with_store(
        &db,
        &[
            "exp",
            "new",
            "--title",
            "TMA store epilogue",
            "--hypothesis",
            "epilogue > 5%",
            "--baseline",
            "wgmma_tma_ws",
            "--candidate",
            "mma_sync",
            "--shape",
            "4096",
            "--predict",
            "+5%",
            "--gate",
            "abort if < 3%",
        ],
    );
    assert!(o.status.success(), "{}", text(&o));
    let out = dir.path().join("report");
    let o = kiln_with_store(&db, &["report", "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", text(&o));
    let md = std::fs::read_to_string(out.join("report.md")).unwrap();
    for s in [
        "## GEMM ladder",
        "## Roofline",
        "## Trends across commits",
        "## Experiment log",
        "REGRESSION",
        "datasheet",
        "![roofline](charts/roofline.svg)",
        "TMA store epilogue",
    ] {
        assert!(md.contains(s), "{s} missing from report.md:\n{md}");
    }
    assert!(out.join("charts/roofline.svg").is_file() && out.join("charts/ratio.svg").is_file());
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<svg") && html.contains("<style>") && !html.contains("<script"));

    let Some(dom) = chromium_dom(&out.join("report.html"), dir.path()) else {
        return;
    };
    for h in [
        "<h1>kiln report</h1>",
        "<h2>GEMM ladder</h2>",
        "<h2>Ratio to the vendor per shape</h2>",
        "<h2>Roofline</h2>",
        "<h2>Trends across commits</h2>",
        "<h2>Experiment log</h2>",
    ] {
        assert!(dom.contains(h), "{h} missing from Chromium's DOM");
    }
    assert!(dom.contains("<svg"), "no <svg> in Chromium's DOM");
    assert!(dom.contains("wgmma_tma_ws"));
}

/// The DOM headless Chromium builds from `page`; `None` (skip) only where Chromium is absent and
/// the run is not one that must check it (CI or KILN_REQUIRE_NVRTC).
fn chromium_dom(page: &Path, scratch: &Path) -> Option<String> {
    let bin = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| {
            Command::new(b)
                .arg("--version")
                .output()
                .is_ok_and(|o| o.status.success())
        });
    let Some(bin) = bin else {
        assert!(
            !common::required(),
            "Chromium is required here but missing: run KILN_BROWSER_TESTS=1 scripts/setup.sh"
        );
        common::skip(
            "chromium not installed, the browser check left out (KILN_BROWSER_TESTS=1 \
             scripts/setup.sh installs it)",
        );
        return None;
    };
    let profile = scratch.join("chromium-profile");
    let o = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg("--dump-dom")
        .arg(format!("file://{}", page.display()))
        .output()
        .expect("chromium runs");
    assert!(o.status.success(), "chromium failed: {}", text(&o));
    Some(String::from_utf8_lossy(&o.stdout).into_owned())
}

#[test]
fn a_hang_and_a_missing_tool_have_their_own_exit_codes_and_say_what_to_do() {
    let e = kiln::Error::Hang {
        what: "wgmma_tma_ws on 129x127x67 RC bf16->bf16".into(),
        limit_ms: 10_000,
    };
    assert_eq!(e.exit_code(), 11);
    let t = e.to_string();
    assert!(
        t.contains("wgmma_tma_ws on 129x127x67") && t.contains("10000 ms") && t.contains("hung"),
        "{t}"
    );
    assert_eq!(kiln::Error::ToolMissing("x".into()).exit_code(), 10);
    let missing = kiln::tools::ToolSpec {
        name: "kiln-no-such-tool",
        env: "KILN_NO_SUCH_TOOL_FOR_TESTS",
        fallback_dirs: &[".deps/nowhere"],
        hint: "run scripts/setup.sh",
    };
    let err = missing.find().unwrap_err();
    assert_eq!(err.exit_code(), 10);
    assert!(err.to_string().contains("scripts/setup.sh"), "{err}");
}
