//! What a server says about itself, as data: filled in by the live side
//! (`live::server::probe`) or by hand (tests), read by scenario derivation.

use std::collections::BTreeMap;

use serde::{Serialize, Serializer};
use serde_json::Value;
use sim::config::EngineKind;

/// Everything the server exposes about its setup.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ServerInfo {
    pub base_url: String,
    /// vLLM or SGLang; None when neither answered (serialised as `"unknown"`).
    #[serde(serialize_with = "kind_or_unknown")]
    pub kind: Option<EngineKind>,
    pub version: Option<String>,
    pub model: Option<String>,
    /// The served model's folder (vLLM's `/v1/models` root, SGLang's `model_path`).
    pub model_root: Option<String>,
    pub max_model_len: Option<u32>,
    /// Usable KV tokens: (num_gpu_blocks − 1) × block_size, or `max_total_num_tokens`.
    pub kv_capacity_tokens: Option<u64>,
    pub num_gpu_blocks: Option<u64>,
    /// vLLM `block_size` / SGLang `page_size`.
    pub kv_granularity: Option<u32>,
    /// vLLM `max_num_seqs` / SGLang `max_running_requests`, when exposed.
    pub max_running: Option<u32>,
    /// vLLM `max_num_batched_tokens` / SGLang `chunked_prefill_size`, when exposed.
    pub token_budget: Option<i64>,
    pub prefix_caching: Option<bool>,
    /// Info gauges from `/metrics` (`vllm:cache_config_info`, ...).
    pub info_gauges: BTreeMap<String, BTreeMap<String, String>>,
    /// SGLang's server arguments (`/get_server_info`), API keys removed.
    pub server_args: Option<Value>,
    /// `servesim serve`'s model card (`/v1/models` `servesim.model_card`): the emulated model,
    /// so that a scenario derived from the emulator needs no `--model-card`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model_card: Option<Value>,
    /// `servesim serve`'s GPU card id (the scenario it emulates): a scenario derived from it
    /// runs on that card (its defaults, e.g. vLLM's async scheduling on a GPU), not `cpu-host`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub servesim_hardware: Option<String>,
    /// `servesim serve --time-scale`: simulated seconds per wall second (1: real time). Its
    /// timings are the engine's divided by it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub servesim_time_scale: Option<f64>,
    /// `servesim serve`'s vLLM scheduler limits (`/v1/models` `servesim_engine_args`:
    /// `max_num_seqs`, `max_num_batched_tokens`, ...), which a real vLLM server does not expose.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub servesim_engine_args: Option<serde_json::Map<String, Value>>,
}

impl ServerInfo {
    /// `vllm`, `sglang` or `unknown`.
    pub fn kind_name(&self) -> &'static str {
        self.kind.map_or("unknown", EngineKind::as_str)
    }
}

fn kind_or_unknown<S: Serializer>(k: &Option<EngineKind>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(k.map_or("unknown", EngineKind::as_str))
}

/// How much a difference between what a server says of itself and the scenario a prediction of
/// it runs matters ([`differences`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// The prediction is of another deployment (another engine, model or GPU): judging it against
    /// this server would measure that difference, not the model.
    Error,
    /// A setting the numbers move with (a release, the running cap, the token budget, the KV pool,
    /// its block size, the prefix cache): judged, with the difference said first.
    Warning,
}

/// One field where the server and the scenario disagree, with both values as each says it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SetupDifference {
    /// The scenario's field (`engine.max_num_seqs`, `model`, `hardware`, ...).
    pub field: String,
    pub server: String,
    pub scenario: String,
    pub severity: Severity,
}

impl std::fmt::Display for SetupDifference {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: the server says {}, the scenario {}", self.field, self.server, self.scenario)
    }
}

