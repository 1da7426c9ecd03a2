//! What a harness run needs in device and host memory, computed from its problems before anything
//! is allocated or generated, and the check that refuses a run that cannot fit.

use crate::device::{Context, DeviceInfo};
use crate::error::{Error, Memory, Result};
use crate::ops::attention::AttentionProblem;
use crate::ops::fp8::problem::Fp8Problem;
use crate::ops::gemm::{wgmma_tma_ws, GemmProblem};
use crate::ops::moe::MoeProblem;

/// Device memory a run holds beyond its operands: the ops' workspaces (split-K partials, partial
/// softmax states, schedule counters), cuBLAS's 32 MiB and cuBLASLt's workspaces, the modules
/// loaded. An allowance, not a sum: the workspaces grow with the SM count, not the problem.
pub const WORKSPACE_BYTES: u64 = 256 << 20;

/// Bytes of f64 per element in a host reference's copy of an input.
const F64: u64 = 8;

/// Device and host bytes one run needs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Need {
    pub device: u64,
    /// The host copies of inputs and outputs a CPU reference keeps (0 for a bench).
    pub host: u64,
}

impl Need {
    /// The larger of each: what a campaign over several problems, run one at a time, needs.
    pub fn max(self, other: Need) -> Need {
        Need {
            device: self.device.max(other.device),
            host: self.host.max(other.host),
        }
    }

    /// Refuses `what` ("this problem") when it needs more device memory than the GPU has free
    /// or more host memory than the machine has available; says so before anything is made.
    pub fn ensure(&self, ctx: &Context, what: &str) -> Result<()> {
        ctx.ensure_fits(what, self.device)?;
        host_fits(what, self.host, host_available())
    }
}

/// How a refusal names a GEMM problem: "the problem 200000x200000x200000 RC bf16->bf16".
pub fn what(p: &GemmProblem) -> String {
    format!("the problem {}", p.label())
}

/// The greatest need of `needs` (zero for none).
pub fn most(needs: impl IntoIterator<Item = Need>) -> Need {
    needs.into_iter().fold(Need::default(), Need::max)
}

/// The L2 flusher's buffer ([`super::bench::L2Flusher`]): twice the L2, at least 64 MiB, and its
/// 16-byte sink.
pub fn flusher_bytes(info: &DeviceInfo) -> u64 {
    (info.l2_bytes * 2).max(64 << 20) + 16
}

/// A GEMM bench of `p` (`kiln bench`, the tuner): the operands, the copies the TMA kernels make
/// of rows they cannot read in place, the flusher and the workspaces. Inputs are made on the GPU,
/// so nothing is needed on the host.
pub fn plan_bench(p: &GemmProblem, info: &DeviceInfo) -> Need {
    Need {
        device: p.device_bytes()
            + wgmma_tma_ws::pack_bytes(p)
            + flusher_bytes(info)
            + WORKSPACE_BYTES,
        host: 0,
    }
}

/// A GEMM verification of `p`: the operands on the device; on the host A and B in their dtype
/// and in f64, C poisoned and read back (and its random old values in f64 when beta != 0).
pub fn plan_verify(p: &GemmProblem) -> Need {
    let (i, o) = (p.input.size() as u64, p.output.size() as u64);
    let (ab, c) = (p.a_elems() as u64 + p.b_elems() as u64, p.c_elems() as u64);
    let c_host = if p.beta != 0.0 {
        c * (4 * o + F64)
    } else {
        2 * c * o
    };
    Need {
        device: p.device_bytes() + wgmma_tma_ws::pack_bytes(p) + WORKSPACE_BYTES,
        host: ab * (i + F64) + c_host,
    }
}

/// An attention bench of `p`: Q, K, V, O and LSE, the flusher and the workspaces.
pub fn plan_attention_bench(p: &AttentionProblem, info: &DeviceInfo) -> Need {
    Need {
        device: p.device_bytes() + flusher_bytes(info) + WORKSPACE_BYTES,
        host: 0,
    }
}

/// What timing the attention backward `p` needs: its operands and workspaces, the L2 flusher and
/// room for the kernels' scratch (the split's partials, the counters).
pub fn plan_backward_bench(
    p: &crate::ops::attention_backward::BackwardProblem,
    info: &DeviceInfo,
) -> Need {
    Need {
        device: p.device_bytes() + flusher_bytes(info) + WORKSPACE_BYTES,
        host: 0,
    }
}

