//! Random problems from one seed, for `kiln fuzz` and `kiln bench --set random`: sizes drawn
//! log-uniformly with extra weight on tile edges (±1 around multiples of 8, 64, 128, 256) and primes.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::formats::{Fp8Format, ScaleRecipe};
use crate::ops::attention::{AttentionProblem, AttnLayout, HEAD_DIMS};
use crate::ops::fp8::problem::{Fp8Problem, ScaleMode};
use crate::ops::gemm::{DType, GemmProblem, Layout};
use crate::ops::moe::{MoeProblem, WeightLayout};

/// The tile edges kiln's kernels have, which the draw lands on (or one off) a quarter of the time.
pub const TILE_EDGES: [usize; 4] = [8, 64, 128, 256];

/// The largest GEMM extent drawn.
pub const GEMM_MAX_DIM: usize = 16_384;

/// A seeded source of problems. The same seed gives the same sequence on every machine.
pub struct Draw {
    rng: SmallRng,
}

/// What the GEMM draw may produce.
#[derive(Debug, Clone, Copy)]
pub struct GemmDraw {
    pub max_dim: usize,
    /// Problems above this many multiply-adds are drawn again (the fp32 reference must stay quick).
    pub max_macs: f64,
    /// Problems below this many multiply-adds are drawn again (0: none).
    pub min_macs: f64,
    /// Output dtype other than the input's, alpha/beta other than 1/0, padded leading dimensions.
    pub all_options: bool,
}

impl GemmDraw {
    /// Every layout, dtype pair, alpha/beta and padding, up to 2^37 multiply-adds.
    pub fn fuzz() -> Self {
        GemmDraw {
            max_dim: GEMM_MAX_DIM,
            max_macs: (1u64 << 37) as f64,
            min_macs: 0.0,
            all_options: true,
        }
    }

    /// What is worth timing: at least 1 µs of tensor-core work (5·10⁸ multiply-adds at the H100's
    /// ~990 TFLOPS), packed, output in the input's dtype, alpha 1, beta 0.
    pub fn bench() -> Self {
        GemmDraw {
            max_dim: GEMM_MAX_DIM,
            max_macs: f64::INFINITY,
            min_macs: 5.0e8,
            all_options: false,
        }
    }
}

impl Draw {
    pub fn new(seed: u64) -> Self {
        Draw {
            rng: SmallRng::seed_from_u64(seed),
        }
    }

    /// A uniform pick from `items`.
    pub fn pick<T: Copy>(&mut self, items: &[T]) -> T {
        items[self.rng.gen_range(0..items.len())]
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        self.rng.gen_bool(p.clamp(0.0, 1.0))
    }

    /// An integer in `lo..=hi`, uniform.
    pub fn uniform(&mut self, lo: usize, hi: usize) -> usize {
        self.rng.gen_range(lo..=hi)
    }

    /// An integer in `1..=max`, log-uniform.
    pub fn log_uniform(&mut self, max: usize) -> usize {
        let x = self.rng.gen_range(0.0..=(max as f64).ln()).exp();
        (x.round() as usize).clamp(1, max)
    }

    /// One extent in `1..=max`: half the time log-uniform, a quarter on or one off a multiple of a
    /// tile edge, a quarter the prime at or above a log-uniform value.
    pub fn dim(&mut self, max: usize) -> usize {
        let roll = self.rng.gen_range(0..4);
        let d = match roll {
            0 | 1 => self.log_uniform(max),
            2 => {
                let edge = self.pick(&TILE_EDGES);
                let multiple = edge * self.log_uniform((max / edge).max(1));
                let off = self.pick(&[-1i64, 0, 1]);
                (multiple as i64 + off).max(1) as usize
            }
            _ => next_prime(self.log_uniform(max)),
        };
        d.clamp(1, max)
    }

