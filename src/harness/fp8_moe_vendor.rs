//! cuBLASLt's per-expert loop of the FP8 grouped GEMM's work: one block-scaled cuBLASLt GEMM per
//! expert on the grouped bench's own operands (its rows of X, its W, its scales), each with its
//! fastest algorithm, launched one after another. cuBLASLt has no grouped block-scaled FP8 GEMM
//! (torch 2.11's `_scaled_grouped_mm` refuses block scales on sm_90), so this loop is the vendor's
//! way to do the same work and issue 45's peer for the grouped target; timed in the same process
//! as kiln's kernel, interleaved launch by launch (`kiln fp8 bench --grouped`).

use crate::device::{Context, DeviceBuffer};
use crate::error::Result;
use crate::harness::bench::Bench;
use crate::harness::verify::rel_l2;
use crate::ops::fp8::{Fp8Problem, ScaleMode};
use crate::ops::gemm::DType;
use crate::ops::moe::fp8_problem::{Fp8MoeOperands, Fp8MoeProblem};
use crate::reference::data::HostData;
use crate::vendor::cublaslt_fp8::LtFp8;

/// The loop's name in the tables.
pub const NAME: &str = "cublaslt_loop";

/// Above this many experts the loop is not planned: each expert costs cuBLASLt a plan, an
/// algorithm search and a 32 MB workspace (decode's 256 experts would cost more than the run).
pub const MAX_EXPERTS: usize = 16;

/// The planned loop: per expert with rows, its plan and operand addresses; its scales (the A
/// scales rearranged for the expert's rows alone, cuBLASLt reading them with the expert's M as
/// their stride) and its own output, laid out as kiln's Y.
pub struct VendorLoop {
    gemms: Vec<(LtFp8, [u64; 3])>,
    _scales: Vec<DeviceBuffer>,
    out: DeviceBuffer,
    /// The rows of X (and Y) each expert owns: (first row, rows).
    spans: Vec<(usize, usize)>,
}

/// Why the loop is not run for `p` (the table's note), or `None` when it is.
pub fn refusal(p: &Fp8MoeProblem) -> Option<String> {
    if p.swiglu.is_some() {
        Some("cuBLASLt has no fused SwiGLU: its loop is timed for the plain grouped GEMM".into())
    } else if p.out != DType::Bf16 {
        Some(format!(
            "cuBLASLt's per-expert loop is timed for bf16 output, not {}",
            p.out
        ))
    } else if p.experts > MAX_EXPERTS {
        Some(format!(
            "cuBLASLt's per-expert loop is planned for at most {MAX_EXPERTS} experts, not {}",
            p.experts
        ))
    } else {
        None
    }
}

impl VendorLoop {
    /// Plans one cuBLASLt GEMM per expert with rows on `ops`'s X, W and scales (the layouts of
    /// `ops::moe::fp8_problem`), each with its fastest algorithm on `run`'s flusher.
    pub fn new(
        ctx: &Context,
        run: &Bench,
        p: &Fp8MoeProblem,
        ops: &Fp8MoeOperands,
    ) -> Result<VendorLoop> {
        let (n, k, x_rows) = (p.n, p.k, p.x_rows());
        let (kb, nb) = (k.div_ceil(128), n.div_ceil(128));
        let sx: Vec<f32> = ops.sx.download(p.x_scales())?;
        let sw: Vec<f32> = ops.sw.download(p.w_scales())?;
        let out = ctx.alloc(x_rows * n * 2)?;
        let spans = p.layout().spans();
        let (mut gemms, mut scales) = (Vec::new(), Vec::new());
        for (e, &(s0, rows)) in spans.iter().enumerate() {
            if rows == 0 {
                continue;
            }
            // kiln's A scales are M-major over all of X (sx[kb * x_rows + row]); the expert's GEMM
            // reads sa[kb * rows + row]
            let sa: Vec<f32> = (0..kb)
                .flat_map(|b| (0..rows).map(move |r| (b, r)))
                .map(|(b, r)| sx[b * x_rows + s0 + r])
                .collect();
            let sb = &sw[e * nb * kb..(e + 1) * nb * kb];
            let (sa, sb) = (DeviceBuffer::from_host(&sa)?, DeviceBuffer::from_host(sb)?);
            let q = Fp8Problem::new(rows, n, k, DType::Bf16, ScaleMode::Block);
            let mut lt = LtFp8::new(ctx, &q, sa.ptr(), sb.ptr())?;
            let ptrs = [
                ops.x.ptr() + (s0 * k) as u64,
                ops.w.ptr() + (e * n * k) as u64,
                out.ptr() + (s0 * n * 2) as u64,
            ];
            lt.select(ctx, &run.flusher, ptrs[0], ptrs[1], ptrs[2])?;
            gemms.push((lt, ptrs));
            scales.extend([sa, sb]);
        }
        Ok(VendorLoop {
            gemms,
            _scales: scales,
            out,
            spans,
        })
    }

    /// Enqueues every expert's GEMM, in expert order, on the context's stream.
    pub fn launch(&self, ctx: &Context) -> Result<()> {
        for (lt, [a, b, c]) in &self.gemms {
            lt.launch(ctx, *a, *b, *c)?;
        }
        Ok(())
    }

    /// ‖kiln − cuBLASLt‖ / ‖cuBLASLt‖ over every expert's rows of Y (bf16, [x_rows, N]), so the
    /// race is between equal results.
    pub fn rel_diff(&self, p: &Fp8MoeProblem, y: &DeviceBuffer) -> Result<f64> {
        let bytes = p.x_rows() * p.n * 2;
        let get = |b: &DeviceBuffer| -> Result<HostData> {
            Ok(HostData::from_bytes(DType::Bf16, &b.download::<u8>(bytes)?))
        };
        let (kiln, lt) = (get(y)?, get(&self.out)?);
        let (mut d2, mut r2) = (0.0, 0.0);
        for &(s0, rows) in &self.spans {
            for i in s0 * p.n..(s0 + rows) * p.n {
                let (x, v) = (kiln.get(i), lt.get(i));
                d2 += (x - v) * (x - v);
                r2 += v * v;
            }
        }
        Ok(rel_l2(d2, r2))
    }
}
