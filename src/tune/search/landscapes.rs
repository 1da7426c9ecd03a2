//! Landscapes the search tests replay: synthetic ones with known shapes (a bowl, a deceptive
//! basin, noise, a ridge, failing regions) and the exhaustive ones committed from GPU runs.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::tune::space::{Config, ParamSpace};

/// A GEMM-like synthetic landscape: a smooth bowl over tile sizes and stages, a narrow
/// optimum, small ripples from a nuisance parameter, and an infeasible (failed) corner.
pub(crate) fn synthetic() -> (ParamSpace, Vec<(Config, f64)>) {
    let s = ParamSpace::new()
        .param("BM", &[64, 128, 256])
        .param("BN", &[64, 128, 256])
        .param("BK", &[32, 64])
        .param("STAGES", &[2, 3, 4, 5, 6])
        .param("GROUP_M", &[4, 8, 16])
        .rule("at most 128 accumulators per thread", |c| {
            c.get("BM").unwrap() * c.get("BN").unwrap() <= 128 * 256
        });
    let land = s
        .enumerate()
        .into_iter()
        .map(|c| {
            let g = |k| c.get(k).unwrap() as f64;
            let smem = (g("BM") + g("BN")) * g("BK") * 2.0 * g("STAGES");
            let t = if smem > 232448.0 {
                f64::INFINITY
            } else {
                let tile = (g("BM") * g("BN")).log2();
                1.0 + 0.08 * (tile - 15.0).powi(2)
                    + 0.03 * (g("STAGES") - 4.0).powi(2)
                    + 0.02 * (g("BK") / 32.0 - 1.0)
                    + 0.004 * (g("GROUP_M").log2() - 3.0).abs()
            };
            (c, t)
        })
        .collect();
    (s, land)
}

/// Like `synthetic`, but with no BK, failures inside the space and a steeper bowl.
pub(crate) fn synthetic_hard() -> (ParamSpace, Vec<(Config, f64)>) {
    let s = ParamSpace::new()
        .param("BM", &[64, 128, 256])
        .param("BN", &[64, 128, 256])
        .param("STAGES", &[2, 3, 4, 5, 6])
        .param("GROUP_M", &[4, 8, 16]);
    let land = s
        .enumerate()
        .into_iter()
        .map(|c| {
            let g = |k| c.get(k).unwrap() as f64;
            let t = if g("BM") * g("BN") > 32768.0 {
                f64::INFINITY
            } else {
                1.0 + 0.1 * ((g("BM") * g("BN")).log2() - 15.0).powi(2)
                    + 0.04 * (g("STAGES") - 4.0).powi(2)
                    + 0.003 * g("GROUP_M").log2()
            };
            (c, t)
        })
        .collect();
    (s, land)
}

/// A deceptive landscape: a broad smooth bowl whose floor (time 1.0) sits near the low
/// corner of A, B, C, and a narrow basin around the far corner A = B = C = 3 (10% faster at
/// its peak) that the bowl's slope points away from: only configs at most one of A, B, C away
/// from the peak see it. 576 configs, none invalid.
pub(crate) fn synthetic_deceptive() -> (ParamSpace, Vec<(Config, f64)>) {
    let s = ParamSpace::new()
        .param("A", &[0, 1, 2, 3])
        .param("B", &[0, 1, 2, 3])
        .param("C", &[0, 1, 2, 3])
        .param("D", &[0, 1, 2])
        .param("E", &[0, 1, 2]);
    let land = s
        .enumerate()
        .into_iter()
        .map(|c| {
            let g = |k| c.get(k).unwrap() as f64;
            let off = ["A", "B", "C"].iter().filter(|&&k| g(k) != 3.0).count() as f64;
            let t = if off <= 1.0 {
                0.90 + 0.04 * off + 0.01 * (g("D") - 2.0).abs() + 0.002 * g("E")
            } else {
                1.0 + 0.05 * ((g("A") - 1.0).powi(2) + (g("B") - 1.0).powi(2))
                    + 0.05 * (g("C") - 1.0).powi(2)
                    + 0.03 * (g("D") - 1.0).powi(2)
                    + 0.01 * g("E")
            };
            (c, t)
        })
        .collect();
    (s, land)
}

