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

use std::path::Path;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::libs::{self, CudaLib};
use crate::ops::attention::fa3_wgmma::Config as Fa3Config;
use crate::ops::gemm::wgmma_tma_ws::{
    TileConfig as WgmmaTile, FORCED_CONFIGS, MAX_SPLITS, WIDTHS_BY_DEFAULT,
};
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
    /// `KILN_TMA_PROMOTION`: the 2D tensor maps.
    pub tma: TmaOverrides,
    /// `KILN_FLUSH`: the benchmark harness.
    pub bench: BenchOverrides,
    /// `KILN_NO_TUNED`, `KILN_TUNE_FAKE`: the tuning cache and the tune worker.
    pub tune: TuneOverrides,
}

/// `KILN_WGMMA_*`: they win over both the tuned config and the heuristic of `wgmma_tma_ws`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmOverrides {
    /// `KILN_WGMMA_CFG`: the tile config to force, by name ([`FORCED_CONFIGS`]). Default: none
    /// (the tuned config, else the heuristic).
    pub tile: Option<WgmmaTile>,
    /// `KILN_WGMMA_SPLITS` (1..=8): the split-K factor, single CTAs and pairs alike. Default:
    /// none (the config's own).
    pub splits: Option<u32>,
    /// `KILN_WGMMA_GROUP_M` (1..=64): the grouped tile order's tile-rows (compiles variants
    /// outside `variants()`). Default: none (`GROUP_M`, 8).
    pub group_m: Option<u32>,
    /// `KILN_WGMMA_PAIRS` (0 or 1). Default on; 0: large problems run in single CTAs, to time or
    /// rule out the cluster path.
    pub pairs: bool,
    /// `KILN_WGMMA_TAIL` (1: split only the last wave's tiles, 0: all). Default: none (the
    /// config's own).
    pub tail: Option<bool>,
    /// `KILN_WGMMA_SK` (1: stream-K where the tile config takes it, 0: never). Default: none
    /// (the config's own).
    pub stream_k: Option<bool>,
    /// `KILN_WGMMA_WIDTHS` (0 or 1; 0: the heuristic leaves the 224-wide tile out). Default:
    /// [`WIDTHS_BY_DEFAULT`].
    pub widths: bool,
    /// `KILN_WGMMA_GRID` (at least 1): at most this many resident clusters (a small problem then
    /// has several waves, to test stream-K and last-wave splits). Default: none (one per SM).
    pub grid: Option<u32>,
    /// `KILN_WGMMA_STAGES` (2..=12): the ring depth of whichever tile runs (compiles variants
    /// outside `variants()`; a ring that does not fit fails at launch). Default: none (the
    /// tile's own).
    pub stages: Option<u32>,
    /// `KILN_WGMMA_EPI` (0 or 1). Default on; 0: the register epilogue even where C takes TMA
    /// stores, to time one against the other or check the register one.
    pub epi: bool,
    /// `KILN_WGMMA_CLOAD` (0 or 1). Default off; 1: beta = 1 loads C into the staging chunks as
    /// other betas do, instead of TMA's reduce-add (16-bit C rounded once).
    pub c_load: bool,
    /// `KILN_WGMMA_SPLITK` (0 or 1). Default off; 1: unsplit launches too run the variant with
    /// the split-K code, as every launch did before ledger #91.
    pub split_code: bool,
    /// `KILN_WGMMA_DEFER` (0 or 1; the kernel's `KILN_EPI_DEFER`). Default on: the TMA-store
    /// epilogue goes out chunk by chunk under the next unit's K blocks; 0 stores the whole tile
    /// before the next unit starts.
    pub defer: bool,
    /// `KILN_WGMMA_PDL` (0 or 1). Default on: the GEMM after a copy of ours is launched as its
    /// programmatic dependent; 0 launches it after the copy has finished.
    pub pdl: bool,
}

impl GemmOverrides {
    /// No overrides: the defaults.
    pub const NONE: GemmOverrides = GemmOverrides {
        tile: None,
        splits: None,
        group_m: None,
        pairs: true,
        tail: None,
        stream_k: None,
        widths: WIDTHS_BY_DEFAULT,
        grid: None,
        stages: None,
        epi: true,
        c_load: false,
        split_code: false,
        defer: true,
        pdl: true,
    };
}

impl Default for GemmOverrides {
    fn default() -> Self {
        GemmOverrides::NONE
    }
}

/// `KILN_FA3_D<d>` for the head dims `fa3_wgmma` runs: a comma list of `key=value` applied to
/// that dim's default config (`bn=`, `cwg=`, `stages=`, `emu=`, `persist=`, `dynamic=`, `lazy=`,
/// `order=`, `qbuf=` numbers; `overlap=`, `pingpong=` 0 or 1). It wins over the tuned config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AttentionOverrides {
    /// `KILN_FA3_D64`. Default: none (the tuned config, else `Config::default_for(64)`).
    pub fa3_d64: Option<Fa3Config>,
    /// `KILN_FA3_D128`. Default: none (the tuned config, else `Config::default_for(128)`).
    pub fa3_d128: Option<Fa3Config>,
    /// `KILN_FA3_D256`. Default: none (the tuned config, else `Config::default_for(256)`).
    pub fa3_d256: Option<Fa3Config>,
}

impl AttentionOverrides {
    /// No overrides: the defaults.
    pub const NONE: AttentionOverrides = AttentionOverrides {
        fa3_d64: None,
        fa3_d128: None,
        fa3_d256: None,
    };

    /// The config `KILN_FA3_D<d>` forces for head dim `d`, if set.
    pub fn fa3(&self, d: u32) -> Option<Fa3Config> {
        match d {
            64 => self.fa3_d64,
            128 => self.fa3_d128,
            256 => self.fa3_d256,
            _ => None,
        }
    }
}

/// The plain grouped GEMM kernel `KILN_MOE_GROUPED` names.
pub const MOE_GROUPED_VERSIONS: [&str; 2] = ["grouped_gemm", "grouped_swapab"];

/// `KILN_MOE_ORDER`: the kind of tile order of the MoE schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoeOrder {
    /// `fixed`: groups of a fixed number of m-tiles.
    Fixed,
    /// `expert`: groups aligned to experts.
    Expert,
}

/// `KILN_MOE_*`: the grouped MoE kernels' choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeOverrides {
    /// `KILN_MOE_GROUPED` (`grouped_gemm` or `grouped_swapab`): the version that computes a plain
    /// grouped GEMM. Default: none (`grouped_gemm`).
    pub grouped: Option<&'static str>,
    /// `KILN_MOE_TILE` (`128x256`, `128x192`, `128x128`, `64x256`, each optionally with `c2` for
    /// CTA pairs): `grouped_gemm`'s tile shape. Default: none (its cost model's choice).
    pub tile: Option<MoeTile>,
    /// `KILN_MOE_SWAP` (`128x256`, `256x128`, `128x128`: weight rows x tokens):
    /// `grouped_swapab`'s tile shape. Default: none (128 x 256).
    pub swap: Option<SwapConfig>,
    /// `KILN_MOE_LPT` (0 or 1). Default on: `grouped_swapab` hands out tiles heaviest expert
    /// first; 0 keeps the grouped order.
    pub lpt: bool,
    /// `KILN_MOE_GROUP` (at least 1): the tile order's group width. Default: none (one group of
    /// all m-tiles for short experts, else expert-aligned groups of at most 8 m-tiles).
    pub group: Option<u32>,
    /// `KILN_MOE_ORDER` (`fixed` or `expert`): the tile order's kind. Default: none (as for
    /// `group`).
    pub order: Option<MoeOrder>,
    /// `KILN_MOE_PDL` (0 or 1). Default on: `swiglu_dual` is launched as `moe_tile_prefix`'s
    /// programmatic dependent, so its prologue overlaps that kernel and the launch gap; 0
    /// launches it plainly.
    pub pdl: bool,
}

