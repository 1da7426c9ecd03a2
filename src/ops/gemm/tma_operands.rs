//! The A and B tensor maps every TMA-fed GEMM rung loads through: 128B-swizzled boxes 64 deep in
//! K; the K-major operand in one box of `rows` rows, the MN-major one in 64 x 64 boxes (one per
//! 64 elements of M or N, read through the descriptor's transpose bit). Global extents are the
//! true M, N, K, so TMA zero-fills whatever lies outside.

use super::GemmProblem;
use crate::device::{Tma2d, TmaSwizzle};

/// K depth of one box (one 128-byte swizzle row of 16-bit elements).
pub const BK: u32 = 64;
/// Width of a box along M or N for the MN-major operand.
pub const MN_BOX: u32 = 64;

/// Maps of A and B at these addresses; `a_rows` / `b_rows` are the M / N extents of one
/// K-major box (the block tile, or its share per CTA of a cluster).
pub fn operand_maps(p: &GemmProblem, a: u64, b: u64, a_rows: u32, b_rows: u32) -> (Tma2d, Tma2d) {
    let es = p.input.size() as u64;
    let (m, n, k) = (p.m as u64, p.n as u64, p.k as u64);
    let map = |addr, dims, ld: usize, box_dims| Tma2d {
        dtype: p.input.tma(),
        addr,
        dims,
        row_stride_bytes: ld as u64 * es,
        box_dims,
        swizzle: TmaSwizzle::B128,
    };
    let ta = if p.layout.a_k_major() {
        map(a, [k, m], p.lda, [BK, a_rows])
    } else {
        map(a, [m, k], p.lda, [MN_BOX, BK])
    };
    let tb = if p.layout.b_k_major() {
        map(b, [k, n], p.ldb, [BK, b_rows])
    } else {
        map(b, [n, k], p.ldb, [MN_BOX, BK])
    };
    (ta, tb)
}
