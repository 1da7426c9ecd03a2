//! The vendor baseline: the fastest of cuBLASLt's heuristic algorithms and cublasGemmEx.
//!
//! kiln's C is row-major, which cuBLAS (column-major) sees as C^T; so every problem runs as
//! C^T = B^T A^T: cuBLAS m' = N, n' = M, k' = K, its first operand is kiln's B and its second is
//! kiln's A ([`cublas_call`]). Inputs are bf16 or f16, accumulation and scaling fp32, and the
//! output the input type or f32.
//!
//! "Fastest of the vendor": the first launch of each distinct problem (shape, layout, dtypes,
//! leading dimensions, whether beta is 0, device, operand alignments) asks cuBLASLt for up to 16
//! heuristic algorithms, times each of them and cublasGemmEx (CUBLAS_GEMM_DEFAULT) on the
//! caller's buffers (2 warm-ups, median of 9, CUDA events, L2 flushed before each as `kiln bench`
//! flushes it), and remembers the winner for the process; later launches run the winner
//! directly. With beta != 0 the selection runs with beta = 0 into a scratch output so that C is
//! not accumulated into; then the real call runs.
//! [`chosen_algorithm`] says which candidate won.
//!
//! Handles: each thread that launches keeps one cuBLASLt handle, one cuBLAS handle and a 32 MiB
//! workspace per device, created on first use in the current (primary) context. That context is
//! retained for as long as the handles live, and they are never destroyed (tearing cuBLAS down at
//! process exit races CUDA's own teardown), so a thread that ends leaks them.

use std::cell::RefCell;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::c_void;
use std::mem::ManuallyDrop;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use cudarc::cublas::sys as blas;
use cudarc::cublaslt::sys as lt;
use cudarc::driver::{result as drv, sys as drv_sys};

use crate::device::{Context, DeviceBuffer, DeviceInfo};
use crate::error::{Error, Result};
use crate::harness::bench::L2Flusher;
use crate::jit::KernelSpec;
use crate::ops::gemm::{alignment, DType, GemmKernel, GemmOperands, GemmProblem, Layout};

/// Workspace handed to cuBLASLt (and to the cuBLAS handle), once per thread and device.
const WORKSPACE_BYTES: usize = 32 << 20;
/// Most heuristic algorithms asked of cuBLASLt per problem.
const MAX_HEURISTICS: usize = 16;
/// Untimed launches of each candidate before timing it.
const WARMUP: usize = 2;
/// Timed launches of each candidate; its time is their median.
const TIMED: usize = 9;

pub struct Cublas;

impl GemmKernel for Cublas {
    fn name(&self) -> &'static str {
        "cublas"
    }
    fn summary(&self) -> &'static str {
        "vendor: fastest of cuBLASLt's heuristic algorithms and cublasGemmEx"
    }
    fn rung(&self) -> u32 {
        1000
    }
    fn is_vendor(&self) -> bool {
        true
    }
    fn supports(&self, p: &GemmProblem, _dev: &DeviceInfo) -> std::result::Result<(), String> {
        supported_types(p.input, p.output)
    }
    fn variants(&self, _arch: &str) -> Vec<KernelSpec> {
        Vec::new()
    }
    fn launch(&self, ctx: &Context, p: &GemmProblem, ops: &GemmOperands) -> Result<()> {
        supported_types(p.input, p.output).map_err(|reason| Error::Unsupported {
            kernel: "cublas".into(),
            reason,
        })?;
        let key = FullKey::new(ctx, p, ops);
        let shape = cublas_call(p);
        STATES.with(|cell| {
            let mut states = cell.borrow_mut();
            let state = match states.entry(ctx.info.ordinal) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => e.insert(DeviceState::create(ctx)?),
            };
            state.bind_stream(ctx.stream)?;
            let handles = state.handles();
            let plan = match state.plans.entry(key) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => e.insert(LtPlan::new(p, &shape)?),
            };
            let algo = match cached_choice(&key) {
                Some(a) => a,
                None => {
                    let choice = select(ctx, &handles, plan, &shape, p, ops, &key)?;
                    let algo = choice.algo;
                    remember(key, choice);
                    algo
                }
            };
            let call = Call {
                handles: &handles,
                plan,
                shape: &shape,
                p,
                first: ops.b.ptr(),
                second: ops.a.ptr(),
                out: ops.c.ptr(),
                alpha: p.alpha,
                beta: p.beta,
                stream: ctx.stream,
            };
            // SAFETY: the handles belong to the current context, the buffers hold the operands
            // (callers checked them against `p`), and the plan describes `p`.
            unsafe { call.run(&algo) }.map_err(|e| {
                Error::cuda(
                    format!("{} for {}", e.what, p.label()),
                    format!("{} ({})", e.status, algo_name(&algo)),
                )
            })
        })
    }
}

