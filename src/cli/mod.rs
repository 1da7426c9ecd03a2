//! The command line: argument parsing ([`args`]), what every handler shares ([`env`]), and one
//! file of handlers per command group (gemm, attention, moe, check, suite, tune, tools, ...).

mod args;
mod attention;
mod attention_backward;
mod attention_decode;
mod attention_varlen;
#[cfg(test)]
mod bench_pins;
mod bench_random;
mod bench_table;
mod check;
mod device;
mod env;
mod fp4;
mod fp8;
mod fp8_gemm;
mod fp8_moe;
mod fuzz;
mod gemm;
mod moe;
mod moe_fp4;
mod moe_layer;
mod pointwise;
mod profile;
mod progress;
mod sanitize;
mod store_cmds;
mod suite;
mod tools;
mod tune;
mod verdicts;

use std::process::ExitCode;

use clap::Parser;
use kiln::overrides::Overrides;

pub use args::{Cli, Command};

pub fn run() -> kiln::Result<ExitCode> {
    let cli = Cli::parse();
    let mut config = kiln::config::Config::load(cli.config.as_deref())?;
    // Every KILN_* variable is checked here, once, before any command runs: the contexts the
    // commands open carry the experiment knobs (a bad name or value ends the run with its sentence).
    config.overrides = Overrides::from_env()?;
    let env = env::Env::new(&cli, config);
    match &cli.command {
        Command::Devices => device::devices(&env),
        Command::Peak => device::peak(&env),
        Command::Check(a) => check::check(&env, a),
        Command::Versions => device::versions(&env),
        Command::Verify(a) => gemm::verify(&env, a),
        Command::Attn(a) => attention::run(&env, a),
        Command::Bench(a) => gemm::bench(&env, a),
        Command::Suite(a) => suite::suite(&env, a),
        Command::Cache(a) => store_cmds::cache(&env, a),
        Command::Results(a) => store_cmds::results(&env, a),
        Command::Inspect(a) => tools::inspect(&env, a),
        Command::Plan(a) => tools::plan(&env, a),
        Command::Sanitize(a) => sanitize::sanitize(&env, a),
        Command::Profile(a) => profile::profile(&env, a),
        Command::Exp(a) => tools::exp(&env, a),
        Command::Report(a) => tools::report(&env, a),
        Command::Tune(a) => tune::tune(&env, a),
        Command::Moe(a) => moe::moe(&env, a),
        Command::Fp8(a) => fp8::run(&env, a),
        Command::Fp4(a) => fp4::run(&env, a),
        Command::Pointwise(a) => pointwise::run(&env, a),
        Command::Fuzz(a) => fuzz::fuzz(&env, a),
        Command::TuneWorker(a) => tune::worker(&env, a),
        Command::TuneReplay(a) => tune::replay(&env, a),
    }
}
