//! Decode over a KV cache: what a problem is made from (shuffled pages, or a dense cache per
//! sequence as transformers keeps it: BHSD memory with spare rows, read through a transposed
//! view), its launch shape and label, and the suites. The check against the float64 reference
//! and the GPU's own check of bad tables are in `decode_check`, the timing in `bench`.

use rand::{seq::SliceRandom, Rng, SeedableRng};
use serde::Serialize;

use crate::error::Result;
use crate::ops::attention::decode_paged::{DecodeShape, DecodeStrides};
use crate::ops::attention::PagedProblem;
use crate::ops::gemm::DType;

pub use super::bench::{decode_row, time_decode};
pub use super::decode_check::{verify_bad_tables, verify_decode};

/// What a decode problem is made from (the CLI's flags, the suite's rows).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DecodeSpec {
    pub batch: usize,
    pub heads_q: usize,
    pub heads_kv: usize,
    pub head_dim: usize,
    pub seqlen_q: usize,
    pub page_size: usize,
    /// The longest context (every sequence's, unless `random_lengths`).
    pub context: usize,
    /// Lengths drawn from seqlen_q..=context per sequence.
    pub random_lengths: bool,
    pub causal: bool,
    pub dtype: DType,
    /// New K/V tokens appended by `kv_append` before the step (0: none).
    pub append: usize,
    /// A dense cache per sequence instead of pages: stored [batch, heads_kv, S, D] and read
    /// through its [batch, S, heads_kv, D] view, S = `context` + [`DENSE_SPARE`] with lengths
    /// (`random_lengths`), else S = `context` and no lengths (each sequence attends to all).
    #[serde(default)]
    pub dense: bool,
    /// Left padding: each sequence's keys start at a seeded position (flash-attention's
    /// `cache_leftpad`; transformers' static cache under a left-padded batch), drawn from
    /// 0..=length - seqlen_q, so that every query still sees a key.
    #[serde(default)]
    pub left_pad: bool,
}

/// Rows a dense cache holds past the longest context when lengths are given (a static cache).
pub const DENSE_SPARE: usize = 40;

impl DecodeSpec {
    /// The problem: every page of the cache in a seeded shuffled order, table entries past a
    /// context left at -1 (never read), scale 1/sqrt(d). Validated. A dense cache is the same
    /// problem with one page of the cache's length per sequence (page b is sequence b), which
    /// the reference reads alike.
    pub fn problem(&self, seed: u64) -> Result<PagedProblem> {
        if self.dense {
            return self.dense_problem(seed);
        }
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let max_pages = self.context.div_ceil(self.page_size.max(1)).max(1);
        let context_lens = self.lengths(&mut rng);
        let num_pages = self.batch * max_pages;
        let mut ids: Vec<i32> = (0..num_pages as i32).collect();
        ids.shuffle(&mut rng);
        let mut block_table = vec![-1; num_pages];
        for (b, &ctx) in context_lens.iter().enumerate() {
            let row = b * max_pages..b * max_pages + (ctx as usize).div_ceil(self.page_size.max(1));
            block_table[row.clone()].copy_from_slice(&ids[row]);
        }
        let mut p = self.paged_problem_of(block_table, context_lens, num_pages, max_pages);
        p.context_starts = self.starts(&p.context_lens, &mut rng);
        p.validate()?;
        Ok(p)
    }

    /// Each sequence's first key with `left_pad` (0..=length - seqlen_q, seeded), else none.
    fn starts(&self, lens: &[i32], rng: &mut rand::rngs::SmallRng) -> Vec<i32> {
        match self.left_pad {
            true => lens
                .iter()
                .map(|&c| rng.gen_range(0..=(c - self.seqlen_q as i32).max(0)))
                .collect(),
            false => Vec::new(),
        }
    }

    /// The dense cache's problem: S rows per sequence, one "page" each (page b is sequence b),
    /// lengths drawn as for pages.
    fn dense_problem(&self, seed: u64) -> Result<PagedProblem> {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
        let context_lens = self.lengths(&mut rng);
        let p = PagedProblem {
            context_starts: self.starts(&context_lens, &mut rng),
            num_pages: self.batch,
            page_size: self.dense_rows(),
            max_pages: 1,
            block_table: (0..self.batch as i32).collect(),
            context_lens,
            ..self.paged_problem_of(Vec::new(), Vec::new(), 0, 0)
        };
        self.shape(&p).validate()?;
        Ok(p)
    }

