//! `kiln moe verify --layer`: the whole MoE layer against its float64 reference, every stage
//! judged from what the GPU left in the workspace. The routing: each token's experts as the f64
//! routing chooses them (reference/route.rs: keys within f32 rounding of each other may trade
//! places, equal keys never: the lower index wins), weights to 2e-5 relative; the row order
//! exactly (counts, offsets, each sorted row's token, each pair's row); sampled rows of H
//! against the f64 SwiGLU of their token; the output's tokens (all of them when the reference
//! is cheap, else the first, the last and a spread) against the f64 layer, tokens with a dropped
//! pair NaN in every element and no other NaN anywhere.
//!
//! Bounds: H is one rounding of an f32 sum to the 16-bit dtype, so the GEMM bound
//! ([`bound`]). The output carries that rounding of H through the down projection, its own
//! rounding, and (ordered combine) the rounding of each weighed row: three roundings of RMS
//! u/√3 each (u the dtype's unit roundoff) give ~√3 u/√3 = u RMS, and [`bound`] is ~u for the
//! GEMMs; the layer's bound is twice it.

use super::memory::Need;
use super::moe_layer::{seeds, x_row, Counter, LayerBuffers, LayerCase, RouteInputs};
use super::outcome::{Extra, Outcome};
use super::runner::Check;
use super::verify::{bound, fresh_seed, rel_l2, spread_rows, verdict, within};
use crate::device::Context;
use crate::error::Result;
use crate::ops::moe::layer::LayerLayout;
use crate::ops::moe::route::{RouteLayout, RouteSource};
use crate::ops::moe::{grouped_gemm::GroupedGemm, swiglu_dual::SwiGluDual, MoeKernel};
use crate::reference::data::HostData;
use crate::reference::moe_layer::{layer_rows, LayerWeights};
use crate::reference::route::{accept, route_given, row_order, RouteRef};

/// Above this many f64 multiply-adds the output's reference samples tokens.
const FULL_REFERENCE_LIMIT: f64 = 2.0e9;
const SAMPLED_TOKENS: usize = 32;
const SAMPLED_H_ROWS: usize = 64;
/// Routing weights: f32 softmax or sigmoid against f64.
const WEIGHT_TOL: f64 = 2e-5;

/// The layer's output bound: twice the GEMM bound of its dtype (see the module).
pub fn layer_bound(c: &LayerCase) -> f64 {
    2.0 * bound(c.problem.dtype)
}

/// Host and device bytes of one check (X, weights, output, workspace; the host keeps the
/// routing inputs and the downloaded tables, output and H rows).
pub fn plan(c: &LayerCase) -> Need {
    let p = &c.problem;
    let es = p.dtype.size() as u64;
    let (t, e, h, i) = (
        p.tokens() as u64,
        p.experts() as u64,
        p.hidden as u64,
        p.inter as u64,
    );
    let device = es * (t * h * 2 + 3 * e * h * i) + LayerLayout::of(p).bytes as u64 + (64 << 20);
    Need {
        device,
        host: 64 * t * e + 64 * p.pairs() as u64 + 16 * t * h + (64 << 20),
    }
}

/// Verifies one case with fresh inputs.
pub fn verify_layer(ctx: &Context, c: &LayerCase) -> Result<Outcome> {
    verify_layer_seeded(ctx, c, fresh_seed())
}

/// Verifies one case with the inputs of `seed` (a fuzz failure's repro).
pub fn verify_layer_seeded(ctx: &Context, c: &LayerCase, seed: u64) -> Result<Outcome> {
    c.problem.validate()?;
    super::runner::run(ctx, c, seed)
}

/// The whole layer on one case, as the runner checks it: the routing's inputs and the layer's
/// weights drawn from the seed, the output and workspace poisoned.
impl Check for LayerCase {
    type Drawn = (RouteInputs, LayerBuffers);

    fn blank(&self, seed: u64) -> Outcome {
        outcome(self, seed)
    }

