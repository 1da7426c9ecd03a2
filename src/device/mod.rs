//! The GPU: finding devices and reading their properties, a context with one stream, device
//! memory, loaded kernels and launches (clusters included), and timing events. Thin over the
//! CUDA driver API (cudarc's `sys`/`result` layers), loaded at run time so CPU-only machines work.

mod buffer;
mod host_flags;
mod info;
mod launch;
mod memo;
pub mod memory;
mod occupancy;
mod scratch;
mod tma;

pub use buffer::DeviceBuffer;
pub use host_flags::HostFlags;
pub use info::DeviceInfo;
pub use launch::{Function, LaunchConfig};
pub use memo::LaunchMemo;
pub use scratch::{Scratch, Workspaces};
#[cfg(test)]
pub(crate) use tma::Call as TmaCall;
pub(crate) use tma::{check_address_and_dims, check_box, l2_promotion};
pub use tma::{TensorMap, TiledArgs, Tma2d, TmaDType, TmaSwizzle};

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Arc;
use std::time::{Duration, Instant};

use cudarc::driver::{result, sys};

use crate::error::{Error, Result};
use crate::jit::{Compiled, Jit, KernelSpec};
use crate::ops::tuned::TunedTable;
use crate::overrides::Overrides;

/// Whether the CUDA driver library can be loaded at all on this machine.
pub fn driver_present() -> bool {
    // SAFETY: loading libcuda runs only its initialisers.
    unsafe {
        libloading::os::unix::Library::open(Some("libcuda.so.1"), libloading::os::unix::RTLD_NOW)
    }
    .map(std::mem::forget)
    .is_ok()
}

/// Initialises the driver, or says plainly why there is no GPU to use.
pub fn init() -> Result<()> {
    if !driver_present() {
        return Err(Error::NoGpu(
            "no NVIDIA driver found (libcuda.so.1 cannot be loaded): this command needs a GPU; \
             run it on a machine with an NVIDIA driver"
                .into(),
        ));
    }
    result::init().map_err(|e| {
        Error::NoGpu(format!(
            "the CUDA driver did not initialise ({e:?}): this command needs a working GPU"
        ))
    })?;
    let n = result::device::get_count()
        .map_err(|e| Error::cuda("counting devices", format!("{e:?}")))?;
    if n == 0 {
        return Err(Error::NoGpu(
            "the CUDA driver sees no GPU: this command needs one".into(),
        ));
    }
    Ok(())
}

/// Every GPU the driver sees.
pub fn list() -> Result<Vec<DeviceInfo>> {
    init()?;
    let n = result::device::get_count()
        .map_err(|e| Error::cuda("counting devices", format!("{e:?}")))?;
    (0..n).map(|i| DeviceInfo::query(i as u32)).collect()
}

/// A GPU ready for work: its primary context (current on this thread), one stream, the JIT, the
/// experiment overrides and tuned configs its launches honour, its scratch workspaces, and the
/// kernels loaded so far (each compiled once per context).
pub struct Context {
    pub info: DeviceInfo,
    pub jit: Jit,
    /// The `KILN_*` experiment knobs: [`Overrides::NONE`] unless the opener passes others (the CLI
    /// and the tune worker pass what their environment sets).
    pub overrides: Overrides,
    /// The tuned configs its launches use: none unless the opener gives a table
    /// ([`Context::with_tuned`]), and then every version without an entry runs its heuristic.
    pub tuned: Arc<TunedTable>,
    ctx: sys::CUcontext,
    dev: sys::CUdevice,
    pub stream: sys::CUstream,
    /// The ops' scratch buffers, this context's own (grown on demand, freed with it).
    pub scratch: Workspaces,
    /// Set while the stream captures a CUDA graph (the API handle says so): a workspace that
    /// would grow then is an error.
    capturing: Cell<bool>,
    functions: RefCell<HashMap<KernelSpec, (Function, Compiled)>>,
    /// What launches derived from their problems alone (see [`LaunchMemo`]).
    pub memo: LaunchMemo,
    /// Set when a launch overran its bound: the stream may never drain, so Drop must not wait.
    hung: Cell<bool>,
    /// Allocations made so far: a graph captured over scratch buffers is valid only while none
    /// was replaced ([`Context::allocations`]).
    allocations: Cell<u64>,
}

