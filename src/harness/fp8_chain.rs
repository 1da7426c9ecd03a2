//! FP8 GEMMs in a stream (`kiln fp8 bench --chain N`): N launches of one problem back to back,
//! each on its own copy of B (weights that the L2 does not hold from the launch before, as a
//! decode step's projections) and its own C, captured into a CUDA graph (no host launch cost
//! between them, as a model's decode step runs) and timed whole with L2 flushed before it; the
//! figure is the graph's time over N. Kiln's chain runs three ways, [`Fp8Pdl`]: plainly, each
//! launch the programmatic dependent of the one before, and so with B's first stages loaded
//! before the wait; cuBLASLt's chain of the same N launches beside them, interleaved graph by
//! graph. Each kiln chain is then replayed once more on C poisoned with NaN and compared, every
//! one of its N outputs, with cuBLASLt's: a launch that read or wrote across its wait shows there.

use cudarc::driver::sys;

use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::harness::bench::{Bench, BenchOptions, Row, Summary};
use crate::harness::fp8_bench::{c_rel_diff, fp8_row, operand, shown, vendor_peer};
use crate::ops::fp8::{self, Fp8Config, Fp8Operands, Fp8Pdl, Fp8Problem, Scales};
use crate::reference::data::HostData;

/// Most launches a chain takes (its copies of B must fit beside each other).
pub const MAX_CHAIN: usize = 64;

/// One captured and instantiated graph on the context's stream.
struct Graph(sys::CUgraphExec);

fn check(r: sys::CUresult, what: &'static str) -> Result<()> {
    match r {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        r => Err(Error::cuda(what, format!("{r:?}"))),
    }
}

impl Graph {
    /// What `enqueue` launches on `ctx`'s stream, captured (relaxed mode: the launches query
    /// occupancy and set function attributes on the host) and instantiated. Run `enqueue` once
    /// before, so that its kernels are loaded and its workspaces sized.
    fn capture(ctx: &Context, enqueue: &mut dyn FnMut() -> Result<()>) -> Result<Graph> {
        ctx.set_capturing(true);
        // SAFETY: the context's own stream, idle (the caller synchronised); the capture ends below
        // whatever `enqueue` does.
        let begun = check(
            unsafe {
                sys::cuStreamBeginCapture_v2(
                    ctx.stream,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
                )
            },
            "beginning a graph capture",
        );
        let ran = begun.and_then(|_| enqueue());
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above (an error if it never began).
        let ended = unsafe { sys::cuStreamEndCapture(ctx.stream, &mut graph) };
        ctx.set_capturing(false);
        let made = ran
            .and_then(|_| check(ended, "ending the graph capture"))
            .and_then(|_| {
                let mut exec: sys::CUgraphExec = std::ptr::null_mut();
                // SAFETY: `graph` is the captured graph; the executable copy is independent of it.
                check(
                    unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) },
                    "instantiating the graph",
                )
                .map(|_| Graph(exec))
            });
        if !graph.is_null() {
            // SAFETY: made by the capture, used by nothing else now.
            unsafe { sys::cuGraphDestroy(graph) };
        }
        made
    }

    fn launch(&self, ctx: &Context) -> Result<()> {
        // SAFETY: a live executable graph of this context, launched on its stream.
        check(
            unsafe { sys::cuGraphLaunch(self.0, ctx.stream) },
            "launching the graph",
        )
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: ours; the callers synchronise before the graph goes.
        unsafe { sys::cuGraphExecDestroy(self.0) };
    }
}

