//! The registry: every op's versions, and the choice of one for a problem (explicit request,
//! then the config file, then the fastest version that supports the problem).

use crate::device::DeviceInfo;
use crate::error::{Error, Result};
use crate::ops::attention::{self, AttentionKernel, AttentionProblem};
use crate::ops::attention_backward::bwd_fa3_d256::D256;
use crate::ops::attention_backward::{self, AttentionBackwardKernel, BackwardProblem};
use crate::ops::gemm::{self, GemmKernel, GemmProblem};
use crate::ops::moe::{self, MoeKernel};
use crate::ops::tuned::TunedTable;

/// The ops kiln knows.
pub const OPS: &[&str] = &["gemm"];

/// The most variants `kiln check` may compile (every variant of every version, for `sm_90a`; a
/// test holds the registry to it). CI compiles all of them once per test run on a 2-core machine,
/// at about half a second of wall time each (1,762 variants took 14 minutes of both cores; 1,186
/// and the rest of the test command 10 minutes on 2026-11-27). Raised from 1,200 to 1,500 on
/// 2026-11-28 for packed attention, decode, the backward and the 4-bit kernels: about 12 minutes
/// of compile gate. Raised to 1,520 on 2026-11-29 for four winners that landed together (the
/// backward's lookahead, the 4-bit GEMV's X ring at M 2-4, swap-AB, the FP8 256-wide tile; 1,511
/// variants, ~6 s more of a CI run that took 16 minutes). Raised to 1,525 on 2026-11-29 for the
/// backward's deterministic writer (`bwd_fa3_ordered_dq`: 4 kernels; `bwd_fa3_m128`'s unused walk
/// left the count, 1,521 variants). A version that needs more variants must
/// drop some it no longer picks (the FP8 128ptmh and 256otmh lost: next), or this budget must be
/// raised knowingly. The first WGMMA backward at d256 (`bwd_fa3_d256`: bf16 and f16, and the two
/// passes it shares) came in under the same raise; with the GEMM's small-K kernel (one variant)
/// the three landed together count 1,526: raised to that. Raised on 2026-11-29 to 1,544: 2 for the
/// d64 backward's dQ split by query rows (`bwd_fa3_m128_rows`: bf16 and f16, not yet measured),
/// 8 for `bwd_fa3_d256_tma` (d256's dQ staged and added by TMA reduce) and `bwd_fa3_d256_pair`
/// (the same in clusters of two sharing the loads; 4 variants each as counted: bf16 and f16, and
/// the two passes, which every backward version lists and the cache compiles once), kept beside
/// the atomics until the device says which is fastest (the versions that lose go then), 4 for
/// the backward's sliding window (the `KILN_BWD_WINDOW` variants of `bwd_fa3_lookahead`,
/// d64/d128 x bf16/f16: what a windowed problem dispatches to) and 4 for its packed batches
/// (the `KILN_BWD_VARLEN` variants, the same grid). Raised on 2026-11-29 to 1,550: 2 for
/// `bwd_fa3_m128_fma` (d64's row split with dSᵀ in packed pairs, a share of the exponentials on
/// the FMA pipe by a knob: bf16 and f16) and 4 for the deterministic writer that bumps its
/// counters eagerly (`bwd_fa3_ordered_eager`: d64/d128 x bf16/f16), each kept beside the version
/// it replaced as the default until the next change drops the loser. Raised on 2026-11-30 to
/// 1,551: the afternoon's seven branches together came to one over (the d256 deterministic
/// default's 2, W4A8 `wide`'s 2 and the GEMV's two-tile PDL form against the four FP8 variants
/// dropped). Raised on 2026-12-01 to 1,559 for the 4-bit experts' default `KILN_FP4_TILE=count-fit`
/// (ledger F181, F200): the grouped GEMM's 160- and 128-token tiles and its 256- and 128-token
/// tiles cut in K (the 128-token cut is what it runs at one expert of 300 rows, N 2048), NVFP4
/// and MXFP4.
/// The dense FP8 kernels are not counted here (`kiln fp8 check` compiles and counts them).
pub const VARIANT_BUDGET: usize = 1559;

