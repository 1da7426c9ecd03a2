//! Finding CUDA's shared libraries (NVRTC, cuBLAS, cuBLASLt) without a toolkit install: an env
//! var (which, when set, is the only place looked), else CUDA_PATH/CUDA_HOME, /usr/local/cuda,
//! or a Python environment's `nvidia/*/lib` folder.
//!
//! cudarc opens libraries by bare name (`libnvrtc.so.13`); loading the file found here by its
//! full path first makes that later bare-name open resolve to the same, already loaded, object.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{Error, Result};

/// A CUDA library kiln needs, with the env var that overrides where it is looked for.
#[derive(Debug, Clone, Copy)]
pub struct CudaLib {
    /// File name as the loader sees it, e.g. `libnvrtc.so.13`.
    pub file: &'static str,
    /// Env var naming the file or the folder holding it.
    pub env: &'static str,
    /// How to get it when it is nowhere to be found.
    pub hint: &'static str,
}

pub const NVRTC: CudaLib = CudaLib {
    file: "libnvrtc.so.13",
    env: "KILN_NVRTC",
    hint: "install it with `pip install --target .deps/py nvidia-cuda-nvrtc==13.0.88` (the README's setup does this) or set KILN_NVRTC to the file",
};
pub const CUBLASLT: CudaLib = CudaLib {
    file: "libcublasLt.so.13",
    env: "KILN_CUBLASLT",
    hint: "install the CUDA 13 toolkit or `pip install nvidia-cublas` and set KILN_CUBLASLT to the file",
};
pub const CUBLAS: CudaLib = CudaLib {
    file: "libcublas.so.13",
    env: "KILN_CUBLAS",
    hint:
        "install the CUDA 13 toolkit or `pip install nvidia-cublas` and set KILN_CUBLAS to the file",
};

impl CudaLib {
    /// The error for `lib` being missing or unloadable: NVRTC's own kind (no compile can run),
    /// else no GPU (the vendor libraries come with a GPU's software).
    fn missing(&self, msg: String) -> Error {
        if self.file == NVRTC.file {
            Error::NvrtcMissing(msg)
        } else {
            Error::NoGpu(msg)
        }
    }
}

/// What unsetting a library's env var does, for the errors about one that names nothing usable.
const UNSET: &str = "to search CUDA_PATH, CUDA_HOME, /usr/local/cuda and Python environments";

static LOADED: Mutex<Vec<(&'static str, PathBuf)>> = Mutex::new(Vec::new());

/// The file an override value names for `lib`: the file itself, or `lib.file` in the folder it
/// names; else why it names none.
pub fn override_file(lib: &CudaLib, value: &Path) -> std::result::Result<PathBuf, &'static str> {
    if value.is_file() {
        return Ok(value.to_path_buf());
    }
    if !value.is_dir() {
        return Err("no such file or folder");
    }
    let inside = value.join(lib.file);
    if inside.is_file() {
        Ok(inside)
    } else {
        Err("that folder does not hold the library")
    }
}

/// The file `lib.env` names, or `None` when it is unset or empty (an empty value counts as
/// unset, as for every `KILN_*` variable). A value that names no file is an error naming the
/// variable and the value: an override the user set is never passed over for a search.
pub fn from_env(lib: &CudaLib) -> Result<Option<PathBuf>> {
    let Some(value) = std::env::var_os(lib.env).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let value = PathBuf::from(value);
    override_file(lib, &value).map(Some).map_err(|why| {
        lib.missing(format!(
            "{}={}: {why}; set it to {} or the folder holding it, or unset it {UNSET}",
            lib.env,
            value.display(),
            lib.file
        ))
    })
}

/// The folders searched, in order, for a library whose env var is not set.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for var in ["CUDA_PATH", "CUDA_HOME"] {
        if let Ok(v) = std::env::var(var) {
            dirs.push(PathBuf::from(&v).join("lib64"));
            dirs.push(PathBuf::from(&v).join("lib"));
        }
    }
    dirs.push(PathBuf::from("/usr/local/cuda/lib64"));
    for root in python_roots() {
        if let Ok(entries) = std::fs::read_dir(root.join("nvidia")) {
            let mut sub: Vec<PathBuf> = entries.flatten().map(|e| e.path().join("lib")).collect();
            sub.sort();
            dirs.extend(sub);
        }
    }
    dirs
}

