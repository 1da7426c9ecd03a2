//! `kiln pointwise verify` and `bench`: RMSNorm (with and without the fused residual) and the
//! rotary embedding on fresh random inputs through the library's checks and launches. Outputs
//! are poisoned (NaN) before the launch; every element is compared with its float64 reference
//! within the bound its formats' rounding gives (reference/pointwise.rs); the gaps between
//! strided rows and the dims past the rotary ones must come back untouched.

use serde::Serialize;

use super::bench::{Bench, Row, Summary, Times};
use super::outcome::{Extra, Outcome};
use super::runner::Check;
use super::verify::fresh_seed;
use crate::api::validate::{self, NormPlan, RopePlan};
use crate::api::{RawTensor, TensorInfo};
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
    // (batch, seq, q heads, kv heads, head dim, rotary dims), dtype, (cos f32, interleaved)
    let r = |(batch, seq, hq, hk, d, rot), dtype, (cs_f32, interleaved), tables, pad| {
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
    let (plain, cos_f32, interleaved) = ((false, false), (true, false), (false, true));
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
            (1, 4096, 32, 8, 128, 128),
            bf,
            plain,
            Tables::PerSequence,
            0,
        ),
        r(
            (4, 2048, 16, 2, 128, 128),
            bf,
            plain,
            Tables::PerSequence,
            0,
        ),
        r((8, 1, 32, 8, 128, 128), bf, plain, Tables::PerSequence, 0),
        r((2, 37, 4, 2, 64, 64), hf, interleaved, Tables::Flat, 0),
        r((2, 33, 3, 1, 128, 64), bf, cos_f32, Tables::One, 8),
        r(
            (3, 17, 2, 2, 64, 40),
            bf,
            interleaved,
            Tables::PerSequence,
            0,
        ),
        r((2, 19, 3, 2, 128, 128), hf, cos_f32, Tables::Flat, 2),
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

    /// Fills `o`: the worst element's error over its bound is `rel_error` against a bound of 1.
    fn fill(self, o: &mut Outcome, vec8: bool) {
        o.extra = Extra::Pointwise {
            variant: if vec8 { "16-byte" } else { "1-element" },
        };
        o.passed = self.nan == 0 && self.outside == 0 && self.worst <= 1.0;
        o.rel_error = self.worst;
        o.mismatches = self.nan;
        o.written_outside = self.outside;
        o.message = self.first.unwrap_or_default();
    }
}

/// Verifies one case with fresh inputs.
pub fn verify(ctx: &Context, c: &Case) -> Result<Outcome> {
    super::runner::run(ctx, c, fresh_seed())
}

/// A drawn RMSNorm: the host inputs, the poisoned output and the residual (both written), and
/// the plan (`None`: nothing to do).
pub struct NormDrawn {
    x: HostData,
    w: HostData,
    res: HostData,
    poison: HostData,
    bufs: [DeviceBuffer; 4],
    plan: Option<NormPlan>,
}

/// A drawn rotary embedding: the tables, q and k (rotated in place) and their row widths.
pub struct RopeDrawn {
    cos: HostData,
    sin: HostData,
    q: HostData,
    k: HostData,
    /// q, k, cos, sin.
    bufs: [DeviceBuffer; 4],
    wq: usize,
    wk: usize,
    /// Batches of the tables (1 when shared).
    tb: usize,
    plan: Option<RopePlan>,
}

pub enum Drawn {
    Norm(NormDrawn),
    Rope(RopeDrawn),
}

impl Check for Case {
    type Drawn = Drawn;

    fn blank(&self, seed: u64) -> Outcome {
        let extra = Extra::Pointwise {
            variant: "1-element",
        };
        Outcome::new("pointwise", self.label(), seed, 1.0, extra)
    }

    fn supports(&self, _ctx: &Context) -> std::result::Result<(), String> {
        Ok(())
    }

    fn draw(&self, _ctx: &Context, seed: u64) -> Result<Drawn> {
        match self {
            Case::Norm(c) => draw_norm(c, seed).map(Drawn::Norm),
            Case::Rope(c) => draw_rope(c, seed).map(Drawn::Rope),
        }
    }

    fn launch(&self, ctx: &Context, d: &mut Drawn) -> Result<()> {
        match d {
            Drawn::Norm(NormDrawn { plan: Some(p), .. }) => rmsnorm::launch(ctx, &p.shape, &p.ops),
            Drawn::Rope(RopeDrawn { plan: Some(p), .. }) => rope::launch(ctx, &p.shape, &p.ops),
            _ => Ok(()),
        }
    }

    /// Bandwidth-bound: the runner's wait is its floor.
    fn flops(&self) -> f64 {
        0.0
    }

    fn judge(&self, d: &Drawn, o: &mut Outcome) -> Result<()> {
        let (t, vec8) = match (self, d) {
            (Case::Norm(c), Drawn::Norm(d)) => judge_norm(c, d)?,
            (Case::Rope(c), Drawn::Rope(d)) => judge_rope(c, d)?,
            _ => unreachable!("a case judges its own draw"),
        };
        t.fill(o, vec8);
        Ok(())
    }
}

