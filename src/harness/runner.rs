//! One runner for a family's check of one problem: the family says what its problem is (label,
//! bound, FLOPs), how its inputs are drawn from a seed with the outputs poisoned, how its kernel
//! is called, and how the output is judged against the float64 reference; the runner does the
//! rest the same way for every family (a refusal is a skip with its reason, the wait is bounded
//! by the problem's size, an error in the launch is returned with what was running).

use std::time::Duration;

use super::outcome::Outcome;
use super::verify::refusal;
use crate::device::Context;
use crate::error::Result;

/// One problem of one family, as the runner checks it.
pub trait Check {
    /// The drawn inputs and poisoned outputs (host and GPU) and what the judge needs of them.
    type Drawn;

    /// The outcome before the check: what runs, on which problem, its bound and extras.
    fn blank(&self, seed: u64) -> Outcome;

    /// Why the kernel refuses the problem, asked before anything is drawn.
    fn supports(&self, ctx: &Context) -> std::result::Result<(), String>;

    /// The inputs of `seed`, on the GPU, with every output poisoned.
    fn draw(&self, ctx: &Context, seed: u64) -> Result<Self::Drawn>;

    /// Why the kernel refuses the drawn problem (a family whose refusal depends on its drawn
    /// data, such as a packed weight layout), asked after the draw.
    fn supports_drawn(&self, _ctx: &Context, _d: &Self::Drawn) -> std::result::Result<(), String> {
        Ok(())
    }

    /// Launches the kernel on the drawn operands (`Error::Unsupported` is a skip).
    fn launch(&self, ctx: &Context, d: &mut Self::Drawn) -> Result<()>;

    /// FLOPs of one launch: the runner waits 10 s plus 10 ms per GFLOP for it.
    fn flops(&self) -> f64;

    /// How long the runner waits for the launch before it names it as hung.
    fn wait(&self) -> Duration {
        Duration::from_secs_f64(10.0 + self.flops() / 1e11)
    }

    /// Downloads the output and fills in the outcome's counts, error and verdict.
    fn judge(&self, d: &Self::Drawn, out: &mut Outcome) -> Result<()>;
}

/// Checks `c` once on the inputs of `seed`.
pub fn run<C: Check>(ctx: &Context, c: &C, seed: u64) -> Result<Outcome> {
    run_keeping(ctx, c, seed).map(|(out, _)| out)
}

/// Checks `c` on inputs drawn before from `seed` (one set of inputs, and one reference, for
/// several versions): its `launch` poisons the outputs again.
pub fn run_on<C: Check>(ctx: &Context, c: &C, d: &mut C::Drawn, seed: u64) -> Result<Outcome> {
    let out = c.blank(seed);
    if let Err(reason) = c.supports(ctx) {
        return Ok(out.skip(reason));
    }
    launch_and_judge(ctx, c, d, out)
}

fn launch_and_judge<C: Check>(
    ctx: &Context,
    c: &C,
    d: &mut C::Drawn,
    mut out: Outcome,
) -> Result<Outcome> {
    if let Err(reason) = c.supports_drawn(ctx, d) {
        return Ok(out.skip(reason));
    }
    if let Some(reason) = refusal(c.launch(ctx, d))? {
        return Ok(out.skip(reason));
    }
    ctx.synchronize_within(c.wait(), &format!("{} on {}", out.check, out.label))?;
    c.judge(d, &mut out)?;
    Ok(out)
}

/// [`run`], keeping the drawn inputs for a second kernel on the same operands (a vendor's);
/// `None` when the problem was skipped before or at its launch.
pub fn run_keeping<C: Check>(
    ctx: &Context,
    c: &C,
    seed: u64,
) -> Result<(Outcome, Option<C::Drawn>)> {
    let out = c.blank(seed);
    if let Err(reason) = c.supports(ctx) {
        return Ok((out.skip(reason), None));
    }
    let mut d = c.draw(ctx, seed)?;
    let out = launch_and_judge(ctx, c, &mut d, out)?;
    let ran = out.skipped.is_none();
    Ok((out, ran.then_some(d)))
}
