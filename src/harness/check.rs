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
    let mut work = Vec::new();
    // A version's variants as items of `op`, made only when `only` does not name another one.
    let mut add = |op: &'static str, version: &'static str, specs: &dyn Fn() -> Vec<KernelSpec>| {
        if only.is_none_or(|v| v == version) {
            work.extend(specs().into_iter().map(|s| (op, version, s)));
        }
    };
    for k in registry.gemm() {
        add("gemm", k.name(), &|| k.variants(arch));
    }
    for k in registry.attention() {
        add("attention", k.name(), &|| k.variants(arch));
    }
    for k in registry.attention_backward() {
        add("attention_backward", k.name(), &|| k.variants(arch));
    }
    for k in registry.moe() {
        add("moe", k.name(), &|| k.variants(arch));
    }
    // The 4-bit formats' quantisers and the NVFP4 GEMV.
    for (version, s) in crate::ops::fp4::variants(arch) {
        add("fp4", version, &|| vec![s.clone()]);
    }
    // The MoE kernels with 4-bit weights (prepacked operands, so outside the MoeKernel registry).
    use crate::ops::moe::{fp4, layer};
    add("moe", fp4::kernel::NAME, &|| fp4::variants(arch));
    // The MoE layer's routing and combine kernels (its GEMMs are grouped_gemm's and swiglu_dual's).
    add("moe", layer::NAME, &|| layer::own_variants(arch));
    // Decode over a paged KV cache: its two passes and the append, outside the forward's registry.
    for (name, specs) in crate::ops::attention::decode_variants(arch) {
        add("attention", name, &|| specs.clone());
    }
    // RMSNorm and the rotary embedding.
    for (name, s) in crate::ops::pointwise::variants(arch) {
        add("pointwise", name, &|| vec![s.clone()]);
    }
    // The bench's own kernel: every timed launch waits for it, so it is compiled and checked too.
    add("harness", "l2_read_flush", &|| {
        vec![crate::harness::bench::read_flush_spec(arch)]
    });
    // The GPU input generator of the benches and the fuzz.
    add("harness", "counter_fill", &|| {
        vec![crate::harness::device_data::spec(arch)]
    });
    // The fuzz's fp32 reference GEMM and its comparison.
    let [reference, compare] = crate::harness::fuzz::gemm::specs(arch);
    add("harness", "gemm_reference", &|| vec![reference.clone()]);
    add("harness", "gemm_compare", &|| vec![compare.clone()]);
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
