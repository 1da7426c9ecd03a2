//! The table of experiment knobs: each `KILN_*` knob's name, what it takes, its default, and how a
//! value is parsed into [`super::Overrides`] and shown back.

use super::*;

/// One experiment knob: its name, what it takes, what unset means, how a value is applied (an
/// error, possibly empty, saying why for a value it does not take; `set(o, None)` restores the
/// default) and shown (`None` when at the default).
pub(super) struct Knob {
    pub(super) name: &'static str,
    pub(super) takes: fn() -> String,
    pub(super) default: &'static str,
    pub(super) set: fn(&mut Overrides, Option<&str>) -> std::result::Result<(), String>,
    pub(super) show: fn(&Overrides) -> Option<String>,
}

/// Stores `value` in `field`, or passes its error on.
pub(super) fn put<T>(
    field: &mut T,
    value: std::result::Result<T, String>,
) -> std::result::Result<(), String> {
    *field = value?;
    Ok(())
}

/// `0` or `1`.
pub(super) fn flag(v: &str) -> Option<bool> {
    either(v, "0", "1")
}

/// `off` or `on`: a knob that chooses between two named ways.
pub(super) fn either(v: &str, off: &str, on: &str) -> Option<bool> {
    if v == off {
        Some(false)
    } else if v == on {
        Some(true)
    } else {
        None
    }
}

pub(super) fn bit(b: bool) -> String {
    (b as u32).to_string()
}

/// A whole number in `lo..=hi`.
pub(super) fn number(v: &str, lo: u32, hi: u32) -> Option<u32> {
    v.parse().ok().filter(|n| (lo..=hi).contains(n))
}

/// The value of an `Option` knob: `None` when unset, else what `parse` makes of it.
pub(super) fn opt<T>(
    v: Option<&str>,
    parse: impl Fn(&str) -> Option<T>,
) -> std::result::Result<Option<T>, String> {
    match v {
        None => Ok(None),
        Some(v) => parse(v).map(Some).ok_or_else(String::new),
    }
}

/// The value of a knob with a plain default.
pub(super) fn or<T>(
    v: Option<&str>,
    default: T,
    parse: impl Fn(&str) -> Option<T>,
) -> std::result::Result<T, String> {
    match v {
        None => Ok(default),
        Some(v) => parse(v).ok_or_else(String::new),
    }
}

/// `value` shown when it is not `default`.
pub(super) fn unless<T: PartialEq>(
    value: T,
    default: T,
    show: impl Fn(T) -> String,
) -> Option<String> {
    (value != default).then(|| show(value))
}

pub(super) fn wgmma_tile_name(t: WgmmaTile) -> String {
    FORCED_CONFIGS
        .iter()
        .find(|(_, c)| *c == t)
        .map_or_else(|| format!("{t:?}"), |(n, _)| n.to_string())
}

pub(super) fn moe_tile_name(t: MoeTile) -> String {
    t.label().split_whitespace().collect()
}

pub(super) fn swap_name(s: SwapConfig) -> String {
    format!("{}x{}", s.bw(), s.tt)
}

/// `KILN_FA3_D<d>`'s value against `d`'s default: the keys that differ, as `key=value`.
pub(super) fn fa3_text(c: Fa3Config) -> String {
    let d = Fa3Config::default_for(c.d);
    let fields: [(&str, u32, u32); 11] = [
        ("bn", c.bn, d.bn),
        ("cwg", c.cwg, d.cwg),
        ("stages", c.stages, d.stages),
        ("overlap", c.overlap as u32, d.overlap as u32),
        ("pingpong", c.pingpong as u32, d.pingpong as u32),
        ("persist", c.persist, d.persist),
        ("dynamic", c.dynamic, d.dynamic),
        ("emu", c.emu, d.emu),
        ("lazy", c.lazy, d.lazy),
        ("order", c.order, d.order),
        ("qbuf", c.qbuf, d.qbuf),
    ];
    let diff: Vec<String> = fields
        .iter()
        .filter(|(_, v, d)| v != d)
        .map(|(k, v, _)| format!("{k}={v}"))
        .collect();
    if diff.is_empty() {
        "(the default)".into()
    } else {
        diff.join(",")
    }
}

/// `KILN_FA3_D<d>`'s config, or why not.
pub(super) fn fa3(d: u32, v: Option<&str>) -> std::result::Result<Option<Fa3Config>, String> {
    v.map(|v| Fa3Config::default_for(d).with(v)).transpose()
}

pub(super) const FA3_TAKES: &str =
    "a comma list of key=value: bn, cwg, stages, persist, dynamic, emu, \
                         lazy, order, qbuf (numbers), overlap, pingpong (0 or 1)";
pub(super) const FLAG: &str = "0 or 1";

