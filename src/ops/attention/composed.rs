//! Host side of `kernels/attention/softmax.cu`: the composed baseline. S = Q·Kᵀ and O = P·V run as
//! strided-batched cuBLAS GEMMs (fp32 accumulation; S in fp32), with kiln's softmax kernel
//! between them writing P and LSE. It materialises the whole score matrix: the honest
//! "vendor GEMMs" reference point the fused versions must beat.
//!
//! cuBLAS is column-major, so each row-major product runs transposed: Sᵀ = K·Qᵀ and Oᵀ = Vᵀ·Pᵀ.
//! One call per (batch, query head within its kv group) batches over the key/value heads, since
//! every (batch, head) pair of a BSHD tensor is not one constant stride apart. Each of Q, K, V
//! and O is read or written with its own strides.
//!
//! State per thread: one cuBLAS handle (never destroyed, as in `vendor::cublas`) and the S and P
//! scratch buffers, grown on demand and kept for later launches.

use std::cell::RefCell;
use std::ffi::c_void;
use std::mem::ManuallyDrop;

use cudarc::cublas::sys as blas;
use cudarc::driver::result as drv;

use super::{AttentionKernel, AttentionOperands, AttentionProblem, DTYPES};
use crate::device::{Context, DeviceBuffer, DeviceInfo, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;

pub struct Composed;

const ROWS_PER_BLOCK: u64 = 8;

/// The softmax kernel's argument block (`SoftmaxArgs` in softmax.cu).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct SoftmaxArgs {
    s: u64,
    p: u64,
    lse: u64,
    rows: i64,
    sq: i32,
    skv: i32,
    causal: i32,
    scale_log2: f32,
}

fn softmax_spec(arch: &str, dtype: DType) -> KernelSpec {
    KernelSpec::new("attention/softmax.cu", "attn_softmax", arch).define("KILN_IN", dtype.code())
}

/// Bytes of S (fp32) plus P (input type) for `p`.
pub fn scratch_bytes(p: &AttentionProblem) -> u64 {
    let n = p.batch as u64 * p.heads_q as u64 * p.seqlen_q as u64 * p.seqlen_kv as u64;
    n * (4 + p.dtype.size() as u64)
}

struct State {
    ordinal: u32,
    handle: blas::cublasHandle_t,
    stream: Option<cudarc::driver::sys::CUstream>,
    /// Never freed at thread exit (CUDA may be torn down first); replaced when too small.
    s: Option<ManuallyDrop<DeviceBuffer>>,
    p: Option<ManuallyDrop<DeviceBuffer>>,
}

thread_local! {
    static STATE: RefCell<Option<State>> = const { RefCell::new(None) };
}

fn check(what: &str, s: blas::cublasStatus_t) -> Result<()> {
    if s == blas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Error::cuda(what, format!("{s:?}")))
    }
}

fn blas_type(d: DType) -> blas::cudaDataType_t {
    match d {
        DType::Bf16 => blas::cudaDataType_t::CUDA_R_16BF,
        DType::F16 => blas::cudaDataType_t::CUDA_R_16F,
        DType::F32 => blas::cudaDataType_t::CUDA_R_32F,
    }
}

impl State {
    fn create(ctx: &Context) -> Result<State> {
        crate::libs::ensure_loaded(&crate::libs::CUBLAS)?;
        // Keep the primary context alive as long as the handle (see vendor::cublas).
        // SAFETY: the device handle comes from an open context.
        unsafe { drv::primary_ctx::retain(ctx.raw_device()) }
            .map_err(|e| Error::cuda("retaining the context for cuBLAS", format!("{e:?}")))?;
        let mut handle: blas::cublasHandle_t = std::ptr::null_mut();
        // SAFETY: an out-pointer to a handle; the current context is the device's.
        check("cublasCreate", unsafe {
            blas::cublasCreate_v2(&mut handle)
        })?;
        Ok(State {
            ordinal: ctx.info.ordinal,
            handle,
            stream: None,
            s: None,
            p: None,
        })
    }

