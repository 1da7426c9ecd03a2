//! What every verify command does the same way: the checks as they land (a progress bar with
//! the FAIL lines above it, or the FAIL lines on stderr; the store's rows; the run's status), a
//! table of outcomes from named columns (a row per check) or a row per version, and the exit
//! code (7 when a check failed).

use std::process::ExitCode;

use indicatif::ProgressBar;
use kiln::device::{Context, DeviceInfo};
use kiln::error::Result;
use kiln::harness::outcome::Outcome;
use kiln::report::{sci, Table};
use kiln::store::{ResultRow, Store};

use super::env::{finish, record, Env};
use super::progress::bar;

/// `code` when something failed, else success.
pub(super) fn exit_if(failed: bool, code: u8) -> ExitCode {
    if failed {
        ExitCode::from(code)
    } else {
        ExitCode::SUCCESS
    }
}

/// A verify command's exit: 7 when a check failed.
pub(super) fn verified(failed: bool) -> ExitCode {
    exit_if(failed, 7)
}

/// The checks of one verify command as they land.
pub(super) struct Landing {
    pb: Option<ProgressBar>,
    run: Option<(Store, i64)>,
    json: bool,
}

impl Landing {
    /// Starts a run of `kind` in the store (none for `None` or --no-store) and, for
    /// `Some((checks, what))`, a progress bar.
    pub fn begin(
        env: &Env,
        ctx: &Context,
        kind: Option<&str>,
        progress: Option<(usize, &str)>,
    ) -> Result<Landing> {
        let run = match kind {
            Some(k) => env.begin(k, Some(&ctx.info))?,
            None => None,
        };
        Ok(Landing {
            pb: progress.map(|(n, what)| bar(n, what, env.json)),
            run,
            json: env.json,
        })
    }

    /// Says `line` when `failed`: above the progress bar, or without one on stderr (not with
    /// --json).
    pub fn fail(&self, failed: bool, line: impl FnOnce() -> String) {
        if failed {
            self.say(line);
        }
    }

    /// Says `line`: above the progress bar, or without one on stderr (not with --json).
    pub fn say(&self, line: impl FnOnce() -> String) {
        match &self.pb {
            Some(pb) => pb.println(line()),
            None if !self.json => eprintln!("{}", line()),
            None => {}
        }
    }

    /// One case done: the FAIL line of each of its outcomes that failed (`FAIL check label:
    /// message`), the outcomes kept in `into`, the bar moved.
    pub fn land(&self, into: &mut Vec<Outcome>, got: Vec<Outcome>) {
        for o in got {
            self.fail(!o.passed, || fail_line(&o));
            into.push(o);
        }
        self.tick();
    }

    /// Records a check's row in the store's run.
    pub fn record(&self, row: ResultRow) -> Result<()> {
        record(&self.run, row)
    }

    /// One more check (or case) done on the progress bar.
    pub fn tick(&self) {
        if let Some(pb) = &self.pb {
            pb.inc(1);
        }
    }

    /// Clears the progress bar and closes the store's run as failed or ok.
    pub fn end(self, failed: bool) -> Result<()> {
        if let Some(pb) = &self.pb {
            pb.finish_and_clear();
        }
        finish(&self.run, if failed { "failed" } else { "ok" })
    }

    /// Each of `checks` as it lands: its FAIL line (`fail`) when it failed, its store row
    /// (`row`, where the family records one), the bar moved; the outcomes.
    pub fn each(
        &self,
        checks: impl IntoIterator<Item = Result<Outcome>>,
        fail: impl Fn(&Outcome) -> String,
        row: Option<&dyn Fn(&Outcome) -> ResultRow>,
    ) -> Result<Vec<Outcome>> {
        let mut outcomes = Vec::new();
        for o in checks {
            let o = o?;
            self.fail(!o.passed, || fail(&o));
            if let Some(row) = row {
                self.record(row(&o))?;
            }
            self.tick();
            outcomes.push(o);
        }
        Ok(outcomes)
    }

    /// The end of a verify command: the run closed, the outcomes as JSON or as `render` writes
    /// them, and the exit (7 when a check failed).
    pub fn report(
        self,
        env: &Env,
        outcomes: &[Outcome],
        render: impl FnOnce(&[Outcome]) -> String,
    ) -> Result<ExitCode> {
        let failed = outcomes.iter().any(|o| !o.passed);
        self.end(failed)?;
        if env.json {
            env.print_json(&serde_json::json!(outcomes));
        } else {
            print!("{}", render(outcomes));
        }
        Ok(verified(failed))
    }
}

/// The checks of `outcomes` that did not pass.
pub(super) fn failures(outcomes: &[Outcome]) -> usize {
    outcomes.iter().filter(|o| !o.passed).count()
}

/// A verify command's outcomes as JSON (with `device`: `{device, outcomes}`, else the list), or
/// as the table of `columns` with the `summary` line under it.
pub(super) fn print_outcomes(
    env: &Env,
    device: Option<&DeviceInfo>,
    outcomes: &[Outcome],
    columns: &[Column],
    summary: impl FnOnce() -> String,
) {
    match (env.json, device) {
        (true, Some(d)) => {
            env.print_json(&serde_json::json!({ "device": d, "outcomes": outcomes }))
        }
        (true, None) => env.print_json(&serde_json::json!(outcomes)),
        (false, _) => {
            print!("{}", table(columns, outcomes).render());
            println!("{}", summary());
        }
    }
}

/// The FAIL line of a check: "FAIL {check} {label}: {message}".
pub(super) fn fail_line(o: &Outcome) -> String {
    format!("FAIL {} {}: {}", o.check, o.label, o.message)
}

