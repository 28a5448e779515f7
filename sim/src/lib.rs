//! # servesim's simulator core
//!
//! A seeded discrete-event simulator of LLM serving engines. It reproduces
//! how an engine schedules, caches and preempts (vLLM's V1 scheduler and
//! SGLang's scheduler with its radix cache),
//! times each engine step with a cost model, drives the engine with a client
//! that behaves like `vllm bench serve`, and reports what that client would
//! print, plus what the engine's `/metrics` would show.
//!
//! ## A practical overview
//!
//! 1. A [`config::Scenario`] (JSON, strict, versioned) is parsed and
//!    [`config::resolve`]d against the model and GPU cards, a fitted profile
//!    and a trace the caller has loaded, into a [`config::SimSpec`].
//! 2. [`workload::generate`] turns the workload section into requests, from
//!    named random streams ([`rng`]).
//! 3. [`simulation::run`] runs the event loop: client → front end → engine
//!    ([`engine::vllm`] or [`engine::sglang`]) → front end → client, timing steps with
//!    [`cost::CostModel`].
//! 4. [`metrics::bench_metrics`] computes `vllm bench serve`'s metrics;
//!    [`report`] lays them out as `--save-result` keys.
//! 5. [`sweep`] finds the throughput knee and the KV-limited concurrency.
//!
//! ## Architecture invariants
//!
//! * **No IO, no clock, no threads.** This crate reads no file, looks at no
//!   clock and spawns nothing. The command line loads files and runs sweeps
//!   in parallel.
//! * **Integer time.** Simulated time is `u64` nanoseconds.
//! * **One event order.** `(time, sequence)`; same-time events are FIFO.
//! * **Named random streams.** Each random component owns a generator
//!   derived from the seed and its name.
//! * **No hash-map iteration in decisions.** Hash maps are only looked up.
//! * Same scenario and seed → byte-identical report.

pub mod builtin;
pub mod cards;
pub mod config;
pub mod cost;
pub mod delivery;
pub mod engine;
pub mod explain;
pub mod fleet;
pub mod kernels;
pub mod metrics;
pub mod report;
pub mod request;
pub mod rng;
pub mod simulation;
pub mod sweep;
pub mod traces;
pub mod workload;

use config::{EngineSpec, SimSpec};
use simulation::{RunOptions, RunResult};
use workload::Workload;

/// Everything one simulated benchmark run produced.
#[derive(Clone, Debug)]
pub struct SimOutput {
    pub workload: Workload,
    pub run: RunResult,
    pub metrics: metrics::BenchMetrics,
    /// With a fleet: each replica's engine block and the fleet's own figures.
    pub fleet: Option<fleet::FleetRun>,
}

/// Generates the workload and runs it.
pub fn simulate(spec: &SimSpec, opts: RunOptions) -> SimOutput {
    if spec.fleet.is_some() {
        return simulation::simulate_observed(spec, opts, &mut |_| {});
    }
    let workload = workload::generate(&spec.workload);
    let run = run_workload(&spec.engine, &spec.cost, &workload, opts);
    let metrics = metrics::bench_metrics(&run);
    SimOutput { workload, run, metrics, fleet: None }
}

/// Runs a given workload (one generated elsewhere, or replayed) on the engine `spec` describes.
pub fn run_workload(spec: &EngineSpec, cost: &cost::CostModel, workload: &Workload, opts: RunOptions) -> RunResult {
    match spec {
        EngineSpec::Vllm(cfg) => simulation::run(engine::vllm::Scheduler::new(cfg.clone()), cost, workload, opts),
        EngineSpec::Sglang(cfg) => simulation::run(engine::sglang::Scheduler::new(cfg.clone()), cost, workload, opts),
    }
}
