//! The launch path: a resolved choice prepared for the operands, then executed: the copies, the
//! workspace, the tensor maps, the kernel launch and C's copy back (`KILN_WGMMA_INPLACE=0`).

use super::plan::WorkLayout;
use super::{as_read, c_target, operand_maps, output_map, repack, warn_forced_fallback};
use super::{Choice, GemmOverrides, Notes, Prepared, WgmmaTmaWs, THREADS};
use crate::device::{Context, Function, LaunchConfig};
use crate::error::{Error, Result};
use crate::ops::gemm::{alignment, GemmArgs, GemmKernel, GemmOperands, GemmProblem};

/// The kernel's `Extras` parameter: split-K / stream-K workspace and counters, the split factor,
/// the first split (or stream-K) tile, and the stream-K K blocks (0: none).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct Extras {
    ws: u64,
    counters: u64,
    splits: i32,
    split_from: i32,
    sk_w: u32,
    /// 1 (`KILN_WGMMA_ROWV=1`, an experiment): the row-store epilogue stores 16-bit C (beta = 0)
    /// by 16-byte windows of its rows; 0 (the default): an element a lane.
    rows_v: u32,
}

/// The split-K workspace (fp32 partial tiles) and per-tile arrival counters, kept across
/// launches and grown on demand. Counters start at 0 and the kernel returns each to 0 (the last
/// unit of a tile resets it), so they are zeroed once, at allocation. One per context
/// (`ctx.scratch`).
///
/// Device addresses of a workspace of at least `ws_bytes` and `counters` counters.
fn workspace(ctx: &Context, ws_bytes: usize, counters: usize) -> Result<(u64, u64)> {
    Ok((
        ctx.scratch.gemm_split.at_least(ctx, ws_bytes)?,
        ctx.scratch
            .gemm_split_counters
            .at_least(ctx, counters * 4)?,
    ))
}

/// What a launch works out before its operands' addresses matter beyond their alignment: the
/// prepared choice, its loaded variant, the work layout over the resident clusters and the
/// launch shape. Kept in the context's memo by problem and alignment ([`WgmmaTmaWs::launch`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Resolved {
    prep: Prepared,
    f: Function,
    layout: WorkLayout,
    lc: LaunchConfig,
}

/// Each operand's alignment as far as the choice depends on it (`repack`, `output_map`: 16
/// bytes).
fn align_classes(ops: &GemmOperands) -> [u64; 3] {
    [ops.a.ptr(), ops.b.ptr(), ops.c.ptr()].map(|p| alignment(p).min(16))
}

impl WgmmaTmaWs {
    /// What `launch` runs for `p`: the context's tuned config or the heuristic, then the env
    /// overrides.
    pub(super) fn choice_for(&self, ctx: &Context, p: &GemmProblem, env: &GemmOverrides) -> Choice {
        let p = &as_read(p);
        let tuned = ctx.tuned.gemm(&ctx.info, self.name(), p);
        Choice::resolve(p, ctx.info.sm_count, tuned.as_ref(), env)
    }

    /// The default launch: `choice_for`'s choice, resolved once per problem and alignment
    /// (the context's memo; the tuned table and overrides it depends on are the context's
    /// own), then run on these operands.
    pub(super) fn launch_memoised(
        &self,
        ctx: &Context,
        p: &GemmProblem,
        ops: &GemmOperands,
    ) -> Result<()> {
        let env = ctx.overrides.gemm;
        let r = ctx.memo.get_or_try(&(p.key(), align_classes(ops)), || {
            let addrs = (ops.a.ptr(), ops.b.ptr(), ops.c.ptr());
            self.resolve(ctx, p, addrs, self.choice_for(ctx, p, &env), false, &env)
        })?;
        self.run(ctx, ops, &r, None, &env)
    }

    /// The one launch path of a given choice: `launch_with` (a config of the space) and the
    /// instrumented launch end here with the resolved choice, which is prepared for these
    /// operands as [`super::plan`] prepares it, then run.
    /// `trace`: a buffer for the instrumented variant's stamps (the launch is then unsplit).
    /// `env`: the overrides, read once per launch (the choice came from the same ones).
    pub(super) fn launch_choice(
        &self,
        ctx: &Context,
        p: &GemmProblem,
        ops: &GemmOperands,
        choice: Choice,
        trace: Option<u64>,
        env: &GemmOverrides,
    ) -> Result<()> {
        let choice = match trace {
            Some(_) => Choice {
                splits: 1,
                tail: false,
                stream_k: false,
                ..choice
            },
            None => choice,
        };
        let addrs = (ops.a.ptr(), ops.b.ptr(), ops.c.ptr());
        let r = self.resolve(ctx, p, addrs, choice, trace.is_some(), env)?;
        self.run(ctx, ops, &r, trace, env)
    }

    /// `choice` prepared for operands at `addrs`, its variant (the instrumented one with
    /// `trace`) loaded, laid over as many clusters as the GPU keeps resident
    /// (`KILN_WGMMA_GRID` at most).
    fn resolve(
        &self,
        ctx: &Context,
        p: &GemmProblem,
        addrs: (u64, u64, u64),
        choice: Choice,
        trace: bool,
        env: &GemmOverrides,
    ) -> Result<Resolved> {
        let prep = Prepared::new(p, addrs, choice, env, &mut Notes::off());
        let cfg = prep.tile;
        if (cfg.bn, cfg.pingpong) != (choice.tile.bn, choice.tile.pingpong)
            && env.tile == Some(choice.tile)
        {
            warn_forced_fallback(choice.tile, cfg, prep.epi);
        }
        let spec = prep.spec(&ctx.arch());
        let f = ctx.function(&match trace {
            true => spec.define("KILN_TRACE", 1u32),
            false => spec,
        })?;
        let slots = ctx.max_active_clusters(&f, cfg.cluster, THREADS, cfg.smem_bytes());
        let slots = env.grid.map_or(slots, |g| slots.min(g));
        let layout = prep.layout(slots);
        // The plan splits at most what was asked for, so never without the split code.
        debug_assert!(prep.split_code || (layout.split.splits <= 1 && layout.sk_from.is_none()));
        let lc = LaunchConfig {
            grid: (layout.split.grid, 1, 1),
            block: (THREADS, 1, 1),
            smem_bytes: cfg.smem_bytes(),
            cluster: (cfg.cluster > 1).then_some((cfg.cluster, 1, 1)),
        };
        Ok(Resolved {
            prep,
            f,
            layout,
            lc,
        })
    }