fn draw_norm(c: &NormCase, seed: u64) -> Result<NormDrawn> {
    let (d, stride) = (c.dtype, c.cols + c.pad);
    let len = c.rows * stride;
    let x = HostData::random(d, len, seed);
    let w = HostData::random(d, c.cols, seed ^ 1);
    let res = HostData::random(d, len, seed ^ 2);
    let poison = HostData::poison(d, len);
    let bufs = [upload(&x)?, upload(&w)?, upload(&res)?, upload(&poison)?];
    let shape = [c.rows, c.cols];
    let strides = [stride, 1];
    let (xi, wi) = (
        view(&bufs[0], d, &shape, &strides)?,
        view(&bufs[1], d, &[c.cols], &[1])?,
    );
    let (ri, oi) = (
        view(&bufs[2], d, &shape, &strides)?,
        view(&bufs[3], d, &shape, &strides)?,
    );
    let res_info = c.residual.then_some(ri);
    let plan = validate::rms_norm(0, &xi, &wi, res_info.as_ref(), &oi, EPS)?;
    Ok(NormDrawn {
        x,
        w,
        res,
        poison,
        bufs,
        plan,
    })
}

fn judge_norm(c: &NormCase, dr: &NormDrawn) -> Result<(Tally, bool)> {
    let Some(plan) = &dr.plan else {
        return Ok((Tally::default(), false));
    };
    let (d, stride) = (c.dtype, c.cols + c.pad);
    let len = c.rows * stride;
    let (x, res, poison) = (&dr.x, &dr.res, &dr.poison);
    let out = download(&dr.bufs[3], d, len)?;
    let res_out = download(&dr.bufs[2], d, len)?;
    let mut t = Tally::default();
    let wv = dr.w.to_f64();
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
            t.untouched(&out, poison, base + j);
            t.untouched(&res_out, res, base + j);
        }
    }
    Ok((t, plan.shape.vec8))
}

fn draw_rope(c: &RopeCase, seed: u64) -> Result<RopeDrawn> {
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
    // q and k: [B, S, H, D] memory, token rows `pad` wider, seen as [B, H, S, D]
    let mem = |h: usize, salt: u64| {
        let w = h * c.d + c.pad;
        let host = HostData::random(d, c.batch * c.seq * w, seed ^ salt);
        (w, host)
    };
    let ((wq, q), (wk, k)) = (mem(c.hq, 5), mem(c.hk, 6));
    let bufs = [upload(&q)?, upload(&k)?, upload(&cos)?, upload(&sin)?];
    let heads = |b: &DeviceBuffer, h: usize, w: usize| {
        view(b, d, &[c.batch, h, c.seq, c.d], &[c.seq * w, c.d, w, 1])
    };
    let (qi, ki) = (heads(&bufs[0], c.hq, wq)?, heads(&bufs[1], c.hk, wk)?);
    let (ci, si) = (
        view(&bufs[2], cs_d, &tshape, &tstrides)?,
        view(&bufs[3], cs_d, &tshape, &tstrides)?,
    );
    let plan = validate::rope(0, &qi, &ki, &ci, &si, c.interleaved)?;
    Ok(RopeDrawn {
        cos,
        sin,
        q,
        k,
        bufs,
        wq,
        wk,
        tb,
        plan,
    })
}

fn judge_rope(c: &RopeCase, dr: &RopeDrawn) -> Result<(Tally, bool)> {
    let Some(plan) = &dr.plan else {
        return Ok((Tally::default(), false));
    };
    let d = c.dtype;
    let (cos, sin, tb) = (&dr.cos, &dr.sin, dr.tb);
    let got_q = download(&dr.bufs[0], d, dr.q.len())?;
    let got_k = download(&dr.bufs[1], d, dr.k.len())?;
    let pairs = rope_pairs(c.rot, c.interleaved);
    let mut t = Tally::default();
    for (name, was, got, h, w) in [
        ("q", &dr.q, &got_q, c.hq, dr.wq),
        ("k", &dr.k, &got_k, c.hk, dr.wk),
    ] {
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
    Ok((t, plan.shape.vec8))
}

/// Times `c` in `run` (L2 flushed before each launch) on the inputs its check draws: RMSNorm
/// moves x, the weight, out (and the residual twice); the rotary embedding moves q and k twice
/// and the cos and sin tables once. A row of `problem`, the times in µs, `bytes` (moved, read
/// and written once) and `tb_per_s`.
pub fn bench(run: &Bench, c: &Case) -> Result<Row> {
    let ctx = run.ctx;
    let mut d = c.draw(ctx, fresh_seed())?;
    let (t, bytes) = if matches!(
        &d,
        Drawn::Norm(NormDrawn { plan: None, .. }) | Drawn::Rope(RopeDrawn { plan: None, .. })
    ) {
        (Summary::of(vec![0.0]), 0)
    } else {
        let bytes = match c {
            Case::Norm(n) => n.rows * n.cols * n.dtype.size() * if n.residual { 4 } else { 2 },
            Case::Rope(r) => {
                let cs = if r.cs_f32 { DType::F32 } else { r.dtype }.size();
                let tokens = r.batch * r.seq;
                2 * tokens * (r.hq + r.hk) * r.rot * r.dtype.size() + 2 * tokens * r.rot * cs
            }
        };
        (run.one(|| c.launch(ctx, &mut d))?, bytes)
    };
    Ok(Row::timed(&t, Times::Us)
        .with("problem", c.label())
        .with("bytes", bytes)
        .with("tb_per_s", t.rate(bytes as f64, 1e12)))
}
