//! Float64 attention of one query head over its key/value head, rows gathered contiguous and each
//! query row seeing one span of keys: the forward and backward the dense, packed and paged share.

use std::ops::Range;

use crate::ops::attention::Strides;

/// One query head and the key/value head it reads, each `[rows, dim]` row-major.
#[derive(Debug, Clone, Copy)]
pub struct Head<'a> {
    pub q: &'a [f64],
    pub k: &'a [f64],
    pub v: &'a [f64],
    pub dim: usize,
    pub scale: f64,
}

/// O `[rows_q, dim]` and LSE `[rows_q]` (natural log; -inf with a zero row where a span is empty).
#[derive(Debug, Clone, PartialEq)]
pub struct HeadForward {
    pub o: Vec<f64>,
    pub lse: Vec<f64>,
}

/// dQ `[rows_q, dim]`, this query head's share of dK and dV `[rows_k, dim]`, and
/// D = rowsum(dO ∘ O) `[rows_q]`.
#[derive(Debug, Clone, PartialEq)]
pub struct HeadBackward {
    pub dq: Vec<f64>,
    pub dk: Vec<f64>,
    pub dv: Vec<f64>,
    pub delta: Vec<f64>,
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// `acc += w · x`, elementwise.
fn axpy(acc: &mut [f64], w: f64, x: &[f64]) {
    acc.iter_mut().zip(x).for_each(|(a, x)| *a += w * x);
}

impl Head<'_> {
    fn rows_q(&self) -> usize {
        self.q.len() / self.dim
    }
    fn rows_k(&self) -> usize {
        self.k.len() / self.dim
    }
    fn row<'x>(&self, x: &'x [f64], i: usize) -> &'x [f64] {
        &x[i * self.dim..(i + 1) * self.dim]
    }

    /// Softmax probabilities of query `i` over `span` and its LSE (empty and -inf for no keys).
    fn probabilities(&self, i: usize, span: &Range<usize>) -> (Vec<f64>, f64) {
        if span.is_empty() {
            return (Vec::new(), f64::NEG_INFINITY);
        }
        let qi = self.row(self.q, i);
        let scores: Vec<f64> = span
            .clone()
            .map(|j| self.scale * dot(qi, self.row(self.k, j)))
            .collect();
        let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + scores.iter().map(|s| (s - m).exp()).sum::<f64>().ln();
        (scores.iter().map(|s| (s - lse).exp()).collect(), lse)
    }

    /// O row `i` from its probabilities over `span`.
    fn output_row(&self, probs: &[f64], span: &Range<usize>) -> Vec<f64> {
        let mut o = vec![0.0; self.dim];
        for (pj, j) in probs.iter().zip(span.clone()) {
            axpy(&mut o, *pj, self.row(self.v, j));
        }
        o
    }

    /// The forward; `spans[i]` are the keys query `i` sees.
    pub fn forward(&self, spans: &[Range<usize>]) -> HeadForward {
        let mut o = Vec::with_capacity(self.rows_q() * self.dim);
        let mut lse = Vec::with_capacity(self.rows_q());
        for (i, span) in spans.iter().enumerate() {
            let (probs, l) = self.probabilities(i, span);
            o.extend(self.output_row(&probs, span));
            lse.push(l);
        }
        HeadForward { o, lse }
    }

    /// The backward of L = Σ dO ∘ O: with P the softmax, dV = Pᵀ dO, dP = dO Vᵀ,
    /// dS = P ∘ (dP − D), dQ = scale · dS K and dK = scale · dSᵀ Q. A row with no keys contributes
    /// zero everywhere.
    pub fn backward(&self, spans: &[Range<usize>], d_o: &[f64]) -> HeadBackward {
        let (d, rk) = (self.dim, self.rows_k());
        let mut dq = vec![0.0; self.rows_q() * d];
        let (mut dk, mut dv) = (vec![0.0; rk * d], vec![0.0; rk * d]);
        let mut delta = Vec::with_capacity(self.rows_q());
        for (i, span) in spans.iter().enumerate() {
            let (probs, _) = self.probabilities(i, span);
            let doi = self.row(d_o, i);
            let di = dot(doi, &self.output_row(&probs, span));
            delta.push(di);
            let qi = self.row(self.q, i);
            for (pj, j) in probs.iter().zip(span.clone()) {
                axpy(&mut dv[j * d..(j + 1) * d], *pj, doi);
                let ds = pj * (dot(doi, self.row(self.v, j)) - di);
                axpy(
                    &mut dq[i * d..(i + 1) * d],
                    self.scale * ds,
                    self.row(self.k, j),
                );
                axpy(&mut dk[j * d..(j + 1) * d], self.scale * ds, qi);
            }
        }
        HeadBackward { dq, dk, dv, delta }
    }
}

