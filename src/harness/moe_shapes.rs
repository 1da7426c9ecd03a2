//! The MoE shape suites verification runs: ragged counts (0, 1, 40, 64, 128, 129, ...), empty
//! experts, one expert, 256 experts, N and K tails, both weight layouts, routed or not, the
//! masked layout directly and replayed from a CUDA graph, every dtype pair; the full suite adds
//! the prefill and small-M shapes (sampled rows).

use super::moe_verify::Mode;
use super::shapes::Suite;
use crate::ops::gemm::DType;
use crate::ops::moe::{MoeProblem, WeightLayout};

/// 256 experts of 0 to 64 rows (empty ones among them): the many-experts case of every MoE suite.
pub fn many_experts() -> Vec<usize> {
    (0..256)
        .map(|i| [0, 1, 3, 17, 40, 64, 0, 9][i % 8])
        .collect()
}

/// The problems of a suite, each with the mode to verify it in.
pub fn moe_suite(suite: Suite) -> Vec<(MoeProblem, Mode)> {
    use Mode::{Direct, Graph};
    use WeightLayout::{Interleaved as Il, Separate as Sep};
    let mut ragged: Vec<usize> = vec![0, 1, 40, 64, 128, 129, 0, 200, 255, 7];
    let many = many_experts();
    let bf = |c: &[usize], n, k| MoeProblem::contiguous(c, n, k, DType::Bf16, DType::Bf16);
    let sw = |p: MoeProblem, l, r| p.with_swiglu(l, r);
    // remainders around the SwiGLU's folds (a last tile of up to 128 + 16 or 32 rows), a K tail
    let folds = [144, 145, 16, 272, 0, 130, 160, 161];
    let masked = MoeProblem::masked;
    let decode = masked(
        &[0, 1, 40, 64, 128, 3, 0, 100],
        128,
        256,
        512,
        DType::Bf16,
        DType::Bf16,
    );
    let mut cases = vec![
        // grouped: ragged, empty experts, one expert, 256 experts, N and K tails
        (bf(&ragged, 256, 512), Direct),
        (bf(&[0, 0, 77, 0], 130, 72), Direct),
        (bf(&[1], 136, 264), Direct),
        (bf(&[300], 520, 1032), Direct),
        (bf(&many, 128, 128), Direct),
        // fused SwiGLU: both weight layouts, routed or not, the folds
        (sw(bf(&ragged, 256, 512), Sep, false), Direct),
        (sw(bf(&ragged, 256, 512), Il, true), Direct),
        (sw(bf(&[0, 1, 0], 136, 72), Sep, true), Direct),
        (sw(bf(&folds, 256, 520), Sep, true), Direct),
        (sw(bf(&folds, 256, 520), Il, false), Direct),
        // masked decode layout, directly and replayed from a CUDA graph
        (decode.clone(), Direct),
        (decode.clone(), Graph),
        (sw(decode, Il, true), Graph),
        (
            sw(
                masked(&[144, 3, 140, 0], 160, 256, 264, DType::Bf16, DType::F16),
                Sep,
                true,
            ),
            Direct,
        ),
    ];
    // every dtype pair, both ops
    for (i, o) in crate::ops::moe::dtype_pairs() {
        let p = MoeProblem::contiguous(&[33, 0, 150], 264, 136, i, o);
        cases.push((p.clone(), Direct));
        cases.push((sw(MoeProblem { n: 256, ..p }, Sep, true), Direct));
    }
    if suite == Suite::Full {
        ragged.extend([1000, 3, 513]);
        for (n, k) in [(3072, 4096), (4096, 7168), (7168, 2048)] {
            cases.push((bf(&[40, 248, 112, 176, 64, 200, 136, 96], n, k), Direct));
        }
        let prefill = bf(&crate::ops::moe::uneven_counts(7516, 8, 1), 3072, 4096);
        cases.extend([
            (prefill.clone(), Direct),
            (sw(prefill.clone(), Sep, false), Direct),
            (sw(prefill, Il, true), Direct),
            (bf(&ragged, 1000, 2056), Direct),
            (masked(&many, 64, 512, 1024, DType::F16, DType::F32), Graph),
            (sw(bf(&many, 384, 256), Il, false), Direct),
        ]);
        for (i, o) in crate::ops::moe::dtype_pairs() {
            cases.push((masked(&[5, 0, 64], 64, 136, 264, i, o), Direct));
            let p = MoeProblem::contiguous(&ragged, 384, 264, i, o);
            cases.push((sw(p, Il, false), Direct));
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
