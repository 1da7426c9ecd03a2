//! Host side of `kernels/quant/fp8_quant.cu`: quantising a row-major bf16/f16/f32 matrix on the
//! GPU to FP8 codes and fp32 scales per tensor, per row, per 1x128 group or per 128x128 tile,
//! with fp32 or UE8M0 (power-of-two) scales. `kiln::ops::fp8::quantize` is the front door; the
//! CPU reference of the same arithmetic is `crate::reference::fp8::quantize`.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::device::{Context, DeviceBuffer, LaunchConfig};
use crate::error::{Error, Result};
use crate::formats::{Fp8Format, ScaleRecipe};
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;

/// Which elements share one scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Granularity {
    /// One scale for the whole matrix.
    Tensor,
    /// One per row (a GEMM's per-row A scales, or per-column-of-C B scales).
    Row,
    /// One per row and 128 columns (DeepSeek's activations, along K).
    Block1x128,
    /// One per 128x128 tile (DeepSeek's weights).
    Block128x128,
}

impl Granularity {
    pub const ALL: [Granularity; 4] = [
        Granularity::Tensor,
        Granularity::Row,
        Granularity::Block1x128,
        Granularity::Block128x128,
    ];

    /// `KILN_QGRAN`.
    pub fn define(self) -> u32 {
        match self {
            Granularity::Tensor => 0,
            Granularity::Row => 1,
            Granularity::Block1x128 => 2,
            Granularity::Block128x128 => 3,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Granularity::Tensor => "tensor",
            Granularity::Row => "row",
            Granularity::Block1x128 => "1x128",
            Granularity::Block128x128 => "128x128",
        }
    }

    /// How many scales a rows x cols matrix has.
    pub fn scale_count(self, rows: usize, cols: usize) -> usize {
        let kb = cols.div_ceil(128);
        match self {
            Granularity::Tensor => 1,
            Granularity::Row => rows,
            Granularity::Block1x128 => rows * kb,
            Granularity::Block128x128 => rows.div_ceil(128) * kb,
        }
    }

    /// The index in the scale array of the scale of element (r, c): per row `r`; 1x128
    /// M-major, `(c / 128) * rows + r` (logically [rows, cols/128] with strides (1, rows), as
    /// DeepGEMM and cuBLASLt take activation scales); 128x128 row-major over tiles,
    /// `(r / 128) * ceil(cols / 128) + c / 128`.
    pub fn scale_index(self, rows: usize, cols: usize, r: usize, c: usize) -> usize {
        match self {
            Granularity::Tensor => 0,
            Granularity::Row => r,
            Granularity::Block1x128 => (c / 128) * rows + r,
            Granularity::Block128x128 => (r / 128) * cols.div_ceil(128) + c / 128,
        }
    }
}

impl fmt::Display for Granularity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Granularity {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "tensor" => Ok(Granularity::Tensor),
            "row" | "channel" => Ok(Granularity::Row),
            "1x128" | "group" => Ok(Granularity::Block1x128),
            "128x128" | "block" => Ok(Granularity::Block128x128),
            _ => Err(Error::Unknown {
                what: "scale granularity",
                name: s.into(),
                known: "tensor, row, 1x128, 128x128".into(),
            }),
        }
    }
}

/// How to quantise: which format, which groups share a scale, how a scale is derived.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct QuantSpec {
    pub format: Fp8Format,
    pub granularity: Granularity,
    pub recipe: ScaleRecipe,
}

impl QuantSpec {
    pub fn e4m3(granularity: Granularity, recipe: ScaleRecipe) -> Self {
        QuantSpec {
            format: Fp8Format::E4m3,
            granularity,
            recipe,
        }
    }
}

impl fmt::Display for QuantSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {} {}", self.format, self.granularity, self.recipe)
    }
}

/// A quantised matrix on the device: codes [rows, cols] packed row-major (leading dimension
/// `cols`) and `spec.granularity.scale_count(rows, cols)` fp32 scales.
pub struct Quantized {
    pub codes: DeviceBuffer,
    pub scales: DeviceBuffer,
    pub rows: usize,
    pub cols: usize,
    pub spec: QuantSpec,
}

/// The specialisation of one entry point (`fp8_quant`, or `fp8_amax` for per-tensor scales).
pub fn spec(arch: &str, input: DType, g: Granularity, fmt: Fp8Format, entry: &str) -> KernelSpec {
    KernelSpec::new("quant/fp8_quant.cu", entry, arch)
        .define("KILN_QIN", input.code())
        .define("KILN_QGRAN", g.define())
        .define("KILN_FP8", fmt.define())
}

