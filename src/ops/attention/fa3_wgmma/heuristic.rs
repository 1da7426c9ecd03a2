//! Which fa3_wgmma config runs: the measured default per head dim, the `KILN_FA3_D<d>` override
//! or the tuned cache's entry ([`Config::resolve`]), and the candidates `kiln check` compiles.

use super::config::{Config, LAZY};
use crate::device::DeviceInfo;
use crate::ops::attention::AttentionProblem;
use crate::ops::tuned::TunedTable;

impl Config {
    /// The configuration launches use for head dim `d` unless the environment overrides it.
    /// d64: three consumer warpgroups (192x128 blocks), persistent when not causal: 0.94-1.00x
    /// cuDNN against 0.86-0.93x with two; persistent causal blocks collapse (static order) (H200,
    /// results/2026-11-22-h200/attention/run1, run2).
    /// d128: 128x128 tiles, 3 stages (226 KB), persistent when not causal (+2% at S 4k; causal
    /// lost 2.5% persistent). With K and V released separately 2 stages come within 0.5-2% of 3
    /// (they starved the tensor cores before: 502-532 TFLOPS against 648-701). d256: O takes
    /// 128 registers, so the key tile is 80 wide (FA3's choice) and the ring 2 deep (Q alone is
    /// 64 KB); persistent when not causal (+0.6/+1.7/+6% at S 4k/8k/16k, run 3).
    /// H100 (results/2026-11-22-h100/attention/): the work counter (`dynamic`) gives d64 +1 to
    /// +10% everywhere (its 192-row blocks leave a ragged static split) and d128 causal +5% at S 4k
    /// (+1% at 8k), while d128 non-causal keeps the static split (-0.5 to -1.5% with the
    /// counter). Lazy rescaling is within +-1% at d128 and +3-5% at d256 on five of six shapes.
    /// d64 since the exhaustive fa3 landscapes of `kiln tune attn` (results/2026-11-22-h100/
    /// tune-attn/): 192x176 blocks, a 2-deep ring, no intra-warpgroup overlap (at d64 the
    /// softmax, not the GEMMs, is the long pole, and overlap's extra S registers cost more than
    /// they hide), the counter and lazy rescaling: 1.01-1.16x cuDNN against 0.88-0.98x for the
    /// 192x128 4-stage overlapped config, same run (results/2026-11-22-h100/final/).
    /// Causal items (all head dims) since attention ledger #14 run in groups of `order` heads,
    /// heaviest blocks first across the group: +5-9% at d64/d128 and +2-4% at d256 causal against
    /// head after head, same H100 run (results/2026-11-22-h100/attention-d128-schedule/order/;
    /// 16 / 8 / 4 heads were the best of 1, 4, 8, 16 for d64 / d128 / d256).
    /// d256 since attention ledger #20 (results/2026-11-22-h100/attention-ragged-tail/d256/): the
    /// work counter too, now that the kernel's two-consumer register split (40 / 232) leaves its
    /// producer room for it: against the static order at 24 / 240, +0.2 % non-causal (S 4k, 16k;
    /// S 8k is bimodal from launch to launch in both), +2.9 / +1.2 % causal at S 4k / 8k; the
    /// static order at 40 / 232 lost 2-4 %.
    /// Two Q buffers (`qbuf`) wherever they fit, since attention ledger #23 and #24: alone they
    /// changed nothing (+-0.7 %), but they free each item's Q rows for its O, which then leaves by
    /// TMA store instead of 4-byte stores: d128 +0.9 % at S 4k, +6 % at 1024 keys
    /// (results/2026-11-22-h100/attention-power/qbuf/, tmao/).
    /// d128 since attention ledger #11 (results/2026-11-22-h100/attention-d128-schedule/): the
    /// same shape of schedule as d64 (192x128 blocks of three consumers at 160 registers, a 2-deep
    /// ring, no intra-warpgroup overlap, the counter, lazy rescaling), second-best in the
    /// exhaustive landscapes once the counter and lazy rescaling (not in that space) are added:
    /// 1.06-1.10x cuDNN where the 128x128 3-stage overlapped config measured 1.00-1.04x in the
    /// same run.
    pub const fn default_for(d: u32) -> Config {
        match d {
            64 => Config {
                d: 64,
                bn: 176,
                cwg: 3,
                stages: 2,
                overlap: false,
                pingpong: false,
                persist: 1,
                dynamic: 2,
                emu: 0,
                lazy: LAZY,
                order: 16,
                qbuf: 2,
            },
            256 => Config {
                d: 256,
                bn: 80,
                cwg: 2,
                stages: 2,
                overlap: true,
                pingpong: false,
                persist: 1,
                dynamic: 2,
                emu: 0,
                lazy: LAZY,
                order: 4,
                qbuf: 2,
            },
            _ => Config {
                d: 128,
                bn: 128,
                cwg: 3,
                stages: 2,
                overlap: false,
                pingpong: false,
                persist: 1,
                dynamic: 2,
                emu: 0,
                lazy: LAZY,
                order: 8,
                qbuf: 2,
            },
        }
    }

