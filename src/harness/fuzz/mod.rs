//! `kiln fuzz`: seeded random problems for every op and version, each verified with poisoned
//! outputs; every failure becomes a [`Case`] that `kiln verify --repro FILE` reruns exactly.

pub mod gemm;

use serde::{Deserialize, Serialize};

use super::attention::verify::{verify_attention_seeded, AttnFixture};
use super::check::CheckItem;
use super::device_data::mix64;
use super::draw::{Draw, GemmDraw};
use super::fp8::{verify_gemm_seeded as verify_fp8_seeded, Data as Fp8Data, GemmCase as Fp8Case};
use super::moe_layer::{draw_case as draw_layer, LayerCase};
use super::moe_layer_verify::verify_layer_seeded;
use super::moe_verify::{verify_moe_seeded, Mode, MoeFixture};
use super::outcome::Outcome;
use crate::device::{Context, DeviceInfo};
use crate::error::{Error, Result};
use crate::formats::ScaleRecipe;
use crate::ops::attention::{AttentionKernel, AttentionProblem};
use crate::ops::fp8::Fp8Problem;
use crate::ops::gemm::{GemmKernel, GemmProblem};
use crate::ops::moe::{MoeKernel, MoeProblem};
use crate::ops::registry::Registry;
use crate::ops::tuned::TunedTable;

/// How many problems of each op, from which seed, on which versions.
#[derive(Debug, Clone, Serialize)]
pub struct FuzzPlan {
    pub seed: u64,
    pub gemm: usize,
    pub attention: usize,
    pub moe: usize,
    pub fp8: usize,
    /// Whole MoE layers (routing, gathered SwiGLU, down projection with its combine).
    pub moe_layer: usize,
    /// Only these versions (all of kiln's when empty).
    pub versions: Vec<String>,
    /// The longest attention sequence drawn.
    pub max_seq: usize,
}

/// One check, complete enough to be rerun exactly: the op, the version, the problem, the seed of
/// its inputs (and for MoE, how it was launched).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Case {
    Gemm {
        version: String,
        problem: GemmProblem,
        seed: u64,
    },
    Attention {
        version: String,
        problem: AttentionProblem,
        seed: u64,
    },
    Moe {
        version: String,
        problem: MoeProblem,
        mode: Mode,
        seed: u64,
    },
    /// A whole MoE layer (`version`: moe_layer).
    MoeLayer {
        version: String,
        case: LayerCase,
        seed: u64,
    },
    /// An FP8 GEMM: its operands drawn in f32 and quantised on the GPU with `recipe`'s scales.
    Fp8 {
        version: String,
        problem: Fp8Problem,
        recipe: ScaleRecipe,
        seed: u64,
    },
}

impl Case {
    /// The seed its inputs are drawn from.
    pub fn seed(&self) -> u64 {
        match self {
            Case::Gemm { seed, .. }
            | Case::Attention { seed, .. }
            | Case::Moe { seed, .. }
            | Case::MoeLayer { seed, .. }
            | Case::Fp8 { seed, .. } => *seed,
        }
    }

    pub fn op(&self) -> &'static str {
        match self {
            Case::Gemm { .. } => "gemm",
            Case::Attention { .. } => "attention",
            Case::Moe { .. } | Case::MoeLayer { .. } => "moe",
            Case::Fp8 { .. } => "fp8",
        }
    }
    pub fn version(&self) -> &str {
        match self {
            Case::Gemm { version, .. }
            | Case::Attention { version, .. }
            | Case::Moe { version, .. }
            | Case::MoeLayer { version, .. }
            | Case::Fp8 { version, .. } => version,
        }
    }
    pub fn label(&self) -> String {
        match self {
            Case::Gemm { problem, .. } => problem.label(),
            Case::Attention { problem, .. } => problem.label(),
            Case::Moe { problem, mode, .. } => format!("{} ({mode:?})", problem.label()),
            Case::MoeLayer { case, .. } => case.label(),
            Case::Fp8 {
                problem, recipe, ..
            } => format!("{problem} ({recipe:?} scales)"),
        }
    }
}

