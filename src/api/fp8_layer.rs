//! The MoE layer on FP8 expert weights (e4m3 codes, 128x128 block scales: DeepSeek-V3's
//! format) as one call: kiln's routing, X's sorted copy cast to e4m3 with 1x128 scales, the
//! FP8 fused SwiGLU writing e4m3 H with its scales, the FP8 down projection, the ordered combine.
//!
//! Every intermediate lives in the handle's workspace; warm and at addresses seen before, the
//! six launches replay as one graph.

use cudarc::driver::sys::CUstream;

use super::handle::Kiln;
use super::sorted_layer::{
    check_io, combine_sorted, route_and_sort, shape_err, Activations, Carve, LayerIo, Part,
};
use super::tensor::RawTensor;
use super::validate::moe_layer::MoeRouting;
use super::validate::{fp8_experts, Operand};
use crate::api::dtype::DType;
use crate::device::DeviceBuffer;
use crate::error::Result;
use crate::formats::ScaleRecipe;
use crate::ops::fp8::{quant, Granularity, QuantSpec};
use crate::ops::gemm::DType as KernelDType;
use crate::ops::moe::fp8_problem::{Fp8MoeOperands, Fp8MoeProblem};
use crate::ops::moe::route::{RouteExtras, RouteLayout};
use crate::ops::moe::schedule::sched_bytes;
use crate::ops::moe::{fp8_grouped, fp8_swiglu};

/// One FP8 expert tensor: `codes` e4m3 [E, N, K] and `scales` f32 [E, ceil(N/128),
/// ceil(K/128)], one per 128x128 block of each expert.
pub struct RawFp8Experts {
    pub codes: RawTensor,
    pub scales: RawTensor,
}

/// The layer's three projections: gate (W1) and up (W3) [E, I, H], down (W2) [E, H, I].
pub struct Fp8LayerWeights<'a> {
    pub gate: &'a RawFp8Experts,
    pub up: &'a RawFp8Experts,
    pub down: &'a RawFp8Experts,
}

/// Where the layer's intermediates live in its workspace (parts 256-aligned): the
/// routing's tables from 0, X's sorted copy [T k, H], its e4m3 codes and 1x128 scales, H's codes
/// and scales [T k, I], the down projection's bf16 rows [T k, H], the two kernels' tile tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fp8LayerLayout {
    pub route: RouteLayout,
    pub xs: Part,
    pub xq: Part,
    pub sx: Part,
    pub hq: Part,
    pub sh: Part,
    pub y: Part,
    pub sched_up: Part,
    pub sched_down: Part,
    pub bytes: usize,
}

impl Fp8LayerLayout {
    fn of(
        route: RouteLayout,
        experts: usize,
        pairs: usize,
        hidden: usize,
        inter: usize,
        es: usize,
    ) -> Self {
        let mut ws = Carve(route.bytes);
        let xs = ws.part(pairs * hidden * es);
        let xq = ws.part(pairs * hidden);
        let sx = ws.part(4 * pairs * hidden.div_ceil(128));
        let hq = ws.part(pairs * inter);
        let sh = ws.part(4 * pairs * inter.div_ceil(128));
        let y = ws.part(2 * pairs * hidden);
        let sched_up = ws.part(sched_bytes(experts));
        let sched_down = ws.part(sched_bytes(experts));
        Fp8LayerLayout {
            route,
            xs,
            xq,
            sx,
            hq,
            sh,
            y,
            sched_up,
            sched_down,
            bytes: ws.0,
        }
    }
}

/// A checked FP8 layer call: the two projections' problems (rows an even split of the pairs:
/// the kernels read the routing's offsets on the GPU) and the weights' memory.
pub(crate) struct Fp8LayerPlan {
    io: LayerIo,
    up: Fp8MoeProblem,
    down: Fp8MoeProblem,
    /// (codes, scales) of W1, W3 and W2.
    weights: [(Operand, Operand); 3],
    layout: Fp8LayerLayout,
}

