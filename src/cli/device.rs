//! `kiln devices`, `kiln peak` and `kiln versions`: the GPUs present, a device's measured
//! ceilings, and the ladder of kernel versions per op.

use std::process::ExitCode;

use kiln::device;
use kiln::error::Result;
use kiln::harness::peak;
use kiln::report::Table;
use kiln::store::rows;
use serde_json::json;

use super::env::{finish, record, Env};

pub fn devices(env: &Env) -> Result<ExitCode> {
    let list = device::list()?;
    if env.json {
        env.print_json(&json!(list));
        return Ok(ExitCode::SUCCESS);
    }
    let mut t = Table::new(&[
        "#",
        "name",
        "cc",
        "SMs",
        "L2 MiB",
        "smem opt-in KiB",
        "SM MHz",
        "mem MHz",
        "bus bits",
        "memory GiB",
    ]);
    for d in &list {
        t.row(&[
            d.ordinal.to_string(),
            d.name.clone(),
            format!("{}.{}", d.compute_capability.0, d.compute_capability.1),
            d.sm_count.to_string(),
            format!("{:.0}", d.l2_bytes as f64 / 1048576.0),
            (d.smem_optin_bytes / 1024).to_string(),
            d.sm_clock_mhz.to_string(),
            d.mem_clock_mhz.to_string(),
            d.mem_bus_bits.to_string(),
            format!("{:.1}", d.total_mem_bytes as f64 / (1u64 << 30) as f64),
        ]);
    }
    print!("{}", t.render());
    Ok(ExitCode::SUCCESS)
}

pub fn peak(env: &Env) -> Result<ExitCode> {
    let ctx = env.context()?;
    let run = env.begin("peak", Some(&ctx.info))?;
    let vendor = env.registry.gemm_version("cublas")?;
    let pk = peak::measure(&ctx, vendor)?;
    record(&run, rows::peak_row(&pk))?;
    finish(&run, "ok")?;
    if env.json {
        env.print_json(&json!({"device": ctx.info, "peak": pk}));
    } else {
        println!(
            "{}: copy {:.2} TB/s (read+write), read {:.2} TB/s, 32 MiB read from a flushed L2 {:.1} us, vendor bf16 GEMM 8192^3 {:.0} TFLOPS",
            ctx.info.name, pk.copy_tbps, pk.read_tbps, pk.read_32mib_us, pk.gemm_bf16_tflops
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn versions(env: &Env) -> Result<ExitCode> {
    let mut t = Table::new(&["op", "version", "rung", "what it adds"]);
    for k in env.registry.gemm() {
        t.row(&["gemm", k.name(), &k.rung().to_string(), k.summary()]);
    }
    for k in env.registry.attention() {
        t.row(&["attention", k.name(), &k.rung().to_string(), k.summary()]);
    }
    for k in env.registry.moe() {
        t.row(&["moe", k.name(), "-", k.summary()]);
    }
    print!("{}", t.render());
    Ok(ExitCode::SUCCESS)
}
