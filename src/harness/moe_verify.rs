//! MoE verification: fresh random inputs, a NaN-poisoned Y, one launch (or one replay of a CUDA
//! graph captured while the device row counts were different), then every routed row checked for
//! unwritten elements, every other row for stray writes, and sampled rows against the float64
//! reference with the output dtype's bound. Also the shape suites: empty experts, one expert,
//! 256 experts, ragged counts (0, 1, 40, 64, 128, ...), both layouts, both weight layouts.

use std::time::Duration;

use cudarc::driver::{result, sys};
use serde::Serialize;

use super::outcome::{Extra, Outcome};
use super::runner::{self, Check};
use super::verify::{bound, fresh_seed, rel_l2, spread_rows, verdict, within};
use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::ops::gemm::DType;
use crate::ops::moe::schedule::sched_bytes;
use crate::ops::moe::{check_operands, MoeKernel, MoeOperands, MoeProblem, SwiGlu, WeightLayout};
use crate::reference::data::HostData;
use crate::reference::moe::{moe_rows, row_experts};

/// Above this many f64 multiply-adds the reference samples rows.
const FULL_REFERENCE_LIMIT: f64 = 2.0e9;
const SAMPLED_ROWS: usize = 128;

/// How the launch under test is issued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Launched directly on the stream.
    Direct,
    /// Captured into a CUDA graph while the device counts were all zero, then replayed after the
    /// real counts were uploaded: proves the kernels read the counts on the GPU.
    Graph,
}

/// Host inputs of one problem, from one seed.
pub struct MoeInputs {
    pub x: HostData,
    pub w: HostData,
    pub w3: Option<HostData>,
    pub route: Option<HostData>,
}

impl MoeInputs {
    pub fn random(p: &MoeProblem, seed: u64) -> MoeInputs {
        let one = p.experts * p.n * p.k;
        let separate = matches!(
            p.swiglu,
            Some(SwiGlu {
                weights: WeightLayout::Separate,
                ..
            })
        );
        MoeInputs {
            x: HostData::random(p.input, p.x_elems(), seed),
            w: HostData::random(
                p.input,
                if separate { one } else { p.w_elems() },
                seed.wrapping_add(1),
            ),
            w3: separate.then(|| HostData::random(p.input, one, seed.wrapping_add(2))),
            route: p
                .swiglu
                .is_some_and(|s| s.routed)
                .then(|| HostData::random(DType::F32, p.x_rows(), seed.wrapping_add(3))),
        }
    }
}

/// Device buffers of one problem.
pub struct MoeBuffers {
    pub x: DeviceBuffer,
    pub w: DeviceBuffer,
    pub w3: Option<DeviceBuffer>,
    pub y: DeviceBuffer,
    pub rows: DeviceBuffer,
    pub route: Option<DeviceBuffer>,
    pub sched: DeviceBuffer,
}

impl MoeBuffers {
    /// Uploads `inp`, the rows array and `y_init`, and waits until the copies have landed.
    pub fn upload(p: &MoeProblem, inp: &MoeInputs, y_init: &HostData) -> Result<MoeBuffers> {
        let up = |h: &HostData| DeviceBuffer::from_host(h.bytes());
        let b = MoeBuffers {
            x: up(&inp.x)?,
            w: up(&inp.w)?,
            w3: inp.w3.as_ref().map(up).transpose()?,
            y: up(y_init)?,
            rows: DeviceBuffer::from_host(p.rows_array())?,
            route: inp.route.as_ref().map(up).transpose()?,
            sched: DeviceBuffer::new(sched_bytes(p.experts))?,
        };
        settle()?;
        Ok(b)
    }

    pub fn operands(&self) -> MoeOperands<'_> {
        MoeOperands {
            x: &self.x,
            w: &self.w,
            w3: self.w3.as_ref(),
            y: &self.y,
            rows: &self.rows,
            route: self.route.as_ref(),
            sched: &self.sched,
            row_map: None,
        }
    }
}

/// Waits for every copy of the context (synchronous uploads may still be in flight on the legacy
/// stream, which our non-blocking stream does not wait for).
pub fn settle() -> Result<()> {
    result::ctx::synchronize()
        .map_err(|e| Error::cuda("synchronising the context", format!("{e:?}")))
}

