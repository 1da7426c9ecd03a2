//! How a launch writes C: the TMA-store, C-load and row-store (register, in the ping-pong
//! kernel) epilogues, C's tensor map, and the tile that runs where the picked one lacks the
//! epilogue C needs or the operands' in-place reads.

use super::{GemmOverrides, TileConfig};
use crate::device::{Tma2d, TmaSwizzle};
use crate::ops::gemm::{DType, GemmProblem};

/// The tile that runs where `tile` was picked, given the epilogue C takes. Every tile has the
/// TMA-store epilogue (beta 0 or 1, the common case). The 320-wide tile's `KILN_EPI=0` epilogue
/// spills (160 accumulators), and the 168-, 224- and 320-wide tiles are compiled with the
/// TMA-store epilogue only (fewer variants for tiles chosen at few shapes): where C needs another
/// (beta not 0 or 1, a C that TMA cannot address) the next multiple of 64 runs instead (128 x
/// 192, 128 x 256). The C-load epilogue (beta not 0 or 1, the rarest) comes in the cooperative
/// tiles only: a ping-pong tile runs as its [`cooperative_twin`]. The ping-pong tiles keep their
/// register epilogue (`KILN_EPI=0` in the ping-pong kernel) for a C that TMA cannot address.
pub fn with_epilogue(tile: TileConfig, epi: Epilogue) -> TileConfig {
    match (tile, epi) {
        (_, Epilogue::TmaStore) => tile,
        (TileConfig::WIDE | TileConfig::N168, _) => TileConfig::MEDIUM,
        (TileConfig::N144, Epilogue::TmaLoadC) => TileConfig::MEDIUM,
        (TileConfig::N224, _) => TileConfig::LARGE,
        (_, Epilogue::TmaLoadC) => cooperative_twin(tile),
        _ => tile,
    }
}

/// The cooperative tile of a ping-pong tile's shape (128 x 128, 128 x 64, 64 x 64); any other
/// tile as it is.
pub fn cooperative_twin(tile: TileConfig) -> TileConfig {
    match tile {
        TileConfig::PINGPONG => TileConfig::SMALL,
        TileConfig::PINGPONG64 => TileConfig::TINY,
        TileConfig::PINGPONG_TINY => TileConfig::TINY64,
        _ => tile,
    }
}

/// The tile that runs where the producer reads an operand in place (`KILN_CPA`, an operand
/// whose rows TMA cannot address) and `tile` was picked: the single-CTA cooperative 128-row tile
/// of [`CPA_TILES`] nearest it (its B is not multicast, and the copies need whole 16-row groups):
/// 128 x 128 for the 64-row and up to 128-wide tiles, 128 x 192 for the 168-, 192- and 320-wide
/// ones, else 128 x 256. A ring forced by `KILN_WGMMA_STAGES` stays where the shape does. The
/// dispatch's own rule reads in place only where this is `tile` but for the cluster
/// (`inplace::in_place_tile`); `KILN_WGMMA_INPLACE=1` takes any tile here.
pub fn with_cpa(tile: TileConfig) -> TileConfig {
    let t = match (tile.bm, tile.bn) {
        (64, _) | (_, 64 | 128) => TileConfig::SMALL,
        (_, 168 | 192 | 320) => TileConfig::MEDIUM,
        _ => TileConfig::LARGE,
    };
    if (t.bm, t.bn) == (tile.bm, tile.bn) {
        TileConfig {
            stages: tile.stages,
            ..t
        }
    } else {
        t
    }
}

/// The tiles with variants that read operands in place ([`with_cpa`]): the short-K problems the
/// dispatch reads in place pick these (a narrower N picks a ping-pong tile, which has none).
pub const CPA_TILES: [TileConfig; 3] = [TileConfig::LARGE, TileConfig::MEDIUM, TileConfig::SMALL];

/// The tensor map the TMA-store epilogue writes C through: boxes of 64 rows of 128 bytes (64
/// 16-bit or 32 f32 elements; 128B swizzle, as the kernel stages them), global extents the true
/// N x M, so stores outside C are dropped. The same map adds chunks to C (beta = 1, TMA's
/// reduce-add) and loads C's old values ([`Epilogue::TmaLoadC`]). `None` when the epilogue must
/// stay in registers: a C that TMA cannot address (unaligned base or a row stride that is not a
/// multiple of 16 bytes).
pub fn output_map(p: &GemmProblem, c: u64) -> Option<Tma2d> {
    c_store_map(p.m, p.n, p.ldc, p.output, c)
}

/// [`output_map`] for any row-major C of `m` x `n` elements of `out`, rows `ldc` elements
/// apart, at `c` (the FP8 GEMM's TMA-store epilogue takes the same map).
pub fn c_store_map(m: usize, n: usize, ldc: usize, out: DType, c: u64) -> Option<Tma2d> {
    // A row whose byte length is not a multiple of 16 ends inside a 16-byte granule, and TMA
    // stores the whole granule (measured on H200: the ldc padding after N = 127 was
    // overwritten), so N must be a multiple of 8 elements (16-bit) or 4 (f32).
    if !(n * out.size()).is_multiple_of(16) {
        return None;
    }
    let map = Tma2d {
        dtype: out.tma(),
        addr: c,
        dims: [n as u64, m as u64],
        row_stride_bytes: ldc as u64 * out.size() as u64,
        box_dims: [128 / out.size() as u32, 64],
        swizzle: TmaSwizzle::B128,
    };
    map.validate().ok().map(|()| map)
}

