//! Host side of `kernels/attention/kv_append.cu`: writes new K and V tokens into their pages
//! (flash-attention's `k` and `v` of `with_kvcache`), the last `n_new` of each context.

use crate::device::{Context, DeviceBuffer, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::attention::decode_paged::{DecodeArgs, DecodeShape};
use crate::ops::gemm::alignment;

pub fn spec(arch: &str) -> KernelSpec {
    KernelSpec::new("attention/kv_append.cu", "kv_append", arch)
}

/// The buffers of one append: new K and V [batch, n_new, heads_kv, D] into the caches.
pub struct AppendOperands<'a> {
    pub k_new: &'a DeviceBuffer,
    pub v_new: &'a DeviceBuffer,
    pub k_cache: &'a DeviceBuffer,
    pub v_cache: &'a DeviceBuffer,
    pub block_table: &'a DeviceBuffer,
    pub context_lens: &'a DeviceBuffer,
}

/// Checks `n_new` and that the buffers hold the tensors.
pub fn check(s: &DecodeShape, n_new: usize, ops: &AppendOperands) -> Result<()> {
    if n_new == 0 || n_new > s.max_pages * s.page_size {
        return Err(Error::invalid(format!(
            "{n_new} new tokens per sequence; append takes 1 to the {} tokens a sequence's pages hold",
            s.max_pages * s.page_size
        )));
    }
    let e = s.dtype.size();
    let new = s.batch * n_new * s.heads_kv * s.head_dim * e;
    for (name, need, buf) in [
        ("new K", new, ops.k_new),
        ("new V", new, ops.v_new),
        ("K cache", s.cache_elems() * e, ops.k_cache),
        ("V cache", s.cache_elems() * e, ops.v_cache),
        ("block table", s.table_elems() * 4, ops.block_table),
        ("context lengths", s.batch * 4, ops.context_lens),
    ] {
        if buf.bytes() < need {
            return Err(Error::invalid(format!(
                "{name} needs {need} bytes for this shape but its buffer has {}",
                buf.bytes()
            )));
        }
        if alignment(buf.ptr()) < 16 && !name.starts_with('b') && !name.starts_with('c') {
            return Err(Error::invalid(format!(
                "{name} starts at {:#x}, which is not 16-byte aligned",
                buf.ptr()
            )));
        }
    }
    Ok(())
}

/// Enqueues the append; `context_lens` count the new tokens (they are each context's last).
pub fn launch(ctx: &Context, s: &DecodeShape, n_new: usize, ops: &AppendOperands) -> Result<()> {
    check(s, n_new, ops)?;
    let f = ctx.function(&spec(&ctx.arch()))?;
    let mut args = DecodeArgs {
        k_cache: ops.k_cache.ptr(),
        v_cache: ops.v_cache.ptr(),
        block_table: ops.block_table.ptr(),
        context_lens: ops.context_lens.ptr(),
        k_new: ops.k_new.ptr(),
        v_new: ops.v_new.ptr(),
        n_new: n_new as i32,
        ..DecodeArgs::new(s)
    };
    let chunks = (s.batch * n_new * s.heads_kv * s.head_dim / 8) as u64;
    let blocks = chunks
        .div_ceil(256)
        .min(ctx.info.sm_count as u64 * 8)
        .max(1) as u32;
    let cfg = LaunchConfig::simple((blocks, 1, 1), 256);
    // SAFETY: one parameter, a DecodeArgs whose buffers `check` measured against `s` and
    // `n_new`; page ids and context lengths are checked on the GPU before they address a page.
    unsafe { f.launch(ctx.stream, &cfg, &mut [args.as_param()]) }
}
