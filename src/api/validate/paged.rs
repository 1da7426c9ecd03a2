//! Decode over a KV cache: q, the caches (paged through a block table, or dense, one per
//! sequence), the context lengths, o (and lse), and the append's new K/V, to a `DecodeShape` with
//! flash-attention's `with_kvcache` shapes. q, o and the caches are read where they lie (any
//! strides the kernels' 16-byte copies address); the tables are packed.

use super::{
    contiguous, dtype_in, err, float, no_alias, on_device, rank, same_dtype, writable, Operand,
    HALF,
};
use crate::api::dtype::DType;
use crate::api::info::TensorInfo;
use crate::error::{ArgumentKind, Result};
use crate::ops::attention::decode_paged::{DecodeShape, DecodeStrides};
use crate::ops::attention::paged::{MAX_DECODE_QUERIES, PAGE_SIZES};
use crate::ops::attention::{HEAD_DIMS, STRIDE_ALIGN};

/// A checked decode step: the shape and the memory of each tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct PagedPlan {
    pub shape: DecodeShape,
    pub q: Operand,
    pub k_cache: Operand,
    pub v_cache: Operand,
    /// `None`: a dense cache.
    pub block_table: Option<Operand>,
    /// `None`: every sequence attends to its whole dense cache.
    pub context_lens: Option<Operand>,
    /// `None`: every sequence's keys start at 0.
    pub context_starts: Option<Operand>,
    pub o: Operand,
    /// `None`: the caller wants no LSE (the handle's workspace takes it).
    pub lse: Option<Operand>,
}

impl PagedPlan {
    /// The memory a launch of the plan reads and writes (see [`super::GemmPlan::addresses`]).
    pub fn addresses(&self) -> impl std::hash::Hash {
        let PagedPlan {
            shape: _,
            q,
            k_cache,
            v_cache,
            block_table,
            context_lens,
            context_starts,
            o,
            lse,
        } = *self;
        (
            q,
            k_cache,
            v_cache,
            block_table,
            context_lens,
            context_starts,
            o,
            lse,
        )
    }
}

/// A checked append: the shape, the new tokens per sequence and the memory.
#[derive(Debug, Clone, PartialEq)]
pub struct AppendPlan {
    pub shape: DecodeShape,
    pub n_new: usize,
    pub k_new: Operand,
    pub v_new: Operand,
    pub k_cache: Operand,
    pub v_cache: Operand,
    /// `None`: a dense cache.
    pub block_table: Option<Operand>,
    pub context_lens: Operand,
}

/// The strides of a 4-D view's outer three dimensions, each of extent above 1 a positive
/// multiple of 16 bytes, head_dim contiguous; an extent-1 dimension takes its packed stride.
fn row_strides(arg: &str, t: &TensorInfo, what: &str) -> Result<[usize; 3]> {
    let (shape, strides) = (t.shape(), t.strides());
    if shape[3] > 1 && strides[3] != 1 {
        return Err(err(
            arg,
            ArgumentKind::Stride,
            format!(
                "`{arg}` has stride {} on head_dim; {what} reads head_dim contiguously (stride 1)",
                strides[3]
            ),
        ));
    }
    let packed = [
        shape[1] * shape[2] * shape[3],
        shape[2] * shape[3],
        shape[3],
    ];
    let mut out = packed;
    for i in 0..3 {
        if shape[i] <= 1 {
            continue;
        }
        let s = strides[i];
        if s == 0 || !s.is_multiple_of(STRIDE_ALIGN) {
            return Err(err(
                arg,
                ArgumentKind::Stride,
                format!(
                    "`{arg}` has stride {s} in dimension {i} (strides {}); {what} copies rows 16 bytes at a time, so every stride must be a positive multiple of {STRIDE_ALIGN} elements: make it contiguous",
                    t.strides_text()
                ),
            ));
        }
        out[i] = s;
    }
    Ok(out)
}

/// A table of one i32 per sequence (`what`: what its entries are), packed.
fn per_sequence(arg: &str, t: &TensorInfo, batch: usize, what: &str) -> Result<()> {
    rank(arg, t, 1, &format!("`{arg}` is 1-D [batch]"))?;
    dtype_in(arg, t, &[DType::I32], &format!("`{arg}` holds i32 {what}"))?;
    if t.shape()[0] != batch {
        return Err(err(
            arg,
            ArgumentKind::Shape,
            format!(
                "`{arg}` is {}; batch {batch} needs [{batch}]",
                t.shape_text()
            ),
        ));
    }
    contiguous(arg, t, &format!("kiln reads the {what} packed"))
}

