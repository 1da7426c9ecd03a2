//! Host side of `kernels/moe/fp8_grouped.cu`: the block-scaled FP8 grouped GEMM over experts
//! (contiguous or masked rows), on the dense FP8 kernel's promoted mainloop and the MoE
//! scheduler. Also the tensor maps and the launch steps the FP8 SwiGLU shares.

use super::fp8_problem::{check_operands, Fp8MoeArgs, Fp8MoeOperands, Fp8MoeProblem};
use super::schedule::{order_for, MAX_EXPERTS};
use super::tma3d::Tma3d;
use super::{tile_prefix, MoeOperands};
use crate::device::{Context, DeviceInfo, LaunchConfig, Tma2d, TmaDType, TmaSwizzle};
use crate::error::{Error, Result};
use crate::jit::KernelSpec;
use crate::ops::gemm::DType;
use crate::overrides::Fp8GroupedFeed;

pub use super::fp4::kernel_w4a8::{encode_sx_map, sx_map, SX_BOX};

/// The version's name (its device file's stem).
pub const NAME: &str = "fp8_grouped";
pub const ENTRY: &str = "moe_fp8_grouped";
pub const THREADS: u32 = 384;
/// Tile rows and columns; a stage is one 128-deep K block (128 bytes of FP8 a row).
pub const BM: u32 = 128;
pub const BN: u32 = 128;
pub const BK: u32 = 128;
/// X rows per TMA box (the kernels' `XBOX`).
pub const X_BOX: u32 = 32;
/// An H100's opt-in shared memory per block.
pub const SMEM_BUDGET: u32 = 232_448;

/// Bytes of one stage: the X tile and the W tile.
pub const fn stage_bytes() -> u32 {
    (BM + BN) * BK
}

/// Shared memory for the schedule tables of up to [`MAX_EXPERTS`] (`schedule::table_bytes`).
pub const TABLE_BYTES: u32 = (3 * MAX_EXPERTS as u32 + 2) * 4;

/// Everything but the stages: 1 KB of alignment slack and the schedule tables.
const fn fixed_bytes() -> u32 {
    1024 + TABLE_BYTES
}

/// The parts of the dense tile's feed `feed` takes (the kernel's `KILN_XFEED` bits): 1, a full
/// tile's X as one box of [`BM`] rows through the map in the kernel's fourth slot; 2, the X
/// scales' slot offset kept across the K loop; 8, the tiles past the last whole wave of pairs in
/// halves of 128 columns. 3 for `tm256bh`, 11 for `tm256bht`, 0 for the other feeds. (Bit 4 was
/// `tm256bhd`'s TMA-store deferral until ledger row 160 deleted it, lost by 15 %, then
/// `tm256bhto`'s register stores under the next tile until row 190 deleted it, lost two rounds.)
pub const fn xfeed(feed: Fp8GroupedFeed) -> u32 {
    match feed {
        Fp8GroupedFeed::StagedPairsWideOneBoxHoisted => 3,
        Fp8GroupedFeed::StagedPairsWideOneBoxHoistedTail => 11,
        _ => 0,
    }
}

/// Whether `feed` loads a full tile's X as one box of [`BM`] rows (`tm256bh`, `tm256bht`).
pub const fn one_x_box(feed: Fp8GroupedFeed) -> bool {
    xfeed(feed) & 1 != 0
}

/// Tile columns: 256 for `tm256` and the `tm256bh` feeds, else [`BN`].
pub const fn bn_of(feed: Fp8GroupedFeed) -> u32 {
    match feed {
        Fp8GroupedFeed::StagedPairsWide
        | Fp8GroupedFeed::StagedPairsWideOneBoxHoisted
        | Fp8GroupedFeed::StagedPairsWideOneBoxHoistedTail => 256,
        _ => BN,
    }
}

/// Bytes of one stage of `feed`'s tile.
pub const fn stage_bytes_of(feed: Fp8GroupedFeed) -> u32 {
    (BM + bn_of(feed)) * BK
}

