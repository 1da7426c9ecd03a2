//! A whole MoE layer on cudarc buffers through `kiln::Kiln::moe_layer`: routed on the GPU from
//! router logits (softmax, top-4, renormalised), then again from the top-k that routing chose
//! given as transformers passes it, the ordered combine the second time. Both outputs are
//! checked against kiln's float64 reference of the layer (the routing included).
//! `cargo run --release --example moe_layer`

mod common;

use std::process::ExitCode;

use common::{cuda, random_bf16, rel_error, Check};
use kiln::harness::verify::bound;
use kiln::ops::gemm::DType as OpDType;
use kiln::reference::data::HostData;
use kiln::reference::moe_layer::{layer_rows, LayerWeights};
use kiln::reference::route::route_logits;
use kiln::{
    CombineMode, Kiln, MoeLayerOptions, MoeRouting, RouteOptions, Scoring, TensorMut, TensorRef,
};

/// Tokens, experts, top-k, hidden size, expert width.
const T: usize = 100;
const E: usize = 16;
const K: usize = 4;
const H: usize = 256;
const I: usize = 128;

pub fn run(kiln: &Kiln) -> kiln::Result<Check> {
    let stream = kiln.cuda().default_stream();
    let (x, x64) = random_bf16(T * H, 31);
    let (w13, w13_64) = random_bf16(E * 2 * I * H, 32);
    let (w2, w2_64) = random_bf16(E * H * I, 33);
    let logits64 = HostData::random(OpDType::F32, T * E, 34).to_f64();
    let logits: Vec<f32> = logits64.iter().map(|&v| v as f32).collect();
    let opts = RouteOptions {
        renormalize: true,
        ..RouteOptions::top_k(K, Scoring::Softmax)
    };
    let want = route_logits(&logits64, None, T, E, &opts);
    let ids: Vec<i64> = want.ids.iter().map(|&e| e as i64).collect();
    let weights: Vec<f32> = want.weights.iter().map(|&w| w as f32).collect();

    let up = |what, v: &[_]| stream.clone_htod(v).map_err(cuda(what));
    let (dx, dw13, dw2) = (up("x", &x)?, up("w13", &w13)?, up("w2", &w2)?);
    let dlogits = stream.clone_htod(&logits).map_err(cuda("logits"))?;
    let dids = stream.clone_htod(&ids).map_err(cuda("ids"))?;
    let dweights = stream.clone_htod(&weights).map_err(cuda("weights"))?;
    let mut dout = stream
        .alloc_zeros::<half::bf16>(T * H)
        .map_err(cuda("out"))?;
    let mut dout2 = stream
        .alloc_zeros::<half::bf16>(T * H)
        .map_err(cuda("out"))?;

    let tx = TensorRef::from_slice(&dx, &[T, H])?;
    let tw13 = TensorRef::from_slice(&dw13, &[E, 2 * I, H])?;
    let tw2 = TensorRef::from_slice(&dw2, &[E, H, I])?;
    let tlogits = TensorRef::from_slice(&dlogits, &[T, E])?;
    let tids = TensorRef::from_slice(&dids, &[T, K])?;
    let tweights = TensorRef::from_slice(&dweights, &[T, K])?;
    let from_logits = MoeRouting::Logits {
        logits: &tlogits,
        bias: None,
        opts,
    };
    let mut out = TensorMut::from_slice(&mut dout, &[T, H])?;
    kiln.moe_layer(
        &stream,
        &tx,
        &tw13,
        &tw2,
        from_logits,
        &mut out,
        &MoeLayerOptions::default(),
    )?;
    let given = MoeRouting::TopK {
        index: &tids,
        weights: &tweights,
    };
    let ordered = MoeLayerOptions {
        combine: CombineMode::Ordered,
    };
    let mut out2 = TensorMut::from_slice(&mut dout2, &[T, H])?;
    kiln.moe_layer(&stream, &tx, &tw13, &tw2, given, &mut out2, &ordered)?;
    let got = stream.clone_dtoh(&dout).map_err(cuda("downloading out"))?;
    let got2 = stream.clone_dtoh(&dout2).map_err(cuda("downloading out"))?;

    let w = LayerWeights {
        w13: &w13_64[..],
        w2: &w2_64[..],
        experts: E,
        hidden: H,
        inter: I,
    };
    let tokens: Vec<usize> = (0..T).collect();
    let ref_rows = layer_rows(&w, |t| x64[t * H..(t + 1) * H].to_vec(), &want, &tokens);
    let pairs = |got: &[half::bf16]| {
        (0..T * H)
            .map(|i| (got[i].to_f64(), ref_rows[i / H][i % H]))
            .collect::<Vec<_>>()
    };
    let layer_bound = 2.0 * bound(OpDType::Bf16);
    Ok(Check {
        what: format!("T={T} E={E} top-{K} H={H} I={I} bf16"),
        errors: vec![
            (
                "routed from logits, atomic combine: relative error",
                rel_error(pairs(&got).into_iter()),
                layer_bound,
            ),
            (
                "given top-k, ordered combine: relative error",
                rel_error(pairs(&got2).into_iter()),
                layer_bound,
            ),
        ],
    })
}

fn main() -> ExitCode {
    common::main("moe_layer", run)
}
