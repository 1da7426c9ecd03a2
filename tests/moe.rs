//! The MoE op on a machine without a GPU: `kiln moe check` compiles every MoE variant for sm_90a
//! without spills, stack, serialised wgmma or ignored setmaxnreg, and the `kiln moe` commands
//! parse their arguments and refuse bad input before they need a GPU.

mod common;

use std::process::{Command, Output};

use common::text;
use kiln::harness::check::check_items;
use kiln::jit::Jit;
use kiln::ops::registry::Registry;

fn kiln(args: &[&str]) -> Output {
    let dir = std::env::temp_dir().join(format!("kiln-moe-test-{}", std::process::id()));
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KILN_STORE", dir.join("k.db"))
        .output()
        .expect("kiln runs")
}

/// `kiln --no-store ARGS` is refused as bad input (exit 2), saying `want`.
fn refused(args: &[&str], want: &str) {
    let mut full = vec!["--no-store"];
    full.extend_from_slice(args);
    let o = kiln(&full);
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
    assert!(t.contains(want), "{args:?}: {t}");
}

#[test]
fn every_moe_variant_is_listed_for_the_compile_check() {
    // Counted, not compiled: `tests/compile.rs` compiles and judges every variant.
    let items = check_items(&Registry::default(), "sm_90a", None);
    let moe: Vec<_> = items.iter().filter(|(op, _, _)| *op == "moe").collect();
    // grouped_gemm: the prefix kernel and 8 tile shapes (4, and each as CTA pairs) x 6 dtype
    // pairs, and the layer's 4 single-CTA shapes x 2 inputs x (gather, combine, scaled rows);
    // grouped_swapab: the prefix kernel and 3 shapes x 6; swiglu_dual: 6, and the layer's 2
    // gathers x 2 inputs; fp4_experts: 2 ops x (2 formats x bf16 on the 16- and 64-token
    // decode tiles, prefill and the 8-token tile at two CTAs an SM, and NVFP4 f16 on the three
    // decode tiles), the SwiGLU's shared-memory tile and its 64- and 128-token tiles cut in K
    // (`KILN_FP4_TILE=count`) in both formats, the grouped GEMM's 160- and 128-token tiles and its
    // 256- and 128-token tiles cut in K (`count-fit`, the default since 2026-12-01) in both
    // formats, and the W4A8
    // GEMM and SwiGLU in their `ss` and `wide` forms (`auto` picks either by rows); moe_layer: the
    // routing's two kernels, the combine's two and the sorted copy
    assert_eq!(
        moe.len(),
        (1 + 48 + 24) + (1 + 18) + (6 + 4) + (22 + 6 + 8 + 2 * 2) + 5
    );
    for k in Registry::default().moe() {
        assert!(
            moe.iter().any(|(_, v, _)| *v == k.name()),
            "{} has no variant",
            k.name()
        );
    }
}

#[test]
fn moe_check_lists_every_variant_and_passes() {
    require_nvrtc!();
    let o = kiln(&["--no-store", "moe", "check"]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("147 MoE variants for sm_90a: 0 with problems"),
        "{t}"
    );
    assert!(
        t.contains("moe_tile_prefix") || t.contains("tile_prefix"),
        "{t}"
    );
}

