//! Mixture-of-experts: the problem type (tokens sorted by expert, or the masked decode layout),
//! the scheduling shared by its kernels, and the versions: the grouped GEMM (also the down
//! projection), the fused SwiGLU gate/up dual GEMM, and the tiny prefix-sum kernel both launch
//! first. Each version is one host file with the stem of its device file under `kernels/moe/`.

pub mod combine;
pub mod fp4;
pub mod fp8_grouped;
pub mod fp8_problem;
pub mod fp8_swiglu;
pub mod gather_rows;
pub mod grouped_gemm;
pub mod grouped_swapab;
pub mod layer;
pub mod problem;
pub mod route;
pub mod schedule;
pub mod swiglu_dual;
pub mod tile_prefix;
pub mod tma3d;
pub mod trace;

use std::ffi::c_void;

pub use problem::{parse_counts, uneven_counts, LayerRows, MoeProblem, Rows, SwiGlu, WeightLayout};

use crate::device::{Context, DeviceBuffer, DeviceInfo, Tma2d, TmaDType, TmaSwizzle};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::{alignment, DType};
use crate::overrides::MoeOverrides;

/// The device buffers of one MoE call.
pub struct MoeOperands<'a> {
    /// X: [x_rows, K] (contiguous) or [E, max_rows, K] (masked).
    pub x: &'a DeviceBuffer,
    /// W [E, N, K]; for SwiGLU, W1 (separate) or W13 (interleaved).
    pub w: &'a DeviceBuffer,
    /// SwiGLU with separate weights: W3 [E, N, K].
    pub w3: Option<&'a DeviceBuffer>,
    /// Y: X's rows by N; rows of no expert are never written.
    pub y: &'a DeviceBuffer,
    /// i32 offsets (E + 1) or counts (E), read on the GPU.
    pub rows: &'a DeviceBuffer,
    /// SwiGLU with `routed`: one f32 weight per row of X.
    pub route: Option<&'a DeviceBuffer>,
    /// Workspace for the tile tables: at least `schedule::sched_bytes(E)`.
    pub sched: &'a DeviceBuffer,
    /// The MoE layer's row map ([`LayerRows`]: the X row, or the output row, of each row).
    pub row_map: Option<&'a DeviceBuffer>,
}

/// One version of an MoE op.
pub trait MoeKernel: Send + Sync {
    /// Registry name, the stem of its device file.
    fn name(&self) -> &'static str;
    /// One line: what it computes and how.
    fn summary(&self) -> &'static str;
    /// `Ok` or the reason this version cannot compute `p` on `dev` (never a wrong result).
    fn supports(&self, p: &MoeProblem, dev: &DeviceInfo) -> std::result::Result<(), String>;
    /// Every specialisation this version compiles to for `arch` (for `kiln check`).
    fn variants(&self, arch: &str) -> Vec<KernelSpec>;
    /// Enqueues the op on the context's stream: no host synchronisation and no allocation, so
    /// the launch can be captured in a CUDA graph. Callers have validated `p` and the buffers.
    fn launch(&self, ctx: &Context, p: &MoeProblem, ops: &MoeOperands) -> Result<()>;
}

/// The argument block, laid out as `MoeArgs` in `kernels/moe/sched.cuh`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct MoeArgs {
    pub sched: u64,
    pub y: u64,
    pub route: u64,
    pub ldy: i64,
    pub experts: i32,
    pub n: i32,
    pub k: i32,
    pub tiles_n: i32,
    pub interleaved: i32,
    /// m-tiles swept together in the grouped tile order: a hint for L2 reuse (any value >= 1
    /// is correct), see [`schedule::order_for`].
    pub group_m: i32,
    /// 1: the expert-aligned order ([`schedule::TileOrder::ByExpert`]), `group_m` its widest group.
    pub by_expert: i32,
    /// The MoE layer's row map ([`LayerRows`]), or 0.
    pub row_map: u64,
    /// X's address (the cp.async gather reads X by address rather than through its map).
    pub x: u64,
}

impl MoeArgs {
    pub fn new(p: &MoeProblem, ops: &MoeOperands, bn: u32) -> Self {
        MoeArgs {
            sched: ops.sched.ptr(),
            y: ops.y.ptr(),
            route: ops.route.map_or(0, |r| r.ptr()),
            ldy: p.n as i64,
            experts: p.experts as i32,
            n: p.n as i32,
            k: p.k as i32,
            tiles_n: p.n.div_ceil(bn as usize) as i32,
            interleaved: matches!(
                p.swiglu,
                Some(SwiGlu {
                    weights: WeightLayout::Interleaved,
                    ..
                })
            ) as i32,
            group_m: schedule::GROUP_M as i32,
            by_expert: 0,
            row_map: ops.row_map.map_or(0, |r| r.ptr()),
            x: ops.x.ptr(),
        }
    }