impl MoeOverrides {
    /// No overrides: the defaults.
    pub const NONE: MoeOverrides = MoeOverrides {
        grouped: None,
        tile: None,
        swap: None,
        lpt: true,
        group: None,
        order: None,
        pdl: true,
    };
}

impl Default for MoeOverrides {
    fn default() -> Self {
        MoeOverrides::NONE
    }
}

/// `KILN_SWIGLU_*`: the fused SwiGLU dual GEMM's variant and launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwigluOverrides {
    /// `KILN_SWIGLU_SPLIT` (0 or 1). Default off; 1 compiles the earlier mainloop (two
    /// m64n128k16 per k16, one per weight) instead of one m64n256k16 over both weights' tiles.
    pub split: bool,
    /// `KILN_SWIGLU_DEFER` (0 or 1). Default on: each tile is stored under the next unit's first
    /// wgmma batch; 0 stores it before the next unit starts.
    pub defer: bool,
    /// `KILN_SWIGLU_SILU` (0 or 1): the epilogue's silu for 16-bit outputs (1: one MUFU tanh an
    /// element; 0: ex2 and rcp, as f32 outputs always take). Default 1.
    pub silu: u32,
    /// `KILN_SWIGLU_FOLD` (0, 16 or 32): rows an expert's last m-tile takes past 128 (a
    /// remainder of at most this many rides on the tile before it instead of a tile of its own
    /// that streams the whole W for them). Default 32 (2026-11-22, prefill: 16 -0.9 %, 32
    /// -1.9 % against 0).
    pub fold: u32,
    /// `KILN_SWIGLU_DYNAMIC` (0 or 1). Default on: units are handed out dynamically; 0 walks
    /// them statically (unit b, b + grid, ...).
    pub dynamic: bool,
    /// `KILN_SWIGLU_STAGES` (2..=4): pipeline stages, to measure how much the ring depth matters
    /// (2026-11-22: 3 stages 4 % slower at prefill). Default 4, the tile config's
    /// (`TileConfig::SWIGLU`).
    pub stages: u32,
    /// `KILN_SWIGLU_TAIL` (0..=16): the most K slices a last-wave tile is cut into (0 or 1:
    /// never split). Default 4 (`swiglu_dual::MAX_TAIL_SPLITS`).
    pub tail: u32,
    /// `KILN_SWIGLU_GRID` (at least 1): at most this many CTAs (a small problem then has waves
    /// and a last wave to split). Default: none (one CTA per SM).
    pub grid: Option<u32>,
}

impl SwigluOverrides {
    /// No overrides: the defaults.
    pub const NONE: SwigluOverrides = SwigluOverrides {
        split: false,
        defer: true,
        silu: 1,
        fold: 32,
        dynamic: true,
        stages: MoeTile::SWIGLU.stages,
        tail: MAX_TAIL_SPLITS,
        grid: None,
    };
}

impl Default for SwigluOverrides {
    fn default() -> Self {
        SwigluOverrides::NONE
    }
}

/// `KILN_TMA_PROMOTION`: the L2 promotion of a 2D tensor map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L2Promotion {
    /// `none`
    None,
    /// `64`: 64 B.
    B64,
    /// `128`: 128 B.
    B128,
    /// `256`: 256 B.
    B256,
}

/// `KILN_TMA_PROMOTION` (`none`, `64`, `128`, `256`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TmaOverrides {
    /// The L2 promotion of every 2D map. Default: none (256 B where rows start on 128-byte lines,
    /// 128 B where they do not).
    pub promotion: Option<L2Promotion>,
}

/// How the benchmark empties L2 before a timed launch (`KILN_FLUSH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FlushMode {
    /// Read a buffer twice the L2 size (`kernels/harness/l2_read_flush.cu`): L2 is left holding
    /// clean lines, as after a kernel that read its inputs, so the timed launch pays only for
    /// its own traffic.
    Read,
    /// `cuMemsetD8` over that buffer: L2 is left full of dirty lines, and a launch that streams
    /// more bytes than it computes on pays their write-back too (decode-sized GEMMs: up to one
    /// extra write per byte read).
    Memset,
}

impl FlushMode {
    /// What a bench with `flush_l2` records about its flush in this mode: the mode, or `none`.
    pub fn label(self, flush_l2: bool) -> &'static str {
        match (flush_l2, self) {
            (false, _) => "none",
            (true, FlushMode::Read) => "read",
            (true, FlushMode::Memset) => "memset",
        }
    }
}

/// `KILN_FLUSH`: the benchmark harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchOverrides {
    /// `KILN_FLUSH` (`read` or `memset`). Default [`FlushMode::Read`].
    pub flush: FlushMode,
}

impl Default for BenchOverrides {
    fn default() -> Self {
        BenchOverrides {
            flush: FlushMode::Read,
        }
    }
}

/// TEST-ONLY fault plan of the tune worker (`KILN_TUNE_FAKE=hang@3,crash@5,wrong@7`): it skips
/// the GPU and answers every job with a synthetic time, except that the jobs named here sleep
/// forever, abort the process or report a wrong result (ids count a tuning run's jobs from 0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TuneFake {
    pub hang: Vec<u64>,
    pub crash: Vec<u64>,
    pub wrong: Vec<u64>,
}

impl TuneFake {
    /// A comma list of `hang@N`, `crash@N`, `wrong@N`; `None` for anything else.
    pub fn parse(s: &str) -> Option<TuneFake> {
        let mut f = TuneFake::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (what, id) = part.split_once('@')?;
            let id: u64 = id.trim().parse().ok()?;
            match what.trim() {
                "hang" => f.hang.push(id),
                "crash" => f.crash.push(id),
                "wrong" => f.wrong.push(id),
                _ => return None,
            }
        }
        Some(f)
    }

    /// The plan as [`TuneFake::parse`] reads it.
    pub fn label(&self) -> String {
        let each = |what: &str, ids: &[u64]| -> Vec<String> {
            ids.iter().map(|i| format!("{what}@{i}")).collect()
        };
        let parts: Vec<String> = [
            each("hang", &self.hang),
            each("crash", &self.crash),
            each("wrong", &self.wrong),
        ]
        .concat();
        parts.join(",")
    }
}

