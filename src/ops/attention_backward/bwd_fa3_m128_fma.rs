//! Host side of `bwd_fa3_lookahead.cu` as `bwd_fa3_m128_rows` compiles it (d64, 128 query rows a
//! step, dQ split by query rows) with part of the math between the products moved off the units
//! it queues on: a share of Pᵀ's exponentials computed by a polynomial on the FMA pipe
//! (`KILN_BWD_EXP_POLY`, `ex2_poly` in `common/fast_math.cuh`) and, in bf16, dSᵀ = Pᵀ ∘ (dPᵀ − D)
//! in packed pairs (`KILN_BWD_DS_PACKED`).
//!
//! Why: the H200 profile of `bwd_fa3_m128_rows` at d64 B4 H16 S4096 (2026-11-29: 1.55 ms, 2.77 M
//! cycles, the tensor pipe 46.4 % active; cuDNN's persistent 132-CTA kernel 2.61 M cycles, 48.8 %)
//! put 24 % of the stall samples in Pᵀ's loop and 11 % in dSᵀ's: a thread's 64 exponentials a step
//! are 1,024 cycles of MUFU for the two consumer warps of a sub-partition (16 a clock an SM), of
//! which the tensor pipe covers 512 with dPᵀ; dSᵀ's unpack, fp32 product and pack are 7
//! instructions a pair while dV runs 512 cycles beside them. Both phases hold the tensor pipe idle
//! once its queue drains. With 3 of every 8 exponentials on the FMA pipe MUFU's share drops to 640
//! cycles and the added issue (8 instructions an exponential in bf16) still fits beside it; the
//! packed dSᵀ takes 4 instructions a pair. Deterministic mode: the ordered atomics, as
//! `bwd_fa3_m128_rows`.
//!
//! Measured (H200, the lead's mid-way call on 5e97a8c, 2026-11-29; ledger B16): verified (S4096,
//! GQA, ragged BHSD f16 causal, deterministic S4097 bitwise), 1.04x `bwd_fa3_m128_rows` at B4 H16
//! S4096 (447.2 against 430.5 TFLOPS) and 1.025x at B1 H16 S16384 (478.5 against 466.7); with no
//! exponential on the FMA pipe 448.3: the packed dSᵀ is the gain, so the default share is 0 and
//! the polynomial a knob (`KILN_BWD_EXP_POLY`).

use super::bwd_fa3_wgmma::wgmma_knobs;
use super::bwd_fa3_wgmma::{launch_tile, WgmmaBwdTile};
use super::knobs::{Knob, Knobs};
use super::{bwd_fa3_m128, bwd_fa3_m128_rows};
use super::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::attention::DTYPES;
use crate::overrides::AttentionOverrides;

pub struct BwdFa3M128Fma;

/// Of every 8 exponentials, how many its default takes on the FMA pipe (`KILN_BWD_EXP_POLY`): none.
/// 3 measured the same as 0 on an H200 (the lead's mid-way call on 5e97a8c, 2026-11-29: B4 H16
/// S4096 447.2 against 448.3 TFLOPS; the packed dSᵀ alone gave the gain over `bwd_fa3_m128_rows`),
/// so the polynomial stays a knob for the sweep, off the default path.
pub const EXP_POLY: u32 = 0;

/// Its tile: `bwd_fa3_m128_rows`'s with dSᵀ in packed pairs (bf16; f16 keeps the fp32 product,
/// so that its kernel is `bwd_fa3_m128_rows`' by default) and `exp_poly` of every 8 exponentials
/// by polynomial.
pub(super) fn tile(exp_poly: u32) -> WgmmaBwdTile {
    WgmmaBwdTile {
        exp_poly,
        ds_packed: true,
        ..bwd_fa3_m128_rows::tile()
    }
}

