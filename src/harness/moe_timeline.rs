//! `kiln moe bench --weights F --timeline`: where a launch of the 4-bit experts' GEMM and one of
//! kiln's bf16 grouped GEMM spend their time beside their prefix kernels, from the stamps of
//! their `KILN_MOE_TRACE` variants (ncu replays a kernel alone: it cannot see a dependent launch).

use serde::Serialize;

use super::bench::L2Flusher;
use super::moe_bench::random_buffers;
use super::moe_fp4_bench::{fp4_buffers, Fp4BenchRequest};
use crate::device::Context;
use crate::error::{Error, Result};
use crate::ops::moe::fp4::kernel::{Fp4Experts, NAME};
use crate::ops::moe::grouped_gemm::GroupedGemm;
use crate::ops::moe::trace::{
    MoeStamps, MoeTrace, TraceBuffer, EVENTS, PREFIX_EVENTS, TRACE_EVENTS,
};
use crate::ops::moe::{check_operands, version_for};
use crate::tools::timeline::med_min_max;

/// Median, min and max.
pub type Spread = [f64; 3];

/// One event of both launches: µs since the prefix kernel's entry over every CTA of every
/// launch that stamped it (None where none did).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRow {
    pub event: String,
    pub bf16: Option<Spread>,
    pub fp4: Option<Spread>,
}

/// One CTA's step from an event to the next it stamped: SM cycles, median [min, max] over CTAs
/// and launches.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StepRow {
    pub step: String,
    pub bf16: Option<Spread>,
    pub fp4: Option<Spread>,
}

/// What `--timeline` prints: the two kernels' events, their steps, each launch's span (the
/// prefix kernel's entry to the last stamp, µs) and SM clock (GHz: a CTA's cycles over its ns).
#[derive(Debug, Clone, Serialize)]
pub struct Timeline {
    pub launches: usize,
    pub events: Vec<EventRow>,
    pub steps: Vec<StepRow>,
    pub span_us: [Spread; 2],
    pub clock_ghz: [f64; 2],
}

/// Every launch's stamps of event `e` (a GEMM event, or with `prefix` the prefix kernel's), µs
/// since that launch's prefix entry.
fn since_prefix(traces: &[MoeTrace], e: usize, prefix: bool) -> Vec<f64> {
    let mut v = Vec::new();
    for t in traces.iter().filter(|t| t.prefix.ns[0] != 0) {
        let t0 = t.prefix.ns[0];
        let of = |s: &MoeStamps| (s.ns[e] != 0).then(|| (s.ns[e] as f64 - t0 as f64) / 1e3);
        if prefix {
            v.extend(of(&t.prefix));
        } else {
            v.extend(t.ctas.iter().filter_map(of));
        }
    }
    v
}

/// Events off a CTA's path from entry to consumer 0's stores (the producer's last loads and
/// consumer 1's stores run beside it), left out of its steps.
const BESIDE: [usize; 2] = [5, 15];
/// The dependency wait's event: on the path where it comes before the tables (`KILN_FP4_PDL=own`
/// waits after its first tile's loads instead).
const DEP_WAIT: usize = 2;
const TABLES: usize = 3;

/// Per CTA, the cycles from each stamped event of its path to the next, keyed by the pair.
fn steps(traces: &[MoeTrace]) -> Vec<((usize, usize), f64)> {
    let mut v = Vec::new();
    for s in traces.iter().flat_map(|t| &t.ctas) {
        let late_wait = s.clk[DEP_WAIT] > s.clk[TABLES];
        let set: Vec<usize> = (0..EVENTS)
            .filter(|&e| s.ns[e] != 0 && !BESIDE.contains(&e) && !(e == DEP_WAIT && late_wait))
            .collect();
        for w in set.windows(2) {
            v.push(((w[0], w[1]), s.clk[w[1]].wrapping_sub(s.clk[w[0]]) as f64));
        }
    }
    v
}

/// Each launch's span: its prefix kernel's entry to the last stamp of any CTA (µs).
fn spans(traces: &[MoeTrace]) -> Vec<f64> {
    traces
        .iter()
        .filter(|t| t.prefix.ns[0] != 0)
        .filter_map(|t| {
            let last = t.ctas.iter().flat_map(|s| s.ns).max()?;
            Some((last as f64 - t.prefix.ns[0] as f64) / 1e3)
        })
        .collect()
}

/// The SM clock over every CTA's first to last stamp (GHz; the median over CTAs).
fn clock_ghz(traces: &[MoeTrace]) -> f64 {
    let v: Vec<f64> = traces
        .iter()
        .flat_map(|t| &t.ctas)
        .filter_map(|s| {
            let set: Vec<usize> = (0..EVENTS).filter(|&e| s.ns[e] != 0).collect();
            let (&a, &b) = (set.first()?, set.last()?);
            let ns = s.ns[b].saturating_sub(s.ns[a]);
            (ns > 0).then(|| s.clk[b].wrapping_sub(s.clk[a]) as f64 / ns as f64)
        })
        .collect();
    med_min_max(v).map_or(f64::NAN, |s| s[0])
}

