//! Host side of `kernels/attention/fa2_mma_sync.cu`: the fused FlashAttention-2-style forward on
//! mma.sync tensor cores, online softmax in fp32 with exp2, cp.async K/V pipeline, causal tile
//! skipping. Specialised per head dim and dtype; runs on sm_80 and newer. The tile is the
//! tuned cache's for the problem's class if there is one, else [`Fa2Tile::for_dim`].

use super::{AttentionKernel, AttentionOperands, AttentionProblem, AttnArgs, DTYPES, HEAD_DIMS};
use crate::device::{Context, DeviceInfo, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::{alignment, DType};
use crate::ops::space::{Config as TuneConfig, ParamSpace};
use crate::ops::tuned::TunedTable;

pub struct Fa2MmaSync;

/// The tile a head dim is specialised with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fa2Tile {
    pub d: u32,
    /// Query rows per block (16 per warp).
    pub bm: u32,
    /// Keys per tile.
    pub bn: u32,
}

impl Fa2Tile {
    /// d 64 and 128: 128 query rows (8 warps) with Q kept in registers; d 256: 64 rows (4 warps),
    /// Q re-read from shared memory, so that the 16x256 fp32 O accumulators fit without spills.
    pub fn for_dim(d: usize) -> Fa2Tile {
        match d {
            256 => Fa2Tile {
                d: 256,
                bm: 64,
                bn: 64,
            },
            128 => Fa2Tile {
                d: 128,
                bm: 128,
                bn: 64,
            },
            _ => Fa2Tile {
                d: 64,
                bm: 128,
                bn: 64,
            },
        }
    }
    pub fn threads(&self) -> u32 {
        self.bm / 16 * 32
    }
    /// One Q tile and one K and one V tile of 16-bit elements.
    pub fn smem_bytes(&self) -> u32 {
        (self.bm + 2 * self.bn) * self.d * 2
    }
    /// The tuner's config (see [`space`]) as a tile for head dim `d`.
    pub fn from_tune(d: u32, c: &TuneConfig) -> std::result::Result<Fa2Tile, String> {
        let t = Fa2Tile {
            d,
            bm: c.require("BM")? as u32,
            bn: c.require("BN")? as u32,
        };
        if !TUNE_BM.contains(&(t.bm as i64)) || !TUNE_BN.contains(&(t.bn as i64)) {
            return Err(format!(
                "tile {}x{} (BM one of {TUNE_BM:?}, BN one of {TUNE_BN:?})",
                t.bm, t.bn
            ));
        }
        Ok(t)
    }
    pub fn to_tune(&self) -> TuneConfig {
        TuneConfig::new(&[("BM", self.bm as i64), ("BN", self.bn as i64)])
    }
    /// The tile a launch of `p` on `dev` uses: `tuned`'s (when it fits), else the default.
    pub fn resolve(p: &AttentionProblem, dev: &DeviceInfo, tuned: &TunedTable) -> Fa2Tile {
        let d = p.head_dim as u32;
        tuned
            .attention(dev, "fa2_mma_sync", p)
            .and_then(|c| Fa2Tile::from_tune(d, &c).ok())
            .filter(|t| t.smem_bytes() <= dev.smem_optin_bytes)
            .unwrap_or_else(|| Fa2Tile::for_dim(p.head_dim))
    }
    pub fn spec(&self, arch: &str, dtype: DType) -> KernelSpec {
        KernelSpec::new("attention/fa2_mma_sync.cu", "attn_fa2_mma_sync", arch)
            .define("KILN_IN", dtype.code())
            .define("KILN_D", self.d)
            .define("KILN_BM", self.bm)
            .define("KILN_BN", self.bn)
            .define("KILN_SMEM", self.smem_bytes())
    }
}

/// Query rows per block the tuner tries (16 per warp; the kernel needs multiples of 16).
const TUNE_BM: [i64; 2] = [64, 128];
/// Keys per tile the tuner tries (compiled without spills at every head dim:
/// results/2026-11-22-h200/tune/fa2-candidates-cpu.txt).
const TUNE_BN: [i64; 3] = [32, 64, 128];

/// The tuner's space: BM x BN, the Q tile and one K and one V tile within the device's shared
/// memory. Six points: exhaustive search is the only sensible one.
pub fn space(p: &AttentionProblem, dev: &DeviceInfo) -> ParamSpace {
    let d = p.head_dim as u32;
    let limit = dev.smem_optin_bytes;
    ParamSpace::new()
        .param("BM", &TUNE_BM)
        .param("BN", &TUNE_BN)
        .rule(
            &format!("Q + K + V tiles within the {limit} B of shared memory a block may opt in to"),
            move |c| Fa2Tile::from_tune(d, c).is_ok_and(|t| t.smem_bytes() <= limit),
        )
}

