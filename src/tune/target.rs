//! What a tuning run tunes: one version of one op (GEMM, attention or its backward) and the
//! problem it is tuned for. The run, the worker, landscapes and the cache see the ops only through these two types.

use serde::{Deserialize, Serialize};

use super::space::{Config, ParamSpace};
use crate::device::DeviceInfo;
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::attention::{AttentionKernel, AttentionProblem};
use crate::ops::attention_backward::{knobs, AttentionBackwardKernel, BackwardProblem};
use crate::ops::gemm::{GemmKernel, GemmProblem};
use crate::ops::registry::Registry;

/// The problem of a tuning run. Untagged, so that the GEMM problems already recorded in stores
/// and landscapes (a bare `GemmProblem`) still read back.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum TuneProblem {
    Gemm(GemmProblem),
    /// (Before `Attention`: an untagged enum tries its variants in order.)
    AttentionBackward(BackwardProblem),
    Attention(AttentionProblem),
}

impl From<GemmProblem> for TuneProblem {
    fn from(p: GemmProblem) -> Self {
        TuneProblem::Gemm(p)
    }
}

impl From<AttentionProblem> for TuneProblem {
    fn from(p: AttentionProblem) -> Self {
        TuneProblem::Attention(p)
    }
}

impl From<BackwardProblem> for TuneProblem {
    fn from(p: BackwardProblem) -> Self {
        TuneProblem::AttentionBackward(p)
    }
}

impl TuneProblem {
    /// The op name the store and the cache key use.
    pub fn op(&self) -> &'static str {
        match self {
            TuneProblem::Gemm(_) => "gemm",
            TuneProblem::Attention(_) => "attention",
            TuneProblem::AttentionBackward(_) => "attention_backward",
        }
    }
    pub fn label(&self) -> String {
        match self {
            TuneProblem::Gemm(p) => p.label(),
            TuneProblem::Attention(p) => p.label(),
            TuneProblem::AttentionBackward(p) => format!("backward of {}", p.label()),
        }
    }
    /// What timing a candidate on the problem needs: its bench's memory.
    pub fn bench_need(&self, info: &crate::device::DeviceInfo) -> crate::harness::memory::Need {
        use crate::harness::memory;
        match self {
            TuneProblem::Gemm(p) => memory::plan_bench(p, info),
            TuneProblem::Attention(p) => memory::plan_attention_bench(p, info),
            TuneProblem::AttentionBackward(p) => memory::plan_backward_bench(p, info),
        }
    }

    /// Refuses a problem the GPU of `ctx` has no room to time, before anything is allocated.
    pub fn ensure_fits(&self, ctx: &crate::device::Context) -> Result<()> {
        self.bench_need(&ctx.info)
            .ensure(ctx, &format!("the problem {}", self.label()))
    }

    pub fn flops(&self) -> f64 {
        match self {
            TuneProblem::Gemm(p) => p.flops(),
            TuneProblem::Attention(p) => p.flops(),
            TuneProblem::AttentionBackward(p) => p.flops(),
        }
    }
    pub fn validate(&self) -> Result<()> {
        match self {
            TuneProblem::Gemm(p) => p.validate(),
            TuneProblem::Attention(p) => p.validate(),
            TuneProblem::AttentionBackward(p) => p.validate(),
        }
    }
    /// The problems a candidate is verified on before it is timed (in order).
    pub fn verify_problems(&self) -> Vec<TuneProblem> {
        match self {
            TuneProblem::Gemm(p) => super::run::verify_problems(p)
                .into_iter()
                .map(TuneProblem::Gemm)
                .collect(),
            TuneProblem::Attention(p) => attention_verify_problems(p)
                .into_iter()
                .map(TuneProblem::Attention)
                .collect(),
            // (the small problem's few key blocks are one partial wave: a split config splits it)
            TuneProblem::AttentionBackward(p) => attention_verify_problems(&p.attn)
                .into_iter()
                .map(|a| TuneProblem::AttentionBackward(BackwardProblem { attn: a, ..*p }))
                .collect(),
        }
    }
}

