//! The causal backward's block order, longest walk first (`KILN_BWD_LPT`; the argument block's
//! `lpt_heads`, `lpt_block` in `kernels/attention/bwd_fa3_block.cuh`).
//!
//! A causal key block `nb` walks the query blocks from the first that sees its keys: the longer
//! the earlier its keys. The grid's order (key blocks fastest, then key/value head, then batch)
//! starts each head's longest walk first, but the last heads' long walks start only near the end:
//! a list schedule of the walks onto 132 SMs (one CTA each) ends 3.3 % past the mean at d128 B4
//! H32 S4096, 5.6 % at B2 H16 S8192 and 6.6 % at d64 B4 H16 S4096 (128-row steps); the H200
//! profile of the d128 one (ncu, 2026-11-30) had its SMs idle 3.9 % of the cycles, cuDNN's
//! persistent kernel 4.4 %. Longest first over the whole grid ends within 0.2-0.7 % of the mean
//! but puts every head's Q, dO and dQ in flight at once (at B4 H32 S4096 d128, 256 MB of them for
//! a 50 MB L2). So the order runs over chunks of `g` (key/value head, batch) pairs, key block
//! slowest within a chunk: `g` = SMs / key blocks is about the heads the grid's order has in
//! flight, and the same schedule then ends 0.2-0.3 % past the mean.
//!
//! The default at d64 from 4,096 query rows since 2026-11-30 ([`lpt_by_default`]: faster there in
//! two rounds), and at d128 since `bwd_fa3_tail` (which asks for it) became the default there
//! (2026-11-30, ledger B22: d128 B4 H32 S4096 causal 1.039x and 1.020x in one process);
//! [`lpt_by_default`] stays the rule of the versions asked for by name (the older default), so
//! that `--version bwd_fa3_lookahead --version bwd_fa3_tail` times the two orders.

use super::BackwardProblem;

/// Whether the order is taken by default for `p`: at d64 from 4,096 query rows (`bwd_fa3_m128_fma`'s
/// problems), where it measured faster in two rounds (H200, 2026-11-30: d64 B4 H16 S4096 causal
/// 1.027x / 1.029x and 1.035x / 1.020x the grid's order, off and on in alternate processes); at
/// d128 and d256 the same A/B moved within the process-to-process spread (±6 %). The versions
/// that ask for it take it there: `bwd_fa3_tail` (d128), `bwd_fa3_d256_lpt` (d256 causal, the
/// default since 2026-11-30: 1.017x / 1.018x the grid's order in one process).
pub fn lpt_by_default(p: &BackwardProblem) -> bool {
    p.attn.head_dim == 64 && p.attn.seqlen_q >= 4096
}

/// The argument block's `lpt_heads` for `p` with `key_blocks` blocks a head and `sms` SMs: 0 (the
/// grid's order) unless `knob` (`KILN_BWD_LPT`; unset: [`lpt_by_default`]) and `p` is causal, not
/// deterministic and without a window; `dense_grid`: not packed and one CTA a cluster (the
/// packed grid's z is the sequence, and a pair's CTAs must be adjacent key blocks).
pub fn lpt_heads(
    knob: Option<bool>,
    p: &BackwardProblem,
    dense_grid: bool,
    key_blocks: u32,
    sms: u32,
) -> i32 {
    let a = &p.attn;
    let on = knob.unwrap_or_else(|| lpt_by_default(p));
    if !on
        || !a.causal
        || p.deterministic
        || !dense_grid
        || a.window != crate::ops::attention::Window::UNBOUNDED
    {
        return 0;
    }
    (sms / key_blocks.max(1)).max(1) as i32
}

