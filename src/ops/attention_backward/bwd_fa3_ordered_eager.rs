//! Host side of `bwd_fa3_lookahead.cu` with the deterministic mode's dQ through a writer warp
//! (the define `KILN_BWD_DET_WRITER=2`), one writer: the deterministic mode's default at d64 and
//! d128 from 2026-11-29 until `bwd_fa3_ordered_w2` (the same kernels with two writer warps, ledger
//! D12, D13) took its place on 2026-11-30; kept by name for the A/B, no longer a default. The
//! ordered atomics it replaces have the consumers add dQ with per-thread atomics in key-block
//! order: key block n spins on the (head, query block) counter until it reads n, both warpgroups
//! meet, add, `__threadfence`, meet again, and bump it. An H200 profile of them (18d83d3, d128 B2
//! H16 S8192, 326.8 TFLOPS: 0.53x the non-deterministic run) put 23 % of the stall samples on the
//! fences, 11 % on the barrier behind the spin and 8 % on the atomics, all on the MMA
//! warpgroups' path; and every key block walks the query blocks in the same order, so block n
//! reaches a query block about when block n - 1 does and waits for its add (causal: block n
//! reaches it 2n steps before block 0 and waits for all of them).
//!
//! Here the deterministic mode's consumers stage dQ in the non-deterministic path's tile and hand
//! it to warp 1 of the producer warpgroup (named barriers, no fence but the tile's), which waits
//! for the counter, adds the tile by TMA reduce and hands the tile back once read. The order of
//! key blocks per query block is fixed but swizzled (`DetOrder`): causal, the last key block
//! first (its walk reaches the query block first); non-causal, the walks rotated so that the
//! blocks of one wave reach any query block a few steps apart, in the order they are added. The
//! writer bumps each counter as soon as its adds are complete and waits for the next block's turn
//! while the consumers compute it, so that they wait for it only while it issues a block's adds
//! and the reduce reads the tiles. d64 takes `bwd_fa3_m128_rows`' tile (dQ split by query rows:
//! the two tiles of a block add to different rows, both reduces issued at once), d128
//! `bwd_fa3_lookahead`'s. Problems that are not deterministic run those kernels (no variant of
//! their own).
//!
//! History: `bwd_fa3_ordered_dq` (the define 1, removed 2026-11-30; ledger B10, B11, B17) bumped
//! a block's counter only once the next block's adds were issued. An H200 profile of it (ncu, d64
//! B4 H16 S4096, 2026-11-29) put 29.7 % of all stall samples on the consumers' wait for the
//! writer's hand-back and found 68 % of the counters not yet due: there the order has a query
//! block's adders one step apart, and with the late bump every hop cost the previous adder's next
//! step. Measured (H200, 9af92b5): the eager writer 1.30x the late one at d64 (0.92x the
//! non-deterministic default), 1.04x at d128 (0.81x), 1.10x causal (0.85x).

use super::bwd_fa3_m128::m128_wins;
use super::bwd_fa3_wgmma::wgmma_knobs;
use super::bwd_fa3_wgmma::{launch_tile, supports_tile, DetWriter, WgmmaBwdTile, BWD_WGMMA_DIMS};
use super::knobs::{Knob, Knobs};
use super::{
    bwd_fa3_lookahead, bwd_fa3_m128, bwd_fa3_m128_rows, AttentionBackwardKernel, AttnBwdArgs,
    BackwardOperands, BackwardProblem, DetOrder,
};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::attention::{AttentionProblem, Window, DTYPES};
use crate::overrides::AttentionOverrides;

/// The argument block's deterministic fields for `p` on a kernel with a dQ writer: the order of
/// adds (`DetOrder`), the SMs its rotated groups assume and, with `det_lpt` (`KILN_BWD_DET_LPT`),
/// the causal launch order ([`det_lpt_heads`]); `key_blocks` a head, `sms` on the device,
/// `dense_grid`: not packed and one CTA a cluster. (The writer warps: `Sched::det_writers`.)
pub(super) fn det_args(
    args: &mut AttnBwdArgs,
    p: &BackwardProblem,
    det_lpt: bool,
    key_blocks: u32,
    sms: u32,
    dense_grid: bool,
) {
    args.det_order = DetOrder::of(p) as i32;
    args.det_sms = sms as i32;
    args.lpt_heads = det_lpt_heads(det_lpt, p, dense_grid, key_blocks, sms);
}

