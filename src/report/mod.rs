//! Output: plain-text tables for the terminal and JSON for machines.

pub mod table;

pub use table::Table;
