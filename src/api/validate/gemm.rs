//! GEMM arguments: `c = alpha * a @ b + beta * c` from three 2-D views to a `GemmProblem`, the
//! storage order and leading dimension of each operand read from its strides. A column-major
//! `c` is computed as cᵀ = bᵀ aᵀ, so any `c` with one unit stride is written in place.

use super::{
    dtype_in, err, finite, float, no_alias, on_device, rank, same_dtype, writable, Operand, HALF,
    OUTPUTS,
};
use crate::api::info::TensorInfo;
use crate::api::options::GemmOptions;
use std::hash::Hash;

use crate::error::{ArgumentKind, Result};
use crate::ops::gemm::{GemmProblem, Layout};

/// A checked GEMM: the problem and the memory of A, B and C as the problem names them (after
/// the swap of a column-major `c`, A is the caller's `b`).
#[derive(Debug, Clone, PartialEq)]
pub struct GemmPlan {
    pub problem: GemmProblem,
    pub a: Operand,
    pub b: Operand,
    pub c: Operand,
    /// Whether the caller's `c` was column-major and the product runs transposed.
    pub transposed: bool,
}

impl GemmPlan {
    /// What the launch depends on besides data: the problem, the version asked for, and the
    /// bases' alignment (some versions refuse unaligned operands).
    pub fn key<'v>(&self, version: Option<&'v str>) -> impl Hash + Eq + std::fmt::Debug + 'v {
        (
            self.problem.key(),
            version,
            [self.a, self.b, self.c].map(|o| o.align_class()),
        )
    }

    /// The memory a launch of the plan reads and writes (with the key, what a replayed graph
    /// of it must match); written out field by field so that a new operand must be added here.
    pub fn addresses(&self) -> impl Hash {
        let GemmPlan {
            problem: _,
            a,
            b,
            c,
            transposed,
        } = *self;
        (a, b, c, transposed)
    }
}

const TAKES: &str = "kiln's GEMM takes 2-D `a` [M, K], `b` [K, N] and `c` [M, N]";

/// (row-major, leading dimension) of a 2-D operand called `arg`: row-major when its last
/// stride is 1, column-major when its first is, either way with rows (columns) that do not
/// overlap. A dimension of extent 1 fits either order.
fn orientation(arg: &str, t: &TensorInfo) -> Result<(bool, usize)> {
    let (r, c) = (t.shape()[0], t.shape()[1]);
    let (s0, s1) = (t.strides()[0], t.strides()[1]);
    if s1 == 1 || c == 1 {
        let ld = if r == 1 { c } else { s0 };
        if ld >= c {
            return Ok((true, ld));
        }
    }
    if s0 == 1 || r == 1 {
        let ld = if c == 1 { r } else { s1 };
        if ld >= r {
            return Ok((false, ld));
        }
    }
    Err(err(
        arg,
        ArgumentKind::Stride,
        format!(
            "`{arg}` has strides {} for shape {}; kiln's GEMM reads matrices stored row- or column-major (one stride 1, the other at least that dimension's extent)",
            t.strides_text(),
            t.shape_text()
        ),
    ))
}

fn layout(a_row: bool, b_row: bool) -> Layout {
    match (a_row, b_row) {
        (true, false) => Layout::RC,
        (false, true) => Layout::CR,
        (true, true) => Layout::RR,
        (false, false) => Layout::CC,
    }
}

/// `a` and `b` checked: [M, N, K] and each one's (row-major, leading dimension).
struct Inputs {
    mnk: [usize; 3],
    a: (bool, usize),
    b: (bool, usize),
}

fn inputs(a: &TensorInfo, b: &TensorInfo) -> Result<Inputs> {
    rank("a", a, 2, TAKES)?;
    rank("b", b, 2, TAKES)?;
    dtype_in("a", a, &HALF, "kiln's GEMM takes bf16 or f16 inputs")?;
    same_dtype("b", b, "a", a, "kiln's GEMM takes `a` and `b` of one dtype")?;
    let (m, k) = (a.shape()[0], a.shape()[1]);
    let (k2, n) = (b.shape()[0], b.shape()[1]);
    if k != k2 {
        return Err(err(
            "b",
            ArgumentKind::Shape,
            format!("`a` is {m}x{k} but `b` is {k2}x{n}: inner dimensions differ"),
        ));
    }
    Ok(Inputs {
        mnk: [m, n, k],
        a: orientation("a", a)?,
        b: orientation("b", b)?,
    })
}