    fn ensure_scratch(
        &mut self,
        ctx: &Context,
        s_bytes: usize,
        p_bytes: usize,
    ) -> Result<(u64, u64)> {
        for (slot, need) in [(&mut self.s, s_bytes), (&mut self.p, p_bytes)] {
            if slot.as_ref().is_none_or(|b| b.bytes() < need) {
                // Earlier launches may still read the old buffer.
                ctx.synchronize()?;
                if let Some(old) = slot.take() {
                    drop(ManuallyDrop::into_inner(old));
                }
                *slot = Some(ManuallyDrop::new(ctx.alloc(need)?));
            }
        }
        Ok((
            self.s.as_ref().map_or(0, |b| b.ptr()),
            self.p.as_ref().map_or(0, |b| b.ptr()),
        ))
    }
}

impl AttentionKernel for Composed {
    fn name(&self) -> &'static str {
        "composed"
    }
    fn summary(&self) -> &'static str {
        "cuBLAS strided-batched S = QK^T (fp32) -> softmax kernel (P, LSE) -> cuBLAS P V"
    }
    fn rung(&self) -> u32 {
        0
    }
    fn supports(&self, p: &AttentionProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        if !DTYPES.contains(&p.dtype) {
            return Err(format!(
                "dtype {} is not supported; use bf16 or f16",
                p.dtype
            ));
        }
        if p.window != super::Window::UNBOUNDED {
            return Err("has no sliding window; fa3_wgmma (Hopper) has one".into());
        }
        let need = scratch_bytes(p);
        if need > dev.total_mem_bytes / 2 {
            return Err(format!(
                "materialising S and P needs {:.1} GiB, more than half of this GPU's memory",
                need as f64 / (1u64 << 30) as f64
            ));
        }
        let lds = [p.q_strides(), p.k_strides(), p.v_strides(), p.o_strides()].map(|s| s.seq);
        if lds
            .iter()
            .chain(&[p.seqlen_q, p.seqlen_kv])
            .any(|&v| v > i32::MAX as usize)
        {
            return Err("a cuBLAS dimension or leading dimension exceeds 32 bits".into());
        }
        // cuBLAS reads each matrix [rows, D] with leading dimension = the sequence stride.
        if lds.iter().any(|&ld| ld < p.head_dim) {
            return Err("a sequence stride shorter than the head dim (rows that overlap), which cuBLAS cannot read".into());
        }
        Ok(())
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        DTYPES.iter().map(|&d| softmax_spec(arch, d)).collect()
    }
    fn launch(&self, ctx: &Context, p: &AttentionProblem, ops: &AttentionOperands) -> Result<()> {
        let softmax = ctx.function(&softmax_spec(&ctx.arch(), p.dtype))?;
        let (b_, hq, sq, skv, d) = (p.batch, p.heads_q, p.seqlen_q, p.seqlen_kv, p.head_dim);
        let g = p.group();
        let es = p.dtype.size() as u64;
        let rows = (b_ * hq * sq) as u64;
        let s_bytes = (rows * skv as u64 * 4) as usize;
        let p_bytes = (rows * skv as u64 * es) as usize;
        STATE.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.as_ref().is_none_or(|s| s.ordinal != ctx.info.ordinal) {
                *slot = Some(State::create(ctx)?);
            }
            let st = slot.as_mut().expect("state was just created");
            if st.stream != Some(ctx.stream) {
                // SAFETY: the handle is live and the stream belongs to its context.
                check("cublasSetStream", unsafe {
                    blas::cublasSetStream_v2(st.handle, ctx.stream as blas::cudaStream_t)
                })?;
                st.stream = Some(ctx.stream);
            }
            let (s_ptr, p_ptr) = st.ensure_scratch(ctx, s_bytes, p_bytes)?;
            let (qs, ks, vs, os) = (p.q_strides(), p.k_strides(), p.v_strides(), p.o_strides());
            let (one, zero) = (1.0f32, 0.0f32);
            let alpha = &one as *const f32 as *const c_void;
            let beta = &zero as *const f32 as *const c_void;
            let ty = blas_type(p.dtype);
            let head_scores = (sq * skv) as u64;
            let n = blas::cublasOperation_t::CUBLAS_OP_N;
            let t = blas::cublasOperation_t::CUBLAS_OP_T;
            // S^T[j, i] = sum_d K[j, d] Q[i, d]: cuBLAS (m, n, k) = (Skv, Sq, D), K transposed.
            for b in 0..b_ {
                for i in 0..g {
                    let k_ptr = ops.k.ptr() + (b * ks.batch) as u64 * es;
                    let q_ptr = ops.q.ptr() + (b * qs.batch + i * qs.head) as u64 * es;
                    let s_out = s_ptr + ((b * hq + i) as u64 * head_scores) * 4;
                    // SAFETY: every pointer lies in a live buffer sized for `p` (checked by the
                    // caller; scratch sized above); strides and counts describe those buffers.
                    let st_ = unsafe {
                        blas::cublasGemmStridedBatchedEx(
                            st.handle,
                            t,
                            n,
                            skv as i32,
                            sq as i32,
                            d as i32,
                            alpha,
                            k_ptr as *const c_void,
                            ty,
                            ks.seq as i32,
                            ks.head as i64,
                            q_ptr as *const c_void,
                            ty,
                            qs.seq as i32,
                            (g * qs.head) as i64,
                            beta,
                            s_out as *mut c_void,
                            blas::cudaDataType_t::CUDA_R_32F,
                            skv as i32,
                            (g as u64 * head_scores) as i64,
                            p.heads_kv as i32,
                            blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                            blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                        )
                    };
                    check("cublasGemmStridedBatchedEx (Q K^T)", st_)?;
                }
            }
            let mut args = SoftmaxArgs {
                s: s_ptr,
                p: p_ptr,
                lse: ops.lse.ptr(),
                rows: rows as i64,
                sq: sq as i32,
                skv: skv as i32,
                causal: p.causal as i32,
                scale_log2: p.scale * std::f32::consts::LOG2_E,
            };
            let blocks = rows.div_ceil(ROWS_PER_BLOCK);
            if blocks > i32::MAX as u64 {
                return Err(Error::Unsupported {
                    kernel: "composed".into(),
                    reason: "too many score rows for one grid".into(),
                });
            }
            let cfg = LaunchConfig::simple((blocks as u32, 1, 1), (ROWS_PER_BLOCK * 32) as u32);
            // SAFETY: one SoftmaxArgs parameter; S, P and LSE hold `rows` rows of `skv` (LSE: 1).
            unsafe {
                softmax.launch(
                    ctx.stream,
                    &cfg,
                    &mut [&mut args as *mut SoftmaxArgs as *mut c_void],
                )?
            };
            // O^T[d, i] = sum_j V[j, d] P[i, j]: cuBLAS (m, n, k) = (D, Sq, Skv).
            for b in 0..b_ {
                for i in 0..g {
                    let v_ptr = ops.v.ptr() + (b * vs.batch) as u64 * es;
                    let p_in = p_ptr + ((b * hq + i) as u64 * head_scores) * es;
                    let o_ptr = ops.o.ptr() + (b * os.batch + i * os.head) as u64 * es;
                    // SAFETY: as above.
                    let st_ = unsafe {
                        blas::cublasGemmStridedBatchedEx(
                            st.handle,
                            n,
                            n,
                            d as i32,
                            sq as i32,
                            skv as i32,
                            alpha,
                            v_ptr as *const c_void,
                            ty,
                            vs.seq as i32,
                            vs.head as i64,
                            p_in as *const c_void,
                            ty,
                            skv as i32,
                            (g as u64 * head_scores) as i64,
                            beta,
                            o_ptr as *mut c_void,
                            ty,
                            os.seq as i32,
                            (g * os.head) as i64,
                            p.heads_kv as i32,
                            blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                            blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                        )
                    };
                    check("cublasGemmStridedBatchedEx (P V)", st_)?;
                }
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_counts_s_in_fp32_and_p_in_the_input_type() {
        let p = AttentionProblem::new(2, 3, 5, 64);
        assert_eq!(scratch_bytes(&p), 2 * 3 * 25 * 6);
        let v = Composed.variants("sm_90a");
        assert_eq!(v.len(), 2);
    }
}
