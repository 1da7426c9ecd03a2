//! Host side of `kernels/quant/fp4_quant.cu`: a row-major bf16/f16/f32 matrix quantised on the
//! GPU to NVFP4 or MXFP4 in the standard layout, bit for bit what `crate::formats` compute.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::device::{Context, DeviceBuffer, LaunchConfig};
use crate::error::{Error, Result};
use crate::formats::{mxfp4, nvfp4};
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;

/// The 4-bit block-scaled formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fp4Format {
    /// e2m1, an e4m3 scale per 16 elements along K, an fp32 tensor scale.
    Nvfp4,
    /// e2m1, an E8M0 scale per 32 elements along K.
    Mxfp4,
}

impl Fp4Format {
    pub const ALL: [Fp4Format; 2] = [Fp4Format::Nvfp4, Fp4Format::Mxfp4];

    /// Elements per block scale.
    pub fn block(self) -> usize {
        match self {
            Fp4Format::Nvfp4 => nvfp4::BLOCK,
            Fp4Format::Mxfp4 => mxfp4::BLOCK,
        }
    }

    /// `KILN_FP4`.
    pub fn define(self) -> u32 {
        match self {
            Fp4Format::Nvfp4 => 0,
            Fp4Format::Mxfp4 => 1,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Fp4Format::Nvfp4 => "nvfp4",
            Fp4Format::Mxfp4 => "mxfp4",
        }
    }

    /// Checks that K is whole blocks (the CPU formats' sentence).
    pub fn check_k(self, k: usize) -> Result<()> {
        if k.is_multiple_of(self.block()) {
            return Ok(());
        }
        Err(Error::invalid(format!(
            "K = {k} is not a multiple of {b}: {f} scales blocks of {b} along K, so pad K with \
             zeros to {}",
            k.next_multiple_of(self.block()),
            b = self.block(),
            f = self.name()
        )))
    }
}

impl fmt::Display for Fp4Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Fp4Format {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "nvfp4" => Ok(Fp4Format::Nvfp4),
            "mxfp4" => Ok(Fp4Format::Mxfp4),
            _ => Err(Error::Unknown {
                what: "4-bit format",
                name: s.into(),
                known: "nvfp4, mxfp4".into(),
            }),
        }
    }
}

/// A [rows, K] matrix in a 4-bit format on the device, in the standard layout: codes [rows, K/2]
/// (two e2m1 per byte, element 0 in the low nibble), scales [rows, K/block] (e4m3 or E8M0
/// codes), and the NVFP4 tensor scale (1 for MXFP4).
pub struct Fp4Matrix {
    pub format: Fp4Format,
    pub rows: usize,
    pub k: usize,
    pub codes: DeviceBuffer,
    pub scales: DeviceBuffer,
    pub tensor_scale: f32,
}

/// The specialisation of one entry point: `fp4_quant` per input dtype; `fp4_amax` (NVFP4 only)
/// takes its dtype as an argument.
pub fn spec(arch: &str, format: Fp4Format, input: Option<DType>, entry: &str) -> KernelSpec {
    let s = KernelSpec::new("quant/fp4_quant.cu", entry, arch).define("KILN_FP4", format.define());
    match (entry, input) {
        ("fp4_quant", Some(dtype)) => s.define("KILN_QIN", dtype.code()),
        _ => s.define("KILN_AMAX", 1),
    }
}

/// Every specialisation (for the compile check): the quantiser per format and input dtype and
/// NVFP4's amax pass.
pub fn variants(arch: &str) -> Vec<KernelSpec> {
    let mut v = Vec::new();
    for format in Fp4Format::ALL {
        for dtype in DType::OUTPUTS {
            v.push(spec(arch, format, Some(dtype), "fp4_quant"));
        }
    }
    v.push(spec(arch, Fp4Format::Nvfp4, None, "fp4_amax"));
    v
}

/// Checks a [rows, K] request against the format and an input buffer of `bytes` with leading
/// dimension `ld` (elements of `elem` bytes).
pub fn check_shape(
    format: Fp4Format,
    rows: usize,
    k: usize,
    ld: usize,
    bytes: usize,
    elem: usize,
) -> Result<()> {
    if rows == 0 || k == 0 {
        return Err(Error::invalid(format!(
            "cannot quantise a {rows}x{k} matrix: both sides must be at least 1"
        )));
    }
    format.check_k(k)?;
    if rows > i32::MAX as usize || k > i32::MAX as usize {
        return Err(Error::invalid(format!(
            "a {rows}x{k} matrix is too large: each side must be below 2^31"
        )));
    }
    if ld < k {
        return Err(Error::invalid(format!(
            "the leading dimension {ld} is shorter than the {k} elements of a row"
        )));
    }
    let need = ((rows - 1) * ld + k) * elem;
    if bytes < need {
        return Err(Error::invalid(format!(
            "the buffer holds {bytes} bytes; a {rows}x{k} matrix with leading dimension {ld} \
             needs {need}"
        )));
    }
    Ok(())
}