/// The caches and tables of a step or an append, checked.
struct Cache {
    /// [pages (a dense cache: batch), page_size (its length), heads_kv, head_dim].
    dims: [usize; 4],
    /// Block table columns (1 for a dense cache).
    max_pages: usize,
    k: [usize; 3],
    v: [usize; 3],
}

/// The caches (4-D: [num_pages, page_size, heads_kv, head_dim] with a block table, i32
/// [batch, max_pages]; without one [batch, seqlen, heads_kv, head_dim], a dense cache per
/// sequence), one shape and dtype, any strides the kernels address; the context lengths (i32
/// [batch], packed) if given.
fn cache_and_tables(
    device: usize,
    k_cache: &TensorInfo,
    v_cache: &TensorInfo,
    block_table: Option<&TensorInfo>,
    context_lens: Option<&TensorInfo>,
    batch: usize,
) -> Result<Cache> {
    let takes = match block_table {
        Some(_) => "kiln's paged cache is 4-D [num_pages, page_size, heads_kv, head_dim]",
        None => "without a block table, kiln's cache is 4-D [batch, seqlen, heads_kv, head_dim] (a transposed view of a [batch, heads_kv, seqlen, head_dim] cache is read in place)",
    };
    for (name, t) in [
        ("k_cache", Some(k_cache)),
        ("v_cache", Some(v_cache)),
        ("block_table", block_table),
        ("cache_seqlens", context_lens),
    ] {
        if let Some(t) = t {
            on_device(name, t, device)?;
        }
    }
    rank("k_cache", k_cache, 4, takes)?;
    rank("v_cache", v_cache, 4, takes)?;
    dtype_in(
        "k_cache",
        k_cache,
        &HALF,
        "kiln's KV cache holds bf16 or f16",
    )?;
    same_dtype(
        "v_cache",
        v_cache,
        "k_cache",
        k_cache,
        "kiln's KV cache holds K and V of one dtype",
    )?;
    if v_cache.shape() != k_cache.shape() {
        return Err(err(
            "v_cache",
            ArgumentKind::Shape,
            format!(
                "`v_cache` is {} but `k_cache` is {}; K and V caches have one shape",
                v_cache.shape_text(),
                k_cache.shape_text()
            ),
        ));
    }
    let dims = [0, 1, 2, 3].map(|i| k_cache.shape()[i]);
    let max_pages = match block_table {
        Some(bt) => {
            rank(
                "block_table",
                bt,
                2,
                "`block_table` is 2-D [batch, max_pages]",
            )?;
            dtype_in(
                "block_table",
                bt,
                &[DType::I32],
                "`block_table` holds i32 page ids",
            )?;
            if bt.shape()[0] != batch {
                return Err(err(
                    "block_table",
                    ArgumentKind::Shape,
                    format!(
                        "`block_table` is {}; batch {batch} needs [{batch}, max_pages]",
                        bt.shape_text()
                    ),
                ));
            }
            contiguous("block_table", bt, "kiln reads the block table packed")?;
            bt.shape()[1]
        }
        None => {
            if dims[0] != batch {
                return Err(err(
                    "k_cache",
                    ArgumentKind::Shape,
                    format!(
                        "`k_cache` is {} without a block table, so it holds one sequence per row of the batch, but `q` has batch {batch}; pass [{batch}, seqlen, heads_kv, head_dim] or a block table",
                        k_cache.shape_text()
                    ),
                ));
            }
            1
        }
    };
    if let Some(l) = context_lens {
        per_sequence("cache_seqlens", l, batch, "lengths")?;
    } else if block_table.is_some() {
        return Err(err(
            "cache_seqlens",
            ArgumentKind::Value,
            "a paged cache needs `cache_seqlens` (i32 [batch]: the tokens each sequence holds)"
                .into(),
        ));
    }
    let what = "kiln's decode";
    if block_table.is_some() && !PAGE_SIZES.contains(&dims[1]) {
        return Err(err(
            "k_cache",
            ArgumentKind::Shape,
            format!(
                "`k_cache` has pages of {} tokens; kiln's decode takes 16, 64 or 256",
                dims[1]
            ),
        ));
    }
    for (name, t) in [("k_cache", k_cache), ("v_cache", v_cache)] {
        aligned(name, t, what)?;
    }
    Ok(Cache {
        dims,
        max_pages,
        k: row_strides("k_cache", k_cache, what)?,
        v: row_strides("v_cache", v_cache, what)?,
    })
}

/// `t` starts on a 16-byte boundary (the kernels copy its rows 16 bytes at a time).
fn aligned(arg: &str, t: &TensorInfo, what: &str) -> Result<()> {
    super::aligned16(
        arg,
        t,
        &format!("{what} copies rows 16 bytes at a time: pass a tensor whose start is (a slice at a multiple of 8 elements)"),
    )
}

