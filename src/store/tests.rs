//! Store tests: in memory, and on a temporary file shared by several connections.

use serde_json::json;

use super::*;

fn run(kind: &str, device: Option<DeviceInfo>) -> RunInfo {
    RunInfo {
        kind: kind.into(),
        command: format!("kiln {kind} --op gemm"),
        device,
        kiln_commit: "abc1234".into(),
    }
}

fn row(op: &str, version: &str, m: u64, passed: Option<bool>) -> ResultRow {
    ResultRow {
        op: op.into(),
        version: version.into(),
        variant: format!("{version}<128,128>"),
        problem: json!({"m": m, "n": 256, "k": 64, "layout": "RC", "in": "bf16"}),
        metrics: json!({"median_ms": 0.125, "tflops": 312.5, "times_ms": [0.12, 0.13]}),
        passed,
    }
}

#[test]
fn results_come_back_newest_first_with_their_run() {
    let s = Store::in_memory().unwrap();
    assert_eq!(s.path(), Path::new(":memory:"));
    let r1 = s
        .begin_run(&run("verify", Some(DeviceInfo::h100_sxm())))
        .unwrap();
    s.record(r1, &row("gemm", "simt_naive", 1, Some(true)))
        .unwrap();
    s.record(r1, &row("gemm", "simt_tiled", 2, Some(false)))
        .unwrap();
    s.finish_run(r1, "ok").unwrap();
    let r2 = s.begin_run(&run("bench", None)).unwrap();
    assert!(r2 > r1);
    s.record(r2, &row("gemm", "simt_tiled", 3, None)).unwrap();

    let all = s.results(None, None, 0).unwrap();
    let ms: Vec<u64> = all
        .iter()
        .map(|r| r.problem["m"].as_u64().unwrap())
        .collect();
    assert_eq!(ms, [3, 2, 1]);

    let newest = &all[0];
    assert_eq!((newest.run_id, newest.kind.as_str()), (r2, "bench"));
    assert_eq!(newest.device, None);
    assert_eq!(newest.passed, None);
    assert_eq!(newest.kiln_commit, "abc1234");
    assert_eq!(newest.metrics, row("gemm", "simt_tiled", 3, None).metrics);
    assert_eq!(newest.variant, "simt_tiled<128,128>");
    assert_eq!(newest.started.len(), 20, "{}", newest.started);

    let oldest = &all[2];
    assert_eq!(
        oldest.device.as_deref(),
        Some(DeviceInfo::h100_sxm().name.as_str())
    );
    assert_eq!(oldest.passed, Some(true));
    assert_eq!(all[1].passed, Some(false));

    assert_eq!(s.results(None, None, 2).unwrap().len(), 2);
    assert_eq!(
        s.results(Some("gemm"), Some("simt_tiled"), 10)
            .unwrap()
            .len(),
        2
    );
    assert_eq!(s.results(None, Some("simt_naive"), 10).unwrap().len(), 1);
    assert!(s.results(Some("attention"), None, 10).unwrap().is_empty());
}

