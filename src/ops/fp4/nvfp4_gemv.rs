//! Host side of `kernels/gemm/nvfp4_gemv.cu`: Y [M, N] = g * X [M, K] . W^T for bf16 X with M
//! 1..16 and NVFP4 W [N, K] in the standard layout, bf16 or f16 out, batched with strides.

use std::ffi::c_void;

use crate::device::{Context, DeviceBuffer, Function, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;
use crate::overrides::Fp4Gemv;

use super::fp4_quant::{check_packed, check_tensor_scale, Fp4Format, Fp4View};
pub use super::nvfp4_gemv_pack::gemv_layout;

pub const NAME: &str = "nvfp4_gemv";

/// The largest M the kernel takes (two 8-column mma tiles).
pub const MAX_M: usize = 16;

/// The argument block, laid out as `GemvArgs` in the kernel.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct GemvArgs {
    x: u64,
    w: u64,
    s: u64,
    y: u64,
    ldx: i64,
    ldy: i64,
    x_batch: i64,
    w_batch: i64,
    s_batch: i64,
    y_batch: i64,
    g: f32,
    m: i32,
    n: i32,
    k: i32,
    out_f16: i32,
}

/// One GEMV: `batch` independent products, each Y_b [m, n] = g * X_b [m, k] . W_b^T.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GemvProblem {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub batch: usize,
    pub output: DType,
}

impl GemvProblem {
    pub fn new(m: usize, n: usize, k: usize, output: DType) -> Self {
        GemvProblem {
            m,
            n,
            k,
            batch: 1,
            output,
        }
    }

    /// Checks the shape: M 1..=16, K a multiple of 32 (16-byte weight rows, whole scale pairs),
    /// bf16 or f16 out.
    pub fn validate(&self) -> Result<()> {
        if self.m == 0 || self.m > MAX_M {
            return Err(Error::invalid(format!(
                "M = {} is outside the NVFP4 GEMV's 1..={MAX_M}: run larger M as a GEMM on \
                 dequantised weights",
                self.m
            )));
        }
        if self.n == 0 || self.batch == 0 {
            return Err(Error::invalid("N and the batch must be at least 1"));
        }
        if !self.k.is_multiple_of(32) || self.k == 0 {
            return Err(Error::invalid(format!(
                "K = {} is not a multiple of 32: the NVFP4 GEMV reads 16-byte weight rows and \
                 scale pairs, so pad K with zeros to {}",
                self.k,
                self.k.max(1).next_multiple_of(32)
            )));
        }
        if self.n > i32::MAX as usize || self.k > i32::MAX as usize {
            return Err(Error::invalid("N and K must each be below 2^31"));
        }
        if self.batch > 65535 || self.n.div_ceil(16) > i32::MAX as usize {
            return Err(Error::invalid(format!(
                "a batch of {} is over the 65,535 the grid takes",
                self.batch
            )));
        }
        if self.output == DType::F32 {
            return Err(Error::invalid(
                "the NVFP4 GEMV writes bf16 or f16; pick one of those outputs",
            ));
        }
        Ok(())
    }

    /// Bytes the product must read: the packed weights and their scales, X once, Y written.
    pub fn min_bytes(&self) -> f64 {
        let w = self.n * self.k / 2 + self.n * self.k / 16;
        let xy = self.m * self.k * 2 + self.m * self.n * self.output.size();
        (self.batch * (w + xy)) as f64
    }

    pub fn flops(&self) -> f64 {
        2.0 * (self.batch * self.m * self.n * self.k) as f64
    }

    /// Warps per CTA (a power of two, 4 to the kernel's MAX_WARPS, 16): about 16 warps an SM
    /// over the grid, each with its weight loads in flight; a small N gets more warps a CTA,
    /// splitting K further.
    pub fn warps(&self, sms: u32) -> u32 {
        let ctas = self.n.div_ceil(16) * self.batch;
        // rounded down: more would not be resident at once (at most 128 registers a thread)
        let want = (16 * sms.max(1) as usize / ctas.max(1)).max(1);
        (1u32 << want.ilog2().min(4)).clamp(4, 16)
    }

    /// Warps per CTA of the lean ring: [`GemvProblem::warps`], halved (down to 2) where that
    /// puts a grid of more than one wave into one. Its CTAs are bounded by shared memory (four
    /// weight stages and two X stages a warp), so a grid of 4-warp CTAs can leave a last
    /// partial wave: 4x14336x4096 is 896 CTAs, 4 an SM at M 4 (528 at once: 1.7 waves), where
    /// 2-warp CTAs fit 8 an SM.
    pub fn lean_warps(&self, sms: u32) -> u32 {
        let ctas = self.n.div_ceil(16) * self.batch;
        let resident = |w: u32| -> usize {
            let smem = (w * lean_warp_bytes(self.m) + 1024) as usize;
            // at most 112 registers a thread (the kernel: 107, no spills), 64 warps an SM
            let by_regs = 65536 / (w as usize * 32 * 112);
            let by_warps = 64 / w as usize;
            (228 * 1024 / smem).min(by_regs).min(by_warps) * sms.max(1) as usize
        };
        let mut w = self.warps(sms);
        while w > 2 && resident(w) < ctas && resident(w / 2) >= ctas {
            w /= 2;
        }
        w
    }

    /// Warps per CTA of the X ring: the most (up to [`XRING_MAX_WARPS`] and the warp's steps)
    /// that keep the grid in one wave, so that an SM holds as many warps as its CTAs allow (the
    /// profile of the lean ring: 3.6 warps a scheduler left the SMs issuing half the time).
    /// 1x8192x8192: 512 CTAs, four an SM, 6 warps each (24 an SM against lean's 16);
    /// 4x14336x4096: 896 CTAs, seven an SM, 3 warps each. A grid over one wave at any width
    /// takes 4.
    pub fn xring_warps(&self, sms: u32) -> u32 {
        self.ring_warps(sms, xring_warp_bytes(self.m))
    }

    /// [`Self::xring_warps`] for the swizzled X ring (its slots 16 bytes a row of X longer).
    pub fn xswz_warps(&self, sms: u32) -> u32 {
        self.ring_warps(sms, xswz_warp_bytes(self.m))
    }

    /// Warps per CTA of the xstage ring: as the X ring's, a warp's K share counted in its
    /// 2-step stages (1x8192x8192: 6 warps, 4 CTAs an SM, 24 warps).
    pub fn xstage_warps(&self, sms: u32) -> u32 {
        self.ring_warps_of(sms, xstage_warp_bytes(self.m), (self.k / 256).max(1))
    }

    /// Warps per CTA of the two-tile X ring (`xswz2`): as the X ring's, over its CTAs of 32
    /// rows (4x14336x4096: 448 CTAs, 4 an SM at M 4, 5 warps each, 20 an SM).
    pub fn xswz2_warps(&self, sms: u32) -> u32 {
        self.ring_warps_rows(sms, xswz2_warp_bytes(self.m), (self.k / 128).max(1), 32)
    }

    /// Whether `pack` runs the two-tile X ring on codes in the GEMV layout: M 2-8, K a multiple
    /// of 128, and at least [`XSWZ2_MIN_STEPS`] steps a warp. H200, two rounds of 2026-11-30
    /// (G19, as `pack2`): against the one-tile ring (xswz) chained, -31 to -32 % at
    /// 4x28672x8192 (21 steps a warp; xswz's one-wave rule leaves it 1-warp CTAs there) and -5 %
    /// at 4x16384x16384 (26), but equal at 4x14336x4096 (6) and +6.5 % at 4x8192x8192 (6): its
    /// fewer instructions a weight pay in a long loop, its start (two double slots in flight,
    /// 32-row CTAs) in a short one. `pack` takes it from G20 on.
    pub fn two_tiles_pay(&self, sms: u32) -> bool {
        (2..=XSWZ2_MAX_M).contains(&self.m)
            && self.takes_async()
            && self.k / 128 >= XSWZ2_MIN_STEPS * self.xswz2_warps(sms) as usize
    }

    fn ring_warps(&self, sms: u32, per_warp: u32) -> u32 {
        self.ring_warps_of(sms, per_warp, (self.k / 128).max(1))
    }

    /// The most warps a CTA (up to [`XRING_MAX_WARPS`] and `units`, a warp's share of K at
    /// least one) that keep the grid in one wave with `per_warp` bytes of shared memory a warp.
    fn ring_warps_of(&self, sms: u32, per_warp: u32, units: usize) -> u32 {
        self.ring_warps_rows(sms, per_warp, units, 16)
    }

    /// [`Self::ring_warps_of`] for CTAs of `rows` rows of W.
    fn ring_warps_rows(&self, sms: u32, per_warp: u32, units: usize, rows: usize) -> u32 {
        let ctas = self.n.div_ceil(rows) * self.batch;
        let per_warp = per_warp as usize;
        let resident = |w: usize| -> usize {
            // 1 KB of shared memory a CTA is the driver's; 64 warps an SM
            let by_smem = 228 * 1024 / (w * per_warp + 1024);
            let by_regs = 65536 / (w * 32 * XRING_REGS);
            by_smem.min(by_regs).min(64 / w).min(32) * sms.max(1) as usize
        };
        let most = (XRING_MAX_WARPS as usize).min(units);
        (1..=most)
            .rev()
            .find(|&w| resident(w) >= ctas)
            .unwrap_or(4.min(most)) as u32
    }

