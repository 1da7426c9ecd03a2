//! Two `kiln::Kiln` handles in one process, one per GPU (two on GPU 0 where there is one), each
//! on its own thread running the GEMM, attention and MoE examples N times at the same time, every
//! result checked against kiln's float64 reference: the handles share nothing they write.
//! `cargo run --release --example two_gpus [ITERATIONS]` (default 10)

// The single-GPU examples' problems and checks, compiled in as modules (their `main`s unused);
// each brings its own `mod common`, hence the same file loaded three times.
#![allow(clippy::duplicate_mod)]

#[allow(dead_code)]
#[path = "attention.rs"]
mod attention;
#[allow(dead_code)]
#[path = "gemm.rs"]
mod gemm;
#[allow(dead_code)]
#[path = "moe.rs"]
mod moe;

use std::process::ExitCode;
use std::thread;

use kiln::{Error, Kiln};

const DEFAULT_ITERATIONS: usize = 10;

/// One op's checks on one handle: what ran and each output's errors against its bound.
type Checked = (String, Vec<(&'static str, f64, f64)>);

/// One op's check: runs it on a handle and checks the result.
type CheckFn = fn(&Kiln) -> kiln::Result<Checked>;

/// The three examples' checks, by name.
const OPS: [(&str, CheckFn); 3] = [
    ("gemm", |k| gemm::run(k).map(|c| (c.what, c.errors))),
    ("attention", |k| {
        attention::run(k).map(|c| (c.what, c.errors))
    }),
    ("moe", |k| moe::run(k).map(|c| (c.what, c.errors))),
];

/// One table row: a handle's op output over every iteration.
struct Row {
    gpu: usize,
    op: &'static str,
    output: &'static str,
    iterations: usize,
    max_error: f64,
    bound: f64,
}

/// Runs every op `iterations` times on `kiln`, keeping each output's largest error.
fn worker(kiln: &Kiln, iterations: usize) -> kiln::Result<Vec<Row>> {
    let mut rows: Vec<Row> = Vec::new();
    for _ in 0..iterations {
        for (op, check) in OPS {
            let (_, errors) = check(kiln)?;
            for (output, error, bound) in errors {
                // NaN compares false: keep it, so a NaN error fails the row.
                match rows.iter_mut().find(|r| r.op == op && r.output == output) {
                    Some(r) => {
                        if error > r.max_error || error.is_nan() {
                            r.max_error = error;
                        }
                        r.iterations += 1;
                    }
                    None => rows.push(Row {
                        gpu: kiln.ordinal(),
                        op,
                        output,
                        iterations: 1,
                        max_error: error,
                        bound,
                    }),
                }
            }
        }
    }
    Ok(rows)
}

fn iterations() -> Result<usize, String> {
    match std::env::args().nth(1) {
        None => Ok(DEFAULT_ITERATIONS),
        Some(a) => match a.parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!(
                "two_gpus: `{a}` is not a number of iterations; give a positive integer (default {DEFAULT_ITERATIONS})"
            )),
        },
    }
}

fn main() -> ExitCode {
    let iterations = match iterations() {
        Ok(n) => n,
        Err(e) => {
            println!("{e}");
            return ExitCode::from(2);
        }
    };
    let count = match kiln::device::list() {
        Ok(devices) => devices.len(),
        Err(e) => {
            println!("two_gpus: {e}");
            return ExitCode::from(e.exit_code());
        }
    };
    let ordinals: Vec<usize> = if count >= 2 {
        (0..count).collect()
    } else {
        println!("two_gpus: one GPU visible: two handles on GPU 0, one thread each");
        vec![0, 0]
    };
    let mut handles = Vec::new();
    for &o in &ordinals {
        match Kiln::open(o) {
            Ok(k) => handles.push(k),
            Err(e) => {
                println!("two_gpus: opening GPU {o}: {e}");
                return ExitCode::from(e.exit_code());
            }
        }
    }
    println!(
        "two_gpus: {} handles ({}), {iterations} iterations of gemm, attention and moe each, at the same time",
        handles.len(),
        handles
            .iter()
            .map(|k| format!("GPU {} {}", k.ordinal(), k.device().name))
            .collect::<Vec<_>>()
            .join(", ")
    );
    // `Kiln` is Send + Sync: each thread borrows its own handle; nothing else crosses threads.
    let results: Vec<(usize, thread::Result<kiln::Result<Vec<Row>>>)> = thread::scope(|s| {
        let joins: Vec<_> = handles
            .iter()
            .map(|k| (k.ordinal(), s.spawn(move || worker(k, iterations))))
            .collect();
        joins.into_iter().map(|(o, j)| (o, j.join())).collect()
    });

    let mut code = 0u8;
    println!(
        "{:>6} {:>3}  {:<9} {:<36} {:>5} {:>10} {:>8}  ok",
        "handle", "GPU", "op", "output", "iters", "max error", "bound"
    );
    for (thread_index, (ordinal, result)) in results.into_iter().enumerate() {
        match result {
            Ok(Ok(rows)) => {
                for r in rows {
                    let ok = r.max_error <= r.bound;
                    if !ok {
                        code = code.max(7);
                    }
                    println!(
                        "{:>6} {:>3}  {:<9} {:<36} {:>5} {:>10.2e} {:>8.0e}  {}",
                        thread_index,
                        r.gpu,
                        r.op,
                        r.output,
                        r.iterations,
                        r.max_error,
                        r.bound,
                        if ok { "ok" } else { "FAILED" }
                    );
                }
            }
            Ok(Err(e)) => {
                println!("{thread_index:>6} {ordinal:>3}  failed: {e}");
                code = code.max(failure_code(&e));
            }
            Err(_) => {
                println!("{thread_index:>6} {ordinal:>3}  the thread panicked");
                code = code.max(1);
            }
        }
    }
    println!("two_gpus: {}", if code == 0 { "ok" } else { "FAILED" });
    ExitCode::from(code)
}

/// The exit code of a thread's error (never 0).
fn failure_code(e: &Error) -> u8 {
    e.exit_code().max(1)
}
