//! Verification: run a kernel on fresh random inputs with a NaN-poisoned output and compare it,
//! element by element, to the float64 reference. Unwritten outputs, writes outside C, NaN and
//! errors over the dtype's bound each fail the check, with the reason.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::ops::gemm::{DType, GemmKernel, GemmOperands, GemmProblem};
use crate::reference::{data::HostData, gemm::gemm_rows};

/// Relative-error bound ‖out−ref‖/‖ref‖ by output dtype (inputs exact, fp32 accumulation, so
/// the output's own rounding dominates: bf16 ≈ 1.1e-3 rms, f16 ≈ 2.8e-4, f32 ≈ 1e-7).
pub fn bound(output: DType) -> f64 {
    match output {
        DType::Bf16 => 4e-3,
        DType::F16 => 1e-3,
        DType::F32 => 5e-5,
    }
}

/// Above this many f64 multiply-adds the reference samples rows instead of computing all.
const FULL_REFERENCE_LIMIT: f64 = 2.0e9;
const SAMPLED_ROWS: usize = 96;

#[derive(Debug, Clone, Serialize)]
pub struct CheckOutcome {
    pub version: String,
    pub problem: GemmProblem,
    pub passed: bool,
    /// `None` when the kernel refused the problem (not a failure).
    pub skipped: Option<String>,
    pub rel_error: f64,
    pub bound: f64,
    pub nan_or_unwritten: usize,
    pub written_outside: usize,
    pub rows_checked: usize,
    pub seed: u64,
    pub message: String,
}

/// A fresh seed per check: inputs are never reused across checks or runs.
pub fn fresh_seed() -> u64 {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, std::sync::atomic::Ordering::Relaxed)
}

/// Rows the reference computes: all of them for small problems, else the edges plus a spread.
pub fn rows_to_check(p: &GemmProblem, seed: u64) -> Vec<usize> {
    if p.m as f64 * p.n as f64 * p.k as f64 <= FULL_REFERENCE_LIMIT {
        return (0..p.m).collect();
    }
    let mut rows: Vec<usize> = [0, 1, 63, 64, 127, 128, 129, 255, 256]
        .into_iter()
        .filter(|&r| r < p.m)
        .collect();
    rows.extend([p.m - 1, p.m.saturating_sub(2), p.m / 2]);
    let mut x = seed | 1;
    while rows.len() < SAMPLED_ROWS.min(p.m) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        rows.push((x % p.m as u64) as usize);
        rows.sort_unstable();
        rows.dedup();
    }
    rows.sort_unstable();
    rows.dedup();
    rows
}

