//! The knobs and the configuration variables, parsed and refused.

use super::config_vars::*;
use super::knobs::*;
use super::*;

fn parse(vars: &[(&str, &str)]) -> Result<Overrides> {
    Overrides::parse(vars.iter().copied())
}

fn ok(vars: &[(&str, &str)]) -> Overrides {
    parse(vars).unwrap()
}

/// The error for `vars`, checked to be one sentence that names the variable and the value.
fn err(vars: &[(&str, &str)]) -> String {
    let e = parse(vars).unwrap_err();
    assert_eq!(e.exit_code(), 2);
    let t = e.to_string();
    let (name, value) = vars[vars.len() - 1];
    assert!(t.contains(&format!("{name}={value}")), "{t}");
    assert!(!t.contains('\n') && !t.trim_end().ends_with('.'), "{t}");
    t
}

#[test]
fn an_unset_environment_gives_the_defaults() {
    assert_eq!(ok(&[]), Overrides::NONE);
    assert_eq!(Overrides::default(), Overrides::NONE);
    assert!(Overrides::NONE.active().is_empty());
    // other variables are not kiln's business
    assert_eq!(ok(&[("PATH", "/bin"), ("HOME", "/x")]), Overrides::NONE);
    // an empty value counts as unset, for knobs and configuration alike
    assert_eq!(
        ok(&[
            ("KILN_WGMMA_CFG", ""),
            ("KILN_SWIGLU_FOLD", " "),
            ("KILN_NVRTC", "")
        ]),
        Overrides::NONE
    );
}

#[test]
fn an_unknown_name_is_an_error_that_suggests_the_nearest() {
    let t = err(&[("KILN_NOSUCH", "1")]);
    assert!(t.contains("no environment variable of that name"), "{t}");
    assert!(!t.contains("did you mean"), "{t}");
    let t = err(&[("KILN_WGMMA_CGF", "large")]);
    assert!(t.contains("did you mean KILN_WGMMA_CFG?"), "{t}");
    // the scripts' own names pass
    assert_eq!(
        ok(&[
            ("KILN_BIN", "target/release/kiln"),
            ("KILN_BROWSER_TESTS", "1")
        ]),
        Overrides::NONE
    );
}

#[test]
fn the_name_table_is_in_order_and_without_duplicates() {
    for w in KNOBS.windows(2) {
        assert!(w[0].name < w[1].name, "{} {}", w[0].name, w[1].name);
    }
    for w in CONFIG_VARS.windows(2) {
        assert!(w[0].name < w[1].name, "{} {}", w[0].name, w[1].name);
    }
    let mut all: Vec<&str> = known_names().collect();
    let n = all.len();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), n);
    assert!(all.iter().all(|n| n.starts_with("KILN_")));
    // 90 knobs, 14 configuration variables
    assert_eq!((KNOBS.len(), CONFIG_VARS.len()), (90, 14));
}