impl AttentionKernel for Fa2MmaSync {
    fn name(&self) -> &'static str {
        "fa2_mma_sync"
    }
    fn summary(&self) -> &'static str {
        "fused FA2: mma.sync m16n8k16 + ldmatrix, cp.async K/V pipeline, online exp2 softmax, causal tile skipping"
    }
    fn rung(&self) -> u32 {
        1
    }
    fn supports(&self, p: &AttentionProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        if dev.compute_capability < (8, 0) {
            let (maj, min) = dev.compute_capability;
            return Err(format!("needs compute capability 8.0 or newer for mma.sync and cp.async; this GPU is {maj}.{min}"));
        }
        if !DTYPES.contains(&p.dtype) {
            return Err(format!(
                "dtype {} is not supported; use bf16 or f16",
                p.dtype
            ));
        }
        if !HEAD_DIMS.contains(&p.head_dim) {
            return Err(format!(
                "head_dim {} is not supported; use 64, 128 or 256",
                p.head_dim
            ));
        }
        if p.window != super::Window::UNBOUNDED {
            return Err("has no sliding window; fa3_wgmma (Hopper) has one".into());
        }
        // (the default tile: a tuned one is used only where it fits too)
        let t = Fa2Tile::resolve(p, dev, &TunedTable::empty());
        dev.check_smem(t.smem_bytes())?;
        if p.batch > 65535 || p.heads_q > 65535 {
            return Err("batch and heads must each be at most 65535 (grid z and y)".into());
        }
        Ok(())
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        let mut v = Vec::new();
        for d in HEAD_DIMS {
            for dt in DTYPES {
                v.push(Fa2Tile::for_dim(d).spec(arch, dt));
            }
        }
        v
    }
    fn launch(&self, ctx: &Context, p: &AttentionProblem, ops: &AttentionOperands) -> Result<()> {
        self.launch_tile(ctx, p, ops, Fa2Tile::resolve(p, &ctx.info, &ctx.tuned))
    }
    fn space(&self, p: &AttentionProblem, dev: &DeviceInfo) -> Option<ParamSpace> {
        HEAD_DIMS.contains(&p.head_dim).then(|| space(p, dev))
    }
    fn baseline(&self, p: &AttentionProblem, _dev: &DeviceInfo) -> Option<TuneConfig> {
        HEAD_DIMS
            .contains(&p.head_dim)
            .then(|| Fa2Tile::for_dim(p.head_dim).to_tune())
    }
    fn spec_for(&self, arch: &str, p: &AttentionProblem, cfg: &TuneConfig) -> Option<KernelSpec> {
        Fa2Tile::from_tune(p.head_dim as u32, cfg)
            .ok()
            .map(|t| t.spec(arch, p.dtype))
    }
    fn launch_with(
        &self,
        ctx: &Context,
        p: &AttentionProblem,
        ops: &AttentionOperands,
        cfg: &TuneConfig,
    ) -> Result<()> {
        let t =
            Fa2Tile::from_tune(p.head_dim as u32, cfg).map_err(|reason| Error::Unsupported {
                kernel: self.name().into(),
                reason,
            })?;
        ctx.info
            .check_smem(t.smem_bytes())
            .map_err(|reason| Error::Unsupported {
                kernel: self.name().into(),
                reason,
            })?;
        self.launch_tile(ctx, p, ops, t)
    }
}