    /// A GEMM problem of `draw`'s kind.
    pub fn gemm(&mut self, draw: &GemmDraw) -> GemmProblem {
        loop {
            let (m, n, k) = (
                self.dim(draw.max_dim),
                self.dim(draw.max_dim),
                self.dim(draw.max_dim),
            );
            let macs = m as f64 * n as f64 * k as f64;
            if macs > draw.max_macs || macs < draw.min_macs {
                continue;
            }
            let layout = self.pick(&Layout::ALL);
            let input = self.pick(&DType::INPUTS);
            if !draw.all_options {
                return GemmProblem::new(m, n, k, layout, input, input);
            }
            let output = self.pick(&DType::OUTPUTS);
            let mut p = GemmProblem::new(m, n, k, layout, input, output);
            p.alpha = self.scalar(&[1.0, 1.0, 0.0, -1.0, 0.5]);
            p.beta = if self.chance(0.5) {
                0.0
            } else {
                self.scalar(&[1.0, -1.0, 2.0, 0.0])
            };
            if self.chance(0.3) {
                p.lda += self.padding(p.lda);
                p.ldb += self.padding(p.ldb);
                p.ldc += self.padding(p.ldc);
            }
            return p;
        }
    }

    /// One of `fixed`, or (a fifth of the time) a value uniform in [-2, 2).
    fn scalar(&mut self, fixed: &[f32]) -> f32 {
        if self.chance(0.2) {
            self.rng.gen_range(-2.0f32..2.0)
        } else {
            self.pick(fixed)
        }
    }

    /// Extra elements on a leading dimension: up to the next multiple of 8 or 64 (as frameworks
    /// allocate), or a small odd amount.
    fn padding(&mut self, ld: usize) -> usize {
        match self.rng.gen_range(0..3) {
            0 => ld.next_multiple_of(8) - ld + 8,
            1 => ld.next_multiple_of(64) - ld,
            _ => self.uniform(1, 7),
        }
    }

    /// An attention forward problem: every head dim, causal or not, GQA ratios 1-8, unequal and
    /// odd lengths up to `max_seq`, both layouts, bf16 or f16.
    pub fn attention(&mut self, max_seq: usize) -> AttentionProblem {
        let head_dim = self.pick(&HEAD_DIMS);
        let heads_kv = self.pick(&[1, 1, 2, 3, 4, 8]);
        let group = self.pick(&[1, 1, 2, 4, 5, 8]);
        let seqlen_q = self.dim(max_seq);
        let seqlen_kv = if self.chance(0.4) {
            seqlen_q
        } else {
            self.dim(max_seq)
        };
        // Keep the work of one problem bounded: batch shrinks as the sequences grow.
        let tokens = seqlen_q.max(seqlen_kv) * heads_kv * group;
        let batch = self.uniform(1, (16_384 / tokens).clamp(1, 4));
        let mut p = AttentionProblem::new(batch, heads_kv * group, seqlen_q, head_dim);
        p.heads_kv = heads_kv;
        p.seqlen_kv = seqlen_kv;
        p.causal = self.chance(0.5);
        p.dtype = self.pick(&DType::INPUTS);
        p.layout = self.pick(&AttnLayout::ALL);
        if self.chance(0.2) {
            p.scale = self.rng.gen_range(0.01f32..1.0);
        }
        p
    }

    /// Per-expert row counts for `experts` experts and about `tokens` routed rows: uniform, one
    /// heavy expert, many empty experts, or all rows on one expert.
    pub fn counts(&mut self, experts: usize, tokens: usize) -> Vec<usize> {
        let mut counts = vec![0usize; experts];
        match self.rng.gen_range(0..4) {
            0 => {
                for _ in 0..tokens {
                    counts[self.uniform(0, experts - 1)] += 1;
                }
            }
            1 => {
                let heavy = self.uniform(0, experts - 1);
                counts[heavy] = tokens * 3 / 4;
                for _ in 0..tokens - counts[heavy] {
                    counts[self.uniform(0, experts - 1)] += 1;
                }
            }
            2 => {
                for _ in 0..tokens {
                    let e = self.uniform(0, experts - 1);
                    if e.is_multiple_of(3) {
                        counts[e] += 1;
                    }
                }
            }
            _ => counts[self.uniform(0, experts - 1)] = tokens,
        }
        counts
    }

