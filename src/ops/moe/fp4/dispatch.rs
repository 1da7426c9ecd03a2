//! Which tile the 4-bit experts' register path runs a launch on (`KILN_FP4_TILE`): by rows and
//! tile count (`count-fit`, the default, and its forerunners: the candidate tile whose estimated
//! time is least), by the
//! most rows an expert has (`rows`, [`Fp4Tile::choose`] then `KILN_FP4_NARROW`), or one forced
//! tile.
//!
//! Why by count: the tile that holds an expert's rows in the fewest tiles is the fastest only
//! where the launch fills the GPU. One expert of 77 or 300 rows at N 2048 runs 16 or 48 wide
//! tiles on 132 SMs, each streaming the whole K at the wide tile's pace (~1 us a 64-deep stage on
//! an H200 against ~0.5 for the narrow tiles), so 4-bit ran at 0.66-0.78x kiln's bf16 there
//! (docs/moe.md, ledger F53, F70) while more tiles of a narrower tile run in the same round.

use super::kernel::{Fp4Path, Fp4Tile};
use crate::ops::gemm::DType;
use crate::ops::moe::MoeProblem;

/// `KILN_FP4_TILE`: how the register path's tile is chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp4TileRule {
    /// The narrowest tile that holds the most rows an expert has (the default until
    /// 2026-11-30; ledger F71, F100).
    Rows,
    /// The tile of least estimated time from the rows' tile counts ([`by_count`]), launched on
    /// every CTA the SMs hold where that lets it split in K: the decode tiles always (their
    /// balanced split), a wide tile where the launch has at most half as many tiles as CTAs
    /// ([`few_wide`]), on the paces timed before the EPI/XTILE pair ([`Paces::Morning`]).
    Count,
    /// The default from 2026-11-30 to 2026-12-01 (won two rounds, ledger F140, H200: the GEMM at
    /// 300 rows 0.65 -> 0.79x kiln's bf16, the ragged counts at K 7168 0.85 -> 1.01-1.05x):
    /// `Count` with the stage paces re-timed under the wide tiles' EPI/XTILE pair
    /// ([`Paces::Pair`]).
    CountPair,
    /// `CountPair` with the grouped GEMM's wide tiles (128 tokens or more) cut in K where a
    /// launch has at most half as many tiles as CTAs ([`few_wide`]), as it cuts the SwiGLU's
    /// (2026-12-01, ledger F180: `KILN_FP4_FILL`'s cut of the GEMM at 200 rows won two rounds,
    /// F163).
    CountCut,
    /// The default from 2026-12-01 (won two rounds, ledger F181, H200: the GEMM at 300 rows
    /// 0.77 -> 1.04x kiln's bf16, 200 rows 0.69 -> 0.89x): `CountCut` with the grouped GEMM's
    /// wide tile of the token count whose busiest CTA ends first ([`super::gemm_tile::fit`]: 128
    /// to 256 tokens, one wgmma batch in flight) in place of the 256-token tile.
    CountFit,
    /// That many tokens a tile, whatever the rows: 8 (paired as the dispatch pairs it), 16, 64,
    /// or 0 for the wide tile (128 tokens for the SwiGLU, 256 for the GEMM; bf16 only); 128,
    /// 160, 192, 224 or 256 the grouped GEMM's wide tile of that many (128 also the SwiGLU's).
    Tokens(u32),
}

impl Fp4TileRule {
    pub fn parse(s: &str) -> Option<Fp4TileRule> {
        match s {
            "rows" => Some(Fp4TileRule::Rows),
            "count" => Some(Fp4TileRule::Count),
            "count-pair" => Some(Fp4TileRule::CountPair),
            "count-cut" => Some(Fp4TileRule::CountCut),
            "count-fit" => Some(Fp4TileRule::CountFit),
            "8" => Some(Fp4TileRule::Tokens(8)),
            "16" => Some(Fp4TileRule::Tokens(16)),
            "64" => Some(Fp4TileRule::Tokens(64)),
            "wide" => Some(Fp4TileRule::Tokens(0)),
            "128" | "160" | "192" | "224" | "256" => s.parse().ok().map(Fp4TileRule::Tokens),
            _ => None,
        }
    }

