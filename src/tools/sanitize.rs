//! `kiln sanitize`: compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over kiln's own
//! kernels. Each case runs this kiln binary again, under the sanitizer, as `verify` of one
//! version on one small problem (ragged edges, so every boundary path runs), and reads the
//! sanitizer's `ERROR SUMMARY` line. A case that overruns its time bound is killed and reported.
//! `--configs` checks the forced launches of the versions that have them instead
//! ([`GemmKernel::forced_setups`]: every tile config of `wgmma_tma_ws`), each forced through its
//! environment, at a problem whose plan shows it really runs: a forced tile can fall back to
//! another, and a sanitizer run of the fallback says nothing about the tile.

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::ToolSpec;
use crate::error::{Error, Result};
use crate::ops::gemm::{DType, GemmKernel, GemmProblem, Layout};

/// compute-sanitizer: `KILN_COMPUTE_SANITIZER`, PATH, else the toolkit's folder.
pub const SANITIZER: ToolSpec = ToolSpec {
    name: "compute-sanitizer",
    env: "KILN_COMPUTE_SANITIZER",
    fallback_dirs: &["/usr/local/cuda/bin", "/usr/local/cuda/compute-sanitizer"],
    hint: "install the CUDA toolkit's compute-sanitizer (or `pip install nvidia-cuda-sanitizer-api`) and put it on PATH, or set KILN_COMPUTE_SANITIZER",
};

/// The sanitizer's tools, in the order they run.
pub const TOOLS: &[&str] = &["memcheck", "racecheck", "synccheck", "initcheck"];

/// The exit code kiln asks the sanitizer to use when it found errors.
pub const ERROR_EXIT: i32 = 99;

/// The problems each version is checked on: ragged in M, N and K, two layouts and dtypes.
pub const PROBLEMS: &[(&str, &str, &str, &str)] = &[
    // K = 67 leaves rows unaligned: the SIMT rungs and mma_sync (element loads) run it, the
    // TMA / cp.async wgmma rungs must refuse it cleanly.
    ("129x127x67", "RC", "bf16", "bf16"),
    // Ragged M and N with aligned rows, so the tensor-core rungs run their edge paths.
    ("129x127x72", "RC", "bf16", "bf16"),
    ("64x40x96", "CR", "f16", "f32"),
];

/// One problem to sanitize: (shape, layout, input dtype, output dtype), as `verify` takes them.
pub type Problem = (String, String, String, String);

/// The built-in [`PROBLEMS`].
pub fn default_problems() -> Vec<Problem> {
    PROBLEMS
        .iter()
        .map(|&(s, l, d, o)| (s.into(), l.into(), d.into(), o.into()))
        .collect()
}

/// A problem from `MxNxK[:LAYOUT[:DTYPE[:OUT]]]` (defaults RC, bf16, bf16), parsed as `verify`
/// parses its arguments, so that a typo fails here rather than as a sanitizer run that "found" it.
pub fn parse_problem(text: &str) -> Result<Problem> {
    use crate::ops::gemm::{parse_shape, DType, Layout};
    let parts: Vec<&str> = text.split(':').map(str::trim).collect();
    if parts.len() > 4 {
        return Err(Error::invalid(format!(
            "problem `{text}`: write MxNxK[:LAYOUT[:DTYPE[:OUT]]], e.g. 300x2000x200:RR:bf16:bf16"
        )));
    }
    let (m, n, k) = parse_shape(parts[0])?;
    let layout: Layout = parts.get(1).copied().unwrap_or("RC").parse()?;
    let dtype: DType = parts.get(2).copied().unwrap_or("bf16").parse()?;
    let out: DType = parts.get(3).copied().unwrap_or("bf16").parse()?;
    Ok((
        format!("{m}x{n}x{k}"),
        layout.to_string(),
        dtype.to_string(),
        out.to_string(),
    ))
}