    fn supports(&self, ctx: &Context) -> std::result::Result<(), String> {
        let p = &self.problem;
        SwiGluDual
            .supports(&p.up(), &ctx.info)
            .and_then(|_| GroupedGemm.supports(&p.down(), &ctx.info))
    }

    fn draw(&self, ctx: &Context, seed: u64) -> Result<Self::Drawn> {
        plan(self).ensure(ctx, &format!("the layer {}", self.label()))?;
        let inp = RouteInputs::draw(self, seeds(seed)[3]);
        let bufs = LayerBuffers::new(ctx, &self.problem, &inp, seed)?;
        Ok((inp, bufs))
    }

    fn launch(&self, ctx: &Context, (inp, bufs): &mut Self::Drawn) -> Result<()> {
        bufs.run(ctx, self, inp)
    }

    fn flops(&self) -> f64 {
        self.problem.flops()
    }

    fn judge(&self, (inp, bufs): &Self::Drawn, out: &mut Outcome) -> Result<()> {
        let got = Downloaded::of(self, bufs)?;
        judge(self, inp, &got, out.seed, out);
        Ok(())
    }
}

/// What the GPU left: the routing's tables, the output, H (fetched by row when sampled).
struct Downloaded {
    topk_ids: Vec<i32>,
    topk_weights: Vec<f32>,
    counts: Vec<i32>,
    offsets: Vec<i32>,
    row_token: Vec<i32>,
    row_weight: Vec<f32>,
    pair_row: Vec<i32>,
    out: HostData,
    /// (row, its H values) for the sampled rows.
    h_rows: Vec<(usize, Vec<f64>)>,
}

impl Downloaded {
    fn of(c: &LayerCase, b: &LayerBuffers) -> Result<Downloaded> {
        let p = &c.problem;
        let (e, r) = (p.experts(), p.pairs());
        let l = LayerLayout::of(p);
        let rl: RouteLayout = l.route;
        let ws = &b.ws;
        let offsets: Vec<i32> = ws.download_range(rl.offsets, e + 1)?;
        let mut d = Downloaded {
            topk_ids: ws.download_range(rl.topk_ids, r)?,
            topk_weights: ws.download_range(rl.topk_weights, r)?,
            counts: ws.download_range(rl.counts, e)?,
            row_token: ws.download_range(rl.row_token, r)?,
            row_weight: ws.download_range(rl.row_weight, r)?,
            pair_row: ws.download_range(rl.pair_row, r)?,
            out: HostData::from_bytes(
                p.dtype,
                &b.out
                    .download::<u8>(p.tokens() * p.hidden * p.dtype.size())?,
            ),
            h_rows: Vec::new(),
            offsets,
        };
        // H's sampled rows: each expert's first and last, then a spread over the routed rows
        let routed = (*d.offsets.last().unwrap_or(&0)).clamp(0, r as i32) as usize;
        let mut rows: Vec<usize> = d
            .offsets
            .windows(2)
            .filter(|w| w[1] > w[0] && w[1] as usize <= routed)
            .flat_map(|w| [w[0] as usize, w[1] as usize - 1])
            .collect();
        rows.truncate(SAMPLED_H_ROWS / 2);
        let rows = if routed == 0 {
            Vec::new()
        } else {
            spread_rows(
                rows,
                routed,
                SAMPLED_H_ROWS,
                c.problem.tokens() as u64,
                |i| i,
            )
        };
        let es = p.dtype.size();
        for row in rows {
            let bytes = ws.download_range::<u8>(l.h + row * p.inter * es, p.inter * es)?;
            let v = HostData::from_bytes(p.dtype, &bytes).to_f64();
            d.h_rows.push((row, v));
        }
        Ok(d)
    }
}

