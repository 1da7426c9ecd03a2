//! The GPU architectures kiln compiles for, and the check that refuses any other before a single
//! kernel is compiled (NVRTC would take `sm_12` and fail once per variant).

use crate::error::{Error, Result};

/// Every target kiln's kernels are written and checked for: the SIMT, `mma.sync` and composed
/// versions on Ampere and Ada (sm_80, sm_86, sm_89), every version on Hopper (sm_90a: wgmma
/// and `setmaxnreg` need the `a` target, so plain sm_90 is not one of them).
pub const TARGETS: &[&str] = &["sm_80", "sm_86", "sm_89", "sm_90a"];

/// The target whose instructions the wgmma, TMA and cluster versions use.
pub const HOPPER: &str = "sm_90a";

/// `Ok` for a target in [`TARGETS`], else an error naming them.
pub fn check(arch: &str) -> Result<()> {
    if TARGETS.contains(&arch) {
        return Ok(());
    }
    Err(Error::Unknown {
        what: "architecture",
        name: arch.into(),
        known: format!(
            "{} (kiln compiles for these only; {HOPPER} runs every version)",
            TARGETS.join(", ")
        ),
    })
}

/// Whether `arch` has wgmma, TMA and clusters: a version built on them has no variant elsewhere.
pub fn has_wgmma(arch: &str) -> bool {
    arch == HOPPER
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_targets_pass_and_a_refusal_names_them() {
        for t in TARGETS {
            check(t).unwrap();
        }
        for bad in [
            "sm_12",
            "sm_90",
            "90a",
            "",
            "SM_90A",
            "compute_90a",
            "sm_100a",
        ] {
            let e = check(bad).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{bad}");
            let m = e.to_string();
            assert!(m.contains(&format!("`{bad}`")), "{m}");
            assert!(m.contains("sm_80, sm_86, sm_89, sm_90a"), "{m}");
            assert!(!m.contains('\n'), "{m}");
        }
    }

    #[test]
    fn only_hopper_has_wgmma() {
        assert!(has_wgmma("sm_90a"));
        for t in TARGETS.iter().filter(|t| **t != HOPPER) {
            assert!(!has_wgmma(t), "{t}");
        }
    }
}
