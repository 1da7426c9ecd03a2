//! The attention harness: verification against the float64 reference, timing, and the shape
//! suites with the boundaries (lengths 1, 17, 127, 128, 129, 1000; batch 1; one head; Sq ≠ Skv;
//! GQA/MQA; every head dim; causal and not; both layouts; both dtypes); the backward's likewise.

pub mod backward_bench;
pub mod backward_shapes;
pub mod backward_varlen;
pub mod backward_verify;
pub mod bench;
pub mod decode;
pub mod decode_check;
pub mod shapes;
pub mod varlen;
pub mod varlen_bad;
pub mod verify;
