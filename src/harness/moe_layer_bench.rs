//! `kiln moe bench --layer`: the MoE layer's steps (routing, the gathered SwiGLU, the down
//! projection with its combine) and the whole layer timed with CUDA events, L2 flushed before
//! each repetition, inputs made on the GPU. The issue's shapes by default: E 64 (I 1408) and
//! E 128 (I 768), top-8, H 2048, at 1, 8, 64 and 4,096 tokens, routed by a given top-k (the
//! transformers experts interface); at 1 and 4,096 tokens also from softmax logits.

use super::bench::Row;
use super::bench::{Bench, BenchOptions};
use super::moe_bench::{time_piece, Piece};
use super::moe_layer::{given, problem, softmax, LayerBuffers, LayerCase, RouteInputs};
use crate::device::Context;
use crate::error::{Error, Result};
use crate::ops::moe::layer::{CombineMode, LayerProblem, Pipeline};
use crate::ops::moe::route::RouteSource;

/// A layer of `problem`'s with `combine`.
fn layer(
    t: usize,
    e: usize,
    h: usize,
    i: usize,
    source: RouteSource,
    combine: CombineMode,
) -> LayerProblem {
    LayerProblem {
        combine,
        ..problem(t, e, h, i, source)
    }
}

/// The issue's shapes (see the module).
pub fn issue_layers(combine: CombineMode) -> Vec<LayerProblem> {
    let mut v = Vec::new();
    for (e, i) in [(64, 1408), (128, 768)] {
        for t in [1, 8, 64, 4096] {
            v.push(layer(t, e, 2048, i, given(8), combine));
        }
        for t in [1, 4096] {
            v.push(layer(t, e, 2048, i, softmax(8), combine));
        }
    }
    v
}

/// `E64,k8,H2048,I1408,T1+64+4096` (any order; T a `+` list): layers of those sizes, given
/// top-k routing.
pub fn parse_layers(s: &str, combine: CombineMode) -> Result<Vec<LayerProblem>> {
    let bad = |m: String| {
        Error::invalid(format!(
            "--layer {s}: {m}; write e.g. E64,k8,H2048,I1408,T1+64+4096"
        ))
    };
    let (mut e, mut k, mut h, mut i, mut ts) = (None, None, None, None, Vec::new());
    for part in s.split(',') {
        let part = part.trim();
        let (key, val) = part.split_at(part.chars().next().map_or(0, char::len_utf8));
        let num = |v: &str| {
            v.parse::<usize>()
                .map_err(|_| bad(format!("`{part}` is not a size")))
        };
        match key {
            "E" => e = Some(num(val)?),
            "k" => k = Some(num(val)?),
            "H" => h = Some(num(val)?),
            "I" => i = Some(num(val)?),
            "T" => {
                for v in val.split('+') {
                    ts.push(num(v)?);
                }
            }
            _ => return Err(bad(format!("`{part}` is not E, k, H, I or T"))),
        }
    }
    let (Some(e), Some(k), Some(h), Some(i)) = (e, k, h, i) else {
        return Err(bad("E, k, H and I are all needed".into()));
    };
    if ts.is_empty() {
        return Err(bad("T (tokens) is needed".into()));
    }
    let v: Vec<LayerProblem> = ts
        .into_iter()
        .map(|t| layer(t, e, h, i, given(k), combine))
        .collect();
    for p in &v {
        p.validate()?;
    }
    Ok(v)
}

/// Times the steps and the whole of `p`.
pub fn bench_layer(
    ctx: &Context,
    p: &LayerProblem,
    opt: &BenchOptions,
    seed: u64,
) -> Result<Vec<Row>> {
    p.validate()?;
    super::moe_layer_verify::plan(&LayerCase::of(*p))
        .ensure(ctx, &format!("the layer {}", p.label()))?;
    let run = Bench::new(ctx, opt)?;
    let case = LayerCase::of(*p);
    let inp = RouteInputs::draw(&case, seed.wrapping_add(3));
    let bufs = LayerBuffers::new(ctx, p, &inp, seed)?;
    // SAFETY: the buffers were sized for `p` and outlive every launch (we synchronise below).
    let pipe = unsafe { Pipeline::new(ctx, p, &bufs.operands(), bufs.ws.ptr()) }?;
    pipe.run(ctx)?;
    ctx.synchronize()?;
    let gemm = 2.0 * p.pairs() as f64 * p.hidden as f64 * p.inter as f64;
    let es = p.dtype.size() as f64;
    let (t, e, h, i) = (
        p.tokens() as f64,
        p.experts() as f64,
        p.hidden as f64,
        p.inter as f64,
    );
    let piece = |name: &str, flops: f64, bytes: f64| Piece {
        name: name.into(),
        problem: p.label(),
        tile: String::new(),
        flops,
        bytes,
    };
    // bytes: the weights each step reads at least once (all experts: an upper bound at decode),
    // the activations in and out
    let rows = p.pairs() as f64;
    Ok(vec![
        time_piece(&run, piece("route", 0.0, 0.0), || pipe.route(ctx))?,
        time_piece(
            &run,
            piece(
                "gate_up",
                2.0 * gemm,
                es * (2.0 * e * i * h + t * h + rows * i),
            ),
            || pipe.up(ctx),
        )?,
        time_piece(
            &run,
            piece("down_combine", gemm, es * (e * h * i + rows * i + t * h)),
            || pipe.down(ctx),
        )?,
        time_piece(
            &run,
            piece("layer", 3.0 * gemm, es * (3.0 * e * h * i + 2.0 * t * h)),
            || pipe.run(ctx),
        )?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issue_shapes_and_a_custom_list_are_valid() {
        for p in issue_layers(CombineMode::Atomic) {
            p.validate().unwrap();
        }
        let v = parse_layers("E64,k8,H2048,I1408,T1+64+4096", CombineMode::Ordered).unwrap();
        assert_eq!(
            v.iter().map(|p| p.tokens()).collect::<Vec<_>>(),
            vec![1, 64, 4096]
        );
        assert_eq!(v[2].combine, CombineMode::Ordered);
        assert!(parse_layers("E64,k8,H2048", CombineMode::Atomic).is_err());
        assert!(parse_layers("E64,k80,H2048,I128,T1", CombineMode::Atomic).is_err());
        assert!(parse_layers("E64,q8,H2048,I128,T1", CombineMode::Atomic)
            .unwrap_err()
            .to_string()
            .contains("`q8`"));
    }
}
