//! Reports: the `--save-result` JSON keys of `vllm bench serve` plus the
//! engine's view, and the text layout of its "Serving Benchmark Result".
//!
//! A run's report is typed: [`BenchReport`] (the keys a simulated and a measured
//! run share), [`PointReport`] (a simulated run: the step cost's source, and a
//! fleet's own blocks). Their numbers are named by [`Metric`], whose
//! [`Metric::key`] is the JSON key; callers read a number with
//! [`Metrics::metric`], never by string. The text report renders the same
//! structs ([`text_report`], [`fleet_text`]).
//!
//! **API boundary:** the key names here are a contract that scripts and
//! notebooks depend on. Add keys; never rename or remove one.

use serde::de::{Deserialize, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};
use std::fmt::Write as _;

use crate::config::{EngineKind, SimSpec};
use crate::metrics::Stats;
use crate::SimOutput;

/// Who produced a report: the engine and setup it describes.
#[derive(Clone, Debug)]
pub struct PointMeta {
    pub engine: String,
    pub engine_version: String,
    pub model_id: String,
    pub hardware: String,
    /// Block or page size, for the KV-limited concurrency.
    pub kv_granularity: u32,
    /// Whether the prefix cache is on (a shared prefix is held once in the KV-limited
    /// concurrency).
    pub prefix_caching: bool,
}

/// A report number as it is written: an integer, a float, or `null` (a float that is not
/// finite is written `null` too, as JSON has no such number).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Num {
    Int(u64),
    Float(f64),
    Null,
}

impl Num {
    /// The number, when it is one (`null` and non-finite floats are not).
    pub fn as_f64(self) -> Option<f64> {
        match self {
            Num::Int(n) => Some(n as f64),
            Num::Float(x) if x.is_finite() => Some(x),
            _ => None,
        }
    }
}

impl Serialize for Num {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match *self {
            Num::Int(n) => s.serialize_u64(n),
            Num::Float(x) => s.serialize_f64(x),
            Num::Null => s.serialize_unit(),
        }
    }
}

/// A typed report field that [`Metric`] names.
trait Field {
    fn num(&self) -> Num;
    /// Sets it from a JSON number (`None`: `null`).
    fn set(&mut self, v: Option<f64>);
}

impl Field for u64 {
    fn num(&self) -> Num {
        Num::Int(*self)
    }
    fn set(&mut self, v: Option<f64>) {
        *self = v.unwrap_or(0.0) as u64;
    }
}

impl Field for u32 {
    fn num(&self) -> Num {
        Num::Int(u64::from(*self))
    }
    fn set(&mut self, v: Option<f64>) {
        *self = v.unwrap_or(0.0) as u32;
    }
}

impl Field for f64 {
    fn num(&self) -> Num {
        Num::Float(*self)
    }
    fn set(&mut self, v: Option<f64>) {
        *self = v.unwrap_or(f64::NAN);
    }
}

impl Field for Option<u32> {
    fn num(&self) -> Num {
        self.map_or(Num::Null, |n| Num::Int(u64::from(n)))
    }
    fn set(&mut self, v: Option<f64>) {
        *self = v.map(|x| x as u32);
    }
}

impl Field for Option<u64> {
    fn num(&self) -> Num {
        self.map_or(Num::Null, Num::Int)
    }
    fn set(&mut self, v: Option<f64>) {
        *self = v.map(|x| x as u64);
    }
}

impl Field for Option<f64> {
    fn num(&self) -> Num {
        self.map_or(Num::Null, Num::Float)
    }
    fn set(&mut self, v: Option<f64>) {
        *self = v;
    }
}

/// The numbers of a report, each named once: the variant, its JSON key, and the
/// [`BenchReport`] field it reads. In report order.
macro_rules! metrics {
    ($($variant:ident => $key:literal, $($field:ident).+;)+) => {
        /// A number of a run's report, by name ([`Metric::key`]: its JSON key). In
        /// report order ([`Metric::ALL`]).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum Metric {
            $($variant,)+
        }

        impl Metric {
            /// Every metric, in the order a report writes them.
            pub const ALL: &'static [Metric] = &[$(Metric::$variant,)+];

            /// The JSON key.
            pub fn key(self) -> &'static str {
                match self {
                    $(Metric::$variant => $key,)+
                }
            }
        }

        impl BenchReport {
            /// A number of the report, as it is written.
            pub fn num(&self, m: Metric) -> Num {
                match m {
                    $(Metric::$variant => Field::num(&self.$($field).+),)+
                }
            }

            fn set(&mut self, m: Metric, v: Option<f64>) {
                match m {
                    $(Metric::$variant => Field::set(&mut self.$($field).+, v),)+
                }
            }
        }
    };
}

metrics! {
    NumPrompts => "num_prompts", num_prompts;
    RequestRate => "request_rate", request_rate;
    Burstiness => "burstiness", burstiness;
    MaxConcurrency => "max_concurrency", max_concurrency;
    Duration => "duration", duration;
    Completed => "completed", completed;
    Failed => "failed", failed;
    TotalInputTokens => "total_input_tokens", total_input_tokens;
    TotalOutputTokens => "total_output_tokens", total_output_tokens;
    RequestThroughput => "request_throughput", request_throughput;
    OutputThroughput => "output_throughput", output_throughput;
    TotalTokenThroughput => "total_token_throughput", total_token_throughput;
    MaxOutputTokensPerS => "max_output_tokens_per_s", max_output_tokens_per_s;
    MaxConcurrentRequests => "max_concurrent_requests", max_concurrent_requests;
    MeanTtftMs => "mean_ttft_ms", ttft.mean;
    MedianTtftMs => "median_ttft_ms", ttft.median;
    StdTtftMs => "std_ttft_ms", ttft.std;
    P50TtftMs => "p50_ttft_ms", ttft.p50;
    P90TtftMs => "p90_ttft_ms", ttft.p90;
    P95TtftMs => "p95_ttft_ms", ttft.p95;
    P99TtftMs => "p99_ttft_ms", ttft.p99;
    MaxTtftMs => "max_ttft_ms", ttft.max;
    MeanTpotMs => "mean_tpot_ms", tpot.mean;
    MedianTpotMs => "median_tpot_ms", tpot.median;
    StdTpotMs => "std_tpot_ms", tpot.std;
    P50TpotMs => "p50_tpot_ms", tpot.p50;
    P90TpotMs => "p90_tpot_ms", tpot.p90;
    P95TpotMs => "p95_tpot_ms", tpot.p95;
    P99TpotMs => "p99_tpot_ms", tpot.p99;
    MaxTpotMs => "max_tpot_ms", tpot.max;
    MeanItlMs => "mean_itl_ms", itl.mean;
    MedianItlMs => "median_itl_ms", itl.median;
    StdItlMs => "std_itl_ms", itl.std;
    P50ItlMs => "p50_itl_ms", itl.p50;
    P90ItlMs => "p90_itl_ms", itl.p90;
    P95ItlMs => "p95_itl_ms", itl.p95;
    P99ItlMs => "p99_itl_ms", itl.p99;
    MaxItlMs => "max_itl_ms", itl.max;
    MeanE2elMs => "mean_e2el_ms", e2el.mean;
    MedianE2elMs => "median_e2el_ms", e2el.median;
    StdE2elMs => "std_e2el_ms", e2el.std;
    P50E2elMs => "p50_e2el_ms", e2el.p50;
    P90E2elMs => "p90_e2el_ms", e2el.p90;
    P95E2elMs => "p95_e2el_ms", e2el.p95;
    P99E2elMs => "p99_e2el_ms", e2el.p99;
    MaxE2elMs => "max_e2el_ms", e2el.max;
    NumPreemptions => "num_preemptions", num_preemptions;
    NumRetractions => "num_retractions", num_retractions;
    PrefixCacheQueries => "prefix_cache_queries", prefix_cache_queries;
    PrefixCacheHits => "prefix_cache_hits", prefix_cache_hits;
    PrefixCacheHitRate => "prefix_cache_hit_rate", prefix_cache_hit_rate;
    KvCacheTokens => "kv_cache_tokens", kv_cache_tokens;
    KvCacheUsagePeak => "kv_cache_usage_peak", kv_cache_usage_peak;
    KvCacheUsageMean => "kv_cache_usage_mean", kv_cache_usage_mean;
    MeanRunning => "mean_running", mean_running;
    PeakRunning => "peak_running", peak_running;
    MeanWaiting => "mean_waiting", mean_waiting;
    PeakWaiting => "peak_waiting", peak_waiting;
    KvLimitedConcurrency => "kv_limited_concurrency", kv_limited_concurrency;
    KvRequestFootprintTokens => "kv_request_footprint_tokens", kv_request_footprint_tokens;
    NumSteps => "num_steps", num_steps;
    Seed => "seed", seed;
}

impl Metric {
    /// The metric of a JSON key; None for a key that is not a report number.
    pub fn parse(key: &str) -> Option<Metric> {
        Metric::ALL.iter().copied().find(|m| m.key() == key)
    }

    /// A statistic of the times between a request's tokens (TPOT, ITL): none where every output
    /// is one token ([`one_token_outputs`]).
    pub fn is_inter_token(self) -> bool {
        use Metric::*;
        matches!(
            self,
            MeanTpotMs
                | MedianTpotMs
                | StdTpotMs
                | P50TpotMs
                | P90TpotMs
                | P95TpotMs
                | P99TpotMs
                | MaxTpotMs
                | MeanItlMs
                | MedianItlMs
                | StdItlMs
                | P50ItlMs
                | P90ItlMs
                | P95ItlMs
                | P99ItlMs
                | MaxItlMs
        )
    }

    /// A setting of the run the report echoes (the load and the seed), not a result of it.
    pub fn is_setting(self) -> bool {
        use Metric::*;
        matches!(self, NumPrompts | RequestRate | Burstiness | MaxConcurrency | Seed)
    }

    /// Which way is better, for an objective (`tune --objective`): `Some(true)` when lower is
    /// better (latencies, the run's duration, failures, preemptions, waiting requests),
    /// `Some(false)` when higher is (throughputs, completions, cache hits, the KV pool and the
    /// concurrency it holds); `None` for a setting or a property of the workload (the prompt
    /// count, the rate, token totals, the seed) or a gauge with no better direction (KV usage,
    /// running requests, steps).
    pub fn lower_is_better(self) -> Option<bool> {
        use Metric::*;
        match self {
            Duration | Failed | NumPreemptions | NumRetractions | MeanWaiting | PeakWaiting => Some(true),
            RequestThroughput | OutputThroughput | TotalTokenThroughput | MaxOutputTokensPerS | Completed
            | PrefixCacheHits | PrefixCacheHitRate | KvCacheTokens | KvLimitedConcurrency => Some(false),
            NumPrompts
            | RequestRate
            | Burstiness
            | MaxConcurrency
            | TotalInputTokens
            | TotalOutputTokens
            | MaxConcurrentRequests
            | PrefixCacheQueries
            | KvCacheUsagePeak
            | KvCacheUsageMean
            | MeanRunning
            | PeakRunning
            | KvRequestFootprintTokens
            | NumSteps
            | Seed => None,
            m => m.key().ends_with("_ms").then_some(true),
        }
    }
}

/// The JSON key (width and alignment apply, as to a `str`).
impl std::fmt::Display for Metric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.key())
    }
}

/// A metric is written as its key (a list of metrics in a profile, say).
impl Serialize for Metric {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.key())
    }
}

/// A report whose numbers can be read by name.
pub trait Metrics {
    /// The metric's value, when the report has it as a (finite) number.
    fn metric(&self, m: Metric) -> Option<f64>;
    /// Whether the run behind the report completed (a simulated run can stop early: an
    /// engine error, a stall); the metrics of one that did not cover only the requests
    /// that finished.
    fn completed(&self) -> bool {
        true
    }
}

impl<T: Metrics + ?Sized> Metrics for &T {
    fn metric(&self, m: Metric) -> Option<f64> {
        (**self).metric(m)
    }
    fn completed(&self) -> bool {
        (**self).completed()
    }
}

/// The means of the TTFT split (`ttft_breakdown` key of a report).
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct TtftBreakdownReport {
    pub mean_queue_wait_ms: f64,
    pub mean_prefill_ms: f64,
    pub mean_interleave_ms: f64,
    pub mean_overhead_ms: f64,
}

/// The report of a run, simulated or measured: the `vllm bench serve --save-result`
/// keys, then the engine's view. The same keys either way; written in this order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BenchReport {
    pub engine: String,
    pub engine_version: String,
    pub model_id: String,
    pub hardware: String,
    pub num_prompts: u64,
    /// Requests per second; None: `"inf"` (all at once).
    pub request_rate: Option<f64>,
    pub burstiness: f64,
    /// The arrivals were a trace's timestamps: `request_rate` is written `"trace"` and
    /// `burstiness` `null` (neither applies).
    pub trace_arrivals: bool,
    pub max_concurrency: Option<u32>,
    /// Seconds from the first timed arrival to the last (not a report key): no engine can finish
    /// the timed requests sooner, so an open loop's throughput is at most what the run's duration
    /// gives over that span. `None`: every request arrived at once.
    pub last_arrival_s: Option<f64>,
    /// `duration`: seconds of the timed phase.
    pub duration: f64,
    pub completed: u64,
    pub failed: u64,
    pub total_input_tokens: u64,
    pub total_output_tokens: u64,
    pub request_throughput: f64,
    /// `request_goodput`: the requests per second that met every `--goodput` objective
    /// ([`crate::metrics::GoodputSlos`], [`with_goodput`]); `None` (JSON `null`, and no text
    /// line) without objectives, as `vllm bench serve` writes it without `--goodput`. Not a
    /// [`Metric`]: it is a figure of the run and of the objectives the command was given, so
    /// what reads metrics by name (`tune`'s objectives, `plan`'s SLOs, `check`, a fit on
    /// published results, whose objectives are unknown) never reads one without them.
    pub request_goodput: Option<f64>,
    pub output_throughput: f64,
    pub total_token_throughput: f64,
    pub max_output_tokens_per_s: f64,
    pub max_concurrent_requests: u64,
    pub ttft: Stats,
    pub tpot: Stats,
    pub itl: Stats,
    pub e2el: Stats,
    /// The engine's counters and pool. `None` (JSON `null`, "n/a" in text) where a live run could
    /// not read them (no readable `/metrics`, a counter the server does not export, no KV
    /// information): never a zero for "unknown". Always there in a simulated report.
    pub num_preemptions: Option<u64>,
    /// SGLang only: its name for a preemption (the same count).
    pub num_retractions: Option<u64>,
    pub prefix_cache_queries: Option<u64>,
    pub prefix_cache_hits: Option<u64>,
    /// NaN (JSON `null`) where the prefix counters were not measured.
    pub prefix_cache_hit_rate: f64,
    pub kv_cache_tokens: Option<u64>,
    pub kv_cache_usage_peak: f64,
    pub kv_cache_usage_mean: f64,
    /// Time means of the engine's gauges as vLLM's scheduler stats read them: sampled at each
    /// step's start, after scheduling, and held until the next. A request that arrives during a
    /// step is counted from the next step, so `mean_running + mean_waiting` falls short of
    /// Little's `throughput × mean E2EL` by the requests' time outside the engine and before
    /// their first scheduling (the audit of 2026-12-06: up to 40% on 1-token outputs).
    pub mean_running: f64,
    /// `None` (JSON `null`) where a live run could not measure it ([`crate::simulation::GaugeStats::unmeasured`]).
    pub peak_running: Option<u32>,
    pub mean_waiting: f64,
    pub peak_waiting: Option<u32>,
    /// `None` where the KV pool is not known (a live server that does not say).
    pub kv_limited_concurrency: Option<u64>,
    pub kv_request_footprint_tokens: u64,
    /// The simulator's split of TTFT and its step count; `None` (JSON `null`) in a measured
    /// report: a client sees neither.
    pub ttft_breakdown: Option<TtftBreakdownReport>,
    pub num_steps: Option<u64>,
    pub stop_reason: String,
    pub seed: u64,
}

