//! Host side of `kernels/moe/fp4_experts.cu`: the grouped GEMM and fused SwiGLU with prepacked
//! 4-bit weights, swapped operands (weights as wgmma's register A), tiles from a GPU counter.

use std::ffi::c_void;

use super::dispatch::{self, Fp4TileRule};
use super::gemm_tile;
use super::layout::{atom_bytes, ATOM_K, TILE_N};
use super::order::{self, Fp4Order};
use super::{Fp4Format, Fp4Prepacked};
use crate::device::{
    Context, DeviceBuffer, DeviceInfo, Function, LaunchConfig, Tma2d, TmaDType, TmaSwizzle,
};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::{alignment, DType};
use crate::ops::moe::schedule::{
    sched_bytes, table_bytes, TileOrder, INDEX_RING_BYTES, MAX_EXPERTS,
};
use crate::ops::moe::trace::TraceBuffer;
use crate::ops::moe::{
    common_support, tile_prefix, with_dtypes, x_map, MoeOperands, MoeProblem, Rows,
};
use crate::overrides::MoeOverrides;
use serde::Serialize;

pub const ENTRY: &str = "moe_fp4_experts";
/// The path that dequantises each stage once per CTA into shared memory.
pub const ENTRY_DQ: &str = "moe_fp4_experts_dq";
pub const NAME: &str = "fp4_experts";
pub const THREADS: u32 = 384;
/// Token rows per X box (fewer in a tile of 8 tokens): a tile loads only the boxes its tokens need.
pub const XBOX: u32 = 16;
/// Shared memory per block on Hopper (227 KB), with one CTA per SM.
const SMEM_LIMIT: u32 = 227 * 1024;
/// Shared memory per SM (228 KB), of which each block reserves 1 KB.
const SMEM_PER_SM: u32 = 228 * 1024;
/// The shared-memory path's bf16 slots: three stages of two decoded 64 x 64 atoms.
const DQ_SLOT_BYTES: u32 = 3 * 2 * 64 * 64 * 2;
/// The most experts of a launch whose paired decode tiles `KILN_FP4_DEEP` deepens.
pub const DEEP_EXPERTS: u32 = 256;
/// Bytes a row of the weights' tensor map under `KILN_FP4_LOAD=tma` (the kernel's `W_ROW`):
/// both formats' atoms are whole rows (NVFP4 18, MXFP4 17).
pub const W_MAP_ROW: usize = 128;
/// The decode tiles' run: a weight block's atoms of this many consecutive stages in one bulk
/// copy (`KILN_FP4_RUN`'s default; the kernel's `RUN`). On an H200 (2026-11-30, two rounds,
/// docs/moe.md ledger F37) 4 against one copy an atom: the E256 decode's NVFP4 SwiGLU at 512
/// rows 84.7 -> 91.5 % of the copy rate, 64 rows 79.5 -> 85.7 %; MXFP4 alike.
pub const DEFAULT_RUN: u32 = 4;
/// The wide tiles' (64-256 tokens, register path) load: X of a stage as one TMA box of the whole
/// tile and the weight atoms of this many stages in one bulk copy (`KILN_FP4_XTILE`'s default).
/// With [`DEFAULT_EPI`], on an H200 (2026-11-30, docs/moe.md ledger F81, F82; each won two
/// rounds, the pair a third): 8 experts x 7,516 rows 810 -> 632-638 us (1.11x kiln's bf16),
/// E64 8,192 rows 263 -> 199-201 (1.22x), E256 32,768 rows 4,018 -> 3,385 (1.29x).
pub const DEFAULT_XTILE: u32 = 2;
/// The wide tiles' epilogue: a tile's routing weights loaded at once, then the stores
/// (`KILN_FP4_EPI=ahead`, 1; docs/moe.md ledger F80, F82).
pub const DEFAULT_EPI: u32 = 1;
/// The wide tiles launched as the prefix kernel's programmatic dependent by default
/// (`KILN_FP4_PDL=wide`, from 2026-12-01, ledger F210).
pub const DEFAULT_PDL_WIDE: bool = true;

/// The prepacked weights at `addr` seen as rows of [`W_MAP_ROW`] bytes, a box one atom
/// (`KILN_FP4_LOAD=tma`: the producer loads each atom as a TMA box instead of a bulk copy). No
/// swizzle: the bytes land as a bulk copy would put them. The L2 promotion is the 2D maps' rule
/// (256 B: rows start on 128-byte lines), or `KILN_TMA_PROMOTION`'s.
pub fn w_map(l: &Fp4Layout, addr: u64) -> Tma2d {
    let rows = l.experts * l.expert_bytes() / W_MAP_ROW;
    Tma2d {
        dtype: TmaDType::U8,
        addr,
        dims: [W_MAP_ROW as u64, rows as u64],
        row_stride_bytes: W_MAP_ROW as u64,
        box_dims: [W_MAP_ROW as u32, (atom_bytes(l.format) / W_MAP_ROW) as u32],
        swizzle: TmaSwizzle::None,
    }
}

/// Where the weights are dequantised: in each consumer's registers, straight into wgmma's A
/// operand (`fp4_experts.cu`), or once per CTA into shared memory, read by both consumers
/// (`fp4_experts_dq.cu`: the fused SwiGLU with bf16 activations, tiles of 256 tokens).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fp4Path {
    Rs,
    Dq,
}

impl Fp4Path {
    pub fn parse(s: &str) -> Option<Fp4Path> {
        match s {
            "rs" => Some(Fp4Path::Rs),
            "dq" => Some(Fp4Path::Dq),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Fp4Path::Rs => "rs",
            Fp4Path::Dq => "dq",
        }
    }
}

/// A tile shape: up to `tt` tokens of one expert by 128 output columns (the shared-memory path:
/// 256 tokens by 64 SwiGLU columns), `stages` deep, `ctas` CTAs per SM (2: the SwiGLU's 8-token
/// decode tile under `KILN_FP4_CTAS=2`, each CTA with half the shared memory and registers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fp4Tile {
    pub tt: u32,
    pub stages: u32,
    pub path: Fp4Path,
    pub ctas: u32,
    /// The most experts its shared-memory tables hold: `MAX_EXPERTS`, or fewer under
    /// `KILN_FP4_DEEP` ([`Fp4Tile::with_tables`]), whose room goes to stages.
    pub experts: u32,
    /// Output columns of a tile: 128, or 256 for the grouped GEMM's 128-token tile under
    /// `KILN_FP4_GCOLS=256` ([`Fp4Tile::gemm_cols`]: two weight blocks a consumer a stage).
    pub cols: u32,
}

impl Fp4Tile {
    /// The narrow decode tiles, 8 or 16 tokens (wgmma N 8 or 16): the X stage shrinks to 1-2 KB,
    /// which leaves room for more stages of weights than [`Fp4Tile::decode`].
    pub fn narrow(tt: u32, swiglu: bool) -> Fp4Tile {
        debug_assert!(tt == 8 || tt == 16);
        Self::rs(tt, swiglu)
    }
    /// Decode (at most 64 rows per expert): a small X tile leaves room for many stages, so each
    /// SM keeps 60-100 KB of weights in flight.
    pub fn decode(swiglu: bool) -> Fp4Tile {
        Self::rs(64, swiglu)
    }
    /// Prefill: tokens up to the accumulator budget (128 registers a thread).
    pub fn prefill(swiglu: bool) -> Fp4Tile {
        Self::rs(if swiglu { 128 } else { 256 }, swiglu)
    }
    /// The grouped GEMM's wide tile of `tt` tokens (128 to 256, a multiple of 32; 256 is
    /// [`Fp4Tile::prefill`]): `tt / 2` accumulators a consumer thread, one wgmma batch in
    /// flight, as many stages as its X leaves room for (`KILN_FP4_TILE=count-fit`,
    /// [`super::gemm_tile::fit`]).
    pub fn gemm_wide(tt: u32) -> Fp4Tile {
        debug_assert!((128..=256).contains(&tt) && tt.is_multiple_of(32));
        Self::rs(tt, false)
    }
    /// The shared-memory path (the fused SwiGLU): 256 tokens, 128 per consumer.
    pub fn dq() -> Fp4Tile {
        let probe = Fp4Tile {
            tt: 256,
            stages: 0,
            path: Fp4Path::Dq,
            ctas: 1,
            experts: MAX_EXPERTS as u32,
            cols: TILE_N as u32,
        };
        Fp4Tile {
            stages: probe.most_stages(true),
            ..probe
        }
    }

    fn rs(tt: u32, swiglu: bool) -> Fp4Tile {
        let probe = Fp4Tile {
            tt,
            stages: 0,
            path: Fp4Path::Rs,
            ctas: 1,
            experts: MAX_EXPERTS as u32,
            cols: TILE_N as u32,
        };
        Fp4Tile {
            stages: probe.most_stages(swiglu),
            ..probe
        }
    }

    /// The grouped GEMM's tile of 128 tokens by 256 output columns (`KILN_FP4_GCOLS=256`): each
    /// consumer two 64-row weight blocks a stage, so a stage's 16 KB of X serve 256 weight rows
    /// (the 256-token tile's 32 KB serve 128), and the ring holds 8 stages instead of 5.
    pub fn gemm_cols() -> Fp4Tile {
        let probe = Fp4Tile {
            cols: 2 * TILE_N as u32,
            ..Self::rs(128, false)
        };
        Fp4Tile {
            stages: probe.most_stages(false),
            ..probe
        }
    }

    /// [`Fp4Tile::gemm_cols`] in place of this tile where `cols` (`KILN_FP4_GCOLS`) is 256 and
    /// this is the grouped GEMM's 256-token tile with bf16 activations, N padded to a multiple
    /// of 256 (the producer reads four 64-row blocks a tile: none past the expert's); else this.
    pub fn with_gemm_cols(self, p: &MoeProblem, cols: u32) -> Fp4Tile {
        let fits = p.swiglu.is_none()
            && p.input == DType::Bf16
            && p.n.div_ceil(TILE_N).is_multiple_of(2)
            && self.path == Fp4Path::Rs
            && self.tt == 256;
        if cols > TILE_N as u32 && fits {
            Self::gemm_cols()
        } else {
            self
        }
    }

    /// The same tile at two CTAs per SM: as many stages as half an SM holds.
    pub fn paired(self, swiglu: bool) -> Fp4Tile {
        self.at_ctas(2, swiglu)
    }

    /// The same tile at `ctas` CTAs per SM: as many stages as its share of an SM holds.
    pub fn at_ctas(self, ctas: u32, swiglu: bool) -> Fp4Tile {
        let probe = Fp4Tile { ctas, ..self };
        Fp4Tile {
            stages: probe.most_stages(swiglu),
            ..probe
        }
    }

    /// The same tile with tables for at most `experts` experts (`KILN_FP4_DEEP`, the paired
    /// decode tiles of launches of up to 256 experts): the 12 KB that tables for
    /// `MAX_EXPERTS` take of a CTA's 113 KB become a stage more of weights in flight (the
    /// SwiGLU's 10 instead of 9; the GEMM's 18 instead of 16).
    pub fn with_tables(self, experts: u32, swiglu: bool) -> Fp4Tile {
        let probe = Fp4Tile { experts, ..self };
        Fp4Tile {
            stages: probe.most_stages(swiglu),
            ..probe
        }
    }

    fn most_stages(self, swiglu: bool) -> u32 {
        let stage = self.stage_bytes(swiglu) + 16;
        (self.smem_limit() - self.fixed_bytes()) / stage
    }

    /// Shared memory one block may take.
    pub fn smem_limit(self) -> u32 {
        if self.ctas > 1 {
            SMEM_PER_SM / self.ctas - 1024
        } else {
            SMEM_LIMIT
        }
    }

    /// One stage: the X tile, then the weight atoms of both consumers (the larger NVFP4 atom, so
    /// one size serves both formats), rounded to 1 KB.
    pub fn stage_bytes(self, swiglu: bool) -> u32 {
        let atoms = if (swiglu || self.cols > TILE_N as u32) && self.path == Fp4Path::Rs {
            4
        } else {
            2
        };
        self.tt * 64 * 2 + (atoms * atom_bytes(Fp4Format::Nvfp4) as u32).div_ceil(1024) * 1024
    }

