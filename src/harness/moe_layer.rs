//! The MoE layer's check cases and their inputs: X and the expert weights filled on the GPU
//! (`counter_fill`, regenerated on the host by the reference as it reads them, so no host copy
//! of the weights is made), the routing's inputs drawn on the host (logits, exactly tied when
//! asked; a bias; or a precomputed top-k with an id out of range when asked), the output
//! poisoned, the workspace; and the layer launched directly or replayed from a CUDA graph
//! captured over other routing inputs. The shape suites live here too.

use std::time::Duration;

use half::{bf16, f16};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};

use super::device_data::{counter_value, random_buffer};
use super::draw::Draw;
use super::moe_verify::{replay_with_rows, settle};
use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::ops::gemm::DType;
use crate::ops::moe::layer::{self, CombineMode, LayerLayout, LayerOperands, LayerProblem};
use crate::ops::moe::route::{RouteOperands, RouteOptions, RouteProblem, RouteSource, Scoring};
use crate::reference::moe_layer::Source;

/// One layer check: the problem and how its inputs and launch are made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LayerCase {
    pub problem: LayerProblem,
    /// Logits (and bias) drawn from a few values, so that many keys tie exactly.
    pub ties: bool,
    /// A precomputed routing with token 0's first id out of range: that token must come out
    /// NaN, every other as usual.
    pub dropped: bool,
    /// Replayed from a CUDA graph captured while the routing input was all zeros.
    pub graph: bool,
}

impl LayerCase {
    pub fn of(problem: LayerProblem) -> LayerCase {
        LayerCase {
            problem,
            ties: false,
            dropped: false,
            graph: false,
        }
    }

    pub fn label(&self) -> String {
        let mut s = self.problem.label();
        for (on, what) in [
            (self.ties, " ties"),
            (self.dropped, " dropped"),
            (self.graph, " graph"),
        ] {
            if on {
                s += what;
            }
        }
        s
    }
}

/// Values regenerated from a GPU fill's seed ([`counter_value`]).
pub struct Counter(pub u64);

impl Source for Counter {
    fn get(&self, i: usize) -> f64 {
        counter_value(self.0, i as u64)
    }
}

/// Token `t`'s hidden row of X filled from `seed` (`hidden` values).
pub fn x_row(seed: u64, hidden: usize, t: usize) -> Vec<f64> {
    (0..hidden)
        .map(|c| counter_value(seed, (t * hidden + c) as u64))
        .collect()
}

/// The seeds of X, W13 and W2, and of the routing inputs, from a check's seed.
pub fn seeds(seed: u64) -> [u64; 4] {
    [
        seed,
        seed.wrapping_add(1),
        seed.wrapping_add(2),
        seed.wrapping_add(3),
    ]
}

/// The routing's inputs of one check, as uploaded and as the reference reads them.
pub struct RouteInputs {
    /// The logits or ids, as bytes.
    pub input: Vec<u8>,
    /// The precomputed weights as bytes (empty with logits).
    pub weights: Vec<u8>,
    pub bias: Option<Vec<f32>>,
    pub logits: Vec<f64>,
    pub ids: Vec<i64>,
    pub weights_f64: Vec<f64>,
}

fn bytes_of(v: &[f64], dtype: DType) -> Vec<u8> {
    match dtype {
        DType::Bf16 => v
            .iter()
            .flat_map(|&x| bf16::from_f64(x).to_le_bytes())
            .collect(),
        DType::F16 => v
            .iter()
            .flat_map(|&x| f16::from_f64(x).to_le_bytes())
            .collect(),
        DType::F32 => v.iter().flat_map(|&x| (x as f32).to_le_bytes()).collect(),
    }
}

/// The values `bytes_of` stores, read back.
fn rounded(v: &[f64], dtype: DType) -> Vec<f64> {
    match dtype {
        DType::Bf16 => v.iter().map(|&x| bf16::from_f64(x).to_f64()).collect(),
        DType::F16 => v.iter().map(|&x| f16::from_f64(x).to_f64()).collect(),
        DType::F32 => v.iter().map(|&x| x as f32 as f64).collect(),
    }
}

