//! Ledger tests on an in-memory store, with a fake measurer in place of the GPU.

use super::*;
use crate::ops::gemm::{DType, Layout};
use crate::tools::ledger_text::{eliminated, iteration_log, markdown};

/// Returns scripted rounds in order and counts the calls.
struct Scripted {
    rounds: Vec<(f64, f64)>,
    calls: usize,
}

impl Measurer for Scripted {
    fn measure(&mut self, _p: &GemmProblem, _b: &Arm, _c: &Arm) -> Result<Round> {
        let (b, c) = self.rounds[self.calls];
        self.calls += 1;
        let t = |ms: f64| ArmTiming {
            median_ms: ms,
            min_ms: ms * 0.99,
            max_ms: ms * 1.02,
            tflops: 1.0 / ms,
        };
        Ok(Round {
            baseline: t(b),
            candidate: t(c),
            vendor_median_ms: Some(0.5),
        })
    }
    fn device(&self) -> Option<String> {
        Some("Fake H100".into())
    }
}

fn new(title: &str, predict: &str, gate: Option<&str>) -> NewExperiment {
    NewExperiment {
        title: title.into(),
        hypothesis: "the epilogue is a visible share of the time".into(),
        baseline: "wgmma_tma_ws".parse().unwrap(),
        candidate: "wgmma_tma_ws:epilogue=tma".parse().unwrap(),
        problem: GemmProblem::new(4096, 4096, 4096, Layout::RC, DType::Bf16, DType::Bf16),
        prediction: predict.parse().unwrap(),
        gate: gate.map(|g| g.parse().unwrap()),
    }
}

#[test]
fn run_measures_both_arms_twice_and_judges_the_gate() {
    let store = Store::in_memory().unwrap();
    let ledger = Ledger::open(&store).unwrap();
    let id = ledger
        .create(&new("TMA store epilogue", "+8%", Some("abort if < 3%")))
        .unwrap();
    let e = ledger.get(id).unwrap();
    assert!(e.result.is_none());
    assert_eq!(e.kiln_commit, kiln_commit());
    let mut m = Scripted {
        rounds: vec![(1.00, 0.98), (1.01, 0.97)],
        calls: 0,
    };
    let e = ledger.run(id, &mut m, 2).unwrap();
    assert_eq!(m.calls, 2);
    let o = e.result.expect("measured");
    assert_eq!(o.rounds.len(), 2);
    assert_eq!(o.device.as_deref(), Some("Fake H100"));
    // baseline mean 1.005, candidate 0.975: +3.08%
    assert!((o.change_pct - 3.077).abs() < 0.01, "{}", o.change_pct);
    // candidate 0.97..0.98 around 0.975: 1.03% between rounds, the larger spread
    assert!((o.noise_pct - 1.026).abs() < 0.01, "{}", o.noise_pct);
    assert_eq!(o.gate_passed, Some(true));
    assert!(!o.within_noise());
    assert_eq!(o.rounds[1].vendor_median_ms, Some(0.5));
}

#[test]
fn a_second_run_replaces_the_first_in_the_summary() {
    let store = Store::in_memory().unwrap();
    let ledger = Ledger::open(&store).unwrap();
    let id = ledger
        .create(&new("stages 4 -> 6", "1.5x", Some("abort if < 3%")))
        .unwrap();
    let mut m = Scripted {
        rounds: vec![(1.0, 0.5), (1.0, 0.5), (1.0, 1.3), (1.0, 1.3)],
        calls: 0,
    };
    ledger.run(id, &mut m, 2).unwrap();
    let e = ledger.run(id, &mut m, 2).unwrap();
    let o = e.result.unwrap();
    assert!((o.change_pct + 23.08).abs() < 0.01, "{}", o.change_pct);
    assert_eq!(o.gate_passed, Some(false));
    let n: i64 = store
        .conn()
        .query_row("SELECT COUNT(*) FROM experiment_measurements", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(n, 8);
}

#[test]
fn close_records_verdicts_and_the_log_shows_the_graveyard() {
    let store = Store::in_memory().unwrap();
    let ledger = Ledger::open(&store).unwrap();
    let a = ledger
        .create(&new("pipeline stages", "1.5x", Some("abort if < 3%")))
        .unwrap();
    let b = ledger
        .create(&new("TMA store epilogue", "+5%", None))
        .unwrap();
    ledger
        .run(
            a,
            &mut Scripted {
                rounds: vec![(1.0, 1.30), (1.0, 1.31)],
                calls: 0,
            },
            2,
        )
        .unwrap();
    ledger
        .close(a, "eliminated", Some("30% slower: compute-bound"))
        .unwrap();
    assert!(ledger.close(b, "maybe", None).is_err());
    assert!(ledger.close(99, "kept", None).is_err());
    let all = ledger.list().unwrap();
    assert_eq!(all.len(), 2);
    let log = iteration_log(&all).markdown();
    assert!(
        log.contains("pipeline stages") && log.contains("eliminated") && log.contains("open"),
        "{log}"
    );
    assert!(log.contains("abort if < 3%: ABORT"), "{log}");
    assert!(log.contains("not measured"), "{log}");
    let g = eliminated(&all).markdown();
    assert!(
        g.contains("1.5x") && g.contains("-23.") && g.contains("compute-bound"),
        "{g}"
    );
    assert!(!g.contains("TMA store"), "{g}");
    let md = markdown(&all, "##");
    assert!(
        md.contains("## Iteration log") && md.contains("## Eliminated ideas"),
        "{md}"
    );
}

#[test]
fn the_tables_survive_reopening_a_file_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.db");
    let id = {
        let store = Store::open(&path).unwrap();
        Ledger::open(&store)
            .unwrap()
            .create(&new("x", "+1%", None))
            .unwrap()
    };
    let store = Store::open(&path).unwrap();
    let e = Ledger::open(&store).unwrap().get(id).unwrap();
    assert_eq!(e.title, "x");
    assert_eq!(e.problem.m, 4096);
}
