//! A packed batch of variable-length sequences: Q [total_q, H, D], K/V [total_k, Hkv, D], cumulative
//! offsets per sequence, bottom-right causal mask and a sliding window per sequence.

use std::ops::Range;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ops::attention::problem::check_heads;
use crate::ops::attention::Strides;
use crate::ops::gemm::DType;

/// Flash-attention's sliding window: query i of a sequence sees keys j with
/// i + sk − sq − left ≤ j ≤ i + sk − sq + right; −1 leaves that side unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Window {
    pub left: i64,
    pub right: i64,
}

impl Default for Window {
    fn default() -> Self {
        Window::UNBOUNDED
    }
}

impl Window {
    pub const UNBOUNDED: Window = Window {
        left: -1,
        right: -1,
    };

    /// Whether `left` and `right` are each -1 (unbounded) or at most `max_k` (the longest key
    /// sequence): one sentence naming the side otherwise.
    pub fn check(&self, max_k: usize) -> Result<()> {
        for (side, w) in [("left", self.left), ("right", self.right)] {
            if w < -1 || w > max_k as i64 {
                return Err(Error::invalid(format!(
                    "window {side} = {w} is outside -1..={max_k} (the longest key sequence); use -1 for no bound"
                )));
            }
        }
        Ok(())
    }

    /// `window L,R ` for a label, empty when unbounded.
    pub fn label(&self) -> String {
        if *self == Window::UNBOUNDED {
            String::new()
        } else {
            format!("window {},{} ", self.left, self.right)
        }
    }

    /// The kernels' (left, right) bounds: causal folded into `right`, an unbounded side as
    /// `unbounded`.
    pub fn bounds(&self, causal: bool, unbounded: i32) -> (i32, i32) {
        let side = |w: i64| if w < 0 { unbounded } else { w as i32 };
        let right = match (causal, self.right) {
            (true, r) if r < 0 => 0,
            (true, r) => r.min(0) as i32,
            (false, r) => side(r),
        };
        (side(self.left), right)
    }

    /// Keys `0..sk` that query `i` of a (sq, sk) sequence sees, with the causal mask (the same as
    /// right = 0) if `causal`; empty when none.
    pub fn visible(&self, causal: bool, i: usize, sq: usize, sk: usize) -> Range<usize> {
        let diag = i as i64 + sk as i64 - sq as i64;
        let right = match (causal, self.right) {
            (true, r) if r < 0 => Some(0),
            (true, r) => Some(r.min(0)),
            (false, r) if r < 0 => None,
            (false, r) => Some(r),
        };
        let lo = if self.left < 0 { 0 } else { diag - self.left };
        let hi = right.map_or(sk as i64, |r| diag + r + 1);
        let (lo, hi) = (lo.clamp(0, sk as i64), hi.clamp(0, sk as i64));
        lo as usize..hi.max(lo) as usize
    }
}

/// One packed attention call, flash-attention's `varlen` signature. Sequence s owns query rows
/// `cu_seqlens_q[s]..cu_seqlens_q[s+1]` and key rows `cu_seqlens_k[s]..cu_seqlens_k[s+1]`. LSE is
/// [H, total_q].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VarlenProblem {
    pub heads_q: usize,
    /// Key/value heads; must divide `heads_q`.
    pub heads_kv: usize,
    pub head_dim: usize,
    /// Rows of the packed Q (and O).
    pub total_q: usize,
    /// Rows of the packed K and V.
    pub total_k: usize,
    pub cu_seqlens_q: Vec<i32>,
    pub cu_seqlens_k: Vec<i32>,
    pub causal: bool,
    pub window: Window,
    pub scale: f32,
    pub dtype: DType,
}

/// A packed call without its offsets' contents (which may live on the GPU only): what the
/// kernel is specialised, sized and launched for. `max_q` and `max_k` are the longest query and
/// key sequences (flash-attention's `max_seqlen_q`, `max_seqlen_k`): the grid covers `max_q`
/// rows of every sequence, and the kernel checks each sequence's offsets against these bounds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VarlenShape {
    pub heads_q: usize,
    pub heads_kv: usize,
    pub head_dim: usize,
    pub total_q: usize,
    pub total_k: usize,
    /// Sequences (the offsets have one more entry).
    pub batch: usize,
    pub max_q: usize,
    pub max_k: usize,
    pub causal: bool,
    pub window: Window,
    pub scale: f32,
    pub dtype: DType,
}

/// A [`VarlenShape`] as a hashable key (the scale by its bits): what launches are memoised by,
/// and what a handle knows has run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VarlenKey {
    dims: [usize; 8],
    causal: bool,
    window: Window,
    scale_bits: u32,
    dtype: DType,
}

impl VarlenShape {
    pub fn key(&self) -> VarlenKey {
        VarlenKey {
            dims: [
                self.heads_q,
                self.heads_kv,
                self.head_dim,
                self.total_q,
                self.total_k,
                self.batch,
                self.max_q,
                self.max_k,
            ],
            causal: self.causal,
            window: self.window,
            scale_bits: self.scale.to_bits(),
            dtype: self.dtype,
        }
    }

