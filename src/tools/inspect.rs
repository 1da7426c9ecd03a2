//! `kiln inspect`: what the compiler made of one kernel version for one problem class, without a
//! GPU. Compiles the variant through the JIT, reads its resources, disassembles the CUBIN with
//! `cuobjdump -sass` and counts instructions by opcode, then flags what should not be there: a
//! WGMMA version whose SASS has no HGMMA, and any local-memory traffic (LDL/STL).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use serde::Serialize;

use super::{path_with, ToolSpec};
use crate::device::DeviceInfo;
use crate::error::{Error, Result};
use crate::harness::check::{dynamic_smem, judge};
use crate::jit::arch::{self as targets, HOPPER};
use crate::jit::{Jit, KernelSpec, Resources};
use crate::ops::gemm::{DType, GemmKernel, Layout};

/// cuobjdump: `KILN_CUOBJDUMP`, PATH, else the wheel `scripts/setup.sh` installs.
pub const CUOBJDUMP: ToolSpec = ToolSpec {
    name: "cuobjdump",
    env: "KILN_CUOBJDUMP",
    fallback_dirs: &[".deps/py/nvidia/cu13/bin", "/usr/local/cuda/bin"],
    hint: "run scripts/setup.sh (it installs cuobjdump and nvdisasm into .deps/py) or set KILN_CUOBJDUMP",
};

/// Opcodes always shown when present, whatever their rank.
pub const WATCHED: &[&str] = &[
    "HGMMA",
    "HMMA",
    "FFMA",
    "LDG",
    "STG",
    "LDS",
    "STS",
    "LDSM",
    "LDL",
    "STL",
    "UTMALDG",
    "UTMASTG",
    "SYNCS",
    "BAR",
    "WARPGROUP",
];

/// Instruction counts by opcode (the mnemonic up to its first `.`), over every function.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct SassHistogram {
    pub functions: Vec<String>,
    pub counts: BTreeMap<String, usize>,
    pub total: usize,
}

impl SassHistogram {
    pub fn count(&self, opcode: &str) -> usize {
        self.counts.get(opcode).copied().unwrap_or(0)
    }

    /// The `top` most frequent opcodes plus every watched one present, most frequent first.
    pub fn shown(&self, top: usize) -> Vec<(&str, usize)> {
        let mut all: Vec<(&str, usize)> =
            self.counts.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
        all.iter()
            .enumerate()
            .filter(|(i, (op, _))| *i < top || WATCHED.contains(op))
            .map(|(_, x)| *x)
            .collect()
    }
}

/// Parses `cuobjdump -sass` output: one instruction per `/*offset*/ [@pred] OPCODE ... ;` line.
pub fn parse_sass(text: &str) -> SassHistogram {
    let mut h = SassHistogram::default();
    for line in text.lines() {
        let t = line.trim();
        if let Some(name) = t.strip_prefix("Function :") {
            h.functions.push(name.trim().to_string());
            continue;
        }
        let Some(rest) = t.strip_prefix("/*") else {
            continue;
        };
        let Some(end) = rest.find("*/") else { continue };
        let offset = &rest[..end];
        if offset.is_empty() || !offset.chars().all(|c| c.is_ascii_hexdigit()) {
            continue; // an encoding comment (`/* 0x... */`), not an instruction
        }
        let mut words = rest[end + 2..].split_whitespace();
        let mut word = words.next();
        if word.is_some_and(|w| w.starts_with('@')) {
            word = words.next();
        }
        let Some(mnemonic) = word
            .map(|w| w.trim_end_matches(';'))
            .filter(|w| !w.is_empty())
        else {
            continue;
        };
        let opcode = mnemonic.split('.').next().unwrap_or(mnemonic);
        *h.counts.entry(opcode.to_string()).or_insert(0) += 1;
        h.total += 1;
    }
    h
}

