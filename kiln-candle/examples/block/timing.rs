//! The attention timing at B4 H16 S4096 d128 (bf16): kiln's op in candle against kiln's own Rust
//! API call on the same memory, and candle's composed attention.
//!
//! The two kiln paths are timed alternately, round by round (which goes first alternating), after
//! a heat soak of both: timed one after the other, the second ran on a hotter, power-capped GPU at
//! lower clocks (2026-11-29, d4f7f42 on an H200: causal 0.427 ms in candle, timed first, against
//! 0.475 through `Kiln::attention`, timed second; the same kernel, docs/attention.md's "under
//! sustained load" gap of 654 against 558-568 TFLOPS at this shape). Their outputs are then
//! compared bit for bit, beside two calls of one path: one kernel and one configuration give
//! the same bits, but for the items run in parts (not causal), merged in the order they finish.
//!
//! Alternated, kiln's op in candle was still 2-3 % (17-18 µs a call, causal or not) behind the
//! Rust API (2026-11-29, 3d339bf, H200): a cost per round, not per kernel. The pair is timed a
//! second time with candle's memory pool keeping what it frees ([`keep_pool`]).

use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use candle_core::cuda_backend::cudarc::driver::{sys, CudaSlice};
use candle_core::cuda_backend::CudaDevice;
use candle_core::{DType, Device, Storage, Tensor};
use kiln::{AttentionOptions, TensorMut, TensorRef};
use rand::rngs::SmallRng;
use rand::SeedableRng;

use crate::check::{causal_mask, composed_attention};
use crate::randn;

/// How long both kiln paths run before the rounds that count.
const SOAK: Duration = Duration::from_secs(1);
/// Timed rounds of each kiln path.
const ROUNDS: usize = 11;

/// The time per call (ms) of `iters` calls of `f` on candle's stream, waited for.
fn round(dev: &Device, iters: usize, f: &mut impl FnMut() -> Result<()>) -> Result<f64> {
    let t0 = Instant::now();
    for _ in 0..iters {
        f()?;
    }
    dev.synchronize()?;
    Ok(t0.elapsed().as_secs_f64() * 1e3 / iters as f64)
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s[s.len() / 2]
}

fn spread(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    (lo, v.iter().copied().fold(f64::NEG_INFINITY, f64::max))
}

/// Raises the release threshold of `dev`'s memory pool (the one candle's stream-ordered
/// allocations come from) to its maximum. At 0, the default, the pool returns what it holds to
/// the system at every wait, and the first allocation after one maps the memory again while the
/// GPU, just drained, idles: once per round for kiln's op in candle, which allocates its output
/// per call, never for the Rust API's preallocated output.
fn keep_pool(dev: &CudaDevice) -> Result<()> {
    let ok = |r: sys::CUresult, what: &str| match r {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        r => Err(anyhow::anyhow!("{what}: {r:?}")),
    };
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    let mut max = u64::MAX;
    // SAFETY: valid out-pointers and the device of candle's (current) context; the attribute
    // takes a u64.
    unsafe {
        let device = dev.cuda_stream().context().cu_device();
        ok(
            sys::cuDeviceGetMemPool(&mut pool, device),
            "finding the device's memory pool",
        )?;
        ok(
            sys::cuMemPoolSetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
                (&mut max as *mut u64).cast(),
            ),
            "raising the pool's release threshold",
        )?;
    }
    Ok(())
}

/// Two paths timed alternately: 3 warm-up calls each (compiles, workspaces, graphs), rounds of
/// both until [`SOAK`] has passed, then [`ROUNDS`] rounds each, `a` first in the even rounds and
/// `b` first in the odd. Returns each path's per-round times (ms per call).
fn alternate(
    dev: &Device,
    iters: usize,
    mut a: impl FnMut() -> Result<()>,
    mut b: impl FnMut() -> Result<()>,
) -> Result<(Vec<f64>, Vec<f64>)> {
    for _ in 0..3 {
        a()?;
        b()?;
    }
    dev.synchronize()?;
    let t0 = Instant::now();
    while t0.elapsed() < SOAK {
        round(dev, iters, &mut a)?;
        round(dev, iters, &mut b)?;
    }
    let (mut ta, mut tb) = (Vec::new(), Vec::new());
    for r in 0..ROUNDS {
        if r % 2 == 0 {
            ta.push(round(dev, iters, &mut a)?);
            tb.push(round(dev, iters, &mut b)?);
        } else {
            tb.push(round(dev, iters, &mut b)?);
            ta.push(round(dev, iters, &mut a)?);
        }
    }
    Ok((ta, tb))
}

