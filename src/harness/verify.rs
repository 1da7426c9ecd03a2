//! Verification: run a kernel on fresh random inputs with a NaN-poisoned output and compare it,
//! element by element, to the float64 reference. Unwritten outputs, writes outside C, NaN and
//! errors over the dtype's bound each fail the check, with the reason.

use std::time::{SystemTime, UNIX_EPOCH};

use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::ops::gemm::{DType, GemmKernel, GemmOperands, GemmProblem};
use crate::reference::{data::HostData, gemm::gemm_rows};

use super::outcome::{Extra, Outcome};
use super::runner::Check;

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

/// A fresh seed per check: inputs are never reused across checks or runs.
pub fn fresh_seed() -> u64 {
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ COUNTER.fetch_add(0x9E37_79B9_7F4A_7C15, std::sync::atomic::Ordering::Relaxed)
}

/// The rows a sampled reference computes: `edges` (the rows a check must always cover) topped up
/// to `target` rows (at most `len`) by a seeded xorshift spread over `pick(0..len)`, sorted and
/// without repeats. Shared by the GEMM, attention and MoE checks.
pub fn spread_rows(
    mut rows: Vec<usize>,
    len: usize,
    target: usize,
    seed: u64,
    pick: impl Fn(usize) -> usize,
) -> Vec<usize> {
    let mut x = seed | 1;
    while rows.len() < target.min(len) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        rows.push(pick((x % len as u64) as usize));
        rows.sort_unstable();
        rows.dedup();
    }
    rows.sort_unstable();
    rows.dedup();
    rows
}

/// ‖out−ref‖/‖ref‖ from the two sums of squares (the absolute norm when the reference is zero).
pub fn rel_l2(diff2: f64, ref2: f64) -> f64 {
    if ref2 > 0.0 {
        (diff2 / ref2).sqrt()
    } else {
        diff2.sqrt()
    }
}

/// ‖have − want‖/‖want‖ over (have, want) pairs; a non-finite output adds nothing (it is
/// counted as NaN or unwritten apart).
pub fn rel_error(pairs: impl IntoIterator<Item = (f64, f64)>) -> f64 {
    let (mut diff2, mut ref2) = (0.0f64, 0.0f64);
    for (have, want) in pairs {
        if have.is_finite() {
            diff2 += (have - want) * (have - want);
        }
        ref2 += want * want;
    }
    rel_l2(diff2, ref2)
}

/// The launch's refusal, if it refused: `Error::Unsupported` is a skip (the problem is outside
/// what the version does, said with a reason), not a failure; any other error is returned.
pub fn refusal(launched: Result<()>) -> Result<Option<String>> {
    match launched {
        Ok(()) => Ok(None),
        Err(Error::Unsupported { reason, .. }) => Ok(Some(reason)),
        Err(e) => Err(e),
    }
}

/// A check's outcome, or for an error that leaves the GPU usable (all but a hang and running out
/// of memory, which are returned) the failed check that `failed` makes of its message.
pub fn or_failed<T>(checked: Result<T>, failed: impl FnOnce(String) -> T) -> Result<T> {
    match checked {
        Err(e @ (Error::Hang { .. } | Error::OutOfMemory { .. })) => Err(e),
        Err(e) => Ok(failed(e.to_string())),
        ok => ok,
    }
}

/// The verdict of one check: the first fault present, in the order given, else "ok". A fault
/// is (present, its message); messages are built only for the fault reported.
pub fn verdict(faults: &[(bool, &dyn Fn() -> String)]) -> (bool, String) {
    match faults.iter().find(|(present, _)| *present) {
        Some((_, message)) => (false, message()),
        None => (true, "ok".into()),
    }
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
    spread_rows(rows, p.m, SAMPLED_ROWS, seed, |r| r)
}

/// Verifies `kernel` on `p` once, with fresh inputs.
pub fn verify_gemm(ctx: &Context, kernel: &dyn GemmKernel, p: &GemmProblem) -> Result<Outcome> {
    p.validate()?;
    super::memory::plan_verify(p).ensure(ctx, &super::memory::what(p))?;
    super::runner::run(ctx, &GemmCheck { kernel, p }, fresh_seed())
}

/// One GEMM version on one problem, as the runner checks it.
struct GemmCheck<'a> {
    kernel: &'a dyn GemmKernel,
    p: &'a GemmProblem,
}

/// A GEMM's inputs, C as poisoned (with beta's old values in range), and the buffers.
struct GemmDrawn {
    a: HostData,
    b: HostData,
    c_host: HostData,
    c_in: Option<HostData>,
    da: DeviceBuffer,
    db: DeviceBuffer,
    dc: DeviceBuffer,
    seed: u64,
}

