//! Attention backward verification: fresh random Q, K, V and dO, O and LSE from kiln's forward,
//! NaN-poisoned dQ, dK and dV, each gradient compared with the float64 reference; in
//! deterministic mode a second run must give the same bits.

use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::harness::attention::backward_bench::BackwardBuffers;
use crate::harness::attention::verify::o_error_of;
use crate::harness::outcome::{Extra, Outcome};
use crate::harness::runner::{self, Check};
use crate::harness::verify::{fresh_seed, refusal, verdict, within};
use crate::ops::attention::AttentionKernel;
use crate::ops::attention_backward::{AttentionBackwardKernel, BackwardProblem};
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

/// `version` on `p` with the inputs of `seed`, not yet judged.
pub fn blank(version: &str, p: &BackwardProblem, seed: u64) -> Outcome {
    let extra = Extra::Backward {
        problem: *p,
        dq_error: f64::NAN,
        dk_error: f64::NAN,
        dv_error: f64::NAN,
        reproducible: None,
    };
    Outcome::new(version, p.label(), seed, grad_bound(p.attn.dtype), extra)
}

/// The backward check's errors of dQ, dK and dV (NaN for the other families).
pub fn grad_errors(o: &Outcome) -> [f64; 3] {
    match o.extra {
        Extra::Backward {
            dq_error,
            dk_error,
            dv_error,
            ..
        } => [dq_error, dk_error, dv_error],
        _ => [f64::NAN; 3],
    }
}

/// Whether a deterministic backward's second run gave the same bits (None: not checked).
pub fn reproducible(o: &Outcome) -> Option<bool> {
    match o.extra {
        Extra::Backward { reproducible, .. } => reproducible,
        _ => None,
    }
}

/// The largest of the three errors (NaN if any is).
pub fn max_error([dq, dk, dv]: [f64; 3]) -> f64 {
    [dq, dk, dv].into_iter().fold(0.0, |m, e| {
        if e.is_nan() || m.is_nan() {
            f64::NAN
        } else {
            m.max(e)
        }
    })
}

/// Multiply-adds of the float64 reference for `p` (per query, key and dim, over every head).
pub fn reference_work(p: &BackwardProblem) -> f64 {
    let a = &p.attn;
    a.batch as f64 * a.heads_q as f64 * a.pairs() as f64 * a.head_dim as f64
}

/// The verdict of a backward check with `errors` (dQ, dK, dV) and `out.mismatches` NaN gradient
/// elements, against `out.bound`; then `last`, the check's own fault (passes when false).
pub fn judge_grads(
    out: &mut Outcome,
    dtype: DType,
    errors: [f64; 3],
    last: (bool, &dyn Fn() -> String),
) {
    let (bound, nan) = (out.bound, out.mismatches);
    let over = |name: &str, e: f64| {
        format!("{name} relative error {e:.2e} exceeds the {dtype} bound {bound:.0e}")
    };
    (out.passed, out.message) = verdict(&[
        (nan > 0, &|| {
            format!("{nan} gradient elements (dQ, dK or dV) are NaN or were never written")
        }),
        (!within(errors[0], bound), &|| over("dQ", errors[0])),
        (!within(errors[1], bound), &|| over("dK", errors[1])),
        (!within(errors[2], bound), &|| over("dV", errors[2])),
        last,
    ]);
}

/// Verifies `kernel` on `p` with fresh inputs, O and LSE from `forward`.
pub fn verify_backward(
    ctx: &Context,
    forward: &dyn AttentionKernel,
    kernel: &dyn AttentionBackwardKernel,
    p: &BackwardProblem,
) -> Result<Outcome> {
    let seed = fresh_seed();
    p.validate()?;
    let check = Backward { forward, kernel, p };
    runner::run(ctx, &check, seed)
}

/// One backward version on one problem, as the runner checks it.
struct Backward<'a> {
    /// The forward that makes O and LSE.
    forward: &'a dyn AttentionKernel,
    kernel: &'a dyn AttentionBackwardKernel,
    p: &'a BackwardProblem,
}

/// One problem's inputs on the host and the GPU, O and LSE from the forward, and the poisoned
/// gradients; in deterministic mode, the first run's gradients.
struct BackwardFixture {
    q: HostData,
    k: HostData,
    v: HostData,
    d_o: HostData,
    bufs: BackwardBuffers,
    /// Deterministic mode: the first run's gradients, and whether the second run was refused.
    first: Option<[HostData; 3]>,
    again_refused: bool,
}

impl BackwardFixture {
    /// The gradients as downloaded.
    fn grads(&self, a: &crate::ops::attention::AttentionProblem) -> Result<[HostData; 3]> {
        let ops = self.bufs.operands();
        let e = a.dtype.size();
        let get = |b: &DeviceBuffer, n: usize| -> Result<HostData> {
            Ok(HostData::from_bytes(a.dtype, &b.download::<u8>(n * e)?))
        };
        Ok([
            get(ops.dq, a.q_elems())?,
            get(ops.dk, a.kv_elems())?,
            get(ops.dv, a.kv_elems())?,
        ])
    }

