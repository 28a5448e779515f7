//! Reports: the `--save-result` JSON keys of `vllm bench serve` plus the
//! engine's view, and the text layout of its "Serving Benchmark Result".
//!
//! **API boundary:** the key names here are a contract that scripts and
//! notebooks depend on. Add keys; never rename or remove one.

use serde_json::{Map, Value};
use std::fmt::Write as _;

use crate::config::{EngineKind, SimSpec};
use crate::metrics::{put_stats, Stats, PERCENTILES};
use crate::sweep::KvLimit;
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
}

/// The report of one simulated run, as a JSON object with ordered keys.
pub fn point_json(spec: &SimSpec, out: &SimOutput) -> Map<String, Value> {
    let mut j = bench_json(&PointMeta::of(spec), &out.workload, &out.metrics, &out.run);
    // Which model timed the steps: measured kernel tables, a fallback, or the linear model.
    j.insert("cost_source".into(), spec.cost.source().into());
    if let Some(f) = &out.fleet {
        j.insert("fleet".into(), fleet_json(f));
        j.insert("replicas".into(), Value::Array(f.replicas.iter().map(replica_json).collect()));
    }
    j
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
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mean_kv_transfer_wait_ms: Option<f64>,
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
        }
    }
}

/// The fleet's own figures as JSON (`fleet` key of a fleet's report).
pub fn fleet_json(f: &crate::fleet::FleetRun) -> Value {
    serde_json::to_value(FleetReport::of(f)).expect("a fleet report serializes")
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
            prefix_cache_hit_rate: if c.prefix_cache_queries > 0 {
                c.prefix_cache_hits as f64 / c.prefix_cache_queries as f64
            } else {
                0.0
            },
            prefill_tokens_computed: c.prefill_tokens_computed,
            kv_cache_tokens: r.kv_capacity_tokens,
            kv_cache_usage_peak: r.gauges.kv_usage_peak,
            kv_cache_usage_mean: r.gauges.kv_usage_mean,
            mean_running: r.gauges.running_mean,
            peak_running: r.gauges.running_peak,
            mean_waiting: r.gauges.waiting_mean,
            peak_waiting: r.gauges.waiting_peak,
            num_steps: r.num_steps,
        }
    }
}

/// One replica's engine block as JSON.
pub fn replica_json(r: &crate::fleet::ReplicaRun) -> Value {
    serde_json::to_value(ReplicaReport::of(r)).expect("a replica report serializes")
}

/// The text block of a fleet: one line per replica.
pub fn fleet_text(f: &crate::fleet::FleetRun) -> String {
    let mut s = String::new();
    header(&mut s, &format!(" Fleet ({} replicas, {} GPUs) ", f.replicas.len(), f.num_gpus), '=');
    line(&mut s, "Router:", &f.router);
    if let Some(d) = &f.decode_router {
        line(&mut s, "Decode router:", d);
        line(&mut s, "KV transfers:", f.kv_transfers);
        linef(&mut s, "Mean KV transfer (ms):", f.mean_kv_transfer_ms);
        linef(&mut s, "Mean wait for decode KV (ms):", f.mean_kv_transfer_wait_ms);
    }
    let _ = writeln!(
        s,
        "{:<12} {:<8} {:<14} {:>8} {:>7} {:>7} {:>7} {:>8} {:>8}",
        "replica", "role", "hardware", "requests", "preempt", "hit %", "KV pk %", "run mean", "wait mean"
    );
    for r in &f.replicas {
        let c = &r.counters;
        let hr = if c.prefix_cache_queries > 0 {
            100.0 * c.prefix_cache_hits as f64 / c.prefix_cache_queries as f64
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
            r.role.as_str(),
            hw,
            r.requests,
            c.num_preemptions,
            hr,
            100.0 * r.gauges.kv_usage_peak,
            r.gauges.running_mean,
            r.gauges.waiting_mean
        );
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
        }
    }

    /// The engine, typed; `None` for a live server that did not say which it is
    /// (`engine` is then `unknown`).
    pub fn kind(&self) -> Option<EngineKind> {
        EngineKind::parse(&self.engine)
    }
}

