//! The library's error type: one variant per way kiln can refuse or fail, each printing one
//! lowercase sentence that says what went wrong and what to do about it.

use std::path::PathBuf;

/// Everything the library can fail with. The CLI maps each kind to an exit code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    NoGpu(String),
    #[error("{0}")]
    NvrtcMissing(String),
    #[error("compiling {kernel} failed:\n{log}")]
    Compile { kernel: String, log: String },
    #[error("{0}")]
    InvalidInput(String),
    #[error("{kernel} does not support this problem: {reason}")]
    Unsupported { kernel: String, reason: String },
    #[error("unknown {what} `{name}`; known: {known}")]
    Unknown {
        what: &'static str,
        name: String,
        known: String,
    },
    #[error("CUDA error in {context}: {message}")]
    Cuda { context: String, message: String },
    #[error("{0}")]
    Config(String),
    #[error("{what} at {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("store: {0}")]
    Store(String),
    #[error("verification failed: {0}")]
    Verification(String),
    /// An external tool (cuobjdump, compute-sanitizer, ncu) is not installed.
    #[error("{0}")]
    ToolMissing(String),
    /// A launch that did not finish within its time bound.
    #[error(
        "{what} did not finish within {limit_ms} ms: the kernel is probably hung (a barrier \
             that never completes or a loop that never exits); its context was abandoned, so rerun \
             it alone, e.g. under `kiln sanitize --tool synccheck`"
    )]
    Hang { what: String, limit_ms: u64 },
    /// An argument of a public API call (`kiln::Kiln`'s ops, views) that is wrong: `arg` names
    /// it, `kind` says which check refused it (for bindings that map kinds to their own
    /// exception types), and the message is one sentence saying what is wrong and how to fix it.
    #[error("{message}")]
    Argument {
        arg: String,
        kind: ArgumentKind,
        message: String,
    },
    /// A call on a stream that is capturing a CUDA graph would compile a kernel or allocate
    /// memory; the message names the problem to pass to `Kiln::precompile` first.
    #[error("{0}")]
    Capture(String),
    /// A problem that needs more memory than is free, refused before anything is allocated or
    /// generated: `what` names it ("this problem"), `needed` and `free` are bytes.
    #[error(
        "{what} needs {} of {} memory; {} has {} free: use a smaller problem",
        size(*.needed), .memory.name(), .memory.holder(), size(*.free)
    )]
    OutOfMemory {
        what: String,
        needed: u64,
        free: u64,
        memory: Memory,
    },
}

/// Which memory a problem does not fit in (see [`Error::OutOfMemory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Memory {
    /// The GPU's memory.
    Device,
    /// The machine's RAM, where the reference's copies of the inputs live.
    Host,
}

impl Memory {
    fn name(self) -> &'static str {
        match self {
            Memory::Device => "device",
            Memory::Host => "host",
        }
    }

    fn holder(self) -> &'static str {
        match self {
            Memory::Device => "the GPU",
            Memory::Host => "the machine",
        }
    }
}

/// `bytes` in GiB with one decimal (`240.0 GiB`), or in MiB below a GiB, where one decimal of a
/// GiB would read 0.0.
pub fn size(bytes: u64) -> String {
    const GIB: f64 = (1u64 << 30) as f64;
    if bytes >= 1 << 30 {
        format!("{:.1} GiB", bytes as f64 / GIB)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1u64 << 20) as f64)
    }
}

/// Which check refused an argument (see [`Error::Argument`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArgumentKind {
    /// The element type is not one the op takes.
    DType,
    /// The tensor (or stream) is on another GPU than the handle.
    Device,
    /// A shape, or shapes that disagree with each other.
    Shape,
    /// Strides the op cannot read (last dimension not contiguous, negative, unpacked).
    Stride,
    /// The view reaches outside its allocation or is misaligned.
    Bounds,
    /// A value: an option (scale, alpha) or the contents of a host copy (offsets, counts).
    Value,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidInput(msg.into())
    }

    /// An [`Error::Argument`] naming `arg`.
    pub fn argument(
        arg: impl Into<String>,
        kind: ArgumentKind,
        message: impl Into<String>,
    ) -> Self {
        Error::Argument {
            arg: arg.into(),
            kind,
            message: message.into(),
        }
    }

    /// What turns a kernel's refusal (its `supports` reason) into [`Error::Unsupported`]:
    /// `k.supports(p).map_err(Error::refused(name))`.
    pub fn refused(kernel: impl Into<String>) -> impl FnOnce(String) -> Self {
        move |reason| Error::Unsupported {
            kernel: kernel.into(),
            reason,
        }
    }

    pub fn cuda(context: impl Into<String>, err: impl std::fmt::Display) -> Self {
        Error::Cuda {
            context: context.into(),
            message: err.to_string(),
        }
    }

    /// [`Error::OutOfMemory`]: `what` needs `needed` bytes of `memory`, which has `free`.
    pub fn out_of_memory(what: impl Into<String>, needed: u64, free: u64, memory: Memory) -> Self {
        Error::OutOfMemory {
            what: what.into(),
            needed,
            free,
            memory,
        }
    }

    /// The exit code the CLI uses for this kind of failure, so scripts can tell them apart.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::InvalidInput(_)
            | Error::Unknown { .. }
            | Error::Config(_)
            | Error::Argument { .. }
            | Error::Capture(_) => 2,
            Error::Unsupported { .. } => 3,
            Error::NoGpu(_) => 4,
            Error::NvrtcMissing(_) => 5,
            Error::Compile { .. } => 6,
            Error::Verification(_) => 7,
            Error::Cuda { .. } => 8,
            Error::Io { .. } | Error::Store(_) => 9,
            Error::ToolMissing(_) => 10,
            Error::Hang { .. } => 11,
            Error::OutOfMemory { .. } => 12,
        }
    }
}

impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::Store(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_reads_as_the_issue_asks() {
        let gib = 1u64 << 30;
        let e = Error::out_of_memory(
            "this problem",
            240 * gib,
            (78.6 * gib as f64) as u64,
            Memory::Device,
        );
        assert_eq!(
            e.to_string(),
            "this problem needs 240.0 GiB of device memory; the GPU has 78.6 GiB free: use a \
             smaller problem"
        );
        assert_eq!(e.exit_code(), 12);
        let host = Error::out_of_memory("this problem's reference", 3 * gib / 2, 0, Memory::Host);
        assert_eq!(
            host.to_string(),
            "this problem's reference needs 1.5 GiB of host memory; the machine has 0.0 MiB \
             free: use a smaller problem"
        );
    }

    #[test]
    fn sizes_have_one_decimal_in_gib_and_mib_below_one_gib() {
        assert_eq!(size(1 << 30), "1.0 GiB");
        assert_eq!(size((1 << 30) - 1), "1024.0 MiB");
        assert_eq!(size(200_000u64 * 200_000 * 2 * 3), "223.5 GiB");
        assert_eq!(size(96 << 20), "96.0 MiB");
        assert_eq!(size(0), "0.0 MiB");
    }
}
