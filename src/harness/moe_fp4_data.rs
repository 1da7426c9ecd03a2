//! The host side of a 4-bit MoE check, sized by the experts that own rows: random weights for
//! those experts only (codes and block scales drawn directly, experts in parallel), their
//! prepack, the activations, and the float64 reference expert by expert. An expert without rows
//! is never read by the kernel, so it gets no weights: its bytes on the GPU are a poison that
//! turns any read into NaN or infinity (see [`poison_byte`]).

use rand::{Rng, RngCore, SeedableRng};
use rayon::prelude::*;

use crate::error::Result;
use crate::ops::gemm::DType;
use crate::ops::moe::fp4::kernel::Fp4Layout;
use crate::ops::moe::fp4::{prepack, prepack_swiglu, Fp4Format, Fp4Prepacked, Fp4Weights};
use crate::ops::moe::{MoeProblem, SwiGlu, WeightLayout};
use crate::reference::data::HostData;
use crate::reference::moe::{moe_rows, row_experts};

/// Experts that own at least one row: the only ones whose weights the kernel reads.
pub fn touched_experts(p: &MoeProblem) -> Vec<usize> {
    p.spans()
        .iter()
        .enumerate()
        .filter(|(_, s)| s.1 > 0)
        .map(|(e, _)| e)
        .collect()
}

/// The byte that fills the prepacked weights of experts without rows. As a scale byte it is a
/// NaN multiplier (NVFP4: 0x99 x 16 + 0x7600 = 0x7F90 in bf16, 0x99 x 128 + 0x3000 = 0x7C80 in
/// f16) or an infinite one (MXFP4: 0xFF x 128 = 0x7F80; f16 (0xFF & 31) x 1024 = 0x7C00), so a
/// kernel that reads any of those weights writes NaN or infinity, which the check counts.
pub fn poison_byte(f: Fp4Format) -> u8 {
    match f {
        Fp4Format::Nvfp4 => 0x99,
        Fp4Format::Mxfp4 => 0xFF,
    }
}

/// Random [rows, K] weights of `ids.len()` experts: expert i stands for expert `ids[i]` of the
/// problem and its data depends only on `seed` and that id. Codes are random bytes (every byte
/// is two valid codes), one block in 64 all ±0; block scales are drawn per block over a few
/// binades (NVFP4 e4m3 2^-2 .. 3.75, one in 64 zero; MXFP4 2^-5 .. 2^0), and each expert has its
/// own tensor scale (NVFP4) or binade (MXFP4), so the experts' scales differ. Experts in parallel.
pub fn random_expert_weights(
    f: Fp4Format,
    ids: &[usize],
    rows: usize,
    k: usize,
    seed: u64,
) -> Result<Fp4Weights> {
    let (bs, cb) = (f.block(), rows * k / 2);
    let sb = rows * (k / bs);
    let mut w = Fp4Weights {
        format: f,
        experts: ids.len(),
        rows,
        k,
        codes: vec![0u8; ids.len() * cb],
        scales: vec![0u8; ids.len() * sb],
        tensor_scales: Vec::new(),
    };
    w.codes
        .par_chunks_mut(cb.max(1))
        .zip(w.scales.par_chunks_mut(sb.max(1)))
        .zip(ids.par_iter())
        .for_each(|((codes, scales), &id)| {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(
                seed ^ (id as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15),
            );
            rng.fill_bytes(codes);
            let shift = (id % 5) as i32 - 2;
            for (block, s) in codes.chunks_exact_mut(bs / 2).zip(scales.iter_mut()) {
                let r: u32 = rng.gen();
                if r.is_multiple_of(64) {
                    block.iter_mut().for_each(|b| *b &= 0x88); // ±0, signs kept
                }
                *s = match f {
                    // e4m3 exponent field 5..=8 (2^-2 .. 2^1), any mantissa; one in 64 zero
                    Fp4Format::Nvfp4 if (r >> 6).is_multiple_of(64) => 0,
                    Fp4Format::Nvfp4 => ((5 + (r >> 12) % 4) << 3 | (r >> 16) & 7) as u8,
                    Fp4Format::Mxfp4 => (127 + shift - ((r >> 12) % 6) as i32) as u8,
                };
            }
        });
    if f == Fp4Format::Nvfp4 {
        w.tensor_scales = ids
            .iter()
            .map(|&id| 2f32.powi((id % 5) as i32 - 5) * (1.0 + (id % 7) as f32 / 8.0))
            .collect();
    }
    w.validate()?;
    Ok(w)
}

