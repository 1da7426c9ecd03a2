//! Host side of `kernels/moe/fp8_swiglu.cu`: the block-scaled FP8 fused SwiGLU dual GEMM over
//! experts, H = silu(X·W1ᵀ) ⊙ (X·W3ᵀ) (times the routing weight), written bf16 / f32 or quantised
//! to e4m3 with 1x128 scales in the epilogue (the down projection's input).

use super::fp8_grouped::{self, grid, prepare, w_map, x_map, SMEM_BUDGET, TABLE_BYTES, THREADS};
use super::fp8_problem::{Fp8MoeArgs, Fp8MoeOperands, Fp8MoeProblem};
use super::schedule::{order_for, MAX_EXPERTS};
use super::tile_prefix;
use crate::device::{Context, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;

pub const NAME: &str = "fp8_swiglu";
pub const ENTRY: &str = "moe_fp8_swiglu";
/// Tile rows, and columns of H (one 1x128 group of each row).
pub const BM: u32 = 64;
pub const BN: u32 = 128;
/// Rows of one W box: half the tile's columns of W1 or of W3.
pub const W_BOX: u32 = 64;

/// Bytes of one stage: 64 X rows and 128 rows each of W1 and W3, 128 of K.
pub const fn stage_bytes() -> u32 {
    (BM + 2 * BN) * fp8_grouped::BK
}

/// The two consumers' per-row maxima, two buffers ([tile parity][consumer][row] f32).
const AMAX_BYTES: u32 = 2 * 2 * BM * 4;

const fn fixed_bytes() -> u32 {
    1024 + AMAX_BYTES + TABLE_BYTES
}

pub const fn stages() -> u32 {
    let s = (SMEM_BUDGET - fixed_bytes()) / (stage_bytes() + 16);
    if s > 8 {
        8
    } else {
        s
    }
}

pub const fn smem_bytes() -> u32 {
    fixed_bytes() + stages() * (stage_bytes() + 16)
}

/// The specialisation: output bf16 or f32, or (`quantize`) e4m3 codes with 1x128 scales.
pub fn spec(arch: &str, out: DType, quantize: bool) -> KernelSpec {
    KernelSpec::new("moe/fp8_swiglu.cu", ENTRY, arch)
        .define("KILN_STAGES", stages())
        .define("KILN_MAX_EXPERTS", MAX_EXPERTS)
        .define("KILN_SMEM", smem_bytes())
        .define("KILN_OUT", if quantize { DType::Bf16 } else { out }.code())
        .define("KILN_QOUT", quantize as u32)
}

/// Every specialisation (for the compile check): bf16, f32 and quantised output.
pub fn variants(arch: &str) -> Vec<KernelSpec> {
    if !crate::jit::arch::has_wgmma(arch) {
        return Vec::new();
    }
    vec![
        tile_prefix::spec(arch),
        spec(arch, DType::Bf16, false),
        spec(arch, DType::F32, false),
        spec(arch, DType::Bf16, true),
    ]
}

/// H on the context's stream (enqueued only: no host synchronisation, no allocation, so it can
/// be captured in a CUDA graph).
pub fn launch(ctx: &Context, p: &Fp8MoeProblem, ops: &Fp8MoeOperands) -> Result<()> {
    let Some(sw) = p.swiglu else {
        return Err(Error::invalid(
            "this is a plain grouped GEMM; run it with the FP8 grouped GEMM (fp8_grouped)",
        ));
    };
    prepare(ctx, p, ops, BM, smem_bytes(), NAME)?;
    let unsupported = |reason: String| Error::Unsupported {
        kernel: NAME.into(),
        reason,
    };
    let Some((w3, _)) = ops.w3 else {
        return Err(Error::invalid("the FP8 SwiGLU needs W3 and its scales"));
    };
    let tx = x_map(p, ops.x.ptr());
    tx.validate().map_err(unsupported)?;
    let (t1, t3) = (w_map(p, ops.w.ptr(), W_BOX), w_map(p, w3.ptr(), W_BOX));
    t1.validate().map_err(unsupported)?;
    t3.validate().map_err(unsupported)?;
    let (mut map_x, mut map_w1, mut map_w3) = (tx.encode()?, t1.encode()?, t3.encode()?);
    let f = ctx.function(&spec(&ctx.arch(), p.out, sw.quantize))?;
    let order = order_for(&p.layout(), BM, &ctx.overrides.moe);
    let mut args = Fp8MoeArgs::new(p, ops, BN, order);
    let lc = LaunchConfig {
        smem_bytes: smem_bytes(),
        ..LaunchConfig::simple((grid(p, BM, BN, ctx.info.sm_count), 1, 1), THREADS)
    };
    // SAFETY: the kernel takes (TmaMap, TmaMap, TmaMap, Fp8MoeArgs) in this order. The maps
    // address X, W1 and W3, the args H (and its scales), the input scales, the routing weights
    // and the schedule workspace; `prepare` has matched every buffer to the problem, and the
    // caller keeps them alive until the stream has run.
    unsafe {
        f.launch(
            ctx.stream,
            &lc,
            &mut [
                map_x.as_param(),
                map_w1.as_param(),
                map_w3.as_param(),
                args.as_param(),
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_fits_an_h100_block() {
        assert_eq!(stage_bytes() % 1024, 0);
        assert_eq!(stage_bytes(), 40 * 1024);
        assert!(smem_bytes() <= SMEM_BUDGET);
        assert_eq!(stages(), 5);
    }

    #[test]
    fn the_stage_holds_x_and_four_w_boxes() {
        let p = Fp8MoeProblem::contiguous(&[100, 0, 30], 4096, 7168).with_swiglu(true, true);
        let x = x_map(&p, 1 << 20);
        let w = w_map(&p, 1 << 21, W_BOX);
        assert_eq!(w.validate(), Ok(()));
        assert_eq!(
            x.box_bytes() * (BM / fp8_grouped::X_BOX) as u64 + 4 * w.box_bytes(),
            stage_bytes() as u64
        );
    }

    #[test]
    fn quantised_output_is_compiled_with_bf16_only() {
        let v = variants("sm_90a");
        assert_eq!(v.len(), 4);
        assert!(v[3].label().contains("KILN_QOUT=1"));
        assert_eq!(
            spec("sm_90a", DType::F32, true).label(),
            spec("sm_90a", DType::Bf16, true).label()
        );
    }
}