    /// The config a launch of `p` on `dev` runs: `forced` (the `KILN_FA3_D<d>` override,
    /// [`crate::overrides::AttentionOverrides::fa3`]) if set, else `tuned`'s entry for `p`'s
    /// class (when it is valid here), else [`Config::default_for`].
    pub fn resolve(
        p: &AttentionProblem,
        dev: &DeviceInfo,
        tuned: &TunedTable,
        forced: Option<Config>,
    ) -> std::result::Result<Config, String> {
        let d = p.head_dim as u32;
        if let Some(c) = forced {
            return Ok(c);
        }
        // (valid here: within the shared memory and the kernel's 32-bit work-item index, the
        // limits `supports` checks the default against)
        let tuned = tuned
            .attention(dev, "fa3_wgmma", p)
            .and_then(|c| Config::from_tune(d, &c).ok())
            .filter(|c| c.smem_bytes() <= dev.smem_optin_bytes)
            .filter(|c| c.grid(p, dev.sm_count).0 <= i32::MAX as u64);
        Ok(tuned.unwrap_or(Config::default_for(d)))
    }
}

/// The defaults plus the alternatives they are measured against (all compiled by `kiln check`,
/// all verified on a GPU before any is timed).
pub fn candidates() -> Vec<Config> {
    let d64 = Config::default_for(64);
    let d128 = Config::default_for(128);
    let d256 = Config::default_for(256);
    // d64's default until the H100 landscapes: 192x128, 4 stages, overlapped.
    let d64_prev = Config {
        bn: 128,
        stages: 4,
        overlap: true,
        lazy: 0,
        ..d64
    };
    // d128's default until attention ledger #11: 128x128, 3 stages, overlapped, counter for
    // causal only.
    let d128_prev = Config {
        cwg: 2,
        stages: 3,
        overlap: true,
        dynamic: 1,
        lazy: 0,
        ..d128
    };
    let mut v = vec![d64, d128, d256, d64_prev, d128_prev];
    // Lazy rescaling flipped, measured against the defaults.
    v.extend([d64, d128, d256].map(|c| Config {
        lazy: if c.lazy == 0 { LAZY } else { 0 },
        ..c
    }));
    // Persistent with the work counter (balanced causal items); measured against the defaults.
    v.extend([d64, d128, d256].map(|c| Config { dynamic: 0, ..c }));
    // Measured slower on an H200 (results/2026-11-22-h200/attention/run1, run2); they keep
    // compiling so that the comparison can be repeated.
    v.push(Config { emu: 8, ..d64_prev });
    v.push(Config {
        cwg: 2,
        pingpong: true,
        ..d64_prev
    });
    v.push(Config {
        pingpong: true,
        ..d128_prev
    });
    v.push(Config {
        stages: 2,
        ..d128_prev
    });
    v.push(Config {
        bn: 176,
        stages: 2,
        ..d128_prev
    });
    v.push(Config {
        pingpong: true,
        ..d256
    });
    v.push(Config { bn: 64, ..d256 });
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::tuned::TuneKey;

    #[test]
    fn a_tuned_config_is_launched_unless_forced_and_no_table_gives_the_default() {
        let h100 = DeviceInfo::h100_sxm();
        let p = AttentionProblem::new(2, 16, 4096, 128);
        let default = Config::default_for(128);
        let resolve = |t: &TunedTable, forced| Config::resolve(&p, &h100, t, forced).unwrap();
        assert_eq!(resolve(&TunedTable::empty(), None), default);
        // a candidate of another tile or ring, as the tuner would file it
        let other = candidates()
            .into_iter()
            .find(|c| c.d == 128 && c.to_tune(&p) != default.to_tune(&p))
            .unwrap();
        let mut table = TunedTable::empty();
        table.insert(
            TuneKey::attention(&h100, "fa3_wgmma", &p),
            other.to_tune(&p),
            None,
        );
        let tuned = resolve(&table, None);
        assert_eq!(tuned.to_tune(&p), other.to_tune(&p));
        assert_ne!(tuned.to_tune(&p), default.to_tune(&p));
        // the `KILN_FA3_D128` override wins over the table
        assert_eq!(resolve(&table, Some(default)), default);
        // another class (causal) is left to the default
        let causal = AttentionProblem { causal: true, ..p };
        assert_eq!(
            Config::resolve(&causal, &h100, &table, None).unwrap(),
            default
        );
    }

    #[test]
    fn every_candidate_passes_the_kernels_checks_and_fits() {
        for c in candidates() {
            assert!(c.check().is_ok(), "{c:?}");
            assert!(
                c.smem_bytes() <= 227 * 1024,
                "{c:?} needs {} B",
                c.smem_bytes()
            );
        }
    }
}
