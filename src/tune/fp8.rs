//! Tuning the FP8 GEMM for one problem: its config space (every compiled tile, with and without
//! the pipelined promotion and the scales through shared memory, times split-K slices), each
//! candidate verified against the float64 reference and timed beside cuBLASLt's FP8 in the same
//! run; the fastest verified wins.
//!
//! In process, not in the watched workers of [`super::run`]: the space is a few dozen configs of one
//! kernel that `kiln fp8 verify` already runs, so a hang is not expected of a candidate; a
//! refusal or a wrong result is still a recorded outcome, never the end of the run.

use serde::Serialize;

use crate::device::Context;
use crate::device::DeviceInfo;
use crate::error::Result;
use crate::formats::ScaleRecipe;
use crate::harness::bench::BenchOptions;
use crate::harness::fp8::{verify_gemm, Data, GemmCase};
use crate::harness::fp8_bench::bench_fp8;
use crate::ops::fp8::gemm::{configs, ranked, BK, MAX_SPLITS};
use crate::ops::fp8::{Fp8Config, Fp8Problem};

/// Split-K slice counts tried: powers of two up to [`MAX_SPLITS`], each slice two K blocks or more.
pub fn split_choices(p: &Fp8Problem) -> Vec<u32> {
    let kblocks = p.k.div_ceil(BK as usize) as u32;
    (0..)
        .map(|i| 1u32 << i)
        .take_while(|&s| s <= MAX_SPLITS)
        .filter(|&s| s == 1 || 2 * s <= kblocks)
        .collect()
}

/// The FP8 config space of `p`: every compiled config (tile, pipelined promotion, scale path)
/// with every slice count of [`split_choices`] and the one the bytes rule's cost model prefers
/// for it on an H100 (e.g. 7 slices for the 64-row tile at 64x2112x7168).
pub fn space(p: &Fp8Problem) -> Vec<Fp8Config> {
    let splits = split_choices(p);
    let best = ranked(p, &DeviceInfo::h100_sxm());
    configs(p.a, p.b, p.scale, p.promote)
        .iter()
        .flat_map(|&c| {
            let mut s = splits.clone();
            if let Some(r) = best.iter().find(|r| r.config.same_kernel(&c)) {
                if !s.contains(&r.config.splits) {
                    s.push(r.config.splits);
                }
            }
            s.into_iter().map(move |s| Fp8Config { splits: s, ..c })
        })
        .collect()
}

/// How one candidate ended.
#[derive(Debug, Clone, Serialize)]
pub struct Fp8Candidate {
    pub config: Fp8Config,
    /// Verified against the float64 reference (false: `message` says why).
    pub verified: bool,
    pub message: String,
    pub median_ms: Option<f64>,
    pub tflops: Option<f64>,
    pub speedup_vs_cublaslt: Option<f64>,
}

/// Verifies and times every config of [`space`] on `p` (`on_candidate` sees each as it ends);
/// returns them fastest first, the unverified last.
pub fn tune_fp8(
    ctx: &Context,
    p: &Fp8Problem,
    opt: &BenchOptions,
    mut on_candidate: impl FnMut(&Fp8Candidate),
) -> Result<Vec<Fp8Candidate>> {
    p.validate()?;
    let mut out = Vec::new();
    for config in space(p) {
        let case = GemmCase {
            p: *p,
            cfg: Some(config),
            recipe: ScaleRecipe::Fp32,
            data: Data::Signed,
        };
        let checked = verify_gemm(ctx, &case, false)?;
        let o = &checked[0];
        let mut c = Fp8Candidate {
            config,
            verified: o.passed && o.skipped.is_none(),
            message: o.skipped.clone().unwrap_or_else(|| o.message.clone()),
            median_ms: None,
            tflops: None,
            speedup_vs_cublaslt: None,
        };
        if c.verified {
            let timed = bench_fp8(ctx, p, &[config], true, opt)?;
            if let Some(t) = timed.iter().find(|t| t.has("config")) {
                c.median_ms = t.num("median_ms");
                c.tflops = t.num("tflops");
                c.speedup_vs_cublaslt = t.num("speedup_vs_cublaslt");
            }
        }
        on_candidate(&c);
        out.push(c);
    }
    out.sort_by(|a, b| {
        let key = |c: &Fp8Candidate| c.median_ms.unwrap_or(f64::INFINITY);
        key(a).total_cmp(&key(b))
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::fp8::ScaleMode;
    use crate::ops::gemm::DType;

    #[test]
    fn the_space_is_every_compiled_config_times_the_slices() {
        let p = Fp8Problem::new(64, 2112, 7168, DType::Bf16, ScaleMode::Block);
        let s = space(&p);
        assert_eq!(split_choices(&p), vec![1, 2, 4, 8]);
        let n = configs(p.a, p.b, p.scale, true).len();
        assert!(s.len() >= 4 * n && s.len() <= 5 * n, "{}", s.len());
        assert!(s.iter().any(|c| c.pipe) && s.iter().any(|c| c.bn == 160));
        // the 64-row tile with the cost model's slice count
        assert!(s
            .iter()
            .any(|c| c.bm == 64 && c.splits > 1 && !c.splits.is_power_of_two()));
        // K = 256 has two blocks: one slice only
        let short = Fp8Problem::new(64, 256, 256, DType::Bf16, ScaleMode::Tensor);
        assert_eq!(split_choices(&short), vec![1]);
        // unpromoted tensor scales: the fast configs
        let fast = Fp8Problem {
            promote: false,
            ..Fp8Problem::new(8192, 8192, 8192, DType::Bf16, ScaleMode::Tensor)
        };
        assert!(space(&fast).iter().any(|c| c.bn == 256));
        assert!(space(&fast).iter().all(|c| !c.pipe));
    }
}
