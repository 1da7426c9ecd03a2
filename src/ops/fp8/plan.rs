//! What the FP8 GEMM runs for one problem and why (no GPU): the config [`choose`] picks with the
//! cost of every compiled one, the split-K rule, the tiles, the grid and the shared memory.

use serde::Serialize;

use super::gemm::{
    choose, choose_splits, configs, smem_bytes, stages, supports, tiles, Fp8Config, BK, BM,
    MAX_SPLITS, NAME,
};
use super::problem::Fp8Problem;
use crate::device::DeviceInfo;
use crate::error::{Error, Result};

/// One compiled config's standing for the problem.
#[derive(Debug, Clone, Serialize)]
pub struct Fp8Candidate {
    pub config: Fp8Config,
    pub tiles: u64,
    pub waves: u64,
    /// waves x width x the mainloop's cost per column: what [`choose`] minimises.
    pub cost: u64,
    pub fits: bool,
}

/// The plan of one FP8 GEMM.
#[derive(Debug, Clone, Serialize)]
pub struct Fp8Plan {
    pub version: String,
    pub problem: String,
    pub config: Fp8Config,
    pub splits: u32,
    pub grid: u64,
    pub stages: u32,
    pub smem_bytes: u32,
    pub candidates: Vec<Fp8Candidate>,
    /// The rules that decided, in the order they applied.
    pub why: Vec<String>,
}

/// The plan for `p` on `dev` (`forced`: a config given by the caller, which must be compiled).
pub fn plan(p: &Fp8Problem, dev: &DeviceInfo, forced: Option<Fp8Config>) -> Result<Fp8Plan> {
    p.validate()?;
    supports(p, dev).map_err(|reason| Error::Unsupported {
        kernel: NAME.into(),
        reason,
    })?;
    let sms = dev.sm_count.max(1) as u64;
    let compiled = configs(p.a, p.b, p.scale, p.promote);
    let candidates: Vec<Fp8Candidate> = compiled
        .iter()
        .map(|&c| {
            let t = tiles(p, c.bn);
            Fp8Candidate {
                config: c,
                tiles: t,
                waves: t.div_ceil(sms),
                cost: t.div_ceil(sms) * c.bn as u64 * super::gemm::column_cost(c, p.promote),
                fits: dev.check_smem(smem_bytes(c.bn)).is_ok(),
            }
        })
        .collect();
    let mut why = vec![format!(
        "compiled for {} x {} {} scales{}: {}",
        p.a,
        p.b,
        p.scale,
        if p.promote {
            ", promoted"
        } else {
            ", unpromoted"
        },
        compiled
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )];
    let mut config = match forced {
        Some(c) => {
            super::gemm::check_config(p, c)?;
            why.push(format!("config {c} given by the caller"));
            c
        }
        None => {
            let c = choose(p, dev);
            why.push(format!(
                "tile {c}: the least waves x width x cost per column over {sms} SMs (a \
                 promotion after a drained pipeline costs 10 per column, pipelined or \
                 unpromoted 8), the wider on a tie"
            ));
            c
        }
    };
    let kblocks = (p.k as u64).div_ceil(BK as u64);
    let t = tiles(p, config.bn);
    let splits = match config.splits {
        0 => {
            let s = choose_splits(p, config.bn, dev);
            why.push(if s == 1 {
                format!(
                    "no split-K: {t} tiles fill half the {sms} SMs or more, or K has fewer \
                     than 4 blocks of {BK} ({kblocks})"
                )
            } else {
                format!(
                    "split-K into {s}: {t} tiles fill under half the SMs; slices to fill them, \
                     at most {MAX_SPLITS}, two K blocks or more each ({kblocks} blocks)"
                )
            });
            s
        }
        s => s.min(kblocks as u32).max(1),
    };
    config.splits = splits;
    Ok(Fp8Plan {
        version: NAME.into(),
        problem: p.to_string(),
        config,
        splits,
        grid: (t * splits as u64).min(sms),
        stages: stages(config.bn),
        smem_bytes: smem_bytes(config.bn),
        candidates,
        why,
    })
}

impl Fp8Plan {
    /// The launch in two lines: tiles, grid, pipeline.
    pub fn launch_text(&self) -> String {
        format!(
            "tiles {BM}x{} (K {BK} a stage), {} stages, {} B shared memory, 384 threads\n\
             grid {} persistent CTAs, split-K {}",
            self.config.bn, self.stages, self.smem_bytes, self.grid, self.splits
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::fp8::ScaleMode;
    use crate::ops::gemm::DType;

    #[test]
    fn the_plan_names_the_choice_and_every_compiled_config() {
        let dev = DeviceInfo::h100_sxm();
        let p = Fp8Problem::new(4096, 7168, 16384, DType::Bf16, ScaleMode::Block);
        let plan = plan(&p, &dev, None).unwrap();
        assert_eq!(plan.config.bn, choose(&p, &dev).bn);
        assert_eq!(
            plan.candidates.len(),
            configs(p.a, p.b, p.scale, true).len()
        );
        let best = plan.candidates.iter().map(|c| c.cost).min().unwrap();
        assert!(plan
            .candidates
            .iter()
            .any(|c| c.config.same_kernel(&plan.config) && c.cost == best));
        assert_eq!(plan.splits, 1);
        assert!(plan.why.iter().any(|w| w.contains("no split-K")));
    }

    #[test]
    fn a_small_m_splits_k_and_says_so() {
        let dev = DeviceInfo::h100_sxm();
        let p = Fp8Problem::new(64, 2112, 7168, DType::Bf16, ScaleMode::Block);
        let plan = plan(&p, &dev, None).unwrap();
        assert!(plan.splits > 1);
        assert!(plan.why.iter().any(|w| w.contains("split-K into")));
        let forced = plan_forced(&p, "128/2");
        assert_eq!((forced.config.bn, forced.splits), (128, 2));
        assert!(plan_err(&p, "200").contains("not compiled"));
    }

    fn plan_forced(p: &Fp8Problem, c: &str) -> Fp8Plan {
        plan(p, &DeviceInfo::h100_sxm(), Some(c.parse().unwrap())).unwrap()
    }

    fn plan_err(p: &Fp8Problem, c: &str) -> String {
        plan(p, &DeviceInfo::h100_sxm(), Some(c.parse().unwrap()))
            .unwrap_err()
            .to_string()
    }
}