    /// Runs `r` on `ops`: its copies, the kernel, then C's copy back (`KILN_WGMMA_INPLACE=0`).
    fn run(
        &self,
        ctx: &Context,
        ops: &GemmOperands,
        r: &Resolved,
        trace: Option<u64>,
        env: &GemmOverrides,
    ) -> Result<()> {
        let prep = &r.prep;
        let (p, read, cfg) = (&prep.p, &prep.read, prep.tile);
        // Operands TMA cannot address are read in place by the producer's copies (`prep.cpa`), or
        // from padded copies (`read` has their leading dimensions); C is written in place, or
        // (`KILN_WGMMA_INPLACE=0`) through scratch. The C parameter of the `KILN_EPI=0`
        // epilogues is a copy of A's map that is never used.
        // (swap-AB: the kernel's A is B and its B is A)
        let (a_in, b_in) = match prep.choice.swap {
            true => (ops.b.ptr(), ops.a.ptr()),
            false => (ops.a.ptr(), ops.b.ptr()),
        };
        let (a_ptr, b_ptr) = repack(ctx, prep, a_in, b_in)?;
        let c_ptr = c_target(ctx, prep, ops.c.ptr())?;
        let tc = output_map(read, c_ptr).filter(|_| prep.epi.tma());
        let (ws, counters) = match r.layout.workspace(cfg.bn) {
            Some((bytes, counters)) => workspace(ctx, bytes, counters)?,
            None => (0, 0),
        };
        let (ta, tb) = operand_maps(read, a_ptr, b_ptr, cfg);
        // An operand the producer copies in place has a map the kernel never reads (nor
        // prefetches): its own, made encodable (a base and row stride rounded to 16 bytes).
        let [a_off, b_off] = prep.cpa.unwrap_or([16; 2]).map(|w| w < 16);
        let placeholder = |t: crate::device::Tma2d| crate::device::Tma2d {
            addr: t.addr & !15,
            row_stride_bytes: t.row_stride_bytes.next_multiple_of(16),
            ..t
        };
        let ta = if a_off { placeholder(ta) } else { ta };
        let tb = if b_off { placeholder(tb) } else { tb };
        for t in [&ta, &tb] {
            t.validate().map_err(|reason| Error::Unsupported {
                kernel: self.name().into(),
                reason,
            })?;
        }
        let mut map_a = ta.encode_with(ctx.overrides.tma.promotion)?;
        let mut map_b = tb.encode_with(ctx.overrides.tma.promotion)?;
        let (splits, split_from, sk_w) = r.layout.extras();
        let mut extras = Extras {
            ws: trace.unwrap_or(ws),
            counters,
            splits,
            split_from,
            sk_w,
            rows_v: env.rows_v as u32,
        };
        let mut map_c = match tc {
            Some(t) => t.encode_with(ctx.overrides.tma.promotion)?,
            None => map_a,
        };
        let mut args = GemmArgs {
            a: a_ptr,
            b: b_ptr,
            c: c_ptr,
            ..GemmArgs::new(read, ops)
        };
        // After a copy of ours (an operand read from scratch, or C's scratch filled for beta),
        // the kernel is launched as that copy's dependent: its CTAs are placed while the copy
        // runs, and wait for it in `grid_dependency_wait` before anything else.
        let after_copy = a_ptr != a_in || b_ptr != b_in || (prep.c.is_some() && p.beta != 0.0);
        // SAFETY: the kernel takes (TmaMap, TmaMap, TmaMap, GemmArgs, Extras): three 128-byte
        // maps, the argument block and the extras (workspace sized for this problem's tiles and
        // splits above), in that order. The maps address A, B and C (C's only with a TMA
        // epilogue; an operand the producer copies in place has a placeholder map, never read),
        // which the caller keeps alive and has checked against the problem (or, `c_target`, C's
        // scratch); the `KILN_EPI=0` epilogues and the producer's copies reach C, A and B through
        // `args`. The kernel executes `grid_dependency_wait` first, so it may be launched as a
        // dependent.
        unsafe {
            let launch = if after_copy && env.pdl {
                Function::launch_dependent
            } else {
                Function::launch
            };
            launch(
                &r.f,
                ctx.stream,
                &r.lc,
                &mut [
                    map_a.as_param(),
                    map_b.as_param(),
                    map_c.as_param(),
                    args.as_param(),
                    &mut extras as *mut Extras as *mut std::ffi::c_void,
                ],
            )
        }?;
        match prep.c {
            // SAFETY: the scratch holds M rows of N elements at pitch read.ldc, written by the
            // launch above on this stream; C spans M rows of N at pitch ldc (validated).
            Some(_) => unsafe {
                crate::ops::gemm::pack_rows::launch(
                    ctx,
                    p.output.size(),
                    c_ptr,
                    read.ldc,
                    ops.c.ptr(),
                    p.ldc,
                    p.m,
                    p.n,
                )
            },
            None => Ok(()),
        }
    }
}