pub fn time(dev: &Device, causal: bool, iters: usize) -> Result<()> {
    let (b, h, s, d) = (4, 16, 4096, 128);
    let mut rng = SmallRng::seed_from_u64(kiln::harness::verify::fresh_seed());
    let q = randn(&mut rng, &[b, s, h, d], 1.0, dev)?.0;
    let k = randn(&mut rng, &[b, s, h, d], 1.0, dev)?.0;
    let v = randn(&mut rng, &[b, s, h, d], 1.0, dev)?.0;
    let flops = 4.0 * (b * h * s * s * d) as f64 / if causal { 2.0 } else { 1.0 };
    let comp_iters = iters.div_ceil(4);
    println!(
        "attention B{b} H{h} S{s} d{d} bf16 {}: kiln's two paths alternately, {ROUNDS} rounds of {iters} calls each after a {} s soak (then again, the memory pool keeping memory); candle's composed 5 rounds of {comp_iters}; medians",
        if causal { "causal" } else { "not causal" },
        SOAK.as_secs()
    );
    let cdev = dev.as_cuda_device()?;
    let stream = cdev.cuda_stream();
    let kiln = kiln_candle::handle(cdev)?;
    let dims = [b, s, h, d];
    // kiln's own Rust API writes one preallocated output; kiln's op in candle allocates its
    // output on candle's stream per call, as a model's call does.
    let mut o = stream.alloc_zeros::<half::bf16>(b * s * h * d)?;
    let opts = AttentionOptions {
        causal,
        ..AttentionOptions::default()
    };
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
    let api = |o: &mut CudaSlice<half::bf16>| -> Result<()> {
        let (tq, tk, tv) = (
            TensorRef::from_slice(qc, &dims)?,
            TensorRef::from_slice(kc, &dims)?,
            TensorRef::from_slice(vc, &dims)?,
        );
        let mut to = TensorMut::from_slice(o, &dims)?;
        kiln.attention(&stream, &tq, &tk, &tv, &mut to, None, &opts)?;
        Ok(())
    };
    let op = || -> Result<Tensor> { Ok(kiln_candle::flash_attn(&q, &k, &v, None, causal)?) };
    let (t_op, t_api) = alternate(dev, iters, || op().map(drop), || api(&mut o))?;
    // The same pair again once the device's memory pool keeps what it frees across waits.
    keep_pool(cdev)?;
    let (t_op_kept, t_api_kept) = alternate(dev, iters, || op().map(drop), || api(&mut o))?;
    // The same kernel and configuration give the same bits, up to what two calls of one path
    // differ by (not causal, the last wave's items run in parts, merged in the order the parts
    // finish).
    let o_op = op()?.flatten_all()?.to_vec1::<half::bf16>()?;
    let o_op2 = op()?.flatten_all()?.to_vec1::<half::bf16>()?;
    api(&mut o)?;
    let o_api = stream.clone_dtoh(&o)?;
    let differ = |a: &[half::bf16], b: &[half::bf16]| {
        a.iter()
            .zip(b)
            .filter(|(x, y)| x.to_bits() != y.to_bits())
            .count()
    };
    let (d_paths, d_calls) = (differ(&o_op, &o_api), differ(&o_op, &o_op2));
    drop((gq, gk, gv));

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
    let mut comp = || -> Result<()> {
        composed_attention(&qt, &kt, &vt, mask.as_ref())?;
        Ok(())
    };
    comp()?;
    let t_comp: Vec<f64> = (0..5)
        .map(|_| round(dev, comp_iters, &mut comp))
        .collect::<Result<_>>()?;

    let tf = |ms: f64| flops / ms / 1e9;
    println!("| path                                     | ms/call | TFLOPS | rounds (ms)     |");
    println!("|------------------------------------------|---------|--------|-----------------|");
    for (name, t) in [
        ("kiln in candle (kiln_candle::flash_attn)", &t_op),
        ("kiln's Rust API (Kiln::attention)", &t_api),
        ("kiln in candle, the pool keeping memory", &t_op_kept),
        ("kiln's Rust API, beside it", &t_api_kept),
        ("candle composed (matmul softmax matmul)", &t_comp),
    ] {
        let (m, (lo, hi)) = (median(t), spread(t));
        println!(
            "| {name:<40} | {m:>7.3} | {:>6.1} | {lo:>7.3}-{hi:<7.3} |",
            tf(m)
        );
    }
    // The rounds' ratios: their median and spread, in per cent.
    let against = |a: &[f64], b: &[f64]| {
        let r: Vec<f64> = a
            .iter()
            .zip(b)
            .map(|(a, b)| (a / b - 1.0) * 100.0)
            .collect();
        let (lo, hi) = spread(&r);
        format!("{:+.1}% ({lo:+.1}% to {hi:+.1}%)", median(&r))
    };
    println!(
        "kiln in candle: {:.2}x candle's composed attention (target >= 3x), {} against kiln's own API (median of the {ROUNDS} rounds' ratios, and their spread; target within 5%); {} with the pool keeping memory",
        median(&t_comp) / median(&t_op),
        against(&t_op, &t_api),
        against(&t_op_kept, &t_api_kept),
    );
    let n = o_op.len();
    if (d_paths, d_calls) == (0, 0) {
        println!(
            "the two kiln paths' outputs: identical bits, as two calls of one path (one kernel, one configuration)"
        );
    } else {
        println!(
            "the two kiln paths' outputs differ in {d_paths} of {n} elements, two calls of kiln in candle in {d_calls}: {}",
            if causal {
                "causal runs no items in parts, so these are not one kernel and configuration"
            } else {
                "not causal, the last wave's items run in parts merged in the order the parts finish, so any two calls may differ in a few elements"
            }
        );
    }
    Ok(())
}
