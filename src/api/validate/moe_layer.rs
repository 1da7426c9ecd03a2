//! MoE layer arguments: hidden states, transformers' expert weights (`gate_up_proj` [E, 2I, H],
//! `down_proj` [E, H, I]), the routing (router logits with the routing options, or a
//! precomputed top-k) and the output, to a `LayerProblem`; one sentence naming the argument
//! that is wrong.

use super::{
    aligned16, contiguous, dtype_in, err, float, no_alias, on_device, rank, same_dtype, Operand,
    HALF,
};
use crate::api::dtype::DType;
use crate::api::info::TensorInfo;
use crate::error::{ArgumentKind, Result};
use crate::ops::moe::layer::{CombineMode, LayerProblem};
use crate::ops::moe::route::{RouteOptions, RouteProblem, RouteSource, MAX_GROUPS};
use crate::ops::moe::schedule::MAX_EXPERTS;
use std::hash::Hash;

/// Where a layer's routing comes from, as tensors of type `T`.
#[derive(Debug, Clone, Copy)]
pub enum MoeRouting<T> {
    /// Router logits [T, E] (bf16, f16 or f32), an f32 selection bias [E] (DeepSeek-V3's
    /// `e_score_correction_bias`: moves the choice, not the weights), and the options.
    Logits {
        logits: T,
        bias: Option<T>,
        opts: RouteOptions,
    },
    /// transformers' experts interface: `top_k_index` [T, k] (i64 or i32) and `top_k_weights`
    /// [T, k] or [T, E] (f32, bf16 or f16), used as given.
    TopK { index: T, weights: T },
}

impl MoeRouting<crate::api::tensor::RawTensor> {
    /// The routing's descriptions checked, each under its argument's name.
    pub fn infos(&self) -> Result<MoeRouting<TensorInfo>> {
        Ok(match self {
            MoeRouting::Logits { logits, bias, opts } => MoeRouting::Logits {
                logits: logits.info("router_logits", false)?,
                bias: bias.as_ref().map(|b| b.info("bias", false)).transpose()?,
                opts: *opts,
            },
            MoeRouting::TopK { index, weights } => MoeRouting::TopK {
                index: index.info("top_k_index", false)?,
                weights: weights.info("top_k_weights", false)?,
            },
        })
    }
}

impl MoeRouting<TensorInfo> {
    /// The same routing by reference.
    pub fn as_refs(&self) -> MoeRouting<&TensorInfo> {
        match self {
            MoeRouting::Logits { logits, bias, opts } => MoeRouting::Logits {
                logits,
                bias: bias.as_ref(),
                opts: *opts,
            },
            MoeRouting::TopK { index, weights } => MoeRouting::TopK { index, weights },
        }
    }
}

impl<T: Copy> MoeRouting<T> {
    /// Each tensor with its argument's name.
    pub fn tensors(&self) -> Vec<(&'static str, T)> {
        match *self {
            MoeRouting::Logits { logits, bias, .. } => std::iter::once(("router_logits", logits))
                .chain(bias.map(|b| ("bias", b)))
                .collect(),
            MoeRouting::TopK { index, weights } => {
                vec![("top_k_index", index), ("top_k_weights", weights)]
            }
        }
    }
}

impl MoeRouting<&TensorInfo> {
    /// The memory of (the logits or the ids, the precomputed weights, the bias).
    pub fn operands(&self) -> (Operand, Option<Operand>, Option<Operand>) {
        match *self {
            MoeRouting::Logits { logits, bias, .. } => {
                (Operand::of(logits), None, bias.map(Operand::of))
            }
            MoeRouting::TopK { index, weights } => {
                (Operand::of(index), Some(Operand::of(weights)), None)
            }
        }
    }
}

impl<T> MoeRouting<T> {
    pub fn map<U>(&self, mut f: impl FnMut(&T, &str) -> U) -> MoeRouting<U> {
        match self {
            MoeRouting::Logits { logits, bias, opts } => MoeRouting::Logits {
                logits: f(logits, "router_logits"),
                bias: bias.as_ref().map(|b| f(b, "bias")),
                opts: *opts,
            },
            MoeRouting::TopK { index, weights } => MoeRouting::TopK {
                index: f(index, "top_k_index"),
                weights: f(weights, "top_k_weights"),
            },
        }
    }
}

