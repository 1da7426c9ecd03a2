//! The attention harness: verification against the float64 reference, timing, and the shape
//! suites with the boundaries (lengths 1, 17, 127, 128, 129, 1000; batch 1; one head; Sq ≠ Skv;
//! GQA/MQA; every head dim; causal and not; both layouts; both dtypes); the backward's likewise.

pub mod backward_bench;
pub mod backward_shapes;
pub mod backward_varlen;
pub mod backward_verify;
pub mod bench;
pub mod decode;
pub mod decode_check;
pub mod shapes;
pub mod varlen;
pub mod varlen_bad;
pub mod verify;

use crate::device::{Context, DeviceBuffer};
use crate::error::Result;
use crate::harness::device_data::random_buffer;
use crate::ops::gemm::DType;
use crate::reference::data::HostData;

/// `N` inputs of `dtype` (Q, K, V, ...) of these element counts on the host, the i-th random
/// from `seed + i`: what a check draws and its float64 reference reads.
pub fn host_inputs<const N: usize>(dtype: DType, elems: [usize; N], seed: u64) -> [HostData; N] {
    std::array::from_fn(|i| HostData::random(dtype, elems[i], seed.wrapping_add(i as u64)))
}

/// `N` inputs of `dtype` made on the GPU, the i-th from `seed + i` ([`random_buffer`]): what a
/// bench times.
pub fn device_inputs<const N: usize>(
    ctx: &Context,
    dtype: DType,
    elems: [usize; N],
    seed: u64,
) -> Result<[DeviceBuffer; N]> {
    all(std::array::from_fn(|i| {
        random_buffer(ctx, dtype, elems[i], seed.wrapping_add(i as u64))
    }))
}

/// `N` inputs uploaded from the host.
pub fn upload<const N: usize>(inputs: &[HostData; N]) -> Result<[DeviceBuffer; N]> {
    all(std::array::from_fn(|i| {
        DeviceBuffer::from_host(inputs[i].bytes())
    }))
}

/// Each of `N` made, or the first error.
fn all<T, const N: usize>(each: [Result<T>; N]) -> Result<[T; N]> {
    let made = each.into_iter().collect::<Result<Vec<T>>>()?;
    Ok(made.try_into().ok().expect("one for each of N"))
}
