//! Float64 attention backward: dQ, dK, dV (dK and dV summed over the query heads of a group) and
//! D = rowsum(dO ∘ O) for every row, reading every operand with the problem's layout.

use rayon::prelude::*;

use crate::ops::attention::AttentionProblem;
use crate::reference::attention_head::{gather, group_backward, scatter, HeadBackward};

/// Gradients of L = Σ dO ∘ O: dQ in Q's layout, dK and dV in K's, D as LSE is stored, [B, H, Sq].
#[derive(Debug, Clone, PartialEq)]
pub struct Gradients {
    pub dq: Vec<f64>,
    pub dk: Vec<f64>,
    pub dv: Vec<f64>,
    pub delta: Vec<f64>,
}

/// D = rowsum(dO ∘ O) from a given O (the kernels' first pass computes it from their own O),
/// laid out [B, H, Sq].
pub fn softmax_delta(p: &AttentionProblem, o: &[f64], d_o: &[f64]) -> Vec<f64> {
    let (qs, d) = (p.q_strides(), p.head_dim);
    (0..p.batch)
        .flat_map(|b| (0..p.heads_q).flat_map(move |h| (0..p.seqlen_q).map(move |i| (b, h, i))))
        .map(|(b, h, i)| {
            let at = qs.offset(b, h, i);
            o[at..at + d]
                .iter()
                .zip(&d_o[at..at + d])
                .map(|(x, y)| x * y)
                .sum()
        })
        .collect()
}

