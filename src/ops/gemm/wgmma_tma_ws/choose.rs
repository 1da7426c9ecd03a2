//! The cost model's pick of a tile shape and split factor ([`TileConfig::choose`]), with the
//! rules for the wide tiles and for pairs of CTAs from how the rows of A and B lie.

use super::{Notes, TileConfig, BM};
use crate::ops::gemm::GemmProblem;

impl TileConfig {
    /// (tile config, split-K factor). From the widest tile down (256, 192, 128, 64), a narrower one
    /// (at its best split) replaces the current pick only where it takes clearly (10 %) less
    /// modelled time: wider tiles reuse each A tile more, so they win ties. Pairs of CTAs
    /// (multicast B) for the 256- or 192-wide tile as `pairing` allows, with at least two
    /// tile-rows.
    ///
    /// `widths`: whether to weigh the 224-wide tile too ([`Widths`]), which makes whole waves
    /// where the multiples of 64 do not. The 168-wide tile is never weighed: it runs only when
    /// forced.
    pub fn choose(
        m: usize,
        n: usize,
        k: usize,
        sm_count: u32,
        pairing: Pairing,
        widths: Widths,
    ) -> (TileConfig, u32) {
        Self::choose_noted(m, n, k, sm_count, pairing, widths, &mut Notes::off())
    }