/// `Ok` or why cuBLAS is not asked for this (input, output) pair.
pub fn supported_types(input: DType, output: DType) -> std::result::Result<(), String> {
    match (input, output) {
        (DType::F32, _) => Err("cublas takes bf16 or f16 inputs, not f32".into()),
        (i, o) if o == i || o == DType::F32 => Ok(()),
        (i, o) => Err(format!(
            "cublas writes {i} inputs as {i} or f32 (fp32 accumulation), not {o}"
        )),
    }
}

/// The column-major cuBLAS call computing kiln's row-major C = A B as C^T = B^T A^T.
///
/// "First" is cuBLAS's A (kiln's B), "second" is cuBLAS's B (kiln's A), "out" is C^T. The stored
/// shapes are as cuBLAS sees the buffers (column-major, before the transpose is applied), which is
/// what cuBLASLt's matrix layouts describe.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallShape {
    /// cuBLAS m' (= kiln N).
    pub m: usize,
    /// cuBLAS n' (= kiln M).
    pub n: usize,
    /// cuBLAS k' (= kiln K).
    pub k: usize,
    /// `transa`: true for CUBLAS_OP_T (kiln's B column-major).
    pub trans_first: bool,
    /// `transb`: true for CUBLAS_OP_T (kiln's A column-major).
    pub trans_second: bool,
    /// (rows, cols, ld) of the first operand as stored.
    pub first: (usize, usize, usize),
    /// (rows, cols, ld) of the second operand as stored.
    pub second: (usize, usize, usize),
    /// (rows, cols, ld) of the output (C^T: N x M, ld = ldc).
    pub out: (usize, usize, usize),
}

/// Maps `p` onto the column-major cuBLAS call (see [`CallShape`]).
pub fn cublas_call(p: &GemmProblem) -> CallShape {
    // kiln B row-major: element (k, n) at k*ldb + n, which column-major is the N x K matrix B^T
    // with ld = ldb, already the op(first) cuBLAS needs. Column-major: (k, n) at n*ldb + k, the
    // K x N matrix B, transposed by cuBLAS.
    let trans_first = !p.layout.b_row_major();
    let first = if trans_first {
        (p.k, p.n, p.ldb)
    } else {
        (p.n, p.k, p.ldb)
    };
    // kiln A row-major: (m, k) at m*lda + k, column-major the K x M matrix A^T (op N);
    // column-major: the M x K matrix A (op T).
    let trans_second = !p.layout.a_row_major();
    let second = if trans_second {
        (p.m, p.k, p.lda)
    } else {
        (p.k, p.m, p.lda)
    };
    CallShape {
        m: p.n,
        n: p.m,
        k: p.k,
        trans_first,
        trans_second,
        first,
        second,
        out: (p.n, p.m, p.ldc),
    }
}

/// What the last selection for a problem like `p` chose, e.g. `lt#0 (algo 66, tile 20, ...)` or
/// `gemmEx (...)`; `None` before the first launch of `p`. Where `p` ran on several devices or
/// with differently aligned buffers, the most recent selection is described.
pub fn chosen_algorithm(p: &GemmProblem) -> Option<String> {
    let pk = ProblemKey::of(p);
    let cache = choices().lock().unwrap_or_else(|e| e.into_inner());
    cache
        .iter()
        .filter(|(k, _)| k.problem == pk)
        .max_by_key(|(_, c)| c.seq)
        .map(|(_, c)| c.label.clone())
}

// ---------------------------------------------------------------------------------------------
// Keys and the process-wide cache of winners.

/// The problem part of a selection key (what [`chosen_algorithm`] is asked with).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct ProblemKey {
    m: usize,
    n: usize,
    k: usize,
    layout: Layout,
    input: DType,
    output: DType,
    lda: usize,
    ldb: usize,
    ldc: usize,
    beta_zero: bool,
}

impl ProblemKey {
    fn of(p: &GemmProblem) -> ProblemKey {
        ProblemKey {
            m: p.m,
            n: p.n,
            k: p.k,
            layout: p.layout,
            input: p.input,
            output: p.output,
            lda: p.lda,
            ldb: p.ldb,
            ldc: p.ldc,
            beta_zero: p.beta == 0.0,
        }
    }
}

/// Everything a winner depends on: the problem, the device, and the operands' alignments (an
/// algorithm chosen for 256-byte aligned buffers may refuse less aligned ones).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct FullKey {
    problem: ProblemKey,
    ordinal: u32,
    align_a: u64,
    align_b: u64,
    align_c: u64,
}

