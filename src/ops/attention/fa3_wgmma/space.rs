//! fa3_wgmma as the tuner sees it: its [`space`] of parameters and rules, and the conversions
//! between a [`Config`] and a point of that space.

use super::config::{Config, KEY_TILES};
use crate::device::DeviceInfo;
use crate::ops::attention::AttentionProblem;
use crate::ops::space::{Config as TuneConfig, ParamSpace};

/// Stages the tuner tries: one stage leaves the producer nothing to prefetch, more than four
/// never fits two tiles of d >= 128 next to Q.
const TUNE_STAGES: [i64; 3] = [2, 3, 4];
/// `emu` periods the tuner tries (0 = off; 2 would emulate half the exponentials).
const TUNE_EMU: [i64; 3] = [0, 4, 8];

impl Config {
    /// The tuner's config (see [`space`]) for head dim `d`, checked.
    // The struct update names every field today; it stays so that a field added to Config later
    // (one the space does not cover yet) takes the head dim's default instead of breaking this.
    #[allow(clippy::needless_update)]
    pub fn from_tune(d: u32, c: &TuneConfig) -> std::result::Result<Config, String> {
        let get = |k: &str| -> std::result::Result<u32, String> {
            let v = c.require(k)?;
            u32::try_from(v).map_err(|_| format!("{k}={v} is negative"))
        };
        let flag = |k: &str| -> std::result::Result<bool, String> {
            match get(k)? {
                0 => Ok(false),
                1 => Ok(true),
                v => Err(format!("{k}={v}: use 0 or 1")),
            }
        };
        let flag_or = |k: &str, dflt: bool| -> std::result::Result<bool, String> {
            match c.get(k) {
                None => Ok(dflt),
                Some(_) => flag(k),
            }
        };
        let cfg = Config {
            d,
            bn: get("BN")?,
            cwg: get("CWG")?,
            stages: get("STAGES")?,
            overlap: flag("OVERLAP")?,
            pingpong: flag("PINGPONG")?,
            persist: get("PERSIST")?,
            // DYNAMIC=1: the work counter, always (2); 0: never. Configs from before the
            // parameter existed (recorded landscapes, older caches) have none: never.
            dynamic: if flag_or("DYNAMIC", false)? { 2 } else { 0 },
            emu: get("EMU")?,
            // Fields the space does not cover (lazy) keep the head dim's default.
            ..Config::default_for(d)
        };
        cfg.check()?;
        Ok(cfg)
    }

    /// This config as a point of the tuner's space for `p`: `persist` and `dynamic` 1 are
    /// written as what they mean for `p` (the space keeps persist 0/2 and dynamic off/always;
    /// the work counter runs a persistent grid, so it is written with PERSIST=2).
    pub fn to_tune(&self, p: &AttentionProblem) -> TuneConfig {
        let dynamic = self.dynamic_for(p);
        let persist = if self.persistent_for(p) { 2 } else { 0 };
        TuneConfig::new(&[
            ("BN", self.bn as i64),
            ("CWG", self.cwg as i64),
            ("STAGES", self.stages as i64),
            ("OVERLAP", self.overlap as i64),
            ("PINGPONG", self.pingpong as i64),
            ("EMU", self.emu as i64),
            ("DYNAMIC", dynamic as i64),
            ("PERSIST", persist as i64),
        ])
    }
}