/// A checked layer call: the problem and the memory of each tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct LayerPlan {
    pub problem: LayerProblem,
    pub x: Operand,
    pub w13: Operand,
    pub w2: Operand,
    /// The logits, or the precomputed ids.
    pub input: Operand,
    /// The precomputed weights.
    pub weights: Option<Operand>,
    pub bias: Option<Operand>,
    pub out: Operand,
}

impl LayerPlan {
    /// What the launch depends on besides data: the problem (every size is in it) and the
    /// alignment of the operands TMA reads, hashed as it is (a warm call formats nothing).
    pub fn key(&self) -> impl Hash + Eq + std::fmt::Debug {
        let p = &self.problem;
        (
            p.route.key(),
            (p.hidden, p.inter, p.dtype, p.combine),
            [self.x, self.w13, self.w2].map(|o| o.align_class()),
        )
    }
}

fn shape_err(arg: &str, m: String) -> crate::Error {
    err(arg, ArgumentKind::Shape, m)
}

/// Checks a layer call: `x` [T, H], `w13` [E, 2I, H], `w2` [E, H, I], the routing, `out` [T, H].
#[allow(clippy::too_many_arguments)]
pub fn moe_layer(
    device: usize,
    x: &TensorInfo,
    w13: &TensorInfo,
    w2: &TensorInfo,
    routing: &MoeRouting<&TensorInfo>,
    out: &TensorInfo,
    combine: CombineMode,
) -> Result<Option<LayerPlan>> {
    let mut all: Vec<(&str, &TensorInfo)> = vec![
        ("hidden_states", x),
        ("gate_up_proj", w13),
        ("down_proj", w2),
        ("out", out),
    ];
    all.extend(routing.tensors());
    for (name, t) in &all {
        on_device(name, t, device)?;
    }
    rank(
        "hidden_states",
        x,
        2,
        "the MoE layer takes it as [tokens, hidden]",
    )?;
    rank(
        "gate_up_proj",
        w13,
        3,
        "the MoE layer takes it as [experts, 2 intermediate, hidden]",
    )?;
    rank(
        "down_proj",
        w2,
        3,
        "the MoE layer takes it as [experts, hidden, intermediate]",
    )?;
    rank("out", out, 2, "it has the shape of `hidden_states`")?;
    dtype_in("hidden_states", x, &HALF, "the MoE layer takes bf16 or f16")?;
    let weights_dtype = "the MoE layer takes weights of `hidden_states`'s dtype";
    same_dtype("gate_up_proj", w13, "hidden_states", x, weights_dtype)?;
    same_dtype("down_proj", w2, "hidden_states", x, weights_dtype)?;
    same_dtype(
        "out",
        out,
        "hidden_states",
        x,
        "the layer writes `hidden_states`'s dtype",
    )?;
    let (t, h) = (x.shape()[0], x.shape()[1]);
    let [e, two_i, h13] = [w13.shape()[0], w13.shape()[1], w13.shape()[2]];
    if h13 != h {
        return Err(shape_err(
            "gate_up_proj",
            format!("`gate_up_proj` is {} but `hidden_states` has hidden size {h}; it must be [experts, 2 intermediate, {h}]", w13.shape_text()),
        ));
    }
    if two_i % 2 != 0 {
        return Err(shape_err(
            "gate_up_proj",
            format!("`gate_up_proj` has {two_i} rows per expert; gate and up rows need an even count (rows 0..I gate, I..2I up)"),
        ));
    }
    let i = two_i / 2;
    if w2.shape() != [e, h, i] {
        return Err(shape_err(
            "down_proj",
            format!(
                "`down_proj` is {} but `gate_up_proj` {} and `hidden_states` {} need [{e}, {h}, {i}]",
                w2.shape_text(),
                w13.shape_text(),
                x.shape_text()
            ),
        ));
    }
    if out.shape() != x.shape() {
        return Err(shape_err(
            "out",
            format!(
                "`out` is {} but `hidden_states` is {}",
                out.shape_text(),
                x.shape_text()
            ),
        ));
    }
    if e == 0 || e > MAX_EXPERTS {
        return Err(shape_err(
            "gate_up_proj",
            format!("`gate_up_proj` has {e} experts; the MoE layer takes 1 to {MAX_EXPERTS}"),
        ));
    }
    let source = route_source(routing, t, e)?;
    if t == 0 {
        return Ok(None);
    }
    for (name, tensor) in [
        ("hidden_states", x),
        ("gate_up_proj", w13),
        ("down_proj", w2),
        ("out", out),
    ] {
        contiguous(name, tensor, "the MoE layer reads and writes packed rows")?;
        aligned16(
            name,
            tensor,
            "the MoE layer reads it with TMA and 16-byte vectors",
        )?;
    }
    let inputs: Vec<(&str, &TensorInfo)> =
        all.iter().copied().filter(|(n, _)| *n != "out").collect();
    no_alias("out", out, &inputs)?;
    let problem = LayerProblem {
        route: RouteProblem {
            tokens: t,
            experts: e,
            source,
        },
        hidden: h,
        inter: i,
        dtype: float("hidden_states", x)?,
        combine,
    };
    problem.validate()?;
    let (input, weights, bias) = routing.operands();
    Ok(Some(LayerPlan {
        problem,
        x: Operand::of(x),
        w13: Operand::of(w13),
        w2: Operand::of(w2),
        input,
        weights,
        bias,
        out: Operand::of(out),
    }))
}