/// The deterministic causal launch order (`KILN_BWD_DET_LPT`, the argument block's `lpt_heads`
/// under `DetOrder::Descending`): `g` > 0, longest walk first in chunks of `g` = SMs / key blocks
/// (key/value head, batch) pairs (`lpt_block`), or 0: each head's key blocks in reverse. Under
/// the descending order a block waits for the later key blocks of its head, which the chunks
/// launch after it: safe only while a chunk fits on the SMs at once (every block of the chunk
/// gets one once the earlier chunks, which wait on nothing later, are done), so 0 where a head
/// has more key blocks than `sms` (`det_schedule` runs both). Not with a window or a packed or
/// clustered grid (no writer runs them).
pub fn det_lpt_heads(
    knob: bool,
    p: &BackwardProblem,
    dense_grid: bool,
    key_blocks: u32,
    sms: u32,
) -> i32 {
    let a = &p.attn;
    if !knob
        || !p.deterministic
        || DetOrder::of(p) != DetOrder::Descending
        || !dense_grid
        || a.window != Window::UNBOUNDED
        || key_blocks == 0
        || key_blocks > sms
    {
        return 0;
    }
    (sms / key_blocks) as i32
}

/// The deterministic writer that bumps its counters as soon as its adds complete.
pub struct BwdFa3OrderedEager;

/// The tile for `p`: deterministic, the writer's (d64: `bwd_fa3_m128_rows`' tile, both tiles of a
/// block added at once; d128: `bwd_fa3_lookahead`'s); otherwise the default's kernel
/// (`bwd_fa3_m128` where it wins, else `bwd_fa3_lookahead`).
pub(super) fn tile(p: &BackwardProblem) -> WgmmaBwdTile {
    let t = if p.deterministic && p.attn.head_dim == 64 {
        bwd_fa3_m128_rows::tile()
    } else if m128_wins(p) {
        bwd_fa3_m128::tile(false)
    } else {
        bwd_fa3_lookahead::tile(p.attn.head_dim, false, false)
    };
    WgmmaBwdTile {
        det_writer: if p.deterministic {
            DetWriter::Eager
        } else {
            DetWriter::No
        },
        ..t
    }
}

