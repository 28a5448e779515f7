//! The one thing the procedures ask of an engine: run this workload and say
//! what was measured. [`Measure`] is implemented against a live server by
//! `live::measure::LiveMeasure`, and here by [`SimMeasure`], which runs the
//! simulator with known coefficients, so that a procedure can be tested
//! exactly, without a network or a clock.

use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::Value;
use sim::config::EngineSpec;
use sim::cost::CostModel;
use sim::report::{BenchReport, Metric, Metrics, Num, PointMeta};
use sim::simulation::RunOptions;
use sim::workload::Workload;

use crate::error::MeasureError;
use crate::server_info::ServerInfo;

/// A measured run's report: a simulated run's keys ([`BenchReport`]: the `vllm bench serve
/// --save-result` keys plus the engine's) and, from a live server, the load generator's own
/// CPU time. Read its numbers with [`Metrics::metric`].
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub report: BenchReport,
    /// A live run's client: `client_cpu_s`, `client_cpu_fraction` after the report's keys.
    pub client_cpu: Option<ClientCpu>,
}

/// The load generator's CPU time over a live run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ClientCpu {
    /// `client_cpu_s`.
    pub seconds: f64,
    /// `client_cpu_fraction`: of the run's wall time.
    pub fraction: f64,
}

impl Point {
    /// A run without a client of its own (simulated).
    pub fn of(report: BenchReport) -> Point {
        Point { report, client_cpu: None }
    }

    /// Writes the point's keys, each number as `num` gives it and the client's CPU time as
    /// `cpu` gives it (the point's own, or the mean of repeated runs).
    fn write_entries<M: SerializeMap>(
        &self,
        map: &mut M,
        num: &dyn Fn(Metric) -> Num,
        cpu: &dyn Fn(fn(&ClientCpu) -> f64) -> Num,
    ) -> Result<(), M::Error> {
        self.report.write_entries(map, num)?;
        if self.client_cpu.is_some() {
            map.serialize_entry("client_cpu_s", &cpu(|c| c.seconds))?;
            map.serialize_entry("client_cpu_fraction", &cpu(|c| c.fraction))?;
        }
        Ok(())
    }
}

impl Metrics for Point {
    fn metric(&self, m: Metric) -> Option<f64> {
        self.report.metric(m)
    }
}

impl Serialize for Point {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        self.write_entries(&mut map, &|m| self.report.num(m), &|f| {
            self.client_cpu.as_ref().map_or(Num::Null, |c| Num::Float(f(c)))
        })?;
        map.end()
    }
}

/// Repeated measurements of one point (`check --repeat`): its value is their mean. Written
/// as the first run's report with every number the mean over the runs (a number missing
/// from a run is left out of its mean; what the first run has as no number stays as it is),
/// then `repeats`; one run is written as it is.
#[derive(Clone, Debug, PartialEq)]
pub struct RepeatedPoint {
    /// At least one.
    pub runs: Vec<Point>,
}

impl RepeatedPoint {
    /// The mean over the runs of a number the first run has as `first`.
    fn mean(&self, first: Num, of: impl Fn(&Point) -> Num) -> Num {
        if self.runs.len() < 2 || first.as_f64().is_none() {
            return first;
        }
        let xs: Vec<f64> = self.runs.iter().filter_map(|r| of(r).as_f64()).collect();
        Num::Float(xs.iter().sum::<f64>() / xs.len() as f64)
    }

    fn first(&self) -> &Point {
        &self.runs[0]
    }
}

impl Metrics for RepeatedPoint {
    fn metric(&self, m: Metric) -> Option<f64> {
        // A figure none of the runs has (TPOT and ITL of one-token outputs: `BenchReport`'s
        // `Metrics`) is none of the mean's either.
        self.runs.iter().any(|r| r.report.metric(m).is_some()).then_some(())?;
        self.mean(self.first().report.num(m), |r| r.report.num(m)).as_f64()
    }
}

