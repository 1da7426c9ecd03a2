//! The 4-bit kernels' sanitizer runs: `kiln moe verify --weights ...` of small expert problems
//! that reach the register path's tiles (16 tokens, the 8-token tile at two CTAs an SM, the
//! GEMM's prefill tile), its last-wave split (`KILN_FP4_TAIL`), the shared-memory path
//! (`KILN_FP4_PATH=dq`) and W4A8, and `kiln fp4 verify --suite quick` (quantiser, dequantiser,
//! GEMV), the GEMV once more through each ring (`KILN_FP4_GEMV=async`, `wide`).

use super::sanitize::Case;
use crate::ops::fp4::nvfp4_gemv::NAME as GEMV;
use crate::ops::moe::fp4::kernel::NAME as EXPERTS;

/// (version, what it reaches, kiln's arguments after `--no-store --json`, environment).
type Run = (
    &'static str,
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

/// Ragged counts, K not a multiple of 64 (padded atoms), N not of 128; the split's counts leave
/// 6 of 8 experts empty, so that the grid (sized for any rows) outnumbers the tiles twice over.
pub const RUNS: &[Run] = &[
    (
        EXPERTS,
        "nvfp4 SwiGLU, 16-token tile",
        "moe verify --weights nvfp4 --counts 3,0,9,1 --n 256 --k 512 --swiglu --routed",
        &[],
    ),
    (
        EXPERTS,
        "mxfp4 SwiGLU, 8-token tile at two CTAs an SM, K 320",
        "moe verify --weights mxfp4 --counts 2,1,0,5 --n 384 --k 320 --swiglu --routed",
        &[],
    ),
    (
        EXPERTS,
        "nvfp4 GEMM, prefill tile, N 200",
        "moe verify --weights nvfp4 --counts 70,5 --n 200 --k 256",
        &[],
    ),
    (
        EXPERTS,
        "nvfp4 SwiGLU, last wave split in 4",
        "moe verify --weights nvfp4 --counts 3,0,0,0,0,0,0,2 --n 256 --k 1024 --swiglu --routed",
        &[("KILN_FP4_TAIL", "4")],
    ),
    (
        EXPERTS,
        "nvfp4 SwiGLU, shared-memory path",
        "moe verify --weights nvfp4 --counts 40,3 --n 256 --k 256 --swiglu --routed",
        &[("KILN_FP4_PATH", "dq")],
    ),
    (
        EXPERTS,
        "W4A8 SwiGLU",
        "moe verify --weights mxfp4 --act e4m3 --counts 40,3 --n 256 --k 256 --swiglu --routed",
        &[],
    ),
    (
        GEMV,
        "quantise, dequantise, GEMV (quick suite)",
        "fp4 verify --suite quick",
        &[],
    ),
    (
        GEMV,
        "GEMV through the async ring (quick suite)",
        "fp4 verify --suite quick",
        &[("KILN_FP4_GEMV", "async")],
    ),
    (
        GEMV,
        "GEMV through the wide ring (quick suite)",
        "fp4 verify --suite quick",
        &[("KILN_FP4_GEMV", "wide")],
    ),
];

/// Whether `version` is one of the 4-bit versions these runs cover.
pub fn is_fp4(version: &str) -> bool {
    version == EXPERTS || version == GEMV
}

/// Every (tool, run) of the 4-bit `versions` (empty: both).
pub fn fp4_cases(versions: &[String], tools: &[String]) -> Vec<Case> {
    let wanted = |v: &str| versions.is_empty() || versions.iter().any(|w| w == v);
    let mut cases = Vec::new();
    for tool in tools {
        for &(version, what, args, env) in RUNS.iter().filter(|r| wanted(r.0)) {
            cases.push(Case {
                command: args.split_whitespace().map(String::from).collect(),
                env: env
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                ..Case::command(version, tool, what)
            });
        }
    }
    cases
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::DType;
    use crate::ops::moe::fp4::kernel::Fp4Tile;
    use crate::ops::moe::{MoeProblem, WeightLayout};

    #[test]
    fn every_run_is_a_sanitizer_run_of_a_4_bit_verify() {
        let tools = ["memcheck".to_string(), "racecheck".to_string()];
        let cases = fp4_cases(&[], &tools);
        assert_eq!(cases.len(), 2 * RUNS.len());
        for c in &cases {
            let a = c.args(std::path::Path::new("kiln"));
            let at = a.iter().position(|s| s == "kiln").unwrap();
            assert_eq!(a[at + 1..at + 3], ["--no-store", "--json"]);
            assert!(["moe", "fp4"].contains(&a[at + 3].as_str()), "{a:?}");
            assert!(c.problem().contains(' '), "{}", c.problem());
        }
        assert_eq!(fp4_cases(&[GEMV.to_string()], &tools).len(), 6);
        assert!(is_fp4(EXPERTS) && is_fp4(GEMV) && !is_fp4("wgmma_tma_ws"));
    }

    #[test]
    fn the_runs_reach_the_tiles_they_name() {
        let sw = |c: &[usize], n, k| {
            MoeProblem::contiguous(c, n, k, DType::Bf16, DType::Bf16)
                .with_swiglu(WeightLayout::Separate, true)
        };
        assert_eq!(Fp4Tile::choose(&sw(&[3, 0, 9, 1], 256, 512)).tt, 16);
        let paired = Fp4Tile::choose_paired(&sw(&[2, 1, 0, 5], 384, 320), None, 2, false);
        assert_eq!((paired.tt, paired.ctas), (8, 2));
        let gemm = MoeProblem::contiguous(&[70, 5], 200, 256, DType::Bf16, DType::Bf16);
        assert_eq!(Fp4Tile::choose(&gemm).tt, 256);
        // the split: 8 experts bound the grid at 8 token tiles (2 column tiles each: 16 CTAs),
        // 2 hold rows (4 tiles): a last wave a quarter full, 16 / 4 = 4 slices, K 1024 = 16 atoms
        let split = sw(&[3, 0, 0, 0, 0, 0, 0, 2], 256, 1024);
        let t = Fp4Tile::choose(&split);
        assert_eq!((t.tt, t.max_tiles_m(&split)), (8, 8));
    }
}
