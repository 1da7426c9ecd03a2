//! FP8 arguments, DeepGEMM's layouts: e4m3 codes K-major, fp32 scales, 1x128 on the M side
//! ([M, ceil(K/128)] M-major, or the same memory as a contiguous [ceil(K/128), M]) and 128x128
//! on the weights ([ceil(N/128), ceil(K/128)] per matrix, contiguous), bf16 out; and the casts to
//! FP8. Each check names the argument and says how to fix it.

use super::{contiguous, dtype_in, err, float, no_alias, on_device, rank, writable, Operand};
use crate::api::dtype::DType;
use crate::api::info::TensorInfo;
use crate::error::{ArgumentKind, Error, Result};
use crate::ops::fp8::{Fp8Problem, ScaleMode};
use crate::ops::gemm::DType as OpDType;
use crate::ops::moe::fp4::kernel_w4a8::W4a8Layout;
use crate::ops::moe::fp8_problem::Fp8MoeProblem;

/// A checked dense FP8 GEMM.
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8GemmPlan {
    pub problem: Fp8Problem,
    pub a: Operand,
    pub sa: Operand,
    pub b: Operand,
    pub sb: Operand,
    pub c: Operand,
}

/// A checked FP8 grouped GEMM or fused SwiGLU (contiguous or masked rows).
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8GroupedPlan {
    pub problem: Fp8MoeProblem,
    pub x: Operand,
    pub sx: Operand,
    pub w: Operand,
    pub sw: Operand,
    pub rows: Operand,
    pub y: Operand,
    /// The SwiGLU's W3 and its scales, routing weights and quantised output's scales.
    pub w3: Option<(Operand, Operand)>,
    pub route: Option<Operand>,
    pub sy: Option<Operand>,
}

/// A checked cast to FP8.
#[derive(Debug, Clone, PartialEq)]
pub struct Fp8CastPlan {
    pub input: OpDType,
    pub rows: usize,
    pub cols: usize,
    /// Elements from one input row to the next.
    pub ldx: usize,
    pub x: Operand,
    pub codes: Operand,
    pub scales: Operand,
}

fn k_multiple_of_16(arg: &str, k: usize) -> Result<()> {
    if !k.is_multiple_of(16) {
        return Err(err(
            arg,
            ArgumentKind::Shape,
            format!(
                "`{arg}` has K = {k}, not a multiple of 16: FP8 rows must be whole 16-byte units \
                 for TMA; pad K with zeros to {}",
                k.next_multiple_of(16)
            ),
        ));
    }
    Ok(())
}

fn e4m3(arg: &str, t: &TensorInfo, device: usize, dims: usize, what: &str) -> Result<()> {
    on_device(arg, t, device)?;
    dtype_in(
        arg,
        t,
        &[DType::E4m3],
        "FP8 operands are e4m3fn codes (u8 memory, torch.float8_e4m3fn)",
    )?;
    rank(arg, t, dims, what)?;
    contiguous(arg, t, "FP8 operands are read K-major by TMA")
}

fn f32_scales(arg: &str, t: &TensorInfo, device: usize) -> Result<()> {
    on_device(arg, t, device)?;
    dtype_in(arg, t, &[DType::F32], "scales are fp32")
}

/// 1x128 scales of `rows` rows and `kb` K blocks: [rows, kb] with strides [1, rows] (DeepGEMM's
/// M-major layout), or a contiguous [kb, rows] (the same memory).
fn m_major_scales(arg: &str, t: &TensorInfo, rows: usize, kb: usize) -> Result<()> {
    let (s, st) = (t.shape(), t.strides());
    let m_major =
        s == [rows, kb] && (st == [1, rows] || (kb == 1 && st[0] == 1) || rows == 1 && st[1] == 1);
    let stacked = s == [kb, rows] && t.is_contiguous();
    if m_major || stacked {
        return Ok(());
    }
    Err(err(
        arg,
        ArgumentKind::Shape,
        format!(
            "`{arg}` has shape {} and strides {}; the 1x128 scales of {rows} rows and {kb} K blocks are \
             [{rows}, {kb}] M-major (strides [1, {rows}]) or a contiguous [{kb}, {rows}]",
            t.shape_text(),
            t.strides_text()
        ),
    ))
}

