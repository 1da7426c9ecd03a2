//! The command-line grammar (clap): raw arguments, turned into typed requests by the handlers.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "kiln",
    version,
    about = "Hopper GEMM kernels and the lab that builds them: JIT, verify, bench against cuBLAS, record."
)]
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
    /// Attention forward: `attn verify` against the float64 reference, `attn bench` for TFLOPS.
    Attn(super::attention::AttnCliArgs),
    /// The main job: compile the variants it runs, verify and benchmark every GEMM version (the
    /// compile and the CPU references only without a GPU); a line per version.
    Suite(SuiteArgs),
    /// The JIT cache: show its path or clear it.
    Cache(CacheArgs),
    /// Show results kept in the store.
    Results(ResultsArgs),
    /// Compile one version for a problem class (no GPU needed): resources and a SASS histogram.
    Inspect(InspectArgs),
    /// What the GEMM dispatch would run for one problem and why (no GPU needed): the version,
    /// the config and every rule that decided it, the copies, the grid.
    Plan(PlanArgs),
    /// Run compute-sanitizer (memcheck, racecheck, synccheck, initcheck) over versions at small
    /// shapes; exit 1 if any reports an error.
    Sanitize(SanitizeArgs),
    /// Nsight Compute metrics of one version on one shape, or a time split by differencing two
    /// timed variants (--split).
    Profile(ProfileArgs),
    /// The experiment ledger: record a hypothesis, measure it, close it, show the log.
    Exp(ExpArgs),
    /// Write a self-contained HTML page and a markdown file from the store.
    Report(ReportArgs),
    /// Tune a version's parameters for one problem: guard, search, verify and time each
    /// candidate in a watched worker process, record every result, cache the best.
    Tune(Box<TuneArgs>),
    /// Mixture-of-experts: verify the grouped GEMM, the fused SwiGLU and the masked layout;
    /// time the grouped GEMM or a whole expert FFN.
    Moe(MoeCmdArgs),
    /// FP8 GEMM: `fp8 verify` (conversions, quantisation, GEMM against float64), `fp8 bench`
    /// (against cuBLASLt's FP8), `fp8 check` (compile every FP8 variant).
    Fp8(super::fp8::Fp8CliArgs),
    /// FP4: `fp4 verify` (NVFP4/MXFP4 quantisation bit for bit against the CPU, the NVFP4 GEMV
    /// against float64), `fp4 bench --gemv` (against cuBLAS bf16), `fp4 seeds` (the NVFP4 contest
    /// shapes), `fp4 check` (compile every FP4 variant).
    Fp4(super::fp4::Fp4CliArgs),
    /// RMSNorm and the rotary embedding: `pointwise verify` (against float64 on their suite),
    /// `pointwise bench` (times at the model shapes, TB/s).
    Pointwise(super::pointwise::PointwiseCmdArgs),
    /// Seeded random problems for every op and version (GEMM, attention, MoE), each verified
    /// with poisoned outputs; failures are written as they happen for `verify --repro`.
    Fuzz(super::fuzz::FuzzArgs),
    /// The tuner's worker process (internal): JSON-line jobs on stdin, results on stdout.
    #[command(hide = true)]
    TuneWorker(TuneWorkerArgs),
    /// Replay the evolutionary search against a recorded landscape (no GPU): how often it gets
    /// within 2% of the exhaustive best with 15% of the evaluations.
    TuneReplay(TuneReplayArgs),
}

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Target architecture: sm_90a (every version), or sm_80, sm_86, sm_89 (the versions
    /// without wgmma).
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
    /// Input dtype: bf16 or f16, or e4m3 / e5m2 for the FP8 GEMM (layout RC, --scale).
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// Output dtype: bf16, f16 or f32 (default: the input dtype; bf16 for FP8).
    #[arg(long, visible_alias = "out-dtype")]
    pub out: Option<String>,
    /// FP8 scales: tensor, row or block (1x128 A, 128x128 B; the default), with --dtype e4m3.
    #[arg(long)]
    pub scale: Option<String>,
    /// Scale of A·B (a negative value may follow with a space: `--alpha -1`).
    #[arg(long, default_value_t = 1.0, allow_negative_numbers = true)]
    pub alpha: f32,
    /// Scale of the C read in (0: C is only written).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
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
    /// Rerun the cases in FILE (a `kiln fuzz` failures file: one JSON case per line), each with
    /// its own inputs, on its own version.
    #[arg(long, conflicts_with_all = ["shape", "versions"])]
    pub repro: Option<PathBuf>,
}

