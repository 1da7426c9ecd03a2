//! The MoE problem: a grouped GEMM over experts (tokens sorted by expert, or the masked decode
//! layout), optionally the fused SwiGLU gate/up pair, with its dtypes and the host copy of the
//! per-expert rows, validated once so that no kernel ever sees an impossible problem.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ops::gemm::DType;

/// Rows of one 128-row block of W1 or W3 in the interleaved SwiGLU weight layout.
pub const INTERLEAVE_ROWS: usize = 128;

/// Which rows of X belong to which expert. The arrays here are host copies of what the kernels
/// read on the GPU (an i32 array uploaded next to X).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Rows {
    /// Tokens sorted by expert: X is [x_rows, K]; expert e owns rows offsets[e] .. offsets[e+1]
    /// (E + 1 non-decreasing entries, any count per expert including 0). Rows outside every
    /// expert are neither read into any result nor written.
    Contiguous { x_rows: usize, offsets: Vec<i32> },
    /// Decode: X is [E, max_rows, K]; expert e owns its first counts[e] rows. The kernels read
    /// the counts on the GPU, so one launch (or CUDA graph) serves any counts.
    Masked { max_rows: usize, counts: Vec<i32> },
}

/// How W1 (gate) and W3 (up) are stored for the fused SwiGLU.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WeightLayout {
    /// Two tensors W1, W3, each [E, N, K].
    Separate,
    /// One tensor W13 [E, 2N, K] whose rows alternate blocks of [`INTERLEAVE_ROWS`] rows of W1 and
    /// of W3: W1 row n is row 256(n / 128) + n % 128, W3 row n is 128 rows after it.
    Interleaved,
}

/// The fused gate/up epilogue: H = silu(X·W1ᵀ) ⊙ (X·W3ᵀ), times the row's routing weight if
/// `routed` (one f32 per row of X).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct SwiGlu {
    pub weights: WeightLayout,
    pub routed: bool,
}

/// The MoE layer's row maps, over the expert-sorted (token, expert) pairs that are the problem's
/// rows (the routing's `row_token` and `row_weight`, read on the GPU).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LayerRows {
    /// The gate/up GEMM: row r reads X row `row_map[r]` of X's `source_rows` (its token), in
    /// the loads: X is [source_rows, K], never gathered into a copy.
    Gather { source_rows: usize },
    /// The down projection's combine: row r times its routing weight is added into row
    /// `row_map[r]` of the f32 output [tokens, N] (atomically, f32).
    Combine { tokens: usize },
    /// The down projection for the ordered combine: row r is stored times its routing weight.
    Scaled,
}

/// One MoE GEMM: for every expert e, Y[rows of e] = X[rows of e] · W[e]ᵀ with W [E, N, K]
/// (K-major), fp32 accumulation; with `swiglu`, the fused dual GEMM instead.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct MoeProblem {
    /// E, as the weights have it.
    pub experts: usize,
    pub n: usize,
    pub k: usize,
    pub rows: Rows,
    pub input: DType,
    pub output: DType,
    pub swiglu: Option<SwiGlu>,
    /// Elements from one expert's weights to the next (W, and W3 when separate), when they are
    /// not packed: e.g. the gate and up halves of transformers' `gate_up_proj` [E, 2N, K], read in
    /// place as W1 and W3 with a stride of 2NK. `None`: packed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub w_expert_stride: Option<usize>,
    /// The MoE layer's row maps (`None`: rows are X's and Y's own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layer: Option<LayerRows>,
}

impl MoeProblem {
    /// Tokens sorted by expert, `counts[e]` rows each, packed from row 0.
    pub fn contiguous(counts: &[usize], n: usize, k: usize, input: DType, output: DType) -> Self {
        let mut offsets = vec![0i32];
        let mut total = 0usize;
        for &c in counts {
            total += c;
            offsets.push(total.min(i32::MAX as usize) as i32);
        }
        MoeProblem {
            experts: counts.len(),
            n,
            k,
            rows: Rows::Contiguous {
                x_rows: total,
                offsets,
            },
            input,
            output,
            swiglu: None,
            w_expert_stride: None,
            layer: None,
        }
    }

