//! The vLLM ↔ SGLang flag alignment: translating one engine's scenario into
//! the other's, and the table that shows, knob by knob, what each side of a
//! comparison runs with (`docs/parameter-mapping.md`, the vLLM ↔ SGLang
//! parameter mapping).

use serde_json::{Map, Value};
use sim::config::{EngineSpec, SimSpec};

/// A knob both engines have, under their own names.
pub struct Knob {
    pub name: &'static str,
    pub vllm: &'static str,
    pub sglang: &'static str,
    /// How the two differ in meaning, when they do.
    pub note: &'static str,
}

pub const KNOBS: &[Knob] = &[
    Knob { name: "running cap", vllm: "max_num_seqs", sglang: "max_running_requests", note: "" },
    Knob {
        name: "per-step token cap",
        vllm: "max_num_batched_tokens",
        sglang: "chunked_prefill_size",
        note: "vLLM counts decode tokens in it; SGLang counts new prompt tokens of a prefill batch only (plus max_prefill_tokens)",
    },
    Knob { name: "KV granularity (tokens)", vllm: "block_size", sglang: "page_size", note: "" },
    Knob {
        name: "prefix reuse",
        vllm: "enable_prefix_caching",
        sglang: "radix cache (not disable_radix_cache)",
        note: "hashed full blocks vs a token-level radix tree",
    },
    Knob {
        name: "memory fraction",
        vllm: "gpu_memory_utilization",
        sglang: "mem_fraction_static",
        note: "vLLM's covers weights, activations and KV; SGLang's weights and KV (activations come out of the rest)",
    },
    Knob {
        name: "KV pool (tokens)",
        vllm: "usable KV",
        sglang: "max_total_tokens",
        note: "vLLM's from num_gpu_blocks_override, kv_cache_tokens or gpu_memory_utilization, less the null block",
    },
    Knob { name: "context length", vllm: "max_model_len", sglang: "context_length", note: "" },
    Knob { name: "scheduling policy", vllm: "policy", sglang: "schedule_policy", note: "" },
];

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
                    let flag = if s.engine.kind() == "sglang" { k.sglang } else { k.vllm };
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

/// Translates a scenario's engine section to the other engine's flags.
/// Returns the new section and a note per flag that has no counterpart.
pub fn translate_engine(engine: &Map<String, Value>, to: &str) -> Result<(Map<String, Value>, Vec<String>), String> {
    let from = engine.get("kind").and_then(Value::as_str).unwrap_or("vllm");
    let mut out = Map::new();
    out.insert("kind".into(), to.into());
    let mut notes = Vec::new();
    if from == to {
        return Ok((engine.clone(), notes));
    }
    let block = engine.get("block_size").and_then(Value::as_u64).unwrap_or(16);
    for (k, v) in engine {
        let mapped: Option<(&str, Value)> = match (from, k.as_str()) {
            (_, "kind") => None,
            (_, "version") => {
                notes.push(format!("engine.version {v} is a {from} release: the {to} side uses its default release"));
                None
            }
            ("vllm", "max_num_seqs") => Some(("max_running_requests", v.clone())),
            ("vllm", "max_num_batched_tokens") => Some(("chunked_prefill_size", v.clone())),
            ("vllm", "block_size") => Some(("page_size", v.clone())),
            ("vllm", "enable_prefix_caching") => {
                Some(("disable_radix_cache", Value::Bool(!v.as_bool().unwrap_or(true))))
            }
            ("vllm", "gpu_memory_utilization") => Some(("mem_fraction_static", v.clone())),
            // The same usable pool: vLLM loses one block (the null block) of what its log prints.
            ("vllm", "kv_cache_tokens") => {
                let t = v.as_u64().unwrap_or(0);
                Some(("max_total_tokens", Value::from((t / block).saturating_sub(1) * block)))
            }
            ("vllm", "num_gpu_blocks_override") => {
                let n = v.as_u64().unwrap_or(2);
                Some(("max_total_tokens", Value::from(n.saturating_sub(1) * block)))
            }
            ("vllm", "max_model_len") => Some(("context_length", v.clone())),
            ("vllm", "policy") => match v.as_str() {
                Some("fcfs") => Some(("schedule_policy", v.clone())),
                _ => return Err(format!("engine.policy {v} has no modelled SGLang counterpart")),
            },
            ("sglang", "max_running_requests") => Some(("max_num_seqs", v.clone())),
            ("sglang", "chunked_prefill_size") => match v.as_i64() {
                Some(-1) => {
                    notes.push(
                        "chunked_prefill_size -1 (off) has no vLLM V1 counterpart: vLLM keeps its default budget"
                            .into(),
                    );
                    None
                }
                _ => Some(("max_num_batched_tokens", v.clone())),
            },
            ("sglang", "page_size") => Some(("block_size", v.clone())),
            ("sglang", "disable_radix_cache") => {
                Some(("enable_prefix_caching", Value::Bool(!v.as_bool().unwrap_or(false))))
            }
            ("sglang", "mem_fraction_static") => Some(("gpu_memory_utilization", v.clone())),
            ("sglang", "max_total_tokens") => {
                // kv_cache_tokens counts the null block too; usable = whole blocks of the pool.
                let m = v.as_u64().unwrap_or(0);
                let b = engine.get("page_size").and_then(Value::as_u64).filter(|&p| p > 1).unwrap_or(16);
                Some(("kv_cache_tokens", Value::from((m / b + 1) * b)))
            }
            ("sglang", "context_length") => Some(("max_model_len", v.clone())),
            ("sglang", "schedule_policy") => match v.as_str() {
                Some("fcfs") => Some(("policy", v.clone())),
                _ => {
                    notes.push(format!("schedule_policy {v} has no vLLM counterpart: vLLM uses fcfs"));
                    None
                }
            },
            (_, other) => {
                notes.push(format!("engine.{other} has no {to} counterpart and is dropped"));
                None
            }
        };
        if let Some((name, value)) = mapped {
            out.insert(name.into(), value);
        }
    }
    Ok((out, notes))
}
