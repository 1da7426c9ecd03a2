//! The tuner on a machine without a GPU: the worker isolation exercised with the test-only fake
//! worker (`KILN_TUNE_FAKE`: a planted hang and a planted crash must be recorded and skipped, and
//! the run must finish), resuming a run, the replay of a recorded landscape, and the test-only
//! planted kernels staying out of the normal registry.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::text;
use kiln::ops::gemm::{DType, GemmProblem, Layout};
use kiln::tune::landscape::Landscape;
use kiln::tune::space::{Config, Param};
use kiln::tune::{Outcome, Status};

fn kiln(args: &[&str], store: &Path, envs: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kiln"));
    c.args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("KILN_STORE", store)
        .env_remove("KILN_TUNE_FAKE")
        .env_remove("KILN_TEST_KERNELS");
    if std::env::var_os("KILN_CACHE_DIR").is_none() {
        c.env(
            "KILN_CACHE_DIR",
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/kiln-jit-cache"),
        );
    }
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().expect("kiln runs")
}

fn statuses(store: &Path, run: i64) -> Vec<Status> {
    let s = kiln::store::Store::open(store).unwrap();
    kiln::tune::record::results(s.conn(), run)
        .unwrap()
        .iter()
        .map(|o| o.status)
        .collect()
}

fn count(v: &[Status], s: Status) -> usize {
    v.iter().filter(|&&x| x == s).count()
}

#[test]
fn planted_hang_and_crash_are_recorded_and_skipped_and_the_run_finishes_and_resumes() {
    require_nvrtc!();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("kiln.db");
    let args = [
        "tune",
        "--version",
        "mma_sync",
        "--shape",
        "256x256x256",
        "--search",
        "exhaustive",
        "--budget",
        "8",
        "--timeout-floor",
        "1",
    ];
    let started = std::time::Instant::now();
    let o = kiln(&args, &store, &[("KILN_TUNE_FAKE", "hang@3,crash@5")]);
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    // The watchdog scales from the best time so far, which the worker thread must see before
    // it takes the next job (a race once left the hang a 32 s deadline instead of about 2 s).
    assert!(
        started.elapsed().as_secs() < 20,
        "took {:?}:\n{t}",
        started.elapsed()
    );
    assert!(t.contains("killed the worker"), "{t}");
    assert!(t.contains("the worker died"), "{t}");
    assert!(t.contains("best: BM="), "{t}");
    let got = statuses(&store, 1);
    assert_eq!(got.len(), 8, "{got:?}");
    assert_eq!(count(&got, Status::Timeout), 1, "{got:?}");
    assert_eq!(count(&got, Status::Crash), 1, "{got:?}");
    assert_eq!(count(&got, Status::Ok), 6, "{got:?}");

    // Resuming measures nothing again: a worker that would crash on its first job is never used.
    let o = kiln(
        &["tune", "--resume", "1", "--timeout-floor", "1"],
        &store,
        &[("KILN_TUNE_FAKE", "crash@0")],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert_eq!(statuses(&store, 1), got);

    // The best config landed in the tuning cache.
    let s = kiln::store::Store::open(&store).unwrap();
    let cached = kiln::tune::cache::load_all(s.conn()).unwrap();
    assert_eq!(cached.len(), 1);
    assert!(cached
        .keys()
        .all(|k| k.version == "mma_sync" && k.class == "m<=2^8,n<=2^8,k<=2^8"));
}

#[test]
fn a_planted_wrong_result_is_recorded_as_wrong() {
    require_nvrtc!();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("kiln.db");
    let o = kiln(
        &[
            "tune",
            "--version",
            "mma_sync",
            "--shape",
            "256x256x256",
            "--search",
            "evo",
            "--budget",
            "4",
            "--seed",
            "9",
            "--timeout-floor",
            "1",
        ],
        &store,
        &[("KILN_TUNE_FAKE", "wrong@0")],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    let got = statuses(&store, 1);
    assert_eq!(got.len(), 4, "{got:?}");
    assert_eq!(count(&got, Status::Wrong), 1, "{got:?}");
}

#[test]
fn tune_refuses_without_a_version_or_shape() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("kiln.db");
    let o = kiln(&["tune", "--shape", "64"], &store, &[]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("--version"));
    let o = kiln(
        &["tune", "--version", "simt_naive", "--shape", "64"],
        &store,
        &[("KILN_TUNE_FAKE", "hang@99")],
    );
    assert_eq!(o.status.code(), Some(3), "{}", text(&o));
    assert!(text(&o).contains("no parameter space"), "{}", text(&o));
}

#[test]
fn planted_kernels_appear_only_with_kiln_test_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("kiln.db");
    let normal = text(&kiln(&["versions"], &store, &[]));
    assert!(!normal.contains("planted"), "{normal}");
    let test = text(&kiln(&["versions"], &store, &[("KILN_TEST_KERNELS", "1")]));
    assert!(test.contains("planted"), "{test}");
}

