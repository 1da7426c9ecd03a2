//! What the FP8 GEMM runs for one problem and why (no GPU): the config the rule picks (the
//! measured rule's 64-row tile at small M, the waves rule of a8381a5 or the bytes rule's cost
//! model, [`Fp8Rule`]) with the standing of every compiled one under the last two, the split-K slices and their reduction, the tiles, the grid and the
//! shared memory.

use serde::Serialize;

use super::gemm::{
    choose_by, choose_splits, column_cost, configs, large_wide_cost, predict_us, ranked,
    small_m_stream_us, splits_for, stream_layout, supports, tiles, Fp8Config, Fp8Rule, Reduce, BK,
    LARGE_CLUSTER_WAVES, LARGE_M, LARGE_PIPE_K, NAME, SMALL_M, SMALL_ROWS_BULK_K, SMALL_ROWS_FILL,
    SMALL_ROWS_SHORT_K,
};
use super::problem::{Fp8Problem, ScaleMode};
use crate::device::DeviceInfo;
use crate::error::{Error, Result};

/// One compiled config's standing for the problem.
#[derive(Debug, Clone, Serialize)]
pub struct Fp8Candidate {
    pub config: Fp8Config,
    pub tiles: u64,
    pub waves: u64,
    /// waves x width x the mainloop's cost per column: what the waves rule minimises (old
    /// family only; 0 for the others).
    pub cost: u64,
    /// The bytes rule's predicted time with its best slice count (in `best_splits`).
    pub predicted_us: f64,
    pub best_splits: u32,
    pub fits: bool,
}

/// The plan of one FP8 GEMM.
#[derive(Debug, Clone, Serialize)]
pub struct Fp8Plan {
    pub version: String,
    pub problem: String,
    pub rule: Fp8Rule,
    pub config: Fp8Config,
    pub splits: u32,
    pub reduce: Reduce,
    pub grid: u64,
    pub stages: u32,
    pub smem_bytes: u32,
    /// The bytes rule's prediction for what runs.
    pub predicted_us: f64,
    pub candidates: Vec<Fp8Candidate>,
    /// The rules that decided, in the order they applied.
    pub why: Vec<String>,
}