/// Where what the server says of itself contradicts the scenario `spec` that predicts it: each
/// field the server states (a field it does not state is not compared), in this order. Errors:
/// another engine; another model card (`servesim serve` says its card) ; another GPU (`servesim
/// serve` says its card). Warnings: a served model name that is neither the card's id nor its
/// repository (a server may serve a model under any name); another release; and, on the same
/// engine, another running cap (`max_num_seqs` / `max_running_requests`), token budget
/// (`max_num_batched_tokens` / `chunked_prefill_size`), KV pool (tokens), block or page size, or
/// prefix cache setting.
pub fn differences(info: &ServerInfo, spec: &sim::config::SimSpec) -> Vec<SetupDifference> {
    let mut out = Vec::new();
    let mut push = |field: String, server: String, scenario: String, severity: Severity| {
        out.push(SetupDifference { field, server, scenario, severity });
    };
    let kind = spec.engine.engine_kind();
    if let Some(k) = info.kind.filter(|k| *k != kind) {
        push("engine.kind".into(), k.as_str().into(), kind.as_str().into(), Severity::Error);
    }
    match info.model_card.as_ref().and_then(|c| c.get("id")).and_then(Value::as_str) {
        Some(id) if id != spec.model.id => push("model".into(), id.into(), spec.model.id.clone(), Severity::Error),
        Some(_) => {}
        None => {
            if let Some(served) = info.model.as_deref() {
                if !spec.model.is_served_as(served) {
                    push(
                        "model".into(),
                        format!("{served:?} (a served name)"),
                        format!(
                            "{} ({})",
                            spec.model.id,
                            spec.model.hf_repo.as_deref().unwrap_or("no hf_repo on its card")
                        ),
                        Severity::Warning,
                    );
                }
            }
        }
    }
    if let Some(h) = info.servesim_hardware.as_deref().filter(|h| *h != spec.gpu.id) {
        push("hardware".into(), h.into(), spec.gpu.id.clone(), Severity::Error);
    }
    if info.kind.is_some_and(|k| k != kind) {
        return out;
    }
    let version = spec.engine.version();
    if let Some(v) = info.version.as_deref() {
        if sim::engine::Version::parse(v).is_some_and(|p| p != version) {
            push("engine.version".into(), v.into(), version.to_string(), Severity::Warning);
        }
    }
    let engine = |flag: &str| format!("engine.{flag}");
    if let Some(n) = info.max_running.filter(|n| *n != spec.engine.max_running()) {
        push(engine(kind.running_cap_flag()), n.to_string(), spec.engine.max_running().to_string(), Severity::Warning);
    }
    // The token budget: SGLang's -1 (or 0) is chunked prefill off, as the scenario's none.
    let budget: Option<i64> = match &spec.engine {
        sim::config::EngineSpec::Vllm(c) => Some(i64::from(c.max_num_batched_tokens)),
        sim::config::EngineSpec::Sglang(c) => c.chunked_prefill_size.map(i64::from),
    };
    if let Some(b) = info.token_budget {
        let b = (b > 0).then_some(b);
        if b != budget {
            let say = |x: Option<i64>| x.map_or_else(|| "off (-1)".to_string(), |v| v.to_string());
            push(engine(kind.token_budget_flag()), say(b), say(budget), Severity::Warning);
        }
    }
    if let Some(t) = info.kv_capacity_tokens.filter(|t| *t != spec.engine.kv_capacity_tokens()) {
        push("KV pool (tokens)".into(), t.to_string(), spec.engine.kv_capacity_tokens().to_string(), Severity::Warning);
    }
    if let Some(g) = info.kv_granularity.filter(|g| *g != spec.engine.kv_granularity()) {
        push(
            engine(kind.kv_granularity_flag()),
            g.to_string(),
            spec.engine.kv_granularity().to_string(),
            Severity::Warning,
        );
    }
    if let Some(p) = info.prefix_caching.filter(|p| *p != spec.engine.prefix_caching()) {
        let say = |on: bool| if on { "on" } else { "off" }.to_string();
        push("prefix cache".into(), say(p), say(spec.engine.prefix_caching()), Severity::Warning);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> sim::config::SimSpec {
        let v: Value = serde_json::from_str(include_str!("../../scenarios/rtx5090-qwen2.5-7b-vllm.json")).unwrap();
        let res = sim::builtin::resources().unwrap();
        sim::config::resolve(&sim::config::from_value(v, "").unwrap(), &res).unwrap()
    }

    /// What `servesim serve` of the scenario itself says.
    fn same(spec: &sim::config::SimSpec) -> ServerInfo {
        ServerInfo {
            kind: Some(EngineKind::Vllm),
            version: Some(spec.engine.version().to_string()),
            model: Some("Qwen/Qwen2.5-7B-Instruct".into()),
            model_card: Some(serde_json::to_value(&spec.model).unwrap()),
            servesim_hardware: Some(spec.gpu.id.clone()),
            max_running: Some(spec.engine.max_running()),
            kv_capacity_tokens: Some(spec.engine.kv_capacity_tokens()),
            kv_granularity: Some(spec.engine.kv_granularity()),
            prefix_caching: Some(spec.engine.prefix_caching()),
            ..Default::default()
        }
    }

    /// The server's own word against the scenario a check predicts it with: nothing where they
    /// agree or the server is silent; an error for another engine, model card or GPU; a warning
    /// naming both values for a setting the numbers move with (the audit of 2026-12-06: a server
    /// at another `max_num_seqs` was judged without a word, its mismatch blamed on the speed
    /// reference).
    #[test]
    fn a_server_that_contradicts_the_scenario_is_said_to() {
        let s = spec();
        assert_eq!(differences(&same(&s), &s), vec![]);
        assert_eq!(differences(&ServerInfo::default(), &s), vec![], "a server that says nothing contradicts nothing");
        let mut i = same(&s);
        i.max_running = Some(4);
        i.version = Some("0.32.0".into());
        i.prefix_caching = Some(false);
        let d = differences(&i, &s);
        assert_eq!(
            d.iter().map(|d| d.field.as_str()).collect::<Vec<_>>(),
            ["engine.version", "engine.max_num_seqs", "prefix cache"]
        );
        assert!(d.iter().all(|d| d.severity == Severity::Warning));
        assert_eq!(d[1].to_string(), "engine.max_num_seqs: the server says 4, the scenario 128");
        let mut i = same(&s);
        i.kind = Some(EngineKind::Sglang);
        i.max_running = Some(4);
        let d = differences(&i, &s);
        assert_eq!(d.len(), 1, "engine-specific fields are not compared across engines: {d:?}");
        assert_eq!((d[0].field.as_str(), d[0].severity), ("engine.kind", Severity::Error));
        let mut i = same(&s);
        i.servesim_hardware = Some("a100-80gb".into());
        i.model_card = Some(serde_json::json!({"id": "llama3.1-8b"}));
        let d = differences(&i, &s);
        assert_eq!(
            d.iter().map(|d| (d.field.as_str(), d.severity)).collect::<Vec<_>>(),
            [("model", Severity::Error), ("hardware", Severity::Error)]
        );
        // A real server names its model as it is served: another name warns, the card's
        // repository (any case) does not.
        let mut i = same(&s);
        i.model_card = None;
        assert_eq!(differences(&i, &s), vec![]);
        i.model = Some("qwen/qwen2.5-7b-instruct/".into());
        assert_eq!(differences(&i, &s), vec![]);
        i.model = Some("my-llama".into());
        let d = differences(&i, &s);
        assert_eq!((d.len(), d[0].field.as_str(), d[0].severity), (1, "model", Severity::Warning));
        // The token budget: SGLang's -1 is chunked prefill off.
        let mut i = same(&s);
        i.token_budget = Some(-1);
        let d = differences(&i, &s);
        assert_eq!(d[0].field, "engine.max_num_batched_tokens");
        assert!(d[0].server.starts_with("off"), "{d:?}");
    }
}
