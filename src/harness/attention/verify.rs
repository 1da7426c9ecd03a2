//! Attention verification: fresh random Q, K, V, NaN-poisoned O and LSE, the kernel's output
//! compared with the float64 reference (all rows, or a sample of rows for large shapes).

use crate::device::{Context, DeviceBuffer};
use crate::error::Result;
use crate::harness::attention::{host_inputs, upload};
use crate::harness::memory;
use crate::harness::outcome::{Extra, Outcome};
use crate::harness::runner::{self, Check};
use crate::harness::verify::{fresh_seed, spread_rows, verdict, within};
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
    runner::run(ctx, &Forward { kernel, p }, seed)
}

/// Version `name` on `p` with the inputs of `seed`, not yet judged.
pub fn blank(name: &str, p: &AttentionProblem, seed: u64) -> Outcome {
    let extra = Extra::Attention {
        problem: *p,
        lse_max_error: f64::NAN,
    };
    Outcome::new(name, p.label(), seed, o_bound(p.dtype), extra)
}

/// One forward version on one problem, as the runner checks it.
struct Forward<'a> {
    kernel: &'a dyn AttentionKernel,
    p: &'a AttentionProblem,
}

impl Check for Forward<'_> {
    type Drawn = AttnFixture;

    fn blank(&self, seed: u64) -> Outcome {
        blank(self.kernel.name(), self.p, seed)
    }

    fn supports(&self, ctx: &Context) -> std::result::Result<(), String> {
        self.kernel.supports(self.p, &ctx.info)
    }

    fn draw(&self, _ctx: &Context, seed: u64) -> Result<AttnFixture> {
        AttnFixture::new(self.p, seed)
    }

    /// Poisons O and LSE (the fixture serves several versions) and launches.
    fn launch(&self, ctx: &Context, f: &mut AttnFixture) -> Result<()> {
        // All-ones bytes: NaN in every dtype, so an unwritten element cannot pass.
        f.o.fill_bytes(0xFF, ctx)?;
        f.lse.fill_bytes(0xFF, ctx)?;
        let [q, k, v] = &f.on_gpu;
        let ops = AttentionOperands {
            q,
            k,
            v,
            o: &f.o,
            lse: &f.lse,
        };
        check_buffers(self.p, &ops)?;
        self.kernel.launch(ctx, self.p, &ops)
    }

    fn flops(&self) -> f64 {
        self.p.flops()
    }

    fn judge(&self, f: &AttnFixture, out: &mut Outcome) -> Result<()> {
        let p = self.p;
        let o_span = p.spans()[3];
        let o = HostData::from_bytes(p.dtype, &f.o.download::<u8>(o_span * p.dtype.size())?);
        let lse: Vec<f32> = f.lse.download::<f32>(p.lse_elems())?;
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
        let (rows, reference) = f.reference.get_or_init(|| {
            let rows = rows_to_check(p, f.seed);
            let [q, k, v] = f.inputs.each_ref().map(HostData::to_f64);
            let want = attention_rows(p, &q, &k, &v, &rows);
            (rows, want)
        });
        let o = &o;
        out.rel_error = o_error(reference.iter().flat_map(|r| {
            let base = o_at(r.b, r.h, r.i);
            r.o.iter()
                .enumerate()
                .map(move |(dd, &want)| (o.get(base + dd), want))
        }));
        let lse_err = reference
            .iter()
            .map(|r| lse_error(lse[(r.b * p.heads_q + r.h) * p.seqlen_q + r.i], r.lse))
            .fold(0.0, f64::max);
        out.rows_checked = rows.len();
        out.set_lse_max_error(lse_err);
        judge_o_lse(out, p.dtype, &[]);
        Ok(())
    }
}

/// O's error over (have, want) pairs: [`rel_error`], the one measure of every check.
pub use crate::harness::verify::rel_error as o_error;

/// ‖have − want‖/‖want‖ of `have`'s elements against `want`, in order.
pub fn o_error_of(have: &HostData, want: &[f64]) -> f64 {
    o_error(want.iter().enumerate().map(|(i, &w)| (have.get(i), w)))
}

/// One row's LSE error: 0 where both are -inf (a row that sees no key), infinite where the
/// kernel's is not finite and the reference's is (or the other way), else the difference.
pub fn lse_error(have: f32, want: f64) -> f64 {
    let have = have as f64;
    match (want == f64::NEG_INFINITY, have.is_finite()) {
        (true, _) if have == f64::NEG_INFINITY => 0.0,
        (false, true) => (have - want).abs(),
        _ => f64::INFINITY,
    }
}

/// The verdict of an attention output (O and LSE) already measured in `out`: the faults of
/// `first` (a family's own, checked before), then O or LSE left NaN, O's error over the bound,
/// LSE's over [`LSE_BOUND`].
pub fn judge_o_lse(out: &mut Outcome, dtype: DType, first: &[(bool, &dyn Fn() -> String)]) {
    let o = &*out;
    let lse_err = o.lse_max_error();
    let mut faults: Vec<(bool, &dyn Fn() -> String)> = first.to_vec();
    let nan = || {
        format!(
            "{} output elements (O or LSE) are NaN or were never written",
            o.mismatches
        )
    };
    let over = || {
        format!(
            "O relative error {:.2e} exceeds the {} bound {:.0e}",
            o.rel_error, dtype, o.bound
        )
    };
    let lse = || format!("LSE error {lse_err:.2e} exceeds {LSE_BOUND:.0e}");
    faults.extend([
        (o.mismatches > 0, &nan as &dyn Fn() -> String),
        (!within(o.rel_error, o.bound), &over),
        (!within(lse_err, LSE_BOUND), &lse),
    ]);
    let (passed, message) = verdict(&faults);
    (out.passed, out.message) = (passed, message);
}

/// One problem's inputs on the host and the GPU, and its float64 reference rows (computed at the
/// first check that needs them): any number of versions checked against one set of inputs.
pub struct AttnFixture {
    p: AttentionProblem,
    seed: u64,
    /// Q, K and V on the host and on the GPU.
    inputs: [HostData; 3],
    on_gpu: [DeviceBuffer; 3],
    o: DeviceBuffer,
    lse: DeviceBuffer,
    reference: std::cell::OnceCell<(Vec<usize>, Vec<RowRef>)>,
}

impl AttnFixture {
    pub fn new(p: &AttentionProblem, seed: u64) -> Result<AttnFixture> {
        p.validate()?;
        // Each tensor's whole span (with its strides' gaps, which no kernel may read as data).
        let [qn, kn, vn, on] = p.spans();
        let inputs = host_inputs(p.dtype, [qn, kn, vn], seed);
        Ok(AttnFixture {
            p: *p,
            seed,
            on_gpu: upload(&inputs)?,
            o: DeviceBuffer::new(on * p.dtype.size())?,
            lse: DeviceBuffer::new(p.lse_elems() * 4)?,
            inputs,
            reference: std::cell::OnceCell::new(),
        })
    }

    /// Checks `kernel` against the fixture's inputs and reference.
    pub fn check(&mut self, ctx: &Context, kernel: &dyn AttentionKernel) -> Result<Outcome> {
        let (p, seed) = (self.p, self.seed);
        runner::run_on(ctx, &Forward { kernel, p: &p }, self, seed)
    }
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