    pub fn name(self) -> String {
        match self {
            Fp4TileRule::Rows => "rows".into(),
            Fp4TileRule::Count => "count".into(),
            Fp4TileRule::CountPair => "count-pair".into(),
            Fp4TileRule::CountCut => "count-cut".into(),
            Fp4TileRule::CountFit => "count-fit".into(),
            Fp4TileRule::Tokens(0) => "wide".into(),
            Fp4TileRule::Tokens(t) => t.to_string(),
        }
    }

    /// Whether this rule launches on every CTA the SMs hold (where its tile can split).
    pub fn fills(self) -> bool {
        self.paces().is_some()
    }

    /// The stage paces a rule by count estimates with; none for the others.
    pub fn paces(self) -> Option<Paces> {
        match self {
            Fp4TileRule::Count => Some(Paces::Morning),
            Fp4TileRule::CountPair | Fp4TileRule::CountCut | Fp4TileRule::CountFit => {
                Some(Paces::Pair)
            }
            _ => None,
        }
    }

    /// Whether this rule cuts the grouped GEMM's wide tiles in K where a launch has few
    /// ([`few_wide`] with `gemm`).
    pub fn cuts_gemm(self) -> bool {
        matches!(self, Fp4TileRule::CountCut | Fp4TileRule::CountFit)
    }

    /// Whether this rule fits the grouped GEMM's wide tile to the launch
    /// ([`super::gemm_tile::fit`]).
    pub fn fits_gemm(self) -> bool {
        self == Fp4TileRule::CountFit
    }
}

/// The register path's tile of `tt` tokens (0: the wide one; 128-256 the grouped GEMM's wide
/// tile of that many, the SwiGLU's 128-token one), paired as the dispatch pairs the 8-token
/// tile (`ctas`, `gemm_too`).
pub fn tile_of(p: &MoeProblem, tt: u32, ctas: u32, gemm_too: bool) -> Fp4Tile {
    let swiglu = p.swiglu.is_some();
    let tile = match tt {
        8 | 16 => Fp4Tile::narrow(tt, swiglu),
        64 => Fp4Tile::decode(swiglu),
        128.. if !swiglu => Fp4Tile::gemm_wide(tt),
        _ => Fp4Tile::prefill(swiglu),
    };
    tile.paired_for(p, ctas, gemm_too)
}

/// The candidate of least estimated time on `sms` SMs ([`estimate_us`]) among `base` (the rows
/// rule's tile; split in K where it runs [`few_wide`] tiles) and the narrower register tiles (the
/// decode tiles on every CTA, split), a narrower one only where it is estimated at most
/// [`SWITCH`] of `base`'s time: the estimate is coarse, and `base` is what was measured
/// everywhere before. `base` as it is for the masked layout (no host counts), f16 activations
/// (no wide tile: the rows rule's tile is already the decode tile or narrower) and the
/// shared-memory path. `gemm_cut`: the grouped GEMM's wide tiles split too ([`few_wide`]).
pub fn by_count(
    p: &MoeProblem,
    base: Fp4Tile,
    sms: u32,
    (ctas, gemm_too): (u32, bool),
    paces: Paces,
    gemm_cut: bool,
) -> Fp4Tile {
    if p.is_masked() || p.input != DType::Bf16 || base.path != Fp4Path::Rs {
        return base;
    }
    let split = base.narrow_rs() || few_wide(p, base, base.ctas * sms, gemm_cut);
    let limit = SWITCH * estimate_us(p, base, sms, split, paces);
    let mut best = (base, f64::INFINITY);
    for tt in [64, 16, 8] {
        if tt >= base.tt {
            continue;
        }
        let c = tile_of(p, tt, ctas, gemm_too);
        let t = estimate_us(
            p,
            c,
            sms,
            c.narrow_rs() || few_wide(p, c, c.ctas * sms, gemm_cut),
            paces,
        );
        if t <= limit && t < best.1 {
            best = (c, t);
        }
    }
    best.0
}

