//! The store: an embedded SQLite file that keeps every verify, bench and check run and each
//! result it produced, so that any number can be traced back to the device, command and commit
//! that made it. Each result is committed as soon as it is recorded, so a crash loses nothing
//! gathered before it; WAL mode and a busy timeout let several kiln processes write at once.

pub mod rows;
mod schema;
mod time;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::types::Type;
use rusqlite::{params, Connection, ErrorCode, OptionalExtension, ToSql};
use serde::{Deserialize, Serialize};

use crate::device::DeviceInfo;
use crate::error::{Error, Result};

pub use schema::VERSION as SCHEMA_VERSION;
pub use time::utc_now;

/// How long a write waits for another process's write to finish before giving up.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// One invocation of kiln that produces results.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    /// `verify`, `bench`, `check`, `suite`, ...
    pub kind: String,
    /// The command line, as the user typed it.
    pub command: String,
    /// The GPU the run used; `None` for runs that need none (`check` without a GPU).
    pub device: Option<DeviceInfo>,
    pub kiln_commit: String,
}

/// One result of a run: one kernel version (and variant) on one problem.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultRow {
    pub op: String,
    pub version: String,
    /// The parameters that tell variants of one version apart, e.g. the kernel label.
    pub variant: String,
    /// Shape, layout, dtypes.
    pub problem: serde_json::Value,
    /// Times, TFLOPS, error, ratio to the vendor, resources...
    pub metrics: serde_json::Value,
    /// `None` where the run did not check correctness.
    pub passed: Option<bool>,
}

/// A result read back, with what the store knows of its run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredResult {
    pub run_id: i64,
    /// When the run began, `YYYY-MM-DDTHH:MM:SSZ`.
    pub started: String,
    pub kind: String,
    /// The device's name.
    pub device: Option<String>,
    pub kiln_commit: String,
    pub op: String,
    pub version: String,
    pub variant: String,
    pub problem: serde_json::Value,
    pub metrics: serde_json::Value,
    pub passed: Option<bool>,
}

/// An open store.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl Store {
    /// Opens (creating it, its folder and its schema where missing) the store at `path`.
    pub fn open(path: &Path) -> Result<Store> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|source| Error::Io {
                what: "creating the store's folder",
                path: dir.to_path_buf(),
                source,
            })?;
        }
        let conn = Connection::open(path)
            .map_err(|e| Error::Store(format!("cannot open {}: {e}", path.display())))?;
        Store::setup(conn, path.to_path_buf())
    }

    /// Opens the store at [`default_path`].
    pub fn open_default() -> Result<Store> {
        Store::open(&default_path())
    }

    /// A store that lives in memory and vanishes when dropped (for tests).
    pub fn in_memory() -> Result<Store> {
        Store::setup(Connection::open_in_memory()?, PathBuf::from(":memory:"))
    }

    fn setup(mut conn: Connection, path: PathBuf) -> Result<Store> {
        let shown = path.display().to_string();
        let ctx = |e: rusqlite::Error| Error::Store(format!("cannot open {shown}: {e}"));
        conn.busy_timeout(BUSY_TIMEOUT).map_err(ctx)?;
        // Returns the mode now in force: `wal` for a file, `memory` for an in-memory store.
        // Switching a fresh file to WAL takes an exclusive lock without consulting the busy
        // handler, so processes opening the same new store at once retry here until the timeout.
        let started = std::time::Instant::now();
        let _mode: String = loop {
            match conn.query_row("PRAGMA journal_mode = WAL", [], |r| r.get(0)) {
                Ok(mode) => break mode,
                Err(e) if is_locked(&e) && started.elapsed() < BUSY_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => return Err(ctx(e)),
            }
        };
        conn.pragma_update(None, "foreign_keys", true)
            .map_err(ctx)?;
        schema::migrate(&mut conn, &shown)?;
        Ok(Store { conn, path })
    }

    /// The SQLite connection, for modules that keep their own tables beside runs and results
    /// (the experiment ledger).
    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// Where the store lives (`:memory:` for an in-memory one).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Wraps a SQLite error with what the store was doing and where.
    fn ctx<'a>(&'a self, doing: &'a str) -> impl FnOnce(rusqlite::Error) -> Error + 'a {
        move |e| Error::Store(format!("{doing} in {}: {e}", self.path.display()))
    }

    /// Records the start of a run (status `running`, started now) and returns its id.
    pub fn begin_run(&self, info: &RunInfo) -> Result<i64> {
        let device = match &info.device {
            Some(d) => Some(serde_json::to_string(d).map_err(|e| {
                Error::Store(format!("cannot serialise the device description: {e}"))
            })?),
            None => None,
        };
        self.conn
            .query_row(
                "INSERT INTO runs (started, kind, command, device_name, device, kiln_commit)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) RETURNING id",
                params![
                    utc_now(),
                    info.kind,
                    info.command,
                    info.device.as_ref().map(|d| d.name.as_str()),
                    device,
                    info.kiln_commit,
                ],
                |r| r.get(0),
            )
            .map_err(self.ctx("starting a run"))
    }

    /// Records one result of run `run_id`, committed before this returns.
    pub fn record(&self, run_id: i64, row: &ResultRow) -> Result<()> {
        let inserted = self.conn.execute(
            "INSERT INTO results (run_id, op, version, variant, problem, metrics, passed)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                run_id,
                row.op,
                row.version,
                row.variant,
                row.problem.to_string(),
                row.metrics.to_string(),
                row.passed,
            ],
        );
        match inserted {
            Ok(_) => Ok(()),
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == ErrorCode::ConstraintViolation =>
            {
                Err(self.no_run(run_id))
            }
            Err(e) => Err(self.ctx("recording a result")(e)),
        }
    }

    /// Marks run `run_id` as ended now, with `status` (`ok`, `failed`, `interrupted`, ...).
    pub fn finish_run(&self, run_id: i64, status: &str) -> Result<()> {
        let updated = self
            .conn
            .execute(
                "UPDATE runs SET status = ?1, finished = ?2 WHERE id = ?3",
                params![status, utc_now(), run_id],
            )
            .map_err(self.ctx("finishing a run"))?;
        if updated == 0 {
            return Err(self.no_run(run_id));
        }
        Ok(())
    }

    fn no_run(&self, run_id: i64) -> Error {
        Error::Store(format!(
            "there is no run {run_id} in {}; call begin_run first",
            self.path.display()
        ))
    }

    /// The status of run `run_id` (`running` until it is finished), if the run exists.
    pub fn run_status(&self, run_id: i64) -> Result<Option<String>> {
        self.conn
            .query_row("SELECT status FROM runs WHERE id = ?1", [run_id], |r| {
                r.get(0)
            })
            .optional()
            .map_err(self.ctx("reading a run"))
    }

    /// Results, newest first, of `op` and `version` where given; at most `limit` (0: all).
    pub fn results(
        &self,
        op: Option<&str>,
        version: Option<&str>,
        limit: usize,
    ) -> Result<Vec<StoredResult>> {
        let mut sql = String::from(
            "SELECT r.run_id, u.started, u.kind, u.device_name, u.kiln_commit,
                    r.op, r.version, r.variant, r.problem, r.metrics, r.passed
             FROM results r JOIN runs u ON u.id = r.run_id",
        );
        let mut args: Vec<&dyn ToSql> = Vec::new();
        let mut clauses = Vec::new();
        if let Some(op) = &op {
            args.push(op);
            clauses.push(format!("r.op = ?{}", args.len()));
        }
        if let Some(version) = &version {
            args.push(version);
            clauses.push(format!("r.version = ?{}", args.len()));
        }
        if !clauses.is_empty() {
            sql.push_str(" WHERE ");
            sql.push_str(&clauses.join(" AND "));
        }
        // SQLite reads a negative limit as none.
        let limit = if limit == 0 {
            -1
        } else {
            limit.min(i64::MAX as usize) as i64
        };
        args.push(&limit);
        sql.push_str(&format!(" ORDER BY r.id DESC LIMIT ?{}", args.len()));

        let read = || -> rusqlite::Result<Vec<StoredResult>> {
            let mut stmt = self.conn.prepare(&sql)?;
            let rows = stmt.query_map(args.as_slice(), |r| {
                Ok(StoredResult {
                    run_id: r.get(0)?,
                    started: r.get(1)?,
                    kind: r.get(2)?,
                    device: r.get(3)?,
                    kiln_commit: r.get(4)?,
                    op: r.get(5)?,
                    version: r.get(6)?,
                    variant: r.get(7)?,
                    problem: json_column(r, 8)?,
                    metrics: json_column(r, 9)?,
                    passed: r.get(10)?,
                })
            })?;
            rows.collect()
        };
        read().map_err(self.ctx("reading results"))
    }
}

