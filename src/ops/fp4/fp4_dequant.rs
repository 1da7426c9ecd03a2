//! Host side of `kernels/quant/fp4_dequant.cu`: packed NVFP4 or MXFP4 codes and scales back to
//! bf16, f16 or f32, each value the exact product rounded once (bit for bit the CPU reference).

use std::ffi::c_void;

use crate::device::{Context, DeviceBuffer, Function, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;

use super::fp4_quant::{check_packed, check_shape, check_tensor_scale, Fp4Format, Fp4View};

pub const NAME: &str = "fp4_dequant";

/// Threads per CTA, and CTAs per SM the grid-stride loop is sized for (2,048 threads an SM).
const THREADS: u32 = 256;
const CTAS_PER_SM: usize = 8;
/// Elements a warp takes per pass: 32 lanes x 4 chunks x 8 elements.
const WARP_ELEMENTS: usize = 32 * 4 * 8;

/// The specialisation per format; the output dtype is an argument.
pub fn spec(arch: &str, format: Fp4Format) -> KernelSpec {
    KernelSpec::new("quant/fp4_dequant.cu", NAME, arch).define("KILN_FP4", format.define())
}

/// Every specialisation (for the compile check).
pub fn variants(arch: &str) -> Vec<KernelSpec> {
    Fp4Format::ALL.iter().map(|&f| spec(arch, f)).collect()
}

/// CTAs for `elements`: enough for every warp's first pass, at most what the SMs hold at once
/// (the kernel strides over the rest).
fn grid(elements: usize, sms: u32) -> u32 {
    let warps = elements.div_ceil(WARP_ELEMENTS);
    let ctas = warps.div_ceil(THREADS as usize / 32);
    ctas.clamp(1, CTAS_PER_SM * sms.max(1) as usize) as u32
}

/// A dequantisation checked and bound to its buffers: enqueueing it is the launch alone (no
/// checks, no lookups), what a timed loop needs.
pub struct Dequantize<'a> {
    f: Function,
    view: Fp4View<'a>,
    output: DType,
    y: &'a DeviceBuffer,
    ldy: usize,
    grid: u32,
}

impl<'a> Dequantize<'a> {
    /// Checks that `m`'s buffers hold a [rows, K] matrix of its format and `y` a [rows, K] of
    /// `output` with leading dimension `ldy`, and loads the kernel.
    pub fn new(
        ctx: &Context,
        m: &Fp4View<'a>,
        output: DType,
        y: &'a DeviceBuffer,
        ldy: usize,
    ) -> Result<Self> {
        let v = *m;
        check_packed(v.format, v.rows, v.k, v.codes.bytes(), v.scales.bytes())?;
        check_shape(v.format, v.rows, v.k, ldy, y.bytes(), output.size())?;
        if v.format == Fp4Format::Nvfp4 {
            check_tensor_scale(v.tensor_scale)?;
        }
        if !v.codes.ptr().is_multiple_of(4) {
            return Err(Error::invalid(
                "the codes must start on a 4-byte boundary (the kernel reads them as 32-bit words)",
            ));
        }
        Ok(Dequantize {
            f: ctx.function(&spec(&ctx.arch(), v.format))?,
            view: v,
            output,
            y,
            ldy,
            grid: grid(v.rows * v.k, ctx.info.sm_count),
        })
    }

    /// Enqueues the kernel; `first_bad` is null or a device u64 that receives the index of the
    /// first scale with no value (atomicMin).
    pub fn enqueue(&self, ctx: &Context, first_bad: u64) -> Result<()> {
        let v = &self.view;
        let (mut pc, mut ps, mut pg) = (v.codes.ptr(), v.scales.ptr(), v.tensor_scale);
        let (mut prows, mut pk) = (v.rows as i32, v.k as i32);
        let (mut py, mut pldy, mut pbad) = (self.y.ptr(), self.ldy as i64, first_bad);
        let mut pout = self.output.code() as i32;
        // SAFETY: fp4_dequant takes (const u8*, const u8*, float, int, int, void*, i64, u64*,
        // int): `new` checked that the code and scale buffers hold [rows, K] of the format (codes
        // 4-byte aligned) and y the output with its leading dimension; the borrows keep them
        // alive past this call and the caller past the stream's end; first_bad is null or a
        // device u64 the caller keeps alive.
        unsafe {
            self.f.launch(
                ctx.stream,
                &LaunchConfig::simple((self.grid, 1, 1), THREADS),
                &mut [
                    &mut pc as *mut u64 as *mut c_void,
                    &mut ps as *mut u64 as *mut c_void,
                    &mut pg as *mut f32 as *mut c_void,
                    &mut prows as *mut i32 as *mut c_void,
                    &mut pk as *mut i32 as *mut c_void,
                    &mut py as *mut u64 as *mut c_void,
                    &mut pldy as *mut i64 as *mut c_void,
                    &mut pbad as *mut u64 as *mut c_void,
                    &mut pout as *mut i32 as *mut c_void,
                ],
            )
        }
    }
}

/// Dequantises packed codes and scales of a [rows, K] matrix into `y` ([rows, K] of `output`,
/// leading dimension `ldy`): each value the exact e2m1 x scale (x tensor scale) rounded once.
/// With `checked` it synchronises and refuses scales that have no value (a negative or NaN e4m3,
/// E8M0's NaN); without, it only enqueues, and such a scale gives an unspecified value.
pub fn dequantize_into(
    ctx: &Context,
    m: &Fp4View,
    output: DType,
    y: &DeviceBuffer,
    ldy: usize,
    checked: bool,
) -> Result<()> {
    let d = Dequantize::new(ctx, m, output, y, ldy)?;
    if !checked {
        return d.enqueue(ctx, 0);
    }
    let status = ctx.alloc(8)?;
    status.upload(&[u64::MAX])?;
    d.enqueue(ctx, status.ptr())?;
    ctx.synchronize()?;
    let bad: Vec<u64> = status.download(1)?;
    if bad[0] == u64::MAX {
        return Ok(());
    }
    let format = m.format;
    Err(Error::invalid(format!(
        "block scale {} of the {format} tensor has no value ({}): {}",
        bad[0],
        if format == Fp4Format::Nvfp4 {
            "a negative e4m3 or its NaN code 0x7f"
        } else {
            "E8M0's NaN code 0xff"
        },
        if format == Fp4Format::Nvfp4 {
            "NVFP4 block scales are non-negative finite e4m3 (UE4M3)"
        } else {
            "every scale must be a power of two, codes 0 to 254"
        }
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grid_covers_small_tensors_and_stops_at_what_the_sms_hold() {
        assert_eq!(grid(16, 132), 1);
        // 8 warps of 1,024 elements a CTA
        assert_eq!(grid(8 * 1024, 132), 1);
        assert_eq!(grid(8 * 1024 + 1, 132), 2);
        assert_eq!(grid(7168 * 16384, 132), 8 * 132);
        assert_eq!(grid(1 << 20, 0), 8);
    }

    #[test]
    fn every_dequantisation_variant_compiles_for_sm_90a_without_spills() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let v = variants("sm_90a");
        assert_eq!(v.len(), 2);
        crate::jit::testing::assert_compile_clean(&v);
    }
}
