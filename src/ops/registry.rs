//! The registry: every op's versions, and the choice of one for a problem (explicit request,
//! then the config file, then the fastest version that supports the problem).

use crate::device::DeviceInfo;
use crate::error::{Error, Result};
use crate::ops::gemm::{self, GemmKernel, GemmProblem};

/// The ops kiln knows.
pub const OPS: &[&str] = &["gemm"];

pub struct Registry {
    gemm: Vec<Box<dyn GemmKernel>>,
}

impl Default for Registry {
    fn default() -> Self {
        let mut gemm: Vec<Box<dyn GemmKernel>> = vec![
            Box::new(gemm::simt_naive::SimtNaive),
            Box::new(gemm::simt_tiled::SimtTiled),
            Box::new(gemm::wgmma_cp_async::WgmmaCpAsync),
            Box::new(gemm::wgmma_tma::WgmmaTma),
            Box::new(gemm::wgmma_tma_ws::WgmmaTmaWs),
            Box::new(gemm::mma_sync::MmaSync),
            Box::new(crate::vendor::cublas::Cublas),
        ];
        gemm.sort_by_key(|k| k.rung());
        Registry { gemm }
    }
}

impl Registry {
    /// GEMM versions, slowest rung first.
    pub fn gemm(&self) -> &[Box<dyn GemmKernel>] {
        &self.gemm
    }

    /// Checks that `op` names a known op.
    pub fn check_op(op: &str) -> Result<()> {
        if OPS.contains(&op) {
            Ok(())
        } else {
            Err(Error::Unknown {
                what: "op",
                name: op.into(),
                known: OPS.join(", "),
            })
        }
    }

    pub fn gemm_version(&self, name: &str) -> Result<&dyn GemmKernel> {
        self.gemm
            .iter()
            .find(|k| k.name() == name)
            .map(|b| b.as_ref())
            .ok_or_else(|| Error::Unknown {
                what: "gemm version",
                name: name.into(),
                known: self
                    .gemm
                    .iter()
                    .map(|k| k.name())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The version to run `p` with: `requested` if given (refusing clearly if it cannot), else the
    /// highest rung of kiln's own versions that supports it.
    pub fn select_gemm(
        &self,
        p: &GemmProblem,
        dev: &DeviceInfo,
        requested: Option<&str>,
    ) -> Result<&dyn GemmKernel> {
        if let Some(name) = requested {
            let k = self.gemm_version(name)?;
            return k
                .supports(p, dev)
                .map(|_| k)
                .map_err(|reason| Error::Unsupported {
                    kernel: name.into(),
                    reason,
                });
        }
        let mut reasons = Vec::new();
        for k in self.gemm.iter().rev().filter(|k| !k.is_vendor()) {
            match k.supports(p, dev) {
                Ok(()) => return Ok(k.as_ref()),
                Err(r) => reasons.push(format!("{}: {r}", k.name())),
            }
        }
        Err(Error::Unsupported {
            kernel: "every gemm version".into(),
            reason: reasons.join("; "),
        })
    }
}
