//! The heuristic's whole choice for a problem: the cost model's pick, then the measured rules
//! (ping-pong, one unsplit wave, split pairs for few tiles with long K, the last-wave split).

use super::rows_on_lines;
use super::{Choice, Notes, Pairing, TileConfig, Widths, BM, GROUP_M};
use crate::ops::gemm::GemmProblem;

/// The ping-pong tile that beats the unsplit cooperative tile `coop` the heuristic would run, if
/// one does. Where rows lie on 128-byte lines, in two regimes (H100, ledger #38 and
/// #40, ratio to cuBLAS, cooperative -> ping-pong; f32 C, the register epilogue, gained as much:
/// 2048^3 0.854 -> 0.907, 512x4096x4096 0.884 -> 0.929):
/// - 128 x 256 tiles making at most one wave, 128 x 128 ones more than one (so both consumers of
///   most CTAs have a tile, one's epilogue under the other's K loop), K <= 2048: 2048^3 0.956 ->
///   0.969 (RC), 0.926 -> 0.980 (CR), 0.956 -> 0.980 (RR), 0.955 -> 0.974 (CC); 2048x2048x1024
///   0.912 -> 0.966; 1024x4096x1024 0.905 -> 0.974. At K >= 4096 it lost (1024x4096x4096
///   1.023 -> 0.973, 2048x2048x4096 1.030 -> 0.924).
/// - one wave of 128 x 128, 128 x 64 or 64 x 64 tiles, where the cooperative pick is that tile:
///   the same tiles on the same grid, each CTA's one tile computed by one consumer instead of two
///   (64 x 64: instead of two consumers taking alternate K blocks and adding up).
///   128 x 128: 512x4096x4096 0.916-0.953 -> 0.948-1.019 in the four layouts, 512x4096x14336 CR
///   0.970 -> 1.000, 128x14336x4096 kiln 0.7 % faster. 128 x 64: 1024^3 0.841-0.855 ->
///   0.922-0.982 in the four layouts, 256x4096x4096 0.946 -> 0.994, 512x2048x4096 0.966 -> 1.064.
///   64 x 64: 128x4096x4096 kiln 1.6-4.7 % faster in the four layouts, 128x4096x14336 3.0 %,
///   64x4096x4096 2.0 %, 512^3 -0.4 to +3.3 %.
///
/// It lost at every shape of several waves timed but 4096x4096x1024 (4096^3 1.002 -> 0.869: its
/// 37 % more L2 traffic costs ~7 % of clock at the 700 W cap), in a bigger tile than the
/// cooperative pick (128x4096x4096 1.005 -> 0.924 with 128 x 64 instead of 64 x 64) and by
/// 30-50 % where rows straddle lines (4000^3, 4096x4096x4088). Off lines it takes only one
/// wave's worth of 128 x 64 tiles (below).
pub fn pingpong_for(p: &GemmProblem, coop: TileConfig, sm_count: u32) -> Option<TileConfig> {
    if !rows_on_lines(p) {
        // Rows off lines: where one wave of 128 x 128 tiles covers what the cooperative pick
        // would run as 128 x 64 tiles, the 128 x 128 ping-pong tile, which loads a third fewer
        // straddled rows per output (H100, ledger #65, us: 1000^3 12.3 against 14.4,
        // 1000x1000x4000 24.6 against 28.3).
        return match coop {
            TileConfig::TINY if TileConfig::PINGPONG.cluster_tiles(p.m, p.n) <= sm_count => {
                Some(TileConfig::PINGPONG)
            }
            _ => None,
        };
    }
    match coop {
        TileConfig::SMALL => Some(TileConfig::PINGPONG),
        TileConfig::TINY => Some(TileConfig::PINGPONG64),
        // 64 < M < 104 with a K-major A: the second 64-row tile would be over a third zero
        // fill, which TMA does not do for free; one 128-row tile loads an A box trimmed to M
        // (`a_box_rows`), on half the CTAs. H100, ledger #55 (us, 64x64 -> 128x64 ping-pong):
        // at N = K = 4096 (64 tiles) M = 72 24.1 -> 18.3, 80 22.8 -> 18.1, 96 20.4 -> 18.2,
        // 100 18.9 -> 18.1, but 110 17.5 -> 18.3; 96x4096x14336 61.0 -> 51.5. With 32 tiles
        // (96x2048x4096) 13.9 -> 16.0: too few CTAs to stream B, so at least 48 % of the SMs.
        TileConfig::TINY64
            if p.m > 64
                && p.m < 104
                && p.layout.a_k_major()
                && TileConfig::PINGPONG64.cluster_tiles(p.m, p.n) * 100 >= sm_count * 48 =>
        {
            Some(TileConfig::PINGPONG64)
        }
        TileConfig::TINY64 => Some(TileConfig::PINGPONG_TINY),
        TileConfig::LARGE
            if p.k <= 2048
                && TileConfig::LARGE.cluster_tiles(p.m, p.n) <= sm_count
                && TileConfig::PINGPONG.cluster_tiles(p.m, p.n) > sm_count =>
        {
            Some(TileConfig::PINGPONG)
        }
        _ => None,
    }
}

