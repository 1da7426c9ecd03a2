//! Prepacked 4-bit weights on disk: a fixed header (magic, version, shape, format) then the
//! epilogue factors and the atoms, so a model can be prepacked once and loaded as is.

use std::path::Path;

use super::{Fp4Format, Fp4Prepacked};
use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"KILNFP4P";
const VERSION: u32 = 1;
const HEADER: usize = 8 + 4 * 4 + 3 * 8;

impl Fp4Prepacked {
    /// The file's bytes: header, epilogue factors (f32 LE), atoms.
    pub fn to_file_bytes(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(HEADER + 4 * self.escale.len() + self.bytes.len());
        v.extend_from_slice(MAGIC);
        for x in [
            VERSION,
            self.format.code(),
            self.swiglu as u32,
            self.min_scale_byte as u32,
        ] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        for x in [self.experts, self.n, self.k] {
            v.extend_from_slice(&(x as u64).to_le_bytes());
        }
        for s in &self.escale {
            v.extend_from_slice(&s.to_le_bytes());
        }
        v.extend_from_slice(&self.bytes);
        v
    }

    /// Reads what [`Fp4Prepacked::to_file_bytes`] wrote; anything else is refused.
    pub fn from_file_bytes(b: &[u8]) -> Result<Fp4Prepacked> {
        if b.len() < HEADER || &b[..8] != MAGIC {
            return Err(Error::invalid(
                "not a prepacked 4-bit weight file (no KILNFP4P header): prepack the standard \
                 layout first (`kiln moe prepack`)",
            ));
        }
        let u32_at = |o: usize| u32::from_le_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a) as usize
        };
        if u32_at(8) != VERSION {
            return Err(Error::invalid(format!(
                "prepacked weight file version {} is not {VERSION}: prepack the weights again",
                u32_at(8)
            )));
        }
        let format = match u32_at(12) {
            0 => Fp4Format::Nvfp4,
            1 => Fp4Format::Mxfp4,
            c => {
                return Err(Error::invalid(format!(
                    "prepacked weight file names format {c}, not 0 (nvfp4) or 1 (mxfp4)"
                )))
            }
        };
        let mut p = Fp4Prepacked {
            format,
            experts: u64_at(24),
            n: u64_at(32),
            k: u64_at(40),
            swiglu: u32_at(16) != 0,
            bytes: Vec::new(),
            escale: Vec::new(),
            min_scale_byte: u32_at(20).min(255) as u8,
        };
        let factors = p.experts.checked_mul(p.halves());
        let atoms = p.experts.checked_mul(p.expert_bytes());
        let want = factors.zip(atoms).map(|(f, a)| HEADER + 4 * f + a);
        if want != Some(b.len()) {
            return Err(Error::invalid(format!(
                "the prepacked weight file holds {} bytes but its header (E {}, N {}, K {}) needs {}: \
                 the file is truncated or corrupt",
                b.len(),
                p.experts,
                p.n,
                p.k,
                want.map_or("more than memory".into(), |w| w.to_string())
            )));
        }
        let f = factors.unwrap_or(0);
        p.escale = b[HEADER..HEADER + 4 * f]
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        p.bytes = b[HEADER + 4 * f..].to_vec();
        Ok(p)
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        std::fs::write(path, self.to_file_bytes()).map_err(|source| Error::Io {
            what: "writing the prepacked weights",
            path: path.into(),
            source,
        })
    }

    pub fn read(path: &Path) -> Result<Fp4Prepacked> {
        let b = std::fs::read(path).map_err(|source| Error::Io {
            what: "reading the prepacked weights",
            path: path.into(),
            source,
        })?;
        Self::from_file_bytes(&b)
    }
}
