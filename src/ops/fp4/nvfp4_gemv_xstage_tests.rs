//! The xstage ring (`KILN_FP4_GEMV=xstage`) on the CPU: its copies, its in-place X permute and
//! its reads, replayed lane by lane from the kernel's arithmetic; its bank groups, its path
//! rules, its warps, and its compile.

use super::tests::{put_lean_scales, put_x_pairs, Slot};
use super::*;

/// `issue_xstage`'s copies of a stage (the fast path from each lane's fixed sources, the lean
/// ring's bounded copies for a CTA past N or a last stage of one step; X's chunk `lane` of every
/// row), then each lane's permute of its own X chunks, then `xstage_kloop`'s reads of each step
/// (read_ring's order from offsets kept a lane, X's row min(g, M - 1) at xa / xb): every lane
/// must get the codes of rows g, g + 8 at k = 128 step + 32 q, their two scale codes and X's 32
/// elements of the same k as the mma's pairs (8v + w, 8v + w + 4); every byte of the slot
/// written once.
#[test]
fn the_xstage_rings_copies_permutes_and_reads_give_each_lane_its_bytes_and_x() {
    for (n, k, m, ldx, row0) in [
        (16usize, 1024usize, 1usize, 1024usize, 0usize),
        (40, 640, 4, 648, 32),
        (48, 384, 3, 384, 16),
        (20, 256, 2, 264, 16),
        (32, 384, 8, 392, 16),
    ] {
        let steps = k / 128;
        let code = |r: usize, b: usize| (r * 131 + b * 7 + 3) as u8;
        let scale = |r: usize, b: usize| (r * 29 + b * 11 + 1) as u8;
        // X's element e of row r sits at r ldx + e: the copies' sources step rows by ldx
        let xval = |row: usize, e: usize| ((row * ldx + e) * 3 + 1) as u16;
        let pitch = XSTAGE_PITCH as usize;
        let sb = (LEAN_SLOT as usize) + pitch * m;
        let (codes_bytes, x_at) = (16 * 128, LEAN_SLOT as usize);
        let rows_in = row0 + 16 <= n;
        for stage in 0..steps.div_ceil(2) {
            let fast = rows_in && (stage + 1) * 2 <= steps;
            let mut slot = Slot::new(sb);
            let mut put = |at: usize, v: u8| slot.put(at, v);
            // the 16 bytes after each row of X are padding, never copied nor read
            for r in 0..m {
                for b in 512..pitch {
                    put(x_at + pitch * r + b, 0);
                }
            }
            for lane in 0..32 {
                if fast {
                    // codes: row lane / 2, chunks 2i + lane % 2 from l.w (+32 i), stored at
                    // wdst0 / wdst1 + 32 i; scales: 8 bytes from l.s
                    let (r, h) = (lane / 2, lane % 2);
                    let odd = r & 1;
                    let first = (row0 + r) * (k / 2) + 16 * h + stage * 128;
                    for i in 0..4 {
                        let dst = if i < 2 {
                            r * 128 + 16 * h + 64 * odd
                        } else {
                            r * 128 + 16 * h - 64 * odd
                        } + 32 * i;
                        for b in 0..16 {
                            let off = first + 32 * i + b;
                            put(dst + b, code(off / (k / 2), off % (k / 2)));
                        }
                    }
                    let s0 = (row0 + r) * (k / 16) + 8 * h + stage * 16;
                    for b in 0..8 {
                        let off = s0 + b;
                        put(
                            codes_bytes + 8 * lane + b,
                            scale(off / (k / 16), off % (k / 16)),
                        );
                    }
                } else {
                    // copy_lean_bounded: chunk lane % 8 of rows lane / 8 + 4i, zero-filled
                    let (c, hi) = (lane % 8, (lane / 8) & 1);
                    let wdst = (lane / 8) * 128 + 16 * (c ^ (hi << 2));
                    for i in 0..4 {
                        let r = lane / 8 + 4 * i;
                        let (row, step) = (row0 + r, stage * 2 + c / 4);
                        for b in 0..16 {
                            let v = if row < n && step < steps {
                                code(row, step * 64 + 16 * (c % 4) + b)
                            } else {
                                0
                            };
                            put(wdst + 512 * i + b, v);
                        }
                    }
                    put_lean_scales(&mut put, (n, steps, row0, stage, lane), codes_bytes, scale);
                }
                // X: chunk `lane` of each row (none past K), then the lane's permute of it in
                // place: pairs (0, 4), (1, 5), (2, 6), (3, 7); a chunk not copied holds what the
                // slot held (zeros here) and is never read
                let copied = (stage + 1) * 2 <= steps || lane < 16;
                let dst = x_at + 16 * xstage_chunk(lane);
                for xr in 0..m {
                    put_x_pairs(&mut put, dst + pitch * xr, |e| {
                        if copied {
                            xval(xr, stage * 256 + 8 * lane + e)
                        } else {
                            0
                        }
                    });
                }
            }
            let smem = slot.whole("the stage");
            let half = |at: usize| u16::from_le_bytes([smem[at], smem[at + 1]]);
            for u in 0..(steps - stage * 2).min(2) {
                let step = stage * 2 + u;
                for lane in 0..32 {
                    let (g, q) = (lane / 4, lane % 4);
                    let k0 = step * 128 + 32 * q;
                    // the kernel's kept offsets: rd0 / rd1 for steps 0 / 1 (1024 on for g + 8), sd
                    let odd = g & 1;
                    let rd = [
                        g * 128 + 16 * q + 64 * odd,
                        g * 128 + 16 * q + 64 * (1 - odd),
                    ];
                    let sd = codes_bytes + 16 * g + 2 * q;
                    for h in 0..2 {
                        let r = g + 8 * h;
                        let row = row0 + r;
                        let at = rd[u] + 1024 * h;
                        assert_eq!(
                            at,
                            r * 128 + 16 * ((4 * u + q) ^ ((r & 1) << 2)),
                            "read_ring's order"
                        );
                        for b in 0..16 {
                            let want = if row < n { code(row, k0 / 2 + b) } else { 0 };
                            assert_eq!(smem[at + b], want, "lane {lane} step {step}");
                        }
                        let sat = sd + 128 * h + 8 * u;
                        for b in 0..2 {
                            let want = if row < n { scale(row, k0 / 16 + b) } else { 0 };
                            assert_eq!(smem[sat + b], want, "scales of lane {lane} step {step}");
                        }
                    }
                    let xr = g.min(m - 1);
                    let xrow = x_at + pitch * xr + 64 * q;
                    let (xa, xb) = (xrow + 16 * (q & 2), xrow + 16 * (2 - (q & 2)));
                    for v in 0..4 {
                        let base = if v < 2 { xa } else { xb } + 256 * u + 16 * (v % 2);
                        for w in 0..4 {
                            let e0 = k0 + 8 * v + w;
                            let got = (half(base + 4 * w), half(base + 4 * w + 2));
                            assert_eq!(
                                got,
                                (xval(xr, e0), xval(xr, e0 + 4)),
                                "X of lane {lane} step {step} M {m}"
                            );
                        }
                    }
                }
            }
        }
    }
}

