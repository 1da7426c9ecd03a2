//! Decode over a KV cache on cudarc buffers: [`Kiln::attention_paged`] (flash-attention's
//! `with_kvcache` over pages), [`Kiln::attention_kvcache`] (over a dense cache, one per sequence,
//! as transformers keeps it) and [`Kiln::kv_append`], enqueued on the caller's stream. Bad tables
//! are found on the GPU (nothing outside the cache is read; the sequence comes out NaN) and
//! reported by the next decode call outside capture or by [`Kiln::check_errors`].

use cudarc::driver::{sys, CudaStream};

use super::handle::Kiln;
use super::tensor::{TensorMut, TensorRef};
use super::validate::{self, AppendPlan, Operand, PagedPlan};
use super::workspace::{pending_errors, Workspaces};
use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::ops::attention::decode_paged::{self, DecodeOperands, DecodeShape};
use crate::ops::attention::kv_append::{self, AppendOperands};
use crate::ops::attention::PagedProblem;

/// How a decode step runs.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PagedOptions {
    /// Query token i of seqlen_q sees cached tokens j < context - seqlen_q + i + 1 (the queries
    /// are the context's last tokens: aligned bottom-right).
    pub causal: bool,
    /// `None`: 1 / sqrt(head_dim).
    pub softmax_scale: Option<f32>,
    /// Also read the block table and the context lengths back before the launch (the stream is
    /// synchronised; refused during CUDA-graph capture) and refuse a bad entry at once. `false`
    /// (the default, capturable): the kernels check every entry on the GPU, read nothing
    /// outside the cache, write NaN for a sequence whose entries are bad, and record it; the
    /// handle reports it at its next decode call outside capture, or at [`Kiln::check_errors`].
    pub check_tables: bool,
}

/// A buffer over an operand's memory.
///
/// # Safety
/// The operand must describe memory of the current context that outlives the launch.
unsafe fn borrow(op: Operand) -> DeviceBuffer {
    DeviceBuffer::borrowed(op.ptr, op.bytes)
}

