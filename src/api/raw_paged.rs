//! Decode over a KV cache for foreign callers: [`attention_paged`] (a paged cache with a block
//! table, or a dense one per sequence without) and [`kv_append`] on raw tensors and streams,
//! their checks without a handle, and [`check_errors`] (re-exported by [`super::raw`]).

use cudarc::driver::sys::CUstream;

use super::handle::Kiln;
use super::paged::PagedOptions;
use super::tensor::RawTensor;
use super::validate::{self, AppendPlan, PagedPlan};
use crate::error::Result;

/// A decode step's tables: the block table (`None`: a dense cache), the context lengths
/// (`cache_seqlens`; `None`: a dense cache's every token) and each sequence's first key
/// (`cache_leftpad`; `None`: 0).
pub type DecodeTables<'a> = (
    Option<&'a RawTensor>,
    Option<&'a RawTensor>,
    Option<&'a RawTensor>,
);

#[allow(clippy::too_many_arguments)]
fn paged_plan(
    device: usize,
    q: &RawTensor,
    k_cache: &RawTensor,
    v_cache: &RawTensor,
    (block_table, context_lens, context_starts): DecodeTables,
    o: &RawTensor,
    lse: Option<&RawTensor>,
    opts: &PagedOptions,
) -> Result<Option<PagedPlan>> {
    let lse = lse.map(|l| l.info("lse", false)).transpose()?;
    let table = block_table
        .map(|t| t.info("block_table", false))
        .transpose()?;
    let lens = context_lens
        .map(|t| t.info("cache_seqlens", false))
        .transpose()?;
    let starts = context_starts
        .map(|t| t.info("cache_leftpad", false))
        .transpose()?;
    validate::paged(
        device,
        &q.info("q", false)?,
        &k_cache.info("k_cache", false)?,
        &v_cache.info("v_cache", false)?,
        table.as_ref(),
        lens.as_ref(),
        starts.as_ref(),
        &o.info("out", false)?,
        lse.as_ref(),
        opts.causal,
        opts.softmax_scale,
    )
}

fn append_plan(
    device: usize,
    k: &RawTensor,
    v: &RawTensor,
    k_cache: &RawTensor,
    v_cache: &RawTensor,
    block_table: Option<&RawTensor>,
    context_lens: &RawTensor,
) -> Result<Option<AppendPlan>> {
    let table = block_table
        .map(|t| t.info("block_table", false))
        .transpose()?;
    validate::append(
        device,
        &k.info("k", false)?,
        &v.info("v", false)?,
        &k_cache.info("k_cache", false)?,
        &v_cache.info("v_cache", false)?,
        table.as_ref(),
        &context_lens.info("cache_seqlens", false)?,
    )
}

/// The checks of [`attention_paged`], without a handle.
#[allow(clippy::too_many_arguments)]
pub fn check_attention_paged(
    device: usize,
    q: &RawTensor,
    k_cache: &RawTensor,
    v_cache: &RawTensor,
    tables: DecodeTables,
    o: &RawTensor,
    lse: Option<&RawTensor>,
    opts: &PagedOptions,
) -> Result<()> {
    paged_plan(device, q, k_cache, v_cache, tables, o, lse, opts).map(drop)
}

/// The checks of [`kv_append`], without a handle.
pub fn check_kv_append(
    device: usize,
    k: &RawTensor,
    v: &RawTensor,
    k_cache: &RawTensor,
    v_cache: &RawTensor,
    block_table: Option<&RawTensor>,
    context_lens: &RawTensor,
) -> Result<()> {
    append_plan(device, k, v, k_cache, v_cache, block_table, context_lens).map(drop)
}

/// [`Kiln::attention_paged`] on raw tensors and a raw stream.
///
/// # Safety
/// `stream` must be a live stream of the handle's context. Every tensor must describe device
/// memory of that context holding its dtype, alive and (for `o` and `lse`) not used by anyone
/// else until the stream has run the launch; the caller orders the stream after the inputs'
/// producers.
#[allow(clippy::too_many_arguments)]
pub unsafe fn attention_paged(
    kiln: &Kiln,
    stream: CUstream,
    q: &RawTensor,
    k_cache: &RawTensor,
    v_cache: &RawTensor,
    tables: DecodeTables,
    o: &RawTensor,
    lse: Option<&RawTensor>,
    opts: &PagedOptions,
) -> Result<()> {
    kiln.on_raw_stream(
        stream,
        |device| paged_plan(device, q, k_cache, v_cache, tables, o, lse, opts),
        |plan| kiln.launch_paged(Some(stream), plan, opts.check_tables),
    )
}

/// [`Kiln::kv_append`] on raw tensors and a raw stream.
///
/// # Safety
/// As [`attention_paged`] (the caches are the outputs).
#[allow(clippy::too_many_arguments)]
pub unsafe fn kv_append(
    kiln: &Kiln,
    stream: CUstream,
    k: &RawTensor,
    v: &RawTensor,
    k_cache: &RawTensor,
    v_cache: &RawTensor,
    block_table: Option<&RawTensor>,
    context_lens: &RawTensor,
    check_tables: bool,
) -> Result<()> {
    kiln.on_raw_stream(
        stream,
        |device| append_plan(device, k, v, k_cache, v_cache, block_table, context_lens),
        |plan| kiln.launch_append(Some(stream), plan, check_tables),
    )
}

/// [`Kiln::check_errors`]: waits for the GPU, then reports bad tables the decode kernels found.
pub fn check_errors(kiln: &Kiln) -> Result<()> {
    kiln.check_errors()
}