/// The result of one check.
#[derive(Debug, Clone, Serialize)]
pub struct Verdict {
    pub case: Case,
    pub passed: bool,
    /// Why the version refused the problem (a skip, not a failure).
    pub skipped: Option<String>,
    pub rel_error: f64,
    pub bound: f64,
    pub message: String,
}

impl Verdict {
    pub fn failed(&self) -> bool {
        !self.passed && self.skipped.is_none()
    }

    /// The verdict of `case` from its check's outcome (an error is a failed verdict with its
    /// message), and the error again when it leaves the context unusable (a hang, a CUDA error).
    pub fn of(case: Case, o: Result<Outcome>) -> (Verdict, Option<Error>) {
        let (passed, skipped, rel_error, bound, message, fatal) = match o {
            Ok(o) => (o.passed, o.skipped, o.rel_error, o.bound, o.message, None),
            Err(e) => {
                let fatal = matches!(e, Error::Hang { .. } | Error::Cuda { .. });
                let message = e.to_string();
                (false, None, f64::NAN, f64::NAN, message, fatal.then_some(e))
            }
        };
        let v = Verdict {
            case,
            passed,
            skipped,
            rel_error,
            bound,
            message,
        };
        (v, fatal)
    }
}

/// Counts of one op and version.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tally {
    pub op: String,
    pub version: String,
    pub checks: usize,
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
    /// The largest relative error over its bound among the passed checks.
    pub worst_of_bound: f64,
    /// Wall time of its checks (the first version of each problem also pays for the inputs).
    pub seconds: f64,
}

/// Counts per op and version, in the order first seen.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tallies(pub Vec<Tally>);

impl Tallies {
    pub fn add(&mut self, v: &Verdict) {
        let i = self.slot(v);
        let t = &mut self.0[i];
        if v.skipped.is_some() {
            t.skipped += 1;
            return;
        }
        t.checks += 1;
        if v.passed {
            t.passed += 1;
            if v.bound > 0.0 && v.rel_error.is_finite() {
                t.worst_of_bound = t.worst_of_bound.max(v.rel_error / v.bound);
            }
        } else {
            t.failed += 1;
        }
    }

    /// Adds `seconds` to the time of the verdict's op and version.
    pub fn charge(&mut self, v: &Verdict, seconds: f64) {
        let i = self.slot(v);
        self.0[i].seconds += seconds;
    }

    fn slot(&mut self, v: &Verdict) -> usize {
        let (op, version) = (v.case.op(), v.case.version());
        match self
            .0
            .iter()
            .position(|t| t.op == op && t.version == version)
        {
            Some(i) => i,
            None => {
                self.0.push(Tally {
                    op: op.into(),
                    version: version.into(),
                    ..Tally::default()
                });
                self.0.len() - 1
            }
        }
    }

    pub fn failed(&self) -> usize {
        self.0.iter().map(|t| t.failed).sum()
    }
}

/// The seed of problem `i` of op `tag`'s inputs: a hash, so that neighbouring problems share nothing.
fn input_seed(seed: u64, tag: u64, i: usize) -> u64 {
    mix64(seed ^ (tag << 56) ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15))
}

/// The problems of a plan, drawn from its seed: the same on every machine. Each op's come with
/// the seed of their inputs.
#[derive(Default)]
pub struct Drawn {
    pub gemm: Vec<(GemmProblem, u64)>,
    pub attention: Vec<(AttentionProblem, u64)>,
    pub moe: Vec<((MoeProblem, Mode), u64)>,
    pub fp8: Vec<((Fp8Problem, ScaleRecipe), u64)>,
    pub moe_layer: Vec<(LayerCase, u64)>,
}

