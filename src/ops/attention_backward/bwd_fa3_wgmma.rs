//! Host side of `kernels/attention/bwd_fa3_wgmma.cu`: the FlashAttention-3-style backward (a
//! producer warp feeding Q, dO, LSE and D by TMA through a ring, two WGMMA warpgroups of 64 keys
//! each, dK and dV in registers, dQ by fp32 atomics), between `bwd_prep`'s two passes. Head dims
//! 64 and 128, specialised per head dim and dtype; the causal mask and the deterministic mode
//! are run-time arguments. The default at d64/d128 since its first H200 run (2026-11-29). Its
//! tile, support check and launch also serve `bwd_fa3_bulk_dq`, the same block with dQ staged in
//! shared memory.

use super::dq_fused::DqFused;
use super::knobs::{Knob, Knobs};
use super::tail::{self, TailPlan};
use super::{
    bwd_prep, check_aligned, check_buffers, check_shape, refuse_window, AttentionBackwardKernel,
    AttnBwdArgs, BackwardOperands, BackwardProblem, BackwardWorkspace,
};
use crate::device::{
    Context, DeviceBuffer, DeviceInfo, LaunchConfig, TensorMap, TiledArgs, TmaDType, TmaSwizzle,
};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::attention::fa3_wgmma::{encode, map_shape};
use crate::ops::attention::DTYPES;
use crate::ops::gemm::DType;
use crate::overrides::AttentionOverrides;

pub struct BwdFa3Wgmma;

/// The head dims it covers (d256's dK and dV of 64 keys take 256 registers a thread).
pub const BWD_WGMMA_DIMS: [usize; 2] = [64, 128];

/// Query rows per step (a tile's `bm` may double it: `bwd_fa3_m128`) and keys per block (BM, BN
/// in the device file). The maps' boxes, the dQ accumulator's reduce boxes and the deterministic
/// mode's counters keep 64-row units at either step.
pub(super) const BM: u32 = 64;
pub(super) const BN: u32 = 128;
/// A producer warpgroup and two MMA warpgroups.
const THREADS: u32 = 384;

/// How one head dim is specialised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WgmmaBwdTile {
    pub d: u32,
    /// Depth of the Q / dO ring.
    pub stages: u32,
    /// dQ's split between the two warpgroups: 0 by columns (each D/2 columns over all 128 keys,
    /// one 64-wide box of K each: d128), 1 by keys (each all D columns over its own 64 keys, both
    /// adding: d64, whose half of a box would be a 32-wide MN-major operand), 2 by query rows (at
    /// 128 rows a step: each its 64 rows, all D columns over all 128 keys; `bwd_fa3_m128_rows`).
    pub dq_split: u32,
    /// How dQ's partials reach the fp32 accumulator (which device file the tile compiles).
    pub dq: DqAdd,
    /// The two warpgroups take turns to issue Sᵀ and dPᵀ (`KILN_BWD_PINGPONG`; `TensorTile`
    /// only, the define `KILN_BWD_PP`).
    pub pingpong: bool,
    /// `bwd_fa3_lookahead.cu` (`TensorTile` split by columns at d128, no turns): descriptors by
    /// adds and, unless `KILN_BWD_NO_AHEAD` (the define `KILN_BWD_SAHEAD` 0), the next query
    /// block's Sᵀ issued before this block's dQ is staged.
    pub ahead: Ahead,
    /// Query rows a step: 64, or 128 (`bwd_fa3_m128`: d64 split by keys, `bwd_fa3_lookahead.cu`
    /// with the define `KILN_BM`).
    pub bm: u32,
    /// Two dQ staging tiles a warpgroup, each block's added after the next block's dSᵀ barrier
    /// (`bwd_fa3_dq_late`: `bwd_fa3_lookahead.cu` with the define `KILN_BWD_DQ_LATE`).
    pub dq_late: bool,
    /// The deterministic mode's dQ through a writer warp in a fixed order of key blocks
    /// (`bwd_fa3_lookahead.cu` with the define `KILN_BWD_DET_WRITER`), and when it bumps a
    /// counter.
    pub det_writer: DetWriter,
    /// The sliding window (`bwd_fa3_lookahead.cu` with the define `KILN_BWD_WINDOW`): the walk
    /// over the query blocks the window reaches, the edge blocks masked.
    pub window: bool,
    /// A packed batch (`bwd_fa3_lookahead.cu` with the define `KILN_BWD_VARLEN`, always beside
    /// `KILN_BWD_WINDOW`: one variant for packed batches with or without a window).
    pub varlen: bool,
    /// The packed grid with the sequences' key blocks back to back (`KILN_BWD_VARLEN_COMPACT`:
    /// the define `KILN_BWD_VARLEN` 2, `kernels/attention/bwd_varlen_grid.cuh`; `varlen` only).
    pub varlen_compact: bool,
    /// How many of every 8 of Pᵀ's exponentials go to the FMA pipe as a polynomial instead of
    /// MUFU (`bwd_fa3_m128_fma`: the define `KILN_BWD_EXP_POLY`; 0: none, no define).
    pub exp_poly: u32,
    /// dSᵀ = Pᵀ ∘ (dPᵀ − D) in packed bf16 pairs from the rounded Pᵀ (`bwd_fa3_m128_fma`, bf16:
    /// the define `KILN_BWD_DS_PACKED`; 128 rows a step only).
    pub ds_packed: bool,
    /// dQ converted in the main kernel by its last adder's writer warp, no postprocess, and
    /// whether the converters leave the accumulator zero (`KILN_BWD_DQ_FUSED`: the define
    /// `KILN_BWD_DQ_FUSED` 1 or 2; 3, the last key block of each sequence converts it, no
    /// writer; `varlen` on d64's row split's tile or d128's column split's only,
    /// `kernels/attention/bwd_dq_fused.cuh`).
    pub dq_fused: DqFused,
    /// The grid's last partial wave of key blocks split into parts (`KILN_BWD_TAIL`:
    /// `bwd_fa3_lookahead.cu` with the define `KILN_BWD_TAIL`, the dense walk only; [`super::tail`]).
    pub tail: bool,
}