/// The GEMM-like `synthetic` landscape with every time multiplied by a fixed pseudo-random
/// factor in [0.97, 1.03] (measurement noise frozen into the landscape): the bowl is rugged,
/// with many one-step local optima.
pub(crate) fn synthetic_noisy() -> (ParamSpace, Vec<(Config, f64)>) {
    let (s, land) = synthetic();
    let mut rng = SmallRng::seed_from_u64(42);
    let land = land
        .into_iter()
        .map(|(c, t)| (c, t * rng.gen_range(0.97..1.03)))
        .collect();
    (s, land)
}

/// A narrow ridge: the time grows fast with the distance from the diagonal X = Y + 1 of an
/// 8 x 8 grid (an interaction no single parameter shows), gently along it; 768 configs.
pub(crate) fn synthetic_ridge() -> (ParamSpace, Vec<(Config, f64)>) {
    let s = ParamSpace::new()
        .param("X", &[0, 1, 2, 3, 4, 5, 6, 7])
        .param("Y", &[0, 1, 2, 3, 4, 5, 6, 7])
        .param("Z", &[0, 1, 2, 3])
        .param("W", &[0, 1, 2]);
    let land = s
        .enumerate()
        .into_iter()
        .map(|c| {
            let g = |k| c.get(k).unwrap() as f64;
            let t = 1.0
                + 0.15 * (g("X") - g("Y") - 1.0).abs()
                + 0.01 * (g("X") - 5.0).powi(2)
                + 0.03 * (g("Z") - 2.0).powi(2)
                + 0.005 * g("W");
            (c, t)
        })
        .collect();
    (s, land)
}

/// Many failures: 240 configs of which those over a size product fail (a region), and
/// another 15% fail at random (scattered, as compile or verification failures come), with the
/// optimum next to the failing region.
pub(crate) fn synthetic_failing() -> (ParamSpace, Vec<(Config, f64)>) {
    let s = ParamSpace::new()
        .param("A", &[1, 2, 4, 8])
        .param("B", &[1, 2, 4, 8])
        .param("C", &[2, 3, 4, 5, 6])
        .param("D", &[0, 1, 2]);
    let mut rng = SmallRng::seed_from_u64(7);
    let land = s
        .enumerate()
        .into_iter()
        .map(|c| {
            let g = |k| c.get(k).unwrap() as f64;
            let scattered = rng.gen_bool(0.15);
            let t = if g("A") * g("B") * g("C") > 48.0 || scattered {
                f64::INFINITY
            } else {
                1.0 + 0.2 * ((g("A") * g("B")).log2() - 4.0).abs()
                    + 0.05 * (g("C") - 4.0).abs()
                    + 0.01 * g("D")
                    + if g("A") != g("B") { 0.03 } else { 0.0 }
            };
            (c, t)
        })
        .collect();
    (s, land)
}

/// A landscape committed under the repository root.
pub(crate) fn load_committed(path: &str) -> crate::tune::landscape::Landscape {
    crate::tune::landscape::Landscape::load(
        &std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path),
    )
    .unwrap()
}

/// A landscape committed under the repository root, as its space and points.
pub(crate) fn committed_at(path: &str) -> (ParamSpace, Vec<(Config, f64)>) {
    let l = load_committed(path);
    (l.space(), l.points())
}

/// The exhaustive landscapes of today's `wgmma_tma_ws` space (H100, 2026-11-24; GEMM ledger
/// #92), each with its column name in the sweep.
pub(crate) const CURRENT_WS_LANDSCAPES: [(&str, &str); 10] = [
    (
        "ws4096",
        "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-4096x4096x4096.json",
    ),
    (
        "ws2048",
        "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-2048x2048x2048.json",
    ),
    (
        "ws512L",
        "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-512x4096x14336.json",
    ),
    (
        "ws128L",
        "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-128x4096x14336.json",
    ),
    (
        "ws4000",
        "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-4000x4000x4000.json",
    ),
    (
        "ws512S",
        "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-512x4096x4096.json",
    ),
    (
        "ws3000",
        "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-3000x3000x3000.json",
    ),
    (
        "ws8192L",
        "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-8192x14336x4096.json",
    ),
    (
        "ws1024",
        "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-1024x1024x1024.json",
    ),
    (
        "ws16k",
        "tests/fixtures/landscapes/wgmma_tma_ws-h100/ws-16384x16384x16384.json",
    ),
];

pub(crate) fn committed() -> (ParamSpace, Vec<(Config, f64)>) {
    committed_at("tests/fixtures/landscapes/mma_sync-h200.json")
}
