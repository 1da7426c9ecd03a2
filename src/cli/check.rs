//! `kiln check`: every kernel variant compiled for an architecture, with its registers, shared
//! memory, spills and compile time, recorded (the suite runs it first).

use std::process::ExitCode;

use kiln::error::Result;
use kiln::harness::check;
use kiln::report::Table;
use kiln::store::rows;
use serde_json::json;

use super::args::CheckArgs;
use kiln::device::DeviceInfo;

use super::env::{device_or_h100, finish, record, Env};
use super::progress::bar;
use super::verdicts::exit_if;

pub fn check(env: &Env, a: &CheckArgs) -> Result<ExitCode> {
    let (rows, failed) = run_check(env, &a.arch, a.version.as_deref())?;
    if env.json {
        env.print_json(&json!(rows));
    }
    Ok(exit_if(failed, 1))
}
/// Compiles every variant, prints the table (unless --json), records, and says if any failed.
pub(super) fn run_check(
    env: &Env,
    arch: &str,
    only: Option<&str>,
) -> Result<(Vec<check::CheckRow>, bool)> {
    kiln::jit::arch::check(arch)?;
    if let Some(v) = only {
        let fp4 = v == kiln::ops::moe::fp4::kernel::NAME
            || v == kiln::ops::moe::layer::NAME
            || kiln::ops::fp4::variants(arch)
                .iter()
                .any(|(name, _)| *name == v);
        let decode = kiln::ops::attention::decode_variants(arch).map(|(n, _)| n);
        let pointwise = kiln::ops::pointwise::variants(arch)
            .iter()
            .any(|(name, _)| *name == v);
        if !fp4
            && env.registry.attention_version(v).is_err()
            && env.registry.attention_backward_version(v).is_err()
            && env.registry.moe_version(v).is_err()
            && !decode.contains(&v)
            && !pointwise
        {
            env.registry.gemm_version(v)?;
        }
    }
    let dev = device_or_h100();
    let work = check::check_items(&env.registry, arch, only);
    let (rows, wall_ms) = compile_items(env, arch, &work, &dev)?;
    let failed = rows.iter().any(|r| !r.ok());
    if !env.json {
        print!("{}", check_table(&rows).render());
        println!("{}", check_summary(&rows, arch, wall_ms));
        if rows.iter().all(|r| r.cached) && !rows.is_empty() {
            println!(
                "warm start: all {} variants loaded from the JIT cache in {wall_ms:.1} ms",
                rows.len()
            );
        }
    }
    Ok((rows, failed))
}

/// Compiles `work` for `arch` (judged against `dev`'s limits) with a progress bar, and records
/// each row as a `check` run: the rows, in `work`'s order, and the wall time in ms.
pub(super) fn compile_items(
    env: &Env,
    arch: &str,
    work: &[check::CheckItem],
    dev: &DeviceInfo,
) -> Result<(Vec<check::CheckRow>, f64)> {
    kiln::jit::nvrtc::version()?;
    let jit = env.jit();
    let pb = bar(work.len(), "check", env.json);
    let started = std::time::Instant::now();
    let rows: Vec<check::CheckRow> = check::check_each(&jit, work, dev, |r| {
        pb.inc(1);
        pb.set_message(r.variant.clone());
    });
    pb.finish_and_clear();
    let wall_ms = started.elapsed().as_secs_f64() * 1e3;
    let run = env.begin("check", None)?;
    for r in &rows {
        record(&run, rows::check_row(r, arch))?;
    }
    let failed = rows.iter().any(|r| !r.ok());
    finish(&run, if failed { "failed" } else { "ok" })?;
    Ok((rows, wall_ms))
}

/// Every compiled variant in a row: its resources, compile time and verdict.
pub(super) fn check_table(rows: &[check::CheckRow]) -> Table {
    let mut t = Table::new(&[
        "version",
        "variant",
        "regs",
        "smem B",
        "stack B",
        "spills B",
        "compile ms",
        "verdict",
    ]);
    for r in rows {
        let res = r.resources.clone().unwrap_or_default();
        t.row(&[
            r.version.clone(),
            r.variant.clone(),
            res.registers.to_string(),
            (res.static_smem + r.dynamic_smem).to_string(),
            res.stack_frame.to_string(),
            (res.spill_stores + res.spill_loads).to_string(),
            format!(
                "{:.0}{}",
                r.compile_ms,
                if r.cached { " (cached)" } else { "" }
            ),
            if r.ok() {
                "ok".to_string()
            } else {
                r.problems.join("; ")
            },
        ]);
    }
    t
}

/// One line on a compile: how many variants in how long, compiled or from the cache, and how
/// many have problems.
pub(super) fn check_summary(rows: &[check::CheckRow], arch: &str, wall_ms: f64) -> String {
    let mut cold: Vec<f64> = rows
        .iter()
        .filter(|r| !r.cached && r.resources.is_some())
        .map(|r| r.compile_ms)
        .collect();
    // The compiling threads' CPU time next to the wall time: with more compiles in parallel
    // than free cores, each compile's wall time includes waiting for a core; its CPU time is
    // what one compile costs on its own (NVRTC compiles on the calling thread).
    let mut cold_cpu: Vec<f64> = rows
        .iter()
        .filter(|r| !r.cached && r.resources.is_some())
        .filter_map(|r| r.compile_cpu_ms)
        .collect();
    let cached = rows.iter().filter(|r| r.cached).count();
    let median = if cold.is_empty() {
        0.0
    } else {
        kiln::harness::bench::stats(&mut cold).0
    };
    let cpu = if cold_cpu.is_empty() {
        String::new()
    } else {
        format!(
            ", {:.0} ms CPU",
            kiln::harness::bench::stats(&mut cold_cpu).0
        )
    };
    format!(
        "{} variants for {arch} in {:.1} s ({} compiles in parallel): {} compiled (median {:.0} ms cold{cpu}), {} from the cache; {} with problems",
        rows.len(),
        wall_ms / 1e3,
        rayon::current_num_threads(),
        cold.len(),
        median,
        cached,
        rows.iter().filter(|r| !r.ok()).count()
    )
}

/// Compiles `items` (one op's variants, outside the registry) on the CPU and prints registers,
/// spills and the verdict of each, or their JSON; exit 1 if any has a problem. `fp8 check` and
/// `fp4 check` share it.
pub fn check_listed(env: &Env, items: Vec<check::CheckItem>, label: &str) -> Result<ExitCode> {
    let dev = DeviceInfo::h100_sxm();
    let pb = bar(items.len(), label, env.json);
    let rows = check::check_each(&env.jit(), &items, &dev, |_| pb.inc(1));
    pb.finish_and_clear();
    let failed = rows.iter().filter(|r| !r.ok()).count();
    if env.json {
        env.print_json(&json!(rows));
    } else {
        let mut t = Table::new(&["variant", "registers", "spills", "verdict"]);
        for r in &rows {
            let res = r.resources.clone().unwrap_or_default();
            t.row(&[
                r.variant.clone(),
                res.registers.to_string(),
                format!("{}/{}", res.spill_stores, res.spill_loads),
                if r.ok() {
                    "ok".into()
                } else {
                    r.problems.join("; ")
                },
            ]);
        }
        print!("{}", t.render());
        println!("{} variants, {failed} failed", rows.len());
    }
    Ok(exit_if(failed > 0, 1))
}
