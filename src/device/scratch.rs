//! Scratch memory that kernels keep across launches (split-K partials, work counters, partial
//! softmax states): one process-wide buffer per use, grown on demand and never shrunk.

use std::sync::Mutex;

use super::{Context, DeviceBuffer};
use crate::error::{Error, Result};

/// A grow-only device buffer behind a lock, for a `static`. With `zeroed`, every allocation is
/// filled with zeros: for counters that the kernels return to 0 themselves, so that zeroing
/// once per allocation keeps them at 0 between launches.
pub struct Scratch {
    what: &'static str,
    zeroed: bool,
    buf: Mutex<Option<DeviceBuffer>>,
}

impl Scratch {
    /// `what` names the buffer in the error a poisoned lock gives.
    pub const fn new(what: &'static str, zeroed: bool) -> Scratch {
        Scratch {
            what,
            zeroed,
            buf: Mutex::new(None),
        }
    }

    /// The device address of a buffer of at least `bytes`. Growing waits for the launches in
    /// flight first (they may still use the old buffer).
    pub fn at_least(&self, ctx: &Context, bytes: usize) -> Result<u64> {
        let mut guard = self
            .buf
            .lock()
            .map_err(|_| Error::invalid(format!("the {} lock is poisoned", self.what)))?;
        let old = guard.as_ref().map_or(0, |b| b.bytes());
        if guard.is_none() || old < bytes {
            ctx.synchronize()?;
            let b = ctx.alloc(bytes.max(old))?;
            if self.zeroed {
                b.fill_bytes(0, ctx)?;
            }
            *guard = Some(b);
        }
        Ok(guard.as_ref().expect("allocated above").ptr())
    }
}
