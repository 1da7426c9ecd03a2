//! `kiln pointwise verify` and `bench`: RMSNorm (with and without the fused residual) and the
//! rotary embedding on fresh random inputs through the library's checks and launches. Outputs
//! are poisoned (NaN) before the launch; every element is compared with its float64 reference
//! within the bound its formats' rounding gives (reference/pointwise.rs); the gaps between
//! strided rows and the dims past the rotary ones must come back untouched.

use serde::Serialize;

use super::bench::{stats, timed_reps, L2Flusher};
use super::outcome::{Extra, Outcome};
use super::verify::fresh_seed;
use crate::api::{validate, RawTensor, TensorInfo};
use crate::device::{Context, DeviceBuffer};
use crate::error::Result;
use crate::ops::gemm::DType;
use crate::ops::pointwise::{rmsnorm, rope};
use crate::reference::data::HostData;
use crate::reference::pointwise::{
    residual_bound, rms_norm_bound, rms_norm_row, rope_pair, rope_pairs,
};

const EPS: f32 = 1e-6;

/// One RMSNorm: `rows` rows of `cols`, rows `pad` elements apart beyond `cols`.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct NormCase {
    pub rows: usize,
    pub cols: usize,
    pub dtype: DType,
    pub residual: bool,
    pub pad: usize,
}

/// cos and sin as [B, S, R], [1, S, R] or [S, R].
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub enum Tables {
    PerSequence,
    One,
    Flat,
}

/// One rotary application: q and k as transformers' views of [B, S, H, D] memory whose token
/// rows are `pad` elements wider than H x D.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct RopeCase {
    pub batch: usize,
    pub seq: usize,
    pub hq: usize,
    pub hk: usize,
    pub d: usize,
    pub rot: usize,
    pub dtype: DType,
    pub cs_f32: bool,
    pub interleaved: bool,
    pub tables: Tables,
    pub pad: usize,
}

#[derive(Debug, Clone, Copy, Serialize)]
pub enum Case {
    Norm(NormCase),
    Rope(RopeCase),
}

impl Case {
    pub fn label(&self) -> String {
        match self {
            Case::Norm(c) => format!(
                "rmsnorm {}x{}{} {}{}",
                c.rows,
                c.cols,
                if c.pad > 0 {
                    format!(" stride {}", c.cols + c.pad)
                } else {
                    String::new()
                },
                c.dtype.name(),
                if c.residual { " +residual" } else { "" }
            ),
            Case::Rope(c) => format!(
                "rope B{} S{} H{}/{} D{} R{} {}{}{} {:?}{}",
                c.batch,
                c.seq,
                c.hq,
                c.hk,
                c.d,
                c.rot,
                c.dtype.name(),
                if c.cs_f32 { " cos f32" } else { "" },
                if c.interleaved { " interleaved" } else { "" },
                c.tables,
                if c.pad > 0 {
                    format!(" pad {}", c.pad)
                } else {
                    String::new()
                }
            ),
        }
    }
}

/// The suite: the model shapes (Llama-3-8B's and Qwen2's hidden and heads, Qwen3's head-dim
/// norms), the widest row held in registers and one past it, rows of a width or stride the
/// 16-byte variant cannot take, partial and interleaved rotary dims, every table shape, decode
/// (one token) and f16.
pub fn suite() -> Vec<Case> {
    let (bf, hf) = (DType::Bf16, DType::F16);
    let n = |rows, cols, dtype, residual, pad| {
        Case::Norm(NormCase {
            rows,
            cols,
            dtype,
            residual,
            pad,
        })
    };
    #[allow(clippy::too_many_arguments)]
    let r = |batch, seq, hq, hk, d, rot, dtype, cs_f32, interleaved, tables, pad| {
        Case::Rope(RopeCase {
            batch,
            seq,
            hq,
            hk,
            d,
            rot,
            dtype,
            cs_f32,
            interleaved,
            tables,
            pad,
        })
    };
    vec![
        n(4096, 4096, bf, false, 0),
        n(4096, 4096, bf, true, 0),
        n(8192, 2048, bf, true, 0),
        n(1, 4096, bf, true, 0),
        n(4099, 128, bf, false, 0),
        n(3, rmsnorm::MAX_VEC_COLS, hf, true, 0),
        n(3, rmsnorm::MAX_VEC_COLS + 8, bf, true, 0),
        n(33, 2048, bf, true, 8),
        n(33, 2048, hf, false, 3),
        n(9, 4100, bf, true, 0),
        n(5, 1, bf, false, 0),
        r(
            1,
            4096,
            32,
            8,
            128,
            128,
            bf,
            false,
            false,
            Tables::PerSequence,
            0,
        ),
        r(
            4,
            2048,
            16,
            2,
            128,
            128,
            bf,
            false,
            false,
            Tables::PerSequence,
            0,
        ),
        r(
            8,
            1,
            32,
            8,
            128,
            128,
            bf,
            false,
            false,
            Tables::PerSequence,
            0,
        ),
        r(2, 37, 4, 2, 64, 64, hf, false, true, Tables::Flat, 0),
        r(2, 33, 3, 1, 128, 64, bf, true, false, Tables::One, 8),
        r(3, 17, 2, 2, 64, 40, bf, false, true, Tables::PerSequence, 0),
        r(2, 19, 3, 2, 128, 128, hf, true, false, Tables::Flat, 2),
    ]
}