/// The shape `[M, N]` of `a @ b`, with every check [`gemm`] makes of `a` and `b`: for bindings
/// that allocate the output first.
pub fn gemm_output_shape(a: &TensorInfo, b: &TensorInfo) -> Result<[usize; 2]> {
    let [m, n, _] = inputs(a, b)?.mnk;
    Ok([m, n])
}

/// Checks `c = alpha * a @ b + beta * c` for a handle on GPU `device`; `None` when the output
/// is empty (nothing to launch).
pub fn gemm(
    device: usize,
    a: &TensorInfo,
    b: &TensorInfo,
    c: &TensorInfo,
    opts: &GemmOptions,
) -> Result<Option<GemmPlan>> {
    for (name, t) in [("a", a), ("b", b), ("c", c)] {
        on_device(name, t, device)?;
    }
    let Inputs {
        mnk: [m, n, k],
        a: (a_row, lda),
        b: (b_row, ldb),
    } = inputs(a, b)?;
    rank("c", c, 2, TAKES)?;
    dtype_in("c", c, &OUTPUTS, "kiln's GEMM writes bf16, f16 or f32")?;
    if c.shape() != [m, n] {
        return Err(err(
            "c",
            ArgumentKind::Shape,
            format!(
                "`c` is {}x{} but `a` @ `b` is {m}x{n}",
                c.shape()[0],
                c.shape()[1]
            ),
        ));
    }
    finite("alpha", opts.alpha)?;
    finite("beta", opts.beta)?;
    if m == 0 || n == 0 {
        return Ok(None);
    }
    if k == 0 {
        return Err(err(
            "a",
            ArgumentKind::Shape,
            format!("`a` is {m}x0: K is 0, and kiln's GEMM needs K >= 1"),
        ));
    }
    writable("c", c)?;
    no_alias("c", c, &[("a", a), ("b", b)])?;
    let (s0, s1) = (c.strides()[0], c.strides()[1]);
    let c_row = s1 == 1 || n == 1;
    if !(c_row || s0 == 1 || m == 1) {
        return Err(err(
            "c",
            ArgumentKind::Stride,
            format!(
                "`c` has strides {} for shape {}; kiln's GEMM writes a `c` stored row- or column-major (one stride 1)",
                c.strides_text(),
                c.shape_text()
            ),
        ));
    }
    let (input, output) = (float("a", a)?, float("c", c)?);
    let plan = if c_row {
        let ldc = if m == 1 { n } else { s0 };
        GemmPlan {
            problem: GemmProblem {
                m,
                n,
                k,
                layout: layout(a_row, b_row),
                input,
                output,
                lda,
                ldb,
                ldc,
                alpha: opts.alpha,
                beta: opts.beta,
            },
            a: Operand::of(a),
            b: Operand::of(b),
            c: Operand::of(c),
            transposed: false,
        }
    } else {
        // cᵀ [N, M] = bᵀ [N, K] · aᵀ [K, M]: a transpose flips an operand's order, keeps its ld.
        let ldc = if n == 1 { m } else { s1 };
        GemmPlan {
            problem: GemmProblem {
                m: n,
                n: m,
                k,
                layout: layout(!b_row, !a_row),
                input,
                output,
                lda: ldb,
                ldb: lda,
                ldc,
                alpha: opts.alpha,
                beta: opts.beta,
            },
            a: Operand::of(b),
            b: Operand::of(a),
            c: Operand::of(c),
            transposed: true,
        }
    };
    plan.problem.validate()?;
    Ok(Some(plan))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{DType, RawTensor};

    fn t(ptr: u64, shape: &[usize]) -> TensorInfo {
        RawTensor::contiguous(ptr, DType::Bf16, shape, 0)
            .info("t", false)
            .unwrap()
    }

    #[test]
    fn keys_tell_apart_what_changes_the_kernel_choice() {
        let opts = GemmOptions::default();
        let plan = |a| {
            gemm(
                0,
                &t(a, &[64, 64]),
                &t(0x20000, &[64, 64]),
                &t(0x40000, &[64, 64]),
                &opts,
            )
            .unwrap()
            .unwrap()
        };
        // the same problem on other 256-byte aligned memory is the same launch
        assert_eq!(plan(0x10000).key(None), plan(0x10100).key(None));
        // an operand on 2 bytes may be refused by the TMA versions: another launch
        assert_ne!(plan(0x10000).key(None), plan(0x10002).key(None));
        assert_ne!(
            plan(0x10000).key(None),
            plan(0x10000).key(Some("simt_naive"))
        );
    }
}
