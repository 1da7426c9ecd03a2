//! `kiln bench --set random`: distinct GEMM problems drawn from a seed ([`GemmDraw::bench`]), each
//! shape's result over the passes that timed it, and the distribution of its speed ratios to the vendor.

use serde::Serialize;

use super::bench::{stats, Timing};
use super::draw::{Draw, GemmDraw};
use super::suite::{geomean, BenchRow};
use crate::ops::gemm::GemmProblem;

/// The ratio to the vendor under which a shape counts as a loss (issue 36's target: none below).
pub const FLOOR: f64 = 0.90;

/// The geometric mean of the ratios the target asks for.
pub const TARGET_GEOMEAN: f64 = 1.0;

/// `count` distinct problems worth timing drawn from `seed`, in the order drawn: the same seed
/// gives the same list on every machine, and a list of `count` is the start of a longer one.
pub fn problems(count: usize, seed: u64) -> Vec<GemmProblem> {
    let (mut draw, kind) = (Draw::new(seed), GemmDraw::bench());
    let mut out: Vec<GemmProblem> = Vec::with_capacity(count);
    while out.len() < count {
        let p = draw.gemm(&kind);
        if !out.contains(&p) {
            out.push(p);
        }
    }
    out
}

/// One drawn shape timed for one version (or the dispatch's choice): medians over its passes.
#[derive(Debug, Clone, Serialize)]
pub struct ShapeResult {
    /// Its place in the draw, from 0.
    pub index: usize,
    pub problem: GemmProblem,
    /// The version that ran it; `None` where none did ([`ShapeResult::skipped`] says why).
    pub version: Option<String>,
    /// The launch config of that version (its tile), where the caller knows it.
    pub config: Option<String>,
    pub kiln_us: Option<f64>,
    pub vendor_us: Option<f64>,
    /// The vendor's time over kiln's (above 1: kiln is faster), the median of the passes' ratios.
    pub ratio: Option<f64>,
    pub passes: usize,
    pub vendor_algorithm: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// Each of `problems`' result from `rows` (of one or more passes), in draw order: the timing of
/// `version` in each row, or with `None` the row's first (a dispatched bench times one per row).
pub fn shape_results(
    rows: &[BenchRow],
    problems: &[GemmProblem],
    version: Option<&str>,
) -> Vec<ShapeResult> {
    let is_timed = |t: &Timing| version.is_none_or(|v| t.version == v);
    let median = |mut v: Vec<f64>| (!v.is_empty()).then(|| stats(&mut v).0);
    problems
        .iter()
        .enumerate()
        .map(|(index, p)| {
            let mine: Vec<&BenchRow> = rows.iter().filter(|r| r.problem == *p).collect();
            let timed: Vec<(&Timing, Option<f64>)> = mine
                .iter()
                .filter_map(|r| r.versions.iter().find(|(t, _)| is_timed(t)))
                .map(|(t, ratio)| (t, *ratio))
                .collect();
            let skipped = timed.is_empty().then(|| {
                let why: Vec<String> = mine
                    .iter()
                    .flat_map(|r| &r.skipped)
                    .filter(|(v, _)| version.is_none_or(|want| v == want))
                    .map(|(v, r)| format!("{v}: {r}"))
                    .collect();
                match why.first() {
                    Some(first) => first.clone(),
                    None => "not timed".into(),
                }
            });
            ShapeResult {
                index,
                problem: *p,
                version: timed.first().map(|(t, _)| t.version.clone()),
                config: None,
                kiln_us: median(timed.iter().map(|(t, _)| t.median_ms * 1e3).collect()),
                vendor_us: median(
                    mine.iter()
                        .filter_map(|r| r.vendor.as_ref())
                        .map(|t| t.median_ms * 1e3)
                        .collect(),
                ),
                ratio: median(timed.iter().filter_map(|(_, r)| *r).collect()),
                passes: mine.len(),
                vendor_algorithm: mine.iter().find_map(|r| r.vendor_algorithm.clone()),
                skipped,
            }
        })
        .collect()
}

/// The distribution of speed ratios to the vendor over a set of shapes.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RatioDistribution {
    pub count: usize,
    pub min: f64,
    /// The 5th percentile (linear between the nearest ranks, as numpy's default).
    pub p5: f64,
    pub median: f64,
    pub geomean: f64,
    /// How many are below [`FLOOR`].
    pub below_floor: usize,
    pub floor: f64,
    /// Where in the input the lowest `worst_n` are, lowest first (ties in input order).
    pub worst: Vec<usize>,
}

