//! What `kiln report` reads from the store: every GEMM timing (with its commit and device), the
//! device's ceilings (`kiln peak`, else the H100 datasheet, labelled as such), and from those the
//! latest result per version and problem, the trend across commits and the regressions in it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::error::Result;
use crate::harness::peak::Peak;
use crate::ops::gemm::GemmProblem;
use crate::store::{Store, StoredResult};

/// A median time rise over this (in %) against the previous commit is flagged.
pub const REGRESSION_PCT: f64 = 5.0;

/// One timing of one version on one problem.
#[derive(Debug, Clone, Serialize)]
pub struct BenchPoint {
    pub run_id: i64,
    pub started: String,
    pub commit: String,
    pub device: Option<String>,
    pub version: String,
    pub problem: GemmProblem,
    pub median_ms: f64,
    pub tflops: f64,
    pub ratio_to_vendor: Option<f64>,
}

impl BenchPoint {
    /// FLOPs per byte of the problem's minimum traffic.
    pub fn intensity(&self) -> f64 {
        self.problem.flops() / self.problem.min_bytes()
    }

    fn from_stored(r: &StoredResult) -> Option<BenchPoint> {
        let median_ms = r.metrics.get("median_ms")?.as_f64()?;
        let problem: GemmProblem = serde_json::from_value(r.problem.clone()).ok()?;
        Some(BenchPoint {
            run_id: r.run_id,
            started: r.started.clone(),
            commit: r.kiln_commit.clone(),
            device: r.device.clone(),
            version: r.version.clone(),
            problem,
            median_ms,
            tflops: r
                .metrics
                .get("tflops")
                .and_then(|v| v.as_f64())
                .unwrap_or(problem.flops() / (median_ms * 1e-3) / 1e12),
            ratio_to_vendor: r.metrics.get("ratio_to_vendor").and_then(|v| v.as_f64()),
        })
    }
}

/// The ceilings the roofline is drawn against.
#[derive(Debug, Clone, Serialize)]
pub struct Roof {
    pub tflops: f64,
    pub tbps: f64,
    pub measured: bool,
    /// Where the numbers come from, said in the report.
    pub source: String,
}

impl Roof {
    pub fn datasheet() -> Roof {
        Roof { tflops: 989.0, tbps: 3.35, measured: false, source: "H100 SXM datasheet (989 dense bf16 TFLOPS, 3.35 TB/s), not measured: run `kiln peak` for this GPU's ceilings".into() }
    }

    /// The attainable TFLOPS at `intensity` FLOP/byte.
    pub fn attainable(&self, intensity: f64) -> f64 {
        self.tflops.min(intensity * self.tbps)
    }
}

/// A version/problem whose median time rose by more than [`REGRESSION_PCT`] from one commit to
/// the next.
#[derive(Debug, Clone, Serialize)]
pub struct Regression {
    pub version: String,
    pub problem: String,
    pub from_commit: String,
    pub to_commit: String,
    pub from_ms: f64,
    pub to_ms: f64,
    pub rise_pct: f64,
}

/// Everything the report shows about GEMM timings.
#[derive(Debug, Clone, Serialize)]
pub struct ReportData {
    /// Oldest first.
    pub points: Vec<BenchPoint>,
    pub roof: Roof,
    /// Commits in the order they first appear in the store.
    pub commits: Vec<String>,
}

impl ReportData {
    pub fn gather(store: &Store) -> Result<ReportData> {
        // The store lists newest first; the report wants the order results were recorded in.
        let points: Vec<BenchPoint> = store
            .results(Some("gemm"), None, 0)?
            .iter()
            .rev()
            .filter_map(BenchPoint::from_stored)
            .collect();
        let roof = store.results(Some("peak"), None, 1)?.first().and_then(|r| {
            // The bandwidth the bench's "% bw" uses too: the read ceiling, or the copy rate of a
            // peak recorded before reads were measured.
            let pk: Peak = serde_json::from_value(r.metrics.clone()).ok()?;
            Some(Roof {
                tflops: pk.gemm_bf16_tflops,
                tbps: pk.bandwidth_tbps(),
                measured: true,
                source: format!(
                    "measured by `kiln peak` on {} at {} (vendor bf16 GEMM, large read or copy)",
                    r.device.as_deref().unwrap_or("?"),
                    r.started
                ),
            })
        });
        Ok(ReportData::new(
            points,
            roof.unwrap_or_else(Roof::datasheet),
        ))
    }

