//! Host side of `kernels/moe/fp4_experts_w4a8.cu`: the grouped GEMM and fused SwiGLU with MXFP4
//! weights ([`super::w4a8`]'s prepack) and e4m3 activations with 1x128 scales, on the FP8 tensor
//! cores. The problem is the FP8 MoE kernels' ([`Fp8MoeProblem`], bf16 out).

use std::ffi::c_void;

use super::kernel::{
    check_buffers, check_weights_fit, launch_persistent_threads, max_tiles_m, need_routing,
};
use super::layout::TILE_N;
use super::w4a8::{W4a8Prepacked, W4A8_ATOM_BYTES, W4A8_K};
use crate::device::{Context, DeviceBuffer, DeviceInfo, TensorMap, Tma2d, TmaDType, TmaSwizzle};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;
use crate::ops::moe::fp8_grouped::{self, x_map};
use crate::ops::moe::fp8_problem::Fp8MoeProblem;
use crate::ops::moe::schedule::{sched_bytes, TileOrder, INDEX_RING_BYTES, MAX_EXPERTS};
use crate::ops::moe::{tile_prefix, MoeOperands, Rows};
use crate::overrides::{MoeOverrides, W4a8Decode, W4a8Form};

pub const NAME: &str = "fp4_experts_w4a8";
pub const ENTRY: &str = "moe_fp4_experts_w4a8";
/// `KILN_W4A8_FORM=wide`: tiles of 192 tokens, three consumers (ledger F60).
pub const WIDE_ENTRY: &str = "moe_fp4_experts_w4a8_wide";
/// Tokens of a tile (two consumers of 64) and its K block.
pub const BM: u32 = 128;
/// Tokens of a `wide` tile: three consumers of 64.
pub const WIDE_BM: u32 = 192;
/// The most experts a `wide` launch takes: its shared memory holds their tables (12 bytes an
/// expert) beside five stages of 34 KB, which the tables of [`MAX_EXPERTS`] would cut to four.
pub const WIDE_MAX_EXPERTS: u32 = 256;
/// Rows an expert, on the launch's average, from which `KILN_W4A8_FORM=auto` (the default) runs
/// `wide` (ledger F90). Below, an expert's rows fill at most two of a 192-token tile's three
/// consumers (its third meets each step with nothing to do), while `ss`'s 128-token tile is full;
/// above, `ss` cuts most experts into a full tile and a short one, which `wide` takes in one.
pub const WIDE_ROWS_PER_EXPERT: usize = 112;
const SMEM_LIMIT: u32 = 227 * 1024;
/// The box of X's scales a stage carries with `KILN_W4A8_SX=tma`: a tile's 128 rows and 4 more,
/// because a TMA box must start on 16 bytes of global memory (a start 4 bytes off is an illegal
/// instruction, F11's fault): the box starts at the tile's first scale rounded down to 4.
pub const SX_BOX: u32 = BM + 4;

/// A stage: the X tile (`bm` rows of 128 e4m3), the two weight atoms and (staged) X's scales (a
/// box of `bm` + 4), rounded to 1 KB.
const fn stage_bytes(bm: u32, sx_staged: bool) -> u32 {
    let sx = if sx_staged { 4 * (bm + 4) } else { 0 };
    bm * W4A8_K as u32 + (2 * W4A8_ATOM_BYTES as u32 + sx).div_ceil(1024) * 1024
}
/// `KILN_W4A8_DECODE=warpgroup-ring`: a stage of the X ring (the tile and its staged scales, 1 KB)
/// and of the atom ring (the two atoms), and the atom ring's stages.
const X_STAGE_BYTES: u32 = BM * W4A8_K as u32 + 1024;
const ATOM_STAGE_BYTES: u32 = 2 * W4A8_ATOM_BYTES as u32;
pub const ATOM_STAGES: u32 = 6;
/// Three decoded 128 x 128 e4m3 weight tiles, and the 15 e4m3 tables.
const SLOTS_BYTES: u32 = 3 * 128 * 128;
const LUT_BYTES: u32 = 128;
/// `KILN_W4A8_DECODE=producer`: each slot's ready and free barriers, after the tables.
const SLOT_BARRIER_BYTES: u32 = 64;