impl AttentionBackwardKernel for BwdFa3OrderedEager {
    fn name(&self) -> &'static str {
        "bwd_fa3_ordered_eager"
    }
    fn summary(&self) -> &'static str {
        "the default with the deterministic dQ through a writer warp by TMA reduce, key blocks in a swizzled fixed order, each counter bumped as soon as its adds complete (d64: dQ split by rows)"
    }
    fn rung(&self) -> u32 {
        8
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        supports_tile(p, dev, tile(p))
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        // the writer's kernels only: the rest, the preprocess and postprocess included, are the
        // default's, compiled with its versions
        let mut v = Vec::new();
        for d in BWD_WGMMA_DIMS {
            let p = BackwardProblem::new(AttentionProblem::new(1, 1, 64, d), true);
            for dt in DTYPES {
                v.push(tile(&p).spec(arch, dt));
            }
        }
        v
    }
    fn launch_knobs(
        &self,
        ctx: &Context,
        p: &BackwardProblem,
        ops: &BackwardOperands,
        o: &AttentionOverrides,
    ) -> Result<()> {
        launch_tile(self.name(), ctx, p, ops, o, tile(p))
    }
    fn knobs(&self, p: &BackwardProblem) -> Knobs {
        if !p.deterministic {
            return wgmma_knobs(p, &tile(p));
        }
        let mut v = vec![(Knob::DetWriters, 1)];
        if p.attn.causal {
            v.push((Knob::DetLpt, 0));
        }
        v
    }
    fn by_default(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention_backward::DetOrder;

    fn problem(s: usize, d: usize, causal: bool, det: bool) -> BackwardProblem {
        let mut a = AttentionProblem::new(2, 16, s, d);
        a.causal = causal;
        BackwardProblem::new(a, det)
    }

    #[test]
    fn deterministic_problems_get_the_writer_and_the_rest_the_defaults_kernels() {
        for d in BWD_WGMMA_DIMS {
            for causal in [false, true] {
                let (det, free) = (
                    problem(8192, d, causal, true),
                    problem(8192, d, causal, false),
                );
                let t = tile(&det);
                assert_eq!(t.det_writer, DetWriter::Eager);
                assert_eq!(t.bm, if d == 64 { 128 } else { 64 });
                // the tile it extends (d64: the row split; d128: the lookahead's) and the walk
                // table, and a label of its own
                let base = if d == 64 {
                    bwd_fa3_m128_rows::tile()
                } else {
                    bwd_fa3_lookahead::tile(d, false, false)
                };
                assert_eq!(t.dq_split, base.dq_split);
                assert_eq!(t.smem_bytes(), base.smem_bytes() + 64);
                assert!(t.smem_bytes() <= 227 * 1024);
                let label = t.spec("sm_90a", DTYPES[0]).label();
                assert!(label.contains("KILN_BWD_DET_WRITER=2"), "{label}");
                assert_eq!(tile(&free).det_writer, DetWriter::No);
            }
        }
        // a problem that is not deterministic runs a kernel another version already compiles
        // (lookahead's or m128's: the writer's row split is compiled only deterministic)
        let r = crate::ops::registry::Registry::default();
        let dev = DeviceInfo::h100_sxm();
        let compiled: std::collections::HashSet<_> = r
            .attention_backward()
            .iter()
            .filter(|k| k.name() != BwdFa3OrderedEager.name())
            .flat_map(|k| k.variants("sm_90a"))
            .map(|s| s.label())
            .collect();
        for p in [
            problem(2048, 64, false, false),
            problem(4096, 64, true, false),
            problem(8192, 128, true, false),
        ] {
            let spec = tile(&p).spec("sm_90a", DTYPES[0]);
            assert!(compiled.contains(&spec.label()), "{}", p.label());
        }
        let v = BwdFa3OrderedEager.variants("sm_90a");
        assert_eq!(v.len(), 4);
        let labels: std::collections::HashSet<_> = v.iter().map(|s| s.label()).collect();
        assert_eq!(labels.len(), 4);
        // no longer a default in either mode: the dispatcher takes its two-writer form
        // (`bwd_fa3_ordered_w2`) in deterministic mode since 2026-11-30 (ledger D13)
        for d in BWD_WGMMA_DIMS {
            for causal in [false, true] {
                assert!(!BwdFa3OrderedEager.by_default_for(&problem(8192, d, causal, true)));
                assert!(!BwdFa3OrderedEager.by_default_for(&problem(8192, d, causal, false)));
                let det = problem(8192, d, causal, true);
                let k = r.select_attention_backward(&det, &dev, None).unwrap();
                assert_eq!(k.name(), "bwd_fa3_ordered_w2");
            }
        }
        // the late writer is gone (2026-11-30): its name is no version
        let det = problem(8192, 128, true, true);
        assert!(r
            .select_attention_backward(&det, &dev, Some("bwd_fa3_ordered_dq"))
            .is_err());
    }

    #[test]
    fn the_order_is_swizzled_at_any_length() {
        // causal: descending (launched in reverse), non-causal: rotated within each wave
        for s in [8192, 32768] {
            assert_eq!(
                DetOrder::of(&problem(s, 128, true, true)),
                DetOrder::Descending
            );
            assert_eq!(
                DetOrder::of(&problem(s, 128, false, true)),
                DetOrder::Rotated
            );
        }
    }

    /// Every variant compiles for sm_90a with no local memory, no wgmma serialisation (ptxas's
    /// C751x notes) and its register split honoured (C7507, C7508: setmaxnreg ignored).
    #[test]
    fn every_variant_compiles_without_spills() {
        crate::ops::attention_backward::assert_compiles_clean(
            BwdFa3OrderedEager.variants("sm_90a"),
            &["C751", "C7507", "C7508"],
        );
    }
}