/// Each of `drawn` as the case `case` makes of it and its seed.
fn cases_of<T>(drawn: &[(T, u64)], case: impl Fn(&T, u64) -> Case) -> Vec<Case> {
    drawn.iter().map(|(p, seed)| case(p, *seed)).collect()
}

impl Drawn {
    /// Each op's problems as cases of `version` (gemm, attention, moe, fp8, moe_layer): what the
    /// dry run lists and `seed_one_draws_the_problems_it_always_drew` pins.
    pub fn cases(&self, version: &str) -> [Vec<Case>; 5] {
        let v = || version.to_string();
        [
            cases_of(&self.gemm, |&problem, seed| Case::Gemm {
                version: v(),
                problem,
                seed,
            }),
            cases_of(&self.attention, |&problem, seed| Case::Attention {
                version: v(),
                problem,
                seed,
            }),
            cases_of(&self.moe, |(problem, mode), seed| Case::Moe {
                version: v(),
                problem: problem.clone(),
                mode: *mode,
                seed,
            }),
            cases_of(&self.fp8, |&(problem, recipe), seed| Case::Fp8 {
                version: v(),
                problem,
                recipe,
                seed,
            }),
            cases_of(&self.moe_layer, |case, seed| Case::MoeLayer {
                version: v(),
                case: case.clone(),
                seed,
            }),
        ]
    }
}

/// `n` problems of op `tag`, each drawn by `one` from the stream of `seed ^ salt`, with the seed
/// of its inputs ([`input_seed`]).
fn draw_n<T>(
    seed: u64,
    salt: u64,
    tag: u64,
    n: usize,
    mut one: impl FnMut(&mut Draw) -> T,
) -> Vec<(T, u64)> {
    let mut d = Draw::new(seed ^ salt);
    (0..n)
        .map(|i| (one(&mut d), input_seed(seed, tag, i)))
        .collect()
}

pub fn draw(plan: &FuzzPlan) -> Drawn {
    let (seed, g) = (plan.seed, GemmDraw::fuzz());
    Drawn {
        gemm: draw_n(seed, 0, 1, plan.gemm, |d| d.gemm(&g)),
        attention: draw_n(seed, 0xA77E, 2, plan.attention, |d| {
            d.attention(plan.max_seq)
        }),
        moe: draw_n(seed, 0x30E, 3, plan.moe, |d| {
            let p = d.moe();
            // Masked problems are replayed from a CUDA graph a third of the time.
            let graph = p.is_masked() && d.chance(1.0 / 3.0);
            (p, if graph { Mode::Graph } else { Mode::Direct })
        }),
        fp8: draw_n(seed, 0xF8, 4, plan.fp8, Draw::fp8),
        moe_layer: draw_n(seed, 0x1A7E, 5, plan.moe_layer, draw_layer),
    }
}

/// The versions a plan runs: kiln's own (never the vendor's, never the test-only ones), or the
/// ones it names, each of which must exist in some op.
#[derive(Default)]
pub struct Versions<'a> {
    pub gemm: Vec<&'a dyn GemmKernel>,
    pub attention: Vec<&'a dyn AttentionKernel>,
    pub moe: Vec<&'a dyn MoeKernel>,
    /// Whether the FP8 GEMM runs (it has one version).
    pub fp8: bool,
    /// Whether the MoE layer runs (it is one pipeline).
    pub moe_layer: bool,
}

pub fn versions<'a>(registry: &'a Registry, plan: &FuzzPlan) -> Result<Versions<'a>> {
    let wanted = |name: &str| plan.versions.is_empty() || plan.versions.iter().any(|v| v == name);
    let v = Versions {
        gemm: registry
            .gemm()
            .iter()
            .map(|k| k.as_ref())
            .filter(|k| !k.is_vendor() && k.name() != "planted" && wanted(k.name()))
            .collect(),
        attention: registry
            .attention()
            .iter()
            .map(|k| k.as_ref())
            .filter(|k| wanted(k.name()))
            .collect(),
        moe: registry
            .moe()
            .iter()
            .map(|k| k.as_ref())
            .filter(|k| wanted(k.name()))
            .collect(),
        fp8: wanted(FP8_VERSION),
        moe_layer: wanted(LAYER_VERSION),
    };
    for name in &plan.versions {
        let known = name == FP8_VERSION
            || name == LAYER_VERSION
            || v.gemm.iter().any(|k| k.name() == name)
            || v.attention.iter().any(|k| k.name() == name)
            || v.moe.iter().any(|k| k.name() == name);
        if !known {
            return Err(Error::invalid(format!(
                "unknown version `{name}` for the fuzz; `kiln versions` lists them (the vendor's is not fuzzed)"
            )));
        }
    }
    Ok(v)
}