/// 128x128 scales: exactly `want` (contiguous).
fn block_scales(arg: &str, t: &TensorInfo, want: &[usize]) -> Result<()> {
    if t.shape() != want {
        return Err(err(
            arg,
            ArgumentKind::Shape,
            format!(
                "`{arg}` has shape {}; the 128x128 scales here are {want:?} (one per 128 rows and 128 of K)",
                t.shape_text()
            ),
        ));
    }
    contiguous(arg, t, "128x128 scales are read row-major")
}

fn bf16_out(arg: &str, t: &TensorInfo, device: usize, want: &[usize]) -> Result<()> {
    on_device(arg, t, device)?;
    dtype_in(arg, t, &[DType::Bf16], "the FP8 GEMMs write bf16")?;
    if t.shape() != want {
        return Err(err(
            arg,
            ArgumentKind::Shape,
            format!(
                "`{arg}` has shape {}; this call writes {want:?}",
                t.shape_text()
            ),
        ));
    }
    contiguous(arg, t, "the output is written row by row")?;
    writable(arg, t)
}

/// The problem's own checks as argument errors.
fn as_argument(arg: &str, e: Error) -> Error {
    match e {
        Error::InvalidInput(m) => err(arg, ArgumentKind::Shape, m),
        other => other,
    }
}

/// `out = dequant(a) · dequant(b)ᵀ`: a [M, K], b [N, K] e4m3; sa 1x128, sb 128x128; out bf16
/// [M, N]. `None` when M is 0 (nothing to do).
pub fn fp8_gemm(
    device: usize,
    a: &TensorInfo,
    sa: &TensorInfo,
    b: &TensorInfo,
    sb: &TensorInfo,
    c: &TensorInfo,
) -> Result<Option<Fp8GemmPlan>> {
    e4m3("a", a, device, 2, "a is [M, K]")?;
    e4m3(
        "b",
        b,
        device,
        2,
        "b is [N, K] (the NT layout: both K-major)",
    )?;
    let (m, k, n) = (a.shape()[0], a.shape()[1], b.shape()[0]);
    if b.shape()[1] != k {
        return Err(err(
            "b",
            ArgumentKind::Shape,
            format!("`b` is {} but `a` has K = {k}; b is [N, K]", b.shape_text()),
        ));
    }
    k_multiple_of_16("a", k)?;
    f32_scales("sa", sa, device)?;
    f32_scales("sb", sb, device)?;
    let kb = k.div_ceil(128);
    m_major_scales("sa", sa, m, kb)?;
    block_scales("sb", sb, &[n.div_ceil(128), kb])?;
    bf16_out("out", c, device, &[m, n])?;
    no_alias("out", c, &[("a", a), ("b", b), ("sa", sa), ("sb", sb)])?;
    if m == 0 || n == 0 {
        return Ok(None);
    }
    let problem = Fp8Problem::new(m, n, k, OpDType::Bf16, ScaleMode::Block);
    problem.validate().map_err(|e| as_argument("a", e))?;
    Ok(Some(Fp8GemmPlan {
        problem,
        a: Operand::of(a),
        sa: Operand::of(sa),
        b: Operand::of(b),
        sb: Operand::of(sb),
        c: Operand::of(c),
    }))
}

/// The rows of an FP8 MoE call on E experts of K: contiguous (x [rows, K], offsets i32 [E + 1])
/// or masked (x [E, max_rows, K], counts i32 [E]), and sx, x's 1x128 scales over all its rows.
/// `w` names the weights in messages ("`w`", "the prepack"). Returns (x_rows, max_rows).
fn fp8_rows(
    device: usize,
    (x, sx): (&TensorInfo, &TensorInfo),
    rows: &TensorInfo,
    (w, e, k): (&str, usize, usize),
    masked: bool,
) -> Result<(usize, usize)> {
    let (x_rows, max_rows) = if masked {
        e4m3("x", x, device, 3, "the masked x is [E, max_rows, K]")?;
        if x.shape()[0] != e || x.shape()[2] != k {
            return Err(err(
                "x",
                ArgumentKind::Shape,
                format!(
                    "`x` is {} but {w} has {e} experts and K = {k}; the masked x is [E, max_rows, K]",
                    x.shape_text()
                ),
            ));
        }
        (e * x.shape()[1], x.shape()[1])
    } else {
        e4m3("x", x, device, 2, "x is [rows, K]")?;
        if x.shape()[1] != k {
            return Err(err(
                "x",
                ArgumentKind::Shape,
                format!("`x` is {} but {w} has K = {k}", x.shape_text()),
            ));
        }
        (x.shape()[0], 0)
    };
    let (rows_arg, want_rows) = if masked {
        ("counts", e)
    } else {
        ("offsets", e + 1)
    };
    on_device(rows_arg, rows, device)?;
    dtype_in(
        rows_arg,
        rows,
        &[DType::I32],
        "row offsets and counts are int32",
    )?;
    if rows.shape() != [want_rows] {
        return Err(err(
            rows_arg,
            ArgumentKind::Shape,
            format!(
                "`{rows_arg}` has shape {}; {e} experts need [{want_rows}]",
                rows.shape_text()
            ),
        ));
    }
    f32_scales("sx", sx, device)?;
    m_major_scales("sx", sx, x_rows, k.div_ceil(128))?;
    Ok((x_rows, max_rows))
}

