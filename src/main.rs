//! The `kiln` command line: parse, call the library, print. No logic of its own.

mod cli;

use std::process::ExitCode;

fn main() -> ExitCode {
    match cli::run() {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kiln: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}