/// The tuner's space for `p` on `dev`: key tile (every accepted width), consumer warpgroups,
/// ring depth, the overlap and ping-pong schedules, the exp2 emulation period, the work counter,
/// and (at launch only) whether blocks persist. The rules are the kernel's own checks and its shared memory;
/// the register split (setmaxnreg: 160 per consumer thread with three warpgroups, 232-240 with
/// two) is left to the guard, which rejects the spills it causes with ptxas's numbers.
pub fn space(p: &AttentionProblem, dev: &DeviceInfo) -> ParamSpace {
    let d = p.head_dim as u32;
    let limit = dev.smem_optin_bytes;
    let tiles: Vec<i64> = KEY_TILES.iter().map(|&t| t as i64).collect();
    ParamSpace::new()
        .param("BN", &tiles)
        .param("CWG", &[2, 3])
        .param("STAGES", &TUNE_STAGES)
        .param("OVERLAP", &[0, 1])
        .param("PINGPONG", &[0, 1])
        .param("EMU", &TUNE_EMU)
        // The work counter (a compile-time mode: blocks take items from a global counter).
        .param("DYNAMIC", &[0, 1])
        // Persistence only changes the grid: 0 one block per item, 2 one per SM (1 is one of the
        // two, depending on the mask, so it would be a duplicate candidate).
        .launch_param("PERSIST", &[0, 2])
        .rule("the kernel's static checks (Config::check)", move |c| {
            Config::from_tune(d, c).is_ok()
        })
        // Measured: every d256 config with three consumers was a ptxas abort on the H100
        // (results/2026-11-22-h100/tune-attn): not worth a compile each.
        .rule(
            "d256 with three consumer warpgroups: 160 registers per consumer thread cannot hold O (128) and the scores; ptxas aborts",
            move |c| d != 256 || c.get("CWG") != Some(3),
        )
        .rule(
            "the work counter runs one block per SM: DYNAMIC=1 only with PERSIST=2",
            |c| c.get("DYNAMIC") != Some(1) || c.get("PERSIST") == Some(2),
        )
        .rule(
            &format!("Q tile + STAGES x (K + V tiles) + barriers within the {limit} B of shared memory a block may opt in to"),
            move |c| Config::from_tune(d, c).is_ok_and(|k| k.smem_bytes() <= limit),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::fa3_wgmma::Fa3Wgmma;
    use crate::ops::attention::AttentionKernel;

    #[test]
    fn the_tuning_space_keeps_the_kernels_rules_and_its_baseline() {
        let h100 = DeviceInfo::h100_sxm();
        for (d, causal) in [(128, false), (128, true), (64, false), (256, true)] {
            let p = AttentionProblem {
                causal,
                ..AttentionProblem::new(4, 16, 4096, d)
            };
            let s = Fa3Wgmma.space(&p, &h100).unwrap();
            let all = s.enumerate();
            assert!(!all.is_empty());
            for c in &all {
                let k = Config::from_tune(d as u32, c).unwrap();
                assert!(k.smem_bytes() <= h100.smem_optin_bytes, "{c}");
                assert_eq!(k.to_tune(&p), *c);
            }
            // the default is a point of the space, persist written as what it means here
            let b = Fa3Wgmma.baseline(&p, &h100).unwrap();
            assert!(s.is_valid(&b), "d{d}: {b}");
            let dynamic = Config::default_for(d as u32).dynamic_for(&p);
            assert_eq!(b.get("DYNAMIC"), Some(dynamic as i64));
            assert_eq!(
                b.get("PERSIST"),
                Some(if causal && !dynamic { 0 } else { 2 })
            );
            let spec = Fa3Wgmma.spec_for("sm_90a", &p, &b).unwrap();
            assert_eq!(
                spec.label(),
                Config::default_for(d as u32)
                    .spec("sm_90a", p.dtype, dynamic)
                    .label()
            );
        }
        let p = AttentionProblem::new(4, 16, 4096, 128);
        let s = space(&p, &h100);
        // d128: 23 (BN, CWG, STAGES) that fit, x overlap, ping-pong, 3 emu periods, 3 schedules
        // (one block per item, persistent, work counter)
        assert_eq!(s.enumerate().len(), 23 * 2 * 2 * 3 * 3);
        // a config recorded before DYNAMIC existed reads as the counter off
        let old = TuneConfig::parse("BN=128,CWG=2,STAGES=3,OVERLAP=1,PINGPONG=0,EMU=0,PERSIST=2")
            .unwrap();
        assert_eq!(Config::from_tune(128, &old).unwrap().dynamic, 0);
        let too_big = Config {
            bn: 192,
            cwg: 2,
            stages: 3,
            overlap: true,
            ..Config::default_for(128)
        }
        .to_tune(&p);
        let v = s.violations(&too_big);
        assert_eq!(v.len(), 1);
        assert!(v[0].contains("shared memory"), "{v:?}");
        let mut bad = too_big.clone();
        bad.set("BN", 100);
        assert!(s.violations(&bad)[0].contains("BN=100"));
        let d256 = AttentionProblem::new(4, 16, 4096, 256);
        assert!(space(&d256, &h100)
            .enumerate()
            .iter()
            .all(|c| c.get("CWG") == Some(2)));
        assert!(Config::from_tune(128, &TuneConfig::new(&[("BN", 128)]))
            .unwrap_err()
            .contains("no parameter CWG"));
    }
}