    /// An MoE problem: 1-1,024 experts, random counts (empty experts included), contiguous or
    /// masked rows, the grouped GEMM or the fused SwiGLU in either weight layout, routed or not.
    pub fn moe(&mut self) -> MoeProblem {
        loop {
            let p = self.moe_once();
            // The float64 reference holds X and the weights on the host: keep each under 2^26
            // elements (a tenth of a second to make), drawing again above.
            let w = p.experts * p.n * p.k * if p.swiglu.is_some() { 2 } else { 1 };
            if w <= 1 << 26 && p.x_rows() * p.k <= 1 << 26 {
                return p;
            }
        }
    }

    fn moe_once(&mut self) -> MoeProblem {
        let experts = self.log_uniform(1024);
        let tokens = self.log_uniform(8192).max(1);
        let counts = self.counts(experts, tokens);
        let input = self.pick(&DType::INPUTS);
        let output = if self.chance(0.7) {
            input
        } else {
            self.pick(&DType::OUTPUTS)
        };
        let swiglu = self.chance(0.5);
        // N: the SwiGLU's interleaved layout takes whole 128-row blocks; K: 16-byte rows.
        // A tenth of the time an odd K or N, which a version may refuse (a skip, said with why).
        let n = if swiglu {
            128 * self.log_uniform(12)
        } else if self.chance(0.1) {
            self.dim(4096)
        } else {
            8 * self.log_uniform(512)
        };
        let k = if self.chance(0.1) {
            self.dim(4096)
        } else {
            8 * self.log_uniform(512)
        };
        let p = if self.chance(0.3) {
            let max_rows = counts.iter().copied().max().unwrap_or(0).max(1);
            let max_rows = max_rows + self.uniform(0, 8);
            MoeProblem::masked(&counts, max_rows, n, k, input, output)
        } else {
            let spare = if self.chance(0.2) {
                self.uniform(1, 64)
            } else {
                0
            };
            let mut p = MoeProblem::contiguous(&counts, n, k, input, output);
            if let crate::ops::moe::Rows::Contiguous { x_rows, .. } = &mut p.rows {
                *x_rows = (*x_rows + spare).max(1);
            }
            p
        };
        if swiglu {
            let layout = self.pick(&[WeightLayout::Separate, WeightLayout::Interleaved]);
            p.with_swiglu(layout, self.chance(0.5))
        } else {
            p
        }
    }
}

impl Draw {
    /// An FP8 GEMM: M and N drawn as GEMM extents to 4,096, K a multiple of 16 to 8,192 (the
    /// kernel's rule), every scale mode, promoted or not, each output dtype, e5m2 operands a
    /// fifth of the time (a pair the kernel does not take is a skip), alpha, C's rows padded,
    /// fp32 or UE8M0 scales; at most 2^33 multiply-adds.
    pub fn fp8(&mut self) -> (Fp8Problem, ScaleRecipe) {
        loop {
            let (m, n) = (self.dim(4096), self.dim(4096));
            let k = 16 * self.log_uniform(512);
            if (m * n * k) as f64 > (1u64 << 33) as f64 {
                continue;
            }
            let scale = self.pick(&ScaleMode::ALL);
            let mut p = Fp8Problem::new(m, n, k, self.pick(&DType::OUTPUTS), scale);
            p.promote = scale == ScaleMode::Block || self.chance(0.5);
            if self.chance(0.2) {
                p.a = self.pick(&[Fp8Format::E4m3, Fp8Format::E5m2]);
                p.b = self.pick(&[Fp8Format::E4m3, Fp8Format::E5m2]);
            }
            p.alpha = self.scalar(&[1.0, 1.0, 0.5, -2.0]);
            // C's rows padded; A and B stay packed: the verify quantises them into packed rows.
            if self.chance(0.3) {
                p.ldc += self.padding(p.ldc);
            }
            let recipe = if self.chance(0.3) {
                ScaleRecipe::Ue8m0
            } else {
                ScaleRecipe::Fp32
            };
            return (p, recipe);
        }
    }
}

