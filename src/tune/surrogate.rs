//! The search's model of a landscape: a Gaussian process over the configs' parameter positions
//! (each parameter's value index scaled to [0, 1], so "one step" means the same on every
//! parameter whatever its values are), fitted to the log-time of the timed configs, and a second
//! one fitted to "did it run" (+1 / -1) so that regions where the guard rejects cost less.
//!
//! Why a GP and not an additive model: the kernels' times are dominated by interactions (a tile's
//! height only pays with the right width; one more pipeline stage only fits with the smaller
//! K-tile), which a sum of per-parameter effects cannot represent and a product kernel can. The
//! length scale of each parameter is fitted (automatic relevance determination), so a nuisance
//! parameter (e.g. a raster group size) stops separating configs once the data says it barely
//! matters. Small dense linear algebra only: the search fits a few dozen to a few hundred points.

/// Matérn 5/2 correlation between two points (`ls`: one length scale per coordinate).
fn matern52(a: &[f64], b: &[f64], ls: &[f64]) -> f64 {
    let d2: f64 = a
        .iter()
        .zip(b)
        .zip(ls)
        .map(|((x, y), l)| ((x - y) / l).powi(2))
        .sum();
    let r = (5.0 * d2).sqrt();
    (1.0 + r + r * r / 3.0) * (-r).exp()
}

/// In-place Cholesky factorisation of the `n` x `n` row-major matrix `k` into its lower factor;
/// `false` when it is not positive definite.
fn cholesky(k: &mut [f64], n: usize) -> bool {
    for j in 0..n {
        let mut d = k[j * n + j];
        for p in 0..j {
            d -= k[j * n + p] * k[j * n + p];
        }
        if d <= 0.0 || !d.is_finite() {
            return false;
        }
        let d = d.sqrt();
        k[j * n + j] = d;
        for i in j + 1..n {
            let mut s = k[i * n + j];
            for p in 0..j {
                s -= k[i * n + p] * k[j * n + p];
            }
            k[i * n + j] = s / d;
        }
        for i in 0..j {
            k[i * n + j] = 0.0;
        }
    }
    true
}

/// Solves `L x = b` for the lower factor `l`.
fn forward(l: &[f64], n: usize, b: &[f64]) -> Vec<f64> {
    let mut x = b.to_vec();
    for i in 0..n {
        let mut s = x[i];
        for p in 0..i {
            s -= l[i * n + p] * x[p];
        }
        x[i] = s / l[i * n + i];
    }
    x
}

/// Solves `L^T x = b` for the lower factor `l`.
fn backward(l: &[f64], n: usize, b: &[f64]) -> Vec<f64> {
    let mut x = b.to_vec();
    for i in (0..n).rev() {
        let mut s = x[i];
        for p in i + 1..n {
            s -= l[p * n + i] * x[p];
        }
        x[i] = s / l[i * n + i];
    }
    x
}

/// A fitted GP with zero prior mean and unit prior variance on standardised targets.
#[derive(Debug, Clone)]
pub struct Gp {
    x: Vec<Vec<f64>>,
    ls: Vec<f64>,
    noise: f64,
    chol: Vec<f64>,
    alpha: Vec<f64>,
    /// Log marginal likelihood of the fit (up to a constant).
    pub loglik: f64,
}

/// Length scales tried per coordinate (the coordinates span [0, 1]).
const LENGTHS: [f64; 7] = [0.1, 0.2, 0.35, 0.6, 1.0, 2.0, 5.0];