    /// Poisons the gradients and launches `kernel`.
    fn launch(
        &self,
        ctx: &Context,
        kernel: &dyn AttentionBackwardKernel,
        p: &BackwardProblem,
    ) -> Result<()> {
        let ops = self.bufs.operands();
        for g in [ops.dq, ops.dk, ops.dv] {
            // All-ones bytes: NaN in every dtype, so an unwritten element cannot pass.
            g.fill_bytes(0xFF, ctx)?;
        }
        kernel.launch(ctx, p, &ops)
    }
}

impl Check for Backward<'_> {
    type Drawn = BackwardFixture;

    fn blank(&self, seed: u64) -> Outcome {
        blank(self.kernel.name(), self.p, seed)
    }

    fn supports(&self, ctx: &Context) -> std::result::Result<(), String> {
        self.kernel.supports(self.p, &ctx.info)
    }

    /// Refuses a problem too large for the reference or the GPU, draws Q, K, V and dO, and runs
    /// the forward for O and LSE.
    fn draw(&self, ctx: &Context, seed: u64) -> Result<BackwardFixture> {
        let p = self.p;
        if reference_work(p) > REFERENCE_LIMIT {
            return Err(Error::invalid(format!(
                "{} is too large for the float64 reference ({:.1e} multiply-adds, at most {REFERENCE_LIMIT:.1e}); verify a smaller problem",
                p.label(),
                reference_work(p)
            )));
        }
        ctx.ensure_fits(&format!("the problem {}", p.label()), p.device_bytes())?;
        let a = &p.attn;
        let q = HostData::random(a.dtype, a.q_elems(), seed);
        let k = HostData::random(a.dtype, a.kv_elems(), seed.wrapping_add(1));
        let v = HostData::random(a.dtype, a.kv_elems(), seed.wrapping_add(2));
        let d_o = HostData::random(a.dtype, a.q_elems(), seed.wrapping_add(3));
        let up = |h: &HostData| DeviceBuffer::from_host(h.bytes());
        let inputs = [up(&q)?, up(&k)?, up(&v)?, up(&d_o)?];
        let bufs = BackwardBuffers::around(ctx, self.forward, p, inputs)?;
        Ok(BackwardFixture {
            q,
            k,
            v,
            d_o,
            bufs,
            first: None,
            again_refused: false,
        })
    }

    /// Launches once; in deterministic mode runs to the end, keeps the gradients, and launches
    /// again for the judge to compare bit for bit.
    fn launch(&self, ctx: &Context, d: &mut BackwardFixture) -> Result<()> {
        d.launch(ctx, self.kernel, self.p)?;
        if !self.p.deterministic {
            return Ok(());
        }
        ctx.synchronize_within(
            self.wait(),
            &format!("{} on {}", self.kernel.name(), self.p.label()),
        )?;
        d.first = Some(d.grads(&self.p.attn)?);
        d.again_refused = refusal(d.launch(ctx, self.kernel, self.p))?.is_some();
        Ok(())
    }

    fn flops(&self) -> f64 {
        self.p.flops()
    }

    fn judge(&self, d: &BackwardFixture, out: &mut Outcome) -> Result<()> {
        let a = &self.p.attn;
        let last = d.grads(a)?;
        let (grads, again) = match &d.first {
            Some(first) => (first, Some(&last)),
            None => (&last, None),
        };
        let reproducible = again.map(|again| {
            !d.again_refused && again.iter().zip(grads).all(|(x, y)| x.bytes() == y.bytes())
        });
        out.mismatches = grads
            .iter()
            .map(|g| (0..g.len()).filter(|&i| g.get(i).is_nan()).count())
            .sum();
        let r = attention_backward(
            a,
            &d.q.to_f64(),
            &d.k.to_f64(),
            &d.v.to_f64(),
            &d.d_o.to_f64(),
        );
        let errors = [
            o_error_of(&grads[0], &r.dq),
            o_error_of(&grads[1], &r.dk),
            o_error_of(&grads[2], &r.dv),
        ];
        out.rel_error = max_error(errors);
        out.extra = Extra::Backward {
            problem: *self.p,
            dq_error: errors[0],
            dk_error: errors[1],
            dv_error: errors[2],
            reproducible,
        };
        judge_grads(
            out,
            a.dtype,
            errors,
            (reproducible == Some(false), &|| {
                "two deterministic runs gave different bits".into()
            }),
        );
        Ok(())
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
        assert_eq!(max_error([1e-3, 2e-3, 5e-4]), 2e-3);
        assert!(max_error([1e-3, f64::NAN, 5e-4]).is_nan());
        let p = BackwardProblem::new(AttentionProblem::new(1, 1, 8, 64), false);
        assert!(grad_errors(&blank("x", &p, 1)).iter().all(|e| e.is_nan()));
    }
}
