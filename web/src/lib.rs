//! # servesim in the browser
//!
//! The simulator core (`sim`) compiled to `wasm32-unknown-unknown` behind a
//! small C ABI of JSON-in / text-out functions (no wasm-bindgen: the page's
//! hand-written glue, `web/servesim.js`, copies a request into the module's
//! memory, calls an export, and reads the answer back).
//!
//! Each function takes one request object (JSON text):
//!
//! ```json
//! {"scenario": "<scenario JSON text, or absent for the built-in default>",
//!  "origin": "scenarios/rtx5090-qwen2.5-7b-vllm.json",
//!  "sets": ["engine.max_num_seqs=64"], "seed": null,
//!  "concurrencies": [1, 16, 64], "num_prompts": [20, 64, 256],
//!  "concurrency": 64, "timeseries": true}
//! ```
//!
//! and answers what the native binary prints on stdout for the same input,
//! byte for byte: [`simulate`] is `servesim simulate --json`, [`sweep`] is
//! `servesim sweep --json` (with `engine.kind=vllm,sglang` among the sets, the
//! engines side by side), [`explain`] is `servesim explain --json`; errors are
//! what the binary prints after `error: `. They reuse the library functions
//! the binary uses (`sim::config`, `sim::simulate`, `sim::report`,
//! `sim::sweep`, and the binary's own flag alignment, `cli/align.rs`).
//!
//! The sweep's side-by-side assembly still lives in the binary
//! (`cli/sweep.rs`); `sweep_json` follows it, held byte-identical by the
//! browser test (`tests/web.rs`).
//!
//! Nothing here reads a file: a scenario naming a fitted profile
//! (`cost.profile`) or a trace file (`workload.trace`) is an error naming the
//! field.

use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sim::config::{self, Resources, Scenario, SimSpec};
use sim::simulation::{GaugeSample, RunOptions};
use sim::workload::Dataset;

#[path = "../../cli/align.rs"]
#[allow(dead_code)]
mod align;
mod sweep_json;

#[cfg(target_arch = "wasm32")]
mod abi;

/// The label the binary gives its built-in default scenario.
pub const DEFAULT_ORIGIN: &str = "scenarios/rtx5090-qwen2.5-7b-vllm.json (built in)";

/// One call's input.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Request {
    /// The scenario's JSON text; the built-in default when absent.
    #[serde(default)]
    pub scenario: Option<String>,
    /// Where it came from, for messages and the `scenario` key of a sweep.
    #[serde(default)]
    pub origin: Option<String>,
    /// `--set PATH=VALUE` overrides, in order.
    #[serde(default)]
    pub sets: Vec<String>,
    /// `--seed`: a whole number, or its decimal text (the page sends text: a JavaScript number
    /// is exact only up to 2^53, a seed goes to 2^64 - 1).
    /// Read by [`parse_request`], which names the seed in its error.
    #[serde(default)]
    pub seed: Option<u64>,
    /// `sweep --concurrency` (read as u64 so that a value past u32 gets the binary's limit
    /// error, not a request-format one).
    #[serde(default)]
    pub concurrencies: Vec<u64>,
    /// `sweep --num-prompts`: one value, or one per concurrency; empty: the scenario's.
    #[serde(default)]
    pub num_prompts: Vec<u32>,
    /// `explain --concurrency`.
    #[serde(default)]
    pub concurrency: Option<u32>,
    /// `simulate`: also keep the run's gauges over time (see [`simulate_with_timeseries`]).
    #[serde(default)]
    pub timeseries: bool,
    /// How many intervals the time series is reduced to (default 400).
    #[serde(default)]
    pub timeseries_points: Option<usize>,
    /// `translate`: the engine to translate to.
    #[serde(default)]
    pub to: Option<String>,
}

/// A scenario as read, before resolution (the binary's `load::RawScenario`, without a folder).
#[derive(Clone, Debug)]
pub(crate) struct RawScenario {
    pub origin: String,
    pub json: Value,
}

fn parse_request(text: &str) -> Result<Request, String> {
    request_of(serde_json::from_str(text).map_err(|e| format!("request: {e}"))?)
}

