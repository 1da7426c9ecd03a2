//! Attention forward on cudarc buffers through `kiln::Kiln`, with flash-attention's semantics:
//! q [B, Sq, Hq, D], k and v [B, Sk, Hkv, D] (GQA: 4 query heads per key/value head), causal
//! aligned bottom-right, the LSE returned; then the same memory read through [B, H, S, D]
//! views (torch's `q.transpose(1, 2)`). Both checked against kiln's float64 reference.
//! `cargo run --release --example attention`

mod common;

use std::process::ExitCode;

use common::{cuda, random_bf16, rel_error, Check};
use half::bf16;
use kiln::harness::attention::verify::{o_bound, LSE_BOUND};
use kiln::ops::attention::AttentionProblem;
use kiln::ops::gemm::DType as OpDType;
use kiln::reference::attention::attention_rows;
use kiln::{AttentionOptions, AttnLayout, Kiln, TensorMut, TensorRef};

const B: usize = 2;
const SQ: usize = 200;
const SK: usize = 333;
const HQ: usize = 8;
const HKV: usize = 2;
const D: usize = 128;

/// [B, H, S, D] views of packed [B, S, H, D] memory.
fn bhsd_strides(h: usize, s: usize) -> [isize; 4] {
    [(s * h * D) as isize, D as isize, (h * D) as isize, 1]
}

pub fn run(kiln: &Kiln) -> kiln::Result<Check> {
    let stream = kiln.cuda().default_stream();
    let (q, q64) = random_bf16(B * SQ * HQ * D, 11);
    let (k, k64) = random_bf16(B * SK * HKV * D, 12);
    let (v, v64) = random_bf16(B * SK * HKV * D, 13);
    let dq = stream.clone_htod(&q).map_err(cuda("uploading q"))?;
    let dk = stream.clone_htod(&k).map_err(cuda("uploading k"))?;
    let dv = stream.clone_htod(&v).map_err(cuda("uploading v"))?;
    let tq = TensorRef::from_slice(&dq, &[B, SQ, HQ, D])?;
    let tk = TensorRef::from_slice(&dk, &[B, SK, HKV, D])?;
    let tv = TensorRef::from_slice(&dv, &[B, SK, HKV, D])?;
    let opts = AttentionOptions {
        causal: true,
        ..Default::default()
    };
    let (o, lse) = kiln.attention_alloc::<bf16>(&stream, &tq, &tk, &tv, true, &opts)?;

    // The same attention through [B, H, S, D] views: the kernels read the BSHD memory in place.
    let bhsd = AttentionOptions {
        layout: AttnLayout::Bhsd,
        ..opts.clone()
    };
    let mut o2 = stream
        .alloc_zeros::<bf16>(B * SQ * HQ * D)
        .map_err(cuda("allocating o2"))?;
    kiln.attention(
        &stream,
        &TensorRef::from_slice_strided(&dq, &[B, HQ, SQ, D], &bhsd_strides(HQ, SQ))?,
        &TensorRef::from_slice_strided(&dk, &[B, HKV, SK, D], &bhsd_strides(HKV, SK))?,
        &TensorRef::from_slice_strided(&dv, &[B, HKV, SK, D], &bhsd_strides(HKV, SK))?,
        &mut TensorMut::from_slice_strided(&mut o2, &[B, HQ, SQ, D], &bhsd_strides(HQ, SQ))?,
        None,
        &bhsd,
    )?;

    let o = stream.clone_dtoh(&o).map_err(cuda("downloading o"))?;
    let o2 = stream.clone_dtoh(&o2).map_err(cuda("downloading o2"))?;
    let lse = match lse {
        Some(l) => stream.clone_dtoh(&l).map_err(cuda("downloading lse"))?,
        None => Vec::new(),
    };

    let p = AttentionProblem {
        batch: B,
        heads_q: HQ,
        heads_kv: HKV,
        seqlen_q: SQ,
        seqlen_kv: SK,
        head_dim: D,
        dtype: OpDType::Bf16,
        causal: true,
        scale: 1.0 / (D as f32).sqrt(),
        layout: AttnLayout::Bshd,
        ..AttentionProblem::new(B, HQ, SQ, D)
    };
    let rows: Vec<usize> = (0..SQ).collect();
    let reference = attention_rows(&p, &q64, &k64, &v64, &rows);
    let qs = p.q_strides();
    let pairs = |out: &[bf16]| {
        reference
            .iter()
            .flat_map(|r| {
                let base = qs.offset(r.b, r.h, r.i);
                r.o.iter()
                    .enumerate()
                    .map(move |(d, &want)| (base + d, want))
            })
            .map(|(i, want)| (out[i].to_f64(), want))
            .collect::<Vec<_>>()
    };
    let lse_err = reference
        .iter()
        .map(|r| {
            let got = lse
                .get((r.b * HQ + r.h) * SQ + r.i)
                .copied()
                .unwrap_or(f32::NAN) as f64;
            let e = (got - r.lse).abs();
            if e.is_nan() {
                f64::INFINITY
            } else {
                e
            }
        })
        .fold(0.0f64, f64::max);
    Ok(Check {
        what: format!("b{B} h{HQ}/{HKV} s{SQ}x{SK} d{D} causal bf16"),
        errors: vec![
            (
                "o relative error",
                rel_error(pairs(&o).into_iter()),
                o_bound(OpDType::Bf16),
            ),
            ("lse max abs error", lse_err, LSE_BOUND),
            (
                "o through BHSD views relative error",
                rel_error(pairs(&o2).into_iter()),
                o_bound(OpDType::Bf16),
            ),
        ],
    })
}

fn main() -> ExitCode {
    common::main("attention", run)
}
