//! Host side of `kernels/moe/route.cu`: MoE routing on the GPU, from router logits (softmax or
//! sigmoid scores, top-k, renormalisation, DeepSeek-V3's grouped top-k and selection bias, a
//! routed scaling) or from a precomputed top-k, to the per-expert counts and offsets and the
//! expert-sorted row order the expert GEMMs read. One launch for up to [`ONE_BLOCK_TOKENS`]
//! tokens, two above; no host synchronisation, so a CUDA graph captures it.

use std::ffi::c_void;
use std::hash::Hash;

use serde::{Deserialize, Serialize};

use super::schedule::MAX_EXPERTS;
use crate::device::{Context, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;

pub const SELECT: &str = "moe_route_select";
pub const PLACE: &str = "moe_route_place";
const THREADS: u32 = 256;
const WARPS: usize = 8;
/// Tokens one block selects when they fit in one block: the whole routing is then one launch.
pub const ONE_BLOCK_TOKENS: usize = 32;
/// Most blocks of the two-launch path: each placing block reads every block's histogram, so
/// their count stays bounded (tokens per block grow past 128 x 32 tokens).
pub const MAX_BLOCKS: usize = 128;
/// Most groups of the grouped top-k (one lane each).
pub const MAX_GROUPS: usize = 32;

/// How logits become scores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scoring {
    /// softmax over all experts (Mixtral, Qwen-MoE).
    Softmax,
    /// a sigmoid per expert (DeepSeek-V3).
    Sigmoid,
}

impl std::str::FromStr for Scoring {
    type Err = Error;
    fn from_str(s: &str) -> Result<Scoring> {
        match s {
            "softmax" => Ok(Scoring::Softmax),
            "sigmoid" => Ok(Scoring::Sigmoid),
            other => Err(Error::invalid(format!(
                "the scoring `{other}` is not one kiln routes by; use softmax or sigmoid"
            ))),
        }
    }
}

/// Routing from logits: scores, the top-k, and what is done to the k weights.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RouteOptions {
    pub top_k: usize,
    pub scoring: Scoring,
    /// Divide the k weights by their sum.
    pub renormalize: bool,
    /// DeepSeek-V3's grouped top-k: (n_group, topk_group).
    pub groups: Option<(usize, usize)>,
    /// Multiplies every weight (after renormalising).
    pub routed_scaling: f32,
}

impl RouteOptions {
    pub fn top_k(top_k: usize, scoring: Scoring) -> RouteOptions {
        RouteOptions {
            top_k,
            scoring,
            renormalize: false,
            groups: None,
            routed_scaling: 1.0,
        }
    }
}

/// Where the routing comes from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RouteSource {
    /// Router logits [T, E] of `dtype`, an f32 selection bias [E] when `bias`.
    Logits {
        dtype: DType,
        bias: bool,
        opts: RouteOptions,
    },
    /// transformers' experts interface: top_k_index [T, k] (i64 or i32) and top_k_weights of
    /// `weights` dtype, [T, k] or ([`full`]) [T, E] read at each index.
    TopK {
        top_k: usize,
        ids_i64: bool,
        weights: DType,
        full: bool,
    },
}

/// One routing: `tokens` tokens over `experts` experts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RouteProblem {
    pub tokens: usize,
    pub experts: usize,
    pub source: RouteSource,
}

impl RouteProblem {
    /// Everything the routing's launch depends on, hashable (the scaling by its bits).
    pub fn key(&self) -> impl Hash + Eq + std::fmt::Debug {
        let source = match self.source {
            RouteSource::Logits { dtype, bias, opts } => (
                Some((dtype, bias)),
                opts.top_k,
                Some((opts.scoring, opts.renormalize, opts.groups)),
                opts.routed_scaling.to_bits(),
            ),
            RouteSource::TopK {
                top_k,
                ids_i64,
                weights,
                full,
            } => (Some((weights, full)), top_k, None, ids_i64 as u32),
        };
        (self.tokens, self.experts, source)
    }

    pub fn top_k(&self) -> usize {
        match self.source {
            RouteSource::Logits { opts, .. } => opts.top_k,
            RouteSource::TopK { top_k, .. } => top_k,
        }
    }

    /// Token-expert pairs, and so rows of the sorted order: T k.
    pub fn pairs(&self) -> usize {
        self.tokens * self.top_k()
    }