/// `KILN_NO_TUNED`, `KILN_TUNE_FAKE`: the tuning cache and the tune worker.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TuneOverrides {
    /// `KILN_NO_TUNED` (0 or 1). Default off; 1: the tuning cache is ignored and every version's
    /// heuristic decides.
    pub no_tuned: bool,
    /// `KILN_TUNE_FAKE` (test only): see [`TuneFake`]. Default: none (the worker runs jobs).
    pub fake: Option<TuneFake>,
}

impl Overrides {
    /// No overrides: what an unset environment gives.
    pub const NONE: Overrides = Overrides {
        gemm: GemmOverrides::NONE,
        attention: AttentionOverrides::NONE,
        moe: MoeOverrides::NONE,
        swiglu: SwigluOverrides::NONE,
        tma: TmaOverrides { promotion: None },
        bench: BenchOverrides {
            flush: FlushMode::Read,
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

/// One experiment knob: its name, what it takes, what unset means, how a value is applied (an
/// error, possibly empty, saying why for a value it does not take; `set(o, None)` restores the
/// default) and shown (`None` when at the default).
struct Knob {
    name: &'static str,
    takes: fn() -> String,
    default: &'static str,
    set: fn(&mut Overrides, Option<&str>) -> std::result::Result<(), String>,
    show: fn(&Overrides) -> Option<String>,
}

/// Stores `value` in `field`, or passes its error on.
fn put<T>(field: &mut T, value: std::result::Result<T, String>) -> std::result::Result<(), String> {
    *field = value?;
    Ok(())
}

/// `0` or `1`.
fn flag(v: &str) -> Option<bool> {
    match v {
        "0" => Some(false),
        "1" => Some(true),
        _ => None,
    }
}

fn bit(b: bool) -> String {
    (b as u32).to_string()
}

/// A whole number in `lo..=hi`.
fn number(v: &str, lo: u32, hi: u32) -> Option<u32> {
    v.parse().ok().filter(|n| (lo..=hi).contains(n))
}

/// The value of an `Option` knob: `None` when unset, else what `parse` makes of it.
fn opt<T>(
    v: Option<&str>,
    parse: impl Fn(&str) -> Option<T>,
) -> std::result::Result<Option<T>, String> {
    match v {
        None => Ok(None),
        Some(v) => parse(v).map(Some).ok_or_else(String::new),
    }
}

/// The value of a knob with a plain default.
fn or<T>(
    v: Option<&str>,
    default: T,
    parse: impl Fn(&str) -> Option<T>,
) -> std::result::Result<T, String> {
    match v {
        None => Ok(default),
        Some(v) => parse(v).ok_or_else(String::new),
    }
}

/// `value` shown when it is not `default`.
fn unless<T: PartialEq>(value: T, default: T, show: impl Fn(T) -> String) -> Option<String> {
    (value != default).then(|| show(value))
}

fn wgmma_tile_name(t: WgmmaTile) -> String {
    FORCED_CONFIGS
        .iter()
        .find(|(_, c)| *c == t)
        .map_or_else(|| format!("{t:?}"), |(n, _)| n.to_string())
}

fn moe_tile_name(t: MoeTile) -> String {
    t.label().split_whitespace().collect()
}

fn swap_name(s: SwapConfig) -> String {
    format!("{}x{}", s.bw(), s.tt)
}

/// `KILN_FA3_D<d>`'s value against `d`'s default: the keys that differ, as `key=value`.
fn fa3_text(c: Fa3Config) -> String {
    let d = Fa3Config::default_for(c.d);
    let fields: [(&str, u32, u32); 11] = [
        ("bn", c.bn, d.bn),
        ("cwg", c.cwg, d.cwg),
        ("stages", c.stages, d.stages),
        ("overlap", c.overlap as u32, d.overlap as u32),
        ("pingpong", c.pingpong as u32, d.pingpong as u32),
        ("persist", c.persist, d.persist),
        ("dynamic", c.dynamic, d.dynamic),
        ("emu", c.emu, d.emu),
        ("lazy", c.lazy, d.lazy),
        ("order", c.order, d.order),
        ("qbuf", c.qbuf, d.qbuf),
    ];
    let diff: Vec<String> = fields
        .iter()
        .filter(|(_, v, d)| v != d)
        .map(|(k, v, _)| format!("{k}={v}"))
        .collect();
    if diff.is_empty() {
        "(the default)".into()
    } else {
        diff.join(",")
    }
}

/// `KILN_FA3_D<d>`'s config, or why not.
fn fa3(d: u32, v: Option<&str>) -> std::result::Result<Option<Fa3Config>, String> {
    v.map(|v| Fa3Config::default_for(d).with(v)).transpose()
}

const FA3_TAKES: &str = "a comma list of key=value: bn, cwg, stages, persist, dynamic, emu, \
                         lazy, order, qbuf (numbers), overlap, pingpong (0 or 1)";
const FLAG: &str = "0 or 1";

/// Every experiment knob, in name order.
static KNOBS: &[Knob] = &[
    Knob {
        name: "KILN_FA3_D128",
        takes: || FA3_TAKES.into(),
        default: "the tuned config, else the built-in one",
        set: |o, v| put(&mut o.attention.fa3_d128, fa3(128, v)),
        show: |o| o.attention.fa3_d128.map(fa3_text),
    },
    Knob {
        name: "KILN_FA3_D256",
        takes: || FA3_TAKES.into(),
        default: "the tuned config, else the built-in one",
        set: |o, v| put(&mut o.attention.fa3_d256, fa3(256, v)),
        show: |o| o.attention.fa3_d256.map(fa3_text),
    },
    Knob {
        name: "KILN_FA3_D64",
        takes: || FA3_TAKES.into(),
        default: "the tuned config, else the built-in one",
        set: |o, v| put(&mut o.attention.fa3_d64, fa3(64, v)),
        show: |o| o.attention.fa3_d64.map(fa3_text),
    },
    Knob {
        name: "KILN_FLUSH",
        takes: || "`read` or `memset`".into(),
        default: "read",
        set: |o, v| {
            let mode = |v: &str| match v {
                "read" => Some(FlushMode::Read),
                "memset" => Some(FlushMode::Memset),
                _ => None,
            };
            put(&mut o.bench.flush, or(v, FlushMode::Read, mode))
        },
        show: |o| {
            unless(o.bench.flush, FlushMode::Read, |m| {
                format!("{m:?}").to_lowercase()
            })
        },
    },
    Knob {
        name: "KILN_MOE_GROUP",
        takes: || "a whole number, at least 1".into(),
        default: "one group for short experts, else expert-aligned groups of at most 8",
        set: |o, v| put(&mut o.moe.group, opt(v, |v| number(v, 1, u32::MAX))),
        show: |o| o.moe.group.map(|g| g.to_string()),
    },
    Knob {
        name: "KILN_MOE_GROUPED",
        takes: || MOE_GROUPED_VERSIONS.join(" or "),
        default: "grouped_gemm",
        set: |o, v| {
            let version = |v: &str| MOE_GROUPED_VERSIONS.into_iter().find(|n| *n == v);
            put(&mut o.moe.grouped, opt(v, version))
        },
        show: |o| o.moe.grouped.map(str::to_string),
    },
    Knob {
        name: "KILN_MOE_LPT",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.moe.lpt, or(v, true, flag)),
        show: |o| unless(o.moe.lpt, true, bit),
    },
    Knob {
        name: "KILN_MOE_ORDER",
        takes: || "`fixed` or `expert`".into(),
        default: "one group for short experts, else expert-aligned groups",
        set: |o, v| {
            let order = |v: &str| match v {
                "fixed" => Some(MoeOrder::Fixed),
                "expert" => Some(MoeOrder::Expert),
                _ => None,
            };
            put(&mut o.moe.order, opt(v, order))
        },
        show: |o| o.moe.order.map(|k| format!("{k:?}").to_lowercase()),
    },
    Knob {
        name: "KILN_MOE_PDL",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.moe.pdl, or(v, true, flag)),
        show: |o| unless(o.moe.pdl, true, bit),
    },
    Knob {
        name: "KILN_MOE_SWAP",
        takes: || {
            let names: Vec<String> = SwapConfig::ALL.into_iter().map(swap_name).collect();
            format!("one of {} (weight rows x tokens)", names.join(", "))
        },
        default: "128x256",
        set: |o, v| put(&mut o.moe.swap, opt(v, SwapConfig::parse)),
        show: |o| o.moe.swap.map(swap_name),
    },
    Knob {
        name: "KILN_MOE_TILE",
        takes: || {
            let names: Vec<String> = MoeTile::ALL.into_iter().map(moe_tile_name).collect();
            format!("one of {}", names.join(", "))
        },
        default: "the cost model's choice",
        set: |o, v| put(&mut o.moe.tile, opt(v, GroupedGemm::parse_tile)),
        show: |o| o.moe.tile.map(moe_tile_name),
    },
    Knob {
        name: "KILN_NO_TUNED",
        takes: || FLAG.into(),
        default: "0: the tuning cache is read",
        set: |o, v| put(&mut o.tune.no_tuned, or(v, false, flag)),
        show: |o| unless(o.tune.no_tuned, false, bit),
    },
    Knob {
        name: "KILN_SWIGLU_DEFER",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.swiglu.defer, or(v, true, flag)),
        show: |o| unless(o.swiglu.defer, true, bit),
    },
    Knob {
        name: "KILN_SWIGLU_DYNAMIC",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.swiglu.dynamic, or(v, true, flag)),
        show: |o| unless(o.swiglu.dynamic, true, bit),
    },
    Knob {
        name: "KILN_SWIGLU_FOLD",
        takes: || "0, 16 or 32 (rows an expert's last tile folds onto the one before)".into(),
        default: "32",
        set: |o, v| {
            let rows = |v: &str| number(v, 0, 32).filter(|r| [0, 16, 32].contains(r));
            put(&mut o.swiglu.fold, or(v, 32, rows))
        },
        show: |o| unless(o.swiglu.fold, 32, |f| f.to_string()),
    },
    Knob {
        name: "KILN_SWIGLU_GRID",
        takes: || "a whole number of CTAs, at least 1".into(),
        default: "one CTA per SM",
        set: |o, v| put(&mut o.swiglu.grid, opt(v, |v| number(v, 1, u32::MAX))),
        show: |o| o.swiglu.grid.map(|g| g.to_string()),
    },
    Knob {
        name: "KILN_SWIGLU_SILU",
        takes: || "0 (ex2 and rcp) or 1 (one MUFU tanh)".into(),
        default: "1 for 16-bit outputs; f32 outputs always take 0",
        set: |o, v| put(&mut o.swiglu.silu, or(v, 1, |v| number(v, 0, 1))),
        show: |o| unless(o.swiglu.silu, 1, |s| s.to_string()),
    },
    Knob {
        name: "KILN_SWIGLU_SPLIT",
        takes: || FLAG.into(),
        default: "0",
        set: |o, v| put(&mut o.swiglu.split, or(v, false, flag)),
        show: |o| unless(o.swiglu.split, false, bit),
    },
    Knob {
        name: "KILN_SWIGLU_STAGES",
        takes: || format!("a whole number from 2 to {}", MoeTile::SWIGLU.stages),
        default: "4",
        set: |o, v| {
            let most = MoeTile::SWIGLU.stages;
            put(&mut o.swiglu.stages, or(v, most, |v| number(v, 2, most)))
        },
        show: |o| unless(o.swiglu.stages, MoeTile::SWIGLU.stages, |s| s.to_string()),
    },
    Knob {
        name: "KILN_SWIGLU_TAIL",
        takes: || "a whole number from 0 to 16 (0 or 1: never split)".into(),
        default: "4",
        set: |o, v| {
            put(
                &mut o.swiglu.tail,
                or(v, MAX_TAIL_SPLITS, |v| number(v, 0, 16)),
            )
        },
        show: |o| unless(o.swiglu.tail, MAX_TAIL_SPLITS, |t| t.to_string()),
    },
    Knob {
        name: "KILN_TMA_PROMOTION",
        takes: || "`none`, `64`, `128` or `256`".into(),
        default: "256 B where rows start on 128-byte lines, else 128 B",
        set: |o, v| {
            let promotion = |v: &str| match v {
                "none" => Some(L2Promotion::None),
                "64" => Some(L2Promotion::B64),
                "128" => Some(L2Promotion::B128),
                "256" => Some(L2Promotion::B256),
                _ => None,
            };
            put(&mut o.tma.promotion, opt(v, promotion))
        },
        show: |o| {
            o.tma.promotion.map(|p| {
                match p {
                    L2Promotion::None => "none",
                    L2Promotion::B64 => "64",
                    L2Promotion::B128 => "128",
                    L2Promotion::B256 => "256",
                }
                .to_string()
            })
        },
    },
    Knob {
        name: "KILN_TUNE_FAKE",
        takes: || "a comma list of hang@N, crash@N, wrong@N (job ids; test only)".into(),
        default: "none: the worker runs every job",
        set: |o, v| put(&mut o.tune.fake, opt(v, TuneFake::parse)),
        show: |o| o.tune.fake.as_ref().map(TuneFake::label),
    },
    Knob {
        name: "KILN_WGMMA_CFG",
        takes: || {
            let names: Vec<&str> = FORCED_CONFIGS.iter().map(|(n, _)| *n).collect();
            format!("one of {}", names.join(", "))
        },
        default: "the tuned config, else the heuristic",
        set: |o, v| {
            let tile = |v: &str| FORCED_CONFIGS.iter().find(|(n, _)| *n == v).map(|c| c.1);
            put(&mut o.gemm.tile, opt(v, tile))
        },
        show: |o| o.gemm.tile.map(wgmma_tile_name),
    },
    Knob {
        name: "KILN_WGMMA_CLOAD",
        takes: || FLAG.into(),
        default: "0",
        set: |o, v| put(&mut o.gemm.c_load, or(v, false, flag)),
        show: |o| unless(o.gemm.c_load, false, bit),
    },
    Knob {
        name: "KILN_WGMMA_DEFER",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.gemm.defer, or(v, true, flag)),
        show: |o| unless(o.gemm.defer, true, bit),
    },
    Knob {
        name: "KILN_WGMMA_EPI",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.gemm.epi, or(v, true, flag)),
        show: |o| unless(o.gemm.epi, true, bit),
    },
    Knob {
        name: "KILN_WGMMA_GRID",
        takes: || "a whole number of clusters, at least 1".into(),
        default: "one per SM",
        set: |o, v| put(&mut o.gemm.grid, opt(v, |v| number(v, 1, u32::MAX))),
        show: |o| o.gemm.grid.map(|g| g.to_string()),
    },
    Knob {
        name: "KILN_WGMMA_GROUP_M",
        takes: || "a whole number from 1 to 64".into(),
        default: "8",
        set: |o, v| put(&mut o.gemm.group_m, opt(v, |v| number(v, 1, 64))),
        show: |o| o.gemm.group_m.map(|g| g.to_string()),
    },
    Knob {
        name: "KILN_WGMMA_PAIRS",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.gemm.pairs, or(v, true, flag)),
        show: |o| unless(o.gemm.pairs, true, bit),
    },
    Knob {
        name: "KILN_WGMMA_PDL",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.gemm.pdl, or(v, true, flag)),
        show: |o| unless(o.gemm.pdl, true, bit),
    },
    Knob {
        name: "KILN_WGMMA_SK",
        takes: || FLAG.into(),
        default: "the config's own",
        set: |o, v| put(&mut o.gemm.stream_k, opt(v, flag)),
        show: |o| o.gemm.stream_k.map(bit),
    },
    Knob {
        name: "KILN_WGMMA_SPLITK",
        takes: || FLAG.into(),
        default: "0",
        set: |o, v| put(&mut o.gemm.split_code, or(v, false, flag)),
        show: |o| unless(o.gemm.split_code, false, bit),
    },
    Knob {
        name: "KILN_WGMMA_SPLITS",
        takes: || format!("a whole number from 1 to {MAX_SPLITS}"),
        default: "the config's own",
        set: |o, v| put(&mut o.gemm.splits, opt(v, |v| number(v, 1, MAX_SPLITS))),
        show: |o| o.gemm.splits.map(|s| s.to_string()),
    },
    Knob {
        name: "KILN_WGMMA_STAGES",
        takes: || "a whole number from 2 to 12".into(),
        default: "the tile's own",
        set: |o, v| put(&mut o.gemm.stages, opt(v, |v| number(v, 2, 12))),
        show: |o| o.gemm.stages.map(|s| s.to_string()),
    },
    Knob {
        name: "KILN_WGMMA_TAIL",
        takes: || FLAG.into(),
        default: "the config's own",
        set: |o, v| put(&mut o.gemm.tail, opt(v, flag)),
        show: |o| o.gemm.tail.map(bit),
    },
    Knob {
        name: "KILN_WGMMA_WIDTHS",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.gemm.widths, or(v, WIDTHS_BY_DEFAULT, flag)),
        show: |o| unless(o.gemm.widths, WIDTHS_BY_DEFAULT, bit),
    },
];

