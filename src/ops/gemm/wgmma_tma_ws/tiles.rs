//! The tile catalogue: each compiled tile shape (rows, columns, ring depth, cluster, schedule),
//! its shared memory, its tiles over a problem, and the names `KILN_WGMMA_CFG` forces it by.

use super::BK;

/// The epilogue's staging buffers: 2 consumers x 2 buffers x a 64 x 64 chunk of 16-bit C
/// (the kernel's `C_BYTES`; 64-row tiles need half, [`TileConfig::staging_bytes`]).
pub const C_STAGING_BYTES: u32 = 2 * 2 * 64 * 64 * 2;

/// The C-load epilogue's mbarriers: one per staging buffer, two per consumer.
pub(super) const C_LOAD_BARS: u32 = 4;

/// One tile shape: `bm` x `bn` x BK with a ring of `stages` shared buffers, run by clusters of
/// `cluster` CTAs along M that share (multicast) each B tile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileConfig {
    /// 128 (each consumer 64 rows), or 64 (both consumers on the same rows, alternate K blocks).
    pub bm: u32,
    pub bn: u32,
    pub stages: u32,
    pub cluster: u32,
    /// The ping-pong schedule (`wgmma_tma_ws_pingpong.cu`): each consumer computes whole
    /// 128 x `bn` tiles, the two taking turns on the tensor cores, so one's epilogue runs under
    /// the other's K loop. Else cooperative: both consumers on one tile.
    pub pingpong: bool,
}