/// A request from its JSON; the seed (a number or its decimal text) read here, so that what the
/// binary's `--seed` refuses (`-1`, `2.5`, past 2^64 - 1) is an error naming the seed.
fn request_of(mut v: Value) -> Result<Request, String> {
    let seed = match v.get_mut("seed").map(Value::take) {
        None | Some(Value::Null) => None,
        Some(s) => {
            let text = match &s {
                Value::String(t) => t.trim().to_string(),
                other => other.to_string(),
            };
            Some(text.parse::<u64>().map_err(|_| {
                format!("--seed: cannot read {text:?}: give a whole number from 0 to {} (workload.seed)", u64::MAX)
            })?)
        }
    };
    let mut req: Request = serde_json::from_value(v).map_err(|e| format!("request: {e}"))?;
    req.seed = seed;
    Ok(req)
}

/// The binary's `load::read_raw`.
pub(crate) fn read_raw(req: &Request) -> Result<RawScenario, String> {
    let (origin, text) = match &req.scenario {
        None => (req.origin.clone().unwrap_or_else(|| DEFAULT_ORIGIN.to_string()), sim::builtin::DEFAULT_SCENARIO),
        Some(t) => (req.origin.clone().unwrap_or_else(|| "pasted scenario".to_string()), t.as_str()),
    };
    let json: Value = serde_json::from_str(text).map_err(|e| format!("{origin}: not valid JSON: {e}"))?;
    if !json.is_object() {
        return Err(format!("{origin}: expected a JSON object (a scenario)"));
    }
    Ok(RawScenario { origin, json })
}

/// The binary's `load::apply_overrides`: the same `config::apply_sets` (a memory fraction or an
/// engine flag that changes the derived pool moves a start-up log's pinned pool by as much; a TP
/// size or KV format drops it; vLLM's `num_gpu_blocks_override` and `kv_cache_memory_bytes` hold; as the command the page
/// prints does). Returns the warnings the binary prints for them (`config::PinChange::message`).
pub(crate) fn apply_overrides(
    raw: &mut RawScenario,
    sets: &[String],
    seed: Option<u64>,
) -> Result<Vec<String>, String> {
    let dropped = config::apply_sets(&mut raw.json, sets)?.into_iter().map(|c| c.message(&raw.origin)).collect();
    if let Some(seed) = seed {
        config::apply_set(&mut raw.json, &format!("workload.seed={seed}")).map_err(|e| format!("--seed: {e}"))?;
    }
    Ok(dropped)
}

fn resources() -> Result<&'static Resources, String> {
    static RES: OnceLock<Result<Resources, String>> = OnceLock::new();
    RES.get_or_init(sim::builtin::resources).as_ref().map_err(Clone::clone)
}

/// The binary's `load::resolve`, with the built-in cards and no files.
pub(crate) fn resolve_raw(raw: &RawScenario) -> Result<SimSpec, String> {
    let origin = &raw.origin;
    let scenario: Scenario = config::scenario_from_value(raw.json.clone()).map_err(|e| format!("{origin}: {e}"))?;
    if scenario.cost.profile.is_some() {
        return Err(format!(
            "{origin}: cost.profile: a fitted profile is a file, and the page reads no files; give its coefficients inline as cost.coefficients"
        ));
    }
    if scenario.workload.trace.is_some() {
        return Err(format!("{origin}: workload.trace: a trace is a file, and the page reads no files; run traces with the servesim binary"));
    }
    config::resolve(&scenario, resources()?).map_err(|e| format!("{origin}: {e}"))
}

fn pretty<T: serde::Serialize + ?Sized>(v: &T) -> String {
    // `println!` of the pretty JSON: the binary's stdout.
    format!("{}\n", serde_json::to_string_pretty(v).expect("serializable"))
}

/// One shipped scenario, as [`scenarios`] lists it.
#[derive(Serialize)]
struct ShippedScenario {
    name: &'static str,
    origin: String,
    text: &'static str,
}

/// The shipped scenarios, `[{"name", "origin", "text"}]`, the built-in default first.
pub fn scenarios() -> String {
    let list: Vec<ShippedScenario> = sim::builtin::SCENARIOS
        .iter()
        .map(|&(name, text)| ShippedScenario { name, origin: format!("scenarios/{name}.json"), text })
        .collect();
    serde_json::to_string(&list).expect("serializable")
}

