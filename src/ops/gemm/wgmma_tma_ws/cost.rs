//! The split-K and stream-K layouts of a problem's tiles over the resident CTAs, and the
//! wave-quantised cost model that weighs tile shapes and split factors against each other.

use super::{TileConfig, BK, BM};
use crate::ops::waves::{last_wave, last_wave_slices, waves};

impl TileConfig {
    /// How `splits` K slices are laid over the cluster tiles of an `m` x `n` problem run on
    /// `max_clusters` resident clusters: every tile split, or with `tail` only the tiles of the
    /// last, partial wave (none when the waves are whole). Mirrors the kernel's work units.
    pub fn split_plan(
        self,
        m: usize,
        n: usize,
        splits: u32,
        tail: bool,
        max_clusters: u32,
    ) -> SplitPlan {
        let ctiles = self.cluster_tiles(m, n);
        let slots = max_clusters.max(1);
        let split_from = match (splits > 1, tail) {
            (false, _) => ctiles,
            (true, false) => 0,
            (true, true) => ctiles - last_wave(ctiles, slots),
        };
        let splits = if split_from == ctiles { 1 } else { splits };
        let units = split_from + (ctiles - split_from) * splits;
        SplitPlan {
            splits,
            split_from,
            split_block_tiles: (ctiles - split_from) * self.cluster,
            grid: units.min(slots).max(1) * self.cluster,
        }
    }

    /// Stream-K: the first cluster tile whose K blocks are spread over the CTAs (the kernel's
    /// `Extras.sk_from`), for an `m` x `n` x `k` problem on `max_clusters` resident CTAs; `None`
    /// where the kernel has no stream-K (pairs, 64-row tiles), the waves are whole, or there is
    /// at most one. The stream-K region is the last partial wave plus one whole wave, so each
    /// CTA's range is 1-2 tiles long and a tile has at most two contributors (one fp32 partial
    /// written and read back); the whole waves before it run as plain tiles.
    pub fn stream_k_from(self, m: usize, n: usize, k: usize, max_clusters: u32) -> Option<u32> {
        if self.cluster != 1 || self.bm != BM {
            return None;
        }
        let slots = max_clusters.max(1);
        let ctiles = self.cluster_tiles(m, n);
        let rem = last_wave(ctiles, slots);
        if ctiles <= slots || rem == 0 {
            return None;
        }
        let from = ctiles - rem - slots;
        // The kernel's range arithmetic is 32-bit: K blocks x CTAs under 2^31.
        let w = (ctiles - from) as u64 * k_blocks(k) as u64;
        (w * slots as u64 <= i32::MAX as u64).then_some(from)
    }

    /// Wave-quantised cost of running the tiles as `splits` K slices each, in 128 x 64 x 64
    /// block-steps: waves of work units (tiles x splits over the SMs), each unit its share of
    /// the K blocks plus ~3 blocks of pipeline fill and epilogue, plus, when split, ~8 + 3 per
    /// slice for writing and re-reading fp32 partial tiles (8 + 3s: measured on H200, 1024^3
    /// split in 2 ran 12 % slower than unsplit, which 3s alone predicted faster). Lower is
    /// better. A model, not a measurement: it only has to rank the few candidates `choose`
    /// weighs.
    pub(super) fn cost(self, m: usize, n: usize, k: usize, sm_count: u32, splits: u32) -> u64 {
        let (tm, tn) = self.tiles(m, n);
        let units = tm as u64 * tn as u64 * splits as u64;
        let kb = k.div_ceil(BK as usize).max(1) as u64;
        let split_extra = if splits > 1 { 8 + 3 * splits as u64 } else { 0 };
        let per_unit = kb.div_ceil(splits as u64) + 3 + split_extra;
        // Time of one block-step, in eighths of a 128 x 64 x 64 one at full tensor rate: the
        // width, with m64n64 wgmma charged 25 % extra (each 64 x 64 x 16 step reads 4 KB of
        // shared memory for 131 kFLOP, near the 128 B/clk an SM can feed).
        let step = if self.bn == 64 {
            10
        } else {
            self.bn as u64 / 8
        };
        waves(units, sm_count) * per_unit * step
    }

