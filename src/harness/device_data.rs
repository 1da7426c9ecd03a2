//! Random inputs made on the GPU by `kernels/harness/counter_fill.cu`, and their CPU twin: element
//! i of a buffer filled from `seed` is [`counter_value`]`(seed, i)`, regenerated exactly on the host.

use crate::device::{Context, DeviceBuffer, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;

/// The fill kernel (one specialisation: the dtype is an argument).
pub fn spec(arch: &str) -> KernelSpec {
    KernelSpec::new("harness/counter_fill.cu", "counter_fill", arch)
}

/// splitmix64's finaliser, as the kernel computes it (and the seeds of the fuzz's inputs and
/// the packed attention's drawn lengths).
pub(crate) fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Element `i` of a buffer filled from `seed`: a multiple of 1/256 in [-1, 1), exact in every
/// dtype, so the value does not depend on the buffer's dtype.
pub fn counter_value(seed: u64, i: u64) -> f64 {
    let h = mix64(seed.wrapping_add(i.wrapping_add(1).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
    ((h >> 55) as i64 - 256) as f64 / 256.0
}

/// Fills `rows` rows of `cols` elements, `ld` apart, of `buf` (of `dtype`) from `seed` on the
/// context's stream; elements between `cols` and `ld` keep their bytes. A packed buffer of `n`
/// elements is `(1, n, n)`.
pub fn fill(
    ctx: &Context,
    buf: &DeviceBuffer,
    dtype: DType,
    (rows, cols, ld): (usize, usize, usize),
    seed: u64,
) -> Result<()> {
    if rows == 0 || cols == 0 {
        return Ok(());
    }
    let last = (rows - 1) * ld + cols;
    if cols > ld || last * dtype.size() > buf.bytes() {
        return Err(Error::invalid(format!(
            "a {rows}x{cols} fill with ld {ld} needs {} bytes; the buffer has {}",
            last * dtype.size(),
            buf.bytes()
        )));
    }
    let f = ctx.function(&spec(&ctx.arch()))?;
    let blocks = (rows * cols)
        .div_ceil(256)
        .min(ctx.info.sm_count as usize * 16) as u32;
    let (mut dst, mut r, mut c, mut l, mut s) =
        (buf.ptr(), rows as u64, cols as u64, ld as u64, seed);
    let mut code = dtype.code() as i32;
    // SAFETY: the kernel takes (void*, u64, u64, u64, u64, int) in this order and writes only
    // elements r * ld + c with r < rows, c < cols: inside `buf`, checked above.
    unsafe {
        f.launch(
            ctx.stream,
            &LaunchConfig::simple((blocks.max(1), 1, 1), 256),
            &mut [
                &mut dst as *mut u64 as *mut _,
                &mut r as *mut u64 as *mut _,
                &mut c as *mut u64 as *mut _,
                &mut l as *mut u64 as *mut _,
                &mut s as *mut u64 as *mut _,
                &mut code as *mut i32 as *mut _,
            ],
        )
    }
}

/// A new buffer of `n` elements of `dtype`, filled from `seed`.
pub fn random_buffer(ctx: &Context, dtype: DType, n: usize, seed: u64) -> Result<DeviceBuffer> {
    let buf = ctx.alloc((n * dtype.size()).max(1))?;
    fill(ctx, &buf, dtype, (1, n, n), seed)?;
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_exact_in_every_dtype_spread_and_seeded() {
        let v: Vec<f64> = (0..4096).map(|i| counter_value(9, i)).collect();
        for &x in &v {
            assert!((-1.0..1.0).contains(&x));
            assert_eq!(half::bf16::from_f64(x).to_f64(), x);
            assert_eq!(half::f16::from_f64(x).to_f64(), x);
        }
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        assert!(mean.abs() < 0.05, "mean {mean}");
        assert!(v.iter().filter(|x| **x == 0.0).count() < 40);
        assert_ne!(counter_value(9, 5), counter_value(10, 5));
        assert_eq!(counter_value(9, 5), counter_value(9, 5));
    }

    #[test]
    fn the_fill_compiles_for_sm_90a() {
        use crate::jit::{nvrtc, Jit};
        if nvrtc::version().is_err() {
            assert!(std::env::var_os("KILN_REQUIRE_NVRTC").is_none());
            return;
        }
        let c = Jit::without_cache().compile(&spec("sm_90a")).unwrap();
        assert!(!c.cubin.is_empty() && !c.resources.spills());
    }

    #[test]
    fn the_hash_is_splitmix64() {
        // splitmix64's first output from state 0 (its published test vector).
        assert_eq!(mix64(0x9E37_79B9_7F4A_7C15), 0xE220_A839_7B1D_CDAF);
    }
}
