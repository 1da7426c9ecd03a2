//! The disk cache of compiled kernels: one folder per (kernel, digest) holding the CUBIN and its
//! metadata, written to a temporary folder and renamed, so concurrent kiln processes never see
//! half an entry.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::resources::Resources;
use crate::error::{Error, Result};

/// What is stored beside the CUBIN.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Meta {
    pub kernel: String,
    pub entry: String,
    pub options: Vec<String>,
    pub nvrtc: (i32, i32),
    pub resources: Resources,
    pub compile_ms: f64,
    /// The compiling thread's CPU time (absent in entries written before it was recorded).
    #[serde(default)]
    pub compile_cpu_ms: Option<f64>,
    /// SHA-256 of the CUBIN (hex), computed when it was built, so that a warm start need not
    /// hash every CUBIN again (absent in older entries).
    #[serde(default)]
    pub cubin_sha256: Option<String>,
    pub log: String,
}

/// The cache root: `KILN_CACHE_DIR`, else `$XDG_CACHE_HOME/kiln/jit`, else `~/.cache/kiln/jit`.
/// An empty `KILN_CACHE_DIR` counts as unset, as for every `KILN_*` variable.
pub fn default_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("KILN_CACHE_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(d);
    }
    let base = std::env::var("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|_| std::env::var("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|_| std::env::temp_dir());
    base.join("kiln").join("jit")
}

pub struct DiskCache {
    pub root: PathBuf,
}

impl DiskCache {
    fn entry(&self, stem: &str, digest: &str) -> PathBuf {
        self.root.join(format!("{stem}.{digest}"))
    }

    /// The cached CUBIN and metadata, if a complete entry exists.
    pub fn get(&self, stem: &str, digest: &str) -> Option<(Vec<u8>, Meta)> {
        let dir = self.entry(stem, digest);
        let meta: Meta =
            serde_json::from_slice(&std::fs::read(dir.join("meta.json")).ok()?).ok()?;
        let cubin = std::fs::read(dir.join("kernel.cubin")).ok()?;
        Some((cubin, meta))
    }

    /// Stores an entry atomically; losing a race to another process is fine (same content).
    pub fn put(&self, stem: &str, digest: &str, cubin: &[u8], meta: &Meta) -> Result<()> {
        let io = |what, path: &Path| {
            let path = path.to_path_buf();
            move |source| Error::Io { what, path, source }
        };
        std::fs::create_dir_all(&self.root).map_err(io("creating the JIT cache", &self.root))?;
        let tmp = self.root.join(format!(
            ".tmp.{stem}.{digest}.{}.{}",
            std::process::id(),
            unique()
        ));
        std::fs::create_dir_all(&tmp).map_err(io("creating a cache entry", &tmp))?;
        std::fs::write(tmp.join("kernel.cubin"), cubin)
            .map_err(io("writing a cached CUBIN", &tmp))?;
        let json = serde_json::to_vec_pretty(meta).expect("metadata serialises");
        std::fs::write(tmp.join("meta.json"), json).map_err(io("writing cache metadata", &tmp))?;
        let dest = self.entry(stem, digest);
        if std::fs::rename(&tmp, &dest).is_err() {
            // Another process installed the same entry first.
            let _ = std::fs::remove_dir_all(&tmp);
        }
        Ok(())
    }

    /// Removes every entry; returns how many were removed.
    pub fn clear(&self) -> Result<usize> {
        let Ok(entries) = std::fs::read_dir(&self.root) else {
            return Ok(0);
        };
        let mut n = 0;
        for e in entries.flatten() {
            if e.path().is_dir() {
                std::fs::remove_dir_all(e.path()).map_err(|source| Error::Io {
                    what: "clearing the JIT cache",
                    path: e.path(),
                    source,
                })?;
                n += 1;
            }
        }
        Ok(n)
    }
}

fn unique() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_then_get_round_trips_and_clear_empties() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DiskCache {
            root: dir.path().join("jit"),
        };
        assert!(cache.get("k", "abc").is_none());
        let meta = Meta {
            kernel: "k".into(),
            entry: "e".into(),
            options: vec!["-x".into()],
            nvrtc: (13, 0),
            resources: Resources {
                registers: 32,
                ..Default::default()
            },
            compile_ms: 1.5,
            compile_cpu_ms: Some(1.4),
            cubin_sha256: None,
            log: String::new(),
        };
        cache.put("k", "abc", b"cubin", &meta).unwrap();
        cache.put("k", "abc", b"cubin", &meta).unwrap(); // a second writer loses the race quietly
        let (bin, m) = cache.get("k", "abc").unwrap();
        assert_eq!(bin, b"cubin");
        assert_eq!(m.resources.registers, 32);
        assert_eq!(m.compile_cpu_ms, Some(1.4));
        // An entry written before the CPU time was recorded still reads (as unknown).
        let mut old = serde_json::to_value(&meta).unwrap();
        old.as_object_mut().unwrap().remove("compile_cpu_ms");
        let old: Meta = serde_json::from_value(old).unwrap();
        assert_eq!(old.compile_cpu_ms, None);
        assert_eq!(cache.clear().unwrap(), 1);
        assert!(cache.get("k", "abc").is_none());
    }
}
