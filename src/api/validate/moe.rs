//! MoE arguments: the grouped GEMM and the fused SwiGLU from x, the expert weights, the rows of
//! each expert (device offsets or counts, with an optional host copy) and the output, to a
//! `MoeProblem`. The host copy, when given, is checked; without one the tiles are chosen for
//! an even split (see `MoeRows`), and the kernels clamp what they read on the GPU to `x`.

use super::{
    aligned16, contiguous, dtype_in, err, float, no_alias, on_device, rank, same_dtype, Operand,
    HALF, OUTPUTS,
};
use crate::api::dtype::DType;
use crate::api::info::TensorInfo;
use crate::api::options::{MoeRows, SwigluWeights};
use crate::error::{ArgumentKind, Result};
use crate::ops::moe::problem::INTERLEAVE_ROWS;
use crate::ops::moe::schedule::MAX_EXPERTS;
use crate::ops::moe::{MoeProblem, Rows, SwiGlu, WeightLayout};
use std::hash::Hash;

/// A checked MoE call: the problem (its host rows: the caller's copy or the even split) and the
/// memory of each tensor.
#[derive(Debug, Clone, PartialEq)]
pub struct MoePlan {
    pub problem: MoeProblem,
    pub x: Operand,
    pub w: Operand,
    pub w3: Option<Operand>,
    pub y: Operand,
    pub rows: Operand,
    pub route: Option<Operand>,
}

impl MoePlan {
    /// What the launch depends on besides data: the problem without its host rows, and what
    /// was chosen from them (`choice`: the version and its tile shape), hashed as it is (a warm
    /// call formats nothing).
    pub fn key<C: Hash + Eq + std::fmt::Debug>(
        &self,
        choice: C,
    ) -> impl Hash + Eq + std::fmt::Debug {
        let p = &self.problem;
        let rows = match &p.rows {
            Rows::Contiguous { x_rows, .. } => (false, *x_rows),
            Rows::Masked { max_rows, .. } => (true, *max_rows),
        };
        (
            (p.experts, p.n, p.k, rows, p.input, p.output),
            (p.swiglu, p.w_expert_stride, p.layer),
            choice,
            [Some(self.x), Some(self.w), self.w3].map(|o| o.map(|o| o.align_class())),
        )
    }

    /// The memory a launch of the plan reads and writes (see [`super::GemmPlan::addresses`]),
    /// with the whole problem: the host's copy of the rows picks the tile order, which the key
    /// leaves out.
    pub fn addresses(&self) -> impl Hash + '_ {
        let MoePlan {
            ref problem,
            x,
            w,
            w3,
            y,
            rows,
            route,
        } = *self;
        (problem, x, w, w3, y, rows, route)
    }
}

