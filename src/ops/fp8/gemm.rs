//! Host side of `kernels/gemm/fp8_wgmma.cu`: the scaled FP8 GEMM on warp-specialised persistent
//! WGMMA + TMA. Which specialisations exist (a small set: e4m3 x e4m3 in every scale mode with
//! and without promotion, two or three configs each, and for block scales the small-M tiles and
//! the scales-in-shared-memory tiles; e5m2 operands with promoted tensor or block scales), which
//! config a problem runs (three rules: [`Fp8Rule`]), and the launch: scale checks, tensor maps,
//! grid.

use std::ffi::c_void;

use super::pdl::Fp8Pdl;
use super::problem::{Fp8Problem, ScaleMode, Scales};
use super::tma::Fp8Operand;
use crate::device::{Context, DeviceBuffer, DeviceInfo, LaunchConfig, Tma2d, TmaDType, TmaSwizzle};
use crate::error::{Error, Result};
use crate::formats::Fp8Format;
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;
use crate::overrides::Fp8Overrides;

/// The version's name (its device file's stem).
pub const NAME: &str = "fp8_wgmma";
/// K depth of a stage (one 128-byte swizzle row) and the threads of a CTA with two consumer
/// warpgroups ([`Fp8Config::threads`]: the 192-row tile has three).
pub const BK: u32 = 128;
pub const THREADS: u32 = 384;
/// Tile-rows per group of the grouped tile order.
pub const GROUP_M: u32 = 8;
/// The shared memory the stage counts are sized for: an H100's opt-in limit per block.
const SMEM_BUDGET: u32 = 232_448;
/// K blocks the lean short-K form (`z`, `KILN_ARES`) keeps resident: K of 385 to 512.
pub const LEAN_KBLOCKS: u32 = 4;

/// How the split-K slices of a tile combine (`Fp8Args.reduce`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Reduce {
    /// Each slice writes its fp32 partial tile to a slot of its own; the slice that counts last
    /// adds the others' in turn.
    Slots,
    /// Each slice adds its partial into the tile's one fp32 sum with `red.add` at the L2; the
    /// last reads the sum once and sets it back to zero.
    Atomic,
    /// A tile's slices run as one cluster of CTAs, one slice each, the grid not persistent: the
    /// peers write their partials into the first CTA's ring through the cluster's shared memory
    /// and it adds them in slice order (`c`; `common/split_k_cluster.cuh`). Single-CTA tiles,
    /// at most [`MAX_CLUSTER_SPLITS`] slices and as many partials as the ring holds; and pairs
    /// along N (`128ptne/2c`, 2026-12-02), [`CLUSTER_SUM_SPLITS`] slices: clusters of 2 x 2,
    /// each pair's second slice adding into its first.
    Cluster,
}

/// A launch's configuration: the block tile (rows `bm`: 128, each consumer warpgroup 64 of
/// them; or 64, each consumer half the columns), its width, whether the promotion is pipelined
/// over two accumulators (`KILN_PIPE`) or, drained, kept out of phase between the consumers
/// (`Fp8Args.order`, at run time: they take turns issuing K blocks), whether block scales travel
/// with the stage through shared memory (`KILN_SSCALE`), the CTAs along M that share each B tile by TMA multicast
/// (`KILN_CLUSTER`, 1 or 2) and along N that share each A tile (`KILN_CLUSTER_N`), whether C
/// goes out through the TMA-store epilogue (`KILN_TMAE`),
/// and the split-K slices (0: the plan decides) and their reduction
/// (`None`: the config's own, [`Fp8Config::reduction`]); the turns, splits and reduction are
/// run-time choices, not compiled ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Fp8Config {
    #[serde(default = "rows_128")]
    pub bm: u32,
    pub bn: u32,
    pub pipe: bool,
    /// The drained promotion with the consumers taking turns issuing K blocks (`Fp8Args.order`:
    /// any drained promoted kernel, at run time).
    #[serde(default)]
    pub order: bool,
    /// A's fragments from registers (`r`, `KILN_ARS`): the promotion pipelined over parts
    /// (ledger row 18) loads them once a K block for every part's wgmmas.
    #[serde(default)]
    pub a_regs: bool,
    #[serde(default)]
    pub sscale: bool,
    /// With `sscale`: the A scales by TMA in the ring (`KILN_SSCALE=2`), the B scales copied.
    #[serde(default)]
    pub tma_scales: bool,
    /// With `sscale`: the A scales of a stage by one 1D bulk copy from the producer thread, no
    /// tensor map (`b`, `Fp8Args.tma_sa = 2`, run time on the `s` or `t` kernel; where M is a
    /// multiple of 4 and the scales 16-byte aligned, else as without it). Ledger row 70: the
    /// A-scale map's first use cost a cold 128-row launch 1.5-3 us (row 53).
    #[serde(default)]
    pub sa_bulk: bool,
    /// With `sa_bulk` and `tma_scales`: the B scales by bulk copies as well, each B block's
    /// 16-byte run of four K blocks' scales, and no copier warp (`q`, `Fp8Args.tma_sa = 3`, run
    /// time; where ceil(K / 128) is a multiple of 4 and the B scales 16-byte aligned, else as `b`).
    #[serde(default)]
    pub sb_bulk: bool,
    /// With `sb_bulk`: the lean short-K form (`z`, `KILN_ARES`; 2026-12-01, ledger row 171): A's
    /// four K blocks and their scales loaded once into shared memory, a ring of B alone, and
    /// every path such a launch never takes compiled out. Runs where M <= the tile's rows, K is
    /// 4 blocks (385..512), the scales bulk-copyable, C addressable by TMA, one slice and bf16
    /// C ([`Fp8Config::lean_fits`]); elsewhere the launch runs the config without it.
    #[serde(default)]
    pub a_resident: bool,
    /// Whole tiles only (`u`, `KILN_WHOLE`; 2026-12-01, ledger row 202): `z`'s code cut without
    /// A resident, for the small-M tiles a launch runs unsplit (one tile a CTA): split-K,
    /// stream-K and PDL's early weights compiled out. One slice; the large rule's unsplit 64-row
    /// picks where [`SMALL_M_WHOLE`], `256tquhl` by name.
    #[serde(default)]
    pub whole: bool,
    /// CTAs along M sharing each B tile (`m`).
    #[serde(default = "one_cta")]
    pub cluster: u32,
    /// CTAs along N sharing each A tile (`n`).
    #[serde(default = "one_cta")]
    pub cluster_n: u32,
    #[serde(default)]
    pub tma_epi: bool,
    /// With `tma_epi`: one staging buffer per consumer, not two (`h`, `KILN_TMAE=2`): 16 KB
    /// for the ring.
    #[serde(default)]
    pub one_buffer: bool,
    /// The epilogue deferred (`d`, `KILN_TMAE=3`; the 128 x 256 tile in pairs: `256md` with tensor
    /// scales, `256tmd` with block scales): part of the tile's C held in registers as 16-bit
    /// pairs and stored under the next tile's wgmmas (f32 C as `e` / `h`); two staging buffers
    /// a consumer, one beside the block scales' slots.
    #[serde(default)]
    pub deferred: bool,
    /// With `tma_epi`, unsplit, block scales and no pairs along M: a CTA's last tile staged all
    /// at once in the ring, which takes no more loads, instead of chunk by chunk through the
    /// staging buffers (`l`, `Fp8Args.ring_epi`, run time; ledger row 25).
    #[serde(default)]
    pub ring_epi: bool,
    /// The consumers taking whole tiles in turn (`g`, `KILN_PINGPONG`, 2026-12-01): each
    /// computes all 128 rows of its tile (two m64 wgmmas a k32 step), one starting its K loop
    /// once the other has issued its last K block, so that a tile's epilogue runs under the next
    /// tile's K loop (unpromoted tensor scales, at most 192 wide, in pairs along M or none).
    #[serde(default)]
    pub pingpong: bool,
    pub splits: u32,
    /// Stream-K (`/k`, run time): the tiles past the last whole wave of the SMs shared out by K
    /// block, one equal run per cluster ([`stream_layout`]), summed atomically; `splits` unused.
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub reduce: Option<Reduce>,
}

/// A define of three values: 0 without the feature, 1 with it, 2 with it in its second form.
const fn three_way(on: bool, second: bool) -> u32 {
    match (on, second) {
        (false, _) => 0,
        (true, false) => 1,
        (true, true) => 2,
    }
}

fn rows_128() -> u32 {
    128
}

fn one_cta() -> u32 {
    1
}

impl Fp8Config {
    /// A 128-row tile with the scales loaded by the consumers (the configs of a8381a5).
    pub const fn new(bn: u32, pipe: bool) -> Self {
        Fp8Config::tile(128, bn, pipe, false)
    }

    /// Any tile: `bm` rows, `bn` columns, pipelined or not, scales in shared memory or not.
    pub const fn tile(bm: u32, bn: u32, pipe: bool, sscale: bool) -> Self {
        Fp8Config {
            bm,
            bn,
            pipe,
            order: false,
            a_regs: false,
            sscale,
            tma_scales: false,
            sa_bulk: false,
            sb_bulk: false,
            a_resident: false,
            whole: false,
            cluster: 1,
            cluster_n: 1,
            tma_epi: false,
            one_buffer: false,
            deferred: false,
            ring_epi: false,
            pingpong: false,
            splits: 0,
            stream: false,
            reduce: None,
        }
    }

    /// The same tile in pairs of CTAs along M multicasting B.
    pub const fn paired(self) -> Self {
        Fp8Config { cluster: 2, ..self }
    }

    /// The same tile in pairs of CTAs along N multicasting A.
    pub const fn paired_n(self) -> Self {
        Fp8Config {
            cluster_n: 2,
            ..self
        }
    }

    /// The same tile (scales in shared memory) with the A scales loaded by TMA.
    pub const fn scales_by_tma(self) -> Self {
        Fp8Config {
            sscale: true,
            tma_scales: true,
            ..self
        }
    }

    /// A 128-row tile wider than 128 (`256tmh`, `256ptmh`, `176ptmh`): the A scales by TMA, pairs
    /// along M multicasting B, one staging buffer a consumer (the 48 KB stages leave room for
    /// four), drained or pipelined over parts ([`Fp8Config::parts`]).
    pub const fn wide_pair(bn: u32, pipe: bool) -> Self {
        Fp8Config::tile(128, bn, pipe, true)
            .scales_by_tma()
            .paired()
            .one_staging_buffer()
    }

    /// The 128 x 256 tile for tensor scales (`256mh`, 2026-11-29): pairs along M multicasting B
    /// and one staging buffer a consumer, as `256tmh`, without the block scales' slot (promoted,
    /// each consumer's 64 x 256 in two drained halves added into its sums; unpromoted, one
    /// 128-register accumulator over the whole K: the mainloop pure wgmma).
    pub const fn wide_pair_tensor(bn: u32) -> Self {
        Fp8Config::tile(128, bn, false, false)
            .paired()
            .one_staging_buffer()
    }

    /// The 192-row tile of three consumer warpgroups (64 rows each, `bn` columns) for
    /// unpromoted tensor scales (`192x192md`, 2026-11-30): pairs along M multicasting B, the
    /// epilogue deferred under the next tile (one staging buffer a consumer: four 48 KB stages).
    pub const fn three_consumers(bn: u32) -> Self {
        Fp8Config::tile(192, bn, false, false)
            .paired()
            .deferred_epilogue()
    }

    /// The 128 x `bn` tile in pairs along M for unpromoted tensor scales with its consumers
    /// taking whole tiles in turn (`192mgh`, 2026-12-01): cuBLASLt's fastest kernel at 6144^3 is
    /// such a ping-pong tile (128 x 176 in pairs); one staging buffer a consumer, five stages of
    /// 40 KB at 192.
    pub const fn ping_pong(bn: u32) -> Self {
        Fp8Config {
            pingpong: true,
            ..Fp8Config::wide_pair_tensor(bn)
        }
    }

    /// The 128 x 256 tile in single CTAs (`256th`, ledger row 24): `256tmh`'s kernel without the
    /// pairs, for 64 < M <= 128, where a pair along M has no second row of tiles. Its four stages
    /// of 48 KB hold a whole K of 512 at once (one tile a CTA at N = 32,768: every load of the
    /// CTA in flight from the start), and it reads A once for 256 columns.
    pub const fn small_rows_wide() -> Self {
        Fp8Config::tile(128, 256, false, true)
            .scales_by_tma()
            .one_staging_buffer()
    }

    /// The same tile (scales in shared memory) with the A scales by one bulk copy (`b`).
    pub const fn scales_by_bulk_copy(self) -> Self {
        Fp8Config {
            sa_bulk: true,
            ..self
        }
    }

    /// The same tile (the A scales by TMA) with both scales by bulk copies, no copier (`q`).
    pub const fn scales_all_by_bulk_copy(self) -> Self {
        Fp8Config {
            sa_bulk: true,
            sb_bulk: true,
            ..self
        }
    }

    /// The same tile (`q`) in the lean short-K form (`z`): A resident, a ring of B alone.
    pub const fn lean_short_k(self) -> Self {
        Fp8Config {
            a_resident: true,
            ..self
        }
    }

    /// The same tile with split-K and stream-K compiled out (`u`): whole tiles, one slice.
    pub const fn whole_tiles(self) -> Self {
        Fp8Config {
            whole: true,
            ..self
        }
    }

    /// Whether the lean short-K form (`z`) computes `p` as `z` says (else the launch runs the
    /// config without it): M within the tile's rows (every tile of a CTA has the same A), K of
    /// [`LEAN_KBLOCKS`] blocks, M a multiple of 4 (the A scales' bulk copies), bf16 C that TMA
    /// can address, and one slice.
    pub fn lean_fits(&self, p: &Fp8Problem, splits: u64) -> bool {
        self.a_resident
            && p.m <= self.bm as usize
            && (p.k as u64).div_ceil(BK as u64) == LEAN_KBLOCKS as u64
            && p.m.is_multiple_of(4)
            && p.out == DType::Bf16
            && p.n.is_multiple_of(8)
            && p.ldc.is_multiple_of(8)
            && splits == 1
            && !self.stream
    }

    /// What runs where the lean form (`z`) does not fit: the config without it, and for the
    /// 64-row tile (whose `t` / `e` twin is not compiled) the measured rule's kernel for short K,
    /// `64x128psb` (the A scales by one bulk copy, C from registers).
    pub const fn without_lean(self) -> Self {
        match self.bm {
            64 => Fp8Config {
                a_resident: false,
                tma_scales: false,
                sb_bulk: false,
                tma_epi: false,
                ..self
            },
            _ => Fp8Config {
                a_resident: false,
                ..self
            },
        }
    }

    /// The same tile with its promotion pipelined (`p`; over parts of its columns above 128).
    pub const fn pipelined(self) -> Self {
        Fp8Config { pipe: true, ..self }
    }

    /// The same tile in one slice (`/1`: the launch takes none of its own).
    pub const fn unsplit(self) -> Self {
        Fp8Config {
            splits: 1,
            stream: false,
            ..self
        }
    }

    /// The same tile (with the TMA-store epilogue) staging its last tile in the ring (`l`).
    pub const fn last_in_ring(self) -> Self {
        Fp8Config {
            ring_epi: true,
            ..self
        }
    }

    /// The same tile with A's fragments from registers (`r`).
    pub const fn a_from_registers(self) -> Self {
        Fp8Config {
            a_regs: true,
            ..self
        }
    }

    /// The same drained tile with its consumers taking turns issuing K blocks.
    pub const fn ordered(self) -> Self {
        Fp8Config {
            order: true,
            ..self
        }
    }

    /// The same tile with its last wave's tiles shared out by K block (stream-K, `/k`).
    pub const fn streamed(self) -> Self {
        Fp8Config {
            stream: true,
            splits: 0,
            ..self
        }
    }

    /// The same tile writing C through the TMA-store epilogue.
    pub const fn tma_store(self) -> Self {
        Fp8Config {
            tma_epi: true,
            ..self
        }
    }

    /// The same compiled kernel (tile, pipelining, scale path, cluster and epilogue; the turns,
    /// splits and reduction aside).
    pub fn same_kernel(&self, other: &Fp8Config) -> bool {
        (
            self.bm,
            self.bn,
            self.pipe,
            self.a_regs,
            self.sscale,
            self.tma_scales,
            self.cluster,
            self.cluster_n,
            self.tma_epi,
            self.one_buffer,
            self.deferred,
        ) == (
            other.bm,
            other.bn,
            other.pipe,
            other.a_regs,
            other.sscale,
            other.tma_scales,
            other.cluster,
            other.cluster_n,
            other.tma_epi,
            other.one_buffer,
            other.deferred,
        ) && (self.a_resident, self.whole, self.pingpong)
            == (other.a_resident, other.whole, other.pingpong)
    }

    /// A config of the 2026-11-29 family (the small-M tile, the scales in shared memory, the
    /// pairs, the TMA-store epilogue), whose ring, A box and split-K reduction follow the newer
    /// rules. The turns are not a family: `128o` is `128`'s kernel, ring and all.
    pub const fn is_new(&self) -> bool {
        self.bm != 128 || self.sscale || self.ctas() > 1 || self.tma_epi
    }

    /// The same tile writing C through the TMA-store epilogue with one staging buffer per
    /// consumer.
    pub const fn one_staging_buffer(self) -> Self {
        Fp8Config {
            tma_epi: true,
            one_buffer: true,
            ..self
        }
    }

    /// The same tile with its epilogue deferred under the next tile's K blocks (`d`).
    pub const fn deferred_epilogue(self) -> Self {
        Fp8Config {
            tma_epi: true,
            one_buffer: false,
            deferred: true,
            ..self
        }
    }

    /// Bytes of the TMA-store epilogue's staging: two 8 KB chunks per consumer, or one (`h`; `d`
    /// beside block scales' slots, where two would cost the 128 x 256 ring its fourth stage, and
    /// `d` of the 192-row tile, whose three consumers' two would cost its ring the fourth).
    pub const fn c_bytes(&self) -> u32 {
        let per_consumer = match self.tmae_define() {
            0 => 0,
            1 => 2 * 8192,
            3 if !self.sscale && self.consumers() == 2 => 2 * 8192,
            _ => 8192,
        };
        per_consumer * self.consumers()
    }

    /// Consumer warpgroups: three in the 192-row tile (each 64 rows), else two.
    pub const fn consumers(&self) -> u32 {
        if self.bm == 192 {
            3
        } else {
            2
        }
    }

    /// Threads of a CTA: a producer warpgroup and the consumers.
    pub const fn threads(&self) -> u32 {
        128 * (self.consumers() + 1)
    }

    /// `KILN_TMAE`: 0 registers, 1 two staging buffers a consumer, 2 one, 3 one and deferred.
    pub const fn tmae_define(&self) -> u32 {
        if self.tma_epi && self.deferred {
            3
        } else {
            three_way(self.tma_epi, self.one_buffer)
        }
    }

    /// Block tiles a cluster tile holds along M (CTAs sharing B).
    pub const fn ctas_m(&self) -> u32 {
        if self.cluster > 1 {
            self.cluster
        } else {
            1
        }
    }

    /// Block tiles a cluster tile holds along N (CTAs sharing A).
    pub const fn ctas_n(&self) -> u32 {
        if self.cluster_n > 1 {
            self.cluster_n
        } else {
            1
        }
    }

    /// The CTAs of a cluster.
    pub const fn ctas(&self) -> u32 {
        self.ctas_m() * self.ctas_n()
    }

    /// One consumer warpgroup's wgmma width.
    pub const fn consumer_width(&self) -> u32 {
        if self.bm == 64 {
            self.bn / 2
        } else {
            self.bn
        }
    }

    /// Bytes of A and B one stage holds (the lean form's, `z`: B alone).
    pub const fn stage_bytes(&self) -> u32 {
        if self.a_resident {
            self.bn * BK
        } else {
            (self.bm + self.bn) * BK
        }
    }

    /// Bytes the lean form (`z`) keeps beside the ring: A's K blocks, their scales and one
    /// mbarrier each; 0 for the others.
    pub const fn resident_bytes(&self) -> u32 {
        if self.a_resident {
            LEAN_KBLOCKS * (self.bm * BK + self.bm * 4 + 8)
        } else {
            0
        }
    }

    /// The B scale blocks a tile's columns span at most (`B_SPAN` in the kernel).
    const fn b_span(&self) -> u32 {
        let low = self.bn & self.bn.wrapping_neg();
        let gcd = if low < 128 { low } else { 128 };
        (self.bn - gcd).div_ceil(128) + 1
    }

    /// Bytes of a stage's scale slot (KILN_SSCALE): the A scales of the tile's rows and up to
    /// three B scales, padded to 16; to 128 where TMA writes the A scales (its destination's
    /// alignment).
    pub const fn slot_bytes(&self) -> u32 {
        if self.a_resident {
            16 * self.b_span()
        } else if !self.sscale {
            0
        } else if self.tma_scales {
            (self.bm * 4 + 16).next_multiple_of(128)
        } else {
            self.bm * 4 + 16
        }
    }

    /// `KILN_SSCALE`: 0 scales from global memory, 1 copied into the slot, 2 A's by TMA.
    pub const fn sscale_define(&self) -> u32 {
        three_way(self.sscale, self.tma_scales)
    }

    /// Stages in the ring: as many as the budget holds beside 1 KB of alignment slack, the
    /// epilogue's staging, a full and an empty mbarrier and a scale slot per stage, at most 8
    /// (12 for the new family, whose small-M stages are smaller). The old family's rule
    /// reserves eight stages' barriers.
    pub const fn stages(&self) -> u32 {
        let (s, most) = if self.is_new() {
            (
                (SMEM_BUDGET - 1024 - self.c_bytes() - self.resident_bytes())
                    / (self.stage_bytes() + 16 + self.slot_bytes()),
                12,
            )
        } else {
            ((SMEM_BUDGET - 1024 - 2 * 8 * 8) / self.stage_bytes(), 8)
        };
        if s > most {
            most
        } else {
            s
        }
    }

    /// Dynamic shared memory: 1 KB of slack to align the ring to 1024 bytes, then per stage its
    /// tiles, its two mbarriers and its scale slot, and the epilogue's staging.
    pub const fn smem_bytes(&self) -> u32 {
        1024 + self.stages() * (self.stage_bytes() + 16 + self.slot_bytes())
            + self.c_bytes()
            + self.resident_bytes()
    }

    /// How this config's split-K slices combine: as asked, else atomically for the new family
    /// and through per-slice slots for the old.
    pub fn reduction(&self) -> Reduce {
        self.reduce.unwrap_or(if self.is_new() {
            Reduce::Atomic
        } else {
            Reduce::Slots
        })
    }

    /// Rows of A a stage holds: the tile's, or for the new family only the rows a smaller M
    /// has, rounded up to 8 (whole swizzle atoms; TMA's zero fill of the rest is not free);
    /// pairs along N always the tile's (each CTA loads a part, [`Fp8Config::a_box_rows`]).
    pub fn a_rows(&self, m: usize) -> u32 {
        if self.is_new() && m < self.bm as usize && self.ctas_n() == 1 {
            (m.next_multiple_of(8) as u32).min(self.bm)
        } else {
            self.bm
        }
    }

    /// Rows of one CTA's A box: [`Fp8Config::a_rows`], split between the CTAs sharing A.
    pub fn a_box_rows(&self, m: usize) -> u32 {
        self.a_rows(m) / self.ctas_n()
    }

    /// Rows of one CTA's B box: the tile's, split between the CTAs sharing B.
    pub const fn b_box_rows(&self) -> u32 {
        self.bn / self.ctas_m()
    }

    /// The parts a consumer's columns run in (`PARTS` in the kernel; block-scaled 128-row tiles,
    /// whose `sscale` says promoted, and the tensor-scale 128 x 256 tile in pairs, `256mh`, whose
    /// unpromoted kernel runs in one part: counted as two here, so that neither takes slices):
    /// drained, the 128 x 256 tile (`256tmh`) in two halves of
    /// 128, a K block's wgmmas of a half into one accumulator promoted into its half of the
    /// sums; pipelined (ledger row 18), 256 in four parts of 64 (`256ptmh`) and the widths
    /// between 128 and 256 in two (`176ptmh`: 88 + 88), part f + 1 issued before part f is
    /// promoted. 1 for every other tile. A tile in parts has no registers left for a split-K
    /// sum, so it takes no slices.
    pub const fn parts(&self) -> u32 {
        if self.bm != 128 || !(self.sscale || self.ctas() > 1) {
            1
        } else if self.pipe {
            match self.bn {
                0..=128 => 1,
                256 => 4,
                _ => 2,
            }
        } else if self.bn == 256 {
            2
        } else {
            1
        }
    }

    /// The drained 128 x 256 block-scaled tile (`256tmh`): its consumers' columns in two halves.
    pub const fn two_halves(&self) -> bool {
        self.parts() == 2 && self.bn == 256
    }

    /// Most split-K slices this config's reduction takes (1: none, [`Fp8Config::parts`]; so
    /// also whether it can take stream-K, whose units are summed the same way).
    pub fn max_splits(&self) -> u32 {
        // (three consumers: the split-K hand-off's barrier counts two)
        // (a deferred epilogue holds the last tile's C in registers into the next tile's first K
        // block: no registers for a slice's sum either; `192md` is the one-part such tile)
        // (the lean form, `z`, and `u`: whole tiles, their split-K code compiled out;
        // ping-pong: each consumer its own tile, no slices)
        if self.parts() > 1
            || self.consumers() > 2
            || self.deferred
            || self.a_resident
            || self.whole
            || self.pingpong
        {
            return 1;
        }
        match self.reduction() {
            Reduce::Slots => MAX_SPLITS,
            Reduce::Atomic => MAX_ATOMIC_SPLITS,
            // the peers' partials (the tile in fp32) fit the first CTA's ring
            Reduce::Cluster if self.ctas() == 1 => {
                let ring = self.stages() * self.stage_bytes();
                (ring / (4 * self.bm * self.bn) + 1).min(MAX_CLUSTER_SPLITS)
            }
            // pairs along N alone (the kernel's PAIR_SUM): a cluster of the pair times the
            // slices, two of them (clusters of 4; the single CTAs' 3 to 7 lost, ledger row 21)
            Reduce::Cluster if self.ctas_m() == 1 && self.ctas_n() == 2 => {
                let ring = self.stages() * self.stage_bytes();
                (ring / (4 * self.bm * self.bn) + 1).min(CLUSTER_SUM_SPLITS)
            }
            Reduce::Cluster => 1,
        }
    }
}

impl std::fmt::Display for Fp8Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.bm != 128 {
            write!(f, "{}x", self.bm)?;
        }
        write!(
            f,
            "{}{}{}{}{}{}{}{}{}{}{}{}",
            self.bn,
            if self.pipe { "p" } else { "" },
            if self.order { "o" } else { "" },
            if self.a_regs { "r" } else { "" },
            match (self.sscale, self.tma_scales) {
                (true, true) => "t",
                (true, false) => "s",
                _ => "",
            },
            match (self.sa_bulk, self.sb_bulk) {
                (true, true) => "q",
                (true, false) => "b",
                _ => "",
            },
            if self.a_resident { "z" } else { "" },
            if self.whole { "u" } else { "" },
            if self.cluster > 1 { "m" } else { "" },
            if self.cluster_n > 1 { "n" } else { "" },
            if self.pingpong { "g" } else { "" },
            match (self.tma_epi, self.one_buffer, self.deferred) {
                (true, false, true) => "d",
                (true, true, _) => "h",
                (true, false, _) => "e",
                _ => "",
            }
        )?;
        if self.ring_epi {
            f.write_str("l")?;
        }
        if self.stream {
            f.write_str("/k")?;
        } else if self.splits > 0 {
            write!(f, "/{}", self.splits)?;
        }
        match self.reduce {
            Some(Reduce::Atomic) => f.write_str("a"),
            Some(Reduce::Slots) => f.write_str("w"),
            Some(Reduce::Cluster) => f.write_str("c"),
            None => Ok(()),
        }
    }
}