/// Rows the reference computes: every routed row of small problems, else each expert's first
/// and last rows plus a spread.
pub fn rows_to_check(p: &MoeProblem, seed: u64) -> Vec<usize> {
    let routed: Vec<usize> = row_experts(p)
        .iter()
        .enumerate()
        .filter_map(|(r, e)| e.map(|_| r))
        .collect();
    if routed.len() as f64 * p.n as f64 * p.k as f64 <= FULL_REFERENCE_LIMIT {
        return routed;
    }
    let mut rows: Vec<usize> = p
        .spans()
        .iter()
        .filter(|s| s.1 > 0)
        .flat_map(|&(s, l)| [s, s + l - 1])
        .collect();
    rows.truncate(SAMPLED_ROWS / 2);
    spread_rows(rows, routed.len(), SAMPLED_ROWS, seed, |i| routed[i])
}

/// Verifies `kernel` on `p` once, with fresh inputs.
pub fn verify_moe(
    ctx: &Context,
    kernel: &dyn MoeKernel,
    p: &MoeProblem,
    mode: Mode,
) -> Result<Outcome> {
    verify_moe_seeded(ctx, kernel, p, mode, fresh_seed())
}

/// Verifies `kernel` on `p` once, with the inputs of `seed` (a fuzz failure's repro).
pub fn verify_moe_seeded(
    ctx: &Context,
    kernel: &dyn MoeKernel,
    p: &MoeProblem,
    mode: Mode,
    seed: u64,
) -> Result<Outcome> {
    p.validate()?;
    super::memory::plan_moe_verify(p).ensure(ctx, &format!("the problem {}", p.label()))?;
    runner::run(ctx, &MoeCheck { kernel, p, mode }, seed)
}

/// One problem's inputs on the host and the GPU, and its float64 reference (computed at the
/// first check that needs it): any number of versions checked against one set of inputs.
pub struct MoeFixture<'p> {
    p: &'p MoeProblem,
    seed: u64,
    inp: MoeInputs,
    poison: HostData,
    bufs: MoeBuffers,
    rows: Vec<usize>,
    reference: std::cell::OnceCell<Vec<Vec<f64>>>,
}

impl<'p> MoeFixture<'p> {
    pub fn new(p: &'p MoeProblem, seed: u64) -> Result<MoeFixture<'p>> {
        p.validate()?;
        let inp = MoeInputs::random(p, seed);
        let poison = HostData::poison(p.output, p.y_elems());
        let bufs = MoeBuffers::upload(p, &inp, &poison)?;
        check_operands(p, &bufs.operands())?;
        Ok(MoeFixture {
            p,
            seed,
            inp,
            poison,
            bufs,
            rows: rows_to_check(p, seed),
            reference: std::cell::OnceCell::new(),
        })
    }

    /// `kernel` launched as `mode` on these inputs (Y poisoned again first), judged.
    pub fn check(&mut self, ctx: &Context, kernel: &dyn MoeKernel, mode: Mode) -> Result<Outcome> {
        let (p, seed) = (self.p, self.seed);
        runner::run_on(ctx, &MoeCheck { kernel, p, mode }, self, seed)
    }
}

/// One version of the bf16/f16 MoE kernels on one problem, launched as `mode`, as the runner
/// checks it: Y poisoned, one launch (or one replay of a graph captured while the device counts
/// were zero), every routed row checked for unwritten elements, every other for stray writes,
/// sampled rows against the float64 reference with the output dtype's bound.
pub struct MoeCheck<'k, 'p> {
    pub kernel: &'k dyn MoeKernel,
    pub p: &'p MoeProblem,
    pub mode: Mode,
}

impl<'p> Check for MoeCheck<'_, 'p> {
    type Drawn = MoeFixture<'p>;

    fn blank(&self, seed: u64) -> Outcome {
        let extra = Extra::Moe { mode: self.mode };
        Outcome::new(
            self.kernel.name(),
            self.p.label(),
            seed,
            bound(self.p.output),
            extra,
        )
    }

    fn supports(&self, ctx: &Context) -> std::result::Result<(), String> {
        self.kernel.supports(self.p, &ctx.info)
    }

