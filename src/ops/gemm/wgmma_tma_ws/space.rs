//! The tuning space: the parameters (BM, BN, PAIRS, SPLITS, GROUP_M, TAIL, SK, PINGPONG), the
//! rules between them, and the translation between a config and a [`Choice`].

use super::{k_blocks, Choice, TileConfig, BM, GROUP_M, MAX_SPLITS};
use crate::ops::gemm::GemmProblem;
use crate::ops::space::{Config, ParamSpace};

/// The values each parameter of [`WgmmaTmaWs`]'s space may take. BN picks the tile config (its
/// stage count is the most that fits: 4, 6 or 8), PAIRS the CTA-pair (multicast B) variant of the
/// 256- or 192-wide tile, SPLITS the split-K factor, GROUP_M the grouped tile order's rows (the value the
/// compiled variants cover).
const BMS: [i64; 2] = [128, 64];
/// (168 is not in it: 2-4x slower with an MN-major B, ledger #72; `KILN_WGMMA_CFG=n168` forces it.)
const BNS: [i64; 6] = [64, 128, 192, 224, 256, 320];
const PAIRS: [i64; 2] = [0, 1];
const SPLITS: [i64; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
const GROUP_MS: [i64; 1] = [GROUP_M as i64];

const PAIRS_RULE: &str =
    "PAIRS=1 (clusters of 2 CTAs multicasting B) only with BN=256 or 192: the \
     pair variants compiled are 128x256 and 128x192";
const BM64_RULE: &str = "BM=64 (one 64-row tile whose K blocks the two consumers share) only \
     with BN=64, PAIRS=0 and SPLITS=1: the 64x64 single-CTA tile is the one compiled";
const TAILS: [i64; 2] = [0, 1];
const TAIL_RULE: &str = "TAIL=1 (split only the last, partial wave's tiles) only with SPLITS>1";
const SKS: [i64; 2] = [0, 1];
const PINGPONGS: [i64; 2] = [0, 1];
const PINGPONG_RULE: &str = "PINGPONG=1 (each consumer its own tile, the two taking turns) only \
     with BN=128 or 64, PAIRS=0, SPLITS=1 and SK=0: the ping-pong kernel is compiled for 128x128, \
     128x64 and 64x64 tiles, in single CTAs, unsplit";
const SK_RULE: &str = "SK=1 (stream-K over the last partial wave and one whole wave) only with \
     BM=128, PAIRS=0 and SPLITS=1: single 128-row CTAs are the variants that take it";
const WIDE_RULE: &str = "BN=320 only with SPLITS=1 and SK=0: the 128x320 tile runs at one wave, \
     where nothing splits, and is compiled without the split-K code";
const SPLITS_K_RULE: &str = "SPLITS at most the K blocks (K / 64): more slices than K blocks \
     leaves some empty";

/// The reasons a (BM, BN, PAIRS, SPLITS, GROUP_M, TAIL, SK, PINGPONG) point breaks the kernel's
/// limits, independent of the problem (the space adds SPLITS <= K blocks).
#[allow(clippy::too_many_arguments)]
fn space_rules(
    bm: i64,
    bn: i64,
    pairs: i64,
    splits: i64,
    group_m: i64,
    tail: i64,
    sk: i64,
    pingpong: i64,
) -> Vec<String> {
    let mut broken = Vec::new();
    if !BMS.contains(&bm) {
        broken.push(format!("BM={bm} is not one of {BMS:?}"));
    }
    if bm == 64 && (bn != 64 || pairs != 0 || splits != 1) {
        broken.push(BM64_RULE.into());
    }
    if !BNS.contains(&bn) {
        broken.push(format!("BN={bn} is not one of {BNS:?}"));
    }
    if !PAIRS.contains(&pairs) {
        broken.push(format!("PAIRS={pairs} is not 0 or 1"));
    }
    if !SPLITS.contains(&splits) {
        broken.push(format!("SPLITS={splits} is not in 1..={MAX_SPLITS}"));
    }
    if !GROUP_MS.contains(&group_m) {
        broken.push(format!(
            "GROUP_M={group_m} is not one of {GROUP_MS:?} (the compiled variants)"
        ));
    }
    if pairs == 1 && !(bn == 256 || bn == 192) {
        broken.push(PAIRS_RULE.into());
    }
    if !TAILS.contains(&tail) {
        broken.push(format!("TAIL={tail} is not 0 or 1"));
    }
    if tail == 1 && splits <= 1 {
        broken.push(TAIL_RULE.into());
    }
    if !SKS.contains(&sk) {
        broken.push(format!("SK={sk} is not 0 or 1"));
    }
    if sk == 1 && (bm != BM as i64 || pairs != 0 || splits != 1) {
        broken.push(SK_RULE.into());
    }
    if !PINGPONGS.contains(&pingpong) {
        broken.push(format!("PINGPONG={pingpong} is not 0 or 1"));
    }
    if pingpong == 1 && (!(bn == 128 || bn == 64) || pairs != 0 || splits != 1 || sk != 0) {
        broken.push(PINGPONG_RULE.into());
    }
    if bn == TileConfig::WIDE.bn as i64 && (splits != 1 || sk != 0) {
        broken.push(WIDE_RULE.into());
    }
    broken
}

impl Choice {
    /// The choice a config of [`WgmmaTmaWs`]'s space names, or why the kernel cannot take it.
    pub fn from_config(cfg: &Config) -> std::result::Result<Choice, String> {
        // Configs tuned before BM existed are 128-row tiles.
        let bm = cfg.get("BM").unwrap_or(BM as i64);
        let bn = cfg.require("BN")?;
        let pairs = cfg.require("PAIRS")?;
        let splits = cfg.require("SPLITS")?;
        let group_m = cfg.require("GROUP_M")?;
        // Configs tuned before TAIL existed split every tile.
        let tail = cfg.get("TAIL").unwrap_or(0);
        // Configs tuned before SK existed ran plain tiles.
        let sk = cfg.get("SK").unwrap_or(0);
        // Configs tuned before PINGPONG existed are cooperative.
        let pingpong = cfg.get("PINGPONG").unwrap_or(0);
        if let Some(reason) =
            space_rules(bm, bn, pairs, splits, group_m, tail, sk, pingpong).first()
        {
            return Err(format!("{cfg}: {reason}"));
        }
        let tile = match (bm, bn, pairs) {
            (64, _, _) if pingpong == 1 => TileConfig::PINGPONG_TINY,
            (_, 64, _) if pingpong == 1 => TileConfig::PINGPONG64,
            _ if pingpong == 1 => TileConfig::PINGPONG,
            (64, _, _) => TileConfig::TINY64,
            (_, 256, 1) => TileConfig::LARGE_PAIR,
            (_, 256, _) => TileConfig::LARGE,
            (_, 192, 1) => TileConfig::MEDIUM_PAIR,
            (_, 192, _) => TileConfig::MEDIUM,
            (_, 320, _) => TileConfig::WIDE,
            (_, 224, _) => TileConfig::N224,
            (_, 128, _) => TileConfig::SMALL,
            _ => TileConfig::TINY,
        };
        Ok(Choice {
            tile,
            splits: splits as u32,
            group_m: group_m as u32,
            tail: tail == 1,
            stream_k: sk == 1,
            swap: false,
        })
    }

    /// The config naming this choice, in the space's parameter order.
    pub fn to_config(&self) -> Config {
        Config::new(&[
            ("BM", self.tile.bm as i64),
            ("BN", self.tile.bn as i64),
            ("PAIRS", (self.tile.cluster > 1) as i64),
            ("SPLITS", self.splits as i64),
            ("GROUP_M", self.group_m as i64),
            ("TAIL", self.tail as i64),
            ("SK", self.stream_k as i64),
            ("PINGPONG", self.tile.pingpong as i64),
        ])
    }
}

/// The space of `p`: every parameter above, with the rules between them and SPLITS at most
/// `p`'s K blocks.
pub(super) fn space(p: &GemmProblem) -> ParamSpace {
    let kb = k_blocks(p.k) as i64;
    ParamSpace::new()
        .param("BM", &BMS)
        .param("BN", &BNS)
        .param("PAIRS", &PAIRS)
        .launch_param("SPLITS", &SPLITS)
        .param("GROUP_M", &GROUP_MS)
        .launch_param("TAIL", &TAILS)
        .launch_param("SK", &SKS)
        .param("PINGPONG", &PINGPONGS)
        .rule(PAIRS_RULE, |c| {
            c.get("PAIRS") == Some(0) || matches!(c.get("BN"), Some(256) | Some(192))
        })
        .rule(BM64_RULE, |c| {
            c.get("BM") != Some(64)
                || (c.get("BN") == Some(64)
                    && c.get("PAIRS") == Some(0)
                    && c.get("SPLITS") == Some(1))
        })
        .rule(TAIL_RULE, |c| {
            c.get("TAIL") == Some(0) || c.get("SPLITS").unwrap_or(1) > 1
        })
        .rule(SK_RULE, |c| {
            c.get("SK") != Some(1)
                || (c.get("BM") == Some(BM as i64)
                    && c.get("PAIRS") == Some(0)
                    && c.get("SPLITS") == Some(1))
        })
        .rule(PINGPONG_RULE, |c| {
            c.get("PINGPONG") != Some(1)
                || (matches!(c.get("BN"), Some(128) | Some(64))
                    && c.get("PAIRS") == Some(0)
                    && c.get("SPLITS") == Some(1)
                    && c.get("SK") == Some(0))
        })
        .rule(WIDE_RULE, |c| {
            c.get("BN") != Some(TileConfig::WIDE.bn as i64)
                || (c.get("SPLITS") == Some(1) && c.get("SK").unwrap_or(0) == 0)
        })
        .rule(SPLITS_K_RULE, move |c| c.get("SPLITS").unwrap_or(1) <= kb)
}

#[cfg(test)]
mod tests {
    use super::super::{bf16, WgmmaTmaWs};
    use super::*;
    use crate::device::DeviceInfo;
    use crate::ops::gemm::{GemmKernel, Layout};

    #[test]
    fn the_space_is_what_the_kernel_takes() {
        let h100 = DeviceInfo::h100_sxm();
        let p = bf16(4096, 4096, 4096, Layout::RC);
        let space = WgmmaTmaWs.space(&p, &h100).unwrap();
        let all = space.enumerate();
        // (BM, BN, PAIRS) in (128, 256, 0), (128, 256, 1), (128, 224, 0), (128, 192, 0),
        // (128, 192, 1), (128, 128, 0), (128, 64, 0); each unsplit, or split 2..=8 over every
        // tile or the last wave only; (128, 320, 0) and (64, 64, 0) unsplit; the five single
        // 128-row tiles with the split-K code unsplit also with stream-K; and ping-pong 128x128,
        // 128x64 and 64x64
        assert_eq!(all.len(), 7 * (1 + 7 * 2) + 2 + 5 + 3);
        for c in &all {
            let ch = Choice::from_config(c).unwrap();
            assert_eq!(ch.to_config(), *c);
            assert_eq!(Config::parse(&c.label()).unwrap(), *c);
            assert!(TileConfig::ALL.contains(&ch.tile));
            assert!(ch.splits > 1 || !ch.tail);
        }
        // CR: the same space (its 256-wide tiles split since the register epilogue became a
        // variant of its own, which left room for the split bookkeeping)
        let cr = WgmmaTmaWs
            .space(&bf16(4096, 4096, 4096, Layout::CR), &h100)
            .unwrap();
        assert_eq!(cr.enumerate().len(), all.len());
        // short K: no more slices than K blocks
        let short = bf16(4096, 4096, 128, Layout::RC);
        let few = WgmmaTmaWs.space(&short, &h100).unwrap().enumerate();
        assert_eq!(few.len(), 7 * (1 + 2) + 2 + 5 + 3);
        assert!(few.iter().all(|c| c.get("SPLITS").unwrap() <= 2));
        let bad = |pairs: &[(&str, i64)]| Choice::from_config(&Config::new(pairs)).unwrap_err();
        let e = bad(&[("BN", 128), ("PAIRS", 1), ("SPLITS", 1), ("GROUP_M", 8)]);
        assert!(e.contains("PAIRS=1"), "{e}");
        let e = bad(&[
            ("BN", 256),
            ("PAIRS", 1),
            ("SPLITS", 1),
            ("GROUP_M", 8),
            ("TAIL", 1),
        ]);
        assert!(e.contains("TAIL=1"), "{e}");
        for (bn, pairs, splits) in [(256, 1, 1), (128, 0, 2)] {
            let e = bad(&[
                ("BN", bn),
                ("PAIRS", pairs),
                ("SPLITS", splits),
                ("GROUP_M", 8),
                ("SK", 1),
            ]);
            assert!(e.contains("SK=1"), "{e}");
        }
        // the 320-wide tile has no split-K code
        for (splits, sk) in [(2, 0), (1, 1)] {
            let e = bad(&[
                ("BN", 320),
                ("PAIRS", 0),
                ("SPLITS", splits),
                ("GROUP_M", 8),
                ("SK", sk),
            ]);
            assert!(e.contains("BN=320"), "{e}");
        }
        let e = bad(&[("BN", 96), ("PAIRS", 0), ("SPLITS", 1), ("GROUP_M", 8)]);
        assert!(e.contains("BN=96"), "{e}");
        let e = bad(&[("BN", 64), ("PAIRS", 0), ("SPLITS", 9), ("GROUP_M", 8)]);
        assert!(e.contains("SPLITS=9"), "{e}");
        let e = bad(&[("BN", 64), ("PAIRS", 0), ("SPLITS", 1), ("GROUP_M", 4)]);
        assert!(e.contains("GROUP_M=4"), "{e}");
        assert!(bad(&[("BN", 64), ("PAIRS", 0), ("SPLITS", 1)]).contains("GROUP_M"));
        for (bn, pairs, splits) in [(128, 0, 1), (64, 1, 1), (64, 0, 2)] {
            let e = bad(&[
                ("BM", 64),
                ("BN", bn),
                ("PAIRS", pairs),
                ("SPLITS", splits),
                ("GROUP_M", 8),
            ]);
            assert!(e.contains("BM=64"), "{e}");
        }
        assert!(bad(&[
            ("BM", 96),
            ("BN", 64),
            ("PAIRS", 0),
            ("SPLITS", 1),
            ("GROUP_M", 8)
        ])
        .contains("BM=96"));
        for (bn, splits, sk) in [(256, 1, 0), (128, 2, 0), (128, 1, 1), (64, 2, 0)] {
            let e = bad(&[
                ("BN", bn),
                ("PAIRS", 0),
                ("SPLITS", splits),
                ("GROUP_M", 8),
                ("SK", sk),
                ("PINGPONG", 1),
            ]);
            assert!(e.contains("PINGPONG=1"), "{e}");
        }
        let pp = Config::new(&[
            ("BN", 128),
            ("PAIRS", 0),
            ("SPLITS", 1),
            ("GROUP_M", 8),
            ("PINGPONG", 1),
        ]);
        assert_eq!(Choice::from_config(&pp).unwrap().tile, TileConfig::PINGPONG);
        // configs tuned before BM existed are 128-row tiles
        let old = Config::new(&[("BN", 64), ("PAIRS", 0), ("SPLITS", 1), ("GROUP_M", 8)]);
        assert_eq!(Choice::from_config(&old).unwrap().tile, TileConfig::TINY);
    }
}