/// Every experiment knob, in name order.
pub(super) static KNOBS: &[Knob] = &[
    Knob {
        name: "KILN_BWD_D256_P16",
        takes: || FLAG.into(),
        default: "0: the d256 backwards hand Pᵀ between their warpgroups in fp32",
        set: |o, v| put(&mut o.attention.bwd_d256_p16, or(v, false, flag)),
        show: |o| unless(o.attention.bwd_d256_p16, false, bit),
    },
    Knob {
        name: "KILN_BWD_DET_LPT",
        takes: || FLAG.into(),
        default: "0: the deterministic causal backward launches each head's key blocks in reverse, shortest walk first (1: longest first in chunks of heads where a head's key blocks fit on the SMs at once)",
        set: |o, v| put(&mut o.attention.bwd_det_lpt, or(v, false, flag)),
        show: |o| unless(o.attention.bwd_det_lpt, false, bit),
    },
    Knob {
        name: "KILN_BWD_DET_WRITERS",
        takes: || "1 or 2".into(),
        default: "1: the deterministic backward's dQ through one writer warp (2: two, taking the query blocks in turn)",
        set: |o, v| put(&mut o.attention.bwd_det_writers, or(v, 1, |v| number(v, 1, 2))),
        show: |o| unless(o.attention.bwd_det_writers, 1, |n| n.to_string()),
    },
    Knob {
        name: "KILN_BWD_DQ_FUSED",
        takes: || "0, 1, 2 or 3".into(),
        default: "2 at d64, 3 at d128: the packed backward converts dQ in its main kernel, by the last adder of each 64 query rows, the converters leaving the fp32 accumulator zero so that the preprocess computes D only (2); the same with the accumulator zeroed by the preprocess (1); by the last key block of each sequence and key/value head, no writer warp, the accumulator left zero (3); in a postprocess (0)",
        set: |o, v| put(&mut o.attention.bwd_dq_fused, opt(v, |v| number(v, 0, 3))),
        show: |o| o.attention.bwd_dq_fused.map(|n| n.to_string()),
    },
    Knob {
        name: "KILN_BWD_DQ_KEYS",
        takes: || FLAG.into(),
        default: "0: bwd_fa3_bulk_dq and bwd_fa3_tma_dq at d128 split dQ by columns",
        set: |o, v| put(&mut o.attention.bwd_dq_keys, or(v, false, flag)),
        show: |o| unless(o.attention.bwd_dq_keys, false, bit),
    },
    Knob {
        name: "KILN_BWD_EXP_POLY",
        takes: || "0 to 8".into(),
        default: "0: bwd_fa3_m128_fma takes all of Pᵀ's exponentials on MUFU (n: n of every 8 on the FMA pipe)",
        set: |o, v| put(&mut o.attention.bwd_exp_poly, opt(v, |v| number(v, 0, 8))),
        show: |o| o.attention.bwd_exp_poly.map(|n| n.to_string()),
    },
    Knob {
        name: "KILN_BWD_LPT",
        takes: || FLAG.into(),
        default: "the causal backward's blocks longest walk first, a chunk of heads at a time, in the default version (bwd_fa3_tail: d64 from 4,096 query rows, d128) and at d64 from 4,096 rows in the versions asked for by name, else in the grid's order (1: longest first wherever causal; 0: the grid's order everywhere)",
        set: |o, v| put(&mut o.attention.bwd_lpt, opt(v, flag)),
        show: |o| o.attention.bwd_lpt.map(bit),
    },
    Knob {
        name: "KILN_BWD_NO_AHEAD",
        takes: || FLAG.into(),
        default: "0: bwd_fa3_lookahead issues the next block's Sᵀ before this block's dQ staging",
        set: |o, v| put(&mut o.attention.bwd_no_ahead, or(v, false, flag)),
        show: |o| unless(o.attention.bwd_no_ahead, false, bit),
    },
    Knob {
        name: "KILN_BWD_PINGPONG",
        takes: || FLAG.into(),
        default: "0: bwd_fa3_tma_dq's warpgroups issue their products in any order",
        set: |o, v| put(&mut o.attention.bwd_pingpong, or(v, false, flag)),
        show: |o| unless(o.attention.bwd_pingpong, false, bit),
    },
    Knob {
        name: "KILN_BWD_TAIL",
        takes: || "0 to 32 (0: off; 1: the host's choice of parts; 2 to 32: that many parts, bwd_fa3_d256_w2_cols2t at most as many as fit on the SMs at once)".into(),
        default: "the default backward (bwd_fa3_tail) and bwd_fa3_d256_w2_cols2t split the non-causal grid's last partial wave of key blocks into the model's parts, the other versions asked for by name run it whole (0: whole everywhere; 1: the model's split wherever it applies)",
        set: |o, v| put(&mut o.attention.bwd_tail, opt(v, |v| number(v, 0, 32))),
        show: |o| o.attention.bwd_tail.map(|n| n.to_string()),
    },
    Knob {
        name: "KILN_BWD_VARLEN_COMPACT",
        takes: || FLAG.into(),
        default: "0: the packed backward's grid is the longest sequence's key blocks x heads x sequences (1: the sequences' key blocks back to back, at most 63 sequences)",
        set: |o, v| put(&mut o.attention.bwd_varlen_compact, or(v, false, flag)),
        show: |o| unless(o.attention.bwd_varlen_compact, false, bit),
    },
    Knob {
        name: "KILN_BWD_VARLEN_M128",
        takes: || FLAG.into(),
        default: "1: the packed d64 backward on bwd_fa3_m128_fma's 128-row tile (0: on bwd_fa3_lookahead's 64-row tile)",
        set: |o, v| put(&mut o.attention.bwd_varlen_m128, or(v, true, flag)),
        show: |o| unless(o.attention.bwd_varlen_m128, true, bit),
    },
    Knob {
        name: "KILN_FA3_D128",
        takes: || FA3_TAKES.into(),
        default: "the tuned config, else the built-in one",
        set: |o, v| put(&mut o.attention.fa3_d128, fa3(128, v)),
        show: |o| o.attention.fa3_d128.map(fa3_text),
    },
    Knob {
        name: "KILN_FA3_D256",
        takes: || FA3_TAKES.into(),
        default: "the tuned config, else the built-in one",
        set: |o, v| put(&mut o.attention.fa3_d256, fa3(256, v)),
        show: |o| o.attention.fa3_d256.map(fa3_text),
    },
    Knob {
        name: "KILN_FA3_D64",
        takes: || FA3_TAKES.into(),
        default: "the tuned config, else the built-in one",
        set: |o, v| put(&mut o.attention.fa3_d64, fa3(64, v)),
        show: |o| o.attention.fa3_d64.map(fa3_text),
    },
    Knob {
        name: "KILN_FLUSH",
        takes: || "`read` or `memset`".into(),
        default: "read",
        set: |o, v| {
            let mode = |v: &str| match v {
                "read" => Some(FlushMode::Read),
                "memset" => Some(FlushMode::Memset),
                _ => None,
            };
            put(&mut o.bench.flush, or(v, FlushMode::Read, mode))
        },
        show: |o| {
            unless(o.bench.flush, FlushMode::Read, |m| {
                format!("{m:?}").to_lowercase()
            })
        },
    },
    Knob {
        name: "KILN_FP4_BALANCE",
        takes: || {
            "0 or 1 (1: the 4-bit decode tiles' last wave cut into the slice count that ends it \
             first, whatever its fill; 0: slots / tail slices of a wave at most half full)"
                .into()
        },
        default: "1",
        set: |o, v| put(&mut o.moe.fp4_balance, or(v, true, flag)),
        show: |o| unless(o.moe.fp4_balance, true, bit),
    },
    Knob {
        name: "KILN_FP4_CTAS",
        takes: || "1 or 2 (CTAs per SM of the 4-bit SwiGLU's 8-token decode tile)".into(),
        default: "2",
        set: |o, v| put(&mut o.moe.fp4_ctas, or(v, 2, |v| number(v, 1, 2))),
        show: |o| unless(o.moe.fp4_ctas, 2, |n| n.to_string()),
    },
    Knob {
        name: "KILN_FP4_DECODE",
        takes: || {
            "`rot` (funnel shifts) or `shift` (plain left shifts on the FMA pipe where nothing \
             wraps): how the 4-bit experts' register path moves code bits into place"
                .into()
        },
        default: "shift",
        set: |o, v| {
            put(
                &mut o.moe.fp4_shift,
                or(v, true, |v| either(v, "rot", "shift")),
            )
        },
        show: |o| (!o.moe.fp4_shift).then(|| "rot".to_string()),
    },
    Knob {
        name: "KILN_FP4_DEEP",
        takes: || {
            "0 or 1 (1: the 4-bit experts' paired decode tiles, at up to 256 experts, keep \
             tables for 256 and turn the room into a stage more of weights in flight)"
                .into()
        },
        default: "0",
        set: |o, v| put(&mut o.moe.fp4_deep, or(v, false, flag)),
        show: |o| unless(o.moe.fp4_deep, false, bit),
    },
    Knob {
        name: "KILN_FP4_EPI",
        takes: || {
            "`each` (each store pair after its own routing weight's load), `ahead` (the 4-bit \
             experts' tiles of 64 to 256 tokens load a tile's routing weights at once, then \
             store) or `defer` (`ahead`, and on the 128- and 256-token tiles half the stores \
             deferred under the next tile's first wgmma batch); `ahead` the default from \
             2026-11-30, `each` the old form"
                .into()
        },
        default: "ahead",
        set: |o, v| {
            let epi = |v: &str| match v {
                "each" => Some(0),
                "ahead" => Some(1),
                "defer" => Some(2),
                _ => None,
            };
            put(&mut o.moe.fp4_epi, or(v, 1, epi))
        },
        show: |o| unless(o.moe.fp4_epi, 1, |n| ["each", "ahead", "defer"][n as usize].to_string()),
    },
    Knob {
        name: "KILN_FP4_FILL",
        takes: || {
            "0 or 1 (1: the 4-bit experts' decode tiles launched on every CTA the SMs hold, \
             and the tiles of 64 to 256 tokens cut into up to 4 K slices where the host counts \
             a launch or last wave of at most half the CTAs)"
                .into()
        },
        default: "0",
        set: |o, v| put(&mut o.moe.fp4_fill, or(v, false, flag)),
        show: |o| unless(o.moe.fp4_fill, false, bit),
    },
    Knob {
        name: "KILN_FP4_GCOLS",
        takes: || {
            "128 or 256 (256: the 4-bit experts' grouped GEMM runs 128 tokens by 256 output \
             columns where it would run its 256-token tile, each consumer two weight blocks a \
             stage; bf16 activations, N padded to a multiple of 256)"
                .into()
        },
        default: "128",
        set: |o, v| {
            let cols = |v: &str| match v {
                "128" => Some(128),
                "256" => Some(256),
                _ => None,
            };
            put(&mut o.moe.fp4_gcols, or(v, 128, cols))
        },
        show: |o| unless(o.moe.fp4_gcols, 128, |n| n.to_string()),
    },
    Knob {
        name: "KILN_FP4_GEMV",
        takes: || {
            "`auto` (by M: lean at 1, xswz at 2-8, wide above), `regs` (weights in registers), \
             `async` (a cp.async ring in shared memory), `wide` \
             (a ring of 4-step stages copied 256 bytes a row at a time), `lean` (a ring of \
             2-step stages that carry X, M up to 4), `leanx` (lean with the first X load ahead \
             of the weights), `lean1` (lean compiled for M 1, with a lazy start), `xring` (one-step slots that carry X by \
             cp.async), `xswz` (xring with X placed for conflict-free reads), `xstage` \
             (2-step stages that carry X by cp.async, M up to 8), `pack` (lean at M 1 and xswz \
             above on weights in the GEMV layout, where the caller holds them so, xswz2 at M 2-8 \
             where a warp gets 16 steps of K or more; the layout tiled, a whole tile's step of \
             codes and scales contiguous), `xswz2` (xswz with two 16-row tiles a warp step sharing X, M up to 8); the rings need K a multiple \
             of 128"
                .into()
        },
        default: "auto",
        set: |o, v| {
            let path = |v: &str| match v {
                "auto" => Some(Fp4Gemv::Auto),
                "regs" => Some(Fp4Gemv::Regs),
                "async" => Some(Fp4Gemv::Async),
                "wide" => Some(Fp4Gemv::Wide),
                "lean" => Some(Fp4Gemv::Lean),
                "leanx" => Some(Fp4Gemv::Leanx),
                "lean1" => Some(Fp4Gemv::Lean1),
                "xring" => Some(Fp4Gemv::Xring),
                "xswz" => Some(Fp4Gemv::Xswz),
                "xstage" => Some(Fp4Gemv::Xstage),
                "pack" => Some(Fp4Gemv::Pack),
                "xswz2" => Some(Fp4Gemv::Xswz2),
                _ => None,
            };
            put(&mut o.moe.fp4_gemv, or(v, Fp4Gemv::Auto, path))
        },
        show: |o| {
            unless(o.moe.fp4_gemv, Fp4Gemv::Auto, |m| {
                format!("{m:?}").to_lowercase()
            })
        },
    },
    Knob {
        name: "KILN_FP4_GEMV_ACC",
        takes: || {
            "`auto` (4 on the GEMV layout at M 1, 1 elsewhere), 1, 2 or 4: the NVFP4 GEMV's \
             accumulator chains a warp (its mmas spread over them)"
                .into()
        },
        default: "auto",
        set: |o, v| {
            let chains = |v: &str| match v {
                "auto" => Some(0),
                _ => number(v, 1, 4).filter(|n| n.is_power_of_two()),
            };
            put(&mut o.moe.fp4_gemv_acc, or(v, 0, chains))
        },
        show: |o| unless(o.moe.fp4_gemv_acc, 0, |n| n.to_string()),
    },
    Knob {
        name: "KILN_FP4_GEMV_PDL",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.moe.fp4_gemv_pdl, or(v, true, flag)),
        show: |o| unless(o.moe.fp4_gemv_pdl, true, bit),
    },
    Knob {
        name: "KILN_FP4_LOAD",
        takes: || {
            "`bulk` (one bulk copy an atom) or `tma` (a TMA box of a map over the weights, 256-byte \
             L2 promotion): how the 4-bit experts' producer loads the weight atoms"
                .into()
        },
        default: "bulk",
        set: |o, v| {
            put(
                &mut o.moe.fp4_load_tma,
                or(v, false, |v| either(v, "bulk", "tma")),
            )
        },
        show: |o| o.moe.fp4_load_tma.then(|| "tma".to_string()),
    },
    Knob {
        name: "KILN_FP4_MMA",
        takes: || {
            "`wgmma` (the warpgroup's) or `sync` (each warp's own mma.sync): the tensor-core \
             instruction of the 4-bit experts' 8-token decode tile"
                .into()
        },
        default: "wgmma",
        set: |o, v| {
            put(
                &mut o.moe.fp4_mma_sync,
                or(v, false, |v| either(v, "wgmma", "sync")),
            )
        },
        show: |o| o.moe.fp4_mma_sync.then(|| "sync".to_string()),
    },
    Knob {
        name: "KILN_FP4_NARROW",
        takes: || {
            "0 or 1 (1, the default from 2026-11-30: the 4-bit experts' 8-token decode tile, \
             paired, in place of the 16-token one where experts of 9-16 rows are few enough \
             that it costs at most a quarter more tiles; 0: the 16-token tile)"
                .into()
        },
        default: "1",
        set: |o, v| put(&mut o.moe.fp4_narrow, or(v, true, flag)),
        show: |o| unless(o.moe.fp4_narrow, true, bit),
    },
    Knob {
        name: "KILN_FP4_ORDER",
        takes: || {
            "`experts` (the 4-bit experts' wide tiles handed out expert by expert), \
             `whole-first` (every whole m-tile first, the experts' short last ones after them; \
             launches of at most 64 experts) or `auto` (whole-first where the host's counts \
             simulate it well ahead on the fused SwiGLU's 128-token tile: at most 16 experts with \
             rows; the default from 2026-11-30 night)"
                .into()
        },
        default: "auto",
        set: |o, v| {
            put(
                &mut o.moe.fp4_order,
                or(v, Fp4Order::Auto, Fp4Order::parse),
            )
        },
        show: |o| (o.moe.fp4_order != Fp4Order::Auto).then(|| o.moe.fp4_order.name().into()),
    },
    Knob {
        name: "KILN_FP4_PAIR",
        takes: || {
            "`swiglu` (two CTAs an SM on the 4-bit SwiGLU's 8-token decode tile) or `all` (on \
             the 4-bit grouped GEMM's too: the MoE layer's down projection at decode)"
                .into()
        },
        default: "all",
        set: |o, v| {
            put(
                &mut o.moe.fp4_pair_gemm,
                or(v, true, |v| either(v, "swiglu", "all")),
            )
        },
        show: |o| (!o.moe.fp4_pair_gemm).then(|| "swiglu".to_string()),
    },
    Knob {
        name: "KILN_FP4_PATH",
        takes: || {
            "`rs` (registers) or `dq` (shared memory; the fused SwiGLU with bf16 activations)"
                .into()
        },
        default: "rs",
        set: |o, v| put(&mut o.moe.fp4_path, opt(v, Fp4Path::parse)),
        show: |o| o.moe.fp4_path.map(|p| p.name().to_string()),
    },
    Knob {
        name: "KILN_FP4_PDL",
        takes: || {
            "`wide` (the default from 2026-12-01: the 4-bit experts' tiles of 64 to 256 tokens \
             launched as the tile prefix's programmatic dependent, their tables sorted), `own` \
             (as wide, each CTA building the tables itself from the rows where they are built just \
             before over at most 64 experts, ledger F223), 1 (the decode tiles so instead, their \
             tables unsorted) or 0 (none)"
                .into()
        },
        default: "wide",
        set: |o, v| {
            let (decode, wide, own) = or(v, (false, true, false), |v| match v {
                "0" => Some((false, false, false)),
                "1" => Some((true, false, false)),
                "wide" => Some((false, true, false)),
                "own" => Some((false, true, true)),
                _ => None,
            })?;
            o.moe.fp4_pdl = decode;
            o.moe.fp4_pdl_wide = wide;
            o.moe.fp4_own_tables = own;
            Ok(())
        },
        show: |o| match (o.moe.fp4_pdl, o.moe.fp4_pdl_wide, o.moe.fp4_own_tables) {
            (true, _, _) => Some("1".into()),
            (false, false, _) => Some("0".into()),
            (false, true, true) => Some("own".into()),
            (false, true, false) => None,
        },
    },
    Knob {
        name: "KILN_FP4_PREFETCH",
        takes: || {
            "0 to 32 (stages ahead of its fill that the 4-bit decode tiles' producer asks L2 \
             for each weight atom; 0: no prefetch)"
                .into()
        },
        default: "0",
        set: |o, v| put(&mut o.moe.fp4_prefetch, or(v, 0, |v| number(v, 0, 32))),
        show: |o| unless(o.moe.fp4_prefetch, 0, |n| n.to_string()),
    },
    Knob {
        name: "KILN_FP4_RUN",
        takes: || {
            "1, 2 or 4 (the 4-bit decode tiles' weight atoms of that many consecutive stages of a \
             block brought by one bulk copy where the ring allows; 4 the default from \
             2026-11-30, 1: a copy an atom as before)"
                .into()
        },
        default: "4",
        set: |o, v| {
            let run = |v: &str| match v {
                "1" => Some(1),
                "2" => Some(2),
                "4" => Some(4),
                _ => None,
            };
            put(&mut o.moe.fp4_run, or(v, 4, run))
        },
        show: |o| unless(o.moe.fp4_run, 4, |n| n.to_string()),
    },
    Knob {
        name: "KILN_FP4_STAGGER",
        takes: || {
            "0 or 1 (1: each 4-bit decode tile or slice streams its K atoms from a point of its \
             own, wrapping, instead of in lockstep with the tiles handed out beside it)"
                .into()
        },
        default: "0",
        set: |o, v| put(&mut o.moe.fp4_stagger, or(v, false, flag)),
        show: |o| unless(o.moe.fp4_stagger, false, bit),
    },
    Knob {
        name: "KILN_FP4_TAIL",
        takes: || {
            format!(
                "1 to {} (K slices of a 4-bit decode tile in a last wave at most half full; 1: never split)",
                crate::ops::moe::fp4::kernel::MAX_TAIL_SPLITS
            )
        },
        default: "8",
        set: |o, v| {
            let most = crate::ops::moe::fp4::kernel::MAX_TAIL_SPLITS;
            put(&mut o.moe.fp4_tail, or(v, 8, |v| number(v, 1, most)))
        },
        show: |o| unless(o.moe.fp4_tail, 8, |n| n.to_string()),
    },
    Knob {
        name: "KILN_FP4_TILE",
        takes: || {
            "`count-fit` (the default: the 4-bit experts' tile of least estimated time from the \
             rows' tile counts, split in K where it runs few tiles, on the stage paces timed under \
             the wide tiles' EPI/XTILE pair; the grouped GEMM's wide tiles cut in K where a launch \
             has at most half as many as CTAs, and its wide tile the one of 128 to 256 tokens \
             whose busiest CTA ends first), `count-cut` (count-fit with the 256-token tile \
             always), `count-pair` (count-cut without the GEMM's cut in K), `count` (count-pair \
             on the older paces), `rows` (the narrowest tile that holds \
             the most rows an expert has), or one tile whatever the rows: `8`, `16`, `64`, \
             `wide` (128 tokens for the SwiGLU, 256 for the GEMM; bf16 activations) or the \
             grouped GEMM's wide tile of `128`, `160`, `192`, `224` or `256` tokens (`128` also \
             the SwiGLU's)"
                .into()
        },
        default: "count-fit",
        set: |o, v| {
            put(
                &mut o.moe.fp4_tile,
                or(v, Fp4TileRule::CountFit, Fp4TileRule::parse),
            )
        },
        show: |o| (o.moe.fp4_tile != Fp4TileRule::CountFit).then(|| o.moe.fp4_tile.name()),
    },
    Knob {
        name: "KILN_FP4_XTILE",
        takes: || {
            "0, 1, 2 or 4 (not 0: the 4-bit experts' tiles of 64 to 256 tokens load each stage's \
             X as one box of the whole tile, and their weight atoms of that many stages in one \
             bulk copy; 2 the default from 2026-11-30, 0 the old form: boxes of 16 rows, a copy \
             an atom)"
                .into()
        },
        default: "2",
        set: |o, v| {
            let run = |v: &str| match v {
                "0" => Some(0),
                "1" => Some(1),
                "2" => Some(2),
                "4" => Some(4),
                _ => None,
            };
            put(&mut o.moe.fp4_xtile, or(v, 2, run))
        },
        show: |o| unless(o.moe.fp4_xtile, 2, |n| n.to_string()),
    },
    Knob {
        name: "KILN_FP8_GROUPED",
        takes: || {
            "`ldg` (the consumers load the scales from global memory), `t` (the scales ride the \
             ring with their stage), `tm` (`t` in pairs of CTAs sharing each W tile), `tm256` \
             (`tm` with 128 x 256 tiles), `tm256bh` (`tm256` loading a full tile's X as one \
             128-row box, the X scales' slot offset kept across the K loop) or `tm256bht` \
             (`tm256bh` with the last wave's tiles in halves of 128 columns): how the FP8 grouped \
             GEMM feeds its mainloop"
                .into()
        },
        default: "tm256bht (ldg where X's scales are not 16-byte aligned; H200, ledger rows 22, 84, 100, 133 and 163)",
        set: |o, v| put(&mut o.moe.fp8_grouped, opt(v, Fp8GroupedFeed::parse)),
        show: |o| o.moe.fp8_grouped.map(|f| f.name().to_string()),
    },
    Knob {
        name: "KILN_FP8_GROUPED_NOSTORE",
        takes: || {
            "`0` or `1` (a diagnostic, never verified: the FP8 grouped GEMM with every store of \
             Y skipped, its output left unwritten, to time the epilogue's share)"
                .into()
        },
        default: "0",
        set: |o, v| put(&mut o.moe.fp8_grouped_nostore, or(v, false, flag)),
        show: |o| o.moe.fp8_grouped_nostore.then(|| "1".into()),
    },
    Knob {
        name: "KILN_FP8_GROUP_M",
        takes: || "a whole number from 1 to 64 (the FP8 GEMM's rows of cluster tiles a column sweep)".into(),
        default: "8",
        set: |o, v| put(&mut o.fp8.group_m, opt(v, |v| number(v, 1, 64))),
        show: |o| o.fp8.group_m.map(|g| g.to_string()),
    },
    Knob {
        name: "KILN_FP8_PDL",
        takes: || {
            "0, 1 or 2 (the dense FP8 GEMM launched plainly, as the programmatic dependent of the \
             kernel before it, or so with the weights' first stages loaded before its wait: only \
             where no earlier work on the stream writes B)"
                .into()
        },
        default: "1, 0 where a tile's slices are summed in a cluster (ledger row 29)",
        set: |o, v| put(&mut o.fp8.pdl, opt(v, Fp8Pdl::parse)),
        show: |o| o.fp8.pdl.map(|p| p.name().to_string()),
    },
    Knob {
        name: "KILN_FP8_RULE",
        takes: || {
            let names: Vec<&str> = Fp8Rule::ALL.into_iter().map(Fp8Rule::name).collect();
            format!(
                "{} (which rule picks the FP8 GEMM's config)",
                names.join(" or ")
            )
        },
        default: "measured",
        set: |o, v| put(&mut o.fp8.rule, or(v, Fp8Rule::Large, Fp8Rule::parse)),
        show: |o| unless(o.fp8.rule, Fp8Rule::Large, |r| r.name().to_string()),
    },
    Knob {
        name: "KILN_FP8_STAGES",
        takes: || {
            "a whole number from 1 to 12 (an experiment: the FP8 GEMM's ring shortened to that \
             many stages, at most its config's)"
                .into()
        },
        default: "the config's",
        set: |o, v| put(&mut o.fp8.stages, opt(v, |v| number(v, 1, 12))),
        show: |o| o.fp8.stages.map(|g| g.to_string()),
    },
    Knob {
        name: "KILN_MOE_GATHER",
        takes: || "`auto`, `copy`, `tma` or `cp_async`".into(),
        default: "auto",
        set: |o, v| put(&mut o.moe.gather, or(v, MoeGather::Auto, MoeGather::parse)),
        show: |o| unless(o.moe.gather, MoeGather::Auto, |g| g.name().to_string()),
    },
    Knob {
        name: "KILN_MOE_GROUP",
        takes: || "a whole number, at least 1".into(),
        default: "one group for short experts, else expert-aligned groups of at most 8",
        set: |o, v| put(&mut o.moe.group, opt(v, |v| number(v, 1, u32::MAX))),
        show: |o| o.moe.group.map(|g| g.to_string()),
    },
    Knob {
        name: "KILN_MOE_GROUPED",
        takes: || MOE_GROUPED_VERSIONS.join(" or "),
        default: "grouped_gemm",
        set: |o, v| {
            let version = |v: &str| MOE_GROUPED_VERSIONS.into_iter().find(|n| *n == v);
            put(&mut o.moe.grouped, opt(v, version))
        },
        show: |o| o.moe.grouped.map(str::to_string),
    },
    Knob {
        name: "KILN_MOE_LPT",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.moe.lpt, or(v, true, flag)),
        show: |o| unless(o.moe.lpt, true, bit),
    },
    Knob {
        name: "KILN_MOE_ORDER",
        takes: || "`fixed` or `expert`".into(),
        default: "one group for short experts, else expert-aligned groups",
        set: |o, v| {
            let order = |v: &str| match v {
                "fixed" => Some(MoeOrder::Fixed),
                "expert" => Some(MoeOrder::Expert),
                _ => None,
            };
            put(&mut o.moe.order, opt(v, order))
        },
        show: |o| o.moe.order.map(|k| format!("{k:?}").to_lowercase()),
    },
    Knob {
        name: "KILN_MOE_PDL",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.moe.pdl, or(v, true, flag)),
        show: |o| unless(o.moe.pdl, true, bit),
    },
    Knob {
        name: "KILN_MOE_SWAP",
        takes: || {
            let names: Vec<String> = SwapConfig::ALL.into_iter().map(swap_name).collect();
            format!("one of {} (weight rows x tokens)", names.join(", "))
        },
        default: "128x256",
        set: |o, v| put(&mut o.moe.swap, opt(v, SwapConfig::parse)),
        show: |o| o.moe.swap.map(swap_name),
    },
    Knob {
        name: "KILN_MOE_TILE",
        takes: || {
            let names: Vec<String> = MoeTile::ALL.into_iter().map(moe_tile_name).collect();
            format!("one of {}", names.join(", "))
        },
        default: "the cost model's choice",
        set: |o, v| put(&mut o.moe.tile, opt(v, GroupedGemm::parse_tile)),
        show: |o| o.moe.tile.map(moe_tile_name),
    },
    Knob {
        name: "KILN_MOE_WARM_CODE",
        takes: || {
            "0 or 1 (lab, `moe bench --weights` only; 1: each timed launch, after its L2 flush, \
             follows one untimed launch of the same kernel on other buffers: its code warm, its \
             data cold)"
                .into()
        },
        default: "0",
        set: |o, v| put(&mut o.bench.warm_code, or(v, false, flag)),
        show: |o| unless(o.bench.warm_code, false, bit),
    },
    Knob {
        name: "KILN_NO_TUNED",
        takes: || FLAG.into(),
        default: "0: the tuning cache is read",
        set: |o, v| put(&mut o.tune.no_tuned, or(v, false, flag)),
        show: |o| unless(o.tune.no_tuned, false, bit),
    },
    Knob {
        name: "KILN_SWIGLU_DEFER",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.swiglu.defer, or(v, true, flag)),
        show: |o| unless(o.swiglu.defer, true, bit),
    },
    Knob {
        name: "KILN_SWIGLU_DYNAMIC",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.swiglu.dynamic, or(v, true, flag)),
        show: |o| unless(o.swiglu.dynamic, true, bit),
    },
    Knob {
        name: "KILN_SWIGLU_FOLD",
        takes: || "0, 16 or 32 (rows an expert's last tile folds onto the one before)".into(),
        default: "32",
        set: |o, v| {
            let rows = |v: &str| number(v, 0, 32).filter(|r| [0, 16, 32].contains(r));
            put(&mut o.swiglu.fold, or(v, 32, rows))
        },
        show: |o| unless(o.swiglu.fold, 32, |f| f.to_string()),
    },
    Knob {
        name: "KILN_SWIGLU_GRID",
        takes: || "a whole number of CTAs, at least 1".into(),
        default: "one CTA per SM",
        set: |o, v| put(&mut o.swiglu.grid, opt(v, |v| number(v, 1, u32::MAX))),
        show: |o| o.swiglu.grid.map(|g| g.to_string()),
    },
    Knob {
        name: "KILN_SWIGLU_SILU",
        takes: || "0 (ex2 and rcp) or 1 (one MUFU tanh)".into(),
        default: "1 for 16-bit outputs; f32 outputs always take 0",
        set: |o, v| put(&mut o.swiglu.silu, or(v, 1, |v| number(v, 0, 1))),
        show: |o| unless(o.swiglu.silu, 1, |s| s.to_string()),
    },
    Knob {
        name: "KILN_SWIGLU_SPLIT",
        takes: || FLAG.into(),
        default: "0",
        set: |o, v| put(&mut o.swiglu.split, or(v, false, flag)),
        show: |o| unless(o.swiglu.split, false, bit),
    },
    Knob {
        name: "KILN_SWIGLU_STAGES",
        takes: || format!("a whole number from 2 to {}", MoeTile::SWIGLU.stages),
        default: "4",
        set: |o, v| {
            let most = MoeTile::SWIGLU.stages;
            put(&mut o.swiglu.stages, or(v, most, |v| number(v, 2, most)))
        },
        show: |o| unless(o.swiglu.stages, MoeTile::SWIGLU.stages, |s| s.to_string()),
    },
    Knob {
        name: "KILN_SWIGLU_TAIL",
        takes: || "a whole number from 0 to 16 (0 or 1: never split)".into(),
        default: "4",
        set: |o, v| {
            put(
                &mut o.swiglu.tail,
                or(v, MAX_TAIL_SPLITS, |v| number(v, 0, 16)),
            )
        },
        show: |o| unless(o.swiglu.tail, MAX_TAIL_SPLITS, |t| t.to_string()),
    },
    Knob {
        name: "KILN_TMA_PROMOTION",
        takes: || "`none`, `64`, `128` or `256`".into(),
        default: "256 B where rows start on 128-byte lines, else 128 B",
        set: |o, v| {
            let promotion = |v: &str| match v {
                "none" => Some(L2Promotion::None),
                "64" => Some(L2Promotion::B64),
                "128" => Some(L2Promotion::B128),
                "256" => Some(L2Promotion::B256),
                _ => None,
            };
            put(&mut o.tma.promotion, opt(v, promotion))
        },
        show: |o| {
            o.tma.promotion.map(|p| {
                match p {
                    L2Promotion::None => "none",
                    L2Promotion::B64 => "64",
                    L2Promotion::B128 => "128",
                    L2Promotion::B256 => "256",
                }
                .to_string()
            })
        },
    },
    Knob {
        name: "KILN_TUNE_FAKE",
        takes: || "a comma list of hang@N, crash@N, wrong@N (job ids; test only)".into(),
        default: "none: the worker runs every job",
        set: |o, v| put(&mut o.tune.fake, opt(v, TuneFake::parse)),
        show: |o| o.tune.fake.as_ref().map(TuneFake::label),
    },
    Knob {
        name: "KILN_W4A8_DECODE",
        takes: || {
            "`consumers` (each consumer warpgroup decodes its weight atom of every stage), \
             `producer` (the producer warpgroup's three idle warps decode both atoms a stage \
             ahead), `warpgroup` (a fourth warpgroup of four warps decodes both atoms a stage \
             ahead) or `warpgroup-ring` (warpgroup, the atoms in a ring apart from X's): where \
             the W4A8 experts decode their weights"
                .into()
        },
        default: "consumers",
        set: |o, v| {
            let decode = |v: &str| {
                [
                    W4a8Decode::Consumers,
                    W4a8Decode::Producer,
                    W4a8Decode::Warpgroup,
                    W4a8Decode::WarpgroupRing,
                ]
                .into_iter()
                .find(|d| d.name() == v)
            };
            put(
                &mut o.moe.w4a8_decode,
                or(v, W4a8Decode::Consumers, decode),
            )
        },
        show: |o| unless(o.moe.w4a8_decode, W4a8Decode::Consumers, |d| d.name().to_string()),
    },
    Knob {
        name: "KILN_W4A8_FORM",
        takes: || {
            "`auto` (`wide-lean` for the fused SwiGLU and `wide` for the grouped GEMM where \
             the launch's rows are contiguous and average at least 112 an expert, `ss` \
             otherwise), `ss` (the decoded weights in shared \
             memory, wgmma's B, read by both consumers), `wide` (ss in tiles of 192 tokens, \
             three consumers; with KILN_W4A8_SX=tma only, at most 256 experts), `wide-lean` \
             (wide with each decoding thread's shared loads before its stores, its addresses \
             kept across the K loop and seven operations a code word; the SwiGLU's, the grouped \
             GEMM runs wide): the form of the W4A8 experts' kernel"
                .into()
        },
        default: "auto",
        set: |o, v| {
            let form = |v: &str| W4a8Form::ALL.into_iter().find(|f| f.name() == v);
            put(&mut o.moe.w4a8_form, or(v, W4a8Form::Auto, form))
        },
        show: |o| unless(o.moe.w4a8_form, W4a8Form::Auto, |f| f.name().to_string()),
    },
    Knob {
        name: "KILN_W4A8_IDLE",
        takes: || {
            "`wait` (in a tile of at most 64 tokens each consumer decodes its own atom, and the \
             one without tokens waits) or `decode` (that one decodes both atoms; with \
             KILN_W4A8_PROMOTE=beside and KILN_W4A8_SX=tma): the W4A8 experts' short tiles"
                .into()
        },
        default: "wait",
        set: |o, v| {
            put(
                &mut o.moe.w4a8_idle_decode,
                or(v, false, |v| either(v, "wait", "decode")),
            )
        },
        show: |o| o.moe.w4a8_idle_decode.then(|| "decode".to_string()),
    },
    Knob {
        name: "KILN_W4A8_PROMOTE",
        takes: || {
            "`after` (each K block's promotion, then the next stage's wait and decode) or \
             `beside` (the next stage waited for first, its decode and the promotion in one block \
             of code): the order of the W4A8 experts' consumer step"
                .into()
        },
        default: "after",
        set: |o, v| {
            put(
                &mut o.moe.w4a8_beside,
                or(v, false, |v| either(v, "after", "beside")),
            )
        },
        show: |o| o.moe.w4a8_beside.then(|| "beside".to_string()),
    },
    Knob {
        name: "KILN_W4A8_SX",
        takes: || {
            "`ldg` (each consumer loads its X scales from global memory) or `tma` (the producer \
             stages each K block's X scales beside its X tile): how the W4A8 experts read X's \
             1x128 scales"
                .into()
        },
        default: "tma",
        set: |o, v| {
            put(
                &mut o.moe.w4a8_sx_staged,
                or(v, true, |v| either(v, "ldg", "tma")),
            )
        },
        show: |o| (!o.moe.w4a8_sx_staged).then(|| "ldg".to_string()),
    },
    Knob {
        name: "KILN_WGMMA_CFG",
        takes: || {
            let names: Vec<&str> = FORCED_CONFIGS.iter().map(|(n, _)| *n).collect();
            format!("one of {}", names.join(", "))
        },
        default: "the tuned config, else the heuristic",
        set: |o, v| {
            let tile = |v: &str| FORCED_CONFIGS.iter().find(|(n, _)| *n == v).map(|c| c.1);
            put(&mut o.gemm.tile, opt(v, tile))
        },
        show: |o| o.gemm.tile.map(wgmma_tile_name),
    },
    Knob {
        name: "KILN_WGMMA_CLOAD",
        takes: || FLAG.into(),
        default: "0",
        set: |o, v| put(&mut o.gemm.c_load, or(v, false, flag)),
        show: |o| unless(o.gemm.c_load, false, bit),
    },
    Knob {
        name: "KILN_WGMMA_DEFER",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.gemm.defer, or(v, true, flag)),
        show: |o| unless(o.gemm.defer, true, bit),
    },
    Knob {
        name: "KILN_WGMMA_EPI",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.gemm.epi, or(v, true, flag)),
        show: |o| unless(o.gemm.epi, true, bit),
    },
    Knob {
        name: "KILN_WGMMA_GRID",
        takes: || "a whole number of clusters, at least 1".into(),
        default: "one per SM",
        set: |o, v| put(&mut o.gemm.grid, opt(v, |v| number(v, 1, u32::MAX))),
        show: |o| o.gemm.grid.map(|g| g.to_string()),
    },
    Knob {
        name: "KILN_WGMMA_GROUP_M",
        takes: || "a whole number from 1 to 64".into(),
        default: "8",
        set: |o, v| put(&mut o.gemm.group_m, opt(v, |v| number(v, 1, 64))),
        show: |o| o.gemm.group_m.map(|g| g.to_string()),
    },
    Knob {
        name: "KILN_WGMMA_INPLACE",
        takes: || {
            "0, 1 or auto (operands and C that TMA cannot address: copied, read in place, or \
             by the dispatch's rule)"
                .into()
        },
        default: "auto",
        set: |o, v| put(&mut o.gemm.inplace, or(v, InPlace::Auto, InPlace::parse)),
        show: |o| unless(o.gemm.inplace, InPlace::Auto, |i| i.name().to_string()),
    },
    Knob {
        name: "KILN_WGMMA_LONGK",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.gemm.long_k, or(v, true, flag)),
        show: |o| unless(o.gemm.long_k, true, bit),
    },
    Knob {
        name: "KILN_WGMMA_PAIRS",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.gemm.pairs, or(v, true, flag)),
        show: |o| unless(o.gemm.pairs, true, bit),
    },
    Knob {
        name: "KILN_WGMMA_PDL",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.gemm.pdl, or(v, true, flag)),
        show: |o| unless(o.gemm.pdl, true, bit),
    },
    Knob {
        name: "KILN_WGMMA_ROWV",
        takes: || FLAG.into(),
        default: "0",
        set: |o, v| put(&mut o.gemm.rows_v, or(v, false, flag)),
        show: |o| unless(o.gemm.rows_v, false, bit),
    },
    Knob {
        name: "KILN_WGMMA_SK",
        takes: || FLAG.into(),
        default: "the config's own",
        set: |o, v| put(&mut o.gemm.stream_k, opt(v, flag)),
        show: |o| o.gemm.stream_k.map(bit),
    },
    Knob {
        name: "KILN_WGMMA_SMALLK",
        takes: || {
            "0, 1 or auto (the small-K kernel: never, every problem, or by the dispatch's rule)"
                .into()
        },
        default: "auto",
        set: |o, v| put(&mut o.gemm.small_k, or(v, SmallK::Auto, SmallK::parse)),
        show: |o| unless(o.gemm.small_k, SmallK::Auto, |s| s.name().to_string()),
    },
    Knob {
        name: "KILN_WGMMA_SMALLK_VEC",
        takes: || FLAG.into(),
        default: "0",
        set: |o, v| put(&mut o.gemm.small_k_vec, or(v, false, flag)),
        show: |o| unless(o.gemm.small_k_vec, false, bit),
    },
    Knob {
        name: "KILN_WGMMA_SPLITK",
        takes: || FLAG.into(),
        default: "0",
        set: |o, v| put(&mut o.gemm.split_code, or(v, false, flag)),
        show: |o| unless(o.gemm.split_code, false, bit),
    },
    Knob {
        name: "KILN_WGMMA_SPLITS",
        takes: || format!("a whole number from 1 to {MAX_SPLITS}"),
        default: "the config's own",
        set: |o, v| put(&mut o.gemm.splits, opt(v, |v| number(v, 1, MAX_SPLITS))),
        show: |o| o.gemm.splits.map(|s| s.to_string()),
    },
    Knob {
        name: "KILN_WGMMA_STAGES",
        takes: || "a whole number from 2 to 12".into(),
        default: "the tile's own",
        set: |o, v| put(&mut o.gemm.stages, opt(v, |v| number(v, 2, 12))),
        show: |o| o.gemm.stages.map(|s| s.to_string()),
    },
    Knob {
        name: "KILN_WGMMA_SWAP",
        takes: || {
            "0, 1 or auto (swap-AB: C^T = B^T A^T, never, always, or by the dispatch's rule)".into()
        },
        default: "auto",
        set: |o, v| put(&mut o.gemm.swap, or(v, Swap::Auto, Swap::parse)),
        show: |o| unless(o.gemm.swap, Swap::Auto, |s| s.name().to_string()),
    },
    Knob {
        name: "KILN_WGMMA_TAIL",
        takes: || FLAG.into(),
        default: "the config's own",
        set: |o, v| put(&mut o.gemm.tail, opt(v, flag)),
        show: |o| o.gemm.tail.map(bit),
    },
    Knob {
        name: "KILN_WGMMA_WIDTHS",
        takes: || FLAG.into(),
        default: "1",
        set: |o, v| put(&mut o.gemm.widths, or(v, WIDTHS_BY_DEFAULT, flag)),
        show: |o| unless(o.gemm.widths, WIDTHS_BY_DEFAULT, bit),
    },
];
