//! Plan, then execute: a launch of one resolved choice worked out before anything runs
//! ([`Prepared`]), which `launch` executes and [`plan`] shows (`kiln plan`) without a GPU.

use super::inplace::{copy_width, in_place_pays, InPlace};
use super::{
    as_read, c_through_scratch, cooperative_twin, k_blocks, needs_split_code, output_map,
    pack_shape, packed_ld, ring_for, transposes_a, with_a_row_major, with_cpa, with_epilogue,
    WgmmaTmaWs,
};
use super::{
    has_split_code, swapped, Choice, Epilogue, GemmOverrides, Notes, SplitPlan, TileConfig,
};
use crate::jit::KernelSpec;
use crate::ops::gemm::{DType, GemmProblem, LaunchPlan};
use crate::ops::space::Config;

/// Says once per process that a tile forced by `KILN_WGMMA_CFG` ran as another: where C takes an
/// epilogue the tile has no variant with, the next that has one runs ([`with_epilogue`]).
/// Unsaid, a timing or a sanitizer run forced to a tile is taken for that tile's (ledger #75:
/// `kiln sanitize` with n224 forced ran 128x256 on every problem).
pub(super) fn warn_forced_fallback(forced: TileConfig, ran: TileConfig, epi: Epilogue) {
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
        eprintln!(
            "kiln: KILN_WGMMA_CFG forces {0}, but this problem's C takes the {2} epilogue, which \
             {0} has no variant with: {1} runs instead (`kiln plan` says why)",
            forced.label(1),
            ran.label(1),
            epi.name()
        );
    }
}

/// The tile a launch of `choice` through `epi` runs (`KILN_WGMMA_STAGES` applied, then
/// [`with_epilogue`]) and its K slices: only a tile with the split-K code splits (64-row tiles
/// split K inside the CTA instead, the ping-pong kernel does not split, and the 320-wide tile
/// runs at one wave).
pub(super) fn launch_tile(
    choice: &Choice,
    epi: Epilogue,
    stages: Option<u32>,
) -> (TileConfig, u32) {
    let cfg = match stages {
        Some(stages) => TileConfig {
            stages: ring_for(choice.tile, stages),
            ..choice.tile
        },
        None => choice.tile,
    };
    let splits = if has_split_code(cfg) {
        choice.splits.max(1)
    } else {
        1
    };
    (with_epilogue(cfg, epi), splits)
}

/// How `cfg`'s tiles of `p` are laid over `slots` resident clusters: the first stream-K tile
/// (where `choice` asks for stream-K and the tile config takes it) and the split plan. Stream-K
/// replaces split-K where both are asked for (the kernel ignores splits then).
pub(super) fn work_layout(
    cfg: TileConfig,
    choice: &Choice,
    splits: u32,
    p: &GemmProblem,
    slots: u32,
) -> (Option<u32>, SplitPlan) {
    let sk_from = (choice.stream_k && has_split_code(cfg))
        .then(|| cfg.stream_k_from(p.m, p.n, p.k, slots))
        .flatten();
    let plan = match sk_from {
        Some(_) => cfg.split_plan(p.m, p.n, 1, false, slots),
        None => cfg.split_plan(p.m, p.n, splits, choice.tail, slots),
    };
    (sk_from, plan)
}

/// Where the kernel reads A from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ReadA {
    /// As stored.
    InPlace,
    /// A copy with 128-byte rows at this leading dimension (`pack_rows`): TMA cannot address A's
    /// rows as stored.
    Packed(usize),
    /// A row-major copy at this leading dimension (`transpose_rows`): a column-major A with few
    /// rows ([`transposes_a`]).
    Transposed(usize),
}