/// What [`resolve`] says of a scenario: what the page's controls show.
#[derive(Serialize)]
struct ResolvedScenario<'a> {
    origin: &'a str,
    name: &'a Option<String>,
    description: Option<&'a Value>,
    engine: &'static str,
    engine_version: String,
    model_id: &'a str,
    hardware: &'a str,
    max_running: u32,
    /// The per-step token cap (`max_num_batched_tokens`, `chunked_prefill_size`; -1: off).
    chunk: i64,
    /// The memory fraction as the scenario gives it, if it does.
    memory_fraction: Option<Value>,
    /// The fraction the pool was sized with when it was derived from memory (the scenario's
    /// or the engine's default, `requested ÷ total` of the memory account, to 3 decimals);
    /// `None` when a figure in tokens pins the pool and no fraction applies.
    memory_fraction_in_use: Option<f64>,
    kv_cache_tokens: u64,
    kv_granularity: u32,
    kv_sizing_source: &'static str,
    kv_cache_dtype: &'a str,
    tensor_parallel_size: u32,
    /// The model's attention and KV heads: the TP sizes the engines accept divide the first,
    /// and divide or are divided by the second (`sim::config::memory`'s check).
    num_attention_heads: u32,
    num_kv_heads: u32,
    /// Whether the prefix cache is on (vLLM's `enable_prefix_caching`, SGLang's radix cache:
    /// not `disable_radix_cache`).
    prefix_caching: bool,
    dataset: DatasetSummary,
    mean_input_len: f64,
    mean_output_len: f64,
    num_prompts: u32,
    max_concurrency: Option<u32>,
    request_rate: Option<f64>,
    /// The seed as decimal text: a JavaScript number is exact only up to 2^53.
    seed: String,
    kv_limited_concurrency: u64,
    /// What that footprint is: the mean prompt + output less the last token, which is never
    /// stored, in whole KV units of this engine ("block" for vLLM, "page" for SGLang).
    kv_request_footprint_tokens: u64,
    kv_unit: &'static str,
    /// The tokens of the shared prefixes the requests in flight at the KV limit use, each held
    /// once (0 without a shared prefix or a prefix cache; `sim::sweep::kv_limit`).
    shared_prefix_tokens: u64,
    kv_limit_explanation: String,
    /// The binary's warnings for what the sets did to a pinned pool (`config::PinChange`: a
    /// log's figure moved with the derived pool or dropped, vLLM's override held).
    dropped_pins: Vec<String>,
    /// The concurrencies `explain` sweeps to find its knee for this scenario as set
    /// (`sim::explain::plan`); `None` when it would refuse the scenario.
    explain_grid: Option<Vec<u32>>,
    /// The concurrency `explain` runs this scenario at when none is given
    /// (`sim::explain::plan`): the scenario's `max_concurrency`, else, for a closed loop with no
    /// cap (everything sent at once), twice the concurrency at which the first limit binds;
    /// `None` for its own arrivals (a rate or a trace) or where explain would refuse it.
    explain_concurrency: Option<u32>,
    /// The scenario with the sets applied.
    scenario: &'a Value,
}

/// The workload's dataset, by its `name`.
#[derive(Serialize)]
#[serde(tag = "name", rename_all = "snake_case")]
enum DatasetSummary {
    Random {
        input_len: u32,
        output_len: u32,
        range_ratio: f64,
        prefix_len: u32,
    },
    PrefixRepetition {
        prefix_len: u32,
        suffix_len: u32,
        num_prefixes: u32,
        output_len: u32,
    },
    /// A trace or a list of requests: its rows.
    Trace {
        rows: usize,
    },
}