impl Gp {
    /// The GP with these hyperparameters, or `None` when the kernel matrix is singular.
    pub fn fit(x: &[Vec<f64>], y: &[f64], ls: &[f64], noise: f64) -> Option<Gp> {
        let n = x.len();
        let mut k = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..=i {
                let v = matern52(&x[i], &x[j], ls);
                k[i * n + j] = v;
                k[j * n + i] = v;
            }
            k[i * n + i] += noise;
        }
        if !cholesky(&mut k, n) {
            return None;
        }
        let alpha = backward(&k, n, &forward(&k, n, y));
        let fit: f64 = y.iter().zip(&alpha).map(|(a, b)| a * b).sum();
        let logdet: f64 = (0..n).map(|i| k[i * n + i].ln()).sum();
        Some(Gp {
            x: x.to_vec(),
            ls: ls.to_vec(),
            noise,
            chol: k,
            alpha,
            loglik: -0.5 * fit - logdet,
        })
    }

    /// The hyperparameters of highest marginal likelihood: one length scale shared by every
    /// coordinate and a noise level from `noises` on a grid, then (with `ard`) one sweep of
    /// coordinate-wise refinement of each coordinate's own length scale (a second sweep fitted
    /// the few points too closely and found the optimum less often in replays).
    pub fn fit_ml(x: &[Vec<f64>], y: &[f64], noises: &[f64], ard: bool) -> Option<Gp> {
        let dims = x.first()?.len();
        let mut best: Option<Gp> = None;
        for &l in &LENGTHS[..5] {
            for &nz in noises {
                if let Some(g) = Gp::fit(x, y, &vec![l; dims], nz) {
                    if best.as_ref().is_none_or(|b| g.loglik > b.loglik) {
                        best = Some(g);
                    }
                }
            }
        }
        let mut best = best?;
        if ard {
            for d in 0..dims {
                for &l in &LENGTHS {
                    if l == best.ls[d] {
                        continue;
                    }
                    let mut ls = best.ls.clone();
                    ls[d] = l;
                    if let Some(g) = Gp::fit(x, y, &ls, best.noise) {
                        if g.loglik > best.loglik {
                            best = g;
                        }
                    }
                }
            }
        }
        Some(best)
    }

    /// The same hyperparameters refitted with one more observation (the "kriging believer" of
    /// batch selection: a picked candidate is assumed to come out as predicted).
    pub fn with_point(&self, z: &[f64], y: f64, ys: &[f64]) -> Option<Gp> {
        let mut x = self.x.clone();
        x.push(z.to_vec());
        let mut y2 = ys.to_vec();
        y2.push(y);
        Gp::fit(&x, &y2, &self.ls, self.noise)
    }

    /// Posterior mean and standard deviation at `z`.
    pub fn predict(&self, z: &[f64]) -> (f64, f64) {
        let n = self.x.len();
        let k: Vec<f64> = self.x.iter().map(|x| matern52(x, z, &self.ls)).collect();
        let mean: f64 = k.iter().zip(&self.alpha).map(|(a, b)| a * b).sum();
        let v = forward(&self.chol, n, &k);
        let var = 1.0 - v.iter().map(|x| x * x).sum::<f64>();
        (mean, var.max(1e-12).sqrt())
    }

    pub fn length_scales(&self) -> &[f64] {
        &self.ls
    }

    pub fn noise(&self) -> f64 {
        self.noise
    }
}

/// Standard normal density.
pub fn norm_pdf(z: f64) -> f64 {
    (-0.5 * z * z).exp() / (2.0 * std::f64::consts::PI).sqrt()
}

/// Standard normal distribution function (Abramowitz-Stegun 7.1.26, error under 1.5e-7).
pub fn norm_cdf(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = ((((1.061_405_429 * t - 1.453_152_027) * t + 1.421_413_741) * t - 0.284_496_736)
        * t
        + 0.254_829_592)
        * t;
    let erf = 1.0 - poly * (-x * x).exp();
    0.5 * (1.0 + erf.copysign(z))
}

/// Expected improvement below `best` of a normal prediction (mean `m`, deviation `s`).
pub fn expected_improvement(best: f64, m: f64, s: f64) -> f64 {
    if s <= 0.0 {
        return (best - m).max(0.0);
    }
    let z = (best - m) / s;
    (best - m) * norm_cdf(z) + s * norm_pdf(z)
}

