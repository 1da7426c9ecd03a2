//! The tuning cache: the best config per (GPU name, SM count, op, version, dtype pair, layout,
//! shape class; attention and its backward: head dim, mask, lengths and batch x heads), kept in the store's
//! `tuning_cache` table. The lab reads it into a [`TunedTable`] that it gives its contexts (the
//! CLI unless `KILN_NO_TUNED=1`); the ops look tuned configs up only there.

use std::collections::HashMap;
use std::path::Path;

use rusqlite::{params, Connection, OpenFlags};

use super::space::Config;
use super::target::TuneProblem;
use crate::device::DeviceInfo;
use crate::error::{Error, Result};
pub use crate::ops::tuned::{attention_class, ShapeClass, TuneKey, TunedTable};

/// The key of either op's problem.
pub fn key_of(dev: &DeviceInfo, version: &str, p: &TuneProblem) -> TuneKey {
    match p {
        TuneProblem::Gemm(q) => TuneKey::new(dev, "gemm", version, q),
        TuneProblem::Attention(q) => TuneKey::attention(dev, version, q),
        TuneProblem::AttentionBackward(q) => TuneKey::attention_backward(dev, version, q),
    }
}

/// Writes (or replaces: the latest tuning run wins) the best config for `key`.
pub fn save(
    conn: &Connection,
    key: &TuneKey,
    cfg: &Config,
    tflops: Option<f64>,
    run_id: Option<i64>,
) -> Result<()> {
    super::record::ensure(conn)?;
    conn.execute(
        "INSERT OR REPLACE INTO tuning_cache (gpu, sm_count, op, version, dtype, layout, shape_class, config, tflops, run_id, updated)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        params![key.gpu, key.sm_count, key.op, key.version, key.dtype, key.layout, key.class, cfg.label(), tflops, run_id, crate::store::utc_now()],
    )
    .map_err(|e| Error::Store(format!("saving a tuned config: {e}")))?;
    Ok(())
}

/// Every cached entry.
pub fn load_all(conn: &Connection) -> Result<HashMap<TuneKey, Config>> {
    Ok(load_entries(conn)?
        .into_iter()
        .map(|(k, (c, _))| (k, c))
        .collect())
}

/// Every cached entry with the TFLOPS its tuning measured.
pub fn load_entries(conn: &Connection) -> Result<HashMap<TuneKey, (Config, Option<f64>)>> {
    let mut st = conn
        .prepare("SELECT gpu, sm_count, op, version, dtype, layout, shape_class, config, tflops FROM tuning_cache")
        .map_err(|e| Error::Store(format!("reading the tuning cache: {e}")))?;
    let rows = st
        .query_map([], |r| {
            Ok((
                TuneKey {
                    gpu: r.get(0)?,
                    sm_count: r.get(1)?,
                    op: r.get(2)?,
                    version: r.get(3)?,
                    dtype: r.get(4)?,
                    layout: r.get(5)?,
                    class: r.get(6)?,
                },
                r.get::<_, String>(7)?,
                r.get::<_, Option<f64>>(8)?,
            ))
        })
        .map_err(|e| Error::Store(format!("reading the tuning cache: {e}")))?;
    let mut map = HashMap::new();
    for (k, label, tflops) in rows.flatten() {
        if let Ok(c) = Config::parse(&label) {
            map.insert(k, (c, tflops));
        }
    }
    Ok(map)
}

/// The `tuning_cache` table of the kiln store at `path` (read-only), as a [`TunedTable`].
pub fn load_table(path: &Path) -> Result<TunedTable> {
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
    Ok(TunedTable::from_entries(load_entries(&conn)?))
}

/// The tuned configs the lab's contexts carry: the store at `path`'s, or none where there is no
/// store yet, or one without a readable tuning cache (the heuristics decide then, as untuned).
pub fn stored_table(path: &Path) -> TunedTable {
    if !path.exists() {
        return TunedTable::empty();
    }
    load_table(path).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;
    use crate::ops::gemm::{DType, GemmProblem, Layout};

    #[test]
    fn saved_configs_are_found_by_key() {
        let store = crate::store::Store::in_memory().unwrap();
        let dev = DeviceInfo::h100_sxm();
        let p = GemmProblem::new(4096, 4096, 4096, Layout::RC, DType::Bf16, DType::Bf16);
        let key = TuneKey::new(&dev, "gemm", "mma_sync", &p);
        let cfg = Config::new(&[("BM", 128), ("BN", 256)]);
        save(store.conn(), &key, &cfg, Some(500.0), Some(1)).unwrap();
        let map = load_all(store.conn()).unwrap();
        assert_eq!(map.get(&key), Some(&cfg));
        let other = TuneKey::new(
            &dev,
            "gemm",
            "mma_sync",
            &GemmProblem {
                layout: Layout::CR,
                ..p
            },
        );
        assert!(!map.contains_key(&other));
    }

    #[test]
    fn attention_configs_are_saved_under_their_key() {
        let dev = DeviceInfo::h100_sxm();
        let p = AttentionProblem::new(4, 16, 4096, 128);
        let k = TuneKey::attention(&dev, "fa3_wgmma", &p);
        assert_eq!(key_of(&dev, "fa3_wgmma", &p.into()), k);
        let store = crate::store::Store::in_memory().unwrap();
        let cfg = Config::new(&[("BN", 176), ("STAGES", 2)]);
        save(store.conn(), &k, &cfg, Some(600.0), None).unwrap();
        assert_eq!(load_all(store.conn()).unwrap().get(&k), Some(&cfg));
    }

    #[test]
    fn a_stored_table_holds_what_was_saved_and_no_store_holds_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kiln.db");
        assert!(stored_table(&path).is_empty());
        assert!(load_table(&path)
            .unwrap_err()
            .to_string()
            .contains("pass a kiln store"));
        let store = crate::store::Store::open(&path).unwrap();
        // a store without a tuning cache yet: no tuned configs
        assert!(stored_table(&path).is_empty());
        let dev = DeviceInfo::h100_sxm();
        let p = GemmProblem::new(256, 256, 256, Layout::RC, DType::Bf16, DType::Bf16);
        let cfg = Config::new(&[("BM", 64), ("BN", 64)]);
        let key = TuneKey::new(&dev, "gemm", "mma_sync", &p);
        save(store.conn(), &key, &cfg, Some(42.0), None).unwrap();
        let t = stored_table(&path);
        assert_eq!(t.gemm(&dev, "mma_sync", &p), Some(cfg));
        assert_eq!(t.gemm_tflops(&dev, "mma_sync", &p), Some(42.0));
    }
}