/// The kernel's specialisation by its experiment knobs (the default: the scales staged, the
/// consumers decoding; `KILN_W4A8_SX`'s default is `tma` from 2026-11-29, ledger F13).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct W4a8Variant {
    /// `KILN_W4A8_SX=tma`: X's scales ride in the stages.
    pub sx_staged: bool,
    /// `KILN_W4A8_DECODE`: who decodes the weights: the consumers (the default), the producer
    /// warpgroup's idle warps (`producer`, F14) or a warpgroup of their own (`warpgroup`, 512
    /// threads, F40).
    pub decode: W4a8Decode,
    /// `KILN_W4A8_PROMOTE=beside`: a consumer's promotion of block j and its decode of stage
    /// j + 2 in one block of code (ledger F16). Orders the consumers' own decode, so only with
    /// `decode` on the consumers.
    pub beside: bool,
    /// `KILN_W4A8_IDLE=decode`: in a tile of at most 64 tokens the consumer without tokens
    /// decodes both atoms (ledger F17). Only with `beside` and `sx_staged` (without `beside` the
    /// SwiGLU spills 4 bytes, and so does the grouped GEMM with the scales from global memory).
    pub idle_decode: bool,
    /// `KILN_W4A8_FORM=wide`: `kernels/moe/fp4_experts_w4a8_wide.cu`, the shared-memory form in
    /// tiles of [`WIDE_BM`] tokens, three consumers reading each decoded weight tile (ledger
    /// F60). Its own stages; with `sx_staged` and none of the other knobs. (The register forms
    /// `rs`, `rs-lanes`, `rs-frags` and `wide-rs` lost every round and were deleted on
    /// 2026-12-01, F190.)
    pub wide: bool,
    /// `KILN_W4A8_FORM=wide-lean` (with `wide`; `auto`'s SwiGLU form): each decoding thread's
    /// shared loads of both 32-blocks of its unit before its first store (F91's `wide-first`,
    /// deleted on 2026-11-30 after this won two rounds against it, F150), with its
    /// addresses kept across the K loop (no thread index re-read a step) and seven operations a
    /// code word (ledger F122; the SwiGLU's: [`W4a8Variant::kernel`]).
    pub lean: bool,
}

impl W4a8Variant {
    const fn fixed_bytes(self) -> u32 {
        let bars = if !matches!(self.decode, W4a8Decode::Consumers) {
            SLOT_BARRIER_BYTES
        } else {
            0
        };
        1024 + SLOTS_BYTES + LUT_BYTES + bars + INDEX_RING_BYTES + (3 * self.max_experts() + 2) * 4
    }

    /// Tokens of a tile.
    pub const fn bm(self) -> u32 {
        if self.wide {
            WIDE_BM
        } else {
            BM
        }
    }

    /// The most experts a launch takes (the tables in shared memory).
    pub const fn max_experts(self) -> u32 {
        if self.wide {
            WIDE_MAX_EXPERTS
        } else {
            MAX_EXPERTS as u32
        }
    }

    const fn split(self) -> bool {
        matches!(self.decode, W4a8Decode::WarpgroupRing)
    }

    /// The atom ring's bytes with its barriers (`warpgroup-ring` only).
    const fn atom_ring_bytes(self) -> u32 {
        if self.split() {
            ATOM_STAGES * (ATOM_STAGE_BYTES + 16)
        } else {
            0
        }
    }

    const fn stage_size(self) -> u32 {
        if self.split() {
            X_STAGE_BYTES
        } else {
            stage_bytes(self.bm(), self.sx_staged)
        }
    }

    /// The stages of the ring X rides in (with the atoms unless `warpgroup-ring`).
    pub const fn stages(self) -> u32 {
        (SMEM_LIMIT - self.fixed_bytes() - self.atom_ring_bytes()) / (self.stage_size() + 16)
    }

    pub const fn smem_bytes(self) -> u32 {
        self.fixed_bytes() + self.atom_ring_bytes() + self.stages() * (self.stage_size() + 16)
    }

    /// What runs when no knob asks otherwise.
    pub const DEFAULT: W4a8Variant = W4a8Variant {
        sx_staged: true,
        decode: W4a8Decode::Consumers,
        beside: false,
        idle_decode: false,
        wide: false,
        lean: false,
    };

    /// `KILN_W4A8_FORM=wide`: the default's knobs in tiles of [`WIDE_BM`] tokens.
    pub const WIDE: W4a8Variant = W4a8Variant {
        wide: true,
        ..W4a8Variant::DEFAULT
    };

    /// What `KILN_W4A8_FORM=auto` runs for the fused SwiGLU at prefill ([`auto_form`]):
    /// `wide-lean` (ledger F122, F150: -2.5 to -3.0 % against `wide-first` in two rounds, which
    /// had won two against `wide`, F91).
    pub const WIDE_LEAN: W4a8Variant = W4a8Variant {
        lean: true,
        ..W4a8Variant::WIDE
    };

    /// Every variant, the default first; each entry spells only what differs from
    /// [`W4a8Variant::DEFAULT`] (or from [`W4a8Variant::WIDE`]).
    pub const ALL: [W4a8Variant; 11] = {
        const D: W4a8Variant = W4a8Variant::DEFAULT;
        [
            D,
            W4a8Variant {
                sx_staged: false,
                ..D
            },
            W4a8Variant {
                sx_staged: false,
                decode: W4a8Decode::Producer,
                ..D
            },
            W4a8Variant {
                decode: W4a8Decode::Producer,
                ..D
            },
            W4a8Variant { beside: true, ..D },
            W4a8Variant {
                sx_staged: false,
                beside: true,
                ..D
            },
            W4a8Variant {
                beside: true,
                idle_decode: true,
                ..D
            },
            W4a8Variant {
                decode: W4a8Decode::Warpgroup,
                ..D
            },
            W4a8Variant {
                decode: W4a8Decode::WarpgroupRing,
                ..D
            },
            W4a8Variant::WIDE,
            W4a8Variant::WIDE_LEAN,
        ]
    };

