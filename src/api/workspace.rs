//! Device workspaces that belong to a handle: grow-only buffers sized by the problems it runs,
//! grown without synchronising (a replaced buffer is kept until the handle drops, since
//! launches in flight may still use it) and never grown while a stream captures a CUDA graph.

use crate::device::{Context, DeviceBuffer};
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
    /// The MoE layer's intermediates when the caller gives none (`LayerLayout`).
    pub moe_layer: Workspace,
}

impl Default for Workspaces {
    fn default() -> Self {
        Workspaces {
            lse: Workspace::new("attention LSE workspace", false),
            moe_sched: Workspace::new("MoE schedule workspace", false),
            moe_layer: Workspace::new("MoE layer workspace", false),
        }
    }
}