/// Whether a `TensorTile` tile compiles `bwd_fa3_tma_dq.cu` or `bwd_fa3_lookahead.cu`, and which
/// walk of the latter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ahead {
    /// `bwd_fa3_tma_dq.cu` (and every other kind of tile).
    No,
    /// `bwd_fa3_lookahead.cu` with the next block's Sᵀ issued early (its default).
    SAhead,
    /// `bwd_fa3_lookahead.cu` with only the descriptors by adds (`KILN_BWD_NO_AHEAD=1`).
    DescOnly,
}

/// Whether a tile's deterministic mode adds dQ through a writer warp (`KILN_BWD_DET_WRITER`). The
/// writer that bumped a counter only once the next block's adds were issued (the define 1,
/// `bwd_fa3_ordered_dq`) was removed on 2026-11-30; the define keeps the value 2, so that the
/// labels and cache keys stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetWriter {
    /// No writer: the consumers' ordered atomics.
    No,
    /// As soon as its adds are complete, the next block's turn waited for before its tiles
    /// arrive (`bwd_fa3_ordered_eager`, the define 2).
    Eager,
}

/// How a WGMMA backward adds dQ's partials into the fp32 accumulator (its deterministic mode
/// always by ordered per-thread atomics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DqAdd {
    /// Per-thread `red.global.add.v2.f32` (`bwd_fa3_wgmma.cu`).
    Atomic,
    /// A padded staging buffer per warpgroup, one bulk reduce-add per row, issued by 16 lanes of
    /// each warp (`bwd_fa3_bulk_dq.cu`).
    BulkRows,
    /// A swizzled staging tile per warpgroup, one TMA tensor reduce-add per tile through a
    /// rank-5 map over the accumulator (`bwd_fa3_tma_dq.cu`).
    TensorTile,
}

impl WgmmaBwdTile {
    pub fn for_dim(d: usize) -> WgmmaBwdTile {
        let d64 = WgmmaBwdTile {
            d: 64,
            stages: 3,
            dq_split: 1,
            dq: DqAdd::Atomic,
            pingpong: false,
            ahead: Ahead::No,
            bm: BM,
            dq_late: false,
            det_writer: DetWriter::No,
            window: false,
            varlen: false,
            varlen_compact: false,
            exp_poly: 0,
            ds_packed: false,
            tail: false,
            dq_fused: DqFused::Off,
        };
        match d {
            128 => WgmmaBwdTile {
                d: 128,
                stages: 2,
                dq_split: 0,
                ..d64
            },
            _ => d64,
        }
    }

    /// The tile of a version that stages dQ in shared memory (`dq`: `BulkRows` or
    /// `TensorTile`): the same block; d64 takes a 4th ring stage (the staging leaves room),
    /// d128 keeps 2 (`bwd_fa3_bulk_dq`'s third would not fit beside its padded buffers); `keys`:
    /// d128 splits dQ by keys as d64 does (`KILN_BWD_DQ_KEYS`).
    pub fn staged_for(d: usize, keys: bool, dq: DqAdd) -> WgmmaBwdTile {
        let t = WgmmaBwdTile::for_dim(d);
        WgmmaBwdTile {
            stages: if t.d == 64 { 4 } else { t.stages },
            dq_split: if keys { 1 } else { t.dq_split },
            dq,
            ..t
        }
    }

