//! Checks of RMSNorm (with or without the fused residual) and of the rotary embedding: from
//! tensor descriptions to the kernels' shapes and memory, or one sentence naming the argument.

use std::hash::Hash;

use super::{dtype_in, err, finite, float, no_alias, on_device, rank, same_dtype, writable, HALF};
use crate::api::dtype::DType;
use crate::api::info::TensorInfo;
use crate::error::{ArgumentKind, Result};
use crate::ops::pointwise::rmsnorm::{self, NormOperands, NormShape, Rows};
use crate::ops::pointwise::rope::{self, Heads, RopeOperands, RopeShape, Table};

/// A checked RMSNorm: the kernel's shape and memory.
#[derive(Debug, Clone, Copy)]
pub struct NormPlan {
    pub shape: NormShape,
    pub ops: NormOperands,
}

impl NormPlan {
    /// What decides the kernels a call loads (for the handle's record of problems run).
    pub fn key(&self) -> impl Hash {
        (self.shape, "rmsnorm")
    }
}

/// A checked rotary application.
#[derive(Debug, Clone, Copy)]
pub struct RopePlan {
    pub shape: RopeShape,
    pub ops: RopeOperands,
}

impl RopePlan {
    pub fn key(&self) -> impl Hash {
        (self.shape, "rope")
    }
}

/// `t` as rows of its last dim: (rows, row stride), when its leading dims step by one stride
/// (a view of [rows, H], e.g. [B, S, H] with any batch and position strides that nest) and the
/// last dim is contiguous.
fn as_rows(arg: &str, t: &TensorInfo) -> Result<(usize, Rows)> {
    let (shape, strides) = (t.shape(), t.strides());
    let n = shape.len();
    let h = shape[n - 1];
    let bad = || {
        err(
            arg,
            ArgumentKind::Stride,
            format!(
                "`{arg}` has strides {} for shape {}; RMSNorm reads rows with contiguous columns and leading dimensions that step by whole rows: make it contiguous",
                t.strides_text(),
                t.shape_text()
            ),
        )
    };
    if h > 1 && strides[n - 1] != 1 {
        return Err(bad());
    }
    let rows: usize = shape[..n - 1].iter().product();
    // The row stride is the innermost leading dim's (of those longer than 1); each outer one
    // must be the next inner's stride times its length.
    let mut stride = None::<usize>;
    let mut next = None::<(usize, usize)>; // (stride, length) of the last leading dim seen
    for i in (0..n - 1).rev() {
        if shape[i] == 1 {
            continue;
        }
        match next {
            None => stride = Some(strides[i]),
            Some((s, len)) if strides[i] == s * len => {}
            Some(_) => return Err(bad()),
        }
        next = Some((strides[i], shape[i]));
    }
    Ok((
        rows,
        Rows {
            ptr: t.ptr(),
            stride: stride.unwrap_or(h),
        },
    ))
}

/// RMSNorm of `x`'s rows (its last dim, H) times `weight` [H] into `out` (x's shape), eps added
/// to the mean square; with `residual` (x's shape), residual += x first and the sum is
/// normalised. All one dtype, bf16 or f16. `None`: nothing to do (no rows or H = 0).
pub fn rms_norm(
    device: usize,
    x: &TensorInfo,
    weight: &TensorInfo,
    residual: Option<&TensorInfo>,
    out: &TensorInfo,
    eps: f32,
) -> Result<Option<NormPlan>> {
    let all: Vec<(&str, &TensorInfo)> = [("x", x), ("weight", weight), ("out", out)]
        .into_iter()
        .chain(residual.map(|r| ("residual", r)))
        .collect();
    for (name, t) in &all {
        on_device(name, t, device)?;
    }
    dtype_in("x", x, &HALF, "RMSNorm takes bf16 or f16 rows")?;
    for (name, t) in &all[1..] {
        same_dtype(name, t, "x", x, "RMSNorm's tensors share one dtype")?;
    }
    finite("eps", eps)?;
    if eps < 0.0 {
        return Err(err(
            "eps",
            ArgumentKind::Value,
            format!("`eps` is {eps}; it is added to the mean square and must be 0 or more"),
        ));
    }
    let h = x.shape()[x.rank() - 1];
    rank("weight", weight, 1, "RMSNorm takes it as [hidden]")?;
    if weight.shape()[0] != h || (h > 1 && weight.strides()[0] != 1) {
        return Err(err(
            "weight",
            ArgumentKind::Shape,
            format!(
                "`weight` is {} with strides {}; RMSNorm of rows of {h} needs a contiguous [{h}]",
                weight.shape_text(),
                weight.strides_text()
            ),
        ));
    }
    for (name, t) in all.iter().skip(2) {
        if t.shape() != x.shape() {
            return Err(err(
                name,
                ArgumentKind::Shape,
                format!(
                    "`{name}` is {} but `x` is {}; they have one shape",
                    t.shape_text(),
                    x.shape_text()
                ),
            ));
        }
        writable(name, t)?;
    }
    let (rows, xr) = as_rows("x", x)?;
    let (_, outr) = as_rows("out", out)?;
    let res = residual.map(|r| as_rows("residual", r)).transpose()?;
    let mut inputs = vec![("x", x), ("weight", weight)];
    if let Some(r) = residual {
        no_alias("residual", r, &inputs)?;
        inputs.push(("residual", r));
    }
    no_alias("out", out, &inputs)?;
    if rows == 0 || h == 0 {
        return Ok(None);
    }
    if rows > i32::MAX as usize || h > i32::MAX as usize {
        return Err(err(
            "x",
            ArgumentKind::Shape,
            format!(
                "`x` is {}; RMSNorm takes fewer than 2^31 rows and columns",
                x.shape_text()
            ),
        ));
    }
    let ops = NormOperands {
        x: xr,
        out: outr,
        weight: weight.ptr(),
        residual: res.map(|(_, r)| r),
        eps,
    };
    let dtype = float("x", x)?;
    Ok(Some(NormPlan {
        shape: NormShape {
            rows,
            cols: h,
            dtype,
            residual: residual.is_some(),
            vec8: rmsnorm::vec8_fits(h, dtype, &ops),
        },
        ops,
    }))
}

