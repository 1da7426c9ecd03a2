//! fa3_wgmma's [`Config`]: the fields that specialise the kernel, the checks its static_asserts
//! make (said before compiling), the `KILN_FA3_D<d>` override syntax and the sizes it implies.

use crate::jit::KernelSpec;
use crate::ops::attention::{AttentionProblem, HEAD_DIMS};
use crate::ops::gemm::DType;

const THREADS_PER_WG: u32 = 128;
/// The key-tile widths this version accepts and was verified at (the wrappers of
/// `kernels/common/wgmma_ss.cuh` cover every multiple of 16 up to 256; a new width here needs a
/// verify run, not a new header).
pub(super) const KEY_TILES: [u32; 6] = [64, 80, 96, 128, 176, 192];
/// Lazy-rescale threshold where it is used (log2 units), and the largest accepted: P up to 2^16
/// still sums exactly enough in fp32 and stays far inside f16's range.
pub(super) const LAZY: u32 = 8;
const LAZY_MAX: u32 = 16;
/// 8-column groups in the narrowest key tile: the longest `emu` period that still emulates some.
const NT_MIN: u32 = 8;
/// Shared memory a block may opt in to on sm_90 (227 KB: H100, H200, GH200).
const SM90_SMEM_OPTIN: u32 = 232_448;

/// One specialisation of the kernel: head dim, key tile, consumer warpgroups (64 query rows
/// each), K+V ring depth, and the two FA3 schedules (intra-warpgroup overlap, ping-pong).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    pub d: u32,
    pub bn: u32,
    pub cwg: u32,
    pub stages: u32,
    pub overlap: bool,
    pub pingpong: bool,
    /// One block per SM walking the work items (every gridDim.x-th), else one block per item:
    /// 0 never, 1 for non-causal problems only (causal ones keep the hardware's dynamic block
    /// order, which balances their uneven rows), 2 always.
    pub persist: u32,
    /// One block per SM taking work items from a global counter as it frees up (persistent and
    /// balanced; overrides `persist` where it applies): 0 never, 1 for causal problems only, 2
    /// always.
    pub dynamic: u32,
    /// 0, or P: every P-th 8-column group of scores is exponentiated by a polynomial on the FMA
    /// pipe instead of the MUFU unit.
    pub emu: u32,
    /// 0 (rescale O whenever a row's max grows), or T: keep a row's max until a key tile's
    /// exceeds it by more than T (log2 units), so most tiles skip the rescale of O (P <= 2^T).
    pub lazy: u32,
    /// Causal problems: (batch, head) pairs per group of the work-item order, whose blocks run
    /// heaviest first across the group (1: one head's blocks after another's). Non-causal items
    /// are all alike and keep 1.
    pub order: u32,
    /// Q buffers wanted, 1 or 2 (see [`Config::q_buffers`]): with two, the producer loads a
    /// block's next Q while its consumers still read the current one.
    pub qbuf: u32,
}