    /// Whether dQ goes through a staging buffer in shared memory.
    fn staged(&self) -> bool {
        self.dq != DqAdd::Atomic
    }

    /// dQ rows per warpgroup a step: all, or half split by rows.
    fn dq_rows(&self) -> u32 {
        if self.dq_split == 2 {
            self.bm / 2
        } else {
            self.bm
        }
    }

    /// dQ columns per warpgroup: D/2 split by columns, all D split by keys or rows.
    pub fn dq_cols(&self) -> u32 {
        if self.dq_split == 0 {
            self.d / 2
        } else {
            self.d
        }
    }

    /// K and V, the ring of Q and dO, two dSᵀ buffers [128][bm] (one staged and split by keys
    /// at d128 or bm 128, where two would not fit), LSE and D per stage, the dQ staging buffers
    /// if any (per warpgroup [bm][columns] fp32, rows padded by 8 floats for the bulk rows; two
    /// a warpgroup with `dq_late`; half the rows split by rows), the writer's walk table (`det_writer`), the
    /// barriers, and 1 KB to align the base to the 128B swizzle's repeat.
    pub fn smem_bytes(&self) -> u32 {
        let bm = self.bm;
        let kv = 2 * BN * self.d * 2;
        let stage = 2 * bm * self.d * 2;
        let ds_bufs = if self.staged() && self.dq_split == 1 && (self.d == 128 || bm == 128) {
            1
        } else {
            2
        };
        let ds = ds_bufs * BN * bm * 2;
        let vec = self.stages * 2 * bm * 4;
        let dq = match self.dq {
            DqAdd::Atomic => 0,
            DqAdd::BulkRows => 2 * bm * (self.dq_cols() + 8) * 4,
            DqAdd::TensorTile => {
                (1 + self.dq_late as u32) * 2 * self.dq_rows() * self.dq_cols() * 4
            }
        };
        let bars = 8 * (1 + 2 * self.stages);
        // the writer's walk table: 8 (head, query block) pairs
        let walk = if self.det_writer == DetWriter::No {
            0
        } else {
            64
        };
        // the fused conversion's queue past the barriers (bwd_dq_fused.cuh's FQ_BYTES, rounded)
        let queue = if self.dq_fused.queue() { 256 } else { 0 };
        1024 + kv + self.stages * stage + ds + vec + dq + walk + bars + queue
    }

    pub fn spec(&self, arch: &str, dtype: DType) -> KernelSpec {
        let (file, entry) = match self.dq {
            DqAdd::Atomic => ("attention/bwd_fa3_wgmma.cu", "attn_bwd_fa3_wgmma"),
            DqAdd::BulkRows => ("attention/bwd_fa3_bulk_dq.cu", "attn_bwd_fa3_bulk_dq"),
            DqAdd::TensorTile if self.ahead != Ahead::No => {
                ("attention/bwd_fa3_lookahead.cu", "attn_bwd_fa3_lookahead")
            }
            DqAdd::TensorTile => ("attention/bwd_fa3_tma_dq.cu", "attn_bwd_fa3_tma_dq"),
        };
        let spec = KernelSpec::new(file, entry, arch)
            .define("KILN_IN", dtype.code())
            .define("KILN_D", self.d)
            .define("KILN_STAGES", self.stages)
            .define("KILN_DQ_SPLIT", self.dq_split)
            .define("KILN_SMEM", self.smem_bytes());
        // (no define at 64 rows: the older variants' labels and cache keys stay)
        let spec = if self.bm == BM {
            spec
        } else {
            spec.define("KILN_BM", self.bm)
        };
        let spec = if self.dq_late {
            spec.define("KILN_BWD_DQ_LATE", 1)
        } else {
            spec
        };
        let spec = match self.det_writer {
            DetWriter::No => spec,
            DetWriter::Eager => spec.define("KILN_BWD_DET_WRITER", 2),
        };
        // (no defines for the dense, unwindowed walk: the older variants' labels stay)
        let spec = if self.window || self.varlen {
            spec.define("KILN_BWD_WINDOW", 1)
        } else {
            spec
        };
        let spec = if self.varlen {
            spec.define("KILN_BWD_VARLEN", 1 + self.varlen_compact as u32)
        } else {
            spec
        };
        // (no defines without them: the older variants' labels stay)
        let spec = if self.exp_poly > 0 {
            spec.define("KILN_BWD_EXP_POLY", self.exp_poly)
        } else {
            spec
        };
        let spec = if self.ds_packed && dtype == DType::Bf16 {
            spec.define("KILN_BWD_DS_PACKED", 1)
        } else {
            spec
        };
        let spec = if self.tail {
            spec.define("KILN_BWD_TAIL", 1)
        } else {
            spec
        };
        let spec = if self.dq_fused.on() {
            spec.define("KILN_BWD_DQ_FUSED", self.dq_fused.define())
        } else {
            spec
        };
        match (self.dq, self.ahead) {
            (DqAdd::TensorTile, Ahead::No) => spec.define("KILN_BWD_PP", self.pingpong as u32),
            (DqAdd::TensorTile, a) => spec.define("KILN_BWD_SAHEAD", (a == Ahead::SAhead) as u32),
            _ => spec,
        }
    }
}