/// One tile-row (M <= 128) where the split-K cost model picks split 128 x 128 tiles and one wave
/// of 128 x 64 tiles covers the problem: those, unsplit, in the ping-pong schedule. The model
/// charges split-K's partials too little at these memory-bound shapes. H100, ledger #66 (us,
/// split 128 x 128 -> 128 x 64 ping-pong): 128x5120x5120 29.1 -> 25.0, 128x4608x4096 24.8 ->
/// 20.4, 128x6144x6144 36.4 -> 32.5, 128x8192x8192 57.1 -> 52.5, 128x5120x13824 59.1 -> 57.8,
/// 96x5120x5120 28.9 -> 24.9; but 128x8192x28672 168.5 -> 175.6, hence K <= 16384 (not measured
/// between 13824 and 28672). Rows on lines only, where the ping-pong tile was measured.
fn unsplit_one_wave(
    p: &GemmProblem,
    tile: TileConfig,
    splits: u32,
    sm_count: u32,
) -> (TileConfig, u32) {
    let one_wave = TileConfig::PINGPONG64.cluster_tiles(p.m, p.n) <= sm_count;
    if tile == TileConfig::SMALL
        && splits > 1
        && p.m <= BM as usize
        && p.k <= 16384
        && one_wave
        && rows_on_lines(p)
    {
        (TileConfig::PINGPONG64, 1)
    } else {
        (tile, splits)
    }
}

/// Few 64 x 64 tiles, long K: where one wave of them covers the problem on at most a third of the
/// SMs with K >= 8192, the 128 x 128 tile split in K ([`TileConfig::best_splits`]) replaces it,
/// where the cost model puts it at least 10 % under the 64 x 64 wave. The one-wave rule was
/// measured where the 64 x 64 tiles filled the GPU (#19: 512^3, 128 x 4096 x 4096); with 11-42
/// of them and 130-250 K blocks each every busy SM streams its whole K alone, at ~90 GB/s
/// (129x334x13376 RR f16: 18 CTAs, 3.3 MB each in ~38 us), and a third of the SMs at that rate is
/// about what HBM gives: below it the SMs, not the memory, bound the time. H200, 7fdf675 (us, 64 x
/// 64 wave -> 128 x 128 split, cuBLAS): 129x334x13376 RR f16 46.3 -> 37.3 (22.4), 513x97x12911 CC
/// 55.6 -> 41.3 (28.9), 58x641x15872 CC 53.2 -> 38.1 (36.7), 429x286x10390 CC 52.8 -> 41.9
/// (40.7); but 129x127x4095 RR 24.5 -> 28.3 (its two copies and 64 K blocks: too short to pay
/// for the partial sums), hence K >= 8192. The 128 x 64 tile (twice the CTAs; the model's pick)
/// was not timed. `KILN_WGMMA_LONGK=0` keeps the 64 x 64 wave.
pub(super) fn few_tiles_long_k_split(
    p: &GemmProblem,
    tile: TileConfig,
    sm_count: u32,
) -> Option<(TileConfig, u32)> {
    let tiles64 = TileConfig::TINY64.cluster_tiles(p.m, p.n);
    if tile.bm != 64 || p.k < 8192 || 3 * tiles64 > sm_count {
        return None;
    }
    let wave64 = TileConfig::TINY64.cost(p.m, p.n, p.k, sm_count, 1);
    let cfg = TileConfig::SMALL;
    let s = cfg.best_splits(p.m, p.n, p.k, sm_count);
    (s > 1 && 10 * cfg.cost(p.m, p.n, p.k, sm_count, s) <= 9 * wave64).then_some((cfg, s))
}