impl FullKey {
    fn new(ctx: &Context, p: &GemmProblem, ops: &GemmOperands) -> FullKey {
        FullKey {
            problem: ProblemKey::of(p),
            ordinal: ctx.info.ordinal,
            align_a: alignment(ops.a.ptr()),
            align_b: alignment(ops.b.ptr()),
            align_c: alignment(ops.c.ptr()),
        }
    }
}

#[derive(Clone, Copy)]
enum Algo {
    /// The `index`-th of cuBLASLt's heuristic results (0 = its own first choice).
    Lt {
        index: usize,
        algo: lt::cublasLtMatmulAlgo_t,
    },
    GemmEx,
}

fn algo_name(a: &Algo) -> String {
    match a {
        Algo::Lt { index, .. } => format!("lt#{index}"),
        Algo::GemmEx => "gemmEx".into(),
    }
}

struct Choice {
    algo: Algo,
    label: String,
    seq: u64,
}

fn choices() -> &'static Mutex<HashMap<FullKey, Choice>> {
    static CHOICES: OnceLock<Mutex<HashMap<FullKey, Choice>>> = OnceLock::new();
    CHOICES.get_or_init(|| Mutex::new(HashMap::new()))
}

static SEQ: AtomicU64 = AtomicU64::new(0);

fn cached_choice(key: &FullKey) -> Option<Algo> {
    let cache = choices().lock().unwrap_or_else(|e| e.into_inner());
    cache.get(key).map(|c| c.algo)
}

fn remember(key: FullKey, mut choice: Choice) {
    choice.seq = SEQ.fetch_add(1, Ordering::Relaxed);
    let mut cache = choices().lock().unwrap_or_else(|e| e.into_inner());
    cache.insert(key, choice);
}

// ---------------------------------------------------------------------------------------------
// Per-thread, per-device handles and per-problem cuBLASLt descriptors.

thread_local! {
    static STATES: RefCell<HashMap<u32, DeviceState>> = RefCell::new(HashMap::new());
}

/// The raw handles a call needs (copied out so that the plan map can be borrowed alongside).
#[derive(Clone, Copy)]
struct Handles {
    lt: lt::cublasLtHandle_t,
    blas: blas::cublasHandle_t,
    workspace: u64,
}

struct DeviceState {
    lt: lt::cublasLtHandle_t,
    blas: blas::cublasHandle_t,
    /// Never freed: see the module comment.
    workspace: ManuallyDrop<DeviceBuffer>,
    /// The stream last set on the cuBLAS handle.
    blas_stream: Option<drv_sys::CUstream>,
    plans: HashMap<FullKey, LtPlan>,
}

impl DeviceState {
    fn create(ctx: &Context) -> Result<DeviceState> {
        crate::libs::ensure_loaded(&crate::libs::CUBLASLT)?;
        crate::libs::ensure_loaded(&crate::libs::CUBLAS)?;
        // Keep the primary context (the one current here, where the handles are created) alive
        // for as long as the handles, even after `ctx` is dropped.
        // SAFETY: the device handle comes from an open context.
        unsafe { drv::primary_ctx::retain(ctx.raw_device()) }
            .map_err(|e| Error::cuda("retaining the context for cuBLAS", format!("{e:?}")))?;
        let release = || {
            // SAFETY: balances the retain above.
            let _ = unsafe { drv::primary_ctx::release(ctx.raw_device()) };
        };
        let mut lt_handle: lt::cublasLtHandle_t = std::ptr::null_mut();
        // SAFETY: an out-pointer to a handle.
        if let Err(e) = lt_check("cublasLtCreate", unsafe {
            lt::cublasLtCreate(&mut lt_handle)
        }) {
            release();
            return Err(e);
        }
        let mut blas_handle: blas::cublasHandle_t = std::ptr::null_mut();
        // SAFETY: an out-pointer to a handle; the current context is the device's.
        if let Err(e) = blas_check("cublasCreate", unsafe {
            blas::cublasCreate_v2(&mut blas_handle)
        }) {
            // SAFETY: created above, used nowhere else.
            unsafe {
                lt::cublasLtDestroy(lt_handle);
            }
            release();
            return Err(e);
        }
        let workspace = match ctx.alloc(WORKSPACE_BYTES) {
            Ok(w) => w,
            Err(e) => {
                // SAFETY: created above, used nowhere else.
                unsafe {
                    blas::cublasDestroy_v2(blas_handle);
                    lt::cublasLtDestroy(lt_handle);
                }
                release();
                return Err(e);
            }
        };
        Ok(DeviceState {
            lt: lt_handle,
            blas: blas_handle,
            workspace: ManuallyDrop::new(workspace),
            blas_stream: None,
            plans: HashMap::new(),
        })
    }

