//! Host side of `kernels/gemm/small_k.cu`: a GEMM for a short K whose C TMA cannot store, where
//! C's write is the whole problem (issue 48's tiny-K group, ledger #98 G1 and #100). A and B are
//! read in place (no copies), C is written in place by rows. `wgmma_tma_ws`'s dispatch runs it
//! by [`runs`] (`KILN_WGMMA_SMALLK`); `kiln plan` shows it as its own plan ([`plan`]).

use crate::device::{Context, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::{GemmOperands, GemmProblem, LaunchPlan};

pub const ENTRY: &str = "gemm_small_k";
/// The block tile (one per block, 512 threads, 16 warps of 16 x 32).
pub const BM: u32 = 64;
pub const BN: u32 = 128;
pub const THREADS: u32 = 512;
/// The f32 staging of a tile (64 rows of 136 floats); the operand chunks alias it.
pub const SMEM_BYTES: u32 = 64 * 136 * 4;
/// Blocks resident on an SM (the kernel's launch bounds: 64 registers).
pub const PER_SM: u32 = 2;
/// K per chunk loaded into shared memory (the kernel's `KC`).
pub const K_CHUNK: usize = 32;
/// The longest K the dispatch's rule runs this kernel at: one chunk. Each chunk is loaded and
/// used before the next (no pipeline): on an H200 (7538a72, ledger #100) two chunks lost to the
/// wgmma kernel's row store (15104x7420x64 CR f16 231 -> 309 us, 3222x7693x89 RR f16 76 -> 96 us)
/// where one gained 16-29 % (9664x16127x17 RC f16 332 -> 261 us).
pub const MAX_K: usize = K_CHUNK;

/// `KILN_WGMMA_SMALLK`: whether `wgmma_tma_ws`'s dispatch runs a short-K problem whose C TMA
/// cannot store in this kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SmallK {
    /// `0`: never (the dispatch before 2026-11-29's small-K kernel: operands copied as the rules
    /// say, the wgmma kernel's row store).
    Never,
    /// `auto` (the default): by [`runs`].
    Auto,
    /// `1`: every problem, whatever K and C (to verify the kernel everywhere).
    Always,
}

impl SmallK {
    pub const ALL: [SmallK; 3] = [SmallK::Never, SmallK::Auto, SmallK::Always];

    /// Its value in `KILN_WGMMA_SMALLK`.
    pub fn name(self) -> &'static str {
        match self {
            SmallK::Never => "0",
            SmallK::Auto => "auto",
            SmallK::Always => "1",
        }
    }

    pub fn parse(v: &str) -> Option<SmallK> {
        SmallK::ALL.into_iter().find(|s| s.name() == v)
    }
}

/// Whether the dispatch runs `p` (C at device address `c`) in this kernel: `mode` `Always`, or
/// `Auto` where K is at most [`MAX_K`] and TMA cannot store C (`c_tma`: it can).
pub fn runs(p: &GemmProblem, c_tma: bool, mode: SmallK) -> bool {
    match mode {
        SmallK::Never => false,
        SmallK::Always => true,
        SmallK::Auto => p.k <= MAX_K && !c_tma,
    }
}

/// The kernel's parameter, laid out as `SmallKArgs` in `kernels/gemm/small_k.cu`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
struct SmallKArgs {
    a: u64,
    b: u64,
    c: u64,
    a_m: i64,
    a_k: i64,
    b_n: i64,
    b_k: i64,
    ldc: i64,
    m: i32,
    n: i32,
    k: i32,
    tiles_n: i32,
    alpha: f32,
    beta: f32,
    vec: i32,
    /// input (0 bf16, 1 f16) x 3 + output (0 bf16, 1 f16, 2 f32)
    io: i32,
}

impl SmallKArgs {
    fn new(p: &GemmProblem, ops: &GemmOperands, vec: bool) -> SmallKArgs {
        // element strides along (M, K) of A and (N, K) of B
        let (a_m, a_k) = match p.layout.a_row_major() {
            true => (p.lda as i64, 1),
            false => (1, p.lda as i64),
        };
        let (b_n, b_k) = match p.layout.b_row_major() {
            true => (1, p.ldb as i64),
            false => (p.ldb as i64, 1),
        };
        SmallKArgs {
            a: ops.a.ptr(),
            b: ops.b.ptr(),
            c: ops.c.ptr(),
            a_m,
            a_k,
            b_n,
            b_k,
            ldc: p.ldc as i64,
            m: p.m as i32,
            n: p.n as i32,
            k: p.k as i32,
            tiles_n: tiles(p).1 as i32,
            alpha: p.alpha,
            beta: p.beta,
            vec: vec as i32,
            io: (p.input.code() * 3 + p.output.code()) as i32,
        }
    }
}

/// Tiles of `p` along M and N.
fn tiles(p: &GemmProblem) -> (usize, usize) {
    (p.m.div_ceil(BM as usize), p.n.div_ceil(BN as usize))
}

/// The one variant: the dtypes and the layout are run-time values (within the variant budget).
pub fn spec(arch: &str) -> KernelSpec {
    KernelSpec::new("gemm/small_k.cu", ENTRY, arch)
}

