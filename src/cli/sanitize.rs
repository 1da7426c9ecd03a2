//! `kiln sanitize`: compute-sanitizer over versions at built-in, given or fuzz-drawn problems, or
//! over every forced tile config; a table of what each tool found.

use std::process::ExitCode;
use std::time::Duration;

use kiln::error::{Error, Result};
use kiln::ops::gemm::GemmKernel;
use kiln::report::grid::Grid;
use kiln::store::rows;
use kiln::tools::sanitize as san;
use serde_json::json;

use super::args::*;
use super::env::{finish, record, Env};
use super::progress::bar;
use super::verdicts::exit_if;

pub fn sanitize(env: &Env, a: &SanitizeArgs) -> Result<ExitCode> {
    // --configs: the versions with forced setups (`wgmma_tma_ws`'s tile configs)
    let forced: Vec<&dyn GemmKernel> = env
        .registry
        .gemm()
        .iter()
        .map(|k| k.as_ref())
        .filter(|k| !k.forced_setups().is_empty())
        .collect();
    let gemm_names = |names: &mut dyn Iterator<Item = &String>| -> Result<Vec<String>> {
        let named = names.map(|v| env.registry.gemm_version(v).map(|k| k.name().to_string()));
        named.collect()
    };
    let is_backward = |v: &String| env.registry.attention_backward_version(v).is_ok();
    let is_other = |v: &String| {
        v.as_str() == kiln::ops::fp8::gemm::NAME
            || kiln::tools::sanitize_fp4::is_fp4(v)
            || is_backward(v)
    };
    let versions: Vec<String> = if a.configs {
        forced.iter().map(|k| k.name().to_string()).collect()
    } else if a.versions.iter().any(is_other) {
        // the FP8 GEMM, the 4-bit kernels and the attention backward: their own problems (`kiln
        // verify --dtype e4m3|e5m2 --scale ...`, `kiln moe verify --weights ...`, `kiln fp4
        // verify`, `kiln attn verify --backward`)
        gemm_names(&mut a.versions.iter().filter(|v| !is_other(v)))?
    } else if a.versions.is_empty() {
        env.registry
            .gemm()
            .iter()
            .filter(|k| !k.is_vendor())
            .map(|k| k.name().to_string())
            .collect()
    } else {
        gemm_names(&mut a.versions.iter())?
    };
    let tools: Vec<String> = if a.tools.is_empty() {
        san::TOOLS.iter().map(|s| s.to_string()).collect()
    } else {
        a.tools.clone()
    };
    if let Some(t) = tools.iter().find(|t| !san::TOOLS.contains(&t.as_str())) {
        return Err(Error::Unknown {
            what: "sanitizer tool",
            name: t.clone(),
            known: san::TOOLS.join(", "),
        });
    }
    if a.jobs == 0 {
        return Err(Error::invalid("--jobs 0 would run nothing: give 1 or more"));
    }
    let problems: Vec<san::Problem> = if a.problems.is_empty() {
        san::default_problems()
    } else {
        a.problems
            .iter()
            .map(|p| san::parse_problem(p))
            .collect::<Result<_>>()?
    };
    // --configs plans each case for this GPU's SMs (--list without one: an H100's)
    let dev = kiln::device::init()
        .ok()
        .and_then(|_| kiln::device::DeviceInfo::query(0).ok());
    let sm_count = dev
        .as_ref()
        .map_or(kiln::device::DeviceInfo::h100_sxm().sm_count, |d| {
            d.sm_count
        });
    let (cases, uncovered) = if a.configs {
        san::config_cases(&forced, &tools, sm_count)
    } else if let Some(n) = a.fuzz {
        if n == 0 {
            return Err(Error::invalid("--fuzz 0 draws no problem: give 1 or more"));
        }
        let mut d = kiln::harness::draw::Draw::new(a.seed);
        let small = kiln::harness::draw::GemmDraw {
            max_dim: 320,
            ..kiln::harness::draw::GemmDraw::fuzz()
        };
        let cases = (0..n)
            .flat_map(|_| san::Case::drawn(&versions, &tools, &d.gemm(&small)))
            .collect();
        (cases, Vec::new())
    } else {
        (san::Case::all(&versions, &tools, &problems), Vec::new())
    };
    // The FP8 GEMM's runs: by default (beside every kiln version) or when named.
    let fp8_named = a.versions.iter().any(|v| v == kiln::ops::fp8::gemm::NAME);
    let default_run =
        a.versions.is_empty() && a.problems.is_empty() && !a.configs && a.fuzz.is_none();
    let mut cases = cases;
    if fp8_named || default_run {
        cases.extend(kiln::tools::sanitize_fp8::fp8_cases(&tools));
    }
    // The 4-bit kernels' runs: likewise, those named or both.
    let fp4_named: Vec<String> = a
        .versions
        .iter()
        .filter(|v| kiln::tools::sanitize_fp4::is_fp4(v))
        .cloned()
        .collect();
    if !fp4_named.is_empty() || default_run {
        cases.extend(kiln::tools::sanitize_fp4::fp4_cases(&fp4_named, &tools));
    }
    // The attention backward's runs: the versions named, each at the head dims it takes, or by
    // default what the dispatch runs for its small problems.
    {
        use kiln::tools::sanitize_attn_bwd as bwd;
        let model = dev
            .clone()
            .unwrap_or_else(kiln::device::DeviceInfo::h100_sxm);
        let mut named = Vec::new();
        for v in a.versions.iter().filter(|v| is_backward(v)) {
            let runs = bwd::runs_of(env.registry.attention_backward_version(v)?, &model);
            named.push((v.clone(), runs));
        }
        if default_run {
            named = bwd::dispatched(&env.registry, &model);
        }
        cases.extend(bwd::backward_cases(&named, &tools));
    }
    if a.list {
        if env.json {
            env.print_json(&json!({"cases": cases, "uncovered": uncovered}));
        } else {
            for c in cases.iter().filter(|c| c.tool == tools[0]) {
                println!("{}: {}", c.version, c.problem());
            }
            for u in &uncovered {
                println!("NOT COVERED: {u} (no problem of the list runs it)");
            }
            println!(
                "{} runs ({} tools) planned for {} SMs",
                cases.len(),
                tools.len(),
                sm_count
            );
        }
        return Ok(exit_if(!uncovered.is_empty(), 1));
    }
    kiln::device::init()?;
    let sanitizer = san::SANITIZER.find()?;
    let kiln_bin = kiln::tools::this_kiln()?;
    let run = env.begin("sanitize", dev.as_ref())?;
    let pb = bar(cases.len(), "sanitize", env.json);
    let mut found: Vec<Option<san::Finding>> = vec![None; cases.len()];
    san::run_cases(
        &sanitizer,
        &kiln_bin,
        &cases,
        Duration::from_secs(a.timeout),
        a.jobs,
        |i, f| {
            let c = &cases[i];
            pb.set_message(format!("{} {}", c.tool, c.problem()));
            record(&run, rows::sanitize_row(c, &f))?;
            if !f.clean() {
                pb.println(format!(
                    "{} {} {}: {}",
                    c.tool,
                    c.version,
                    c.problem(),
                    f.first.clone().unwrap_or_default()
                ));
            }
            pb.inc(1);
            found[i] = Some(f);
            Ok(())
        },
    )?;
    pb.finish_and_clear();
    let found: Vec<san::Finding> = found.into_iter().flatten().collect();
    let dirty = found.iter().any(|f| !f.clean()) || !uncovered.is_empty();
    finish(&run, if dirty { "failed" } else { "ok" })?;
    if env.json {
        env.print_json(&json!({"findings": found, "uncovered": uncovered}));
    } else {
        let mut rows: Vec<&str> = Vec::new();
        for f in &found {
            if !rows.contains(&f.case.row()) {
                rows.push(f.case.row());
            }
        }
        let mut g = Grid::new(
            &std::iter::once(if a.configs { "setup" } else { "version" })
                .chain(tools.iter().map(String::as_str))
                .collect::<Vec<_>>(),
        );
        for row in rows {
            let mut cells = vec![row.to_string()];
            for t in &tools {
                let mine: Vec<&san::Finding> = found
                    .iter()
                    .filter(|f| f.case.row() == row && &f.case.tool == t)
                    .collect();
                let errors: usize = mine.iter().filter_map(|f| f.errors).sum();
                let skipped = mine.iter().filter(|f| f.skipped.is_some()).count();
                cells.push(if mine.iter().all(|f| f.clean()) && skipped == mine.len() {
                    "skipped (refused every problem)".into()
                } else if mine.iter().all(|f| f.clean()) {
                    format!(
                        "clean ({} of {} problems ran)",
                        mine.len() - skipped,
                        mine.len()
                    )
                } else if mine.iter().any(|f| f.timed_out) {
                    "TIMED OUT".into()
                } else if errors > 0 {
                    format!("{errors} errors")
                } else {
                    "FAILED".into()
                });
            }
            g.row(&cells);
        }
        print!("{}", g.to_table().render());
        for f in found.iter().filter(|f| !f.clean()) {
            println!(
                "{} {} {}: {}",
                f.case.tool,
                f.case.version,
                f.case.problem(),
                f.first.clone().unwrap_or_default()
            );
        }
        for u in &uncovered {
            println!("NOT COVERED: {u} (no problem of the list runs it)");
        }
        println!(
            "{} runs over {}{} with {}; {}",
            found.len(),
            if a.configs {
                format!(
                    "{} setups of {}",
                    found
                        .iter()
                        .map(|f| f.case.row())
                        .collect::<std::collections::BTreeSet<_>>()
                        .len(),
                    versions.join(", ")
                )
            } else {
                let named: std::collections::BTreeSet<&str> =
                    found.iter().map(|f| f.case.version.as_str()).collect();
                format!("{} versions", named.len())
            },
            if a.jobs > 1 {
                format!(" ({} at a time)", a.jobs)
            } else {
                String::new()
            },
            sanitizer.display(),
            if dirty {
                "some reported errors"
            } else {
                "all clean"
            }
        );
    }
    Ok(exit_if(dirty, 1))
}