impl AttentionBackwardKernel for BwdFa3Wgmma {
    fn name(&self) -> &'static str {
        "bwd_fa3_wgmma"
    }
    fn summary(&self) -> &'static str {
        "FA3 backward: a block per 128 keys, TMA producer warp + 2 WGMMA warpgroups (keys as M), dK/dV in registers, dQ by fp32 atomics"
    }
    fn rung(&self) -> u32 {
        2
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        supports_tile(p, dev, WgmmaBwdTile::for_dim(p.attn.head_dim))
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        variants_of(arch, WgmmaBwdTile::for_dim)
    }
    fn launch_knobs(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
        o: &AttentionOverrides,
    ) -> Result<()> {
        launch_tile(
            self.name(),
            ctx,
            p,
            ops,
            o,
            WgmmaBwdTile::for_dim(p.attn.head_dim),
        )
    }
    fn knobs(&self, p: &BackwardProblem) -> Knobs {
        wgmma_knobs(p, &WgmmaBwdTile::for_dim(p.attn.head_dim))
    }
}

/// Whether a WGMMA backward of tile `t` can run `p` on `dev` (sm_90, d64/d128, its shared memory).
pub fn supports_tile(
    p: &BackwardProblem,
    dev: &DeviceInfo,
    t: WgmmaBwdTile,
) -> std::result::Result<(), String> {
    if dev.compute_capability != (9, 0) {
        let (maj, min) = dev.compute_capability;
        return Err(format!(
            "needs compute capability 9.0 (sm_90a: wgmma, TMA); this GPU is {maj}.{min}"
        ));
    }
    check_shape(p, &BWD_WGMMA_DIMS)?;
    if !t.window {
        refuse_window(p)?;
    }
    dev.check_smem(t.smem_bytes())
}

/// The preprocess, the postprocess and the main kernel of `tile(d)` per head dim and dtype.
pub fn variants_of(arch: &str, tile: impl Fn(usize) -> WgmmaBwdTile) -> Vec<KernelSpec> {
    let mut v = vec![bwd_prep::pre_spec(arch), bwd_prep::post_spec(arch)];
    for d in BWD_WGMMA_DIMS {
        for dt in DTYPES {
            v.push(tile(d).spec(arch, dt));
        }
    }
    v
}

/// The three launches of a WGMMA backward of tile `t` under the knobs `o` (`name` for refusals).
pub fn launch_tile(
    name: &str,
    ctx: &Context,
    p: &BackwardProblem,
    ops: &BackwardOperands,
    o: &AttentionOverrides,
    t: WgmmaBwdTile,
) -> Result<()> {
    launch_tile_writers(name, ctx, p, ops, o, t, None)
}

/// [`launch_tile`] with the deterministic dQ writer warps a version asks for (`det_writers`:
/// `bwd_fa3_ordered_w2`'s 2; `None`: `KILN_BWD_DET_WRITERS`'s choice), applied by
/// [`launch_main`] to a writer tile's launch only.
pub fn launch_tile_writers(
    name: &str,
    ctx: &Context,
    p: &BackwardProblem,
    ops: &BackwardOperands,
    o: &AttentionOverrides,
    t: WgmmaBwdTile,
    det_writers: Option<u32>,
) -> Result<()> {
    // `bwd_fa3_tma_dq`, `bwd_fa3_lookahead`: a fifth map, over the dQ accumulator, that their
    // tiles are added through.
    let dq_cols = (t.dq == DqAdd::TensorTile).then(|| t.dq_cols());
    // KILN_BWD_TAIL: the last partial wave split, on `bwd_fa3_lookahead.cu`'s dense walk;
    // KILN_BWD_LPT: the causal blocks longest walk first (`bwd_fa3_tail`: both asked for)
    let sched = Sched {
        split: tail_plan(o, p, &t, ctx.info.sm_count),
        lpt: wgmma_lpt(o, &t),
        det_writers: det_writers.unwrap_or(o.bwd_det_writers),
        ..Sched::of(o)
    };
    let t = WgmmaBwdTile {
        tail: sched.split.is_some(),
        ..t
    };
    let main = t.spec(&ctx.arch(), p.attn.dtype);
    launch_main(
        name,
        ctx,
        p,
        ops,
        &main,
        t.smem_bytes(),
        BN,
        dq_cols,
        t.det_writer != DetWriter::No,
        1,
        None,
        sched,
    )
}

