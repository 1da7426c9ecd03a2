//! What the attention backward's dispatch would run for one problem and why (`kiln plan --op
//! attn-backward`, no GPU needed): every version's verdict, the one picked and the rule that
//! picked it, its launch as the version describes it, and the memory the call needs.

use serde::Serialize;

use crate::device::DeviceInfo;
use crate::error::Result;
use crate::ops::attention_backward::{knobs, BackwardProblem};
use crate::ops::registry::Registry;
use crate::ops::tuned::TunedTable;
use crate::overrides::AttentionOverrides;

/// One registered version's verdict on the problem.
#[derive(Debug, Clone, Serialize)]
pub struct Candidate {
    pub version: String,
    pub rung: u32,
    /// Whether the dispatch would take it for this problem (its default rule).
    pub by_default: bool,
    /// Why it refuses the problem on this device, if it does.
    pub refused: Option<String>,
}

/// The plan.
#[derive(Debug, Clone, Serialize)]
pub struct BackwardPlan {
    pub problem: String,
    pub version: String,
    pub rung: u32,
    pub summary: String,
    pub why: String,
    /// The launch, a line each (`AttentionBackwardKernel::launch_plan`), under the knobs it
    /// would run with.
    pub launch: Vec<String>,
    /// The tuning cache's knobs the launch takes (where the environment sets none).
    pub tuned_knobs: Option<String>,
    /// Every version, highest rung first.
    pub candidates: Vec<Candidate>,
    /// Q, K, V, O, dO, LSE and the three gradients.
    pub operand_bytes: u64,
    /// D, the fp32 dQ accumulator and the deterministic counters.
    pub workspace_bytes: u64,
    /// The device's memory, and whether operands and workspace fit in it.
    pub device_bytes: u64,
    pub fits: bool,
}

