//! A small candle-transformers-style block (GQA attention, then a top-2 MoE MLP of SwiGLU
//! experts, each with its residual) with random bf16 weights, run twice on one GPU: through
//! kiln's ops (`kiln_candle`) and through candle's own (matmul, softmax, silu, a loop over the
//! experts), both checked against a float64 reference computed on the host from the same bf16
//! inputs. Each kiln op is first checked alone against the reference of its own inputs, with
//! kiln's bounds (relative L2 error: GEMM and SwiGLU 4e-3 for bf16 output, attention 1e-2, LSE
//! 2e-3 absolute); the block's kiln output must be within twice candle's own error plus the bf16
//! GEMM bound (flash-attention's criterion against a framework). Then the MoE's experts in FP8
//! and in 4 bits (NVFP4, MXFP4) through kiln's candle ops, on the same rows (`lowprec`), and
//! the FP8 SwiGLU, DeepGEMM's masked layout and W4A8 (`fp8moe`).
//!
//!   block [--seed N]                      the check (exit 1 on a failure)
//!   block --time [--causal] [--iters N]   kiln's attention in candle against kiln's own Rust API
//!                                         call (timed alternately) and candle's composed
//!                                         matmul-softmax-matmul, at B4 H16 S4096 d128 (bf16)

mod check;
mod fp8moe;
mod lowprec;
mod reference;
mod timing;

use anyhow::Result;
use candle_core::{DType, Device, Tensor};
use kiln::harness::verify::rel_l2;
use rand::rngs::SmallRng;
use rand::Rng;

const B: usize = 2;
const S: usize = 256;
const HQ: usize = 8;
const HKV: usize = 2;
const HD: usize = 128;
const HID: usize = HQ * HD;
const E: usize = 8;
const TOPK: usize = 2;
const INTER: usize = 512;

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let flag = |f: &str| args.iter().any(|a| a == f);
    let value = |f: &str| {
        args.iter()
            .position(|a| a == f)
            .and_then(|i| args.get(i + 1))
            .map(|v| v.parse::<u64>())
            .transpose()
    };
    let dev = Device::new_cuda(0)?;
    if flag("--time") {
        return timing::time(
            &dev,
            flag("--causal"),
            value("--iters")?.unwrap_or(30) as usize,
        );
    }
    let seed = value("--seed")?.unwrap_or_else(kiln::harness::verify::fresh_seed);
    check::check(&dev, seed)
}

// ---------------------------------------------------------------------------------------------
// Host data

/// A bf16 tensor of N(0, scale²) values on `dev`, and its values as f64.
fn randn(
    rng: &mut SmallRng,
    dims: &[usize],
    scale: f64,
    dev: &Device,
) -> Result<(Tensor, Vec<f64>)> {
    let n: usize = dims.iter().product();
    let v: Vec<half::bf16> = (0..n)
        .map(|_| {
            // Box-Muller.
            let (u1, u2): (f64, f64) = (rng.gen_range(1e-12..1.0), rng.gen());
            let z = (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos();
            half::bf16::from_f64(z * scale)
        })
        .collect();
    let f = v.iter().map(|x| x.to_f64()).collect();
    Ok((Tensor::from_vec(v, dims, dev)?, f))
}

fn host(t: &Tensor) -> Result<Vec<f64>> {
    let v = t.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?;
    Ok(v.into_iter().map(f64::from).collect())
}

/// The relative L2 error of `got` against `want`.
fn rel(got: &[f64], want: &[f64]) -> f64 {
    let (mut d2, mut r2) = (0.0, 0.0);
    for (g, w) in got.iter().zip(want) {
        d2 += (g - w) * (g - w);
        r2 += w * w;
    }
    if got.iter().any(|g| !g.is_finite()) {
        return f64::INFINITY;
    }
    rel_l2(d2, r2)
}

struct Report {
    failed: usize,
}

impl Report {
    fn row(&mut self, what: &str, err: f64, limit: f64) {
        let ok = err <= limit;
        if !ok {
            self.failed += 1;
        }
        println!(
            "| {what:<54} | {err:>10.3e} | {limit:>10.3e} | {} |",
            if ok { "ok  " } else { "FAIL" }
        );
    }
}
