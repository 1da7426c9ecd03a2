//! The MoE shape suites verification runs: ragged counts (0, 1, 40, 64, 128, 129, ...), empty
//! experts, one expert, 256 experts, N and K tails, both weight layouts, routed or not, the
//! masked layout directly and replayed from a CUDA graph, every dtype pair; the full suite adds
//! the prefill and small-M shapes (sampled rows).

use super::moe_verify::Mode;
use super::shapes::Suite;
use crate::ops::gemm::DType;
use crate::ops::moe::{MoeProblem, WeightLayout};

/// The problems of a suite, each with the mode to verify it in.
pub fn moe_suite(suite: Suite) -> Vec<(MoeProblem, Mode)> {
    let mut ragged: Vec<usize> = vec![0, 1, 40, 64, 128, 129, 0, 200, 255, 7];
    let many: Vec<usize> = (0..256)
        .map(|i| [0, 1, 3, 17, 40, 64, 0, 9][i % 8])
        .collect();
    let mut v = Vec::new();
    let bf = |c: &[usize], n, k| MoeProblem::contiguous(c, n, k, DType::Bf16, DType::Bf16);
    let sw = |p: MoeProblem, l, r| p.with_swiglu(l, r);
    // grouped: ragged, empty experts, one expert, 256 experts, N and K tails
    v.push(bf(&ragged, 256, 512));
    v.push(bf(&[0, 0, 77, 0], 130, 72));
    v.push(bf(&[1], 136, 264));
    v.push(bf(&[300], 520, 1032));
    v.push(bf(&many, 128, 128));
    // fused SwiGLU: both weight layouts, routed or not
    v.push(sw(bf(&ragged, 256, 512), WeightLayout::Separate, false));
    v.push(sw(bf(&ragged, 256, 512), WeightLayout::Interleaved, true));
    v.push(sw(bf(&[0, 1, 0], 136, 72), WeightLayout::Separate, true));
    // remainders around the SwiGLU's folds (a last tile of up to 128 + 16 or 32 rows), a K tail
    let folds = [144, 145, 16, 272, 0, 130, 160, 161];
    v.push(sw(bf(&folds, 256, 520), WeightLayout::Separate, true));
    v.push(sw(bf(&folds, 256, 520), WeightLayout::Interleaved, false));
    // masked decode layout, directly and replayed from a CUDA graph
    let masked = MoeProblem::masked(
        &[0, 1, 40, 64, 128, 3, 0, 100],
        128,
        256,
        512,
        DType::Bf16,
        DType::Bf16,
    );
    v.push(masked.clone());
    let mut cases: Vec<(MoeProblem, Mode)> = v.into_iter().map(|p| (p, Mode::Direct)).collect();
    cases.push((masked.clone(), Mode::Graph));
    cases.push((
        masked.clone().with_swiglu(WeightLayout::Interleaved, true),
        Mode::Graph,
    ));
    cases.push((
        MoeProblem::masked(&[144, 3, 140, 0], 160, 256, 264, DType::Bf16, DType::F16)
            .with_swiglu(WeightLayout::Separate, true),
        Mode::Direct,
    ));
    // every dtype pair, both ops
    for (i, o) in crate::ops::moe::dtype_pairs() {
        let p = MoeProblem::contiguous(&[33, 0, 150], 264, 136, i, o);
        cases.push((p.clone(), Mode::Direct));
        cases.push((
            MoeProblem { n: 256, ..p }.with_swiglu(WeightLayout::Separate, true),
            Mode::Direct,
        ));
    }
    if suite == Suite::Full {
        ragged.extend([1000, 3, 513]);
        for (n, k) in [(3072, 4096), (4096, 7168), (7168, 2048)] {
            cases.push((
                bf(&[40, 248, 112, 176, 64, 200, 136, 96], n, k),
                Mode::Direct,
            ));
        }
        cases.push((
            bf(&crate::ops::moe::uneven_counts(7516, 8, 1), 3072, 4096),
            Mode::Direct,
        ));
        cases.push((
            sw(
                bf(&crate::ops::moe::uneven_counts(7516, 8, 1), 3072, 4096),
                WeightLayout::Separate,
                false,
            ),
            Mode::Direct,
        ));
        cases.push((
            sw(
                bf(&crate::ops::moe::uneven_counts(7516, 8, 1), 3072, 4096),
                WeightLayout::Interleaved,
                true,
            ),
            Mode::Direct,
        ));
        cases.push((bf(&ragged, 1000, 2056), Mode::Direct));
        cases.push((
            MoeProblem::masked(&many, 64, 512, 1024, DType::F16, DType::F32),
            Mode::Graph,
        ));
        cases.push((
            sw(bf(&many, 384, 256), WeightLayout::Interleaved, false),
            Mode::Direct,
        ));
        for (i, o) in crate::ops::moe::dtype_pairs() {
            cases.push((
                MoeProblem::masked(&[5, 0, 64], 64, 136, 264, i, o),
                Mode::Direct,
            ));
            cases.push((
                MoeProblem::contiguous(&ragged, 384, 264, i, o)
                    .with_swiglu(WeightLayout::Interleaved, false),
                Mode::Direct,
            ));
        }
    }
    cases
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::moe::SwiGlu;

    #[test]
    fn suites_are_valid_and_cover_the_edges() {
        for s in [Suite::Quick, Suite::Full] {
            let cases = moe_suite(s);
            for (p, _) in &cases {
                p.validate()
                    .unwrap_or_else(|e| panic!("{}: {e}", p.label()));
            }
            let counts = |p: &MoeProblem| p.spans().iter().map(|s| s.1).collect::<Vec<_>>();
            assert!(cases.iter().any(|(p, _)| p.experts == 1));
            assert!(cases.iter().any(|(p, _)| p.experts == 256));
            assert!(cases.iter().any(|(p, _)| counts(p).contains(&0)));
            for c in [0, 1, 40, 64, 128] {
                assert!(
                    cases.iter().any(|(p, _)| counts(p).contains(&c)),
                    "no expert with {c} rows"
                );
            }
            assert!(cases
                .iter()
                .any(|(p, m)| p.is_masked() && *m == Mode::Graph));
            assert!(cases.iter().any(|(p, _)| matches!(
                p.swiglu,
                Some(SwiGlu {
                    weights: WeightLayout::Interleaved,
                    routed: true
                })
            )));
            assert!(cases.iter().any(|(p, _)| matches!(
                p.swiglu,
                Some(SwiGlu {
                    weights: WeightLayout::Separate,
                    ..
                })
            )));
            assert!(
                cases.iter().any(|(p, _)| p.k % 64 != 0) && cases.iter().any(|(p, _)| p.n % 8 != 0)
            );
        }
    }
}