/// Standardises `y` to zero mean and unit deviation; returns (standardised, mean, deviation).
pub fn standardise(y: &[f64]) -> (Vec<f64>, f64, f64) {
    let n = y.len().max(1) as f64;
    let mean = y.iter().sum::<f64>() / n;
    let sd = (y.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt() + 1e-9;
    (y.iter().map(|v| (v - mean) / sd).collect(), mean, sd)
}

/// The chance that a config at each of `z` runs at all, from the evaluated configs `x` and
/// whether each failed: a GP fitted to +1 (ran) / -1 (failed) labels around their mean, read
/// through a probit with extra spread (so one failure does not condemn its whole region). Its
/// length scales are fitted per parameter too: failures usually depend on a few parameters
/// (a tile's shared memory on its sizes and stages, not on the raster order), and a model that
/// knows so stops offering the rest of a failing block.
/// Everything feasible when nothing has failed.
pub fn feasibility(x: &[Vec<f64>], failed: &[bool], z: &[Vec<f64>]) -> Vec<f64> {
    if !failed.iter().any(|&f| f) {
        return vec![1.0; z.len()];
    }
    let lab: Vec<f64> = failed.iter().map(|&f| if f { -1.0 } else { 1.0 }).collect();
    let m0 = lab.iter().sum::<f64>() / lab.len() as f64;
    let centred: Vec<f64> = lab.iter().map(|v| v - m0).collect();
    let Some(g) = Gp::fit_ml(x, &centred, &[0.05, 0.2], true) else {
        return vec![1.0; z.len()];
    };
    z.iter()
        .map(|p| {
            let (m, s) = g.predict(p);
            norm_cdf((m + m0) / (s * s + 0.25).sqrt())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cholesky_solves_a_small_system() {
        // [[4, 2], [2, 3]] x = [2, 1] -> x = [0.5, 0]
        let mut k = vec![4.0, 2.0, 2.0, 3.0];
        assert!(cholesky(&mut k, 2));
        let x = backward(&k, 2, &forward(&k, 2, &[2.0, 1.0]));
        assert!((x[0] - 0.5).abs() < 1e-12 && x[1].abs() < 1e-12);
        let mut bad = vec![1.0, 2.0, 2.0, 1.0];
        assert!(!cholesky(&mut bad, 2));
    }

    #[test]
    fn the_gp_interpolates_and_is_unsure_far_away() {
        let x: Vec<Vec<f64>> = (0..5).map(|i| vec![i as f64 / 4.0]).collect();
        let y: Vec<f64> = x.iter().map(|p| (p[0] * 3.0).sin()).collect();
        let g = Gp::fit_ml(&x, &y, &[1e-4], false).unwrap();
        let (m, s) = g.predict(&[0.5]);
        assert!((m - y[2]).abs() < 0.05 && s < 0.1, "{m} {s}");
        let (_, far) = g.predict(&[3.0]);
        assert!(far > 0.9);
    }

    #[test]
    fn ard_lengthens_an_irrelevant_coordinate() {
        // y depends on the first coordinate only
        let mut x = Vec::new();
        for i in 0..5 {
            for j in 0..4 {
                x.push(vec![i as f64 / 4.0, j as f64 / 3.0]);
            }
        }
        let y: Vec<f64> = x.iter().map(|p| (p[0] * 4.0).cos()).collect();
        let (y, _, _) = standardise(&y);
        let g = Gp::fit_ml(&x, &y, &[1e-4, 1e-2], true).unwrap();
        assert!(
            g.length_scales()[1] > 2.0 * g.length_scales()[0],
            "{:?}",
            g.ls
        );
    }

    #[test]
    fn normal_helpers_and_ei() {
        assert!((norm_cdf(0.0) - 0.5).abs() < 1e-7);
        assert!((norm_cdf(1.96) - 0.975).abs() < 1e-3);
        assert!((norm_cdf(-1.96) - 0.025).abs() < 1e-3);
        assert!(expected_improvement(0.0, -1.0, 0.0) == 1.0);
        assert!(expected_improvement(0.0, 1.0, 1.0) > 0.0);
        assert!(expected_improvement(0.0, 1.0, 1.0) < expected_improvement(0.0, 1.0, 2.0));
    }

    #[test]
    fn feasibility_drops_near_failures() {
        let x: Vec<Vec<f64>> = (0..6).map(|i| vec![i as f64 / 5.0]).collect();
        let failed = [false, false, false, false, true, true];
        let p = feasibility(&x, &failed, &[vec![0.1], vec![0.9]]);
        assert!(p[0] > 0.7 && p[1] < 0.3, "{p:?}");
        assert_eq!(feasibility(&x, &[false; 6], &[vec![0.5]]), vec![1.0]);
    }
}
