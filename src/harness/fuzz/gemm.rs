//! A GEMM check with nothing on the host but the verdict: inputs made on the GPU, a plain fp32
//! GPU reference compared in full, and float64 on sampled elements regenerated on the CPU.

use crate::device::{Context, DeviceBuffer, LaunchConfig};
use crate::error::{Error, Result};
use crate::harness::device_data::{counter_value, fill};
use crate::harness::outcome::Outcome;
use crate::harness::verify::{blank, refusal, rel_l2, spread_rows, verdict, within};
use crate::jit::KernelSpec;
use crate::ops::gemm::{GemmKernel, GemmOperands, GemmProblem};

/// The reference GEMM and the comparison (`kernels/harness/gemm_reference.cu`).
pub fn specs(arch: &str) -> [KernelSpec; 2] {
    [
        KernelSpec::new("harness/gemm_reference.cu", "gemm_reference", arch),
        KernelSpec::new("harness/gemm_reference.cu", "gemm_compare", arch),
    ]
}

/// Rows and columns whose crossings the float64 check recomputes.
const SAMPLED_LINES: usize = 8;

/// Device buffers kept from one problem to the next, grown when a problem needs more.
#[derive(Default)]
pub struct Buffers {
    slots: Vec<Option<DeviceBuffer>>,
}

impl Buffers {
    /// Slot `i`, at least `bytes` long.
    fn get(&mut self, i: usize, bytes: usize) -> Result<&DeviceBuffer> {
        if self.slots.len() <= i {
            self.slots.resize_with(i + 1, || None);
        }
        if self.slots[i].as_ref().is_none_or(|b| b.bytes() < bytes) {
            self.slots[i] = None;
            self.slots[i] = Some(DeviceBuffer::new(bytes.max(16))?);
        }
        Ok(self.slots[i].as_ref().unwrap())
    }
}

/// The seeds of A, B and C's old values, from the problem's seed.
fn seeds(seed: u64) -> (u64, u64, u64) {
    (seed, seed.wrapping_add(1), seed.wrapping_add(2))
}