    /// Threads a CTA: a fourth warpgroup with `KILN_W4A8_DECODE=warpgroup` (its decoders) and
    /// `KILN_W4A8_FORM=wide` (a third consumer).
    pub const fn threads(self) -> u32 {
        match self.decode {
            _ if self.wide => 512,
            W4a8Decode::Warpgroup | W4a8Decode::WarpgroupRing => 512,
            _ => 384,
        }
    }

    /// The variant whose kernel runs it for the fused SwiGLU (`swiglu`) or the grouped GEMM: the
    /// grouped GEMM's `wide-lean` is `wide` (its decode spills there at 160
    /// registers), so that they are one spec, one compile and one cache entry.
    pub const fn kernel(self, swiglu: bool) -> Self {
        if !swiglu && self.lean {
            W4a8Variant::WIDE
        } else {
            self
        }
    }

    /// The variant a launch of `p` runs under the knobs `k` (`KILN_W4A8_FORM=auto` by
    /// [`auto_form`]), or why they cannot go together.
    pub fn for_launch(p: &Fp8MoeProblem, k: &MoeOverrides) -> Result<Self> {
        W4a8Variant::for_form(k, auto_form(p, k))
    }

    /// The variant of `form` (already resolved by [`auto_form`]) under the other W4A8 knobs of
    /// `k`, or why they cannot go together.
    pub fn for_form(k: &MoeOverrides, form: W4a8Form) -> Result<Self> {
        W4a8Variant::from_knobs(
            k.w4a8_sx_staged,
            k.w4a8_decode,
            k.w4a8_beside,
            k.w4a8_idle_decode,
            form,
        )
    }

    /// The variant the knobs ask for (`auto` counts as `ss`), or why they cannot go together.
    pub fn from_knobs(
        sx_staged: bool,
        decode: W4a8Decode,
        beside: bool,
        idle_decode: bool,
        form: W4a8Form,
    ) -> Result<Self> {
        let wide = matches!(form, W4a8Form::Wide | W4a8Form::WideLean);
        let off_consumers = decode != W4a8Decode::Consumers;
        if wide && (!sx_staged || off_consumers || beside || idle_decode) {
            return Err(Error::invalid(
                "KILN_W4A8_FORM=wide and wide-lean read X's scales from the stages and decode on their \
                 consumers: leave KILN_W4A8_SX at tma and KILN_W4A8_DECODE, KILN_W4A8_PROMOTE \
                 and KILN_W4A8_IDLE at their defaults",
            ));
        }
        if off_consumers && beside {
            return Err(Error::invalid(
                "KILN_W4A8_PROMOTE=beside orders the consumers' own decode, and \
                 KILN_W4A8_DECODE=producer or warpgroup moves the decode off them: set one of the two",
            ));
        }
        if matches!(decode, W4a8Decode::Warpgroup | W4a8Decode::WarpgroupRing) && !sx_staged {
            return Err(Error::invalid(
                "KILN_W4A8_DECODE=warpgroup and warpgroup-ring read X's scales from the stages: leave \
                 KILN_W4A8_SX at tma",
            ));
        }
        if idle_decode && !(beside && sx_staged) {
            return Err(Error::invalid(
                "KILN_W4A8_IDLE=decode runs with KILN_W4A8_PROMOTE=beside and KILN_W4A8_SX=tma \
                 only: set those too, or leave KILN_W4A8_IDLE out",
            ));
        }
        Ok(W4a8Variant {
            sx_staged,
            decode,
            beside,
            idle_decode,
            wide,
            lean: form == W4a8Form::WideLean,
        })
    }
}

/// The form `KILN_W4A8_FORM` runs for `p`: `auto` (the default) is `wide-lean` for the fused
/// SwiGLU and `wide` for the grouped GEMM where the rows are contiguous and average at least
/// [`WIDE_ROWS_PER_EXPERT`] an expert, over at most [`WIDE_MAX_EXPERTS`], with the other W4A8
/// knobs at their defaults (they shape the 128-token form), and `ss` otherwise: at decode and
/// with masked rows, whose counts only the GPU sees; any other value stands. The host sees a
/// launch's rows and experts, not how they spread.
pub fn auto_form(p: &Fp8MoeProblem, k: &MoeOverrides) -> W4a8Form {
    if k.w4a8_form != W4a8Form::Auto {
        return k.w4a8_form;
    }
    let defaults = k.w4a8_sx_staged
        && k.w4a8_decode == W4a8Decode::Consumers
        && !k.w4a8_beside
        && !k.w4a8_idle_decode;
    let prefill = match &p.rows {
        Rows::Contiguous { x_rows, .. } => *x_rows >= WIDE_ROWS_PER_EXPERT * p.experts,
        Rows::Masked { .. } => false,
    };
    let fits = p.experts > 0 && p.experts <= WIDE_MAX_EXPERTS as usize;
    // the grouped GEMM (the down projection) runs `wide`: 14 % faster than `ss` in two rounds
    // (F90, F120); its `wide-lean` is `wide` (the lean decode spills there)
    match (defaults && prefill && fits, p.swiglu.is_some()) {
        (true, true) => W4a8Form::WideLean,
        (true, false) => W4a8Form::Wide,
        (false, _) => W4a8Form::Ss,
    }
}