impl Fa2MmaSync {
    fn launch_tile(
        &self,
        ctx: &Context,
        p: &AttentionProblem,
        ops: &AttentionOperands,
        t: Fa2Tile,
    ) -> Result<()> {
        for (name, ptr) in [
            ("Q", ops.q.ptr()),
            ("K", ops.k.ptr()),
            ("V", ops.v.ptr()),
            ("O", ops.o.ptr()),
        ] {
            if alignment(ptr) < 16 {
                return Err(Error::Unsupported {
                    kernel: self.name().into(),
                    reason: format!("{name} starts at {ptr:#x}, which is not 16-byte aligned"),
                });
            }
        }
        let f = ctx.function(&t.spec(&ctx.arch(), p.dtype))?;
        let mut args = AttnArgs::new(p, ops);
        let blocks_m = (p.seqlen_q as u32).div_ceil(t.bm);
        let cfg = LaunchConfig {
            smem_bytes: t.smem_bytes(),
            ..LaunchConfig::simple((blocks_m, p.heads_q as u32, p.batch as u32), t.threads())
        };
        // SAFETY: one parameter, an AttnArgs, whose buffers the caller keeps alive and checked
        // against `p`; every base is 16-byte aligned (above) and packed rows of 64, 128 or 256
        // 16-bit elements keep every row 16-byte aligned.
        unsafe { f.launch(ctx.stream, &cfg, &mut [args.as_param()]) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::tuned::TuneKey;

    #[test]
    fn a_tuned_tile_is_launched_where_it_fits_and_no_table_gives_the_default() {
        let h100 = DeviceInfo::h100_sxm();
        let p = AttentionProblem::new(2, 16, 2048, 128);
        let default = Fa2Tile::for_dim(128);
        assert_eq!(Fa2Tile::resolve(&p, &h100, &TunedTable::empty()), default);
        let tile = |bm, bn| Fa2Tile { d: 128, bm, bn };
        let mut table = TunedTable::empty();
        let key = TuneKey::attention(&h100, "fa2_mma_sync", &p);
        table.insert(key.clone(), tile(64, 32).to_tune(), None);
        assert_eq!(Fa2Tile::resolve(&p, &h100, &table), tile(64, 32));
        // a tuned tile past the GPU's shared memory gives way to the default
        let big = tile(128, 128);
        assert!(big.smem_bytes() > default.smem_bytes());
        table.insert(key, big.to_tune(), None);
        let small_smem = DeviceInfo {
            smem_optin_bytes: default.smem_bytes(),
            ..h100.clone()
        };
        assert_eq!(Fa2Tile::resolve(&p, &small_smem, &table), default);
        assert_eq!(Fa2Tile::resolve(&p, &h100, &table), big);
    }

    #[test]
    fn tiles_fit_in_shared_memory_and_variants_are_distinct() {
        for d in HEAD_DIMS {
            let t = Fa2Tile::for_dim(d);
            assert_eq!(t.d as usize, d);
            assert!(
                t.smem_bytes() <= 99 * 1024,
                "d{d} must also fit sm_86/sm_89"
            );
        }
        let v = Fa2MmaSync.variants("sm_90a");
        assert_eq!(v.len(), 6);
        let unique: std::collections::HashSet<_> = v.iter().map(|s| s.label()).collect();
        assert_eq!(unique.len(), 6);
    }

    #[test]
    fn supports_needs_sm80() {
        let h100 = DeviceInfo::h100_sxm();
        let p = AttentionProblem::new(1, 2, 129, 128);
        assert!(Fa2MmaSync.supports(&p, &h100).is_ok());
        let turing = DeviceInfo {
            compute_capability: (7, 5),
            ..h100
        };
        assert!(Fa2MmaSync
            .supports(&p, &turing)
            .unwrap_err()
            .contains("8.0"));
    }

    /// The sm_80/sm_89 path: the same source must build for Ampere and Ada without spills
    /// (`kiln check` covers sm_90a).
    #[test]
    fn compiles_for_sm80_and_sm89_without_spills() {
        for (arch, d, dt) in [("sm_80", 128, DType::Bf16), ("sm_89", 256, DType::F16)] {
            let spec = Fa2Tile::for_dim(d).spec(arch, dt);
            let c = crate::jit::Jit::without_cache()
                .compile(&spec)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(!c.resources.spills(), "{arch}: {}", c.log);
            assert_eq!(c.resources.stack_frame, 0, "{arch}: {}", c.log);
        }
    }

    #[test]
    fn the_tuning_space_is_the_tiles_that_fit_and_holds_the_default() {
        let h100 = DeviceInfo::h100_sxm();
        for d in HEAD_DIMS {
            let p = AttentionProblem::new(2, 8, 1024, d);
            let s = Fa2MmaSync.space(&p, &h100).unwrap();
            // every tile fits the H100's 227 KB (d256 128x128: 192 KB)
            assert_eq!(s.enumerate().len(), 6, "d{d}");
            let b = Fa2MmaSync.baseline(&p, &h100).unwrap();
            assert!(s.is_valid(&b));
            assert_eq!(
                Fa2Tile::from_tune(d as u32, &b).unwrap(),
                Fa2Tile::for_dim(d)
            );
        }
        // a 99 KB part (sm_86/89) keeps only the tiles that fit
        let small = DeviceInfo {
            smem_optin_bytes: 99 * 1024,
            ..h100
        };
        let s = space(&AttentionProblem::new(1, 1, 64, 256), &small);
        assert!(s.enumerate().len() < 6);
        let big = Fa2Tile {
            d: 256,
            bm: 128,
            bn: 128,
        };
        assert!(s.violations(&big.to_tune())[0].contains("shared memory"));
        assert!(
            Fa2Tile::from_tune(128, &TuneConfig::new(&[("BM", 96), ("BN", 64)]))
                .unwrap_err()
                .contains("96x64")
        );
    }
}
