//! What users read of each family's bench, pinned from fixed synthetic rows (no GPU): the table
//! a bench prints without --json and the JSON of its rows, each compared with the text in
//! `tests/fixtures/bench-pins/`, written by the code before the one bench row (2026-11-29,
//! f6e1f15). Code that moves a family onto another row type must leave these texts as they are.
//! `BLESS_PINS=1` writes the files instead of comparing (only for a new pin, never to pass).

use std::path::PathBuf;

use kiln::harness::bench::{Row, Summary, Times};
use kiln::harness::moe_fp4_bench::Fp4BenchRequest;
use kiln::ops::gemm::DType;
use kiln::ops::moe::fp4::Fp4Format;
use serde_json::json;

/// Compares `text` with the pinned file `name` (or writes it under `BLESS_PINS`).
fn pinned(name: &str, text: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/bench-pins")
        .join(name);
    if std::env::var_os("BLESS_PINS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (BLESS_PINS=1 writes a new pin)", path.display()));
    assert_eq!(text, want, "{name} changed");
}

fn json_text(v: serde_json::Value) -> String {
    serde_json::to_string_pretty(&v).unwrap() + "\n"
}

/// Two kiln configs beside cuBLASLt, then a problem cuBLASLt refused.
fn fp8_rows() -> Vec<Row> {
    let row = |version: &str, problem: &str, config: Option<&str>, ms: f64| {
        let s = Summary {
            median_ms: ms,
            min_ms: ms * 0.99,
            max_ms: ms * 1.031,
            reps: 30,
        };
        Row::timed(&s, Times::Ms)
            .with("version", version)
            .with("problem", problem)
            .with("m", 4096)
            .with("n", 7168)
            .with("k", 16384)
            .with("scale", "block")
            .with("promote", true)
            .with("config", config)
            .with(
                "tflops",
                2.0 * 4096.0 * 7168.0 * 16384.0 / (ms * 1e-3) / 1e12,
            )
            .with("speedup_vs_cublaslt", None::<f64>)
            .with("rel_diff_vs_cublaslt", None::<f64>)
            .with("vendor_note", None::<String>)
    };
    let p = "4096x7168x16384 e4m3 block -> bf16";
    let a = row("fp8_wgmma", p, Some("bn128 s1 reduce none"), 0.7312)
        .with("speedup_vs_cublaslt", 0.7651 / 0.7312)
        .with("rel_diff_vs_cublaslt", 3.25e-3);
    let b = row("fp8_wgmma", p, Some("bn256 s1 reduce none"), 0.7499)
        .with("speedup_vs_cublaslt", 0.7651 / 0.7499)
        .with("rel_diff_vs_cublaslt", 3.31e-3);
    let v = row("cublaslt", p, None, 0.7651).with(
        "vendor_algo",
        "algo 66, tile 20, stages 17, splitK 1, swizzle 0, cluster 2; fastest of 2 timed: 765.1*, 781.2 us",
    );
    let lone = row(
        "fp8_wgmma",
        "4097x7168x16384 e4m3 block -> bf16",
        Some("bn128"),
        0.9,
    )
    .with("vendor_note", "cuBLASLt has no algorithm for this problem");
    vec![a, b, v, lone]
}

#[test]
fn fp8_bench_table_and_json_are_pinned() {
    let rows = fp8_rows();
    pinned(
        "fp8-bench.txt",
        &super::fp8::bench_text(&rows, "NVIDIA H200"),
    );
    pinned("fp8-bench.json", &json_text(json!(rows)));
    pinned(
        "bench-e4m3.txt",
        &super::fp8_gemm::timings_text(&rows, "NVIDIA H200"),
    );
    pinned("fp8-ladder-rung.txt", &super::fp8_gemm::rung_text(&rows));
    let lines: Vec<String> = rows.iter().map(super::fp8::progress_line).collect();
    pinned("fp8-bench-progress.txt", &(lines.join("\n") + "\n"));
}