    fn draw(&self, _ctx: &Context, seed: u64) -> Result<MoeFixture<'p>> {
        MoeFixture::new(self.p, seed)
    }

    fn launch(&self, ctx: &Context, f: &mut MoeFixture<'p>) -> Result<()> {
        let (p, kernel) = (self.p, self.kernel);
        f.bufs.y.upload(f.poison.bytes())?;
        settle()?;
        match self.mode {
            Mode::Direct => kernel.launch(ctx, p, &f.bufs.operands()),
            Mode::Graph => replay_with_rows(
                ctx,
                &|| kernel.launch(ctx, p, &f.bufs.operands()),
                &f.bufs.rows,
                &vec![0i32; p.rows_array().len()],
                p.rows_array(),
                self.wait(),
                &format!("{} on {}", kernel.name(), p.label()),
            ),
        }
    }

    fn flops(&self) -> f64 {
        self.p.flops()
    }

    fn judge(&self, f: &MoeFixture<'p>, out: &mut Outcome) -> Result<()> {
        let p = self.p;
        let raw = f.bufs.y.download::<u8>(p.y_elems() * p.output.size())?;
        let got = HostData::from_bytes(p.output, &raw);
        let reference = f
            .reference
            .get_or_init(|| reference_rows(p, &f.inp, &f.rows));
        let sc = score_against(p, reference, &got, &f.poison, &f.rows);
        sc.judge(out, f.rows.len(), &format!("the {} bound", p.output));
        Ok(())
    }
}

/// What the checks found in one output.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Score {
    pub nan_or_unwritten: usize,
    pub written_outside: usize,
    pub rel_error: f64,
}

impl Score {
    /// Writes the score of `rows` checked rows into `out`, then the verdict: the first fault
    /// present, the error held to `out`'s bound (`bound` names it: "the bf16 bound").
    pub fn judge(self, out: &mut Outcome, rows: usize, bound: &str) {
        (out.mismatches, out.written_outside) = (self.nan_or_unwritten, self.written_outside);
        (out.rel_error, out.rows_checked) = (self.rel_error, rows);
        let o = out.clone();
        (out.passed, out.message) = verdict(&[
            (o.mismatches > 0, &|| {
                format!(
                    "{} elements of routed rows are NaN, infinite or never written",
                    o.mismatches
                )
            }),
            (o.written_outside > 0, &|| {
                format!(
                    "{} elements of rows no expert owns were overwritten",
                    o.written_outside
                )
            }),
            (!within(o.rel_error, o.bound), &|| {
                format!(
                    "relative error {:.2e} exceeds {bound} {:.0e}",
                    o.rel_error, o.bound
                )
            }),
        ]);
    }
}

/// Scores the downloaded `got` (started as `poison`): NaN left in routed rows, any change to rows
/// no expert owns, and ‖got − ref‖ / ‖ref‖ over `rows` against the float64 reference of `inp`.
pub fn score(
    p: &MoeProblem,
    inp: &MoeInputs,
    got: &HostData,
    poison: &HostData,
    rows: &[usize],
) -> Score {
    score_against(p, &reference_rows(p, inp, rows), got, poison, rows)
}

/// The float64 reference of `rows` of Y from `inp`.
pub fn reference_rows(p: &MoeProblem, inp: &MoeInputs, rows: &[usize]) -> Vec<Vec<f64>> {
    let (x, w) = (inp.x.to_f64(), inp.w.to_f64());
    let w3 = inp.w3.as_ref().map(HostData::to_f64);
    let route = inp.route.as_ref().map(HostData::to_f64);
    moe_rows(p, &x, &w, w3.as_deref(), route.as_deref(), rows)
}