impl RouteInputs {
    pub fn draw(c: &LayerCase, seed: u64) -> RouteInputs {
        let r = &c.problem.route;
        let (t, e) = (r.tokens, r.experts);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        match r.source {
            RouteSource::Logits { dtype, bias, .. } => {
                // ties: a few values a half apart; else uniform in [-3, 3)
                let raw: Vec<f64> = (0..t * e)
                    .map(|_| {
                        if c.ties {
                            rng.gen_range(0..4) as f64 * 0.5
                        } else {
                            rng.gen_range(-3.0..3.0)
                        }
                    })
                    .collect();
                let bias = bias.then(|| {
                    (0..e)
                        .map(|_| {
                            if c.ties {
                                rng.gen_range(0..2) as f32 * 0.25
                            } else {
                                rng.gen_range(-0.1f32..0.1)
                            }
                        })
                        .collect()
                });
                RouteInputs {
                    input: bytes_of(&raw, dtype),
                    weights: Vec::new(),
                    bias,
                    logits: rounded(&raw, dtype),
                    ids: Vec::new(),
                    weights_f64: Vec::new(),
                }
            }
            RouteSource::TopK {
                top_k,
                ids_i64,
                weights,
                full,
            } => {
                let mut all: Vec<i64> = (0..e as i64).collect();
                let mut ids = Vec::with_capacity(t * top_k);
                for _ in 0..t {
                    all.shuffle(&mut rng);
                    ids.extend_from_slice(&all[..top_k]);
                }
                if c.dropped {
                    ids[0] = e as i64;
                }
                let n = if full { t * e } else { t * top_k };
                let raw: Vec<f64> = (0..n).map(|_| rng.gen_range(0.0..1.0)).collect();
                let input = if ids_i64 {
                    ids.iter().flat_map(|v| v.to_le_bytes()).collect()
                } else {
                    ids.iter().flat_map(|&v| (v as i32).to_le_bytes()).collect()
                };
                RouteInputs {
                    input,
                    weights: bytes_of(&raw, weights),
                    bias: None,
                    logits: Vec::new(),
                    ids,
                    weights_f64: rounded(&raw, weights),
                }
            }
        }
    }
}

/// The device memory of one check.
pub struct LayerBuffers {
    pub x: DeviceBuffer,
    pub w13: DeviceBuffer,
    pub w2: DeviceBuffer,
    pub input: DeviceBuffer,
    pub weights: Option<DeviceBuffer>,
    pub bias: Option<DeviceBuffer>,
    pub out: DeviceBuffer,
    pub ws: DeviceBuffer,
}

impl LayerBuffers {
    /// X and the weights filled on the GPU from `seed`, the routing inputs uploaded, the output
    /// poisoned (all-ones bits: NaN); waits until all has landed.
    pub fn new(
        ctx: &Context,
        p: &LayerProblem,
        inp: &RouteInputs,
        seed: u64,
    ) -> Result<LayerBuffers> {
        let [sx, s13, s2, _] = seeds(seed);
        let (t, e, h, i) = (p.tokens(), p.experts(), p.hidden, p.inter);
        let up = |b: &[u8]| DeviceBuffer::from_host(b);
        let b = LayerBuffers {
            x: random_buffer(ctx, p.dtype, t * h, sx)?,
            w13: random_buffer(ctx, p.dtype, e * 2 * i * h, s13)?,
            w2: random_buffer(ctx, p.dtype, e * h * i, s2)?,
            input: up(&inp.input)?,
            weights: (!inp.weights.is_empty())
                .then(|| up(&inp.weights))
                .transpose()?,
            bias: inp
                .bias
                .as_ref()
                .map(|v| DeviceBuffer::from_host(v))
                .transpose()?,
            out: ctx.alloc(t * h * p.dtype.size())?,
            ws: ctx.alloc(LayerLayout::of(p).bytes)?,
        };
        b.out.fill_bytes(0xFF, ctx)?;
        ctx.synchronize()?;
        settle()?;
        Ok(b)
    }