impl Serialize for RepeatedPoint {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if self.runs.len() < 2 {
            return self.first().serialize(s);
        }
        let first = self.first();
        let mut map = s.serialize_map(None)?;
        first.write_entries(&mut map, &|m| self.mean(first.report.num(m), |r| r.report.num(m)), &|f| {
            let of = |p: &Point| p.client_cpu.as_ref().map_or(Num::Null, |c| Num::Float(f(c)));
            self.mean(of(first), of)
        })?;
        map.serialize_entry("repeats", &self.runs.len())?;
        map.end()
    }
}

/// What a run is for: the live side names its files and records from it.
#[derive(Clone, Copy, Debug)]
pub enum Run<'a> {
    /// A calibration probe.
    Probe { name: &'a str },
    /// A check point (`workload`: the section as the user gave it, for the run record;
    /// `prompt_salt`: the prompts' salt, [`crate::procedure::salt_prompts`], also recorded).
    CheckPoint { concurrency: u32, repeat: u32, workload: &'a Value, prompt_salt: u64 },
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
            point: Point::of(BenchReport::of(&self.meta, w, &metrics, &run)),
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

#[cfg(test)]
mod tests {
    use super::*;
    use sim::metrics::Stats;

    fn run(k: f64, rate: Option<f64>, cpu: bool) -> Point {
        Point {
            report: BenchReport {
                engine: "sglang".into(),
                num_prompts: 10 + k as u64,
                request_rate: rate,
                completed: 9,
                output_throughput: 100.0 * k,
                ttft: Stats { mean: 10.0 + k, p99: 20.0 * k, ..Default::default() },
                num_retractions: Some(k as u64),
                kv_cache_usage_peak: if k == 1.0 { f64::NAN } else { 0.5 },
                stop_reason: format!("run {k}"),
                seed: 7 * k as u64,
                ..Default::default()
            },
            client_cpu: cpu.then_some(ClientCpu { seconds: k, fraction: k / 10.0 }),
        }
    }

    /// What the mean of repeats was when points were JSON objects: every key that is a
    /// number in the first run averaged over the runs that have it as a number.
    fn mean_of_objects(runs: &[Value]) -> Value {
        let mut mean = runs[0].as_object().unwrap().clone();
        for (k, v) in runs[0].as_object().unwrap() {
            if !v.is_number() {
                continue;
            }
            let xs: Vec<f64> = runs.iter().filter_map(|r| r.get(k).and_then(Value::as_f64)).collect();
            mean.insert(k.clone(), (xs.iter().sum::<f64>() / xs.len() as f64).into());
        }
        mean.insert("repeats".into(), runs.len().into());
        Value::Object(mean)
    }

    #[test]
    fn repeats_are_written_as_the_mean_of_each_number() {
        for (cpu, rate) in [(false, None), (true, Some(4.0))] {
            let runs = vec![run(1.0, rate, cpu), run(2.0, rate, cpu), run(4.0, rate, cpu)];
            let values: Vec<Value> = runs.iter().map(|r| serde_json::to_value(r).unwrap()).collect();
            let typed = RepeatedPoint { runs: runs.clone() };
            assert_eq!(
                serde_json::to_string_pretty(&typed).unwrap(),
                serde_json::to_string_pretty(&mean_of_objects(&values)).unwrap()
            );
            let mean = mean_of_objects(&values);
            for &m in Metric::ALL {
                // A figure no run has (TPOT and ITL where every output is one token, as in these
                // runs' reports) is written, as 0, but read as none (`BenchReport`'s `Metrics`).
                let has = runs.iter().any(|r| r.report.metric(m).is_some());
                let expected = mean.get(m.key()).and_then(Value::as_f64).filter(|_| has);
                assert_eq!(typed.metric(m), expected, "{m}");
            }
            // One run is written as it is.
            let one = RepeatedPoint { runs: runs[..1].to_vec() };
            assert_eq!(serde_json::to_value(&one).unwrap(), values[0]);
        }
    }
}
