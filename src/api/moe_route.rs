//! The MoE layer's routing and combine as calls of their own, for layers that move rows between
//! GPUs in between (expert parallelism: route, send each row to its expert's GPU, run the
//! experts there, send the rows back, combine): `raw::moe_route` writes the routing's tables
//! into the caller's workspace, `raw::moe_combine` sums each token's rows in pair order.

use cudarc::driver::sys;

use super::handle::Kiln;
use super::info::TensorInfo;
use super::tensor::RawTensor;
use super::validate::moe_layer::{route_source, MoeRouting};
use super::validate::{aligned16, contiguous, dtype_in, err, float, no_alias, rank, Operand};
use crate::api::dtype::DType;
use crate::error::{ArgumentKind, Result};
use crate::ops::moe::combine::{self, CombineShape, Rows};
use crate::ops::moe::route::{self, RouteLayout, RouteOperands, RouteProblem};

/// A checked routing: the problem and its inputs' memory.
pub(crate) struct RoutePlan {
    pub(crate) problem: RouteProblem,
    pub(crate) input: Operand,
    pub(crate) weights: Option<Operand>,
    pub(crate) bias: Option<Operand>,
}

pub(crate) fn route_plan(
    device: usize,
    routing: &MoeRouting<RawTensor>,
    experts: usize,
) -> Result<Option<RoutePlan>> {
    let infos = routing.infos()?;
    let routing = infos.as_refs();
    for (name, t) in routing.tensors() {
        super::validate::on_device(name, t, device)?;
    }
    let (name, first) = match &routing {
        MoeRouting::Logits { logits, .. } => ("router_logits", *logits),
        MoeRouting::TopK { index, .. } => ("top_k_index", *index),
    };
    rank(name, first, 2, "the routing takes it as [tokens, ...]")?;
    let t = first.shape()[0];
    let source = route_source(&routing, t, experts)?;
    if t == 0 {
        return Ok(None);
    }
    let problem = RouteProblem {
        tokens: t,
        experts,
        source,
    };
    problem.validate()?;
    let (input, weights, bias) = routing.operands();
    Ok(Some(RoutePlan {
        problem,
        input,
        weights,
        bias,
    }))
}

/// Where the routing of these arguments puts each table in its workspace, and the workspace's
/// bytes (`None`: no tokens, nothing to do).
pub fn moe_route_layout(
    device: usize,
    routing: &MoeRouting<RawTensor>,
    experts: usize,
) -> Result<Option<RouteLayout>> {
    Ok(route_plan(device, routing, experts)?.map(|p| RouteLayout::of(&p.problem)))
}

/// Checks a workspace of at least `need` bytes, 256-byte aligned, contiguous.
pub(crate) fn check_workspace(ws: &TensorInfo, need: usize) -> Result<()> {
    if !ws.is_contiguous() || ws.span_bytes() < need {
        return Err(err(
            "workspace",
            ArgumentKind::Shape,
            format!(
                "`workspace` spans {} bytes ({}contiguous); this call needs {need} contiguous bytes",
                ws.span_bytes(),
                if ws.is_contiguous() { "" } else { "not " }
            ),
        ));
    }
    if !ws.ptr().is_multiple_of(256) {
        return Err(err(
            "workspace",
            ArgumentKind::Bounds,
            format!(
                "`workspace` starts at {:#x}; give it 256-byte aligned (a fresh allocation is)",
                ws.ptr()
            ),
        ));
    }
    Ok(())
}

/// The routing alone: counts, offsets, the expert-sorted rows' tokens and weights, each pair's
/// row, each token's experts and weights, written into `workspace` where
/// [`moe_route_layout`] says. Returns that layout (`None`: no tokens).
///
/// # Safety
/// As [`super::raw::gemm`] (`workspace` is written).
pub unsafe fn moe_route(
    kiln: &Kiln,
    stream: sys::CUstream,
    routing: &MoeRouting<RawTensor>,
    experts: usize,
    workspace: &RawTensor,
) -> Result<Option<RouteLayout>> {
    kiln.check_raw_stream(stream)?;
    let Some(plan) = route_plan(kiln.ordinal(), routing, experts)? else {
        return Ok(None);
    };
    let layout = RouteLayout::of(&plan.problem);
    let ws = workspace.info("workspace", false)?;
    check_workspace(&ws, layout.bytes)?;
    let p = &plan.problem;
    let what = || {
        format!(
            "the routing of {} tokens over {} experts",
            p.tokens, p.experts
        )
    };
    kiln.run_keyed(Some(stream), ("moe_route", p.key()), what, |ctx, _, _| {
        let ops = RouteOperands {
            input: plan.input.ptr,
            weights: plan.weights.map_or(0, |w| w.ptr),
            bias: plan.bias.map_or(0, |b| b.ptr),
            workspace: ws.ptr(),
        };
        route::launch(ctx, p, &ops)
    })?;
    Ok(Some(layout))
}