/// A launch of one resolved choice, worked out before anything runs: the copies made first, the
/// problem as the kernel then reads it, the epilogue, the tile that runs with its K slices, and
/// its variant. What is left to the GPU is how many clusters are resident
/// ([`Prepared::layout`]).
#[derive(Debug, Clone, Copy)]
pub(super) struct Prepared {
    /// The problem as given (canonical; swap-AB: its transpose, [`swapped`]): what the copies
    /// read and C's copy back writes.
    pub p: GemmProblem,
    /// The problem as the kernel reads it: A and B at their copies' leading dimensions (A
    /// row-major when read from its transposed copy), C at its scratch's.
    pub read: GemmProblem,
    pub a: ReadA,
    /// The leading dimension of B's copy with 128-byte rows, when B is read from one.
    pub b: Option<usize>,
    /// The leading dimension of C's scratch, when C is written through one and copied back
    /// ([`c_through_scratch`], `KILN_WGMMA_INPLACE=0` only).
    pub c: Option<usize>,
    /// The producer warpgroup copies operands in place (`KILN_CPA`): the copy widths of A and B
    /// in bytes, 16 for one read by TMA (as stored or from its copy).
    pub cpa: Option<[u32; 2]>,
    pub choice: Choice,
    pub epi: Epilogue,
    /// The tile that runs ([`launch_tile`]) and its K slices.
    pub tile: TileConfig,
    pub splits: u32,
    /// The variant with the split-K and stream-K code ([`needs_split_code`]).
    pub split_code: bool,
    /// The kernel's `KILN_EPI_DEFER` ([`GemmOverrides::defer`]).
    pub defer: bool,
}

