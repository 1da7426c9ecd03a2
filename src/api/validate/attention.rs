//! Attention arguments: q, k, v, o (and the optional LSE) to an `AttentionProblem` with
//! flash-attention's semantics. The views' dimension order is the option's layout; each tensor's
//! memory is read where it lies: packed BSHD or BHSD (a transposed view of either), or any
//! strides TMA addresses (multiples of 16 bytes), each tensor its own.

use super::{dtype_in, err, float, no_alias, on_device, rank, same_dtype, writable, Operand, HALF};
use crate::api::dtype::DType;
use crate::api::info::TensorInfo;
use crate::api::options::{AttentionOptions, AttnLayout};
use crate::error::{ArgumentKind, Result};
use crate::ops::attention::{AttentionProblem, OperandStrides, Strides, HEAD_DIMS, STRIDE_ALIGN};
use std::hash::Hash;

/// A checked attention forward: the problem and the memory of each tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionPlan {
    pub problem: AttentionProblem,
    pub q: Operand,
    pub k: Operand,
    pub v: Operand,
    pub o: Operand,
    /// `None`: the caller wants no LSE (the handle's workspace takes it).
    pub lse: Option<Operand>,
}

impl AttentionPlan {
    /// What the launch depends on besides data: the problem, the version asked for, whether the
    /// caller wants the LSE, and each base's alignment class (hashed, never formatted).
    pub fn key<'v>(&self, version: Option<&'v str>) -> impl Hash + Eq + std::fmt::Debug + 'v {
        let lse = self.lse.map(|l| l.align_class());
        (
            self.problem.key(),
            version,
            [self.q, self.k, self.v, self.o].map(|o| o.align_class()),
            lse,
        )
    }

    /// The memory a launch of the plan reads and writes (see [`super::GemmPlan::addresses`]).
    pub fn addresses(&self) -> impl Hash {
        let AttentionPlan {
            problem: _,
            q,
            k,
            v,
            o,
            lse,
        } = *self;
        (q, k, v, o, lse)
    }
}

/// Indices of (batch, seqlen, heads, head_dim) in a view ordered as `layout`.
pub(super) fn axes(layout: AttnLayout) -> [usize; 4] {
    match layout {
        AttnLayout::Bshd => [0, 1, 2, 3],
        AttnLayout::Bhsd => [0, 2, 1, 3],
    }
}

/// (batch, seqlen, heads, head_dim) of a view.
fn dims(t: &TensorInfo, ax: [usize; 4]) -> [usize; 4] {
    ax.map(|i| t.shape()[i])
}

/// The storage orders whose packed strides `t` has (dimensions of extent 1 match any stride).
pub(super) fn stored_as(t: &TensorInfo, ax: [usize; 4]) -> Vec<AttnLayout> {
    let [_, s, h, d] = dims(t, ax);
    AttnLayout::ALL
        .into_iter()
        .filter(|&l| {
            let want = Strides::packed(l, h, s, d);
            [(ax[0], want.batch), (ax[2], want.head), (ax[1], want.seq)]
                .iter()
                .all(|&(i, w)| t.shape()[i] <= 1 || t.strides()[i] == w)
        })
        .collect()
}

/// The (batch, head, seq) strides of `t` (named `name`, dims `d` = (batch, seqlen, heads,
/// head_dim)) as the kernels read it: a dimension of extent 1 takes its packed stride in
/// `layout` (never stepped; any value TMA takes); every other stride must be a positive
/// multiple of 16 bytes.
fn own_strides(
    name: &str,
    t: &TensorInfo,
    ax: [usize; 4],
    layout: AttnLayout,
    d: [usize; 4],
) -> Result<Strides> {
    let [_, s, h, hd] = d;
    let packed = Strides::packed(layout, h, s, hd);
    let mut out = packed;
    for (dim, i, slot) in [
        ("batch", ax[0], &mut out.batch),
        ("seqlen", ax[1], &mut out.seq),
        ("heads", ax[2], &mut out.head),
    ] {
        if t.shape()[i] <= 1 {
            continue;
        }
        let stride = t.strides()[i];
        if stride == 0 {
            return Err(err(
                name,
                ArgumentKind::Stride,
                format!(
                    "`{name}` has stride 0 on {dim} (a broadcast view, as `expand` makes); kiln's attention reads every row from its own memory: pass the tensor before it was expanded (key/value heads may be fewer than query heads) or make it contiguous"
                ),
            ));
        }
        if !stride.is_multiple_of(STRIDE_ALIGN) {
            return Err(err(
                name,
                ArgumentKind::Stride,
                format!(
                    "`{name}` has stride {stride} on {dim}; kiln's attention reads rows by TMA, which needs every stride a multiple of {STRIDE_ALIGN} elements (16 bytes): make it contiguous"
                ),
            ));
        }
        *slot = stride;
    }
    Ok(out)
}