    /// Each sequence's context: drawn from seqlen_q..=context with `random_lengths`, else all.
    fn lengths(&self, rng: &mut rand::rngs::SmallRng) -> Vec<i32> {
        (0..self.batch)
            .map(|_| match self.random_lengths {
                true => rng.gen_range(self.seqlen_q.min(self.context)..=self.context) as i32,
                false => self.context as i32,
            })
            .collect()
    }

    /// The problem of this spec with these tables and page counts.
    fn paged_problem_of(
        &self,
        block_table: Vec<i32>,
        context_lens: Vec<i32>,
        num_pages: usize,
        max_pages: usize,
    ) -> PagedProblem {
        PagedProblem {
            batch: self.batch,
            heads_q: self.heads_q,
            heads_kv: self.heads_kv,
            head_dim: self.head_dim,
            seqlen_q: self.seqlen_q,
            num_pages,
            page_size: self.page_size,
            max_pages,
            block_table,
            context_lens,
            context_starts: Vec::new(),
            causal: self.causal,
            scale: 1.0 / (self.head_dim as f32).sqrt(),
            dtype: self.dtype,
        }
    }

    /// Rows of a dense cache per sequence.
    pub fn dense_rows(&self) -> usize {
        match self.random_lengths {
            true => self.context + DENSE_SPARE,
            false => self.context,
        }
    }

    /// The launch shape of `p` (this spec's problem): packed pages, or the dense cache's BHSD
    /// memory read as [batch, S, heads_kv, D], with lengths only when they differ.
    pub fn shape(&self, p: &PagedProblem) -> DecodeShape {
        let s = DecodeShape::of(p);
        if !self.dense {
            return s;
        }
        let (rows, hkv, d) = (p.page_size, p.heads_kv, p.head_dim);
        let bhsd = [hkv * rows * d, d, rows * d];
        DecodeShape {
            paged: false,
            lengths: self.random_lengths || self.left_pad,
            strides: DecodeStrides {
                k: bhsd,
                v: bhsd,
                ..s.strides
            },
            ..s
        }
    }

    pub fn label(&self) -> String {
        let cache = match self.dense {
            true => format!("dense{}", self.dense_rows()),
            false => format!("page{}", self.page_size),
        };
        format!(
            "decode B{} H{}/{} d{} q{} {} ctx{}{}{}{}{} {}",
            self.batch,
            self.heads_q,
            self.heads_kv,
            self.head_dim,
            self.seqlen_q,
            cache,
            self.context,
            if self.random_lengths { " random" } else { "" },
            if self.left_pad { " left-padded" } else { "" },
            if self.causal { " causal" } else { "" },
            if self.append > 0 {
                format!(" +{}", self.append)
            } else {
                String::new()
            },
            self.dtype
        )
    }
}

/// The suite's first problem, which the others vary: three sequences of 17 tokens in pages of 16,
/// four query heads over one KV head, d128, bf16, one query token.
const BASE: DecodeSpec = DecodeSpec {
    batch: 3,
    heads_q: 4,
    heads_kv: 1,
    head_dim: 128,
    seqlen_q: 1,
    page_size: 16,
    context: 17,
    random_lengths: false,
    causal: false,
    dtype: DType::Bf16,
    append: 0,
    dense: false,
    left_pad: false,
};

