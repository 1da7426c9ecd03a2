//! Attention backward arguments: the forward's (q, k, v, o and the LSE it wrote, which the
//! backward cannot do without), dO, and the gradients dq, dk and dv, each the shape, dtype and
//! memory order of the tensor it differentiates.

use super::attention::{attention, axes, stored_as};
use super::{err, no_alias, on_device, same_dtype, writable, Operand};
use crate::api::info::TensorInfo;
use crate::api::options::{AttentionBackwardOptions, AttentionOptions};
use crate::error::{ArgumentKind, Result};
use crate::ops::attention::Strides;
use crate::ops::attention_backward::BackwardProblem;

/// A checked attention backward: the problem and the memory of each tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionBackwardPlan {
    pub problem: BackwardProblem,
    pub q: Operand,
    pub k: Operand,
    pub v: Operand,
    pub o: Operand,
    pub d_o: Operand,
    pub lse: Operand,
    pub dq: Operand,
    pub dk: Operand,
    pub dv: Operand,
}

impl AttentionBackwardPlan {
    /// What the launch depends on besides data.
    pub fn key(&self, version: Option<&str>) -> String {
        format!("attention backward {:?} {version:?}", self.problem)
    }
}

/// The forward's arguments, as [`AttentionBackwardOptions`] gives them.
pub(super) fn forward_options(opts: &AttentionBackwardOptions) -> AttentionOptions {
    AttentionOptions {
        causal: opts.causal,
        softmax_scale: opts.softmax_scale,
        layout: opts.layout,
        version: None,
        window: opts.window,
    }
}

/// The refusal of forward tensors the forward reads where they lie but the backward does not:
/// it reads q, k, v and o packed in one order (BSHD or BHSD).
fn mixed_orders(
    tensors: [(&str, &TensorInfo); 4],
    ax: [usize; 4],
    opts: &AttentionBackwardOptions,
) -> crate::error::Error {
    let stored = tensors.map(|(_, t)| stored_as(t, ax));
    let fix = "copy them into one order (the forward reads each where it lies; the backward does not yet)";
    if let Some(i) = stored.iter().position(|s| s.is_empty()) {
        let (name, t) = tensors[i];
        return err(
            name,
            ArgumentKind::Stride,
            format!(
                "`{name}` has strides {} for shape {}; kiln's attention backward reads `q`, `k`, `v` and `o` packed as BSHD or BHSD: {fix}",
                t.strides_text(),
                t.shape_text()
            ),
        );
    }
    let l = if stored[0].contains(&opts.layout) {
        opts.layout
    } else {
        stored[0][0]
    };
    let i = stored.iter().position(|s| !s.contains(&l)).unwrap_or(1);
    err(
        tensors[i].0,
        ArgumentKind::Stride,
        format!(
            "`q` is stored {l} but `{}` {}; kiln's attention backward needs `q`, `k`, `v` and `o` stored in one order: {fix}",
            tensors[i].0, stored[i][0]
        ),
    )
}

/// The refusal of a backward without the forward's LSE (`shape`: how the forward writes it).
pub(super) fn lse_needed(shape: &str) -> crate::error::Error {
    err(
        "lse",
        ArgumentKind::Value,
        format!("the backward needs the forward's `lse` (f32 {shape}): run the forward with an LSE output and pass it"),
    )
}

