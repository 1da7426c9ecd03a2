//! Device workspaces that belong to a handle: grow-only buffers sized by the problems it runs,
//! grown without synchronising (a replaced buffer is kept until the handle drops, since
//! launches in flight may still use it) and never grown while a stream captures a CUDA graph.

use crate::device::{Context, DeviceBuffer, HostFlags};
use crate::error::{Error, Result};

/// One grow-only device buffer of a handle.
pub struct Workspace {
    what: &'static str,
    zeroed: bool,
    buf: Option<DeviceBuffer>,
    /// Buffers replaced by a larger one: freed when the handle drops (after its work).
    retired: Vec<DeviceBuffer>,
}

impl Workspace {
    /// `what` names the buffer in errors; with `zeroed`, every allocation is filled with zeros
    /// on the calling stream (for counters the kernels return to 0 themselves).
    pub const fn new(what: &'static str, zeroed: bool) -> Workspace {
        Workspace {
            what,
            zeroed,
            buf: None,
            retired: Vec::new(),
        }
    }

    /// Bytes held now.
    pub fn bytes(&self) -> usize {
        self.buf.as_ref().map_or(0, DeviceBuffer::bytes)
    }

    /// The device address of at least `bytes`, allocating (on `ctx`'s current context, zeroed
    /// on its stream) when the buffer is smaller; while `capturing`, growing is refused.
    pub fn at_least(&mut self, ctx: &Context, bytes: usize, capturing: bool) -> Result<u64> {
        if let Some(b) = &self.buf {
            if b.bytes() >= bytes {
                return Ok(b.ptr());
            }
        }
        if capturing {
            return Err(Error::Capture(format!(
                "the {} would grow to {bytes} bytes during CUDA-graph capture; call `Kiln::precompile` with this problem (or run it once) before capturing",
                self.what
            )));
        }
        let b = ctx.alloc(bytes.max(self.bytes()))?;
        if self.zeroed {
            b.fill_bytes(0, ctx)?;
        }
        let ptr = b.ptr();
        if let Some(old) = self.buf.replace(b) {
            self.retired.push(old);
        }
        Ok(ptr)
    }
}

/// The workspaces the API's own launch code owns. The ops' scratch buffers (split-K, repacks,
/// attention counters) are the handle's context's ([`crate::device::Workspaces`], refused
/// growth during capture likewise).
pub struct Workspaces {
    /// The f32 LSE the attention kernels write when the caller passes none.
    pub lse: Workspace,
    /// The tables `moe_tile_prefix` builds for the grouped MoE kernels (`schedule::sched_bytes`).
    pub moe_sched: Workspace,
    /// Where kernels record bad input they found on the GPU ([`INPUT_ERRORS`], host-mapped
    /// words), made by the first call that needs it outside capture.
    pub bad_input: Option<HostFlags>,
    /// The MoE layer's intermediates when the caller gives none (`LayerLayout`).
    pub moe_layer: Workspace,
}

/// What each word of [`Workspaces::bad_input`] means, as the sentence an error gives: the decode
/// kernels' (a context length out of range, a page id outside the cache, a key start outside its
/// sequence), then the packed forward's and backward's (offsets that are not cumulative within
/// the packed rows).
pub const INPUT_ERRORS: [&str; 4] = [
    "a `cache_seqlens` entry outside 0 ..= the tokens its cache holds (or shorter than the tokens appended)",
    "a `block_table` entry outside the cache's pages",
    "a `cache_leftpad` entry (a sequence's first key) outside 0 ..= its `cache_seqlens` entry (from transformers' plug-in: an attention mask that is not left padding followed by the sequence)",
    "`cu_seqlens_q` or `cu_seqlens_k` entries that are not cumulative offsets of the packed rows (starting at 0, never decreasing, ending at the packed length), or a sequence longer than `max_seqlen_q`",
];

/// The packed forward's and backward's word in [`Workspaces::bad_input`].
pub const PACKED_OFFSETS_WORD: usize = 3;

impl Workspaces {
    /// The device address of the bad-input words, made on first use (refused during capture,
    /// which a call that has run before never meets).
    pub fn bad_input(&mut self, capturing: bool) -> Result<u64> {
        if let Some(f) = &self.bad_input {
            return Ok(f.device_ptr());
        }
        if capturing {
            return Err(Error::Capture(
                "kiln's bad-input flags would be allocated during CUDA-graph capture; run the call once (or `Kiln::precompile` it) before capturing".into(),
            ));
        }
        let f = HostFlags::new(INPUT_ERRORS.len())?;
        let ptr = f.device_ptr();
        self.bad_input = Some(f);
        Ok(ptr)
    }
}

/// An error for the words kernels set since the last look, if any (each reported once).
pub fn pending_errors(ws: &Workspaces, ordinal: usize) -> Result<()> {
    let Some(flags) = &ws.bad_input else {
        return Ok(());
    };
    let set: Vec<&str> = flags
        .take()
        .iter()
        .zip(INPUT_ERRORS)
        .filter(|(&w, _)| w != 0)
        .map(|(_, what)| what)
        .collect();
    if set.is_empty() {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "an earlier call on GPU {ordinal} (a decode step, KV append or packed attention) was given {}; the GPU found it, read nothing outside the tensors and wrote NaN for those sequences (a packed backward: left their gradients unwritten) (reported once: fix what was passed)",
        set.join(", and ")
    )))
}

impl Default for Workspaces {
    fn default() -> Self {
        Workspaces {
            lse: Workspace::new("attention LSE workspace", false),
            moe_sched: Workspace::new("MoE schedule workspace", false),
            bad_input: None,
            moe_layer: Workspace::new("MoE layer workspace", false),
        }
    }
}
