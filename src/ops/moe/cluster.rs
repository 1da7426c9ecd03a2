//! How many clusters of a MoE kernel can be resident at once, for the persistent grids of the
//! CTA-pair variants: GPC boundaries can leave SMs unpaired, so SMs / 2 may be too many, and a
//! persistent grid larger than what fits runs a second, serial wave. (The same query as
//! `ops::gemm::wgmma_tma_ws`'s; kept here so the GEMM host file is not touched while the GEMM
//! work is in flight. Merge the two when both are idle.)

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use cudarc::driver::sys;

use crate::device::{Context, Function};

/// Resident clusters of `cluster` CTAs of `threads` threads and `smem` dynamic bytes: the
/// driver's occupancy answer, at most SMs / cluster; SMs for single CTAs. Cached per function.
pub fn max_clusters(f: &Function, ctx: &Context, cluster: u32, threads: u32, smem: u32) -> u32 {
    let sms = ctx.info.sm_count;
    let fallback = (sms / cluster.max(1)).max(1);
    if cluster <= 1 {
        return sms.max(1);
    }
    static CACHE: OnceLock<Mutex<HashMap<usize, u32>>> = OnceLock::new();
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    let key = f.raw as usize;
    if let Some(n) = cache.lock().ok().and_then(|c| c.get(&key).copied()) {
        return n;
    }
    // SAFETY: `f` is a loaded function of the current context; the config and its one attribute
    // live across the calls, which only read them.
    let n = unsafe {
        let _ = cudarc::driver::result::function::set_function_attribute(
            f.raw,
            sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
            smem as i32,
        );
        let mut attr: sys::CUlaunchAttribute = std::mem::zeroed();
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
        attr.value.clusterDim.x = cluster;
        attr.value.clusterDim.y = 1;
        attr.value.clusterDim.z = 1;
        let lc = sys::CUlaunchConfig {
            gridDimX: fallback * cluster,
            gridDimY: 1,
            gridDimZ: 1,
            blockDimX: threads,
            blockDimY: 1,
            blockDimZ: 1,
            sharedMemBytes: smem,
            hStream: ctx.stream,
            attrs: &mut attr,
            numAttrs: 1,
        };
        let mut n: std::ffi::c_int = 0;
        match sys::cuOccupancyMaxActiveClusters(&mut n, f.raw, &lc).result() {
            Ok(()) if n > 0 => (n as u32).min(fallback),
            _ => fallback,
        }
    };
    if let Ok(mut c) = cache.lock() {
        c.insert(key, n);
    }
    n
}