/// One sanitizer run: a tool over one version on one problem.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Case {
    pub version: String,
    pub tool: String,
    pub shape: String,
    pub layout: String,
    pub dtype: String,
    pub out: String,
    /// C's scale (0: C only written; other values read C, and pick the epilogue that does).
    pub beta: f32,
    /// A·B's scale, and leading dimensions other than packed (a fuzz-drawn problem's).
    #[serde(default)]
    pub alpha: Option<f32>,
    #[serde(default)]
    pub lds: Option<(usize, usize, usize)>,
    /// The FP8 GEMM's scale mode (`--scale`), for an FP8 dtype ([`super::sanitize_fp8`]).
    #[serde(default)]
    pub scale: Option<String>,
    /// The launch forced through `env` (`--configs`), e.g. `n224 last-wave split 3`; empty for
    /// the dispatch's own choice.
    pub setup: String,
    /// Environment variables set for the run, on top of this process's (with a setup: in place
    /// of this process's `KILN_WGMMA_*`).
    pub env: Vec<(String, String)>,
    /// kiln's arguments in place of `verify` of the shape (the 4-bit kernels' verifies,
    /// [`super::sanitize_fp4`]); `shape` then says what the run reaches.
    #[serde(default)]
    pub command: Vec<String>,
}

impl Case {
    /// A run of kiln's own command (fill in `command` and `env`): `what` it reaches as its shape.
    pub fn command(version: &str, tool: &str, what: &str) -> Case {
        Case {
            version: version.into(),
            tool: tool.into(),
            shape: what.into(),
            ..Case::default()
        }
    }

    /// Every (version, tool, problem) combination.
    pub fn all(versions: &[String], tools: &[String], problems: &[Problem]) -> Vec<Case> {
        let mut v = Vec::new();
        for version in versions {
            for tool in tools {
                for (shape, layout, dtype, out) in problems {
                    v.push(Case {
                        version: version.clone(),
                        tool: tool.clone(),
                        shape: shape.clone(),
                        layout: layout.clone(),
                        dtype: dtype.clone(),
                        out: out.clone(),
                        ..Case::default()
                    });
                }
            }
        }
        v
    }

    /// Every (version, tool) on one drawn problem, with its alpha, beta and leading dimensions.
    pub fn drawn(
        versions: &[String],
        tools: &[String],
        p: &crate::ops::gemm::GemmProblem,
    ) -> Vec<Case> {
        let packed = crate::ops::gemm::GemmProblem::new(p.m, p.n, p.k, p.layout, p.input, p.output);
        let problem = (
            format!("{}x{}x{}", p.m, p.n, p.k),
            p.layout.to_string(),
            p.input.to_string(),
            p.output.to_string(),
        );
        let mut cases = Case::all(versions, tools, &[problem]);
        for c in &mut cases {
            c.beta = p.beta;
            c.alpha = (p.alpha != 1.0).then_some(p.alpha);
            c.lds = ((p.lda, p.ldb, p.ldc) != (packed.lda, packed.ldb, packed.ldc))
                .then_some((p.lda, p.ldb, p.ldc));
        }
        cases
    }

    pub fn problem(&self) -> String {
        if !self.command.is_empty() {
            let env: Vec<String> = self.env.iter().map(|(k, v)| format!("{k}={v}")).collect();
            return [self.shape.clone(), env.join(" ")]
                .join(" ")
                .trim()
                .to_string();
        }
        let mut p = format!(
            "{} {} {}->{}",
            self.shape, self.layout, self.dtype, self.out
        );
        if let Some(alpha) = self.alpha {
            p += &format!(" alpha {alpha}");
        }
        if self.beta != 0.0 {
            p += &format!(" beta {}", self.beta);
        }
        if let Some(scale) = &self.scale {
            p += &format!(" {scale} scales");
        }
        if let Some((lda, ldb, ldc)) = self.lds {
            p += &format!(" ld {lda}/{ldb}/{ldc}");
        }
        if self.setup.is_empty() {
            p
        } else {
            format!("{} at {p}", self.setup)
        }
    }

