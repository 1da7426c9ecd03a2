//! The rows each kind of run records, built from the library's typed results (problem and metrics
//! as serde structs), so that the CLI and a program calling the library store the same keys.

use serde::Serialize;

use super::ResultRow;
use crate::harness::bench::{FlushMode, Row, Timing};
use crate::harness::check::CheckRow;
use crate::harness::moe_bench::MoeBenchRequest;
use crate::harness::outcome::{Extra, Outcome};
use crate::harness::peak::Peak;
use crate::harness::suite::BenchRow;
use crate::ops::attention::AttentionProblem;
use crate::ops::gemm::DType;
use crate::ops::moe::MoeProblem;
use crate::tools::sanitize::{Case, Finding};

/// A GEMM check's numbers (`kiln verify`).
#[derive(Debug, Clone, Serialize)]
pub struct GemmVerifyMetrics<'a> {
    pub rel_error: f64,
    pub bound: f64,
    pub nan_or_unwritten: usize,
    pub written_outside: usize,
    pub rows_checked: usize,
    pub seed: u64,
    pub skipped: &'a Option<String>,
    pub message: &'a str,
}

/// One GEMM timing (`kiln bench`, `kiln suite`), with its ratio to the vendor in the same run and
/// where in its pass it ran.
#[derive(Debug, Clone, Serialize)]
pub struct GemmBenchMetrics {
    pub median_ms: f64,
    pub min_ms: f64,
    pub max_ms: f64,
    pub reps: usize,
    pub tflops: f64,
    pub gbps: f64,
    /// `None` where no vendor time exists; 1 for the vendor's own row.
    pub ratio_to_vendor: Option<f64>,
    pub flush_l2: bool,
    /// How L2 was flushed between launches ([`FlushMode::label`]).
    pub flush: &'static str,
    pub pass: usize,
    pub position: usize,
    /// Kept as `null` where not measured (not left out), as rows have always had it.
    pub host_us: Option<f64>,
    /// The seed the problem was drawn from (`--set random`); absent for a chosen problem.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draw_seed: Option<u64>,
}

/// An attention check's numbers (`kiln attn verify`).
#[derive(Debug, Clone, Serialize)]
pub struct AttentionVerifyMetrics<'a> {
    pub rel_error: f64,
    pub bound: f64,
    pub lse_max_error: f64,
    pub nan_or_unwritten: usize,
    pub rows_checked: usize,
    pub seed: u64,
    pub skipped: &'a Option<String>,
    pub message: &'a str,
}

/// The problem of an MoE timing (`kiln moe bench`): the piece's label and the request's shape.
#[derive(Debug, Clone, Serialize)]
pub struct MoeBenchProblem<'a> {
    pub label: &'a str,
    pub counts: &'a [usize],
    pub n: usize,
    pub k: usize,
    pub dtype: DType,
}

/// The problem of a sanitizer case (`kiln sanitize`).
#[derive(Debug, Clone, Serialize)]
pub struct SanitizeProblem<'a> {
    pub shape: &'a str,
    pub layout: &'a str,
    pub dtype: &'a str,
    pub out: &'a str,
    pub setup: &'a str,
}

/// What a sanitizer case found (`kiln sanitize`).
#[derive(Debug, Clone, Serialize)]
pub struct SanitizeMetrics<'a> {
    pub errors: Option<usize>,
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    pub first: &'a Option<String>,
}

/// The problem of a compile check: the architecture compiled for.
#[derive(Debug, Clone, Serialize)]
pub struct ArchProblem<'a> {
    pub arch: &'a str,
}

/// A row of `op`/`version`/`variant` with its problem and metrics serialised.
fn row(
    op: &str,
    version: &str,
    variant: String,
    problem: &impl Serialize,
    metrics: &impl Serialize,
    passed: Option<bool>,
) -> ResultRow {
    ResultRow {
        op: op.into(),
        version: version.into(),
        variant,
        problem: value(problem),
        metrics: value(metrics),
        passed,
    }
}

/// A value as JSON: every type stored here serialises (plain fields, string keys).
fn value(v: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(v).unwrap_or_default()
}

/// `kiln peak`: the device's measured ceilings (no problem).
pub fn peak_row(pk: &Peak) -> ResultRow {
    row(
        "peak",
        "device",
        String::new(),
        &serde_json::Map::new(),
        pk,
        None,
    )
}