/// How a launch puts its blocks on the SMs beyond the grid's order: `split`, the non-causal
/// grid's last partial wave split into parts (`KILN_BWD_TAIL`, a 1D grid; [`super::tail`]);
/// `lpt`, the causal blocks longest walk first (`KILN_BWD_LPT`; `None`: [`super::lpt`]'s rule);
/// `det_writers`, a writer tile's dQ writer warps (the version's ask, `bwd_fa3_ordered_w2`'s 2,
/// else `KILN_BWD_DET_WRITERS`); `det_lpt`, the deterministic causal launch longest walk first
/// (`KILN_BWD_DET_LPT`); `det_trace`, a diagnostic's buffer of time stamps (only the
/// d256 ordered kernels compiled with `KILN_D256_TRACE` write it; 0 elsewhere); `rotate`, a
/// non-deterministic, non-causal run on the rotated walks of the deterministic order
/// (`bwd_fa3_d256_rotated`, a diagnostic: only the d256 ordered kernel reads it); `det_slots`,
/// the CTAs resident at once that the deterministic order's waves count (`None`: the SMs, one CTA
/// each; no version sets it since `bwd_fa3_d256_w2_pair`'s deletion on 2026-12-01).
#[derive(Debug, Clone, Copy)]
pub struct Sched {
    pub split: Option<TailPlan>,
    pub lpt: Option<bool>,
    pub det_writers: u32,
    pub det_lpt: bool,
    pub det_trace: u64,
    pub rotate: bool,
    pub det_slots: Option<u32>,
    /// `bwd_fa3_d256_persist` (`KILN_D256_PERSIST`): one CTA a SM (at most one a key block)
    /// taking key blocks from a counter (`tail_sem`, two words that the kernel returns to 0),
    /// launched as a programmatic dependent of the preprocess.
    pub persist: bool,
    /// `bwd_fa3_d256_w2_cols2`, `_cols4` (`KILN_D256_DQ_PARTS`): the deterministic counters a
    /// query block (one a column part; 1 elsewhere), zeroed before each launch (the preprocess
    /// zeroes one a query block).
    pub dq_parts: u32,
}

impl Sched {
    /// The schedule the knobs `o` ask for with no split: what the versions without one launch
    /// with.
    pub fn of(o: &AttentionOverrides) -> Sched {
        Sched {
            split: None,
            lpt: o.bwd_lpt,
            det_writers: o.bwd_det_writers,
            det_lpt: o.bwd_det_lpt,
            det_trace: 0,
            rotate: false,
            det_slots: None,
            persist: false,
            dq_parts: 1,
        }
    }
}

/// `KILN_BWD_TAIL`'s split of `p`'s grid under tile `t`, if the knob asks for one (or, the knob
/// unset, `t.tail` does: `bwd_fa3_tail`, the default, takes the model's choice; `KILN_BWD_TAIL=0`
/// runs its grid whole, the old default's arrangement) and `t` is `bwd_fa3_lookahead.cu`'s dense
/// walk without a writer: the key blocks of every key/value head and batch, each walking every
/// query block of its group's heads.
/// `sms`: the device's.
pub fn tail_plan(
    o: &AttentionOverrides,
    p: &BackwardProblem,
    t: &WgmmaBwdTile,
    sms: u32,
) -> Option<TailPlan> {
    tail_plan_for(tail_knob(o.bwd_tail, t.tail), p, t, sms)
}

/// `KILN_BWD_LPT` as tile `t` takes it (`bwd_fa3_tail`'s tile asks for longest first; the others
/// leave it to [`super::lpt`]'s rule).
pub fn wgmma_lpt(o: &AttentionOverrides, t: &WgmmaBwdTile) -> Option<bool> {
    match o.bwd_lpt {
        None if t.tail => Some(true),
        knob => knob,
    }
}

/// The knobs a launch of tile `t` reads on `p` and the values they take unset: the causal order
/// (not deterministic: `lpt_heads` ignores it there) and, on the dense walk, the split.
pub fn wgmma_knobs(p: &BackwardProblem, t: &WgmmaBwdTile) -> Knobs {
    let none = &AttentionOverrides::NONE;
    let mut v = Vec::new();
    if p.attn.causal && !p.deterministic {
        let on = wgmma_lpt(none, t).unwrap_or_else(|| super::lpt::lpt_by_default(p));
        v.push((Knob::Lpt, on as i64));
    }
    if splits(p, t) {
        v.push((Knob::Tail, tail_knob(None, t.tail) as i64));
    }
    v
}