impl BenchReport {
    /// The report of a run, simulated or measured.
    pub fn of(
        meta: &PointMeta,
        w: &crate::workload::Workload,
        m: &crate::metrics::BenchMetrics,
        run: &crate::simulation::RunResult,
    ) -> BenchReport {
        let limit = crate::sweep::kv_limit(run.kv_capacity_tokens, meta.kv_granularity, meta.prefix_caching, w);
        let c = &run.counters;
        let b = &m.ttft_breakdown;
        // A gauge a live run could not measure is not a zero.
        let gauge = |v: f64| if run.gauges.unmeasured { f64::NAN } else { v };
        BenchReport {
            engine: meta.engine.clone(),
            engine_version: meta.engine_version.clone(),
            model_id: meta.model_id.clone(),
            hardware: meta.hardware.clone(),
            num_prompts: w.requested_prompts.map_or(w.requests.len() as u64, u64::from),
            request_rate: w.request_rate,
            burstiness: w.burstiness,
            trace_arrivals: w.trace_arrivals,
            max_concurrency: w.max_concurrency,
            last_arrival_s: {
                let (lo, hi) =
                    w.requests.iter().fold((u64::MAX, 0), |(lo, hi), r| (lo.min(r.arrival_ns), hi.max(r.arrival_ns)));
                (hi > lo).then(|| (hi - lo) as f64 / 1e9)
            },
            duration: m.duration_s,
            completed: m.completed,
            failed: m.failed,
            total_input_tokens: m.total_input_tokens,
            total_output_tokens: m.total_output_tokens,
            request_throughput: m.request_throughput,
            request_goodput: m.request_goodput,
            output_throughput: m.output_throughput,
            total_token_throughput: m.total_token_throughput,
            max_output_tokens_per_s: m.max_output_tokens_per_s,
            max_concurrent_requests: m.max_concurrent_requests,
            ttft: m.ttft.clone(),
            tpot: m.tpot.clone(),
            itl: m.itl.clone(),
            e2el: m.e2el.clone(),
            num_preemptions: Some(c.num_preemptions),
            num_retractions: (meta.kind() == Some(EngineKind::Sglang)).then_some(c.num_preemptions),
            prefix_cache_queries: Some(c.prefix_cache_queries),
            prefix_cache_hits: Some(c.prefix_cache_hits),
            prefix_cache_hit_rate: c.prefix_cache_hit_rate(),
            kv_cache_tokens: Some(run.kv_capacity_tokens),
            kv_cache_usage_peak: gauge(run.gauges.kv_usage_peak),
            kv_cache_usage_mean: gauge(run.gauges.kv_usage_mean),
            mean_running: gauge(run.gauges.running_mean),
            peak_running: (!run.gauges.unmeasured).then_some(run.gauges.running_peak),
            mean_waiting: gauge(run.gauges.waiting_mean),
            peak_waiting: (!run.gauges.unmeasured).then_some(run.gauges.waiting_peak),
            kv_limited_concurrency: Some(limit.concurrency),
            kv_request_footprint_tokens: limit.footprint_tokens,
            ttft_breakdown: Some(TtftBreakdownReport {
                mean_queue_wait_ms: b.queue_wait_ms,
                mean_prefill_ms: b.prefill_ms,
                mean_interleave_ms: b.interleave_ms,
                mean_overhead_ms: b.overhead_ms,
            }),
            num_steps: Some(run.num_steps),
            stop_reason: run.stop.as_str(),
            seed: w.seed,
        }
    }

    /// Writes the report's keys into `map`, in report order, each number as `num` gives
    /// it: the report's own ([`BenchReport::num`]), or for repeated runs their mean.
    /// `request_rate` without a rate is `"inf"` (a trace's arrivals: `"trace"`, with `burstiness`
    /// `null`); `num_retractions` is there for SGLang only.
    pub fn write_entries<M: SerializeMap>(&self, map: &mut M, num: &dyn Fn(Metric) -> Num) -> Result<(), M::Error> {
        map.serialize_entry("engine", &self.engine)?;
        map.serialize_entry("engine_version", &self.engine_version)?;
        map.serialize_entry("model_id", &self.model_id)?;
        map.serialize_entry("hardware", &self.hardware)?;
        self.write_run_entries(map, num)
    }

    /// [`BenchReport::write_entries`] from `num_prompts` on: the run, less who ran it.
    pub fn write_run_entries<M: SerializeMap>(&self, map: &mut M, num: &dyn Fn(Metric) -> Num) -> Result<(), M::Error> {
        for &m in Metric::ALL {
            match m {
                Metric::RequestRate if self.trace_arrivals => map.serialize_entry(m.key(), "trace")?,
                Metric::Burstiness if self.trace_arrivals => map.serialize_entry(m.key(), &Num::Null)?,
                Metric::RequestRate if self.request_rate.is_none() => map.serialize_entry(m.key(), "inf")?,
                // Fixed gaps (`--burstiness inf`): JSON has no infinity (vLLM's Python writes
                // `Infinity`, which is not JSON); "inf" as for the rate.
                Metric::Burstiness if self.burstiness.is_infinite() => map.serialize_entry(m.key(), "inf")?,
                // SGLang's name for a preemption: an SGLang report's key (`null` where not measured).
                Metric::NumRetractions if EngineKind::parse(&self.engine) != Some(EngineKind::Sglang) => {}
                _ => map.serialize_entry(m.key(), &num(m))?,
            }
            match m {
                // Where `vllm bench serve` writes it: after `request_throughput` (`null` without
                // `--goodput`).
                Metric::RequestThroughput => map.serialize_entry("request_goodput", &self.request_goodput)?,
                Metric::KvRequestFootprintTokens => map.serialize_entry("ttft_breakdown", &self.ttft_breakdown)?,
                Metric::NumSteps => map.serialize_entry("stop_reason", &self.stop_reason)?,
                _ => {}
            }
        }
        // Percentiles asked for beyond the report's own (`--metric-percentiles`,
        // [`with_percentiles`]), under the keys `vllm bench serve` writes them with:
        // `p{p}_{metric}_ms`, `p` as Python's `str` writes it ([`percentile_word`]). None unless
        // asked for.
        for (name, st) in [("ttft", &self.ttft), ("tpot", &self.tpot), ("itl", &self.itl), ("e2el", &self.e2el)] {
            for &(p, v) in &st.extra {
                map.serialize_entry(&format!("p{}_{name}_ms", percentile_word(p)), &v)?;
            }
        }
        Ok(())
    }
}

/// A percentile as `vllm bench serve` names it in its report and keys: `str(int(p))` where `p`
/// is whole, else Python's `str(p)` (the shortest digits that read back as `p`, in scientific
/// notation below 1e-4: `1e-05`, `2.5e-05`).
pub fn percentile_word(p: f64) -> String {
    if p.fract() == 0.0 && p.abs() < 1e15 {
        return format!("{}", p as i64);
    }
    if p != 0.0 && (p.abs() < 1e-4 || p.abs() >= 1e16) {
        // Rust's `{:e}` gives the shortest digits as `1.5e-5`; Python pads the exponent to two
        // digits and signs it.
        let e = format!("{p:e}");
        if let Some((mantissa, exp)) = e.split_once('e') {
            let x: i32 = exp.parse().unwrap_or(0);
            return format!("{mantissa}e{}{:02}", if x < 0 { '-' } else { '+' }, x.unsigned_abs());
        }
    }
    format!("{p}")
}

impl BenchReport {
    /// Whether some completed request had more than one output token, so that TPOT and ITL
    /// have values (`vllm bench serve` prints 0 for both where none has: [`one_token_outputs`]).
    pub fn has_inter_token_times(&self) -> bool {
        self.total_output_tokens > self.completed
    }
}

impl Metrics for BenchReport {
    fn metric(&self, m: Metric) -> Option<f64> {
        if m.is_inter_token() && !self.has_inter_token_times() {
            return None;
        }
        self.num(m).as_f64()
    }
    fn completed(&self) -> bool {
        self.stop_reason == crate::simulation::StopReason::Completed.as_str()
    }
}

impl Serialize for BenchReport {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        self.write_entries(&mut map, &|m| self.num(m))?;
        map.end()
    }
}

impl<'de> Deserialize<'de> for BenchReport {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = BenchReport;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a servesim report object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<BenchReport, A::Error> {
                /// `request_rate`: a number, `"inf"` or `"trace"`.
                #[derive(serde::Deserialize)]
                #[serde(untagged)]
                enum Rate {
                    Rate(f64),
                    Text(String),
                }
                let mut r = BenchReport::default();
                while let Some(k) = a.next_key::<String>()? {
                    match k.as_str() {
                        "engine" => r.engine = a.next_value()?,
                        "engine_version" => r.engine_version = a.next_value()?,
                        "model_id" => r.model_id = a.next_value()?,
                        "hardware" => r.hardware = a.next_value()?,
                        "ttft_breakdown" => r.ttft_breakdown = a.next_value()?,
                        "stop_reason" => r.stop_reason = a.next_value()?,
                        "request_goodput" => r.request_goodput = a.next_value()?,
                        "burstiness" => {
                            r.burstiness = match a.next_value::<Option<Rate>>()? {
                                Some(Rate::Rate(x)) => x,
                                Some(Rate::Text(t)) if matches!(t.as_str(), "inf" | "Infinity") => f64::INFINITY,
                                Some(Rate::Text(t)) => {
                                    return Err(serde::de::Error::custom(format!(
                                        "burstiness: expected a number or \"inf\", got {t:?}"
                                    )))
                                }
                                None => 0.0,
                            }
                        }
                        "request_rate" => {
                            r.request_rate = match a.next_value()? {
                                Rate::Rate(x) => Some(x),
                                Rate::Text(t) => {
                                    r.trace_arrivals = t == "trace";
                                    None
                                }
                            }
                        }
                        _ => match Metric::parse(&k) {
                            Some(m) => r.set(m, a.next_value::<Option<f64>>()?),
                            None => {
                                a.next_value::<IgnoredAny>()?;
                            }
                        },
                    }
                }
                Ok(r)
            }
        }
        d.deserialize_map(V)
    }
}

/// The report of one simulated run (`servesim simulate --json`): the run's
/// [`BenchReport`], the step clock's source, and a fleet's own blocks.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PointReport {
    #[serde(flatten)]
    pub bench: BenchReport,
    /// Which model timed the steps: measured kernel tables, a fallback, or the linear model.
    pub cost_source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replicas: Option<Vec<ReplicaReport>>,
    /// Where this run's numbers rest on a modelling shortcut known to be far off for its
    /// shape, with the evidence ([`caveats`]); absent when none applies.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub caveats: Vec<Caveat>,
}

/// A modelling shortcut that the measured data show to be far off for the run's shape, or an
/// assumption about the deployment that the result depends on and the scenario cannot say.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Caveat {
    /// A stable name (`lockstep_waves`, `chat_front_end`, `wsl2_pinned_memory`, `wsl2_step_timing`,
    /// `wsl2_sglang_pool`, `pcie_tensor_parallel`, ...).
    pub id: &'static str,
    /// What the simulation does, what was measured, and what to do about it.
    pub message: String,
    /// [`lockstep_waves`]: the mean TTFT of the same closed loop with its clients spread
    /// evenly over one request's lifetime ([`desynchronised_mean_ttft_ms`]), the other end of
    /// the range measured runs of this shape fall in; absent where it was not run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub desynchronised_mean_ttft_ms: Option<f64>,
}

/// [`Caveat::id`] of [`lockstep_waves`].
pub const LOCKSTEP_WAVES: &str = "lockstep_waves";

/// Whether any engine of the run is vLLM: a fleet's groups may differ, and the report's engine is
/// its first group's (a vLLM group after an SGLang one went unsaid until 2026-12-06).
fn any_vllm(spec: &SimSpec) -> bool {
    let vllm = |e: &crate::config::EngineSpec| matches!(e, crate::config::EngineSpec::Vllm(_));
    match &spec.fleet {
        Some(f) => f.replicas.iter().any(|r| vllm(&r.engine)),
        None => vllm(&spec.engine),
    }
}

/// vLLM under a closed loop of identical requests sent at once: in the simulation, the
/// requests of a wave are admitted together, prefilled together and finish together, so every
/// wave after the first is sent at one instant again and the waves never drift apart; each
/// TTFT then holds its whole wave's prefill. Measured vLLM runs of that shape drift out of step
/// (VALIDATION.md §5, the silicon rows; what spreads them is not known): servesim's mean TTFT on
/// them is too high in 155 of 159 values with 1,000–2,048-token prompts (−29% to 39×, median
/// +143%) and in 64 of 65 with 8,000–8,192 (median +60%), and ranges −39% to +465% with
/// 4,000–4,096 (median +8%) (`servesim validate --only silicon --json`, the vLLM rows). SGLang's measured waves stay in step
/// (it prefills a wave together), so no caveat there.
pub fn lockstep_waves(spec: &SimSpec, workload: &crate::workload::Workload) -> Option<Caveat> {
    if !any_vllm(spec) {
        return None;
    }
    let c = workload.max_concurrency.filter(|c| *c >= 2)?; // one wave or more of two or more
                                                           // Users started one after another (`workload.concurrency_ramp_s`) are out of step from the
                                                           // start: not the burst this caveat is about.
    if workload.concurrency_ramp_ns > 0 {
        return None;
    }
    let r = &workload.requests;
    let at_once = r.iter().all(|q| q.arrival_ns == 0);
    let first = r.first()?;
    let same = r.iter().all(|q| q.prompt_len == first.prompt_len && q.output_len == first.output_len && q.ignore_eos);
    if !at_once || !same || (r.len() as u64) <= u64::from(c) {
        return None;
    }
    Some(Caveat {
        id: LOCKSTEP_WAVES,
        message: format!(
            "every request has the same lengths ({} in, {} out) and the client keeps a fixed number of them in flight: the simulated requests run in lock-step waves (admitted, prefilled and finished together), so each TTFT holds its whole wave's prefill. Measured vLLM runs of this shape drift out of step: on the published ones servesim's mean TTFT was too high in 155 of 159 values with 1,000-2,048-token prompts (-29% to 39x, median +143%) and in 64 of 65 with 8,000-8,192 (median +60%), and ranged -39% to +465% with 4,000-4,096 (median +8%) (VALIDATION.md section 5). With prompts below 2,048 or from 8,000 tokens read this TTFT as an upper bound; lengths that vary (random_range_ratio > 0) do not stay in step.",
            first.prompt_len, first.output_len
        ),
        desynchronised_mean_ttft_ms: None,
    })
}

/// What [`Caveat::desynchronised_mean_ttft_ms`] says, for the text reports: `figures` are the
/// mean TTFTs (one, or one per concurrency of a sweep, already labelled).
pub fn desynchronised_sentence(figures: &[String]) -> String {
    format!(
        "With the clients out of step (the same loop, its first wave sent one mean E2EL / concurrency apart) the mean TTFT is {}. Published vLLM runs of this shape measured between that and the lock-step figure in {LOCKSTEP_RANGE_INSIDE} (VALIDATION.md section 5, \"Between two replays\").",
        figures.join(", ")
    )
}

/// How many of the published vLLM silicon rows' mean TTFTs lie between the desynchronised and the
/// lock-step replay (`python3 validation/lockstep_range.py`).
pub const LOCKSTEP_RANGE_INSIDE: &str = "239 of 276 values (87%)";

