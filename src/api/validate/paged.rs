//! Decode over a paged KV cache: q, the caches, the block table, the context lengths, o (and
//! lse), and the append's new K/V, to a `DecodeShape` with flash-attention's `with_kvcache` shapes.

use super::{
    contiguous, dtype_in, err, float, no_alias, on_device, rank, same_dtype, writable, Operand,
    HALF,
};
use crate::api::dtype::DType;
use crate::api::info::TensorInfo;
use crate::error::{ArgumentKind, Result};
use crate::ops::attention::decode_paged::DecodeShape;

/// A checked decode step: the shape and the memory of each tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct PagedPlan {
    pub shape: DecodeShape,
    pub q: Operand,
    pub k_cache: Operand,
    pub v_cache: Operand,
    pub block_table: Operand,
    pub context_lens: Operand,
    pub o: Operand,
    /// `None`: the caller wants no LSE (the handle's workspace takes it).
    pub lse: Option<Operand>,
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
    pub block_table: Operand,
    pub context_lens: Operand,
}

/// The caches (4-D [num_pages, page_size, heads_kv, head_dim], one shape and dtype, packed), the
/// block table (i32 [batch, max_pages]) and the context lengths (i32 [batch]).
fn cache_and_tables(
    device: usize,
    k_cache: &TensorInfo,
    v_cache: &TensorInfo,
    block_table: &TensorInfo,
    context_lens: &TensorInfo,
    batch: usize,
) -> Result<[usize; 5]> {
    let takes = "kiln's paged cache is 4-D [num_pages, page_size, heads_kv, head_dim]";
    for (name, t) in [
        ("k_cache", k_cache),
        ("v_cache", v_cache),
        ("block_table", block_table),
        ("cache_seqlens", context_lens),
    ] {
        on_device(name, t, device)?;
    }
    rank("k_cache", k_cache, 4, takes)?;
    rank("v_cache", v_cache, 4, takes)?;
    dtype_in(
        "k_cache",
        k_cache,
        &HALF,
        "kiln's paged cache holds bf16 or f16",
    )?;
    same_dtype(
        "v_cache",
        v_cache,
        "k_cache",
        k_cache,
        "kiln's paged cache holds K and V of one dtype",
    )?;
    if v_cache.shape() != k_cache.shape() {
        return Err(err(
            "v_cache",
            ArgumentKind::Shape,
            format!(
                "`v_cache` is {} but `k_cache` is {}; K and V pages have one shape",
                v_cache.shape_text(),
                k_cache.shape_text()
            ),
        ));
    }
    let [pages, page_size, hkv, d] = [0, 1, 2, 3].map(|i| k_cache.shape()[i]);
    rank(
        "block_table",
        block_table,
        2,
        "`block_table` is 2-D [batch, max_pages]",
    )?;
    rank(
        "cache_seqlens",
        context_lens,
        1,
        "`cache_seqlens` is 1-D [batch]",
    )?;
    dtype_in(
        "block_table",
        block_table,
        &[DType::I32],
        "`block_table` holds i32 page ids",
    )?;
    dtype_in(
        "cache_seqlens",
        context_lens,
        &[DType::I32],
        "`cache_seqlens` holds i32 lengths",
    )?;
    if block_table.shape()[0] != batch || context_lens.shape()[0] != batch {
        return Err(err(
            "block_table",
            ArgumentKind::Shape,
            format!(
                "`block_table` is {} and `cache_seqlens` {}; batch {batch} needs [{batch}, max_pages] and [{batch}]",
                block_table.shape_text(),
                context_lens.shape_text()
            ),
        ));
    }
    for (name, t) in [
        ("k_cache", k_cache),
        ("v_cache", v_cache),
        ("block_table", block_table),
        ("cache_seqlens", context_lens),
    ] {
        contiguous(name, t, "kiln reads the paged cache and its tables packed")?;
    }
    Ok([pages, page_size, hkv, d, block_table.shape()[1]])
}

/// Checks a decode step for a handle on GPU `device`: q [batch, seqlen_q, heads, head_dim],
/// o like q, lse f32 [batch, heads, seqlen_q]; `None` when the batch is empty.
#[allow(clippy::too_many_arguments)]
pub fn paged(
    device: usize,
    q: &TensorInfo,
    k_cache: &TensorInfo,
    v_cache: &TensorInfo,
    block_table: &TensorInfo,
    context_lens: &TensorInfo,
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
    let [pages, page_size, hkv, d, max_pages] =
        cache_and_tables(device, k_cache, v_cache, block_table, context_lens, batch)?;
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
    contiguous("q", q, "kiln's decode reads `q` packed")?;
    contiguous("o", o, "kiln's decode writes `o` packed")?;
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
        max_pages,
        causal,
        scale: softmax_scale.unwrap_or(1.0 / (dq as f32).sqrt()),
        dtype: float("q", q)?,
    };
    shape.validate()?;
    Ok(Some(PagedPlan {
        shape,
        q: Operand::of(q),
        k_cache: Operand::of(k_cache),
        v_cache: Operand::of(v_cache),
        block_table: Operand::of(block_table),
        context_lens: Operand::of(context_lens),
        o: Operand::of(o),
        lse: lse.map(Operand::of),
    }))
}

/// Checks an append of k_new and v_new [batch, n_new, heads_kv, head_dim] into the caches;
/// `None` when there is nothing to write.
pub fn append(
    device: usize,
    k_new: &TensorInfo,
    v_new: &TensorInfo,
    k_cache: &TensorInfo,
    v_cache: &TensorInfo,
    block_table: &TensorInfo,
    context_lens: &TensorInfo,
) -> Result<Option<AppendPlan>> {
    let takes = "kiln's append takes 4-D `k` and `v` ordered [batch, n_new, heads_kv, head_dim]";
    for (name, t) in [("k", k_new), ("v", v_new)] {
        on_device(name, t, device)?;
        rank(name, t, 4, takes)?;
    }
    let [batch, n_new, hk, dk] = [0, 1, 2, 3].map(|i| k_new.shape()[i]);
    let [pages, page_size, hkv, d, max_pages] =
        cache_and_tables(device, k_cache, v_cache, block_table, context_lens, batch)?;
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
                "`k` is {} and `v` {}; the cache's pages take [batch, n_new, {hkv}, {d}] for both",
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
    let shape = DecodeShape {
        batch,
        heads_q: hkv,
        heads_kv: hkv,
        head_dim: d,
        seqlen_q: 1,
        num_pages: pages,
        page_size,
        max_pages,
        causal: false,
        scale: 1.0,
        dtype: float("k_cache", k_cache)?,
    };
    shape.validate()?;
    Ok(Some(AppendPlan {
        shape,
        n_new,
        k_new: Operand::of(k_new),
        v_new: Operand::of(v_new),
        k_cache: Operand::of(k_cache),
        v_cache: Operand::of(v_cache),
        block_table: Operand::of(block_table),
        context_lens: Operand::of(context_lens),
    }))
}
