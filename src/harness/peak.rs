//! Measured ceilings of the GPU present: device-to-device copy bandwidth and the vendor's best
//! GEMM rate, the denominators of every "fraction of peak" kiln reports.

use serde::{Deserialize, Serialize};

use super::bench::{read_buffer, time_gemm, BenchBuffers, BenchOptions, FlushMode, L2Flusher};
use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::ops::gemm::{DType, GemmKernel, GemmProblem, Layout};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Peak {
    /// Bytes read plus bytes written per second, in TB/s.
    pub copy_tbps: f64,
    /// Bytes read per second streaming 1 GiB, in TB/s: the ceiling of a kernel that reads far
    /// more than it writes (a decode step's GEMM).
    #[serde(default)]
    pub read_tbps: f64,
    /// Event time of one read of 32 MiB (a 4096 x 4096 bf16 weight) from a flushed L2, in us:
    /// the floor of a decode GEMM of that weight, launch and ramp included.
    #[serde(default)]
    pub read_32mib_us: f64,
    /// Best vendor bf16 GEMM rate at 8192^3 (RC), in TFLOPS.
    pub gemm_bf16_tflops: f64,
}

impl Peak {
    /// The bandwidth a GEMM's bytes are measured against: the read ceiling (GEMMs read far more
    /// than they write), or the copy rate for a peak recorded before the read was measured.
    pub fn bandwidth_tbps(&self) -> f64 {
        if self.read_tbps > 0.0 {
            self.read_tbps
        } else {
            self.copy_tbps
        }
    }
}

/// Median event time (ms) of 10 launches after 3 untimed ones, `before` enqueued ahead of each
/// (outside the events).
fn median_ms(
    ctx: &Context,
    before: &dyn Fn() -> Result<()>,
    launch: &dyn Fn() -> Result<()>,
) -> Result<f64> {
    let mut times = Vec::new();
    for i in 0..13 {
        before()?;
        let (s, e) = (ctx.event()?, ctx.event()?);
        s.record(ctx)?;
        launch()?;
        e.record(ctx)?;
        let t = s.elapsed_ms(&e)? as f64;
        if i >= 3 {
            times.push(t);
        }
    }
    Ok(super::bench::stats(&mut times).0)
}

/// The copy ceiling (TB/s, bytes read plus written): a device-to-device copy from `src` to
/// `dst` of `bytes`, as `kiln peak` measures it (and any bandwidth-bound bench beside it).
pub fn copy_tbps(
    ctx: &Context,
    src: &DeviceBuffer,
    dst: &DeviceBuffer,
    bytes: usize,
) -> Result<f64> {
    let copy_ms = median_ms(ctx, &|| Ok(()), &|| {
        // SAFETY: both buffers hold at least `bytes` bytes and belong to this context.
        unsafe {
            cudarc::driver::result::memcpy_dtod_async(dst.ptr(), src.ptr(), bytes, ctx.stream)
        }
        .map_err(|e| Error::cuda("device copy", format!("{e:?}")))
    })?;
    Ok(2.0 * bytes as f64 / (copy_ms * 1e-3) / 1e12)
}

/// The copy ceiling (TB/s) over 1 GiB buffers allocated for it: what a bandwidth-bound bench
/// measures beside itself, in the same run on the same GPU.
pub fn copy_ceiling_tbps(ctx: &Context) -> Result<f64> {
    let bytes = 1usize << 30;
    let (src, dst) = (DeviceBuffer::new(bytes)?, DeviceBuffer::new(bytes)?);
    src.fill_bytes(1, ctx)?;
    copy_tbps(ctx, &src, &dst, bytes)
}

/// Measures the copy bandwidth (1 GiB buffers) and the vendor GEMM ceiling.
pub fn measure(ctx: &Context, vendor: &dyn GemmKernel) -> Result<Peak> {
    let bytes = 1usize << 30;
    let (src, dst) = (DeviceBuffer::new(bytes)?, DeviceBuffer::new(bytes)?);
    src.fill_bytes(1, ctx)?;
    let median_ms = |before: &dyn Fn() -> Result<()>, launch: &dyn Fn() -> Result<()>| {
        median_ms(ctx, before, launch)
    };
    let nothing = || Ok(());
    let copy_tbps = copy_tbps(ctx, &src, &dst, bytes)?;
    let sink = DeviceBuffer::new(16)?;
    // The copy filled `src` with ones, and the read kernel's sink test holds for zeros only.
    src.fill_bytes(0, ctx)?;
    let read_ms = median_ms(&nothing, &|| read_buffer(ctx, &src, bytes, &sink))?;
    let read_tbps = bytes as f64 / (read_ms * 1e-3) / 1e12;
    let flusher = L2Flusher::with_mode(ctx, FlushMode::Read)?;
    let read_32mib_us = median_ms(&|| flusher.flush(ctx), &|| {
        read_buffer(ctx, &src, 32 << 20, &sink)
    })? * 1e3;
    let p = GemmProblem::new(8192, 8192, 8192, Layout::RC, DType::Bf16, DType::Bf16);
    let bufs = BenchBuffers::random(ctx, &p, 11)?;
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
        read_tbps,
        read_32mib_us,
        gemm_bf16_tflops: t.tflops,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_peak_recorded_before_reads_were_measured_falls_back_to_the_copy_rate() {
        let old: Peak =
            serde_json::from_str(r#"{"copy_tbps": 3.0, "gemm_bf16_tflops": 800.0}"#).unwrap();
        assert_eq!((old.read_tbps, old.bandwidth_tbps()), (0.0, 3.0));
        let new = Peak {
            read_tbps: 3.05,
            ..old
        };
        assert_eq!(new.bandwidth_tbps(), 3.05);
    }
}