/// `kiln check`: one compiled variant, with its resources, for `arch`.
pub fn check_row(r: &CheckRow, arch: &str) -> ResultRow {
    row(
        &r.op,
        &r.version,
        r.variant.clone(),
        &ArchProblem { arch },
        r,
        Some(r.ok()),
    )
}

/// `kiln verify`: one GEMM version checked on one problem.
pub fn gemm_verify_row(o: &Outcome) -> ResultRow {
    let m = GemmVerifyMetrics {
        rel_error: o.rel_error,
        bound: o.bound,
        nan_or_unwritten: o.mismatches,
        written_outside: o.written_outside,
        rows_checked: o.rows_checked,
        seed: o.seed,
        skipped: &o.skipped,
        message: &o.message,
    };
    row(
        "gemm",
        &o.check,
        String::new(),
        &problem_of(o),
        &m,
        Some(o.passed),
    )
}

/// The typed problem an outcome carries (GEMM, attention), as JSON; null for the others.
fn problem_of(o: &Outcome) -> serde_json::Value {
    match &o.extra {
        Extra::Gemm(p) => value(p),
        Extra::Attention { problem, .. } => value(problem),
        Extra::Backward { problem, .. } => value(problem),
        Extra::Decode { spec, .. } => value(spec),
        _ => serde_json::Value::Null,
    }
}

/// `kiln bench`: one timing `t` of `bench` (a version's, with its `ratio` to the vendor, or the
/// vendor's own with 1), L2 flushed between launches (in mode `flush`) or not; `draw_seed` where
/// the problem was drawn at random.
pub fn gemm_bench_row(
    bench: &BenchRow,
    t: &Timing,
    ratio: Option<f64>,
    flush_l2: bool,
    flush: FlushMode,
    draw_seed: Option<u64>,
) -> ResultRow {
    let m = GemmBenchMetrics {
        median_ms: t.median_ms,
        min_ms: t.min_ms,
        max_ms: t.max_ms,
        reps: t.reps,
        tflops: t.tflops,
        gbps: t.gbps,
        ratio_to_vendor: ratio,
        flush_l2,
        flush: flush.label(flush_l2),
        pass: bench.pass,
        position: bench.position,
        host_us: t.host_us,
        draw_seed,
    };
    row("gemm", &t.version, String::new(), &t.problem, &m, None)
}

/// `kiln attn verify`: one attention version checked on one problem.
pub fn attention_verify_row(o: &Outcome) -> ResultRow {
    let m = AttentionVerifyMetrics {
        rel_error: o.rel_error,
        bound: o.bound,
        lse_max_error: o.lse_max_error(),
        nan_or_unwritten: o.mismatches,
        rows_checked: o.rows_checked,
        seed: o.seed,
        skipped: &o.skipped,
        message: &o.message,
    };
    let problem = problem_of(o);
    row(
        "attention",
        &o.check,
        String::new(),
        &problem,
        &m,
        Some(o.passed),
    )
}

/// `kiln attn bench`: one version timed on `p` (its per-launch times stay out of the store).
pub fn attention_bench_row(p: &AttentionProblem, t: &Row) -> ResultRow {
    let m = t.only(&["median_ms", "min_ms", "max_ms", "reps", "tflops"]);
    row("attention", &t.text("version"), String::new(), p, &m, None)
}

/// `kiln attn verify --decode`: one decode step checked, its split count as the variant (the
/// metrics are the outcome's JSON, the spec with them).
pub fn decode_verify_row(o: &Outcome) -> ResultRow {
    let splits = match o.extra {
        Extra::Decode { splits, .. } => splits,
        _ => 0,
    };
    let variant = format!("splits {splits}");
    row(
        "attention",
        &o.check,
        variant,
        &problem_of(o),
        o,
        Some(o.passed),
    )
}

/// `kiln attn bench --decode`: one decode step timed, with the copy ceiling measured beside it.
pub fn decode_bench_row(t: &Row, copy_tbps: f64) -> ResultRow {
    let keys = [
        "median_us",
        "min_us",
        "max_us",
        "reps",
        "cache_bytes",
        "gbps",
    ];
    let m = t
        .only(&keys)
        .with("copy_tbps", copy_tbps)
        .with("of_copy", t.number("gbps") / (copy_tbps * 1e3));
    let variant = format!("splits {}", t.text("splits"));
    let spec = t.get("spec").cloned().unwrap_or_default();
    row("attention", "decode_paged", variant, &spec, &m, None)
}

