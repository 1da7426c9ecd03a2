//! Attention verification: fresh random Q, K, V, NaN-poisoned O and LSE, the kernel's output
//! compared with the float64 reference (all rows, or a sample of rows for large shapes).

use crate::device::{Context, DeviceBuffer};
use crate::error::Result;
use crate::harness::memory;
use crate::harness::outcome::{Extra, Outcome};
use crate::harness::verify::{fresh_seed, refusal, rel_l2, spread_rows, verdict, within};
use crate::ops::attention::{check_buffers, AttentionKernel, AttentionOperands, AttentionProblem};
use crate::ops::gemm::DType;
use crate::reference::{
    attention::{attention_rows, RowRef},
    data::HostData,
};

/// Relative-error bound ‖O−ref‖/‖ref‖ by dtype: P and O are both rounded to the input type.
pub fn o_bound(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 3e-3,
        _ => 1e-2,
    }
}

/// Largest absolute LSE error accepted (LSE is computed in fp32 from fp32 scores).
pub const LSE_BOUND: f64 = 2e-3;

/// Above this many multiply-adds the reference samples query rows.
const FULL_REFERENCE_LIMIT: f64 = 2.0e9;
const SAMPLED_ROWS: usize = 48;

/// Query rows the reference computes for every (batch, head).
pub fn rows_to_check(p: &AttentionProblem, seed: u64) -> Vec<usize> {
    let work = p.batch as f64
        * p.heads_q as f64
        * p.seqlen_q as f64
        * p.seqlen_kv as f64
        * p.head_dim as f64;
    if work <= FULL_REFERENCE_LIMIT {
        return (0..p.seqlen_q).collect();
    }
    let sq = p.seqlen_q;
    let mut rows: Vec<usize> = [0, 1, 15, 16, 63, 64, 127, 128, 129]
        .into_iter()
        .filter(|&r| r < sq)
        .collect();
    rows.extend([sq - 1, sq.saturating_sub(2), sq / 2]);
    spread_rows(rows, sq, SAMPLED_ROWS, seed, |r| r)
}

/// Verifies `kernel` on `p` once, with fresh inputs.
pub fn verify_attention(
    ctx: &Context,
    kernel: &dyn AttentionKernel,
    p: &AttentionProblem,
) -> Result<Outcome> {
    verify_attention_seeded(ctx, kernel, p, fresh_seed())
}

/// Verifies `kernel` on `p` once, with the inputs of `seed` (a fuzz failure's repro).
pub fn verify_attention_seeded(
    ctx: &Context,
    kernel: &dyn AttentionKernel,
    p: &AttentionProblem,
    seed: u64,
) -> Result<Outcome> {
    p.validate()?;
    memory::plan_attention_verify(p).ensure(ctx, &format!("the problem {}", p.label()))?;
    if let Err(reason) = kernel.supports(p, &ctx.info) {
        return Ok(blank(kernel, p, seed).skip(reason));
    }
    AttnFixture::new(p, seed)?.check(ctx, kernel)
}

/// One problem's inputs on the host and the GPU, and its float64 reference rows (computed at the
/// first check that needs them): any number of versions checked against one set of inputs.
pub struct AttnFixture {
    p: AttentionProblem,
    seed: u64,
    q: HostData,
    k: HostData,
    v: HostData,
    dq: DeviceBuffer,
    dk: DeviceBuffer,
    dv: DeviceBuffer,
    o: DeviceBuffer,
    lse: DeviceBuffer,
    reference: std::cell::OnceCell<(Vec<usize>, Vec<RowRef>)>,
}

impl AttnFixture {
    pub fn new(p: &AttentionProblem, seed: u64) -> Result<AttnFixture> {
        p.validate()?;
        // Each tensor's whole span (with its strides' gaps, which no kernel may read as data).
        let [qn, kn, vn, on] = p.spans();
        let q = HostData::random(p.dtype, qn, seed);
        let k = HostData::random(p.dtype, kn, seed.wrapping_add(1));
        let v = HostData::random(p.dtype, vn, seed.wrapping_add(2));
        Ok(AttnFixture {
            p: *p,
            seed,
            dq: DeviceBuffer::from_host(q.bytes())?,
            dk: DeviceBuffer::from_host(k.bytes())?,
            dv: DeviceBuffer::from_host(v.bytes())?,
            o: DeviceBuffer::new(on * p.dtype.size())?,
            lse: DeviceBuffer::new(p.lse_elems() * 4)?,
            q,
            k,
            v,
            reference: std::cell::OnceCell::new(),
        })
    }