    /// [`TileConfig::choose`], saying in `notes` what it weighed and why it picked.
    #[allow(clippy::too_many_arguments)]
    pub fn choose_noted(
        m: usize,
        n: usize,
        k: usize,
        sm_count: u32,
        pairing: Pairing,
        widths: Widths,
        notes: &mut Notes,
    ) -> (TileConfig, u32) {
        let mut pick = (TileConfig::LARGE, 1);
        let mut pick_cost = TileConfig::LARGE.cost(m, n, k, sm_count, 1);
        notes.add(|| {
            format!(
                "cost model (block-steps): {} {pick_cost}",
                TileConfig::LARGE.label(1)
            )
        });
        for cfg in [
            TileConfig::WIDE,
            TileConfig::N224,
            TileConfig::MEDIUM,
            TileConfig::SMALL,
            TileConfig::TINY,
        ] {
            // The 224-wide tile only where N is a multiple of 224, rows are on lines (single
            // CTAs: it has no pair variant), there are two tile-rows and B is K-major. H100,
            // ledger #72 (us, default -> 128 x 224), RC: 1024x3584x18944 185.9 -> 171.5,
            // 2048x3584x3584 77.6 -> 70.5, 2048x3584x18944 367 -> 341, 4096x3584x18944 758 ->
            // 697, 1024x7168x7168 146.8 -> 134.5, 512x14336x4096 89.2 -> 80.7; but
            // 1024x13824x5120 188.4 -> 190.5, 1x28672x8192 165.1 -> 164.9; an MN-major B
            // (whole 64-column boxes: 256 columns loaded) -7 to +7 %: CR 2048x3584x18944 369 ->
            // 391, RR 4096x3584x18944 721 -> 763, RR 512x14336x4096 89.5 -> 83.0 (ledger #72).
            if cfg == TileConfig::N224 {
                let why = match widths {
                    Widths::Off => Some("KILN_WGMMA_WIDTHS=0"),
                    _ if pairing != Pairing::Never => {
                        Some("rows off lines: it runs in single CTAs only")
                    }
                    _ if !n.is_multiple_of(224) => Some("it needs N a multiple of 224"),
                    _ if m <= BM as usize => Some("one tile-row: B's bandwidth bounds it"),
                    Widths::MnMajorB => Some("an MN-major B: timed 7 % slower to 7 % faster"),
                    Widths::KMajorB => None,
                };
                if let Some(why) = why {
                    notes.add(|| format!("{} not weighed ({why})", cfg.label(1)));
                    continue;
                }
            }
            // The 320-wide tile only where it wastes no columns, makes at most one wave, and runs
            // in single CTAs (rows on lines; it has no pair variant). H100, ledger #69 (us,
            // 128 x 192 or 256 -> 128 x 320): one wave, 1024x5120x5120 83.2 -> 70.8,
            // 1024x5120x13824 204.7 -> 179.1; two or more, 1024x10240x4096 111.1 -> 113.3,
            // 4096x2560x2560 69.6 -> 73.0, 4096x6400x6400 419.2 -> 426.6.
            if cfg == TileConfig::WIDE
                && (!n.is_multiple_of(320)
                    || pairing != Pairing::Never
                    || cfg.cluster_tiles(m, n) > sm_count)
            {
                notes.add(|| {
                    format!(
                        "{} not weighed (it needs N a multiple of 320, rows on lines, one wave)",
                        cfg.label(1)
                    )
                });
                continue;
            }
            let s = cfg.best_splits(m, n, k, sm_count);
            let c = cfg.cost(m, n, k, sm_count, s);
            let taken = c * 10 < pick_cost * 9;
            notes.add(|| {
                format!(
                    "{} {c}{}",
                    cfg.label(s),
                    if taken {
                        " (10 % under the pick so far: taken)"
                    } else {
                        ""
                    }
                )
            });
            if taken {
                pick = (cfg, s);
                pick_cost = c;
            }
        }
        notes.add(|| {
            format!(
                "{} never weighed: forced only (KILN_WGMMA_CFG=n168), 2-4x slower with an \
                 MN-major B (ledger #72)",
                TileConfig::N168.label(1)
            )
        });
        // Pairs where there are two tile-rows to pair and, unless rows are at 16-byte alignment,
        // more than one wave (H100, ledger #65, us, one wave: 2048x2048x1000 (2000-byte rows)
        // 19.9 in pairs against 22.8 single, 2000^3 (4000-byte rows) 29.5 against 28.8; H200,
        // rows on lines: 2048^3 591-597 TF in pairs against 608).
        let (tm, tn) = pick.0.tiles(m, n);
        let paired = match pairing {
            Pairing::Never => false,
            Pairing::SeveralWaves => tm >= 2 && tm * tn > sm_count,
            Pairing::Always => tm >= 2,
        };
        let single = pick.0;
        if paired {
            match pick.0 {
                TileConfig::LARGE => pick = (TileConfig::LARGE_PAIR, 1),
                TileConfig::MEDIUM => pick = (TileConfig::MEDIUM_PAIR, 1),
                _ => {}
            }
        }
        notes.add(|| {
            let rule = match pairing {
                Pairing::Never => "rows on 128-byte lines (or pairs off): single CTAs",
                Pairing::SeveralWaves => {
                    "rows off lines, 32-byte aligned: pairs with two tile-rows and more than one wave"
                }
                Pairing::Always => "rows at 16-byte alignment: pairs with two tile-rows",
            };
            if pick.0 != single {
                format!("{rule}: {}", pick.0.label(1))
            } else if pairing != Pairing::Never {
                format!("{rule}: {} stays single", single.label(1))
            } else {
                rule.to_string()
            }
        });
        // One wave of 64 x 64 tiles beats every 128-row tile (and split-K) measured: more SMs
        // busy, no workspace; with a second wave it loses (H100, ledger #19: 1024^3 0.83x
        // against 0.98x, 256x4096x4096 0.84x against 0.99x).
        if TileConfig::TINY64.cluster_tiles(m, n) <= sm_count {
            notes.add(|| "one wave of 64x64 tiles covers the problem: 64x64".into());
            pick = (TileConfig::TINY64, 1);
        }
        pick
    }
}

/// Whether [`TileConfig::choose`] weighs the 224-wide tile, and with which B: it takes only a
/// K-major B; an MN-major B loads whole 64-column boxes (256 columns for 224), timed from 7 %
/// faster to 7 % slower (ledger #72).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Widths {
    Off,
    KMajorB,
    MnMajorB,
}