/// The tables read back from the GPU and checked as the float64 reference's problem is, with
/// `n_new` appended tokens needing room at the end of every context. A dense cache has no table;
/// without lengths there is nothing to read.
fn check_tables(
    ctx: &Context,
    s: &DecodeShape,
    (table, lens, starts): (Option<Operand>, Option<Operand>, Option<Operand>),
    n_new: usize,
) -> Result<()> {
    let Some(lens) = lens else {
        return Ok(());
    };
    if ctx.capturing() {
        return Err(Error::Capture(
            "checking the block table on the host reads it back, which a CUDA graph cannot capture; leave `check_tables` off (the GPU checks every entry) for captured steps".into(),
        ));
    }
    ctx.synchronize()?;
    // SAFETY: checked views of the caller's memory, alive for this call; the reads are
    // synchronous and follow the stream's work.
    let context_lens = unsafe { borrow(lens) }.download::<i32>(s.batch)?;
    let block_table = match table {
        // SAFETY: as above.
        Some(t) => unsafe { borrow(t) }.download::<i32>(s.table_elems())?,
        None => Vec::new(),
    };
    let context_starts = match starts {
        // SAFETY: as above.
        Some(t) => unsafe { borrow(t) }.download::<i32>(s.batch)?,
        None => Vec::new(),
    };
    let bad_start = context_starts
        .iter()
        .zip(&context_lens)
        .enumerate()
        .find(|(_, (&st, &c))| st < 0 || st > c);
    if let Some((b, (st, c))) = bad_start {
        return Err(Error::invalid(format!(
            "cache_leftpad[{b}] = {st} is outside 0..={c} (its cache_seqlens entry); a sequence's keys start within it"
        )));
    }
    if !s.paged {
        let room = s.max_context();
        if let Some((b, &c)) = context_lens
            .iter()
            .enumerate()
            .find(|(_, &c)| c < 0 || c as usize > room)
        {
            return Err(Error::invalid(format!(
                "context_lens[{b}] = {c} does not fit the cache's {room} tokens per sequence; give a longer cache or a shorter context"
            )));
        }
    } else {
        PagedProblem {
            batch: s.batch,
            heads_q: s.heads_q,
            heads_kv: s.heads_kv,
            head_dim: s.head_dim,
            seqlen_q: s.seqlen_q,
            num_pages: s.num_pages,
            page_size: s.page_size,
            max_pages: s.max_pages,
            block_table,
            context_lens: context_lens.clone(),
            context_starts,
            causal: s.causal,
            scale: s.scale,
            dtype: s.dtype,
        }
        .validate()?;
    }
    if let Some((b, &c)) = context_lens
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
        lse: Option<&mut TensorMut>,
        opts: &PagedOptions,
    ) -> Result<()> {
        let tables = (Some(block_table), Some(context_lens), None);
        self.decode_step(stream, q, (k_cache, v_cache), tables, o, lse, opts)
    }

    /// One decode step over dense caches, one per sequence, as transformers keeps them:
    /// k_cache and v_cache [batch, seqlen, heads_kv, head_dim] with any strides whose rows are
    /// 16-byte aligned (a transposed view of a [batch, heads_kv, seqlen, head_dim] cache is read
    /// in place), `context_lens` i32 [batch] (the tokens each sequence attends to, its queries'
    /// included) or `None` (all `seqlen`); `context_starts` i32 [batch] (needs the lengths):
    /// each sequence's first key, the tokens before it left padding (flash-attention's
    /// `cache_leftpad`); q [batch, seqlen_q (1 to 16), heads, head_dim] and o like q, any such
    /// strides; lse f32 [batch, heads, seqlen_q] if wanted.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_kvcache(
        &self,
        stream: &CudaStream,
        q: &TensorRef,
        k_cache: &TensorRef,
        v_cache: &TensorRef,
        context_lens: Option<&TensorRef>,
        context_starts: Option<&TensorRef>,
        o: &mut TensorMut,
        lse: Option<&mut TensorMut>,
        opts: &PagedOptions,
    ) -> Result<()> {
        let tables = (None, context_lens, context_starts);
        self.decode_step(stream, q, (k_cache, v_cache), tables, o, lse, opts)
    }

    /// Either form: a paged cache with (block table, lengths, None), a dense one with (None,
    /// lengths or None, starts or None).
    #[allow(clippy::too_many_arguments)]
    fn decode_step(
        &self,
        stream: &CudaStream,
        q: &TensorRef,
        (k_cache, v_cache): (&TensorRef, &TensorRef),
        (table, lens, starts): (Option<&TensorRef>, Option<&TensorRef>, Option<&TensorRef>),
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
            table.map(|t| &t.info),
            lens.map(|l| &l.info),
            starts.map(|l| &l.info),
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
            table.map(|t| t.track(stream)),
            lens.map(|l| l.track(stream)),
            starts.map(|l| l.track(stream)),
            o.track(stream),
            lse.as_mut().and_then(|l| l.track(stream)),
        );
        self.launch_paged(Some(stream.cu_stream()), &plan, opts.check_tables)
    }

    /// Waits for the GPU, then reports bad tables that decode steps or appends on this handle
    /// were given since the last report (found on the GPU: see [`PagedOptions::check_tables`]).
    /// Not during CUDA-graph capture (it synchronises).
    pub fn check_errors(&self) -> Result<()> {
        self.cuda()
            .synchronize()
            .map_err(|e| Error::cuda("synchronising the GPU", format!("{e:?}")))?;
        self.run(None, "check_errors", "checking errors", |_, ws, _| {
            pending_errors(ws, self.ordinal())
        })
    }

    pub(crate) fn launch_paged(
        &self,
        stream: Option<sys::CUstream>,
        plan: &PagedPlan,
        check: bool,
    ) -> Result<()> {
        let key = ("decode", plan.shape.key(), plan.lse.is_some());
        let what = || "this decode step".to_string();
        let poll = |ws: &Workspaces| pending_errors(ws, self.ordinal());
        if check {
            // (reading the tables back synchronises: never part of a graph)
            return self.run_keyed(stream, key, what, |ctx, ws, capturing| {
                if !capturing {
                    poll(ws)?;
                }
                let tables = (plan.block_table, plan.context_lens, plan.context_starts);
                check_tables(ctx, &plan.shape, tables, 0)?;
                launch_paged(ctx, ws, capturing, plan)
            });
        }
        // (a split decode is 2 launches: warm and at the same addresses, one graph)
        self.run_graphed_polled(
            stream,
            key,
            plan.addresses(),
            what,
            poll,
            |ctx, ws, capturing| launch_paged(ctx, ws, capturing, plan),
        )
    }

    pub(crate) fn launch_append(
        &self,
        stream: Option<sys::CUstream>,
        plan: &AppendPlan,
        check: bool,
    ) -> Result<()> {
        let key = ("append", plan.shape.key(), plan.n_new);
        let what = || "this append".to_string();
        self.run_keyed(stream, key, what, |ctx, ws, capturing| {
            if !capturing {
                pending_errors(ws, self.ordinal())?;
            }
            if check {
                let tables = (plan.block_table, Some(plan.context_lens), None);
                check_tables(ctx, &plan.shape, tables, plan.n_new)?;
            }
            let errors = ws.bad_input(capturing)?;
            launch_append(ctx, plan, errors)
        })
    }

    /// Writes k and v [batch, n_new, heads_kv, head_dim] into their pages (with a block table)
    /// or their dense caches' positions (without) as the last n_new tokens of each context
    /// (`context_lens` count them), as `with_kvcache`'s `k` and `v`.
    #[allow(clippy::too_many_arguments)]
    pub fn kv_append(
        &self,
        stream: &CudaStream,
        k: &TensorRef,
        v: &TensorRef,
        k_cache: &mut TensorMut,
        v_cache: &mut TensorMut,
        block_table: Option<&TensorRef>,
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
            block_table.map(|b| &b.info),
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
            block_table.map(|b| b.track(stream)),
            context_lens.track(stream),
        );
        self.launch_append(Some(stream.cu_stream()), &plan, check_tables)
    }
}

