//! The harness: the compile check, verification against float64 references, and benchmarking
//! against the vendor in the same run.

pub mod check;