impl Prepared {
    /// `choice` for `p` with A, B and C at these device addresses (a plan without a GPU takes
    /// aligned ones, as allocations are), saying in `notes` how C goes out and which tile runs.
    pub(super) fn new(
        p: &GemmProblem,
        (a, b, c): (u64, u64, u64),
        choice: Choice,
        env: &GemmOverrides,
        notes: &mut Notes,
    ) -> Prepared {
        // Swap-AB: the problem is Cᵀ = Bᵀ·Aᵀ from here on (A and B exchanged), and C is stored
        // transposed by the row store, in place whatever its alignment.
        let swap = choice.swap;
        let (p, (a, b)) = match swap {
            true => (swapped(&p.canonical()), (b, a)),
            false => (p.canonical(), (a, b)),
        };
        let es = p.input.size();
        let mut read = p;
        if let Some(stages) = env.stages {
            notes.add(|| format!("KILN_WGMMA_STAGES forces {stages} stages"));
        }
        let mode = env.inplace;
        // C through scratch and copied back only as before 2026-11-29 (KILN_WGMMA_INPLACE=0): a
        // large C whose rows TMA cannot address. Else C is written in place by the row store.
        let large_c_off = !swap && c_through_scratch(&read, c);
        let rc =
            (mode == InPlace::Copy && large_c_off).then(|| pack_shape(p.m, p.n, p.output.size()).0);
        read.ldc = rc.unwrap_or(read.ldc);
        // The TMA-store epilogue where C allows it (`output_map`), unless KILN_WGMMA_EPI=0; else
        // `KILN_EPI=0` (a variant of its own): the row store, or registers in a ping-pong tile.
        let epi = match swap {
            true => Epilogue::Registers,
            false => {
                Epilogue::for_problem(&read, rc.is_none() && output_map(&read, c).is_some(), env)
            }
        };
        let tma_epi = epi.tma();
        let (tile, splits) = launch_tile(&choice, epi, env.stages);
        // (the ping-pong kernel has no transposed store: its cooperative twin runs)
        let tile = if swap { cooperative_twin(tile) } else { tile };
        // A large C off 16 bytes in a ping-pong tile: its cooperative twin stores it by rows in
        // place, where the ping-pong register epilogue would go through scratch (at 279a9fa the
        // twin without the copy back ran 0.95-1.22x the ping-pong tile with it).
        let twin = mode != InPlace::Copy && !tma_epi && tile.pingpong && large_c_off;
        let tile = if twin { cooperative_twin(tile) } else { tile };
        // Operands TMA cannot address: read in place by the producer's copies (`inplace`), in
        // the variants that have them (not the C-load epilogue's), else from padded copies.
        let transposed = transposes_a(&p);
        let widths = [
            if transposed {
                16
            } else {
                copy_width(p.lda * es, a)
            },
            copy_width(p.ldb * es, b),
        ];
        let off = widths.iter().any(|&w| w < 16);
        let cpa_tile = with_cpa(tile);
        let has_variant = (cpa_tile.bm, cpa_tile.bn) == (tile.bm, tile.bn) && !tile.pingpong;
        let auto_widths = widths.map(|w| if w >= 4 { w } else { 16 });
        let cpa = match mode {
            // (swap-AB's tile has no in-place variant: the operand is copied, KILN_WGMMA_INPLACE=1
            // included)
            _ if !off || epi == Epilogue::TmaLoadC || swap => None,
            InPlace::Copy => None,
            InPlace::All => Some(widths),
            InPlace::Auto => (has_variant
                && auto_widths.iter().any(|&w| w < 16)
                && in_place_pays(&p, cpa_tile, splits, auto_widths))
            .then_some(auto_widths),
        };
        if mode == InPlace::Auto && off && cpa.is_none() {
            notes.add(|| {
                let why = if epi == Epilogue::TmaLoadC {
                    "the C-load epilogue has no in-place variant".to_string()
                } else if swap {
                    "swap-AB's 128x144 tile has no in-place variant".to_string()
                } else if !has_variant {
                    format!("{} has no in-place variant", tile.label(1))
                } else if auto_widths.iter().all(|&w| w == 16) {
                    "an odd row stride allows only 2-byte copies, which wait for their data".into()
                } else {
                    format!(
                        "over {} K blocks the producer's in-place copies would cost more than the \
                         copy (inplace::in_place_pays)",
                        k_blocks(p.k).div_ceil(splits.max(1))
                    )
                };
                format!("operands off 16 bytes copied first: {why}")
            });
        }
        let tile = if cpa.is_some() { cpa_tile } else { tile };
        let ra = if transposed {
            let ld = pack_shape(p.m, p.k, es).0;
            (read.layout, read.lda) = (with_a_row_major(p.layout), ld);
            ReadA::Transposed(ld)
        } else {
            match packed_ld(p.lda, p.a_storage(), es, Some(a))
                .filter(|_| cpa.is_none_or(|w| w[0] >= 16))
            {
                Some(ld) => {
                    read.lda = ld;
                    ReadA::Packed(ld)
                }
                None => ReadA::InPlace,
            }
        };
        let rb =
            packed_ld(p.ldb, p.b_storage(), es, Some(b)).filter(|_| cpa.is_none_or(|w| w[1] >= 16));
        read.ldb = rb.unwrap_or(read.ldb);
        if let Some(w) = cpa {
            for (width, (name, ld)) in w.iter().zip([("A", p.lda), ("B", p.ldb)]) {
                if *width < 16 {
                    notes.add(|| {
                        format!(
                            "{name} read in place: ld{} = {ld} (or its base) is off 16 bytes, so the \
                             producer warpgroup copies its rows into the swizzled stages with {} \
                             ({})",
                            name.to_lowercase(),
                            if *width == 2 {
                                "2-byte loads and shared stores".to_string()
                            } else {
                                format!("{width}-byte cp.async")
                            },
                            if mode == InPlace::All {
                                "KILN_WGMMA_INPLACE=1".to_string()
                            } else {
                                format!(
                                    "over {} K blocks a unit they cost less than the copy: \
                                     inplace::in_place_pays",
                                    k_blocks(p.k).div_ceil(splits.max(1))
                                )
                            }
                        )
                    });
                }
            }
        }
        notes.add(|| {
            if epi == Epilogue::TmaLoadC {
                format!(
                    "epilogue: C loaded by TMA into the staging chunks (beta = {}), blended, stored by TMA",
                    read.beta
                )
            } else if tma_epi && read.beta != 0.0 {
                let rounding = if read.output == DType::F32 {
                    ""
                } else {
                    "; 16-bit C: alpha * A * B is rounded to 16 bits before the add, one rounding more \
                     than the register epilogue's (KILN_WGMMA_CLOAD=1 loads C instead)"
                };
                format!(
                    "epilogue: TMA reduce-add (C += alpha * A * B, beta = 1) from swizzled staging \
                     chunks{rounding}"
                )
            } else if tma_epi {
                "epilogue: TMA stores from swizzled staging chunks".into()
            } else if swap {
                "epilogue: staged in shared memory, stored transposed into C (C^T's rows are C's \
                 columns: 32-byte runs of 16 rows)"
                    .into()
            } else {
                let why = if rc.is_some() {
                    "C goes through scratch, KILN_WGMMA_INPLACE=0"
                } else if !env.epi {
                    "KILN_WGMMA_EPI=0"
                } else {
                    "TMA cannot address C: its rows, its base or a row of N elements is off 16 bytes"
                };
                if tile.pingpong {
                    format!("epilogue: from registers ({why})")
                } else {
                    // (the kernel's ROWS_V: 16-bit C, beta 0, a tile width a multiple of 64)
                    let how = if env.rows_v
                        && read.output != DType::F32
                        && read.beta == 0.0
                        && tile.bn % 64 == 0
                    {
                        "by 16-byte windows of its rows (KILN_WGMMA_ROWV=1)"
                    } else {
                        "by rows, an element a lane"
                    };
                    format!("epilogue: staged in shared memory, stored {how}, coalesced ({why})")
                }
            }
        });
        if (tile.bm, tile.bn, tile.pingpong, tile.cluster)
            != (
                choice.tile.bm,
                choice.tile.bn,
                choice.tile.pingpong,
                choice.tile.cluster,
            )
        {
            notes.add(|| {
                let why = if twin {
                    "stores a C this large and off 16 bytes only through scratch (its register \
                     epilogue); the cooperative tile stores it by rows in place"
                        .to_string()
                } else if cpa.is_some() {
                    format!(
                        "has no variant with the {} epilogue and operands read in place",
                        epi.name_in(choice.tile)
                    )
                } else {
                    format!(
                        "has no variant with the {} epilogue",
                        epi.name_in(choice.tile)
                    )
                };
                format!("{} {why}: {} runs", choice.tile.label(1), tile.label(1))
            });
        }
        Prepared {
            p,
            read,
            a: ra,
            b: rb,
            c: rc,
            cpa,
            choice,
            epi,
            tile,
            splits,
            // (the in-place variants come with the split-K code only)
            split_code: cpa.is_some() || needs_split_code(tile, splits, choice.stream_k, epi, env),
            defer: env.defer,
        }
    }

