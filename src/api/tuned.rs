//! A handle's table of tuned configs: loaded from a kiln store only when the caller names one,
//! and looked up by the same keys as the process-wide tuning cache. The ops will receive it as
//! data (today they still read `tune::cache`'s process-wide table).

use std::collections::HashMap;
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use crate::device::DeviceInfo;
use crate::error::{Error, Result};
use crate::ops::attention::AttentionProblem;
use crate::ops::gemm::GemmProblem;
use crate::tune::cache::{load_entries, TuneKey};
use crate::tune::space::Config;

/// Tuned configs by (GPU, op, version, dtypes, layout, shape class), with the TFLOPS each
/// measured when tuned.
#[derive(Debug, Clone, Default)]
pub struct TunedTable {
    entries: HashMap<TuneKey, (Config, Option<f64>)>,
}

impl TunedTable {
    /// No tuned configs: every version runs its heuristic.
    pub fn empty() -> TunedTable {
        TunedTable::default()
    }

    /// The `tuning_cache` table of the kiln store at `path` (read-only).
    pub fn load(path: &Path) -> Result<TunedTable> {
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| {
            Error::Store(format!(
                "opening {} for its tuned configs: {e}; pass a kiln store (`kiln tune` writes one) or no store",
                path.display()
            ))
        })?;
        Ok(TunedTable {
            entries: load_entries(&conn)?,
        })
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The tuned config of GEMM `version` for `p` on `dev`.
    pub fn gemm(&self, dev: &DeviceInfo, version: &str, p: &GemmProblem) -> Option<Config> {
        self.entries
            .get(&TuneKey::new(dev, "gemm", version, p))
            .map(|(c, _)| c.clone())
    }

    /// The TFLOPS GEMM `version`'s tuned config measured for `p`'s shape class on `dev`.
    pub fn gemm_tflops(&self, dev: &DeviceInfo, version: &str, p: &GemmProblem) -> Option<f64> {
        self.entries
            .get(&TuneKey::new(dev, "gemm", version, p))
            .and_then(|(_, t)| *t)
    }

    /// The tuned config of attention `version` for `p` on `dev`.
    pub fn attention(
        &self,
        dev: &DeviceInfo,
        version: &str,
        p: &AttentionProblem,
    ) -> Option<Config> {
        self.entries
            .get(&TuneKey::attention(dev, version, p))
            .map(|(c, _)| c.clone())
    }
}