/// A JSON text column, parsed.
fn json_column(r: &rusqlite::Row, i: usize) -> rusqlite::Result<serde_json::Value> {
    let text: String = r.get(i)?;
    serde_json::from_str(&text)
        .map_err(|e| rusqlite::Error::FromSqlConversionFailure(i, Type::Text, Box::new(e)))
}

/// Where the store lives: `KILN_STORE` if set, else `$XDG_DATA_HOME/kiln/kiln.db`, else
/// `~/.local/share/kiln/kiln.db`, else (no home) `.kiln/kiln.db` in the working folder.
pub fn default_path() -> PathBuf {
    path_from(
        std::env::var_os("KILN_STORE"),
        std::env::var_os("XDG_DATA_HOME"),
        std::env::var_os("HOME"),
    )
}

fn path_from(
    store: Option<OsString>,
    xdg_data: Option<OsString>,
    home: Option<OsString>,
) -> PathBuf {
    let set = |v: Option<OsString>| v.filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(p) = set(store) {
        return p;
    }
    // The XDG spec says a relative XDG_DATA_HOME is invalid and must be ignored.
    let data = set(xdg_data)
        .filter(|p| p.is_absolute())
        .or_else(|| set(home).map(|h| h.join(".local").join("share")));
    match data {
        Some(d) => d.join("kiln").join("kiln.db"),
        None => PathBuf::from(".kiln").join("kiln.db"),
    }
}

/// The commit kiln was built from: `KILN_COMMIT` if set, else what `build.rs` read from git
/// (with `-dirty` for uncommitted changes), else `unknown`.
pub fn kiln_commit() -> String {
    match std::env::var("KILN_COMMIT") {
        Ok(c) if !c.trim().is_empty() => c.trim().to_string(),
        _ => option_env!("KILN_GIT_COMMIT")
            .unwrap_or("unknown")
            .to_string(),
    }
}

#[cfg(test)]
mod tests;

/// SQLite's "database is busy/locked" codes, which a concurrent writer makes transient.
fn is_locked(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked)
    )
}
