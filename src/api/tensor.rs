//! Typed views of device memory for the public API: shape, strides, element type, base address
//! and GPU of a tensor, checked when the view is made, over a cudarc buffer (borrowed, with its
//! stream tracking) or a raw device pointer (for foreign callers).

use std::fmt;

use cudarc::driver::{
    CudaSlice, CudaStream, CudaView, CudaViewMut, DevicePtr, DevicePtrMut, DeviceSlice, SyncOnDrop,
};

use super::dtype::{DType, KilnElem};
use crate::error::{ArgumentKind, Error, Result};

/// Most dimensions a view has (attention's 4-D tensors).
pub const MAX_RANK: usize = 4;

/// A checked tensor description: every addressed element lies in the memory it was made from,
/// strides are non-negative, the base is aligned to the element size.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct TensorInfo {
    ptr: u64,
    dtype: DType,
    rank: usize,
    shape: [usize; MAX_RANK],
    strides: [usize; MAX_RANK],
    device: usize,
}

fn list<T: fmt::Display>(v: &[T]) -> String {
    let parts: Vec<String> = v.iter().map(|x| x.to_string()).collect();
    format!("[{}]", parts.join(", "))
}

impl TensorInfo {
    /// Checks and describes a tensor called `arg`: rank, strides, size and alignment (see
    /// [`TensorInfo::within`] and [`TensorInfo::not_null`] for the memory itself).
    pub fn new(
        arg: &str,
        ptr: u64,
        dtype: DType,
        shape: &[usize],
        strides: &[isize],
        device: usize,
    ) -> Result<TensorInfo> {
        let shape_err = |m: String| Error::argument(arg, ArgumentKind::Shape, m);
        let rank = shape.len();
        if rank == 0 || rank > MAX_RANK {
            return Err(shape_err(format!(
                "`{arg}` has {rank} dimensions; kiln's views have 1 to {MAX_RANK}"
            )));
        }
        if strides.len() != rank {
            return Err(shape_err(format!(
                "`{arg}` has {rank} dimensions but {} strides; give one stride per dimension",
                strides.len()
            )));
        }
        let mut info = TensorInfo {
            ptr,
            dtype,
            rank,
            shape: [0; MAX_RANK],
            strides: [0; MAX_RANK],
            device,
        };
        for (i, (&n, &s)) in shape.iter().zip(strides).enumerate() {
            if s < 0 {
                return Err(Error::argument(
                    arg,
                    ArgumentKind::Stride,
                    format!(
                        "`{arg}` has stride {s} in dimension {i}; kiln reads tensors with non-negative strides"
                    ),
                ));
            }
            info.shape[i] = n;
            info.strides[i] = s as usize;
        }
        let too_big = || {
            shape_err(format!(
                "`{arg}` of shape {} with strides {} spans more memory than a GPU addresses",
                list(shape),
                list(strides)
            ))
        };
        let span = info.checked_span().ok_or_else(too_big)?;
        let bytes = span.checked_mul(dtype.size()).ok_or_else(too_big)?;
        if ptr.checked_add(bytes as u64).is_none() {
            return Err(too_big());
        }
        if !ptr.is_multiple_of(dtype.size() as u64) {
            return Err(Error::argument(
                arg,
                ArgumentKind::Bounds,
                format!(
                    "`{arg}` starts at {ptr:#x}, which is not aligned to its {}-byte {} elements",
                    dtype.size(),
                    dtype
                ),
            ));
        }
        Ok(info)
    }

    /// Refuses a view that reaches past the `capacity` elements of its memory.
    pub fn within(self, arg: &str, capacity: usize) -> Result<TensorInfo> {
        let span = self.span();
        if span > capacity {
            return Err(Error::argument(
                arg,
                ArgumentKind::Bounds,
                format!(
                    "`{arg}` of shape {} with strides {} reaches element {} but its buffer holds {capacity} elements",
                    self.shape_text(),
                    self.strides_text(),
                    span - 1
                ),
            ));
        }
        Ok(self)
    }

    /// Refuses a null base address for a tensor that has elements.
    pub fn not_null(self, arg: &str) -> Result<TensorInfo> {
        if self.ptr == 0 && self.span() > 0 {
            return Err(Error::argument(
                arg,
                ArgumentKind::Bounds,
                format!("`{arg}` is a null pointer; pass the tensor's device address"),
            ));
        }
        Ok(self)
    }

