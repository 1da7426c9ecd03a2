//! The compile gate: every kernel variant of the registry compiles for sm_90a without spills. It
//! is the one test that compiles them all (CI's compile check: never skipped there), and the
//! registry stays within the variant budget that keeps it affordable on 2 cores.

mod common;

use std::process::Command;

use common::text;
use kiln::harness::check::check_items;
use kiln::ops::registry::{Registry, VARIANT_BUDGET};

#[test]
fn every_kernel_variant_compiles_for_sm90a_without_spills() {
    require_nvrtc!();
    let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["--no-store", "check", "--arch", "sm_90a"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("kiln runs");
    let t = text(&o);
    assert!(o.status.success(), "kiln check failed:\n{t}");
    assert!(t.contains("0 with problems"), "{t}");
    for v in [
        "simt_naive",
        "simt_tiled",
        "wgmma_tma_ws",
        "fa3_wgmma",
        "grouped_gemm",
    ] {
        assert!(t.contains(v), "{v} missing from the check table");
    }
}

#[test]
fn check_compiles_at_most_the_variant_budget() {
    // Counted, not compiled: the specs `kiln check` would compile.
    let n = check_items(&Registry::default(), "sm_90a", None).len();
    assert!(
        n <= VARIANT_BUDGET,
        "`kiln check` would compile {n} variants, over the budget of {VARIANT_BUDGET} \
         (kiln::ops::registry::VARIANT_BUDGET): drop variants the dispatch no longer picks, or \
         raise the budget knowingly"
    );
}

/// `kiln check --version v` for sm_90a: its `variants` variants compile with no problems (spills,
/// shared memory, ptxas's serialisation notes).
fn check_version(v: &str, variants: usize) {
    let o = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["--no-store", "check", "--arch", "sm_90a", "--version", v])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("kiln runs");
    let t = text(&o);
    assert!(o.status.success(), "kiln check --version {v} failed:\n{t}");
    assert!(
        t.contains(&format!("{variants} variants")) && t.contains("0 with problems"),
        "{t}"
    );
}

#[test]
fn pointwise_kernels_compile_for_sm90a_without_spills() {
    // (the gate above compiles them too; this one alone is quick to run after a change to them)
    require_nvrtc!();
    for v in ["rmsnorm", "rope"] {
        check_version(v, 4);
    }
}

#[test]
fn bwd_fa3_d256_compiles_for_sm90a_without_spills() {
    // (the gate above compiles them too; this one alone is quick to run after a change to the
    // d256 backwards or the headers they share with the d64/d128 ones)
    require_nvrtc!();
    for v in ["bwd_fa3_d256", "bwd_fa3_d256_tma", "bwd_fa3_d256_pair"] {
        check_version(v, 4);
    }
    // the deterministic default's ordered reduces (their pre- and postprocess the others')
    check_version("bwd_fa3_d256_w2", 2);
}

#[test]
fn the_backwards_deterministic_writer_and_row_split_compile_for_sm90a_without_spills() {
    // (the gate above compiles them too: quick after a change to the writer, its order or the
    // dQ splits in bwd_fa3_block.cuh and bwd_dq_tile.cuh)
    require_nvrtc!();
    check_version("bwd_fa3_ordered_eager", 4);
    check_version("bwd_fa3_m128_rows", 2);
}

#[test]
fn the_d64_backward_with_exponentials_on_the_fma_pipe_compiles_for_sm90a_without_spills() {
    // (the gate above compiles it too: quick after a change to Pᵀ's or dSᵀ's math in
    // bwd_fa3_block.cuh or to ex2_poly)
    require_nvrtc!();
    check_version("bwd_fa3_m128_fma", 2);
}

#[test]
fn the_backwards_split_tail_compiles_for_sm90a_without_spills() {
    // (the gate above compiles it too: quick after a change to bwd_tail.cuh or the walk it
    // shares; the default at d64 from 4,096 rows and d128 since 2026-11-30)
    require_nvrtc!();
    check_version("bwd_fa3_tail", 4);
}