fn api_dtype(d: DType) -> crate::api::DType {
    match d {
        DType::Bf16 => crate::api::DType::Bf16,
        DType::F16 => crate::api::DType::F16,
        DType::F32 => crate::api::DType::F32,
    }
}

fn view(b: &DeviceBuffer, d: DType, shape: &[usize], strides: &[usize]) -> Result<TensorInfo> {
    RawTensor {
        ptr: b.ptr(),
        dtype: api_dtype(d),
        shape: shape.to_vec(),
        strides: strides.iter().map(|&s| s as isize).collect(),
        device: 0,
    }
    .info("t", false)
}

fn upload(h: &HostData) -> Result<DeviceBuffer> {
    DeviceBuffer::from_host(h.bytes())
}

fn download(b: &DeviceBuffer, d: DType, len: usize) -> Result<HostData> {
    Ok(HostData::from_bytes(d, &b.download::<u8>(len * d.size())?))
}

/// Tallies element checks.
#[derive(Default)]
struct Tally {
    worst: f64,
    nan: usize,
    outside: usize,
    first: Option<String>,
}

impl Tally {
    fn check(&mut self, got: f64, want: f64, bound: f64, at: impl Fn() -> String) {
        if got.is_nan() {
            self.nan += 1;
            self.first.get_or_insert_with(|| format!("NaN at {}", at()));
            return;
        }
        let r = (got - want).abs() / bound;
        if r > 1.0 && self.worst <= 1.0 {
            self.first
                .get_or_insert_with(|| format!("{got} for {want} (bound {bound:.2e}) at {}", at()));
        }
        self.worst = self.worst.max(r);
    }

    fn untouched(&mut self, got: &HostData, was: &HostData, i: usize) {
        if got.get(i).to_bits() != was.get(i).to_bits() {
            self.outside += 1;
            self.first
                .get_or_insert_with(|| format!("element {i} outside the view changed"));
        }
    }

    /// The outcome: the worst element's error over its bound is `rel_error` against a bound
    /// of 1.
    fn outcome(self, problem: String, vec8: bool, seed: u64) -> Outcome {
        let variant = if vec8 { "16-byte" } else { "1-element" };
        Outcome {
            passed: self.nan == 0 && self.outside == 0 && self.worst <= 1.0,
            rel_error: self.worst,
            mismatches: self.nan,
            written_outside: self.outside,
            message: self.first.unwrap_or_default(),
            ..Outcome::new(
                "pointwise",
                problem,
                seed,
                1.0,
                Extra::Pointwise { variant },
            )
        }
    }
}

/// Verifies one case with fresh inputs.
pub fn verify(ctx: &Context, c: &Case) -> Result<Outcome> {
    let seed = fresh_seed();
    match c {
        Case::Norm(n) => verify_norm(ctx, n, seed),
        Case::Rope(r) => verify_rope(ctx, r, seed),
    }
}

