//! The experiment ledger (seeds/004 as data): an experiment states its hypothesis, baseline and
//! candidate, predicted change and gate before anything is measured; `run` measures both arms in
//! one process from the bench harness, twice, so the change can be held against the noise; `close`
//! records the verdict. Nothing measured is ever typed in. The tables live in the store's file.

use rusqlite::{params, OptionalExtension};
use serde::Serialize;

use super::ledger_text::{Arm, Gate, Prediction};
use crate::device::Context;
use crate::error::{Error, Result};
use crate::harness::bench::{BenchOptions, Timing};
use crate::harness::suite::bench_all;
use crate::ops::gemm::GemmProblem;
use crate::ops::registry::Registry;
use crate::store::{kiln_commit, utc_now, Store};

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS experiments (
    id          INTEGER PRIMARY KEY,
    created     TEXT NOT NULL,
    kiln_commit TEXT NOT NULL,
    title       TEXT NOT NULL,
    hypothesis  TEXT NOT NULL,
    baseline    TEXT NOT NULL,
    candidate   TEXT NOT NULL,
    problem     TEXT NOT NULL,
    prediction  TEXT NOT NULL,
    gate        TEXT NOT NULL,
    verdict     TEXT,
    note        TEXT,
    closed      TEXT
);
CREATE TABLE IF NOT EXISTS experiment_measurements (
    id               INTEGER PRIMARY KEY,
    experiment_id    INTEGER NOT NULL REFERENCES experiments(id) ON DELETE CASCADE,
    batch            INTEGER NOT NULL,
    round            INTEGER NOT NULL,
    measured         TEXT NOT NULL,
    kiln_commit      TEXT NOT NULL,
    device           TEXT,
    arm              TEXT NOT NULL,
    version          TEXT NOT NULL,
    median_ms        REAL NOT NULL,
    min_ms           REAL NOT NULL,
    max_ms           REAL NOT NULL,
    tflops           REAL NOT NULL,
    vendor_median_ms REAL
);";

/// Verdicts `close` accepts.
pub const VERDICTS: &[&str] = &["kept", "eliminated", "inconclusive"];

/// What `kiln exp new` records.
#[derive(Debug, Clone)]
pub struct NewExperiment {
    pub title: String,
    pub hypothesis: String,
    pub baseline: Arm,
    pub candidate: Arm,
    pub problem: GemmProblem,
    pub prediction: Prediction,
    pub gate: Option<Gate>,
}

/// One arm's timing in one round.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ArmTiming {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub tflops: f64,
}

impl From<&Timing> for ArmTiming {
    fn from(t: &Timing) -> Self {
        ArmTiming {
            median_ms: t.median_ms,
            min_ms: t.min_ms,
            max_ms: t.max_ms,
            tflops: t.tflops,
        }
    }
}

/// Both arms (and the vendor) timed once, in one process, on the same inputs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Round {
    pub baseline: ArmTiming,
    pub candidate: ArmTiming,
    pub vendor_median_ms: Option<f64>,
}

/// Where `run` gets its numbers: the bench harness on a GPU, or a fake in tests.
pub trait Measurer {
    fn measure(&mut self, p: &GemmProblem, baseline: &Arm, candidate: &Arm) -> Result<Round>;
    /// The device's name, kept with the measurements.
    fn device(&self) -> Option<String>;
}

/// The real measurer: `bench_all` with both versions and the vendor.
pub struct BenchMeasurer<'a> {
    pub ctx: &'a Context,
    pub registry: &'a Registry,
    pub options: BenchOptions,
}

impl Measurer for BenchMeasurer<'_> {
    fn measure(&mut self, p: &GemmProblem, baseline: &Arm, candidate: &Arm) -> Result<Round> {
        let ks = [
            self.registry.gemm_version(&baseline.version)?,
            self.registry.gemm_version(&candidate.version)?,
        ];
        for k in ks {
            k.supports(p, &self.ctx.info)
                .map_err(|reason| Error::Unsupported {
                    kernel: k.name().into(),
                    reason,
                })?;
        }
        let vendor = self.registry.gemm_version("cublas")?;
        let rows = bench_all(self.ctx, &ks, Some(vendor), &[*p], &self.options, |_| {})?;
        let row = rows
            .into_iter()
            .next()
            .ok_or_else(|| Error::invalid("the bench returned no row"))?;
        if let Some((v, why)) = row.skipped.first() {
            return Err(Error::Unsupported {
                kernel: v.clone(),
                reason: why.clone(),
            });
        }
        match row.versions.as_slice() {
            [(b, _), (c, _)] => Ok(Round {
                baseline: b.into(),
                candidate: c.into(),
                vendor_median_ms: row.vendor.as_ref().map(|v| v.median_ms),
            }),
            _ => Err(Error::invalid("the bench did not time both arms")),
        }
    }
    fn device(&self) -> Option<String> {
        Some(self.ctx.info.name.clone())
    }
}