/// Few tiles, long K, rows at 16-byte alignment: a 128 x 192 or 128 x 256 pair with every tile
/// split into 2-4 K slices, as many clusters as fit in one wave, where the cooperative pick would
/// leave SMs idle or run single CTAs that each load their straddled rows. Applies where some rows
/// are at 16-byte alignment only ([`Pairing::Always`]), at least six tile-rows, at most one wave
/// of 128 x 128 tiles and K >= 4000. H100, ledger #78 (us, default -> this): RC
/// 1000x1000x4008 30.0 -> 28.5, 760x1000x4008 30.0 -> 26.8, 1240x1000x4008 38.0 -> 31.9; CR
/// 1000x1000x4000 37.2 -> 29.0, 1000x1000x8000 59.3 -> 40.3, 1000x2000x4000 42.3 -> 36.3,
/// 1000x1512x6000 65.7 -> 40.9, 1000x520x4000 25.8 -> 25.4; CC 1000x1000x4000 29.2 -> 28.3. With
/// five tile-rows (one cluster row in three half empty) it lost 7 % at 520x1000x4000 CR; at
/// K <= 3000 it tied or lost (1000x1000x2008 RC 18.2 -> 22.3). A tile with a fifth or more of
/// its columns past N is not weighed: 1400x600x4008 RC (768 columns for 600) lost 3 % (#79).
///
/// Among the candidates, the lowest of a fit to those runs (1000x1000x4000 CR), us:
/// `14.5 + 3.8e-5 BN K / s + 0.0133 BN (s - 1)`: the K share of one CTA, plus a serial
/// reduction of `s - 1` fp32 partial tiles the last slice reads back. It ranked the measured best
/// first at every shape with six tile-rows or more. Ledger #79 (held out, us): RC
/// 1000x1000x6008 42.3 -> 38.2, 800x800x12008 67.6 -> 53.2, 1000x1000x16008 99.7 -> 61.1,
/// 2000x500x8008 61.8 -> 46.7; CR 888x1000x5000 42.8 -> 34.8; RR 1000x2000x5000 49.8 -> 41.0;
/// CC 1240x1240x4008 43.9 -> 35.7.
fn few_tiles_long_k(p: &GemmProblem, pairing: Pairing, sm_count: u32) -> Option<(TileConfig, u32)> {
    let tile_rows = p.m.div_ceil(BM as usize);
    if pairing != Pairing::Always
        || tile_rows < 6
        || p.k < 4000
        || TileConfig::PINGPONG.cluster_tiles(p.m, p.n) > sm_count
    {
        return None;
    }
    let slots = sm_count / 2;
    let modelled = |cfg: TileConfig, s: u32| {
        let bn = cfg.bn as f64;
        14.5 + 3.8e-5 * bn * p.k as f64 / s as f64 + 0.0133 * bn * (s - 1) as f64
    };
    [TileConfig::MEDIUM_PAIR, TileConfig::LARGE_PAIR]
        .into_iter()
        .flat_map(|cfg| (2..=4).map(move |s| (cfg, s)))
        .filter(|&(cfg, s)| {
            let used = p.n as f64 / (cfg.tiles(p.m, p.n).1 * cfg.bn) as f64;
            cfg.cluster_tiles(p.m, p.n) * s <= slots && used >= 0.8
        })
        .min_by(|&(a, s), &(b, t)| modelled(a, s).total_cmp(&modelled(b, t)))
}

impl Choice {
    /// The heuristic's choice: [`TileConfig::choose`] with the default group size; a 128x256 or
    /// 128x192 pick (single or paired) whose last wave is at most half full gets that wave split
    /// ([`TileConfig::tail_splits`]). The 224-wide tile is weighed as [`WIDTHS_BY_DEFAULT`]
    /// says ([`Choice::heuristic_with`] to choose).
    pub fn heuristic(p: &GemmProblem, sm_count: u32, pairs: bool) -> Choice {
        Choice::heuristic_with(p, sm_count, pairs, WIDTHS_BY_DEFAULT)
    }

    /// [`Choice::heuristic`], weighing the 224-wide tile when `widths`.
    pub fn heuristic_with(p: &GemmProblem, sm_count: u32, pairs: bool, widths: bool) -> Choice {
        Choice::heuristic_noted(p, sm_count, (pairs, widths, true), &mut Notes::off())
    }

