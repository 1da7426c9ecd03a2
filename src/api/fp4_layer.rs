//! The MoE layer on 4-bit expert weights as one call: kiln's routing, X's rows copied into the
//! expert-sorted order, the 4-bit fused SwiGLU and down projection, and the ordered combine, in
//! the handle's workspace; warm and at addresses seen before, one replayed graph.
//!
//! The sorted copy rather than a gather in the 4-bit kernels' loads: the 16-bit layer measured
//! the copy 1.3-5.4x faster from 2,048 rows (H200, 2026-11-29), and at decode it is a few KB.

use cudarc::driver::sys::CUstream;

use super::fp4_experts_raw::{fp4_raw_plan, RawFp4Experts};
use super::handle::Kiln;
use super::options::MoeRows;
use super::sorted_layer::{
    check_io, combine_sorted, route_and_sort, shape_err, Activations, Carve, LayerIo, PLAN_BASE,
};
use super::tensor::RawTensor;
use super::validate::moe_layer::MoeRouting;
use super::validate::{MoePlan, Operand};
use crate::api::dtype::DType;
use crate::device::DeviceBuffer;
use crate::error::Result;
use crate::ops::moe::fp4::kernel::{Fp4Experts, Fp4Layout, Fp4Operands, Fp4Tile};
use crate::ops::moe::route::{RouteExtras, RouteLayout, TableSpec};
use crate::ops::moe::schedule::sched_bytes;
use crate::ops::moe::MoeProblem;

/// Where the layer's intermediates live in its workspace (byte offsets, 256-aligned): the
/// routing's tables from 0, then X's sorted copy [T k, H], H [T k, I], the down projection's
/// rows [T k, H] and the two 4-bit kernels' tile tables (which the routing builds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fp4LayerLayout {
    pub route: RouteLayout,
    pub xs: usize,
    pub h: usize,
    pub y: usize,
    pub sched_up: usize,
    pub sched_down: usize,
    pub bytes: usize,
}

impl Fp4LayerLayout {
    fn of(
        route: RouteLayout,
        experts: usize,
        pairs: usize,
        hidden: usize,
        inter: usize,
        es: usize,
    ) -> Self {
        let mut ws = Carve(route.bytes);
        let xs = ws.take(pairs * hidden * es);
        let h = ws.take(pairs * inter * es);
        let y = ws.take(pairs * hidden * es);
        let sched_up = ws.take(sched_bytes(experts));
        let sched_down = ws.take(sched_bytes(experts));
        Fp4LayerLayout {
            route,
            xs,
            h,
            y,
            sched_up,
            sched_down,
            bytes: ws.0,
        }
    }
}

/// A checked 4-bit layer call. The projections' plans describe the intermediates at
/// [`PLAN_BASE`] (their problems are what the launch uses; the addresses come from the
/// workspace when it runs).
pub(crate) struct Fp4LayerPlan {
    io: LayerIo,
    up: MoePlan,
    down: MoePlan,
    w13: (Fp4Layout, (Operand, Operand)),
    w2: (Fp4Layout, (Operand, Operand)),
    layout: Fp4LayerLayout,
}

fn plan(
    device: usize,
    x: &RawTensor,
    w13: &RawFp4Experts,
    w2: &RawFp4Experts,
    routing: &MoeRouting<RawTensor>,
    out: &RawTensor,
) -> Result<Option<Fp4LayerPlan>> {
    let (l13, l2) = (w13.layout, w2.layout);
    if !l13.swiglu {
        return Err(shape_err(
            "w13",
            "`w13` holds a plain projection's weights; give the gate_up_proj pair `quantize_experts` made (SwiGLU)".into(),
        ));
    }
    if l2.swiglu || (l2.experts, l2.k) != (l13.experts, l13.n) {
        return Err(shape_err(
            "w2",
            format!(
                "`w2` is {} experts of [{}, {}]{}; the down projection of `w13` ({} experts, width {}) is [E, H, {}]",
                l2.experts,
                l2.n,
                l2.k,
                if l2.swiglu { " (SwiGLU)" } else { "" },
                l13.experts,
                l13.n,
                l13.n
            ),
        ));
    }
    let fits = |hidden: usize| {
        (hidden != l13.k || l2.n != hidden).then(|| {
            format!(
                "`x` has hidden size {hidden} but the weights were made for {} (w13) and {} (w2)",
                l13.k, l2.n
            )
        })
    };
    let acts = Activations {
        dtypes: &[DType::Bf16, DType::F16],
        why: "the 4-bit layer's activations are bf16 or f16",
        fits: &fits,
    };
    let Some(io) = check_io(device, x, out, routing, l13.experts, acts)? else {
        return Ok(None);
    };
    let hidden = io.hidden;
    let (e, pairs, inter) = (l13.experts, io.route.problem.pairs(), l13.n);
    let es = io.dtype.size();
    let route = RouteLayout::of(&io.route.problem);
    let layout = Fp4LayerLayout::of(route, e, pairs, hidden, inter, es);
    let at = |off: usize| PLAN_BASE + off as u64;
    let rows = MoeRows::Offsets {
        offsets: RawTensor::contiguous(at(layout.route.offsets), DType::I32, &[e + 1], device),
        host: None,
    };
    let xs = RawTensor::contiguous(at(layout.xs), io.api_dtype, &[pairs, hidden], device);
    let h = RawTensor::contiguous(at(layout.h), io.api_dtype, &[pairs, inter], device);
    let y = RawTensor::contiguous(at(layout.y), io.api_dtype, &[pairs, hidden], device);
    let (Some(up), w13_ops) = fp4_raw_plan(device, &xs, w13, &rows, None, &h)? else {
        return Ok(None);
    };
    let (Some(down), w2_ops) = fp4_raw_plan(device, &h, w2, &rows, None, &y)? else {
        return Ok(None);
    };
    Ok(Some(Fp4LayerPlan {
        io,
        up,
        down,
        w13: (l13, w13_ops),
        w2: (l2, w2_ops),
        layout,
    }))
}