/// The backward of every row; `q`, `k`, `v`, `d_o` are the stored elements as f64 (dO in Q's
/// layout). A query that sees no key gets zero gradients.
pub fn attention_backward(
    p: &AttentionProblem,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    d_o: &[f64],
) -> Gradients {
    let (qs, ks, vs, d) = (p.q_strides(), p.k_strides(), p.v_strides(), p.head_dim);
    let spans: Vec<_> = (0..p.seqlen_q).map(|i| p.visible(i)).collect();
    let groups: Vec<(usize, usize)> = (0..p.batch)
        .flat_map(|b| (0..p.heads_kv).map(move |hk| (b, hk)))
        .collect();
    // One task per key/value head: its query heads' dQ, and their dK, dV summed.
    let per_group: Vec<(Vec<HeadBackward>, Vec<f64>, Vec<f64>)> = groups
        .par_iter()
        .map(|&(b, hk)| {
            let kh = gather(k, &ks, b, hk, 0..p.seqlen_kv, d);
            let vh = gather(v, &vs, b, hk, 0..p.seqlen_kv, d);
            group_backward(
                hk * p.group()..(hk + 1) * p.group(),
                (&kh, &vh),
                (d, p.scale as f64),
                &spans,
                |h| {
                    (
                        gather(q, &qs, b, h, 0..p.seqlen_q, d),
                        gather(d_o, &qs, b, h, 0..p.seqlen_q, d),
                    )
                },
            )
        })
        .collect();
    let mut out = Gradients {
        dq: vec![0.0; p.q_elems()],
        dk: vec![0.0; p.kv_elems()],
        dv: vec![0.0; p.kv_elems()],
        delta: vec![0.0; p.lse_elems()],
    };
    for (&(b, hk), (heads, dk, dv)) in groups.iter().zip(per_group) {
        scatter(&mut out.dk, &dk, &ks, b, hk, 0, d);
        scatter(&mut out.dv, &dv, &ks, b, hk, 0, d);
        for (g, h) in heads.iter().zip(hk * p.group()..) {
            scatter(&mut out.dq, &g.dq, &qs, b, h, 0, d);
            let at = (b * p.heads_q + h) * p.seqlen_q;
            out.delta[at..at + p.seqlen_q].copy_from_slice(&g.delta);
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::ops::attention::AttnLayout;
    use crate::ops::gemm::DType;
    use crate::reference::attention::attention_rows;
    use crate::reference::data::HostData;

    pub(crate) fn random(len: usize, seed: u64) -> Vec<f64> {
        HostData::random(DType::F32, len, seed).to_f64()
    }

    /// Central differences of `loss` in every element of `x`, against `analytic`:
    /// max |fd − analytic| ≤ 1e-6 · max |analytic|.
    pub(crate) fn check_gradient(
        what: &str,
        x: &[f64],
        analytic: &[f64],
        loss: impl Fn(&[f64]) -> f64,
    ) {
        const H: f64 = 1e-5;
        let mut xs = x.to_vec();
        let mut worst: f64 = 0.0;
        for e in 0..x.len() {
            xs[e] = x[e] + H;
            let up = loss(&xs);
            xs[e] = x[e] - H;
            let down = loss(&xs);
            xs[e] = x[e];
            worst = worst.max(((up - down) / (2.0 * H) - analytic[e]).abs());
        }
        let scale = analytic.iter().fold(0.0f64, |m, a| m.max(a.abs()));
        assert!(scale > 0.0, "{what}: all-zero gradient proves nothing");
        assert!(
            worst <= 1e-6 * scale,
            "{what}: off by {worst:e} of {scale:e}"
        );
    }

    /// L = Σ dO ∘ O, O from the forward reference.
    fn loss(p: &AttentionProblem, q: &[f64], k: &[f64], v: &[f64], d_o: &[f64]) -> f64 {
        let rows: Vec<usize> = (0..p.seqlen_q).collect();
        let qs = p.q_strides();
        attention_rows(p, q, k, v, &rows)
            .iter()
            .map(|r| {
                let at = qs.offset(r.b, r.h, r.i);
                r.o.iter().zip(&d_o[at..]).map(|(x, y)| x * y).sum::<f64>()
            })
            .sum()
    }

    #[test]
    fn gradients_match_finite_differences() {
        // GQA ratio 2; wide (3 over 5) and tall (5 over 3: causal hides rows 0 and 1) problems.
        for (sq, sk) in [(3, 5), (5, 3)] {
            for causal in [false, true] {
                for layout in AttnLayout::ALL {
                    let p = AttentionProblem {
                        heads_kv: 2,
                        seqlen_q: sq,
                        seqlen_kv: sk,
                        causal,
                        layout,
                        scale: 0.6,
                        ..AttentionProblem::new(2, 4, sq, 4)
                    };
                    let (q, k, v) = (
                        random(p.q_elems(), 1),
                        random(p.kv_elems(), 2),
                        random(p.kv_elems(), 3),
                    );
                    let d_o = random(p.q_elems(), 4);
                    let g = attention_backward(&p, &q, &k, &v, &d_o);
                    let what = p.label();
                    check_gradient(&format!("dQ {what}"), &q, &g.dq, |x| {
                        loss(&p, x, &k, &v, &d_o)
                    });
                    check_gradient(&format!("dK {what}"), &k, &g.dk, |x| {
                        loss(&p, &q, x, &v, &d_o)
                    });
                    check_gradient(&format!("dV {what}"), &v, &g.dv, |x| {
                        loss(&p, &q, &k, x, &d_o)
                    });
                }
            }
        }
    }

    #[test]
    fn fully_masked_rows_get_zero_gradients_and_delta_matches_o() {
        // Causal 4 queries over 2 keys: rows 0 and 1 see nothing, rows 2 and 3 one and two keys.
        let p = AttentionProblem {
            causal: true,
            heads_kv: 1,
            seqlen_q: 4,
            seqlen_kv: 2,
            layout: AttnLayout::Bhsd,
            ..AttentionProblem::new(1, 2, 4, 8)
        };
        let (q, k, v) = (
            random(p.q_elems(), 5),
            random(p.kv_elems(), 6),
            random(p.kv_elems(), 7),
        );
        let d_o = random(p.q_elems(), 8);
        let g = attention_backward(&p, &q, &k, &v, &d_o);
        assert!(g.dq.iter().chain(&g.dk).chain(&g.dv).all(|x| x.is_finite()));
        let qs = p.q_strides();
        for h in 0..2 {
            for i in 0..2 {
                let at = qs.offset(0, h, i);
                assert!(g.dq[at..at + 8].iter().all(|x| *x == 0.0), "h{h} row {i}");
            }
            // row 2 sees one key (P = 1, so dS = 0), row 3 two
            assert!(g.dq[qs.offset(0, h, 3)..][..8].iter().any(|x| *x != 0.0));
        }
        // D from the forward reference's O equals the backward's own.
        let mut o = vec![0.0; p.q_elems()];
        for r in attention_rows(&p, &q, &k, &v, &[0, 1, 2, 3]) {
            let at = qs.offset(r.b, r.h, r.i);
            o[at..at + 8].copy_from_slice(&r.o);
        }
        let delta = softmax_delta(&p, &o, &d_o);
        assert_eq!(delta[0], 0.0);
        for (a, b) in delta.iter().zip(&g.delta) {
            assert!((a - b).abs() < 1e-14, "{a} vs {b}");
        }
    }
}
