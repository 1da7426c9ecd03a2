//! The backward's run-time knobs as a tuning space: each version names the `KILN_BWD_*` knobs its
//! launch reads on a problem ([`Knob`], with the value it takes unset), and a config of them is
//! laid over the environment's for a tuned or pinned launch ([`apply`], [`resolve`]).

use super::BackwardProblem;
use crate::device::{Context, DeviceInfo};
use crate::ops::space::{Config, ParamSpace};
use crate::ops::tuned::TunedTable;
use crate::overrides::AttentionOverrides;

/// One `KILN_BWD_*` knob that a tuning config may set (named as in the config: `TAIL=4`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Knob {
    /// `KILN_BWD_TAIL`: the last partial wave's split (0 off, 1 the model's parts, N parts).
    Tail,
    /// `KILN_BWD_LPT`: the causal key blocks longest walk first.
    Lpt,
    /// `KILN_BWD_DET_WRITERS`: the deterministic dQ writer warps.
    DetWriters,
    /// `KILN_BWD_DET_LPT`: the deterministic causal launch longest walk first.
    DetLpt,
    /// `KILN_BWD_EXP_POLY`: exponentials of every 8 on the FMA pipe.
    ExpPoly,
    /// `KILN_BWD_D256_P16`: Pᵀ handed between the d256 warpgroups in 16-bit pairs.
    P16,
    /// `KILN_BWD_DQ_KEYS`: dQ split between warpgroups by keys.
    DqKeys,
    /// `KILN_BWD_PINGPONG`: the warpgroups take turns at Sᵀ and dPᵀ.
    Pingpong,
    /// `KILN_BWD_NO_AHEAD`: Sᵀ issued at each query block's top.
    NoAhead,
}

impl Knob {
    pub const ALL: [Knob; 9] = [
        Knob::Tail,
        Knob::Lpt,
        Knob::DetWriters,
        Knob::DetLpt,
        Knob::ExpPoly,
        Knob::P16,
        Knob::DqKeys,
        Knob::Pingpong,
        Knob::NoAhead,
    ];

    /// The parameter's name in a config.
    pub fn name(self) -> &'static str {
        match self {
            Knob::Tail => "TAIL",
            Knob::Lpt => "LPT",
            Knob::DetWriters => "DET_WRITERS",
            Knob::DetLpt => "DET_LPT",
            Knob::ExpPoly => "EXP_POLY",
            Knob::P16 => "P16",
            Knob::DqKeys => "DQ_KEYS",
            Knob::Pingpong => "PINGPONG",
            Knob::NoAhead => "NO_AHEAD",
        }
    }

    /// The values a tuning run times (the split's parts at the powers of two the model
    /// chooses between; 8 of 8 exponentials on the FMA pipe measured slower than 4, ledger B17).
    pub fn values(self) -> &'static [i64] {
        match self {
            Knob::Tail => &[0, 1, 2, 4, 8, 16],
            Knob::DetWriters => &[1, 2],
            Knob::ExpPoly => &[0, 2, 4],
            _ => &[0, 1],
        }
    }

    /// Sets the knob in `o` to `v` (a value of [`Knob::values`]).
    pub fn set(self, o: &mut AttentionOverrides, v: i64) {
        let n = v.max(0) as u32;
        match self {
            Knob::Tail => o.bwd_tail = Some(n),
            Knob::Lpt => o.bwd_lpt = Some(v != 0),
            Knob::DetWriters => o.bwd_det_writers = n.max(1),
            Knob::DetLpt => o.bwd_det_lpt = v != 0,
            Knob::ExpPoly => o.bwd_exp_poly = Some(n),
            Knob::P16 => o.bwd_d256_p16 = v != 0,
            Knob::DqKeys => o.bwd_dq_keys = v != 0,
            Knob::Pingpong => o.bwd_pingpong = v != 0,
            Knob::NoAhead => o.bwd_no_ahead = v != 0,
        }
    }

    /// Whether `o` gives the knob a value of its own (the environment set it).
    pub fn is_set(self, o: &AttentionOverrides) -> bool {
        let n = &AttentionOverrides::NONE;
        match self {
            Knob::Tail => o.bwd_tail != n.bwd_tail,
            Knob::Lpt => o.bwd_lpt != n.bwd_lpt,
            Knob::DetWriters => o.bwd_det_writers != n.bwd_det_writers,
            Knob::DetLpt => o.bwd_det_lpt != n.bwd_det_lpt,
            Knob::ExpPoly => o.bwd_exp_poly != n.bwd_exp_poly,
            Knob::P16 => o.bwd_d256_p16 != n.bwd_d256_p16,
            Knob::DqKeys => o.bwd_dq_keys != n.bwd_dq_keys,
            Knob::Pingpong => o.bwd_pingpong != n.bwd_pingpong,
            Knob::NoAhead => o.bwd_no_ahead != n.bwd_no_ahead,
        }
    }
}