/// A stage's scale slot (`t`, `tm`, `tm256`): the box of X's scales (the tile's 128 and up to 3
/// before them: the box starts on 16 bytes of global memory, as the W4A8 kernel's, F11) and the
/// tile's W scales (one per 128 columns), in 128-byte units; none for `ldg`.
pub const fn slot_bytes(feed: Fp8GroupedFeed) -> u32 {
    match feed {
        Fp8GroupedFeed::Ldg => 0,
        _ => (4 * SX_BOX + 4 * bn_of(feed) / 128).div_ceil(128) * 128,
    }
}

/// CTAs sharing each W tile: 2 for `tm` and the 128 x 256 tiles (pairs along M), else 1.
pub const fn ctas(feed: Fp8GroupedFeed) -> u32 {
    match feed {
        Fp8GroupedFeed::StagedPairs
        | Fp8GroupedFeed::StagedPairsWide
        | Fp8GroupedFeed::StagedPairsWideOneBoxHoisted
        | Fp8GroupedFeed::StagedPairsWideOneBoxHoistedTail => 2,
        _ => 1,
    }
}

/// Stages in the ring: as many as the budget holds (each with its slot and two mbarriers), at
/// most 8.
pub const fn stages_of(feed: Fp8GroupedFeed) -> u32 {
    let s = (SMEM_BUDGET - fixed_bytes()) / (stage_bytes_of(feed) + slot_bytes(feed) + 16);
    if s > 8 {
        8
    } else {
        s
    }
}

pub const fn smem_of(feed: Fp8GroupedFeed) -> u32 {
    fixed_bytes() + stages_of(feed) * (stage_bytes_of(feed) + slot_bytes(feed) + 16)
}

/// The `ldg` kernel's ring (the FP8 SwiGLU's budget is reckoned beside it).
pub const fn stages() -> u32 {
    stages_of(Fp8GroupedFeed::Ldg)
}

pub const fn smem_bytes() -> u32 {
    smem_of(Fp8GroupedFeed::Ldg)
}

pub fn spec(arch: &str, feed: Fp8GroupedFeed) -> KernelSpec {
    spec_with(arch, feed, false)
}

/// [`spec`], or with `nostore` the diagnostic without Y's stores (`KILN_FP8_GROUPED_NOSTORE`:
/// never verified, in no variant list).
pub fn spec_with(arch: &str, feed: Fp8GroupedFeed, nostore: bool) -> KernelSpec {
    KernelSpec::new("moe/fp8_grouped.cu", ENTRY, arch)
        .define("KILN_BN", bn_of(feed))
        .define("KILN_STAGES", stages_of(feed))
        .define("KILN_MAX_EXPERTS", MAX_EXPERTS)
        .define("KILN_SMEM", smem_of(feed))
        .define("KILN_OUT", DType::Bf16.code())
        .define("KILN_SSCALE", (feed != Fp8GroupedFeed::Ldg) as u32)
        .define("KILN_CLUSTER", ctas(feed))
        .define("KILN_XFEED", xfeed(feed))
        .define("KILN_NOSTORE", nostore as u32)
}

/// Every specialisation (for the compile check): the kernel of each feed, and the prefix kernel
/// it runs first.
pub fn variants(arch: &str) -> Vec<KernelSpec> {
    if !crate::jit::arch::has_wgmma(arch) {
        return Vec::new();
    }
    let mut v = vec![tile_prefix::spec(arch)];
    v.extend(Fp8GroupedFeed::ALL.map(|f| spec(arch, f)));
    v
}

/// `Ok` or why the FP8 MoE kernels cannot run `p` on `dev`.
pub fn supports(p: &Fp8MoeProblem, dev: &DeviceInfo, smem: u32) -> std::result::Result<(), String> {
    if !dev.is_hopper() {
        return Err(format!(
            "needs a Hopper GPU (sm_90a: FP8 wgmma, TMA); {} is sm_{}{}",
            dev.name, dev.compute_capability.0, dev.compute_capability.1
        ));
    }
    if p.experts > MAX_EXPERTS {
        return Err(format!(
            "{} experts; at most {MAX_EXPERTS} per launch",
            p.experts
        ));
    }
    dev.check_smem(smem)
}

