//! Programmatic dependent launch of the dense FP8 GEMM (`KILN_FP8_PDL`, `Fp8Args.pdl`): in a
//! stream of GEMMs (a decode step's projections, each one or two waves of 12-40 us at M <= 128)
//! each launch's fixed part (the launch, the CTAs' prologue, the first loads' DRAM round trip)
//! can run while the kernel before it finishes, where the per-launch figures pay it in full.
//! Launches are programmatic dependents by default since ledger row 29 ([`Fp8Pdl::default_for`]).

/// How the dense FP8 GEMM is launched after the kernel before it on the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum Fp8Pdl {
    /// Plainly: it starts once the kernel before has finished (the default for a tile's slices
    /// summed in a cluster, [`Fp8Pdl::default_for`]).
    Off,
    /// As the programmatic dependent of the kernel before: its CTAs start as that grid's CTAs
    /// leave the SMs, set up, and wait for that grid to finish before any global read or write.
    /// The default otherwise ([`Fp8Pdl::default_for`]).
    #[default]
    Wait,
    /// As [`Fp8Pdl::Wait`], and the B tiles of each CTA's first ring of stages are loaded before
    /// the wait: the weights start streaming while the kernel before still runs. Only for a B
    /// that no earlier work on the stream writes (weights), which the caller promises; single
    /// CTAs only (pairs multicasting a tile take `Wait`'s path).
    WeightsEarly,
}

impl Fp8Pdl {
    pub const ALL: [Fp8Pdl; 3] = [Fp8Pdl::Off, Fp8Pdl::Wait, Fp8Pdl::WeightsEarly];

    /// `KILN_FP8_PDL`'s spelling: 0, 1 or 2.
    pub fn name(self) -> &'static str {
        match self {
            Fp8Pdl::Off => "0",
            Fp8Pdl::Wait => "1",
            Fp8Pdl::WeightsEarly => "2",
        }
    }

    pub fn parse(s: &str) -> Option<Fp8Pdl> {
        Fp8Pdl::ALL.into_iter().find(|p| p.name() == s)
    }

    /// What the kernel reads in `Fp8Args.pdl`: bit 0 wait, bit 1 B's first stages before it.
    pub fn bits(self) -> i32 {
        match self {
            Fp8Pdl::Off => 0,
            Fp8Pdl::Wait => 1,
            Fp8Pdl::WeightsEarly => 3,
        }
    }

    /// The mode a launch takes when `KILN_FP8_PDL` is unset: [`Fp8Pdl::Wait`], but plainly where
    /// the launch sums a tile's slices in a cluster (`cluster_sum`: the `c` configs, whose grid is
    /// the units). In chains of 8 on an H200 (ledger row 29, two rounds of 2026-11-30) `Wait` took
    /// 0.3-0.9 us a launch off plain launches at 128x32768x512, 128x7168x2048, 64x32768x512 and
    /// 64x2112x7168, 0.1-0.2 at 128x2112x7168 and 128x4096x7168, and was as fast at
    /// 128x24576x1536 (-0.1, +0.2: within the spread), and it never changes the one-launch figures;
    /// `128pte/2c` lost 0.5 us in both rounds (128x7168x16384), and `64x128ps/2c` 0.2 at
    /// 64x7168x16384. (`WeightsEarly` needs the caller's promise: never a default.)
    pub fn default_for(cluster_sum: bool) -> Fp8Pdl {
        match cluster_sum {
            true => Fp8Pdl::Off,
            false => Fp8Pdl::Wait,
        }
    }

    /// Whether the launch takes the programmatic-serialization attribute.
    pub fn dependent(self) -> bool {
        self != Fp8Pdl::Off
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_early_weights_imply_the_wait() {
        for p in Fp8Pdl::ALL {
            assert_eq!(Fp8Pdl::parse(p.name()), Some(p));
            assert_eq!(p.dependent(), p.bits() & 1 == 1);
        }
        assert_eq!(Fp8Pdl::parse("3"), None);
        assert_eq!(Fp8Pdl::default(), Fp8Pdl::Wait);
        assert_eq!(Fp8Pdl::default_for(false), Fp8Pdl::Wait);
        assert_eq!(Fp8Pdl::default_for(true), Fp8Pdl::Off);
    }
}