/// The knobs a version's launch reads on a problem, each with the value it takes unset.
pub type Knobs = Vec<(Knob, i64)>;

/// The space of `knobs`: every combination (one empty config where a version reads none).
pub fn space(knobs: &Knobs) -> ParamSpace {
    knobs.iter().fold(ParamSpace::new(), |s, (k, _)| {
        s.launch_param(k.name(), k.values())
    })
}

/// The config an untuned launch runs: every knob at the value it takes unset.
pub fn baseline(knobs: &Knobs) -> Config {
    let mut c = Config::new(&[]);
    for (k, v) in knobs {
        c.set(k.name(), *v);
    }
    c
}

/// `base` with every knob `cfg` names set to its value (the others as `base` has them).
pub fn apply(base: &AttentionOverrides, cfg: &Config) -> AttentionOverrides {
    let mut o = *base;
    for k in Knob::ALL {
        if let Some(v) = cfg.get(k.name()) {
            k.set(&mut o, v);
        }
    }
    o
}

/// Whether `o` sets any backward knob that a config may set: such a run is an experiment and runs
/// exactly what the environment says, tuned configs aside.
pub fn environment_sets_any(o: &AttentionOverrides) -> bool {
    Knob::ALL.iter().any(|k| k.is_set(o))
}

/// The knobs a launch of `version` on `p` honours on `ctx`: the environment's when it sets any
/// backward knob, else the tuned config of (`version`, `p`'s class) laid over them, else the
/// environment's (the defaults).
pub fn resolve(ctx: &Context, version: &str, p: &BackwardProblem) -> AttentionOverrides {
    resolved(&ctx.overrides.attention, &ctx.tuned, &ctx.info, version, p).0
}