impl std::str::FromStr for Fp8Config {
    type Err = Error;
    /// `[64x]WIDTH[p|o][r][s|t][b|q][z|u][m][n][g][e|h|d][l][/S][a|w|c]`: `128`, `160`, `128p` (pipelined promotion),
    /// `128ps` (and block scales through shared memory), `128te` (the A scales of those by TMA,
    /// C through the TMA-store epilogue), `128ote` (the drained promotion with the consumers
    /// taking turns), `160sm` (in pairs of CTAs along M multicasting B), `128ptne` (pairs along
    /// N multicasting A), `128ptmne` (clusters of 2 x 2, both), `128ptmh` (the TMA-store epilogue
    /// with one staging buffer a consumer), `256prtmh` (A's fragments from registers),
    /// `176se` (C through the TMA-store epilogue), `64x128ps` (the 64-row tile), `128otbe` (the
    /// A scales of `128ote` by one bulk copy, no map; `128otqe` the B scales too, no copier),
    /// `/S` for S
    /// split-K slices (`/k`: stream-K), `a` / `w` to reduce them atomically or through
    /// per-slice slots (`64x128ps/7a`).
    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::invalid(format!(
                "`{s}` is not an FP8 tile config; write [64x]WIDTH[p|o][r][s|t][b|q][z|u][m][n][g][e|h|d][l][/S][a|w|c]: \
                 a width such as 128, p for the pipelined promotion, o for the consumers taking \
                 turns, r for A from registers, s for block scales through shared memory (t: the \
                 A scales by TMA; b: by one bulk copy; q: both scales by bulk copies; z after q: \
                 A resident, the lean short-K form, 128ptqze; u: whole tiles only, split-K and \
                 stream-K compiled out, 64x128psu/1), m for \
                 pairs of CTAs along M multicasting B, n along N multicasting A, g for the \
                 consumers taking whole tiles in turn (192mgh), e for the \
                 TMA-store epilogue (h: with one staging buffer a consumer; d: deferred under the \
                 next tile, 256md), l for the last tile staged in the ring, 64x for the 64-row \
                 tile, /S for S split-K slices (/k: stream-K), a, w or c to reduce them atomically, \
                 through slots or in a cluster's shared memory (64x128ps/7a, 64x128ps/4c, 128pte/k)"
            ))
        };
        let (mut head, mut reduce) = (s, None);
        if let Some(h) = head.strip_suffix('a') {
            (head, reduce) = (h, Some(Reduce::Atomic));
        } else if let Some(h) = head.strip_suffix('w') {
            (head, reduce) = (h, Some(Reduce::Slots));
        } else if let Some(h) = head.strip_suffix('c') {
            (head, reduce) = (h, Some(Reduce::Cluster));
        }
        let (head, splits, stream) = match head.split_once('/') {
            Some((h, "k")) => (h, 0, true),
            Some((h, k)) => (h, k.parse::<u32>().map_err(|_| bad())?, false),
            None if reduce.is_none() => (head, 0, false),
            None => return Err(bad()),
        };
        let (bm, head) = match head.split_once('x') {
            Some((r, rest)) => (r.parse::<u32>().map_err(|_| bad())?, rest),
            None => (128, head),
        };
        let (head, ring_epi) = match head.strip_suffix('l') {
            Some(h) => (h, true),
            None => (head, false),
        };
        let (head, tma_epi, one_buffer, deferred) = match (
            head.strip_suffix('e'),
            head.strip_suffix('h'),
            head.strip_suffix('d'),
        ) {
            (Some(h), _, _) => (h, true, false, false),
            (None, Some(h), _) => (h, true, true, false),
            (None, None, Some(h)) => (h, true, false, true),
            _ => (head, false, false, false),
        };
        let (head, pingpong) = match head.strip_suffix('g') {
            Some(h) => (h, true),
            None => (head, false),
        };
        let (head, cluster_n) = match head.strip_suffix('n') {
            Some(h) => (h, 2),
            None => (head, 1),
        };
        let (head, cluster) = match head.strip_suffix('m') {
            Some(h) => (h, 2),
            None => (head, 1),
        };
        let (head, whole) = match head.strip_suffix('u') {
            Some(h) => (h, true),
            None => (head, false),
        };
        let (head, a_resident) = match head.strip_suffix('z') {
            Some(h) => (h, true),
            None => (head, false),
        };
        let (head, sa_bulk, sb_bulk) = match (head.strip_suffix('b'), head.strip_suffix('q')) {
            (Some(h), _) => (h, true, false),
            (None, Some(h)) => (h, true, true),
            _ => (head, false, false),
        };
        let (head, sscale, tma_scales) = match (head.strip_suffix('s'), head.strip_suffix('t')) {
            (Some(h), _) => (h, true, false),
            (None, Some(h)) => (h, true, true),
            _ => (head, false, false),
        };
        let (head, a_regs) = match head.strip_suffix('r') {
            Some(h) => (h, true),
            None => (head, false),
        };
        let (head, order) = match head.strip_suffix('o') {
            Some(h) => (h, true),
            None => (head, false),
        };
        let (num, pipe) = match head.strip_suffix('p') {
            Some(n) if !order => (n, true),
            _ => (head, false),
        };
        let bn = num.parse::<u32>().map_err(|_| bad())?;
        Ok(Fp8Config {
            bm,
            bn,
            pipe,
            order,
            a_regs,
            sscale,
            tma_scales,
            sa_bulk,
            sb_bulk,
            a_resident,
            whole,
            cluster,
            cluster_n,
            tma_epi,
            one_buffer,
            deferred,
            ring_epi,
            pingpong,
            splits,
            stream,
            reduce,
        })
    }
}

/// The configs compiled for an operand pair, scale mode and accumulation: e4m3 x e4m3 promoted
/// has the pipelined 128-wide tile and the plain 128 and 160 (whose 45 column tiles fill
/// N = 7168's waves; too wide for a third accumulator array), unpromoted 128 and 256; pairs
/// with e5m2 have the pipelined 128 with promoted tensor or block scales; everything else none.
/// Block scales on e4m3 add the 2026-11-29 family: the 64-row tiles 128, 192 and 256 wide
/// (pipelined, scales in shared memory) for M <= 64, and the 128-row tiles with the scales in
/// shared memory: drained with the TMA-store epilogue 112, 160 and 176 wide (the widths that
/// fill 132 SMs at DeepSeek-V3's M = 4096 shapes), and 128 with the A scales by TMA as well
/// (`128te`: the fastest at 4096x7168x16384 on an H200 at 22a9572); then, for the large-M
/// mainloop (ledger row 12), `128te` with the pipelined promotion (`128pte`) and with the
/// consumers taking turns (`128ote`: a run-time choice on `128te`'s kernel, listed so that the
/// suites and rules see it; any drained promoted config takes `o` the same way, `176ose` on
/// `176se`'s kernel say); and for its feed (ledger row 13), `128pte` in pairs of CTAs along M
/// multicasting B (`128ptme`); and since ledger row 15 the 128 x 256 tile in the same pairs
/// (`256tmh`, each consumer's 64 x 256 in two drained halves: 1.03x cuBLASLt at 4096x7168x16384 on
/// an H200, `large`'s where its waves allow); since ledger row 26 the same with its epilogue
/// deferred under the next tile's first K block (`256tmd`, in the place of `256ptmh`, the pairs
/// pipelined over four parts of 64 of the consumers' columns: even with `256tmh` at K >= 2048,
/// 1.6 % ahead at K = 1536, taken by no rule, row 18). The 120-wide, 192-wide and paired tiles (`120ps`, `192s`,
/// `128psm`, `160sm`) lost at 7eb2e34, `128ps`, `128se` at 22a9572 (to `128s` and `128te`),
/// `128s` and `176te` to `128te` at 22a9572 and aa92128 (ledger rows 11 and 12), the pairs
/// along N and 2 x 2 clusters (`128ptne`, `128ptmne`) to `128ptme` (row 13), and `128ptmh`
/// (one staging buffer, a sixth stage) changed nothing (row 14), and `256prtmh` (A from
/// registers) and `176ptmh` (two parts of 88) lost to `256ptmh` and `128ptme` (row 18), and were
/// dropped
/// for these (the kernel keeps the clusters along N: `n` parses, and compiling one back is a
/// line here).
pub fn configs(
    a: Fp8Format,
    b: Fp8Format,
    scale: ScaleMode,
    promote: bool,
) -> &'static [Fp8Config] {
    // (row scales: the drained 128, which no rule took, the waves rule's `128p` having its
    // tiles at less cost, made way for the deferred epilogue's `256md` in ledger row 26)
    const PROMOTED: &[Fp8Config] = &[Fp8Config::new(128, true), Fp8Config::new(160, false)];
    const BLOCK: &[Fp8Config] = &[
        Fp8Config::new(128, true),
        Fp8Config::new(128, false),
        Fp8Config::new(160, false),
        Fp8Config::tile(64, 128, true, true),
        Fp8Config::tile(64, 192, true, true),
        Fp8Config::tile(64, 256, true, true),
        Fp8Config::tile(128, 112, false, true).tma_store(),
        Fp8Config::tile(128, 160, false, true).tma_store(),
        Fp8Config::tile(128, 176, false, true).tma_store(),
        Fp8Config::tile(128, 128, false, true)
            .scales_by_tma()
            .tma_store(),
        Fp8Config::tile(128, 128, true, true)
            .scales_by_tma()
            .tma_store(),
        Fp8Config::tile(128, 128, true, true)
            .scales_by_tma()
            .paired()
            .tma_store(),
        Fp8Config::tile(128, 128, false, true)
            .ordered()
            .scales_by_tma()
            .tma_store(),
        Fp8Config::wide_pair(256, false),
        Fp8Config::wide_pair(256, false).deferred_epilogue(),
        // ledger rows 24-25: the 128 x 256 tile in single CTAs, one tile a CTA at 64 < M <= 128
        // (`256thl` at 128x24576x1536: 1.02x `64x128ps/1`; in pairs along N, `256tnh`, lost
        // everywhere and is not compiled)
        Fp8Config::small_rows_wide(),
        // 2026-12-02 (ledger row 240): `128pte` in pairs along N multicasting A (`128ptne`, lost to
        // `128ptme` at M = 4096 in row 13), back for `128ptne/2c` at 128x7168x16384: each pair's
        // two K slices summed in a cluster of 4, A read from the L2 once a pair; by name only
        Fp8Config::tile(128, 128, true, true)
            .scales_by_tma()
            .paired_n()
            .tma_store(),
        // 2026-12-01 (ledger row 171): the lean short-K form (`z`) of `128ptqe` and of the 64-row
        // tile: A resident, a ring of B alone, bf16 C; the large rule's at K of 4 blocks (row 200)
        Fp8Config::tile(128, 128, true, true)
            .scales_by_tma()
            .scales_all_by_bulk_copy()
            .lean_short_k()
            .tma_store(),
        Fp8Config::tile(64, 128, true, true)
            .scales_by_tma()
            .scales_all_by_bulk_copy()
            .lean_short_k()
            .tma_store(),
        // 2026-12-01 (ledger row 202): the large rule's unsplit small-M kernels (one tile a CTA:
        // `64x128ps/1`, `64x192ps/1`, `256tqhl/1`) with split-K and stream-K compiled out (`u`),
        // bf16 C; the rule takes the 64-row two (`SMALL_M_WHOLE`), `256tquhl` by name
        Fp8Config::tile(64, 128, true, true).whole_tiles(),
        Fp8Config::tile(64, 192, true, true).whole_tiles(),
        Fp8Config::small_rows_wide().whole_tiles(),
        // (ledger row 92's `128pth`, `128pte` with one staging buffer a consumer and so a sixth
        // stage, won 1.5 % at 128x7168x16384 in one round and tied in the next: dropped
        // 2026-11-30, ledger row 110; ledger row 40's `192th`, the 128 x 192 tile in single CTAs, one wave of 128 tiles at
        // N = 24,576, lost to `256thl/1` in four rounds, with turns and with `b`: dropped
        // 2026-11-30, ledger row 91; ledger row 51's `256pth`, `256th` pipelined over four parts of 64, and `192pth`, two
        // of 96, were within the spread of `256thl/1` in two rounds: the feed binds, not the
        // consumers; dropped 2026-11-30, ledger row 70; `192tmd`, the 128 x 192 pair tile with
        // each column group's B scale picked at compile time, ran 2-3 % behind `256tmd` at
        // 4096x24576x1536 and 4096x32768x512 and 11 % at 4096x7168x16384 in two rounds: dropped
        // 2026-12-01, ledger row 230)
    ];
    const FAST: &[Fp8Config] = &[Fp8Config::new(128, false), Fp8Config::new(256, false)];
    // tensor scales: the 128 x 256 tile in pairs (`256mh`) for the large rule, in place of the
    // promoted 160 (which no rule of the new family takes) and beside the unpromoted 256; since
    // ledger row 26 also with its epilogue deferred under the next tile's K blocks (`256md`), in
    // the place of the promoted drained 128 (no rule took it: the waves rule's `128p` has its
    // tiles at less cost; the promotion check's drained kernel is `256mh` since)
    // ledger row 120 (2026-11-30, evening): the promoted 128 x 192 tile in pairs, its epilogue
    // deferred (`192md`): each consumer's 64 x 192 one drained m64n192 batch a K block (fin 96 and
    // one 96-register accumulator) where `256md` runs two halves of m64n128 (A read twice, two
    // drains a K block); at 8192^3 its busiest pair has 1.6 % fewer outputs. By name only.
    const TENSOR: &[Fp8Config] = &[
        Fp8Config::new(128, true),
        Fp8Config::wide_pair_tensor(256),
        Fp8Config::wide_pair_tensor(256).deferred_epilogue(),
        Fp8Config::wide_pair_tensor(192).deferred_epilogue(),
    ];
    // unpromoted, since 2026-11-30 also the 192 x 192 tile of three consumers (`192x192md`: the
    // tile cuBLASLt runs at 6144^3), in pairs along M, its epilogue deferred; a knob-free name,
    // no rule takes it until it is timed
    const TENSOR_FAST: &[Fp8Config] = &[
        Fp8Config::new(128, false),
        Fp8Config::new(256, false),
        Fp8Config::wide_pair_tensor(256),
        Fp8Config::wide_pair_tensor(256).deferred_epilogue(),
        Fp8Config::three_consumers(192),
        // 2026-12-01 (ledger row 181): the 128 x 192 tile in pairs with ping-pong consumers
        // (`192mgh`), by name; no rule takes it until it wins two rounds
        Fp8Config::ping_pong(192),
    ];
    const OTHER: &[Fp8Config] = &[Fp8Config::new(128, true)];
    let e4 = a == Fp8Format::E4m3 && b == Fp8Format::E4m3;
    match (e4, scale, promote) {
        (_, ScaleMode::Block, false) => &[],
        (true, ScaleMode::Block, true) => BLOCK,
        (true, ScaleMode::Tensor, true) => TENSOR,
        (true, ScaleMode::Tensor, false) => TENSOR_FAST,
        (true, _, true) => PROMOTED,
        (true, _, false) => FAST,
        (false, ScaleMode::Tensor | ScaleMode::Block, true) => OTHER,
        (false, _, _) => &[],
    }
}

/// The specialisation for `p` with `cfg`.
pub fn spec(arch: &str, p: &Fp8Problem, cfg: Fp8Config) -> KernelSpec {
    spec_ordered(arch, p, cfg, &Fp8Overrides::NONE)
}

/// [`spec`] under the FP8 experiment knobs of `o`: the tile order of `group_m` rows of cluster
/// tiles a column sweep (`KILN_FP8_GROUP_M`), else [`GROUP_M`]; a ring of `stages` where fewer
/// than the config's (`KILN_FP8_STAGES`: the shared memory stays the config's). Unset, the
/// compiled variant's spec.
pub fn spec_ordered(arch: &str, p: &Fp8Problem, cfg: Fp8Config, o: &Fp8Overrides) -> KernelSpec {
    let mut spec = spec_of(arch, p.a, p.b, p.scale, p.promote, cfg, p.out);
    let stages = o.stages.map_or(cfg.stages(), |s| s.min(cfg.stages()));
    for (name, value) in spec.defines.iter_mut() {
        match (name.as_str(), o.group_m) {
            ("KILN_GROUP_M", Some(g)) => *value = g.to_string(),
            ("KILN_STAGES", _) => *value = stages.to_string(),
            _ => {}
        }
    }
    spec
}

fn spec_of(
    arch: &str,
    a: Fp8Format,
    b: Fp8Format,
    scale: ScaleMode,
    promote: bool,
    cfg: Fp8Config,
    out: DType,
) -> KernelSpec {
    let spec = KernelSpec::new("gemm/fp8_wgmma.cu", "gemm_fp8_wgmma", arch)
        .define("KILN_FP8_A", a.define())
        .define("KILN_FP8_B", b.define())
        .define("KILN_SCALE", scale.define())
        .define("KILN_PROMOTE", promote as u32)
        .define("KILN_PIPE", cfg.pipe as u32)
        .define("KILN_BM", cfg.bm)
        .define("KILN_BN", cfg.bn)
        .define("KILN_SSCALE", cfg.sscale_define())
        .define("KILN_CLUSTER", cfg.ctas_m())
        .define("KILN_CLUSTER_N", cfg.ctas_n())
        .define("KILN_TMAE", cfg.tmae_define())
        .define("KILN_ARS", cfg.a_regs as u32)
        .define("KILN_ARES", cfg.a_resident as u32)
        .define("KILN_STAGES", cfg.stages())
        .define("KILN_OUT", out.code())
        // NT: A row-major and B column-major, both K-contiguous (the layout defines the shared
        // warp-specialised headers read)
        .define("KILN_A_ROW", 1)
        .define("KILN_B_ROW", 0)
        .define("KILN_GROUP_M", GROUP_M)
        .define("KILN_SMEM", cfg.smem_bytes());
    // (absent: whole tiles or not, the cooperative consumers, the kernel's defaults; only the
    // kernels that differ pass them, so that the others' cache keys stay as they were)
    let spec = match cfg.whole {
        true => spec.define("KILN_WHOLE", 1),
        false => spec,
    };
    if cfg.pingpong {
        spec.define("KILN_PINGPONG", 1)
    } else {
        spec
    }
}

/// Every specialisation (for the compile check): one per compiled kernel, a config that only
/// changes run-time choices (`128ote`: `128te`'s kernel taking turns) adding none.
pub fn variants(arch: &str) -> Vec<KernelSpec> {
    if !crate::jit::arch::has_wgmma(arch) {
        return Vec::new();
    }
    let mut v = Vec::new();
    for a in Fp8Format::ALL {
        for b in Fp8Format::ALL {
            for scale in ScaleMode::ALL {
                for promote in [false, true] {
                    let cfgs = configs(a, b, scale, promote);
                    for (i, &cfg) in cfgs.iter().enumerate() {
                        if cfgs[..i].iter().any(|c| c.same_kernel(&cfg)) {
                            continue;
                        }
                        for out in DType::OUTPUTS {
                            // (the lean form, `z`, and `u` for bf16 C alone: what they are
                            // timed for)
                            if (cfg.a_resident || cfg.whole) && out != DType::Bf16 {
                                continue;
                            }
                            v.push(spec_of(arch, a, b, scale, promote, cfg, out));
                        }
                    }
                }
            }
        }
    }
    v
}

/// `Ok` or why the kernel cannot compute `p` on `dev`.
pub fn supports(p: &Fp8Problem, dev: &DeviceInfo) -> std::result::Result<(), String> {
    if !dev.is_hopper() {
        return Err(format!(
            "needs a Hopper GPU (sm_90a: FP8 wgmma, TMA); {} is sm_{}{}",
            dev.name, dev.compute_capability.0, dev.compute_capability.1
        ));
    }
    if p.scale == ScaleMode::Block && !p.promote {
        return Err(
            "block scales apply per 128-deep K block, so they need promoted accumulation; drop \
             the unpromoted request"
                .into(),
        );
    }
    let w = configs(p.a, p.b, p.scale, p.promote);
    let Some(smallest) = w.iter().map(|c| c.smem_bytes()).min() else {
        return Err(format!(
            "{} x {} operands are compiled only with promoted tensor or block scales ({} scales{} \
             are not); use e4m3 x e4m3 for those",
            p.a,
            p.b,
            p.scale,
            if p.promote { "" } else { " unpromoted" }
        ));
    };
    dev.check_smem(smallest)?;
    Ok(())
}

/// Tiles of `cfg`'s block tile over `p`'s C (for clusters: every tile of every cluster tile,
/// the second of a pair past M or N where the tile-rows or columns are odd).
pub fn tiles(p: &Fp8Problem, cfg: &Fp8Config) -> u64 {
    let (cm, cn) = (cfg.ctas_m() as u64, cfg.ctas_n() as u64);
    (p.m as u64).div_ceil(cfg.bm as u64).div_ceil(cm)
        * cm
        * (p.n as u64).div_ceil(cfg.bn as u64).div_ceil(cn)
        * cn
}

/// Relative cost per output column of a config's mainloop, from the H100 measurements of
/// 2026-11-26: promotion after a drained pipeline ran at 58 % of the unpromoted kernel's speed
/// (block scales, 4096x7168x16384: 809 against 1,307 TFLOPS for cuBLASLt; tensor scales at
/// 8192^3: 1,167 against 1,468 unpromoted).
pub(crate) fn column_cost(cfg: Fp8Config, promote: bool) -> u64 {
    if promote && !cfg.pipe {
        10
    } else {
        8
    }
}

/// Which rule picks the config (`KILN_FP8_RULE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum Fp8Rule {
    /// At M <= [`SMALL_M`] the 64-row tile as `--tile 64x128ps` ran ([`choose_small_m`]), above
    /// it the waves rule (the default from the H200 timings of 7eb2e34 to those of 2026-11-29's
    /// `large` rule).
    Measured,
    /// The rule of a8381a5: the old family's configs, the least waves x width x cost per
    /// column, split-K to fill half the SMs.
    Waves,
    /// The 2026-11-29 cost model over every compiled config and slice count: the larger of the
    /// DRAM time of the problem's bytes and the busiest SM's time, plus the split-K tail
    /// ([`predict_us`]).
    Bytes,
    /// The measured rule at M <= [`SMALL_M`]; above it the TMA-store-epilogue tile whose width
    /// fills the SMs best ([`choose_fill`]): not yet timed, so not the default.
    Fill,
    /// The default (H200, 2026-11-29, ledger row 12): the measured rule, except at M >=
    /// [`LARGE_M`] with block scales, where the 128-wide tile with the A scales by TMA and the
    /// TMA-store epilogue runs, its promotion pipelined (`128pte`) from K = [`LARGE_PIPE_K`]
    /// ([`choose_large`]): 1.12-1.34x the measured rule at DeepSeek-V3's six M = 4096 shapes.
    /// At M <= [`SMALL_M`] and M >= [`LARGE_M`] with stream-K where it fills the SMs better
    /// ([`STREAM_GAIN`], ledger row 19).
    #[default]
    Large,
}

impl Fp8Rule {
    pub const ALL: [Fp8Rule; 5] = [
        Fp8Rule::Measured,
        Fp8Rule::Waves,
        Fp8Rule::Bytes,
        Fp8Rule::Fill,
        Fp8Rule::Large,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fp8Rule::Measured => "measured",
            Fp8Rule::Waves => "waves",
            Fp8Rule::Bytes => "bytes",
            Fp8Rule::Fill => "fill",
            Fp8Rule::Large => "large",
        }
    }

    pub fn parse(s: &str) -> Option<Fp8Rule> {
        Fp8Rule::ALL.into_iter().find(|p| p.name() == s)
    }
}

/// The config to run `p` with under the default rule ([`Fp8Rule::Large`]).
pub fn choose(p: &Fp8Problem, dev: &DeviceInfo) -> Fp8Config {
    choose_by(p, dev, Fp8Rule::default())
}

/// The config `rule` picks for `p` (the waves and measured rules leave the slices to
/// [`choose_splits`] at launch; the bytes rule decides them).
pub fn choose_by(p: &Fp8Problem, dev: &DeviceInfo, rule: Fp8Rule) -> Fp8Config {
    match rule {
        Fp8Rule::Measured => choose_small_m(p, dev).unwrap_or_else(|| choose_waves(p, dev)),
        Fp8Rule::Waves => choose_waves(p, dev),
        Fp8Rule::Bytes => ranked(p, dev)
            .first()
            .map(|r| r.config)
            .unwrap_or_else(|| choose_by(p, dev, Fp8Rule::Waves)),
        Fp8Rule::Fill => choose_small_m(p, dev)
            .or_else(|| choose_fill(p, dev))
            .unwrap_or_else(|| choose_waves(p, dev)),
        Fp8Rule::Large => match choose_large(p, dev) {
            Some(c) => stream_if_it_fills(p, &c, dev),
            None => pairs_along_n(
                p,
                whole_if_unsplit(
                    p,
                    with_small_m_splits(
                        p,
                        choose_small_rows(p, dev)
                            .or_else(|| choose_short_k_64(p, dev))
                            .unwrap_or_else(|| choose_by(p, dev, Fp8Rule::Measured)),
                        dev,
                    ),
                    dev,
                    SMALL_M_WHOLE,
                ),
                dev,
                SMALL_ROWS_PAIRS_N,
            ),
        },
    }
}

/// Most of the busiest cluster's K blocks stream-K may leave for the large rule to take it, and
/// the fewest it must save: its runs' atomic sums (every cluster's partial tiles, 64 KB each at
/// 128 x 128, at once at the end) cost some 9-10 us on an H200 (ledger row 19: 4096x2112x7168
/// in pairs saved 49 K blocks of ~0.42 us and gained 10 us; 1024x7168x2048 saved 9 and lost 4.6).
pub const STREAM_GAIN: f64 = 0.9;
pub const STREAM_MIN_SAVED: u64 = 24;

/// Fewest K blocks a unit (tile or slice) of the 128-row tile holds at 64 < M <= [`SMALL_M`] for
/// the large rule to take it over the 64-row tile, or K blocks at most without slices: on an
/// H200 (ledger row 19) `128pte/2` ran 128x7168x16384 in 42.2 us against `64x128ps/1`'s 46.2
/// (64 K blocks a slice: each B tile streams into one SM, not two), and `128pte/1`
/// 128x32768x512 in 13.3 against 14.8 (4 K blocks: half the units, C through the TMA-store
/// epilogue); with 8 K blocks a slice it lost 1.1-1.4x (128x2112x7168 in 7 slices,
/// 128x7168x2048 in 2), with 12 unsplit it tied (128x24576x1536).
pub const SMALL_ROWS_BLOCKS: u64 = 32;
pub const SMALL_ROWS_SHORT_K: u64 = 4;