/// The pairs (gradient or dO, the input whose shape and dtype it has), each checked on GPU
/// `device` and of its input's shape and dtype.
#[allow(clippy::type_complexity)]
pub(super) fn gradients_like_inputs<'t>(
    device: usize,
    (q, k, v): (&'t TensorInfo, &'t TensorInfo, &'t TensorInfo),
    d_o: &'t TensorInfo,
    (dq, dk, dv): (&'t TensorInfo, &'t TensorInfo, &'t TensorInfo),
) -> Result<[(&'static str, &'t TensorInfo, &'static str, &'t TensorInfo); 4]> {
    for (name, t) in [("dout", d_o), ("dq", dq), ("dk", dk), ("dv", dv)] {
        on_device(name, t, device)?;
    }
    let pairs = [
        ("dout", d_o, "q", q),
        ("dq", dq, "q", q),
        ("dk", dk, "k", k),
        ("dv", dv, "v", v),
    ];
    for (name, t, of, like) in pairs {
        if t.shape() != like.shape() {
            return Err(err(
                name,
                ArgumentKind::Shape,
                format!(
                    "`{name}` is {} but `{of}` is {}; the backward takes `{name}` of `{of}`'s shape",
                    t.shape_text(),
                    like.shape_text()
                ),
            ));
        }
        same_dtype(
            name,
            t,
            of,
            like,
            &format!("the backward takes `{name}` of `{of}`'s dtype"),
        )?;
    }
    Ok(pairs)
}

/// The gradients as outputs: each writable, overlapping no input and no other gradient.
pub(super) fn gradients_apart(
    (q, k, v, o): (&TensorInfo, &TensorInfo, &TensorInfo, &TensorInfo),
    d_o: &TensorInfo,
    lse: &TensorInfo,
    (dq, dk, dv): (&TensorInfo, &TensorInfo, &TensorInfo),
) -> Result<()> {
    let inputs = [
        ("q", q),
        ("k", k),
        ("v", v),
        ("o", o),
        ("dout", d_o),
        ("lse", lse),
    ];
    for (name, t) in [("dq", dq), ("dk", dk), ("dv", dv)] {
        writable(name, t)?;
        no_alias(name, t, &inputs)?;
    }
    no_alias("dk", dk, &[("dq", dq)])?;
    no_alias("dv", dv, &[("dq", dq), ("dk", dk)])
}

/// Checks an attention backward for a handle on GPU `device`; `None` when there is no batch
/// (nothing to launch). The gradients are refused when they are not stored as the problem's
/// inputs are (one order for every tensor).
#[allow(clippy::too_many_arguments)]
pub fn attention_backward(
    device: usize,
    (q, k, v, o): (&TensorInfo, &TensorInfo, &TensorInfo, &TensorInfo),
    d_o: &TensorInfo,
    lse: Option<&TensorInfo>,
    (dq, dk, dv): (&TensorInfo, &TensorInfo, &TensorInfo),
    opts: &AttentionBackwardOptions,
) -> Result<Option<AttentionBackwardPlan>> {
    let Some(lse) = lse else {
        return Err(lse_needed("[batch, heads, seqlen_q]"));
    };
    let pairs = gradients_like_inputs(device, (q, k, v), d_o, (dq, dk, dv))?;
    let Some(fwd) = attention(device, q, k, v, o, Some(lse), &forward_options(opts))? else {
        if q.shape()[0] == 0 {
            return Ok(None);
        }
        return Err(err(
            "q",
            ArgumentKind::Shape,
            format!(
                "`q` is {}: with no query (or no head) dK and dV would be all zeros, which kiln's backward does not write; skip the call and zero them",
                q.shape_text()
            ),
        ));
    };
    let p = fwd.problem;
    let ax = axes(opts.layout);
    if p.strides.is_some() {
        return Err(mixed_orders(
            [("q", q), ("k", k), ("v", v), ("o", o)],
            ax,
            opts,
        ));
    }
    for (name, t, of, _) in pairs {
        let (heads, seq) = match of {
            "q" => (p.heads_q, p.seqlen_q),
            _ => (p.heads_kv, p.seqlen_kv),
        };
        let want = Strides::packed(p.layout, heads, seq, p.head_dim);
        let ok = [
            (ax[0], want.batch),
            (ax[1], want.seq),
            (ax[2], want.head),
            (ax[3], 1),
        ]
        .iter()
        .all(|&(i, w)| t.shape()[i] <= 1 || t.strides()[i] == w);
        if !ok {
            return Err(err(
                name,
                ArgumentKind::Stride,
                format!(
                    "`{name}` has strides {} for shape {}; the backward needs it stored packed in {} order, as `{of}` is: make it contiguous like `{of}`",
                    t.strides_text(),
                    t.shape_text(),
                    p.layout
                ),
            ));
        }
    }
    gradients_apart((q, k, v, o), d_o, lse, (dq, dk, dv))?;
    Ok(Some(AttentionBackwardPlan {
        problem: BackwardProblem::new(p, opts.deterministic),
        q: fwd.q,
        k: fwd.k,
        v: fwd.v,
        o: fwd.o,
        d_o: Operand::of(d_o),
        lse: Operand::of(lse),
        dq: Operand::of(dq),
        dk: Operand::of(dk),
        dv: Operand::of(dv),
    }))
}
