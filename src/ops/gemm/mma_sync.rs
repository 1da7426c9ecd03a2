//! Host side of `kernels/gemm/mma_sync.cu`: tensor cores through warp-level `mma.sync`
//! (m16n8k16, fp32 accumulation), fed by a multi-stage cp.async pipeline through swizzled shared
//! memory and ldmatrix. Runs on sm_80 and newer; the rung below wgmma on Hopper.

use super::tile_grid::TileGrid;
use super::{with_problem_defines, DType, GemmArgs, GemmKernel, GemmOperands, GemmProblem};
use crate::device::{Context, DeviceInfo, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::space::{Config, ParamSpace};
use crate::ops::tuned::TunedTable;

pub struct MmaSync;

/// Whether every row of A and B starts 16 bytes after the previous one (the leading dimensions
/// in bytes are multiples of 16): cp.async can copy them. Otherwise the kernel's element-load
/// variant runs (on an H200 the SIMT fallback those problems had before ran at ~31 TFLOPS).
pub fn rows_aligned(p: &GemmProblem) -> bool {
    let es = p.input.size();
    (p.lda * es).is_multiple_of(16) && (p.ldb * es).is_multiple_of(16)
}

/// The block tile and pipeline the kernel is specialised for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TileConfig {
    pub bm: u32,
    pub bn: u32,
    /// K step per pipeline stage: 32 or 64.
    pub bk: u32,
    pub stages: u32,
    /// Tile rows per group in the block order (blocks sweep a group column by column).
    pub group_m: u32,
}

/// Threads per block: 8 warps in a 2 x 4 grid.
pub const THREADS: u32 = 256;

impl TileConfig {
    /// 128x256 blocks (8 warps of 64x64), BK = 32, 4 stages: 96 KB of shared memory, which also
    /// fits the 99 KB opt-in of sm_86/sm_89. On an H100 this measured best among 128x128 and
    /// 128x256 tiles, BK 32 and 64, 3 to 5 stages (about 455-465 TFLOPS bf16 at 4096^3).
    pub const DEFAULT: TileConfig = TileConfig {
        bm: 128,
        bn: 256,
        bk: 32,
        stages: 4,
        group_m: 8,
    };

    /// Dynamic shared memory: one A and one B tile of 16-bit elements per stage.
    pub fn smem_bytes(&self) -> u32 {
        (self.bm + self.bn) * self.bk * 2 * self.stages
    }

    /// The output tiling and block order of this tile.
    pub fn grid(&self) -> TileGrid {
        TileGrid {
            bm: self.bm,
            bn: self.bn,
            group_m: self.group_m,
        }
    }

    /// A 128x128 tile (BK 32, 4 stages): twice the blocks of [`TileConfig::DEFAULT`], for
    /// problems whose 128x256 tiles leave SMs idle.
    pub const NARROW: TileConfig = TileConfig {
        bn: 128,
        ..TileConfig::DEFAULT
    };

    /// The tile of the element-load variant (rows or operands not 16-byte aligned): 128x128, as
    /// the 128x256 one spills with the loads staged through registers (kiln check, sm_90a).
    pub const ELEM: TileConfig = TileConfig::NARROW;

    /// The tile a config from [`MmaSync`]'s space names, or why the kernel cannot take it.
    pub fn from_config(cfg: &Config) -> std::result::Result<TileConfig, String> {
        let get = |k: &str| -> std::result::Result<u32, String> {
            let v = cfg.require(k)?;
            u32::try_from(v).map_err(|_| format!("{k}={v} is out of range"))
        };
        let t = TileConfig {
            bm: get("BM")?,
            bn: get("BN")?,
            bk: get("BK")?,
            stages: get("STAGES")?,
            group_m: get("GROUP_M")?,
        };
        let broken = space_rules(&t);
        if let Some(reason) = broken.first() {
            return Err(format!("{cfg}: {reason}"));
        }
        Ok(t)
    }

    /// The config naming this tile, in the space's parameter order.
    pub fn to_config(&self) -> Config {
        Config::new(&[
            ("BM", self.bm as i64),
            ("BN", self.bn as i64),
            ("BK", self.bk as i64),
            ("STAGES", self.stages as i64),
            ("GROUP_M", self.group_m as i64),
        ])
    }

