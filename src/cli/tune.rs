//! `kiln tune`, its hidden worker `kiln tune-worker`, and `kiln tune-replay`: build the typed
//! request, run the library's tuner, show progress and the final table, record.

use std::collections::HashMap;
use std::process::ExitCode;
use std::time::Duration;

use kiln::device::{self, DeviceInfo};
use kiln::error::{Error, Result};
use kiln::ops::attention::AttentionProblem;
use kiln::ops::attention_backward::BackwardProblem;
use kiln::store::Store;
use kiln::tune::landscape::Landscape;
use kiln::tune::record::{self, TuningRun};
use kiln::tune::search::{EvoParams, Strategy};
use kiln::tune::space::Config;
use kiln::tune::target::{Target, TuneProblem};
use kiln::tune::watchdog::Spawner;
use kiln::tune::{cache, run, Outcome, Status};
use serde_json::json;

use super::args::{TuneArgs, TuneWorkerArgs};
use super::env::{device_or_h100, Env};
use super::gemm::problem_from;
use super::progress::bar;
use super::verdicts::exit_if;

mod report;
pub use report::replay;

/// `auto` searches exhaustively up to this many configs (without a --budget).
const AUTO_EXHAUSTIVE: usize = 256;

/// The GPUs `--gpus` names (`all`, `0`, `0,1`); in the fake-worker test mode no GPU is needed.
fn gpus(spec: &str, fake: bool) -> Result<Vec<u32>> {
    if spec.trim() == "all" {
        if fake {
            return Ok(vec![0]);
        }
        return Ok(device::list()?.iter().map(|d| d.ordinal).collect());
    }
    let v: Vec<u32> = spec
        .split(',')
        .map(|s| {
            s.trim().parse().map_err(|_| {
                Error::invalid(format!("--gpus `{spec}`: use all, 0, or a list like 0,1"))
            })
        })
        .collect::<Result<_>>()?;
    if v.is_empty() {
        return Err(Error::invalid("--gpus names no GPU"));
    }
    if !fake {
        check_gpus(spec, &v, device::list()?.len())?;
    }
    Ok(v)
}

/// Refuses a GPU index at or past `count` (the devices this process sees) and a GPU named twice.
fn check_gpus(spec: &str, v: &[u32], count: usize) -> Result<()> {
    if let Some(&g) = v.iter().find(|&&g| g as usize >= count) {
        let have = match count {
            1 => "one GPU (index 0)".to_string(),
            n => format!("{n} GPUs (indices 0 to {})", n - 1),
        };
        return Err(Error::invalid(format!(
            "--gpus `{spec}` names GPU {g}, but this machine has {have}; name GPUs that exist, or use all"
        )));
    }
    if let Some((_, &g)) = v.iter().enumerate().find(|(i, g)| v[..*i].contains(g)) {
        return Err(Error::invalid(format!(
            "--gpus `{spec}` names GPU {g} twice; name each GPU once"
        )));
    }
    Ok(())
}

fn open_store(env: &Env) -> Result<Option<Store>> {
    if env.no_store {
        return Ok(None);
    }
    Ok(Some(Store::open(&env.config.store_path())?))
}

/// Which op `kiln tune [OP]` tunes: `gemm` or `attn`/`attention` (the positional wins over
/// `--op`).
fn target_op(a: &TuneArgs) -> Result<&'static str> {
    match a.target.as_deref().unwrap_or(&a.problem.op) {
        "gemm" => Ok("gemm"),
        "attn" | "attention" => Ok("attention"),
        other => Err(Error::invalid(format!(
            "kiln tune {other}: the ops that tune are gemm and attn"
        ))),
    }
}

/// The attention problem of `kiln tune attn`, with a clear error for what is missing or given
/// for the other op.
fn attention_problem(a: &TuneArgs) -> Result<AttentionProblem> {
    super::attention::attention_problem_of(&a.problem, &a.attn, "kiln tune attn")
}