/// `kiln attn verify --backward`: one backward version checked on its problem (the metrics are
/// the outcome's JSON, the problem with them).
pub fn attention_backward_verify_row(o: &Outcome) -> ResultRow {
    let problem = problem_of(o);
    row(
        "attention_backward",
        &o.check,
        String::new(),
        &problem,
        o,
        Some(o.passed),
    )
}

/// `kiln attn bench --backward`: one backward version timed.
pub fn attention_backward_bench_row(t: &Row) -> ResultRow {
    let problem = t.get("problem");
    let version = t.text("version");
    row(
        "attention_backward",
        &version,
        String::new(),
        &problem,
        t,
        None,
    )
}

/// `kiln moe verify`: one version checked on `p`, the launch mode as the variant.
pub fn moe_verify_row(p: &MoeProblem, o: &Outcome) -> ResultRow {
    let mode = match &o.extra {
        Extra::Moe { mode } => format!("{mode:?}").to_lowercase(),
        _ => String::new(),
    };
    row("moe", &o.check, mode, p, o, Some(o.passed))
}

/// `kiln moe verify --layer`: one layer case.
pub fn moe_layer_verify_row(c: &crate::harness::moe_layer::LayerCase, o: &Outcome) -> ResultRow {
    row(
        "moe",
        crate::ops::moe::layer::NAME,
        String::new(),
        c,
        o,
        Some(o.passed),
    )
}

/// `kiln moe bench --layer`: one piece of one layer timed.
pub fn moe_layer_bench_row(p: &crate::ops::moe::layer::LayerProblem, t: &Row) -> ResultRow {
    row(
        "moe",
        crate::ops::moe::layer::NAME,
        t.text("piece"),
        p,
        t,
        None,
    )
}

/// `kiln moe bench`: one piece of the request `r` timed.
pub fn moe_bench_row(r: &MoeBenchRequest, t: &Row) -> ResultRow {
    let label = t.text("problem");
    let p = MoeBenchProblem {
        label: &label,
        counts: &r.counts,
        n: r.n,
        k: r.k,
        dtype: r.dtype,
    };
    row("moe", &t.text("piece"), String::new(), &p, t, None)
}

/// `kiln sanitize`: one sanitizer tool over one version and problem, the tool as the variant.
pub fn sanitize_row(c: &Case, f: &Finding) -> ResultRow {
    let p = SanitizeProblem {
        shape: &c.shape,
        layout: &c.layout,
        dtype: &c.dtype,
        out: &c.out,
        setup: &c.setup,
    };
    let m = SanitizeMetrics {
        errors: f.errors,
        exit_code: f.exit_code,
        timed_out: f.timed_out,
        first: &f.first,
    };
    row("gemm", &c.version, c.tool.clone(), &p, &m, Some(f.clean()))
}

/// `kiln tune --dtype e4m3`: one config of the FP8 GEMM's space on `p`, verified and timed.
pub fn fp8_tune_row(
    p: &crate::ops::fp8::Fp8Problem,
    c: &crate::tune::fp8::Fp8Candidate,
) -> ResultRow {
    row(
        "gemm",
        crate::ops::fp8::gemm::NAME,
        c.config.to_string(),
        p,
        c,
        Some(c.verified),
    )
}

#[cfg(test)]
mod tests {
    //! Each builder against the `json!` the CLI built the same row with before the builders
    //! existed (copied from it): same keys, same values, same types.

    use serde_json::json;

    use super::*;
    use crate::harness::moe_verify::Mode;
    use crate::jit::Resources;
    use crate::ops::gemm::{GemmProblem, Layout};

    fn gemm_problem() -> GemmProblem {
        GemmProblem::new(129, 256, 72, Layout::RC, DType::Bf16, DType::F32)
    }

    fn timing(host_us: Option<f64>) -> Timing {
        Timing {
            version: "wgmma_tma_ws".into(),
            problem: gemm_problem(),
            median_ms: 0.25,
            min_ms: 0.2,
            max_ms: 0.5,
            reps: 30,
            tflops: 612.5,
            gbps: 1800.0,
            host_us,
        }
    }

