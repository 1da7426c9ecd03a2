//! Every `KILN_*` environment variable kiln knows: the experiment knobs, parsed once into one
//! typed [`Overrides`] value that the context carries, and the configuration variables, checked.
//!
//! Only the CLI and the tune worker read the environment ([`Overrides::from_env`]); the library
//! takes the value from the [`crate::device::Context`] (or as an argument), so a library user who
//! never sets anything gets [`Overrides::NONE`], the defaults, and which variants compile never
//! depends on the shell. Every name is checked: a `KILN_*` name kiln does not know, or a value a
//! variable does not take, is an error of one sentence naming the variable, the value and what
//! it takes. An empty value counts as unset.
//!
//! The configuration variables (where things live, which tools to run, test switches) keep their
//! own readers ([`CONFIG_VARS`]); they are listed here so that the unknown-name check knows them,
//! and a value that cannot work (a path to nothing) is an error here too.

mod config_vars;
mod knobs;
mod settings;
#[cfg(test)]
mod tests;

pub use config_vars::{config_var, known_names, ConfigVar, CONFIG_VARS, SCRIPT_VARS};
pub use settings::*;

use config_vars::closest;
use knobs::KNOBS;

use std::path::Path;

use crate::error::{Error, Result};
use crate::libs::{self, CudaLib};
use crate::ops::attention::fa3_wgmma::Config as Fa3Config;
use crate::ops::fp8::gemm::Fp8Rule;
use crate::ops::fp8::Fp8Pdl;
use crate::ops::gemm::small_k::SmallK;
use crate::ops::gemm::wgmma_tma_ws::{
    InPlace, Swap, TileConfig as WgmmaTile, FORCED_CONFIGS, MAX_SPLITS, WIDTHS_BY_DEFAULT,
};
use crate::ops::moe::fp4::kernel::Fp4Path;
use crate::ops::moe::fp4::{Fp4Order, Fp4TileRule};
use crate::ops::moe::grouped_gemm::GroupedGemm;
use crate::ops::moe::grouped_swapab::SwapConfig;
use crate::ops::moe::schedule::TileConfig as MoeTile;
use crate::ops::moe::swiglu_dual::MAX_TAIL_SPLITS;

/// The experiment knobs, by op: what a run does differently from the defaults, for timing one
/// choice against another. [`Overrides::NONE`] (also `Default`) is what an unset environment gives.
#[derive(Debug, Clone, PartialEq)]
pub struct Overrides {
    /// `KILN_WGMMA_*`: the warp-specialised GEMM (`wgmma_tma_ws`).
    pub gemm: GemmOverrides,
    /// `KILN_FA3_D<d>`: the FA3-style attention kernel (`fa3_wgmma`).
    pub attention: AttentionOverrides,
    /// `KILN_MOE_*`: the grouped MoE kernels and their schedule.
    pub moe: MoeOverrides,
    /// `KILN_SWIGLU_*`: the fused SwiGLU dual GEMM (`swiglu_dual`).
    pub swiglu: SwigluOverrides,
    /// `KILN_FP8_RULE`: the dense FP8 GEMM.
    pub fp8: Fp8Overrides,
    /// `KILN_TMA_PROMOTION`: the 2D tensor maps.
    pub tma: TmaOverrides,
    /// `KILN_FLUSH`: the benchmark harness.
    pub bench: BenchOverrides,
    /// `KILN_NO_TUNED`, `KILN_TUNE_FAKE`: the tuning cache and the tune worker.
    pub tune: TuneOverrides,
}

impl Overrides {
    /// No overrides: what an unset environment gives.
    pub const NONE: Overrides = Overrides {
        gemm: GemmOverrides::NONE,
        attention: AttentionOverrides::NONE,
        moe: MoeOverrides::NONE,
        swiglu: SwigluOverrides::NONE,
        fp8: Fp8Overrides::NONE,
        tma: TmaOverrides { promotion: None },
        bench: BenchOverrides {
            flush: FlushMode::Read,
            warm_code: false,
        },
        tune: TuneOverrides {
            no_tuned: false,
            fake: None,
        },
    };

    /// The overrides this process's environment sets, every `KILN_*` variable checked. For the
    /// CLI and the tune worker only: the library takes them from the context.
    pub fn from_env() -> Result<Overrides> {
        let mut vars = Vec::new();
        for (name, value) in std::env::vars_os() {
            let Some(name) = name.to_str().filter(|n| n.starts_with("KILN_")) else {
                continue;
            };
            match value.into_string() {
                Ok(v) => vars.push((name.to_string(), v)),
                // A path kiln only passes on need not be text.
                Err(_) if config_var(name).is_some() => {}
                Err(v) => {
                    return Err(Error::Config(format!(
                        "{name}={} is not UTF-8 text: set it to one of the values it takes, or \
                         unset it",
                        v.to_string_lossy()
                    )))
                }
            }
        }
        Overrides::parse(vars)
    }

    /// The overrides `vars` set (name, value pairs, as an environment holds them, on top of one
    /// without any): names not starting with `KILN_` are ignored, the last of a repeated name
    /// wins, and an empty value counts as unset. Errors name the first bad variable in name
    /// order.
    pub fn parse<I, K, V>(vars: I) -> Result<Overrides>
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<str>,
        V: AsRef<str>,
    {
        let mut vars: Vec<(String, String)> = vars
            .into_iter()
            .filter(|(k, _)| k.as_ref().starts_with("KILN_"))
            .map(|(k, v)| (k.as_ref().to_string(), v.as_ref().to_string()))
            .collect();
        // Stable: a repeated name keeps its order, so the last still wins.
        vars.sort_by(|a, b| a.0.cmp(&b.0));
        let mut o = Overrides::NONE;
        for (name, value) in &vars {
            let v = value.trim();
            if let Some(knob) = KNOBS.iter().find(|k| k.name == name) {
                if v.is_empty() {
                    // Unset always succeeds.
                    let _ = (knob.set)(&mut o, None);
                } else if let Err(why) = (knob.set)(&mut o, Some(v)) {
                    let why = if why.is_empty() {
                        why
                    } else {
                        format!(" ({why})")
                    };
                    return Err(Error::Config(format!(
                        "{name}={value} is not accepted{why}: {name} takes {}; unset it for the \
                         default ({})",
                        (knob.takes)(),
                        knob.default
                    )));
                }
            } else if let Some(var) = config_var(name) {
                if let (false, Some(problem)) = (v.is_empty(), (var.check)(v)) {
                    return Err((var.error)(format!(
                        "{name}={value}: {problem}; set it to {}, or unset it",
                        var.takes
                    )));
                }
            } else if !SCRIPT_VARS.contains(&name.as_str()) {
                let hint = closest(name)
                    .map(|n| format!(" (did you mean {n}?)"))
                    .unwrap_or_default();
                return Err(Error::Config(format!(
                    "{name}={value}: kiln reads no environment variable of that name{hint}; \
                     unset it (src/overrides.rs lists the KILN_* names kiln knows)"
                )));
            }
        }
        Ok(o)
    }

    /// The knobs that differ from the defaults, as (name, value) in name order, for `kiln plan`
    /// and run records.
    pub fn active(&self) -> Vec<(&'static str, String)> {
        KNOBS
            .iter()
            .filter_map(|k| (k.show)(self).map(|v| (k.name, v)))
            .collect()
    }
}

impl Default for Overrides {
    fn default() -> Self {
        Overrides::NONE
    }
}
