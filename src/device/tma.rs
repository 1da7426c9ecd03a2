//! TMA tensor maps: the 128-byte descriptors (`CUtensorMap`) that tell the copy engine how a
//! global tensor is laid out and which box one load brings into shared memory. Built on the host
//! with `cuTensorMapEncodeTiled`, passed by value as a `__grid_constant__` kernel parameter
//! (`TmaMap` in `kernels/common/tma.cuh`). The encode rules are checked here first, so a refusal
//! names the rule instead of the driver's bare `CUDA_ERROR_INVALID_VALUE`.

use std::ffi::c_void;

use cudarc::driver::sys;

use crate::error::{Error, Result};
use crate::overrides::L2Promotion;

/// An encoded tensor map. 128-byte aligned: CUDA 13's `CUtensorMap` asks for 128 (CUDA 12 for
/// 64), and the stricter one satisfies both. Pass `as_param()` in a launch's parameter array.
#[repr(C, align(128))]
#[derive(Clone, Copy)]
pub struct TensorMap {
    opaque: [u64; 16],
}

impl TensorMap {
    /// The pointer a launch's `kernelParams` entry takes for this parameter (the driver copies
    /// the 128 bytes at launch).
    pub fn as_param(&mut self) -> *mut c_void {
        self as *mut TensorMap as *mut c_void
    }
}

impl std::fmt::Debug for TensorMap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("TensorMap { .. }")
    }
}

/// Element types the GEMMs load through TMA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TmaDType {
    Bf16,
    F16,
    F32,
}

impl TmaDType {
    pub fn size(self) -> u64 {
        match self {
            TmaDType::Bf16 | TmaDType::F16 => 2,
            TmaDType::F32 => 4,
        }
    }
    fn raw(self) -> sys::CUtensorMapDataType {
        use sys::CUtensorMapDataType as T;
        match self {
            TmaDType::Bf16 => T::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            TmaDType::F16 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            TmaDType::F32 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
        }
    }
}

/// Shared-memory swizzle of the box (the TMA enum order: 128B is 3 here but 1 in a wgmma
/// descriptor).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TmaSwizzle {
    None,
    B32,
    B64,
    B128,
}

impl TmaSwizzle {
    /// The widest inner box row, in bytes, this swizzle allows.
    pub fn span(self) -> Option<u64> {
        match self {
            TmaSwizzle::None => None,
            TmaSwizzle::B32 => Some(32),
            TmaSwizzle::B64 => Some(64),
            TmaSwizzle::B128 => Some(128),
        }
    }
    fn raw(self) -> sys::CUtensorMapSwizzle {
        use sys::CUtensorMapSwizzle as S;
        match self {
            TmaSwizzle::None => S::CU_TENSOR_MAP_SWIZZLE_NONE,
            TmaSwizzle::B32 => S::CU_TENSOR_MAP_SWIZZLE_32B,
            TmaSwizzle::B64 => S::CU_TENSOR_MAP_SWIZZLE_64B,
            TmaSwizzle::B128 => S::CU_TENSOR_MAP_SWIZZLE_128B,
        }
    }
}

/// A 2D tiled map over a strided matrix: dim 0 is contiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tma2d {
    pub dtype: TmaDType,
    /// Device address of element (0, 0).
    pub addr: u64,
    /// Extents in elements: [contiguous, strided]. The true sizes: TMA zero-fills beyond them.
    pub dims: [u64; 2],
    /// Bytes from one row (dim-1 index) to the next.
    pub row_stride_bytes: u64,
    /// Box in elements: [contiguous, strided].
    pub box_dims: [u32; 2],
    pub swizzle: TmaSwizzle,
}