    fn handles(&self) -> Handles {
        Handles {
            lt: self.lt,
            blas: self.blas,
            workspace: self.workspace.ptr(),
        }
    }

    /// Points the cuBLAS handle at `stream` (cuBLASLt takes the stream per call). Setting the
    /// stream resets cuBLAS's workspace to its default pool, so the workspace is set again after.
    fn bind_stream(&mut self, stream: drv_sys::CUstream) -> Result<()> {
        if self.blas_stream == Some(stream) {
            return Ok(());
        }
        // SAFETY: the handle is live and the stream belongs to its context; the workspace is a
        // live allocation of WORKSPACE_BYTES in that context.
        unsafe {
            blas_check(
                "cublasSetStream",
                blas::cublasSetStream_v2(self.blas, stream as blas::cudaStream_t),
            )?;
            blas_check(
                "cublasSetWorkspace",
                blas::cublasSetWorkspace_v2(
                    self.blas,
                    self.workspace.ptr() as *mut c_void,
                    WORKSPACE_BYTES,
                ),
            )?;
        }
        self.blas_stream = Some(stream);
        Ok(())
    }
}

/// cuBLASLt's descriptors of one problem (host objects, reusable across calls).
struct LtPlan {
    desc: lt::cublasLtMatmulDesc_t,
    first: lt::cublasLtMatrixLayout_t,
    second: lt::cublasLtMatrixLayout_t,
    out: lt::cublasLtMatrixLayout_t,
}

impl LtPlan {
    fn new(p: &GemmProblem, s: &CallShape) -> Result<LtPlan> {
        let mut plan = LtPlan {
            desc: std::ptr::null_mut(),
            first: std::ptr::null_mut(),
            second: std::ptr::null_mut(),
            out: std::ptr::null_mut(),
        };
        // SAFETY: out-pointers to descriptors, and attribute buffers of the documented types
        // (TRANSA / TRANSB: int32 cublasOperation_t); on error `plan` drops what was made.
        unsafe {
            lt_check(
                "cublasLtMatmulDescCreate",
                lt::cublasLtMatmulDescCreate(
                    &mut plan.desc,
                    lt::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    lt::cudaDataType_t::CUDA_R_32F,
                ),
            )?;
            for (attr, trans) in [
                (
                    lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSA,
                    s.trans_first,
                ),
                (
                    lt::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_TRANSB,
                    s.trans_second,
                ),
            ] {
                let op: i32 = if trans { 1 } else { 0 }; // CUBLAS_OP_T = 1, CUBLAS_OP_N = 0
                lt_check(
                    "cublasLtMatmulDescSetAttribute(TRANS)",
                    lt::cublasLtMatmulDescSetAttribute(
                        plan.desc,
                        attr,
                        &op as *const i32 as *const c_void,
                        std::mem::size_of::<i32>(),
                    ),
                )?;
            }
            for (layout, dtype, (rows, cols, ld)) in [
                (&mut plan.first, p.input, s.first),
                (&mut plan.second, p.input, s.second),
                (&mut plan.out, p.output, s.out),
            ] {
                lt_check(
                    "cublasLtMatrixLayoutCreate",
                    lt::cublasLtMatrixLayoutCreate(
                        layout,
                        lt_type(dtype),
                        rows as u64,
                        cols as u64,
                        ld as i64,
                    ),
                )?;
            }
        }
        Ok(plan)
    }
}

impl Drop for LtPlan {
    fn drop(&mut self) {
        // SAFETY: each descriptor is ours (or null, skipped); they are host objects only.
        unsafe {
            for l in [self.first, self.second, self.out] {
                if !l.is_null() {
                    lt::cublasLtMatrixLayoutDestroy(l);
                }
            }
            if !self.desc.is_null() {
                lt::cublasLtMatmulDescDestroy(self.desc);
            }
        }
    }
}

/// A matmul preference, destroyed on drop.
struct Preference(lt::cublasLtMatmulPreference_t);

