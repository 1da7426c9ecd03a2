//! The attention timing at B4 H16 S4096 d128 (bf16): kiln's op in candle, kiln's own Rust API
//! call on the same memory, and candle's composed attention.

use std::time::Instant;

use anyhow::{bail, Result};
use candle_core::{DType, Device, Storage};
use kiln::{AttentionOptions, TensorMut, TensorRef};
use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::check::{causal_mask, composed_attention};
use crate::randn;

/// The median over 5 rounds of the per-call time (ms) of `iters` calls of `f`, on candle's
/// stream, after 3 warm-up calls.
fn timed(dev: &Device, iters: usize, mut f: impl FnMut() -> Result<()>) -> Result<f64> {
    for _ in 0..3 {
        f()?;
    }
    dev.synchronize()?;
    let mut rounds = Vec::new();
    for _ in 0..5 {
        let t0 = Instant::now();
        for _ in 0..iters {
            f()?;
        }
        dev.synchronize()?;
        rounds.push(t0.elapsed().as_secs_f64() * 1e3 / iters as f64);
    }
    rounds.sort_by(f64::total_cmp);
    Ok(rounds[2])
}

pub fn time(dev: &Device, causal: bool, iters: usize) -> Result<()> {
    let (b, h, s, d) = (4, 16, 4096, 128);
    let mut rng = SmallRng::seed_from_u64(kiln::harness::verify::fresh_seed());
    let q = randn(&mut rng, &[b, s, h, d], 1.0, dev)?.0;
    let k = randn(&mut rng, &[b, s, h, d], 1.0, dev)?.0;
    let v = randn(&mut rng, &[b, s, h, d], 1.0, dev)?.0;
    let flops = 4.0 * (b * h * s * s * d) as f64 / if causal { 2.0 } else { 1.0 };
    println!(
        "attention B{b} H{h} S{s} d{d} bf16 {}, {iters} calls a round, median of 5 rounds",
        if causal { "causal" } else { "not causal" }
    );
    // kiln's op in candle: the output allocated by candle's stream, per call.
    let t_op = timed(dev, iters, || {
        kiln_candle::flash_attn(&q, &k, &v, None, causal)?;
        Ok(())
    })?;
    // kiln's own Rust API on the same memory, into one preallocated output.
    let t_api = {
        let cdev = dev.as_cuda_device()?;
        let stream = cdev.cuda_stream();
        let kiln = kiln_candle::handle(cdev)?;
        let mut o = stream.alloc_zeros::<half::bf16>(b * s * h * d)?;
        let (gq, gk, gv) = (
            q.storage_and_layout().0,
            k.storage_and_layout().0,
            v.storage_and_layout().0,
        );
        let (Storage::Cuda(qs), Storage::Cuda(ks), Storage::Cuda(vs)) = (&*gq, &*gk, &*gv) else {
            bail!("the tensors are not on the GPU");
        };
        let (qc, kc, vc) = (
            qs.as_cuda_slice::<half::bf16>()?,
            ks.as_cuda_slice::<half::bf16>()?,
            vs.as_cuda_slice::<half::bf16>()?,
        );
        let dims = [b, s, h, d];
        let opts = AttentionOptions {
            causal,
            ..AttentionOptions::default()
        };
        let t = timed(dev, iters, || {
            let (tq, tk, tv) = (
                TensorRef::from_slice(qc, &dims)?,
                TensorRef::from_slice(kc, &dims)?,
                TensorRef::from_slice(vc, &dims)?,
            );
            let mut to = TensorMut::from_slice(&mut o, &dims)?;
            kiln.attention(&stream, &tq, &tk, &tv, &mut to, None, &opts)?;
            Ok(())
        })?;
        t
    };
    // candle's composed attention over [B, H, S, D] (the transposes to it and the mask made
    // before the clock starts: only the matmul, the scale, the mask, softmax and matmul timed).
    let (qt, kt, vt) = (
        q.transpose(1, 2)?.contiguous()?,
        k.transpose(1, 2)?.contiguous()?,
        v.transpose(1, 2)?.contiguous()?,
    );
    let mask = if causal {
        Some(causal_mask(s, DType::BF16, dev)?)
    } else {
        None
    };
    let t_comp = timed(dev, iters.div_ceil(4), || {
        composed_attention(&qt, &kt, &vt, mask.as_ref())?;
        Ok(())
    })?;
    let tf = |ms: f64| flops / ms / 1e9;
    println!("| path                                   | ms/call | TFLOPS |");
    println!("|----------------------------------------|---------|--------|");
    println!(
        "| kiln in candle (kiln_candle::flash_attn) | {t_op:>7.3} | {:>6.1} |",
        tf(t_op)
    );
    println!(
        "| kiln's Rust API (Kiln::attention)        | {t_api:>7.3} | {:>6.1} |",
        tf(t_api)
    );
    println!(
        "| candle composed (matmul softmax matmul)  | {t_comp:>7.3} | {:>6.1} |",
        tf(t_comp)
    );
    println!(
        "kiln in candle: {:.2}x candle's composed attention (target >= 3x), {:+.1}% against kiln's own API (target within 5%)",
        t_comp / t_op,
        (t_op / t_api - 1.0) * 100.0
    );
    Ok(())
}