/// The report of a run, simulated or measured: the same keys either way.
pub fn bench_json(
    meta: &PointMeta,
    w: &crate::workload::Workload,
    m: &crate::metrics::BenchMetrics,
    run: &crate::simulation::RunResult,
) -> Map<String, Value> {
    let limit = crate::sweep::kv_limit(run.kv_capacity_tokens, meta.kv_granularity, w);
    let mut j = Map::new();
    j.insert("engine".into(), meta.engine.clone().into());
    j.insert("engine_version".into(), meta.engine_version.clone().into());
    j.insert("model_id".into(), meta.model_id.clone().into());
    j.insert("hardware".into(), meta.hardware.clone().into());
    j.insert("num_prompts".into(), (w.requests.len() as u64).into());
    j.insert(
        "request_rate".into(),
        match w.request_rate {
            Some(r) => r.into(),
            None => "inf".into(),
        },
    );
    j.insert("burstiness".into(), w.burstiness.into());
    j.insert("max_concurrency".into(), w.max_concurrency.map(Value::from).unwrap_or(Value::Null));
    j.insert("duration".into(), m.duration_s.into());
    j.insert("completed".into(), m.completed.into());
    j.insert("failed".into(), m.failed.into());
    j.insert("total_input_tokens".into(), m.total_input_tokens.into());
    j.insert("total_output_tokens".into(), m.total_output_tokens.into());
    j.insert("request_throughput".into(), m.request_throughput.into());
    j.insert("output_throughput".into(), m.output_throughput.into());
    j.insert("total_token_throughput".into(), m.total_token_throughput.into());
    j.insert("max_output_tokens_per_s".into(), m.max_output_tokens_per_s.into());
    j.insert("max_concurrent_requests".into(), m.max_concurrent_requests.into());
    put_stats(&mut j, "ttft", &m.ttft);
    put_stats(&mut j, "tpot", &m.tpot);
    put_stats(&mut j, "itl", &m.itl);
    put_stats(&mut j, "e2el", &m.e2el);
    // The engine's view.
    let c = &run.counters;
    j.insert("num_preemptions".into(), c.num_preemptions.into());
    if meta.kind() == Some(EngineKind::Sglang) {
        j.insert("num_retractions".into(), c.num_preemptions.into());
    }
    j.insert("prefix_cache_queries".into(), c.prefix_cache_queries.into());
    j.insert("prefix_cache_hits".into(), c.prefix_cache_hits.into());
    let hit_rate =
        if c.prefix_cache_queries > 0 { c.prefix_cache_hits as f64 / c.prefix_cache_queries as f64 } else { 0.0 };
    j.insert("prefix_cache_hit_rate".into(), hit_rate.into());
    j.insert("kv_cache_tokens".into(), run.kv_capacity_tokens.into());
    j.insert("kv_cache_usage_peak".into(), run.gauges.kv_usage_peak.into());
    j.insert("kv_cache_usage_mean".into(), run.gauges.kv_usage_mean.into());
    j.insert("mean_running".into(), run.gauges.running_mean.into());
    j.insert("peak_running".into(), run.gauges.running_peak.into());
    j.insert("mean_waiting".into(), run.gauges.waiting_mean.into());
    j.insert("peak_waiting".into(), run.gauges.waiting_peak.into());
    j.insert("kv_limited_concurrency".into(), limit.concurrency.into());
    j.insert("kv_request_footprint_tokens".into(), limit.footprint_tokens.into());
    let b = &m.ttft_breakdown;
    let mut bd = Map::new();
    bd.insert("mean_queue_wait_ms".into(), b.queue_wait_ms.into());
    bd.insert("mean_prefill_ms".into(), b.prefill_ms.into());
    bd.insert("mean_interleave_ms".into(), b.interleave_ms.into());
    bd.insert("mean_overhead_ms".into(), b.overhead_ms.into());
    j.insert("ttft_breakdown".into(), Value::Object(bd));
    j.insert("num_steps".into(), run.num_steps.into());
    j.insert("stop_reason".into(), run.stop.as_str().into());
    j.insert("seed".into(), w.seed.into());
    j
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
    let _ = writeln!(out, "{:<40} {:<10.2}", label, v);
}