/// Output columns of a tile: two 64-row atoms, the GEMM's 128 or the SwiGLU's 64 (gate, up).
pub fn bn(swiglu: bool) -> usize {
    if swiglu {
        TILE_N / 2
    } else {
        TILE_N
    }
}

/// The argument block, laid out as `W4a8Args` in the kernel.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct W4a8Args {
    pub sched: u64,
    pub y: u64,
    pub route: u64,
    pub escale: u64,
    pub w: u64,
    pub sx: u64,
    pub ldy: i64,
    pub expert_bytes: i64,
    pub experts: i32,
    pub n: i32,
    pub katoms: i32,
    pub n_pad: i32,
    pub tiles_n: i32,
    pub group_m: i32,
    pub by_expert: i32,
    pub x_rows: i32,
}

/// The device buffers of one call.
pub struct W4a8Operands<'a> {
    /// X e4m3 codes [x_rows, K] and their 1x128 scales (f32, M-major: `sx[kb * x_rows + row]`).
    pub x: &'a DeviceBuffer,
    pub sx: &'a DeviceBuffer,
    /// The W4A8 prepack's bytes and row factors.
    pub w: &'a DeviceBuffer,
    pub escale: &'a DeviceBuffer,
    /// Y [x_rows, N] bf16.
    pub y: &'a DeviceBuffer,
    pub rows: &'a DeviceBuffer,
    pub route: Option<&'a DeviceBuffer>,
    pub sched: &'a DeviceBuffer,
}

/// What the kernel needs to know of the prepacked weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct W4a8Layout {
    pub experts: usize,
    pub n: usize,
    pub k: usize,
    pub swiglu: bool,
}

impl W4a8Prepacked {
    pub fn layout(&self) -> W4a8Layout {
        W4a8Layout {
            experts: self.experts,
            n: self.n,
            k: self.k,
            swiglu: self.swiglu,
        }
    }
}

impl W4a8Layout {
    fn prepacked(self) -> W4a8Prepacked {
        W4a8Prepacked {
            experts: self.experts,
            n: self.n,
            k: self.k,
            swiglu: self.swiglu,
            bytes: Vec::new(),
            escale: Vec::new(),
        }
    }
    pub fn expert_bytes(self) -> usize {
        self.prepacked().expert_bytes()
    }
    /// f32 row factors of all experts.
    pub fn escale_len(self) -> usize {
        let p = self.prepacked();
        self.experts * p.halves() * p.n_pad()
    }
}

/// X's 1x128 scales seen as one row of `x_scales` f32, in boxes of [`SX_BOX`]: the producer's
/// load of a K block's scales beside its X tile (`KILN_W4A8_SX=tma`). One row, so any row count
/// works (a map over [K blocks, rows] would need the rows a multiple of 4); the kernel starts
/// each box on a multiple of 4 scales, the tile's first one of the box's first 4.
pub fn sx_map(p: &Fp8MoeProblem, addr: u64) -> Tma2d {
    sx_map_box(p, addr, SX_BOX)
}

/// [`sx_map`] in boxes of `boxed` scales (a tile's rows and 4 more).
pub fn sx_map_box(p: &Fp8MoeProblem, addr: u64, boxed: u32) -> Tma2d {
    let len = p.x_scales() as u64;
    Tma2d {
        dtype: TmaDType::F32,
        addr,
        dims: [len, 1],
        row_stride_bytes: (4 * len).next_multiple_of(16),
        box_dims: [boxed, 1],
        swizzle: TmaSwizzle::None,
    }
}

/// [`sx_map`] validated and encoded (no L2 promotion) for `kernel`, or why TMA cannot map the
/// scales (their address off 16 bytes).
pub fn encode_sx_map(p: &Fp8MoeProblem, addr: u64, kernel: &str) -> Result<TensorMap> {
    encode_sx_map_box(p, addr, kernel, SX_BOX)
}