/// The large rule at 64 < M <= [`SMALL_M`]: the pipelined 128-row tile with the A scales by TMA
/// and the TMA-store epilogue (`128pte`, slices from [`choose_splits`]) where its units hold at
/// least [`SMALL_ROWS_BLOCKS`] K blocks, or at most [`SMALL_ROWS_SHORT_K`] without slices (there
/// the lean form [`SMALL_ROWS_LEAN`] where it fits); `None` elsewhere (the measured rule's 64-row
/// tile) or where it is not compiled.
fn choose_small_rows(p: &Fp8Problem, dev: &DeviceInfo) -> Option<Fp8Config> {
    if p.m <= 64 || p.m > SMALL_M {
        return None;
    }
    if let Some(c) = choose_one_tile(p, dev) {
        return Some(scales_by_bulk_if_short(p, c));
    }
    let c = configs(p.a, p.b, p.scale, p.promote)
        .iter()
        .copied()
        .find(|c| {
            c.bm == 128
                && c.bn == 128
                && c.pipe
                && c.tma_scales
                && c.tma_epi
                && !c.one_buffer
                && c.ctas() == 1
                && dev.check_smem(c.smem_bytes()).is_ok()
        })?;
    let kblocks = (p.k as u64).div_ceil(BK as u64);
    let s = choose_splits(p, &c, dev) as u64;
    let long = kblocks / s >= SMALL_ROWS_BLOCKS;
    let short = s == 1 && kblocks <= SMALL_ROWS_SHORT_K;
    // ledger row 41: the same tile drained, its consumers taking turns (`128ote`), where tried
    if short {
        if let Some(lean) = lean_if_it_fits(p, dev, SMALL_ROWS_LEAN) {
            return Some(lean);
        }
    }
    let turns = (long && SMALL_ROWS_TURNS_LONG) || (short && SMALL_ROWS_TURNS_SHORT);
    let c = if turns { SMALL_ROWS_TURNS } else { c };
    let compiled = is_compiled(p, &c);
    ((long || short) && compiled).then_some(scales_by_bulk_if_short(p, c))
}

/// Most K blocks for which the large rule's 128-row tiles at 64 < M <= [`SMALL_M`] copy a
/// stage's A scales by one bulk copy instead of their tensor map (`b`, [`Fp8Config::sa_bulk`];
/// ledger rows 70 and 90): K < 2048. On an H200 `b` won two rounds where a CTA's whole K is a
/// few blocks and the map's first use is part of a short launch's fixed part (128x32768x512
/// `128otbe/1` 1.4 and 2.8 % under `128ote/1`, 128x24576x1536 `256tbhl/1` 2.0 and 2.9 % under
/// `256thl/1`), and lost two with the pipelined tile's 64 K blocks a slice at 128x7168x16384
/// (`128ptbe/2c` 3.5 and 3.8 % over `128pte/2c`: the producer thread's longer issue a stage).
pub const SMALL_ROWS_BULK_K: u64 = 15;

/// With `b` at the short K of [`SMALL_ROWS_BULK_K`]: the B scales by bulk copies as well, no
/// copier warp (`q`, [`Fp8Config::sb_bulk`]; ledger rows 71 and 90), where it won two rounds
/// against `b`.
/// On since ledger row 90: `q` ran 0.4 and 4.1 % under `b` (row 71's round 2: 1.4 and 0.5 %).
pub const SMALL_ROWS_BULK_BOTH: bool = true;

/// The large rule's config at M <= 64 with at most [`SMALL_ROWS_SHORT_K`] K blocks where its 64 x
/// 128 tiles fill the SMs once or more (ledger row 94): `64x128psb/1`, two tiles a CTA at
/// 64x32768x512, the A scales by one bulk copy. On an H200 it ran 3.5, 1.1 and 2.3 % under the
/// measured rule's `64x256ps/1` there in three rounds (rows 70 and 94), where `64x128ps/1`
/// without `b` was level with it (-1, +1, 0 %): the copier warp's 4-byte copies of the A scales
/// are in each of its two tiles' first stages. Where the lean form fits, [`SMALL_M_SHORT_LEAN`].
pub const SMALL_M_SHORT: Fp8Config = Fp8Config::tile(64, 128, true, true)
    .scales_by_bulk_copy()
    .unsplit();

/// The lean short-K forms (`z`, [`Fp8Config::lean_short_k`]) the large rule takes where they
/// fit ([`Fp8Config::lean_fits`]: K of [`LEAN_KBLOCKS`] blocks, M a multiple of 4, bf16 C, one
/// slice), in place of the turns' `128otqe/1` at 64 < M <= 128 and of [`SMALL_M_SHORT`] at
/// M <= 64: A's four K blocks loaded once, a ring of B alone, half the code. On an H200 (ledger
/// rows 171 and 200) `128ptqze/1` ran 128x32768x512 in 12.6-13.1 us against `128otqe/1`'s
/// 13.6-14.4 alternating and `64x128ptqze/1` 64x32768x512 in 11.3-11.5 against `64x128psb/1`'s
/// 12.2-12.5, two rounds each.
pub const SMALL_ROWS_LEAN: Fp8Config = Fp8Config::tile(128, 128, true, true)
    .scales_by_tma()
    .scales_all_by_bulk_copy()
    .lean_short_k()
    .tma_store()
    .unsplit();
pub const SMALL_M_SHORT_LEAN: Fp8Config = Fp8Config::tile(64, 128, true, true)
    .scales_by_tma()
    .scales_all_by_bulk_copy()
    .lean_short_k()
    .tma_store()
    .unsplit();

/// Whether `c`'s kernel is among the configs compiled for `p`'s formats, scales and promotion
/// (the rules take only those).
fn is_compiled(p: &Fp8Problem, c: &Fp8Config) -> bool {
    configs(p.a, p.b, p.scale, p.promote)
        .iter()
        .any(|x| x.same_kernel(c))
}

/// `lean` where it fits `p` ([`Fp8Config::lean_fits`] in one slice), is compiled for `p` and
/// fits `dev`'s shared memory; else `None` (the rule's config without it).
fn lean_if_it_fits(p: &Fp8Problem, dev: &DeviceInfo, lean: Fp8Config) -> Option<Fp8Config> {
    let compiled = is_compiled(p, &lean);
    (p.scale == ScaleMode::Block
        && lean.lean_fits(p, 1)
        && compiled
        && dev.check_smem(lean.smem_bytes()).is_ok())
    .then_some(lean)
}

fn choose_short_k_64(p: &Fp8Problem, dev: &DeviceInfo) -> Option<Fp8Config> {
    let c = SMALL_M_SHORT;
    let kblocks = (p.k as u64).div_ceil(BK as u64);
    let compiled = is_compiled(p, &c);
    (p.m <= 64
        && p.scale == ScaleMode::Block
        && kblocks <= SMALL_ROWS_SHORT_K
        && compiled
        && dev.check_smem(c.smem_bytes()).is_ok()
        && tiles(p, &c) >= dev.sm_count.max(1) as u64)
        .then(|| lean_if_it_fits(p, dev, SMALL_M_SHORT_LEAN).unwrap_or(c))
}

/// Whether the large rule runs its unsplit 64-row picks at M <= [`SMALL_M`] as their whole-tile
/// twins (`u`, [`Fp8Config::whole`]; ledger rows 202-203) where one is compiled. On: on an H200
/// (2026-12-01) they ran 2-8 % under the rule's `64x128ps/1` and `64x192ps/1` in two rounds at
/// 64x7168x2048, 128x7168x2048 and 64x24576x1536, every step's mean ahead. The 128 x 256
/// tile's (`256tquhl/1`) where [`SMALL_ROWS_ONE_TILE_WHOLE`].
pub const SMALL_M_WHOLE: bool = true;

/// Whether [`SMALL_M_WHOLE`] also takes the one-tile config's whole-tile twin (`256tquhl/1` for
/// `256tqhl/1` at 128x24576x1536, ledger row 248). Off: on an H200 it was level in one round
/// (2026-12-01), ahead in every alternation of two calls on 2026-12-02 with each config alone in
/// its process (18.5 / 18.1 us against 18.7 / 18.7; then 0.991 / 0.979 / 0.982x cuBLASLt
/// against 0.937 / 0.972 / 0.938x), but in the DeepSeek set (each shape after another kernel)
/// 18.8 / 18.6 us against the plain kernel's 18.3 in the same call: no rule change on that.
pub const SMALL_ROWS_ONE_TILE_WHOLE: bool = false;

/// Whether the large rule runs its cluster-summed `128pte/2c` as `128ptne/2c` where the column
/// tiles pair up ([`pairs_along_n`]; ledger row 240). On: on an H200 (2026-12-02, two rounds)
/// `128ptne/2c` ran 128x7168x16384 at 1.000-1.013x cuBLASLt after 1 s of load against
/// `128pte/2c`'s 0.940-0.960x in the same calls; of DeepSeek-V3's 18 shapes the only one it takes.
pub const SMALL_ROWS_PAIRS_N: bool = true;

/// `cfg` in pairs along N multicasting A (`128ptne/2c`) where `on`, `cfg` is the large rule's
/// `128pte` summing [`CLUSTER_SUM_SPLITS`] slices in a cluster, its column tiles are even (no
/// pair's second tile past N: the pair would compute and sum a tile for nothing), and the pair
/// is compiled and fits; else `cfg`.
fn pairs_along_n(p: &Fp8Problem, cfg: Fp8Config, dev: &DeviceInfo, on: bool) -> Fp8Config {
    let pte = Fp8Config::tile(128, 128, true, true)
        .scales_by_tma()
        .tma_store();
    let pair = cfg.paired_n();
    let takes = on
        && Fp8Config {
            splits: 0,
            reduce: None,
            ..cfg
        } == pte
        && cfg.splits == CLUSTER_SUM_SPLITS
        && cfg.reduce == Some(Reduce::Cluster)
        && p.n.div_ceil(cfg.bn as usize).is_multiple_of(2)
        && is_compiled(p, &pair)
        && check_config(p, pair).is_ok()
        && dev.check_smem(pair.smem_bytes()).is_ok();
    if takes {
        pair
    } else {
        cfg
    }
}

/// `cfg` (the large rule's pick at M <= [`SMALL_M`]) as its whole-tile twin where `on`, `cfg` is
/// a 64-row tile as timed (`64x128ps/1`, `64x192ps/1`: not `SMALL_M_SHORT`'s `b`) or the
/// one-tile config's 128 x 256 tile where [`SMALL_ROWS_ONE_TILE_WHOLE`] (its A scales by bulk
/// copy as the rule gives them), the launch takes one slice and no stream-K, C is bf16 (the
/// twins' one output) and the twin is compiled; else `cfg`.
fn whole_if_unsplit(p: &Fp8Problem, cfg: Fp8Config, dev: &DeviceInfo, on: bool) -> Fp8Config {
    let one_tile = SMALL_ROWS_ONE_TILE_WHOLE && cfg.same_kernel(&SMALL_ROWS_ONE_TILE);
    if !on
        || p.m > SMALL_M
        || p.out != DType::Bf16
        || !((cfg.bm == 64 && !cfg.sa_bulk) || one_tile)
        || cfg.whole
        || cfg.a_resident
        || cfg.stream
        || splits_for(p, &cfg, dev) != 1
    {
        return cfg;
    }
    let twin = Fp8Config {
        whole: true,
        splits: 1,
        ..cfg
    };
    let compiled = is_compiled(p, &twin);
    if compiled && check_config(p, twin).is_ok() {
        twin
    } else {
        cfg
    }
}

/// `c` (one of the large rule's single-CTA slot tiles at 64 < M <= [`SMALL_M`]) with its scales
/// by bulk copies where K holds at most [`SMALL_ROWS_BULK_K`] blocks, else `c`. A run-time
/// letter: the launch runs the same kernel as without it where M is not a multiple of 4 (and
/// `q` as `b` where the K blocks are not whole runs of four).
fn scales_by_bulk_if_short(p: &Fp8Problem, c: Fp8Config) -> Fp8Config {
    let kblocks = (p.k as u64).div_ceil(BK as u64);
    if p.scale != ScaleMode::Block || !c.sscale || c.ctas() > 1 || kblocks > SMALL_ROWS_BULK_K {
        return c;
    }
    if SMALL_ROWS_BULK_BOTH && c.tma_scales && c.bn != 192 {
        c.scales_all_by_bulk_copy()
    } else {
        c.scales_by_bulk_copy()
    }
}

/// The drained 128-row tile with the A scales by TMA, the TMA-store epilogue and its consumers
/// taking turns issuing K blocks (`128ote`, ledger row 41): at M = 128 both consumers of the
/// drained kernel promote in phase while the tensor cores idle, and the pipelined `128pte`
/// keeps one batch of its own in flight; the turns keep the other consumer's batch there. In
/// round 1a (H200, 2026-11-30, after 1 s of warm-up) `128ote/1` ran 128x32768x512 in 15.0 us
/// against `128pte/1`'s 16.9-17.4 (and the 128 x 192 tile 19.6 with turns against 22.8-23.4
/// without). The large rule takes it in `128pte`'s place where [`SMALL_ROWS_TURNS_SHORT`]
/// (units of at most [`SMALL_ROWS_SHORT_K`] K blocks, unsplit) or [`SMALL_ROWS_TURNS_LONG`]
/// (units of [`SMALL_ROWS_BLOCKS`] or more) is on. Short: on since it won rounds 1a and 1
/// (round 1, X Y Y X: `128ote/1` 14.8 / 13.3 us against `128pte/1` 13.7 / 16.4, a round's
/// position moving a median by up to 15 %). Long: off (round 1: `128ote/2c` 51.0 / 49.7 against
/// `128pte/2c` 47.4 / 48.2 at 128x7168x16384).
pub const SMALL_ROWS_TURNS: Fp8Config = Fp8Config::tile(128, 128, false, true)
    .ordered()
    .scales_by_tma()
    .tma_store();
pub const SMALL_ROWS_TURNS_SHORT: bool = true;
pub const SMALL_ROWS_TURNS_LONG: bool = false;

/// The config the large rule runs at 64 < M <= [`SMALL_M`] where its tiles, one a cluster,
/// occupy at least [`SMALL_ROWS_FILL`] of the resident clusters and no more than all of them,
/// and hold more than [`SMALL_ROWS_SHORT_K`] K blocks (ledger rows 24-25): every CTA's whole
/// work one tile, its last epilogue staged in the ring. On an H200 `256thl` ran
/// 128x24576x1536 (96 tiles of 12 K blocks) in 19.5-19.7 us against `64x128ps/1`'s 19.9-20.0
/// (cuBLASLt 17.9-18.0), and lost at 128x32768x512 (4 K blocks: 15.4-15.7 against `128pte/1`'s
/// 13.9-14.0). Of DeepSeek-V3's shapes it takes 128x24576x1536 only.
pub const SMALL_ROWS_ONE_TILE: Fp8Config = Fp8Config::small_rows_wide().last_in_ring().unsplit();
pub const SMALL_ROWS_FILL: f64 = 0.7;

/// The one-tile config of the large rule at 64 < M <= [`SMALL_M`] (above): [`SMALL_ROWS_ONE_TILE`]
/// where its tiles fill the SMs once, else `None` (also where it is not compiled, for want of
/// e4m3 block scales, or does not fit). (The 128 x 192 tile, `192othl/1`, which gave 128 tiles
/// at N = 24,576 for 256's 96, lost to it in four rounds and is not compiled: ledger rows 40,
/// 70 and 91.)
fn choose_one_tile(p: &Fp8Problem, dev: &DeviceInfo) -> Option<Fp8Config> {
    let c = one_tile_config(SMALL_ROWS_ONE_TILE_TURNS);
    one_tile_fills(p, dev, &c).then_some(c)
}

/// Whether the large rule's one-tile config runs with its consumers taking turns (`o`, run time
/// on the same kernel: `256otqhl/1` at 128x24576x1536; ledger row 246). Off: on an H200
/// (2026-12-02, one round) `256otqhl/1` ran 18.2 / 18.3 us against `256tqhl/1`'s 18.7 / 18.7
/// alone in alternating processes, and ncu counted 7.5 % fewer cycles on its busiest SM; a
/// second round before the rule takes it.
pub const SMALL_ROWS_ONE_TILE_TURNS: bool = false;

/// [`SMALL_ROWS_ONE_TILE`], its consumers taking turns where `turns`.
const fn one_tile_config(turns: bool) -> Fp8Config {
    if turns {
        SMALL_ROWS_ONE_TILE.ordered()
    } else {
        SMALL_ROWS_ONE_TILE
    }
}

/// Whether `c` (single CTAs, one slice) is compiled for `p`, fits `dev` and gives every CTA one
/// tile of more than [`SMALL_ROWS_SHORT_K`] K blocks, its tiles at least [`SMALL_ROWS_FILL`] of
/// the SMs and no more than all of them.
fn one_tile_fills(p: &Fp8Problem, dev: &DeviceInfo, c: &Fp8Config) -> bool {
    let compiled = is_compiled(p, c);
    if !compiled || dev.check_smem(c.smem_bytes()).is_err() {
        return false;
    }
    let clusters = (dev.sm_count.max(1) / c.ctas()).max(1) as u64;
    let ctiles = tiles(p, c) / c.ctas() as u64;
    let kblocks = (p.k as u64).div_ceil(BK as u64);
    kblocks > SMALL_ROWS_SHORT_K
        && ctiles <= clusters
        && ctiles as f64 >= SMALL_ROWS_FILL * clusters as f64
}

/// The K blocks of `cfg`'s busiest cluster on `dev` (a cluster per SM or per pair): as the
/// config runs (whole tiles or split-K slices, [`splits_for`]) and with stream-K
/// ([`stream_layout`]; the same where it does not apply).
pub fn busiest_blocks(p: &Fp8Problem, cfg: &Fp8Config, dev: &DeviceInfo) -> (u64, u64) {
    let clusters = (dev.sm_count.max(1) / cfg.ctas()).max(1) as u64;
    let ctiles = tiles(p, cfg) / cfg.ctas() as u64;
    let kblocks = (p.k as u64).div_ceil(BK as u64);
    let s = splits_for(
        p,
        &Fp8Config {
            stream: false,
            ..*cfg
        },
        dev,
    ) as u64;
    let plain = (ctiles * s).div_ceil(clusters) * kblocks.div_ceil(s);
    let stream = match stream_layout(ctiles, kblocks, clusters) {
        Some((sk_from, sk_w)) => {
            sk_from as u64 / clusters * kblocks + (sk_w as u64).div_ceil(clusters)
        }
        None => plain,
    };
    (plain, stream)
}

/// `cfg` with stream-K where it takes slices (a tile not run in parts, summed atomically) and its
/// busiest cluster computes at most [`STREAM_GAIN`] of the K blocks it would without, and at
/// least [`STREAM_MIN_SAVED`] fewer (DeepSeek-V3 on an H200: 4096x2112x7168 in pairs 231
/// against 280, five waves of 4.12); else `cfg`. (At M <= 128 stream-K lost 1.05-1.6x on an
/// H200 at every shape timed, ledger row 19: the large rule applies it from M = 1024 only.)
fn stream_if_it_fills(p: &Fp8Problem, cfg: &Fp8Config, dev: &DeviceInfo) -> Fp8Config {
    let sk = cfg.streamed();
    if cfg.stream || cfg.splits > 0 || cfg.parts() > 1 || check_config(p, sk).is_err() {
        return *cfg;
    }
    let (plain, stream) = busiest_blocks(p, cfg, dev);
    if (stream as f64) <= STREAM_GAIN * plain as f64
        && plain.saturating_sub(stream) >= STREAM_MIN_SAVED
    {
        sk
    } else {
        *cfg
    }
}

/// Fewest rows the large rule gives its large-M tile: from M = 1024 a 128-row tile has 8 rows of
/// tiles, so the K loop, not the split-K or the fill of the SMs, is what a config changes.
pub const LARGE_M: usize = 1024;

/// Fewest K the large rule pipelines the promotion at in single CTAs: on an H200 `128pte` ran
/// 1.06-1.10x `128te` at K = 4096 and 16384 (aa92128), 1.10x at K = 1536 and 0.97x at K = 512
/// (ledger row 13), where a tile has 4 K blocks to overlap.
pub const LARGE_PIPE_K: usize = 1536;

/// The clusters (CTAs along M, along N) the large rule runs its pipelined tile in: pairs along M
/// sharing B (`128ptme`), on an H200 (ledger row 13) 1.035x `128pte` at 4096x7168x16384, 1.01x
/// at 4096x24576x1536, and at 4096x32768x512 1.04x `128pte` and 1.01x `128te`.
pub const LARGE_CLUSTER: (u32, u32) = (2, 1);

/// Fewest waves of tiles (single CTAs' over the SMs) the large rule runs clusters at: at
/// 2048x2048x4096 (1.94 waves) the pairs ran 0.98x `128pte`; every timed shape of 13 waves or
/// more gained.
pub const LARGE_CLUSTER_WAVES: u64 = 4;

/// The 128 x 256 tile's time per 128 x 128 tile of work against `128ptme`'s, on an H200 (ledger
/// row 15): 691-692 against 754-755 us at 4096x7168x16384 (the busiest SM 14 tiles of work
/// either way), 0.92. The large rule weighs its waves by it.
pub const LARGE_WIDE_COST: f64 = 0.92;

/// The tiles wider than 128 (in pairs along M) the large rule weighs against `128ptme` where the
/// pairs run, each with its time per 128 columns of work against `128ptme`'s (H200): the 128 x 256
/// tile with its epilogue deferred (`256tmd`: 0.667 against `256tmh`'s 0.682 ms at
/// 4096x7168x16384 on an H200 at 90cac7f, ledger row 26; weighed at `256tmh`'s 0.92).
pub const LARGE_WIDE: &[(Fp8Config, f64)] = &[(
    Fp8Config::wide_pair(256, false).deferred_epilogue(),
    LARGE_WIDE_COST,
)];

/// A wide tile's cost per 128 columns in the large rule ([`LARGE_WIDE`]), if it has one.
pub fn large_wide_cost(c: &Fp8Config) -> Option<f64> {
    LARGE_WIDE
        .iter()
        .find(|(w, _)| w.same_kernel(c))
        .map(|&(_, cost)| cost)
}