/// A column of a table of `T`s (outcomes, timings): its heading and its cell.
pub(super) type Cell<T> = (&'static str, fn(&T) -> String);

/// A column of a table of outcomes.
pub(super) type Column = Cell<Outcome>;

pub(super) const CHECK: Column = ("check", |o| o.check.clone());
pub(super) const VERSION: Column = ("version", |o| o.check.clone());
pub(super) const CASE: Column = ("case", |o| o.label.clone());
pub(super) const PROBLEM: Column = ("problem", |o| o.label.clone());
pub(super) const REL_ERROR: Column = ("rel error", |o| format!("{:.2e}", o.rel_error));
/// The relative error as `sci` writes it (`-` where nothing was compared).
pub(super) const REL_ERR: Column = ("rel err", |o| sci(o.rel_error));
pub(super) const BEYOND_ROUNDING: Column = ("beyond rounding", |o| sci(o.rel_error_rounded()));
pub(super) const BOUND: Column = ("bound", |o| format!("{:.0e}", o.bound));
pub(super) const BOUND_SCI: Column = ("bound", |o| sci(o.bound));
pub(super) const ROWS: Column = ("rows", |o| o.rows_checked.to_string());
pub(super) const VERDICT: Column = ("verdict", Outcome::verdict_text);

/// A row per outcome (or timing), the cells of `columns`.
pub(super) fn table<T>(columns: &[Cell<T>], rows: &[T]) -> Table {
    let heads: Vec<&str> = columns.iter().map(|c| c.0).collect();
    let mut t = Table::new(&heads);
    for o in rows {
        t.row(&columns.iter().map(|c| (c.1)(o)).collect::<Vec<_>>());
    }
    t
}

/// What a row per version reads of one check.
pub(super) trait Tallied {
    fn version(&self) -> &str;
    fn passed(&self) -> bool;
    fn skipped(&self) -> bool;
    /// "label: message", the first failure's cell.
    fn failure(&self) -> String;
}

impl Tallied for Outcome {
    fn version(&self) -> &str {
        &self.check
    }
    fn passed(&self) -> bool {
        self.passed
    }
    fn skipped(&self) -> bool {
        self.skipped.is_some()
    }
    fn failure(&self) -> String {
        format!("{}: {}", self.label, self.message)
    }
}

/// A column of the row per version: its heading and its cell from the checks that ran.
pub(super) type Summary<'a, T> = (&'a str, &'a dyn Fn(&[&T]) -> String);

/// The largest finite value of `f` over `ran` (0 for none).
pub(super) fn largest<T>(ran: &[&T], f: impl Fn(&T) -> f64) -> f64 {
    ran.iter()
        .map(|o| f(o))
        .filter(|e| e.is_finite())
        .fold(0.0f64, f64::max)
}

/// A row per version in `names`' order: the checks passed, failed and skipped, the `extra`
/// columns over the checks that ran, and the first failure.
pub(super) fn by_version<T: Tallied>(
    names: &[&str],
    checks: &[T],
    extra: &[Summary<'_, T>],
) -> Table {
    let mut heads = vec!["version", "passed", "failed", "skipped"];
    heads.extend(extra.iter().map(|e| e.0));
    heads.push("first failure");
    let mut t = Table::new(&heads);
    for name in names {
        let mine: Vec<&T> = checks.iter().filter(|o| o.version() == *name).collect();
        let ran: Vec<&T> = mine.iter().copied().filter(|o| !o.skipped()).collect();
        let first = ran.iter().find(|o| !o.passed());
        let passed = ran.iter().filter(|o| o.passed()).count();
        let mut row = vec![
            name.to_string(),
            passed.to_string(),
            (ran.len() - passed).to_string(),
            (mine.len() - ran.len()).to_string(),
        ];
        row.extend(extra.iter().map(|e| (e.1)(&ran)));
        row.push(first.map(|o| o.failure()).unwrap_or_default());
        t.row(&row);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln::harness::outcome::Extra;

    fn outcome(version: &str, label: &str, passed: bool, err: f64) -> Outcome {
        Outcome {
            passed,
            rel_error: err,
            message: if passed { "ok" } else { "too far" }.into(),
            ..Outcome::new(version, label.into(), 1, 1e-2, Extra::Fp4)
        }
    }

    #[test]
    fn a_row_per_version_counts_and_names_the_first_failure() {
        let checks = vec![
            outcome("a", "p1", true, 1e-3),
            outcome("a", "p2", false, 5e-2),
            outcome("b", "p1", true, f64::NAN),
            outcome("b", "p2", true, 0.0).skip("too small".into()),
        ];
        let err = |ran: &[&Outcome]| format!("{:.2e}", largest(ran, |o| o.rel_error));
        let t = by_version(&["a", "b"], &checks, &[("max rel error", &err)]).render();
        let rows: Vec<Vec<&str>> = t
            .lines()
            .map(|l| l.trim_matches('|').split('|').map(str::trim).collect())
            .collect();
        assert_eq!(
            rows[0],
            [
                "version",
                "passed",
                "failed",
                "skipped",
                "max rel error",
                "first failure"
            ]
        );
        assert_eq!(rows[2], ["a", "1", "1", "0", "5.00e-2", "p2: too far"]);
        assert_eq!(rows[3], ["b", "1", "0", "1", "0.00e0", ""]);
    }

    #[test]
    fn exit_codes_say_failure_with_the_given_code() {
        assert_eq!(verified(false), ExitCode::SUCCESS);
        assert_eq!(verified(true), ExitCode::from(7));
        assert_eq!(exit_if(true, 1), ExitCode::from(1));
    }
}
