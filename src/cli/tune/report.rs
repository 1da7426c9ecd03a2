//! What `kiln tune` prints at its end (the candidates ranked, counts by status, rejections by
//! reason, the best, the compile times) and `kiln tune-replay` (the search replayed on a
//! recorded landscape).

use std::collections::BTreeMap;
use std::process::ExitCode;

use kiln::error::Result;
use kiln::report::Table;
use kiln::tune::landscape::Landscape;
use kiln::tune::search::{replay as replay_search, replay_from, EvoParams};
use kiln::tune::space::Config;
use kiln::tune::target::Target;
use kiln::tune::{run, Outcome, Status};
use serde_json::json;

use super::super::args::TuneReplayArgs;
use super::super::env::Env;

pub(super) fn print_report(r: &run::TuneReport, top: usize, run_id: Option<i64>) {
    let best_ms = r.best.as_ref().and_then(|b| b.median_ms);
    let mut rows: Vec<&Outcome> = r.outcomes.iter().collect();
    // the leaders timed together first (one clock), then the rest as the search timed them
    let apart = |o: &Outcome| !r.together.contains(&o.config);
    rows.sort_by(|a, b| (apart(a).cmp(&apart(b))).then(a.time().total_cmp(&b.time())));
    let mut t = Table::new(&[
        "config",
        "status",
        "TFLOPS",
        "vs best",
        "regs",
        "smem KiB",
        "compile ms",
        "note",
    ]);
    for o in rows.iter().take(top) {
        t.row(&[
            o.config.label(),
            o.status.name().to_string(),
            o.tflops.map(|x| format!("{x:.1}")).unwrap_or_default(),
            match (o.median_ms, best_ms) {
                (Some(m), Some(b)) if o.status.timed() => format!("{:.3}", b / m),
                _ => String::new(),
            },
            o.registers.map(|x| x.to_string()).unwrap_or_default(),
            o.smem
                .map(|x| format!("{:.0}", x as f64 / 1024.0))
                .unwrap_or_default(),
            o.compile_ms.map(|x| format!("{x:.0}")).unwrap_or_default(),
            o.reason.chars().take(90).collect(),
        ]);
    }
    print!("{}", t.render());
    if !r.together.is_empty() {
        println!(
            "(the first {} timed again together, one launch of each a round, the best among them; the rest as the search timed them, at their own clocks)",
            r.together.len()
        );
    }
    if rows.len() > top {
        println!("({} more; --top N or --json shows them)", rows.len() - top);
    }
    let mut by_status: BTreeMap<&str, usize> = BTreeMap::new();
    for o in &r.outcomes {
        *by_status.entry(o.status.name()).or_default() += 1;
    }
    println!(
        "\n{} candidates of a {}-config space: {}",
        r.outcomes.len(),
        r.space_size,
        by_status
            .iter()
            .map(|(k, v)| format!("{v} {k}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // Rejections and failures by reason (numbers in a reason are folded so that alike ones group).
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    for o in r.outcomes.iter().filter(|o| !o.status.timed()) {
        let folded = fold_numbers(o.reason.split(';').next().unwrap_or(""));
        *reasons
            .entry(format!("{}: {}", o.status.name(), folded.trim()))
            .or_default() += 1;
    }
    for (reason, n) in &reasons {
        println!(
            "  {n:>4} x {}",
            reason.chars().take(140).collect::<String>()
        );
    }
    match &r.best {
        Some(b) => println!(
            "best: {} at {:.1} TFLOPS ({:.4} ms){}",
            b.config,
            b.tflops.unwrap_or(0.0),
            b.median_ms.unwrap_or(0.0),
            run_id
                .map(|id| format!(" (tuning run {id})"))
                .unwrap_or_default()
        ),
        None => println!("best: none (no candidate verified and timed)"),
    }
    println!(
        "compile: median cold {}{} per candidate; warm start (all timed candidates from the JIT cache) {}; wall {:.1} s",
        r.cold_compile_median_ms.map(|x| format!("{x:.0} ms")).unwrap_or_else(|| "n/a".into()),
        r.cold_compile_cpu_median_ms.map(|x| format!(" ({x:.0} ms CPU)")).unwrap_or_default(),
        r.warm_start_ms.map(|x| format!("{x:.1} ms")).unwrap_or_else(|| "n/a".into()),
        r.wall_s
    );
}

/// `reason` with every run of digits (and decimal points between them) replaced by `#`, so that
/// alike reasons group: "240 B shared memory over the 232448 B limit" -> "# B shared ...".
fn fold_numbers(reason: &str) -> String {
    let mut out = String::new();
    let mut in_number = false;
    for c in reason.chars() {
        let digit = c.is_ascii_digit() || (in_number && c == '.');
        if digit && !in_number {
            out.push('#');
        } else if !digit {
            out.push(c);
        }
        in_number = digit;
    }
    out
}

pub fn replay(env: &Env, a: &TuneReplayArgs) -> Result<ExitCode> {
    let l = Landscape::load(&a.landscape)?;
    let points = l.points();
    let space = l.space();
    let budget = ((points.len() as f64) * a.fraction).floor().max(1.0) as usize;
    let s = replay_search(&points, &space, a.trials, budget, a.within, a.seed);
    // As `kiln tune` runs it: the version's baseline (its heuristic's config for the landscape's
    // problem and device) evaluated first, when the landscape names a device and a known version.
    let baseline: Option<Config> = l.device.as_ref().and_then(|dev| {
        Target::find(&env.registry, &l.version, &l.problem)
            .ok()
            .and_then(|k| k.baseline(&l.problem, dev))
            // A landscape recorded before the space gained a parameter: the baseline's value
            // of it is left out (the recorded configs ran without it).
            .map(|mut c| {
                c.0.retain(|(k, _)| l.params.iter().any(|p| &p.name == k));
                c
            })
            .filter(|c| space.is_valid(c))
    });
    let from_baseline = baseline.as_ref().map(|b| {
        replay_from(
            &points,
            &space,
            a.trials,
            budget,
            a.within,
            EvoParams::seeded(a.seed),
            std::slice::from_ref(b),
        )
    });
    if env.json {
        env.print_json(
            &json!({"landscape": a.landscape, "version": l.version, "problem": l.problem, "summary": s,
                    "baseline": baseline.as_ref().map(|c| c.label()), "from_baseline": from_baseline}),
        );
        return Ok(ExitCode::SUCCESS);
    }
    let best = l
        .outcomes
        .iter()
        .filter(|o| o.status == Status::Ok)
        .min_by(|x, y| x.time().total_cmp(&y.time()));
    println!(
        "landscape: {} on {} ({} configs, {} timed)",
        l.version,
        l.problem.label(),
        points.len(),
        points.iter().filter(|(_, t)| t.is_finite()).count()
    );
    if let Some(b) = best {
        println!(
            "exhaustive best: {} at {:.4} ms ({:.1} TFLOPS)",
            b.config,
            b.median_ms.unwrap_or(0.0),
            b.tflops.unwrap_or(0.0)
        );
    }
    println!(
        "evolutionary search, {} trials (seeds {}..{}), {} evaluations each ({:.0}% of the space):",
        s.trials,
        a.seed,
        a.seed + s.trials as u64 - 1,
        s.budget,
        100.0 * s.budget as f64 / points.len().max(1) as f64
    );
    println!(
        "  within {:.0}% of the exhaustive best: {}/{} trials ({:.0}%); median evaluations to get there: {}; worst trial: {:.3}x the best time",
        100.0 * s.within,
        s.hits,
        s.trials,
        100.0 * s.hit_rate,
        s.median_evals_to_hit.map(|x| x.to_string()).unwrap_or_else(|| "-".into()),
        s.worst_ratio
    );
    if let (Some(b), Some(f)) = (&baseline, &from_baseline) {
        println!(
            "  from the heuristic's config ({b}, evaluated first, as `kiln tune` does): {}/{} trials ({:.0}%); worst trial: {:.3}x the best time",
            f.hits,
            f.trials,
            100.0 * f.hit_rate,
            f.worst_ratio
        );
        // What the start alone is worth: a baseline already within reach makes that rate free.
        if let Some((_, t)) = points.iter().find(|(c, _)| c == b) {
            println!(
                "  the heuristic's config alone: {:.3}x the best time",
                t / s.best_ms
            );
        }
    }
    let near = points
        .iter()
        .filter(|(_, t)| *t <= s.best_ms * (1.0 + s.within))
        .count();
    println!(
        "  configs within {:.0}% of the best: {near} of {}",
        100.0 * s.within,
        points.len()
    );
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reasons_fold_their_numbers() {
        assert_eq!(
            fold_numbers("245760 B shared memory over the 232448 B limit"),
            "# B shared memory over the # B limit"
        );
        assert_eq!(
            fold_numbers("no answer within 3.8 s: killed"),
            "no answer within # s: killed"
        );
    }
}
