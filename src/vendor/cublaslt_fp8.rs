//! The vendor's FP8 GEMM: cuBLASLt on the same operands and scales as `kiln::ops::fp8`, for
//! timing against in the same run. FP8 in cuBLASLt is "TN" only; kiln's row-major C = A · Bᵀ
//! (A [M, K], B [N, K], both K-major) is cuBLASLt's column-major Cᵀ = op(B) op(A) with B
//! transposed: its A is kiln's B and its B is kiln's A. Scales: per tensor through the A/B scale
//! pointers; per row through OUTER_VEC_32F; DeepSeek's blocks through BLK128x128_32F on kiln's B
//! and VEC128_32F on kiln's A (the layouts `kiln::ops::fp8::quantize` writes: M-major 1x128,
//! N-block-major 128x128, as torch's `_scaled_mm` hands them over). Unpromoted problems ask for
//! cuBLASLt's fast accumulation. The fastest of cuBLASLt's heuristic algorithms is chosen by
//! timing them on the caller's buffers.

use std::ffi::c_void;

use cudarc::cublaslt::sys as lt;

use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::formats::Fp8Format;
use crate::harness::bench::{stats, timed_reps, L2Flusher};
use crate::ops::fp8::{Fp8Problem, ScaleMode};
use crate::ops::gemm::DType;

const WORKSPACE_BYTES: usize = 32 << 20;
const MAX_HEURISTICS: usize = 8;

/// One planned cuBLASLt FP8 GEMM: handle, descriptors, the chosen algorithm.
pub struct LtFp8 {
    handle: lt::cublasLtHandle_t,
    desc: lt::cublasLtMatmulDesc_t,
    layouts: [lt::cublasLtMatrixLayout_t; 3],
    workspace: DeviceBuffer,
    algos: Vec<lt::cublasLtMatmulAlgo_t>,
    chosen: usize,
    /// Each timed algorithm (its index in `algos`) and its median (ms) in [`LtFp8::select`].
    medians: Vec<(usize, f64)>,
    alpha: f32,
}

fn check(what: &str, s: lt::cublasStatus_t) -> Result<()> {
    if s == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Error::cuda(what, format!("{s:?}")))
    }
}

fn fp8_type(f: Fp8Format) -> lt::cudaDataType_t {
    match f {
        Fp8Format::E4m3 => lt::cudaDataType_t::CUDA_R_8F_E4M3,
        Fp8Format::E5m2 => lt::cudaDataType_t::CUDA_R_8F_E5M2,
    }
}

fn out_type(d: DType) -> lt::cudaDataType_t {
    match d {
        DType::Bf16 => lt::cudaDataType_t::CUDA_R_16BF,
        DType::F16 => lt::cudaDataType_t::CUDA_R_16F,
        DType::F32 => lt::cudaDataType_t::CUDA_R_32F,
    }
}

