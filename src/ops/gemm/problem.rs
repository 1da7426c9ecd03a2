//! The GEMM problem: C = alpha * op(A) * op(B) + beta * C, with its shape, layouts, dtypes and
//! leading dimensions, validated once so that no kernel ever sees an impossible problem.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Element types kiln's GEMMs read and write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    Bf16,
    F16,
    F32,
}

impl DType {
    pub fn size(self) -> usize {
        match self {
            DType::Bf16 | DType::F16 => 2,
            DType::F32 => 4,
        }
    }
    /// The code kernels receive as `KILN_IN` / `KILN_OUT`.
    pub fn code(self) -> u32 {
        match self {
            DType::Bf16 => 0,
            DType::F16 => 1,
            DType::F32 => 2,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            DType::Bf16 => "bf16",
            DType::F16 => "f16",
            DType::F32 => "f32",
        }
    }
    /// The element type a TMA tensor map uses for this dtype.
    pub fn tma(self) -> crate::device::TmaDType {
        use crate::device::TmaDType;
        match self {
            DType::Bf16 => TmaDType::Bf16,
            DType::F16 => TmaDType::F16,
            DType::F32 => TmaDType::F32,
        }
    }
    pub const INPUTS: [DType; 2] = [DType::Bf16, DType::F16];
    pub const OUTPUTS: [DType; 3] = [DType::Bf16, DType::F16, DType::F32];
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_lowercase().as_str() {
            "bf16" | "bfloat16" => Ok(DType::Bf16),
            "f16" | "fp16" | "half" | "float16" => Ok(DType::F16),
            "f32" | "fp32" | "float" | "float32" => Ok(DType::F32),
            _ => Err(Error::invalid(format!(
                "unknown dtype `{s}`; use bf16, f16 or f32"
            ))),
        }
    }
}

/// Storage order of A (M x K) and B (K x N): first letter A, second B; R = row-major, C = column-
/// major. `RC` is A row-major, B column-major: both K-contiguous (BLAS "TN"). C is row-major.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Layout {
    RC,
    CR,
    RR,
    CC,
}

impl Layout {
    pub const ALL: [Layout; 4] = [Layout::RC, Layout::CR, Layout::RR, Layout::CC];
    pub fn a_row_major(self) -> bool {
        matches!(self, Layout::RC | Layout::RR)
    }
    pub fn b_row_major(self) -> bool {
        matches!(self, Layout::CR | Layout::RR)
    }
    /// A is K-contiguous.
    pub fn a_k_major(self) -> bool {
        self.a_row_major()
    }
    /// B is K-contiguous.
    pub fn b_k_major(self) -> bool {
        !self.b_row_major()
    }
    pub fn name(self) -> &'static str {
        match self {
            Layout::RC => "RC",
            Layout::CR => "CR",
            Layout::RR => "RR",
            Layout::CC => "CC",
        }
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Layout {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s.to_ascii_uppercase().as_str() {
            "RC" => Ok(Layout::RC),
            "CR" => Ok(Layout::CR),
            "RR" => Ok(Layout::RR),
            "CC" => Ok(Layout::CC),
            _ => Err(Error::invalid(format!("unknown layout `{s}`; use RC, CR, RR or CC (A then B; R row-major, C column-major)"))),
        }
    }
}

/// One GEMM to run. Construct with [`GemmProblem::new`], adjust, then [`validate`](Self::validate).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GemmProblem {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub layout: Layout,
    pub input: DType,
    pub output: DType,
    pub lda: usize,
    pub ldb: usize,
    pub ldc: usize,
    pub alpha: f32,
    pub beta: f32,
}

/// A [`GemmProblem`] as a hashable key (alpha and beta by their bits): what launches are
/// memoised by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct GemmKey {
    dims: [usize; 6],
    layout: Layout,
    io: (DType, DType),
    scale_bits: (u32, u32),
}