/// A narrower tile replaces the rows rule's only where estimated at most this share of its time
/// (the estimates of the round 1 call's launches were within 10 % of their times, ledger F71).
pub const SWITCH: f64 = 0.92;

/// Token tiles of height `tt` over the experts' host counts (the kernel's tables:
/// ceil(rows / tt) an expert, `moe_expert_tiles` with no fold).
pub fn m_tiles(p: &MoeProblem, tt: u32) -> u64 {
    p.spans()
        .iter()
        .map(|&(_, c)| c.div_ceil(tt as usize) as u64)
        .sum()
}

/// The kernel's wgmma width for a tile of `rows` rows (`fp4_width` in fp4_experts.cuh).
pub fn width(rows: usize) -> usize {
    match rows {
        0..=8 => 8,
        9..=16 => 16,
        17..=32 => 32,
        _ => 32 * rows.div_ceil(32),
    }
}

/// The stage paces [`estimate_us`] weighs tiles with: microseconds a CTA of a tile spends on
/// one 64-deep stage at wgmma width `w` ([`Paces::stage_us`]), and what cutting a wide tile in
/// K costs ([`Paces::wide_split_us`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Paces {
    /// Timed in the morning of 2026-11-30 (H200, before the wide tiles' EPI/XTILE pair, F110):
    /// one line for every tile of an op. The SwiGLU: 1.02 us at width 128 (the 128-token tile,
    /// one expert of 300 rows: 48 tiles, 114 us for 112 stages), 0.85 at 80 (77 rows), 0.77 at
    /// 64 (the 64-token tile, 5 experts of 60 rows, 80 tiles, 86 us): a fixed ~0.5 (the decode
    /// and the register operand's wait) and the tensor work. The GEMM (its stage one weight
    /// atom a consumer): its 256-token tile 1.7 us at width 256 (300 rows at K 2048, 112 tiles,
    /// 63 us), ~0.7 at 80. The paired 8-token tile ran one row in 49.6 us alone (0.44); two
    /// CTAs an SM share the SM, so 0.1 more when both run. Results: decode4-early12-f559116
    /// and decode4-early13-33dca92.
    Morning,
    /// The wide tiles (64-256 tokens) re-timed under the pair (2026-11-30 evening, H200, main
    /// af21714, `results/2026-11-30-h200/decode4-early15-af21714/`), one launch of one round
    /// a width, its time over its stages (so the launch's fixed ~10-17 us is in the pace, as
    /// in `Morning`): the SwiGLU's 128-token tile 0.52 / 0.64 / 0.72 / 0.77 us at widths 32 /
    /// 64 / 96 / 128 (K 7168), its 64-token tile 0.52 / 0.60 at 32 / 64; the GEMM's 256-token
    /// tile 1.18 / 1.03 / 1.03 at 64 / 128 / 256 (K 2048: its X box is the whole tile at any
    /// width), its 64-token tile 0.58 / 0.61 at 32 / 64. The decode tiles (8, 16 tokens) as
    /// `Morning`: the pair left their code unchanged.
    Pair,
}

impl Paces {
    /// Microseconds a CTA of `tile` spends on one 64-deep stage at wgmma width `w` (H200).
    pub fn stage_us(self, tile: Fp4Tile, w: usize, swiglu: bool) -> f64 {
        let wide = !tile.narrow_rs();
        let (fixed, per_col) = match (self, wide, tile.tt, swiglu) {
            (Paces::Pair, true, 64, true) => (0.446, 0.00238),
            (Paces::Pair, true, _, true) => (0.455, 0.00257),
            (Paces::Pair, true, 64, false) => (0.55, 0.00098),
            (Paces::Pair, true, _, false) => (1.05, 0.0),
            (_, _, _, true) => (0.5, 0.004),
            _ => (0.3, 0.0056),
        };
        let alone = fixed + per_col * w as f64;
        if tile.ctas > 1 {
            alone + 0.1
        } else {
            alone
        }
    }