/// [`encode_sx_map`] in boxes of `boxed` scales.
pub fn encode_sx_map_box(
    p: &Fp8MoeProblem,
    addr: u64,
    kernel: &str,
    boxed: u32,
) -> Result<TensorMap> {
    let ts = sx_map_box(p, addr, boxed);
    ts.validate().map_err(|r| Error::Unsupported {
        kernel: kernel.into(),
        reason: format!("X's scales: {r}"),
    })?;
    ts.encode_with(None)
}

pub struct W4a8Experts;

impl W4a8Experts {
    /// `v`: the X scales in the stages (`KILN_W4A8_SX=tma`, the default), the decode on the
    /// producer's warps (`KILN_W4A8_DECODE=producer`), the promotion beside the next decode
    /// (`KILN_W4A8_PROMOTE=beside`), a short tile's decode on its idle consumer
    /// (`KILN_W4A8_IDLE=decode`); each defined only when on.
    pub fn spec(arch: &str, swiglu: bool, v: W4a8Variant) -> KernelSpec {
        let v = v.kernel(swiglu);
        let (file, entry) = if v.wide {
            ("moe/fp4_experts_w4a8_wide.cu", WIDE_ENTRY)
        } else {
            ("moe/fp4_experts_w4a8.cu", ENTRY)
        };
        let mut s = KernelSpec::new(file, entry, arch)
            .define("KILN_OUT", DType::Bf16.code())
            .define("KILN_SWIGLU", swiglu as u32)
            .define("KILN_STAGES", v.stages())
            .define("KILN_MAX_EXPERTS", v.max_experts())
            .define("KILN_SMEM", v.smem_bytes());
        if v.sx_staged && !v.wide {
            s = s.define("KILN_W4A8_SX", 1);
        }
        match v.decode {
            W4a8Decode::Consumers => {}
            W4a8Decode::Producer => s = s.define("KILN_W4A8_DEC", 1),
            W4a8Decode::Warpgroup => s = s.define("KILN_W4A8_DEC", 2),
            W4a8Decode::WarpgroupRing => {
                s = s
                    .define("KILN_W4A8_DEC", 3)
                    .define("KILN_W4A8_ASTAGES", ATOM_STAGES)
            }
        }
        if v.beside {
            s = s.define("KILN_W4A8_BESIDE", 1);
        }
        if v.idle_decode {
            s = s.define("KILN_W4A8_IDLE", 1);
        }
        if v.lean {
            s = s.define("KILN_W4A8_LEAN", 1);
        }
        s
    }

    /// The grouped GEMM and the fused SwiGLU of the forms `auto` runs (for `kiln check`): `ss`
    /// for both, `wide-lean` for the SwiGLU, and `wide`'s grouped GEMM (what `wide-lean`'s
    /// compiles to: the GEMM decodes as `wide` does).
    pub fn variants(arch: &str) -> Vec<KernelSpec> {
        if !crate::jit::arch::has_wgmma(arch) {
            return Vec::new();
        }
        [
            (W4a8Variant::DEFAULT, false),
            (W4a8Variant::DEFAULT, true),
            (W4a8Variant::WIDE, false),
            (W4a8Variant::WIDE_LEAN, true),
        ]
        .into_iter()
        .map(|(v, swiglu)| Self::spec(arch, swiglu, v))
        .collect()
    }

    /// `Ok` or why `p` cannot run on `dev`: the FP8 MoE kernels' conditions (Hopper, experts
    /// per launch, shared memory), and bf16 output.
    pub fn supports(p: &Fp8MoeProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        if p.out != DType::Bf16 || p.quantized_out() {
            return Err("writes bf16 only; ask for bf16 output".into());
        }
        // the largest variant's shared memory for any
        let most = W4a8Variant::ALL.iter().map(|v| v.smem_bytes()).max();
        fp8_grouped::supports(p, dev, most.unwrap_or(0))
    }

    /// Checks `p`, the weights `l` and the buffers against each other.
    pub fn check(p: &Fp8MoeProblem, l: &W4a8Layout, ops: &W4a8Operands) -> Result<()> {
        p.validate()?;
        check_weights_fit(
            (l.experts, l.n, l.k, l.swiglu),
            (p.experts, p.n, p.k, p.swiglu.is_some()),
            "prepack_w4a8_swiglu",
        )?;
        let mut need = vec![
            ("X", ops.x, p.x_rows() * p.k),
            ("X's scales", ops.sx, 4 * p.x_scales()),
            ("the prepacked weights", ops.w, l.experts * l.expert_bytes()),
            ("the row factors", ops.escale, 4 * l.escale_len()),
            ("Y", ops.y, p.x_rows() * p.n * 2),
            (
                "the rows array",
                ops.rows,
                p.layout().rows_array().len() * 4,
            ),
            ("the schedule workspace", ops.sched, sched_bytes(p.experts)),
        ];
        let routed = p.swiglu.is_some_and(|s| s.routed);
        need_routing(&mut need, routed, ops.route, p.x_rows())?;
        check_buffers(&need, &[ops.x.ptr(), ops.w.ptr()])
    }

