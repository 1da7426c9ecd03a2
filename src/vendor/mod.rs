//! Vendor baselines every kiln kernel is measured against in the same run.

pub mod cublas;
pub mod cublaslt_fp8;