#[test]
fn fp8_grouped_bench_table_and_json_are_pinned() {
    let s = Summary {
        median_ms: 0.2412,
        min_ms: 0.2398,
        max_ms: 0.2533,
        reps: 30,
    };
    let t = Row::timed(&s, Times::Ms)
        .with("version", "fp8_swiglu")
        .with("problem", "E8 x256 N4096 K7168 swiglu")
        .with("tflops", 913.37)
        .with("tbps", 1.874)
        .with("copy_tbps", 4.218)
        .with("vs_cublaslt_loop", None::<f64>)
        .with("rel_diff_vs_cublaslt_loop", None::<f64>)
        .with(
            "vendor_note",
            "cuBLASLt has no fused SwiGLU: its loop is timed for the plain grouped GEMM",
        );
    pinned(
        "fp8-grouped-bench.txt",
        &super::fp8_moe::bench_text(std::slice::from_ref(&t), "NVIDIA H200"),
    );
    pinned("fp8-grouped-bench.json", &json_text(json!([t])));
    // the plain grouped GEMM beside cuBLASLt's per-expert loop of the same work
    let row = |version: &str, ms: f64, tflops: f64| {
        let s = Summary {
            median_ms: ms,
            min_ms: ms * 0.99,
            max_ms: ms * 1.02,
            reps: 20,
        };
        Row::timed(&s, Times::Ms)
            .with("version", version)
            .with("problem", "E4 x8192 N4096 K7168")
            .with("tflops", tflops)
            .with("tbps", 0.62)
            .with("copy_tbps", 4.218)
            .with("vs_cublaslt_loop", None::<f64>)
            .with("rel_diff_vs_cublaslt_loop", None::<f64>)
            .with("vendor_note", None::<String>)
    };
    let mut kiln = row("fp8_grouped", 0.7301, 1317.6);
    kiln.set("vs_cublaslt_loop", 1.1123);
    kiln.set("rel_diff_vs_cublaslt_loop", 2.1e-5);
    let rows = [kiln, row("cublaslt_loop", 0.8121, 1184.6)];
    pinned(
        "fp8-grouped-loop-bench.txt",
        &super::fp8_moe::bench_text(&rows, "NVIDIA H200"),
    );
}

#[test]
fn fp4_gemv_bench_table_and_json_are_pinned() {
    let row = |version: &str, us: f64, vs: Option<f64>, of_read: Option<f64>| {
        Row::default()
            .with("median_us", us)
            .with("min_us", us * 0.97)
            .with("max_us", us * 1.2)
            .with("version", version)
            .with("problem", "1x7168x16384 nvfp4 -> bf16")
            .with("chain", 1)
            .with("gbps", 66.06e6 / (us * 1e-6) / 1e9)
            .with("of_copy_ceiling", 66.06e6 / (us * 1e-6) / 4.22e12)
            .with("of_read_ceiling", of_read)
            .with("speedup_vs_cublas", vs)
    };
    let rows = vec![
        row("nvfp4_gemv", 21.37, Some(71.2 / 21.37), Some(17.9 / 21.37)),
        row("read", 17.9, None, Some(1.0)),
        row("cublas_bf16", 71.2, None, None),
    ];
    pinned(
        "fp4-gemv-bench.txt",
        &super::fp4::gemv_text(&rows, "NVIDIA H200"),
    );
    pinned("fp4-gemv-bench.json", &json_text(json!(rows)));
}

fn moe_rows() -> Vec<Row> {
    let row = |piece: &str, tile: &str, ms: f64| {
        let s = Summary {
            median_ms: ms,
            min_ms: ms - 0.0012,
            max_ms: ms + 0.0105,
            reps: 30,
        };
        Row::timed(&s, Times::Ms)
            .with("piece", piece)
            .with("problem", "E8 x[512, 0, 3, 700] N4096 K7168")
            .with("tile", tile)
            .with("tflops", 650.123 * 0.1 / ms)
            .with("gbps", 2934.7 * 0.1 / ms)
    };
    vec![
        row("swiglu_dual", "128x128", 0.1042),
        row("down_proj", "128x256", 0.0513),
        row("ffn", "-", 0.1555),
    ]
}

#[test]
fn moe_bench_table_and_json_are_pinned() {
    let rows = moe_rows();
    pinned(
        "moe-bench.txt",
        &super::moe::bench_text(&[512, 0, 3, 700], &rows),
    );
    pinned("moe-bench.json", &json_text(json!(rows)));
    let mut layer = rows;
    layer[0].set("piece", "route");
    layer[1].set("piece", "experts");
    layer[2].set("piece", "layer");
    pinned("moe-layer-bench.txt", &super::moe_layer::bench_text(&layer));
    pinned("moe-layer-bench.json", &json_text(json!(layer)));
}

