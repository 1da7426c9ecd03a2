//! The whole MoE layer as one call: routing on the GPU (or a precomputed top-k), the gathered
//! SwiGLU, the down projection with its combine; on cudarc buffers (`Kiln::moe_layer`, with the
//! handle's workspace) or raw descriptions (`raw::moe_layer`, with the caller's workspace).

use cudarc::driver::{sys, CudaStream};

use super::handle::Kiln;
use super::info::TensorInfo;
use super::tensor::{RawTensor, TensorMut, TensorRef};
use super::validate::moe_layer::{moe_layer as check, LayerPlan, MoeRouting};
use crate::error::{ArgumentKind, Error, Result};
use crate::ops::moe::layer::{self, CombineMode, LayerLayout, LayerOperands};
use crate::ops::moe::route::RouteOperands;

/// The layer's options besides the routing's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MoeLayerOptions {
    /// How each token's k expert rows are summed (atomic by default; ordered gives the same
    /// bits on every run).
    pub combine: CombineMode,
}

impl Kiln {
    /// Enqueues `plan` with the workspace at `workspace` (or the handle's own, grown as needed).
    fn launch_moe_layer(
        &self,
        stream: Option<sys::CUstream>,
        plan: &LayerPlan,
        workspace: Option<u64>,
    ) -> Result<()> {
        let p = &plan.problem;
        // (a decode step's layer is 4 launches: warm and at the same addresses, one graph)
        let addresses = (
            [
                plan.x.ptr,
                plan.w13.ptr,
                plan.w2.ptr,
                plan.input.ptr,
                plan.out.ptr,
            ],
            plan.weights.map(|w| w.ptr),
            plan.bias.map(|b| b.ptr),
            workspace,
        );
        self.run_graphed(
            stream,
            plan.key(),
            addresses,
            || p.label(),
            |ctx, ws, capturing| {
                let bytes = LayerLayout::of(p).bytes;
                let base = match workspace {
                    Some(ptr) => ptr,
                    None => ws.moe_layer.at_least(ctx, bytes, capturing)?,
                };
                let ops = LayerOperands {
                    x: plan.x.ptr,
                    w13: plan.w13.ptr,
                    w2: plan.w2.ptr,
                    route: RouteOperands {
                        input: plan.input.ptr,
                        weights: plan.weights.map_or(0, |w| w.ptr),
                        bias: plan.bias.map_or(0, |b| b.ptr),
                        workspace: base,
                    },
                    out: plan.out.ptr,
                };
                // SAFETY: the plan's operands are checked views of the caller's memory, alive until
                // the stream has run (the callers' contracts); the workspace holds `bytes`.
                unsafe { layer::launch(ctx, p, &ops, base) }
            },
        )
    }

    /// The whole MoE layer: `out` [T, H] = for every token, the sum over its k experts e of
    /// weight · (silu(x W1[e]ᵀ) ⊙ (x W3[e]ᵀ)) W2[e]ᵀ, with transformers' weights `w13`
    /// (`gate_up_proj` [E, 2I, H]: rows 0..I gate, I..2I up) and `w2` (`down_proj` [E, H, I]),
    /// routed from logits on the GPU or by a precomputed top-k ([`MoeRouting`]). x, the weights
    /// and out share one dtype (bf16 or f16). Intermediates live in the handle's workspace
    /// (grown on the first call of a size; refused while capturing a graph).
    #[allow(clippy::too_many_arguments)]
    pub fn moe_layer(
        &self,
        stream: &CudaStream,
        x: &TensorRef,
        w13: &TensorRef,
        w2: &TensorRef,
        routing: MoeRouting<&TensorRef>,
        out: &mut TensorMut,
        opts: &MoeLayerOptions,
    ) -> Result<()> {
        self.check_stream(stream)?;
        let infos: MoeRouting<TensorInfo> = routing.map(|t, _| *t.info());
        let Some(plan) = check(
            self.ordinal(),
            &x.info,
            &w13.info,
            &w2.info,
            &infos.as_refs(),
            &out.info,
            opts.combine,
        )?
        else {
            return Ok(());
        };
        let (r1, r2) = match &routing {
            MoeRouting::Logits { logits, bias, .. } => (Some(*logits), *bias),
            MoeRouting::TopK { index, weights } => (Some(*index), Some(*weights)),
        };
        let _order = (
            x.track(stream),
            w13.track(stream),
            w2.track(stream),
            r1.and_then(|t| t.track(stream)),
            r2.and_then(|t| t.track(stream)),
            out.track(stream),
        );
        self.launch_moe_layer(Some(stream.cu_stream()), &plan, None)
    }
}