/// A GEMM-like landscape: a bowl over tile area and stages, and failures in one corner.
fn synthetic_landscape() -> Landscape {
    let params = vec![
        Param {
            name: "BM".into(),
            values: vec![64, 128, 256],
            launch: false,
        },
        Param {
            name: "BN".into(),
            values: vec![64, 128, 256],
            launch: false,
        },
        Param {
            name: "STAGES".into(),
            values: vec![2, 3, 4, 5, 6],
            launch: false,
        },
        Param {
            name: "GROUP_M".into(),
            values: vec![4, 8, 16],
            launch: false,
        },
    ];
    let mut outcomes = Vec::new();
    for bm in [64, 128, 256] {
        for bn in [64, 128, 256] {
            for st in [2, 3, 4, 5, 6] {
                for g in [4, 8, 16] {
                    let c = Config::new(&[("BM", bm), ("BN", bn), ("STAGES", st), ("GROUP_M", g)]);
                    let o = if bm * bn > 128 * 256 {
                        Outcome::new(c, Status::Rejected, "spills")
                    } else {
                        let area = ((bm * bn) as f64).log2();
                        let ms = 1.0
                            + 0.1 * (area - 15.0).powi(2)
                            + 0.04 * (st as f64 - 4.0).powi(2)
                            + 0.003 * (g as f64).log2();
                        let mut o = Outcome::new(c, Status::Ok, "");
                        o.median_ms = Some(ms);
                        o
                    };
                    outcomes.push(o);
                }
            }
        }
    }
    Landscape {
        version: "mma_sync".into(),
        problem: GemmProblem::new(4096, 4096, 4096, Layout::RC, DType::Bf16, DType::Bf16).into(),
        device: None,
        params,
        outcomes,
    }
}

#[test]
fn replay_reports_how_often_evolution_lands_near_the_best() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("landscape.json");
    synthetic_landscape().save(&path).unwrap();
    let o = kiln(
        &[
            "tune-replay",
            "--landscape",
            path.to_str().unwrap(),
            "--trials",
            "50",
        ],
        &dir.path().join("kiln.db"),
        &[],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("within 2% of the exhaustive best"), "{t}");
    let o = kiln(
        &[
            "--json",
            "tune-replay",
            "--landscape",
            path.to_str().unwrap(),
            "--trials",
            "50",
        ],
        &dir.path().join("kiln.db"),
        &[],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["summary"]["trials"], 50);
    assert_eq!(v["summary"]["budget"], 20); // 15% of 135 configs
    assert!(v["summary"]["hit_rate"].as_f64().unwrap() >= 0.9, "{v}");
}

