//! `kiln moe verify|bench --weights nvfp4|mxfp4` and `kiln moe prepack`: the MoE kernels with
//! 4-bit weights against the float64 reference and against kiln's bf16 kernel, and the prepack.

use std::process::ExitCode;
use std::time::Instant;

use kiln::error::{Error, Result};
use kiln::harness::bench::Row;
use kiln::harness::moe_fp4::{fp4_suite, verify_fp4};
use kiln::harness::moe_fp4_bench::{bench_fp4, Fp4BenchRequest};
use kiln::harness::moe_fp4_data::{prepack_for, random_weights};
use kiln::harness::moe_timeline::{self, Timeline};
use kiln::harness::moe_verify::Mode;
use kiln::harness::moe_w4a8::{verify_w4a8, w4a8_suite};
use kiln::harness::moe_w4a8_bench::{bench_w4a8, w4a8_problem};
use kiln::harness::outcome::Outcome;
use kiln::ops::gemm::DType;
use kiln::ops::moe::fp4::Fp4Format;
use kiln::ops::moe::fp4::Fp4Prepacked;
use kiln::ops::moe::fp8_problem::Fp8MoeProblem;
use kiln::ops::moe::MoeProblem;
use kiln::overrides::W4a8Form;
use kiln::report::Table;
use serde_json::json;

use super::args::{MoeBenchArgs, MoePrepackArgs};
use super::bench_table::Col;
use super::env::{bench_options, Env};
use super::verdicts::{
    failures, print_outcomes, table, verified, Landing, BOUND, PROBLEM, REL_ERROR, ROWS, VERDICT,
    VERSION,
};

/// Whether `--act` asks for e4m3 activations (W4A8), which take MXFP4 weights only.
fn e4m3_act(act: Option<&str>, f: Fp4Format) -> Result<bool> {
    match act.map(str::to_ascii_lowercase).as_deref() {
        None | Some("bf16") => Ok(false),
        Some("e4m3") if f == Fp4Format::Mxfp4 => Ok(true),
        Some("e4m3") => Err(Error::invalid(
            "e4m3 activations take MXFP4 weights (an NVFP4 value times its e4m3 scale is not exact in e4m3); use --weights mxfp4",
        )),
        Some(other) => Err(Error::invalid(format!(
            "--act {other}: the activations are bf16 or e4m3"
        ))),
    }
}

/// The W4A8 kernel's problem for `p`'s rows, shape and SwiGLU (X bf16 before quantisation).
fn w4a8_problem_of(p: &MoeProblem) -> Result<Fp8MoeProblem> {
    if p.input != DType::Bf16 || p.output != DType::Bf16 {
        return Err(Error::invalid(
            "with --act e4m3, X is drawn in bf16 and quantised, and Y is bf16; leave out --dtype and --out-dtype",
        ));
    }
    Ok(w4a8_problem(p))
}

/// `kiln moe verify --weights F`: the problem of the flags (`own`), else the 4-bit suite (the
/// W4A8 suite with `--act e4m3`).
pub fn verify(
    env: &Env,
    own: Option<MoeProblem>,
    weights: &str,
    graph: bool,
    act: Option<&str>,
) -> Result<ExitCode> {
    let f = Fp4Format::parse(weights)?;
    if graph {
        return Err(Error::invalid(
            "--graph replays the bf16 kernels; the 4-bit ones are verified by direct launches, so leave it out",
        ));
    }
    let w4a8 = e4m3_act(act, f)?;
    let w4a8_cases = match (&own, w4a8) {
        (_, false) => Vec::new(),
        (Some(p), true) => vec![w4a8_problem_of(p)?],
        (None, true) => w4a8_suite(),
    };
    let cases = match own {
        _ if w4a8 => Vec::new(),
        Some(p) => vec![p],
        None => fp4_suite(),
    };
    let ctx = env.context()?;
    let progress = Some((cases.len() + w4a8_cases.len(), "moe verify (4-bit)"));
    let landing = Landing::begin(env, &ctx, None, progress)?;
    let mut outcomes: Vec<Outcome> = Vec::new();
    let w4a8_runs = w4a8_cases.iter().map(|p| verify_w4a8(&ctx, p));
    let fp4_runs = cases.iter().map(|p| verify_fp4(&ctx, p, f, Mode::Direct));
    for o in w4a8_runs.chain(fp4_runs) {
        landing.land(&mut outcomes, vec![o?]);
    }
    let failed = failures(&outcomes);
    landing.end(failed > 0)?;
    let columns = [VERSION, PROBLEM, REL_ERROR, BOUND, ROWS, VERDICT];
    print_outcomes(env, None, &outcomes, &columns, || {
        format!("{} checks, {failed} failed", outcomes.len())
    });
    Ok(verified(failed > 0))
}

