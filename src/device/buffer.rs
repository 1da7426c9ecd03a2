//! Device memory: an owned allocation with typed upload/download and byte fills.

use cudarc::driver::{result, sys};

use super::Context;

use crate::error::{Error, Result};

/// One device allocation, freed on drop (unless [`DeviceBuffer::borrowed`]).
pub struct DeviceBuffer {
    ptr: sys::CUdeviceptr,
    bytes: usize,
    owned: bool,
}

/// Waits until a synchronous copy from pageable host memory has reached the device. Such a
/// copy returns once the data is in the driver's staging memory, with its DMA to the device
/// maybe still running on the legacy stream, which the contexts' non-blocking streams do not
/// wait for: a kernel enqueued right after an upload could read the buffer's old bytes. H200,
/// 2026-11-30 (docs/fp4.md G20): `fp4 verify` uploaded 1 MB of codes and put them in the GEMV
/// layout in place on the context's stream at once; 32,659 of the bytes read back were still
/// the standard codes.
fn landed() -> Result<()> {
    // SAFETY: the null stream is the current context's legacy stream.
    unsafe { result::stream::synchronize(std::ptr::null_mut()) }
        .map_err(|e| Error::cuda("waiting for a copy to the device", format!("{e:?}")))
}

impl DeviceBuffer {
    pub fn new(bytes: usize) -> Result<DeviceBuffer> {
        let bytes = bytes.max(1);
        // SAFETY: a plain allocation in the current context.
        let ptr = unsafe { result::malloc_sync(bytes) }
            .map_err(|e| super::memory::alloc_error(bytes, e))?;
        Ok(DeviceBuffer {
            ptr,
            bytes,
            owned: true,
        })
    }

    /// A buffer over `bytes` of memory someone else owns (a cudarc `CudaSlice`, a torch tensor),
    /// so that the ops' launch paths can take it; dropping it frees nothing.
    ///
    /// # Safety
    /// `ptr .. ptr + bytes` must be device memory of the current context that stays allocated
    /// while the buffer and any launch given it may use it.
    pub unsafe fn borrowed(ptr: u64, bytes: usize) -> DeviceBuffer {
        DeviceBuffer {
            ptr,
            bytes,
            owned: false,
        }
    }

    pub fn from_host<T: Copy>(data: &[T]) -> Result<DeviceBuffer> {
        let b = DeviceBuffer::new(std::mem::size_of_val(data))?;
        b.upload(data)?;
        Ok(b)
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn upload<T: Copy>(&self, data: &[T]) -> Result<()> {
        let n = std::mem::size_of_val(data);
        if n > self.bytes {
            return Err(Error::invalid(format!(
                "upload of {n} bytes into a {}-byte buffer",
                self.bytes
            )));
        }
        // SAFETY: the destination holds at least `n` bytes; the copy is synchronous.
        unsafe { result::memcpy_htod_sync(self.ptr, data) }
            .map_err(|e| Error::cuda("copying to the device", format!("{e:?}")))?;
        landed()
    }

    /// Copies `data` to the bytes starting `first_byte` bytes into the buffer.
    pub fn upload_at<T: Copy>(&self, first_byte: usize, data: &[T]) -> Result<()> {
        let n = std::mem::size_of_val(data);
        if first_byte + n > self.bytes {
            return Err(Error::invalid(format!(
                "upload of {n} bytes at {first_byte} into a {}-byte buffer",
                self.bytes
            )));
        }
        // SAFETY: the destination range lies inside this allocation; the copy is synchronous.
        unsafe { result::memcpy_htod_sync(self.ptr + first_byte as u64, data) }
            .map_err(|e| Error::cuda("copying to the device", format!("{e:?}")))?;
        landed()
    }

    pub fn download<T: Copy + Default>(&self, count: usize) -> Result<Vec<T>> {
        let mut out = vec![T::default(); count];
        if std::mem::size_of_val(out.as_slice()) > self.bytes {
            return Err(Error::invalid("download larger than the buffer"));
        }
        // SAFETY: the source holds at least the bytes requested; the copy is synchronous.
        unsafe { result::memcpy_dtoh_sync(&mut out, self.ptr) }
            .map_err(|e| Error::cuda("copying from the device", format!("{e:?}")))?;
        Ok(out)
    }

    /// `count` elements starting `first_byte` bytes into the buffer.
    pub fn download_range<T: Copy + Default>(
        &self,
        first_byte: usize,
        count: usize,
    ) -> Result<Vec<T>> {
        let mut out = vec![T::default(); count];
        if first_byte + std::mem::size_of_val(out.as_slice()) > self.bytes {
            return Err(Error::invalid("download range outside the buffer"));
        }
        // SAFETY: the source range lies inside this allocation; the copy is synchronous.
        unsafe { result::memcpy_dtoh_sync(&mut out, self.ptr + first_byte as u64) }
            .map_err(|e| Error::cuda("copying from the device", format!("{e:?}")))?;
        Ok(out)
    }

    /// Sets every byte to `value` on the context's stream (asynchronous).
    pub fn fill_bytes(&self, value: u8, ctx: &Context) -> Result<()> {
        let stream = ctx.stream;
        // SAFETY: the range lies inside this allocation.
        unsafe { result::memset_d8_async(self.ptr, value, self.bytes, stream) }
            .map_err(|e| Error::cuda("memset", format!("{e:?}")))
    }

    /// Sets `width` bytes to `value` at `first_byte`, `first_byte + pitch`, ... (`rows` times) on
    /// the context's stream (asynchronous): a field of every record in an array of records.
    pub fn fill_strided(
        &self,
        value: u8,
        (first_byte, width, pitch, rows): (usize, usize, usize, usize),
        ctx: &Context,
    ) -> Result<()> {
        if rows == 0 || width == 0 {
            return Ok(());
        }
        if width > pitch || first_byte + (rows - 1) * pitch + width > self.bytes {
            return Err(Error::invalid("strided fill outside the buffer"));
        }
        // SAFETY: every row's range lies inside this allocation (checked above).
        unsafe {
            sys::cuMemsetD2D8Async(
                self.ptr + first_byte as u64,
                pitch,
                value,
                width,
                rows,
                ctx.stream,
            )
        }
        .result()
        .map_err(|e| Error::cuda("strided memset", format!("{e:?}")))
    }
}

impl Drop for DeviceBuffer {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        // SAFETY: the allocation is ours and no longer used (callers synchronise before dropping).
        unsafe {
            let _ = result::free_sync(self.ptr);
        }
    }
}
