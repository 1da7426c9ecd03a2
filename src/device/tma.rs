//! TMA tensor maps: the 128-byte descriptors (`CUtensorMap`) that tell the copy engine how a
//! global tensor is laid out and which box one load brings into shared memory. Built on the host
//! with `cuTensorMapEncodeTiled`, passed by value as a `__grid_constant__` kernel parameter
//! (`TmaMap` in `kernels/common/tma.cuh`). One encoder for the crate ([`TiledArgs`], rank 1 to 5);
//! the encode rules of a typed map are checked first, so a refusal names the rule instead of the
//! driver's bare `CUDA_ERROR_INVALID_VALUE`.

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
    /// Bytes: FP8 codes (TMA has no FP8 type; it moves them as UINT8).
    U8,
}

impl TmaDType {
    pub fn size(self) -> u64 {
        match self {
            TmaDType::Bf16 | TmaDType::F16 => 2,
            TmaDType::F32 => 4,
            TmaDType::U8 => 1,
        }
    }
    fn raw(self) -> sys::CUtensorMapDataType {
        use sys::CUtensorMapDataType as T;
        match self {
            TmaDType::Bf16 => T::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            TmaDType::F16 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            TmaDType::F32 => T::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
            TmaDType::U8 => T::CU_TENSOR_MAP_DATA_TYPE_UINT8,
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

/// The most dimensions a tiled map may have.
pub const MAX_RANK: usize = 5;

/// The arguments of one `cuTensorMapEncodeTiled` call over a tensor of rank 1 to [`MAX_RANK`]
/// (dim 0 contiguous). Every map kiln builds is encoded here: the GEMMs' [`Tma2d`], the MoE
/// weights' rank-3 map and attention's rank-4 maps each describe their tensor and hand the
/// driver these arguments. Entries past the rank are zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TiledArgs {
    pub dtype: sys::CUtensorMapDataType,
    /// Device address of element 0.
    pub addr: u64,
    rank: usize,
    dims: [u64; MAX_RANK],
    strides: [u64; MAX_RANK - 1],
    box_dims: [u32; MAX_RANK],
    elem_strides: [u32; MAX_RANK],
    pub interleave: sys::CUtensorMapInterleave,
    pub swizzle: sys::CUtensorMapSwizzle,
    pub l2_promotion: sys::CUtensorMapL2promotion,
    pub oob_fill: sys::CUtensorMapFloatOOBfill,
}

impl TiledArgs {
    /// A map of rank `R` over `dims` (elements, innermost first) whose dims 1.. are `strides`
    /// bytes apart, loaded in boxes of `box_dims` with `swizzle`: every element of the box (element
    /// strides 1), no interleave, 256-byte L2 promotion, zeros out of bounds.
    pub fn new<const R: usize, const S: usize>(
        dtype: TmaDType,
        addr: u64,
        dims: [u64; R],
        strides: [u64; S],
        box_dims: [u32; R],
        swizzle: TmaSwizzle,
    ) -> TiledArgs {
        const {
            assert!(
                R >= 1 && R <= MAX_RANK && S + 1 == R,
                "a tiled map has rank 1 to 5 and one stride fewer than dims"
            )
        };
        let mut a = TiledArgs {
            dtype: dtype.raw(),
            addr,
            rank: R,
            dims: [0; MAX_RANK],
            strides: [0; MAX_RANK - 1],
            box_dims: [0; MAX_RANK],
            elem_strides: [0; MAX_RANK],
            interleave: sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            swizzle: swizzle.raw(),
            l2_promotion: sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            oob_fill: sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        };
        a.dims[..R].copy_from_slice(&dims);
        a.strides[..S].copy_from_slice(&strides);
        a.box_dims[..R].copy_from_slice(&box_dims);
        a.elem_strides[..R].fill(1);
        a
    }

    /// These arguments with another L2 promotion.
    pub fn with_l2_promotion(self, l2_promotion: sys::CUtensorMapL2promotion) -> TiledArgs {
        TiledArgs {
            l2_promotion,
            ..self
        }
    }

    pub fn rank(&self) -> usize {
        self.rank
    }
    /// Extents in elements, innermost first.
    pub fn dims(&self) -> &[u64] {
        &self.dims[..self.rank]
    }
    /// Bytes between consecutive indices of dims 1 to rank - 1.
    pub fn strides(&self) -> &[u64] {
        &self.strides[..self.rank - 1]
    }
    /// The box one load brings, in elements, innermost first.
    pub fn box_dims(&self) -> &[u32] {
        &self.box_dims[..self.rank]
    }
    pub fn elem_strides(&self) -> &[u32] {
        &self.elem_strides[..self.rank]
    }

    /// Encodes the map (a host-only driver call; the driver must be initialised). `what` names
    /// the map in the error if the driver refuses it.
    pub fn encode(&self, what: impl FnOnce() -> String) -> Result<TensorMap> {
        let mut map = TensorMap { opaque: [0; 16] };
        // SAFETY: every array holds `rank` entries (strides rank - 1) and outlives the call;
        // `map` is 128 bytes, 128-byte aligned and writable; the call only reads the arrays and
        // writes `map`.
        let r = unsafe {
            sys::cuTensorMapEncodeTiled(
                &mut map as *mut TensorMap as *mut sys::CUtensorMap,
                self.dtype,
                self.rank as u32,
                self.addr as *mut c_void,
                self.dims.as_ptr(),
                self.strides.as_ptr(),
                self.box_dims.as_ptr(),
                self.elem_strides.as_ptr(),
                self.interleave,
                self.swizzle,
                self.l2_promotion,
                self.oob_fill,
            )
        };
        r.result()
            .map_err(|e| Error::cuda(what(), format!("{e:?}")))?;
        Ok(map)
    }
}

/// One encode call's arguments as values, for tests that compare a map with what its encoder
/// passed before: dtype, rank, address, dims, strides, box, element strides, interleave,
/// swizzle, L2 promotion, out-of-bounds fill.
#[cfg(test)]
pub(crate) type Call = (
    sys::CUtensorMapDataType,
    u32,
    u64,
    Vec<u64>,
    Vec<u64>,
    Vec<u32>,
    Vec<u32>,
    sys::CUtensorMapInterleave,
    sys::CUtensorMapSwizzle,
    sys::CUtensorMapL2promotion,
    sys::CUtensorMapFloatOOBfill,
);

#[cfg(test)]
impl TiledArgs {
    /// The arguments [`TiledArgs::encode`] passes, as values (the first `rank` entries of each
    /// array: what the driver reads).
    pub(crate) fn call(&self) -> Call {
        (
            self.dtype,
            self.rank as u32,
            self.addr,
            self.dims().to_vec(),
            self.strides().to_vec(),
            self.box_dims().to_vec(),
            self.elem_strides().to_vec(),
            self.interleave,
            self.swizzle,
            self.l2_promotion,
            self.oob_fill,
        )
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
        check_address_and_dims(self.addr, &self.dims)?;
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
        check_box(&self.box_dims)?;
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

    /// The driver's arguments for this map: rank 2, its L2 promotion from the row stride.
    pub fn tiled(&self) -> TiledArgs {
        self.tiled_with(None)
    }

    /// [`Tma2d::tiled`] with the L2 promotion `promotion` forces, if any.
    fn tiled_with(&self, promotion: Option<L2Promotion>) -> TiledArgs {
        TiledArgs::new(
            self.dtype,
            self.addr,
            self.dims,
            [self.row_stride_bytes],
            self.box_dims,
            self.swizzle,
        )
        .with_l2_promotion(l2_promotion(self.row_stride_bytes, promotion))
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
        self.tiled_with(promotion)
            .encode(|| format!("cuTensorMapEncodeTiled for {self:?}"))
    }
}

/// The encoder's rules on the address and the extents of a map of any rank: a 16-byte aligned
/// address, every extent in 1..=2^32.
pub(crate) fn check_address_and_dims(addr: u64, dims: &[u64]) -> std::result::Result<(), String> {
    if !addr.is_multiple_of(16) {
        return Err(format!(
            "the global address {addr:#x} is not 16-byte aligned (TMA needs 16)"
        ));
    }
    for (i, &d) in dims.iter().enumerate() {
        if d == 0 || d > 1 << 32 {
            return Err(format!("dimension {i} = {d} is outside 1..=2^32"));
        }
    }
    Ok(())
}

/// The encoder's rule on a box of any rank: every side in 1..=256 elements.
pub(crate) fn check_box(box_dims: &[u32]) -> std::result::Result<(), String> {
    for (i, &b) in box_dims.iter().enumerate() {
        if b == 0 || b > 256 {
            return Err(format!("box dimension {i} = {b} is outside 1..=256"));
        }
    }
    Ok(())
}

/// L2 promotion of a 2D map whose rows are `row_stride_bytes` apart: 256 B where rows start on
/// 128-byte lines, 128 B where they do not (a 128-byte box row then straddles two lines: at
/// 4096x4096x4088 a GEMM ran ~7 % faster with 128 B or none than with 256 B, and no slower at
/// K 4096; H100, GEMM ledger #21). `KILN_TMA_PROMOTION` (`none`, `64`, `128`, `256`) overrides it, for
/// timing one against another.
pub(crate) fn l2_promotion(
    row_stride_bytes: u64,
    forced: Option<L2Promotion>,
) -> sys::CUtensorMapL2promotion {
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

    /// What the 2D encoder handed the driver before the crate had one encoder (copied from it):
    /// dtype, rank, address, dims, strides, box, element strides, interleave, swizzle, L2
    /// promotion, out-of-bounds fill.
    fn old_2d_call(t: &Tma2d) -> Call {
        (
            t.dtype.raw(),
            2,
            t.addr,
            t.dims.to_vec(),
            vec![t.row_stride_bytes],
            t.box_dims.to_vec(),
            vec![1u32, 1],
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            t.swizzle.raw(),
            l2_promotion(t.row_stride_bytes, None),
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }

    #[test]
    fn the_2d_map_hands_the_driver_what_it_did_before() {
        let shapes = [
            base(),
            // rows off 128-byte lines: 128-byte promotion
            Tma2d {
                dims: [4088, 4096],
                row_stride_bytes: 8176,
                ..base()
            },
            Tma2d {
                dtype: TmaDType::F32,
                dims: [100, 7],
                row_stride_bytes: 512,
                box_dims: [32, 64],
                swizzle: TmaSwizzle::B128,
                ..base()
            },
            Tma2d {
                dtype: TmaDType::F16,
                box_dims: [32, 128],
                swizzle: TmaSwizzle::B64,
                ..base()
            },
            Tma2d {
                box_dims: [8, 8],
                swizzle: TmaSwizzle::None,
                ..base()
            },
        ];
        for t in shapes {
            assert_eq!(t.tiled().call(), old_2d_call(&t), "{t:?}");
        }
    }

    #[test]
    fn every_rank_from_1_to_5_is_laid_out_in_the_first_entries() {
        let one = TiledArgs::new(TmaDType::F32, 256, [1000], [], [64], TmaSwizzle::None);
        assert_eq!(one.rank(), 1);
        assert_eq!(
            (one.dims(), one.strides(), one.box_dims()),
            (&[1000u64][..], &[][..], &[64u32][..])
        );
        let five = TiledArgs::new(
            TmaDType::Bf16,
            256,
            [64, 2, 3, 4, 5],
            [128, 256, 768, 3072],
            [64, 2, 1, 1, 1],
            TmaSwizzle::B128,
        );
        assert_eq!(five.rank(), 5);
        assert_eq!(five.elem_strides(), &[1; 5]);
        assert_eq!(five.strides(), &[128, 256, 768, 3072]);
        assert_eq!(
            five.with_l2_promotion(sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_NONE)
                .l2_promotion,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_NONE
        );
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
