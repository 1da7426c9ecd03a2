//! Bad input that once passed silently, each now one sentence on stderr with its exit code, on a
//! machine without a GPU: a config file's unknown version, section or value type; an architecture
//! kiln does not compile for; `KILN_NVRTC` naming no loadable NVRTC; any `KILN_*` with a bad value.

use std::path::Path;
use std::process::{Command, Output};

/// `kiln args` in `dir` with exactly `vars` as its `KILN_*` environment (the caller's own are
/// dropped, so a developer's shell cannot change the answer) and a store of its own.
fn kiln_in(dir: &Path, args: &[&str], vars: &[(&str, &str)]) -> Output {
    let store = std::env::temp_dir().join(format!("kiln-bad-input-{}.db", std::process::id()));
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("KILN_") {
            c.env_remove(k);
        }
    }
    c.args(args)
        .current_dir(dir)
        .env("KILN_STORE", store)
        .envs(vars.iter().copied())
        .output()
        .expect("kiln runs")
}

fn kiln(args: &[&str], vars: &[(&str, &str)]) -> Output {
    kiln_in(Path::new(env!("CARGO_MANIFEST_DIR")), args, vars)
}

/// The one sentence a refused run printed, checked: exit `code`, one line on stderr starting
/// `kiln: `, nothing on stdout (no table of problems, no progress), naming each of `names`.
fn refusal(o: &Output, code: i32, names: &[&str]) -> String {
    let err = String::from_utf8_lossy(&o.stderr).trim().to_string();
    assert_eq!(o.status.code(), Some(code), "{err}");
    assert!(
        o.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&o.stdout)
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("kiln: "), "{err}");
    for n in names {
        assert!(err.contains(n), "`{n}` not named: {err}");
    }
    err
}

/// A `kiln.toml` holding `text` in a fresh folder.
fn config(text: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kiln.toml");
    std::fs::write(&path, text).unwrap();
    let p = path.to_str().unwrap().to_string();
    (dir, p)
}

#[test]
fn config_gemm_version_nosuch_is_refused_naming_file_key_and_versions() {
    let (dir, path) = config("[gemm]\nversion = \"nosuch\"\n");
    let names = [
        path.as_str(),
        "[gemm] version = \"nosuch\"",
        "simt_tiled",
        "wgmma_tma_ws",
    ];
    // named with --config, and found in the working folder
    refusal(&kiln(&["--config", &path, "versions"], &[]), 2, &names);
    refusal(&kiln_in(dir.path(), &["versions"], &[]), 2, &["nosuch"]);
    // plan, which picks the version without a GPU, never gets to run the default
    let plan = ["--config", &path, "plan", "--shape", "256"];
    refusal(&kiln(&plan, &[]), 2, &names);
}

#[test]
fn config_version_that_exists_is_the_one_plan_runs() {
    let (_dir, path) = config("[gemm]\nversion = \"mma_sync\"\n");
    let o = kiln(&["--config", &path, "plan", "--shape", "512"], &[]);
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("version: mma_sync"), "{t}");
    // --version still wins over the file
    let o = kiln(
        &[
            "--config",
            &path,
            "plan",
            "--shape",
            "512",
            "--version",
            "simt_tiled",
        ],
        &[],
    );
    assert!(String::from_utf8_lossy(&o.stdout).contains("version: simt_tiled"));
}

#[test]
fn config_unknown_sections_and_bad_value_types_are_refused() {
    for (text, names) in [
        (
            "[attention]\nversion = \"fa3_wgmma\"\n",
            &["`attention`", "`gemm`", "line 1"][..],
        ),
        ("[gemm]\nversion = 3\n", &["version = 3", "line 2"][..]),
        (
            "[bench]\nreps = \"many\"\n",
            &["reps = \"many\"", "line 2"][..],
        ),
        ("[jit]\ncache = \"/tmp\"\n", &["`cache`", "`cache_dir`"][..]),
    ] {
        let (_dir, path) = config(text);
        let e = refusal(&kiln(&["--config", &path, "versions"], &[]), 2, names);
        assert!(e.contains(&path), "{e}");
    }
}

#[test]
fn check_arch_sm_12_is_one_error_naming_the_architectures_kiln_compiles_for() {
    let e = refusal(
        &kiln(&["--no-store", "check", "--arch", "sm_12"], &[]),
        2,
        &["`sm_12`", "sm_80", "sm_89", "sm_90a"],
    );
    assert!(e.contains("unknown architecture"), "{e}");
    // every other command that takes --arch refuses it the same way, before compiling
    for args in [
        &["--no-store", "check", "--arch", "sm_90"][..],
        &["--no-store", "moe", "check", "--arch", "sm_12"][..],
        &["--no-store", "fp8", "check", "--arch", "sm_12"][..],
        &["inspect", "gemm", "simt_tiled", "--arch", "sm_12"][..],
    ] {
        let arch = args[args.len() - 1];
        refusal(&kiln(args, &[]), 2, &[&format!("`{arch}`"), "sm_90a"]);
    }
}