    /// The cost in microseconds of a wide tile's K slices whose consumer threads hold `na`
    /// accumulators each (a slice's partial: 256 x `na` floats), beyond the tile's time over
    /// the slices. `Morning`: one expert of 77 rows cut 4 ways, 48 us on the 128-token SwiGLU
    /// tile (na 128) against 96 whole, 36.8 on the 64-token one (na 64) against ~85; 300 rows,
    /// 48 tiles of 128 tokens cut in two, 77-80 against 114 (ledger F53, F71). `Pair`: 300 rows
    /// cut in two 56.9 us against the tile's 85.9 whole, 77 rows on the 64-token tile cut 4
    /// ways 30.0 against 67.0 (ledger F100, F140): the cut also leaves most of the launch's
    /// fixed part uncut, which this term carries.
    pub fn wide_split_us(self, na: usize) -> f64 {
        match self {
            Paces::Morning => 8.0 + 0.11 * na as f64,
            Paces::Pair => 11.0 + 0.025 * na as f64,
        }
    }
}

/// DRAM bytes a microsecond the weight stream may reach (H200: the copy rate, 4.2 TB/s).
const DRAM_BYTES_PER_US: f64 = 4.2e6;

/// The cost of a decode tile's K slices beyond their share of a tile (partials of 256 x 4-8
/// floats, the sum, the counter), in microseconds: one row on the paired 8-token tile, 16 tiles
/// cut 8 ways on 264 CTAs, took 24 us against 49.6 whole (ledger F51).
const SPLIT_US: f64 = 10.0;

/// The share of its longest tile a launch of several rounds loses to its last one (beyond the
/// work spread over the CTAs): the GEMM's 64-token tile ran 300 rows at K 2048, 280 tiles on
/// 132 CTAs, in 53.8 us, ~46 of them the kernel's (ledger F71).
const TAIL: f64 = 0.25;

/// The most K slices of a wide tile (`WIDE_SPLITS` in fp4_experts.cu).
const WIDE_SPLITS: u64 = 4;

/// Whether `tile` is a wide one (64 tokens or more) of the fused SwiGLU, or with `gemm` one of
/// 128 tokens or more of the grouped GEMM, of which `p` runs at most half of `slots`: a launch
/// of a few tiles, each streaming the whole K while most SMs idle. The kernel's split
/// (`KILN_FP4_WSPLIT`) cuts each into min(slots / tiles, 4) slices, one round. The GEMM's only
/// under `count-cut` and `count-fit`: its wide tile's cut was timed at one launch (one expert of
/// 200 rows at N 7168, K 2048: 56 tiles of 256 tokens cut in two, -4 % in two rounds as
/// `KILN_FP4_FILL`, ledger F163), its 64-token tile's never.
pub fn few_wide(p: &MoeProblem, tile: Fp4Tile, slots: u32, gemm: bool) -> bool {
    (p.swiglu.is_some() || (gemm && tile.tt >= 128))
        && wide_tiles(p, tile).is_some_and(|tiles| tiles > 0 && 2 * tiles <= slots as u64)
}

/// The tiles of `p` on `tile` where the host can count them and the kernel may split them: a
/// wide tile of the register path over contiguous rows; none for the decode tiles, the
/// shared-memory path and masked rows (whose counts only the GPU sees).
fn wide_tiles(p: &MoeProblem, tile: Fp4Tile) -> Option<u64> {
    if p.is_masked() || tile.narrow_rs() || tile.path != Fp4Path::Rs {
        return None;
    }
    Some(m_tiles(p, tile.tt) * p.n.div_ceil(tile.bn(p.swiglu.is_some())) as u64)
}