/// Rows `rows` of head `h` in batch `b` of a strided tensor, copied contiguous.
pub fn gather(
    x: &[f64],
    s: &Strides,
    b: usize,
    h: usize,
    rows: Range<usize>,
    dim: usize,
) -> Vec<f64> {
    rows.flat_map(|r| &x[s.offset(b, h, r)..s.offset(b, h, r) + dim])
        .copied()
        .collect()
}

/// The inverse of [`gather`]: contiguous rows `src` written from row `first` of head `h`.
pub fn scatter(
    dst: &mut [f64],
    src: &[f64],
    s: &Strides,
    b: usize,
    h: usize,
    first: usize,
    dim: usize,
) {
    for (r, row) in src.chunks_exact(dim).enumerate() {
        let at = s.offset(b, h, first + r);
        dst[at..at + dim].copy_from_slice(row);
    }
}

/// The backward of the query heads `heads` that share one key/value head (`kh`, `vh`): each
/// head's gradients, and dK, dV summed over them. `q_do(h)` gathers head h's Q and dO rows.
pub fn group_backward(
    heads: Range<usize>,
    (kh, vh): (&[f64], &[f64]),
    (dim, scale): (usize, f64),
    spans: &[Range<usize>],
    q_do: impl Fn(usize) -> (Vec<f64>, Vec<f64>),
) -> (Vec<HeadBackward>, Vec<f64>, Vec<f64>) {
    let (mut dk, mut dv) = (vec![0.0; kh.len()], vec![0.0; kh.len()]);
    let grads = heads
        .map(|h| {
            let (qh, doh) = q_do(h);
            let head = Head {
                q: &qh,
                k: kh,
                v: vh,
                dim,
                scale,
            };
            let g = head.backward(spans, &doh);
            accumulate(&mut dk, &g.dk);
            accumulate(&mut dv, &g.dv);
            g
        })
        .collect();
    (grads, dk, dv)
}

/// `acc += x`, elementwise: the query heads of a group summed into their key/value head.
fn accumulate(acc: &mut [f64], x: &[f64]) {
    acc.iter_mut().zip(x).for_each(|(a, x)| *a += x);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Spans of a single query row.
    fn one(span: Range<usize>) -> Vec<Range<usize>> {
        vec![span]
    }

    #[test]
    fn a_row_that_sees_no_key_is_zero_not_nan() {
        let (q, k, v) = ([1.0, 2.0], [0.5, -0.5], [3.0, 4.0]);
        let h = Head {
            q: &q,
            k: &k,
            v: &v,
            dim: 2,
            scale: 1.0,
        };
        let f = h.forward(&one(0..0));
        assert_eq!((f.o, f.lse[0]), (vec![0.0, 0.0], f64::NEG_INFINITY));
        let g = h.backward(&one(0..0), &[1.0, 1.0]);
        assert!(g.dq.iter().chain(&g.dk).chain(&g.dv).all(|x| *x == 0.0));
        assert_eq!(g.delta, vec![0.0]);
    }

    #[test]
    fn one_key_copies_its_value_and_passes_do_to_dv() {
        let (q, k, v) = ([1.0, 2.0], [0.5, -0.5], [3.0, 4.0]);
        let h = Head {
            q: &q,
            k: &k,
            v: &v,
            dim: 2,
            scale: 0.7,
        };
        let f = h.forward(&one(0..1));
        assert_eq!(f.o, vec![3.0, 4.0]);
        assert!((f.lse[0] - 0.7 * -0.5).abs() < 1e-15);
        // P = 1 whatever the score: dS = 0, so only dV moves.
        let g = h.backward(&one(0..1), &[2.0, -1.0]);
        assert_eq!(g.dv, vec![2.0, -1.0]);
        assert!(g.dq.iter().chain(&g.dk).all(|x| x.abs() < 1e-15));
    }
}