    fn fixed_bytes(self) -> u32 {
        let slots = if self.path == Fp4Path::Dq {
            DQ_SLOT_BYTES
        } else {
            0
        };
        1024 + INDEX_RING_BYTES + table_bytes(self.experts as usize) as u32 + slots
    }

    pub fn smem_bytes(self, swiglu: bool) -> u32 {
        self.fixed_bytes() + self.stages * (self.stage_bytes(swiglu) + 16)
    }

    /// Output columns of a tile.
    pub fn bn(self, swiglu: bool) -> usize {
        if self.path == Fp4Path::Dq && swiglu {
            TILE_N / 2
        } else {
            self.cols as usize
        }
    }

    /// The narrowest tile that holds the most rows any expert has (the host copy of the rows,
    /// or the masked capacity): 8, 16, 64 (decode), else prefill. f16 activations compile no
    /// prefill tile and take the decode tile above 16 rows.
    pub fn choose(p: &MoeProblem) -> Fp4Tile {
        Self::choose_with(p, None)
    }

    /// [`Fp4Tile::choose`] with the path forced (`KILN_FP4_PATH`): `Some(Dq)` takes the
    /// shared-memory tile at any count, `Some(Rs)` or `None` never; with `ctas` above 1
    /// (`KILN_FP4_CTAS`, 2 by default) the 8-token decode tile of the SwiGLU with bf16 activations
    /// runs that many CTAs per SM (the 16-token one does not fit 104 registers a consumer: it
    /// spills and serialises its wgmmas). Two CTAs ran the 512-row decode (E256, K 7168, N 2048)
    /// in 1,057 against 1,295 us on an H200 (2026-11-29): 73.8 % of the copy bandwidth against
    /// 60.6 %.
    /// `gemm_too` (`KILN_FP4_PAIR=all`) pairs the grouped GEMM's 8-token tile as well (4
    /// accumulators a consumer thread against the SwiGLU's 8: it fits 104 registers).
    pub fn choose_paired(
        p: &MoeProblem,
        path: Option<Fp4Path>,
        ctas: u32,
        gemm_too: bool,
    ) -> Fp4Tile {
        Self::choose_with(p, path).paired_for(p, ctas, gemm_too)
    }

    /// This tile at `ctas` CTAs an SM where [`Self::choose_paired`] pairs it: the 8-token tile
    /// of the register path with bf16 activations, the SwiGLU's (and the GEMM's with `gemm_too`).
    pub fn paired_for(self, p: &MoeProblem, ctas: u32, gemm_too: bool) -> Fp4Tile {
        let swiglu = p.swiglu.is_some();
        if ctas > 1
            && (swiglu || gemm_too)
            && p.input == DType::Bf16
            && self.path == Fp4Path::Rs
            && self.tt == 8
        {
            self.at_ctas(ctas, swiglu)
        } else {
            self
        }
    }

    /// Whether the 8-token tile takes at most a quarter more tiles than the 16-token one for
    /// `p`'s rows (contiguous, known on the host): an expert of 9-16 rows is two 8-token tiles,
    /// which stream its weights twice (from L2, the second, when they run side by side), but the
    /// 8-token tile runs two CTAs an SM (`KILN_FP4_NARROW`, docs/moe.md ledger F52).
    pub fn eight_pays(p: &MoeProblem) -> bool {
        if p.is_masked() {
            return false;
        }
        let (mut t8, mut t16) = (0usize, 0usize);
        for (_, c) in p.spans() {
            t8 += c.div_ceil(8);
            t16 += c.div_ceil(16);
        }
        t16 > 0 && 4 * t8 <= 5 * t16
    }

    /// [`Fp4Tile::choose`] with the path forced (`KILN_FP4_PATH`): `Some(Dq)` takes the
    /// shared-memory tile at any count, `Some(Rs)` never.
    pub fn choose_with(p: &MoeProblem, path: Option<Fp4Path>) -> Fp4Tile {
        let swiglu = p.swiglu.is_some();
        let most = match &p.rows {
            Rows::Masked { max_rows, .. } => *max_rows,
            Rows::Contiguous { .. } => p.spans().iter().map(|s| s.1).max().unwrap_or(0),
        };
        // The shared-memory path only where forced: on an H200 (2026-11-29) it was slower than
        // the register path wherever its rule had taken it (E64 8,192 rows, K 2048, N 1408:
        // 339 against 266 us; E256 32,768 rows, K 7168, N 2048: 5,208 against 4,088 us).
        let dq = path == Some(Fp4Path::Dq);
        match most {
            _ if dq => Self::dq(),
            0..=8 => Self::narrow(8, swiglu),
            9..=16 => Self::narrow(16, swiglu),
            _ if most <= 64 || p.input == DType::F16 => Self::decode(swiglu),
            _ => Self::prefill(swiglu),
        }
    }

    /// Every tile [`Fp4Tile::choose`] may pick for `swiglu`, narrowest first; the fourth is
    /// prefill, which f16 activations do not compile; the SwiGLU's fifth is the shared-memory
    /// path (bf16 only).
    pub fn all(swiglu: bool) -> Vec<Fp4Tile> {
        let mut v = vec![
            Self::narrow(8, swiglu),
            Self::narrow(16, swiglu),
            Self::decode(swiglu),
            Self::prefill(swiglu),
        ];
        if swiglu {
            v.push(Self::dq());
        }
        v.push(Self::narrow(8, swiglu).paired(swiglu));
        v
    }

    /// The decode tiles of 8 and 16 tokens on the register path: their X of a stage is one box,
    /// so the producer may bring a block's atoms of several stages in one copy (`KILN_FP4_RUN`),
    /// and they split a last wave in K (`KILN_FP4_TAIL`; the wider tiles under `KILN_FP4_FILL`).
    pub fn narrow_rs(self) -> bool {
        self.tt <= 16 && self.path == Fp4Path::Rs
    }

    /// Token rows per TMA box of X: the kernel's `XBOX`.
    pub fn x_box(self) -> u32 {
        XBOX.min(self.tt)
    }

    /// Token tiles that can exist for any rows the GPU may hold.
    pub fn max_tiles_m(self, p: &MoeProblem) -> u64 {
        max_tiles_m(p, self.tt as usize)
    }

    /// What `kiln moe bench` prints for it.
    pub fn label(self) -> String {
        match self.path {
            Fp4Path::Rs => format!(
                "swapAB {}x{} (wgmma N 8..{}, {} stages{})",
                self.cols,
                self.tt,
                self.tt,
                self.stages,
                if self.ctas > 1 {
                    format!(", {} CTAs an SM", self.ctas)
                } else {
                    String::new()
                }
            ),
            Fp4Path::Dq => format!(
                "swapAB, smem-dequant {}x256 (2 x 128 tokens, {} stages)",
                TILE_N / 2,
                self.stages
            ),
        }
    }
}

/// Each buffer against the bytes the problem needs (name, buffer, bytes), then X and the weights
/// (`x_and_w`) against the 16-byte alignment the copies need; one sentence per fault.
/// The prepacked weights' experts, N, K and kind (`swiglu`: W1 and W3 packed together) against
/// the problem's, for the 4-bit and the W4A8 kernels alike; `swiglu_prepack` names the
/// function that packs the pair.
pub(crate) fn check_weights_fit(
    weights: (usize, usize, usize, bool),
    problem: (usize, usize, usize, bool),
    swiglu_prepack: &str,
) -> Result<()> {
    let ((le, ln, lk, lswiglu), (pe, pn, pk, pswiglu)) = (weights, problem);
    if (le, ln, lk) != (pe, pn, pk) {
        return Err(Error::invalid(format!(
            "the prepacked weights are E {le} x N {ln} x K {lk} but the problem is E {pe} x N {pn} x K {pk}"
        )));
    }
    if lswiglu != pswiglu {
        return Err(Error::invalid(if lswiglu {
            "these weights were prepacked for the fused SwiGLU (W1 and W3); prepack W alone for a grouped GEMM".to_string()
        } else {
            format!("the fused SwiGLU needs W1 and W3 prepacked together ({swiglu_prepack})")
        }));
    }
    Ok(())
}

/// A routed SwiGLU's routing weights (one f32 per X row) added to the buffers `check_buffers`
/// checks; refused when they are missing.
pub(crate) fn need_routing<'a>(
    need: &mut Vec<(&'static str, &'a DeviceBuffer, usize)>,
    routed: bool,
    route: Option<&'a DeviceBuffer>,
    x_rows: usize,
) -> Result<()> {
    if routed {
        let r = route.ok_or_else(|| Error::invalid("a routed SwiGLU needs the routing weights"))?;
        need.push(("the routing weights", r, x_rows * 4));
    }
    Ok(())
}

pub(crate) fn check_buffers(
    need: &[(&str, &DeviceBuffer, usize)],
    x_and_w: &[u64; 2],
) -> Result<()> {
    for (name, buf, bytes) in need {
        if buf.bytes() < *bytes {
            return Err(Error::invalid(format!(
                "{name} needs {bytes} bytes for this problem but its buffer has {}",
                buf.bytes()
            )));
        }
    }
    for (name, ptr) in ["X", "the prepacked weights"].into_iter().zip(x_and_w) {
        if alignment(*ptr) < 16 {
            return Err(Error::invalid(format!(
                "{name} at {ptr:#x} is not 16-byte aligned, which the copies need"
            )));
        }
    }
    Ok(())
}

/// The argument block, laid out as `Fp4Args` in `kernels/moe/fp4_experts.cu`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Fp4Args {
    pub sched: u64,
    pub y: u64,
    pub route: u64,
    pub escale: u64,
    pub w: u64,
    pub ldy: i64,
    pub expert_bytes: i64,
    pub experts: i32,
    pub n: i32,
    pub katoms: i32,
    pub tiles_n: i32,
    pub group_m: i32,
    pub by_expert: i32,
}

/// The kernel's `Fp4Rows` (`KILN_FP4_PDL=own`): what each CTA builds its tables from,
/// `moe_tile_prefix`'s arguments.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Fp4Rows {
    pub rows_in: u64,
    pub x_rows: i32,
    pub max_rows: i32,
    pub masked: i32,
    pub bm: i32,
}

/// The most experts `KILN_FP4_PDL=own`'s CTAs build their tables for: the prefix kernel's
/// `MOE_SORT_MAX` (it sorts up to that many; each CTA's warp 0 redoes its work).
pub const OWN_TABLES_MAX_EXPERTS: usize = 64;

/// The kernel's `Fp4Split`: the last wave's split workspace (see the kernel's top comment).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Fp4Split {
    pub ws: u64,
    pub counters: u64,
    pub max_splits: i32,
    /// `KILN_FP4_BALANCE` (the default): 1 lets the kernel pick the slice count that ends any
    /// last wave first (then up to `max_splits` slices of every tile of a wave of up to a grid).
    pub balance: i32,
}

/// The most K slices `KILN_FP4_TAIL` may ask for (the kernel takes min(CTAs / tail tiles, this,
/// K atoms / 4)).
pub const MAX_TAIL_SPLITS: u32 = 16;

/// Bytes of the last wave's split workspace for a grid of `ctas`: at most `ctas` slices (tail
/// tiles x slices), each a partial of 256 consumer threads x `tt / 2` accumulators per weight atom
/// of a consumer (two for the SwiGLU).
pub fn split_workspace_bytes(ctas: u32, tt: u32, swiglu: bool) -> usize {
    let atoms = if swiglu { 2 } else { 1 };
    ctas as usize * 256 * (atoms * tt as usize / 2) * 4
}

/// What the kernel needs to know of prepacked weights on the GPU (the bytes live in a buffer).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fp4Layout {
    pub format: Fp4Format,
    pub experts: usize,
    pub n: usize,
    pub k: usize,
    pub swiglu: bool,
    pub min_scale_byte: u8,
}

