//! `kiln moe`'s grammar: its subcommands and their flags, the 4-bit experts' pair (`--weights`,
//! `--act`) declared once for `verify` and `bench`.

use std::path::PathBuf;

use clap::{Args, Subcommand};

use super::args::{ArchArgs, TimingArgs};

#[derive(Debug, Args)]
pub struct MoeCmdArgs {
    #[command(subcommand)]
    pub action: MoeAction,
}

#[derive(Debug, Subcommand)]
pub enum MoeAction {
    /// Verify the MoE kernels against the float64 reference on one problem (--counts, --n, --k)
    /// or a shape suite (empty experts, one expert, 256 experts, ragged counts, masked layout
    /// replayed from a CUDA graph).
    Verify(MoeVerifyArgs),
    /// Time the grouped GEMM, or with --swiglu the expert FFN: fused gate/up, down projection,
    /// and both together.
    Bench(MoeBenchArgs),
    /// Compile every MoE kernel variant (no GPU needed): registers, shared memory, spills.
    Check(ArchArgs),
    /// Prepack 4-bit expert weights (NVFP4, MXFP4) into the layout the 4-bit kernels load, and
    /// check that every weight dequantises as the standard layout says (no GPU needed).
    Prepack(MoePrepackArgs),
}

#[derive(Debug, Args)]
pub struct MoePrepackArgs {
    /// nvfp4 or mxfp4.
    #[arg(long, default_value = "nvfp4")]
    pub weights: String,
    /// Experts E of random weights to quantise and prepack.
    #[arg(long, default_value_t = 8)]
    pub experts: usize,
    /// N: output columns (with --swiglu, of each of W1 and W3).
    #[arg(long, default_value_t = 2048)]
    pub n: usize,
    /// K: reduction depth.
    #[arg(long, default_value_t = 7168)]
    pub k: usize,
    /// Prepack a SwiGLU pair, W1 and W3 `separate` (the default) or `interleaved` in blocks of 128 rows.
    #[arg(long, num_args = 0..=1, default_missing_value = "separate", value_name = "WEIGHTS")]
    pub swiglu: Option<String>,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the prepacked weights to this file.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Instead, read a prepacked weight file and describe it.
    #[arg(long, value_name = "FILE", conflicts_with = "out")]
    pub read: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct MoeVerifyArgs {
    /// Shape suite when no --counts is given: quick (the default) or full.
    #[arg(long)]
    pub suite: Option<String>,
    /// Only this version (grouped_gemm, grouped_swapab or swiglu_dual; default: every version
    /// that computes the problem's kind).
    #[arg(long)]
    pub version: Option<String>,
    /// One problem instead of the suite: rows per expert, comma-separated (E is their number),
    /// tokens sorted by expert unless --masked. Needs --n and --k.
    #[arg(long, conflicts_with = "counts_file")]
    pub counts: Option<String>,
    /// Rows per expert from a file (separated by commas, spaces or newlines), for many experts.
    #[arg(long, value_name = "FILE")]
    pub counts_file: Option<PathBuf>,
    /// The masked decode layout: X is [E, max_rows, K], expert e owns its first counts[e] rows.
    #[arg(long)]
    pub masked: bool,
    /// Rows per expert of the masked layout (default: the largest count).
    #[arg(long)]
    pub max_rows: Option<usize>,
    /// N: output columns (with --swiglu, of each of the gate and up projections).
    #[arg(long)]
    pub n: Option<usize>,
    /// K: reduction depth.
    #[arg(long)]
    pub k: Option<usize>,
    /// The fused SwiGLU gate/up pair, W1 and W3 stored `separate` (the default) or `interleaved`
    /// in blocks of 128 rows.
    #[arg(long, num_args = 0..=1, default_missing_value = "separate", value_name = "WEIGHTS")]
    pub swiglu: Option<String>,
    /// Multiply each row by a routing weight in the SwiGLU epilogue.
    #[arg(long)]
    pub routed: bool,
    /// Input dtype: bf16 (the default) or f16.
    #[arg(long)]
    pub dtype: Option<String>,
    /// Output dtype: bf16, f16 or f32 (default: the input dtype).
    #[arg(long)]
    pub out_dtype: Option<String>,
    /// Replay the launch from a CUDA graph captured while the device row counts were zero (the
    /// counts are read on the GPU), instead of launching it directly.
    #[arg(long)]
    pub graph: bool,
    #[command(flatten)]
    pub four_bit: FourBitArgs,
    /// Verify the whole MoE layer instead (routing, the gathered SwiGLU, the down projection
    /// with its combine) against its float64 reference, on its suite (--suite quick or full).
    #[arg(long)]
    pub layer: bool,
}

#[derive(Debug, Args)]
pub struct MoeBenchArgs {
    /// Experts E.
    #[arg(long, default_value_t = 8)]
    pub experts: usize,
    /// Tokens (rows) spread unevenly over the experts; ignored with --counts.
    #[arg(long, default_value_t = 7516)]
    pub tokens: usize,
    /// Rows per expert, comma-separated (overrides --experts and --tokens).
    #[arg(long)]
    pub counts: Option<String>,
    /// N: output columns (with --swiglu, the FFN width).
    #[arg(long, default_value_t = 3072)]
    pub n: usize,
    /// K: reduction depth (with --swiglu, the hidden size).
    #[arg(long, default_value_t = 4096)]
    pub k: usize,
    /// bf16 or f16 (inputs and outputs).
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// Time the expert FFN: fused SwiGLU (N x K), then the down projection (K x N).
    #[arg(long)]
    pub swiglu: bool,
    /// W1/W3 interleaved in one tensor (with --swiglu).
    #[arg(long)]
    pub interleaved: bool,
    /// Multiply each row by a routing weight in the SwiGLU epilogue.
    #[arg(long)]
    pub routed: bool,
    /// Seed of the uneven token split.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub timing: TimingArgs,
    #[command(flatten)]
    pub four_bit: FourBitArgs,
    /// Time the whole MoE layer and its steps instead: the shapes, or the sizes given
    /// as `E64,k8,H2048,I1408,T1+64+4096`.
    #[arg(long, num_args = 0..=1, default_missing_value = "issue", value_name = "SHAPES")]
    pub layer: Option<String>,
    /// The layer's combine: atomic (the default) or ordered (deterministic).
    #[arg(long, requires = "layer")]
    pub combine: Option<String>,
}

/// The 4-bit experts' flags `moe verify` and `moe bench` share.
#[derive(Debug, Args)]
pub struct FourBitArgs {
    /// The kernels with 4-bit weights instead: nvfp4 or mxfp4 (verify: on their own suite without
    /// --counts; bench: timed against kiln's bf16 kernel of the same counts, the grouped GEMM or
    /// with --swiglu the fused SwiGLU alone).
    #[arg(long, value_name = "FORMAT")]
    pub weights: Option<String>,
    /// With --weights mxfp4: the activations, bf16 (the default) or e4m3 (quantised by kiln's
    /// FP8 quantiser with 1x128 scales, on the FP8 tensor cores: W4A8; bench also times that
    /// quantisation).
    #[arg(long, value_name = "TYPE", requires = "weights")]
    pub act: Option<String>,
}