#[test]
fn inspect_of_a_hopper_version_for_ada_says_it_runs_on_sm_90a_only() {
    let o = kiln(&["inspect", "gemm", "wgmma_tma", "--arch", "sm_89"], &[]);
    refusal(&o, 2, &["wgmma_tma has no variant for sm_89", "sm_90a"]);
}

#[test]
fn kiln_nvrtc_nonexistent_is_nvrtc_missing_naming_the_variable_and_path() {
    let check = ["--no-store", "check", "--version", "simt_naive"];
    let e = refusal(
        &kiln(&check, &[("KILN_NVRTC", "/nonexistent")]),
        5,
        &["KILN_NVRTC=/nonexistent", "libnvrtc.so.13"],
    );
    assert!(e.contains("no such file or folder"), "{e}");
    // a folder without NVRTC: no fallback to the other places NVRTC might be
    let empty = tempfile::tempdir().unwrap();
    let folder = empty.path().to_str().unwrap();
    refusal(
        &kiln(&check, &[("KILN_NVRTC", folder)]),
        5,
        &[&format!("KILN_NVRTC={folder}"), "does not hold"],
    );
    // a file that is not a loadable NVRTC is found out when NVRTC is loaded
    let not_a_library = empty.path().join("libnvrtc.so.13");
    std::fs::write(&not_a_library, b"not a library").unwrap();
    let file = not_a_library.to_str().unwrap();
    refusal(
        &kiln(&check, &[("KILN_NVRTC", file)]),
        5,
        &["KILN_NVRTC names", file, "does not load"],
    );
}

#[test]
fn every_kiln_variable_with_a_bad_value_is_refused_naming_it_and_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let (d, f) = (dir.path().to_str().unwrap(), file.to_str().unwrap());
    for (name, value, says) in [
        ("KILN_WGMMA_STAGES", "many", "a whole number from 2 to 12"),
        ("KILN_WGMMA_SPLITS", "99", "a whole number from 1 to"),
        ("KILN_FLUSH", "fast", "`read` or `memset`"),
        (
            "KILN_MOE_GROUPED",
            "nosuch",
            "grouped_gemm or grouped_swapab",
        ),
        ("KILN_CACHE_DIR", f, "a file, not a folder"),
        ("KILN_STORE", d, "a folder, not a file"),
        ("KILN_PYTHON_DEPS", "/nonexistent", "does not exist"),
        ("KILN_CUBLAS", d, "does not hold the library"),
        ("KILN_NCU", "/nonexistent", "does not exist"),
        ("KILN_TEST_KERNELS", "yes", "0 or 1"),
        ("KILN_NOSUCH", "1", "no environment variable of that name"),
    ] {
        let o = kiln(&["--no-store", "versions"], &[(name, value)]);
        refusal(&o, 2, &[&format!("{name}={value}"), says]);
    }
}

#[test]
fn an_empty_kiln_variable_counts_as_unset() {
    for name in [
        "KILN_NVRTC",
        "KILN_CACHE_DIR",
        "KILN_WGMMA_STAGES",
        "KILN_FLUSH",
    ] {
        let o = kiln(&["--no-store", "versions"], &[(name, "")]);
        assert!(
            o.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}

#[test]
fn repro_files_that_are_not_cases_and_unknown_fuzz_versions_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"op\":\"gemm\",\"version\":\"mma_sync\"}\n").unwrap();
    refusal(
        &kiln(&["verify", "--repro", bad.to_str().unwrap()], &[]),
        2,
        &["repro line 1", "not a case"],
    );
    let empty = dir.path().join("empty.jsonl");
    std::fs::write(&empty, "\n").unwrap();
    refusal(
        &kiln(&["verify", "--repro", empty.to_str().unwrap()], &[]),
        2,
        &["holds no cases"],
    );
    refusal(
        &kiln(&["fuzz", "--dry-run", "--version", "nosuch"], &[]),
        2,
        &["unknown version `nosuch`"],
    );
}

#[test]
fn a_fuzz_dry_run_draws_the_same_problems_from_a_seed_without_a_gpu() {
    let run = |seed: &str| {
        let o = kiln(&["fuzz", "--dry-run", "--seed", seed, "--gemm", "50"], &[]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8_lossy(&o.stdout).to_string()
    };
    let a = run("11");
    assert!(
        a.contains("fuzz seed 11: 50 GEMM, 2000 attention, 1000 MoE, 500 FP8 problems"),
        "{a}"
    );
    assert!(a.contains("  gemm ") && a.contains("  fp8 "), "{a}");
    assert_eq!(a, run("11"));
    assert_ne!(a, run("12"));
}
