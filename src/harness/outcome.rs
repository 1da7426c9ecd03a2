//! One outcome for every check the lab makes: what was checked, on which problem, the error
//! against its bound, pass, fail or skip with the reason, and each family's extras as data. The
//! verify tables, the store's rows, the fuzz's verdicts and the JSON all read this one type; its
//! JSON keeps each family's keys (a GEMM's problem as an object, an FP8 check's `case`).

use serde::ser::{Serialize, SerializeMap, Serializer};

use super::attention::decode::DecodeSpec;
use super::moe_verify::Mode;
use crate::ops::attention::AttentionProblem;
use crate::ops::attention_backward::BackwardProblem;
use crate::ops::gemm::GemmProblem;

/// The outcome of one check.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// What ran: the kernel version (GEMM, attention, MoE), or the kind of check for the format
    /// families (`convert`, `quantize`, `dequantize`, `gemm`, `cublaslt`, ...).
    pub check: String,
    /// The problem's label (the case, for the format families).
    pub label: String,
    pub passed: bool,
    /// Why the problem was refused (a skip, which passes), if it was.
    pub skipped: Option<String>,
    /// ‖out − ref‖ / ‖ref‖ against the float64 reference (NaN where nothing was compared).
    pub rel_error: f64,
    pub bound: f64,
    /// Elements wrong outright: in-range outputs left NaN or never written (kernel checks), or
    /// codes, scales and values that differ bit-wise (format checks).
    pub mismatches: usize,
    /// Elements outside the output (padding, rows nobody owns) that were overwritten.
    pub written_outside: usize,
    pub rows_checked: usize,
    /// The seed of the inputs: the same seed gives the same inputs.
    pub seed: u64,
    pub message: String,
    pub extra: Extra,
}

/// What one family's check adds to the common fields.
#[derive(Debug, Clone, PartialEq)]
pub enum Extra {
    Gemm(GemmProblem),
    Attention {
        problem: AttentionProblem,
        /// The largest absolute LSE error.
        lse_max_error: f64,
    },
    /// The attention backward: `rel_error` is the largest of the three gradients' errors.
    Backward {
        problem: BackwardProblem,
        dq_error: f64,
        dk_error: f64,
        dv_error: f64,
        /// Deterministic mode: whether a second run gave the same bits (None: not checked).
        reproducible: Option<bool>,
    },
    /// One decode step over a KV cache (`check` is the step's kernel, `label` the spec's).
    Decode {
        spec: DecodeSpec,
        /// The contexts' split count, as the plan chose it.
        splits: usize,
        lse_max_error: f64,
        /// Cache elements the append left different from the reference's append.
        append_mismatches: usize,
    },
    /// The packed (variable-length) forward.
    Varlen {
        lse_max_error: f64,
    },
    Moe {
        mode: Mode,
    },
    Fp4,
    /// A pointwise op (RMSNorm, RoPE): `rel_error` is the worst element's error over its own
    /// bound (the bound is 1).
    Pointwise {
        /// "16-byte" or "1-element": the kernel variant the checks chose.
        variant: &'static str,
    },
    /// A whole MoE layer: routing, gathered SwiGLU, down projection and combine.
    Layer {
        /// "ok", or the first fault of the routing and row order.
        route: String,
        /// Tokens whose experts differ from the f64 routing's by a near tie.
        near_ties: usize,
        /// H's (the SwiGLU output's) relative error and bound.
        h_error: f64,
        h_bound: f64,
    },
    Fp8 {
        /// ‖out − round(ref)‖ / ‖ref‖: what accumulation adds to the output's rounding (the MoE
        /// checks: the kernel's error before the output's rounding, estimated as
        /// [`super::fp8_moe_judge::error_before_rounding`] says why).
        rel_error_rounded: f64,
        /// ‖|A||B|ᵀ‖ / ‖ref‖ over the checked elements: how much the output's sums cancel (1 for
        /// same-signed products; the tensor cores' accumulation error scales with the absolute
        /// sums, the bound with ‖ref‖). Computed for small problems and for failures.
        cancellation: Option<f64>,
    },
}

impl Extra {
    /// The FP8 extras before they are measured.
    pub const FP8: Extra = Extra::Fp8 {
        rel_error_rounded: f64::NAN,
        cancellation: None,
    };
}

impl Outcome {
    /// `check` on `label` with the inputs of `seed`, not yet judged (failed, with no message).
    pub fn new(
        check: impl Into<String>,
        label: String,
        seed: u64,
        bound: f64,
        extra: Extra,
    ) -> Self {
        Outcome {
            check: check.into(),
            label,
            passed: false,
            skipped: None,
            rel_error: f64::NAN,
            bound,
            mismatches: 0,
            written_outside: 0,
            rows_checked: 0,
            seed,
            message: String::new(),
            extra,
        }
    }