impl Widths {
    /// `on` (the rule, [`WIDTHS_BY_DEFAULT`] or `KILN_WGMMA_WIDTHS`) for `p`'s B.
    pub fn of(p: &GemmProblem, on: bool) -> Widths {
        match (on, p.layout.b_k_major()) {
            (false, _) => Widths::Off,
            (true, true) => Widths::KMajorB,
            (true, false) => Widths::MnMajorB,
        }
    }
}

/// Where [`TileConfig::choose`] may pair CTAs (multicast B), from how the rows of A and B lie
/// ([`Pairing::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pairing {
    /// Rows on 128-byte lines, or pairs turned off: single CTAs.
    Never,
    /// Rows off lines, at 32-byte alignment or better: pairs with more than one wave of tiles.
    SeveralWaves,
    /// Some rows at 16-byte alignment only, each 128-byte box row straddling two lines and five
    /// sectors: pairs at one wave too.
    Always,
}

impl Pairing {
    /// The pairing for `p`'s leading dimensions, when pairs are allowed at all.
    pub fn of(p: &GemmProblem, allowed: bool) -> Pairing {
        match (allowed, rows_aligned_to(p, 128), rows_aligned_to(p, 32)) {
            (false, _, _) | (_, true, _) => Pairing::Never,
            (true, false, true) => Pairing::SeveralWaves,
            (true, false, false) => Pairing::Always,
        }
    }
}

/// Whether every row of A and B starts on a 128-byte line (the leading dimensions are multiples
/// of 128 bytes), so that a 128-byte TMA box row is one line.
pub fn rows_on_lines(p: &GemmProblem) -> bool {
    rows_aligned_to(p, 128)
}

/// Whether the row strides of A and B are both multiples of `bytes`.
fn rows_aligned_to(p: &GemmProblem, bytes: usize) -> bool {
    let es = p.input.size();
    (p.lda * es).is_multiple_of(bytes) && (p.ldb * es).is_multiple_of(bytes)
}

#[cfg(test)]
mod tests {
    use super::super::Epilogue;
    use super::super::{
        b_box_rows, b_loads_per_cluster, bf16, with_epilogue, Choice, GemmOverrides,
    };
    use super::*;
    use crate::ops::gemm::Layout;

    #[test]
    fn small_tiles_only_when_they_cut_waves() {
        let c = |m, n, k, pairs: bool| {
            let pairing = match pairs {
                true => Pairing::SeveralWaves,
                false => Pairing::Never,
            };
            TileConfig::choose(m, n, k, 132, pairing, Widths::Off)
        };
        assert_eq!(c(8192, 8192, 8192, false), (TileConfig::LARGE, 1));
        assert_eq!(c(4096, 4096, 4096, false), (TileConfig::LARGE, 1));
        assert_eq!(c(4096, 4096, 4096, true), (TileConfig::LARGE_PAIR, 1));
        // one wave: pairs only for rows at 16-byte alignment
        assert_eq!(c(2048, 2048, 2048, true), (TileConfig::LARGE, 1));
        let one_wave = TileConfig::choose(2048, 2048, 2048, 132, Pairing::Always, Widths::Off);
        assert_eq!(one_wave, (TileConfig::LARGE_PAIR, 1));
        assert_eq!(c(1024, 1024, 1024, true), (TileConfig::TINY, 1));
        // one tile-row: nothing to pair
        assert_eq!(c(128, 65536, 4096, true), (TileConfig::LARGE, 1));
        // one wave of 64 x 64 tiles: that tile, unsplit (its consumers share the K blocks)
        for (m, n, k) in [
            (128, 128, 128),
            (512, 512, 512),
            (128, 4096, 4096),
            (128, 4096, 14336),
        ] {
            assert_eq!(c(m, n, k, true), (TileConfig::TINY64, 1), "{m}x{n}x{k}");
        }
        // more than a wave of them: the 128-row tiles
        assert_eq!(c(256, 4096, 4096, true).0.bm, 128);
        assert_eq!(c(128, 14336, 4096, true).1, 1);
        // few 128-row tiles, long K: split K across the idle SMs
        assert_eq!(TileConfig::TINY.best_splits(128, 4096, 4096, 132), 2);
        assert_eq!(TileConfig::SMALL.best_splits(128, 4096, 14336, 132), 4);
        assert_eq!(TileConfig::TINY64.best_splits(128, 4096, 14336, 132), 1);
        let all = TileConfig::SMALL.split_plan(128, 4096, 4, false, 132);
        assert_eq!((all.splits, all.split_from, all.grid), (4, 0, 128));
        assert_eq!(all.workspace_bytes(128), 32 * 4 * 128 * 128 * 4);
        // the last wave only: 1002 pair tiles on 66 clusters leave 12 for a 16th wave, whose
        // 5 slices each fill 60 of its 66 slots
        let tail = TileConfig::LARGE_PAIR.split_plan(512, 128256, 5, true, 66);
        assert_eq!(
            (
                tail.splits,
                tail.split_from,
                tail.split_block_tiles,
                tail.grid
            ),
            (5, 990, 24, 132)
        );
        // whole waves: nothing to split
        let whole = TileConfig::LARGE.split_plan(4096, 8448, 4, true, 132);
        assert_eq!((whole.splits, whole.workspace_bytes(256)), (1, 0));
        // never more slices than K blocks
        assert_eq!(TileConfig::SMALL.best_splits(128, 128, 64, 132), 1);
    }

