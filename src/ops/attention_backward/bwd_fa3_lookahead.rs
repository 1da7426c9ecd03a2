//! Host side of `kernels/attention/bwd_fa3_lookahead.cu`: `bwd_fa3_tma_dq`'s block, ring, maps
//! and dQ tile with the next query block's Sᵀ issued before this block's dQ is staged (so that
//! the tensor cores have work while the warpgroups store, fence and reduce dQ and start the next
//! block) and every wgmma descriptor an add on a base built once. d128 splits dQ by columns only
//! (`KILN_BWD_DQ_KEYS` is ignored: dQ's 64 accumulators by keys would not fit beside dK, dV and
//! the next Sᵀ), and the warpgroups take no turns (`KILN_BWD_PINGPONG` is ignored).
//! `KILN_BWD_NO_AHEAD=1` keeps the descriptors by adds but issues each block's Sᵀ at its top, as
//! `bwd_fa3_tma_dq` does: what each change buys, in two runs. The default at d64/d128 since its
//! first H200 run (2026-11-29): verified, 1.08-1.17x `bwd_fa3_tma_dq` (ledger row B6).

use super::bwd_fa3_wgmma::wgmma_knobs;
use super::bwd_fa3_wgmma::{
    launch_tile, supports_tile, variants_of, Ahead, DqAdd, WgmmaBwdTile, BWD_WGMMA_DIMS,
};
use super::knobs::{Knob, Knobs};
use super::{AttentionBackwardKernel, BackwardOperands, BackwardProblem};
use crate::device::{Context, DeviceInfo};
use crate::error::Result;
use crate::jit::KernelSpec;
use crate::ops::attention::{Window, DTYPES};
use crate::overrides::AttentionOverrides;

pub struct BwdFa3Lookahead;

/// Its tile at head dim `d`: `bwd_fa3_tma_dq`'s (d128 by columns, d64 by keys with 4 stages);
/// `no_ahead` (`KILN_BWD_NO_AHEAD`): the descriptors by adds only; `window`: the sliding
/// window's walk and masks (`KILN_BWD_WINDOW`).
pub(super) fn tile(d: usize, no_ahead: bool, window: bool) -> WgmmaBwdTile {
    WgmmaBwdTile {
        ahead: if no_ahead {
            Ahead::DescOnly
        } else {
            Ahead::SAhead
        },
        window,
        ..WgmmaBwdTile::staged_for(d, false, DqAdd::TensorTile)
    }
}

/// Its packed tile at head dim `d` (`KILN_BWD_VARLEN`, always beside the window's walk and masks:
/// one variant for packed batches with a window or without; [`super::varlen`]). `m128`
/// (`KILN_BWD_VARLEN_M128`, d64 only; the default since 2026-11-30): `bwd_fa3_m128_fma`'s tile
/// instead (128 query rows a step, dQ split by query rows, dSᵀ in packed bf16 pairs), the dense
/// d64 default's from 4,096 rows: the packed d64 backward on the 64-row tile ran 0.81x one dense
/// call of the same work (H200, 53c7c5d, 2026-11-30), where that dense call runs
/// `bwd_fa3_m128_fma`; on the 128-row tile 1.09-1.11x that in two rounds (0.90-0.92x the dense
/// call; ledger B19).
pub(super) fn varlen_tile(d: usize, m128: bool) -> WgmmaBwdTile {
    let t = if m128 && d == 64 {
        super::bwd_fa3_m128_fma::tile(0)
    } else {
        tile(d, false, false)
    };
    WgmmaBwdTile {
        varlen: true,
        window: true,
        ..t
    }
}

/// The tile that runs `p`: the window's when it has one.
fn tile_for(p: &BackwardProblem, no_ahead: bool) -> WgmmaBwdTile {
    tile(
        p.attn.head_dim,
        no_ahead,
        p.attn.window != Window::UNBOUNDED,
    )
}