/// The suite: page sizes 16/64/256; contexts 1, 15, 16, 17 and random; GQA 1, 4 and 8; 1, 4
/// and 16 query tokens; head dims 64, 128 and 256; both dtypes; causal or not; with appends.
pub fn decode_suite() -> Vec<DecodeSpec> {
    let base = BASE;
    let mut v = Vec::new();
    let mut n = 0usize;
    for page_size in [16, 64, 256] {
        for context in [1, 15, 16, 17, 300] {
            for d in [64, 128, 256] {
                n += 1;
                v.push(DecodeSpec {
                    page_size,
                    context,
                    random_lengths: context == 300,
                    head_dim: d,
                    dtype: if n.is_multiple_of(2) {
                        DType::F16
                    } else {
                        DType::Bf16
                    },
                    ..base
                });
            }
        }
    }
    // GQA 1/4/8 x 1/4/16 query tokens (causal bottom-right past one token), 2 and 16 KV heads.
    for (hq, hkv) in [(2, 2), (16, 4), (16, 2)] {
        for sq in [1, 4, 16] {
            for d in [64, 128, 256] {
                v.push(DecodeSpec {
                    heads_q: hq,
                    heads_kv: hkv,
                    seqlen_q: sq,
                    head_dim: d,
                    context: 200,
                    random_lengths: true,
                    causal: sq > 1,
                    page_size: if sq == 4 { 64 } else { 16 },
                    ..base
                });
            }
        }
    }
    // Appends (the step's own tokens written first), and one sequence split many ways.
    for (sq, causal) in [(1, false), (4, true), (16, true)] {
        v.push(DecodeSpec {
            seqlen_q: sq,
            append: sq,
            causal,
            heads_q: 8,
            heads_kv: 2,
            context: 100,
            random_lengths: true,
            ..base
        });
    }
    v.push(DecodeSpec {
        batch: 1,
        heads_q: 8,
        heads_kv: 8,
        context: 20000,
        page_size: 256,
        ..base
    });
    // Splits with GQA and causal queries; two row blocks per KV head (8 x 16 rows) with an append.
    v.push(DecodeSpec {
        batch: 1,
        heads_q: 32,
        heads_kv: 8,
        seqlen_q: 4,
        causal: true,
        context: 3000,
        page_size: 64,
        ..base
    });
    v.push(DecodeSpec {
        batch: 2,
        heads_q: 16,
        heads_kv: 2,
        seqlen_q: 16,
        causal: true,
        append: 16,
        context: 5000,
        random_lengths: true,
        dtype: DType::F16,
        ..base
    });
    v.extend(dense_suite(&base));
    v
}

/// Dense caches as transformers keeps them: a whole cache per sequence without lengths (its
/// dynamic cache at one token, and long enough to split), caches with spare rows and lengths per
/// sequence (its static cache), causal query tokens, an append, every head dim, both dtypes.
fn dense_suite(base: &DecodeSpec) -> Vec<DecodeSpec> {
    use DType::{Bf16, F16};
    // (head dim, query tokens, heads, kv heads, context, lengths, append, dtype, dense, left pad);
    // left padding (each sequence's keys from a seeded start) is transformers' static cache under
    // a left-padded batch, 1 and 4 query tokens, one long enough to split; and a paged cache.
    let rows = [
        (128, 1, 32, 8, 577, false, 0, Bf16, true, false),
        (64, 1, 16, 2, 300, true, 0, F16, true, false),
        (256, 4, 8, 8, 1000, true, 0, Bf16, true, false),
        (128, 16, 16, 4, 5000, true, 16, F16, true, false),
        (128, 1, 8, 1, 20000, false, 0, Bf16, true, false),
        (64, 2, 4, 4, 17, true, 2, Bf16, true, false),
        (128, 1, 32, 8, 2048, true, 0, Bf16, true, true),
        (64, 4, 16, 2, 300, true, 0, F16, true, true),
        (256, 1, 8, 8, 1000, true, 0, Bf16, true, true),
        (128, 1, 8, 1, 20000, true, 0, Bf16, true, true),
        (128, 2, 16, 4, 500, true, 0, F16, false, true),
    ];
    rows.iter()
        .map(
            |&(d, sq, hq, hkv, context, random, append, dtype, dense, left_pad)| {
                // (three sequences, four when left-padded, one past 10,000 tokens)
                let batch = if context > 10000 {
                    1
                } else {
                    3 + left_pad as usize
                };
                DecodeSpec {
                    batch,
                    heads_q: hq,
                    heads_kv: hkv,
                    head_dim: d,
                    seqlen_q: sq,
                    context,
                    random_lengths: random,
                    causal: sq > 1,
                    dtype,
                    append,
                    dense,
                    left_pad,
                    page_size: if dense { base.page_size } else { 64 },
                }
            },
        )
        .collect()
}

