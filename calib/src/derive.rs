//! Describing a live server as a scenario: the engine section from what the
//! server reports (the flags named by `EngineKind::reported_scheduler_flags`),
//! the model card from the served model's `config.json` (or the one `servesim
//! serve` reports), the hardware card the user names.

use serde_json::{json, Map, Value};
use sim::cards::ModelCard;
use sim::config::EngineKind;

use crate::error::{CalibError, Result};
use crate::server_info::ServerInfo;

/// A model card from a Hugging Face `config.json` (`source` names it in errors and in the card).
pub fn model_card_from_config(c: &Value, source: &str, id: &str) -> std::result::Result<ModelCard, String> {
    let u = |k: &str| c.get(k).and_then(Value::as_u64).map(|v| v as u32);
    let field = |k: &str| match c.get(k) {
        None | Some(Value::Null) => Err(format!("{source}: no {k}")),
        Some(v) => u(k).ok_or_else(|| format!("{source}: {k}: expected a whole number, got {v}")),
    };
    // A mixture-of-experts config would be read as a dense model of its `intermediate_size`,
    // with none of its experts' weights or time: refused (write the card by hand, with its `moe`
    // object, as models/model/qwen3-30b-a3b.json does).
    if let Some(k) = ["num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size"]
        .into_iter()
        .find(|k| c.get(*k).is_some_and(|v| !v.is_null()))
    {
        return Err(format!(
            "{source}: {k}: a mixture-of-experts model; a card is not derived from its config.json (give a model \
             card with a `moe` object, docs/moe.md)"
        ));
    }
    // What else a dense card cannot describe is refused by the key that says it, not read as a
    // full-attention bf16 model (its KV pool, weights and step times would all be another model's).
    if let Some(q) = c.get("quantization_config").filter(|v| !v.is_null()) {
        let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("not given");
        return Err(format!(
            "{source}: quantization_config: a quantized checkpoint (quant_method {method:?}), whose weights are \
             not its torch_dtype; a card is not derived from its config.json (give a model card with its \
             `quantization` and `quantization_method`, as models/model/llama-3.1-70b-instruct-fp8.json has)"
        ));
    }
    if let Some(k) = ["kv_lora_rank", "q_lora_rank"].into_iter().find(|k| c.get(*k).is_some_and(|v| !v.is_null())) {
        return Err(format!(
            "{source}: {k}: multi-head latent attention (MLA), not modelled: servesim's cards have standard attention"
        ));
    }
    if let Some(other) = c
        .get("layer_types")
        .and_then(Value::as_array)
        .and_then(|t| t.iter().filter_map(Value::as_str).find(|t| *t != "full_attention"))
    {
        return Err(format!(
            "{source}: layer_types: {other:?} layers, not modelled: servesim's cards have full attention in every layer"
        ));
    }
    if let Some(k) = ["hybrid_override_pattern", "attn_layer_period", "sliding_window_pattern", "layers_block_type"]
        .into_iter()
        .find(|k| c.get(*k).is_some_and(|v| !v.is_null()))
    {
        return Err(format!(
            "{source}: {k}: layers other than full attention, not modelled: servesim's cards have full attention in every layer"
        ));
    }
    // A window as long as the model's context is full attention (Qwen2.5's configs give 131072
    // with `use_sliding_window` false); a shorter one in use keeps less KV than a card would.
    if let Some(w) = u("sliding_window") {
        let in_use = c.get("use_sliding_window").and_then(Value::as_bool).unwrap_or(true);
        if in_use && u("max_position_embeddings").is_none_or(|m| w < m) {
            return Err(format!(
                "{source}: sliding_window: attention over a {w}-token window, not modelled: servesim's cards have \
                 full attention (their KV pools and attention times would be another model's)"
            ));
        }
    }
    // The card's MLP is the gated SiLU of Llama and Qwen (gate, up and down projections): another
    // activation means another MLP (GPT-NeoX's and Phi-2's two-matrix GELU), whose weights and GEMMs
    // the card would misstate.
    if let Some(act) = c.get("hidden_act").and_then(Value::as_str).filter(|a| !["silu", "swish"].contains(a)) {
        return Err(format!(
            "{source}: hidden_act: {act:?}: an MLP other than the gated SiLU (SwiGLU) servesim's cards describe, \
             not modelled"
        ));
    }
    let hidden = field("hidden_size")?;
    let layers = field("num_hidden_layers")?;
    let heads = field("num_attention_heads")?;
    let kv = u("num_key_value_heads").unwrap_or(heads);
    let head_dim = u("head_dim").unwrap_or(hidden / heads.max(1));
    // The gated MLP's width: no default (a guess of 4 x hidden would time another model).
    let inter = field("intermediate_size")?;
    let vocab = field("vocab_size")?;
    let tied = c.get("tie_word_embeddings").and_then(Value::as_bool).unwrap_or(false);
    let dtype = c.get("torch_dtype").or(c.get("dtype")).and_then(Value::as_str).unwrap_or("bfloat16").to_string();
    let (h, l, hd, kvh, hh, i, v) =
        (hidden as u64, layers as u64, head_dim as u64, kv as u64, heads as u64, inter as u64, vocab as u64);
    // Llama-style: embeddings (+ untied head) + per layer q, k, v, o, gated MLP, 2 norms; final norm.
    let per_layer = h * hh * hd + 2 * h * kvh * hd + hh * hd * h + 3 * h * i + 2 * h;
    let params = v * h * if tied { 1 } else { 2 } + l * per_layer + h;
    // The engines choose code paths by the architecture: kept where it names a causal LM (a
    // multimodal or other model is read as before, its name deciding).
    let architecture = c
        .get("architectures")
        .and_then(|a| a.get(0))
        .and_then(Value::as_str)
        .filter(|a| sim::config::is_causal_lm_architecture(a))
        .map(str::to_string);
    Ok(ModelCard {
        id: id.to_string(),
        hf_repo: None,
        architecture,
        num_parameters: params,
        num_layers: layers,
        hidden_size: hidden,
        intermediate_size: Some(inter),
        num_attention_heads: heads,
        num_kv_heads: kv,
        head_dim,
        vocab_size: vocab,
        tie_word_embeddings: Some(tied),
        dtype,
        quantization: None,
        quantization_method: None,
        weight_block_size: None,
        max_position_embeddings: u("max_position_embeddings"),
        moe: None,
        sources: vec![source.to_string()],
        notes: Some(
            "derived from the checkpoint's config.json (calibrate, servesim card); parameters counted with the Llama \
             formula (q/k/v biases and q/k norms, a few thousand parameters, left out)"
                .into(),
        ),
    })
}

