//! Host side of `kernels/attention/fa3_wgmma.cu`: the FlashAttention-3-style forward for Hopper
//! (head dims 64, 128, 256): a TMA producer warpgroup and WGMMA consumer warpgroups with setmaxnreg,
//! P kept in registers as the A operand of P·V. Q, K and V are rank-4 tensor maps
//! [batch, heads, seq, dim] (dim innermost), so either layout and any sequence length work.
//! The grid is one-dimensional over work items (query block, head, batch): one block per item,
//! or (persistent) one per SM walking them. [`Config`] is the specialisation per head dim:
//! `KILN_FA3_D<d>` if set (measurement), else the tuned cache's config for the problem's class,
//! else [`Config::default_for`]. [`space()`] is the tuner's view of the same fields.

mod config;
mod heuristic;
mod launch;
mod space;
mod varlen;
mod workspaces;

use super::{AttentionKernel, AttentionOperands, AttentionProblem, DTYPES, HEAD_DIMS};
use crate::device::{Context, DeviceInfo};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::space::{Config as TuneConfig, ParamSpace};
use crate::ops::tuned::TunedTable;

pub use config::Config;
pub use heuristic::candidates;
pub use launch::{encode, map_shape};
pub use space::space;
pub use varlen::{check_varlen_buffers, stand_in, VarlenOperands};
pub use workspaces::{split_consumers, Parts};

pub struct Fa3Wgmma;

/// Tags the memo entry of a default launch ([`launch::Resolved`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Fa3Launch;

impl AttentionKernel for Fa3Wgmma {
    fn name(&self) -> &'static str {
        "fa3_wgmma"
    }
    fn summary(&self) -> &'static str {
        "FA3-style: TMA producer + WGMMA consumer warpgroups (setmaxnreg), K/V ring, QK^T overlapped with softmax, optional ping-pong, P in registers, d64/128/256"
    }
    fn rung(&self) -> u32 {
        2
    }
    fn supports(&self, p: &AttentionProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        if dev.compute_capability != (9, 0) {
            let (maj, min) = dev.compute_capability;
            return Err(format!(
                "needs sm_90a (Hopper) for wgmma, TMA and setmaxnreg; this GPU is {maj}.{min}"
            ));
        }
        if !HEAD_DIMS.contains(&p.head_dim) {
            return Err(format!(
                "specialised for head_dim 64, 128 and 256, not {}; use fa2_mma_sync",
                p.head_dim
            ));
        }
        if !DTYPES.contains(&p.dtype) {
            return Err(format!(
                "dtype {} is not supported; use bf16 or f16",
                p.dtype
            ));
        }
        // (no context here: the default config; a tuned one is used only where it fits too, and
        // one `KILN_FA3_D<d>` forces is checked at launch)
        let cfg = Config::resolve(p, dev, &TunedTable::empty(), None)?;
        self.fits(p, dev, &cfg)
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        if !crate::jit::arch::has_wgmma(arch) {
            return Vec::new();
        }
        DTYPES
            .iter()
            .flat_map(|&d| {
                candidates().into_iter().flat_map(move |c| {
                    let modes: &[bool] = match c.dynamic {
                        0 => &[false],
                        1 => &[false, true],
                        _ => &[true],
                    };
                    modes.iter().map(move |&dy| c.spec(arch, d, dy))
                })
            })
            .fold(Vec::new(), |mut v: Vec<KernelSpec>, s| {
                if !v.iter().any(|x| x.label() == s.label()) {
                    v.push(s);
                }
                v
            })
            .into_iter()
            .chain(self.masked_variants(arch))
            .collect()
    }
    fn launch(&self, ctx: &Context, p: &AttentionProblem, ops: &AttentionOperands) -> Result<()> {
        // The config (override, tuned entry or default), the loaded variant, the grid and the
        // argument block depend on the problem alone: worked out once per problem (the
        // context's memo, cleared when its overrides or tuned table change).
        let r = ctx.memo.get_or_try(&(p.key(), Fa3Launch), || {
            let forced = ctx.overrides.attention.fa3(p.head_dim as u32);
            let c = Config::resolve(p, &ctx.info, &ctx.tuned, forced).map_err(|reason| {
                Error::Unsupported {
                    kernel: self.name().into(),
                    reason,
                }
            })?;
            self.resolve(ctx, p, &c)
        })?;
        self.run(ctx, ops, &r)
    }
    fn space(&self, p: &AttentionProblem, dev: &DeviceInfo) -> Option<ParamSpace> {
        HEAD_DIMS.contains(&p.head_dim).then(|| space(p, dev))
    }
    fn baseline(&self, p: &AttentionProblem, _dev: &DeviceInfo) -> Option<TuneConfig> {
        // The untuned default (not the cache's entry: a tuning run measures against the heuristic).
        HEAD_DIMS
            .contains(&p.head_dim)
            .then(|| Config::default_for(p.head_dim as u32).to_tune(p))
    }
    fn spec_for(&self, arch: &str, p: &AttentionProblem, cfg: &TuneConfig) -> Option<KernelSpec> {
        Config::from_tune(p.head_dim as u32, cfg)
            .ok()
            .map(|c| c.spec(arch, p.dtype, c.dynamic_for(p)))
    }
    fn launch_with(
        &self,
        ctx: &Context,
        p: &AttentionProblem,
        ops: &AttentionOperands,
        cfg: &TuneConfig,
    ) -> Result<()> {
        let c = Config::from_tune(p.head_dim as u32, cfg).map_err(|reason| Error::Unsupported {
            kernel: self.name().into(),
            reason,
        })?;
        self.fits(p, &ctx.info, &c)
            .map_err(|reason| Error::Unsupported {
                kernel: self.name().into(),
                reason,
            })?;
        self.launch_config(ctx, p, ops, &c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::DType;

    #[test]
    fn every_candidate_compiles_once_per_scheduling_mode_it_can_use() {
        let d128 = Config::default_for(128);
        let v = Fa3Wgmma.variants("sm_90a");
        let mut labels: Vec<String> = v.iter().map(|s| s.label()).collect();
        labels.sort();
        labels.dedup();
        assert_eq!(labels.len(), v.len());
        for dy in [false, true] {
            let want = d128.spec("sm_90a", DType::Bf16, dy).label();
            assert!(labels.contains(&want), "{want}");
        }
        assert!(Fa3Wgmma.variants("sm_80").is_empty());
    }
}