    /// The default dispatch's choice without a tuned config: [`TileConfig::DEFAULT`] unless the
    /// narrower tile finishes in fewer tile-waves. A wave is one block per SM (both tiles run
    /// one block per SM); a partly filled last wave costs as much as a full one, and a 128x128
    /// tile does a 128x256 tile's work at about 85% of its efficiency (it reloads B twice as
    /// often per flop).
    pub fn heuristic(p: &GemmProblem, dev: &DeviceInfo) -> TileConfig {
        if !rows_aligned(p) {
            return TileConfig::ELEM;
        }
        let cost = |t: &TileConfig, efficiency: f64| {
            let (tm, tn) = t.grid().tiles(p);
            crate::ops::waves::waves(tm * tn, dev.sm_count) as f64 * (t.bm * t.bn) as f64
                / efficiency
        };
        if cost(&TileConfig::NARROW, 0.85) < cost(&TileConfig::DEFAULT, 1.0) {
            TileConfig::NARROW
        } else {
            TileConfig::DEFAULT
        }
    }

    /// The variant for `p`: with 2-byte element loads when its rows are not 16-byte aligned
    /// ([`rows_aligned`]).
    fn spec(&self, arch: &str, p: &GemmProblem) -> KernelSpec {
        self.spec_with(arch, p, !rows_aligned(p))
    }

    /// `elem_loads`: the `KILN_ELEM_LOADS` variant (2-byte loads through registers instead of
    /// 16-byte cp.async), for rows or operand pointers that are not 16-byte aligned.
    fn spec_with(&self, arch: &str, p: &GemmProblem, elem_loads: bool) -> KernelSpec {
        let spec = with_problem_defines(
            KernelSpec::new("gemm/mma_sync.cu", "gemm_mma_sync", arch),
            p.layout,
            p.input,
            p.output,
        )
        .define("KILN_BM", self.bm)
        .define("KILN_BN", self.bn)
        .define("KILN_BK", self.bk)
        .define("KILN_STAGES", self.stages)
        .define("KILN_GROUP_M", self.group_m)
        .define("KILN_SMEM", self.smem_bytes())
        .define("KILN_THREADS", THREADS);
        if elem_loads {
            spec.define("KILN_ELEM_LOADS", 1)
        } else {
            spec
        }
    }

    /// The spec of any tile, even one the space refuses (for the guard's tests).
    #[doc(hidden)]
    pub fn spec_for_tests(t: &TileConfig, p: &GemmProblem) -> KernelSpec {
        t.spec_with("sm_90a", p, false)
    }
}

/// The values each parameter of the space may take.
const BMS: [i64; 3] = [64, 128, 256];
const BNS: [i64; 3] = [64, 128, 256];
const BKS: [i64; 2] = [32, 64];
const STAGES: [i64; 5] = [2, 3, 4, 5, 6];
const GROUP_MS: [i64; 3] = [4, 8, 16];

/// The kernel's own limits (its static_asserts and register budget), each with its reason.
fn space_rules(t: &TileConfig) -> Vec<String> {
    let mut broken = Vec::new();
    let has = |list: &[i64], v: u32| list.contains(&(v as i64));
    if !has(&BMS, t.bm) || !has(&BNS, t.bn) {
        broken.push("BM and BN must each be 64, 128 or 256 (warp tiles of 2, 4 or 8 m16/n8 steps x 8 warps)".into());
    }
    if !has(&BKS, t.bk) {
        broken.push("BK must be 32 or 64 (the swizzle covers 64- and 128-byte rows)".into());
    }
    if t.stages < 2 {
        broken.push("the cp.async pipeline needs at least 2 stages".into());
    }
    if t.group_m == 0 {
        broken.push("GROUP_M must be at least 1".into());
    }
    if t.bm * t.bn > 128 * 256 {
        broken.push(ACC_RULE.into());
    }
    broken
}

const ACC_RULE: &str =
    "BM x BN over 128 x 256 needs more than 128 fp32 accumulators per thread (spills)";