#[test]
fn moe_bench_refuses_bad_input_before_touching_a_gpu() {
    for (args, want) in [
        (
            &["moe", "bench", "--experts", "0"][..],
            "expert count E is 0",
        ),
        (
            &["moe", "bench", "--counts", "3,x"][..],
            "`x` is not a row count",
        ),
        (&["moe", "bench", "--counts", "0,0"][..], "X has 0 rows"),
        (&["moe", "bench", "--n", "0"][..], "N is 0"),
        (
            &["moe", "bench", "--swiglu", "--interleaved", "--n", "200"][..],
            "multiple of 128",
        ),
        (&["moe", "bench", "--routed"][..], "add --swiglu"),
        (
            &["moe", "bench", "--dtype", "f32"][..],
            "f32 inputs are not supported",
        ),
        (
            &["moe", "verify", "--suite", "huge"][..],
            "unknown suite `huge`",
        ),
        (
            &["moe", "verify", "--version", "nope"][..],
            "unknown moe version `nope`",
        ),
        (
            &[
                "moe", "verify", "--layer", "--counts", "3,4", "--n", "64", "--k", "64",
            ][..],
            "leave out --counts",
        ),
        (
            &["moe", "verify", "--layer", "--suite", "huge"][..],
            "layer suite `huge`",
        ),
        (
            &["moe", "bench", "--layer", "E64,k80,H2048,I1408,T1"][..],
            "top_k = 80 with 64 experts",
        ),
        (
            &["moe", "bench", "--layer", "E64,k8,H2048"][..],
            "E, k, H and I are all needed",
        ),
        (
            &["moe", "bench", "--layer", "--combine", "fast"][..],
            "the combine `fast`",
        ),
    ] {
        refused(args, want);
    }
}

#[test]
fn moe_gpu_commands_say_they_need_a_gpu() {
    require_no_gpu!();
    for args in [
        &["--no-store", "moe", "verify"][..],
        &["--no-store", "moe", "bench", "--counts", "40,248"][..],
        &["--no-store", "moe", "verify", "--layer"][..],
        &["--no-store", "moe", "bench", "--layer"][..],
    ] {
        let o = kiln(args);
        assert_eq!(o.status.code(), Some(4), "{}", text(&o));
        assert!(text(&o).contains("needs a GPU"), "{}", text(&o));
    }
}

#[test]
fn moe_kernels_run_on_hgmma_and_load_weights_with_3d_tma() {
    require_nvrtc!();
    let registry = Registry::default();
    let jit = Jit::default();
    for k in registry.moe() {
        // the first GEMM variant of each version (the grouped list starts with the prefix kernel)
        let spec = k
            .variants("sm_90a")
            .into_iter()
            .find(|s| s.entry != "moe_tile_prefix")
            .unwrap();
        let c = jit.compile(&spec).expect("compiles");
        let sass = match kiln::tools::inspect::disassemble(&c.cubin) {
            Ok(s) => s,
            Err(e) => {
                common::skip(&format!("cuobjdump unavailable ({e})"));
                return;
            }
        };
        let h = kiln::tools::inspect::parse_sass(&sass);
        assert!(h.count("HGMMA") > 0, "{}: no HGMMA", spec.label());
        assert!(
            sass.contains("UTMALDG.3D"),
            "{}: W not loaded by 3D TMA",
            spec.label()
        );
        assert!(
            sass.contains("UTMALDG.2D"),
            "{}: X not loaded by 2D TMA",
            spec.label()
        );
        assert_eq!(
            h.count("LDL") + h.count("STL"),
            0,
            "{}: local memory",
            spec.label()
        );
    }
}