    /// Checks the sizes and options; one sentence per problem, naming the argument.
    pub fn validate(&self) -> Result<()> {
        let (t, e, k) = (self.tokens, self.experts, self.top_k());
        if e == 0 || e > MAX_EXPERTS {
            return Err(Error::invalid(format!(
                "{e} experts; kiln's routing takes 1 to {MAX_EXPERTS}"
            )));
        }
        if k == 0 || k > e {
            return Err(Error::invalid(format!(
                "top_k = {k} with {e} experts; top_k must be 1 to the number of experts"
            )));
        }
        if t == 0 {
            return Err(Error::invalid("0 tokens; there is nothing to route"));
        }
        if (t as u128) * (k as u128) > i32::MAX as u128 {
            return Err(Error::invalid(format!(
                "{t} tokens x top_k {k} pairs exceed 2^31 - 1; route fewer tokens per call"
            )));
        }
        if let RouteSource::Logits { opts, .. } = self.source {
            if !opts.routed_scaling.is_finite() {
                return Err(Error::invalid(format!(
                    "routed_scaling = {}; give a finite factor",
                    opts.routed_scaling
                )));
            }
            if let Some((g, kg)) = opts.groups {
                if g == 0 || g > MAX_GROUPS || !e.is_multiple_of(g) {
                    return Err(Error::invalid(format!(
                        "n_group = {g} with {e} experts; n_group must divide the experts and be 1 to {MAX_GROUPS}"
                    )));
                }
                if kg == 0 || kg > g {
                    return Err(Error::invalid(format!(
                        "topk_group = {kg} with n_group = {g}; topk_group must be 1 to n_group"
                    )));
                }
                if kg * (e / g) < k {
                    return Err(Error::invalid(format!(
                        "topk_group = {kg} groups of {} experts hold fewer than top_k = {k}; keep more groups",
                        e / g
                    )));
                }
            }
        }
        Ok(())
    }

    /// Tokens each block selects: all of them up to [`ONE_BLOCK_TOKENS`], else 32 (4 a warp)
    /// or more, so that at most [`MAX_BLOCKS`] blocks run.
    pub fn tokens_per_block(&self) -> usize {
        if self.tokens <= ONE_BLOCK_TOKENS {
            return self.tokens.max(1);
        }
        self.tokens.div_ceil(MAX_BLOCKS).max(ONE_BLOCK_TOKENS)
    }

    pub fn blocks(&self) -> usize {
        self.tokens.div_ceil(self.tokens_per_block())
    }

    /// Dynamic shared memory: a warp's E keys each, then two ints per expert.
    pub fn smem_bytes(&self) -> u32 {
        (self.experts * (WARPS * 4 + 8)) as u32
    }
}

/// Where each table lives in the routing workspace (byte offsets, each 256-aligned).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteLayout {
    pub counts: usize,
    pub offsets: usize,
    pub row_token: usize,
    pub row_weight: usize,
    pub pair_row: usize,
    pub topk_ids: usize,
    pub topk_weights: usize,
    pub hist: usize,
    pub bytes: usize,
}

/// `n` rounded up to 256.
pub(crate) fn align256(n: usize) -> usize {
    n.div_ceil(256) * 256
}

impl RouteLayout {
    pub fn of(p: &RouteProblem) -> RouteLayout {
        let (e, r) = (p.experts, p.pairs());
        let mut at = 0usize;
        let mut take = |bytes: usize| {
            let here = at;
            at += align256(bytes);
            here
        };
        let counts = take(4 * e);
        let offsets = take(4 * (e + 1));
        let row_token = take(4 * r);
        let row_weight = take(4 * r);
        let pair_row = take(4 * r);
        let topk_ids = take(4 * r);
        let topk_weights = take(4 * r);
        let hist = take(4 * e * p.blocks());
        RouteLayout {
            counts,
            offsets,
            row_token,
            row_weight,
            pair_row,
            topk_ids,
            topk_weights,
            hist,
            bytes: at,
        }
    }
}

/// The argument block, laid out as `RouteArgs` in `kernels/moe/route.cu`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RouteArgs {
    pub logits: u64,
    pub bias: u64,
    pub ids_in: u64,
    pub weights_in: u64,
    pub topk_ids: u64,
    pub topk_weights: u64,
    pub hist: u64,
    pub counts: u64,
    pub offsets: u64,
    pub row_token: u64,
    pub row_weight: u64,
    pub pair_row: u64,
    pub scaling: f32,
    pub tokens: i32,
    pub experts: i32,
    pub top_k: i32,
    pub tokens_per_block: i32,
    pub logits_dtype: i32,
    pub weights_dtype: i32,
    pub ids_i64: i32,
    pub weights_full: i32,
    pub scoring: i32,
    pub renormalize: i32,
    pub n_group: i32,
    pub topk_group: i32,
    pub tables: [u64; 2],
    pub table_bm: [i32; 2],
    pub table_fold: [i32; 2],
    pub zero: u64,
    pub zero_vec4s: i64,
    pub route_blocks: i32,
    pub table_sorted: [i32; 2],
}