/// An experiment with its latest measurement summarised.
#[derive(Debug, Clone, Serialize)]
pub struct Experiment {
    pub id: i64,
    pub created: String,
    pub kiln_commit: String,
    pub title: String,
    pub hypothesis: String,
    pub baseline: String,
    pub candidate: String,
    pub problem: GemmProblem,
    pub prediction: String,
    pub gate: String,
    pub verdict: Option<String>,
    pub note: Option<String>,
    pub result: Option<Outcome>,
}

/// What the latest `run` measured.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub rounds: Vec<Round>,
    pub device: Option<String>,
    pub kiln_commit: String,
    /// Speed-up of the candidate over the baseline, in % (positive: faster), from the mean of
    /// each arm's round medians.
    pub change_pct: f64,
    /// The larger of the two arms' spreads between rounds, in % of their mean: the noise floor.
    pub noise_pct: f64,
    /// Whether the measurement passed the gate (`None` without a gate).
    pub gate_passed: Option<bool>,
}

impl Outcome {
    pub fn from_rounds(
        rounds: Vec<Round>,
        gate: Option<&Gate>,
        device: Option<String>,
        kiln_commit: String,
    ) -> Outcome {
        let mean = |f: &dyn Fn(&Round) -> f64| {
            rounds.iter().map(f).sum::<f64>() / rounds.len().max(1) as f64
        };
        let spread = |f: &dyn Fn(&Round) -> f64| {
            let (lo, hi) = rounds
                .iter()
                .map(f)
                .fold((f64::INFINITY, 0.0f64), |(lo, hi), x| {
                    (lo.min(x), hi.max(x))
                });
            100.0 * (hi - lo) / mean(f)
        };
        let (b, c) = (
            mean(&|r| r.baseline.median_ms),
            mean(&|r| r.candidate.median_ms),
        );
        let change_pct = 100.0 * (b / c - 1.0);
        let noise_pct = spread(&|r| r.baseline.median_ms).max(spread(&|r| r.candidate.median_ms));
        Outcome {
            gate_passed: gate.map(|g| g.passes(change_pct)),
            rounds,
            device,
            kiln_commit,
            change_pct,
            noise_pct,
        }
    }

    pub fn within_noise(&self) -> bool {
        self.change_pct.abs() <= self.noise_pct
    }
}

/// The ledger over a store's connection.
pub struct Ledger<'s> {
    store: &'s Store,
}

impl<'s> Ledger<'s> {
    /// Creates the ledger's tables where missing.
    pub fn open(store: &'s Store) -> Result<Ledger<'s>> {
        store.conn().execute_batch(SCHEMA)?;
        Ok(Ledger { store })
    }

    /// Records a new experiment at the current commit; returns its id.
    pub fn create(&self, e: &NewExperiment) -> Result<i64> {
        let problem = serde_json::to_string(&e.problem).map_err(|e| Error::Store(e.to_string()))?;
        let gate = e.gate.as_ref().map(|g| g.text.clone()).unwrap_or_default();
        let sql = "INSERT INTO experiments (created, kiln_commit, title, hypothesis, baseline, candidate, problem, prediction, gate)
                   VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) RETURNING id";
        let args = params![
            utc_now(),
            kiln_commit(),
            e.title,
            e.hypothesis,
            e.baseline.to_string(),
            e.candidate.to_string(),
            problem,
            e.prediction.text,
            gate
        ];
        Ok(self.store.conn().query_row(sql, args, |r| r.get(0))?)
    }

    /// Measures experiment `id` with `rounds` rounds (two show the noise) and stores every timing.
    pub fn run(&self, id: i64, m: &mut dyn Measurer, rounds: usize) -> Result<Experiment> {
        let e = self.get(id)?;
        let (base, cand): (Arm, Arm) = (e.baseline.parse()?, e.candidate.parse()?);
        let batch: i64 = self.store.conn().query_row("SELECT COALESCE(MAX(batch), 0) + 1 FROM experiment_measurements WHERE experiment_id = ?1", [id], |r| r.get(0))?;
        for round in 0..rounds.max(1) {
            let r = m.measure(&e.problem, &base, &cand)?;
            for (arm, version, t) in [
                ("baseline", &base.version, r.baseline),
                ("candidate", &cand.version, r.candidate),
            ] {
                self.store.conn().execute(
                    "INSERT INTO experiment_measurements (experiment_id, batch, round, measured, kiln_commit, device, arm, version, median_ms, min_ms, max_ms, tflops, vendor_median_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                    params![id, batch, round as i64, utc_now(), kiln_commit(), m.device(), arm, version, t.median_ms, t.min_ms, t.max_ms, t.tflops, r.vendor_median_ms],
                )?;
            }
        }
        self.get(id)
    }

