//! MoE benchmarking: the grouped GEMM alone, or a whole expert FFN (the fused SwiGLU gate/up,
//! then the down projection as a grouped GEMM on its output), each piece and the sum timed with
//! CUDA events, warm-up excluded, L2 flushed before every timed repetition, random inputs made on
//! the GPU.

use super::bench::{Bench, BenchOptions, Row, Times};
use super::device_data::random_buffer;
use super::memory;
use super::moe_verify::MoeBuffers;
use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::ops::gemm::DType;
use crate::ops::moe::grouped_gemm::GroupedGemm;
use crate::ops::moe::grouped_swapab::GroupedSwapAb;
use crate::ops::moe::schedule::{sched_bytes, TileConfig};
use crate::ops::moe::{check_operands, version_for, MoeOperands, MoeProblem, SwiGlu, WeightLayout};
use crate::ops::registry::Registry;
use crate::overrides::MoeOverrides;

/// What `kiln moe bench` runs.
#[derive(Debug, Clone)]
pub struct MoeBenchRequest {
    /// Rows per expert.
    pub counts: Vec<usize>,
    pub n: usize,
    pub k: usize,
    pub dtype: DType,
    /// Time the expert FFN (SwiGLU with N = ffn, K = hidden, then the down projection).
    pub swiglu: Option<(WeightLayout, bool)>,
}

/// What one timed launch computes: its name, problem label, tile shape and useful work.
pub struct Piece {
    pub name: String,
    pub problem: String,
    pub tile: String,
    pub flops: f64,
    pub bytes: f64,
}

impl Piece {
    pub fn of(name: &str, p: &MoeProblem, sms: u32, o: &MoeOverrides) -> Piece {
        Piece {
            name: name.into(),
            problem: p.label(),
            tile: tile_label(p, sms, o),
            flops: p.flops(),
            bytes: p.min_bytes(),
        }
    }
}

/// The tile shape the MoE kernels pick for `p`: `BMxBN`, `swapAB WxT` (weight rows x tokens) for
/// the swapped-operand kernel, or `128x(128+128)` for the SwiGLU pair.
pub fn tile_label(p: &MoeProblem, sms: u32, o: &MoeOverrides) -> String {
    match version_for(p, o) {
        "swiglu_dual" => {
            let c = TileConfig::SWIGLU;
            format!("{}x({}+{})", c.bm, c.bn, c.bn)
        }
        "grouped_swapab" => GroupedSwapAb::config(p, o).label(),
        _ => GroupedGemm::config(p, sms, o).label(),
    }
}

/// Times `launch` (one enqueue per call) in `run`, counting the piece's flops and bytes: a row
/// of `piece` (`grouped_gemm`, `swiglu_dual`, `down_proj`, `ffn`, or a layer's step), `problem`,
/// `tile` (the tile shape used), the times in ms, `tflops` and `gbps`.
pub fn time_piece(run: &Bench, piece: Piece, launch: impl FnMut() -> Result<()>) -> Result<Row> {
    let t = run.one(launch)?;
    Ok(Row::timed(&t, Times::Ms)
        .with("piece", piece.name)
        .with("problem", piece.problem)
        .with("tile", piece.tile)
        .with("tflops", t.rate(piece.flops, 1e12))
        .with("gbps", t.rate(piece.bytes, 1e9)))
}

/// The problems of a request: (first, down projection if an FFN).
pub fn problems(r: &MoeBenchRequest) -> (MoeProblem, Option<MoeProblem>) {
    let base = MoeProblem::contiguous(&r.counts, r.n, r.k, r.dtype, r.dtype);
    match r.swiglu {
        None => (base, None),
        Some((weights, routed)) => {
            let down = MoeProblem::contiguous(&r.counts, r.k, r.n, r.dtype, r.dtype);
            (base.with_swiglu(weights, routed), Some(down))
        }
    }
}