#[test]
fn every_knob_round_trips_through_active_and_resets_when_empty() {
    // one non-default value per knob
    let values: &[(&str, &str)] = &[
        ("KILN_BWD_D256_P16", "1"),
        ("KILN_BWD_DET_LPT", "1"),
        ("KILN_BWD_DET_WRITERS", "2"),
        ("KILN_BWD_DQ_FUSED", "2"),
        ("KILN_BWD_DQ_KEYS", "1"),
        ("KILN_BWD_EXP_POLY", "0"),
        ("KILN_BWD_LPT", "1"),
        ("KILN_BWD_NO_AHEAD", "1"),
        ("KILN_BWD_PINGPONG", "1"),
        ("KILN_BWD_TAIL", "3"),
        ("KILN_BWD_VARLEN_COMPACT", "1"),
        ("KILN_BWD_VARLEN_M128", "0"),
        ("KILN_FA3_D128", "pingpong=1,persist=2"),
        ("KILN_FA3_D256", "stages=3"),
        ("KILN_FA3_D64", "bn=128"),
        ("KILN_FLUSH", "memset"),
        ("KILN_FP4_BALANCE", "0"),
        ("KILN_FP4_CTAS", "1"),
        ("KILN_FP4_DECODE", "rot"),
        ("KILN_FP4_DEEP", "1"),
        ("KILN_FP4_EPI", "defer"),
        ("KILN_FP4_FILL", "1"),
        ("KILN_FP4_GCOLS", "256"),
        ("KILN_FP4_GEMV", "async"),
        ("KILN_FP4_GEMV_ACC", "2"),
        ("KILN_FP4_GEMV_PDL", "0"),
        ("KILN_FP4_LOAD", "tma"),
        ("KILN_FP4_MMA", "sync"),
        ("KILN_FP4_NARROW", "0"),
        ("KILN_FP4_ORDER", "experts"),
        ("KILN_FP4_PAIR", "swiglu"),
        ("KILN_FP4_PATH", "dq"),
        ("KILN_FP4_PDL", "1"),
        ("KILN_FP4_PREFETCH", "8"),
        ("KILN_FP4_RUN", "1"),
        ("KILN_FP4_STAGGER", "1"),
        ("KILN_FP4_TAIL", "1"),
        ("KILN_FP4_TILE", "rows"),
        ("KILN_FP4_XTILE", "0"),
        ("KILN_FP8_GROUPED", "tm"),
        ("KILN_FP8_GROUPED_NOSTORE", "1"),
        ("KILN_FP8_GROUP_M", "24"),
        ("KILN_FP8_PDL", "2"),
        ("KILN_FP8_RULE", "bytes"),
        ("KILN_FP8_STAGES", "3"),
        ("KILN_MOE_GATHER", "copy"),
        ("KILN_MOE_GROUP", "4"),
        ("KILN_MOE_GROUPED", "grouped_swapab"),
        ("KILN_MOE_LPT", "0"),
        ("KILN_MOE_ORDER", "fixed"),
        ("KILN_MOE_PDL", "0"),
        ("KILN_MOE_SWAP", "256x128"),
        ("KILN_MOE_TILE", "128x192c2"),
        ("KILN_MOE_WARM_CODE", "1"),
        ("KILN_NO_TUNED", "1"),
        ("KILN_SWIGLU_DEFER", "0"),
        ("KILN_SWIGLU_DYNAMIC", "0"),
        ("KILN_SWIGLU_FOLD", "16"),
        ("KILN_SWIGLU_GRID", "8"),
        ("KILN_SWIGLU_SILU", "0"),
        ("KILN_SWIGLU_SPLIT", "1"),
        ("KILN_SWIGLU_STAGES", "3"),
        ("KILN_SWIGLU_TAIL", "2"),
        ("KILN_TMA_PROMOTION", "none"),
        ("KILN_TUNE_FAKE", "hang@3,crash@5,wrong@7"),
        ("KILN_W4A8_DECODE", "producer"),
        ("KILN_W4A8_FORM", "wide"),
        ("KILN_W4A8_IDLE", "decode"),
        ("KILN_W4A8_PROMOTE", "beside"),
        ("KILN_W4A8_SX", "ldg"),
        ("KILN_WGMMA_CFG", "n224"),
        ("KILN_WGMMA_CLOAD", "1"),
        ("KILN_WGMMA_DEFER", "0"),
        ("KILN_WGMMA_EPI", "0"),
        ("KILN_WGMMA_GRID", "4"),
        ("KILN_WGMMA_GROUP_M", "16"),
        ("KILN_WGMMA_INPLACE", "0"),
        ("KILN_WGMMA_LONGK", "0"),
        ("KILN_WGMMA_PAIRS", "0"),
        ("KILN_WGMMA_PDL", "0"),
        ("KILN_WGMMA_ROWV", "1"),
        ("KILN_WGMMA_SK", "1"),
        ("KILN_WGMMA_SMALLK", "0"),
        ("KILN_WGMMA_SMALLK_VEC", "1"),
        ("KILN_WGMMA_SPLITK", "1"),
        ("KILN_WGMMA_SPLITS", "3"),
        ("KILN_WGMMA_STAGES", "5"),
        ("KILN_WGMMA_SWAP", "0"),
        ("KILN_WGMMA_TAIL", "1"),
        ("KILN_WGMMA_WIDTHS", "0"),
    ];
    assert_eq!(values.len(), KNOBS.len());
    let o = ok(values);
    let active: Vec<(&str, String)> = o.active();
    let want: Vec<(&str, String)> = values.iter().map(|&(k, v)| (k, v.to_string())).collect();
    assert_eq!(active, want);
    // each alone shows alone, and an empty value after it restores the default
    for &(k, v) in values {
        assert_eq!(ok(&[(k, v)]).active(), vec![(k, v.to_string())]);
        assert_eq!(ok(&[(k, v), (k, "")]), Overrides::NONE, "{k}");
    }
    // and what active() shows parses back to the same overrides
    let shown: Vec<(&str, String)> = o.active();
    assert_eq!(Overrides::parse(shown).unwrap(), o);
}