impl GemmProblem {
    pub fn key(&self) -> GemmKey {
        GemmKey {
            dims: [self.m, self.n, self.k, self.lda, self.ldb, self.ldc],
            layout: self.layout,
            io: (self.input, self.output),
            scale_bits: (self.alpha.to_bits(), self.beta.to_bits()),
        }
    }

    /// A tightly packed problem (leading dimensions equal to the contiguous extent).
    pub fn new(m: usize, n: usize, k: usize, layout: Layout, input: DType, output: DType) -> Self {
        let lda = if layout.a_row_major() { k } else { m };
        let ldb = if layout.b_row_major() { n } else { k };
        GemmProblem {
            m,
            n,
            k,
            layout,
            input,
            output,
            lda,
            ldb,
            ldc: n,
            alpha: 1.0,
            beta: 0.0,
        }
    }

    /// The same product with a degenerate operand's orientation turned to where its leading
    /// dimension is free. An operand with one row or column stored with a leading dimension of
    /// 1 is contiguous either way: a 1 x K column-major A (lda 1) is the 1 x K row-major A
    /// (lda K); likewise a K x 1 row-major B, and K = 1 the other way round. Kernels that need
    /// 16-byte rows (TMA) then take it: 1x4096x4096 CC ran on mma_sync at 0.12x cuBLAS.
    /// Every other problem is returned as it is.
    pub fn canonical(&self) -> GemmProblem {
        let mut p = *self;
        let (mut a_row, mut b_row) = (p.layout.a_row_major(), p.layout.b_row_major());
        if p.lda == 1 && !a_row && p.m == 1 {
            (a_row, p.lda) = (true, p.k);
        } else if p.lda == 1 && a_row && p.k == 1 && p.m > 1 {
            (a_row, p.lda) = (false, p.m);
        }
        if p.ldb == 1 && b_row && p.n == 1 {
            (b_row, p.ldb) = (false, p.k);
        } else if p.ldb == 1 && !b_row && p.k == 1 && p.n > 1 {
            (b_row, p.ldb) = (true, p.n);
        }
        p.layout = match (a_row, b_row) {
            (true, false) => Layout::RC,
            (false, true) => Layout::CR,
            (true, true) => Layout::RR,
            (false, false) => Layout::CC,
        };
        p
    }

    pub fn flops(&self) -> f64 {
        2.0 * self.m as f64 * self.n as f64 * self.k as f64
    }

    /// The fewest bytes a GEMM must move: read A and B once, write C once (and read it if beta≠0).
    pub fn min_bytes(&self) -> f64 {
        let (m, n, k) = (self.m as f64, self.n as f64, self.k as f64);
        let c = m * n * self.output.size() as f64;
        (m * k + k * n) * self.input.size() as f64 + c + if self.beta != 0.0 { c } else { 0.0 }
    }

    /// Device bytes of A, B and C as their leading dimensions lay them out: what one run's
    /// operands occupy.
    pub fn device_bytes(&self) -> u64 {
        let (i, o) = (self.input.size() as u64, self.output.size() as u64);
        (self.a_elems() as u64 + self.b_elems() as u64) * i + self.c_elems() as u64 * o
    }

    /// (rows, cols, ld) of A and B as stored.
    pub fn a_storage(&self) -> (usize, usize) {
        if self.layout.a_row_major() {
            (self.m, self.k)
        } else {
            (self.k, self.m)
        }
    }
    pub fn b_storage(&self) -> (usize, usize) {
        if self.layout.b_row_major() {
            (self.k, self.n)
        } else {
            (self.n, self.k)
        }
    }

    /// Elements spanned by each operand given its leading dimension.
    pub fn a_elems(&self) -> usize {
        let (r, c) = self.a_storage();
        (r - 1) * self.lda + c
    }
    pub fn b_elems(&self) -> usize {
        let (r, c) = self.b_storage();
        (r - 1) * self.ldb + c
    }
    pub fn c_elems(&self) -> usize {
        (self.m - 1) * self.ldc + self.n
    }