    /// The problem was refused with `reason`: a skip, which passes.
    pub fn skip(mut self, reason: String) -> Self {
        self.skipped = Some(reason);
        self.passed = true;
        self
    }

    /// Ran and did not pass (a skip is not a failure).
    pub fn failed(&self) -> bool {
        !self.passed && self.skipped.is_none()
    }

    /// The verdict column of a table: the message, or "skipped: " and the reason.
    pub fn verdict_text(&self) -> String {
        match &self.skipped {
            Some(why) => format!("skipped: {why}"),
            None => self.message.clone(),
        }
    }

    /// Judged bit for bit: passes with no mismatches, else names the first.
    pub fn judge_bits(mut self, mismatches: usize, first: Option<String>) -> Self {
        self.mismatches = mismatches;
        self.passed = mismatches == 0;
        self.message = first.map_or("bit-exact".into(), |f| {
            format!("{mismatches} mismatches, first: {f}")
        });
        self
    }

    /// The attention checks' largest LSE error (NaN for the other families).
    pub fn lse_max_error(&self) -> f64 {
        match self.extra {
            Extra::Attention { lse_max_error, .. }
            | Extra::Decode { lse_max_error, .. }
            | Extra::Varlen { lse_max_error } => lse_max_error,
            _ => f64::NAN,
        }
    }

    /// Sets the attention checks' largest LSE error (a no-op for the other families).
    pub fn set_lse_max_error(&mut self, e: f64) {
        if let Extra::Attention { lse_max_error, .. }
        | Extra::Decode { lse_max_error, .. }
        | Extra::Varlen { lse_max_error } = &mut self.extra
        {
            *lse_max_error = e;
        }
    }

    /// How the MoE check's launch was issued.
    pub fn mode(&self) -> Option<Mode> {
        match self.extra {
            Extra::Moe { mode } => Some(mode),
            _ => None,
        }
    }

    /// The FP8 check's error beyond the output's rounding (NaN for the other families).
    pub fn rel_error_rounded(&self) -> f64 {
        match self.extra {
            Extra::Fp8 {
                rel_error_rounded, ..
            } => rel_error_rounded,
            _ => f64::NAN,
        }
    }

    /// The FP8 check's cancellation, where computed.
    pub fn cancellation(&self) -> Option<f64> {
        match self.extra {
            Extra::Fp8 { cancellation, .. } => cancellation,
            _ => None,
        }
    }

    /// Sets the FP8 extras (a no-op for the other families).
    pub fn set_fp8(&mut self, rounded: f64, cancel: Option<f64>) {
        if let Extra::Fp8 {
            rel_error_rounded,
            cancellation,
        } = &mut self.extra
        {
            *rel_error_rounded = rounded;
            *cancellation = cancel;
        }
    }
}

