//! Bakes the git commit kiln is built from into `KILN_GIT_COMMIT` (`abc1234`, `abc1234-dirty`
//! with uncommitted changes, `unknown` without git), for the store to tag every run with.

use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

fn main() {
    let commit = git(&["rev-parse", "--short", "HEAD"]).filter(|c| !c.is_empty());
    let value = match &commit {
        Some(c) => match git(&["status", "--porcelain"]) {
            Some(s) if !s.is_empty() => format!("{c}-dirty"),
            _ => c.clone(),
        },
        None => "unknown".to_string(),
    };
    println!("cargo:rustc-env=KILN_GIT_COMMIT={value}");

    // Rerun on a new commit or index, and on edits to the sources (which make the tree dirty).
    // Only existing paths are named: cargo reruns on every build for a missing one.
    println!("cargo:rerun-if-changed=build.rs");
    let git_dir = git(&["rev-parse", "--absolute-git-dir"]).unwrap_or_else(|| ".git".into());
    let git_dir = Path::new(&git_dir);
    let mut watched = vec![git_dir.join("HEAD"), git_dir.join("index")];
    if let Ok(head) = std::fs::read_to_string(git_dir.join("HEAD")) {
        if let Some(r) = head.trim().strip_prefix("ref: ") {
            watched.push(git_dir.join(r));
        }
    }
    watched.extend(["src", "kernels", "Cargo.toml"].map(Into::into));
    for p in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", p.display());
    }
}