/// What the plan needs compiled: the GEMM dispatch's variants for the drawn problems, every
/// attention and MoE variant of the versions run, and the fuzz's own kernels (the input fill
/// comes with the GEMM's).
pub fn compile_items(
    v: &Versions,
    drawn: &Drawn,
    dev: &DeviceInfo,
    tuned: &TunedTable,
) -> Vec<CheckItem> {
    let problems: Vec<GemmProblem> = drawn.gemm.iter().map(|(p, _)| *p).collect();
    let mut items = super::suite::suite_items(&v.gemm, &problems, dev, tuned);
    let arch = dev.arch();
    for k in &v.attention {
        items.extend(
            k.variants(&arch)
                .into_iter()
                .map(|s| ("attention", k.name(), s)),
        );
    }
    for k in &v.moe {
        items.extend(k.variants(&arch).into_iter().map(|s| ("moe", k.name(), s)));
    }
    if v.fp8 && !drawn.fp8.is_empty() {
        items.extend(
            crate::ops::fp8::variants(&arch)
                .into_iter()
                .map(|(v, s)| ("fp8", v, s)),
        );
    }
    if v.moe_layer && !drawn.moe_layer.is_empty() {
        let layer = crate::ops::moe::layer::NAME;
        items.extend(
            crate::ops::moe::layer::variants(&arch)
                .into_iter()
                .map(|s| ("moe", layer, s)),
        );
    }
    for s in gemm::specs(&arch) {
        items.push(("harness", "gemm_reference", s));
    }
    items
}