    /// Walk the tiles in `order`.
    pub fn set_order(&mut self, order: schedule::TileOrder) {
        (self.group_m, self.by_expert) = order.args();
    }

    pub fn as_param(&mut self) -> *mut c_void {
        self as *mut MoeArgs as *mut c_void
    }
}

/// The version that computes `p`: the SwiGLU pair is `swiglu_dual`; a plain grouped GEMM is
/// `grouped_gemm` unless `KILN_MOE_GROUPED` ([`MoeOverrides::grouped`]) names `grouped_swapab`. (The swapped-operand kernel
/// is verified but measured slower at every shape of the issue on an H200, 2026-11-22: 0.20 vs
/// 0.17 ms at E=8, 40-248 rows, N=4096, K=7168; on par at 16 rows per expert. On an H100 with
/// heaviest-first tiles, 2026-11-22 (results/2026-11-22-h100/moe/): 0.214 vs 0.192 ms (128x192 row tiles) at that shape,
/// 0.148 vs 0.109 at N=7168, K=2048. So it is never chosen on its own.)
pub fn version_for(p: &MoeProblem, o: &MoeOverrides) -> &'static str {
    if p.swiglu.is_some() {
        return "swiglu_dual";
    }
    o.grouped.unwrap_or("grouped_gemm")
}

/// Every version that can compute problems of `p`'s kind (verification runs each).
pub fn versions_of_kind(p: &MoeProblem) -> &'static [&'static str] {
    if p.swiglu.is_some() {
        &["swiglu_dual"]
    } else {
        &["grouped_gemm", "grouped_swapab"]
    }
}

/// What every MoE kernel needs of the problem and the GPU: Hopper, TMA-aligned rows, few enough
/// experts for the shared-memory tables.
pub fn common_support(p: &MoeProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
    if !dev.is_hopper() {
        return Err(format!(
            "needs a Hopper GPU (sm_90a: wgmma, TMA); {} is sm_{}{}",
            dev.name, dev.compute_capability.0, dev.compute_capability.1
        ));
    }
    if !(p.k * p.input.size()).is_multiple_of(16) {
        return Err(format!(
            "K = {} is not a multiple of {} elements: TMA needs rows of X and W that are multiples of 16 bytes",
            p.k,
            16 / p.input.size()
        ));
    }
    if p.experts > schedule::MAX_EXPERTS {
        return Err(format!(
            "{} experts; at most {} per launch",
            p.experts,
            schedule::MAX_EXPERTS
        ));
    }
    Ok(())
}

/// Checks buffer sizes and TMA alignment against the problem; one sentence per problem.
pub fn check_operands(p: &MoeProblem, ops: &MoeOperands) -> Result<()> {
    let es = p.input.size();
    // W, W13, W1 and W3 each span their experts at the problem's expert stride.
    let one_w = p.w_span_elems() * es;
    let w_need = one_w;
    let mut need = vec![
        ("X", ops.x, p.x_elems() * es),
        ("W", ops.w, w_need),
        ("Y", ops.y, p.y_elems() * p.output.size()),
        ("the rows array", ops.rows, p.rows_array().len() * 4),
        (
            "the schedule workspace",
            ops.sched,
            schedule::sched_bytes(p.experts),
        ),
    ];
    if let Some(sw) = p.swiglu {
        if sw.weights == WeightLayout::Separate {
            let w3 = ops
                .w3
                .ok_or_else(|| Error::invalid("SwiGLU with separate weights needs W3"))?;
            need.push(("W3", w3, one_w));
        }
    }
    if p.weighs_rows() {
        let r = ops
            .route
            .ok_or_else(|| Error::invalid("weighted rows need the routing weights"))?;
        need.push(("the routing weights", r, p.x_rows() * 4));
    }
    if matches!(
        p.layer,
        Some(LayerRows::Gather { .. } | LayerRows::Combine { .. })
    ) {
        let m = ops
            .row_map
            .ok_or_else(|| Error::invalid("the MoE layer's GEMMs need the row map"))?;
        need.push(("the row map", m, p.x_rows() * 4));
    }
    for (name, buf, bytes) in need {
        if buf.bytes() < bytes {
            return Err(Error::invalid(format!(
                "{name} needs {bytes} bytes for this problem but its buffer has {}",
                buf.bytes()
            )));
        }
    }
    for (name, ptr) in [("X", ops.x.ptr()), ("W", ops.w.ptr())]
        .into_iter()
        .chain(ops.w3.map(|b| ("W3", b.ptr())))
    {
        if alignment(ptr) < 16 {
            return Err(Error::invalid(format!(
                "{name} at {ptr:#x} is not 16-byte aligned, which TMA needs"
            )));
        }
    }
    Ok(())
}

pub(crate) fn tma_dtype(d: DType) -> TmaDType {
    d.tma()
}