    pub fn label(&self) -> String {
        let b = if self.batch > 1 {
            format!("x{}", self.batch)
        } else {
            String::new()
        };
        format!("{}x{}x{}{b} {}", self.m, self.n, self.k, self.output)
    }
}

/// The specialisation for M up to 8 (`nf` 1) or 16 (2); the output dtype and the warps per CTA
/// are arguments.
pub fn spec(arch: &str, nf: u32) -> KernelSpec {
    KernelSpec::new("gemm/nvfp4_gemv.cu", NAME, arch).define("KILN_GEMV_NF", nf)
}

/// The async ring's specialisation (`KILN_FP4_GEMV=async`): weights by cp.async into a ring of
/// [`RING_STEPS`] steps a warp in shared memory.
pub fn spec_async(arch: &str, nf: u32) -> KernelSpec {
    spec(arch, nf).define("KILN_GEMV_ASYNC", 1)
}

/// Steps in a warp's async ring, and the bytes of one (16 rows x 64 code bytes, 16 x 8 scales):
/// the kernel's RING and RING_STEP.
pub const RING_STEPS: u32 = 8;
pub const RING_STEP_BYTES: u32 = 16 * 64 + 16 * 8;

/// The wide ring's specialisation (`KILN_FP4_GEMV=wide`): stages of 4 steps copied 256 bytes a
/// row at a time into a ring of [`WIDE_RING`] stages a warp.
pub fn spec_wide(arch: &str, nf: u32) -> KernelSpec {
    spec(arch, nf).define("KILN_GEMV_ASYNC", 2)
}

/// Stages in a warp's wide ring, and the bytes of one (16 rows x 256 code bytes, 16 x 32
/// scales): the kernel's WIDE_RING and WIDE_STAGE.
pub const WIDE_RING: u32 = 3;
pub const WIDE_STAGE_BYTES: u32 = 16 * 256 + 16 * 32;

/// The lean ring's specialisation (`KILN_FP4_GEMV=lean`, M up to [`LEAN_MAX_M`]): stages of 2
/// steps with the stage's X, copied by cp.async from addresses computed once a lane.
pub fn spec_lean(arch: &str) -> KernelSpec {
    spec(arch, 1).define("KILN_GEMV_ASYNC", 3)
}

/// Weight stages in a warp's lean ring, the bytes of one (16 rows x 128 code bytes, 16 x 16
/// scales), the most rows of X it takes, and a warp's bytes for M rows (the ring, then two X
/// slots of M x 256 bf16): the kernel's LEAN_RING, LEAN_SLOT, LEAN_MAX_M and lean_warp_bytes.
pub const LEAN_RING: u32 = 4;
pub const LEAN_SLOT: u32 = 16 * 128 + 16 * 16;
pub const LEAN_MAX_M: usize = 4;
/// The lean ring with each warp's first X load ahead of its weight copies
/// (`KILN_FP4_GEMV=leanx`; compiled only when asked for, the variant budget).
pub fn spec_leanx(arch: &str) -> KernelSpec {
    spec_lean(arch).define("KILN_GEMV_XFIRST", 1)
}

/// The lean ring compiled for M 1 with a lazy start (`KILN_FP4_GEMV=lean1`; compiled only
/// when asked for, the variant budget).
pub fn spec_lean1(arch: &str) -> KernelSpec {
    spec_lean(arch).define("KILN_GEMV_LEAN1", 1)
}

/// `auto`'s rings reading weights in the GEMV layout (`KILN_FP4_GEMV=pack`, [`gemv_layout`];
/// compiled only when asked for, the variant budget): the lean ring at M 1, the swizzled X ring
/// above (`nf` its column tiles), each with a decode of 9 instructions a word against 13 and
/// its copies of a whole tile's step (or 2-step stage) reading whole lines (G52, G60; the
/// layout tiled from G61 on).
pub fn spec_pack(arch: &str, m: usize) -> KernelSpec {
    let ring = if m == 1 {
        spec_lean(arch)
    } else {
        spec_xswz(arch, if m > 8 { 2 } else { 1 })
    };
    ring.define("KILN_GEMV_PACKED", 1)
}

/// `spec` launched as a programmatic dependent (`KILN_FP4_GEMV_PDL=1`, the default): it releases
/// its dependents as it starts and waits for the kernel before it ahead of X (the lean and X
/// rings after their first weight copies).
pub fn with_pdl(spec: KernelSpec) -> KernelSpec {
    spec.define("KILN_GEMV_PDL", 1)
}

/// `spec` with its step's mmas spread over `chains` accumulators (`KILN_FP4_GEMV_ACC`, 1, 2 or
/// 4; 1 is `spec` itself; the others compiled only when asked for): a warp's mma chain a step 8
/// -> 4 or 2 long, for 4 or 12 registers more at M 1-8.
pub fn with_chains(spec: KernelSpec, chains: u32) -> KernelSpec {
    if chains > 1 {
        spec.define("KILN_GEMV_ACC", chains)
    } else {
        spec
    }
}

/// `KILN_FP4_GEMV_ACC=auto`'s accumulator chains for `path` at M `m`: 4 for the pack path at
/// M 1 (its lean ring on the GEMV layout, 127 registers; G71: -2 to -3 % at 1x8192x8192
/// chained in three looks), 1 elsewhere.
pub fn auto_chains(path: Fp4Gemv, m: usize) -> u32 {
    if path == Fp4Gemv::Pack && m == 1 {
        PACK_M1_CHAINS
    } else {
        1
    }
}

/// The accumulator chains of the pack path's lean ring at M 1 by default (G71).
pub const PACK_M1_CHAINS: u32 = 4;

pub fn lean_warp_bytes(m: usize) -> u32 {
    LEAN_RING * LEAN_SLOT + 2 * m as u32 * 512
}

/// The X ring's specialisation (`KILN_FP4_GEMV=xring`) for M up to 8 (`nf` 1) or 16 (2):
/// one-step slots that carry their step's X beside the weights, at most 80 registers a thread.
pub fn spec_xring(arch: &str, nf: u32) -> KernelSpec {
    spec(arch, nf).define("KILN_GEMV_ASYNC", 4)
}

/// Slots in a warp's X ring, the most warps a CTA, the registers a thread it may use (its
/// launch bounds: two CTAs of 384 threads an SM), and a warp's bytes for M rows (each slot an
/// async-ring step, then M x 128 bf16): the kernel's XR_RING, XR_MAX_WARPS and
/// xring_slot_bytes. It takes every M the GEMV does.
pub const XRING_SLOTS: u32 = 4;
pub const XRING_MAX_WARPS: u32 = 12;
const XRING_REGS: usize = 80;
pub fn xring_warp_bytes(m: usize) -> u32 {
    XRING_SLOTS * (RING_STEP_BYTES + XRING_PITCH * m as u32)
}
const XRING_PITCH: u32 = 256;

/// The X ring with X's chunks placed for conflict-free reads (`KILN_FP4_GEMV=xswz`; compiled
/// only when asked for, the variant budget): rows of X [`XSWZ_PITCH`] bytes apart in a slot.
pub fn spec_xswz(arch: &str, nf: u32) -> KernelSpec {
    spec_xring(arch, nf).define("KILN_GEMV_XSWZ", 1)
}
pub const XSWZ_PITCH: u32 = 272;
pub fn xswz_warp_bytes(m: usize) -> u32 {
    XRING_SLOTS * (RING_STEP_BYTES + XSWZ_PITCH * m as u32)
}

/// The swizzled X ring with two 16-row tiles a CTA (`KILN_FP4_GEMV=xswz2`, M up to 8;
/// compiled only when asked for, the variant budget): each step's X decoded against 32 rows of
/// W, a ring of [`XSWZ2_SLOTS`] slots.
pub fn spec_xswz2(arch: &str) -> KernelSpec {
    spec_xswz(arch, 1).define("KILN_GEMV_TILES", 2)
}
/// Slots in a warp's two-tile X ring, and a warp's bytes for M rows (each slot two async-ring
/// steps, then M rows of X): the kernel's XR_RING (with TILES 2) and xring_slot_bytes.
pub const XSWZ2_SLOTS: u32 = 3;
pub const XSWZ2_MAX_M: usize = 8;
/// The fewest steps of 128 K a warp for which `pack` takes the two-tile ring.
pub const XSWZ2_MIN_STEPS: usize = 16;
pub fn xswz2_warp_bytes(m: usize) -> u32 {
    XSWZ2_SLOTS * (2 * RING_STEP_BYTES + XSWZ_PITCH * m as u32)
}

/// `KILN_FP4_GEMV=pack`'s two-tile form ([`GemvProblem::two_tiles_pay`]): the two-tile X ring
/// on the GEMV layout at M 2-8 ([`spec_pack`] elsewhere).
pub fn spec_pack2(arch: &str, m: usize) -> KernelSpec {
    if (2..=XSWZ2_MAX_M).contains(&m) {
        spec_xswz2(arch).define("KILN_GEMV_PACKED", 1)
    } else {
        spec_pack(arch, m)
    }
}