#[test]
fn gemm_knobs_read_what_wgmma_read() {
    let o = ok(&[
        ("KILN_WGMMA_CFG", "n224"),
        ("KILN_WGMMA_SPLITS", "3"),
        ("KILN_WGMMA_TAIL", "1"),
        ("KILN_WGMMA_GRID", "4"),
        ("KILN_WGMMA_STAGES", "12"),
        ("KILN_WGMMA_LONGK", "0"),
        ("KILN_WGMMA_PAIRS", "0"),
        ("KILN_WGMMA_WIDTHS", "0"),
        ("KILN_WGMMA_SK", "1"),
    ])
    .gemm;
    assert_eq!(o.tile, Some(WgmmaTile::N224));
    assert_eq!(
        (o.splits, o.tail, o.stream_k),
        (Some(3), Some(true), Some(true))
    );
    assert_eq!((o.grid, o.stages), (Some(4), Some(12)));
    assert!(!o.pairs && !o.widths);
    // the last of a repeated variable wins, as in an environment built up in order
    assert_eq!(
        ok(&[("KILN_WGMMA_GRID", "4"), ("KILN_WGMMA_GRID", "9")])
            .gemm
            .grid,
        Some(9)
    );
    // every forced name resolves, to its config; whitespace around a value is dropped
    for (name, t) in FORCED_CONFIGS {
        assert_eq!(ok(&[("KILN_WGMMA_CFG", name)]).gemm.tile, Some(*t));
    }
    assert_eq!(
        ok(&[("KILN_WGMMA_CFG", " large ")]).gemm.tile,
        Some(WgmmaTile::LARGE)
    );
    // the tail and stream-K knobs say 0 as well as 1
    let o = ok(&[("KILN_WGMMA_TAIL", "0"), ("KILN_WGMMA_SK", "0")]).gemm;
    assert_eq!((o.tail, o.stream_k), (Some(false), Some(false)));
    assert_eq!(GemmOverrides::default(), Overrides::NONE.gemm);
    // the ends of each range
    for (k, lo, hi) in [
        ("KILN_WGMMA_SPLITS", "1", "8"),
        ("KILN_WGMMA_GROUP_M", "1", "64"),
        ("KILN_WGMMA_STAGES", "2", "12"),
    ] {
        assert!(
            parse(&[(k, lo)]).is_ok() && parse(&[(k, hi)]).is_ok(),
            "{k}"
        );
    }
}

