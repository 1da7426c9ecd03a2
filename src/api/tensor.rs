//! Typed views of device memory for the public API: shape, strides, element type, base address
//! and GPU of a tensor, checked when the view is made, over a cudarc buffer (borrowed, with its
//! stream tracking) or a raw device pointer (for foreign callers).

use std::fmt;

use cudarc::driver::{
    CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop,
};

use super::dtype::{DType, KilnElem};
use super::info::{contiguous_strides, TensorInfo};
use crate::error::{ArgumentKind, Error, Result};

pub(crate) mod access {
    use super::*;

    /// What a view needs of the cudarc memory it reads.
    pub trait Read {
        fn base(&self) -> u64;
        fn elems(&self) -> usize;
        fn ordinal(&self) -> usize;
        /// Orders `stream` after the memory's last write; the guard records this read when
        /// dropped (after the launch).
        fn read<'s>(&'s self, stream: &'s CudaStream) -> SyncOnDrop<'s>;
    }

    /// What a view needs of the cudarc memory it writes.
    pub trait Write: Read {
        /// Orders `stream` after the memory's last read and write; the guard records this
        /// write when dropped (after the launch).
        fn write<'s>(&'s mut self, stream: &'s CudaStream) -> SyncOnDrop<'s>;
    }

    macro_rules! read {
        ($t:ty) => {
            impl<T> Read for $t {
                fn base(&self) -> u64 {
                    let (p, _recorded) = DevicePtr::device_ptr(self, DeviceSlice::stream(self));
                    p
                }
                fn elems(&self) -> usize {
                    DeviceSlice::len(self)
                }
                fn ordinal(&self) -> usize {
                    DeviceSlice::stream(self).context().ordinal()
                }
                fn read<'s>(&'s self, stream: &'s CudaStream) -> SyncOnDrop<'s> {
                    DevicePtr::device_ptr(self, stream).1
                }
            }
        };
    }
    read!(CudaSlice<T>);
    read!(CudaView<'_, T>);
    read!(CudaViewMut<'_, T>);

    impl<T> Write for CudaSlice<T> {
        fn write<'s>(&'s mut self, stream: &'s CudaStream) -> SyncOnDrop<'s> {
            DevicePtrMut::device_ptr_mut(self, stream).1
        }
    }
    impl<T> Write for CudaViewMut<'_, T> {
        fn write<'s>(&'s mut self, stream: &'s CudaStream) -> SyncOnDrop<'s> {
            DevicePtrMut::device_ptr_mut(self, stream).1
        }
    }
}

/// cudarc memory a [`TensorRef`] can read: `CudaSlice<T>`, `CudaView<T>`, `CudaViewMut<T>`.
pub trait DeviceRead<T>: access::Read {}
impl<T> DeviceRead<T> for CudaSlice<T> {}
impl<T> DeviceRead<T> for CudaView<'_, T> {}
impl<T> DeviceRead<T> for CudaViewMut<'_, T> {}

/// cudarc memory a [`TensorMut`] can write: `CudaSlice<T>`, `CudaViewMut<T>`.
pub trait DeviceWrite<T>: access::Write {}
impl<T> DeviceWrite<T> for CudaSlice<T> {}
impl<T> DeviceWrite<T> for CudaViewMut<'_, T> {}

fn slice_info<T: KilnElem>(
    s: &dyn access::Read,
    shape: &[usize],
    strides: Option<&[isize]>,
) -> Result<TensorInfo> {
    let packed;
    let strides = match strides {
        Some(s) => s,
        None => {
            packed = contiguous_strides(shape);
            &packed
        }
    };
    TensorInfo::new("view", s.base(), T::DTYPE, shape, strides, s.ordinal())?
        .within("view", s.elems())?
        .not_null("view")
}

/// A borrowed, read-only tensor on a GPU.
#[derive(Clone, Copy)]
pub struct TensorRef<'a> {
    pub(crate) info: TensorInfo,
    track: Option<&'a dyn access::Read>,
}

impl<'a> TensorRef<'a> {
    /// A packed row-major view of `s` with `shape`.
    pub fn from_slice<T: KilnElem, S: DeviceRead<T>>(s: &'a S, shape: &[usize]) -> Result<Self> {
        Ok(TensorRef {
            info: slice_info::<T>(s, shape, None)?,
            track: Some(s),
        })
    }

    /// A view of `s` with `shape` and element `strides` (every addressed element inside `s`).
    pub fn from_slice_strided<T: KilnElem, S: DeviceRead<T>>(
        s: &'a S,
        shape: &[usize],
        strides: &[isize],
    ) -> Result<Self> {
        Ok(TensorRef {
            info: slice_info::<T>(s, shape, Some(strides))?,
            track: Some(s),
        })
    }

    /// A view of device memory at `ptr` on GPU `device`.
    ///
    /// # Safety
    /// Every element the shape and strides address must be device memory of `device`'s primary
    /// context holding `dtype` values, readable for as long as the view and any launch given it
    /// may use it. No stream ordering is added: order the launch after the memory's producers.
    pub unsafe fn from_raw(
        ptr: u64,
        dtype: DType,
        shape: &[usize],
        strides: &[isize],
        device: usize,
    ) -> Result<Self> {
        Ok(TensorRef {
            info: TensorInfo::new("view", ptr, dtype, shape, strides, device)?.not_null("view")?,
            track: None,
        })
    }