/// Where the swizzled X ring puts X's 16-byte chunk `c` (0..15) of a row: the kernel's
/// `xr_chunk`.
pub fn xswz_chunk(c: usize) -> usize {
    c ^ ((c >> 2) & 2)
}

/// The xstage ring's specialisation (`KILN_FP4_GEMV=xstage`, M up to [`XSTAGE_MAX_M`]; compiled
/// only when asked for, the variant budget): 2-step stages carrying X by cp.async, each lane
/// putting its own X chunks into the mma's pair order once a stage, at most 80 registers.
pub fn spec_xstage(arch: &str) -> KernelSpec {
    spec(arch, 1).define("KILN_GEMV_ASYNC", 5)
}

/// Slots in a warp's xstage ring, the bytes between rows of X in a slot (256 bf16 and 16 bytes,
/// so that each row starts one 16-byte bank group on), the most rows of X, and a warp's bytes
/// for M rows: the kernel's XS_RING, XS_PITCH and xstage_slot_bytes.
pub const XSTAGE_SLOTS: u32 = 3;
pub const XSTAGE_PITCH: u32 = 528;
pub const XSTAGE_MAX_M: usize = 8;
pub fn xstage_warp_bytes(m: usize) -> u32 {
    XSTAGE_SLOTS * (LEAN_SLOT + XSTAGE_PITCH * m as u32)
}

/// Where the xstage ring puts X's 16-byte chunk `c` (0..31) of a stage's row: the kernel's
/// `xs_chunk`, xswz's swizzle.
pub fn xstage_chunk(c: usize) -> usize {
    xswz_chunk(c)
}

/// The specialisations the defaults launch (`KILN_FP4_GEMV_PDL` on since 2026-11-30, G16): auto's
/// register path (K off the 128s), wide ring (M 9-16; 5-8 until G18), lean ring (M 1) and
/// swizzled X ring (M 2-8), and the pack path on codes in the GEMV layout (lean at M 1, xswz at M 2-8 and 9-16,
/// the two-tile X ring at M 2-8 where a warp's share of K is long), each as a programmatic
/// dependent, pack's lean ring at M 1 with its four accumulator chains (G71). The overrides'
/// paths, and these launched plainly (`KILN_FP4_GEMV_PDL=0`), compile when asked for (the
/// variant budget).
pub fn variants(arch: &str) -> Vec<KernelSpec> {
    [
        spec(arch, 1),
        spec(arch, 2),
        spec_wide(arch, 1),
        spec_wide(arch, 2),
        spec_lean(arch),
        spec_xswz(arch, 1),
        spec_pack(arch, 1),
        spec_pack(arch, 4),
        spec_pack(arch, 16),
        spec_pack2(arch, 4),
    ]
    .into_iter()
    .map(|s| {
        // the pack path at M 1 with its accumulator chains (G71), as `launch_on` builds it
        let m1 = s == spec_pack(arch, 1);
        let s = with_pdl(s);
        if m1 {
            with_chains(s, PACK_M1_CHAINS)
        } else {
            s
        }
    })
    .collect()
}

impl GemvProblem {
    /// Whether the rings can run it: K a multiple of 128 (whole steps, 8-byte scale rows).
    pub fn takes_async(&self) -> bool {
        self.k.is_multiple_of(128)
    }

    /// Whether the pack path takes it: codes in the GEMV layout run its rings only (K a
    /// multiple of 128; any M).
    pub fn takes_gemv_layout(&self) -> bool {
        self.takes_async()
    }

    /// The path `asked` for runs where K allows it, else the register path; the lean ring holds
    /// at most [`LEAN_MAX_M`] rows of X, so a larger M runs the wide ring. `Auto` picks by M
    /// first; `Pack` is for codes in the GEMV layout ([`launch_packed`]): standard codes run
    /// what it runs on them, `Lean` at M 1 and `Xswz` above.
    pub fn path(&self, asked: Fp4Gemv) -> Fp4Gemv {
        let asked = match (asked, self.m) {
            (Fp4Gemv::Auto, 1) => Fp4Gemv::Lean,
            // M 5-8 from 2026-11-30: -18 % at 8x8192x8192 and -8 % at 6x14336x4096 chained, two
            // rounds (docs/fp4.md G18)
            (Fp4Gemv::Auto, 2..=8) => Fp4Gemv::Xswz,
            (Fp4Gemv::Auto, _) => Fp4Gemv::Wide,
            (Fp4Gemv::Pack, 1) => Fp4Gemv::Lean,
            (Fp4Gemv::Pack, _) => Fp4Gemv::Xswz,
            (a, _) => a,
        };
        match asked {
            Fp4Gemv::Async
            | Fp4Gemv::Wide
            | Fp4Gemv::Lean
            | Fp4Gemv::Leanx
            | Fp4Gemv::Lean1
            | Fp4Gemv::Xring
            | Fp4Gemv::Xswz
            | Fp4Gemv::Xswz2
            | Fp4Gemv::Xstage
                if !self.takes_async() =>
            {
                Fp4Gemv::Regs
            }
            Fp4Gemv::Lean | Fp4Gemv::Leanx | Fp4Gemv::Lean1 if self.m > LEAN_MAX_M => Fp4Gemv::Wide,
            Fp4Gemv::Lean1 if self.m > 1 => Fp4Gemv::Lean,
            Fp4Gemv::Xstage if self.m > XSTAGE_MAX_M => Fp4Gemv::Wide,
            Fp4Gemv::Xswz2 if self.m > XSWZ2_MAX_M => Fp4Gemv::Xswz,
            a => a,
        }
    }
}

/// The kernel and dynamic shared memory of `path` for M `m` and `warps` a CTA (`two`: pack's
/// two-tile form, [`GemvProblem::two_tiles_pay`]).
fn kernel_of(arch: &str, path: Fp4Gemv, m: usize, warps: u32, two: bool) -> (KernelSpec, u32) {
    let nf = if m > 8 { 2 } else { 1 };
    match path {
        Fp4Gemv::Pack if two => (spec_pack2(arch, m), warps * xswz2_warp_bytes(m)),
        Fp4Gemv::Regs | Fp4Gemv::Auto => (spec(arch, nf), 0),
        Fp4Gemv::Async => (spec_async(arch, nf), warps * RING_STEPS * RING_STEP_BYTES),
        Fp4Gemv::Wide => (spec_wide(arch, nf), warps * WIDE_RING * WIDE_STAGE_BYTES),
        Fp4Gemv::Lean => (spec_lean(arch), warps * lean_warp_bytes(m)),
        Fp4Gemv::Leanx => (spec_leanx(arch), warps * lean_warp_bytes(m)),
        Fp4Gemv::Lean1 => (spec_lean1(arch), warps * lean_warp_bytes(m)),
        Fp4Gemv::Xring => (spec_xring(arch, nf), warps * xring_warp_bytes(m)),
        Fp4Gemv::Xswz => (spec_xswz(arch, nf), warps * xswz_warp_bytes(m)),
        Fp4Gemv::Xstage => (spec_xstage(arch), warps * xstage_warp_bytes(m)),
        Fp4Gemv::Xswz2 => (spec_xswz2(arch), warps * xswz2_warp_bytes(m)),
        Fp4Gemv::Pack if m == 1 => (spec_pack(arch, m), warps * lean_warp_bytes(m)),
        Fp4Gemv::Pack => (spec_pack(arch, m), warps * xswz_warp_bytes(m)),
    }
}

/// The device buffers of a GEMV: X [batch, m, ldx] bf16, W (per batch [n, k] NVFP4), Y
/// [batch, m, ldy].
pub struct GemvOperands<'a> {
    pub x: &'a DeviceBuffer,
    pub ldx: usize,
    pub w: Fp4View<'a>,
    pub y: &'a DeviceBuffer,
    pub ldy: usize,
}

/// Checks that the operands hold the problem and are aligned for the kernel's 16-byte loads.
pub fn check_operands(p: &GemvProblem, ops: &GemvOperands) -> Result<()> {
    p.validate()?;
    let w = &ops.w;
    if w.format != Fp4Format::Nvfp4 {
        return Err(Error::invalid(format!(
            "the GEMV takes NVFP4 weights, not {}",
            w.format
        )));
    }
    if w.rows != p.n * p.batch || w.k != p.k {
        return Err(Error::invalid(format!(
            "the weights are [{}, {}] but the GEMV needs [{}, {}] (N x batch, K)",
            w.rows,
            w.k,
            p.n * p.batch,
            p.k
        )));
    }
    check_packed(w.format, w.rows, w.k, w.codes.bytes(), w.scales.bytes())?;
    check_tensor_scale(w.tensor_scale)?;
    if ops.ldx < p.k || !ops.ldx.is_multiple_of(8) {
        return Err(Error::invalid(format!(
            "X's leading dimension {} must be at least K = {} and a multiple of 8 (16-byte rows)",
            ops.ldx, p.k
        )));
    }
    if ops.ldy < p.n {
        return Err(Error::invalid(format!(
            "Y's leading dimension {} is shorter than N = {}",
            ops.ldy, p.n
        )));
    }
    let x_need = ((p.batch * p.m - 1) * ops.ldx + p.k) * 2;
    let y_need = ((p.batch * p.m - 1) * ops.ldy + p.n) * p.output.size();
    if ops.x.bytes() < x_need || ops.y.bytes() < y_need {
        return Err(Error::invalid(format!(
            "X holds {} bytes (needs {x_need}) and Y {} (needs {y_need}) for {}",
            ops.x.bytes(),
            ops.y.bytes(),
            p.label()
        )));
    }
    for (name, ptr) in [
        ("X", ops.x.ptr()),
        ("the codes", w.codes.ptr()),
        ("the scales", w.scales.ptr()),
    ] {
        if !ptr.is_multiple_of(16) {
            return Err(Error::invalid(format!(
                "{name} must start on a 16-byte boundary (the kernel's vector loads)"
            )));
        }
    }
    Ok(())
}

