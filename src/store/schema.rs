//! The store's schema and its migrations. `PRAGMA user_version` holds the number of migrations
//! applied; opening a store applies the missing ones in one immediate transaction, so two kiln
//! processes opening a fresh file at once do not both create it.

use rusqlite::{Connection, TransactionBehavior};

use crate::error::{Error, Result};

/// Migration `i` takes a store from version `i` to `i + 1`. Append only: never edit one that has
/// shipped, since stores in the field already ran it.
const MIGRATIONS: &[&str] = &[
    // 1: runs and their results. `problem` and `metrics` are JSON text, so SQLite's json_extract
    // can query them (`json_extract(metrics, '$.tflops')`). A run whose status is still
    // `running` and has no `finished` time ended in a crash.
    "CREATE TABLE runs (
        id          INTEGER PRIMARY KEY,
        started     TEXT NOT NULL,
        finished    TEXT,
        status      TEXT NOT NULL DEFAULT 'running',
        kind        TEXT NOT NULL,
        command     TEXT NOT NULL,
        device_name TEXT,
        device      TEXT,
        kiln_commit TEXT NOT NULL
    );
    CREATE TABLE results (
        id       INTEGER PRIMARY KEY,
        run_id   INTEGER NOT NULL REFERENCES runs(id) ON DELETE CASCADE,
        op       TEXT NOT NULL,
        version  TEXT NOT NULL,
        variant  TEXT NOT NULL,
        problem  TEXT NOT NULL,
        metrics  TEXT NOT NULL,
        passed   INTEGER
    );
    CREATE INDEX results_by_op ON results(op, version, id);
    CREATE INDEX results_by_run ON results(run_id);",
];

/// The schema version this kiln writes.
pub const VERSION: i64 = MIGRATIONS.len() as i64;

/// Brings the schema up to [`VERSION`]; refuses a store written by a newer kiln.
pub fn migrate(conn: &mut Connection, path: &str) -> Result<()> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let found: i64 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if found > VERSION {
        return Err(Error::Store(format!(
            "{path} has schema version {found} but this kiln knows only up to {VERSION}; \
             update kiln or set KILN_STORE to another file"
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        tx.execute_batch(sql).map_err(|e| {
            Error::Store(format!("migrating {path} to schema version {}: {e}", i + 1))
        })?;
    }
    if found < VERSION {
        tx.pragma_update(None, "user_version", VERSION)?;
    }
    tx.commit()?;
    Ok(())
}