/// Which percentiles and metrics the text report shows (`--metric-percentiles`,
/// `--percentile-metrics`).
#[derive(Clone, Debug)]
pub struct TextOptions {
    pub percentiles: Vec<f64>,
    pub metrics: Vec<String>,
}

impl Default for TextOptions {
    fn default() -> Self {
        TextOptions { percentiles: vec![99.0], metrics: vec!["ttft".into(), "tpot".into(), "itl".into()] }
    }
}

fn pct_value(s: &Stats, sorted_fallback: f64, p: f64) -> f64 {
    PERCENTILES.iter().position(|&q| q == p).map(|i| s.percentiles[i]).unwrap_or(sorted_fallback)
}

/// The text report of a simulated run: what ran, `vllm bench serve`'s block, the
/// engine block, and notes on the numbers that puzzle a first reader.
pub fn text(spec: &SimSpec, out: &SimOutput, opts: &TextOptions) -> String {
    let trace = matches!(
        spec.workload.dataset,
        crate::workload::Dataset::Trace { .. } | crate::workload::Dataset::Requests { .. }
    );
    let d = &spec.deployment;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "Scenario: {} | model {} | {}{} | {} {} | KV pool from {}",
        spec.name.as_deref().unwrap_or("(unnamed)"),
        spec.model.id,
        if d.num_gpus > 1 { format!("{} x ", d.num_gpus) } else { String::new() },
        spec.gpu.id,
        spec.engine.kind(),
        spec.engine.version(),
        spec.kv_sizing.source
    );
    s.push_str(&text_report_with(
        &PointMeta::of(spec),
        &out.workload,
        &out.metrics,
        &out.run,
        opts,
        "simulated",
        if trace { Some("trace") } else { None },
    ));
    // Notes on the numbers a first reader asks about.
    let c = &out.run.counters;
    if let crate::config::EngineSpec::Vllm(v) = &spec.engine {
        let _ = writeln!(
            s,
            "Note: the KV cache size is the usable pool: vLLM's start-up log prints it with the null block ({} tokens); block 0 is reserved.",
            out.run.kv_capacity_tokens + u64::from(v.block_size)
        );
    }
    if out.metrics.max_concurrent_requests > out.workload.max_concurrency.map_or(u64::MAX, u64::from) {
        let _ = writeln!(
            s,
            "Note: peak concurrent requests counts, as vllm bench serve does, the requests in flight at any time within one 1-second bucket: a request that ends and the next, sent in the same second, both count."
        );
    }
    if out.workload.initial_test.is_some() && c.prefix_cache_hits > 0 {
        let _ = writeln!(
            s,
            "Note: prefix cache hits include the first timed prompt, which the initial test request (the same prompt, sent first as vllm bench serve before 0.14 does) left cached."
        );
    }
    if let Some(f) = &out.fleet {
        s.push_str(&fleet_text(f));
    }
    // The step clock's source, as the engine block's first line.
    if let Some(at) = s.find(" Engine (").and_then(|i| s[i..].find('\n').map(|j| i + j + 1)) {
        let mut l = String::new();
        line(&mut l, "Step cost source:", spec.cost.source());
        s.insert_str(at, &l);
    }
    s
}

/// The text report: `vllm bench serve`'s block, then the engine block
/// (`what` says whose: "simulated" or "measured").
pub fn text_report(
    meta: &PointMeta,
    w: &crate::workload::Workload,
    m: &crate::metrics::BenchMetrics,
    run: &crate::simulation::RunResult,
    opts: &TextOptions,
    what: &str,
) -> String {
    text_report_with(meta, w, m, run, opts, what, None)
}

