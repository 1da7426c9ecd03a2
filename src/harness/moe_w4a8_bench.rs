//! The W4A8 experts timed against kiln's bf16 kernel of the same counts in one run, and kiln's
//! FP8 quantiser on the same X (what a layer whose input is not already e4m3 adds).

use super::bench::BenchOptions;
use super::bench::Row;
use super::device_data::random_buffer;
use super::moe_fp4_bench::{bf16_bytes, median_us, touched, BenchRun, Fp4BenchRequest};
use super::moe_verify::settle;
use crate::device::{Context, DeviceBuffer};
use crate::error::{Error, Result};
use crate::formats::ScaleRecipe;
use crate::ops::fp8::{self, Granularity, QuantSpec};
use crate::ops::gemm::DType;
use crate::ops::moe::fp4::kernel_w4a8::{auto_form, W4a8Layout, W4a8Variant, NAME};
use crate::ops::moe::fp4::w4a8::{W4A8_ATOM_BYTES, W4A8_CODE_BYTES};
use crate::ops::moe::fp4::{W4a8Experts, W4a8Operands};
use crate::ops::moe::fp8_problem::Fp8MoeProblem;
use crate::ops::moe::schedule::sched_bytes;
use crate::ops::moe::{MoeProblem, Rows};
use crate::ops::registry::Registry;
use crate::overrides::{MoeOverrides, W4a8Decode, W4a8Form};

/// The offset byte of every block of the bench's weights: 8 (u + 8) with u = 4, a table of the
/// binades real weights name (any of u -5..6 times the same in every form).
const BENCH_OFFSET: u8 = 96;

/// The W4A8 kernel's problem for `p`'s rows, shape and SwiGLU (its routing; the W1/W3 layout
/// matters to the bf16 kernel only).
pub fn w4a8_problem(p: &MoeProblem) -> Fp8MoeProblem {
    let counts: Vec<usize> = p.spans().iter().map(|s| s.1).collect();
    let q = match &p.rows {
        Rows::Masked { max_rows, .. } => Fp8MoeProblem::masked(&counts, *max_rows, p.n, p.k),
        Rows::Contiguous { .. } => Fp8MoeProblem::contiguous(&counts, p.n, p.k),
    };
    match p.swiglu {
        Some(s) => q.with_swiglu(s.routed, false),
        None => q,
    }
}

/// Bytes the W4A8 kernel must move: touched experts' prepacked weights and row factors, routed
/// rows of X (e4m3) with their scales, and Y (bf16).
pub fn w4a8_bytes(p: &Fp8MoeProblem, l: &W4a8Layout) -> f64 {
    let rows = p.routed_rows() as f64;
    let factors = (l.escale_len() / l.experts.max(1) * 4) as f64;
    touched(&p.layout()) as f64 * (l.expert_bytes() as f64 + factors)
        + rows * (p.k as f64 + 4.0 * p.k.div_ceil(128) as f64 + 2.0 * p.n as f64)
}