    /// Checks sizes, leading dimensions and dtypes; says what is wrong and how to fix it.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [("M", self.m), ("N", self.n), ("K", self.k)] {
            if v == 0 {
                return Err(Error::invalid(format!(
                    "{name} is 0; GEMM dimensions must be at least 1"
                )));
            }
            if v > i32::MAX as usize {
                return Err(Error::invalid(format!(
                    "{name} = {v} exceeds the largest supported extent {}",
                    i32::MAX
                )));
            }
        }
        if self.input == DType::F32 {
            return Err(Error::invalid(
                "f32 inputs are not supported; inputs are bf16 or f16 (fp32 accumulation)",
            ));
        }
        let (_, a_cols) = self.a_storage();
        let (_, b_cols) = self.b_storage();
        if self.lda < a_cols {
            return Err(Error::invalid(format!(
                "lda = {} is smaller than A's contiguous extent {a_cols} for layout {}",
                self.lda, self.layout
            )));
        }
        if self.ldb < b_cols {
            return Err(Error::invalid(format!(
                "ldb = {} is smaller than B's contiguous extent {b_cols} for layout {}",
                self.ldb, self.layout
            )));
        }
        if self.ldc < self.n {
            return Err(Error::invalid(format!(
                "ldc = {} is smaller than N = {}",
                self.ldc, self.n
            )));
        }
        if !self.alpha.is_finite() || !self.beta.is_finite() {
            return Err(Error::invalid("alpha and beta must be finite"));
        }
        Ok(())
    }

    /// Checks that buffers of these sizes (bytes) hold the operands.
    pub fn check_buffers(&self, a_bytes: usize, b_bytes: usize, c_bytes: usize) -> Result<()> {
        for (name, need, have) in [
            ("A", self.a_elems() * self.input.size(), a_bytes),
            ("B", self.b_elems() * self.input.size(), b_bytes),
            ("C", self.c_elems() * self.output.size(), c_bytes),
        ] {
            if have < need {
                return Err(Error::invalid(format!(
                    "{name} needs {need} bytes for this shape and stride but its buffer has {have}"
                )));
            }
        }
        Ok(())
    }

    /// A short label, e.g. `4096x4096x4096 RC bf16->bf16`.
    pub fn label(&self) -> String {
        format!(
            "{}x{}x{} {} {}->{}",
            self.m, self.n, self.k, self.layout, self.input, self.output
        )
    }
}

