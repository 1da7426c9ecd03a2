//! The FP8 GEMM problem: C [M, N] = alpha * dequant(A) [M, K] · dequant(B) [N, K]ᵀ with A and B
//! K-major FP8 codes (the NT layout), their scales, and C row-major bf16/f16/f32; validated once
//! (shapes, scale counts, host scale values) so no kernel sees an impossible problem.
//!
//! Other layouts go through a stated transpose: an M-major A or an N-major B is first copied
//! K-major (quantising a transposed bf16 tensor gives the K-major codes directly), because FP8
//! wgmma reads only K-major operands from shared memory.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::quant::Granularity;
use crate::device::DeviceBuffer;
use crate::error::{Error, Result};
use crate::formats::Fp8Format;
use crate::ops::gemm::DType;

/// How A and B are scaled.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ScaleMode {
    /// One scale each for A and B.
    Tensor,
    /// One per row of A (M) and one per row of B (N, the columns of C).
    Row,
    /// DeepSeek's: A per 1x128 (row, K block), B per 128x128 (N block, K block).
    Block,
}

impl ScaleMode {
    pub const ALL: [ScaleMode; 3] = [ScaleMode::Tensor, ScaleMode::Row, ScaleMode::Block];

    /// `KILN_SCALE`.
    pub fn define(self) -> u32 {
        match self {
            ScaleMode::Tensor => 0,
            ScaleMode::Row => 1,
            ScaleMode::Block => 2,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ScaleMode::Tensor => "tensor",
            ScaleMode::Row => "row",
            ScaleMode::Block => "block",
        }
    }

    /// How A [M, K] is quantised for this mode.
    pub fn a_granularity(self) -> Granularity {
        match self {
            ScaleMode::Tensor => Granularity::Tensor,
            ScaleMode::Row => Granularity::Row,
            ScaleMode::Block => Granularity::Block1x128,
        }
    }

    /// How B [N, K] is quantised for this mode.
    pub fn b_granularity(self) -> Granularity {
        match self {
            ScaleMode::Tensor => Granularity::Tensor,
            ScaleMode::Row => Granularity::Row,
            ScaleMode::Block => Granularity::Block128x128,
        }
    }
}

impl fmt::Display for ScaleMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for ScaleMode {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "tensor" => Ok(ScaleMode::Tensor),
            "row" | "rowwise" => Ok(ScaleMode::Row),
            "block" | "blockwise" => Ok(ScaleMode::Block),
            _ => Err(Error::Unknown {
                what: "scale mode",
                name: s.into(),
                known: "tensor, row, block".into(),
            }),
        }
    }
}

/// One FP8 GEMM.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Fp8Problem {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: Fp8Format,
    pub b: Fp8Format,
    pub out: DType,
    pub scale: ScaleMode,
    /// Promote the tensor cores' partial sums into fp32 registers every 128 of K (block scales
    /// always do); without it the whole K accumulates in the wgmma accumulator.
    pub promote: bool,
    /// An extra factor on the result.
    pub alpha: f32,
    /// Leading dimensions of A and B (bytes = elements) and C (elements).
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
}

impl Fp8Problem {
    /// An e4m3 x e4m3 problem with packed operands, promoted accumulation and alpha 1.
    pub fn new(m: usize, n: usize, k: usize, out: DType, scale: ScaleMode) -> Self {
        Fp8Problem {
            m,
            n,
            k,
            a: Fp8Format::E4m3,
            b: Fp8Format::E4m3,
            out,
            scale,
            promote: true,
            alpha: 1.0,
            lda: k,
            ldb: k,
            ldc: n,
        }
    }