/// Enqueues the GEMV on the context's stream (no synchronisation, no allocation).
pub fn launch(ctx: &Context, p: &GemvProblem, ops: &GemvOperands) -> Result<()> {
    check_operands(p, ops)?;
    // the ring asked for where K (and, lean, M) allows it; else the register path
    launch_on(ctx, p, ops, p.path(ctx.overrides.moe.fp4_gemv))
}

/// Whether the caller should hold the weights of `p` in the GEMV layout: `KILN_FP4_GEMV=pack`
/// and a shape the pack path takes (`fp4 verify` and `fp4 bench --gemv` ask this).
pub fn gemv_layout_asked(ctx: &Context, p: &GemvProblem) -> bool {
    ctx.overrides.moe.fp4_gemv == Fp4Gemv::Pack && p.takes_gemv_layout()
}

/// [`launch`] for weights in the GEMV layout ([`gemv_layout`]; `nvfp4_gemv_pack::to_gemv_layout`
/// on the GPU): the pack path, the only one that reads it.
pub fn launch_packed(ctx: &Context, p: &GemvProblem, ops: &GemvOperands) -> Result<()> {
    check_operands(p, ops)?;
    if !p.takes_gemv_layout() {
        return Err(Error::invalid(format!(
            "codes in the GEMV layout need K a multiple of 128, not {}: keep the standard \
             layout for this shape",
            p.label()
        )));
    }
    launch_on(ctx, p, ops, Fp4Gemv::Pack)
}

fn launch_on(ctx: &Context, p: &GemvProblem, ops: &GemvOperands, path: Fp4Gemv) -> Result<()> {
    let sms = ctx.info.sm_count.max(1);
    // pack: the two-tile X ring where a warp's share of K is long (G19, G20)
    let two = path == Fp4Gemv::Pack && p.two_tiles_pay(sms);
    let warps = match path {
        Fp4Gemv::Lean | Fp4Gemv::Leanx | Fp4Gemv::Lean1 => p.lean_warps(sms),
        Fp4Gemv::Xswz2 => p.xswz2_warps(sms),
        Fp4Gemv::Pack if two => p.xswz2_warps(sms),
        Fp4Gemv::Pack if p.m == 1 => p.lean_warps(sms),
        Fp4Gemv::Pack => p.xswz_warps(sms),
        Fp4Gemv::Xring => p.xring_warps(sms),
        Fp4Gemv::Xswz => p.xswz_warps(sms),
        Fp4Gemv::Xstage => p.xstage_warps(sms),
        _ => p.warps(sms),
    };
    let (spec, smem) = kernel_of(&ctx.arch(), path, p.m, warps, two);
    let pdl = ctx.overrides.moe.fp4_gemv_pdl;
    let spec = if pdl { with_pdl(spec) } else { spec };
    let chains = match ctx.overrides.moe.fp4_gemv_acc {
        0 => auto_chains(path, p.m),
        c => c,
    };
    let spec = with_chains(spec, chains);
    let f = ctx.function(&spec)?;
    let mut args = GemvArgs {
        x: ops.x.ptr(),
        w: ops.w.codes.ptr(),
        s: ops.w.scales.ptr(),
        y: ops.y.ptr(),
        ldx: ops.ldx as i64,
        ldy: ops.ldy as i64,
        x_batch: (p.m * ops.ldx) as i64,
        w_batch: (p.n * p.k / 2) as i64,
        s_batch: (p.n * p.k / 16) as i64,
        y_batch: (p.m * ops.ldy) as i64,
        g: ops.w.tensor_scale,
        m: p.m as i32,
        n: p.n as i32,
        k: p.k as i32,
        out_f16: (p.output == DType::F16) as i32,
    };
    // the two-tile X ring's CTAs hold 32 rows of W
    let rows = if path == Fp4Gemv::Xswz2 || two {
        32
    } else {
        16
    };
    let grid = (p.n.div_ceil(rows) as u32, 1, p.batch as u32);
    // SAFETY: the kernel takes one `GemvArgs` by value, laid out as this #[repr(C)] struct;
    // check_operands proved every buffer holds what the kernel reads and writes, with the
    // alignment of its 16-byte loads; the caller keeps them alive until the stream is done.
    // Under `pdl` the kernel executes `griddepcontrol.wait` before it reads X or writes Y (only
    // weight copies go ahead of it), so it may be launched as a dependent.
    let launch = if pdl {
        Function::launch_dependent
    } else {
        Function::launch
    };
    unsafe {
        launch(
            &f,
            ctx.stream,
            &LaunchConfig {
                smem_bytes: smem,
                ..LaunchConfig::simple(grid, warps * 32)
            },
            &mut [&mut args as *mut GemvArgs as *mut c_void],
        )
    }
}

#[cfg(test)]
#[path = "nvfp4_gemv_xstage_tests.rs"]
mod xstage_tests;

#[cfg(test)]
#[path = "nvfp4_gemv_xswz2_tests.rs"]
mod xswz2_tests;

#[cfg(test)]
mod tests {
    use super::*;

    /// A ring slot on the CPU whose every byte must be written exactly once.
    pub(super) struct Slot {
        bytes: Vec<u8>,
        written: Vec<bool>,
    }

    impl Slot {
        pub(super) fn new(n: usize) -> Slot {
            Slot {
                bytes: vec![0; n],
                written: vec![false; n],
            }
        }

        pub(super) fn put(&mut self, at: usize, v: u8) {
            assert!(!self.written[at], "byte {at} written twice");
            self.written[at] = true;
            self.bytes[at] = v;
        }

        /// The bytes, once every one of them has been written.
        pub(super) fn whole(self, what: &str) -> Vec<u8> {
            assert!(
                self.written.iter().all(|&w| w),
                "every byte of {what} is written"
            );
            self.bytes
        }
    }

    /// A lean stage's scale copy of one lane (`issue_lean`, `copy_lean_bounded`, and the xstage
    /// ring's fast path, which copy the same bytes): row lane / 2, step lane % 2, 8 bytes at
    /// `codes_bytes + 8 lane`, zero past N or K. `scale(row, byte)` is row's scale byte.
    pub(super) fn put_lean_scales(
        put: &mut impl FnMut(usize, u8),
        (n, steps, row0, stage, lane): (usize, usize, usize, usize, usize),
        codes_bytes: usize,
        scale: impl Fn(usize, usize) -> u8,
    ) {
        let (row, step) = (row0 + lane / 2, stage * 2 + lane % 2);
        for b in 0..8 {
            let v = if row < n && step < steps {
                scale(row, step * 8 + b)
            } else {
                0
            };
            put(codes_bytes + 8 * lane + b, v);
        }
    }

    /// 8 elements of X stored at `at` in the mma's pair order (0, 4), (1, 5), (2, 6), (3, 7)
    /// (`store_lean_x`, the xstage ring's permute): `x(e)` is element e of the 8.
    pub(super) fn put_x_pairs(
        put: &mut impl FnMut(usize, u8),
        at: usize,
        x: impl Fn(usize) -> u16,
    ) {
        for (pos, e) in [0, 4, 1, 5, 2, 6, 3, 7].into_iter().enumerate() {
            let v = x(e);
            put(at + 2 * pos, v as u8);
            put(at + 2 * pos + 1, (v >> 8) as u8);
        }
    }

    #[test]
    fn the_argument_block_matches_the_kernels_layout() {
        // 4 pointers, 6 strides, then g, m, n, k, out_f16 and padding: 104 bytes, 8-aligned.
        assert_eq!(std::mem::size_of::<GemvArgs>(), 104);
        assert_eq!(std::mem::align_of::<GemvArgs>(), 8);
    }

