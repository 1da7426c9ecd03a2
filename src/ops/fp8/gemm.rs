//! Host side of `kernels/gemm/fp8_wgmma.cu`: the scaled FP8 GEMM on warp-specialised persistent
//! WGMMA + TMA. Which specialisations exist (a small set: e4m3 x e4m3 in every scale mode with
//! and without promotion, two or three configs each; e5m2 operands with promoted tensor or block
//! scales), which config a problem runs, and the launch: scale checks, tensor maps, grid.

use std::ffi::c_void;

use super::problem::{Fp8Problem, ScaleMode, Scales};
use super::tma::Fp8Operand;
use crate::device::{Context, DeviceBuffer, DeviceInfo, LaunchConfig};
use crate::error::{Error, Result};
use crate::formats::Fp8Format;
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;

/// The version's name (its device file's stem).
pub const NAME: &str = "fp8_wgmma";
/// Block tile rows (two consumer warpgroups of 64) and K depth of a stage (128 bytes).
pub const BM: u32 = 128;
pub const BK: u32 = 128;
pub const THREADS: u32 = 384;
/// Tile-rows per group of the grouped tile order.
pub const GROUP_M: u32 = 8;
/// The shared memory the stage counts are sized for: an H100's opt-in limit per block.
const SMEM_BUDGET: u32 = 232_448;

/// A launch's configuration: the tile width, whether the promotion is pipelined over two
/// accumulators (`KILN_PIPE`, promoted problems), and the split-K slices (0: [`choose_splits`]
/// decides; a run-time choice, not a compiled one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Fp8Config {
    pub bn: u32,
    pub pipe: bool,
    pub splits: u32,
}

impl Fp8Config {
    pub const fn new(bn: u32, pipe: bool) -> Self {
        Fp8Config {
            bn,
            pipe,
            splits: 0,
        }
    }

    /// The same compiled kernel (width and pipelining; splits aside).
    pub fn same_kernel(&self, other: &Fp8Config) -> bool {
        self.bn == other.bn && self.pipe == other.pipe
    }
}

impl std::fmt::Display for Fp8Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{}", self.bn, if self.pipe { "p" } else { "" })?;
        if self.splits > 0 {
            write!(f, "/{}", self.splits)?;
        }
        Ok(())
    }
}

impl std::str::FromStr for Fp8Config {
    type Err = Error;
    /// `128`, `160`, `256`, `128p` (pipelined promotion), optionally `/S` for S split-K slices
    /// (`128p/4`).
    fn from_str(s: &str) -> Result<Self> {
        let bad = || {
            Error::invalid(format!(
                "`{s}` is not an FP8 tile config; write a width such as 128, 128p for the \
                 pipelined promotion, and /S for S split-K slices (128p/4)"
            ))
        };
        let (head, splits) = match s.split_once('/') {
            Some((h, k)) => (h, k.parse::<u32>().map_err(|_| bad())?),
            None => (s, 0),
        };
        let (num, pipe) = match head.strip_suffix('p') {
            Some(n) => (n, true),
            None => (head, false),
        };
        let bn = num.parse::<u32>().map_err(|_| bad())?;
        Ok(Fp8Config { bn, pipe, splits })
    }
}

/// Bytes of A and B one stage holds.
pub const fn stage_bytes(bn: u32) -> u32 {
    (BM + bn) * BK
}

/// Stages in the ring: as many as the budget holds, at most 8.
pub const fn stages(bn: u32) -> u32 {
    let s = (SMEM_BUDGET - 1024 - 2 * 8 * 8) / stage_bytes(bn);
    if s > 8 {
        8
    } else {
        s
    }
}

/// Dynamic shared memory: 1 KB of slack to align the ring to 1024 bytes, the stages, and a full
/// and an empty mbarrier per stage.
pub const fn smem_bytes(bn: u32) -> u32 {
    1024 + stages(bn) * stage_bytes(bn) + 2 * stages(bn) * 8
}