/// A configuration variable: read where it is used, checked here.
pub struct ConfigVar {
    pub name: &'static str,
    /// What it takes, after "set it to".
    pub takes: &'static str,
    /// What is wrong with a (non-empty) value, if anything.
    check: fn(&str) -> Option<&'static str>,
    /// The kind of error a bad value is: a bad config (exit 2), but a bad `KILN_NVRTC` is
    /// NVRTC missing (exit 5), as it is when the library is loaded.
    error: fn(String) -> Error,
}

fn any(_: &str) -> Option<&'static str> {
    None
}

fn one(v: &str) -> Option<&'static str> {
    (v != "1").then_some("it takes only 1")
}

fn zero_or_one(v: &str) -> Option<&'static str> {
    flag(v).is_none().then_some("it takes 0 or 1")
}

/// A CUDA library: its file, or a folder holding it (as [`libs::from_env`] reads it).
fn library(lib: &CudaLib, v: &str) -> Option<&'static str> {
    libs::override_file(lib, Path::new(v)).err()
}

/// A file that exists.
fn existing_file(v: &str) -> Option<&'static str> {
    let p = Path::new(v);
    if !p.exists() {
        Some("that file does not exist")
    } else if !p.is_file() {
        Some("that is not a file")
    } else {
        None
    }
}

