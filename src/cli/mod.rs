//! Argument parsing and one handler per subcommand.

mod args;
mod attention;
mod commands;
mod fp8;
mod moe;
mod progress;
mod tools;
mod tune;

use std::process::ExitCode;

use clap::Parser;

pub use args::{Cli, Command};

pub fn run() -> kiln::Result<ExitCode> {
    let cli = Cli::parse();
    let config = kiln::config::Config::load(cli.config.as_deref())?;
    // The tuning cache the default dispatch reads lives in the configured store.
    kiln::tune::cache::use_store(config.store_path());
    let env = commands::Env::new(&cli, config);
    match &cli.command {
        Command::Devices => commands::devices(&env),
        Command::Peak => commands::peak(&env),
        Command::Check(a) => commands::check(&env, a),
        Command::Versions => commands::versions(&env),
        Command::Verify(a) => commands::verify(&env, a),
        Command::Attn(a) => attention::run(&env, a),
        Command::Bench(a) => commands::bench(&env, a),
        Command::Suite(a) => commands::suite(&env, a),
        Command::Cache(a) => commands::cache(&env, a),
        Command::Results(a) => commands::results(&env, a),
        Command::Inspect(a) => tools::inspect(&env, a),
        Command::Plan(a) => tools::plan(&env, a),
        Command::Sanitize(a) => tools::sanitize(&env, a),
        Command::Profile(a) => tools::profile(&env, a),
        Command::Exp(a) => tools::exp(&env, a),
        Command::Report(a) => tools::report(&env, a),
        Command::Tune(a) => tune::tune(&env, a),
        Command::Moe(a) => moe::moe(&env, a),
        Command::Fp8(a) => fp8::run(&env, a),
        Command::TuneWorker(a) => tune::worker(&env, a),
        Command::TuneReplay(a) => tune::replay(&env, a),
    }
}