/// What the MoE layer's routing does besides routing ([`launch_fused`]): the tile tables of its
/// two grouped GEMMs, and the down projection's accumulator zeroed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouteExtras {
    /// Each GEMM's tables, if the routing builds them.
    pub tables: [Option<TableSpec>; 2],
    /// (address, bytes) of memory to zero: 16-byte aligned, a multiple of 16 bytes.
    pub zero: Option<(u64, usize)>,
}

/// The tile tables of one grouped GEMM, as `moe_tile_prefix` would build them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableSpec {
    /// A workspace of `schedule::sched_bytes(E)` bytes.
    pub sched: u64,
    /// The GEMM's tile height, and the rows a last tile may take past it.
    pub bm: u32,
    pub fold: u32,
    /// The experts heaviest first (the 4-bit kernels' order).
    pub sorted: bool,
}

/// Bytes one zeroing block clears at most in one pass (its grid-stride loop takes the rest).
const ZERO_BYTES_PER_BLOCK: usize = 64 * 1024;
/// The most zeroing blocks: two per SM of an H100 / H200 is enough to stream at the copy rate.
const ZERO_BLOCKS_MAX: usize = 264;

/// The device memory a routing reads and writes.
#[derive(Debug, Clone, Copy)]
pub struct RouteOperands {
    /// Logits [T, E], or the precomputed ids [T, k].
    pub input: u64,
    /// The precomputed weights; 0 with logits.
    pub weights: u64,
    /// The selection bias [E] (f32), or 0.
    pub bias: u64,
    /// The workspace laid out as [`RouteLayout::of`].
    pub workspace: u64,
}

impl RouteArgs {
    pub fn new(p: &RouteProblem, ops: &RouteOperands) -> RouteArgs {
        let l = RouteLayout::of(p);
        let at = |off: usize| ops.workspace + off as u64;
        let mut a = RouteArgs {
            logits: 0,
            bias: ops.bias,
            ids_in: 0,
            weights_in: 0,
            topk_ids: at(l.topk_ids),
            topk_weights: at(l.topk_weights),
            hist: at(l.hist),
            counts: at(l.counts),
            offsets: at(l.offsets),
            row_token: at(l.row_token),
            row_weight: at(l.row_weight),
            pair_row: at(l.pair_row),
            scaling: 1.0,
            tokens: p.tokens as i32,
            experts: p.experts as i32,
            top_k: p.top_k() as i32,
            tokens_per_block: p.tokens_per_block() as i32,
            logits_dtype: 2,
            weights_dtype: 2,
            ids_i64: 0,
            weights_full: 0,
            scoring: 0,
            renormalize: 0,
            n_group: 1,
            topk_group: 1,
            tables: [0; 2],
            table_bm: [0; 2],
            table_fold: [0; 2],
            zero: 0,
            zero_vec4s: 0,
            route_blocks: p.blocks() as i32,
            table_sorted: [0; 2],
        };
        match p.source {
            RouteSource::Logits { dtype, opts, .. } => {
                a.logits = ops.input;
                a.logits_dtype = dtype.code() as i32;
                a.scaling = opts.routed_scaling;
                a.scoring = (opts.scoring == Scoring::Sigmoid) as i32;
                a.renormalize = opts.renormalize as i32;
                if let Some((g, kg)) = opts.groups {
                    (a.n_group, a.topk_group) = (g as i32, kg as i32);
                }
            }
            RouteSource::TopK {
                ids_i64,
                weights,
                full,
                ..
            } => {
                a.ids_in = ops.input;
                a.weights_in = ops.weights;
                a.weights_dtype = weights.code() as i32;
                a.ids_i64 = ids_i64 as i32;
                a.weights_full = full as i32;
                a.bias = 0;
            }
        }
        a
    }
}

pub fn spec(arch: &str, entry: &str) -> KernelSpec {
    KernelSpec::new("moe/route.cu", entry, arch)
}

/// Both entries, for `kiln check`.
pub fn variants(arch: &str) -> Vec<KernelSpec> {
    vec![spec(arch, SELECT), spec(arch, PLACE)]
}

/// Enqueues the routing of `p` on the context's stream: every table of [`RouteLayout`].
/// Callers have validated `p` and sized the buffers.
pub fn launch(ctx: &Context, p: &RouteProblem, ops: &RouteOperands) -> Result<()> {
    launch_fused(ctx, p, ops, &RouteExtras::default())
}

