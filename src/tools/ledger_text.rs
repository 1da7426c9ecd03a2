//! The ledger's text: what a user types into `kiln exp new` (arms `VERSION[:k=v,...]`, a
//! prediction `+8%` or `1.5x`, a gate `abort if < 3%`), parsed and checked, and the iteration log
//! and the table of eliminated ideas that `kiln exp log` and `kiln report` render.

use std::fmt;
use std::str::FromStr;

use super::ledger::Experiment;
use crate::error::{Error, Result};
use crate::report::grid::Grid;

/// One side of an experiment: a kernel version and the parameters it is run with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arm {
    pub version: String,
    pub params: Vec<(String, String)>,
}

impl FromStr for Arm {
    type Err = Error;
    fn from_str(s: &str) -> Result<Arm> {
        let (version, rest) = s.split_once(':').unwrap_or((s, ""));
        let version = version.trim();
        if version.is_empty() {
            return Err(Error::invalid(format!(
                "`{s}` names no version; write VERSION or VERSION:k=v,..."
            )));
        }
        let params = rest
            .split(',')
            .filter(|p| !p.trim().is_empty())
            .map(|p| match p.split_once('=') {
                Some((k, v)) if !k.trim().is_empty() => {
                    Ok((k.trim().to_string(), v.trim().to_string()))
                }
                _ => Err(Error::invalid(format!(
                    "parameter `{p}` in `{s}` is not k=v"
                ))),
            })
            .collect::<Result<_>>()?;
        Ok(Arm {
            version: version.to_string(),
            params,
        })
    }
}

impl fmt::Display for Arm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.version)?;
        let p: Vec<String> = self
            .params
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        if !p.is_empty() {
            write!(f, ":{}", p.join(","))?;
        }
        Ok(())
    }
}

/// A predicted speed-up of the candidate over the baseline, in %.
#[derive(Debug, Clone, PartialEq)]
pub struct Prediction {
    pub text: String,
    pub pct: f64,
}

impl FromStr for Prediction {
    type Err = Error;
    /// `+8%`, `-5%`, `8%` (a speed-up in %) or `1.5x` (a ratio of speeds).
    fn from_str(s: &str) -> Result<Prediction> {
        let t = s.trim();
        let bad = || {
            Error::invalid(format!(
                "prediction `{s}`: write a change in percent (`+8%`, `-5%`) or a ratio (`1.5x`)"
            ))
        };
        let pct = if let Some(x) = t.strip_suffix('%') {
            x.trim().parse::<f64>().map_err(|_| bad())?
        } else if let Some(x) = t.strip_suffix(['x', 'X']) {
            let r = x.trim().parse::<f64>().map_err(|_| bad())?;
            if r <= 0.0 {
                return Err(bad());
            }
            100.0 * (r - 1.0)
        } else {
            return Err(bad());
        };
        if !pct.is_finite() {
            return Err(bad());
        }
        Ok(Prediction {
            text: t.to_string(),
            pct,
        })
    }
}

/// A gate: `abort if < 3%` (also `<=`, `>`, `>=`): the measured speed-up that stops the idea.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    pub text: String,
    pub op: String,
    pub pct: f64,
}

impl Gate {
    /// Whether a measured change of `change_pct` passes (does not trigger the abort).
    pub fn passes(&self, change_pct: f64) -> bool {
        let abort = match self.op.as_str() {
            "<" => change_pct < self.pct,
            "<=" => change_pct <= self.pct,
            ">" => change_pct > self.pct,
            _ => change_pct >= self.pct,
        };
        !abort
    }
}

impl FromStr for Gate {
    type Err = Error;
    fn from_str(s: &str) -> Result<Gate> {
        let bad = || {
            Error::invalid(format!(
                "gate `{s}`: write it as `abort if < 3%` (or <=, >, >=)"
            ))
        };
        let lower = s.trim().to_ascii_lowercase();
        let rest = lower.strip_prefix("abort if").ok_or_else(bad)?.trim();
        let op = ["<=", ">=", "<", ">"]
            .into_iter()
            .find(|o| rest.starts_with(o))
            .ok_or_else(bad)?;
        let num = rest[op.len()..]
            .trim()
            .strip_suffix('%')
            .ok_or_else(bad)?
            .trim();
        let pct: f64 = num.parse().map_err(|_| bad())?;
        Ok(Gate {
            text: s.trim().to_string(),
            op: op.to_string(),
            pct,
        })
    }
}

fn signed(pct: f64) -> String {
    format!("{pct:+.1}%")
}