/// The map over all rows of X: boxes of {64 k, bm rows}; rows past X are zero-filled.
pub fn x_map(p: &MoeProblem, addr: u64, bm: u32) -> Tma2d {
    Tma2d {
        dtype: tma_dtype(p.input),
        addr,
        dims: [p.k as u64, p.x_rows() as u64],
        row_stride_bytes: (p.k * p.input.size()) as u64,
        box_dims: [schedule::BK, bm],
        swizzle: TmaSwizzle::B128,
    }
}

/// The map over the X rows a gathering GEMM reads ([`LayerRows::Gather`]): boxes of one row of
/// 64 k, over X's `source_rows`.
pub fn gather_x_map(p: &MoeProblem, addr: u64) -> Tma2d {
    let rows = match p.layer {
        Some(LayerRows::Gather { source_rows }) => source_rows,
        _ => p.x_rows(),
    };
    Tma2d {
        dims: [p.k as u64, rows as u64],
        ..x_map(p, addr, 1)
    }
}

/// The layer defines of a grouped kernel: (KILN_GATHER, KILN_COMBINE) for `p`'s row maps.
pub fn layer_defines(layer: Option<LayerRows>) -> (u32, u32) {
    match layer {
        None => (0, 0),
        Some(LayerRows::Gather { .. }) => (1, 0),
        Some(LayerRows::Combine { .. }) => (0, 1),
        Some(LayerRows::Scaled) => (0, 2),
    }
}

/// Adds the dtype defines every MoE kernel reads.
pub fn with_dtypes(spec: KernelSpec, input: DType, output: DType) -> KernelSpec {
    spec.define("KILN_IN", input.code())
        .define("KILN_OUT", output.code())
}

/// Every (input, output) pair.
pub fn dtype_pairs() -> Vec<(DType, DType)> {
    DType::INPUTS
        .iter()
        .flat_map(|&i| DType::OUTPUTS.iter().map(move |&o| (i, o)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn moe_args_match_the_device_layout() {
        // three pointers, one i64, seven ints (padded to 8 bytes), the row map and X
        assert_eq!(std::mem::size_of::<MoeArgs>(), 80);
        assert_eq!(std::mem::offset_of!(MoeArgs, row_map), 64);
        assert_eq!(std::mem::offset_of!(MoeArgs, x), 72);
        assert_eq!(std::mem::offset_of!(MoeArgs, ldy), 24);
        assert_eq!(std::mem::offset_of!(MoeArgs, experts), 32);
        assert_eq!(std::mem::offset_of!(MoeArgs, interleaved), 48);
        assert_eq!(std::mem::offset_of!(MoeArgs, by_expert), 56);
    }

    #[test]
    fn x_map_spans_all_rows() {
        let p = MoeProblem::masked(&[3, 0], 40, 256, 4096, DType::Bf16, DType::Bf16);
        let m = x_map(&p, 1 << 20, 128);
        assert_eq!(
            (m.dims, m.box_dims, m.row_stride_bytes),
            ([4096, 80], [64, 128], 8192)
        );
        assert_eq!(m.validate(), Ok(()));
    }

    #[test]
    fn the_row_tiled_kernel_is_the_default() {
        let bf = |c: &[usize], n| MoeProblem::contiguous(c, n, 4096, DType::Bf16, DType::Bf16);
        let none = MoeOverrides::NONE;
        assert_eq!(
            version_for(&bf(&[40, 248, 112, 176], 4096), &none),
            "grouped_gemm"
        );
        let swapab = MoeOverrides {
            grouped: Some("grouped_swapab"),
            ..none
        };
        assert_eq!(
            version_for(&bf(&[40, 248], 4096), &swapab),
            "grouped_swapab"
        );
        let p = bf(&[40, 248], 4096);
        assert_eq!(versions_of_kind(&p), ["grouped_gemm", "grouped_swapab"]);
        let sw = bf(&[1, 2], 256).with_swiglu(WeightLayout::Separate, false);
        assert_eq!(version_for(&sw, &swapab), "swiglu_dual");
        assert_eq!(versions_of_kind(&sw), ["swiglu_dual"]);
    }

    #[test]
    fn support_needs_hopper_and_aligned_k() {
        let h100 = DeviceInfo::h100_sxm();
        let p = MoeProblem::contiguous(&[5, 6], 64, 72, DType::Bf16, DType::Bf16);
        assert_eq!(common_support(&p, &h100), Ok(()));
        let odd = MoeProblem { k: 70, ..p.clone() };
        assert!(common_support(&odd, &h100).unwrap_err().contains("K = 70"));
        let a100 = DeviceInfo {
            compute_capability: (8, 0),
            ..h100
        };
        assert!(common_support(&p, &a100).unwrap_err().contains("Hopper"));
    }
}