    /// The masked decode layout: X [E, max_rows, K] with `counts[e]` valid rows each.
    pub fn masked(
        counts: &[usize],
        max_rows: usize,
        n: usize,
        k: usize,
        input: DType,
        output: DType,
    ) -> Self {
        MoeProblem {
            experts: counts.len(),
            n,
            k,
            rows: Rows::Masked {
                max_rows,
                counts: counts
                    .iter()
                    .map(|&c| c.min(i32::MAX as usize) as i32)
                    .collect(),
            },
            input,
            output,
            swiglu: None,
            w_expert_stride: None,
            layer: None,
        }
    }

    pub fn with_swiglu(mut self, weights: WeightLayout, routed: bool) -> Self {
        self.swiglu = Some(SwiGlu { weights, routed });
        self
    }

    pub fn with_layer(mut self, layer: LayerRows) -> Self {
        self.layer = Some(layer);
        self
    }

    /// Whether the rows carry a routing weight each (the routed SwiGLU, or the down projection's
    /// combine or scaled rows).
    pub fn weighs_rows(&self) -> bool {
        self.swiglu.is_some_and(|s| s.routed)
            || matches!(
                self.layer,
                Some(LayerRows::Combine { .. } | LayerRows::Scaled)
            )
    }

    /// Rows of X (and of Y, which shares X's row space).
    pub fn x_rows(&self) -> usize {
        match &self.rows {
            Rows::Contiguous { x_rows, .. } => *x_rows,
            Rows::Masked { max_rows, .. } => self.experts * max_rows,
        }
    }

    pub fn is_masked(&self) -> bool {
        matches!(self.rows, Rows::Masked { .. })
    }

    /// (first X row, row count) of every expert, from the host copy. Call after `validate`.
    pub fn spans(&self) -> Vec<(usize, usize)> {
        match &self.rows {
            Rows::Contiguous { offsets, .. } => offsets
                .windows(2)
                .map(|w| (w[0] as usize, (w[1] - w[0]) as usize))
                .collect(),
            Rows::Masked { max_rows, counts } => counts
                .iter()
                .enumerate()
                .map(|(e, &c)| (e * max_rows, c as usize))
                .collect(),
        }
    }

    /// Rows that belong to some expert: the rows that are multiplied and written.
    pub fn routed_rows(&self) -> usize {
        self.spans().iter().map(|s| s.1).sum()
    }

    /// The i32 array the kernels read: offsets (E + 1) or counts (E).
    pub fn rows_array(&self) -> &[i32] {
        match &self.rows {
            Rows::Contiguous { offsets, .. } => offsets,
            Rows::Masked { counts, .. } => counts,
        }
    }

    /// Useful flops: 2·rows·N·K per GEMM (two GEMMs for SwiGLU).
    pub fn flops(&self) -> f64 {
        let gemms = if self.swiglu.is_some() { 2.0 } else { 1.0 };
        gemms * 2.0 * self.routed_rows() as f64 * self.n as f64 * self.k as f64
    }

    /// The fewest bytes moved: routed X rows and all weights read once, routed Y rows written.
    pub fn min_bytes(&self) -> f64 {
        let r = self.routed_rows() as f64;
        let es = self.input.size() as f64;
        r * self.k as f64 * es
            + self.w_elems() as f64 * es
            + r * self.n as f64 * self.output.size() as f64
    }

    /// Elements of X: its rows, or with a gather the source rows the row map points into.
    pub fn x_elems(&self) -> usize {
        match self.layer {
            Some(LayerRows::Gather { source_rows }) => source_rows * self.k,
            _ => self.x_rows() * self.k,
        }
    }
    /// Elements of all weights together (W; W1 and W3; or W13).
    /// Elements of one expert's weights (W, or W13 interleaved: 2N rows; W1 or W3: N rows).
    pub fn w_rows_per_expert(&self) -> usize {
        match self.swiglu {
            Some(SwiGlu {
                weights: WeightLayout::Interleaved,
                ..
            }) => 2 * self.n,
            _ => self.n,
        }
    }

    /// Elements from one expert's weights to the next.
    pub fn w_expert_elems(&self) -> usize {
        self.w_expert_stride
            .unwrap_or(self.w_rows_per_expert() * self.k)
    }