    pub fn operands(&self) -> LayerOperands {
        LayerOperands {
            x: self.x.ptr(),
            w13: self.w13.ptr(),
            w2: self.w2.ptr(),
            route: RouteOperands {
                input: self.input.ptr(),
                weights: self.weights.as_ref().map_or(0, DeviceBuffer::ptr),
                bias: self.bias.as_ref().map_or(0, DeviceBuffer::ptr),
                workspace: self.ws.ptr(),
            },
            out: self.out.ptr(),
        }
    }

    /// Enqueues the layer on the context's stream.
    pub fn launch(&self, ctx: &Context, p: &LayerProblem) -> Result<()> {
        // SAFETY: every buffer was sized for `p` above and lives as long as `self`, which the
        // callers keep until they have synchronised.
        unsafe { layer::launch(ctx, p, &self.operands(), self.ws.ptr()) }
    }

    /// Runs the layer once (directly, or replayed from a graph captured over zeroed routing
    /// inputs) and waits for it.
    pub fn run(&self, ctx: &Context, c: &LayerCase, inp: &RouteInputs) -> Result<()> {
        let p = &c.problem;
        let limit = Duration::from_secs_f64(10.0 + p.flops() / 1e11);
        let what = format!("the MoE layer on {}", c.label());
        if c.graph {
            let zeros = vec![0u8; inp.input.len()];
            replay_with_rows(
                ctx,
                &|| self.launch(ctx, p),
                &self.input,
                &zeros,
                &inp.input,
                limit,
                &what,
            )
        } else {
            self.launch(ctx, p)?;
            ctx.synchronize_within(limit, &what)
        }
    }
}

/// A bf16 layer of `t` tokens, `e` experts, hidden `h`, width `i`, routed as `source`, the
/// atomic combine.
pub fn problem(t: usize, e: usize, h: usize, i: usize, source: RouteSource) -> LayerProblem {
    LayerProblem {
        route: RouteProblem {
            tokens: t,
            experts: e,
            source,
        },
        hidden: h,
        inter: i,
        dtype: DType::Bf16,
        combine: CombineMode::Atomic,
    }
}

fn logits(k: usize, scoring: Scoring) -> RouteSource {
    RouteSource::Logits {
        dtype: DType::F32,
        bias: false,
        opts: RouteOptions::top_k(k, scoring),
    }
}

/// transformers' experts interface: i64 ids and f32 weights [T, k].
pub fn given(k: usize) -> RouteSource {
    RouteSource::TopK {
        top_k: k,
        ids_i64: true,
        weights: DType::F32,
        full: false,
    }
}

/// Mixtral's routing from bf16 logits: softmax, top-k, renormalised.
pub fn softmax(k: usize) -> RouteSource {
    RouteSource::Logits {
        dtype: DType::Bf16,
        bias: false,
        opts: RouteOptions {
            renormalize: true,
            ..RouteOptions::top_k(k, Scoring::Softmax)
        },
    }
}

/// DeepSeek-V3's routing: sigmoid, groups, a bias, renormalised and scaled.
fn deepseek(k: usize, groups: (usize, usize)) -> RouteSource {
    RouteSource::Logits {
        dtype: DType::F32,
        bias: true,
        opts: RouteOptions {
            renormalize: true,
            groups: Some(groups),
            routed_scaling: 2.5,
            ..RouteOptions::top_k(k, Scoring::Sigmoid)
        },
    }
}