fn verify_norm(ctx: &Context, c: &NormCase, seed: u64) -> Result<Outcome> {
    let (d, stride) = (c.dtype, c.cols + c.pad);
    let len = c.rows * stride;
    let x = HostData::random(d, len, seed);
    let w = HostData::random(d, c.cols, seed ^ 1);
    let res = HostData::random(d, len, seed ^ 2);
    let poison = HostData::poison(d, len);
    let (xb, wb, rb, ob) = (upload(&x)?, upload(&w)?, upload(&res)?, upload(&poison)?);
    let shape = [c.rows, c.cols];
    let strides = [stride, 1];
    let (xi, wi) = (
        view(&xb, d, &shape, &strides)?,
        view(&wb, d, &[c.cols], &[1])?,
    );
    let (ri, oi) = (
        view(&rb, d, &shape, &strides)?,
        view(&ob, d, &shape, &strides)?,
    );
    let res_info = c.residual.then_some(ri);
    let Some(plan) = validate::rms_norm(0, &xi, &wi, res_info.as_ref(), &oi, EPS)? else {
        return Ok(Tally::default().outcome(Case::Norm(*c).label(), false, seed));
    };
    rmsnorm::launch(ctx, &plan.shape, &plan.ops)?;
    ctx.synchronize()?;
    let out = download(&ob, d, len)?;
    let res_out = download(&rb, d, len)?;
    let mut t = Tally::default();
    let wv = w.to_f64();
    for row in 0..c.rows {
        let base = row * stride;
        let mut input: Vec<f64> = (0..c.cols).map(|j| x.get(base + j)).collect();
        if c.residual {
            for (j, v) in input.iter_mut().enumerate() {
                let want = res.get(base + j) + *v;
                let got = res_out.get(base + j);
                t.check(got, want, residual_bound(d, want), || {
                    format!("residual row {row} col {j}")
                });
                *v = got; // the norm reads the stored sum
            }
        }
        let want = rms_norm_row(&input, &wv, EPS as f64);
        for (j, &r) in want.iter().enumerate() {
            t.check(out.get(base + j), r, rms_norm_bound(d, r), || {
                format!("row {row} col {j}")
            });
        }
        for j in c.cols..stride {
            t.untouched(&out, &poison, base + j);
            t.untouched(&res_out, &res, base + j);
        }
    }
    Ok(t.outcome(Case::Norm(*c).label(), plan.shape.vec8, seed))
}

fn verify_rope(ctx: &Context, c: &RopeCase, seed: u64) -> Result<Outcome> {
    let d = c.dtype;
    let cs_d = if c.cs_f32 { DType::F32 } else { d };
    let (tb, tshape): (usize, Vec<usize>) = match c.tables {
        Tables::PerSequence => (c.batch, vec![c.batch, c.seq, c.rot]),
        Tables::One => (1, vec![1, c.seq, c.rot]),
        Tables::Flat => (1, vec![c.seq, c.rot]),
    };
    let tstrides: Vec<usize> = match c.tables {
        Tables::Flat => vec![c.rot, 1],
        _ => vec![c.seq * c.rot, c.rot, 1],
    };
    let cos = HostData::random(cs_d, tb * c.seq * c.rot, seed ^ 3);
    let sin = HostData::random(cs_d, tb * c.seq * c.rot, seed ^ 4);
    let (cb, sb) = (upload(&cos)?, upload(&sin)?);
    // q and k: [B, S, H, D] memory, token rows `pad` wider, seen as [B, H, S, D]
    let mem = |h: usize, salt: u64| {
        let w = h * c.d + c.pad;
        let host = HostData::random(d, c.batch * c.seq * w, seed ^ salt);
        (w, host)
    };
    let ((wq, q), (wk, k)) = (mem(c.hq, 5), mem(c.hk, 6));
    let (qb, kb) = (upload(&q)?, upload(&k)?);
    let heads = |b: &DeviceBuffer, h: usize, w: usize| {
        view(b, d, &[c.batch, h, c.seq, c.d], &[c.seq * w, c.d, w, 1])
    };
    let (qi, ki) = (heads(&qb, c.hq, wq)?, heads(&kb, c.hk, wk)?);
    let (ci, si) = (
        view(&cb, cs_d, &tshape, &tstrides)?,
        view(&sb, cs_d, &tshape, &tstrides)?,
    );
    let Some(plan) = validate::rope(0, &qi, &ki, &ci, &si, c.interleaved)? else {
        return Ok(Tally::default().outcome(Case::Rope(*c).label(), false, seed));
    };
    rope::launch(ctx, &plan.shape, &plan.ops)?;
    ctx.synchronize()?;
    let got_q = download(&qb, d, q.len())?;
    let got_k = download(&kb, d, k.len())?;
    let pairs = rope_pairs(c.rot, c.interleaved);
    let mut t = Tally::default();
    for (name, was, got, h, w) in [("q", &q, &got_q, c.hq, wq), ("k", &k, &got_k, c.hk, wk)] {
        for b in 0..c.batch {
            for s in 0..c.seq {
                let row = (b * c.seq + s) * w;
                let tab = ((if tb > 1 { b } else { 0 }) * c.seq + s) * c.rot;
                for head in 0..h {
                    let at = row + head * c.d;
                    for &(i, j) in &pairs {
                        let [(ra, ba), (rb, bb)] = rope_pair(
                            d,
                            was.get(at + i),
                            was.get(at + j),
                            cos.get(tab + i),
                            sin.get(tab + i),
                            cos.get(tab + j),
                            sin.get(tab + j),
                        );
                        let here = || format!("{name} b{b} s{s} head {head} dims {i}/{j}");
                        t.check(got.get(at + i), ra, ba, here);
                        t.check(got.get(at + j), rb, bb, here);
                    }
                    for e in c.rot..c.d {
                        t.untouched(got, was, at + e);
                    }
                }
                for e in h * c.d..w {
                    t.untouched(got, was, row + e);
                }
            }
        }
    }
    Ok(t.outcome(Case::Rope(*c).label(), plan.shape.vec8, seed))
}

