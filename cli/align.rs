//! The vLLM ↔ SGLang flag alignment: translating one engine's scenario into
//! the other's, and the table that shows, knob by knob, what each side of a
//! comparison runs with (`docs/parameter-mapping.md`, the vLLM ↔ SGLang
//! parameter mapping).

use serde_json::{Map, Value};
use sim::config::{EngineSpec, SimSpec};

pub use sim::config::{Knob, KNOBS};

/// A knob's value in a resolved scenario, as text, and whether the scenario set it.
fn value(knob: &str, spec: &SimSpec, raw_engine: &Map<String, Value>) -> (String, bool) {
    let set = |f: &str| raw_engine.contains_key(f);
    match (&spec.engine, knob) {
        (EngineSpec::Vllm(c), "running cap") => (c.max_num_seqs.to_string(), set("max_num_seqs")),
        (EngineSpec::Sglang(c), "running cap") => (c.max_running_requests.to_string(), set("max_running_requests")),
        (EngineSpec::Vllm(c), "per-step token cap") => {
            (c.max_num_batched_tokens.to_string(), set("max_num_batched_tokens"))
        }
        (EngineSpec::Sglang(c), "per-step token cap") => {
            (c.chunked_prefill_size.map(|v| v.to_string()).unwrap_or_else(|| "off".into()), set("chunked_prefill_size"))
        }
        (EngineSpec::Vllm(c), "KV granularity (tokens)") => (c.block_size.to_string(), set("block_size")),
        (EngineSpec::Sglang(c), "KV granularity (tokens)") => (c.page_size.to_string(), set("page_size")),
        (EngineSpec::Vllm(c), "prefix reuse") => (on_off(c.enable_prefix_caching), set("enable_prefix_caching")),
        (EngineSpec::Sglang(c), "prefix reuse") => (on_off(!c.disable_radix_cache), set("disable_radix_cache")),
        (EngineSpec::Vllm(_), "memory fraction") => fraction(raw_engine, "gpu_memory_utilization", spec),
        (EngineSpec::Sglang(_), "memory fraction") => fraction(raw_engine, "mem_fraction_static", spec),
        (_, "KV pool (tokens)") => (
            spec.engine.kv_capacity_tokens().to_string(),
            ["kv_cache_tokens", "num_gpu_blocks_override", "max_total_tokens"].iter().any(|f| set(f)),
        ),
        (EngineSpec::Vllm(c), "context length") => (c.max_model_len.to_string(), set("max_model_len")),
        (EngineSpec::Sglang(c), "context length") => (c.context_length.to_string(), set("context_length")),
        (EngineSpec::Vllm(c), "scheduling policy") => (format!("{:?}", c.policy).to_lowercase(), set("policy")),
        (EngineSpec::Sglang(c), "scheduling policy") => {
            (format!("{:?}", c.schedule_policy).to_lowercase(), set("schedule_policy"))
        }
        _ => ("?".into(), false),
    }
}

fn on_off(b: bool) -> String {
    if b { "on" } else { "off" }.into()
}

fn fraction(raw: &Map<String, Value>, field: &str, spec: &SimSpec) -> (String, bool) {
    match raw.get(field) {
        Some(v) => (v.to_string(), true),
        None if spec.kv_sizing.source.contains("utilization") || spec.kv_sizing.source.contains("fraction") => {
            ("default".into(), false)
        }
        None => ("n/a (pool given)".into(), false),
    }
}

/// One row of the alignment table.
pub struct Row {
    pub knob: &'static Knob,
    /// Per scenario: (flag = value, set by the scenario).
    pub values: Vec<(String, bool)>,
    pub differs: bool,
}

/// Builds the alignment table of resolved scenarios (with their raw engine sections).
pub fn table(specs: &[(&SimSpec, &Map<String, Value>)]) -> Vec<Row> {
    KNOBS
        .iter()
        .map(|k| {
            let values: Vec<(String, bool)> = specs
                .iter()
                .map(|(s, raw)| {
                    let flag = k.flag(s.engine.engine_kind());
                    let (v, set) = value(k.name, s, raw);
                    (format!("{flag} = {v}"), set)
                })
                .collect();
            let plain: Vec<String> = specs.iter().map(|(s, raw)| value(k.name, s, raw).0).collect();
            let differs = plain.windows(2).any(|w| w[0] != w[1]);
            Row { knob: k, values, differs }
        })
        .collect()
}

/// Translates a scenario's engine section to the other engine's flags (the table is
/// `sim::config::translate_engine`). Returns the new section and a note per flag that has
/// no counterpart.
pub fn translate_engine(engine: &Map<String, Value>, to: &str) -> Result<(Map<String, Value>, Vec<String>), String> {
    let to =
        sim::config::EngineKind::parse(to).ok_or_else(|| format!("engine.kind {to:?}: expected vllm or sglang"))?;
    sim::config::translate_engine(engine, to)
}

/// The JSON of a side-by-side sweep: each scenario's series, the alignment
/// table, the knobs that moved and whether the workloads differ. One
/// function for the binary and the browser build, so both print the same keys.
pub fn side_by_side_json(scenarios: Vec<Value>, rows: &[Row], workloads_differ: bool) -> Value {
    let mut j = Map::new();
    j.insert("scenarios".into(), Value::Array(scenarios));
    j.insert(
        "alignment".into(),
        Value::Array(
            rows.iter()
                .map(|r| {
                    let mut m = Map::new();
                    m.insert("knob".into(), r.knob.name.into());
                    m.insert("vllm_flag".into(), r.knob.vllm.into());
                    m.insert("sglang_flag".into(), r.knob.sglang.into());
                    m.insert(
                        "values".into(),
                        Value::Array(r.values.iter().map(|(v, _)| Value::from(v.clone())).collect()),
                    );
                    m.insert("differs".into(), r.differs.into());
                    if !r.knob.note.is_empty() {
                        m.insert("note".into(), r.knob.note.into());
                    }
                    Value::Object(m)
                })
                .collect(),
        ),
    );
    let moved: Vec<Value> = rows.iter().filter(|r| r.differs).map(|r| Value::from(r.knob.name)).collect();
    j.insert("knobs_moved".into(), Value::Array(moved));
    j.insert("workloads_differ".into(), workloads_differ.into());
    Value::Object(j)
}
