//! The JIT: renders a kernel specialisation (source + defines + arch), compiles it with NVRTC to a
//! CUBIN, caches it on disk, and reports its resources. Knows nothing about ops.

pub mod arch;
pub mod cache;
pub mod nvrtc;
pub mod resources;
pub mod sources;
#[cfg(test)]
pub(crate) mod testing;

use std::time::Instant;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub use resources::Resources;

use crate::error::{Error, Result};

/// One specialisation of one kernel source: what to compile and how.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KernelSpec {
    /// Source path relative to `kernels/`, e.g. `gemm/simt_tiled.cu`.
    pub source: String,
    /// The `extern "C"` entry point.
    pub entry: String,
    /// Preprocessor defines that specialise the source (tile sizes, dtypes, layouts).
    pub defines: Vec<(String, String)>,
    /// Target, e.g. `sm_90a`.
    pub arch: String,
}

impl KernelSpec {
    pub fn new(source: &str, entry: &str, arch: &str) -> Self {
        KernelSpec {
            source: source.into(),
            entry: entry.into(),
            defines: Vec::new(),
            arch: arch.into(),
        }
    }

    pub fn define(mut self, name: &str, value: impl ToString) -> Self {
        self.defines.push((name.into(), value.to_string()));
        self
    }

    /// A short human name: the source stem plus its defines.
    pub fn label(&self) -> String {
        let stem = self.stem();
        let d: Vec<String> = self
            .defines
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if d.is_empty() {
            stem.to_string()
        } else {
            format!("{stem}[{}]", d.join(","))
        }
    }

    pub fn stem(&self) -> &str {
        let file = self.source.rsplit('/').next().unwrap_or(&self.source);
        file.split('.').next().unwrap_or(file)
    }

    /// NVRTC options for this spec.
    pub fn options(&self) -> Vec<String> {
        let mut o = vec![
            format!("--gpu-architecture={}", self.arch),
            "--std=c++17".to_string(),
            "-default-device".to_string(),
            "--ptxas-options=--verbose".to_string(),
            "-DKILN_NVRTC=1".to_string(),
        ];
        o.extend(self.defines.iter().map(|(k, v)| format!("-D{k}={v}")));
        o
    }
}

/// The hasher state after a source and every header it includes, computed once per source per
/// process and cloned for each variant (the same digest as hashing it all each time): the
/// sources are embedded and never change, and hashing a closure (10-35 KB) for each of 300
/// variants was most of a warm start's time.
fn source_digest(source: &str) -> Sha256 {
    use std::collections::HashMap;
    use std::sync::{Mutex, OnceLock};
    static MEMO: OnceLock<Mutex<HashMap<String, Sha256>>> = OnceLock::new();
    let memo = MEMO.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(h) = memo.lock().unwrap_or_else(|e| e.into_inner()).get(source) {
        return h.clone();
    }
    let mut h = Sha256::new();
    for path in sources::closure(source) {
        h.update(path.as_bytes());
        h.update([0]);
        h.update(sources::get(path).unwrap_or("").as_bytes());
        h.update([0]);
    }
    memo.lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(source.to_string(), h.clone());
    h
}

/// CPU time consumed so far by the calling thread, in ms (Linux: `CLOCK_THREAD_CPUTIME_ID`).
#[cfg(target_os = "linux")]
pub fn thread_cpu_ms() -> Option<f64> {
    #[repr(C)]
    struct Timespec {
        tv_sec: std::ffi::c_long,
        tv_nsec: std::ffi::c_long,
    }
    extern "C" {
        fn clock_gettime(clock: i32, tp: *mut Timespec) -> i32;
    }
    const CLOCK_THREAD_CPUTIME_ID: i32 = 3;
    let mut t = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `t` is a valid, writable timespec; glibc and musl both export clock_gettime.
    let rc = unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut t) };
    (rc == 0).then_some(t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 * 1e-6)
}

/// No per-thread CPU clock off Linux.
#[cfg(not(target_os = "linux"))]
pub fn thread_cpu_ms() -> Option<f64> {
    None
}

