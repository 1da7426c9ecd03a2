//! The knobs' settings by op (GEMM, attention, MoE, SwiGLU, TMA, the bench, the tuner), each with
//! its defaults: the fields [`super::Overrides`] is made of.

use serde::Serialize;

use crate::ops::attention::fa3_wgmma::Config as Fa3Config;
use crate::ops::fp8::gemm::Fp8Rule;
use crate::ops::fp8::Fp8Pdl;
use crate::ops::gemm::small_k::SmallK;
use crate::ops::gemm::wgmma_tma_ws::{InPlace, Swap, TileConfig as WgmmaTile, WIDTHS_BY_DEFAULT};
use crate::ops::moe::fp4::kernel::Fp4Path;
use crate::ops::moe::fp4::{Fp4Order, Fp4TileRule};
use crate::ops::moe::grouped_swapab::SwapConfig;
use crate::ops::moe::schedule::TileConfig as MoeTile;
use crate::ops::moe::swiglu_dual::MAX_TAIL_SPLITS;

/// `KILN_WGMMA_*`: they win over both the tuned config and the heuristic of `wgmma_tma_ws`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmOverrides {
    /// `KILN_WGMMA_CFG`: the tile config to force, by name ([`crate::ops::gemm::wgmma_tma_ws::FORCED_CONFIGS`]). Default: none
    /// (the tuned config, else the heuristic).
    pub tile: Option<WgmmaTile>,
    /// `KILN_WGMMA_SPLITS` (1..=8): the split-K factor, single CTAs and pairs alike. Default:
    /// none (the config's own).
    pub splits: Option<u32>,
    /// `KILN_WGMMA_GROUP_M` (1..=64): the grouped tile order's tile-rows (compiles variants
    /// outside `variants()`). Default: none (`GROUP_M`, 8).
    pub group_m: Option<u32>,
    /// `KILN_WGMMA_PAIRS` (0 or 1). Default on; 0: large problems run in single CTAs, to time or
    /// rule out the cluster path.
    pub pairs: bool,
    /// `KILN_WGMMA_TAIL` (1: split only the last wave's tiles, 0: all). Default: none (the
    /// config's own).
    pub tail: Option<bool>,
    /// `KILN_WGMMA_SK` (1: stream-K where the tile config takes it, 0: never). Default: none
    /// (the config's own).
    pub stream_k: Option<bool>,
    /// `KILN_WGMMA_WIDTHS` (0 or 1; 0: the heuristic leaves the 224-wide tile out). Default:
    /// [`WIDTHS_BY_DEFAULT`].
    pub widths: bool,
    /// `KILN_WGMMA_GRID` (at least 1): at most this many resident clusters (a small problem then
    /// has several waves, to test stream-K and last-wave splits). Default: none (one per SM).
    pub grid: Option<u32>,
    /// `KILN_WGMMA_STAGES` (2..=12): the ring depth of whichever tile runs (compiles variants
    /// outside `variants()`; a ring that does not fit fails at launch). Default: none (the
    /// tile's own).
    pub stages: Option<u32>,
    /// `KILN_WGMMA_EPI` (0 or 1). Default on; 0: the register epilogue even where C takes TMA
    /// stores, to time one against the other or check the register one.
    pub epi: bool,
    /// `KILN_WGMMA_CLOAD` (0 or 1). Default off; 1: beta = 1 loads C into the staging chunks as
    /// other betas do, instead of TMA's reduce-add (16-bit C rounded once).
    pub c_load: bool,
    /// `KILN_WGMMA_INPLACE` (0, 1 or auto; [`InPlace`]). Default auto: C is written in place
    /// wherever TMA cannot address it, and an operand whose rows TMA cannot address is read in
    /// place by the producer warpgroup's cp.async copies where its cost model says that beats
    /// copying it to 128-byte rows first; 0: the copies and C's scratch, as before 2026-11-29;
    /// 1: every such operand read in place.
    pub inplace: InPlace,
    /// `KILN_WGMMA_LONGK` (0 or 1). Default on: few 64 x 64 tiles at a long K (one wave on at
    /// most half the SMs, K >= 4000) run as 128 x 64 or 128 x 128 tiles split in K; 0: the one
    /// wave of 64 x 64 tiles of before 2026-11-29.
    pub long_k: bool,
    /// `KILN_WGMMA_SWAP` (0, 1 or auto; [`Swap`]). Default auto: problems with few rows of C and
    /// many columns run as Cᵀ = Bᵀ·Aᵀ where the cost model says so; 0 never, 1 always (128x144
    /// tiles unless `KILN_WGMMA_CFG` names another).
    pub swap: Swap,
    /// `KILN_WGMMA_SPLITK` (0 or 1). Default off; 1: unsplit launches too run the variant with
    /// the split-K code, as every launch did before ledger #91.
    pub split_code: bool,
    /// `KILN_WGMMA_DEFER` (0 or 1; the kernel's `KILN_EPI_DEFER`). Default on: the TMA-store
    /// epilogue goes out chunk by chunk under the next unit's K blocks; 0 stores the whole tile
    /// before the next unit starts.
    pub defer: bool,
    /// `KILN_WGMMA_PDL` (0 or 1). Default on: the GEMM after a copy of ours is launched as its
    /// programmatic dependent; 0 launches it after the copy has finished.
    pub pdl: bool,
    /// `KILN_WGMMA_ROWV` (0 or 1). Default off: the row-store epilogue writes C an element a
    /// lane; 1: 16-bit C with beta = 0 by 16-byte windows of its rows (ledger #99: 15-50 % slower
    /// on an H200, an experiment).
    pub rows_v: bool,
    /// `KILN_WGMMA_SMALLK` (0, 1 or auto; [`SmallK`]). Default auto: a K of at most 32 with a C
    /// that TMA cannot store runs the small-K kernel (`kernels/gemm/small_k.cu`: operands read
    /// in place, C stored by rows); 0 never, 1 every problem.
    pub small_k: SmallK,
    /// `KILN_WGMMA_SMALLK_VEC` (0 or 1). Default off: the small-K kernel stores C an element a
    /// lane; 1 (beta 0) by 16-byte chunks of its rows (ledger #100: 1.3-1.9x slower on an H200).
    pub small_k_vec: bool,
}

impl GemmOverrides {
    /// No overrides: the defaults.
    pub const NONE: GemmOverrides = GemmOverrides {
        tile: None,
        splits: None,
        group_m: None,
        pairs: true,
        tail: None,
        stream_k: None,
        widths: WIDTHS_BY_DEFAULT,
        grid: None,
        stages: None,
        epi: true,
        c_load: false,
        inplace: InPlace::Auto,
        swap: Swap::Auto,
        long_k: true,
        split_code: false,
        defer: true,
        pdl: true,
        rows_v: false,
        small_k: SmallK::Auto,
        small_k_vec: false,
    };
}

impl Default for GemmOverrides {
    fn default() -> Self {
        GemmOverrides::NONE
    }
}

