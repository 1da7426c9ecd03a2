//! The block-scaled FP8 MoE problem (grouped GEMM or fused SwiGLU, e4m3 in, bf16 or quantised e4m3
//! out), its device buffers and the checks that make a bad call one clear error before any launch.
//!
//! Scale layouts (fp32, DeepGEMM's): X's 1x128 scales M-major over all rows of X,
//! `sx[kb * x_rows + row]` (what [`crate::ops::fp8::quantize`] gives for X as one matrix with
//! [`Granularity::Block1x128`]); each expert's W [N, K] 128x128 scales row-major over its tiles,
//! the experts one after another: `sw[(e * ceil(N/128) + n / 128) * ceil(K/128) + k / 128]`
//! (quantising W as one [E * N, K] matrix gives the same when N is a multiple of 128).

use std::ffi::c_void;

use serde::Serialize;

use super::problem::{MoeProblem, Rows};
use super::schedule::{self, TileOrder};
use crate::device::DeviceBuffer;
use crate::error::{Error, Result};
use crate::ops::fp8::Granularity;
use crate::ops::gemm::{alignment, DType};

/// What the fused SwiGLU writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Fp8SwiGlu {
    /// Times each row's routing weight (one f32 per row of X).
    pub routed: bool,
    /// e4m3 codes with 1x128 scales instead of bf16: the down projection's input.
    pub quantize: bool,
}

/// One FP8 MoE call: the rows (contiguous offsets or masked counts, as [`MoeProblem`] holds
/// them), E, N, K, and the SwiGLU epilogue if any.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fp8MoeProblem {
    pub experts: usize,
    pub n: usize,
    pub k: usize,
    pub rows: Rows,
    /// bf16 or f32 (ignored when the SwiGLU quantises its output).
    pub out: DType,
    pub swiglu: Option<Fp8SwiGlu>,
}

impl Fp8MoeProblem {
    /// Tokens sorted by expert, `counts[e]` rows each.
    pub fn contiguous(counts: &[usize], n: usize, k: usize) -> Self {
        Self::from_layout(MoeProblem::contiguous(
            counts,
            n,
            k,
            DType::Bf16,
            DType::Bf16,
        ))
    }

    /// X [E, max_rows, K] with `counts[e]` valid rows each.
    pub fn masked(counts: &[usize], max_rows: usize, n: usize, k: usize) -> Self {
        Self::from_layout(MoeProblem::masked(
            counts,
            max_rows,
            n,
            k,
            DType::Bf16,
            DType::Bf16,
        ))
    }

    fn from_layout(m: MoeProblem) -> Self {
        Fp8MoeProblem {
            experts: m.experts,
            n: m.n,
            k: m.k,
            rows: m.rows,
            out: DType::Bf16,
            swiglu: None,
        }
    }

    pub fn with_swiglu(mut self, routed: bool, quantize: bool) -> Self {
        self.swiglu = Some(Fp8SwiGlu { routed, quantize });
        self
    }

    /// The same rows as a bf16 [`MoeProblem`]: what the scheduling code (prefix kernel, tile
    /// order) reads. Its byte counts are twice FP8's, which only makes the order's "X fits in
    /// L2" test conservative.
    pub fn layout(&self) -> MoeProblem {
        MoeProblem {
            experts: self.experts,
            n: self.n,
            k: self.k,
            rows: self.rows.clone(),
            input: DType::Bf16,
            output: DType::Bf16,
            swiglu: None,
            w_expert_stride: None,
            layer: None,
        }
    }

    pub fn x_rows(&self) -> usize {
        self.layout().x_rows()
    }

    pub fn routed_rows(&self) -> usize {
        self.layout().routed_rows()
    }

    pub fn quantized_out(&self) -> bool {
        self.swiglu.is_some_and(|s| s.quantize)
    }

    /// Bytes of one output element.
    pub fn out_size(&self) -> usize {
        if self.quantized_out() {
            1
        } else {
            self.out.size()
        }
    }

    /// Useful flops: 2·rows·N·K per GEMM (two for the SwiGLU).
    pub fn flops(&self) -> f64 {
        let gemms = if self.swiglu.is_some() { 2.0 } else { 1.0 };
        gemms * 2.0 * self.routed_rows() as f64 * self.n as f64 * self.k as f64
    }

    /// The fewest bytes moved: routed X rows and their scales, every weight and its scales
    /// once, routed output rows (and their scales) written.
    pub fn min_bytes(&self) -> f64 {
        let r = self.routed_rows() as f64;
        let (n, k) = (self.n as f64, self.k as f64);
        let w = if self.swiglu.is_some() { 2.0 } else { 1.0 };
        let kb = k / 128.0;
        r * k
            + 4.0 * r * kb
            + w * self.experts as f64 * (n * k + 4.0 * (n / 128.0).ceil() * kb.ceil())
            + r * n * self.out_size() as f64
            + if self.quantized_out() {
                4.0 * r * (n / 128.0).ceil()
            } else {
                0.0
            }
    }

    /// X's scales: one per row of X and 128 of K.
    pub fn x_scales(&self) -> usize {
        Granularity::Block1x128.scale_count(self.x_rows(), self.k)
    }