    /// FLOPs of the product (2 M N K).
    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }

    /// Scales A and B need.
    pub fn a_scales(&self) -> usize {
        self.scale.a_granularity().scale_count(self.m, self.k)
    }
    pub fn b_scales(&self) -> usize {
        self.scale.b_granularity().scale_count(self.n, self.k)
    }

    /// Device bytes of the FP8 codes of A and B (one byte each, with their leading dimensions),
    /// their f32 scales and C (M whole rows of ldc, as the harness allocates it): what one run's
    /// operands occupy.
    pub fn device_bytes(&self) -> u64 {
        let span = |rows: usize, ld: usize, cols: usize| ((rows - 1) * ld + cols) as u64;
        span(self.m, self.lda, self.k)
            + span(self.n, self.ldb, self.k)
            + 4 * (self.a_scales() + self.b_scales()) as u64
            + (self.m * self.ldc * self.out.size()) as u64
    }

    /// Checks the shape, the leading dimensions and alpha.
    pub fn validate(&self) -> Result<()> {
        let (m, n, k) = (self.m, self.n, self.k);
        if m == 0 || n == 0 || k == 0 {
            return Err(Error::invalid(format!(
                "the FP8 GEMM {m}x{n}x{k} has an empty side: M, N and K must be at least 1"
            )));
        }
        if m > i32::MAX as usize || n > i32::MAX as usize || k > i32::MAX as usize {
            return Err(Error::invalid(format!(
                "the FP8 GEMM {m}x{n}x{k} has a side of 2^31 or more"
            )));
        }
        if !k.is_multiple_of(16) {
            return Err(Error::invalid(format!(
                "K = {k} is not a multiple of 16: FP8 rows must be whole 16-byte units for TMA; \
                 pad K with zeros to {}",
                k.next_multiple_of(16)
            )));
        }
        for (name, ld, min) in [
            ("lda", self.lda, k),
            ("ldb", self.ldb, k),
            ("ldc", self.ldc, n),
        ] {
            if ld < min {
                return Err(Error::invalid(format!(
                    "{name} = {ld} is shorter than a row of {min} elements"
                )));
            }
        }
        for (name, ld) in [("lda", self.lda), ("ldb", self.ldb)] {
            if !ld.is_multiple_of(16) {
                return Err(Error::invalid(format!(
                    "{name} = {ld} bytes is not a multiple of 16 (TMA's row stride rule)"
                )));
            }
        }
        if !self.alpha.is_finite() {
            return Err(Error::invalid(format!(
                "alpha = {} is not finite",
                self.alpha
            )));
        }
        Ok(())
    }

    /// Checks that the operand buffers hold the matrices.
    pub fn check_buffers(
        &self,
        a: &DeviceBuffer,
        b: &DeviceBuffer,
        c: &DeviceBuffer,
    ) -> Result<()> {
        let need = |rows: usize, ld: usize, cols: usize, es: usize| ((rows - 1) * ld + cols) * es;
        for (name, buf, bytes) in [
            ("A", a, need(self.m, self.lda, self.k, 1)),
            ("B", b, need(self.n, self.ldb, self.k, 1)),
            ("C", c, need(self.m, self.ldc, self.n, self.out.size())),
        ] {
            if buf.bytes() < bytes {
                return Err(Error::invalid(format!(
                    "the {name} buffer holds {} bytes; {self} needs {bytes}",
                    buf.bytes()
                )));
            }
        }
        Ok(())
    }
}

impl fmt::Display for Fp8Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}x{}x{} {}x{} {} scales -> {}{}",
            self.m,
            self.n,
            self.k,
            self.a,
            self.b,
            self.scale,
            self.out,
            if self.promote { "" } else { " (unpromoted)" }
        )
    }
}

