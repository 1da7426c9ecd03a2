//! `kiln profile`: Nsight Compute over one kiln kernel with a fixed, compact set of metrics
//! (duration, SM and tensor-pipe utilisation, DRAM throughput, achieved occupancy, the main stall
//! reasons), read from ncu's CSV into a short table; and, for when counters are not available, a
//! time split by differencing two measured variants (the share of the time one change accounts for).

use std::path::Path;
use std::process::Command;

use serde::Serialize;

use super::ToolSpec;
use crate::device::Context;
use crate::error::{Error, Result};
use crate::harness::bench::{BenchOptions, Timing};
use crate::harness::suite::bench_all;
use crate::ops::gemm::{GemmKernel, GemmProblem};

/// Nsight Compute: `KILN_NCU`, PATH, else the toolkit's folders.
pub const NCU: ToolSpec = ToolSpec {
    name: "ncu",
    env: "KILN_NCU",
    fallback_dirs: &["/usr/local/cuda/bin", "/opt/nvidia/nsight-compute"],
    hint: "install Nsight Compute (the CUDA toolkit ships it) and put `ncu` on PATH or set KILN_NCU; without counters, `kiln profile --split` still works",
};

/// The metrics collected, with the label the table shows. Metrics this ncu or GPU does not know
/// are dropped (and said so) rather than failing the profile.
pub const METRICS: &[(&str, &str)] = &[
    ("gpu__time_duration.sum", "duration"),
    (
        "sm__throughput.avg.pct_of_peak_sustained_elapsed",
        "SM throughput % of peak",
    ),
    (
        "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
        "tensor pipe (GMMA) % active",
    ),
    (
        "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
        "tensor pipe (HMMA) % active",
    ),
    (
        "dram__throughput.avg.pct_of_peak_sustained_elapsed",
        "DRAM throughput % of peak",
    ),
    (
        "sm__warps_active.avg.pct_of_peak_sustained_active",
        "achieved occupancy %",
    ),
    (
        "smsp__average_warps_issue_stalled_long_scoreboard_per_issue_active.ratio",
        "stall: long scoreboard (gmem)",
    ),
    (
        "smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio",
        "stall: barrier",
    ),
    (
        "smsp__average_warps_issue_stalled_wait_per_issue_active.ratio",
        "stall: wait (fixed latency)",
    ),
    (
        "smsp__average_warps_issue_stalled_math_pipe_throttle_per_issue_active.ratio",
        "stall: math pipe throttle",
    ),
    (
        "smsp__average_warps_issue_stalled_mio_throttle_per_issue_active.ratio",
        "stall: MIO throttle (smem)",
    ),
    (
        "smsp__average_warps_issue_stalled_short_scoreboard_per_issue_active.ratio",
        "stall: short scoreboard",
    ),
];

/// One metric of one profiled kernel, as ncu reported it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NcuMetric {
    pub kernel: String,
    pub name: String,
    pub unit: String,
    pub value: String,
}

impl NcuMetric {
    /// The value as a number (ncu writes thousands separators), if it is one.
    pub fn number(&self) -> Option<f64> {
        self.value.replace(',', "").trim().parse().ok()
    }

    /// The table's label for this metric.
    pub fn label(&self) -> &str {
        METRICS
            .iter()
            .find(|(m, _)| *m == self.name)
            .map(|(_, l)| *l)
            .unwrap_or(&self.name)
    }

    /// The value with its unit, durations in microseconds.
    pub fn shown(&self) -> String {
        let scale = match self.unit.as_str() {
            "nsecond" | "ns" => Some(1e-3),
            "usecond" | "us" => Some(1.0),
            "msecond" | "ms" => Some(1e3),
            "second" | "s" => Some(1e6),
            _ => None,
        };
        match (scale, self.number()) {
            (Some(s), Some(v)) => format!("{:.2} us", v * s),
            (None, Some(v)) => format!("{v:.2} {}", self.unit).trim_end().to_string(),
            _ => format!("{} {}", self.value, self.unit)
                .trim_end()
                .to_string(),
        }
    }
}

/// Splits one CSV line (double-quoted fields, `""` for a quote inside one).
fn csv_fields(line: &str) -> Vec<String> {
    let (mut fields, mut cur, mut quoted) = (Vec::new(), String::new(), false);
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => fields.push(std::mem::take(&mut cur)),
            _ => cur.push(c),
        }
    }
    fields.push(cur);
    fields
}

