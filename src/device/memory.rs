//! How much device memory is free (the driver's `cuMemGetInfo`), and the check every command and
//! allocating call makes before it allocates or generates anything: refuse what cannot fit.

use cudarc::driver::result::{self, DriverError};
use cudarc::driver::sys;

use crate::error::{Error, Memory, Result};

/// Free and total bytes of the current context's GPU.
pub fn free_and_total() -> Result<(u64, u64)> {
    let (free, total) = result::mem_get_info()
        .map_err(|e| Error::cuda("reading the free device memory", format!("{e:?}")))?;
    Ok((free as u64, total as u64))
}

/// `Ok` when `needed` bytes fit in `free`, else [`Error::OutOfMemory`] naming `what`.
pub fn fits(what: &str, needed: u64, free: u64) -> Result<()> {
    if needed > free {
        return Err(Error::out_of_memory(what, needed, free, Memory::Device));
    }
    Ok(())
}

/// Refuses, before anything is allocated, a run of `what` that needs more than the free device
/// memory of the current context's GPU.
pub fn ensure_free(what: &str, needed: u64) -> Result<()> {
    fits(what, needed, free_and_total()?.0)
}

/// A failed allocation of `bytes`: out of memory says so with what was free; any other failure
/// stays a CUDA error.
pub fn alloc_error(bytes: usize, e: DriverError) -> Error {
    classify_alloc_error(bytes, e, || free_and_total().map_or(0, |(f, _)| f))
}

/// [`alloc_error`] with the free memory read by `free` (only for out of memory).
fn classify_alloc_error(bytes: usize, e: DriverError, free: impl FnOnce() -> u64) -> Error {
    if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY {
        return Error::out_of_memory("an allocation", bytes as u64, free(), Memory::Device);
    }
    // The code's name, not DriverError's Debug, which asks the driver for a description.
    Error::cuda(
        format!("allocating {bytes} bytes of device memory"),
        format!("{:?}", e.0),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_need_over_the_free_memory_is_refused_with_both_sizes() {
        let gib = 1u64 << 30;
        assert!(fits("this problem", 10 * gib, 10 * gib).is_ok());
        let e = fits("this problem", 10 * gib + 1, 10 * gib).unwrap_err();
        assert_eq!(e.exit_code(), 12);
        assert!(e.to_string().starts_with(
            "this problem needs 10.0 GiB of device memory; the GPU has 10.0 GiB free"
        ));
    }

    #[test]
    fn out_of_memory_at_allocation_is_its_own_error() {
        let oom = DriverError(sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY);
        assert!(matches!(
            classify_alloc_error(1 << 40, oom, || 5 << 30),
            Error::OutOfMemory { needed, free, .. } if needed == 1 << 40 && free == 5 << 30
        ));
        let other = DriverError(sys::CUresult::CUDA_ERROR_INVALID_VALUE);
        let e = classify_alloc_error(8, other, || unreachable!("not out of memory"));
        assert!(matches!(e, Error::Cuda { .. }));
    }
}