    #[test]
    fn pairs_only_where_rows_straddle_lines() {
        let h = |m, n, k| Choice::heuristic(&bf16(m, n, k, Layout::RC), 132, true).tile;
        assert_eq!(h(4096, 4096, 4096), TileConfig::LARGE);
        assert_eq!(h(8192, 8192, 8192), TileConfig::LARGE);
        // K 4088: 8176-byte rows, 7 in 8 box rows straddle two lines
        assert_eq!(h(4096, 4096, 4088), TileConfig::LARGE_PAIR);
        assert!(!rows_on_lines(&bf16(4096, 4096, 4080, Layout::RC)));
        assert!(rows_on_lines(&bf16(4096, 4096, 4096, Layout::CR)));
        // one wave of tiles pairs too where rows are at 16-byte alignment: 2048x2048x1000
        // (2000-byte rows), not 2000^3 (4000-byte rows, 32-byte aligned)
        assert_eq!(h(2048, 2048, 1000), TileConfig::LARGE_PAIR);
        assert_eq!(h(2000, 2000, 2000), TileConfig::LARGE);
        let p = |k| bf16(4096, 4096, k, Layout::RC);
        assert_eq!(Pairing::of(&p(4096), true), Pairing::Never);
        assert_eq!(Pairing::of(&p(4080), true), Pairing::SeveralWaves);
        assert_eq!(Pairing::of(&p(4088), true), Pairing::Always);
        assert_eq!(Pairing::of(&p(4088), false), Pairing::Never);
        // and one wave of 128 x 64 tiles becomes one of 128 x 128 ping-pong tiles
        for (m, n, k) in [(1000, 1000, 1000), (1000, 1000, 4000)] {
            assert_eq!(h(m, n, k), TileConfig::PINGPONG, "{m}x{n}x{k}");
        }
        // a pair with a sparse last wave stays a pair and splits that wave (288 cluster tiles
        // on 66 clusters: 24 in a 5th wave, split in 2; 5000^3: 4 in a 7th, split in 5)
        for (m, n) in [(6000, 3000), (3000, 6000)] {
            let c = Choice::heuristic(&bf16(m, n, 3000, Layout::RC), 132, true);
            assert_eq!(
                (c.tile, c.splits, c.tail),
                (TileConfig::LARGE_PAIR, 2, true)
            );
        }
        let c = Choice::heuristic(&bf16(5000, 5000, 5000, Layout::RC), 132, true);
        assert_eq!(
            (c.tile, c.splits, c.tail),
            (TileConfig::LARGE_PAIR, 5, true)
        );
        // issue 3's set: its shapes off lines (4000^3, 4096x4096x4088) stay unsplit 128x256
        // pairs in every layout, as before the rules of ledger #59-#67
        for p in crate::harness::suite::target_problems(&Layout::ALL) {
            if !rows_on_lines(&p) {
                let c = Choice::heuristic(&p, 132, true);
                let got = (c.tile, c.splits, c.tail);
                assert_eq!(
                    got,
                    (TileConfig::LARGE_PAIR, 1, false),
                    "{}x{}x{}",
                    p.m,
                    p.n,
                    p.k
                );
            }
        }
        // the env's KILN_WGMMA_PAIRS=0 still wins
        let p = bf16(4096, 4096, 4088, Layout::RC);
        assert_eq!(Choice::heuristic(&p, 132, false).tile, TileConfig::LARGE);
        // the 192-wide tile pairs up too: 3000^3 (6000-byte rows), where 192 columns quantise
        // better than 256; on lines (3072^3) it stays single
        assert_eq!(h(3000, 3000, 3000), TileConfig::MEDIUM_PAIR);
        assert_eq!(h(3072, 3072, 3072), TileConfig::MEDIUM);
        let p = bf16(3000, 3000, 3000, Layout::RC);
        assert_eq!(Choice::heuristic(&p, 132, false).tile, TileConfig::MEDIUM);
        // a tuned pair falls back to its single tile under KILN_WGMMA_PAIRS=0
        let env = GemmOverrides {
            pairs: false,
            ..GemmOverrides::NONE
        };
        let tuned = Choice::heuristic(&p, 132, true).to_config();
        assert_eq!(
            Choice::resolve(&p, 132, Some(&tuned), &env).tile,
            TileConfig::MEDIUM
        );
    }