#[test]
fn moe_4bit_bench_table_and_json_are_pinned() {
    let r = Fp4BenchRequest {
        counts: vec![512, 0, 3, 700],
        n: 4096,
        k: 7168,
        dtype: DType::Bf16,
        format: Fp4Format::Nvfp4,
        swiglu: None,
    };
    let row = |kernel: &str, us: f64, bytes: f64| {
        Row::default()
            .with("kernel", kernel)
            .with("problem", "E4 x1215 N4096 K7168")
            .with("tile", "128x128")
            .with("median_us", us)
            .with("min_us", us * 0.98)
            .with("max_us", us * 1.07)
            .with("bytes", bytes)
            .with("gbps", bytes / (us * 1e-6) / 1e9)
            .with("copy_fraction", bytes / (us * 1e-6) / 4.22e12)
            .with("speedup", 61.3 / us)
    };
    let rows = vec![
        row("bf16 grouped_gemm", 61.3, 1.88e8),
        row("nvfp4 fp4_experts", 25.04, 5.5e7),
    ];
    pinned("moe-4bit-bench.txt", &super::moe_fp4::bench_text(&r, &rows));
    pinned("moe-4bit-bench.json", &json_text(json!(rows)));
}

#[test]
fn pointwise_bench_table_and_json_are_pinned() {
    let row = |problem: &str, us: f64, bytes: usize| {
        Row::default()
            .with("problem", problem)
            .with("median_us", us)
            .with("min_us", us - 0.4)
            .with("max_us", us + 2.25)
            .with("bytes", bytes)
            .with("tb_per_s", bytes as f64 / (us * 1e-6) / 1e12)
    };
    let timings = vec![
        row(
            "rmsnorm 8192x4096 bf16 +residual",
            41.3,
            8192 * 4096 * 2 * 4,
        ),
        row("rope b2 s4096 hq32 hk8 d128 bf16", 33.75, 42_991_616),
    ];
    pinned(
        "pointwise-bench.txt",
        &super::pointwise::bench_text(&timings),
    );
    pinned("pointwise-bench.json", &json_text(json!(timings)));
}

#[test]
fn attention_bench_table_and_json_are_pinned() {
    use kiln::harness::bench::kernel_row;
    use kiln::ops::attention::AttentionProblem;
    let mut p = AttentionProblem::new(2, 16, 8192, 128);
    p.causal = true;
    let times = |ms: f64| vec![ms + 0.01, ms, ms - 0.002, ms + 0.03, ms];
    let flops = 4.0 * 2.0 * 16.0 * 8192.0 * 8192.0 * 128.0 / 2.0;
    let timings = vec![
        kernel_row("fa3_wgmma", p, flops, times(1.2031)),
        kernel_row("composed", p, flops, times(9.875)),
    ];
    let header = "b2 h16 s8192 d128 causal (8.796e12 FLOPs over unmasked pairs) on NVIDIA H200";
    let text = super::attention::versions_text(header, &timings, Some("composed"));
    pinned("attention-bench.txt", &text);
    let text = super::attention::versions_text(header, &timings, None);
    pinned("attention-bench-no-base.txt", &text);
    pinned("attention-bench.json", &json_text(json!(timings)));
}

/// Pinned from the typed `DecodeTiming` (2026-11-30, on 53c7c5d), before decode's bench moved
/// onto the one row.
#[test]
fn attention_decode_bench_table_and_json_are_pinned() {
    use kiln::harness::attention::decode::{decode_row, DecodeSpec};
    let spec = DecodeSpec {
        batch: 64,
        heads_q: 32,
        heads_kv: 8,
        head_dim: 128,
        seqlen_q: 1,
        page_size: 16,
        context: 8192,
        random_lengths: false,
        causal: false,
        dtype: DType::Bf16,
        append: 0,
        dense: false,
        left_pad: false,
    };
    let times = vec![0.2291, 0.2287, 0.2302, 0.2289, 0.2311];
    let t = decode_row(&spec, 4, times, 64 * 8192 * 8 * 128 * 2 * 2 / 4);
    let text = super::attention_decode::decode_text(&spec.label(), "NVIDIA H200", &t, 4.12);
    pinned("attention-decode-bench.txt", &text);
    let json = super::attention_decode::decode_json(&t, 4.12);
    pinned("attention-decode-bench.json", &json_text(json));
    let row = kiln::store::rows::decode_bench_row(&t, 4.12);
    pinned("attention-decode-bench-store.json", &json_text(json!(row)));
}
