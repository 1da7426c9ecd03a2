//! The float64 references of the block's pieces, computed on the host from the same bf16 inputs,
//! and the routing every path shares.

use crate::{B, E, HD, HKV, HQ, S, TOPK};

/// y [m, n] = x [m, k] @ wᵀ (w [n, k]).
pub fn ref_linear(x: &[f64], w: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut y = vec![0.0; m * n];
    for i in 0..m {
        let xr = &x[i * k..(i + 1) * k];
        for j in 0..n {
            let wr = &w[j * k..(j + 1) * k];
            y[i * n + j] = xr.iter().zip(wr).map(|(a, b)| a * b).sum();
        }
    }
    y
}

/// Causal GQA attention over BSHD q [B, S, HQ, HD], k and v [B, S, HKV, HD]: (o, lse [B, HQ, S]).
pub fn ref_attention(q: &[f64], k: &[f64], v: &[f64], causal: bool) -> (Vec<f64>, Vec<f64>) {
    let scale = 1.0 / (HD as f64).sqrt();
    let mut o = vec![0.0; B * S * HQ * HD];
    let mut lse = vec![0.0; B * HQ * S];
    let mut s = vec![0.0; S];
    for b in 0..B {
        for h in 0..HQ {
            let hk = h / (HQ / HKV);
            for i in 0..S {
                let qi = &q[((b * S + i) * HQ + h) * HD..][..HD];
                let last = if causal { i + 1 } else { S };
                let mut mx = f64::NEG_INFINITY;
                for (j, sj) in s.iter_mut().enumerate().take(last) {
                    let kj = &k[((b * S + j) * HKV + hk) * HD..][..HD];
                    *sj = qi.iter().zip(kj).map(|(a, c)| a * c).sum::<f64>() * scale;
                    mx = mx.max(*sj);
                }
                let mut l = 0.0;
                let oi = &mut o[((b * S + i) * HQ + h) * HD..][..HD];
                for (j, &sj) in s.iter().enumerate().take(last) {
                    let p = (sj - mx).exp();
                    l += p;
                    let vj = &v[((b * S + j) * HKV + hk) * HD..][..HD];
                    for (od, vd) in oi.iter_mut().zip(vj) {
                        *od += p * vd;
                    }
                }
                oi.iter_mut().for_each(|x| *x /= l);
                lse[(b * HQ + h) * S + i] = mx + l.ln();
            }
        }
    }
    (o, lse)
}

pub fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// The routing: each token's top-2 experts by the router's logits (computed by the caller), the
/// weights a softmax over the chosen two (Mixtral's). Returns the rows sorted by expert: token
/// of each row, its weight, and the experts' offsets.
pub fn route(logits: &[f64]) -> (Vec<u32>, Vec<f32>, Vec<i32>) {
    let t = logits.len() / E;
    let mut per: Vec<Vec<(u32, f32)>> = vec![Vec::new(); E];
    for i in 0..t {
        let row = &logits[i * E..(i + 1) * E];
        let mut idx: Vec<usize> = (0..E).collect();
        idx.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        let top = &idx[..TOPK];
        let mx = row[top[0]];
        let z: f64 = top.iter().map(|&e| (row[e] - mx).exp()).sum();
        for &e in top {
            per[e].push((i as u32, ((row[e] - mx).exp() / z) as f32));
        }
    }
    let (mut tok, mut wt, mut off) = (Vec::new(), Vec::new(), vec![0i32]);
    for rows in &per {
        for &(i, w) in rows {
            tok.push(i);
            wt.push(w);
        }
        off.push(tok.len() as i32);
    }
    (tok, wt, off)
}

/// The grouped GEMM, y[rows of e] = x[rows of e] @ w[e]ᵀ: x [rows, k], w [E, n, k], expert e
/// owning rows `off[e]..off[e + 1]`; rows no expert owns are 0.
pub fn ref_grouped(x: &[f64], w: &[f64], off: &[i32], k: usize, n: usize) -> Vec<f64> {
    let mut y = vec![0.0; x.len() / k * n];
    for e in 0..off.len() - 1 {
        let (r0, r1) = (off[e] as usize, off[e + 1] as usize);
        let ye = ref_linear(&x[r0 * k..r1 * k], &w[e * n * k..][..n * k], r1 - r0, k, n);
        y[r0 * n..r1 * n].copy_from_slice(&ye);
    }
    y
}

/// The fused SwiGLU, silu(x W1ᵀ) * (x W3ᵀ) per expert (rows as [`ref_grouped`]), times the row's
/// routing weight when given.
pub fn ref_swiglu(
    x: &[f64],
    (w1, w3): (&[f64], &[f64]),
    off: &[i32],
    routing: Option<&[f32]>,
    k: usize,
    n: usize,
) -> Vec<f64> {
    let g = ref_grouped(x, w1, off, k, n);
    let u = ref_grouped(x, w3, off, k, n);
    let mut h: Vec<f64> = g.iter().zip(&u).map(|(g, u)| silu(*g) * u).collect();
    if let Some(r) = routing {
        for (row, w) in h.chunks_mut(n).zip(r) {
            row.iter_mut().for_each(|v| *v *= *w as f64);
        }
    }
    h
}