/// `KILN_FA3_D<d>` for the head dims `fa3_wgmma` runs: a comma list of `key=value` applied to
/// that dim's default config (`bn=`, `cwg=`, `stages=`, `emu=`, `persist=`, `dynamic=`, `lazy=`,
/// `order=`, `qbuf=` numbers; `overlap=`, `pingpong=` 0 or 1). It wins over the tuned config.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionOverrides {
    /// `KILN_BWD_D256_P16`: the d256 backwards hand Pᵀ from the warpgroup that computes it to the
    /// one that computes dSᵀ in 16-bit pairs (8 KB a block) instead of fp32. Default: false.
    pub bwd_d256_p16: bool,
    /// `KILN_BWD_DET_LPT`: the deterministic causal backward (`bwd_fa3_ordered_eager`) launches
    /// its key blocks longest walk first in chunks of heads (`lpt_block`) where a head's key
    /// blocks fit on the SMs at once, instead of each head's in reverse. Default: false.
    pub bwd_det_lpt: bool,
    /// `KILN_BWD_DET_WRITERS`: the deterministic backward's dQ writer warps (1 or 2, taking the
    /// query blocks in turn). Default: 1.
    pub bwd_det_writers: u32,
    /// `KILN_BWD_DQ_KEYS`: `bwd_fa3_bulk_dq` and `bwd_fa3_tma_dq` at d128 split dQ between their
    /// warpgroups by keys (each its own 64, no meeting) instead of by columns. Default: false.
    pub bwd_dq_keys: bool,
    /// `KILN_BWD_EXP_POLY`: how many of every 8 of Pᵀ's exponentials `bwd_fa3_m128_fma` computes
    /// by a polynomial on the FMA pipe instead of MUFU (0: none). Default: none (its own, 0).
    pub bwd_exp_poly: Option<u32>,
    /// `KILN_BWD_LPT`: whether the causal WGMMA backwards launch their key blocks longest walk
    /// first, a chunk of (key/value head, batch) pairs at a time (`attention_backward::lpt`),
    /// instead of in the grid's order. Default: none (the rule: at d64 from 4,096 query rows).
    pub bwd_lpt: Option<bool>,
    /// `KILN_BWD_NO_AHEAD`: `bwd_fa3_lookahead` issues each query block's Sᵀ at the block's top
    /// (descriptors by adds only) instead of before the previous block's dQ staging. Default:
    /// false.
    pub bwd_no_ahead: bool,
    /// `KILN_BWD_PINGPONG`: `bwd_fa3_tma_dq`'s two warpgroups take turns to issue Sᵀ and dPᵀ, so
    /// that one's exponentials run under the other's products. Default: false.
    pub bwd_pingpong: bool,
    /// `KILN_BWD_TAIL`: the non-causal WGMMA backwards (`bwd_fa3_lookahead`'s file) split the
    /// key blocks of the grid's last partial wave into parts (`attention_backward::tail`): 1 as
    /// many as the host's model picks, 2 to 32 that many (the deterministic d256 split at most as
    /// many as fit on the SMs at once); 0: off everywhere. Default: none (the default version,
    /// `bwd_fa3_tail`, and `bwd_fa3_d256_w2_cols2t` take the model's split; the older versions
    /// asked for by name run the grid whole).
    pub bwd_tail: Option<u32>,
    /// `KILN_BWD_VARLEN_COMPACT`: the packed backward's grid with the sequences' key blocks back
    /// to back (no block past a shorter sequence's keys), for batches of at most 63 sequences.
    /// Default: false.
    pub bwd_varlen_compact: bool,
    /// `KILN_BWD_DQ_FUSED`: the packed backward (d64's 128-row tile, d128) converts dQ in its
    /// main kernel (the last adder of each 64 query rows, through a writer warp) instead of a
    /// postprocess: 1; 2, the same with the fp32 accumulator left zero by the converters (its own
    /// workspace; the preprocess computes D only); 3, no writer warp: the last key block of each
    /// (sequence, key/value head) converts its rows, the accumulator left zero; 0, the
    /// postprocess. Default (`None`): 2 on d64's 128-row tile (0.906-0.909x one dense call
    /// against 0.898-0.903x, two H200 rounds, ledger B28), 3 at d128 (0.912-0.914x against the
    /// postprocess's 0.886-0.888x, B31; 1 and 2 there lose, their writer warp cannot keep up, B27).
    pub bwd_dq_fused: Option<u32>,
    /// `KILN_BWD_VARLEN_M128`: the packed d64 backward runs `bwd_fa3_m128_fma`'s tile (128 query
    /// rows a step) instead of `bwd_fa3_lookahead`'s 64-row one. Default: true (1.09-1.11x the
    /// 64-row tile in two H200 rounds, 2026-11-30).
    pub bwd_varlen_m128: bool,
    /// `KILN_FA3_D64`. Default: none (the tuned config, else `Config::default_for(64)`).
    pub fa3_d64: Option<Fa3Config>,
    /// `KILN_FA3_D128`. Default: none (the tuned config, else `Config::default_for(128)`).
    pub fa3_d128: Option<Fa3Config>,
    /// `KILN_FA3_D256`. Default: none (the tuned config, else `Config::default_for(256)`).
    pub fa3_d256: Option<Fa3Config>,
}

/// [`AttentionOverrides::NONE`] (a derived default would take `bwd_varlen_m128`'s false).
impl Default for AttentionOverrides {
    fn default() -> Self {
        AttentionOverrides::NONE
    }
}

impl AttentionOverrides {
    /// No overrides: the defaults.
    pub const NONE: AttentionOverrides = AttentionOverrides {
        bwd_d256_p16: false,
        bwd_det_lpt: false,
        bwd_det_writers: 1,
        bwd_dq_keys: false,
        bwd_exp_poly: None,
        bwd_lpt: None,
        bwd_no_ahead: false,
        bwd_pingpong: false,
        bwd_tail: None,
        bwd_varlen_compact: false,
        bwd_dq_fused: None,
        bwd_varlen_m128: true,
        fa3_d64: None,
        fa3_d128: None,
        fa3_d256: None,
    };

    /// The config `KILN_FA3_D<d>` forces for head dim `d`, if set.
    pub fn fa3(&self, d: u32) -> Option<Fa3Config> {
        match d {
            64 => self.fa3_d64,
            128 => self.fa3_d128,
            256 => self.fa3_d256,
            _ => None,
        }
    }
}

/// The plain grouped GEMM kernel `KILN_MOE_GROUPED` names.
pub const MOE_GROUPED_VERSIONS: [&str; 2] = ["grouped_gemm", "grouped_swapab"];

/// `KILN_MOE_ORDER`: the kind of tile order of the MoE schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoeOrder {
    /// `fixed`: groups of a fixed number of m-tiles.
    Fixed,
    /// `expert`: groups aligned to experts.
    Expert,
}