fn launch_paged(
    ctx: &Context,
    ws: &mut Workspaces,
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
    let errors = ws.bad_input(capturing)?;
    // SAFETY: the plan's operands are checked views of the caller's memory, which the caller
    // keeps alive until the stream has run the launch; the LSE workspace lives with the handle.
    let (q, k, v, o, l) = unsafe {
        (
            borrow(plan.q),
            borrow(plan.k_cache),
            borrow(plan.v_cache),
            borrow(plan.o),
            borrow(lse),
        )
    };
    // SAFETY: as above.
    let (t, n, st) = unsafe {
        (
            plan.block_table.map(|x| borrow(x)),
            plan.context_lens.map(|x| borrow(x)),
            plan.context_starts.map(|x| borrow(x)),
        )
    };
    let ops = DecodeOperands {
        q: &q,
        k_cache: &k,
        v_cache: &v,
        o: &o,
        lse: &l,
        block_table: t.as_ref(),
        context_lens: n.as_ref(),
        context_starts: st.as_ref(),
        errors,
    };
    decode_paged::check_operands(s, &ops)?;
    decode_paged::launch(ctx, s, &ops).map(|_| ())
}

fn launch_append(ctx: &Context, plan: &AppendPlan, errors: u64) -> Result<()> {
    // SAFETY: as in `launch_paged`.
    let (kn, vn, k, v, n) = unsafe {
        (
            borrow(plan.k_new),
            borrow(plan.v_new),
            borrow(plan.k_cache),
            borrow(plan.v_cache),
            borrow(plan.context_lens),
        )
    };
    // SAFETY: as above.
    let t = plan.block_table.map(|x| unsafe { borrow(x) });
    let ops = AppendOperands {
        k_new: &kn,
        v_new: &vn,
        k_cache: &k,
        v_cache: &v,
        block_table: t.as_ref(),
        context_lens: &n,
        errors,
    };
    kv_append::launch(ctx, &plan.shape, plan.n_new, &ops)
}
