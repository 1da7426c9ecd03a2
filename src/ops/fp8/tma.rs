//! TMA tensor maps over FP8 operands: a K-major [rows, K] matrix of bytes (TMA has no FP8 type;
//! it moves them as UINT8), loaded in boxes of 128 bytes of K (one 128B-swizzle row, one K block
//! of 128 elements) by `box_rows` rows. The encode rules are checked first, so a refusal names
//! the rule, not the driver's bare `CUDA_ERROR_INVALID_VALUE`.

use std::ffi::c_void;

use cudarc::driver::sys;

use crate::error::{Error, Result};
use crate::overrides::L2Promotion;

/// An encoded map (the 128-byte `CUtensorMap`), passed by value as a `__grid_constant__`
/// `TmaMap` kernel parameter.
#[repr(C, align(128))]
#[derive(Clone, Copy)]
pub struct Fp8TensorMap {
    opaque: [u64; 16],
}

impl Fp8TensorMap {
    pub fn as_param(&mut self) -> *mut c_void {
        self as *mut Fp8TensorMap as *mut c_void
    }
}

/// A K-major FP8 operand as TMA sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fp8Operand {
    pub addr: u64,
    pub rows: u64,
    pub k: u64,
    /// Bytes from one row to the next (the leading dimension; one byte per element).
    pub ld: u64,
    /// Rows per box (the tile's M or N extent).
    pub box_rows: u32,
}

/// Bytes of K per box: one 128-byte swizzle row.
pub const BOX_K: u32 = 128;

impl Fp8Operand {
    /// Checks the rules `cuTensorMapEncodeTiled` enforces, naming the one broken.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if !self.addr.is_multiple_of(16) {
            return Err(format!(
                "the operand's address {:#x} is not 16-byte aligned (TMA needs 16)",
                self.addr
            ));
        }
        for (what, d) in [("rows", self.rows), ("K", self.k)] {
            if d == 0 || d > 1 << 31 {
                return Err(format!("{what} = {d} is outside 1..=2^31"));
            }
        }
        if !self.ld.is_multiple_of(16) {
            return Err(format!(
                "the leading dimension {} is not a multiple of 16 bytes (TMA's row stride rule)",
                self.ld
            ));
        }
        if self.ld < self.k || self.ld >= 1 << 40 {
            return Err(format!(
                "the leading dimension {} is shorter than K = {} or not below 2^40",
                self.ld, self.k
            ));
        }
        if self.box_rows == 0 || self.box_rows > 256 {
            return Err(format!(
                "a box of {} rows is outside 1..=256",
                self.box_rows
            ));
        }
        Ok(())
    }

    /// Bytes one load of the box writes to shared memory (zero fill included).
    pub fn box_bytes(&self) -> u64 {
        BOX_K as u64 * self.box_rows as u64
    }

    /// Encodes the map (host-only; the driver must be initialised).
    pub fn encode(&self) -> Result<Fp8TensorMap> {
        self.encode_with(None)
    }

    /// [`Fp8Operand::encode`] with the L2 promotion `promotion` (`KILN_TMA_PROMOTION`, for
    /// timing one against another), else 256 B.
    pub fn encode_with(&self, promotion: Option<L2Promotion>) -> Result<Fp8TensorMap> {
        self.validate()
            .map_err(|r| Error::invalid(format!("cannot build an FP8 TMA map: {r}")))?;
        let mut map = Fp8TensorMap { opaque: [0; 16] };
        let dims = [self.k, self.rows];
        let strides = [self.ld];
        let boxes = [BOX_K, self.box_rows];
        let elem_strides = [1u32, 1];
        // SAFETY: every array has the rank's length (strides rank - 1); `map` is 128 bytes,
        // 128-byte aligned and writable; the call only reads the arrays and writes `map`.
        let r = unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut map as *mut Fp8TensorMap as *mut sys::CUtensorMap,
                sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
                2,
                self.addr as *mut c_void,
                dims.as_ptr(),
                strides.as_ptr(),
                boxes.as_ptr(),
                elem_strides.as_ptr(),
                sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
                sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
                // 256 B whatever the rows' alignment unless told (the FP8 GEMM's as timed)
                crate::device::l2_promotion(0, promotion),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> Fp8Operand {
        Fp8Operand {
            addr: 1 << 20,
            rows: 4096,
            k: 7168,
            ld: 7168,
            box_rows: 128,
        }
    }

    #[test]
    fn the_map_matches_the_driver_type() {
        assert_eq!(
            std::mem::size_of::<Fp8TensorMap>(),
            std::mem::size_of::<sys::CUtensorMap>()
        );
        assert!(std::mem::align_of::<Fp8TensorMap>() >= std::mem::align_of::<sys::CUtensorMap>());
    }

    #[test]
    fn each_rule_is_named() {
        assert_eq!(base().validate(), Ok(()));
        assert_eq!(base().box_bytes(), 16384);
        let e = |o: Fp8Operand| o.validate().unwrap_err();
        assert!(e(Fp8Operand {
            addr: (1 << 20) + 8,
            ..base()
        })
        .contains("16-byte aligned"));
        assert!(e(Fp8Operand {
            ld: 7176 + 4,
            ..base()
        })
        .contains("multiple of 16"));
        assert!(e(Fp8Operand { ld: 16, ..base() }).contains("shorter than K"));
        assert!(e(Fp8Operand {
            box_rows: 320,
            ..base()
        })
        .contains("outside 1..=256"));
        assert!(e(Fp8Operand { rows: 0, ..base() }).contains("rows = 0"));
        // K = 16 (one partial K block) is fine: TMA zero-fills the rest of the box
        assert_eq!(
            Fp8Operand {
                k: 16,
                ld: 16,
                ..base()
            }
            .validate(),
            Ok(())
        );
    }
}
