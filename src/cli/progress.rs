//! Progress bars on stderr for anything that takes seconds (hidden under --json or no terminal).

use indicatif::{ProgressBar, ProgressStyle};

pub fn bar(len: usize, what: &str, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(len as u64);
    pb.set_style(
        ProgressStyle::with_template("{prefix:>8} [{bar:30}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_prefix(what.to_string());
    pb
}
