//! What the integration tests share: the output of a `kiln` run as text, and one way to skip a
//! test that needs what this machine lacks (a GPU, NVRTC, a tool), said on stderr and counted.
#![allow(dead_code)] // each test file uses a part

use std::io::Write;
use std::process::Output;

/// Where each skip is appended as a line (`scripts/test.sh` clears it first and counts it after).
pub const SKIPPED_FILE: &str = concat!(env!("CARGO_TARGET_TMPDIR"), "/kiln-skipped-tests.txt");

/// stdout then stderr of a finished `kiln` run.
pub fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Whether this run must have NVRTC and the tools `scripts/setup.sh` installs (CI sets
/// `KILN_REQUIRE_NVRTC=1`, or `CI`): a test that needs them fails there instead of skipping.
pub fn required() -> bool {
    std::env::var_os("KILN_REQUIRE_NVRTC").is_some() || std::env::var_os("CI").is_some()
}

/// Says that the calling test skipped and why (`skipped: <file>::<test>: <reason>` on stderr) and
/// counts it in [`SKIPPED_FILE`]. The caller returns right after; the macros below do both.
pub fn skip(reason: &str) {
    let test = std::thread::current()
        .name()
        .map(str::to_string)
        .unwrap_or_else(|| "a test".into());
    let line = format!("{}::{test}: {reason}", env!("CARGO_CRATE_NAME"));
    // Straight to stderr, not through eprintln!, which the test harness captures for tests that
    // pass: the skip is said in a plain `cargo test` too.
    let _ = writeln!(std::io::stderr(), "skipped: {line}");
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(SKIPPED_FILE)
    {
        let _ = writeln!(f, "{line}");
    }
}

/// Whether NVRTC loads; where it must ([`required`]) and does not, the test fails here.
pub fn nvrtc_available() -> bool {
    let ok = kiln::jit::nvrtc::version().is_ok();
    assert!(
        ok || !required(),
        "NVRTC is required here but missing: run scripts/setup.sh"
    );
    ok
}

/// Whether a GPU and its driver answer.
pub fn gpu_present() -> bool {
    kiln::device::init().is_ok()
}

/// Returns from the calling test, said and counted, unless NVRTC loads (fails instead where it
/// is required: CI).
#[macro_export]
macro_rules! require_nvrtc {
    () => {
        if !$crate::common::nvrtc_available() {
            $crate::common::skip("NVRTC not installed (run scripts/setup.sh)");
            return;
        }
    };
}

/// Returns from the calling test, said and counted, unless a GPU is present.
#[macro_export]
macro_rules! require_gpu {
    () => {
        if !$crate::common::gpu_present() {
            $crate::common::skip("no GPU");
            return;
        }
    };
}

/// Returns from the calling test, said and counted, where a GPU is present: the test checks what
/// kiln does without one.
#[macro_export]
macro_rules! require_no_gpu {
    () => {
        if $crate::common::gpu_present() {
            $crate::common::skip("a GPU is present; the test checks the behaviour without one");
            return;
        }
    };
}

/// Asserts that `r` is an argument error on `arg` of `kind` whose sentence says `says` (the
/// API tests' one check of a refusal).
pub fn assert_refused<T: std::fmt::Debug>(
    r: kiln::Result<T>,
    arg: &str,
    kind: kiln::ArgumentKind,
    says: &str,
) {
    match r {
        Err(kiln::Error::Argument {
            arg: a,
            kind: k,
            message,
        }) => {
            assert_eq!((a.as_str(), k), (arg, kind), "{message}");
            assert!(message.contains(says), "`{message}` does not say `{says}`");
        }
        other => panic!("expected an argument error on `{arg}`, got {other:?}"),
    }
}

/// A checked view of fake memory at `ptr` (never dereferenced) on GPU 0.
pub fn view(
    ptr: u64,
    dtype: kiln::DType,
    shape: &[usize],
    strides: &[isize],
) -> kiln::api::TensorInfo {
    kiln::api::RawTensor {
        ptr,
        dtype,
        shape: shape.to_vec(),
        strides: strides.to_vec(),
        device: 0,
    }
    .info("t", false)
    .unwrap()
}