/// The checks of [`fp4_moe_layer`], without a handle.
pub fn check_fp4_moe_layer(
    device: usize,
    x: &RawTensor,
    w13: &RawFp4Experts,
    w2: &RawFp4Experts,
    routing: &MoeRouting<RawTensor>,
    out: &RawTensor,
) -> Result<()> {
    plan(device, x, w13, w2, routing, out).map(drop)
}

/// The whole MoE layer on 4-bit experts: `out` [T, H] = for every token, the sum over its k
/// experts e (routed from logits or a given top-k, [`MoeRouting`]) of weight ·
/// (silu(x W1[e]ᵀ) ⊙ (x W3[e]ᵀ)) W2[e]ᵀ with the prepacked `w13` (gate_up_proj) and `w2`
/// (down_proj) of [`super::fp4_experts_raw::fp4_prepack_experts`]; each token's k rows summed
/// in pair order (the same bits every run). x and out bf16 or f16, contiguous.
///
/// # Safety
/// As [`super::raw::gemm`] (`out` is written); the weights' buffers hold what their layouts say.
pub unsafe fn fp4_moe_layer(
    k: &Kiln,
    stream: CUstream,
    x: &RawTensor,
    w13: &RawFp4Experts,
    w2: &RawFp4Experts,
    routing: &MoeRouting<RawTensor>,
    out: &RawTensor,
) -> Result<()> {
    k.on_raw_stream(
        stream,
        |device| plan(device, x, w13, w2, routing, out),
        |p| k.launch_fp4_layer(stream, p),
    )
}