/// SHA-256 of `bytes`, in hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A compiled kernel: the CUBIN, what it costs, and what compiling it cost.
#[derive(Debug, Clone)]
pub struct Compiled {
    pub spec: KernelSpec,
    pub cubin: Vec<u8>,
    pub resources: Resources,
    /// Time NVRTC took when this CUBIN was first built (wall clock).
    pub compile_ms: f64,
    /// CPU time of the compiling thread over the same call (NVRTC compiles a program on the
    /// calling thread): the compile's own cost, which waiting for a core does not inflate when
    /// more compiles run in parallel than there are cores. `None` where the platform has no
    /// per-thread clock, or for cache entries written before it was recorded.
    pub compile_cpu_ms: Option<f64>,
    /// SHA-256 of `cubin` (hex).
    pub cubin_sha256: String,
    /// Time this call took (a cache hit is a file read).
    pub load_ms: f64,
    pub cached: bool,
    pub log: String,
}

/// The compiler front door: NVRTC plus the disk cache.
pub struct Jit {
    pub cache: Option<cache::DiskCache>,
}

impl Default for Jit {
    fn default() -> Self {
        Jit {
            cache: Some(cache::DiskCache {
                root: cache::default_dir(),
            }),
        }
    }
}

impl Jit {
    pub fn without_cache() -> Self {
        Jit { cache: None }
    }

    /// The cache key: everything that changes the CUBIN.
    pub fn digest(spec: &KernelSpec, nvrtc_version: (i32, i32)) -> String {
        let mut h = source_digest(&spec.source);
        h.update(spec.entry.as_bytes());
        for o in spec.options() {
            h.update([0]);
            h.update(o.as_bytes());
        }
        h.update(format!("nvrtc{}.{}", nvrtc_version.0, nvrtc_version.1).as_bytes());
        let d = h.finalize();
        d.iter().take(10).map(|b| format!("{b:02x}")).collect()
    }