impl RatioDistribution {
    /// Whether the target holds: geometric mean at least [`TARGET_GEOMEAN`], none below [`FLOOR`].
    pub fn meets_target(&self) -> bool {
        self.geomean >= TARGET_GEOMEAN && self.below_floor == 0
    }
}

/// The distribution of `ratios` (positive and finite); `None` for none.
pub fn distribution(ratios: &[f64], worst_n: usize) -> Option<RatioDistribution> {
    if ratios.is_empty() {
        return None;
    }
    let mut sorted = ratios.to_vec();
    sorted.sort_by(f64::total_cmp);
    let mut order: Vec<usize> = (0..ratios.len()).collect();
    order.sort_by(|&a, &b| ratios[a].total_cmp(&ratios[b]));
    order.truncate(worst_n);
    Some(RatioDistribution {
        count: ratios.len(),
        min: sorted[0],
        p5: percentile(&sorted, 0.05),
        median: percentile(&sorted, 0.5),
        geomean: geomean(ratios),
        below_floor: ratios.iter().filter(|&&r| r < FLOOR).count(),
        floor: FLOOR,
        worst: order,
    })
}

/// The `q` quantile (0 to 1) of ascending, non-empty `sorted`, linear between the nearest ranks.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    let pos = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (pos - lo as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::{DType, Layout};

    #[test]
    fn the_draw_is_distinct_reproducible_and_a_prefix_of_a_longer_one() {
        let a = problems(300, 7);
        assert_eq!(a.len(), 300);
        assert_eq!(a, problems(300, 7));
        assert_eq!(a[..50], problems(50, 7)[..]);
        assert_ne!(a, problems(300, 8));
        for (i, p) in a.iter().enumerate() {
            assert!(!a[..i].contains(p), "{} drawn twice", p.label());
            p.validate().unwrap();
            assert!((p.m * p.n * p.k) as f64 >= 5.0e8);
        }
        for l in Layout::ALL {
            assert!(a.iter().any(|p| p.layout == l));
        }
        for d in DType::INPUTS {
            assert!(a.iter().any(|p| p.input == d && p.output == d));
        }
    }

    #[test]
    fn percentiles_interpolate_between_ranks() {
        let v: Vec<f64> = (0..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.05), 5.0);
        assert_eq!(percentile(&v, 0.5), 50.0);
        assert_eq!(percentile(&[1.0, 2.0, 3.0, 4.0], 0.5), 2.5);
        assert!((percentile(&[1.0, 2.0, 3.0, 4.0], 0.05) - 1.15).abs() < 1e-12);
        assert_eq!(percentile(&[3.0], 0.05), 3.0);
        assert_eq!(percentile(&[1.0, 9.0], 1.0), 9.0);
    }

    #[test]
    fn the_distribution_says_min_p5_median_geomean_losses_and_the_worst() {
        let ratios = [1.2, 0.5, 2.0, 0.9, 0.89, 1.0];
        let d = distribution(&ratios, 3).unwrap();
        assert_eq!(d.count, 6);
        assert_eq!(d.min, 0.5);
        assert!((d.p5 - (0.5 + 0.39 * 0.25)).abs() < 1e-12);
        assert!((d.median - 0.95).abs() < 1e-12);
        let g = (1.2f64 * 0.5 * 2.0 * 0.9 * 0.89 * 1.0).powf(1.0 / 6.0);
        assert!((d.geomean - g).abs() < 1e-12);
        assert_eq!(d.below_floor, 2, "0.5 and 0.89; 0.90 itself is not below");
        assert_eq!(d.worst, [1, 4, 3]);
        assert!(!d.meets_target());
        let fine = distribution(&[1.1, 0.95, 1.0], 10).unwrap();
        assert_eq!(fine.worst, [1, 2, 0], "fewer than asked: all of them");
        assert!(fine.meets_target());
        assert!(!distribution(&[0.99, 0.99], 1).unwrap().meets_target());
        assert!(distribution(&[], 10).is_none());
    }

    fn timing(version: &str, p: GemmProblem, ms: f64) -> Timing {
        Timing {
            version: version.into(),
            problem: p,
            median_ms: ms,
            min_ms: ms,
            max_ms: ms,
            reps: 1,
            tflops: 1.0,
            gbps: 1.0,
            host_us: None,
        }
    }

    fn row(p: GemmProblem, pass: usize, ours: Option<(&str, f64)>, vendor_ms: f64) -> BenchRow {
        BenchRow {
            problem: p,
            vendor: Some(timing("cublas", p, vendor_ms)),
            vendor_algorithm: Some("algo 7".into()),
            versions: ours
                .map(|(v, ms)| (timing(v, p, ms), Some(vendor_ms / ms)))
                .into_iter()
                .collect(),
            skipped: match ours {
                Some(_) => Vec::new(),
                None => vec![("dispatch".into(), "no version takes it".into())],
            },
            pass,
            position: 0,
        }
    }

    #[test]
    fn each_shape_is_its_medians_over_passes_in_draw_order() {
        let a = GemmProblem::new(1000, 1000, 1000, Layout::RC, DType::Bf16, DType::Bf16);
        let b = GemmProblem::new(1000, 1000, 1000, Layout::CC, DType::F16, DType::F16);
        let c = GemmProblem::new(999, 1000, 1000, Layout::RR, DType::Bf16, DType::Bf16);
        let rows = vec![
            row(b, 0, Some(("mma_sync", 2.0)), 1.0),
            row(a, 0, Some(("wgmma_tma_ws", 1.0)), 1.1),
            row(c, 0, None, 1.0),
            row(a, 1, Some(("wgmma_tma_ws", 0.9)), 1.0),
            row(a, 2, Some(("wgmma_tma_ws", 2.0)), 1.0),
            row(b, 1, Some(("mma_sync", 2.0)), 1.0),
        ];
        let r = shape_results(&rows, &[a, b, c], None);
        assert_eq!(r.iter().map(|s| s.index).collect::<Vec<_>>(), [0, 1, 2]);
        assert_eq!(r[0].version.as_deref(), Some("wgmma_tma_ws"));
        assert_eq!(r[0].passes, 3);
        assert!((r[0].kiln_us.unwrap() - 1000.0).abs() < 1e-9);
        assert!((r[0].vendor_us.unwrap() - 1000.0).abs() < 1e-9);
        assert!(
            (r[0].ratio.unwrap() - 1.1).abs() < 1e-12,
            "the median of 1.1, 1/0.9 and 0.5"
        );
        assert_eq!(r[0].vendor_algorithm.as_deref(), Some("algo 7"));
        assert_eq!(r[1].version.as_deref(), Some("mma_sync"));
        assert_eq!(r[1].ratio, Some(0.5));
        assert_eq!(r[2].version, None);
        assert_eq!(r[2].ratio, None);
        assert_eq!(r[2].vendor_us, Some(1000.0));
        assert_eq!(
            r[2].skipped.as_deref(),
            Some("dispatch: no version takes it")
        );
        // One named version: the shapes another version ran are not its results.
        let only = shape_results(&rows, &[a, b], Some("mma_sync"));
        assert_eq!(only[0].ratio, None);
        assert_eq!(only[0].skipped.as_deref(), Some("not timed"));
        assert_eq!(only[1].ratio, Some(0.5));
    }
}