    /// What the summary groups this case under: its setup, else its version.
    pub fn row(&self) -> &str {
        if self.setup.is_empty() {
            &self.version
        } else {
            &self.setup
        }
    }

    /// The sanitizer's arguments: the tool, then kiln's `verify` of this case.
    pub fn args(&self, kiln: &Path) -> Vec<String> {
        let mut a: Vec<String> = [
            "--tool",
            &self.tool,
            "--error-exitcode",
            &ERROR_EXIT.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        a.push(kiln.display().to_string());
        if !self.command.is_empty() {
            a.extend(["--no-store".to_string(), "--json".to_string()]);
            a.extend(self.command.iter().cloned());
            return a;
        }
        for s in [
            "--no-store",
            "--json",
            "verify",
            "--version",
            &self.version,
            "--shape",
            &self.shape,
            "--layout",
            &self.layout,
            "--dtype",
            &self.dtype,
            "--out",
            &self.out,
        ] {
            a.push(s.to_string());
        }
        if self.beta != 0.0 {
            a.push("--beta".into());
            a.push(self.beta.to_string());
        }
        if let Some(alpha) = self.alpha {
            a.push("--alpha".into());
            a.push(alpha.to_string());
        }
        if let Some(scale) = &self.scale {
            a.push("--scale".into());
            a.push(scale.clone());
        }
        if let Some((lda, ldb, ldc)) = self.lds {
            for (flag, v) in [("--lda", lda), ("--ldb", ldb), ("--ldc", ldc)] {
                a.push(flag.into());
                a.push(v.to_string());
            }
        }
        a
    }
}

/// What one case found.
#[derive(Debug, Clone, Serialize)]
pub struct Finding {
    pub case: Case,
    /// From `ERROR SUMMARY: N errors`; `None` when the line is missing (the run crashed).
    pub errors: Option<usize>,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    /// The first error the sanitizer printed, or why the run failed.
    pub first: Option<String>,
    /// Why the version refused the problem, when it did (nothing of it ran).
    pub skipped: Option<String>,
}

impl Finding {
    pub fn clean(&self) -> bool {
        self.errors == Some(0) && self.exit_code == Some(0) && !self.timed_out
    }
}

/// The error count from the sanitizer's last `ERROR SUMMARY` line.
/// racecheck prints no `ERROR SUMMARY` but `RACECHECK SUMMARY: H hazards displayed (N errors, W
/// warnings)`: its N is taken instead.
pub fn error_summary(text: &str) -> Option<usize> {
    let last = |marker: &str, after: &dyn Fn(&str) -> Option<usize>| {
        text.lines()
            .rev()
            .find_map(|l| after(l.split(marker).nth(1)?))
    };
    last("ERROR SUMMARY:", &|rest| {
        rest.split_whitespace().next()?.parse().ok()
    })
    .or_else(|| {
        last("RACECHECK SUMMARY:", &|rest| {
            rest.split('(')
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
    })
}

/// The reason in verify's JSON (`"skipped": "..."`) when the version refused the problem.
pub fn skip_reason(text: &str) -> Option<String> {
    let rest = &text[text.find("\"skipped\": \"")? + 12..];
    Some(rest[..rest.find('"')?].to_string())
}

/// The first reported problem: a `=========` line that is neither the banner nor the summary,
/// with the place the next line gives (`at kernel+0x...`), so that a run of several kernels (an
/// attention verify runs the forward before the backward) says which one.
pub fn first_error(text: &str) -> Option<String> {
    let lines: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim().strip_prefix("========="))
        .map(str::trim)
        .collect();
    let i = lines.iter().position(|l| {
        !l.is_empty()
            && !l.starts_with("COMPUTE-SANITIZER")
            && !l.starts_with("ERROR SUMMARY")
            && !l.starts_with("RACECHECK SUMMARY")
            && !l.starts_with("Program hit")
            && !l.starts_with("Saved host backtrace")
            && !l.starts_with("Host Frame")
    })?;
    let at = lines
        .get(i + 1)
        .filter(|l| l.starts_with("at ") && !lines[i].contains(" at "));
    Some(match at {
        Some(at) => format!("{} ({at})", lines[i]),
        None => lines[i].to_string(),
    })
}

/// Runs one case under `sanitizer`, killing it after `limit`.
pub fn run_case(sanitizer: &Path, kiln: &Path, case: &Case, limit: Duration) -> Result<Finding> {
    let mut cmd = Command::new(sanitizer);
    if !case.setup.is_empty() {
        // A forced setup runs with its own variables only, as it was planned
        // (`Overrides::parse` of them alone): an inherited KILN_WGMMA_STAGES, say, would change
        // the kernel. (Every other `KILN_WGMMA_*` name was refused when this process started.)
        for k in crate::overrides::known_names().filter(|k| k.starts_with("KILN_WGMMA_")) {
            cmd.env_remove(k);
        }
    }
    let mut child = cmd
        .args(case.args(kiln))
        .envs(case.env.iter().map(|(k, v)| (k, v)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| Error::Io {
            what: "starting compute-sanitizer",
            path: sanitizer.to_path_buf(),
            source,
        })?;
    // Drain both pipes on threads so a chatty child never blocks on a full pipe.
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out = drain(
        child
            .stdout
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let err = drain(
        child
            .stderr
            .take()
            .map(|r| Box::new(r) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|source| Error::Io {
            what: "waiting for compute-sanitizer",
            path: sanitizer.to_path_buf(),
            source,
        })? {
            break Some(s);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            timed_out = true;
            break None;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let text = format!(
        "{}{}",
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default()
    );
    let errors = error_summary(&text);
    let exit_code = status.and_then(|s| s.code());
    let first = if timed_out {
        Some(format!("killed after {} s", limit.as_secs()))
    } else if errors.is_none() {
        Some(
            text.lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("no output")
                .trim()
                .to_string(),
        )
    } else if exit_code != Some(0) && errors == Some(0) {
        Some(format!(
            "kiln verify exited {} (the check itself failed)",
            exit_code.unwrap_or(-1)
        ))
    } else {
        first_error(&text)
    };
    Ok(Finding {
        case: case.clone(),
        errors,
        exit_code,
        timed_out,
        first,
        skipped: skip_reason(&text),
    })
}

/// Runs `cases` under `sanitizer`, `jobs` at a time (each a process of its own on the same GPU),
/// each killed after `limit`; `done` sees every finding on this thread as it comes in (case
/// index first), so that what finished is kept even if a later case takes the run down.
pub fn run_cases(
    sanitizer: &Path,
    kiln: &Path,
    cases: &[Case],
    limit: Duration,
    jobs: usize,
    mut done: impl FnMut(usize, Finding) -> Result<()>,
) -> Result<()> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, cases.len().max(1)) {
            let tx = tx.clone();
            let next = &next;
            s.spawn(move || loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(c) = cases.get(i) else { break };
                if tx.send((i, run_case(sanitizer, kiln, c, limit))).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        for (i, f) in rx {
            if let Err(e) = f.and_then(|f| done(i, f)) {
                // the workers stop at their next case
                next.store(cases.len(), std::sync::atomic::Ordering::Relaxed);
                return Err(e);
            }
        }
        Ok(())
    })
}

/// Ragged problems a setup is tried at, smallest first (the sanitizer runs them slowly): M, N
/// and K off the tile sizes, rows 16-byte aligned so that no copy runs and C takes the
/// TMA-store epilogue; the larger ones give a grid of 4 several waves with a partial last one.
pub const CONFIG_PROBLEMS: &[&str] = &[
    "129x344x72",
    "300x2000x200",
    "264x1000x136",
    "600x1344x640",
    "1000x1504x700",
];

/// `--configs`: for every forced setup of `kernels` ([`GemmKernel::forced_setups`]) and every
/// layout, the first of [`CONFIG_PROBLEMS`] that runs it on `sm_count` SMs, as one case per tool;
/// and the setups and layouts no problem runs, by name (each a gap in what was checked, reported
/// as a failure).
pub fn config_cases(
    kernels: &[&dyn GemmKernel],
    tools: &[String],
    sm_count: u32,
) -> (Vec<Case>, Vec<String>) {
    let mut cases = Vec::new();
    let mut uncovered = Vec::new();
    for (kernel, setup) in kernels
        .iter()
        .flat_map(|k| k.forced_setups().into_iter().map(move |s| (k, s)))
    {
        for layout in Layout::ALL {
            let found = CONFIG_PROBLEMS.iter().find(|shape| {
                crate::ops::gemm::parse_shape(shape).is_ok_and(|(m, n, k)| {
                    let p = GemmProblem {
                        beta: setup.beta,
                        ..GemmProblem::new(m, n, k, layout, DType::Bf16, setup.out)
                    };
                    setup.runs_at(&p, sm_count)
                })
            });
            let Some(shape) = found else {
                uncovered.push(format!("{} {layout}", setup.name));
                continue;
            };
            for tool in tools {
                cases.push(Case {
                    version: kernel.name().to_string(),
                    tool: tool.clone(),
                    shape: shape.to_string(),
                    layout: layout.to_string(),
                    dtype: DType::Bf16.to_string(),
                    out: setup.out.to_string(),
                    beta: setup.beta,
                    setup: setup.name.clone(),
                    env: setup.env.clone(),
                    ..Case::default()
                });
            }
        }
    }
    (cases, uncovered)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_drawn_problem_carries_its_scalars_and_leading_dimensions_to_verify() {
        use crate::ops::gemm::{DType, GemmProblem, Layout};
        let mut p = GemmProblem::new(33, 17, 65, Layout::CR, DType::F16, DType::F32);
        p.alpha = -1.0;
        p.beta = 2.0;
        p.ldc = 24;
        let cases = Case::drawn(
            &["mma_sync".into()],
            &["memcheck".into(), "initcheck".into()],
            &p,
        );
        assert_eq!(cases.len(), 2);
        let args = cases[0].args(Path::new("kiln")).join(" ");
        assert!(
            args.contains("--shape 33x17x65 --layout CR --dtype f16 --out f32"),
            "{args}"
        );
        assert!(
            args.contains("--beta 2 --alpha -1 --lda 33 --ldb 17 --ldc 24"),
            "{args}"
        );
        assert_eq!(
            cases[0].problem(),
            "33x17x65 CR f16->f32 alpha -1 beta 2 ld 33/17/24"
        );
        let packed = Case::drawn(
            &["mma_sync".into()],
            &["memcheck".into()],
            &GemmProblem::new(8, 8, 8, Layout::RC, DType::Bf16, DType::Bf16),
        );
        assert!(!packed[0]
            .args(Path::new("kiln"))
            .iter()
            .any(|a| a == "--alpha" || a == "--lda"));
    }

    const MEMCHECK: &str = "========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 2 bytes
=========     at gemm_simt_tiled+0x1a40
=========     by thread (31,0,0) in block (1,1,0)
=========     Address 0x7f3a00010fe is out of bounds
=========     Saved host backtrace up to driver entry point at kernel launch time
=========         Host Frame: [0x2f3d1] in libcuda.so.1
=========
| version | passed | failed |
========= ERROR SUMMARY: 3 errors
";

    #[test]
    fn reads_the_error_summary_and_the_first_error() {
        assert_eq!(error_summary(MEMCHECK), Some(3));
        assert_eq!(
            first_error(MEMCHECK).as_deref(),
            Some("Invalid __global__ write of size 2 bytes (at gemm_simt_tiled+0x1a40)")
        );
        let clean = "========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n";
        assert_eq!(error_summary(clean), Some(0));
        assert_eq!(first_error(clean), None);
        assert_eq!(error_summary("kiln: no NVIDIA driver found"), None);
        assert_eq!(error_summary("========= ERROR SUMMARY: 1 error\n"), Some(1));
        // captured from racecheck on an H100
        let race = "========= COMPUTE-SANITIZER\n========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n";
        assert_eq!(error_summary(race), Some(0));
        assert_eq!(first_error(race), None);
        assert_eq!(
            error_summary(
                "========= RACECHECK SUMMARY: 4 hazards displayed (3 errors, 1 warnings)"
            ),
            Some(3)
        );
        let json =
            "[{\"version\": \"mma_sync\", \"skipped\": \"lda = 67 puts rows 134 bytes apart\"}]";
        assert_eq!(
            skip_reason(json).as_deref(),
            Some("lda = 67 puts rows 134 bytes apart")
        );
        assert_eq!(skip_reason("{\"skipped\": null}"), None);
    }

    #[test]
    fn cases_cover_every_version_tool_and_problem_and_run_kiln_verify() {
        let cases = Case::all(
            &["simt_tiled".into(), "mma_sync".into()],
            &["memcheck".into(), "racecheck".into()],
            &default_problems(),
        );
        assert_eq!(cases.len(), 2 * 2 * PROBLEMS.len());
        let a = cases[0].args(Path::new("/x/kiln")).join(" ");
        assert_eq!(a, "--tool memcheck --error-exitcode 99 /x/kiln --no-store --json verify --version simt_tiled --shape 129x127x67 --layout RC --dtype bf16 --out bf16");
        assert!(cases[PROBLEMS.len()]
            .args(Path::new("k"))
            .join(" ")
            .starts_with("--tool racecheck"));
        // --problem: a chosen problem instead of the built-in ones, checked first
        let p = parse_problem("300x2000x200:rr").unwrap();
        assert_eq!(
            p,
            (
                "300x2000x200".into(),
                "RR".into(),
                "bf16".into(),
                "bf16".into()
            )
        );
        let p = parse_problem("64:CR:f16:f32").unwrap();
        assert_eq!(
            p,
            ("64x64x64".into(), "CR".into(), "f16".into(), "f32".into())
        );
        let cases = Case::all(&["wgmma_tma_ws".into()], &["memcheck".into()], &[p]);
        assert_eq!(cases.len(), 1);
        assert!(cases[0]
            .args(Path::new("k"))
            .join(" ")
            .ends_with("--shape 64x64x64 --layout CR --dtype f16 --out f32"));
        for bad in [
            "300x2000",
            "300x2000x200:XY",
            "300x2000x200:RR:int8",
            "1:RC:bf16:bf16:x",
        ] {
            assert!(parse_problem(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn config_cases_run_every_forced_setup_in_every_layout_at_a_problem_that_runs_it() {
        let registry = crate::ops::registry::Registry::default();
        let kernels: Vec<&dyn GemmKernel> = registry.gemm().iter().map(|k| k.as_ref()).collect();
        let (cases, uncovered) = config_cases(&kernels, &["memcheck".into()], 132);
        assert!(uncovered.is_empty(), "no problem runs {uncovered:?}");
        let setups: Vec<_> = kernels.iter().flat_map(|k| k.forced_setups()).collect();
        assert!(!setups.is_empty());
        assert_eq!(cases.len(), setups.len() * 4);
        // a C-loaded setup is run with its beta, which the plan must show loads C
        let loaded = cases
            .iter()
            .find(|c| c.setup == "large f32 C loaded" && c.layout == "RR")
            .unwrap();
        assert_eq!(
            (loaded.version.as_str(), loaded.beta),
            ("wgmma_tma_ws", 0.5)
        );
        assert!(loaded
            .args(Path::new("kiln"))
            .windows(2)
            .any(|w| w == ["--beta", "0.5"]));
        let c = cases
            .iter()
            .find(|c| c.setup == "n224 stream-K" && c.layout == "CC")
            .unwrap();
        assert!(c.env.contains(&("KILN_WGMMA_SK".into(), "1".into())));
        assert_eq!(
            c.problem(),
            format!("n224 stream-K at {} CC bf16->bf16", c.shape)
        );
        assert_eq!(c.row(), "n224 stream-K");
    }
}
