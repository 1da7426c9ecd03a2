//! The command-line grammar (clap): raw arguments, turned into typed requests by the handlers.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "kiln", version, about = "Hopper GEMM kernels and the lab that builds them: JIT, verify, bench against cuBLAS, record.")]
pub struct Cli {
    /// Config file (default: ./kiln.toml if present).
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Print machine-readable JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// Do not record results in the store.
    #[arg(long, global = true)]
    pub no_store: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the GPUs and their properties.
    Devices,
    /// Measure the GPU's ceilings: copy bandwidth and the vendor's best bf16 GEMM.
    Peak,
    /// Compile every kernel variant (no GPU needed) and report registers, shared memory, spills.
    Check(CheckArgs),
    /// List the registered versions of every op.
    Versions,
    /// Verify versions against the float64 reference on a shape suite or one problem.
    Verify(VerifyArgs),
    /// Time versions against the vendor baseline in the same run.
    Bench(BenchArgs),
    /// The main job: check, verify and benchmark everything (compile check and CPU references only
    /// without a GPU).
    Suite(SuiteArgs),
    /// The JIT cache: show its path or clear it.
    Cache(CacheArgs),
    /// Show results kept in the store.
    Results(ResultsArgs),
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Target architecture.
    #[arg(long, default_value = "sm_90a")]
    pub arch: String,
    /// Only this version.
    #[arg(long)]
    pub version: Option<String>,
}

/// A problem given on the command line.
#[derive(Debug, Args, Clone)]
pub struct ProblemArgs {
    /// The op.
    #[arg(long, default_value = "gemm")]
    pub op: String,
    /// Shape MxNxK (or one number for a cube).
    #[arg(long)]
    pub shape: Option<String>,
    /// Layout of A and B: RC, CR, RR, CC.
    #[arg(long, default_value = "RC")]
    pub layout: String,
    /// Input dtype: bf16 or f16.
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// Output dtype: bf16, f16 or f32 (default: the input dtype).
    #[arg(long)]
    pub out: Option<String>,
    #[arg(long, default_value_t = 1.0)]
    pub alpha: f32,
    #[arg(long, default_value_t = 0.0)]
    pub beta: f32,
    /// Leading dimensions (default: packed).
    #[arg(long)]
    pub lda: Option<usize>,
    #[arg(long)]
    pub ldb: Option<usize>,
    #[arg(long)]
    pub ldc: Option<usize>,
}

#[derive(Debug, Args)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub problem: ProblemArgs,
    /// Versions to verify (default: all, the vendor included).
    #[arg(long = "version")]
    pub versions: Vec<String>,
    /// Shape suite when no --shape is given: quick or full.
    #[arg(long, default_value = "full")]
    pub suite: String,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub problem: ProblemArgs,
    /// Versions to time (default: the dispatcher's choice); the vendor is always timed too.
    #[arg(long = "version")]
    pub versions: Vec<String>,
    /// Time every version.
    #[arg(long)]
    pub all: bool,
    #[arg(long)]
    pub reps: Option<usize>,
    #[arg(long)]
    pub warmup: Option<usize>,
    /// Do not flush L2 between repetitions.
    #[arg(long)]
    pub no_flush: bool,
}

#[derive(Debug, Args)]
pub struct SuiteArgs {
    /// Verification suite: quick or full.
    #[arg(long, default_value = "full")]
    pub verify: String,
    /// Write the JSON results to this file as well.
    #[arg(long)]
    pub save: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct CacheArgs {
    /// `path` or `clear`.
    pub action: String,
}

#[derive(Debug, Args)]
pub struct ResultsArgs {
    #[arg(long)]
    pub op: Option<String>,
    #[arg(long)]
    pub version: Option<String>,
    #[arg(long, default_value_t = 20)]
    pub limit: usize,
}