/// Checks each of `kernels` on `p` with inputs from `seed`: one reference, then per kernel a
/// poisoned C (its old values where beta ≠ 0), the launch, the full comparison on the GPU and the
/// float64 sample. A kernel that refuses the problem gives a skip; one whose launch or run fails
/// gives a failed outcome with the error.
pub fn check_gemm(
    ctx: &Context,
    bufs: &mut Buffers,
    kernels: &[&dyn GemmKernel],
    p: &GemmProblem,
    seed: u64,
) -> Result<GemmChecks> {
    p.validate()?;
    let arch = ctx.arch();
    let [ref_spec, cmp_spec] = specs(&arch);
    let (reference, compare) = (ctx.function(&ref_spec)?, ctx.function(&cmp_spec)?);
    let (sa, sb, sc) = seeds(seed);
    let (ie, oe) = (p.input.size(), p.output.size());
    // Allocate all first: slots 0-5 are A, B, C, the reference, the sums and the counts.
    for (i, bytes) in [
        p.a_elems() * ie,
        p.b_elems() * ie,
        p.c_elems() * oe,
        p.m * p.n * 4,
        16,
        16,
    ]
    .into_iter()
    .enumerate()
    {
        bufs.get(i, bytes)?;
    }
    let buf = |i: usize| bufs.slots[i].as_ref().unwrap();
    fill(ctx, buf(0), p.input, (1, p.a_elems(), p.a_elems()), sa)?;
    fill(ctx, buf(1), p.input, (1, p.b_elems(), p.b_elems()), sb)?;
    let init_c = || -> Result<()> {
        buf(2).fill_bytes(0xFF, ctx)?;
        if p.beta != 0.0 {
            fill(ctx, buf(2), p.output, (p.m, p.n, p.ldc), sc)?;
        }
        Ok(())
    };
    init_c()?;
    let (a_sm, a_sk) = if p.layout.a_row_major() {
        (p.lda as i64, 1i64)
    } else {
        (1, p.lda as i64)
    };
    let (b_sk, b_sn) = if p.layout.b_row_major() {
        (p.ldb as i64, 1i64)
    } else {
        (1, p.ldb as i64)
    };
    {
        let (mut pa, mut pb, mut pc, mut pr) =
            (buf(0).ptr(), buf(1).ptr(), buf(2).ptr(), buf(3).ptr());
        let (mut m, mut n, mut k) = (p.m as i32, p.n as i32, p.k as i32);
        let (mut a_sm, mut a_sk, mut b_sk, mut b_sn, mut ldc) =
            (a_sm, a_sk, b_sk, b_sn, p.ldc as i64);
        let (mut alpha, mut beta) = (p.alpha, p.beta);
        let (mut idt, mut odt) = (p.input.code() as i32, p.output.code() as i32);
        let grid = (p.n.div_ceil(64) as u32, p.m.div_ceil(64) as u32, 1);
        // SAFETY: the argument list matches gemm_reference's signature in order and type; A, B
        // and C hold a_elems, b_elems and c_elems elements, the reference m * n floats.
        unsafe {
            reference.launch(
                ctx.stream,
                &LaunchConfig::simple(grid, 256),
                &mut [
                    &mut pa as *mut u64 as *mut _,
                    &mut pb as *mut u64 as *mut _,
                    &mut pc as *mut u64 as *mut _,
                    &mut pr as *mut u64 as *mut _,
                    &mut m as *mut i32 as *mut _,
                    &mut n as *mut i32 as *mut _,
                    &mut k as *mut i32 as *mut _,
                    &mut a_sm as *mut i64 as *mut _,
                    &mut a_sk as *mut i64 as *mut _,
                    &mut b_sk as *mut i64 as *mut _,
                    &mut b_sn as *mut i64 as *mut _,
                    &mut ldc as *mut i64 as *mut _,
                    &mut alpha as *mut f32 as *mut _,
                    &mut beta as *mut f32 as *mut _,
                    &mut idt as *mut i32 as *mut _,
                    &mut odt as *mut i32 as *mut _,
                ],
            )?;
        }
    }
    let sample = Sample::new(p, seed);
    let mut checks = GemmChecks::default();
    for (v, kernel) in kernels.iter().enumerate() {
        let blank = blank(*kernel, p, seed);
        if let Err(reason) = kernel.supports(p, &ctx.info) {
            checks.outcomes.push(blank.skip(reason));
            continue;
        }
        let run = || -> Result<Outcome> {
            if v > 0 {
                init_c()?;
            }
            let ops = GemmOperands {
                a: buf(0),
                b: buf(1),
                c: buf(2),
            };
            if let Some(reason) = refusal(kernel.launch(ctx, p, &ops))? {
                return Ok(blank.clone().skip(reason));
            }
            compare_on_gpu(ctx, &compare, p, buf(2), buf(3), buf(4), buf(5))?;
            ctx.synchronize_within(
                std::time::Duration::from_secs_f64(10.0 + p.flops() / 2e10),
                &format!("{} on {}", kernel.name(), p.label()),
            )?;
            judge(blank.clone(), p, buf(2), buf(4), buf(5), &sample)
        };
        match run() {
            Ok(o) => checks.outcomes.push(o),
            Err(e) => {
                let mut o = blank;
                o.message = e.to_string();
                checks.outcomes.push(o);
                // A hang or a CUDA error leaves the context unusable: nothing more runs on it.
                if matches!(e, Error::Hang { .. } | Error::Cuda { .. }) {
                    checks.fatal = Some(e);
                    break;
                }
            }
        }
    }
    Ok(checks)
}

/// The outcomes of one problem's checks, and the error that ended them early, if one did.
#[derive(Default)]
pub struct GemmChecks {
    pub outcomes: Vec<Outcome>,
    pub fatal: Option<Error>,
}

