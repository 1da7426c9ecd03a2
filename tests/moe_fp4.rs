//! The 4-bit MoE commands without a GPU: `kiln moe prepack` checks every weight and round-trips
//! the file; the 4-bit verify, bench and prepack refuse bad input before they need a GPU.

mod common;

use std::process::{Command, Output};

use common::text;

fn kiln(args: &[&str]) -> Output {
    let dir = std::env::temp_dir().join(format!("kiln-fp4-test-{}", std::process::id()));
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("--no-store")
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KILN_STORE", dir.join("k.db"))
        .output()
        .expect("kiln runs")
}

/// `kiln --no-store ARGS` is refused as bad input (exit 2), saying `want`.
fn refused(args: &[&str], want: &str) {
    let o = kiln(args);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
    assert!(t.contains(want), "{args:?}: {t}");
}

#[test]
fn prepack_checks_every_weight_for_both_formats_and_swiglu_layouts() {
    for args in [
        &["--weights", "nvfp4", "--n", "200", "--k", "96"][..],
        &["--weights", "mxfp4", "--n", "128", "--k", "160"][..],
        &["--weights", "nvfp4", "--n", "128", "--k", "64", "--swiglu"][..],
        &[
            "--weights",
            "mxfp4",
            "--n",
            "128",
            "--k",
            "64",
            "--swiglu",
            "interleaved",
        ][..],
    ] {
        let mut full = vec!["moe", "prepack", "--experts", "3"];
        full.extend_from_slice(args);
        let o = kiln(&full);
        let t = text(&o);
        assert!(o.status.success(), "{args:?}: {t}");
        assert!(
            t.contains("match the standard layout exactly"),
            "{args:?}: {t}"
        );
    }
}

#[test]
fn the_prepacked_file_is_written_and_read_back() {
    let dir = std::env::temp_dir().join(format!("kiln-fp4-file-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("w.fp4");
    let p = path.to_str().unwrap();
    let o = kiln(&[
        "moe",
        "prepack",
        "--experts",
        "2",
        "--n",
        "128",
        "--k",
        "64",
        "--out",
        p,
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let o = kiln(&["moe", "prepack", "--read", p]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    // 2 experts x 2 blocks of 64 rows x 1 atom of 2048 code and 256 scale bytes
    assert!(
        t.contains("nvfp4: 2 experts, N 128, K 64, 9216 bytes"),
        "{t}"
    );
    let junk = dir.join("junk.bin");
    std::fs::write(&junk, vec![7u8; 100]).unwrap();
    refused(
        &["moe", "prepack", "--read", junk.to_str().unwrap()],
        "not a prepacked",
    );
}

#[test]
fn four_bit_commands_refuse_bad_input_before_touching_a_gpu() {
    refused(
        &["moe", "prepack", "--weights", "fp5"],
        "unknown 4-bit weight format",
    );
    refused(
        &["moe", "prepack", "--weights", "mxfp4", "--k", "48"],
        "K = 48",
    );
    refused(
        &["moe", "prepack", "--n", "64", "--swiglu", "interleaved"],
        "multiple of 128",
    );
    refused(
        &["moe", "prepack", "--swiglu", "both"],
        "`separate` or `interleaved`",
    );
    refused(
        &[
            "moe",
            "verify",
            "--weights",
            "nvfp4",
            "--counts",
            "1,2",
            "--n",
            "64",
            "--k",
            "64",
            "--graph",
        ],
        "leave it out",
    );
    refused(
        &[
            "moe",
            "verify",
            "--weights",
            "nvfp4",
            "--version",
            "grouped_gemm",
        ],
        "leave out --version",
    );
    refused(
        &[
            "moe",
            "verify",
            "--weights",
            "int4",
            "--counts",
            "1",
            "--n",
            "64",
            "--k",
            "64",
        ],
        "unknown 4-bit",
    );
    refused(&["moe", "bench", "--weights", "int4"], "unknown 4-bit");
    refused(
        &["moe", "bench", "--weights", "nvfp4", "--routed"],
        "add --swiglu",
    );
    // W4A8: e4m3 activations take MXFP4 weights, bf16 X, and say what --act takes
    refused(
        &["moe", "verify", "--weights", "nvfp4", "--act", "e4m3"],
        "MXFP4",
    );
    refused(
        &["moe", "bench", "--weights", "nvfp4", "--act", "e4m3"],
        "MXFP4",
    );
    refused(
        &["moe", "verify", "--weights", "mxfp4", "--act", "fp16"],
        "bf16 or e4m3",
    );
    refused(
        &[
            "moe",
            "verify",
            "--weights",
            "mxfp4",
            "--act",
            "e4m3",
            "--counts",
            "1,2",
            "--n",
            "64",
            "--k",
            "64",
            "--dtype",
            "f16",
        ],
        "leave out --dtype",
    );
    refused(&["moe", "verify", "--act", "e4m3"], "--weights");
}