/// The buffers of `p` with X, the weights, the routing weights and Y filled on the GPU from
/// `seed` (the same lengths [`super::moe_verify::MoeInputs::random`] makes on the host) and the
/// rows array uploaded. Waits until the fills are done.
pub fn random_buffers(ctx: &Context, p: &MoeProblem, seed: u64) -> Result<MoeBuffers> {
    let one = p.experts * p.n * p.k;
    let separate = matches!(
        p.swiglu,
        Some(SwiGlu {
            weights: WeightLayout::Separate,
            ..
        })
    );
    let s = |i: u64| seed.wrapping_add(i);
    let bufs = MoeBuffers {
        x: random_buffer(ctx, p.input, p.x_elems(), seed)?,
        w: random_buffer(ctx, p.input, if separate { one } else { p.w_elems() }, s(1))?,
        w3: separate
            .then(|| random_buffer(ctx, p.input, one, s(2)))
            .transpose()?,
        y: random_buffer(ctx, p.output, p.y_elems(), s(7))?,
        rows: DeviceBuffer::from_host(p.rows_array())?,
        route: p
            .swiglu
            .is_some_and(|sw| sw.routed)
            .then(|| random_buffer(ctx, DType::F32, p.x_rows(), s(3)))
            .transpose()?,
        sched: ctx.alloc(sched_bytes(p.experts))?,
    };
    // The fills on the context's stream and the rows' upload alike.
    super::moe_verify::settle()?;
    Ok(bufs)
}

/// Runs the request: the grouped GEMM, or the SwiGLU, the down projection and the whole FFN.
pub fn bench_moe(
    ctx: &Context,
    reg: &Registry,
    r: &MoeBenchRequest,
    opt: &BenchOptions,
) -> Result<Vec<Row>> {
    let (first, down) = problems(r);
    first.validate()?;
    if let Some(d) = &down {
        d.validate()?;
    }
    memory::plan_moe_bench(&first, down.as_ref(), &ctx.info)
        .ensure(ctx, &format!("the problem {}", first.label()))?;
    let seed = super::verify::fresh_seed();
    let run = Bench::new(ctx, opt)?;
    let (sms, o) = (ctx.info.sm_count, &ctx.overrides.moe);
    let b1 = random_buffers(ctx, &first, seed)?;
    let ops1 = b1.operands();
    check_operands(&first, &ops1)?;
    // the version that runs `p`, refusing it with its reason
    let pick = |p: &MoeProblem| -> Result<_> {
        let k = reg.moe_version(version_for(p, o))?;
        k.supports(p, &ctx.info).map_err(Error::refused(k.name()))?;
        Ok(k)
    };
    let Some(down) = down else {
        let grouped = pick(&first)?;
        let piece = Piece::of("grouped_gemm", &first, sms, o);
        return Ok(vec![time_piece(&run, piece, || {
            grouped.launch(ctx, &first, &ops1)
        })?]);
    };
    let (swiglu, grouped) = (pick(&first)?, pick(&down)?);
    // The down projection reads H, the SwiGLU's output, in place.
    let b2 = random_buffers(ctx, &down, seed.wrapping_add(11))?;
    let ops2 = MoeOperands {
        x: &b1.y,
        ..b2.operands()
    };
    check_operands(&down, &ops2)?;
    let up = Piece::of(swiglu.name(), &first, sms, o);
    let down_piece = Piece::of("down_proj", &down, sms, o);
    let ffn = Piece {
        name: "ffn".into(),
        problem: format!(
            "ffn E={} rows={} hidden={} ffn={} {}",
            first.experts,
            first.routed_rows(),
            r.k,
            r.n,
            r.dtype
        ),
        tile: format!("{} then {}", up.tile, down_piece.tile),
        flops: first.flops() + down.flops(),
        bytes: first.min_bytes() + down.min_bytes(),
    };
    Ok(vec![
        time_piece(&run, up, || swiglu.launch(ctx, &first, &ops1))?,
        time_piece(&run, down_piece, || grouped.launch(ctx, &down, &ops2))?,
        time_piece(&run, ffn, || {
            swiglu.launch(ctx, &first, &ops1)?;
            grouped.launch(ctx, &down, &ops2)
        })?,
    ])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ffn_is_swiglu_then_down() {
        let r = MoeBenchRequest {
            counts: vec![100, 0, 50],
            n: 3072,
            k: 4096,
            dtype: DType::Bf16,
            swiglu: Some((WeightLayout::Separate, false)),
        };
        let (a, b) = problems(&r);
        let b = b.unwrap();
        assert!(a.swiglu.is_some() && b.swiglu.is_none());
        assert_eq!((a.n, a.k, b.n, b.k), (3072, 4096, 4096, 3072));
        // H (the SwiGLU output) is exactly the down projection's X
        assert_eq!(a.y_elems(), b.x_elems());
        assert_eq!(a.flops() + b.flops(), 3.0 * 2.0 * 150.0 * 3072.0 * 4096.0);
        let plain = problems(&MoeBenchRequest { swiglu: None, ..r }).0;
        assert!(plain.swiglu.is_none());
    }
}
