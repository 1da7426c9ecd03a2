//! A GEMM on cudarc buffers through `kiln::Kiln`: x [M, K] times a weight stored [N, K] (read
//! through its transposed view, as a linear layer does), once into a row-major f32 output and
//! once into a column-major bf16 one with alpha and beta, each checked against kiln's float64
//! reference. `cargo run --release --example gemm`

mod common;

use std::process::ExitCode;

use common::{cuda, random_bf16, rel_error, Check};
use half::bf16;
use kiln::harness::verify::bound;
use kiln::ops::gemm::{DType as OpDType, GemmProblem, Layout};
use kiln::reference::gemm::gemm_rows;
use kiln::{GemmOptions, Kiln, TensorMut, TensorRef};

const M: usize = 300;
const N: usize = 384;
const K: usize = 512;

pub fn run(kiln: &Kiln) -> kiln::Result<Check> {
    let stream = kiln.cuda().default_stream();
    let (x, x64) = random_bf16(M * K, 1);
    let (w, w64) = random_bf16(N * K, 2);
    let (c0, c064) = random_bf16(M * N, 3);
    let dx = stream.clone_htod(&x).map_err(cuda("uploading x"))?;
    let dw = stream.clone_htod(&w).map_err(cuda("uploading w"))?;
    let a = TensorRef::from_slice(&dx, &[M, K])?;
    let b = TensorRef::from_slice(&dw, &[N, K])?.t();

    // y = x @ wᵀ, f32, row-major.
    let mut dy = stream
        .alloc_zeros::<f32>(M * N)
        .map_err(cuda("allocating y"))?;
    kiln.gemm(
        &stream,
        &a,
        &b,
        &mut TensorMut::from_slice(&mut dy, &[M, N])?,
        &GemmOptions::default(),
    )?;

    // z = 0.5 · x @ wᵀ + 2 · z, bf16, stored column-major (z's memory is [N, M]).
    let mut dz = stream
        .clone_htod(&transpose(&c0, M, N))
        .map_err(cuda("uploading z"))?;
    let opts = GemmOptions {
        alpha: 0.5,
        beta: 2.0,
        version: None,
    };
    kiln.gemm(
        &stream,
        &a,
        &b,
        &mut TensorMut::from_slice(&mut dz, &[N, M])?.t(),
        &opts,
    )?;

    let y = stream.clone_dtoh(&dy).map_err(cuda("downloading y"))?;
    let z = stream.clone_dtoh(&dz).map_err(cuda("downloading z"))?;

    // The reference: A row-major [M, K], B = wᵀ column-major (ld K), C row-major [M, N].
    let p = GemmProblem::new(M, N, K, Layout::RC, OpDType::Bf16, OpDType::F32);
    let rows: Vec<usize> = (0..M).collect();
    let want = gemm_rows(&p, &x64, &w64, None, &rows);
    let y_err = rel_error(
        (0..M)
            .flat_map(|m| (0..N).map(move |n| (m, n)))
            .map(|(m, n)| (y[m * N + n] as f64, want[m][n])),
    );
    let pz = GemmProblem {
        alpha: 0.5,
        beta: 2.0,
        output: OpDType::Bf16,
        ..p
    };
    let want = gemm_rows(&pz, &x64, &w64, Some(&c064), &rows);
    let z_err = rel_error(
        (0..M)
            .flat_map(|m| (0..N).map(move |n| (m, n)))
            .map(|(m, n)| (z[n * M + m].to_f64(), want[m][n])),
    );
    Ok(Check {
        what: format!("{M}x{N}x{K} bf16 (x @ wᵀ)"),
        errors: vec![
            ("f32 y relative error", y_err, bound(OpDType::F32)),
            (
                "column-major bf16 z relative error",
                z_err,
                bound(OpDType::Bf16),
            ),
        ],
    })
}

/// `v` [rows, cols] row-major as [cols, rows] row-major.
fn transpose(v: &[bf16], rows: usize, cols: usize) -> Vec<bf16> {
    (0..cols)
        .flat_map(|c| (0..rows).map(move |r| v[r * cols + c]))
        .collect()
}

fn main() -> ExitCode {
    common::main("gemm", run)
}