/// What `KILN_BWD_TAIL` (`knob`; unset: `None`) asks of a tile that asks for the split itself
/// (`wants`) or not: 0 off, 1 the model's parts, 2-4 that many.
pub fn tail_knob(knob: Option<u32>, wants: bool) -> u32 {
    knob.unwrap_or(wants as u32)
}

/// Whether `KILN_BWD_TAIL` can split `p`'s grid under tile `t`: `t` is `bwd_fa3_lookahead.cu`'s
/// dense walk without a writer and `p` takes a split ([`tail::applies`]).
pub fn splits(p: &BackwardProblem, t: &WgmmaBwdTile) -> bool {
    let walk = t.dq == DqAdd::TensorTile
        && t.ahead != Ahead::No
        && !t.window
        && !t.varlen
        && t.det_writer == DetWriter::No
        && !t.dq_late;
    walk && tail::applies(p)
}

/// [`tail_plan`] with the knob resolved ([`tail_knob`]) on `sms` SMs.
pub fn tail_plan_for(
    knob: u32,
    p: &BackwardProblem,
    t: &WgmmaBwdTile,
    sms: u32,
) -> Option<TailPlan> {
    if knob == 0 || !splits(p, t) {
        return None;
    }
    let a = &p.attn;
    let units = p.key_blocks(BN);
    let steps = a.group() as u32 * (a.seqlen_q as u32).div_ceil(t.bm);
    tail::plan(knob, units, sms, steps)
}

/// A packed launch (`KILN_BWD_VARLEN`) of [`launch_main`]: the problem is the packed batch's dense
/// view (one batch of the packed rows, [`super::varlen::dense_view`]), whose maps, workspaces
/// and passes it keeps; the grid is `key_blocks` (the longest sequence's keys) x key/value heads x
/// `seqs`, and the kernel reads each sequence's rows from the offsets.
#[derive(Debug, Clone, Copy)]
pub struct PackedGrid {
    pub key_blocks: u32,
    pub seqs: u32,
    /// The longest query sequence's 64-row blocks: the kernel's bound on a sequence's rows.
    pub m_blocks: u32,
    pub cu_q: u64,
    pub cu_k: u64,
    /// A host-mapped word the kernel sets to 1 on bad offsets; 0: not recorded.
    pub errors: u64,
    /// The main kernel converts dQ (`KILN_BWD_DQ_FUSED`, [`super::dq_fused`]): its counters
    /// zeroed by the preprocess, no postprocess; `LeaveZero` and `LastBlock`, on the accumulator
    /// kept zero.
    pub dq_fused: DqFused,
}

