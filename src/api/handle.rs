//! The handle: one GPU's primary context (shared with cudarc and torch), kiln's kernel cache
//! and registry, its workspaces and tuned table, and the one lock calls take to launch on the
//! stream they are given. It also knows which problems have run, so that a call on a stream
//! that captures a CUDA graph is refused when it would compile or allocate.

use std::collections::HashSet;
use std::hash::{BuildHasher, Hash, RandomState};
use std::sync::{Arc, Mutex};

use cudarc::driver::{result, sys, CudaContext, CudaStream};

use super::graphs::{GraphCache, Plan};
use super::options::KilnOptions;
use super::workspace::Workspaces;
use crate::device::{Context, DeviceInfo};
use crate::error::{ArgumentKind, Error, Result};
use crate::jit::{cache::DiskCache, Jit};
use crate::ops::registry::Registry;
use crate::ops::tuned::TunedTable;
use crate::overrides::Overrides;

/// kiln on one GPU. `Send + Sync`: calls from several threads take turns on an internal lock
/// (each only enqueues work). Use one handle per GPU.
pub struct Kiln {
    cuda: Arc<CudaContext>,
    ordinal: usize,
    info: DeviceInfo,
    pub(crate) registry: Registry,
    /// The experiment knobs the handle's launches use (`KilnOptions::overrides`: the defaults
    /// unless the caller sets them; the library never reads the environment for them).
    pub(crate) overrides: Overrides,
    /// The context's tuned table, shared (the context reads it under the lock; this copy
    /// answers [`Kiln::tuned`] without it).
    tuned: Arc<TunedTable>,
    /// Hashes the keys of problems that have run (`Inner::prepared`).
    keys: RandomState,
    inner: Mutex<Inner>,
}

/// What the lock guards: the context whose stream each call sets, the workspaces, and the
/// problems that have run outside capture (whose kernels are loaded and workspaces sized).
struct Inner {
    ws: Workspaces,
    ctx: Context,
    prepared: HashSet<u64>,
    graphs: GraphCache,
}

// SAFETY: `Context` holds driver handles (a retained primary context, a stream, loaded
// functions) that any thread may use once the context is current, which `Kiln::run` makes it
// before every use; its `RefCell` is only touched under the handle's lock.
unsafe impl Send for Inner {}

fn driver(what: &str) -> impl Fn(result::DriverError) -> Error + '_ {
    move |e| Error::cuda(what, format!("{e:?}"))
}

/// Whether `stream` is capturing a CUDA graph (an invalidated capture counts).
pub(crate) fn is_capturing(stream: sys::CUstream) -> Result<bool> {
    // SAFETY: the caller passes a stream of the current context.
    let status = unsafe { result::stream::is_capturing(stream) }
        .map_err(driver("asking whether the stream captures a graph"))?;
    Ok(status != sys::CUstreamCaptureStatus::CU_STREAM_CAPTURE_STATUS_NONE)
}

impl Kiln {
    /// A handle on GPU `ordinal` (its primary context), or [`Error::NoGpu`] on a machine
    /// without a driver or GPU.
    pub fn open(ordinal: usize) -> Result<Kiln> {
        crate::device::init()?;
        let cuda = CudaContext::new(ordinal).map_err(driver("opening the GPU"))?;
        Kiln::new(cuda)
    }

    /// A handle on `cuda`'s GPU, which must be its primary context (`CudaContext::new`).
    pub fn new(cuda: Arc<CudaContext>) -> Result<Kiln> {
        Kiln::with_options(cuda, KilnOptions::default())
    }

    pub fn with_options(cuda: Arc<CudaContext>, opts: KilnOptions) -> Result<Kiln> {
        if !cuda.is_primary() {
            return Err(Error::argument(
                "cuda",
                ArgumentKind::Device,
                "`cuda` is not the device's primary context; kiln shares the primary context (cudarc's `CudaContext::new`, torch's) so that memory and streams cross between them",
            ));
        }
        cuda.bind_to_thread()
            .map_err(driver("binding the context"))?;
        let ordinal = cuda.ordinal();
        let jit = match opts.jit_cache_dir {
            Some(root) => Jit {
                cache: Some(DiskCache { root }),
            },
            None => Jit::default(),
        };
        let tuned = match &opts.tuned_store {
            Some(path) => crate::tune::cache::load_table(path)?,
            None => TunedTable::empty(),
        };
        let ctx = Context::open_with(ordinal as u32, jit, opts.overrides.clone())?
            .with_tuned(Arc::new(tuned));
        Ok(Kiln {
            info: ctx.info.clone(),
            tuned: ctx.tuned.clone(),
            cuda,
            ordinal,
            registry: Registry::default(),
            overrides: opts.overrides,
            keys: RandomState::new(),
            inner: Mutex::new(Inner {
                ws: Workspaces::default(),
                ctx,
                prepared: HashSet::new(),
                graphs: GraphCache::default(),
            }),
        })
    }

