//! The NVFP4 contract of the GPU MODE problems on Hopper: both operands NVFP4 (no tensor scale)
//! drawn as each problem's reference draws them, C fp16, compared as the contest compares: with
//! the float64 reference on the dequantised values rounded to fp16 (an overflow is infinity on
//! both sides and must match), |c - ref| <= 1e-3 + 1e-3 |ref| elsewhere; on the benchmark shapes
//! of the gemv, gemm, dual-gemm and group-gemm problems. The route is the simplest honest one:
//! both operands dequantised to bf16 on the GPU (exact: e2m1 x e4m3 fits bf16), then kiln's bf16
//! GEMM, fused SwiGLU or grouped GEMM with fp16 out; the GEMV runs the NVFP4 GEMV on the
//! dequantised vector. Each time covers the whole, dequantisation included, and only launches.

use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::bench::{Bench, BenchOptions};
use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::formats::Fp8Format;
use crate::ops::fp4::nvfp4_gemv::{self, GemvOperands, GemvProblem};
use crate::ops::fp4::{dequantize_into, Dequantize, Fp4Format, Fp4View};
use crate::ops::gemm::{DType, GemmOperands, GemmProblem, Layout};
use crate::ops::moe::schedule::sched_bytes;
use crate::ops::moe::{check_operands, MoeOperands, MoeProblem, WeightLayout};
use crate::ops::registry::Registry;
use crate::reference::fp4 as reference;

/// The contest's tolerance, elementwise: |c - ref| <= ATOL + RTOL |ref|.
pub use super::suite::geomean;

pub const RTOL: f64 = 1e-3;
pub const ATOL: f64 = 1e-3;

/// H100 SXM's dense bf16 tensor rate (TFLOPS), the denominator of "fraction of bf16 peak".
pub const H100_BF16_TFLOPS: f64 = 989.4;

/// One benchmark shape of the four problems (the table in the grouped low-precision anchors).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub enum SeedShape {
    /// c [M, L] = A [M, K] . b [K], L independent batches.
    Gemv {
        m: usize,
        k: usize,
        l: usize,
    },
    Gemm {
        m: usize,
        n: usize,
        k: usize,
    },
    /// silu(A . B1^T) * (A . B2^T).
    Dual {
        m: usize,
        n: usize,
        k: usize,
    },
    /// One A [M_g, K] and B [N, K] per group.
    Group {
        ms: Vec<usize>,
        n: usize,
        k: usize,
    },
}