    /// The variant that runs.
    pub(super) fn spec(&self, arch: &str) -> KernelSpec {
        let r = &self.read;
        WgmmaTmaWs::spec(
            arch,
            (r.layout, r.input, r.output),
            self.tile,
            self.choice.group_m,
            self.epi,
            self.split_code,
            self.defer,
            (self.cpa.is_some(), self.choice.swap),
        )
    }

    /// How the tiles are laid over `slots` resident clusters.
    pub(super) fn layout(&self, slots: u32) -> WorkLayout {
        let r = &self.read;
        let (sk_from, split) = work_layout(self.tile, &self.choice, self.splits, r, slots);
        WorkLayout {
            tiles: self.tile.cluster_tiles(r.m, r.n),
            slots,
            sk_from,
            split,
            k_blocks: k_blocks(r.k),
        }
    }

    /// The copies launched before the GEMM, each with its reason.
    fn copies(&self) -> Vec<String> {
        let p = &self.p;
        let mut v = Vec::new();
        match self.a {
            ReadA::Transposed(_) => v.push(format!(
                "A ({} rows, column-major) copied transposed (transpose_rows): its MN-major boxes \
                 would be mostly zero fill",
                p.m
            )),
            ReadA::Packed(_) => v.push(format!(
                "A copied to 128-byte rows (pack_rows): lda = {} is not a multiple of 16 bytes",
                p.lda
            )),
            ReadA::InPlace => {}
        }
        if self.b.is_some() {
            v.push(format!(
                "B copied to 128-byte rows (pack_rows): ldb = {} is not a multiple of 16 bytes",
                p.ldb
            ));
        }
        if self.c.is_some() {
            v.push(format!(
                "C written through scratch with 128-byte rows and copied back (pack_rows): ldc = {} \
                 is not a multiple of 16 bytes{}",
                p.ldc,
                if p.beta != 0.0 {
                    "; C copied in first, for beta"
                } else {
                    ""
                }
            ));
        }
        v
    }