    #[test]
    fn the_192_wide_tile_takes_what_256_wide_tiles_quantise_badly() {
        let h = |m, n, k| Choice::heuristic(&bf16(m, n, k, Layout::RC), 132, true);
        // 3072^3: 288 tiles of 128 x 256 (2.2 waves) against 384 of 128 x 192 (2.9 waves)
        assert_eq!(h(3072, 3072, 3072).tile, TileConfig::MEDIUM);
        assert_eq!(h(3072, 3072, 3072).splits, 1);
        // where 256 columns quantise well, or as well, the 256-wide tile stays
        for (m, n, k) in [(4096, 4096, 4096), (8192, 8192, 8192), (6144, 6144, 6144)] {
            assert_ne!(h(m, n, k).tile, TileConfig::MEDIUM, "{m}x{n}x{k}");
        }
        // issue 3's target set is untouched by it, and by the 320-wide tile
        for p in crate::harness::suite::target_problems(&Layout::ALL) {
            let c = Choice::heuristic(&p, 132, true);
            assert!(
                c.tile.bn != 192 && c.tile.bn != 320,
                "{}x{}x{}",
                p.m,
                p.n,
                p.k
            );
        }
    }

    #[test]
    fn the_224_wide_tile_where_it_makes_whole_waves() {
        let h = |m, n, k, l| Choice::heuristic(&bf16(m, n, k, l), 132, true);
        // On by default (`WIDTHS_BY_DEFAULT`) with a K-major B (RC, CC): 1024x3584 as 128
        // tiles of 128 x 224 (one wave; 128 x 256: 112, 20 SMs idle), 512x14336 as 256 (1.94
        // waves; 128 x 256: 224, 1.7), 2048x3584 as 256, 4096x3584 as 512 (3.9 waves). Not
        // with an MN-major B (CR, RR), whose whole 64-column boxes load 256 columns.
        for l in Layout::ALL {
            for (m, n, k) in [
                (1024, 3584, 18944),
                (512, 14336, 4096),
                (2048, 3584, 3584),
                (4096, 3584, 18944),
            ] {
                let t = h(m, n, k, l).tile;
                assert_eq!(t == TileConfig::N224, l.b_k_major(), "{m}x{n}x{k} {l}");
            }
        }
        // KILN_WGMMA_WIDTHS=0 leaves it out
        let off = Choice::heuristic_with(&bf16(1024, 3584, 18944, Layout::RC), 132, true, false);
        assert!(off.tile.bn.is_multiple_of(64), "{off:?}");
        // not where N is no multiple of 224 (1024x13824: measured 1 % slower), at one tile-row
        // (bound by B's bandwidth), where the multiples of 64 already make whole waves, nor off
        // lines (single CTAs only: it has no pair variant); and the 168-wide tile never (2-4x
        // slower with an MN-major B)
        for (m, n, k) in [
            (1024, 13824, 5120),
            (1, 28672, 8192),
            (128, 28672, 8192),
            (1024, 11008, 4096),
            (2048, 11008, 4096),
            (4096, 4096, 4096),
            (8192, 8192, 8192),
            (2048, 4096, 4096),
        ] {
            for l in Layout::ALL {
                assert!(h(m, n, k, l).tile.bn.is_multiple_of(64), "{m}x{n}x{k} {l}");
            }
        }
        let off_lines = GemmProblem {
            lda: 3592,
            ..bf16(1024, 3584, 18944, Layout::RC)
        };
        assert!(Choice::heuristic(&off_lines, 132, true)
            .tile
            .bn
            .is_multiple_of(64));
        // A C the TMA-store epilogue cannot take runs the next multiple of 64.
        for epi in [Epilogue::Registers, Epilogue::TmaLoadC] {
            assert_eq!(with_epilogue(TileConfig::N168, epi), TileConfig::MEDIUM);
            assert_eq!(with_epilogue(TileConfig::N224, epi), TileConfig::LARGE);
        }
        assert_eq!(
            with_epilogue(TileConfig::N224, Epilogue::TmaStore),
            TileConfig::N224
        );
        // K-major B: one box of the tile's rows; MN-major: whole 64-column boxes (a 32-column
        // box in the 64B swizzle, whole atoms for 224, ran 3-21 % slower: ledger #73)
        assert_eq!(b_box_rows(TileConfig::N168), 168);
        assert_eq!(b_loads_per_cluster(false, 168, 1), 3);
        assert_eq!(b_loads_per_cluster(false, 224, 1), 4);
        assert_eq!(TileConfig::N168.stage_tx_bytes(true), (128 + 168) * 128);
        assert_eq!(TileConfig::N168.stage_tx_bytes(false), (128 + 192) * 128);
        assert_eq!(TileConfig::N224.stage_tx_bytes(false), (128 + 256) * 128);
        assert_eq!(
            TileConfig::N224.stage_bytes(),
            TileConfig::LARGE.stage_bytes()
        );
    }