    #[test]
    fn gemm_rows_keep_their_keys() {
        for skipped in [None, Some("needs sm_90a".to_string())] {
            let g = gemm_problem();
            let o = Outcome {
                passed: skipped.is_none(),
                skipped,
                mismatches: 3,
                written_outside: 1,
                rows_checked: 129,
                message: "ok".into(),
                ..Outcome::new("mma_sync", g.label(), 42, 1e-2, Extra::Gemm(g))
            };
            let r = gemm_verify_row(&o);
            assert_eq!(
                (r.op.as_str(), r.version.as_str(), r.variant.as_str()),
                ("gemm", "mma_sync", "")
            );
            assert_eq!(r.passed, Some(o.passed));
            assert_eq!(r.problem, json!(g));
            assert_eq!(
                r.metrics,
                json!({"rel_error": o.rel_error, "bound": o.bound, "nan_or_unwritten": o.mismatches, "written_outside": o.written_outside, "rows_checked": o.rows_checked, "seed": o.seed, "skipped": o.skipped, "message": o.message})
            );
        }
        for host_us in [None, Some(4.5)] {
            let t = timing(host_us);
            let row = BenchRow {
                problem: gemm_problem(),
                vendor: None,
                vendor_algorithm: None,
                versions: vec![(t.clone(), Some(1.02))],
                skipped: Vec::new(),
                pass: 2,
                position: 7,
            };
            let ratio = Some(1.02);
            let flush_l2 = false;
            let r = gemm_bench_row(&row, &t, ratio, flush_l2, FlushMode::Read, None);
            assert_eq!(
                (r.op.as_str(), r.version.as_str(), r.passed),
                ("gemm", "wgmma_tma_ws", None)
            );
            assert_eq!(r.problem, json!(t.problem));
            assert_eq!(
                r.metrics,
                json!({"median_ms": t.median_ms, "min_ms": t.min_ms, "max_ms": t.max_ms, "reps": t.reps, "tflops": t.tflops, "gbps": t.gbps, "ratio_to_vendor": ratio, "flush_l2": flush_l2, "flush": FlushMode::Read.label(flush_l2), "pass": row.pass, "position": row.position, "host_us": t.host_us})
            );
            let drawn = gemm_bench_row(&row, &t, ratio, flush_l2, FlushMode::Read, Some(11));
            assert_eq!(drawn.metrics["draw_seed"], json!(11));
        }
    }

    #[test]
    fn peak_and_check_rows_keep_their_keys() {
        let pk = Peak {
            copy_tbps: 3.1,
            read_tbps: 3.3,
            read_32mib_us: 12.5,
            gemm_bf16_tflops: 710.0,
        };
        let r = peak_row(&pk);
        assert_eq!(
            (
                r.op.as_str(),
                r.version.as_str(),
                r.variant.as_str(),
                r.passed
            ),
            ("peak", "device", "", None)
        );
        assert_eq!(r.problem, json!({}));
        assert_eq!(r.metrics, json!(pk));
        for problems in [Vec::new(), vec!["spills 8 B".to_string()]] {
            let c = CheckRow {
                op: "gemm".into(),
                version: "simt_tiled".into(),
                variant: "simt_tiled<64>".into(),
                resources: Some(Resources {
                    registers: 96,
                    ..Resources::default()
                }),
                dynamic_smem: 4096,
                compile_ms: 812.0,
                compile_cpu_ms: None,
                cached: false,
                cubin_sha256: "ab".into(),
                problems,
            };
            let arch = "sm_90a";
            let r = check_row(&c, arch);
            assert_eq!(
                (r.op.as_str(), r.version.as_str(), r.variant.as_str()),
                ("gemm", "simt_tiled", "simt_tiled<64>")
            );
            assert_eq!(r.passed, Some(c.ok()));
            assert_eq!(r.problem, json!({"arch": arch}));
            assert_eq!(r.metrics, json!(c));
        }
    }