/// Runs every drawn problem on every version of its op, handing each verdict to `each` as it
/// lands (the CLI writes failures at once, so a crash loses nothing). Stops early on an error
/// that leaves the context unusable (a hang, a CUDA error), after reporting it as a failure.
pub fn run(
    ctx: &Context,
    v: &Versions,
    drawn: &Drawn,
    mut each: impl FnMut(&Verdict),
) -> Result<Tallies> {
    let mut tallies = Tallies::default();
    // Each verdict is charged the time since the one before: its check, and for the first
    // version of a problem, the problem's inputs and reference. An error that leaves the
    // context unusable is written as the case's failure, then ends the run.
    let mut last = std::time::Instant::now();
    let mut emit = |case: Case, o: Result<Outcome>| -> Result<()> {
        let (verdict, fatal) = Verdict::of(case, o);
        tallies.add(&verdict);
        tallies.charge(&verdict, last.elapsed().as_secs_f64());
        last = std::time::Instant::now();
        each(&verdict);
        fatal.map_or(Ok(()), Err)
    };
    let mut bufs = gemm::Buffers::default();
    for &(problem, seed) in &drawn.gemm {
        let checks = gemm::check_gemm(ctx, &mut bufs, &v.gemm, &problem, seed)?;
        for o in checks.outcomes {
            let version = o.check.clone();
            emit(
                Case::Gemm {
                    version,
                    problem,
                    seed,
                },
                Ok(o),
            )?;
        }
        if let Some(e) = checks.fatal {
            return Err(e);
        }
    }
    drop(bufs);
    for &(problem, seed) in &drawn.attention {
        // One set of inputs and one reference per problem, checked on every version that takes it.
        let mut fixture = if v
            .attention
            .iter()
            .any(|k| k.supports(&problem, &ctx.info).is_ok())
        {
            Some(AttnFixture::new(&problem, seed)?)
        } else {
            None
        };
        for k in &v.attention {
            let o = match &mut fixture {
                Some(f) => f.check(ctx, *k),
                None => verify_attention_seeded(ctx, *k, &problem, seed),
            };
            let version = k.name().into();
            emit(
                Case::Attention {
                    version,
                    problem,
                    seed,
                },
                o,
            )?;
        }
    }
    for ((problem, mode), seed) in &drawn.moe {
        let (mode, seed) = (*mode, *seed);
        let mut fixture = if v.moe.iter().any(|k| k.supports(problem, &ctx.info).is_ok()) {
            Some(MoeFixture::new(problem, seed)?)
        } else {
            None
        };
        for k in &v.moe {
            let o = match &mut fixture {
                Some(f) => f.check(ctx, *k, mode),
                None => verify_moe_seeded(ctx, *k, problem, mode, seed),
            };
            let (version, problem) = (k.name().into(), problem.clone());
            emit(
                Case::Moe {
                    version,
                    problem,
                    mode,
                    seed,
                },
                o,
            )?;
        }
    }
    for (case, seed) in drawn.moe_layer.iter().filter(|_| v.moe_layer) {
        let o = verify_layer_seeded(ctx, case, *seed);
        let (version, case, seed) = (LAYER_VERSION.into(), case.clone(), *seed);
        emit(
            Case::MoeLayer {
                version,
                case,
                seed,
            },
            o,
        )?;
    }
    for &((problem, recipe), seed) in drawn.fp8.iter().filter(|_| v.fp8) {
        let gc = Fp8Case {
            p: problem,
            cfg: None,
            recipe,
            data: Fp8Data::Signed,
        };
        // Against the exact reference's bound (the check also holds the error beyond the
        // output's rounding to the accumulation bound; its message says which failed).
        let bound = super::fp8::exact_bound(&problem);
        let o = verify_fp8_seeded(ctx, &gc, false, seed).map(|mut v| Outcome {
            bound,
            ..v.remove(0)
        });
        let version = FP8_VERSION.into();
        emit(
            Case::Fp8 {
                version,
                problem,
                recipe,
                seed,
            },
            o,
        )?;
    }
    Ok(tallies)
}

/// The FP8 GEMM's one version.
pub const FP8_VERSION: &str = crate::ops::fp8::gemm::NAME;
/// The MoE layer's one pipeline.
pub const LAYER_VERSION: &str = crate::ops::moe::layer::NAME;

/// Reruns one case exactly (same problem, same inputs, same version): the run of a plan that
/// holds only it.
pub fn rerun(ctx: &Context, registry: &Registry, case: &Case) -> Result<Verdict> {
    let (version, mut drawn) = (case.version(), Drawn::default());
    let mut v = Versions::default();
    match case.clone() {
        Case::Gemm { problem, seed, .. } => {
            v.gemm.push(registry.gemm_version(version)?);
            drawn.gemm.push((problem, seed));
        }
        Case::Attention { problem, seed, .. } => {
            v.attention.push(registry.attention_version(version)?);
            drawn.attention.push((problem, seed));
        }
        Case::Moe {
            problem,
            mode,
            seed,
            ..
        } => {
            v.moe.push(registry.moe_version(version)?);
            drawn.moe.push(((problem, mode), seed));
        }
        Case::MoeLayer { case, seed, .. } => {
            only(version, LAYER_VERSION, "MoE layer", "the layer's")?;
            v.moe_layer = true;
            drawn.moe_layer.push((case, seed));
        }
        Case::Fp8 {
            problem,
            recipe,
            seed,
            ..
        } => {
            only(version, FP8_VERSION, "FP8", "the FP8 GEMM's")?;
            v.fp8 = true;
            drawn.fp8.push(((problem, recipe), seed));
        }
    }
    let mut got = None;
    run(ctx, &v, &drawn, |v| got = Some(v.clone()))?;
    got.ok_or_else(|| Error::invalid(format!("the case {} ran no check", case.label())))
}

