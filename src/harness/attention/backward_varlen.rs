//! The packed (variable-length) attention backward in the harness: fresh random Q, K, V and dO,
//! O and LSE from fa3_wgmma's packed forward, NaN-poisoned dQ, dK and dV, each gradient compared
//! with the float64 reference of every sequence on its own (the bench, beside one dense backward
//! of the same work, is `kiln attn bench --backward --varlen`'s, on [`crate::harness::bench::Bench`]).

use crate::device::{Context, DeviceBuffer, HostFlags};
use crate::error::{Error, Result};
use crate::harness::attention::backward_verify::{grad_bound, judge_grads, REFERENCE_LIMIT};
use crate::harness::attention::varlen::{varlen_label, varlen_pairs, varlen_suite, VarlenBuffers};
use crate::harness::attention::verify::o_error_of;
use crate::harness::outcome::{Extra, Outcome};
use crate::harness::runner::{self, Check};
use crate::ops::attention::fa3_wgmma::Fa3Wgmma;
use crate::ops::attention::VarlenProblem;
use crate::ops::attention_backward::varlen::{
    dense_view, launch_varlen, supports_varlen, VarlenBackwardOperands, VARLEN_VERSION,
};
use crate::ops::attention_backward::{BackwardOperands, BackwardProblem};
use crate::reference::{attention_varlen::varlen_backward, data::HostData};

/// The packed backward's suite: the forward's packed boundary suite (lengths mixed, query lengths
/// that differ from key lengths both ways and empty sequences, GQA, causal or not, windows) at
/// head dims 64 and 128, its 4097-long sequence cut to 700 for the float64 reference's time.
pub fn varlen_backward_suite() -> Vec<VarlenProblem> {
    varlen_suite()
        .into_iter()
        .filter(|p| p.head_dim != 256)
        .map(|p| {
            let lengths: Vec<(usize, usize)> = (0..p.batch())
                .map(|s| p.rows(s))
                .map(|(q, k)| (q.len().min(700), k.len().min(700)))
                .collect();
            VarlenProblem {
                heads_kv: p.heads_kv,
                causal: p.causal,
                window: p.window,
                ..VarlenProblem::new(&lengths, p.heads_q, p.head_dim)
            }
        })
        .collect()
}

/// Random Q, K, V and dO of `p` from `seed` (Q's seed, then the next three).
pub fn random_inputs(p: &VarlenProblem, seed: u64) -> [HostData; 4] {
    let (q, kv) = (p.q_elems(), p.kv_elems());
    super::host_inputs(p.dtype, [q, kv, kv, q], seed)
}

/// FlashAttention's count, as the dense backward's: 2.5 times the forward's over real pairs.
pub fn varlen_backward_flops(p: &VarlenProblem) -> f64 {
    2.5 * 4.0 * p.heads_q as f64 * p.head_dim as f64 * varlen_pairs(p) as f64
}

/// "backward " and the packed label.
pub fn varlen_backward_label(p: &VarlenProblem) -> String {
    format!("backward {}", varlen_label(p))
}

/// The packed backward's outcome on `p`, not yet judged.
pub fn blank(p: &VarlenProblem, seed: u64) -> Outcome {
    let extra = Extra::Backward {
        problem: BackwardProblem::new(dense_view(&p.shape()), false),
        dq_error: f64::NAN,
        dk_error: f64::NAN,
        dv_error: f64::NAN,
        reproducible: None,
    };
    Outcome::new(
        VARLEN_VERSION,
        varlen_backward_label(p),
        seed,
        grad_bound(p.dtype),
        extra,
    )
}

/// Verifies the packed backward on `p` with the inputs of `seed`.
pub fn verify_varlen_backward(ctx: &Context, p: &VarlenProblem, seed: u64) -> Result<Outcome> {
    p.validate()?;
    runner::run(ctx, &PackedBackward { p }, seed)
}

/// One packed problem, as the runner checks it.
struct PackedBackward<'a> {
    p: &'a VarlenProblem,
}

/// A packed backward's device buffers: the forward's, dO and the gradients.
pub struct VarlenBackwardBuffers {
    pub fwd: VarlenBuffers,
    pub d_o: DeviceBuffer,
    pub dq: DeviceBuffer,
    pub dk: DeviceBuffer,
    pub dv: DeviceBuffer,
}

impl VarlenBackwardBuffers {
    /// The inputs uploaded, O and LSE from fa3_wgmma's packed forward, the gradients allocated.
    pub fn new(ctx: &Context, p: &VarlenProblem, [q, k, v, d_o]: [&HostData; 4]) -> Result<Self> {
        let [q, k, v] = [q, k, v].map(|h| DeviceBuffer::from_host(h.bytes()));
        let fwd = VarlenBuffers::holding(p, [q?, k?, v?])?;
        Fa3Wgmma.launch_varlen(ctx, &p.shape(), &fwd.operands())?;
        let e = p.dtype.size();
        Ok(VarlenBackwardBuffers {
            fwd,
            d_o: DeviceBuffer::from_host(d_o.bytes())?,
            dq: DeviceBuffer::new(p.q_elems() * e)?,
            dk: DeviceBuffer::new(p.kv_elems() * e)?,
            dv: DeviceBuffer::new(p.kv_elems() * e)?,
        })
    }