/// Reference rows with their positions in the rows asked for.
type Rows = Vec<(usize, Vec<f64>)>;

/// The host side of one check of `p`: the touched experts' weights (standard layout: W, or W1
/// or W13, and W3 when separate) and their prepack, X and the routing weights.
pub struct Fp4Case {
    pub touched: Vec<usize>,
    pub w: Fp4Weights,
    pub w3: Option<Fp4Weights>,
    /// The touched experts only, in `touched`'s order.
    pub packed: Fp4Prepacked,
    pub x: HostData,
    pub route: Option<HostData>,
}

impl Fp4Case {
    pub fn random(p: &MoeProblem, f: Fp4Format, seed: u64) -> Result<Fp4Case> {
        let touched = touched_experts(p);
        let (w, w3) = random_weights_for(p, f, &touched, seed.wrapping_add(1))?;
        let packed = prepack_for(p, &w, w3.as_ref())?;
        Ok(Fp4Case {
            touched,
            w,
            w3,
            packed,
            x: HostData::random(p.input, p.x_elems(), seed),
            route: p
                .swiglu
                .is_some_and(|s| s.routed)
                .then(|| HostData::random(DType::F32, p.x_rows(), seed.wrapping_add(3))),
        })
    }

    /// The layout of all `p.experts` experts on the GPU (the untouched ones poisoned).
    pub fn layout(&self, p: &MoeProblem) -> Fp4Layout {
        Fp4Layout {
            experts: p.experts,
            ..self.packed.layout()
        }
    }

    /// The epilogue factors of all experts: the touched experts' own, NaN for the others.
    pub fn escale(&self, p: &MoeProblem) -> Vec<f32> {
        let h = self.packed.halves();
        let mut v = vec![f32::NAN; p.experts * h];
        for (i, &e) in self.touched.iter().enumerate() {
            v[e * h..(e + 1) * h].copy_from_slice(&self.packed.escale[i * h..(i + 1) * h]);
        }
        v
    }

    /// The float64 reference of the X rows in `rows` (each owned by an expert), on the exact
    /// weights: [`reference_by_expert`].
    pub fn reference(&self, p: &MoeProblem, rows: &[usize]) -> Result<Vec<Vec<f64>>> {
        let k = p.k;
        let x_row = |r: usize| (0..k).map(|c| self.x.get(r * k + c)).collect();
        let route = |r: usize| self.route.as_ref().map_or(1.0, |rt| rt.get(r));
        reference_by_expert(
            p,
            &self.touched,
            &self.w,
            self.w3.as_ref(),
            &x_row,
            &route,
            rows,
        )
    }
}