/// The reference routing judged against the GPU's (`Err`: the first fault), and how many
/// tokens took a near tie the other way.
fn judge_route(
    c: &LayerCase,
    inp: &RouteInputs,
    got: &Downloaded,
) -> std::result::Result<(RouteRef, usize), String> {
    let p = &c.problem.route;
    let (t, e, k) = (p.tokens, p.experts, p.top_k());
    let (r, near) = match p.source {
        RouteSource::Logits { opts, .. } => {
            let bias: Option<Vec<f64>> = inp
                .bias
                .as_ref()
                .map(|b| b.iter().map(|&x| x as f64).collect());
            let want =
                crate::reference::route::route_logits(&inp.logits, bias.as_deref(), t, e, &opts);
            let r = accept(&inp.logits, bias.as_deref(), t, e, &opts, &got.topk_ids)
                .map_err(|m| format!("routing: {m}"))?;
            let near = (0..t)
                .filter(|&i| r.ids[i * k..(i + 1) * k] != want.ids[i * k..(i + 1) * k])
                .count();
            (r, near)
        }
        RouteSource::TopK { full, .. } => {
            let r = route_given(&inp.ids, &inp.weights_f64, t, e, k, full);
            if let Some(i) = (0..t * k).find(|&i| r.ids[i] != got.topk_ids[i]) {
                return Err(format!(
                    "routing: pair {i} has expert {} on the GPU, {} given",
                    got.topk_ids[i], r.ids[i]
                ));
            }
            (r, 0)
        }
    };
    if let Some(i) = (0..t * k).find(|&i| {
        let (a, b) = (got.topk_weights[i] as f64, r.weights[i]);
        r.ids[i] >= 0 && (a - b).abs() > WEIGHT_TOL * b.abs().max(1e-6)
    }) {
        return Err(format!(
            "routing: pair {i}'s weight is {} on the GPU, {} in f64",
            got.topk_weights[i], r.weights[i]
        ));
    }
    let o = row_order(&r);
    let routed = o.row_token.len();
    let fault = if got.counts != o.counts {
        Some("the per-expert counts".to_string())
    } else if got.offsets != o.offsets {
        Some("the offsets".into())
    } else if got.row_token[..routed] != o.row_token[..] {
        Some("the sorted rows' tokens (stable order by expert, then pair)".into())
    } else if got.pair_row != o.pair_row {
        Some("the pairs' rows".into())
    } else {
        (0..t * k)
            .find(|&pi| {
                o.pair_row[pi] >= 0
                    && got.row_weight[o.pair_row[pi] as usize] != got.topk_weights[pi]
            })
            .map(|pi| format!("the weight of pair {pi}'s row"))
    };
    match fault {
        Some(what) => Err(format!("row order: {what} differ from the reference's")),
        None => Ok((r, near)),
    }
}

/// A layer check of `c` with the inputs of `seed`, not yet judged.
fn outcome(c: &LayerCase, seed: u64) -> Outcome {
    let extra = Extra::Layer {
        route: String::new(),
        near_ties: 0,
        h_error: f64::NAN,
        h_bound: bound(c.problem.dtype),
    };
    Outcome::new(
        crate::ops::moe::layer::NAME,
        c.label(),
        seed,
        layer_bound(c),
        extra,
    )
}