/// A folder that exists.
fn existing_dir(v: &str) -> Option<&'static str> {
    let p = Path::new(v);
    if !p.exists() {
        Some("that folder does not exist")
    } else if !p.is_dir() {
        Some("that is not a folder")
    } else {
        None
    }
}

/// A folder, made if missing.
fn dir_or_missing(v: &str) -> Option<&'static str> {
    let p = Path::new(v);
    (p.exists() && !p.is_dir()).then_some("that is a file, not a folder")
}

/// A file, made if missing.
fn file_or_missing(v: &str) -> Option<&'static str> {
    Path::new(v)
        .is_dir()
        .then_some("that is a folder, not a file")
}

/// The configuration variables, in name order: each keeps its own reader.
pub static CONFIG_VARS: &[ConfigVar] = &[
    ConfigVar {
        name: "KILN_CACHE_DIR",
        takes: "the JIT cache's folder (made if missing)",
        check: dir_or_missing,
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_COMMIT",
        takes: "the commit to tag stored runs with",
        check: any,
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_COMPUTE_SANITIZER",
        takes: "the compute-sanitizer program's path",
        check: existing_file,
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_CUBLAS",
        takes: "libcublas.so.13's path or its folder's",
        check: |v| library(&libs::CUBLAS, v),
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_CUBLASLT",
        takes: "libcublasLt.so.13's path or its folder's",
        check: |v| library(&libs::CUBLASLT, v),
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_CUOBJDUMP",
        takes: "the cuobjdump program's path",
        check: existing_file,
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_FP8_CHECK_ONLY",
        takes: "a part of a variant's label (the FP8 compile test then checks only the \
                variants whose label holds it; test only)",
        check: any,
        error: Error::Config,
    },
    ConfigVar {
        // build.rs bakes it in at compile time; cargo also sets it in the environment of the
        // programs it runs (tests, `cargo run`), where kiln ignores it.
        name: "KILN_GIT_COMMIT",
        takes: "the commit kiln is built from (build.rs sets it)",
        check: any,
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_NCU",
        takes: "the ncu (Nsight Compute) program's path",
        check: existing_file,
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_NVRTC",
        takes: "libnvrtc.so.13's path or its folder's",
        check: |v| library(&libs::NVRTC, v),
        error: Error::NvrtcMissing,
    },
    ConfigVar {
        name: "KILN_PYTHON_DEPS",
        takes: "a Python package folder holding nvidia/*/lib",
        check: existing_dir,
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_REQUIRE_NVRTC",
        takes: "1 (tests then fail where NVRTC is missing instead of skipping)",
        check: one,
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_STORE",
        takes: "the store's SQLite file (made if missing)",
        check: file_or_missing,
        error: Error::Config,
    },
    ConfigVar {
        name: "KILN_TEST_KERNELS",
        takes: "0 or 1 (1 registers the test-only `planted` GEMM version)",
        check: zero_or_one,
        error: Error::Config,
    },
];