    /// One weight tensor's scales: every expert's 128x128 tiles.
    pub fn w_scales(&self) -> usize {
        self.experts * Granularity::Block128x128.scale_count(self.n, self.k)
    }

    /// The quantised output's scales: one per row of X and 128 of N.
    pub fn y_scales(&self) -> usize {
        Granularity::Block1x128.scale_count(self.x_rows(), self.n)
    }

    /// Checks sizes, the rows' host copy, K and the output; one sentence per problem.
    pub fn validate(&self) -> Result<()> {
        self.layout().validate()?;
        if !self.k.is_multiple_of(16) {
            return Err(Error::invalid(format!(
                "K = {} is not a multiple of 16: FP8 rows must be whole 16-byte units for TMA; \
                 pad K with zeros to {}",
                self.k,
                self.k.next_multiple_of(16)
            )));
        }
        if self.quantized_out() && !self.n.is_multiple_of(16) {
            return Err(Error::invalid(format!(
                "N = {} is not a multiple of 16: the quantised SwiGLU output is the down \
                 projection's X, whose rows TMA reads in 16-byte units; pad N or take bf16 output",
                self.n
            )));
        }
        if !matches!(self.out, DType::Bf16 | DType::F32) {
            return Err(Error::invalid(format!(
                "the FP8 MoE kernels write bf16 or f32, not {}",
                self.out
            )));
        }
        if self.swiglu.is_none() && self.out != DType::Bf16 {
            return Err(Error::invalid(
                "the FP8 grouped GEMM writes bf16; f32 output is the SwiGLU's",
            ));
        }
        Ok(())
    }

    pub fn label(&self) -> String {
        let what = match self.swiglu {
            None => "grouped".to_string(),
            Some(s) => format!(
                "swiglu{}{}",
                if s.routed { " routed" } else { "" },
                if s.quantize { " ->e4m3" } else { "" }
            ),
        };
        let mut l = self.layout().label();
        if let Some(i) = l.find(" bf16") {
            l.truncate(i);
        }
        format!("fp8 {what} {l}")
    }
}

/// The device buffers of one FP8 MoE call.
pub struct Fp8MoeOperands<'a> {
    /// X codes [x_rows, K] and their 1x128 scales.
    pub x: &'a DeviceBuffer,
    pub sx: &'a DeviceBuffer,
    /// W (the SwiGLU's W1) codes [E, N, K] and their 128x128 scales.
    pub w: &'a DeviceBuffer,
    pub sw: &'a DeviceBuffer,
    /// The SwiGLU's W3 and its scales.
    pub w3: Option<(&'a DeviceBuffer, &'a DeviceBuffer)>,
    /// Y [x_rows, N]: bf16 / f32, or e4m3 codes (quantised SwiGLU output).
    pub y: &'a DeviceBuffer,
    /// The quantised output's 1x128 scales.
    pub sy: Option<&'a DeviceBuffer>,
    /// i32 offsets (E + 1) or counts (E), read on the GPU.
    pub rows: &'a DeviceBuffer,
    /// A routed SwiGLU's per-row weights (f32).
    pub route: Option<&'a DeviceBuffer>,
    /// Workspace for the tile tables: at least `schedule::sched_bytes(E)`.
    pub sched: &'a DeviceBuffer,
}

/// Checks buffer sizes and TMA alignment against the problem; one sentence per problem.
pub fn check_operands(p: &Fp8MoeProblem, ops: &Fp8MoeOperands) -> Result<()> {
    let w_codes = p.experts * p.n * p.k;
    let mut need = vec![
        ("X", ops.x, p.x_rows() * p.k),
        ("X's scales", ops.sx, 4 * p.x_scales()),
        ("W", ops.w, w_codes),
        ("W's scales", ops.sw, 4 * p.w_scales()),
        ("Y", ops.y, p.x_rows() * p.n * p.out_size()),
        (
            "the rows array",
            ops.rows,
            p.layout().rows_array().len() * 4,
        ),
        (
            "the schedule workspace",
            ops.sched,
            schedule::sched_bytes(p.experts),
        ),
    ];
    if let Some(sw) = p.swiglu {
        let (w3, s3) = ops
            .w3
            .ok_or_else(|| Error::invalid("the FP8 SwiGLU needs W3 and its scales"))?;
        need.push(("W3", w3, w_codes));
        need.push(("W3's scales", s3, 4 * p.w_scales()));
        if sw.routed {
            let r = ops
                .route
                .ok_or_else(|| Error::invalid("a routed SwiGLU needs the routing weights"))?;
            need.push(("the routing weights", r, 4 * p.x_rows()));
        }
        if sw.quantize {
            let s = ops.sy.ok_or_else(|| {
                Error::invalid("a quantised SwiGLU output needs a buffer for its 1x128 scales")
            })?;
            need.push(("the output's scales", s, 4 * p.y_scales()));
        }
    }
    for (name, buf, bytes) in need {
        if buf.bytes() < bytes {
            return Err(Error::invalid(format!(
                "{name} needs {bytes} bytes for this problem but its buffer has {}",
                buf.bytes()
            )));
        }
    }
    let mut aligned = vec![("X", ops.x.ptr()), ("W", ops.w.ptr())];
    if let Some((w3, _)) = ops.w3 {
        aligned.push(("W3", w3.ptr()));
    }
    for (name, ptr) in aligned {
        if alignment(ptr) < 16 {
            return Err(Error::invalid(format!(
                "{name} at {ptr:#x} is not 16-byte aligned, which TMA needs"
            )));
        }
    }
    Ok(())
}

