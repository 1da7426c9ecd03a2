//! Packed attention arguments: q [total_q, Hq, D], k and v [total_k, Hkv, D], o like q, the
//! optional LSE [Hq, total_q], and the offsets (i32 [batch + 1] on the GPU, the longest
//! sequences, and optionally the caller's host copies, which are then checked here) to a
//! `VarlenShape`.

use std::hash::Hash;

use super::{
    contiguous, dtype_in, err, float, no_alias, on_device, rank, same_dtype, writable, Operand,
    HALF,
};
use crate::api::dtype::DType;
use crate::api::info::TensorInfo;
use crate::api::options::AttentionOptions;
use crate::api::varlen::VarlenOffsets;
use crate::error::{ArgumentKind, Error, Result};
use crate::ops::attention::{VarlenProblem, VarlenShape, HEAD_DIMS};

/// A checked packed forward: the shape and the memory of each tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct VarlenPlan {
    pub shape: VarlenShape,
    /// Whether the offsets were checked on the host (their copies were given); the kernel
    /// checks them either way.
    pub host_checked: bool,
    pub q: Operand,
    pub k: Operand,
    pub v: Operand,
    pub o: Operand,
    /// `None`: the caller wants no LSE (the handle's workspace takes it).
    pub lse: Option<Operand>,
    pub cu_q: Operand,
    pub cu_k: Operand,
}

impl VarlenPlan {
    /// What the launch depends on besides data: the kernel is chosen, compiled and sized for
    /// the shape (the longest sequences), so the offsets themselves are not part of it.
    pub fn key<'v>(&self, version: Option<&'v str>) -> impl Hash + Eq + std::fmt::Debug + 'v {
        (
            self.shape.key(),
            version,
            [self.q, self.k, self.v, self.o].map(|o| o.align_class()),
            self.lse.map(|l| l.align_class()),
        )
    }

    /// The memory a launch of the plan reads and writes (see [`super::GemmPlan::addresses`]);
    /// the offsets are read on the GPU, so their values are not part of it.
    pub fn addresses(&self) -> impl Hash {
        let VarlenPlan {
            shape: _,
            host_checked: _,
            q,
            k,
            v,
            o,
            lse,
            cu_q,
            cu_k,
        } = *self;
        (q, k, v, o, lse, cu_q, cu_k)
    }
}

/// One cumulative-offsets argument: i32 [batch + 1], contiguous, its host copy (if any) as long.
fn offsets(arg: &str, t: &TensorInfo, host: Option<&[i32]>, device: usize) -> Result<()> {
    on_device(arg, t, device)?;
    rank(arg, t, 1, &format!("`{arg}` is i32 [batch + 1]"))?;
    dtype_in(
        arg,
        t,
        &[DType::I32],
        &format!("`{arg}` is i32 [batch + 1]"),
    )?;
    contiguous(arg, t, "kiln reads the offsets packed")?;
    match host {
        Some(h) if h.len() != t.shape()[0] => Err(err(
            arg,
            ArgumentKind::Value,
            format!(
                "the host copy of `{arg}` has {} entries but the tensor has {}; pass the tensor's contents",
                h.len(),
                t.shape()[0]
            ),
        )),
        _ => Ok(()),
    }
}

/// An error of the problem's or the shape's validation, named after the argument it is about.
fn named(e: Error) -> Error {
    match e {
        Error::InvalidInput(m) => {
            let arg = [
                ("cu_seqlens_k", "cu_seqlens_k"),
                ("window", "window_size"),
                ("kv_heads", "k"),
                ("scale", "softmax_scale"),
                ("max_seqlen_q", "max_seqlen_q"),
                ("the packed rows", "q"),
            ]
            .into_iter()
            .find(|(start, _)| m.starts_with(start))
            .map_or("cu_seqlens_q", |(_, arg)| arg);
            err(arg, ArgumentKind::Value, m)
        }
        other => other,
    }
}