/// The output's shape for (x_rows, max_rows) rows of N: [x_rows, N] or masked [E, max_rows, N].
fn out_shape((x_rows, max_rows): (usize, usize), e: usize, n: usize, masked: bool) -> Vec<usize> {
    if masked {
        vec![e, max_rows, n]
    } else {
        vec![x_rows, n]
    }
}

/// The host problem of a checked FP8 MoE call. The kernels read the rows on the GPU; the host
/// problem splits them evenly (it only picks the tile order).
fn fp8_moe_problem(
    (x_rows, max_rows): (usize, usize),
    (e, n, k): (usize, usize, usize),
    masked: bool,
) -> Fp8MoeProblem {
    if masked {
        Fp8MoeProblem::masked(&vec![max_rows; e], max_rows, n, k)
    } else {
        let even: Vec<usize> = (0..e)
            .map(|i| (i + 1) * x_rows / e - i * x_rows / e)
            .collect();
        Fp8MoeProblem::contiguous(&even, n, k)
    }
}

/// A SwiGLU's routing weights: f32, one per row of x, contiguous.
fn routing_weights(device: usize, t: &TensorInfo, x_rows: usize) -> Result<()> {
    on_device("routing", t, device)?;
    dtype_in("routing", t, &[DType::F32], "the routing weights are f32")?;
    if t.numel() != x_rows {
        return Err(err(
            "routing",
            ArgumentKind::Shape,
            format!(
                "`routing` has {} weights but `x` has {x_rows} rows; the SwiGLU takes one f32 weight per row of `x`",
                t.numel()
            ),
        ));
    }
    contiguous("routing", t, "the routing weights are read by row index")
}

/// The rows argument's name.
fn rows_name(masked: bool) -> &'static str {
    if masked {
        "counts"
    } else {
        "offsets"
    }
}

/// The grouped GEMM: contiguous (x [rows, K], offsets i32 [E + 1], y [rows, N]) or masked
/// (`masked`: x [E, max_rows, K], counts i32 [E], y [E, max_rows, N]); w [E, N, K] e4m3, sw
/// [E, ceil(N/128), ceil(K/128)], sx 1x128 over all rows of x.
#[allow(clippy::too_many_arguments)]
pub fn fp8_grouped(
    device: usize,
    x: &TensorInfo,
    sx: &TensorInfo,
    w: &TensorInfo,
    sw: &TensorInfo,
    rows: &TensorInfo,
    y: &TensorInfo,
    masked: bool,
) -> Result<Option<Fp8GroupedPlan>> {
    let (e, n, k) = fp8_experts(device, ("w", w), ("sw", sw))?;
    let xr = fp8_rows(device, (x, sx), rows, ("`w`", e, k), masked)?;
    bf16_out("y", y, device, &out_shape(xr, e, n, masked))?;
    let rows_arg = rows_name(masked);
    no_alias(
        "y",
        y,
        &[("x", x), ("w", w), ("sx", sx), ("sw", sw), (rows_arg, rows)],
    )?;
    if xr.0 == 0 || e == 0 || n == 0 {
        return Ok(None);
    }
    let problem = fp8_moe_problem(xr, (e, n, k), masked);
    problem.validate().map_err(|e| as_argument("x", e))?;
    Ok(Some(Fp8GroupedPlan {
        problem,
        x: Operand::of(x),
        sx: Operand::of(sx),
        w: Operand::of(w),
        sw: Operand::of(sw),
        rows: Operand::of(rows),
        y: Operand::of(y),
        w3: None,
        route: None,
        sy: None,
    }))
}

