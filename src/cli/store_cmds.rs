//! `kiln cache` and `kiln results`: the JIT cache's folder (shown or cleared) and the results the
//! store keeps, newest first.

use std::process::ExitCode;

use kiln::error::{Error, Result};
use kiln::report::Table;
use serde_json::json;

use super::args::{CacheArgs, ResultsArgs};
use super::env::Env;

pub fn cache(env: &Env, a: &CacheArgs) -> Result<ExitCode> {
    let jit = env.jit();
    let dc = jit.cache.expect("the default JIT has a cache");
    match a.action.as_str() {
        "path" => println!("{}", dc.root.display()),
        "clear" => println!(
            "removed {} cached kernels from {}",
            dc.clear()?,
            dc.root.display()
        ),
        other => {
            return Err(Error::invalid(format!(
                "unknown cache action `{other}`; use `path` or `clear`"
            )))
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn results(env: &Env, a: &ResultsArgs) -> Result<ExitCode> {
    let store = env.store()?;
    let rows = store.results(a.op.as_deref(), a.version.as_deref(), a.limit)?;
    if env.json {
        env.print_json(&json!(rows));
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&[
        "run", "started", "kind", "device", "commit", "version", "problem", "passed", "metrics",
    ]);
    for r in rows {
        t.row(&[
            r.run_id.to_string(),
            r.started,
            r.kind,
            r.device.unwrap_or_default(),
            r.kiln_commit,
            r.version,
            r.problem.to_string(),
            r.passed.map(|p| p.to_string()).unwrap_or_default(),
            r.metrics.to_string(),
        ]);
    }
    print!("{}", t.render());
    println!("store: {}", store.path().display());
    Ok(ExitCode::SUCCESS)
}