/// `--forms ss,wide`: W4A8 kernel forms by their `KILN_W4A8_FORM` names.
fn parse_forms(list: &str) -> Result<Vec<W4a8Form>> {
    list.split(',')
        .map(|name| {
            W4a8Form::ALL
                .into_iter()
                .find(|f| f.name() == name.trim())
                .ok_or_else(|| {
                    let names: Vec<_> = W4a8Form::ALL.iter().map(|f| f.name()).collect();
                    Error::invalid(format!(
                        "--forms takes KILN_W4A8_FORM values ({}), not {name:?}",
                        names.join(", ")
                    ))
                })
        })
        .collect()
}

/// `kiln moe bench --weights F [--act e4m3]`.
pub fn bench(env: &Env, a: &MoeBenchArgs, weights: &str) -> Result<ExitCode> {
    let format = Fp4Format::parse(weights)?;
    let w4a8 = e4m3_act(a.four_bit.act.as_deref(), format)?;
    let counts = a.row_counts()?;
    let swiglu = a.swiglu_of()?;
    let r = Fp4BenchRequest {
        counts,
        n: a.n,
        k: a.k,
        dtype: a.dtype.parse::<DType>()?,
        format,
        swiglu,
    };
    r.problem().validate()?;
    let forms = a.forms.as_deref().map(parse_forms).transpose()?;
    let ctx = env.context()?;
    let opt = bench_options(env, &a.timing);
    if w4a8 && a.timeline.is_some() {
        return Err(Error::invalid(
            "--timeline traces the bf16-activation kernel; leave out --act e4m3",
        ));
    }
    let rows = if w4a8 {
        let forms = forms.unwrap_or_else(|| vec![ctx.overrides.moe.w4a8_form]);
        bench_w4a8(&ctx, &env.registry, &r, &opt, &forms)?
    } else {
        bench_fp4(&ctx, &env.registry, &r, &opt)?
    };
    // after the timing, so that the traced launches run at its warmed-up clocks
    let timeline = a
        .timeline
        .map(|n| moe_timeline::trace(&ctx, &r, n))
        .transpose()?;
    if env.json {
        env.print_json(&json!({"device": ctx.info.name, "counts": r.counts, "n": r.n, "k": r.k, "dtype": r.dtype, "weights": format.name(), "act": if w4a8 { "e4m3" } else { "bf16" }, "flush_l2": opt.flush_l2, "rows": rows, "timeline": timeline}));
        return Ok(ExitCode::SUCCESS);
    }
    print!("{}", bench_text(&r, &rows));
    if let Some(t) = &timeline {
        print!("{}", timeline_text(t, &r));
    }
    Ok(ExitCode::SUCCESS)
}

/// `--timeline`'s text: the events since the prefix kernel's entry, then each CTA's steps.
fn timeline_text(t: &Timeline, r: &Fp4BenchRequest) -> String {
    let us = |s: &Option<[f64; 3]>| {
        s.map_or("-".into(), |s| {
            format!("{:.2} [{:.2}, {:.2}]", s[0], s[1], s[2])
        })
    };
    let cyc = |s: &Option<[f64; 3]>| {
        s.map_or("-".into(), |s| {
            format!("{:.0} [{:.0}, {:.0}]", s[0], s[1], s[2])
        })
    };
    let fp4 = format!("{} fp4_experts", r.format);
    let mut out = format!(
        "\ntimeline: {} traced launches each (KILN_MOE_TRACE variants, alternating, L2 flushed before each); \
         span from the prefix kernel's entry to the last stamp: bf16 {} us, {fp4} {} us; SM clock {:.2} / {:.2} GHz\n",
        t.launches,
        us(&Some(t.span_us[0])),
        us(&Some(t.span_us[1])),
        t.clock_ghz[0],
        t.clock_ghz[1]
    );
    let mut tb = Table::new(&[
        "event (us since the prefix kernel's entry: median [min, max] over CTAs x launches)",
        "bf16 grouped_gemm",
        &fp4,
    ]);
    for e in &t.events {
        tb.row(&[e.event.clone(), us(&e.bf16), us(&e.fp4)]);
    }
    out += &tb.render();
    let mut ts = Table::new(&[
        "step (SM cycles a CTA: median [min, max])",
        "bf16 grouped_gemm",
        &fp4,
    ]);
    for s in &t.steps {
        ts.row(&[s.step.clone(), cyc(&s.bf16), cyc(&s.fp4)]);
    }
    out + "\n" + &ts.render()
}