    /// The GPU's index.
    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The GPU's name, compute capability and limits.
    pub fn device(&self) -> &DeviceInfo {
        &self.info
    }

    pub fn cuda(&self) -> &Arc<CudaContext> {
        &self.cuda
    }

    /// The tuned configs the handle's launches use ([`KilnOptions::tuned_store`]; empty
    /// without one).
    pub fn tuned(&self) -> &TunedTable {
        &self.tuned
    }

    /// Refuses a stream of another context.
    pub(crate) fn check_stream(&self, stream: &CudaStream) -> Result<()> {
        if stream.context().cu_ctx() != self.cuda.cu_ctx() {
            return Err(Error::argument(
                "stream",
                ArgumentKind::Device,
                format!(
                    "`stream` belongs to GPU {} but the handle is on GPU {}; launch on a stream of the handle's GPU",
                    stream.context().ordinal(),
                    self.ordinal
                ),
            ));
        }
        Ok(())
    }

    /// A raw op's road: `stream` checked, the op's plan made for this GPU (`None`: an empty
    /// problem, nothing to launch), then launched.
    pub(crate) fn on_raw_stream<P>(
        &self,
        stream: sys::CUstream,
        plan: impl FnOnce(usize) -> Result<Option<P>>,
        launch: impl FnOnce(&P) -> Result<()>,
    ) -> Result<()> {
        self.check_raw_stream(stream)?;
        plan(self.ordinal())?.map_or(Ok(()), |p| launch(&p))
    }

    /// Refuses a raw stream of another context (or no stream at all).
    pub(crate) fn check_raw_stream(&self, stream: sys::CUstream) -> Result<()> {
        self.cuda
            .bind_to_thread()
            .map_err(driver("binding the context"))?;
        let mut ctx: sys::CUcontext = std::ptr::null_mut();
        // SAFETY: `ctx` is a valid out-pointer; an invalid stream handle is reported, not used.
        let r = unsafe { sys::cuStreamGetCtx(stream, &mut ctx) };
        if r != sys::CUresult::CUDA_SUCCESS {
            return Err(Error::argument(
                "stream",
                ArgumentKind::Device,
                format!("`stream` is not a usable CUDA stream ({r:?}); pass the stream's handle (e.g. torch's `cuda_stream`)"),
            ));
        }
        if ctx != self.cuda.cu_ctx() {
            return Err(Error::argument(
                "stream",
                ArgumentKind::Device,
                format!(
                    "`stream` belongs to another CUDA context than the handle's (GPU {}'s primary context); launch on a stream of that context",
                    self.ordinal
                ),
            ));
        }
        Ok(())
    }

    /// Whether a problem with this key has run (or been precompiled) on the handle.
    pub(crate) fn is_prepared(&self, key: impl Hash) -> Result<bool> {
        let h = self.keys.hash_one(key);
        Ok(self.lock()?.prepared.contains(&h))
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, Inner>> {
        self.inner.lock().map_err(|_| {
            Error::invalid(
                "the kiln handle's lock is poisoned (a call panicked while holding it); make a new handle",
            )
        })
    }

    /// The lock, with the handle's context current on this thread.
    fn lock_bound(&self) -> Result<std::sync::MutexGuard<'_, Inner>> {
        let guard = self.lock()?;
        self.cuda
            .bind_to_thread()
            .map_err(driver("binding the context"))?;
        Ok(guard)
    }

    /// Runs `f` with the context current and its stream set to `stream` (`None`: the handle's
    /// own), the workspaces, and whether the stream is capturing a graph. A capturing stream is
    /// refused unless a problem with `key` (named `what`) has run before; a call that succeeds
    /// outside capture marks `key` as run.
    pub(crate) fn run<R>(
        &self,
        stream: Option<sys::CUstream>,
        key: &str,
        what: &str,
        f: impl FnOnce(&Context, &mut Workspaces, bool) -> Result<R>,
    ) -> Result<R> {
        self.run_keyed(stream, key, || what.to_string(), f)
    }

    /// [`Kiln::run`] with any hashable key, and the problem's name made only for the error.
    pub(crate) fn run_keyed<R>(
        &self,
        stream: Option<sys::CUstream>,
        key: impl Hash,
        what: impl FnOnce() -> String,
        f: impl FnOnce(&Context, &mut Workspaces, bool) -> Result<R>,
    ) -> Result<R> {
        self.run_keyed_hashed(stream, self.keys.hash_one(key), what, f)
    }

