//! The FP8 GEMM's sanitizer runs: `kiln verify --dtype e4m3|e5m2 --scale ...` under each tool, at
//! small ragged problems that reach every scale mode, both compiled widths and split-K, the
//! block-scaled ones again under the bytes rule (`KILN_FP8_RULE=bytes`: the 64-row tile, the
//! scales through shared memory, the atomic split-K sum), and one under the large rule
//! (`KILN_FP8_RULE=large`: `128pte`, the A scales by TMA and the promotion pipelined).

use super::sanitize::Case;
use crate::ops::fp8::gemm::NAME;

/// (shape, dtype, scale, out): ragged M and N, a last partial K block, split-K (M = 64 against
/// K = 1024: 2 tiles of 132 SMs), e5m2 with tensor scales, f32 output.
pub const PROBLEMS: &[(&str, &str, &str, &str)] = &[
    ("129x200x272", "e4m3", "block", "bf16"),
    ("64x256x1024", "e4m3", "block", "bf16"),
    ("1x256x256", "e4m3", "tensor", "f32"),
    ("127x160x144", "e4m3", "row", "bf16"),
    ("96x128x512", "e5m2", "tensor", "bf16"),
];

/// The large rule's problem (`128pte` from M = 1024 and K = 2048): 9 x 17 tiles, so some CTAs
/// take two; its last tile-row holds 12 rows (the second consumer's rows all past M), its last
/// column tile 8 columns, its last K block 16 deep.
pub const LARGE_PROBLEM: (&str, &str, &str, &str) = ("1036x2056x2064", "e4m3", "block", "bf16");

/// Every (tool, FP8 problem) as a case of the FP8 GEMM's version, the block-scaled problems once
/// more under the bytes rule, and [`LARGE_PROBLEM`] under the large rule.
pub fn fp8_cases(tools: &[String]) -> Vec<Case> {
    let mut v = Vec::new();
    let runs = PROBLEMS
        .iter()
        .map(|p| (p, None))
        .chain(
            PROBLEMS
                .iter()
                .filter(|p| p.2 == "block")
                .map(|p| (p, Some("bytes"))),
        )
        .chain(std::iter::once((&LARGE_PROBLEM, Some("large"))));
    for tool in tools {
        for (&(shape, dtype, scale, out), rule) in runs.clone() {
            v.push(Case {
                version: NAME.into(),
                tool: tool.clone(),
                shape: shape.into(),
                layout: "RC".into(),
                dtype: dtype.into(),
                out: out.into(),
                scale: Some(scale.into()),
                env: rule
                    .map(|r| vec![("KILN_FP8_RULE".to_string(), r.to_string())])
                    .unwrap_or_default(),
                ..Case::default()
            });
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::fp8::request::{fp8_problem, GemmFlags};

    #[test]
    fn every_fp8_case_is_a_valid_fp8_verify_request() {
        let cases = fp8_cases(&["memcheck".into(), "racecheck".into()]);
        let block = PROBLEMS.iter().filter(|p| p.2 == "block").count();
        assert_eq!(cases.len(), 2 * (PROBLEMS.len() + block + 1));
        for rule in ["bytes", "large"] {
            assert!(cases
                .iter()
                .any(|c| c.env.iter().any(|(k, v)| k == "KILN_FP8_RULE" && v == rule)));
        }
        for c in &cases {
            let f = GemmFlags {
                shape: Some(&c.shape),
                layout: &c.layout,
                dtype: &c.dtype,
                out: Some(&c.out),
                scale: c.scale.as_deref(),
                alpha: 1.0,
                ..GemmFlags::default()
            };
            let p = fp8_problem(&f, None).unwrap().unwrap();
            let dev = crate::device::DeviceInfo::h100_sxm();
            assert!(crate::ops::fp8::gemm::supports(&p, &dev).is_ok(), "{p}");
            let args = c.args(std::path::Path::new("kiln"));
            assert!(args
                .windows(2)
                .any(|w| w[0] == "--scale" && Some(&w[1]) == c.scale.as_ref()));
        }
        // one case splits K on an H100
        let p = crate::ops::fp8::Fp8Problem::new(
            64,
            256,
            1024,
            crate::ops::gemm::DType::Bf16,
            crate::ops::fp8::ScaleMode::Block,
        );
        let dev = crate::device::DeviceInfo::h100_sxm();
        // (the tile's slices: the rule may take its whole-tile twin, `u`, which has none)
        let c = crate::ops::fp8::gemm::Fp8Config {
            whole: false,
            ..crate::ops::fp8::gemm::choose(&p, &dev)
        };
        assert!(crate::ops::fp8::gemm::choose_splits(&p, &c, &dev) > 1);
        let bytes =
            crate::ops::fp8::gemm::choose_by(&p, &dev, crate::ops::fp8::gemm::Fp8Rule::Bytes);
        assert!(bytes.splits > 1 && bytes.is_new(), "{bytes}");
        // the large rule's problem runs 128pte over more tiles than SMs, with a ragged last
        // tile-row
        let (shape, ..) = LARGE_PROBLEM;
        let dims: Vec<usize> = shape.split('x').map(|d| d.parse().unwrap()).collect();
        let p = crate::ops::fp8::Fp8Problem::new(
            dims[0],
            dims[1],
            dims[2],
            crate::ops::gemm::DType::Bf16,
            crate::ops::fp8::ScaleMode::Block,
        );
        let large =
            crate::ops::fp8::gemm::choose_by(&p, &dev, crate::ops::fp8::gemm::Fp8Rule::Large);
        assert_eq!(large.to_string(), "128pte");
        assert!(crate::ops::fp8::gemm::tiles(&p, &large) > dev.sm_count as u64);
        assert_eq!(p.m % 128, 12);
    }
}