fn judge(c: &LayerCase, inp: &RouteInputs, got: &Downloaded, seed: u64, out: &mut Outcome) {
    let p = &c.problem;
    let (t, hd) = (p.tokens(), p.hidden);
    let [sx, s13, s2, _] = seeds(seed);
    let (w13, w2) = (Counter(s13), Counter(s2));
    let w = LayerWeights {
        w13: &w13,
        w2: &w2,
        experts: p.experts(),
        hidden: hd,
        inter: p.inter,
    };
    let x = |tok: usize| x_row(sx, hd, tok);
    let route = judge_route(c, inp, got);
    let route_said: String = match &route {
        Ok(_) => "ok".into(),
        Err(m) => m.clone(),
    };
    // H: each sampled row's expert from the GPU's offsets, its token from the GPU's row map
    // (both judged above).
    let (mut d2, mut r2) = (0.0, 0.0);
    for (row, have) in &got.h_rows {
        let e = got.offsets.partition_point(|&o| o as usize <= *row) - 1;
        let tok = got.row_token[*row] as usize;
        if tok >= t {
            d2 = f64::INFINITY;
            continue;
        }
        let want = w.swiglu(e, &x(tok));
        for (a, b) in have.iter().zip(&want) {
            d2 += if a.is_finite() {
                (a - b) * (a - b)
            } else {
                f64::INFINITY
            };
            r2 += b * b;
        }
    }
    let h_error = if got.h_rows.is_empty() {
        0.0
    } else {
        rel_l2(d2, r2)
    };
    let h_bound = bound(p.dtype);
    let mut near_ties = 0;
    // The output, against the accepted routing.
    if let Ok((r, near)) = &route {
        near_ties = *near;
        let per_token = 3.0 * p.top_k() as f64 * hd as f64 * p.inter as f64;
        let tokens: Vec<usize> = if t as f64 * per_token <= FULL_REFERENCE_LIMIT {
            (0..t).collect()
        } else {
            spread_rows(vec![0, t - 1], t, SAMPLED_TOKENS, seed, |i| i)
        };
        let want = layer_rows(&w, x, r, &tokens);
        let (mut d2, mut r2) = (0.0, 0.0);
        for (row, &tok) in want.iter().zip(&tokens) {
            let dropped = row[0].is_nan();
            for (ci, &b) in row.iter().enumerate() {
                let a = got.out.get(tok * hd + ci);
                if dropped {
                    out.mismatches += !a.is_nan() as usize;
                } else if a.is_nan() {
                    out.mismatches += 1;
                } else {
                    d2 += (a - b) * (a - b);
                    r2 += b * b;
                }
            }
        }
        out.rows_checked = tokens.len();
        out.rel_error = rel_l2(d2, r2);
    }
    let (passed, message) = verdict(&[
        (route_said != "ok", &|| route_said.clone()),
        (!within(h_error, h_bound), &|| {
            format!(
                "H's relative error {:.2e} exceeds the {} bound {:.0e}",
                h_error, p.dtype, h_bound
            )
        }),
        (out.mismatches > 0, &|| {
            format!(
                "{} output elements are NaN or unwritten where a number belongs, or a number where a dropped pair's NaN belongs",
                out.mismatches
            )
        }),
        (!within(out.rel_error, out.bound), &|| {
            format!(
                "the output's relative error {:.2e} exceeds the layer bound {:.0e}",
                out.rel_error, out.bound
            )
        }),
    ]);
    out.passed = passed;
    out.message = message;
    out.extra = Extra::Layer {
        route: route_said,
        near_ties,
        h_error,
        h_bound,
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::DType;
    use crate::reference::route::route_logits;

    /// What a correct GPU run leaves for `c` (small problems): the reference's routing, rows, H
    /// rounded to the dtype, the output rounded to the dtype (NaN for dropped tokens).
    fn correct(c: &LayerCase, inp: &RouteInputs, seed: u64) -> Downloaded {
        let p = &c.problem;
        let (t, e, k, hd) = (p.tokens(), p.experts(), p.top_k(), p.hidden);
        let r = match p.route.source {
            RouteSource::Logits { opts, .. } => {
                let bias: Option<Vec<f64>> = inp
                    .bias
                    .as_ref()
                    .map(|b| b.iter().map(|&x| x as f64).collect());
                route_logits(&inp.logits, bias.as_deref(), t, e, &opts)
            }
            RouteSource::TopK { full, .. } => {
                route_given(&inp.ids, &inp.weights_f64, t, e, k, full)
            }
        };
        let o = row_order(&r);
        let [sx, s13, s2, _] = seeds(seed);
        let (w13, w2) = (Counter(s13), Counter(s2));
        let w = LayerWeights {
            w13: &w13,
            w2: &w2,
            experts: e,
            hidden: hd,
            inter: p.inter,
        };
        let x = |tok: usize| x_row(sx, hd, tok);
        let round = |v: f64| match p.dtype {
            DType::F16 => half::f16::from_f64(v).to_f64(),
            _ => half::bf16::from_f64(v).to_f64(),
        };
        let h_rows = (0..o.row_token.len())
            .map(|row| {
                let ex = o.offsets.partition_point(|&q| q as usize <= row) - 1;
                (
                    row,
                    w.swiglu(ex, &x(o.row_token[row] as usize))
                        .into_iter()
                        .map(round)
                        .collect(),
                )
            })
            .collect();
        let tokens: Vec<usize> = (0..t).collect();
        let out: Vec<f64> = layer_rows(&w, x, &r, &tokens)
            .into_iter()
            .flatten()
            .map(round)
            .collect();
        let out = match p.dtype {
            DType::F16 => HostData::F16(
                out.iter()
                    .map(|&v| half::f16::from_f64(v).to_bits())
                    .collect(),
            ),
            _ => HostData::Bf16(
                out.iter()
                    .map(|&v| half::bf16::from_f64(v).to_bits())
                    .collect(),
            ),
        };
        let mut row_token = o.row_token.clone();
        row_token.resize(t * k, 0);
        let mut row_weight: Vec<f32> = o.row_weight.iter().map(|&v| v as f32).collect();
        row_weight.resize(t * k, 0.0);
        Downloaded {
            topk_ids: r.ids.clone(),
            topk_weights: r.weights.iter().map(|&v| v as f32).collect(),
            counts: o.counts.clone(),
            offsets: o.offsets.clone(),
            row_token,
            row_weight,
            pair_row: o.pair_row.clone(),
            out,
            h_rows,
        }
    }

    #[test]
    fn a_correct_run_passes_and_each_fault_is_named() {
        let suite = crate::harness::moe_layer::layer_suite(false);
        for c in suite
            .iter()
            .filter(|c| c.problem.tokens() * c.problem.hidden <= 16 * 1024)
        {
            let seed = 11;
            let inp = RouteInputs::draw(c, seeds(seed)[3]);
            let good = correct(c, &inp, seed);
            let mut o = outcome(c, seed);
            judge(c, &inp, &good, seed, &mut o);
            assert!(o.passed, "{}: {}", c.label(), o.message);
            assert!(
                o.rel_error < o.bound
                    && matches!(o.extra, Extra::Layer { h_error, h_bound, .. } if h_error < h_bound),
                "{}",
                c.label()
            );
            // a swapped row order
            let mut bad = correct(c, &inp, seed);
            if bad.row_token.len() > 1 && bad.row_token[0] != bad.row_token[1] {
                bad.row_token.swap(0, 1);
                let mut o = outcome(c, seed);
                judge(c, &inp, &bad, seed, &mut o);
                assert!(
                    o.message.contains("row order"),
                    "{}: {}",
                    c.label(),
                    o.message
                );
            }
            // a wrong output element, an unwritten one
            let mut bad = correct(c, &inp, seed);
            let tok = if c.dropped { c.problem.tokens() - 1 } else { 0 };
            let i = tok * c.problem.hidden;
            if let HostData::Bf16(v) | HostData::F16(v) = &mut bad.out {
                v[i] = 0xFFFF;
            }
            let mut o = outcome(c, seed);
            judge(c, &inp, &bad, seed, &mut o);
            assert!(
                !o.passed && o.mismatches == 1,
                "{}: {}",
                c.label(),
                o.message
            );
            // another expert for token 0
            let mut bad = correct(c, &inp, seed);
            let k = c.problem.top_k();
            let e = c.problem.experts() as i32;
            if k < e as usize {
                let taken: Vec<i32> = bad.topk_ids[..k].to_vec();
                bad.topk_ids[0] = (0..e).rev().find(|x| !taken.contains(x)).unwrap();
                let mut o = outcome(c, seed);
                judge(c, &inp, &bad, seed, &mut o);
                assert!(
                    o.message.starts_with("routing"),
                    "{}: {}",
                    c.label(),
                    o.message
                );
            }
        }
    }
}
