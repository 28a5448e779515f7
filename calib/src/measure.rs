//! The one thing the procedures ask of an engine: run this workload and say
//! what was measured. [`Measure`] is implemented against a live server by
//! `live::measure::LiveMeasure`, and here by [`SimMeasure`], which runs the
//! simulator with known coefficients, so that a procedure can be tested
//! exactly, without a network or a clock.

use serde_json::{Map, Value};
use sim::config::EngineSpec;
use sim::cost::CostModel;
use sim::report::PointMeta;
use sim::simulation::RunOptions;
use sim::workload::Workload;

use crate::error::MeasureError;
use crate::server_info::ServerInfo;

/// A measured (or predicted) run's report keys, as `sim::report::bench_json` lays them out
/// (`vllm bench serve --save-result` keys plus the engine's).
pub type Point = Map<String, Value>;

/// A metric of a point, when it is a number.
pub fn metric(p: &Point, key: &str) -> Option<f64> {
    p.get(key).and_then(Value::as_f64)
}

/// What a run is for: the live side names its files and records from it.
#[derive(Clone, Copy, Debug)]
pub enum Run<'a> {
    /// A calibration probe.
    Probe { name: &'a str },
    /// A check point (`workload`: the section as the user gave it, for the run record).
    CheckPoint { concurrency: u32, repeat: u32, workload: &'a Value },
    /// The speed reference (not recorded).
    SpeedReference,
}

/// What one run measured.
#[derive(Clone, Debug)]
pub struct Measurement {
    pub point: Point,
    /// Seconds from the timed phase's start at which each timed request was sent.
    pub send_s: Vec<f64>,
    /// Requests that failed.
    pub failed: usize,
    /// Where the per-request results went, if anywhere (for messages).
    pub requests_file: Option<String>,
}

/// An engine the procedures can measure.
pub trait Measure {
    /// What the engine reports about itself.
    fn info(&self) -> &ServerInfo;
    /// Runs `w` and measures it (a live run first warms up at the workload's shape).
    fn measure(&mut self, w: &Workload, run: Run<'_>) -> Result<Measurement, MeasureError>;
    /// Keeps the engine under load for `seconds`, running `next(k)` for k = 0, 1, ...
    fn warm_up(&mut self, seconds: f64, next: &mut dyn FnMut(u64) -> Workload) -> Result<(), MeasureError>;
    /// A line of progress for the user.
    fn say(&mut self, _line: &str) {}
}

/// The simulator as the engine measured: `engine` with the `truth` cost model, measured
/// exactly (no noise, no HTTP path).
pub struct SimMeasure {
    pub info: ServerInfo,
    pub engine: EngineSpec,
    pub truth: CostModel,
    /// Model id and hardware for the report keys.
    pub meta: PointMeta,
    /// Progress lines, kept for tests to read.
    pub log: Vec<String>,
}

impl Measure for SimMeasure {
    fn info(&self) -> &ServerInfo {
        &self.info
    }

    fn measure(&mut self, w: &Workload, _run: Run<'_>) -> Result<Measurement, MeasureError> {
        let run = sim::run_workload(&self.engine, &self.truth, w, RunOptions::default());
        let metrics = sim::metrics::bench_metrics(&run);
        let send_s =
            run.records.iter().map(|r| r.dispatch_ns.saturating_sub(run.bench_start_ns) as f64 / 1e9).collect();
        let failed = run.records.iter().filter(|r| !r.completed).count();
        Ok(Measurement {
            point: sim::report::bench_json(&self.meta, w, &metrics, &run),
            send_s,
            failed,
            requests_file: None,
        })
    }

    fn warm_up(&mut self, _seconds: f64, next: &mut dyn FnMut(u64) -> Workload) -> Result<(), MeasureError> {
        // A simulated engine has no start-up slowness: one run exercises the path.
        let _ = sim::run_workload(&self.engine, &self.truth, &next(0), RunOptions::default());
        Ok(())
    }

    fn say(&mut self, line: &str) {
        self.log.push(line.to_string());
    }
}