impl SeedShape {
    pub fn problem(&self) -> &'static str {
        match self {
            SeedShape::Gemv { .. } => "gemv",
            SeedShape::Gemm { .. } => "gemm",
            SeedShape::Dual { .. } => "dual",
            SeedShape::Group { .. } => "group",
        }
    }

    pub fn label(&self) -> String {
        match self {
            SeedShape::Gemv { m, k, l } => format!("{m}x{k}x{l}"),
            SeedShape::Gemm { m, n, k } | SeedShape::Dual { m, n, k } => format!("{m}x{n}x{k}"),
            SeedShape::Group { ms, n, k } => format!("G{} M{:?} N{n} K{k}", ms.len(), ms),
        }
    }

    /// How the problem's reference draws its operands (gpu-mode reference-kernels,
    /// problems/nvidia/nvfp4_*/reference.py, `generate_input`, read at commit f83cb92).
    pub fn recipe(&self) -> Recipe {
        match self {
            // randint(0, 4) bytes: the low nibble 0, 0.5, 1 or 1.5, the high one 0; scales
            // randint(0, 3) as e4m3: 0, 1, 2
            SeedShape::Gemv { .. } => Recipe {
                codes: Codes::Below(4),
                scales: Scales::Values(&[0.0, 1.0, 2.0]),
            },
            // every byte (randint(-128, 128) as int8); scales randint(0, 4): 0, 1, 2, 3
            SeedShape::Gemm { .. } => Recipe {
                codes: Codes::Below(256),
                scales: Scales::Values(&[0.0, 1.0, 2.0, 3.0]),
            },
            // randint(255) & 0b1011_1011: 0, +-0.5, +-1, +-1.5 (and -0); scales rand() in [0, 1)
            // rounded to e4m3
            SeedShape::Dual { .. } => Recipe {
                codes: Codes::Masked(0xBB),
                scales: Scales::UnitInterval,
            },
            // the same nibbles; scales randint(1, 3): 1, 2
            SeedShape::Group { .. } => Recipe {
                codes: Codes::Masked(0xBB),
                scales: Scales::Values(&[1.0, 2.0]),
            },
        }
    }

    pub fn flops(&self) -> f64 {
        let f = match self {
            SeedShape::Gemv { m, k, l } => 2 * m * k * l,
            SeedShape::Gemm { m, n, k } => 2 * m * n * k,
            SeedShape::Dual { m, n, k } => 4 * m * n * k,
            SeedShape::Group { ms, n, k } => 2 * ms.iter().sum::<usize>() * n * k,
        };
        f as f64
    }

    /// (rows of A, rows of B) over all batches/groups, K, and C's element count.
    fn extents(&self) -> (usize, usize, usize, usize) {
        match self {
            SeedShape::Gemv { m, k, l } => (m * l, *l, *k, m * l),
            SeedShape::Gemm { m, n, k } => (*m, *n, *k, m * n),
            SeedShape::Dual { m, n, k } => (*m, *n, *k, m * n),
            SeedShape::Group { ms, n, k } => {
                let rows: usize = ms.iter().sum();
                (rows, ms.len() * n, *k, rows * n)
            }
        }
    }

    /// Bytes the problem must move: both packed operands with their scales, and C written.
    pub fn min_bytes(&self) -> f64 {
        let (a, mut b, k, c) = self.extents();
        if let SeedShape::Dual { n, .. } = self {
            b += n; // W3 beside W1
        }
        ((a + b) * (k / 2 + k / 16) + 2 * c) as f64
    }
}

/// The benchmark shapes of `problem` (gemv, gemm, dual, group; None: all). The group problem's
/// per-group M are spread evenly over the table's ranges (its exact draws are not published
/// there).
pub fn shapes(problem: Option<&str>) -> Result<Vec<SeedShape>> {
    use SeedShape::*;
    let spread = |g: usize, lo: usize, hi: usize| -> Vec<usize> {
        (0..g).map(|i| lo + (hi - lo) * i / (g - 1)).collect()
    };
    let gemv = |m, k, l| Gemv { m, k, l };
    let gemm = |m, n, k| Gemm { m, n, k };
    let dual = |m, n, k| Dual { m, n, k };
    let group = |ms, n, k| Group { ms, n, k };
    let all = vec![
        gemv(7168, 16384, 1),
        gemv(4096, 7168, 8),
        gemv(7168, 2048, 4),
        gemm(128, 7168, 16384),
        gemm(128, 4096, 7168),
        gemm(128, 7168, 2048),
        dual(256, 4096, 7168),
        dual(512, 4096, 7168),
        dual(256, 3072, 4096),
        dual(512, 3072, 7168),
        group(spread(8, 64, 248), 4096, 7168),
        group(spread(8, 40, 196), 7168, 2048),
        group(vec![192, 320], 3072, 4096),
        group(vec![128, 384], 4096, 1536),
    ];
    match problem {
        None => Ok(all),
        Some(p @ ("gemv" | "gemm" | "dual" | "group")) => {
            Ok(all.into_iter().filter(|s| s.problem() == p).collect())
        }
        Some(other) => Err(Error::Unknown {
            what: "seeds problem",
            name: other.into(),
            known: "gemv, gemm, dual, group".into(),
        }),
    }
}

/// How an operand's code bytes are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Codes {
    /// Uniform in 0..n.
    Below(u16),
    /// Uniform in 0..255 (torch's `randint(255)`), then masked.
    Masked(u8),
}

/// How an operand's e4m3 block scales are drawn.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Scales {
    /// One of these values, uniformly.
    Values(&'static [f32]),
    /// A uniform f32 in [0, 1) rounded to e4m3.
    UnitInterval,
}

/// A problem's operand data.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recipe {
    pub codes: Codes,
    pub scales: Scales,
}