/// Each family's JSON, key for key and in the order its checks have always written.
impl Serialize for Outcome {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(None)?;
        match &self.extra {
            Extra::Backward {
                problem,
                dq_error,
                dk_error,
                dv_error,
                reproducible,
            } => {
                m.serialize_entry("version", &self.check)?;
                m.serialize_entry("problem", problem)?;
                m.serialize_entry("passed", &self.passed)?;
                m.serialize_entry("skipped", &self.skipped)?;
                m.serialize_entry("dq_error", dq_error)?;
                m.serialize_entry("dk_error", dk_error)?;
                m.serialize_entry("dv_error", dv_error)?;
                m.serialize_entry("bound", &self.bound)?;
                m.serialize_entry("nan_or_unwritten", &self.mismatches)?;
                m.serialize_entry("reproducible", reproducible)?;
                m.serialize_entry("seed", &self.seed)?;
                m.serialize_entry("message", &self.message)?;
                return m.end();
            }
            Extra::Decode {
                spec,
                splits,
                lse_max_error,
                append_mismatches,
            } => {
                m.serialize_entry("spec", spec)?;
                m.serialize_entry("passed", &self.passed)?;
                m.serialize_entry("splits", splits)?;
                m.serialize_entry("rel_error", &self.rel_error)?;
                m.serialize_entry("bound", &self.bound)?;
                m.serialize_entry("lse_max_error", lse_max_error)?;
                m.serialize_entry("nan_or_unwritten", &self.mismatches)?;
                m.serialize_entry("append_mismatches", append_mismatches)?;
                m.serialize_entry("seed", &self.seed)?;
                m.serialize_entry("message", &self.message)?;
                return m.end();
            }
            Extra::Varlen { lse_max_error } => {
                m.serialize_entry("problem", &self.label)?;
                m.serialize_entry("passed", &self.passed)?;
                m.serialize_entry("skipped", &self.skipped)?;
                m.serialize_entry("rel_error", &self.rel_error)?;
                m.serialize_entry("bound", &self.bound)?;
                m.serialize_entry("lse_max_error", lse_max_error)?;
                m.serialize_entry("nan_or_unwritten", &self.mismatches)?;
                m.serialize_entry("seed", &self.seed)?;
                m.serialize_entry("message", &self.message)?;
                return m.end();
            }
            _ => {}
        }
        if let Extra::Layer {
            route,
            near_ties,
            h_error,
            h_bound,
        } = &self.extra
        {
            m.serialize_entry("problem", &self.label)?;
            m.serialize_entry("passed", &self.passed)?;
            m.serialize_entry("skipped", &self.skipped)?;
            m.serialize_entry("route", route)?;
            m.serialize_entry("near_ties", near_ties)?;
            m.serialize_entry("h_error", h_error)?;
            m.serialize_entry("h_bound", h_bound)?;
            m.serialize_entry("rel_error", &self.rel_error)?;
            m.serialize_entry("bound", &self.bound)?;
            m.serialize_entry("nan_or_unwritten", &self.mismatches)?;
            m.serialize_entry("tokens_checked", &self.rows_checked)?;
            m.serialize_entry("seed", &self.seed)?;
            m.serialize_entry("message", &self.message)?;
            return m.end();
        }
        if let Extra::Pointwise { variant } = &self.extra {
            m.serialize_entry("problem", &self.label)?;
            m.serialize_entry("variant", variant)?;
            m.serialize_entry("passed", &self.passed)?;
            m.serialize_entry("worst", &self.rel_error)?;
            m.serialize_entry("nan_or_unwritten", &self.mismatches)?;
            m.serialize_entry("written_outside", &self.written_outside)?;
            m.serialize_entry("seed", &self.seed)?;
            m.serialize_entry("message", &self.message)?;
            return m.end();
        }
        let kernel = !matches!(self.extra, Extra::Fp4 | Extra::Fp8 { .. });
        if kernel {
            m.serialize_entry("version", &self.check)?;
        } else {
            m.serialize_entry("check", &self.check)?;
        }
        match &self.extra {
            Extra::Gemm(p) => m.serialize_entry("problem", p)?,
            Extra::Attention { problem, .. } => m.serialize_entry("problem", problem)?,
            Extra::Moe { mode } => {
                m.serialize_entry("problem", &self.label)?;
                m.serialize_entry("mode", mode)?;
            }
            Extra::Fp4 | Extra::Fp8 { .. } => m.serialize_entry("case", &self.label)?,
            Extra::Layer { .. }
            | Extra::Pointwise { .. }
            | Extra::Backward { .. }
            | Extra::Decode { .. }
            | Extra::Varlen { .. } => {}
        }
        m.serialize_entry("passed", &self.passed)?;
        match &self.extra {
            Extra::Fp4 => {
                m.serialize_entry("mismatches", &self.mismatches)?;
                m.serialize_entry("rel_error", &self.rel_error)?;
                m.serialize_entry("bound", &self.bound)?;
            }
            Extra::Fp8 {
                rel_error_rounded,
                cancellation,
            } => {
                m.serialize_entry("skipped", &self.skipped)?;
                m.serialize_entry("rel_error", &self.rel_error)?;
                m.serialize_entry("rel_error_rounded", rel_error_rounded)?;
                m.serialize_entry("bound", &self.bound)?;
                m.serialize_entry("cancellation", cancellation)?;
                m.serialize_entry("mismatches", &self.mismatches)?;
                m.serialize_entry("written_outside", &self.written_outside)?;
                m.serialize_entry("rows_checked", &self.rows_checked)?;
            }
            Extra::Gemm(_)
            | Extra::Attention { .. }
            | Extra::Moe { .. }
            | Extra::Layer { .. }
            | Extra::Pointwise { .. }
            | Extra::Backward { .. }
            | Extra::Decode { .. }
            | Extra::Varlen { .. } => {
                m.serialize_entry("skipped", &self.skipped)?;
                m.serialize_entry("rel_error", &self.rel_error)?;
                m.serialize_entry("bound", &self.bound)?;
                if let Extra::Attention { lse_max_error, .. } = &self.extra {
                    m.serialize_entry("lse_max_error", lse_max_error)?;
                }
                m.serialize_entry("nan_or_unwritten", &self.mismatches)?;
                if !matches!(self.extra, Extra::Attention { .. }) {
                    m.serialize_entry("written_outside", &self.written_outside)?;
                }
                m.serialize_entry("rows_checked", &self.rows_checked)?;
            }
        }
        m.serialize_entry("seed", &self.seed)?;
        m.serialize_entry("message", &self.message)?;
        m.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::{DType, Layout};

