//! Output: plain-text tables for the terminal and JSON for machines.

pub mod charts;
pub mod data;
pub mod document;
pub mod grid;
pub mod html;
pub mod markdown;
pub mod table;

pub use table::{sci, Table};
