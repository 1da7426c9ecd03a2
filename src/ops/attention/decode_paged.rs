//! Host side of `kernels/attention/decode_paged.cu`: flash-decoding over a paged KV cache (or a
//! dense one, a page per sequence), one block per (sequence, KV head, split), its tiles, its
//! split count, and its launch.

use std::ffi::c_void;

use crate::device::{Context, DeviceBuffer, DeviceInfo, Function, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::attention::paged::{check_decode_queries, PagedProblem, PAGE_SIZES};
use crate::ops::attention::{decode_combine, DTYPES, HEAD_DIMS, STRIDE_ALIGN};
use crate::ops::gemm::{alignment, DType};

/// Keys per pipeline stage (the kernel's BN).
pub const KEYS_PER_TILE: usize = 64;
/// Query rows per block (one m16 tile, shared by the 4 warps).
pub const ROWS_PER_BLOCK: usize = 16;
/// Threads per block: 4 warps.
pub const THREADS: u32 = 128;
/// The fewest tiles a split is given: below that the pipeline's fill outweighs the parallelism.
pub const MIN_TILES_PER_SPLIT: usize = 4;

/// Element strides of a decode step's tensors: Q and O by (batch, token, head); the caches by
/// (page, slot, head), where a dense cache's page is the sequence and its slot the position.
/// The head dim is contiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DecodeStrides {
    pub q: [usize; 3],
    pub o: [usize; 3],
    pub k: [usize; 3],
    pub v: [usize; 3],
}

impl DecodeStrides {
    /// Q and O [batch, seqlen_q, heads_q, D] and caches [pages, page_size, heads_kv, D], packed.
    pub fn packed(
        heads_q: usize,
        seqlen_q: usize,
        heads_kv: usize,
        page_size: usize,
        d: usize,
    ) -> DecodeStrides {
        let q = [seqlen_q * heads_q * d, heads_q * d, d];
        let c = [page_size * heads_kv * d, heads_kv * d, d];
        DecodeStrides {
            q,
            o: q,
            k: c,
            v: c,
        }
    }
}

/// Elements from the base to one past the last of a tensor of `extents` (outer three, the last
/// contiguous of `d`) under `strides`; 0 when it has none.
fn span(extents: [usize; 3], strides: [usize; 3], d: usize) -> usize {
    if extents.contains(&0) || d == 0 {
        return 0;
    }
    (0..3).map(|i| (extents[i] - 1) * strides[i]).sum::<usize>() + d
}

/// A decode step's shapes, without the tables' contents (which may live on the GPU only): what
/// the kernels are specialised and launched for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DecodeShape {
    pub batch: usize,
    pub heads_q: usize,
    pub heads_kv: usize,
    pub head_dim: usize,
    pub seqlen_q: usize,
    pub num_pages: usize,
    pub page_size: usize,
    pub max_pages: usize,
    pub causal: bool,
    pub scale: f32,
    pub dtype: DType,
    /// K and V in pages through a block table; `false`: one dense cache per sequence
    /// [batch, page_size (its length), heads_kv, D] (`num_pages` = batch, `max_pages` = 1).
    pub paged: bool,
    /// Each sequence attends to its `context_lens` entry; `false` (a dense cache without
    /// lengths): to all `page_size` tokens.
    pub lengths: bool,
    /// Each sequence's keys start at its `context_starts` entry (left padding,
    /// flash-attention's `cache_leftpad`); `false`: at 0.
    pub starts: bool,
    pub strides: DecodeStrides,
}

/// A [`DecodeShape`] as a hashable key (the scale by its bits): what launches are memoised by,
/// and what a handle knows has run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct DecodeKey {
    dims: [usize; 8],
    flags: [bool; 4],
    scale_bits: u32,
    dtype: DType,
    strides: DecodeStrides,
}

impl DecodeShape {
    pub fn key(&self) -> DecodeKey {
        DecodeKey {
            dims: [
                self.batch,
                self.heads_q,
                self.heads_kv,
                self.head_dim,
                self.seqlen_q,
                self.num_pages,
                self.page_size,
                self.max_pages,
            ],
            flags: [self.causal, self.paged, self.lengths, self.starts],
            scale_bits: self.scale.to_bits(),
            dtype: self.dtype,
            strides: self.strides,
        }
    }