    #[test]
    fn the_320_wide_tile_where_it_makes_whole_waves_on_lines() {
        let h = |m, n, k, l| Choice::heuristic(&bf16(m, n, k, l), 132, true);
        // 1024x5120: 128 tiles of 128 x 320, one wave (128 x 192: 1.6 waves)
        for l in Layout::ALL {
            assert_eq!(h(1024, 5120, 5120, l).tile, TileConfig::WIDE, "{l}");
        }
        // columns it would waste (3072 = 9.6 x 320), rows off lines (no pair variant), more
        // than one wave (4096x2560: 256 tiles)
        assert_eq!(h(3072, 3072, 3072, Layout::RC).tile, TileConfig::MEDIUM);
        assert_ne!(h(4096, 2560, 2560, Layout::RC).tile, TileConfig::WIDE);
        assert_ne!(h(1024, 10240, 4096, Layout::RC).tile, TileConfig::WIDE);
        assert_ne!(h(1024, 5120, 5000, Layout::RC).tile, TileConfig::WIDE);
        // where C takes the register epilogue (a C that TMA cannot address) the 128 x 192 tile
        // runs instead
        for epi in [Epilogue::Registers, Epilogue::TmaLoadC] {
            assert_eq!(with_epilogue(TileConfig::WIDE, epi), TileConfig::MEDIUM);
        }
        assert_eq!(
            with_epilogue(TileConfig::WIDE, Epilogue::TmaStore),
            TileConfig::WIDE
        );
        assert_eq!(b_box_rows(TileConfig::WIDE), 160);
    }
}