pub struct Registry {
    gemm: Vec<Box<dyn GemmKernel>>,
    attention: Vec<Box<dyn AttentionKernel>>,
    attention_backward: Vec<Box<dyn AttentionBackwardKernel>>,
    moe: Vec<Box<dyn MoeKernel>>,
}

impl Default for Registry {
    fn default() -> Self {
        let mut gemm: Vec<Box<dyn GemmKernel>> = vec![
            Box::new(gemm::simt_naive::SimtNaive),
            Box::new(gemm::simt_tiled::SimtTiled),
            Box::new(gemm::wgmma_cp_async::WgmmaCpAsync),
            Box::new(gemm::wgmma_tma::WgmmaTma),
            Box::new(gemm::wgmma_tma_ws::WgmmaTmaWs),
            Box::new(gemm::mma_sync::MmaSync),
            Box::new(crate::vendor::cublas::Cublas),
        ];
        if gemm::planted::enabled() {
            // Test-only kernels (a hang and an out-of-bounds write) for the tuner's GPU evidence.
            gemm.push(Box::new(gemm::planted::Planted));
        }
        gemm.sort_by_key(|k| k.rung());
        let mut attention: Vec<Box<dyn AttentionKernel>> = vec![
            Box::new(attention::composed::Composed),
            Box::new(attention::fa2_mma_sync::Fa2MmaSync),
            Box::new(attention::fa3_wgmma::Fa3Wgmma),
        ];
        attention.sort_by_key(|k| k.rung());
        let mut attention_backward: Vec<Box<dyn AttentionBackwardKernel>> = vec![
            Box::new(attention_backward::bwd_fa2_mma_sync::BwdFa2MmaSync),
            Box::new(attention_backward::bwd_fa3_wgmma::BwdFa3Wgmma),
            Box::new(attention_backward::bwd_fa3_bulk_dq::BwdFa3BulkDq),
            Box::new(attention_backward::bwd_fa3_tma_dq::BwdFa3TmaDq),
            Box::new(attention_backward::bwd_fa3_lookahead::BwdFa3Lookahead),
            Box::new(attention_backward::bwd_fa3_m128::BwdFa3M128),
            Box::new(attention_backward::bwd_fa3_m128_rows::BwdFa3M128Rows),
            Box::new(attention_backward::bwd_fa3_m128_fma::BwdFa3M128Fma),
            Box::new(attention_backward::bwd_fa3_tail::BwdFa3Tail),
            Box::new(attention_backward::bwd_fa3_dq_late::BwdFa3DqLate),
            Box::new(attention_backward::bwd_fa3_d256::BwdFa3D256(D256::Atomics)),
            Box::new(attention_backward::bwd_fa3_d256::BwdFa3D256(D256::Staged)),
            Box::new(attention_backward::bwd_fa3_d256::BwdFa3D256(D256::Pair)),
            Box::new(attention_backward::bwd_fa3_d256_lpt::BwdFa3D256Lpt),
            Box::new(attention_backward::bwd_fa3_d256_persist::BwdFa3D256Persist),
            Box::new(attention_backward::bwd_fa3_ordered_eager::BwdFa3OrderedEager),
            Box::new(attention_backward::bwd_fa3_ordered_w2::BwdFa3OrderedW2),
        ];
        // the d256 ordered writers: w2 (the deterministic default at d256), its spread launch and
        // the rotated walk's diagnostic
        attention_backward.extend(
            attention_backward::bwd_fa3_d256_ordered::BwdFa3D256Ordered::ALL
                .map(|v| Box::new(v) as Box<dyn AttentionBackwardKernel>),
        );
        let moe: Vec<Box<dyn MoeKernel>> = vec![
            Box::new(moe::grouped_gemm::GroupedGemm),
            Box::new(moe::grouped_swapab::GroupedSwapAb),
            Box::new(moe::swiglu_dual::SwiGluDual),
        ];
        Registry {
            gemm,
            attention,
            attention_backward,
            moe,
        }
    }
}