/// [`score`] against a reference already computed for `rows`.
pub fn score_against(
    p: &MoeProblem,
    reference: &[Vec<f64>],
    got: &HostData,
    poison: &HostData,
    rows: &[usize],
) -> Score {
    let (mut nan_or_unwritten, mut written_outside) = (0, 0);
    let es = p.output.size();
    for (r, e) in row_experts(p).iter().enumerate() {
        for i in r * p.n..(r + 1) * p.n {
            if e.is_some() {
                // an infinity counts too: it would drop out of the error norm below
                nan_or_unwritten += !got.get(i).is_finite() as usize;
            } else {
                written_outside += (got.bytes()[i * es..(i + 1) * es]
                    != poison.bytes()[i * es..(i + 1) * es])
                    as usize;
            }
        }
    }
    let (mut diff2, mut ref2) = (0.0f64, 0.0f64);
    for (want_row, &r) in reference.iter().zip(rows) {
        for (n, &want) in want_row.iter().enumerate() {
            let have = got.get(r * p.n + n);
            if have.is_finite() {
                diff2 += (have - want) * (have - want);
            }
            ref2 += want * want;
        }
    }
    Score {
        nan_or_unwritten,
        written_outside,
        rel_error: rel_l2(diff2, ref2),
    }
}

/// Uploads `before` into the device rows array (or any input buffer: the MoE layer's logits or
/// expert ids), runs `launch` once (a warm-up that loads the kernels outside the capture),
/// captures `launch` into a CUDA graph, uploads `after` and replays the graph once: a correct
/// result for `after` proves the kernels read that input on the GPU.
pub fn replay_with_rows<T: Copy>(
    ctx: &Context,
    launch: &dyn Fn() -> Result<()>,
    rows: &DeviceBuffer,
    before: &[T],
    after: &[T],
    limit: Duration,
    what: &str,
) -> Result<()> {
    fn cuda(what: &'static str) -> impl Fn(sys::CUresult) -> Error {
        move |e| Error::cuda(what, format!("{e:?}"))
    }
    rows.upload(before)?;
    settle()?;
    launch()?;
    ctx.synchronize_within(limit, what)?;
    // SAFETY: the stream is ours and idle; the graph and its executable are destroyed below, and
    // every buffer the captured launches use outlives the replay (we synchronise before return).
    unsafe {
        let ok = |r: sys::CUresult| {
            if r == sys::CUresult::CUDA_SUCCESS {
                Ok(())
            } else {
                Err(r)
            }
        };
        ok(sys::cuStreamBeginCapture_v2(
            ctx.stream,
            sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
        ))
        .map_err(cuda("beginning a graph capture"))?;
        let launched = launch();
        let mut graph: sys::CUgraph = std::ptr::null_mut();
        let ended = ok(sys::cuStreamEndCapture(ctx.stream, &mut graph))
            .map_err(cuda("ending the graph capture"));
        if launched.is_err() || ended.is_err() {
            if !graph.is_null() {
                sys::cuGraphDestroy(graph);
            }
            launched?;
            ended?;
        }
        let mut exec: sys::CUgraphExec = std::ptr::null_mut();
        let inst = ok(sys::cuGraphInstantiateWithFlags(&mut exec, graph, 0))
            .map_err(cuda("instantiating the graph"));
        let run = inst.and_then(|_| {
            rows.upload(after)?;
            settle()?;
            ok(sys::cuGraphLaunch(exec, ctx.stream)).map_err(cuda("launching the graph"))?;
            ctx.synchronize_within(limit, what)
        });
        if !exec.is_null() {
            sys::cuGraphExecDestroy(exec);
        }
        sys::cuGraphDestroy(graph);
        run
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn big_problems_sample_every_experts_edges() {
        let p = MoeProblem::contiguous(&[1000, 0, 2000, 1], 4096, 4096, DType::Bf16, DType::Bf16);
        let r = rows_to_check(&p, 3);
        assert!(r.len() <= SAMPLED_ROWS && r.len() > 16);
        for must in [0, 999, 1000, 2999, 3000] {
            assert!(r.contains(&must), "row {must}");
        }
        let small = MoeProblem::masked(&[2, 0, 1], 4, 8, 8, DType::Bf16, DType::Bf16);
        assert_eq!(rows_to_check(&small, 1), vec![0, 1, 8]);
    }

    /// An output as a correct kernel would leave it: the reference rounded to the output dtype
    /// in routed rows, the poison elsewhere.
    fn correct_output(p: &MoeProblem, inp: &MoeInputs) -> (HostData, HostData) {
        let poison = HostData::poison(p.output, p.y_elems());
        let routed: Vec<usize> = (0..p.x_rows())
            .filter(|&r| row_experts(p)[r].is_some())
            .collect();
        let (x, w) = (inp.x.to_f64(), inp.w.to_f64());
        let w3 = inp.w3.as_ref().map(HostData::to_f64);
        let route = inp.route.as_ref().map(HostData::to_f64);
        let want = moe_rows(p, &x, &w, w3.as_deref(), route.as_deref(), &routed);
        let mut v: Vec<f64> = poison.to_f64();
        for (row, &r) in want.iter().zip(&routed) {
            v[r * p.n..(r + 1) * p.n].copy_from_slice(row);
        }
        // a 16-bit output: the poison's bits where no row wrote, else the value rounded by `to`
        let halves = |to: fn(f64) -> u16| -> Vec<u16> {
            let bits = |(i, &x): (usize, &f64)| match x.is_nan() {
                true => poison_bits(&poison, i),
                false => to(x),
            };
            v.iter().enumerate().map(bits).collect()
        };
        let got = match p.output {
            DType::Bf16 => HostData::Bf16(halves(|x| half::bf16::from_f64(x).to_bits())),
            DType::F16 => HostData::F16(halves(|x| half::f16::from_f64(x).to_bits())),
            DType::F32 => HostData::F32(
                v.iter()
                    .map(|&x| {
                        if x.is_nan() {
                            f32::from_bits(0xFFFF_FFFF)
                        } else {
                            x as f32
                        }
                    })
                    .collect(),
            ),
        };
        (got, poison)
    }

    fn poison_bits(poison: &HostData, i: usize) -> u16 {
        u16::from_le_bytes([poison.bytes()[2 * i], poison.bytes()[2 * i + 1]])
    }

    fn with_element(h: &HostData, i: usize, v: f32) -> HostData {
        let mut h = h.clone();
        match &mut h {
            HostData::Bf16(x) => x[i] = half::bf16::from_f32(v).to_bits(),
            HostData::F16(x) => x[i] = half::f16::from_f32(v).to_bits(),
            HostData::F32(x) => x[i] = v,
        }
        h
    }

    #[test]
    fn scoring_passes_a_correct_output_and_names_each_fault() {
        use crate::ops::moe::WeightLayout;
        let cases = [
            MoeProblem::masked(&[3, 0, 5], 6, 40, 24, DType::Bf16, DType::Bf16),
            MoeProblem::contiguous(&[2, 0, 3], 256, 16, DType::F16, DType::F32)
                .with_swiglu(WeightLayout::Interleaved, true),
            MoeProblem::contiguous(&[4, 1], 24, 16, DType::Bf16, DType::F16)
                .with_swiglu(WeightLayout::Separate, false),
        ];
        for p in cases {
            let inp = MoeInputs::random(&p, 5);
            let (got, poison) = correct_output(&p, &inp);
            let rows = rows_to_check(&p, 1);
            let s = score(&p, &inp, &got, &poison, &rows);
            assert_eq!(
                (s.nan_or_unwritten, s.written_outside),
                (0, 0),
                "{}",
                p.label()
            );
            assert!(
                s.rel_error <= bound(p.output),
                "{}: {}",
                p.label(),
                s.rel_error
            );
            let (first, _) = p.spans()[0];
            // an unwritten element of a routed row
            let unwritten = with_element(&got, first * p.n + 1, f32::NAN);
            assert_eq!(
                score(&p, &inp, &unwritten, &poison, &rows).nan_or_unwritten,
                1
            );
            // an infinity where a finite value belongs (a read of poisoned weights)
            let infinite = with_element(&got, first * p.n + 1, f32::INFINITY);
            assert_eq!(
                score(&p, &inp, &infinite, &poison, &rows).nan_or_unwritten,
                1
            );
            // a write into a row no expert owns
            if let Some(r) = (0..p.x_rows()).find(|&r| row_experts(&p)[r].is_none()) {
                assert_eq!(
                    score(&p, &inp, &with_element(&got, r * p.n, 0.0), &poison, &rows)
                        .written_outside,
                    1
                );
            }
            // a wrong value
            let wrong = with_element(&got, first * p.n, 1e4);
            assert!(
                score(&p, &inp, &wrong, &poison, &rows).rel_error > bound(p.output),
                "{}",
                p.label()
            );
        }
    }
}