impl Kiln {
    fn launch_fp4_layer(&self, stream: CUstream, p: &Fp4LayerPlan) -> Result<()> {
        let (io, r) = (&p.io, &p.io.route);
        let (up, down) = (&p.up.problem, &p.down.problem);
        let key = (
            "fp4 layer",
            r.problem.key(),
            (p.w13.0, p.w2.0, io.dtype),
            (Fp4Tile::choose(up).tt, Fp4Tile::choose(down).tt),
        );
        // (the projections' problems follow from the key: no need to hash them per call)
        let addresses = (
            (io.x, io.out, p.w13.1, p.w2.1),
            (r.input, r.weights, r.bias),
        );
        let label = || format!("the 4-bit MoE layer of {} tokens", r.problem.tokens);
        self.run_graphed(Some(stream), key, addresses, label, |ctx, ws, capturing| {
            let l = &p.layout;
            let base = ws.moe_layer.at_least(ctx, l.bytes, capturing)?;
            let at = |off: usize| base + off as u64;
            // (the routing builds both 4-bit kernels' tile tables: two launches fewer)
            let table = |sched: usize, p: &MoeProblem| -> Result<TableSpec> {
                Ok(TableSpec {
                    sched: at(sched),
                    bm: Fp4Experts::tables(ctx, p)?,
                    fold: 0,
                    sorted: true,
                })
            };
            let extras = RouteExtras {
                tables: [
                    Some(table(l.sched_up, up)?),
                    Some(table(l.sched_down, down)?),
                ],
                zero: None,
            };
            route_and_sort(ctx, io, base, &l.route, l.xs, &extras)?;
            let buf = |ptr: u64, bytes: usize| {
                // SAFETY: the caller's memory (checked by `plan`) or the workspace's parts laid
                // out by `Fp4LayerLayout`, alive until the stream has run the launches.
                unsafe { DeviceBuffer::borrowed(ptr, bytes) }
            };
            let offsets = buf(at(l.route.offsets), 4 * (up.experts + 1));
            let project = |plan: &MoePlan,
                           (layout, (w, e)): &(Fp4Layout, (Operand, Operand)),
                           (x, y, sched): (usize, usize, usize)| {
                let sched = buf(at(sched), sched_bytes(plan.problem.experts));
                let (xb, yb) = (buf(at(x), plan.x.bytes), buf(at(y), plan.y.bytes));
                let (wb, eb) = (buf(w.ptr, w.bytes), buf(e.ptr, e.bytes));
                let ops = Fp4Operands {
                    x: &xb,
                    w: &wb,
                    escale: &eb,
                    y: &yb,
                    rows: &offsets,
                    route: None,
                    sched: &sched,
                };
                Fp4Experts::launch_tables(ctx, &plan.problem, layout, &ops, false)
            };
            project(&p.up, &p.w13, (l.xs, l.h, l.sched_up))?;
            project(&p.down, &p.w2, (l.h, l.y, l.sched_down))?;
            combine_sorted(ctx, io, base, &l.route, l.y, io.dtype)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::fp4_raw::RawBytes;
    use crate::ops::moe::fp4::Fp4Format;

    fn experts(e: usize, n: usize, k: usize, swiglu: bool, at: u64) -> RawFp4Experts {
        let layout = Fp4Layout {
            format: Fp4Format::Nvfp4,
            experts: e,
            n,
            k,
            swiglu,
            min_scale_byte: 0,
        };
        let bytes = |ptr, len| RawBytes {
            ptr,
            len,
            device: 0,
        };
        RawFp4Experts {
            layout,
            bytes: bytes(at, e * layout.expert_bytes()),
            escale: bytes(at + (1 << 30), e * layout.halves() * 4),
        }
    }

    #[test]
    fn a_layer_checks_its_weights_against_each_other_and_x_by_name() {
        let (t, e, k, h, i) = (6usize, 8usize, 2usize, 256usize, 128usize);
        let x = RawTensor::contiguous(1 << 33, DType::Bf16, &[t, h], 0);
        let out = RawTensor::contiguous(1 << 34, DType::Bf16, &[t, h], 0);
        let routing = MoeRouting::TopK {
            index: RawTensor::contiguous(1 << 35, DType::I32, &[t, k], 0),
            weights: RawTensor::contiguous(1 << 36, DType::F32, &[t, k], 0),
        };
        let (w13, w2) = (
            experts(e, i, h, true, 1 << 40),
            experts(e, h, i, false, 1 << 42),
        );
        check_fp4_moe_layer(0, &x, &w13, &w2, &routing, &out).unwrap();
        let p = plan(0, &x, &w13, &w2, &routing, &out).unwrap().unwrap();
        assert_eq!((p.up.problem.n, p.up.problem.k), (i, h));
        assert_eq!((p.down.problem.n, p.down.problem.k), (h, i));
        assert!(p.layout.bytes > p.layout.sched_down && p.layout.xs >= p.layout.route.bytes);
        let msg = |w13: &RawFp4Experts, w2: &RawFp4Experts, x: &RawTensor, out: &RawTensor| {
            check_fp4_moe_layer(0, x, w13, w2, &routing, out)
                .unwrap_err()
                .to_string()
        };
        assert!(msg(&w2, &w2, &x, &out).contains("`w13`"));
        assert!(msg(&w13, &experts(e, h, 64, false, 1 << 42), &x, &out).contains("`w2`"));
        assert!(msg(&w13, &experts(4, h, i, false, 1 << 42), &x, &out).contains("`w2`"));
        let wide = RawTensor::contiguous(1 << 33, DType::Bf16, &[t, 2 * h], 0);
        assert!(msg(&w13, &w2, &wide, &out).contains("hidden size"));
        let short = RawTensor::contiguous(1 << 34, DType::Bf16, &[t - 1, h], 0);
        assert!(msg(&w13, &w2, &x, &short).contains("`out`"));
        let f32_out = RawTensor::contiguous(1 << 34, DType::F32, &[t, h], 0);
        assert!(msg(&w13, &w2, &x, &f32_out).contains("out"));
        assert!(msg(&w13, &w2, &x, &x).contains("out"));
    }
}