impl Context {
    /// Opens GPU `ordinal` and makes its primary context current on the calling thread; its
    /// launches take the defaults ([`Overrides::NONE`]).
    pub fn open(ordinal: u32, jit: Jit) -> Result<Context> {
        Context::open_with(ordinal, jit, Overrides::NONE)
    }

    /// [`Context::open`], with launches that honour `overrides`.
    pub fn open_with(ordinal: u32, jit: Jit, overrides: Overrides) -> Result<Context> {
        init()?;
        let info = DeviceInfo::query(ordinal)?;
        let dev = result::device::get(ordinal as i32)
            .map_err(|e| Error::cuda("cuDeviceGet", format!("{e:?}")))?;
        // SAFETY: `dev` is a valid device handle; the context is released in Drop.
        let ctx = unsafe { result::primary_ctx::retain(dev) }
            .map_err(|e| Error::cuda("retaining the context", format!("{e:?}")))?;
        // SAFETY: `ctx` was just retained.
        unsafe { result::ctx::set_current(ctx) }
            .map_err(|e| Error::cuda("cuCtxSetCurrent", format!("{e:?}")))?;
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| Error::cuda("creating a stream", format!("{e:?}")))?;
        Ok(Context {
            info,
            jit,
            overrides,
            tuned: Arc::new(TunedTable::empty()),
            ctx,
            dev,
            stream,
            scratch: Workspaces::new(),
            capturing: Cell::new(false),
            functions: RefCell::new(HashMap::new()),
            memo: LaunchMemo::default(),
            hung: Cell::new(false),
            allocations: Cell::new(0),
        })
    }

    /// This context, its launches honouring `overrides` from now on.
    pub fn with_overrides(mut self, overrides: Overrides) -> Context {
        self.overrides = overrides;
        self.memo.clear();
        self
    }

    /// This context, its launches using the tuned configs of `tuned` from now on.
    pub fn with_tuned(mut self, tuned: Arc<TunedTable>) -> Context {
        self.tuned = tuned;
        self.memo.clear();
        self
    }

    /// Whether the stream captures a CUDA graph (as the opener said, [`Context::set_capturing`]):
    /// no workspace grows then.
    pub fn capturing(&self) -> bool {
        self.capturing.get()
    }

    /// Says whether the stream captures a CUDA graph from now on.
    pub fn set_capturing(&self, capturing: bool) {
        self.capturing.set(capturing);
    }

    /// The arch to compile for: `sm_90a` on Hopper, `sm_XY` elsewhere.
    pub fn arch(&self) -> String {
        self.info.arch()
    }

    /// The loaded kernel `make` specifies, kept in the launch memo under `key` (what, besides
    /// the context's overrides, decides the spec): a warm call builds no spec (its defines are
    /// strings, its lookup hashes them), which is most of a small launch's host cost.
    pub fn function_memo<K: Hash + Eq + Clone + 'static>(
        &self,
        key: &K,
        make: impl FnOnce(&str) -> KernelSpec,
    ) -> Result<Function> {
        self.memo
            .get_or_try(key, || self.function(&make(&self.arch())))
    }

    /// The loaded kernel for `spec`, compiling (or reading the JIT cache) on first use.
    pub fn function(&self, spec: &KernelSpec) -> Result<Function> {
        if let Some((f, _)) = self.functions.borrow().get(spec) {
            return Ok(*f);
        }
        let compiled = self.jit.compile(spec)?;
        let f = Function::load(&compiled)?;
        self.functions
            .borrow_mut()
            .insert(spec.clone(), (f, compiled));
        Ok(f)
    }

    /// Resources of every kernel loaded so far.
    pub fn loaded(&self) -> Vec<Compiled> {
        self.functions
            .borrow()
            .values()
            .map(|(_, c)| c.clone())
            .collect()
    }

    pub fn synchronize(&self) -> Result<()> {
        // SAFETY: the stream belongs to this context.
        unsafe { result::stream::synchronize(self.stream) }
            .map_err(|e| Error::cuda("synchronising the stream", format!("{e:?}")))
    }

    /// Waits for the stream like [`Context::synchronize`], but gives up after `limit` with
    /// [`Error::Hang`] naming `what` (the kernel and its problem) instead of freezing. After a hang
    /// the context is abandoned: dropping it no longer waits for the stream.
    pub fn synchronize_within(&self, limit: Duration, what: &str) -> Result<()> {
        let start = Instant::now();
        let mut nap = Duration::from_micros(20);
        loop {
            // SAFETY: the stream belongs to this context, which is current on this thread.
            match unsafe { sys::cuStreamQuery(self.stream) } {
                sys::CUresult::CUDA_SUCCESS => return Ok(()),
                sys::CUresult::CUDA_ERROR_NOT_READY => {}
                e => return Err(Error::cuda(format!("running {what}"), format!("{e:?}"))),
            }
            if start.elapsed() >= limit {
                self.hung.set(true);
                return Err(Error::Hang {
                    what: what.to_string(),
                    limit_ms: limit.as_millis() as u64,
                });
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(5));
        }
    }

    /// Refuses `what` (a problem, "this problem") when it needs more than `bytes` of this GPU's
    /// free memory: [`Error::OutOfMemory`], said before anything is allocated or generated.
    pub fn ensure_fits(&self, what: &str, bytes: u64) -> Result<()> {
        memory::ensure_free(what, bytes)
    }

    /// Allocates `bytes` of device memory.
    pub fn alloc(&self, bytes: usize) -> Result<DeviceBuffer> {
        self.allocations.set(self.allocations.get() + 1);
        DeviceBuffer::new(bytes)
    }

    /// How many buffers [`Context::alloc`] has made: a scratch buffer that grows is a new one
    /// (its old one freed), so work recorded with this count stays valid while it is unchanged.
    pub fn allocations(&self) -> u64 {
        self.allocations.get()
    }

    /// Creates a timing event pair recorder.
    pub fn event(&self) -> Result<Event> {
        let e = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
            .map_err(|e| Error::cuda("creating an event", format!("{e:?}")))?;
        Ok(Event(e))
    }

    pub fn raw_device(&self) -> sys::CUdevice {
        self.dev
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        if self.hung.get() {
            // A hung kernel never lets the stream drain; the driver reclaims all at process exit.
            return;
        }
        // SAFETY: the stream and the retained primary context are ours; nothing uses them after.
        unsafe {
            let _ = result::stream::synchronize(self.stream);
            // The workspaces go while the context is still retained.
            drop(std::mem::take(&mut self.scratch));
            let _ = result::stream::destroy(self.stream);
            let _ = result::primary_ctx::release(self.dev);
        }
        let _ = self.ctx;
    }
}

/// A CUDA event created with timing enabled.
pub struct Event(sys::CUevent);

impl Event {
    pub fn record(&self, ctx: &Context) -> Result<()> {
        // SAFETY: both handles are live and belong to the current context.
        unsafe { result::event::record(self.0, ctx.stream) }
            .map_err(|e| Error::cuda("recording an event", format!("{e:?}")))
    }

    /// Milliseconds from `self` to `end`, waiting for `end` to complete.
    pub fn elapsed_ms(&self, end: &Event) -> Result<f32> {
        // SAFETY: both events are live.
        unsafe {
            result::event::synchronize(end.0)
                .map_err(|e| Error::cuda("waiting for an event", format!("{e:?}")))?;
            result::event::elapsed(self.0, end.0)
                .map_err(|e| Error::cuda("reading an event", format!("{e:?}")))
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        // SAFETY: the event is ours.
        unsafe {
            let _ = result::event::destroy(self.0);
        }
    }
}