/// Checks and resolves a scenario (with the sets applied) and says what the
/// page's controls show: the engine's knobs as it runs them, the workload,
/// the KV pool and the KV-limited concurrency. Errors name the field.
pub fn resolve(request: &str) -> Result<String, String> {
    let req = parse_request(request)?;
    let mut raw = read_raw(&req)?;
    let mut dropped_pins = apply_overrides(&mut raw, &req.sets, req.seed)?;
    let spec = resolve_raw(&raw)?;
    // A fleet group's pin changes, as the binary warns of them (`cli/load.rs`).
    dropped_pins.extend(spec.fleet.iter().flat_map(|f| &f.pin_changes).map(|c| c.message(&raw.origin)));
    let workload = sim::workload::generate(&spec.workload);
    let plan0 = sim::explain::plan(&spec, None).ok();
    let explain_concurrency = plan0.as_ref().and_then(|p| p.concurrency);
    let explain_grid = match req.concurrency {
        None => plan0.map(|p| p.grid),
        c => sim::explain::plan(&spec, c).ok().map(|p| p.grid),
    };
    let limit = sim::sweep::kv_limited_concurrency(&spec, &workload);
    let raw_engine = raw.json.get("engine").and_then(Value::as_object).cloned().unwrap_or_default();
    let (chunk, memory_fraction) = match &spec.engine {
        config::EngineSpec::Vllm(c) => {
            (i64::from(c.max_num_batched_tokens), raw_engine.get("gpu_memory_utilization").cloned())
        }
        config::EngineSpec::Sglang(c) => {
            (c.chunked_prefill_size.map_or(-1, i64::from), raw_engine.get("mem_fraction_static").cloned())
        }
    };
    let dataset = match &spec.workload.dataset {
        &Dataset::Random { input_len, output_len, range_ratio, prefix_len } => {
            DatasetSummary::Random { input_len, output_len, range_ratio, prefix_len }
        }
        &Dataset::PrefixRepetition { prefix_len, suffix_len, num_prefixes, output_len } => {
            DatasetSummary::PrefixRepetition { prefix_len, suffix_len, num_prefixes, output_len }
        }
        Dataset::Trace { rows } => DatasetSummary::Trace { rows: rows.len() },
        Dataset::Requests { requests } => DatasetSummary::Trace { rows: requests.len() },
    };
    let (mean_in, mean_out) = workload.mean_lengths();
    let j = ResolvedScenario {
        origin: &raw.origin,
        name: &spec.name,
        description: raw.json.get("description"),
        engine: spec.engine.kind(),
        engine_version: spec.engine.version().to_string(),
        model_id: &spec.model.id,
        hardware: &spec.gpu.id,
        max_running: spec.engine.max_running(),
        chunk,
        memory_fraction,
        memory_fraction_in_use: spec
            .kv_sizing
            .memory
            .as_ref()
            .filter(|m| m.total > 0)
            .map(|m| (m.requested as f64 / m.total as f64 * 1000.0).round() / 1000.0),
        kv_cache_tokens: spec.engine.kv_capacity_tokens(),
        kv_granularity: spec.engine.kv_granularity(),
        kv_sizing_source: spec.kv_sizing.source,
        kv_cache_dtype: &spec.deployment.kv_cache_dtype,
        tensor_parallel_size: spec.deployment.tensor_parallel_size,
        num_attention_heads: spec.model.num_attention_heads,
        num_kv_heads: spec.model.num_kv_heads,
        prefix_caching: spec.engine.prefix_caching(),
        dataset,
        mean_input_len: mean_in,
        mean_output_len: mean_out,
        num_prompts: spec.workload.num_prompts,
        max_concurrency: spec.workload.max_concurrency,
        request_rate: spec.workload.request_rate,
        seed: spec.workload.seed.to_string(),
        kv_limited_concurrency: limit.concurrency,
        kv_request_footprint_tokens: limit.footprint_tokens,
        kv_unit: spec.engine.engine_kind().kv_unit(),
        shared_prefix_tokens: limit.shared_prefix_tokens,
        kv_limit_explanation: sim::sweep::kv_limit_sentence(&limit, &spec),
        dropped_pins,
        explain_grid,
        explain_concurrency,
        scenario: &raw.json,
    };
    Ok(serde_json::to_string(&j).expect("serializable"))
}

/// `servesim simulate --json`'s stdout.
pub fn simulate(request: &str) -> Result<String, String> {
    simulate_with_timeseries(request).map(|(report, _)| report)
}

/// `servesim simulate --json`'s stdout, and (when the request asks for it)
/// the run's gauges over the timed phase as
/// `{"t_s": [...], "kv_usage": [...], "running": [...], "waiting": [...]}`:
/// per interval (at most `timeseries_points`), the peak of each gauge over
/// the interval, `t_s` its end.
pub fn simulate_with_timeseries(request: &str) -> Result<(String, String), String> {
    simulate_all(request).map(|s| (s.report, s.timeseries))
}

