//! Verification and benchmark campaigns over many versions and shapes, each result handed to a
//! callback as it lands (so the CLI can show progress and the store can keep it at once).

use serde::Serialize;

use super::bench::{
    sample_interleaved, time_gemm, timing_of, BenchBuffers, BenchOptions, L2Flusher, Timing,
};
use super::verify::{fresh_seed, verify_gemm, CheckOutcome};
use crate::device::Context;
use crate::error::{Error, Result};
use crate::ops::gemm::{DType, GemmKernel, GemmProblem, Layout};

/// Verifies each of `kernels` on each of `problems`.
pub fn verify_all(
    ctx: &Context,
    kernels: &[&dyn GemmKernel],
    problems: &[GemmProblem],
    mut on_result: impl FnMut(&CheckOutcome),
) -> Result<Vec<CheckOutcome>> {
    let mut out = Vec::new();
    for k in kernels {
        for p in problems {
            let o = match verify_gemm(ctx, *k, p) {
                Ok(o) => o,
                // A launch fault poisons the context and a hang holds the GPU: report it as this
                // check's failure and stop.
                Err(e @ (Error::Cuda { .. } | Error::Hang { .. })) => {
                    let o = failed(*k, p, e.to_string());
                    on_result(&o);
                    out.push(o);
                    return Ok(out);
                }
                Err(e) => failed(*k, p, e.to_string()),
            };
            on_result(&o);
            out.push(o);
        }
    }
    Ok(out)
}

fn failed(k: &dyn GemmKernel, p: &GemmProblem, message: String) -> CheckOutcome {
    CheckOutcome {
        version: k.name().into(),
        problem: *p,
        passed: false,
        skipped: None,
        rel_error: f64::NAN,
        bound: super::verify::bound(p.output),
        nan_or_unwritten: 0,
        written_outside: 0,
        rows_checked: 0,
        seed: 0,
        message,
    }
}

/// One benchmarked problem: each version's timing and its ratio to the vendor's.
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    pub problem: GemmProblem,
    pub vendor: Option<Timing>,
    /// The algorithm the vendor's selection chose for the problem (cuBLAS: which heuristic
    /// result or gemmEx, with its tile), where the vendor was timed.
    pub vendor_algorithm: Option<String>,
    pub versions: Vec<(Timing, Option<f64>)>,
    pub skipped: Vec<(String, String)>,
}

/// Times each of `kernels` and the vendor on each problem, with the same inputs.
pub fn bench_all(
    ctx: &Context,
    kernels: &[&dyn GemmKernel],
    vendor: Option<&dyn GemmKernel>,
    problems: &[GemmProblem],
    opt: &BenchOptions,
    mut on_row: impl FnMut(&BenchRow),
) -> Result<Vec<BenchRow>> {
    let flusher = L2Flusher::new(ctx)?;
    let mut rows = Vec::new();
    for p in problems {
        p.validate()?;
        let bufs = BenchBuffers::random(p, fresh_seed())?;
        if opt.interleave {
            let row = bench_interleaved(ctx, kernels, vendor, p, &bufs, &flusher, opt)?;
            on_row(&row);
            rows.push(row);
            continue;
        }
        let vendor_t = match vendor {
            Some(v) if v.supports(p, &ctx.info).is_ok() => {
                Some(time_gemm(ctx, v, p, &bufs, &flusher, opt)?)
            }
            _ => None,
        };
        let mut row = BenchRow {
            problem: *p,
            vendor: vendor_t.clone(),
            vendor_algorithm: vendor_t
                .as_ref()
                .and_then(|_| crate::vendor::cublas::chosen_algorithm(p)),
            versions: Vec::new(),
            skipped: Vec::new(),
        };
        for k in kernels {
            if let Err(r) = k.supports(p, &ctx.info) {
                row.skipped.push((k.name().into(), r));
                continue;
            }
            match time_gemm(ctx, *k, p, &bufs, &flusher, opt) {
                Ok(t) => {
                    let ratio = vendor_t.as_ref().map(|v| v.median_ms / t.median_ms);
                    row.versions.push((t, ratio));
                }
                Err(Error::Unsupported { reason, .. }) => {
                    row.skipped.push((k.name().into(), reason))
                }
                Err(e) => return Err(e),
            }
        }
        on_row(&row);
        rows.push(row);
    }
    Ok(rows)
}