    #[test]
    fn attention_rows_keep_their_keys() {
        let p = AttentionProblem::new(2, 16, 1000, 128);
        let extra = Extra::Attention {
            problem: p,
            lse_max_error: f64::NAN,
        };
        let o = Outcome {
            passed: true,
            rel_error: 1e-3,
            rows_checked: 64,
            ..Outcome::new("fa3_wgmma", p.label(), 9, 1e-2, extra)
        };
        let r = attention_verify_row(&o);
        assert_eq!(
            (
                r.op.as_str(),
                r.version.as_str(),
                r.variant.as_str(),
                r.passed
            ),
            ("attention", "fa3_wgmma", "", Some(true))
        );
        assert_eq!(r.problem, json!(p));
        assert_eq!(
            r.metrics,
            json!({"rel_error": o.rel_error, "bound": o.bound, "lse_max_error": o.lse_max_error(), "nan_or_unwritten": o.mismatches, "rows_checked": o.rows_checked, "seed": o.seed, "skipped": o.skipped, "message": o.message})
        );
        let t = crate::harness::bench::kernel_row("fa2_mma_sync", p, 1.45e12, vec![1.5, 1.4]);
        let r = attention_bench_row(&p, &t);
        assert_eq!(
            (r.op.as_str(), r.version.as_str(), r.passed),
            ("attention", "fa2_mma_sync", None)
        );
        assert_eq!(r.problem, json!(p));
        assert_eq!(
            r.metrics,
            json!({"median_ms": 1.45, "min_ms": 1.4, "max_ms": 1.5, "reps": 2, "tflops": t.number("tflops")})
        );
    }

    #[test]
    fn moe_rows_keep_their_keys() {
        let p = MoeProblem::contiguous(&[3, 0, 40], 256, 128, DType::Bf16, DType::Bf16);
        let o = Outcome {
            rel_error: 0.5,
            mismatches: 2,
            rows_checked: 43,
            message: "wrong".into(),
            ..Outcome::new(
                "grouped_gemm",
                "E3 N256 K128".into(),
                5,
                1e-2,
                Extra::Moe { mode: Mode::Graph },
            )
        };
        let r = moe_verify_row(&p, &o);
        assert_eq!(
            (
                r.op.as_str(),
                r.version.as_str(),
                r.variant.as_str(),
                r.passed
            ),
            ("moe", "grouped_gemm", "graph", Some(false))
        );
        assert_eq!(r.problem, json!(p));
        assert_eq!(r.metrics, json!(o));
        let req = MoeBenchRequest {
            counts: vec![3, 0, 40],
            n: 256,
            k: 128,
            dtype: DType::F16,
            swiglu: None,
        };
        let s = crate::harness::bench::Summary {
            median_ms: 0.1,
            min_ms: 0.09,
            max_ms: 0.2,
            reps: 10,
        };
        let t = Row::timed(&s, crate::harness::bench::Times::Ms)
            .with("piece", "ffn")
            .with("problem", "E3 x43")
            .with("tile", "128x128")
            .with("tflops", 100.0)
            .with("gbps", 900.0);
        let r = moe_bench_row(&req, &t);
        assert_eq!(
            (
                r.op.as_str(),
                r.version.as_str(),
                r.variant.as_str(),
                r.passed
            ),
            ("moe", "ffn", "", None)
        );
        assert_eq!(
            r.problem,
            json!({"label": t.text("problem"), "counts": req.counts, "n": req.n, "k": req.k, "dtype": req.dtype})
        );
        assert_eq!(r.metrics, json!(t));
    }

    #[test]
    fn sanitize_rows_keep_their_keys() {
        let c = Case {
            version: "wgmma_tma_ws".into(),
            tool: "memcheck".into(),
            shape: "129x256x72".into(),
            layout: "RC".into(),
            dtype: "bf16".into(),
            out: "f32".into(),
            ..Case::default()
        };
        let f = Finding {
            case: c.clone(),
            errors: Some(0),
            exit_code: Some(0),
            timed_out: false,
            first: None,
            skipped: None,
        };
        let r = sanitize_row(&c, &f);
        assert_eq!(
            (
                r.op.as_str(),
                r.version.as_str(),
                r.variant.as_str(),
                r.passed
            ),
            ("gemm", "wgmma_tma_ws", "memcheck", Some(true))
        );
        assert_eq!(
            r.problem,
            json!({"shape": c.shape, "layout": c.layout, "dtype": c.dtype, "out": c.out, "setup": c.setup})
        );
        assert_eq!(
            r.metrics,
            json!({"errors": f.errors, "exit_code": f.exit_code, "timed_out": f.timed_out, "first": f.first})
        );
    }
}