impl Drop for Preference {
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: ours.
            unsafe {
                lt::cublasLtMatmulPreferenceDestroy(self.0);
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Running and selecting.

/// A failed cuBLAS call: which function, and the status it returned.
struct CallError {
    what: &'static str,
    status: String,
    not_supported: bool,
}

/// One call's arguments, in cuBLAS's terms.
struct Call<'a> {
    handles: &'a Handles,
    plan: &'a LtPlan,
    shape: &'a CallShape,
    p: &'a GemmProblem,
    first: u64,
    second: u64,
    out: u64,
    alpha: f32,
    beta: f32,
    stream: drv_sys::CUstream,
}

impl Call<'_> {
    /// Enqueues the GEMM with `algo`.
    ///
    /// # Safety
    /// The handles must belong to the current context, the plan must describe `shape`, and the
    /// pointers must hold the operands that `shape` and `p` describe.
    unsafe fn run(&self, algo: &Algo) -> std::result::Result<(), CallError> {
        // Host pointers to fp32 scalars: pointer mode is host (the default) and the scale type
        // is CUDA_R_32F for CUBLAS_COMPUTE_32F.
        let alpha = &self.alpha as *const f32 as *const c_void;
        let beta = &self.beta as *const f32 as *const c_void;
        match algo {
            Algo::Lt { algo, .. } => {
                let s = lt::cublasLtMatmul(
                    self.handles.lt,
                    self.plan.desc,
                    alpha,
                    self.first as *const c_void,
                    self.plan.first,
                    self.second as *const c_void,
                    self.plan.second,
                    beta,
                    self.out as *const c_void,
                    self.plan.out,
                    self.out as *mut c_void,
                    self.plan.out,
                    algo,
                    self.handles.workspace as *mut c_void,
                    WORKSPACE_BYTES,
                    self.stream as lt::cudaStream_t,
                );
                if s == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                    Ok(())
                } else {
                    Err(CallError {
                        what: "cublasLtMatmul",
                        status: format!("{s:?}"),
                        not_supported: s == lt::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED,
                    })
                }
            }
            Algo::GemmEx => {
                let s = self.shape;
                let op = |t: bool| {
                    if t {
                        blas::cublasOperation_t::CUBLAS_OP_T
                    } else {
                        blas::cublasOperation_t::CUBLAS_OP_N
                    }
                };
                let (Some(ld_first), Some(ld_second), Some(ld_out)) =
                    (to_int(s.first.2), to_int(s.second.2), to_int(s.out.2))
                else {
                    return Err(CallError {
                        what: "cublasGemmEx",
                        status: "a leading dimension exceeds its 32-bit range".into(),
                        not_supported: true,
                    });
                };
                let st = blas::cublasGemmEx(
                    self.handles.blas,
                    op(s.trans_first),
                    op(s.trans_second),
                    s.m as i32,
                    s.n as i32,
                    s.k as i32,
                    alpha,
                    self.first as *const c_void,
                    blas_type(self.p.input),
                    ld_first,
                    self.second as *const c_void,
                    blas_type(self.p.input),
                    ld_second,
                    beta,
                    self.out as *mut c_void,
                    blas_type(self.p.output),
                    ld_out,
                    blas::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                    blas::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                );
                if st == blas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
                    Ok(())
                } else {
                    Err(CallError {
                        what: "cublasGemmEx",
                        status: format!("{st:?}"),
                        not_supported: st == blas::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED,
                    })
                }
            }
        }
    }
}

fn to_int(v: usize) -> Option<i32> {
    i32::try_from(v).ok()
}

/// Up to [`MAX_HEURISTICS`] algorithms cuBLASLt proposes for the plan, best-first.
fn heuristics(h: &Handles, plan: &LtPlan, key: &FullKey) -> Result<Vec<lt::cublasLtMatmulAlgo_t>> {
    use lt::cublasLtMatmulPreferenceAttributes_t as P;
    let mut pref = Preference(std::ptr::null_mut());
    // SAFETY: out-pointer to a preference, then attributes of the documented types
    // (MAX_WORKSPACE_BYTES: uint64; MIN_ALIGNMENT_*_BYTES: uint32).
    unsafe {
        lt_check(
            "cublasLtMatmulPreferenceCreate",
            lt::cublasLtMatmulPreferenceCreate(&mut pref.0),
        )?;
        let ws = WORKSPACE_BYTES as u64;
        lt_check(
            "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)",
            lt::cublasLtMatmulPreferenceSetAttribute(
                pref.0,
                P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws as *const u64 as *const c_void,
                std::mem::size_of::<u64>(),
            ),
        )?;
        // cuBLASLt's A is kiln's B and its B is kiln's A; C and D are both kiln's C.
        for (attr, align) in [
            (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b),
            (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a),
            (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c),
            (P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c),
        ] {
            let a = align as u32;
            lt_check(
                "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT)",
                lt::cublasLtMatmulPreferenceSetAttribute(
                    pref.0,
                    attr,
                    &a as *const u32 as *const c_void,
                    std::mem::size_of::<u32>(),
                ),
            )?;
        }
    }
    // SAFETY: a plain-data C struct (integers, a float and an enum whose 0 is SUCCESS).
    let mut results: [lt::cublasLtMatmulHeuristicResult_t; MAX_HEURISTICS] =
        unsafe { std::mem::zeroed() };
    let mut count: i32 = 0;
    // SAFETY: all descriptors are live; `results` has room for MAX_HEURISTICS entries.
    let s = unsafe {
        lt::cublasLtMatmulAlgoGetHeuristic(
            h.lt,
            plan.desc,
            plan.first,
            plan.second,
            plan.out,
            plan.out,
            pref.0,
            MAX_HEURISTICS as i32,
            results.as_mut_ptr(),
            &mut count,
        )
    };
    if s == lt::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED {
        return Ok(Vec::new()); // no algorithm fits; cublasGemmEx may still
    }
    lt_check("cublasLtMatmulAlgoGetHeuristic", s)?;
    let count = (count.max(0) as usize).min(MAX_HEURISTICS);
    Ok(results[..count]
        .iter()
        .filter(|r| {
            r.state == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS
                && r.workspaceSize <= WORKSPACE_BYTES
        })
        .map(|r| r.algo)
        .collect())
}