/// What looks wrong in a version's SASS and resources.
pub fn flags(version: &str, h: &SassHistogram) -> Vec<String> {
    let mut f = Vec::new();
    if version.starts_with("wgmma") && h.count("HGMMA") == 0 {
        f.push(format!("{version} is a WGMMA version but its SASS has no HGMMA: the tensor-core path was not compiled in"));
    }
    let (ldl, stl) = (h.count("LDL"), h.count("STL"));
    if ldl + stl > 0 {
        f.push(format!(
            "local memory traffic: {ldl} LDL, {stl} STL (spills or a stack array)"
        ));
    }
    f
}

/// The variant of `kernel` for `arch` whose defines match the problem class; the first variant
/// of the version when none names all four defines.
pub fn pick_variant(
    kernel: &dyn GemmKernel,
    arch: &str,
    layout: Layout,
    input: DType,
    output: DType,
) -> Result<KernelSpec> {
    targets::check(arch)?;
    let variants = kernel.variants(arch);
    let want = [
        ("KILN_A_ROW", (layout.a_row_major() as u32).to_string()),
        ("KILN_B_ROW", (layout.b_row_major() as u32).to_string()),
        ("KILN_IN", input.code().to_string()),
        ("KILN_OUT", output.code().to_string()),
    ];
    let matches = |s: &KernelSpec| {
        want.iter()
            .all(|(k, v)| s.defines.iter().any(|(dk, dv)| dk == k && dv == v))
    };
    let chosen = variants
        .iter()
        .find(|s| matches(s))
        .or(variants.first())
        .cloned();
    chosen.ok_or_else(|| {
        Error::invalid(if kernel.variants(HOPPER).is_empty() {
            format!(
                "{} has no kernel source of kiln's to inspect (it is a library call)",
                kernel.name()
            )
        } else {
            format!(
                "{} has no variant for {arch}: it runs on {HOPPER} only; inspect it with --arch {HOPPER}",
                kernel.name()
            )
        })
    })
}

/// Everything `kiln inspect` reports for one variant.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    pub version: String,
    pub variant: String,
    pub arch: String,
    pub resources: Resources,
    pub dynamic_smem: u32,
    /// What NVRTC took when the CUBIN was built.
    pub compile_ms: f64,
    /// What this call took (a file read on a cache hit).
    pub load_ms: f64,
    pub cached: bool,
    pub sass: SassHistogram,
    /// Resource problems (spills, stack, smem over the limit) and SASS flags.
    pub flags: Vec<String>,
}

/// Compiles `spec` and inspects it; `dev` supplies the limits to judge resources against.
pub fn inspect(
    jit: &Jit,
    version: &str,
    spec: &KernelSpec,
    dev: &DeviceInfo,
) -> Result<Inspection> {
    let c = jit.compile(spec)?;
    let sass = parse_sass(&disassemble(&c.cubin)?);
    let mut all_flags = judge(spec, &c.resources, dev);
    all_flags.extend(flags(version, &sass));
    Ok(Inspection {
        version: version.into(),
        variant: spec.label(),
        arch: spec.arch.clone(),
        dynamic_smem: dynamic_smem(spec),
        compile_ms: c.compile_ms,
        load_ms: c.load_ms,
        cached: c.cached,
        resources: c.resources,
        sass,
        flags: all_flags,
    })
}

