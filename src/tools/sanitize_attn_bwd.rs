//! The attention backward's sanitizer runs: `kiln attn verify --backward --version V` of small
//! problems that reach each version's paths, at every head dim it takes: a ragged GQA grid, the
//! deterministic mode's ordered adds (at d256 the split last wave of `bwd_fa3_d256_w2_cols2t`),
//! and a causal deterministic grid.

use super::sanitize::Case;
use crate::device::DeviceInfo;
use crate::ops::attention::{AttentionProblem, HEAD_DIMS};
use crate::ops::attention_backward::{AttentionBackwardKernel, BackwardProblem};
use crate::ops::registry::Registry;

/// A small backward problem: what it reaches, batch, query and key/value heads, Sq, Skv, causal,
/// deterministic. Sq 65 and Skv 200 leave a ragged query block and key block at every tile; 8 key
/// blocks of 64 at d256 are one partial wave, split in two parts under the deterministic default.
pub struct Small {
    pub what: &'static str,
    pub shape: [usize; 5],
    pub causal: bool,
    pub deterministic: bool,
}

pub const PROBLEMS: &[Small] = &[
    Small {
        what: "GQA 2/1 Sq 65 Skv 200",
        shape: [1, 2, 1, 65, 200],
        causal: false,
        deterministic: false,
    },
    Small {
        what: "GQA 2/1 Sq 65 Skv 200, deterministic",
        shape: [1, 2, 1, 65, 200],
        causal: false,
        deterministic: true,
    },
    Small {
        what: "causal S130, deterministic",
        shape: [1, 2, 2, 130, 130],
        causal: true,
        deterministic: true,
    },
];

impl Small {
    /// The problem at head dim `d`.
    pub fn problem(&self, d: usize) -> BackwardProblem {
        let [b, hq, hkv, sq, skv] = self.shape;
        let mut a = AttentionProblem::new(b, hq, sq, d);
        a.heads_kv = hkv;
        a.seqlen_kv = skv;
        a.causal = self.causal;
        BackwardProblem::new(a, self.deterministic)
    }

    /// `attn verify`'s arguments for it at head dim `d`.
    pub fn args(&self, d: usize) -> Vec<String> {
        let [b, hq, hkv, sq, skv] = self.shape;
        let mut v: Vec<String> = [
            "--batch",
            &b.to_string(),
            "--heads",
            &hq.to_string(),
            "--kv-heads",
            &hkv.to_string(),
            "--seqlen-q",
            &sq.to_string(),
            "--seqlen-kv",
            &skv.to_string(),
            "--dim",
            &d.to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if self.causal {
            v.push("--causal".into());
        }
        if self.deterministic {
            v.push("--deterministic".into());
        }
        v
    }
}

/// A version's runs: (head dim, index into [`PROBLEMS`]).
pub type Runs = Vec<(usize, usize)>;

/// The problems above at each head dim that `k` takes on `dev`.
pub fn runs_of(k: &dyn AttentionBackwardKernel, dev: &DeviceInfo) -> Runs {
    let mut v = Vec::new();
    for d in HEAD_DIMS {
        for (i, s) in PROBLEMS.iter().enumerate() {
            if k.supports(&s.problem(d), dev).is_ok() {
                v.push((d, i));
            }
        }
    }
    v
}

/// The versions the dispatch runs for the problems above at each head dim on `dev`, each with
/// the runs it is picked for: what a plain `kiln sanitize` checks of the backward.
pub fn dispatched(reg: &Registry, dev: &DeviceInfo) -> Vec<(String, Runs)> {
    let mut v: Vec<(String, Runs)> = Vec::new();
    for d in HEAD_DIMS {
        for (i, s) in PROBLEMS.iter().enumerate() {
            let Ok(k) = reg.select_attention_backward(&s.problem(d), dev, None) else {
                continue;
            };
            match v.iter_mut().find(|(n, _)| n == k.name()) {
                Some((_, runs)) => runs.push((d, i)),
                None => v.push((k.name().to_string(), vec![(d, i)])),
            }
        }
    }
    v
}

/// Every (tool, run) of `versions`.
pub fn backward_cases(versions: &[(String, Runs)], tools: &[String]) -> Vec<Case> {
    let mut cases = Vec::new();
    for tool in tools {
        for (version, runs) in versions {
            for &(d, i) in runs {
                let s = &PROBLEMS[i];
                let mut command: Vec<String> = ["attn", "verify", "--backward", "--version"]
                    .iter()
                    .map(|s| s.to_string())
                    .collect();
                command.push(version.clone());
                command.extend(s.args(d));
                cases.push(Case {
                    command,
                    ..Case::command(version, tool, &format!("d{d} {}", s.what))
                });
            }
        }
    }
    cases
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_run_is_a_sanitizer_run_of_a_backward_verify_the_version_takes() {
        let reg = Registry::default();
        let h100 = DeviceInfo::h100_sxm();
        let named = |n: &str| {
            let k = reg.attention_backward_version(n).unwrap();
            (n.to_string(), runs_of(k, &h100))
        };
        // the d256 deterministic default takes d256 only; the d64/d128 writers not d256; the
        // d256 persistent kernel the non-deterministic problem only
        let versions = [
            named("bwd_fa3_d256_w2_cols2t"),
            named("bwd_fa3_ordered_w2"),
            named("bwd_fa3_d256_persist"),
        ];
        assert!(versions[0].1.iter().all(|&(d, _)| d == 256));
        assert_eq!(versions[0].1.len(), PROBLEMS.len());
        assert!(versions[1].1.iter().all(|&(d, _)| d != 256));
        assert_eq!(versions[1].1.len(), 2 * PROBLEMS.len());
        assert_eq!(versions[2].1, [(256, 0)]);
        let tools = ["memcheck".to_string(), "racecheck".to_string()];
        let cases = backward_cases(&versions, &tools);
        assert_eq!(cases.len(), 2 * (3 + 6 + 1));
        for c in &cases {
            let a = c.args(std::path::Path::new("kiln"));
            let at = a.iter().position(|s| s == "kiln").unwrap();
            assert_eq!(
                a[at + 1..at + 6],
                ["--no-store", "--json", "attn", "verify", "--backward"]
            );
            let v = a.iter().position(|s| s == "--version").unwrap();
            assert_eq!(a[v + 1], c.version);
            assert!(a.contains(&"--dim".to_string()), "{a:?}");
            assert!(c.problem().starts_with('d'), "{}", c.problem());
        }
        // a plain run checks what the dispatch runs, each where it is picked: the d256
        // deterministic default for the deterministic problems at d256, non-causal
        let picked = dispatched(&reg, &h100);
        let cols2t = picked
            .iter()
            .find(|(n, _)| n == "bwd_fa3_d256_w2_cols2t")
            .unwrap();
        assert_eq!(cols2t.1, [(256, 1)]);
        let n: usize = picked.iter().map(|(_, r)| r.len()).sum();
        assert_eq!(n, 3 * PROBLEMS.len());
    }
}