/// Reads `ncu --csv` output: the table that starts at the `"ID",...` header; the profiled
/// program's own output and ncu's `==PROF==` lines around it are skipped.
pub fn parse_ncu_csv(text: &str) -> Vec<NcuMetric> {
    let mut out = Vec::new();
    let mut cols: Option<(usize, usize, usize, usize, usize)> = None;
    for line in text.lines() {
        let t = line.trim();
        if !t.starts_with('"') {
            continue;
        }
        let f = csv_fields(t);
        let idx = |name: &str| f.iter().position(|c| c == name);
        if f.first().map(String::as_str) == Some("ID") {
            cols = match (
                idx("Kernel Name"),
                idx("Metric Name"),
                idx("Metric Unit"),
                idx("Metric Value"),
            ) {
                (Some(k), Some(n), Some(u), Some(v)) => Some((k, n, u, v, f.len())),
                _ => None,
            };
            continue;
        }
        let Some((k, n, u, v, len)) = cols else {
            continue;
        };
        if f.len() == len {
            out.push(NcuMetric {
                kernel: f[k].clone(),
                name: f[n].clone(),
                unit: f[u].clone(),
                value: f[v].clone(),
            });
        }
    }
    out
}

/// Metrics of `asked` that ncu said it could not find.
pub fn unknown_metrics<'m>(text: &str, asked: &[&'m str]) -> Vec<&'m str> {
    asked
        .iter()
        .copied()
        .filter(|m| {
            text.lines()
                .any(|l| l.contains("ailed to find metric") && l.contains(m))
        })
        .collect()
}

/// ncu's arguments for profiling `entry` in `kiln --no-store bench` of one version and problem:
/// skip the three warm-up launches, profile the fourth.
pub fn ncu_args(kiln: &Path, entry: &str, metrics: &[&str], bench: &[String]) -> Vec<String> {
    let mut a: Vec<String> = vec![
        "--clock-control".into(),
        "none".into(),
        "-k".into(),
        format!("regex:^{entry}"),
        "--launch-skip".into(),
        "3".into(),
        "--launch-count".into(),
        "1".into(),
        "--metrics".into(),
        metrics.join(","),
        "--csv".into(),
    ];
    a.push(kiln.display().to_string());
    a.extend(["--no-store".to_string(), "bench".to_string()]);
    a.extend(bench.iter().cloned());
    a.extend(["--reps", "1", "--warmup", "3"].map(String::from));
    a
}

/// Profiles `entry` under ncu; drops metrics ncu does not know and tries again once.
pub fn profile(
    kiln: &Path,
    entry: &str,
    bench: &[String],
) -> Result<(Vec<NcuMetric>, Vec<String>)> {
    let ncu = NCU.find()?;
    let mut metrics: Vec<&str> = METRICS.iter().map(|(m, _)| *m).collect();
    let mut dropped = Vec::new();
    for _ in 0..2 {
        let out = Command::new(&ncu)
            .args(ncu_args(kiln, entry, &metrics, bench))
            .output()
            .map_err(|source| Error::Io {
                what: "running ncu",
                path: ncu.clone(),
                source,
            })?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let unknown = unknown_metrics(&text, &metrics);
        if !unknown.is_empty() {
            dropped.extend(unknown.iter().map(|m| m.to_string()));
            metrics.retain(|m| !unknown.contains(m));
            continue;
        }
        if text.contains("ERR_NVGPUCTRPERM") {
            return Err(Error::ToolMissing("the driver does not let this user read GPU performance counters (ERR_NVGPUCTRPERM): run as root or set NVreg_RestrictProfilingToAdminUsers=0; `kiln profile --split` needs no counters".into()));
        }
        let mut rows = parse_ncu_csv(&text);
        rows.sort_by_key(|r| {
            METRICS
                .iter()
                .position(|(m, _)| *m == r.name)
                .unwrap_or(usize::MAX)
        });
        if rows.is_empty() {
            let tail: Vec<&str> = text.lines().rev().take(6).collect();
            return Err(Error::invalid(format!(
                "ncu profiled no kernel matching `{entry}` (exit {}); its last lines:\n{}",
                out.status,
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )));
        }
        return Ok((rows, dropped));
    }
    Err(Error::invalid(format!(
        "ncu knows none of the metrics kiln asks for after dropping {}",
        dropped.join(", ")
    )))
}

/// The time split: how much of A's time the difference to B accounts for.
#[derive(Debug, Clone, Serialize)]
pub struct Split {
    pub a: Timing,
    pub b: Timing,
    /// `a − b` in ms.
    pub delta_ms: f64,
    /// `(a − b) / a`, in %.
    pub share_pct: f64,
}

impl Split {
    pub fn new(a: Timing, b: Timing) -> Split {
        let delta_ms = a.median_ms - b.median_ms;
        Split {
            share_pct: 100.0 * delta_ms / a.median_ms,
            delta_ms,
            a,
            b,
        }
    }
}