impl AttentionBackwardKernel for BwdFa3Lookahead {
    fn name(&self) -> &'static str {
        "bwd_fa3_lookahead"
    }
    fn summary(&self) -> &'static str {
        "bwd_fa3_tma_dq with the next query block's S^T issued before this block's dQ is staged, and wgmma descriptors by adds"
    }
    fn rung(&self) -> u32 {
        5
    }
    fn supports(&self, p: &BackwardProblem, dev: &DeviceInfo) -> std::result::Result<(), String> {
        supports_tile(p, dev, tile_for(p, false))
    }
    fn variants(&self, arch: &str) -> Vec<KernelSpec> {
        // the default walk, the window's and the packed one's: `KILN_BWD_NO_AHEAD`'s (measured
        // against it at f35f0e6, ledger B6; never dispatched) compiles when asked for, outside
        // the variant budget
        // the packed tiles as dispatch runs them: with the dQ conversion `KILN_BWD_DQ_FUSED`
        // leaves unset (the postprocess's form, `=0`, compiles when asked for)
        let packed = |d, m128| {
            let t = varlen_tile(d, m128);
            WgmmaBwdTile {
                dq_fused: super::varlen::dq_fused_for(None, &t, false),
                ..t
            }
        };
        let mut v = variants_of(arch, |d| tile(d, false, false));
        for d in BWD_WGMMA_DIMS {
            for dt in DTYPES {
                v.push(tile(d, false, true).spec(arch, dt));
                v.push(packed(d, false).spec(arch, dt));
            }
        }
        // the packed d64 batch on `bwd_fa3_m128_fma`'s tile (`KILN_BWD_VARLEN_M128`)
        for dt in DTYPES {
            v.push(packed(64, true).spec(arch, dt));
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
        let no_ahead = o.bwd_no_ahead;
        launch_tile(self.name(), ctx, p, ops, o, tile_for(p, no_ahead))
    }
    fn knobs(&self, p: &BackwardProblem) -> Knobs {
        let mut v = wgmma_knobs(p, &tile_for(p, false));
        v.push((Knob::NoAhead, 0));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::attention::AttentionProblem;

    #[test]
    fn tiles_are_the_tma_dq_column_split_in_another_file() {
        for d in BWD_WGMMA_DIMS {
            for no_ahead in [false, true] {
                let (t, old) = (
                    tile(d, no_ahead, false),
                    WgmmaBwdTile::staged_for(d, false, DqAdd::TensorTile),
                );
                assert_eq!(t.smem_bytes(), old.smem_bytes());
                assert_eq!((t.stages, t.dq_split), (old.stages, old.dq_split));
                let label = t.spec("sm_90a", DTYPES[0]).label();
                assert!(label.starts_with("bwd_fa3_lookahead"), "{label}");
                // no turns in this file; the walk as a define
                assert!(!label.contains("KILN_BWD_PP"), "{label}");
                let sa = format!("KILN_BWD_SAHEAD={}", !no_ahead as u32);
                assert!(label.contains(&sa), "{label}");
            }
        }
        let h100 = DeviceInfo::h100_sxm();
        let p = |d| BackwardProblem::new(AttentionProblem::new(1, 2, 129, d), true);
        assert!(BwdFa3Lookahead.supports(&p(128), &h100).is_ok());
        assert!(BwdFa3Lookahead.supports(&p(64), &h100).is_ok());
        assert!(BwdFa3Lookahead
            .supports(&p(256), &h100)
            .unwrap_err()
            .contains("use 64, 128"));
        let v = BwdFa3Lookahead.variants("sm_90a");
        assert_eq!(v.len(), 16);
        let unique: std::collections::HashSet<_> = v.iter().map(|s| s.label()).collect();
        assert_eq!(unique.len(), 16);
        let packed = varlen_tile(128, false).spec("sm_90a", DTYPES[0]).label();
        assert!(packed.contains("KILN_BWD_VARLEN=1") && packed.contains("KILN_BWD_WINDOW=1"));
        // the packed tiles compile as dispatch runs them (the dQ conversion's default)
        let labels: Vec<String> = v.iter().map(|s| s.label()).collect();
        for fused in ["KILN_BWD_DQ_FUSED=2", "KILN_BWD_DQ_FUSED=3"] {
            assert_eq!(
                labels.iter().filter(|l| l.contains(fused)).count(),
                DTYPES.len(),
                "{fused}"
            );
        }
        // the packed d64 tile on m128_fma's rows (the knob; d128 keeps its tile)
        let m128 = varlen_tile(64, true);
        assert_eq!((m128.bm, m128.dq_split), (128, 2));
        assert!(m128.varlen && m128.window && m128.ds_packed);
        assert!(m128.smem_bytes() <= 227 * 1024);
        let label = m128.spec("sm_90a", DTYPES[0]).label();
        assert!(
            label.contains("KILN_BM=128") && label.contains("KILN_BWD_VARLEN=1"),
            "{label}"
        );
        assert_eq!(varlen_tile(128, true), varlen_tile(128, false));
        // verified (36/36 quick, deterministic bitwise) and 1.08-1.17x bwd_fa3_tma_dq at four
        // shapes on an H200 (2026-11-29): the default, above it
        assert!(BwdFa3Lookahead.by_default());
        assert!(BwdFa3Lookahead.rung() > super::super::bwd_fa3_tma_dq::BwdFa3TmaDq.rung());
    }

    #[test]
    fn a_window_runs_here_and_every_other_version_refuses_it() {
        let h100 = DeviceInfo::h100_sxm();
        let mut a = AttentionProblem::new(1, 2, 1000, 128);
        a.window = Window {
            left: 128,
            right: 0,
        };
        let p = BackwardProblem::new(a, true);
        assert!(BwdFa3Lookahead.supports(&p, &h100).is_ok());
        let t = tile_for(&p, false);
        assert!(t.window && !t.varlen);
        let label = t.spec("sm_90a", DTYPES[0]).label();
        assert!(label.contains("KILN_BWD_WINDOW=1"), "{label}");
        // the dense walk keeps its label (and its cache key) without a window
        let dense = tile_for(
            &BackwardProblem::new(AttentionProblem::new(1, 2, 1000, 128), false),
            false,
        );
        assert!(!dense.spec("sm_90a", DTYPES[0]).label().contains("WINDOW"));
        for other in [
            &super::super::bwd_fa3_tma_dq::BwdFa3TmaDq as &dyn AttentionBackwardKernel,
            &super::super::bwd_fa2_mma_sync::BwdFa2MmaSync,
            &super::super::bwd_fa3_m128::BwdFa3M128,
            // the dQ writer's order knows no window (bwd_fa3_block.cuh refuses the pair)
            &super::super::bwd_fa3_ordered_eager::BwdFa3OrderedEager,
        ] {
            let e = other.supports(&p, &h100).unwrap_err();
            assert!(e.contains("bwd_fa3_lookahead"), "{}: {e}", other.name());
        }
        let mut a256 = AttentionProblem::new(1, 2, 1000, 256);
        a256.window = a.window;
        use super::super::bwd_fa3_d256::{BwdFa3D256, D256};
        for v in [D256::Atomics, D256::Staged, D256::Pair] {
            let e = BwdFa3D256(v)
                .supports(&BackwardProblem::new(a256, false), &h100)
                .unwrap_err();
            assert!(
                e.contains("bwd_fa3_lookahead"),
                "{}: {e}",
                BwdFa3D256(v).name()
            );
        }
    }

    /// Every variant compiles for sm_90a with no local memory, no wgmma serialisation (ptxas's
    /// C751x notes) and its register split honoured (C7507, C7508: setmaxnreg ignored).
    #[test]
    fn every_variant_compiles_without_spills() {
        crate::ops::attention_backward::assert_compiles_clean(
            BwdFa3Lookahead.variants("sm_90a"),
            &["C751", "C7507", "C7508"],
        );
    }
}