/// Parses `MxNxK` (also `M,N,K` or a single `S` for a cube).
pub fn parse_shape(s: &str) -> Result<(usize, usize, usize)> {
    let parts: Vec<&str> = s.split(['x', 'X', ',']).map(str::trim).collect();
    let nums: Vec<usize> = parts
        .iter()
        .map(|p| {
            p.parse::<i64>().map_err(|_| {
                Error::invalid(format!(
                    "shape `{s}`: `{p}` is not a number; write MxNxK, e.g. 4096x4096x4096"
                ))
            })
        })
        .map(|r| {
            r.and_then(|v| {
                if v <= 0 {
                    Err(Error::invalid(format!(
                        "shape `{s}`: every dimension must be at least 1"
                    )))
                } else {
                    Ok(v as usize)
                }
            })
        })
        .collect::<Result<_>>()?;
    match nums.as_slice() {
        [s] => Ok((*s, *s, *s)),
        [m, n, k] => Ok((*m, *n, *k)),
        _ => Err(Error::invalid(format!(
            "shape `{s}` must be MxNxK (three numbers) or a single size"
        ))),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn device_bytes_count_every_operand_with_its_stride() {
        let p = GemmProblem::new(4, 8, 16, Layout::RC, DType::Bf16, DType::F32);
        assert_eq!(p.device_bytes(), (4 * 16 + 8 * 16) * 2 + 4 * 8 * 4);
        let mut padded = p;
        padded.lda = 24; // A: 3 rows of 24 and a last row of 16
        assert_eq!(padded.device_bytes(), p.device_bytes() + 3 * 8 * 2);
        let huge = GemmProblem::new(
            200_000,
            200_000,
            200_000,
            Layout::RC,
            DType::Bf16,
            DType::Bf16,
        );
        assert_eq!(huge.device_bytes(), 3 * 200_000u64 * 200_000 * 2);
    }

    use super::*;

    #[test]
    fn shapes_parse_and_reject_nonsense() {
        assert_eq!(parse_shape("4x5x6").unwrap(), (4, 5, 6));
        assert_eq!(parse_shape("128").unwrap(), (128, 128, 128));
        assert!(parse_shape("0x4x4").is_err());
        assert!(parse_shape("-3x4x4").is_err());
        assert!(parse_shape("4x4").is_err());
        assert!(parse_shape("axbxc").is_err());
    }

    #[test]
    fn degenerate_operands_turn_to_where_their_rows_are_free() {
        let bf = |m, n, k, l| GemmProblem::new(m, n, k, l, DType::Bf16, DType::Bf16);
        // a 1-row column-major A is the row-major one; B keeps its orientation
        let c = bf(1, 4096, 4096, Layout::CC).canonical();
        assert_eq!((c.layout, c.lda, c.ldb), (Layout::RC, 4096, 4096));
        // a 1-column row-major B is the column-major one
        let c = bf(64, 1, 512, Layout::RR).canonical();
        assert_eq!((c.layout, c.lda, c.ldb), (Layout::RC, 512, 512));
        // K = 1: a row-major M x 1 A and a column-major 1 x N B
        let c = bf(64, 32, 1, Layout::RC).canonical();
        assert_eq!((c.layout, c.lda, c.ldb), (Layout::CR, 64, 32));
        // a padded leading dimension is a real stride: unchanged, as is every usual problem
        let padded = GemmProblem {
            lda: 8,
            ..bf(1, 64, 64, Layout::CC)
        };
        assert_eq!(padded.canonical(), padded);
        for l in Layout::ALL {
            let p = bf(128, 4096, 4096, l);
            assert_eq!(p.canonical(), p);
        }
        // the same elements, the same product: the reference agrees element for element
        for (m, n, k, l) in [
            (1, 7, 9, Layout::CC),
            (1, 7, 9, Layout::CR),
            (5, 1, 9, Layout::RR),
            (5, 6, 1, Layout::RC),
            (1, 1, 1, Layout::CR),
        ] {
            let p = bf(m, n, k, l);
            let c = p.canonical();
            c.validate().unwrap();
            assert_eq!((c.a_elems(), c.b_elems()), (p.a_elems(), p.b_elems()));
            let a: Vec<f64> = (0..p.a_elems()).map(|i| (i as f64 * 0.37).sin()).collect();
            let b: Vec<f64> = (0..p.b_elems()).map(|i| (i as f64 * 0.11).cos()).collect();
            let rows: Vec<usize> = (0..m).collect();
            assert_eq!(
                crate::reference::gemm::gemm_rows(&p, &a, &b, None, &rows),
                crate::reference::gemm::gemm_rows(&c, &a, &b, None, &rows),
                "{m}x{n}x{k} {l}"
            );
        }
    }

    #[test]
    fn leading_dimensions_follow_the_layout() {
        let p = GemmProblem::new(3, 5, 7, Layout::CR, DType::Bf16, DType::F32);
        assert_eq!((p.lda, p.ldb, p.ldc), (3, 5, 5));
        assert_eq!((p.a_elems(), p.b_elems(), p.c_elems()), (21, 35, 15));
        p.validate().unwrap();
        let bad = GemmProblem { lda: 2, ..p };
        assert!(bad.validate().unwrap_err().to_string().contains("lda"));
        assert!(p
            .check_buffers(42, 70, 59)
            .unwrap_err()
            .to_string()
            .contains("C needs 60"));
    }
}