/// The mean TTFT of `out`'s closed loop run again with its clients out of step: the first
/// wave's `C` requests sent `E2EL ÷ C` apart (`E2EL` the run's mean), every later one as soon as
/// a client is free, so with fixed lengths the clients stay spread over a request's lifetime and
/// a request mostly meets the others mid-decode instead of in its wave's prefill. `None` for a
/// fleet, a run without a concurrency limit or a mean E2EL, or a rerun that does not complete.
/// On the published vLLM runs of lock-step shape the measured mean TTFT lies between this and
/// the lock-step figure (VALIDATION.md §5, "Between two replays").
pub fn desynchronised_mean_ttft_ms(spec: &SimSpec, out: &crate::SimOutput) -> Option<f64> {
    if spec.fleet.is_some() {
        return None;
    }
    let c = out.workload.max_concurrency.filter(|c| *c >= 2)? as usize;
    let e2el_ms = out.metrics.e2el.mean;
    if !(e2el_ms.is_finite() && e2el_ms > 0.0) {
        return None;
    }
    let gap_ns = (e2el_ms * 1e6 / c as f64).round() as u64;
    let mut w = out.workload.clone();
    for (i, r) in w.requests.iter_mut().enumerate() {
        r.arrival_ns = gap_ns.checked_mul(i.min(c - 1) as u64)?;
    }
    let run = crate::run_workload(&spec.engine, &spec.cost, &w, crate::simulation::RunOptions::default());
    run.stop.completed().ok()?;
    let m = crate::metrics::bench_metrics(&run);
    m.ttft.mean.is_finite().then_some(m.ttft.mean)
}

/// [`Caveat::id`] of [`chat_front_end`].
pub const CHAT_FRONT_END: &str = "chat_front_end";

/// vLLM 0.11.0 on the chat endpoint under a load that can outrun its API loop: servesim queues
/// the per-request template parse before the engine
/// ([`crate::engine::vllm::scheduler::VLLM_0110_CHAT_TEMPLATE_KWARGS_NS`]) but not the output delivery
/// that shares the loop, so where the front end is the bottleneck the simulated engine runs
/// lightly loaded and TPOT and ITL come out far too low (VALIDATION.md §5, the GPUStack burst).
/// Applies without a concurrency limit or with one of 64 or more, and with requests sent at
/// once, at half the rate one parse each allows or faster, or from a trace.
pub fn chat_front_end(spec: &SimSpec, workload: &crate::workload::Workload) -> Option<Caveat> {
    let crate::config::EngineSpec::Vllm(v) = &spec.engine else { return None };
    let parse_ns = crate::engine::vllm::scheduler::VLLM_0110_CHAT_TEMPLATE_KWARGS_NS;
    let fast = workload.trace_arrivals || workload.request_rate.is_none_or(|r| r >= 0.5e9 / parse_ns as f64);
    if !(workload.chat && v.version == crate::engine::Version::new(0, 11, 0))
        || workload.max_concurrency.is_some_and(|c| c < 64)
        || !fast
    {
        return None;
    }
    Some(Caveat {
        id: CHAT_FRONT_END,
        message: format!("vLLM 0.11.0 parses the chat template on every chat request on its one API event loop; servesim queues that parse ({:.1} ms a request, measured on its build machine) before the engine, but not the delivery of output tokens, which shares the loop. Where requests arrive faster than the loop parses them, the front end is the bottleneck and the measured TPOT and ITL rise with it while the simulated engine runs lightly loaded: on GPUStack's burst of 1,000 Qwen3-14B chat requests (128 in, 4 out, one A100) the published mean TPOT is 233 ms against 51 simulated (VALIDATION.md section 5). Read TPOT and ITL here as lower bounds; 0.11.1 and later cache the parse.", parse_ns as f64 / 1e6),
        desynchronised_mean_ttft_ms: None,
    })
}

/// [`Caveat::id`] of [`chat_template_tokens`].
pub const CHAT_TEMPLATE_TOKENS: &str = "chat_template_tokens";

/// Requests on the chat endpoint: the server renders each prompt through the model's chat
/// template (role markers, and a default system prompt where the template has one) before it
/// prefills it; servesim prefills and counts the dataset's tokens only, and `vllm bench serve`
/// from 0.20 reports the server's `usage.prompt_tokens` as each request's prompt length
/// (`async_request_openai_chat_completions`, read in the 0.19.0 and 0.20.0 wheels by the client
/// audit of 2026-12-06). Not modelled: the template's tokens depend on the model's tokenizer
/// and template, which servesim's model cards do not carry.
pub fn chat_template_tokens(workload: &crate::workload::Workload) -> Option<Caveat> {
    workload.chat.then(|| Caveat {
        id: CHAT_TEMPLATE_TOKENS,
        message: "on the chat endpoint the server wraps each prompt in the model's chat template (role markers, and a default system prompt where the template has one: tens of tokens a request) before prefilling it; servesim prefills and counts only the dataset's tokens, so TTFT and each request's KV footprint run a little low where prompts are short, and \"Total input tokens\" is below what vllm bench serve prints from 0.20, which counts the server's usage.prompt_tokens.".to_string(),
        desynchronised_mean_ttft_ms: None,
    })
}

/// [`Caveat::id`] of [`prefix_repetition_rounded`].
pub const PREFIX_REPETITION_ROUNDED: &str = "prefix_repetition_rounded";

/// The prefix-repetition dataset makes `num_prompts // num_prefixes` prompts a prefix, as vLLM's
/// `PrefixRepetitionRandomDataset.sample` does (read in the 0.11.0 and 0.32.0 wheels: no
/// oversampling after it), so a `num_prompts` that is not a multiple of the prefixes runs fewer
/// requests than asked: said, since the report's `num_prompts` is the one asked (as vLLM's).
pub fn prefix_repetition_rounded(spec: &SimSpec) -> Option<Caveat> {
    let w = &spec.workload;
    let crate::workload::Dataset::PrefixRepetition { num_prefixes, .. } = w.dataset else {
        return None;
    };
    let runs = w.num_prompts / num_prefixes.max(1) * num_prefixes;
    (runs != w.num_prompts).then(|| Caveat {
        id: PREFIX_REPETITION_ROUNDED,
        message: format!(
            "num_prompts {} over {num_prefixes} prefixes: the prefix-repetition dataset makes num_prompts // \
             num_prefixes = {} prompts a prefix, as vLLM's does, so the run has {runs} requests, not {}; give a \
             multiple of {num_prefixes} to run them all.",
            w.num_prompts,
            w.num_prompts / num_prefixes.max(1),
            w.num_prompts
        ),
        desynchronised_mean_ttft_ms: None,
    })
}

/// [`Caveat::id`] of [`max_tokens_clamped`].
pub const MAX_TOKENS_CLAMPED: &str = "max_tokens_clamped";

/// Requests that asked for more output than `max_model_len` leaves them: vLLM from 0.32 shortens
/// their `max_tokens` to what is left (`get_max_tokens`; through 0.31 it answers HTTP 400), and
/// servesim's run does the same ([`crate::workload::WorkloadParams::context_clamp`]): said, since
/// the outputs are shorter than the scenario asks.
pub fn max_tokens_clamped(spec: &SimSpec, workload: &crate::workload::Workload) -> Option<Caveat> {
    let n = workload.clamped_requests;
    let m = spec.workload.context_clamp?;
    (n > 0).then(|| Caveat {
        id: MAX_TOKENS_CLAMPED,
        message: format!(
            "{n} of the {} requests asked for more output tokens than engine.max_model_len ({m}) leaves after \
             their prompt: vLLM from 0.32 shortens each one's max_tokens to max_model_len - prompt \
             (get_max_tokens), as this run does, so their outputs are shorter than asked (through 0.31 the \
             server answers such a request with HTTP 400).",
            workload.requests.len()
        ),
        desynchronised_mean_ttft_ms: None,
    })
}

/// [`Caveat::id`] of [`one_token_outputs`].
pub const ONE_TOKEN_OUTPUTS: &str = "one_token_outputs";

/// Every timed request generates one output token: no request has a time between tokens, so
/// TPOT and ITL are undefined. The report's keys read 0, as `vllm bench serve` prints them (its
/// `np.mean(tpots or 0)`); said here, and an SLO or objective on them judges nothing
/// ([`BenchReport::has_inter_token_times`]: `tune` counts such an SLO as not met). (Until
/// 2026-12-07 a run of one-token outputs met any TPOT SLO at "0.00 ms", silently: an audit.)
pub fn one_token_outputs(workload: &crate::workload::Workload) -> Option<Caveat> {
    let all_one =
        !workload.requests.is_empty() && workload.requests.iter().all(|r| r.output_len.min(r.max_tokens) <= 1);
    all_one.then(|| Caveat {
        id: ONE_TOKEN_OUTPUTS,
        message: "every request generates one output token, so no request has a time between tokens: TPOT and ITL \
                  are undefined here. Their keys read 0, as vllm bench serve prints them, and an SLO or objective on \
                  them judges nothing (tune counts such an SLO as not met); time the first token with the TTFT \
                  metrics."
            .to_string(),
        desynchronised_mean_ttft_ms: None,
    })
}

/// [`Caveat::id`] of [`measured_window`].
pub const MEASURED_WINDOW: &str = "measured_window";
/// [`Caveat::id`] of [`measured_window`] for a ramp without a window.
pub const STAGGERED_START: &str = "staggered_start";

/// A run measured over a window (`workload.window_start_s`, `window_duration_s`), or whose users
/// started one after another (`workload.concurrency_ramp_s`): what its figures cover, which the
/// keys alone do not say (`duration` is the window's length; without a window the ramp's
/// start-up is in every figure).
pub fn measured_window(workload: &crate::workload::Workload) -> Option<Caveat> {
    let s = |ns: u64| ns as f64 / 1e9;
    // The users that start after the first (the loop runs no ramp for one user).
    let ramp = match workload.max_concurrency {
        Some(n) if n > 1 && workload.concurrency_ramp_ns > 0 => Some((
            n,
            workload.concurrency_ramp_ns,
            crate::simulation::user_start_ns(workload.concurrency_ramp_ns, n - 1, n),
        )),
        _ => None,
    };
    let Some((a, b)) = workload.measure_window_ns else {
        let (n, r, last) = ramp?;
        return Some(Caveat {
            id: STAGGERED_START,
            message: format!(
                "the {n} users started one after another over {:.3} s (the last at {:.3} s) and every figure covers \
                 the whole run, that start-up included: set workload.window_start_s and window_duration_s to measure \
                 the loop once every user runs",
                s(r),
                s(last)
            ),
            desynchronised_mean_ttft_ms: None,
        });
    };
    let ramp = ramp.map_or(String::new(), |(n, r, last)| {
        format!(
            " Its {n} users started one after another over {:.3} s{}.",
            s(r),
            if last > a {
                format!(", the last at {:.3} s, after the window opened: it measures a rising load", s(last))
            } else {
                String::new()
            }
        )
    });
    Some(Caveat {
        id: MEASURED_WINDOW,
        message: format!(
            "measured over a window, not the whole run: the latency statistics and completed requests are those \
             completed from {:.3} s to {:.3} s of the timed phase, the throughputs per second of the window ({:.3} s, \
             the duration reported), the output tokens those streamed in it; the peak buckets count the requests \
             completed in it, the failed requests and the KV and running/waiting gauges the whole timed phase.{ramp}",
            s(a),
            s(b),
            s(b - a)
        ),
        desynchronised_mean_ttft_ms: None,
    })
}

/// [`Caveat::id`] of [`wsl2_step_timing`].
pub const WSL2_STEP_TIMING: &str = "wsl2_step_timing";

/// A run on a Windows/WSL2 host (`hardware.host: "wsl2"`; a fleet: any replica's card):
/// servesim times every step as on Linux. The corpus' one WSL2 run (the default scenario's RTX
/// 5090 point) measured TTFT 15% and TPOT 6% above servesim's timing, where Linux runs of an
/// RTX 5090 (Qwen3-4B, vLLM 0.19.1 and 0.22.1) come out at most 3% above it on medians and p99s
/// and mostly below at low load, rates up to 8 (VALIDATION.md §5, "The RTX 5090 on Linux"). One run cannot tell the host's share
/// from that card's (GeForce boards' sustained clocks differ), so nothing is charged for it:
/// said, not modelled.
pub fn wsl2_step_timing(spec: &SimSpec) -> Option<Caveat> {
    let wsl2 = match &spec.fleet {
        Some(f) => f.replicas.iter().any(|r| r.wddm_host),
        None => crate::config::wddm_host(&spec.gpu),
    };
    if !wsl2 {
        return None;
    }
    let pinned = if any_vllm(spec) {
        "; vLLM under WSL2 also runs without pinned host memory by default (its own warning: \"This may \
         slow down the performance\")"
    } else {
        ""
    };
    Some(Caveat {
        id: WSL2_STEP_TIMING,
        message: format!(
            "Windows/WSL2 host: servesim times each step as on a Linux host. The one WSL2 run in its validation \
             corpus (the built-in default's RTX 5090 point, vLLM 0.28) measured TTFT 15% and TPOT 6% above that \
             timing, where Linux runs of an RTX 5090 come out at most 3% above it at low load (VALIDATION.md section \
             5, \"The RTX 5090 on Linux\"){pinned}. One run cannot separate the host's share from that card's, so nothing is \
             charged for it: expect a WSL2 host's latencies above these."
        ),
        desynchronised_mean_ttft_ms: None,
    })
}

/// [`Caveat::id`] of [`wsl2_sglang_pool`].
pub const WSL2_SGLANG_POOL: &str = "wsl2_sglang_pool";

/// SGLang's KV pool derived from `mem_fraction_static` on a Windows/WSL2 host's view of the card
/// (a fleet: any such replica): no start-up log judges it. The corpus' SGLang logs are read on
/// the cards' Linux totals; the one WSL2 SGLang log (RTX 5090, Qwen2.5-7B, 0.5.21, 210,714 tokens)
/// derives +3.9% there (218,893) and +7.6% on the WSL2 view (226,755:
/// `scenarios/rtx5090-qwen2.5-7b-sglang.json --set engine.max_total_num_tokens=null`, with and
/// without `--set hardware=rtx-5090`). Said, not modelled (a docs audit of 2026-12-07 found the
/// README claiming the log matched).
pub fn wsl2_sglang_pool(spec: &SimSpec) -> Option<Caveat> {
    let derived_sglang_on_wsl2 = match &spec.fleet {
        Some(f) => f.replicas.iter().any(|r| {
            r.wddm_host && r.kv_sizing.memory.is_some() && matches!(r.engine, crate::config::EngineSpec::Sglang(_))
        }),
        None => {
            crate::config::wddm_host(&spec.gpu)
                && spec.kv_sizing.memory.is_some()
                && matches!(spec.engine, crate::config::EngineSpec::Sglang(_))
        }
    };
    derived_sglang_on_wsl2.then(|| Caveat {
        id: WSL2_SGLANG_POOL,
        message: "SGLang's KV pool derived from mem_fraction_static on a Windows/WSL2 host's view of the card is \
                  judged by no start-up log: servesim's SGLang memory account is judged on the cards' Linux totals, \
                  and on the one WSL2 SGLang log it has (RTX 5090, Qwen2.5-7B, SGLang 0.5.21: 210,714 tokens) it \
                  derives +3.9% on the Linux total and +7.6% on the WSL2 view (README \"KV capacity from a memory \
                  fraction\"); pin the logged pool (engine.max_total_num_tokens) where you have it."
            .to_string(),
        desynchronised_mean_ttft_ms: None,
    })
}

/// [`Caveat::id`] of [`pcie_tensor_parallel`].
pub const PCIE_TENSOR_PARALLEL: &str = "pcie_tensor_parallel";