/// One timed kernel: its median time and the bytes it moves (read + written once).
#[derive(Debug, Clone, Serialize)]
pub struct PointwiseTiming {
    pub problem: String,
    pub median_us: f64,
    pub min_us: f64,
    pub max_us: f64,
    pub bytes: usize,
    pub tb_per_s: f64,
}

/// Times `c` (`reps` launches, L2 flushed before each): RMSNorm moves x, the weight, out (and
/// the residual twice); the rotary embedding moves q and k twice and the tables once.
pub fn bench(ctx: &Context, c: &Case, reps: usize) -> Result<PointwiseTiming> {
    let flusher = L2Flusher::new(ctx)?;
    let seed = fresh_seed();
    let (mut times, bytes) = match c {
        Case::Norm(n) => {
            let (d, len) = (n.dtype, n.rows * (n.cols + n.pad));
            let bufs: Vec<DeviceBuffer> = (0..4)
                .map(|i| upload(&HostData::random(d, len, seed ^ i)))
                .collect::<Result<_>>()?;
            let w = upload(&HostData::random(d, n.cols, seed))?;
            let (shape, strides) = ([n.rows, n.cols], [n.cols + n.pad, 1]);
            let info = |i: usize| view(&bufs[i], d, &shape, &strides);
            let res = if n.residual { Some(info(2)?) } else { None };
            let wi = view(&w, d, &[n.cols], &[1])?;
            let plan = validate::rms_norm(0, &info(0)?, &wi, res.as_ref(), &info(1)?, EPS)?;
            let Some(plan) = plan else {
                return Ok(timing(c, vec![0.0], 0));
            };
            let moved = n.rows * n.cols * d.size() * if n.residual { 4 } else { 2 };
            let times = timed_reps(ctx, &flusher, true, reps, || {
                rmsnorm::launch(ctx, &plan.shape, &plan.ops)
            })?;
            (times, moved)
        }
        Case::Rope(r) => {
            let d = r.dtype;
            let cs_d = if r.cs_f32 { DType::F32 } else { d };
            let tokens = r.batch * r.seq;
            let (wq, wk) = (r.hq * r.d + r.pad, r.hk * r.d + r.pad);
            let q = upload(&HostData::random(d, tokens * wq, seed))?;
            let k = upload(&HostData::random(d, tokens * wk, seed ^ 1))?;
            let cs = upload(&HostData::random(cs_d, tokens * r.rot, seed ^ 2))?;
            let heads = |b: &DeviceBuffer, h: usize, w: usize| {
                view(b, d, &[r.batch, h, r.seq, r.d], &[r.seq * w, r.d, w, 1])
            };
            let table = view(
                &cs,
                cs_d,
                &[r.batch, r.seq, r.rot],
                &[r.seq * r.rot, r.rot, 1],
            )?;
            let plan = validate::rope(
                0,
                &heads(&q, r.hq, wq)?,
                &heads(&k, r.hk, wk)?,
                &table,
                &table,
                r.interleaved,
            )?;
            let Some(plan) = plan else {
                return Ok(timing(c, vec![0.0], 0));
            };
            let moved =
                2 * tokens * (r.hq + r.hk) * r.rot * d.size() + 2 * tokens * r.rot * cs_d.size();
            let times = timed_reps(ctx, &flusher, true, reps, || {
                rope::launch(ctx, &plan.shape, &plan.ops)
            })?;
            (times, moved)
        }
    };
    times.iter_mut().for_each(|t| *t *= 1e3);
    Ok(timing(c, times, bytes))
}

fn timing(c: &Case, mut us: Vec<f64>, bytes: usize) -> PointwiseTiming {
    let (median, min, max) = stats(&mut us);
    PointwiseTiming {
        problem: c.label(),
        median_us: median,
        min_us: min,
        max_us: max,
        bytes,
        tb_per_s: bytes as f64 / (median * 1e-6) / 1e12,
    }
}
