//! Replaying a multi-launch op as one CUDA graph: a call seen before with the same problem and the
//! same addresses is captured once (on a private stream) and then launched whole, one driver call.

use std::collections::{HashMap, HashSet};

use cudarc::driver::sys;

use crate::device::Context;
use crate::error::{Error, Result};

/// Graphs kept before the cache starts over (a model's layers at its few shapes stay).
const CAPACITY: usize = 512;
/// Keys remembered as seen once before they are forgotten (a sweep of shapes never captures).
const SEEN_CAPACITY: usize = 8192;

/// What a call with some key does now.
pub(crate) enum Plan {
    /// Launch eagerly (first sight, or its capture failed once).
    Eager,
    /// Capture it, then launch the graph.
    Capture,
    /// Launch the graph kept for it.
    Replay(sys::CUgraphExec),
}

/// The graphs of one handle, by the hash of (problem, addresses, scratch generation).
///
/// On the H200's host a kernel launch costs ~3.5-4.3 us of CPU whatever kiln does around it,
/// and a graph of 4-7 kernels ~1.7-2.5 us (`call_cost`), so an op of several launches (the MoE
/// layer: routing, gate/up, down, combine) costs one graph launch once warm. A key is captured on
/// its second sight, so problems and addresses that never repeat never pay for a capture.
#[derive(Default)]
pub(crate) struct GraphCache {
    seen: HashSet<u64>,
    refused: HashSet<u64>,
    execs: HashMap<u64, sys::CUgraphExec>,
    stream: Option<sys::CUstream>,
}

fn check(r: sys::CUresult, what: &'static str) -> Result<()> {
    match r {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        r => Err(Error::cuda(what, format!("{r:?}"))),
    }
}

impl GraphCache {
    pub(crate) fn plan(&mut self, key: u64) -> Plan {
        if let Some(&exec) = self.execs.get(&key) {
            return Plan::Replay(exec);
        }
        if self.refused.contains(&key) {
            return Plan::Eager;
        }
        if self.seen.len() >= SEEN_CAPACITY {
            self.seen.clear();
        }
        if self.seen.insert(key) {
            Plan::Eager
        } else {
            Plan::Capture
        }
    }

    /// Launches `exec` on `stream`.
    pub(crate) fn launch(exec: sys::CUgraphExec, stream: sys::CUstream) -> Result<()> {
        // SAFETY: `exec` is a live executable graph of the current context and `stream` one of
        // its streams (the caller's, checked by the handle).
        check(
            unsafe { sys::cuGraphLaunch(exec, stream) },
            "launching a cached graph",
        )
    }

    /// Captures what `enqueue` launches on `ctx` with its stream set to the cache's private one,
    /// keeps the instantiated graph under `key` and returns it; `None` (the key then always runs
    /// eagerly) when anything in it refused capture: `enqueue`'s error is not reported, since the
    /// caller runs it eagerly next and reports that.
    pub(crate) fn capture(
        &mut self,
        ctx: &mut Context,
        key: u64,
        enqueue: impl FnOnce(&Context) -> Result<()>,
    ) -> Result<Option<sys::CUgraphExec>> {
        let side = self.stream()?;
        let own = std::mem::replace(&mut ctx.stream, side);
        ctx.set_capturing(true);
        // SAFETY: a private stream of the current context, captured in relaxed mode (the
        // handle's lock keeps other calls of this handle out; other threads' work is not ours).
        let begun = check(
            unsafe {
                sys::cuStreamBeginCapture_v2(
                    side,
                    sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
                )
            },
            "beginning a capture",
        );
        let ran = begun.and_then(|_| enqueue(ctx));
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        // SAFETY: ends the capture begun above (a no-op error if it never began).
        let ended = unsafe { sys::cuStreamEndCapture(side, &mut graph) };
        ctx.set_capturing(false);
        ctx.stream = own;
        if ran.is_err() || ended != sys::CUresult::CUDA_SUCCESS || graph.is_null() {
            if !graph.is_null() {
                // SAFETY: the graph was made by the capture and is not used elsewhere.
                unsafe { sys::cuGraphDestroy(graph) };
            }
            self.refused.insert(key);
            return Ok(None);
        }
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        // SAFETY: `graph` is the captured graph; the executable copy is independent of it.
        let made = unsafe { sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0) };
        // SAFETY: as above.
        unsafe { sys::cuGraphDestroy(graph) };
        if made != sys::CUresult::CUDA_SUCCESS {
            self.refused.insert(key);
            return Ok(None);
        }
        if self.execs.len() >= CAPACITY {
            self.clear()?;
        }
        self.execs.insert(key, exec);
        Ok(Some(exec))
    }

    /// The private capture stream, made on first use.
    fn stream(&mut self) -> Result<sys::CUstream> {
        if let Some(s) = self.stream {
            return Ok(s);
        }
        let mut s: sys::CUstream = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the stream is destroyed in `release`.
        check(
            unsafe {
                sys::cuStreamCreate(&mut s, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32)
            },
            "making the capture stream",
        )?;
        self.stream = Some(s);
        Ok(s)
    }

    /// Destroys every graph once the GPU has run them (they may be in flight on callers'
    /// streams).
    fn clear(&mut self) -> Result<()> {
        if self.execs.is_empty() {
            return Ok(());
        }
        // SAFETY: the handle's context is current (the caller holds its lock and bound it).
        check(unsafe { sys::cuCtxSynchronize() }, "waiting for the graphs")?;
        self.destroy_graphs();
        Ok(())
    }

    /// Destroys every graph; none may be in flight.
    fn destroy_graphs(&mut self) {
        for (_, exec) in self.execs.drain() {
            // SAFETY: the callers wait for the context first: no launch of `exec` is in flight.
            unsafe { sys::cuGraphExecDestroy(exec) };
        }
    }

    /// Frees the graphs and the stream; the context must be current and idle.
    pub(crate) fn release(&mut self) {
        self.destroy_graphs();
        if let Some(s) = self.stream.take() {
            // SAFETY: the stream is ours and idle.
            unsafe { sys::cuStreamDestroy_v2(s) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_captured_on_its_second_sight_and_never_after_a_refusal() {
        let mut g = GraphCache::default();
        assert!(matches!(g.plan(1), Plan::Eager));
        assert!(matches!(g.plan(1), Plan::Capture));
        g.refused.insert(2);
        assert!(matches!(g.plan(2), Plan::Eager));
        assert!(matches!(g.plan(2), Plan::Eager));
        assert!(matches!(g.plan(3), Plan::Eager));
    }
}
