//! The harness: the compile check, verification against float64 references on the shape
//! suites, and benchmarking against the vendor in the same run.

pub mod attention;
pub mod bench;
pub mod bench_versions;
pub mod check;
pub mod cpu;
pub mod device_data;
pub mod draw;
pub mod fp4;
pub mod fp4_bench;
pub mod fp4_seeds;
pub mod fp8;
pub mod fp8_bench;
pub mod fp8_moe;
pub mod fp8_moe_bench;
pub mod fp8_moe_judge;
pub mod fuzz;
pub mod memory;
pub mod moe_bench;
pub mod moe_fp4;
pub mod moe_fp4_bench;
pub mod moe_fp4_data;
pub mod moe_layer;
pub mod moe_layer_bench;
pub mod moe_layer_verify;
pub mod moe_shapes;
pub mod moe_verify;
pub mod moe_w4a8;
pub mod moe_w4a8_bench;
pub mod outcome;
pub mod peak;
pub mod pointwise;
pub mod random_set;
pub mod shapes;
pub mod suite;
pub mod verify;