/// [`text_report`], with the request-rate line's value given (`trace`: arrivals from a trace).
fn text_report_with(
    meta: &PointMeta,
    w: &crate::workload::Workload,
    m: &crate::metrics::BenchMetrics,
    run: &crate::simulation::RunResult,
    opts: &TextOptions,
    what: &str,
    rate_label: Option<&str>,
) -> String {
    let mut s = String::new();
    header(&mut s, " Serving Benchmark Result ", '=');
    line(&mut s, "Successful requests:", m.completed);
    line(&mut s, "Failed requests:", m.failed);
    if let Some(c) = w.max_concurrency {
        line(&mut s, "Maximum request concurrency:", c);
    }
    match (rate_label, w.request_rate) {
        (Some(l), _) => line(&mut s, "Request rate configured (RPS):", l),
        (None, Some(r)) => line(&mut s, "Request rate configured (RPS):", format!("{r:.2}")),
        (None, None) => line(&mut s, "Request rate configured (RPS):", "inf"),
    }
    linef(&mut s, "Benchmark duration (s):", m.duration_s);
    line(&mut s, "Total input tokens:", m.total_input_tokens);
    line(&mut s, "Total generated tokens:", m.total_output_tokens);
    linef(&mut s, "Request throughput (req/s):", m.request_throughput);
    linef(&mut s, "Output token throughput (tok/s):", m.output_throughput);
    linef(&mut s, "Peak output token throughput (tok/s):", m.max_output_tokens_per_s);
    linef(&mut s, "Peak concurrent requests:", m.max_concurrent_requests as f64);
    linef(&mut s, "Total Token throughput (tok/s):", m.total_token_throughput);
    for metric in &opts.metrics {
        let (title, name, st) = match metric.as_str() {
            "ttft" => ("Time to First Token", "TTFT", &m.ttft),
            "tpot" => ("Time per Output Token (excl. 1st token)", "TPOT", &m.tpot),
            "itl" => ("Inter-token Latency", "ITL", &m.itl),
            "e2el" => ("End-to-end Latency", "E2EL", &m.e2el),
            _ => continue,
        };
        header(&mut s, title, '-');
        linef(&mut s, &format!("Mean {name} (ms):"), st.mean);
        linef(&mut s, &format!("Median {name} (ms):"), st.median);
        for &p in &opts.percentiles {
            let label = if p.fract() == 0.0 { format!("{}", p as u32) } else { format!("{p}") };
            linef(&mut s, &format!("P{label} {name} (ms):"), pct_value(st, f64::NAN, p));
        }
    }
    header(&mut s, "", '=');
    // The engine block.
    let limit: KvLimit = crate::sweep::kv_limit(run.kv_capacity_tokens, meta.kv_granularity, w);
    let c = &run.counters;
    header(&mut s, &format!(" Engine ({} {}, {what}) ", meta.engine, meta.engine_version), '=');
    if meta.kind() == Some(EngineKind::Sglang) {
        line(&mut s, "Retractions:", c.num_preemptions);
    } else {
        line(&mut s, "Preemptions:", c.num_preemptions);
    }
    let hr = if c.prefix_cache_queries > 0 {
        100.0 * c.prefix_cache_hits as f64 / c.prefix_cache_queries as f64
    } else {
        0.0
    };
    linef(&mut s, "Prefix cache hit rate (%):", hr);
    line(&mut s, "KV cache size (tokens):", run.kv_capacity_tokens);
    linef(&mut s, "KV cache usage peak (%):", 100.0 * run.gauges.kv_usage_peak);
    linef(&mut s, "KV cache usage mean (%):", 100.0 * run.gauges.kv_usage_mean);
    line(
        &mut s,
        "KV-limited concurrency:",
        format!("{} (requests of {} tokens)", limit.concurrency, limit.footprint_tokens),
    );
    line(
        &mut s,
        "Running requests (mean / peak):",
        format!("{:.1} / {}", run.gauges.running_mean, run.gauges.running_peak),
    );
    line(
        &mut s,
        "Waiting requests (mean / peak):",
        format!("{:.1} / {}", run.gauges.waiting_mean, run.gauges.waiting_peak),
    );
    if what == "simulated" {
        header(&mut s, "TTFT split (means)", '-');
        let b = &m.ttft_breakdown;
        linef(&mut s, "Queue wait (ms):", b.queue_wait_ms);
        linef(&mut s, "Prefill (ms):", b.prefill_ms);
        linef(&mut s, "Interleaving delay (ms):", b.interleave_ms);
        linef(&mut s, "Outside the engine (ms):", b.overhead_ms);
    }
    header(&mut s, "", '=');
    if run.stop != crate::simulation::StopReason::Completed {
        let _ = writeln!(s, "WARNING: the run did not complete: {}", run.stop.as_str());
    }
    s
}
