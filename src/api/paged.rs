//! Decode over a paged KV cache on cudarc buffers: [`Kiln::attention_paged`] (flash-attention's
//! `with_kvcache`) and [`Kiln::kv_append`], enqueued on the caller's stream.

use cudarc::driver::{sys, CudaStream};

use super::handle::Kiln;
use super::tensor::{TensorMut, TensorRef};
use super::validate::{self, AppendPlan, Operand, PagedPlan};
use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::ops::attention::decode_paged::{self, DecodeOperands, DecodeShape};
use crate::ops::attention::kv_append::{self, AppendOperands};
use crate::ops::attention::PagedProblem;

/// How a decode step runs.
#[derive(Debug, Clone, PartialEq)]
pub struct PagedOptions {
    /// Query token i of seqlen_q sees cached tokens j < context - seqlen_q + i + 1 (the queries
    /// are the context's last tokens: aligned bottom-right).
    pub causal: bool,
    /// `None`: 1 / sqrt(head_dim).
    pub softmax_scale: Option<f32>,
    /// Read the block table and the context lengths back (the stream is synchronised) and
    /// refuse a page id outside the cache or a length the table cannot hold, each with one
    /// error. `false` (CUDA graphs, serving loops) skips it: the kernels then write NaN for a
    /// sequence whose entries are bad and read nothing outside the cache, never a wrong value.
    pub check_tables: bool,
}

impl Default for PagedOptions {
    fn default() -> Self {
        PagedOptions {
            causal: false,
            softmax_scale: None,
            check_tables: true,
        }
    }
}

/// A buffer over an operand's memory.
///
/// # Safety
/// The operand must describe memory of the current context that outlives the launch.
unsafe fn borrow(op: Operand) -> DeviceBuffer {
    DeviceBuffer::borrowed(op.ptr, op.bytes)
}

/// The tables read back from the GPU and checked as the float64 reference's problem is, with
/// `n_new` appended tokens needing room at the end of every context.
fn check_tables(
    ctx: &Context,
    s: &DecodeShape,
    table: Operand,
    lens: Operand,
    n_new: usize,
) -> Result<()> {
    if ctx.capturing() {
        return Err(Error::Capture(
            "checking the block table reads it back, which a CUDA graph cannot capture; set `check_tables` to false for captured steps".into(),
        ));
    }
    ctx.synchronize()?;
    // SAFETY: checked views of the caller's memory, alive for this call; the reads are
    // synchronous and follow the stream's work.
    let (t, l) = unsafe { (borrow(table), borrow(lens)) };
    let p = PagedProblem {
        batch: s.batch,
        heads_q: s.heads_q,
        heads_kv: s.heads_kv,
        head_dim: s.head_dim,
        seqlen_q: s.seqlen_q,
        num_pages: s.num_pages,
        page_size: s.page_size,
        max_pages: s.max_pages,
        block_table: t.download::<i32>(s.table_elems())?,
        context_lens: l.download::<i32>(s.batch)?,
        causal: s.causal,
        scale: s.scale,
        dtype: s.dtype,
    };
    p.validate()?;
    if let Some((b, &c)) = p
        .context_lens
        .iter()
        .enumerate()
        .find(|(_, &c)| (c as usize) < n_new)
    {
        return Err(Error::invalid(format!(
            "{n_new} new tokens do not fit context_lens[{b}] = {c}; the context counts the new tokens"
        )));
    }
    Ok(())
}