/// `kiln moe bench --weights`'s text (without --json): the problem in a line, then a row per
/// timed kernel.
pub(super) fn bench_text(r: &Fp4BenchRequest, rows: &[Row]) -> String {
    let touched = r.counts.iter().filter(|&&c| c > 0).count();
    let head = format!(
        "{} experts ({touched} with rows), {} rows, N {}, K {}, {} activations, {} weights\n",
        r.counts.len(),
        r.counts.iter().sum::<usize>(),
        r.n,
        r.k,
        r.dtype,
        r.format
    );
    const KERNEL: Col = ("kernel", |x| x.text("kernel"));
    const TILE: Col = ("tile", |x| x.text("tile"));
    const MEDIAN: Col = ("median us", |x| x.fixed("median_us", 1));
    const MIN: Col = ("min us", |x| x.fixed("min_us", 1));
    const MAX: Col = ("max us", |x| x.fixed("max_us", 1));
    const MOVED: Col = ("GB moved", |x| {
        format!("{:.3}", x.num("bytes").unwrap_or(f64::NAN) / 1e9)
    });
    const GBPS: Col = ("GB/s", |x| x.fixed("gbps", 0));
    const OF_COPY: Col = ("of copy", |x| {
        format!(
            "{:.1} %",
            100.0 * x.num("copy_fraction").unwrap_or(f64::NAN)
        )
    });
    const X_BF16: Col = ("x bf16", |x| x.fixed("speedup", 2));
    let columns = [KERNEL, TILE, MEDIAN, MIN, MAX, MOVED, GBPS, OF_COPY, X_BF16];
    head + &table(&columns, rows).render()
}

/// `kiln moe prepack`: random weights of the shape (codes and block scales), prepacked, every weight checked
/// (a sample of rows for large shapes) against the standard layout's exact dequantisation.
pub fn prepack(env: &Env, a: &MoePrepackArgs) -> Result<ExitCode> {
    if let Some(path) = &a.read {
        let p = Fp4Prepacked::read(path)?;
        let what = json!({"format": p.format.name(), "experts": p.experts, "n": p.n, "k": p.k, "swiglu": p.swiglu, "bytes": p.bytes.len(), "expert_bytes": p.expert_bytes()});
        if env.json {
            env.print_json(&what);
        } else {
            println!(
                "{}: {} experts, N {}, K {}{}, {} bytes ({} per expert)",
                p.format,
                p.experts,
                p.n,
                p.k,
                if p.swiglu { ", SwiGLU W1+W3" } else { "" },
                p.bytes.len(),
                p.expert_bytes()
            );
        }
        return Ok(ExitCode::SUCCESS);
    }
    let f = Fp4Format::parse(&a.weights)?;
    let p = MoeProblem::contiguous(&vec![1; a.experts], a.n, a.k, DType::Bf16, DType::Bf16);
    let p = match a.swiglu.as_deref() {
        Some(w) => p.with_swiglu(super::moe::swiglu_weights(w)?, false),
        None => p,
    };
    p.validate()?;
    let (w, w3) = random_weights(&p, f, a.seed)?;
    let start = Instant::now();
    let packed = prepack_for(&p, &w, w3.as_ref())?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    // every weight of up to 64 rows per expert and half: row r of half h is the standard
    // layout's row of W (or W1 / W3, or its place in W13)
    let halves = if p.swiglu.is_some() { 2 } else { 1 };
    let step = (a.n / 64).max(1);
    let mut checked = 0usize;
    for e in 0..a.experts {
        let src: Vec<Vec<f64>> = std::iter::once(&w)
            .chain(w3.as_ref())
            .map(|x| x.dequantize_expert(e))
            .collect::<Result<_>>()?;
        for h in 0..halves {
            for row in (0..a.n).step_by(step) {
                let (t, srow) = match (&p.swiglu, w3.is_some()) {
                    (Some(_), true) => (h, row),
                    (Some(_), false) => (0, 256 * (row / 128) + row % 128 + 128 * h),
                    (None, _) => (0, row),
                };
                for kk in 0..a.k {
                    let want = src[t][srow * a.k + kk];
                    let got = packed.value(e, h, row, kk, true);
                    if got != want {
                        return Err(Error::Verification(format!(
                            "prepacked weight (expert {e}, half {h}, row {row}, k {kk}) is {got}, the standard layout says {want}"
                        )));
                    }
                    checked += 1;
                }
            }
        }
    }
    if let Some(out) = &a.out {
        packed.write(out)?;
    }
    let std_bytes =
        w.codes.len() + w.scales.len() + w3.as_ref().map_or(0, |x| x.codes.len() + x.scales.len());
    if env.json {
        env.print_json(&json!({"format": f.name(), "experts": a.experts, "n": a.n, "k": a.k, "swiglu": p.swiglu.is_some(), "standard_bytes": std_bytes, "prepacked_bytes": packed.bytes.len(), "prepack_ms": ms, "weights_checked": checked}));
    } else {
        println!(
            "{f}: {} experts, N {}, K {}{}: {} standard bytes -> {} prepacked in {ms:.0} ms; {checked} weights match the standard layout exactly",
            a.experts,
            a.n,
            a.k,
            if p.swiglu.is_some() { ", SwiGLU W1+W3" } else { "" },
            std_bytes,
            packed.bytes.len()
        );
    }
    Ok(ExitCode::SUCCESS)
}
