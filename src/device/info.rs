//! What kiln reads off a GPU: name, compute capability, SMs, L2, shared memory, clocks.

use cudarc::driver::{result, sys};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub ordinal: u32,
    pub name: String,
    pub compute_capability: (i32, i32),
    pub sm_count: u32,
    pub l2_bytes: u64,
    /// Largest dynamic + static shared memory one block may opt into.
    pub smem_optin_bytes: u32,
    pub smem_per_sm_bytes: u32,
    pub registers_per_sm: u32,
    pub sm_clock_mhz: u32,
    pub mem_clock_mhz: u32,
    pub mem_bus_bits: u32,
    pub total_mem_bytes: u64,
}

impl DeviceInfo {
    pub fn query(ordinal: u32) -> Result<DeviceInfo> {
        use sys::CUdevice_attribute as A;
        let dev = result::device::get(ordinal as i32)
            .map_err(|e| Error::cuda("cuDeviceGet", format!("{e:?}")))?;
        // SAFETY: `dev` is a valid device handle.
        let attr = |a: A| {
            unsafe { result::device::get_attribute(dev, a) }
                .map(|v| v.max(0) as u32)
                .map_err(|e| Error::cuda("reading a device attribute", format!("{e:?}")))
        };
        Ok(DeviceInfo {
            ordinal,
            name: result::device::get_name(dev)
                .map_err(|e| Error::cuda("cuDeviceGetName", format!("{e:?}")))?,
            compute_capability: (
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)? as i32,
                attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)? as i32,
            ),
            sm_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?,
            l2_bytes: attr(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)? as u64,
            smem_optin_bytes: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)?,
            smem_per_sm_bytes: attr(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR)?,
            registers_per_sm: attr(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR)?,
            sm_clock_mhz: attr(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE)? / 1000,
            mem_clock_mhz: attr(A::CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE)? / 1000,
            mem_bus_bits: attr(A::CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH)?,
            // SAFETY: `dev` is a valid device handle.
            total_mem_bytes: unsafe { result::device::total_mem(dev) }
                .map_err(|e| Error::cuda("cuDeviceTotalMem", format!("{e:?}")))?
                as u64,
        })
    }

    /// The NVRTC target for this GPU: the `a` variant on Hopper, where wgmma needs it.
    pub fn arch(&self) -> String {
        let (maj, min) = self.compute_capability;
        if (maj, min) == (9, 0) {
            "sm_90a".into()
        } else {
            format!("sm_{maj}{min}")
        }
    }

    pub fn is_hopper(&self) -> bool {
        self.compute_capability == (9, 0)
    }

    /// `Ok` when a block of `bytes` of shared memory fits this GPU's opt-in limit, else the
    /// one-sentence reason a version's `supports` gives.
    pub fn check_smem(&self, bytes: u32) -> std::result::Result<(), String> {
        if bytes > self.smem_optin_bytes {
            return Err(format!(
                "needs {bytes} B of shared memory per block; this GPU allows {}",
                self.smem_optin_bytes
            ));
        }
        Ok(())
    }

    /// A description of a Hopper H100 SXM, for planning and checking without a GPU.
    pub fn h100_sxm() -> DeviceInfo {
        DeviceInfo {
            ordinal: 0,
            name: "NVIDIA H100 80GB HBM3 (assumed: no GPU)".into(),
            compute_capability: (9, 0),
            sm_count: 132,
            l2_bytes: 50 * 1024 * 1024,
            smem_optin_bytes: 232448,
            smem_per_sm_bytes: 233472,
            registers_per_sm: 65536,
            sm_clock_mhz: 1980,
            mem_clock_mhz: 2619,
            mem_bus_bits: 5120,
            total_mem_bytes: 80 << 30,
        }
    }
}