/// Times kiln's bf16 kernel and the W4A8 kernel in each of `forms` (`KILN_W4A8_FORM` values, at
/// least one) in interleaved rounds of one process (the SM clock moves under load: kernels timed
/// one after the other ran at different clocks), then kiln's FP8 quantisation of X. Rows: bf16,
/// each form (its speedup over bf16), the quantiser (speedup of the first form and it together).
pub fn bench_w4a8(
    ctx: &Context,
    reg: &Registry,
    r: &Fp4BenchRequest,
    opt: &BenchOptions,
    forms: &[W4a8Form],
) -> Result<Vec<Row>> {
    let mp = r.problem();
    mp.validate()?;
    let p = w4a8_problem(&mp);
    p.validate()?;
    if r.dtype != DType::Bf16 {
        return Err(Error::invalid(
            "e4m3 activations are quantised from bf16 here; leave out --dtype",
        ));
    }
    if forms.is_empty() {
        return Err(Error::invalid("name at least one W4A8 form to time"));
    }
    W4a8Experts::supports(&p, &ctx.info).map_err(Error::refused(NAME))?;
    let run = BenchRun::new(ctx, opt)?;
    let (bf16, bf16_bufs, bf16_what) = run.bf16_parts(reg, &mp)?;
    let l = W4a8Layout {
        experts: p.experts,
        n: p.n,
        k: p.k,
        swiglu: p.swiglu.is_some(),
    };
    let s = |i: u64| run.seed.wrapping_add(i);
    // X drawn in bf16 and quantised by kiln's quantiser (real e4m3 codes and scales); random
    // weight codes (any bytes) with the offsets below; random row factors
    let (xr, k) = (p.x_rows(), p.k);
    let x = random_buffer(ctx, DType::Bf16, xr * k, s(20))?;
    let spec = QuantSpec::e4m3(Granularity::Block1x128, ScaleRecipe::Fp32);
    let q = fp8::quantize(ctx, &x, DType::Bf16, xr, k, k, spec)?;
    let w = random_buffer(ctx, DType::Bf16, p.experts * l.expert_bytes() / 2, s(21))?;
    // each block's offset byte as a prepack writes it (here u = 4 for all), not random: random
    // bytes name the subnormal tables and the NaN one in a quarter of the blocks, which real
    // weights name only for blocks 2^11 below their row's largest (F191)
    let atoms = p.experts * l.expert_bytes() / W4A8_ATOM_BYTES;
    let offsets = (W4A8_CODE_BYTES, W4A8_ATOM_BYTES - W4A8_CODE_BYTES);
    w.fill_strided(
        BENCH_OFFSET,
        (offsets.0, offsets.1, W4A8_ATOM_BYTES, atoms),
        ctx,
    )?;
    let escale = random_buffer(ctx, DType::F32, l.escale_len(), s(22))?;
    let y = ctx.alloc(xr * p.n * 2)?;
    let rows = DeviceBuffer::from_host(mp.rows_array())?;
    let route = p
        .swiglu
        .is_some_and(|sw| sw.routed)
        .then(|| random_buffer(ctx, DType::F32, xr, s(23)))
        .transpose()?;
    let sched = ctx.alloc(sched_bytes(p.experts))?;
    settle()?;
    let ops = W4a8Operands {
        x: &q.codes,
        sx: &q.scales,
        w: &w,
        escale: &escale,
        y: &y,
        rows: &rows,
        route: route.as_ref(),
        sched: &sched,
    };
    W4a8Experts::check(&p, &l, &ops)?;
    let bops = bf16_bufs.operands();
    let mut launches: Vec<Box<dyn FnMut() -> Result<()> + '_>> =
        vec![Box::new(|| bf16.launch(ctx, &mp, &bops))];
    for &f in forms {
        let (p, ops, l) = (&p, &ops, l);
        launches.push(Box::new(move || {
            W4a8Experts::launch_form(ctx, p, &l, ops, f)
        }));
    }
    let mut refs: Vec<&mut dyn FnMut() -> Result<()>> = launches
        .iter_mut()
        .map(|f| f.as_mut() as &mut dyn FnMut() -> Result<()>)
        .collect();
    let times = run.bench.interleaved(&mut refs)?;
    drop(refs);
    drop(launches);
    let base = run.row(&mp, bf16_what, bf16_bytes(&mp), &times[0]);
    let mut out = vec![base];
    for (&f, t) in forms.iter().zip(&times[1..]) {
        let what = (format!("mxfp4 x e4m3 {NAME}"), form_label(ctx, &p, f)?);
        let mut row = run.row(&mp, what, w4a8_bytes(&p, &l), t);
        row.set("speedup", median_us(&out[0]) / median_us(&row));
        out.push(row);
    }
    // the quantiser alone: X read in bf16, codes and scales written
    let qbytes = (xr * k * 3 + 4 * Granularity::Block1x128.scale_count(xr, k)) as f64;
    let what = (
        "bf16 -> e4m3 1x128 (X)".to_string(),
        "fp8_quant".to_string(),
    );
    let mut quant = run.time(&mp, what, qbytes, || {
        fp8::quantize_into(ctx, &x, DType::Bf16, xr, k, k, spec, &q.codes, k, &q.scales)
    })?;
    let both = median_us(&out[1]) + median_us(&quant);
    quant.set("speedup", median_us(&out[0]) / both);
    out.push(quant);
    Ok(out)
}

/// What `form` runs on `p` under the other knobs, in words (`auto` resolved by the rows).
fn form_label(ctx: &Context, p: &Fp8MoeProblem, form: W4a8Form) -> Result<String> {
    let k = MoeOverrides {
        w4a8_form: form,
        ..ctx.overrides.moe
    };
    let resolved = auto_form(p, &k);
    let (name, v) = (resolved.name(), W4a8Variant::for_form(&k, resolved)?);
    let auto = if form == W4a8Form::Auto { "auto: " } else { "" };
    Ok(if v.wide {
        format!("192 tokens x 128 weight rows, smem-decoded e4m3, three consumers ({auto}{name})")
    } else if v.decode == W4a8Decode::Consumers {
        format!("128 tokens x 128 weight rows, smem-decoded e4m3 ({auto}{name})")
    } else {
        format!(
            "128 tokens x 128 weight rows, smem-decoded e4m3 ({} decode)",
            v.decode.name()
        )
    })
}