/// `KILN_MOE_*`: the grouped MoE kernels' choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeOverrides {
    /// `KILN_MOE_GROUPED` (`grouped_gemm` or `grouped_swapab`): the version that computes a plain
    /// grouped GEMM. Default: none (`grouped_gemm`).
    pub grouped: Option<&'static str>,
    /// `KILN_MOE_TILE` (`128x256`, `128x192`, `128x128`, `64x256`, each optionally with `c2` for
    /// CTA pairs): `grouped_gemm`'s tile shape. Default: none (its cost model's choice).
    pub tile: Option<MoeTile>,
    /// `KILN_MOE_SWAP` (`128x256`, `256x128`, `128x128`: weight rows x tokens):
    /// `grouped_swapab`'s tile shape. Default: none (128 x 256).
    pub swap: Option<SwapConfig>,
    /// `KILN_MOE_LPT` (0 or 1). Default on: `grouped_swapab` hands out tiles heaviest expert
    /// first; 0 keeps the grouped order.
    pub lpt: bool,
    /// `KILN_MOE_GROUP` (at least 1): the tile order's group width. Default: none (one group of
    /// all m-tiles for short experts, else expert-aligned groups of at most 8 m-tiles).
    pub group: Option<u32>,
    /// `KILN_MOE_ORDER` (`fixed` or `expert`): the tile order's kind. Default: none (as for
    /// `group`).
    pub order: Option<MoeOrder>,
    /// `KILN_MOE_PDL` (0 or 1). Default on: `swiglu_dual` is launched as `moe_tile_prefix`'s
    /// programmatic dependent, so its prologue overlaps that kernel and the launch gap; 0
    /// launches it plainly.
    pub pdl: bool,
    /// `KILN_FP4_PATH` (`rs` or `dq`): where the 4-bit experts dequantise their weights, in
    /// each consumer's registers or once per CTA into shared memory (the fused SwiGLU with bf16
    /// activations only). Default: none (the registers; the shared-memory path was slower where
    /// measured, docs/moe.md).
    pub fp4_path: Option<Fp4Path>,
    /// `KILN_FP4_CTAS` (1 or 2): CTAs per SM of the 4-bit SwiGLU's 8-token decode tile (bf16
    /// activations); 2 halves each CTA's stages and doubles the consumer warps decoding weights
    /// on an SM. Default 2 (18 % faster at the 512-row decode on an H200, docs/moe.md).
    pub fp4_ctas: u32,
    /// `KILN_FP4_PAIR` (`swiglu` or `all`): `all` runs the 4-bit grouped GEMM's 8-token decode
    /// tile at `fp4_ctas` CTAs an SM too (the MoE layer's down projection at 1-8 tokens, 132
    /// CTAs of one tile each where the SwiGLU runs 264). Default `all` (H200, 2026-11-29, 3fa7842,
    /// with the tail split: the down projection at 4 and 8 tokens 45.7 -> 32.8 and 62.4 -> 43.4
    /// us, verified; docs/moe.md F10).
    pub fp4_pair_gemm: bool,
    /// `KILN_FP4_DECODE` (`rot` or `shift`): the 4-bit experts' dequantisation moves code bits
    /// with funnel shifts (ALU pipe) or, where no bit wraps, plain left shifts written as
    /// multiplies (FMA pipe), and the wgmma descriptors by addition. The same bits either way.
    /// Default `shift` (H200, 2026-11-29, 5268cf5: the 512-row decode 979-984 us against
    /// 1,068-1,114, verified; docs/moe.md, ledger F7).
    pub fp4_shift: bool,
    /// `KILN_FP4_MMA` (`wgmma` or `sync`): the 4-bit experts' 8-token decode tile issues the
    /// consumer warpgroup's wgmma (each batch waits for its four warps) or each warp's own
    /// mma.sync m16n8k16 on the same fragments (docs/moe.md, ledger F30). Default `wgmma` until
    /// the device shows `sync` faster.
    pub fp4_mma_sync: bool,
    /// `KILN_FP4_PDL` (0 or 1): 1 launches the 4-bit experts' decode tiles (8 and 16 tokens) as
    /// `moe_tile_prefix`'s programmatic dependent and builds their tables unsorted (every decode
    /// tile streams the whole K, so the heaviest-first order buys nothing there; docs/moe.md,
    /// ledger F31). Default 0 until the device shows 1 faster.
    pub fp4_pdl: bool,
    /// `KILN_FP4_PDL=wide` (the default from 2026-12-01, ledger F210: won two rounds, the
    /// grouped GEMM at 200 rows -4 to -5 %): the 4-bit experts' tiles of 64 to 256 tokens
    /// launched as `moe_tile_prefix`'s programmatic dependent, their tables sorted as without
    /// it: their CTAs start and set up their barriers while the prefix runs. `0` or `1` turn it
    /// off.
    pub fp4_pdl_wide: bool,
    /// `KILN_FP4_PDL=own` (ledger F223; off by default): as `wide`, and where the tables are
    /// built just before over at most `MOE_SORT_MAX` experts, each CTA builds them itself from
    /// the rows before the prefix kernel ends, waiting for it only before its tile counter.
    pub fp4_own_tables: bool,
    /// `KILN_FP4_GEMV` (`auto`, `regs`, `async`, `wide`, `lean`, `leanx`, `lean1`, `xring`,
    /// `xswz`, `xstage`, `pack` or `xswz2`): how
    /// the NVFP4 GEMV streams its weights. Default [`Fp4Gemv::Auto`]: by M, the path measured
    /// fastest there (H200: lean at M 1, xswz at 2-4 from 9ba589c (2026-11-29) and at 5-8 from
    /// 2026-11-30, wide above; docs/fp4.md G5, G6, G18); K not a multiple of 128 runs the
    /// register path.
    pub fp4_gemv: Fp4Gemv,
    /// `KILN_FP4_GEMV_ACC` (`auto`, 1, 2 or 4; 0 is `auto`): the accumulator chains a warp of the
    /// NVFP4 GEMV spreads its mmas over (one chain: each mma waits for the one before;
    /// docs/fp4.md G17). Default `auto` from 2026-12-01: 4 on the GEMV layout at M 1 (pack's
    /// lean ring: -2 to -3 % at 1x8192x8192 chained in two rounds on an H200, 2.49 -> 2.55x
    /// cuBLAS bf16, G71), 1 elsewhere.
    pub fp4_gemv_acc: u32,
    /// `KILN_FP4_GEMV_PDL` (0 or 1): the NVFP4 GEMV launched as a programmatic dependent of the
    /// kernel before it on the stream, releasing its own dependents as it starts: the lean ring
    /// (M 1) and the X ring (M 2-4) ask for their first weight stages before
    /// `griddepcontrol.wait` (weights are not written by the kernel before a GEMV: a layer's
    /// input is), X and everything after it behind the wait; the other paths wait first. Default 1 (H200, 2026-11-30: chained launches -17.6 %
    /// at 1x8192x8192 and -14 % at 4x14336x4096 in two rounds, lone launches equal; docs/fp4.md
    /// G14, G16); 0 launches it as an ordinary kernel (a GEMV after a kernel that writes its
    /// weights and releases its dependents before those writes would read them stale).
    pub fp4_gemv_pdl: bool,
    /// `KILN_FP4_TAIL` (1 to 16): the most K slices the 4-bit experts' decode tiles (8 and 16
    /// tokens) cut a last wave's tiles into when that wave is at most half full. Default 8 (H200,
    /// 2026-11-29, 3fa7842: the MoE layer's SwiGLU at 1 and 4 tokens 28.1 -> 23.1 and 50.1 -> 43.0
    /// us, 8 tokens unchanged, the 512-row decode -2 to -5 % (F6); verified; docs/moe.md F9); 1
    /// never splits.
    pub fp4_tail: u32,
    /// `KILN_FP4_BALANCE` (0 or 1): 1 cuts any last wave of the decode tiles into the slice
    /// count (up to `fp4_tail`) whose rounds of slices end it first (docs/moe.md, ledger F32);
    /// 0 cuts only a wave at most half full, into CTAs / tail tiles. Default 1 (H200,
    /// 2026-11-30, 693ae7f, two rounds: the E256 64-row decode 302.0 / 302.9 -> 283.5 / 284.5 us,
    /// the 512-row decode on the same path; verified at the 64- and 512-row counts).
    pub fp4_balance: bool,
    /// `KILN_FP4_FILL` (0 or 1): 1 launches the 4-bit experts' decode tiles on every CTA the SMs
    /// hold (not at most one a tile), so that their last-wave split (`fp4_tail`, `fp4_balance`)
    /// reaches a launch of fewer tiles than CTAs, and, where the host counts a launch or last
    /// wave of at most half the CTAs, the tiles of 64 to 256 tokens too, cut into up to 4 slices,
    /// one round (one expert of 300 rows at N 2048: 48 tiles on 132 SMs, two slices each;
    /// docs/moe.md, ledger F51, F53, F72). Default 0 until the device shows it faster in two
    /// rounds.
    pub fp4_fill: bool,
    /// `KILN_FP4_NARROW` (0 or 1): 1 gives launches whose experts have at most 16 rows the
    /// 8-token decode tile (two CTAs an SM, as the dispatch pairs it) in place of the 16-token
    /// one (one CTA an SM) where that costs at most a quarter more tiles
    /// ([`crate::ops::moe::fp4::Fp4Tile::eight_pays`]; docs/moe.md, ledger F52). Default 1 from
    /// 2026-11-30 (H200, two rounds: the 1,024-row decode's SwiGLU 2.45 -> 2.96-3.12x kiln's
    /// bf16, its down projection 1.63 -> 2.41x; ledger F70); 0 keeps the 16-token tile.
    pub fp4_narrow: bool,
    /// `KILN_FP4_TILE` (`count-fit`, `count-cut`, `count-pair`, `count`, `rows` or one tile): how
    /// the 4-bit experts' register path picks its tile ([`Fp4TileRule`]; docs/moe.md, ledger
    /// F71, F100, F140, F181). Default `count-fit` from 2026-12-01 (won two rounds on an H200:
    /// the grouped GEMM at 300 rows 0.79 -> 1.04x kiln's bf16, F181): the tile of least
    /// estimated time from the rows' tile counts, split in K where it runs few, the grouped
    /// GEMM's wide tile fitted to the launch; `rows` is the narrowest tile that holds the most
    /// rows an expert has.
    pub fp4_tile: Fp4TileRule,
    /// `KILN_FP4_ORDER` (`experts`, `whole-first` or `auto`): the order in which the 4-bit
    /// experts' register path hands out its tiles of 64 to 256 tokens on launches of at most
    /// [`crate::ops::moe::fp4::kernel::ORDER_EXPERTS`] experts: each expert's m-tiles in a row
    /// (the tables' order), or every whole m-tile first and the experts' short last ones after
    /// them, so that the long tiles start in the first wave (docs/moe.md, ledger F101), or that
    /// only where the host's counts say it pays ([`Fp4Order`], ledger F141). Default `auto`
    /// from 2026-11-30 night (F161: two rounds on an H200, the folds 0.83-0.94 -> 1.06-1.10x
    /// kiln's bf16, E64 unchanged; on the SwiGLU's 128-token tile only); `experts` for A/B.
    pub fp4_order: Fp4Order,
    /// `KILN_FP4_PREFETCH` (0 to 32): the 4-bit decode tiles' producer asks L2 for each weight
    /// atom this many stages before it fills its stage (a tile's first ones at its start):
    /// bytes in flight from DRAM that hold no shared memory (docs/moe.md, ledger F33). Default
    /// 0 (none) until the device shows a distance faster.
    pub fp4_prefetch: u32,
    /// `KILN_FP4_LOAD` (`bulk` or `tma`): the 4-bit experts' producer loads each weight atom
    /// (register path) by one bulk copy or as a TMA box of a map over the weights with 256-byte
    /// L2 promotion, the way kiln's bf16 kernels load theirs (docs/moe.md, ledger F34). Default
    /// `bulk` until the device shows `tma` faster.
    pub fp4_load_tma: bool,
    /// `KILN_FP4_STAGGER` (0 or 1): 1 has each unit (tile or slice) of the 4-bit decode tiles
    /// walk its K atoms from a point of its own, wrapping, so that tiles handed out together do
    /// not stream their weight blocks at the same offsets in lockstep (docs/moe.md, ledger
    /// F35). Default 0 until the device shows 1 faster.
    pub fp4_stagger: bool,
    /// `KILN_FP4_DEEP` (0 or 1): 1 gives the 4-bit experts' paired decode tiles of launches
    /// of up to 256 experts shared-memory tables for 256 (not 1,024) and the stage that frees
    /// (the SwiGLU's ring 9 -> 10 stages a CTA; docs/moe.md, ledger F36). Default 0 until the
    /// device shows 1 faster.
    pub fp4_deep: bool,
    /// `KILN_FP4_RUN` (1, 2 or 4): the 4-bit decode tiles' producer brings a weight block's
    /// atoms of that many consecutive stages in one bulk copy (longer contiguous runs of global
    /// memory a request) where the ring slot and the unit allow, with shared memory laid out by
    /// block (docs/moe.md, ledger F37). Default 4 from 2026-11-30 (faster in two rounds on an
    /// H200: the E256 decode 6-8 % at 512 and 64 rows, NVFP4 and MXFP4); 1 is a copy an atom,
    /// as before. The eliminated KILN_FP4_PREFETCH, KILN_FP4_STAGGER and KILN_FP4_LOAD=tma take 1.
    pub fp4_run: u32,
    /// `KILN_FP4_EPI` (`each`, `ahead` or `defer`): the epilogue of the 4-bit experts' register
    /// path on its tiles of 64 to 256 tokens: 0 reads each token's routing weight right before
    /// its stores (the compiler cannot move a load above a store, so a 128-token tile waits for
    /// 32 dependent round trips to L2 or L1); 1 loads them all first; 2 also stores half the
    /// results under the next tile's first wgmma batch (the 128- and 256-token tiles; 1 on the
    /// 64-token one, where ptxas would serialise the wgmmas). docs/moe.md, ledger F80. Default
    /// `each` until the device shows another faster in two rounds.
    pub fp4_epi: u32,
    /// `KILN_FP4_XTILE` (0, 1, 2 or 4): not 0, the 4-bit experts' register path on its tiles
    /// of 64 to 256 tokens loads each stage's X as one TMA box of the whole tile (not boxes of
    /// 16 rows), and its weight atoms of that many stages in one bulk copy (docs/moe.md, ledger
    /// F81). Default 2 from 2026-11-30 (with `KILN_FP4_EPI=ahead`, ledger F82); 0 is the old
    /// form (boxes of 16 rows, a copy an atom), for A/B.
    pub fp4_xtile: u32,
    /// `KILN_FP4_GCOLS` (128 or 256): 256 runs the 4-bit experts' grouped GEMM as tiles of 128
    /// tokens by 256 output columns where the rows would give its 256-token tile (each consumer
    /// two 64-row weight blocks a stage: half the X bytes a stage for the same tensor work, and
    /// 8 stages in the ring instead of 5; docs/moe.md, ledger F111). Default 128 until the
    /// device shows 256 faster in two rounds.
    pub fp4_gcols: u32,
    /// `KILN_W4A8_SX` (`ldg` or `tma`): the W4A8 experts' X scales loaded by each consumer from
    /// global memory one K block ahead, or staged by the producer's TMA beside each K block's X
    /// tile (no global load before the fence that precedes each step's barrier). Default `tma`
    /// (H200, 2026-11-29: the 512-row decode -3.5 to -4 % in two calls, a58281f and 004f7d6;
    /// 32,768 rows equal; verified and sanitizer-clean; docs/moe.md, ledger F11, F13).
    pub w4a8_sx_staged: bool,
    /// `KILN_W4A8_DECODE` (`consumers`, `producer` or `warpgroup`): where the W4A8 experts' weight
    /// atoms are decoded ([`W4a8Decode`]). Default `consumers`: `producer` verifies but ran
    /// 24-43 % slower on the H200 (docs/moe.md, ledger F14); `warpgroup` and `warpgroup-ring`
    /// until the device shows one faster in two rounds (F40, F41).
    pub w4a8_decode: W4a8Decode,
    /// `KILN_W4A8_PROMOTE` (`after` or `beside`): the W4A8 consumers' K step as before (block j's
    /// promotion, then the wait for stage j + 2 and its decode) or with the stage waited for
    /// first and its decode beside the promotion in one block of code (docs/moe.md, ledger F16).
    /// Default `after` until the device shows `beside` faster.
    pub w4a8_beside: bool,
    /// `KILN_W4A8_IDLE` (`wait` or `decode`): in a W4A8 tile of at most 64 tokens, the consumer
    /// without tokens waits at each step's barrier after decoding its atom, or decodes both
    /// atoms while the other only promotes and issues (ledger F17; with `beside` and `tma`).
    /// Default `wait` until the device shows `decode` faster.
    pub w4a8_idle_decode: bool,
    /// `KILN_W4A8_FORM` (`auto`, `ss`, `wide` or `wide-lean`): the W4A8 experts with
    /// the decoded weights in shared memory as wgmma's B, read by two consumers of 64 tokens
    /// (`ss`) or in tiles of 192 tokens by three (`wide`, F60; `wide-lean` with each decoding
    /// thread's loads first from addresses kept a tile, F122). (The register forms `rs`, `rs-lanes`,
    /// `rs-frags` and `wide-rs` lost every round: deleted 2026-12-01, F190; `wide-calc`, the
    /// blocks' e4m3 tables computed, lost two rounds: deleted 2026-12-01, F191, F201.) Default
    /// `auto`: `wide-lean` for the SwiGLU and `wide` for the grouped GEMM at prefill, where `wide`
    /// won two rounds (F60; the GEMM's F90, F120) and `wide-lean` two against `wide-first`, which
    /// had won two against `wide` (F91, F122, F150; `wide-first` deleted), `ss` at decode (F90).
    pub w4a8_form: W4a8Form,
    /// `KILN_MOE_GATHER` (`auto`, `copy`, `tma` or `cp_async`): how the MoE layer's gate/up
    /// projection reads X's rows in the expert-sorted order. Default `auto`
    /// ([`MoeGather::Auto`]).
    pub gather: MoeGather,
    /// `KILN_FP8_GROUPED` (`ldg`, `t`, `tm`, `tm256`, `tm256bh` or `tm256bht`):
    /// how the FP8 grouped GEMM
    /// feeds its mainloop ([`Fp8GroupedFeed`]). Default: none, `tm256bht` where X's scales can be
    /// mapped ([`Fp8GroupedFeed::default_for`]).
    pub fp8_grouped: Option<Fp8GroupedFeed>,
    /// `KILN_FP8_GROUPED_NOSTORE` (`0` or `1`): a diagnostic, never verified: the FP8 grouped
    /// GEMM with every store of Y skipped (its output unwritten), to time the epilogue's share
    /// (docs/fp8.md ledger row 161). Default `0`.
    pub fp8_grouped_nostore: bool,
}