/// The three launches of a WGMMA backward whose main kernel is `main` (`smem` bytes of shared
/// memory, a block per `bn` keys of each key/value head and batch, K and V loaded in boxes of `bn`
/// rows); `dq_cols`: the fifth map, over the dQ accumulator in boxes of 64 rows x `dq_cols`
/// columns, for the versions that add dQ tiles through it; `cluster`: CTAs a cluster along the key
/// blocks (1, or 2 for `bwd_fa3_d256_pair`: the grid rounded up to whole clusters); `packed`: a
/// packed batch's grid and offsets ([`PackedGrid`]); `sched`: the blocks' order beyond the grid's
/// ([`Sched`]). `name` for refusals.
#[allow(clippy::too_many_arguments)]
pub fn launch_main(
    name: &str,
    ctx: &Context,
    p: &BackwardProblem,
    ops: &BackwardOperands,
    main: &KernelSpec,
    smem: u32,
    bn: u32,
    dq_cols: Option<u32>,
    det_writer: bool,
    cluster: u32,
    packed: Option<PackedGrid>,
    sched: Sched,
) -> Result<()> {
    check_buffers(p, ops)?;
    check_aligned(name, ops)?;
    let a = &p.attn;
    let main = ctx.function(main)?;
    let parts = sched.dq_parts.max(1) as usize;
    // (`KILN_BWD_DQ_FUSED` 2, 3: the accumulator kept zero, not the shared one)
    let ws = if packed.is_some_and(|g| g.dq_fused.leaves_zero()) {
        super::dq_fused::leave_zero_workspace(ctx, p)?
    } else {
        BackwardWorkspace::with_parts(ctx, p, BM as usize, parts)?
    };
    let mut args = AttnBwdArgs::new(p, ops, &ws, BM as usize);
    if parts > 1 && p.deterministic {
        let bytes = a.batch * a.heads_q * a.seqlen_q.div_ceil(BM as usize) * parts * 4;
        // SAFETY: the counters' scratch, sized above for `parts` a query block, is the context's
        // and outlives the launches on its stream.
        unsafe { DeviceBuffer::borrowed(ws.dq_sem, bytes) }.fill_bytes(0, ctx)?;
    }
    args.det_trace = sched.det_trace;
    if let Some(g) = packed {
        (args.cu_q, args.cu_k, args.errors) = (g.cu_q, g.cu_k, g.errors);
        args.m_blocks = g.m_blocks as i32;
    }
    let fused = packed.filter(|g| g.dq_fused.on());
    if let Some(g) = fused {
        args.dq_sem = super::dq_fused::counters(ctx, a, g.seqs, g.dq_fused)?;
    }
    // KILN_BWD_LPT: causal blocks longest walk first, a chunk of heads at a time
    args.lpt_heads = super::lpt::lpt_heads(
        sched.lpt,
        p,
        packed.is_none() && cluster == 1,
        (a.seqlen_kv as u32).div_ceil(bn),
        ctx.info.sm_count,
    );
    // the deterministic writer's order, launch order and writers (`bwd_fa3_ordered_eager`)
    if det_writer && p.deterministic {
        super::bwd_fa3_ordered_eager::det_args(
            &mut args,
            p,
            sched.det_lpt,
            (a.seqlen_kv as u32).div_ceil(bn),
            sched.det_slots.unwrap_or(ctx.info.sm_count),
            packed.is_none() && cluster == 1,
        );
    }
    if det_writer {
        args.det_writers = sched.det_writers as i32;
    }
    // `bwd_fa3_d256_rotated`: the rotated walks (waves of one block a SM) with no order of adds
    // (on w2's kernel: its writers add without waiting)
    if sched.rotate && !p.deterministic && !a.causal {
        args.det_order = super::DetOrder::Rotated as i32;
        args.det_sms = ctx.info.sm_count as i32;
    }
    let tail = sched.split;
    if let Some(t) = &tail {
        (args.tail_sem, args.tail_acc) = tail::workspace(ctx, t, a.head_dim)?;
        (args.tail_parts, args.tail_full) = (t.parts as i32, t.full as i32);
    }
    // `bwd_fa3_d256_persist`: the tiles' counter and the CTAs done, zero between launches
    let tiles = p.key_blocks(bn);
    if sched.persist {
        args.tail_sem = ctx.scratch.attn_bwd_work.at_least(ctx, 8)?;
    }
    // Q and dO share Q's strides, K and V K's (AttnBwdArgs::new).
    let es = a.dtype.size();
    let (qd, qs) = map_shape(
        a.batch,
        a.heads_q,
        a.seqlen_q,
        a.head_dim,
        a.q_strides(),
        es,
    );
    let (kd, ks) = map_shape(
        a.batch,
        a.heads_kv,
        a.seqlen_kv,
        a.head_dim,
        a.k_strides(),
        es,
    );
    let mut maps: [TensorMap; 4] = [
        encode(ops.q.ptr(), a.dtype, qd, qs, BM)?,
        encode(ops.k.ptr(), a.dtype, kd, ks, bn)?,
        encode(ops.v.ptr(), a.dtype, kd, ks, bn)?,
        encode(ops.d_o.ptr(), a.dtype, qd, qs, BM)?,
    ];
    let cfg = LaunchConfig {
        smem_bytes: smem,
        cluster: (cluster > 1).then_some((cluster, 1, 1)),
        ..LaunchConfig::simple(
            match (packed, tail) {
                _ if sched.persist => (tiles.min(ctx.info.sm_count), 1, 1),
                (Some(g), _) => (g.key_blocks, a.heads_kv as u32, g.seqs),
                (None, Some(t)) => (t.blocks(), 1, 1),
                (None, None) => (
                    (a.seqlen_kv as u32).div_ceil(bn).next_multiple_of(cluster),
                    a.heads_kv as u32,
                    a.batch as u32,
                ),
            },
            THREADS,
        )
    };
    let mut dq_map = match dq_cols {
        Some(cols) => Some(dq_acc_map(p, ws.dq_acc, cols)?),
        None => None,
    };
    let [tq, tk, tv, tdo] = &mut maps;
    let mut params = vec![tq.as_param(), tk.as_param(), tv.as_param(), tdo.as_param()];
    if let Some(m) = dq_map.as_mut() {
        params.push(m.as_param());
    }
    params.push(args.as_param());
    // SAFETY: the parameters the kernel declares, four 128-byte maps (Q, K, V, dO), the dQ
    // accumulator's map for the versions that take it (`dq_cols`), and an AttnBwdArgs; the maps
    // and the argument block describe the caller's live buffers,
    // checked against `p` above, every base 16-byte aligned (LSE 4) and packed rows of 64, 128
    // or 256 16-bit elements, so every map stride is a multiple of 16 bytes; the workspaces are
    // the context's, sized for `p` with 64-row query blocks by `BackwardWorkspace::of` (the dQ
    // accumulator a whole allocation, so its rows of 64 or 128 fp32 are 256-byte aligned for
    // `bwd_fa3_bulk_dq`'s bulk adds). The three launches run in order on one stream.
    // (`bwd_fa3_d256_persist` waits for the preprocess in griddepcontrol.wait before it reads D
    // or adds to the accumulator: it may start while the preprocess runs)
    // (`KILN_BWD_DQ_FUSED`: the preprocess zeroes the main kernel's counters, and under 2, 3 leaves
    // the accumulator, which the last call left zero; no postprocess)
    unsafe {
        if let Some(g) = fused {
            super::dq_fused::launch_pre(ctx, &args, g.seqs, g.dq_fused)?;
        } else {
            bwd_prep::launch_pre(ctx, &mut args)?;
        }
        if sched.persist {
            main.launch_dependent(ctx.stream, &cfg, &mut params)?;
        } else {
            main.launch(ctx.stream, &cfg, &mut params)?;
        }
        if fused.is_none() {
            bwd_prep::launch_post(ctx, &mut args)?;
        }
        Ok(())
    }
}