impl Recipe {
    fn code(&self, rng: &mut impl Rng) -> u8 {
        match self.codes {
            Codes::Below(n) => rng.gen_range(0..n) as u8,
            Codes::Masked(mask) => rng.gen_range(0..255u8) & mask,
        }
    }

    fn scale(&self, rng: &mut impl Rng) -> u8 {
        match self.scales {
            Scales::Values(v) => Fp8Format::E4m3.encode(v[rng.gen_range(0..v.len())]),
            Scales::UnitInterval => Fp8Format::E4m3.encode(rng.gen::<f32>()),
        }
    }
}

/// How one output compares with its float64 reference under the contest's rule: the reference
/// rounded to fp16 (what the contest's reference holds), an infinity there matched only by the
/// same infinity, else |c - ref| <= ATOL + RTOL |ref|. The ratio |c - ref| / (ATOL + RTOL |ref|)
/// (pass: <= 1; infinity for a miss at an overflow or a NaN), and whether the reference
/// overflowed fp16.
pub fn judge_f16(got: half::f16, reference: f64) -> (f64, bool) {
    let want = half::f16::from_f64(reference);
    if want.is_infinite() {
        let same = got.to_bits() == want.to_bits();
        return (if same { 0.0 } else { f64::INFINITY }, true);
    }
    let (v, r) = (got.to_f64(), want.to_f64());
    let ratio = (v - r).abs() / (ATOL + RTOL * r.abs());
    (if ratio.is_nan() { f64::INFINITY } else { ratio }, false)
}

/// One shape's result.
#[derive(Debug, Clone, Serialize)]
pub struct SeedResult {
    pub problem: String,
    pub shape: String,
    pub passed: bool,
    /// The largest |c - ref| / (ATOL + RTOL |ref|) over the checked outputs (pass: <= 1).
    pub worst: f64,
    pub checked: usize,
    /// Checked outputs whose reference overflows fp16 (each matched as the same infinity).
    pub overflows: usize,
    pub median_us: f64,
    pub min_us: f64,
    pub tflops: f64,
    pub of_bf16_peak: f64,
    pub gbps: f64,
    pub of_copy: f64,
    pub message: String,
}

/// A packed NVFP4 operand of `rows` x `k` with the contest's data, on the host and the device.
struct Operand {
    codes: Vec<u8>,
    scales: Vec<u8>,
    dc: DeviceBuffer,
    ds: DeviceBuffer,
    rows: usize,
    k: usize,
}

impl Operand {
    fn random(
        rng: &mut rand::rngs::SmallRng,
        rows: usize,
        k: usize,
        recipe: &Recipe,
    ) -> Result<Operand> {
        let codes: Vec<u8> = (0..rows * k / 2).map(|_| recipe.code(rng)).collect();
        let scales: Vec<u8> = (0..rows * k / 16).map(|_| recipe.scale(rng)).collect();
        Ok(Operand {
            dc: DeviceBuffer::from_host(&codes)?,
            ds: DeviceBuffer::from_host(&scales)?,
            codes,
            scales,
            rows,
            k,
        })
    }

    fn view(&self) -> Fp4View<'_> {
        Fp4View {
            format: Fp4Format::Nvfp4,
            rows: self.rows,
            k: self.k,
            codes: &self.dc,
            scales: &self.ds,
            tensor_scale: 1.0,
        }
    }

    fn row(&self, r: usize) -> Vec<f64> {
        let mut out = vec![0.0; self.k];
        reference::decode_row(
            Fp4Format::Nvfp4,
            &self.codes,
            &self.scales,
            self.k,
            r,
            1.0,
            &mut out,
        );
        out
    }

    /// The bf16 buffer it dequantises into.
    fn dequantized(&self, ctx: &Context) -> Result<DeviceBuffer> {
        ctx.alloc(self.rows * self.k * 2)
    }
}

fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// Runs, verifies and times one shape.
pub fn run_shape(
    ctx: &Context,
    registry: &Registry,
    shape: &SeedShape,
    opt: &BenchOptions,
    copy_tbps: f64,
) -> Result<SeedResult> {
    let bench = Bench::new(ctx, opt)?;
    let mut rng = rand::rngs::SmallRng::seed_from_u64(0x5EED);
    let (a_rows, b_rows, k, c_elems) = shape.extents();
    let recipe = shape.recipe();
    let a = Operand::random(&mut rng, a_rows, k, &recipe)?;
    let b = Operand::random(&mut rng, b_rows, k, &recipe)?;
    let (xa, xb) = (a.dequantized(ctx)?, b.dequantized(ctx)?);
    let c = ctx.alloc(c_elems * 2)?;
    // Check every scale once (the timed runs trust them), then bind the launches.
    dequantize_into(ctx, &a.view(), DType::Bf16, &xa, k, true)?;
    dequantize_into(ctx, &b.view(), DType::Bf16, &xb, k, true)?;
    let (av, bv) = (a.view(), b.view());
    let da = Dequantize::new(ctx, &av, DType::Bf16, &xa, k)?;
    let db = Dequantize::new(ctx, &bv, DType::Bf16, &xb, k)?;
    // (flat row of C, its f64 reference) for the sampled rows
    let mut want: Vec<(usize, f64)> = Vec::new();
    let times = match shape {
        SeedShape::Gemv { m, k, l } => {
            // A is the weight (NVFP4, read as such), b the vector (dequantised).
            let p = GemvProblem {
                batch: *l,
                ..GemvProblem::new(1, *m, *k, DType::F16)
            };
            let ops = GemvOperands {
                x: &xb,
                ldx: *k,
                w: a.view(),
                y: &c,
                ldy: *m,
            };
            nvfp4_gemv::check_operands(&p, &ops)?;
            for bi in 0..*l {
                let v = b.row(bi);
                for r in 0..*m {
                    want.push((bi * m + r, reference::dot(&a.row(bi * m + r), &v)));
                }
            }
            let run = || -> Result<()> {
                db.enqueue(ctx, 0)?;
                nvfp4_gemv::launch(ctx, &p, &ops)
            };
            bench.one(run)?
        }
        SeedShape::Gemm { m, n, k } => {
            let p = GemmProblem::new(*m, *n, *k, Layout::RC, DType::Bf16, DType::F16);
            p.validate()?;
            let kernel = registry.select_gemm(&p, &ctx.info, &ctx.tuned, None)?;
            let ops = GemmOperands {
                a: &xa,
                b: &xb,
                c: &c,
            };
            let rows = sample(*m, 8);
            let av: Vec<Vec<f64>> = rows.iter().map(|&r| a.row(r)).collect();
            for j in 0..*n {
                let bj = b.row(j);
                for (i, &r) in rows.iter().enumerate() {
                    want.push((r * n + j, reference::dot(&av[i], &bj)));
                }
            }
            let run = || -> Result<()> {
                da.enqueue(ctx, 0)?;
                db.enqueue(ctx, 0)?;
                kernel.launch(ctx, &p, &ops)
            };
            bench.one(run)?
        }
        SeedShape::Dual { n, k, .. } | SeedShape::Group { n, k, .. } => {
            let dual = matches!(shape, SeedShape::Dual { .. });
            let counts = match shape {
                SeedShape::Group { ms, .. } => ms.clone(),
                SeedShape::Dual { m, .. } => vec![*m],
                _ => Vec::new(),
            };
            let mut p = MoeProblem::contiguous(&counts, *n, *k, DType::Bf16, DType::F16);
            if dual {
                p = p.with_swiglu(WeightLayout::Separate, false);
            }
            p.validate()?;
            let version = if dual { "swiglu_dual" } else { "grouped_gemm" };
            let kernel = registry.moe_version(version)?;
            kernel
                .supports(&p, &ctx.info)
                .map_err(Error::refused(version))?;
            let rows_buf = DeviceBuffer::from_host(p.rows_array())?;
            let sched = ctx.alloc(sched_bytes(p.experts))?;
            // Dual: B holds W1 and `b2` W3, each [N, K].
            let b2 = if dual {
                Some(Operand::random(&mut rng, *n, *k, &recipe)?)
            } else {
                None
            };
            let xb2 = b2.as_ref().map(|o| o.dequantized(ctx)).transpose()?;
            let b2v = b2.as_ref().map(|o| o.view());
            let db2 = match (&b2v, &xb2) {
                (Some(v), Some(x)) => {
                    dequantize_into(ctx, v, DType::Bf16, x, *k, true)?;
                    Some(Dequantize::new(ctx, v, DType::Bf16, x, *k)?)
                }
                _ => None,
            };
            let ops = MoeOperands {
                x: &xa,
                w: &xb,
                w3: xb2.as_ref(),
                y: &c,
                rows: &rows_buf,
                route: None,
                sched: &sched,
                row_map: None,
            };
            check_operands(&p, &ops)?;
            // the reference: sampled rows of each group, each B row decoded once
            let mut start = 0;
            for (gi, &mg) in counts.iter().enumerate() {
                let rows = sample(mg, if dual { 6 } else { 3 });
                let ar: Vec<Vec<f64>> = rows.iter().map(|&r| a.row(start + r)).collect();
                for j in 0..*n {
                    let (w1, w3) = (b.row(gi * n + j), b2.as_ref().map(|o| o.row(j)));
                    for (&r, x) in rows.iter().zip(&ar) {
                        let h = reference::dot(x, &w1);
                        let v = match &w3 {
                            Some(w3) => silu(h) * reference::dot(x, w3),
                            None => h,
                        };
                        want.push(((start + r) * n + j, v));
                    }
                }
                start += mg;
            }
            let run = || -> Result<()> {
                da.enqueue(ctx, 0)?;
                db.enqueue(ctx, 0)?;
                if let Some(d) = &db2 {
                    d.enqueue(ctx, 0)?;
                }
                kernel.launch(ctx, &p, &ops)
            };
            bench.one(run)?
        }
    };
    // the last timed run's C
    ctx.synchronize()?;
    let got: Vec<u16> = c.download(c_elems)?;
    let (mut worst, mut overflows) = (0.0f64, 0usize);
    let mut first = None;
    for &(i, r) in &want {
        let v = half::f16::from_bits(got[i]);
        let (ratio, overflow) = judge_f16(v, r);
        overflows += overflow as usize;
        if ratio > 1.0 && first.is_none() {
            first = Some(format!(
                "C[{i}] = {v}, reference {r} (as fp16 {})",
                half::f16::from_f64(r)
            ));
        }
        worst = worst.max(ratio);
    }
    let (tflops, gbps) = (
        times.rate(shape.flops(), 1e12),
        times.rate(shape.min_bytes(), 1e9),
    );
    Ok(SeedResult {
        problem: shape.problem().into(),
        shape: shape.label(),
        passed: first.is_none(),
        worst,
        checked: want.len(),
        overflows,
        median_us: times.median_ms * 1e3,
        min_us: times.min_ms * 1e3,
        tflops,
        of_bf16_peak: tflops / H100_BF16_TFLOPS,
        gbps,
        of_copy: gbps / (copy_tbps * 1e3),
        message: first.unwrap_or_else(|| match overflows {
            0 => "ok".into(),
            n => format!("ok ({n} beyond fp16, matched as infinity)"),
        }),
    })
}