/// An uncalibrated run with tensor parallelism over two PCIe GPUs on the custom all-reduce
/// kernel (a GPU card whose `interconnect` is `pcie`, TP 2: past two PCIe GPUs vLLM never runs
/// the kernel; not vLLM's `disable_custom_all_reduce`; a fleet: any such replica): its
/// all-reduces are timed from aiconfigurator's table of that kernel, measured on one machine,
/// and the corpus' PCIe TP runs (one machine, two RTX PRO 6000, Qwen3-32B) ran 26% slower than
/// that timing with the custom kernel (vLLM 0.19.0, its default) and within 3.8% of servesim on
/// NCCL (vLLM 0.28.0 with `--disable-custom-all-reduce`): VALIDATION.md §5, "The RTX PRO 6000
/// with vLLM". The two runs also differ in release, and one pair of runs cannot say which
/// difference made it, so nothing is charged; a vLLM host that falls back to NCCL itself (no
/// peer-to-peer) is told to say so.
pub fn pcie_tensor_parallel(spec: &SimSpec) -> Option<Caveat> {
    let custom = |c: &crate::cost::CostModel| {
        c.reference.is_none() && c.composed.as_ref().is_some_and(|k| !k.all_reduce_on_nccl())
    };
    let pcie = |g: &crate::cards::GpuCard| g.interconnect.as_deref() == Some("pcie");
    let kinds: Vec<EngineKind> = match &spec.fleet {
        Some(f) => f
            .replicas
            .iter()
            // Each replica's own card's link (an inline replica card's, which a lookup of its id
            // among the built-in cards missed or mistook until 2026-12-07).
            .filter(|r| {
                r.deployment.tensor_parallel_size == 2 && custom(&r.cost) && r.interconnect.as_deref() == Some("pcie")
            })
            .map(|r| r.engine.engine_kind())
            .collect(),
        None if spec.deployment.tensor_parallel_size == 2 && custom(&spec.cost) && pcie(&spec.gpu) => {
            vec![spec.engine.engine_kind()]
        }
        None => Vec::new(),
    };
    if kinds.is_empty() {
        return None;
    }
    let flag = if kinds.contains(&EngineKind::Vllm) {
        " Where this host's vLLM runs NCCL instead (it turns the custom kernel off itself where GPUs cannot \
         reach each other peer to peer, as many virtual machines cannot; servesim's GeForce cards say so \
         themselves, peer_to_peer false), set engine.disable_custom_all_reduce: true."
    } else {
        ""
    };
    Some(Caveat {
        id: PCIE_TENSOR_PARALLEL,
        message: format!(
            "tensor parallelism over two PCIe GPUs on the custom all-reduce kernel: the all-reduces are timed \
             from one machine's measured table of that kernel. The PCIe TP runs in servesim's validation corpus \
             (one machine, two RTX PRO 6000, Qwen3-32B) stepped about 26% slower than this timing with the \
             custom kernel (vLLM 0.19.0, its default) and came within 3.8% on NCCL (vLLM 0.28.0 with \
             --disable-custom-all-reduce); the two runs also differ in release, so which difference made it is \
             not known (VALIDATION.md section 5, \"The RTX PRO 6000 with vLLM\"). Nothing is charged for it: \
             calibrate on a run of this host before the figures decide hardware.{flag}"
        ),
        desynchronised_mean_ttft_ms: None,
    })
}

/// [`Caveat::id`] of [`no_peer_to_peer`].
pub const NO_PEER_TO_PEER: &str = "no_peer_to_peer";

/// Tensor parallelism on a card without peer-to-peer access (`GpuCard::peer_to_peer` false: a
/// GeForce card under NVIDIA's stock driver; a fleet: any such replica with TP > 1). vLLM and
/// SGLang then turn their custom all-reduce off and run NCCL, as servesim does
/// (`cost::NcclWhy::NoPeerToPeer`), but NCCL without peer access moves the data through host
/// memory, and every NCCL table servesim has was measured with it: the cards' sources put a
/// copy without it at about 0.7-0.8 of the bandwidth and 11-20 µs of latency instead of under
/// 2 µs. No NCCL all-reduce measured without peer access on two or four such cards was found
/// (an 8-GPU RTX 4090 run across two sockets: 1.43 times slower at 128 MiB than the same
/// machine with tinygrad's patched driver), so nothing is charged and the direction is said.
pub fn no_peer_to_peer(spec: &SimSpec) -> Option<Caveat> {
    // What the run's own cost did (each replica's, inline cards included), not a card looked up
    // by id: a review of 2026-12-07 found an inline card patched for peer access said and one
    // without it missed; and nothing under the linear prior, whose all-reduce is the link's
    // roofline, not NCCL's table.
    let why = |c: &crate::cost::CostModel| c.composed.as_ref().and_then(|k| k.nccl_why());
    let no_p2p = |c: &crate::cost::CostModel| why(c) == Some(crate::cost::NcclWhy::NoPeerToPeer);
    let gpu: &str = match &spec.fleet {
        Some(f) => f.replicas.iter().find(|r| no_p2p(&r.cost)).map(|r| r.gpu.as_str())?,
        None => Some(spec.gpu.id.as_str()).filter(|_| no_p2p(&spec.cost))?,
    };
    Some(Caveat {
        id: NO_PEER_TO_PEER,
        message: format!(
            "tensor parallelism on {}, which has no peer-to-peer access under NVIDIA's stock driver: vLLM and SGLang \
             turn their custom all-reduce off and run NCCL, and so does this run, but its NCCL timings were measured \
             with peer-to-peer. Without it NCCL copies through host memory, which the card's sources put at about \
             0.7-0.8 of the bandwidth and 11-20 µs of latency instead of under 2 µs; no all-reduce measured that \
             way on two or four such cards was found, so nothing is charged: expect the all-reduces, and the steps at \
             TP > 1, to be slower than these. With a driver patched for peer access, give an inline card with \
             \"peer_to_peer\": true.",
            gpu
        ),
        desynchronised_mean_ttft_ms: None,
    })
}

/// [`Caveat::id`] of [`wsl2_pinned_memory`].
pub const WSL2_PINNED_MEMORY: &str = "wsl2_pinned_memory";

/// The first vLLM release whose V2 model runner starts without pinned memory (its UVA buffers
/// fall back to the GPU: 0.30.0 `v1/worker/gpu/buffer_utils.py`, `NonUvaBuffer` and
/// `StagedWriteTensor`; through 0.29 `UvaBuffer` raises "UVA is not available").
pub const VLLM_V2_WITHOUT_PINNED_MEMORY: crate::engine::Version = crate::engine::Version::new(0, 30, 0);

/// vLLM's V2 model runner with a pool derived from the memory fraction on a Windows/WSL2 host,
/// where pinned host memory is off unless `VLLM_WSL2_ENABLE_PIN_MEMORY=1`
/// (`CudaPlatform.is_pin_memory_available`, from 0.24): servesim sizes the pool as a server with
/// the variable set does. Without it a 0.24–0.29 V2 runner does not start (its request buffers
/// need UVA; 0.22–0.23 have no such variable, so servesim sizes the V1 runner that starts
/// instead, `VllmMemoryBehaviour::for_card`), and from 0.30 `RequestState.all_token_ids` (`max_num_seqs × max_model_len` int32 a GPU)
/// falls back from pinned host memory to the GPU before the pool is sized, which servesim does
/// not charge (`docs/vllm.md` §5). An assumption, stated where the result depends on it: a
/// pinned pool (`kv_cache_tokens`, `num_gpu_blocks_override`) does not.
pub fn wsl2_pinned_memory(spec: &SimSpec) -> Option<Caveat> {
    let crate::config::EngineSpec::Vllm(v) = &spec.engine else { return None };
    if spec.fleet.is_some() || !crate::config::wddm_host(&spec.gpu) || spec.kv_sizing.memory.is_none() {
        return None;
    }
    let d = &spec.deployment;
    let mb =
        crate::config::VllmMemoryBehaviour::of_release(v.version, &spec.model, d.quantization.is_some(), d.cuda_graphs);
    if !mb.model_runner_v2 {
        return None;
    }
    let message = if v.version < crate::config::VLLM_WSL2_PIN_MEMORY_VARIABLE {
        format!(
            "vLLM {}'s default model runner for this model (V2) cannot start on a Windows/WSL2 host: it needs pinned memory, which this release has none of under WSL2 (VLLM_WSL2_ENABLE_PIN_MEMORY arrives in 0.24). The server that starts there runs the V1 runner (VLLM_USE_V2_MODEL_RUNNER=0), and servesim sizes the KV pool as that one does.",
            v.version
        )
    } else if v.version < VLLM_V2_WITHOUT_PINNED_MEMORY {
        format!(
            "on a Windows/WSL2 host vLLM {}'s V2 model runner starts only with VLLM_WSL2_ENABLE_PIN_MEMORY=1 (off by default; without it its request buffers raise \"UVA is not available\"), and servesim sizes the KV pool as that server does. A server run instead on the V1 runner (VLLM_USE_V2_MODEL_RUNNER=0) sizes its pool differently, which servesim does not model for this release; pin the logged pool (engine.kv_cache_tokens) to use it.",
            v.version
        )
    } else {
        let bytes = u64::from(v.max_num_seqs) * u64::from(v.max_model_len) * 4;
        let per_token = spec.kv_sizing.kv_bytes_per_token.max(1);
        let pool = spec.engine.kv_capacity_tokens().max(1);
        let tokens = bytes / per_token;
        format!(
            "servesim sizes the KV pool for a Windows/WSL2 host with VLLM_WSL2_ENABLE_PIN_MEMORY=1. It is off by default, and without it vLLM {} keeps each request slot's token ids (max_num_seqs {} x max_model_len {} int32: {:.0} MiB a GPU) on the GPU instead of in pinned host memory, before the pool is sized: the pool would be about {} tokens ({:.1}%) smaller than this run's {}. Lower max_model_len or max_num_seqs to shrink it, or pin the logged pool (engine.kv_cache_tokens).",
            v.version,
            v.max_num_seqs,
            v.max_model_len,
            bytes as f64 / (1u64 << 20) as f64,
            tokens,
            100.0 * tokens as f64 / pool as f64,
            pool
        )
    };
    Some(Caveat { id: WSL2_PINNED_MEMORY, message, desynchronised_mean_ttft_ms: None })
}

/// [`Caveat::id`] of [`unjudged_model`].
pub const UNJUDGED_MODEL: &str = "unjudged_model";

/// The dense model cards with published runs judged in `servesim validate`'s corpus (rows that
/// ran, of sets not kept apart: `validation/published/`), as `(card id, num_parameters)`, smallest
/// first; `tests/validate.rs` checks the list against the sets and the cards. A card matches
/// by id and parameter count, so an inline card reusing a judged id for another model does not.
pub const JUDGED_DENSE_MODELS: &[(&str, u64)] = &[
    ("qwen3-4b", 4_022_468_096),
    ("qwen2-7b-instruct", 7_615_616_512),
    ("qwen2.5-7b-instruct", 7_615_616_512),
    ("llama-3-8b-instruct", 8_030_261_248),
    ("llama-3.1-8b-instruct", 8_030_261_248),
    ("qwen3-8b", 8_190_735_360),
    ("qwen3-14b", 14_768_307_200),
    ("qwen3-32b", 32_762_123_264),
    ("qwen2.5-32b", 32_763_876_352),
    ("llama-3.1-70b-instruct", 70_553_706_496),
    ("llama-3.1-70b-instruct-fp8", 70_553_706_496),
    ("llama-3.3-70b-instruct", 70_553_706_496),
    ("llama-3.3-70b-instruct-fp8", 70_553_706_496),
];

/// A run of a dense model no published run has judged (a card without a validation set, or a
/// user's inline card): its step costs come from the same measured kernels and engine rules as the
/// judged models', and its uncalibrated intervals from their record on the GPU and engine, not
/// its own. Outside the judged sizes (4.0–70.6 billion parameters, `JUDGED_DENSE_MODELS`) the message says which way:
/// a smaller model's steps hold more per-step CPU time and kernel launch floors than any judged
/// step did. Mixture-of-experts cards have [`moe_timing`] instead.
pub fn unjudged_model(spec: &SimSpec) -> Option<Caveat> {
    let m = &spec.model;
    // Judged: a judged id and size, and the built-in card itself. An inline card under that id
    // with other figures (four times the KV heads, more layers) is another model, which no
    // published run judged (the cards audit of 2026-12-06: it had matched on id and size alone).
    let judged = JUDGED_DENSE_MODELS.iter().any(|(id, n)| *id == m.id && *n == m.num_parameters)
        && crate::builtin::model(&m.id).is_some_and(|c| c == m);
    if m.moe.is_some() || judged {
        return None;
    }
    // Only the uncalibrated measured-kernel cost is what the message describes: a profile fitted on
    // this model's runs, or the linear prior, times it otherwise.
    if spec.cost.composed.is_none() || spec.cost.reference.is_some() {
        return None;
    }
    let b = |n: u64| n as f64 / 1e9;
    let (lo, hi) = (JUDGED_DENSE_MODELS[0].1, JUDGED_DENSE_MODELS[JUDGED_DENSE_MODELS.len() - 1].1);
    let p = m.num_parameters;
    let size = if p < lo - lo / 10 {
        format!(
            "At {:.1} billion parameters it is smaller than any judged model ({:.1} billion the smallest): per-step CPU \
             time and kernel launch floors are a larger share of its steps than of any step the corpus checked.",
            b(p),
            b(lo)
        )
    } else if p > hi + hi / 10 {
        format!(
            "At {:.1} billion parameters it is larger than any judged dense model ({:.1} billion the largest).",
            b(p),
            b(hi)
        )
    } else if p < lo || p > hi {
        format!(
            "Its size, {:.1} billion parameters, is just outside the judged models' ({:.1} to {:.1} billion).",
            b(p),
            b(lo),
            b(hi)
        )
    } else {
        format!(
            "Its size, {:.1} billion parameters, is within the judged models' ({:.1} to {:.1} billion).",
            b(p),
            b(lo),
            b(hi)
        )
    };
    Some(Caveat {
        id: UNJUDGED_MODEL,
        message: format!(
            "no published run of {} is in servesim's validation corpus (servesim validate, VALIDATION.md section 5): its \
             step costs come from the same measured kernel tables and engine rules as the judged models', and its \
             uncalibrated intervals (--uncertainty) from their record on this GPU and engine, not its own. {size} \
             Calibrate on a measured run of it before the figures decide hardware.",
            m.id
        ),
        desynchronised_mean_ttft_ms: None,
    })
}

/// [`Caveat::id`] of [`unjudged_gpu`].
pub const UNJUDGED_GPU: &str = "unjudged_gpu";

/// The GPU cards and engines with published runs judged in `servesim validate`'s corpus: the
/// `(GPU card id, engine)` of the groups of `validation/baseline.json`, which the uncalibrated
/// intervals of `--uncertainty` are scaled by (`calib::uncertainty::uncalibrated_errors`);
/// `tests/validate.rs` checks the list against that file. Sorted by GPU, then engine.
pub const JUDGED_GPU_ENGINES: &[(&str, EngineKind)] = &[
    ("a100-40gb", EngineKind::Sglang),
    ("a100-80gb", EngineKind::Vllm),
    ("a100-80gb", EngineKind::Sglang),
    ("b200", EngineKind::Vllm),
    ("h100-80gb", EngineKind::Vllm),
    ("h100-80gb", EngineKind::Sglang),
    ("h200", EngineKind::Vllm),
    ("h200", EngineKind::Sglang),
    ("l40s", EngineKind::Vllm),
    ("rtx-4090", EngineKind::Vllm),
    ("rtx-5090", EngineKind::Vllm),
    ("rtx-pro-6000", EngineKind::Vllm),
];

/// Whether the run's own GPU card is the built-in card of its id: an inline card reusing a
/// built-in id with other figures is another GPU, which no published run judged and whose
/// uncalibrated intervals are the corpus-wide ones. (Its memory aside: under WSL2 the device
/// total is nvidia-smi's, `config::card_on_host`.)
pub fn gpu_card_is_builtin(spec: &SimSpec) -> bool {
    crate::builtin::gpu_is_builtin(&spec.gpu)
}