/// Enqueues the comparison of C with the reference into `sums` and `counts` (zeroed first).
fn compare_on_gpu(
    ctx: &Context,
    compare: &crate::device::Function,
    p: &GemmProblem,
    c: &DeviceBuffer,
    reference: &DeviceBuffer,
    sums: &DeviceBuffer,
    counts: &DeviceBuffer,
) -> Result<()> {
    sums.fill_bytes(0, ctx)?;
    counts.fill_bytes(0, ctx)?;
    let (mut pg, mut pr, mut ps, mut pn) = (c.ptr(), reference.ptr(), sums.ptr(), counts.ptr());
    let (mut n, mut ldc, mut ce) = (p.n as u64, p.ldc as u64, p.c_elems() as u64);
    let mut odt = p.output.code() as i32;
    let blocks = p
        .c_elems()
        .div_ceil(256)
        .min(ctx.info.sm_count as usize * 8) as u32;
    // SAFETY: gemm_compare's signature, in order; C holds c_elems elements, the reference m * n
    // floats, sums two doubles and counts two u64.
    unsafe {
        compare.launch(
            ctx.stream,
            &LaunchConfig::simple((blocks.max(1), 1, 1), 256),
            &mut [
                &mut pg as *mut u64 as *mut _,
                &mut pr as *mut u64 as *mut _,
                &mut n as *mut u64 as *mut _,
                &mut ldc as *mut u64 as *mut _,
                &mut ce as *mut u64 as *mut _,
                &mut odt as *mut i32 as *mut _,
                &mut ps as *mut u64 as *mut _,
                &mut pn as *mut u64 as *mut _,
            ],
        )
    }
}

/// The verdict from the comparison's sums and counts and the float64 sample.
fn judge(
    mut out: Outcome,
    p: &GemmProblem,
    c: &DeviceBuffer,
    sums: &DeviceBuffer,
    counts: &DeviceBuffer,
    sample: &Sample,
) -> Result<Outcome> {
    let sums: Vec<f64> = sums.download(2)?;
    let counts: Vec<u64> = counts.download(2)?;
    out.mismatches = counts[0] as usize;
    out.written_outside = counts[1] as usize;
    let full = rel_l2(sums[0], sums[1]);
    let sampled = sample.rel_error(p, c)?;
    out.rows_checked = p.m;
    out.rel_error = if full.is_nan() || sampled.is_nan() {
        f64::NAN
    } else {
        full.max(sampled)
    };
    (out.passed, out.message) = verdict(&[
        (out.mismatches > 0, &|| {
            format!(
                "{} output elements are NaN, infinite or were never written",
                out.mismatches
            )
        }),
        (out.written_outside > 0, &|| {
            format!(
                "{} elements outside C (in the ldc padding) were overwritten",
                out.written_outside
            )
        }),
        (!within(full, out.bound), &|| {
            format!(
                "relative error {full:.2e} against the fp32 GPU reference exceeds the {} bound {:.0e}",
                p.output, out.bound
            )
        }),
        (!within(sampled, out.bound), &|| {
            format!(
                "relative error {sampled:.2e} against float64 on sampled elements exceeds the {} bound {:.0e}",
                p.output, out.bound
            )
        }),
    ]);
    Ok(out)
}

/// The float64 check: rows and columns (edges, middle, a seeded spread) and the exact value of C
/// at each crossing, from the inputs regenerated on the CPU.
struct Sample {
    rows: Vec<usize>,
    cols: Vec<usize>,
    /// want[r][c] for rows[r], cols[c].
    want: Vec<Vec<f64>>,
}

