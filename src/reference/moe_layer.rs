//! Float64 reference of a whole MoE layer, as transformers' experts compute it: for every token
//! and each of its k experts e, (silu(x W1[e]ᵀ) ⊙ (x W3[e]ᵀ)) W2[e]ᵀ times the routing weight,
//! summed over the k experts. W13 is transformers' `gate_up_proj` [E, 2I, H] (rows 0..I gate,
//! I..2I up), W2 its `down_proj` [E, H, I]. The routing comes from reference/route.rs.

use rayon::prelude::*;

use super::data::HostData;
use super::moe::silu;
use super::route::RouteRef;

/// Stored elements by index, as f64: host arrays, or values regenerated on the fly (the
/// harness's GPU fills), so that no f64 copy of a large weight tensor is ever made.
pub trait Source: Sync {
    fn get(&self, i: usize) -> f64;
}

impl Source for [f64] {
    fn get(&self, i: usize) -> f64 {
        self[i]
    }
}

impl Source for HostData {
    fn get(&self, i: usize) -> f64 {
        HostData::get(self, i)
    }
}

/// The expert weights of a layer.
pub struct LayerWeights<'a, S: Source + ?Sized> {
    pub w13: &'a S,
    pub w2: &'a S,
    pub experts: usize,
    pub hidden: usize,
    pub inter: usize,
}

fn dot<S: Source + ?Sized>(x: &[f64], w: &S, start: usize) -> f64 {
    x.iter()
        .enumerate()
        .map(|(j, v)| v * w.get(start + j))
        .sum()
}

impl<S: Source + ?Sized> LayerWeights<'_, S> {
    /// Expert e's SwiGLU of one hidden row x: silu(x W1ᵀ) ⊙ (x W3ᵀ), I values.
    pub fn swiglu(&self, e: usize, x: &[f64]) -> Vec<f64> {
        let (h, i) = (self.hidden, self.inter);
        let base = e * 2 * i * h;
        (0..i)
            .map(|n| silu(dot(x, self.w13, base + n * h)) * dot(x, self.w13, base + (i + n) * h))
            .collect()
    }

    /// Expert e's down projection of one intermediate row: H values.
    pub fn down(&self, e: usize, hrow: &[f64]) -> Vec<f64> {
        let (h, i) = (self.hidden, self.inter);
        (0..h)
            .map(|c| dot(hrow, self.w2, (e * h + c) * i))
            .collect()
    }
}

/// Output rows of `tokens` (`x(t)`: token t's hidden row) under routing `r`: each the weighted
/// sum over its pairs. A token with a dropped pair (id -1) is NaN, as the kernels mark it.
pub fn layer_rows<S, X>(w: &LayerWeights<S>, x: X, r: &RouteRef, tokens: &[usize]) -> Vec<Vec<f64>>
where
    S: Source + ?Sized,
    X: Fn(usize) -> Vec<f64> + Sync,
{
    let (h, k) = (w.hidden, r.top_k);
    tokens
        .par_iter()
        .map(|&t| {
            let xr = x(t);
            let mut out = vec![0.0; h];
            for j in 0..k {
                let e = r.ids[t * k + j];
                if e < 0 {
                    return vec![f64::NAN; h];
                }
                let y = w.down(e as usize, &w.swiglu(e as usize, &xr));
                let wt = r.weights[t * k + j];
                for (o, v) in out.iter_mut().zip(&y) {
                    *o += wt * v;
                }
            }
            out
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::moe::route::{RouteOptions, Scoring};
    use crate::reference::route::route_logits;

    #[test]
    fn a_layer_is_the_weighted_sum_of_its_experts() {
        // E = 2, H = 2, I = 1: expert 0's gate picks x0 and up x1, down doubles; expert 1's gate
        // and up pick x1, down is [1, -1].
        let w13 = [1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0, 1.0];
        let w2 = [2.0, 2.0, 1.0, -1.0];
        let w = LayerWeights {
            w13: &w13[..],
            w2: &w2[..],
            experts: 2,
            hidden: 2,
            inter: 1,
        };
        let x = [0.5, -1.5];
        let logits = [0.2, 0.1];
        let r = route_logits(
            &logits,
            None,
            1,
            2,
            &RouteOptions::top_k(2, Scoring::Softmax),
        );
        let got = layer_rows(&w, |_| x.to_vec(), &r, &[0]);
        let h0 = silu(0.5) * -1.5;
        let h1 = silu(-1.5) * -1.5;
        let (p0, p1) = (r.weights[0], r.weights[1]);
        assert_eq!(r.ids, vec![0, 1]);
        assert!((got[0][0] - (p0 * 2.0 * h0 + p1 * h1)).abs() < 1e-15);
        assert!((got[0][1] - (p0 * 2.0 * h0 - p1 * h1)).abs() < 1e-15);
        let dropped = RouteRef {
            ids: vec![0, -1],
            ..r
        };
        assert!(layer_rows(&w, |_| x.to_vec(), &dropped, &[0])[0][0].is_nan());
    }
}
