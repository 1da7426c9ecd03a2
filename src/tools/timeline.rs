//! `kiln profile --timeline`: where one launch of an instrumented version (`wgmma_tma_ws`)
//! spends its time, CTA by CTA (setup, first loads, pipeline fill, mainloop, epilogue), from
//! stamps the kernel's `KILN_TRACE` variant writes; summarised per event over the CTAs.

use serde::Serialize;

use crate::ops::gemm::CtaStamps;

/// One event over the CTAs that stamped it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventRow {
    pub event: String,
    /// CTAs that stamped it (a consumer with no tile never reaches its mainloop end).
    pub ctas: usize,
    /// SM cycles since the CTA's own entry: median, min, max.
    pub cycles: [u64; 3],
    /// Microseconds since the launch's first CTA entered (global timer): median, min, max.
    pub since_start_us: [f64; 3],
}

/// The median (the upper of two middles), min and max of `v`; None when it is empty.
pub(crate) fn med_min_max<T: Copy + PartialOrd>(mut v: Vec<T>) -> Option<[T; 3]> {
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.partial_cmp(b).expect("no NaN"));
    Some([v[v.len() / 2], v[0], v[v.len() - 1]])
}

/// Per event of `names` (in order), over the CTAs whose stamp is set: cycles since the CTA's own
/// entry and time since the first entry of the launch. Events no CTA stamped are left out.
pub fn summarize(stamps: &[CtaStamps], names: &[&str]) -> Vec<EventRow> {
    let Some(start) = stamps.iter().map(|s| s.ns[0]).filter(|&t| t != 0).min() else {
        return Vec::new();
    };
    names
        .iter()
        .enumerate()
        .filter_map(|(e, name)| {
            let set: Vec<&CtaStamps> = stamps
                .iter()
                .filter(|s| s.ns[0] != 0 && s.ns[e] != 0)
                .collect();
            let cycles = med_min_max(
                set.iter()
                    .map(|s| s.clk[e].saturating_sub(s.clk[0]))
                    .collect(),
            )?;
            let us = med_min_max(
                set.iter()
                    .map(|s| s.ns[e].saturating_sub(start) as f64 / 1e3)
                    .collect(),
            )?;
            Some(EventRow {
                event: name.to_string(),
                ctas: set.len(),
                cycles,
                since_start_us: us,
            })
        })
        .collect()
}

/// The launch's span on the global timer (ns): first entry to the last stamp of any CTA.
pub fn span_ns(stamps: &[CtaStamps]) -> u64 {
    let first = stamps.iter().map(|s| s.ns[0]).filter(|&t| t != 0).min();
    let last = stamps.iter().flat_map(|s| s.ns).max();
    match (first, last) {
        (Some(f), Some(l)) => l.saturating_sub(f),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cta(entry_ns: u64, entry_clk: u64, after: [u64; 7]) -> CtaStamps {
        let mut s = CtaStamps::default();
        s.ns[0] = entry_ns;
        s.clk[0] = entry_clk;
        for (i, d) in after.iter().enumerate() {
            if *d != 0 {
                s.ns[i + 1] = entry_ns + d;
                s.clk[i + 1] = entry_clk + 2 * d;
            }
        }
        s
    }

    #[test]
    fn events_are_summarised_per_cta_and_against_the_first_entry() {
        let names = ["entry", "a", "b", "c", "d", "e", "f", "g"];
        let s = [
            cta(1_000, 50, [10, 20, 30, 40, 50, 60, 70]),
            cta(3_000, 900, [30, 40, 50, 60, 70, 80, 90]),
            // a CTA whose consumer 1 never finished a tile: its last event is missing
            cta(2_000, 10, [20, 30, 40, 50, 60, 70, 0]),
        ];
        let rows = summarize(&s, &names);
        assert_eq!(rows.len(), 8);
        assert_eq!(rows[0].cycles, [0, 0, 0]);
        assert_eq!(rows[0].since_start_us, [1.0, 0.0, 2.0]);
        // "a": 10, 30, 20 ns after each entry: 20, 60, 40 cycles
        assert_eq!(rows[1].cycles, [40, 20, 60]);
        assert_eq!(rows[7].ctas, 2);
        assert_eq!(rows[7].cycles, [180, 140, 180]);
        assert_eq!(span_ns(&s), 3_090 - 1_000);
    }

    #[test]
    fn no_stamps_no_rows() {
        assert!(summarize(&[CtaStamps::default()], &["entry"]).is_empty());
        assert_eq!(span_ns(&[]), 0);
    }
}