/// The rank-5 map `bwd_fa3_tma_dq` adds its dQ tiles through: the fp32 accumulator [B, H, Sq, D]
/// (packed, at `acc`) seen as [B, H, Sq, D/32, 32], each row cut into 128-byte pieces so that a
/// piece is one row of the 128B swizzle; a box is 64 query rows x `cols` columns of one head.
/// Rows past Sq fall outside dim 2 and are dropped.
pub fn dq_acc_args(p: &BackwardProblem, acc: u64, cols: u32) -> TiledArgs {
    let a = &p.attn;
    let (d, sq, h, b) = (
        a.head_dim as u64,
        a.seqlen_q as u64,
        a.heads_q as u64,
        a.batch as u64,
    );
    TiledArgs::new(
        TmaDType::F32,
        acc,
        [32, d / 32, sq, h, b],
        [128, d * 4, sq * d * 4, h * sq * d * 4],
        [32, cols / 32, BM, 1, 1],
        TmaSwizzle::B128,
    )
}

fn dq_acc_map(p: &BackwardProblem, acc: u64, cols: u32) -> Result<TensorMap> {
    dq_acc_args(p, acc, cols).encode(|| {
        format!(
            "cuTensorMapEncodeTiled (the backward's fp32 dQ accumulator, rank 5, {})",
            p.label()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;

    #[test]
    fn tiles_fit_the_h100_and_refusals_name_the_reason() {
        for d in BWD_WGMMA_DIMS {
            let t = WgmmaBwdTile::for_dim(d);
            assert_eq!(t.d as usize, d);
            assert!(t.smem_bytes() <= 227 * 1024, "d{d}: {}", t.smem_bytes());
        }
        let h100 = DeviceInfo::h100_sxm();
        let p = |d| BackwardProblem::new(AttentionProblem::new(1, 2, 129, d), true);
        assert!(BwdFa3Wgmma.supports(&p(128), &h100).is_ok());
        assert!(BwdFa3Wgmma.supports(&p(64), &h100).is_ok());
        assert!(BwdFa3Wgmma
            .supports(&p(256), &h100)
            .unwrap_err()
            .contains("use 64, 128"));
        let ampere = DeviceInfo {
            compute_capability: (8, 0),
            ..h100
        };
        assert!(BwdFa3Wgmma
            .supports(&p(128), &ampere)
            .unwrap_err()
            .contains("9.0"));
        let v = BwdFa3Wgmma.variants("sm_90a");
        assert_eq!(v.len(), 6);
        let unique: std::collections::HashSet<_> = v.iter().map(|s| s.label()).collect();
        assert_eq!(unique.len(), 6);
        // verified and 1.4-1.7x bwd_fa2_mma_sync on an H200 (2026-11-29): the default at d64/d128
        assert!(BwdFa3Wgmma.by_default());
    }

    /// Every variant compiles for sm_90a with no local memory, no wgmma serialisation (ptxas's
    /// C751x notes) and its register split honoured (C7507, C7508: setmaxnreg ignored).
    #[test]
    fn every_variant_compiles_without_spills() {
        crate::ops::attention_backward::assert_compiles_clean(
            BwdFa3Wgmma.variants("sm_90a"),
            &["C751", "C7507", "C7508"],
        );
    }
}