    fn run_keyed_hashed<R>(
        &self,
        stream: Option<sys::CUstream>,
        key: u64,
        what: impl FnOnce() -> String,
        f: impl FnOnce(&Context, &mut Workspaces, bool) -> Result<R>,
    ) -> Result<R> {
        let mut guard = self.lock_bound()?;
        let inner = &mut *guard;
        let stream = stream.unwrap_or(inner.ctx.stream);
        let capturing = is_capturing(stream)?;
        run_in(inner, stream, capturing, key, what, f)
    }

    /// [`Kiln::run_graphed_polled`] with nothing to poll.
    pub(crate) fn run_graphed(
        &self,
        stream: Option<sys::CUstream>,
        key: impl Hash,
        addresses: impl Hash,
        what: impl FnOnce() -> String,
        f: impl Fn(&Context, &mut Workspaces, bool) -> Result<()>,
    ) -> Result<()> {
        self.run_graphed_polled(stream, key, addresses, what, |_| Ok(()), f)
    }

    /// [`Kiln::run_keyed`] for an op whose addresses are `addresses`: a warm call seen before
    /// with the same key and addresses (and no scratch buffer replaced since) replays the graph
    /// captured from it, one driver call (~2 us of CPU on the H200's hosts) instead of one per
    /// launch (~4 us each). Under the caller's own capture, or when its capture is refused, it
    /// runs as `run_keyed`. `poll` runs first outside capture, on the eager and replayed path
    /// alike (the decode steps report the bad tables earlier launches found there).
    pub(crate) fn run_graphed_polled(
        &self,
        stream: Option<sys::CUstream>,
        key: impl Hash,
        addresses: impl Hash,
        what: impl FnOnce() -> String,
        poll: impl FnOnce(&Workspaces) -> Result<()>,
        f: impl Fn(&Context, &mut Workspaces, bool) -> Result<()>,
    ) -> Result<()> {
        let key = self.keys.hash_one(key);
        let mut guard = self.lock_bound()?;
        let inner = &mut *guard;
        let stream = stream.unwrap_or(inner.ctx.stream);
        let capturing = is_capturing(stream)?;
        if !capturing {
            poll(&inner.ws)?;
        }
        if inner.prepared.contains(&key) && !capturing {
            let graph = self
                .keys
                .hash_one((key, addresses, inner.ctx.allocations()));
            let exec = match inner.graphs.plan(graph) {
                Plan::Replay(exec) => Some(exec),
                Plan::Capture => {
                    let ws = &mut inner.ws;
                    inner
                        .graphs
                        .capture(&mut inner.ctx, graph, |ctx| f(ctx, ws, true))?
                }
                Plan::Eager => None,
            };
            if let Some(exec) = exec {
                return GraphCache::launch(exec, stream);
            }
        }
        run_in(inner, stream, capturing, key, what, f)
    }

    /// Kernels loaded by the handle so far.
    pub(crate) fn loaded(&self) -> Result<usize> {
        Ok(self.lock()?.ctx.loaded().len())
    }
}

/// `f` on the locked handle with its context's stream set to `stream` (capturing or not, as
/// the caller asked the driver); a problem that has never run is refused during capture.
fn run_in<R>(
    inner: &mut Inner,
    stream: sys::CUstream,
    capturing: bool,
    key: u64,
    what: impl FnOnce() -> String,
    f: impl FnOnce(&Context, &mut Workspaces, bool) -> Result<R>,
) -> Result<R> {
    if capturing && !inner.prepared.contains(&key) {
        return Err(Error::Capture(format!(
            "{} has not run on this handle, so it would compile kernels or size workspaces during CUDA-graph capture; call `Kiln::precompile` with this problem (or run it once) before capturing",
            what()
        )));
    }
    let own = std::mem::replace(&mut inner.ctx.stream, stream);
    // (the ops' own scratch, the context's, refuses to grow during capture too)
    inner.ctx.set_capturing(capturing);
    let r = f(&inner.ctx, &mut inner.ws, capturing);
    inner.ctx.set_capturing(false);
    inner.ctx.stream = own;
    if r.is_ok() && !capturing {
        inner.prepared.insert(key);
    }
    r
}

impl Drop for Kiln {
    fn drop(&mut self) {
        // The workspaces (and graphs) may still be in use by launches in flight on callers'
        // streams.
        if self.cuda.bind_to_thread().is_ok() && self.cuda.synchronize().is_ok() {
            if let Ok(mut inner) = self.inner.lock() {
                inner.graphs.release();
            }
        }
    }
}
