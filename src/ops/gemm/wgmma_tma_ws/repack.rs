//! Copies made before the GEMM: operands TMA cannot address (and a column-major A with few rows)
//! into scratch with 128-byte rows, where the producer does not read them in place (`inplace`),
//! and, under `KILN_WGMMA_INPLACE=0` only, C through scratch where its rows cost vector stores
//! (the context's `gemm_a_pack`, `gemm_b_pack`, `gemm_c_pack`: grown on demand, kept across
//! launches).

use super::{Prepared, ReadA};
use crate::device::{Context, Scratch};
use crate::error::{Error, Result};
use crate::ops::gemm::{GemmProblem, Layout};

/// Elements of C below which its scalar stores are left in place rather than paying a copy's
/// launch (H100, ledger #49: 1023x1023x1024, 1.0 M elements, gained 2.7 us through scratch;
/// 500^3, 0.25 M, lost 2.1 us with it and the operand copies together).
const C_PACK_MIN: usize = 1 << 19;

/// Whether C (at `c`) is large and off 16 bytes: its rows cost the register epilogue its vector
/// and TMA stores (a row stride or base off 16 bytes) and C is large enough (`C_PACK_MIN`
/// elements) to repay a copy's launch, up to `MAX_PACK_BYTES`. Such a C went through scratch with
/// 128-byte rows before 2026-11-29, and still does under `KILN_WGMMA_INPLACE=0`; else a ping-pong
/// tile, whose register epilogue would store it, runs its cooperative twin's row store instead.
/// (An N off 16 bytes alone keeps C in place: the register epilogue's stores stay vectors but a
/// row's last.)
pub fn c_through_scratch(p: &GemmProblem, c: u64) -> bool {
    let oes = p.output.size();
    needs_pack(p.ldc, oes, Some(c))
        && p.m * p.n >= C_PACK_MIN
        && pack_shape(p.m, p.n, oes).1 <= MAX_PACK_BYTES
}

/// Where the kernel writes C: `c` itself, or the scratch `prep` writes it through
/// ([`c_through_scratch`], `KILN_WGMMA_INPLACE=0`), filled from C first when beta != 0 and
/// written by the `KILN_EPI=0` epilogue. 4096x4095x4096 ran 286 us with C's scalar stores against
/// 173 at 4096^3.
pub(super) fn c_target(ctx: &Context, prep: &Prepared, c: u64) -> Result<u64> {
    let Some(pld) = prep.c else {
        return Ok(c);
    };
    let p = &prep.p;
    let oes = p.output.size();
    let dst = ctx
        .scratch
        .gemm_c_pack
        .at_least(ctx, pack_shape(p.m, p.n, oes).1)?;
    if p.beta != 0.0 {
        // SAFETY: C spans M rows of N elements at pitch ldc (validated); the scratch M x pld.
        unsafe { crate::ops::gemm::pack_rows::launch(ctx, oes, c, p.ldc, dst, pld, p.m, p.n) }?;
    }
    Ok(dst)
}

/// The largest padded copy of one operand `repack` makes; a bigger operand that TMA cannot
/// address is refused (`supports`) and the dispatcher falls to a rung without TMA.
pub const MAX_PACK_BYTES: usize = 2 << 30;

/// Whether TMA cannot read an operand as stored: a row stride that is not a multiple of 16
/// bytes, or (`ptr`, when known) a base that is not 16-byte aligned.
pub(super) fn needs_pack(ld: usize, es: usize, ptr: Option<u64>) -> bool {
    !(ld * es).is_multiple_of(16) || ptr.is_some_and(|p| crate::ops::gemm::alignment(p) < 16)
}

/// (padded leading dimension, bytes) of the copy `repack` makes of a stored `rows` x `cols`
/// operand: rows padded to 128 bytes (64 elements), so each TMA box row is one line.
pub(super) fn pack_shape(rows: usize, cols: usize, es: usize) -> (usize, usize) {
    let ld = cols.next_multiple_of(128 / es);
    (ld, rows * ld * es)
}