impl Fp4Prepacked {
    pub fn layout(&self) -> Fp4Layout {
        Fp4Layout {
            format: self.format,
            experts: self.experts,
            n: self.n,
            k: self.k,
            swiglu: self.swiglu,
            min_scale_byte: self.min_scale_byte,
        }
    }
}

impl Fp4Layout {
    fn prepacked(self) -> Fp4Prepacked {
        Fp4Prepacked {
            format: self.format,
            experts: self.experts,
            n: self.n,
            k: self.k,
            swiglu: self.swiglu,
            bytes: Vec::new(),
            escale: Vec::new(),
            min_scale_byte: self.min_scale_byte,
        }
    }
    pub fn expert_bytes(self) -> usize {
        self.prepacked().expert_bytes()
    }
    pub fn halves(self) -> usize {
        if self.swiglu {
            2
        } else {
            1
        }
    }
}

/// The device buffers of one call.
pub struct Fp4Operands<'a> {
    /// X: [x_rows, K] (contiguous) or [E, max_rows, K] (masked), bf16 or f16.
    pub x: &'a DeviceBuffer,
    /// The prepacked weights ([`Fp4Prepacked::bytes`]).
    pub w: &'a DeviceBuffer,
    /// The epilogue factors ([`Fp4Prepacked::escale`]), f32.
    pub escale: &'a DeviceBuffer,
    pub y: &'a DeviceBuffer,
    pub rows: &'a DeviceBuffer,
    pub route: Option<&'a DeviceBuffer>,
    /// At least `schedule::sched_bytes(E)`.
    pub sched: &'a DeviceBuffer,
}

/// The kernel's `KILN_FP4_EPI` for `KILN_FP4_EPI`'s value `epi` (0 `each`, 1 `ahead`, 2
/// `defer`) on `tile` whose weights come in runs of `run` stages (`KILN_FP4_XTILE`): none on the
/// decode tiles and the shared-memory path; 1 for `defer` on the 64-token tile and with runs
/// (with half their stores deferred ptxas serialises those kernels' wgmmas: C7511, C7513).
pub(crate) fn epi_define(epi: u32, tile: Fp4Tile, run: u32) -> Option<u32> {
    if epi == 0 || tile.tt < 64 || tile.path != Fp4Path::Rs {
        return None;
    }
    Some(if tile.tt < 128 || run > 1 || tile.cols > TILE_N as u32 {
        1
    } else {
        epi
    })
}

/// `KILN_FP4_XTILE`'s run (1, 2 or 4 stages of weights a copy) on `tile`, or none: none when the
/// knob is 0, on the decode tiles (one box a stage already, runs by `KILN_FP4_RUN`) and the
/// shared-memory path; a copy an atom under `KILN_FP4_LOAD=tma` (the map load takes no runs).
/// The most experts a launch may have for `KILN_FP4_ORDER=whole-first`: the kernel finds a
/// tile's m-tile by walking the experts (a few hundred cycles at 64, against a wide tile's
/// tens of microseconds).
pub const ORDER_EXPERTS: usize = 64;

/// Whether the whole-first order applies to `p` on `tile` over `sms` SMs: a wide tile of the
/// register path (the decode tiles' launches are of short tiles throughout) and at most
/// [`ORDER_EXPERTS`] experts, under `KILN_FP4_ORDER=whole-first`, or under `auto` where
/// [`order::whole_first_pays`].
pub(crate) fn order_whole_first(o: &MoeOverrides, p: &MoeProblem, tile: Fp4Tile, sms: u32) -> bool {
    let applies = !tile.narrow_rs() && tile.path == Fp4Path::Rs && p.experts <= ORDER_EXPERTS;
    applies
        && match o.fp4_order {
            Fp4Order::Experts => false,
            Fp4Order::WholeFirst => true,
            Fp4Order::Auto => order::whole_first_pays(p, tile, sms),
        }
}

pub(crate) fn xtile_run(xtile: u32, load_tma: bool, tile: Fp4Tile) -> Option<u32> {
    if xtile == 0 || tile.narrow_rs() || tile.path != Fp4Path::Rs {
        return None;
    }
    Some(if load_tma { 1 } else { xtile })
}

pub struct Fp4Experts;

impl Fp4Experts {
    /// The kernel of `tile` as the default path compiles it (what `kiln check` compiles and the
    /// launch builds without knobs): the decode tiles with runs of [`DEFAULT_RUN`] atoms a copy,
    /// the wide tiles with [`DEFAULT_XTILE`]'s load and [`DEFAULT_EPI`]'s epilogue.
    pub fn spec(arch: &str, input: DType, f: Fp4Format, swiglu: bool, tile: Fp4Tile) -> KernelSpec {
        let spec = Self::spec_run(arch, input, f, swiglu, tile, DEFAULT_RUN);
        let spec = Self::with_wide_forms(
            spec,
            tile,
            xtile_run(DEFAULT_XTILE, false, tile),
            DEFAULT_EPI,
        );
        Self::with_wide_dependent(spec, tile, DEFAULT_PDL_WIDE)
    }

    /// `spec` (of `tile`) waiting for the prefix kernel's tables in `griddepcontrol.wait`
    /// (`KILN_FP4_PDL=wide`, the launch a programmatic dependent) where `on` and `tile` is a
    /// register-path tile of 64 tokens or more; else `spec`.
    pub fn with_wide_dependent(spec: KernelSpec, tile: Fp4Tile, on: bool) -> KernelSpec {
        if on && tile.tt >= 64 && tile.path == Fp4Path::Rs {
            spec.define("KILN_FP4_PDL", 1)
        } else {
            spec
        }
    }

    /// `spec` (of `tile`) with the wide tiles' load and epilogue forms: `xtile` the run of
    /// [`xtile_run`] (none: X in boxes of 16 rows and a copy an atom, the kernel's own default)
    /// and `epi` `KILN_FP4_EPI`'s value (0, `each`: no define). Nothing on the other tiles.
    pub fn with_wide_forms(
        mut spec: KernelSpec,
        tile: Fp4Tile,
        xtile: Option<u32>,
        epi: u32,
    ) -> KernelSpec {
        if let Some(run) = xtile {
            spec = spec.define("KILN_FP4_XBOX", tile.tt);
            if run > 1 {
                spec = spec.define("KILN_FP4_RUN", run);
            }
        }
        match epi_define(epi, tile, xtile.unwrap_or(1)) {
            Some(e) => spec.define("KILN_FP4_EPI", e),
            None => spec,
        }
    }

    /// The bare kernel of `tile` with the decode tiles' weight atoms of `run` stages a bulk copy
    /// (1: a copy an atom, the kernel's own default, so no define) and the wide tiles in their
    /// old forms (boxes of 16 X rows, a copy an atom, each routing weight before its stores;
    /// [`Self::with_wide_forms`] adds others).
    pub fn spec_run(
        arch: &str,
        input: DType,
        f: Fp4Format,
        swiglu: bool,
        tile: Fp4Tile,
        run: u32,
    ) -> KernelSpec {
        let spec = Self::spec_base(arch, input, f, swiglu, tile);
        if run > 1 && tile.narrow_rs() {
            spec.define("KILN_FP4_RUN", run)
        } else {
            spec
        }
    }

    fn spec_base(
        arch: &str,
        input: DType,
        f: Fp4Format,
        swiglu: bool,
        tile: Fp4Tile,
    ) -> KernelSpec {
        let spec = match tile.path {
            Fp4Path::Rs => KernelSpec::new("moe/fp4_experts.cu", ENTRY, arch),
            Fp4Path::Dq => KernelSpec::new("moe/fp4_experts_dq.cu", ENTRY_DQ, arch),
        };
        let spec = with_dtypes(spec, input, input)
            .define("KILN_FP4", f.code())
            .define("KILN_SWIGLU", swiglu as u32);
        let spec = match tile.path {
            Fp4Path::Rs => spec.define("KILN_TT", tile.tt),
            Fp4Path::Dq => spec,
        };
        let spec = match tile.path {
            Fp4Path::Rs => spec.define("KILN_CTAS", tile.ctas),
            Fp4Path::Dq => spec,
        };
        let spec = spec
            .define("KILN_STAGES", tile.stages)
            .define("KILN_MAX_EXPERTS", tile.experts)
            .define("KILN_SMEM", tile.smem_bytes(swiglu));
        // KILN_FP4_GCOLS=256: the GEMM's tile of 256 columns (compiled when asked for)
        if tile.cols > TILE_N as u32 {
            spec.define("KILN_FP4_GCOLS", tile.cols)
        } else {
            spec
        }
    }

    /// Every specialisation, for `kiln check`: both ops and formats with bf16 activations and
    /// every register-path tile but the single 8-token one, which bf16 runs paired
    /// (`KILN_FP4_CTAS=1` and `KILN_FP4_PAIR=swiglu` compile it when asked for), the SwiGLU's
    /// wide tiles cut in K as `KILN_FP4_TILE=count-fit` (the default) launches them where a
    /// launch has few ([`dispatch::few_wide`]), the grouped GEMM's tiles count-fit adds (those
    /// of [`gemm_tile::COMPILED`] tokens, those of [`gemm_tile::COMPILED_CUT`] cut in K), and
    /// the SwiGLU's 128-token tile in the whole-first order as `KILN_FP4_ORDER=auto` (the
    /// default) launches it ([`order::auto_tile`]; never cut in K: auto takes no launch of one
    /// round). Not the
    /// SwiGLU's shared-memory tile, which runs only where `KILN_FP4_PATH=dq` forces it
    /// (compiled when asked for; ledger F161). NVFP4 with f16 activations on the
    /// register path's tiles but prefill (which [`Fp4Tile::choose`] never gives f16). MXFP4 with
    /// f16 is not compiled: f16 holds MXFP4 weights exactly only within 2^24 of scale range, and
    /// the compile gate's variant budget is spent. The prefix kernel is the 16-bit MoE kernels'
    /// (checked with them).
    pub fn variants(arch: &str) -> Vec<KernelSpec> {
        if !crate::jit::arch::has_wgmma(arch) {
            return Vec::new();
        }
        let mut v = Vec::new();
        for swiglu in [false, true] {
            let tiles = Fp4Tile::all(swiglu);
            let launched = |t: &&Fp4Tile| !(t.tt == 8 && t.ctas == 1) && t.path == Fp4Path::Rs;
            for f in Fp4Format::ALL {
                for tile in tiles.iter().filter(launched) {
                    v.push(Self::spec(arch, DType::Bf16, f, swiglu, *tile));
                }
                if swiglu {
                    for tile in [Fp4Tile::decode(true), Fp4Tile::prefill(true)] {
                        let spec = Self::spec(arch, DType::Bf16, f, true, tile);
                        v.push(spec.define("KILN_FP4_WSPLIT", 1));
                    }
                    let wide = Self::spec(arch, DType::Bf16, f, true, Fp4Tile::prefill(true));
                    v.push(wide.define("KILN_FP4_ORDER", 1));
                } else {
                    let gemm = |tt| Self::spec(arch, DType::Bf16, f, false, Fp4Tile::gemm_wide(tt));
                    v.extend(gemm_tile::COMPILED.map(gemm));
                    let cut = |tt| gemm(tt).define("KILN_FP4_WSPLIT", 1);
                    v.extend(gemm_tile::COMPILED_CUT.map(cut));
                }
            }
            for tile in &tiles[..3] {
                v.push(Self::spec(
                    arch,
                    DType::F16,
                    Fp4Format::Nvfp4,
                    swiglu,
                    *tile,
                ));
            }
        }
        v
    }

    /// `Ok` or why `p` with weights `l` cannot run on `dev`.
    pub fn supports(
        p: &MoeProblem,
        l: &Fp4Layout,
        dev: &DeviceInfo,
    ) -> std::result::Result<(), String> {
        common_support(p, dev)?;
        if p.output != p.input {
            return Err(format!(
                "writes {} from {} activations only; ask for the activations' dtype, not {}",
                p.input, p.input, p.output
            ));
        }
        if l.format == Fp4Format::Mxfp4 && p.input == DType::F16 {
            return Err(
                "MXFP4 weights take bf16 activations (f16 is compiled for NVFP4 only)".into(),
            );
        }
        if p.w_expert_stride.is_some() {
            return Err(
                "prepacked weights are packed; a weight expert stride does not apply".into(),
            );
        }
        dev.check_smem(Fp4Tile::choose(p).smem_bytes(p.swiglu.is_some()))?;
        Ok(())
    }