/// Checks a packed attention forward for a handle on GPU `device`; `None` when there are no
/// queries (nothing to launch). With `offsets.host` (the contents of `cu_q`, `cu_k`) the offsets
/// are checked here (offsets that start elsewhere than 0, decrease or end anywhere but the
/// packed length, and a `max_seqlen_*` below the longest sequence, are refused) and the grid is
/// sized by the longest sequences they hold; without, by `max_seqlen_q` (at most the packed
/// rows), and the kernel checks each sequence's offsets. `opts.layout` does not apply.
#[allow(clippy::too_many_arguments)]
pub fn attention_varlen(
    device: usize,
    q: &TensorInfo,
    k: &TensorInfo,
    v: &TensorInfo,
    o: &TensorInfo,
    lse: Option<&TensorInfo>,
    offsets_: &VarlenOffsets<'_, TensorInfo>,
    opts: &AttentionOptions,
) -> Result<Option<VarlenPlan>> {
    let packed = packed_shape(device, q, k, v, o, lse, offsets_, opts)?;
    if packed.total_q == 0 || packed.heads_q == 0 {
        return Ok(None);
    }
    if packed.total_k == 0 {
        return Err(err(
            "k",
            ArgumentKind::Shape,
            "`k` has 0 rows; attention needs at least one key".into(),
        ));
    }
    writable("o", o)?;
    no_alias("o", o, &[("q", q), ("k", k), ("v", v)])?;
    if let Some(l) = lse {
        no_alias("lse", l, &[("q", q), ("k", k), ("v", v), ("o", o)])?;
    }
    Ok(Some(VarlenPlan::of(packed, q, k, v, o, lse, offsets_)))
}

impl VarlenPlan {
    /// The plan of checked tensors and their shape.
    pub(super) fn of(
        shape: VarlenShape,
        q: &TensorInfo,
        k: &TensorInfo,
        v: &TensorInfo,
        o: &TensorInfo,
        lse: Option<&TensorInfo>,
        offsets: &VarlenOffsets<'_, TensorInfo>,
    ) -> VarlenPlan {
        VarlenPlan {
            shape,
            host_checked: offsets.host.is_some(),
            q: Operand::of(q),
            k: Operand::of(k),
            v: Operand::of(v),
            o: Operand::of(o),
            lse: lse.map(Operand::of),
            cu_q: Operand::of(offsets.cu_q),
            cu_k: Operand::of(offsets.cu_k),
        }
    }
}