/// Checks a decode step for a handle on GPU `device`: q [batch, seqlen_q, heads, head_dim],
/// o like q, lse f32 [batch, heads, seqlen_q]; a paged cache with `block_table` and
/// `context_lens`, or a dense one (one sequence per row) with or without lengths; with
/// `context_starts` (i32 [batch], flash-attention's `cache_leftpad`; needs the lengths) each
/// sequence attends to keys start .. length. `None` when the batch is empty.
#[allow(clippy::too_many_arguments)]
pub fn paged(
    device: usize,
    q: &TensorInfo,
    k_cache: &TensorInfo,
    v_cache: &TensorInfo,
    block_table: Option<&TensorInfo>,
    context_lens: Option<&TensorInfo>,
    context_starts: Option<&TensorInfo>,
    o: &TensorInfo,
    lse: Option<&TensorInfo>,
    causal: bool,
    softmax_scale: Option<f32>,
) -> Result<Option<PagedPlan>> {
    let takes = "kiln's decode takes 4-D `q` and `o` ordered [batch, seqlen_q, heads, head_dim]";
    for (name, t) in [("q", q), ("o", o)]
        .into_iter()
        .chain(lse.map(|l| ("lse", l)))
    {
        on_device(name, t, device)?;
    }
    rank("q", q, 4, takes)?;
    rank("o", o, 4, takes)?;
    dtype_in("q", q, &HALF, "kiln's decode takes bf16 or f16")?;
    let [batch, sq, hq, dq] = [0, 1, 2, 3].map(|i| q.shape()[i]);
    let cache = cache_and_tables(device, k_cache, v_cache, block_table, context_lens, batch)?;
    if let Some(st) = context_starts {
        on_device("cache_leftpad", st, device)?;
        per_sequence("cache_leftpad", st, batch, "first keys")?;
        if context_lens.is_none() {
            return Err(err(
                "cache_leftpad",
                ArgumentKind::Value,
                "`cache_leftpad` (each sequence's first key) needs `cache_seqlens` (where each ends)"
                    .into(),
            ));
        }
    }
    let [pages, page_size, hkv, d] = cache.dims;
    same_dtype(
        "k_cache",
        k_cache,
        "q",
        q,
        "kiln's decode takes `q` and the cache of one dtype",
    )?;
    same_dtype("o", o, "q", q, "kiln's decode writes `o` in `q`'s dtype")?;
    if o.shape() != q.shape() {
        return Err(err(
            "o",
            ArgumentKind::Shape,
            format!(
                "`o` is {} but `q` is {}; the output has the query's shape",
                o.shape_text(),
                q.shape_text()
            ),
        ));
    }
    if d != dq {
        return Err(err(
            "k_cache",
            ArgumentKind::Shape,
            format!("`k_cache` has head dim {d} but `q` has {dq}"),
        ));
    }
    if !HEAD_DIMS.contains(&dq) {
        return Err(err(
            "q",
            ArgumentKind::Shape,
            format!("`q` has head dim {dq}; kiln's decode takes head dims 64, 128 or 256"),
        ));
    }
    if hkv == 0 || !hq.is_multiple_of(hkv) {
        return Err(err(
            "k_cache",
            ArgumentKind::Shape,
            format!(
                "`q` has {hq} heads and `k_cache` {hkv}: the query heads must be a multiple of the key/value heads (GQA)"
            ),
        ));
    }
    if !(1..=MAX_DECODE_QUERIES).contains(&sq) && batch > 0 {
        return Err(err(
            "q",
            ArgumentKind::Shape,
            format!(
                "`q` has {sq} query tokens per sequence; kiln's decode takes 1 to {MAX_DECODE_QUERIES}"
            ),
        ));
    }
    if let Some(l) = lse {
        dtype_in("lse", l, &[DType::F32], "kiln's decode writes an f32 `lse`")?;
        if l.shape() != [batch, hq, sq] {
            return Err(err(
                "lse",
                ArgumentKind::Shape,
                format!("`lse` is {}; kiln's decode writes [batch, heads, seqlen_q] = [{batch}, {hq}, {sq}]", l.shape_text()),
            ));
        }
        contiguous("lse", l, "kiln's decode writes a packed `lse`")?;
    }
    if let Some(s) = softmax_scale {
        if !s.is_finite() || s <= 0.0 {
            return Err(err(
                "softmax_scale",
                ArgumentKind::Value,
                format!("`softmax_scale` is {s}; it must be finite and positive"),
            ));
        }
    }
    if batch == 0 {
        return Ok(None);
    }
    let what = "kiln's decode";
    let (qs, os) = (row_strides("q", q, what)?, row_strides("o", o, what)?);
    aligned("q", q, what)?;
    aligned("o", o, what)?;
    writable("o", o)?;
    no_alias(
        "o",
        o,
        &[("q", q), ("k_cache", k_cache), ("v_cache", v_cache)],
    )?;
    if let Some(l) = lse {
        no_alias(
            "lse",
            l,
            &[
                ("q", q),
                ("k_cache", k_cache),
                ("v_cache", v_cache),
                ("o", o),
            ],
        )?;
    }
    let shape = DecodeShape {
        batch,
        heads_q: hq,
        heads_kv: hkv,
        head_dim: dq,
        seqlen_q: sq,
        num_pages: pages,
        page_size,
        max_pages: cache.max_pages,
        causal,
        scale: softmax_scale.unwrap_or(1.0 / (dq as f32).sqrt()),
        dtype: float("q", q)?,
        paged: block_table.is_some(),
        lengths: context_lens.is_some(),
        starts: context_starts.is_some(),
        strides: DecodeStrides {
            q: qs,
            o: os,
            k: cache.k,
            v: cache.v,
        },
    };
    shape.validate()?;
    Ok(Some(PagedPlan {
        shape,
        q: Operand::of(q),
        k_cache: Operand::of(k_cache),
        v_cache: Operand::of(v_cache),
        block_table: block_table.map(Operand::of),
        context_lens: context_lens.map(Operand::of),
        context_starts: context_starts.map(Operand::of),
        o: Operand::of(o),
        lse: lse.map(Operand::of),
    }))
}