/// The problem and version a fresh `kiln tune` names (the backward: `None`, every version that
/// takes the problem, unless --version names one).
fn requested(a: &TuneArgs) -> Result<(Option<String>, TuneProblem)> {
    if a.backward && target_op(a)? != "attention" {
        return Err(Error::invalid(
            "--backward tunes the attention backward: use kiln tune attn --backward",
        ));
    }
    match target_op(a)? {
        "attention" if a.backward => Ok((
            a.version.clone(),
            BackwardProblem::new(attention_problem(a)?, a.deterministic).into(),
        )),
        "attention" => Ok((
            Some(a.version.clone().unwrap_or_else(|| "fa3_wgmma".into())),
            attention_problem(a)?.into(),
        )),
        _ => {
            let t = &a.attn;
            if t.batch.is_some()
                || t.heads.is_some()
                || t.seqlen.is_some()
                || t.dim.is_some()
                || t.causal
            {
                return Err(Error::invalid(
                    "--batch, --heads, --seqlen, --dim and --causal describe attention: use kiln tune attn",
                ));
            }
            let version = a
                .version
                .clone()
                .ok_or_else(|| Error::invalid("kiln tune needs --version (or --resume RUN_ID)"))?;
            let problem = problem_from(&a.problem, None)?
                .ok_or_else(|| Error::invalid("kiln tune needs --shape MxNxK"))?;
            Ok((Some(version), problem.into()))
        }
    }
}

/// `--search` as the tuner knows it: exhaustive, evo or auto.
fn search_kind(s: &str) -> Result<&'static str> {
    match s {
        "exhaustive" => Ok("exhaustive"),
        "evo" | "evolutionary" | "model" => Ok("evo"),
        "auto" => Ok("auto"),
        other => Err(Error::invalid(format!(
            "--search `{other}`: use auto, exhaustive or evo (evolutionary, model)"
        ))),
    }
}

pub fn tune(env: &Env, a: &TuneArgs) -> Result<ExitCode> {
    // Bad flags are said before anything opens a GPU.
    search_kind(&a.search)?;
    if target_op(a)? == "gemm" && super::fp8_gemm::wanted(&a.problem)? {
        return super::fp8_gemm::tune(env, a);
    }
    let fake = env.config.overrides.tune.fake.is_some();
    let store = open_store(env)?;
    // The request: from the flags, or from the run being resumed.
    let (run_id, spec, known) = match a.resume {
        Some(id) => {
            let s = store
                .as_ref()
                .ok_or_else(|| Error::invalid("--resume needs the store (drop --no-store)"))?;
            let r = record::load_run(s.conn(), id)?;
            let known: HashMap<Config, Outcome> = record::results(s.conn(), id)?
                .into_iter()
                .map(|o| (o.config.clone(), o))
                .collect();
            (Some(id), r, known)
        }
        None => {
            let (version, problem) = requested(a)?;
            let Some(version) = version else {
                return tune_every_backward(env, a, &store, problem, fake);
            };
            (None, fresh_run(a, version, problem), HashMap::new())
        }
    };
    let report = tune_one(env, a, &store, run_id, spec, known, fake, !env.json)?;
    if env.json {
        env.print_json(&json!({"run": report.run, "device": report.device, "problem": report.problem, "report": report.report}));
    }
    Ok(exit_if(report.report.best.is_none(), 1))
}

/// A fresh tuning run's request.
fn fresh_run(a: &TuneArgs, version: String, problem: TuneProblem) -> TuningRun {
    TuningRun {
        id: 0,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        op: problem.op().into(),
        version,
        problem,
        device_name: None,
        sm_count: None,
        search: a.search.clone(),
        seed: a.seed,
        budget: a.budget.unwrap_or(0),
    }
}

/// One tuning run as it ended: its id in the store, the device, the problem and the report.
#[derive(serde::Serialize)]
struct RunReport {
    run: Option<i64>,
    version: String,
    device: DeviceInfo,
    problem: TuneProblem,
    report: run::TuneReport,
}