/// Refuses a `version` of an op (`what`) that has one, `name` (`whose` is it).
fn only(version: &str, name: &str, what: &str, whose: &str) -> Result<()> {
    if version != name {
        return Err(Error::invalid(format!(
            "unknown {what} version `{version}`; {whose} is {name}"
        )));
    }
    Ok(())
}

/// Reads repro records: one JSON [`Case`] per line (a fuzz's failures file), or one JSON value
/// holding a case or a list of them; blank lines are skipped.
pub fn parse_cases(text: &str) -> Result<Vec<Case>> {
    let trimmed = text.trim_start();
    if trimmed.starts_with('[') {
        return serde_json::from_str(trimmed)
            .map_err(|e| Error::invalid(format!("the repro file is not a list of cases: {e}")));
    }
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            // A failures line carries the case under "case"; a bare case is accepted too.
            let v: serde_json::Value = serde_json::from_str(l)
                .map_err(|e| Error::invalid(format!("repro line {}: not JSON: {e}", i + 1)))?;
            let v = v.get("case").cloned().unwrap_or(v);
            serde_json::from_value(v).map_err(|e| {
                Error::invalid(format!(
                    "repro line {}: not a case (op, version, problem, seed): {e}",
                    i + 1
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> FuzzPlan {
        FuzzPlan {
            seed: 42,
            gemm: 300,
            attention: 50,
            moe: 50,
            fp8: 30,
            moe_layer: 20,
            versions: vec![],
            max_seq: 2048,
        }
    }

    #[test]
    fn a_plan_draws_the_same_problems_and_seeds_every_time() {
        let (a, b) = (draw(&plan()), draw(&plan()));
        assert_eq!(a.gemm, b.gemm);
        assert_eq!(a.attention, b.attention);
        assert_eq!(a.moe, b.moe);
        assert_eq!(a.fp8, b.fp8);
        assert_eq!(a.moe_layer, b.moe_layer);
        let seeds: std::collections::HashSet<u64> = a.gemm.iter().map(|g| g.1).collect();
        assert_eq!(seeds.len(), a.gemm.len());
    }

    /// `kiln fuzz --seed 1` must keep drawing the same problems whatever the lab's code becomes:
    /// the first three of each op, as their labels and input seeds (what `--dry-run` lists).
    #[test]
    fn seed_one_draws_the_problems_it_always_drew() {
        let d = draw(&FuzzPlan {
            seed: 1,
            gemm: 3,
            attention: 3,
            moe: 3,
            fp8: 3,
            moe_layer: 3,
            versions: vec![],
            max_seq: 4096,
        });
        let got = d.cases("").map(|cases| {
            cases
                .iter()
                .map(|c| format!("{} {}", c.label(), c.seed()))
                .collect::<Vec<_>>()
        });
        let want: [&[&str]; 5] = [
            &[
                "6x101x54 CR f16->f16 11040000246860676903",
                "877x820x26 RC bf16->f16 11029405633654921010",
                "768x1388x4 CC bf16->f16 9981305530155382927",
            ],
            &[
                "b2 h6/3 s37x22 d64 causal BHSD f16 16462317210069915044",
                "b3 h3/3 s3x1535 d128 BHSD f16 17056063895171165700",
                "b3 h2/1 s13x13 d256 BHSD f16 1938289790824430403",
            ],
            &[
                "E=133 masked 133x51 rows=45 N=768 K=120 bf16->bf16 swiglu(interleaved,routed) (Direct) 6704740955775670849",
                "E=1 masked 1x1771 rows=1768 N=128 K=64 bf16->bf16 swiglu(separate,routed) (Direct) 9045539604134961831",
                "E=1 rows=1671 N=8 K=344 bf16->bf16 (Direct) 1760999043011253497",
            ],
            &[
                "420x2514x32 e5m2xe4m3 block scales -> f16 (Fp32 scales) 12953474308302013799",
                "825x7x128 e5m2xe5m2 row scales -> f16 (Ue8m0 scales) 14521913318817163602",
                "1741x817x160 e4m3xe4m3 block scales -> f16 (Ue8m0 scales) 7623051592285743581",
            ],
            &[
                "layer t=2 e=69 k=6 h=24 i=72 f16 sigmoid renorm atomic 3581462602711141215",
                "layer t=38 e=146 k=3 h=56 i=24 f16 given top-k (i64) atomic 10162975698976981879",
                "layer t=32 e=2 k=1 h=80 i=24 f16 sigmoid bias atomic 9384829905902220092",
            ],
        ];
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g, w, "{got:#?}");
        }
        // The GEMM's strides and scalars are drawn too, and are not in its label.
        let extra: Vec<String> = d
            .gemm
            .iter()
            .map(|(p, _)| format!("{} {} {} {} {}", p.lda, p.ldb, p.ldc, p.alpha, p.beta))
            .collect();
        assert_eq!(
            extra,
            ["6 101 101 0 -1.2875233", "26 26 820 -1 0", "768 4 1388 1 0"]
        );
    }

    #[test]
    fn cases_round_trip_through_a_failures_file() {
        let d = draw(&plan());
        let cases = vec![
            Case::Gemm {
                version: "wgmma_tma_ws".into(),
                problem: d.gemm[3].0,
                seed: d.gemm[3].1,
            },
            Case::Attention {
                version: "fa3_wgmma".into(),
                problem: d.attention[1].0,
                seed: 7,
            },
            Case::Moe {
                version: "swiglu_dual".into(),
                problem: d.moe[2].0 .0.clone(),
                mode: Mode::Graph,
                seed: 9,
            },
            Case::MoeLayer {
                version: LAYER_VERSION.into(),
                case: d.moe_layer[3].0.clone(),
                seed: 11,
            },
            Case::Fp8 {
                version: FP8_VERSION.into(),
                problem: d.fp8[4].0 .0,
                recipe: d.fp8[4].0 .1,
                seed: 11,
            },
        ];
        let lines: Vec<String> = cases
            .iter()
            .map(|c| {
                let v = Verdict {
                    case: c.clone(),
                    passed: false,
                    skipped: None,
                    rel_error: 1.0,
                    bound: 4e-3,
                    message: "x".into(),
                };
                serde_json::to_string(&v).unwrap()
            })
            .collect();
        assert_eq!(parse_cases(&lines.join("\n")).unwrap(), cases);
        let list = serde_json::to_string(&cases).unwrap();
        assert_eq!(parse_cases(&list).unwrap(), cases);
        let err = parse_cases("{\"op\":\"gemm\"}").unwrap_err().to_string();
        assert!(err.contains("repro line 1"), "{err}");
    }

    #[test]
    fn tallies_count_skips_apart_and_keep_the_worst_error() {
        let case = Case::Gemm {
            version: "v".into(),
            problem: draw(&plan()).gemm[0].0,
            seed: 1,
        };
        let mut t = Tallies::default();
        for (passed, skipped, rel) in [(true, None, 1e-3), (true, None, 2e-3), (false, None, 1.0)] {
            t.add(&Verdict {
                case: case.clone(),
                passed,
                skipped,
                rel_error: rel,
                bound: 4e-3,
                message: String::new(),
            });
        }
        t.add(&Verdict {
            case,
            passed: true,
            skipped: Some("no".into()),
            rel_error: f64::NAN,
            bound: 4e-3,
            message: String::new(),
        });
        let v = &t.0[0];
        assert_eq!((v.checks, v.passed, v.failed, v.skipped), (3, 2, 1, 1));
        assert!((v.worst_of_bound - 0.5).abs() < 1e-12);
        assert_eq!(t.failed(), 1);
    }
}