/// The float64 reference of the X rows in `rows` (each owned by an expert) of `p`, expert by
/// expert in parallel, each dequantising only its own weights: expert `touched[i]`'s are
/// expert i of `w` (and `w3`). `x_row(r)` is row r of X, `route(r)` its routing weight (read only
/// for a routed SwiGLU).
#[allow(clippy::type_complexity)]
pub fn reference_by_expert(
    p: &MoeProblem,
    touched: &[usize],
    w: &Fp4Weights,
    w3: Option<&Fp4Weights>,
    x_row: &(dyn Fn(usize) -> Vec<f64> + Sync),
    route: &(dyn Fn(usize) -> f64 + Sync),
    rows: &[usize],
) -> Result<Vec<Vec<f64>>> {
    let owner = row_experts(p);
    let mut index = vec![usize::MAX; p.experts];
    for (i, &e) in touched.iter().enumerate() {
        index[e] = i;
    }
    // (sub-expert, positions in `rows`) for every expert that owns a row to check
    let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
    for (pos, &r) in rows.iter().enumerate() {
        let i = index[owner[r].expect("reference rows belong to an expert")];
        match groups.iter_mut().find(|g| g.0 == i) {
            Some(g) => g.1.push(pos),
            None => groups.push((i, vec![pos])),
        }
    }
    // each thread dequantises into buffers of its own, reused from expert to expert
    let parts: Vec<Result<Rows>> = groups
        .par_iter()
        .map_init(
            || (Vec::new(), Vec::new()),
            |(wb, w3b), (i, at)| {
                w.dequantize_expert_into(*i, wb)?;
                let w3v = match w3 {
                    Some(src) => {
                        src.dequantize_expert_into(*i, w3b)?;
                        Some(w3b.as_slice())
                    }
                    None => None,
                };
                // one expert owning the group's rows, 0..m, in a problem of their own
                let mut one = MoeProblem::contiguous(&[at.len()], p.n, p.k, p.input, p.output);
                one.swiglu = p.swiglu;
                let x: Vec<f64> = at.iter().flat_map(|&pos| x_row(rows[pos])).collect();
                let rt: Vec<f64> = at.iter().map(|&pos| route(rows[pos])).collect();
                let local: Vec<usize> = (0..at.len()).collect();
                let got = moe_rows(&one, &x, wb, w3v, Some(&rt), &local);
                Ok(at.iter().copied().zip(got).collect())
            },
        )
        .collect();
    let mut out = vec![Vec::new(); rows.len()];
    for part in parts {
        for (pos, row) in part? {
            out[pos] = row;
        }
    }
    Ok(out)
}

/// Random 4-bit weights of every expert of `p` (the standard layout for W or W1 or W13, and W3
/// when separate): [`random_expert_weights`] for all of them.
pub fn random_weights(
    p: &MoeProblem,
    f: Fp4Format,
    seed: u64,
) -> Result<(Fp4Weights, Option<Fp4Weights>)> {
    random_weights_for(p, f, &(0..p.experts).collect::<Vec<_>>(), seed)
}

/// The weights of experts `ids` of `p`, as [`random_weights`] would make them.
pub fn random_weights_for(
    p: &MoeProblem,
    f: Fp4Format,
    ids: &[usize],
    seed: u64,
) -> Result<(Fp4Weights, Option<Fp4Weights>)> {
    let rows = p.w_rows_per_expert();
    let separate = matches!(
        p.swiglu,
        Some(SwiGlu {
            weights: WeightLayout::Separate,
            ..
        })
    );
    Ok((
        random_expert_weights(f, ids, rows, p.k, seed)?,
        if separate {
            Some(random_expert_weights(
                f,
                ids,
                rows,
                p.k,
                seed ^ 0x5A5A_5A5A,
            )?)
        } else {
            None
        },
    ))
}