    /// Records the verdict of experiment `id`.
    pub fn close(&self, id: i64, verdict: &str, note: Option<&str>) -> Result<Experiment> {
        if !VERDICTS.contains(&verdict) {
            return Err(Error::invalid(format!(
                "unknown verdict `{verdict}`; use {}",
                VERDICTS.join(", ")
            )));
        }
        self.get(id)?;
        self.store.conn().execute(
            "UPDATE experiments SET verdict = ?1, note = ?2, closed = ?3 WHERE id = ?4",
            params![verdict, note, utc_now(), id],
        )?;
        self.get(id)
    }

    pub fn get(&self, id: i64) -> Result<Experiment> {
        self.list_where(Some(id))?.pop().ok_or_else(|| {
            Error::invalid(format!(
                "there is no experiment {id} in {}; `kiln exp log` lists them",
                self.store.path().display()
            ))
        })
    }

    /// Every experiment, oldest first.
    pub fn list(&self) -> Result<Vec<Experiment>> {
        self.list_where(None)
    }

    fn list_where(&self, id: Option<i64>) -> Result<Vec<Experiment>> {
        let conn = self.store.conn();
        let mut stmt = conn.prepare(
            "SELECT id, created, kiln_commit, title, hypothesis, baseline, candidate, problem, prediction, gate, verdict, note
             FROM experiments WHERE ?1 IS NULL OR id = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map([id], |r| {
            let problem: String = r.get(7)?;
            let e = Experiment {
                id: r.get(0)?,
                created: r.get(1)?,
                kiln_commit: r.get(2)?,
                title: r.get(3)?,
                hypothesis: r.get(4)?,
                baseline: r.get(5)?,
                candidate: r.get(6)?,
                problem: GemmProblem::new(
                    1,
                    1,
                    1,
                    crate::ops::gemm::Layout::RC,
                    crate::ops::gemm::DType::Bf16,
                    crate::ops::gemm::DType::Bf16,
                ),
                prediction: r.get(8)?,
                gate: r.get(9)?,
                verdict: r.get(10)?,
                note: r.get(11)?,
                result: None,
            };
            Ok((e, problem))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (mut e, problem) = row?;
            e.problem = serde_json::from_str(&problem).map_err(|err| {
                Error::Store(format!(
                    "experiment {} has an unreadable problem: {err}",
                    e.id
                ))
            })?;
            let gate = if e.gate.is_empty() {
                None
            } else {
                Some(e.gate.parse::<Gate>()?)
            };
            e.result = self.outcome(e.id, gate.as_ref())?;
            out.push(e);
        }
        Ok(out)
    }

    /// The latest batch of measurements of `id`, summarised.
    fn outcome(&self, id: i64, gate: Option<&Gate>) -> Result<Option<Outcome>> {
        let conn = self.store.conn();
        let batch: Option<i64> = conn
            .query_row(
                "SELECT MAX(batch) FROM experiment_measurements WHERE experiment_id = ?1",
                [id],
                |r| r.get(0),
            )
            .optional()?
            .flatten();
        let Some(batch) = batch else { return Ok(None) };
        let mut stmt = conn.prepare(
            "SELECT round, arm, median_ms, min_ms, max_ms, tflops, vendor_median_ms, device, kiln_commit
             FROM experiment_measurements WHERE experiment_id = ?1 AND batch = ?2 ORDER BY round, arm",
        )?;
        let mut rounds: Vec<Round> = Vec::new();
        let (mut device, mut commit) = (None, String::new());
        let zero = ArmTiming {
            median_ms: 0.0,
            min_ms: 0.0,
            max_ms: 0.0,
            tflops: 0.0,
        };
        let mut rows = stmt.query(params![id, batch])?;
        while let Some(r) = rows.next()? {
            let round: i64 = r.get(0)?;
            let arm: String = r.get(1)?;
            let t = ArmTiming {
                median_ms: r.get(2)?,
                min_ms: r.get(3)?,
                max_ms: r.get(4)?,
                tflops: r.get(5)?,
            };
            while rounds.len() <= round as usize {
                rounds.push(Round {
                    baseline: zero,
                    candidate: zero,
                    vendor_median_ms: None,
                });
            }
            let slot = &mut rounds[round as usize];
            slot.vendor_median_ms = r.get(6)?;
            if arm == "baseline" {
                slot.baseline = t
            } else {
                slot.candidate = t
            }
            device = r.get(7)?;
            commit = r.get(8)?;
        }
        Ok(Some(Outcome::from_rounds(rounds, gate, device, commit)))
    }
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;