    pub fn q_elems(&self) -> usize {
        self.total_q * self.heads_q * self.head_dim
    }
    pub fn kv_elems(&self) -> usize {
        self.total_k * self.heads_kv * self.head_dim
    }

    /// Checks heads, dims, the batch, the longest sequences against the packed lengths and
    /// the 32-bit indices, and the window.
    pub fn validate(&self) -> Result<()> {
        check_heads(
            self.heads_q,
            self.heads_kv,
            self.head_dim,
            self.dtype,
            self.scale,
        )?;
        if self.batch == 0 {
            return Err(Error::invalid(
                "the offsets have 1 entry; they need batch + 1 (at least 2)",
            ));
        }
        let i32_max = i32::MAX as usize;
        if self.total_q > i32_max || self.total_k > i32_max || self.batch > i32_max {
            return Err(Error::invalid(
                "the packed rows or the sequences exceed 2^31; split the batch",
            ));
        }
        if self.max_q > self.total_q || self.max_k > self.total_k {
            return Err(Error::invalid(format!(
                "the longest sequences ({}, {}) exceed the packed rows ({}, {})",
                self.max_q, self.max_k, self.total_q, self.total_k
            )));
        }
        if self.total_q > 0 && self.max_q == 0 {
            return Err(Error::invalid(format!(
                "max_seqlen_q is 0 but q has {} packed rows; give the longest query sequence",
                self.total_q
            )));
        }
        self.window.check(self.max_k)
    }
}

impl VarlenProblem {
    /// The launch shape: the sequences, and the longest of them as the offsets hold them.
    pub fn shape(&self) -> VarlenShape {
        let (max_q, max_k) = self.max_seqlens();
        VarlenShape {
            heads_q: self.heads_q,
            heads_kv: self.heads_kv,
            head_dim: self.head_dim,
            total_q: self.total_q,
            total_k: self.total_k,
            batch: self.batch(),
            max_q,
            max_k,
            causal: self.causal,
            window: self.window,
            scale: self.scale,
            dtype: self.dtype,
        }
    }

    /// Sequences of the given (query, key) lengths, MHA, scale 1/sqrt(d), not causal, no window.
    pub fn new(lengths: &[(usize, usize)], heads: usize, head_dim: usize) -> Self {
        let cumulative = |pick: fn(&(usize, usize)) -> usize| {
            std::iter::once(0)
                .chain(lengths.iter().scan(0, move |acc, l| {
                    *acc += pick(l) as i32;
                    Some(*acc)
                }))
                .collect::<Vec<i32>>()
        };
        let (cu_q, cu_k) = (cumulative(|l| l.0), cumulative(|l| l.1));
        VarlenProblem {
            heads_q: heads,
            heads_kv: heads,
            head_dim,
            total_q: *cu_q.last().unwrap_or(&0) as usize,
            total_k: *cu_k.last().unwrap_or(&0) as usize,
            cu_seqlens_q: cu_q,
            cu_seqlens_k: cu_k,
            causal: false,
            window: Window::UNBOUNDED,
            scale: 1.0 / (head_dim as f32).sqrt(),
            dtype: DType::Bf16,
        }
    }

    pub fn batch(&self) -> usize {
        self.cu_seqlens_q.len().saturating_sub(1)
    }
    pub fn group(&self) -> usize {
        self.heads_q / self.heads_kv.max(1)
    }
    /// Query and key rows of sequence `s` (a validated problem).
    pub fn rows(&self, s: usize) -> (Range<usize>, Range<usize>) {
        let r = |cu: &[i32]| cu[s] as usize..cu[s + 1] as usize;
        (r(&self.cu_seqlens_q), r(&self.cu_seqlens_k))
    }
    /// The longest query and key sequences (the kernels' grid).
    pub fn max_seqlens(&self) -> (usize, usize) {
        (0..self.batch())
            .map(|s| self.rows(s))
            .fold((0, 0), |(mq, mk), (q, k)| {
                (mq.max(q.len()), mk.max(k.len()))
            })
    }
    /// Strides of packed Q and O (batch 0; the row is the packed row).
    pub fn q_strides(&self) -> Strides {
        Strides {
            batch: 0,
            head: self.head_dim,
            seq: self.heads_q * self.head_dim,
        }
    }
    /// Strides of packed K and V.
    pub fn kv_strides(&self) -> Strides {
        Strides {
            batch: 0,
            head: self.head_dim,
            seq: self.heads_kv * self.head_dim,
        }
    }
    pub fn q_elems(&self) -> usize {
        self.total_q * self.heads_q * self.head_dim
    }
    pub fn kv_elems(&self) -> usize {
        self.total_k * self.heads_kv * self.head_dim
    }