#[test]
fn a_bad_gemm_value_is_refused_not_ignored_or_clamped() {
    let t = err(&[("KILN_WGMMA_CFG", "bogus")]);
    assert!(t.contains("large, medium, pair"), "{t}");
    assert!(t.contains("the tuned config, else the heuristic"), "{t}");
    for (k, v) in [
        ("KILN_WGMMA_SPLITS", "0"),
        ("KILN_WGMMA_SPLITS", "9"),
        ("KILN_WGMMA_GROUP_M", "65"),
        ("KILN_WGMMA_GROUP_M", "x"),
        ("KILN_WGMMA_STAGES", "40"),
        ("KILN_WGMMA_STAGES", "1"),
        ("KILN_WGMMA_GRID", "0"),
        ("KILN_WGMMA_GRID", "-3"),
        ("KILN_WGMMA_PAIRS", "2"),
        ("KILN_WGMMA_PAIRS", "off"),
        ("KILN_WGMMA_TAIL", "yes"),
        ("KILN_WGMMA_SK", "true"),
        ("KILN_WGMMA_WIDTHS", "2"),
        ("KILN_WGMMA_EPI", "no"),
        ("KILN_WGMMA_CLOAD", "10"),
        ("KILN_WGMMA_SPLITK", "on"),
        ("KILN_WGMMA_DEFER", "00"),
        ("KILN_WGMMA_PDL", "-1"),
    ] {
        let t = err(&[(k, v)]);
        assert!(t.contains(&format!("{k} takes")), "{t}");
    }
    assert!(err(&[("KILN_WGMMA_STAGES", "40")]).contains("from 2 to 12"));
    assert!(err(&[("KILN_WGMMA_PAIRS", "2")]).contains("0 or 1"));
}

#[test]
fn moe_knobs_take_the_kernels_shapes_and_orders() {
    for t in MoeTile::ALL {
        let name = moe_tile_name(t);
        assert_eq!(ok(&[("KILN_MOE_TILE", &name)]).moe.tile, Some(t));
    }
    // the label's space before c2 may be kept
    assert_eq!(
        ok(&[("KILN_MOE_TILE", "128x256 c2")]).moe.tile,
        Some(MoeTile::LARGE.paired())
    );
    for s in SwapConfig::ALL {
        assert_eq!(ok(&[("KILN_MOE_SWAP", &swap_name(s))]).moe.swap, Some(s));
    }
    for v in MOE_GROUPED_VERSIONS {
        assert_eq!(ok(&[("KILN_MOE_GROUPED", v)]).moe.grouped, Some(v));
    }
    let o = ok(&[("KILN_MOE_ORDER", "expert"), ("KILN_MOE_GROUP", "1")]).moe;
    assert_eq!((o.order, o.group), (Some(MoeOrder::Expert), Some(1)));
    for (k, v) in [
        ("KILN_MOE_TILE", "128x64"),
        ("KILN_MOE_SWAP", "128x192"),
        ("KILN_MOE_GROUPED", "grouped"),
        ("KILN_MOE_ORDER", "random"),
        ("KILN_MOE_GROUP", "0"),
        ("KILN_MOE_LPT", "2"),
        ("KILN_MOE_PDL", "yes"),
    ] {
        err(&[(k, v)]);
    }
    assert!(err(&[("KILN_MOE_TILE", "1x1")]).contains("128x256, 128x128"));
}