/// An attention verification of `p`: the operands on the device; on the host Q, K and V in
/// their dtype and in f64, O and LSE poisoned and read back.
pub fn plan_attention_verify(p: &AttentionProblem) -> Need {
    let e = p.dtype.size() as u64;
    let (q, kv, lse) = (
        p.q_elems() as u64,
        p.kv_elems() as u64,
        p.lse_elems() as u64,
    );
    Need {
        device: p.device_bytes() + WORKSPACE_BYTES,
        host: (q + 2 * kv) * (e + F64) + 2 * q * e + 2 * 4 * lse,
    }
}

/// A MoE bench: the first problem's operands and, for an FFN, the down projection's, the flusher
/// and the workspaces.
pub fn plan_moe_bench(first: &MoeProblem, down: Option<&MoeProblem>, info: &DeviceInfo) -> Need {
    Need {
        device: first.device_bytes()
            + down.map_or(0, MoeProblem::device_bytes)
            + flusher_bytes(info)
            + WORKSPACE_BYTES,
        host: 0,
    }
}

/// A MoE verification of `p`: the operands on the device; on the host X and the weights in their
/// dtype and in f64, the routing weights, Y's initial values, its copy read back and the f64
/// reference's rows.
pub fn plan_moe_verify(p: &MoeProblem) -> Need {
    let (i, o) = (p.input.size() as u64, p.output.size() as u64);
    let inputs = p.x_elems() as u64 + p.w_elems() as u64;
    let route = if p.swiglu.is_some_and(|s| s.routed) {
        p.x_rows() as u64 * (4 + F64)
    } else {
        0
    };
    Need {
        device: p.device_bytes() + WORKSPACE_BYTES,
        host: inputs * (i + F64) + route + p.y_elems() as u64 * (2 * o + F64),
    }
}

/// The f32 staging copy of the larger operand, quantised on the GPU into FP8 codes.
fn fp8_staging_bytes(p: &Fp8Problem) -> u64 {
    4 * (p.m.max(p.n) * p.k) as u64
}

/// An FP8 bench of `p`: the f32 staging of one operand, the codes and scales, kiln's C and
/// cuBLASLt's, the flusher and the workspaces.
pub fn plan_fp8_bench(p: &Fp8Problem, info: &DeviceInfo) -> Need {
    Need {
        device: fp8_staging_bytes(p)
            + p.device_bytes()
            + (p.m * p.ldc * p.out.size()) as u64
            + flusher_bytes(info)
            + WORKSPACE_BYTES,
        host: 0,
    }
}

/// An FP8 verification of `p`: as the bench without the flusher on the device; on the host each
/// operand in f32, its codes from the GPU and the CPU, its dequantised f64 values, and both Cs
/// read back.
pub fn plan_fp8_verify(p: &Fp8Problem) -> Need {
    let c = (p.m * p.ldc * p.out.size()) as u64;
    Need {
        device: fp8_staging_bytes(p) + p.device_bytes() + c + WORKSPACE_BYTES,
        host: ((p.m + p.n) * p.k) as u64 * (4 + 1 + 1 + F64) + 2 * c,
    }
}