/// The fused SwiGLU h = silu(x W1ᵀ) * (x W3ᵀ) [* routing] on FP8 operands: x, sx and the rows as
/// [`fp8_grouped`]; w1 and w3 [E, N, K] e4m3 with sw1 and sw3 [E, ceil(N/128), ceil(K/128)];
/// routing f32, one per row of x; h bf16 or f32 like the grouped GEMM's y, or, with `sh`, e4m3
/// codes and their 1x128 scales sh ([x_rows, ceil(N/128)] M-major: the down projection's x and
/// sx).
#[allow(clippy::too_many_arguments)]
pub fn fp8_swiglu(
    device: usize,
    (x, sx): (&TensorInfo, &TensorInfo),
    (w1, sw1): (&TensorInfo, &TensorInfo),
    (w3, sw3): (&TensorInfo, &TensorInfo),
    rows: &TensorInfo,
    routing: Option<&TensorInfo>,
    (h, sh): (&TensorInfo, Option<&TensorInfo>),
    masked: bool,
) -> Result<Option<Fp8GroupedPlan>> {
    let (e, n, k) = fp8_experts(device, ("w1", w1), ("sw1", sw1))?;
    e4m3("w3", w3, device, 3, "w3 is [E, N, K]")?;
    if w3.shape() != w1.shape() {
        return Err(err(
            "w3",
            ArgumentKind::Shape,
            format!(
                "`w3` is {} but `w1` is {}; the gate (w1) and up (w3) weights are both [E, N, K]",
                w3.shape_text(),
                w1.shape_text()
            ),
        ));
    }
    fp8_experts(device, ("w3", w3), ("sw3", sw3))?;
    let xr = fp8_rows(device, (x, sx), rows, ("`w1`", e, k), masked)?;
    if let Some(r) = routing {
        routing_weights(device, r, xr.0)?;
    }
    let want = out_shape(xr, e, n, masked);
    on_device("h", h, device)?;
    let out = match sh {
        Some(sh) => {
            dtype_in(
                "h",
                h,
                &[DType::E4m3],
                "with `sh` the SwiGLU writes e4m3 codes (u8 memory) and their scales",
            )?;
            f32_scales("sh", sh, device)?;
            m_major_scales("sh", sh, xr.0, n.div_ceil(128))?;
            writable("sh", sh)?;
            OpDType::Bf16
        }
        None => {
            dtype_in(
                "h",
                h,
                &[DType::Bf16, DType::F32],
                "the FP8 SwiGLU writes bf16 or f32 (or e4m3 codes with `sh`, their scales)",
            )?;
            float("h", h)?
        }
    };
    if h.shape() != want {
        return Err(err(
            "h",
            ArgumentKind::Shape,
            format!(
                "`h` has shape {}; this call writes {want:?}",
                h.shape_text()
            ),
        ));
    }
    contiguous("h", h, "the output is written row by row")?;
    writable("h", h)?;
    let rows_arg = rows_name(masked);
    let mut inputs = vec![
        ("x", x),
        ("sx", sx),
        ("w1", w1),
        ("sw1", sw1),
        ("w3", w3),
        ("sw3", sw3),
        (rows_arg, rows),
    ];
    inputs.extend(routing.map(|r| ("routing", r)));
    no_alias("h", h, &inputs)?;
    if let Some(sh) = sh {
        inputs.push(("h", h));
        no_alias("sh", sh, &inputs)?;
    }
    if xr.0 == 0 || e == 0 || n == 0 {
        return Ok(None);
    }
    let problem = Fp8MoeProblem {
        out,
        ..fp8_moe_problem(xr, (e, n, k), masked).with_swiglu(routing.is_some(), sh.is_some())
    };
    problem.validate().map_err(|e| as_argument("h", e))?;
    Ok(Some(Fp8GroupedPlan {
        problem,
        x: Operand::of(x),
        sx: Operand::of(sx),
        w: Operand::of(w1),
        sw: Operand::of(sw1),
        rows: Operand::of(rows),
        y: Operand::of(h),
        w3: Some((Operand::of(w3), Operand::of(sw3))),
        route: routing.map(Operand::of),
        sy: sh.map(Operand::of),
    }))
}

/// A checked W4A8 call: MXFP4 weights (prepacked, described by their [`W4a8Layout`]) with e4m3
/// activations.
#[derive(Debug, Clone, PartialEq)]
pub struct W4a8Plan {
    pub problem: Fp8MoeProblem,
    pub x: Operand,
    pub sx: Operand,
    pub rows: Operand,
    pub route: Option<Operand>,
    pub y: Operand,
}

