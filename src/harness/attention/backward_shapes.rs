//! The attention backward's verification suite: the boundary lengths (1, 63, 64, 65, 127 and
//! 4097), causal and not, GQA, every head dim, both layouts, both dtypes, deterministic or not.

use crate::ops::attention::{AttnLayout, HEAD_DIMS};
use crate::ops::attention_backward::BackwardProblem;
use crate::ops::gemm::DType;

/// Lengths under, at and over the 64-row query block and its 128-key block's halves.
pub const SEQLENS: [usize; 5] = [1, 63, 64, 65, 127];

/// The suite: every (head dim, length, causal) with layouts, dtypes, head groupings and the
/// deterministic mode alternating; Sq ≠ Skv both ways; and 4097 keys at d64 and d128.
pub fn backward_suite() -> Vec<BackwardProblem> {
    use AttnLayout::{Bhsd, Bshd};
    let mut v = Vec::new();
    let mut n = 0usize;
    let mut push = |b, hq, hkv, sq, skv, d, causal: bool, v: &mut Vec<BackwardProblem>| {
        // causal alternates with n, so the layout follows n + n/2: both layouts for each
        let layout = if (n + n / 2).is_multiple_of(2) {
            Bshd
        } else {
            Bhsd
        };
        let dtype = if (n / 2).is_multiple_of(2) {
            DType::Bf16
        } else {
            DType::F16
        };
        let attn = super::shapes::problem(b, hq, hkv, sq, skv, d, causal, layout, dtype);
        v.push(BackwardProblem::new(attn, n % 3 == 2));
        n += 1;
    };
    for d in HEAD_DIMS {
        for s in SEQLENS {
            for causal in [false, true] {
                // one head, a GQA group of 2 and MQA (3 query heads over one) in turn
                let (hq, hkv) = [(1, 1), (4, 2), (3, 1)][(s + causal as usize) % 3];
                push(1, hq, hkv, s, s, d, causal, &mut v);
            }
        }
        // Sq ≠ Skv both ways (causal: bottom-right, rows above the diagonal see nothing).
        for (sq, skv) in [(1, 130), (130, 17), (65, 200), (200, 63)] {
            for causal in [false, true] {
                push(2, 4, 2, sq, skv, d, causal, &mut v);
            }
        }
    }
    for (d, causal) in [(64, true), (128, false)] {
        push(2, 4, 2, 4097, 4097, d, causal, &mut v);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::attention::backward_verify::{reference_work, REFERENCE_LIMIT};

    #[test]
    fn the_suite_covers_the_boundaries_and_fits_the_reference() {
        let s = backward_suite();
        for p in &s {
            p.validate()
                .unwrap_or_else(|e| panic!("{}: {e}", p.label()));
            assert!(reference_work(p) <= REFERENCE_LIMIT, "{}", p.label());
        }
        for len in SEQLENS.into_iter().chain([4097]) {
            assert!(s
                .iter()
                .any(|p| p.attn.seqlen_q == len && p.attn.seqlen_kv == len));
        }
        for d in HEAD_DIMS {
            for causal in [false, true] {
                for layout in AttnLayout::ALL {
                    assert!(
                        s.iter().any(|p| p.attn.head_dim == d
                            && p.attn.causal == causal
                            && p.attn.layout == layout),
                        "d{d} causal {causal} {layout}"
                    );
                }
                assert!(s.iter().any(|p| p.attn.head_dim == d && p.deterministic));
            }
        }
        assert!(s
            .iter()
            .any(|p| p.attn.heads_kv == 1 && p.attn.heads_q == 3));
        assert!(s
            .iter()
            .any(|p| p.attn.heads_kv == 2 && p.attn.heads_q == 4));
        assert!(s
            .iter()
            .any(|p| p.attn.seqlen_q > p.attn.seqlen_kv && p.attn.causal));
        assert!(s.iter().any(|p| p.attn.dtype == DType::F16));
        assert!(s.iter().any(|p| p.attn.dtype == DType::Bf16));
    }
}