impl LtFp8 {
    /// Plans `p` with kiln's scales at device addresses `sa` and `sb` (fp32, the layouts
    /// `ops::fp8` uses). `Unsupported` when cuBLASLt has no algorithm for it.
    pub fn new(ctx: &Context, p: &Fp8Problem, sa: u64, sb: u64) -> Result<LtFp8> {
        p.validate()?;
        crate::libs::ensure_loaded(&crate::libs::CUBLASLT)?;
        let workspace = ctx.alloc(WORKSPACE_BYTES)?;
        let mut me = LtFp8 {
            handle: std::ptr::null_mut(),
            desc: std::ptr::null_mut(),
            layouts: [std::ptr::null_mut(); 3],
            workspace,
            algos: Vec::new(),
            chosen: 0,
            medians: Vec::new(),
            alpha: p.alpha,
        };
        use lt::cublasLtMatmulDescAttributes_t as D;
        use lt::cublasLtMatmulMatrixScale_t as S;
        // SAFETY: out-pointers to a handle and descriptors (dropped by `me` on error), and
        // attribute buffers of the documented types: TRANSA/B int32, scale pointers void*,
        // scale modes int32 (cublasLtMatmulMatrixScale_t), FAST_ACCUM int8.
        unsafe {
            check("cublasLtCreate", lt::cublasLtCreate(&mut me.handle))?;
            check(
                "cublasLtMatmulDescCreate",
                lt::cublasLtMatmulDescCreate(
                    &mut me.desc,
                    lt::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    lt::cudaDataType_t::CUDA_R_32F,
                ),
            )?;
            let set = |attr: D, ptr: *const c_void, size: usize| {
                check(
                    "cublasLtMatmulDescSetAttribute",
                    lt::cublasLtMatmulDescSetAttribute(me.desc, attr, ptr, size),
                )
            };
            let (t, n): (i32, i32) = (1, 0); // CUBLAS_OP_T, CUBLAS_OP_N
            set(D::CUBLASLT_MATMUL_DESC_TRANSA, &t as *const i32 as _, 4)?;
            set(D::CUBLASLT_MATMUL_DESC_TRANSB, &n as *const i32 as _, 4)?;
            // cuBLASLt's A is kiln's B: its scales are kiln's sb.
            let (pa, pb) = (sb as *const c_void, sa as *const c_void);
            set(
                D::CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                &pa as *const *const c_void as _,
                std::mem::size_of::<*const c_void>(),
            )?;
            set(
                D::CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                &pb as *const *const c_void as _,
                std::mem::size_of::<*const c_void>(),
            )?;
            let modes = match p.scale {
                ScaleMode::Tensor => None,
                ScaleMode::Row => Some((
                    S::CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
                    S::CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F,
                )),
                ScaleMode::Block => Some((
                    S::CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F,
                    S::CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
                )),
            };
            if let Some((ma, mb)) = modes {
                let (ma, mb) = (ma as i32, mb as i32);
                set(
                    D::CUBLASLT_MATMUL_DESC_A_SCALE_MODE,
                    &ma as *const i32 as _,
                    4,
                )?;
                set(
                    D::CUBLASLT_MATMUL_DESC_B_SCALE_MODE,
                    &mb as *const i32 as _,
                    4,
                )?;
            }
            let fast: i8 = (!p.promote) as i8;
            set(
                D::CUBLASLT_MATMUL_DESC_FAST_ACCUM,
                &fast as *const i8 as _,
                1,
            )?;
            for (i, (ty, rows, cols, ld)) in [
                (fp8_type(p.b), p.k, p.n, p.ldb),
                (fp8_type(p.a), p.k, p.m, p.lda),
                (out_type(p.out), p.n, p.m, p.ldc),
            ]
            .into_iter()
            .enumerate()
            {
                check(
                    "cublasLtMatrixLayoutCreate",
                    lt::cublasLtMatrixLayoutCreate(
                        &mut me.layouts[i],
                        ty,
                        rows as u64,
                        cols as u64,
                        ld as i64,
                    ),
                )?;
            }
        }
        me.algos = me.heuristics()?;
        if me.algos.is_empty() {
            return Err(Error::Unsupported {
                kernel: "cuBLASLt FP8".into(),
                reason: format!("cuBLASLt proposes no algorithm for {p}"),
            });
        }
        Ok(me)
    }