impl Registry {
    /// GEMM versions, slowest rung first.
    pub fn gemm(&self) -> &[Box<dyn GemmKernel>] {
        &self.gemm
    }

    /// MoE versions: the grouped GEMM (also the down projection) and the fused SwiGLU.
    pub fn moe(&self) -> &[Box<dyn MoeKernel>] {
        &self.moe
    }

    /// The MoE version named `name`.
    pub fn moe_version(&self, name: &str) -> Result<&dyn MoeKernel> {
        find_version(&self.moe, name, "moe version", |k| k.name())
    }

    /// Attention versions, slowest rung first.
    pub fn attention(&self) -> &[Box<dyn AttentionKernel>] {
        &self.attention
    }

    pub fn attention_version(&self, name: &str) -> Result<&dyn AttentionKernel> {
        find_version(&self.attention, name, "attention version", |k| k.name())
    }

    /// The attention version to run `p` with: `requested` if given (refusing clearly if it
    /// cannot), else the highest rung that supports it.
    pub fn select_attention(
        &self,
        p: &AttentionProblem,
        dev: &DeviceInfo,
        requested: Option<&str>,
    ) -> Result<&dyn AttentionKernel> {
        if let Some(name) = requested {
            let k = self.attention_version(name)?;
            return k
                .supports(p, dev)
                .map(|_| k)
                .map_err(|reason| Error::Unsupported {
                    kernel: name.into(),
                    reason,
                });
        }
        let mut reasons = Vec::new();
        for k in self.attention.iter().rev() {
            match k.supports(p, dev) {
                Ok(()) => return Ok(k.as_ref()),
                Err(r) => reasons.push(format!("{}: {r}", k.name())),
            }
        }
        Err(Error::Unsupported {
            kernel: "every attention version".into(),
            reason: reasons.join("; "),
        })
    }

    /// Attention backward versions, slowest rung first.
    pub fn attention_backward(&self) -> &[Box<dyn AttentionBackwardKernel>] {
        &self.attention_backward
    }

    pub fn attention_backward_version(&self, name: &str) -> Result<&dyn AttentionBackwardKernel> {
        find_version(
            &self.attention_backward,
            name,
            "attention backward version",
            |k| k.name(),
        )
    }

    /// The backward version to run `p` with: `requested` if given (refusing clearly if it
    /// cannot), else the highest rung that supports it among those chosen by default.
    pub fn select_attention_backward(
        &self,
        p: &BackwardProblem,
        dev: &DeviceInfo,
        requested: Option<&str>,
    ) -> Result<&dyn AttentionBackwardKernel> {
        let candidates: Vec<&dyn AttentionBackwardKernel> = match requested {
            Some(name) => vec![self.attention_backward_version(name)?],
            None => self
                .attention_backward
                .iter()
                .rev()
                .filter(|k| k.by_default_for(p))
                .map(|k| k.as_ref())
                .collect(),
        };
        let mut reasons = Vec::new();
        for k in candidates {
            match k.supports(p, dev) {
                Ok(()) => return Ok(k),
                Err(r) => reasons.push(format!("{}: {r}", k.name())),
            }
        }
        Err(Error::Unsupported {
            kernel: requested
                .unwrap_or("every attention backward version")
                .into(),
            reason: reasons.join("; "),
        })
    }

    /// [`Registry::select_attention_backward`] where `tuned` may say otherwise: with no version
    /// requested, when the pick has a tuned entry for `p`'s class and another version that runs
    /// `p` measured faster in its own tuning, that one runs (as [`Registry::select_gemm`]: an
    /// untuned pick is never demoted).
    pub fn select_attention_backward_tuned(
        &self,
        p: &BackwardProblem,
        dev: &DeviceInfo,
        tuned: &TunedTable,
        requested: Option<&str>,
    ) -> Result<&dyn AttentionBackwardKernel> {
        let top = self.select_attention_backward(p, dev, requested)?;
        if requested.is_some() || tuned.is_empty() {
            return Ok(top);
        }
        let tflops =
            |k: &dyn AttentionBackwardKernel| tuned.attention_backward_tflops(dev, k.name(), p);
        let Some(top_tflops) = tflops(top) else {
            return Ok(top);
        };
        let faster = self
            .attention_backward
            .iter()
            .map(|k| k.as_ref())
            .filter_map(|k| tflops(k).filter(|&t| t > top_tflops).map(|t| (k, t)))
            .filter(|(k, _)| k.supports(p, dev).is_ok())
            .max_by(|a, b| a.1.total_cmp(&b.1));
        Ok(faster.map_or(top, |(k, _)| k))
    }