/// The checks the packed forward and backward share: q, k, v, o (and the LSE, when given) as
/// the packed forward takes them, the offsets (their contents too, with host copies), the
/// window and the scale, to the shape (empty batches included).
#[allow(clippy::too_many_arguments)]
pub(super) fn packed_shape(
    device: usize,
    q: &TensorInfo,
    k: &TensorInfo,
    v: &TensorInfo,
    o: &TensorInfo,
    lse: Option<&TensorInfo>,
    offsets_: &VarlenOffsets<'_, TensorInfo>,
    opts: &AttentionOptions,
) -> Result<VarlenShape> {
    let (cu_q, cu_k) = (offsets_.cu_q, offsets_.cu_k);
    let (host_q, host_k) = match offsets_.host {
        Some((hq, hk)) => (Some(hq), Some(hk)),
        None => (None, None),
    };
    let takes =
        "kiln's packed attention takes 3-D `q`, `k`, `v` and `o` ordered [total, heads, head_dim]";
    let tensors = [("q", q), ("k", k), ("v", v), ("o", o)];
    for (name, t) in tensors.iter().copied().chain(lse.map(|l| ("lse", l))) {
        on_device(name, t, device)?;
    }
    for (name, t) in tensors {
        rank(name, t, 3, takes)?;
        contiguous(
            name,
            t,
            "kiln's packed attention reads and writes packed rows",
        )?;
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
    offsets("cu_seqlens_q", cu_q, host_q, device)?;
    offsets("cu_seqlens_k", cu_k, host_k, device)?;
    let ([tq, hq, dq], [tk, hk, dk]) = (
        [q.shape()[0], q.shape()[1], q.shape()[2]],
        [k.shape()[0], k.shape()[1], k.shape()[2]],
    );
    let shape = |arg: &str, m: String| err(arg, ArgumentKind::Shape, m);
    if dk != dq {
        return Err(shape(
            "k",
            format!("`k` has head dim {dk} but `q` has {dq}"),
        ));
    }
    if v.shape() != k.shape() {
        return Err(shape(
            "v",
            format!(
                "`v` is {} but `k` is {}; kiln's attention takes `k` and `v` of one shape",
                v.shape_text(),
                k.shape_text()
            ),
        ));
    }
    if o.shape() != q.shape() {
        return Err(shape(
            "o",
            format!(
                "`o` is {} but `q` is {}; the output has the query's shape",
                o.shape_text(),
                q.shape_text()
            ),
        ));
    }
    if !HEAD_DIMS.contains(&dq) {
        return Err(shape(
            "q",
            format!("`q` has head dim {dq}; kiln's attention takes head dims 64, 128 or 256"),
        ));
    }
    if hk == 0 || !hq.is_multiple_of(hk) {
        return Err(shape(
            "k",
            format!("`q` has {hq} heads and `k` {hk}: kiln's attention needs the query heads to be a multiple of the key/value heads (GQA)"),
        ));
    }
    if let Some(l) = lse {
        dtype_in(
            "lse",
            l,
            &[DType::F32],
            "kiln's attention writes an f32 `lse`",
        )?;
        if l.shape() != [hq, tq] {
            return Err(shape(
                "lse",
                format!(
                    "`lse` is {}; kiln's packed attention writes `lse` as [heads, total_q] = [{hq}, {tq}]",
                    l.shape_text()
                ),
            ));
        }
        contiguous("lse", l, "kiln's attention writes a packed `lse`")?;
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
    if cu_q.shape()[0] != cu_k.shape()[0] || cu_q.shape()[0] < 2 {
        return Err(err(
            "cu_seqlens_k",
            ArgumentKind::Shape,
            format!(
                "`cu_seqlens_q` has {} entries and `cu_seqlens_k` {}; both are i32 [batch + 1] (at least 2)",
                cu_q.shape()[0],
                cu_k.shape()[0]
            ),
        ));
    }
    let scale = opts.softmax_scale.unwrap_or(1.0 / (dq as f32).sqrt());
    let (max_q, max_k) = (offsets_.max_seqlen_q, offsets_.max_seqlen_k);
    let packed = match (host_q, host_k) {
        (Some(host_q), Some(host_k)) => {
            let problem = VarlenProblem {
                heads_q: hq,
                heads_kv: hk,
                head_dim: dq,
                total_q: tq,
                total_k: tk,
                cu_seqlens_q: host_q.to_vec(),
                cu_seqlens_k: host_k.to_vec(),
                causal: opts.causal,
                window: opts.window,
                scale,
                dtype: float("q", q)?,
            };
            problem.validate().map_err(named)?;
            let s = problem.shape();
            for (arg, given, longest) in [
                ("max_seqlen_q", max_q, s.max_q),
                ("max_seqlen_k", max_k, s.max_k),
            ] {
                if given < longest {
                    return Err(err(
                        arg,
                        ArgumentKind::Value,
                        format!("`{arg}` is {given} but the longest sequence has {longest} rows; pass at least that"),
                    ));
                }
            }
            s
        }
        _ => VarlenShape {
            heads_q: hq,
            heads_kv: hk,
            head_dim: dq,
            total_q: tq,
            total_k: tk,
            batch: cu_q.shape()[0] - 1,
            // (a bound past the packed rows sizes nothing more)
            max_q: max_q.min(tq),
            max_k: max_k.min(tk),
            causal: opts.causal,
            window: opts.window,
            scale,
            dtype: float("q", q)?,
        },
    };
    packed.validate().map_err(named)?;
    Ok(packed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::Window;

    fn info(arg: &str, ptr: u64, dtype: DType, shape: &[usize]) -> TensorInfo {
        let strides = crate::api::info::contiguous_strides(shape);
        TensorInfo::new(arg, ptr, dtype, shape, &strides, 0).unwrap()
    }

    /// Three sequences of (3, 5), (4, 4), (0, 2) rows, 4 query heads over 2, d64.
    fn check(cu_q: &[i32], cu_k: &[i32], opts: &AttentionOptions) -> Result<Option<VarlenPlan>> {
        let (tq, tk) = (7, 11);
        let q = info("q", 0x10000, DType::Bf16, &[tq, 4, 64]);
        let k = info("k", 0x20000, DType::Bf16, &[tk, 2, 64]);
        let v = info("v", 0x30000, DType::Bf16, &[tk, 2, 64]);
        let o = info("o", 0x40000, DType::Bf16, &[tq, 4, 64]);
        let cq = info("cu_seqlens_q", 0x50000, DType::I32, &[cu_q.len()]);
        let ck = info("cu_seqlens_k", 0x60000, DType::I32, &[cu_k.len()]);
        let offsets = VarlenOffsets {
            cu_q: &cq,
            cu_k: &ck,
            max_seqlen_q: 4,
            max_seqlen_k: 5,
            host: Some((cu_q, cu_k)),
        };
        attention_varlen(0, &q, &k, &v, &o, None, &offsets, opts)
    }

    fn message(r: Result<Option<VarlenPlan>>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn each_bad_offset_and_window_is_one_error_naming_it() {
        let opts = AttentionOptions::default();
        let plan = check(&[0, 3, 7, 7], &[0, 5, 9, 11], &opts)
            .unwrap()
            .unwrap();
        assert_eq!(
            (plan.shape.max_q, plan.shape.max_k, plan.shape.batch),
            (4, 5, 3)
        );
        assert!(plan.host_checked);
        let e = message(check(&[0, 3, 2, 7], &[0, 5, 9, 11], &opts));
        assert!(e.contains("cu_seqlens_q decreases at entry 2"), "{e}");
        let e = message(check(&[0, 3, 7, 7], &[0, 5, 9, 12], &opts));
        assert!(e.contains("overruns the 11 rows"), "{e}");
        let e = message(check(&[0, 3, 7], &[0, 5, 9, 11], &opts));
        assert!(e.contains("batch + 1"), "{e}");
        // the longest key sequence is 6 (sequence 0), more than max_seqlen_k
        let e = message(check(&[0, 3, 7, 7], &[0, 6, 9, 11], &opts));
        assert!(
            e.contains("`max_seqlen_k` is 5 but the longest sequence has 6 rows"),
            "{e}"
        );
        let wide = AttentionOptions {
            window: Window { left: 6, right: 0 },
            ..opts.clone()
        };
        let e = message(check(&[0, 3, 7, 7], &[0, 5, 9, 11], &wide));
        assert!(e.contains("window left = 6"), "{e}");
        let ok = AttentionOptions {
            window: Window { left: 5, right: -1 },
            causal: true,
            ..opts
        };
        assert!(check(&[0, 3, 7, 7], &[0, 5, 9, 11], &ok).unwrap().is_some());
    }

    #[test]
    fn shapes_dtypes_and_host_copies_are_checked() {
        let (cq, ck) = (
            info("cu_seqlens_q", 0x50000, DType::I32, &[3]),
            info("cu_seqlens_k", 0x60000, DType::I32, &[3]),
        );
        let q = info("q", 0x10000, DType::Bf16, &[7, 4, 64]);
        let k = info("k", 0x20000, DType::Bf16, &[11, 3, 64]);
        let o = info("o", 0x40000, DType::Bf16, &[7, 4, 64]);
        let opts = AttentionOptions::default();
        let offsets = |hq: &'static [i32]| VarlenOffsets {
            cu_q: &cq,
            cu_k: &ck,
            max_seqlen_q: 4,
            max_seqlen_k: 6,
            host: Some((hq, &[0, 5, 11][..])),
        };
        let run = |q: &TensorInfo, k: &TensorInfo, hq: &'static [i32]| {
            message(attention_varlen(0, q, k, k, &o, None, &offsets(hq), &opts))
        };
        let e = run(&q, &k, &[0, 3, 7]);
        assert!(e.contains("multiple") || e.contains("divide"), "{e}");
        let k2 = info("k", 0x20000, DType::Bf16, &[11, 2, 64]);
        let e = run(&q, &k2, &[0, 3]);
        assert!(
            e.contains("host copy of `cu_seqlens_q` has 2 entries"),
            "{e}"
        );
        let q4 = info("q", 0x10000, DType::Bf16, &[1, 7, 4, 64]);
        let e = run(&q4, &k2, &[0, 3, 7]);
        assert!(e.contains("3-D"), "{e}");
        let f32q = info("q", 0x10000, DType::F32, &[7, 4, 64]);
        let e = run(&f32q, &k2, &[0, 3, 7]);
        assert!(e.contains("bf16 or f16"), "{e}");
        let plan = attention_varlen(0, &q, &k2, &k2, &o, None, &offsets(&[0, 3, 7]), &opts);
        assert!(plan.unwrap().is_some());
        // Without host copies: the grid from max_seqlen_q (at most the packed rows), nothing
        // about the contents checked here.
        let device_checked = VarlenOffsets {
            host: None,
            max_seqlen_q: 100,
            ..offsets(&[])
        };
        let plan = attention_varlen(0, &q, &k2, &k2, &o, None, &device_checked, &opts)
            .unwrap()
            .unwrap();
        assert!(!plan.host_checked);
        assert_eq!(
            (plan.shape.batch, plan.shape.max_q, plan.shape.max_k),
            (2, 7, 6)
        );
        let none = VarlenOffsets {
            max_seqlen_q: 0,
            ..device_checked
        };
        let e = message(attention_varlen(0, &q, &k2, &k2, &o, None, &none, &opts));
        assert!(e.contains("max_seqlen_q is 0 but q has 7"), "{e}");
        let ck4 = info("cu_seqlens_k", 0x60000, DType::I32, &[4]);
        let uneven = VarlenOffsets {
            cu_k: &ck4,
            ..device_checked
        };
        let e = message(attention_varlen(0, &q, &k2, &k2, &o, None, &uneven, &opts));
        assert!(
            e.contains("`cu_seqlens_q` has 3 entries and `cu_seqlens_k` 4"),
            "{e}"
        );
    }
}