fn plan(
    device: usize,
    x: &RawTensor,
    w: &Fp8LayerWeights,
    routing: &MoeRouting<RawTensor>,
    out: &RawTensor,
) -> Result<Option<Fp8LayerPlan>> {
    let infos = [("w1", w.gate), ("w3", w.up), ("w2", w.down)].map(|(name, t)| -> Result<_> {
        Ok((
            name,
            t.codes.info(name, false)?,
            t.scales.info(&format!("{name}_scale"), false)?,
        ))
    });
    let [g, u, d] = infos;
    let (g, u, d) = (g?, u?, d?);
    let mut dims = [(0, 0, 0); 3];
    for (i, (name, codes, scales)) in [&g, &u, &d].into_iter().enumerate() {
        dims[i] = fp8_experts(device, (name, codes), (&format!("{name}_scale"), scales))?;
    }
    let [(e, inter, hidden_w), up_dims, (e2, hidden_d, inter_d)] = dims;
    if up_dims != dims[0] {
        return Err(shape_err(
            "w3",
            format!(
                "`w3` (up) is {} but `w1` (gate) is {}: the two halves of gate_up_proj have one shape",
                u.1.shape_text(),
                g.1.shape_text()
            ),
        ));
    }
    if (e2, hidden_d, inter_d) != (e, hidden_w, inter) {
        return Err(shape_err(
            "w2",
            format!(
                "`w2` (down) is {}; with gate and up of [{e}, {inter}, {hidden_w}] it is [{e}, {hidden_w}, {inter}]",
                d.1.shape_text()
            ),
        ));
    }
    if !inter.is_multiple_of(16) {
        return Err(shape_err(
            "w1",
            format!(
                "the experts' width {inter} is not a multiple of 16: H is the down projection's e4m3 \
                 input, read in 16-byte rows; pad the width to {}",
                inter.next_multiple_of(16)
            ),
        ));
    }
    let fits = |hidden: usize| {
        (hidden != hidden_w).then(|| {
            format!("`x` has hidden size {hidden} but the experts were made for {hidden_w}")
        })
    };
    let acts = Activations {
        dtypes: &[DType::Bf16, DType::F16],
        why: "the FP8 layer's activations are bf16 or f16 (cast to e4m3 inside)",
        fits: &fits,
    };
    let Some(io) = check_io(device, x, out, routing, e, acts)? else {
        return Ok(None);
    };
    let pairs = io.route.problem.pairs();
    let even: Vec<usize> = (0..e)
        .map(|i| (i + 1) * pairs / e - i * pairs / e)
        .collect();
    let up = Fp8MoeProblem::contiguous(&even, inter, hidden_w).with_swiglu(false, true);
    let down = Fp8MoeProblem::contiguous(&even, hidden_w, inter);
    up.validate().map_err(|m| shape_err("w1", m.to_string()))?;
    down.validate()
        .map_err(|m| shape_err("w2", m.to_string()))?;
    let route = RouteLayout::of(&io.route.problem);
    let layout = Fp8LayerLayout::of(route, e, pairs, hidden_w, inter, io.dtype.size());
    let ops = |(_, c, s): &(&str, _, _)| (Operand::of(c), Operand::of(s));
    Ok(Some(Fp8LayerPlan {
        io,
        up,
        down,
        weights: [ops(&g), ops(&u), ops(&d)],
        layout,
    }))
}

/// The checks of [`fp8_moe_layer`], without a handle.
pub fn check_fp8_moe_layer(
    device: usize,
    x: &RawTensor,
    w: &Fp8LayerWeights,
    routing: &MoeRouting<RawTensor>,
    out: &RawTensor,
) -> Result<()> {
    plan(device, x, w, routing, out).map(drop)
}

