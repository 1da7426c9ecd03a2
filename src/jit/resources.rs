//! Resource use of a compiled kernel, read from the ptxas report NVRTC leaves in its log.

use serde::{Deserialize, Serialize};

/// What one kernel costs the SM, as ptxas reported it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resources {
    pub registers: u32,
    pub static_smem: u32,
    pub stack_frame: u32,
    pub spill_stores: u32,
    pub spill_loads: u32,
    /// Serialisation notes (C7510-C7517: wgmma pipeline broken) and ignored setmaxnreg (C7507/8).
    pub warnings: Vec<String>,
}

impl Resources {
    pub fn spills(&self) -> bool {
        self.spill_stores > 0 || self.spill_loads > 0
    }

    /// Whether the log holds ptxas's report for `entry` (its "Used N registers" line). NVRTC
    /// 12.9+ keeps a cache of its own across processes: a program it has seen answers from there
    /// without running ptxas, so the log has no report (seen on the GPU host: 216 of 378 variants
    /// came back with "0 registers" once an earlier process had compiled them).
    pub fn reported(log: &str, entry: &str) -> bool {
        let mut in_entry = false;
        for line in log.lines() {
            if line.contains("Compiling entry function") || line.contains("Function properties for")
            {
                in_entry =
                    line.contains(&format!("'{entry}'")) || line.contains(&format!(" {entry}"));
            }
            if in_entry && number_after(line, "Used ", " registers").is_some() {
                return true;
            }
        }
        false
    }

    /// Parses the log's lines for `entry` (the ptxas report lists every function compiled).
    pub fn parse(log: &str, entry: &str) -> Resources {
        let mut r = Resources::default();
        let mut in_entry = false;
        for line in log.lines() {
            if line.contains("Compiling entry function") || line.contains("Function properties for")
            {
                in_entry =
                    line.contains(&format!("'{entry}'")) || line.contains(&format!(" {entry}"));
            }
            if line.contains("C751") || line.contains("C7507") || line.contains("C7508") {
                r.warnings.push(line.trim().to_string());
            }
            if !in_entry {
                continue;
            }
            if let Some(n) = number_before(line, "bytes stack frame") {
                r.stack_frame = n;
            }
            if let Some(n) = number_before(line, "bytes spill stores") {
                r.spill_stores = n;
            }
            if let Some(n) = number_before(line, "bytes spill loads") {
                r.spill_loads = n;
            }
            if let Some(n) = number_after(line, "Used ", " registers") {
                r.registers = n;
            }
            if let Some(n) = number_before(line, "bytes smem") {
                r.static_smem = n;
            }
        }
        r
    }
}

fn number_before(line: &str, marker: &str) -> Option<u32> {
    let idx = line.find(marker)?;
    line[..idx]
        .split(|c: char| !c.is_ascii_digit())
        .rfind(|s| !s.is_empty())?
        .parse()
        .ok()
}

fn number_after(line: &str, prefix: &str, suffix: &str) -> Option<u32> {
    let start = line.find(prefix)? + prefix.len();
    let end = line[start..].find(suffix)? + start;
    line[start..end].trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOG: &str = "ptxas info    : 0 bytes gmem\n\
ptxas info    : Compiling entry function 'other' for 'sm_90a'\n\
ptxas info    : Used 40 registers, used 1 barriers, 128 bytes smem\n\
ptxas info    : Compiling entry function 'gemm_kernel' for 'sm_90a'\n\
ptxas info    : Function properties for gemm_kernel\n\
    24 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads\n\
ptxas info    : Used 168 registers, used 1 barriers, 2048 bytes smem, 400 bytes cmem[0]\n\
ptxas warning : (C7510) Potential Performance Loss: wgmma.mma_async instructions are serialized\n";

    #[test]
    fn parses_the_entry_it_is_asked_for() {
        let r = Resources::parse(LOG, "gemm_kernel");
        assert_eq!(r.registers, 168);
        assert_eq!(r.static_smem, 2048);
        assert_eq!(r.stack_frame, 24);
        assert_eq!((r.spill_stores, r.spill_loads), (8, 12));
        assert!(r.spills());
        assert_eq!(r.warnings.len(), 1);
        let o = Resources::parse(LOG, "other");
        assert_eq!((o.registers, o.static_smem, o.spills()), (40, 128, false));
    }

    #[test]
    fn a_log_without_the_entrys_report_is_not_reported() {
        assert!(Resources::reported(LOG, "gemm_kernel"));
        assert!(Resources::reported(LOG, "other"));
        assert!(!Resources::reported(LOG, "missing"));
        assert!(!Resources::reported("", "gemm_kernel"));
    }
}