impl MoeOverrides {
    /// No overrides: the defaults.
    pub const NONE: MoeOverrides = MoeOverrides {
        grouped: None,
        tile: None,
        swap: None,
        lpt: true,
        group: None,
        order: None,
        pdl: true,
        fp4_path: None,
        fp4_ctas: 2,
        fp4_pair_gemm: true,
        fp4_shift: true,
        fp4_mma_sync: false,
        fp4_pdl: false,
        fp4_pdl_wide: true,
        fp4_own_tables: false,
        fp4_gemv: Fp4Gemv::Auto,
        fp4_gemv_acc: 0,
        fp4_gemv_pdl: true,
        fp4_tail: 8,
        fp4_balance: true,
        fp4_fill: false,
        fp4_narrow: true,
        fp4_tile: Fp4TileRule::CountFit,
        fp4_order: Fp4Order::Auto,
        fp4_prefetch: 0,
        fp4_load_tma: false,
        fp4_stagger: false,
        fp4_deep: false,
        fp4_run: 4,
        fp4_epi: 1,
        fp4_xtile: 2,
        fp4_gcols: 128,
        w4a8_sx_staged: true,
        w4a8_decode: W4a8Decode::Consumers,
        w4a8_beside: false,
        w4a8_idle_decode: false,
        w4a8_form: W4a8Form::Auto,
        gather: MoeGather::Auto,
        fp8_grouped: None,
        fp8_grouped_nostore: false,
    };
}