/// The whole MoE layer on FP8 experts: `out` [T, H] = for every token, the sum over its k
/// experts e (routed from logits or a given top-k, [`MoeRouting`]) of weight ·
/// (silu(x W1[e]ᵀ) ⊙ (x W3[e]ᵀ)) W2[e]ᵀ, the weights e4m3 with 128x128 block scales, x cast to
/// e4m3 per token and 128 columns, H likewise in the SwiGLU's epilogue; each token's k rows
/// summed in pair order (the same bits every run). x and out bf16 or f16, contiguous.
///
/// # Safety
/// As [`super::raw::gemm`] (`out` is written).
pub unsafe fn fp8_moe_layer(
    k: &Kiln,
    stream: CUstream,
    x: &RawTensor,
    w: &Fp8LayerWeights,
    routing: &MoeRouting<RawTensor>,
    out: &RawTensor,
) -> Result<()> {
    k.on_raw_stream(
        stream,
        |device| plan(device, x, w, routing, out),
        |p| k.launch_fp8_layer(stream, p),
    )
}

impl Kiln {
    fn launch_fp8_layer(&self, stream: CUstream, p: &Fp8LayerPlan) -> Result<()> {
        let (io, r) = (&p.io, &p.io.route);
        let key = ("fp8 layer", r.problem.key(), (p.up.n, p.up.k, io.dtype));
        let addresses = ((io.x, io.out, p.weights), (r.input, r.weights, r.bias));
        let label = || format!("the FP8 MoE layer of {} tokens", r.problem.tokens);
        self.run_graphed(Some(stream), key, addresses, label, |ctx, ws, capturing| {
            let l = &p.layout;
            let base = ws.moe_layer.at_least(ctx, l.bytes, capturing)?;
            let at = |off: usize| base + off as u64;
            let none = RouteExtras {
                tables: [None, None],
                zero: None,
            };
            route_and_sort(ctx, io, base, &l.route, l.xs.at, &none)?;
            let buf = |ptr: u64, bytes: usize| {
                // SAFETY: the caller's memory (checked by `plan`) or the workspace's parts laid
                // out by `Fp8LayerLayout`, alive until the stream has run the launches.
                unsafe { DeviceBuffer::borrowed(ptr, bytes) }
            };
            let part = |p: Part| buf(at(p.at), p.bytes);
            let (pairs, hidden) = (r.problem.pairs(), io.hidden);
            let [xs, xq, sx, hq, sh, y, sched_up, sched_down] =
                [l.xs, l.xq, l.sx, l.hq, l.sh, l.y, l.sched_up, l.sched_down].map(part);
            let spec = QuantSpec::e4m3(Granularity::Block1x128, ScaleRecipe::Fp32);
            quant::quantize_into(
                ctx, &xs, io.dtype, pairs, hidden, hidden, spec, &xq, hidden, &sx,
            )?;
            let offsets = buf(at(l.route.offsets), 4 * (p.up.experts + 1));
            let [(w1, s1), (w3, s3), (w2, s2)] = p
                .weights
                .map(|(c, s)| (buf(c.ptr, c.bytes), buf(s.ptr, s.bytes)));
            let up = Fp8MoeOperands {
                x: &xq,
                sx: &sx,
                w: &w1,
                sw: &s1,
                w3: Some((&w3, &s3)),
                y: &hq,
                sy: Some(&sh),
                rows: &offsets,
                route: None,
                sched: &sched_up,
            };
            fp8_swiglu::launch(ctx, &p.up, &up)?;
            let down = Fp8MoeOperands {
                x: &hq,
                sx: &sh,
                w: &w2,
                sw: &s2,
                w3: None,
                y: &y,
                sy: None,
                rows: &offsets,
                route: None,
                sched: &sched_down,
            };
            fp8_grouped::launch(ctx, &p.down, &down)?;
            combine_sorted(ctx, io, base, &l.route, l.y.at, KernelDType::Bf16)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn experts(e: usize, n: usize, k: usize, at: u64) -> RawFp8Experts {
        RawFp8Experts {
            codes: RawTensor::contiguous(at, DType::E4m3, &[e, n, k], 0),
            scales: RawTensor::contiguous(
                at + (1 << 30),
                DType::F32,
                &[e, n.div_ceil(128), k.div_ceil(128)],
                0,
            ),
        }
    }

    #[test]
    fn a_layer_checks_its_three_projections_against_each_other_and_x_by_name() {
        let (t, e, k, h, i) = (6usize, 8usize, 2usize, 256usize, 192usize);
        let x = RawTensor::contiguous(1 << 33, DType::Bf16, &[t, h], 0);
        let out = RawTensor::contiguous(1 << 34, DType::Bf16, &[t, h], 0);
        let routing = MoeRouting::TopK {
            index: RawTensor::contiguous(1 << 35, DType::I32, &[t, k], 0),
            weights: RawTensor::contiguous(1 << 36, DType::F32, &[t, k], 0),
        };
        let (g, u, d) = (
            experts(e, i, h, 1 << 40),
            experts(e, i, h, 1 << 42),
            experts(e, h, i, 1 << 44),
        );
        let w = Fp8LayerWeights {
            gate: &g,
            up: &u,
            down: &d,
        };
        let p = plan(0, &x, &w, &routing, &out).unwrap().unwrap();
        assert_eq!((p.up.n, p.up.k, p.down.n, p.down.k), (i, h, h, i));
        assert_eq!(p.up.x_rows(), t * k);
        let l = &p.layout;
        assert!(l.bytes >= l.sched_down.at + l.sched_down.bytes && l.xs.at >= l.route.bytes);
        assert_eq!(l.xq.bytes, t * k * h);
        assert_eq!(l.sh.bytes, 4 * t * k * i.div_ceil(128));
        let msg = |w: &Fp8LayerWeights, x: &RawTensor| {
            check_fp8_moe_layer(0, x, w, &routing, &out)
                .unwrap_err()
                .to_string()
        };
        let narrow = experts(e, i - 64, h, 1 << 42);
        assert!(msg(&Fp8LayerWeights { up: &narrow, ..w }, &x).contains("`w3`"));
        let wrong_down = experts(e, h, i + 64, 1 << 44);
        assert!(msg(
            &Fp8LayerWeights {
                down: &wrong_down,
                ..w
            },
            &x
        )
        .contains("`w2`"));
        let odd = experts(e, 200, h, 1 << 40);
        let odd_up = experts(e, 200, h, 1 << 42);
        let odd_down = experts(e, h, 200, 1 << 44);
        let w_odd = Fp8LayerWeights {
            gate: &odd,
            up: &odd_up,
            down: &odd_down,
        };
        assert!(msg(&w_odd, &x).contains("multiple of 16"));
        let bad_scales = RawFp8Experts {
            codes: RawTensor::contiguous(1 << 40, DType::E4m3, &[e, i, h], 0),
            scales: RawTensor::contiguous(1 << 41, DType::F32, &[e, i, h / 128], 0),
        };
        assert!(msg(
            &Fp8LayerWeights {
                gate: &bad_scales,
                ..w
            },
            &x
        )
        .contains("w1_scale"));
        let bf16_codes = RawFp8Experts {
            codes: RawTensor::contiguous(1 << 40, DType::Bf16, &[e, i, h], 0),
            scales: g.scales.clone(),
        };
        assert!(msg(
            &Fp8LayerWeights {
                gate: &bf16_codes,
                ..w
            },
            &x
        )
        .contains("`w1`"));
        let wide = RawTensor::contiguous(1 << 33, DType::Bf16, &[t, 2 * h], 0);
        assert!(msg(&w, &wide).contains("hidden size"));
        let f32_x = RawTensor::contiguous(1 << 33, DType::F32, &[t, h], 0);
        assert!(msg(&w, &f32_x).contains("`x`"));
    }
}