    /// Checks the offsets against the packed lengths, then heads, dims and the window as the
    /// launch shape's ([`VarlenShape::validate`]).
    pub fn validate(&self) -> Result<()> {
        if self.cu_seqlens_q.len() != self.cu_seqlens_k.len() || self.cu_seqlens_q.len() < 2 {
            return Err(Error::invalid(format!(
                "cu_seqlens_q has {} entries and cu_seqlens_k {}; both need batch + 1 (at least 2)",
                self.cu_seqlens_q.len(),
                self.cu_seqlens_k.len()
            )));
        }
        check_offsets("cu_seqlens_q", &self.cu_seqlens_q, self.total_q, "Q")?;
        check_offsets("cu_seqlens_k", &self.cu_seqlens_k, self.total_k, "K/V")?;
        self.shape().validate()
    }
}

/// Offsets start at 0, never decrease and end at the packed length `total`.
fn check_offsets(name: &str, cu: &[i32], total: usize, tensor: &str) -> Result<()> {
    if cu[0] != 0 {
        return Err(Error::invalid(format!(
            "{name}[0] = {}; cumulative offsets start at 0",
            cu[0]
        )));
    }
    if let Some(s) = (1..cu.len()).find(|&s| cu[s] < cu[s - 1]) {
        return Err(Error::invalid(format!(
            "{name} decreases at entry {s} ({} after {}); offsets are cumulative lengths",
            cu[s],
            cu[s - 1]
        )));
    }
    let last = cu[cu.len() - 1] as usize;
    if last != total {
        let how = if last > total {
            "overruns"
        } else {
            "falls short of"
        };
        return Err(Error::invalid(format!(
            "{name} ends at {last}, which {how} the {total} rows of packed {tensor}; the last offset is the packed length"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_follows_flash_attention() {
        let w = |left, right| Window { left, right };
        // 3 queries over 5 keys: the diagonal of query i is key i + 2.
        assert_eq!(Window::UNBOUNDED.visible(false, 0, 3, 5), 0..5);
        assert_eq!(Window::UNBOUNDED.visible(true, 0, 3, 5), 0..3);
        assert_eq!(w(1, 0).visible(false, 1, 3, 5), 2..4);
        assert_eq!(w(0, 1).visible(false, 2, 3, 5), 4..5);
        assert_eq!(
            w(0, 1).visible(true, 2, 3, 5),
            4..5,
            "causal caps right at 0"
        );
        assert_eq!(
            w(-1, 0).visible(false, 1, 3, 5),
            Window::UNBOUNDED.visible(true, 1, 3, 5)
        );
        // 5 queries over 2 keys: all keys unmasked, then the first three see nothing if causal.
        assert_eq!(Window::UNBOUNDED.visible(false, 0, 5, 2), 0..2);
        assert!(Window::UNBOUNDED.visible(true, 2, 5, 2).is_empty());
        assert_eq!(w(0, 0).visible(true, 4, 5, 2), 1..2);
        assert!(w(0, 0).visible(false, 0, 5, 2).is_empty());
    }

    fn err(p: &VarlenProblem) -> String {
        p.validate().unwrap_err().to_string()
    }

    #[test]
    fn validation_names_each_bad_offset_and_window() {
        let ok = VarlenProblem::new(&[(3, 5), (4, 4), (0, 2)], 4, 64);
        assert_eq!(ok.cu_seqlens_q, vec![0, 3, 7, 7]);
        assert_eq!((ok.total_k, ok.max_seqlens()), (11, (4, 5)));
        ok.validate().unwrap();
        let e = err(&VarlenProblem {
            cu_seqlens_q: vec![0, 3, 2, 7],
            ..ok.clone()
        });
        assert!(e.contains("cu_seqlens_q decreases at entry 2"), "{e}");
        let e = err(&VarlenProblem {
            cu_seqlens_k: vec![1, 5, 9, 11],
            ..ok.clone()
        });
        assert!(e.contains("cu_seqlens_k[0] = 1"), "{e}");
        let e = err(&VarlenProblem {
            cu_seqlens_k: vec![0, 5, 9, 12],
            ..ok.clone()
        });
        assert!(e.contains("ends at 12, which overruns the 11 rows"), "{e}");
        let e = err(&VarlenProblem {
            total_q: 8,
            ..ok.clone()
        });
        assert!(e.contains("falls short of the 8 rows"), "{e}");
        let e = err(&VarlenProblem {
            window: Window { left: 6, right: 0 },
            ..ok.clone()
        });
        assert!(e.contains("window left = 6"), "{e}");
        let e = err(&VarlenProblem {
            cu_seqlens_k: vec![0, 11],
            ..ok.clone()
        });
        assert!(e.contains("batch + 1"), "{e}");
        let e = err(&VarlenProblem {
            heads_kv: 3,
            ..ok.clone()
        });
        assert!(e.contains("kv_heads = 3"), "{e}");
        VarlenProblem {
            window: Window { left: 5, right: -1 },
            ..ok
        }
        .validate()
        .unwrap();
    }
}