/// Times chains of `n` launches of `p` (see the module): one row per kiln config in `cfgs` (none:
/// the default choice) and [`Fp8Pdl`] mode, then cuBLASLt's with `vendor`. Rows as
/// [`crate::harness::fp8_bench::bench_fp8`]'s, the times per launch (the chain's over `n`), and
/// `chain` (n), `pdl` (the mode's `KILN_FP8_PDL` spelling), `rel_diff_vs_cublaslt` the largest
/// over the chain's outputs and `nan_outputs` how many of them hold a NaN.
pub fn bench_fp8_chain(
    ctx: &Context,
    p: &Fp8Problem,
    cfgs: &[Fp8Config],
    vendor: bool,
    opt: &BenchOptions,
    n: usize,
) -> Result<Vec<Row>> {
    if !(2..=MAX_CHAIN).contains(&n) {
        return Err(Error::invalid(format!(
            "--chain {n}: a chain is 2 to {MAX_CHAIN} launches; pass --chain 8, say"
        )));
    }
    p.validate()?;
    fp8::gemm::supports(p, &ctx.info).map_err(Error::refused(fp8::gemm::NAME))?;
    let chosen = [fp8::gemm::choose_by(p, &ctx.info, ctx.overrides.fp8.rule)];
    let cfgs: &[Fp8Config] = if cfgs.is_empty() { &chosen } else { cfgs };
    for &c in cfgs {
        fp8::gemm::check_config(p, c)?;
    }
    let c_bytes = p.m * p.ldc * p.out.size();
    let b_bytes = p.n * p.ldb;
    ctx.ensure_fits(
        &format!("a chain of {n} launches of {p}"),
        (n * (b_bytes + 2 * c_bytes)) as u64,
    )?;
    let a = operand(ctx, p.m, p.k, p.a, p.scale.a_granularity(), 0x5EED)?;
    // the same weights in n places (the scales, a few KB, shared: cuBLASLt's are set once)
    let b0 = operand(ctx, p.n, p.k, p.b, p.scale.b_granularity(), 0x5EEE)?;
    let bs: Vec<DeviceBuffer> = (0..n)
        .map(|_| {
            let b = ctx.alloc(b0.codes.bytes())?;
            copy(ctx, &b, &b0.codes)?;
            Ok(b)
        })
        .collect::<Result<_>>()?;
    let kc: Vec<DeviceBuffer> = (0..n).map(|_| ctx.alloc(c_bytes)).collect::<Result<_>>()?;
    let vc: Vec<DeviceBuffer> = (0..n).map(|_| ctx.alloc(c_bytes)).collect::<Result<_>>()?;
    ctx.synchronize()?;
    let run = Bench::new(ctx, opt)?;
    let (lt, note) = vendor_peer(
        ctx,
        &run,
        vendor,
        p,
        [a.scales.ptr(), b0.scales.ptr()],
        [a.codes.ptr(), bs[0].ptr(), vc[0].ptr()],
    )?;
    // kiln's chain under `pdl`: the first launch plain (nothing of the chain before it)
    let (a_r, b0_r, bs_r, kc_r) = (&a, &b0, &bs, &kc);
    let kiln_chain = |cfg: Fp8Config, pdl: Fp8Pdl| {
        move || -> Result<()> {
            for (i, (b, c)) in bs_r.iter().zip(kc_r).enumerate() {
                let ops = Fp8Operands {
                    a: &a_r.codes,
                    b,
                    sa: Scales::Device(&a_r.scales),
                    sb: Scales::Device(&b0_r.scales),
                    c,
                };
                let mode = if i == 0 { Fp8Pdl::Off } else { pdl };
                fp8::gemm::gemm_launch(ctx, p, &ops, cfg, mode)?;
            }
            Ok(())
        }
    };
    let mut versions: Vec<(Fp8Config, Fp8Pdl)> = Vec::new();
    for &c in cfgs {
        for pdl in Fp8Pdl::ALL {
            versions.push((c, pdl));
        }
    }
    let mut graphs = Vec::new();
    for &(c, pdl) in &versions {
        let mut enqueue = kiln_chain(c, pdl);
        enqueue()?;
        ctx.synchronize()?;
        graphs.push(Graph::capture(ctx, &mut enqueue)?);
    }
    if let Some(lt) = lt.as_ref() {
        let mut enqueue = || -> Result<()> {
            for (b, c) in bs.iter().zip(&vc) {
                lt.launch(ctx, a.codes.ptr(), b.ptr(), c.ptr())?;
            }
            Ok(())
        };
        enqueue()?;
        ctx.synchronize()?;
        graphs.push(Graph::capture(ctx, &mut enqueue)?);
    }
    let mut launches: Vec<Box<dyn FnMut() -> Result<()> + '_>> = graphs
        .iter()
        .map(|g| Box::new(move || g.launch(ctx)) as Box<dyn FnMut() -> Result<()>>)
        .collect();
    let mut refs: Vec<&mut dyn FnMut() -> Result<()>> = launches
        .iter_mut()
        .map(|l| l.as_mut() as &mut dyn FnMut() -> Result<()>)
        .collect();
    let times = run.interleaved(&mut refs)?;
    let per_launch = |t: &Summary| Summary {
        median_ms: t.median_ms / n as f64,
        min_ms: t.min_ms / n as f64,
        max_ms: t.max_ms / n as f64,
        reps: t.reps,
    };
    let row = |version: &str, config: Option<String>, pdl: Option<&str>, t: &Summary| {
        fp8_row(p, version, config, &per_launch(t), &note)
            .with("chain", n)
            .with("pdl", pdl)
    };
    let mut out: Vec<Row> = versions
        .iter()
        .zip(&times)
        .map(|(&(c, pdl), t)| {
            // (the mode in the config's column too, for the text table)
            let label = format!("{}+pdl{}", shown(ctx, p, &c), pdl.name());
            row(fp8::gemm::NAME, Some(label), Some(pdl.name()), t)
        })
        .collect();
    if lt.is_some() {
        let vt = &times[versions.len()];
        let get = |b: &DeviceBuffer| -> Result<HostData> {
            Ok(HostData::from_bytes(p.out, &b.download::<u8>(c_bytes)?))
        };
        let want: Vec<HostData> = vc.iter().map(get).collect::<Result<_>>()?;
        for ((r, g), t) in out.iter_mut().zip(&graphs).zip(&times) {
            r.set("speedup_vs_cublaslt", vt.median_ms / t.median_ms);
            // the chain once more on poisoned outputs (NaN in every 16- or 32-bit format)
            for c in &kc {
                c.fill_bytes(0xFF, ctx)?;
            }
            g.launch(ctx)?;
            ctx.synchronize()?;
            // the largest difference over the chain's outputs, and how many hold a NaN (the
            // poison left where a launch did not write, or a read across the wait gone wrong):
            // JSON has no NaN, so they are counted apart
            let (mut worst, mut nan_outputs) = (0.0f64, 0usize);
            for (c, w) in kc.iter().zip(&want) {
                let d = c_rel_diff(p, &get(c)?, w);
                match d.is_nan() {
                    true => nan_outputs += 1,
                    false => worst = worst.max(d),
                }
            }
            r.set("rel_diff_vs_cublaslt", worst);
            r.set("nan_outputs", nan_outputs);
        }
        out.push(row("cublaslt", None, None, vt));
    }
    ctx.synchronize()?;
    drop(refs);
    drop(launches);
    drop(graphs);
    Ok(out)
}

/// `dst` = `src` (the same size), on the context's stream.
fn copy(ctx: &Context, dst: &DeviceBuffer, src: &DeviceBuffer) -> Result<()> {
    // SAFETY: both allocations hold `src.bytes()` bytes and outlive the stream's use of them.
    unsafe {
        cudarc::driver::result::memcpy_dtod_async(dst.ptr(), src.ptr(), src.bytes(), ctx.stream)
    }
    .map_err(|e| Error::cuda("copying B", format!("{e:?}")))
}
