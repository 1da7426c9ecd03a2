//! Float64 attention over a packed batch of variable-length sequences: O, LSE and the gradients,
//! each sequence on its own with its bottom-right causal mask and sliding window.

use std::ops::Range;

use rayon::prelude::*;

use crate::ops::attention::varlen::VarlenProblem;
use crate::reference::attention_backward::Gradients;
use crate::reference::attention_head::{gather, group_backward, scatter, Head};

/// O in Q's packed layout [total_q, H, D] and LSE [H, total_q].
#[derive(Debug, Clone, PartialEq)]
pub struct VarlenForward {
    pub o: Vec<f64>,
    pub lse: Vec<f64>,
}

/// The keys each query row of sequence `s` sees.
fn spans(p: &VarlenProblem, s: usize) -> Vec<Range<usize>> {
    let (rq, rk) = p.rows(s);
    (0..rq.len())
        .map(|i| p.window.visible(p.causal, i, rq.len(), rk.len()))
        .collect()
}

/// Every (sequence, key/value head), the unit each task owns.
fn groups(p: &VarlenProblem) -> Vec<(usize, usize)> {
    (0..p.batch())
        .flat_map(|s| (0..p.heads_kv).map(move |hk| (s, hk)))
        .collect()
}

/// The forward of every row of a validated problem; `q`, `k`, `v` packed as f64.
pub fn varlen_forward(p: &VarlenProblem, q: &[f64], k: &[f64], v: &[f64]) -> VarlenForward {
    let (qs, ks, d) = (p.q_strides(), p.kv_strides(), p.head_dim);
    let work: Vec<(usize, usize)> = (0..p.batch())
        .flat_map(|s| (0..p.heads_q).map(move |h| (s, h)))
        .collect();
    let heads: Vec<_> = work
        .par_iter()
        .map(|&(s, h)| {
            let (rq, rk) = p.rows(s);
            let (qh, kh, vh) = (
                gather(q, &qs, 0, h, rq, d),
                gather(k, &ks, 0, h / p.group(), rk.clone(), d),
                gather(v, &ks, 0, h / p.group(), rk, d),
            );
            let head = Head {
                q: &qh,
                k: &kh,
                v: &vh,
                dim: d,
                scale: p.scale as f64,
            };
            head.forward(&spans(p, s))
        })
        .collect();
    let mut out = VarlenForward {
        o: vec![0.0; p.q_elems()],
        lse: vec![0.0; p.heads_q * p.total_q],
    };
    for (&(s, h), f) in work.iter().zip(heads) {
        let rq = p.rows(s).0;
        scatter(&mut out.o, &f.o, &qs, 0, h, rq.start, d);
        out.lse[h * p.total_q + rq.start..h * p.total_q + rq.end].copy_from_slice(&f.lse);
    }
    out
}

