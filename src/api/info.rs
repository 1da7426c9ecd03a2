//! A checked tensor description: shape, strides, element type, base address and GPU, refused
//! when a stride is negative, the span overflows or the base is misaligned; the geometry the
//! ops' checks ask of it (contiguity, overlap, span).

use std::fmt;

use super::dtype::DType;
use super::tensor::RawTensor;
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

    /// Whether the elements are packed row-major (strides of dimensions of extent 1 ignored;
    /// a tensor with no element is, whatever its strides).
    pub fn is_contiguous(&self) -> bool {
        if self.shape().contains(&0) {
            return true;
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn info(shape: &[usize], strides: &[isize]) -> TensorInfo {
        TensorInfo::new("t", 0x1000, DType::Bf16, shape, strides, 0).unwrap()
    }

    #[test]
    fn an_empty_tensor_with_packed_strides_is_contiguous() {
        // [2, 8, 0] packed: strides [8, 1, 1] (an extent 0 counts as 1), refused before.
        let s = contiguous_strides(&[2, 8, 0]);
        assert!(info(&[2, 8, 0], &s).is_contiguous());
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