    fn keys(o: &Outcome) -> Vec<String> {
        // serde_json's map keeps insertion order (preserve_order) or sorts; compare as written.
        let text = serde_json::to_string(o).unwrap();
        let mut out = Vec::new();
        let mut rest = text.as_str();
        while let Some(i) = rest.find("\":") {
            let start = rest[..i].rfind('"').unwrap();
            let before = rest[..start].trim_end();
            if before.ends_with('{') || before.ends_with(',') {
                out.push(rest[start + 1..i].to_string());
            }
            rest = &rest[i + 2..];
        }
        out
    }

    /// Each family writes the keys its own outcome type wrote, in the same order (nested problem
    /// keys aside).
    #[test]
    fn every_family_keeps_its_json_keys() {
        let g = GemmProblem::new(3, 5, 7, Layout::RC, DType::Bf16, DType::Bf16);
        let gemm = Outcome::new("v", g.label(), 1, 4e-3, Extra::Gemm(g));
        let top = |o: &Outcome| -> Vec<String> {
            let v = serde_json::to_value(o).unwrap();
            let ks = keys(o);
            ks.into_iter()
                .filter(|k| v.get(k).is_some())
                .collect::<Vec<_>>()
        };
        let want = |s: &str| -> Vec<String> { s.split(' ').map(String::from).collect() };
        assert_eq!(
            top(&gemm),
            want("version problem passed skipped rel_error bound nan_or_unwritten written_outside rows_checked seed message")
        );
        let p = AttentionProblem::new(1, 2, 3, 64);
        let attn = Outcome::new(
            "v",
            p.label(),
            1,
            1e-2,
            Extra::Attention {
                problem: p,
                lse_max_error: 0.0,
            },
        );
        assert_eq!(
            top(&attn),
            want("version problem passed skipped rel_error bound lse_max_error nan_or_unwritten rows_checked seed message")
        );
        let moe = Outcome::new("v", "E3".into(), 1, 1e-2, Extra::Moe { mode: Mode::Graph });
        assert_eq!(
            top(&moe),
            want("version problem mode passed skipped rel_error bound nan_or_unwritten written_outside rows_checked seed message")
        );
        let fp4 = Outcome::new("quantize", "c".into(), 1, f64::NAN, Extra::Fp4);
        assert_eq!(
            top(&fp4),
            want("check case passed mismatches rel_error bound seed message")
        );
        let fp8 = Outcome::new("gemm", "c".into(), 1, f64::NAN, Extra::FP8);
        assert_eq!(
            top(&fp8),
            want("check case passed skipped rel_error rel_error_rounded bound cancellation mismatches written_outside rows_checked seed message")
        );
        let layer = Outcome::new(
            "moe_layer",
            "t".into(),
            1,
            1e-2,
            Extra::Layer {
                route: "ok".into(),
                near_ties: 0,
                h_error: 0.0,
                h_bound: 4e-3,
            },
        );
        assert_eq!(
            top(&layer),
            want("problem passed skipped route near_ties h_error h_bound rel_error bound nan_or_unwritten tokens_checked seed message")
        );
        let bwd = BackwardProblem::new(p, true);
        let backward = super::super::attention::backward_verify::blank("v", &bwd, 1);
        assert_eq!(
            top(&backward),
            want("version problem passed skipped dq_error dk_error dv_error bound nan_or_unwritten reproducible seed message")
        );
        let spec = super::super::attention::decode::decode_suite()[0];
        let decode = Outcome::new(
            "decode_paged",
            spec.label(),
            1,
            1e-2,
            Extra::Decode {
                spec,
                splits: 1,
                lse_max_error: 0.0,
                append_mismatches: 0,
            },
        );
        assert_eq!(
            top(&decode),
            want("spec passed splits rel_error bound lse_max_error nan_or_unwritten append_mismatches seed message")
        );
        let varlen = super::super::attention::varlen::blank("varlen".into(), 1, 1e-2);
        assert_eq!(
            top(&varlen),
            want("problem passed skipped rel_error bound lse_max_error nan_or_unwritten seed message")
        );
        let pointwise = Outcome::new(
            "pointwise",
            "rms".into(),
            1,
            1.0,
            Extra::Pointwise { variant: "16-byte" },
        );
        assert_eq!(
            top(&pointwise),
            want("problem variant passed worst nan_or_unwritten written_outside seed message")
        );
    }
}