    /// What runs over `layout`, for `kiln plan`, with the `notes` of the rules that decided.
    fn summary(&self, layout: &WorkLayout, notes: Vec<String>) -> LaunchPlan {
        let (cfg, sp) = (self.tile, layout.split);
        LaunchPlan {
            tile: cfg.label(sp.splits),
            bm: cfg.bm,
            bn: cfg.bn,
            stages: cfg.stages,
            cluster: cfg.cluster,
            pingpong: cfg.pingpong,
            splits: sp.splits,
            tail: sp.splits > 1 && sp.split_from > 0,
            stream_k_from: layout.sk_from,
            tma_epilogue: self.epi.tma(),
            c_loaded: self.epi == Epilogue::TmaLoadC,
            split_code: self.split_code,
            copies: self.copies(),
            tiles: layout.tiles,
            slots: layout.slots,
            grid: sp.grid,
            waves: layout.units() as f64 / layout.slots as f64,
            notes,
        }
    }
}

/// How a prepared launch's cluster tiles are laid over the resident slots: plain tiles, split
/// tiles ([`SplitPlan`]) or stream-K from `sk_from` on.
#[derive(Debug, Clone, Copy)]
pub(super) struct WorkLayout {
    /// Cluster tiles, and the resident cluster slots they are laid over.
    pub tiles: u32,
    pub slots: u32,
    /// The first stream-K cluster tile, when stream-K runs.
    pub sk_from: Option<u32>,
    pub split: SplitPlan,
    /// K blocks of the problem (stream-K spreads them over the CTAs).
    pub k_blocks: u32,
}

impl WorkLayout {
    /// Work units: plain tiles, and each split tile's slices.
    pub(super) fn units(&self) -> u32 {
        let sp = &self.split;
        sp.split_from + (self.tiles - sp.split_from) * sp.splits
    }

    /// (fp32 workspace bytes, arrival counters) for a `bn`-wide tile: stream-K's two partials
    /// per CTA, or the split tiles' slices; `None` when nothing is split.
    pub(super) fn workspace(&self, bn: u32) -> Option<(usize, usize)> {
        match self.sk_from {
            Some(from) => Some((
                SplitPlan::stream_k_workspace_bytes(self.split.grid, bn),
                (self.tiles - from) as usize,
            )),
            None if self.split.splits > 1 => Some((
                self.split.workspace_bytes(bn),
                self.split.split_block_tiles as usize,
            )),
            None => None,
        }
    }

    /// The kernel's `Extras` values (splits, first split or stream-K tile, stream-K K blocks).
    pub(super) fn extras(&self) -> (i32, i32, u32) {
        (
            self.split.splits as i32,
            self.sk_from.unwrap_or(self.split.split_from) as i32,
            self.sk_from
                .map_or(0, |from| (self.tiles - from) * self.k_blocks),
        )
    }
}

/// What [`WgmmaTmaWs`]'s `launch` would run for `p` on a GPU of `sm_count` SMs, given the
/// tuned config for its shape class (`tuned`) and the env overrides, without a GPU (for
/// `kiln plan`): the [`Prepared`] launch `launch` executes, laid over one resident CTA per SM (the
/// GPU's occupancy query may give pairs fewer slots), with the operands aligned as allocations
/// are.
pub fn plan(
    p: &GemmProblem,
    sm_count: u32,
    tuned: Option<&Config>,
    env: &GemmOverrides,
) -> LaunchPlan {
    let mut notes = Notes::on();
    let choice = Choice::resolve_noted(&as_read(p), sm_count, tuned, env, &mut notes);
    let aligned = 1u64 << 20;
    let prep = Prepared::new(p, (aligned, aligned, aligned), choice, env, &mut notes);
    let slots = (sm_count / prep.tile.cluster).max(1);
    let slots = env.grid.map_or(slots, |g| slots.min(g));
    prep.summary(&prep.layout(slots), notes.into_vec())
}