    /// The split-K factor (1..=MAX_SPLITS, never more than the K blocks) with the lowest
    /// `cost`; ties keep fewer slices. Only single CTAs with tiles at most 128 wide are weighed
    /// (the 256-wide tile splits only its last wave, [`TileConfig::tail_splits`]).
    pub fn best_splits(self, m: usize, n: usize, k: usize, sm_count: u32) -> u32 {
        if self.cluster != 1 || self.bn > 128 || self.bm != BM {
            return 1;
        }
        let kb = k.div_ceil(BK as usize).max(1) as u32;
        (1..=MAX_SPLITS.min(kb))
            .min_by_key(|&s| (self.cost(m, n, k, sm_count, s), s))
            .unwrap_or(1)
    }

    /// K slices for the tiles of the last wave when that wave is at most half full: about as many
    /// as fill the SMs it leaves idle (slots / tail tiles, 2..=5 and at most a quarter of the K
    /// blocks); `None` when the waves are whole or the last one is more than half full. On an
    /// H200, 512x128256x4096 (2004 tiles of 128x256 on 132 SMs: 24 in a 16th wave) ran at
    /// 764 TFLOPS with the last wave split in 5 (3 and 4: 760), 742 unsplit, 743 in CTA pairs.
    pub fn tail_splits(self, m: usize, n: usize, k: usize, sm_count: u32) -> Option<u32> {
        let slots = (sm_count / self.cluster).max(1);
        last_wave_slices(self.cluster_tiles(m, n), slots, 5, k_blocks(k))
    }
}

/// A launch's split-K layout ([`TileConfig::split_plan`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitPlan {
    /// K slices per split tile (1: nothing is split).
    pub splits: u32,
    /// The first cluster tile that is split (the kernel's `Extras.split_from`).
    pub split_from: u32,
    /// Block tiles that are split: one arrival counter each, `splits` fp32 partials each.
    pub split_block_tiles: u32,
    /// CTAs to launch: one cluster per work unit, up to the resident slots.
    pub grid: u32,
}

impl SplitPlan {
    /// fp32 workspace bytes of stream-K on `grid` CTAs: two partial tiles per CTA (the tile
    /// its range starts in and the one it ends in).
    pub fn stream_k_workspace_bytes(grid: u32, bn: u32) -> usize {
        2 * grid as usize * (BM * bn) as usize * 4
    }

    /// fp32 workspace bytes for the partial tiles of a `bn`-wide tile (0 when not split).
    pub fn workspace_bytes(&self, bn: u32) -> usize {
        if self.splits <= 1 {
            return 0;
        }
        self.split_block_tiles as usize * self.splits as usize * (BM * bn) as usize * 4
        // (only 128-row tiles split: the 64-row ones already split K inside the CTA)
    }
}

/// The most K slices a tile is split into.
pub const MAX_SPLITS: u32 = 8;

