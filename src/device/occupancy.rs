//! Occupancy queries the driver answers better than arithmetic: how many clusters of a kernel
//! can be resident at once, for the persistent grids of the GEMM and MoE kernels that launch
//! CTA clusters.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use cudarc::driver::{result, sys};

use super::{Context, Function};

impl Context {
    /// Resident clusters of `cluster` CTAs (1-D) of `threads` threads and `smem_bytes` dynamic
    /// shared memory each: the driver's `cuOccupancyMaxActiveClusters`, at most SMs / cluster
    /// (GPC boundaries can leave SMs unpaired, so SMs / cluster may be too many, and a persistent
    /// grid larger than what fits runs a second, serial wave). SMs for single CTAs; SMs / cluster
    /// if the driver gives no answer. Sets the function's dynamic shared memory limit to
    /// `smem_bytes` (the launch does that anyway). Cached per (function, shape) for the process.
    pub fn max_active_clusters(
        &self,
        f: &Function,
        cluster: u32,
        threads: u32,
        smem_bytes: u32,
    ) -> u32 {
        let sms = self.info.sm_count;
        let fallback = (sms / cluster.max(1)).max(1);
        if cluster <= 1 {
            return sms.max(1);
        }
        type Key = (usize, u32, u32, u32);
        static CACHE: OnceLock<Mutex<HashMap<Key, u32>>> = OnceLock::new();
        let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
        let key = (f.raw as usize, cluster, threads, smem_bytes);
        if let Some(n) = cache.lock().ok().and_then(|c| c.get(&key).copied()) {
            return n;
        }
        // SAFETY: `f` is a loaded function of the current context; the config and its one
        // attribute live across the calls, which only read them.
        let n = unsafe {
            let _ = result::function::set_function_attribute(
                f.raw,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                smem_bytes as i32,
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
                sharedMemBytes: smem_bytes,
                hStream: self.stream,
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
}