/// The plan for `p` on `dev` under `rule` (`forced`: a config given by the caller, which must be
/// compiled).
pub fn plan(
    p: &Fp8Problem,
    dev: &DeviceInfo,
    forced: Option<Fp8Config>,
    rule: Fp8Rule,
) -> Result<Fp8Plan> {
    p.validate()?;
    supports(p, dev).map_err(|reason| Error::Unsupported {
        kernel: NAME.into(),
        reason,
    })?;
    let sms = dev.sm_count.max(1) as u64;
    let compiled = configs(p.a, p.b, p.scale, p.promote);
    let best = ranked(p, dev);
    let candidates: Vec<Fp8Candidate> = compiled
        .iter()
        .map(|&c| {
            let t = tiles(p, &c);
            let r = best.iter().find(|r| r.config.same_kernel(&c));
            Fp8Candidate {
                config: c,
                tiles: t,
                waves: t.div_ceil(sms),
                cost: if c.is_new() {
                    0
                } else {
                    t.div_ceil(sms) * c.bn as u64 * column_cost(c, p.promote)
                },
                predicted_us: r.map_or(f64::NAN, |r| r.us),
                best_splits: r.map_or(0, |r| r.config.splits),
                fits: dev.check_smem(c.smem_bytes()).is_ok(),
            }
        })
        .collect();
    let mut why = vec![format!(
        "compiled for {} x {} {} scales{}: {}",
        p.a,
        p.b,
        p.scale,
        if p.promote {
            ", promoted"
        } else {
            ", unpromoted"
        },
        compiled
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    )];
    let config = match forced {
        Some(c) => {
            super::gemm::check_config(p, c)?;
            why.push(format!("config {c} given by the caller"));
            c
        }
        None => {
            let c = choose_by(p, dev, rule);
            let waves = || {
                format!(
                    "tile {c} (rule `waves`): the least waves x width x cost per column over \
                     {sms} SMs among the configs of a8381a5 (a promotion after a drained \
                     pipeline costs 10 per column, pipelined or unpromoted 8), the wider on a tie"
                )
            };
            why.push(match rule {
                Fp8Rule::Measured if c.bm == 64 => format!(
                    "tile {c} (rule `measured`): M <= {SMALL_M} takes the 64-row tile, pipelined, \
                     scales in shared memory, 128 wide (the fastest at 8 of DeepSeek-V3's 12 \
                     M = 64 and 128 shapes on an H200 at 7eb2e34, within 7 % at the rest), or at \
                     M <= 64 \
                     the narrowest 64-row tile whose column tiles need the fewest waves over \
                     {sms} SMs"
                ),
                Fp8Rule::Measured => format!(
                    "M > {SMALL_M} or no 64-row tile compiled, so rule `waves`: {}",
                    waves()
                ),
                Fp8Rule::Waves => waves(),
                Fp8Rule::Bytes => format!(
                    "tile {c} (rule `bytes`): the least predicted time over every compiled config \
                     and slice count: the larger of the DRAM time of the problem's bytes and \
                     the busiest SM's K blocks, plus the split-K tail and the launch"
                ),
                Fp8Rule::Fill if c.bm == 64 => format!(
                    "tile {c} (rule `fill`): M <= {SMALL_M}, so the measured rule's 64-row tile"
                ),
                Fp8Rule::Fill if c.tma_epi => format!(
                    "tile {c} (rule `fill`): among the 128-row tiles with the TMA-store epilogue, \
                     the least waves x width over {sms} SMs, then the fullest last wave"
                ),
                Fp8Rule::Fill => format!(
                    "no tile with the TMA-store epilogue compiled for these scales, so rule \
                     `waves`: {}",
                    waves()
                ),
                Fp8Rule::Large if c.a_resident => format!(
                    "tile {c} (rule `large`): M within the tile's rows and K of 4 blocks, the \
                     lean short-K form: A's four K blocks loaded once, a ring of B alone, \
                     every path such a launch never takes compiled out (on an H200 5-12 % \
                     under 128otqe/1 at 128x32768x512 and 64x128psb/1 at 64x32768x512; ledger \
                     rows 171 and 200)"
                ),
                Fp8Rule::Large if c.whole => format!(
                    "tile {c} (rule `large`): the 64-row tile in one slice, as its whole-tile \
                     twin: split-K and stream-K compiled out, 36-40 % less code (on an H200 2-8 \
                     % under 64x128ps/1 and 64x192ps/1 at 64x7168x2048, 128x7168x2048 and \
                     64x24576x1536; ledger rows 202-203)"
                ),
                Fp8Rule::Large if large_wide_cost(&c).is_some() => format!(
                    "tile {c} (rule `large`): M >= {LARGE_M} in pairs along M (the tiles cover C \
                     whole and fill {LARGE_CLUSTER_WAVES} waves of the SMs or more), 128 x {}: \
                     its waves, each {} tiles of work at {} of 128ptme's time (on an H200), take \
                     least of the wide tiles and no longer than the 128-wide tile's",
                    c.bn,
                    c.bn as f64 / 128.0,
                    large_wide_cost(&c).unwrap_or(1.0)
                ),
                Fp8Rule::Large if p.scale == ScaleMode::Tensor && c.bm == 192 => format!(
                    "tile {c} (rule `large`): tensor scales with fast accumulation at M >= \
                     {LARGE_M}, the 192 x 192 tile of three consumers in pairs along M: its \
                     busiest CTA computes no more than the 128 x 256 tile's, in fewer tiles \
                     (ledger row 28)"
                ),
                Fp8Rule::Large if p.scale == ScaleMode::Tensor && c.ctas() > 1 => format!(
                    "tile {c} (rule `large`): tensor scales at M >= {LARGE_M}, the 128 x 256 \
                     tile in pairs along M (the tiles cover C whole, the 128-wide tiles fill \
                     {LARGE_CLUSTER_WAVES} waves of the SMs or more, and its waves are half the \
                     128-wide tile's or fewer)"
                ),
                Fp8Rule::Large if c.ring_epi && p.m <= SMALL_M => format!(
                    "tile {c} (rule `large`): 64 < M <= {SMALL_M} where its tiles fill {} to all \
                     of the SMs once and hold more than {SMALL_ROWS_SHORT_K} K blocks: every \
                     CTA's whole work one tile, its epilogue staged in the ring at once (on an \
                     H200 1.02x the 64-row tile at 128x24576x1536; ledger rows 24-25){}",
                    SMALL_ROWS_FILL,
                    bulk_reason(&c)
                ),
                Fp8Rule::Large if c.bm == 64 && c.sa_bulk => format!(
                    "tile {c} (rule `large`): M <= 64 with at most {SMALL_ROWS_SHORT_K} K blocks \
                     where its 64 x 128 tiles fill the SMs: the A scales of a stage by one bulk \
                     copy, not the copier warp (on an H200 1.1-3.5 % under 64x256ps/1 at 64x32768x512 in \
                     three rounds; ledger row 94)"
                ),
                Fp8Rule::Large if c.tma_scales && c.bm == 128 && p.m <= SMALL_M => format!(
                    "tile {c} (rule `large`): 64 < M <= {SMALL_M} takes the 128-row tile with the \
                     A scales by TMA and the TMA-store epilogue where its units hold 32 K blocks \
                     or more, or 4 at most unsplit (on an H200 1.09-1.11x the 64-row tile at \
                     128x7168x16384 and 128x32768x512){}",
                    bulk_reason(&c)
                ),
                Fp8Rule::Large if c.tma_scales && c.bm == 128 => format!(
                    "tile {c} (rule `large`): M >= {LARGE_M} takes the 128-wide tile with the A \
                     scales by TMA and the TMA-store epilogue{}",
                    if c.ctas() > 1 {
                        format!(
                            ", pipelined, in clusters of {} x {} CTAs multicasting the tiles they \
                             share: their tiles cover C whole and fill {LARGE_CLUSTER_WAVES} \
                             waves of the SMs or more (on an H200 the pairs along M ran \
                             1.01-1.04x the single CTAs at M = 4096, 0.98x at 2048x2048x4096)",
                            c.ctas_m(),
                            c.ctas_n()
                        )
                    } else {
                        format!(
                            ", its promotion pipelined from K = {LARGE_PIPE_K} (on an H200 \
                             1.06-1.10x the drained tile from K = 1536, 0.97x at K = 512); no \
                             clusters: the tiles do not pair up or fill {LARGE_CLUSTER_WAVES} \
                             waves"
                        )
                    }
                ),
                Fp8Rule::Large => format!(
                    "M < {LARGE_M} or no such tile compiled for these scales, so rule \
                     `measured`: {}",
                    if c.bm == 64 {
                        format!("M <= {SMALL_M} takes the 64-row tile")
                    } else {
                        waves()
                    }
                ),
            });
            c
        }
    };
    let kblocks = (p.k as u64).div_ceil(BK as u64);
    let t = tiles(p, &config);
    let splits = splits_for(p, &config, dev);
    // (not for the tiles that take no slices: the lean form and the whole-tile twins)
    if config.splits > 0 && config.max_splits() > 1 && forced.is_none() && rule == Fp8Rule::Large {
        why.push(format!(
            "{splits} slice(s), not the {} that fill the SMs: streaming the busiest SM's B at \
             ~54 GB/s or the problem's bytes at 71 % of the DRAM's peak, plus ~2.5 us of \
             reduction tail when sliced (rates fitted on an H200), takes {:.1} us against {:.1}",
            choose_splits(p, &config, dev),
            small_m_stream_us(p, &config, splits, dev),
            small_m_stream_us(p, &config, choose_splits(p, &config, dev), dev)
        ));
    }
    if config.splits == 0 && !config.stream {
        why.push(if splits == 1 {
            format!(
                "no split-K: {t} tiles fill half the {sms} SMs or more, or K has fewer than 4 \
                 blocks of {BK} ({kblocks})"
            )
        } else {
            format!(
                "split-K into {splits}: {t} tiles fill under half the SMs; slices to fill them, \
                 at most {}, two K blocks or more each ({kblocks} blocks)",
                super::gemm::MAX_SPLITS
            )
        });
    }
    let reduce = config.reduction();
    // stream-K on the resident clusters (here: one per SM, or per pair of SMs)
    let clusters = (sms / config.ctas() as u64).max(1);
    let stream = config
        .stream
        .then(|| stream_layout(t / config.ctas() as u64, kblocks, clusters))
        .flatten();
    if config.stream {
        why.push(match stream {
            Some((sk_from, sk_w)) => format!(
                "stream-K: cluster tiles from {sk_from} on ({sk_w} K blocks) shared out by K \
                 block over {clusters} clusters, {} or {} each, summed atomically",
                sk_w as u64 / clusters,
                (sk_w as u64).div_ceil(clusters)
            ),
            None => format!(
                "no stream-K: the {} cluster tiles fill whole waves of {clusters} clusters, or \
                 their K blocks are fewer than the clusters",
                t / config.ctas() as u64
            ),
        });
    }
    if splits > 1 {
        why.push(match reduce {
            Reduce::Slots => "the slices reduce through per-slice slots".to_string(),
            Reduce::Atomic => "the slices reduce by atomic adds into one fp32 tile".to_string(),
            Reduce::Cluster => "each tile's slices run as one cluster, summed in its first CTA's \
                                shared memory (one CTA a slice, not persistent)"
                .to_string(),
        });
    }
    Ok(Fp8Plan {
        version: NAME.into(),
        problem: p.to_string(),
        rule,
        config: Fp8Config { splits, ..config },
        splits,
        reduce,
        grid: match stream {
            Some(_) => clusters,
            None => (t / config.ctas() as u64 * splits as u64).min(clusters),
        } * config.ctas() as u64,
        stages: config.stages(),
        smem_bytes: config.smem_bytes(),
        predicted_us: predict_us(p, &config, splits, dev),
        candidates,
        why,
    })
}