/// The most scratch the copies of A, B and C can take for `p` (each operand whose row stride TMA
/// cannot read, up to [`MAX_PACK_BYTES`]), counted before a run to see that it fits.
pub fn pack_bytes(p: &GemmProblem) -> u64 {
    let (ies, oes) = (p.input.size(), p.output.size());
    [
        (p.lda, p.a_storage(), ies),
        (p.ldb, p.b_storage(), ies),
        (p.ldc, (p.m, p.n), oes),
    ]
    .into_iter()
    .filter(|&(ld, _, es)| needs_pack(ld, es, None))
    .map(|(_, (rows, cols), es)| pack_shape(rows, cols, es).1.min(MAX_PACK_BYTES) as u64)
    .sum()
}

/// The leading dimension of the copy an operand stored `(rows, cols)` at `ld` is read from, or
/// `None` when it is read in place (`needs_pack`; `ptr` when known).
pub(super) fn packed_ld(
    ld: usize,
    (rows, cols): (usize, usize),
    es: usize,
    ptr: Option<u64>,
) -> Option<usize> {
    needs_pack(ld, es, ptr).then(|| pack_shape(rows, cols, es).0)
}

/// Whether A is read from a row-major copy (`transpose_rows`): a column-major A with fewer
/// than 128 rows, not a multiple of 64, where its MN-major boxes cost more than the copy (about
/// 3.8 us at 8x4096 A: a launch, and the GEMM waits for it). A row-major copy's boxes are
/// K-contiguous and trimmed to M (`a_box_rows`). H100, ledger #56 (us, read in
/// place -> from the copy, at N = K = 4096 unless said):
/// - a tile with at most 8 rows of M (M mod 64 <= 8), whose box is 56 or more elements of zero
///   fill in its contiguous dimension: CC M = 8 27.1 -> 20.7, M = 72 26.1 -> 22.5,
///   8x14336x4096 56.1 -> 48.9;
/// - B row-major too (CR), whose small-M problems ran slowly in place at every M measured:
///   M = 8 27.1 -> 20.1, 40 26.0 -> 20.5, 100 30.4 -> 21.9.
///
/// CC with more rows per tile lost (M = 16 19.9 -> 20.6, 32 19.7 -> 20.7, 96 19.4 -> 22.6)
/// and reads A in place.
pub fn transposes_a(p: &GemmProblem) -> bool {
    let tail = p.m % 64;
    !p.layout.a_k_major() && p.m < 128 && tail != 0 && (p.layout.b_row_major() || tail <= 8)
}

/// `layout` with A row-major (the layout of a problem whose A is read from its transposed copy).
pub(super) fn with_a_row_major(layout: Layout) -> Layout {
    match layout {
        Layout::CC => Layout::RC,
        Layout::CR => Layout::RR,
        other => other,
    }
}

/// The problem as the kernel reads it: canonical, with A row-major where it is read from a
/// transposed copy (`transposes_a`), and the leading dimensions of the operands `repack` copies
/// (row strides TMA cannot take) replaced by their copies'. Choices (tuned or heuristic) are
/// made for it.
pub fn as_read(p: &GemmProblem) -> GemmProblem {
    let mut q = p.canonical();
    let es = q.input.size();
    if transposes_a(&q) {
        q.layout = with_a_row_major(q.layout);
        q.lda = pack_shape(q.m, q.k, es).0;
    } else {
        q.lda = packed_ld(q.lda, q.a_storage(), es, None).unwrap_or(q.lda);
    }
    q.ldb = packed_ld(q.ldb, q.b_storage(), es, None).unwrap_or(q.ldb);
    q
}