impl Tma2d {
    /// Checks the rules `cuTensorMapEncodeTiled` enforces, naming the one broken.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let es = self.dtype.size();
        if !self.addr.is_multiple_of(16) {
            return Err(format!(
                "the global address {:#x} is not 16-byte aligned (TMA needs 16)",
                self.addr
            ));
        }
        for (i, &d) in self.dims.iter().enumerate() {
            if d == 0 || d > 1 << 32 {
                return Err(format!("dimension {i} = {d} is outside 1..=2^32"));
            }
        }
        if !self.row_stride_bytes.is_multiple_of(16) {
            return Err(format!(
                "the row stride is {} bytes, not a multiple of 16: the leading dimension must \
                 be a multiple of {} elements for TMA",
                self.row_stride_bytes,
                16 / es
            ));
        }
        if self.row_stride_bytes >= 1 << 40 {
            return Err(format!(
                "the row stride {} bytes is not below 2^40",
                self.row_stride_bytes
            ));
        }
        if self.row_stride_bytes < self.dims[0] * es {
            return Err(format!(
                "the row stride {} bytes is shorter than a row of {} elements",
                self.row_stride_bytes, self.dims[0]
            ));
        }
        for (i, &b) in self.box_dims.iter().enumerate() {
            if b == 0 || b > 256 {
                return Err(format!("box dimension {i} = {b} is outside 1..=256"));
            }
        }
        let inner = self.box_dims[0] as u64 * es;
        if !inner.is_multiple_of(16) {
            return Err(format!(
                "the box's inner row is {inner} bytes, not a multiple of 16"
            ));
        }
        if let Some(span) = self.swizzle.span() {
            if inner > span {
                return Err(format!(
                    "the box's inner row is {inner} bytes, wider than the {span}-byte swizzle span"
                ));
            }
        }
        Ok(())
    }

    /// Bytes one load of the box writes to shared memory (out-of-bounds parts included).
    pub fn box_bytes(&self) -> u64 {
        self.box_dims[0] as u64 * self.box_dims[1] as u64 * self.dtype.size()
    }

    /// Encodes the map (a host-only driver call; the driver must be initialised) with the L2
    /// promotion its rows call for.
    pub fn encode(&self) -> Result<TensorMap> {
        self.encode_with(None)
    }

    /// [`Tma2d::encode`] with the L2 promotion `KILN_TMA_PROMOTION` forces, if any
    /// (`ctx.overrides.tma.promotion`).
    pub fn encode_with(&self, promotion: Option<L2Promotion>) -> Result<TensorMap> {
        self.validate()
            .map_err(|r| Error::invalid(format!("cannot build a TMA map: {r}")))?;
        let mut map = TensorMap { opaque: [0; 16] };
        let dims = self.dims;
        let strides = [self.row_stride_bytes];
        let boxes = self.box_dims;
        let elem_strides = [1u32, 1];
        // SAFETY: every array has the rank's length (strides rank - 1); `map` is 128 bytes,
        // 128-byte aligned and writable; the call only reads the arrays and writes `map`.
        let r = unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut map as *mut TensorMap as *mut sys::CUtensorMap,
                self.dtype.raw(),
                2,
                self.addr as *mut c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                elem_strides.as_ptr(),
                sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                self.swizzle.raw(),
                l2_promotion(self.row_stride_bytes, promotion),
                sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
            )
        };
        r.result().map_err(|e| {
            Error::cuda(
                format!("cuTensorMapEncodeTiled for {self:?}"),
                format!("{e:?}"),
            )
        })?;
        Ok(map)
    }
}

/// L2 promotion of a 2D map whose rows are `row_stride_bytes` apart: 256 B where rows start on
/// 128-byte lines, 128 B where they do not (a 128-byte box row then straddles two lines: at
/// 4096x4096x4088 a GEMM ran ~7 % faster with 128 B or none than with 256 B, and no slower at
/// K 4096; H100, session 7). `KILN_TMA_PROMOTION` (`none`, `64`, `128`, `256`) overrides it, for
/// timing one against another.
fn l2_promotion(row_stride_bytes: u64, forced: Option<L2Promotion>) -> sys::CUtensorMapL2promotion {
    use sys::CUtensorMapL2promotion as P;
    match forced {
        Some(L2Promotion::None) => P::CU_TENSOR_MAP_L2_PROMOTION_NONE,
        Some(L2Promotion::B64) => P::CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
        Some(L2Promotion::B128) => P::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        Some(L2Promotion::B256) => P::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        None if !row_stride_bytes.is_multiple_of(128) => P::CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
        None => P::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Tma2d {
        Tma2d {
            dtype: TmaDType::Bf16,
            addr: 0x7f00_0000_0000,
            dims: [4096, 4096],
            row_stride_bytes: 8192,
            box_dims: [64, 256],
            swizzle: TmaSwizzle::B128,
        }
    }

    #[test]
    fn the_map_is_128_bytes_and_aligned() {
        assert_eq!(std::mem::size_of::<TensorMap>(), 128);
        assert_eq!(std::mem::align_of::<TensorMap>() % 64, 0);
        assert_eq!(
            std::mem::size_of::<sys::CUtensorMap>(),
            std::mem::size_of::<TensorMap>()
        );
        assert!(std::mem::align_of::<TensorMap>() >= std::mem::align_of::<sys::CUtensorMap>());
    }

    #[test]
    fn each_rule_is_named() {
        assert_eq!(base().validate(), Ok(()));
        assert_eq!(base().box_bytes(), 32768);
        let e = |t: Tma2d| t.validate().unwrap_err();
        assert!(e(Tma2d {
            addr: 0x7f00_0000_0008,
            ..base()
        })
        .contains("16-byte aligned"));
        assert!(e(Tma2d {
            row_stride_bytes: 8190,
            ..base()
        })
        .contains("multiple of 8 elements"));
        assert!(e(Tma2d {
            box_dims: [64, 512],
            ..base()
        })
        .contains("outside 1..=256"));
        assert!(e(Tma2d {
            box_dims: [128, 64],
            ..base()
        })
        .contains("128-byte swizzle span"));
        assert!(e(Tma2d {
            box_dims: [4, 64],
            ..base()
        })
        .contains("not a multiple of 16"));
        assert!(e(Tma2d {
            dims: [0, 4],
            ..base()
        })
        .contains("dimension 0"));
        assert!(e(Tma2d {
            row_stride_bytes: 16,
            ..base()
        })
        .contains("shorter than a row"));
    }
}