    /// Checks that `op` names a known op.
    pub fn check_op(op: &str) -> Result<()> {
        if OPS.contains(&op) {
            Ok(())
        } else {
            Err(Error::Unknown {
                what: "op",
                name: op.into(),
                known: OPS.join(", "),
            })
        }
    }

    /// The names of `op`'s versions, slowest rung first; `None` for an op kiln does not know.
    pub fn version_names(&self, op: &str) -> Option<Vec<&'static str>> {
        match op {
            "gemm" => Some(self.gemm.iter().map(|k| k.name()).collect()),
            "attention" => Some(self.attention.iter().map(|k| k.name()).collect()),
            "attention_backward" => {
                Some(self.attention_backward.iter().map(|k| k.name()).collect())
            }
            "moe" => Some(self.moe.iter().map(|k| k.name()).collect()),
            _ => None,
        }
    }

    pub fn gemm_version(&self, name: &str) -> Result<&dyn GemmKernel> {
        find_version(&self.gemm, name, "gemm version", |k| k.name())
    }

    /// The version to run `p` with: `requested` if given (refusing clearly if it cannot), else the
    /// highest rung of kiln's own versions that supports it, or a version that measured faster
    /// in `tuned` (the table the context that runs it carries).
    pub fn select_gemm(
        &self,
        p: &GemmProblem,
        dev: &DeviceInfo,
        tuned: &TunedTable,
        requested: Option<&str>,
    ) -> Result<&dyn GemmKernel> {
        if let Some(name) = requested {
            let k = self.gemm_version(name)?;
            return k
                .supports(p, dev)
                .map(|_| k)
                .map_err(|reason| Error::Unsupported {
                    kernel: name.into(),
                    reason,
                });
        }
        let mut reasons = Vec::new();
        // The test-only `planted` version is never a default choice.
        let mut supported = Vec::new();
        for k in self
            .gemm
            .iter()
            .rev()
            .filter(|k| !k.is_vendor() && k.name() != gemm::planted::NAME)
        {
            match k.supports(p, dev) {
                Ok(()) => supported.push(k.as_ref()),
                Err(r) => reasons.push(format!("{}: {r}", k.name())),
            }
        }
        if let Some(&top) = supported.first() {
            // The tuned table overrides the rung order only between tuned versions: when the
            // top rung has a tuned config for this shape class and another version measured
            // faster in its own tuning, that one runs. An untuned top rung is never demoted.
            let tuned = |k: &dyn GemmKernel| tuned.gemm_tflops(dev, k.name(), p);
            if let Some(top_tflops) = tuned(top) {
                let faster = supported
                    .iter()
                    .filter_map(|&k| tuned(k).filter(|&t| t > top_tflops).map(|t| (k, t)))
                    .max_by(|a, b| a.1.total_cmp(&b.1));
                return Ok(faster.map_or(top, |(k, _)| k));
            }
            return Ok(top);
        }
        Err(Error::Unsupported {
            kernel: "every gemm version".into(),
            reason: reasons.join("; "),
        })
    }
}