/// The worker processes' spawner: this binary's `tune-worker`.
fn spawner() -> Result<Spawner> {
    let exe = std::env::current_exe().map_err(|source| Error::Io {
        what: "finding the kiln binary",
        path: "kiln".into(),
        source,
    })?;
    Ok(Spawner {
        exe,
        args: Vec::new(),
    })
}

/// The GPU a tuning run measures on (a stand-in H100 for the fake worker).
fn tuning_device(fake: bool) -> Result<DeviceInfo> {
    if fake {
        return Ok(device_or_h100());
    }
    device::init()?;
    DeviceInfo::query(0)
}

/// `kiln tune attn --backward` without --version: a tuning run of every version that takes the
/// problem (each its own run in the store and its own cache entry), then the table of their
/// best and the version the dispatch now runs (`Registry::select_attention_backward_tuned`).
fn tune_every_backward(
    env: &Env,
    a: &TuneArgs,
    store: &Option<Store>,
    problem: TuneProblem,
    fake: bool,
) -> Result<ExitCode> {
    let TuneProblem::AttentionBackward(p) = problem else {
        return Err(Error::invalid(
            "every version is tuned for the attention backward only",
        ));
    };
    let dev = tuning_device(fake)?;
    let versions: Vec<&'static str> = env
        .registry
        .attention_backward()
        .iter()
        .rev()
        .filter(|k| k.supports(&p, &dev).is_ok())
        .map(|k| k.name())
        .collect();
    if versions.is_empty() {
        env.registry.select_attention_backward(&p, &dev, None)?;
    }
    if !env.json {
        eprintln!(
            "tuning the {} backward versions that take {}: {}",
            versions.len(),
            p.label(),
            versions.join(", ")
        );
    }
    let mut runs = Vec::new();
    for v in versions {
        let spec = fresh_run(a, v.to_string(), problem);
        runs.push(tune_one(
            env,
            a,
            store,
            None,
            spec,
            HashMap::new(),
            fake,
            false,
        )?);
    }
    // Every version's best timed again together, one launch of each a round: the versions'
    // runs ran at their own clocks (±5 % apart on an H200), and the dispatch compares the
    // versions' cached TFLOPS.
    let entries: Vec<run::Entry> = runs
        .iter()
        .filter_map(|r| {
            r.report.best.as_ref().map(|b| run::Entry {
                version: r.version.clone(),
                config: b.config.clone(),
                median_ms: b.time(),
            })
        })
        .collect();
    let spawner = spawner()?;
    let together = run::Together {
        problem,
        spawner: &spawner,
        timeout_floor: Duration::from_secs_f64(a.timeout_floor.max(0.1)),
        warmup: a.warmup,
        reps: a.reps.max(1),
    };
    let ordinal = gpus(&a.gpus, fake)?[0];
    let times = if entries.len() > 1 {
        together.time(&mut None, ordinal, &entries, &mut 0)
    } else {
        None
    };
    let mut table = kiln::ops::tuned::TunedTable::empty();
    let mut rows: Vec<(String, String, Option<f64>, Option<i64>)> = Vec::new();
    for r in &runs {
        let i = entries.iter().position(|e| e.version == r.version);
        let ms = match (i, &times) {
            (Some(i), Some(t)) => Some(t[i]),
            (Some(i), None) => Some(entries[i].median_ms),
            (None, _) => None,
        };
        let config = r.report.best.as_ref().map(|b| b.config.clone());
        if let (Some(c), Some(ms)) = (&config, ms) {
            let tflops = Some(problem.flops() / (ms * 1e-3) / 1e12);
            let key = cache::key_of(&dev, &r.version, &problem);
            if let Some(s) = store {
                cache::save(s.conn(), &key, c, tflops, r.run)?;
            }
            table.insert(key, c.clone(), tflops);
        }
        let label = match &config {
            Some(c) if c.0.is_empty() => "(no knobs)".to_string(),
            Some(c) => c.label(),
            None => String::new(),
        };
        rows.push((r.version.clone(), label, ms, r.run));
    }
    let untuned = env
        .registry
        .select_attention_backward(&p, &dev, None)?
        .name();
    let pick = env
        .registry
        .select_attention_backward_tuned(&p, &dev, &table, None)?
        .name();
    let found = runs.iter().any(|r| r.report.best.is_some());
    let together_json: Vec<_> = rows
        .iter()
        .map(|(v, c, ms, run)| json!({"version": v, "config": c, "median_ms": ms, "run": run}))
        .collect();
    if env.json {
        env.print_json(&json!({"device": dev, "problem": problem, "runs": runs, "versions": together_json, "timed_together": times.is_some(), "dispatch": pick, "untuned_dispatch": untuned}));
        return Ok(exit_if(!found, 1));
    }
    println!(
        "backward versions tuned for {} on {} ({} SMs), each one's best {}:",
        p.label(),
        dev.name,
        dev.sm_count,
        if times.is_some() {
            "timed again together, one launch of each a round"
        } else {
            "as its own run timed it"
        }
    );
    rows.sort_by(|x, y| {
        x.2.unwrap_or(f64::INFINITY)
            .total_cmp(&y.2.unwrap_or(f64::INFINITY))
    });
    for (v, c, ms, run) in &rows {
        let line = match ms {
            Some(t) => format!(
                "{t:.4} ms  {:>6.1} TFLOPS  {c}",
                problem.flops() / (t * 1e-3) / 1e12
            ),
            None => "no candidate verified and timed".into(),
        };
        let run = run.map(|id| format!("  (run {id})")).unwrap_or_default();
        println!("  {v:<26} {line}{run}");
    }
    let saved = if store.is_some() {
        "with the tuning cache saved"
    } else {
        "with these results (--no-store saved none)"
    };
    println!("the dispatch runs {pick} {saved} (untuned: {untuned})");
    Ok(exit_if(!found, 1))
}

