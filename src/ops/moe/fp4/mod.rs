//! MoE experts with 4-bit weights (NVFP4, MXFP4): the standard stacked layout users hand in, the
//! prepack into the layout the kernel loads, and the host side of `kernels/moe/fp4_experts.cu`.

pub mod dispatch;
pub mod file;
pub mod gemm_tile;
pub mod kernel;
pub mod kernel_w4a8;
pub mod layout;
pub mod order;
pub mod prepack;
#[cfg(test)]
mod prepack_tests;
pub mod w4a8;

pub use dispatch::Fp4TileRule;
pub use kernel::{Fp4Experts, Fp4Operands, Fp4Tile};
pub use kernel_w4a8::{W4a8Experts, W4a8Operands};
pub use order::Fp4Order;
pub use prepack::{prepack, prepack_swiglu, Fp4Prepacked};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::formats::{mxfp4, nvfp4};
use rayon::prelude::*;

/// Every 4-bit expert kernel variant (bf16 or f16 activations, and MXFP4 x e4m3 on the FP8
/// tensor cores), for `kiln check`.
pub fn variants(arch: &str) -> Vec<crate::jit::KernelSpec> {
    let mut v = Fp4Experts::variants(arch);
    v.extend(W4a8Experts::variants(arch));
    v
}

/// The block-scaled 4-bit weight formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Fp4Format {
    /// e2m1, one e4m3 scale per 16 along K, one f32 tensor scale per expert.
    Nvfp4,
    /// e2m1, one e8m0 scale per 32 along K.
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

    pub fn name(self) -> &'static str {
        match self {
            Fp4Format::Nvfp4 => "nvfp4",
            Fp4Format::Mxfp4 => "mxfp4",
        }
    }

    /// The code the kernel receives as `KILN_FP4`.
    pub fn code(self) -> u32 {
        match self {
            Fp4Format::Nvfp4 => 0,
            Fp4Format::Mxfp4 => 1,
        }
    }

    pub fn parse(s: &str) -> Result<Fp4Format> {
        match s.to_ascii_lowercase().as_str() {
            "nvfp4" => Ok(Fp4Format::Nvfp4),
            "mxfp4" => Ok(Fp4Format::Mxfp4),
            _ => Err(Error::invalid(format!(
                "unknown 4-bit weight format `{s}`; use nvfp4 or mxfp4"
            ))),
        }
    }
}

impl std::fmt::Display for Fp4Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// E experts' [rows, K] weights in the standard layout: codes [E, rows, K/2] (two e2m1 per byte,
/// element 0 in the low nibble), block scales [E, rows, K/block] (e4m3 or e8m0 codes), and for
/// NVFP4 one f32 tensor scale per expert. What users hand in; [`prepack`] turns it into the
/// kernel's layout.
#[derive(Debug, Clone, PartialEq)]
pub struct Fp4Weights {
    pub format: Fp4Format,
    pub experts: usize,
    pub rows: usize,
    pub k: usize,
    pub codes: Vec<u8>,
    pub scales: Vec<u8>,
    /// NVFP4: one per expert; MXFP4: empty.
    pub tensor_scales: Vec<f32>,
}

impl Fp4Weights {
    /// `values` ([E, rows, K] row-major) quantised expert by expert with the format's recipe.
    pub fn quantize(
        format: Fp4Format,
        experts: usize,
        rows: usize,
        k: usize,
        values: &[f32],
    ) -> Result<Fp4Weights> {
        let per = rows * k;
        if values.len() != experts * per {
            return Err(Error::invalid(format!(
                "{} values cannot be {experts} experts of [{rows}, {k}]",
                values.len()
            )));
        }
        let mut w = Fp4Weights {
            format,
            experts,
            rows,
            k,
            codes: Vec::with_capacity(experts * per / 2),
            scales: Vec::with_capacity(experts * per / format.block()),
            tensor_scales: Vec::new(),
        };
        // experts quantised in parallel (a model's whole projection at once from Python), then
        // laid end to end in expert order
        let each: Vec<(Vec<u8>, Vec<u8>, Option<f32>)> = values
            .par_chunks(per.max(1))
            .take(experts)
            .map(|x| {
                Ok(match format {
                    Fp4Format::Nvfp4 => {
                        let q = nvfp4::quantize(x, rows, k)?;
                        (q.codes, q.scales, Some(q.tensor_scale))
                    }
                    Fp4Format::Mxfp4 => {
                        let q = mxfp4::quantize(x, rows, k)?;
                        (q.codes, q.scales, None)
                    }
                })
            })
            .collect::<Result<_>>()?;
        for (codes, scales, g) in each {
            w.codes.extend(codes);
            w.scales.extend(scales);
            w.tensor_scales.extend(g);
        }
        Ok(w)
    }

