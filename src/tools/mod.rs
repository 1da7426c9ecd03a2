//! Tools around the kernels: SASS inspection (cuobjdump), compute-sanitizer and Nsight Compute
//! wrappers, the experiment ledger, and the dispatch's plan for a problem. Each external program is found the same way (an env
//! variable, then PATH, then known install folders) and its absence is one clear sentence.

pub mod inspect;
pub mod ledger;
pub mod ledger_text;
pub mod plan;
pub mod plan_attn_bwd;
pub mod profile;
pub mod sanitize;
pub mod sanitize_attn_bwd;
pub mod sanitize_fp4;
pub mod sanitize_fp8;
pub mod timeline;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// An external program and where to look for it.
pub struct ToolSpec {
    /// File name, e.g. `cuobjdump`.
    pub name: &'static str,
    /// Environment variable that names the file directly.
    pub env: &'static str,
    /// Folders to try after PATH (relative ones are tried from the working folder and from the
    /// folders above the kiln binary, where the repository's `.deps/` lives).
    pub fallback_dirs: &'static [&'static str],
    /// What to do when it is missing.
    pub hint: &'static str,
}

impl ToolSpec {
    /// The program's path, or [`Error::ToolMissing`] saying what was tried and what to do.
    pub fn find(&self) -> Result<PathBuf> {
        if let Some(p) = std::env::var_os(self.env).filter(|v| !v.is_empty()) {
            let p = PathBuf::from(p);
            return if p.is_file() {
                Ok(p)
            } else {
                Err(Error::ToolMissing(format!(
                    "{} = {} is not a file; {}",
                    self.env,
                    p.display(),
                    self.hint
                )))
            };
        }
        let path_dirs: Vec<PathBuf> = std::env::var_os("PATH")
            .map(|p| std::env::split_paths(&p).collect())
            .unwrap_or_default();
        let mut dirs = path_dirs;
        for d in self.fallback_dirs {
            let d = Path::new(d);
            dirs.push(d.to_path_buf());
            if d.is_relative() {
                if let Ok(exe) = std::env::current_exe() {
                    dirs.extend(exe.ancestors().skip(1).take(4).map(|a| a.join(d)));
                }
            }
        }
        dirs.into_iter()
            .map(|d| d.join(self.name))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                Error::ToolMissing(format!(
                    "{} was not found (tried {}, PATH and {}): {}",
                    self.name,
                    self.env,
                    self.fallback_dirs.join(", "),
                    self.hint
                ))
            })
    }
}

/// PATH with `dir` in front, for a child that calls sibling programs (cuobjdump runs nvdisasm).
pub fn path_with(dir: &Path) -> OsString {
    let mut dirs = vec![dir.to_path_buf()];
    if let Some(p) = std::env::var_os("PATH") {
        dirs.extend(std::env::split_paths(&p));
    }
    std::env::join_paths(dirs).unwrap_or_default()
}

/// The kiln binary running now, which the sanitizer and the profiler run again under them.
pub fn this_kiln() -> Result<PathBuf> {
    std::env::current_exe().map_err(|source| Error::Io {
        what: "finding the kiln binary",
        path: PathBuf::from("/proc/self/exe"),
        source,
    })
}