/// The combine alone: `out` [T, H] = for each token t, the sum over j of w[r] · rows[r] with
/// r = `pair_row`[t k + j] (i32, T k of them, k = its length / T), in that order; w
/// `row_weight` [R] (f32) or 1. `rows` [R, H] and `out` bf16, f16 or f32, H a multiple of 8. A
/// token with a pair outside the rows comes out NaN.
///
/// # Safety
/// As [`super::raw::gemm`] (`out` is written).
pub unsafe fn moe_combine(
    kiln: &Kiln,
    stream: sys::CUstream,
    rows: &RawTensor,
    pair_row: &RawTensor,
    row_weight: Option<&RawTensor>,
    out: &RawTensor,
) -> Result<()> {
    kiln.check_raw_stream(stream)?;
    let device = kiln.ordinal();
    let (rows, pair_row, out) = (
        rows.info("rows", false)?,
        pair_row.info("pair_row", false)?,
        out.info("out", false)?,
    );
    let row_weight = row_weight
        .map(|w| w.info("row_weight", false))
        .transpose()?;
    let all: Vec<(&str, &TensorInfo)> = [("rows", &rows), ("pair_row", &pair_row), ("out", &out)]
        .into_iter()
        .chain(row_weight.as_ref().map(|w| ("row_weight", w)))
        .collect();
    for (name, t) in &all {
        super::validate::on_device(name, t, device)?;
        contiguous(name, t, "the combine reads and writes packed rows")?;
    }
    let floats = [DType::Bf16, DType::F16, DType::F32];
    rank("rows", &rows, 2, "the combine takes it as [rows, hidden]")?;
    rank("out", &out, 2, "the combine takes it as [tokens, hidden]")?;
    dtype_in(
        "rows",
        &rows,
        &floats,
        "the combine reads bf16, f16 or f32 rows",
    )?;
    dtype_in("out", &out, &floats, "the combine writes bf16, f16 or f32")?;
    dtype_in(
        "pair_row",
        &pair_row,
        &[DType::I32],
        "the pairs' rows are i32 (the routing's pair_row)",
    )?;
    let (t, h) = (out.shape()[0], out.shape()[1]);
    let shape = |arg: &str, m: String| err(arg, ArgumentKind::Shape, m);
    if rows.shape()[1] != h {
        return Err(shape(
            "rows",
            format!(
                "`rows` is {} but `out` is {}: both hold hidden size rows",
                rows.shape_text(),
                out.shape_text()
            ),
        ));
    }
    if h == 0 || !h.is_multiple_of(8) {
        return Err(shape(
            "out",
            format!("`out` has hidden size {h}; the combine needs a positive multiple of 8"),
        ));
    }
    if let Some(w) = &row_weight {
        dtype_in("row_weight", w, &[DType::F32], "row weights are f32")?;
        if w.numel() != rows.shape()[0] {
            return Err(shape(
                "row_weight",
                format!(
                    "`row_weight` has {} values for {} rows",
                    w.numel(),
                    rows.shape()[0]
                ),
            ));
        }
    }
    if t == 0 {
        return Ok(());
    }
    let pairs = pair_row.numel();
    if pairs == 0 || !pairs.is_multiple_of(t) {
        return Err(shape(
            "pair_row",
            format!("`pair_row` has {pairs} entries for {t} tokens; it needs top_k per token"),
        ));
    }
    for (name, tensor) in [("rows", &rows), ("out", &out)] {
        aligned16(name, tensor, "the combine reads 16-byte vectors")?;
    }
    let inputs: Vec<(&str, &TensorInfo)> =
        all.iter().copied().filter(|(n, _)| *n != "out").collect();
    no_alias("out", &out, &inputs)?;
    let s = CombineShape {
        tokens: t,
        top_k: pairs / t,
        hidden: h,
        out: float("out", &out)?,
    };
    let r = Rows {
        ptr: rows.ptr(),
        dtype: float("rows", &rows)?,
        count: rows.shape()[0],
    };
    let key = ("moe_combine", t, s.top_k, h, r.dtype, s.out);
    let what = || format!("the combine of {t} tokens' rows");
    kiln.run_keyed(Some(stream), key, what, |ctx, _, _| {
        combine::launch_rows(
            ctx,
            &s,
            r,
            row_weight.map_or(0, |w| w.ptr()),
            pair_row.ptr(),
            out.ptr(),
        )
    })
}
