//! The `KILN_*` environment as the command line sees it: an unknown name or a bad value ends any
//! command with one sentence naming the variable (exit code 2), and `kiln plan` shows the knobs set.

use std::process::{Command, Output};

/// `kiln args` with exactly `vars` as its `KILN_*` environment (the caller's own are dropped).
fn kiln(args: &[&str], vars: &[(&str, &str)]) -> Output {
    let store = std::env::temp_dir().join(format!("kiln-overrides-test-{}.db", std::process::id()));
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("KILN_") {
            c.env_remove(k);
        }
    }
    c.args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KILN_STORE", store)
        .envs(vars.iter().copied())
        .output()
        .expect("kiln runs")
}

/// The one sentence a refused run printed, checked: exit code 2, one line on stderr, nothing on
/// stdout, naming `name`.
fn refusal(o: &Output, name: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).trim().to_string();
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("kiln: ") && err.contains(name), "{err}");
    err
}

const PLAN: &[&str] = &["--no-store", "plan", "--shape", "256x256x256"];

#[test]
fn a_bogus_wgmma_config_is_refused_not_replaced_by_the_heuristic() {
    let o = kiln(PLAN, &[("KILN_WGMMA_CFG", "bogus")]);
    let e = refusal(&o, "KILN_WGMMA_CFG=bogus");
    assert!(e.contains("large, medium"), "{e}");
}

#[test]
fn a_swiglu_fold_the_kernel_has_no_variant_for_is_refused_not_made_zero() {
    let o = kiln(PLAN, &[("KILN_SWIGLU_FOLD", "7")]);
    let e = refusal(&o, "KILN_SWIGLU_FOLD=7");
    assert!(e.contains("0, 16 or 32"), "{e}");
}

#[test]
fn an_unknown_kiln_variable_is_refused() {
    let o = kiln(PLAN, &[("KILN_NOSUCH", "1")]);
    let e = refusal(&o, "KILN_NOSUCH");
    assert!(e.contains("no environment variable of that name"), "{e}");
}

#[test]
fn plan_shows_the_knobs_set_and_none_when_none_are() {
    let o = kiln(PLAN, &[]);
    let t = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{t}");
    assert!(!t.contains("overrides:"), "{t}");
    let o = kiln(
        PLAN,
        &[("KILN_WGMMA_CFG", "large"), ("KILN_WGMMA_STAGES", "3")],
    );
    let t = String::from_utf8_lossy(&o.stdout).to_string();
    assert!(o.status.success(), "{t}");
    assert!(
        t.contains("overrides: KILN_WGMMA_CFG=large KILN_WGMMA_STAGES=3"),
        "{t}"
    );
    let mut args = vec!["--json"];
    args.extend_from_slice(PLAN);
    let o = kiln(&args, &[("KILN_FLUSH", "memset")]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("valid JSON");
    assert_eq!(v["overrides"], serde_json::json!({"KILN_FLUSH": "memset"}));
}

#[test]
fn the_commit_cargo_sets_for_the_programs_it_runs_is_known() {
    // build.rs's `cargo:rustc-env` reaches the environment of tests and `cargo run` too.
    let o = kiln(PLAN, &[("KILN_GIT_COMMIT", env!("KILN_GIT_COMMIT"))]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}