/// The two kernels' traces side by side.
pub fn summarize(bf16: &[MoeTrace], fp4: &[MoeTrace]) -> Timeline {
    let mut events = Vec::new();
    for (e, name) in PREFIX_EVENTS.iter().enumerate() {
        events.push(EventRow {
            event: name.to_string(),
            bf16: med_min_max(since_prefix(bf16, e, true)),
            fp4: med_min_max(since_prefix(fp4, e, true)),
        });
    }
    for (e, name) in TRACE_EVENTS.iter().enumerate() {
        let row = EventRow {
            event: name.to_string(),
            bf16: med_min_max(since_prefix(bf16, e, false)),
            fp4: med_min_max(since_prefix(fp4, e, false)),
        };
        if row.bf16.is_some() || row.fp4.is_some() {
            events.push(row);
        }
    }
    let (sb, sf) = (steps(bf16), steps(fp4));
    let mut pairs: Vec<(usize, usize)> = sb.iter().chain(&sf).map(|s| s.0).collect();
    pairs.sort();
    pairs.dedup();
    let of = |v: &[((usize, usize), f64)], k| {
        med_min_max(v.iter().filter(|s| s.0 == k).map(|s| s.1).collect())
    };
    let steps = pairs
        .into_iter()
        .map(|k| StepRow {
            step: format!("{} -> {}", TRACE_EVENTS[k.0], TRACE_EVENTS[k.1]),
            bf16: of(&sb, k),
            fp4: of(&sf, k),
        })
        .collect();
    let nan = [f64::NAN; 3];
    Timeline {
        launches: bf16.len().min(fp4.len()),
        events,
        steps,
        span_us: [
            med_min_max(spans(bf16)).unwrap_or(nan),
            med_min_max(spans(fp4)).unwrap_or(nan),
        ],
        clock_ghz: [clock_ghz(bf16), clock_ghz(fp4)],
    }
}

/// `launches` traced launches of kiln's bf16 grouped GEMM and of the 4-bit kernel on the
/// request's problem, alternating, each after an L2 flush (after a warm one each, which compiles
/// the variants); their timelines side by side.
pub fn trace(ctx: &Context, r: &Fp4BenchRequest, launches: usize) -> Result<Timeline> {
    let p = r.problem();
    p.validate()?;
    if version_for(&p, &ctx.overrides.moe) != "grouped_gemm" {
        return Err(Error::invalid(
            "--timeline traces the grouped GEMM (kiln's bf16 grouped_gemm beside the 4-bit one): leave out --swiglu and KILN_MOE_GROUPED",
        ));
    }
    let l = r.layout();
    Fp4Experts::supports(&p, &l, &ctx.info).map_err(Error::refused(NAME))?;
    let seed = super::verify::fresh_seed();
    let b16 = random_buffers(ctx, &p, seed)?;
    check_operands(&p, &b16.operands())?;
    let b4 = fp4_buffers(ctx, &p, &l, seed)?;
    let flusher = L2Flusher::new(ctx)?;
    // at most two CTAs an SM (the 4-bit decode tiles)
    let buf = TraceBuffer::new(2 * ctx.info.sm_count as usize)?;
    let one = |fp4: bool| -> Result<MoeTrace> {
        buf.clear(ctx)?;
        flusher.flush(ctx)?;
        if fp4 {
            Fp4Experts::launch_traced(ctx, &p, &l, &b4.operands(), &buf)?;
        } else {
            GroupedGemm.launch_traced(ctx, &p, &b16.operands(), &buf)?;
        }
        ctx.synchronize()?;
        buf.read()
    };
    one(false)?;
    one(true)?;
    let (mut bf16, mut fp4) = (Vec::new(), Vec::new());
    for _ in 0..launches.max(1) {
        bf16.push(one(false)?);
        fp4.push(one(true)?);
    }
    Ok(summarize(&bf16, &fp4))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamps(at: &[(usize, u64)]) -> MoeStamps {
        let mut s = MoeStamps::default();
        for &(e, ns) in at {
            s.ns[e] = ns;
            s.clk[e] = 2 * ns;
        }
        s
    }

    #[test]
    fn events_count_from_the_prefix_entry_and_steps_per_cta() {
        let t = MoeTrace {
            prefix: stamps(&[(0, 1_000), (1, 2_000)]),
            ctas: vec![
                stamps(&[(0, 1_500), (1, 1_700), (3, 3_000), (15, 9_000)]),
                stamps(&[(0, 1_600), (1, 1_800), (3, 3_400), (15, 11_000)]),
            ],
        };
        let tl = summarize(std::slice::from_ref(&t), std::slice::from_ref(&t));
        assert_eq!(tl.events[0].bf16, Some([0.0, 0.0, 0.0]));
        assert_eq!(tl.events[1].fp4, Some([1.0, 1.0, 1.0]));
        // entry: 0.5 and 0.6 us after the prefix's entry (the upper median of two)
        assert_eq!(tl.events[2].event, "entry");
        assert_eq!(tl.events[2].bf16, Some([0.6, 0.5, 0.6]));
        // set up -> tables: 2,600 and 3,200 cycles
        let s = tl
            .steps
            .iter()
            .find(|s| s.step.starts_with("barriers set up ->"))
            .unwrap();
        assert_eq!(s.bf16, Some([3_200.0, 2_600.0, 3_200.0]));
        assert_eq!(tl.span_us[0], [10.0, 10.0, 10.0]);
        assert_eq!(tl.clock_ghz[1], 2.0);
    }
}