/// The smallest prime ≥ `x` (2 for x ≤ 2).
pub fn next_prime(x: usize) -> usize {
    let is_prime = |v: usize| {
        v >= 2
            && (2..)
                .take_while(|d| d * d <= v)
                .all(|d| !v.is_multiple_of(d))
    };
    (x.max(2)..).find(|&v| is_prime(v)).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_draws_the_same_problems() {
        let (mut a, mut b) = (Draw::new(7), Draw::new(7));
        let d = GemmDraw::fuzz();
        for _ in 0..50 {
            assert_eq!(a.gemm(&d), b.gemm(&d));
        }
        let mut c = Draw::new(8);
        assert!((0..50).any(|_| a.gemm(&d) != c.gemm(&d)));
    }

    #[test]
    fn every_drawn_problem_is_valid() {
        let mut d = Draw::new(1);
        let g = GemmDraw::fuzz();
        for _ in 0..2000 {
            let p = d.gemm(&g);
            p.validate().unwrap();
            assert!((p.m * p.n * p.k) as f64 <= g.max_macs);
        }
        for _ in 0..500 {
            d.attention(4096).validate().unwrap();
            d.moe().validate().unwrap();
        }
    }

    #[test]
    fn the_gemm_draw_covers_layouts_dtypes_scalars_padding_and_edges() {
        let mut d = Draw::new(3);
        let g = GemmDraw::fuzz();
        let ps: Vec<GemmProblem> = (0..4000).map(|_| d.gemm(&g)).collect();
        for l in Layout::ALL {
            assert!(ps.iter().any(|p| p.layout == l));
        }
        for o in DType::OUTPUTS {
            assert!(ps.iter().any(|p| p.output == o));
        }
        assert!(ps.iter().any(|p| p.alpha == 0.0));
        assert!(ps.iter().any(|p| p.alpha < 0.0));
        assert!(ps.iter().any(|p| p.beta != 0.0));
        assert!(ps.iter().any(|p| p.ldc > p.n));
        let near = |v: usize, e: usize| [v.wrapping_sub(1), v, v + 1].iter().any(|x| x % e == 0);
        for e in TILE_EDGES {
            assert!(ps.iter().filter(|p| near(p.m, e)).count() > ps.len() / 20);
        }
        assert!(ps.iter().any(|p| p.m > 8192) && ps.iter().any(|p| p.k == 1));
        assert!(ps.iter().any(|p| p.n > 100 && next_prime(p.n) == p.n));
    }

    #[test]
    fn the_bench_draw_is_packed_same_dtype_and_worth_timing() {
        let mut d = Draw::new(11);
        let g = GemmDraw::bench();
        for _ in 0..300 {
            let p = d.gemm(&g);
            assert_eq!(
                p,
                GemmProblem::new(p.m, p.n, p.k, p.layout, p.input, p.input)
            );
            assert!((p.m * p.n * p.k) as f64 >= 5.0e8);
        }
    }

    #[test]
    fn counts_include_empty_and_heavy_experts() {
        let mut d = Draw::new(5);
        let all: Vec<Vec<usize>> = (0..200).map(|_| d.counts(16, 100)).collect();
        assert!(all.iter().any(|c| c.contains(&0)));
        assert!(all.iter().any(|c| c.contains(&100)));
        assert!(all.iter().any(|c| c.iter().any(|&x| x >= 75)));
    }

    #[test]
    fn fp8_problems_are_valid_and_cover_the_modes() {
        let mut d = Draw::new(9);
        let ps: Vec<(Fp8Problem, ScaleRecipe)> = (0..500).map(|_| d.fp8()).collect();
        for (p, _) in &ps {
            p.validate().unwrap();
        }
        for s in ScaleMode::ALL {
            assert!(ps.iter().any(|(p, _)| p.scale == s));
        }
        assert!(
            ps.iter().any(|(p, _)| !p.promote) && ps.iter().any(|(_, r)| *r == ScaleRecipe::Ue8m0)
        );
        assert!(ps.iter().any(|(p, _)| p.a == Fp8Format::E5m2));
    }

    #[test]
    fn primes() {
        assert_eq!(next_prime(0), 2);
        assert_eq!(next_prime(14), 17);
        assert_eq!(next_prime(4093), 4093);
    }
}