    /// Elements one weight tensor (W, W13, W1 or W3) spans: the last expert's rows end there.
    pub fn w_span_elems(&self) -> usize {
        if self.experts == 0 {
            return 0;
        }
        (self.experts - 1) * self.w_expert_elems() + self.w_rows_per_expert() * self.k
    }

    pub fn w_elems(&self) -> usize {
        let one = self.experts * self.n * self.k;
        if self.swiglu.is_some() {
            2 * one
        } else {
            one
        }
    }
    /// Elements of Y: X's rows by N, or with the combine the tokens' f32 rows.
    pub fn y_elems(&self) -> usize {
        match self.layer {
            Some(LayerRows::Combine { tokens }) => tokens * self.n,
            _ => self.x_rows() * self.n,
        }
    }

    /// Device bytes of X, the weights, Y, the rows array, the routing weights (f32, when routed)
    /// and the schedule tables: what one run's operands occupy.
    pub fn device_bytes(&self) -> u64 {
        let (i, o) = (self.input.size() as u64, self.output.size() as u64);
        let route = if self.weighs_rows() {
            4 * self.x_rows() as u64
        } else {
            0
        };
        let map = if matches!(
            self.layer,
            Some(LayerRows::Gather { .. } | LayerRows::Combine { .. })
        ) {
            4 * self.x_rows() as u64
        } else {
            0
        };
        (self.x_elems() as u64 + self.w_elems() as u64) * i
            + self.y_elems() as u64 * o
            + 4 * self.rows_array().len() as u64
            + route
            + map
            + super::schedule::sched_bytes(self.experts) as u64
    }

    /// Checks sizes, dtypes and the host copy of the rows; one sentence per problem.
    pub fn validate(&self) -> Result<()> {
        for (name, v) in [
            ("the expert count E", self.experts),
            ("N", self.n),
            ("K", self.k),
        ] {
            if v == 0 {
                return Err(Error::invalid(format!(
                    "{name} is 0; every MoE dimension must be at least 1"
                )));
            }
        }
        if self.input == DType::F32 {
            return Err(Error::invalid(
                "f32 inputs are not supported; inputs are bf16 or f16 (fp32 accumulation)",
            ));
        }
        let e = self.experts;
        match &self.rows {
            Rows::Contiguous { x_rows, offsets } => {
                if *x_rows == 0 {
                    return Err(Error::invalid(
                        "X has 0 rows; a zero-sized dimension is not a problem to run",
                    ));
                }
                if offsets.len() != e + 1 {
                    return Err(Error::invalid(format!(
                        "the offsets have {} entries but the weights have {e} experts: offsets need E + 1 = {} entries",
                        offsets.len(),
                        e + 1
                    )));
                }
                if offsets[0] < 0 {
                    return Err(Error::invalid(format!(
                        "offsets[0] = {} is negative",
                        offsets[0]
                    )));
                }
                for i in 1..offsets.len() {
                    if offsets[i] < offsets[i - 1] {
                        return Err(Error::invalid(format!(
                            "offsets must be non-decreasing: offsets[{i}] = {} < offsets[{}] = {}",
                            offsets[i],
                            i - 1,
                            offsets[i - 1]
                        )));
                    }
                }
                let last = offsets[e] as usize;
                if last > *x_rows {
                    return Err(Error::invalid(format!(
                        "offsets[{e}] = {last} exceeds the {x_rows} rows of X"
                    )));
                }
            }
            Rows::Masked { max_rows, counts } => {
                if *max_rows == 0 {
                    return Err(Error::invalid(
                        "max_rows is 0; a zero-sized dimension is not a problem to run",
                    ));
                }
                if counts.len() != e {
                    return Err(Error::invalid(format!(
                        "the row counts have {} entries but the weights have {e} experts",
                        counts.len()
                    )));
                }
                if let Some((i, c)) = counts
                    .iter()
                    .enumerate()
                    .find(|(_, &c)| c < 0 || c as usize > *max_rows)
                {
                    return Err(Error::invalid(format!(
                        "counts[{i}] = {c} is outside 0..={max_rows} (max_rows)"
                    )));
                }
            }
        }
        if self.x_rows() > i32::MAX as usize
            || self.n > i32::MAX as usize
            || self.k > i32::MAX as usize
        {
            return Err(Error::invalid(format!(
                "X rows {}, N {}, K {}: each must stay below 2^31",
                self.x_rows(),
                self.n,
                self.k
            )));
        }
        if let Some(layer) = self.layer {
            if self.is_masked() {
                return Err(Error::invalid(
                    "the MoE layer's row maps take tokens sorted by expert (offsets), not the masked layout",
                ));
            }
            match layer {
                LayerRows::Gather { source_rows: 0 } => {
                    return Err(Error::invalid(
                        "the gathered X has 0 rows; a zero-sized dimension is not a problem to run",
                    ))
                }
                LayerRows::Gather { .. } if self.swiglu.is_some_and(|s| s.routed) => {
                    return Err(Error::invalid(
                        "the layer weighs its rows in the down projection; give the gathered SwiGLU no routing weights",
                    ))
                }
                LayerRows::Combine { .. } | LayerRows::Scaled if self.swiglu.is_some() => {
                    return Err(Error::invalid(
                        "the combine is the down projection's: a plain grouped GEMM, not the SwiGLU",
                    ))
                }
                LayerRows::Combine { .. } if self.output != DType::F32 => {
                    return Err(Error::invalid(format!(
                        "the combine adds into an f32 accumulator, not {}; make the output f32",
                        self.output
                    )))
                }
                _ => {}
            }
        }
        if let Some(SwiGlu {
            weights: WeightLayout::Interleaved,
            ..
        }) = self.swiglu
        {
            if !self.n.is_multiple_of(INTERLEAVE_ROWS) {
                return Err(Error::invalid(format!(
                    "interleaved W1/W3 come in blocks of {INTERLEAVE_ROWS} rows, so N = {} must be a multiple of {INTERLEAVE_ROWS}; store them separately instead",
                    self.n
                )));
            }
        }
        Ok(())
    }

