//! Argument parsing and one handler per subcommand.

mod args;
mod commands;
mod progress;

use std::process::ExitCode;

use clap::Parser;

pub use args::{Cli, Command};

pub fn run() -> kiln::Result<ExitCode> {
    let cli = Cli::parse();
    let config = kiln::config::Config::load(cli.config.as_deref())?;
    let env = commands::Env::new(&cli, config);
    match &cli.command {
        Command::Devices => commands::devices(&env),
        Command::Peak => commands::peak(&env),
        Command::Check(a) => commands::check(&env, a),
        Command::Versions => commands::versions(&env),
        Command::Verify(a) => commands::verify(&env, a),
        Command::Bench(a) => commands::bench(&env, a),
        Command::Suite(a) => commands::suite(&env, a),
        Command::Cache(a) => commands::cache(&env, a),
        Command::Results(a) => commands::results(&env, a),
    }
}