/// Up to `count` row indices of 0..m, spread out, first and last included.
fn sample(m: usize, count: usize) -> Vec<usize> {
    if m <= count {
        return (0..m).collect();
    }
    (0..count).map(|i| i * (m - 1) / (count - 1)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shape_table_has_every_problem_and_refuses_others() {
        assert_eq!(shapes(None).unwrap().len(), 14);
        for (p, n) in [("gemv", 3), ("gemm", 3), ("dual", 4), ("group", 4)] {
            let s = shapes(Some(p)).unwrap();
            assert_eq!(s.len(), n, "{p}");
            assert!(s.iter().all(|x| x.problem() == p));
        }
        let e = shapes(Some("conv")).unwrap_err();
        assert!(e.to_string().contains("gemv, gemm, dual, group"), "{e}");
        let g = &shapes(Some("group")).unwrap()[0];
        let SeedShape::Group { ms, .. } = g else {
            panic!("{g:?}")
        };
        assert_eq!((ms[0], ms[7], ms.len()), (64, 248, 8));
        assert!(ms.iter().all(|&m| (64..=248).contains(&m)));
    }

    #[test]
    fn sizes_and_sampling() {
        let s = SeedShape::Gemm {
            m: 128,
            n: 4096,
            k: 7168,
        };
        assert_eq!(s.flops(), 2.0 * 128.0 * 4096.0 * 7168.0);
        assert_eq!(
            s.min_bytes(),
            ((128 + 4096) * (3584 + 448) + 2 * 128 * 4096) as f64
        );
        assert_eq!(sample(128, 8), vec![0, 18, 36, 54, 72, 90, 108, 127]);
        assert_eq!(sample(3, 8), vec![0, 1, 2]);
        assert!((geomean(&[2.0, 8.0]) - 4.0).abs() < 1e-12);
        let dual = SeedShape::Dual { m: 1, n: 1, k: 16 }.recipe();
        assert_eq!(dual.codes, Codes::Masked(0xBB));
    }

    #[test]
    fn outputs_compare_with_the_reference_rounded_to_fp16_and_overflows_match_as_infinity() {
        use half::f16;
        // beyond fp16: the contest's reference is infinity, so only the same infinity passes
        assert_eq!(judge_f16(f16::INFINITY, 112924.25), (0.0, true));
        assert_eq!(judge_f16(f16::MAX, 112924.25).0, f64::INFINITY);
        assert_eq!(judge_f16(f16::INFINITY, -98545.125).0, f64::INFINITY);
        assert_eq!(judge_f16(f16::NEG_INFINITY, -98545.125), (0.0, true));
        // 65,520 is the midpoint of 65,504 and 2^16 and rounds (to even) to infinity; just below
        // it rounds to 65,504
        assert!(judge_f16(f16::INFINITY, 65520.0).1);
        assert_eq!(judge_f16(f16::MAX, 65519.0), (0.0, false));
        // elsewhere the tolerance, against the rounded reference
        assert_eq!(judge_f16(f16::from_f32(100.0), 100.0), (0.0, false));
        assert!(judge_f16(f16::from_f32(100.0), 100.2).0 > 1.0);
        assert!(judge_f16(f16::from_f32(0.0), 0.0009).0 <= 1.0);
        assert_eq!(judge_f16(f16::NAN, 1.0).0, f64::INFINITY);
        assert_eq!(judge_f16(f16::INFINITY, 1.0).0, f64::INFINITY);
    }

    #[test]
    fn each_problem_draws_its_operands_as_its_reference_does() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let draw = |shape: &SeedShape, rng: &mut rand::rngs::SmallRng| {
            let r = shape.recipe();
            let codes: Vec<u8> = (0..4000).map(|_| r.code(rng)).collect();
            let mut scales: Vec<f32> = (0..4000)
                .map(|_| Fp8Format::E4m3.decode(r.scale(rng)))
                .collect();
            scales.sort_by(f32::total_cmp);
            scales.dedup();
            (codes, scales)
        };
        let all = shapes(None).unwrap();
        let pick = |p: &str| all.iter().find(|s| s.problem() == p).unwrap().clone();
        let (codes, scales) = draw(&pick("gemv"), &mut rng);
        assert!(codes.iter().all(|&c| c < 4) && codes.contains(&3));
        assert_eq!(scales, vec![0.0, 1.0, 2.0]);
        let (codes, scales) = draw(&pick("gemm"), &mut rng);
        assert!(codes.contains(&0xFF) && codes.contains(&0x77));
        assert_eq!(scales, vec![0.0, 1.0, 2.0, 3.0]);
        let (codes, scales) = draw(&pick("dual"), &mut rng);
        assert!(codes.iter().all(|&c| c & 0x44 == 0) && codes.contains(&0xBB));
        assert!(scales.len() > 20 && scales.iter().all(|&s| (0.0..=1.0).contains(&s)));
        let (codes, scales) = draw(&pick("group"), &mut rng);
        assert!(codes.iter().all(|&c| c & 0x44 == 0));
        assert_eq!(scales, vec![1.0, 2.0]);
    }
}