/// The large rule at M >= [`LARGE_M`]: the 128-wide tile with the A scales by TMA and the
/// TMA-store epilogue, its promotion pipelined, in clusters of [`LARGE_CLUSTER`] (`128ptme`) where
/// they tile C without a tile past M or N and its tiles fill [`LARGE_CLUSTER_WAVES`] waves of
/// the SMs, and there the tile of [`LARGE_WIDE`] in the same pairs whose waves, each weighed by
/// its width and its cost per 128 columns, take least, if no longer than the 128-wide tile's
/// (`256tmh` at every DeepSeek-V3 M = 4096 shape but N = 2112, whose 9 columns of 256 fill 3
/// waves against 5 of 17 columns of 128: 1.00-1.03x cuBLASLt against `128ptme`'s 0.95-0.97x,
/// ledger row 15); else in single CTAs, pipelined from K = [`LARGE_PIPE_K`] (`128pte`), drained
/// below (`128te`); `None` below [`LARGE_M`] or where it is not compiled (it is for e4m3 block
/// scales) or does not fit. (The consumers taking turns, `128ote` and `256otmh`, ran 0.95-1.0x
/// without.)
pub fn choose_large(p: &Fp8Problem, dev: &DeviceInfo) -> Option<Fp8Config> {
    if p.m < LARGE_M {
        return None;
    }
    if p.scale == ScaleMode::Tensor {
        return choose_large_tensor(p, dev);
    }
    let sms = dev.sm_count.max(1) as u64;
    let waves = (p.m.div_ceil(128) * p.n.div_ceil(128)) as u64 >= LARGE_CLUSTER_WAVES * sms;
    let (cm, cn) = if waves {
        whole_clusters(p, LARGE_CLUSTER)
    } else {
        (1, 1)
    };
    let pipe = cm * cn > 1 || p.k >= LARGE_PIPE_K;
    let compiled = configs(p.a, p.b, p.scale, p.promote);
    let fits = |c: &Fp8Config| {
        (c.ctas_m(), c.ctas_n()) == (cm, cn) && dev.check_smem(c.smem_bytes()).is_ok()
    };
    let narrow = compiled.iter().copied().find(|c| {
        c.pipe == pipe
            && c.tma_scales
            && c.tma_epi
            && !c.order
            && c.bm == 128
            && c.bn == 128
            && !c.one_buffer
            && fits(c)
    })?;
    let waves = |c: &Fp8Config| tiles(p, c).div_ceil(sms) as f64;
    let cost = |c: &Fp8Config, per_128: f64| waves(c) * c.bn as f64 / 128.0 * per_128;
    let wide = LARGE_WIDE
        .iter()
        .filter(|(w, _)| {
            cm * cn > 1 && compiled.iter().any(|c| c.same_kernel(w) && !c.order) && fits(w)
        })
        .map(|&(w, per_128)| (w, cost(&w, per_128)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    match wide {
        Some((w, c)) if c <= waves(&narrow) => Some(w),
        _ => Some(narrow),
    }
}

/// The large rule with tensor scales (M >= [`LARGE_M`]): the 128 x 256 tile in pairs along M
/// ([`large_wide_tensor`]: `256md`, or `256mh` promoted without [`LARGE_PROMOTED_DEFERRED`]) where the pairs tile C whole, the 128-wide tiles fill [`LARGE_CLUSTER_WAVES`] waves
/// of the SMs, and its waves (two 128-wide tiles of work each) are no more than the 128-wide
/// tile's: 6144^3 9 waves of it against 18, 8192^3 16 against 32; `None` elsewhere (the waves
/// rule's old family) or where it is not compiled (e4m3 only) or does not fit.
fn choose_large_tensor(p: &Fp8Problem, dev: &DeviceInfo) -> Option<Fp8Config> {
    let sms = dev.sm_count.max(1) as u64;
    let narrow = Fp8Config::new(128, p.promote);
    let wide = large_wide_tensor(p.promote);
    let waves = |c: &Fp8Config| tiles(p, c).div_ceil(sms);
    let compiled = configs(p.a, p.b, p.scale, p.promote)
        .iter()
        .any(|c| c.same_kernel(&wide));
    (compiled
        && whole_clusters(p, LARGE_CLUSTER) == LARGE_CLUSTER
        && tiles(p, &narrow) >= LARGE_CLUSTER_WAVES * sms
        && 2 * waves(&wide) <= waves(&narrow)
        && dev.check_smem(wide.smem_bytes()).is_ok())
    .then(|| {
        if LARGE_PING_PONG && ping_pong_fills(p, dev) {
            Fp8Config::ping_pong(192)
        } else if LARGE_THREE_CONSUMERS && three_consumers_fill(p, dev) {
            Fp8Config::three_consumers(192)
        } else if LARGE_PROMOTED_192 && promoted_192_fills(p, dev) {
            promoted_192()
        } else {
            wide
        }
    })
}

/// Whether the large rule takes the promoted 128 x 192 tile (`192md`, ledger row 120) where
/// [`promoted_192_fills`] says it may: on since it beat `256md` beyond the spread in two rounds
/// (H200, 2026-11-30 evening: 8192^3 1.002-1.004x then 0.993-0.997x cuBLASLt against 0.941-0.969x,
/// 6144^3 1.004-1.005x then 1.003x against 0.963-0.969x).
pub const LARGE_PROMOTED_192: bool = true;

/// The promoted tensor-scale 128 x 192 tile in pairs along M, its epilogue deferred (`192md`):
/// one m64n192 batch a K block, cuBLASLt's arrangement at 8192^3 (ledger row 122).
pub const fn promoted_192() -> Fp8Config {
    Fp8Config::wide_pair_tensor(192).deferred_epilogue()
}

/// Where the promoted `192md` gives the busiest pair no more outputs than `256md` (8192^3: 21
/// tiles of 24,576 against 16 of 32,768, 1.6 % fewer; 6144^3: 12 against 9, the same outputs,
/// where its one batch a K block still won 3.7 % in round 1), is compiled, fits, and its pairs
/// tile C whole.
pub fn promoted_192_fills(p: &Fp8Problem, dev: &DeviceInfo) -> bool {
    p.promote && pair_tile_fills(p, dev, promoted_192(), large_wide_tensor(true))
}

/// Whether the large rule takes the 128 x 192 pair tile with ping-pong consumers (`192mgh`,
/// ledger rows 181-182) where [`ping_pong_fills`] says it may, ahead of `192x192md` and `256md`:
/// on since it beat the rule's tiles beyond the spread in two rounds (H200, 2026-12-01: 6144^3
/// +0.9-2.0 % then +1.1-1.9 %, 8192^3 +3.9-4.9 % then +4.2-5.3 %, every median under the rule
/// tile's minimum).
pub const LARGE_PING_PONG: bool = true;

/// Where `192mgh` (unpromoted tensor scales) gives the busiest pair no more outputs than the
/// 128 x 256 pairs of [`large_wide_tensor`]: 6144^3 (12 tiles of 24,576 against 9 of 32,768:
/// the same) and 8192^3 (21 against 16: 1.6 % fewer); and where it is compiled, fits, and its
/// pairs tile C whole.
pub fn ping_pong_fills(p: &Fp8Problem, dev: &DeviceInfo) -> bool {
    !p.promote && pair_tile_fills(p, dev, Fp8Config::ping_pong(192), large_wide_tensor(false))
}

/// The terms the large rule's pair tiles share: `tile` is compiled for `p`, fits the device's
/// shared memory, its pairs along M tile C whole, and its waves on the busiest SM carry no more
/// outputs than `than`'s.
fn pair_tile_fills(p: &Fp8Problem, dev: &DeviceInfo, tile: Fp8Config, than: Fp8Config) -> bool {
    let compiled = configs(p.a, p.b, p.scale, p.promote)
        .iter()
        .any(|c| c.same_kernel(&tile));
    compiled
        && p.m.div_ceil(tile.bm as usize).is_multiple_of(2)
        && busiest_outputs(p, dev, &tile) <= busiest_outputs(p, dev, &than)
        && dev.check_smem(tile.smem_bytes()).is_ok()
}

/// The outputs one SM computes over `c`'s waves.
fn busiest_outputs(p: &Fp8Problem, dev: &DeviceInfo, c: &Fp8Config) -> u64 {
    waves_of(p, dev, c) * (c.bm * c.bn) as u64
}

fn waves_of(p: &Fp8Problem, dev: &DeviceInfo, c: &Fp8Config) -> u64 {
    tiles(p, c).div_ceil(dev.sm_count.max(1) as u64)
}

/// Whether the large rule takes the 192 x 192 tile of three consumers (`192x192md`, ledger row
/// 28) where [`three_consumers_fill`] says it may: on since it beat `256md` at 6144^3 in two
/// rounds (H200, 2026-11-30: +1.8-2.0 %, 0.966-0.976x cuBLASLt against 0.947-0.958x; it lost
/// 3.3 % at 8192^3, which the fill test leaves to `256md`).
pub const LARGE_THREE_CONSUMERS: bool = true;

/// Where the 192 x 192 tile (unpromoted tensor scales, pairs along M) gives the busiest CTA no
/// more outputs than the 128 x 256 tile of [`large_wide_tensor`] in fewer tiles: 6144^3 (8
/// tiles of 36,864 against 9 of 32,768), not 8192^3 (15 against 16: 5.5 % more) nor 4096^3 or
/// 12288^3; and where it is compiled, fits, and its pairs tile C whole.
pub fn three_consumers_fill(p: &Fp8Problem, dev: &DeviceInfo) -> bool {
    let (three, wide) = (Fp8Config::three_consumers(192), large_wide_tensor(false));
    !p.promote
        && pair_tile_fills(p, dev, three, wide)
        && waves_of(p, dev, &three) < waves_of(p, dev, &wide)
}

/// The tensor-scale 128 x 256 tile the large rule takes: its epilogue deferred (`256md`) with
/// fast accumulation (on an H200 at 90cac7f 0.709 against `256mh`'s 0.717 ms at 8192^3, 0.298
/// against 0.301 at 6144^3, each beyond the other's min-max, ledger row 26), and promoted where
/// [`LARGE_PROMOTED_DEFERRED`] says so, else `256mh`.
pub fn large_wide_tensor(promote: bool) -> Fp8Config {
    let w = Fp8Config::wide_pair_tensor(256);
    if promote && !LARGE_PROMOTED_DEFERRED {
        w
    } else {
        w.deferred_epilogue()
    }
}

/// Whether the large rule's promoted tensor-scale tile defers its epilogue (`256md` in place of
/// `256mh`, ledger row 32): on an H200 after 1 s of load 2-3 % ahead at 6144^3 and 8192^3 in two
/// rounds (2026-11-30: 0.986 / 0.946x cuBLASLt against 0.965 / 0.921x in the first).
pub const LARGE_PROMOTED_DEFERRED: bool = true;

/// `cluster` (CTAs along M, along N) where its cluster tiles of 128 x 128 cover `p`'s C with
/// no tile past M or N (such a tile costs its CTA a whole tile's time), else single CTAs.
fn whole_clusters(p: &Fp8Problem, cluster: (u32, u32)) -> (u32, u32) {
    let (cm, cn) = cluster;
    if p.m.div_ceil(128).is_multiple_of(cm as usize)
        && p.n.div_ceil(128).is_multiple_of(cn as usize)
    {
        cluster
    } else {
        (1, 1)
    }
}

/// The fill rule above [`SMALL_M`]: among the compiled 128-row tiles with the TMA-store
/// epilogue and the copied scales (widths 112, 160 and 176: DeepGEMM's way of filling 132 SMs;
/// 128 until `128se` was dropped, ledger row 12), the one whose waves of
/// tiles over the SMs take least time, a wave costing its width (waves x width: a tile's K loop
/// takes time in proportion to its columns), then the fullest last wave, then the narrower.
/// Fewest waves alone would take 176 at N = 4096 (6 waves of 176 columns against 8 of 128:
/// 1,056 column-waves against 1,024). `None` where no such tile is compiled (tensor and row
/// scales).
pub fn choose_fill(p: &Fp8Problem, dev: &DeviceInfo) -> Option<Fp8Config> {
    let sms = dev.sm_count.max(1) as u64;
    configs(p.a, p.b, p.scale, p.promote)
        .iter()
        .copied()
        .filter(|c| {
            c.tma_epi
                && c.sscale
                && !c.tma_scales
                && !c.pipe
                && !c.order
                && c.bm == 128
                && dev.check_smem(c.smem_bytes()).is_ok()
        })
        .min_by_key(|c| {
            let t = tiles(p, c);
            let waves = t.div_ceil(sms);
            // SMs the last wave leaves idle
            (waves * c.bn as u64, waves * sms - t, c.bn)
        })
}

/// Most rows the measured rule gives the 64-row tiles: DeepSeek-V3's M = 64 and 128, timed on an
/// H200 at 7eb2e34 (2026-11-29).
pub const SMALL_M: usize = 128;

/// The measured rule's small-M choice, `None` above [`SMALL_M`] or where the 64-row tiles are not
/// compiled (they are for e4m3 block scales). On an H200 at 7eb2e34 the 64-row tile 128 wide
/// with its slices from [`choose_splits`] (what `--tile 64x128ps` runs) was the fastest timed
/// config at 8 of DeepSeek-V3's 12 M = 64 and 128 shapes and within 5 % of it at two more
/// (geomean 1.08x cuBLASLt against the waves rule's 0.93x), so it is returned as `64x128ps`
/// parses: slices and reduction left to the launch. At M <= 64 (one tile row), where its
/// column tiles need more waves of the SMs than a wider 64-row tile's, the narrowest with the
/// fewest waves: the other two shapes, one wave of 192 wide at N = 24,576 (17.3 us against
/// 18.5: 128 tiles for 132 SMs against 192) and of 256 at N = 32,768 (12.7 against 13.3).
fn choose_small_m(p: &Fp8Problem, dev: &DeviceInfo) -> Option<Fp8Config> {
    if p.m > SMALL_M {
        return None;
    }
    let sms = dev.sm_count.max(1) as u64;
    let small: Vec<Fp8Config> = configs(p.a, p.b, p.scale, p.promote)
        .iter()
        .copied()
        .filter(|c| c.bm == 64 && c.pipe && c.sscale && dev.check_smem(c.smem_bytes()).is_ok())
        .collect();
    let base = small.iter().copied().find(|c| c.bn == 128)?;
    if p.m > 64 {
        return Some(base);
    }
    small
        .into_iter()
        .min_by_key(|c| (tiles(p, c).div_ceil(sms), c.bn))
}

/// The rule of a8381a5: the old family's compiled config whose waves over the SMs cost least
/// (waves x width x [`column_cost`], a wave's time growing with the tile's width), the wider on
/// a tie (splits left to [`choose_splits`]).
fn choose_waves(p: &Fp8Problem, dev: &DeviceInfo) -> Fp8Config {
    let sms = dev.sm_count.max(1) as u64;
    configs(p.a, p.b, p.scale, p.promote)
        .iter()
        .copied()
        .filter(|c| !c.is_new() && dev.check_smem(c.smem_bytes()).is_ok())
        .min_by_key(|c| {
            (
                tiles(p, c).div_ceil(sms) * c.bn as u64 * column_cost(*c, p.promote),
                u32::MAX - c.bn,
            )
        })
        .unwrap_or(Fp8Config::new(128, false))
}

/// Most split-K slices through per-slice slots (`common/split_k.cuh`'s 32-bit slice arithmetic
/// holds up to 8), through the atomic sum (one tile whatever the count), and in a cluster's
/// shared memory (a portable cluster: 8 CTAs).
pub const MAX_SPLITS: u32 = 8;
pub const MAX_ATOMIC_SPLITS: u32 = 16;
pub const MAX_CLUSTER_SPLITS: u32 = 8;

/// Split-K slices for `p` with `cfg` under the rule of a8381a5: 1 while the tiles fill half
/// the SMs or more, else enough slices to fill them, at most [`MAX_SPLITS`], keeping two K
/// blocks or more a slice (DeepSeek-V3's M = 64 and 128 GEMMs have 17 to 56 tiles for 132 SMs).
pub fn choose_splits(p: &Fp8Problem, cfg: &Fp8Config, dev: &DeviceInfo) -> u32 {
    let (t, sms) = (tiles(p, cfg), dev.sm_count.max(1) as u64);
    let kblocks = (p.k as u64).div_ceil(BK as u64);
    if 2 * t >= sms || kblocks < 4 {
        return 1;
    }
    (sms / t)
        .min(kblocks / 2)
        .clamp(1, MAX_SPLITS.min(cfg.max_splits()) as u64) as u32
}

/// What the large rule's slices at M <= [`SMALL_M`] assume ([`small_m_stream_us`]; H200,
/// 2026-11-29, ledger rows 18-19 and 20). Past a fixed ~6 us (launch, the first DRAM round trip,
/// the epilogue: 64x2112x128, one K block, took 6.3 us), one SM streams B from DRAM at about 54
/// GB/s whatever its ring holds (64x2112x7168 unsplit, 17 CTAs of 56 K blocks of 16 KB: 22.7 us;
/// 128x7168x16384 in `128pte/2`, 112 CTAs of 64 blocks: 42.2), all of them together at about
/// 71 % of the DRAM's peak (3.5 of 4.9 TB/s: 64x7168x16384 `/2`, 121 MB past the fixed part at
/// 3.6 TB/s), and slicing adds ~2.5 us of reduction tail (the atomic adds, the fence, the
/// counter, the sum's read: 64x2112x7168 in 2 slices 16.7 us against 14.3 streamed, in 4 13.4
/// against 10.6). A slice count other than [`choose_splits`]' is taken where it streams in at
/// most [`SMALL_SPLIT_GAIN`] of that count's time.
pub const SM_STREAM_BYTES_PER_US: f64 = 54e3;
pub const SMALL_DRAM_SHARE: f64 = 0.71;
pub const SPLIT_TAIL_US: f64 = 2.5;
pub const SMALL_SPLIT_GAIN: f64 = 0.9;

/// Bytes `p` moves once: A, B, their scales, C.
fn problem_bytes(p: &Fp8Problem) -> f64 {
    (p.m * p.k + p.n * p.k) as f64
        + 4.0 * (p.a_scales() + p.b_scales()) as f64
        + (p.m * p.n * p.out.size()) as f64
}

/// The streamed part of `p` with `cfg` in `splits` slices at small M, in microseconds (the fixed
/// part left out): the larger of the busiest SM's B stream at [`SM_STREAM_BYTES_PER_US`] and the
/// problem's bytes at [`SMALL_DRAM_SHARE`] of the DRAM's peak, plus [`SPLIT_TAIL_US`] when
/// sliced, once for each unit its busiest CTA runs.
pub fn small_m_stream_us(p: &Fp8Problem, cfg: &Fp8Config, splits: u32, dev: &DeviceInfo) -> f64 {
    let sms = dev.sm_count.max(1) as u64;
    let s = splits.max(1) as u64;
    let kblocks = (p.k as u64).div_ceil(BK as u64);
    let units = tiles(p, cfg) * s;
    let per_sm = units.div_ceil(sms) * kblocks.div_ceil(s) * (cfg.b_box_rows() * BK) as u64;
    let t_sm = per_sm as f64 / SM_STREAM_BYTES_PER_US;
    let t_dram = problem_bytes(p) / (SMALL_DRAM_SHARE * dram_bytes_per_us(dev));
    // a CTA of several units sums each (its consumers wait for the fence and the counter)
    let tails = if s > 1 {
        units.div_ceil(sms) as f64
    } else {
        0.0
    };
    t_sm.max(t_dram) + tails * SPLIT_TAIL_US
}

/// The large rule's slices for `cfg` at M <= [`SMALL_M`]: the fewest whose
/// [`small_m_stream_us`] is within 2 % of the least, where that takes at most
/// [`SMALL_SPLIT_GAIN`] of [`choose_splits`]' count's time; else that count. On DeepSeek-V3's
/// M = 64 and 128 shapes it differs at one: 64x7168x2048 unsplit (56 CTAs stream 256 KB each in
/// ~4.9 us, the 15.7 MB take ~4.5 at the DRAM's share) where two slices add the ~2.5 us tail.
pub fn small_m_splits(p: &Fp8Problem, cfg: &Fp8Config, dev: &DeviceInfo) -> u32 {
    let fill = choose_splits(p, cfg, dev);
    let kblocks = (p.k as u64).div_ceil(BK as u64) as u32;
    let most = cfg.max_splits().min(kblocks / 2).max(1);
    let t = |s: u32| small_m_stream_us(p, cfg, s, dev);
    let best = (1..=most).map(t).fold(f64::INFINITY, f64::min);
    let pick = (1..=most).find(|&s| t(s) <= 1.02 * best).unwrap_or(fill);
    if t(pick) <= SMALL_SPLIT_GAIN * t(fill) {
        pick
    } else {
        fill
    }
}

/// The slices the large rule sums in a cluster's shared memory (`c`) at M <= [`SMALL_M`]: pairs,
/// which every GPC holds. On an H200 (ledger row 21) `128pte/2c` ran 128x7168x16384 in 38.5 us
/// against `/2a`'s 43.1, `64x128ps/2c` 64x7168x16384 in 37.8 against 38.7 and 64x7168x2048 in
/// 12.8 against 14.0; clusters of 3, 4 and 7 ran 1.04-1.6x slower than the atomic sum (not all
/// resident at once: the grid is one CTA a slice).
pub const CLUSTER_SUM_SPLITS: u32 = 2;

/// `cfg` with its slices from [`small_m_splits`] where it is the new family's, at M <=
/// [`SMALL_M`], and leaves its slices to the launch, summed in clusters where they are
/// [`CLUSTER_SUM_SPLITS`] and the ring holds a partial; else `cfg`.
fn with_small_m_splits(p: &Fp8Problem, cfg: Fp8Config, dev: &DeviceInfo) -> Fp8Config {
    if p.m > SMALL_M || cfg.splits > 0 || cfg.stream || !cfg.is_new() || cfg.max_splits() == 1 {
        return cfg;
    }
    let s = small_m_splits(p, &cfg, dev);
    let paired = Fp8Config {
        splits: s,
        reduce: Some(Reduce::Cluster),
        ..cfg
    };
    if s == CLUSTER_SUM_SPLITS && paired.max_splits() >= s && cfg.reduce.is_none() {
        paired
    } else if s == choose_splits(p, &cfg, dev) {
        cfg
    } else {
        Fp8Config { splits: s, ..cfg }
    }
}

/// The splits a launch of `cfg` runs with: its own, at most the K blocks, or the default rule's
/// (1 with stream-K, whose whole tiles are not split).
pub fn splits_for(p: &Fp8Problem, cfg: &Fp8Config, dev: &DeviceInfo) -> u32 {
    let kblocks = (p.k as u64).div_ceil(BK as u64) as u32;
    match cfg.splits {
        _ if cfg.stream => 1,
        0 => choose_splits(p, cfg, dev),
        s => s.min(kblocks).max(1),
    }
}

/// Stream-K's layout (`Fp8Args.sk_from`, `sk_w`) of `ctiles` cluster tiles of `kblocks` K blocks
/// each over `clusters` resident clusters: the whole waves run tile by tile, and the tiles past
/// them (all of them where there are fewer tiles than clusters) are laid end to end by K block
/// and cut into one run per cluster, so every cluster computes the same number of K blocks
/// (+-1). `None` where the tiles fill whole waves (nothing to share), or the shared K blocks are
/// fewer than the clusters (a run would be empty) or too many for the kernel's 32-bit
/// arithmetic (`sk_w` x clusters under 2^31).
pub fn stream_layout(ctiles: u64, kblocks: u64, clusters: u64) -> Option<(u32, u32)> {
    let clusters = clusters.max(1);
    let sk_from = ctiles / clusters * clusters;
    let sk_w = (ctiles - sk_from) * kblocks;
    (sk_w >= clusters && sk_w * clusters < 1 << 31).then_some((sk_from as u32, sk_w as u32))
}

/// The device's DRAM bandwidth in bytes per microsecond (double data rate over the bus), or an
/// H100's where the clock is unknown.
fn dram_bytes_per_us(dev: &DeviceInfo) -> f64 {
    let bw = dev.mem_clock_mhz as f64 * dev.mem_bus_bits as f64 * 2.0 / 8.0;
    if bw > 0.0 {
        bw
    } else {
        2619.0 * 5120.0 * 2.0 / 8.0
    }
}

/// What [`predict_us`] assumes (2026-11-29; the old family's figures fitted to its H100 runs of
/// 2026-11-26/28, the new family's not yet measured): a copy moves 85 % of the DRAM's peak (H200
/// 4.2 of 4.9 TB/s, H100 2.99 of 3.35); one SM's ring keeps all but two stages in flight, each
/// taking 1.5 us to land from DRAM or 0.7 us from the L2 (weighted by the share of the fetched
/// bytes that are the problem's own, read once), and takes in at most 100 GB/s (the tensor-scale
/// kernel took 32 KB a K block at 86 GB/s an SM at 4096x7168x16384); the promoted mainloop with the scales in shared memory runs at 72 % of
/// the tensor cores' 8192 FLOP per SM-cycle (the tensor-scale kernel reached 1,410 TFLOPS on an
/// H100), unpromoted at 75 %; the old family's block-scaled K block takes at least 0.47 us, the
/// latency of its scale loads (0.46 us a block at 64x2112x7168 unsplit, 0.52 at
/// 4096x7168x16384); a launch costs 3 us (the timed launch, the first loads' DRAM latency), a
/// tile's register epilogue 0.3 us plus its C at 20 GB/s an SM (4096x32768x512, 4 K blocks a
/// tile, took 3.7 us a tile, 2.1 of them its K blocks); a split slice's atomic adds move at 100 GB/s an SM and 2 TB/s in all
/// plus 1 us of round trips (fence, counter, the sum's read), the slot reduction 2 us plus 1 us
/// per slice added (one L2 round trip each, under load), the cluster's sum 1 us (two cluster
/// barriers and the partials over the SM-to-SM network; not yet measured).
mod model {
    pub const COPY_EFFICIENCY: f64 = 0.85;
    pub const DRAM_LATENCY_US: f64 = 1.5;
    pub const L2_LATENCY_US: f64 = 0.7;
    pub const SM_BYTES_PER_US: f64 = 100e3;
    pub const FLOP_PER_SM_CYCLE: f64 = 8192.0;
    pub const OLD_BLOCK_SCALE_US: f64 = 0.47;
    pub const LAUNCH_US: f64 = 3.0;
    pub const EPILOGUE_US: f64 = 0.3;
    pub const EPILOGUE_BYTES_PER_US: f64 = 20e3;
    pub const RED_SM_BYTES_PER_US: f64 = 100e3;
    pub const RED_BYTES_PER_US: f64 = 2e6;
    pub const ATOMIC_TAIL_US: f64 = 1.0;
    pub const SLOT_TAIL_US: f64 = 2.0;
    pub const SLOT_TAIL_PER_SLICE_US: f64 = 1.0;
    pub const CLUSTER_TAIL_US: f64 = 1.0;
}

/// The fraction of the tensor cores' rate [`predict_us`] assumes for `cfg`'s mainloop.
fn mainloop_efficiency(cfg: &Fp8Config, promote: bool) -> f64 {
    match (promote, cfg.pipe, cfg.sscale) {
        (false, _, _) => 0.75,
        (true, true, false) => 0.66,
        (true, false, false) => 0.55,
        (true, _, true) => 0.72,
    }
}

/// Predicted microseconds of `p` with `cfg` in `splits` slices on `dev` ([`model`] says what
/// is assumed): the larger of the DRAM time of every byte the problem moves once (A, B, their
/// scales, C), the L2's time for the split slices' atomic adds, and the busiest SM's time (its
/// units' K blocks, each the longest of its wgmmas, its fetch and the old family's scale loads,
/// then their reduction and epilogues), plus the slot reduction's tail and the launch.
pub fn predict_us(p: &Fp8Problem, cfg: &Fp8Config, splits: u32, dev: &DeviceInfo) -> f64 {
    let sms = dev.sm_count.max(1) as u64;
    let s = splits.max(1) as u64;
    let units = tiles(p, cfg) * s;
    let per_cta = units.div_ceil(units.min(sms).max(1)) as f64;
    let kblocks = (p.k as u64).div_ceil(BK as u64);
    let k_unit = kblocks.div_ceil(s) as f64;
    let bytes = problem_bytes(p);
    let t_dram = bytes / (model::COPY_EFFICIENCY * dram_bytes_per_us(dev));
    let flop_block = 2.0 * cfg.bm as f64 * cfg.bn as f64 * BK as f64;
    let sm_flop_per_us = dev.sm_clock_mhz.max(1) as f64 * model::FLOP_PER_SM_CYCLE;
    let t_mma = flop_block / (sm_flop_per_us * mainloop_efficiency(cfg, p.promote));
    // Little's law on the ring: stages - 2 in flight (two are the consumers'), each landing
    // after the latency of where its bytes come from.
    // a pair's CTA fetches half of the shared tile itself (the other half arrives by its peer's
    // multicast)
    let stage = ((cfg.a_box_rows(p.m) + cfg.b_box_rows()) * BK) as f64;
    let fetched = units as f64 * k_unit * stage;
    let from_dram = (bytes / fetched.max(1.0)).min(1.0);
    let latency =
        model::L2_LATENCY_US + (model::DRAM_LATENCY_US - model::L2_LATENCY_US) * from_dram;
    let t_fetch = (latency / (cfg.stages().max(3) - 2) as f64).max(stage / model::SM_BYTES_PER_US);
    let t_scales = if p.scale == ScaleMode::Block && !cfg.sscale {
        model::OLD_BLOCK_SCALE_US
    } else {
        0.0
    };
    let tile_bytes = 4.0 * (cfg.bm * cfg.bn) as f64;
    let (t_unit_reduce, t_red, tail) = match (s, cfg.reduction()) {
        (1, _) => (0.0, 0.0, 0.0),
        (_, Reduce::Atomic) => (
            tile_bytes / model::RED_SM_BYTES_PER_US,
            units as f64 * tile_bytes / model::RED_BYTES_PER_US,
            model::ATOMIC_TAIL_US,
        ),
        (_, Reduce::Slots) => (
            tile_bytes / model::RED_SM_BYTES_PER_US,
            0.0,
            model::SLOT_TAIL_US + model::SLOT_TAIL_PER_SLICE_US * (s - 1) as f64,
        ),
        (_, Reduce::Cluster) => (0.0, 0.0, model::CLUSTER_TAIL_US),
    };
    let t_block = t_mma.max(t_fetch).max(t_scales);
    let c_tile = (p.m.min(cfg.bm as usize) * cfg.bn as usize * p.out.size()) as f64;
    let t_epilogue = model::EPILOGUE_US + c_tile / model::EPILOGUE_BYTES_PER_US;
    let t_sm = per_cta * (k_unit * t_block + t_unit_reduce + t_epilogue);
    t_dram.max(t_red).max(t_sm) + tail + model::LAUNCH_US
}

/// One (config, splits) the cost model weighed.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Fp8Ranked {
    pub config: Fp8Config,
    /// [`predict_us`] with the idle-SM nudge, to 0.1 us.
    pub us: f64,
}

/// Every compiled config that fits `dev`, each with its best slice count (1, or up to its
/// reduction's most with two K blocks or more a slice), ranked by [`predict_us`] with a nudge
/// towards filling the SMs (10 % for a wave of idle SMs: the per-SM rates are guesses, and a
/// config that needs fewer SMs to reach the DRAM's rate is the one they would hurt; a cluster's
/// tiles past M or N count as idle), each config
/// with the fewest slices within 2 % of its best: the fastest first, then the fewer tile rows
/// past M, the fewer slices, the new family, the wider.
pub fn ranked(p: &Fp8Problem, dev: &DeviceInfo) -> Vec<Fp8Ranked> {
    let kblocks = (p.k as u64).div_ceil(BK as u64) as u32;
    let sms = dev.sm_count.max(1) as u64;
    let score = |c: &Fp8Config, s: u32| {
        // a cluster's tiles past M or N fill no SM with work: they count as idle
        let real = (p.m as u64).div_ceil(c.bm as u64) * (p.n as u64).div_ceil(c.bn as u64);
        let units = tiles(p, c) * s as u64;
        let idle = (units.div_ceil(sms) * sms - real * s as u64) as f64 / sms as f64;
        // to 0.1 us: nearer than that is a tie
        (predict_us(p, c, s, dev) * (1.0 + 0.1 * idle) * 10.0).round() / 10.0
    };
    let mut out: Vec<Fp8Ranked> = configs(p.a, p.b, p.scale, p.promote)
        .iter()
        .filter(|c| dev.check_smem(c.smem_bytes()).is_ok())
        .map(|&c| {
            let most = c.max_splits().min(kblocks / 2).max(1);
            let scored: Vec<Fp8Ranked> = (1..=most)
                .map(|s| Fp8Ranked {
                    config: Fp8Config { splits: s, ..c },
                    us: score(&c, s),
                })
                .collect();
            let best = scored.iter().map(|r| r.us).fold(f64::INFINITY, f64::min);
            // the fewest slices within 2 % of the best: more only where they pay
            *scored
                .iter()
                .find(|r| r.us <= 1.02 * best)
                .expect("at least one slice count")
        })
        .collect();
    // rows of the tiles past M (a 128-row tile at M = 64 leaves one consumer idle)
    let waste = |c: &Fp8Config| (p.m as u64).div_ceil(c.bm as u64) * c.bm as u64 - p.m as u64;
    out.sort_by(|a, b| {
        a.us.total_cmp(&b.us)
            .then(waste(&a.config).cmp(&waste(&b.config)))
            .then(a.config.splits.cmp(&b.config.splits))
            .then(b.config.is_new().cmp(&a.config.is_new()))
            .then(b.config.bn.cmp(&a.config.bn))
    });
    out
}

/// The map `KILN_SSCALE=2` loads the A scales through: fp32 `[ceil(K / 128), M]` (M-major, as
/// the block scales are laid out), boxes of `bm` scales of one K block; `None` where TMA cannot
/// address it (M * 4 bytes not a multiple of 16, an unaligned pointer).
pub fn a_scale_map(sa: u64, m: usize, k: usize, bm: u32) -> Option<Tma2d> {
    let map = Tma2d {
        dtype: TmaDType::F32,
        addr: sa,
        dims: [m as u64, (k as u64).div_ceil(BK as u64)],
        row_stride_bytes: m as u64 * 4,
        box_dims: [bm, 1],
        swizzle: TmaSwizzle::None,
    };
    map.validate().ok().map(|()| map)
}

/// Whether the A scales at `sa` (fp32 `[ceil(K / 128), M]`) can go by one bulk copy a stage
/// (`b`): each tile's run of a K block starts and ends on 16 bytes (M a multiple of 4, `sa`
/// 16-byte aligned), as `cp.async.bulk` needs.
pub fn a_scales_bulk_copyable(sa: u64, m: usize) -> bool {
    m.is_multiple_of(4) && sa.is_multiple_of(16)
}

/// Whether the B scales at `sb` (fp32 `[ceil(N / 128), kblocks]`) can go in 16-byte runs of four
/// K blocks (`q`): every block's row starts on 16 bytes and holds whole runs.
pub fn b_scales_bulk_copyable(sb: u64, kblocks: u64) -> bool {
    kblocks.is_multiple_of(4) && sb.is_multiple_of(16)
}

/// The argument block, laid out as `Fp8Args` in `kernels/gemm/fp8_wgmma.cu`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Fp8Args {
    pub c: u64,
    pub sa: u64,
    pub sb: u64,
    pub m: i32,
    pub n: i32,
    pub k: i32,
    pub ldc: i64,
    pub alpha: f32,
    pub splits: i32,
    pub ws: u64,
    pub counters: u64,
    /// 0: per-slice slots, 1: the atomic sum ([`Reduce`]).
    pub reduce: i32,
    /// Rows of the A box ([`Fp8Config::a_rows`]).
    pub a_rows: i32,
    /// 1 when the launch passes a tensor map of C (the TMA-store epilogue runs), else 0.
    pub tma_c: i32,
    /// 1 when the launch passes a tensor map of the A scales (`KILN_SSCALE=2`), 2 when the
    /// producer copies them in bulk ([`Fp8Config::sa_bulk`]), 3 the B scales too
    /// ([`Fp8Config::sb_bulk`]), else 0 (the copier warp).
    pub tma_sa: i32,
    /// 1: the consumers take turns issuing K blocks ([`Fp8Config::order`]; drained promoted
    /// kernels only), else 0.
    pub order: i32,
    /// Stream-K ([`stream_layout`]; `sk_w` 0: off): the first cluster tile shared out by K
    /// block, and the K blocks of those tiles.
    pub sk_from: i32,
    pub sk_w: u32,
    /// 1: a CTA's last unit staged in the ring ([`Fp8Config::ring_epi`]; unsplit, with a map of
    /// C), else 0.
    pub ring_epi: i32,
    /// Programmatic dependent launch ([`Fp8Pdl::bits`]): bit 0 wait for the grid before, bit 1
    /// B's first stages before that wait; 0 when launched plainly.
    pub pdl: i32,
}