/// Each 8-lane phase of the xstage ring's 16-byte shared accesses touches each bank at most once
/// per distinct address: the X reads (q 0..3 of rows g = 2p, 2p + 1 clamped below M, at every M
/// up to 8) and each lane's permute of its own chunk of a row.
#[test]
fn the_xstage_rings_x_accesses_are_free_of_bank_conflicts() {
    let deepest = |addrs: &mut Vec<usize>| -> usize {
        addrs.sort_unstable();
        addrs.dedup();
        let mut banks = [0usize; 32];
        for a in addrs.iter() {
            for w in 0..4 {
                banks[(a / 4 + w) % 32] += 1;
            }
        }
        *banks.iter().max().unwrap()
    };
    let pitch = XSTAGE_PITCH as usize;
    for m in 1..=XSTAGE_MAX_M {
        for u in 0..2 {
            for v in 0..4 {
                for p in 0..4 {
                    let mut addrs: Vec<usize> = (8 * p..8 * p + 8)
                        .map(|lane| {
                            let (g, q) = (lane / 4, lane % 4);
                            pitch * g.min(m - 1) + 16 * xstage_chunk(16 * u + 4 * q + v)
                        })
                        .collect();
                    assert_eq!(deepest(&mut addrs), 1, "M {m} step {u} read {v} phase {p}");
                }
            }
        }
    }
    for p in 0..4 {
        let mut addrs: Vec<usize> = (8 * p..8 * p + 8).map(|l| 16 * xstage_chunk(l)).collect();
        assert_eq!(deepest(&mut addrs), 1, "permute phase {p}");
    }
}

/// Which problems take the xstage ring, and how many warps a CTA it gets: M up to 8 and K a
/// multiple of 128 (else the wide ring or the register path); 1x8192x8192 in one wave of 24
/// warps an SM, a warp's slots fitting the SM with the driver's KB a CTA.
#[test]
fn the_xstage_ring_takes_m_up_to_8_and_puts_24_warps_on_an_sm() {
    for (m, k, want) in [
        (1, 256, Fp4Gemv::Xstage),
        (8, 384, Fp4Gemv::Xstage),
        (9, 256, Fp4Gemv::Wide),
        (1, 160, Fp4Gemv::Regs),
    ] {
        let p = GemvProblem::new(m, 64, k, DType::Bf16);
        assert_eq!(p.path(Fp4Gemv::Xstage), want, "M {m} K {k}");
    }
    let p = GemvProblem::new(1, 8192, 8192, DType::Bf16);
    let w = p.xstage_warps(132);
    assert_eq!(w, 6);
    assert!(4 * (w * xstage_warp_bytes(1) + 1024) <= 228 * 1024);
    let p4 = GemvProblem::new(4, 14336, 4096, DType::Bf16);
    let w4 = p4.xstage_warps(132) as usize;
    let per_sm = 228 * 1024 / (w4 * xstage_warp_bytes(4) as usize + 1024);
    assert!(per_sm * 132 >= 896, "{w4} warps: {per_sm} CTAs an SM");
    // a small K: no more warps than stages
    assert_eq!(
        GemvProblem::new(1, 64, 512, DType::Bf16).xstage_warps(132),
        2
    );
}

/// The xstage ring compiles without spills or serialisation notes within 80 registers (only when
/// asked for: the variant budget).
#[test]
fn the_xstage_ring_compiles_without_spills_in_80_registers() {
    if !crate::jit::testing::nvrtc_here() {
        return;
    }
    let spec = spec_xstage("sm_90a");
    crate::jit::testing::assert_compile_clean(std::slice::from_ref(&spec));
    let r = crate::jit::Jit::default()
        .compile(&spec)
        .unwrap()
        .resources
        .registers;
    assert!(r <= 80, "{r} registers");
}