    /// The view with its last two dimensions swapped (`A.t()` for a GEMM operand).
    pub fn t(&self) -> Self {
        TensorRef {
            info: self.info.transposed(),
            track: self.track,
        }
    }

    pub fn info(&self) -> &TensorInfo {
        &self.info
    }
    pub fn shape(&self) -> &[usize] {
        self.info.shape()
    }
    pub fn dtype(&self) -> DType {
        self.info.dtype()
    }

    /// Orders `stream` after the memory's producers (cudarc's tracking); keep the guard until
    /// the launch is enqueued.
    pub(crate) fn track<'s>(&'s self, stream: &'s CudaStream) -> Option<SyncOnDrop<'s>> {
        self.track.map(|t| t.read(stream))
    }
}

impl fmt::Debug for TensorRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TensorRef({:?})", self.info)
    }
}

/// A borrowed, writable tensor on a GPU (an op's output).
pub struct TensorMut<'a> {
    pub(crate) info: TensorInfo,
    track: Option<&'a mut dyn access::Write>,
}

fn output(info: TensorInfo) -> Result<TensorInfo> {
    if !info.is_non_overlapping() {
        return Err(Error::argument(
            "view",
            ArgumentKind::Stride,
            format!(
                "a writable view of shape {} with strides {} addresses some elements twice; an output needs one element of memory per index",
                info.shape_text(),
                info.strides_text()
            ),
        ));
    }
    Ok(info)
}

impl<'a> TensorMut<'a> {
    /// A packed row-major view of `s` with `shape`.
    pub fn from_slice<T: KilnElem, S: DeviceWrite<T>>(
        s: &'a mut S,
        shape: &[usize],
    ) -> Result<Self> {
        let info = output(slice_info::<T>(&*s, shape, None)?)?;
        Ok(TensorMut {
            info,
            track: Some(s),
        })
    }

    /// A view of `s` with `shape` and element `strides` (no element addressed twice).
    pub fn from_slice_strided<T: KilnElem, S: DeviceWrite<T>>(
        s: &'a mut S,
        shape: &[usize],
        strides: &[isize],
    ) -> Result<Self> {
        let info = output(slice_info::<T>(&*s, shape, Some(strides))?)?;
        Ok(TensorMut {
            info,
            track: Some(s),
        })
    }

    /// A writable view of device memory at `ptr` on GPU `device`.
    ///
    /// # Safety
    /// As [`TensorRef::from_raw`], and the memory must be writable and not read or written by
    /// anything else while a launch given the view may run.
    pub unsafe fn from_raw(
        ptr: u64,
        dtype: DType,
        shape: &[usize],
        strides: &[isize],
        device: usize,
    ) -> Result<Self> {
        let info = TensorInfo::new("view", ptr, dtype, shape, strides, device)?.not_null("view")?;
        Ok(TensorMut {
            info: output(info)?,
            track: None,
        })
    }

    /// The view with its last two dimensions swapped.
    pub fn t(self) -> Self {
        TensorMut {
            info: self.info.transposed(),
            track: self.track,
        }
    }

    pub fn info(&self) -> &TensorInfo {
        &self.info
    }
    pub fn shape(&self) -> &[usize] {
        self.info.shape()
    }
    pub fn dtype(&self) -> DType {
        self.info.dtype()
    }

    /// Orders `stream` after the memory's readers and writers; keep the guard until the launch
    /// is enqueued.
    pub(crate) fn track<'s>(&'s mut self, stream: &'s CudaStream) -> Option<SyncOnDrop<'s>> {
        self.track.as_mut().map(|t| t.write(stream))
    }
}

impl fmt::Debug for TensorMut<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TensorMut({:?})", self.info)
    }
}

/// A tensor as foreign callers describe it (the Python package: `data_ptr`, shape, strides,
/// dtype, device index), checked when an op or `precompile` receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawTensor {
    pub ptr: u64,
    pub dtype: DType,
    pub shape: Vec<usize>,
    /// Element strides.
    pub strides: Vec<isize>,
    pub device: usize,
}

impl RawTensor {
    /// A packed row-major tensor at `ptr`.
    pub fn contiguous(ptr: u64, dtype: DType, shape: &[usize], device: usize) -> RawTensor {
        RawTensor {
            ptr,
            dtype,
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
            device,
        }
    }

    /// A tensor without memory, for [`crate::api::Problem`]: `precompile` reads its shape,
    /// strides and dtype (and takes the base as 256-byte aligned).
    pub fn describe(dtype: DType, shape: &[usize], strides: &[isize]) -> RawTensor {
        RawTensor {
            ptr: 0,
            dtype,
            shape: shape.to_vec(),
            strides: strides.to_vec(),
            device: 0,
        }
    }

    /// Checks it as argument `arg` (a null pointer only with `allow_null`).
    pub fn info(&self, arg: &str, allow_null: bool) -> Result<TensorInfo> {
        let info = TensorInfo::new(
            arg,
            self.ptr,
            self.dtype,
            &self.shape,
            &self.strides,
            self.device,
        )?;
        if allow_null {
            Ok(info)
        } else {
            info.not_null(arg)
        }
    }
}