/// The W4A8 experts: x, sx and the rows as [`fp8_grouped`], on weights of layout `l` (a grouped
/// GEMM's W [E, N, K] or a SwiGLU's W1 and W3); y bf16 [rows, N] (masked [E, max_rows, N]);
/// routing (the SwiGLU's only) f32, one per row of x.
pub fn w4a8_experts(
    device: usize,
    (x, sx): (&TensorInfo, &TensorInfo),
    l: &W4a8Layout,
    rows: &TensorInfo,
    routing: Option<&TensorInfo>,
    y: &TensorInfo,
    masked: bool,
) -> Result<Option<W4a8Plan>> {
    let (e, n, k) = (l.experts, l.n, l.k);
    k_multiple_of_16("x", k)?;
    let xr = fp8_rows(device, (x, sx), rows, ("the prepack", e, k), masked)?;
    if let Some(r) = routing {
        if !l.swiglu {
            return Err(err(
                "routing",
                ArgumentKind::Value,
                "`routing` scales the SwiGLU's rows, but these weights are a grouped GEMM's: prepack W1 and W3 together or drop the routing".into(),
            ));
        }
        routing_weights(device, r, xr.0)?;
    }
    bf16_out("y", y, device, &out_shape(xr, e, n, masked))?;
    let mut inputs = vec![("x", x), ("sx", sx), (rows_name(masked), rows)];
    inputs.extend(routing.map(|r| ("routing", r)));
    no_alias("y", y, &inputs)?;
    if xr.0 == 0 || e == 0 || n == 0 {
        return Ok(None);
    }
    let mut problem = fp8_moe_problem(xr, (e, n, k), masked);
    if l.swiglu {
        problem = problem.with_swiglu(routing.is_some(), false);
    }
    problem.validate().map_err(|e| as_argument("x", e))?;
    Ok(Some(W4a8Plan {
        problem,
        x: Operand::of(x),
        sx: Operand::of(sx),
        rows: Operand::of(rows),
        route: routing.map(Operand::of),
        y: Operand::of(y),
    }))
}

/// A cast of x [rows, cols] (bf16, f16 or f32, rows contiguous) to e4m3 codes [rows, cols] and
/// scales: per token (1x128: [rows, ceil(cols/128)] M-major or [ceil(cols/128), rows]) or per
/// block (128x128: [ceil(rows/128), ceil(cols/128)]).
pub fn fp8_cast(
    device: usize,
    x: &TensorInfo,
    codes: &TensorInfo,
    scales: &TensorInfo,
    per_block: bool,
) -> Result<Option<Fp8CastPlan>> {
    on_device("x", x, device)?;
    dtype_in(
        "x",
        x,
        &[DType::Bf16, DType::F16, DType::F32],
        "the casts read bf16, f16 or f32",
    )?;
    rank("x", x, 2, "x is [rows, cols]")?;
    if x.strides()[1] != 1 {
        return Err(err(
            "x",
            ArgumentKind::Stride,
            format!(
                "`x` has strides {}; its rows must be contiguous",
                x.strides_text()
            ),
        ));
    }
    let (r, c) = (x.shape()[0], x.shape()[1]);
    on_device("codes", codes, device)?;
    dtype_in(
        "codes",
        codes,
        &[DType::E4m3],
        "the codes are e4m3fn (u8 memory)",
    )?;
    if codes.shape() != [r, c] {
        return Err(err(
            "codes",
            ArgumentKind::Shape,
            format!("`codes` has shape {}; x is [{r}, {c}]", codes.shape_text()),
        ));
    }
    contiguous("codes", codes, "the codes are written row by row")?;
    f32_scales("scales", scales, device)?;
    let kb = c.div_ceil(128);
    if per_block {
        block_scales("scales", scales, &[r.div_ceil(128), kb])?;
    } else {
        m_major_scales("scales", scales, r, kb)?;
    }
    no_alias("codes", codes, &[("x", x)])?;
    no_alias("scales", scales, &[("x", x), ("codes", codes)])?;
    if r == 0 || c == 0 {
        return Ok(None);
    }
    Ok(Some(Fp8CastPlan {
        input: x.dtype().float().unwrap_or(OpDType::F32),
        rows: r,
        cols: c,
        ldx: x.strides()[0],
        x: Operand::of(x),
        codes: Operand::of(codes),
        scales: Operand::of(scales),
    }))
}