    /// A short label, e.g. `moe E=8 rows=7516 N=3072 K=4096 bf16->bf16 swiglu(separate)`.
    pub fn label(&self) -> String {
        let layout = match &self.rows {
            Rows::Contiguous { .. } => format!("rows={}", self.routed_rows()),
            Rows::Masked { max_rows, .. } => format!(
                "masked {}x{max_rows} rows={}",
                self.experts,
                self.routed_rows()
            ),
        };
        let gate = match self.swiglu {
            None => String::new(),
            Some(s) => format!(
                " swiglu({}{})",
                match s.weights {
                    WeightLayout::Separate => "separate",
                    WeightLayout::Interleaved => "interleaved",
                },
                if s.routed { ",routed" } else { "" }
            ),
        };
        let rows = match self.layer {
            None => String::new(),
            Some(LayerRows::Gather { source_rows }) => format!(" gather({source_rows})"),
            Some(LayerRows::Combine { tokens }) => format!(" combine({tokens})"),
            Some(LayerRows::Scaled) => " scaled".into(),
        };
        format!(
            "E={} {layout} N={} K={} {}->{}{gate}{rows}",
            self.experts, self.n, self.k, self.input, self.output
        )
    }
}

/// Splits `tokens` over `experts` unevenly but deterministically (weights 0.5..1.5 from `seed`),
/// for benchmarks that want "about this many tokens, not balanced".
pub fn uneven_counts(tokens: usize, experts: usize, seed: u64) -> Vec<usize> {
    if experts == 0 {
        return Vec::new();
    }
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let weights: Vec<f64> = (0..experts)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            0.5 + (x % 1000) as f64 / 1000.0
        })
        .collect();
    let sum: f64 = weights.iter().sum();
    let mut counts: Vec<usize> = weights
        .iter()
        .map(|w| (tokens as f64 * w / sum).floor() as usize)
        .collect();
    let short = tokens - counts.iter().sum::<usize>();
    for c in counts.iter_mut().take(short) {
        *c += 1;
    }
    counts
}

