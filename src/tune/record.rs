//! The tuner's tables, kept in the store beside runs and results (created on first use through
//! the store's connection): one row per tuning run, one per candidate, each candidate committed
//! the moment it is known, so a crash of the tuning process loses nothing and `--resume` skips
//! what was measured.

use rusqlite::{params, Connection, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::space::Config;
use super::target::TuneProblem;
use super::{Outcome, Status};
use crate::error::{Error, Result};
use crate::store::utc_now;

pub const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS tuning_runs (
    id INTEGER PRIMARY KEY,
    started TEXT NOT NULL,
    finished TEXT,
    status TEXT NOT NULL DEFAULT 'running',
    command TEXT NOT NULL,
    op TEXT NOT NULL,
    version TEXT NOT NULL,
    problem TEXT NOT NULL,
    device_name TEXT,
    sm_count INTEGER,
    search TEXT NOT NULL,
    seed INTEGER NOT NULL,
    budget INTEGER NOT NULL,
    kiln_commit TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS tuning_results (
    id INTEGER PRIMARY KEY,
    run_id INTEGER NOT NULL REFERENCES tuning_runs(id),
    at TEXT NOT NULL,
    config TEXT NOT NULL,
    config_json TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT NOT NULL,
    median_ms REAL,
    tflops REAL,
    compile_ms REAL,
    cached INTEGER NOT NULL DEFAULT 0,
    registers INTEGER,
    smem INTEGER,
    gpu INTEGER,
    UNIQUE (run_id, config)
);
CREATE TABLE IF NOT EXISTS tuning_cache (
    gpu TEXT NOT NULL,
    sm_count INTEGER NOT NULL,
    op TEXT NOT NULL,
    version TEXT NOT NULL,
    dtype TEXT NOT NULL,
    layout TEXT NOT NULL,
    shape_class TEXT NOT NULL,
    config TEXT NOT NULL,
    tflops REAL,
    run_id INTEGER,
    updated TEXT NOT NULL,
    PRIMARY KEY (gpu, sm_count, op, version, dtype, layout, shape_class)
);";

fn err(doing: &str) -> impl Fn(rusqlite::Error) -> Error + '_ {
    move |e| Error::Store(format!("{doing}: {e}"))
}

/// Creates the tuner's tables where missing.
pub fn ensure(conn: &Connection) -> Result<()> {
    conn.execute_batch(SCHEMA)
        .map_err(err("creating the tuning tables"))?;
    // Stores made before results named the GPU that measured them get the column (empty there).
    let has_gpu: bool = conn
        .query_row(
            "SELECT COUNT(*) FROM pragma_table_info('tuning_results') WHERE name = 'gpu'",
            [],
            |r| r.get::<_, i64>(0),
        )
        .map_err(err("reading the tuning tables"))?
        > 0;
    if !has_gpu {
        conn.execute_batch("ALTER TABLE tuning_results ADD COLUMN gpu INTEGER")
            .map_err(err("adding the gpu column to the tuning results"))?;
    }
    Ok(())
}

/// What a tuning run was asked to do (enough to resume it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TuningRun {
    pub id: i64,
    pub command: String,
    pub op: String,
    pub version: String,
    pub problem: TuneProblem,
    pub device_name: Option<String>,
    pub sm_count: Option<u32>,
    /// `exhaustive` or `evo`.
    pub search: String,
    pub seed: u64,
    pub budget: usize,
}

pub fn begin(conn: &Connection, r: &TuningRun) -> Result<i64> {
    ensure(conn)?;
    let problem = serde_json::to_string(&r.problem).map_err(|e| Error::Store(e.to_string()))?;
    conn.query_row(
        "INSERT INTO tuning_runs (started, command, op, version, problem, device_name, sm_count, search, seed, budget, kiln_commit)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) RETURNING id",
        params![utc_now(), r.command, r.op, r.version, problem, r.device_name, r.sm_count, r.search, r.seed as i64, r.budget as i64, crate::store::kiln_commit()],
        |row| row.get(0),
    )
    .map_err(err("recording a tuning run"))
}

pub fn load_run(conn: &Connection, id: i64) -> Result<TuningRun> {
    ensure(conn)?;
    let row = conn
        .query_row(
            "SELECT command, op, version, problem, device_name, sm_count, search, seed, budget FROM tuning_runs WHERE id = ?1",
            [id],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, Option<String>>(4)?,
                    r.get::<_, Option<u32>>(5)?,
                    r.get::<_, String>(6)?,
                    r.get::<_, i64>(7)?,
                    r.get::<_, i64>(8)?,
                ))
            },
        )
        .optional()
        .map_err(err("reading a tuning run"))?
        .ok_or_else(|| Error::invalid(format!("no tuning run {id} in the store")))?;
    let problem =
        serde_json::from_str(&row.3).map_err(|e| Error::Store(format!("tuning run {id}: {e}")))?;
    Ok(TuningRun {
        id,
        command: row.0,
        op: row.1,
        version: row.2,
        problem,
        device_name: row.4,
        sm_count: row.5,
        search: row.6,
        seed: row.7 as u64,
        budget: row.8 as usize,
    })
}