/// Every specialisation (for the compile check): 3 inputs x 4 granularities x 2 formats, and
/// the per-tensor amax for each input and format.
pub fn variants(arch: &str) -> Vec<KernelSpec> {
    let mut v = Vec::new();
    for input in [DType::Bf16, DType::F16, DType::F32] {
        for fmt in Fp8Format::ALL {
            for g in Granularity::ALL {
                v.push(spec(arch, input, g, fmt, "fp8_quant"));
            }
            v.push(spec(arch, input, Granularity::Tensor, fmt, "fp8_amax"));
        }
    }
    v
}

/// Checks a quantisation request before anything is allocated.
pub fn check_shape(
    rows: usize,
    cols: usize,
    ldx: usize,
    input_bytes: usize,
    input_elem: usize,
) -> Result<()> {
    if rows == 0 || cols == 0 {
        return Err(Error::invalid(format!(
            "cannot quantise a {rows}x{cols} matrix: both sides must be at least 1"
        )));
    }
    if rows > i32::MAX as usize || cols > i32::MAX as usize {
        return Err(Error::invalid(format!(
            "cannot quantise a {rows}x{cols} matrix: each side must be below 2^31"
        )));
    }
    if ldx < cols {
        return Err(Error::invalid(format!(
            "the input's leading dimension {ldx} is shorter than its {cols} columns"
        )));
    }
    let need = ((rows - 1) * ldx + cols) * input_elem;
    if input_bytes < need {
        return Err(Error::invalid(format!(
            "the input buffer holds {input_bytes} bytes; a {rows}x{cols} matrix with leading \
             dimension {ldx} needs {need}"
        )));
    }
    Ok(())
}

/// Quantises the row-major `rows` x `cols` matrix in `x` (elements of `input`, leading
/// dimension `ldx`) on the context's stream; the result is ready once the stream is.
pub fn quantize(
    ctx: &Context,
    x: &DeviceBuffer,
    input: DType,
    rows: usize,
    cols: usize,
    ldx: usize,
    spec_: QuantSpec,
) -> Result<Quantized> {
    check_shape(rows, cols, ldx, x.bytes(), input.size())?;
    let codes = ctx.alloc(rows * cols)?;
    let scales = ctx.alloc(4 * spec_.granularity.scale_count(rows, cols))?;
    quantize_into(ctx, x, input, rows, cols, ldx, spec_, &codes, cols, &scales)?;
    Ok(Quantized {
        codes,
        scales,
        rows,
        cols,
        spec: spec_,
    })
}

