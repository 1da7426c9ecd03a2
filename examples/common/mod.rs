//! What the examples share: opening GPU 0 (one sentence and exit code 4 without a GPU),
//! random host data in kiln's storage types, and the one-line verdict against the reference.

use std::process::ExitCode;

use half::{bf16, f16};
use kiln::reference::data::HostData;
use kiln::{Error, Kiln};

/// The result of one example: what ran, and each checked output's error with its bound.
pub struct Check {
    pub what: String,
    /// (output, relative error, bound)
    pub errors: Vec<(&'static str, f64, f64)>,
}

/// Runs `body` on GPU 0 and prints one line: the problem and each error against its bound.
/// Exits 0 when every error is within its bound, 7 (kiln's verification code) when one is not,
/// 4 without a GPU, and the error's own code when something else fails.
pub fn main(name: &str, body: fn(&Kiln) -> kiln::Result<Check>) -> ExitCode {
    let kiln = match Kiln::open(0) {
        Ok(k) => k,
        Err(e @ Error::NoGpu(_)) => {
            println!("{name}: {e}");
            return ExitCode::from(4);
        }
        Err(e) => return failed(name, e),
    };
    match body(&kiln) {
        Ok(check) => {
            let ok = check.errors.iter().all(|&(_, e, b)| e <= b);
            let parts: Vec<String> = check
                .errors
                .iter()
                .map(|(out, e, b)| format!("{out} {e:.2e} (bound {b:.0e})"))
                .collect();
            println!(
                "{name} {} on {}: {}: {}",
                check.what,
                kiln.device().name,
                parts.join(", "),
                if ok { "ok" } else { "FAILED" }
            );
            ExitCode::from(if ok { 0 } else { 7 })
        }
        Err(e) => failed(name, e),
    }
}

fn failed(name: &str, e: Error) -> ExitCode {
    println!("{name}: {e}");
    ExitCode::from(e.exit_code())
}

/// `len` random bf16 values in [-1, 1) and the same as f64.
pub fn random_bf16(len: usize, seed: u64) -> (Vec<bf16>, Vec<f64>) {
    let h = HostData::random(kiln::ops::gemm::DType::Bf16, len, seed);
    (bits(&h).map(bf16::from_bits).collect(), h.to_f64())
}

/// `len` random f16 values in [-1, 1) and the same as f64.
#[allow(dead_code)]
pub fn random_f16(len: usize, seed: u64) -> (Vec<f16>, Vec<f64>) {
    let h = HostData::random(kiln::ops::gemm::DType::F16, len, seed);
    (bits(&h).map(f16::from_bits).collect(), h.to_f64())
}

/// The 16-bit patterns of 16-bit host data.
fn bits(h: &HostData) -> impl Iterator<Item = u16> + '_ {
    h.bytes()
        .chunks_exact(2)
        .map(|c| u16::from_le_bytes([c[0], c[1]]))
}

/// ‖got − want‖ / ‖want‖ over pairs (NaN counts as an infinite error).
pub fn rel_error(pairs: impl Iterator<Item = (f64, f64)>) -> f64 {
    let (mut d2, mut r2) = (0.0f64, 0.0f64);
    for (got, want) in pairs {
        let d = got - want;
        d2 += if d.is_finite() { d * d } else { f64::INFINITY };
        r2 += want * want;
    }
    kiln::harness::verify::rel_l2(d2, r2)
}

/// A cudarc error as kiln's.
pub fn cuda(what: &'static str) -> impl Fn(cudarc::driver::DriverError) -> Error {
    move |e| Error::cuda(what, format!("{e:?}"))
}