/// Checks an append of k_new and v_new [batch, n_new, heads_kv, head_dim] (packed) into the
/// caches (paged with `block_table`, else dense) at the end of each context (`context_lens`
/// count the new tokens); `None` when there is nothing to write.
pub fn append(
    device: usize,
    k_new: &TensorInfo,
    v_new: &TensorInfo,
    k_cache: &TensorInfo,
    v_cache: &TensorInfo,
    block_table: Option<&TensorInfo>,
    context_lens: &TensorInfo,
) -> Result<Option<AppendPlan>> {
    let takes = "kiln's append takes 4-D `k` and `v` ordered [batch, n_new, heads_kv, head_dim]";
    for (name, t) in [("k", k_new), ("v", v_new)] {
        on_device(name, t, device)?;
        rank(name, t, 4, takes)?;
    }
    let [batch, n_new, hk, dk] = [0, 1, 2, 3].map(|i| k_new.shape()[i]);
    let cache = cache_and_tables(
        device,
        k_cache,
        v_cache,
        block_table,
        Some(context_lens),
        batch,
    )?;
    let [pages, page_size, hkv, d] = cache.dims;
    same_dtype(
        "k",
        k_new,
        "k_cache",
        k_cache,
        "kiln appends K and V in the cache's dtype",
    )?;
    same_dtype(
        "v",
        v_new,
        "k_cache",
        k_cache,
        "kiln appends K and V in the cache's dtype",
    )?;
    if v_new.shape() != k_new.shape() || hk != hkv || dk != d {
        return Err(err(
            "k",
            ArgumentKind::Shape,
            format!(
                "`k` is {} and `v` {}; the cache takes [batch, n_new, {hkv}, {d}] for both",
                k_new.shape_text(),
                v_new.shape_text()
            ),
        ));
    }
    if batch == 0 || n_new == 0 {
        return Ok(None);
    }
    contiguous("k", k_new, "kiln reads the new tokens packed")?;
    contiguous("v", v_new, "kiln reads the new tokens packed")?;
    for (name, c) in [("k_cache", k_cache), ("v_cache", v_cache)] {
        writable(name, c)?;
        no_alias(name, c, &[("k", k_new), ("v", v_new)])?;
    }
    let packed = DecodeStrides::packed(hkv, 1, hkv, page_size, d);
    let shape = DecodeShape {
        batch,
        heads_q: hkv,
        heads_kv: hkv,
        head_dim: d,
        seqlen_q: 1,
        num_pages: pages,
        page_size,
        max_pages: cache.max_pages,
        causal: false,
        scale: 1.0,
        dtype: float("k_cache", k_cache)?,
        paged: block_table.is_some(),
        lengths: true,
        starts: false,
        strides: DecodeStrides {
            k: cache.k,
            v: cache.v,
            ..packed
        },
    };
    shape.validate()?;
    Ok(Some(AppendPlan {
        shape,
        n_new,
        k_new: Operand::of(k_new),
        v_new: Operand::of(v_new),
        k_cache: Operand::of(k_cache),
        v_cache: Operand::of(v_cache),
        block_table: block_table.map(Operand::of),
        context_lens: Operand::of(context_lens),
    }))
}