/// Prepacks what [`random_weights`] made for `p`'s kind.
pub fn prepack_for(
    p: &MoeProblem,
    w: &Fp4Weights,
    w3: Option<&Fp4Weights>,
) -> Result<Fp4Prepacked> {
    if p.swiglu.is_some() {
        prepack_swiglu(w, w3)
    } else {
        prepack(w)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_experts_weights_depend_on_its_id_only() {
        for f in Fp4Format::ALL {
            let all = random_expert_weights(f, &[0, 1, 2, 3], 8, 64, 9).unwrap();
            let some = random_expert_weights(f, &[3, 1], 8, 64, 9).unwrap();
            for (i, e) in [(0, 3), (1, 1)] {
                assert_eq!(
                    some.dequantize_expert(i).unwrap(),
                    all.dequantize_expert(e).unwrap()
                );
            }
            // scales differ across experts and blocks; codes cover every value
            assert_ne!(all.scales[..16], all.scales[16..32]);
            let codes: std::collections::HashSet<u8> =
                all.codes.iter().flat_map(|b| [b & 15, b >> 4]).collect();
            assert_eq!(codes.len(), 16);
        }
    }

    #[test]
    fn the_reference_by_expert_is_the_reference_on_all_weights() {
        let p = MoeProblem::contiguous(&[2, 0, 3, 1], 128, 64, DType::Bf16, DType::Bf16)
            .with_swiglu(WeightLayout::Interleaved, true);
        for f in Fp4Format::ALL {
            let c = Fp4Case::random(&p, f, 4).unwrap();
            assert_eq!(c.touched, vec![0, 2, 3]);
            assert_eq!(c.packed.experts, 3);
            let (w, _) = random_weights(&p, f, 5).unwrap();
            let rows = [5, 0, 3, 2];
            let got = c.reference(&p, &rows).unwrap();
            let want = moe_rows(
                &p,
                &c.x.to_f64(),
                &w.dequantize().unwrap(),
                None,
                c.route.as_ref().map(HostData::to_f64).as_deref(),
                &rows,
            );
            assert_eq!(got, want);
            let es = c.escale(&p);
            assert!(es[2].is_nan() && es[3].is_nan() && es[0].is_finite());
        }
    }

    /// The host side of `kiln moe verify --weights F --counts C --n 2048 --k 7168 --swiglu` on
    /// the decode counts, timed (no GPU): weights and prepack, then the reference rows.
    /// `cargo test --release --lib host_side_of_a_decode_verify -- --ignored --nocapture`;
    /// KILN_FP4_TIMING_ROWS picks the counts (64: 64 rows on 64 of 256 experts, the default;
    /// 512: 3 rows on 114 experts and 2 on 85, 199 of 256, as scripts/gpu.sh fp4moe).
    #[test]
    #[ignore]
    fn host_side_of_a_decode_verify() {
        let rows = std::env::var("KILN_FP4_TIMING_ROWS").unwrap_or_else(|_| "64".into());
        let counts: Vec<usize> = match rows.as_str() {
            "512" => (0..256)
                .map(|i| [3, 2, 0][(i >= 114) as usize + (i >= 199) as usize])
                .collect(),
            _ => (0..256).map(|i| (i % 4 == 0) as usize).collect(),
        };
        let p = MoeProblem::contiguous(&counts, 2048, 7168, DType::Bf16, DType::Bf16)
            .with_swiglu(WeightLayout::Separate, true);
        let touched = touched_experts(&p).len();
        // (wall, CPU) seconds: the CPU time of the process, from /proc (the box may be shared)
        let clock = || {
            let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
            let f: Vec<f64> = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .filter_map(|x| x.parse().ok())
                .collect();
            let cpu = f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0);
            (std::time::Instant::now(), cpu / 100.0)
        };
        let since = |(t, c): (std::time::Instant, f64)| {
            let (_, now) = clock();
            format!("{:.2} s ({:.2} s CPU)", t.elapsed().as_secs_f64(), now - c)
        };
        for f in Fp4Format::ALL {
            let t = clock();
            let c = Fp4Case::random(&p, f, 11).unwrap();
            let make = since(t);
            let rows = crate::harness::moe_verify::rows_to_check(&p, 11);
            let t = clock();
            let r = c.reference(&p, &rows).unwrap();
            eprintln!(
                "{f}: {} rows on {touched} of 256 experts, {} threads: weights and prepack {make}, reference of {} rows {}",
                p.routed_rows(),
                rayon::current_num_threads(),
                r.len(),
                since(t)
            );
        }
    }
}
