//! Host matrices in kiln's storage types: random fills, poison, and conversion to f64.

use half::{bf16, f16};
use rand::{Rng, SeedableRng};

use crate::ops::gemm::DType;

/// Raw elements of one dtype as they sit in device memory.
#[derive(Debug, Clone, PartialEq)]
pub enum HostData {
    Bf16(Vec<u16>),
    F16(Vec<u16>),
    F32(Vec<f32>),
}

impl HostData {
    /// `len` values uniform in [-1, 1), rounded to `dtype`, from `seed`.
    pub fn random(dtype: DType, len: usize, seed: u64) -> HostData {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        match dtype {
            DType::Bf16 => HostData::Bf16(
                (0..len)
                    .map(|_| bf16::from_f32(rng.gen_range(-1.0f32..1.0)).to_bits())
                    .collect(),
            ),
            DType::F16 => HostData::F16(
                (0..len)
                    .map(|_| f16::from_f32(rng.gen_range(-1.0f32..1.0)).to_bits())
                    .collect(),
            ),
            DType::F32 => HostData::F32((0..len).map(|_| rng.gen_range(-1.0f32..1.0)).collect()),
        }
    }

    /// All-ones bits: NaN in bf16, f16 and f32, so an unwritten output element cannot pass.
    pub fn poison(dtype: DType, len: usize) -> HostData {
        match dtype {
            DType::Bf16 => HostData::Bf16(vec![0xFFFF; len]),
            DType::F16 => HostData::F16(vec![0xFFFF; len]),
            DType::F32 => HostData::F32(vec![f32::from_bits(0xFFFF_FFFF); len]),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            HostData::Bf16(v) | HostData::F16(v) => v.len(),
            HostData::F32(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn dtype(&self) -> DType {
        match self {
            HostData::Bf16(_) => DType::Bf16,
            HostData::F16(_) => DType::F16,
            HostData::F32(_) => DType::F32,
        }
    }

    pub fn get(&self, i: usize) -> f64 {
        match self {
            HostData::Bf16(v) => bf16::from_bits(v[i]).to_f64(),
            HostData::F16(v) => f16::from_bits(v[i]).to_f64(),
            HostData::F32(v) => v[i] as f64,
        }
    }

    pub fn to_f64(&self) -> Vec<f64> {
        (0..self.len()).map(|i| self.get(i)).collect()
    }

    /// The raw bytes, for upload.
    pub fn bytes(&self) -> &[u8] {
        fn as_bytes<T>(v: &[T]) -> &[u8] {
            // SAFETY: u16/f32 have no padding and any byte view of them is valid.
            unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
        }
        match self {
            HostData::Bf16(v) | HostData::F16(v) => as_bytes(v),
            HostData::F32(v) => as_bytes(v),
        }
    }

    /// Rebuilds from downloaded bytes.
    pub fn from_bytes(dtype: DType, bytes: &[u8]) -> HostData {
        match dtype {
            DType::Bf16 | DType::F16 => {
                let v: Vec<u16> = bytes
                    .chunks_exact(2)
                    .map(|c| u16::from_le_bytes([c[0], c[1]]))
                    .collect();
                if dtype == DType::Bf16 {
                    HostData::Bf16(v)
                } else {
                    HostData::F16(v)
                }
            }
            DType::F32 => HostData::F32(
                bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_is_nonzero_in_range_and_seeded() {
        let a = HostData::random(DType::Bf16, 1000, 7);
        assert_eq!(a, HostData::random(DType::Bf16, 1000, 7));
        assert_ne!(a, HostData::random(DType::Bf16, 1000, 8));
        let v = a.to_f64();
        assert!(v.iter().all(|x| (-1.0..=1.0).contains(x)));
        assert!(v.iter().filter(|x| **x == 0.0).count() < 10);
    }

    #[test]
    fn poison_is_nan_and_bytes_round_trip() {
        for d in [DType::Bf16, DType::F16, DType::F32] {
            let p = HostData::poison(d, 3);
            assert!(p.get(1).is_nan());
            let r = HostData::random(d, 5, 1);
            assert_eq!(HostData::from_bytes(d, r.bytes()), r);
        }
    }
}