/// The routing's source from its tensors, for `t` tokens over `e` experts; one sentence naming
/// the argument that is wrong.
pub fn route_source(routing: &MoeRouting<&TensorInfo>, t: usize, e: usize) -> Result<RouteSource> {
    Ok(match *routing {
        MoeRouting::Logits { logits, bias, opts } => {
            rank(
                "router_logits",
                logits,
                2,
                "the MoE layer takes it as [tokens, experts]",
            )?;
            dtype_in(
                "router_logits",
                logits,
                &[DType::Bf16, DType::F16, DType::F32],
                "the MoE layer's routing takes bf16, f16 or f32 logits",
            )?;
            if logits.shape() != [t, e] {
                return Err(shape_err(
                    "router_logits",
                    format!("`router_logits` is {} but the layer has {t} tokens and {e} experts: it must be [{t}, {e}]", logits.shape_text()),
                ));
            }
            contiguous("router_logits", logits, "the routing reads packed rows")?;
            if let Some(b) = bias {
                rank("bias", b, 1, "the selection bias is one f32 per expert")?;
                dtype_in("bias", b, &[DType::F32], "the selection bias is f32")?;
                if b.shape()[0] != e {
                    return Err(shape_err(
                        "bias",
                        format!("`bias` has {} values for {e} experts", b.shape()[0]),
                    ));
                }
                contiguous("bias", b, "the routing reads it packed")?;
            }
            if opts.top_k == 0 || opts.top_k > e {
                return Err(err(
                    "top_k",
                    ArgumentKind::Value,
                    format!(
                        "`top_k` = {} with {e} experts; it must be 1 to the number of experts",
                        opts.top_k
                    ),
                ));
            }
            if let Some((g, kg)) = opts.groups {
                if g == 0 || g > MAX_GROUPS || !e.is_multiple_of(g) {
                    return Err(err(
                        "n_group",
                        ArgumentKind::Value,
                        format!("`n_group` = {g} with {e} experts; it must divide the experts and be 1 to {MAX_GROUPS}"),
                    ));
                }
                if kg == 0 || kg > g || kg * (e / g) < opts.top_k {
                    return Err(err(
                        "topk_group",
                        ArgumentKind::Value,
                        format!(
                            "`topk_group` = {kg} with n_group = {g} and top_k = {}; it must be 1 to n_group and keep at least top_k experts",
                            opts.top_k
                        ),
                    ));
                }
            }
            super::finite("routed_scaling", opts.routed_scaling)?;
            RouteSource::Logits {
                dtype: float("router_logits", logits)?,
                bias: bias.is_some(),
                opts,
            }
        }
        MoeRouting::TopK { index, weights } => {
            rank(
                "top_k_index",
                index,
                2,
                "the MoE layer takes it as [tokens, top_k]",
            )?;
            dtype_in(
                "top_k_index",
                index,
                &[DType::I64, DType::I32],
                "expert indices are int64 (torch.topk's) or int32",
            )?;
            let k = index.shape()[1];
            if index.shape()[0] != t {
                return Err(shape_err(
                    "top_k_index",
                    format!(
                        "`top_k_index` is {} but `hidden_states` has {t} tokens",
                        index.shape_text()
                    ),
                ));
            }
            if k == 0 || k > e {
                return Err(shape_err(
                    "top_k_index",
                    format!("`top_k_index` picks {k} experts per token but the layer has {e}; top_k must be 1 to the number of experts"),
                ));
            }
            rank(
                "top_k_weights",
                weights,
                2,
                "the MoE layer takes it as [tokens, top_k] or [tokens, experts]",
            )?;
            dtype_in(
                "top_k_weights",
                weights,
                &[DType::F32, DType::Bf16, DType::F16],
                "routing weights are f32, bf16 or f16",
            )?;
            let full = weights.shape() == [t, e] && k != e;
            if weights.shape() != [t, k] && !full {
                return Err(shape_err(
                    "top_k_weights",
                    format!("`top_k_weights` is {} but `top_k_index` is {}: give [{t}, {k}] (or [{t}, {e}], read at each index)", weights.shape_text(), index.shape_text()),
                ));
            }
            contiguous("top_k_index", index, "the routing reads packed rows")?;
            contiguous("top_k_weights", weights, "the routing reads packed rows")?;
            RouteSource::TopK {
                top_k: k,
                ids_i64: index.dtype() == DType::I64,
                weights: float("top_k_weights", weights)?,
                full,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::tensor::RawTensor;
    use crate::ops::moe::route::Scoring;

    fn info(name: &str, ptr: u64, dtype: DType, shape: &[usize]) -> TensorInfo {
        RawTensor::contiguous(ptr, dtype, shape, 0)
            .info(name, false)
            .unwrap()
    }

    struct Args {
        x: TensorInfo,
        w13: TensorInfo,
        w2: TensorInfo,
        idx: TensorInfo,
        wts: TensorInfo,
        out: TensorInfo,
    }

    fn args(t: usize, e: usize, k: usize, h: usize, i: usize) -> Args {
        Args {
            x: info("x", 1 << 32, DType::Bf16, &[t, h]),
            w13: info("w13", 2 << 32, DType::Bf16, &[e, 2 * i, h]),
            w2: info("w2", 3 << 32, DType::Bf16, &[e, h, i]),
            idx: info("idx", 4 << 32, DType::I64, &[t, k]),
            wts: info("wts", 5 << 32, DType::F32, &[t, k]),
            out: info("out", 6 << 32, DType::Bf16, &[t, h]),
        }
    }

    fn check(a: &Args) -> Result<Option<LayerPlan>> {
        moe_layer(
            0,
            &a.x,
            &a.w13,
            &a.w2,
            &MoeRouting::TopK {
                index: &a.idx,
                weights: &a.wts,
            },
            &a.out,
            CombineMode::Atomic,
        )
    }

    fn refusal(a: &Args) -> (String, String) {
        match check(a).unwrap_err() {
            crate::Error::Argument { arg, message, .. } => (arg, message),
            other => panic!("{other}"),
        }
    }

    #[test]
    fn a_transformers_experts_call_is_a_layer() {
        let a = args(100, 64, 8, 2048, 1408);
        let p = check(&a).unwrap().unwrap();
        assert_eq!(
            (p.problem.tokens(), p.problem.top_k(), p.problem.inter),
            (100, 8, 1408)
        );
        assert!(matches!(
            p.problem.route.source,
            RouteSource::TopK {
                ids_i64: true,
                full: false,
                ..
            }
        ));
        // [T, E] weights, read at each index
        let full = Args {
            wts: info("wts", 5 << 32, DType::Bf16, &[100, 64]),
            ..args(100, 64, 8, 2048, 1408)
        };
        let p = check(&full).unwrap().unwrap();
        assert!(matches!(
            p.problem.route.source,
            RouteSource::TopK { full: true, .. }
        ));
        assert!(check(&args(0, 8, 2, 256, 128)).unwrap().is_none());
    }

    #[test]
    fn each_bad_argument_is_named() {
        let bad_idx = Args {
            idx: info("idx", 4 << 32, DType::F32, &[4, 2]),
            ..args(4, 8, 2, 256, 128)
        };
        assert_eq!(refusal(&bad_idx).0, "top_k_index");
        let too_many = args(4, 8, 9, 256, 128);
        assert!(refusal(&too_many).1.contains("picks 9 experts"));
        let bad_w2 = Args {
            w2: info("w2", 3 << 32, DType::Bf16, &[8, 256, 64]),
            ..args(4, 8, 2, 256, 128)
        };
        assert_eq!(refusal(&bad_w2).0, "down_proj");
        let bad_wts = Args {
            wts: info("wts", 5 << 32, DType::F32, &[4, 3]),
            ..args(4, 8, 2, 256, 128)
        };
        assert_eq!(refusal(&bad_wts).0, "top_k_weights");
        let odd = Args {
            w13: info("w13", 2 << 32, DType::Bf16, &[8, 255, 256]),
            ..args(4, 8, 2, 256, 128)
        };
        assert_eq!(refusal(&odd).0, "gate_up_proj");
        let f32x = Args {
            x: info("x", 1 << 32, DType::F32, &[4, 256]),
            ..args(4, 8, 2, 256, 128)
        };
        assert_eq!(refusal(&f32x).0, "hidden_states");
        let aliased = Args {
            out: info("out", 1 << 32, DType::Bf16, &[4, 256]),
            ..args(4, 8, 2, 256, 128)
        };
        assert_eq!(refusal(&aliased).0, "out");
    }

    #[test]
    fn logits_routing_checks_its_options() {
        let a = args(4, 256, 8, 256, 128);
        let logits = info("l", 7 << 32, DType::F32, &[4, 256]);
        let bias = info("b", 8 << 32, DType::F32, &[256]);
        let run = |opts: RouteOptions, bias: Option<&TensorInfo>| {
            moe_layer(
                0,
                &a.x,
                &a.w13,
                &a.w2,
                &MoeRouting::Logits {
                    logits: &logits,
                    bias,
                    opts,
                },
                &a.out,
                CombineMode::Ordered,
            )
        };
        let ds = RouteOptions {
            groups: Some((8, 4)),
            renormalize: true,
            routed_scaling: 2.5,
            ..RouteOptions::top_k(8, Scoring::Sigmoid)
        };
        let p = run(ds, Some(&bias)).unwrap().unwrap();
        assert!(p.problem.label().contains("groups 8/4 bias x2.5"));
        let name = |r: Result<Option<LayerPlan>>| match r.unwrap_err() {
            crate::Error::Argument { arg, .. } => arg,
            other => panic!("{other}"),
        };
        assert_eq!(
            name(run(RouteOptions::top_k(300, Scoring::Softmax), None)),
            "top_k"
        );
        assert_eq!(
            name(run(
                RouteOptions {
                    groups: Some((7, 2)),
                    ..ds
                },
                None
            )),
            "n_group"
        );
        assert_eq!(
            name(run(
                RouteOptions {
                    groups: Some((8, 9)),
                    ..ds
                },
                None
            )),
            "topk_group"
        );
        let short = info("b", 8 << 32, DType::F32, &[255]);
        assert_eq!(name(run(ds, Some(&short))), "bias");
    }
}
