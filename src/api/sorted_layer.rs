//! What the MoE layers over an expert-sorted copy of X share (4-bit and FP8 weights): the checks
//! of x, out and the routing, and the frame of route, sorted copy, projections, ordered combine.
//!
//! The projections differ per weight format; everything around them is written here once.

use super::moe_route::{route_plan, RoutePlan};
use super::tensor::RawTensor;
use super::validate::moe_layer::MoeRouting;
use super::validate::{aligned16, contiguous, dtype_in, err, float, no_alias, rank, Operand};
use crate::api::dtype::DType;
use crate::device::Context;
use crate::error::{ArgumentKind, Error, Result};
use crate::ops::gemm::DType as KernelDType;
use crate::ops::moe::combine::{self, CombineShape, Rows};
use crate::ops::moe::gather_rows;
use crate::ops::moe::route::{self, align256, RouteExtras, RouteLayout, RouteOperands};

/// Where the plans' descriptions of a layer's intermediates start: far from any caller's
/// memory, so the aliasing checks compare them with nothing real.
pub(crate) const PLAN_BASE: u64 = 1 << 56;

/// A layer's workspace carved part after part, each 256-aligned, from `Carve(start)`.
pub(crate) struct Carve(pub usize);

impl Carve {
    /// The offset of the next `bytes`-byte part.
    pub fn take(&mut self, bytes: usize) -> usize {
        self.part(bytes).at
    }

    /// The next `bytes`-byte part, its size kept beside its offset.
    pub fn part(&mut self, bytes: usize) -> Part {
        let at = self.0;
        self.0 += align256(bytes);
        Part { at, bytes }
    }
}

/// A part of a layer's workspace: its byte offset and size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Part {
    pub at: usize,
    pub bytes: usize,
}

pub(crate) fn shape_err(arg: &str, m: String) -> Error {
    err(arg, ArgumentKind::Shape, m)
}

/// A checked layer's activations and routing.
pub(crate) struct LayerIo {
    pub route: RoutePlan,
    pub x: Operand,
    pub out: Operand,
    /// x's dtype and element type (the activations').
    pub api_dtype: DType,
    pub dtype: KernelDType,
    pub hidden: usize,
}

/// What a layer's weights ask of x: its activation dtypes (and why), and `fits(hidden)`, the
/// complaint about x's hidden size if the weights were made for another.
pub(crate) struct Activations<'a> {
    pub dtypes: &'a [DType],
    pub why: &'a str,
    pub fits: &'a dyn Fn(usize) -> Option<String>,
}

/// Checks x and out ([tokens, hidden], contiguous, 16-byte aligned, as `acts` asks, out x's
/// shape and dtype, not x) and the routing over `experts`; `None`: no tokens, nothing to do.
pub(crate) fn check_io(
    device: usize,
    x: &RawTensor,
    out: &RawTensor,
    routing: &MoeRouting<RawTensor>,
    experts: usize,
    acts: Activations,
) -> Result<Option<LayerIo>> {
    let xi = x.info("x", false)?;
    let oi = out.info("out", false)?;
    for (name, t) in [("x", &xi), ("out", &oi)] {
        super::validate::on_device(name, t, device)?;
        rank(name, t, 2, "the layer takes it as [tokens, hidden]")?;
        contiguous(name, t, "the layer reads and writes whole rows")?;
        dtype_in(name, t, acts.dtypes, acts.why)?;
        aligned16(name, t, "the layer moves 16-byte vectors")?;
    }
    if let Some(m) = (acts.fits)(xi.shape()[1]) {
        return Err(shape_err("x", m));
    }
    if oi.shape() != xi.shape() || oi.dtype() != xi.dtype() {
        return Err(shape_err(
            "out",
            format!(
                "`out` is {} {}; it must be x's shape and dtype ({} {})",
                oi.shape_text(),
                oi.dtype(),
                xi.shape_text(),
                xi.dtype()
            ),
        ));
    }
    no_alias("out", &oi, &[("x", &xi)])?;
    let Some(route) = route_plan(device, routing, experts)? else {
        return Ok(None);
    };
    let t = xi.shape()[0];
    if route.problem.tokens != t {
        return Err(shape_err(
            "x",
            format!(
                "`x` has {t} tokens but the routing has {}",
                route.problem.tokens
            ),
        ));
    }
    Ok(Some(LayerIo {
        route,
        x: Operand::of(&xi),
        out: Operand::of(&oi),
        api_dtype: xi.dtype(),
        dtype: float("x", &xi)?,
        hidden: xi.shape()[1],
    }))
}

/// Routes into the workspace at `base` (its tables where `l` places them, with `extras`) and
/// copies x's rows into the experts' order at `base + xs`.
pub(crate) fn route_and_sort(
    ctx: &Context,
    io: &LayerIo,
    base: u64,
    l: &RouteLayout,
    xs: usize,
    extras: &RouteExtras,
) -> Result<()> {
    let r = &io.route;
    let routed = RouteOperands {
        input: r.input.ptr,
        weights: r.weights.map_or(0, |w| w.ptr),
        bias: r.bias.map_or(0, |b| b.ptr),
        workspace: base,
    };
    route::launch_fused(ctx, &r.problem, &routed, extras)?;
    gather_rows::launch(
        ctx,
        io.x.ptr,
        base + xs as u64,
        base + l.row_token as u64,
        r.problem.tokens,
        r.problem.pairs(),
        io.hidden * io.dtype.size(),
    )
}

/// out[t] = the sum over token t's pairs, in pair order, of its routing weight times its row of
/// `y` (the down projection's rows at `base + y`, of `y_dtype`).
pub(crate) fn combine_sorted(
    ctx: &Context,
    io: &LayerIo,
    base: u64,
    l: &RouteLayout,
    y: usize,
    y_dtype: KernelDType,
) -> Result<()> {
    let r = &io.route.problem;
    let s = CombineShape {
        tokens: r.tokens,
        top_k: r.top_k(),
        hidden: io.hidden,
        out: io.dtype,
    };
    let rows = Rows {
        ptr: base + y as u64,
        dtype: y_dtype,
        count: r.pairs(),
    };
    combine::launch_rows(
        ctx,
        &s,
        rows,
        base + l.row_weight as u64,
        base + l.pair_row as u64,
        io.out.ptr,
    )
}
