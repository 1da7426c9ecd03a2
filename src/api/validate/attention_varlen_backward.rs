//! Packed attention backward arguments: the packed forward's (q, k, v, o, the LSE it wrote and
//! the offsets, checked as the forward checks them), dO like q, and the gradients dq like q, dk
//! and dv like k, every one packed rows.

use std::hash::Hash;

use super::attention_backward::{
    forward_options, gradients_apart, gradients_like_inputs, lse_needed,
};
use super::attention_varlen::{packed_shape, VarlenPlan};
use super::{contiguous, err, Operand};
use crate::api::info::TensorInfo;
use crate::api::options::AttentionBackwardOptions;
use crate::api::varlen::VarlenOffsets;
use crate::error::{ArgumentKind, Result};
use crate::ops::attention_backward::bwd_fa3_wgmma::BWD_WGMMA_DIMS;

/// A checked packed backward: the forward's plan (its LSE given), dO and the gradients.
#[derive(Debug, Clone, PartialEq)]
pub struct VarlenBackwardPlan {
    pub fwd: VarlenPlan,
    pub d_o: Operand,
    pub dq: Operand,
    pub dk: Operand,
    pub dv: Operand,
}

impl VarlenBackwardPlan {
    /// What the launch depends on besides data (the forward's key: the shape, not the offsets).
    pub fn key<'v>(&self, version: Option<&'v str>) -> impl Hash + Eq + std::fmt::Debug + 'v {
        (
            "attention varlen backward",
            self.fwd.key(version),
            [self.d_o, self.dq, self.dk, self.dv].map(|o| o.align_class()),
        )
    }

    /// The memory a launch reads and writes (see [`VarlenPlan::addresses`]).
    pub fn addresses(&self) -> impl Hash {
        (self.fwd.addresses(), self.d_o, self.dq, self.dk, self.dv)
    }
}

/// Checks a packed attention backward for a handle on GPU `device`; `None` when there is nothing
/// to write (no heads, or no rows at all). q, k, v, o, `lse` (required: f32 [heads, total_q]) and
/// `offsets` are checked as [`super::attention_varlen`] checks the forward's (the offsets'
/// contents too when their host copies are given); `dout` and `dq` are q's shape and dtype, `dk`
/// and `dv` k's, each packed; head dims 64 and 128. A batch with keys but no queries gets zero
/// dK and dV, one with queries but no keys zero dQ. `opts.deterministic` is refused (the packed backward has no
/// deterministic mode yet); `opts.layout` does not apply.
#[allow(clippy::too_many_arguments)]
pub fn attention_varlen_backward(
    device: usize,
    (q, k, v, o): (&TensorInfo, &TensorInfo, &TensorInfo, &TensorInfo),
    d_o: &TensorInfo,
    lse: Option<&TensorInfo>,
    (dq, dk, dv): (&TensorInfo, &TensorInfo, &TensorInfo),
    offsets: &VarlenOffsets<'_, TensorInfo>,
    opts: &AttentionBackwardOptions,
) -> Result<Option<VarlenBackwardPlan>> {
    let Some(lse) = lse else {
        return Err(lse_needed("[heads, total_q]"));
    };
    if opts.deterministic {
        return Err(err(
            "deterministic",
            ArgumentKind::Value,
            "`deterministic` is set but the packed backward has no deterministic mode yet (dQ's additions come in any order); leave it off, or run each sequence as a dense deterministic backward".into(),
        ));
    }
    let pairs = gradients_like_inputs(device, (q, k, v), d_o, (dq, dk, dv))?;
    let shape = packed_shape(
        device,
        q,
        k,
        v,
        o,
        Some(lse),
        offsets,
        &forward_options(opts),
    )?;
    if !BWD_WGMMA_DIMS.contains(&shape.head_dim) {
        return Err(err(
            "q",
            ArgumentKind::Shape,
            format!(
                "`q` has head dim {}; kiln's packed backward takes head dims {BWD_WGMMA_DIMS:?} (the packed forward also runs 256): run such sequences through the dense backward one by one",
                shape.head_dim
            ),
        ));
    }
    for (name, t, _, _) in pairs {
        contiguous(
            name,
            t,
            "kiln's packed backward reads and writes packed rows",
        )?;
    }
    if shape.heads_q == 0 || shape.total_q + shape.total_k == 0 {
        return Ok(None);
    }
    gradients_apart((q, k, v, o), d_o, lse, (dq, dk, dv))?;
    Ok(Some(VarlenBackwardPlan {
        fwd: VarlenPlan::of(shape, q, k, v, o, Some(lse), offsets),
        d_o: Operand::of(d_o),
        dq: Operand::of(dq),
        dk: Operand::of(dk),
        dv: Operand::of(dv),
    }))
}