/// vLLM prints its non-default arguments at start-up; the scheduler's, from a log's text.
pub fn vllm_args_from_log(text: &str) -> Map<String, Value> {
    let mut out = Map::new();
    let line = text.lines().find(|l| l.contains("non-default args:")).unwrap_or("");
    for key in EngineKind::Vllm.reported_scheduler_flags() {
        let pat = format!("'{key}': ");
        if let Some(i) = line.find(&pat) {
            let num: String = line[i + pat.len()..].chars().take_while(|c| c.is_ascii_digit()).collect();
            if let Ok(n) = num.parse::<u64>() {
                out.insert((*key).into(), n.into());
            }
        }
    }
    out
}

/// The vLLM scheduler limits a scenario derived from the server leaves at vLLM's defaults,
/// because nothing said them (a real vLLM server does not expose them; its start-up log's
/// `non-default args:` line, `--server-log`, or `servesim serve`'s `/v1/models` does): the
/// caller says so. Empty for SGLang, which reports them.
pub fn unknown_scheduler_flags(info: &ServerInfo, d: &DeriveOptions) -> Vec<&'static str> {
    if info.kind != Some(EngineKind::Vllm) {
        return Vec::new();
    }
    let known = |k: &str| {
        d.log_args.contains_key(k)
            || info.servesim_engine_args.as_ref().is_some_and(|a| a.get(k).is_some_and(|v| !v.is_null()))
            || d.sets.iter().any(|s| s.split('=').next().is_some_and(|p| p.trim() == format!("engine.{k}")))
    };
    ["max_num_seqs", "max_num_batched_tokens"].into_iter().filter(|k| !known(k)).collect()
}