/// Records one candidate (replacing an earlier row for the same config of the same run).
pub fn record(conn: &Connection, run: i64, o: &Outcome) -> Result<()> {
    let json = serde_json::to_string(&o.config).map_err(|e| Error::Store(e.to_string()))?;
    conn.execute(
        "INSERT OR REPLACE INTO tuning_results (run_id, at, config, config_json, status, reason, median_ms, tflops, compile_ms, cached, registers, smem, gpu)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
        params![run, utc_now(), o.config.label(), json, o.status.name(), o.reason, o.median_ms, o.tflops, o.compile_ms, o.cached, o.registers, o.smem, o.gpu],
    )
    .map_err(err("recording a tuning result"))?;
    Ok(())
}

/// Every candidate recorded for `run`, in recording order.
pub fn results(conn: &Connection, run: i64) -> Result<Vec<Outcome>> {
    ensure(conn)?;
    let mut st = conn
        .prepare("SELECT config_json, status, reason, median_ms, tflops, compile_ms, cached, registers, smem, gpu FROM tuning_results WHERE run_id = ?1 ORDER BY id")
        .map_err(err("reading tuning results"))?;
    let rows = st
        .query_map([run], |r| {
            let cfg: String = r.get(0)?;
            let status: String = r.get(1)?;
            Ok((
                cfg,
                status,
                r.get::<_, String>(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get::<_, bool>(6)?,
                r.get(7)?,
                r.get(8)?,
                r.get(9)?,
            ))
        })
        .map_err(err("reading tuning results"))?;
    let mut out = Vec::new();
    for row in rows {
        let (cfg, status, reason, median_ms, tflops, compile_ms, cached, registers, smem, gpu) =
            row.map_err(err("reading tuning results"))?;
        let config: Config = serde_json::from_str(&cfg)
            .map_err(|e| Error::Store(format!("tuning result config: {e}")))?;
        out.push(Outcome {
            config,
            status: Status::parse(&status),
            reason,
            median_ms,
            tflops,
            compile_ms,
            compile_cpu_ms: None, // not a column of the store
            cached,
            registers,
            smem,
            gpu,
        });
    }
    Ok(out)
}

pub fn finish(conn: &Connection, run: i64, status: &str) -> Result<()> {
    conn.execute(
        "UPDATE tuning_runs SET finished = ?1, status = ?2 WHERE id = ?3",
        params![utc_now(), status, run],
    )
    .map_err(err("finishing a tuning run"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::{DType, GemmProblem, Layout};

    #[test]
    fn each_result_names_its_gpu_also_in_a_store_made_before_the_column() {
        let store = crate::store::Store::in_memory().unwrap();
        let c = store.conn();
        // The table as stores had it before results named their GPU.
        c.execute_batch(&SCHEMA.replace("    gpu INTEGER,\n", ""))
            .unwrap();
        let run = TuningRun {
            id: 0,
            command: "kiln tune --gpus all".into(),
            op: "gemm".into(),
            version: "mma_sync".into(),
            problem: GemmProblem::new(64, 64, 64, Layout::RC, DType::Bf16, DType::Bf16).into(),
            device_name: Some("gpu".into()),
            sm_count: Some(132),
            search: "exhaustive".into(),
            seed: 1,
            budget: 2,
        };
        let id = begin(c, &run).unwrap();
        let mut on_3 = Outcome::new(Config::new(&[("BM", 128)]), Status::Ok, "");
        on_3.gpu = Some(3);
        record(c, id, &on_3).unwrap();
        record(
            c,
            id,
            &Outcome::new(Config::new(&[("BM", 64)]), Status::Rejected, "spills"),
        )
        .unwrap();
        let back = results(c, id).unwrap();
        assert_eq!(
            back.iter().map(|o| o.gpu).collect::<Vec<_>>(),
            [Some(3), None]
        );
    }

    #[test]
    fn results_survive_and_resume_reads_them_back() {
        let store = crate::store::Store::in_memory().unwrap();
        let c = store.conn();
        let run = TuningRun {
            id: 0,
            command: "kiln tune".into(),
            op: "gemm".into(),
            version: "mma_sync".into(),
            problem: GemmProblem::new(64, 64, 64, Layout::RC, DType::Bf16, DType::Bf16).into(),
            device_name: Some("gpu".into()),
            sm_count: Some(132),
            search: "evo".into(),
            seed: 7,
            budget: 30,
        };
        let id = begin(c, &run).unwrap();
        let mut ok = Outcome::new(Config::new(&[("BM", 128)]), Status::Ok, "");
        ok.median_ms = Some(0.5);
        record(c, id, &ok).unwrap();
        record(
            c,
            id,
            &Outcome::new(Config::new(&[("BM", 64)]), Status::Timeout, "watchdog"),
        )
        .unwrap();
        let back = results(c, id).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!(back[0], ok);
        assert_eq!(back[1].status, Status::Timeout);
        let r = load_run(c, id).unwrap();
        assert_eq!((r.seed, r.budget, r.search.as_str()), (7, 30, "evo"));
        finish(c, id, "ok").unwrap();
        assert!(load_run(c, id + 1).is_err());
    }
}