/// What was measured, in one cell: `+4.2% (noise 0.8%)`, or why there is nothing.
pub fn measured_cell(e: &Experiment) -> String {
    match &e.result {
        Some(o) => format!(
            "{} (noise {:.1}%{})",
            signed(o.change_pct),
            o.noise_pct,
            if o.within_noise() {
                ", within noise"
            } else {
                ""
            }
        ),
        None => "not measured".into(),
    }
}

/// The gate and whether the measurement passed it.
pub fn gate_cell(e: &Experiment) -> String {
    match (
        e.gate.is_empty(),
        e.result.as_ref().and_then(|o| o.gate_passed),
    ) {
        (true, _) => "-".into(),
        (false, Some(true)) => format!("{}: passed", e.gate),
        (false, Some(false)) => format!("{}: ABORT", e.gate),
        (false, None) => format!("{}: not measured", e.gate),
    }
}

/// The iteration log: one row per experiment, oldest first.
pub fn iteration_log(exps: &[Experiment]) -> Grid {
    let mut t = Grid::new(&[
        "id",
        "title",
        "baseline -> candidate",
        "problem",
        "predicted",
        "measured",
        "gate",
        "verdict",
    ]);
    for e in exps {
        t.row(&[
            e.id.to_string(),
            e.title.clone(),
            format!("{} -> {}", e.baseline, e.candidate),
            e.problem.label(),
            e.prediction.clone(),
            measured_cell(e),
            gate_cell(e),
            e.verdict.clone().unwrap_or_else(|| "open".into()),
        ]);
    }
    t
}

/// The graveyard: every eliminated idea, its promise against its reality.
pub fn eliminated(exps: &[Experiment]) -> Grid {
    let mut t = Grid::new(&["id", "idea", "promise", "reality", "note"]);
    for e in exps
        .iter()
        .filter(|e| e.verdict.as_deref() == Some("eliminated"))
    {
        t.row(&[
            e.id.to_string(),
            e.title.clone(),
            e.prediction.clone(),
            measured_cell(e),
            e.note.clone().unwrap_or_default(),
        ]);
    }
    t
}

/// Both tables as a markdown section (headings level `h`).
pub fn markdown(exps: &[Experiment], h: &str) -> String {
    let mut s = format!("{h} Iteration log\n\n");
    if exps.is_empty() {
        s.push_str("No experiments yet (`kiln exp new`).\n");
        return s;
    }
    s.push_str(&iteration_log(exps).markdown());
    s.push_str(&format!("\n{h} Eliminated ideas\n\n"));
    let g = eliminated(exps);
    s.push_str(&if g.is_empty() {
        "None so far.\n".to_string()
    } else {
        g.markdown()
    });
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arms_parse_version_and_params() {
        let a: Arm = "wgmma_tma_ws:stages=4,bn=256".parse().unwrap();
        assert_eq!(a.version, "wgmma_tma_ws");
        assert_eq!(
            a.params,
            vec![("stages".into(), "4".into()), ("bn".into(), "256".into())]
        );
        assert_eq!(a.to_string(), "wgmma_tma_ws:stages=4,bn=256");
        assert_eq!(
            "simt_tiled".parse::<Arm>().unwrap().to_string(),
            "simt_tiled"
        );
        assert!(":x=1".parse::<Arm>().is_err());
        assert!("v:x".parse::<Arm>().is_err());
    }

    #[test]
    fn predictions_in_percent_or_ratio() {
        assert_eq!("+8%".parse::<Prediction>().unwrap().pct, 8.0);
        assert_eq!("-5 %".parse::<Prediction>().unwrap().pct, -5.0);
        assert!(("1.5x".parse::<Prediction>().unwrap().pct - 50.0).abs() < 1e-9);
        for bad in ["8", "fast", "0x", "%"] {
            assert!(bad.parse::<Prediction>().is_err(), "{bad}");
        }
    }

    #[test]
    fn gates_parse_and_judge() {
        let g: Gate = "abort if < 3%".parse().unwrap();
        assert_eq!((g.op.as_str(), g.pct), ("<", 3.0));
        assert!(g.passes(3.0) && g.passes(8.0));
        assert!(!g.passes(2.9) && !g.passes(-30.0));
        let g: Gate = "Abort if <= -1.5%".parse().unwrap();
        assert!(!g.passes(-1.5) && g.passes(-1.0));
        for bad in [
            "abort when < 3%",
            "abort if 3%",
            "abort if < 3",
            "abort if < x%",
        ] {
            assert!(bad.parse::<Gate>().is_err(), "{bad}");
        }
    }
}