/// An uncalibrated run on a GPU card and engine that no published run has judged (SGLang on an
/// L40S or an RTX PRO 6000, an H100 PCIe or NVL, SGLang on a B200, a user's inline card): its step costs were
/// never compared end to end with a measured run of that GPU and engine, whatever their source
/// (that GPU's measured kernel tables, another GPU's scaled, or the fitted roofline), and its
/// uncalibrated intervals are the corpus-wide ones. A fleet names each such replica GPU and engine.
/// An inline card with a judged card's id and other figures counts as unjudged. Not given where a fitted profile or the linear prior times the steps ([`unjudged_model`]'s rule).
pub fn unjudged_gpu(spec: &SimSpec) -> Option<Caveat> {
    let uncalibrated = |c: &crate::cost::CostModel| c.composed.is_some() && c.reference.is_none();
    let mut pairs: Vec<(&str, EngineKind)> = match &spec.fleet {
        Some(f) => f
            .replicas
            .iter()
            .filter(|r| uncalibrated(&r.cost))
            .map(|r| (r.gpu.as_str(), r.engine.engine_kind()))
            .collect(),
        None if uncalibrated(&spec.cost) => vec![(spec.gpu.id.as_str(), spec.engine.engine_kind())],
        None => Vec::new(),
    };
    let own_card_builtin = gpu_card_is_builtin(spec);
    let top = spec.gpu.id.as_str();
    pairs.retain(|&(g, k)| {
        !(JUDGED_GPU_ENGINES.iter().any(|&(jg, jk)| jg == g && jk == k) && (g != top || own_card_builtin))
    });
    pairs.sort_by(|a, b| a.0.cmp(b.0).then(a.1.as_str().cmp(b.1.as_str())));
    pairs.dedup();
    if pairs.is_empty() {
        return None;
    }
    let what = pairs.iter().map(|(g, k)| format!("{g} with {}", k.display_name())).collect::<Vec<_>>().join(", ");
    let judged_on =
        |k: EngineKind| JUDGED_GPU_ENGINES.iter().filter(|j| j.1 == k).map(|j| j.0).collect::<Vec<_>>().join(", ");
    let mut kinds: Vec<EngineKind> = pairs.iter().map(|p| p.1).collect();
    kinds.sort_by_key(|k| k.as_str());
    kinds.dedup();
    let judged =
        kinds.iter().map(|&k| format!("{} on {}", k.display_name(), judged_on(k))).collect::<Vec<_>>().join("; ");
    Some(Caveat {
        id: UNJUDGED_GPU,
        message: format!(
            "no published run on {what} is in servesim's validation corpus (servesim validate, VALIDATION.md \
             section 5): the step costs (their source is the report's step cost source, `cost_source` in --json) were never compared end to end with a run \
             measured on this GPU with this engine, and the uncalibrated intervals (--uncertainty) are the \
             corpus-wide ones, not this GPU's record. Judged: {judged}. Calibrate on a measured run on this GPU \
             before the figures decide hardware."
        ),
        desynchronised_mean_ttft_ms: None,
    })
}

/// [`Caveat::id`] of [`linear_prior`].
pub const LINEAR_PRIOR: &str = "linear_prior";

/// A run whose steps the linear roofline prior times with nothing fitted: a card that opts out
/// of measured kernels (`kernel_tables: "none"`, the `cpu-host` card of the CPU test bed) or a
/// scenario's `cost.prior`, with no profile and no inline step coefficient. That prior puts fixed
/// efficiencies against the card's peak figures; on the validation corpus's GPUs it misses by
/// more than the measured kernels (VALIDATION.md §5, "Every group now, against the linear
/// roofline prior": `servesim validate --set 'cost.prior={}'`), and on the `cpu-host` card,
/// whose figures are orders of magnitude rather than a datasheet's (its `notes`: "Do not use it
/// for predictions without a fitted profile"), nothing bounds it. Until 2026-12-07 such a run
/// printed its figures with no word (the cpu-host audit). A fleet: each replica so timed.
pub fn linear_prior(spec: &SimSpec) -> Option<Caveat> {
    let linear = |c: &crate::cost::CostModel| {
        c.composed.is_none() && c.sources[..6].iter().all(|s| *s == crate::cost::CoefficientSource::Prior)
    };
    let mut gpus: Vec<&str> = match &spec.fleet {
        Some(f) => f.replicas.iter().filter(|r| linear(&r.cost)).map(|r| r.gpu.as_str()).collect(),
        None if linear(&spec.cost) => vec![spec.gpu.id.as_str()],
        None => Vec::new(),
    };
    gpus.sort_unstable();
    gpus.dedup();
    if gpus.is_empty() {
        return None;
    }
    let cpu = gpus.iter().any(|g| *g == "cpu-host");
    let cpu_note = if cpu {
        " The cpu-host card's figures are orders of magnitude for the CPU test bed, not a datasheet's: nothing \
         bounds how far its steps are from a real CPU engine's. Its card says to use it only with a fitted profile \
         (servesim calibrate against the live server, then --profile)."
    } else {
        ""
    };
    Some(Caveat {
        id: LINEAR_PRIOR,
        message: format!(
            "the steps on {} are timed by the linear roofline prior (fixed efficiencies against the card's peak \
             FLOPs and bandwidth: the card's kernel_tables \"none\", or the scenario's cost.prior), with nothing \
             fitted: on the validation corpus's GPUs that prior misses by more than the measured kernels do \
             (VALIDATION.md section 5, servesim validate --set 'cost.prior={{}}').{cpu_note} Read the figures as \
             a starting point for calibration, not a prediction.",
            gpus.join(", ")
        ),
        desynchronised_mean_ttft_ms: None,
    })
}

/// [`Caveat::id`] of [`moe_timing`].
pub const MOE_TIMING: &str = "moe_timing";

/// Any run of a mixture-of-experts card: its expert times come from aiconfigurator's measured
/// MoE tables, judged on four published groups (`servesim validate --only qwen3-235b` and
/// `--only qwen3-30b-a3b`, VALIDATION.md §5 "Mixture of experts"), whose signed median TPOT
/// errors the message quotes (tests/validate.rs checks them against validate): Qwen3-235B-A22B-FP8
/// on H200 under SGLang 0.5.6, the tables' vendor's own runs (−15.3% at TP 2, −11.9% at TP 4;
/// TTFT −34.9% / −41.2%), and Qwen3-30B-A3B under vLLM on one GPU, runs by others (−3.1% on an
/// H200 under 0.17.0 one request at a time, +8.0% on an H100 at concurrency 10; TTFT −51.0% /
/// −32.5%, group medians). vLLM 0.12.0's Qwen3-235B-A22B-FP8 rows ran DeepGEMM, which servesim
/// refuses (`config::vllm::vllm_moe_kernel`). Those sets are kept apart from the corpus, so the
/// uncalibrated intervals (`--uncertainty`) rest on dense models' record and do not cover this.
pub fn moe_timing(spec: &SimSpec) -> Option<Caveat> {
    spec.model.moe.as_ref()?;
    Some(Caveat {
        id: MOE_TIMING,
        message: format!(
            "{} is a mixture-of-experts model: its expert times come from aiconfigurator's measured MoE tables, judged on four published groups (VALIDATION.md section 5, \"Mixture of experts\"): Qwen3-235B-A22B-FP8 on H200 under SGLang 0.5.6, the tables' vendor's own runs, median TPOT error -15% and -12% (TP 2 and 4), TTFT 35-41% low; Qwen3-30B-A3B under vLLM on one GPU, runs by others, TPOT -3% (H200, one request at a time) and +8% (H100, concurrency 10), TTFT 33-51% low. Read the decode speed as close at those shapes and the prefill as optimistic, by up to half the TTFT. The expert times assume aiconfigurator's power-law routing (power_law_1.2, the tables' default); with tokens spread evenly over the experts, steps of 8-32 tokens would spend 1.3-2.1x as long in the experts (up to 4.4x on L40S and RTX PRO 6000) and steps of 1,024 tokens or more 4-25% less (the same wheel's balanced tables, docs/moe.md section 5.2), so a decode batch of 8-32 can be tens of percent slower than shown. The uncalibrated intervals (--uncertainty) come from dense models' record and do not cover this. Calibrate on a measured run of this model before deciding on hardware.",
            spec.model.id
        ),
        desynchronised_mean_ttft_ms: None,
    })
}

/// [`Caveat::id`] of [`moe_default_config`].
pub const MOE_DEFAULT_CONFIG: &str = "moe_default_config";

/// A vLLM run of a MoE card whose fused-MoE Triton config is not the one its measured table ran:
/// the release ships no tuned file for the shape and GPU and predates the batch-aware default
/// (0.17.0), or ships a tuned file the table's release did not (or the reverse). Which files each
/// release ships: `config::vllm_moe_tuned_config` (docs/moe.md §8). The one published run of the
/// first kind, Qwen3-30B-A3B bf16 on an H100 under vLLM main of 2025-08-19 (no tuned file, the
/// old default), measured TTFT 33% above servesim's and TPOT 8% below (VALIDATION.md §5).
pub fn moe_default_config(spec: &SimSpec) -> Option<Caveat> {
    let crate::config::EngineSpec::Vllm(v) = &spec.engine else { return None };
    let moe = spec.model.moe.as_ref()?;
    let composed = spec.cost.composed.as_ref()?;
    if composed.moe_kernel != Some("triton") {
        return None;
    }
    let table = composed.moe_table_release?;
    let tp = spec.deployment.tensor_parallel_size.max(1);
    let n = moe.moe_intermediate_size / tp;
    let block_fp8 = crate::cost::moe_table_dtype(&spec.model, &spec.deployment) == Ok("fp8_block");
    let c = crate::config::vllm_moe_tuned_config(moe.num_experts, n, &spec.gpu.id, block_fp8)?;
    let (here, there) = (crate::config::vllm_moe_config_at(c, v.version), crate::config::vllm_moe_config_at(c, table));
    let new_default = crate::config::VLLM_MOE_NEW_DEFAULT_CONFIG;
    let file =
        format!("E={},N={n},device {}{}", moe.num_experts, spec.gpu.id, if block_fp8 { ", block fp8" } else { "" });
    let old_default = |r: crate::engine::Version| r < new_default;
    let default_of = |r: crate::engine::Version| {
        if old_default(r) {
            format!(
                "the default config of releases before {new_default} ({{BLOCK_SIZE_M 64, N 64, K 32, GROUP_SIZE_M 8}})"
            )
        } else {
            format!("the batch-aware default config ({new_default} on)")
        }
    };
    // What the run's kernel runs and what the table's ran; whether the table is the faster.
    let (runs, timed, optimistic) = match (here, there) {
        (true, true) => return None,
        (false, false) if old_default(v.version) == old_default(table) => return None,
        (false, false) => (default_of(v.version), default_of(table), old_default(v.version)),
        (false, true) => (default_of(v.version), "the tuned one".to_string(), true),
        (true, false) => ("the tuned one".to_string(), default_of(table), false),
    };
    let first = match c {
        crate::config::TunedMoeConfig::Since(first) => format!("tuned from vLLM {first}"),
        crate::config::TunedMoeConfig::Never => "tuned in no release to 0.34.0".to_string(),
    };
    let reading = if optimistic {
        "The one published run of this kind (Qwen3-30B-A3B on an H100, vLLM of August 2025, no tuned file, the old \
         default) measured TTFT 33% above servesim's and TPOT 8% below (VALIDATION.md section 5): read the prefill as \
         optimistic."
    } else {
        "No published run of this kind was found: read the prefill as pessimistic, by an amount not measured."
    };
    Some(Caveat {
        id: MOE_DEFAULT_CONFIG,
        message: format!(
            "vLLM {}'s Triton fused-MoE kernel runs {runs} for this shape ({file}: {first}); the measured table that \
             times it (vLLM {table}'s) ran {timed}, and servesim uses that table for every release (docs/moe.md \
             section 8). {reading}",
            v.version
        ),
        desynchronised_mean_ttft_ms: None,
    })
}

/// [`Caveat::id`] of [`sglang_overlap_off`].
pub const SGLANG_OVERLAP_OFF: &str = "sglang_overlap_off";

/// An SGLang run on a GPU with the overlap scheduler turned off (`disable_overlap_schedule`):
/// servesim models the overlap's one-step lag but not its hiding of each step's CPU work under
/// the GPU's (`config::SGLANG_CPU_OVERLAP`, off: it made four validated SGLang groups worse), so
/// the run without the overlap is not slower than one with it, as it is on a GPU (it came out
/// faster, its lag gone; the audit of 2026-12-06).
pub fn sglang_overlap_off(spec: &SimSpec) -> Option<Caveat> {
    let crate::config::EngineSpec::Sglang(c) = &spec.engine else { return None };
    // (The CPU backend runs without the overlap's hiding either way.)
    if !c.disable_overlap_schedule || c.behaviour.cpu_overlap || crate::config::is_cpu_host(&spec.gpu) {
        return None;
    }
    let cpu = spec.cost.composed.as_ref().map(|k| k.sync_cpu());
    let per_step = cpu.map_or(String::new(), |c| {
        format!(" (here {:.0} µs a step and {:.0} µs a running request)", c.step_us, c.per_seq_us)
    });
    Some(Caveat {
        id: SGLANG_OVERLAP_OFF,
        message: format!(
            "disable_overlap_schedule: on a GPU, SGLang's overlap scheduler hides each step's CPU work \
             (scheduling, output processing) under the GPU's, and turning it off adds that work to every step. \
             servesim models the overlap's one-step lag but times every SGLang step as its CPU work plus its GPU \
             work with the overlap on or off{per_step}: the hiding made four validated SGLang groups worse and is \
             left out (VALIDATION.md section 5, \"SGLang: the CPU overlap and the tokenizer\"). So this run \
             without the overlap is not slower than one with it, as it would be on a GPU: do not read the \
             difference between the two as what the flag does."
        ),
        desynchronised_mean_ttft_ms: None,
    })
}

/// The caveats of one run ([`Caveat`]).
pub fn caveats(spec: &SimSpec, workload: &crate::workload::Workload) -> Vec<Caveat> {
    lockstep_waves(spec, workload)
        .into_iter()
        .chain(measured_window(workload))
        .chain(chat_front_end(spec, workload))
        .chain(chat_template_tokens(workload))
        .chain(prefix_repetition_rounded(spec))
        .chain(max_tokens_clamped(spec, workload))
        .chain(one_token_outputs(workload))
        .chain(wsl2_pinned_memory(spec))
        .chain(wsl2_step_timing(spec))
        .chain(wsl2_sglang_pool(spec))
        .chain(pcie_tensor_parallel(spec))
        .chain(no_peer_to_peer(spec))
        .chain(moe_timing(spec))
        .chain(moe_default_config(spec))
        .chain(unjudged_model(spec))
        .chain(unjudged_gpu(spec))
        .chain(linear_prior(spec))
        .chain(sglang_overlap_off(spec))
        .collect()
}

impl PointReport {
    /// The report of one simulated run.
    pub fn of(spec: &SimSpec, out: &SimOutput) -> PointReport {
        let mut bench = BenchReport::of(&PointMeta::of(spec), &out.workload, &out.metrics, &out.run);
        if spec.fleet.is_some() {
            // Every replica group's limit, summed (not the pooled tokens over one footprint).
            let l = crate::sweep::kv_limited_concurrency(spec, &out.workload);
            bench.kv_limited_concurrency = Some(l.concurrency);
            bench.kv_request_footprint_tokens = l.footprint_tokens;
        }
        // A run that preempted broke some of its waves (a preempted request is recomputed and
        // rejoins out of step): the caveat says so rather than claim every wave stays whole.
        let mut caveats = caveats(spec, &out.workload);
        if let Some(n) = bench.num_preemptions.filter(|&n| n > 0) {
            for c in caveats.iter_mut().filter(|c| c.id == LOCKSTEP_WAVES) {
                c.message.push_str(&format!(
                    " This run preempted {n} times, and a preempted request rejoins out of step: its waves are partly broken."
                ));
            }
        }
        PointReport {
            bench,
            cost_source: spec.cost.source(),
            fleet: out.fleet.as_ref().map(FleetReport::of),
            replicas: out.fleet.as_ref().map(|f| f.replicas.iter().map(ReplicaReport::of).collect()),
            caveats,
        }
    }

    /// The report with its caveats' figures that take another run of the workload
    /// ([`Caveat::desynchronised_mean_ttft_ms`]): what `simulate`, `sweep` and `explain` print.
    /// [`PointReport::of`] leaves them out, for the callers that run many points and print no
    /// caveat per point (`tune`, `plan`, `validate`, an interval's ensemble).
    pub fn with_caveat_runs(mut self, spec: &SimSpec, out: &SimOutput) -> PointReport {
        for c in &mut self.caveats {
            if c.id == LOCKSTEP_WAVES {
                c.desynchronised_mean_ttft_ms = desynchronised_mean_ttft_ms(spec, out);
                if c.desynchronised_mean_ttft_ms.is_some_and(|d| d > self.bench.ttft.mean) {
                    c.message.push_str(
                        " Here the out-of-step figure below is the higher one: this run's TTFT is not an upper bound.",
                    );
                }
            }
        }
        self
    }
}

