//! Words of pinned host memory that kernels write through their device mapping and the host
//! reads without a copy or a synchronisation: how a kernel reports bad input (a block table entry
//! outside the cache) from inside a CUDA graph, where nothing can be read back.

use std::sync::atomic::{AtomicU32, Ordering};

use cudarc::driver::{result, sys};

use crate::error::{Error, Result};

/// `words` u32 flags in page-locked host memory mapped into the current context's address space:
/// kernels store 1 into a word (never anything else, so no atomics are needed); the host swaps
/// each back to 0 as it reads it.
pub struct HostFlags {
    host: *mut u32,
    device: u64,
    words: usize,
}

// SAFETY: the memory is page-locked host memory owned by this value until it drops; the host
// touches it only through atomic loads and swaps, and kernels only store whole words.
unsafe impl Send for HostFlags {}
// SAFETY: as above: every host access is atomic.
unsafe impl Sync for HostFlags {}

impl HostFlags {
    /// Allocates `words` zeroed flags, mapped for the current context's kernels.
    pub fn new(words: usize) -> Result<HostFlags> {
        let bytes = words.max(1) * 4;
        let flags = sys::CU_MEMHOSTALLOC_DEVICEMAP | sys::CU_MEMHOSTALLOC_PORTABLE;
        let fail = |what: &'static str| move |e| Error::cuda(what, format!("{e:?}"));
        // SAFETY: a fresh allocation of `bytes`; the flags ask for a device mapping.
        let host = unsafe { result::malloc_host(bytes, flags) }
            .map_err(fail("allocating mapped host memory for the error flags"))?
            as *mut u32;
        // SAFETY: `host` holds `words` u32 (4-byte aligned: page-locked allocations are page
        // aligned), written before any kernel can see them.
        unsafe { std::ptr::write_bytes(host, 0, words.max(1)) };
        let mut device: sys::CUdeviceptr = 0;
        // SAFETY: `host` was allocated with CU_MEMHOSTALLOC_DEVICEMAP in the current context.
        let r = unsafe { sys::cuMemHostGetDevicePointer_v2(&mut device, host as *mut _, 0) };
        if r != sys::CUresult::CUDA_SUCCESS {
            // SAFETY: allocated above by malloc_host, used by nothing yet.
            let _ = unsafe { result::free_host(host as *mut _) };
            return Err(Error::cuda(
                "mapping the error flags into the GPU's address space",
                format!("{r:?}"),
            ));
        }
        Ok(HostFlags {
            host,
            device,
            words,
        })
    }

    /// The flags' device address, for a kernel's argument block.
    pub fn device_ptr(&self) -> u64 {
        self.device
    }

    /// Each word's value since the last take (1: set by a kernel that has run), zeroed.
    pub fn take(&self) -> Vec<u32> {
        (0..self.words)
            .map(|i| {
                // SAFETY: word i of the allocation, valid and 4-byte aligned while `self` lives;
                // every host access is atomic.
                let w = unsafe { AtomicU32::from_ptr(self.host.add(i)) };
                if w.load(Ordering::Acquire) == 0 {
                    0
                } else {
                    w.swap(0, Ordering::AcqRel)
                }
            })
            .collect()
    }
}

impl Drop for HostFlags {
    fn drop(&mut self) {
        // SAFETY: allocated by malloc_host in `new`; the owner (a handle) waits for its launches
        // before dropping it.
        let _ = unsafe { result::free_host(self.host as *mut _) };
    }
}