impl Kiln {
    /// One decode step over a paged cache, flash-attention's `with_kvcache` without the
    /// append: q [batch, seqlen_q (1 to 16), heads, head_dim], caches [num_pages, page_size (16,
    /// 64 or 256), heads_kv, head_dim], `block_table` i32 [batch, max_pages], `context_lens` i32
    /// [batch] (the tokens each sequence's queries attend to, theirs included), o like q, lse f32
    /// [batch, heads, seqlen_q] if wanted. Heads a multiple of heads_kv; head dims 64, 128, 256.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_paged(
        &self,
        stream: &CudaStream,
        q: &TensorRef,
        k_cache: &TensorRef,
        v_cache: &TensorRef,
        block_table: &TensorRef,
        context_lens: &TensorRef,
        o: &mut TensorMut,
        mut lse: Option<&mut TensorMut>,
        opts: &PagedOptions,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let lse_info = lse.as_ref().map(|l| l.info);
        let Some(plan) = validate::paged(
            self.ordinal(),
            &q.info,
            &k_cache.info,
            &v_cache.info,
            &block_table.info,
            &context_lens.info,
            &o.info,
            lse_info.as_ref(),
            opts.causal,
            opts.softmax_scale,
        )?
        else {
            return Ok(());
        };
        let _order = (
            q.track(stream),
            k_cache.track(stream),
            v_cache.track(stream),
            block_table.track(stream),
            context_lens.track(stream),
            o.track(stream),
            lse.as_mut().and_then(|l| l.track(stream)),
        );
        self.launch_paged(Some(stream.cu_stream()), &plan, opts.check_tables)
    }

    pub(crate) fn launch_paged(
        &self,
        stream: Option<sys::CUstream>,
        plan: &PagedPlan,
        check: bool,
    ) -> Result<()> {
        let key = format!("paged {:?} lse {}", plan.shape, plan.lse.is_some());
        self.run(stream, &key, "this decode step", |ctx, ws, capturing| {
            if check {
                check_tables(ctx, &plan.shape, plan.block_table, plan.context_lens, 0)?;
            }
            launch_paged(ctx, ws, capturing, plan)
        })
    }

    pub(crate) fn launch_append(
        &self,
        stream: Option<sys::CUstream>,
        plan: &AppendPlan,
        check: bool,
    ) -> Result<()> {
        let key = format!("append {:?} {}", plan.shape, plan.n_new);
        self.run(stream, &key, "this append", |ctx, _, _| {
            if check {
                check_tables(
                    ctx,
                    &plan.shape,
                    plan.block_table,
                    plan.context_lens,
                    plan.n_new,
                )?;
            }
            launch_append(ctx, plan)
        })
    }

    /// Writes k and v [batch, n_new, heads_kv, head_dim] into their pages as the last n_new
    /// tokens of each context (`context_lens` count them), as `with_kvcache`'s `k` and `v`.
    #[allow(clippy::too_many_arguments)]
    pub fn kv_append(
        &self,
        stream: &CudaStream,
        k: &TensorRef,
        v: &TensorRef,
        k_cache: &mut TensorMut,
        v_cache: &mut TensorMut,
        block_table: &TensorRef,
        context_lens: &TensorRef,
        check_tables: bool,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let Some(plan) = validate::append(
            self.ordinal(),
            &k.info,
            &v.info,
            &k_cache.info,
            &v_cache.info,
            &block_table.info,
            &context_lens.info,
        )?
        else {
            return Ok(());
        };
        let _order = (
            k.track(stream),
            v.track(stream),
            k_cache.track(stream),
            v_cache.track(stream),
            block_table.track(stream),
            context_lens.track(stream),
        );
        self.launch_append(Some(stream.cu_stream()), &plan, check_tables)
    }
}

fn launch_paged(
    ctx: &Context,
    ws: &mut super::workspace::Workspaces,
    capturing: bool,
    plan: &PagedPlan,
) -> Result<()> {
    let s = &plan.shape;
    let lse = match plan.lse {
        Some(l) => l,
        None => {
            let bytes = s.lse_elems() * 4;
            Operand {
                ptr: ws.lse.at_least(ctx, bytes, capturing)?,
                bytes,
            }
        }
    };
    // SAFETY: the plan's operands are checked views of the caller's memory, which the caller
    // keeps alive until the stream has run the launch; the LSE workspace lives with the handle.
    let (q, k, v, o, l, t, n) = unsafe {
        (
            borrow(plan.q),
            borrow(plan.k_cache),
            borrow(plan.v_cache),
            borrow(plan.o),
            borrow(lse),
            borrow(plan.block_table),
            borrow(plan.context_lens),
        )
    };
    let ops = DecodeOperands {
        q: &q,
        k_cache: &k,
        v_cache: &v,
        o: &o,
        lse: &l,
        block_table: &t,
        context_lens: &n,
    };
    decode_paged::check_operands(s, &ops)?;
    decode_paged::launch(ctx, s, &ops).map(|_| ())
}

fn launch_append(ctx: &Context, plan: &AppendPlan) -> Result<()> {
    // SAFETY: as in `launch_paged`.
    let (kn, vn, k, v, t, n) = unsafe {
        (
            borrow(plan.k_new),
            borrow(plan.v_new),
            borrow(plan.k_cache),
            borrow(plan.v_cache),
            borrow(plan.block_table),
            borrow(plan.context_lens),
        )
    };
    let ops = AppendOperands {
        k_new: &kn,
        v_new: &vn,
        k_cache: &k,
        v_cache: &v,
        block_table: &t,
        context_lens: &n,
    };
    kv_append::launch(ctx, &plan.shape, plan.n_new, &ops)
}
