//! The columns of the bench tables over the one bench row ([`Row`]): a heading and a cell made
//! from the row's keys, written once where several families print a key the same way.

use kiln::harness::bench::Row;

use super::verdicts::Cell;

/// A column of a bench table.
pub(super) type Col = Cell<Row>;

pub(super) const VERSION: Col = ("version", |r| r.text("version"));
pub(super) const PROBLEM: Col = ("problem", |r| r.text("problem"));
pub(super) const MEDIAN_MS: Col = ("median ms", |r| r.fixed("median_ms", 4));
pub(super) const MIN: Col = ("min", |r| r.fixed("min_ms", 4));
pub(super) const MAX: Col = ("max", |r| r.fixed("max_ms", 4));
pub(super) const TFLOPS: Col = ("TFLOPS", |r| r.fixed("tflops", 0));

/// A bench's table: a row per timing, then `footer` (the device, with what the family says
/// of the run).
pub(super) fn text(columns: &[Col], rows: &[Row], footer: &str) -> String {
    format!(
        "{}{footer}\n",
        super::verdicts::table(columns, rows).render()
    )
}