#[test]
fn swiglu_knobs_take_exactly_what_the_kernel_compiles() {
    // the fold is 0, 16 or 32 rows: 7 was silently 0 before
    for f in [0, 16, 32] {
        let v = f.to_string();
        assert_eq!(ok(&[("KILN_SWIGLU_FOLD", &v)]).swiglu.fold, f);
    }
    let t = err(&[("KILN_SWIGLU_FOLD", "7")]);
    assert!(t.contains("KILN_SWIGLU_FOLD takes 0, 16 or 32"), "{t}");
    assert!(t.contains("default (32)"), "{t}");
    for s in 2..=4 {
        assert_eq!(
            ok(&[("KILN_SWIGLU_STAGES", &s.to_string())]).swiglu.stages,
            s
        );
    }
    for t in [0, 1, 16] {
        assert_eq!(ok(&[("KILN_SWIGLU_TAIL", &t.to_string())]).swiglu.tail, t);
    }
    assert_eq!(ok(&[("KILN_SWIGLU_SILU", "0")]).swiglu.silu, 0);
    assert_eq!(ok(&[("KILN_SWIGLU_GRID", "3")]).swiglu.grid, Some(3));
    let o = ok(&[
        ("KILN_SWIGLU_SPLIT", "1"),
        ("KILN_SWIGLU_DEFER", "0"),
        ("KILN_SWIGLU_DYNAMIC", "0"),
    ])
    .swiglu;
    assert!(o.split && !o.defer && !o.dynamic);
    for (k, v) in [
        ("KILN_SWIGLU_FOLD", "64"),
        ("KILN_SWIGLU_STAGES", "5"),
        ("KILN_SWIGLU_STAGES", "1"),
        ("KILN_SWIGLU_TAIL", "17"),
        ("KILN_SWIGLU_SILU", "2"),
        ("KILN_SWIGLU_GRID", "0"),
        ("KILN_SWIGLU_SPLIT", "2"),
        ("KILN_SWIGLU_DEFER", "x"),
        ("KILN_SWIGLU_DYNAMIC", "true"),
    ] {
        err(&[(k, v)]);
    }
}

#[test]
fn attention_knobs_apply_to_their_head_dim_and_name_a_bad_key() {
    let o = ok(&[("KILN_FA3_D128", "pingpong=1, persist=2")]).attention;
    let c = o.fa3(128).unwrap();
    assert!(c.pingpong && c.persist == 2 && c.d == 128);
    assert_eq!(c.bn, Fa3Config::default_for(128).bn);
    assert_eq!((o.fa3(64), o.fa3(256), o.fa3(96)), (None, None, None));
    assert_eq!(
        ok(&[("KILN_FA3_D64", "bn=128")])
            .attention
            .fa3(64)
            .unwrap()
            .d,
        64
    );
    for v in ["pingpong=2", "bogus=1", "bn", "bn=x"] {
        let t = err(&[("KILN_FA3_D256", v)]);
        assert!(t.contains("key=value"), "{t}");
    }
    // only the head dims fa3_wgmma runs have a knob
    err(&[("KILN_FA3_D96", "bn=64")]);
}

#[test]
fn the_other_knobs() {
    assert_eq!(
        ok(&[("KILN_FLUSH", "memset")]).bench.flush,
        FlushMode::Memset
    );
    assert_eq!(ok(&[("KILN_FLUSH", "read")]).bench.flush, FlushMode::Read);
    let t = err(&[("KILN_FLUSH", "clean")]);
    assert!(t.contains("`read` or `memset`"), "{t}");
    for (v, p) in [
        ("none", L2Promotion::None),
        ("64", L2Promotion::B64),
        ("128", L2Promotion::B128),
        ("256", L2Promotion::B256),
    ] {
        assert_eq!(ok(&[("KILN_TMA_PROMOTION", v)]).tma.promotion, Some(p));
    }
    err(&[("KILN_TMA_PROMOTION", "32")]);
    assert!(ok(&[("KILN_NO_TUNED", "1")]).tune.no_tuned);
    assert!(!ok(&[("KILN_NO_TUNED", "0")]).tune.no_tuned);
    err(&[("KILN_NO_TUNED", "yes")]);
    let f = ok(&[("KILN_TUNE_FAKE", "hang@3, crash@5,wrong@7")])
        .tune
        .fake;
    assert_eq!(
        f,
        Some(TuneFake {
            hang: vec![3],
            crash: vec![5],
            wrong: vec![7]
        })
    );
    for v in ["bogus@1", "hang@x", "hang"] {
        err(&[("KILN_TUNE_FAKE", v)]);
    }
}

