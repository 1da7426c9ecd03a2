//! Float64 MoE references: the grouped GEMM Y = X_e · W_eᵀ per expert, and the fused SwiGLU
//! H = silu(X_e · W1_eᵀ) ⊙ (X_e · W3_eᵀ) ⊙ route, for all rows or a chosen subset, in parallel.

use rayon::prelude::*;

use crate::ops::moe::problem::INTERLEAVE_ROWS;
use crate::ops::moe::{MoeProblem, SwiGlu, WeightLayout};

/// The expert of every row of X, or `None` for rows no expert owns.
pub fn row_experts(p: &MoeProblem) -> Vec<Option<usize>> {
    let mut v = vec![None; p.x_rows()];
    for (e, (start, len)) in p.spans().into_iter().enumerate() {
        for slot in &mut v[start..start + len] {
            *slot = Some(e);
        }
    }
    v
}

/// Row index within a weight tensor of (expert e, output column n): W [E, N, K]; for the
/// interleaved W13 [E, 2N, K], `up` selects W3's row.
pub fn weight_row(p: &MoeProblem, e: usize, n: usize, up: bool) -> usize {
    match p.swiglu {
        Some(SwiGlu {
            weights: WeightLayout::Interleaved,
            ..
        }) => {
            let b = INTERLEAVE_ROWS;
            e * 2 * p.n + 2 * b * (n / b) + n % b + if up { b } else { 0 }
        }
        _ => e * p.n + n,
    }
}

