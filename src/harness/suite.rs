//! Verification and benchmark campaigns over many versions and shapes, each result handed to a
//! callback as it lands (so the CLI can show progress and the store can keep it at once).

use serde::Serialize;

use super::bench::{
    sample_interleaved, time_gemm, timing_of, BenchBuffers, BenchOptions, L2Flusher, Timing,
};
use super::bench_versions::BenchVersions;
use super::check::CheckItem;
use super::memory;
use super::outcome::Outcome;
use super::verify::{blank, fresh_seed, verify_gemm};
use crate::device::{Context, DeviceInfo};
use crate::error::{Error, Result};
use crate::ops::gemm::{DType, GemmKernel, GemmProblem, Layout};
use crate::ops::tuned::TunedTable;

/// The variants `kiln suite` compiles: for each of `kernels`, those its dispatch picks on `dev`
/// with the tuned configs of `tuned` ([`GemmKernel::specs_for`]) for each of `problems` it
/// supports, each once, in order; then the bench's L2 flush kernel, which every timed launch
/// waits for, and the fill that makes its inputs. A fraction of what `kiln check` compiles
/// (every variant of every version).
pub fn suite_items(
    kernels: &[&dyn GemmKernel],
    problems: &[GemmProblem],
    dev: &DeviceInfo,
    tuned: &TunedTable,
) -> Vec<CheckItem> {
    BenchVersions::Listed(kernels).compile_items(problems, dev, tuned)
}