enum Weights<'t> {
    Plain(&'t TensorInfo),
    Interleaved(&'t TensorInfo),
    Separate(&'t TensorInfo, &'t TensorInfo),
}

/// The elements from one expert's weights to the next of `t` ([E, rows, K]): its rows packed
/// (strides [se, K, 1]) with se ≥ rows·K, a multiple of 16 bytes (TMA's stride rule). Wider
/// than packed is how transformers' `gate_up_proj` halves are read in place.
fn expert_stride(arg: &str, t: &TensorInfo) -> Result<usize> {
    let (shape, strides) = (t.shape(), t.strides());
    let (rows, k) = (shape[1], shape[2]);
    let rows_packed = (rows <= 1 || strides[1] == k) && (k <= 1 || strides[2] == 1);
    let se = if shape[0] <= 1 { rows * k } else { strides[0] };
    if !rows_packed || se < rows * k {
        return Err(err(
            arg,
            ArgumentKind::Stride,
            format!(
                "`{arg}` has strides {} for shape {}; kiln's MoE reads each expert's [N, K] rows packed (strides [s, K, 1] with s >= N*K): make it contiguous",
                t.strides_text(),
                t.shape_text()
            ),
        ));
    }
    if !(se * t.dtype().size()).is_multiple_of(16) {
        return Err(err(
            arg,
            ArgumentKind::Stride,
            format!(
                "`{arg}`'s experts are {se} elements apart, not a multiple of 16 bytes; TMA cannot read them in place: make it contiguous"
            ),
        ));
    }
    Ok(se)
}

/// Checks a grouped GEMM `y[rows of e] = x[rows of e] @ w[e]ᵀ` (w [E, N, K]).
pub fn grouped_gemm(
    device: usize,
    x: &TensorInfo,
    w: &TensorInfo,
    rows: &MoeRows<'_, TensorInfo>,
    y: &TensorInfo,
) -> Result<Option<MoePlan>> {
    moe(device, x, Weights::Plain(w), rows, None, ("y", y))
}

/// Checks a fused SwiGLU `h = silu(x W1ᵀ) * (x W3ᵀ) [* routing]`.
pub fn swiglu(
    device: usize,
    x: &TensorInfo,
    w: &SwigluWeights<TensorInfo>,
    rows: &MoeRows<'_, TensorInfo>,
    routing: Option<&TensorInfo>,
    h: &TensorInfo,
) -> Result<Option<MoePlan>> {
    let weights = match w {
        SwigluWeights::Interleaved(w) => Weights::Interleaved(w),
        SwigluWeights::Separate { w1, w3 } => Weights::Separate(w1, w3),
    };
    moe(device, x, weights, rows, routing, ("h", h))
}

fn moe(
    device: usize,
    x: &TensorInfo,
    weights: Weights,
    rows: &MoeRows<'_, TensorInfo>,
    routing: Option<&TensorInfo>,
    (yn, y): (&str, &TensorInfo),
) -> Result<Option<MoePlan>> {
    let (rn, r) = match rows {
        MoeRows::Offsets { offsets, .. } => ("offsets", offsets),
        MoeRows::Counts { counts, .. } => ("counts", counts),
    };
    let (wn, w, w3) = match weights {
        Weights::Plain(w) => ("w", w, None),
        Weights::Interleaved(w) => ("w13", w, None),
        Weights::Separate(w1, w3) => ("w1", w1, Some(w3)),
    };
    let mut all = vec![("x", x), (wn, w), (rn, r), (yn, y)];
    all.extend(w3.map(|t| ("w3", t)));
    all.extend(routing.map(|t| ("routing", t)));
    for (name, t) in &all {
        on_device(name, t, device)?;
    }
    let masked = rows.is_counts();
    let x_rank = if masked { 3 } else { 2 };
    let x_takes = if masked {
        "with counts kiln's MoE takes `x` as [E, max_rows, K]"
    } else {
        "with offsets kiln's MoE takes `x` as [rows, K]"
    };
    rank("x", x, x_rank, x_takes)?;
    rank(wn, w, 3, &format!("kiln's MoE takes `{wn}` as [E, N, K]"))?;
    rank(
        rn,
        r,
        1,
        &format!("kiln's MoE takes `{rn}` as a 1-D i32 tensor"),
    )?;
    rank(yn, y, x_rank, &format!("`{yn}` has the dimensions of `x`"))?;
    dtype_in("x", x, &HALF, "kiln's MoE kernels take bf16 or f16 inputs")?;
    same_dtype(wn, w, "x", x, "kiln's MoE takes weights of `x`'s dtype")?;
    dtype_in(yn, y, &OUTPUTS, "kiln's MoE kernels write bf16, f16 or f32")?;
    dtype_in(
        rn,
        r,
        &[DType::I32],
        &format!("kiln's MoE reads i32 `{rn}`"),
    )?;
    if let Some(rt) = routing {
        dtype_in(
            "routing",
            rt,
            &[DType::F32],
            "kiln's SwiGLU takes f32 routing weights",
        )?;
    }
    let shape = |arg: &str, m: String| err(arg, ArgumentKind::Shape, m);
    let [e, wrows, k] = [w.shape()[0], w.shape()[1], w.shape()[2]];
    let n = match weights {
        Weights::Interleaved(_) => {
            if !wrows.is_multiple_of(2 * INTERLEAVE_ROWS) {
                return Err(shape(
                    wn,
                    format!(
                        "`w13` has {wrows} rows per expert; the interleaved W13 alternates blocks of {INTERLEAVE_ROWS} rows of W1 and W3, so it needs a multiple of {} rows: pass `w1` and `w3` separately instead",
                        2 * INTERLEAVE_ROWS
                    ),
                ));
            }
            wrows / 2
        }
        _ => wrows,
    };
    if let Some(w3) = w3 {
        same_dtype("w3", w3, "x", x, "kiln's MoE takes weights of `x`'s dtype")?;
        if w3.shape() != w.shape() {
            return Err(shape(
                "w3",
                format!(
                    "`w3` is {} but `w1` is {}; they must have one shape",
                    w3.shape_text(),
                    w.shape_text()
                ),
            ));
        }
    }
    let xk = x.shape()[x_rank - 1];
    if xk != k {
        return Err(shape(
            "x",
            format!("`x` has K = {xk} but `{wn}` has K = {k}"),
        ));
    }
    if masked && x.shape()[0] != e {
        return Err(shape(
            "x",
            format!("`x` has {} experts but `{wn}` has {e}", x.shape()[0]),
        ));
    }
    let want = if masked { e } else { e + 1 };
    if r.shape()[0] != want {
        let need = if masked { "E" } else { "E + 1" };
        return Err(shape(
            rn,
            format!(
                "`{rn}` has {} entries but `{wn}` has {e} experts: {rn} need {need} = {want}",
                r.shape()[0]
            ),
        ));
    }
    let lead = &x.shape()[..x_rank - 1];
    if &y.shape()[..x_rank - 1] != lead {
        return Err(shape(
            yn,
            format!("`{yn}` is {} but `x` is {}", y.shape_text(), x.shape_text()),
        ));
    }
    if y.shape()[x_rank - 1] != n {
        return Err(shape(
            yn,
            format!(
                "`{yn}` has {} columns but `{wn}` gives N = {n}",
                y.shape()[x_rank - 1]
            ),
        ));
    }
    let x_rows: usize = lead.iter().product();
    let max_rows = if masked { x.shape()[1] } else { 0 };
    if let Some(rt) = routing {
        if rt.numel() != x_rows {
            return Err(shape(
                "routing",
                format!(
                    "`routing` has {} weights but `x` has {x_rows} rows; kiln's SwiGLU takes one f32 weight per row of `x`",
                    rt.numel()
                ),
            ));
        }
    }
    if e > MAX_EXPERTS {
        return Err(shape(
            wn,
            format!("`{wn}` has {e} experts; kiln's MoE takes at most {MAX_EXPERTS} per call"),
        ));
    }
    let es = x.dtype().size();
    if k > 0 && !(k * es).is_multiple_of(16) {
        return Err(shape(
            "x",
            format!(
                "`x` rows hold K = {k} elements ({} bytes); kiln's MoE kernels need K to be a multiple of {} (rows of whole 16-byte units)",
                k * es,
                16 / es
            ),
        ));
    }
    let host = host_rows(rows, rn, e, x_rows, max_rows)?;
    if x_rows == 0 || n == 0 || e == 0 {
        return Ok(None);
    }
    if k == 0 {
        return Err(shape("x", "`x` has K = 0; kiln's MoE needs K >= 1".into()));
    }
    for (name, t) in [("x", x), (yn, y), (rn, r)]
        .into_iter()
        .chain(routing.map(|t| ("routing", t)))
    {
        contiguous(name, t, "kiln's MoE kernels read and write packed rows")?;
    }
    let w_stride = expert_stride(wn, w)?;
    if let Some(w3) = w3 {
        if expert_stride("w3", w3)? != w_stride {
            return Err(err(
                "w3",
                ArgumentKind::Stride,
                format!(
                    "`w3` has strides {} but `{wn}` has {}; kiln reads both with one expert stride",
                    w3.strides_text(),
                    w.strides_text()
                ),
            ));
        }
    }
    for (name, t) in [("x", x), (wn, w)].into_iter().chain(w3.map(|t| ("w3", t))) {
        aligned16(name, t, "kiln's MoE kernels read it with TMA")?;
    }
    let inputs: Vec<(&str, &TensorInfo)> = all
        .iter()
        .copied()
        .filter(|(name, _)| *name != yn)
        .collect();
    no_alias(yn, y, &inputs)?;
    let swiglu = match weights {
        Weights::Plain(_) => None,
        Weights::Interleaved(_) => Some(WeightLayout::Interleaved),
        Weights::Separate(..) => Some(WeightLayout::Separate),
    }
    .map(|weights| SwiGlu {
        weights,
        routed: routing.is_some(),
    });
    let problem = MoeProblem {
        experts: e,
        n,
        k,
        rows: if masked {
            Rows::Masked {
                max_rows,
                counts: host,
            }
        } else {
            Rows::Contiguous {
                x_rows,
                offsets: host,
            }
        },
        input: float("x", x)?,
        output: float(yn, y)?,
        swiglu,
        w_expert_stride: (w_stride != w.shape()[1] * k).then_some(w_stride),
        layer: None,
    };
    problem.validate()?;
    Ok(Some(MoePlan {
        problem,
        x: Operand::of(x),
        w: Operand::of(w),
        w3: w3.map(Operand::of),
        y: Operand::of(y),
        rows: Operand::of(r),
        route: routing.map(Operand::of),
    }))
}

/// The host rows of the problem: the caller's copy, checked, or offsets that split `x_rows`
/// evenly (counts: full experts).
fn host_rows(
    rows: &MoeRows<'_, TensorInfo>,
    rn: &str,
    e: usize,
    x_rows: usize,
    max_rows: usize,
) -> Result<Vec<i32>> {
    let value = |m: String| err(rn, ArgumentKind::Value, m);
    let clamp = |v: usize| v.min(i32::MAX as usize) as i32;
    let Some(h) = rows.host() else {
        return Ok(if rows.is_counts() {
            vec![clamp(max_rows); e]
        } else {
            (0..=e)
                .map(|i| clamp((x_rows as u128 * i as u128 / e.max(1) as u128) as usize))
                .collect()
        });
    };
    let want = if rows.is_counts() { e } else { e + 1 };
    if h.len() != want {
        return Err(value(format!(
            "the host copy of `{rn}` has {} entries but the tensor has {want}",
            h.len()
        )));
    }
    if rows.is_counts() {
        if let Some((i, c)) = h
            .iter()
            .enumerate()
            .find(|(_, &c)| c < 0 || c as usize > max_rows)
        {
            return Err(value(format!(
                "`counts[{i}]` = {c} is outside 0..={max_rows} (the rows per expert of `x`)"
            )));
        }
    } else {
        if h[0] < 0 {
            return Err(value(format!(
                "`offsets[0]` = {} is negative; offsets start at 0 or later",
                h[0]
            )));
        }
        if let Some(i) = (1..h.len()).find(|&i| h[i] < h[i - 1]) {
            return Err(value(format!(
                "`offsets` decreases: offsets[{i}] = {} < offsets[{}] = {}; sort the rows by expert",
                h[i],
                i - 1,
                h[i - 1]
            )));
        }
        let last = h[e] as usize;
        if last > x_rows {
            return Err(value(format!(
                "`offsets[{e}]` = {last} overruns the {x_rows} rows of `x`"
            )));
        }
    }
    Ok(h.to_vec())
}