/// Names the repository's scripts and Python tests set for themselves: kiln ignores them.
pub const SCRIPT_VARS: &[&str] = &[
    "KILN_BIN",
    "KILN_BROWSER_TESTS",
    "KILN_EXAMPLE_BIN",
    "KILN_EXPECT_NO_GPU",
    "KILN_REQUIRE_NATIVE",
    "KILN_VERIFY_SUITE",
    "KILN_WHEEL",
];

/// The configuration variable `name`, if it is one.
pub fn config_var(name: &str) -> Option<&'static ConfigVar> {
    CONFIG_VARS.iter().find(|v| v.name == name)
}

/// Every `KILN_*` name kiln knows: the knobs, the configuration variables and the scripts' own.
pub fn known_names() -> impl Iterator<Item = &'static str> {
    KNOBS
        .iter()
        .map(|k| k.name)
        .chain(CONFIG_VARS.iter().map(|v| v.name))
        .chain(SCRIPT_VARS.iter().copied())
}

/// The known name nearest to `name`, if it is a likely misspelling (at most 2 edits away).
fn closest(name: &str) -> Option<&'static str> {
    known_names()
        .map(|k| (edits(name, k), k))
        .filter(|(d, _)| *d <= 2)
        .min()
        .map(|(_, k)| k)
}

