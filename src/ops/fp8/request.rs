//! The GEMM commands' flags (`--dtype e4m3 --scale block`, a shape, a layout, an output) read as
//! one FP8 problem, or the sentence that says which combination the FP8 GEMM does not take.

use super::problem::{Fp8Problem, ScaleMode};
use crate::error::{Error, Result};
use crate::formats::Fp8Format;
use crate::ops::gemm::{parse_shape, DType};

/// What a GEMM command was given, as text (the CLI's `ProblemArgs` and `InspectArgs`).
#[derive(Debug, Clone, Copy, Default)]
pub struct GemmFlags<'a> {
    pub shape: Option<&'a str>,
    pub layout: &'a str,
    pub dtype: &'a str,
    pub out: Option<&'a str>,
    pub scale: Option<&'a str>,
    pub alpha: f32,
    pub beta: f32,
    pub lda: Option<usize>,
    pub ldb: Option<usize>,
    pub ldc: Option<usize>,
}

/// `e4m3` or `e5m2`: the dtypes that route a GEMM command to the FP8 GEMM.
pub fn is_fp8(dtype: &str) -> bool {
    dtype.parse::<Fp8Format>().is_ok()
}

/// The FP8 request the flags make: `None` for a bf16 / f16 one (which must not carry --scale),
/// else the format, scale mode (block by default) and output (bf16 by default), refusing what
/// the FP8 GEMM does not take: a layout other than RC (A [M, K] and B [N, K], both K-major),
/// a C read in (beta), alpha other than 1 and leading dimensions (the commands' FP8 problems are
/// packed; the library call takes both).
pub fn fp8_request(f: &GemmFlags) -> Result<Option<(Fp8Format, ScaleMode, DType)>> {
    if !is_fp8(f.dtype) {
        if let Some(s) = f.scale {
            return Err(Error::invalid(format!(
                "--scale {s} is for the FP8 GEMM, and --dtype {} is not FP8; add --dtype e4m3 \
                 (or e5m2) or leave --scale out",
                f.dtype
            )));
        }
        return Ok(None);
    }
    let format: Fp8Format = f.dtype.parse()?;
    let scale: ScaleMode = f.scale.unwrap_or("block").parse()?;
    let out: DType = f.out.unwrap_or("bf16").parse()?;
    if !f.layout.eq_ignore_ascii_case("RC") {
        return Err(Error::invalid(format!(
            "the FP8 GEMM takes layout RC only (A [M, K] and B [N, K], both K-major, as FP8 \
             wgmma reads them); transpose the operands to K-major, not --layout {}",
            f.layout
        )));
    }
    let unused = [
        ("--alpha", f.alpha != 1.0),
        ("--beta", f.beta != 0.0),
        ("--lda", f.lda.is_some()),
        ("--ldb", f.ldb.is_some()),
        ("--ldc", f.ldc.is_some()),
    ];
    if let Some((flag, _)) = unused.iter().find(|(_, given)| *given) {
        return Err(Error::invalid(format!(
            "{flag} is not taken with --dtype {format}: the FP8 commands run packed problems \
             with alpha 1 and no C read in; leave {flag} out"
        )));
    }
    Ok(Some((format, scale, out)))
}

/// The one FP8 problem the flags describe (`default_shape` without --shape), or `None` for a
/// bf16 / f16 request or an FP8 one without a shape (a suite).
pub fn fp8_problem(f: &GemmFlags, default_shape: Option<&str>) -> Result<Option<Fp8Problem>> {
    let Some((format, scale, out)) = fp8_request(f)? else {
        return Ok(None);
    };
    let Some(shape) = f.shape.or(default_shape) else {
        return Ok(None);
    };
    let (m, n, k) = parse_shape(shape)?;
    let p = Fp8Problem {
        a: format,
        b: format,
        ..Fp8Problem::new(m, n, k, out, scale)
    };
    p.validate()?;
    Ok(Some(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags<'a>(dtype: &'a str, scale: Option<&'a str>) -> GemmFlags<'a> {
        GemmFlags {
            shape: Some("256x512x1024"),
            layout: "RC",
            dtype,
            scale,
            alpha: 1.0,
            ..GemmFlags::default()
        }
    }

    #[test]
    fn e4m3_routes_to_the_fp8_gemm_with_block_scales_and_bf16_out_by_default() {
        let p = fp8_problem(&flags("e4m3", None), None).unwrap().unwrap();
        assert_eq!((p.m, p.n, p.k), (256, 512, 1024));
        assert_eq!(
            (p.a, p.scale, p.out),
            (Fp8Format::E4m3, ScaleMode::Block, DType::Bf16)
        );
        let p = fp8_problem(&flags("e5m2", Some("tensor")), None)
            .unwrap()
            .unwrap();
        assert_eq!((p.b, p.scale), (Fp8Format::E5m2, ScaleMode::Tensor));
        assert!(fp8_problem(&flags("bf16", None), None).unwrap().is_none());
    }

    #[test]
    fn bad_combinations_are_refused() {
        let says = |f: GemmFlags, what: &str| {
            let e = fp8_problem(&f, None).unwrap_err().to_string();
            assert!(e.contains(what), "{e}");
        };
        says(
            flags("bf16", Some("row")),
            "--scale row is for the FP8 GEMM",
        );
        says(flags("e4m3", Some("blocks")), "unknown scale mode");
        says(
            GemmFlags {
                layout: "CR",
                ..flags("e4m3", None)
            },
            "layout RC only",
        );
        says(
            GemmFlags {
                beta: 1.0,
                ..flags("e4m3", None)
            },
            "--beta is not taken",
        );
        says(
            GemmFlags {
                ldc: Some(600),
                ..flags("e4m3", None)
            },
            "--ldc",
        );
        says(
            GemmFlags {
                shape: Some("128x128x100"),
                ..flags("e4m3", None)
            },
            "multiple of 16",
        );
        says(
            GemmFlags {
                out: Some("e4m3"),
                ..flags("e4m3", None)
            },
            "e4m3",
        );
    }
}