/// Times A (`ka` on `pa`) and B (`kb` on `pb`) in one process and splits A's time by their
/// difference: e.g. a version against the same version without its epilogue, or one problem
/// against a smaller K (the main loop's share).
pub fn split(
    ctx: &Context,
    ka: &dyn GemmKernel,
    pa: &GemmProblem,
    kb: &dyn GemmKernel,
    pb: &GemmProblem,
    opt: &BenchOptions,
) -> Result<Split> {
    let timed = |k: &dyn GemmKernel, p: &GemmProblem| -> Result<Timing> {
        k.supports(p, &ctx.info)
            .map_err(|reason| Error::Unsupported {
                kernel: k.name().into(),
                reason,
            })?;
        let rows = bench_all(ctx, &[k], None, &[*p], opt, |_| {})?;
        rows.into_iter()
            .next()
            .and_then(|r| r.versions.into_iter().next())
            .map(|(t, _)| t)
            .ok_or_else(|| Error::invalid(format!("{} was not timed on {}", k.name(), p.label())))
    };
    Ok(Split::new(timed(ka, pa)?, timed(kb, pb)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written by hand in the shape `ncu --csv --metrics ...` prints: the program's own output and
    /// `==PROF==` lines first, then one row per metric.
    const SAMPLE: &str = r#"==PROF== Connected to process 4242 (target/release/kiln)
==PROF== Profiling "gemm_wgmma_tma_ws" - 0: 0%....50%....100% - 9 passes
| problem | version | median ms |
==PROF== Disconnected from process 4242
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"
"0","4242","kiln","127.0.0.1","gemm_wgmma_tma_ws","1","13","(384, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","21.37"
"0","4242","kiln","127.0.0.1","gemm_wgmma_tma_ws","1","13","(384, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","usecond","1,234.56"
"0","4242","kiln","127.0.0.1","gemm_wgmma_tma_ws","1","13","(384, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active","%","71.9"
"0","4242","kiln","127.0.0.1","gemm_wgmma_tma_ws","1","13","(384, 1, 1)","(132, 1, 1)","0","9.0","Command line profiler metrics","smsp__average_warps_issue_stalled_barrier_per_issue_active.ratio","","0.42"
"#;

    #[test]
    fn parses_ncu_csv_past_the_programs_output() {
        let rows = parse_ncu_csv(SAMPLE);
        assert_eq!(rows.len(), 4);
        assert!(rows.iter().all(|r| r.kernel == "gemm_wgmma_tma_ws"));
        let d = rows
            .iter()
            .find(|r| r.name == "gpu__time_duration.sum")
            .unwrap();
        assert_eq!(d.number(), Some(1234.56));
        assert_eq!(d.shown(), "1234.56 us");
        assert_eq!(d.label(), "duration");
        assert_eq!(rows[0].shown(), "21.37 %");
        assert_eq!(rows[3].shown(), "0.42");
        assert_eq!(rows[2].label(), "tensor pipe (GMMA) % active");
    }

    #[test]
    fn split_is_the_difference_as_a_share_of_a() {
        use crate::ops::gemm::{DType, Layout};
        let p = GemmProblem::new(64, 64, 64, Layout::RC, DType::Bf16, DType::Bf16);
        let t = |ms: f64| Timing {
            version: "v".into(),
            problem: p,
            median_ms: ms,
            min_ms: ms,
            max_ms: ms,
            reps: 1,
            tflops: 0.0,
            gbps: 0.0,
            host_us: None,
        };
        let s = Split::new(t(2.0), t(1.9));
        assert!((s.delta_ms - 0.1).abs() < 1e-12);
        assert!((s.share_pct - 5.0).abs() < 1e-9);
    }

    #[test]
    fn csv_fields_keep_commas_and_quotes_inside_quotes() {
        assert_eq!(csv_fields(r#""a,b","c""d",e"#), vec!["a,b", "c\"d", "e"]);
    }

    #[test]
    fn finds_metrics_ncu_does_not_know() {
        let text = "==ERROR== Failed to find metric sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active\n";
        let asked = [
            "gpu__time_duration.sum",
            "sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active",
        ];
        assert_eq!(unknown_metrics(text, &asked), vec![asked[1]]);
    }

    #[test]
    fn ncu_runs_kiln_bench_on_the_fourth_launch() {
        let bench: Vec<String> = ["--version", "simt_tiled", "--shape", "4096"]
            .map(String::from)
            .to_vec();
        let a = ncu_args(
            Path::new("/k/kiln"),
            "gemm_simt_tiled",
            &["gpu__time_duration.sum"],
            &bench,
        )
        .join(" ");
        assert_eq!(a, "--clock-control none -k regex:^gemm_simt_tiled --launch-skip 3 --launch-count 1 --metrics gpu__time_duration.sum --csv /k/kiln --no-store bench --version simt_tiled --shape 4096 --reps 1 --warmup 3");
    }
}