    /// Enqueues the tile tables and the kernel; no host synchronisation (graph-capturable).
    pub fn launch(
        ctx: &Context,
        p: &Fp8MoeProblem,
        l: &W4a8Layout,
        ops: &W4a8Operands,
    ) -> Result<()> {
        Self::launch_form(ctx, p, l, ops, ctx.overrides.moe.w4a8_form)
    }

    /// [`launch`](Self::launch) in the form `form` instead of `KILN_W4A8_FORM`'s (the bench's
    /// `--forms`: several forms timed in one process), the other W4A8 knobs as set.
    pub fn launch_form(
        ctx: &Context,
        p: &Fp8MoeProblem,
        l: &W4a8Layout,
        ops: &W4a8Operands,
        form: W4a8Form,
    ) -> Result<()> {
        let unsupported = |reason: String| Error::Unsupported {
            kernel: NAME.into(),
            reason,
        };
        Self::supports(p, &ctx.info).map_err(unsupported)?;
        Self::check(p, l, ops)?;
        let swiglu = p.swiglu.is_some();
        let tx = x_map(p, ops.x.ptr());
        tx.validate().map_err(unsupported)?;
        let mut map_x = tx.encode_with(ctx.overrides.tma.promotion)?;
        let knobs = &MoeOverrides {
            w4a8_form: form,
            ..ctx.overrides.moe
        };
        let form = auto_form(p, knobs);
        // the kernel's variant: its shared memory and threads are the launch's
        let v = W4a8Variant::for_form(knobs, form)?.kernel(swiglu);
        if p.experts > v.max_experts() as usize {
            return Err(Error::invalid(format!(
                "KILN_W4A8_FORM={} takes at most {} experts a launch, not {}: leave \
                 KILN_W4A8_FORM at ss for more",
                form.name(),
                v.max_experts(),
                p.experts
            )));
        }
        let staged = v.sx_staged;
        // the kernel takes a scales map either way; unstaged, it never reads it (X's stands in)
        let mut map_sx = if staged {
            encode_sx_map_box(p, ops.sx.ptr(), NAME, v.bm() + 4)?
        } else {
            tx.encode_with(ctx.overrides.tma.promotion)?
        };
        let f = ctx.function(&Self::spec(&ctx.arch(), swiglu, v))?;
        let (group_m, by_expert) = TileOrder::Fixed(1).args();
        let tiles_n = p.n.div_ceil(bn(swiglu));
        let packed = l.prepacked();
        let mut args = W4a8Args {
            sched: ops.sched.ptr(),
            y: ops.y.ptr(),
            route: ops.route.map_or(0, |r| r.ptr()),
            escale: ops.escale.ptr(),
            w: ops.w.ptr(),
            sx: ops.sx.ptr(),
            ldy: p.n as i64,
            expert_bytes: l.expert_bytes() as i64,
            experts: p.experts as i32,
            n: p.n as i32,
            katoms: p.k.div_ceil(W4A8_K) as i32,
            n_pad: packed.n_pad() as i32,
            tiles_n: tiles_n as i32,
            group_m,
            by_expert,
            x_rows: p.x_rows() as i32,
        };
        let layout = p.layout();
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
        // heaviest experts first, each expert's n-tiles in a row
        tile_prefix::launch(ctx, &layout, &moe_ops, v.bm(), true)?;
        let tiles = max_tiles_m(&layout, v.bm() as usize) * tiles_n as u64;
        // SAFETY: the kernel takes (TmaMap, TmaMap, W4a8Args) in this order. The maps address X
        // and X's scales (or X again, unread), the args Y, X's scales, the weights, the row
        // factors, the routing weights and the schedule workspace; `check` has matched every
        // buffer to the problem and the caller keeps them alive until the stream has run.
        unsafe {
            launch_persistent_threads(
                ctx,
                &f,
                tiles.min(ctx.info.sm_count as u64),
                v.threads(),
                v.smem_bytes(),
                &mut [
                    map_x.as_param(),
                    map_sx.as_param(),
                    &mut args as *mut W4a8Args as *mut c_void,
                ],
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::moe::schedule::table_bytes;

    #[test]
    fn args_match_the_device_layout() {
        // six pointers, two i64, eight ints
        assert_eq!(std::mem::size_of::<W4a8Args>(), 96);
        assert_eq!(std::mem::offset_of!(W4a8Args, ldy), 48);
        assert_eq!(std::mem::offset_of!(W4a8Args, experts), 64);
        assert_eq!(std::mem::offset_of!(W4a8Args, x_rows), 92);
    }

    #[test]
    fn the_ring_fits_and_keeps_stages() {
        for v in W4a8Variant::ALL {
            assert!(v.smem_bytes() <= SMEM_LIMIT);
            assert!(v.stages() >= 5, "{v:?}: {}", v.stages());
            assert_eq!(v.stage_size() % 1024, 0);
            // the slots after the atom ring stay on 1 KB (their 128B swizzle)
            assert_eq!(
                v.atom_ring_bytes() / (ATOM_STAGE_BYTES + 16) * ATOM_STAGE_BYTES % 1024,
                0
            );
        }
        // neither the staged scales (a KB of each stage) nor the slots' barriers cost a stage
        assert!(W4a8Variant::ALL
            .iter()
            .filter(|v| !v.wide)
            .all(|v| v.stages() == 6));
        // the wide form's 34 KB stages: five, with the tables of 256 experts (four with 1,024)
        for wide in W4a8Variant::ALL.iter().filter(|v| v.wide) {
            assert!(wide.stages() == 5 && wide.threads() == 512, "{wide:?}");
            assert_eq!(wide.stage_size(), 192 * 128 + 10 * 1024);
        }
        assert_eq!(
            (3 * MAX_EXPERTS as u32 + 2) * 4,
            table_bytes(MAX_EXPERTS) as u32
        );
        assert_eq!(W4a8Experts::variants("sm_90a").len(), 4);
        assert!(W4a8Variant::ALL.contains(&W4a8Variant::WIDE));
        // wide-lean's grouped GEMM is wide's (the same spec, one compile); its SwiGLU its own
        let v = W4a8Variant::WIDE_LEAN;
        assert!(W4a8Variant::ALL.contains(&v));
        assert_eq!(
            W4a8Experts::spec("sm_90a", false, v),
            W4a8Experts::spec("sm_90a", false, W4a8Variant::WIDE)
        );
        assert_ne!(
            W4a8Experts::spec("sm_90a", true, v),
            W4a8Experts::spec("sm_90a", true, W4a8Variant::WIDE)
        );
    }

    #[test]
    fn the_knobs_make_only_the_compiled_variants() {
        assert_eq!(
            W4a8Variant::from_knobs(true, W4a8Decode::Consumers, false, false, W4a8Form::Ss)
                .unwrap(),
            W4a8Variant::DEFAULT
        );
        for d in [
            W4a8Decode::Producer,
            W4a8Decode::Warpgroup,
            W4a8Decode::WarpgroupRing,
        ] {
            let e = W4a8Variant::from_knobs(true, d, true, false, W4a8Form::Ss).unwrap_err();
            assert!(e.to_string().contains("KILN_W4A8_PROMOTE=beside"), "{e}");
        }
        let e = W4a8Variant::from_knobs(false, W4a8Decode::Warpgroup, false, false, W4a8Form::Ss)
            .unwrap_err();
        assert!(e.to_string().contains("KILN_W4A8_DECODE=warpgroup"), "{e}");
        for (sx, beside) in [(true, false), (false, true)] {
            let e = W4a8Variant::from_knobs(sx, W4a8Decode::Consumers, beside, true, W4a8Form::Ss)
                .unwrap_err();
            assert!(e.to_string().contains("KILN_W4A8_IDLE=decode"), "{e}");
        }
        let e = W4a8Variant::from_knobs(true, W4a8Decode::Warpgroup, false, false, W4a8Form::Wide)
            .unwrap_err();
        assert!(e.to_string().contains("KILN_W4A8_FORM=wide"), "{e}");
        // every combination the knobs allow is one that the test below compiles
        let mut allowed = 0;
        for bits in 0..8u32 {
            let b = |i: u32| bits >> i & 1 == 1;
            for decode in [
                W4a8Decode::Consumers,
                W4a8Decode::Producer,
                W4a8Decode::Warpgroup,
                W4a8Decode::WarpgroupRing,
            ] {
                // every form the knob can force (`auto` picks one of them by the rows)
                for form in W4a8Form::ALL.into_iter().filter(|f| *f != W4a8Form::Auto) {
                    if let Ok(v) = W4a8Variant::from_knobs(b(0), decode, b(1), b(2), form) {
                        assert!(W4a8Variant::ALL.contains(&v), "{v:?}");
                        allowed += 1;
                    }
                }
            }
        }
        assert_eq!(allowed, W4a8Variant::ALL.len());
    }

    /// F90: `auto` (the default) runs `wide` at prefill and `ss` at decode, by the launch's rows
    /// an expert; masked rows, more experts than `wide`'s tables hold, or another W4A8 knob set
    /// keep `ss`; an explicit form stands either way. F120: the SwiGLU's prefill form was
    /// `wide-first` (F150: `wide-lean`), and the grouped GEMM's is `wide`.
    #[test]
    fn auto_takes_wide_by_rows_per_expert() {
        let k = MoeOverrides::NONE;
        assert_eq!(k.w4a8_form, W4a8Form::Auto);
        let even = |rows: usize, e: usize| {
            let c: Vec<usize> = (0..e).map(|i| (i + 1) * rows / e - i * rows / e).collect();
            Fp8MoeProblem::contiguous(&c, 2048, 7168).with_swiglu(true, false)
        };
        // the grouped GEMM runs wide at prefill (F120), ss at decode
        let gemm = Fp8MoeProblem::contiguous(&[128; 256], 7168, 2048);
        assert_eq!(auto_form(&gemm, &k), W4a8Form::Wide);
        assert_eq!(
            W4a8Variant::for_launch(&gemm, &k).unwrap(),
            W4a8Variant::WIDE
        );
        let gemm_decode = Fp8MoeProblem::contiguous(&[2; 256], 7168, 2048);
        assert_eq!(auto_form(&gemm_decode, &k), W4a8Form::Ss);
        // the bench's prefill (32,768 rows on 256 experts, 128 an expert) and the threshold
        let prefill = even(32768, 256);
        assert_eq!(auto_form(&prefill, &k), W4a8Form::WideLean);
        assert_eq!(
            W4a8Variant::for_launch(&prefill, &k).unwrap(),
            W4a8Variant::WIDE_LEAN
        );
        assert_eq!(
            auto_form(&even(WIDE_ROWS_PER_EXPERT * 256, 256), &k),
            W4a8Form::WideLean
        );
        assert_eq!(
            auto_form(&even(WIDE_ROWS_PER_EXPERT * 256 - 1, 256), &k),
            W4a8Form::Ss
        );
        // decode: 512 rows on 256 experts, and the same as masked counts
        let decode = even(512, 256);
        assert_eq!(
            W4a8Variant::for_launch(&decode, &k).unwrap(),
            W4a8Variant::DEFAULT
        );
        let masked = Fp8MoeProblem::masked(&[200; 8], 256, 2048, 7168).with_swiglu(true, false);
        assert_eq!(auto_form(&masked, &k), W4a8Form::Ss);
        // more experts than wide's tables: ss
        assert_eq!(auto_form(&even(512 * 200, 512), &k), W4a8Form::Ss);
        // a knob of the 128-token form keeps it (no error for a knob auto would have clashed with)
        let beside = MoeOverrides {
            w4a8_beside: true,
            ..MoeOverrides::NONE
        };
        assert_eq!(auto_form(&prefill, &beside), W4a8Form::Ss);
        assert!(W4a8Variant::for_launch(&prefill, &beside).is_ok());
        // the knob forces either form
        for (form, v) in [
            (W4a8Form::Ss, W4a8Variant::DEFAULT),
            (W4a8Form::Wide, W4a8Variant::WIDE),
            (W4a8Form::WideLean, W4a8Variant::WIDE_LEAN),
        ] {
            let k = MoeOverrides {
                w4a8_form: form,
                ..MoeOverrides::NONE
            };
            for p in [&prefill, &decode] {
                assert_eq!(W4a8Variant::for_launch(p, &k).unwrap(), v);
            }
        }
    }

    #[test]
    fn the_scales_map_takes_any_row_count() {
        // 130 rows (not a multiple of 4) x 9 K blocks: one row of 1,170 scales
        let p = Fp8MoeProblem::contiguous(&[60, 70], 256, 1152);
        let m = sx_map(&p, 1 << 20);
        assert_eq!(m.dims, [130 * 9, 1]);
        assert_eq!(m.row_stride_bytes, 4688);
        assert!(m.validate().is_ok(), "{:?}", m.validate());
        assert!(sx_map(&p, (1 << 20) + 4).validate().is_err());
    }

    /// F11: the staged scales' TMA box started on the tile's first scale, `kb * x_rows + row0`,
    /// any multiple of 4 bytes, and every launch stopped with an illegal instruction (a box must
    /// start on 16 bytes of global memory). The kernel now starts it on that index rounded down to
    /// 4: the box must still reach the tile's last row, and its bytes fit the stage.
    #[test]
    fn f11_the_scales_box_starts_on_16_bytes_and_still_covers_the_tile() {
        for first in 0u32..64 {
            let start = first & !3;
            assert_eq!(start * 4 % 16, 0);
            assert!(start <= first && start + SX_BOX >= first + BM, "{first}");
        }
        let sx_off = BM * W4A8_K as u32 + 2 * W4A8_ATOM_BYTES as u32;
        assert_eq!(sx_off % 128, 0);
        assert!(sx_off + 4 * SX_BOX <= stage_bytes(BM, true));
        assert!(
            sx_off + 4 * SX_BOX > stage_bytes(BM, false),
            "the `ldg` stage stays as it was"
        );
    }

    /// Every variant (both ways of reading X's scales, both places of the decode) compiles
    /// without spills or serialisation notes (the experiments' only when asked for: the variant
    /// budget).
    #[test]
    fn every_variant_compiles_without_spills() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let specs: Vec<_> = W4a8Variant::ALL
            .iter()
            .flat_map(|&v| [false, true].map(|swiglu| W4a8Experts::spec("sm_90a", swiglu, v)))
            .collect();
        crate::jit::testing::assert_compile_clean(&specs);
    }
}