#[test]
fn several_gpus_get_one_worker_each_and_share_the_jobs() {
    require_nvrtc!();
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("kiln.db");
    let o = kiln(
        &[
            "tune",
            "--version",
            "mma_sync",
            "--shape",
            "256x256x256",
            "--search",
            "exhaustive",
            "--budget",
            "12",
            "--gpus",
            "0,1",
            "--timeout-floor",
            "1",
        ],
        &store,
        &[("KILN_TUNE_FAKE", "hang@4")],
    );
    let t = text(&o);
    assert!(o.status.success(), "{t}");
    assert!(t.contains("2 worker(s)"), "{t}");
    let s = kiln::store::Store::open(&store).unwrap();
    let rows = kiln::tune::record::results(s.conn(), 1).unwrap();
    assert_eq!(rows.len(), 12);
    assert_eq!(
        rows.iter().filter(|o| o.status == Status::Timeout).count(),
        1
    );
    // Each GPU's worker took at least one job: measured, or the planted hang (a loaded machine
    // may start one worker late, and it may take the hang as its first job and be killed for it
    // while the other takes everything else).
    for gpu in [0, 1] {
        assert!(
            rows.iter().any(|o| o.gpu == Some(gpu)),
            "no job went to GPU {gpu}: {rows:?}"
        );
    }
    assert!(
        rows.iter()
            .filter(|o| o.status == Status::Ok)
            .all(|o| o.reason.ends_with(&format!("GPU {}", o.gpu.unwrap()))),
        "{rows:?}"
    );
    // Every measured candidate names its GPU; the leaders were timed again on GPU 0 alone,
    // together.
    let measured: Vec<_> = rows.iter().filter(|o| o.status == Status::Ok).collect();
    assert!(measured.iter().all(|o| o.gpu.is_some()), "{rows:?}");
    let mut leaders = measured.clone();
    leaders.sort_by(|a, b| a.time().total_cmp(&b.time()));
    let finalists = kiln::tune::run::FINALISTS.min(leaders.len());
    assert!(
        leaders[..finalists]
            .iter()
            .all(|o| o.gpu == Some(0) && o.reason.starts_with("timed again with the")),
        "{rows:?}"
    );
}

/// `--gpus` naming a device this machine lacks is one sentence and exit 2, before any worker
/// starts.
#[test]
fn gpus_naming_a_missing_device_is_refused() {
    require_gpu!();
    let dir = tempfile::tempdir().unwrap();
    let o = kiln(
        &[
            "--no-store",
            "tune",
            "--version",
            "mma_sync",
            "--shape",
            "256x256x256",
            "--gpus",
            "0,99",
        ],
        &dir.path().join("kiln.db"),
        &[],
    );
    let t = text(&o);
    assert_eq!(o.status.code(), Some(2), "{t}");
    assert!(
        t.contains("--gpus `0,99` names GPU 99, but this machine has"),
        "{t}"
    );
}

/// The CLI gives its dispatch the store's tuned configs, and none with `KILN_NO_TUNED=1`.
#[test]
fn plan_follows_the_stores_tuned_config_unless_tuning_is_off() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("kiln.db");
    // the GPU `kiln plan` plans for: the one present, else an H100
    let dev = kiln::device::init()
        .ok()
        .and_then(|_| kiln::device::DeviceInfo::query(0).ok())
        .unwrap_or_else(kiln::device::DeviceInfo::h100_sxm);
    let p = GemmProblem::new(4096, 4096, 4096, Layout::RC, DType::Bf16, DType::Bf16);
    let tuned = "BM=64,BN=128,BK=64,STAGES=3,GROUP_M=4";
    let s = kiln::store::Store::open(&store).unwrap();
    kiln::tune::cache::save(
        s.conn(),
        &kiln::tune::cache::TuneKey::new(&dev, "gemm", "mma_sync", &p),
        &Config::parse(tuned).unwrap(),
        Some(400.0),
        None,
    )
    .unwrap();
    drop(s);
    let config = |envs: &[(&str, &str)]| {
        let o = kiln(
            &["--json", "plan", "--version", "mma_sync", "--shape", "4096"],
            &store,
            envs,
        );
        assert!(o.status.success(), "{}", text(&o));
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("plan --json is JSON");
        v["config"].as_str().unwrap().to_string()
    };
    assert_eq!(config(&[("KILN_NO_TUNED", "0")]), tuned);
    let heuristic = config(&[("KILN_NO_TUNED", "1")]);
    assert_ne!(heuristic, tuned);
    assert!(heuristic.starts_with("BM=128,"), "{heuristic}");
}