    /// Compiles `spec` (or reads it from the cache).
    pub fn compile(&self, spec: &KernelSpec) -> Result<Compiled> {
        let start = Instant::now();
        let source = sources::get(&spec.source).ok_or_else(|| {
            Error::invalid(format!("no embedded kernel source `{}`", spec.source))
        })?;
        let version = nvrtc::version()?;
        let digest = Self::digest(spec, version);
        if let Some(c) = &self.cache {
            if let Some((cubin, meta)) = c.get(spec.stem(), &digest) {
                let cubin_sha256 = meta.cubin_sha256.unwrap_or_else(|| sha256_hex(&cubin));
                return Ok(Compiled {
                    spec: spec.clone(),
                    cubin,
                    resources: meta.resources,
                    compile_ms: meta.compile_ms,
                    compile_cpu_ms: meta.compile_cpu_ms,
                    cubin_sha256,
                    load_ms: start.elapsed().as_secs_f64() * 1e3,
                    cached: true,
                    log: meta.log,
                });
            }
        }
        let headers: Vec<(&str, &str)> = sources::closure(&spec.source)
            .into_iter()
            .filter(|p| *p != spec.source)
            .map(|p| (p, sources::get(p).unwrap_or("")))
            .collect();
        let t = Instant::now();
        let cpu = thread_cpu_ms();
        // NVRTC 12.9+ answers programs it has seen from the driver's compute cache without
        // running ptxas, so its log then has no ptxas report (registers, spills): on the GPU
        // host every variant read "0 registers" in a second process. kiln has its own cache;
        // NVRTC's is turned off (`--no-cache`; the CUBIN is the same).
        let mut options = spec.options();
        if version >= (12, 9) {
            options.push("--no-cache".to_string());
        }
        // `--minimal` (NVRTC 12.4+) leaves out the builtin declarations for textures, surfaces,
        // the device runtime and the runtime/driver API types, none of which a kernel here uses
        // (they include no toolkit header): the front end parses less, 4-6 ms of every compile
        // on NVRTC 13.0, and the CUBINs are byte-identical (every variant compared through
        // `kiln check --json`'s cubin_sha256), so the cache key leaves it out.
        if version >= (12, 4) {
            options.push("--minimal".to_string());
        }
        let out =
            nvrtc::compile(&spec.source, source, &headers, &options).map_err(|e| match e {
                Error::Compile { log, .. } => Error::Compile {
                    kernel: spec.label(),
                    log,
                },
                other => other,
            })?;
        let compile_ms = t.elapsed().as_secs_f64() * 1e3;
        let compile_cpu_ms = cpu.zip(thread_cpu_ms()).map(|(a, b)| b - a);
        let cubin_sha256 = sha256_hex(&out.cubin);
        let mut resources = Resources::parse(&out.log, &spec.entry);
        if !Resources::reported(&out.log, &spec.entry) {
            resources.warnings.push(format!(
                "no ptxas report for {} in NVRTC's log: registers, spills and stack unknown",
                spec.entry
            ));
        }
        if let Some(c) = &self.cache {
            let meta = cache::Meta {
                kernel: spec.label(),
                entry: spec.entry.clone(),
                options: spec.options(),
                nvrtc: version,
                resources: resources.clone(),
                compile_ms,
                compile_cpu_ms,
                cubin_sha256: Some(cubin_sha256.clone()),
                log: out.log.clone(),
            };
            c.put(spec.stem(), &digest, &out.cubin, &meta)?;
        }
        Ok(Compiled {
            spec: spec.clone(),
            cubin: out.cubin,
            resources,
            compile_ms,
            compile_cpu_ms,
            cubin_sha256,
            load_ms: start.elapsed().as_secs_f64() * 1e3,
            cached: false,
            log: out.log,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_changes_with_defines_arch_and_version() {
        let a = KernelSpec::new("gemm/simt_naive.cu", "k", "sm_90a");
        let b = a.clone().define("X", 1);
        let c = KernelSpec {
            arch: "sm_80".into(),
            ..a.clone()
        };
        let d0 = Jit::digest(&a, (13, 0));
        assert_ne!(d0, Jit::digest(&b, (13, 0)));
        assert_ne!(d0, Jit::digest(&c, (13, 0)));
        assert_ne!(d0, Jit::digest(&a, (13, 1)));
        assert_eq!(d0, Jit::digest(&a.clone(), (13, 0)));
    }

    #[test]
    fn the_memoised_source_digest_is_the_plain_one() {
        // Cache entries written before the memo must still hit: same bytes hashed, same order.
        let spec = KernelSpec::new("gemm/mma_sync.cu", "k", "sm_90a").define("X", 1);
        let mut h = Sha256::new();
        for path in sources::closure(&spec.source) {
            h.update(path.as_bytes());
            h.update([0]);
            h.update(sources::get(path).unwrap_or("").as_bytes());
            h.update([0]);
        }
        h.update(spec.entry.as_bytes());
        for o in spec.options() {
            h.update([0]);
            h.update(o.as_bytes());
        }
        h.update(b"nvrtc13.0");
        let plain: String = h
            .finalize()
            .iter()
            .take(10)
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(Jit::digest(&spec, (13, 0)), plain);
        assert_eq!(Jit::digest(&spec, (13, 0)), plain); // second call: from the memo
    }

    #[test]
    fn the_thread_clock_counts_this_threads_work() {
        let Some(a) = thread_cpu_ms() else {
            if cfg!(target_os = "linux") {
                panic!("no thread CPU clock on Linux");
            }
            return;
        };
        let mut x = 0u64;
        for i in 0..20_000_000u64 {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
        }
        let b = thread_cpu_ms().unwrap();
        assert!(b > a, "{a} -> {b} ({x})");
        // Sleeping costs no CPU: the clock is the thread's, not the wall's.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(thread_cpu_ms().unwrap() - b < 25.0);
    }

    #[test]
    fn a_cache_hit_returns_the_cubin_hash_and_cpu_time_of_the_cold_compile() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let jit = Jit {
            cache: Some(cache::DiskCache {
                root: dir.path().to_path_buf(),
            }),
        };
        let spec = KernelSpec::new("gemm/simt_naive.cu", "gemm_simt_naive", "sm_90a")
            .define("KILN_IN", 0)
            .define("KILN_OUT", 0)
            .define("KILN_A_ROW", 1)
            .define("KILN_B_ROW", 1);
        let cold = jit.compile(&spec).unwrap();
        assert!(!cold.cached);
        assert_eq!(cold.cubin_sha256, sha256_hex(&cold.cubin));
        if cfg!(target_os = "linux") {
            assert!(cold.compile_cpu_ms.unwrap() > 0.0);
        }
        let warm = jit.compile(&spec).unwrap();
        assert!(warm.cached);
        assert_eq!(warm.cubin, cold.cubin);
        assert_eq!(warm.cubin_sha256, cold.cubin_sha256);
        // Through the metadata's JSON: serde_json's float parsing is not exact round-trip (it
        // read 43.823719 back as 43.823719000000004 once), so equal to a nanosecond.
        let (w, c) = (warm.compile_cpu_ms.unwrap(), cold.compile_cpu_ms.unwrap());
        assert!((w - c).abs() < 1e-6, "{w} vs {c}");
    }

    #[test]
    fn label_names_the_stem_and_defines() {
        let s = KernelSpec::new("gemm/simt_tiled.cu", "k", "sm_90a").define("BM", 128);
        assert_eq!(s.label(), "simt_tiled[BM=128]");
    }
}