#[test]
fn moe_verify_takes_one_problem_and_refuses_bad_combinations_before_the_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let bad_file = dir.path().join("bad.txt");
    std::fs::write(&bad_file, "3, 0\n17 x\n").unwrap();
    let empty_file = dir.path().join("empty.txt");
    std::fs::write(&empty_file, " \n").unwrap();
    let (bad, empty) = (bad_file.to_str().unwrap(), empty_file.to_str().unwrap());
    fn v<'a>(rest: &[&'a str]) -> Vec<&'a str> {
        let mut a = vec!["moe", "verify"];
        a.extend_from_slice(rest);
        a
    }
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (v(&["--n", "256"]), "--n describes one problem"),
        (v(&["--swiglu"]), "--swiglu describes one problem"),
        (v(&["--counts", "3,0,17"]), "needs --n"),
        (v(&["--counts", "3,0,17", "--n", "256"]), "needs --n"),
        (
            v(&[
                "--counts", "3,0", "--n", "64", "--k", "64", "--suite", "quick",
            ]),
            "leave it out",
        ),
        (
            v(&[
                "--counts",
                "3,0",
                "--n",
                "64",
                "--k",
                "64",
                "--max-rows",
                "8",
            ]),
            "add --masked",
        ),
        (
            v(&["--counts", "3,0", "--n", "64", "--k", "64", "--routed"]),
            "add --swiglu",
        ),
        (
            v(&[
                "--counts", "3,0", "--n", "64", "--k", "64", "--swiglu", "fused",
            ]),
            "`separate` or `interleaved`",
        ),
        (
            v(&[
                "--counts",
                "3,0",
                "--n",
                "64",
                "--k",
                "64",
                "--swiglu",
                "interleaved",
            ]),
            "multiple of 128",
        ),
        (
            v(&[
                "--counts",
                "3,9",
                "--n",
                "64",
                "--k",
                "64",
                "--masked",
                "--max-rows",
                "4",
            ]),
            "counts[1] = 9 is outside 0..=4",
        ),
        (
            v(&[
                "--counts", "3,0", "--n", "64", "--k", "64", "--dtype", "f32",
            ]),
            "f32 inputs are not supported",
        ),
        (
            v(&[
                "--counts",
                "3,0",
                "--n",
                "64",
                "--k",
                "64",
                "--out-dtype",
                "f8",
            ]),
            "unknown dtype",
        ),
        (
            v(&[
                "--counts",
                "3,0",
                "--n",
                "64",
                "--k",
                "64",
                "--version",
                "swiglu_dual",
            ]),
            "use grouped_gemm or grouped_swapab",
        ),
        (
            v(&[
                "--counts",
                "3,0",
                "--n",
                "256",
                "--k",
                "64",
                "--swiglu",
                "--version",
                "grouped_gemm",
            ]),
            "use swiglu_dual",
        ),
        (
            v(&["--counts", "0,0", "--n", "64", "--k", "64"]),
            "X has 0 rows",
        ),
        (
            v(&[
                "--counts",
                "1",
                "--counts-file",
                bad,
                "--n",
                "64",
                "--k",
                "64",
            ]),
            "cannot be used with",
        ),
        (
            v(&["--counts-file", bad, "--n", "64", "--k", "64"]),
            "`x` is not a row count",
        ),
        (
            v(&["--counts-file", empty, "--n", "64", "--k", "64"]),
            "holds no row counts",
        ),
        (
            v(&[
                "--counts-file",
                "/nonexistent/counts.txt",
                "--n",
                "64",
                "--k",
                "64",
            ]),
            "cannot read the counts file",
        ),
    ];
    for (args, want) in cases {
        refused(&args, want);
    }
}

#[test]
fn moe_verify_of_a_valid_problem_gets_as_far_as_the_gpu() {
    require_no_gpu!();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("counts.txt");
    let counts: Vec<String> = (0..1024).map(|e| (e % 5).to_string()).collect();
    std::fs::write(&file, counts.join("\n")).unwrap();
    for args in [
        &[
            "--counts",
            "3,0,17",
            "--n",
            "256",
            "--k",
            "512",
            "--swiglu",
            "interleaved",
            "--routed",
        ][..],
        &[
            "--counts",
            "3,0,17",
            "--masked",
            "--n",
            "72",
            "--k",
            "64",
            "--graph",
            "--out-dtype",
            "f32",
        ],
        &[
            "--counts-file",
            file.to_str().unwrap(),
            "--n",
            "128",
            "--k",
            "128",
            "--dtype",
            "f16",
        ],
    ] {
        let mut full = vec!["--no-store", "moe", "verify"];
        full.extend_from_slice(args);
        let o = kiln(&full);
        assert_eq!(o.status.code(), Some(4), "{args:?}: {}", text(&o));
        assert!(text(&o).contains("needs a GPU"), "{args:?}: {}", text(&o));
    }
}

#[test]
fn moe_verify_checks_a_users_problem_on_every_version_of_its_kind() {
    require_gpu!();
    let o = kiln(&[
        "--no-store",
        "--json",
        "moe",
        "verify",
        "--counts",
        "3,0,17,130",
        "--n",
        "264",
        "--k",
        "136",
    ]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON value");
    let versions: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["version"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["grouped_gemm", "grouped_swapab"]);
    assert!(v.as_array().unwrap().iter().all(|o| o["passed"] == true));
}