/// Checks that packed codes and scales buffers hold a [rows, K] matrix of `format`.
pub fn check_packed(
    format: Fp4Format,
    rows: usize,
    k: usize,
    codes: usize,
    scales: usize,
) -> Result<()> {
    format.check_k(k)?;
    let (need_c, need_s) = (rows * k / 2, rows * k / format.block());
    if codes < need_c {
        return Err(Error::invalid(format!(
            "the {format} codes hold {codes} bytes but [{rows}, {k}] packs into {need_c} (two \
             e2m1 per byte): pass the codes of exactly this shape"
        )));
    }
    if scales < need_s {
        return Err(Error::invalid(format!(
            "the {format} scales hold {scales} bytes but [{rows}, {k}] has {need_s} blocks of \
             {}: pass one scale per block, [{rows}, {}]",
            format.block(),
            k / format.block()
        )));
    }
    Ok(())
}

/// Refuses an NVFP4 tensor scale that is not a positive normal f32 (the CPU's rule).
pub fn check_tensor_scale(g: f32) -> Result<()> {
    if g.is_finite() && g >= f32::MIN_POSITIVE {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "the nvfp4 tensor scale is {g}: it must be a finite f32 of at least 2^-126 (the recipe \
         uses amax / 2688, floored there)"
    )))
}

/// Quantises the row-major [rows, K] matrix in `x` (elements of `input`, leading dimension
/// `ldx`) with the format's recipe. NVFP4 takes `tensor_scale` if given, else derives it from
/// the tensor's amax. Synchronises: a NaN or infinite input is refused with its position.
#[allow(clippy::too_many_arguments)]
pub fn quantize(
    ctx: &Context,
    x: &DeviceBuffer,
    input: DType,
    rows: usize,
    k: usize,
    ldx: usize,
    format: Fp4Format,
    tensor_scale: Option<f32>,
) -> Result<Fp4Matrix> {
    check_shape(format, rows, k, ldx, x.bytes(), input.size())?;
    let codes = ctx.alloc(rows * k / 2)?;
    let scales = ctx.alloc(rows * k / format.block())?;
    let g = quantize_into(
        ctx,
        x,
        input,
        rows,
        k,
        ldx,
        format,
        tensor_scale,
        &codes,
        &scales,
    )?;
    Ok(Fp4Matrix {
        format,
        rows,
        k,
        codes,
        scales,
        tensor_scale: g,
    })
}

/// As [`quantize`], into caller buffers of at least [rows, K/2] and [rows, K/block] bytes;
/// returns the tensor scale used (1 for MXFP4).
#[allow(clippy::too_many_arguments)]
pub fn quantize_into(
    ctx: &Context,
    x: &DeviceBuffer,
    input: DType,
    rows: usize,
    k: usize,
    ldx: usize,
    format: Fp4Format,
    tensor_scale: Option<f32>,
    codes: &DeviceBuffer,
    scales: &DeviceBuffer,
) -> Result<f32> {
    check_shape(format, rows, k, ldx, x.bytes(), input.size())?;
    check_packed(format, rows, k, codes.bytes(), scales.bytes())?;
    if let Some(g) = tensor_scale {
        if format == Fp4Format::Mxfp4 {
            return Err(Error::invalid(
                "mxfp4 has no tensor scale: its E8M0 block scales cover the whole range",
            ));
        }
        check_tensor_scale(g)?;
    }
    let arch = ctx.arch();
    // status: [first non-finite index (u64), amax bits (u32), the tensor scale used (f32)]
    let status = ctx.alloc(16)?;
    status.upload(&[u64::MAX, 0u64])?;
    let (mut px, mut prows, mut pk, mut pldx) = (x.ptr(), rows as i32, k as i32, ldx as i64);
    let mut pbad = status.ptr();
    let mut pamax = 0u64;
    if format == Fp4Format::Nvfp4 && tensor_scale.is_none() {
        pamax = status.ptr() + 8;
        let f = ctx.function(&spec(&arch, format, None, "fp4_amax"))?;
        let mut pin = input.code() as i32;
        let blocks = ((rows * k).div_ceil(256) as u64).min(8 * ctx.info.sm_count.max(1) as u64);
        // SAFETY: fp4_amax takes (const void*, int, int, i64, u32*, u64*, int): x holds the matrix
        // of `input` (pin, its code)
        // (check_shape), status 16 bytes (the amax word at 8, the index at 0); both live until
        // the synchronisation below.
        unsafe {
            f.launch(
                ctx.stream,
                &LaunchConfig::simple((blocks.max(1) as u32, 1, 1), 256),
                &mut [
                    &mut px as *mut u64 as *mut _,
                    &mut prows as *mut i32 as *mut _,
                    &mut pk as *mut i32 as *mut _,
                    &mut pldx as *mut i64 as *mut _,
                    &mut pamax as *mut u64 as *mut _,
                    &mut pbad as *mut u64 as *mut _,
                    &mut pin as *mut i32 as *mut _,
                ],
            )?;
        }
    }
    let nblocks = rows * k / format.block();
    let grid = nblocks.div_ceil(256);
    if grid > i32::MAX as usize {
        return Err(Error::invalid(format!(
            "a {rows}x{k} matrix needs {grid} thread blocks, over 2^31 - 1"
        )));
    }
    let f = ctx.function(&spec(&arch, format, Some(input), "fp4_quant"))?;
    let (mut pc, mut ps) = (codes.ptr(), scales.ptr());
    let mut pg = tensor_scale.unwrap_or(1.0);
    let mut pg_out = status.ptr() + 12;
    // SAFETY: fp4_quant takes (const qin_t*, int, int, i64, u8*, u8*, const u32*, float, float*,
    // u64*): the buffers hold the matrix, [rows, K/2] codes and [rows, K/block] scales (checked
    // above; codes are written as aligned 32-bit words, and allocations are 256-byte aligned);
    // amax is null or the reduced word; status lives until the synchronisation below.
    unsafe {
        f.launch(
            ctx.stream,
            &LaunchConfig::simple((grid.max(1) as u32, 1, 1), 256),
            &mut [
                &mut px as *mut u64 as *mut _,
                &mut prows as *mut i32 as *mut _,
                &mut pk as *mut i32 as *mut _,
                &mut pldx as *mut i64 as *mut _,
                &mut pc as *mut u64 as *mut _,
                &mut ps as *mut u64 as *mut _,
                &mut pamax as *mut u64 as *mut _,
                &mut pg as *mut f32 as *mut _,
                &mut pg_out as *mut u64 as *mut _,
                &mut pbad as *mut u64 as *mut _,
            ],
        )?;
    }
    ctx.synchronize()?;
    let words: Vec<u32> = status.download(4)?;
    let bad = words[0] as u64 | (words[1] as u64) << 32;
    if bad != u64::MAX {
        let (r, c) = (bad / k as u64, bad % k as u64);
        return Err(Error::invalid(format!(
            "element ({r}, {c}) of the {format} input is NaN or infinite: e2m1 has no NaN or \
             infinity, so clean or clamp the input before quantising"
        )));
    }
    Ok(match format {
        Fp4Format::Nvfp4 => f32::from_bits(words[3]),
        Fp4Format::Mxfp4 => 1.0,
    })
}