/// How a bench times: repetitions, warm-up and L2 flushing (every bench command's flags).
#[derive(Debug, Default, Args)]
pub struct TimingArgs {
    #[arg(long)]
    pub reps: Option<usize>,
    #[arg(long)]
    pub warmup: Option<usize>,
    /// Also warm up for at least this much GPU time (ms): ~1000 measures the power-capped
    /// steady state rather than the first moments of load.
    #[arg(long, value_parser = warmup_ms)]
    pub warmup_ms: Option<f64>,
    /// Do not flush L2 between repetitions (flushed by default: `KILN_FLUSH=read`, the default,
    /// reads a buffer twice the L2 size; `KILN_FLUSH=memset` overwrites it, which leaves dirty lines).
    #[arg(long)]
    pub no_flush: bool,
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
    #[command(flatten)]
    pub timing: TimingArgs,
    /// Time each version's repetitions back to back instead of in interleaved rounds (one
    /// launch of each version per round, so that clock drift hits all of them alike).
    #[arg(long)]
    pub sequential: bool,
    /// Time a named shape set instead of --shape: `ladder`, `targets` (issue 3's shapes, in
    /// every layout given by --layouts) or `random` (--count shapes drawn from --seed, each run
    /// by the version the dispatch picks for it unless --version or --all names them).
    #[arg(long)]
    pub set: Option<String>,
    /// Shapes of --set random (default 300): distinct problems of at least 5e8 multiply-adds,
    /// sizes up to 16384, every layout, bf16 and f16, packed, alpha 1, beta 0.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub count: Option<u32>,
    /// Seed of the draw of --set random (default 1): the same seed draws the same shapes.
    #[arg(long)]
    pub seed: Option<u64>,
    /// Layouts for --set targets, comma-separated (default: all four).
    #[arg(long, default_value = "RC,CR,RR,CC")]
    pub layouts: String,
    /// Time the problems this many times: the first pass in the set's order, each later one in
    /// its own shuffled order (--order-seed). The summary takes each problem's median over the
    /// passes, so a shape slow only where it falls in the run (after the heaviest ones) is told
    /// apart from one slow everywhere; every pass's rows are printed and stored.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub passes: u32,
    /// Seed of the shuffled orders of --passes (the same seed gives the same orders).
    #[arg(long, default_value_t = 1)]
    pub order_seed: u64,
}

#[derive(Debug, Args)]
pub struct SuiteArgs {
    /// Verification suite, whose problems also decide what is compiled: quick or full (default
    /// quick, so that the main job runs in a minute on a 2-core machine and on an H100).
    #[arg(long)]
    pub verify: Option<String>,
    /// Write the JSON results to this file as well.
    #[arg(long)]
    pub save: Option<PathBuf>,
    /// Print every compiled variant, the verify table per version and the bench table per
    /// problem, not a line per version (--json: every row as JSON).
    #[arg(long)]
    pub verbose: bool,
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

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// The op.
    pub op: String,
    /// The version to inspect.
    pub version: String,
    /// Layout of A and B: RC, CR, RR, CC.
    #[arg(long, default_value = "RC")]
    pub layout: String,
    /// Input dtype: bf16 or f16, or e4m3 / e5m2 (version fp8_wgmma, with --scale).
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    /// Output dtype (default: the input dtype).
    #[arg(long)]
    pub out: Option<String>,
    /// FP8 scales: tensor, row or block, with --dtype e4m3.
    #[arg(long)]
    pub scale: Option<String>,
    #[arg(long, default_value = "sm_90a")]
    pub arch: String,
    /// How many of the most frequent opcodes to show (watched ones are always shown).
    #[arg(long, default_value_t = 12)]
    pub top: usize,
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    #[command(flatten)]
    pub problem: ProblemArgs,
    /// The attention backward's problem (`--op attn-backward`; dtype and layout: --dtype,
    /// --layout BSHD|BHSD).
    #[command(flatten)]
    pub attn: super::attention::AttnShapeArgs,
    /// With `--op attn-backward`: the deterministic mode.
    #[arg(long)]
    pub deterministic: bool,
    /// The version to plan (default: the one the dispatch selects).
    #[arg(long)]
    pub version: Option<String>,
    /// SMs of the GPU planned for (default: this machine's GPU, else an H100 SXM's 132).
    #[arg(long)]
    pub sms: Option<u32>,
}

