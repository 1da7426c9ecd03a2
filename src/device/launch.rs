//! Loaded kernels and launches: grid, block, dynamic shared memory above 48 KB, clusters, and
//! programmatic dependent launch (a kernel that starts while the one before it finishes).

use std::ffi::{c_void, CString};

use cudarc::driver::{result, sys};

use crate::error::{Error, Result};
use crate::jit::Compiled;

/// A kernel entry point in a loaded module (the module lives for the process).
#[derive(Debug, Clone, Copy)]
pub struct Function {
    pub raw: sys::CUfunction,
}

/// How to launch: grid and block in threads, dynamic shared memory, optional cluster shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LaunchConfig {
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub smem_bytes: u32,
    pub cluster: Option<(u32, u32, u32)>,
}

impl LaunchConfig {
    pub fn simple(grid: (u32, u32, u32), block: u32) -> Self {
        LaunchConfig {
            grid,
            block: (block, 1, 1),
            smem_bytes: 0,
            cluster: None,
        }
    }
}

impl Function {
    pub fn load(c: &Compiled) -> Result<Function> {
        // SAFETY: the CUBIN bytes came from NVRTC for this arch; the module is never unloaded.
        let module = unsafe { result::module::load_data(c.cubin.as_ptr() as *const c_void) }
            .map_err(|e| Error::cuda(format!("loading {}", c.spec.label()), format!("{e:?}")))?;
        let name = CString::new(c.spec.entry.clone())
            .map_err(|_| Error::invalid("entry name has a NUL byte"))?;
        // SAFETY: `module` is live; `name` is NUL-terminated.
        let raw = unsafe { result::module::get_function(module, name) }.map_err(|e| {
            Error::cuda(
                format!("finding `{}` in {}", c.spec.entry, c.spec.label()),
                format!("{e:?}"),
            )
        })?;
        Ok(Function { raw })
    }

    /// Launches with `params` (one pointer per kernel parameter, pointing at its value).
    ///
    /// # Safety
    /// `params` must match the kernel's parameter list in number, order and layout, and every
    /// device pointer inside must stay valid until the kernel has finished.
    pub unsafe fn launch(
        &self,
        stream: sys::CUstream,
        cfg: &LaunchConfig,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        self.launch_ex(stream, cfg, params, false)
    }

    /// As [`Function::launch`], but the kernel may start (its CTAs run their prologue) while the
    /// kernel before it on the stream is still running: programmatic dependent launch. The kernel
    /// must execute `griddepcontrol.wait` (common/grid_dep.cuh) before it reads anything earlier
    /// work wrote; the one before may release it early with `griddepcontrol.launch_dependents`.
    ///
    /// # Safety
    /// As [`Function::launch`], and the kernel waits as described before its first such read.
    pub unsafe fn launch_dependent(
        &self,
        stream: sys::CUstream,
        cfg: &LaunchConfig,
        params: &mut [*mut c_void],
    ) -> Result<()> {
        self.launch_ex(stream, cfg, params, true)
    }

    unsafe fn launch_ex(
        &self,
        stream: sys::CUstream,
        cfg: &LaunchConfig,
        params: &mut [*mut c_void],
        dependent: bool,
    ) -> Result<()> {
        if cfg.smem_bytes > 48 * 1024 {
            result::function::set_function_attribute(
                self.raw,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                cfg.smem_bytes as i32,
            )
            .map_err(|e| {
                Error::cuda(
                    format!("allowing {} bytes of shared memory", cfg.smem_bytes),
                    format!("{e:?}"),
                )
            })?;
        }
        let mut attrs: Vec<sys::CUlaunchAttribute> = Vec::new();
        if let Some((x, y, z)) = cfg.cluster {
            let mut a: sys::CUlaunchAttribute = std::mem::zeroed();
            a.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
            a.value.clusterDim.x = x;
            a.value.clusterDim.y = y;
            a.value.clusterDim.z = z;
            attrs.push(a);
        }
        if dependent {
            let mut a: sys::CUlaunchAttribute = std::mem::zeroed();
            a.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
            a.value.programmaticStreamSerializationAllowed = 1;
            attrs.push(a);
        }
        let lc = sys::CUlaunchConfig {
            gridDimX: cfg.grid.0,
            gridDimY: cfg.grid.1,
            gridDimZ: cfg.grid.2,
            blockDimX: cfg.block.0,
            blockDimY: cfg.block.1,
            blockDimZ: cfg.block.2,
            sharedMemBytes: cfg.smem_bytes,
            hStream: stream,
            attrs: attrs.as_mut_ptr(),
            numAttrs: attrs.len() as u32,
        };
        sys::cuLaunchKernelEx(&lc, self.raw, params.as_mut_ptr(), std::ptr::null_mut())
            .result()
            .map_err(|e| {
                Error::cuda(
                    format!(
                        "launching grid {:?} block {:?} smem {}",
                        cfg.grid, cfg.block, cfg.smem_bytes
                    ),
                    format!("{e:?}"),
                )
            })
    }
}