/// One tuning run of `spec` (fresh, or resuming `run_id` with the outcomes `known`), recorded in
/// `store` and its best saved in the tuning cache; the report printed when `print`.
#[allow(clippy::too_many_arguments)]
fn tune_one(
    env: &Env,
    a: &TuneArgs,
    store: &Option<Store>,
    run_id: Option<i64>,
    spec: TuningRun,
    known: HashMap<Config, Outcome>,
    fake: bool,
    print: bool,
) -> Result<RunReport> {
    let p: TuneProblem = spec.problem;
    let kernel = Target::find(&env.registry, &spec.version, &p)?;
    let dev = tuning_device(fake)?;
    if !fake {
        // The workers would each find the problem too big: say so once, before any starts
        // (the context is released before they open theirs).
        spec.problem.ensure_fits(&env.context()?)?;
    }
    kernel
        .supports(&p, &dev)
        .map_err(|reason| Error::Unsupported {
            kernel: kernel.name().into(),
            reason,
        })?;
    let space = kernel.require_space(&p, &dev)?;
    let size = space.enumerate().len();
    let budget = (spec.budget > 0).then_some(spec.budget);
    let exhaustive = match search_kind(&spec.search)? {
        "exhaustive" => true,
        "evo" => false,
        _ => size <= budget.unwrap_or(AUTO_EXHAUSTIVE),
    };
    let (strategy, budget) = if exhaustive {
        (Strategy::Exhaustive, budget.unwrap_or(size).min(size))
    } else {
        (
            Strategy::Evolutionary(EvoParams::seeded(spec.seed)),
            budget
                .unwrap_or(((size as f64) * 0.15).ceil().max(16.0) as usize)
                .min(size),
        )
    };
    let gpus = gpus(&a.gpus, fake)?;
    let run_id = match (store, run_id) {
        (Some(s), None) => Some(record::begin(
            s.conn(),
            &TuningRun {
                device_name: Some(dev.name.clone()),
                sm_count: Some(dev.sm_count),
                budget,
                search: if exhaustive {
                    "exhaustive".into()
                } else {
                    "evo".into()
                },
                ..spec.clone()
            },
        )?),
        (_, id) => id,
    };
    let req = run::TuneRequest {
        target: kernel,
        problem: p,
        dev: dev.clone(),
        strategy,
        budget,
        gpus: gpus.clone(),
        spawner: spawner()?,
        timeout_floor: Duration::from_secs_f64(a.timeout_floor.max(0.1)),
        warmup: a.warmup,
        reps: a.reps.max(1),
        known,
    };
    if !env.json {
        eprintln!(
            "tuning {} on {} ({} SMs) for {}: {} search, {budget} of {size} config(s), {} worker(s){}",
            kernel.name(),
            dev.name,
            dev.sm_count,
            p.label(),
            if exhaustive { "exhaustive" } else { "evolutionary" },
            gpus.len(),
            run_id.map(|id| format!(", tuning run {id}")).unwrap_or_default()
        );
    }
    let pb = bar(budget, "tune", env.json);
    let mut best: Option<(f64, String)> = None;
    let jit = env.jit();
    let landscape = |outcomes: Vec<Outcome>| Landscape {
        version: kernel.name().into(),
        problem: p,
        device: Some(dev.clone()),
        params: space.params.clone(),
        outcomes,
    };
    // The landscape so far, rewritten every PARTIAL outcomes: a run killed from outside (a time
    // limit) still leaves what it measured in a file, not only in the store.
    const PARTIAL: usize = 50;
    let mut so_far: Vec<Outcome> = Vec::new();
    let report = run::tune(&req, &jit, |o, fresh| {
        if let (Some(s), Some(id), true) = (store, run_id, fresh) {
            record::record(s.conn(), id, o)?;
        }
        if let Some(path) = &a.landscape {
            so_far.push(o.clone());
            if so_far.len().is_multiple_of(PARTIAL) {
                landscape(so_far.clone()).save(path)?;
            }
        }
        pb.inc(1);
        if o.status == Status::Ok {
            if let (Some(t), Some(tf)) = (o.median_ms, o.tflops) {
                if best.as_ref().is_none_or(|(b, _)| t < *b) {
                    best = Some((t, format!("best {} {tf:.1} TFLOPS ({t:.4} ms)", o.config)));
                }
            }
        }
        if let Some((_, line)) = &best {
            pb.set_message(line.clone());
        }
        if matches!(o.status, Status::Timeout | Status::Crash | Status::Wrong) {
            pb.println(format!("  {} {}: {}", o.status.name(), o.config, o.reason));
        }
        Ok(())
    });
    pb.finish_and_clear();
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            if let (Some(s), Some(id)) = (store, run_id) {
                let _ = record::finish(s.conn(), id, "failed");
            }
            return Err(e);
        }
    };
    if let (Some(s), Some(id)) = (store, run_id) {
        record::finish(s.conn(), id, "ok")?;
        // (The test-only planted version has nothing worth caching.)
        if let Some(b) = report
            .best
            .as_ref()
            .filter(|_| kernel.name() != kiln::ops::gemm::planted::NAME)
        {
            cache::save(
                s.conn(),
                &cache::key_of(&dev, kernel.name(), &p),
                &b.config,
                b.tflops,
                Some(id),
            )?;
        }
    }
    if let Some(path) = &a.landscape {
        landscape(report.outcomes.clone()).save(path)?;
    }
    if print {
        report::print_report(&report, a.top, run_id);
    }
    Ok(RunReport {
        run: run_id,
        version: kernel.name().into(),
        device: dev,
        problem: p,
        report,
    })
}

