//! Decode over a paged KV cache: 1–16 query tokens per sequence against K/V stored in pages
//! [num_pages, page_size, Hkv, D], found through a block table per sequence.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ops::attention::problem::check_heads;
use crate::ops::gemm::DType;

/// Page sizes (tokens per page) the decode kernels take.
pub const PAGE_SIZES: [usize; 3] = [16, 64, 256];
/// The most query tokens per sequence a decode step takes.
pub const MAX_DECODE_QUERIES: usize = 16;

/// One decode step, flash-attention's `with_kvcache` shape. Q and O are [batch, seqlen_q, H, D],
/// LSE [batch, H, seqlen_q]. Sequence b's queries attend to its first `context_lens[b]` cached
/// tokens, the new ones included (they are the last `seqlen_q`), aligned bottom-right if causal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PagedProblem {
    pub batch: usize,
    pub heads_q: usize,
    /// Key/value heads; must divide `heads_q`.
    pub heads_kv: usize,
    pub head_dim: usize,
    /// Query tokens per sequence, 1 to 16.
    pub seqlen_q: usize,
    pub num_pages: usize,
    pub page_size: usize,
    /// Columns of the block table: the most pages one sequence holds.
    pub max_pages: usize,
    /// [batch, max_pages] page ids; entries past a sequence's context are not read.
    pub block_table: Vec<i32>,
    /// [batch] cached tokens each sequence attends to.
    pub context_lens: Vec<i32>,
    /// [batch] each sequence's first key (left padding: keys before it are not attended to);
    /// empty: every sequence starts at 0.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context_starts: Vec<i32>,
    pub causal: bool,
    pub scale: f32,
    pub dtype: DType,
}

/// The decode problems' first checks (paged and dense caches alike): a batch, the heads and
/// their dims ([`check_heads`]), 1 to [`MAX_DECODE_QUERIES`] query tokens per sequence.
pub(crate) fn check_decode_queries(
    batch: usize,
    (heads_q, heads_kv, head_dim): (usize, usize, usize),
    seqlen_q: usize,
    dtype: DType,
    scale: f32,
) -> Result<()> {
    if batch == 0 {
        return Err(Error::invalid("batch is 0; it must be at least 1"));
    }
    check_heads(heads_q, heads_kv, head_dim, dtype, scale)?;
    if !(1..=MAX_DECODE_QUERIES).contains(&seqlen_q) {
        return Err(Error::invalid(format!(
            "seqlen_q = {seqlen_q} query tokens per sequence; decode takes 1 to {MAX_DECODE_QUERIES}"
        )));
    }
    Ok(())
}

impl PagedProblem {
    pub fn group(&self) -> usize {
        self.heads_q / self.heads_kv.max(1)
    }
    /// Element offset of token `t` of sequence `b`, head `h`, in the K or V cache: page
    /// block_table[b][t / page_size], slot t % page_size (a validated problem).
    pub fn cache_offset(&self, b: usize, t: usize, h: usize) -> usize {
        let page = self.block_table[b * self.max_pages + t / self.page_size] as usize;
        ((page * self.page_size + t % self.page_size) * self.heads_kv + h) * self.head_dim
    }
    pub fn context(&self, b: usize) -> usize {
        self.context_lens[b].max(0) as usize
    }
    /// Sequence `b`'s first key (a validated problem).
    pub fn start(&self, b: usize) -> usize {
        self.context_starts.get(b).map_or(0, |&s| s.max(0) as usize)
    }
    pub fn q_elems(&self) -> usize {
        self.batch * self.seqlen_q * self.heads_q * self.head_dim
    }
    pub fn cache_elems(&self) -> usize {
        self.num_pages * self.page_size * self.heads_kv * self.head_dim
    }