impl TileConfig {
    /// The default: 128 x 256 tiles, 4 stages of 48 KB.
    pub const LARGE: TileConfig = TileConfig {
        bm: 128,
        bn: 256,
        stages: 4,
        cluster: 1,
        pingpong: false,
    };
    /// As LARGE, with pairs of CTAs along M loading half of the shared B tile each (multicast).
    pub const LARGE_PAIR: TileConfig = TileConfig {
        bm: 128,
        bn: 256,
        stages: 4,
        cluster: 2,
        pingpong: false,
    };
    /// For problems too small to fill the GPU with 128 x 256 tiles: 6 stages of 32 KB.
    pub const SMALL: TileConfig = TileConfig {
        bm: 128,
        bn: 128,
        stages: 6,
        cluster: 1,
        pingpong: false,
    };
    /// For latency-bound problems with few tiles (512^3 .. 1024^3): 128 x 64 tiles, twice the
    /// tiles of SMALL, 8 stages of 24 KB.
    pub const TINY: TileConfig = TileConfig {
        bm: 128,
        bn: 64,
        stages: 8,
        cluster: 1,
        pingpong: false,
    };
    /// For problems that fit in one wave of 64 x 64 tiles (512^3, M = 128 decode shapes): twice
    /// the tiles of TINY, the two consumers taking alternate K blocks of the same tile and
    /// consumer 0 adding consumer 1's partial sums before the epilogue (no split-K workspace);
    /// 12 stages of 16 KB (an even ring: each consumer keeps to its own stages, which an odd ring
    /// breaks; see the kernel). On an H100 (ledger #19, 11 stages): 512^3 0.80x -> 0.96x cuBLAS,
    /// 128x4096x4096 0.92x -> 0.99x, 128x4096x14336 0.93x -> 1.01x; slower than the 128-row
    /// tiles wherever it needs more than one wave (1024^3: 256 tiles, 0.83x against 0.98x).
    pub const TINY64: TileConfig = TileConfig {
        bm: 64,
        bn: 64,
        stages: 12,
        cluster: 1,
        pingpong: false,
    };
    /// Ping-pong: 128 x 128 tiles, one per consumer at a time, 6 stages of 32 KB.
    pub const PINGPONG: TileConfig = TileConfig {
        bm: 128,
        bn: 128,
        stages: 6,
        cluster: 1,
        pingpong: true,
    };
    /// Ping-pong with 128 x 64 tiles, 8 stages of 24 KB.
    pub const PINGPONG64: TileConfig = TileConfig {
        bm: 128,
        bn: 64,
        stages: 8,
        cluster: 1,
        pingpong: true,
    };
    /// Ping-pong with 64 x 64 tiles (one wgmma per k step), 12 stages of 16 KB.
    pub const PINGPONG_TINY: TileConfig = TileConfig {
        bm: 64,
        bn: 64,
        stages: 12,
        cluster: 1,
        pingpong: true,
    };
    /// 128 x 192 tiles, 4 stages of 40 KB, single CTAs: where N is a multiple of 192 and
    /// 256-wide tiles quantise badly (3072^3: 288 tiles of 128 x 256 on 132 SMs, 2.2 waves;
    /// 384 of 128 x 192, 2.9 waves).
    pub const MEDIUM: TileConfig = TileConfig {
        bm: 128,
        bn: 192,
        stages: 4,
        cluster: 1,
        pingpong: false,
    };
    /// As MEDIUM, in pairs of CTAs along M sharing each B tile (multicast): where rows straddle
    /// 128-byte lines (3000^3: 6000-byte rows) and 192 columns quantise better than 256.
    pub const MEDIUM_PAIR: TileConfig = TileConfig {
        bm: 128,
        bn: 192,
        stages: 4,
        cluster: 2,
        pingpong: false,
    };
    /// 128 x 320 tiles, 3 stages of 56 KB, single CTAs, TMA-store epilogue only
    /// ([`with_epilogue`]), never split: where N is a multiple of 320 and narrower tiles
    /// quantise badly (1024x5120: 128 tiles of 128 x 320, one wave; cuBLAS's pick there).
    pub const WIDE: TileConfig = TileConfig {
        bm: 128,
        bn: 320,
        stages: 3,
        cluster: 1,
        pingpong: false,
    };
    /// 128 x 168 tiles, 4 stages, single CTAs, TMA-store epilogue only ([`with_epilogue`]): a
    /// width that makes whole waves where multiples of 64 do not (1024x11008: 528 tiles, four
    /// waves on 132 SMs, where 128 x 256 makes 344, 2.6 waves; cuBLAS's 168-wide pick there).
    /// Forced only, and compiled on demand ([`TileConfig::in_registry`]).
    pub const N168: TileConfig = TileConfig {
        bm: 128,
        bn: 168,
        stages: 4,
        cluster: 1,
        pingpong: false,
    };
    /// 128 x 224 tiles, 4 stages, single CTAs, TMA-store epilogue only: as N168 (1024x3584: 128
    /// tiles, one wave, where 128 x 256 leaves 20 of 132 SMs idle).
    pub const N224: TileConfig = TileConfig {
        bm: 128,
        bn: 224,
        stages: 4,
        cluster: 1,
        pingpong: false,
    };
    /// 128 x 144 tiles, 4 stages, single CTAs: swap-AB's tile ([`super::swap`]), where C^T's
    /// N' (C's M) fills two or three 144-wide tiles nearly whole (281x8320x8512 RC: C^T is
    /// 8320 x 281, 65 x 2 = 130 tiles, one wave, 98 % of them inside C; cuBLAS's tile there is
    /// 128 x 144 on the same transposed problem). Its transposed row-store variants are in the
    /// registry ([`super::spec::variants`]), the others compile on demand (`KILN_WGMMA_CFG=n144`).
    pub const N144: TileConfig = TileConfig {
        bm: 128,
        bn: 144,
        stages: 4,
        cluster: 1,
        pingpong: false,
    };
    pub const ALL: [TileConfig; 14] = [
        TileConfig::LARGE,
        TileConfig::LARGE_PAIR,
        TileConfig::SMALL,
        TileConfig::TINY,
        TileConfig::TINY64,
        TileConfig::PINGPONG,
        TileConfig::PINGPONG64,
        TileConfig::PINGPONG_TINY,
        TileConfig::MEDIUM,
        TileConfig::MEDIUM_PAIR,
        TileConfig::WIDE,
        TileConfig::N168,
        TileConfig::N224,
        TileConfig::N144,
    ];