#[test]
fn configuration_variables_are_known_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("libnvrtc.so.13");
    std::fs::write(&file, b"").unwrap();
    let (d, f) = (dir.path().to_str().unwrap(), file.to_str().unwrap());
    let missing = dir.path().join("nothing");
    let m = missing.to_str().unwrap();
    // accepted, and not knobs: they change nothing in the overrides
    for (k, v) in [
        ("KILN_NVRTC", f),
        ("KILN_NVRTC", d),
        ("KILN_CUBLAS", f),
        ("KILN_CUBLASLT", f),
        ("KILN_PYTHON_DEPS", d),
        ("KILN_CUOBJDUMP", f),
        ("KILN_COMPUTE_SANITIZER", f),
        ("KILN_NCU", f),
        ("KILN_CACHE_DIR", d),
        ("KILN_CACHE_DIR", m),
        ("KILN_STORE", f),
        ("KILN_STORE", m),
        ("KILN_COMMIT", "abc1234"),
        ("KILN_GIT_COMMIT", "abc1234-dirty"),
        ("KILN_REQUIRE_NVRTC", "1"),
        ("KILN_TEST_KERNELS", "1"),
        ("KILN_TEST_KERNELS", "0"),
        ("KILN_FP8_CHECK_ONLY", "e4m3"),
    ] {
        assert_eq!(ok(&[(k, v)]), Overrides::NONE, "{k}={v}");
    }
    // NVRTC named where it is not: NVRTC missing (exit 5), as when it is loaded
    let empty = tempfile::tempdir().unwrap();
    for (v, says) in [
        ("/nonexistent", "no such file or folder"),
        (m, "no such file or folder"),
        (
            empty.path().to_str().unwrap(),
            "that folder does not hold the library",
        ),
    ] {
        let e = parse(&[("KILN_NVRTC", v)]).unwrap_err();
        assert!(matches!(e, Error::NvrtcMissing(_)), "{e:?}");
        let t = e.to_string();
        assert!(t.contains(&format!("KILN_NVRTC={v}: {says}")), "{t}");
        assert!(
            t.contains("libnvrtc.so.13") && t.contains("or unset it"),
            "{t}"
        );
    }
    for (k, v, says) in [
        ("KILN_CUBLAS", d, "that folder does not hold the library"),
        ("KILN_CUBLASLT", m, "no such file or folder"),
        ("KILN_CUOBJDUMP", m, "does not exist"),
        ("KILN_CUOBJDUMP", d, "not a file"),
        ("KILN_PYTHON_DEPS", f, "not a folder"),
        ("KILN_PYTHON_DEPS", m, "does not exist"),
        ("KILN_CACHE_DIR", f, "a file, not a folder"),
        ("KILN_STORE", d, "a folder, not a file"),
        ("KILN_REQUIRE_NVRTC", "yes", "only 1"),
        ("KILN_TEST_KERNELS", "2", "0 or 1"),
    ] {
        let t = err(&[(k, v)]);
        assert!(t.contains(says) && t.contains("or unset it"), "{t}");
    }
}

#[test]
fn the_first_bad_variable_in_name_order_is_the_one_named() {
    let t = err(&[("KILN_WGMMA_CFG", "x"), ("KILN_FLUSH", "y")]);
    assert!(
        t.contains("KILN_FLUSH=y") && !t.contains("KILN_WGMMA_CFG"),
        "{t}"
    );
}

#[test]
fn edit_distance() {
    assert_eq!(edits("kitten", "sitting"), 3);
    assert_eq!(edits("", "abc"), 3);
    assert_eq!(edits("abc", "abc"), 0);
    assert_eq!(closest("KILN_FLUSHH"), Some("KILN_FLUSH"));
    assert_eq!(closest("KILN_ZZZZZZZZ"), None);
}

#[test]
fn fp4_pdl_own_is_wide_with_the_ctas_own_tables() {
    let o = ok(&[("KILN_FP4_PDL", "own")]);
    assert!(o.moe.fp4_pdl_wide && o.moe.fp4_own_tables && !o.moe.fp4_pdl);
    assert!(o.active().contains(&("KILN_FP4_PDL", "own".to_string())));
    for v in ["wide", "0", "1"] {
        assert!(!ok(&[("KILN_FP4_PDL", v)]).moe.fp4_own_tables, "{v}");
    }
}