/// The configs compiled for an operand pair, scale mode and accumulation: e4m3 x e4m3 promoted
/// has the pipelined 128-wide tile and the plain 128 and 160 (whose 45 column tiles fill
/// N = 7168's waves; too wide for a third accumulator array), unpromoted 128 and 256; pairs
/// with e5m2 have the pipelined 128 with promoted tensor or block scales; everything else none.
pub fn configs(
    a: Fp8Format,
    b: Fp8Format,
    scale: ScaleMode,
    promote: bool,
) -> &'static [Fp8Config] {
    const PROMOTED: &[Fp8Config] = &[
        Fp8Config::new(128, true),
        Fp8Config::new(128, false),
        Fp8Config::new(160, false),
    ];
    const FAST: &[Fp8Config] = &[Fp8Config::new(128, false), Fp8Config::new(256, false)];
    const OTHER: &[Fp8Config] = &[Fp8Config::new(128, true)];
    let e4 = a == Fp8Format::E4m3 && b == Fp8Format::E4m3;
    match (e4, scale, promote) {
        (_, ScaleMode::Block, false) => &[],
        (true, _, true) => PROMOTED,
        (true, _, false) => FAST,
        (false, ScaleMode::Tensor | ScaleMode::Block, true) => OTHER,
        (false, _, _) => &[],
    }
}

/// The specialisation for `p` with `cfg`.
pub fn spec(arch: &str, p: &Fp8Problem, cfg: Fp8Config) -> KernelSpec {
    spec_of(arch, p.a, p.b, p.scale, p.promote, cfg, p.out)
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
    let bn = cfg.bn;
    KernelSpec::new("gemm/fp8_wgmma.cu", "gemm_fp8_wgmma", arch)
        .define("KILN_FP8_A", a.define())
        .define("KILN_FP8_B", b.define())
        .define("KILN_SCALE", scale.define())
        .define("KILN_PROMOTE", promote as u32)
        .define("KILN_PIPE", cfg.pipe as u32)
        .define("KILN_BN", bn)
        .define("KILN_STAGES", stages(bn))
        .define("KILN_OUT", out.code())
        // NT: A row-major and B column-major, both K-contiguous (the layout defines the shared
        // warp-specialised headers read)
        .define("KILN_A_ROW", 1)
        .define("KILN_B_ROW", 0)
        .define("KILN_GROUP_M", GROUP_M)
        .define("KILN_SMEM", smem_bytes(bn))
}