/// As [`launch`], doing `extras` too (the tables once the offsets are known; the zeroing in
/// blocks of their own beside the routing's).
pub fn launch_fused(
    ctx: &Context,
    p: &RouteProblem,
    ops: &RouteOperands,
    extras: &RouteExtras,
) -> Result<()> {
    let mut args = RouteArgs::new(p, ops);
    for (i, t) in extras.tables.iter().enumerate() {
        if let Some(t) = *t {
            (args.tables[i], args.table_bm[i], args.table_fold[i]) =
                (t.sched, t.bm as i32, t.fold as i32);
            args.table_sorted[i] = t.sorted as i32;
        }
    }
    let mut zero_blocks = 0;
    if let Some((ptr, bytes)) = extras.zero {
        debug_assert!(ptr % 16 == 0 && bytes % 16 == 0);
        (args.zero, args.zero_vec4s) = (ptr, (bytes / 16) as i64);
        zero_blocks = bytes
            .div_ceil(ZERO_BYTES_PER_BLOCK)
            .clamp(1, ZERO_BLOCKS_MAX);
    }
    let route = LaunchConfig {
        grid: (p.blocks() as u32, 1, 1),
        block: (THREADS, 1, 1),
        smem_bytes: p.smem_bytes(),
        cluster: None,
    };
    let lc = LaunchConfig {
        grid: ((p.blocks() + zero_blocks) as u32, 1, 1),
        ..route
    };
    let select = ctx.function_memo(&SELECT, |arch| spec(arch, SELECT))?;
    let place = (p.blocks() > 1)
        .then(|| ctx.function_memo(&PLACE, |arch| spec(arch, PLACE)))
        .transpose()?;
    let param = &mut args as *mut RouteArgs as *mut c_void;
    // SAFETY: both kernels take one `RouteArgs`, laid out as the device struct. Its pointers
    // address the caller's logits (or ids and weights), bias and the workspace of
    // `RouteLayout::of(p)` bytes, and `extras`' tables and zeroed memory, which the caller keeps
    // alive until the stream has run.
    unsafe {
        select.launch(ctx.stream, &lc, &mut [param])?;
        if let Some(place) = place {
            place.launch(ctx.stream, &route, &mut [param])?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn logits(t: usize, e: usize, opts: RouteOptions) -> RouteProblem {
        RouteProblem {
            tokens: t,
            experts: e,
            source: RouteSource::Logits {
                dtype: DType::Bf16,
                bias: false,
                opts,
            },
        }
    }

    #[test]
    fn args_match_the_device_layout() {
        assert_eq!(std::mem::offset_of!(RouteArgs, scaling), 96);
        assert_eq!(std::mem::offset_of!(RouteArgs, topk_group), 144);
        // (the C struct pads the pointers after the ints to 8 bytes, as repr(C) does)
        assert_eq!(std::mem::offset_of!(RouteArgs, tables), 152);
        assert_eq!(std::mem::offset_of!(RouteArgs, zero), 184);
        assert_eq!(std::mem::offset_of!(RouteArgs, route_blocks), 200);
        assert_eq!(std::mem::offset_of!(RouteArgs, table_sorted), 204);
        assert_eq!(std::mem::size_of::<RouteArgs>(), 216);
    }

    #[test]
    fn small_batches_route_in_one_block() {
        let o = RouteOptions::top_k(8, Scoring::Softmax);
        for t in [1, 7, 32] {
            assert_eq!(logits(t, 64, o).blocks(), 1, "{t}");
        }
        let p = logits(4096, 64, o);
        assert_eq!((p.tokens_per_block(), p.blocks()), (32, 128));
        let big = logits(100_000, 64, o);
        assert!(big.blocks() <= MAX_BLOCKS);
        assert!(big.blocks() * big.tokens_per_block() >= 100_000);
        assert_eq!(logits(33, 8, o).blocks(), 2);
    }

    #[test]
    fn layout_tables_do_not_overlap() {
        let p = logits(1000, 128, RouteOptions::top_k(8, Scoring::Sigmoid));
        let l = RouteLayout::of(&p);
        let mut spans = [
            (l.counts, 4 * 128),
            (l.offsets, 4 * 129),
            (l.row_token, 4 * 8000),
            (l.row_weight, 4 * 8000),
            (l.pair_row, 4 * 8000),
            (l.topk_ids, 4 * 8000),
            (l.topk_weights, 4 * 8000),
            (l.hist, 4 * 128 * p.blocks()),
        ];
        spans.sort();
        for w in spans.windows(2) {
            assert!(w[0].0 + w[0].1 <= w[1].0);
            assert_eq!(w[1].0 % 256, 0);
        }
        assert!(spans[7].0 + spans[7].1 <= l.bytes);
        // a whole block of keys for 1024 experts stays under the 48 KB default
        assert!(
            logits(1, 1024, RouteOptions::top_k(1, Scoring::Softmax)).smem_bytes() <= 48 * 1024
        );
    }

    /// The placement of `moe_route_select` / `moe_route_place` run on the CPU: every block's
    /// histogram, its experts' first rows (offsets plus the earlier blocks' counts), then its
    /// pairs 32 at a time, peers of one expert ranked by lane. It must give the reference's
    /// row order for any block size.
    fn emulate_place(ids: &[i32], experts: usize, k: usize, tokens_per_block: usize) -> Vec<i32> {
        let tokens = ids.len() / k;
        let blocks = tokens.div_ceil(tokens_per_block);
        let span =
            |b: usize| b * tokens_per_block * k..((b + 1) * tokens_per_block).min(tokens) * k;
        let hist: Vec<Vec<i32>> = (0..blocks)
            .map(|b| {
                let mut h = vec![0; experts];
                for &e in &ids[span(b)] {
                    if e >= 0 {
                        h[e as usize] += 1;
                    }
                }
                h
            })
            .collect();
        let totals: Vec<i32> = (0..experts)
            .map(|e| hist.iter().map(|h| h[e]).sum())
            .collect();
        let mut offsets = vec![0; experts];
        for e in 1..experts {
            offsets[e] = offsets[e - 1] + totals[e - 1];
        }
        let mut pair_row = vec![-1; ids.len()];
        for b in 0..blocks {
            let mut next: Vec<i32> = (0..experts)
                .map(|e| offsets[e] + hist[..b].iter().map(|h| h[e]).sum::<i32>())
                .collect();
            for chunk in span(b).step_by(32) {
                let lanes: Vec<usize> = (chunk..(chunk + 32).min(span(b).end)).collect();
                let base = next.clone();
                for (lane, &p) in lanes.iter().enumerate() {
                    let e = ids[p];
                    if e < 0 {
                        continue;
                    }
                    let rank = lanes[..lane].iter().filter(|&&q| ids[q] == e).count() as i32;
                    pair_row[p] = base[e as usize] + rank;
                    next[e as usize] = next[e as usize].max(base[e as usize] + rank + 1);
                }
            }
        }
        pair_row
    }

    #[test]
    fn the_kernels_placement_gives_the_reference_row_order() {
        use crate::reference::route::{row_order, RouteRef};
        let mut x = 12345u64;
        for (t, e, k) in [
            (1, 8, 2),
            (33, 16, 4),
            (300, 64, 8),
            (1000, 7, 7),
            (77, 256, 1),
        ] {
            let ids: Vec<i32> = (0..t * k)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if i % 97 == 5 {
                        -1
                    } else {
                        (x % e as u64) as i32
                    }
                })
                .collect();
            let want = row_order(&RouteRef {
                tokens: t,
                experts: e,
                top_k: k,
                ids: ids.clone(),
                weights: vec![0.0; t * k],
            });
            let p = logits(t, e, RouteOptions::top_k(k, Scoring::Softmax));
            for tpb in [p.tokens_per_block(), 1, 3, 32] {
                assert_eq!(
                    emulate_place(&ids, e, k, tpb),
                    want.pair_row,
                    "t {t} e {e} k {k} tpb {tpb}"
                );
            }
        }
    }

    #[test]
    fn bad_options_name_what_to_change() {
        let err = |p: RouteProblem| p.validate().unwrap_err().to_string();
        let o = RouteOptions::top_k(9, Scoring::Softmax);
        assert!(err(logits(4, 8, o)).contains("top_k = 9 with 8 experts"));
        assert!(
            err(logits(4, 2000, RouteOptions::top_k(2, Scoring::Softmax))).contains("2000 experts")
        );
        assert!(err(logits(0, 8, RouteOptions::top_k(2, Scoring::Softmax))).contains("0 tokens"));
        let g = |n, k, top| RouteOptions {
            groups: Some((n, k)),
            ..RouteOptions::top_k(top, Scoring::Sigmoid)
        };
        assert!(err(logits(4, 256, g(7, 4, 8))).contains("n_group = 7"));
        assert!(err(logits(4, 256, g(8, 9, 8))).contains("topk_group = 9"));
        assert!(err(logits(4, 16, g(8, 2, 5))).contains("fewer than top_k = 5"));
        logits(4, 256, g(8, 4, 8)).validate().unwrap();
        logits(1, 8, RouteOptions::top_k(8, Scoring::Softmax))
            .validate()
            .unwrap();
    }
}