/// The SASS of a CUBIN, as `cuobjdump -sass` prints it.
pub fn disassemble(cubin: &[u8]) -> Result<String> {
    let tool = CUOBJDUMP.find()?;
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let file =
        std::env::temp_dir().join(format!("kiln-inspect-{}-{nanos}.cubin", std::process::id()));
    std::fs::write(&file, cubin).map_err(|source| Error::Io {
        what: "writing the CUBIN for cuobjdump",
        path: file.clone(),
        source,
    })?;
    let out = run_cuobjdump(&tool, &file);
    let _ = std::fs::remove_file(&file);
    let out = out?;
    if !out.status.success() {
        return Err(Error::ToolMissing(format!(
            "{} -sass failed ({}): {}; it needs nvdisasm beside it or on PATH (scripts/setup.sh installs both)",
            tool.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn run_cuobjdump(tool: &Path, file: &Path) -> Result<std::process::Output> {
    let mut cmd = Command::new(tool);
    if let Some(dir) = tool.parent() {
        cmd.env("PATH", path_with(dir));
    }
    cmd.arg("-sass")
        .arg(file)
        .output()
        .map_err(|source| Error::Io {
            what: "running cuobjdump",
            path: tool.to_path_buf(),
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Captured from `cuobjdump -sass` of `wgmma_tma_ws` (trimmed), plus two local-memory lines.
    const SNIPPET: &str = "
	code for sm_90a
		Function : gemm_wgmma_tma_ws
	.headerflags	@\"EF_CUDA_ACCELERATORS EF_CUDA_SM90 EF_CUDA_VIRTUAL_SM(EF_CUDA_SM90)\"
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                        /* 0x00000a00ff017b82 */
                                                                                                 /* 0x000fe20000000800 */
        /*0040*/               @P1 BRA 0x1c0 ;                                                   /* 0x00000000005c1947 */
        /*0130*/                   SYNCS.EXCH.64 URZ, [UR8+0x30000], UR4 ;                       /* 0x03000004083f75b2 */
        /*0210*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;                                 /* 0x0000000000007b1d */
        /*0a60*/                   WARPGROUP.ARRIVE ;                                            /* 0x00000000000079c5 */
        /*0b80*/                   HGMMA.64x256x16.F32.BF16 R24, gdesc[UR16].tnspA, R24, UP0 ;   /* 0x23e00000101879f0 */
        /*0cd0*/                   @!UP0 ULEA UR5, UR5, UR22, 0x3 ;                              /* 0x0000001605058291 */
        /*0ce0*/                   HGMMA.64x256x16.F32.BF16 R24, gdesc[UR16].tnspA, R24 ;        /* 0x23e00000101879f0 */
        /*0e40*/              @!P1 SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR5+0x30020], RZ ;             /* 0x030020ffffff99a7 */
        /*0f00*/                   STL.64 [R1+0x8], R4 ;                                         /* 0x0000080401007387 */
        /*0f10*/                   LDL.64 R4, [R1+0x8] ;                                         /* 0x0000080001047983 */
        /*e6f0*/                   NOP;                                                          /* 0x0000000000007918 */
		..........
";

    #[test]
    fn sass_parser_counts_opcodes_past_predicates_and_suffixes() {
        let h = parse_sass(SNIPPET);
        assert_eq!(h.functions, vec!["gemm_wgmma_tma_ws"]);
        assert_eq!(h.total, 12);
        assert_eq!(h.count("HGMMA"), 2);
        assert_eq!(h.count("SYNCS"), 2);
        assert_eq!(h.count("ULEA"), 1);
        assert_eq!(h.count("NOP"), 1);
        assert_eq!((h.count("LDL"), h.count("STL")), (1, 1));
        assert_eq!(h.count("0x000fe20000000800"), 0);
    }

    #[test]
    fn flags_local_memory_and_a_wgmma_version_without_hgmma() {
        let h = parse_sass(SNIPPET);
        let f = flags("wgmma_tma_ws", &h);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(f[0].contains("1 LDL, 1 STL"));
        let mut no_tc = h.clone();
        no_tc.counts.remove("HGMMA");
        assert!(flags("wgmma_tma_ws", &no_tc)
            .iter()
            .any(|s| s.contains("no HGMMA")));
        assert!(!flags("simt_tiled", &no_tc)
            .iter()
            .any(|s| s.contains("no HGMMA")));
    }

    #[test]
    fn shown_keeps_the_top_and_every_watched_opcode() {
        let h = parse_sass(SNIPPET);
        let shown: Vec<&str> = h.shown(1).into_iter().map(|(op, _)| op).collect();
        assert_eq!(shown[0], "HGMMA");
        for op in ["LDL", "STL", "BAR", "WARPGROUP", "SYNCS"] {
            assert!(shown.contains(&op), "{op} missing from {shown:?}");
        }
        assert!(!shown.contains(&"NOP"));
    }
}