/// What [`simulate_all`] answers.
pub struct Simulated {
    /// `servesim simulate --json`'s stdout.
    pub report: String,
    /// The gauges over time (see [`simulate_with_timeseries`]); empty unless asked for.
    pub timeseries: String,
    /// A JSON array, one item per caveat of the report, in its order: the line the binary's
    /// text report prints under that caveat (the out-of-step figure, in
    /// `sim::report::desynchronised_sentence`'s words), or null. The page shows these rather
    /// than words of its own.
    pub caveat_notes: String,
}

/// [`simulate_with_timeseries`], and the sentences the binary prints under the report's caveats.
pub fn simulate_all(request: &str) -> Result<Simulated, String> {
    let req = parse_request(request)?;
    let mut raw = read_raw(&req)?;
    apply_overrides(&mut raw, &req.sets, req.seed)?;
    let spec = resolve_raw(&raw)?;
    let out = sim::simulate(&spec, RunOptions { record_timeseries: req.timeseries, ..Default::default() });
    let point = sim::report::PointReport::of(&spec, &out).with_caveat_runs(&spec, &out);
    let report = pretty(&point);
    // As `sim::report`'s text report prints them under each caveat.
    let notes: Vec<Option<String>> = point
        .caveats
        .iter()
        .map(|c| c.desynchronised_mean_ttft_ms.map(|d| sim::report::desynchronised_sentence(&[format!("{d:.2} ms")])))
        .collect();
    let timeseries = if req.timeseries {
        serde_json::to_string(&reduce_timeseries(&out.run.timeseries, req.timeseries_points.unwrap_or(400)))
            .expect("serializable")
    } else {
        String::new()
    };
    Ok(Simulated { report, timeseries, caveat_notes: serde_json::to_string(&notes).expect("serializable") })
}

/// The knobs both engines have, and how their meanings differ (`sim::config::KNOBS`, the table of
/// `docs/parameter-mapping.md`): `[{"name", "vllm", "sglang", "note"}]`.
pub fn knobs() -> String {
    let list: Vec<Value> = sim::config::KNOBS
        .iter()
        .map(|k| serde_json::json!({"name": k.name, "vllm": k.vllm, "sglang": k.sglang, "note": k.note}))
        .collect();
    serde_json::to_string(&list).expect("serializable")
}

/// The run's gauges over the timed phase, per interval: its end (`t_s`) and each gauge's peak.
#[derive(Serialize)]
struct Timeseries {
    t_s: Vec<f64>,
    kv_usage: Vec<f64>,
    running: Vec<u32>,
    waiting: Vec<u32>,
}

fn reduce_timeseries(samples: &[GaugeSample], points: usize) -> Timeseries {
    let points = points.max(2);
    let tmax = samples.iter().map(|s| s.t_ns).max().unwrap_or(0).max(1);
    let width = tmax.div_ceil(points as u64).max(1);
    let (mut t, mut kv, mut run, mut wait) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut i = 0;
    // A gauge holds its value until the next sample: each interval starts from the last value before it.
    let mut last: Option<GaugeSample> = None;
    for b in 0..points as u64 {
        let end = (b + 1) * width;
        let mut peak = last.map(|s| (s.kv_usage, s.running, s.waiting));
        while i < samples.len() && samples[i].t_ns < end {
            let s = samples[i];
            peak = Some(match peak {
                None => (s.kv_usage, s.running, s.waiting),
                Some((k, r, w)) => (k.max(s.kv_usage), r.max(s.running), w.max(s.waiting)),
            });
            last = Some(s);
            i += 1;
        }
        if let Some((k, r, w)) = peak {
            t.push(end.min(tmax) as f64 / 1e9);
            kv.push(k);
            run.push(r);
            wait.push(w);
        }
        if end >= tmax {
            break;
        }
    }
    Timeseries { t_s: t, kv_usage: kv, running: run, waiting: wait }
}

/// `servesim sweep --json`'s stdout: one scenario, or (with
/// `engine.kind=vllm,sglang` among the sets) the engines side by side.
pub fn sweep(request: &str) -> Result<String, String> {
    let req = parse_request(request)?;
    sweep_json::sweep(&req).map(|v| pretty(&v))
}