/// K blocks (BK deep) of a problem with depth `k` (at least 1).
pub fn k_blocks(k: usize) -> u32 {
    k.div_ceil(BK as usize).max(1).min(u32::MAX as usize) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's stream-K pieces of CTA g in the order it runs them (`sk_start`, `next_unit`,
    /// `unit_of`, `sk_piece`): (tile, kb0, kb1, slice, slices), tiles counted from the first
    /// stream-K tile.
    fn stream_k_pieces(g: u32, w: u32, grid: u32, kb: u32) -> Vec<(u32, u32, u32, u32, u32)> {
        let start = |g: u32| g * w / grid;
        let (s0, e) = (start(g), start(g + 1));
        let h = e % kb;
        let mut v = Vec::new();
        let mut i = 0;
        while s0 + i < e {
            let (pos, end) = if i < h {
                (e - h + i, e)
            } else {
                (s0 + i - h, e - h)
            };
            let (tr, tile0) = (pos / kb, pos / kb * kb);
            let (kb0, kb1) = (pos - tile0, kb.min(pos - tile0 + (end - pos)));
            let ns = if kb1 - kb0 < kb { 2 } else { 1 };
            v.push((tr, kb0, kb1, (kb0 != 0) as u32, ns));
            i += kb1 - kb0;
        }
        v
    }

    /// Every K block of the stream-K tiles is taken by exactly one CTA; a tile has one piece
    /// (whole) or two (a head, slice 0, and a tail, slice 1, of neighbouring CTAs); the partial
    /// slots the kernel derives (2g + 1 - 2 slice, plus the slice) are the writer's on both sides.
    #[test]
    fn stream_k_ranges_cover_each_k_block_once() {
        for (m, n, k, sms) in [
            (4096, 4096, 4096, 132),
            (8192, 8192, 8192, 132),
            (4000, 4000, 4000, 132),
            (2048, 14336, 4096, 132),
            (8192, 14336, 4096, 132),
            (16384, 16384, 16384, 132),
            (1000, 3000, 700, 7),
            (640, 512, 64, 3),
        ] {
            let cfg = TileConfig::LARGE;
            let Some(from) = cfg.stream_k_from(m, n, k, sms) else {
                panic!("{m}x{n}x{k}: no stream-K");
            };
            let ctiles = cfg.cluster_tiles(m, n);
            assert_eq!((ctiles - from) % sms, ctiles % sms, "{m}x{n}x{k}");
            let kb = k_blocks(k);
            let w = (ctiles - from) * kb;
            let mut seen = vec![0u32; w as usize];
            // tile -> [(cta, slice, slot)]
            let mut by_tile = std::collections::BTreeMap::<u32, Vec<(u32, u32, u32)>>::new();
            for g in 0..sms {
                for (tr, kb0, kb1, sp, ns) in stream_k_pieces(g, w, sms, kb) {
                    for x in kb0..kb1 {
                        seen[(tr * kb + x) as usize] += 1;
                    }
                    if ns == 2 {
                        by_tile
                            .entry(tr)
                            .or_default()
                            .push((g, sp, 2 * g + 1 - 2 * sp + sp));
                    }
                }
            }
            assert!(seen.iter().all(|&c| c == 1), "{m}x{n}x{k}");
            // in step along K: a CTA's first piece starts at k = 0 (its range's head), unless its
            // range ends on a tile boundary (no head): then it starts where the others are
            // after their heads, L K blocks behind (mod the tile's K)
            for g in 0..sms {
                let (first, e) = (stream_k_pieces(g, w, sms, kb)[0], (g + 1) * w / sms);
                let l = e - g * w / sms;
                let expect = if e % kb == 0 { (kb - l % kb) % kb } else { 0 };
                assert_eq!(first.1, expect, "{m}x{n}x{k} CTA {g}");
            }
            for (tr, v) in by_tile {
                assert_eq!(v.len(), 2, "{m}x{n}x{k} tile {tr}: {v:?}");
                let (head, tail) = (v[0], v[1]);
                assert_eq!((head.1, tail.1, tail.0), (0, 1, head.0 + 1), "tile {tr}");
                // each reads the other's slot as base + other slice
                assert_eq!(2 * head.0 + 1 + 1, tail.2);
                assert_eq!(2 * tail.0 + 1 - 2, head.2);
            }
        }
        // no stream-K: whole waves, one wave or less, pairs, 64-row tiles
        assert_eq!(TileConfig::LARGE.stream_k_from(4224, 4096, 4096, 132), None);
        assert_eq!(TileConfig::LARGE.stream_k_from(2048, 2048, 2048, 132), None);
        assert_eq!(
            TileConfig::LARGE_PAIR.stream_k_from(4096, 4096, 4096, 66),
            None
        );
        assert_eq!(
            TileConfig::TINY64.stream_k_from(4096, 4096, 4096, 132),
            None
        );
        assert_eq!(
            TileConfig::LARGE.stream_k_from(4096, 4096, 4096, 132),
            Some(512 - 116 - 132)
        );
    }
}