impl GemmKernel for MmaSync {
    fn name(&self) -> &'static str {
        "mma_sync"
    }
    fn summary(&self) -> &'static str {
        "tensor cores via mma.sync m16n8k16: 128x256 block tile, 4-stage cp.async pipeline, swizzled ldmatrix"
    }
    fn rung(&self) -> u32 {
        2
    }
    fn supports(&self, p: &GemmProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        if dev.compute_capability < (8, 0) {
            let (maj, min) = dev.compute_capability;
            return Err(format!(
                "needs compute capability 8.0 or newer for mma.sync and cp.async; this GPU is {maj}.{min}"
            ));
        }
        if p.input == DType::F32 {
            return Err("inputs must be bf16 or f16".into());
        }
        let t = TileConfig::DEFAULT;
        dev.check_smem(t.smem_bytes())?;
        t.grid().check(p)
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        super::all_combinations()
            .into_iter()
            .flat_map(|(l, i, o)| {
                let p = GemmProblem::new(1, 1, 1, l, i, o);
                [
                    TileConfig::DEFAULT.spec_with(arch, &p, false),
                    TileConfig::NARROW.spec_with(arch, &p, false),
                    TileConfig::ELEM.spec_with(arch, &p, true),
                ]
            })
            .collect()
    }
    fn specs_for(&self, p: &GemmProblem, dev: &DeviceInfo, tuned: &TunedTable) -> Vec<KernelSpec> {
        let (t, elem_loads) = launch_tile(&self.tile_for(p, dev, tuned), p, true);
        vec![t.spec_with(&dev.arch(), p, elem_loads)]
    }
    fn launch(&self, ctx: &Context, p: &GemmProblem, ops: &GemmOperands) -> Result<()> {
        self.launch_tile(ctx, p, ops, &self.tile_for(p, &ctx.info, &ctx.tuned))
    }
    fn space(&self, _p: &GemmProblem, _dev: &DeviceInfo) -> Option<ParamSpace> {
        Some(
            ParamSpace::new()
                .param("BM", &BMS)
                .param("BN", &BNS)
                .param("BK", &BKS)
                .param("STAGES", &STAGES)
                .param("GROUP_M", &GROUP_MS)
                .rule(ACC_RULE, |c| {
                    c.get("BM").unwrap_or(0) * c.get("BN").unwrap_or(0) <= 128 * 256
                }),
        )
    }
    fn baseline(&self, p: &GemmProblem, dev: &DeviceInfo) -> Option<Config> {
        Some(TileConfig::heuristic(p, dev).to_config())
    }
    fn spec_for(&self, arch: &str, p: &GemmProblem, cfg: &Config) -> Option<KernelSpec> {
        TileConfig::from_config(cfg).ok().map(|t| t.spec(arch, p))
    }
    fn launch_with(
        &self,
        ctx: &Context,
        p: &GemmProblem,
        ops: &GemmOperands,
        cfg: &Config,
    ) -> Result<()> {
        let t = TileConfig::from_config(cfg).map_err(|reason| Error::Unsupported {
            kernel: self.name().into(),
            reason,
        })?;
        self.launch_tile(ctx, p, ops, &t)
    }
}

/// The tile a launch of `t` runs for `p` and whether with element loads: rows or operands
/// (`aligned_operands`: both bases on 16 bytes) that cp.async cannot copy take the element-load
/// variant, in its tile if `t` is larger (those spill with element loads).
fn launch_tile(t: &TileConfig, p: &GemmProblem, aligned_operands: bool) -> (TileConfig, bool) {
    let elem_loads = !rows_aligned(p) || !aligned_operands;
    let t = if elem_loads && t.bm * t.bn > TileConfig::ELEM.bm * TileConfig::ELEM.bn {
        TileConfig::ELEM
    } else {
        *t
    };
    (t, elem_loads)
}

impl MmaSync {
    /// The tile `launch` runs for `p` on `dev`: `tuned`'s config, else the heuristic.
    fn tile_for(&self, p: &GemmProblem, dev: &DeviceInfo, tuned: &TunedTable) -> TileConfig {
        match tuned.gemm(dev, self.name(), p) {
            Some(cfg) => {
                TileConfig::from_config(&cfg).unwrap_or_else(|_| TileConfig::heuristic(p, dev))
            }
            None => TileConfig::heuristic(p, dev),
        }
    }