    /// The operands, with `errors` as the kernel's error word (0: none).
    pub fn operands(&self, errors: u64) -> VarlenBackwardOperands<'_> {
        let f = &self.fwd;
        VarlenBackwardOperands {
            dense: BackwardOperands {
                q: &f.q,
                k: &f.k,
                v: &f.v,
                o: &f.o,
                d_o: &self.d_o,
                lse: &f.lse,
                dq: &self.dq,
                dk: &self.dk,
                dv: &self.dv,
            },
            cu_q: &f.cu_q,
            cu_k: &f.cu_k,
            errors,
        }
    }
}

/// A packed problem's inputs, buffers and the kernel's error word.
struct PackedBackwardDrawn {
    host: [HostData; 4],
    bufs: VarlenBackwardBuffers,
    flags: HostFlags,
}

impl Check for PackedBackward<'_> {
    type Drawn = PackedBackwardDrawn;

    fn blank(&self, seed: u64) -> Outcome {
        blank(self.p, seed)
    }

    fn supports(&self, ctx: &Context) -> std::result::Result<(), String> {
        Fa3Wgmma.supports_varlen(&self.p.shape(), &ctx.info)?;
        supports_varlen(&self.p.shape(), false, &ctx.info)
    }

    fn draw(&self, ctx: &Context, seed: u64) -> Result<PackedBackwardDrawn> {
        let p = self.p;
        let work = p.heads_q as f64 * p.head_dim as f64 * varlen_pairs(p) as f64;
        if work > REFERENCE_LIMIT {
            return Err(Error::invalid(format!(
                "{} is too large for the float64 reference ({work:.1e} multiply-adds, at most {REFERENCE_LIMIT:.1e}); verify shorter sequences",
                varlen_label(p)
            )));
        }
        let host = random_inputs(p, seed);
        let [q, k, v, d_o] = &host;
        let bufs = VarlenBackwardBuffers::new(ctx, p, [q, k, v, d_o])?;
        Ok(PackedBackwardDrawn {
            host,
            bufs,
            flags: HostFlags::new(1)?,
        })
    }

    /// Two calls, the gradients poisoned before each; the second is judged: it starts from what
    /// the first left in the context's workspaces (`KILN_BWD_DQ_FUSED=2` counts on its
    /// accumulator left zero by every call), where a lone call would start from the last
    /// problem's, or a fresh allocation's.
    fn launch(&self, ctx: &Context, d: &mut PackedBackwardDrawn) -> Result<()> {
        for _ in 0..2 {
            for g in [&d.bufs.dq, &d.bufs.dk, &d.bufs.dv] {
                // All-ones bytes: NaN in every dtype, so an unwritten element cannot pass.
                g.fill_bytes(0xFF, ctx)?;
            }
            let ops = d.bufs.operands(d.flags.device_ptr());
            launch_varlen(ctx, &self.p.shape(), false, &ops)?;
        }
        Ok(())
    }

    fn flops(&self) -> f64 {
        varlen_backward_flops(self.p)
    }

    fn judge(&self, d: &PackedBackwardDrawn, out: &mut Outcome) -> Result<()> {
        let p = self.p;
        let e = p.dtype.size();
        let get = |b: &DeviceBuffer, n: usize| -> Result<HostData> {
            Ok(HostData::from_bytes(p.dtype, &b.download::<u8>(n * e)?))
        };
        let grads = [
            get(&d.bufs.dq, p.q_elems())?,
            get(&d.bufs.dk, p.kv_elems())?,
            get(&d.bufs.dv, p.kv_elems())?,
        ];
        out.mismatches = grads
            .iter()
            .map(|g| (0..g.len()).filter(|&i| g.get(i).is_nan()).count())
            .sum();
        let [q, k, v, d_o] = &d.host;
        let g = varlen_backward(p, &q.to_f64(), &k.to_f64(), &v.to_f64(), &d_o.to_f64());
        let want = [g.dq, g.dk, g.dv];
        let errors = [0, 1, 2].map(|i| o_error_of(&grads[i], &want[i]));
        out.rel_error = errors.iter().fold(0.0f64, |m, &e| {
            if e.is_nan() || m.is_nan() {
                f64::NAN
            } else {
                m.max(e)
            }
        });
        if let Extra::Backward {
            dq_error,
            dk_error,
            dv_error,
            ..
        } = &mut out.extra
        {
            (*dq_error, *dk_error, *dv_error) = (errors[0], errors[1], errors[2]);
        }
        let flagged = d.flags.take()[0] != 0;
        judge_grads(
            out,
            p.dtype,
            errors,
            (flagged, &|| {
                "the kernel flagged offsets that are good (its check of the offsets is wrong)"
                    .into()
            }),
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::Window;

    #[test]
    fn the_suite_validates_and_fits_the_reference() {
        let s = varlen_backward_suite();
        assert_eq!(s.len(), 24);
        for p in &s {
            p.validate().unwrap();
            assert!(p.head_dim != 256);
            let work = p.heads_q as f64 * p.head_dim as f64 * varlen_pairs(p) as f64;
            assert!(work <= REFERENCE_LIMIT);
        }
        assert!(s.iter().any(|p| p.causal && p.window != Window::UNBOUNDED));
        assert!(s.iter().any(|p| p.heads_kv < p.heads_q));
    }
}