/// The version called `name` in `list`, or an error naming the known ones.
fn find_version<'a, K: ?Sized>(
    list: &'a [Box<K>],
    name: &str,
    what: &'static str,
    name_of: impl Fn(&K) -> &'static str,
) -> Result<&'a K> {
    list.iter()
        .map(|b| b.as_ref())
        .find(|k| name_of(k) == name)
        .ok_or_else(|| Error::Unknown {
            what,
            name: name.into(),
            known: list
                .iter()
                .map(|k| name_of(k))
                .collect::<Vec<_>>()
                .join(", "),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jit::arch::{has_wgmma, HOPPER, TARGETS};

    /// Every version's name and its number of variants for `arch`.
    fn variant_counts(r: &Registry, arch: &str) -> Vec<(&'static str, usize)> {
        let gemm = r.gemm().iter().map(|k| (k.name(), k.variants(arch).len()));
        let attention = r
            .attention()
            .iter()
            .map(|k| (k.name(), k.variants(arch).len()));
        let moe = r.moe().iter().map(|k| (k.name(), k.variants(arch).len()));
        gemm.chain(attention).chain(moe).collect()
    }

    /// The backward's default is `bwd_fa3_tail` (the older default's kernels with the grid's end
    /// mended) at d64 from 4,096 rows and at d128, causal or not; `bwd_fa3_lookahead` at d64 below
    /// 4,096 rows and with a window; the deterministic writer in deterministic mode; a request
    /// still wins, and the older default stays by name.
    #[test]
    fn the_backward_default_follows_the_d64_rule() {
        use crate::ops::attention::{AttentionProblem, Window};
        let (r, dev) = (Registry::default(), DeviceInfo::h100_sxm());
        let pick_in = |s, d, causal, det, window, requested| {
            let mut a = AttentionProblem::new(1, 16, s, d);
            a.causal = causal;
            a.window = window;
            let p = BackwardProblem::new(a, det);
            r.select_attention_backward(&p, &dev, requested)
                .unwrap()
                .name()
        };
        let pick =
            |s, d, causal, requested| pick_in(s, d, causal, false, Window::UNBOUNDED, requested);
        assert_eq!(pick(16384, 64, true, None), "bwd_fa3_tail");
        assert_eq!(pick(4096, 64, true, None), "bwd_fa3_tail");
        assert_eq!(pick(2048, 64, true, None), "bwd_fa3_lookahead");
        assert_eq!(pick(4096, 64, false, None), "bwd_fa3_tail");
        assert_eq!(pick(16384, 64, false, None), "bwd_fa3_tail");
        assert_eq!(pick(2048, 64, false, None), "bwd_fa3_lookahead");
        assert_eq!(pick(16384, 128, true, None), "bwd_fa3_tail");
        assert_eq!(pick(1000, 128, false, None), "bwd_fa3_tail");
        let w = Window {
            left: 256,
            right: 0,
        };
        assert_eq!(
            pick_in(8192, 128, true, false, w, None),
            "bwd_fa3_lookahead"
        );
        assert_eq!(
            pick_in(8192, 128, false, true, Window::UNBOUNDED, None),
            "bwd_fa3_ordered_w2"
        );
        let asked = Some("bwd_fa3_m128");
        assert_eq!(pick(4096, 64, false, asked), "bwd_fa3_m128");
        let old = Some("bwd_fa3_m128_fma");
        assert_eq!(pick(4096, 64, false, old), "bwd_fa3_m128_fma");
    }

    /// `kiln check --arch sm_89` compiles what runs there, not a failure per wgmma variant.
    #[test]
    fn off_hopper_only_the_versions_without_wgmma_have_variants() {
        let r = Registry::default();
        let hopper_only = [
            "wgmma_cp_async",
            "wgmma_tma",
            "wgmma_tma_ws",
            "fa3_wgmma",
            "grouped_gemm",
            "grouped_swapab",
            "swiglu_dual",
        ];
        // the vendor's versions compile nothing of kiln's on any target
        let own: Vec<&str> = variant_counts(&r, HOPPER)
            .into_iter()
            .filter(|(_, n)| *n > 0)
            .map(|(name, _)| name)
            .collect();
        assert!(hopper_only.iter().all(|v| own.contains(v)), "{own:?}");
        for arch in TARGETS {
            for (name, n) in variant_counts(&r, arch) {
                if own.contains(&name) {
                    let expected = has_wgmma(arch) || !hopper_only.contains(&name);
                    assert_eq!(n > 0, expected, "{name} on {arch}");
                }
            }
        }
    }
}