/// Times every candidate on the caller's buffers and returns the fastest.
fn select(
    ctx: &Context,
    h: &Handles,
    plan: &LtPlan,
    shape: &CallShape,
    p: &GemmProblem,
    ops: &GemmOperands,
    key: &FullKey,
) -> Result<Choice> {
    let mut candidates: Vec<Algo> = heuristics(h, plan, key)?
        .into_iter()
        .enumerate()
        .map(|(index, algo)| Algo::Lt { index, algo })
        .collect();
    candidates.push(Algo::GemmEx);
    let n_candidates = candidates.len();

    // With beta != 0 repeated runs would accumulate into C: time into a scratch output instead.
    let scratch = if p.beta != 0.0 {
        Some(ctx.alloc(p.c_elems() * p.output.size())?)
    } else {
        None
    };
    let out = scratch.as_ref().map_or(ops.c.ptr(), DeviceBuffer::ptr);
    let call = Call {
        handles: h,
        plan,
        shape,
        p,
        first: ops.b.ptr(),
        second: ops.a.ptr(),
        out,
        alpha: p.alpha,
        beta: 0.0,
        stream: ctx.stream,
    };
    // Each timed run starts from a flushed L2, as `kiln bench` times them: back to back, an
    // operand that fits in L2 (a decode step's weights) stays there and favours algorithms that
    // are slower from HBM (GEMM ledger #50-#57, a950293: at 8x4096x4096 the warm winner was not the cold one).
    let flusher = L2Flusher::new(ctx)?;
    let (start, end) = (ctx.event()?, ctx.event()?);
    let mut best: Option<(f32, Algo)> = None;
    let mut failures: Vec<(String, CallError)> = Vec::new();
    'candidates: for cand in candidates {
        for _ in 0..WARMUP {
            // SAFETY: as in `launch`; the output is the caller's C (beta = 0) or the scratch.
            if let Err(e) = unsafe { call.run(&cand) } {
                failures.push((algo_name(&cand), e));
                continue 'candidates;
            }
        }
        let mut times = Vec::with_capacity(TIMED);
        for _ in 0..TIMED {
            flusher.flush(ctx)?;
            start.record(ctx)?;
            // SAFETY: as above.
            if let Err(e) = unsafe { call.run(&cand) } {
                end.record(ctx)?;
                let _ = start.elapsed_ms(&end)?;
                failures.push((algo_name(&cand), e));
                continue 'candidates;
            }
            end.record(ctx)?;
            times.push(start.elapsed_ms(&end)?);
        }
        let ms = median(&mut times);
        if best.as_ref().is_none_or(|(b, _)| ms < *b) {
            best = Some((ms, cand));
        }
    }
    // The stream is idle here (the last event was waited for), so the scratch may be freed.
    drop(scratch);

    let Some((ms, algo)) = best else {
        let list: Vec<String> = failures
            .iter()
            .map(|(n, e)| format!("{n}: {} {}", e.what, e.status))
            .collect();
        let reason = format!(
            "no cuBLAS algorithm ran {} ({})",
            p.label(),
            list.join("; ")
        );
        return Err(if failures.iter().all(|(_, e)| e.not_supported) {
            Error::Unsupported {
                kernel: "cublas".into(),
                reason,
            }
        } else {
            Error::cuda("selecting the cuBLAS algorithm", reason)
        });
    };
    let detail = match &algo {
        Algo::Lt { algo, .. } => format!("{}, ", describe_lt(algo)),
        Algo::GemmEx => "CUBLAS_GEMM_DEFAULT, ".into(),
    };
    let label = format!(
        "{} ({detail}{ms:.4} ms median, fastest of {} timed; {n_candidates} candidates)",
        algo_name(&algo),
        n_candidates - failures.len(),
    );
    Ok(Choice {
        algo,
        label,
        seq: 0,
    })
}