#[test]
fn finish_run_sets_status_and_time() {
    let s = Store::in_memory().unwrap();
    let id = s.begin_run(&run("check", None)).unwrap();
    assert_eq!(s.run_status(id).unwrap().as_deref(), Some("running"));
    s.finish_run(id, "failed").unwrap();
    assert_eq!(s.run_status(id).unwrap().as_deref(), Some("failed"));
    let finished: Option<String> = s
        .conn
        .query_row("SELECT finished FROM runs WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .unwrap();
    assert!(finished.unwrap().ends_with('Z'));
    assert_eq!(s.run_status(id + 1).unwrap(), None);
}

#[test]
fn device_is_kept_whole_as_json() {
    let s = Store::in_memory().unwrap();
    let dev = DeviceInfo::h100_sxm();
    let id = s.begin_run(&run("bench", Some(dev.clone()))).unwrap();
    let text: String = s
        .conn
        .query_row("SELECT device FROM runs WHERE id = ?1", [id], |r| r.get(0))
        .unwrap();
    assert_eq!(serde_json::from_str::<DeviceInfo>(&text).unwrap(), dev);
}

#[test]
fn unknown_run_is_an_error_that_names_it() {
    let s = Store::in_memory().unwrap();
    let e = s
        .record(42, &row("gemm", "simt_tiled", 1, None))
        .unwrap_err();
    assert!(matches!(e, Error::Store(_)));
    assert!(e.to_string().contains("no run 42"), "{e}");
    let e = s.finish_run(7, "ok").unwrap_err();
    assert!(e.to_string().contains("no run 7"), "{e}");
}

#[test]
fn file_store_shared_by_two_connections() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nested").join("folder").join("kiln.db");
    let a = Store::open(&path).unwrap();
    let b = Store::open(&path).unwrap();
    assert_eq!(b.path(), path.as_path());
    let mode: String = a
        .conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");

    let ra = a.begin_run(&run("bench", None)).unwrap();
    let rb = b.begin_run(&run("verify", None)).unwrap();
    assert_ne!(ra, rb);
    for i in 0..5 {
        a.record(ra, &row("gemm", "simt_tiled", 2 * i, None))
            .unwrap();
        b.record(rb, &row("gemm", "simt_naive", 2 * i + 1, Some(true)))
            .unwrap();
    }
    a.finish_run(ra, "ok").unwrap();
    // Each connection sees the other's writes at once.
    assert_eq!(a.run_status(rb).unwrap().as_deref(), Some("running"));
    let ms: Vec<u64> = b
        .results(None, None, 0)
        .unwrap()
        .iter()
        .map(|r| r.problem["m"].as_u64().unwrap())
        .collect();
    assert_eq!(ms, (0..10).rev().collect::<Vec<_>>());
    drop((a, b));

    // Reopening finds everything, and the schema is not applied twice.
    let c = Store::open(&path).unwrap();
    assert_eq!(
        c.results(Some("gemm"), Some("simt_naive"), 0)
            .unwrap()
            .len(),
        5
    );
    let v: i64 = c
        .conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(v, SCHEMA_VERSION);
}

#[test]
fn concurrent_writers_wait_instead_of_failing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kiln.db");
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let path = path.clone();
            std::thread::spawn(move || {
                let s = Store::open(&path).unwrap();
                let id = s.begin_run(&run("bench", None)).unwrap();
                for i in 0..25 {
                    s.record(id, &row("gemm", &format!("v{t}"), i, None))
                        .unwrap();
                }
                s.finish_run(id, "ok").unwrap();
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    let s = Store::open(&path).unwrap();
    assert_eq!(s.results(None, None, 0).unwrap().len(), 100);
    assert_eq!(s.results(None, Some("v3"), 0).unwrap().len(), 25);
}

#[test]
fn store_from_a_newer_kiln_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kiln.db");
    drop(Store::open(&path).unwrap());
    Connection::open(&path)
        .unwrap()
        .pragma_update(None, "user_version", 99)
        .unwrap();
    let e = Store::open(&path).unwrap_err();
    assert!(e.to_string().contains("schema version 99"), "{e}");
}

#[test]
fn a_file_that_is_not_a_store_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notes.txt");
    std::fs::write(
        &path,
        "this is not a SQLite database, not even close. ".repeat(40),
    )
    .unwrap();
    let e = Store::open(&path).unwrap_err();
    assert!(matches!(e, Error::Store(_)));
    assert!(e.to_string().contains("notes.txt"), "{e}");
}

#[test]
fn default_path_order() {
    let os = |s: &str| Some(OsString::from(s));
    assert_eq!(
        path_from(os("/x/k.db"), os("/data"), os("/home/u")),
        PathBuf::from("/x/k.db")
    );
    assert_eq!(
        path_from(None, os("/data"), os("/home/u")),
        PathBuf::from("/data/kiln/kiln.db")
    );
    assert_eq!(
        path_from(os(""), os("relative"), os("/home/u")),
        PathBuf::from("/home/u/.local/share/kiln/kiln.db")
    );
    assert_eq!(path_from(None, None, None), PathBuf::from(".kiln/kiln.db"));
}

#[test]
fn commit_is_never_empty() {
    assert!(!kiln_commit().is_empty());
}