/// Levenshtein distance.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for j in 0..b.len() {
            let cur = row[j + 1];
            row[j + 1] = (prev + (ca != b[j]) as usize).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(vars: &[(&str, &str)]) -> Result<Overrides> {
        Overrides::parse(vars.iter().copied())
    }

    fn ok(vars: &[(&str, &str)]) -> Overrides {
        parse(vars).unwrap()
    }

    /// The error for `vars`, checked to be one sentence that names the variable and the value.
    fn err(vars: &[(&str, &str)]) -> String {
        let e = parse(vars).unwrap_err();
        assert_eq!(e.exit_code(), 2);
        let t = e.to_string();
        let (name, value) = vars[vars.len() - 1];
        assert!(t.contains(&format!("{name}={value}")), "{t}");
        assert!(!t.contains('\n') && !t.trim_end().ends_with('.'), "{t}");
        t
    }

    #[test]
    fn an_unset_environment_gives_the_defaults() {
        assert_eq!(ok(&[]), Overrides::NONE);
        assert_eq!(Overrides::default(), Overrides::NONE);
        assert!(Overrides::NONE.active().is_empty());
        // other variables are not kiln's business
        assert_eq!(ok(&[("PATH", "/bin"), ("HOME", "/x")]), Overrides::NONE);
        // an empty value counts as unset, for knobs and configuration alike
        assert_eq!(
            ok(&[
                ("KILN_WGMMA_CFG", ""),
                ("KILN_SWIGLU_FOLD", " "),
                ("KILN_NVRTC", "")
            ]),
            Overrides::NONE
        );
    }

    #[test]
    fn an_unknown_name_is_an_error_that_suggests_the_nearest() {
        let t = err(&[("KILN_NOSUCH", "1")]);
        assert!(t.contains("no environment variable of that name"), "{t}");
        assert!(!t.contains("did you mean"), "{t}");
        let t = err(&[("KILN_WGMMA_CGF", "large")]);
        assert!(t.contains("did you mean KILN_WGMMA_CFG?"), "{t}");
        // the scripts' own names pass
        assert_eq!(
            ok(&[
                ("KILN_BIN", "target/release/kiln"),
                ("KILN_BROWSER_TESTS", "1")
            ]),
            Overrides::NONE
        );
    }

    #[test]
    fn the_name_table_is_in_order_and_without_duplicates() {
        for w in KNOBS.windows(2) {
            assert!(w[0].name < w[1].name, "{} {}", w[0].name, w[1].name);
        }
        for w in CONFIG_VARS.windows(2) {
            assert!(w[0].name < w[1].name, "{} {}", w[0].name, w[1].name);
        }
        let mut all: Vec<&str> = known_names().collect();
        let n = all.len();
        all.sort();
        all.dedup();
        assert_eq!(all.len(), n);
        assert!(all.iter().all(|n| n.starts_with("KILN_")));
        // 36 knobs, 14 configuration variables
        assert_eq!((KNOBS.len(), CONFIG_VARS.len()), (36, 14));
    }

    #[test]
    fn every_knob_round_trips_through_active_and_resets_when_empty() {
        // one non-default value per knob
        let values: &[(&str, &str)] = &[
            ("KILN_FA3_D128", "pingpong=1,persist=2"),
            ("KILN_FA3_D256", "stages=3"),
            ("KILN_FA3_D64", "bn=128"),
            ("KILN_FLUSH", "memset"),
            ("KILN_MOE_GROUP", "4"),
            ("KILN_MOE_GROUPED", "grouped_swapab"),
            ("KILN_MOE_LPT", "0"),
            ("KILN_MOE_ORDER", "fixed"),
            ("KILN_MOE_PDL", "0"),
            ("KILN_MOE_SWAP", "256x128"),
            ("KILN_MOE_TILE", "128x192c2"),
            ("KILN_NO_TUNED", "1"),
            ("KILN_SWIGLU_DEFER", "0"),
            ("KILN_SWIGLU_DYNAMIC", "0"),
            ("KILN_SWIGLU_FOLD", "16"),
            ("KILN_SWIGLU_GRID", "8"),
            ("KILN_SWIGLU_SILU", "0"),
            ("KILN_SWIGLU_SPLIT", "1"),
            ("KILN_SWIGLU_STAGES", "3"),
            ("KILN_SWIGLU_TAIL", "2"),
            ("KILN_TMA_PROMOTION", "none"),
            ("KILN_TUNE_FAKE", "hang@3,crash@5,wrong@7"),
            ("KILN_WGMMA_CFG", "n224"),
            ("KILN_WGMMA_CLOAD", "1"),
            ("KILN_WGMMA_DEFER", "0"),
            ("KILN_WGMMA_EPI", "0"),
            ("KILN_WGMMA_GRID", "4"),
            ("KILN_WGMMA_GROUP_M", "16"),
            ("KILN_WGMMA_PAIRS", "0"),
            ("KILN_WGMMA_PDL", "0"),
            ("KILN_WGMMA_SK", "1"),
            ("KILN_WGMMA_SPLITK", "1"),
            ("KILN_WGMMA_SPLITS", "3"),
            ("KILN_WGMMA_STAGES", "5"),
            ("KILN_WGMMA_TAIL", "1"),
            ("KILN_WGMMA_WIDTHS", "0"),
        ];
        assert_eq!(values.len(), KNOBS.len());
        let o = ok(values);
        let active: Vec<(&str, String)> = o.active();
        let want: Vec<(&str, String)> = values.iter().map(|&(k, v)| (k, v.to_string())).collect();
        assert_eq!(active, want);
        // each alone shows alone, and an empty value after it restores the default
        for &(k, v) in values {
            assert_eq!(ok(&[(k, v)]).active(), vec![(k, v.to_string())]);
            assert_eq!(ok(&[(k, v), (k, "")]), Overrides::NONE, "{k}");
        }
        // and what active() shows parses back to the same overrides
        let shown: Vec<(&str, String)> = o.active();
        assert_eq!(Overrides::parse(shown).unwrap(), o);
    }

    #[test]
    fn gemm_knobs_read_what_wgmma_read() {
        let o = ok(&[
            ("KILN_WGMMA_CFG", "n224"),
            ("KILN_WGMMA_SPLITS", "3"),
            ("KILN_WGMMA_TAIL", "1"),
            ("KILN_WGMMA_GRID", "4"),
            ("KILN_WGMMA_STAGES", "12"),
            ("KILN_WGMMA_PAIRS", "0"),
            ("KILN_WGMMA_WIDTHS", "0"),
            ("KILN_WGMMA_SK", "1"),
        ])
        .gemm;
        assert_eq!(o.tile, Some(WgmmaTile::N224));
        assert_eq!(
            (o.splits, o.tail, o.stream_k),
            (Some(3), Some(true), Some(true))
        );
        assert_eq!((o.grid, o.stages), (Some(4), Some(12)));
        assert!(!o.pairs && !o.widths);
        // the last of a repeated variable wins, as in an environment built up in order
        assert_eq!(
            ok(&[("KILN_WGMMA_GRID", "4"), ("KILN_WGMMA_GRID", "9")])
                .gemm
                .grid,
            Some(9)
        );
        // every forced name resolves, to its config; whitespace around a value is dropped
        for (name, t) in FORCED_CONFIGS {
            assert_eq!(ok(&[("KILN_WGMMA_CFG", name)]).gemm.tile, Some(*t));
        }
        assert_eq!(
            ok(&[("KILN_WGMMA_CFG", " large ")]).gemm.tile,
            Some(WgmmaTile::LARGE)
        );
        // the tail and stream-K knobs say 0 as well as 1
        let o = ok(&[("KILN_WGMMA_TAIL", "0"), ("KILN_WGMMA_SK", "0")]).gemm;
        assert_eq!((o.tail, o.stream_k), (Some(false), Some(false)));
        assert_eq!(GemmOverrides::default(), Overrides::NONE.gemm);
        // the ends of each range
        for (k, lo, hi) in [
            ("KILN_WGMMA_SPLITS", "1", "8"),
            ("KILN_WGMMA_GROUP_M", "1", "64"),
            ("KILN_WGMMA_STAGES", "2", "12"),
        ] {
            assert!(
                parse(&[(k, lo)]).is_ok() && parse(&[(k, hi)]).is_ok(),
                "{k}"
            );
        }
    }

    #[test]
    fn a_bad_gemm_value_is_refused_not_ignored_or_clamped() {
        let t = err(&[("KILN_WGMMA_CFG", "bogus")]);
        assert!(t.contains("large, medium, pair"), "{t}");
        assert!(t.contains("the tuned config, else the heuristic"), "{t}");
        for (k, v) in [
            ("KILN_WGMMA_SPLITS", "0"),
            ("KILN_WGMMA_SPLITS", "9"),
            ("KILN_WGMMA_GROUP_M", "65"),
            ("KILN_WGMMA_GROUP_M", "x"),
            ("KILN_WGMMA_STAGES", "40"),
            ("KILN_WGMMA_STAGES", "1"),
            ("KILN_WGMMA_GRID", "0"),
            ("KILN_WGMMA_GRID", "-3"),
            ("KILN_WGMMA_PAIRS", "2"),
            ("KILN_WGMMA_PAIRS", "off"),
            ("KILN_WGMMA_TAIL", "yes"),
            ("KILN_WGMMA_SK", "true"),
            ("KILN_WGMMA_WIDTHS", "2"),
            ("KILN_WGMMA_EPI", "no"),
            ("KILN_WGMMA_CLOAD", "10"),
            ("KILN_WGMMA_SPLITK", "on"),
            ("KILN_WGMMA_DEFER", "00"),
            ("KILN_WGMMA_PDL", "-1"),
        ] {
            let t = err(&[(k, v)]);
            assert!(t.contains(&format!("{k} takes")), "{t}");
        }
        assert!(err(&[("KILN_WGMMA_STAGES", "40")]).contains("from 2 to 12"));
        assert!(err(&[("KILN_WGMMA_PAIRS", "2")]).contains("0 or 1"));
    }

    #[test]
    fn moe_knobs_take_the_kernels_shapes_and_orders() {
        for t in MoeTile::ALL {
            let name = moe_tile_name(t);
            assert_eq!(ok(&[("KILN_MOE_TILE", &name)]).moe.tile, Some(t));
        }
        // the label's space before c2 may be kept
        assert_eq!(
            ok(&[("KILN_MOE_TILE", "128x256 c2")]).moe.tile,
            Some(MoeTile::LARGE.paired())
        );
        for s in SwapConfig::ALL {
            assert_eq!(ok(&[("KILN_MOE_SWAP", &swap_name(s))]).moe.swap, Some(s));
        }
        for v in MOE_GROUPED_VERSIONS {
            assert_eq!(ok(&[("KILN_MOE_GROUPED", v)]).moe.grouped, Some(v));
        }
        let o = ok(&[("KILN_MOE_ORDER", "expert"), ("KILN_MOE_GROUP", "1")]).moe;
        assert_eq!((o.order, o.group), (Some(MoeOrder::Expert), Some(1)));
        for (k, v) in [
            ("KILN_MOE_TILE", "128x64"),
            ("KILN_MOE_SWAP", "128x192"),
            ("KILN_MOE_GROUPED", "grouped"),
            ("KILN_MOE_ORDER", "random"),
            ("KILN_MOE_GROUP", "0"),
            ("KILN_MOE_LPT", "2"),
            ("KILN_MOE_PDL", "yes"),
        ] {
            err(&[(k, v)]);
        }
        assert!(err(&[("KILN_MOE_TILE", "1x1")]).contains("128x256, 128x128"));
    }

    #[test]
    fn swiglu_knobs_take_exactly_what_the_kernel_compiles() {
        // the fold is 0, 16 or 32 rows: 7 was silently 0 before
        for f in [0, 16, 32] {
            let v = f.to_string();
            assert_eq!(ok(&[("KILN_SWIGLU_FOLD", &v)]).swiglu.fold, f);
        }
        let t = err(&[("KILN_SWIGLU_FOLD", "7")]);
        assert!(t.contains("KILN_SWIGLU_FOLD takes 0, 16 or 32"), "{t}");
        assert!(t.contains("default (32)"), "{t}");
        for s in 2..=4 {
            assert_eq!(
                ok(&[("KILN_SWIGLU_STAGES", &s.to_string())]).swiglu.stages,
                s
            );
        }
        for t in [0, 1, 16] {
            assert_eq!(ok(&[("KILN_SWIGLU_TAIL", &t.to_string())]).swiglu.tail, t);
        }
        assert_eq!(ok(&[("KILN_SWIGLU_SILU", "0")]).swiglu.silu, 0);
        assert_eq!(ok(&[("KILN_SWIGLU_GRID", "3")]).swiglu.grid, Some(3));
        let o = ok(&[
            ("KILN_SWIGLU_SPLIT", "1"),
            ("KILN_SWIGLU_DEFER", "0"),
            ("KILN_SWIGLU_DYNAMIC", "0"),
        ])
        .swiglu;
        assert!(o.split && !o.defer && !o.dynamic);
        for (k, v) in [
            ("KILN_SWIGLU_FOLD", "64"),
            ("KILN_SWIGLU_STAGES", "5"),
            ("KILN_SWIGLU_STAGES", "1"),
            ("KILN_SWIGLU_TAIL", "17"),
            ("KILN_SWIGLU_SILU", "2"),
            ("KILN_SWIGLU_GRID", "0"),
            ("KILN_SWIGLU_SPLIT", "2"),
            ("KILN_SWIGLU_DEFER", "x"),
            ("KILN_SWIGLU_DYNAMIC", "true"),
        ] {
            err(&[(k, v)]);
        }
    }

    #[test]
    fn attention_knobs_apply_to_their_head_dim_and_name_a_bad_key() {
        let o = ok(&[("KILN_FA3_D128", "pingpong=1, persist=2")]).attention;
        let c = o.fa3(128).unwrap();
        assert!(c.pingpong && c.persist == 2 && c.d == 128);
        assert_eq!(c.bn, Fa3Config::default_for(128).bn);
        assert_eq!((o.fa3(64), o.fa3(256), o.fa3(96)), (None, None, None));
        assert_eq!(
            ok(&[("KILN_FA3_D64", "bn=128")])
                .attention
                .fa3(64)
                .unwrap()
                .d,
            64
        );
        for v in ["pingpong=2", "bogus=1", "bn", "bn=x"] {
            let t = err(&[("KILN_FA3_D256", v)]);
            assert!(t.contains("key=value"), "{t}");
        }
        // only the head dims fa3_wgmma runs have a knob
        err(&[("KILN_FA3_D96", "bn=64")]);
    }

    #[test]
    fn the_other_knobs() {
        assert_eq!(
            ok(&[("KILN_FLUSH", "memset")]).bench.flush,
            FlushMode::Memset
        );
        assert_eq!(ok(&[("KILN_FLUSH", "read")]).bench.flush, FlushMode::Read);
        let t = err(&[("KILN_FLUSH", "clean")]);
        assert!(t.contains("`read` or `memset`"), "{t}");
        for (v, p) in [
            ("none", L2Promotion::None),
            ("64", L2Promotion::B64),
            ("128", L2Promotion::B128),
            ("256", L2Promotion::B256),
        ] {
            assert_eq!(ok(&[("KILN_TMA_PROMOTION", v)]).tma.promotion, Some(p));
        }
        err(&[("KILN_TMA_PROMOTION", "32")]);
        assert!(ok(&[("KILN_NO_TUNED", "1")]).tune.no_tuned);
        assert!(!ok(&[("KILN_NO_TUNED", "0")]).tune.no_tuned);
        err(&[("KILN_NO_TUNED", "yes")]);
        let f = ok(&[("KILN_TUNE_FAKE", "hang@3, crash@5,wrong@7")])
            .tune
            .fake;
        assert_eq!(
            f,
            Some(TuneFake {
                hang: vec![3],
                crash: vec![5],
                wrong: vec![7]
            })
        );
        for v in ["bogus@1", "hang@x", "hang"] {
            err(&[("KILN_TUNE_FAKE", v)]);
        }
    }

    #[test]
    fn configuration_variables_are_known_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("libnvrtc.so.13");
        std::fs::write(&file, b"").unwrap();
        let (d, f) = (dir.path().to_str().unwrap(), file.to_str().unwrap());
        let missing = dir.path().join("nothing");
        let m = missing.to_str().unwrap();
        // accepted, and not knobs: they change nothing in the overrides
        for (k, v) in [
            ("KILN_NVRTC", f),
            ("KILN_NVRTC", d),
            ("KILN_CUBLAS", f),
            ("KILN_CUBLASLT", f),
            ("KILN_PYTHON_DEPS", d),
            ("KILN_CUOBJDUMP", f),
            ("KILN_COMPUTE_SANITIZER", f),
            ("KILN_NCU", f),
            ("KILN_CACHE_DIR", d),
            ("KILN_CACHE_DIR", m),
            ("KILN_STORE", f),
            ("KILN_STORE", m),
            ("KILN_COMMIT", "abc1234"),
            ("KILN_GIT_COMMIT", "abc1234-dirty"),
            ("KILN_REQUIRE_NVRTC", "1"),
            ("KILN_TEST_KERNELS", "1"),
            ("KILN_TEST_KERNELS", "0"),
            ("KILN_FP8_CHECK_ONLY", "e4m3"),
        ] {
            assert_eq!(ok(&[(k, v)]), Overrides::NONE, "{k}={v}");
        }
        // NVRTC named where it is not: NVRTC missing (exit 5), as when it is loaded
        let empty = tempfile::tempdir().unwrap();
        for (v, says) in [
            ("/nonexistent", "no such file or folder"),
            (m, "no such file or folder"),
            (
                empty.path().to_str().unwrap(),
                "that folder does not hold the library",
            ),
        ] {
            let e = parse(&[("KILN_NVRTC", v)]).unwrap_err();
            assert!(matches!(e, Error::NvrtcMissing(_)), "{e:?}");
            let t = e.to_string();
            assert!(t.contains(&format!("KILN_NVRTC={v}: {says}")), "{t}");
            assert!(
                t.contains("libnvrtc.so.13") && t.contains("or unset it"),
                "{t}"
            );
        }
        for (k, v, says) in [
            ("KILN_CUBLAS", d, "that folder does not hold the library"),
            ("KILN_CUBLASLT", m, "no such file or folder"),
            ("KILN_CUOBJDUMP", m, "does not exist"),
            ("KILN_CUOBJDUMP", d, "not a file"),
            ("KILN_PYTHON_DEPS", f, "not a folder"),
            ("KILN_PYTHON_DEPS", m, "does not exist"),
            ("KILN_CACHE_DIR", f, "a file, not a folder"),
            ("KILN_STORE", d, "a folder, not a file"),
            ("KILN_REQUIRE_NVRTC", "yes", "only 1"),
            ("KILN_TEST_KERNELS", "2", "0 or 1"),
        ] {
            let t = err(&[(k, v)]);
            assert!(t.contains(says) && t.contains("or unset it"), "{t}");
        }
    }

    #[test]
    fn the_first_bad_variable_in_name_order_is_the_one_named() {
        let t = err(&[("KILN_WGMMA_CFG", "x"), ("KILN_FLUSH", "y")]);
        assert!(
            t.contains("KILN_FLUSH=y") && !t.contains("KILN_WGMMA_CFG"),
            "{t}"
        );
    }

    #[test]
    fn edit_distance() {
        assert_eq!(edits("kitten", "sitting"), 3);
        assert_eq!(edits("", "abc"), 3);
        assert_eq!(edits("abc", "abc"), 0);
        assert_eq!(closest("KILN_FLUSHH"), Some("KILN_FLUSH"));
        assert_eq!(closest("KILN_ZZZZZZZZ"), None);
    }
}
