//! Programmatic dependent launch of the dense FP8 GEMM (`KILN_FP8_PDL`, `Fp8Args.pdl`): in a
//! stream of GEMMs (a decode step's projections, each one or two waves of 12-40 us at M <= 128)
//! each launch's fixed part (the launch, the CTAs' prologue, the first loads' DRAM round trip)
//! can run while the kernel before it finishes, where the per-launch figures pay it in full.

/// How the dense FP8 GEMM is launched after the kernel before it on the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub enum Fp8Pdl {
    /// Plainly: it starts once the kernel before has finished (the default).
    #[default]
    Off,
    /// As the programmatic dependent of the kernel before: its CTAs start as that grid's CTAs
    /// leave the SMs, set up, and wait for that grid to finish before any global read or write.
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
        assert_eq!(Fp8Pdl::default(), Fp8Pdl::Off);
    }
}