/// The rotary embedding in place: q [B, Hq, S, D] and k [B, Hk, S, D] (transformers' views,
/// any strides with the last 1), bf16 or f16; cos and sin [B, S, R] or [S, R] (a batch of 1
/// serves every sequence) in q's dtype or f32, R even and at most D: the first R dims of each
/// head are rotated (transformers' rotate_half, or pairs (2i, 2i + 1) when `interleaved`).
pub fn rope(
    device: usize,
    q: &TensorInfo,
    k: &TensorInfo,
    cos: &TensorInfo,
    sin: &TensorInfo,
    interleaved: bool,
) -> Result<Option<RopePlan>> {
    let all = [("q", q), ("k", k), ("cos", cos), ("sin", sin)];
    for (name, t) in all {
        on_device(name, t, device)?;
    }
    dtype_in(
        "q",
        q,
        &HALF,
        "the rotary embedding takes bf16 or f16 q and k",
    )?;
    same_dtype("k", k, "q", q, "q and k share one dtype")?;
    dtype_in(
        "cos",
        cos,
        &[q.dtype(), DType::F32],
        &format!("cos and sin are {} (q's dtype) or f32", q.dtype()),
    )?;
    same_dtype("sin", sin, "cos", cos, "cos and sin share one dtype")?;
    let heads =
        "the rotary embedding takes it as [batch, heads, seq, head_dim] (transformers' view)";
    rank("q", q, 4, heads)?;
    rank("k", k, 4, heads)?;
    let (qs, ks) = (q.shape(), k.shape());
    if ks[0] != qs[0] || ks[2] != qs[2] || ks[3] != qs[3] {
        return Err(err(
            "k",
            ArgumentKind::Shape,
            format!(
                "`k` is {} but `q` is {}; they share batch, seq and head_dim",
                k.shape_text(),
                q.shape_text()
            ),
        ));
    }
    let (b, s, d) = (qs[0], qs[2], qs[3]);
    if cos.rank() != 2 && cos.rank() != 3 {
        return Err(err(
            "cos",
            ArgumentKind::Shape,
            format!(
                "`cos` is {}; the rotary embedding takes [batch, seq, rot_dim] or [seq, rot_dim]",
                cos.shape_text()
            ),
        ));
    }
    if sin.shape() != cos.shape() {
        return Err(err(
            "sin",
            ArgumentKind::Shape,
            format!(
                "`sin` is {} but `cos` is {}; they have one shape",
                sin.shape_text(),
                cos.shape_text()
            ),
        ));
    }
    let cn = cos.rank();
    let (cb, cseq, r) = (
        if cn == 3 { cos.shape()[0] } else { 1 },
        cos.shape()[cn - 2],
        cos.shape()[cn - 1],
    );
    if cseq != s || (cb != b && cb != 1) {
        return Err(err(
            "cos",
            ArgumentKind::Shape,
            format!(
                "`cos` is {} for q {}; it needs [{b} or 1, {s}, rot_dim] or [{s}, rot_dim]",
                cos.shape_text(),
                q.shape_text()
            ),
        ));
    }
    if r == 0 || !r.is_multiple_of(2) || r > d {
        return Err(err(
            "cos",
            ArgumentKind::Shape,
            format!("`cos` rotates {r} dims of heads of {d}; give an even number from 2 to {d}"),
        ));
    }
    for (name, t) in all {
        let last = t.strides()[t.rank() - 1];
        if last != 1 {
            return Err(err(
                name,
                ArgumentKind::Stride,
                format!(
                    "`{name}` has strides {} for shape {}; its last dimension must be contiguous (stride 1)",
                    t.strides_text(),
                    t.shape_text()
                ),
            ));
        }
    }
    writable("q", q)?;
    writable("k", k)?;
    no_alias("q", q, &[("k", k), ("cos", cos), ("sin", sin)])?;
    no_alias("k", k, &[("cos", cos), ("sin", sin)])?;
    if b == 0 || s == 0 || qs[1] + ks[1] == 0 {
        return Ok(None);
    }
    let table = |t: &TensorInfo| Table {
        ptr: t.ptr(),
        sb: if cn == 3 && cb > 1 { t.strides()[0] } else { 0 },
        ss: t.strides()[cn - 2],
    };
    let heads_of = |t: &TensorInfo| Heads {
        ptr: t.ptr(),
        sb: t.strides()[0],
        sh: t.strides()[1],
        ss: t.strides()[2],
    };
    let ops = RopeOperands {
        q: heads_of(q),
        k: heads_of(k),
        cos: table(cos),
        sin: table(sin),
    };
    let dtype = float("q", q)?;
    let cs_f32 = cos.dtype() == DType::F32;
    Ok(Some(RopePlan {
        shape: RopeShape {
            batch: b,
            seq: s,
            hq: qs[1],
            hk: ks[1],
            rot: r,
            dtype,
            cs_f32,
            interleaved,
            vec8: rope::vec8_fits(r, dtype, cs_f32, &ops),
        },
        ops,
    }))
}