/// Checks host copies of scales: each finite and positive (a NaN, infinite or zero scale would
/// give NaN or zero rows silently). Device scales are the caller's (e.g. straight from kiln's
/// quantisation, which never writes such values).
pub fn check_host_scales(which: &str, scales: &[f32]) -> Result<()> {
    if let Some((i, v)) = scales
        .iter()
        .enumerate()
        .find(|(_, v)| !v.is_finite() || **v <= 0.0)
    {
        return Err(Error::invalid(format!(
            "{which} scale {i} is {v}: scales must be finite and positive (re-quantise the operand)"
        )));
    }
    Ok(())
}

/// The argument block, laid out as `Fp8MoeArgs` in `kernels/moe/fp8_args.cuh`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Fp8MoeArgs {
    pub sched: u64,
    pub y: u64,
    pub sx: u64,
    pub sw: u64,
    pub sw3: u64,
    pub route: u64,
    pub sy: u64,
    pub ldy: i64,
    pub experts: i32,
    pub n: i32,
    pub k: i32,
    pub x_rows: i32,
    pub tiles_n: i32,
    pub group_m: i32,
    pub by_expert: i32,
    pub pad: i32,
}

impl Fp8MoeArgs {
    pub fn new(p: &Fp8MoeProblem, ops: &Fp8MoeOperands, bn: u32, order: TileOrder) -> Self {
        let (group_m, by_expert) = order.args();
        Fp8MoeArgs {
            sched: ops.sched.ptr(),
            y: ops.y.ptr(),
            sx: ops.sx.ptr(),
            sw: ops.sw.ptr(),
            sw3: ops.w3.map_or(0, |w| w.1.ptr()),
            route: ops.route.map_or(0, |r| r.ptr()),
            sy: ops.sy.map_or(0, |s| s.ptr()),
            ldy: p.n as i64,
            experts: p.experts as i32,
            n: p.n as i32,
            k: p.k as i32,
            x_rows: p.x_rows() as i32,
            tiles_n: p.n.div_ceil(bn as usize) as i32,
            group_m,
            by_expert,
            pad: 0,
        }
    }

    pub fn as_param(&mut self) -> *mut c_void {
        self as *mut Fp8MoeArgs as *mut c_void
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn args_match_the_device_layout() {
        // seven pointers, an i64, eight ints
        assert_eq!(std::mem::offset_of!(Fp8MoeArgs, ldy), 56);
        assert_eq!(std::mem::offset_of!(Fp8MoeArgs, experts), 64);
        assert_eq!(std::mem::offset_of!(Fp8MoeArgs, by_expert), 88);
        assert_eq!(std::mem::size_of::<Fp8MoeArgs>(), 96);
    }

    #[test]
    fn scale_counts_follow_deepgemm_layouts() {
        let p = Fp8MoeProblem::contiguous(&[100, 0, 30], 300, 1040);
        assert_eq!(p.x_rows(), 130);
        assert_eq!(p.x_scales(), 130 * 9);
        assert_eq!(p.w_scales(), 3 * 3 * 9);
        assert_eq!(p.y_scales(), 130 * 3);
        let m = Fp8MoeProblem::masked(&[3, 256, 0, 7], 256, 4096, 7168);
        assert_eq!((m.x_rows(), m.routed_rows()), (1024, 266));
        assert_eq!(m.flops(), 2.0 * 266.0 * 4096.0 * 7168.0);
    }

    #[test]
    fn bad_problems_are_one_sentence_each() {
        let e = Fp8MoeProblem::contiguous(&[10, 20], 256, 100)
            .validate()
            .unwrap_err();
        assert!(
            e.to_string().contains("K = 100 is not a multiple of 16") && e.exit_code() == 2,
            "{e}"
        );
        let e = Fp8MoeProblem::contiguous(&[10, 20], 200, 128)
            .with_swiglu(false, true)
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("N = 200"), "{e}");
        assert!(Fp8MoeProblem::contiguous(&[10, 20], 200, 128)
            .with_swiglu(false, false)
            .validate()
            .is_ok());
        let f32_grouped = Fp8MoeProblem {
            out: DType::F32,
            ..Fp8MoeProblem::contiguous(&[1], 128, 128)
        };
        assert!(f32_grouped.validate().is_err());
        let e = check_host_scales("W", &[1.0, f32::NAN]).unwrap_err();
        assert!(e.to_string().contains("W scale 1 is NaN"), "{e}");
        assert!(check_host_scales("X", &[0.5, 2.0]).is_ok());
        assert!(check_host_scales("X", &[0.0]).is_err());
    }
}