/// The map over all rows of X: e4m3 bytes in boxes of {128 of K, 32 rows}.
pub fn x_map(p: &Fp8MoeProblem, addr: u64) -> Tma2d {
    x_map_rows(p, addr, X_BOX)
}

/// [`x_map`] in boxes of `rows` rows (`tm256bh`: [`BM`], a full tile's X in one box; the 128B
/// swizzle repeats every 8 rows, so one box of 128 lands as four of 32 side by side do).
pub fn x_map_rows(p: &Fp8MoeProblem, addr: u64, rows: u32) -> Tma2d {
    Tma2d {
        dtype: TmaDType::U8,
        addr,
        dims: [p.k as u64, p.x_rows() as u64],
        row_stride_bytes: p.k as u64,
        box_dims: [BK, rows],
        swizzle: TmaSwizzle::B128,
    }
}

/// A map over W [E, N, K] (e4m3 bytes) in boxes of {128 of K, `box_rows` rows, 1 expert}.
pub fn w_map(p: &Fp8MoeProblem, addr: u64, box_rows: u32) -> Tma3d {
    Tma3d::packed(
        TmaDType::U8,
        addr,
        p.k as u64,
        p.n as u64,
        p.experts as u64,
        BK,
        box_rows,
    )
}

/// The persistent grid: one CTA per SM, or per possible tile when there are fewer. The bound
/// comes from the layout, never from the counts, so a captured graph serves any routing.
pub fn grid(p: &Fp8MoeProblem, bm: u32, bn: u32, sms: u32) -> u32 {
    (tile_bound(p, bm, bn).min(sms.max(1) as u64).max(1)) as u32
}

/// The most tiles of `bm` x `bn` any counts can give on `p`'s layout.
fn tile_bound(p: &Fp8MoeProblem, bm: u32, bn: u32) -> u64 {
    let bm = bm as usize;
    let tiles_m = match &p.rows {
        super::Rows::Contiguous { x_rows, .. } => x_rows / bm + p.experts,
        super::Rows::Masked { max_rows, .. } => p.experts * max_rows.div_ceil(bm),
    } as u64;
    tiles_m * p.n.div_ceil(bn as usize) as u64
}

/// The grid of pairs (`tm`, `tm256`): one pair per resident cluster of two, or per possible
/// pair tile (256 rows x `bn`) when there are fewer; CTAs, so twice the pairs.
pub fn pair_grid(p: &Fp8MoeProblem, bn: u32, clusters: u32) -> u32 {
    2 * tile_bound(p, 2 * BM, bn).min(clusters.max(1) as u64).max(1) as u32
}

/// The checks every FP8 MoE launch makes, then the prefix kernel that builds the tile tables
/// for tile height `bm` into `ops.sched` (same stream, no host synchronisation).
pub fn prepare(
    ctx: &Context,
    p: &Fp8MoeProblem,
    ops: &Fp8MoeOperands,
    bm: u32,
    smem: u32,
    kernel: &str,
) -> Result<()> {
    p.validate()?;
    check_operands(p, ops)?;
    supports(p, &ctx.info, smem).map_err(|reason| Error::Unsupported {
        kernel: kernel.into(),
        reason,
    })?;
    let layout = p.layout();
    let moe_ops = MoeOperands {
        x: ops.x,
        w: ops.w,
        w3: None,
        y: ops.y,
        rows: ops.rows,
        route: None,
        sched: ops.sched,
        row_map: None,
    };
    tile_prefix::launch(ctx, &layout, &moe_ops, bm, false)
}