    /// [`Choice::heuristic_with`], saying in `notes` which of its rules applied; `long_k`:
    /// [`few_tiles_long_k_split`] applies (`KILN_WGMMA_LONGK`).
    pub fn heuristic_noted(
        p: &GemmProblem,
        sm_count: u32,
        (pairs, widths, long_k): (bool, bool, bool),
        notes: &mut Notes,
    ) -> Choice {
        // Pairs (multicast B) only where rows straddle 128-byte lines (4096 x 4096 x 4088 ran
        // 0.77x cuBLAS in single CTAs, 1.0x in pairs). Elsewhere single CTAs,
        // whose epilogue goes out under the next tile's mainloop (all four chunks; pairs defer
        // one): H100, ledger #22, ratio to cuBLAS pairs -> single: 4096^3 0.990 -> 1.011,
        // 8192^3 0.968 -> 0.981, 4096x4096x1024 0.896 -> 0.965, 8192x14336x4096 0.967 -> 0.984.
        let pairing = Pairing::of(p, pairs);
        let (tile, splits) = TileConfig::choose_noted(
            p.m,
            p.n,
            p.k,
            sm_count,
            pairing,
            Widths::of(p, widths),
            notes,
        );
        let (tile0, splits0) = (tile, splits);
        let (tile, splits) = unsplit_one_wave(p, tile, splits, sm_count);
        if (tile, splits) != (tile0, splits0) {
            notes.add(|| {
                format!(
                    "one tile-row and one wave of 128x64 tiles: {} rather than {}",
                    tile.label(splits),
                    tile0.label(splits0)
                )
            });
        }
        let (tile, splits) = match few_tiles_long_k_split(p, tile, sm_count).filter(|_| long_k) {
            Some((t, s)) => {
                notes.add(|| {
                    format!(
                        "one wave of {} 64x64 tiles would leave most SMs idle at K = {}: {} \
                         (KILN_WGMMA_LONGK=0 keeps the 64x64 wave)",
                        TileConfig::TINY64.cluster_tiles(p.m, p.n),
                        p.k,
                        t.label(s)
                    )
                });
                (t, s)
            }
            None => (tile, splits),
        };
        let (tile, splits) = match few_tiles_long_k(p, pairing, sm_count) {
            Some((t, s)) => {
                notes.add(|| {
                    format!(
                        "rows at 16-byte alignment, at most a wave of 128x128 tiles, K >= 4000: \
                         {} (one wave of clusters) rather than {}",
                        t.label(s),
                        tile.label(splits)
                    )
                });
                (t, s)
            }
            None => (tile, splits),
        };
        // The tiles wider than 128 split only a last wave that is at most half full. A pair
        // (rows off lines) splits it as a pair: single CTAs lose far more there than a sparse
        // last wave does (H100, ledger #63 and #67, us: 6000x3000x3000 single with the last wave split
        // 234.1, pair unsplit 174.0, pair with it split in 2 166.9; 5000^3 387.2 -> 361.7 split
        // in 5, the slices `tail_splits` gives both).
        let tail = (tile.bn > 128 && splits == 1)
            .then(|| tile.tail_splits(p.m, p.n, p.k, sm_count))
            .flatten();
        if let Some(t) = tail {
            notes.add(|| format!("the last wave is at most half full: its tiles split in {t}"));
        }
        let splits = tail.unwrap_or(splits);
        let coop = tile;
        let tile = match splits {
            1 => pingpong_for(p, tile, sm_count).unwrap_or(tile),
            _ => tile,
        };
        if tile != coop {
            notes.add(|| {
                format!(
                    "the ping-pong schedule beats the cooperative {} here: {}",
                    coop.label(1),
                    tile.label(1)
                )
            });
        }
        Choice {
            tile,
            splits,
            group_m: GROUP_M,
            tail: tail.is_some(),
            stream_k: false,
            swap: false,
        }
    }
}

/// Whether the heuristic weighs the 224-wide tile by default (N a multiple of 224, two
/// tile-rows, rows on lines, a K-major B: [`TileConfig::choose`]). On since both widths were
/// verified on an H100 and timed (ledger #72, 2026-11-23): 128 x 224 is
/// 5-10 % faster there; 128 x 168 is forced only.
pub const WIDTHS_BY_DEFAULT: bool = true;

#[cfg(test)]
mod tests {
    use super::super::bf16;
    use super::*;
    use crate::ops::gemm::{DType, Layout};