    pub fn of(p: &PagedProblem) -> DecodeShape {
        DecodeShape {
            batch: p.batch,
            heads_q: p.heads_q,
            heads_kv: p.heads_kv,
            head_dim: p.head_dim,
            seqlen_q: p.seqlen_q,
            num_pages: p.num_pages,
            page_size: p.page_size,
            max_pages: p.max_pages,
            causal: p.causal,
            scale: p.scale,
            dtype: p.dtype,
            paged: true,
            lengths: true,
            starts: !p.context_starts.is_empty(),
            strides: DecodeStrides::packed(
                p.heads_q,
                p.seqlen_q,
                p.heads_kv,
                p.page_size,
                p.head_dim,
            ),
        }
    }
    pub fn group(&self) -> usize {
        self.heads_q / self.heads_kv.max(1)
    }
    /// Query rows that share one KV head: the group's heads times the query tokens.
    pub fn rows(&self) -> usize {
        self.group() * self.seqlen_q
    }
    pub fn q_elems(&self) -> usize {
        self.batch * self.seqlen_q * self.heads_q * self.head_dim
    }
    pub fn lse_elems(&self) -> usize {
        self.batch * self.heads_q * self.seqlen_q
    }
    pub fn cache_elems(&self) -> usize {
        self.num_pages * self.page_size * self.heads_kv * self.head_dim
    }
    pub fn table_elems(&self) -> usize {
        self.batch * self.max_pages
    }
    /// The most tokens one sequence holds: its pages, or a dense cache's length.
    pub fn max_context(&self) -> usize {
        self.max_pages * self.page_size
    }
    /// Elements Q, O, the K and the V cache span under their strides.
    pub fn spans(&self) -> [usize; 4] {
        let (st, d) = (&self.strides, self.head_dim);
        let q = [self.batch, self.seqlen_q, self.heads_q];
        let c = [self.num_pages, self.page_size, self.heads_kv];
        [
            span(q, st.q, d),
            span(q, st.o, d),
            span(c, st.k, d),
            span(c, st.v, d),
        ]
    }
    /// Bytes of K and V a step must read for these context lengths.
    pub fn cache_bytes_read(&self, context_lens: &[i32]) -> u64 {
        let tokens: u64 = context_lens.iter().map(|&c| c.max(0) as u64).sum();
        2 * tokens * (self.heads_kv * self.head_dim * self.dtype.size()) as u64
    }

    /// Checks heads, dims, dtype, scale, query tokens, the page size and the table's extent.
    pub fn validate(&self) -> Result<()> {
        check_decode_queries(
            self.batch,
            (self.heads_q, self.heads_kv, self.head_dim),
            self.seqlen_q,
            self.dtype,
            self.scale,
        )?;
        if self.paged && !PAGE_SIZES.contains(&self.page_size) {
            return Err(Error::invalid(format!(
                "page size {} is not supported; use 16, 64 or 256",
                self.page_size
            )));
        }
        if !self.paged && (self.num_pages != self.batch || self.max_pages != 1) {
            return Err(Error::invalid(format!(
                "a dense cache is one page per sequence: {} pages and {} per sequence for batch {}",
                self.num_pages, self.max_pages, self.batch
            )));
        }
        if self.paged && !self.lengths {
            return Err(Error::invalid(
                "a paged cache needs the context lengths (`cache_seqlens`)",
            ));
        }
        if self.page_size == 0 {
            return Err(Error::invalid(
                "the cache holds no token per sequence; it needs at least 1",
            ));
        }
        if self.num_pages == 0 || self.max_pages == 0 {
            return Err(Error::invalid(format!(
                "the cache has {} pages and the block table {} columns; each needs at least 1",
                self.num_pages, self.max_pages
            )));
        }
        let i32_max = i32::MAX as usize;
        if self.num_pages > i32_max
            || self.max_pages * self.page_size > i32_max
            || self.batch * self.heads_q * self.seqlen_q > i32_max
        {
            return Err(Error::invalid(
                "the cache, the block table or the query rows exceed 2^31 entries; split the batch",
            ));
        }
        self.check_strides()
    }