/// Verifies `kernel` on `p` once, with fresh inputs.
pub fn verify_gemm(
    ctx: &Context,
    kernel: &dyn GemmKernel,
    p: &GemmProblem,
) -> Result<CheckOutcome> {
    p.validate()?;
    let seed = fresh_seed();
    let mut out = CheckOutcome {
        version: kernel.name().into(),
        problem: *p,
        passed: false,
        skipped: None,
        rel_error: f64::NAN,
        bound: bound(p.output),
        nan_or_unwritten: 0,
        written_outside: 0,
        rows_checked: 0,
        seed,
        message: String::new(),
    };
    if let Err(reason) = kernel.supports(p, &ctx.info) {
        out.skipped = Some(reason);
        out.passed = true;
        return Ok(out);
    }
    let a = HostData::random(p.input, p.a_elems(), seed);
    let b = HostData::random(p.input, p.b_elems(), seed.wrapping_add(1));
    // C: poison everywhere; with beta != 0 the in-range elements get random old values.
    let mut c_host = HostData::poison(p.output, p.c_elems());
    let c_in = (p.beta != 0.0).then(|| {
        let r = HostData::random(p.output, p.c_elems(), seed.wrapping_add(2));
        c_host = merge_in_range(p, &c_host, &r);
        c_host.clone()
    });
    let (da, db, dc) = (
        DeviceBuffer::from_host(a.bytes())?,
        DeviceBuffer::from_host(b.bytes())?,
        DeviceBuffer::from_host(c_host.bytes())?,
    );
    let ops = GemmOperands {
        a: &da,
        b: &db,
        c: &dc,
    };
    match kernel.launch(ctx, p, &ops) {
        Ok(()) => {}
        Err(Error::Unsupported { reason, .. }) => {
            out.skipped = Some(reason);
            out.passed = true;
            return Ok(out);
        }
        Err(e) => return Err(e),
    }
    ctx.synchronize_within(
        std::time::Duration::from_secs_f64(10.0 + p.flops() / 1e11),
        &format!("{} on {}", kernel.name(), p.label()),
    )?;
    let got = HostData::from_bytes(p.output, &dc.download::<u8>(p.c_elems() * p.output.size())?);

    // Coverage: every in-range element written (no NaN left), nothing outside C touched.
    for m in 0..p.m {
        for n in 0..p.ldc.min(p.c_elems() - m * p.ldc) {
            let i = m * p.ldc + n;
            if n < p.n {
                if got.get(i).is_nan() {
                    out.nan_or_unwritten += 1;
                }
            } else if !same_bits(&got, &c_host, i) {
                out.written_outside += 1;
            }
        }
    }
    let rows = rows_to_check(p, seed);
    let c_in_f64 = c_in.as_ref().map(HostData::to_f64);
    let reference = gemm_rows(p, &a.to_f64(), &b.to_f64(), c_in_f64.as_deref(), &rows);
    let (mut diff2, mut ref2) = (0.0f64, 0.0f64);
    for (r, &m) in reference.iter().zip(&rows) {
        for (n, &want) in r.iter().enumerate() {
            let have = got.get(m * p.ldc + n);
            if have.is_finite() {
                diff2 += (have - want) * (have - want);
            }
            ref2 += want * want;
        }
    }
    out.rows_checked = rows.len();
    out.rel_error = if ref2 > 0.0 {
        (diff2 / ref2).sqrt()
    } else {
        diff2.sqrt()
    };
    out.passed =
        out.nan_or_unwritten == 0 && out.written_outside == 0 && out.rel_error <= out.bound;
    out.message = if out.passed {
        "ok".into()
    } else if out.nan_or_unwritten > 0 {
        format!(
            "{} output elements are NaN or were never written",
            out.nan_or_unwritten
        )
    } else if out.written_outside > 0 {
        format!(
            "{} elements outside C (in the ldc padding) were overwritten",
            out.written_outside
        )
    } else {
        format!(
            "relative error {:.2e} exceeds the {} bound {:.0e}",
            out.rel_error, p.output, out.bound
        )
    };
    Ok(out)
}

fn merge_in_range(p: &GemmProblem, poison: &HostData, values: &HostData) -> HostData {
    let mut bytes = poison.bytes().to_vec();
    let es = p.output.size();
    for m in 0..p.m {
        let s = m * p.ldc * es;
        let e = s + p.n * es;
        bytes[s..e].copy_from_slice(&values.bytes()[s..e]);
    }
    HostData::from_bytes(p.output, &bytes)
}

fn same_bits(a: &HostData, b: &HostData, i: usize) -> bool {
    let es = a.dtype().size();
    a.bytes()[i * es..(i + 1) * es] == b.bytes()[i * es..(i + 1) * es]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::Layout;

    #[test]
    fn large_problems_sample_edge_rows_small_ones_check_all() {
        let small = GemmProblem::new(300, 300, 300, Layout::RC, DType::Bf16, DType::Bf16);
        assert_eq!(rows_to_check(&small, 1).len(), 300);
        let big = GemmProblem::new(4097, 4097, 4099, Layout::RC, DType::Bf16, DType::Bf16);
        let r = rows_to_check(&big, 5);
        assert!(r.len() >= 64 && r.len() <= SAMPLED_ROWS);
        for must in [0, 127, 128, 129, 4096] {
            assert!(r.contains(&must), "row {must} not checked");
        }
    }

    #[test]
    fn seeds_are_fresh() {
        assert_ne!(fresh_seed(), fresh_seed());
    }
}