    #[test]
    fn one_tile_row_takes_one_unsplit_wave_over_split_k() {
        let h = |m, n, k| Choice::heuristic(&bf16(m, n, k, Layout::RC), 132, true);
        for (m, n, k) in [
            (128, 5120, 5120),
            (96, 5120, 5120),
            (128, 8192, 8192),
            (128, 4608, 4096),
        ] {
            let c = h(m, n, k);
            assert_eq!(
                (c.tile, c.splits),
                (TileConfig::PINGPONG64, 1),
                "{m}x{n}x{k}"
            );
        }
        // very long K keeps split-K; two tile-rows, or more than a wave of 128 x 64 tiles, too
        for (m, n, k) in [(128, 8192, 28672), (256, 5120, 5120), (128, 14336, 4096)] {
            assert_ne!(h(m, n, k).tile, TileConfig::PINGPONG64, "{m}x{n}x{k}");
        }
        // issue 3's set: untouched (M = 128 there takes 64 x 64 tiles or two waves)
        for p in crate::harness::suite::target_problems(&Layout::ALL) {
            let pick = TileConfig::choose(p.m, p.n, p.k, 132, Pairing::of(&p, true), Widths::Off);
            assert_eq!(
                unsplit_one_wave(&p, pick.0, pick.1, 132),
                pick,
                "{}x{}x{}",
                p.m,
                p.n,
                p.k
            );
        }
    }

    #[test]
    fn pingpong_where_it_measured_faster() {
        let h = |m, n, k| Choice::heuristic(&bf16(m, n, k, Layout::RC), 132, true).tile;
        for (m, n, k) in [(2048, 2048, 2048), (2048, 2048, 1024), (1024, 4096, 1024)] {
            assert_eq!(h(m, n, k), TileConfig::PINGPONG, "{m}x{n}x{k}");
        }
        // long K or several waves of 128 x 256 tiles: cooperative
        for (m, n, k) in [(2048, 2048, 4096), (4096, 4096, 1024), (4096, 4096, 4096)] {
            assert!(!h(m, n, k).pingpong, "{m}x{n}x{k}");
        }
        // one wave of 128 x 128 or 128 x 64 tiles: one consumer per tile instead of two
        for (m, n, k) in [(512, 4096, 4096), (512, 4096, 14336), (128, 14336, 4096)] {
            assert_eq!(h(m, n, k), TileConfig::PINGPONG, "{m}x{n}x{k}");
        }
        for (m, n, k) in [(1024, 1024, 1024), (256, 4096, 4096), (512, 2048, 4096)] {
            assert_eq!(h(m, n, k), TileConfig::PINGPONG64, "{m}x{n}x{k}");
        }
        for (m, n, k) in [(512, 512, 512), (128, 4096, 4096), (128, 4096, 14336)] {
            assert_eq!(h(m, n, k), TileConfig::PINGPONG_TINY, "{m}x{n}x{k}");
        }
        // M between 64 and 104: one 128-row tile with A's box trimmed to M, not two 64-row
        // tiles, the second mostly zero fill; with less fill, or too few 128-row tiles to fill
        // half the SMs, the 64-row tiles stay
        for (m, n, k) in [(72, 4096, 4096), (100, 4096, 4096), (96, 4096, 14336)] {
            assert_eq!(h(m, n, k), TileConfig::PINGPONG64, "{m}x{n}x{k}");
        }
        for (m, n, k) in [(110, 4096, 4096), (120, 4096, 4096), (96, 2048, 4096)] {
            assert_eq!(h(m, n, k), TileConfig::PINGPONG_TINY, "{m}x{n}x{k}");
        }
        // rows off 128-byte lines: cooperative; f32 C and beta != 0 take ping-pong as 16-bit C does
        let large = TileConfig::LARGE;
        let mut odd = bf16(2048, 2048, 2048, Layout::RC);
        odd.lda = 2056;
        assert_eq!(pingpong_for(&odd, large, 132), None);
        assert_eq!(pingpong_for(&odd, TileConfig::SMALL, 132), None);
        let mut f32c = bf16(2048, 2048, 2048, Layout::RC);
        f32c.output = DType::F32;
        assert_eq!(pingpong_for(&f32c, large, 132), Some(TileConfig::PINGPONG));
        let mut beta = bf16(2048, 2048, 2048, Layout::RC);
        beta.beta = 1.0;
        assert_eq!(pingpong_for(&beta, large, 132), Some(TileConfig::PINGPONG));
        // split tiles stay cooperative (the ping-pong kernel does not split K)
        for m in [128, 256, 512, 1024, 2048] {
            for k in [1024, 4096, 14336] {
                let c = Choice::heuristic(&bf16(m, 4096, k, Layout::RC), 132, true);
                assert!(!c.tile.pingpong || c.splits == 1, "{m}x4096x{k}");
            }
        }
        // the ping-pong tile is never split
        let c = Choice::heuristic(&bf16(2048, 2048, 2048, Layout::RC), 132, true);
        assert_eq!((c.splits, c.tail, c.stream_k), (1, false, false));
    }