    /// 1 + the largest element offset (0 for an empty tensor), or `None` on overflow.
    fn checked_span(&self) -> Option<usize> {
        if self.shape().contains(&0) {
            return Some(0);
        }
        let mut last = 0usize;
        for (&n, &s) in self.shape().iter().zip(self.strides()) {
            last = last.checked_add((n - 1).checked_mul(s)?)?;
        }
        last.checked_add(1)
    }

    pub fn ptr(&self) -> u64 {
        self.ptr
    }
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    pub fn rank(&self) -> usize {
        self.rank
    }
    pub fn shape(&self) -> &[usize] {
        &self.shape[..self.rank]
    }
    /// Strides in elements.
    pub fn strides(&self) -> &[usize] {
        &self.strides[..self.rank]
    }
    pub fn device(&self) -> usize {
        self.device
    }
    pub fn numel(&self) -> usize {
        self.shape().iter().product()
    }
    /// Elements from the base to one past the last addressed element.
    pub fn span(&self) -> usize {
        self.checked_span().unwrap_or(usize::MAX)
    }
    /// Bytes from the base to one past the last addressed element.
    pub fn span_bytes(&self) -> usize {
        self.span().saturating_mul(self.dtype.size())
    }

    /// Whether the elements are packed row-major (strides of dimensions of extent 1 ignored).
    pub fn is_contiguous(&self) -> bool {
        let mut want = 1usize;
        for (&n, &s) in self.shape().iter().zip(self.strides()).rev() {
            if n > 1 && s != want {
                return false;
            }
            want = want.saturating_mul(n);
        }
        true
    }

    /// Whether no two indices address the same element (a sufficient test: each dimension's
    /// stride, smallest first, steps past everything the smaller ones span).
    pub fn is_non_overlapping(&self) -> bool {
        let mut dims: Vec<(usize, usize)> = self
            .shape()
            .iter()
            .zip(self.strides())
            .filter(|(&n, _)| n > 1)
            .map(|(&n, &s)| (s, n))
            .collect();
        dims.sort_unstable();
        let mut reach = 1usize;
        for (s, n) in dims {
            if s < reach {
                return false;
            }
            reach = reach.saturating_add((n - 1).saturating_mul(s));
        }
        true
    }

    /// The same memory with the last two dimensions swapped (a matrix transpose).
    pub fn transposed(&self) -> TensorInfo {
        let mut t = *self;
        if t.rank >= 2 {
            t.shape.swap(t.rank - 2, t.rank - 1);
            t.strides.swap(t.rank - 2, t.rank - 1);
        }
        t
    }

    /// `[2, 3]`: the shape as the error messages print it.
    pub fn shape_text(&self) -> String {
        list(self.shape())
    }
    pub fn strides_text(&self) -> String {
        list(self.strides())
    }

    /// The same tensor as a [`RawTensor`].
    pub fn to_raw(&self) -> RawTensor {
        RawTensor {
            ptr: self.ptr,
            dtype: self.dtype,
            shape: self.shape().to_vec(),
            strides: self.strides().iter().map(|&s| s as isize).collect(),
            device: self.device,
        }
    }
}

impl fmt::Debug for TensorInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {} strides {} at {:#x} on GPU {}",
            self.dtype,
            self.shape_text(),
            self.strides_text(),
            self.ptr,
            self.device
        )
    }
}

/// Packed row-major strides of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<isize> {
    let mut s = vec![1isize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1].saturating_mul(shape[i + 1].max(1) as isize);
    }
    s
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn info(shape: &[usize], strides: &[isize]) -> TensorInfo {
        TensorInfo::new("t", 0x1000, DType::Bf16, shape, strides, 0).unwrap()
    }

    #[test]
    fn packed_strides_and_spans() {
        assert_eq!(contiguous_strides(&[2, 3, 4]), vec![12, 4, 1]);
        assert_eq!(contiguous_strides(&[5]), vec![1]);
        let t = info(&[2, 3, 4], &[12, 4, 1]);
        assert_eq!((t.numel(), t.span(), t.span_bytes()), (24, 24, 48));
        assert!(t.is_contiguous() && t.is_non_overlapping());
        assert_eq!(info(&[3, 0], &[1, 1]).span(), 0);
    }

    #[test]
    fn overlap_is_found_in_any_order_of_strides() {
        assert!(info(&[4, 8], &[1, 4]).is_non_overlapping());
        assert!(!info(&[4, 8], &[1, 3]).is_non_overlapping());
        assert!(info(&[2, 3, 4], &[1, 2, 6]).is_non_overlapping());
        // extent-1 dimensions never overlap, whatever their stride
        assert!(info(&[1, 8], &[0, 1]).is_non_overlapping());
    }
}