impl Metrics for PointReport {
    fn metric(&self, m: Metric) -> Option<f64> {
        self.bench.metric(m)
    }
    fn completed(&self) -> bool {
        self.bench.completed()
    }
}

/// The fleet's own figures (`fleet` key of a fleet's report).
#[derive(Clone, Debug, serde::Serialize)]
pub struct FleetReport {
    /// `fleet` or `data_parallel`.
    pub kind: &'static str,
    pub num_replicas: u64,
    pub num_gpus: u32,
    pub router: String,
    /// Disaggregated prefill/decode only: the decode router and the KV transfers.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_router: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kv_transfers: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_kv_transfer_ms: Option<f64>,
    /// Mean wait from the prefill's end to the transfer's start (a decode reservation, the
    /// links), ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_kv_transfer_wait_ms: Option<f64>,
    /// Mean wait from the KV's landing to the decode replica first scheduling the request (its
    /// wait in the decode engine's queue, where a full decode pool shows), ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_kv_landed_to_scheduled_ms: Option<f64>,
    /// SGLang decode servers only: the mean wait in a decode server's pre-allocation queue, from
    /// the request's arrival to its prefill being let start (the decode side's KV reserved), ms.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_kv_prealloc_wait_ms: Option<f64>,
    /// Disaggregated prefill/decode only: the most requests running at once on the decode
    /// replicas together (the KV-limited concurrency is theirs; `peak_running` adds the prefill
    /// replicas' requests).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_running_decode: Option<u32>,
}

impl FleetReport {
    pub fn of(f: &crate::fleet::FleetRun) -> FleetReport {
        let pd = f.decode_router.is_some();
        FleetReport {
            kind: match f.kind {
                crate::config::FleetKind::Fleet => "fleet",
                crate::config::FleetKind::DataParallel => "data_parallel",
            },
            num_replicas: f.replicas.len() as u64,
            num_gpus: f.num_gpus,
            router: f.router.clone(),
            decode_router: f.decode_router.clone(),
            kv_transfers: pd.then_some(f.kv_transfers),
            mean_kv_transfer_ms: pd.then_some(f.mean_kv_transfer_ms),
            mean_kv_transfer_wait_ms: pd.then_some(f.mean_kv_transfer_wait_ms),
            mean_kv_landed_to_scheduled_ms: pd.then_some(f.mean_kv_landed_to_scheduled_ms),
            mean_kv_prealloc_wait_ms: f.mean_kv_prealloc_wait_ms,
            peak_running_decode: f.decode_running_peak,
        }
    }
}

/// One replica's engine block (`replicas` key of a fleet's report).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReplicaReport {
    pub name: String,
    pub group: u64,
    pub role: &'static str,
    pub engine: &'static str,
    pub engine_version: String,
    pub hardware: String,
    pub tensor_parallel_size: u32,
    pub requests: u64,
    pub num_preemptions: u64,
    pub prefix_cache_queries: u64,
    pub prefix_cache_hits: u64,
    pub prefix_cache_hit_rate: f64,
    pub prefill_tokens_computed: u64,
    pub kv_cache_tokens: u64,
    pub kv_cache_usage_peak: f64,
    pub kv_cache_usage_mean: f64,
    pub mean_running: f64,
    pub peak_running: u32,
    pub mean_waiting: f64,
    pub peak_waiting: u32,
    pub num_steps: u64,
    /// What timed its steps: the report's top-level `cost_source` is the first group's, and a
    /// group of another GPU or engine has its own.
    pub cost_source: String,
}

impl ReplicaReport {
    pub fn of(r: &crate::fleet::ReplicaRun) -> ReplicaReport {
        let c = &r.counters;
        ReplicaReport {
            name: r.name.clone(),
            group: r.group as u64,
            role: r.role.as_str(),
            engine: r.engine,
            engine_version: r.engine_version.clone(),
            hardware: r.hardware.clone(),
            tensor_parallel_size: r.tensor_parallel_size,
            requests: r.requests,
            num_preemptions: c.num_preemptions,
            prefix_cache_queries: c.prefix_cache_queries,
            prefix_cache_hits: c.prefix_cache_hits,
            prefix_cache_hit_rate: c.prefix_cache_hit_rate(),
            prefill_tokens_computed: c.prefill_tokens_computed,
            kv_cache_tokens: r.kv_capacity_tokens,
            kv_cache_usage_peak: r.gauges.kv_usage_peak,
            kv_cache_usage_mean: r.gauges.kv_usage_mean,
            mean_running: r.gauges.running_mean,
            peak_running: r.gauges.running_peak,
            mean_waiting: r.gauges.waiting_mean,
            peak_waiting: r.gauges.waiting_peak,
            num_steps: r.num_steps,
            cost_source: r.cost_source.clone(),
        }
    }
}

/// The text block of a fleet: one line per replica.
pub fn fleet_text(f: &FleetReport, replicas: &[ReplicaReport]) -> String {
    let mut s = String::new();
    let plural = |n: u64, one: &str| if n == 1 { format!("1 {one}") } else { format!("{n} {one}s") };
    header(
        &mut s,
        &format!(" Fleet ({}, {}) ", plural(f.num_replicas as u64, "replica"), plural(f.num_gpus as u64, "GPU")),
        '=',
    );
    line(&mut s, "Router:", &f.router);
    if let Some(d) = &f.decode_router {
        line(&mut s, "Decode router:", d);
        line(&mut s, "KV transfers:", f.kv_transfers.unwrap_or_default());
        linef(&mut s, "Mean KV transfer (ms):", f.mean_kv_transfer_ms.unwrap_or_default());
        // The wait before the transfer (for a decode reservation and the links), and the wait
        // after it in the decode engine's queue: the latter is where a full decode pool shows
        // (the first had read near 0 while requests queued on the decode side for seconds).
        linef(&mut s, "Mean wait before KV transfer (ms):", f.mean_kv_transfer_wait_ms.unwrap_or_default());
        linef(&mut s, "Mean wait on the decode replica (ms):", f.mean_kv_landed_to_scheduled_ms.unwrap_or_default());
        if let Some(w) = f.mean_kv_prealloc_wait_ms {
            linef(&mut s, "Mean wait for decode pre-allocation (ms):", w);
        }
    }
    let _ = writeln!(
        s,
        "{:<12} {:<8} {:<14} {:>8} {:>7} {:>7} {:>7} {:>8} {:>8}",
        "replica", "role", "hardware", "requests", "preempt", "hit %", "KV pk %", "run mean", "wait mean"
    );
    for r in replicas {
        let hr = if r.prefix_cache_queries > 0 {
            100.0 * r.prefix_cache_hits as f64 / r.prefix_cache_queries as f64
        } else {
            0.0
        };
        let hw = if r.tensor_parallel_size > 1 {
            format!("{}x{}", r.tensor_parallel_size, r.hardware)
        } else {
            r.hardware.clone()
        };
        let _ = writeln!(
            s,
            "{:<12} {:<8} {:<14} {:>8} {:>7} {:>7.1} {:>7.1} {:>8.1} {:>8.1}",
            r.name,
            r.role,
            hw,
            r.requests,
            r.num_preemptions,
            hr,
            100.0 * r.kv_cache_usage_peak,
            r.mean_running,
            r.mean_waiting
        );
    }
    // A group of another engine or GPU has its own step costs: the report's engine, GPU and
    // step cost source above are the first group's.
    if let Some(first) = replicas.first() {
        let mut seen = vec![first.group];
        for r in replicas {
            if !seen.contains(&r.group) {
                seen.push(r.group);
                if r.cost_source != first.cost_source {
                    line(
                        &mut s,
                        &format!("Step cost source, {} ({} {}):", r.name, r.engine, r.engine_version),
                        &r.cost_source,
                    );
                }
            }
        }
        if seen.len() > 1 && replicas.iter().any(|r| r.cost_source != first.cost_source) {
            let _ = writeln!(
                s,
                "The engine, GPU and step cost source above the fleet are the first group's ({}).",
                first.name
            );
        }
    }
    header(&mut s, "", '=');
    s
}

impl PointMeta {
    /// The setup a simulated run describes.
    pub fn of(spec: &SimSpec) -> PointMeta {
        PointMeta {
            engine: spec.engine.kind().into(),
            engine_version: spec.engine.version().to_string(),
            model_id: spec.model.id.clone(),
            hardware: spec.gpu.id.clone(),
            kv_granularity: spec.engine.kv_granularity(),
            prefix_caching: spec.engine.prefix_caching(),
        }
    }

    /// The engine, typed; `None` for a live server that did not say which it is
    /// (`engine` is then `unknown`).
    pub fn kind(&self) -> Option<EngineKind> {
        EngineKind::parse(&self.engine)
    }
}

fn header(out: &mut String, title: &str, fill: char) {
    let width: usize = 50;
    let pad = width.saturating_sub(title.chars().count());
    let left = pad / 2;
    let right = pad - left;
    let _ = writeln!(out, "{}{}{}", fill.to_string().repeat(left), title, fill.to_string().repeat(right));
}

fn line(out: &mut String, label: &str, value: impl std::fmt::Display) {
    let _ = writeln!(out, "{:<40} {:<10}", label, value);
}

fn linef(out: &mut String, label: &str, v: f64) {
    if v.is_finite() {
        let _ = writeln!(out, "{:<40} {:<10.2}", label, v);
    } else {
        // Not measured, or not defined for this run (a percentile of no values): never a number.
        let _ = writeln!(out, "{:<40} {:<10}", label, "n/a");
    }
}

/// Computes the percentiles of `ps` that a report does not carry ([`crate::metrics::PERCENTILES`])
/// into `r`'s TTFT, TPOT, ITL and E2EL statistics ([`crate::metrics::Stats::extra`]), from the
/// run the report is of, for the text report (`--metric-percentiles`); the report's keys do not
/// change.
pub fn with_percentiles(r: &mut BenchReport, run: &crate::simulation::RunResult, ps: &[f64]) {
    // Each once (`--metric-percentiles 99.9,99.9`): vLLM's result is a dict, one key a
    // percentile, and a key written twice is a file servesim's own readers refuse.
    let mut extra: Vec<f64> = Vec::new();
    for &p in ps.iter().filter(|p| !crate::metrics::PERCENTILES.contains(p)) {
        if !extra.contains(&p) {
            extra.push(p);
        }
    }
    if extra.is_empty() {
        return;
    }
    let m = crate::metrics::bench_metrics_at(run, &extra);
    r.ttft.extra = m.ttft.extra;
    r.tpot.extra = m.tpot.extra;
    r.itl.extra = m.itl.extra;
    r.e2el.extra = m.e2el.extra;
}

/// Computes `r`'s `request_goodput` under the objectives `slos` from the run the report is of
/// ([`crate::metrics::bench_metrics_with`]): `vllm bench serve --goodput`.
pub fn with_goodput(r: &mut BenchReport, run: &crate::simulation::RunResult, slos: &crate::metrics::GoodputSlos) {
    r.request_goodput = crate::metrics::bench_metrics_with(run, &[], Some(slos)).request_goodput;
}

/// Which percentiles and metrics the text report shows (`--metric-percentiles`,
/// `--percentile-metrics`), and the objectives of its goodput line (`--goodput`).
#[derive(Clone, Debug)]
pub struct TextOptions {
    pub percentiles: Vec<f64>,
    pub metrics: Vec<String>,
    /// `--goodput`'s objectives: the report's `request_goodput` and its text line; none without.
    pub goodput: Option<crate::metrics::GoodputSlos>,
}

impl Default for TextOptions {
    fn default() -> Self {
        TextOptions {
            percentiles: vec![99.0],
            metrics: vec!["ttft".into(), "tpot".into(), "itl".into()],
            goodput: None,
        }
    }
}

/// The text report of a simulated run: what ran (from the spec), its report
/// ([`PointReport`]: `vllm bench serve`'s block, the engine block, a fleet's block), and
/// notes on the numbers that puzzle a first reader.
pub fn text(spec: &SimSpec, out: &SimOutput, opts: &TextOptions) -> String {
    let mut report = PointReport::of(spec, out).with_caveat_runs(spec, out);
    with_percentiles(&mut report.bench, &out.run, &opts.percentiles);
    if let Some(g) = &opts.goodput {
        with_goodput(&mut report.bench, &out.run, g);
    }
    let r = &report.bench;
    let trace = spec.workload.dataset.is_trace();
    let d = &spec.deployment;
    // Every GPU the run uses, by card (a fleet's groups may differ), the engines and how their
    // pools were sized, each once in order of appearance.
    fn distinct(items: impl Iterator<Item = String>) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for k in items {
            if !out.contains(&k) {
                out.push(k);
            }
        }
        out
    }
    let (gpus, engines, sources) = match &spec.fleet {
        Some(f) => (
            f.gpus_by_card(),
            distinct(f.replicas.iter().map(|r| format!("{} {}", r.engine.kind(), r.engine.version()))),
            distinct(f.replicas.iter().map(|r| r.kv_sizing.source.to_string())),
        ),
        None => (
            vec![(spec.gpu.id.clone(), d.num_gpus)],
            vec![format!("{} {}", spec.engine.kind(), spec.engine.version())],
            vec![spec.kv_sizing.source.to_string()],
        ),
    };
    let gpus: Vec<String> = gpus.iter().map(|(g, n)| if *n > 1 { format!("{n} x {g}") } else { g.clone() }).collect();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Scenario: {} | model {} | {} | {} | KV pool from {}",
        spec.name.as_deref().unwrap_or("(unnamed)"),
        spec.model.id,
        gpus.join(" + "),
        engines.join(" + "),
        sources.join(" or ")
    );
    if r.stop_reason != crate::simulation::StopReason::Completed.as_str() {
        // Said first, not only under the report: its counts and figures are of a cut-short run.
        let _ = writeln!(
            s,
            "WARNING: the run did not complete ({}): the {} requests counted below as failed did not finish (most were \
             never sent), and every figure is of the {} that did.",
            r.stop_reason, r.failed, r.completed
        );
    }
    s.push_str(&report_text(r, opts, "simulated", if trace { Some("trace") } else { None }));
    // Notes on the numbers a first reader asks about.
    if let crate::config::EngineSpec::Vllm(v) = &spec.engine {
        // Each engine of a fleet (data parallelism included) reserves its own null block and
        // logs its own pool.
        let per_engine = r.kv_cache_tokens.unwrap_or_default() + u64::from(v.block_size);
        if let Some(f) = spec.fleet.as_ref().filter(|f| f.replicas.len() > 1) {
            let logged: Vec<String> = f
                .replicas
                .iter()
                .map(|rep| match &rep.engine {
                    crate::config::EngineSpec::Vllm(c) => {
                        format!("{} {}", rep.name, rep.engine.kv_capacity_tokens() + u64::from(c.block_size))
                    }
                    e => format!("{} {}", rep.name, e.kv_capacity_tokens()),
                })
                .collect();
            let _ = writeln!(
                s,
                "Note: the KV cache size is the usable pool of all {} engines; each engine's start-up log prints its own pool with its null block (block 0, reserved): {} tokens.",
                f.replicas.len(),
                logged.join(", ")
            );
        } else {
            let _ = writeln!(
                s,
                "Note: the KV cache size is the usable pool: vLLM's start-up log prints it with the null block ({per_engine} tokens); block 0 is reserved."
            );
        }
    }
    if let Some(n) = spec.kv_sizing.bound_note(spec.engine.kv_capacity_tokens()) {
        let _ = writeln!(s, "Note: {n}.");
    }
    if let Some(n) = spec.engine.running_cap_note() {
        let _ = writeln!(s, "Note: {n}.");
    }
    if r.max_concurrent_requests > r.max_concurrency.map_or(u64::MAX, u64::from) {
        let _ = writeln!(
            s,
            "Note: peak concurrent requests counts, as vllm bench serve does, the requests in flight at any time within one 1-second bucket: a request that ends and the next, sent in the same second, both count."
        );
    }
    // The warm-ups (`--num-warmups`) send the first prompt again, as the test request does: the
    // same cache hit, said alike (it was said for the test request alone).
    // The warm-ups asked for (`warmups` also holds a `prior_run_*` phase's requests, said below).
    let num_warmups = spec.workload.num_warmups as usize;
    let sent_first = match (out.workload.initial_test.is_some(), num_warmups) {
        (_, 0) => "initial test request (the same prompt, sent first: vllm bench serve before 0.14, sglang.bench_serving's warm-up)".to_string(),
        (true, n) => format!("initial test request and its {n} warm-up request(s) (--num-warmups: the same prompt, sent first)"),
        (false, n) => format!("{n} warm-up request(s) (--num-warmups: the same prompt, sent first)"),
    };
    if (out.workload.initial_test.is_some() || num_warmups > 0) && r.prefix_cache_hits.is_some_and(|h| h > 0) {
        let _ = writeln!(
            s,
            "Note: prefix cache hits include the first timed prompt, which the benchmark client's {sent_first} left cached."
        );
    }
    if spec.workload.prior_run_prompts > 0 {
        let _ = writeln!(
            s,
            "Note: the run's first {} prompts were sent before it, unmeasured (prior_run_prompts: an earlier run on the same server with the same prompts); what they left in the prefix cache counts in TTFT and in the hits.",
            spec.workload.prior_run_prompts
        );
    }
    if spec.workload.prior_run_prefixes > 0 {
        let _ = writeln!(
            s,
            "Note: the shared prefixes of the run's first {} prompts were sent before it, unmeasured (prior_run_prefixes: an earlier run on the same server whose prompts began this run's); what they left in the prefix cache counts in TTFT and in the hits.",
            spec.workload.prior_run_prefixes
        );
    }
    for c in &report.caveats {
        let _ = writeln!(s, "Caveat ({}): {}", c.id, c.message);
        if let Some(d) = c.desynchronised_mean_ttft_ms {
            let _ = writeln!(s, "  {}", desynchronised_sentence(&[format!("{d:.2} ms")]));
        }
    }
    if let (Some(f), Some(replicas)) = (&report.fleet, &report.replicas) {
        s.push_str(&fleet_text(f, replicas));
    }
    // The step clock's source, as the engine block's first line.
    if let Some(at) = s.find(" Engine (").and_then(|i| s[i..].find('\n').map(|j| i + j + 1)) {
        let mut l = String::new();
        line(&mut l, "Step cost source:", &report.cost_source);
        s.insert_str(at, &l);
    }
    s
}