    /// The tile `launch` runs: [`Fp4Tile::choose_with`] under the context's `KILN_FP4_PATH`, or
    /// why a forced shared-memory path cannot run `p`.
    pub fn tile(ctx: &Context, p: &MoeProblem) -> Result<Fp4Tile> {
        Self::tile_with(p, &ctx.overrides.moe, ctx.info.sm_count)
    }

    /// [`Self::tile`] under the knobs `o` on `sms` SMs.
    pub fn tile_with(p: &MoeProblem, o: &MoeOverrides, sms: u32) -> Result<Fp4Tile> {
        let path = o.fp4_path;
        if path == Some(Fp4Path::Dq) && (p.swiglu.is_none() || p.input != DType::Bf16) {
            return Err(Error::Unsupported {
                kernel: NAME.into(),
                reason: "KILN_FP4_PATH=dq runs the fused SwiGLU with bf16 activations only; unset it for this problem".into(),
            });
        }
        let mut tile = Fp4Tile::choose_paired(p, path, o.fp4_ctas, o.fp4_pair_gemm);
        // KILN_FP4_TILE=8|16|64|wide|128..256: that tile whatever the rows (the register path)
        if let (Fp4TileRule::Tokens(tt), Fp4Path::Rs) = (o.fp4_tile, tile.path) {
            if (tt == 0 || tt >= 128) && p.input != DType::Bf16 {
                return Err(Error::invalid(
                    "KILN_FP4_TILE=wide and 128-256 run bf16 activations only (f16 compiles no wide tile); unset it or ask for 8, 16 or 64",
                ));
            }
            if tt > 128 && p.swiglu.is_some() {
                return Err(Error::invalid(format!(
                    "KILN_FP4_TILE={tt} is a grouped GEMM tile; the fused SwiGLU's widest is 128 tokens: ask for 128 or wide"
                )));
            }
            return Ok(dispatch::tile_of(p, tt, o.fp4_ctas, o.fp4_pair_gemm));
        }
        // KILN_FP4_NARROW (1 by default): the 8-token tile (paired as the dispatch pairs it) in
        // place of the 16-token one where that costs at most a quarter more tiles
        if o.fp4_narrow && tile.tt == 16 && tile.path == Fp4Path::Rs && Fp4Tile::eight_pays(p) {
            let eight = Fp4Tile::narrow(8, p.swiglu.is_some());
            tile = eight.paired_for(p, o.fp4_ctas, o.fp4_pair_gemm);
        }
        // KILN_FP4_TILE=count-fit: the grouped GEMM's wide tile of the token count whose busiest
        // CTA ends first, in place of the 256-token one
        if o.fp4_tile.fits_gemm() {
            tile = gemm_tile::fit(p, tile, sms);
        }
        // KILN_FP4_TILE=count: a narrower tile where its estimated time is well below this one's
        // (count-pair: the same rule on the paces re-timed under the EPI/XTILE pair; count-cut
        // and count-fit cut the grouped GEMM's wide tiles in K as well where a launch has few)
        if let Some(paces) = o.fp4_tile.paces() {
            let pair = (o.fp4_ctas, o.fp4_pair_gemm);
            tile = dispatch::by_count(p, tile, sms, pair, paces, o.fp4_tile.cuts_gemm());
        }
        // KILN_FP4_GCOLS=256: the grouped GEMM's 256-token tile as 128 tokens by 256 columns
        let tile = tile.with_gemm_cols(p, o.fp4_gcols);
        // KILN_FP4_DEEP=1: the paired decode tiles with tables for up to 256 experts and the
        // stage their room makes (compiled when asked for)
        Ok(
            if o.fp4_deep
                && tile.path == Fp4Path::Rs
                && tile.ctas == 2
                && p.experts <= DEEP_EXPERTS as usize
            {
                tile.with_tables(DEEP_EXPERTS, p.swiglu.is_some())
            } else {
                tile
            },
        )
    }

    /// Checks `p`, the prepacked weights `l` and the buffers against each other.
    pub fn check(p: &MoeProblem, l: &Fp4Layout, ops: &Fp4Operands) -> Result<()> {
        p.validate()?;
        check_weights_fit(
            (l.experts, l.n, l.k, l.swiglu),
            (p.experts, p.n, p.k, p.swiglu.is_some()),
            "prepack_swiglu",
        )?;
        l.prepacked().check_activation(p.input == DType::Bf16)?;
        let es = p.input.size();
        let mut need = vec![
            ("X", ops.x, p.x_elems() * es),
            ("the prepacked weights", ops.w, l.experts * l.expert_bytes()),
            (
                "the epilogue factors",
                ops.escale,
                l.experts * l.halves() * 4,
            ),
            ("Y", ops.y, p.y_elems() * p.output.size()),
            ("the rows array", ops.rows, p.rows_array().len() * 4),
            ("the schedule workspace", ops.sched, sched_bytes(p.experts)),
        ];
        let routed = p.swiglu.is_some_and(|s| s.routed);
        need_routing(&mut need, routed, ops.route, p.x_rows())?;
        check_buffers(&need, &[ops.x.ptr(), ops.w.ptr()])
    }

    /// Enqueues the tile tables and the kernel; no host synchronisation (graph-capturable).
    pub fn launch(ctx: &Context, p: &MoeProblem, l: &Fp4Layout, ops: &Fp4Operands) -> Result<()> {
        Self::launch_tables(ctx, p, l, ops, true)
    }

    /// The tile height its tables are built for (heaviest experts first): what the MoE
    /// layer's routing builds in their place ([`Self::launch_tables`] without `build_tables`).
    pub fn tables(ctx: &Context, p: &MoeProblem) -> Result<u32> {
        Ok(Self::tile(ctx, p)?.tt)
    }

    /// The kernel with its tile tables built first (`moe_tile_prefix`, as [`Self::launch`]
    /// does) or already in `ops.sched` ([`Self::tables`]).
    pub fn launch_tables(
        ctx: &Context,
        p: &MoeProblem,
        l: &Fp4Layout,
        ops: &Fp4Operands,
        build_tables: bool,
    ) -> Result<()> {
        Self::launch_stamped(ctx, p, l, ops, build_tables, None)
    }

    /// As [`Self::launch`], the variants that stamp their phases into `trace` (the prefix
    /// kernel's and the register path's `KILN_MOE_TRACE`; `kiln moe bench --timeline`, never
    /// dispatched).
    pub fn launch_traced(
        ctx: &Context,
        p: &MoeProblem,
        l: &Fp4Layout,
        ops: &Fp4Operands,
        trace: &TraceBuffer,
    ) -> Result<()> {
        Self::launch_stamped(ctx, p, l, ops, true, Some(trace))
    }