/// Which model card a derived scenario uses.
#[derive(Clone, Debug)]
pub enum ModelChoice {
    /// A card id of `models/model/` (`--model-card`).
    Card(String),
    /// A card read from the served model's folder.
    Read(ModelCard),
    /// Whatever the server reports: `servesim serve`'s own card, else an error.
    FromServer,
}

/// How to describe the live server as a scenario, beyond what it reports.
#[derive(Clone, Debug)]
pub struct DeriveOptions {
    /// Hardware card id; default what `servesim serve` reports, else `cpu-host`.
    pub hardware: Option<String>,
    pub model: ModelChoice,
    /// vLLM's non-default arguments from its start-up log ([`vllm_args_from_log`]).
    pub log_args: Map<String, Value>,
    /// `--set PATH=VALUE` overrides of the derived scenario.
    pub sets: Vec<String>,
}

/// The scenario (JSON) that describes the live server, with the given workload section.
pub fn derive_scenario(info: &ServerInfo, d: &DeriveOptions, workload: &Value) -> Result<Value> {
    let mut engine = Map::new();
    let kind = info.kind.ok_or(CalibError::Server {
        flag: "--base-url",
        message: "the server is neither vLLM nor SGLang (no vllm:* or sglang:* metrics)".into(),
    })?;
    engine.insert("kind".into(), kind.as_str().into());
    match kind {
        EngineKind::Vllm => {
            if let Some(v) = &info.version {
                engine.insert("version".into(), v.split('+').next().unwrap_or(v).into());
            }
            if let Some(n) = info.num_gpu_blocks {
                engine.insert("num_gpu_blocks_override".into(), n.into());
            }
            if let Some(b) = info.kv_granularity {
                engine.insert(kind.kv_granularity_flag().into(), b.into());
            }
            if let Some(p) = info.prefix_caching {
                engine.insert(kind.prefix_cache_flag().into(), p.into());
            }
            if let Some(m) = info.max_model_len {
                engine.insert(kind.context_length_flag().into(), m.into());
            }
            // The emulator's own limits, then the start-up log's (the log wins).
            if let Some(args) = &info.servesim_engine_args {
                for k in kind.reported_scheduler_flags() {
                    if let Some(v) = args.get(*k).filter(|v| !v.is_null()) {
                        engine.insert((*k).into(), v.clone());
                    }
                }
            }
            for (k, v) in &d.log_args {
                engine.insert(k.clone(), v.clone());
            }
        }
        EngineKind::Sglang => {
            if let Some(v) = &info.version {
                engine.insert("version".into(), v.clone().into());
            }
            if let Some(t) = info.kv_capacity_tokens {
                engine.insert("max_total_num_tokens".into(), t.into());
            }
            if let Some(args) = &info.server_args {
                for k in kind.reported_scheduler_flags() {
                    if let Some(v) = args.get(*k).filter(|v| !v.is_null()) {
                        engine.insert((*k).into(), v.clone());
                    }
                }
            }
            if !engine.contains_key(kind.context_length_flag()) {
                if let Some(m) = info.max_model_len {
                    engine.insert(kind.context_length_flag().into(), m.into());
                }
            }
        }
    }
    let model = match (&d.model, &info.model_card) {
        (ModelChoice::Card(id), _) => Value::from(id.clone()),
        (ModelChoice::Read(card), _) => serde_json::to_value(card).map_err(|e| CalibError::Scenario(e.to_string()))?,
        (ModelChoice::FromServer, Some(card)) => card.clone(),
        (ModelChoice::FromServer, None) => {
            return Err(CalibError::Server {
                flag: "--model-card",
                message: "the server's model folder is not readable here; name a card from models/model/".into(),
            })
        }
    };
    let mut json = json!({
        "version": 1,
        "name": format!("live {}", info.base_url),
        "engine": engine,
        "model": model,
        "hardware": d.hardware.clone().or_else(|| info.servesim_hardware.clone()).unwrap_or_else(|| "cpu-host".into()),
        "workload": workload,
    });
    for s in &d.sets {
        sim::config::apply_set(&mut json, s).map_err(|e| CalibError::Scenario(format!("--set {s}: {e}")))?;
    }
    Ok(json)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A mixture-of-experts config is refused by name, not read as a dense model.
    #[test]
    fn a_moe_config_is_refused_naming_its_field() {
        let c = json!({"hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
            "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "vocab_size": 151936,
            "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768});
        let err = model_card_from_config(&c, "config.json", "m").unwrap_err();
        assert!(err.contains("num_experts") && err.contains("mixture-of-experts"), "{err}");
        let mut dense = c.clone();
        for k in ["num_experts", "num_experts_per_tok", "moe_intermediate_size"] {
            dense.as_object_mut().unwrap().remove(k);
        }
        assert!(model_card_from_config(&dense, "config.json", "m").is_ok());
    }

    /// What a dense card cannot describe is refused naming the config key; what only looks like it
    /// (Qwen2.5's window as long as its context, unused) is not.
    #[test]
    fn configs_a_card_cannot_describe_are_refused_naming_the_key() {
        let base = json!({"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
            "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "max_position_embeddings": 32768});
        let with = |k: &str, v: Value| {
            let mut c = base.clone();
            c[k] = v;
            c
        };
        let qwen25 = {
            let mut c = with("sliding_window", json!(131072));
            c["use_sliding_window"] = json!(false);
            c
        };
        assert!(model_card_from_config(&qwen25, "config.json", "m").is_ok());
        assert!(model_card_from_config(&with("sliding_window", json!(null)), "config.json", "m").is_ok());
        assert!(model_card_from_config(&with("hidden_act", json!("silu")), "config.json", "m").is_ok());
        assert!(model_card_from_config(
            &with("layer_types", json!(["full_attention", "full_attention"])),
            "config.json",
            "m"
        )
        .is_ok());
        for (c, key) in [
            (with("quantization_config", json!({"quant_method": "fp8"})), "quantization_config"),
            (with("kv_lora_rank", json!(512)), "kv_lora_rank"),
            (with("layer_types", json!(["sliding_attention", "full_attention"])), "layer_types"),
            (with("sliding_window_pattern", json!(6)), "sliding_window_pattern"),
            (with("sliding_window", json!(4096)), "sliding_window"),
            (with("hidden_act", json!("gelu")), "hidden_act"),
        ] {
            let e = model_card_from_config(&c, "config.json", "m").unwrap_err();
            assert!(e.starts_with(&format!("config.json: {key}:")), "{key}: {e}");
        }
        let mut no_mlp = base.clone();
        no_mlp.as_object_mut().unwrap().remove("intermediate_size");
        assert_eq!(
            model_card_from_config(&no_mlp, "config.json", "m").unwrap_err(),
            "config.json: no intermediate_size"
        );
        assert_eq!(
            model_card_from_config(&with("hidden_size", json!("x")), "config.json", "m").unwrap_err(),
            "config.json: hidden_size: expected a whole number, got \"x\""
        );
    }

    /// The config's architecture goes into the card where it names a causal LM: the engines pick
    /// code paths by it, which the served name ("m") cannot tell.
    #[test]
    fn the_configs_architecture_is_kept_for_a_causal_lm() {
        let c = |a: &str| {
            json!({"architectures": [a], "hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
                "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936})
        };
        let card = model_card_from_config(&c("Qwen3ForCausalLM"), "config.json", "m").unwrap();
        assert_eq!(card.architecture.as_deref(), Some("Qwen3ForCausalLM"));
        let other = model_card_from_config(&c("LlavaForConditionalGeneration"), "config.json", "m").unwrap();
        assert_eq!(other.architecture, None);
        assert_eq!(model_card_from_config(&c("ForCausalLM"), "config.json", "m").unwrap().architecture, None);
    }
}