/// The plan of `p` on `dev` under the environment's knobs `o` and the tuned configs `tuned`:
/// `requested` (`--version`) if given, else the dispatch's choice
/// (`Registry::select_attention_backward_tuned`), refusing as the dispatch would.
pub fn plan_backward(
    reg: &Registry,
    p: &BackwardProblem,
    dev: &DeviceInfo,
    requested: Option<&str>,
    o: &AttentionOverrides,
    tuned: &TunedTable,
) -> Result<BackwardPlan> {
    let k = reg.select_attention_backward_tuned(p, dev, tuned, requested)?;
    let untuned = reg.select_attention_backward(p, dev, requested)?;
    let (o, tuned_knobs) = knobs::resolved(o, tuned, dev, k.name(), p);
    let mut candidates: Vec<Candidate> = reg
        .attention_backward()
        .iter()
        .rev()
        .map(|c| Candidate {
            version: c.name().to_string(),
            rung: c.rung(),
            by_default: c.by_default_for(p),
            refused: c.supports(p, dev).err(),
        })
        .collect();
    candidates.sort_by_key(|c| std::cmp::Reverse(c.rung));
    let why = if requested.is_some() {
        "asked for by name (--version)".to_string()
    } else if k.name() != untuned.name() {
        format!(
            "tuned faster for the problem's class than the rule's pick, {}",
            untuned.name()
        )
    } else {
        "the highest rung among the versions whose default rule takes the problem and that \
         support it"
            .to_string()
    };
    let a = &p.attn;
    let operand_bytes = p.operand_bytes();
    let sems = if p.deterministic {
        // (two counters a query block at most: the d256 column parts)
        2 * (a.batch * a.heads_q * a.seqlen_q.div_ceil(64)) as u64 * 4
    } else {
        0
    };
    let workspace_bytes = p.device_bytes() - operand_bytes + sems;
    Ok(BackwardPlan {
        problem: p.label(),
        version: k.name().to_string(),
        rung: k.rung(),
        summary: k.summary().to_string(),
        why,
        launch: k.launch_plan(p, dev, &o),
        tuned_knobs: tuned_knobs.map(|c| c.label()),
        candidates,
        operand_bytes,
        workspace_bytes,
        device_bytes: dev.total_mem_bytes,
        fits: operand_bytes + workspace_bytes <= dev.total_mem_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;

    fn problem(d: usize, s: usize, causal: bool, det: bool) -> BackwardProblem {
        let mut a = AttentionProblem::new(1, 16, s, d);
        a.causal = causal;
        BackwardProblem::new(a, det)
    }

    #[test]
    fn the_plan_names_the_dispatchs_choice_and_its_launch() {
        let reg = Registry::default();
        let mut h200 = DeviceInfo::h100_sxm();
        h200.total_mem_bytes = 141 << 30;
        let o = AttentionOverrides::default();
        let none = TunedTable::empty();
        // the d256 deterministic default splits B1 H16 S16384's 4 blocks of a 32nd wave in 16
        let p = plan_backward(
            &reg,
            &problem(256, 16384, false, true),
            &h200,
            None,
            &o,
            &none,
        )
        .unwrap();
        assert_eq!(p.version, "bwd_fa3_d256_w2_cols2t");
        assert!(
            p.launch[0].contains("4096 key blocks of 64 keys"),
            "{:?}",
            p.launch
        );
        assert!(
            p.launch[0].contains("31 whole waves and a last wave of 4"),
            "{:?}",
            p.launch
        );
        assert!(
            p.launch
                .iter()
                .any(|l| l.contains("4 key blocks in 16 parts each")),
            "{:?}",
            p.launch
        );
        assert!(p.fits);
        // every version has a verdict; the one picked takes the problem by default
        let me = p
            .candidates
            .iter()
            .find(|c| c.version == p.version)
            .unwrap();
        assert!(me.by_default && me.refused.is_none());
        assert!(p
            .candidates
            .iter()
            .any(|c| c.version == "bwd_fa3_d256_persist" && c.refused.is_some()));
        // the knob turns the split off
        let off = AttentionOverrides {
            bwd_tail: Some(0),
            ..AttentionOverrides::default()
        };
        let q = plan_backward(
            &reg,
            &problem(256, 16384, false, true),
            &h200,
            None,
            &off,
            &none,
        )
        .unwrap();
        assert!(
            q.launch.iter().any(|l| l.starts_with("no split")),
            "{:?}",
            q.launch
        );
        // the non-deterministic default at d256 is persistent; d128 splits its 16th wave in 3
        let r = plan_backward(
            &reg,
            &problem(256, 16384, false, false),
            &h200,
            None,
            &o,
            &none,
        )
        .unwrap();
        assert_eq!(r.version, "bwd_fa3_d256_persist");
        assert!(
            r.launch[0].contains("132 persistent CTAs"),
            "{:?}",
            r.launch
        );
        let mut d128 = problem(128, 8192, false, false);
        d128.attn.batch = 2;
        let t = plan_backward(&reg, &d128, &h200, None, &o, &none).unwrap();
        assert_eq!(t.version, "bwd_fa3_tail");
        assert!(
            t.launch
                .iter()
                .any(|l| l.contains("68 key blocks in 3 parts each")),
            "{:?}",
            t.launch
        );
        // asked for by name, or refused as the dispatch refuses
        let n = plan_backward(
            &reg,
            &problem(256, 4096, false, true),
            &h200,
            Some("bwd_fa3_d256_w2_cols2"),
            &o,
            &none,
        )
        .unwrap();
        assert!(n.why.contains("by name"));
        assert!(plan_backward(
            &reg,
            &problem(128, 4096, false, true),
            &h200,
            Some("bwd_fa3_d256_w2_cols2t"),
            &o,
            &none
        )
        .is_err());
        // too big for the device: said, not refused
        let mut small = h200.clone();
        small.total_mem_bytes = 1 << 30;
        assert!(
            !plan_backward(
                &reg,
                &problem(256, 16384, false, true),
                &small,
                None,
                &o,
                &none
            )
            .unwrap()
            .fits
        );
    }

    #[test]
    fn tuned_knobs_and_a_version_tuned_faster_change_the_plan() {
        use crate::ops::space::Config;
        use crate::ops::tuned::TuneKey;
        let reg = Registry::default();
        let h200 = DeviceInfo::h100_sxm();
        let o = AttentionOverrides::default();
        let mut d128 = problem(128, 8192, false, false);
        d128.attn.batch = 2;
        let mut t = TunedTable::empty();
        let key = |v: &str| TuneKey::attention_backward(&h200, v, &d128);
        t.insert(
            key("bwd_fa3_tail"),
            Config::parse("TAIL=0").unwrap(),
            Some(500.0),
        );
        let plan = plan_backward(&reg, &d128, &h200, None, &o, &t).unwrap();
        assert_eq!(plan.version, "bwd_fa3_tail");
        assert_eq!(plan.tuned_knobs.as_deref(), Some("TAIL=0"));
        assert!(
            plan.launch.iter().any(|l| l.starts_with("no split")),
            "{:?}",
            plan.launch
        );
        // the environment's knob wins over the tuned one
        let env = AttentionOverrides {
            bwd_tail: Some(3),
            ..o
        };
        let plan = plan_backward(&reg, &d128, &h200, None, &env, &t).unwrap();
        assert_eq!(plan.tuned_knobs, None);
        assert!(
            plan.launch.iter().any(|l| l.contains("in 3 parts")),
            "{:?}",
            plan.launch
        );
        // another version tuned faster for the class runs instead, and the plan says why
        t.insert(
            key("bwd_fa3_lookahead"),
            Config::parse("NO_AHEAD=0,TAIL=0").unwrap(),
            Some(520.0),
        );
        let plan = plan_backward(&reg, &d128, &h200, None, &o, &t).unwrap();
        assert_eq!(plan.version, "bwd_fa3_lookahead");
        assert!(
            plan.why.contains("tuned faster") && plan.why.contains("bwd_fa3_tail"),
            "{}",
            plan.why
        );
        // asked for by name: the name wins
        let plan = plan_backward(&reg, &d128, &h200, Some("bwd_fa3_tail"), &o, &t).unwrap();
        assert_eq!(plan.version, "bwd_fa3_tail");
    }
}