impl Sample {
    fn new(p: &GemmProblem, seed: u64) -> Sample {
        let (sa, sb, sc) = seeds(seed);
        let pick = |len: usize, s: u64| {
            spread_rows(vec![0, len - 1, len / 2], len, SAMPLED_LINES, s, |r| r)
        };
        let rows = pick(p.m, seed ^ 0x5A5A);
        let cols = pick(p.n, seed ^ 0xA5A5);
        // Element (r, c) of a matrix stored row- or column-major with leading dimension `ld`.
        let at = |seed, row_major: bool, ld: usize, r: usize, c: usize| {
            let i = if row_major { r * ld + c } else { c * ld + r };
            counter_value(seed, i as u64)
        };
        let a_at = |m, k| at(sa, p.layout.a_row_major(), p.lda, m, k);
        let b_at = |k, n| at(sb, p.layout.b_row_major(), p.ldb, k, n);
        let want = rows
            .iter()
            .map(|&m| {
                let a_row: Vec<f64> = (0..p.k).map(|k| a_at(m, k)).collect();
                cols.iter()
                    .map(|&n| {
                        let acc: f64 = a_row.iter().enumerate().map(|(k, a)| a * b_at(k, n)).sum();
                        let old = if p.beta != 0.0 {
                            p.beta as f64 * counter_value(sc, (m * p.ldc + n) as u64)
                        } else {
                            0.0
                        };
                        p.alpha as f64 * acc + old
                    })
                    .collect()
            })
            .collect();
        Sample { rows, cols, want }
    }

    /// ‖got−want‖/‖want‖ over the sampled elements of `c` (NaN if any is not finite).
    fn rel_error(&self, p: &GemmProblem, c: &DeviceBuffer) -> Result<f64> {
        let (mut diff2, mut ref2) = (0.0, 0.0);
        for (r, &m) in self.rows.iter().enumerate() {
            let row = download_row(p, c, m)?;
            for (j, &n) in self.cols.iter().enumerate() {
                let (have, want) = (row[n], self.want[r][j]);
                diff2 += (have - want) * (have - want);
                ref2 += want * want;
            }
        }
        Ok(rel_l2(diff2, ref2))
    }
}

/// Row `m` of C (its first n elements), as f64.
fn download_row(p: &GemmProblem, c: &DeviceBuffer, m: usize) -> Result<Vec<f64>> {
    let es = p.output.size();
    let bytes: Vec<u8> = c.download_range(m * p.ldc * es, p.n * es)?;
    let data = crate::reference::data::HostData::from_bytes(p.output, &bytes);
    Ok(data.to_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::{DType, Layout};

    /// The float64 sample against a direct product of the regenerated matrices.
    #[test]
    fn the_sample_is_the_product_of_the_regenerated_inputs() {
        for layout in Layout::ALL {
            let mut p = GemmProblem::new(37, 29, 53, layout, DType::Bf16, DType::F32);
            p.lda += 3;
            p.ldb += 5;
            p.ldc += 2;
            p.alpha = -0.5;
            p.beta = 2.0;
            let s = Sample::new(&p, 77);
            let (sa, sb, sc) = seeds(77);
            let a = |m: usize, k: usize| {
                let (r, c) = if layout.a_row_major() { (m, k) } else { (k, m) };
                counter_value(sa, (r * p.lda + c) as u64)
            };
            let b = |k: usize, n: usize| {
                let (r, c) = if layout.b_row_major() { (k, n) } else { (n, k) };
                counter_value(sb, (r * p.ldb + c) as u64)
            };
            for (ri, &m) in s.rows.iter().enumerate() {
                for (ci, &n) in s.cols.iter().enumerate() {
                    let dot: f64 = (0..p.k).map(|k| a(m, k) * b(k, n)).sum();
                    let want = -0.5 * dot + 2.0 * counter_value(sc, (m * p.ldc + n) as u64);
                    assert!((s.want[ri][ci] - want).abs() < 1e-12);
                }
            }
            assert!(s.rows.contains(&0) && s.rows.contains(&36) && s.cols.contains(&28));
            assert_eq!(s.rows.len(), SAMPLED_LINES);
        }
    }

    #[test]
    fn the_reference_and_comparison_compile_for_sm_90a() {
        use crate::jit::{nvrtc, Jit};
        if nvrtc::version().is_err() {
            assert!(std::env::var_os("KILN_REQUIRE_NVRTC").is_none());
            return;
        }
        let jit = Jit::without_cache();
        for s in specs("sm_90a") {
            let c = jit.compile(&s).unwrap();
            assert!(!c.resources.spills(), "{}: {:?}", s.entry, c.resources);
        }
    }
}
