//! Host side of `kernels/attention/fa3_wgmma.cu`: the FlashAttention-3-style forward for Hopper
//! (head dim 128): a TMA producer warpgroup and two WGMMA consumer warpgroups with setmaxnreg,
//! P kept in registers as the A operand of P·V. Q, K and V are rank-4 tensor maps
//! [batch, heads, seq, dim] (dim innermost), so either layout and any sequence length work.

use std::ffi::c_void;

use cudarc::driver::sys;

use super::{AttentionKernel, AttentionOperands, AttentionProblem, AttnArgs, Strides, DTYPES};
use crate::device::{Context, DeviceInfo, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::{alignment, DType};

pub struct Fa3Wgmma;

/// K+V stages in the ring. Three (226 KB of shared memory with Q) measured fastest on an H200:
/// with the overlap on, 2 stages starve the tensor cores (502-532 TFLOPS at d128, 4k-16k) while
/// 3 reach 648-701; without the overlap 2 stages give 578-620 (`KILN_FA3_STAGES=2` to compare).
pub const STAGES: u32 = 3;
const BM: u32 = 128;
const BN: u32 = 128;
const THREADS: u32 = 384;

/// Dynamic shared memory: 1 KB of alignment slack, the Q tile, the ring of K+V stages, barriers.
pub fn smem_bytes(stages: u32) -> u32 {
    let tile = 128 * 128 * 2;
    1024 + tile + stages * 2 * tile + (1 + 3 * stages) * 8
}

fn spec(arch: &str, dtype: DType, overlap: bool, stages: u32) -> KernelSpec {
    KernelSpec::new("attention/fa3_wgmma.cu", "attn_fa3_wgmma", arch)
        .define("KILN_IN", dtype.code())
        .define("KILN_STAGES", stages)
        .define("KILN_OVERLAP", overlap as u32)
        .define("KILN_SMEM", smem_bytes(stages))
}

/// The ring depth launches use: `KILN_FA3_STAGES` (2 or 3), else [`STAGES`].
pub fn stages() -> u32 {
    match std::env::var("KILN_FA3_STAGES").ok().as_deref() {
        Some("3") => 3,
        Some("2") => 2,
        _ => STAGES,
    }
}

/// Whether launches overlap the next tile's Q·Kᵀ with this tile's softmax (the default), or run
/// them one after the other (`KILN_FA3_OVERLAP=0`, for comparison). Every combination that
/// [`Fa3Wgmma::variants`] lists passed the verification suite on an H200.
pub fn overlap() -> bool {
    std::env::var("KILN_FA3_OVERLAP")
        .map(|v| v != "0")
        .unwrap_or(DEFAULT_OVERLAP)
}

const DEFAULT_OVERLAP: bool = true;

/// A 128-byte CUtensorMap, aligned as CUDA 13 requires (`TmaMap` in kernels/common/tma.cuh).
#[repr(C, align(128))]
struct Map([u64; 16]);

/// The (dims, byte strides of dims 1..3) of a rank-4 map over [batch, heads, seq, dim].
pub fn map_shape(
    batch: usize,
    heads: usize,
    seq: usize,
    dim: usize,
    st: Strides,
    es: usize,
) -> ([u64; 4], [u64; 3]) {
    (
        [dim as u64, seq as u64, heads as u64, batch as u64],
        [
            (st.seq * es) as u64,
            (st.head * es) as u64,
            (st.batch * es) as u64,
        ],
    )
}

/// Encodes a rank-4 map with boxes of 64 dims x `rows` rows and 128-byte swizzle; rows past the
/// sequence end read as zeros.
fn encode(addr: u64, dtype: DType, dims: [u64; 4], strides: [u64; 3], rows: u32) -> Result<Map> {
    let mut map = Map([0; 16]);
    let boxes: [u32; 4] = [64, rows, 1, 1];
    let elem: [u32; 4] = [1; 4];
    let ty = match dtype {
        DType::F16 => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_FLOAT16,
        _ => sys::CUtensorMapDataType::CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
    };
    // SAFETY: the arrays have rank (strides: rank - 1) entries; `map` is 128 bytes, 128-byte
    // aligned and writable; the call reads the arrays and writes only `map`.
    let r = unsafe {
        sys::cuTensorMapEncodeTiled(
            &mut map as *mut Map as *mut sys::CUtensorMap,
            ty,
            4,
            addr as *mut c_void,
            dims.as_ptr(),
            strides.as_ptr(),
            boxes.as_ptr(),
            elem.as_ptr(),
            sys::CUtensorMapInterleave::CU_TENSOR_MAP_INTERLEAVE_NONE,
            sys::CUtensorMapSwizzle::CU_TENSOR_MAP_SWIZZLE_128B,
            sys::CUtensorMapL2promotion::CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
            sys::CUtensorMapFloatOOBfill::CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
        )
    };
    r.result().map_err(|e| {
        Error::cuda(
            format!("cuTensorMapEncodeTiled (rank 4, dims {dims:?}, strides {strides:?})"),
            format!("{e:?}"),
        )
    })?;
    Ok(map)
}

impl AttentionKernel for Fa3Wgmma {
    fn name(&self) -> &'static str {
        "fa3_wgmma"
    }
    fn summary(&self) -> &'static str {
        "FA3-style: TMA producer + 2 WGMMA consumer warpgroups (setmaxnreg), 3-stage K/V ring, QK^T overlapped with softmax, P in registers, d128"
    }
    fn rung(&self) -> u32 {
        2
    }
    fn supports(&self, p: &AttentionProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        if dev.compute_capability != (9, 0) {
            let (maj, min) = dev.compute_capability;
            return Err(format!(
                "needs sm_90a (Hopper) for wgmma, TMA and setmaxnreg; this GPU is {maj}.{min}"
            ));
        }
        if p.head_dim != 128 {
            return Err(format!(
                "specialised for head_dim 128 only so far, not {}; use fa2_mma_sync",
                p.head_dim
            ));
        }
        if !DTYPES.contains(&p.dtype) {
            return Err(format!(
                "dtype {} is not supported; use bf16 or f16",
                p.dtype
            ));
        }
        let smem = smem_bytes(stages());
        if smem > dev.smem_optin_bytes {
            return Err(format!(
                "needs {smem} bytes of shared memory per block; this GPU allows {}",
                dev.smem_optin_bytes
            ));
        }
        if p.batch > 65535 || p.heads_q > 65535 {
            return Err("batch and heads must each be at most 65535 (grid z and y)".into());
        }
        Ok(())
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        if !arch.starts_with("sm_90") {
            return Vec::new();
        }
        // The default (overlap, 3 stages) and the two configurations it was measured against.
        DTYPES
            .iter()
            .flat_map(|&d| {
                [
                    spec(arch, d, true, 3),
                    spec(arch, d, true, 2),
                    spec(arch, d, false, 2),
                ]
            })
            .collect()
    }
    fn launch(&self, ctx: &Context, p: &AttentionProblem, ops: &AttentionOperands) -> Result<()> {
        for (name, ptr) in [
            ("Q", ops.q.ptr()),
            ("K", ops.k.ptr()),
            ("V", ops.v.ptr()),
            ("O", ops.o.ptr()),
        ] {
            if alignment(ptr) < 16 {
                return Err(Error::Unsupported {
                    kernel: self.name().into(),
                    reason: format!(
                        "{name} starts at {ptr:#x}, which is not 16-byte aligned (TMA)"
                    ),
                });
            }
        }
        let es = p.dtype.size();
        let (qd, qs) = map_shape(
            p.batch,
            p.heads_q,
            p.seqlen_q,
            p.head_dim,
            p.q_strides(),
            es,
        );
        let (kd, ks) = map_shape(
            p.batch,
            p.heads_kv,
            p.seqlen_kv,
            p.head_dim,
            p.kv_strides(),
            es,
        );
        let mut tq = encode(ops.q.ptr(), p.dtype, qd, qs, BM)?;
        let mut tk = encode(ops.k.ptr(), p.dtype, kd, ks, BN)?;
        let mut tv = encode(ops.v.ptr(), p.dtype, kd, ks, BN)?;
        let stages = stages();
        let f = ctx.function(&spec(&ctx.arch(), p.dtype, overlap(), stages))?;
        let mut args = AttnArgs::new(p, ops);
        let cfg = LaunchConfig {
            smem_bytes: smem_bytes(stages),
            ..LaunchConfig::simple(
                (
                    (p.seqlen_q as u32).div_ceil(BM),
                    p.heads_q as u32,
                    p.batch as u32,
                ),
                THREADS,
            )
        };
        let param = |m: &mut Map| m as *mut Map as *mut c_void;
        // SAFETY: the parameters match the kernel's (three 128-byte maps, then AttnArgs); the maps
        // describe the caller's live, checked buffers; every base is 16-byte aligned and every
        // stride a multiple of 16 bytes (rows of 128 16-bit elements).
        unsafe {
            f.launch(
                ctx.stream,
                &cfg,
                &mut [
                    param(&mut tq),
                    param(&mut tk),
                    param(&mut tv),
                    args.as_param(),
                ],
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttnLayout;

    #[test]
    fn maps_follow_the_layout_and_refusals_name_the_reason() {
        let p = AttentionProblem {
            heads_kv: 2,
            ..AttentionProblem::new(3, 8, 100, 128)
        };
        let (d, s) = map_shape(p.batch, p.heads_kv, p.seqlen_kv, 128, p.kv_strides(), 2);
        assert_eq!(d, [128, 100, 2, 3]);
        assert_eq!(s, [2 * 128 * 2, 128 * 2, 100 * 2 * 128 * 2]); // BSHD: seq stride = H*D
        let b = AttentionProblem {
            layout: AttnLayout::Bhsd,
            ..p
        };
        let (_, s) = map_shape(b.batch, b.heads_q, b.seqlen_q, 128, b.q_strides(), 2);
        assert_eq!(s, [256, 100 * 256, 8 * 100 * 256]);
        let h100 = DeviceInfo::h100_sxm();
        assert!(Fa3Wgmma.supports(&p, &h100).is_ok());
        let d64 = AttentionProblem::new(1, 1, 10, 64);
        assert!(Fa3Wgmma
            .supports(&d64, &h100)
            .unwrap_err()
            .contains("head_dim 128"));
        assert!(smem_bytes(3) <= 227 * 1024);
        assert_eq!(Fa3Wgmma.variants("sm_90a").len(), 6);
        assert!(Fa3Wgmma.variants("sm_80").is_empty());
    }
}
