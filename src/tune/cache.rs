//! The tuning cache: the best config per (GPU name, SM count, op, version, dtype pair, layout,
//! shape class; attention: head dim, mask, lengths and batch x heads), kept in the store's `tuning_cache` table. The default dispatch reads it through
//! an in-memory map loaded once per process from the store (read-only; no store or no table means
//! an empty map, and the version's heuristic decides). With `KILN_NO_TUNED=1` the CLI calls
//! [`ignore_tuned`] and the map stays empty.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::OnceLock;

use rusqlite::{params, Connection, OpenFlags};

use super::space::Config;
use super::target::TuneProblem;
use crate::device::DeviceInfo;
use crate::error::{Error, Result};
use crate::ops::attention::AttentionProblem;
use crate::ops::gemm::GemmProblem;

/// Problems that one tuned config serves: M, N and K bucketed by the next power of two, M of 64 or
/// less marked apart (skinny GEMMs want other tiles even when N and K are large), and rows that
/// do not start on 128 bytes marked apart (TMA boxes then straddle cache lines: on an H200,
/// 4096x4096x4088 ran at 492 TFLOPS with the 128x256 single-CTA config tuned for 4096^3 and at
/// 716 with CTA pairs).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ShapeClass {
    pub m_log2: u32,
    pub n_log2: u32,
    pub k_log2: u32,
    pub small_m: bool,
    pub rows_unaligned: bool,
}

fn bucket(x: usize) -> u32 {
    x.max(1).next_power_of_two().trailing_zeros()
}

impl ShapeClass {
    pub fn of(p: &GemmProblem) -> ShapeClass {
        ShapeClass {
            m_log2: bucket(p.m),
            n_log2: bucket(p.n),
            k_log2: bucket(p.k),
            small_m: p.m <= 64,
            rows_unaligned: [
                p.lda * p.input.size(),
                p.ldb * p.input.size(),
                p.ldc * p.output.size(),
            ]
            .iter()
            .any(|bytes| bytes % 128 != 0),
        }
    }
    /// `m<=2^12,n<=2^12,k<=2^12` (with `,small_m` for M <= 64, `,rows_unaligned` for rows not
    /// on 128 bytes).
    pub fn label(&self) -> String {
        let mut s = format!(
            "m<=2^{},n<=2^{},k<=2^{}",
            self.m_log2, self.n_log2, self.k_log2
        );
        if self.small_m {
            s += ",small_m";
        }
        if self.rows_unaligned {
            s += ",rows_unaligned";
        }
        s
    }
}

/// Attention problems that one tuned config serves: the head dim (the kernel is specialised for
/// it), the mask, the GQA group, and the query length, key length and batch x query heads by the
/// next power of two (they set the work items per SM and the keys each walks).
pub fn attention_class(p: &AttentionProblem) -> String {
    let mut s = format!(
        "d={},sq<=2^{},skv<=2^{},bh<=2^{}",
        p.head_dim,
        bucket(p.seqlen_q),
        bucket(p.seqlen_kv),
        bucket(p.batch * p.heads_q)
    );
    if p.group() > 1 {
        s += &format!(",group={}", p.group());
    }
    if p.causal {
        s += ",causal";
    }
    s
}

/// Everything a tuned config is specific to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TuneKey {
    pub gpu: String,
    pub sm_count: u32,
    pub op: String,
    pub version: String,
    /// `bf16->bf16`
    pub dtype: String,
    pub layout: String,
    pub class: String,
}

impl TuneKey {
    pub fn new(dev: &DeviceInfo, op: &str, version: &str, p: &GemmProblem) -> TuneKey {
        TuneKey {
            gpu: dev.name.clone(),
            sm_count: dev.sm_count,
            op: op.into(),
            version: version.into(),
            dtype: format!("{}->{}", p.input, p.output),
            layout: p.layout.to_string(),
            class: ShapeClass::of(p).label(),
        }
    }

    /// The key of an attention problem: op `attention`, the dtype, the layout (BSHD/BHSD) and
    /// [`attention_class`].
    pub fn attention(dev: &DeviceInfo, version: &str, p: &AttentionProblem) -> TuneKey {
        TuneKey {
            gpu: dev.name.clone(),
            sm_count: dev.sm_count,
            op: "attention".into(),
            version: version.into(),
            dtype: p.dtype.to_string(),
            layout: p.layout.to_string(),
            class: attention_class(p),
        }
    }