/// Verifies each of `kernels` on each of `problems`.
pub fn verify_all(
    ctx: &Context,
    kernels: &[&dyn GemmKernel],
    problems: &[GemmProblem],
    mut on_result: impl FnMut(&Outcome),
) -> Result<Vec<Outcome>> {
    let mut out = Vec::new();
    for k in kernels {
        for p in problems {
            let o = match verify_gemm(ctx, *k, p) {
                Ok(o) => o,
                // A problem that does not fit is no verdict on the kernel: say so and stop.
                Err(e @ Error::OutOfMemory { .. }) => return Err(e),
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

fn failed(k: &dyn GemmKernel, p: &GemmProblem, message: String) -> Outcome {
    Outcome {
        message,
        ..blank(k, p, 0)
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
    /// Which pass over the problem list this row came from ([`bench_passes`]; 0 for one pass).
    pub pass: usize,
    /// The problem's place in that pass's order, from 0.
    pub position: usize,
}

/// Times each of `kernels` and the vendor on each problem, with the same inputs.
pub fn bench_all(
    ctx: &Context,
    kernels: &[&dyn GemmKernel],
    vendor: Option<&dyn GemmKernel>,
    problems: &[GemmProblem],
    opt: &BenchOptions,
    on_row: impl FnMut(&BenchRow),
) -> Result<Vec<BenchRow>> {
    let versions = BenchVersions::Listed(kernels);
    bench_pass(ctx, versions, vendor, problems, opt, 0, on_row)
}

/// [`bench_all`] as pass `pass` of [`bench_passes`]: each row carries the pass and its place.
fn bench_pass(
    ctx: &Context,
    versions: BenchVersions,
    vendor: Option<&dyn GemmKernel>,
    problems: &[GemmProblem],
    opt: &BenchOptions,
    pass: usize,
    mut on_row: impl FnMut(&BenchRow),
) -> Result<Vec<BenchRow>> {
    for p in problems {
        p.validate()?;
    }
    // The largest problem must fit before anything is allocated or timed.
    let need = memory::most(problems.iter().map(|p| memory::plan_bench(p, &ctx.info)));
    if let Some(p) = problems.iter().max_by_key(|p| p.device_bytes()) {
        need.ensure(ctx, &memory::what(p))?;
    }
    let flusher = L2Flusher::new(ctx)?;
    let mut rows = Vec::new();
    for (position, p) in problems.iter().enumerate() {
        p.validate()?;
        let bufs = BenchBuffers::random(ctx, p, fresh_seed())?;
        let (kernels, skipped) = versions.for_problem(p, &ctx.info);
        if opt.interleave {
            let mut row = bench_interleaved(ctx, &kernels, vendor, p, &bufs, &flusher, opt)?;
            row.skipped.splice(0..0, skipped);
            row.pass = pass;
            row.position = position;
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
            skipped,
            pass,
            position,
        };
        for k in &kernels {
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
        pass: 0,
        position: 0,
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
        .map(|((k, is_vendor), (t, mut host))| {
            let mut timing = timing_of(*k, p, t);
            timing.host_us = Some(super::bench::stats(&mut host).0);
            (timing, *is_vendor)
        })
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

/// Times `versions` and the vendor on `problems` `passes` times ([`bench_all`] each): the first
/// pass in the given order, every later one in its own seeded shuffle ([`pass_order`]). A shape
/// timed right after the heaviest ones can read a few percent slow from where it falls in the run
/// alone (ledger #57, #89); its median over passes in different places tells that apart from a
/// real loss.
#[allow(clippy::too_many_arguments)]
pub fn bench_passes(
    ctx: &Context,
    versions: BenchVersions,
    vendor: Option<&dyn GemmKernel>,
    problems: &[GemmProblem],
    opt: &BenchOptions,
    passes: usize,
    seed: u64,
    mut on_row: impl FnMut(&BenchRow),
) -> Result<Vec<BenchRow>> {
    let mut rows = Vec::new();
    for pass in 0..passes.max(1) {
        let order = pass_order(problems.len(), pass, seed);
        let list: Vec<GemmProblem> = order.iter().map(|&i| problems[i]).collect();
        rows.extend(bench_pass(
            ctx,
            versions,
            vendor,
            &list,
            opt,
            pass,
            &mut on_row,
        )?);
    }
    Ok(rows)
}

/// The order of pass `pass` over `n` problems: as listed for pass 0, else a shuffle that
/// depends only on (`seed`, `pass`), so a run can be repeated in the same orders.
pub fn pass_order(n: usize, pass: usize, seed: u64) -> Vec<usize> {
    use rand::{seq::SliceRandom, SeedableRng};
    let mut order: Vec<usize> = (0..n).collect();
    if pass > 0 {
        let mixed = seed ^ (pass as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        order.shuffle(&mut rand::rngs::SmallRng::seed_from_u64(mixed));
    }
    order
}

/// One problem's ratios to the vendor for one version over the passes of [`bench_passes`].
#[derive(Debug, Clone, Serialize)]
pub struct PassRatios {
    pub problem: GemmProblem,
    /// (pass, position in that pass's order, ratio), in pass order.
    pub passes: Vec<(usize, usize, f64)>,
    pub median: f64,
}

impl PassRatios {
    /// The pass with the lowest ratio: (pass, position, ratio).
    pub fn lowest(&self) -> (usize, usize, f64) {
        self.passes
            .iter()
            .cloned()
            .min_by(|a, b| a.2.total_cmp(&b.2))
            .expect("a PassRatios has at least one pass")
    }
}

/// Each problem's ratios for `version` over the rows of one or more passes, in the order the
/// problems first appear; the median of an even count is the mean of the middle two.
pub fn ratios_over_passes(rows: &[BenchRow], version: &str) -> Vec<PassRatios> {
    let mut out: Vec<PassRatios> = Vec::new();
    for r in rows {
        let Some(ratio) = r
            .versions
            .iter()
            .find(|(t, _)| t.version == version)
            .and_then(|(_, ratio)| *ratio)
        else {
            continue;
        };
        let this = (r.pass, r.position, ratio);
        match out.iter_mut().find(|o| o.problem == r.problem) {
            Some(o) => o.passes.push(this),
            None => out.push(PassRatios {
                problem: r.problem,
                passes: vec![this],
                median: f64::NAN,
            }),
        }
    }
    for o in &mut out {
        let mut v: Vec<f64> = o.passes.iter().map(|p| p.2).collect();
        o.median = super::bench::stats(&mut v).0;
    }
    out
}

/// Ratios to the vendor of one version over benchmarked rows: (geometric mean, min, count) over
/// the problems, each problem's ratio its median over the passes that timed it.
pub fn ratio_summary(rows: &[BenchRow], version: &str) -> Option<(f64, f64, usize)> {
    summary_of(&ratios_over_passes(rows, version))
}

/// [`ratio_summary`] of ratios already gathered by [`ratios_over_passes`].
pub fn summary_of(per_problem: &[PassRatios]) -> Option<(f64, f64, usize)> {
    let ratios: Vec<f64> = per_problem.iter().map(|r| r.median).collect();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn suite_problems() -> Vec<GemmProblem> {
        use crate::harness::shapes::{gemm_suite, Suite};
        let mut v = gemm_suite(Suite::Full);
        v.extend(gemm_suite(Suite::Quick));
        v.extend(ladder_problems());
        v
    }

    #[test]
    fn the_suite_compiles_a_part_of_what_check_compiles_and_nothing_else() {
        use crate::ops::registry::Registry;
        let registry = Registry::default();
        let ks: Vec<&dyn GemmKernel> = registry.gemm().iter().map(|k| k.as_ref()).collect();
        let dev = DeviceInfo::h100_sxm();
        let all: std::collections::HashSet<_> =
            crate::harness::check::check_items(&registry, "sm_90a", None)
                .into_iter()
                .map(|(_, _, spec)| spec)
                .collect();
        let items = suite_items(&ks, &suite_problems(), &dev, &TunedTable::empty());
        let specs: std::collections::HashSet<_> = items.iter().map(|i| &i.2).collect();
        assert_eq!(specs.len(), items.len(), "each variant once");
        for (_, version, spec) in &items {
            assert!(
                all.contains(spec),
                "{version}: {} is not among `kiln check`'s variants",
                spec.label()
            );
        }
        // (a third: the pruned registry of 1,186 variants made the full suite's 297 just over a
        // quarter)
        assert!(
            items.len() * 3 < all.len(),
            "{} of {} variants",
            items.len(),
            all.len()
        );
        // Every GEMM version of the ladder has its variants, and the bench's flush kernel is there.
        for k in &ks {
            assert!(
                k.is_vendor() || items.iter().any(|i| i.1 == k.name()),
                "{} compiles nothing",
                k.name()
            );
        }
        // and the fill that makes the bench's inputs on the GPU
        let last: Vec<&str> = items.iter().rev().take(2).map(|i| i.1).collect();
        assert_eq!(last, ["counter_fill", "l2_read_flush"]);
    }

    #[test]
    fn wgmma_tma_ws_launch_specs_follow_its_plan() {
        use crate::ops::gemm::wgmma_tma_ws::{launch_specs, plan};
        use crate::overrides::GemmOverrides;
        let define = |spec: &crate::jit::KernelSpec, k: &str| -> Option<u32> {
            spec.defines
                .iter()
                .find(|(n, _)| n == k)
                .and_then(|(_, v)| v.parse().ok())
        };
        let env = GemmOverrides::default();
        let mut problems = suite_problems();
        problems.extend(target_problems(&Layout::ALL));
        for p in &problems {
            let pl = plan(p, 132, None, &env);
            let specs = launch_specs("sm_90a", p, 132, None, &env);
            let (gemm, copies) = specs.split_last().expect("the GEMM's variant");
            let what = format!("{}: {pl:?}", p.label());
            assert_eq!(gemm.stem().ends_with("pingpong"), pl.pingpong, "{what}");
            assert_eq!(define(gemm, "KILN_BM"), Some(pl.bm), "{what}");
            assert_eq!(define(gemm, "KILN_BN"), Some(pl.bn), "{what}");
            assert_eq!(define(gemm, "KILN_STAGES"), Some(pl.stages), "{what}");
            let epi = define(gemm, "KILN_EPI").unwrap();
            assert_eq!(epi != 0, pl.tma_epilogue, "{what}");
            assert_eq!(epi == 2, pl.c_loaded, "{what}");
            if !pl.pingpong {
                assert_eq!(define(gemm, "KILN_CLUSTER"), Some(pl.cluster), "{what}");
                assert_eq!(
                    define(gemm, "KILN_SPLITK"),
                    Some(pl.split_code as u32),
                    "{what}"
                );
            }
            let stems: std::collections::BTreeSet<&str> = copies.iter().map(|s| s.stem()).collect();
            let said: std::collections::BTreeSet<&str> = ["pack_rows", "transpose_rows"]
                .into_iter()
                .filter(|k| pl.copies.iter().any(|c| c.contains(k)))
                .collect();
            assert_eq!(stems, said, "{what}");
        }
    }

    #[test]
    fn the_first_pass_keeps_the_order_and_later_ones_shuffle_it_reproducibly() {
        let n = 96;
        let ident: Vec<usize> = (0..n).collect();
        assert_eq!(pass_order(n, 0, 7), ident);
        for pass in 1..4 {
            let o = pass_order(n, pass, 7);
            let mut sorted = o.clone();
            sorted.sort_unstable();
            assert_eq!(sorted, ident, "pass {pass} is a permutation");
            assert_ne!(o, ident, "pass {pass} is shuffled");
            assert_eq!(o, pass_order(n, pass, 7), "the same seed, the same order");
            assert_ne!(o, pass_order(n, pass, 8), "another seed, another order");
        }
        assert_ne!(pass_order(n, 1, 7), pass_order(n, 2, 7));
        assert!(pass_order(0, 3, 1).is_empty());
    }

    fn row(p: GemmProblem, pass: usize, position: usize, ratio: Option<f64>) -> BenchRow {
        let t = Timing {
            version: "v".into(),
            problem: p,
            median_ms: 1.0,
            min_ms: 1.0,
            max_ms: 1.0,
            reps: 1,
            tflops: 1.0,
            gbps: 1.0,
            host_us: None,
        };
        BenchRow {
            problem: p,
            vendor: None,
            vendor_algorithm: None,
            versions: vec![(t, ratio)],
            skipped: Vec::new(),
            pass,
            position,
        }
    }

    #[test]
    fn each_problem_is_summarised_by_its_median_over_passes() {
        let a = GemmProblem::new(512, 512, 512, Layout::RC, DType::Bf16, DType::Bf16);
        let b = GemmProblem::new(512, 512, 512, Layout::CR, DType::Bf16, DType::Bf16);
        let rows = vec![
            row(a, 0, 0, Some(1.02)),
            row(b, 0, 1, Some(0.87)), // the slow place in the first pass
            row(b, 1, 0, Some(1.03)),
            row(a, 1, 1, Some(1.00)),
            row(a, 2, 1, Some(1.04)),
            row(b, 2, 0, Some(1.01)),
        ];
        let r = ratios_over_passes(&rows, "v");
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].problem, a);
        assert!((r[0].median - 1.02).abs() < 1e-12);
        assert!((r[1].median - 1.01).abs() < 1e-12);
        assert_eq!(r[1].lowest(), (0, 1, 0.87));
        let (g, min, n) = ratio_summary(&rows, "v").unwrap();
        assert_eq!(n, 2);
        assert!(
            (min - 1.01).abs() < 1e-12,
            "the lowest median, not the lowest pass"
        );
        assert!((g - (1.02f64 * 1.01).sqrt()).abs() < 1e-12);
        // One pass: each ratio is its own median, as before passes existed.
        let (_, min1, n1) = ratio_summary(&rows[..2], "v").unwrap();
        assert_eq!((n1, min1), (2, 0.87));
        // A version that was never timed, or had no vendor to compare with, has no summary.
        assert!(ratio_summary(&rows, "other").is_none());
        assert!(ratios_over_passes(&[row(a, 0, 0, None)], "v").is_empty());
    }
}