/// Where the W4A8 experts decode their weight atoms (`KILN_W4A8_DECODE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum W4a8Decode {
    /// Each consumer warpgroup its own atom of every stage, between the stage's wait and its
    /// wgmmas, then a named barrier with the other consumer.
    Consumers,
    /// The producer warpgroup's three idle warps, both atoms a stage ahead (ledger F14).
    Producer,
    /// A fourth warpgroup of four decoding warps, both atoms a stage ahead, two units a thread
    /// with their loads in flight together; the consumers only wait, issue and promote
    /// (ledger F40).
    Warpgroup,
    /// `Warpgroup` with the weight atoms in a ring of their own, freed by the decoding warps,
    /// apart from X's (freed by the consumers), so that a stage is not held from the decode a
    /// stage ahead to the consumers' wgmmas (ledger F41).
    WarpgroupRing,
}

impl W4a8Decode {
    /// The knob's name for it.
    pub fn name(self) -> &'static str {
        match self {
            W4a8Decode::Consumers => "consumers",
            W4a8Decode::Producer => "producer",
            W4a8Decode::Warpgroup => "warpgroup",
            W4a8Decode::WarpgroupRing => "warpgroup-ring",
        }
    }
}

/// The form of the W4A8 experts' kernel (`KILN_W4A8_FORM`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum W4a8Form {
    /// By the launch's rows per expert: at prefill (contiguous rows, at least
    /// `kernel_w4a8::WIDE_ROWS_PER_EXPERT` an expert on average, at most 256 experts, the other
    /// W4A8 knobs at their defaults) `WideLean` for the fused SwiGLU and `Wide` for the grouped
    /// GEMM, `Ss` otherwise (decode, masked rows; ledger F90, F120).
    Auto,
    /// The decoded weights in shared memory, wgmma's B operand, read by both consumers.
    Ss,
    /// `Ss` in tiles of 192 tokens: three consumer warpgroups of 64 read each decoded weight
    /// tile, one accumulator each (ledger F60).
    Wide,
    /// `Wide` with both 32-blocks' shared loads of a decoding thread's unit issued before its
    /// first store (F91's `wide-first`, deleted after this won two rounds against it), its
    /// addresses kept across the K loop and seven operations a code word (ledger F122, F150).
    WideLean,
}

