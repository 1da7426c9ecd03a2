//! Attention backward verification: fresh random Q, K, V and dO, O and LSE from kiln's forward,
//! NaN-poisoned dQ, dK and dV, each gradient compared with the float64 reference; in
//! deterministic mode a second run must give the same bits.

use serde::Serialize;

use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::harness::verify::{fresh_seed, refusal, rel_l2, verdict, within};
use crate::ops::attention::{AttentionKernel, AttentionOperands};
use crate::ops::attention_backward::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::ops::gemm::DType;
use crate::reference::{attention_backward::attention_backward, data::HostData};

/// Relative-error bound ‖g−ref‖/‖ref‖ of each gradient by dtype. P and dS are rounded to the
/// input type before their GEMMs and the gradients once more at the end: three roundings of
/// about 2^-9 (bf16) or 2^-12 (f16) relative, each averaging out over a reduction, give about
/// 2e-3 and 3e-4; the bounds leave a factor of five to ten, as the forward's do.
pub fn grad_bound(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 3e-3,
        _ => 1e-2,
    }
}

/// The float64 reference computes every gradient whole (dK and dV need every query row): above
/// this many multiply-adds per (query, key, dim) triple summed over heads a problem is refused.
pub const REFERENCE_LIMIT: f64 = 2.5e10;

#[derive(Debug, Clone, Serialize)]
pub struct BackwardCheck {
    pub version: String,
    pub problem: BackwardProblem,
    pub passed: bool,
    pub skipped: Option<String>,
    /// ‖g−ref‖/‖ref‖ of dQ, dK and dV.
    pub dq_error: f64,
    pub dk_error: f64,
    pub dv_error: f64,
    pub bound: f64,
    pub nan_or_unwritten: usize,
    /// Deterministic mode: whether a second run gave the same bits (None: not checked).
    pub reproducible: Option<bool>,
    pub seed: u64,
    pub message: String,
}

impl BackwardCheck {
    pub fn blank(version: &str, p: &BackwardProblem, seed: u64) -> BackwardCheck {
        BackwardCheck {
            version: version.into(),
            problem: *p,
            passed: false,
            skipped: None,
            dq_error: f64::NAN,
            dk_error: f64::NAN,
            dv_error: f64::NAN,
            bound: grad_bound(p.attn.dtype),
            nan_or_unwritten: 0,
            reproducible: None,
            seed,
            message: String::new(),
        }
    }

    /// The problem was refused with `reason`: a skip, which passes.
    fn skip(mut self, reason: String) -> Self {
        self.skipped = Some(reason);
        self.passed = true;
        self
    }

    /// The largest of the three errors (NaN if any is).
    pub fn max_error(&self) -> f64 {
        [self.dq_error, self.dk_error, self.dv_error]
            .into_iter()
            .fold(0.0, |m, e| {
                if e.is_nan() || m.is_nan() {
                    f64::NAN
                } else {
                    m.max(e)
                }
            })
    }
}

/// Multiply-adds of the float64 reference for `p` (per query, key and dim, over every head).
pub fn reference_work(p: &BackwardProblem) -> f64 {
    let a = &p.attn;
    a.batch as f64 * a.heads_q as f64 * a.pairs() as f64 * a.head_dim as f64
}

/// Verifies `kernel` on `p` with fresh inputs, O and LSE from `forward`.
pub fn verify_backward(
    ctx: &Context,
    forward: &dyn AttentionKernel,
    kernel: &dyn AttentionBackwardKernel,
    p: &BackwardProblem,
) -> Result<BackwardCheck> {
    let seed = fresh_seed();
    p.validate()?;
    let out = BackwardCheck::blank(kernel.name(), p, seed);
    if let Err(reason) = kernel.supports(p, &ctx.info) {
        return Ok(out.skip(reason));
    }
    if reference_work(p) > REFERENCE_LIMIT {
        return Err(Error::invalid(format!(
            "{} is too large for the float64 reference ({:.1e} multiply-adds, at most {REFERENCE_LIMIT:.1e}); verify a smaller problem",
            p.label(),
            reference_work(p)
        )));
    }
    ctx.ensure_fits(&format!("the problem {}", p.label()), p.device_bytes())?;
    BackwardFixture::new(ctx, forward, p, seed)?.check(ctx, kernel, out)
}

/// One problem's inputs on the host and the GPU, O and LSE from the forward, and the poisoned
/// gradients.
struct BackwardFixture {
    p: BackwardProblem,
    q: HostData,
    k: HostData,
    v: HostData,
    d_o: HostData,
    bufs: [DeviceBuffer; 9],
}

impl BackwardFixture {
    fn new(
        ctx: &Context,
        forward: &dyn AttentionKernel,
        p: &BackwardProblem,
        seed: u64,
    ) -> Result<BackwardFixture> {
        let a = &p.attn;
        let q = HostData::random(a.dtype, a.q_elems(), seed);
        let k = HostData::random(a.dtype, a.kv_elems(), seed.wrapping_add(1));
        let v = HostData::random(a.dtype, a.kv_elems(), seed.wrapping_add(2));
        let d_o = HostData::random(a.dtype, a.q_elems(), seed.wrapping_add(3));
        let e = a.dtype.size();
        let bufs = [
            DeviceBuffer::from_host(q.bytes())?,
            DeviceBuffer::from_host(k.bytes())?,
            DeviceBuffer::from_host(v.bytes())?,
            DeviceBuffer::new(a.q_elems() * e)?,
            DeviceBuffer::from_host(d_o.bytes())?,
            DeviceBuffer::new(a.lse_elems() * 4)?,
            DeviceBuffer::new(a.q_elems() * e)?,
            DeviceBuffer::new(a.kv_elems() * e)?,
            DeviceBuffer::new(a.kv_elems() * e)?,
        ];
        let fwd = AttentionOperands {
            q: &bufs[0],
            k: &bufs[1],
            v: &bufs[2],
            o: &bufs[3],
            lse: &bufs[5],
        };
        crate::ops::attention::check_buffers(a, &fwd)?;
        if let Some(reason) = refusal(forward.launch(ctx, a, &fwd))? {
            return Err(Error::Unsupported {
                kernel: forward.name().into(),
                reason: format!("the forward that makes O and LSE refused: {reason}"),
            });
        }
        Ok(BackwardFixture {
            p: *p,
            q,
            k,
            v,
            d_o,
            bufs,
        })
    }

