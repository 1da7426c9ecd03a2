//! What one warm call of each op of the Rust API costs on the host, and its kernel on the GPU,
//! on small problems (a model's per-layer calls): CPU µs is a loop of calls over their count
//! (the GPU keeps up, so the host is what is timed), the best of three rounds; GPU µs the median
//! of CUDA events around one call. Each op's result is checked against kiln's float64 reference
//! once first. `cargo run --release --example call_cost [-- --calls N]`

mod common;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use common::{cuda, random_bf16, rel_error, Check};
use cudarc::driver::{sys::CUevent_flags, CudaStream};
use half::bf16;
use kiln::harness::verify::bound;
use kiln::ops::gemm::{DType as OpDType, GemmProblem, Layout};
use kiln::reference::gemm::gemm_rows;
use kiln::{AttentionOptions, GemmOptions, Kiln, MoeRows, SwigluWeights, TensorMut, TensorRef};

/// Best of three rounds of `calls` calls, µs per call (after a warm-up).
fn cpu_us(
    stream: &CudaStream,
    calls: usize,
    mut f: impl FnMut() -> kiln::Result<()>,
) -> kiln::Result<f64> {
    for _ in 0..20 {
        f()?;
    }
    stream.synchronize().map_err(cuda("synchronising"))?;
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t = Instant::now();
        for _ in 0..calls {
            f()?;
        }
        best = best.min(t.elapsed().as_secs_f64() * 1e6 / calls as f64);
        stream.synchronize().map_err(cuda("synchronising"))?;
    }
    Ok(best)
}