/// Memory the machine can give without swapping (`MemAvailable` of `/proc/meminfo`), where the
/// system says.
pub fn host_available() -> Option<u64> {
    parse_mem_available(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// `MemAvailable` in bytes from the text of `/proc/meminfo`.
fn parse_mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// `Ok` when `needed` host bytes fit in what is `available` (unknown: assumed to fit), else
/// [`Error::OutOfMemory`] on the host naming `what`.
pub fn host_fits(what: &str, needed: u64, available: Option<u64>) -> Result<()> {
    match available {
        Some(free) if needed > free => Err(Error::out_of_memory(what, needed, free, Memory::Host)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::{DType, Layout};

    const GIB: u64 = 1 << 30;

    fn h100() -> DeviceInfo {
        DeviceInfo::h100_sxm()
    }

    #[test]
    fn the_issues_gemm_bench_needs_its_operands_and_the_flusher() {
        let p = GemmProblem::new(
            200_000,
            200_000,
            200_000,
            Layout::RC,
            DType::Bf16,
            DType::Bf16,
        );
        let need = plan_bench(&p, &h100());
        let flusher = 100 * (1 << 20) + 16; // twice the 50 MiB L2
        assert_eq!(
            need.device,
            3 * 200_000 * 200_000 * 2 + flusher + WORKSPACE_BYTES
        );
        assert_eq!(need.host, 0);
        let e = crate::device::memory::fits("this problem", need.device, 78 * GIB).unwrap_err();
        assert_eq!(
            e.to_string(),
            "this problem needs 223.9 GiB of device memory; the GPU has 78.0 GiB free: use a \
             smaller problem"
        );
    }

    #[test]
    fn unaligned_rows_add_their_copies() {
        let packed = GemmProblem::new(1000, 1000, 1000, Layout::RC, DType::Bf16, DType::Bf16);
        let mut odd = packed;
        odd.lda = 1001; // 2002-byte rows: TMA cannot read A in place
        let extra = plan_bench(&odd, &h100()).device - plan_bench(&packed, &h100()).device;
        // A's 999 extra elements of stride, and its copy with rows padded to 1024 elements.
        assert_eq!(extra, 999 * 2 + 1000 * 1024 * 2);
    }

    #[test]
    fn verification_counts_the_host_copies_of_the_reference() {
        let p = GemmProblem::new(64, 32, 16, Layout::RC, DType::Bf16, DType::F32);
        let v = plan_verify(&p);
        assert_eq!(v.device, p.device_bytes() + WORKSPACE_BYTES);
        assert_eq!(v.host, (64 * 16 + 32 * 16) * (2 + 8) + 2 * 64 * 32 * 4);
        let mut beta = p;
        beta.beta = 1.0;
        assert_eq!(plan_verify(&beta).host - v.host, 64 * 32 * (2 * 4 + 8));
    }

    #[test]
    fn the_issues_attention_bench_needs_257_gib_and_more() {
        let p = AttentionProblem::new(64, 64, 65536, 128);
        let need = plan_attention_bench(&p, &h100());
        assert_eq!(
            need.device,
            257 * GIB + flusher_bytes(&h100()) + WORKSPACE_BYTES
        );
        let v = plan_attention_verify(&AttentionProblem::new(1, 2, 8, 64));
        let (q, lse) = (2 * 8 * 64, 2 * 8);
        assert_eq!(v.host, 3 * q * (2 + 8) + 2 * q * 2 + 8 * lse);
    }

    #[test]
    fn moe_and_fp8_plans_add_their_pieces() {
        let first = MoeProblem::contiguous(&[10, 20], 64, 128, DType::Bf16, DType::Bf16);
        let down = MoeProblem::contiguous(&[10, 20], 128, 64, DType::Bf16, DType::Bf16);
        let one = plan_moe_bench(&first, None, &h100()).device;
        let ffn = plan_moe_bench(&first, Some(&down), &h100()).device;
        assert_eq!(ffn - one, down.device_bytes());
        assert_eq!(
            plan_moe_verify(&first).host,
            (30 * 128 + 2 * 64 * 128) * (2 + 8) + 30 * 64 * (4 + 8)
        );
        let p = Fp8Problem::new(
            128,
            256,
            512,
            DType::Bf16,
            crate::ops::fp8::problem::ScaleMode::Row,
        );
        let c = 128 * 256 * 2;
        assert_eq!(
            plan_fp8_bench(&p, &h100()).device,
            4 * 256 * 512 + p.device_bytes() + c + flusher_bytes(&h100()) + WORKSPACE_BYTES
        );
        assert_eq!(plan_fp8_verify(&p).host, 384 * 512 * 14 + 2 * c);
    }

    #[test]
    fn a_campaign_needs_its_largest_problem() {
        let a = Need { device: 5, host: 1 };
        let b = Need { device: 3, host: 9 };
        assert_eq!(most([a, b]), Need { device: 5, host: 9 });
        assert_eq!(most([]), Need::default());
    }

    #[test]
    fn host_memory_is_read_from_meminfo_and_refused_when_short() {
        let text = "MemTotal:       131072000 kB\nMemFree:  1000 kB\nMemAvailable:   2097152 kB\n";
        assert_eq!(parse_mem_available(text), Some(2 * GIB));
        assert_eq!(parse_mem_available("MemTotal: 5 kB\n"), None);
        assert!(host_fits("this problem", 2 * GIB, Some(2 * GIB)).is_ok());
        assert!(host_fits("this problem", u64::MAX, None).is_ok());
        let e = host_fits("this problem", 3 * GIB, Some(2 * GIB)).unwrap_err();
        assert_eq!(e.exit_code(), 12);
        assert_eq!(
            e.to_string(),
            "this problem needs 3.0 GiB of host memory; the machine has 2.0 GiB free: use a \
             smaller problem"
        );
    }
}
