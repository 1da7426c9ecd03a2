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
use kiln::api::{raw, RawTensor};
use kiln::device::{TiledArgs, TmaDType, TmaSwizzle};
use kiln::harness::verify::bound;
use kiln::ops::gemm::{DType as OpDType, GemmProblem, Layout};
use kiln::reference::gemm::gemm_rows;
use kiln::{
    AttentionOptions, GemmOptions, Kiln, MoeLayerOptions, MoeRouting, MoeRows, PagedOptions,
    SwigluWeights, TensorMut, TensorRef, VarlenOffsets,
};

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

    // The same GEMM as the Python package calls it: raw descriptions, a raw stream, no tracking.
    let raw_of = |ptr: u64, shape: &[usize], strides: &[isize]| RawTensor {
        ptr,
        dtype: kiln::DType::Bf16,
        shape: shape.to_vec(),
        strides: strides.to_vec(),
        device: 0,
    };
    let (ra, rb, rc) = (
        raw_of(a.info().ptr(), &[m, k], &[k as isize, 1]),
        raw_of(b.info().ptr(), &[k, n], &[1, k as isize]),
        raw_of(
            TensorMut::from_slice(&mut dy, &[m, n])?.info().ptr(),
            &[m, n],
            &[n as isize, 1],
        ),
    );
    let cu = stream.cu_stream();
    let mut gemm_raw = || {
        // SAFETY: the buffers live until the end of `run`, which synchronises the stream.
        unsafe { raw::gemm(kiln, cu, &ra, &rb, &rc, &opts) }
    };
    rows.push((
        "gemm 64x512x256, raw (the Python package's road)",
        cpu_us(&stream, calls, &mut gemm_raw)?,
        gpu_us(&stream, &mut gemm_raw)?,
    ));
    driver_costs(&stream, &mut rows, calls, a.info().ptr())?;

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

    // Decode over transformers' dense cache ([B, Hkv, S, D] memory seen [B, S, Hkv, D]): B8,
    // 1 query token, Hq32 Hkv8 d128, S 2048, lengths and first keys (a static cache, left
    // padding); and packed attention over the attention problem's rows as 2 sequences, the
    // offsets on the GPU only (no host copy).
    let (b, hq, hkv, smax) = (8, 32, 8, 2048);
    let dqd = stream
        .clone_htod(&random_bf16(b * hq * d, 9).0)
        .map_err(cuda("uploading q"))?;
    let dkc = stream
        .clone_htod(&random_bf16(b * hkv * smax * d, 10).0)
        .map_err(cuda("uploading the K cache"))?;
    let dvc = stream
        .clone_htod(&random_bf16(b * hkv * smax * d, 11).0)
        .map_err(cuda("uploading the V cache"))?;
    let dlens = stream
        .clone_htod(&[1500i32, 2000, 700, 1, 2048, 1024, 1999, 300])
        .map_err(cuda("uploading lengths"))?;
    let dstarts = stream
        .clone_htod(&[0i32, 17, 0, 0, 100, 3, 0, 299])
        .map_err(cuda("uploading first keys"))?;
    let mut dod = stream
        .alloc_zeros::<bf16>(b * hq * d)
        .map_err(cuda("allocating o"))?;
    let cache = [
        (hkv * smax * d) as isize,
        d as isize,
        (smax * d) as isize,
        1,
    ];
    let (tqd, tkc, tvc, tlens, tstarts) = (
        TensorRef::from_slice(&dqd, &[b, 1, hq, d])?,
        TensorRef::from_slice_strided(&dkc, &[b, smax, hkv, d], &cache)?,
        TensorRef::from_slice_strided(&dvc, &[b, smax, hkv, d], &cache)?,
        TensorRef::from_slice(&dlens, &[b])?,
        TensorRef::from_slice(&dstarts, &[b])?,
    );
    let popts = PagedOptions::default();
    let mut decode = || {
        let mut o = TensorMut::from_slice(&mut dod, &[b, 1, hq, d])?;
        let (lens, starts) = (Some(&tlens), Some(&tstarts));
        kiln.attention_kvcache(
            &stream, &tqd, &tkc, &tvc, lens, starts, &mut o, None, &popts,
        )
    };
    rows.push((
        "attention_kvcache B8 Hq32 Hkv8 d128 S2048 dense, left-padded",
        cpu_us(&stream, calls, &mut decode)?,
        gpu_us(&stream, &mut decode)?,
    ));
    let dcu = stream
        .clone_htod(&[0i32, 50, 128])
        .map_err(cuda("uploading offsets"))?;
    let tcu = TensorRef::from_slice(&dcu, &[3])?;
    let (pq, pk, pv) = (
        TensorRef::from_slice(&dq, &[s, 8, d])?,
        TensorRef::from_slice(&dk, &[s, 2, d])?,
        TensorRef::from_slice(&dv, &[s, 2, d])?,
    );
    let mut packed = || {
        let mut o = TensorMut::from_slice(&mut dout, &[s, 8, d])?;
        let offsets = VarlenOffsets {
            cu_q: &tcu,
            cu_k: &tcu,
            max_seqlen_q: 128,
            max_seqlen_k: 128,
            host: None,
        };
        kiln.attention_varlen(&stream, &pq, &pk, &pv, &mut o, None, offsets, &aopts)
    };
    rows.push((
        "attention_varlen 2 sequences, 128 rows, no host copy",
        cpu_us(&stream, calls, &mut packed)?,
        gpu_us(&stream, &mut packed)?,
    ));
    kiln.check_errors()?; // (the GPU found nothing wrong with the tables or offsets)

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

    // The whole MoE layer: 32 tokens, 8 experts top-2, hidden 256, width 256, transformers'
    // top-k given (the handle's workspace).
    let (t, le, k) = (32usize, 8usize, 2usize);
    let ids: Vec<i64> = (0..t * k).map(|p| ((p * 3 + p / k) % le) as i64).collect();
    let wts: Vec<f32> = vec![0.5; t * k];
    let dids = stream.clone_htod(&ids).map_err(cuda("uploading ids"))?;
    let dwts = stream.clone_htod(&wts).map_err(cuda("uploading weights"))?;
    let dw13l = stream
        .clone_htod(&random_bf16(le * 2 * h * h, 9).0)
        .map_err(cuda("uploading w13"))?;
    let dw2l = stream
        .clone_htod(&random_bf16(le * h * h, 10).0)
        .map_err(cuda("uploading w2"))?;
    let (tids, twts, tw13l, tw2l, txl) = (
        TensorRef::from_slice(&dids, &[t, k])?,
        TensorRef::from_slice(&dwts, &[t, k])?,
        TensorRef::from_slice(&dw13l, &[le, 2 * h, h])?,
        TensorRef::from_slice(&dw2l, &[le, h, h])?,
        TensorRef::from_slice(&dxm, &[t, h])?,
    );
    let mut layer = || {
        let mut y = TensorMut::from_slice(&mut dym, &[t, h])?;
        let given = MoeRouting::TopK {
            index: &tids,
            weights: &twts,
        };
        kiln.moe_layer(
            &stream,
            &txl,
            &tw13l,
            &tw2l,
            given,
            &mut y,
            &MoeLayerOptions::default(),
        )
    };
    rows.push((
        "moe_layer 32 tokens E8 top-2 H256 I256",
        cpu_us(&stream, calls, &mut layer)?,
        gpu_us(&stream, &mut layer)?,
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

/// What the driver's calls that a launch makes cost on this host (each in a loop): the floor
/// under every op's host cost.
fn driver_costs(
    stream: &Arc<CudaStream>,
    rows: &mut Vec<(&'static str, f64, f64)>,
    calls: usize,
    addr: u64,
) -> kiln::Result<()> {
    use cudarc::driver::sys;
    let cu = stream.cu_stream();
    let ctx = stream.context().clone();
    let per_call = |f: &mut dyn FnMut()| {
        for _ in 0..100 {
            f();
        }
        let t = Instant::now();
        for _ in 0..calls {
            f();
        }
        t.elapsed().as_secs_f64() * 1e6 / calls as f64
    };
    let mut c: sys::CUcontext = std::ptr::null_mut();
    // SAFETY (every call below): valid out-pointers and live handles of this context.
    rows.push((
        "driver: cuCtxGetCurrent",
        per_call(&mut || unsafe {
            sys::cuCtxGetCurrent(&mut c);
        }),
        0.0,
    ));
    rows.push((
        "driver: bind_to_thread (cudarc)",
        per_call(&mut || {
            let _ = ctx.bind_to_thread();
        }),
        0.0,
    ));
    rows.push((
        "driver: cuStreamGetCtx",
        per_call(&mut || unsafe {
            sys::cuStreamGetCtx(cu, &mut c);
        }),
        0.0,
    ));
    let mut status = sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE;
    rows.push((
        "driver: cuStreamIsCapturing",
        per_call(&mut || unsafe {
            sys::cuStreamIsCapturing(cu, &mut status);
        }),
        0.0,
    ));
    let map = TiledArgs::new(
        TmaDType::Bf16,
        addr,
        [256, 64],
        [512],
        [64, 64],
        TmaSwizzle::B128,
    );
    rows.push((
        "driver: cuTensorMapEncodeTiled (2D bf16)",
        per_call(&mut || {
            let _ = map.encode(String::new);
        }),
        0.0,
    ));
    let event = ctx
        .new_event(Some(CUevent_flags::CU_EVENT_DISABLE_TIMING))
        .map_err(cuda("making an event"))?;
    rows.push((
        "driver: cuEventRecord",
        per_call(&mut || {
            let _ = event.record(stream);
        }),
        0.0,
    ));
    rows.push((
        "driver: cuStreamWaitEvent",
        per_call(&mut || {
            let _ = stream.wait(&event);
        }),
        0.0,
    ));
    // An empty kernel, launched bare: what the driver's launch itself costs here (kiln's ops
    // hand it three 128-byte tensor maps and an argument block, ~450 bytes).
    let ptx = cudarc::nvrtc::compile_ptx(
        "struct Big { unsigned long long w[56]; };\n\
         extern \"C\" __global__ void empty_small(int x) {}\n\
         extern \"C\" __global__ void empty_big(const __grid_constant__ Big b) {}",
    )
    .map_err(|e| kiln::Error::cuda("compiling the empty kernels", format!("{e:?}")))?;
    let module = ctx
        .load_module(ptx)
        .map_err(cuda("loading the empty kernels"))?;
    let small = module
        .load_function("empty_small")
        .map_err(cuda("loading empty_small"))?;
    let big = module
        .load_function("empty_big")
        .map_err(cuda("loading empty_big"))?;
    let mut x = 0i32;
    let mut blob = [0u64; 56];
    let mut p_small = [&mut x as *mut i32 as *mut std::ffi::c_void];
    let mut p_big = [blob.as_mut_ptr() as *mut std::ffi::c_void];
    for (label, f, params) in [
        (
            "driver: cuLaunchKernel, empty kernel, 4 B of params",
            &small,
            p_small.as_mut_ptr(),
        ),
        (
            "driver: cuLaunchKernel, empty kernel, 448 B of params",
            &big,
            p_big.as_mut_ptr(),
        ),
    ] {
        let raw = f.cu_function();
        rows.push((
            label,
            per_call(&mut || unsafe {
                sys::cuLaunchKernel(raw, 1, 1, 1, 32, 1, 1, 0, cu, params, std::ptr::null_mut());
            }),
            0.0,
        ));
        stream.synchronize().map_err(cuda("synchronising"))?;
    }
    for (label, f, params) in [
        (
            "driver: cuLaunchKernelEx, empty kernel, 4 B",
            &small,
            p_small.as_mut_ptr(),
        ),
        (
            "driver: cuLaunchKernelEx, empty kernel, 448 B",
            &big,
            p_big.as_mut_ptr(),
        ),
    ] {
        let raw = f.cu_function();
        let lc = sys::CUlaunchConfig {
            gridDimX: 1,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: 32,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: 0,
            hStream: cu,
            attrs: std::ptr::null_mut(),
            numAttrs: 0,
        };
        rows.push((
            label,
            per_call(&mut || unsafe {
                sys::cuLaunchKernelEx(&lc, raw, params, std::ptr::null_mut());
            }),
            0.0,
        ));
        stream.synchronize().map_err(cuda("synchronising"))?;
    }
    // A graph of n empty launches captured once, then launched whole: what one launch of a
    // multi-kernel op would cost if it replayed a graph instead.
    let side = ctx.new_stream().map_err(cuda("making a stream"))?;
    let scu = side.cu_stream();
    let raw_small = small.cu_function();
    for (label, n) in [
        ("driver: cuGraphLaunch, 1 empty kernel", 1),
        ("driver: cuGraphLaunch, 4 empty kernels", 4),
        ("driver: cuGraphLaunch, 7 empty kernels", 7),
    ] {
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: a private stream captured in relaxed mode; the launches read nothing.
        unsafe {
            sys::cuStreamBeginCapture_v2(
                scu,
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
            .result()
            .map_err(cuda("beginning a capture"))?;
            for _ in 0..n {
                sys::cuLaunchKernel(
                    raw_small,
                    1,
                    1,
                    1,
                    32,
                    1,
                    1,
                    0,
                    scu,
                    p_small.as_mut_ptr(),
                    std::ptr::null_mut(),
                );
            }
            sys::cuStreamEndCapture(scu, &mut graph)
                .result()
                .map_err(cuda("ending a capture"))?;
            sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0)
                .result()
                .map_err(cuda("instantiating a graph"))?;
        }
        rows.push((
            label,
            per_call(&mut || unsafe {
                sys::cuGraphLaunch(exec, cu);
            }),
            0.0,
        ));
        stream.synchronize().map_err(cuda("synchronising"))?;
        // SAFETY: nothing of either is in flight after the synchronisation.
        unsafe {
            sys::cuGraphExecDestroy(exec);
            sys::cuGraphDestroy(graph);
        }
    }
    rows.push((
        "driver: cuMemsetD8Async, 32 KB",
        per_call(&mut || unsafe {
            sys::cuMemsetD8Async(addr, 0, 32 * 1024, cu);
        }),
        0.0,
    ));
    stream.synchronize().map_err(cuda("synchronising"))?;
    Ok(())
}

fn main() -> ExitCode {
    common::main("call_cost", run)
}
