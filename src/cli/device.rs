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
    for k in env.registry.attention_backward() {
        t.row(&[
            "attention backward",
            k.name(),
            &k.rung().to_string(),
            k.summary(),
        ]);
    }
    for k in env.registry.moe() {
        t.row(&["moe", k.name(), "-", k.summary()]);
    }
    for (op, name, what) in OUTSIDE_REGISTRY {
        t.row(&[op, name, "-", what]);
    }
    print!("{}", t.render());
    Ok(ExitCode::SUCCESS)
}

/// The kernel families a user can pick that live outside the registry's traits (each with its
/// own command or API call): FP8, 4-bit, decode.
const OUTSIDE_REGISTRY: [(&str, &str, &str); 10] = [
    (
        "fp8 gemm",
        kiln::ops::fp8::gemm::NAME,
        "scaled FP8 GEMM (e4m3/e5m2; tensor, row or DeepSeek 1x128/128x128 block scales): \
         persistent warp-specialised WGMMA + TMA, fp32 promotion every 128 of K (pipelined or \
         drained), 128- or 64-row tiles 120-256 wide, block scales loaded by the consumers or \
         carried with the stage through shared memory, split-K through slots or atomic sums; \
         `kiln fp8`, `--dtype e4m3`, KILN_FP8_RULE",
    ),
    (
        "fp8 quantise",
        "fp8_quant",
        "bf16/f16/f32 to e4m3 or e5m2 per tensor, row, 1x128 or 128x128, fp32 or UE8M0 scales",
    ),
    (
        "moe fp8",
        kiln::ops::moe::fp8_grouped::NAME,
        "block-scaled FP8 grouped GEMM over experts (contiguous or masked rows): the FP8 GEMM's \
         promoted mainloop with the grouped scheduler",
    ),
    (
        "moe fp8",
        kiln::ops::moe::fp8_swiglu::NAME,
        "fused FP8 SwiGLU over experts: 64x128 [gate | up] tiles, bf16/f32 or e4m3 output \
         quantised in the epilogue",
    ),
    (
        "fp4",
        kiln::ops::fp4::nvfp4_gemv::NAME,
        "NVFP4 GEMV for 1-16 bf16 rows against 4-bit weights (e2m1 + e4m3 scales per 16)",
    ),
    (
        "moe fp4",
        kiln::ops::moe::fp4::kernel::NAME,
        "grouped GEMM and fused SwiGLU with prepacked NVFP4/MXFP4 weights as wgmma's register \
         operand, tiles from a GPU counter",
    ),
    (
        "attention decode",
        "decode_paged",
        "flash-decoding over a paged KV cache: one block per (sequence, KV head, split), then \
         decode_combine",
    ),
    (
        "attention decode",
        "kv_append",
        "appends new tokens' K and V into the paged cache",
    ),
    (
        "pointwise",
        kiln::ops::pointwise::rmsnorm::NAME,
        "RMSNorm of bf16/f16 rows, f32 statistics, the residual add fused in front; a row in \
         registers (16-byte accesses) or read twice (any layout)",
    ),
    (
        "pointwise",
        kiln::ops::pointwise::rope::NAME,
        "the rotary embedding in place on q and k in one launch (rotate_half or interleaved, \
         partial rotary dims, cos/sin [B, S, R] or [S, R])",
    ),
];