/// How a launch writes C. Each is a variant of its own (`KILN_EPI`): compiled side by side, the
/// TMA and register epilogues more than doubled the code and spilled the 256-wide tile.
/// `Registers` is `KILN_EPI=0`: the row store in the cooperative kernel, the register epilogue
/// (a quad transpose and 16-byte stores) in the ping-pong one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Epilogue {
    /// `KILN_EPI=0`: in the cooperative kernel staged in shared memory and stored by rows
    /// (kernels/common/c_rows.cuh), in the ping-pong kernel from registers: a C that TMA cannot
    /// address, or `KILN_WGMMA_EPI=0`; reads C for any beta != 0.
    Registers,
    /// Staged chunks stored by TMA (`KILN_EPI=1`); beta = 1 adds them to C (TMA's reduce-add).
    TmaStore,
    /// Staged chunks blended with C's old values, which TMA loads into the staging buffers two
    /// chunks ahead, then stored by TMA (`KILN_EPI=2`): beta other than 0 and 1.
    TmaLoadC,
}

impl Epilogue {
    pub const ALL: [Epilogue; 3] = [Epilogue::Registers, Epilogue::TmaStore, Epilogue::TmaLoadC];

    /// The kernels' `KILN_EPI`.
    pub fn define(self) -> u32 {
        match self {
            Epilogue::Registers => 0,
            Epilogue::TmaStore => 1,
            Epilogue::TmaLoadC => 2,
        }
    }

    /// Its name in notes: `TMA-store`, `C-load` or `row-store` (`register` in a ping-pong tile,
    /// [`Epilogue::name_in`]).
    pub fn name(self) -> &'static str {
        match self {
            Epilogue::Registers => "row-store",
            Epilogue::TmaStore => "TMA-store",
            Epilogue::TmaLoadC => "C-load",
        }
    }

    /// Its name in notes for a launch of `tile`: the ping-pong kernel's `KILN_EPI=0` is the
    /// register epilogue.
    pub fn name_in(self, tile: TileConfig) -> &'static str {
        match self {
            Epilogue::Registers if tile.pingpong => "register",
            e => e.name(),
        }
    }

    /// Whether C goes out through TMA (either TMA epilogue).
    pub fn tma(self) -> bool {
        self != Epilogue::Registers
    }

    /// The epilogue for `p` whose C TMA can (`map_ok`, see [`output_map`]) or cannot address:
    /// beta 0 stores, beta 1 adds (TMA's reduce-add; `KILN_WGMMA_CLOAD=1` loads C instead, for
    /// 16-bit C the one rounding the register epilogue has), other betas load C first.
    pub fn for_problem(p: &GemmProblem, map_ok: bool, env: &GemmOverrides) -> Epilogue {
        if !map_ok || !env.epi {
            Epilogue::Registers
        } else if p.beta == 0.0 || (p.beta == 1.0 && !env.c_load) {
            Epilogue::TmaStore
        } else {
            Epilogue::TmaLoadC
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::{DType, Layout};

    #[test]
    fn the_epilogue_follows_beta_and_what_tma_can_address() {
        let env = GemmOverrides::NONE;
        let with = |beta: f32, out: DType| GemmProblem {
            beta,
            ..GemmProblem::new(2048, 2048, 2048, Layout::RC, DType::Bf16, out)
        };
        for out in DType::OUTPUTS {
            assert_eq!(
                Epilogue::for_problem(&with(0.0, out), true, &env),
                Epilogue::TmaStore
            );
            assert_eq!(
                Epilogue::for_problem(&with(1.0, out), true, &env),
                Epilogue::TmaStore
            );
            for beta in [0.5, -1.0, 2.0] {
                assert_eq!(
                    Epilogue::for_problem(&with(beta, out), true, &env),
                    Epilogue::TmaLoadC
                );
            }
            for beta in [0.0, 1.0, 0.5] {
                assert_eq!(
                    Epilogue::for_problem(&with(beta, out), false, &env),
                    Epilogue::Registers
                );
            }
        }
        // KILN_WGMMA_CLOAD=1 loads C at beta = 1 too; never at beta = 0 (C may be garbage)
        let c_load = GemmOverrides {
            c_load: true,
            ..env
        };
        assert_eq!(
            Epilogue::for_problem(&with(1.0, DType::Bf16), true, &c_load),
            Epilogue::TmaLoadC
        );
        assert_eq!(
            Epilogue::for_problem(&with(0.0, DType::Bf16), true, &c_load),
            Epilogue::TmaStore
        );
        let regs = GemmOverrides { epi: false, ..env };
        assert_eq!(
            Epilogue::for_problem(&with(0.5, DType::F32), true, &regs),
            Epilogue::Registers
        );
        // every beta takes a TMA map; N off 16 bytes does not
        assert!(output_map(&with(0.5, DType::F32), 1 << 20).is_some());
        let odd = GemmProblem::new(2048, 2046, 2048, Layout::RC, DType::Bf16, DType::F32);
        assert!(output_map(&odd, 1 << 20).is_none());
        // the kernels' defines
        let defs: Vec<u32> = Epilogue::ALL.iter().map(|e| e.define()).collect();
        assert_eq!(defs, [0, 1, 2]);
    }
}