pub fn silu(g: f64) -> f64 {
    g / (1.0 + (-g).exp())
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Reference rows of Y for the X rows in `rows` (each must belong to an expert). `x` and `w` are
/// the stored elements as f64: X [x_rows, K], W [E, N, K]. For SwiGLU `w` is W1 (or W13), `w3`
/// W3 when separate, `route` one weight per row of X when routed.
pub fn moe_rows(
    p: &MoeProblem,
    x: &[f64],
    w: &[f64],
    w3: Option<&[f64]>,
    route: Option<&[f64]>,
    rows: &[usize],
) -> Vec<Vec<f64>> {
    let experts = row_experts(p);
    let k = p.k;
    rows.par_iter()
        .map(|&r| {
            let e = experts[r].expect("reference rows belong to an expert");
            let xr = &x[r * k..(r + 1) * k];
            (0..p.n)
                .map(|n| {
                    let wr = weight_row(p, e, n, false);
                    let g = dot(xr, &w[wr * k..(wr + 1) * k]);
                    match p.swiglu {
                        None => g,
                        Some(s) => {
                            let (src, ur) = match (s.weights, w3) {
                                (WeightLayout::Separate, Some(w3)) => (w3, wr),
                                _ => (w, weight_row(p, e, n, true)),
                            };
                            let u = dot(xr, &src[ur * k..(ur + 1) * k]);
                            let scale = if s.routed {
                                route.map_or(1.0, |rt| rt[r])
                            } else {
                                1.0
                            };
                            silu(g) * u * scale
                        }
                    }
                })
                .collect()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::DType;
    use crate::ops::moe::schedule::{tile, Schedule, TileConfig, TileOrder};

    #[test]
    fn each_row_uses_its_experts_weights() {
        // experts: 0 owns row 0, 1 owns nothing, 2 owns rows 1-2; K = 2, N = 1
        let p = MoeProblem::contiguous(&[1, 0, 2], 1, 2, DType::Bf16, DType::F32);
        assert_eq!(row_experts(&p), vec![Some(0), Some(2), Some(2)]);
        let x = [1., 2., 3., 4., 5., 6.];
        let w = [1., 0., 9., 9., 0., 1.]; // W0 picks x0, W2 picks x1
        assert_eq!(
            moe_rows(&p, &x, &w, None, None, &[0, 1, 2]),
            vec![vec![1.], vec![4.], vec![6.]]
        );
    }

    #[test]
    fn masked_rows_past_the_count_belong_to_nobody() {
        let p = MoeProblem::masked(&[1, 2], 3, 4, 8, DType::Bf16, DType::Bf16);
        assert_eq!(
            row_experts(&p),
            vec![Some(0), None, None, Some(1), Some(1), None]
        );
    }

    #[test]
    fn swiglu_matches_its_definition_in_both_weight_layouts() {
        let n = 128;
        let p = MoeProblem::contiguous(&[2], n, 1, DType::Bf16, DType::F32);
        let x = [0.5, -2.0];
        let w1: Vec<f64> = (0..n).map(|i| i as f64 / 64.0 - 1.0).collect();
        let w3: Vec<f64> = (0..n).map(|i| 1.0 + i as f64).collect();
        let route = [2.0, 0.25];
        let want = |r: usize, c: usize| silu(x[r] * w1[c]) * x[r] * w3[c] * route[r];
        let sep = p.clone().with_swiglu(WeightLayout::Separate, true);
        let got = moe_rows(&sep, &x, &w1, Some(&w3), Some(&route), &[0, 1]);
        // interleaved: one block of W1 rows, then one of W3 rows
        let w13: Vec<f64> = w1.iter().chain(&w3).copied().collect();
        let il = p.with_swiglu(WeightLayout::Interleaved, true);
        let got_il = moe_rows(&il, &x, &w13, None, Some(&route), &[0, 1]);
        for r in 0..2 {
            for c in [0, 1, 77, 127] {
                assert!((got[r][c] - want(r, c)).abs() < 1e-12);
                assert_eq!(got[r][c], got_il[r][c]);
            }
        }
        // N = 256: expert 1 starts at row 512; column 130 is block 1 (rows 256..), W3 128 later
        let wide = MoeProblem { n: 256, ..il };
        assert_eq!(weight_row(&wide, 1, 130, true), 512 + 256 + 2 + 128);
        assert_eq!(weight_row(&wide, 1, 130, false), 512 + 256 + 2);
        assert!((silu(0.0)).abs() < 1e-15 && (silu(40.0) - 40.0).abs() < 1e-12);
    }

    /// The kernels' plan run on the CPU: the tile walk, X rows loaded by tile (past X: zeros),
    /// weights by box (W [E, N, K] with zeros past N; the interleaved W13 as one 256-row box at
    /// row 2·n0), rows past the expert masked at the store. It must equal the reference.
    fn emulate(
        p: &MoeProblem,
        x: &[f64],
        w: &[f64],
        w3: Option<&[f64]>,
        route: Option<&[f64]>,
        cfg: TileConfig,
    ) -> Vec<f64> {
        let s = Schedule::build(p, p.rows_array(), cfg.bm);
        let tiles_n = p.n.div_ceil(cfg.bn as usize) as u32;
        let mut y = vec![f64::NAN; p.y_elems()];
        let k = p.k;
        let n_rows = if p
            .swiglu
            .is_some_and(|s| s.weights == WeightLayout::Interleaved)
        {
            2 * p.n
        } else {
            p.n
        };
        let wrow = |src: &[f64], e: usize, r: usize| -> Vec<f64> {
            if r < n_rows {
                src[(e * n_rows + r) * k..(e * n_rows + r + 1) * k].to_vec()
            } else {
                vec![0.0; k]
            }
        };
        for t in 0..s.tiles_m() * tiles_n {
            let tl = tile(&s, t, tiles_n, TileOrder::ByExpert(3), cfg.bm, cfg.bn);
            for r in 0..cfg.bm as i32 {
                let xr = (tl.row0 + r) as usize;
                let xv: Vec<f64> = if xr < p.x_rows() {
                    x[xr * k..(xr + 1) * k].to_vec()
                } else {
                    vec![0.0; k]
                };
                for c in 0..cfg.bn as usize {
                    let n = tl.n0 as usize + c;
                    let v = match p.swiglu {
                        None => dot(&xv, &wrow(w, tl.expert, n)),
                        Some(sw) => {
                            let (g, u) = match (sw.weights, w3) {
                                (WeightLayout::Separate, Some(w3)) => {
                                    (wrow(w, tl.expert, n), wrow(w3, tl.expert, n))
                                }
                                _ => (
                                    wrow(w, tl.expert, 2 * tl.n0 as usize + c),
                                    wrow(w, tl.expert, 2 * tl.n0 as usize + 128 + c),
                                ),
                            };
                            let scale = if sw.routed {
                                route.map_or(1.0, |rt| if xr < p.x_rows() { rt[xr] } else { 0.0 })
                            } else {
                                1.0
                            };
                            silu(dot(&xv, &g)) * dot(&xv, &u) * scale
                        }
                    };
                    if r < tl.valid_rows && n < p.n {
                        assert!(
                            y[xr * p.n + n].is_nan(),
                            "element ({xr}, {n}) written twice"
                        );
                        y[xr * p.n + n] = v;
                    }
                }
            }
        }
        y
    }

    #[test]
    fn the_kernels_tile_plan_computes_the_reference() {
        use crate::reference::data::HostData;
        let ragged = [0usize, 1, 40, 64, 0, 129, 3];
        let mut cases = vec![
            MoeProblem::contiguous(&ragged, 136, 24, DType::Bf16, DType::F32),
            MoeProblem::masked(&ragged, 130, 130, 16, DType::Bf16, DType::F32),
            MoeProblem::contiguous(&ragged, 256, 16, DType::Bf16, DType::F32)
                .with_swiglu(WeightLayout::Interleaved, true),
            MoeProblem::contiguous(&ragged, 200, 16, DType::Bf16, DType::F32)
                .with_swiglu(WeightLayout::Separate, false),
        ];
        cases.push(
            MoeProblem::masked(&[5, 0, 17], 20, 128, 8, DType::F16, DType::F32)
                .with_swiglu(WeightLayout::Interleaved, false),
        );
        for p in cases {
            p.validate().unwrap();
            let one = p.experts * p.n * p.k;
            let separate = matches!(
                p.swiglu,
                Some(SwiGlu {
                    weights: WeightLayout::Separate,
                    ..
                })
            );
            let x = HostData::random(p.input, p.x_elems(), 1).to_f64();
            let w = HostData::random(p.input, if separate { one } else { p.w_elems() }, 2).to_f64();
            let w3 = separate.then(|| HostData::random(p.input, one, 3).to_f64());
            let route = HostData::random(DType::F32, p.x_rows(), 4).to_f64();
            let experts = row_experts(&p);
            let routed: Vec<usize> = (0..p.x_rows()).filter(|&r| experts[r].is_some()).collect();
            let want = moe_rows(&p, &x, &w, w3.as_deref(), Some(&route), &routed);
            let cfgs: Vec<TileConfig> = if p.swiglu.is_some() {
                vec![TileConfig::SWIGLU]
            } else {
                TileConfig::ALL.to_vec()
            };
            for cfg in cfgs {
                let y = emulate(&p, &x, &w, w3.as_deref(), Some(&route), cfg);
                for (row, &r) in want.iter().zip(&routed) {
                    for (n, &v) in row.iter().enumerate() {
                        let got = y[r * p.n + n];
                        assert!(
                            (got - v).abs() <= 1e-9 * (1.0 + v.abs()),
                            "{} {cfg:?} ({r},{n}): {got} vs {v}",
                            p.label()
                        );
                    }
                }
                for r in (0..p.x_rows()).filter(|&r| experts[r].is_none()) {
                    assert!(
                        y[r * p.n..(r + 1) * p.n].iter().all(|v| v.is_nan()),
                        "row {r} of no expert written"
                    );
                }
            }
        }
    }
}
