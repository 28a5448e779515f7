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