/// Parses `a,b,c` into row counts.
pub fn parse_counts(s: &str) -> Result<Vec<usize>> {
    s.split(',')
        .map(|p| {
            p.trim().parse::<usize>().map_err(|_| {
                Error::invalid(format!(
                    "counts `{s}`: `{p}` is not a row count; write e.g. 40,248,112"
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn device_bytes_are_x_weights_y_rows_routes_and_tables() {
        let p = MoeProblem::contiguous(&[3, 0, 5], 16, 32, DType::Bf16, DType::F32);
        let tables = crate::ops::moe::schedule::sched_bytes(3) as u64;
        assert_eq!(
            p.device_bytes(),
            (8 * 32 + 3 * 16 * 32) * 2 + 8 * 16 * 4 + 4 * 4 + tables
        );
        let routed = p.clone().with_swiglu(WeightLayout::Separate, true);
        // Two weight tensors and an f32 routing weight per X row.
        assert_eq!(
            routed.device_bytes(),
            p.device_bytes() + 3 * 16 * 32 * 2 + 8 * 4
        );
    }

    use super::*;

    fn bf(counts: &[usize]) -> MoeProblem {
        MoeProblem::contiguous(counts, 64, 64, DType::Bf16, DType::Bf16)
    }

    fn err(p: &MoeProblem) -> String {
        p.validate().unwrap_err().to_string()
    }

    #[test]
    fn ragged_and_empty_experts_are_valid() {
        let p = bf(&[0, 1, 40, 64, 128, 0]);
        p.validate().unwrap();
        assert_eq!(p.x_rows(), 233);
        assert_eq!(p.rows_array(), &[0, 0, 1, 41, 105, 233, 233]);
        assert_eq!(p.spans()[2], (1, 40));
        assert_eq!(p.routed_rows(), 233);
        assert_eq!(p.flops(), 2.0 * 233.0 * 64.0 * 64.0);
        // every expert empty is still a problem (nothing to compute)
        MoeProblem {
            rows: Rows::Contiguous {
                x_rows: 5,
                offsets: vec![0, 0, 0],
            },
            ..bf(&[1, 1])
        }
        .validate()
        .unwrap();
    }

    #[test]
    fn offsets_that_decrease_are_refused() {
        let p = MoeProblem {
            rows: Rows::Contiguous {
                x_rows: 10,
                offsets: vec![0, 5, 3, 10],
            },
            ..bf(&[1, 1, 1])
        };
        assert!(
            err(&p).contains("non-decreasing: offsets[2] = 3 < offsets[1] = 5"),
            "{}",
            err(&p)
        );
        let p = MoeProblem {
            rows: Rows::Contiguous {
                x_rows: 10,
                offsets: vec![-1, 5, 10],
            },
            ..bf(&[1, 1])
        };
        assert!(err(&p).contains("negative"));
    }

    #[test]
    fn offsets_past_the_rows_are_refused() {
        let p = MoeProblem {
            rows: Rows::Contiguous {
                x_rows: 10,
                offsets: vec![0, 5, 11],
            },
            ..bf(&[1, 1])
        };
        assert!(
            err(&p).contains("offsets[2] = 11 exceeds the 10 rows of X"),
            "{}",
            err(&p)
        );
    }

    #[test]
    fn expert_counts_must_agree_with_the_weights() {
        let p = MoeProblem {
            experts: 3,
            ..bf(&[4, 4])
        };
        assert!(err(&p).contains("3 experts"), "{}", err(&p));
        let m = MoeProblem {
            experts: 2,
            ..MoeProblem::masked(&[1, 2, 3], 8, 64, 64, DType::Bf16, DType::F32)
        };
        assert!(err(&m).contains("the row counts have 3 entries but the weights have 2 experts"));
    }

    #[test]
    fn zero_sized_dimensions_are_refused() {
        assert!(err(&bf(&[])).contains("expert count E is 0"));
        assert!(err(&MoeProblem { n: 0, ..bf(&[1]) }).contains("N is 0"));
        assert!(err(&MoeProblem { k: 0, ..bf(&[1]) }).contains("K is 0"));
        assert!(err(&bf(&[0, 0])).contains("X has 0 rows"));
        assert!(
            err(&MoeProblem::masked(&[0], 0, 8, 8, DType::Bf16, DType::Bf16))
                .contains("max_rows is 0")
        );
        assert!(err(&MoeProblem {
            input: DType::F32,
            ..bf(&[1])
        })
        .contains("f32 inputs"));
    }

    #[test]
    fn masked_counts_stay_within_max_rows() {
        let p = MoeProblem::masked(&[0, 7, 8], 8, 64, 64, DType::F16, DType::F32);
        p.validate().unwrap();
        assert_eq!(p.x_rows(), 24);
        assert_eq!(p.spans(), vec![(0, 0), (8, 7), (16, 8)]);
        let bad = MoeProblem::masked(&[9], 8, 64, 64, DType::F16, DType::F32);
        assert!(err(&bad).contains("counts[0] = 9 is outside 0..=8"));
    }

    #[test]
    fn interleaved_weights_need_whole_blocks() {
        let p = MoeProblem::contiguous(&[3], 200, 64, DType::Bf16, DType::Bf16)
            .with_swiglu(WeightLayout::Interleaved, false);
        assert!(err(&p).contains("multiple of 128"));
        let ok = MoeProblem::contiguous(&[3], 256, 64, DType::Bf16, DType::Bf16)
            .with_swiglu(WeightLayout::Interleaved, true);
        ok.validate().unwrap();
        assert_eq!(ok.w_elems(), 2 * 256 * 64);
        assert!(ok.label().contains("swiglu(interleaved,routed)"));
    }

    #[test]
    fn layer_row_maps_size_x_and_y_by_their_tokens() {
        // 3 tokens, top-2: 6 sorted rows over 3 experts
        let up = MoeProblem::contiguous(&[2, 1, 3], 256, 64, DType::Bf16, DType::Bf16)
            .with_swiglu(WeightLayout::Separate, false)
            .with_layer(LayerRows::Gather { source_rows: 3 });
        up.validate().unwrap();
        assert_eq!((up.x_elems(), up.y_elems()), (3 * 64, 6 * 256));
        assert!(up.label().ends_with("gather(3)"));
        let down = MoeProblem::contiguous(&[2, 1, 3], 64, 256, DType::Bf16, DType::F32)
            .with_layer(LayerRows::Combine { tokens: 3 });
        down.validate().unwrap();
        assert!(down.weighs_rows());
        assert_eq!((down.x_elems(), down.y_elems()), (6 * 256, 3 * 64));
        let scaled = MoeProblem::contiguous(&[2, 1, 3], 64, 256, DType::Bf16, DType::Bf16)
            .with_layer(LayerRows::Scaled);
        scaled.validate().unwrap();
        assert_eq!(scaled.y_elems(), 6 * 64);
    }

    #[test]
    fn layer_row_maps_refuse_what_they_cannot_do() {
        let bf = MoeProblem::contiguous(&[2, 1], 64, 64, DType::Bf16, DType::Bf16);
        let e = |p: MoeProblem| p.validate().unwrap_err().to_string();
        assert!(
            e(bf.clone().with_layer(LayerRows::Combine { tokens: 3 })).contains("f32 accumulator")
        );
        assert!(e(bf
            .clone()
            .with_swiglu(WeightLayout::Separate, true)
            .with_layer(LayerRows::Gather { source_rows: 3 }))
        .contains("no routing weights"));
        assert!(e(bf
            .clone()
            .with_swiglu(WeightLayout::Separate, false)
            .with_layer(LayerRows::Scaled))
        .contains("down projection"));
        let masked = MoeProblem::masked(&[1, 1], 4, 64, 64, DType::Bf16, DType::Bf16)
            .with_layer(LayerRows::Scaled);
        assert!(e(masked).contains("masked"));
    }

    #[test]
    fn uneven_counts_sum_to_the_tokens_and_parse() {
        let c = uneven_counts(7516, 8, 1);
        assert_eq!(c.iter().sum::<usize>(), 7516);
        assert!(c.iter().max() > c.iter().min());
        assert_eq!(uneven_counts(7516, 8, 1), c);
        assert_eq!(parse_counts("0, 1,40").unwrap(), vec![0, 1, 40]);
        assert!(parse_counts("1,x").is_err());
    }
}
