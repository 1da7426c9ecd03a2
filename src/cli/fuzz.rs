//! `kiln fuzz` (seeded random problems for every op and version, failures written as they land)
//! and `kiln verify --repro FILE` (rerun what a fuzz wrote).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Args;
use kiln::error::{Error, Result};
use kiln::harness::fuzz::{self, FuzzPlan, Tallies, Verdict};
use kiln::report::Table;
use serde_json::json;

use super::check::compile_items;
use super::env::Env;
use super::progress::bar;
use super::verdicts::verified;

#[derive(Debug, Args)]
pub struct FuzzArgs {
    /// Seed of the problems and their inputs (default: a fresh one, printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// GEMM problems (each run on every GEMM version).
    #[arg(long, default_value_t = 10_000)]
    pub gemm: usize,
    /// Attention problems (each run on every attention version).
    #[arg(long, default_value_t = 2_000)]
    pub attention: usize,
    /// MoE problems (each run on every MoE version that takes it).
    #[arg(long, default_value_t = 1_000)]
    pub moe: usize,
    /// FP8 GEMM problems (every scale mode, promoted or not, each output dtype).
    #[arg(long, default_value_t = 500)]
    pub fp8: usize,
    /// Whole MoE layers (routing from logits or a given top-k, the gathered SwiGLU, the down
    /// projection with its combine), each against its float64 reference.
    #[arg(long, default_value_t = 200)]
    pub moe_layer: usize,
    /// Only these versions (repeatable; default: all of kiln's).
    #[arg(long = "version")]
    pub versions: Vec<String>,
    /// The longest attention sequence drawn.
    #[arg(long, default_value_t = 4096)]
    pub max_seq: usize,
    /// Where failures are written, one JSON line each, as they happen (default:
    /// kiln-fuzz-SEED-failures.jsonl, created only if something fails).
    #[arg(long)]
    pub failures: Option<PathBuf>,
    /// Also write the summary (counts per op and version, every failure) as JSON here.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Draw the problems and list what they would compile, without a GPU.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn fuzz(env: &Env, a: &FuzzArgs) -> Result<ExitCode> {
    let seed = a
        .seed
        .unwrap_or_else(|| kiln::harness::verify::fresh_seed() >> 16);
    if a.max_seq == 0 {
        return Err(Error::invalid("--max-seq must be at least 1"));
    }
    let plan = FuzzPlan {
        seed,
        gemm: a.gemm,
        attention: a.attention,
        moe: a.moe,
        fp8: a.fp8,
        moe_layer: a.moe_layer,
        versions: a.versions.clone(),
        max_seq: a.max_seq,
    };
    let versions = fuzz::versions(&env.registry, &plan)?;
    let drawn = fuzz::draw(&plan);
    let ctx = if a.dry_run {
        None
    } else {
        Some(env.context()?)
    };
    let dev = ctx
        .as_ref()
        .map(|c| c.info.clone())
        .unwrap_or_else(kiln::device::DeviceInfo::h100_sxm);
    let items = fuzz::compile_items(&versions, &drawn, &dev, &env.tuned());
    let say = |s: String| env.say(&s);
    say(format!(
        "fuzz seed {seed}: {} GEMM, {} attention, {} MoE, {} FP8 problems, {} MoE layers on {} versions; {} variants to compile",
        drawn.gemm.len(),
        drawn.attention.len(),
        drawn.moe.len(),
        drawn.fp8.len(),
        drawn.moe_layer.len(),
        versions.gemm.len()
            + versions.attention.len()
            + versions.moe.len()
            + versions.fp8 as usize
            + versions.moe_layer as usize,
        items.len()
    ));
    let Some(ctx) = ctx else {
        for (p, s) in drawn.gemm.iter().take(20) {
            say(format!(
                "  gemm {} lda {} ldb {} ldc {} alpha {} beta {} seed {s}",
                p.label(),
                p.lda,
                p.ldb,
                p.ldc,
                p.alpha,
                p.beta
            ));
        }
        let [_, attention, moe, fp8, _] = drawn.cases("");
        for c in [attention, moe, fp8]
            .iter()
            .flat_map(|cs| cs.iter().take(10))
        {
            say(format!("  {} {} seed {}", c.op(), c.label(), c.seed()));
        }
        return Ok(ExitCode::SUCCESS);
    };
    let started = Instant::now();
    let (rows, compile_ms) = compile_items(env, &ctx.arch(), &items, &dev)?;
    if let Some(r) = rows.iter().find(|r| !r.ok()) {
        return Err(Error::invalid(format!(
            "variant {} of {} does not compile cleanly ({}); `kiln check --version {}` shows it",
            r.variant,
            r.version,
            r.problems.join("; "),
            r.version
        )));
    }
    say(format!(
        "compiled {} variants in {:.1} s",
        rows.len(),
        compile_ms / 1e3
    ));
    let failures_path = a
        .failures
        .clone()
        .unwrap_or_else(|| PathBuf::from(format!("kiln-fuzz-{seed}-failures.jsonl")));
    let mut failures = FailureLog::new(&failures_path);
    let total = drawn.gemm.len() + drawn.attention.len() + drawn.moe.len() + drawn.fp8.len();
    let pb = bar(total, "fuzz", env.json);
    let mut last_label = String::new();
    let run = fuzz::run(&ctx, &versions, &drawn, |v| {
        let label = format!("{} {}", v.case.op(), v.case.label());
        if label != last_label {
            pb.inc(1);
            pb.set_message(label.clone());
            last_label = label;
        }
        if v.failed() {
            pb.println(format!(
                "WRONG {} {} seed {}: {}",
                v.case.version(),
                v.case.label(),
                v.case.seed(),
                v.message
            ));
            failures.write(v);
        }
    });
    pb.finish_and_clear();
    let wall = started.elapsed().as_secs_f64();
    let (tallies, stopped) = match run {
        Ok(t) => (t, None),
        Err(e) => (Tallies::default(), Some(e)),
    };
    if let Some(e) = failures.error.take() {
        return Err(e);
    }
    if let Some(e) = stopped {
        say(format!(
            "the fuzz stopped: {e}; the failures so far are in {}",
            failures_path.display()
        ));
        return Err(e);
    }
    let checks: usize = tallies.0.iter().map(|t| t.checks).sum();
    let skipped: usize = tallies.0.iter().map(|t| t.skipped).sum();
    let wrong = tallies.failed();
    let summary = json!({
        "kiln_commit": kiln::store::kiln_commit(),
        "date": kiln::store::utc_now(),
        "command": env.command,
        "device": ctx.info,
        "seed": seed,
        "problems": {"gemm": drawn.gemm.len(), "attention": drawn.attention.len(), "moe": drawn.moe.len(), "fp8": drawn.fp8.len()},
        "checks": checks,
        "skipped": skipped,
        "wrong": wrong,
        "seconds": wall,
        "compile_seconds": compile_ms / 1e3,
        "by_version": tallies.0,
        "failures": failures.written,
    });
    if let Some(out) = &a.out {
        std::fs::write(
            out,
            serde_json::to_string_pretty(&summary).unwrap_or_default(),
        )
        .map_err(|source| Error::Io {
            what: "writing the fuzz summary",
            path: out.clone(),
            source,
        })?;
    }
    if env.json {
        env.print_json(&summary);
    } else {
        print!("{}", tally_table(&tallies).render());
        println!(
            "{total} problems, {checks} checks, {wrong} wrong, {skipped} skipped (the version does not take the problem), in {wall:.1} s (compile {:.1} s); seed {seed}",
            compile_ms / 1e3
        );
        if wrong > 0 {
            println!(
                "failures: {} (rerun: kiln verify --repro {})",
                failures_path.display(),
                failures_path.display()
            );
        }
    }
    Ok(verified(wrong > 0))
}