/// Estimated microseconds of `p` on `tile` over `sms` SMs, only to compare tiles for one
/// problem: each tile's stages at [`Paces::stage_us`] of its own width (an expert's full tiles, then
/// its remainder), the launch as the longest tile where it is one round, else the work spread
/// over the CTAs and [`TAIL`] of its longest tile, against
/// the time the distinct experts' weights take from DRAM. `split`: the decode tiles' balanced
/// split (on every CTA), or a wide tile's of a launch of [`few_wide`] tiles.
pub fn estimate_us(p: &MoeProblem, tile: Fp4Tile, sms: u32, split: bool, paces: Paces) -> f64 {
    let swiglu = p.swiglu.is_some();
    let tt = tile.tt as usize;
    let tiles_n = p.n.div_ceil(tile.bn(swiglu)) as f64;
    let stages = p.k.div_ceil(64) as f64;
    let pace = |rows: usize| stages * paces.stage_us(tile, width(rows), swiglu);
    let (mut tiles, mut work, mut longest) = (0u64, 0.0f64, 0.0f64);
    for &(_, c) in p.spans().iter().filter(|s| s.1 > 0) {
        let (full, rem) = (c / tt, c % tt);
        tiles += (full + (rem > 0) as usize) as u64;
        work += full as f64 * pace(tt) + if rem > 0 { pace(rem) } else { 0.0 };
        longest = longest.max(pace(c.min(tt)));
    }
    if tiles == 0 {
        return 0.0;
    }
    let tiles = tiles * tiles_n as u64;
    let work = work * tiles_n;
    let slots = (tile.ctas * sms).max(1) as u64;
    let compute = if !tile.narrow_rs() {
        if split && 2 * tiles <= slots {
            let s = (slots / tiles)
                .min(WIDE_SPLITS)
                .min((stages as u64 / 4).max(1));
            let na = if swiglu { tt } else { tt / 2 };
            longest / s as f64 + paces.wide_split_us(na)
        } else if tiles <= slots {
            longest
        } else {
            work / slots as f64 + TAIL * longest
        }
    } else if split {
        let (full, tail) = (tiles / slots, tiles % slots);
        let s = balanced_splits(tail, slots, (stages as u64 / 4).clamp(1, 8));
        let cut = if s > 1 && tail > 0 { SPLIT_US } else { 0.0 };
        if full == 0 {
            longest * (tail * s).div_ceil(slots) as f64 / s as f64 + cut
        } else {
            work / slots as f64 + TAIL * longest + cut
        }
    } else if tiles <= slots {
        longest
    } else {
        work / slots as f64 + TAIL * longest
    };
    let experts = p.spans().iter().filter(|s| s.1 > 0).count();
    let halves = if swiglu { 2.0 } else { 1.0 };
    // e2m1 codes and a byte of scale a 16 (NVFP4, the larger): 9/16 of a byte a weight
    let bytes = experts as f64 * halves * p.n as f64 * p.k as f64 * 9.0 / 16.0;
    compute.max(bytes / DRAM_BYTES_PER_US)
}

/// The kernel's balanced slice count for a last wave of `tail` tiles on `slots` CTAs, up to
/// `most` (`fp4_balanced_splits` in fp4_experts.cu): the fewest slices of the shortest rounds.
pub fn balanced_splits(tail: u64, slots: u64, most: u64) -> u64 {
    let (mut best, mut rounds) = (1u64, 1u64);
    for s in 2..=most {
        let r = (tail * s).div_ceil(slots);
        if r * best < rounds * s {
            best = s;
            rounds = r;
        }
    }
    best
}

