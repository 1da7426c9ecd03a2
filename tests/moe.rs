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

#[test]
fn every_moe_variant_is_listed_for_the_compile_check() {
    // Counted, not compiled: `tests/compile.rs` compiles and judges every variant.
    let items = check_items(&Registry::default(), "sm_90a", None);
    let moe: Vec<_> = items.iter().filter(|(op, _, _)| *op == "moe").collect();
    // grouped_gemm: the prefix kernel and 8 tile shapes (4, and each as CTA pairs) x 6 dtype
    // pairs; grouped_swapab: the prefix kernel and 3 shapes x 6; swiglu_dual: 6
    assert_eq!(moe.len(), (1 + 48) + (1 + 18) + 6);
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
        t.contains("74 MoE variants for sm_90a: 0 with problems"),
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
    ] {
        let mut full = vec!["--no-store"];
        full.extend_from_slice(args);
        let o = kiln(&full);
        let t = text(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {t}");
        assert!(t.contains(want), "{args:?}: {t}");
    }
}

#[test]
fn moe_gpu_commands_say_they_need_a_gpu() {
    require_no_gpu!();
    for args in [
        &["--no-store", "moe", "verify"][..],
        &["--no-store", "moe", "bench", "--counts", "40,248"][..],
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