    fn operands(&self) -> BackwardOperands<'_> {
        let b = &self.bufs;
        BackwardOperands {
            q: &b[0],
            k: &b[1],
            v: &b[2],
            o: &b[3],
            d_o: &b[4],
            lse: &b[5],
            dq: &b[6],
            dk: &b[7],
            dv: &b[8],
        }
    }

    /// Poisons the gradients, launches, waits; the gradients as downloaded, or the refusal.
    fn run(
        &self,
        ctx: &Context,
        kernel: &dyn AttentionBackwardKernel,
    ) -> Result<std::result::Result<[HostData; 3], String>> {
        let a = &self.p.attn;
        let ops = self.operands();
        for g in [ops.dq, ops.dk, ops.dv] {
            // All-ones bytes: NaN in every dtype, so an unwritten element cannot pass.
            g.fill_bytes(0xFF, ctx)?;
        }
        if let Some(reason) = refusal(kernel.launch(ctx, &self.p, &ops))? {
            return Ok(Err(reason));
        }
        ctx.synchronize_within(
            std::time::Duration::from_secs_f64(10.0 + self.p.flops() / 1e11),
            &format!("{} on {}", kernel.name(), self.p.label()),
        )?;
        let e = a.dtype.size();
        let get = |b: &DeviceBuffer, n: usize| -> Result<HostData> {
            Ok(HostData::from_bytes(a.dtype, &b.download::<u8>(n * e)?))
        };
        Ok(Ok([
            get(ops.dq, a.q_elems())?,
            get(ops.dk, a.kv_elems())?,
            get(ops.dv, a.kv_elems())?,
        ]))
    }

    fn check(
        &self,
        ctx: &Context,
        kernel: &dyn AttentionBackwardKernel,
        mut out: BackwardCheck,
    ) -> Result<BackwardCheck> {
        let grads = match self.run(ctx, kernel)? {
            Ok(g) => g,
            Err(reason) => return Ok(out.skip(reason)),
        };
        if self.p.deterministic {
            out.reproducible = Some(match self.run(ctx, kernel)? {
                Ok(again) => again
                    .iter()
                    .zip(&grads)
                    .all(|(x, y)| x.bytes() == y.bytes()),
                Err(_) => false,
            });
        }
        out.nan_or_unwritten = grads
            .iter()
            .map(|g| (0..g.len()).filter(|&i| g.get(i).is_nan()).count())
            .sum();
        let r = attention_backward(
            &self.p.attn,
            &self.q.to_f64(),
            &self.k.to_f64(),
            &self.v.to_f64(),
            &self.d_o.to_f64(),
        );
        let err = |have: &HostData, want: &[f64]| {
            let (mut diff2, mut ref2) = (0.0f64, 0.0f64);
            for (i, w) in want.iter().enumerate() {
                let h = have.get(i);
                if h.is_finite() {
                    diff2 += (h - w) * (h - w);
                }
                ref2 += w * w;
            }
            rel_l2(diff2, ref2)
        };
        out.dq_error = err(&grads[0], &r.dq);
        out.dk_error = err(&grads[1], &r.dk);
        out.dv_error = err(&grads[2], &r.dv);
        let dtype = self.p.attn.dtype;
        let over = |name: &str, e: f64| {
            format!(
                "{name} relative error {e:.2e} exceeds the {dtype} bound {:.0e}",
                out.bound
            )
        };
        (out.passed, out.message) = verdict(&[
            (out.nan_or_unwritten > 0, &|| {
                format!(
                    "{} gradient elements (dQ, dK or dV) are NaN or were never written",
                    out.nan_or_unwritten
                )
            }),
            (!within(out.dq_error, out.bound), &|| {
                over("dQ", out.dq_error)
            }),
            (!within(out.dk_error, out.bound), &|| {
                over("dK", out.dk_error)
            }),
            (!within(out.dv_error, out.bound), &|| {
                over("dV", out.dv_error)
            }),
            (out.reproducible == Some(false), &|| {
                "two deterministic runs gave different bits".into()
            }),
        ]);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;

    #[test]
    fn the_largest_suite_problems_fit_the_reference_and_a_16k_problem_does_not() {
        let mut p = AttentionProblem::new(1, 4, 4097, 256);
        p.heads_kv = 2;
        assert!(reference_work(&BackwardProblem::new(p, false)) <= REFERENCE_LIMIT);
        let big = AttentionProblem::new(2, 16, 16384, 128);
        assert!(reference_work(&BackwardProblem::new(big, false)) > REFERENCE_LIMIT);
    }

    #[test]
    fn the_largest_error_is_nan_when_any_is() {
        let p = BackwardProblem::new(AttentionProblem::new(1, 1, 8, 64), false);
        let mut c = BackwardCheck::blank("x", &p, 1);
        (c.dq_error, c.dk_error, c.dv_error) = (1e-3, 2e-3, 5e-4);
        assert_eq!(c.max_error(), 2e-3);
        c.dk_error = f64::NAN;
        assert!(c.max_error().is_nan());
    }
}