    /// The key of either op's problem.
    pub fn of(dev: &DeviceInfo, version: &str, p: &TuneProblem) -> TuneKey {
        match p {
            TuneProblem::Gemm(q) => TuneKey::new(dev, "gemm", version, q),
            TuneProblem::Attention(q) => TuneKey::attention(dev, version, q),
        }
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

/// The store the map is read from; `None`: no tuned configs at all.
static STORE_PATH: OnceLock<Option<PathBuf>> = OnceLock::new();

/// Points the cache at the store the process uses (the CLI's configured store); without a call,
/// [`crate::store::default_path`]. Only the first call of this or [`ignore_tuned`] counts, and
/// only before the first lookup.
pub fn use_store(path: PathBuf) {
    let _ = STORE_PATH.set(Some(path));
}

/// Makes every lookup miss, so that each version's heuristic decides (the CLI's
/// `KILN_NO_TUNED=1`). Only the first call of this or [`use_store`] counts, and only before the
/// first lookup.
pub fn ignore_tuned() {
    let _ = STORE_PATH.set(None);
}

type Entries = HashMap<TuneKey, (Config, Option<f64>)>;

fn process_map() -> &'static Entries {
    static MAP: OnceLock<Entries> = OnceLock::new();
    MAP.get_or_init(|| {
        let path = match STORE_PATH.get() {
            Some(Some(p)) => p.clone(),
            Some(None) => return HashMap::new(),
            None => crate::store::default_path(),
        };
        if !path.exists() {
            return HashMap::new();
        }
        Connection::open_with_flags(
            &path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .ok()
        .and_then(|c| load_entries(&c).ok())
        .unwrap_or_default()
    })
}

/// The tuned config of `version` for `p` on `dev`, if the store has one (cheap after the first
/// call: one hash lookup).
pub fn lookup(dev: &DeviceInfo, version: &str, p: &GemmProblem) -> Option<Config> {
    let map = process_map();
    if map.is_empty() {
        return None;
    }
    map.get(&TuneKey::new(dev, "gemm", version, p))
        .map(|(c, _)| c.clone())
}

/// The tuned config of attention `version` for `p` on `dev`, if the store has one.
pub fn lookup_attention(dev: &DeviceInfo, version: &str, p: &AttentionProblem) -> Option<Config> {
    let map = process_map();
    if map.is_empty() {
        return None;
    }
    map.get(&TuneKey::attention(dev, version, p))
        .map(|(c, _)| c.clone())
}

/// The TFLOPS `version`'s tuned config measured for `p`'s shape class on `dev`, if tuned.
pub fn tuned_tflops(dev: &DeviceInfo, version: &str, p: &GemmProblem) -> Option<f64> {
    let map = process_map();
    if map.is_empty() {
        return None;
    }
    map.get(&TuneKey::new(dev, "gemm", version, p))
        .and_then(|(_, t)| *t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::{DType, Layout};

    #[test]
    fn shape_classes_bucket_by_powers_of_two() {
        let p = |m, n, k| GemmProblem::new(m, n, k, Layout::RC, DType::Bf16, DType::Bf16);
        assert_eq!(
            ShapeClass::of(&p(4096, 4096, 4096)),
            ShapeClass::of(&p(3000, 2112, 4032))
        );
        assert_ne!(
            ShapeClass::of(&p(4096, 4096, 4096)),
            ShapeClass::of(&p(4097, 4096, 4096))
        );
        assert_eq!(
            ShapeClass::of(&p(4096, 4096, 4096)).label(),
            "m<=2^12,n<=2^12,k<=2^12"
        );
        assert!(ShapeClass::of(&p(16, 4096, 4096)).small_m);
        // 4088 elements = 8176 bytes per row: TMA boxes straddle lines, a class of its own
        assert!(ShapeClass::of(&p(4096, 4096, 4088)).rows_unaligned);
        assert!(!ShapeClass::of(&p(4096, 4096, 4096)).rows_unaligned);
        assert_ne!(
            ShapeClass::of(&p(4096, 4096, 4096)),
            ShapeClass::of(&p(4096, 4096, 4088))
        );
        assert!(ShapeClass::of(&p(16, 4096, 4096))
            .label()
            .ends_with("small_m"));
    }

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
    fn attention_keys_separate_head_dim_mask_and_length_classes() {
        let dev = DeviceInfo::h100_sxm();
        let p = AttentionProblem::new(4, 16, 4096, 128);
        let k = TuneKey::attention(&dev, "fa3_wgmma", &p);
        assert_eq!(k.op, "attention");
        assert_eq!((k.dtype.as_str(), k.layout.as_str()), ("bf16", "BSHD"));
        assert_eq!(k.class, "d=128,sq<=2^12,skv<=2^12,bh<=2^6");
        // same class: 3000 keys, 2x32 heads
        let alike = AttentionProblem::new(2, 32, 3000, 128);
        assert_eq!(TuneKey::attention(&dev, "fa3_wgmma", &alike), k);
        for other in [
            AttentionProblem { causal: true, ..p },
            AttentionProblem::new(4, 16, 4096, 64),
            AttentionProblem::new(2, 16, 8192, 128),
            AttentionProblem { heads_kv: 4, ..p },
        ] {
            assert_ne!(
                TuneKey::attention(&dev, "fa3_wgmma", &other),
                k,
                "{other:?}"
            );
        }
        assert_eq!(TuneKey::of(&dev, "fa3_wgmma", &p.into()), k);
        let store = crate::store::Store::in_memory().unwrap();
        let cfg = Config::new(&[("BN", 176), ("STAGES", 2)]);
        save(store.conn(), &k, &cfg, Some(600.0), None).unwrap();
        assert_eq!(load_all(store.conn()).unwrap().get(&k), Some(&cfg));
    }
}
