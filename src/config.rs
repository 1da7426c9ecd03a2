//! The config file, `kiln.toml`: the GEMM version the default dispatch uses, where the JIT cache
//! and the store live, and the benchmark's repetitions. It is read from the working folder or
//! from an explicit path; every key is optional, and a key kiln does not know is an error that
//! names it, so a misspelling never passes silently. Beside the file's settings, a config carries
//! the run's experiment overrides (the CLI fills them from its environment; never from the file).
//!
//! ```toml
//! [gemm]
//! version = "simt_tiled"
//! [jit]
//! cache_dir = "/path"
//! [store]
//! path = "/path/kiln.db"
//! [bench]
//! reps = 50
//! warmup = 5
//! warmup_ms = 1000
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ops::registry::Registry;
use crate::overrides::Overrides;

/// The name kiln looks for in the working folder.
pub const FILE_NAME: &str = "kiln.toml";

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub gemm: OpConfig,
    pub jit: JitConfig,
    pub store: StoreConfig,
    pub bench: BenchConfig,
    /// The `KILN_*` experiment knobs the contexts opened for this run carry: the defaults unless
    /// the CLI sets what its environment holds ([`Overrides::from_env`]).
    #[serde(skip)]
    pub overrides: Overrides,
}

/// Per-op settings.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpConfig {
    /// The version the default dispatch uses, instead of the fastest that supports the problem.
    pub version: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct JitConfig {
    /// The compiled-kernel cache; a relative path is taken from the config file's folder.
    pub cache_dir: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// The store's file; a relative path is taken from the config file's folder.
    pub path: Option<PathBuf>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BenchConfig {
    /// Timed repetitions per measurement (at least 1).
    pub reps: Option<usize>,
    /// Untimed launches before timing.
    pub warmup: Option<usize>,
    /// Untimed GPU time before timing (ms), on top of `warmup` launches: about 1000 measures
    /// the power-capped steady state rather than the first moments of load.
    pub warmup_ms: Option<f64>,
}

impl Config {
    /// The config at `explicit`, which must exist; else `./kiln.toml` if present; else defaults.
    pub fn load(explicit: Option<&Path>) -> Result<Config> {
        Config::load_in(explicit, Path::new("."))
    }

    fn load_in(explicit: Option<&Path>, dir: &Path) -> Result<Config> {
        match explicit {
            Some(path) if !path.exists() => Err(Error::Config(format!(
                "config file {} does not exist",
                path.display()
            ))),
            Some(path) => Config::from_file(path),
            None => {
                let path = dir.join(FILE_NAME);
                if path.is_file() {
                    Config::from_file(&path)
                } else {
                    Ok(Config::default())
                }
            }
        }
    }

    /// Reads and checks the config file at `path`.
    pub fn from_file(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::Config(format!("cannot read config file {}: {e}", path.display()))
        })?;
        Config::parse(&text, path)
    }

    /// Parses `text`, the contents of the file at `path` (named in errors, and the base of
    /// relative paths).
    pub fn parse(text: &str, path: &Path) -> Result<Config> {
        let mut config: Config =
            toml::from_str(text).map_err(|e| Error::Config(describe(&e, text, path)))?;
        if config.bench.reps == Some(0) {
            return Err(Error::Config(format!(
                "config file {}: bench.reps must be at least 1",
                path.display()
            )));
        }
        if config
            .bench
            .warmup_ms
            .is_some_and(|ms| !(0.0..=600_000.0).contains(&ms))
        {
            return Err(Error::Config(format!(
                "config file {}: bench.warmup_ms must be between 0 and 600000 (ms)",
                path.display()
            )));
        }
        config.check_versions(path)?;
        let base = path.parent().unwrap_or(Path::new(""));
        for p in [&mut config.jit.cache_dir, &mut config.store.path]
            .into_iter()
            .flatten()
        {
            *p = resolve(p, base);
        }
        Ok(config)
    }

    /// The version configured for `op`, if any.
    pub fn version_for(&self, op: &str) -> Option<&str> {
        match op {
            "gemm" => self.gemm.version.as_deref(),
            _ => None,
        }
    }

    /// Refuses a `version` the registry does not have, which the dispatch would otherwise meet
    /// only on a GPU (or, in commands that pick no version, never).
    fn check_versions(&self, path: &Path) -> Result<()> {
        let registry = Registry::default();
        let sections = [("gemm", self.gemm.version.as_deref())];
        for (op, version) in sections {
            let (Some(name), Some(known)) = (version, registry.version_names(op)) else {
                continue;
            };
            if !known.contains(&name) {
                return Err(Error::Config(format!(
                    "config file {}: [{op}] version = {name:?} is not a {op} version kiln has; \
                     set it to one of {}, or remove it for the fastest that supports each problem",
                    path.display(),
                    known.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// The store's file: `KILN_STORE` if set, else `[store] path`, else the default location.
    pub fn store_path(&self) -> PathBuf {
        match std::env::var_os("KILN_STORE").filter(|v| !v.is_empty()) {
            Some(_) => crate::store::default_path(),
            None => self
                .store
                .path
                .clone()
                .unwrap_or_else(crate::store::default_path),
        }
    }
}

/// `~/x` from the home folder, a relative path from `base`, an absolute one as it is.
fn resolve(p: &Path, base: &Path) -> PathBuf {
    if let (Ok(rest), Some(home)) = (p.strip_prefix("~"), std::env::var_os("HOME")) {
        return PathBuf::from(home).join(rest);
    }
    if p.is_relative() {
        base.join(p)
    } else {
        p.to_path_buf()
    }
}

/// One sentence: the file, the line (and its text, which shows the key), toml's complaint.
fn describe(e: &toml::de::Error, text: &str, path: &Path) -> String {
    let message = e.message().trim().replace('\n', "; ");
    let Some(span) = e.span() else {
        return format!("config file {}: {message}", path.display());
    };
    let start = span.start.min(text.len());
    let line_no = text[..start].matches('\n').count() + 1;
    let line = text.lines().nth(line_no - 1).unwrap_or("").trim();
    let shown: String = line.chars().take(60).collect();
    let ellipsis = if line.chars().count() > 60 { "..." } else { "" };
    format!(
        "config file {}, line {line_no} (`{shown}{ellipsis}`): {message}",
        path.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config_err(text: &str) -> String {
        match Config::parse(text, Path::new("/etc/kiln/kiln.toml")) {
            Err(Error::Config(m)) => m,
            other => panic!("expected a config error, got {other:?}"),
        }
    }

    #[test]
    fn valid_file_parses() {
        let text = "[gemm]\nversion = \"simt_tiled\"\n[jit]\ncache_dir = \"/tmp/jit\"\n\
                    [store]\npath = \"db/kiln.db\"\n[bench]\nreps = 50\nwarmup = 5\nwarmup_ms = 1000\n";
        let c = Config::parse(text, Path::new("/etc/kiln/kiln.toml")).unwrap();
        assert_eq!(c.version_for("gemm"), Some("simt_tiled"));
        assert_eq!(c.version_for("attention"), None);
        assert_eq!(c.jit.cache_dir, Some(PathBuf::from("/tmp/jit")));
        // Relative paths are taken from the config file's folder.
        assert_eq!(c.store.path, Some(PathBuf::from("/etc/kiln/db/kiln.db")));
        assert_eq!((c.bench.reps, c.bench.warmup), (Some(50), Some(5)));
        assert_eq!(c.bench.warmup_ms, Some(1000.0));
    }

    #[test]
    fn empty_file_gives_defaults() {
        let c = Config::parse("", Path::new("kiln.toml")).unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.version_for("gemm"), None);
        let c = Config::parse("[gemm]\n# nothing yet\n", Path::new("kiln.toml")).unwrap();
        assert_eq!(c, Config::default());
    }

    #[test]
    fn unknown_key_is_named_with_file_and_line() {
        let m = config_err("[gemm]\nverison = \"simt_tiled\"\n");
        assert!(m.contains("`verison`"), "{m}");
        assert!(m.contains("/etc/kiln/kiln.toml"), "{m}");
        assert!(m.contains("line 2"), "{m}");
        assert!(!m.contains('\n'), "{m}");

        let m = config_err("[bench]\nreps = 3\n[gmem]\nversion = \"x\"\n");
        assert!(m.contains("`gmem`"), "{m}");
        let m = config_err("[store]\npath = \"a\"\nfile = \"b\"\n");
        assert!(m.contains("`file`"), "{m}");
    }

    #[test]
    fn wrong_type_shows_the_line_with_the_key() {
        let m = config_err("[bench]\nreps = \"many\"\n");
        assert!(m.contains("line 2 (`reps = \"many\"`)"), "{m}");
        let m = config_err("[bench]\nwarmup_ms = -1\n");
        assert!(m.contains("bench.warmup_ms must be between 0"), "{m}");
        let m = config_err("[bench]\nreps = 0\n");
        assert!(m.contains("bench.reps must be at least 1"), "{m}");
    }

    #[test]
    fn unknown_version_is_named_with_the_file_and_the_versions_kiln_has() {
        let m = config_err("[gemm]\nversion = \"nosuch\"\n");
        assert!(m.contains("/etc/kiln/kiln.toml"), "{m}");
        assert!(m.contains("[gemm] version = \"nosuch\""), "{m}");
        for known in ["simt_naive", "wgmma_tma_ws", "cublas"] {
            assert!(m.contains(known), "{m}");
        }
        assert!(!m.contains('\n'), "{m}");
        // a name is matched exactly: no case folding, no empty name
        config_err("[gemm]\nversion = \"SIMT_NAIVE\"\n");
        config_err("[gemm]\nversion = \"\"\n");
    }

    #[test]
    fn sections_kiln_does_not_read_are_refused_naming_the_ones_it_does() {
        for text in [
            "[attention]\nversion = \"fa3_wgmma\"\n",
            "[moe]\nversion = \"grouped_gemm\"\n",
            "version = \"simt_tiled\"\n",
        ] {
            let m = config_err(text);
            assert!(m.contains("unknown field"), "{m}");
            assert!(m.contains("`gemm`") && m.contains("`bench`"), "{m}");
        }
    }

    #[test]
    fn values_of_the_wrong_type_are_refused_naming_the_line() {
        for (text, line) in [
            ("[gemm]\nversion = 3\n", "version = 3"),
            (
                "[gemm]\nversion = [\"simt_tiled\"]\n",
                "version = [\"simt_tiled\"]",
            ),
            ("[jit]\ncache_dir = 5\n", "cache_dir = 5"),
            ("[bench]\nwarmup = -1\n", "warmup = -1"),
            ("[bench]\nwarmup_ms = \"1s\"\n", "warmup_ms = \"1s\""),
            ("gemm = \"simt_tiled\"\n", "gemm = \"simt_tiled\""),
        ] {
            let m = config_err(text);
            assert!(m.contains(&format!("(`{line}`)")), "{m}");
            assert!(m.contains("/etc/kiln/kiln.toml"), "{m}");
        }
    }

    #[test]
    fn missing_explicit_file_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.toml");
        let e = Config::load(Some(&missing)).unwrap_err();
        assert!(matches!(e, Error::Config(_)));
        assert_eq!(
            e.to_string(),
            format!("config file {} does not exist", missing.display())
        );
    }

    #[test]
    fn working_folder_file_is_found_and_absence_gives_defaults() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(
            Config::load_in(None, dir.path()).unwrap(),
            Config::default()
        );
        std::fs::write(
            dir.path().join(FILE_NAME),
            "[gemm]\nversion = \"simt_naive\"\n",
        )
        .unwrap();
        let c = Config::load_in(None, dir.path()).unwrap();
        assert_eq!(c.version_for("gemm"), Some("simt_naive"));
        // An explicit file wins over the working folder's.
        let other = dir.path().join("other.toml");
        std::fs::write(&other, "[bench]\nwarmup = 2\n").unwrap();
        let c = Config::load_in(Some(&other), dir.path()).unwrap();
        assert_eq!((c.version_for("gemm"), c.bench.warmup), (None, Some(2)));
    }
}