/// The specialisations `launch` compiles for `p` on a GPU of `sm_count` SMs (`tuned` and `env`
/// as for [`plan`]), without a GPU: the copies' kernels (operands TMA cannot read, where they
/// are copied), then the GEMM's variant, from the same [`Prepared`] the launch executes, with the
/// operands and C as aligned as allocations are.
pub fn launch_specs(
    arch: &str,
    p: &GemmProblem,
    sm_count: u32,
    tuned: Option<&Config>,
    env: &GemmOverrides,
) -> Vec<KernelSpec> {
    let choice = Choice::resolve(&as_read(p), sm_count, tuned, env);
    let aligned = 1u64 << 20;
    let prep = Prepared::new(
        p,
        (aligned, aligned, aligned),
        choice,
        env,
        &mut Notes::off(),
    );
    let es = prep.p.input.size();
    let mut specs = Vec::new();
    match prep.a {
        ReadA::Transposed(_) => specs.push(super::super::transpose_rows::spec(arch)),
        ReadA::Packed(_) => specs.push(super::super::pack_rows::spec(arch, es)),
        ReadA::InPlace => {}
    }
    if prep.b.is_some() {
        specs.push(super::super::pack_rows::spec(arch, es));
    }
    if prep.c.is_some() {
        specs.push(super::super::pack_rows::spec(arch, prep.p.output.size()));
    }
    specs.push(prep.spec(arch));
    specs.dedup();
    specs
}

#[cfg(test)]
mod tests {
    use super::super::bf16;
    use super::*;
    use crate::ops::gemm::Layout;

    /// Issue 48's problems whose only obstacle was alignment: C is stored in place by rows
    /// (never through scratch), and an operand is read in place where `in_place_pays` says so (a
    /// K of a stage or two), in a single cooperative CTA; `KILN_WGMMA_INPLACE=0` plans the copies
    /// of before and `=1` reads every such operand in place.
    #[test]
    fn operands_and_c_off_16_bytes_are_read_and_written_in_place_where_that_pays() {
        use crate::ops::gemm::DType;
        let env = GemmOverrides::NONE;
        let with = |inplace| GemmOverrides { inplace, ..env };
        let cpa = |p: &GemmProblem, env: &GemmOverrides| {
            launch_specs("sm_90a", p, 132, None, env).iter().any(|s| {
                s.defines
                    .contains(&("KILN_CPA".to_string(), "1".to_string()))
            })
        };
        for (m, n, k, l, dt) in [
            (13690, 1457, 36, Layout::RC, DType::F16),
            (15104, 7420, 64, Layout::CR, DType::F16),
            (4327, 876, 178, Layout::RR, DType::Bf16),
        ] {
            let p = GemmProblem::new(m, n, k, l, dt, dt);
            let plan = plan(&p, 132, None, &env);
            assert!(plan.copies.is_empty(), "{}: {:?}", p.label(), plan.copies);
            assert_eq!((plan.cluster, plan.pingpong, plan.bm), (1, false, 128));
            assert!(plan.split_code && !plan.tma_epilogue);
            assert_eq!(launch_specs("sm_90a", &p, 132, None, &env).len(), 1);
            assert!(cpa(&p, &env));
            // before: the operands copied, C through scratch and copied back
            let old = super::plan(&p, 132, None, &with(InPlace::Copy));
            assert!(old
                .copies
                .iter()
                .any(|c| c.starts_with("C written through scratch")));
            assert!(!cpa(&p, &with(InPlace::Copy)));
        }
        // K over a few stages, or 4-byte copies of both operands over many tiles a CTA: the
        // copies stay (C in place); `=1` reads them in place all the same
        for (m, n, k, l, dt) in [
            (5434, 534, 575, Layout::CR, DType::Bf16),
            (8042, 2510, 11050, Layout::CC, DType::F16),
            (13568, 7194, 138, Layout::RR, DType::F16),
        ] {
            let p = GemmProblem::new(m, n, k, l, dt, dt);
            let pl = plan(&p, 132, None, &env);
            assert_eq!(pl.copies.len(), 2, "{}: {:?}", p.label(), pl.copies);
            assert!(!pl.tma_epilogue && !pl.pingpong);
            assert!(!cpa(&p, &env));
            assert!(plan(&p, 132, None, &with(InPlace::All)).copies.is_empty());
            assert!(cpa(&p, &with(InPlace::All)));
        }
        // 4327x876x178 RR picks 128x128 ping-pong: its C (3.8 M elements, rows off 16 bytes)
        // went through scratch; its cooperative twin stores it in place
        let p = GemmProblem::new(4327, 876, 178, Layout::RR, DType::Bf16, DType::Bf16);
        let old = plan(&p, 132, None, &with(InPlace::Copy));
        assert!(old.pingpong && old.copies.len() == 3, "{:?}", old.copies);
        // odd strides (2-byte copies, which wait for their data) are copied; C stays in place
        for (m, n, k, l, copies) in [
            (9049, 8833, 8, Layout::RR, 1),
            (9664, 16127, 17, Layout::RC, 2),
            (7103, 5, 15091, Layout::CR, 2),
        ] {
            let p = GemmProblem::new(m, n, k, l, DType::F16, DType::F16);
            let pl = plan(&p, 132, None, &env);
            assert_eq!(pl.copies.len(), copies, "{}: {:?}", p.label(), pl.copies);
            assert!(!pl.tma_epilogue);
        }
        // a small C off 16 bytes keeps the 64x64 ping-pong tile and its register epilogue
        // (at K >= 8192 such tiles split instead: heuristic::few_tiles_long_k_split)
        let p = GemmProblem::new(129, 127, 4095, Layout::RR, DType::Bf16, DType::Bf16);
        let pl = plan(&p, 132, None, &env);
        assert_eq!(
            (pl.bm, pl.bn, pl.pingpong, pl.copies.len()),
            (64, 64, true, 2)
        );
        let p = GemmProblem::new(129, 334, 13376, Layout::RR, DType::F16, DType::F16);
        let pl = plan(&p, 132, None, &env);
        assert_eq!((pl.bm, pl.bn, pl.pingpong), (128, 128, false));
        assert!(pl.splits > 1 && !pl.tma_epilogue);
        // the C-load epilogue (other betas) has no in-place variant
        let p = GemmProblem {
            beta: 0.5,
            ..GemmProblem::new(13690, 1456, 36, Layout::RC, DType::F16, DType::F16)
        };
        assert_eq!(plan(&p, 132, None, &env).copies.len(), 2);
        // aligned problems plan the same under each setting, with no KILN_CPA define
        let p = bf16(4096, 4096, 4096, Layout::RC);
        for i in InPlace::ALL {
            assert_eq!(
                launch_specs("sm_90a", &p, 132, None, &with(i)),
                launch_specs("sm_90a", &p, 132, None, &env)
            );
            assert!(!cpa(&p, &with(i)));
        }
    }