/// One FP8 expert tensor of a layer: `codes` e4m3 [E, N, K] and `scales` f32 [E, ceil(N/128),
/// ceil(K/128)] (128x128 blocks per expert, DeepSeek-V3's weight_scale_inv); returns (E, N, K).
pub(crate) fn fp8_experts(
    device: usize,
    (name, codes): (&str, &TensorInfo),
    (scales_name, scales): (&str, &TensorInfo),
) -> Result<(usize, usize, usize)> {
    e4m3(name, codes, device, 3, "expert weights are [E, N, K]")?;
    let (e, n, k) = (codes.shape()[0], codes.shape()[1], codes.shape()[2]);
    k_multiple_of_16(name, k)?;
    f32_scales(scales_name, scales, device)?;
    block_scales(scales_name, scales, &[e, n.div_ceil(128), k.div_ceil(128)])?;
    Ok((e, n, k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::info::contiguous_strides;
    use crate::ops::moe::fp8_problem::Fp8SwiGlu;

    fn t(dtype: DType, shape: &[usize]) -> TensorInfo {
        TensorInfo::new("t", 1 << 20, dtype, shape, &contiguous_strides(shape), 0).unwrap()
    }
    fn at(ptr: u64, dtype: DType, shape: &[usize]) -> TensorInfo {
        TensorInfo::new("t", ptr, dtype, shape, &contiguous_strides(shape), 0).unwrap()
    }
    fn m_major(ptr: u64, rows: usize, kb: usize) -> TensorInfo {
        TensorInfo::new("t", ptr, DType::F32, &[rows, kb], &[1, rows as isize], 0).unwrap()
    }

    fn gemm(m: usize, n: usize, k: usize) -> Result<Option<Fp8GemmPlan>> {
        let kb = k.div_ceil(128);
        fp8_gemm(
            0,
            &at(1 << 20, DType::E4m3, &[m, k]),
            &m_major(1 << 28, m, kb),
            &at(1 << 30, DType::E4m3, &[n, k]),
            &at(1 << 31, DType::F32, &[n.div_ceil(128), kb]),
            &at(1 << 33, DType::Bf16, &[m, n]),
        )
    }

    #[test]
    fn a_deepgemm_call_is_accepted() {
        let p = gemm(4096, 7168, 16384).unwrap().unwrap();
        assert_eq!((p.problem.m, p.problem.n, p.problem.k), (4096, 7168, 16384));
        assert!(gemm(0, 128, 128).unwrap().is_none());
    }

    #[test]
    fn k_not_a_multiple_of_16_is_one_sentence() {
        let e = gemm(128, 128, 100).unwrap_err();
        assert!(
            e.to_string().contains("K = 100, not a multiple of 16"),
            "{e}"
        );
        assert_eq!(e.exit_code(), 2);
    }

    #[test]
    fn wrong_scale_shapes_are_one_sentence_each() {
        let (m, n, k) = (256, 512, 1024);
        let a = at(1 << 20, DType::E4m3, &[m, k]);
        let b = at(1 << 30, DType::E4m3, &[n, k]);
        let c = at(1 << 33, DType::Bf16, &[m, n]);
        let sb = at(1 << 31, DType::F32, &[4, 8]);
        // sa as a row-major [M, K/128]: not M-major
        let e = fp8_gemm(0, &a, &at(1 << 28, DType::F32, &[m, 8]), &b, &sb, &c).unwrap_err();
        assert!(e.to_string().contains("M-major"), "{e}");
        // the contiguous [K/128, M] form is the same memory: accepted
        assert!(fp8_gemm(0, &a, &at(1 << 28, DType::F32, &[8, m]), &b, &sb, &c).is_ok());
        // sb per 128 columns of N, not per column
        let e = fp8_gemm(
            0,
            &a,
            &m_major(1 << 28, m, 8),
            &b,
            &at(1 << 31, DType::F32, &[n, 8]),
            &c,
        )
        .unwrap_err();
        assert!(e.to_string().contains("[4, 8]"), "{e}");
        // bf16 scales
        let e = fp8_gemm(0, &a, &t(DType::Bf16, &[8, m]), &b, &sb, &c).unwrap_err();
        assert!(e.to_string().contains("scales are fp32"), "{e}");
        // bf16 operands
        let e = fp8_gemm(
            0,
            &t(DType::Bf16, &[m, k]),
            &m_major(1 << 28, m, 8),
            &b,
            &sb,
            &c,
        )
        .unwrap_err();
        assert!(e.to_string().contains("e4m3fn"), "{e}");
    }

    #[test]
    fn grouped_layouts_and_their_errors() {
        let (e, n, k, rows) = (4, 256, 512, 300);
        let w = at(1 << 30, DType::E4m3, &[e, n, k]);
        let sw = at(1 << 31, DType::F32, &[e, 2, 4]);
        let x = at(1 << 20, DType::E4m3, &[rows, k]);
        let sx = m_major(1 << 28, rows, 4);
        let offs = at(1 << 32, DType::I32, &[e + 1]);
        let y = at(1 << 33, DType::Bf16, &[rows, n]);
        let p = fp8_grouped(0, &x, &sx, &w, &sw, &offs, &y, false)
            .unwrap()
            .unwrap();
        assert_eq!(p.problem.routed_rows(), rows);
        let e2 = fp8_grouped(
            0,
            &x,
            &sx,
            &w,
            &sw,
            &at(1 << 32, DType::I32, &[e]),
            &y,
            false,
        )
        .unwrap_err();
        assert!(e2.to_string().contains("need [5]"), "{e2}");
        let bad_sw = at(1 << 31, DType::F32, &[2, 4]);
        let e3 = fp8_grouped(0, &x, &sx, &w, &bad_sw, &offs, &y, false).unwrap_err();
        assert!(e3.to_string().contains("[4, 2, 4]"), "{e3}");
        // masked: x [E, max_rows, K], sx over all E * max_rows rows
        let xm = at(1 << 20, DType::E4m3, &[e, 64, k]);
        let sxm = at(1 << 28, DType::F32, &[4, e * 64]);
        let ym = at(1 << 33, DType::Bf16, &[e, 64, n]);
        let counts = at(1 << 32, DType::I32, &[e]);
        assert!(fp8_grouped(0, &xm, &sxm, &w, &sw, &counts, &ym, true)
            .unwrap()
            .is_some());
        let e4 = fp8_grouped(
            0,
            &xm,
            &at(1 << 28, DType::F32, &[4, 64]),
            &w,
            &sw,
            &counts,
            &ym,
            true,
        )
        .unwrap_err();
        assert!(e4.to_string().contains("256 rows"), "{e4}");
    }

    #[test]
    fn swiglu_outputs_and_their_errors() {
        let (e, n, k, rows) = (4, 256, 512, 300);
        let w1 = at(1 << 30, DType::E4m3, &[e, n, k]);
        let w3 = at(1 << 31, DType::E4m3, &[e, n, k]);
        let sw1 = at(1 << 32, DType::F32, &[e, 2, 4]);
        let sw3 = at(1 << 33, DType::F32, &[e, 2, 4]);
        let x = at(1 << 20, DType::E4m3, &[rows, k]);
        let sx = m_major(1 << 28, rows, 4);
        let offs = at(1 << 34, DType::I32, &[e + 1]);
        let route = at(1 << 35, DType::F32, &[rows]);
        let h = at(1 << 36, DType::Bf16, &[rows, n]);
        let call = |w3: &TensorInfo,
                    route: Option<&TensorInfo>,
                    h: &TensorInfo,
                    sh: Option<&TensorInfo>| {
            fp8_swiglu(
                0,
                (&x, &sx),
                (&w1, &sw1),
                (w3, &sw3),
                &offs,
                route,
                (h, sh),
                false,
            )
        };
        let p = call(&w3, Some(&route), &h, None).unwrap().unwrap();
        assert_eq!(
            p.problem.swiglu,
            Some(Fp8SwiGlu {
                routed: true,
                quantize: false
            })
        );
        assert!(p.w3.is_some() && p.route.is_some() && p.sy.is_none());
        let h32 = at(1 << 36, DType::F32, &[rows, n]);
        assert_eq!(
            call(&w3, None, &h32, None).unwrap().unwrap().problem.out,
            OpDType::F32
        );
        // e4m3 out with its scales: the down projection's x and sx
        let hq = at(1 << 36, DType::E4m3, &[rows, n]);
        let sh = m_major(1 << 37, rows, 2);
        let q = call(&w3, None, &hq, Some(&sh)).unwrap().unwrap();
        assert!(q.problem.quantized_out() && q.sy.is_some());
        let cases = [
            (call(&w3, None, &hq, None), "`h` is e4m3"),
            (call(&w3, None, &h, Some(&sh)), "`h` is bf16"),
            (
                call(&w3, None, &hq, Some(&at(1 << 37, DType::F32, &[rows, 2]))),
                "`sh` has shape [300, 2]",
            ),
            (
                call(&at(1 << 31, DType::E4m3, &[e, 128, k]), None, &h, None),
                "`w3` is [4, 128, 512] but `w1` is [4, 256, 512]",
            ),
            (
                call(&w3, Some(&at(1 << 35, DType::F32, &[rows - 1])), &h, None),
                "`routing` has 299 weights",
            ),
            (
                call(&w3, Some(&at(1 << 35, DType::Bf16, &[rows])), &h, None),
                "`routing` is bf16",
            ),
            (
                call(&w3, None, &at(1 << 36, DType::Bf16, &[rows, 128]), None),
                "`h` has shape [300, 128]",
            ),
            (
                call(&w3, None, &at(1 << 20, DType::Bf16, &[rows, n]), None),
                "`h` overlaps `x`",
            ),
        ];
        for (r, want) in cases {
            let e = r.unwrap_err();
            assert!(e.to_string().contains(want), "{e} (wanted {want})");
        }
        // masked: counts [E], h [E, max_rows, N]
        let xm = at(1 << 20, DType::E4m3, &[e, 64, k]);
        let sxm = at(1 << 28, DType::F32, &[4, e * 64]);
        let counts = at(1 << 34, DType::I32, &[e]);
        let hm = at(1 << 36, DType::Bf16, &[e, 64, n]);
        let m = fp8_swiglu(
            0,
            (&xm, &sxm),
            (&w1, &sw1),
            (&w3, &sw3),
            &counts,
            None,
            (&hm, None),
            true,
        );
        assert!(m.unwrap().unwrap().problem.layout().is_masked());
    }

    #[test]
    fn w4a8_checks_x_against_the_weights() {
        let l = W4a8Layout {
            experts: 4,
            n: 256,
            k: 512,
            swiglu: false,
        };
        let rows = 300;
        let x = at(1 << 20, DType::E4m3, &[rows, 512]);
        let sx = m_major(1 << 28, rows, 4);
        let offs = at(1 << 34, DType::I32, &[5]);
        let y = at(1 << 36, DType::Bf16, &[rows, 256]);
        let route = at(1 << 35, DType::F32, &[rows]);
        let call = |l: &W4a8Layout, x: &TensorInfo, route: Option<&TensorInfo>| {
            w4a8_experts(0, (x, &sx), l, &offs, route, &y, false)
        };
        let p = call(&l, &x, None).unwrap().unwrap();
        assert!(p.problem.swiglu.is_none() && p.problem.x_rows() == rows);
        let e = call(&l, &x, Some(&route)).unwrap_err();
        assert!(e.to_string().contains("`routing` scales the SwiGLU"), "{e}");
        let pair = W4a8Layout { swiglu: true, ..l };
        let p = call(&pair, &x, Some(&route)).unwrap().unwrap();
        assert_eq!(
            p.problem.swiglu,
            Some(Fp8SwiGlu {
                routed: true,
                quantize: false
            })
        );
        let e = call(&l, &at(1 << 20, DType::E4m3, &[rows, 256]), None).unwrap_err();
        assert!(
            e.to_string()
                .contains("`x` is [300, 256] but the prepack has K = 512"),
            "{e}"
        );
        let e = call(&l, &at(1 << 20, DType::Bf16, &[rows, 512]), None).unwrap_err();
        assert!(e.to_string().contains("e4m3fn"), "{e}");
    }

    #[test]
    fn casts_check_their_outputs() {
        let x = t(DType::Bf16, &[300, 1000]);
        let codes = at(1 << 28, DType::E4m3, &[300, 1000]);
        assert!(
            fp8_cast(0, &x, &codes, &at(1 << 30, DType::F32, &[8, 300]), false)
                .unwrap()
                .is_some()
        );
        assert!(
            fp8_cast(0, &x, &codes, &at(1 << 30, DType::F32, &[3, 8]), true)
                .unwrap()
                .is_some()
        );
        let e = fp8_cast(0, &x, &codes, &at(1 << 30, DType::F32, &[3, 8]), false).unwrap_err();
        assert!(e.to_string().contains("1x128 scales of 300 rows"), "{e}");
        let e = fp8_cast(
            0,
            &x,
            &at(1 << 28, DType::Bf16, &[300, 1000]),
            &at(1 << 30, DType::F32, &[3, 8]),
            true,
        )
        .unwrap_err();
        assert!(e.to_string().contains("e4m3fn"), "{e}");
    }
}