/// Every variant (`kiln check`).
pub fn variants(arch: &str) -> Vec<KernelSpec> {
    vec![spec(arch)]
}

/// Whether the store goes by 16-byte chunks (`vec`: beta 0) or an element a lane.
fn stores_by_chunks(p: &GemmProblem, vec: bool) -> bool {
    vec && p.beta == 0.0
}

/// What a launch runs, for `kiln plan`: one block per tile, resident `per_sm` to an SM of
/// `sm_count`; `why` says which rule sent it here.
pub fn plan(p: &GemmProblem, sm_count: u32, vec: bool, why: String) -> LaunchPlan {
    let (tm, tn) = tiles(p);
    let blocks = (tm * tn) as u32;
    let slots = PER_SM * sm_count;
    let store = if stores_by_chunks(p, vec) {
        "by 16-byte chunks of its rows (the row's ends in 2-, 4- and 8-byte pieces; \
         KILN_WGMMA_SMALLK_VEC=1)"
    } else {
        "by rows, an element a lane"
    };
    LaunchPlan {
        tile: format!("small-K {BM}x{BN} mma.sync"),
        bm: BM,
        bn: BN,
        stages: 1,
        cluster: 1,
        pingpong: false,
        splits: 1,
        tail: false,
        stream_k_from: None,
        tma_epilogue: false,
        c_loaded: false,
        split_code: false,
        copies: Vec::new(),
        tiles: blocks,
        slots,
        grid: blocks,
        waves: blocks as f64 / slots as f64,
        notes: vec![
            why,
            format!(
                "small_k: A and B read in place (2-byte loads, any layout and alignment), K in {} \
                 chunk{} of {K_CHUNK} through shared memory, mma.sync m16n8k16",
                p.k.div_ceil(K_CHUNK),
                if p.k > K_CHUNK { "s" } else { "" }
            ),
            format!("epilogue: staged as f32 in shared memory, stored {store}"),
        ],
    }
}

/// Enqueues `p` on the context's stream: one block per 64x128 tile.
pub fn launch(ctx: &Context, p: &GemmProblem, ops: &GemmOperands, vec: bool) -> Result<()> {
    let (tm, tn) = tiles(p);
    let blocks = u32::try_from(tm * tn)
        .ok()
        .filter(|&b| b <= i32::MAX as u32)
        .ok_or_else(|| Error::Unsupported {
            kernel: "wgmma_tma_ws".into(),
            reason: format!(
                "the small-K kernel runs one block per 64x128 tile, and {}x{} tiles are too many \
                 for a grid; set KILN_WGMMA_SMALLK=0",
                tm, tn
            ),
        })?;
    let f = ctx.function(&spec(&ctx.arch()))?;
    let mut args = SmallKArgs::new(p, ops, stores_by_chunks(p, vec));
    let cfg = LaunchConfig {
        smem_bytes: SMEM_BYTES,
        ..LaunchConfig::simple((blocks, 1, 1), THREADS)
    };
    // SAFETY: one parameter, a SmallKArgs laid out as the kernel's, whose buffers the caller keeps
    // alive and checked against the problem (every element the kernel reads or writes lies in
    // them); C's base is aligned to its element (a typed buffer).
    unsafe {
        f.launch(
            ctx.stream,
            &cfg,
            &mut [&mut args as *mut SmallKArgs as *mut std::ffi::c_void],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::{DType, Layout};

    #[test]
    fn args_match_the_device_layout() {
        // three pointers, five i64, four ints, two floats, two ints
        assert_eq!(std::mem::size_of::<SmallKArgs>(), 96);
        assert_eq!(std::mem::offset_of!(SmallKArgs, m), 64);
        assert_eq!(std::mem::offset_of!(SmallKArgs, vec), 88);
    }

    #[test]
    fn the_rule_takes_short_k_with_a_c_that_tma_cannot_store() {
        let p = GemmProblem::new(9664, 16127, 17, Layout::RC, DType::F16, DType::F16);
        assert!(runs(&p, false, SmallK::Auto));
        assert!(!runs(&p, true, SmallK::Auto));
        assert!(!runs(&p, false, SmallK::Never));
        let long = GemmProblem::new(9664, 16127, 33, Layout::RC, DType::F16, DType::F16);
        assert!(!runs(&long, false, SmallK::Auto));
        assert!(runs(&long, true, SmallK::Always));
        for s in SmallK::ALL {
            assert_eq!(SmallK::parse(s.name()), Some(s));
        }
        assert_eq!(variants("sm_90a").len(), 1);
    }

    /// The variant compiles for sm_90a without spills or local memory, at two blocks an SM (at
    /// most 64 registers: the kernel's launch bounds).
    #[test]
    fn every_variant_compiles_without_spills() {
        for spec in variants("sm_90a") {
            let c = crate::jit::Jit::without_cache()
                .compile(&spec)
                .unwrap_or_else(|e| panic!("{e}"));
            let r = &c.resources;
            assert!(
                !r.spills() && r.stack_frame == 0,
                "{}: {}",
                spec.label(),
                c.log
            );
            assert!(r.registers <= 64, "{}: {}", spec.label(), c.log);
            assert!(!c.log.contains("C75"), "{}: {}", spec.label(), c.log);
        }
    }
}