/// Every specialisation (for the compile check).
pub fn variants(arch: &str) -> Vec<KernelSpec> {
    if !crate::jit::arch::has_wgmma(arch) {
        return Vec::new();
    }
    let mut v = Vec::new();
    for a in Fp8Format::ALL {
        for b in Fp8Format::ALL {
            for scale in ScaleMode::ALL {
                for promote in [false, true] {
                    for &cfg in configs(a, b, scale, promote) {
                        for out in DType::OUTPUTS {
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
    let Some(narrowest) = w.iter().map(|c| c.bn).min() else {
        return Err(format!(
            "{} x {} operands are compiled only with promoted tensor or block scales ({} scales{} \
             are not); use e4m3 x e4m3 for those",
            p.a,
            p.b,
            p.scale,
            if p.promote { "" } else { " unpromoted" }
        ));
    };
    dev.check_smem(smem_bytes(narrowest))?;
    Ok(())
}

/// Tiles of 128 x `bn` over `p`'s C.
pub fn tiles(p: &Fp8Problem, bn: u32) -> u64 {
    (p.m as u64).div_ceil(BM as u64) * (p.n as u64).div_ceil(bn as u64)
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

/// The config to run `p` with: the compiled one whose waves over the SMs cost least (waves x
/// width x [`column_cost`], a wave's time growing with the tile's width), the wider on a tie.
pub fn choose(p: &Fp8Problem, dev: &DeviceInfo) -> Fp8Config {
    let sms = dev.sm_count.max(1) as u64;
    configs(p.a, p.b, p.scale, p.promote)
        .iter()
        .copied()
        .filter(|c| dev.check_smem(smem_bytes(c.bn)).is_ok())
        .min_by_key(|c| {
            (
                tiles(p, c.bn).div_ceil(sms) * c.bn as u64 * column_cost(*c, p.promote),
                u32::MAX - c.bn,
            )
        })
        .unwrap_or(Fp8Config::new(128, false))
}

/// Most split-K slices (`common/split_k.cuh`'s 32-bit slice arithmetic holds up to 8).
pub const MAX_SPLITS: u32 = 8;

/// Split-K slices for `p` with `bn`-wide tiles: 1 while the tiles fill half the SMs or more,
/// else enough slices to fill them, at most [`MAX_SPLITS`], keeping two K blocks or more a slice
/// (DeepSeek-V3's M = 64 and 128 GEMMs have 17 to 56 tiles for 132 SMs).
pub fn choose_splits(p: &Fp8Problem, bn: u32, dev: &DeviceInfo) -> u32 {
    let (t, sms) = (tiles(p, bn), dev.sm_count.max(1) as u64);
    let kblocks = (p.k as u64).div_ceil(BK as u64);
    if 2 * t >= sms || kblocks < 4 {
        return 1;
    }
    (sms / t).min(kblocks / 2).clamp(1, MAX_SPLITS as u64) as u32
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

/// Refuses a config that is not compiled for `p`, naming those that are.
pub fn check_config(p: &Fp8Problem, cfg: Fp8Config) -> Result<()> {
    let w = configs(p.a, p.b, p.scale, p.promote);
    if w.iter().any(|c| c.same_kernel(&cfg)) && cfg.splits <= MAX_SPLITS {
        return Ok(());
    }
    let names: Vec<String> = w.iter().map(|c| c.to_string()).collect();
    Err(Error::invalid(format!(
        "config {cfg} is not compiled for {p}; use one of {} (with at most {MAX_SPLITS} \
         split-K slices)",
        names.join(", ")
    )))
}

/// C = alpha * dequant(A) · dequant(B)ᵀ on the context's stream, with the tile width
/// [`choose`] picks. With host scales the call waits for the kernel (their device copies are
/// freed when it returns); with device scales it returns once the kernel is enqueued.
pub fn gemm(ctx: &Context, p: &Fp8Problem, ops: &Fp8Operands) -> Result<()> {
    let cfg = choose(p, &ctx.info);
    gemm_with(ctx, p, ops, cfg)
}

/// [`gemm`] with an explicit config (one of [`configs`]).
pub fn gemm_with(ctx: &Context, p: &Fp8Problem, ops: &Fp8Operands, cfg: Fp8Config) -> Result<()> {
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
    let bn = cfg.bn;
    let operand = |addr: u64, rows: usize, ld: usize, box_rows: u32| Fp8Operand {
        addr,
        rows: rows as u64,
        k: p.k as u64,
        ld: ld as u64,
        box_rows,
    };
    let mut map_a = operand(ops.a.ptr(), p.m, p.lda, BM).encode()?;
    let mut map_b = operand(ops.b.ptr(), p.n, p.ldb, bn).encode()?;
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
    };
    let t = tiles(p, bn);
    let kblocks = (p.k as u64).div_ceil(BK as u64);
    let splits = match cfg.splits {
        0 => choose_splits(p, bn, &ctx.info),
        s => s.min(kblocks as u32).max(1),
    } as u64;
    if t * splits > i32::MAX as u64 {
        return Err(Error::invalid(format!(
            "{p} has {t} tiles of {BM}x{bn}, over 2^31 - 1"
        )));
    }
    if splits > 1 {
        args.splits = splits as i32;
        args.ws = ctx
            .scratch
            .fp8_split
            .at_least(ctx, (t * splits * (BM as u64) * bn as u64 * 4) as usize)?;
        args.counters = ctx
            .scratch
            .fp8_split_counters
            .at_least(ctx, (t * 4) as usize)?;
    }
    let grid = (t * splits).min(ctx.info.sm_count.max(1) as u64) as u32;
    let f = ctx.function(&spec(&ctx.arch(), p, cfg))?;
    let cfg = LaunchConfig {
        smem_bytes: smem_bytes(bn),
        ..LaunchConfig::simple((grid, 1, 1), THREADS)
    };
    // SAFETY: the kernel takes (TmaMap, TmaMap, Fp8Args): two 128-byte maps and the argument
    // block, in that order. The maps address A and B and the arguments C and the scales, all of
    // which `check` sized against the problem; the caller keeps A, B, C and device scales alive
    // until the stream is done, and the host scales' copies live until the synchronisation
    // below.
    unsafe {
        f.launch(
            ctx.stream,
            &cfg,
            &mut [
                map_a.as_param(),
                map_b.as_param(),
                &mut args as *mut Fp8Args as *mut c_void,
            ],
        )?;
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
    use crate::jit::{nvrtc, Jit};

    #[test]
    fn args_match_the_device_layout() {
        // three pointers, three ints, pad to 8, an i64, a float, an int, two pointers
        assert_eq!(std::mem::offset_of!(Fp8Args, m), 24);
        assert_eq!(std::mem::offset_of!(Fp8Args, ldc), 40);
        assert_eq!(std::mem::offset_of!(Fp8Args, alpha), 48);
        assert_eq!(std::mem::offset_of!(Fp8Args, splits), 52);
        assert_eq!(std::mem::offset_of!(Fp8Args, ws), 56);
        assert_eq!(std::mem::size_of::<Fp8Args>(), 72);
    }

    #[test]
    fn stages_fill_the_shared_memory_of_an_h100() {
        for bn in [128, 160, 256] {
            assert_eq!(stage_bytes(bn) % 1024, 0);
            assert!(smem_bytes(bn) <= SMEM_BUDGET, "{bn}");
            assert!(smem_bytes(bn) + stage_bytes(bn) > SMEM_BUDGET || stages(bn) == 8);
        }
        assert_eq!((stages(128), stages(160), stages(256)), (7, 6, 4));
    }

    #[test]
    fn variants_stay_few_and_every_mode_has_one() {
        let v = variants("sm_90a");
        assert!(v.len() <= 60, "{} variants", v.len());
        assert_eq!(v.len(), (3 * 3 + 2 * 2) * 3 + 3 * 2 * 3);
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
        assert_eq!(choose(&p, &dev), Fp8Config::new(128, true));
        let p = Fp8Problem::new(4096, 4096, 4096, DType::Bf16, ScaleMode::Block);
        assert_eq!(choose(&p, &dev), Fp8Config::new(128, true));
        // unpromoted 4096^3: 8 waves of 128 or 4 of 256 cost the same; the wider wins the tie
        let p = Fp8Problem {
            promote: false,
            scale: ScaleMode::Tensor,
            ..p
        };
        assert_eq!(choose(&p, &dev), Fp8Config::new(256, false));
        assert_eq!(
            "128p".parse::<Fp8Config>().unwrap(),
            Fp8Config::new(128, true)
        );
        assert_eq!(Fp8Config::new(160, false).to_string(), "160");
        assert!("p".parse::<Fp8Config>().is_err());
        assert_eq!("128p/4".parse::<Fp8Config>().unwrap().splits, 4);
        assert_eq!("160/2".parse::<Fp8Config>().unwrap().to_string(), "160/2");
        // DeepSeek-V3's small-M GEMMs: 17 tiles fill 7 slices each; 56 tiles two
        let small = Fp8Problem::new(64, 2112, 7168, DType::Bf16, ScaleMode::Block);
        assert_eq!(choose_splits(&small, 128, &dev), 7);
        let small = Fp8Problem::new(128, 7168, 16384, DType::Bf16, ScaleMode::Block);
        assert_eq!(choose_splits(&small, 128, &dev), 2);
        let big = Fp8Problem::new(4096, 7168, 16384, DType::Bf16, ScaleMode::Block);
        assert_eq!(choose_splits(&big, 128, &dev), 1);
        let short = Fp8Problem::new(64, 256, 384, DType::Bf16, ScaleMode::Block);
        assert_eq!(choose_splits(&short, 128, &dev), 1);
        let e = check_config(&p, Fp8Config::new(128, true)).unwrap_err();
        assert!(e.to_string().contains("use one of 128, 256"), "{e}");
    }

    #[test]
    fn every_variant_compiles_for_sm_90a_without_spills() {
        let required = std::env::var_os("KILN_REQUIRE_NVRTC").is_some();
        if nvrtc::version().is_err() {
            assert!(!required, "NVRTC is required here but missing");
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