    /// Whether `kiln check` compiles this tile's variants: every tile the dispatch or the tuning
    /// space can pick. The 168-wide tile, forced only (`KILN_WGMMA_CFG=n168`; 2-4x slower with an
    /// MN-major B, ledger #72), compiles on demand, as a `KILN_WGMMA_STAGES` ring does.
    /// The 144-wide tile is in it only as swap-AB's transposed row store (`spec::variants`).
    pub fn in_registry(self) -> bool {
        self != TileConfig::N168 && self != TileConfig::N144
    }

    /// `128x256`, `128x256 pair`, `128x128 ping-pong`, `128x128 split 3`: the tile, how it
    /// runs, and its K slices.
    pub fn label(self, splits: u32) -> String {
        let mut l = format!("{}x{}", self.bm, self.bn);
        if self.cluster > 1 {
            l += " pair";
        }
        if self.pingpong {
            l += " ping-pong";
        }
        if splits > 1 {
            l += &format!(" split {splits}");
        }
        l
    }

    /// Shared memory of one stage: A and B, with an MN-major B as whole 64-column boxes (the
    /// 168- and 224-wide tiles load 192 and 256 columns). The kernel's stage is at most this.
    pub fn stage_bytes(self) -> u32 {
        (self.bm + self.bn.next_multiple_of(64)) * BK * 2
    }

    /// Bytes one stage's TMA loads deliver to each CTA (the kernel's `STAGE_BYTES`): a K-major B
    /// is exactly the tile's columns.
    pub fn stage_tx_bytes(self, b_k_major: bool) -> u32 {
        if b_k_major {
            (self.bm + self.bn) * BK * 2
        } else {
            self.stage_bytes()
        }
    }

    /// Shared memory of the 64-row configs' hand-off of consumer 1's fp32 partial tile to
    /// consumer 0: the buffer (the kernel's `X_BYTES`) and its two mbarriers (`X_BARS`).
    pub fn handoff_bytes(self) -> u32 {
        if self.bm == 64 && !self.pingpong {
            self.bm * self.bn * 4 + 2 * 8
        } else {
            0
        }
    }

    /// The TMA-store epilogue's staging buffers: two chunks per consumer that stores (64-row
    /// tiles: consumer 0 alone).
    pub fn staging_bytes(self) -> u32 {
        if self.bm == 64 && !self.pingpong {
            C_STAGING_BYTES / 2
        } else {
            C_STAGING_BYTES
        }
    }

    /// Dynamic shared memory: 1 KB of slack to round the base up to the 1024-byte swizzle
    /// repeat, the stages, the TMA-store epilogue's C staging buffers (two 8 KB chunks of 64 rows
    /// x 128 bytes per consumer; unused by the register epilogue), a full and an empty mbarrier
    /// per stage, and the C-load epilogue's four (reserved in every variant).
    pub fn smem_bytes(self) -> u32 {
        1024 + self.stages * self.stage_bytes()
            + self.staging_bytes()
            + self.handoff_bytes()
            + 2 * self.stages * 8
            + C_LOAD_BARS * 8
    }

    /// (tiles along M, tiles along N).
    pub fn tiles(self, m: usize, n: usize) -> (u32, u32) {
        (
            m.div_ceil(self.bm as usize) as u32,
            n.div_ceil(self.bn as usize) as u32,
        )
    }

    /// Cluster tiles (`cluster` block tiles stacked along M): the units the grid walks.
    pub fn cluster_tiles(self, m: usize, n: usize) -> u32 {
        let (tm, tn) = self.tiles(m, n);
        tm.div_ceil(self.cluster) * tn
    }

    /// Persistent grid in CTAs: one cluster per `max_clusters` slot (SMs / cluster size, or what
    /// the occupancy query allows), or per cluster tile when there are fewer.
    pub fn grid(self, m: usize, n: usize, max_clusters: u32) -> u32 {
        self.cluster_tiles(m, n).min(max_clusters).max(1) * self.cluster
    }
}