pub fn worker(env: &Env, a: &TuneWorkerArgs) -> Result<ExitCode> {
    let stdin = std::io::stdin();
    let stdout = std::io::stdout();
    let fatal = kiln::tune::worker::serve(
        a.gpu,
        env.jit(),
        env.config.overrides.clone(),
        env.tuned(),
        stdin.lock(),
        stdout.lock(),
    )?;
    Ok(exit_if(fatal, 3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln::ops::attention::AttnLayout;

    fn tune_args(argv: &[&str]) -> TuneArgs {
        use clap::Parser;
        let mut full = vec!["kiln", "tune"];
        full.extend_from_slice(argv);
        match super::super::args::Cli::try_parse_from(full)
            .unwrap()
            .command
        {
            super::super::args::Command::Tune(a) => *a,
            _ => unreachable!(),
        }
    }

    #[test]
    fn tune_attn_builds_the_problem_and_refuses_clearly() {
        let a = tune_args(&[
            "attn", "--batch", "4", "--heads", "16", "--seqlen", "4096", "--dim", "128", "--causal",
        ]);
        let (version, p) = requested(&a).unwrap();
        assert_eq!(version.as_deref(), Some("fa3_wgmma"));
        let TuneProblem::Attention(q) = p else {
            panic!("{p:?}")
        };
        assert_eq!(
            (q.batch, q.heads_q, q.seqlen_kv, q.head_dim),
            (4, 16, 4096, 128)
        );
        assert!(q.causal && q.layout == AttnLayout::Bshd);
        let err = |argv: &[&str]| requested(&tune_args(argv)).unwrap_err().to_string();
        assert!(err(&["attn", "--batch", "4", "--seqlen", "64"]).contains("--heads, --dim"));
        assert!(
            err(&["attn", "--batch", "1", "--heads", "2", "--seqlen", "64", "--dim", "96"])
                .contains("96")
        );
        assert!(err(&["attn", "--shape", "64"]).contains("GEMM shape"));
        assert!(
            err(&["--version", "mma_sync", "--shape", "64", "--dim", "64"])
                .contains("kiln tune attn")
        );
        assert!(err(&["conv"]).contains("gemm and attn"));
        // the backward: every version unless one is named; the deterministic mode kept
        let b = tune_args(&[
            "attn",
            "--backward",
            "--deterministic",
            "--batch",
            "1",
            "--heads",
            "16",
            "--seqlen",
            "16384",
            "--dim",
            "256",
        ]);
        let (version, p) = requested(&b).unwrap();
        assert_eq!(version, None);
        assert!(
            matches!(p, TuneProblem::AttentionBackward(q) if q.deterministic && q.attn.head_dim == 256)
        );
        assert!(err(&["--backward", "--shape", "64"]).contains("kiln tune attn --backward"));
        let bhsd = tune_args(&[
            "attention",
            "--batch",
            "1",
            "--heads",
            "2",
            "--seqlen",
            "64",
            "--dim",
            "64",
            "--layout",
            "BHSD",
        ]);
        assert!(matches!(requested(&bhsd).unwrap().1,
            TuneProblem::Attention(q) if q.layout == AttnLayout::Bhsd));
        let (_, g) = requested(&tune_args(&["--version", "mma_sync", "--shape", "64"])).unwrap();
        assert_eq!(g.op(), "gemm");
        assert_eq!(search_kind("model").unwrap(), "evo");
        assert_eq!(search_kind("evolutionary").unwrap(), "evo");
        assert!(search_kind("grid").is_err());
    }

    #[test]
    fn gpus_parse_in_the_fake_worker_mode() {
        // (the fake-worker mode parses without asking a driver how many GPUs there are)
        assert_eq!(gpus("0, 1", true).unwrap(), vec![0, 1]);
        assert_eq!(gpus("all", true).unwrap(), vec![0]);
        assert!(gpus("x", false).is_err());
    }

    #[test]
    fn gpus_that_do_not_exist_are_refused() {
        assert!(check_gpus("0,1", &[0, 1], 2).is_ok());
        let e = check_gpus("0,2", &[0, 2], 2).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        assert!(
            e.to_string()
                .contains("names GPU 2, but this machine has 2 GPUs (indices 0 to 1)"),
            "{e}"
        );
        let e = check_gpus("1", &[1], 1).unwrap_err().to_string();
        assert!(e.contains("this machine has one GPU (index 0)"), "{e}");
        let e = check_gpus("0,0", &[0, 0], 2).unwrap_err().to_string();
        assert!(e.contains("names GPU 0 twice"), "{e}");
    }
}