/// Problems for [`verify_bad_tables`]: one split, several (the bad page seen by one split), a
/// dense cache with lengths, and one left-padded.
pub fn bad_table_specs() -> [DecodeSpec; 4] {
    let base = DecodeSpec {
        heads_q: 8,
        heads_kv: 2,
        seqlen_q: 2,
        context: 40,
        causal: true,
        ..BASE
    };
    [
        base,
        DecodeSpec {
            context: 5000,
            page_size: 64,
            ..base
        },
        DecodeSpec {
            dense: true,
            random_lengths: true,
            context: 300,
            ..base
        },
        DecodeSpec {
            dense: true,
            random_lengths: true,
            left_pad: true,
            context: 300,
            ..base
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::decode_paged::DecodePlan;

    #[test]
    fn problems_shuffle_pages_and_leave_unused_entries_unread() {
        let spec = DecodeSpec {
            random_lengths: true,
            context: 100,
            batch: 5,
            ..decode_suite()[0]
        };
        let p = spec.problem(7).unwrap();
        assert_eq!((p.max_pages, p.num_pages), (7, 35));
        let mut used: Vec<i32> = p.block_table.iter().copied().filter(|&x| x >= 0).collect();
        let pages: usize = p
            .context_lens
            .iter()
            .map(|&c| (c as usize).div_ceil(16))
            .sum();
        assert_eq!(used.len(), pages);
        used.sort_unstable();
        used.dedup();
        assert_eq!(used.len(), pages, "a page is shared");
        assert_ne!(p, spec.problem(8).unwrap());
        assert!(p.context_lens.iter().all(|&c| (1..=100).contains(&c)));
    }

    #[test]
    fn the_suite_covers_the_issues_boundaries() {
        let s = decode_suite();
        for ps in [16, 64, 256] {
            assert!(s.iter().any(|x| x.page_size == ps));
        }
        for ctx in [1, 15, 16, 17] {
            assert!(s.iter().any(|x| x.context == ctx && !x.random_lengths));
        }
        for g in [1, 4, 8] {
            assert!(s.iter().any(|x| x.heads_q / x.heads_kv == g));
        }
        for sq in [1, 4, 16] {
            assert!(s.iter().any(|x| x.seqlen_q == sq));
        }
        assert!(s.iter().any(|x| x.append > 0 && x.causal));
        // On an H100 some problems split their contexts and some need two row blocks.
        let h100 = crate::device::DeviceInfo::h100_sxm();
        let plans: Vec<DecodePlan> = s
            .iter()
            .map(|x| DecodePlan::new(&x.shape(&x.problem(1).unwrap()), &h100))
            .collect();
        assert!(plans.iter().filter(|p| p.splits > 1).count() >= 3);
        assert!(plans.iter().any(|p| p.m_groups > 1 && p.splits > 1));
        // the bad-table check runs with one split and with several
        let plan = |x: &DecodeSpec| DecodePlan::new(&x.shape(&x.problem(1).unwrap()), &h100);
        let [one, many, dense, padded] = bad_table_specs();
        assert_eq!(plan(&one).splits, 1);
        assert!(plan(&many).splits > 1);
        assert!(dense.dense && padded.left_pad);
        // left padding: dense and paged, one split and several
        let lp: Vec<&DecodeSpec> = s.iter().filter(|x| x.left_pad).collect();
        assert!(lp.iter().any(|x| x.dense) && lp.iter().any(|x| !x.dense));
        assert!(lp.iter().any(|x| plan(x).splits > 1));
        for x in &lp {
            let p = x.problem(5).unwrap();
            assert!(p.context_starts.iter().any(|&st| st > 0), "{}", x.label());
        }
        // dense caches: with and without lengths, and one that splits
        let d: Vec<&DecodeSpec> = s.iter().filter(|x| x.dense).collect();
        assert!(d.iter().any(|x| x.random_lengths) && d.iter().any(|x| !x.random_lengths));
        assert!(d.iter().any(|x| plan(x).splits > 1 && !x.random_lengths));
        assert!(d.iter().any(|x| x.append > 0));
    }

    #[test]
    fn a_dense_cache_is_one_page_per_sequence_in_bhsd_memory() {
        let spec = DecodeSpec {
            dense: true,
            random_lengths: true,
            context: 30,
            ..decode_suite()[0]
        };
        let p = spec.problem(3).unwrap();
        assert_eq!(
            (p.num_pages, p.page_size, p.max_pages),
            (3, 30 + DENSE_SPARE, 1)
        );
        assert_eq!(p.block_table, vec![0, 1, 2]);
        let s = spec.shape(&p);
        assert!(!s.paged && s.lengths);
        let (rows, d) = (30 + DENSE_SPARE, spec.head_dim);
        assert_eq!(s.strides.k, [rows * d, d, rows * d]); // one KV head
                                                          // without lengths, the cache is exactly the context
        let full = DecodeSpec {
            random_lengths: false,
            ..spec
        };
        assert_eq!(full.problem(1).unwrap().page_size, 30);
        assert!(!full.shape(&full.problem(1).unwrap()).lengths);
    }
}