    /// Poisons O and LSE, launches `kernel`, and compares with the reference.
    pub fn check(&self, ctx: &Context, kernel: &dyn AttentionKernel) -> Result<Outcome> {
        let p = &self.p;
        let mut out = blank(kernel, p, self.seed);
        if let Err(reason) = kernel.supports(p, &ctx.info) {
            return Ok(out.skip(reason));
        }
        // All-ones bytes: NaN in every dtype, so an unwritten element cannot pass.
        self.o.fill_bytes(0xFF, ctx)?;
        self.lse.fill_bytes(0xFF, ctx)?;
        let ops = AttentionOperands {
            q: &self.dq,
            k: &self.dk,
            v: &self.dv,
            o: &self.o,
            lse: &self.lse,
        };
        check_buffers(p, &ops)?;
        if let Some(reason) = refusal(kernel.launch(ctx, p, &ops))? {
            return Ok(out.skip(reason));
        }
        ctx.synchronize_within(
            std::time::Duration::from_secs_f64(10.0 + p.flops() / 1e11),
            &format!("{} on {}", kernel.name(), p.label()),
        )?;
        let o_span = p.spans()[3];
        let o = HostData::from_bytes(p.dtype, &self.o.download::<u8>(o_span * p.dtype.size())?);
        let lse: Vec<f32> = self.lse.download::<f32>(p.lse_elems())?;
        // O's elements where its strides put them (the gaps between stay poisoned).
        let os = p.o_strides();
        let o_at = |b, h, i| os.offset(b, h, i);
        let mut o_nan = 0;
        for b in 0..p.batch {
            for h in 0..p.heads_q {
                for i in 0..p.seqlen_q {
                    let at = o_at(b, h, i);
                    o_nan += (at..at + p.head_dim).filter(|&x| o.get(x).is_nan()).count();
                }
            }
        }
        out.mismatches = o_nan + lse.iter().filter(|x| x.is_nan()).count();

        let (rows, reference) = self.reference.get_or_init(|| {
            let rows = rows_to_check(p, self.seed);
            let reference = attention_rows(
                p,
                &self.q.to_f64(),
                &self.k.to_f64(),
                &self.v.to_f64(),
                &rows,
            );
            (rows, reference)
        });
        let (mut diff2, mut ref2, mut lse_err) = (0.0f64, 0.0f64, 0.0f64);
        for r in reference {
            let base = o_at(r.b, r.h, r.i);
            for (dd, want) in r.o.iter().enumerate() {
                let have = o.get(base + dd);
                if have.is_finite() {
                    diff2 += (have - want) * (have - want);
                }
                ref2 += want * want;
            }
            let have = lse[(r.b * p.heads_q + r.h) * p.seqlen_q + r.i] as f64;
            let e = if r.lse == f64::NEG_INFINITY {
                if have == f64::NEG_INFINITY {
                    0.0
                } else {
                    f64::INFINITY
                }
            } else if have.is_finite() {
                (have - r.lse).abs()
            } else {
                f64::INFINITY
            };
            lse_err = lse_err.max(e);
        }
        out.rows_checked = rows.len();
        out.rel_error = rel_l2(diff2, ref2);
        out.extra = Extra::Attention {
            problem: *p,
            lse_max_error: lse_err,
        };
        (out.passed, out.message) = verdict(&[
            (out.mismatches > 0, &|| {
                format!(
                    "{} output elements (O or LSE) are NaN or were never written",
                    out.mismatches
                )
            }),
            (!within(out.rel_error, out.bound), &|| {
                format!(
                    "O relative error {:.2e} exceeds the {} bound {:.0e}",
                    out.rel_error, p.dtype, out.bound
                )
            }),
            (!within(lse_err, LSE_BOUND), &|| {
                format!("LSE error {:.2e} exceeds {:.0e}", lse_err, LSE_BOUND)
            }),
        ]);
        Ok(out)
    }
}

/// `kernel` on `p` with the inputs of `seed`, not yet judged.
fn blank(kernel: &dyn AttentionKernel, p: &AttentionProblem, seed: u64) -> Outcome {
    let extra = Extra::Attention {
        problem: *p,
        lse_max_error: f64::NAN,
    };
    Outcome::new(kernel.name(), p.label(), seed, o_bound(p.dtype), extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_problems_check_every_row_large_ones_sample_the_edges() {
        let small = AttentionProblem::new(1, 2, 1000, 128);
        assert_eq!(rows_to_check(&small, 3).len(), 1000);
        let big = AttentionProblem::new(2, 16, 8192, 128);
        let r = rows_to_check(&big, 3);
        assert!(r.len() <= SAMPLED_ROWS && r.len() >= 12);
        for must in [0, 127, 128, 129, 8191] {
            assert!(r.contains(&must));
        }
    }
}