fn median(v: &mut [f32]) -> f32 {
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n == 0 {
        f32::INFINITY
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The configuration cuBLASLt reports for `algo`, e.g. `algo 66, tile 20, stages 17, splitK 1`
/// (tile, stages and cluster are cuBLASLt's enum ids). Also the FP8 bench's label of its pick.
pub(crate) fn describe_lt(algo: &lt::cublasLtMatmulAlgo_t) -> String {
    use lt::cublasLtMatmulAlgoConfigAttributes_t as C;
    // (name, attribute, size in bytes of its documented type)
    let fields = [
        ("algo", C::CUBLASLT_ALGO_CONFIG_ID, 4),
        ("tile", C::CUBLASLT_ALGO_CONFIG_TILE_ID, 4),
        ("stages", C::CUBLASLT_ALGO_CONFIG_STAGES_ID, 4),
        ("splitK", C::CUBLASLT_ALGO_CONFIG_SPLITK_NUM, 4),
        ("swizzle", C::CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, 4),
        ("cluster", C::CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, 2),
    ];
    let mut parts = Vec::new();
    for (name, attr, size) in fields {
        let mut buf = [0u8; 8];
        let mut written = 0usize;
        // SAFETY: `buf` holds at least `size` bytes.
        let s = unsafe {
            lt::cublasLtMatmulAlgoConfigGetAttribute(
                algo,
                attr,
                buf.as_mut_ptr() as *mut c_void,
                size,
                &mut written,
            )
        };
        if s != lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
            continue;
        }
        let v = if size == 2 {
            u16::from_ne_bytes([buf[0], buf[1]]) as i64
        } else {
            i32::from_ne_bytes([buf[0], buf[1], buf[2], buf[3]]) as i64
        };
        parts.push(format!("{name} {v}"));
    }
    parts.join(", ")
}

// ---------------------------------------------------------------------------------------------
// Small conversions.

fn lt_type(d: DType) -> lt::cudaDataType_t {
    match d {
        DType::Bf16 => lt::cudaDataType_t::CUDA_R_16BF,
        DType::F16 => lt::cudaDataType_t::CUDA_R_16F,
        DType::F32 => lt::cudaDataType_t::CUDA_R_32F,
    }
}

fn blas_type(d: DType) -> blas::cudaDataType_t {
    match d {
        DType::Bf16 => blas::cudaDataType_t::CUDA_R_16BF,
        DType::F16 => blas::cudaDataType_t::CUDA_R_16F,
        DType::F32 => blas::cudaDataType_t::CUDA_R_32F,
    }
}

fn lt_check(what: &str, s: lt::cublasStatus_t) -> Result<()> {
    if s == lt::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Error::cuda(what, format!("{s:?}")))
    }
}