fn tally_table(t: &Tallies) -> Table {
    let mut table = Table::new(&[
        "op",
        "version",
        "checks",
        "passed",
        "wrong",
        "skipped",
        "worst error / bound",
    ]);
    for r in &t.0 {
        table.row(&[
            r.op.clone(),
            r.version.clone(),
            r.checks.to_string(),
            r.passed.to_string(),
            r.failed.to_string(),
            r.skipped.to_string(),
            format!("{:.2}", r.worst_of_bound),
            format!("{:.1}", r.seconds),
        ]);
    }
    table
}

/// The failures file, created at the first failure and flushed after each line.
struct FailureLog {
    path: PathBuf,
    file: Option<std::fs::File>,
    written: Vec<Verdict>,
    error: Option<Error>,
}

impl FailureLog {
    fn new(path: &Path) -> FailureLog {
        FailureLog {
            path: path.to_path_buf(),
            file: None,
            written: Vec::new(),
            error: None,
        }
    }

    fn write(&mut self, v: &Verdict) {
        self.written.push(v.clone());
        if self.error.is_some() {
            return;
        }
        let result = (|| -> std::io::Result<()> {
            if self.file.is_none() {
                self.file = Some(std::fs::File::create(&self.path)?);
            }
            let f = self.file.as_mut().expect("opened above");
            writeln!(f, "{}", serde_json::to_string(v).unwrap_or_default())?;
            f.flush()
        })();
        if let Err(e) = result {
            self.error = Some(Error::Io {
                what: "writing the failures file",
                path: self.path.clone(),
                source: e,
            });
        }
    }
}

/// `kiln verify --repro FILE`: every case in the file, rerun with its own inputs.
pub fn repro(env: &Env, path: &Path) -> Result<ExitCode> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        what: "reading the repro file",
        path: path.to_path_buf(),
        source,
    })?;
    let cases = fuzz::parse_cases(&text)?;
    if cases.is_empty() {
        return Err(Error::invalid(format!(
            "{} holds no cases; a fuzz writes one JSON line per failure",
            path.display()
        )));
    }
    let ctx = env.context()?;
    let mut verdicts = Vec::new();
    let mut t = Table::new(&[
        "op",
        "version",
        "problem",
        "seed",
        "verdict",
        "error / bound",
    ]);
    for c in &cases {
        let v = fuzz::rerun(&ctx, &env.registry, c)?;
        t.row(&[
            c.op().to_string(),
            c.version().to_string(),
            c.label(),
            c.seed().to_string(),
            if v.skipped.is_some() {
                "skipped".to_string()
            } else if v.passed {
                "ok".to_string()
            } else {
                format!("WRONG: {}", v.message)
            },
            format!("{:.2}", v.rel_error / v.bound),
        ]);
        verdicts.push(v);
    }
    if env.json {
        env.print_json(&json!(verdicts));
    } else {
        print!("{}", t.render());
    }
    Ok(verified(verdicts.iter().any(|v| v.failed())))
}