impl Check for GemmCheck<'_> {
    type Drawn = GemmDrawn;

    fn blank(&self, seed: u64) -> Outcome {
        blank(self.kernel, self.p, seed)
    }

    fn supports(&self, ctx: &Context) -> std::result::Result<(), String> {
        self.kernel.supports(self.p, &ctx.info)
    }

    fn draw(&self, _ctx: &Context, seed: u64) -> Result<GemmDrawn> {
        let p = self.p;
        let a = HostData::random(p.input, p.a_elems(), seed);
        let b = HostData::random(p.input, p.b_elems(), seed.wrapping_add(1));
        // C: poison everywhere; with beta != 0 the in-range elements get random old values.
        let mut c_host = HostData::poison(p.output, p.c_elems());
        let c_in = (p.beta != 0.0).then(|| {
            let r = HostData::random(p.output, p.c_elems(), seed.wrapping_add(2));
            c_host = merge_in_range(p, &c_host, &r);
            c_host.clone()
        });
        Ok(GemmDrawn {
            da: DeviceBuffer::from_host(a.bytes())?,
            db: DeviceBuffer::from_host(b.bytes())?,
            dc: DeviceBuffer::from_host(c_host.bytes())?,
            a,
            b,
            c_host,
            c_in,
            seed,
        })
    }

    fn launch(&self, ctx: &Context, d: &mut GemmDrawn) -> Result<()> {
        let ops = GemmOperands {
            a: &d.da,
            b: &d.db,
            c: &d.dc,
        };
        self.kernel.launch(ctx, self.p, &ops)
    }

    fn flops(&self) -> f64 {
        self.p.flops()
    }

    fn judge(&self, d: &GemmDrawn, out: &mut Outcome) -> Result<()> {
        let p = self.p;
        let got = HostData::from_bytes(
            p.output,
            &d.dc.download::<u8>(p.c_elems() * p.output.size())?,
        );
        // Coverage: every in-range element written (no NaN left), nothing outside C touched.
        for m in 0..p.m {
            for n in 0..p.ldc.min(p.c_elems() - m * p.ldc) {
                let i = m * p.ldc + n;
                if n < p.n {
                    if got.get(i).is_nan() {
                        out.mismatches += 1;
                    }
                } else if !same_bits(&got, &d.c_host, i) {
                    out.written_outside += 1;
                }
            }
        }
        let rows = rows_to_check(p, d.seed);
        let c_in_f64 = d.c_in.as_ref().map(HostData::to_f64);
        let reference = gemm_rows(p, &d.a.to_f64(), &d.b.to_f64(), c_in_f64.as_deref(), &rows);
        let got = &got;
        let pairs = reference.iter().zip(&rows).flat_map(|(r, &m)| {
            let have = move |n| got.get(m * p.ldc + n);
            r.iter().enumerate().map(move |(n, &want)| (have(n), want))
        });
        out.rows_checked = rows.len();
        out.rel_error = rel_error(pairs);
        let o = &*out;
        let (passed, message) = verdict(&[
            (o.mismatches > 0, &|| {
                format!(
                    "{} output elements are NaN or were never written",
                    o.mismatches
                )
            }),
            (o.written_outside > 0, &|| {
                format!(
                    "{} elements outside C (in the ldc padding) were overwritten",
                    o.written_outside
                )
            }),
            (!within(o.rel_error, o.bound), &|| {
                format!(
                    "relative error {:.2e} exceeds the {} bound {:.0e}",
                    o.rel_error, p.output, o.bound
                )
            }),
        ]);
        (out.passed, out.message) = (passed, message);
        Ok(())
    }
}

/// `x <= bound`, false for NaN (a NaN error is a failure).
pub fn within(x: f64, bound: f64) -> bool {
    x <= bound
}

/// `kernel` on `p` with the inputs of `seed`, not yet judged (failed, with no message).
pub fn blank(kernel: &dyn GemmKernel, p: &GemmProblem, seed: u64) -> Outcome {
    Outcome::new(
        kernel.name(),
        p.label(),
        seed,
        bound(p.output),
        Extra::Gemm(*p),
    )
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
    fn spread_rows_draws_the_rows_the_inline_samplers_drew() {
        // The loop each of the GEMM, attention and MoE checks had before they shared it.
        fn inline(mut rows: Vec<usize>, pool: &[usize], target: usize, seed: u64) -> Vec<usize> {
            let mut x = seed | 1;
            while rows.len() < target.min(pool.len()) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                rows.push(pool[(x % pool.len() as u64) as usize]);
                rows.sort_unstable();
                rows.dedup();
            }
            rows.sort_unstable();
            rows.dedup();
            rows
        }
        let pool: Vec<usize> = (0..5000).map(|i| 3 * i + 1).collect();
        for seed in [0, 1, 5, 0x9E37_79B9_7F4A_7C15, u64::MAX] {
            let edges = vec![4, 1, 14998];
            assert_eq!(
                spread_rows(edges.clone(), pool.len(), 96, seed, |i| pool[i]),
                inline(edges, &pool, 96, seed)
            );
        }
        assert_eq!(spread_rows(vec![2], 3, 96, 7, |r| r), vec![0, 1, 2]);
    }

    #[test]
    fn verdict_names_the_first_fault() {
        assert_eq!(verdict(&[(false, &|| "a".into())]), (true, "ok".into()));
        assert_eq!(
            verdict(&[
                (false, &|| "a".into()),
                (true, &|| "b".into()),
                (true, &|| "c".into())
            ]),
            (false, "b".into())
        );
        assert!(!within(f64::NAN, 1.0));
    }

    #[test]
    fn seeds_are_fresh() {
        assert_ne!(fresh_seed(), fresh_seed());
    }
}
