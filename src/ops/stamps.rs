//! The per-CTA phase stamps of an instrumented launch (the GEMM timeline's and the MoE kernels'):
//! one record a CTA of the global timer and the SM clock per event (`kernels/common/stamp.cuh`).

/// One record of `N` events: per event the global timer (ns, one clock for every SM) and the SM
/// clock (cycles, finer; its own SM only); 0 where the event was not stamped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamps<const N: usize> {
    pub ns: [u64; N],
    pub clk: [u64; N],
}

impl<const N: usize> Default for Stamps<N> {
    fn default() -> Self {
        Stamps {
            ns: [0; N],
            clk: [0; N],
        }
    }
}

impl<const N: usize> Stamps<N> {
    /// The words a record holds: `N` ns stamps, then `N` clock stamps.
    pub const WORDS: usize = 2 * N;

    /// The records of a downloaded buffer, in order (a trailing partial record is dropped).
    pub fn records(words: &[u64]) -> impl Iterator<Item = Self> + '_ {
        words.chunks_exact(Self::WORDS).map(|w| {
            let mut s = Self::default();
            s.ns.copy_from_slice(&w[..N]);
            s.clk.copy_from_slice(&w[N..]);
            s
        })
    }

    /// Whether the CTA stamped its first event (a record never reached keeps its zeros).
    pub fn entered(&self) -> bool {
        self.ns[0] != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_its_stamps_then_its_clocks() {
        let words: Vec<u64> = (0..7).collect();
        let r: Vec<Stamps<3>> = Stamps::records(&words).collect();
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].ns, [0, 1, 2]);
        assert_eq!(r[0].clk, [3, 4, 5]);
        assert!(!r[0].entered());
        assert!(Stamps::<2> {
            ns: [5, 0],
            clk: [0; 2]
        }
        .entered());
    }
}