/// As [`quantize`], into caller buffers: codes with leading dimension `ldq` (bytes), scales as
/// [`Granularity::scale_index`] lays them out.
#[allow(clippy::too_many_arguments)]
pub fn quantize_into(
    ctx: &Context,
    x: &DeviceBuffer,
    input: DType,
    rows: usize,
    cols: usize,
    ldx: usize,
    spec_: QuantSpec,
    codes: &DeviceBuffer,
    ldq: usize,
    scales: &DeviceBuffer,
) -> Result<()> {
    check_shape(rows, cols, ldx, x.bytes(), input.size())?;
    if ldq < cols || codes.bytes() < (rows - 1) * ldq + cols {
        return Err(Error::invalid(format!(
            "the code buffer ({} bytes, leading dimension {ldq}) cannot hold {rows}x{cols} codes",
            codes.bytes()
        )));
    }
    let g = spec_.granularity;
    if scales.bytes() < 4 * g.scale_count(rows, cols) {
        return Err(Error::invalid(format!(
            "the scale buffer holds {} bytes; {g} scales of a {rows}x{cols} matrix need {}",
            scales.bytes(),
            4 * g.scale_count(rows, cols)
        )));
    }
    let arch = ctx.arch();
    let sms = ctx.info.sm_count.max(1);
    // The per-tensor amax word: zeroed, then reduced into (null for the other granularities).
    let amax = if g == Granularity::Tensor {
        Some(ctx.alloc(4)?)
    } else {
        None
    };
    let (mut px, mut prows, mut pcols, mut pldx) = (x.ptr(), rows as i32, cols as i32, ldx as i64);
    let mut pamax = amax.as_ref().map_or(0, |a| a.ptr());
    if let Some(amax) = &amax {
        amax.fill_bytes(0, ctx)?;
        let f = ctx.function(&spec(&arch, input, g, spec_.format, "fp8_amax"))?;
        let blocks = ((rows * cols).div_ceil(256) as u64).min(4 * sms as u64) as u32;
        // SAFETY: fp8_amax takes (const qin_t*, int, int, i64, u32*): x holds the matrix
        // (check_shape), amax 4 bytes; the caller keeps x alive until the stream is done, and
        // amax is dropped only after the synchronisation at the end of this call.
        unsafe {
            f.launch(
                ctx.stream,
                &LaunchConfig::simple((blocks.max(1), 1, 1), 256),
                &mut [
                    &mut px as *mut u64 as *mut _,
                    &mut prows as *mut i32 as *mut _,
                    &mut pcols as *mut i32 as *mut _,
                    &mut pldx as *mut i64 as *mut _,
                    &mut pamax as *mut u64 as *mut _,
                ],
            )?;
        }
    }
    let kb = cols.div_ceil(128);
    let blocks: u64 = match g {
        Granularity::Tensor => ((rows * cols.div_ceil(4)).div_ceil(256) as u64).min(8 * sms as u64),
        Granularity::Row => rows as u64,
        Granularity::Block1x128 => (rows * kb).div_ceil(8) as u64,
        Granularity::Block128x128 => (rows.div_ceil(128) * kb) as u64,
    };
    if blocks > i32::MAX as u64 {
        return Err(Error::invalid(format!(
            "a {rows}x{cols} matrix needs {blocks} blocks of quantisation, over 2^31 - 1"
        )));
    }
    let f = ctx.function(&spec(&arch, input, g, spec_.format, "fp8_quant"))?;
    let (mut pq, mut pldq, mut ps) = (codes.ptr(), ldq as i64, scales.ptr());
    let mut pue = (spec_.recipe == ScaleRecipe::Ue8m0) as i32;
    // SAFETY: fp8_quant takes (const qin_t*, int, int, i64, u8*, i64, float*, const u32*, int):
    // the buffers were checked above to hold the matrix, the codes and the scales; amax holds
    // the reduced word (read only per tensor, null otherwise) and lives until the
    // synchronisation below.
    unsafe {
        f.launch(
            ctx.stream,
            &LaunchConfig::simple((blocks.max(1) as u32, 1, 1), 256),
            &mut [
                &mut px as *mut u64 as *mut _,
                &mut prows as *mut i32 as *mut _,
                &mut pcols as *mut i32 as *mut _,
                &mut pldx as *mut i64 as *mut _,
                &mut pq as *mut u64 as *mut _,
                &mut pldq as *mut i64 as *mut _,
                &mut ps as *mut u64 as *mut _,
                &mut pamax as *mut u64 as *mut _,
                &mut pue as *mut i32 as *mut _,
            ],
        )?;
    }
    // The amax word is freed when this returns: wait for the kernels that read it.
    if amax.is_some() {
        ctx.synchronize()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_counts_and_indices() {
        let (r, c) = (300, 1000);
        assert_eq!(Granularity::Tensor.scale_count(r, c), 1);
        assert_eq!(Granularity::Row.scale_count(r, c), 300);
        assert_eq!(Granularity::Block1x128.scale_count(r, c), 300 * 8);
        assert_eq!(Granularity::Block128x128.scale_count(r, c), 3 * 8);
        assert_eq!(
            Granularity::Block1x128.scale_index(r, c, 5, 999),
            7 * 300 + 5
        );
        assert_eq!(
            Granularity::Block128x128.scale_index(r, c, 299, 130),
            2 * 8 + 1
        );
        for g in Granularity::ALL {
            assert_eq!(g.name().parse::<Granularity>().unwrap(), g);
            let max = (0..r)
                .flat_map(|i| [(i, 0), (i, c - 1)])
                .map(|(i, j)| g.scale_index(r, c, i, j))
                .max()
                .unwrap();
            assert_eq!(max + 1, g.scale_count(r, c), "{g}");
        }
    }

    #[test]
    fn bad_shapes_are_refused_with_a_reason() {
        assert!(check_shape(0, 5, 5, 100, 2)
            .unwrap_err()
            .to_string()
            .contains("at least 1"));
        assert!(check_shape(2, 5, 4, 100, 2)
            .unwrap_err()
            .to_string()
            .contains("shorter"));
        assert!(check_shape(2, 5, 5, 10, 2)
            .unwrap_err()
            .to_string()
            .contains("needs 20"));
        assert!(check_shape(2, 5, 8, 26, 2).is_ok());
    }

    #[test]
    fn every_quantisation_variant_compiles_for_sm_90a_without_spills() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let v = variants("sm_90a");
        assert_eq!(v.len(), 3 * 2 * 5);
        crate::jit::testing::assert_compile_clean(&v);
    }
}