/// Borrowed device buffers of a [rows, K] matrix in a 4-bit format.
#[derive(Clone, Copy)]
pub struct Fp4View<'a> {
    pub format: Fp4Format,
    pub rows: usize,
    pub k: usize,
    pub codes: &'a DeviceBuffer,
    pub scales: &'a DeviceBuffer,
    /// NVFP4's tensor scale; ignored for MXFP4.
    pub tensor_scale: f32,
}

impl Fp4Matrix {
    pub fn view(&self) -> Fp4View<'_> {
        Fp4View {
            format: self.format,
            rows: self.rows,
            k: self.k,
            codes: &self.codes,
            scales: &self.scales,
            tensor_scale: self.tensor_scale,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_requests_are_refused_with_the_reason() {
        let e = check_shape(Fp4Format::Nvfp4, 4, 24, 24, 1 << 20, 2).unwrap_err();
        assert!(e.to_string().contains("not a multiple of 16"), "{e}");
        let e = check_shape(Fp4Format::Mxfp4, 4, 48, 48, 1 << 20, 2).unwrap_err();
        assert!(e.to_string().contains("pad K with zeros to 64"), "{e}");
        assert!(check_shape(Fp4Format::Mxfp4, 4, 64, 64, 1 << 20, 2).is_ok());
        let e = check_shape(Fp4Format::Nvfp4, 4, 32, 16, 1 << 20, 2).unwrap_err();
        assert!(e.to_string().contains("leading dimension 16"), "{e}");
        let e = check_shape(Fp4Format::Nvfp4, 4, 32, 32, 255, 2).unwrap_err();
        assert!(e.to_string().contains("needs 256"), "{e}");
        let e = check_shape(Fp4Format::Nvfp4, 0, 32, 32, 255, 2).unwrap_err();
        assert!(e.to_string().contains("at least 1"), "{e}");
        let e = check_packed(Fp4Format::Nvfp4, 4, 32, 63, 8).unwrap_err();
        assert!(e.to_string().contains("packs into 64"), "{e}");
        let e = check_packed(Fp4Format::Nvfp4, 4, 32, 64, 7).unwrap_err();
        assert!(e.to_string().contains("[4, 2]"), "{e}");
        let e = check_packed(Fp4Format::Mxfp4, 4, 64, 128, 7).unwrap_err();
        assert!(e.to_string().contains("blocks of 32"), "{e}");
        for g in [0.0, -1.0, f32::NAN, f32::INFINITY, 1e-39] {
            assert!(check_tensor_scale(g).is_err(), "{g}");
        }
        assert!(check_tensor_scale(1.0).is_ok());
        assert_eq!(e.exit_code(), 2);
        assert_eq!("MXFP4".parse::<Fp4Format>().unwrap(), Fp4Format::Mxfp4);
        assert!("fp4".parse::<Fp4Format>().is_err());
    }

    #[test]
    fn every_fp4_quantisation_variant_compiles_for_sm_90a_without_spills() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let v = variants("sm_90a");
        assert_eq!(v.len(), 2 * 3 + 1);
        crate::jit::testing::assert_compile_clean(&v);
    }
}