#[derive(Debug, Args)]
pub struct SanitizeArgs {
    /// Versions to check (default: every kiln version, and the attention backward versions the dispatch runs for its small problems); an attention backward version runs `attn verify --backward` at each head dim it takes.
    #[arg(long = "version")]
    pub versions: Vec<String>,
    /// Sanitizer tools (default: memcheck, racecheck, synccheck, initcheck).
    #[arg(long = "tool")]
    pub tools: Vec<String>,
    /// Problems to run instead of the built-in three: MxNxK[:LAYOUT[:DTYPE[:OUT]]] (default RC,
    /// bf16, bf16), e.g. one whose C the TMA-store epilogue takes, so that a forced tile runs.
    #[arg(long = "problem")]
    pub problems: Vec<String>,
    /// Seconds after which one sanitizer run is killed and reported as hung.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// Check every tile config of wgmma_tma_ws instead (forced through KILN_WGMMA_CFG: whole,
    /// with an f32 C through TMA stores and from registers, split, last-wave split and stream-K,
    /// in every layout), each at a problem
    /// that `kiln plan` shows it really runs.
    #[arg(long, conflicts_with_all = ["versions", "problems"])]
    pub configs: bool,
    /// Sanitizer runs at a time (processes sharing the GPU).
    #[arg(long, default_value_t = 1)]
    pub jobs: usize,
    /// List the runs (the setup and problem of each) and exit, without a GPU.
    #[arg(long)]
    pub list: bool,
    /// Instead of the built-in problems, this many small problems drawn as `kiln fuzz` draws
    /// them (sizes to 320, every layout, dtype pair, alpha, beta and padding), from --seed.
    #[arg(long, conflicts_with_all = ["problems", "configs"])]
    pub fuzz: Option<usize>,
    /// Seed of --fuzz's draw.
    #[arg(long, default_value_t = 1, requires = "fuzz")]
    pub seed: u64,
}

#[derive(Debug, Args)]
pub struct ProfileArgs {
    /// The op.
    pub op: String,
    /// The version to profile.
    pub version: String,
    /// Shape MxNxK (or one number for a cube).
    #[arg(long)]
    pub shape: String,
    #[arg(long, default_value = "RC")]
    pub layout: String,
    #[arg(long, default_value = "bf16")]
    pub dtype: String,
    #[arg(long)]
    pub out: Option<String>,
    /// Instead of counters: time this other version (VERSION, or VERSION@MxNxK for another
    /// shape) as well and report the difference as a share of the first one's time.
    #[arg(long)]
    pub split: Option<String>,
    /// Instead of counters: one instrumented launch of wgmma_tma_ws (after --reps warm ones, L2
    /// flushed) with each CTA's setup, first loads, pipeline fill, mainloop end and stores
    /// stamped; a table of the events over the CTAs.
    #[arg(long, conflicts_with = "split")]
    pub timeline: bool,
    #[arg(long)]
    pub reps: Option<usize>,
}

#[derive(Debug, Args)]
pub struct ExpArgs {
    #[command(subcommand)]
    pub action: ExpAction,
}

#[derive(Debug, Subcommand)]
pub enum ExpAction {
    /// Record a new experiment (before measuring anything).
    New(Box<ExpNewArgs>),
    /// Measure an experiment's baseline and candidate in one run, twice (needs a GPU).
    Run(ExpRunArgs),
    /// Record the verdict: kept, eliminated or inconclusive.
    Close(ExpCloseArgs),
    /// The iteration log and the table of eliminated ideas.
    Log(ExpLogArgs),
}

#[derive(Debug, Args)]
pub struct ExpNewArgs {
    #[arg(long)]
    pub title: String,
    #[arg(long)]
    pub hypothesis: String,
    /// VERSION[:k=v,...]
    #[arg(long)]
    pub baseline: String,
    /// VERSION[:k=v,...]
    #[arg(long)]
    pub candidate: String,
    /// The predicted change of the candidate over the baseline: `+8%`, `-5%` or `1.5x`.
    #[arg(long)]
    pub predict: String,
    /// When to stop: `abort if < 3%`.
    #[arg(long)]
    pub gate: Option<String>,
    #[command(flatten)]
    pub problem: ProblemArgs,
}

#[derive(Debug, Args)]
pub struct ExpRunArgs {
    pub id: i64,
    /// Rounds of (baseline, candidate); two or more show the noise.
    #[arg(long, default_value_t = 2)]
    pub rounds: usize,
    #[arg(long)]
    pub reps: Option<usize>,
    #[arg(long)]
    pub warmup: Option<usize>,
}

#[derive(Debug, Args)]
pub struct ExpCloseArgs {
    pub id: i64,
    /// kept, eliminated or inconclusive.
    #[arg(long)]
    pub verdict: String,
    #[arg(long)]
    pub note: Option<String>,
}

#[derive(Debug, Args)]
pub struct ExpLogArgs {
    /// Print markdown (headings and tables) for a document.
    #[arg(long)]
    pub markdown: bool,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Folder to write report.html, report.md and charts/ into.
    #[arg(long, default_value = "report")]
    pub out: PathBuf,
}