/// Checks an attention forward for a handle on GPU `device`; `None` when there are no queries
/// (nothing to launch).
pub fn attention(
    device: usize,
    q: &TensorInfo,
    k: &TensorInfo,
    v: &TensorInfo,
    o: &TensorInfo,
    lse: Option<&TensorInfo>,
    opts: &AttentionOptions,
) -> Result<Option<AttentionPlan>> {
    let order = match opts.layout {
        AttnLayout::Bshd => "[batch, seqlen, heads, head_dim]",
        AttnLayout::Bhsd => "[batch, heads, seqlen, head_dim]",
    };
    let takes = format!("kiln's attention takes 4-D `q`, `k`, `v` and `o` ordered {order}");
    let tensors = [("q", q), ("k", k), ("v", v), ("o", o)];
    for (name, t) in tensors.iter().copied().chain(lse.map(|l| ("lse", l))) {
        on_device(name, t, device)?;
    }
    for (name, t) in tensors {
        rank(name, t, 4, &takes)?;
    }
    dtype_in("q", q, &HALF, "kiln's attention takes bf16 or f16")?;
    for (name, t) in &tensors[1..] {
        same_dtype(
            name,
            t,
            "q",
            q,
            "kiln's attention takes `q`, `k`, `v` and `o` of one dtype",
        )?;
    }
    if let Some(l) = lse {
        dtype_in(
            "lse",
            l,
            &[DType::F32],
            "kiln's attention writes an f32 `lse`",
        )?;
    }
    let ax = axes(opts.layout);
    let [bq, sq, hq, dq] = dims(q, ax);
    let [bk, sk, hk, dk] = dims(k, ax);
    let shape = |m: String| err("k", ArgumentKind::Shape, m);
    if dk != dq {
        return Err(shape(format!("`k` has head dim {dk} but `q` has {dq}")));
    }
    if v.shape() != k.shape() {
        return Err(err(
            "v",
            ArgumentKind::Shape,
            format!(
                "`v` is {} but `k` is {}; kiln's attention takes `k` and `v` of one shape",
                v.shape_text(),
                k.shape_text()
            ),
        ));
    }
    if bk != bq {
        return Err(shape(format!("`k` has batch {bk} but `q` has {bq}")));
    }
    if o.shape() != q.shape() {
        return Err(err(
            "o",
            ArgumentKind::Shape,
            format!(
                "`o` is {} but `q` is {}; the output has the query's shape",
                o.shape_text(),
                q.shape_text()
            ),
        ));
    }
    if !HEAD_DIMS.contains(&dq) {
        return Err(err(
            "q",
            ArgumentKind::Shape,
            format!("`q` has head dim {dq}; kiln's attention takes head dims 64, 128 or 256"),
        ));
    }
    if hk == 0 || !hq.is_multiple_of(hk) {
        return Err(shape(format!(
            "`q` has {hq} heads and `k` {hk}: kiln's attention needs the query heads to be a multiple of the key/value heads (GQA)"
        )));
    }
    if let Some(s) = opts.softmax_scale {
        if !s.is_finite() || s <= 0.0 {
            return Err(err(
                "softmax_scale",
                ArgumentKind::Value,
                format!("`softmax_scale` is {s}; it must be finite and positive"),
            ));
        }
    }
    if let Some(l) = lse {
        if l.shape() != [bq, hq, sq] {
            return Err(err(
                "lse",
                ArgumentKind::Shape,
                format!(
                    "`lse` is {}; kiln's attention writes `lse` as [batch, heads, seqlen_q] = [{bq}, {hq}, {sq}]",
                    l.shape_text()
                ),
            ));
        }
        super::contiguous("lse", l, "kiln's attention writes a packed `lse`")?;
    }
    if bq == 0 || sq == 0 || hq == 0 {
        return Ok(None);
    }
    if sk == 0 {
        return Err(shape(
            "`k` has seqlen 0; attention needs at least one key".into(),
        ));
    }
    for (name, t) in tensors {
        if t.strides()[3] != 1 {
            return Err(err(
                name,
                ArgumentKind::Stride,
                format!(
                    "`{name}` has stride {} on head_dim; kiln's attention reads head_dim contiguously (stride 1)",
                    t.strides()[3]
                ),
            ));
        }
    }
    writable("o", o)?;
    no_alias("o", o, &[("q", q), ("k", k), ("v", v)])?;
    if let Some(l) = lse {
        no_alias("lse", l, &[("q", q), ("k", k), ("v", v), ("o", o)])?;
    }
    let stored: Vec<Vec<AttnLayout>> = tensors.iter().map(|(_, t)| stored_as(t, ax)).collect();
    let common: Vec<AttnLayout> = AttnLayout::ALL
        .into_iter()
        .filter(|l| stored.iter().all(|s| s.contains(l)))
        .collect();
    // One packed order for all four: the layout's kernels as ever; otherwise each tensor's own
    // strides (transformers' BSHD queries beside a BHSD cache, a slice of a fused projection).
    let (layout, strides) = if common.contains(&opts.layout) {
        (opts.layout, None)
    } else if let Some(&l) = common.first() {
        (l, None)
    } else {
        let [sq_, sk_, sv_, so_] = [q, k, v, o].map(|t| dims(t, ax));
        let each = [("q", q, sq_), ("k", k, sk_), ("v", v, sv_), ("o", o, so_)]
            .map(|(name, t, d)| own_strides(name, t, ax, opts.layout, d));
        let [qs, ks, vs, os] = each;
        (
            opts.layout,
            Some(OperandStrides {
                q: qs?,
                k: ks?,
                v: vs?,
                o: os?,
            }),
        )
    };
    let problem = AttentionProblem {
        batch: bq,
        heads_q: hq,
        heads_kv: hk,
        seqlen_q: sq,
        seqlen_kv: sk,
        head_dim: dq,
        dtype: float("q", q)?,
        causal: opts.causal,
        scale: opts.softmax_scale.unwrap_or(1.0 / (dq as f32).sqrt()),
        layout,
        window: opts.window,
        strides,
    };
    problem.validate()?;
    Ok(Some(AttentionPlan {
        problem,
        q: Operand::of(q),
        k: Operand::of(k),
        v: Operand::of(v),
        o: Operand::of(o),
        lse: lse.map(Operand::of),
    }))
}
