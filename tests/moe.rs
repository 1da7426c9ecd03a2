//! The MoE op on a machine without a GPU: every kernel variant compiles for sm_90a without
//! spills, stack, serialised wgmma or ignored setmaxnreg, and the `kiln moe` commands parse
//! their arguments and refuse bad input before they need a GPU.

use std::process::{Command, Output};

use kiln::device::DeviceInfo;
use kiln::harness::check::check_all;
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

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn nvrtc_available() -> bool {
    let ok = kiln::jit::nvrtc::version().is_ok();
    let required =
        std::env::var_os("KILN_REQUIRE_NVRTC").is_some() || std::env::var_os("CI").is_some();
    assert!(
        ok || !required,
        "NVRTC is required here but missing: run scripts/setup.sh"
    );
    ok
}

#[test]
fn every_moe_variant_compiles_cleanly_for_sm90a() {
    if !nvrtc_available() {
        return;
    }
    let registry = Registry::default();
    let jit = Jit::default();
    let dev = DeviceInfo::h100_sxm();
    let mut rows = Vec::new();
    for k in registry.moe() {
        rows.extend(check_all(
            &jit,
            &registry,
            "sm_90a",
            &dev,
            Some(k.name()),
            |_| {},
        ));
    }
    // grouped_gemm: the prefix kernel and 8 tile shapes (4, and each as CTA pairs) x 6 dtype
    // pairs; grouped_swapab: the prefix kernel and 3 shapes x 6; swiglu_dual: 6
    assert_eq!(rows.len(), (1 + 48) + (1 + 18) + 6);
    let bad: Vec<String> = rows
        .iter()
        .filter(|r| !r.ok())
        .map(|r| format!("{}: {}", r.variant, r.problems.join("; ")))
        .collect();
    assert!(
        bad.is_empty(),
        "variants with problems:\n{}",
        bad.join("\n")
    );
    assert!(rows.iter().all(|r| r.op == "moe"));
}

fn gpu_present() -> bool {
    kiln::device::init().is_ok()
}

#[test]
fn moe_check_lists_every_variant_and_passes() {
    if !nvrtc_available() {
        return;
    }
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
    if gpu_present() {
        return;
    }
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
    if !nvrtc_available() {
        return;
    }
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
                eprintln!("cuobjdump unavailable ({e}): skipping the SASS check");
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