/// Whether the wide tiles' split variant (`KILN_FP4_FILL`) pays for `p` on `slots` CTAs: the
/// host counts the tiles (contiguous rows) and the launch or its last wave is at most half the
/// CTAs, the only case the kernel splits a wide tile in. Elsewhere the variant only costs (E64
/// 8,192 rows, a last wave of 99 tiles on 132: +4 %, ledger F53).
pub fn wide_split_pays(p: &MoeProblem, tile: Fp4Tile, slots: u32) -> bool {
    wide_tiles(p, tile).is_some_and(|tiles| {
        let tail = tiles % slots.max(1) as u64;
        tail > 0 && 2 * tail <= slots as u64
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::moe::{uneven_counts, WeightLayout};

    fn sw(counts: &[usize]) -> MoeProblem {
        MoeProblem::contiguous(counts, 2048, 7168, DType::Bf16, DType::Bf16)
            .with_swiglu(WeightLayout::Separate, true)
    }

    /// The E64 row: 8,192 rows on 64 experts as `moe bench` draws them, K 2048, N 1408.
    fn e64() -> MoeProblem {
        let c = uneven_counts(8192, 64, 1);
        MoeProblem::contiguous(&c, 1408, 2048, DType::Bf16, DType::Bf16)
            .with_swiglu(WeightLayout::Separate, true)
    }

    fn count_tile(p: &MoeProblem) -> u32 {
        let base = Fp4Tile::choose_paired(p, None, 2, true);
        by_count(p, base, 132, (2, true), Paces::Morning, false).tt
    }

    #[test]
    fn the_rule_parses_and_names_each_value() {
        for v in [
            "rows",
            "count",
            "count-pair",
            "count-cut",
            "count-fit",
            "8",
            "16",
            "64",
            "wide",
            "128",
            "160",
            "192",
            "224",
            "256",
        ] {
            assert_eq!(Fp4TileRule::parse(v).unwrap().name(), v);
        }
        assert_eq!(Fp4TileRule::parse("96"), None);
        assert_eq!(Fp4TileRule::parse("288"), None);
        assert!(Fp4TileRule::Count.fills() && !Fp4TileRule::Rows.fills());
        assert!(Fp4TileRule::CountCut.fills() && Fp4TileRule::CountCut.cuts_gemm());
        assert!(!Fp4TileRule::CountPair.cuts_gemm() && !Fp4TileRule::CountCut.fits_gemm());
        assert!(Fp4TileRule::CountFit.cuts_gemm() && Fp4TileRule::CountFit.fits_gemm());
    }

    #[test]
    fn a_few_wide_tiles_split_or_give_way_to_narrower_ones() {
        let wide = Fp4Tile::prefill(true);
        // one expert of 300 rows: 48 wide tiles on 132 SMs, cut in K two ways
        assert_eq!(count_tile(&sw(&[300])), 128);
        assert!(few_wide(&sw(&[300]), wide, 132, false));
        // one of 77 rows: 32 tiles of 64 tokens cut 4 ways (36.8 us on the H200) rather than
        // 16 of 128 cut 4 ways (48)
        let c77 = sw(&[0, 0, 77, 0]);
        assert_eq!(count_tile(&c77), 64);
        assert!(few_wide(&c77, Fp4Tile::decode(true), 132, false));
        // the masked decode pattern as counts: 96 wide tiles, 128 of 64 tokens in one round
        let decode = sw(&[0, 1, 40, 64, 128, 3, 0, 100]);
        assert!(!few_wide(&decode, wide, 132, false));
        assert_eq!(count_tile(&decode), 64);
        // the GEMM at the down projection's N 7168, K 2048: 77 rows on 56 wide tiles of 256
        // tokens at ~1.7 us a stage, or 112 of 64 at ~0.7 in one round
        let g77 = MoeProblem::contiguous(&[0, 0, 77, 0], 7168, 2048, DType::Bf16, DType::Bf16);
        assert_eq!(count_tile(&g77), 64);
        // 300 rows: 112 tiles of 256 (63 us) or 280 of 64 in a round and a bit (54)
        let g300 = MoeProblem::contiguous(&[300], 7168, 2048, DType::Bf16, DType::Bf16);
        assert_eq!(count_tile(&g300), 64);
    }

    #[test]
    fn count_cuts_only_the_swiglus_wide_tiles() {
        // the GEMM's wide tiles whole (their split never timed), though a launch has few: one
        // expert of 300 rows at N 2048, K 7168 is 32 tiles of 256 tokens or 80 of 64
        let g = MoeProblem::contiguous(&[300], 2048, 7168, DType::Bf16, DType::Bf16);
        assert!(!few_wide(&g, Fp4Tile::prefill(false), 132, false));
        assert!(!few_wide(&g, Fp4Tile::decode(false), 132, false));
        assert_eq!(count_tile(&g), 64);
        // the FILL knob's split still asks for them (compiled when asked for)
        assert!(wide_split_pays(&g, Fp4Tile::prefill(false), 132));
        assert!(few_wide(&sw(&[300]), Fp4Tile::decode(true), 132, false) == (2 * 80 <= 132));
    }

    #[test]
    fn launches_that_fill_the_gpu_keep_the_rows_rule() {
        // E256 32,768 rows, 8 experts of 7,516, E64 8,192 rows: many waves of the wide tile
        assert_eq!(count_tile(&sw(&uneven_counts(32768, 256, 1))), 128);
        assert_eq!(count_tile(&sw(&uneven_counts(7516, 8, 1))), 128);
        assert_eq!(count_tile(&e64()), 128);
        // the decode counts: the rows rule's 8-token tile is already the narrowest
        assert_eq!(count_tile(&sw(&[2; 256])), 8);
        // 256 experts of 0-64 rows: the memory stream, not the tile, sets the time
        assert_eq!(
            count_tile(&sw(&crate::harness::moe_shapes::many_experts())),
            64
        );
    }

    #[test]
    fn the_balanced_split_matches_the_kernel() {
        // the 64-row decode's 104 tail tiles on 264 CTAs: five slices, two rounds of a fifth
        assert_eq!(balanced_splits(104, 264, 8), 5);
        assert_eq!(balanced_splits(250, 264, 8), 1);
        assert_eq!(balanced_splits(16, 264, 8), 8);
    }

    #[test]
    fn the_wide_split_only_where_the_host_counts_a_sparse_wave() {
        let wide = Fp4Tile::prefill(true);
        // 300 rows: 48 tiles on 132; E64's last wave of 99 is over half
        assert!(wide_split_pays(&sw(&[300]), wide, 132));
        assert!(!wide_split_pays(&e64(), wide, 132));
        assert!(!wide_split_pays(
            &sw(&[300]),
            Fp4Tile::narrow(16, true),
            132
        ));
    }

    fn pair_tile(p: &MoeProblem) -> u32 {
        let base = Fp4Tile::choose_paired(p, None, 2, true);
        by_count(p, base, 132, (2, true), Paces::Pair, false).tt
    }

    #[test]
    fn the_paces_under_the_pair_keep_the_gemms_wide_tile_where_it_runs_one_round() {
        let g = |c: &[usize]| MoeProblem::contiguous(c, 7168, 2048, DType::Bf16, DType::Bf16);
        // 300 rows: 112 tiles of 256 tokens in one round (32.9 us under the pair at 256 rows
        // in the early call) against 280 of 64 (39.7): Morning's 1.7 us a stage took the 64
        assert_eq!(count_tile(&g(&[300])), 64);
        assert_eq!(pair_tile(&g(&[300])), 256);
        // 77 rows: 112 tiles of 64 tokens in one round (19.6 us) against 56 of 256 (~33)
        assert_eq!(pair_tile(&g(&[0, 0, 77, 0])), 64);
        // the SwiGLU's picks where the device timed count (ledger F100) stay
        assert_eq!(pair_tile(&sw(&[0, 0, 77, 0])), 64);
        assert_eq!(pair_tile(&sw(&[300])), 128);
        assert_eq!(pair_tile(&sw(&[0, 1, 40, 64, 128, 3, 0, 100])), 64);
        assert_eq!(pair_tile(&sw(&[1])), 8);
        assert_eq!(pair_tile(&sw(&uneven_counts(7516, 8, 1))), 128);
        assert_eq!(pair_tile(&e64()), 128);
        // the rule's name and paces
        let r = Fp4TileRule::parse("count-pair").unwrap();
        assert_eq!(
            (r.name().as_str(), r.paces(), r.fills()),
            ("count-pair", Some(Paces::Pair), true)
        );
        assert_eq!(Fp4TileRule::Rows.paces(), None);
    }

    #[test]
    fn the_paired_paces_are_the_early_calls_times_over_their_stages() {
        // one round a width, the launch's time over its stages (decode4-early15-af21714)
        let us = |tile: Fp4Tile, w: usize, swiglu: bool, stages: f64| {
            stages * Paces::Pair.stage_us(tile, w, swiglu)
        };
        for (tile, w, swiglu, stages, measured) in [
            (Fp4Tile::prefill(true), 128, true, 112.0, 85.9),
            (Fp4Tile::prefill(true), 32, true, 112.0, 58.4),
            (Fp4Tile::decode(true), 64, true, 112.0, 67.0),
            (Fp4Tile::prefill(false), 256, false, 32.0, 32.9),
            (Fp4Tile::decode(false), 64, false, 32.0, 19.6),
        ] {
            let e = us(tile, w, swiglu, stages);
            assert!(
                (e / measured - 1.0).abs() < 0.05,
                "{w}: {e} against {measured}"
            );
        }
        // the decode tiles as in the morning
        let n = Fp4Tile::narrow(16, true);
        assert_eq!(
            Paces::Pair.stage_us(n, 16, true),
            Paces::Morning.stage_us(n, 16, true)
        );
    }

    #[test]
    fn count_cut_cuts_the_gemms_wide_tile_only_where_a_launch_has_few() {
        let g = |c: &[usize]| MoeProblem::contiguous(c, 7168, 2048, DType::Bf16, DType::Bf16);
        let wide = Fp4Tile::prefill(false);
        // 200 rows: 56 tiles of 256 tokens on 132 CTAs (F163's launch); count-pair keeps it whole
        assert!(few_wide(&g(&[200]), wide, 132, true));
        assert!(!few_wide(&g(&[200]), wide, 132, false));
        assert!(few_wide(&g(&[0, 0, 77, 0]), wide, 132, true));
        // 300 and 1,024 rows: 112 and 224 tiles, over half the CTAs
        for c in [&[300][..], &[1024][..]] {
            assert!(!few_wide(&g(c), wide, 132, true), "{c:?}");
        }
        // 77 rows: 56 tiles, few, but count takes the 64-token tile's 112 in one round
        // the GEMM's 64-token tile never (its cut never timed): 77 rows at N 2048, 32 tiles
        let n2048 = MoeProblem::contiguous(&[77], 2048, 7168, DType::Bf16, DType::Bf16);
        assert!(!few_wide(&n2048, Fp4Tile::decode(false), 132, true));
        // the picks at the brief's counts: the cut changes none of them (77 rows the 64-token
        // tile, 200-1,024 the 256-token one)
        let pick = |c: &[usize]| {
            let p = g(c);
            let base = Fp4Tile::choose_paired(&p, None, 2, true);
            by_count(&p, base, 132, (2, true), Paces::Pair, true).tt
        };
        assert_eq!(pick(&[0, 0, 77, 0]), 64);
        for c in [&[200][..], &[300][..], &[1024][..]] {
            assert_eq!(pick(c), 256, "{c:?}");
        }
        // E64's SwiGLU as before: its last wave of 99 on 132 is not a launch of few
        assert!(!few_wide(&e64(), Fp4Tile::prefill(true), 132, true));
    }
}