impl Config {
    /// This configuration with `key=value` overrides applied and checked: a comma list of `bn=`,
    /// `cwg=`, `stages=`, `emu=`, `persist=`, `dynamic=`, `lazy=`, `order=`, `qbuf=` (numbers) and
    /// `overlap=`, `pingpong=` (0 or 1), e.g. `pingpong=1,persist=1` (the measurement override
    /// `KILN_FA3_D<d>`, [`crate::overrides::AttentionOverrides`]); anything else is an error
    /// naming it.
    pub fn with(mut self, overrides: &str) -> std::result::Result<Config, String> {
        for kv in overrides.split(',').filter(|s| !s.trim().is_empty()) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("`{kv}` is not key=value"))?;
            let (k, v) = (k.trim(), v.trim());
            let num = || {
                v.parse::<u32>()
                    .map_err(|_| format!("{k}={v} is not a number"))
            };
            let flag = || match v {
                "0" => Ok(false),
                "1" => Ok(true),
                _ => Err(format!("{k}={v}: use 0 or 1")),
            };
            match k {
                "bn" => self.bn = num()?,
                "cwg" => self.cwg = num()?,
                "stages" => self.stages = num()?,
                "overlap" => self.overlap = flag()?,
                "pingpong" => self.pingpong = flag()?,
                "persist" => self.persist = num()?,
                "dynamic" => self.dynamic = num()?,
                "emu" => self.emu = num()?,
                "lazy" => self.lazy = num()?,
                "order" => self.order = num()?,
                "qbuf" => self.qbuf = num()?,
                _ => {
                    return Err(format!(
                        "unknown key `{k}` (bn, cwg, stages, overlap, pingpong, persist, dynamic, emu, lazy, order, qbuf)"
                    ))
                }
            }
        }
        self.check()?;
        Ok(self)
    }

    /// Whether the kernel can be specialised this way (the device-side static_asserts, said
    /// before compiling).
    pub fn check(&self) -> std::result::Result<(), String> {
        if !HEAD_DIMS.contains(&(self.d as usize)) {
            return Err(format!("head dim {} (use 64, 128 or 256)", self.d));
        }
        if !KEY_TILES.contains(&self.bn) {
            return Err(format!("key tile {} (use one of {KEY_TILES:?})", self.bn));
        }
        if !(2..=3).contains(&self.cwg) {
            return Err(format!("{} consumer warpgroups (use 2 or 3)", self.cwg));
        }
        if self.persist > 2 {
            return Err(format!(
                "persist {} (0 never, 1 non-causal only, 2 always)",
                self.persist
            ));
        }
        if self.emu == 1 || self.emu > NT_MIN {
            return Err(format!(
                "emu {} (0 = off, else the period 2..={NT_MIN} of emulated column groups)",
                self.emu
            ));
        }
        if self.lazy > LAZY_MAX {
            return Err(format!(
                "lazy {} (0 = off, else the threshold 1..={LAZY_MAX} in log2 units: P stays below 2^threshold)",
                self.lazy
            ));
        }
        if self.dynamic > 2 {
            return Err(format!(
                "dynamic {} (0 never, 1 causal only, 2 always)",
                self.dynamic
            ));
        }
        if self.order == 0 {
            return Err("order 0 (heads per group of the causal item order: 1 or more)".into());
        }
        if !(1..=2).contains(&self.qbuf) {
            return Err(format!("qbuf {} (1 or 2 Q buffers)", self.qbuf));
        }
        if !(1..=8).contains(&self.stages) {
            return Err(format!("{} stages (use 1 to 8)", self.stages));
        }
        Ok(())
    }

    /// Whether blocks take `p`'s work items from the global counter.
    pub fn dynamic_for(&self, p: &AttentionProblem) -> bool {
        self.dynamic == 2 || (self.dynamic == 1 && p.causal)
    }

    /// Whether `p` runs on a persistent grid (one block per SM): `persist` or the work counter.
    pub fn persistent_for(&self, p: &AttentionProblem) -> bool {
        self.persist == 2 || (self.persist == 1 && !p.causal) || self.dynamic_for(p)
    }

    /// Query rows per block: 64 per consumer warpgroup.
    pub fn bm(&self) -> u32 {
        64 * self.cwg
    }

    pub fn threads(&self) -> u32 {
        THREADS_PER_WG * (self.cwg + 1)
    }

    /// Dynamic shared memory: 1 KB of alignment slack, the Q tiles, the ring of K+V stages,
    /// barriers (Q full and empty per Q buffer, then full K, full V, empty K and empty V per
    /// stage) and 16 bytes for the published work items and the parts flag.
    pub fn smem_bytes(&self) -> u32 {
        self.smem_with(self.q_buffers())
    }

    pub(super) fn smem_with(&self, qbuf: u32) -> u32 {
        let boxes = self.d / 64; // 64-dim boxes of 128-byte rows
        1024 + qbuf * boxes * self.bm() * 128
            + self.stages * 2 * boxes * self.bn * 128
            + (2 * qbuf + 4 * self.stages) * 8
            + 16
    }

    /// The Q buffers the kernel gets: `qbuf`, but one where a second would not fit in the
    /// shared memory a Hopper block may opt in to (d256, whose Q alone is 64 KB; rings of
    /// three or more stages at d128).
    pub fn q_buffers(&self) -> u32 {
        if self.qbuf >= 2 && self.smem_with(2) <= SM90_SMEM_OPTIN {
            2
        } else {
            1
        }
    }

    /// The work items (query block, head, batch) and the blocks launched to walk them.
    pub fn grid(&self, p: &AttentionProblem, sms: u32) -> (u64, u32) {
        let items = p.seqlen_q.div_ceil(self.bm() as usize) as u64 * (p.heads_q * p.batch) as u64;
        let blocks = if self.persistent_for(p) {
            items.min(sms.max(1) as u64)
        } else {
            items
        };
        (items, blocks as u32)
    }

    /// The kernel specialised for this configuration, taking items from the counter or not.
    pub(super) fn spec(&self, arch: &str, dtype: DType, dynamic: bool) -> KernelSpec {
        self.spec_masked(arch, dtype, dynamic, Masking::DENSE)
    }

    /// [`Config::spec`] for packed sequences and/or the sliding window.
    pub(super) fn spec_masked(
        &self,
        arch: &str,
        dtype: DType,
        dynamic: bool,
        m: Masking,
    ) -> KernelSpec {
        KernelSpec::new("attention/fa3_wgmma.cu", "attn_fa3_wgmma", arch)
            .define("KILN_IN", dtype.code())
            .define("KILN_D", self.d)
            .define("KILN_BN", self.bn)
            .define("KILN_CWG", self.cwg)
            .define("KILN_STAGES", self.stages)
            .define("KILN_OVERLAP", self.overlap as u32)
            .define("KILN_PINGPONG", self.pingpong as u32)
            .define("KILN_EMU", self.emu)
            .define("KILN_LAZY", self.lazy)
            .define("KILN_DYNAMIC", dynamic as u32)
            .define("KILN_QBUF", self.q_buffers())
            .define("KILN_SMEM", self.smem_bytes())
            .define("KILN_VARLEN", m.varlen as u32)
            .define("KILN_WINDOW", m.window as u32)
    }
}

