//! Rank-3 TMA tensor maps for the MoE weights: one map over [E, N, K] (K innermost), so a kernel
//! picks the expert with a coordinate instead of rewriting a descriptor per group. The encode
//! rules are checked first, so a refusal names the rule. 128B swizzle, zero fill out of bounds;
//! encoded by the crate's one encoder ([`TiledArgs`]).

use crate::device::{
    check_address_and_dims, check_box, TensorMap, TiledArgs, TmaDType, TmaSwizzle,
};
use crate::error::{Error, Result};

/// A tiled map over a 3D tensor with dim 0 contiguous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tma3d {
    pub dtype: TmaDType,
    pub addr: u64,
    /// Extents in elements, innermost first: [K, N, E].
    pub dims: [u64; 3],
    /// Bytes between consecutive indices of dims 1 and 2.
    pub strides_bytes: [u64; 2],
    /// Box in elements, innermost first.
    pub box_dims: [u32; 3],
}

impl Tma3d {
    /// A packed [outer, mid, inner] tensor loaded in boxes of {box_inner, box_mid, 1}.
    pub fn packed(
        dtype: TmaDType,
        addr: u64,
        inner: u64,
        mid: u64,
        outer: u64,
        box_inner: u32,
        box_mid: u32,
    ) -> Tma3d {
        let es = dtype.size();
        Tma3d {
            dtype,
            addr,
            dims: [inner, mid, outer],
            strides_bytes: [inner * es, inner * mid * es],
            box_dims: [box_inner, box_mid, 1],
        }
    }

    /// The same map with `outer_elems` elements from one outer index to the next (an expert
    /// stride wider than packed), or unchanged for `None`.
    pub fn with_outer_stride(mut self, outer_elems: Option<usize>) -> Tma3d {
        if let Some(e) = outer_elems {
            self.strides_bytes[1] = e as u64 * self.dtype.size();
        }
        self
    }

    /// Checks the rules `cuTensorMapEncodeTiled` enforces, naming the one broken.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let es = self.dtype.size();
        check_address_and_dims(self.addr, &self.dims)?;
        for (i, &s) in self.strides_bytes.iter().enumerate() {
            if !s.is_multiple_of(16) {
                return Err(format!(
                    "stride {} is {s} bytes, not a multiple of 16: the contiguous extent must be a multiple of {} elements for TMA",
                    i + 1,
                    16 / es
                ));
            }
            if s >= 1 << 40 {
                return Err(format!("stride {} = {s} bytes is not below 2^40", i + 1));
            }
        }
        if self.strides_bytes[0] < self.dims[0] * es
            || self.strides_bytes[1] < self.strides_bytes[0] * self.dims[1]
        {
            return Err("the strides overlap the rows they step over".into());
        }
        check_box(&self.box_dims)?;
        let inner = self.box_dims[0] as u64 * es;
        if inner != 128 {
            return Err(format!(
                "the box's inner row is {inner} bytes; the 128B swizzle here needs exactly 128"
            ));
        }
        Ok(())
    }

    pub fn box_bytes(&self) -> u64 {
        self.box_dims.iter().map(|&b| b as u64).product::<u64>() * self.dtype.size()
    }

    /// The driver's arguments for this map: rank 3, 128-byte swizzle, 256-byte L2 promotion.
    pub fn tiled(&self) -> TiledArgs {
        TiledArgs::new(
            self.dtype,
            self.addr,
            self.dims,
            self.strides_bytes,
            self.box_dims,
            TmaSwizzle::B128,
        )
    }

    /// Encodes the map (host-only; the driver must be initialised).
    pub fn encode(&self) -> Result<TensorMap> {
        self.validate()
            .map_err(|r| Error::invalid(format!("cannot build a 3D TMA map: {r}")))?;
        self.tiled()
            .encode(|| format!("cuTensorMapEncodeTiled for {self:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What this map's own encoder handed the driver before the crate had one encoder (copied
    /// from it).
    fn old_call(t: &Tma3d) -> crate::device::TmaCall {
        use cudarc::driver::sys;
        let dtype = match t.dtype {
            TmaDType::Bf16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
            TmaDType::F16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
            TmaDType::F32 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT32,
            TmaDType::U8 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_UINT8,
        };
        (
            dtype,
            3,
            t.addr,
            t.dims.to_vec(),
            t.strides_bytes.to_vec(),
            t.box_dims.to_vec(),
            vec![1u32; 3],
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    }

    #[test]
    fn the_map_hands_the_driver_what_it_did_before() {
        for t in [
            Tma3d::packed(TmaDType::Bf16, 1 << 20, 4096, 3072, 8, 64, 256),
            Tma3d::packed(TmaDType::F16, 1 << 21, 7168, 2 * 2048, 256, 64, 2 * 112),
            Tma3d::packed(TmaDType::Bf16, 4096, 64, 40, 3, 64, 128),
            Tma3d::packed(TmaDType::F32, 4096, 32, 100, 2, 32, 64),
        ] {
            assert_eq!(t.tiled().call(), old_call(&t), "{t:?}");
        }
    }

    #[test]
    fn weights_map_and_its_rules() {
        let w = Tma3d::packed(TmaDType::Bf16, 1 << 20, 4096, 3072, 8, 64, 256);
        assert_eq!(w.strides_bytes, [8192, 8192 * 3072]);
        assert_eq!(w.validate(), Ok(()));
        assert_eq!(w.box_bytes(), 32768);
        let odd = Tma3d::packed(TmaDType::Bf16, 1 << 20, 4100 - 1, 64, 2, 64, 64);
        assert!(odd
            .validate()
            .unwrap_err()
            .contains("multiple of 8 elements"));
        let wide = Tma3d {
            box_dims: [64, 512, 1],
            ..w
        };
        assert!(wide.validate().unwrap_err().contains("outside 1..=256"));
        let misaligned = Tma3d {
            addr: (1 << 20) + 8,
            ..w
        };
        assert!(misaligned
            .validate()
            .unwrap_err()
            .contains("16-byte aligned"));
    }
}