impl W4a8Form {
    /// The knob's name for it.
    pub fn name(self) -> &'static str {
        match self {
            W4a8Form::Auto => "auto",
            W4a8Form::Ss => "ss",
            W4a8Form::Wide => "wide",
            W4a8Form::WideLean => "wide-lean",
        }
    }

    /// Every value the knob takes.
    pub const ALL: [W4a8Form; 4] = [
        W4a8Form::Auto,
        W4a8Form::Ss,
        W4a8Form::Wide,
        W4a8Form::WideLean,
    ];
}

/// How the NVFP4 GEMV streams its weights (`KILN_FP4_GEMV`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp4Gemv {
    /// By M: `Lean` at 1 (19.6-20.0 us at 1x8192x8192 against wide's 22.9-23.1, never slower in
    /// three runs), `Xring` at 2-4 (21.6 against 22.9 at 4x14336x4096), `Wide` above.
    Auto,
    /// Each lane loads its 16 bytes of two rows into registers, the next iteration's in flight.
    Regs,
    /// A cp.async ring of 8 steps a warp in shared memory (K a multiple of 128).
    Async,
    /// A cp.async ring of 3 four-step stages a warp, each copy instruction covering two rows'
    /// 256 contiguous bytes, and a decode with one multiply a pair (K a multiple of 128).
    Wide,
    /// A cp.async ring of 4 two-step stages a warp, copy addresses computed once a lane, X
    /// stored into shared memory in the mma's pair order (K a multiple of 128, M up to 4; a
    /// larger M runs `Wide`).
    Lean,
    /// `Lean` with each warp's first X load issued before its ring's first weight copies (M up
    /// to 4; a larger M runs `Wide`).
    Leanx,
    /// `Lean` compiled for M 1: no loops over X's rows, slots stepped around the ring, read
    /// offsets kept, and a lazy start (each warp's first stage alone, the ring filled once it
    /// has landed). Other M run `Lean` (docs/fp4.md G9).
    Lean1,
    /// A cp.async ring of 4 one-step slots a warp, each carrying its step's X beside the
    /// weights (no X in registers), at most 80 registers and ~24 warps an SM at M 1 (K a
    /// multiple of 128).
    Xring,
    /// `Xring` with X's rows 272 bytes apart and the halves of a lane's 64 bytes swapped for q 2
    /// and 3, so that the X reads of an 8-lane phase hit the 32 banks once (K a multiple of 128).
    Xswz,
    /// A cp.async ring of 3 two-step stages a warp carrying X (xswz's placement), each lane
    /// putting its own X chunks into the mma's pair order once a stage: about half the X ring's
    /// copy and permute instructions a step (K a multiple of 128, M up to 8; a larger M runs
    /// `Wide`). Verified, but slower than `Lean` and `Xswz` on the H200 (docs/fp4.md G8).
    Xstage,
    /// `Auto`'s rings (`Lean` at M 1, `Xswz` above) reading codes in the GEMV layout
    /// (`nvfp4_gemv::gemv_layout`: each 32-bit word's bits placed for a decode of 9
    /// instructions a word against 13, pair i of a word codes 2i and 2i + 1), where the caller
    /// holds them so and says so (`nvfp4_gemv::launch_packed`; `fp4 verify` and `fp4 bench
    /// --gemv` do under this knob); standard codes run those rings as they are. H200,
    /// 2026-11-29: 18.8 against auto's 20.0 us at 1x8192x8192, 19.0 against 20.3 at
    /// 4x14336x4096, verified (docs/fp4.md G10). At M 2-8 with at least 16 steps of K a warp
    /// (`GemvProblem::two_tiles_pay`) the GEMV layout runs `Xswz2` instead (the two-tile ring:
    /// -31 % at 4x28672x8192 and -5 % at 4x16384x16384 in two rounds, G19; from G20 on). The
    /// pairs are adjacent from G30 on (G21: the mma's B pairs are X's words as they are, no X
    /// permutes; -4.4 to -5 % at M 4, two rounds). The GEMV layout is tiled from G61 on
    /// (2026-12-01; `nvfp4_gemv::gemv_layout`: in a full 16-row tile a step's codes, 1 KB, and
    /// scales, 128 bytes, contiguous, so the rings' copies read whole lines; G52, G53 as `packt`,
    /// -10 % at M 4 chained in two rounds; G60 lean at M 1 on it). `packt`, `tiled`,
    /// `packsync` (G11) and `pack1` (G12) went with the row-by-row layout.
    Pack,
    /// `Xswz` with 32 rows of W a CTA, two 16-row tiles a warp step decoded against the step's
    /// one X (its copies, shared loads and permutes shared): about 17 % fewer instructions a
    /// weight at M 4, a ring of 3 slots (K a multiple of 128, M up to 8; a larger M runs
    /// `Xswz`; docs/fp4.md G19). `Pack` runs it on the GEMV layout where a warp's share of K
    /// is long (G20).
    Xswz2,
}

/// How the MoE layer's gate/up projection reads X's rows in the expert-sorted order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MoeGather {
    /// `copy` from [`MoeGather::COPY_FROM_PAIRS`] sorted rows on, `tma` below.
    Auto,
    /// One copy of the sorted rows, then the plain kernel: at prefill the gathering kernel's
    /// producer (one row a load, again for every column tile) ran at 130-220 TFLOPS where the
    /// plain kernel ran at 800 (H200, Mixtral's layer shape, 2026-11-29), for a copy of
    /// T k H elements (~1 % of that GEMM).
    Copy,
    /// In the loads: one 1-row TMA box per row.
    Tma,
    /// In the loads: 16-byte cp.async chunks into the swizzled tile.
    CpAsync,
}