    fn heuristics(&self) -> Result<Vec<lt::cublasLtMatmulAlgo_t>> {
        use lt::cublasLtMatmulPreferenceAttributes_t as P;
        let mut pref: lt::cublasLtMatmulPreference_t = std::ptr::null_mut();
        // SAFETY: out-pointer to a preference (destroyed below) and a uint64 attribute;
        // `results` has room for MAX_HEURISTICS plain-data entries.
        unsafe {
            check(
                "cublasLtMatmulPreferenceCreate",
                lt::cublasLtMatmulPreferenceCreate(&mut pref),
            )?;
            let ws = WORKSPACE_BYTES as u64;
            let s = lt::cublasLtMatmulPreferenceSetAttribute(
                pref,
                P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws as *const u64 as *const c_void,
                8,
            );
            let mut results: [lt::cublasLtMatmulHeuristicResult_t; MAX_HEURISTICS] =
                std::mem::zeroed();
            let mut count = 0i32;
            let h = if s == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                lt::cublasLtMatmulAlgoGetHeuristic(
                    self.handle,
                    self.desc,
                    self.layouts[0],
                    self.layouts[1],
                    self.layouts[2],
                    self.layouts[2],
                    pref,
                    MAX_HEURISTICS as i32,
                    results.as_mut_ptr(),
                    &mut count,
                )
            } else {
                s
            };
            lt::cublasLtMatmulPreferenceDestroy(pref);
            if h == lt::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED {
                return Ok(Vec::new());
            }
            check("cublasLtMatmulAlgoGetHeuristic", h)?;
            Ok(results[..(count.max(0) as usize).min(MAX_HEURISTICS)]
                .iter()
                .filter(|r| {
                    r.state == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS
                        && r.workspaceSize <= WORKSPACE_BYTES
                })
                .map(|r| r.algo)
                .collect())
        }
    }

    /// Enqueues C = A · Bᵀ (scaled) with the chosen algorithm; `a`, `b`, `c` are the device
    /// addresses of the operands the plan describes.
    pub fn launch(&self, ctx: &Context, a: u64, b: u64, c: u64) -> Result<()> {
        self.launch_algo(ctx, self.chosen, a, b, c)
    }

    fn launch_algo(&self, ctx: &Context, i: usize, a: u64, b: u64, c: u64) -> Result<()> {
        let (alpha, beta) = (self.alpha, 0.0f32);
        // SAFETY: the handle, descriptors and workspace are live; the caller passes operands of
        // the shapes the layouts describe and keeps them alive until the stream is done; the
        // scale pointers set at planning time are the caller's too.
        let s = unsafe {
            lt::cublasLtMatmul(
                self.handle,
                self.desc,
                &alpha as *const f32 as *const c_void,
                b as *const c_void,
                self.layouts[0],
                a as *const c_void,
                self.layouts[1],
                &beta as *const f32 as *const c_void,
                c as *const c_void,
                self.layouts[2],
                c as *mut c_void,
                self.layouts[2],
                &self.algos[i],
                self.workspace.ptr() as *mut c_void,
                WORKSPACE_BYTES,
                ctx.stream as lt::cudaStream_t,
            )
        };
        check("cublasLtMatmul", s)
    }

    /// Times each proposed algorithm (median of 5, L2 flushed) and keeps the fastest; returns
    /// how many were tried. Algorithms that fail to launch are skipped.
    pub fn select(
        &mut self,
        ctx: &Context,
        flusher: &L2Flusher,
        a: u64,
        b: u64,
        c: u64,
    ) -> Result<usize> {
        let mut best: Option<(f64, usize)> = None;
        self.medians.clear();
        for i in 0..self.algos.len() {
            if self.launch_algo(ctx, i, a, b, c).is_err() {
                continue;
            }
            let mut t = timed_reps(ctx, flusher, true, 5, || self.launch_algo(ctx, i, a, b, c))?;
            let (median, _, _) = stats(&mut t);
            self.medians.push((i, median));
            if best.is_none_or(|(m, _)| median < m) {
                best = Some((median, i));
            }
        }
        self.chosen = best.map_or(0, |(_, i)| i);
        Ok(self.algos.len())
    }

    /// What runs: the chosen algorithm as cuBLASLt describes it (`algo 66, tile 20, stages 17,
    /// splitK 2, ..`: its enum ids) and the selection's medians in the heuristic's order, the
    /// chosen one starred, so that a bench says when two passes timed different vendor kernels.
    pub fn chosen_label(&self) -> String {
        match self.algos.get(self.chosen) {
            Some(algo) => format!(
                "{}; {}",
                crate::vendor::cublas::describe_lt(algo),
                selection_text(&self.medians, self.chosen)
            ),
            None => String::new(),
        }
    }
}

/// The selection's medians (ms) as `fastest of 3 timed: 10.5*, 10.9, 12.1 us`.
fn selection_text(medians: &[(usize, f64)], chosen: usize) -> String {
    let us: Vec<String> = medians
        .iter()
        .map(|&(i, m)| format!("{:.1}{}", m * 1e3, if i == chosen { "*" } else { "" }))
        .collect();
    format!("fastest of {} timed: {} us", medians.len(), us.join(", "))
}

impl Drop for LtFp8 {
    fn drop(&mut self) {
        // SAFETY: each object is ours (or null, skipped); they are host objects only, and the
        // caller has synchronised before dropping the plan.
        unsafe {
            for l in self.layouts {
                if !l.is_null() {
                    lt::cublasLtMatrixLayoutDestroy(l);
                }
            }
            if !self.desc.is_null() {
                lt::cublasLtMatmulDescDestroy(self.desc);
            }
            if !self.handle.is_null() {
                lt::cublasLtDestroy(self.handle);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selection_text_stars_the_chosen_algorithm() {
        let m = [(0, 0.0121), (2, 0.0105), (3, 0.0109)];
        assert_eq!(
            selection_text(&m, 2),
            "fastest of 3 timed: 12.1, 10.5*, 10.9 us"
        );
        assert_eq!(selection_text(&[], 0), "fastest of 0 timed:  us");
    }
}