    pub fn new(points: Vec<BenchPoint>, roof: Roof) -> ReportData {
        let mut commits: Vec<String> = Vec::new();
        for p in &points {
            if !commits.contains(&p.commit) {
                commits.push(p.commit.clone());
            }
        }
        ReportData {
            points,
            roof,
            commits,
        }
    }

    /// Problem labels in the order they first appear.
    pub fn problems(&self) -> Vec<String> {
        let mut v: Vec<String> = Vec::new();
        for p in &self.points {
            let l = p.problem.label();
            if !v.contains(&l) {
                v.push(l);
            }
        }
        v
    }

    /// The newest point per (problem label, version).
    pub fn latest(&self) -> BTreeMap<(String, String), &BenchPoint> {
        let mut m = BTreeMap::new();
        for p in &self.points {
            m.insert((p.problem.label(), p.version.clone()), p);
        }
        m
    }

    /// Per (version, problem): the newest median per commit, in commit order.
    pub fn trends(&self) -> BTreeMap<(String, String), Vec<(String, f64)>> {
        let mut m: BTreeMap<(String, String), BTreeMap<usize, f64>> = BTreeMap::new();
        for p in &self.points {
            let c = self
                .commits
                .iter()
                .position(|c| *c == p.commit)
                .unwrap_or(0);
            m.entry((p.version.clone(), p.problem.label()))
                .or_default()
                .insert(c, p.median_ms);
        }
        m.into_iter()
            .map(|(k, by)| {
                (
                    k,
                    by.into_iter()
                        .map(|(c, ms)| (self.commits[c].clone(), ms))
                        .collect(),
                )
            })
            .collect()
    }

    /// Rises of more than [`REGRESSION_PCT`] between consecutive commits that measured the same
    /// version and problem.
    pub fn regressions(&self) -> Vec<Regression> {
        let mut out = Vec::new();
        for ((version, problem), series) in self.trends() {
            for w in series.windows(2) {
                let rise_pct = 100.0 * (w[1].1 / w[0].1 - 1.0);
                if rise_pct > REGRESSION_PCT {
                    out.push(Regression {
                        version: version.clone(),
                        problem: problem.clone(),
                        from_commit: w[0].0.clone(),
                        to_commit: w[1].0.clone(),
                        from_ms: w[0].1,
                        to_ms: w[1].1,
                        rise_pct,
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::{DType, Layout};

    fn point(run_id: i64, commit: &str, version: &str, ms: f64) -> BenchPoint {
        let problem = GemmProblem::new(4096, 4096, 4096, Layout::RC, DType::Bf16, DType::Bf16);
        BenchPoint {
            run_id,
            started: String::new(),
            commit: commit.into(),
            device: None,
            version: version.into(),
            problem,
            median_ms: ms,
            tflops: problem.flops() / (ms * 1e-3) / 1e12,
            ratio_to_vendor: None,
        }
    }

    #[test]
    fn flags_a_rise_over_five_percent_against_the_previous_commit() {
        let d = ReportData::new(
            vec![
                point(1, "a", "v", 1.0),
                point(2, "b", "v", 1.04),
                point(3, "c", "v", 1.10),
                point(4, "c", "w", 9.0),
            ],
            Roof::datasheet(),
        );
        assert_eq!(d.commits, vec!["a", "b", "c"]);
        let r = d.regressions();
        assert_eq!(r.len(), 1, "{r:?}");
        assert_eq!(
            (r[0].from_commit.as_str(), r[0].to_commit.as_str()),
            ("b", "c")
        );
        assert!((r[0].rise_pct - 5.77).abs() < 0.01);
        assert_eq!(d.latest().len(), 2);
    }

    #[test]
    fn the_roof_is_the_lower_of_compute_and_bandwidth() {
        let r = Roof::datasheet();
        assert!(!r.measured && r.source.contains("datasheet"));
        assert_eq!(r.attainable(1e6), 989.0);
        assert!((r.attainable(10.0) - 33.5).abs() < 1e-9);
    }
}