/// The operands the kernel reads (`prep`'s copies of A at `a` and B at `b`, made on the stream,
/// or the operands themselves). An operand TMA cannot address (`needs_pack`: 1023x1023x1023,
/// 777x1234x999, a base off 16 bytes) is copied first into scratch with 128-byte rows
/// (`pack_rows`: one read and one write of the operand, before the GEMM reads it); a
/// column-major A with few rows (`transposes_a`) is copied transposed (`transpose_rows`); the
/// others are read in place.
pub(super) fn repack(ctx: &Context, prep: &Prepared, a: u64, b: u64) -> Result<(u64, u64)> {
    let p = &prep.p;
    let es = p.input.size();
    // The operand at `src`, stored `(rows, cols)` at `ld`, copied to rows `pld` apart.
    let copy = |scratch: &Scratch, src: u64, ld: usize, (rows, cols): (usize, usize), pld| {
        let dst = scratch.at_least(ctx, pack_shape(rows, cols, es).1)?;
        // SAFETY: the source spans `rows` rows of `cols` elements at pitch `ld` inside the
        // caller's operand (validated); the scratch holds `rows` x `pld` elements and is only
        // read by this launch, after the copy on the same stream.
        unsafe { crate::ops::gemm::pack_rows::launch(ctx, es, src, ld, dst, pld, rows, cols) }?;
        Ok::<u64, Error>(dst)
    };
    let a = match prep.a {
        ReadA::InPlace => a,
        ReadA::Packed(pld) => copy(&ctx.scratch.gemm_a_pack, a, p.lda, p.a_storage(), pld)?,
        ReadA::Transposed(pld) => {
            let dst = ctx
                .scratch
                .gemm_a_pack
                .at_least(ctx, pack_shape(p.m, p.k, es).1)?;
            // SAFETY: A is stored as K rows of M elements at pitch lda (validated); the scratch
            // holds M x pld elements and is only read by this launch, after the copy on the
            // stream.
            unsafe { crate::ops::gemm::transpose_rows::launch(ctx, a, p.lda, dst, pld, p.k, p.m) }?;
            dst
        }
    };
    let b = match prep.b {
        None => b,
        Some(pld) => copy(&ctx.scratch.gemm_b_pack, b, p.ldb, p.b_storage(), pld)?,
    };
    Ok((a, b))
}

#[cfg(test)]
mod tests {
    use super::super::bf16;
    use super::*;
    use crate::ops::gemm::DType;

    #[test]
    fn c_goes_through_scratch_only_when_its_rows_cost_vector_stores() {
        let big = bf16(1023, 1023, 1024, Layout::RC);
        assert!(c_through_scratch(&big, 0x1000));
        // an aligned C, or only N off 16 bytes (rows still aligned): in place
        assert!(!c_through_scratch(
            &bf16(1024, 1024, 1024, Layout::RC),
            0x1000
        ));
        assert!(!c_through_scratch(
            &GemmProblem { ldc: 1024, ..big },
            0x1000
        ));
        // a base off 16 bytes
        assert!(c_through_scratch(&GemmProblem { ldc: 1024, ..big }, 0x1002));
        // too small to repay the copy
        assert!(!c_through_scratch(&bf16(500, 500, 500, Layout::RC), 0x1000));
        // f32 C with an odd ldc
        let f = GemmProblem::new(1023, 1023, 64, Layout::RC, DType::Bf16, DType::F32);
        assert!(c_through_scratch(&f, 0x1000));
    }

    #[test]
    fn a_column_major_a_with_few_rows_is_read_row_major() {
        for (l, read, ms) in [
            (Layout::CC, Layout::RC, &[8, 72][..]),
            (Layout::CR, Layout::RR, &[8, 40, 72, 127][..]),
        ] {
            for &m in ms {
                let q = as_read(&bf16(m, 4096, 1000, l));
                assert_eq!((q.layout, q.lda), (read, 1024), "{l} {m}");
                assert!(!transposes_a(&q));
            }
            // whole 64-row tiles, many rows, and a 1-row A that is already a row stay
            for m in [64, 128, 4096] {
                assert_eq!(as_read(&bf16(m, 4096, 1024, l)).layout, l, "{l} {m}");
            }
            let row = GemmProblem {
                lda: 1,
                ..bf16(1, 4096, 1024, l)
            };
            assert_eq!(as_read(&row).layout, read);
            assert_eq!(as_read(&row).lda, 1024);
        }
        assert!(!transposes_a(&bf16(8, 4096, 4096, Layout::RC)));
        // CC with more than 8 rows in the last tile: read in place, where the copy lost
        for m in [16, 32, 96, 127] {
            assert!(!transposes_a(&bf16(m, 4096, 4096, Layout::CC)), "{m}");
        }
    }
}