    #[test]
    fn few_tiles_with_long_k_at_16_byte_rows_run_split_pairs() {
        let c = |m, n, k, l| {
            let c = Choice::heuristic(&bf16(m, n, k, l), 132, true);
            (c.tile, c.splits, c.tail)
        };
        let medium = |s| (TileConfig::MEDIUM_PAIR, s, false);
        let large = |s| (TileConfig::LARGE_PAIR, s, false);
        // the best configs of ledger #78's sweeps, each within one wave of clusters
        assert_eq!(c(1000, 1000, 4008, Layout::RC), medium(2));
        assert_eq!(c(1000, 1000, 4000, Layout::CR), medium(2));
        assert_eq!(c(1000, 1000, 4000, Layout::CC), medium(2));
        assert_eq!(c(1000, 1000, 8000, Layout::CR), large(4));
        assert_eq!(c(1000, 2000, 4000, Layout::CR), large(2));
        assert_eq!(c(760, 1000, 4008, Layout::RC), medium(3));
        assert_eq!(c(1240, 1000, 4008, Layout::RC), medium(2));
        assert_eq!(c(1000, 1512, 6000, Layout::CR), medium(2));
        // one wave of clusters at most: 48 + 8 clusters of 128x192 over 66 slots
        assert_eq!(c(1000, 1240, 4000, Layout::CR), medium(2));
        // not with five tile-rows, a fifth of the columns wasted, K under 4000, rows 32-byte
        // aligned, more than a wave of 128x128 tiles, or pairs turned off
        for (m, n, k, l) in [
            (520, 1000, 4000, Layout::CR),
            (1400, 600, 4008, Layout::RC),
            (1000, 1000, 3000, Layout::RC),
            (1000, 1000, 4000, Layout::RC),
            (2000, 2000, 4008, Layout::RC),
        ] {
            let got = c(m, n, k, l);
            assert!(
                !(got.0.cluster == 2 && got.1 > 1),
                "{m}x{n}x{k} {l:?}: {got:?}"
            );
        }
        let p = bf16(1000, 1000, 4008, Layout::RC);
        assert_eq!(Choice::heuristic(&p, 132, false).tile.cluster, 1);
        // the cap: every split pair the rule picks fits in one wave of clusters
        for m in (600..=2000).step_by(40) {
            for k in [4008, 6008, 16008] {
                let p = bf16(m, 1000, k, Layout::RC);
                if let Some((t, s)) = few_tiles_long_k(&p, Pairing::of(&p, true), 132) {
                    assert!(t.cluster_tiles(m, 1000) * s <= 66, "{m}x1000x{k}");
                    assert!((2..=4).contains(&s));
                }
            }
        }
    }

    #[test]
    fn a_sparse_last_wave_is_split() {
        let h = |m, n, k| Choice::heuristic(&bf16(m, n, k, Layout::RC), 132, true);
        // 2004 tiles: 24 in the 16th wave, split in 5 (measured best on an H200)
        let c = h(512, 128256, 4096);
        assert_eq!((c.tile, c.splits, c.tail), (TileConfig::LARGE, 5, true));
        // 8192 tiles: 8 in the 63rd wave
        assert!(h(16384, 16384, 16384).tail);
        // whole waves, a last wave over half full, a single wave: unchanged
        for (m, n, k) in [(4096, 8448, 4096), (4096, 4096, 4096), (2048, 2048, 2048)] {
            assert!(!h(m, n, k).tail, "{m}x{n}x{k}");
        }
        // every layout splits a sparse last wave
        assert!(Choice::heuristic(&bf16(512, 128256, 4096, Layout::CR), 132, true).tail);
        // too shallow to split
        assert_eq!(TileConfig::LARGE.tail_splits(512, 128256, 256, 132), None);
    }
}