/// [`resolve`] from its parts: the environment's knobs `env`, the table `tuned`, the device
/// `dev`; with the tuned config applied, if one was.
pub fn resolved(
    env: &AttentionOverrides,
    tuned: &TunedTable,
    dev: &DeviceInfo,
    version: &str,
    p: &BackwardProblem,
) -> (AttentionOverrides, Option<Config>) {
    if environment_sets_any(env) {
        return (*env, None);
    }
    match tuned.attention_backward(dev, version, p) {
        Some(cfg) => (apply(env, &cfg), Some(cfg)),
        None => (*env, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_config_sets_the_knobs_it_names_and_leaves_the_rest() {
        let mut base = AttentionOverrides::NONE;
        base.bwd_varlen_compact = true;
        let cfg = Config::parse("TAIL=4,LPT=0,P16=1").unwrap();
        let o = apply(&base, &cfg);
        assert_eq!(o.bwd_tail, Some(4));
        assert_eq!(o.bwd_lpt, Some(false));
        assert!(o.bwd_d256_p16 && o.bwd_varlen_compact);
        assert_eq!(o.bwd_det_writers, 1);
        // every knob a config sets reads as set; NONE sets none
        for k in Knob::ALL {
            let mut o = AttentionOverrides::NONE;
            assert!(!k.is_set(&o), "{k:?}");
            let v = *k
                .values()
                .iter()
                .find(|&&v| {
                    let mut t = AttentionOverrides::NONE;
                    k.set(&mut t, v);
                    k.is_set(&t)
                })
                .unwrap_or_else(|| panic!("{k:?}: no value differs from unset"));
            k.set(&mut o, v);
            assert!(environment_sets_any(&o), "{k:?}");
        }
        assert!(!environment_sets_any(&base));
    }

    #[test]
    fn a_tuned_config_serves_runs_whose_environment_sets_no_knob() {
        use crate::ops::attention::AttentionProblem;
        use crate::ops::tuned::TuneKey;
        let dev = DeviceInfo::h100_sxm();
        let p = BackwardProblem::new(AttentionProblem::new(2, 16, 8192, 128), false);
        let mut t = TunedTable::empty();
        let cfg = Config::parse("TAIL=4").unwrap();
        t.insert(
            TuneKey::attention_backward(&dev, "bwd_fa3_tail", &p),
            cfg.clone(),
            Some(600.0),
        );
        let none = AttentionOverrides::NONE;
        let (o, used) = resolved(&none, &t, &dev, "bwd_fa3_tail", &p);
        assert_eq!((o.bwd_tail, used), (Some(4), Some(cfg)));
        // another version, or the deterministic mode: no entry
        assert_eq!(resolved(&none, &t, &dev, "bwd_fa3_lookahead", &p).1, None);
        let det = BackwardProblem::new(p.attn, true);
        assert_eq!(resolved(&none, &t, &dev, "bwd_fa3_tail", &det).0, none);
        // a knob in the environment: exactly the environment
        let mut env = none;
        env.bwd_lpt = Some(false);
        assert_eq!(resolved(&env, &t, &dev, "bwd_fa3_tail", &p), (env, None));
    }

    #[test]
    fn the_space_holds_every_combination_and_the_baseline_is_in_it() {
        let knobs: Knobs = vec![(Knob::Tail, 1), (Knob::P16, 0)];
        let s = space(&knobs);
        assert_eq!(s.enumerate().len(), 6 * 2);
        let b = baseline(&knobs);
        assert_eq!(b.label(), Config::parse("TAIL=1,P16=0").unwrap().label());
        assert!(s.is_valid(&b));
        // nothing to tune: one empty config, the baseline
        assert_eq!(space(&Vec::new()).enumerate(), vec![baseline(&Vec::new())]);
        // names are distinct
        let mut names: Vec<_> = Knob::ALL.iter().map(|k| k.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), Knob::ALL.len());
    }

    #[test]
    fn every_versions_knobs_are_distinct_and_their_unset_values_are_in_the_space() {
        use crate::ops::attention::AttentionProblem;
        use crate::ops::registry::Registry;
        let reg = Registry::default();
        let mut seen_tail = false;
        for d in [64, 128, 256] {
            for causal in [false, true] {
                for det in [false, true] {
                    let mut a = AttentionProblem::new(2, 16, 8192, d);
                    a.causal = causal;
                    let p = BackwardProblem::new(a, det);
                    for k in reg.attention_backward() {
                        let knobs = k.knobs(&p);
                        let s = space(&knobs);
                        let b = baseline(&knobs);
                        assert!(s.is_valid(&b), "{} {}: {b}", k.name(), p.label());
                        let mut names: Vec<_> = knobs.iter().map(|(k, _)| k.name()).collect();
                        names.dedup();
                        assert_eq!(names.len(), knobs.len(), "{}", k.name());
                        // the causal order only where it is read; the split only without a mask
                        for (kn, _) in &knobs {
                            match kn {
                                Knob::Lpt => assert!(causal && !det, "{}", k.name()),
                                Knob::Tail => assert!(!causal, "{}", k.name()),
                                Knob::DetWriters | Knob::DetLpt => assert!(det, "{}", k.name()),
                                _ => {}
                            }
                        }
                        seen_tail |= knobs.iter().any(|(k, _)| *k == Knob::Tail);
                    }
                }
            }
        }
        assert!(seen_tail);
        // the defaults' knobs: the split where they take the model's parts
        let a = AttentionProblem::new(2, 16, 8192, 128);
        let tail = reg.attention_backward_version("bwd_fa3_tail").unwrap();
        assert_eq!(
            tail.knobs(&BackwardProblem::new(a, false)),
            vec![(Knob::Tail, 1)]
        );
        let causal = AttentionProblem { causal: true, ..a };
        assert_eq!(
            tail.knobs(&BackwardProblem::new(causal, false)),
            vec![(Knob::Lpt, 1)]
        );
        let cols2t = reg
            .attention_backward_version("bwd_fa3_d256_w2_cols2t")
            .unwrap();
        let d256 = AttentionProblem::new(1, 16, 16384, 256);
        assert_eq!(
            cols2t.knobs(&BackwardProblem::new(d256, true)),
            vec![(Knob::P16, 0), (Knob::Tail, 1)]
        );
    }
}