/// Y = dequant(X) · dequant(W)ᵀ per expert on the context's stream (enqueued only: no host
/// synchronisation, no allocation, so it can be captured in a CUDA graph).
pub fn launch(ctx: &Context, p: &Fp8MoeProblem, ops: &Fp8MoeOperands) -> Result<()> {
    if p.swiglu.is_some() {
        return Err(Error::invalid(
            "this is a SwiGLU problem; run it with the FP8 SwiGLU (fp8_swiglu)",
        ));
    }
    let feed =
        ctx.overrides.moe.fp8_grouped.unwrap_or_else(|| {
            Fp8GroupedFeed::default_for(sx_map(p, ops.sx.ptr()).validate().is_ok())
        });
    let (pairs, staged, bn) = (ctas(feed), feed != Fp8GroupedFeed::Ldg, bn_of(feed));
    // the tables count the tiles of a pair (256 rows), which its CTAs halve
    prepare(ctx, p, ops, pairs * BM, smem_of(feed), NAME)?;
    let unsupported = |reason: String| Error::Unsupported {
        kernel: NAME.into(),
        reason,
    };
    let tx = x_map(p, ops.x.ptr());
    tx.validate().map_err(unsupported)?;
    let tw = w_map(p, ops.w.ptr(), bn / pairs);
    tw.validate().map_err(unsupported)?;
    let (mut map_x, mut map_w) = (tx.encode()?, tw.encode()?);
    let mut map_sx = if staged {
        encode_sx_map(p, ops.sx.ptr(), NAME)?
    } else {
        map_x // a stand-in: the `ldg` kernel never reads it
    };
    // the fourth slot: X in boxes of 128 rows for the `tm256bh` feeds, else a stand-in
    let mut map_x128 = if one_x_box(feed) {
        let t = x_map_rows(p, ops.x.ptr(), BM);
        t.validate().map_err(unsupported)?;
        t.encode()?
    } else {
        map_x
    };
    let nostore = ctx.overrides.moe.fp8_grouped_nostore;
    let f = ctx.function(&spec_with(&ctx.arch(), feed, nostore))?;
    let order = order_for(&p.layout(), pairs * BM, &ctx.overrides.moe);
    let mut args = Fp8MoeArgs::new(p, ops, bn, order);
    let grid = if pairs > 1 {
        pair_grid(
            p,
            bn,
            ctx.max_active_clusters(&f, pairs, THREADS, smem_of(feed)),
        )
    } else {
        grid(p, BM, BN, ctx.info.sm_count)
    };
    let lc = LaunchConfig {
        smem_bytes: smem_of(feed),
        cluster: (pairs > 1).then_some((pairs, 1, 1)),
        ..LaunchConfig::simple((grid, 1, 1), THREADS)
    };
    // SAFETY: the kernel takes (TmaMap, TmaMap, TmaMap, TmaMap, Fp8MoeArgs) in this order. The
    // maps address X, W, X's scales and X in 128-row boxes (the `ldg` kernel reads no third map,
    // only the `tm256bh` feeds the fourth: X's stands in), the args Y, the scales and the
    // schedule workspace; `prepare` has matched every buffer to the problem, and the caller keeps
    // them alive until the stream has run.
    unsafe {
        f.launch(
            ctx.stream,
            &lc,
            &mut [
                map_x.as_param(),
                map_w.as_param(),
                map_sx.as_param(),
                map_x128.as_param(),
                args.as_param(),
            ],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ring_fits_an_h100_block() {
        assert_eq!(stage_bytes() % 1024, 0);
        assert!(smem_bytes() <= SMEM_BUDGET);
        assert_eq!(stages(), 6);
        assert_eq!(
            TABLE_BYTES as usize,
            super::super::schedule::table_bytes(MAX_EXPERTS)
        );
    }

    #[test]
    fn every_feed_keeps_six_stages_and_its_slot_holds_the_scales() {
        for feed in Fp8GroupedFeed::ALL {
            let want = if bn_of(feed) == 256 { 4 } else { 6 };
            assert_eq!(stages_of(feed), want, "{feed:?}");
            assert!(smem_of(feed) <= SMEM_BUDGET);
        }
        // the 128 x 256 tile: 48 KB stages, two W scales in the slot
        let wide = Fp8GroupedFeed::StagedPairsWide;
        assert_eq!(
            (stage_bytes_of(wide), slot_bytes(wide), ctas(wide)),
            (49_152, 640, 2)
        );
        assert_eq!(smem_of(wide), 1024 + TABLE_BYTES + 4 * (49_152 + 640 + 16));
        // the kernel's slot: SX_BOX X scales, then the W scale, in 128-byte units
        assert_eq!(SX_BOX, BM + 4);
        assert_eq!(slot_bytes(Fp8GroupedFeed::Staged), 640);
        assert_eq!(slot_bytes(Fp8GroupedFeed::Ldg), 0);
        assert_eq!(smem_of(Fp8GroupedFeed::StagedPairs), 213_864);
        // the one-box feeds: `tm256`'s ring
        let one_box = Fp8GroupedFeed::StagedPairsWideOneBoxHoisted;
        assert_eq!(smem_of(one_box), smem_of(wide));
        assert!(one_x_box(one_box) && !one_x_box(wide));
        let tail = Fp8GroupedFeed::StagedPairsWideOneBoxHoistedTail;
        assert!(one_x_box(tail) && smem_of(tail) == smem_of(wide));
        // the prefix kernel and one kernel a feed
        let specs = variants("sm_90a");
        assert_eq!(specs.len(), 7);
        // the measured default (ledger rows 22, 84, 100, 133 and 163), where TMA can map X's scales
        assert_eq!(
            (
                Fp8GroupedFeed::default_for(true),
                Fp8GroupedFeed::default_for(false)
            ),
            (
                Fp8GroupedFeed::StagedPairsWideOneBoxHoistedTail,
                Fp8GroupedFeed::Ldg
            )
        );
    }

    /// `tm`: pairs of CTAs walk the pair tiles (256 rows, never across experts) together, CTA r
    /// taking rows 128 r on (the kernel's `fp8_moe_cta_tile`): every routed row and column block
    /// exactly once, and the pair grid is even and bounded by the layout.
    #[test]
    fn pairs_cover_each_routed_row_once() {
        use super::super::schedule::{tile, Schedule, TileOrder};
        let problems = [
            Fp8MoeProblem::contiguous(&[0, 300, 0, 129, 1, 64, 256, 257], 384, 1024),
            Fp8MoeProblem::masked(&[3, 256, 0, 100, 255], 256, 512, 768),
            Fp8MoeProblem::contiguous(&[8192; 4], 4096, 7168),
        ];
        for p in &problems {
            let layout = p.layout();
            let s = Schedule::build(&layout, layout.rows_array(), 2 * BM);
            let tiles_n = p.n.div_ceil(BN as usize) as u32;
            for order in [TileOrder::Fixed(8), TileOrder::ByExpert(16)] {
                let mut seen = vec![0u8; p.x_rows() * tiles_n as usize];
                for u in 0..s.tiles_m() * tiles_n {
                    let pair = tile(&s, u, tiles_n, order, 2 * BM, BN);
                    for rank in 0..2 {
                        let valid = (pair.valid_rows - rank * BM as i32).clamp(0, BM as i32);
                        let row0 = pair.row0 + rank * BM as i32;
                        for r in 0..valid {
                            seen[(row0 + r) as usize * tiles_n as usize
                                + (pair.n0 / BN) as usize] += 1;
                        }
                    }
                }
                let mut want = vec![0u8; seen.len()];
                for (start, count) in layout.spans() {
                    want[start * tiles_n as usize..(start + count) * tiles_n as usize].fill(1);
                }
                assert!(seen == want, "{} {order:?}", p.label());
            }
            for bn in [BN, 256] {
                let g = pair_grid(p, bn, 66);
                assert!(g.is_multiple_of(2) && (2..=132).contains(&g));
            }
        }
        let tiny = Fp8MoeProblem::contiguous(&[3], 128, 128);
        assert_eq!(pair_grid(&tiny, 256, 66), 2);
    }

    #[test]
    fn maps_fill_the_stage() {
        let p = Fp8MoeProblem::contiguous(&[100, 0, 300], 4096, 7168);
        let x = x_map(&p, 1 << 20);
        let w = w_map(&p, 1 << 21, BN);
        assert_eq!((x.validate(), w.validate()), (Ok(()), Ok(())));
        assert_eq!(
            x.box_bytes() * (BM / X_BOX) as u64 + w.box_bytes(),
            stage_bytes() as u64
        );
    }

    #[test]
    fn the_grid_depends_on_the_layout_only() {
        let a = Fp8MoeProblem::masked(&[0, 0, 0, 0], 256, 4096, 7168);
        let b = Fp8MoeProblem::masked(&[256, 256, 256, 256], 256, 4096, 7168);
        assert_eq!(grid(&a, BM, BN, 132), grid(&b, BM, BN, 132));
        assert_eq!(grid(&a, BM, BN, 132), 132);
        let tiny = Fp8MoeProblem::contiguous(&[3], 128, 128);
        assert_eq!(grid(&tiny, BM, BN, 132), 1);
    }

    /// The walk both FP8 kernels make (unit u = tile u of the order, for u < tiles_m * tiles_n)
    /// covers every routed row and 128-column block exactly once, rows of no expert never, at
    /// both tile heights (128: grouped GEMM, 64: SwiGLU), both layouts and both tile orders.
    #[test]
    fn the_tile_walk_covers_each_routed_row_once() {
        use super::super::schedule::{tile, Schedule, TileOrder};
        let problems = [
            Fp8MoeProblem::contiguous(&[0, 300, 0, 129, 1, 64], 384, 1024),
            Fp8MoeProblem::masked(&[3, 256, 0, 100], 256, 512, 768),
            Fp8MoeProblem::contiguous(&[8192; 4], 4096, 7168),
        ];
        for p in &problems {
            let layout = p.layout();
            for bm in [BM, super::super::fp8_swiglu::BM] {
                let s = Schedule::build(&layout, layout.rows_array(), bm);
                let tiles_n = p.n.div_ceil(BN as usize) as u32;
                for order in [TileOrder::Fixed(8), TileOrder::ByExpert(16)] {
                    let mut seen = vec![0u8; p.x_rows() * tiles_n as usize];
                    for u in 0..s.tiles_m() * tiles_n {
                        let t = tile(&s, u, tiles_n, order, bm, BN);
                        assert!(t.valid_rows >= 1 && t.valid_rows <= bm as i32);
                        for r in 0..t.valid_rows {
                            seen[(t.row0 + r) as usize * tiles_n as usize
                                + (t.n0 / BN) as usize] += 1;
                        }
                    }
                    let mut want = vec![0u8; seen.len()];
                    for (start, count) in layout.spans() {
                        want[start * tiles_n as usize..(start + count) * tiles_n as usize].fill(1);
                    }
                    assert!(seen == want, "{} bm {bm} {order:?}", p.label());
                }
            }
        }
    }

    #[test]
    fn refuses_other_gpus_and_too_many_experts() {
        let h100 = DeviceInfo::h100_sxm();
        let p = Fp8MoeProblem::contiguous(&[1, 2], 128, 128);
        assert_eq!(supports(&p, &h100, smem_bytes()), Ok(()));
        let a100 = DeviceInfo {
            compute_capability: (8, 0),
            ..h100.clone()
        };
        assert!(supports(&p, &a100, smem_bytes())
            .unwrap_err()
            .contains("Hopper"));
        let many = Fp8MoeProblem::contiguous(&vec![1; MAX_EXPERTS + 1], 128, 128);
        assert!(supports(&many, &h100, smem_bytes())
            .unwrap_err()
            .contains("experts"));
    }
}