    /// Collecting notes changes no choice, and `plan` runs what `resolve` picks.
    #[test]
    fn plans_and_notes_follow_the_dispatch() {
        let dims = [
            1, 16, 72, 128, 500, 1000, 1024, 2048, 3000, 4096, 5120, 11008, 14336,
        ];
        for l in Layout::ALL {
            for &m in &dims {
                for &n in &dims {
                    for &k in &[64, 1000, 4096, 18944] {
                        let p = bf16(m, n, k, l);
                        let read = as_read(&p);
                        for widths in [false, true] {
                            let env = GemmOverrides {
                                widths,
                                ..GemmOverrides::NONE
                            };
                            let quiet = Choice::resolve(&read, 132, None, &env);
                            let mut notes = Notes::on();
                            let noted = Choice::resolve_noted(&read, 132, None, &env, &mut notes);
                            assert_eq!(quiet, noted, "{m}x{n}x{k} {l}");
                            assert!(notes.into_vec().len() >= 3);
                            let plan = plan(&p, 132, None, &env);
                            let epi = match (plan.tma_epilogue, plan.c_loaded) {
                                (false, _) => Epilogue::Registers,
                                (true, false) => Epilogue::TmaStore,
                                (true, true) => Epilogue::TmaLoadC,
                            };
                            let tile = with_epilogue(quiet.tile, epi);
                            let noted = |s: &str| plan.notes.iter().any(|n| n.contains(s));
                            let tile = if noted("stores a C this large") {
                                cooperative_twin(tile)
                            } else {
                                tile
                            };
                            let tile = if noted("read in place") {
                                with_cpa(tile)
                            } else {
                                tile
                            };
                            assert_eq!((plan.bm, plan.bn), (tile.bm, tile.bn), "{m}x{n}x{k} {l}");
                            // one cluster per work unit, up to the slots
                            assert!(plan.grid <= plan.slots * plan.cluster, "{m}x{n}x{k} {l}");
                            if plan.splits == 1 {
                                assert_eq!(
                                    plan.grid,
                                    plan.tiles.min(plan.slots) * plan.cluster,
                                    "{m}x{n}x{k} {l}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }
}
