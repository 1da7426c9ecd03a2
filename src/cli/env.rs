//! What every command handler shares: the parsed flags and config, the registry, the JIT and
//! device context, and the store a run records into.

use std::cell::OnceCell;
use std::sync::Arc;

use kiln::device::{self, Context, DeviceInfo};
use kiln::error::Result;
use kiln::harness::bench::BenchOptions;
use kiln::jit::{cache, Jit};
use kiln::ops::registry::Registry;
use kiln::ops::tuned::TunedTable;
use kiln::store::{ResultRow, RunInfo, Store};

use super::args::Cli;

/// What every handler needs: flags, config, registry, and (lazily) the store.
pub struct Env {
    pub json: bool,
    pub no_store: bool,
    pub config: kiln::config::Config,
    pub registry: Registry,
    pub(super) command: String,
    /// The tuned configs, read from the store on first use ([`Env::tuned`]).
    tuned: OnceCell<Arc<TunedTable>>,
}

impl Env {
    pub fn new(cli: &Cli, config: kiln::config::Config) -> Env {
        Env {
            json: cli.json,
            no_store: cli.no_store,
            config,
            registry: Registry::default(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
            tuned: OnceCell::new(),
        }
    }

    /// A line besides the tables (a section header, a summary): on stdout, or on stderr under
    /// --json, so that stdout stays one JSON value.
    pub(super) fn say(&self, line: &str) {
        if self.json {
            eprintln!("{line}")
        } else {
            println!("{line}")
        }
    }

    pub(super) fn jit(&self) -> Jit {
        match &self.config.jit.cache_dir {
            Some(d) => Jit {
                cache: Some(cache::DiskCache { root: d.clone() }),
            },
            None => Jit::default(),
        }
    }

    /// The GPU context a command runs on, carrying the run's overrides and tuned configs.
    pub(super) fn context(&self) -> Result<Context> {
        Ok(
            Context::open_with(0, self.jit(), self.config.overrides.clone())?
                .with_tuned(self.tuned()),
        )
    }

    /// The tuned configs the run's contexts carry (and `kiln plan` plans with): the configured
    /// store's, or none with `KILN_NO_TUNED=1`, so that every version's heuristic decides.
    pub(super) fn tuned(&self) -> Arc<TunedTable> {
        self.tuned
            .get_or_init(|| {
                Arc::new(if self.config.overrides.tune.no_tuned {
                    TunedTable::empty()
                } else {
                    kiln::tune::cache::stored_table(&self.config.store_path())
                })
            })
            .clone()
    }

    /// Opens the store and starts a run; `None` with --no-store.
    pub(super) fn begin(
        &self,
        kind: &str,
        device: Option<&DeviceInfo>,
    ) -> Result<Option<(Store, i64)>> {
        if self.no_store {
            return Ok(None);
        }
        let store = self.store()?;
        let id = store.begin_run(&RunInfo {
            kind: kind.into(),
            command: self.command.clone(),
            device: device.cloned(),
            kiln_commit: kiln::store::kiln_commit(),
        })?;
        Ok(Some((store, id)))
    }

    /// Opens the configured store (`[store] path`, else the default), whatever --no-store says.
    pub(super) fn store(&self) -> Result<Store> {
        match &self.config.store.path {
            Some(p) => Store::open(p),
            None => Store::open_default(),
        }
    }

    pub(super) fn print_json(&self, v: &serde_json::Value) {
        println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
    }
}

/// The versions `names` asks for, each looked up by `lookup` (an unknown name is its sentence),
/// or every one of `all` when none is named.
pub(super) fn named<'r, K: ?Sized>(
    all: &'r [Box<K>],
    names: &[String],
    lookup: impl Fn(&str) -> Result<&'r K>,
) -> Result<Vec<&'r K>> {
    if names.is_empty() {
        return Ok(all.iter().map(|k| k.as_ref()).collect());
    }
    names.iter().map(|n| lookup(n)).collect()
}

/// The first of `flags` (name, given) that was given, said by `refusal`; none given: Ok.
pub(super) fn refuse_given(flags: &[(&str, bool)], refusal: impl Fn(&str) -> String) -> Result<()> {
    match flags.iter().find(|(_, given)| *given) {
        Some((flag, _)) => Err(kiln::error::Error::invalid(refusal(flag))),
        None => Ok(()),
    }
}

pub(super) fn record(run: &Option<(Store, i64)>, row: ResultRow) -> Result<()> {
    if let Some((s, id)) = run {
        s.record(*id, &row)?;
    }
    Ok(())
}

pub(super) fn finish(run: &Option<(Store, i64)>, status: &str) -> Result<()> {
    if let Some((s, id)) = run {
        s.finish_run(*id, status)?;
    }
    Ok(())
}

/// The device limits to judge a compile against: the GPU present, else an H100.
pub(super) fn device_or_h100() -> DeviceInfo {
    device::init()
        .ok()
        .and_then(|_| DeviceInfo::query(0).ok())
        .unwrap_or_else(DeviceInfo::h100_sxm)
}

pub(super) fn bench_options(env: &Env, t: &super::args::TimingArgs) -> BenchOptions {
    let d = BenchOptions::default();
    BenchOptions {
        reps: t.reps.or(env.config.bench.reps).unwrap_or(d.reps),
        warmup: t.warmup.or(env.config.bench.warmup).unwrap_or(d.warmup),
        warmup_ms: t
            .warmup_ms
            .or(env.config.bench.warmup_ms)
            .unwrap_or(d.warmup_ms),
        flush_l2: !t.no_flush,
        interleave: d.interleave,
    }
}