/// `servesim explain --json`'s stdout.
pub fn explain(request: &str) -> Result<String, String> {
    let req = parse_request(request)?;
    let mut raw = read_raw(&req)?;
    apply_overrides(&mut raw, &req.sets, req.seed)?;
    let spec = resolve_raw(&raw)?;
    let e = sim::explain::explain(&raw.origin, &spec, req.concurrency)?;
    Ok(pretty(&e))
}

/// The scenarios an [`alignment`] compares, each a request (scenario, origin, sets, seed).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AlignRequest {
    scenarios: Vec<Value>,
}

/// What `servesim sweep` of several scenarios (or `--set engine.kind=vllm,sglang`) says of
/// them side by side, without their runs: `{"alignment": [...], "knobs_moved": [...],
/// "workloads_differ": bool, "setup_differs": [...], "warning": "WARNING: this comparison
/// moves N things at once (...)" or null}`, from the same `cli/align.rs` functions. The page
/// runs each engine's sweep itself (each with its own knobs) and shows this beside them.
pub fn alignment(request: &str) -> Result<String, String> {
    let req: AlignRequest = serde_json::from_str(request).map_err(|e| format!("request: {e}"))?;
    let mut raws = Vec::new();
    let mut specs = Vec::new();
    for r in req.scenarios {
        let r = request_of(r)?;
        let mut raw = read_raw(&r)?;
        apply_overrides(&mut raw, &r.sets, r.seed)?;
        specs.push(resolve_raw(&raw)?);
        raws.push(raw);
    }
    let engines: Vec<Map<String, Value>> =
        raws.iter().map(|r| r.json.get("engine").and_then(Value::as_object).cloned().unwrap_or_default()).collect();
    let pairs: Vec<(&SimSpec, &Map<String, Value>)> = specs.iter().zip(&engines).collect();
    let rows = align::table(&pairs);
    let workloads: Vec<&Value> = raws.iter().map(|r| r.json.get("workload").unwrap_or(&Value::Null)).collect();
    let workloads_differ = workloads.windows(2).any(|w| w[0] != w[1]);
    let setup = align::setup_differences(&pairs);
    let side = align::SideBySide::new(vec![], &rows, workloads_differ, setup);
    // The binary's warning (`cli/sweep.rs`): the knobs moved and what else differs.
    let all: Vec<String> = side
        .knobs_moved
        .iter()
        .map(|m| m.to_string())
        .chain(side.setup_differs.iter().map(|d| d.split(':').next().unwrap_or(d).to_string()))
        .collect();
    let warning = (all.len() > 1).then(|| {
        format!(
            "WARNING: this comparison moves {} things at once ({}): a difference in the results cannot be put down to any one of them. Align them with --set to compare one dimension at a time.",
            all.len(),
            all.join(", ")
        )
    });
    let mut v = serde_json::to_value(&side).expect("serializable");
    v.as_object_mut().expect("an object").remove("scenarios");
    v["warning"] = serde_json::to_value(warning).expect("serializable");
    Ok(serde_json::to_string(&v).expect("serializable"))
}

/// What [`translate`] returns.
#[derive(Serialize)]
struct Translation<'a> {
    scenario: &'a Value,
    origin: String,
    notes: Vec<String>,
}