    #[test]
    fn shapes_outside_the_kernel_are_refused() {
        let ok = GemvProblem::new(1, 8192, 8192, DType::Bf16);
        assert!(ok.validate().is_ok());
        let e = GemvProblem { m: 17, ..ok }.validate().unwrap_err();
        assert!(e.to_string().contains("1..=16"), "{e}");
        let e = GemvProblem { k: 8208, ..ok }.validate().unwrap_err();
        assert!(e.to_string().contains("pad K with zeros to 8224"), "{e}");
        let e = GemvProblem {
            output: DType::F32,
            ..ok
        }
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("bf16 or f16"), "{e}");
        assert_eq!(e.exit_code(), 2);
        // 4.5 bits a weight
        assert_eq!(ok.min_bytes() as usize, 8192 * 8192 * 9 / 16 + 8192 * 4);
        // 512 CTAs on 132 SMs: four warps each is already ~16 an SM
        assert_eq!(ok.warps(132), 4);
        assert_eq!(GemvProblem::new(1, 8192, 8192, DType::Bf16).warps(100), 4);
        assert_eq!(GemvProblem::new(1, 2048, 8192, DType::Bf16).warps(132), 16);
        assert_eq!(GemvProblem::new(1, 16, 16384, DType::Bf16).warps(132), 16);
        let batched = GemvProblem {
            batch: 8,
            ..GemvProblem::new(1, 4096, 7168, DType::F16)
        };
        assert_eq!(batched.warps(132), 4);
    }

    /// The kernel's `nibble_pair<I>`: nibbles I and I + 4 of `w` as bf16 bits, each the e2m1
    /// value times 2^-126.
    fn nibble_pair(w: u32, i: i32) -> u32 {
        let (mag, sign) = (6 - 4 * i, 12 - 4 * i);
        let m = if mag >= 0 { w << mag } else { w >> -mag };
        (m & 0x01C0_01C0) | ((w << sign) & 0x8000_8000)
    }

    fn bf16_half(bits: u32, hi: bool) -> f64 {
        let h = if hi { bits >> 16 } else { bits & 0xFFFF } as u16;
        half::bf16::from_bits(h).to_f64()
    }

    /// One warp step on the CPU, as the kernel lays it out: lanes (g, q) hold 16 bytes of rows g
    /// and g + 8 at element 32 q; per word v two mmas, A pairs (nibble_pair 2j, 2j + 1), B pairs
    /// X elements (8v + 2j, 8v + 2j + 4) and (8v + 2j + 1, 8v + 2j + 5), and the m16n8k16
    /// fragment map of common/mma_sync.cuh. The sums must be the plain dot products.
    #[test]
    fn the_async_rings_folded_scale_gives_every_product_times_2_to_the_minus_8() {
        // The async path multiplies each decoded pair (value x 2^-126) once by the bf16 of
        // scale x 2^118, where the register path multiplies by 2^126 and then by the scale:
        // for every e2m1 code and every finite e4m3 scale both must be exact, the folded one
        // 2^-8 of the other (the epilogue's g x 2^8 undoes it).
        use crate::formats::fp8::Fp8Format;
        let round = |x: f64| half::bf16::from_f64(x).to_f64();
        for code in 0u32..16 {
            let w = code | code << 16; // nibble 0 in both halves: pair 0 decodes it twice
            let v = bf16_half(nibble_pair(w, 0), false);
            assert_eq!(v, bf16_half(nibble_pair(w, 0), true));
            let exact = crate::formats::fp4::decode(code as u8) as f64;
            assert_eq!(v * 2f64.powi(126), exact, "code {code:#x}");
            for sc in 0u8..0x7F {
                let s = Fp8Format::E4m3.decode(sc) as f64;
                let folded_scale = round(s * 2f64.powi(118));
                assert_eq!(folded_scale, s * 2f64.powi(118), "scale {sc:#x}");
                let folded = round(v * folded_scale);
                let plain = round(round(v * 2f64.powi(126)) * round(s));
                assert_eq!(plain, exact * s, "code {code:#x} scale {sc:#x}");
                assert_eq!(folded * 256.0, plain, "code {code:#x} scale {sc:#x}");
            }
        }
    }

    /// The wide path's `nibble_pair_mul<I>`: the nibbles masked in place, one multiply by
    /// 2^(6-4J) + 2^(12-4J), then the mask of magnitude and sign bits.
    fn nibble_pair_mul(w: u32, i: i32) -> u32 {
        let j = i & 1;
        let mul = (1u32 << (6 - 4 * j)) | (1u32 << (12 - 4 * j));
        let src = if i < 2 { w } else { w >> 8 };
        let m = src & (0x000F_000Fu32 << (4 * j));
        m.wrapping_mul(mul) & 0x81C0_81C0
    }

    #[test]
    fn the_wide_paths_one_multiply_decode_gives_the_same_pairs() {
        // nibble_pair<I> reads only nibbles I and I + 4: every value of both, the other six
        // nibbles random (they must not leak in through a carry)
        let mut seed = 0x9E37_79B9u64;
        for i in 0..4 {
            for lo in 0u32..16 {
                for hi in 0u32..16 {
                    for _ in 0..8 {
                        seed = seed
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let rest = (seed >> 32) as u32;
                        let keep = !((0xFu32 << (4 * i)) | (0xFu32 << (16 + 4 * i)));
                        let w = (rest & keep) | lo << (4 * i) | hi << (16 + 4 * i);
                        assert_eq!(
                            nibble_pair_mul(w, i),
                            nibble_pair(w, i),
                            "pair {i}, word {w:#010x}"
                        );
                    }
                }
            }
        }
    }

    /// The wide ring on the CPU: `issue_stage`'s copies of a stage (codes of row r, chunk c at
    /// 256 r + 16 (c ^ 4 (r & 1)), scales at 4096 + 32 r + 8 u) and `read_wide`'s reads of step u
    /// must hand every lane the bytes the register path loads (rows g, g + 8 at k = 128 step +
    /// 32 q; its two scale codes), and each 8-lane phase of a 16-byte read must touch 8 distinct
    /// 16-byte bank groups.
    #[test]
    fn the_wide_rings_copies_and_reads_give_each_lane_its_bytes_without_bank_conflicts() {
        let (n, k) = (16usize, 1024usize); // 8 steps: two stages
        let (row_codes, row_scales) = (k / 2, k / 16);
        let code = |r: usize, b: usize| (r * 131 + b * 7 + 3) as u8;
        let scale = |r: usize, b: usize| (r * 29 + b * 11 + 1) as u8;
        let stage_bytes = WIDE_STAGE_BYTES as usize;
        let codes_bytes = 16 * 256;
        for stage in 0..k / 512 {
            let mut slot = Slot::new(stage_bytes);
            for lane in 0..32 {
                let c = lane % 16;
                let step_c = stage * 4 + c / 4;
                for i in 0..8 {
                    let r = 2 * i + lane / 16;
                    let dst = r * 256 + 16 * (c ^ ((r & 1) << 2));
                    for b in 0..16 {
                        let src = step_c * 64 + 16 * (c % 4) + b;
                        slot.put(dst + b, code(r, src));
                    }
                }
                for i in 0..2 {
                    let id = 32 * i + lane;
                    let (r, u) = (id / 4, id % 4);
                    let dst = codes_bytes + 32 * r + 8 * u;
                    for b in 0..8 {
                        slot.put(dst + b, scale(r, (stage * 4 + u) * 8 + b));
                    }
                }
            }
            let smem = slot.whole("the stage");
            for u in 0..4 {
                let step = stage * 4 + u;
                for h in 0..2 {
                    let mut groups = vec![Vec::new(); 4];
                    for lane in 0..32 {
                        let (g, q) = (lane / 4, lane % 4);
                        let r = g + 8 * h;
                        let c = (4 * u + q) ^ ((r & 1) << 2);
                        let at = r * 256 + 16 * c;
                        let k0 = step * 128 + 32 * q;
                        for b in 0..16 {
                            assert_eq!(
                                smem[at + b],
                                code(r, k0 / 2 + b),
                                "lane {lane} step {step}"
                            );
                        }
                        let sat = codes_bytes + 32 * r + 8 * u + 2 * q;
                        for b in 0..2 {
                            assert_eq!(smem[sat + b], scale(r, k0 / 16 + b));
                        }
                        groups[lane / 8].push((at / 16) % 8);
                    }
                    for (phase, mut gs) in groups.into_iter().enumerate() {
                        gs.sort_unstable();
                        gs.dedup();
                        assert_eq!(gs.len(), 8, "step {u}, half {h}, phase {phase}");
                    }
                }
            }
        }
        assert_eq!(row_codes * n, 16 * 512);
        assert_eq!(row_scales * 16, k);
    }

    /// The lean ring on the CPU: `issue_lean`'s copies of a stage, the fast path (addresses
    /// stepped from each lane's first) and the bounded one (rows past N, a last stage of one
    /// step), and `read_lean`'s reads of step u must hand every lane the bytes the register path
    /// loads (codes of rows g, g + 8 at k = 128 step + 32 q, their two scale codes) and X's 32
    /// elements of its column; every byte of the stage written once; each 8-lane phase of a code
    /// read on 8 distinct 16-byte bank groups.
    #[test]
    fn the_lean_rings_copies_and_reads_give_each_lane_its_bytes_and_x() {
        for (n, k, m, row0) in [
            (16usize, 1024usize, 1usize, 0usize),
            (40, 640, 4, 32),
            (16, 384, 3, 0),
        ] {
            let steps = k / 128;
            let stages = steps.div_ceil(2);
            let code = |r: usize, b: usize| (r * 131 + b * 7 + 3) as u8;
            let scale = |r: usize, b: usize| (r * 29 + b * 11 + 1) as u8;
            let xval = |row: usize, e: usize| (row * 1000 + e + 1) as u16;
            // a stage's weight slot, then (here, after it) its X slot
            let sb = (LEAN_SLOT + 512 * m as u32) as usize;
            let (codes_bytes, x_at) = (16 * 128, 16 * 128 + 16 * 16);
            for stage in 0..stages {
                let fast = row0 + 16 <= n && (stage + 1) * 2 <= steps;
                let mut slot = Slot::new(sb);
                let mut put = |at: usize, v: u8| slot.put(at, v);
                for lane in 0..32 {
                    let (c, hi) = (lane % 8, (lane / 8) & 1);
                    let wdst = (lane / 8) * 128 + 16 * (c ^ (hi << 2));
                    for i in 0..4 {
                        let r = lane / 8 + 4 * i;
                        let (row, step) = (row0 + r, stage * 2 + c / 4);
                        // fast: the lane's first source, stepped by 4 rows and by the stage
                        let in_range = fast || (row < n && step < steps);
                        for b in 0..16 {
                            let off = if fast {
                                let first = (row0 + lane / 8) * (k / 2) + 16 * (lane % 8);
                                first + stage * 128 + i * 4 * (k / 2) + b
                            } else {
                                row * (k / 2) + step * 64 + 16 * (c % 4) + b
                            };
                            let v = if in_range {
                                code(off / (k / 2), off % (k / 2))
                            } else {
                                0
                            };
                            put(wdst + 512 * i + b, v);
                        }
                    }
                    let at = (n, steps, row0, stage, lane);
                    put_lean_scales(&mut put, at, codes_bytes, scale);
                    // store_lean_x: the lane's 8 elements in the pair order
                    let whole = (stage + 1) * 2 <= steps || lane < 16;
                    for xr in 0..m {
                        put_x_pairs(&mut put, x_at + 512 * xr + 16 * lane, |e| {
                            if whole {
                                xval(xr, stage * 256 + 8 * lane + e)
                            } else {
                                0
                            }
                        });
                    }
                }
                let smem = slot.whole("the stage");
                for u in 0..(steps - stage * 2).min(2) {
                    let step = stage * 2 + u;
                    for h in 0..2 {
                        let mut groups = vec![Vec::new(); 4];
                        for lane in 0..32 {
                            let (g, q) = (lane / 4, lane % 4);
                            let r = g + 8 * h;
                            let c = (4 * u + q) ^ ((r & 1) << 2);
                            let at = r * 128 + 16 * c;
                            let k0 = step * 128 + 32 * q;
                            let row = row0 + r;
                            for b in 0..16 {
                                let want = if row < n { code(row, k0 / 2 + b) } else { 0 };
                                assert_eq!(smem[at + b], want, "lane {lane} step {step}");
                            }
                            let sat = codes_bytes + 16 * r + 8 * u + 2 * q;
                            for b in 0..2 {
                                let want = if row < n { scale(row, k0 / 16 + b) } else { 0 };
                                assert_eq!(smem[sat + b], want);
                            }
                            if g < m {
                                // compute_step's B words 2j, 2j + 1 of read v: X elements
                                // (8v + 2j, 8v + 2j + 4) and (8v + 2j + 1, 8v + 2j + 5)
                                let xa = x_at + 512 * g + 256 * u + 64 * q;
                                let half = |at: usize| u16::from_le_bytes([smem[at], smem[at + 1]]);
                                for v in 0..4 {
                                    for w in 0..4 {
                                        let at = xa + 16 * v + 4 * w;
                                        let e0 = k0 + 8 * v + w;
                                        let got = (half(at), half(at + 2));
                                        let want = (xval(g, e0), xval(g, e0 + 4));
                                        assert_eq!(got, want, "X of lane {lane} step {step}");
                                    }
                                }
                            }
                            groups[lane / 8].push((at / 16) % 8);
                        }
                        for (phase, mut gs) in groups.into_iter().enumerate() {
                            gs.sort_unstable();
                            gs.dedup();
                            assert_eq!(gs.len(), 8, "step {u}, half {h}, phase {phase}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn the_lean_ring_fits_four_ctas_an_sm_and_takes_m_up_to_4() {
        let per_cta = |warps: u32, m: usize| warps * lean_warp_bytes(m);
        assert!(4 * (per_cta(4, LEAN_MAX_M) + 1024) <= 228 * 1024);
        assert!(per_cta(16, LEAN_MAX_M) <= 227 * 1024);
        let p = GemvProblem::new(4, 14336, 4096, DType::Bf16);
        assert_eq!(p.path(Fp4Gemv::Lean), Fp4Gemv::Lean);
        assert_eq!(GemvProblem { m: 5, ..p }.path(Fp4Gemv::Lean), Fp4Gemv::Wide);
        assert_eq!(
            GemvProblem { k: 4128, ..p }.path(Fp4Gemv::Lean),
            Fp4Gemv::Regs
        );
        // 896 CTAs: four 4-warp CTAs an SM at M 4 leave 1.7 waves on 132 SMs, eight 2-warp
        // CTAs hold them all
        assert_eq!((p.warps(132), p.lean_warps(132)), (4, 2));
        // 512 CTAs fit at 4 warps (six an SM at M 1); a small N keeps its 16 warps
        let m1 = GemvProblem::new(1, 8192, 8192, DType::Bf16);
        assert_eq!(m1.lean_warps(132), 4);
        assert_eq!(
            GemvProblem::new(1, 2048, 8192, DType::Bf16).lean_warps(132),
            16
        );
    }

    /// The X ring on the CPU: `issue_xring`'s copies of a step (the fast path from each lane's
    /// fixed sources, the bounded one for a CTA past N; X's chunks lane + 32 t) and the reads of
    /// `xring_kloop` (read_step, then X's rows min(g + 8 f, M - 1)) must hand every lane the codes of
    /// rows g, g + 8 at k = 128 step + 32 q, their two scale codes each and X's 32 elements of
    /// the same k; every byte of the slot written once. Both X layouts: `xring`'s (rows 256
    /// bytes apart, chunks in order) and `xswz`'s (272, chunk c at `xswz_chunk(c)`).
    #[test]
    fn the_x_rings_copies_and_reads_give_each_lane_its_bytes_and_x() {
        for swz in [false, true] {
            x_ring_copies_and_reads(swz);
        }
    }

    fn x_ring_copies_and_reads(swz: bool) {
        let (pitch, chunk) = if swz {
            (XSWZ_PITCH as usize, xswz_chunk as fn(usize) -> usize)
        } else {
            (256, (|c| c) as fn(usize) -> usize)
        };
        for (n, k, m, ldx, row0) in [
            (16usize, 512usize, 1usize, 512usize, 0usize),
            (40, 384, 8, 392, 32),
            (48, 256, 3, 256, 16),
            (20, 256, 2, 264, 16),
            (32, 256, 16, 264, 16),
            (40, 128, 11, 128, 32),
        ] {
            let code = |r: usize, b: usize| (r * 131 + b * 7 + 3) as u8;
            let scale = |r: usize, b: usize| (r * 29 + b * 11 + 1) as u8;
            // X as bytes: element e of row r at 2 (r ldx + e)
            let xbyte = |off: usize| (off * 37 % 251) as u8;
            let sb = RING_STEP_BYTES as usize + pitch * m;
            let (codes, x_at) = (16 * 64, RING_STEP_BYTES as usize);
            let fast = row0 + 16 <= n;
            for step in 0..k / 128 {
                let mut slot = Slot::new(sb);
                let mut put = |at: usize, v: u8| slot.put(at, v);
                // xswz: the 16 bytes after each row of X are padding, never copied nor read
                for r in 0..m {
                    for b in 256..pitch {
                        put(x_at + pitch * r + b, 0);
                    }
                }
                for lane in 0..32 {
                    let (g, q) = (lane / 4, lane % 4);
                    for h in 0..2 {
                        let row = row0 + g + 8 * h;
                        // fast: w0 / w1 (rows clamped, unclamped when fast) stepped by 64
                        let first = row.min(n - 1) * (k / 2) + 16 * q;
                        for b in 0..16 {
                            let off = if fast {
                                first + step * 64 + b
                            } else {
                                row * (k / 2) + step * 64 + 16 * q + b
                            };
                            let v = if row < n {
                                code(off / (k / 2), off % (k / 2))
                            } else {
                                0
                            };
                            put((g + 8 * h) * 64 + 16 * q + b, v);
                        }
                    }
                    if lane < 16 {
                        let row = row0 + lane;
                        for b in 0..8 {
                            let v = if row < n { scale(row, step * 8 + b) } else { 0 };
                            put(codes + 8 * lane + b, v);
                        }
                    }
                    // X: nx chunks from l.x (row lane / 16, chunk lane % 16) plus t xrow2,
                    // landing at xdst plus t two rows
                    let nx = (m + 1 - lane / 16) / 2;
                    let x0 = 2 * ((lane / 16) * ldx + 8 * (lane % 16));
                    let xdst = x_at + pitch * (lane / 16) + 16 * chunk(lane % 16);
                    for t in 0..nx {
                        for b in 0..16 {
                            let off = x0 + step * 256 + t * 4 * ldx + b;
                            put(xdst + 2 * pitch * t + b, xbyte(off));
                        }
                    }
                }
                let smem = slot.whole("the slot");
                for lane in 0..32 {
                    let (g, q) = (lane / 4, lane % 4);
                    let k0 = step * 128 + 32 * q;
                    for h in 0..2 {
                        let (r, row) = (g + 8 * h, row0 + g + 8 * h);
                        for b in 0..16 {
                            let want = if row < n { code(row, k0 / 2 + b) } else { 0 };
                            assert_eq!(smem[r * 64 + 16 * q + b], want, "lane {lane} step {step}");
                        }
                        for b in 0..2 {
                            let want = if row < n { scale(row, k0 / 16 + b) } else { 0 };
                            assert_eq!(smem[codes + 8 * r + 2 * q + b], want);
                        }
                    }
                    // xoff[f] (v 0, 1) and xoff2[f] (v 2, 3): X's row min(g + 8 f, M - 1),
                    // the lane's 32 elements at k0
                    for f in 0..m.div_ceil(8) {
                        let xr = (g + 8 * f).min(m - 1);
                        let xoff = x_at + pitch * xr + 16 * chunk(4 * q);
                        let xoff2 = x_at + pitch * xr + 16 * chunk(4 * q + 2);
                        for v in 0..4 {
                            let at = if v < 2 { xoff } else { xoff2 } + 16 * (v % 2);
                            for b in 0..16 {
                                let want = xbyte(2 * (xr * ldx + k0 + 8 * v) + b);
                                assert_eq!(smem[at + b], want, "X of lane {lane} (swz {swz})");
                            }
                        }
                    }
                }
            }
        }
    }

    /// The swizzled X ring's reads: each 8-lane phase of a 16-byte X load (lanes 8p .. 8p + 7:
    /// q 0..3 of rows g = 2p, 2p + 1, clamped below M) touches each of the 32 banks at most once
    /// per distinct address, at every M; `xring`'s layout has two-way conflicts at M 1 and 2.
    #[test]
    fn the_swizzled_x_reads_are_free_of_bank_conflicts() {
        let wavefronts = |pitch: usize, chunk: fn(usize) -> usize, m: usize| -> usize {
            let mut most = 0;
            for v in 0..4 {
                for p in 0..4 {
                    let mut addrs: Vec<usize> = (8 * p..8 * p + 8)
                        .map(|lane| {
                            let (g, q) = (lane / 4, lane % 4);
                            let xr = g.min(m - 1);
                            pitch * xr + 16 * chunk(4 * q + v)
                        })
                        .collect();
                    addrs.sort();
                    addrs.dedup();
                    // a distinct 16-byte address takes 4 banks; count the deepest bank
                    let mut banks = [0usize; 32];
                    for a in &addrs {
                        for w in 0..4 {
                            banks[(a / 4 + w) % 32] += 1;
                        }
                    }
                    most = most.max(*banks.iter().max().unwrap());
                }
            }
            most
        };
        for m in 1..=8 {
            assert_eq!(wavefronts(XSWZ_PITCH as usize, xswz_chunk, m), 1, "M {m}");
        }
        assert_eq!(wavefronts(256, |c| c, 1), 2);
        assert_eq!(wavefronts(256, |c| c, 2), 4);
    }

    /// The swizzled X ring compiles without spills within the X ring's 80 registers (only when
    /// asked for: the variant budget).
    #[test]
    fn the_swizzled_x_ring_compiles_without_spills() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let specs = [spec_xswz("sm_90a", 1), spec_xswz("sm_90a", 2)];
        crate::jit::testing::assert_compile_clean(&specs);
        for s in &specs {
            let r = crate::jit::Jit::default()
                .compile(s)
                .unwrap()
                .resources
                .registers;
            assert!(r <= 80, "{}: {r} registers", s.label());
        }
    }

    /// The lean ring with X first compiles as cleanly (only when asked for: the variant budget),
    /// and M over 4 or K off the 128s leaves it as it leaves the lean ring.
    #[test]
    fn the_lean_ring_with_x_first_compiles_and_takes_what_lean_takes() {
        if crate::jit::testing::nvrtc_here() {
            crate::jit::testing::assert_compile_clean(&[spec_leanx("sm_90a")]);
        }
        for (m, k, want) in [
            (1, 256, Fp4Gemv::Leanx),
            (4, 256, Fp4Gemv::Leanx),
            (5, 256, Fp4Gemv::Wide),
            (1, 160, Fp4Gemv::Regs),
        ] {
            let p = GemvProblem::new(m, 64, k, DType::Bf16);
            assert_eq!(p.path(Fp4Gemv::Leanx), want, "M {m} K {k}");
        }
    }

    /// lean1 compiles as cleanly as lean (only when asked for: the variant budget) and runs
    /// at M 1 only: M 2-4 runs lean, over 4 wide, K off the 128s the register path.
    #[test]
    fn lean1_compiles_and_runs_at_m_1_only() {
        if crate::jit::testing::nvrtc_here() {
            crate::jit::testing::assert_compile_clean(&[spec_lean1("sm_90a")]);
        }
        for (m, k, want) in [
            (1, 256, Fp4Gemv::Lean1),
            (2, 256, Fp4Gemv::Lean),
            (4, 256, Fp4Gemv::Lean),
            (5, 256, Fp4Gemv::Wide),
            (1, 160, Fp4Gemv::Regs),
        ] {
            let p = GemvProblem::new(m, 64, k, DType::Bf16);
            assert_eq!(p.path(Fp4Gemv::Lean1), want, "M {m} K {k}");
        }
    }

    /// The pack path compiles as cleanly as its rings, lean within 112 registers and xswz
    /// within 80 (only when asked for: the variant budget); it reads codes in the GEMV layout,
    /// which need K a multiple of 128, and standard codes under `pack` run lean at M 1 and xswz
    /// above.
    #[test]
    fn the_pack_path_compiles_and_reads_the_gemv_layout_only() {
        if crate::jit::testing::nvrtc_here() {
            let specs = [
                spec_pack("sm_90a", 1),
                spec_pack("sm_90a", 4),
                spec_pack("sm_90a", 12),
                with_pdl(spec_pack("sm_90a", 12)),
                with_pdl(spec_pack2("sm_90a", 4)),
            ];
            crate::jit::testing::assert_compile_clean(&specs);
            let jit = crate::jit::Jit::default();
            let most = [112, 80, 80, 80, 80];
            for (s, most) in specs.iter().zip(most) {
                let r = jit.compile(s).unwrap().resources.registers;
                assert!(r <= most, "{}: {r} registers", s.label());
            }
        }
        for (m, k, takes, standard) in [
            (1, 256, true, Fp4Gemv::Lean),
            (4, 256, true, Fp4Gemv::Xswz),
            (12, 256, true, Fp4Gemv::Xswz),
            (1, 160, false, Fp4Gemv::Regs),
        ] {
            let p = GemvProblem::new(m, 64, k, DType::Bf16);
            assert_eq!(p.takes_gemv_layout(), takes, "M {m} K {k}");
            assert_eq!(p.path(Fp4Gemv::Pack), standard, "M {m} K {k}");
        }
    }

    /// The programmatic-dependent GEMV (the default) and the plain launches
    /// (`KILN_FP4_GEMV_PDL=0`, compiled only when asked for: the variant budget) compile cleanly
    /// within their rings' registers.
    #[test]
    fn the_pdl_and_plain_paths_compile_within_their_rings_registers() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let plain = [
            spec_pack("sm_90a", 1),
            spec_pack("sm_90a", 4),
            spec_lean("sm_90a"),
            spec_xswz("sm_90a", 1),
            spec_wide("sm_90a", 2),
        ];
        let specs: Vec<KernelSpec> = plain
            .iter()
            .cloned()
            .chain(plain.iter().cloned().map(with_pdl))
            .collect();
        crate::jit::testing::assert_compile_clean(&specs);
        let jit = crate::jit::Jit::default();
        let most = [112, 80, 112, 80, 128];
        for (s, most) in specs.iter().zip(most.iter().chain(&most)) {
            let r = jit.compile(s).unwrap().resources.registers;
            assert!(r <= *most, "{}: {r} registers", s.label());
        }
    }

    /// `KILN_FP4_GEMV_ACC` 2 and 4 (compiled only when asked for) compile cleanly, without
    /// spills, within the rings' registers: the X ring's 80 and the lean ring's 112 at 2 chains;
    /// 4 chains take the lean ring to its bound's 128 (NVRTC 13.0: 125), which leaves its 4-warp
    /// and larger CTAs as resident as at 112 (only 2-warp CTAs, 9 an SM by registers at 112,
    /// fit 8: the lean ring's M 2-4, never the defaults').
    #[test]
    fn the_accumulator_chains_compile_within_the_rings_registers() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let specs: Vec<KernelSpec> = [2, 4]
            .into_iter()
            .flat_map(|c| {
                [
                    with_chains(with_pdl(spec_pack("sm_90a", 1)), c),
                    with_chains(with_pdl(spec_pack("sm_90a", 4)), c),
                    with_chains(with_pdl(spec_lean("sm_90a")), c),
                    with_chains(with_pdl(spec_xswz("sm_90a", 1)), c),
                ]
            })
            .collect();
        crate::jit::testing::assert_compile_clean(&specs);
        let jit = crate::jit::Jit::default();
        let most = [112, 80, 112, 80, 128, 80, 128, 80];
        for (s, most) in specs.iter().zip(most) {
            let r = jit.compile(s).unwrap().resources.registers;
            eprintln!("{}: {r} registers", s.label());
            assert!(r <= most, "{}: {r} registers", s.label());
        }
        assert_eq!(with_chains(spec_lean("sm_90a"), 1), spec_lean("sm_90a"));
    }

    /// lean1's kept read offsets are read_ring<2>'s and read_lean's addresses (row 0 of X):
    /// rd0 / rd1 for steps 0 / 1 (1024 on for row g + 8), the scales at sd + 128 h + 8 u, X at
    /// xd + 256 u + 16 v.
    #[test]
    fn lean1s_kept_offsets_are_the_lean_reads() {
        let codes = 16 * 128;
        for lane in 0..32usize {
            let (g, q) = (lane / 4, lane % 4);
            let rd = [
                g * 128 + 16 * q + 64 * (g & 1),
                g * 128 + 16 * q + 64 * (1 - (g & 1)),
            ];
            let (sd, xd) = (codes + 16 * g + 2 * q, 64 * q);
            for (u, &rd_u) in rd.iter().enumerate() {
                for h in 0..2 {
                    let r = g + 8 * h;
                    let c = (4 * u + q) ^ ((r & 1) << 2);
                    assert_eq!(rd_u + 1024 * h, r * 128 + 16 * c, "lane {lane} u {u}");
                    assert_eq!(sd + 128 * h + 8 * u, codes + 16 * r + 8 * u + 2 * q);
                }
                // read_lean's X address at g = 0, the only lanes that read it at M 1
                assert_eq!(xd + 256 * u, 256 * u + 64 * q);
            }
        }
    }

    #[test]
    fn the_x_ring_puts_about_24_warps_on_an_sm_in_one_wave() {
        let one_wave = |p: &GemvProblem, sms: usize| {
            let w = p.xring_warps(sms as u32) as usize;
            let per_cta = w * xring_warp_bytes(p.m) as usize + 1024;
            let resident = (228 * 1024 / per_cta).min(65536 / (w * 32 * 80));
            (w, resident * sms >= p.n.div_ceil(16) * p.batch)
        };
        // (M, N, K, warps a CTA, whether the grid is one wave)
        for (m, n, k, warps, one) in [
            // 512 CTAs: four an SM of 6 warps (24 an SM; lean and wide run 16)
            (1, 8192, 8192, 6, true),
            // 896 CTAs: seven an SM of 3 warps
            (4, 14336, 4096, 3, true),
            // M 16: 21 KB a warp, two warps a CTA keep 512 CTAs in one wave (8 warps an SM)
            (16, 8192, 8192, 2, true),
            // a small grid takes the most warps a CTA, never more than its steps
            (1, 4096, 4096, 12, true),
            (8, 1000, 256, 2, true),
            // a grid of many waves takes 4
            (1, 262_144, 4096, 4, false),
        ] {
            let p = GemvProblem::new(m, n, k, DType::Bf16);
            assert_eq!(one_wave(&p, 132), (warps, one), "{}", p.label());
        }
        // M 8's slots: 4 x (1,152 + 2,048) bytes a warp; twelve warps fit an SM's 227 KB
        assert_eq!(xring_warp_bytes(8), 12_800);
        assert!(XRING_MAX_WARPS * xring_warp_bytes(8) + 1024 <= 227 * 1024);
        // auto: lean at M 1, the swizzled X ring at 2-8, wide above; the register path where K
        // is not a multiple of 128
        for (m, k, want) in [
            (1, 256, Fp4Gemv::Lean),
            (2, 256, Fp4Gemv::Xswz),
            (4, 256, Fp4Gemv::Xswz),
            (5, 256, Fp4Gemv::Xswz),
            (8, 256, Fp4Gemv::Xswz),
            (9, 256, Fp4Gemv::Wide),
            (16, 256, Fp4Gemv::Wide),
            (1, 160, Fp4Gemv::Regs),
        ] {
            let p = GemvProblem::new(m, 64, k, DType::Bf16);
            assert_eq!(p.path(Fp4Gemv::Auto), want, "M {m} K {k}");
        }
        // every M runs it, K not a multiple of 128 the register path
        assert_eq!(
            GemvProblem::new(16, 64, 256, DType::Bf16).path(Fp4Gemv::Xring),
            Fp4Gemv::Xring
        );
        assert_eq!(
            GemvProblem::new(8, 64, 160, DType::Bf16).path(Fp4Gemv::Xring),
            Fp4Gemv::Regs
        );
    }

    #[test]
    fn the_wide_ring_fits_an_sm_at_16_warps_and_four_ctas_at_4() {
        let per_warp = WIDE_RING * WIDE_STAGE_BYTES;
        // 227 KB a CTA at most; four 4-warp CTAs and their 1 KB reserves in 228 KB
        assert!(16 * per_warp <= 227 * 1024);
        assert!(4 * (4 * per_warp + 1024) <= 228 * 1024);
        let p = GemvProblem::new(1, 8192, 8192, DType::Bf16);
        assert_eq!(p.path(Fp4Gemv::Wide), Fp4Gemv::Wide);
        assert_eq!(
            GemvProblem::new(1, 8192, 8224, DType::Bf16).path(Fp4Gemv::Wide),
            Fp4Gemv::Regs
        );
    }

    #[test]
    fn the_lane_layout_and_k_permutation_compute_the_dot_products() {
        let mut seed = 0x1234_5678u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) as u32
        };
        // W: 16 rows x 128 elements (codes), X: 8 columns x 128 elements (small integers)
        let codes: Vec<Vec<u8>> = (0..16)
            .map(|_| (0..128).map(|_| (next() % 16) as u8).collect())
            .collect();
        let x: Vec<Vec<f64>> = (0..8)
            .map(|_| (0..128).map(|_| (next() % 7) as f64 - 3.0).collect())
            .collect();
        let word = |row: usize, q: usize, v: usize| -> u32 {
            (0..8).fold(0u32, |w, i| {
                w | (codes[row][32 * q + 8 * v + i] as u32) << (4 * i)
            })
        };
        let mut d = [[0.0f64; 8]; 16];
        for v in 0..4 {
            for j in 0..2 {
                // the mma's operands, gathered from every lane's registers
                let (mut a, mut b) = ([[0.0f64; 16]; 16], [[0.0f64; 8]; 16]);
                for lane in 0..32 {
                    let (g, q) = (lane / 4, lane % 4);
                    let val = |bits: u32, hi: bool| bf16_half(bits, hi) * 2f64.powi(126);
                    for row in [g, g + 8] {
                        let (lo, hi) = (
                            nibble_pair(word(row, q, v), 2 * j as i32),
                            nibble_pair(word(row, q, v), 2 * j as i32 + 1),
                        );
                        // a0/a1: (row, k 2q..2q+1); a2/a3: (row, k 2q+8..)
                        a[row][2 * q] = val(lo, false);
                        a[row][2 * q + 1] = val(lo, true);
                        a[row][2 * q + 8] = val(hi, false);
                        a[row][2 * q + 9] = val(hi, true);
                    }
                    let e = 32 * q + 8 * v + 2 * j;
                    b[2 * q][g] = x[g][e];
                    b[2 * q + 1][g] = x[g][e + 4];
                    b[2 * q + 8][g] = x[g][e + 1];
                    b[2 * q + 9][g] = x[g][e + 5];
                }
                for (r, dr) in d.iter_mut().enumerate() {
                    for (c, dc) in dr.iter_mut().enumerate() {
                        *dc += (0..16).map(|k| a[r][k] * b[k][c]).sum::<f64>();
                    }
                }
            }
        }
        for (r, dr) in d.iter().enumerate() {
            for (c, &got) in dr.iter().enumerate() {
                let want: f64 = (0..128)
                    .map(|e| crate::formats::fp4::decode(codes[r][e]) as f64 * x[c][e])
                    .sum();
                assert_eq!(got, want, "row {r}, column {c}");
            }
        }
    }

    /// `KILN_FP4_GEMV_ACC=auto` (the default): four chains on the pack path at M 1 only (G71),
    /// one everywhere else, and `kiln check` compiles that form in place of the one-chain one
    /// (the same ten variants).
    #[test]
    fn auto_chains_are_four_on_the_gemv_layout_at_m_1() {
        assert_eq!(auto_chains(Fp4Gemv::Pack, 1), PACK_M1_CHAINS);
        for (path, m) in [(Fp4Gemv::Pack, 4), (Fp4Gemv::Lean, 1), (Fp4Gemv::Xswz, 1)] {
            assert_eq!(auto_chains(path, m), 1, "{path:?} M {m}");
        }
        let v = variants("sm_90a");
        let m1 = with_pdl(spec_pack("sm_90a", 1));
        assert!(v.contains(&with_chains(m1.clone(), PACK_M1_CHAINS)));
        assert!(!v.contains(&m1));
        assert_eq!(v.len(), 10);
    }

    #[test]
    fn every_gemv_variant_compiles_for_sm_90a_without_spills() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        crate::jit::testing::assert_compile_clean(&variants("sm_90a"));
    }
}