/// The device buffers of one FP8 GEMM: A [M, K] and B [N, K] codes, their scales, C.
pub struct Fp8Operands<'a> {
    pub a: &'a DeviceBuffer,
    pub b: &'a DeviceBuffer,
    pub sa: Scales<'a>,
    pub sb: Scales<'a>,
    pub c: &'a DeviceBuffer,
}

/// Checks everything about a call that can be checked on the host (the problem, the buffers,
/// the scales, the device), so that a bad input is one clear error before any launch.
pub fn check(p: &Fp8Problem, ops: &Fp8Operands, dev: &DeviceInfo) -> Result<()> {
    p.validate()?;
    p.check_buffers(ops.a, ops.b, ops.c)?;
    ops.sa.check("A", p.a_scales(), p.scale.a_granularity())?;
    ops.sb.check("B", p.b_scales(), p.scale.b_granularity())?;
    supports(p, dev).map_err(|reason| Error::Unsupported {
        kernel: NAME.into(),
        reason,
    })
}

/// Refuses a config that is not compiled for `p`, or slices past its reduction's most, naming
/// the configs that are.
pub fn check_config(p: &Fp8Problem, cfg: Fp8Config) -> Result<()> {
    if cfg.order && (cfg.pipe || !p.promote) {
        return Err(Error::invalid(format!(
            "config {cfg} takes turns (o), which only a drained promoted kernel does; drop the o, \
             or use a config without p{}",
            if p.promote {
                ""
            } else {
                " on a promoted problem"
            }
        )));
    }
    if cfg.reduction() == Reduce::Cluster && (cfg.stream || cfg.max_splits() == 1) {
        return Err(Error::invalid(format!(
            "config {cfg} sums its slices in a cluster (c), which takes single-CTA tiles not run \
             in parts (or pairs along N, 128ptne/2c) and no stream-K; drop the c, or use a tile \
             such as 64x128ps/4c"
        )));
    }
    // (the unpromoted 128 x 256 tensor-scale tile, `256mh` / `256md`, counted as two parts so
    // that no rule slices it, runs one accumulator a consumer: its runs sum as any one-part
    // tile's, asked for by name only)
    let one_part =
        cfg.max_splits() > 1 || (!p.promote && p.scale == ScaleMode::Tensor && !cfg.sscale);
    if cfg.stream && (!one_part || cfg.reduction() != Reduce::Atomic) {
        return Err(Error::invalid(format!(
            "config {cfg} asks for stream-K (/k), which sums a tile's runs atomically in a tile \
             not run in parts; drop the w, or the /k{}",
            if cfg.parts() > 1 {
                " (256tmh and 256tmd take no slices; 256tmd/k lost to 256tmd in two rounds, ledger \
                 rows 61 and 82)"
            } else {
                ""
            }
        )));
    }
    if cfg.pingpong && (cfg.stream || cfg.splits > 1 || p.promote || p.scale != ScaleMode::Tensor) {
        return Err(Error::invalid(format!(
            "config {cfg} has its consumers take whole tiles in turn (g), which only unpromoted \
             tensor scales in unsplit tiles do; drop the g, or the /k or /S (192mgh)"
        )));
    }
    if cfg.sb_bulk && (!cfg.tma_scales || cfg.bn == 192) {
        return Err(Error::invalid(format!(
            "config {cfg} copies both scales in bulk (q), which only a config with the A scales \
             by TMA (t) and a width other than 192 does; write b for the A scales alone, or use \
             a config such as 128otqe"
        )));
    }
    if cfg.a_resident
        && (!cfg.sb_bulk
            || !cfg.pipe
            || cfg.ctas() > 1
            || cfg.parts() > 1
            || !cfg.tma_epi
            || cfg.deferred
            || cfg.ring_epi
            || cfg.stream
            || cfg.splits > 1)
    {
        return Err(Error::invalid(format!(
            "config {cfg} keeps A resident (z), the lean short-K form of a pipelined single-CTA \
             tile with both scales by bulk copies and the TMA-store epilogue, one slice; write it \
             as 128ptqze/1"
        )));
    }
    if cfg.whole && (cfg.a_resident || cfg.stream || cfg.splits > 1) {
        return Err(Error::invalid(format!(
            "config {cfg} computes whole tiles only (u): one slice, no stream-K, and not with z \
             (whole tiles already); write it as 64x128psu/1"
        )));
    }
    if cfg.sa_bulk && (!cfg.sscale || p.scale != ScaleMode::Block || cfg.ctas() > 1) {
        return Err(Error::invalid(format!(
            "config {cfg} copies the A scales in bulk (b), which only a block-scaled config with \
             the scales in shared memory (s or t) in single CTAs does; drop the b, or use a \
             config such as 128otbe or 64x256psb"
        )));
    }
    if cfg.ring_epi
        && (!cfg.tma_epi
            || cfg.ctas_m() > 1
            || p.scale != ScaleMode::Block
            || cfg.stream
            || cfg.splits > 1)
    {
        return Err(Error::invalid(format!(
            "config {cfg} stages its last tile in the ring (l), which only an unsplit \
             block-scaled config with the TMA-store epilogue and no pairs along M does; drop the \
             l, or use a config such as 256thl or 128ptel"
        )));
    }
    let w = configs(p.a, p.b, p.scale, p.promote);
    if w.iter().any(|c| c.same_kernel(&cfg)) && cfg.splits <= cfg.max_splits() {
        return Ok(());
    }
    let names: Vec<String> = w.iter().map(|c| c.to_string()).collect();
    Err(Error::invalid(format!(
        "config {cfg} is not compiled for {p}; use one of {} (with at most {MAX_SPLITS} \
         split-K slices through slots, {MAX_ATOMIC_SPLITS} atomically, {MAX_CLUSTER_SPLITS} in a \
         cluster as its ring holds ({CLUSTER_SUM_SPLITS} for pairs along N: 128ptne/2c), none for \
         the tiles whose consumers run in parts: 256tmh, 256tmd, 256mh, 256md)",
        names.join(", ")
    )))
}

/// C = alpha * dequant(A) · dequant(B)ᵀ on the context's stream, with the config the
/// context's rule picks ([`choose_by`]; `KILN_FP8_RULE`). With host scales the call waits for
/// the kernel (their device copies are freed when it returns); with device scales it returns
/// once the kernel is enqueued.
pub fn gemm(ctx: &Context, p: &Fp8Problem, ops: &Fp8Operands) -> Result<()> {
    let cfg = choose_by(p, &ctx.info, ctx.overrides.fp8.rule);
    gemm_with(ctx, p, ops, cfg)
}

/// [`gemm`] with an explicit config (one of [`configs`]).
pub fn gemm_with(ctx: &Context, p: &Fp8Problem, ops: &Fp8Operands, cfg: Fp8Config) -> Result<()> {
    let pdl = ctx.overrides.fp8.pdl.unwrap_or_else(|| {
        let cluster_sum = cfg.reduction() == Reduce::Cluster && splits_for(p, &cfg, &ctx.info) > 1;
        Fp8Pdl::default_for(cluster_sum)
    });
    gemm_launch(ctx, p, ops, cfg, pdl)
}