/// One problem of [`bench_all`] with the vendor and the versions timed in interleaved rounds
/// ([`sample_interleaved`]). A version that refuses the problem (in `supports`, or at launch with
/// `Unsupported`: its first launch is a probe) is skipped with its reason.
fn bench_interleaved(
    ctx: &Context,
    kernels: &[&dyn GemmKernel],
    vendor: Option<&dyn GemmKernel>,
    p: &GemmProblem,
    bufs: &BenchBuffers,
    flusher: &L2Flusher,
    opt: &BenchOptions,
) -> Result<BenchRow> {
    let ops = bufs.operands();
    let mut row = BenchRow {
        problem: *p,
        vendor: None,
        vendor_algorithm: None,
        versions: Vec::new(),
        skipped: Vec::new(),
    };
    // (kernel, is the vendor) for every one that runs the problem
    let mut timed: Vec<(&dyn GemmKernel, bool)> = Vec::new();
    let candidates = vendor
        .map(|v| (v, true))
        .into_iter()
        .chain(kernels.iter().map(|k| (*k, false)));
    for (k, is_vendor) in candidates {
        if let Err(r) = k.supports(p, &ctx.info) {
            if !is_vendor {
                row.skipped.push((k.name().into(), r));
            }
            continue;
        }
        match k.launch(ctx, p, &ops) {
            Ok(()) => timed.push((k, is_vendor)),
            Err(Error::Unsupported { reason, .. }) if !is_vendor => {
                row.skipped.push((k.name().into(), reason))
            }
            Err(e) => return Err(e),
        }
    }
    let mut closures: Vec<Box<dyn FnMut() -> Result<()> + '_>> = timed
        .iter()
        .map(|(k, _)| {
            let ops = &ops;
            Box::new(move || k.launch(ctx, p, ops)) as Box<dyn FnMut() -> Result<()>>
        })
        .collect();
    let mut launches: Vec<&mut dyn FnMut() -> Result<()>> =
        closures.iter_mut().map(|c| c.as_mut() as _).collect();
    let times = sample_interleaved(ctx, flusher, opt, &mut launches)?;
    let mut results: Vec<(Timing, bool)> = timed
        .iter()
        .zip(times)
        .map(|((k, is_vendor), t)| (timing_of(*k, p, t), *is_vendor))
        .collect();
    if let Some(i) = results.iter().position(|(_, v)| *v) {
        row.vendor = Some(results.remove(i).0);
        row.vendor_algorithm = crate::vendor::cublas::chosen_algorithm(p);
    }
    for (t, _) in results {
        let ratio = row.vendor.as_ref().map(|v| v.median_ms / t.median_ms);
        row.versions.push((t, ratio));
    }
    Ok(row)
}

/// The ladder shapes `kiln suite` times every version on.
pub fn ladder_problems() -> Vec<GemmProblem> {
    let mut v = Vec::new();
    for s in [4096, 8192] {
        v.push(GemmProblem::new(
            s,
            s,
            s,
            Layout::RC,
            DType::Bf16,
            DType::Bf16,
        ));
    }
    v.push(GemmProblem::new(
        4000,
        4000,
        4000,
        Layout::RC,
        DType::Bf16,
        DType::Bf16,
    ));
    for l in [Layout::CR, Layout::RR, Layout::CC] {
        v.push(GemmProblem::new(
            4096,
            4096,
            4096,
            l,
            DType::Bf16,
            DType::Bf16,
        ));
    }
    v.push(GemmProblem::new(
        4096,
        4096,
        4096,
        Layout::RC,
        DType::F16,
        DType::F32,
    ));
    v
}

/// The GEMM performance targets' shapes (issue 3): squares 512-16384, LLM projections with
/// M in {128, 512, 2048, 8192} and (N, K) in {(4096, 4096), (14336, 4096), (4096, 14336),
/// (128256, 4096)}, odd shapes 4000^3 and 4096x4096x4088; bf16 in and out, in `layouts`.
pub fn target_problems(layouts: &[Layout]) -> Vec<GemmProblem> {
    let mut shapes: Vec<(usize, usize, usize)> = [512, 1024, 2048, 4096, 8192, 16384]
        .iter()
        .map(|&s| (s, s, s))
        .collect();
    for m in [128, 512, 2048, 8192] {
        for (n, k) in [(4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096)] {
            shapes.push((m, n, k));
        }
    }
    shapes.extend([(4000, 4000, 4000), (4096, 4096, 4088)]);
    layouts
        .iter()
        .flat_map(|&l| {
            shapes
                .iter()
                .map(move |&(m, n, k)| GemmProblem::new(m, n, k, l, DType::Bf16, DType::Bf16))
        })
        .collect()
}

/// Ratios to the vendor of one version over benchmarked rows: (geometric mean, min, count).
pub fn ratio_summary(rows: &[BenchRow], version: &str) -> Option<(f64, f64, usize)> {
    let ratios: Vec<f64> = rows
        .iter()
        .filter_map(|r| {
            r.versions
                .iter()
                .find(|(t, _)| t.version == version)
                .and_then(|(_, ratio)| *ratio)
        })
        .collect();
    if ratios.is_empty() {
        return None;
    }
    Some((
        geomean(&ratios),
        ratios.iter().cloned().fold(f64::INFINITY, f64::min),
        ratios.len(),
    ))
}

/// Geometric mean of positive values.
pub fn geomean(xs: &[f64]) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    (xs.iter().map(|x| x.ln()).sum::<f64>() / xs.len() as f64).exp()
}