/// Sequence lengths above this are verified at [`ATTN_VERIFY_SEQ`] instead.
const ATTN_VERIFY_CAP: usize = 384;
/// Not a multiple of any key tile (64..192) nor of 64 query rows, so that every candidate's
/// partial query block and partial key tile are exercised.
const ATTN_VERIFY_SEQ: usize = 333;

/// A small attention problem of the same class as `p` (dtype, head dim, layout, mask, GQA group;
/// one batch, one or two key/value heads, sequences capped with tails), then `p` itself when its
/// float64 reference is cheap (every row; the sampled reference of a large problem would cost
/// seconds per candidate).
pub fn attention_verify_problems(p: &AttentionProblem) -> Vec<AttentionProblem> {
    let cap = |s: usize| {
        if s > ATTN_VERIFY_CAP {
            ATTN_VERIFY_SEQ
        } else {
            s
        }
    };
    let heads_kv = p.heads_kv.min(if p.group() > 1 { 1 } else { 2 });
    let (mut sq, mut skv) = (cap(p.seqlen_q), cap(p.seqlen_kv));
    // Keep which of the two is longer (the causal diagonal's offset changes sign with it).
    if p.seqlen_q < p.seqlen_kv && sq >= skv {
        sq = skv.saturating_sub(64).max(1);
    } else if p.seqlen_q > p.seqlen_kv && skv >= sq {
        skv = sq.saturating_sub(64).max(1);
    }
    let small = AttentionProblem {
        batch: 1,
        heads_q: heads_kv * p.group(),
        heads_kv,
        seqlen_q: sq,
        seqlen_kv: skv,
        ..*p
    };
    let mut v = vec![small];
    let work = p.batch as f64
        * p.heads_q as f64
        * p.seqlen_q as f64
        * p.seqlen_kv as f64
        * p.head_dim as f64;
    if small != *p && work <= 1.0e9 {
        v.push(*p);
    }
    v
}