/// [`gemm_with`] launched as `pdl` says after the kernel before it on the stream (`gemm_with`:
/// as `KILN_FP8_PDL` says, by default [`Fp8Pdl::default_for`]: a programmatic dependent unless
/// the launch sums its slices in a cluster). [`Fp8Pdl::WeightsEarly`] reads B before the
/// kernel before has finished: only for a B no earlier work on the stream writes.
pub fn gemm_launch(
    ctx: &Context,
    p: &Fp8Problem,
    ops: &Fp8Operands,
    cfg: Fp8Config,
    pdl: Fp8Pdl,
) -> Result<()> {
    check(p, ops, &ctx.info)?;
    check_config(p, cfg)?;
    // Host scales go to the device first.
    let upload = |s: &Scales| -> Result<Option<DeviceBuffer>> {
        match s {
            Scales::Host(v) => DeviceBuffer::from_host(v).map(Some),
            Scales::Device(_) => Ok(None),
        }
    };
    let (ha, hb) = (upload(&ops.sa)?, upload(&ops.sb)?);
    let ptr = |s: &Scales, h: &Option<DeviceBuffer>| match (s, h) {
        (_, Some(b)) => b.ptr(),
        (Scales::Device(b), None) => b.ptr(),
        (Scales::Host(_), None) => 0,
    };
    let (bm, bn) = (cfg.bm, cfg.bn);
    let operand = |addr: u64, rows: usize, ld: usize, box_rows: u32| Fp8Operand {
        addr,
        rows: rows as u64,
        k: p.k as u64,
        ld: ld as u64,
        box_rows,
    };
    let a_rows = cfg.a_rows(p.m);
    // clusters: each CTA loads its part of a shared A or B tile and multicasts it
    // (KILN_TMA_PROMOTION times another L2 promotion of the operands: ncu at b78ecb6 had
    // 128ptme's L2 at 72 % of its throughput and 78 % hits against cuBLASLt's 62 % and 72 %)
    let promotion = ctx.overrides.tma.promotion;
    let mut map_a = operand(ops.a.ptr(), p.m, p.lda, cfg.a_box_rows(p.m)).encode_with(promotion)?;
    let mut map_b = operand(ops.b.ptr(), p.n, p.ldb, cfg.b_box_rows()).encode_with(promotion)?;
    let reduce = cfg.reduction();
    let mut args = Fp8Args {
        c: ops.c.ptr(),
        sa: ptr(&ops.sa, &ha),
        sb: ptr(&ops.sb, &hb),
        m: p.m as i32,
        n: p.n as i32,
        k: p.k as i32,
        ldc: p.ldc as i64,
        alpha: p.alpha,
        splits: 1,
        ws: 0,
        counters: 0,
        reduce: match reduce {
            Reduce::Slots => 0,
            Reduce::Atomic => 1,
            Reduce::Cluster => 2,
        },
        a_rows: a_rows as i32,
        tma_c: 0,
        tma_sa: 0,
        order: cfg.order as i32,
        sk_from: 0,
        sk_w: 0,
        ring_epi: 0,
        pdl: pdl.bits(),
    };
    // `z` where it fits (its scales bulk-copyable too), else the same config without it
    let lean = cfg.lean_fits(p, splits_for(p, &cfg, &ctx.info) as u64)
        && a_scales_bulk_copyable(args.sa, p.m)
        && b_scales_bulk_copyable(args.sb, LEAN_KBLOCKS as u64)
        && crate::ops::gemm::wgmma_tma_ws::c_store_map(p.m, p.n, p.ldc, p.out, ops.c.ptr())
            .is_some();
    let cfg = match lean || !cfg.a_resident {
        true => cfg,
        false => cfg.without_lean(),
    };
    // The TMA-store epilogue's map of C; without one (a C that TMA cannot address) the kernel
    // stores from registers, and every kernel takes a third map, then a stand-in.
    let mut map_c = match cfg.tma_epi {
        true => crate::ops::gemm::wgmma_tma_ws::c_store_map(p.m, p.n, p.ldc, p.out, ops.c.ptr()),
        false => None,
    }
    .map(|m| m.encode())
    .transpose()?;
    args.tma_c = map_c.is_some() as i32;
    // KILN_SSCALE=2's map of the A scales, [K/128, M]: each K block's row of M scales, boxes of
    // the tile's rows; none (the copier warp copies them) where M * 4 bytes is no multiple of 16.
    // `b`: no map, one bulk copy of the same run of scales (the same alignment needs)
    let bulk_sa = cfg.sa_bulk && cfg.ctas() == 1 && a_scales_bulk_copyable(args.sa, p.m);
    let mut map_sa = match cfg.tma_scales && p.scale == ScaleMode::Block && !bulk_sa {
        true => a_scale_map(args.sa, p.m, p.k, cfg.bm),
        false => None,
    }
    .map(|m| m.encode())
    .transpose()?;
    // `q`: the B scales too, each block's run of four K blocks' scales 16-byte aligned
    let bulk_sb = bulk_sa
        && cfg.sb_bulk
        && cfg.tma_scales
        && b_scales_bulk_copyable(args.sb, (p.k as u64).div_ceil(BK as u64));
    args.tma_sa = match (bulk_sa, bulk_sb) {
        (true, true) => 3,
        (true, false) => 2,
        _ => map_sa.is_some() as i32,
    };
    let t = tiles(p, &cfg);
    let splits = splits_for(p, &cfg, &ctx.info) as u64;
    if t * splits > i32::MAX as u64 {
        return Err(Error::invalid(format!(
            "{p} has {t} tiles of {bm}x{bn}, over 2^31 - 1"
        )));
    }
    // (KILN_FP8_STAGES: the cluster sum writes the peers' partials into the ring the config
    // sized, which a shorter ring no longer spans)
    if ctx.overrides.fp8.stages.is_some() && cfg.reduction() == Reduce::Cluster && splits > 1 {
        return Err(Error::invalid(format!(
            "KILN_FP8_STAGES does not apply to {cfg}: its slices are summed in the ring"
        )));
    }
    let f = ctx.function(&spec_ordered(&ctx.arch(), p, cfg, &ctx.overrides.fp8))?;
    // one cluster per SM pair that can hold one (GPC boundaries may leave SMs unpaired)
    let ctas = cfg.ctas();
    let slots = ctx.max_active_clusters(&f, ctas, cfg.threads(), cfg.smem_bytes()) as u64;
    let ctiles = t / ctas as u64;
    let kblocks = (p.k as u64).div_ceil(BK as u64);
    // stream-K: every resident cluster, the tiles past the whole waves shared out by K block
    let stream = cfg
        .stream
        .then(|| stream_layout(ctiles, kblocks, slots))
        .flatten();
    if let Some((sk_from, sk_w)) = stream {
        (args.sk_from, args.sk_w) = (sk_from as i32, sk_w);
    }
    // `l`: unsplit launches that store C by TMA (check_config refuses it with slices asked for;
    // the launch's own choice of slices leaves it off)
    args.ring_epi = (cfg.ring_epi && map_c.is_some() && splits == 1 && stream.is_none()) as i32;
    // a tile's slices in one cluster: every unit a CTA (pairs along N: a pair) of its own (no
    // workspace), the cluster the slices' CTAs
    let cluster_sum = splits > 1 && reduce == Reduce::Cluster;
    if cluster_sum {
        args.splits = splits as i32;
    } else if splits > 1 || stream.is_some() {
        let tile_bytes = (bm as u64) * bn as u64 * 4;
        args.splits = splits as i32;
        args.ws = match reduce {
            Reduce::Slots => ctx
                .scratch
                .fp8_split
                .at_least(ctx, (t * splits * tile_bytes) as usize)?,
            // zeroed when allocated; each launch leaves it at zero
            Reduce::Atomic | Reduce::Cluster => ctx
                .scratch
                .fp8_split_sum
                .at_least(ctx, (t * tile_bytes) as usize)?,
        };
        args.counters = ctx
            .scratch
            .fp8_split_counters
            .at_least(ctx, (t * 4) as usize)?;
    }
    let (mut stand_in, mut stand_in2) = (map_a, map_a);
    let c_param = match map_c.as_mut() {
        Some(m) => m.as_param(),
        None => stand_in.as_param(),
    };
    let sa_param = match map_sa.as_mut() {
        Some(m) => m.as_param(),
        None => stand_in2.as_param(),
    };
    let grid = match stream {
        Some(_) => slots.max(1) as u32 * ctas,
        None if cluster_sum => (ctiles * splits) as u32 * ctas,
        None => (ctiles * splits).min(slots).max(1) as u32 * ctas,
    };
    let threads = cfg.threads();
    let cfg = LaunchConfig {
        smem_bytes: cfg.smem_bytes(),
        cluster: match cluster_sum {
            true => Some((splits as u32 * ctas, 1, 1)),
            false => (ctas > 1).then_some((ctas, 1, 1)),
        },
        ..LaunchConfig::simple((grid, 1, 1), threads)
    };
    // (as a programmatic dependent the kernel waits in griddepcontrol.wait before any global
    // read but B's first stages, and those only under Fp8Pdl::WeightsEarly's promise)
    let params = &mut [
        map_a.as_param(),
        map_b.as_param(),
        c_param,
        sa_param,
        &mut args as *mut Fp8Args as *mut c_void,
    ];
    // SAFETY: the kernel takes (TmaMap, TmaMap, TmaMap, TmaMap, Fp8Args): four 128-byte maps and
    // the argument block, in that order. The maps address A, B, C and the A scales (C's and the
    // scales' only where `tma_c` and `tma_sa` say so; else copies of A's that the kernel never
    // reads) and the arguments C and the scales,
    // all of which `check` sized against the problem; the caller keeps A, B, C and device scales alive
    // until the stream is done, and the host scales' copies live until the synchronisation
    // below.
    unsafe {
        match pdl.dependent() {
            true => f.launch_dependent(ctx.stream, &cfg, params)?,
            false => f.launch(ctx.stream, &cfg, params)?,
        }
    }
    if ha.is_some() || hb.is_some() {
        ctx.synchronize()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::harness::check::judge;
    use crate::jit::Jit;

    /// The large rule's config at 128x7168x16384: two slices summed in pairs, of `128pte` or,
    /// where the turns are tried at long K (ledger row 41), `128ote`.
    const LONG_128: &str = if SMALL_ROWS_TURNS_LONG {
        "128ote/2c"
    } else if SMALL_ROWS_PAIRS_N {
        "128ptne/2c"
    } else {
        "128pte/2c"
    };

    #[test]
    fn args_match_the_device_layout() {
        // three pointers, three ints, pad to 8, an i64, a float, an int, two pointers, two ints
        assert_eq!(std::mem::offset_of!(Fp8Args, m), 24);
        assert_eq!(std::mem::offset_of!(Fp8Args, ldc), 40);
        assert_eq!(std::mem::offset_of!(Fp8Args, alpha), 48);
        assert_eq!(std::mem::offset_of!(Fp8Args, splits), 52);
        assert_eq!(std::mem::offset_of!(Fp8Args, ws), 56);
        assert_eq!(std::mem::offset_of!(Fp8Args, reduce), 72);
        assert_eq!(std::mem::offset_of!(Fp8Args, a_rows), 76);
        assert_eq!(std::mem::offset_of!(Fp8Args, tma_c), 80);
        assert_eq!(std::mem::offset_of!(Fp8Args, tma_sa), 84);
        assert_eq!(std::mem::offset_of!(Fp8Args, order), 88);
        assert_eq!(std::mem::offset_of!(Fp8Args, sk_from), 92);
        assert_eq!(std::mem::offset_of!(Fp8Args, sk_w), 96);
        assert_eq!(std::mem::offset_of!(Fp8Args, ring_epi), 100);
        assert_eq!(std::mem::offset_of!(Fp8Args, pdl), 104);
        assert_eq!(std::mem::size_of::<Fp8Args>(), 112);
    }

    #[test]
    fn stages_fill_the_shared_memory_of_an_h100() {
        let all: Vec<Fp8Config> = ScaleMode::ALL
            .into_iter()
            .flat_map(|s| {
                [true, false]
                    .into_iter()
                    .flat_map(move |pr| configs(Fp8Format::E4m3, Fp8Format::E4m3, s, pr).iter())
            })
            .copied()
            .collect();
        for c in all {
            assert_eq!(c.stage_bytes() % 1024, 0, "{c}");
            assert!(c.smem_bytes() <= SMEM_BUDGET, "{c}");
            let per_stage = c.stage_bytes() + 16 + c.slot_bytes();
            assert!(
                c.smem_bytes() + per_stage > SMEM_BUDGET || c.stages() >= 8,
                "{c}: room for another stage"
            );
        }
        let st = |s: &str| s.parse::<Fp8Config>().unwrap().stages();
        // the configs of a8381a5 keep their rings
        assert_eq!((st("128p"), st("160"), st("256")), (7, 6, 4));
        // the scale slots cost the 128-wide ring its seventh stage
        assert_eq!((st("128ps"), st("128s"), st("160s")), (6, 6, 6));
        // the TMA-store epilogue's 32 KB of staging costs one more (the 112-wide keeps six)
        assert_eq!(
            (
                st("112se"),
                st("128se"),
                st("160se"),
                st("176se"),
                st("128te"),
                st("176te"),
                st("128pte"),
                st("128ote")
            ),
            (6, 5, 5, 5, 5, 5, 5, 5)
        );
        // the clusters keep 128pte's ring: their stages hold whole tiles, parts from the peers
        assert_eq!((st("128ptme"), st("128ptne"), st("128ptmne")), (5, 5, 5));
        // one staging buffer a consumer (h): 16 KB of staging, a sixth stage
        let h: Fp8Config = "128ptmh".parse().unwrap();
        assert_eq!((h.stages(), h.c_bytes(), h.tmae_define()), (6, 16_384, 2));
        assert_eq!(h.smem_bytes(), 1024 + 6 * 33_424 + 16_384);
        assert!(!h.same_kernel(&"128ptme".parse().unwrap()) && h.tma_epi && h.is_new());
        // the 128 x 256 tile: 48 KB stages, four beside one staging buffer a consumer (three
        // with two: 3 x 49,808 + 32 KB); no split-K slices
        let w: Fp8Config = "256tmh".parse().unwrap();
        assert_eq!(
            (w.stages(), w.slot_bytes(), w.smem_bytes()),
            (4, 640, 216_640)
        );
        assert_eq!(st("256tme"), 3);
        assert!(
            w.two_halves()
                && w.max_splits() == 1
                && !"256".parse::<Fp8Config>().unwrap().two_halves()
        );
        // pipelined over parts (ledger row 18): 256 in four of 64 on 256tmh's ring, 176 in two
        // of 88 on five stages of 38 KB; no slices either
        let (wp, np): (Fp8Config, Fp8Config) =
            ("256ptmh".parse().unwrap(), "176ptmh".parse().unwrap());
        assert_eq!((wp.parts(), wp.stages(), wp.smem_bytes()), (4, 4, 216_640));
        assert_eq!(
            (np.parts(), np.stages(), np.smem_bytes()),
            (2, 5, 1024 + 5 * 39_568 + 16_384)
        );
        assert!(
            !wp.two_halves() && !wp.same_kernel(&w) && wp.max_splits() == 1 && np.max_splits() == 1
        );
        // A from registers: 256ptmh's ring and parts, another kernel
        let wr: Fp8Config = "256prtmh".parse().unwrap();
        assert_eq!((wr.parts(), wr.smem_bytes(), wr.a_regs), (4, 216_640, true));
        assert!(!wr.same_kernel(&wp) && wr.same_kernel(&wp.a_from_registers()));
        for one in ["128ptme", "176se", "64x256ps", "256", "128pte"] {
            assert_eq!(one.parse::<Fp8Config>().unwrap().parts(), 1, "{one}");
        }
        assert_eq!("176se".parse::<Fp8Config>().unwrap().smem_bytes(), 231_072);
        // the A scales by TMA: slots of 640 bytes (128-byte aligned destinations)
        let te: Fp8Config = "176te".parse().unwrap();
        assert_eq!((te.slot_bytes(), te.smem_bytes()), (640, 231_632));
        // the 64-row tiles: 24, 32 and 40 KB stages
        assert_eq!((st("64x128ps"), st("64x192ps"), st("64x256ps")), (9, 7, 5));
    }

    #[test]
    fn the_256_wide_tile_takes_no_slices() {
        // its consumers hold 128 + 64 accumulators: no registers left for a split-K sum
        let dev = DeviceInfo::h100_sxm();
        let p = Fp8Problem::new(1, 256, 4096, DType::Bf16, ScaleMode::Block);
        let w: Fp8Config = "256tmh".parse().unwrap();
        assert_eq!((tiles(&p, &w), choose_splits(&p, &w, &dev)), (2, 1));
        assert!(check_config(&p, w).is_ok() && check_config(&p, w.ordered()).is_ok());
        let e = check_config(&p, "256tmh/2".parse().unwrap())
            .unwrap_err()
            .to_string();
        assert!(e.contains("none for the tiles whose"), "{e}");
    }

    /// The kernel's walk of cluster `g` of `clusters` over its work units (`u_first`, `u_next`
    /// and `unit` in fp8_wgmma.cu, in the same 32-bit arithmetic): each unit as (cluster tile,
    /// first K block, end K block, units summed into the tile).
    fn kernel_walk(
        g: u32,
        clusters: u32,
        ctiles: u32,
        kb: u32,
        splits: u32,
        sk: Option<(u32, u32)>,
    ) -> Vec<(u32, u32, u32, u32)> {
        let (sk_from, w) = sk.unwrap_or((ctiles, 0));
        let units = if w > 0 { sk_from.min(ctiles) } else { ctiles } * splits;
        let (lo, hi) = (g * w / clusters, (g + 1) * w / clusters);
        let next = |u: u32| {
            if u < units {
                if u + clusters < units {
                    u + clusters
                } else {
                    units + lo
                }
            } else {
                let x = u - units;
                units + ((x / kb + 1) * kb).min(hi)
            }
        };
        let ranges = |y0: u32| ((y0 + kb) * clusters - 1) / w - ((y0 + 1) * clusters - 1) / w + 1;
        let mut out = Vec::new();
        let mut u = if g < units { g } else { units + lo };
        while u < units + hi {
            out.push(if u < units {
                let sp = u % splits;
                (u / splits, sp * kb / splits, (sp + 1) * kb / splits, splits)
            } else {
                let x = u - units;
                let (tr, kb0) = (x / kb, x % kb);
                (sk_from + tr, kb0, kb.min(kb0 + (hi - x)), ranges(tr * kb))
            });
            u = next(u);
        }
        out
    }

    #[test]
    fn stream_k_gives_every_cluster_the_same_k_blocks_and_every_block_one_unit() {
        // (cluster tiles, K blocks, resident clusters): DeepSeek-V3's M = 128 shapes in 128-row
        // tiles on 132 SMs (fewer tiles than SMs: every tile shared), 4096x2112x7168 in pairs
        // (4 whole waves of 66 pairs, then 8 tiles), runs of one or two K blocks, ragged ones
        let cases = [
            (56, 128, 132),
            (192, 12, 132),
            (256, 4, 132),
            (17, 56, 132),
            (272, 56, 66),
            (85, 4, 66),
            (34, 8, 66),
            (1, 1000, 132),
            (140, 33, 132),
            (7, 19, 131),
        ];
        for (ctiles, kb, clusters) in cases {
            let sk = stream_layout(ctiles as u64, kb as u64, clusters as u64);
            let (sk_from, w) = sk.expect("a layout");
            assert_eq!(sk_from, ctiles / clusters * clusters);
            assert_eq!(w, (ctiles - sk_from) * kb);
            let mut seen = vec![0u32; (ctiles * kb) as usize];
            let mut by_tile: Vec<Vec<u32>> = vec![Vec::new(); ctiles as usize];
            let mut said = vec![0u32; ctiles as usize];
            let mut blocks = Vec::new();
            for g in 0..clusters {
                let mut mine = 0;
                for (t, kb0, kb1, ns) in kernel_walk(g, clusters, ctiles, kb, 1, sk) {
                    assert!(
                        kb0 < kb1 && kb1 <= kb,
                        "{ctiles}/{kb}/{clusters}: {t} {kb0}..{kb1}"
                    );
                    for k in kb0..kb1 {
                        seen[(t * kb + k) as usize] += 1;
                    }
                    mine += kb1 - kb0;
                    by_tile[t as usize].push(g);
                    assert!(said[t as usize] == 0 || said[t as usize] == ns);
                    said[t as usize] = ns;
                }
                blocks.push(mine);
            }
            assert!(seen.iter().all(|&n| n == 1), "{ctiles}/{kb}/{clusters}");
            // the units a tile's counter waits for are the units that add into it
            for (t, gs) in by_tile.iter().enumerate() {
                assert_eq!(
                    gs.len() as u32,
                    said[t],
                    "{ctiles}/{kb}/{clusters}: tile {t}"
                );
            }
            let (lo, hi) = (blocks.iter().min().unwrap(), blocks.iter().max().unwrap());
            assert!(hi - lo <= 1, "{ctiles}/{kb}/{clusters}: {lo}..{hi}");
        }
        // whole waves share nothing; runs shorter than a K block would be empty
        assert_eq!(stream_layout(264, 56, 66), None);
        assert_eq!(stream_layout(5, 2, 132), None);
        // without stream-K the walk is the split-K one: every slice once
        for (ctiles, kb, clusters, splits) in [(17, 56, 132, 7), (300, 3, 132, 1)] {
            let mut seen = vec![0u32; (ctiles * kb) as usize];
            for g in 0..clusters {
                for (t, kb0, kb1, ns) in kernel_walk(g, clusters, ctiles, kb, splits, None) {
                    assert_eq!(ns, splits);
                    (kb0..kb1).for_each(|k| seen[(t * kb + k) as usize] += 1);
                }
            }
            assert!(seen.iter().all(|&n| n == 1));
        }
    }

    #[test]
    fn stream_k_parses_and_is_refused_where_it_cannot_sum() {
        for s in ["128pte/k", "64x128ps/ka", "128ptme/k", "128p/ka"] {
            let c: Fp8Config = s.parse().unwrap();
            assert!(c.stream && c.splits == 0, "{s}");
            assert_eq!(c.to_string(), s);
        }
        let sk: Fp8Config = "128pte/k".parse().unwrap();
        assert!(sk.same_kernel(&"128pte".parse().unwrap()));
        assert_eq!(sk, "128pte".parse::<Fp8Config>().unwrap().streamed());
        let dev = DeviceInfo::h100_sxm();
        let p = Fp8Problem::new(128, 7168, 16384, DType::Bf16, ScaleMode::Block);
        assert_eq!(splits_for(&p, &sk, &dev), 1);
        assert!(check_config(&p, sk).is_ok());
        assert!(check_config(&p, "64x128ps/k".parse().unwrap()).is_ok());
        for bad in ["256tmh/k", "128p/k", "64x128ps/kw"] {
            let e = check_config(&p, bad.parse().unwrap())
                .unwrap_err()
                .to_string();
            assert!(e.contains("stream-K (/k)"), "{bad}: {e}");
        }
        assert!("128pte/k3".parse::<Fp8Config>().is_err());
        // the drained halves' stream-K (`256tmd/k`) lost to `256tmd` in two rounds (ledger rows
        // 61 and 82) and is not compiled
        assert!(check_config(&p, "256tmd/k".parse().unwrap()).is_err());
        let tensor = Fp8Problem::new(8192, 8192, 8192, DType::Bf16, ScaleMode::Tensor);
        assert!(check_config(&tensor, "256md/k".parse().unwrap()).is_err());
    }

    #[test]
    fn the_last_tile_in_the_ring_is_a_run_time_choice_of_unsplit_tma_store_configs() {
        for s in ["256thl", "256tnhl", "128ptel", "128ptnel", "128ptel/1"] {
            let c: Fp8Config = s.parse().unwrap();
            assert!(c.ring_epi && c.tma_epi, "{s}");
            assert_eq!(c.to_string(), s);
            // the same kernel as without the l: no variant of its own
            let plain: Fp8Config = s.replacen('l', "", 1).parse().unwrap();
            assert!(c.same_kernel(&plain) && !plain.ring_epi, "{s}");
        }
        let p = Fp8Problem::new(128, 32768, 512, DType::Bf16, ScaleMode::Block);
        for ok in ["256thl", "128ptel", "128ptel/1"] {
            assert!(check_config(&p, ok.parse().unwrap()).is_ok(), "{ok}");
        }
        for bad in [
            "128pl",
            "64x128psl",
            "128ptel/2",
            "128ptel/k",
            "256tmhl",
            "128ptmel",
        ] {
            let e = check_config(&p, bad.parse().unwrap())
                .unwrap_err()
                .to_string();
            assert!(e.contains("in the ring (l)"), "{bad}: {e}");
        }
        // ledger row 24's `256th` is compiled (one kernel); its pairs along N (`256tnh`) lost
        // and are not; `128ptne` is back for its cluster sum (row 240), `128ptne/2c` its kernel
        let block = configs(Fp8Format::E4m3, Fp8Format::E4m3, ScaleMode::Block, true);
        let compiled = |s: &str| {
            let c: Fp8Config = s.parse().unwrap();
            block.iter().filter(|x| x.same_kernel(&c)).count()
        };
        assert_eq!(
            (
                compiled("256th"),
                compiled("256tnh"),
                compiled("128ptne"),
                compiled("128ptne/2c")
            ),
            (1, 0, 1, 1)
        );
        assert_eq!(SMALL_ROWS_ONE_TILE.to_string(), "256thl/1");
    }

    #[test]
    fn the_large_rule_copies_the_a_scales_in_bulk_below_k_2048_at_m_128() {
        // ledger rows 70 and 90: `b` won two rounds at 128x32768x512 and 128x24576x1536 and
        // lost two with the pipelined tile at K = 16,384, which keeps the map
        let dev = DeviceInfo::h100_sxm();
        let bulk = if SMALL_ROWS_BULK_BOTH { "q" } else { "b" };
        // (the one-tile config's turns where switched on, ledger row 246)
        let o = if SMALL_ROWS_ONE_TILE_TURNS { "o" } else { "" };
        // (and its whole-tile twin where switched on, ledger row 248)
        let u = if SMALL_ROWS_ONE_TILE_WHOLE { "u" } else { "" };
        for (m, n, k, want) in [
            // 4 K blocks: the lean form (`q` in it), ledger row 200
            (128, 32768, 512, SMALL_ROWS_LEAN.to_string()),
            (100, 32768, 512, SMALL_ROWS_LEAN.to_string()),
            (128, 32768, 384, format!("128ot{bulk}e")),
            (128, 24576, 1536, format!("256{o}t{bulk}{u}hl/1")),
            (128, 32768, 1024, format!("256{o}t{bulk}{u}hl/1")),
            (128, 24576, 1920, format!("256{o}t{bulk}{u}hl/1")),
            // 16 K blocks: the map
            (128, 24576, 2048, format!("256{o}thl/1")),
            (128, 7168, 16384, LONG_128.to_string()),
        ] {
            let p = Fp8Problem::new(m, n, k, DType::Bf16, ScaleMode::Block);
            let c = choose_by(&p, &dev, Fp8Rule::Large);
            // (the turns' slices left to the launch: one, at 4 K blocks)
            assert_eq!(c.to_string(), want, "{p}");
            assert!(check_config(&p, c).is_ok(), "{p}: {c}");
            assert_eq!(
                splits_for(&p, &c, &dev),
                if k == 16384 { 2 } else { 1 },
                "{p}"
            );
        }
        // the 64-row tile (M <= 64; but at short K, row 94) and M above 128: no bulk copy
        for (m, n, k) in [(64, 2112, 7168), (64, 7168, 2048), (4096, 32768, 512)] {
            let p = Fp8Problem::new(m, n, k, DType::Bf16, ScaleMode::Block);
            let c = choose_by(&p, &dev, Fp8Rule::Large);
            assert!(!c.sa_bulk && !c.sb_bulk, "{p}: {c}");
        }
        // not block scales: untouched
        let p = Fp8Problem::new(128, 32768, 512, DType::Bf16, ScaleMode::Tensor);
        let c = "128pte/1".parse::<Fp8Config>().unwrap();
        assert_eq!(scales_by_bulk_if_short(&p, c), c);
    }

    #[test]
    fn the_large_rule_takes_the_64_by_128_tile_with_bulk_a_scales_at_m_64_short_k() {
        // ledger row 94: `64x128psb/1` where its tiles fill the SMs and K holds at most 4 blocks
        let dev = DeviceInfo::h100_sxm();
        assert_eq!(SMALL_M_SHORT.to_string(), "64x128psb/1");
        assert_eq!(SMALL_M_SHORT, "64x128psb/1".parse().unwrap());
        for (m, n, k, short) in [
            (64, 32768, 512, true),
            (33, 32768, 384, true),
            (64, 24576, 512, true),
            // 132 tiles of 128 or fewer: the measured rule (slices)
            (64, 7168, 512, false),
            (64, 32768, 640, false),
            (64, 2112, 7168, false),
            (65, 32768, 512, false),
        ] {
            let p = Fp8Problem::new(m, n, k, DType::Bf16, ScaleMode::Block);
            let c = choose_by(&p, &dev, Fp8Rule::Large);
            // the lean form where it fits (ledger row 200), else `64x128psb/1`
            let lean = SMALL_M_SHORT_LEAN.lean_fits(&p, 1);
            assert_eq!(c == SMALL_M_SHORT, short && !lean, "{p}: {c}");
            assert_eq!(c == SMALL_M_SHORT_LEAN, short && lean, "{p}: {c}");
            assert!(check_config(&p, c).is_ok(), "{p}: {c}");
            if short {
                assert_eq!(splits_for(&p, &c, &dev), 1);
            }
        }
        let t = Fp8Problem::new(64, 32768, 512, DType::Bf16, ScaleMode::Tensor);
        assert_ne!(choose_by(&t, &dev, Fp8Rule::Large), SMALL_M_SHORT);
    }

    #[test]
    fn the_pipelined_128_tile_with_one_staging_buffer_lost_and_is_not_compiled() {
        // ledger rows 92 and 110: `128pth/2c` won 1.5 % and then tied `128pte/2c`; the name
        // still parses (the one-buffer kernel of the 256-wide pairs exists), nothing compiles it
        let block = configs(Fp8Format::E4m3, Fp8Format::E4m3, ScaleMode::Block, true);
        let h: Fp8Config = "128pth".parse().unwrap();
        assert_eq!(block.iter().filter(|x| x.same_kernel(&h)).count(), 0);
        assert!(block.iter().all(|x| x.bn != 128 || !x.one_buffer));
    }

    #[test]
    fn the_128_by_192_block_tile_lost_and_is_not_compiled() {
        // ledger rows 40, 70 and 91: `192othl/1` (and `192otbhl/1`) lost to the 128 x 256 tile at
        // 128x24576x1536 in four rounds; the kernel keeps the code (192-wide B-scale picks), the
        // list no variant of it (nor of the large-M pair tile `192tmd`, ledger rows 150 and 230);
        // the 192 x 192 tile of tensor scales is another kernel
        let block = configs(Fp8Format::E4m3, Fp8Format::E4m3, ScaleMode::Block, true);
        let narrow: Fp8Config = "192th".parse().unwrap();
        assert_eq!(block.iter().filter(|x| x.same_kernel(&narrow)).count(), 0);
        assert!(block.iter().all(|x| x.bm != 128 || x.bn != 192));
        let fast = configs(Fp8Format::E4m3, Fp8Format::E4m3, ScaleMode::Tensor, false);
        assert!(fast.iter().any(|x| x.bm == 192 && x.bn == 192));
        // the large rule's one-tile config where it fills the SMs, 256 wide
        let dev = DeviceInfo::h100_sxm();
        let p = Fp8Problem::new(128, 24576, 1536, DType::Bf16, ScaleMode::Block);
        assert!(one_tile_fills(&p, &dev, &SMALL_ROWS_ONE_TILE));
        let one = one_tile_config(SMALL_ROWS_ONE_TILE_TURNS);
        assert_eq!(choose_one_tile(&p, &dev), Some(one));
        // ledger row 246: the turns, a run-time letter on the same kernel, where switched on
        let turns = one_tile_config(true);
        assert_eq!(turns.to_string(), "256othl/1");
        assert!(turns.same_kernel(&SMALL_ROWS_ONE_TILE) && one_tile_fills(&p, &dev, &turns));
        assert_eq!(scales_by_bulk_if_short(&p, turns).to_string(), "256otqhl/1");
        assert_eq!(one_tile_config(false), SMALL_ROWS_ONE_TILE);
        for ok in ["256othl/1", "256thl/1", "256tbhl/1"] {
            let c: Fp8Config = ok.parse().unwrap();
            assert!(check_config(&p, c).is_ok(), "{ok}");
        }
    }

    /// The values `s` gives the define `name`, comma-joined (empty where it is not defined).
    fn define_values(s: &KernelSpec, name: &str) -> String {
        let v: Vec<&str> = s
            .defines
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect();
        v.join(",")
    }

    #[test]
    fn the_tile_order_knob_sets_the_group_define_alone() {
        // KILN_FP8_GROUP_M (ledger row 232): another tile order is another specialisation of
        // the same kernel, and the default's is the compiled variant's
        let p = Fp8Problem::new(6144, 6144, 6144, DType::Bf16, ScaleMode::Tensor);
        let c = Fp8Config::ping_pong(192);
        let group = |s: &KernelSpec| define_values(s, "KILN_GROUP_M");
        let knobs = |group_m, stages| Fp8Overrides {
            group_m,
            stages,
            ..Fp8Overrides::NONE
        };
        assert_eq!(
            spec_ordered("sm_90a", &p, c, &Fp8Overrides::NONE),
            spec("sm_90a", &p, c)
        );
        assert_eq!(
            spec_ordered("sm_90a", &p, c, &knobs(Some(GROUP_M), Some(12))),
            spec("sm_90a", &p, c)
        );
        let g24 = spec_ordered("sm_90a", &p, c, &knobs(Some(24), None));
        assert_eq!(group(&g24), "24");
        assert_eq!(g24.defines.len(), spec("sm_90a", &p, c).defines.len());
    }

    #[test]
    fn the_stages_knob_changes_only_its_define() {
        // KILN_FP8_STAGES (ledger row 241): the ring shortened, never lengthened past the
        // config's shared memory; every compiled variant's spec as before when unset
        let p = Fp8Problem::new(128, 24576, 1536, DType::Bf16, ScaleMode::Block);
        let c = SMALL_ROWS_ONE_TILE;
        let stages_of = |s: &KernelSpec| define_values(s, "KILN_STAGES");
        let o = |stages| Fp8Overrides {
            stages,
            ..Fp8Overrides::NONE
        };
        assert_eq!(c.stages(), 4);
        let s = spec_ordered("sm_90a", &p, c, &o(Some(3)));
        assert_eq!(stages_of(&s), "3");
        assert_eq!(s.defines.len(), spec("sm_90a", &p, c).defines.len());
        let s = spec_ordered("sm_90a", &p, c, &o(Some(9)));
        assert_eq!(stages_of(&s), "4");
        assert_eq!(s, spec("sm_90a", &p, c));
    }

    #[test]
    fn the_stages_knob_compiles_without_spills() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let jit = Jit::default();
        let dev = DeviceInfo::h100_sxm();
        let p = Fp8Problem::new(128, 24576, 1536, DType::Bf16, ScaleMode::Block);
        let o = Fp8Overrides {
            stages: Some(3),
            ..Fp8Overrides::NONE
        };
        for c in [SMALL_ROWS_ONE_TILE, "128pte".parse().unwrap()] {
            let s = spec_ordered("sm_90a", &p, c, &o);
            let compiled = jit.compile(&s).expect("compiles");
            assert!(
                judge(&s, &compiled.resources, &dev).is_empty(),
                "{}",
                s.label()
            );
        }
    }

    #[test]
    fn the_a_scales_by_bulk_copy_are_a_run_time_letter_on_the_slot_kernels() {
        // ledger row 70: `b` runs the `s` or `t` kernel, the A scales of a stage copied by the
        // producer in one bulk copy instead of the copier warp or the map
        let block = configs(Fp8Format::E4m3, Fp8Format::E4m3, ScaleMode::Block, true);
        for (name, plain) in [
            ("128otbe/1", "128ote/1"),
            ("256tbhl/1", "256thl/1"),
            ("128ptbe/2c", "128pte/2c"),
            ("64x256psb/1", "64x256ps/1"),
        ] {
            let c: Fp8Config = name.parse().unwrap();
            let d: Fp8Config = plain.parse().unwrap();
            assert_eq!(c.to_string(), name);
            assert!(c.sa_bulk && !d.sa_bulk, "{name}");
            assert_eq!(c, Fp8Config { sa_bulk: true, ..d });
            assert_eq!(c, d.scales_by_bulk_copy());
            assert!(c.same_kernel(&d), "{name}");
            assert!(block.iter().any(|x| x.same_kernel(&c)), "{name}");
        }
        let p = Fp8Problem::new(128, 32768, 512, DType::Bf16, ScaleMode::Block);
        for ok in ["128otbe/1", "128ptbe/1", "64x256psb/1", "256tbhl/1"] {
            let c: Fp8Config = ok.parse().unwrap();
            assert!(
                check_config(&p, c).is_ok(),
                "{ok}: {:?}",
                check_config(&p, c)
            );
        }
        // no slot, no bulk copy: the old family, and tensor scales
        for bad in ["128pb", "128b", "128ptbme"] {
            let e = check_config(&p, bad.parse().unwrap()).unwrap_err();
            assert!(e.to_string().contains("(b)"), "{bad}: {e}");
        }
        let t = Fp8Problem::new(128, 256, 256, DType::Bf16, ScaleMode::Tensor);
        assert!(check_config(&t, "128pb".parse().unwrap()).is_err());
        // where the copy can run: M a multiple of 4, the scales 16-byte aligned
        assert!(a_scales_bulk_copyable(0x1000, 128));
        assert!(a_scales_bulk_copyable(0x1000, 100));
        assert!(!a_scales_bulk_copyable(0x1000, 126));
        assert!(!a_scales_bulk_copyable(0x1008, 128));
        // `q`: both scales by bulk copies, on the `t` kernels only (the slot's room past the A
        // scales), where K's blocks come in whole runs of four
        for (name, plain) in [("128otqe/1", "128ote/1"), ("256tqhl/1", "256thl/1")] {
            let c: Fp8Config = name.parse().unwrap();
            let d: Fp8Config = plain.parse().unwrap();
            assert_eq!(c.to_string(), name);
            assert_eq!(c, d.scales_all_by_bulk_copy());
            assert!(c.same_kernel(&d) && c.sa_bulk && c.sb_bulk, "{name}");
            assert!(
                check_config(&p, c).is_ok(),
                "{name}: {:?}",
                check_config(&p, c)
            );
        }
        for bad in ["64x256psq/1", "192tqhl/1"] {
            let e = check_config(&p, bad.parse().unwrap()).unwrap_err();
            assert!(e.to_string().contains("(q)"), "{bad}: {e}");
        }
        assert!(b_scales_bulk_copyable(0x1000, 4));
        assert!(b_scales_bulk_copyable(0x1000, 128));
        assert!(!b_scales_bulk_copyable(0x1000, 12 + 1));
        assert!(!b_scales_bulk_copyable(0x1004, 4));
        // `256pth` (ledger row 51) lost two rounds and is not compiled since row 70
        assert!(!block
            .iter()
            .any(|x| x.same_kernel(&"256pth".parse().unwrap())));
    }

    #[test]
    fn the_192_row_tile_runs_three_consumers_unsliced_in_four_stages() {
        let c: Fp8Config = "192x192md".parse().unwrap();
        assert_eq!(c, Fp8Config::three_consumers(192));
        assert_eq!((c.consumers(), c.threads(), c.stages()), (3, 512, 4));
        // one 8 KB staging buffer a consumer beside four stages of 48 KB
        assert_eq!(c.c_bytes(), 3 * 8192);
        assert!(c.smem_bytes() <= SMEM_BUDGET);
        assert_eq!(c.max_splits(), 1);
        let p = Fp8Problem {
            promote: false,
            ..Fp8Problem::new(6144, 6144, 6144, DType::Bf16, ScaleMode::Tensor)
        };
        assert!(check_config(&p, c).is_ok());
        assert!(check_config(&p, Fp8Config { splits: 2, ..c }).is_err());
        // compiled for unpromoted tensor scales only, and no rule but `bytes` reaches it
        let promoted = Fp8Problem::new(6144, 6144, 6144, DType::Bf16, ScaleMode::Tensor);
        assert!(check_config(&promoted, c).is_err());
        let dev = h200();
        for rule in [Fp8Rule::Measured, Fp8Rule::Waves, Fp8Rule::Fill] {
            assert_ne!(choose_by(&p, &dev, rule).bm, 192, "{rule:?}");
        }
        // the large rule where it fills the SMs as the 128 x 256 tile does in fewer tiles, once
        // LARGE_THREE_CONSUMERS is on
        let cube = |n: usize| Fp8Problem { m: n, n, k: n, ..p };
        let fills: Vec<bool> = [4096, 6144, 8192, 12288]
            .iter()
            .map(|&n| three_consumers_fill(&cube(n), &dev))
            .collect();
        assert_eq!(fills, [false, true, false, false]);
        assert!(!three_consumers_fill(&promoted, &dev));
        // (ahead of it, the ping-pong pair tile where LARGE_PING_PONG takes it: row 182)
        let ping_pong_or = |q: &Fp8Problem, other: Fp8Config| {
            if LARGE_PING_PONG && ping_pong_fills(q, &dev) {
                Fp8Config::ping_pong(192)
            } else {
                other
            }
        };
        let expected = match LARGE_THREE_CONSUMERS {
            true => c,
            false => large_wide_tensor(false),
        };
        assert_eq!(
            choose_by(&p, &dev, Fp8Rule::Large),
            ping_pong_or(&p, expected)
        );
        assert_eq!(
            choose_by(&cube(8192), &dev, Fp8Rule::Large),
            ping_pong_or(&cube(8192), large_wide_tensor(false))
        );
        // the same work a CTA as the 128 x 256 pairs at 6144^3 (8 tiles against 9, both 97 % of
        // the last wave), 5.5 % more at 8192^3 (15 of 192 x 192 against 16 of 128 x 256)
        let busiest = |c: &Fp8Config, n: usize| {
            let q = Fp8Problem { m: n, n, k: n, ..p };
            let pairs = (dev.sm_count / 2) as u64;
            (tiles(&q, c) / 2).div_ceil(pairs) * (c.bm * c.bn) as u64
        };
        let wide = large_wide_tensor(false);
        assert_eq!(busiest(&c, 6144), busiest(&wide, 6144));
        assert!(busiest(&c, 8192) > busiest(&wide, 8192));
    }

    #[test]
    fn configs_parse_and_print_back() {
        for s in [
            "192x192md",
            "128",
            "128p",
            "160",
            "128ps",
            "120ps",
            "160s",
            "64x128ps",
            "64x256ps/7",
            "64x192ps/12a",
            "128p/3w",
            "128p/4a",
            "160sm",
            "128psm/2a",
            "176se",
            "128se/2a",
            "128te",
            "176te/2a",
            "128pte",
            "128ote/2a",
            "128os",
            "128ptme",
            "128ptne",
            "128ptmne/4a",
            "160sn",
            "128ptmh",
            "128th/2a",
            "256tmh",
            "256otmh",
            "256ptmh",
            "256prtmh",
            "176ptmh",
            "256md",
        ] {
            let c: Fp8Config = s.parse().unwrap();
            assert_eq!(c.to_string(), s);
        }
        let c: Fp8Config = "64x128ps/7".parse().unwrap();
        assert_eq!(
            (c.bm, c.bn, c.pipe, c.sscale, c.splits),
            (64, 128, true, true, 7)
        );
        assert_eq!(
            (c.reduction(), c.consumer_width(), c.is_new()),
            (Reduce::Atomic, 64, true)
        );
        let e: Fp8Config = "144se/3".parse().unwrap();
        assert_eq!(
            (e.bn, e.pipe, e.sscale, e.tma_epi, e.splits, e.is_new()),
            (144, false, true, true, 3, true)
        );
        assert!(!e.same_kernel(&"144s".parse().unwrap()));
        let te: Fp8Config = "128te".parse().unwrap();
        assert_eq!(
            (te.sscale, te.tma_scales, te.tma_epi, te.sscale_define()),
            (true, true, true, 2)
        );
        assert!(!te.same_kernel(&"128se".parse().unwrap()));
        // o: the drained promotion with turns; not beside p (pipelined: nothing to take turns on)
        let ote: Fp8Config = "128ote".parse().unwrap();
        assert_eq!(
            (
                ote.order,
                ote.pipe,
                ote.tma_scales,
                ote.tma_epi,
                ote.is_new()
            ),
            (true, false, true, true, true)
        );
        // the turns are a run-time choice: 128te's kernel
        assert!(ote.same_kernel(&te) && ote.same_kernel(&"128ote/3".parse().unwrap()));
        assert_eq!(ote, te.ordered());
        let p = Fp8Problem::new(4096, 7168, 2048, DType::Bf16, ScaleMode::Block);
        assert!(check_config(&p, "176ose".parse().unwrap()).is_ok());
        assert!(check_config(&p, "112ose/2".parse().unwrap()).is_ok());
        // the old family with turns: the same kernel, so the same ring and specialisation
        let (old, turns): (Fp8Config, Fp8Config) =
            ("160".parse().unwrap(), "160o".parse().unwrap());
        assert!(!turns.is_new() && turns.stages() == old.stages());
        assert_eq!(
            spec("sm_90a", &p, turns).label(),
            spec("sm_90a", &p, old).label()
        );
        let e = check_config(
            &Fp8Problem {
                promote: false,
                scale: ScaleMode::Tensor,
                ..p
            },
            "128o".parse().unwrap(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("takes turns (o)"), "{e}");
        let pair: Fp8Config = "160sm".parse().unwrap();
        assert_eq!((pair.cluster, pair.ctas(), pair.is_new()), (2, 2, true));
        assert!(!pair.same_kernel(&"160s".parse().unwrap()));
        // pairs along N share A (n), 2 x 2 clusters both: each CTA's boxes hold its part
        let (pm, pn, quad): (Fp8Config, Fp8Config, Fp8Config) = (
            "128ptme".parse().unwrap(),
            "128ptne".parse().unwrap(),
            "128ptmne".parse().unwrap(),
        );
        assert_eq!((pn.ctas_m(), pn.ctas_n(), quad.ctas()), (1, 2, 4));
        assert!(!pm.same_kernel(&pn) && !pn.same_kernel(&quad) && pm.is_new());
        assert_eq!(
            (pm.a_box_rows(4096), pm.b_box_rows()),
            (128, 64),
            "pairs along M: the whole A, half of B"
        );
        assert_eq!((pn.a_box_rows(4096), pn.b_box_rows()), (64, 128));
        assert_eq!((quad.a_box_rows(4096), quad.b_box_rows()), (64, 64));
        // a small M keeps the whole A box where CTAs share it (each loads half of the tile's)
        assert_eq!(
            (pm.a_rows(40), pn.a_rows(40), pn.a_box_rows(40)),
            (40, 128, 64)
        );
        assert_eq!(
            (pm.to_string(), pn.to_string(), quad.to_string()),
            ("128ptme".into(), "128ptne".into(), "128ptmne".into())
        );
        let old: Fp8Config = "128p/3".parse().unwrap();
        assert_eq!((old.reduction(), old.is_new()), (Reduce::Slots, false));
        assert_eq!(
            "128p/3a".parse::<Fp8Config>().unwrap().reduction(),
            Reduce::Atomic
        );
        for bad in [
            "p", "64x", "128y", "128a", "x128", "128/", "128ps/x", "128ms", "128es", "128st",
            "128po", "128op", "128so", "o", "128nm", "128en", "128pnt", "128he", "128eh", "128rp",
            "128tr", "r",
        ] {
            let e = bad.parse::<Fp8Config>().unwrap_err().to_string();
            assert!(e.contains("is not an FP8 tile config"), "{bad}: {e}");
        }
        // the A box: the tile's rows, or for the new family a smaller M's, rounded up to 8
        assert_eq!(old.a_rows(1), 128);
        assert_eq!(
            (c.a_rows(1), c.a_rows(60), c.a_rows(64), c.a_rows(4096)),
            (8, 64, 64, 64)
        );
        // a config stored before the new fields reads as the old family
        let stored: Fp8Config =
            serde_json::from_str(r#"{"bn":160,"pipe":false,"splits":2}"#).unwrap();
        assert_eq!(
            stored,
            Fp8Config {
                splits: 2,
                ..Fp8Config::new(160, false)
            }
        );
        // pairs count both tiles of a pair, the second past M where the tile-rows are odd
        let p = Fp8Problem::new(300, 384, 4112, DType::Bf16, ScaleMode::Block);
        assert_eq!(
            (tiles(&p, &"160s".parse().unwrap()), tiles(&p, &pair)),
            (9, 12)
        );
        // 3 x 3 tiles of 128: pairs along N pad the columns, 2 x 2 clusters both
        assert_eq!(
            (tiles(&p, &pm), tiles(&p, &pn), tiles(&p, &quad)),
            (12, 12, 16)
        );
    }

    #[test]
    fn the_large_rule_takes_the_lean_short_k_form_where_it_fits() {
        // ledger rows 171 and 200: `128ptqze/1` in place of the turns' `128otqe` at
        // 64 < M <= 128, `64x128ptqze/1` in place of `64x128psb/1` at M <= 64, each with K of
        // four blocks, M a multiple of 4, bf16 C; elsewhere the rule's config as before
        let dev = DeviceInfo::h100_sxm();
        assert_eq!(SMALL_ROWS_LEAN.to_string(), "128ptqze/1");
        assert_eq!(SMALL_M_SHORT_LEAN.to_string(), "64x128ptqze/1");
        let rule = |m, n, k, out| {
            let p = Fp8Problem::new(m, n, k, out, ScaleMode::Block);
            let c = choose_by(&p, &dev, Fp8Rule::Large);
            assert!(check_config(&p, c).is_ok(), "{p}: {c}");
            assert_eq!(splits_for(&p, &c, &dev), 1, "{p}: {c}");
            c.to_string()
        };
        let bulk = if SMALL_ROWS_BULK_BOTH { "q" } else { "b" };
        let turns = format!("128ot{bulk}e");
        for (m, n, k, out, want) in [
            (128, 32768, 512, DType::Bf16, "128ptqze/1"),
            (100, 32768, 512, DType::Bf16, "128ptqze/1"),
            (68, 32768, 400, DType::Bf16, "128ptqze/1"),
            (64, 32768, 512, DType::Bf16, "64x128ptqze/1"),
            (4, 32768, 400, DType::Bf16, "64x128ptqze/1"),
            // f32 C, M not a multiple of 4, K of three blocks: the config without it
            (128, 32768, 512, DType::F32, turns.as_str()),
            (126, 32768, 512, DType::Bf16, turns.as_str()),
            (128, 32768, 384, DType::Bf16, turns.as_str()),
            (64, 32768, 512, DType::F32, "64x128psb/1"),
            (62, 32768, 512, DType::Bf16, "64x128psb/1"),
            (64, 32768, 384, DType::Bf16, "64x128psb/1"),
        ] {
            assert_eq!(rule(m, n, k, out), want, "{m}x{n}x{k} {out:?}");
        }
        // M 129 (the large rule's other tiles) and tensor scales: never the lean form
        let p = Fp8Problem::new(129, 32768, 512, DType::Bf16, ScaleMode::Block);
        assert!(!choose_by(&p, &dev, Fp8Rule::Large).a_resident);
        let t = Fp8Problem::new(128, 32768, 512, DType::Bf16, ScaleMode::Tensor);
        assert!(!choose_by(&t, &dev, Fp8Rule::Large).a_resident);
    }

    #[test]
    fn whole_tile_kernels_compile_out_the_slices() {
        // ledger row 202: `u`, the rule's unsplit small-M kernels without split-K and stream-K
        let block = configs(Fp8Format::E4m3, Fp8Format::E4m3, ScaleMode::Block, true);
        let dev = DeviceInfo::h100_sxm();
        let p = Fp8Problem::new(64, 24576, 1536, DType::Bf16, ScaleMode::Block);
        for (name, plain) in [
            ("64x128psu/1", "64x128ps/1"),
            ("64x192psu/1", "64x192ps/1"),
            ("256tquhl/1", "256tqhl/1"),
        ] {
            let c: Fp8Config = name.parse().unwrap();
            let d: Fp8Config = plain.parse().unwrap();
            assert_eq!(c.to_string(), name);
            assert_eq!(c, d.whole_tiles());
            assert!(c.whole && !c.same_kernel(&d), "{name}");
            assert!(block.iter().any(|x| x.same_kernel(&c)), "{name}");
            assert_eq!(
                (c.max_splits(), c.smem_bytes()),
                (1, d.smem_bytes()),
                "{name}"
            );
            assert!(
                check_config(&p, c).is_ok(),
                "{name}: {:?}",
                check_config(&p, c)
            );
            // without /1 the launch takes one slice all the same
            let free = Fp8Config { splits: 0, ..c };
            assert_eq!(splits_for(&p, &free, &dev), 1, "{name}");
        }
        for bad in ["64x128psu/2", "64x128psu/k", "128ptqzue/1"] {
            let c: Fp8Config = bad.parse().unwrap();
            assert!(check_config(&p, c).is_err(), "{bad}");
        }
        // three kernels, bf16 C only; `KILN_WHOLE` passed only where set, so that the other
        // kernels' cache keys stay as they were
        let v = variants("sm_90a");
        let whole = |s: &KernelSpec| s.defines.iter().any(|(k, _)| k == "KILN_WHOLE");
        assert_eq!(v.iter().filter(|s| whole(s)).count(), 3);
        let c: Fp8Config = "64x128ps/1".parse().unwrap();
        assert!(!whole(&spec("sm_90a", &p, c)));
        // the large rule's 64-row picks where `SMALL_M_WHOLE` is on, else by name only
        for (m, n, k, rule_takes) in [
            (64, 24576, 1536, SMALL_M_WHOLE),
            (64, 7168, 2048, SMALL_M_WHOLE),
            (128, 7168, 2048, SMALL_M_WHOLE),
            (128, 24576, 1536, SMALL_M_WHOLE && SMALL_ROWS_ONE_TILE_WHOLE),
        ] {
            let p = Fp8Problem::new(m, n, k, DType::Bf16, ScaleMode::Block);
            for rule in Fp8Rule::ALL {
                let want = rule_takes && rule == Fp8Rule::Large;
                assert_eq!(
                    choose_by(&p, &dev, rule).whole,
                    want,
                    "{p}: {}",
                    rule.name()
                );
            }
        }
    }

    #[test]
    fn the_large_rule_can_take_the_whole_tile_twins_of_its_unsplit_small_m_picks() {
        // ledger row 202: `SMALL_M_WHOLE` runs the rule's unsplit 64-row picks at M <= 128 as
        // their `u` twins; split, stream-K, lean, 128 x 256, f32 and large-M picks stay as they are
        let dev = DeviceInfo::h100_sxm();
        let p = |m, n, k, out| Fp8Problem::new(m, n, k, out, ScaleMode::Block);
        for (m, n, k) in [(64, 7168, 2048), (128, 7168, 2048), (64, 24576, 1536)] {
            let p = p(m, n, k, DType::Bf16);
            let c = choose_by(&p, &dev, Fp8Rule::Large);
            assert!(c.whole, "{p}: {c}");
            assert_eq!(whole_if_unsplit(&p, c, &dev, false), c, "{p}");
            let w = whole_if_unsplit(&p, c, &dev, true);
            assert!(
                w.whole && w.same_kernel(&c.whole_tiles()),
                "{p}: {c} -> {w}"
            );
            assert!(check_config(&p, w).is_ok(), "{p}: {w}");
            assert_eq!(splits_for(&p, &w, &dev), 1, "{p}: {w}");
        }
        for p in [
            p(64, 2112, 7168, DType::Bf16),
            p(128, 7168, 16384, DType::Bf16),
            p(128, 32768, 512, DType::Bf16),
            p(64, 7168, 2048, DType::F32),
            p(4096, 7168, 2048, DType::Bf16),
        ] {
            let c = choose_by(&p, &dev, Fp8Rule::Large);
            assert_eq!(whole_if_unsplit(&p, c, &dev, true), c, "{p}: {c}");
        }
    }

    #[test]
    fn the_lean_short_k_form_keeps_a_resident_where_it_fits() {
        // ledger row 171: `z` is its own kernel beside `128ptqe`'s, a ring of B alone
        let z: Fp8Config = "128ptqze/1".parse().unwrap();
        let plain: Fp8Config = "128ptqe/1".parse().unwrap();
        assert!(z.a_resident && z.sb_bulk && !z.same_kernel(&plain));
        assert_eq!(z.to_string(), "128ptqze/1");
        assert_eq!(
            Fp8Config {
                a_resident: false,
                ..z
            },
            plain
        );
        assert_eq!(z.stage_bytes(), 128 * BK);
        assert_eq!((z.stages(), z.smem_bytes()), (7, 216_320));
        let z64: Fp8Config = "64x128ptqze".parse().unwrap();
        assert_eq!((z64.stages(), z64.smem_bytes()), (10, 231_776));
        assert!(z.smem_bytes() <= SMEM_BUDGET && z64.smem_bytes() <= SMEM_BUDGET);
        let block = configs(Fp8Format::E4m3, Fp8Format::E4m3, ScaleMode::Block, true);
        assert!(block.iter().any(|c| c.same_kernel(&z)));
        assert!(block.iter().any(|c| c.same_kernel(&z64)));
        // bf16 C only: two variants
        let lean = variants("sm_90a")
            .iter()
            .filter(|s| s.label().contains("KILN_ARES=1"))
            .count();
        assert_eq!(lean, 2);
        // where it runs: M within the tile's rows, K of four blocks, M a multiple of 4, bf16 C
        // that TMA addresses, one slice; else the launch runs `128ptqe`
        let p = |m, n, k, out| Fp8Problem::new(m, n, k, out, ScaleMode::Block);
        assert!(z.lean_fits(&p(128, 32768, 512, DType::Bf16), 1));
        assert!(z.lean_fits(&p(100, 4000, 512, DType::Bf16), 1));
        assert!(z64.lean_fits(&p(64, 32768, 400, DType::Bf16), 1));
        assert!(!z64.lean_fits(&p(100, 4000, 512, DType::Bf16), 1));
        assert!(!z.lean_fits(&p(129, 4000, 512, DType::Bf16), 1));
        assert!(!z.lean_fits(&p(128, 4000, 384, DType::Bf16), 1));
        assert!(!z.lean_fits(&p(65, 1000, 512, DType::Bf16), 1));
        assert!(!z.lean_fits(&p(128, 4000, 512, DType::F32), 1));
        assert!(!z.lean_fits(&p(128, 4001, 512, DType::Bf16), 1));
        assert!(!z.lean_fits(&p(128, 4000, 512, DType::Bf16), 2));
        assert!(!plain.lean_fits(&p(128, 32768, 512, DType::Bf16), 1));
        assert_eq!(z.max_splits(), 1);
        // the forms it is not
        let pr = p(128, 32768, 512, DType::Bf16);
        for bad in [
            "128otqze",
            "128ptbze",
            "128ptqz",
            "128ptqzh/1",
            "128ptqzel",
            "128ptqze/2",
        ] {
            let c: Fp8Config = bad.parse().unwrap();
            assert!(check_config(&pr, c).is_err(), "{bad}");
        }
        assert!(check_config(&pr, z).is_ok());
        // where it does not fit, a compiled kernel runs
        for c in [z, z64] {
            let w = c.without_lean();
            assert!(
                !w.a_resident && block.iter().any(|x| x.same_kernel(&w)),
                "{c}"
            );
            assert!(
                check_config(&p(100, 4000, 1040, DType::F32), w).is_ok(),
                "{c}"
            );
        }
        assert_eq!(z64.without_lean().to_string(), "64x128psb");
        assert!(check_config(&pr, z64).is_ok());
    }

    #[test]
    fn the_ping_pong_pair_tile_parses_and_takes_no_slices() {
        // ledger row 181: `192mgh`, five stages of 40 KB and one staging buffer a consumer
        let g = Fp8Config::ping_pong(192);
        assert_eq!(g.to_string(), "192mgh");
        assert_eq!("192mgh".parse::<Fp8Config>().unwrap(), g);
        assert_eq!(
            (g.stages(), g.smem_bytes(), g.tmae_define(), g.max_splits()),
            (5, 222_288, 2, 1)
        );
        assert!(!g.same_kernel(&Fp8Config::wide_pair_tensor(192)));
        let promoted = Fp8Problem::new(6144, 6144, 6144, DType::Bf16, ScaleMode::Tensor);
        let fast = Fp8Problem {
            promote: false,
            ..promoted
        };
        assert!(check_config(&fast, g).is_ok());
        assert!(check_config(&fast, g.streamed()).is_err());
        assert!(check_config(&promoted, g).is_err());
        // the large rule may take it (LARGE_PING_PONG) at 6144^3 and 8192^3, where the busiest
        // pair has no more outputs than `256md`'s, not at 4096^3 or 12288^3; never promoted
        let dev = h200();
        let cube = |n: usize| Fp8Problem {
            m: n,
            n,
            k: n,
            ..fast
        };
        let fills: Vec<bool> = [4096, 6144, 8192, 12288]
            .iter()
            .map(|&n| ping_pong_fills(&cube(n), &dev))
            .collect();
        assert_eq!(fills, [false, true, true, false]);
        assert!(!ping_pong_fills(&promoted, &dev));
        let expected = if LARGE_PING_PONG {
            g
        } else {
            Fp8Config::three_consumers(192)
        };
        assert_eq!(choose_by(&cube(6144), &dev, Fp8Rule::Large), expected);
    }

    #[test]
    fn variants_stay_few_and_every_mode_has_one() {
        let v = variants("sm_90a");
        // (102 since ledger row 40's `192th`: one block kernel, three outputs; 105 since row
        // 61's `256tmd/k`; 108 with row 51's `256pth`; 102 since rows 70 and 82 dropped both;
        // 99 since row 91 dropped `192th`, 102 with row 92's `128pth`, 105 with row 120's
        // promoted `192md`, 102 since row 110 dropped `128pth`; 104 with row 171's lean
        // short-K forms, `128ptqze` and `64x128ptqze`, bf16 C only; 107 with row 181's `192mgh`;
        // 110 with row 202's whole-tile kernels, `64x128psu`, `64x192psu`, `256tquh`, bf16 C only;
        // 113 with row 240's `128ptne`)
        assert!(v.len() <= 113, "{} variants", v.len());
        // e4m3: tensor promoted 4 (`256mh`, `256md` and `192md` beside 128p), row promoted 2, tensor
        // unpromoted 6 (`256mh`, `256md`, `192x192md` and `192mgh` beside 128 and 256), row unpromoted 2, block 16
        // kernels (17 configs: 128ote runs 128te's; `256tmd` in `256ptmh`'s place; `256th` for
        // the large rule at M = 128, ledger rows 24-25; `192th` dropped, row 91; `128pth` dropped, row 110;
        // `128ptne` back, row 240);
        // e5m2 pairs 2 each; 3 outputs
        assert_eq!(v.len(), (4 + 2 + 6 + 2 + 16) * 3 + 3 * 2 * 3 + 2 + 3);
        let dev = DeviceInfo::h100_sxm();
        for scale in ScaleMode::ALL {
            let p = Fp8Problem::new(256, 256, 256, DType::Bf16, scale);
            assert_eq!(supports(&p, &dev), Ok(()));
            assert!(
                supports(
                    &Fp8Problem {
                        promote: false,
                        ..p
                    },
                    &dev
                )
                .is_ok()
                    == (scale != ScaleMode::Block)
            );
        }
    }

    #[test]
    fn unsupported_combinations_say_why() {
        let dev = DeviceInfo::h100_sxm();
        let p = Fp8Problem::new(256, 256, 256, DType::Bf16, ScaleMode::Block);
        let e = supports(
            &Fp8Problem {
                promote: false,
                ..p
            },
            &dev,
        )
        .unwrap_err();
        assert!(e.contains("need promoted accumulation"), "{e}");
        let e5 = Fp8Problem {
            a: Fp8Format::E5m2,
            b: Fp8Format::E5m2,
            scale: ScaleMode::Row,
            ..p
        };
        let e = supports(&e5, &dev).unwrap_err();
        assert!(e.contains("e5m2 x e5m2") && e.contains("row scales"), "{e}");
        assert!(supports(
            &Fp8Problem {
                scale: ScaleMode::Block,
                ..e5
            },
            &dev
        )
        .is_ok());
        let a100 = DeviceInfo {
            compute_capability: (8, 0),
            ..dev.clone()
        };
        assert!(supports(&p, &a100).unwrap_err().contains("Hopper"));
    }

    #[test]
    fn the_width_fills_the_waves() {
        let dev = DeviceInfo::h100_sxm();
        // N = 7168: 45 tiles of 160 per row of tiles fill 11 waves against 14 of 128, but the
        // pipelined promotion of the 128-wide tile outweighs that
        let p = Fp8Problem::new(4096, 7168, 16384, DType::Bf16, ScaleMode::Block);
        assert_eq!(
            choose_by(&p, &dev, Fp8Rule::Measured),
            Fp8Config::new(128, true)
        );
        let p = Fp8Problem::new(4096, 4096, 4096, DType::Bf16, ScaleMode::Block);
        assert_eq!(
            choose_by(&p, &dev, Fp8Rule::Measured),
            Fp8Config::new(128, true)
        );
        // unpromoted 4096^3: 8 waves of 128 or 4 of 256 cost the same; the wider wins the tie
        let p = Fp8Problem {
            promote: false,
            scale: ScaleMode::Tensor,
            ..p
        };
        assert_eq!(
            choose_by(&p, &dev, Fp8Rule::Measured),
            Fp8Config::new(256, false)
        );
        assert_eq!(
            "128p".parse::<Fp8Config>().unwrap(),
            Fp8Config::new(128, true)
        );
        assert_eq!(Fp8Config::new(160, false).to_string(), "160");
        assert!("p".parse::<Fp8Config>().is_err());
        assert_eq!("128p/4".parse::<Fp8Config>().unwrap().splits, 4);
        assert_eq!("160/2".parse::<Fp8Config>().unwrap().to_string(), "160/2");
        // DeepSeek-V3's small-M GEMMs: 17 tiles fill 7 slices each; 56 tiles two
        let c128 = Fp8Config::new(128, true);
        let small = Fp8Problem::new(64, 2112, 7168, DType::Bf16, ScaleMode::Block);
        assert_eq!(choose_splits(&small, &c128, &dev), 7);
        let small = Fp8Problem::new(128, 7168, 16384, DType::Bf16, ScaleMode::Block);
        assert_eq!(choose_splits(&small, &c128, &dev), 2);
        let big = Fp8Problem::new(4096, 7168, 16384, DType::Bf16, ScaleMode::Block);
        assert_eq!(choose_splits(&big, &c128, &dev), 1);
        let short = Fp8Problem::new(64, 256, 384, DType::Bf16, ScaleMode::Block);
        assert_eq!(choose_splits(&short, &c128, &dev), 1);
        let e = check_config(&p, Fp8Config::new(128, true)).unwrap_err();
        assert!(e.to_string().contains("use one of 128, 256"), "{e}");
    }

    #[test]
    fn the_bytes_rule_fills_the_sms_at_small_m() {
        // An H200 as its driver describes it (4.9 TB/s of HBM3e).
        let dev = DeviceInfo {
            mem_clock_mhz: 3201,
            mem_bus_bits: 6144,
            ..DeviceInfo::h100_sxm()
        };
        let sms = dev.sm_count as u64;
        for (m, n, k) in crate::harness::fp8_bench::deepseek_shapes() {
            let p = Fp8Problem::new(m, n, k, DType::Bf16, ScaleMode::Block);
            let c = choose_by(&p, &dev, Fp8Rule::Bytes);
            assert!(c.splits >= 1 && check_config(&p, c).is_ok(), "{p}: {c}");
            let units = tiles(&p, &c) * c.splits as u64;
            let old = choose_by(&p, &dev, Fp8Rule::Waves);
            let old_us = predict_us(&p, &old, splits_for(&p, &old, &dev), &dev);
            let new_us = predict_us(&p, &c, c.splits, &dev);
            assert!(
                new_us <= old_us + 1e-9,
                "{p}: {c} {new_us} against {old} {old_us}"
            );
            if m <= 128 {
                // the new family, and no wave of SMs left more than half empty
                assert!(c.is_new(), "{p}: {c}");
                assert!(
                    units <= sms || units.is_multiple_of(sms) || units % sms > sms / 2,
                    "{p}: {c}"
                );
            }
        }
        // 64x2112x7168: 17 column tiles split about 7 ways, atomically reduced
        let p = Fp8Problem::new(64, 2112, 7168, DType::Bf16, ScaleMode::Block);
        let c = choose_by(&p, &dev, Fp8Rule::Bytes);
        assert!(c.splits >= 6 && c.reduction() == Reduce::Atomic, "{c}");
        // its bytes move in 3.8 us at 85 % of the HBM: predicted under 10 us with the launch
        let us = predict_us(&p, &c, c.splits, &dev);
        assert!(us < 10.0, "{c}: {us}");
    }

    #[test]
    fn the_measured_rule_launches_what_the_h200_timed() {
        let dev = DeviceInfo::h100_sxm();
        assert_eq!(dev.sm_count, 132, "an H200's SMs, as the timings ran");
        // (shape, the config `kiln fp8 bench --tile` timed, the slices its launch took) at
        // 7eb2e34: `64x128ps` at M <= 128, the wider 64-row tile where one wave of it suffices
        let timed = [
            ((64, 2112, 7168), "64x128ps", 7),
            ((64, 24576, 1536), "64x192ps", 1),
            ((64, 32768, 512), "64x256ps", 1),
            ((64, 7168, 16384), "64x128ps", 2),
            ((64, 4096, 7168), "64x128ps", 4),
            ((64, 7168, 2048), "64x128ps", 2),
            ((128, 2112, 7168), "64x128ps", 3),
            ((128, 24576, 1536), "64x128ps", 1),
            ((128, 32768, 512), "64x128ps", 1),
            ((128, 7168, 16384), "64x128ps", 1),
            ((128, 4096, 7168), "64x128ps", 2),
            ((128, 7168, 2048), "64x128ps", 1),
        ];
        for ((m, n, k), tile, splits) in timed {
            let p = Fp8Problem::new(m, n, k, DType::Bf16, ScaleMode::Block);
            let c = choose_by(&p, &dev, Fp8Rule::Measured);
            assert_eq!(c, tile.parse::<Fp8Config>().unwrap(), "{p}");
            assert_eq!(splits_for(&p, &c, &dev), splits, "{p}");
            assert_eq!(c.reduction(), Reduce::Atomic);
        }
        assert_eq!(timed.len(), 12);
        for (m, n, k) in crate::harness::fp8_bench::deepseek_shapes() {
            let p = Fp8Problem::new(m, n, k, DType::Bf16, ScaleMode::Block);
            let waves = choose_by(&p, &dev, Fp8Rule::Waves);
            if m > SMALL_M {
                assert_eq!(choose_by(&p, &dev, Fp8Rule::Measured), waves, "{p}");
            } else {
                assert!(
                    !waves.is_new(),
                    "{p}: KILN_FP8_RULE=waves keeps a8381a5's rule"
                );
            }
        }
        // M in between, 1 and 129; no 64-row tile compiled for tensor scales
        let p = Fp8Problem::new(1, 7168, 2048, DType::Bf16, ScaleMode::Block);
        assert_eq!(
            choose_by(&p, &dev, Fp8Rule::Measured).to_string(),
            "64x128ps"
        );
        let p = Fp8Problem::new(96, 24576, 1536, DType::Bf16, ScaleMode::Block);
        assert_eq!(
            choose_by(&p, &dev, Fp8Rule::Measured).to_string(),
            "64x128ps"
        );
        let p = Fp8Problem::new(129, 2112, 7168, DType::Bf16, ScaleMode::Block);
        assert_eq!(
            choose_by(&p, &dev, Fp8Rule::Measured),
            choose_by(&p, &dev, Fp8Rule::Waves)
        );
        let p = Fp8Problem::new(64, 2112, 7168, DType::Bf16, ScaleMode::Tensor);
        assert_eq!(
            choose_by(&p, &dev, Fp8Rule::Measured),
            choose_by(&p, &dev, Fp8Rule::Waves)
        );
        assert_eq!(Fp8Rule::default().name(), "large");
        assert_eq!(Fp8Rule::parse("waves"), Some(Fp8Rule::Waves));
    }

    #[test]
    fn the_a_scale_map_needs_rows_of_whole_16_bytes() {
        let m = a_scale_map(1 << 20, 4096, 16384, 128).unwrap();
        assert_eq!(
            (m.dims, m.row_stride_bytes, m.box_dims),
            ([4096, 128], 16384, [128, 1])
        );
        assert_eq!(m.box_bytes(), 512);
        // K = 4112: a 33rd, partial block has its scales too
        assert_eq!(
            a_scale_map(1 << 20, 300, 4112, 128).unwrap().dims,
            [300, 33]
        );
        assert!(a_scale_map(1 << 20, 129, 4112, 128).is_none());
        assert!(a_scale_map(1 << 20, 1, 256, 128).is_none());
        assert!(a_scale_map((1 << 20) + 4, 4096, 4096, 128).is_none());
    }

    #[test]
    fn the_fill_rule_takes_the_width_whose_waves_cost_least() {
        let dev = DeviceInfo::h100_sxm();
        // DeepSeek-V3's M = 4096 shapes on 132 SMs: (N, width, waves)
        for (n, k, bn, waves) in [
            (2112, 7168, 176, 3), // 12 column tiles exactly: 384 tiles, against 5 waves of 128
            (24576, 1536, 176, 34), // 34 x 176 = 5,984 column-waves against 47 x 128 = 6,016
            (32768, 512, 160, 50),
            (7168, 16384, 176, 10), // ties 11 waves of 160; 8 SMs idle in its last against 12
            (4096, 7168, 112, 9),   // 9 x 112 = 1,008 against 8 x 128 = 1,024
            (7168, 2048, 176, 10),
        ] {
            let p = Fp8Problem::new(4096, n, k, DType::Bf16, ScaleMode::Block);
            let c = choose_by(&p, &dev, Fp8Rule::Fill);
            assert_eq!(
                (c.bn, c.tma_epi, c.sscale, c.pipe),
                (bn, true, true, false),
                "{p}"
            );
            assert_eq!(tiles(&p, &c).div_ceil(132), waves, "{p}");
            assert!(check_config(&p, c).is_ok());
        }
        // at small M the measured rule's choice; no such tile for tensor scales
        for (m, n, k) in crate::harness::fp8_bench::deepseek_shapes() {
            let p = Fp8Problem::new(m, n, k, DType::Bf16, ScaleMode::Block);
            if m <= SMALL_M {
                assert_eq!(
                    choose_by(&p, &dev, Fp8Rule::Fill),
                    choose_by(&p, &dev, Fp8Rule::Measured),
                    "{p}"
                );
            }
        }
        let p = Fp8Problem::new(4096, 4096, 4096, DType::Bf16, ScaleMode::Tensor);
        assert_eq!(choose_fill(&p, &dev), None);
        assert_eq!(
            choose_by(&p, &dev, Fp8Rule::Fill),
            choose_by(&p, &dev, Fp8Rule::Waves)
        );
        assert_eq!(Fp8Rule::parse("fill"), Some(Fp8Rule::Fill));
    }

    #[test]
    fn the_large_rule_takes_the_tma_tiles_from_m_1024() {
        let dev = DeviceInfo::h100_sxm();
        let pte: Fp8Config = "128pte".parse().unwrap();
        let te: Fp8Config = "128te".parse().unwrap();
        let pair: Fp8Config = "128ptme".parse().unwrap();
        let wide: Fp8Config = "256tmd".parse().unwrap();
        for (m, n, k) in crate::harness::fp8_bench::deepseek_shapes() {
            let p = Fp8Problem::new(m, n, k, DType::Bf16, ScaleMode::Block);
            let c = choose_by(&p, &dev, Fp8Rule::Large);
            if m >= LARGE_M {
                // M = 4096: 32 rows of tiles, 544 tiles or more (4.1 waves) at every N; the 128
                // x 256 tile but at N = 2112 (3 waves of it against 5 of 128), where the pairs'
                // fifth wave of 8 tiles is shared out by K block (231 K blocks a pair, not 280)
                assert_eq!(c, if n == 2112 { pair.streamed() } else { wide }, "{p}");
                assert!(check_config(&p, c).is_ok());
                // one slice: 32 rows of tiles fill the SMs
                assert_eq!(splits_for(&p, &c, &dev), 1, "{p}");
            } else {
                assert_eq!(c, choose(&p, &dev), "{p}");
            }
        }
        // at 64 < M <= 128 the 128-row tile where its units hold 32 K blocks or more, or 4 at
        // most unsplit; else (and at M <= 64) the measured rule's 64-row tile; no stream-K
        // (but one tile a CTA where the 128-row tile of SMALL_ROWS_ONE_TILE fills the SMs once,
        // ledger rows 24-25: below)
        for (m, n, k, rows) in [
            (128, 7168, 16384, 128),
            (128, 32768, 512, 128),
            (128, 2112, 7168, 64),
            (128, 7168, 2048, 64),
            (128, 4096, 7168, 64),
            (64, 7168, 16384, 64),
        ] {
            let p = Fp8Problem::new(m, n, k, DType::Bf16, ScaleMode::Block);
            let c = choose_by(&p, &dev, Fp8Rule::Large);
            assert_eq!((c.bm, c.stream), (rows, false), "{p}: {c}");
            // two slices summed in pairs of CTAs (ledger row 21)
            let measured = choose_by(&p, &dev, Fp8Rule::Measured);
            let pair_sum = splits_for(&p, &measured, &dev) == 2 || (rows == 128 && k == 16384);
            assert_eq!(c.reduce == Some(Reduce::Cluster), pair_sum, "{p}: {c}");
            if rows == 128 {
                // the drained tile with turns where tried (ledger row 41), else pipelined
                let turns = if k == 16384 {
                    SMALL_ROWS_TURNS_LONG
                } else {
                    SMALL_ROWS_TURNS_SHORT
                };
                // (at K of 4 blocks the lean form, ledger row 200: the other test)
                let want = match k {
                    512 => SMALL_ROWS_LEAN,
                    _ if turns => SMALL_ROWS_TURNS,
                    // in pairs along N where the cluster sum runs (ledger row 240)
                    16384 if SMALL_ROWS_PAIRS_N => pte.paired_n(),
                    _ => pte,
                };
                assert!(
                    c.same_kernel(&want) && c.order == (turns && k != 512),
                    "{p}: {c}"
                );
                assert!(check_config(&p, c).is_ok(), "{p}: {c}");
                // and the other choice runs there too (both values of the flags)
                let other = if turns { pte } else { SMALL_ROWS_TURNS };
                let other = Fp8Config {
                    splits: c.splits,
                    reduce: c.reduce,
                    ..other
                };
                assert!(check_config(&p, other).is_ok(), "{p}: {other}");
            } else {
                // (`u` where `SMALL_M_WHOLE` takes it, ledger row 202)
                let twin = whole_if_unsplit(&p, measured, &dev, SMALL_M_WHOLE);
                assert!(c.same_kernel(&twin), "{p}: {c}");
            }
        }
        // (the 128 x 192 tile where it is tried and its 128 tiles fill the SMs: N = 24,576;
        // at N = 32,768 its 171 tiles take two waves, ledger row 40)
        for (m, n, k) in [(128, 24576, 1536), (100, 24576, 1536), (128, 32768, 1024)] {
            let p = Fp8Problem::new(m, n, k, DType::Bf16, ScaleMode::Block);
            let c = choose_by(&p, &dev, Fp8Rule::Large);
            let want = one_tile_config(SMALL_ROWS_ONE_TILE_TURNS);
            // K < 2048: the A scales by one bulk copy (ledger rows 70 and 90); the whole-tile
            // twin where SMALL_ROWS_ONE_TILE_WHOLE (ledger row 248)
            let bulk = scales_by_bulk_if_short(&p, want);
            let want = if SMALL_ROWS_ONE_TILE_WHOLE {
                bulk.whole_tiles()
            } else {
                bulk
            };
            assert_eq!(c, want, "{p}");
            assert!(c.sa_bulk && c.same_kernel(&want), "{p}: {c}");
            assert!(
                check_config(&p, c).is_ok() && splits_for(&p, &c, &dev) == 1,
                "{p}"
            );
        }
        // 64x7168x2048 unsplit, where the measured rule's two slices add their tail (below)
        let p = Fp8Problem::new(64, 7168, 2048, DType::Bf16, ScaleMode::Block);
        let c = choose_by(&p, &dev, Fp8Rule::Large);
        let want = if SMALL_M_WHOLE {
            "64x128psu/1"
        } else {
            "64x128ps/1"
        };
        assert_eq!((c.to_string(), splits_for(&p, &c, &dev)), (want.into(), 1));
        let p = Fp8Problem::new(128, 7168, 16384, DType::Bf16, ScaleMode::Block);
        assert_eq!(splits_for(&p, &pte, &dev), 2);
        assert_eq!(choose_by(&p, &dev, Fp8Rule::Large).to_string(), LONG_128);
        let small: Fp8Config = "64x128ps".parse().unwrap();
        assert_eq!(busiest_blocks(&p, &small, &dev), (128, 109));
        // in between, the measured rule (waves above M = 128); tensor scales have no such tile
        let p = Fp8Problem::new(1023, 7168, 2048, DType::Bf16, ScaleMode::Block);
        assert_eq!(choose_by(&p, &dev, Fp8Rule::Large), choose(&p, &dev));
        // (448 tiles: 3 waves and 52 tiles; stream-K would save 9 of 64 K blocks a CTA, under
        // the 24 its atomic sums cost)
        let p = Fp8Problem::new(1024, 7168, 2048, DType::Bf16, ScaleMode::Block);
        assert_eq!(choose_by(&p, &dev, Fp8Rule::Large), pte);
        assert_eq!(busiest_blocks(&p, &pte, &dev), (64, 55));
        let p = Fp8Problem::new(1024, 7168, 512, DType::Bf16, ScaleMode::Block);
        assert_eq!(choose_by(&p, &dev, Fp8Rule::Large), te);
        let p = Fp8Problem::new(4096, 2112, 7168, DType::Bf16, ScaleMode::Block);
        assert_eq!(busiest_blocks(&p, &pair, &dev), (280, 231));
        // pairs only from 4 waves of tiles (2048x2048: 1.94) and where the rows of tiles pair up
        // (M = 1100: 9); single CTAs pipelined from K = 1536
        let at = |m, n, k| {
            choose_by(
                &Fp8Problem::new(m, n, k, DType::Bf16, ScaleMode::Block),
                &dev,
                Fp8Rule::Large,
            )
        };
        assert_eq!(
            (
                at(2048, 2048, 4096),
                at(1100, 32768, 16384),
                at(1100, 32768, 512)
            ),
            (pte, pte, te)
        );
        assert_eq!((at(4096, 7168, 1536), at(2048, 8192, 512)), (wide, wide));
        // the wide tile where its waves (x 0.92) take no longer: 2048x7168 has 3.4 waves of it
        // (4 x 2 x 0.92 = 7.4 against 7 of 128), 2048x4096 no pairs (3.9 waves of 128)
        assert_eq!((at(2048, 7168, 16384), at(2048, 4096, 7168)), (pair, pte));
        // tensor scales: `256mh` where its waves of pairs are half the 128-wide tile's or fewer
        let wide_t = Fp8Config::wide_pair_tensor(256);
        for promote in [true, false] {
            let t = |m, n, k| Fp8Problem {
                promote,
                ..Fp8Problem::new(m, n, k, DType::Bf16, ScaleMode::Tensor)
            };
            for (m, n, k) in [(4096, 4096, 4096), (6144, 6144, 6144), (8192, 8192, 8192)] {
                let p = t(m, n, k);
                // (with LARGE_THREE_CONSUMERS, `192x192md` at 6144^3 unpromoted; with
                // LARGE_PROMOTED_192, `192md` promoted at 6144^3 and 8192^3)
                let expected = if LARGE_PING_PONG && ping_pong_fills(&p, &dev) {
                    Fp8Config::ping_pong(192)
                } else if LARGE_THREE_CONSUMERS && three_consumers_fill(&p, &dev) {
                    Fp8Config::three_consumers(192)
                } else if LARGE_PROMOTED_192 && promoted_192_fills(&p, &dev) {
                    promoted_192()
                } else {
                    large_wide_tensor(promote)
                };
                assert_eq!(choose_large(&p, &dev), Some(expected), "{p}");
                assert!(check_config(&p, wide_t).is_ok() && wide_t.max_splits() == 1);
            }
            // 2048^3: 256 tiles of 128, under 4 waves; M = 1100: pairs would leave a tile past M
            assert_eq!(choose_large(&t(2048, 2048, 2048), &dev), None);
            assert_eq!(choose_large(&t(1100, 8192, 4096), &dev), None);
        }
        assert_eq!(wide_t.to_string(), "256mh");
        assert_eq!("256mh".parse::<Fp8Config>().unwrap(), wide_t);
        assert_eq!(
            (wide_t.stages(), wide_t.parts(), wide_t.smem_bytes()),
            (4, 2, 214_080)
        );
        // the deferred epilogue (`d`): its own kernel (KILN_TMAE = 3) on the same ring of four
        // stages, two staging buffers a consumer (no scale slots beside them)
        let deferred = wide_t.deferred_epilogue();
        assert_eq!(deferred.to_string(), "256md");
        assert_eq!(
            (
                deferred.stages(),
                deferred.smem_bytes(),
                deferred.tmae_define()
            ),
            (4, 1024 + 4 * 49_168 + 32_768, 3)
        );
        assert!(!deferred.same_kernel(&wide_t) && deferred.max_splits() == 1);
        // ledger row 120: the promoted 128 x 192 tile (`192md`), four 40 KB stages, one part, no
        // slices; the rule's where its busiest pair has no more outputs (8192^3, 6144^3; not
        // 4096^3: 6 tiles against 4, 147,456 outputs against 131,072), and only with
        // LARGE_PROMOTED_192
        let p192 = promoted_192();
        assert_eq!(p192.to_string(), "192md");
        assert_eq!("192md".parse::<Fp8Config>().unwrap(), p192);
        assert_eq!(
            (
                p192.stages(),
                p192.parts(),
                p192.max_splits(),
                p192.smem_bytes()
            ),
            (4, 1, 1, 197_696)
        );
        let cube = |n| Fp8Problem::new(n, n, n, DType::Bf16, ScaleMode::Tensor);
        assert!(promoted_192_fills(&cube(8192), &dev));
        assert!(promoted_192_fills(&cube(6144), &dev));
        assert!(!promoted_192_fills(&cube(4096), &dev));
        let fast8 = Fp8Problem {
            promote: false,
            ..cube(8192)
        };
        assert!(!promoted_192_fills(&fast8, &dev));
        assert!(check_config(&cube(8192), p192).is_ok() && check_config(&fast8, p192).is_err());
        let expected = if LARGE_PROMOTED_192 {
            p192
        } else {
            large_wide_tensor(true)
        };
        assert_eq!(choose_large_tensor(&cube(8192), &dev), Some(expected));
        assert_eq!(choose_large_tensor(&cube(6144), &dev), Some(expected));
        let fast = Fp8Problem {
            promote: false,
            ..Fp8Problem::new(8192, 8192, 8192, DType::Bf16, ScaleMode::Tensor)
        };
        assert!(check_config(&fast, deferred).is_ok());
        // stream-K by name on the unpromoted tile (one accumulator a consumer), not promoted, and
        // never by the rule
        assert!(check_config(&fast, deferred.streamed()).is_ok());
        assert!(check_config(&fast, wide_t.streamed()).is_ok());
        assert!(check_config(
            &Fp8Problem {
                promote: true,
                ..fast
            },
            deferred.streamed()
        )
        .is_err());
        let ragged = Fp8Problem {
            m: 4096,
            n: 4096,
            k: 1024,
            ..fast
        };
        assert!(!choose_large(&ragged, &dev).is_some_and(|c| c.stream));
        assert!(check_config(
            &Fp8Problem {
                promote: true,
                ..fast
            },
            deferred
        )
        .is_ok());
        // with block scales `256tmd`: 256tmh's ring, slots, halves and one staging buffer
        let block = Fp8Problem {
            scale: ScaleMode::Block,
            ..fast
        };
        let tmd: Fp8Config = "256tmd".parse().unwrap();
        assert_eq!(
            (tmd.stages(), tmd.smem_bytes(), tmd.two_halves()),
            (4, 216_640, true)
        );
        assert!(check_config(
            &Fp8Problem {
                promote: true,
                ..block
            },
            tmd
        )
        .is_ok());
        assert_eq!(Fp8Rule::parse("large"), Some(Fp8Rule::Large));
        // clusters only where they tile C whole: DeepSeek-V3's M = 4096 has 32 rows of tiles,
        // N = 2112 17 columns; M = 1100 9 rows
        let at = |m, n| Fp8Problem::new(m, n, 7168, DType::Bf16, ScaleMode::Block);
        assert_eq!(whole_clusters(&at(4096, 7168), (2, 1)), (2, 1));
        assert_eq!(whole_clusters(&at(4096, 7168), (2, 2)), (2, 2));
        assert_eq!(whole_clusters(&at(4096, 2112), (2, 1)), (2, 1));
        assert_eq!(whole_clusters(&at(4096, 2112), (1, 2)), (1, 1));
        assert_eq!(whole_clusters(&at(1100, 7168), (2, 1)), (1, 1));
        for (m, n, k) in [(4096, 2112, 7168), (4096, 7168, 16384), (1100, 7168, 2048)] {
            let p = Fp8Problem::new(m, n, k, DType::Bf16, ScaleMode::Block);
            let c = choose_large(&p, &dev).expect("compiled");
            assert!(
                check_config(&p, c).is_ok() && (c.pipe || c.two_halves()),
                "{p}: {c}"
            );
        }
    }

    /// The H200 of the ledger's rows 18-20: 132 SMs, HBM3e at 4.9 TB/s.
    fn h200() -> DeviceInfo {
        DeviceInfo {
            mem_clock_mhz: 3201,
            mem_bus_bits: 6144,
            ..DeviceInfo::h100_sxm()
        }
    }

    #[test]
    fn the_cluster_sum_takes_what_the_first_ring_holds() {
        let c: Fp8Config = "64x128ps/4c".parse().unwrap();
        assert_eq!(
            (c.to_string(), c.reduction()),
            ("64x128ps/4c".into(), Reduce::Cluster)
        );
        // 9 stages of 24 KB hold 6 partials of 64 x 128 fp32 (32 KB); 5 of 32 KB two of 64 KB
        assert_eq!(c.max_splits(), 7);
        let pte: Fp8Config = "128pte/2c".parse().unwrap();
        assert_eq!(pte.max_splits(), 3);
        let p = Fp8Problem::new(64, 2112, 7168, DType::Bf16, ScaleMode::Block);
        assert!(check_config(&p, c).is_ok() && check_config(&p, pte).is_ok());
        // pairs along N (row 240): two slices, a cluster of 2 x 2; not pairs along M
        let pne: Fp8Config = "128ptne/2c".parse().unwrap();
        assert_eq!((pne.max_splits(), pne.reduction()), (2, Reduce::Cluster));
        assert!(check_config(&p, pne).is_ok());
        for bad in [
            "64x128ps/8c",
            "128ptme/2c",
            "256tmh/2c",
            "128pte/3c",
            "128ptne/3c",
            "128ptmne/2c",
        ] {
            let c: Fp8Config = bad.parse().unwrap();
            let e = check_config(&p, c);
            assert!(e.is_err() == (bad != "128pte/3c"), "{bad}: {e:?}");
        }
        let e = check_config(&p, Fp8Config { stream: true, ..c }).unwrap_err();
        assert!(e.to_string().contains("cluster (c)"), "{e}");
    }

    #[test]
    fn the_pairs_along_n_take_the_cluster_summed_128pte_only_where_asked() {
        let dev = DeviceInfo::h100_sxm();
        let single: Fp8Config = "128pte/2c".parse().unwrap();
        let mut taken = Vec::new();
        for (m, n, k) in crate::harness::fp8_bench::deepseek_shapes() {
            let p = Fp8Problem::new(m, n, k, DType::Bf16, ScaleMode::Block);
            let rule = choose_by(&p, &dev, Fp8Rule::Large);
            // the rule's pick before the pairs: `128pte/2c` where it became the pair
            let before = if rule == single.paired_n() {
                single
            } else {
                rule
            };
            assert_eq!(pairs_along_n(&p, before, &dev, false), before, "{p}");
            let on = pairs_along_n(&p, before, &dev, true);
            assert_eq!(rule, if SMALL_ROWS_PAIRS_N { on } else { before }, "{p}");
            if on != before {
                assert_eq!(
                    (before.to_string(), on.to_string()),
                    ("128pte/2c".into(), "128ptne/2c".into())
                );
                taken.push((m, n, k));
            }
        }
        // the one DeepSeek-V3 shape the rule runs as `128pte/2c` (ledger row 240)
        assert_eq!(taken, [(128, 7168, 16384)]);
        // an odd count of column tiles keeps the single CTAs
        let odd = Fp8Problem::new(128, 7040, 16384, DType::Bf16, ScaleMode::Block);
        let rule = choose_by(&odd, &dev, Fp8Rule::Large);
        assert_eq!(rule.to_string(), "128pte/2c");
        assert_eq!(pairs_along_n(&odd, rule, &dev, true), rule);
    }

    #[test]
    fn small_m_slices_stream_against_their_tail() {
        let dev = h200();
        let small: Fp8Config = "64x128ps".parse().unwrap();
        let pte: Fp8Config = "128pte".parse().unwrap();
        let at = |m, n, k| Fp8Problem::new(m, n, k, DType::Bf16, ScaleMode::Block);
        // the measured points the model rests on (us past the fixed ~6): 64x2112x7168 unsplit
        // 16.7, in 2 slices 10.7, in 4 7.4; 128x7168x16384 in `128pte/2` 36.2
        let p = at(64, 2112, 7168);
        let us: Vec<f64> = [1, 2, 4]
            .iter()
            .map(|&s| small_m_stream_us(&p, &small, s, &dev))
            .collect();
        assert!(
            (us[0] - 17.0).abs() < 0.5 && (us[1] - 11.0).abs() < 0.5,
            "{us:?}"
        );
        assert!((us[2] - 7.1).abs() < 0.5, "{us:?}");
        let us = small_m_stream_us(&at(128, 7168, 16384), &pte, 2, &dev);
        assert!((us - 37.3).abs() < 1.0, "{us}");
        // DeepSeek-V3's M = 64 and 128: only N x K = 7168 x 2048 in 56 tiles leaves the fill
        // rule's slices (2: under half the SMs) for none; the rest keep theirs
        for (m, n, k) in crate::harness::fp8_bench::deepseek_shapes() {
            if m > SMALL_M {
                continue;
            }
            let p = at(m, n, k);
            for c in [small, pte] {
                let (fill, model) = (choose_splits(&p, &c, &dev), small_m_splits(&p, &c, &dev));
                if (n, k) == (7168, 2048) {
                    // 56 tiles (2 slices to fill) or 112 (1 already)
                    let filled = if tiles(&p, &c) == 56 { 2 } else { 1 };
                    assert_eq!((fill, model), (filled, 1), "{p}: {c}");
                } else {
                    assert_eq!(model, fill, "{p}: {c}");
                }
            }
        }
        // the rule's config says its slices where they are the model's, not the launch's
        let p = at(64, 7168, 2048);
        assert_eq!(
            choose_by(&p, &dev, Fp8Rule::Large).to_string(),
            if SMALL_M_WHOLE {
                "64x128psu/1"
            } else {
                "64x128ps/1"
            }
        );
        assert_eq!(
            choose_by(&p, &dev, Fp8Rule::Measured).to_string(),
            "64x128ps"
        );
        let p = at(128, 7168, 16384);
        assert_eq!(choose_by(&p, &dev, Fp8Rule::Large).to_string(), LONG_128);
    }

    #[test]
    fn every_variant_compiles_for_sm_90a_without_spills() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let jit = Jit::default();
        let dev = DeviceInfo::h100_sxm();
        let only = std::env::var("KILN_FP8_CHECK_ONLY").ok();
        let mut failed = Vec::new();
        for s in variants("sm_90a") {
            if only.as_deref().is_some_and(|o| !s.label().contains(o)) {
                continue;
            }
            match jit.compile(&s) {
                Ok(c) => {
                    let problems = judge(&s, &c.resources, &dev);
                    eprintln!(
                        "{}: {} registers {:?}",
                        s.label(),
                        c.resources.registers,
                        problems
                    );
                    if !problems.is_empty() {
                        failed.push(format!("{}: {problems:?}", s.label()));
                    }
                }
                Err(e) => failed.push(format!("{}: {e}", s.label())),
            }
        }
        assert!(failed.is_empty(), "{failed:#?}");
    }
}