    fn launch_stamped(
        ctx: &Context,
        p: &MoeProblem,
        l: &Fp4Layout,
        ops: &Fp4Operands,
        build_tables: bool,
        trace: Option<&TraceBuffer>,
    ) -> Result<()> {
        Self::supports(p, l, &ctx.info).map_err(|reason| Error::Unsupported {
            kernel: NAME.into(),
            reason,
        })?;
        Self::check(p, l, ops)?;
        let swiglu = p.swiglu.is_some();
        let tile = Self::tile(ctx, p)?;
        let o = &ctx.overrides.moe;
        // KILN_FP4_XTILE=R: the wide tiles' X in one box of the tile, their weights in runs of R
        let xtile = xtile_run(o.fp4_xtile, o.fp4_load_tma, tile);
        let x_box = if xtile.is_some() {
            tile.tt
        } else {
            tile.x_box()
        };
        let tx = x_map(p, ops.x.ptr(), x_box);
        tx.validate().map_err(|reason| Error::Unsupported {
            kernel: NAME.into(),
            reason,
        })?;
        let mut map_x = tx.encode_with(ctx.overrides.tma.promotion)?;
        // KILN_FP4_RUN=R: the decode tiles' weight atoms of R stages a copy (in order, bulk; 4
        // by default). The eliminated knobs that walk K otherwise or load atoms by map or ahead
        // (KILN_FP4_PREFETCH, KILN_FP4_STAGGER, KILN_FP4_LOAD=tma) were measured at a copy an
        // atom and take that.
        let prefetch = o.fp4_prefetch;
        let walks_otherwise = prefetch > 0 || o.fp4_stagger || o.fp4_load_tma;
        let run = if walks_otherwise { 1 } else { o.fp4_run };
        // KILN_FP4_XTILE and KILN_FP4_EPI: the wide tiles' load and epilogue forms (2 and
        // `ahead` by default, compiled into every wide variant; 0 and `each` the old forms)
        let spec = Self::spec_run(&ctx.arch(), p.input, l.format, swiglu, tile, run);
        let spec = Self::with_wide_forms(spec, tile, xtile, o.fp4_epi);
        // KILN_FP4_PDL=wide (the default): the tiles of 64-256 tokens as the prefix kernel's
        // dependent, tables sorted (their order sets the last wave)
        let mut spec = Self::with_wide_dependent(spec, tile, o.fp4_pdl_wide);
        if !ctx.overrides.moe.fp4_shift {
            spec = spec.define("KILN_FP4_ROT", 1); // the old decode, compiled when asked for
        }
        // KILN_FP4_MMA=sync: the 8-token tile's warps on mma.sync (compiled when asked for)
        if ctx.overrides.moe.fp4_mma_sync && tile.tt == 8 && tile.path == Fp4Path::Rs {
            spec = spec.define("KILN_FP4_MMA", 1);
        }
        // KILN_FP4_PDL=1: the decode tiles as the prefix kernel's dependent, tables unsorted
        let pdl_unsorted = ctx.overrides.moe.fp4_pdl && tile.tt <= 16 && tile.path == Fp4Path::Rs;
        if pdl_unsorted {
            spec = spec.define("KILN_FP4_PDL", 1);
        }
        let pdl_wide = o.fp4_pdl_wide && tile.tt >= 64 && tile.path == Fp4Path::Rs;
        let pdl = pdl_unsorted || pdl_wide;
        // KILN_FP4_PDL=own: the dependent CTAs build the tables themselves from the rows, where
        // the prefix kernel builds them just before (its rows then hold what the tables say)
        // (a traced launch always builds its tables: `launch_traced`)
        let own =
            pdl_wide && o.fp4_own_tables && build_tables && p.experts <= OWN_TABLES_MAX_EXPERTS;
        if own {
            spec = spec.define("KILN_FP4_OWN", 1);
        }
        let (x_rows, max_rows, masked) = tile_prefix::rows_args(p);
        let mut rows = Fp4Rows {
            rows_in: ops.rows.ptr(),
            x_rows,
            max_rows,
            masked,
            bm: tile.tt as i32,
        };
        // KILN_FP4_PREFETCH=D: the decode tiles' weight atoms asked of L2 D stages ahead
        if prefetch > 0 && tile.tt <= 16 && tile.path == Fp4Path::Rs {
            spec = spec.define("KILN_FP4_PREFETCH", prefetch);
        }
        // KILN_FP4_STAGGER=1: the decode tiles' units walk K from a point of their own
        if ctx.overrides.moe.fp4_stagger && tile.tt <= 16 && tile.path == Fp4Path::Rs {
            if prefetch > 0 {
                return Err(Error::invalid(
                    "KILN_FP4_STAGGER=1 walks K out of order, which KILN_FP4_PREFETCH does not follow: set one of them",
                ));
            }
            spec = spec.define("KILN_FP4_STAGGER", 1);
        }
        // KILN_FP4_LOAD=tma: the register path's weight atoms as TMA boxes of a map over the
        // weights (a fourth kernel parameter), compiled when asked for
        let mut map_w = if ctx.overrides.moe.fp4_load_tma && tile.path == Fp4Path::Rs {
            spec = spec.define("KILN_FP4_WTMA", 1);
            Some(w_map(l, ops.w.ptr()).encode_with(ctx.overrides.tma.promotion)?)
        } else {
            None
        };
        // KILN_FP4_FILL=1 (or KILN_FP4_TILE=count): every CTA the SMs hold, whatever the tiles
        // (a CTA without a unit exits), so the decode tiles' split reaches a launch of a few
        // tiles; the wider tiles split too (compiled when asked for) where the host counts a
        // launch or last wave of at most half the CTAs (under count: a launch of so few tiles)
        let slots = tile.ctas * ctx.info.sm_count;
        let fill = tile.path == Fp4Path::Rs
            && if tile.narrow_rs() {
                o.fp4_fill || o.fp4_tile.fills()
            } else {
                // the split's partials are 128-column tiles' (not KILN_FP4_GCOLS=256's)
                tile.cols == TILE_N as u32
                    && ((o.fp4_fill && dispatch::wide_split_pays(p, tile, slots))
                        || (o.fp4_tile.fills()
                            && dispatch::few_wide(p, tile, slots, o.fp4_tile.cuts_gemm())))
            };
        if fill && !tile.narrow_rs() {
            spec = spec.define("KILN_FP4_WSPLIT", 1);
        }
        // KILN_FP4_ORDER=whole-first: the wide tiles' whole m-tiles handed out first, on
        // launches of few experts (the kernel walks the experts to place each tile)
        if order_whole_first(o, p, tile, ctx.info.sm_count) {
            spec = spec.define("KILN_FP4_ORDER", 1);
        }
        if trace.is_some() {
            if tile.path != Fp4Path::Rs {
                return Err(Error::invalid(
                    "--timeline: the stamps are the register path's (fp4_experts.cu), not the shared-memory dequantisation's",
                ));
            }
            spec = spec.define("KILN_MOE_TRACE", 1);
        }
        let f = ctx.function(&spec)?;
        let (group_m, by_expert) = TileOrder::Fixed(1).args();
        let tiles_n = p.n.div_ceil(tile.bn(swiglu));
        let mut args = Fp4Args {
            sched: ops.sched.ptr(),
            y: ops.y.ptr(),
            route: ops.route.map_or(0, |r| r.ptr()),
            escale: ops.escale.ptr(),
            w: ops.w.ptr(),
            ldy: p.n as i64,
            expert_bytes: l.expert_bytes() as i64,
            experts: p.experts as i32,
            n: p.n as i32,
            katoms: p.k.div_ceil(ATOM_K) as i32,
            tiles_n: tiles_n as i32,
            group_m,
            by_expert,
        };
        let moe_ops = MoeOperands {
            x: ops.x,
            w: ops.w,
            w3: None,
            y: ops.y,
            rows: ops.rows,
            route: ops.route,
            sched: ops.sched,
            row_map: None,
        };
        let tiles = tile.max_tiles_m(p) * tiles_n as u64;
        let grid = if fill {
            slots as u64
        } else {
            tiles.min(slots as u64).max(1)
        } as u32;
        // The last wave's split (KILN_FP4_TAIL), on the decode tiles: the kernel decides (only
        // it knows the tile count); the workspace is kept for the largest split this grid allows.
        // The SwiGLU dual GEMM's buffers serve (one stream: the ops never overlap, and either
        // leaves its counters at zero).
        let max_splits = ctx.overrides.moe.fp4_tail.max(1);
        let mut split = Fp4Split {
            ws: 0,
            counters: 0,
            max_splits: max_splits as i32,
            balance: ctx.overrides.moe.fp4_balance as i32,
        };
        if max_splits > 1 && (tile.narrow_rs() || fill) {
            // a partial per CTA and a counter per tile of a wave at most half full; balanced,
            // up to max_splits partials per CTA and a counter per CTA
            let (partials, counters) = if split.balance != 0 {
                (grid * max_splits, grid as usize + 1)
            } else {
                (grid, grid as usize / 2 + 1)
            };
            split.ws = ctx
                .scratch
                .swiglu_split
                .at_least(ctx, split_workspace_bytes(partials, tile.tt, swiglu))?;
            split.counters = ctx
                .scratch
                .swiglu_split_counters
                .at_least(ctx, counters * 4)?;
        } else {
            split.max_splits = 1;
        }
        // heaviest experts first (up to SORT_MAX experts), each expert's n-tiles in a row; under
        // KILN_FP4_PDL the decode tiles' in the experts' order (every one streams the whole K)
        if let Some(t) = trace {
            tile_prefix::launch_traced(ctx, p, &moe_ops, tile.tt, !pdl_unsorted, t)?;
        } else if build_tables {
            tile_prefix::launch(ctx, p, &moe_ops, tile.tt, !pdl_unsorted)?;
        }
        let mut stamps = trace.map(|t| t.gemm(grid)).transpose()?.unwrap_or(0);
        let mut params = vec![map_x.as_param(), &mut args as *mut Fp4Args as *mut c_void];
        if tile.path == Fp4Path::Rs {
            params.push(&mut split as *mut Fp4Split as *mut c_void);
        }
        if let Some(m) = map_w.as_mut() {
            params.push(m.as_param());
        }
        if own {
            params.push(&mut rows as *mut Fp4Rows as *mut c_void);
        }
        if trace.is_some() {
            params.push(&mut stamps as *mut u64 as *mut c_void);
        }
        // SAFETY: the register path's kernel takes (TmaMap, Fp4Args, Fp4Split) in this order;
        // under KILN_FP4_WTMA (defined exactly when `map_w` is built) the weights' TmaMap next,
        // over the `l.experts * l.expert_bytes()` bytes `check` has matched to `ops.w`; under
        // KILN_FP4_OWN (defined exactly when `own`) the rows' Fp4Rows next (the rows buffer
        // `check` has matched, which the prefix kernel reads too); under KILN_MOE_TRACE (defined
        // exactly when `trace` is given) the trace buffer's u64* last (`TraceBuffer::gemm` has
        // checked its room for this grid). The shared-memory path's kernel takes the first two. The map addresses X, the args Y, the weights, the
        // factors, the routing weights and the schedule workspace; `check` has matched every
        // buffer to the problem and the caller keeps them alive until the stream has run. The
        // split workspace and its counters are sized for this grid (or the split is off). Under
        // KILN_FP4_PDL the kernel waits in grid_dependency_wait before it reads the tables or
        // anything else earlier work wrote, so it may start while the prefix kernel runs.
        unsafe {
            let launch = if pdl {
                launch_persistent_dependent
            } else {
                launch_persistent
            };
            launch(ctx, &f, grid as u64, tile.smem_bytes(swiglu), &mut params)
        }
    }
}

/// Launches a 4-bit expert kernel on `ctas` persistent CTAs (at least one), THREADS threads and
/// `smem` bytes of shared memory each.
///
/// # Safety
/// `params` are the kernel's parameters in its order, and every buffer they address holds
/// what the problem needs (the op's `check`) and outlives the stream's work.
pub(crate) unsafe fn launch_persistent(
    ctx: &Context,
    f: &Function,
    ctas: u64,
    smem: u32,
    params: &mut [*mut c_void],
) -> Result<()> {
    f.launch(ctx.stream, &persistent_config(ctas, smem), params)
}

/// As [`launch_persistent`] with `threads` a CTA (W4A8's decoding warpgroup: 512).
///
/// # Safety
/// As [`launch_persistent`]; the kernel is compiled for `threads`.
pub(crate) unsafe fn launch_persistent_threads(
    ctx: &Context,
    f: &Function,
    ctas: u64,
    threads: u32,
    smem: u32,
    params: &mut [*mut c_void],
) -> Result<()> {
    let mut cfg = persistent_config(ctas, smem);
    cfg.block = (threads, 1, 1);
    f.launch(ctx.stream, &cfg, params)
}

/// As [`launch_persistent`], as the previous kernel's programmatic dependent.
///
/// # Safety
/// As [`launch_persistent`]; the kernel waits (grid_dependency_wait) before it reads anything
/// earlier work wrote.
unsafe fn launch_persistent_dependent(
    ctx: &Context,
    f: &Function,
    ctas: u64,
    smem: u32,
    params: &mut [*mut c_void],
) -> Result<()> {
    f.launch_dependent(ctx.stream, &persistent_config(ctas, smem), params)
}

fn persistent_config(ctas: u64, smem: u32) -> LaunchConfig {
    LaunchConfig {
        grid: (ctas.max(1) as u32, 1, 1),
        block: (THREADS, 1, 1),
        smem_bytes: smem,
        cluster: None,
    }
}