impl AttentionBackwardKernel for BwdFa3M128Fma {
    fn name(&self) -> &'static str {
        "bwd_fa3_m128_fma"
    }
    fn summary(&self) -> &'static str {
        "bwd_fa3_m128_rows with dS^T in packed bf16 pairs (and, by KILN_BWD_EXP_POLY, a share of the exponentials on the FMA pipe)"
    }
    fn rung(&self) -> u32 {
        8
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        bwd_fa3_m128::supports_m128(p, dev, tile(EXP_POLY))
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        // its main kernels only (the passes are the default's); other shares of
        // `KILN_BWD_EXP_POLY` compile when asked for, outside the variant budget
        DTYPES
            .iter()
            .map(|&dt| tile(EXP_POLY).spec(arch, dt))
            .collect()
    }
    fn launch_knobs(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
        o: &AttentionOverrides,
    ) -> Result<()> {
        let n = o.bwd_exp_poly.unwrap_or(EXP_POLY);
        launch_tile(self.name(), ctx, p, ops, o, tile(n))
    }
    fn knobs(&self, p: &BackwardProblem) -> Knobs {
        let mut v = wgmma_knobs(p, &tile(EXP_POLY));
        v.push((Knob::ExpPoly, EXP_POLY as i64));
        v
    }
    fn by_default(&self) -> bool {
        false
    }
    /// The default at d64 from 4,096 query rows when not deterministic, causal or not: where
    /// `bwd_fa3_m128_rows` (non-causal) and `bwd_fa3_m128` (causal) were, both of which it beats
    /// there (H200, 5e73734, 2026-11-30, two rounds: B4 H16 S4096 448.5 / 445.4 TFLOPS against the
    /// row split's 430.5 / 429.1, causal 375.1 / 375.1 against `bwd_fa3_m128`'s 358.5 / 359.4; B1
    /// H16 S16384 478.9 / 485.0, causal 471.2 / 474.9 against 434.9 / 439.3). Shorter walks keep
    /// `bwd_fa3_lookahead`.
    fn by_default_for(&self, p: &BackwardProblem) -> bool {
        let a = &p.attn;
        a.head_dim == 64 && !p.deterministic && a.seqlen_q >= 4096
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;
    use crate::ops::gemm::DType;

    #[test]
    fn the_tile_is_the_row_split_with_two_defines() {
        let (t, rows) = (tile(EXP_POLY), bwd_fa3_m128_rows::tile());
        assert_eq!(t.smem_bytes(), rows.smem_bytes());
        let bf16 = t.spec("sm_90a", DType::Bf16).label();
        let f16 = t.spec("sm_90a", DType::F16).label();
        // by default the packed dSᵀ in bf16 only; f16 is the row split's own kernel
        assert!(
            bf16.contains("KILN_BWD_DS_PACKED=1") && !bf16.contains("EXP_POLY"),
            "{bf16}"
        );
        assert_eq!(f16, rows.spec("sm_90a", DType::F16).label());
        // a share of the exponentials by the knob: its define in both dtypes
        for dt in DTYPES {
            let l = tile(3).spec("sm_90a", dt).label();
            assert!(l.contains("KILN_BWD_EXP_POLY=3"), "{l}");
        }
        // the row split keeps its label
        let old = rows.spec("sm_90a", DType::Bf16).label();
        assert!(
            !old.contains("EXP_POLY") && !old.contains("DS_PACKED"),
            "{old}"
        );
        let h100 = DeviceInfo::h100_sxm();
        let p = |d| BackwardProblem::new(AttentionProblem::new(1, 2, 129, d), true);
        assert!(BwdFa3M128Fma.supports(&p(64), &h100).is_ok());
        assert!(BwdFa3M128Fma.supports(&p(128), &h100).is_err());
        assert!(!BwdFa3M128Fma.by_default_for(&p(64)));
        // d64, causal or not, not deterministic, from 4,096 rows
        let q = |s, causal, det| {
            let mut a = AttentionProblem::new(4, 16, s, 64);
            a.causal = causal;
            BackwardProblem::new(a, det)
        };
        assert!(BwdFa3M128Fma.by_default_for(&q(4096, false, false)));
        assert!(BwdFa3M128Fma.by_default_for(&q(4096, true, false)));
        assert!(!BwdFa3M128Fma.by_default_for(&q(4096, false, true)));
        assert!(!BwdFa3M128Fma.by_default_for(&q(2048, false, false)));
        assert!(!bwd_fa3_m128_rows::BwdFa3M128Rows.by_default_for(&q(4096, false, false)));
    }

    /// `ex2_poly`'s coefficients of degree `deg`, read from `common/fast_math.cuh` (the line that
    /// evaluates that degree), highest first.
    fn poly_coefficients(deg: usize) -> Vec<f32> {
        let src = crate::jit::sources::get("common/fast_math.cuh").unwrap();
        let line = src
            .lines()
            .filter(|l| l.trim_start().starts_with("p = fmaf("))
            .find(|l| l.matches("fmaf(").count() == deg)
            .unwrap();
        let c: Vec<f32> = line
            .split(|ch: char| !(ch.is_ascii_digit() || ch == '.' || ch == 'f'))
            .filter_map(|w| w.strip_suffix('f')?.parse().ok())
            .collect();
        assert_eq!(c.len(), deg + 1, "{line}");
        c
    }

    /// The device's `ex2_poly` step by step in f32 (fused multiply-adds, the 1.5·2^23 shift, the
    /// integer added into the exponent field).
    fn ex2_poly(x: f32, c: &[f32]) -> f32 {
        let xc = if x.is_nan() { x } else { x.max(-125.0) };
        let t = xc + 12582912.0;
        let f = xc - (t - 12582912.0);
        let p = c[1..].iter().fold(c[0], |p, &k| p.mul_add(f, k));
        f32::from_bits(p.to_bits().wrapping_add(t.to_bits() << 23))
    }

    /// Its error bounds (the header's: 7.6e-5 at degree 3, 2.7e-6 at 4, relative) hold over the
    /// exponents a P takes, down to where it clamps; NaN stays NaN; very negative x is 2^-125.
    #[test]
    fn the_polynomial_exp2_is_within_its_bound() {
        for (deg, bound) in [(3, 7.6e-5), (4, 2.7e-6)] {
            let c = poly_coefficients(deg);
            let mut worst = 0.0f64;
            // every f32 step of 2^-12 over [-125, 1]
            for i in 0..=(126 << 12) {
                let x = -125.0 + i as f32 / 4096.0;
                let got = ex2_poly(x, &c) as f64;
                worst = worst.max((got / (x as f64).exp2() - 1.0).abs());
            }
            assert!(worst <= bound, "degree {deg}: {worst:e} over {bound:e}");
            assert!(ex2_poly(f32::NAN, &c).is_nan());
            assert_eq!(ex2_poly(-1e30, &c), ex2_poly(-125.0, &c));
            assert!(ex2_poly(-125.0, &c).is_normal());
        }
    }

    /// Every variant compiles for sm_90a with no local memory, no wgmma serialisation (ptxas's
    /// C751x notes) and its register split honoured (C7507, C7508: setmaxnreg ignored), and so do
    /// the shares a bench may ask for by `KILN_BWD_EXP_POLY` (2, 3, 4 in bf16, 3 in f16; at 5
    /// ptxas spilled 4 bytes).
    #[test]
    fn every_variant_compiles_without_spills() {
        let mut v = BwdFa3M128Fma.variants("sm_90a");
        for n in [2, 3, 4] {
            v.push(tile(n).spec("sm_90a", DType::Bf16));
        }
        v.push(tile(3).spec("sm_90a", DType::F16));
        crate::ops::attention_backward::assert_compiles_clean(v, &["C751", "C7507", "C7508"]);
    }
}
