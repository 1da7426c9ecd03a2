//! Host side of `kernels/attention/fa2_mma_sync.cu`: the fused FlashAttention-2-style forward on
//! mma.sync tensor cores, online softmax in fp32 with exp2, cp.async K/V pipeline, causal tile
//! skipping. Specialised per head dim and dtype; runs on sm_80 and newer.

use super::{AttentionKernel, AttentionOperands, AttentionProblem, AttnArgs, DTYPES, HEAD_DIMS};
use crate::device::{Context, DeviceInfo, LaunchConfig};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::{alignment, DType};

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
    pub fn spec(&self, arch: &str, dtype: DType) -> KernelSpec {
        KernelSpec::new("attention/fa2_mma_sync.cu", "attn_fa2_mma_sync", arch)
            .define("KILN_IN", dtype.code())
            .define("KILN_D", self.d)
            .define("KILN_BM", self.bm)
            .define("KILN_BN", self.bn)
            .define("KILN_SMEM", self.smem_bytes())
    }
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
        let t = Fa2Tile::for_dim(p.head_dim);
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
        let t = Fa2Tile::for_dim(p.head_dim);
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
}