#[derive(Debug, Args)]
pub struct TuneArgs {
    /// The op to tune: gemm (the default; --shape) or attn (--batch --heads --seqlen --dim).
    #[arg(value_name = "OP")]
    pub target: Option<String>,
    /// The version to tune (not needed with --resume; attention: fa3_wgmma by default; the
    /// backward: every version that takes the problem).
    #[arg(long)]
    pub version: Option<String>,
    #[command(flatten)]
    pub problem: ProblemArgs,
    /// The attention problem of `kiln tune attn` (dtype and layout: --dtype, --layout BSHD|BHSD).
    #[command(flatten)]
    pub attn: super::attention::AttnShapeArgs,
    /// attn: tune the backward (its versions' run-time knobs: the split's parts, the causal order,
    /// ...) instead of the forward; without --version, every version that takes the problem.
    #[arg(long)]
    pub backward: bool,
    /// With --backward: the deterministic mode's launches (dQ added in a fixed order).
    #[arg(long, requires = "backward")]
    pub deterministic: bool,
    /// auto (exhaustive when the space fits the budget), exhaustive, or evo (also: evolutionary,
    /// model: the surrogate-guided evolutionary search).
    #[arg(long, default_value = "auto")]
    pub search: String,
    /// Most candidates to evaluate (default: the whole space for exhaustive, 15% of it for evo).
    #[arg(long)]
    pub budget: Option<usize>,
    /// Seed of the evolutionary search.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// GPUs to run workers on: 0, all, or a list like 0,1 (one worker per GPU).
    #[arg(long, default_value = "0")]
    pub gpus: String,
    /// Continue tuning run RUN_ID, skipping the candidates it already recorded.
    #[arg(long = "resume", value_name = "RUN_ID")]
    pub resume: Option<i64>,
    /// Write every candidate's outcome (the landscape) as JSON to this file.
    #[arg(long)]
    pub landscape: Option<PathBuf>,
    /// Seconds a job may always take before the watchdog kills its worker.
    #[arg(long, default_value_t = 5.0)]
    pub timeout_floor: f64,
    #[arg(long, default_value_t = 20)]
    pub reps: usize,
    #[arg(long, default_value_t = 3)]
    pub warmup: usize,
    /// Rows of the final table (fastest first; every failure is summarised below it).
    #[arg(long, default_value_t = 25)]
    pub top: usize,
}

#[derive(Debug, Args)]
pub struct TuneWorkerArgs {
    /// The GPU this worker runs on.
    #[arg(long, default_value_t = 0)]
    pub gpu: u32,
}

#[derive(Debug, Args)]
pub struct TuneReplayArgs {
    /// A landscape written by `kiln tune --landscape`.
    #[arg(long)]
    pub landscape: PathBuf,
    #[arg(long, default_value_t = 100)]
    pub trials: usize,
    /// Share of the space each trial may evaluate.
    #[arg(long, default_value_t = 0.15)]
    pub fraction: f64,
    /// How close to the exhaustive best counts as found.
    #[arg(long, default_value_t = 0.02)]
    pub within: f64,
    /// First seed (trial i uses seed + i).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
}

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
    /// With --act e4m3: the W4A8 kernel forms to time (`KILN_W4A8_FORM` values, comma-separated,
    /// e.g. `ss,wide,wide-lean`), each beside kiln's bf16 kernel in interleaved rounds of one
    /// process (default: the knob's form alone, interleaved with bf16 the same way).
    #[arg(long, value_name = "LIST", requires = "act")]
    pub forms: Option<String>,
    /// With --weights (bf16 activations, no --swiglu): after the timing, LAUNCHES (20) traced
    /// launches each of kiln's bf16 grouped GEMM and the 4-bit one, alternating, L2 flushed
    /// before each: their CTAs' phases (global timer) since their prefix kernel's entry, and the
    /// cycles between them (the `KILN_MOE_TRACE` variants, never dispatched).
    #[arg(long, num_args = 0..=1, default_missing_value = "20", value_name = "LAUNCHES", requires = "weights")]
    pub timeline: Option<usize>,
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

/// The architecture a family's `check` compiles for (`moe check`, `fp8 check`, `fp4 check`).
#[derive(Debug, Args)]
pub struct ArchArgs {
    #[arg(long, default_value = "sm_90a")]
    pub arch: String,
}

/// `--warmup-ms`: a number of milliseconds from 0 to 600000.
pub fn warmup_ms(v: &str) -> std::result::Result<f64, String> {
    match v.parse::<f64>() {
        Ok(ms) if (0.0..=600_000.0).contains(&ms) => Ok(ms),
        _ => Err(format!("{v} is not a time in ms from 0 to 600000")),
    }
}