/// Median of CUDA events around one call, µs.
fn gpu_us(stream: &Arc<CudaStream>, mut f: impl FnMut() -> kiln::Result<()>) -> kiln::Result<f64> {
    let ctx = stream.context();
    let flags = Some(CUevent_flags::CU_EVENT_DEFAULT);
    let mut times = Vec::new();
    for _ in 0..50 {
        let (s, e) = (
            ctx.new_event(flags).map_err(cuda("making an event"))?,
            ctx.new_event(flags).map_err(cuda("making an event"))?,
        );
        s.record(stream).map_err(cuda("recording"))?;
        f()?;
        e.record(stream).map_err(cuda("recording"))?;
        times.push(s.elapsed_ms(&e).map_err(cuda("timing"))? as f64 * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

pub fn run(kiln: &Kiln) -> kiln::Result<Check> {
    let calls = std::env::args()
        .skip_while(|a| a != "--calls")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(2000usize);
    let stream = kiln.cuda().new_stream().map_err(cuda("making a stream"))?;
    let mut rows = Vec::new();

    // GEMM: x [64, 256] @ wᵀ (w [512, 256]), checked once against float64.
    let (m, n, k) = (64, 512, 256);
    let (x, x64) = random_bf16(m * k, 1);
    let (w, w64) = random_bf16(n * k, 2);
    let dx = stream.clone_htod(&x).map_err(cuda("uploading x"))?;
    let dw = stream.clone_htod(&w).map_err(cuda("uploading w"))?;
    let mut dy = stream
        .alloc_zeros::<bf16>(m * n)
        .map_err(cuda("allocating y"))?;
    let (a, b) = (
        TensorRef::from_slice(&dx, &[m, k])?,
        TensorRef::from_slice(&dw, &[n, k])?.t(),
    );
    let opts = GemmOptions::default();
    kiln.gemm(
        &stream,
        &a,
        &b,
        &mut TensorMut::from_slice(&mut dy, &[m, n])?,
        &opts,
    )?;
    let y = stream.clone_dtoh(&dy).map_err(cuda("downloading y"))?;
    let mut gemm = || {
        kiln.gemm(
            &stream,
            &a,
            &b,
            &mut TensorMut::from_slice(&mut dy, &[m, n])?,
            &opts,
        )
    };
    let want = gemm_rows(
        &GemmProblem::new(m, n, k, Layout::RC, OpDType::Bf16, OpDType::Bf16),
        &x64,
        &w64,
        None,
        &(0..m).collect::<Vec<_>>(),
    );
    let err = rel_error((0..m * n).map(|i| (y[i].to_f64(), want[i / n][i % n])));
    rows.push((
        "gemm 64x512x256",
        cpu_us(&stream, calls, &mut gemm)?,
        gpu_us(&stream, &mut gemm)?,
    ));

    // Attention: B1 S128 Hq8 Hkv2 d128, causal.
    let (s, hq, hkv, d) = (128, 8, 2, 128);
    let dq = stream
        .clone_htod(&random_bf16(s * hq * d, 3).0)
        .map_err(cuda("uploading q"))?;
    let dk = stream
        .clone_htod(&random_bf16(s * hkv * d, 4).0)
        .map_err(cuda("uploading k"))?;
    let dv = stream
        .clone_htod(&random_bf16(s * hkv * d, 5).0)
        .map_err(cuda("uploading v"))?;
    let mut dout = stream
        .alloc_zeros::<bf16>(s * hq * d)
        .map_err(cuda("allocating o"))?;
    let (tq, tk, tv) = (
        TensorRef::from_slice(&dq, &[1, s, hq, d])?,
        TensorRef::from_slice(&dk, &[1, s, hkv, d])?,
        TensorRef::from_slice(&dv, &[1, s, hkv, d])?,
    );
    let aopts = AttentionOptions {
        causal: true,
        ..AttentionOptions::default()
    };
    let mut attn = || {
        let mut o = TensorMut::from_slice(&mut dout, &[1, s, hq, d])?;
        kiln.attention(&stream, &tq, &tk, &tv, &mut o, None, &aopts)
    };
    rows.push((
        "attention B1 S128 Hq8 Hkv2 d128 causal",
        cpu_us(&stream, calls, &mut attn)?,
        gpu_us(&stream, &mut attn)?,
    ));

    // MoE: 4 experts, 256 rows, N 256, K 256 (grouped GEMM) and the fused SwiGLU.
    let (e, r, h) = (4, 256, 256);
    let offsets: Vec<i32> = vec![0, 64, 128, 192, 256];
    let dxm = stream
        .clone_htod(&random_bf16(r * h, 6).0)
        .map_err(cuda("uploading x"))?;
    let dwm = stream
        .clone_htod(&random_bf16(e * h * h, 7).0)
        .map_err(cuda("uploading w"))?;
    let dw13 = stream
        .clone_htod(&random_bf16(e * 2 * h * h, 8).0)
        .map_err(cuda("uploading w13"))?;
    let doff = stream
        .clone_htod(&offsets)
        .map_err(cuda("uploading offsets"))?;
    let mut dym = stream
        .alloc_zeros::<bf16>(r * h)
        .map_err(cuda("allocating y"))?;
    let (tx, tw, tw13, toff) = (
        TensorRef::from_slice(&dxm, &[r, h])?,
        TensorRef::from_slice(&dwm, &[e, h, h])?,
        TensorRef::from_slice(&dw13, &[e, 2 * h, h])?,
        TensorRef::from_slice(&doff, &[e + 1])?,
    );
    let rows_of = || MoeRows::Offsets {
        offsets: toff,
        host: None,
    };
    let mut grouped = || {
        let mut y = TensorMut::from_slice(&mut dym, &[r, h])?;
        kiln.grouped_gemm(&stream, &tx, &tw, rows_of(), &mut y)
    };
    rows.push((
        "grouped_gemm E4 256 rows N256 K256",
        cpu_us(&stream, calls, &mut grouped)?,
        gpu_us(&stream, &mut grouped)?,
    ));
    let mut swiglu = || {
        let mut y = TensorMut::from_slice(&mut dym, &[r, h])?;
        kiln.swiglu(
            &stream,
            &tx,
            SwigluWeights::Interleaved(tw13),
            rows_of(),
            None,
            &mut y,
        )
    };
    rows.push((
        "swiglu E4 256 rows N256 K256",
        cpu_us(&stream, calls, &mut swiglu)?,
        gpu_us(&stream, &mut swiglu)?,
    ));

    println!("| op | CPU µs per call | GPU µs |");
    println!("|---|---|---|");
    for (op, c, g) in &rows {
        println!("| {op} | {c:.1} | {g:.1} |");
    }
    Ok(Check {
        what: format!("host cost per call ({calls} calls a round)"),
        errors: vec![("gemm relative error", err, bound(OpDType::Bf16))],
    })
}

fn main() -> ExitCode {
    common::main("call_cost", run)
}
