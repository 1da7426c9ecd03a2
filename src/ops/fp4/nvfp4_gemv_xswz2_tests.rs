//! The two-tile X ring (`KILN_FP4_GEMV=xswz2`, and `pack`'s where a warp's share of K is
//! long): which problems take it, its warps and shared memory a CTA, and its compile
//! (docs/fp4.md G19, G20).

use super::*;

/// xswz2 takes M up to 8 with K a multiple of 128 (else xswz or the register path); `pack` on
/// standard codes runs lean at M 1 and xswz above, and on the GEMV layout the two-tile ring at M
/// 2-8 where a warp gets 16 steps of K or more (where it measured faster, G19; G20).
#[test]
fn the_two_tile_ring_takes_m_up_to_8_and_pack_runs_it_at_m_2_to_8_with_long_k() {
    for (m, k, want) in [
        (1, 256, Fp4Gemv::Xswz2),
        (4, 256, Fp4Gemv::Xswz2),
        (8, 384, Fp4Gemv::Xswz2),
        (9, 256, Fp4Gemv::Xswz),
        (4, 160, Fp4Gemv::Regs),
    ] {
        let p = GemvProblem::new(m, 64, k, DType::Bf16);
        assert_eq!(p.path(Fp4Gemv::Xswz2), want, "M {m} K {k}");
    }
    for (m, want) in [
        (1, Fp4Gemv::Lean),
        (2, Fp4Gemv::Xswz),
        (8, Fp4Gemv::Xswz),
        (12, Fp4Gemv::Xswz),
    ] {
        let p = GemvProblem::new(m, 64, 256, DType::Bf16);
        assert_eq!(p.path(Fp4Gemv::Pack), want, "M {m}");
    }
    for (m, n, k, pays) in [
        (4, 28672, 8192, true),
        (4, 16384, 16384, true),
        (4, 8192, 28672, true),
        (8, 16384, 16384, true),
        (4, 14336, 4096, false),
        (4, 8192, 8192, false),
        (1, 16384, 16384, false),
        (12, 16384, 16384, false),
        (4, 16384, 16032, false),
        (3, 88, 24576, true),
    ] {
        let p = GemvProblem::new(m, n, k, DType::Bf16);
        assert_eq!(p.two_tiles_pay(132), pays, "{}", p.label());
    }
}

/// Its CTAs of 32 rows stay in one wave with a warp's 3 slots (two tiles' steps and M rows of
/// X each) within the SM's shared memory and the 80 registers of the X ring's bound.
#[test]
fn the_two_tile_ring_keeps_one_wave_of_32_row_ctas() {
    assert_eq!(xswz2_warp_bytes(4), 3 * (2 * 1152 + 4 * 272));
    for (m, n, k, want) in [
        (1, 8192, 8192, 12),
        (4, 14336, 4096, 5),
        (4, 8192, 8192, 11),
        (4, 28672, 8192, 3),
        (8, 8192, 8192, 8),
    ] {
        let p = GemvProblem::new(m, n, k, DType::Bf16);
        let w = p.xswz2_warps(132) as usize;
        assert_eq!(w, want, "{}", p.label());
        let by_smem = 228 * 1024 / (w * xswz2_warp_bytes(m) as usize + 1024);
        let by_regs = 65536 / (w * 32 * 80);
        assert!(
            by_smem.min(by_regs) * 132 >= n.div_ceil(32),
            "{}: {w} warps",
            p.label()
        );
    }
    // a small K: no more warps than steps
    assert_eq!(
        GemvProblem::new(2, 64, 512, DType::Bf16).xswz2_warps(132),
        4
    );
}

/// xswz2 (and pack's form of it, among the defaults' variants), plain and as a programmatic dependent, compiles without
/// spills or serialisation notes within the X ring's 80 registers (only when asked for: the
/// variant budget).
#[test]
fn the_two_tile_ring_compiles_without_spills_in_80_registers() {
    if !crate::jit::testing::nvrtc_here() {
        return;
    }
    let specs = [
        spec_xswz2("sm_90a"),
        with_pdl(spec_xswz2("sm_90a")),
        with_pdl(spec_pack2("sm_90a", 4)),
    ];
    assert!(variants("sm_90a").contains(&with_pdl(spec_pack2("sm_90a", 4))));
    crate::jit::testing::assert_compile_clean(&specs);
    let jit = crate::jit::Jit::default();
    for s in &specs {
        let r = jit.compile(s).unwrap().resources.registers;
        assert!(r <= 80, "{}: {r} registers", s.label());
    }
}
