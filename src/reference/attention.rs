//! Float64 attention reference: O and LSE for chosen query rows of every (batch, query head), in
//! parallel, reading Q, K, V with the problem's strides and grouped key/value heads.

use rayon::prelude::*;

use crate::ops::attention::AttentionProblem;

/// The reference of one query row: O[b, h, i, :] and LSE[b, h, i] (natural log; -inf and a zero
/// row when the causal mask or the window hides every key).
#[derive(Debug, Clone, PartialEq)]
pub struct RowRef {
    pub b: usize,
    pub h: usize,
    pub i: usize,
    pub o: Vec<f64>,
    pub lse: f64,
}

/// Reference rows `rows` (query indices) for every (batch, head). `q`, `k`, `v` are the stored
/// elements as f64.
pub fn attention_rows(
    p: &AttentionProblem,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    rows: &[usize],
) -> Vec<RowRef> {
    let (qs, ks, vs) = (p.q_strides(), p.k_strides(), p.v_strides());
    let d = p.head_dim;
    let work: Vec<(usize, usize, usize)> = (0..p.batch)
        .flat_map(|b| (0..p.heads_q).flat_map(move |h| rows.iter().map(move |&i| (b, h, i))))
        .collect();
    work.par_iter()
        .map(|&(b, h, i)| {
            let hk = h / p.group();
            let qrow = &q[qs.offset(b, h, i)..qs.offset(b, h, i) + d];
            let keys = p.visible(i);
            let n = keys.len();
            let scale = p.scale as f64;
            let scores: Vec<f64> = keys
                .clone()
                .map(|j| {
                    let krow = &k[ks.offset(b, hk, j)..ks.offset(b, hk, j) + d];
                    scale * qrow.iter().zip(krow).map(|(x, y)| x * y).sum::<f64>()
                })
                .collect();
            let mut o = vec![0.0f64; d];
            if n == 0 {
                return RowRef {
                    b,
                    h,
                    i,
                    o,
                    lse: f64::NEG_INFINITY,
                };
            }
            let m = scores.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let w: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let sum: f64 = w.iter().sum();
            for (j, wj) in keys.zip(&w) {
                let vrow = &v[vs.offset(b, hk, j)..vs.offset(b, hk, j) + d];
                for (acc, x) in o.iter_mut().zip(vrow) {
                    *acc += wj * x;
                }
            }
            o.iter_mut().for_each(|x| *x /= sum);
            RowRef {
                b,
                h,
                i,
                o,
                lse: m + sum.ln(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttnLayout;

    #[test]
    fn uniform_scores_average_v_and_lse_is_log_n() {
        // Q = 0: every visible key weighs the same.
        let p = AttentionProblem {
            causal: true,
            ..AttentionProblem::new(1, 1, 3, 64)
        };
        let q = vec![0.0; 3 * 64];
        let k = vec![1.0; 3 * 64];
        let v: Vec<f64> = (0..3 * 64).map(|x| (x / 64) as f64).collect(); // row j is all j
        let r = attention_rows(&p, &q, &k, &v, &[0, 1, 2]);
        assert_eq!(r[0].o[5], 0.0);
        assert!((r[1].o[0] - 0.5).abs() < 1e-12 && (r[2].o[63] - 1.0).abs() < 1e-12);
        assert!((r[2].lse - 3f64.ln()).abs() < 1e-12);
        // A window of one key to the left: row 2 averages keys 1 and 2, row 0 key 0 only.
        let w = AttentionProblem {
            window: crate::ops::attention::Window { left: 1, right: 0 },
            causal: false,
            ..p
        };
        let r = attention_rows(&w, &q, &k, &v, &[0, 2]);
        assert!((r[1].o[7] - 1.5).abs() < 1e-12 && (r[1].lse - 2f64.ln()).abs() < 1e-12);
        assert!(r[0].o[0].abs() < 1e-12 && r[0].lse.abs() < 1e-12);
    }

    #[test]
    fn grouped_heads_bottom_right_mask_and_layouts() {
        // 2 query heads share one kv head; 3 queries over 2 keys: row 0 sees nothing.
        let mut p = AttentionProblem {
            causal: true,
            heads_kv: 1,
            seqlen_q: 3,
            seqlen_kv: 2,
            ..AttentionProblem::new(1, 2, 3, 64)
        };
        for layout in AttnLayout::ALL {
            p.layout = layout;
            let q: Vec<f64> = (0..p.q_elems())
                .map(|x| ((x * 7) % 5) as f64 * 0.1)
                .collect();
            let k: Vec<f64> = (0..p.kv_elems())
                .map(|x| ((x * 3) % 7) as f64 * 0.1)
                .collect();
            let v: Vec<f64> = (0..p.kv_elems()).map(|x| x as f64).collect();
            let r = attention_rows(&p, &q, &k, &v, &[0, 1]);
            assert_eq!(r.len(), 4);
            assert_eq!(r[0].lse, f64::NEG_INFINITY);
            // row 1 sees key 0 only: O is V's row 0, LSE is its single score
            let ks = p.v_strides();
            assert_eq!(r[1].o[3], v[ks.offset(0, 0, 0) + 3]);
            assert_eq!(r[3].o, r[1].o, "both query heads read the same kv head");
        }
    }
}