/// The layer suite: `quick` holds the boundaries (one token, tokens not a multiple of any
/// tile, experts with no rows, top_k 1 and = E, exact ties, both combines, f16, the routing's
/// one- and two-launch paths, every routing option, precomputed ids in i64 and i32 with [T, k]
/// and [T, E] weights, an id out of range, a graph replay); `full` adds the shapes at
/// 4,096 tokens and a long odd-sized one.
pub fn layer_suite(full: bool) -> Vec<LayerCase> {
    let tied = |p| LayerCase {
        ties: true,
        ..LayerCase::of(p)
    };
    let dropped = |p| LayerCase {
        dropped: true,
        ..LayerCase::of(p)
    };
    let graphed = |p| LayerCase {
        graph: true,
        ..LayerCase::of(p)
    };
    let mut v = vec![
        LayerCase::of(problem(1, 8, 256, 128, softmax(2))),
        LayerCase::of(problem(7, 64, 512, 256, given(8))),
        LayerCase::of(problem(33, 16, 264, 136, logits(4, Scoring::Softmax))),
        LayerCase::of(problem(5, 64, 256, 128, logits(2, Scoring::Sigmoid))),
        LayerCase::of(problem(129, 4, 256, 256, given(4))),
        LayerCase::of(problem(200, 32, 384, 192, logits(1, Scoring::Softmax))),
        LayerCase::of(problem(300, 128, 1024, 768, given(8))),
        LayerCase::of(problem(50, 64, 256, 128, deepseek(6, (8, 4)))),
        LayerCase::of(problem(1000, 256, 512, 256, deepseek(8, (8, 4)))),
        tied(problem(64, 16, 256, 128, softmax(4))),
        tied(problem(40, 32, 256, 128, deepseek(4, (4, 2)))),
        dropped(problem(9, 8, 256, 128, given(2))),
        graphed(problem(24, 16, 256, 128, logits(2, Scoring::Softmax))),
        graphed(problem(100, 64, 512, 256, given(8))),
    ];
    // precomputed i32 ids with [T, E] bf16 weights
    v.push(LayerCase::of(problem(
        70,
        16,
        256,
        128,
        RouteSource::TopK {
            top_k: 3,
            ids_i64: false,
            weights: DType::Bf16,
            full: true,
        },
    )));
    // the ordered combine, and f16
    let ordered = |mut c: LayerCase| {
        c.problem.combine = CombineMode::Ordered;
        c
    };
    v.push(ordered(LayerCase::of(problem(7, 64, 512, 256, given(8)))));
    v.push(ordered(dropped(problem(33, 8, 256, 128, given(3)))));
    let mut f16 = LayerCase::of(problem(77, 32, 256, 256, logits(4, Scoring::Softmax)));
    f16.problem.dtype = DType::F16;
    v.push(f16.clone());
    v.push(ordered(f16));
    if full {
        for (e, i) in [(64, 1408), (128, 768)] {
            for t in [1, 64, 4096] {
                v.push(LayerCase::of(problem(t, e, 2048, i, given(8))));
            }
            v.push(ordered(LayerCase::of(problem(4096, e, 2048, i, given(8)))));
        }
        v.push(LayerCase::of(problem(
            4000,
            60,
            1000,
            360,
            logits(6, Scoring::Softmax),
        )));
    }
    v
}

/// A random layer case for `kiln fuzz`: any size the kernels take (tokens 1-2048, experts
/// 1-256, top_k 1-8 or = E, H and I multiples of 8), every routing source and option, both
/// dtypes and combines; exact ties, a dropped pair or a graph replay now and then.
pub fn draw_case(d: &mut Draw) -> LayerCase {
    loop {
        let e = d.log_uniform(256);
        let k = if d.chance(0.1) {
            e
        } else {
            d.uniform(1, e.min(8))
        };
        let (t, h, i) = (
            d.log_uniform(2048),
            8 * d.log_uniform(256),
            8 * d.log_uniform(192),
        );
        let source = if d.chance(0.5) {
            RouteSource::TopK {
                top_k: k,
                ids_i64: d.chance(0.7),
                weights: d.pick(&[DType::F32, DType::Bf16, DType::F16]),
                full: k != e && d.chance(0.2),
            }
        } else {
            let divisors: Vec<usize> = (2..=e.min(32)).filter(|g| e.is_multiple_of(*g)).collect();
            let groups = (!divisors.is_empty() && d.chance(0.3)).then(|| {
                let g = d.pick(&divisors);
                let least = k.div_ceil(e / g);
                (g, d.uniform(least.min(g), g))
            });
            RouteSource::Logits {
                dtype: d.pick(&[DType::F32, DType::Bf16, DType::F16]),
                bias: d.chance(0.3),
                opts: RouteOptions {
                    top_k: k,
                    scoring: d.pick(&[Scoring::Softmax, Scoring::Sigmoid]),
                    renormalize: d.chance(0.5),
                    groups,
                    routed_scaling: if d.chance(0.2) { 2.5 } else { 1.0 },
                },
            }
        };
        let mut p = problem(t, e, h, i, source);
        p.dtype = d.pick(&[DType::Bf16, DType::F16]);
        if d.chance(0.3) {
            p.combine = CombineMode::Ordered;
        }
        let given = matches!(source, RouteSource::TopK { .. });
        let c = LayerCase {
            problem: p,
            ties: !given && d.chance(0.2),
            dropped: given && d.chance(0.1),
            graph: d.chance(0.15),
        };
        // device memory of the weights under 1 GiB
        if e * h * i <= 1 << 28 && c.problem.validate().is_ok() {
            return c;
        }
    }
}