/// The (key block, key/value head, batch) of linear block `l` of a grid `nx` x `ny` x `nz` under
/// `lpt_heads` = `g` > 0: the device's `lpt_block`, for the tests.
pub fn lpt_block(l: u32, g: u32, nx: u32, ny: u32, nz: u32) -> (u32, u32, u32) {
    let pairs = ny * nz;
    let chunk = l / (g * nx);
    let r = l - chunk * g * nx;
    let gc = g.min(pairs - chunk * g);
    let pair = chunk * g + r % gc;
    (r / gc, pair % ny, pair / ny)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::{AttentionProblem, Window};

    fn causal(b: usize, h: usize, s: usize, d: usize) -> BackwardProblem {
        let mut a = AttentionProblem::new(b, h, s, d);
        a.causal = true;
        BackwardProblem::new(a, false)
    }

    #[test]
    fn every_block_is_taken_once_longest_walks_first_within_a_chunk() {
        for (g, nx, ny, nz) in [
            (4, 32, 32, 4),
            (2, 64, 16, 2),
            (3, 5, 7, 2),
            (1, 9, 4, 1),
            (16, 8, 5, 3),
        ] {
            let mut seen = std::collections::HashSet::new();
            let mut last_nb_of_chunk = std::collections::HashMap::new();
            for l in 0..nx * ny * nz {
                let (nb, hk, b) = lpt_block(l, g, nx, ny, nz);
                assert!(nb < nx && hk < ny && b < nz, "{l}: {nb} {hk} {b}");
                assert!(seen.insert((nb, hk, b)), "{l} twice");
                // within a chunk, key blocks never go back: the longest causal walks first
                let chunk = (hk + ny * b) / g;
                let prev = last_nb_of_chunk.insert(chunk, nb).unwrap_or(0);
                assert!(nb >= prev, "g {g}: block {l} key block {nb} after {prev}");
            }
            assert_eq!(seen.len() as u32, nx * ny * nz);
        }
        // g = 1: the grid's own order
        for l in 0..6 * 4 * 2 {
            assert_eq!(lpt_block(l, 1, 6, 4, 2), (l % 6, (l / 6) % 4, l / 24));
        }
    }

    #[test]
    fn only_causal_dense_problems_get_an_order_of_heads_in_flight() {
        let on = Some(true);
        let p = causal(4, 32, 4096, 128);
        assert_eq!(lpt_heads(on, &p, true, 32, 132), 4);
        assert_eq!(lpt_heads(on, &causal(2, 16, 8192, 128), true, 64, 132), 2);
        assert_eq!(lpt_heads(on, &causal(1, 16, 65536, 64), true, 512, 132), 1);
        assert_eq!(lpt_heads(Some(false), &p, true, 32, 132), 0);
        assert_eq!(lpt_heads(on, &p, false, 32, 132), 0);
        let det = BackwardProblem::new(p.attn, true);
        assert_eq!(lpt_heads(on, &det, true, 32, 132), 0);
        let free = BackwardProblem::new(AttentionProblem::new(4, 32, 4096, 128), false);
        assert_eq!(lpt_heads(on, &free, true, 32, 132), 0);
        let mut w = p;
        w.attn.window = Window {
            left: 128,
            right: 0,
        };
        assert_eq!(lpt_heads(on, &w, true, 32, 132), 0);
    }

    #[test]
    fn the_default_takes_the_order_at_d64_from_4096_rows_only() {
        // measured faster in two rounds there (d64 B4 H16 S4096 causal); d128, d256 and shorter
        // d64 walks keep the grid's order unless the knob says 1
        assert_eq!(lpt_heads(None, &causal(4, 16, 4096, 64), true, 32, 132), 4);
        assert_eq!(
            lpt_heads(None, &causal(1, 16, 16384, 64), true, 128, 132),
            1
        );
        assert_eq!(lpt_heads(None, &causal(4, 16, 2048, 64), true, 16, 132), 0);
        assert_eq!(lpt_heads(None, &causal(4, 32, 4096, 128), true, 32, 132), 0);
        assert_eq!(lpt_heads(None, &causal(4, 16, 4096, 256), true, 64, 132), 0);
        assert_eq!(
            lpt_heads(Some(false), &causal(4, 16, 4096, 64), true, 32, 132),
            0
        );
        let det = BackwardProblem::new(causal(4, 16, 4096, 64).attn, true);
        assert_eq!(lpt_heads(None, &det, true, 32, 132), 0);
    }
}
