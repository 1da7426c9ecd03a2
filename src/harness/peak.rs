//! Measured ceilings of the GPU present: device-to-device copy bandwidth and the vendor's best
//! GEMM rate, the denominators of every "fraction of peak" kiln reports.

use serde::{Deserialize, Serialize};

use super::bench::{time_gemm, BenchBuffers, BenchOptions, L2Flusher};
use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::ops::gemm::{DType, GemmKernel, GemmProblem, Layout};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Peak {
    /// Bytes read plus bytes written per second, in TB/s.
    pub copy_tbps: f64,
    /// Best vendor bf16 GEMM rate at 8192^3 (RC), in TFLOPS.
    pub gemm_bf16_tflops: f64,
}

/// Measures the copy bandwidth (1 GiB buffers) and the vendor GEMM ceiling.
pub fn measure(ctx: &Context, vendor: &dyn GemmKernel) -> Result<Peak> {
    let bytes = 1usize << 30;
    let (src, dst) = (DeviceBuffer::new(bytes)?, DeviceBuffer::new(bytes)?);
    src.fill_bytes(1, ctx)?;
    let mut times = Vec::new();
    for i in 0..13 {
        let (s, e) = (ctx.event()?, ctx.event()?);
        s.record(ctx)?;
        // SAFETY: both buffers hold `bytes` bytes and belong to this context.
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(dst.ptr(), src.ptr(), bytes, ctx.stream)
        }
        .map_err(|e| Error::cuda("device copy", format!("{e:?}")))?;
        e.record(ctx)?;
        let t = s.elapsed_ms(&e)? as f64;
        if i >= 3 {
            times.push(t);
        }
    }
    let (median, _, _) = super::bench::stats(&mut times);
    let copy_tbps = 2.0 * bytes as f64 / (median * 1e-3) / 1e12;
    let p = GemmProblem::new(8192, 8192, 8192, Layout::RC, DType::Bf16, DType::Bf16);
    let bufs = BenchBuffers::random(&p, 11)?;
    let flusher = L2Flusher::new(ctx)?;
    let t = time_gemm(
        ctx,
        vendor,
        &p,
        &bufs,
        &flusher,
        &BenchOptions {
            warmup: 3,
            reps: 15,
            flush_l2: true,
            interleave: false,
            ..BenchOptions::default()
        },
    )?;
    Ok(Peak {
        copy_tbps,
        gemm_bf16_tflops: t.tflops,
    })
}