impl MoeGather {
    /// Sorted rows (T k) from which `auto` copies: the copy's own launch and bytes cost more
    /// than the gathering loads only at decode sizes, where weights, not X, are the traffic.
    pub const COPY_FROM_PAIRS: usize = 1024;

    pub const ALL: [MoeGather; 4] = [
        MoeGather::Auto,
        MoeGather::Copy,
        MoeGather::Tma,
        MoeGather::CpAsync,
    ];

    pub fn parse(v: &str) -> Option<MoeGather> {
        MoeGather::ALL.into_iter().find(|g| g.name() == v)
    }

    pub fn name(self) -> &'static str {
        match self {
            MoeGather::Auto => "auto",
            MoeGather::Copy => "copy",
            MoeGather::Tma => "tma",
            MoeGather::CpAsync => "cp_async",
        }
    }

    /// Whether a layer of `pairs` sorted rows copies them first.
    pub fn copies(self, pairs: usize) -> bool {
        match self {
            MoeGather::Auto => pairs >= Self::COPY_FROM_PAIRS,
            MoeGather::Copy => true,
            MoeGather::Tma | MoeGather::CpAsync => false,
        }
    }
}

/// How the FP8 grouped GEMM (`moe/fp8_grouped.cu`) feeds its mainloop: the dense FP8 kernel's
/// steps from `128p` to `128ptme` (docs/fp8.md), applied to the grouped kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fp8GroupedFeed {
    /// `ldg`: each consumer loads its X and W scales from global memory two K blocks ahead.
    Ldg,
    /// `t`: the scales ride the ring (X's by TMA, W's by cp.async on the stage's barrier).
    Staged,
    /// `tm`: `t` in pairs of CTAs along M sharing each W tile by TMA multicast.
    StagedPairs,
    /// `tm256`: `tm` with the 128 x 256 tile, each consumer's 64 x 256 in two drained halves
    /// (the dense kernel's `256tmh`).
    StagedPairsWide,
    /// `tm256bh`: `tm256` with two parts of the dense `256tmd`'s feed: a tile whose 128 rows
    /// are all its expert's loads them as one X box of 128 rows (the dense tile's A box) instead
    /// of four of 32 (docs/fp8.md ledger rows 81 and 84), and the X scales' slot offset kept in
    /// registers across the K loop (advanced by x_rows mod 4 each K block) and read for every
    /// row, so that the full-stage wait is followed by the scales' loads alone, as in the dense
    /// tile (row 100; the default since row 102). The one box alone (`tm256b`, the default of
    /// rows 101-102) was deleted in row 130.
    StagedPairsWideOneBoxHoisted,
    /// `tm256bht`: `tm256bh` with the tiles past the last whole wave of pairs run as two half
    /// tiles of 128 columns each, where they fit one wave, so that the busiest pair's last unit
    /// takes half a tile's time (docs/fp8.md rows 133 and 163: the default since it won three
    /// rounds).
    StagedPairsWideOneBoxHoistedTail,
}

impl Fp8GroupedFeed {
    pub const ALL: [Fp8GroupedFeed; 6] = [
        Fp8GroupedFeed::Ldg,
        Fp8GroupedFeed::Staged,
        Fp8GroupedFeed::StagedPairs,
        Fp8GroupedFeed::StagedPairsWide,
        Fp8GroupedFeed::StagedPairsWideOneBoxHoisted,
        Fp8GroupedFeed::StagedPairsWideOneBoxHoistedTail,
    ];

    pub fn parse(v: &str) -> Option<Fp8GroupedFeed> {
        Fp8GroupedFeed::ALL.into_iter().find(|f| f.name() == v)
    }

    /// The feed measured fastest (H200, docs/fp8.md ledger rows 22 and 84): `tm256` ran
    /// contiguous 4 x 8192 rows in 1.481-1.482 ms against `ldg`'s 1.720-1.728 (1,298 TFLOPS) and
    /// masked 4 x 256 in 55.2 us against 71.5 (1,090 TFLOPS); `tm256` with the one X box
    /// (`tm256b`, deleted) beat `tm256` in two rounds (2026-11-30: 0.968-0.970x cuBLASLt's
    /// per-expert loop against 0.952-0.957x), `tm256bh` beat `tm256b` in two rounds (row 100: 0.992-1.000x the loop against 0.966-0.968x), and `tm256bht` beat `tm256bh` in three (rows 133 and 163). It needs
    /// X's scales where TMA can map them (`scales_mappable`: 16-byte aligned); else `ldg`.
    pub fn default_for(scales_mappable: bool) -> Fp8GroupedFeed {
        if scales_mappable {
            Fp8GroupedFeed::StagedPairsWideOneBoxHoistedTail
        } else {
            Fp8GroupedFeed::Ldg
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Fp8GroupedFeed::Ldg => "ldg",
            Fp8GroupedFeed::Staged => "t",
            Fp8GroupedFeed::StagedPairs => "tm",
            Fp8GroupedFeed::StagedPairsWide => "tm256",
            Fp8GroupedFeed::StagedPairsWideOneBoxHoisted => "tm256bh",
            Fp8GroupedFeed::StagedPairsWideOneBoxHoistedTail => "tm256bht",
        }
    }
}

impl Default for MoeOverrides {
    fn default() -> Self {
        MoeOverrides::NONE
    }
}

/// `KILN_SWIGLU_*`: the fused SwiGLU dual GEMM's variant and launch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SwigluOverrides {
    /// `KILN_SWIGLU_SPLIT` (0 or 1). Default off; 1 compiles the earlier mainloop (two
    /// m64n128k16 per k16, one per weight) instead of one m64n256k16 over both weights' tiles.
    pub split: bool,
    /// `KILN_SWIGLU_DEFER` (0 or 1). Default on: each tile is stored under the next unit's first
    /// wgmma batch; 0 stores it before the next unit starts.
    pub defer: bool,
    /// `KILN_SWIGLU_SILU` (0 or 1): the epilogue's silu for 16-bit outputs (1: one MUFU tanh an
    /// element; 0: ex2 and rcp, as f32 outputs always take). Default 1.
    pub silu: u32,
    /// `KILN_SWIGLU_FOLD` (0, 16 or 32): rows an expert's last m-tile takes past 128 (a
    /// remainder of at most this many rides on the tile before it instead of a tile of its own
    /// that streams the whole W for them). Default 32 (2026-11-22, prefill: 16 -0.9 %, 32
    /// -1.9 % against 0).
    pub fold: u32,
    /// `KILN_SWIGLU_DYNAMIC` (0 or 1). Default on: units are handed out dynamically; 0 walks
    /// them statically (unit b, b + grid, ...).
    pub dynamic: bool,
    /// `KILN_SWIGLU_STAGES` (2..=4): pipeline stages, to measure how much the ring depth matters
    /// (2026-11-22: 3 stages 4 % slower at prefill). Default 4, the tile config's
    /// (`TileConfig::SWIGLU`).
    pub stages: u32,
    /// `KILN_SWIGLU_TAIL` (0..=16): the most K slices a last-wave tile is cut into (0 or 1:
    /// never split). Default 4 (`swiglu_dual::MAX_TAIL_SPLITS`).
    pub tail: u32,
    /// `KILN_SWIGLU_GRID` (at least 1): at most this many CTAs (a small problem then has waves
    /// and a last wave to split). Default: none (one CTA per SM).
    pub grid: Option<u32>,
}

