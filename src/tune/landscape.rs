//! A landscape: every config of a space with its measured outcome, as JSON. An exhaustive run
//! writes one; `kiln tune-replay` runs the evolutionary search against it without a GPU.

use std::collections::HashSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::space::{Config, Param, ParamSpace};
use super::target::TuneProblem;
use super::Outcome;
use crate::device::DeviceInfo;
use crate::error::{Error, Result};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Landscape {
    pub version: String,
    pub problem: TuneProblem,
    pub device: Option<DeviceInfo>,
    /// The parameters, in the space's order (the rules are implied: the recorded configs).
    pub params: Vec<Param>,
    pub outcomes: Vec<Outcome>,
}

impl Landscape {
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(|e| Error::invalid(e.to_string()))?;
        std::fs::write(path, text).map_err(|source| Error::Io {
            what: "writing the landscape",
            path: path.to_path_buf(),
            source,
        })
    }

    pub fn load(path: &Path) -> Result<Landscape> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            what: "reading the landscape",
            path: path.to_path_buf(),
            source,
        })?;
        serde_json::from_str(&text)
            .map_err(|e| Error::invalid(format!("{} is not a landscape: {e}", path.display())))
    }

    /// (config, time) for every recorded config; failures are infinitely slow.
    pub fn points(&self) -> Vec<(Config, f64)> {
        self.outcomes
            .iter()
            .map(|o| (o.config.clone(), o.time()))
            .collect()
    }

    /// The space the landscape covers: its parameters, restricted to the recorded configs.
    pub fn space(&self) -> ParamSpace {
        let known: HashSet<Config> = self.outcomes.iter().map(|o| o.config.clone()).collect();
        ParamSpace {
            params: self.params.clone(),
            rules: Vec::new(),
        }
        .rule("recorded in the landscape", move |c| known.contains(c))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::{DType, GemmProblem, Layout};
    use crate::tune::Status;

    #[test]
    fn a_landscape_round_trips_and_bounds_its_space() {
        let mut fast = Outcome::new(Config::new(&[("A", 1), ("B", 2)]), Status::Ok, "");
        fast.median_ms = Some(1.0);
        let l = Landscape {
            version: "v".into(),
            problem: GemmProblem::new(8, 8, 8, Layout::RC, DType::Bf16, DType::Bf16).into(),
            device: None,
            params: vec![
                Param {
                    name: "A".into(),
                    values: vec![1, 2],
                    launch: false,
                },
                Param {
                    name: "B".into(),
                    values: vec![2],
                    launch: false,
                },
            ],
            outcomes: vec![
                fast,
                Outcome::new(Config::new(&[("A", 2), ("B", 2)]), Status::Crash, "x"),
            ],
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("l.json");
        l.save(&path).unwrap();
        let back = Landscape::load(&path).unwrap();
        assert_eq!(back.points()[0].1, 1.0);
        assert_eq!(back.points()[1].1, f64::INFINITY);
        assert_eq!(back.space().enumerate().len(), 2);
    }
}
