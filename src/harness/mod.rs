//! The harness: the compile check, verification against float64 references on the shape
//! suites, and benchmarking against the vendor in the same run.

pub mod bench;
pub mod check;
pub mod cpu;
pub mod peak;
pub mod shapes;
pub mod suite;
pub mod verify;