/// `quick` or `full`.
pub fn parse_suite(s: &str) -> Result<bool> {
    match s {
        "quick" => Ok(false),
        "full" => Ok(true),
        other => Err(Error::invalid(format!(
            "the layer suite `{other}` is not one kiln has; use quick or full"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_suite_case_is_a_valid_layer() {
        for c in layer_suite(true) {
            c.problem
                .validate()
                .unwrap_or_else(|e| panic!("{}: {e}", c.label()));
        }
        assert!(layer_suite(false).len() >= 18);
    }

    #[test]
    fn drawn_routing_inputs_have_the_problem_s_sizes() {
        for c in layer_suite(false) {
            let r = RouteInputs::draw(&c, 7);
            let p = &c.problem.route;
            match p.source {
                RouteSource::Logits { dtype, bias, .. } => {
                    assert_eq!(r.input.len(), p.tokens * p.experts * dtype.size());
                    assert_eq!(r.bias.is_some(), bias);
                }
                RouteSource::TopK {
                    top_k,
                    ids_i64,
                    full,
                    weights,
                } => {
                    assert_eq!(
                        r.input.len(),
                        p.tokens * top_k * if ids_i64 { 8 } else { 4 }
                    );
                    let n = if full {
                        p.tokens * p.experts
                    } else {
                        p.tokens * top_k
                    };
                    assert_eq!(r.weights.len(), n * weights.size());
                    // distinct ids per token
                    for t in 0..p.tokens {
                        let mut row = r.ids[t * top_k..(t + 1) * top_k].to_vec();
                        row.sort_unstable();
                        row.dedup();
                        assert_eq!(row.len(), top_k);
                    }
                    assert_eq!(c.dropped, r.ids[0] == p.experts as i64);
                }
            }
        }
    }

    #[test]
    fn drawn_cases_are_valid_and_cover_the_options() {
        let mut d = Draw::new(5);
        let cases: Vec<LayerCase> = (0..300).map(|_| draw_case(&mut d)).collect();
        for c in &cases {
            c.problem.validate().unwrap();
        }
        let any = |f: &dyn Fn(&LayerCase) -> bool| cases.iter().any(f);
        assert!(any(&|c| c.graph) && any(&|c| c.ties) && any(&|c| c.dropped));
        assert!(any(&|c| c.problem.combine == CombineMode::Ordered));
        assert!(any(
            &|c| c.problem.top_k() == c.problem.experts() && c.problem.experts() > 1
        ));
        assert!(any(&|c| matches!(
            c.problem.route.source,
            RouteSource::Logits {
                opts: RouteOptions {
                    groups: Some(_),
                    ..
                },
                bias: true,
                ..
            }
        )));
    }

    #[test]
    fn tied_logits_tie() {
        let c = LayerCase {
            ties: true,
            ..LayerCase::of(problem(8, 16, 256, 128, logits(4, Scoring::Softmax)))
        };
        let r = RouteInputs::draw(&c, 3);
        let mut v = r.logits[..16].to_vec();
        v.sort_by(f64::total_cmp);
        v.dedup();
        assert!(v.len() <= 4);
    }
}
