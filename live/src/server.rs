//! What a server says about itself: engine, version, model, KV capacity,
//! scheduler limits, from `/version`, `/v1/models`, `/metrics` (info gauges)
//! and SGLang's `/get_server_info`.

use std::time::Duration;

use serde_json::Value;

pub use calib::ServerInfo;
use sim::config::EngineKind;

use crate::prom::Snapshot;

/// GET `base/path` as text.
pub async fn get_text(
    client: &reqwest::Client,
    base: &str,
    path: &str,
    api_key: Option<&str>,
) -> Result<String, String> {
    let url = format!("{}{}", base.trim_end_matches('/'), path);
    let mut rb = client.get(&url).timeout(Duration::from_secs(10));
    if let Some(k) = api_key {
        rb = rb.header("Authorization", format!("Bearer {k}"));
    }
    let resp = rb.send().await.map_err(|e| format!("GET {url}: {e}"))?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| format!("GET {url}: {e}"))?;
    if !status.is_success() {
        return Err(format!("GET {url}: HTTP {}", status.as_u16()));
    }
    Ok(text)
}

/// Fetches and parses `/metrics`.
pub async fn metrics(client: &reqwest::Client, base: &str, api_key: Option<&str>) -> Result<Snapshot, String> {
    get_text(client, base, "/metrics", api_key).await.map(|t| Snapshot::from_text(&t))
}

fn parse_u64(s: Option<&String>) -> Option<u64> {
    s.and_then(|v| v.parse::<f64>().ok()).filter(|v| v.is_finite() && *v >= 0.0).map(|v| v as u64)
}

/// Keys whose values never go into a record.
const SECRET_KEYS: &[&str] = &["api_key", "admin_api_key", "hf_token", "token"];

fn scrub(v: &mut Value) {
    match v {
        Value::Object(m) => {
            for k in SECRET_KEYS {
                if m.contains_key(*k) {
                    m.insert((*k).to_string(), Value::String("<redacted>".into()));
                }
            }
            for (_, x) in m.iter_mut() {
                scrub(x);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(scrub),
        _ => {}
    }
}

/// Asks the server what it is.
pub async fn probe(client: &reqwest::Client, base: &str, api_key: Option<&str>) -> Result<ServerInfo, String> {
    let models_text = get_text(client, base, "/v1/models", api_key).await?;
    let models: Value = serde_json::from_str(&models_text).map_err(|e| format!("{base}/v1/models: not JSON: {e}"))?;
    let first = models.get("data").and_then(Value::as_array).and_then(|a| a.first()).cloned().unwrap_or(Value::Null);
    let model = first.get("id").and_then(Value::as_str).map(str::to_string);
    let model_root = first.get("root").and_then(Value::as_str).map(str::to_string);
    let mut max_model_len = first.get("max_model_len").and_then(Value::as_u64).map(|v| v as u32);
    let version_text = get_text(client, base, "/version", api_key).await.ok();
    let version = version_text
        .as_deref()
        .and_then(|t| serde_json::from_str::<Value>(t).ok())
        .and_then(|v| v.get("version").and_then(Value::as_str).map(str::to_string));
    let snap = metrics(client, base, api_key).await.unwrap_or_default();
    let mut info = ServerInfo {
        base_url: base.to_string(),
        kind: None,
        version,
        model,
        model_root,
        max_model_len,
        kv_capacity_tokens: None,
        num_gpu_blocks: None,
        kv_granularity: None,
        max_running: None,
        token_budget: None,
        prefix_caching: None,
        info_gauges: snap.info(),
        server_args: None,
        // `servesim serve` reports the card of the model it emulates.
        model_card: first.get("servesim_model_card").filter(|v| v.is_object()).cloned(),
        servesim_hardware: first.get("servesim_hardware").and_then(Value::as_str).map(str::to_string),
        servesim_time_scale: first.get("servesim_time_scale").and_then(Value::as_f64),
        servesim_engine_args: first.get("servesim_engine_args").and_then(Value::as_object).cloned(),
    };
    if let Some(cc) = snap.labels("vllm:cache_config_info") {
        info.kind = Some(EngineKind::Vllm);
        let blocks = parse_u64(cc.get("num_gpu_blocks"));
        let bs = parse_u64(cc.get("block_size")).map(|v| v as u32);
        info.num_gpu_blocks = blocks;
        info.kv_granularity = bs;
        if let (Some(n), Some(b)) = (blocks, bs) {
            info.kv_capacity_tokens = Some(n.saturating_sub(1) * u64::from(b));
        }
        info.prefix_caching = cc.get("enable_prefix_caching").map(|v| v == "True" || v == "true");
    } else if snap.samples.iter().any(|s| s.name.starts_with("vllm:")) {
        info.kind = Some(EngineKind::Vllm);
    }
    if info.kind.is_none() {
        if let Ok(t) = get_text(client, base, "/get_server_info", api_key).await {
            if let Ok(mut v) = serde_json::from_str::<Value>(&t) {
                scrub(&mut v);
                info.kind = Some(EngineKind::Sglang);
                let num = |k: &str| v.get(k).and_then(Value::as_i64);
                info.kv_granularity = num("page_size").map(|x| x as u32);
                info.max_running = num("max_running_requests").map(|x| x as u32);
                info.token_budget = num("chunked_prefill_size");
                info.prefix_caching = v.get("disable_radix_cache").and_then(Value::as_bool).map(|d| !d);
                let internal = v.get("internal_states").and_then(Value::as_array).and_then(|a| a.first());
                let from_internal = |k: &str| internal.and_then(|i| i.get(k)).and_then(Value::as_u64);
                info.kv_capacity_tokens = from_internal("max_total_num_tokens")
                    .or_else(|| v.get("max_total_num_tokens").and_then(Value::as_u64));
                if info.max_running.is_none() {
                    info.max_running = from_internal("max_running_requests").map(|x| x as u32);
                }
                if max_model_len.is_none() {
                    max_model_len = num("context_length").map(|x| x as u32);
                    info.max_model_len = max_model_len;
                }
                if info.version.is_none() {
                    info.version = v.get("version").and_then(Value::as_str).map(str::to_string);
                }
                // SGLang's `/v1/models` root is the served name, not a folder.
                if let Some(p) = v.get("model_path").and_then(Value::as_str) {
                    if !info.model_root.as_deref().is_some_and(|r| std::path::Path::new(r).is_dir()) {
                        info.model_root = Some(p.to_string());
                    }
                }
                info.server_args = Some(v);
            }
        }
        if info.kv_capacity_tokens.is_none() {
            info.kv_capacity_tokens = snap.sum("sglang:max_total_num_tokens").map(|v| v as u64);
        }
        if info.kind.is_none() && snap.samples.iter().any(|s| s.name.starts_with("sglang:")) {
            info.kind = Some(EngineKind::Sglang);
        }
    }
    // `servesim serve` of a vLLM scenario says its scheduler limits (`/v1/models`
    // `servesim_engine_args`), which a real vLLM server does not report: the run record keeps
    // them, as it keeps an SGLang server's (a serve at `max_num_seqs` 4 and one at 32 read as one
    // setup to `diff`; the audit of 2026-12-06).
    if let Some(args) = &info.servesim_engine_args {
        let num = |k: &str| args.get(k).and_then(Value::as_u64);
        if info.max_running.is_none() {
            info.max_running = num("max_num_seqs").map(|x| x as u32);
        }
        if info.token_budget.is_none() {
            info.token_budget = num("max_num_batched_tokens").map(|x| x as i64);
        }
    }
    Ok(info)
}