    /// Each stride of a dimension longer than 1 a positive multiple of 16 bytes (the kernels
    /// copy rows 16 bytes at a time).
    fn check_strides(&self) -> Result<()> {
        let st = &self.strides;
        let q = [self.batch, self.seqlen_q, self.heads_q];
        let c = [self.num_pages, self.page_size, self.heads_kv];
        for (name, strides, extents) in [
            ("Q", st.q, q),
            ("O", st.o, q),
            ("the K cache", st.k, c),
            ("the V cache", st.v, c),
        ] {
            for i in 0..3 {
                let s = strides[i];
                if extents[i] > 1 && (s == 0 || !s.is_multiple_of(STRIDE_ALIGN)) {
                    return Err(Error::invalid(format!(
                        "{name} has stride {s} in dimension {i}; decode copies rows 16 bytes at a time, so strides must be positive multiples of {STRIDE_ALIGN} elements"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// The argument block, laid out as `DecodeArgs` in `kernels/attention/decode_args.cuh`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct DecodeArgs {
    pub q: u64,
    pub k_cache: u64,
    pub v_cache: u64,
    pub o: u64,
    pub lse: u64,
    pub block_table: u64,
    pub context_lens: u64,
    pub part_o: u64,
    pub part_lse: u64,
    pub k_new: u64,
    pub v_new: u64,
    pub batch: i32,
    pub heads_q: i32,
    pub heads_kv: i32,
    pub group: i32,
    pub sq: i32,
    pub num_pages: i32,
    /// log2 of the page size.
    pub page_shift: i32,
    pub max_pages: i32,
    pub splits: i32,
    pub n_new: i32,
    pub causal: i32,
    pub m_groups: i32,
    pub scale_log2: f32,
    pub head_dim: i32,
    /// Q and O strides (elements): batch, token, head.
    pub q_sb: i64,
    pub q_ss: i64,
    pub q_sh: i64,
    pub o_sb: i64,
    pub o_ss: i64,
    pub o_sh: i64,
    /// Cache strides (elements): page (a dense cache's sequence), slot (position), head.
    pub k_sp: i64,
    pub k_ss: i64,
    pub k_sh: i64,
    pub v_sp: i64,
    pub v_ss: i64,
    pub v_sh: i64,
    /// The most tokens a sequence holds (a length past it is bad; without lengths, each's).
    pub max_ctx: i32,
    pub pad: i32,
    /// Three host-mapped words the kernels set to 1 on bad input (a length out of range; a
    /// page id outside the cache; a key start outside 0 ..= its length); 0: not recorded.
    pub errors: u64,
    /// i32 [batch]: each sequence's first key (left padding); 0: every sequence starts at 0.
    pub context_starts: u64,
}

impl DecodeArgs {
    /// The shape's fields; pointers are 0 until set.
    pub fn new(s: &DecodeShape) -> DecodeArgs {
        let st = &s.strides;
        let i = |v: [usize; 3]| v.map(|x| x as i64);
        let ([q_sb, q_ss, q_sh], [o_sb, o_ss, o_sh]) = (i(st.q), i(st.o));
        let ([k_sp, k_ss, k_sh], [v_sp, v_ss, v_sh]) = (i(st.k), i(st.v));
        DecodeArgs {
            batch: s.batch as i32,
            heads_q: s.heads_q as i32,
            heads_kv: s.heads_kv as i32,
            group: s.group() as i32,
            sq: s.seqlen_q as i32,
            num_pages: s.num_pages as i32,
            // (a dense cache's length need not be a power of two: no block table reads it)
            page_shift: if s.paged {
                s.page_size.trailing_zeros() as i32
            } else {
                0
            },
            max_pages: s.max_pages as i32,
            splits: 1,
            m_groups: 1,
            causal: s.causal as i32,
            scale_log2: s.scale * std::f32::consts::LOG2_E,
            head_dim: s.head_dim as i32,
            q_sb,
            q_ss,
            q_sh,
            o_sb,
            o_ss,
            o_sh,
            k_sp,
            k_ss,
            k_sh,
            v_sp,
            v_ss,
            v_sh,
            max_ctx: s.max_context() as i32,
            ..DecodeArgs::default()
        }
    }
    pub fn as_param(&mut self) -> *mut c_void {
        self as *mut DecodeArgs as *mut c_void
    }
}

/// The specialisation of one launch: the head dim and the cp.async stages of 64-key K+V
/// tiles, enough in flight to cover DRAM latency while leaving room for 3 (d64), 2 (d128) or 1
/// (d256) blocks per SM. (Blocks of more than 16 rows, several warps along the rows, were left
/// out: they would triple the variants for the rare step of many rows per KV head.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeTile {
    pub d: u32,
    pub stages: u32,
}

impl DecodeTile {
    pub fn new(d: u32) -> DecodeTile {
        let stages = if d == 64 { 4 } else { 3 };
        DecodeTile { d, stages }
    }
    /// Blocks over one KV head's query rows.
    pub fn m_groups(rows: usize) -> usize {
        rows.div_ceil(ROWS_PER_BLOCK)
    }
    /// The Q tile and the ring of K+V stages, 16-bit elements.
    pub fn smem_bytes(&self) -> u32 {
        let row = self.d * 2;
        ROWS_PER_BLOCK as u32 * row + self.stages * 2 * KEYS_PER_TILE as u32 * row
    }
    /// Blocks one SM holds at once (shared memory, with the 1 KB each reserves, and threads).
    pub fn blocks_per_sm(&self, dev: &DeviceInfo) -> u32 {
        let by_smem = dev.smem_per_sm_bytes / (self.smem_bytes() + 1024);
        by_smem.clamp(1, 2048 / THREADS)
    }
    pub fn spec(&self, arch: &str, dtype: DType) -> KernelSpec {
        KernelSpec::new("attention/decode_paged.cu", "decode_paged", arch)
            .define("KILN_IN", dtype.code())
            .define("KILN_D", self.d)
            .define("KILN_STAGES", self.stages)
            .define("KILN_SMEM", self.smem_bytes())
    }
}

/// Splits of each sequence's context. A wave is every block the GPU holds at once; with at least
/// one wave of (sequence, KV head, row group) blocks the GPU is full and 1 split avoids the
/// partials' traffic and the combine. Below that, the count between one and two waves whose last
/// wave is fullest (the earliest such), so every SM streams the cache until near the end; never
/// so many that a split gets fewer than [`MIN_TILES_PER_SPLIT`] tiles of the longest context.
pub fn split_count(blocks: usize, wave: usize, max_context: usize) -> usize {
    let blocks = blocks.max(1);
    if blocks >= wave {
        return 1;
    }
    let most = (max_context.div_ceil(KEYS_PER_TILE) / MIN_TILES_PER_SPLIT).max(1);
    let (lo, hi) = (wave.div_ceil(blocks), (2 * wave).div_ceil(blocks));
    let fullness = |s: usize| {
        let waves = (s * blocks) as f64 / wave as f64;
        waves / waves.ceil()
    };
    let mut best = lo.min(most);
    for s in lo..=hi.min(most) {
        if fullness(s) > fullness(best) + 1e-9 {
            best = s;
        }
    }
    best
}

/// How one step launches: the tile, the row groups and the splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodePlan {
    pub tile: DecodeTile,
    pub m_groups: usize,
    pub splits: usize,
}

impl DecodePlan {
    pub fn new(s: &DecodeShape, dev: &DeviceInfo) -> DecodePlan {
        let tile = DecodeTile::new(s.head_dim as u32);
        let m_groups = DecodeTile::m_groups(s.rows());
        let blocks = s.batch * s.heads_kv * m_groups;
        let wave = (dev.sm_count * tile.blocks_per_sm(dev)) as usize;
        let splits = split_count(blocks, wave, s.max_pages * s.page_size);
        DecodePlan {
            tile,
            m_groups,
            splits,
        }
    }
    pub fn blocks(&self, s: &DecodeShape) -> usize {
        s.batch * s.heads_kv * self.m_groups * self.splits
    }
    /// fp32 partial O and LSE of every split (0 for one split).
    pub fn partial_bytes(&self, s: &DecodeShape) -> usize {
        match self.splits {
            1 => 0,
            n => n * s.lse_elems() * (s.head_dim + 1) * 4,
        }
    }
}

/// The device buffers of one decode step.
pub struct DecodeOperands<'a> {
    pub q: &'a DeviceBuffer,
    pub k_cache: &'a DeviceBuffer,
    pub v_cache: &'a DeviceBuffer,
    pub o: &'a DeviceBuffer,
    pub lse: &'a DeviceBuffer,
    /// i32 [batch, max_pages]; `None`: a dense cache.
    pub block_table: Option<&'a DeviceBuffer>,
    /// i32 [batch]; `None`: every sequence attends to the whole dense cache.
    pub context_lens: Option<&'a DeviceBuffer>,
    /// i32 [batch], each sequence's first key; `None`: 0 (the shape's `starts` is false).
    pub context_starts: Option<&'a DeviceBuffer>,
    /// Where the kernels record bad input ([`crate::device::HostFlags`], three words); 0:
    /// nowhere.
    pub errors: u64,
}

/// Checks that the buffers hold the shape's tensors (their spans under their strides), 16-byte
/// aligned where copied in chunks, and that the tables are there exactly when the shape reads
/// them.
pub fn check_operands(s: &DecodeShape, ops: &DecodeOperands) -> Result<()> {
    if ops.block_table.is_some() != s.paged
        || ops.context_lens.is_some() != s.lengths
        || ops.context_starts.is_some() != s.starts
    {
        return Err(Error::invalid(
            "the block table, context lengths and starts given do not match the decode shape (paged, with lengths, with starts)",
        ));
    }
    let e = s.dtype.size();
    let [q, o, k, v] = s.spans();
    let held = |b: Option<&DeviceBuffer>| b.map_or((0, 0), |b| (b.bytes(), b.ptr()));
    let ((table_have, table_ptr), (lens_have, lens_ptr), (starts_have, starts_ptr)) = (
        held(ops.block_table),
        held(ops.context_lens),
        held(ops.context_starts),
    );
    let (table_need, lens_need, starts_need) = (
        if s.paged { s.table_elems() * 4 } else { 0 },
        if s.lengths { s.batch * 4 } else { 0 },
        if s.starts { s.batch * 4 } else { 0 },
    );
    for (name, need, have, ptr) in [
        ("Q", q * e, ops.q.bytes(), ops.q.ptr()),
        ("K cache", k * e, ops.k_cache.bytes(), ops.k_cache.ptr()),
        ("V cache", v * e, ops.v_cache.bytes(), ops.v_cache.ptr()),
        ("O", o * e, ops.o.bytes(), ops.o.ptr()),
        ("LSE", s.lse_elems() * 4, ops.lse.bytes(), ops.lse.ptr()),
        ("block table", table_need, table_have, table_ptr),
        ("context lengths", lens_need, lens_have, lens_ptr),
        ("context starts", starts_need, starts_have, starts_ptr),
    ] {
        if have < need {
            return Err(Error::invalid(format!(
                "{name} needs {need} bytes for this shape but its buffer has {have}"
            )));
        }
        let want = if name.starts_with('Q') || name.contains("cache") || name == "O" {
            16
        } else {
            4
        };
        if alignment(ptr) < want {
            return Err(Error::invalid(format!(
                "{name} starts at {ptr:#x}, which is not {want}-byte aligned"
            )));
        }
    }
    Ok(())
}

/// Every specialisation for `arch` (for `kiln check`): head dims x dtypes.
pub fn variants(arch: &str) -> Vec<KernelSpec> {
    HEAD_DIMS
        .iter()
        .flat_map(|&d| {
            DTYPES
                .iter()
                .map(move |&dt| DecodeTile::new(d as u32).spec(arch, dt))
        })
        .collect()
}

/// A decode step's launch worked out but for its operands' addresses: the plan, the loaded
/// kernels, the launch shape and the argument block without addresses (the context's memo
/// keeps it by shape).
#[derive(Debug, Clone, Copy)]
struct Resolved {
    plan: DecodePlan,
    f: Function,
    /// decode_combine, when the step splits.
    combine: Option<Function>,
    cfg: LaunchConfig,
    args: DecodeArgs,
}

fn resolve(ctx: &Context, s: &DecodeShape) -> Result<Resolved> {
    let plan = DecodePlan::new(s, &ctx.info);
    ctx.info
        .check_smem(plan.tile.smem_bytes())
        .map_err(|reason| Error::Unsupported {
            kernel: "decode_paged".into(),
            reason,
        })?;
    let combine = match plan.splits {
        1 => None,
        _ => Some(decode_combine::function(ctx, s.dtype)?),
    };
    Ok(Resolved {
        plan,
        f: ctx.function(&plan.tile.spec(&ctx.arch(), s.dtype))?,
        combine,
        cfg: LaunchConfig {
            smem_bytes: plan.tile.smem_bytes(),
            ..LaunchConfig::simple((plan.blocks(s) as u32, 1, 1), THREADS)
        },
        args: DecodeArgs {
            splits: plan.splits as i32,
            m_groups: plan.m_groups as i32,
            ..DecodeArgs::new(s)
        },
    })
}

/// Enqueues one decode step (and the combine when it splits) on the context's stream. Callers
/// have validated `s` and checked `ops`. What depends on the shape alone is worked out once
/// per shape (the context's memo).
pub fn launch(ctx: &Context, s: &DecodeShape, ops: &DecodeOperands) -> Result<DecodePlan> {
    let r = ctx.memo.get_or_try(&s.key(), || resolve(ctx, s))?;
    let plan = r.plan;
    let mut args = DecodeArgs {
        q: ops.q.ptr(),
        k_cache: ops.k_cache.ptr(),
        v_cache: ops.v_cache.ptr(),
        o: ops.o.ptr(),
        lse: ops.lse.ptr(),
        block_table: ops.block_table.map_or(0, |b| b.ptr()),
        context_lens: ops.context_lens.map_or(0, |b| b.ptr()),
        context_starts: ops.context_starts.map_or(0, |b| b.ptr()),
        errors: ops.errors,
        ..r.args
    };
    if plan.splits > 1 {
        let base = ctx
            .scratch
            .decode_partials
            .at_least(ctx, plan.partial_bytes(s))?;
        args.part_o = base;
        args.part_lse = base + (plan.splits * s.lse_elems() * s.head_dim * 4) as u64;
    }
    // SAFETY: one parameter, a DecodeArgs whose buffers the caller checked against `s` and keeps
    // alive; the partials (when split) are the context's scratch, sized by `partial_bytes`.
    // Every page id and context length is checked on the GPU before it addresses the cache.
    unsafe { r.f.launch(ctx.stream, &r.cfg, &mut [args.as_param()])? };
    if let Some(combine) = &r.combine {
        decode_combine::launch(ctx, combine, s, &mut args)?;
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_args_match_the_device_layout() {
        assert_eq!(std::mem::offset_of!(DecodeArgs, v_new), 80);
        assert_eq!(std::mem::offset_of!(DecodeArgs, batch), 88);
        assert_eq!(std::mem::offset_of!(DecodeArgs, page_shift), 112);
        assert_eq!(std::mem::offset_of!(DecodeArgs, causal), 128);
        assert_eq!(std::mem::offset_of!(DecodeArgs, scale_log2), 136);
        assert_eq!(std::mem::offset_of!(DecodeArgs, head_dim), 140);
        assert_eq!(std::mem::offset_of!(DecodeArgs, q_sb), 144);
        assert_eq!(std::mem::offset_of!(DecodeArgs, v_sh), 232);
        assert_eq!(std::mem::offset_of!(DecodeArgs, max_ctx), 240);
        assert_eq!(std::mem::offset_of!(DecodeArgs, errors), 248);
        assert_eq!(std::mem::offset_of!(DecodeArgs, context_starts), 256);
        assert_eq!(std::mem::size_of::<DecodeArgs>(), 264);
    }

    #[test]
    fn a_full_gpu_takes_one_split_and_a_small_batch_fills_one_to_two_waves() {
        let h100 = DeviceInfo::h100_sxm();
        let shape = |batch, ctx_tokens: usize| DecodeShape {
            batch,
            heads_q: 32,
            heads_kv: 8,
            head_dim: 128,
            seqlen_q: 1,
            num_pages: batch * ctx_tokens / 16,
            page_size: 16,
            max_pages: ctx_tokens / 16,
            causal: false,
            scale: 0.088,
            dtype: DType::Bf16,
            paged: true,
            lengths: true,
            starts: false,
            strides: DecodeStrides::packed(32, 1, 8, 16, 128),
        };
        // The target: 64 x 8 blocks already fill 132 SMs (2 blocks each at d128).
        let big = DecodePlan::new(&shape(64, 8192), &h100);
        assert_eq!(big.tile.blocks_per_sm(&h100), 2);
        assert_eq!((big.splits, big.m_groups), (1, 1));
        assert_eq!(big.partial_bytes(&shape(64, 8192)), 0);
        // One sequence of 8 KV heads: 8 blocks, split to the 128 tiles' cap (4 tiles each)...
        let one = DecodePlan::new(&shape(1, 8192), &h100);
        assert_eq!(one.splits, 8192 / 64 / MIN_TILES_PER_SPLIT);
        // ...or, with a longer context, to exactly one full wave of 264.
        let long = shape(1, 65536);
        assert_eq!(DecodePlan::new(&long, &h100).blocks(&long), 264);
        // a short context caps the splits at 4 tiles each
        let short = DecodePlan::new(&shape(1, 1024), &h100);
        assert_eq!(short.splits, 1024 / 64 / MIN_TILES_PER_SPLIT);
        assert_eq!(split_count(100, 264, 64), 1);
    }

    #[test]
    fn split_count_prefers_the_fullest_last_wave() {
        // 200 blocks, waves of 264: 2 splits (1.52 waves) or 3 (2.27); 4 = 3.03 is past two waves.
        assert_eq!(split_count(200, 264, 1 << 20), 2);
        // 100 blocks: 3 (1.14), 4 (1.52), 5 (1.89, fullest)
        assert_eq!(split_count(100, 264, 1 << 20), 5);
        assert_eq!(split_count(264, 264, 1 << 20), 1);
    }

    #[test]
    fn rows_take_blocks_of_16_and_every_tile_fits_an_h100() {
        let h100 = DeviceInfo::h100_sxm();
        for (rows, groups) in [(1, 1), (4, 1), (16, 1), (17, 2), (64, 4), (128, 8)] {
            assert_eq!(DecodeTile::m_groups(rows), groups, "{rows} rows");
        }
        for (d, blocks) in [(64, 3), (128, 2), (256, 1)] {
            let t = DecodeTile::new(d);
            assert!(t.smem_bytes() <= h100.smem_optin_bytes, "d{d}");
            assert_eq!(t.blocks_per_sm(&h100), blocks, "d{d}");
        }
        let v = variants("sm_90a");
        assert_eq!(v.len(), 6);
        let unique: std::collections::HashSet<_> = v.iter().map(|s| s.label()).collect();
        assert_eq!(unique.len(), 6);
    }

    #[test]
    fn shapes_refuse_what_the_kernels_cannot_take() {
        let ok = DecodeShape::of(&crate::ops::attention::paged::tests::two_sequences());
        ok.validate().unwrap();
        let e = |s: DecodeShape| s.validate().unwrap_err().to_string();
        assert!(e(DecodeShape {
            page_size: 32,
            ..ok
        })
        .contains("page size 32"));
        assert!(e(DecodeShape { seqlen_q: 0, ..ok }).contains("seqlen_q = 0"));
        assert!(e(DecodeShape { num_pages: 0, ..ok }).contains("0 pages"));
        assert!(e(DecodeShape { head_dim: 96, ..ok }).contains("head_dim = 96"));
        assert!(e(DecodeShape { heads_kv: 3, ..ok }).contains("kv_heads = 3"));
    }
}