/// Token tiles of height `tt` that can exist for any rows the GPU may hold.
pub(crate) fn max_tiles_m(p: &MoeProblem, tt: usize) -> u64 {
    match &p.rows {
        Rows::Contiguous { x_rows, .. } => (x_rows / tt + p.experts) as u64,
        Rows::Masked { max_rows, .. } => (p.experts * max_rows.div_ceil(tt)) as u64,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The decode tiles compile without spills or serialisation notes with the shift decode (the
    /// default, in every variant) and with `KILN_FP4_DECODE=rot`'s rotations (compiled only
    /// when asked for: the variant budget).
    #[test]
    fn both_decodes_compile_without_spills() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let mut specs = Vec::new();
        for (f, tile) in [
            (Fp4Format::Nvfp4, Fp4Tile::narrow(8, true).paired(true)),
            (Fp4Format::Mxfp4, Fp4Tile::narrow(8, true).paired(true)),
            (Fp4Format::Nvfp4, Fp4Tile::narrow(16, true)),
        ] {
            let shift = Fp4Experts::spec("sm_90a", DType::Bf16, f, true, tile);
            specs.push(shift.clone().define("KILN_FP4_ROT", 1));
            specs.push(shift);
        }
        crate::jit::testing::assert_compile_clean(&specs);
    }

    /// `KILN_FP4_MMA=sync`, `KILN_FP4_PDL=1` and `KILN_FP4_PREFETCH` (compiled only when asked
    /// for: the variant budget) compile clean on the 8-token tiles they apply to: both formats, both ops, one
    /// and two CTAs an SM, f16 activations.
    #[test]
    fn the_decode_tiles_knobs_compile_without_spills() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let mut specs = Vec::new();
        for (f, dt, swiglu, tile) in [
            (
                Fp4Format::Nvfp4,
                DType::Bf16,
                true,
                Fp4Tile::narrow(8, true).paired(true),
            ),
            (
                Fp4Format::Mxfp4,
                DType::Bf16,
                true,
                Fp4Tile::narrow(8, true).paired(true),
            ),
            (
                Fp4Format::Nvfp4,
                DType::Bf16,
                false,
                Fp4Tile::narrow(8, false).paired(false),
            ),
            (Fp4Format::Nvfp4, DType::F16, true, Fp4Tile::narrow(8, true)),
        ] {
            let spec = Fp4Experts::spec("sm_90a", dt, f, swiglu, tile).define("KILN_FP4_MMA", 1);
            specs.push(spec.clone().define("KILN_FP4_PDL", 1));
            specs.push(spec);
        }
        // the prefetch walks atom by atom: at a copy an atom, as launch gives it
        specs.push(
            Fp4Experts::spec_run(
                "sm_90a",
                DType::Bf16,
                Fp4Format::Nvfp4,
                true,
                Fp4Tile::narrow(16, true),
                1,
            )
            .define("KILN_FP4_PDL", 1)
            .define("KILN_FP4_PREFETCH", 8),
        );
        for f in Fp4Format::ALL {
            let paired = Fp4Tile::narrow(8, true).paired(true);
            specs.push(
                Fp4Experts::spec_run("sm_90a", DType::Bf16, f, true, paired, 1)
                    .define("KILN_FP4_PREFETCH", 8),
            );
        }
        crate::jit::testing::assert_compile_clean(&specs);
    }

    /// `KILN_FP4_LOAD=tma` and `KILN_FP4_STAGGER=1` (compiled only when asked for) compile
    /// clean on the decode tiles both formats run at the E256 counts, alone and together, and
    /// the map load on the wider tiles its verify reaches.
    #[test]
    fn the_weights_map_load_compiles_without_spills() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let mut specs = Vec::new();
        for f in Fp4Format::ALL {
            for (swiglu, tile) in [
                (true, Fp4Tile::narrow(8, true).paired(true)),
                (false, Fp4Tile::narrow(8, false).paired(false)),
            ] {
                // at a copy an atom, as launch gives these knobs
                let spec = Fp4Experts::spec_run("sm_90a", DType::Bf16, f, swiglu, tile, 1);
                specs.push(spec.clone().define("KILN_FP4_WTMA", 1));
                specs.push(spec.clone().define("KILN_FP4_STAGGER", 1));
                specs.push(
                    spec.define("KILN_FP4_WTMA", 1)
                        .define("KILN_FP4_STAGGER", 1),
                );
            }
        }
        for tile in [Fp4Tile::narrow(16, true), Fp4Tile::prefill(true)] {
            specs.push(
                Fp4Experts::spec_run("sm_90a", DType::Bf16, Fp4Format::Nvfp4, true, tile, 1)
                    .define("KILN_FP4_WTMA", 1),
            );
        }
        crate::jit::testing::assert_compile_clean(&specs);
    }

    /// `KILN_FP4_EPI=ahead|defer` and `KILN_FP4_XTILE=1|2|4` (compiled only when asked for) on
    /// the tiles of 64-256 tokens, both ops, alone and together (both formats on the 128-token
    /// SwiGLU tile, NVFP4 on the others: the knobs touch no decode): no spills, and no wgmma
    /// serialised (the deferred stores' registers would push ptxas to it; `defer` takes `ahead`'s
    /// form on the 64-token tile and with runs for that). One compile each.
    #[test]
    fn the_wide_tiles_epilogue_and_load_forms_compile_clean() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let jit = crate::jit::Jit::without_cache();
        let dev = crate::device::DeviceInfo::h100_sxm();
        let mut specs = Vec::new();
        for swiglu in [true, false] {
            for tile in [Fp4Tile::decode(swiglu), Fp4Tile::prefill(swiglu)] {
                let formats: &[Fp4Format] = if swiglu && tile.tt == 128 {
                    &Fp4Format::ALL
                } else {
                    &[Fp4Format::Nvfp4]
                };
                for &f in formats {
                    for (epi, xtile) in [
                        (1, 0),
                        (2, 0),
                        (0, 1),
                        (0, 2),
                        (0, 4),
                        (2, 1),
                        (1, 2),
                        (2, 4),
                    ] {
                        let run = xtile_run(xtile, false, tile);
                        let bare = Fp4Experts::spec_run("sm_90a", DType::Bf16, f, swiglu, tile, 1);
                        let spec = Fp4Experts::with_wide_forms(bare, tile, run, epi);
                        if !specs.contains(&spec) {
                            specs.push(spec);
                        }
                    }
                }
            }
        }
        for spec in &specs {
            let c = jit.compile(spec).unwrap();
            let problems = crate::harness::check::judge(spec, &c.resources, &dev);
            assert!(problems.is_empty(), "{}: {problems:?}", spec.label());
            assert!(!c.log.contains("C751"), "{}: {}", spec.label(), c.log);
        }
        // none on the decode tiles or the shared-memory path, nor for `each`
        assert_eq!(epi_define(2, Fp4Tile::narrow(16, true), 1), None);
        assert_eq!(epi_define(2, Fp4Tile::dq(), 1), None);
        assert_eq!(epi_define(0, Fp4Tile::prefill(true), 1), None);
        assert_eq!(epi_define(2, Fp4Tile::decode(true), 1), Some(1));
        assert_eq!(epi_define(2, Fp4Tile::prefill(true), 4), Some(1));
        assert_eq!(xtile_run(2, false, Fp4Tile::narrow(8, true)), None);
        assert_eq!(xtile_run(4, true, Fp4Tile::prefill(true)), Some(1));
    }

    /// `KILN_FP4_GCOLS=256` (compiled when asked for): the grouped GEMM's tile of 128 tokens by
    /// 256 columns, 4 atoms and 25 KB a stage, 8 stages; taken only in place of the GEMM's
    /// 256-token tile with N padded to a multiple of 256; compiles without spills or wgmma
    /// serialised in the default load and epilogue forms and the old ones, both formats.
    #[test]
    fn the_gemm_tile_of_256_columns_fits_and_compiles_clean() {
        let t = Fp4Tile::gemm_cols();
        assert_eq!((t.tt, t.cols, t.bn(false), t.stages), (128, 256, 256, 8));
        assert_eq!(t.stage_bytes(false), 128 * 128 + 9 * 1024);
        assert!(t.smem_bytes(false) <= SMEM_LIMIT);
        let gemm = |c: &[usize], n| MoeProblem::contiguous(c, n, 2048, DType::Bf16, DType::Bf16);
        for (counts, n, want) in [
            (&[300][..], 7168, true),
            (&[300][..], 1280, true),
            (&[300][..], 1408, false), // 11 blocks of 128: the last tile's second half past them
            (&[40, 3][..], 7168, false), // the 64-token tile stays
        ] {
            let p = gemm(counts, n);
            let base = Fp4Tile::choose(&p);
            assert_eq!(base.with_gemm_cols(&p, 256) == t, want, "{counts:?} {n}");
            assert_eq!(base.with_gemm_cols(&p, 128), base);
        }
        let sw = gemm(&[300], 7168).with_swiglu(crate::ops::moe::WeightLayout::Separate, true);
        assert_eq!(Fp4Tile::choose(&sw).with_gemm_cols(&sw, 256).cols, 128);
        assert_eq!(epi_define(2, t, 1), Some(1));
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let jit = crate::jit::Jit::without_cache();
        let dev = crate::device::DeviceInfo::h100_sxm();
        for f in Fp4Format::ALL {
            for (xtile, epi) in [(DEFAULT_XTILE, DEFAULT_EPI), (0, 0)] {
                let bare = Fp4Experts::spec_run("sm_90a", DType::Bf16, f, false, t, 1);
                let spec = Fp4Experts::with_wide_forms(bare, t, xtile_run(xtile, false, t), epi);
                assert!(spec
                    .defines
                    .iter()
                    .any(|(k, v)| k == "KILN_FP4_GCOLS" && v == "256"));
                let c = jit.compile(&spec).unwrap();
                let problems = crate::harness::check::judge(&spec, &c.resources, &dev);
                assert!(problems.is_empty(), "{}: {problems:?}", spec.label());
                assert!(!c.log.contains("C751"), "{}: {}", spec.label(), c.log);
            }
        }
    }

    /// `KILN_FP4_TILE=count-cut`: of the brief's GEMM counts (N 7168, K 2048) only one expert
    /// of 200 rows has its 256-token tile cut in K (56 tiles on 132 CTAs); at N 2048, K 7168
    /// one of 300 rows takes the 256-token tile cut (32 tiles) in place of the 64-token one.
    #[test]
    fn count_cut_cuts_the_gemms_wide_tile_where_a_launch_has_few() {
        let mut o = MoeOverrides::NONE;
        o.fp4_tile = Fp4TileRule::CountCut;
        let g = |c: &[usize], n, k| MoeProblem::contiguous(c, n, k, DType::Bf16, DType::Bf16);
        for (p, tt, cut) in [
            (g(&[200], 7168, 2048), 256, true),
            (g(&[300], 7168, 2048), 256, false),
            (g(&[1024], 7168, 2048), 256, false),
            (g(&[0, 0, 77, 0], 7168, 2048), 64, false),
            (g(&[300], 2048, 7168), 256, true),
        ] {
            let t = Fp4Experts::tile_with(&p, &o, 132).unwrap();
            assert_eq!(t.tt, tt, "{p:?}");
            assert_eq!(dispatch::few_wide(&p, t, 132, true), cut, "{p:?}");
        }
        // count-pair takes the 64-token tile there, whole
        let mut pair = MoeOverrides::NONE;
        pair.fp4_tile = Fp4TileRule::CountPair;
        let p = g(&[300], 2048, 7168);
        assert_eq!(Fp4Experts::tile_with(&p, &pair, 132).unwrap().tt, 64);
    }

    /// `KILN_FP4_TILE=count-fit` and `128`-`224` (compiled when asked for): the grouped GEMM's
    /// wide tiles of 128 to 224 tokens, one wgmma batch in flight, compile without spills or
    /// wgmma serialised in the default load and epilogue forms (both formats at 160 and 128,
    /// the tiles `count-fit` takes at 300 and 200 rows).
    #[test]
    fn the_gemms_narrower_wide_tiles_compile_clean() {
        let mut specs = Vec::new();
        for tt in [128, 160, 192, 224] {
            let t = Fp4Tile::gemm_wide(tt);
            assert_eq!(epi_define(DEFAULT_EPI, t, 2), Some(1));
            let formats: &[Fp4Format] = if tt <= 160 {
                &Fp4Format::ALL
            } else {
                &[Fp4Format::Nvfp4]
            };
            for &f in formats {
                specs.push(Fp4Experts::spec("sm_90a", DType::Bf16, f, false, t));
            }
        }
        // the 128-token tile cut in K, as count-fit launches it at 300 rows, N 2048
        specs.push(
            Fp4Experts::spec(
                "sm_90a",
                DType::Bf16,
                Fp4Format::Nvfp4,
                false,
                Fp4Tile::gemm_wide(128),
            )
            .define("KILN_FP4_WSPLIT", 1),
        );
        // the 256-token tile cut in K, as count-cut launches it at 200 rows, in MXFP4 too
        specs.push(
            Fp4Experts::spec(
                "sm_90a",
                DType::Bf16,
                Fp4Format::Mxfp4,
                false,
                Fp4Tile::prefill(false),
            )
            .define("KILN_FP4_WSPLIT", 1),
        );
        crate::jit::testing::assert_compile_clean(&specs);
    }

    /// `KILN_FP4_PDL=wide` (the default): the checked spec of every register-path tile of 64
    /// tokens or more waits for the prefix kernel's tables (`kiln check` compiles that form),
    /// and only those: the decode tiles and the shared-memory path launch plainly.
    #[test]
    fn the_wide_tiles_are_checked_as_dependents() {
        for swiglu in [true, false] {
            for tile in Fp4Tile::all(swiglu) {
                let spec = Fp4Experts::spec("sm_90a", DType::Bf16, Fp4Format::Nvfp4, swiglu, tile);
                let waits = spec
                    .defines
                    .iter()
                    .any(|(k, v)| k == "KILN_FP4_PDL" && v == "1");
                assert_eq!(waits, tile.tt >= 64 && tile.path == Fp4Path::Rs, "{tile:?}");
            }
        }
    }

    /// `KILN_FP4_DEEP`: tables for 256 experts give the paired decode tiles a stage more (the
    /// SwiGLU's 9 -> 10, the GEMM's 16 -> 18), still two CTAs an SM, and compile clean.
    #[test]
    fn deep_paired_tiles_gain_a_stage_and_compile() {
        let mut specs = Vec::new();
        for swiglu in [true, false] {
            let t = Fp4Tile::narrow(8, swiglu).paired(swiglu);
            let d = t.with_tables(DEEP_EXPERTS, swiglu);
            assert!(d.stages > t.stages, "{t:?} {d:?}");
            assert!(2 * (d.smem_bytes(swiglu) + 1024) <= 228 * 1024, "{d:?}");
            for f in Fp4Format::ALL {
                specs.push(Fp4Experts::spec("sm_90a", DType::Bf16, f, swiglu, d));
            }
        }
        assert_eq!(
            Fp4Tile::narrow(8, true)
                .paired(true)
                .with_tables(DEEP_EXPERTS, true)
                .stages,
            10
        );
        if crate::jit::testing::nvrtc_here() {
            crate::jit::testing::assert_compile_clean(&specs);
        }
    }

    /// What the launch builds under the default overrides is what [`Fp4Experts::spec`] (and so
    /// `kiln check`) compiles, every tile: the wide tiles' pair (`KILN_FP4_XTILE=2`,
    /// `KILN_FP4_EPI=ahead`) included; `KILN_FP4_XTILE=0 KILN_FP4_EPI=each` is the bare kernel.
    #[test]
    fn the_default_overrides_launch_the_checked_spec() {
        let o = crate::overrides::MoeOverrides::NONE;
        for swiglu in [true, false] {
            for tile in Fp4Tile::all(swiglu) {
                for f in Fp4Format::ALL {
                    let bare =
                        Fp4Experts::spec_run("sm_90a", DType::Bf16, f, swiglu, tile, o.fp4_run);
                    let xtile = xtile_run(o.fp4_xtile, o.fp4_load_tma, tile);
                    let forms = Fp4Experts::with_wide_forms(bare.clone(), tile, xtile, o.fp4_epi);
                    let launched = Fp4Experts::with_wide_dependent(forms, tile, o.fp4_pdl_wide);
                    assert_eq!(
                        launched,
                        Fp4Experts::spec("sm_90a", DType::Bf16, f, swiglu, tile)
                    );
                    let wide = !tile.narrow_rs() && tile.path == Fp4Path::Rs;
                    assert_eq!(launched != bare, wide, "{tile:?}");
                    let old = Fp4Experts::with_wide_forms(
                        bare.clone(),
                        tile,
                        xtile_run(0, false, tile),
                        0,
                    );
                    assert_eq!(old, bare, "{tile:?}");
                }
            }
        }
    }

    /// The decode tiles (8 and 16 tokens, register path) run 4 atoms a copy by default and
    /// the wide ones `KILN_FP4_XTILE`'s 2; `KILN_FP4_RUN=1` gives the old kernel (no define),
    /// 2 a define.
    #[test]
    fn the_decode_tiles_run_four_atoms_a_copy_by_default() {
        let run_of = |spec: &KernelSpec| {
            spec.defines
                .iter()
                .find(|(k, _)| k == "KILN_FP4_RUN")
                .map(|(_, v)| v.clone())
        };
        for swiglu in [true, false] {
            for tile in Fp4Tile::all(swiglu) {
                let spec = Fp4Experts::spec("sm_90a", DType::Bf16, Fp4Format::Nvfp4, swiglu, tile);
                // the wide tiles' runs are KILN_FP4_XTILE's (2 by default), with X in one box
                let want = if tile.narrow_rs() {
                    Some(DEFAULT_RUN.to_string())
                } else {
                    (tile.path == Fp4Path::Rs).then(|| DEFAULT_XTILE.to_string())
                };
                assert_eq!(run_of(&spec), want, "{tile:?}");
                assert_eq!(tile.narrow_rs(), tile.tt <= 16 && tile.path == Fp4Path::Rs);
                let old =
                    Fp4Experts::spec_run("sm_90a", DType::Bf16, Fp4Format::Nvfp4, swiglu, tile, 1);
                assert_eq!(run_of(&old), None, "{tile:?}");
                let two =
                    Fp4Experts::spec_run("sm_90a", DType::Bf16, Fp4Format::Nvfp4, swiglu, tile, 2);
                assert_eq!(run_of(&two), tile.narrow_rs().then(|| "2".to_string()));
            }
        }
    }

    /// `KILN_FP4_RUN` 1 and 2 (compiled only when asked for; 4 is every decode variant's)
    /// compile clean on the paired decode tiles, both formats and ops, and with
    /// `KILN_FP4_DEEP`'s ten stages (a run never straddles the ring's end: the ninth or tenth
    /// stage takes single copies).
    #[test]
    fn runs_of_atoms_compile_without_spills() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let mut specs = Vec::new();
        for run in [1, 2, 4] {
            for f in Fp4Format::ALL {
                for swiglu in [true, false] {
                    let t = Fp4Tile::narrow(8, swiglu).paired(swiglu);
                    if run != DEFAULT_RUN {
                        specs.push(Fp4Experts::spec_run(
                            "sm_90a",
                            DType::Bf16,
                            f,
                            swiglu,
                            t,
                            run,
                        ));
                    }
                }
            }
            let deep = Fp4Tile::narrow(8, true)
                .paired(true)
                .with_tables(DEEP_EXPERTS, true);
            specs.push(Fp4Experts::spec_run(
                "sm_90a",
                DType::Bf16,
                Fp4Format::Nvfp4,
                true,
                deep,
                run,
            ));
        }
        specs.push(Fp4Experts::spec_run(
            "sm_90a",
            DType::Bf16,
            Fp4Format::Nvfp4,
            true,
            Fp4Tile::narrow(16, true),
            2,
        ));
        crate::jit::testing::assert_compile_clean(&specs);
    }

    /// `KILN_FP4_NARROW`: the 8-token tile where experts of 9-16 rows are few (128 tokens top-8
    /// on 256 experts), not where most have them, nor for the masked layout.
    #[test]
    fn eight_token_tiles_pay_where_few_experts_pass_eight_rows() {
        let bf = |c: &[usize]| {
            MoeProblem::contiguous(c, 256, 128, DType::Bf16, DType::Bf16)
                .with_swiglu(crate::ops::moe::WeightLayout::Separate, true)
        };
        let mut few = vec![4usize; 256];
        few[..5].fill(11);
        assert_eq!(Fp4Tile::choose(&bf(&few)).tt, 16);
        assert!(Fp4Tile::eight_pays(&bf(&few)));
        let eight = Fp4Tile::narrow(8, true).paired_for(&bf(&few), 2, true);
        assert_eq!((eight.tt, eight.ctas), (8, 2));
        let many = vec![12usize; 64];
        assert!(!Fp4Tile::eight_pays(&bf(&many)));
        let masked = MoeProblem::masked(&[1, 12], 16, 256, 128, DType::Bf16, DType::Bf16);
        assert!(!Fp4Tile::eight_pays(&masked));
        assert!(!Fp4Tile::eight_pays(&bf(&[0, 0])));
    }

    /// The single 8-token tile with bf16 activations, which `kiln check` leaves out (bf16 runs
    /// it paired; `KILN_FP4_CTAS=1` and `KILN_FP4_PAIR=swiglu` compile it when asked for),
    /// compiles clean for both ops.
    #[test]
    fn the_single_eight_token_tile_compiles_without_spills() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let specs: Vec<_> = [true, false]
            .into_iter()
            .map(|swiglu| {
                let tile = Fp4Tile::narrow(8, swiglu);
                Fp4Experts::spec("sm_90a", DType::Bf16, Fp4Format::Nvfp4, swiglu, tile)
            })
            .collect();
        crate::jit::testing::assert_compile_clean(&specs);
    }

    /// `KILN_FP4_ORDER=whole-first` (compiled only when asked for) compiles clean on the wide
    /// tiles it applies to, whole and cut in K, and applies to no decode tile nor to launches of
    /// many experts.
    #[test]
    fn the_whole_first_order_compiles_where_it_applies() {
        let o = MoeOverrides {
            fp4_order: Fp4Order::WholeFirst,
            ..MoeOverrides::NONE
        };
        let auto = MoeOverrides {
            fp4_order: Fp4Order::Auto,
            ..MoeOverrides::NONE
        };
        let sw = |c: &[usize]| {
            MoeProblem::contiguous(c, 2048, 7168, DType::Bf16, DType::Bf16)
                .with_swiglu(crate::ops::moe::WeightLayout::Separate, true)
        };
        let folds = sw(&[144, 145, 16, 272, 0, 130, 160, 161]);
        let wide = Fp4Tile::prefill(true);
        assert!(order_whole_first(&o, &folds, wide, 132));
        assert!(order_whole_first(&auto, &folds, wide, 132));
        // auto is the default (F161), and the folds' launch is in `kiln check`
        assert!(order_whole_first(&MoeOverrides::NONE, &folds, wide, 132));
        let experts = MoeOverrides {
            fp4_order: Fp4Order::Experts,
            ..MoeOverrides::NONE
        };
        assert!(!order_whole_first(&experts, &folds, wide, 132));
        let ordered = Fp4Experts::spec("sm_90a", DType::Bf16, Fp4Format::Mxfp4, true, wide)
            .define("KILN_FP4_ORDER", 1);
        assert!(Fp4Experts::variants("sm_90a").contains(&ordered));
        assert!(!order_whole_first(
            &o,
            &folds,
            Fp4Tile::narrow(16, true),
            132
        ));
        let many = sw(&[100; 65]);
        assert!(!order_whole_first(&o, &many, wide, 132));
        // auto: not on E64 (the order cost 12 % there, ledger F101)
        let e64 = MoeProblem::contiguous(
            &crate::ops::moe::uneven_counts(8192, 64, 1),
            1408,
            2048,
            DType::Bf16,
            DType::Bf16,
        )
        .with_swiglu(crate::ops::moe::WeightLayout::Separate, true);
        assert!(order_whole_first(&o, &e64, wide, 132));
        assert!(!order_whole_first(&auto, &e64, wide, 132));
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let mut specs = Vec::new();
        for (swiglu, tile) in [
            (true, Fp4Tile::prefill(true)),
            (false, Fp4Tile::decode(false)),
        ] {
            let spec = Fp4Experts::spec("sm_90a", DType::Bf16, Fp4Format::Nvfp4, swiglu, tile)
                .define("KILN_FP4_ORDER", 1);
            specs.push(spec.clone());
            if swiglu {
                specs.push(spec.define("KILN_FP4_WSPLIT", 1));
            }
        }
        crate::jit::testing::assert_compile_clean(&specs);
    }

    /// `kiln check` lists the wide tiles cut in K (`KILN_FP4_TILE=count-fit` launches them: the
    /// SwiGLU's 64- and 128-token tiles, the GEMM's 256-token one), not the GEMM's decode tile
    /// cut, and the single 8-token tile with f16 activations only (bf16 runs it paired).
    #[test]
    fn check_lists_what_count_launches() {
        let v = Fp4Experts::variants("sm_90a");
        let spec = |dt, f, swiglu, tile| Fp4Experts::spec("sm_90a", dt, f, swiglu, tile);
        for f in Fp4Format::ALL {
            for swiglu in [true, false] {
                for tile in [Fp4Tile::decode(swiglu), Fp4Tile::prefill(swiglu)] {
                    let cut = spec(DType::Bf16, f, swiglu, tile).define("KILN_FP4_WSPLIT", 1);
                    let cuts = swiglu || tile.tt == 256;
                    assert_eq!(v.contains(&cut), cuts, "{tile:?}");
                }
                let single = Fp4Tile::narrow(8, swiglu);
                assert!(!v.contains(&spec(DType::Bf16, f, swiglu, single)));
                assert!(v.contains(&spec(DType::Bf16, f, swiglu, single.paired(swiglu))));
            }
        }
        let f16 = spec(DType::F16, Fp4Format::Nvfp4, true, Fp4Tile::narrow(8, true));
        assert!(v.contains(&f16));
    }

    /// `KILN_FP4_FILL`'s wider tiles that split (compiled only when asked for) compile clean:
    /// the 64-token decode tile and the prefill tiles, both ops, both formats' SwiGLU.
    #[test]
    fn the_wide_tiles_split_compiles_without_spills() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let mut specs = Vec::new();
        for swiglu in [true, false] {
            for tile in [Fp4Tile::decode(swiglu), Fp4Tile::prefill(swiglu)] {
                assert!(!tile.narrow_rs());
                specs.push(
                    Fp4Experts::spec("sm_90a", DType::Bf16, Fp4Format::Nvfp4, swiglu, tile)
                        .define("KILN_FP4_WSPLIT", 1),
                );
            }
        }
        specs.push(
            Fp4Experts::spec(
                "sm_90a",
                DType::Bf16,
                Fp4Format::Mxfp4,
                true,
                Fp4Tile::prefill(true),
            )
            .define("KILN_FP4_WSPLIT", 1),
        );
        crate::jit::testing::assert_compile_clean(&specs);
    }

    /// The weights' map under `KILN_FP4_LOAD=tma`: a box is one atom of either format, whole
    /// rows, and the map covers every expert's bytes and passes the encoder's rules.
    #[test]
    fn the_weights_map_boxes_one_atom() {
        for f in Fp4Format::ALL {
            let l = Fp4Layout {
                format: f,
                experts: 256,
                n: 2048,
                k: 7168,
                swiglu: true,
                min_scale_byte: 255,
            };
            let m = w_map(&l, 0x7f00_0000_0000);
            assert_eq!(m.box_bytes() as usize, atom_bytes(f), "{f:?}");
            assert_eq!(atom_bytes(f) % W_MAP_ROW, 0);
            assert_eq!(m.dims[1] as usize * W_MAP_ROW, 256 * l.expert_bytes());
            // the kernel's row index of an atom is an int
            assert!(m.dims[1] < 1 << 31);
            m.validate().unwrap();
        }
    }

    #[test]
    fn the_split_block_and_workspace_match_the_kernel() {
        assert_eq!(std::mem::size_of::<Fp4Split>(), 24);
        assert_eq!(std::mem::offset_of!(Fp4Split, max_splits), 16);
        // 264 CTAs of the paired 8-token SwiGLU tile: a partial of 256 threads x 8 floats each
        assert_eq!(split_workspace_bytes(264, 8, true), 264 * 256 * 8 * 4);
        assert_eq!(split_workspace_bytes(132, 16, false), 132 * 256 * 8 * 4);
    }

    #[test]
    fn args_match_the_device_layout() {
        // five pointers, two i64, six ints
        assert_eq!(std::mem::size_of::<Fp4Args>(), 80);
        assert_eq!(std::mem::offset_of!(Fp4Args, ldy), 40);
        assert_eq!(std::mem::offset_of!(Fp4Args, experts), 56);
        assert_eq!(std::mem::offset_of!(Fp4Args, by_expert), 76);
    }

    #[test]
    fn every_tile_fits_and_keeps_weights_in_flight() {
        for swiglu in [false, true] {
            for t in Fp4Tile::all(swiglu) {
                assert!(t.smem_bytes(swiglu) <= t.smem_limit(), "{t:?}");
                assert_eq!(t.stage_bytes(swiglu) % 1024, 0);
                assert!(t.stages >= 4, "{t:?}");
            }
            // the narrower the tile, the more stages of weights in flight
            let stages: Vec<u32> = Fp4Tile::all(swiglu)[..4].iter().map(|t| t.stages).collect();
            assert!(stages.windows(2).all(|w| w[0] > w[1]), "{stages:?}");
            // decode keeps at least 48 KB of weights in flight per SM
            let d = Fp4Tile::decode(swiglu);
            let atoms = if swiglu { 4 } else { 2 };
            assert!(
                d.stages as usize * atoms * atom_bytes(Fp4Format::Mxfp4) >= 48 << 10,
                "{d:?}"
            );
        }
        // 2 ops x (2 formats x bf16 with 3 tiles and the paired 8-token tile, and NVFP4 f16
        // with the 3 decode tiles), and in both formats the SwiGLU's 64- and 128-token tiles cut
        // in K and its 128-token tile in the whole-first order, the GEMM's 160- and 128-token
        // tiles and its 256- and 128-token tiles cut in K (`count-fit`, F200; the shared-memory
        // tile's two compiled when asked for since F161)
        assert_eq!(Fp4Experts::variants("sm_90a").len(), 36);
        // two CTAs fit an SM: their blocks' shared memory
        for swiglu in [false, true] {
            let t = Fp4Tile::narrow(8, swiglu).paired(swiglu);
            assert!(2 * (t.smem_bytes(swiglu) + 1024) <= 228 * 1024, "{t:?}");
            assert!(t.stages >= 8, "{t:?}");
        }
        assert!(Fp4Experts::variants("sm_89").is_empty());
    }

    #[test]
    fn what_is_not_compiled_is_refused_with_a_reason() {
        let h100 = DeviceInfo::h100_sxm();
        let l = |format| Fp4Layout {
            format,
            experts: 2,
            n: 256,
            k: 128,
            swiglu: false,
            min_scale_byte: 255,
        };
        let f16 = MoeProblem::contiguous(&[3, 5], 256, 128, DType::F16, DType::F16);
        assert_eq!(
            Fp4Experts::supports(&f16, &l(Fp4Format::Nvfp4), &h100),
            Ok(())
        );
        let why = Fp4Experts::supports(&f16, &l(Fp4Format::Mxfp4), &h100).unwrap_err();
        assert!(why.contains("bf16 activations"), "{why}");
        let mixed = MoeProblem::contiguous(&[3, 5], 256, 128, DType::Bf16, DType::F32);
        let why = Fp4Experts::supports(&mixed, &l(Fp4Format::Nvfp4), &h100).unwrap_err();
        assert!(why.contains("activations' dtype"), "{why}");
    }

    #[test]
    fn the_narrowest_tile_that_holds_the_most_rows() {
        let bf = |c: &[usize]| MoeProblem::contiguous(c, 256, 128, DType::Bf16, DType::Bf16);
        for (counts, tt) in [
            (&[0, 0][..], 8),
            (&[3, 0, 2, 8], 8),
            (&[3, 0, 9], 16),
            (&[16, 1], 16),
            (&[3, 17], 64),
            (&[3, 0, 64], 64),
            (&[3, 65], 256),
        ] {
            assert_eq!(Fp4Tile::choose(&bf(counts)).tt, tt, "{counts:?}");
        }
        let swiglu = crate::ops::moe::WeightLayout::Separate;
        // masked: the capacity decides, not the rows the GPU will hold
        let masked = MoeProblem::masked(&[1, 2], 64, 256, 128, DType::Bf16, DType::Bf16)
            .with_swiglu(swiglu, true);
        assert_eq!(Fp4Tile::choose(&masked), Fp4Tile::decode(true));
        let masked = MoeProblem::masked(&[1, 2], 8, 256, 128, DType::Bf16, DType::Bf16)
            .with_swiglu(swiglu, true);
        assert_eq!(Fp4Tile::choose(&masked), Fp4Tile::narrow(8, true));
        let f16 = |c: &[usize]| MoeProblem::contiguous(c, 256, 128, DType::F16, DType::F16);
        assert_eq!(Fp4Tile::choose(&f16(&[300])).tt, 64);
        assert_eq!(Fp4Tile::choose(&f16(&[5, 2])).tt, 8);
        assert_eq!(Fp4Tile::choose(&f16(&[5, 12])).tt, 16);
        // whatever the defaults launch is compiled by `kiln check`: the tile, cut in K where
        // `count` cuts it (the SwiGLU's few wide tiles)
        let compiled = Fp4Experts::variants("sm_90a");
        let sw = |p: MoeProblem| p.with_swiglu(swiglu, true);
        let big = |c: &[usize]| MoeProblem::contiguous(c, 2048, 7168, DType::Bf16, DType::Bf16);
        // the grouped GEMM counts of F181 (N 7168, K 2048): count-fit's 128- and 160-token
        // tiles, and what it takes at 100 and 1,024 rows
        let gemm = |c: &[usize]| MoeProblem::contiguous(c, 7168, 2048, DType::Bf16, DType::Bf16);
        for p in [
            bf(&[3]),
            bf(&[12]),
            bf(&[40]),
            bf(&[300]),
            f16(&[3]),
            f16(&[12]),
            f16(&[300]),
            sw(bf(&[3])),
            sw(bf(&[300])),
            big(&[1]),
            big(&[0, 0, 77, 0]),
            big(&[300]),
            sw(big(&[1])),
            sw(big(&[0, 0, 77, 0])),
            sw(big(&[300])),
            sw(big(&[0, 1, 40, 64, 128, 3, 0, 100])),
            gemm(&[200]),
            gemm(&[300]),
            gemm(&[1024]),
            gemm(&[100]),
            sw(big(&[144, 145, 16, 272, 0, 130, 160, 161])),
        ] {
            let o = MoeOverrides::NONE;
            let tile = Fp4Experts::tile_with(&p, &o, 132).unwrap();
            let swiglu = p.swiglu.is_some();
            let mut want = Fp4Experts::spec("sm_90a", p.input, Fp4Format::Nvfp4, swiglu, tile);
            if dispatch::few_wide(&p, tile, tile.ctas * 132, o.fp4_tile.cuts_gemm()) {
                want = want.define("KILN_FP4_WSPLIT", 1);
            }
            if order_whole_first(&o, &p, tile, 132) {
                want = want.define("KILN_FP4_ORDER", 1);
            }
            assert!(compiled.contains(&want), "{p:?}: {want:?}");
        }
    }

    #[test]
    fn the_shared_memory_path_runs_only_where_forced() {
        let sw = |c: &[usize]| {
            MoeProblem::contiguous(c, 256, 128, DType::Bf16, DType::Bf16)
                .with_swiglu(crate::ops::moe::WeightLayout::Separate, true)
        };
        assert_eq!(Fp4Tile::choose(&sw(&[200, 150, 0])).path, Fp4Path::Rs);
        let e64 = crate::ops::moe::uneven_counts(8192, 64, 1);
        assert_eq!(Fp4Tile::choose(&sw(&e64)).path, Fp4Path::Rs);
        assert_eq!(
            Fp4Tile::choose_with(&sw(&e64), Some(Fp4Path::Dq)).path,
            Fp4Path::Dq
        );
        // never for the GEMM, f16, or the masked layout
        let gemm = MoeProblem::contiguous(&[200, 150], 256, 128, DType::Bf16, DType::Bf16);
        assert_eq!(Fp4Tile::choose(&gemm).path, Fp4Path::Rs);
        let f16 = MoeProblem::contiguous(&[200, 150], 256, 128, DType::F16, DType::F16)
            .with_swiglu(crate::ops::moe::WeightLayout::Separate, true);
        assert_eq!(Fp4Tile::choose(&f16).path, Fp4Path::Rs);
        // the override wins either way; the shared-memory tile holds 256 tokens, 64 columns
        assert_eq!(
            Fp4Tile::choose_with(&sw(&[200, 150]), Some(Fp4Path::Rs)),
            Fp4Tile::prefill(true)
        );
        // KILN_FP4_CTAS=2 pairs the SwiGLU's narrow bf16 tiles only
        let paired = Fp4Tile::choose_paired(&sw(&[3, 1]), None, 2, false);
        assert_eq!((paired.tt, paired.ctas), (8, 2));
        assert_eq!(Fp4Tile::choose_paired(&sw(&[3, 1]), None, 1, false).ctas, 1);
        assert_eq!(
            Fp4Tile::choose_paired(&sw(&[30, 1]), None, 2, false).ctas,
            1
        );
        assert_eq!(
            Fp4Tile::choose_paired(&sw(&[12, 1]), None, 2, false).ctas,
            1
        );
        assert_eq!(Fp4Tile::choose_paired(&gemm, None, 2, false).ctas, 1);
        // KILN_FP4_PAIR=all: the grouped GEMM's 8-token tile too, not its wider ones
        let down = MoeProblem::contiguous(&[1, 0, 1], 256, 128, DType::Bf16, DType::Bf16);
        let paired = Fp4Tile::choose_paired(&down, None, 2, true);
        assert_eq!((paired.tt, paired.ctas), (8, 2));
        assert_eq!(paired, Fp4Tile::narrow(8, false).paired(false));
        assert_eq!(Fp4Tile::choose_paired(&gemm, None, 2, true).ctas, 1);
        assert_eq!(Fp4Tile::choose_paired(&down, None, 1, true).ctas, 1);
        let dq = Fp4Tile::choose_with(&sw(&[3, 1]), Some(Fp4Path::Dq));
        assert_eq!((dq.tt, dq.bn(true), dq.path), (256, 64, Fp4Path::Dq));
        assert!(
            dq.stages >= 4 && dq.smem_bytes(true) <= SMEM_LIMIT,
            "{dq:?}"
        );
    }

    #[test]
    fn narrow_tiles_load_boxes_that_fit_their_x_stage() {
        for t in Fp4Tile::all(false) {
            assert!(t.x_box() <= t.tt && t.tt % t.x_box() == 0, "{t:?}");
        }
        assert_eq!(Fp4Tile::narrow(8, false).x_box(), 8);
    }
}
