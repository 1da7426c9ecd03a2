//! The configuration variables (where things live, which tools to run, test switches), checked
//! here so that a bad value is an error; the scripts' own names; the nearest known name.

use super::knobs::{flag, KNOBS};
use super::*;

/// A configuration variable: read where it is used, checked here.
pub struct ConfigVar {
    pub name: &'static str,
    /// What it takes, after "set it to".
    pub takes: &'static str,
    /// What is wrong with a (non-empty) value, if anything.
    pub(super) check: fn(&str) -> Option<&'static str>,
    /// The kind of error a bad value is: a bad config (exit 2), but a bad `KILN_NVRTC` is
    /// NVRTC missing (exit 5), as it is when the library is loaded.
    pub(super) error: fn(String) -> Error,
}

pub(super) fn any(_: &str) -> Option<&'static str> {
    None
}

pub(super) fn one(v: &str) -> Option<&'static str> {
    (v != "1").then_some("it takes only 1")
}

pub(super) fn zero_or_one(v: &str) -> Option<&'static str> {
    flag(v).is_none().then_some("it takes 0 or 1")
}

/// A CUDA library: its file, or a folder holding it (as [`libs::from_env`] reads it).
pub(super) fn library(lib: &CudaLib, v: &str) -> Option<&'static str> {
    libs::override_file(lib, Path::new(v)).err()
}

/// A file that exists.
pub(super) fn existing_file(v: &str) -> Option<&'static str> {
    let p = Path::new(v);
    if !p.exists() {
        Some("that file does not exist")
    } else if !p.is_file() {
        Some("that is not a file")
    } else {
        None
    }
}

/// A folder that exists.
pub(super) fn existing_dir(v: &str) -> Option<&'static str> {
    let p = Path::new(v);
    if !p.exists() {
        Some("that folder does not exist")
    } else if !p.is_dir() {
        Some("that is not a folder")
    } else {
        None
    }
}

/// A folder, made if missing.
pub(super) fn dir_or_missing(v: &str) -> Option<&'static str> {
    let p = Path::new(v);
    (p.exists() && !p.is_dir()).then_some("that is a file, not a folder")
}

/// A file, made if missing.
pub(super) fn file_or_missing(v: &str) -> Option<&'static str> {
    Path::new(v)
        .is_dir()
        .then_some("that is a folder, not a file")
}

/// The configuration variables, in name order: each keeps its own reader.
pub static CONFIG_VARS: &[ConfigVar] = &[
    ConfigVar {
        name: "KILN_CACHE_DIR",
        takes: "the JIT cache's folder (made if missing)",
        check: dir_or_missing,
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_COMMIT",
        takes: "the commit to tag stored runs with",
        check: any,
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_COMPUTE_SANITIZER",
        takes: "the compute-sanitizer program's path",
        check: existing_file,
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_CUBLAS",
        takes: "libcublas.so.13's path or its folder's",
        check: |v| library(&libs::CUBLAS, v),
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_CUBLASLT",
        takes: "libcublasLt.so.13's path or its folder's",
        check: |v| library(&libs::CUBLASLT, v),
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_CUOBJDUMP",
        takes: "the cuobjdump program's path",
        check: existing_file,
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_FP8_CHECK_ONLY",
        takes: "a part of a variant's label (the FP8 compile test then checks only the \
                variants whose label holds it; test only)",
        check: any,
        error: Error::Config,
    },
    ConfigVar {
        // build.rs bakes it in at compile time; cargo also sets it in the environment of the
        // programs it runs (tests, `cargo run`), where kiln ignores it.
        name: "KILN_GIT_COMMIT",
        takes: "the commit kiln is built from (build.rs sets it)",
        check: any,
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_NCU",
        takes: "the ncu (Nsight Compute) program's path",
        check: existing_file,
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_NVRTC",
        takes: "libnvrtc.so.13's path or its folder's",
        check: |v| library(&libs::NVRTC, v),
        error: Error::NvrtcMissing,
    },
    ConfigVar {
        name: "KILN_PYTHON_DEPS",
        takes: "a Python package folder holding nvidia/*/lib",
        check: existing_dir,
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_REQUIRE_NVRTC",
        takes: "1 (tests then fail where NVRTC is missing instead of skipping)",
        check: one,
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_STORE",
        takes: "the store's SQLite file (made if missing)",
        check: file_or_missing,
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_TEST_KERNELS",
        takes: "0 or 1 (1 registers the test-only `planted` GEMM version)",
        check: zero_or_one,
        error: Error::Config,
    },
];

/// Names the repository's scripts and Python tests set for themselves: kiln ignores them.
pub const SCRIPT_VARS: &[&str] = &[
    "KILN_BIN",
    "KILN_BROWSER_TESTS",
    "KILN_EXAMPLE_BIN",
    "KILN_EXPECT_NO_GPU",
    "KILN_REQUIRE_NATIVE",
    "KILN_VERIFY_SUITE",
    "KILN_WHEEL",
];

/// The configuration variable `name`, if it is one.
pub fn config_var(name: &str) -> Option<&'static ConfigVar> {
    CONFIG_VARS.iter().find(|v| v.name == name)
}

/// Every `KILN_*` name kiln knows: the knobs, the configuration variables and the scripts' own.
pub fn known_names() -> impl Iterator<Item = &'static str> {
    KNOBS
        .iter()
        .map(|k| k.name)
        .chain(CONFIG_VARS.iter().map(|v| v.name))
        .chain(SCRIPT_VARS.iter().copied())
}

/// The known name nearest to `name`, if it is a likely misspelling (at most 2 edits away).
pub(super) fn closest(name: &str) -> Option<&'static str> {
    known_names()
        .map(|k| (edits(name, k), k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| k)
}

/// Levenshtein distance.
pub(super) fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for j in 0..b.len() {
            let cur = row[j + 1];
            row[j + 1] = (prev + (ca != b[j]) as usize).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}