impl SwigluOverrides {
    /// No overrides: the defaults.
    pub const NONE: SwigluOverrides = SwigluOverrides {
        split: false,
        defer: true,
        silu: 1,
        fold: 32,
        dynamic: true,
        stages: MoeTile::SWIGLU.stages,
        tail: MAX_TAIL_SPLITS,
        grid: None,
    };
}

impl Default for SwigluOverrides {
    fn default() -> Self {
        SwigluOverrides::NONE
    }
}

/// `KILN_TMA_PROMOTION`: the L2 promotion of a 2D tensor map.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L2Promotion {
    /// `none`
    None,
    /// `64`: 64 B.
    B64,
    /// `128`: 128 B.
    B128,
    /// `256`: 256 B.
    B256,
}

/// `KILN_TMA_PROMOTION` (`none`, `64`, `128`, `256`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TmaOverrides {
    /// The L2 promotion of every 2D map. Default: none (256 B where rows start on 128-byte lines,
    /// 128 B where they do not).
    pub promotion: Option<L2Promotion>,
}

/// How the benchmark empties L2 before a timed launch (`KILN_FLUSH`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FlushMode {
    /// Read a buffer twice the L2 size (`kernels/harness/l2_read_flush.cu`): L2 is left holding
    /// clean lines, as after a kernel that read its inputs, so the timed launch pays only for
    /// its own traffic.
    Read,
    /// `cuMemsetD8` over that buffer: L2 is left full of dirty lines, and a launch that streams
    /// more bytes than it computes on pays their write-back too (decode-sized GEMMs: up to one
    /// extra write per byte read).
    Memset,
}

impl FlushMode {
    /// What a bench with `flush_l2` records about its flush in this mode: the mode, or `none`.
    pub fn label(self, flush_l2: bool) -> &'static str {
        match (flush_l2, self) {
            (false, _) => "none",
            (true, FlushMode::Read) => "read",
            (true, FlushMode::Memset) => "memset",
        }
    }
}

/// `KILN_FLUSH`, `KILN_MOE_WARM_CODE`: the benchmark harness.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchOverrides {
    /// `KILN_FLUSH` (`read` or `memset`). Default [`FlushMode::Read`].
    pub flush: FlushMode,
    /// `KILN_MOE_WARM_CODE=1` (lab, `moe bench --weights` only): before each timed launch and
    /// after its L2 flush, one untimed launch of the same kernel on other buffers, so that the
    /// timed one finds its code warm and its data cold (ledger F241). Default off.
    pub warm_code: bool,
}

impl Default for BenchOverrides {
    fn default() -> Self {
        BenchOverrides {
            flush: FlushMode::Read,
            warm_code: false,
        }
    }
}

/// TEST-ONLY fault plan of the tune worker (`KILN_TUNE_FAKE=hang@3,crash@5,wrong@7`): it skips
/// the GPU and answers every job with a synthetic time, except that the jobs named here sleep
/// forever, abort the process or report a wrong result (ids count a tuning run's jobs from 0).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TuneFake {
    pub hang: Vec<u64>,
    pub crash: Vec<u64>,
    pub wrong: Vec<u64>,
}

impl TuneFake {
    /// A comma list of `hang@N`, `crash@N`, `wrong@N`; `None` for anything else.
    pub fn parse(s: &str) -> Option<TuneFake> {
        let mut f = TuneFake::default();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (what, id) = part.split_once('@')?;
            let id: u64 = id.trim().parse().ok()?;
            match what.trim() {
                "hang" => f.hang.push(id),
                "crash" => f.crash.push(id),
                "wrong" => f.wrong.push(id),
                _ => return None,
            }
        }
        Some(f)
    }

    /// The plan as [`TuneFake::parse`] reads it.
    pub fn label(&self) -> String {
        let each = |what: &str, ids: &[u64]| -> Vec<String> {
            ids.iter().map(|i| format!("{what}@{i}")).collect()
        };
        let parts: Vec<String> = [
            each("hang", &self.hang),
            each("crash", &self.crash),
            each("wrong", &self.wrong),
        ]
        .concat();
        parts.join(",")
    }
}

/// `KILN_FP8_RULE`: the dense FP8 GEMM (`fp8_wgmma`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Fp8Overrides {
    /// `KILN_FP8_RULE` (`measured`, `waves`, `bytes`, `fill` or `large`): which rule picks the
    /// config when the caller names none ([`crate::ops::fp8::gemm::Fp8Rule`]). Default: measured
    /// (the 64-row tile at M <= 128, as timed on an H200 at 7eb2e34; above, the rule of a8381a5,
    /// `waves`).
    pub rule: Fp8Rule,
    /// `KILN_FP8_PDL` (0, 1 or 2): the dense FP8 GEMM launched plainly (0), as the programmatic
    /// dependent of the kernel before it (1), or so and with the weights' first stages loaded
    /// before its wait (2: only where no earlier work on the stream writes B). Default (`None`):
    /// 1, but plainly where a tile's slices are summed in a cluster
    /// ([`crate::ops::fp8::Fp8Pdl::default_for`], ledger row 29).
    pub pdl: Option<Fp8Pdl>,
    /// `KILN_FP8_GROUP_M` (1 to 64): the dense FP8 GEMM's tile order, how many rows of cluster
    /// tiles it sweeps column by column before the next (ledger row 232: which tiles the CTAs in
    /// flight share decides how many of their loads the L2 sees). Default (`None`): the kernel's,
    /// [`crate::ops::fp8::gemm::GROUP_M`].
    pub group_m: Option<u32>,
    /// `KILN_FP8_STAGES` (1 to 12): the dense FP8 GEMM's ring shortened to that many stages (at
    /// most the config's; its shared memory as sized for the config): how the time depends on
    /// the bytes in flight an SM (ledger row 241). Not with the cluster sum (its partials fill
    /// the ring). Default (`None`): the config's stages.
    pub stages: Option<u32>,
}

impl Fp8Overrides {
    pub const NONE: Fp8Overrides = Fp8Overrides {
        rule: Fp8Rule::Large,
        pdl: None,
        group_m: None,
        stages: None,
    };
}

/// `KILN_NO_TUNED`, `KILN_TUNE_FAKE`: the tuning cache and the tune worker.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TuneOverrides {
    /// `KILN_NO_TUNED` (0 or 1). Default off; 1: the tuning cache is ignored and every version's
    /// heuristic decides.
    pub no_tuned: bool,
    /// `KILN_TUNE_FAKE` (test only): see [`TuneFake`]. Default: none (the worker runs jobs).
    pub fake: Option<TuneFake>,
}