/// Python package roots: the project-local `.deps/py` (made by the README's setup), then
/// `KILN_PYTHON_DEPS`, the active virtualenv, and the system Python's site-packages.
fn python_roots() -> Vec<PathBuf> {
    let mut roots = Vec::new();
    if let Ok(v) = std::env::var("KILN_PYTHON_DEPS") {
        roots.push(PathBuf::from(v));
    }
    roots.push(PathBuf::from(".deps/py"));
    if let Ok(exe) = std::env::current_exe() {
        // A binary carried to another machine finds the deps installed beside its repository.
        for anc in exe.ancestors().skip(1).take(4) {
            roots.push(anc.join(".deps/py"));
        }
    }
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Ok(v) = std::env::var(var) {
            roots.extend(site_packages_under(Path::new(&v)));
        }
    }
    for prefix in ["/usr/local", "/usr", "/opt/torch/.venv"] {
        roots.extend(site_packages_under(Path::new(prefix)));
    }
    roots
}

fn site_packages_under(prefix: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(prefix.join("lib")) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("python"))
        .flat_map(|e| {
            [
                e.path().join("site-packages"),
                e.path().join("dist-packages"),
            ]
        })
        .collect()
}

/// Finds `lib` on disk, or `None` if only the system loader might still know it.
pub fn locate(lib: &CudaLib) -> Option<PathBuf> {
    search_dirs()
        .into_iter()
        .map(|d| d.join(lib.file))
        .find(|p| p.is_file())
}

/// Loads `lib` once (by full path where found) so that cudarc's bare-name open succeeds.
pub fn ensure_loaded(lib: &CudaLib) -> Result<PathBuf> {
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, p)) = loaded.iter().find(|(f, _)| *f == lib.file) {
        return Ok(p.clone());
    }
    let explicit = from_env(lib)?;
    let target = explicit
        .clone()
        .or_else(|| locate(lib))
        .unwrap_or_else(|| PathBuf::from(lib.file));
    // SAFETY: loading a CUDA library runs only its initialisers, which have no preconditions.
    match unsafe { libloading::os::unix::Library::open(Some(&target), libc_flags()) } {
        Ok(handle) => {
            std::mem::forget(handle); // cudarc keeps using it for the life of the process
            preload_companions(lib, &target);
            loaded.push((lib.file, target.clone()));
            Ok(target)
        }
        Err(e) if explicit.is_some() => Err(lib.missing(format!(
            "{} names {}, which does not load as {} ({}); set it to {} or the folder holding \
             it, or unset it {UNSET}",
            lib.env,
            target.display(),
            lib.file,
            loader_says(&e),
            lib.file
        ))),
        Err(e) => {
            let searched: Vec<String> = search_dirs()
                .iter()
                .map(|d| d.display().to_string())
                .collect();
            Err(lib.missing(format!(
                "{} was not found (searched {} and the system loader: {}); {}",
                lib.file,
                searched.join(", "),
                loader_says(&e),
                lib.hint
            )))
        }
    }
}

/// The loader's own words (`dlopen failed: <why>`): libloading keeps the why in the source.
fn loader_says(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(why) => format!("{e}: {}", why.to_string().trim()),
        None => e.to_string(),
    }
}

fn libc_flags() -> i32 {
    libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_GLOBAL
}

/// NVRTC opens `libnvrtc-builtins` by bare name at compile time; load it from the same folder.
fn preload_companions(lib: &CudaLib, target: &Path) {
    if lib.file != NVRTC.file {
        return;
    }
    let Some(dir) = target.parent() else { return };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("libnvrtc-builtins.so") && !name.contains(".alt.") {
            // SAFETY: as above, a CUDA library with no initialiser preconditions.
            if let Ok(h) =
                unsafe { libloading::os::unix::Library::open(Some(e.path()), libc_flags()) }
            {
                std::mem::forget(h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_override_names_the_file_or_a_folder_holding_it_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(NVRTC.file);
        std::fs::write(&file, b"").unwrap();
        assert_eq!(override_file(&NVRTC, &file).unwrap(), file);
        assert_eq!(override_file(&NVRTC, dir.path()).unwrap(), file);
        // a file is taken as named (loading it says whether it is the library)
        let other = dir.path().join("notes.txt");
        std::fs::write(&other, b"").unwrap();
        assert_eq!(override_file(&NVRTC, &other).unwrap(), other);
        // a folder without this library, and a path to nothing
        assert_eq!(
            override_file(&CUBLAS, dir.path()),
            Err("that folder does not hold the library")
        );
        assert_eq!(
            override_file(&NVRTC, &dir.path().join("nothing")),
            Err("no such file or folder")
        );
    }
}