/// Where a matrix's scales are.
pub enum Scales<'a> {
    /// On the host: checked (count, finite) and copied to the device at launch.
    Host(&'a [f32]),
    /// On the device (fp32, in [`Granularity::scale_index`] order), e.g. straight from
    /// [`super::quantize`]: only their count is checked; values are used as they are, so a NaN
    /// or infinite scale gives NaN or infinite results where it applies.
    Device(&'a DeviceBuffer),
}

impl Scales<'_> {
    /// Checks that there are `count` scales, and for host scales that each is finite.
    pub fn check(&self, which: &str, count: usize, g: Granularity) -> Result<()> {
        match self {
            Scales::Host(s) => {
                if s.len() != count {
                    return Err(Error::invalid(format!(
                        "{which} has {} scales; {g} scaling of this operand needs {count}",
                        s.len()
                    )));
                }
                if let Some((i, v)) = s.iter().enumerate().find(|(_, v)| !v.is_finite()) {
                    return Err(Error::invalid(format!(
                        "{which} scale {i} is {v}: scales must be finite (re-quantise the operand)"
                    )));
                }
                Ok(())
            }
            Scales::Device(b) => {
                if b.bytes() < 4 * count {
                    return Err(Error::invalid(format!(
                        "the {which} scale buffer holds {} bytes; {g} scaling of this operand \
                         needs {count} fp32 scales ({} bytes)",
                        b.bytes(),
                        4 * count
                    )));
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn device_bytes_are_codes_scales_and_c() {
        let p = Fp8Problem::new(256, 512, 1024, DType::Bf16, ScaleMode::Block);
        let scales = 256 * 8 + 4 * 8; // 1x128 blocks of A, 128x128 of B
        assert_eq!(
            p.device_bytes(),
            256 * 1024 + 512 * 1024 + 4 * scales + 256 * 512 * 2
        );
    }

    use super::*;

    #[test]
    fn bad_shapes_are_one_clear_error_each() {
        let p = Fp8Problem::new(128, 256, 4096, DType::Bf16, ScaleMode::Block);
        assert!(p.validate().is_ok());
        let e = Fp8Problem::new(128, 256, 4104, DType::Bf16, ScaleMode::Block)
            .validate()
            .unwrap_err();
        assert!(
            e.to_string().contains("not a multiple of 16") && e.to_string().contains("4112"),
            "{e}"
        );
        assert_eq!(e.exit_code(), 2);
        let e = Fp8Problem::new(0, 256, 4096, DType::Bf16, ScaleMode::Block)
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("at least 1"));
        let e = Fp8Problem { lda: 4100, ..p }.validate().unwrap_err();
        assert!(e.to_string().contains("lda = 4100"));
        let e = Fp8Problem { ldc: 100, ..p }.validate().unwrap_err();
        assert!(e.to_string().contains("ldc = 100"));
        let e = Fp8Problem {
            alpha: f32::NAN,
            ..p
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("alpha"));
    }

    #[test]
    fn scale_counts_follow_the_mode() {
        let p = Fp8Problem::new(300, 500, 1040, DType::Bf16, ScaleMode::Block);
        assert_eq!((p.a_scales(), p.b_scales()), (300 * 9, 4 * 9));
        let p = Fp8Problem {
            scale: ScaleMode::Row,
            ..p
        };
        assert_eq!((p.a_scales(), p.b_scales()), (300, 500));
        let p = Fp8Problem {
            scale: ScaleMode::Tensor,
            ..p
        };
        assert_eq!((p.a_scales(), p.b_scales()), (1, 1));
    }

    #[test]
    fn host_scales_are_checked_for_count_and_finiteness() {
        let g = Granularity::Block1x128;
        assert!(Scales::Host(&[1.0, 2.0]).check("A", 2, g).is_ok());
        let e = Scales::Host(&[1.0]).check("A", 2, g).unwrap_err();
        assert!(
            e.to_string().contains("has 1 scales") && e.exit_code() == 2,
            "{e}"
        );
        let e = Scales::Host(&[1.0, f32::NAN]).check("B", 2, g).unwrap_err();
        assert!(e.to_string().contains("B scale 1 is NaN"), "{e}");
        let e = Scales::Host(&[f32::INFINITY, 1.0])
            .check("B", 2, g)
            .unwrap_err();
        assert!(e.to_string().contains("scale 0 is inf"), "{e}");
    }

    #[test]
    fn modes_parse() {
        for s in ScaleMode::ALL {
            assert_eq!(s.name().parse::<ScaleMode>().unwrap(), s);
        }
        assert_eq!("rowwise".parse::<ScaleMode>().unwrap(), ScaleMode::Row);
        assert!("channel".parse::<ScaleMode>().is_err());
    }
}