/// The text report of a run's report: `vllm bench serve`'s block, then the engine block
/// (`what` says whose: "simulated" or "measured").
pub fn text_report(r: &BenchReport, opts: &TextOptions, what: &str) -> String {
    report_text(r, opts, what, None)
}

/// The total-throughput line's label as the modelled `vllm bench serve` prints it: "Total Token
/// throughput" through 0.12, "Total token throughput" from 0.13.0 (read in the wheels). An
/// SGLang scenario's report takes the newer wording.
fn total_token_label(r: &BenchReport) -> &'static str {
    let old_vllm = EngineKind::parse(&r.engine) == Some(EngineKind::Vllm)
        && crate::engine::Version::parse(&r.engine_version).is_some_and(|v| v < crate::engine::Version::new(0, 13, 0));
    if old_vllm {
        "Total Token throughput (tok/s):"
    } else {
        "Total token throughput (tok/s):"
    }
}

/// [`text_report`], with the request-rate line's value given (`trace`: arrivals from a trace).
fn report_text(r: &BenchReport, opts: &TextOptions, what: &str, rate_label: Option<&str>) -> String {
    let mut s = String::new();
    header(&mut s, " Serving Benchmark Result ", '=');
    line(&mut s, "Successful requests:", r.completed);
    line(&mut s, "Failed requests:", r.failed);
    if let Some(c) = r.max_concurrency {
        line(&mut s, "Maximum request concurrency:", c);
    }
    // vllm bench serve prints the configured rate only when it is finite (`if request_rate !=
    // float("inf")`, 0.11.0-0.34.0); a trace's arrivals are servesim's own case and say so.
    match (rate_label.or(r.trace_arrivals.then_some("trace")), r.request_rate) {
        (Some(l), _) => line(&mut s, "Request rate configured (RPS):", l),
        (None, Some(rate)) => line(&mut s, "Request rate configured (RPS):", format!("{rate:.2}")),
        (None, None) => {}
    }
    linef(&mut s, "Benchmark duration (s):", r.duration);
    line(&mut s, "Total input tokens:", r.total_input_tokens);
    line(&mut s, "Total generated tokens:", r.total_output_tokens);
    linef(&mut s, "Request throughput (req/s):", r.request_throughput);
    // Only with objectives (`if goodput_config_dict:`, 0.11.0-0.34.0), right after the throughput.
    if let Some(g) = r.request_goodput {
        linef(&mut s, "Request goodput (req/s):", g);
    }
    linef(&mut s, "Output token throughput (tok/s):", r.output_throughput);
    linef(&mut s, "Peak output token throughput (tok/s):", r.max_output_tokens_per_s);
    linef(&mut s, "Peak concurrent requests:", r.max_concurrent_requests as f64);
    linef(&mut s, total_token_label(r), r.total_token_throughput);
    // vLLM prints the selected metrics in one fixed order (its `process_one_metric` calls:
    // ttft, tpot, itl, e2el), whatever order `--percentile-metrics` gives them in.
    for metric in ["ttft", "tpot", "itl", "e2el"].into_iter().filter(|m| opts.metrics.iter().any(|x| x == m)) {
        let (title, name, st) = match metric {
            "ttft" => ("Time to First Token", "TTFT", &r.ttft),
            "tpot" => ("Time per Output Token (excl. 1st token)", "TPOT", &r.tpot),
            "itl" => ("Inter-token Latency", "ITL", &r.itl),
            "e2el" => ("End-to-end Latency", "E2EL", &r.e2el),
            _ => continue,
        };
        header(&mut s, title, '-');
        linef(&mut s, &format!("Mean {name} (ms):"), st.mean);
        linef(&mut s, &format!("Median {name} (ms):"), st.median);
        for &p in &opts.percentiles {
            linef(&mut s, &format!("P{} {name} (ms):", percentile_word(p)), st.at(p).unwrap_or(f64::NAN));
        }
    }
    header(&mut s, "", '=');
    // The engine block.
    header(&mut s, &format!(" Engine ({} {}, {what}) ", r.engine, r.engine_version), '=');
    // A figure a live run could not measure is "n/a (not measured)", never a zero.
    let count = |n: Option<u64>| n.map_or_else(|| "n/a (not measured)".to_string(), |n| n.to_string());
    if EngineKind::parse(&r.engine) == Some(EngineKind::Sglang) {
        line(&mut s, "Retractions:", count(r.num_preemptions));
    } else {
        line(&mut s, "Preemptions:", count(r.num_preemptions));
    }
    match (r.prefix_cache_queries, r.prefix_cache_hits) {
        (Some(q), Some(h)) => {
            linef(&mut s, "Prefix cache hit rate (%):", if q > 0 { 100.0 * h as f64 / q as f64 } else { 0.0 })
        }
        _ => line(&mut s, "Prefix cache hit rate (%):", "n/a (not measured)"),
    }
    line(&mut s, "KV cache size (tokens):", count(r.kv_cache_tokens));
    linef(&mut s, "KV cache usage peak (%):", 100.0 * r.kv_cache_usage_peak);
    linef(&mut s, "KV cache usage mean (%):", 100.0 * r.kv_cache_usage_mean);
    line(
        &mut s,
        "KV-limited concurrency:",
        match r.kv_limited_concurrency {
            Some(c) => {
                format!("{c} (requests of {} tokens, beyond any prefix they share)", r.kv_request_footprint_tokens)
            }
            None => format!("n/a (KV cache size not known; requests of {} tokens)", r.kv_request_footprint_tokens),
        },
    );
    let gauges = |mean: f64, peak: Option<u32>| match peak {
        Some(p) if mean.is_finite() => format!("{mean:.1} / {p}"),
        _ => "n/a (not measured)".to_string(),
    };
    line(&mut s, "Running requests (mean / peak):", gauges(r.mean_running, r.peak_running));
    line(&mut s, "Waiting requests (mean / peak):", gauges(r.mean_waiting, r.peak_waiting));
    if let Some(b) = r.ttft_breakdown.as_ref().filter(|_| what == "simulated") {
        header(&mut s, "TTFT split (means)", '-');
        linef(&mut s, "Queue wait (ms):", b.mean_queue_wait_ms);
        linef(&mut s, "Prefill (ms):", b.mean_prefill_ms);
        linef(&mut s, "Interleaving delay (ms):", b.mean_interleave_ms);
        linef(&mut s, "Outside the engine (ms):", b.mean_overhead_ms);
    }
    header(&mut s, "", '=');
    if r.stop_reason != crate::simulation::StopReason::Completed.as_str() {
        let _ = writeln!(s, "WARNING: the run did not complete: {}", r.stop_reason);
    }
    s
}

