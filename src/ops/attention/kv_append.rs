//! Host side of `kernels/attention/kv_append.cu`: writes new K and V tokens into their pages, or
//! a dense cache's positions (flash-attention's `k` and `v` of `with_kvcache`), the last `n_new`
//! of each context.

use crate::device::{Context, DeviceBuffer, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::attention::decode_paged::{DecodeArgs, DecodeShape};
use crate::ops::gemm::alignment;

pub fn spec(arch: &str) -> KernelSpec {
    KernelSpec::new("attention/kv_append.cu", "kv_append", arch)
}

/// The buffers of one append: new K and V [batch, n_new, heads_kv, D] (packed) into the caches.
pub struct AppendOperands<'a> {
    pub k_new: &'a DeviceBuffer,
    pub v_new: &'a DeviceBuffer,
    pub k_cache: &'a DeviceBuffer,
    pub v_cache: &'a DeviceBuffer,
    /// `None`: a dense cache (the shape's `paged` is false).
    pub block_table: Option<&'a DeviceBuffer>,
    pub context_lens: &'a DeviceBuffer,
    /// Where the kernel records bad input (two host-mapped words); 0: nowhere.
    pub errors: u64,
}

/// Checks `n_new` and that the buffers hold the tensors.
pub fn check(s: &DecodeShape, n_new: usize, ops: &AppendOperands) -> Result<()> {
    if n_new == 0 || n_new > s.max_context() {
        return Err(Error::invalid(format!(
            "{n_new} new tokens per sequence; append takes 1 to the {} tokens a sequence's cache holds",
            s.max_context()
        )));
    }
    if ops.block_table.is_some() != s.paged {
        return Err(Error::invalid(
            "a block table goes with a paged cache, none with a dense one",
        ));
    }
    let e = s.dtype.size();
    let new = s.batch * n_new * s.heads_kv * s.head_dim * e;
    let [_, _, k, v] = s.spans();
    let table = ops.block_table.map_or((0, 0), |b| (b.bytes(), b.ptr()));
    let table_need = if s.paged { s.table_elems() * 4 } else { 0 };
    for (name, need, (have, ptr), align) in [
        ("new K", new, (ops.k_new.bytes(), ops.k_new.ptr()), 16),
        ("new V", new, (ops.v_new.bytes(), ops.v_new.ptr()), 16),
        (
            "K cache",
            k * e,
            (ops.k_cache.bytes(), ops.k_cache.ptr()),
            16,
        ),
        (
            "V cache",
            v * e,
            (ops.v_cache.bytes(), ops.v_cache.ptr()),
            16,
        ),
        ("block table", table_need, table, 4),
        (
            "context lengths",
            s.batch * 4,
            (ops.context_lens.bytes(), ops.context_lens.ptr()),
            4,
        ),
    ] {
        if have < need {
            return Err(Error::invalid(format!(
                "{name} needs {need} bytes for this shape but its buffer has {have}"
            )));
        }
        if alignment(ptr) < align {
            return Err(Error::invalid(format!(
                "{name} starts at {ptr:#x}, which is not {align}-byte aligned"
            )));
        }
    }
    Ok(())
}

/// Tags the memo entry of an append's launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct AppendLaunch;

/// Enqueues the append; `context_lens` count the new tokens (they are each context's last).
/// The kernel and the grid are worked out once per shape (the context's memo).
pub fn launch(ctx: &Context, s: &DecodeShape, n_new: usize, ops: &AppendOperands) -> Result<()> {
    check(s, n_new, ops)?;
    let (f, cfg) = ctx.memo.get_or_try(&(s.key(), n_new, AppendLaunch), || {
        let chunks = (s.batch * n_new * s.heads_kv * s.head_dim / 8) as u64;
        let blocks = chunks
            .div_ceil(256)
            .min(ctx.info.sm_count as u64 * 8)
            .max(1) as u32;
        Ok((
            ctx.function(&spec(&ctx.arch()))?,
            LaunchConfig::simple((blocks, 1, 1), 256),
        ))
    })?;
    let mut args = DecodeArgs {
        k_cache: ops.k_cache.ptr(),
        v_cache: ops.v_cache.ptr(),
        block_table: ops.block_table.map_or(0, |b| b.ptr()),
        context_lens: ops.context_lens.ptr(),
        k_new: ops.k_new.ptr(),
        v_new: ops.v_new.ptr(),
        n_new: n_new as i32,
        errors: ops.errors,
        ..DecodeArgs::new(s)
    };
    // SAFETY: one parameter, a DecodeArgs whose buffers `check` measured against `s` and
    // `n_new`; page ids and context lengths are checked on the GPU before they address a page.
    unsafe { f.launch(ctx.stream, &cfg, &mut [args.as_param()]) }
}