/// The backward of every row of a validated problem: dQ packed like Q, dK and dV like K (summed
/// over each group's query heads), D = rowsum(dO ∘ O) laid out like LSE, [H, total_q].
pub fn varlen_backward(
    p: &VarlenProblem,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    d_o: &[f64],
) -> Gradients {
    let (qs, ks, d) = (p.q_strides(), p.kv_strides(), p.head_dim);
    let groups = groups(p);
    let per_group: Vec<_> = groups
        .par_iter()
        .map(|&(s, hk)| {
            let (rq, rk) = p.rows(s);
            let kh = gather(k, &ks, 0, hk, rk.clone(), d);
            let vh = gather(v, &ks, 0, hk, rk, d);
            let spans = spans(p, s);
            group_backward(
                hk * p.group()..(hk + 1) * p.group(),
                (&kh, &vh),
                (d, p.scale as f64),
                &spans,
                |h| {
                    (
                        gather(q, &qs, 0, h, rq.clone(), d),
                        gather(d_o, &qs, 0, h, rq.clone(), d),
                    )
                },
            )
        })
        .collect();
    let mut out = Gradients {
        dq: vec![0.0; p.q_elems()],
        dk: vec![0.0; p.kv_elems()],
        dv: vec![0.0; p.kv_elems()],
        delta: vec![0.0; p.heads_q * p.total_q],
    };
    for (&(s, hk), (heads, dk, dv)) in groups.iter().zip(per_group) {
        let (rq, rk) = p.rows(s);
        scatter(&mut out.dk, &dk, &ks, 0, hk, rk.start, d);
        scatter(&mut out.dv, &dv, &ks, 0, hk, rk.start, d);
        for (g, h) in heads.iter().zip(hk * p.group()..) {
            scatter(&mut out.dq, &g.dq, &qs, 0, h, rq.start, d);
            let at = h * p.total_q;
            out.delta[at + rq.start..at + rq.end].copy_from_slice(&g.delta);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::varlen::Window;
    use crate::ops::attention::{AttentionProblem, AttnLayout};
    use crate::reference::attention::attention_rows;
    use crate::reference::attention_backward::attention_backward;
    use crate::reference::attention_backward::tests::{check_gradient, random};

    /// Sequence `s`'s rows of a packed [total, heads, d] tensor, as a dense [1, len, heads, d].
    fn unpack(x: &[f64], rows: Range<usize>, heads: usize, d: usize) -> Vec<f64> {
        x[rows.start * heads * d..rows.end * heads * d].to_vec()
    }

    fn close(a: &[f64], b: &[f64], what: &str) {
        assert_eq!(a.len(), b.len(), "{what}");
        for (i, (x, y)) in a.iter().zip(b).enumerate() {
            assert!(
                (x - y).abs() <= 1e-12 * (1.0 + y.abs()),
                "{what}[{i}]: {x} vs {y}"
            );
        }
    }

    #[test]
    fn a_packed_batch_equals_one_dense_call_per_sequence() {
        // Wide, tall (causal hides rows), square, empty-query and single-row sequences; GQA 2.
        let lengths = [(3, 5), (6, 2), (4, 4), (0, 3), (1, 1)];
        for causal in [false, true] {
            let p = VarlenProblem {
                heads_kv: 2,
                causal,
                ..VarlenProblem::new(&lengths, 4, 64)
            };
            p.validate().unwrap();
            let (q, k, v) = (
                random(p.q_elems(), 11),
                random(p.kv_elems(), 12),
                random(p.kv_elems(), 13),
            );
            let d_o = random(p.q_elems(), 14);
            let f = varlen_forward(&p, &q, &k, &v);
            let g = varlen_backward(&p, &q, &k, &v, &d_o);
            for (s, &(sq, sk)) in lengths.iter().enumerate() {
                let (rq, rk) = p.rows(s);
                let dense = AttentionProblem {
                    heads_kv: 2,
                    seqlen_q: sq,
                    seqlen_kv: sk,
                    causal,
                    layout: AttnLayout::Bshd,
                    scale: p.scale,
                    ..AttentionProblem::new(1, 4, sq, 64)
                };
                let (dq_, dk_, dv_) = (
                    unpack(&q, rq.clone(), 4, 64),
                    unpack(&k, rk.clone(), 2, 64),
                    unpack(&v, rk.clone(), 2, 64),
                );
                let rows: Vec<usize> = (0..sq).collect();
                for r in attention_rows(&dense, &dq_, &dk_, &dv_, &rows) {
                    let at = p.q_strides().offset(0, r.h, rq.start + r.i);
                    close(
                        &f.o[at..at + 64],
                        &r.o,
                        &format!("O s{s} h{} i{}", r.h, r.i),
                    );
                    let lse = f.lse[r.h * p.total_q + rq.start + r.i];
                    assert!(lse == r.lse || (lse - r.lse).abs() < 1e-12, "LSE s{s}");
                }
                let dense_g =
                    attention_backward(&dense, &dq_, &dk_, &dv_, &unpack(&d_o, rq.clone(), 4, 64));
                close(
                    &unpack(&g.dq, rq.clone(), 4, 64),
                    &dense_g.dq,
                    &format!("dQ s{s}"),
                );
                close(
                    &unpack(&g.dk, rk.clone(), 2, 64),
                    &dense_g.dk,
                    &format!("dK s{s}"),
                );
                close(&unpack(&g.dv, rk, 2, 64), &dense_g.dv, &format!("dV s{s}"));
            }
        }
    }

    #[test]
    fn empty_sequences_have_zero_gradients_and_the_rest_are_each_alone() {
        // No keys (rows 3..7): zero dQ; no queries (keys 5..7): zero dK and dV; the last
        // sequence (2 over 2, rows 7..9 and keys 7..9) bit for bit its own dense backward.
        let p = VarlenProblem {
            heads_kv: 1,
            causal: true,
            ..VarlenProblem::new(&[(3, 5), (0, 2), (4, 0), (2, 2)], 2, 64)
        };
        p.validate().unwrap();
        let (q, k, v, d_o) = (
            random(p.q_elems(), 5),
            random(p.kv_elems(), 6),
            random(p.kv_elems(), 7),
            random(p.q_elems(), 8),
        );
        let Gradients { dq, dk, dv, .. } = varlen_backward(&p, &q, &k, &v, &d_o);
        let a = AttentionProblem {
            heads_kv: 1,
            causal: true,
            ..AttentionProblem::new(1, 2, 2, 64)
        };
        let (qr, kr) = (7 * 128..9 * 128, 7 * 64..9 * 64);
        let g = attention_backward(
            &a,
            &q[qr.clone()],
            &k[kr.clone()],
            &v[kr.clone()],
            &d_o[qr.clone()],
        );
        assert_eq!(&dq[qr], &g.dq[..]);
        assert_eq!(&dk[kr.clone()], &g.dk[..]);
        assert_eq!(&dv[kr], &g.dv[..]);
        assert!(dq[3 * 128..7 * 128].iter().all(|&x| x == 0.0));
        assert!(dk[5 * 64..7 * 64].iter().all(|&x| x == 0.0));
        assert!(dv[5 * 64..7 * 64].iter().all(|&x| x == 0.0));
        assert!(dq[..3 * 128].iter().any(|&x| x != 0.0));
    }

    #[test]
    fn a_zero_window_reads_the_diagonal_key_only() {
        // Window (0, 0): query i of a (3, 5) sequence sees key i + 2 alone, so O is that V row.
        let p = VarlenProblem {
            window: Window { left: 0, right: 0 },
            ..VarlenProblem::new(&[(2, 2), (3, 5)], 1, 64)
        };
        p.validate().unwrap();
        let (q, k, v) = (
            random(p.q_elems(), 21),
            random(p.kv_elems(), 22),
            random(p.kv_elems(), 23),
        );
        let f = varlen_forward(&p, &q, &k, &v);
        for i in 0..3 {
            let (o, key) = ((2 + i) * 64, (2 + i + 2) * 64);
            assert_eq!(&f.o[o..o + 64], &v[key..key + 64], "query {i}");
        }
    }

    #[test]
    fn windowed_gradients_match_finite_differences() {
        let mut p = VarlenProblem {
            heads_kv: 1,
            window: Window { left: 2, right: 1 },
            scale: 0.5,
            ..VarlenProblem::new(&[(4, 6), (5, 3)], 2, 4)
        };
        for causal in [false, true] {
            p.causal = causal;
            let (q, k, v) = (
                random(p.q_elems(), 31),
                random(p.kv_elems(), 32),
                random(p.kv_elems(), 33),
            );
            let d_o = random(p.q_elems(), 34);
            let g = varlen_backward(&p, &q, &k, &v, &d_o);
            let loss = |q: &[f64], k: &[f64], v: &[f64]| {
                let o = varlen_forward(&p, q, k, v).o;
                o.iter().zip(&d_o).map(|(x, y)| x * y).sum::<f64>()
            };
            check_gradient("dQ", &q, &g.dq, |x| loss(x, &k, &v));
            check_gradient("dK", &k, &g.dk, |x| loss(&q, x, &v));
            check_gradient("dV", &v, &g.dv, |x| loss(&q, &k, x));
        }
    }
}