/// The scenario (sets applied) with its engine section translated to the
/// engine `to` (`"vllm"` or `"sglang"`), as `sweep --set engine.kind=vllm,sglang`
/// translates it: `{"scenario": {...}, "origin": "ORIGIN [to]", "notes": [...]}`.
pub fn translate(request: &str) -> Result<String, String> {
    let req = parse_request(request)?;
    let to = req.to.as_deref().unwrap_or("sglang");
    if config::EngineKind::parse(to).is_none() {
        return Err(format!("--set engine.kind: unknown engine {to:?}; expected vllm or sglang"));
    }
    let mut raw = read_raw(&req)?;
    apply_overrides(&mut raw, &req.sets, req.seed)?;
    let engine: Map<String, Value> = raw.json.get("engine").and_then(Value::as_object).cloned().unwrap_or_default();
    let (translated, notes) = align::translate_engine(&engine, to).map_err(|e| format!("{}: {e}", raw.origin))?;
    raw.json["engine"] = Value::Object(translated);
    let j = Translation { scenario: &raw.json, origin: format!("{} [{to}]", raw.origin), notes };
    Ok(serde_json::to_string(&j).expect("serializable"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_name_the_field() {
        let e = resolve(r#"{"sets": ["engine.max_num_seq=4"]}"#).unwrap_err();
        assert!(e.contains("engine.max_num_seq"), "{e}");
        assert!(e.starts_with(DEFAULT_ORIGIN), "{e}");
        let e = resolve(r#"{"scenario": "{", "origin": "x.json"}"#).unwrap_err();
        assert!(e.starts_with("x.json: not valid JSON"), "{e}");
    }

    #[test]
    fn translation_names_the_other_engines_flags() {
        let v: Value = serde_json::from_str(&translate(r#"{"to": "sglang"}"#).unwrap()).unwrap();
        assert_eq!(v["scenario"]["engine"]["kind"], "sglang");
        assert_eq!(v["scenario"]["engine"]["max_running_requests"], 128);
        let r = json!({"scenario": v["scenario"].to_string(), "origin": v["origin"]}).to_string();
        let v: Value = serde_json::from_str(&resolve(&r).unwrap()).unwrap();
        assert_eq!(v["engine"], "sglang");
    }

    #[test]
    fn the_default_resolves_with_its_kv_limit() {
        let v: Value = serde_json::from_str(&resolve("{}").unwrap()).unwrap();
        assert_eq!(v["kv_limited_concurrency"], 42);
        assert_eq!(v["engine"], "vllm");
    }

    /// A knob that changes what the pool would be (TP size, memory fraction, KV dtype) drops the
    /// scenario's pinned pool here as in the binary, so the page's numbers are its Reproduce
    /// command's (it kept the pin: 42 where the command gives 150; the teaching-page hunt).
    #[test]
    fn a_pool_resizing_knob_drops_the_pinned_pool_as_the_binary_does() {
        let v: Value =
            serde_json::from_str(&resolve(r#"{"sets": ["engine.tensor_parallel_size=2"]}"#).unwrap()).unwrap();
        assert_eq!(v["kv_limited_concurrency"], 150);
        // Set to what the scenario already has: nothing resizes, the pin stands.
        let v: Value = serde_json::from_str(&resolve(r#"{"sets": ["model=qwen2.5-7b-instruct"]}"#).unwrap()).unwrap();
        assert_eq!(v["kv_limited_concurrency"], 42);
    }

    /// The page shows the binary's warning for a dropped pin, and explain's knee grid.
    #[test]
    fn resolve_says_which_pin_was_dropped_and_explains_grid() {
        let v: Value = serde_json::from_str(&resolve(r#"{"sets": ["engine.kv_cache_dtype=fp8"]}"#).unwrap()).unwrap();
        let d = v["dropped_pins"].as_array().unwrap();
        assert_eq!(d.len(), 1);
        assert!(d[0].as_str().unwrap().contains("engine.kv_cache_tokens was dropped"), "{d:?}");
        assert_eq!(v["kv_sizing_source"], "gpu_memory_utilization");
        let v: Value = serde_json::from_str(&resolve("{}").unwrap()).unwrap();
        assert_eq!(v["dropped_pins"], json!([]));
        let spec = {
            let raw = read_raw(&Request::default()).unwrap();
            resolve_raw(&raw).unwrap()
        };
        assert_eq!(v["explain_grid"], json!(sim::explain::plan(&spec, None).unwrap().grid));
    }

    /// Side by side, the alignment `sweep --set engine.kind=vllm,sglang` prints, and its warning.
    #[test]
    fn alignment_of_the_default_on_both_engines() {
        let t: Value = serde_json::from_str(&translate(r#"{"to": "sglang"}"#).unwrap()).unwrap();
        let r = json!({"scenarios": [{}, {"scenario": t["scenario"].to_string(), "origin": t["origin"]}]}).to_string();
        let v: Value = serde_json::from_str(&alignment(&r).unwrap()).unwrap();
        assert_eq!(v["knobs_moved"], json!(["per-step token cap", "KV granularity (tokens)"]));
        // And the client: the translated SGLang side sends the initial test request, vLLM 0.28's
        // client does not.
        assert_eq!(
            v["setup_differs"],
            json!(["benchmark client before the timed run (leaves the first prompt cached): no initial test request / initial test request"])
        );
        assert!(v["warning"].as_str().unwrap().contains("moves 3 things at once"), "{v}");
        assert!(v.get("scenarios").is_none());
    }

    #[test]
    fn timeseries_is_reduced_and_the_report_unchanged() {
        let r = r#"{"sets": ["workload.max_concurrency=64", "workload.num_prompts=128"], "timeseries": true, "timeseries_points": 50}"#;
        let (a, ts) = simulate_with_timeseries(r).unwrap();
        let b = simulate(r#"{"sets": ["workload.max_concurrency=64", "workload.num_prompts=128"]}"#).unwrap();
        assert_eq!(a, b);
        let ts: Value = serde_json::from_str(&ts).unwrap();
        let n = ts["t_s"].as_array().unwrap().len();
        assert!(n > 10 && n <= 50, "{n}");
        assert!(ts["waiting"].as_array().unwrap().iter().any(|w| w.as_u64().unwrap() > 0));
    }

    /// A seed is exact up to 2^64 - 1 (the page sends it as text), and what `--seed` refuses
    /// is an error naming the seed, not the request's format.
    #[test]
    fn the_seed_is_exact_and_its_errors_name_it() {
        let big = "18446744073709551557";
        let v: Value = serde_json::from_str(&resolve(&format!(r#"{{"seed": "{big}"}}"#)).unwrap()).unwrap();
        assert_eq!(v["seed"], big);
        assert_eq!(v["scenario"]["workload"]["seed"].to_string(), big);
        let v: Value = serde_json::from_str(&resolve(r#"{"seed": 7}"#).unwrap()).unwrap();
        assert_eq!(v["seed"], "7");
        for bad in [r#""-1""#, "-1", r#""2.5""#, r#""18446744073709551616""#, r#""x""#] {
            let e = resolve(&format!(r#"{{"seed": {bad}}}"#)).unwrap_err();
            assert!(e.starts_with("--seed: cannot read"), "{bad}: {e}");
        }
        let e = alignment(r#"{"scenarios": [{"seed": "-1"}]}"#).unwrap_err();
        assert!(e.starts_with("--seed: cannot read \"-1\""), "{e}");
    }

    /// The binary's `sweep --concurrency 1,2000000`: its limit, not a num_prompts error.
    #[test]
    fn a_sweep_past_the_concurrency_limit_names_it() {
        for c in ["2000000", "5000000000"] {
            let e = sweep(&format!(r#"{{"concurrencies": [1, {c}], "num_prompts": [8, 2000000]}}"#)).unwrap_err();
            assert_eq!(e, format!("--concurrency: {c} is above the limit of {}", sim::config::MAX_CONCURRENCY));
        }
    }

    /// The lock-step caveat's out-of-step sentence is the binary's (`desynchronised_sentence`),
    /// one note per caveat, and the report is unchanged.
    #[test]
    fn caveat_notes_are_the_binarys_sentences() {
        let r = r#"{"sets": ["workload.max_concurrency=64", "workload.num_prompts=256"]}"#;
        let s = simulate_all(r).unwrap();
        assert_eq!(s.report, simulate(r).unwrap());
        let report: Value = serde_json::from_str(&s.report).unwrap();
        let notes: Vec<Option<String>> = serde_json::from_str(&s.caveat_notes).unwrap();
        let caveats = report["caveats"].as_array().unwrap();
        assert_eq!(notes.len(), caveats.len());
        let i = caveats.iter().position(|c| c["id"] == "lockstep_waves").expect("the lock-step caveat");
        let d = caveats[i]["desynchronised_mean_ttft_ms"].as_f64().unwrap();
        assert_eq!(notes[i].as_deref(), Some(sim::report::desynchronised_sentence(&[format!("{d:.2} ms")]).as_str()));
        assert!(notes[i].as_deref().unwrap().contains(sim::report::LOCKSTEP_RANGE_INSIDE));
    }

    /// The knobs' notes are the core's (the page shows SGLang's per-step cap's meaning).
    #[test]
    fn knobs_carry_the_cores_notes() {
        let v: Value = serde_json::from_str(&knobs()).unwrap();
        let cap = v.as_array().unwrap().iter().find(|k| k["sglang"] == "chunked_prefill_size").unwrap();
        assert!(cap["note"].as_str().unwrap().contains("new prompt tokens of a prefill batch"), "{cap}");
        let v: Value = serde_json::from_str(&resolve("{}").unwrap()).unwrap();
        assert_eq!(v["kv_unit"], "block");
    }
}