/// A version of one op, as the tuner drives it.
#[derive(Clone, Copy)]
pub enum Target<'a> {
    Gemm(&'a dyn GemmKernel),
    Attention(&'a dyn AttentionKernel),
    /// Its space: the run-time knobs its launch reads on the problem (one empty config where it
    /// reads none, so that every version can be timed and cached).
    AttentionBackward(&'a dyn AttentionBackwardKernel),
}

impl<'a> Target<'a> {
    /// The version `name` of `p`'s op.
    pub fn find(registry: &'a Registry, name: &str, p: &TuneProblem) -> Result<Target<'a>> {
        Ok(match p {
            TuneProblem::Gemm(_) => Target::Gemm(registry.gemm_version(name)?),
            TuneProblem::Attention(_) => Target::Attention(registry.attention_version(name)?),
            TuneProblem::AttentionBackward(_) => {
                Target::AttentionBackward(registry.attention_backward_version(name)?)
            }
        })
    }
    pub fn name(&self) -> &'static str {
        match self {
            Target::Gemm(k) => k.name(),
            Target::Attention(k) => k.name(),
            Target::AttentionBackward(k) => k.name(),
        }
    }
    fn mismatch(&self, p: &TuneProblem) -> String {
        format!("{} is not a {} version", self.name(), p.op())
    }
    /// `Ok` or why the version cannot run `p` (a problem of another op included).
    pub fn supports(&self, p: &TuneProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        match (self, p) {
            (Target::Gemm(k), TuneProblem::Gemm(q)) => k.supports(q, dev),
            (Target::Attention(k), TuneProblem::Attention(q)) => k.supports(q, dev),
            (Target::AttentionBackward(k), TuneProblem::AttentionBackward(q)) => k.supports(q, dev),
            _ => Err(self.mismatch(p)),
        }
    }
    pub fn space(&self, p: &TuneProblem, dev: &DeviceInfo) -> Option<ParamSpace> {
        match (self, p) {
            (Target::Gemm(k), TuneProblem::Gemm(q)) => k.space(q, dev),
            (Target::Attention(k), TuneProblem::Attention(q)) => k.space(q, dev),
            (Target::AttentionBackward(k), TuneProblem::AttentionBackward(q)) => {
                Some(knobs::space(&k.knobs(q)))
            }
            _ => None,
        }
    }
    /// [`Target::space`], or an error saying there is none.
    pub fn require_space(&self, p: &TuneProblem, dev: &DeviceInfo) -> Result<ParamSpace> {
        self.space(p, dev).ok_or_else(|| Error::Unsupported {
            kernel: self.name().into(),
            reason: format!("it declares no parameter space to tune for {}", p.label()),
        })
    }
    pub fn baseline(&self, p: &TuneProblem, dev: &DeviceInfo) -> Option<Config> {
        match (self, p) {
            (Target::Gemm(k), TuneProblem::Gemm(q)) => k.baseline(q, dev),
            (Target::Attention(k), TuneProblem::Attention(q)) => k.baseline(q, dev),
            (Target::AttentionBackward(k), TuneProblem::AttentionBackward(q)) => {
                Some(knobs::baseline(&k.knobs(q)))
            }
            _ => None,
        }
    }
    pub fn spec_for(&self, arch: &str, p: &TuneProblem, cfg: &Config) -> Option<KernelSpec> {
        match (self, p) {
            (Target::Gemm(k), TuneProblem::Gemm(q)) => k.spec_for(arch, q, cfg),
            (Target::Attention(k), TuneProblem::Attention(q)) => k.spec_for(arch, q, cfg),
            // (run-time knobs: every config runs the kernels the launch picks, compiled there)
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::{DType, Layout};

    #[test]
    fn problems_of_both_ops_round_trip_and_old_gemm_json_reads_back() {
        let g = GemmProblem::new(64, 32, 16, Layout::RC, DType::Bf16, DType::Bf16);
        // what stores and landscapes hold today: a bare GEMM problem
        let old = serde_json::to_string(&g).unwrap();
        assert_eq!(
            serde_json::from_str::<TuneProblem>(&old).unwrap(),
            TuneProblem::Gemm(g)
        );
        let a = TuneProblem::Attention(AttentionProblem {
            causal: true,
            ..AttentionProblem::new(4, 16, 4096, 128)
        });
        let back: TuneProblem = serde_json::from_str(&serde_json::to_string(&a).unwrap()).unwrap();
        assert_eq!(back, a);
        assert_eq!((a.op(), TuneProblem::Gemm(g).op()), ("attention", "gemm"));
        // the backward's problem reads back as itself, not as the forward's
        let b = TuneProblem::AttentionBackward(BackwardProblem::new(
            AttentionProblem::new(2, 16, 8192, 128),
            true,
        ));
        let back: TuneProblem = serde_json::from_str(&serde_json::to_string(&b).unwrap()).unwrap();
        assert_eq!(back, b);
        assert_eq!(b.op(), "attention_backward");
        // verified on the small problem of its class, deterministic kept
        let v = b.verify_problems();
        assert!(
            matches!(v[0], TuneProblem::AttentionBackward(q) if q.deterministic && q.attn.seqlen_q == 333)
        );
    }

    #[test]
    fn attention_is_verified_on_a_small_problem_of_its_class() {
        let p = AttentionProblem {
            causal: true,
            heads_kv: 4,
            ..AttentionProblem::new(4, 16, 4096, 128)
        };
        let v = attention_verify_problems(&p);
        assert_eq!(v.len(), 1);
        let s = v[0];
        assert_eq!((s.batch, s.heads_kv, s.heads_q), (1, 1, 4));
        assert_eq!((s.seqlen_q, s.seqlen_kv), (333, 333));
        assert_eq!((s.causal, s.head_dim, s.dtype), (true, 128, p.dtype));
        s.validate().unwrap();
        // the diagonal's side is kept when the lengths differ
        let q = AttentionProblem {
            seqlen_q: 1000,
            ..AttentionProblem::new(1, 2, 8192, 64)
        };
        let s = attention_verify_problems(&q)[0];
        assert!(s.seqlen_q < s.seqlen_kv, "{s:?}");
        // a small problem is verified as it is, too
        let small = AttentionProblem::new(2, 2, 200, 64);
        assert_eq!(
            attention_verify_problems(&small),
            vec![AttentionProblem { batch: 1, ..small }, small]
        );
    }
}
