//! The compile check: every registered kernel variant compiled for an arch (no GPU needed), with
//! its resources, and a verdict: spills, a stack frame, serialised wgmma or ignored setmaxnreg, or
//! shared memory over the device limit each fail the variant.

use serde::Serialize;

use crate::device::DeviceInfo;
use crate::jit::{Jit, KernelSpec, Resources};
use crate::ops::registry::Registry;

#[derive(Debug, Clone, Serialize)]
pub struct CheckRow {
    pub op: String,
    pub version: String,
    pub variant: String,
    pub resources: Option<Resources>,
    /// Dynamic shared memory the launch requests, on top of the static amount in `resources`.
    pub dynamic_smem: u32,
    pub compile_ms: f64,
    /// The compiling thread's CPU time when the variant was built (see `Compiled`): the cold
    /// compile time free of contention between parallel compiles. `None` if unknown.
    pub compile_cpu_ms: Option<f64>,
    pub cached: bool,
    /// SHA-256 of the CUBIN (hex; empty if it did not compile): two builds of a variant compare
    /// byte for byte through it, e.g. to prove a source refactor left the machine code alone.
    pub cubin_sha256: String,
    /// Empty when the variant is fine.
    pub problems: Vec<String>,
}

impl CheckRow {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Dynamic shared memory a variant will request, declared by its `KILN_SMEM` define if any.
pub fn dynamic_smem(spec: &KernelSpec) -> u32 {
    spec.defines
        .iter()
        .find(|(k, _)| k == "KILN_SMEM")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

/// Judges one compiled variant against `dev`'s limits.
pub fn judge(spec: &KernelSpec, r: &Resources, dev: &DeviceInfo) -> Vec<String> {
    let mut problems = Vec::new();
    if r.spills() {
        problems.push(format!(
            "spills ({} B stores, {} B loads)",
            r.spill_stores, r.spill_loads
        ));
    }
    if r.stack_frame > 0 {
        problems.push(format!("{} B stack frame (local memory)", r.stack_frame));
    }
    let smem = r.static_smem + dynamic_smem(spec);
    if smem > dev.smem_optin_bytes {
        problems.push(format!(
            "{smem} B shared memory over the {} B limit",
            dev.smem_optin_bytes
        ));
    }
    problems.extend(r.warnings.iter().cloned());
    problems
}

/// One variant to compile: (op, version, spec).
pub type CheckItem = (&'static str, &'static str, KernelSpec);

/// Every variant of every version for `arch` (or of the version `only`), in registry order.
pub fn check_items(registry: &Registry, arch: &str, only: Option<&str>) -> Vec<CheckItem> {
    let mut work: Vec<CheckItem> = registry
        .gemm()
        .iter()
        .filter(|k| only.is_none_or(|v| v == k.name()))
        .flat_map(|k| {
            k.variants(arch)
                .into_iter()
                .map(move |s| ("gemm", k.name(), s))
        })
        .collect();
    work.extend(
        registry
            .attention()
            .iter()
            .filter(|k| only.is_none_or(|v| v == k.name()))
            .flat_map(|k| {
                k.variants(arch)
                    .into_iter()
                    .map(move |s| ("attention", k.name(), s))
            }),
    );
    work.extend(
        registry
            .attention_backward()
            .iter()
            .filter(|k| only.is_none_or(|v| v == k.name()))
            .flat_map(|k| {
                k.variants(arch)
                    .into_iter()
                    .map(move |s| ("attention_backward", k.name(), s))
            }),
    );
    work.extend(
        registry
            .moe()
            .iter()
            .filter(|k| only.is_none_or(|v| v == k.name()))
            .flat_map(|k| {
                k.variants(arch)
                    .into_iter()
                    .map(move |s| ("moe", k.name(), s))
            }),
    );
    // The 4-bit formats' quantisers and the NVFP4 GEMV.
    work.extend(
        crate::ops::fp4::variants(arch)
            .into_iter()
            .filter(|(version, _)| only.is_none_or(|v| v == *version))
            .map(|(version, s)| ("fp4", version, s)),
    );
    // The MoE kernels with 4-bit weights (prepacked operands, so outside the MoeKernel registry).
    let fp4 = crate::ops::moe::fp4::kernel::NAME;
    if only.is_none_or(|v| v == fp4) {
        work.extend(
            crate::ops::moe::fp4::variants(arch)
                .into_iter()
                .map(|s| ("moe", fp4, s)),
        );
    }
    // The MoE layer's routing and combine kernels (its GEMMs are grouped_gemm's and swiglu_dual's).
    if only.is_none_or(|v| v == crate::ops::moe::layer::NAME) {
        work.extend(
            crate::ops::moe::layer::own_variants(arch)
                .into_iter()
                .map(|s| ("moe", crate::ops::moe::layer::NAME, s)),
        );
    }
    // Decode over a paged KV cache: its two passes and the append, outside the forward's registry.
    for (name, specs) in crate::ops::attention::decode_variants(arch) {
        if only.is_none_or(|v| v == name) {
            work.extend(specs.into_iter().map(|s| ("attention", name, s)));
        }
    }
    // RMSNorm and the rotary embedding.
    work.extend(
        crate::ops::pointwise::variants(arch)
            .into_iter()
            .filter(|(name, _)| only.is_none_or(|v| v == *name))
            .map(|(name, s)| ("pointwise", name, s)),
    );
    // The bench's own kernel: every timed launch waits for it, so it is compiled and checked too.
    if only.is_none_or(|v| v == "l2_read_flush") {
        work.push((
            "harness",
            "l2_read_flush",
            crate::harness::bench::read_flush_spec(arch),
        ));
    }
    // The GPU input generator of the benches and the fuzz.
    if only.is_none_or(|v| v == "counter_fill") {
        work.push((
            "harness",
            "counter_fill",
            crate::harness::device_data::spec(arch),
        ));
    }
    // The fuzz's fp32 reference GEMM and its comparison.
    for spec in crate::harness::fuzz::gemm::specs(arch) {
        if only.is_none_or(|v| v == spec.entry) {
            let name = if spec.entry == "gemm_reference" {
                "gemm_reference"
            } else {
                "gemm_compare"
            };
            work.push(("harness", name, spec));
        }
    }
    work
}

/// Compiles every variant of every version for `arch` (in parallel: NVRTC programs are
/// independent), calling `progress` after each; rows come back in registry order.
pub fn check_all(
    jit: &Jit,
    registry: &Registry,
    arch: &str,
    dev: &DeviceInfo,
    only: Option<&str>,
    progress: impl FnMut(&CheckRow) + Send,
) -> Vec<CheckRow> {
    check_each(jit, &check_items(registry, arch, only), dev, progress)
}

/// Compiles `work` (in parallel), calling `progress` after each; rows come back in its order.
pub fn check_each(
    jit: &Jit,
    work: &[CheckItem],
    dev: &DeviceInfo,
    progress: impl FnMut(&CheckRow) + Send,
) -> Vec<CheckRow> {
    use rayon::prelude::*;
    let progress = std::sync::Mutex::new(progress);
    work.par_iter()
        .map(|(op, version, spec)| {
            let row = check_one(jit, op, version, spec, dev);
            if let Ok(mut f) = progress.lock() {
                f(&row);
            }
            row
        })
        .collect()
}

fn check_one(jit: &Jit, op: &str, version: &str, spec: &KernelSpec, dev: &DeviceInfo) -> CheckRow {
    let mut row = CheckRow {
        op: op.into(),
        version: version.into(),
        variant: spec.label(),
        resources: None,
        dynamic_smem: dynamic_smem(spec),
        compile_ms: 0.0,
        compile_cpu_ms: None,
        cached: false,
        cubin_sha256: String::new(),
        problems: Vec::new(),
    };
    match jit.compile(spec) {
        Ok(c) => {
            row.problems = judge(spec, &c.resources, dev);
            row.compile_ms = if c.cached { c.load_ms } else { c.compile_ms };
            row.compile_cpu_ms = c.compile_cpu_ms;
            row.cached = c.cached;
            row.cubin_sha256 = c.cubin_sha256;
            row.resources = Some(c.resources);
        }
        Err(e) => row.problems.push(e.to_string()),
    }
    row
}

/// One version's compiled variants in a line: how many (and how many came from the JIT cache),
/// the most registers and shared memory any uses, how many spill, and how many are flagged
/// ([`CheckRow::ok`] false, spills included).
#[derive(Debug, Clone, Serialize)]
pub struct VersionCheck {
    pub op: String,
    pub version: String,
    pub variants: usize,
    pub cached: usize,
    pub max_registers: u32,
    /// Static plus dynamic shared memory, bytes.
    pub max_smem: u32,
    pub spilling: usize,
    pub flagged: usize,
    /// The cold compiles' CPU time, summed (seconds).
    pub compile_cpu_s: f64,
}

/// [`VersionCheck`] of each (op, version) of `rows`, in the order they first appear.
pub fn by_version(rows: &[CheckRow]) -> Vec<VersionCheck> {
    let mut out: Vec<VersionCheck> = Vec::new();
    for r in rows {
        let i = match out
            .iter()
            .position(|v| v.op == r.op && v.version == r.version)
        {
            Some(i) => i,
            None => {
                out.push(VersionCheck {
                    op: r.op.clone(),
                    version: r.version.clone(),
                    variants: 0,
                    cached: 0,
                    max_registers: 0,
                    max_smem: 0,
                    spilling: 0,
                    flagged: 0,
                    compile_cpu_s: 0.0,
                });
                out.len() - 1
            }
        };
        let v = &mut out[i];
        v.variants += 1;
        v.cached += r.cached as usize;
        v.flagged += !r.ok() as usize;
        if let Some(res) = &r.resources {
            v.max_registers = v.max_registers.max(res.registers);
            v.max_smem = v.max_smem.max(res.static_smem + r.dynamic_smem);
            v.spilling += res.spills() as usize;
        }
        if !r.cached {
            v.compile_cpu_s += r.compile_cpu_ms.unwrap_or(r.compile_ms) / 1e3;
        }
    }
    out
}
