//! Attention shape suites.

use crate::harness::shapes::Suite;
use crate::ops::attention::{AttentionProblem, AttnLayout, HEAD_DIMS};
use crate::ops::gemm::DType;

/// The sequence lengths every suite crosses: 1, one under/at/over a 128 tile, and odd sizes.
pub const SEQLENS: [usize; 6] = [1, 17, 127, 128, 129, 1000];

#[allow(clippy::too_many_arguments)]
fn problem(
    b: usize,
    hq: usize,
    hkv: usize,
    sq: usize,
    skv: usize,
    d: usize,
    causal: bool,
    layout: AttnLayout,
    dtype: DType,
) -> AttentionProblem {
    AttentionProblem {
        heads_kv: hkv,
        seqlen_q: sq,
        seqlen_kv: skv,
        causal,
        layout,
        dtype,
        ..AttentionProblem::new(b, hq, sq, d)
    }
}

/// The attention problems of `suite`.
pub fn attention_suite(suite: Suite) -> Vec<AttentionProblem> {
    use AttnLayout::{Bhsd, Bshd};
    use DType::{Bf16, F16};
    let mut v = Vec::new();
    match suite {
        Suite::Quick => {
            v.push(problem(1, 1, 1, 1, 1, 64, false, Bshd, Bf16));
            v.push(problem(1, 2, 2, 17, 17, 64, true, Bhsd, F16));
            v.push(problem(2, 4, 2, 128, 128, 128, true, Bshd, Bf16));
            v.push(problem(1, 2, 1, 129, 1000, 128, false, Bhsd, Bf16));
            v.push(problem(1, 2, 2, 1000, 129, 128, true, Bshd, F16));
            v.push(problem(1, 2, 2, 127, 127, 256, true, Bshd, Bf16));
            v.push(problem(1, 3, 1, 300, 257, 256, false, Bhsd, F16));
        }
        Suite::Full => {
            let mut n = 0usize;
            for d in HEAD_DIMS {
                for s in SEQLENS {
                    for causal in [false, true] {
                        let layout = if n.is_multiple_of(2) { Bshd } else { Bhsd };
                        let dtype = if (n / 2).is_multiple_of(2) { Bf16 } else { F16 };
                        // one head (MHA) and grouped heads alternate
                        let (hq, hkv) = if n.is_multiple_of(3) {
                            (1, 1)
                        } else if n % 3 == 1 {
                            (4, 2)
                        } else {
                            (3, 1)
                        };
                        v.push(problem(1, hq, hkv, s, s, d, causal, layout, dtype));
                        n += 1;
                    }
                }
                // Sq != Skv both ways (causal: bottom-right, rows above the diagonal see nothing).
                for (sq, skv) in [(1, 1000), (1000, 17), (17, 129), (129, 127), (128, 1)] {
                    for causal in [false, true] {
                        let layout = if n.is_multiple_of(2) { Bhsd } else { Bshd };
                        let dtype = if n.is_multiple_of(3) { F16 } else { Bf16 };
                        v.push(problem(1, 2, 1, sq, skv, d, causal, layout, dtype));
                        n += 1;
                    }
                }
                v.push(problem(3, 8, 2, 129, 129, d, true, Bshd, Bf16));
            }
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suites_are_valid_and_cover_the_boundaries() {
        for s in [Suite::Quick, Suite::Full] {
            for p in attention_suite(s) {
                p.validate()
                    .unwrap_or_else(|e| panic!("{}: {e}", p.label()));
            }
        }
        let full = attention_suite(Suite::Full);
        for len in SEQLENS {
            assert!(full.iter().any(|p| p.seqlen_q == len && p.seqlen_kv == len));
        }
        for d in HEAD_DIMS {
            for causal in [false, true] {
                for layout in AttnLayout::ALL {
                    assert!(
                        full.iter()
                            .any(|p| p.head_dim == d && p.causal == causal && p.layout == layout),
                        "d{d} {causal} {layout}"
                    );
                }
            }
        }
        assert!(full.iter().any(|p| p.seqlen_q != p.seqlen_kv && p.causal));
        assert!(full.iter().any(|p| p.heads_kv < p.heads_q));
        assert!(full.iter().any(|p| p.heads_q == 1 && p.batch == 1));
        assert!(
            full.iter().any(|p| p.dtype == DType::F16)
                && full.iter().any(|p| p.dtype == DType::Bf16)
        );
    }
}