#[cfg(test)]
mod tests {
    /// Percentiles are named as `vllm bench serve` names them (`str(int(p))` where whole, else
    /// Python's `str(p)`).
    #[test]
    fn percentiles_are_named_as_python_writes_them() {
        for (p, want) in [
            (99.0, "99"),
            (0.0, "0"),
            (100.0, "100"),
            (99.9, "99.9"),
            (0.5, "0.5"),
            (33.333333333333336, "33.333333333333336"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (0.000025, "2.5e-05"),
        ] {
            assert_eq!(super::percentile_word(p), want, "{p}");
        }
    }

    use super::*;

    /// The text block follows the modelled `vllm bench serve` (helper audit of the client,
    /// 2026-12-06, read in the 0.11.0-0.34.0 wheels): no rate line at an infinite rate, the
    /// total-throughput label by release, the metric sections in vLLM's fixed order.
    #[test]
    fn the_text_block_follows_the_modelled_client() {
        let (spec, out) = run("rtx5090-qwen2.5-7b-vllm");
        let mut r = PointReport::of(&spec, &out).bench;
        r.request_rate = None;
        let opts = TextOptions { percentiles: vec![99.0], metrics: vec!["e2el".into(), "ttft".into()], goodput: None };
        let t = text_report(&r, &opts, "simulated");
        assert!(!t.contains("Request rate configured"), "{t}");
        let (ttft, e2el) = (t.find("Mean TTFT").unwrap(), t.find("Mean E2EL").unwrap());
        assert!(ttft < e2el && !t.contains("TPOT"), "{t}");
        r.request_rate = Some(4.0);
        r.engine_version = "0.12.0".into();
        let t = text_report(&r, &opts, "simulated");
        assert!(t.contains("Request rate configured (RPS):           4.00"), "{t}");
        assert!(t.contains("Total Token throughput (tok/s):"), "{t}");
        r.engine_version = "0.13.0".into();
        assert!(text_report(&r, &opts, "simulated").contains("Total token throughput (tok/s):"));
    }

    /// `Request goodput (req/s):` comes right after the request throughput where objectives were
    /// given (`if goodput_config_dict:`, vLLM 0.11.0-0.34.0), and not at all without; the JSON
    /// key `request_goodput` follows `request_throughput` either way, `null` without.
    #[test]
    fn the_goodput_line_and_key_follow_vllm() {
        let (spec, out) = run("rtx5090-qwen2.5-7b-vllm");
        let plain = text(&spec, &out, &TextOptions::default());
        assert!(!plain.contains("goodput"), "{plain}");
        let mut r = PointReport::of(&spec, &out).bench;
        let json = serde_json::to_string(&r).unwrap();
        assert!(
            json.contains(r#""request_throughput":"#) && json.contains(r#""request_goodput":null,"output_throughput""#)
        );
        let slos = crate::metrics::GoodputSlos { e2el_ms: Some(1e12), ..Default::default() };
        let opts = TextOptions { goodput: Some(slos.clone()), ..TextOptions::default() };
        let t = text(&spec, &out, &opts);
        let thr = format!("Request throughput (req/s):              {:<10.2}\n", r.request_throughput);
        let good = format!("Request goodput (req/s):                 {:<10.2}\n", r.request_throughput);
        assert!(t.contains(&format!("{thr}{good}Output token throughput")), "{t}");
        with_goodput(&mut r, &out.run, &slos);
        assert_eq!(r.request_goodput, Some(r.request_throughput));
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains(&format!(r#""request_goodput":{},"output_throughput""#, r.request_throughput)), "{json}");
        // Read back as written.
        assert_eq!(serde_json::from_str::<BenchReport>(&json).unwrap().request_goodput, r.request_goodput);
    }

    /// A built-in scenario, at a few prompts, simulated.
    fn run(id: &str) -> (SimSpec, SimOutput) {
        let spec = spec_with(id, &[]);
        let out = crate::simulate(&spec, crate::simulation::RunOptions::default());
        (spec, out)
    }

    /// A built-in scenario at a few prompts with `sets` applied (path, JSON value).
    fn spec_with(id: &str, sets: &[(&str, &str, serde_json::Value)]) -> SimSpec {
        let text = crate::builtin::SCENARIOS.iter().find(|(i, _)| *i == id).expect("a built-in scenario").1;
        let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
        v["workload"]["num_prompts"] = 24.into();
        for (a, b, x) in sets {
            v[*a][*b] = x.clone();
        }
        let s = crate::config::from_value(v, "").unwrap();
        crate::config::resolve(&s, &crate::builtin::resources().unwrap()).unwrap()
    }

    /// The lock-step caveat: vLLM, a closed loop of two or more, every request of the same
    /// lengths with `ignore_eos`, sent at once, more requests than one wave. Not for SGLang
    /// (its measured waves stay in step), varying lengths, a finite rate or a single wave.
    #[test]
    fn the_lockstep_caveat_is_given_where_its_shape_holds_and_only_there() {
        let has = |spec: &SimSpec| {
            let w = crate::workload::generate(&spec.workload);
            caveats(spec, &w).iter().any(|c| c.id == LOCKSTEP_WAVES)
        };
        let c8 = ("workload", "max_concurrency", 8.into());
        let fixed = ("workload", "random_range_ratio", 0.0.into());
        assert!(has(&spec_with("rtx5090-qwen2.5-7b-vllm", &[c8.clone(), fixed.clone()])));
        assert!(!has(&spec_with("rtx5090-qwen2.5-7b-sglang", &[c8.clone(), fixed.clone()])));
        assert!(!has(&spec_with(
            "rtx5090-qwen2.5-7b-vllm",
            &[c8.clone(), ("workload", "random_range_ratio", 0.5.into())]
        )));
        assert!(!has(&spec_with(
            "rtx5090-qwen2.5-7b-vllm",
            &[c8.clone(), fixed.clone(), ("workload", "request_rate", 4.0.into())]
        )));
        assert!(!has(&spec_with(
            "rtx5090-qwen2.5-7b-vllm",
            &[("workload", "max_concurrency", 1.into()), fixed.clone()]
        )));
        assert!(!has(&spec_with("rtx5090-qwen2.5-7b-vllm", &[("workload", "max_concurrency", 24.into()), fixed])));
        // The report carries it (JSON key `caveats`) and the text prints it.
        let spec = spec_with("rtx5090-qwen2.5-7b-vllm", &[c8, ("workload", "random_range_ratio", 0.0.into())]);
        let out = crate::simulate(&spec, crate::simulation::RunOptions::default());
        let v = serde_json::to_value(PointReport::of(&spec, &out).with_caveat_runs(&spec, &out)).unwrap();
        assert_eq!(v["caveats"][0]["id"], LOCKSTEP_WAVES);
        assert!(text(&spec, &out, &TextOptions::default()).contains("Caveat (lockstep_waves)"));
        // The other end of the range: the same loop out of step. With 4,096-token prompts eight
        // in lock-step share each wave's prefill; spread out, a request mostly meets the others
        // mid-decode, so its TTFT is lower (and still at least one lone prefill).
        let desync = v["caveats"][0]["desynchronised_mean_ttft_ms"].as_f64().expect("the desynchronised figure");
        let lone = {
            let one = spec_with("rtx5090-qwen2.5-7b-vllm", &[("workload", "max_concurrency", 1.into())]);
            crate::simulate(&one, crate::simulation::RunOptions::default()).metrics.ttft.mean
        };
        assert!(desync < out.metrics.ttft.mean && desync >= lone, "{lone} <= {desync} < {}", out.metrics.ttft.mean);
        assert!(text(&spec, &out, &TextOptions::default()).contains("With the clients out of step"));
    }

    /// A dense model no published run judged says so, and where its size lies against the judged
    /// ones; a judged card, a MoE card (its own caveat) and a calibrated run do not.
    #[test]
    fn an_unjudged_dense_model_is_named_with_where_its_size_lies() {
        let unjudged = |spec: &SimSpec| unjudged_model(spec).map(|c| c.message);
        let mut spec = spec_with("rtx5090-qwen2.5-7b-vllm", &[]);
        assert_eq!(unjudged(&spec), None, "qwen2.5-7b-instruct is judged");
        let card = |id: &str| crate::builtin::models().unwrap().into_iter().find(|m| m.id == id).unwrap();
        spec.model = card("llama-3.2-3b-instruct");
        let small = unjudged(&spec).expect("llama-3.2-3b-instruct has no published run");
        assert!(
            small.contains("no published run of llama-3.2-3b-instruct") && small.contains("smaller than any judged"),
            "{small}"
        );
        spec.model = card("qwen3-4b");
        assert_eq!(unjudged(&spec), None, "qwen3-4b is judged (two RTX 5090 sets)");
        spec.model = card("qwen2.5-72b-instruct");
        assert!(unjudged(&spec).unwrap().contains("just outside the judged models'"));
        spec.model = card("mistral-7b-instruct-v0.3");
        assert!(unjudged(&spec).unwrap().contains("within the judged models'"));
        spec.model = card("qwen2.5-14b-instruct");
        assert!(unjudged(&spec).unwrap().contains("within the judged models'"));
        spec.model.num_parameters *= 6;
        assert!(unjudged(&spec).unwrap().contains("larger than any judged dense model"));
        // An inline card under a judged id but another model's size is not that model.
        spec.model = card("qwen3-8b");
        assert_eq!(unjudged(&spec), None);
        spec.model.num_parameters += 1;
        assert!(unjudged(&spec).is_some());
        // A calibrated cost is not what the message describes.
        spec.model = card("llama-3.2-3b-instruct");
        assert!(unjudged(&spec).is_some());
        spec.cost.reference = Some([1.0; 6]);
        assert_eq!(unjudged(&spec), None);
    }

    /// A GPU and engine no published run judged say so, naming the pair and where that engine
    /// is judged; a judged pair, an inline card under a judged id with other figures (unjudged),
    /// WSL2's memory figure (still the judged card) and a calibrated run are told apart.
    #[test]
    fn an_unjudged_gpu_and_engine_is_named() {
        let unjudged = |spec: &SimSpec| unjudged_gpu(spec).map(|c| c.message);
        let wsl2 = spec_with("rtx5090-qwen2.5-7b-vllm", &[]);
        assert_eq!(unjudged(&wsl2), None, "the default scenario: vLLM on the RTX 5090 is judged (under WSL2)");
        let sglang = unjudged(&spec_with("rtx5090-qwen2.5-7b-sglang", &[])).expect("SGLang on an RTX 5090 is not");
        assert!(sglang.contains("no published run on rtx-5090 with SGLang"), "{sglang}");
        assert!(sglang.contains("Judged: SGLang on a100-40gb, a100-80gb, h100-80gb, h200."), "{sglang}");
        let pro = spec_with("rtx5090-qwen2.5-7b-vllm", &[("hardware", "gpu", "h100-pcie".into())]);
        let m = unjudged(&pro).expect("nothing measured on an H100 PCIe is in the corpus");
        assert!(m.contains("no published run on h100-pcie with vLLM") && m.contains("vLLM on a100-80gb, b200"), "{m}");
        let judged = spec_with("rtx5090-qwen2.5-7b-vllm", &[("hardware", "gpu", "rtx-pro-6000".into())]);
        assert_eq!(unjudged(&judged), None, "vLLM on the RTX PRO 6000 is judged (LLMServingSim's runs)");
        let mut h100 = spec_with("rtx5090-qwen2.5-7b-vllm", &[("hardware", "gpu", "h100-80gb".into())]);
        assert_eq!(unjudged(&h100), None);
        // Another GPU under a judged card's id.
        h100.gpu.memory_bandwidth_bytes_per_s *= 1.5;
        assert!(unjudged(&h100).unwrap().contains("no published run on h100-80gb with vLLM"));
        // A calibrated cost is not what the message describes.
        let mut pro = pro;
        pro.cost.reference = Some([1.0; 6]);
        assert_eq!(unjudged(&pro), None);
        // Both lists hold pairs once, in order.
        assert!(JUDGED_GPU_ENGINES.windows(2).all(|w| (w[0].0, w[0].1.as_str()) != (w[1].0, w[1].1.as_str())));
    }

    /// The linear roofline prior timing every step with nothing fitted is said: the `cpu-host`
    /// card (its figures orders of magnitude) and a scenario's `cost.prior`; not the measured
    /// kernels, not a run whose step coefficients are given inline or fitted.
    #[test]
    fn the_linear_prior_is_said_where_it_times_the_steps_unfitted() {
        let said = |spec: &SimSpec| linear_prior(spec).map(|c| c.message);
        assert_eq!(said(&spec_with("rtx5090-qwen2.5-7b-vllm", &[])), None, "measured kernels time the default");
        let cpu = spec_with(
            "rtx5090-qwen2.5-7b-vllm",
            &[
                ("hardware", "gpu", "cpu-host".into()),
                ("hardware", "host", "linux".into()),
                ("engine", "kv_cache_tokens", 65536.into()),
            ],
        );
        let m = said(&cpu).expect("the cpu-host card's steps are the linear prior's");
        assert!(m.contains("the steps on cpu-host are timed by the linear roofline prior"), "{m}");
        assert!(m.contains("orders of magnitude") && m.contains("servesim calibrate"), "{m}");
        let prior = spec_with("rtx5090-qwen2.5-7b-vllm", &[("cost", "prior", serde_json::json!({}))]);
        let m = said(&prior).expect("cost.prior selects the linear prior");
        assert!(m.contains("on rtx-5090") && !m.contains("orders of magnitude"), "{m}");
        // Every step coefficient given inline: the scenario's model, not the prior's.
        let coefficients = serde_json::json!({"step_us": 1000, "per_seq_us": 4, "prefill_token_us": 30,
            "decode_token_us": 100, "prefill_attention_us": 0.001, "decode_kv_us": 0.5});
        let inline = spec_with(
            "rtx5090-qwen2.5-7b-vllm",
            &[
                ("hardware", "gpu", "cpu-host".into()),
                ("hardware", "host", "linux".into()),
                ("engine", "kv_cache_tokens", 65536.into()),
                ("cost", "coefficients", coefficients),
            ],
        );
        assert_eq!(said(&inline), None);
    }

    /// Tensor parallelism over PCIe on the custom all-reduce says that its all-reduces are one
    /// machine's table: TP 2 on an RTX PRO 6000 (PCIe), not TP 1 or 4 there, not on NCCL, not TP 2
    /// on an H100 SXM (NVLink), not a calibrated run.
    #[test]
    fn tensor_parallelism_over_pcie_is_said() {
        let said = |spec: &SimSpec| pcie_tensor_parallel(spec).map(|c| c.message);
        let tp = |gpu: &str, n: u32| {
            spec_with(
                "rtx5090-qwen2.5-7b-vllm",
                &[
                    ("hardware", "gpu", gpu.into()),
                    ("hardware", "count", n.into()),
                    ("engine", "tensor_parallel_size", n.into()),
                    ("engine", "kv_cache_tokens", serde_json::Value::Null),
                ],
            )
        };
        let m = said(&tp("rtx-pro-6000", 2)).expect("TP 2 over PCIe");
        assert!(
            m.contains("tensor parallelism over two PCIe GPUs") && m.contains("disable_custom_all_reduce: true"),
            "{m}"
        );
        let nccl = spec_with(
            "rtx5090-qwen2.5-7b-vllm",
            &[
                ("hardware", "gpu", "rtx-pro-6000".into()),
                ("hardware", "count", 2.into()),
                ("engine", "tensor_parallel_size", 2.into()),
                ("engine", "kv_cache_tokens", serde_json::Value::Null),
                ("engine", "disable_custom_all_reduce", true.into()),
            ],
        );
        assert_eq!(said(&nccl), None, "NCCL's all-reduce: the kernel the caveat is about is not run");
        assert_eq!(said(&tp("rtx-pro-6000", 1)), None);
        assert_eq!(said(&tp("rtx-pro-6000", 4)), None, "past two PCIe GPUs vLLM runs NCCL anyway");
        assert_eq!(said(&tp("h100-80gb", 2)), None);
        let mut calibrated = tp("rtx-pro-6000", 2);
        calibrated.cost.reference = Some([1.0; 6]);
        assert_eq!(said(&calibrated), None);
        // A fleet's replica on an inline card of its own id: its own card's link (the lookup by id
        // among the built-in cards missed it until 2026-12-07), and an inline card of a built-in
        // id patched to NVLink is that card, not the built-in one.
        let fleet = |card: serde_json::Value| {
            let mut v: serde_json::Value = serde_json::from_str(crate::builtin::SCENARIOS[0].1).unwrap();
            v["engine"]["kv_cache_tokens"] = serde_json::Value::Null;
            v["fleet"] = serde_json::json!({"replicas": [{"count": 1},
                {"count": 1, "hardware": {"gpu": card, "count": 2}, "engine": {"tensor_parallel_size": 2}}]});
            let s = crate::config::scenario_from_value(v).unwrap();
            crate::config::resolve(&s, &crate::builtin::resources().unwrap()).unwrap()
        };
        let mut mine = serde_json::to_value(crate::builtin::gpu("rtx-pro-6000").unwrap()).unwrap();
        mine["id"] = "my-pro-6000".into();
        assert!(said(&fleet(mine)).is_some(), "an inline PCIe card of its own id");
        let mut bridged = serde_json::to_value(crate::builtin::gpu("rtx-pro-6000").unwrap()).unwrap();
        bridged["interconnect"] = "nvlink".into();
        assert_eq!(said(&fleet(bridged)), None, "the inline card's own link");
        assert!(said(&fleet("rtx-pro-6000".into())).is_some());
    }

    /// TP on a card without peer access (the RTX 5090 and RTX 4090 under the stock driver): the
    /// engines' NCCL fallback is what the run times (the cost source says why), the caveat says
    /// its tables had peer access, and the custom kernel's caveat does not fire; an inline card
    /// patched for peer access runs the custom kernel again; TP 1 says nothing.
    #[test]
    fn tensor_parallelism_without_peer_access_runs_nccl_and_says_so() {
        let tp = |gpu: serde_json::Value, n: u32, kind: &str| {
            let (id, tp_key) = if kind == "vllm" {
                ("rtx5090-qwen2.5-7b-vllm", "tensor_parallel_size")
            } else {
                ("rtx5090-qwen2.5-7b-sglang", "tp_size")
            };
            let pin = if kind == "vllm" { "kv_cache_tokens" } else { "max_total_num_tokens" };
            spec_with(
                id,
                &[
                    ("hardware", "gpu", gpu),
                    ("hardware", "count", n.into()),
                    ("engine", tp_key, n.into()),
                    ("engine", pin, serde_json::Value::Null),
                ],
            )
        };
        let on_nccl = |s: &SimSpec| s.cost.composed.as_ref().is_some_and(|k| k.all_reduce_on_nccl());
        for kind in ["vllm", "sglang"] {
            for gpu in ["rtx-5090", "rtx-4090"] {
                let s = tp(gpu.into(), 2, kind);
                assert!(on_nccl(&s), "{kind} {gpu}");
                let source = &s.cost.composed.as_ref().unwrap().source;
                assert!(source.contains("has no peer-to-peer access"), "{source}");
                let m = no_peer_to_peer(&s).expect("said").message;
                assert!(m.contains(gpu) && m.contains("measured with peer-to-peer"), "{m}");
                assert_eq!(pcie_tensor_parallel(&s), None, "{kind} {gpu}: the custom kernel does not run");
                assert_eq!(no_peer_to_peer(&tp(gpu.into(), 1, kind)), None);
            }
        }
        // The same card with a driver patched for peer access.
        let mut card = serde_json::to_value(crate::builtin::gpu("rtx-5090").unwrap()).unwrap();
        card["peer_to_peer"] = true.into();
        let s = tp(card, 2, "vllm");
        assert!(!on_nccl(&s));
        assert_eq!(no_peer_to_peer(&s), None);
        assert!(pcie_tensor_parallel(&s).is_some());
        // A data-centre PCIe card has peer access: the custom kernel, as before.
        assert_eq!(no_peer_to_peer(&tp("rtx-pro-6000".into(), 2, "vllm")), None);
        // An inline card of its own id without peer access is said by its id; vLLM's flag on such a
        // card changes nothing of it (NCCL copies through host memory either way).
        let mut mine = serde_json::to_value(crate::builtin::gpu("rtx-5090").unwrap()).unwrap();
        mine["id"] = "my-5090".into();
        let m = no_peer_to_peer(&tp(mine.clone(), 2, "vllm")).expect("said").message;
        assert!(m.contains("my-5090"), "{m}");
        let flagged = spec_with(
            "rtx5090-qwen2.5-7b-vllm",
            &[
                ("hardware", "count", 2.into()),
                ("engine", "tensor_parallel_size", 2.into()),
                ("engine", "kv_cache_tokens", serde_json::Value::Null),
                ("engine", "disable_custom_all_reduce", true.into()),
            ],
        );
        assert!(no_peer_to_peer(&flagged).is_some());
        // The linear prior times the all-reduce by the link's roofline, not NCCL's table: nothing said.
        let prior = spec_with(
            "rtx5090-qwen2.5-7b-vllm",
            &[
                ("hardware", "count", 2.into()),
                ("engine", "tensor_parallel_size", 2.into()),
                ("engine", "kv_cache_tokens", serde_json::Value::Null),
                ("cost", "prior", serde_json::json!({})),
            ],
        );
        assert_eq!(no_peer_to_peer(&prior), None);
    }

    /// Every metric is written under its key, in [`Metric::ALL`]'s order, with the value
    /// [`Metrics::metric`] reads; and a report reads back as it was written.
    #[test]
    fn metrics_are_the_report_keys_and_a_report_round_trips() {
        for id in ["rtx5090-qwen2.5-7b-vllm", "rtx5090-qwen2.5-7b-sglang"] {
            let (spec, out) = run(id);
            let r = BenchReport::of(&PointMeta::of(&spec), &out.workload, &out.metrics, &out.run);
            let v = serde_json::to_value(&r).unwrap();
            let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
            let numbers: Vec<&str> = keys.iter().copied().filter(|k| Metric::parse(k).is_some()).collect();
            let expected: Vec<&str> = Metric::ALL
                .iter()
                .filter(|m| **m != Metric::NumRetractions || r.num_retractions.is_some())
                .map(|m| m.key())
                .collect();
            assert_eq!(numbers, expected, "{id}");
            for &m in Metric::ALL {
                assert_eq!(v.get(m.key()).and_then(serde_json::Value::as_f64), r.metric(m), "{id}: {m}");
            }
            // (Through a `Value`: serde_json's text parser may round a float's last bit.)
            let back: BenchReport = serde_json::from_value(v).unwrap();
            assert_eq!(back, r, "{id}");
        }
    }
}