    fn launch_tile(
        &self,
        ctx: &Context,
        p: &GemmProblem,
        ops: &GemmOperands,
        t: &TileConfig,
    ) -> Result<()> {
        let aligned =
            super::require_aligned_operands(self.name(), ops, "cp.async copies 16 bytes").is_ok();
        let (t, elem_loads) = launch_tile(t, p, aligned);
        let t = &t;
        let blocks = t.grid().launch_blocks(self.name(), p)?;
        let f = ctx.function(&t.spec_with(&ctx.arch(), p, elem_loads))?;
        let mut args = GemmArgs::new(p, ops);
        let cfg = LaunchConfig {
            smem_bytes: t.smem_bytes(),
            ..LaunchConfig::simple((blocks, 1, 1), THREADS)
        };
        // SAFETY: one parameter, a GemmArgs, whose buffers the caller keeps alive and checked;
        // both operand bases are 16-byte aligned (checked above) and supports() checked the rows.
        unsafe { f.launch(ctx.stream, &cfg, &mut [args.as_param()]) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::Layout;

    fn problem(m: usize, n: usize, k: usize, layout: Layout) -> GemmProblem {
        GemmProblem::new(m, n, k, layout, DType::Bf16, DType::Bf16)
    }

    #[test]
    fn grid_and_shared_memory() {
        let t = TileConfig::DEFAULT;
        assert_eq!(t.smem_bytes(), 96 * 1024);
        assert_eq!(
            t.grid().blocks(&problem(4096, 4096, 4096, Layout::RC)),
            Some(32 * 16)
        );
        assert_eq!(t.grid().blocks(&problem(1, 1, 1, Layout::RC)), Some(1));
        assert_eq!(t.grid().blocks(&problem(129, 257, 8, Layout::RC)), Some(4));
        let huge = problem(i32::MAX as usize, i32::MAX as usize, 8, Layout::RC);
        assert_eq!(t.grid().blocks(&huge), None);
    }

    #[test]
    fn supports_needs_sm80_and_picks_element_loads_for_unaligned_rows() {
        let h100 = DeviceInfo::h100_sxm();
        assert!(MmaSync
            .supports(&problem(4096, 4096, 4096, Layout::RC), &h100)
            .is_ok());
        // any M, N, K when the leading dimensions keep rows aligned
        let odd = GemmProblem {
            lda: 16,
            ldb: 16,
            ..problem(13, 7, 3, Layout::RC)
        };
        assert!(MmaSync.supports(&odd, &h100).is_ok());
        let turing = DeviceInfo {
            compute_capability: (7, 5),
            ..h100.clone()
        };
        let e = MmaSync
            .supports(&problem(64, 64, 64, Layout::RC), &turing)
            .unwrap_err();
        assert!(e.contains("8.0"), "{e}");
        // rows not 16 bytes apart (K = 12: 24 bytes; B row-major with N = 100: 200 bytes) run
        // the element-load variant instead of being refused
        for (p, spec_has_elem) in [
            (problem(64, 64, 12, Layout::RC), true),
            (problem(64, 100, 64, Layout::RR), true),
            (problem(64, 128, 64, Layout::RR), false),
        ] {
            assert!(MmaSync.supports(&p, &h100).is_ok());
            let spec = TileConfig::DEFAULT.spec("sm_90a", &p);
            let elem = spec
                .defines
                .contains(&("KILN_ELEM_LOADS".into(), "1".into()));
            assert_eq!(elem, spec_has_elem, "{}", spec.label());
        }
        let small_smem = DeviceInfo {
            smem_optin_bytes: 48 * 1024,
            ..h100.clone()
        };
        assert!(MmaSync
            .supports(&problem(64, 64, 64, Layout::RC), &small_smem)
            .is_err());
    }

    #[test]
    fn variants_cover_every_layout_and_dtype_with_their_shared_memory() {
        let v = MmaSync.variants("sm_90a");
        // layouts x input dtypes x outputs x (two cp.async tiles, the element-load one)
        assert_eq!(v.len(), 4 * 2 * 3 * 3);
        for s in &v {
            let narrow = s.defines.contains(&("KILN_BN".into(), "128".into()));
            let smem = if narrow { 64 * 1024 } else { 96 * 1024 };
            assert!(s.defines.contains(&("KILN_SMEM".into(), smem.to_string())));
        }
        let unique: std::collections::HashSet<_> = v.iter().map(|s| s.label()).collect();
        assert_eq!(unique.len(), v.len());
    }

    #[test]
    fn the_space_holds_the_default_and_only_what_the_kernel_takes() {
        let h100 = DeviceInfo::h100_sxm();
        let p = problem(4096, 4096, 4096, Layout::RC);
        let space = MmaSync.space(&p, &h100).unwrap();
        let all = space.enumerate();
        assert_eq!(all.len(), 8 * 2 * 5 * 3);
        assert!(all.contains(&TileConfig::DEFAULT.to_config()));
        assert!(all.contains(&TileConfig::NARROW.to_config()));
        for c in &all {
            let t = TileConfig::from_config(c).unwrap();
            assert_eq!(t.to_config(), *c);
            assert!(MmaSync.spec_for("sm_90a", &p, c).is_some());
        }
        let big = Config::new(&[
            ("BM", 256),
            ("BN", 256),
            ("BK", 32),
            ("STAGES", 2),
            ("GROUP_M", 8),
        ]);
        assert!(TileConfig::from_config(&big)
            .unwrap_err()
            .contains("accumulators"));
        let odd = Config::new(&[
            ("BM", 96),
            ("BN", 128),
            ("BK", 32),
            ("STAGES", 2),
            ("GROUP_M", 8),
        ]);
        assert!(TileConfig::from_config(&odd).is_err());
    }

    #[test]
    fn the_specs_follow_a_tuned_tile_and_no_table_gives_the_heuristics() {
        let h100 = DeviceInfo::h100_sxm();
        let p = problem(4096, 4096, 4096, Layout::RC);
        let none = TunedTable::empty();
        let defines = |t: &TunedTable| {
            let specs = MmaSync.specs_for(&p, &h100, t);
            assert_eq!(specs.len(), 1);
            specs[0].defines.clone()
        };
        let has = |d: &[(String, String)], k: &str, v: u32| d.contains(&(k.into(), v.to_string()));
        let heuristic = TileConfig::heuristic(&p, &h100);
        assert!(has(&defines(&none), "KILN_BN", heuristic.bn));
        let tuned = TileConfig {
            bm: 64,
            bn: 128,
            bk: 64,
            stages: 3,
            group_m: 4,
        };
        assert_ne!(tuned, heuristic);
        let mut table = TunedTable::empty();
        table.insert(
            crate::ops::tuned::TuneKey::new(&h100, "gemm", "mma_sync", &p),
            tuned.to_config(),
            None,
        );
        let d = defines(&table);
        for (k, v) in [
            ("KILN_BM", 64),
            ("KILN_BN", 128),
            ("KILN_BK", 64),
            ("KILN_STAGES", 3),
        ] {
            assert!(has(&d, k, v), "{k}={v}: {d:?}");
        }
        // another GPU model's entry is not this one's
        let h200 = DeviceInfo {
            name: "NVIDIA H200".into(),
            ..h100.clone()
        };
        let specs = MmaSync.specs_for(&p, &h200, &table);
        assert!(has(&specs[0].defines, "KILN_BN", heuristic.bn));
    }

    #[test]
    fn heuristic_keeps_the_default_unless_waves_leave_sms_idle() {
        let h100 = DeviceInfo::h100_sxm();
        // 4096^2: 512 tiles of 128x256 = 3.9 waves on 132 SMs; 128x128 would take 8.
        assert_eq!(
            TileConfig::heuristic(&problem(4096, 4096, 4096, Layout::RC), &h100),
            TileConfig::DEFAULT
        );
        assert_eq!(
            TileConfig::heuristic(&problem(8192, 8192, 8192, Layout::RC), &h100),
            TileConfig::DEFAULT
        );
        // 1024^2: 32 tiles of 128x256 fill a quarter of the SMs; 64 tiles of 128x128 do better.
        assert_eq!(
            TileConfig::heuristic(&problem(1024, 1024, 1024, Layout::RC), &h100),
            TileConfig::NARROW
        );
    }

    /// Every tile shape of the space compiles for sm_90a without spills or a stack frame (the
    /// guard rejects only shared memory over the limit, per stage count).
    #[test]
    fn every_tile_shape_of_the_space_compiles_without_spills() {
        if !crate::jit::testing::nvrtc_here() {
            return;
        }
        let jit = crate::jit::Jit::default();
        for (bm, bn) in [
            (64, 64),
            (64, 128),
            (64, 256),
            (128, 64),
            (128, 128),
            (128, 256),
            (256, 64),
            (256, 128),
        ] {
            for (bk, layout) in [(32, Layout::RC), (64, Layout::CR)] {
                let t = TileConfig {
                    bm,
                    bn,
                    bk,
                    stages: 3,
                    group_m: 8,
                };
                let p = GemmProblem::new(1, 1, 1, layout, DType::Bf16, DType::Bf16);
                let c = jit
                    .compile(&t.spec_with("sm_90a", &p, false))
                    .unwrap_or_else(|e| panic!("{t:?}: {e}"));
                assert!(
                    !c.resources.spills() && c.resources.stack_frame == 0,
                    "{t:?}: {}",
                    c.log
                );
            }
        }
    }

    /// The sm_80/sm_89 path: the same source must build for Ampere and Ada without spills or
    /// local memory (`kiln check` covers sm_90a).
    #[test]
    fn compiles_for_sm80_and_sm89_without_spills() {
        for (arch, layout) in [("sm_80", Layout::CR), ("sm_89", Layout::RC)] {
            let p = GemmProblem::new(1, 1, 1, layout, DType::F16, DType::F32);
            let spec = TileConfig::DEFAULT.spec_with(arch, &p, false);
            let c = crate::jit::Jit::without_cache()
                .compile(&spec)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(!c.cubin.is_empty(), "{arch}");
            assert!(c.resources.registers > 0, "{arch}: {}", c.log);
            assert!(!c.resources.spills(), "{arch}: {}", c.log);
            assert_eq!(c.resources.stack_frame, 0, "{arch}: {}", c.log);
        }
    }
}