fn blas_check(what: &str, s: blas::cublasStatus_t) -> Result<()> {
    if s == blas::cublasStatus_t::CUBLAS_STATUS_SUCCESS {
        Ok(())
    } else {
        Err(Error::cuda(what, format!("{s:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Element (i, j) of op(X) for a column-major X, as cuBLAS reads it.
    fn op_at(x: &[f64], trans: bool, ld: usize, i: usize, j: usize) -> f64 {
        if trans {
            x[j + i * ld]
        } else {
            x[i + j * ld]
        }
    }

    /// Runs `shape` the way cuBLAS defines it, on the kiln buffers, into a copy of `c`.
    fn run_as_cublas(s: &CallShape, a: &[f64], b: &[f64], c: &[f64]) -> Vec<f64> {
        let mut out = c.to_vec();
        for i in 0..s.m {
            for j in 0..s.n {
                let mut acc = 0.0;
                for l in 0..s.k {
                    acc += op_at(b, s.trans_first, s.first.2, i, l)
                        * op_at(a, s.trans_second, s.second.2, l, j);
                }
                out[i + j * s.out.2] = acc;
            }
        }
        out
    }

    /// kiln's definition, straight from the layout.
    fn run_as_kiln(p: &GemmProblem, a: &[f64], b: &[f64], c: &[f64]) -> Vec<f64> {
        let mut out = c.to_vec();
        for m in 0..p.m {
            for n in 0..p.n {
                let mut acc = 0.0;
                for k in 0..p.k {
                    let av = if p.layout.a_row_major() {
                        a[m * p.lda + k]
                    } else {
                        a[k * p.lda + m]
                    };
                    let bv = if p.layout.b_row_major() {
                        b[k * p.ldb + n]
                    } else {
                        b[n * p.ldb + k]
                    };
                    acc += av * bv;
                }
                out[m * p.ldc + n] = acc;
            }
        }
        out
    }

    fn padded(m: usize, n: usize, k: usize, layout: Layout) -> GemmProblem {
        let mut p = GemmProblem::new(m, n, k, layout, DType::Bf16, DType::F32);
        p.lda += 2;
        p.ldb += 3;
        p.ldc += 1;
        p.validate().unwrap();
        p
    }

    #[test]
    fn the_call_computes_kilns_gemm_for_every_layout() {
        for layout in Layout::ALL {
            let p = padded(3, 5, 4, layout);
            let s = cublas_call(&p);
            let a: Vec<f64> = (0..p.a_elems()).map(|i| (i % 7) as f64 - 3.0).collect();
            let b: Vec<f64> = (0..p.b_elems())
                .map(|i| (i % 5) as f64 * 0.5 - 1.0)
                .collect();
            let c: Vec<f64> = (0..p.c_elems()).map(|i| -(i as f64)).collect();
            assert_eq!(
                run_as_cublas(&s, &a, &b, &c),
                run_as_kiln(&p, &a, &b, &c),
                "layout {layout}"
            );
        }
    }

    #[test]
    fn call_shapes_for_the_four_layouts() {
        // M = 3, N = 5, K = 4; lda, ldb, ldc padded by 2, 3, 1.
        let rc = cublas_call(&padded(3, 5, 4, Layout::RC));
        assert_eq!((rc.m, rc.n, rc.k), (5, 3, 4));
        assert_eq!((rc.trans_first, rc.trans_second), (true, false));
        assert_eq!(
            (rc.first, rc.second, rc.out),
            ((4, 5, 7), (4, 3, 6), (5, 3, 6))
        );

        let cr = cublas_call(&padded(3, 5, 4, Layout::CR));
        assert_eq!((cr.trans_first, cr.trans_second), (false, true));
        assert_eq!((cr.first, cr.second), ((5, 4, 8), (3, 4, 5)));

        let rr = cublas_call(&padded(3, 5, 4, Layout::RR));
        assert_eq!((rr.trans_first, rr.trans_second), (false, false));
        assert_eq!((rr.first, rr.second), ((5, 4, 8), (4, 3, 6)));

        let cc = cublas_call(&padded(3, 5, 4, Layout::CC));
        assert_eq!((cc.trans_first, cc.trans_second), (true, true));
        assert_eq!((cc.first, cc.second), ((4, 5, 7), (3, 4, 5)));

        // The stored leading dimension always covers the stored rows (cuBLAS requires it).
        for l in Layout::ALL {
            let s = cublas_call(&GemmProblem::new(3, 5, 4, l, DType::F16, DType::F16));
            for (rows, _, ld) in [s.first, s.second, s.out] {
                assert!(ld >= rows, "{l}: ld {ld} < rows {rows}");
            }
        }
    }

    #[test]
    fn dtype_pairs() {
        assert!(supported_types(DType::Bf16, DType::Bf16).is_ok());
        assert!(supported_types(DType::Bf16, DType::F32).is_ok());
        assert!(supported_types(DType::F16, DType::F16).is_ok());
        assert!(supported_types(DType::F16, DType::F32).is_ok());
        let e = supported_types(DType::Bf16, DType::F16).unwrap_err();
        assert!(e.contains("bf16") && e.contains("f16"), "{e}");
        assert!(supported_types(DType::F16, DType::Bf16).is_err());
        assert!(supported_types(DType::F32, DType::F32).is_err());
    }

    #[test]
    fn keys_tell_beta_zero_apart_and_nothing_is_chosen_before_a_launch() {
        let p = GemmProblem::new(7, 9, 11, Layout::RC, DType::Bf16, DType::Bf16);
        let q = GemmProblem { beta: 0.5, ..p };
        assert_ne!(ProblemKey::of(&p), ProblemKey::of(&q));
        assert_eq!(
            ProblemKey::of(&p),
            ProblemKey::of(&GemmProblem { alpha: 2.0, ..p })
        );
        assert_eq!(chosen_algorithm(&p), None);
    }

    #[test]
    fn median_of_odd_and_even() {
        assert_eq!(median(&mut [3.0, 1.0, 2.0, 5.0, 4.0]), 3.0);
        assert_eq!(median(&mut [4.0, 1.0, 2.0, 3.0]), 2.5);
    }
}