impl Fp8Plan {
    /// The launch in two lines: tiles, grid, pipeline.
    pub fn launch_text(&self) -> String {
        format!(
            "tiles {}x{} (K {BK} a stage), {} stages, {} B shared memory, {} threads\n\
             grid {} persistent CTAs, split-K {}{}{}; predicted {:.1} us",
            self.config.bm,
            self.config.bn,
            self.stages,
            self.smem_bytes,
            self.config.threads(),
            self.grid,
            self.splits,
            if self.splits > 1 {
                match self.reduce {
                    Reduce::Slots => " (slots)",
                    Reduce::Atomic => " (atomic)",
                    Reduce::Cluster => " (cluster)",
                }
            } else {
                ""
            },
            if self.config.stream {
                ", stream-K (atomic)"
            } else {
                ""
            },
            self.predicted_us
        )
    }
}

/// The plan's words for the large rule's bulk copies of the scales at 64 < M <= 128 (ledger
/// rows 70-71 and 90), or nothing where the config has none.
fn bulk_reason(c: &Fp8Config) -> String {
    let what = match (c.sa_bulk, c.sb_bulk) {
        (false, _) => return String::new(),
        (true, false) => "the A scales of a stage by one bulk copy, no tensor map (b)",
        (true, true) => "both scales by bulk copies, no tensor map or copier warp (q)",
    };
    format!(
        "; {what}, at most {SMALL_ROWS_BULK_K} K blocks (on an H200 2-3 % under the map's \
         config at 128x32768x512 and 128x24576x1536 in two rounds; it costs the pipelined tile \
         at K = 16,384)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::fp8::gemm::choose;
    use crate::ops::fp8::ScaleMode;
    use crate::ops::gemm::DType;

    #[test]
    fn the_plan_names_the_choice_and_every_compiled_config() {
        let dev = DeviceInfo::h100_sxm();
        let p = Fp8Problem::new(4096, 7168, 16384, DType::Bf16, ScaleMode::Block);
        let plan = plan(&p, &dev, None, Fp8Rule::Waves).unwrap();
        assert!(plan
            .config
            .same_kernel(&choose_by(&p, &dev, Fp8Rule::Waves)));
        // the default rule (large) takes the 128 x 256 tile here, and says why
        let large = super::plan(&p, &dev, None, Fp8Rule::Large).unwrap();
        assert!(large.config.same_kernel(&choose(&p, &dev)));
        assert!(large.config.two_halves() && large.why.iter().any(|w| w.contains("128 x 256")));
        assert_eq!(
            plan.candidates.len(),
            configs(p.a, p.b, p.scale, true).len()
        );
        let best = plan
            .candidates
            .iter()
            .filter(|c| !c.config.is_new())
            .map(|c| c.cost)
            .min()
            .unwrap();
        assert!(plan
            .candidates
            .iter()
            .any(|c| c.config.same_kernel(&plan.config) && c.cost == best));
        assert_eq!(plan.splits, 1);
        assert!(plan.why.iter().any(|w| w.contains("no split-K")));
        assert!(plan.candidates.iter().all(|c| c.predicted_us > 0.0));
    }

    #[test]
    fn a_small_m_splits_k_and_says_so() {
        let dev = DeviceInfo::h100_sxm();
        let p = Fp8Problem::new(64, 2112, 7168, DType::Bf16, ScaleMode::Block);
        let plan = plan(&p, &dev, None, Fp8Rule::Waves).unwrap();
        assert!(plan.splits > 1);
        assert!(plan.why.iter().any(|w| w.contains("split-K into")));
        assert_eq!(plan.reduce, Reduce::Slots);
        let forced = plan_forced(&p, "128/2");
        assert_eq!((forced.config.bn, forced.splits), (128, 2));
        assert!(plan_err(&p, "200").contains("not compiled"));
        // the bytes rule: the 64-row tile, slices reduced atomically
        let bytes = super::plan(&p, &dev, None, Fp8Rule::Bytes).unwrap();
        assert_eq!(bytes.config.bm, 64, "{:?}", bytes.config);
        assert!(bytes.splits > 1 && bytes.reduce == Reduce::Atomic);
        assert!(bytes.why.iter().any(|w| w.contains("atomic")));
        assert!(bytes.predicted_us < plan.predicted_us);
    }

    fn plan_forced(p: &Fp8Problem, c: &str) -> Fp8Plan {
        plan(
            p,
            &DeviceInfo::h100_sxm(),
            Some(c.parse().unwrap()),
            Fp8Rule::Waves,
        )
        .unwrap()
    }

    #[test]
    fn the_lean_form_and_the_whole_tile_twins_say_why() {
        // ledger rows 200 and 203: the large rule's picks at 128x32768x512 and 64x7168x2048
        let dev = DeviceInfo::h100_sxm();
        let p = Fp8Problem::new(128, 32768, 512, DType::Bf16, ScaleMode::Block);
        let lean = plan(&p, &dev, None, Fp8Rule::Large).unwrap();
        assert!(
            lean.config.a_resident && lean.splits == 1,
            "{:?}",
            lean.config
        );
        assert!(lean.why.iter().any(|w| w.contains("lean short-K")));
        assert!(!lean.why.iter().any(|w| w.contains("slice(s), not the")));
        let p = Fp8Problem::new(64, 7168, 2048, DType::Bf16, ScaleMode::Block);
        let twin = plan(&p, &dev, None, Fp8Rule::Large).unwrap();
        assert_eq!(twin.config.whole, SMALL_M_WHOLE_ON);
        if SMALL_M_WHOLE_ON {
            assert!(twin.why.iter().any(|w| w.contains("whole-tile twin")));
        }
    }

    const SMALL_M_WHOLE_ON: bool = crate::ops::fp8::gemm::SMALL_M_WHOLE;

    fn plan_err(p: &Fp8Problem, c: &str) -> String {
        plan(
            p,
            &DeviceInfo::h100_sxm(),
            Some(c.parse().unwrap()),
            Fp8Rule::Waves,
        )
        .unwrap_err()
        .to_string()
    }
}
