//! Attention shape suites.

use crate::harness::shapes::Suite;
use crate::ops::attention::{AttentionProblem, AttnLayout, OperandStrides, Strides, HEAD_DIMS};
use crate::ops::gemm::DType;

/// The sequence lengths every suite crosses: 1, one under/at/over a 128 tile, and odd sizes.
pub const SEQLENS: [usize; 6] = [1, 17, 127, 128, 129, 1000];

/// One problem of a suite: batch, heads (query, key/value), lengths (query, key), head dim,
/// mask, layout and dtype.
#[allow(clippy::too_many_arguments)]
pub(super) fn problem(
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

/// Where a strided problem's tensors lie: the arrangements a model hands kiln without copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrangement {
    /// transformers with a KV cache: Q and O packed BSHD (Q a transposed view of the projection),
    /// K and V BHSD in a cache with room for 40 more tokens (each its own cache).
    Cache,
    /// Q, K and V slices of one fused projection [B, S, Hq + 2 Hkv, D]; O BHSD.
    Fused,
    /// Q BHSD, K BSHD, V BHSD with 24 spare rows per head, O BSHD rows of Hq·D + 64.
    Mixed,
}

/// The strides of `arrangement` for a problem of these extents.
pub fn arranged(
    a: Arrangement,
    (_, hq, hkv, sq, sk, d): (usize, usize, usize, usize, usize, usize),
) -> OperandStrides {
    let st = |batch, head, seq| Strides { batch, head, seq };
    let bshd = |h: usize, s: usize| st(s * h * d, d, h * d);
    let bhsd = |h: usize, s: usize| st(h * s * d, s * d, d);
    match a {
        Arrangement::Cache => OperandStrides {
            q: bshd(hq, sq),
            k: bhsd(hkv, sk + 40),
            v: bhsd(hkv, sk + 40),
            o: bshd(hq, sq),
        },
        Arrangement::Fused => {
            let row = (hq + 2 * hkv) * d;
            let f = st(sq * row, d, row);
            OperandStrides {
                q: f,
                k: f,
                v: f,
                o: bhsd(hq, sq),
            }
        }
        Arrangement::Mixed => OperandStrides {
            q: bhsd(hq, sq),
            k: bshd(hkv, sk),
            v: bhsd(hkv, sk + 24),
            o: st(sq * (hq * d + 64), d, hq * d + 64),
        },
    }
}

/// Problems whose Q, K, V and O each have their own strides (`kiln attn verify --strided`):
/// every arrangement at each head dim, GQA, causal and not, a decode-like single query, ragged
/// lengths and both dtypes.
pub fn strided_suite() -> Vec<AttentionProblem> {
    use Arrangement::{Cache, Fused, Mixed};
    type Extents = (usize, usize, usize, usize, usize, usize);
    let rows: [(Arrangement, Extents, bool); 9] = [
        (Cache, (2, 8, 2, 1, 300, 128), false),
        (Cache, (3, 16, 4, 200, 700, 128), true),
        (Cache, (2, 4, 2, 128, 4097, 64), true),
        (Cache, (1, 8, 1, 129, 129, 256), true),
        (Fused, (2, 8, 2, 129, 129, 64), true),
        (Fused, (1, 4, 4, 300, 300, 256), false),
        (Fused, (2, 12, 4, 1000, 1000, 128), true),
        (Mixed, (1, 4, 4, 17, 1000, 256), true),
        (Mixed, (1, 2, 1, 1000, 1000, 64), false),
    ];
    rows.iter()
        .enumerate()
        .map(|(n, &(a, e, causal))| {
            let (b, hq, hkv, sq, sk, d) = e;
            let dtype = if n % 2 == 1 { DType::F16 } else { DType::Bf16 };
            AttentionProblem {
                strides: Some(arranged(a, e)),
                ..problem(b, hq, hkv, sq, sk, d, causal, AttnLayout::Bshd, dtype)
            }
        })
        .collect()
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

    #[test]
    fn the_strided_suite_is_valid_and_not_packed() {
        let s = strided_suite();
        for p in &s {
            p.validate()
                .unwrap_or_else(|e| panic!("{}: {e}", p.label()));
            let st = p.strides.unwrap();
            assert!(st.q != st.k || st.o != st.q, "{}", p.label());
            // each span holds the tensor: its last element inside
            let [q, k, ..] = p.spans();
            assert!(q >= p.q_elems() && k >= p.kv_elems());
        }
        for d in HEAD_DIMS {
            assert!(s.iter().any(|p| p.head_dim == d));
        }
        assert!(s.iter().any(|p| p.seqlen_q == 1) && s.iter().any(|p| p.causal));
        // the cache arrangement: K is BHSD with 40 spare rows, Q BSHD
        let c = arranged(Arrangement::Cache, (2, 8, 2, 1, 300, 128));
        assert_eq!((c.k.head, c.k.seq, c.q.seq), (340 * 128, 128, 8 * 128));
    }
}