/// The tile configs `KILN_WGMMA_CFG` can force, by name: every config the dispatch or the tuning
/// space can run (for timing one against another on the same problem, and for
/// `kiln sanitize --configs`, which checks each).
pub const FORCED_CONFIGS: &[(&str, TileConfig)] = &[
    ("large", TileConfig::LARGE),
    ("medium", TileConfig::MEDIUM),
    ("pair", TileConfig::LARGE_PAIR),
    ("medium-pair", TileConfig::MEDIUM_PAIR),
    ("wide", TileConfig::WIDE),
    ("n168", TileConfig::N168),
    ("n224", TileConfig::N224),
    ("n144", TileConfig::N144),
    ("small", TileConfig::SMALL),
    ("tiny", TileConfig::TINY),
    ("tiny64", TileConfig::TINY64),
    ("pingpong", TileConfig::PINGPONG),
    ("pingpong64", TileConfig::PINGPONG64),
    ("pingpong-tiny", TileConfig::PINGPONG_TINY),
];

/// The config `name` forces ([`FORCED_CONFIGS`]); unknown leaves the choice to the tuned config
/// or the heuristic.
pub fn forced_config(name: &str) -> Option<TileConfig> {
    FORCED_CONFIGS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|&(_, t)| t)
}

/// The ring `stages` asks for, made one the tile can run: 64-row tiles need an even ring of at
/// least 4 (the kernel's static_assert says why), so an odd request rounds down.
pub(super) fn ring_for(tile: TileConfig, stages: u32) -> u32 {
    if tile.bm == 64 {
        (stages & !1).max(4)
    } else {
        stages
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_memory_fits_an_h100_block() {
        assert_eq!(TileConfig::LARGE.stage_bytes(), 48 * 1024);
        assert_eq!(TileConfig::SMALL.stage_bytes(), 32 * 1024);
        for c in TileConfig::ALL {
            assert!(c.smem_bytes() <= 227 * 1024, "{c:?}: {}", c.smem_bytes());
            assert_eq!(c.stage_bytes() % 1024, 0);
        }
        assert_eq!(
            TileConfig::LARGE.smem_bytes(),
            1024 + 4 * 49152 + 32768 + 64 + 32
        );
        // 64-row tiles: consumer 0's staging only, the hand-off and its two barriers, an even
        // ring
        assert_eq!(
            TileConfig::TINY64.smem_bytes(),
            1024 + 12 * 16384 + 16384 + 16384 + 16 + 192 + 32
        );
    }

    #[test]
    fn rings_of_64_row_tiles_are_even_and_at_least_4() {
        for c in TileConfig::ALL.iter().filter(|c| c.bm == 64) {
            assert!(c.stages % 2 == 0 && c.stages >= 4, "{c:?}");
        }
        let t = TileConfig::TINY64;
        assert_eq!(
            (2..=12).map(|s| ring_for(t, s)).collect::<Vec<_>>(),
            [4, 4, 4, 4, 6, 6, 8, 8, 10, 10, 12]
        );
        assert_eq!(ring_for(TileConfig::SMALL, 3), 3);
    }

    #[test]
    fn grid_is_persistent_and_tiles_cover_edges() {
        let c = TileConfig::LARGE;
        assert_eq!(c.tiles(8192, 8192), (64, 32));
        assert_eq!(c.grid(8192, 8192, 132), 132);
        assert_eq!(c.tiles(1, 1), (1, 1));
        assert_eq!(c.grid(1, 1, 132), 1);
        assert_eq!(c.tiles(129, 257), (2, 2));
        // pairs: cluster tiles stack two tile-rows; the grid is whole clusters
        let pair = TileConfig::LARGE_PAIR;
        assert_eq!(pair.cluster_tiles(8192, 8192), 32 * 32);
        assert_eq!(pair.grid(8192, 8192, 66), 132);
        assert_eq!(pair.cluster_tiles(129, 257), 2);
        assert_eq!(pair.grid(129, 257, 66), 4);
        assert_eq!(pair.grid(1, 1, 66), 2);
    }
}
