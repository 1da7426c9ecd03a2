//! Element types of the public API's views: the float types kiln's kernels read and write, i32
//! for MoE offsets and counts, i64 for expert indices as torch gives them; `KilnElem` ties them
//! to the Rust types of cudarc buffers.

use std::fmt;

use half::{bf16, f16};

use crate::ops::gemm::DType as OpDType;

/// The element type of a view.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    Bf16,
    F16,
    F32,
    I32,
    /// Expert indices as torch's top-k returns them (the MoE layer's `top_k_index`).
    I64,
    /// FP8 e4m3fn codes, one byte each (`u8` memory): the FP8 ops' operands.
    E4m3,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::E4m3 => 1,
            DType::Bf16 | DType::F16 => 2,
            DType::F32 | DType::I32 => 4,
            DType::I64 => 8,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::E4m3 => "e4m3",
        }
    }

    /// The ops' float type, or `None` for integers and FP8 codes.
    pub(crate) fn float(self) -> Option<OpDType> {
        match self {
            DType::Bf16 => Some(OpDType::Bf16),
            DType::F16 => Some(OpDType::F16),
            DType::F32 => Some(OpDType::F32),
            DType::I32 | DType::I64 | DType::E4m3 => None,
        }
    }
}

impl From<OpDType> for DType {
    fn from(d: OpDType) -> Self {
        match d {
            OpDType::Bf16 => DType::Bf16,
            OpDType::F16 => DType::F16,
            OpDType::F32 => DType::F32,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    pub trait Sealed {}
}

/// A Rust element type a view can be made of (`half::bf16`, `half::f16`, `f32`, `i32`, `i64`, and `u8`
/// for FP8 e4m3fn codes).
pub trait KilnElem: sealed::Sealed + Copy + 'static {
    const DTYPE: DType;
}

macro_rules! elem {
    ($t:ty, $d:expr) => {
        impl sealed::Sealed for $t {}
        impl KilnElem for $t {
            const DTYPE: DType = $d;
        }
    };
}

elem!(bf16, DType::Bf16);
elem!(f16, DType::F16);
elem!(f32, DType::F32);
elem!(i32, DType::I32);
elem!(i64, DType::I64);
elem!(u8, DType::E4m3);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_name_their_dtype() {
        assert_eq!(<bf16 as KilnElem>::DTYPE, DType::Bf16);
        assert_eq!(<i32 as KilnElem>::DTYPE.size(), 4);
        assert_eq!(DType::F16.float(), Some(OpDType::F16));
        assert_eq!(DType::I32.float(), None);
        assert_eq!(DType::from(OpDType::F32).to_string(), "f32");
    }
}