    /// Checks heads, dims, the page size, and that every page a context needs exists.
    pub fn validate(&self) -> Result<()> {
        check_decode_queries(
            self.batch,
            (self.heads_q, self.heads_kv, self.head_dim),
            self.seqlen_q,
            self.dtype,
            self.scale,
        )?;
        if !PAGE_SIZES.contains(&self.page_size) {
            return Err(Error::invalid(format!(
                "page size {} is not supported; use 16, 64 or 256",
                self.page_size
            )));
        }
        if self.block_table.len() != self.batch * self.max_pages
            || self.context_lens.len() != self.batch
        {
            return Err(Error::invalid(format!(
                "the block table has {} entries and context_lens {}; batch {} needs {} ({} per sequence) and {}",
                self.block_table.len(),
                self.context_lens.len(),
                self.batch,
                self.batch * self.max_pages,
                self.max_pages,
                self.batch
            )));
        }
        if !self.context_starts.is_empty() && self.context_starts.len() != self.batch {
            return Err(Error::invalid(format!(
                "context_starts has {} entries; batch {} needs one per sequence (or none)",
                self.context_starts.len(),
                self.batch
            )));
        }
        for b in 0..self.batch {
            let ctx = self.context_lens[b];
            let room = self.max_pages * self.page_size;
            if ctx < 0 || ctx as usize > room {
                return Err(Error::invalid(format!(
                    "context_lens[{b}] = {ctx} does not fit the {} pages of {} tokens a sequence holds ({room} tokens); give more pages or a shorter context",
                    self.max_pages, self.page_size
                )));
            }
            let start = self.context_starts.get(b).copied().unwrap_or(0);
            if start < 0 || start > ctx {
                return Err(Error::invalid(format!(
                    "context_starts[{b}] = {start} is outside 0..={ctx} (its context length); a sequence's keys start within it"
                )));
            }
            // (pages wholly before the first key are never read)
            let (first, pages) = (
                start as usize / self.page_size,
                (ctx as usize).div_ceil(self.page_size),
            );
            let row = &self.block_table[b * self.max_pages..b * self.max_pages + pages];
            if let Some((j, &id)) = row
                .iter()
                .enumerate()
                .skip(first)
                .find(|(_, &id)| id < 0 || id as usize >= self.num_pages)
            {
                return Err(Error::invalid(format!(
                    "block_table[{b}][{j}] = {id} is outside the cache's {} pages (0..{})",
                    self.num_pages, self.num_pages
                )));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn two_sequences() -> PagedProblem {
        PagedProblem {
            batch: 2,
            heads_q: 4,
            heads_kv: 2,
            head_dim: 64,
            seqlen_q: 3,
            num_pages: 6,
            page_size: 16,
            max_pages: 3,
            // Pages out of order, and an unused entry left at -1.
            block_table: vec![4, 0, 2, 5, 1, -1],
            context_lens: vec![40, 20],
            context_starts: Vec::new(),
            causal: true,
            scale: 0.125,
            dtype: DType::Bf16,
        }
    }

    fn err(p: &PagedProblem) -> String {
        p.validate().unwrap_err().to_string()
    }

    #[test]
    fn validation_names_each_bad_page() {
        let ok = two_sequences();
        ok.validate().unwrap();
        // token 37 of sequence 0 sits in its third page (id 2), slot 5
        assert_eq!(ok.cache_offset(0, 37, 1), ((2 * 16 + 5) * 2 + 1) * 64);
        let e = err(&PagedProblem {
            page_size: 32,
            ..ok.clone()
        });
        assert!(e.contains("page size 32"), "{e}");
        let e = err(&PagedProblem {
            block_table: vec![4, 0, 6, 5, 1, -1],
            ..ok.clone()
        });
        assert!(
            e.contains("block_table[0][2] = 6 is outside the cache's 6 pages"),
            "{e}"
        );
        let e = err(&PagedProblem {
            context_lens: vec![40, 33],
            block_table: vec![4, 0, 2, 5, 1, -1],
            ..ok.clone()
        });
        assert!(e.contains("block_table[1][2] = -1"), "{e}");
        let e = err(&PagedProblem {
            context_lens: vec![49, 20],
            ..ok.clone()
        });
        assert!(e.contains("context_lens[0] = 49 does not fit"), "{e}");
        let e = err(&PagedProblem {
            seqlen_q: 17,
            ..ok.clone()
        });
        assert!(e.contains("seqlen_q = 17"), "{e}");
        // left padding: a first key within the length; pages wholly before it are not read
        let e = err(&PagedProblem {
            context_starts: vec![0, 21],
            ..ok.clone()
        });
        assert!(
            e.contains("context_starts[1] = 21 is outside 0..=20"),
            "{e}"
        );
        PagedProblem {
            block_table: vec![-1, 0, 2, 5, 1, -1],
            context_starts: vec![16, 0],
            ..ok.clone()
        }
        .validate()
        .unwrap();
        assert!(err(&PagedProblem {
            context_starts: vec![0],
            ..ok.clone()
        })
        .contains("one per sequence"));
        let e = err(&PagedProblem {
            block_table: vec![4, 0, 2],
            ..ok
        });
        assert!(e.contains("block table has 3 entries"), "{e}");
    }
}
