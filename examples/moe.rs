//! An MoE expert layer on cudarc buffers through `kiln::Kiln`: tokens sorted by expert (one
//! expert empty), the fused SwiGLU over an interleaved W13 scaled by each row's routing weight,
//! then the down projection as a grouped GEMM, both precompiled first (as before a CUDA-graph
//! capture). Each stage is checked against kiln's float64 reference (the down projection on
//! the SwiGLU output kiln computed). `cargo run --release --example moe`

mod common;

use std::process::ExitCode;

use common::{cuda, random_bf16, rel_error, Check};
use half::bf16;
use kiln::harness::verify::bound;
use kiln::ops::gemm::DType as OpDType;
use kiln::ops::moe::{uneven_counts, MoeProblem, WeightLayout};
use kiln::reference::data::HostData;
use kiln::reference::moe::moe_rows;
use kiln::{DType, Kiln, MoeRows, Problem, RawTensor, SwigluWeights, TensorMut, TensorRef};

/// Routed rows (tokens x top-k), experts, hidden size, intermediate size.
const ROWS: usize = 400;
const E: usize = 8;
const H: usize = 512;
const I: usize = 256;

pub fn run(kiln: &Kiln) -> kiln::Result<Check> {
    let stream = kiln.cuda().default_stream();
    let mut counts = uneven_counts(ROWS, E, 7);
    counts[4] += counts[3];
    counts[3] = 0;
    let mut offsets = vec![0i32];
    for c in &counts {
        offsets.push(offsets[offsets.len() - 1] + *c as i32);
    }
    let (x, x64) = random_bf16(ROWS * H, 21);
    let (w13, w13_64) = random_bf16(E * 2 * I * H, 22);
    let (w2, w2_64) = random_bf16(E * H * I, 23);
    let route64: Vec<f64> = HostData::random(OpDType::F32, ROWS, 24)
        .to_f64()
        .iter()
        .map(|r| r.abs())
        .collect();
    let route: Vec<f32> = route64.iter().map(|&r| r as f32).collect();

    let dx = stream.clone_htod(&x).map_err(cuda("uploading x"))?;
    let dw13 = stream.clone_htod(&w13).map_err(cuda("uploading w13"))?;
    let dw2 = stream.clone_htod(&w2).map_err(cuda("uploading w2"))?;
    let droute = stream
        .clone_htod(&route)
        .map_err(cuda("uploading routing"))?;
    let doff = stream
        .clone_htod(&offsets)
        .map_err(cuda("uploading offsets"))?;
    let mut dh = stream
        .alloc_zeros::<bf16>(ROWS * I)
        .map_err(cuda("allocating h"))?;

    let tx = TensorRef::from_slice(&dx, &[ROWS, H])?;
    let tw13 = SwigluWeights::Interleaved(TensorRef::from_slice(&dw13, &[E, 2 * I, H])?);
    let tw2 = TensorRef::from_slice(&dw2, &[E, H, I])?;
    let troute = TensorRef::from_slice(&droute, &[ROWS])?;
    let toff = TensorRef::from_slice(&doff, &[E + 1])?;
    // The host copy of the offsets is checked and picks the tiles; without it (the down
    // projection) the tiles are chosen for an even split and nothing is read back.
    let with_host = MoeRows::Offsets {
        offsets: toff,
        host: Some(&offsets),
    };
    let device_only = MoeRows::Offsets {
        offsets: toff,
        host: None,
    };
    let mut th = TensorMut::from_slice(&mut dh, &[ROWS, I])?;
    // Before a graph capture: compile and size everything both calls need. The down
    // projection's input and output are described, not allocated (h is th's memory).
    let loaded = kiln.precompile(&[
        Problem::swiglu(&tx, &tw13, &with_host, Some(&troute), &th),
        Problem::GroupedGemm {
            x: RawTensor::contiguous(0, DType::Bf16, &[ROWS, I], 0),
            w: tw2.info().to_raw(),
            rows: device_only.map(|t| t.info().to_raw()),
            y: RawTensor::contiguous(0, DType::F32, &[ROWS, H], 0),
        },
    ])?;
    kiln.swiglu(&stream, &tx, tw13, with_host, Some(&troute), &mut th)?;
    let th = TensorRef::from_slice(&dh, &[ROWS, I])?;
    let dy = kiln.grouped_gemm_alloc::<f32>(&stream, &th, &tw2, device_only)?;

    let h = stream.clone_dtoh(&dh).map_err(cuda("downloading h"))?;
    let y = stream.clone_dtoh(&dy).map_err(cuda("downloading y"))?;

    let rows: Vec<usize> = (0..ROWS).collect();
    let up = MoeProblem::contiguous(&counts, I, H, OpDType::Bf16, OpDType::Bf16)
        .with_swiglu(WeightLayout::Interleaved, true);
    let want_h = moe_rows(&up, &x64, &w13_64, None, Some(&route64), &rows);
    let h64: Vec<f64> = h.iter().map(|v| v.to_f64()).collect();
    let down = MoeProblem::contiguous(&counts, H, I, OpDType::Bf16, OpDType::F32);
    let want_y = moe_rows(&down, &h64, &w2_64, None, None, &rows);
    let pairs = |got: &[f64], want: &[Vec<f64>], n: usize| {
        (0..ROWS)
            .flat_map(move |r| (0..n).map(move |c| (r, c)))
            .map(|(r, c)| (got[r * n + c], want[r][c]))
            .collect::<Vec<_>>()
    };
    let y64: Vec<f64> = y.iter().map(|&v| v as f64).collect();
    Ok(Check {
        what: format!("E={E} rows={ROWS} H={H} I={I} bf16 ({loaded} kernels precompiled)"),
        errors: vec![
            (
                "swiglu h relative error",
                rel_error(pairs(&h64, &want_h, I).into_iter()),
                bound(OpDType::Bf16),
            ),
            (
                "down-projection y relative error",
                rel_error(pairs(&y64, &want_y, H).into_iter()),
                bound(OpDType::F32),
            ),
        ],
    })
}

fn main() -> ExitCode {
    common::main("moe", run)
}
