//! Which GEMM versions a bench times beside the vendor on each problem: a fixed list, or the
//! dispatch's own choice per problem (what a caller of the library gets); and what they compile.

use super::check::CheckItem;
use crate::device::DeviceInfo;
use crate::error::Error;
use crate::ops::gemm::{GemmKernel, GemmProblem};
use crate::ops::registry::Registry;
use crate::ops::tuned::TunedTable;

/// The name a problem no version supports is skipped under, with the dispatch's reasons.
pub const DISPATCH: &str = "dispatch";

/// The versions timed on each problem.
#[derive(Clone, Copy)]
pub enum BenchVersions<'k> {
    /// These versions on every problem; one that refuses a problem is skipped with its reason.
    Listed(&'k [&'k dyn GemmKernel]),
    /// For each problem the version [`Registry::select_gemm`] picks on the device (`requested`:
    /// a configured version, as the dispatch takes it), so shapes of one set may run different ones.
    Dispatched {
        registry: &'k Registry,
        tuned: &'k TunedTable,
        requested: Option<&'k str>,
    },
}

impl<'k> BenchVersions<'k> {
    /// The versions to time on `p` and the (name, reason) of each skipped before any launch.
    pub fn for_problem(
        &self,
        p: &GemmProblem,
        dev: &DeviceInfo,
    ) -> (Vec<&'k dyn GemmKernel>, Vec<(String, String)>) {
        match *self {
            BenchVersions::Listed(ks) => (ks.to_vec(), Vec::new()),
            BenchVersions::Dispatched {
                registry,
                tuned,
                requested,
            } => match registry.select_gemm(p, dev, tuned, requested) {
                Ok(k) => (vec![k], Vec::new()),
                Err(Error::Unsupported { reason, .. }) => {
                    (Vec::new(), vec![(DISPATCH.into(), reason)])
                }
                Err(e) => (Vec::new(), vec![(DISPATCH.into(), e.to_string())]),
            },
        }
    }

    /// The variants a bench of `problems` on `dev` compiles, each once, then the L2 flush kernel
    /// every timed launch waits for: listed versions version by version, dispatched ones in the
    /// problems' order.
    pub fn compile_items(
        &self,
        problems: &[GemmProblem],
        dev: &DeviceInfo,
        tuned: &TunedTable,
    ) -> Vec<CheckItem> {
        let mut pairs: Vec<(&dyn GemmKernel, &GemmProblem)> = Vec::new();
        match self {
            BenchVersions::Listed(ks) => {
                for k in ks.iter() {
                    pairs.extend(problems.iter().map(|p| (*k, p)));
                }
            }
            BenchVersions::Dispatched { .. } => {
                for p in problems {
                    pairs.extend(self.for_problem(p, dev).0.into_iter().map(|k| (k, p)));
                }
            }
        }
        let mut seen = std::collections::HashSet::new();
        let mut items = Vec::new();
        for (k, p) in pairs {
            if k.supports(p, dev).is_err() {
                continue;
            }
            for spec in k.specs_for(p, dev, tuned) {
                if seen.insert(spec.clone()) {
                    items.push(("gemm", k.name(), spec));
                }
            }
        }
        items.push((
            "harness",
            "l2_read_flush",
            super::bench::read_flush_spec(&dev.arch()),
        ));
        // The fill that makes the bench's inputs on the GPU.
        items.push((
            "harness",
            "counter_fill",
            super::device_data::spec(&dev.arch()),
        ));
        items
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::gemm::{DType, Layout};

    fn dispatched<'a>(
        registry: &'a Registry,
        tuned: &'a TunedTable,
        requested: Option<&'a str>,
    ) -> BenchVersions<'a> {
        BenchVersions::Dispatched {
            registry,
            tuned,
            requested,
        }
    }

    #[test]
    fn the_dispatch_times_the_version_it_would_run_and_says_why_when_none_can() {
        let (reg, none, dev) = (
            Registry::default(),
            TunedTable::empty(),
            DeviceInfo::h100_sxm(),
        );
        let v = dispatched(&reg, &none, None);
        let p = GemmProblem::new(4096, 4096, 4096, Layout::RC, DType::Bf16, DType::Bf16);
        let (ks, skipped) = v.for_problem(&p, &dev);
        let chosen = reg.select_gemm(&p, &dev, &none, None).unwrap();
        assert_eq!(
            ks.iter().map(|k| k.name()).collect::<Vec<_>>(),
            [chosen.name()]
        );
        assert!(skipped.is_empty());
        // A configured version the device does not run is a skip with its reason, not an error.
        let forced = dispatched(&reg, &none, Some("wgmma_tma_ws"));
        let ampere = DeviceInfo {
            compute_capability: (8, 0),
            ..dev.clone()
        };
        let (ks, skipped) = forced.for_problem(&p, &ampere);
        assert!(ks.is_empty());
        assert_eq!(skipped.len(), 1);
        assert_eq!(skipped[0].0, DISPATCH);
        assert!(skipped[0].1.contains("Hopper"), "{}", skipped[0].1);
        // A listed version is timed wherever it is listed; the bench skips it if it refuses.
        let listed = [chosen];
        let (ks, skipped) = BenchVersions::Listed(&listed).for_problem(&p, &ampere);
        assert_eq!((ks.len(), skipped.len()), (1, 0));
    }

    #[test]
    fn dispatched_items_are_the_chosen_versions_variants_once_then_the_flush_and_the_fill() {
        let (reg, none, dev) = (
            Registry::default(),
            TunedTable::empty(),
            DeviceInfo::h100_sxm(),
        );
        let v = dispatched(&reg, &none, None);
        let p = GemmProblem::new(4096, 4096, 4096, Layout::RC, DType::Bf16, DType::Bf16);
        let items = v.compile_items(&[p, p], &dev, &none);
        let chosen = reg.select_gemm(&p, &dev, &none, None).unwrap();
        let specs = chosen.specs_for(&p, &dev, &none);
        assert_eq!(
            items.len(),
            specs.len() + 2,
            "each variant once, then the flush and the fill"
        );
        assert!(items[..specs.len()].iter().all(|i| i.1 == chosen.name()));
        let tail: Vec<&str> = items[specs.len()..].iter().map(|i| i.1).collect();
        assert_eq!(tail, ["l2_read_flush", "counter_fill"]);
    }
}