fn plan_raw(
    device: usize,
    (x, w13, w2): (&RawTensor, &RawTensor, &RawTensor),
    routing: &MoeRouting<RawTensor>,
    out: &RawTensor,
    opts: &MoeLayerOptions,
) -> Result<Option<LayerPlan>> {
    let routing = routing.infos()?;
    check(
        device,
        &x.info("hidden_states", false)?,
        &w13.info("gate_up_proj", false)?,
        &w2.info("down_proj", false)?,
        &routing.as_refs(),
        &out.info("out", false)?,
        opts.combine,
    )
}

/// Bytes of workspace [`moe_layer`] needs for these arguments (0 when there is nothing to do).
pub fn moe_layer_workspace_bytes(
    device: usize,
    tensors: (&RawTensor, &RawTensor, &RawTensor),
    routing: &MoeRouting<RawTensor>,
    out: &RawTensor,
    opts: &MoeLayerOptions,
) -> Result<usize> {
    Ok(plan_raw(device, tensors, routing, out, opts)?
        .map_or(0, |p| LayerLayout::of(&p.problem).bytes))
}

/// The checks of [`moe_layer`], without a handle.
pub fn check_moe_layer(
    device: usize,
    tensors: (&RawTensor, &RawTensor, &RawTensor),
    routing: &MoeRouting<RawTensor>,
    out: &RawTensor,
    opts: &MoeLayerOptions,
) -> Result<()> {
    plan_raw(device, tensors, routing, out, opts).map(drop)
}

/// [`Kiln::moe_layer`] on raw tensors and a raw stream, with the caller's `workspace` (any
/// dtype, contiguous, 256-byte aligned, at least [`moe_layer_workspace_bytes`]) or, with
/// `None`, the handle's own (grown on the first call of a size, as [`Kiln::moe_layer`]'s).
///
/// # Safety
/// As [`super::raw::gemm`] (`out` and `workspace` are written; nothing else may use the
/// workspace until the stream has run the launches; the handle's is shared by every call on
/// it, so calls that use it must be ordered, as on one stream).
pub unsafe fn moe_layer(
    kiln: &Kiln,
    stream: sys::CUstream,
    tensors: (&RawTensor, &RawTensor, &RawTensor),
    routing: &MoeRouting<RawTensor>,
    out: &RawTensor,
    workspace: Option<&RawTensor>,
    opts: &MoeLayerOptions,
) -> Result<()> {
    kiln.check_raw_stream(stream)?;
    let Some(plan) = plan_raw(kiln.ordinal(), tensors, routing, out, opts)? else {
        return Ok(());
    };
    let Some(workspace) = workspace else {
        return kiln.launch_moe_layer(Some(stream), &plan, None);
    };
    let need = LayerLayout::of(&plan.problem).bytes;
    let ws = workspace.info("workspace", false)?;
    let bad = |m: String| Error::argument("workspace", ArgumentKind::Shape, m);
    if !ws.is_contiguous() || ws.span_bytes() < need {
        return Err(bad(format!(
            "`workspace` spans {} bytes ({}contiguous); this layer needs {need} contiguous bytes",
            ws.span_bytes(),
            if ws.is_contiguous() { "" } else { "not " }
        )));
    }
    if !ws.ptr().is_multiple_of(256) {
        return Err(Error::argument(
            "workspace",
            ArgumentKind::Bounds,
            format!(
                "`workspace` starts at {:#x}; give it 256-byte aligned (a fresh allocation is)",
                ws.ptr()
            ),
        ));
    }
    let inputs = [
        ("hidden_states", tensors.0),
        ("gate_up_proj", tensors.1),
        ("down_proj", tensors.2),
        ("out", out),
    ];
    for (name, t) in inputs {
        let t = t.info(name, false)?;
        let (a0, a1) = (t.ptr(), t.ptr() + t.span_bytes() as u64);
        if a0 < ws.ptr() + need as u64 && ws.ptr() < a1 {
            return Err(Error::argument(
                "workspace",
                ArgumentKind::Value,
                format!(
                    "`workspace` overlaps `{name}` in memory; give the layer memory of its own"
                ),
            ));
        }
    }
    kiln.launch_moe_layer(Some(stream), &plan, Some(ws.ptr()))
}