/// The kernel's compile-time masking variants: packed sequences (`KILN_VARLEN`), the sliding
/// window (`KILN_WINDOW`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Masking {
    pub varlen: bool,
    pub window: bool,
}

impl Masking {
    pub const DENSE: Masking = Masking {
        varlen: false,
        window: false,
    };
    /// The three variants besides the dense one (`kiln check` compiles each).
    pub const OTHERS: [Masking; 3] = [
        Masking {
            varlen: true,
            window: false,
        },
        Masking {
            varlen: false,
            window: true,
        },
        Masking {
            varlen: true,
            window: true,
        },
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_grids_and_overrides_follow_the_config() {
        let p = AttentionProblem {
            heads_kv: 2,
            ..AttentionProblem::new(3, 8, 100, 128)
        };
        // d256: Q alone is 64 KB, so one Q buffer; d128 and d64 fit a second.
        assert_eq!(Config::default_for(256).q_buffers(), 1);
        assert_eq!(
            Config::default_for(256).smem_bytes(),
            1024 + 65536 + 2 * 81920 + (2 + 8) * 8 + 16
        );
        assert_eq!(Config::default_for(128).q_buffers(), 2);
        assert_eq!(
            Config::default_for(128).smem_bytes(),
            1024 + 2 * 49152 + 2 * 65536 + (4 + 8) * 8 + 16
        );
        assert_eq!(Config::default_for(64).q_buffers(), 2);
        // d128 in 128x128 blocks (two consumers), one block per item.
        let c = Config {
            cwg: 2,
            stages: 3,
            overlap: true,
            persist: 0,
            dynamic: 0,
            lazy: 0,
            ..Config::default_for(128)
        };
        let big = AttentionProblem::new(4, 16, 4096, 128);
        assert_eq!(c.grid(&big, 132), (32 * 64, 32 * 64));
        let pc = Config { persist: 2, ..c };
        assert_eq!(pc.grid(&big, 132), (2048, 132));
        assert_eq!(pc.grid(&p, 132), (8 * 3, 24));
        assert_eq!(c.with("pingpong=1, stages=2").unwrap().stages, 2);
        assert!(c.with("bn=100").unwrap_err().contains("key tile 100"));
        assert!(c.with("pp=1").unwrap_err().contains("unknown key `pp`"));
        assert!(c.with("persist=3").unwrap_err().contains("0 never"));
        let dc = c.with("dynamic=1").unwrap();
        assert!(!dc.dynamic_for(&big));
        assert_eq!(dc.grid(&big, 132), (2048, 2048));
        assert!(Config::default_for(256).with("dynamic=2").is_ok());
        assert!(c.with("pingpong=2").unwrap_err().contains("use 0 or 1"));
        let nc = Config { persist: 1, ..c };
        let causal = AttentionProblem {
            causal: true,
            ..big
        };
        assert_eq!(nc.grid(&big, 132).1, 132);
        assert_eq!(nc.grid(&causal, 132).1, 2048);
        let d128 = Config::default_for(128);
        assert!(d128.dynamic_for(&causal) && d128.dynamic_for(&big));
        assert_eq!(d128.grid(&causal, 132).1, 132);
    }
}