/// `kiln tune attn --backward` (fake worker, no GPU): every version that takes the problem gets a
/// run of its knobs, each best lands in the tuning cache under the backward's key, and the plan
/// then runs the fastest with its knobs, or the rule's pick with `KILN_NO_TUNED=1`.
#[test]
fn tune_attn_backward_tunes_every_version_and_the_plan_follows_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let store = dir.path().join("kiln.db");
    let shape = [
        "--batch", "2", "--heads", "16", "--seqlen", "8192", "--dim", "128",
    ];
    let mut args = vec![
        "--json",
        "tune",
        "attn",
        "--backward",
        "--search",
        "exhaustive",
    ];
    args.extend(shape);
    let o = kiln(&args, &store, &[("KILN_TUNE_FAKE", "wrong@1")]);
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("tune --json is JSON");
    let runs = v["runs"].as_array().unwrap();
    let versions: Vec<&str> = runs
        .iter()
        .map(|r| r["version"].as_str().unwrap())
        .collect();
    assert!(versions.contains(&"bwd_fa3_tail"), "{versions:?}");
    assert!(versions.contains(&"bwd_fa2_mma_sync"), "{versions:?}");
    // the default's space: the split's six settings, all timed (one planted wrong in the first run)
    let tail = runs
        .iter()
        .find(|r| r["version"] == "bwd_fa3_tail")
        .unwrap();
    assert_eq!(tail["report"]["space_size"], 6, "{tail}");
    // every run recorded, every best cached under the backward's key
    let s = kiln::store::Store::open(&store).unwrap();
    let cached = kiln::tune::cache::load_entries(s.conn()).unwrap();
    assert_eq!(cached.len(), versions.len());
    assert!(cached.keys().all(|k| k.op == "attention_backward"));
    drop(s);
    // every version's best timed again together; the plan runs the fastest of those with its
    // knobs; untuned, the rule's pick
    assert_eq!(v["timed_together"], true);
    let together = v["versions"].as_array().unwrap();
    assert_eq!(together.len(), versions.len());
    let fastest = together
        .iter()
        .min_by(|a, b| {
            let t = |r: &serde_json::Value| r["median_ms"].as_f64().unwrap();
            t(a).total_cmp(&t(b))
        })
        .unwrap();
    assert_eq!(v["dispatch"], fastest["version"]);
    let plan = |envs: &[(&str, &str)]| {
        let mut a = vec!["--json", "plan", "--op", "attn-backward"];
        a.extend(shape);
        let o = kiln(&a, &store, envs);
        assert!(o.status.success(), "{}", text(&o));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).expect("plan --json is JSON")
    };
    let tuned = plan(&[]);
    assert_eq!(tuned["version"], fastest["version"]);
    if fastest["config"] != "(no knobs)" {
        assert_eq!(tuned["tuned_knobs"], fastest["config"], "{tuned}");
    }
    let untuned = plan(&[("KILN_NO_TUNED", "1")]);
    assert_eq!(untuned["version"], "bwd_fa3_tail");
    assert!(untuned["tuned_knobs"].is_null());
    // the backward's flags belong to attn
    let o = kiln(&["tune", "--backward", "--shape", "64"], &store, &[]);
    assert!(!o.status.success());
    assert!(
        text(&o).contains("kiln tune attn --backward"),
        "{}",
        text(&o)
    );
}