    /// The bytes of one expert's codes and of its scales.
    fn expert_bytes(&self) -> (usize, usize) {
        (
            self.rows * self.k / 2,
            self.rows * (self.k / self.format.block()),
        )
    }

    /// Checks the shape, the buffer lengths and every scale; one sentence per fault.
    pub fn validate(&self) -> Result<()> {
        let b = self.format.block();
        let f = self.format;
        if self.k == 0 || !self.k.is_multiple_of(b) {
            return Err(Error::invalid(format!(
                "K = {} is not a positive multiple of the {f} block of {b}: pad K with zero weights to a multiple of {b}",
                self.k
            )));
        }
        let (codes, scales) = self.expert_bytes();
        if self.codes.len() != self.experts * codes {
            return Err(Error::invalid(format!(
                "the {f} codes hold {} bytes but [E {}, N {}, K/2 {}] needs {}",
                self.codes.len(),
                self.experts,
                self.rows,
                self.k / 2,
                self.experts * codes
            )));
        }
        if self.scales.len() != self.experts * scales {
            return Err(Error::invalid(format!(
                "the {f} scales hold {} values but [E {}, N {}, K/{b} {}] needs {}: one scale per block of {b} along K",
                self.scales.len(),
                self.experts,
                self.rows,
                self.k / b,
                self.experts * scales
            )));
        }
        let tensor_scales = if f == Fp4Format::Nvfp4 {
            self.experts
        } else {
            0
        };
        if self.tensor_scales.len() != tensor_scales {
            return Err(Error::invalid(format!(
                "{} tensor scales for {} {f} experts; NVFP4 takes one f32 per expert, MXFP4 none",
                self.tensor_scales.len(),
                self.experts
            )));
        }
        for e in 0..self.experts {
            // the formats' own checks: scale codes (UE4M3, not NaN), tensor scale
            self.check_expert(e).map_err(|err| match err {
                Error::InvalidInput(m) => Error::invalid(format!("expert {e}: {m}")),
                other => other,
            })?;
        }
        Ok(())
    }

    /// The format's checks of expert `e`'s buffers, without decoding them.
    fn check_expert(&self, e: usize) -> Result<()> {
        let (c, s) = self.expert_slices(e);
        match self.format {
            Fp4Format::Nvfp4 => nvfp4::check(c, s, self.tensor_scales[e], self.rows, self.k),
            Fp4Format::Mxfp4 => mxfp4::check(c, s, self.rows, self.k),
        }
    }

    /// Expert `e`'s codes and scales.
    pub(crate) fn expert_slices(&self, e: usize) -> (&[u8], &[u8]) {
        let (codes, scales) = self.expert_bytes();
        (
            &self.codes[e * codes..(e + 1) * codes],
            &self.scales[e * scales..(e + 1) * scales],
        )
    }

    /// The exact values of expert `e`, [rows, K] row-major.
    pub fn dequantize_expert(&self, e: usize) -> Result<Vec<f64>> {
        let mut out = Vec::new();
        self.dequantize_expert_into(e, &mut out)?;
        Ok(out)
    }

    /// [`Fp4Weights::dequantize_expert`] into `out` (resized), which a caller may reuse.
    pub fn dequantize_expert_into(&self, e: usize, out: &mut Vec<f64>) -> Result<()> {
        let (c, s) = self.expert_slices(e);
        match self.format {
            Fp4Format::Nvfp4 => {
                nvfp4::dequantize_into(c, s, self.tensor_scales[e], self.rows, self.k, out)
            }
            Fp4Format::Mxfp4 => mxfp4::dequantize_into(c, s, self.rows, self.k, out),
        }
    }

    /// The exact values of all experts, [E, rows, K].
    pub fn dequantize(&self) -> Result<Vec<f64>> {
        let mut v = Vec::with_capacity(self.experts * self.rows * self.k);
        for e in 0..self.experts {
            v.extend(self.dequantize_expert(e)?);
        }
        Ok(v)
    }
}
