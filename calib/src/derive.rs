//! Describing a live server as a scenario: the engine section from what the
//! server reports (the flags named by `EngineKind::reported_scheduler_flags`),
//! the model card from the served model's `config.json` (or the one `servesim
//! serve` reports), the hardware card the user names; a `servesim serve --time-scale k`
//! as an engine k times faster (`cost.time_scale`).

use serde_json::{json, Map, Value};
use sim::cards::ModelCard;
use sim::config::EngineKind;

use crate::error::{CalibError, Result};
use crate::server_info::ServerInfo;

/// The most parameters a derived card may count: ten trillion, past any dense model served.
const MAX_DERIVED_PARAMETERS: u64 = 10_000_000_000_000;

/// A model card from a Hugging Face `config.json` (`source` names it in errors and in the card).
///
/// Every key it reads is read strictly: a key present with the wrong type, out of range (a
/// count of zero, or past `u32`), or inconsistent with the others (a head size that is not
/// whole, KV heads that do not divide the attention heads) is an error naming the key and what
/// was expected, never taken as absent or wrapped; and the card it makes passes the checks a
/// scenario's card passes ([`sim::config::check_model_card`]), so what `servesim card` prints
/// is a card `simulate` accepts.
pub fn model_card_from_config(
    c: &Value,
    source: &str,
    id: &str,
    add_bos_token: Option<bool>,
) -> std::result::Result<ModelCard, String> {
    if !c.is_object() {
        return Err(format!("{source}: expected a JSON object (a Hugging Face config.json), got {c}"));
    }
    // A key given as `null` is absent, as transformers reads it.
    let present = |k: &str| c.get(k).filter(|v| !v.is_null());
    let whole = |k: &str| -> std::result::Result<Option<u32>, String> {
        match present(k) {
            None => Ok(None),
            Some(v) => v
                .as_u64()
                .filter(|&n| n >= 1)
                .and_then(|n| u32::try_from(n).ok())
                .map(Some)
                .ok_or_else(|| format!("{source}: {k}: expected a whole number from 1 to {}, got {v}", u32::MAX)),
        }
    };
    let required = |k: &str| whole(k)?.ok_or_else(|| format!("{source}: no {k}"));
    let boolean = |k: &str| -> std::result::Result<Option<bool>, String> {
        match present(k) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(v) => Err(format!("{source}: {k}: expected true or false, got {v}")),
        }
    };
    let string = |k: &str| -> std::result::Result<Option<&str>, String> {
        match present(k) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.as_str())),
            Some(v) => Err(format!("{source}: {k}: expected a string, got {v}")),
        }
    };
    // A multimodal checkpoint keeps its language model's keys under `text_config` (and adds a
    // vision tower whose weights and time a card has no place for).
    if present("text_config").is_some() {
        return Err(format!(
            "{source}: text_config: a multimodal checkpoint (its language model's keys are under text_config, beside a \
             vision tower): not modelled; a card is derived from a text-only causal LM's config.json"
        ));
    }
    // A mixture-of-experts config would be read as a dense model of its `intermediate_size`,
    // with none of its experts' weights or time: refused (write the card by hand, with its `moe`
    // object, as models/model/qwen3-30b-a3b.json does).
    if let Some(k) = ["num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size"]
        .into_iter()
        .find(|k| present(k).is_some())
    {
        return Err(format!(
            "{source}: {k}: a mixture-of-experts model; a card is not derived from its config.json (give a model \
             card with a `moe` object, docs/moe.md)"
        ));
    }
    // What else a dense card cannot describe is refused by the key that says it, not read as a
    // full-attention bf16 model (its KV pool, weights and step times would all be another model's).
    // compressed-tensors checkpoints may give it as `compression_config` (vLLM's
    // `_parse_quant_hf_config` and SGLang's loader fall back to that key).
    if let Some((qk, q)) =
        ["quantization_config", "compression_config"].into_iter().find_map(|k| present(k).map(|q| (k, q)))
    {
        let method = q.get("quant_method").and_then(Value::as_str).unwrap_or("not given");
        return Err(format!(
            "{source}: {qk}: a quantized checkpoint (quant_method {method:?}), whose weights are \
             not its torch_dtype; a card is not derived from its config.json (give a model card with its \
             `quantization` and `quantization_method`, as models/model/llama-3.1-70b-instruct-fp8.json has)"
        ));
    }
    if let Some(k) = ["kv_lora_rank", "q_lora_rank"].into_iter().find(|k| present(k).is_some()) {
        return Err(format!(
            "{source}: {k}: multi-head latent attention (MLA), not modelled: servesim's cards have standard attention"
        ));
    }
    if boolean("is_encoder_decoder")? == Some(true) {
        return Err(format!(
            "{source}: is_encoder_decoder: an encoder-decoder model, not modelled: servesim's cards describe \
             decoder-only text generation"
        ));
    }
    if let Some(t) = present("layer_types") {
        let kinds = t
            .as_array()
            .filter(|a| a.iter().all(Value::is_string))
            .ok_or_else(|| format!("{source}: layer_types: expected a list of layer kinds (strings), got {t}"))?;
        if let Some(other) = kinds.iter().filter_map(Value::as_str).find(|t| *t != "full_attention") {
            return Err(format!(
                "{source}: layer_types: {other:?} layers, not modelled: servesim's cards have full attention in every layer"
            ));
        }
    }
    if let Some(k) = [
        "hybrid_override_pattern",
        "attn_layer_period",
        "attn_layer_indices",
        "sliding_window_pattern",
        "layers_block_type",
        "block_configs",
        "attention_chunk_size",
        "no_rope_layers",
    ]
    .into_iter()
    .find(|k| present(k).is_some())
    {
        return Err(format!(
            "{source}: {k}: layers that differ from one another (other than full attention, or of other sizes), not \
             modelled: servesim's cards have the same full-attention layer throughout"
        ));
    }
    let max_positions = whole("max_position_embeddings")?;
    // `rope_scaling` (Llama 3.1's `llama3`, a `yarn` or `linear` extension): kept, for each
    // engine derives its default context from it by its own rule (`sim::config::context_positions`).
    // transformers 5 writes it as `rope_parameters` (with `rope_theta` inside; `rope_type`
    // "default" for none), which vLLM reads too.
    let rope_key = if present("rope_scaling").is_none() && present("rope_parameters").is_some() {
        "rope_parameters"
    } else {
        "rope_scaling"
    };
    let rope_scaling = match present(rope_key) {
        None => None,
        Some(Value::Object(o))
            if rope_key == "rope_parameters" && o.get("rope_type").and_then(Value::as_str) == Some("default") =>
        {
            None
        }
        Some(Value::Object(o)) => {
            let kind = o
                .get("rope_type")
                .or_else(|| o.get("type"))
                .and_then(Value::as_str)
                .ok_or_else(|| format!("{source}: {rope_key}: no rope_type (or type) string"))?;
            if !sim::cards::ROPE_TYPES.contains(&kind) {
                return Err(format!(
                    "{source}: {rope_key}.rope_type: {kind:?} is not a RoPE scaling type servesim knows; expected one of {}",
                    sim::cards::ROPE_TYPES.join(", ")
                ));
            }
            let factor = match o.get("factor").filter(|v| !v.is_null()) {
                None if sim::cards::ROPE_TYPES_WITH_FACTOR.contains(&kind) => {
                    return Err(format!(
                        "{source}: {rope_key}.factor: missing; a {kind:?} scaling needs its factor (a number of at least 1)"
                    ))
                }
                None => 1.0,
                Some(v) => v.as_f64().filter(|f| f.is_finite() && *f >= 1.0).ok_or_else(|| {
                    format!("{source}: {rope_key}.factor: expected a number of at least 1, got {v}")
                })?,
            };
            let original = match o.get("original_max_position_embeddings").filter(|v| !v.is_null()) {
                None => None,
                Some(v) => {
                    Some(v.as_u64().filter(|&n| n >= 1).and_then(|n| u32::try_from(n).ok()).ok_or_else(|| {
                        format!(
                            "{source}: {rope_key}.original_max_position_embeddings: expected a whole number, got {v}"
                        )
                    })?)
                }
            };
            Some(sim::cards::RopeScaling {
                rope_type: kind.to_string(),
                factor,
                original_max_position_embeddings: original,
            })
        }
        Some(v) => return Err(format!("{source}: {rope_key}: expected an object, got {v}")),
    };
    // A window as long as the model's context is full attention (Qwen2.5's configs give 131072
    // with `use_sliding_window` false); a shorter one in use keeps less KV than a card would.
    if let Some(w) = whole("sliding_window")? {
        let in_use = boolean("use_sliding_window")?.unwrap_or(true);
        if in_use && max_positions.is_none_or(|m| w < m) {
            return Err(format!(
                "{source}: sliding_window: attention over a {w}-token window, not modelled: servesim's cards have \
                 full attention (their KV pools and attention times would be another model's)"
            ));
        }
    }
    // The card's MLP is the gated SiLU of Llama and Qwen (gate, up and down projections): another
    // activation means another MLP (GPT-NeoX's and Phi-2's two-matrix GELU), whose weights and GEMMs
    // the card would misstate.
    if let Some((act_key, act)) = ["hidden_act", "hidden_activation"]
        .into_iter()
        .map(|k| Ok(string(k)?.map(|a| (k, a))))
        .collect::<std::result::Result<Vec<_>, String>>()?
        .into_iter()
        .flatten()
        .find(|(_, a)| !["silu", "swish"].contains(a))
    {
        return Err(format!(
            "{source}: {act_key}: {act:?}: an MLP other than the gated SiLU (SwiGLU) servesim's cards describe, \
             not modelled"
        ));
    }
    // The engines choose code paths by the architecture: a causal LM's name is kept (the card
    // check then refuses a miscased known one, or a MoE one on this dense card); another kind
    // of model is refused.
    let architecture = match present("architectures") {
        None => None,
        Some(a) => {
            let first = a.as_array().and_then(|l| l.first()).and_then(Value::as_str).ok_or_else(|| {
                format!(
                    "{source}: architectures: expected a list of model class names, as [\"LlamaForCausalLM\"], got {a}"
                )
            })?;
            if !first.to_ascii_lowercase().ends_with("forcausallm") {
                return Err(format!(
                    "{source}: architectures: {first:?} is not a causal language model (a ...ForCausalLM class): \
                     servesim's cards describe decoder-only text generation"
                ));
            }
            Some(first.to_string())
        }
    };
    let hidden = required("hidden_size")?;
    let layers = required("num_hidden_layers")?;
    if let Some(n) = present("layer_types").and_then(Value::as_array).map(Vec::len).filter(|&n| n != layers as usize) {
        return Err(format!(
            "{source}: layer_types: {n} layer kinds for num_hidden_layers {layers}: expected one per layer"
        ));
    }
    let heads = required("num_attention_heads")?;
    let kv = whole("num_key_value_heads")?.unwrap_or(heads);
    if kv > heads || heads % kv != 0 {
        return Err(format!(
            "{source}: num_key_value_heads: {kv} with num_attention_heads {heads}: each KV head serves a whole group of \
             query heads (num_attention_heads must be a multiple of it)"
        ));
    }
    let head_dim = match whole("head_dim")? {
        Some(d) => d,
        None if hidden % heads == 0 => hidden / heads,
        None => {
            return Err(format!(
                "{source}: head_dim: not given, and hidden_size {hidden} is not a multiple of num_attention_heads \
                 {heads}: the head size hidden_size / num_attention_heads would not be whole"
            ))
        }
    };
    // The gated MLP's width: no default (a guess of 4 x hidden would time another model).
    let inter = required("intermediate_size")?;
    let vocab = required("vocab_size")?;
    // Absent, transformers takes the config class's default: false for LlamaConfig, MistralConfig,
    // Qwen2Config, Qwen3Config and Phi3Config, true for PretrainedConfig and, among others, Gemma's and
    // Cohere's. (A config.json that transformers saved keeps the key wherever it differs from
    // those defaults.) A model type servesim does not know the default of is asked for the key:
    // the LM head's vocab × hidden weights hang on it.
    let tied = match boolean("tie_word_embeddings")? {
        Some(t) => t,
        None => {
            let kind = string("model_type")?;
            let arch = architecture.as_deref();
            const UNTIED: [(&str, &str); 5] = [
                ("llama", "LlamaForCausalLM"),
                ("mistral", "MistralForCausalLM"),
                ("qwen2", "Qwen2ForCausalLM"),
                ("qwen3", "Qwen3ForCausalLM"),
                ("phi3", "Phi3ForCausalLM"),
            ];
            if UNTIED.iter().any(|(t, a)| kind == Some(*t) || (kind.is_none() && arch == Some(*a))) {
                false
            } else {
                return Err(format!(
                    "{source}: tie_word_embeddings: not given, and the default of model_type {} is not one servesim \
                     knows (false for llama, mistral, qwen2, qwen3 and phi3; transformers' PretrainedConfig default is \
                     true): give it, as the checkpoint has it",
                    kind.map_or("(not given)".to_string(), |k| format!("{k:?}"))
                ));
            }
        }
    };
    // transformers writes `torch_dtype` (before 4.56) or `dtype`. A float32 checkpoint is served
    // in 16 bits: vLLM's `--dtype auto` downcasts it to bfloat16 (`_resolve_auto_dtype`), SGLang's
    // to float16, the same bytes and tensor-core rate; a missing one reads as float32 there too.
    let (dtype_key, given) = match string("torch_dtype")? {
        Some(d) => ("torch_dtype", Some(d)),
        None => ("dtype", string("dtype")?),
    };
    let (dtype, downcast) = match given.unwrap_or("float32") {
        d @ ("bfloat16" | "float16") => (d, false),
        "float32" => ("bfloat16", true),
        d => {
            return Err(format!(
                "{source}: {dtype_key}: {d:?}: expected bfloat16, float16 or float32 (a checkpoint's unquantized \
                 dtype; a quantized one has a quantization_config)"
            ))
        }
    };
    // Llama-style: embeddings (+ untied head) + per layer q, k, v, o, gated MLP, 2 norms; final norm.
    let (h, l, hd, kvh, hh, i, v) =
        (hidden as u64, layers as u64, head_dim as u64, kv as u64, heads as u64, inter as u64, vocab as u64);
    let bias = boolean("attention_bias")?.unwrap_or(false);
    let mlp_bias = boolean("mlp_bias")?.unwrap_or(false);
    let params = (|| {
        let per_layer = h
            .checked_mul(hh)?
            .checked_mul(hd)?
            .checked_mul(2)?
            .checked_add(h.checked_mul(kvh)?.checked_mul(hd)?.checked_mul(2)?)?
            .checked_add(h.checked_mul(i)?.checked_mul(3)?)?
            .checked_add(2 * h)?;
        // Qwen2's q/k/v projections carry biases (always; other Llama-shaped models where the
        // config says `attention_bias`), Qwen3 a q and a k RMSNorm of one head each.
        let arch = architecture.as_deref().unwrap_or("");
        // `attention_bias` (Llama, Mistral, Qwen3) also gives o_proj its bias; `mlp_bias` the gate,
        // up and down projections theirs.
        let qkv_bias = if arch == "Qwen2ForCausalLM" || bias { hh * hd + 2 * kvh * hd } else { 0 };
        let o_bias = if bias { h } else { 0 };
        let mlp_bias = if mlp_bias { 2 * i + h } else { 0 };
        let qk_norm = if arch == "Qwen3ForCausalLM" { 2 * hd } else { 0 };
        let per_layer = per_layer.checked_add(qkv_bias + o_bias + mlp_bias + qk_norm)?;
        v.checked_mul(h)?.checked_mul(if tied { 1 } else { 2 })?.checked_add(l.checked_mul(per_layer)?)?.checked_add(h)
    })()
    .filter(|&p| p <= MAX_DERIVED_PARAMETERS)
    .ok_or_else(|| {
        format!(
            "{source}: hidden_size {hidden}, num_hidden_layers {layers}, intermediate_size {inter}, head_dim {head_dim}, \
             vocab_size {vocab}: more parameters than any model (over {MAX_DERIVED_PARAMETERS})"
        )
    })?;
    let card = ModelCard {
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
        dtype: dtype.to_string(),
        quantization: None,
        quantization_method: None,
        weight_block_size: None,
        max_position_embeddings: max_positions,
        rope_scaling,
        moe: None,
        add_bos_token,
        sources: vec![source.to_string()],
        notes: Some(format!(
            "derived from the checkpoint's config.json (calibrate, servesim card); parameters counted with the Llama \
             formula, with Qwen2's q/k/v biases, the attention and MLP biases a config gives and Qwen3's q/k norms{}",
            if downcast {
                if given.is_some() {
                    "; a float32 checkpoint, served in 16 bits (vLLM's --dtype auto: bfloat16; SGLang's: float16)"
                } else {
                    "; no torch_dtype: read as float32, served in 16 bits (vLLM's --dtype auto: bfloat16; SGLang's: float16)"
                }
            } else {
                ""
            }
        )),
    };
    if add_bos_token.is_none() {
        return Err(format!(
            "{source}: add_bos_token: not known: whether the model's tokenizer puts a BOS token before a text prompt is \
             not in config.json; give the checkpoint's tokenizer_config.json (its add_bos_token) or tokenizer.json (its \
             post_processor) beside it, or state it (servesim card --add-bos-token true|false): true for Llama 3.x and \
             Mistral, false for Qwen2, Qwen2.5 and Qwen3"
        ));
    }
    sim::config::check_model_card(&card).map_err(|e| {
        // Named by the config key the card field came from.
        let key = match e.path.as_str() {
            "model.architecture" => "architectures",
            "model.num_layers" => "num_hidden_layers",
            "model.num_kv_heads" => "num_key_value_heads",
            "model.dtype" => dtype_key,
            p => p.strip_prefix("model.").unwrap_or(p),
        };
        format!("{source}: {key}: {} (as the card's {})", e.message, e.path)
    })?;
    Ok(card)
}

/// Whether a checkpoint's tokenizer puts a BOS token before a text prompt, as transformers decides
/// it (`tokenizer.num_special_tokens_to_add()` of 1 or 0), from its `tokenizer_config.json` and
/// `tokenizer.json` (each `(value, where it was read)`, `None` where the file is not there):
///
/// 1. `tokenizer_config.json`'s `add_bos_token` where it gives one: the Llama, Mistral and Gemma
///    tokenizer classes rebuild their post-processor from it (`LlamaTokenizerFast.update_post_processor`);
///    Qwen's says false.
/// 2. Else `tokenizer.json`'s `post_processor`: a `TemplateProcessing` (alone or in a `Sequence`)
///    whose `single` template begins with a `SpecialToken` before `$A` adds it (Llama 3's
///    `<|begin_of_text|> $A`); none, `ByteLevel` or a template of `$A` alone adds nothing. A
///    template that adds a token after the prompt (an EOS), or more than one before it, or another
///    processor (`BertProcessing`, `RobertaProcessing`), is refused: a card says only whether one
///    BOS comes first.
///
/// `Ok(None)`: neither file says (the caller asks for the field). A key of the wrong type is an
/// error naming the file and the key.
pub fn tokenizer_adds_bos(
    tokenizer_config: Option<(&Value, &str)>,
    tokenizer_json: Option<(&Value, &str)>,
) -> std::result::Result<Option<bool>, String> {
    if let Some((c, file)) = tokenizer_config {
        match c.get("add_bos_token") {
            None | Some(Value::Null) => {}
            Some(Value::Bool(b)) => return Ok(Some(*b)),
            Some(v) => return Err(format!("{file}: add_bos_token: expected true or false, got {v}")),
        }
    }
    let Some((t, file)) = tokenizer_json else { return Ok(None) };
    let Some(pp) = t.get("post_processor") else {
        return Err(format!(
            "{file}: no post_processor key: not a tokenizers tokenizer.json (it writes the key, null where there is none)"
        ));
    };
    // The templates of the post-processor: itself, or those of a `Sequence`.
    let mut templates = Vec::new();
    let mut visit = |p: &Value| -> std::result::Result<(), String> {
        match p.get("type").and_then(Value::as_str) {
            Some("TemplateProcessing") => {
                templates.push(p.get("single").cloned().unwrap_or(Value::Null));
                Ok(())
            }
            Some("ByteLevel") => Ok(()),
            Some(other) => Err(format!(
                "{file}: post_processor: a {other} processor, which servesim does not read: state whether the \
                 tokenizer puts a BOS before a prompt (servesim card --add-bos-token true|false)"
            )),
            None => Err(format!("{file}: post_processor: expected an object with a \"type\", got {p}")),
        }
    };
    match pp {
        Value::Null => {}
        Value::Object(o) if o.get("type").and_then(Value::as_str) == Some("Sequence") => {
            let Some(ps) = o.get("processors").and_then(Value::as_array) else {
                return Err(format!("{file}: post_processor.processors: expected a list of processors"));
            };
            for p in ps {
                visit(p)?;
            }
        }
        p => visit(p)?,
    }
    let mut adds = false;
    for single in templates {
        let Some(items) = single.as_array() else {
            return Err(format!("{file}: post_processor.single: expected a list of template pieces, got {single}"));
        };
        let is_a = |v: &Value| v.get("Sequence").and_then(|s| s.get("id")).and_then(Value::as_str) == Some("A");
        let Some(at) = items.iter().position(is_a) else {
            return Err(format!("{file}: post_processor.single: no $A (the prompt) in the template {single}"));
        };
        let specials = |vs: &[Value]| vs.iter().filter(|v| v.get("SpecialToken").is_some()).count();
        match (specials(&items[..at]), specials(&items[at + 1..])) {
            (0, 0) => {}
            (1, 0) => adds = true,
            (b, e) => {
                return Err(format!(
                    "{file}: post_processor.single: the template adds {b} special token(s) before the prompt and {e} \
                     after it; a card says only whether one BOS comes first"
                ))
            }
        }
    }
    Ok(Some(adds))
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
            || d.sets.iter().any(|s| sim::config::set_path(s) == format!("engine.{k}"))
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
    // `servesim serve --time-scale k` runs its engine k times faster than the scenario it
    // emulates: so does the scenario that describes it (`cost.time_scale`), so that every
    // coefficient's prior, the composed cost and the front end's fixed costs are that engine's,
    // and a fit's coefficients come out on the same footing (docs/calibration.md).
    if let Some(k) = info.servesim_time_scale.filter(|k| *k != 1.0) {
        json["cost"] = json!({"time_scale": k});
    }
    sim::config::refuse_repeated_paths(&d.sets).map_err(CalibError::Scenario)?;
    for s in &d.sets {
        sim::config::apply_set(&mut json, s).map_err(|e| CalibError::Scenario(format!("--set {s}: {e}")))?;
    }
    // The live client sends `vllm bench serve`'s load: a staggered closed loop or a measured
    // window given here would shape the prediction and not the run it is judged against.
    if let Some(field) = json["workload"].as_object().and_then(sim::config::simulate_only_field) {
        return Err(CalibError::Scenario(format!(
            "--set workload.{field}: {}",
            sim::config::LIVE_REFUSES_SIMULATE_ONLY
        )));
    }
    Ok(json)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a tokenizer adds a BOS, as transformers decides it: `tokenizer_config.json`'s
    /// `add_bos_token` first (Mistral's true, Qwen's false), else `tokenizer.json`'s
    /// post-processor (Llama 3's `TemplateProcessing` of `<|begin_of_text|> $A` inside a
    /// `Sequence`); what a card cannot say (an EOS after the prompt, another processor) and a
    /// key of the wrong type are refused naming the file; neither file saying leaves it unknown,
    /// and a card derived without it is refused naming `add_bos_token`.
    #[test]
    fn whether_the_tokenizer_adds_a_bos_is_read_from_its_files() {
        let cfg = |v: Value| v;
        fn tc(v: &Value) -> Option<(&Value, &str)> {
            Some((v, "tokenizer_config.json"))
        }
        fn tj(v: &Value) -> Option<(&Value, &str)> {
            Some((v, "tokenizer.json"))
        }
        let bos = json!({"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}});
        let eos = json!({"SpecialToken": {"id": "<|end_of_text|>", "type_id": 0}});
        let a = json!({"Sequence": {"id": "A", "type_id": 0}});
        let template =
            |single: Value| json!({"type": "TemplateProcessing", "single": single, "pair": [], "special_tokens": {}});
        let llama3 = json!({"post_processor": {"type": "Sequence", "processors": [
            {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": false, "use_regex": true},
            template(json!([bos.clone(), a.clone()]))]}});
        let llama3_config =
            cfg(json!({"bos_token": "<|begin_of_text|>", "tokenizer_class": "PreTrainedTokenizerFast"}));
        assert_eq!(tokenizer_adds_bos(tc(&llama3_config), tj(&llama3)), Ok(Some(true)));
        let mistral = cfg(json!({"add_bos_token": true, "add_eos_token": false, "tokenizer_class": "LlamaTokenizer"}));
        assert_eq!(tokenizer_adds_bos(tc(&mistral), None), Ok(Some(true)));
        let qwen = cfg(json!({"add_bos_token": false, "bos_token": null, "tokenizer_class": "Qwen2Tokenizer"}));
        // The config's flag wins over a post-processor (the Llama tokenizer classes rebuild it).
        assert_eq!(tokenizer_adds_bos(tc(&qwen), tj(&llama3)), Ok(Some(false)));
        assert_eq!(tokenizer_adds_bos(None, tj(&json!({"post_processor": null}))), Ok(Some(false)));
        assert_eq!(tokenizer_adds_bos(None, tj(&json!({"post_processor": {"type": "ByteLevel"}}))), Ok(Some(false)));
        assert_eq!(
            tokenizer_adds_bos(None, tj(&json!({"post_processor": template(json!([a.clone()]))}))),
            Ok(Some(false))
        );
        assert_eq!(tokenizer_adds_bos(tc(&json!({})), None), Ok(None));
        assert_eq!(tokenizer_adds_bos(None, None), Ok(None));
        let e = tokenizer_adds_bos(None, tj(&json!({"post_processor": template(json!([bos, a.clone(), eos]))})))
            .unwrap_err();
        assert!(
            e.starts_with("tokenizer.json: post_processor.single:")
                && e.contains("1 special token(s) before the prompt and 1"),
            "{e}"
        );
        let e = tokenizer_adds_bos(None, tj(&json!({"post_processor": {"type": "BertProcessing"}}))).unwrap_err();
        assert!(e.starts_with("tokenizer.json: post_processor: a BertProcessing processor"), "{e}");
        let e = tokenizer_adds_bos(tc(&json!({"add_bos_token": "yes"})), None).unwrap_err();
        assert_eq!(e, "tokenizer_config.json: add_bos_token: expected true or false, got \"yes\"");
        let e = tokenizer_adds_bos(None, tj(&json!({"model": {}}))).unwrap_err();
        assert!(e.starts_with("tokenizer.json: no post_processor key"), "{e}");
        // A card is derived with what the files say, and refused without it.
        let config = json!({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
            "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336,
            "vocab_size": 128256, "torch_dtype": "bfloat16", "max_position_embeddings": 8192});
        assert_eq!(model_card_from_config(&config, "config.json", "m", Some(true)).unwrap().add_bos_token, Some(true));
        let e = model_card_from_config(&config, "config.json", "m", None).unwrap_err();
        assert!(e.starts_with("config.json: add_bos_token: not known"), "{e}");
    }

    /// `check` and `calibrate` apply `--set` to the scenario they predict with: a ramp or a
    /// measured window there would shape the prediction and not the live run (the second audit of
    /// 2026-12-07: a windowed prediction was judged against an unwindowed run, without a word).
    #[test]
    fn a_ramp_or_window_set_on_a_live_scenario_is_refused() {
        let info = ServerInfo { kind: Some(EngineKind::Vllm), ..Default::default() };
        let opts = |set: &str| DeriveOptions {
            hardware: Some("a100-80gb".into()),
            model: ModelChoice::Card("qwen2.5-7b-instruct".into()),
            log_args: Map::new(),
            sets: vec![set.to_string()],
        };
        let w = json!({"dataset_name": "random", "ignore_eos": true});
        for f in ["concurrency_ramp_s=1", "window_start_s=0", "window_duration_s=1"] {
            let e = derive_scenario(&info, &opts(&format!("workload.{f}")), &w).unwrap_err().to_string();
            assert!(
                e.contains(&format!("--set workload.{}", f.split('=').next().unwrap()))
                    && e.contains("simulate's only"),
                "{e}"
            );
        }
        assert!(derive_scenario(&info, &opts("workload.seed=3"), &w).is_ok());
    }

    /// A mixture-of-experts config is refused by name, not read as a dense model.
    #[test]
    fn a_moe_config_is_refused_naming_its_field() {
        let c = json!({"hidden_size": 2048, "num_hidden_layers": 48, "num_attention_heads": 32,
            "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144, "vocab_size": 151936,
            "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768, "tie_word_embeddings": false});
        let err = model_card_from_config(&c, "config.json", "m", Some(false)).unwrap_err();
        assert!(err.contains("num_experts") && err.contains("mixture-of-experts"), "{err}");
        let mut dense = c.clone();
        for k in ["num_experts", "num_experts_per_tok", "moe_intermediate_size"] {
            dense.as_object_mut().unwrap().remove(k);
        }
        assert!(model_card_from_config(&dense, "config.json", "m", Some(false)).is_ok());
    }

    /// The parameter count of a derived card is the built-in card's for the same model: Qwen2's
    /// q/k/v biases and Qwen3's q/k norms counted (the cards audit of 2026-12-06: a derived
    /// Qwen2.5-7B came out 129,024 parameters short, "just outside" the judged sizes).
    #[test]
    fn derived_parameter_counts_equal_the_built_in_cards() {
        let models = sim::builtin::models().unwrap();
        let builtin = |id: &str| models.iter().find(|m| m.id == id).unwrap().num_parameters;
        let qwen25 = json!({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "num_hidden_layers": 28,
            "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
            "max_position_embeddings": 32768, "torch_dtype": "bfloat16", "tie_word_embeddings": false});
        assert_eq!(
            model_card_from_config(&qwen25, "c", "m", Some(false)).unwrap().num_parameters,
            builtin("qwen2.5-7b-instruct")
        );
        let qwen3 = json!({"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "head_dim": 128,
            "intermediate_size": 12288, "max_position_embeddings": 40960, "num_attention_heads": 32,
            "num_hidden_layers": 36, "num_key_value_heads": 8, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
            "vocab_size": 151936});
        assert_eq!(model_card_from_config(&qwen3, "c", "m", Some(false)).unwrap().num_parameters, builtin("qwen3-8b"));
    }

    /// A config's `rope_scaling` is kept, and each engine derives its default context from it by
    /// its own rule (the cards audit of 2026-12-06: `servesim card` had dropped it, so a YaRN
    /// Qwen2.5 ran at 32,768 positions where vLLM serves 131,072, and a linear 4x extension of
    /// 4,096 positions was refused at 16,384, which both engines accept).
    #[test]
    fn rope_scaling_extends_the_context_by_each_engines_rule() {
        use sim::config::{context_positions, EngineKind};
        let qwen = json!({"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
            "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "max_position_embeddings": 32768,
            "model_type": "qwen2", "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}});
        let card = model_card_from_config(&qwen, "config.json", "m", Some(false)).unwrap();
        assert_eq!(context_positions(&card, EngineKind::Vllm), Some(131_072));
        assert_eq!(context_positions(&card, EngineKind::Sglang), Some(32_768));
        let mut linear = qwen.clone();
        linear["max_position_embeddings"] = json!(4096);
        linear["rope_scaling"] = json!({"type": "linear", "factor": 4.0});
        let card = model_card_from_config(&linear, "config.json", "m", Some(false)).unwrap();
        assert_eq!(context_positions(&card, EngineKind::Vllm), Some(16_384));
        assert_eq!(context_positions(&card, EngineKind::Sglang), Some(16_384));
        // Llama 3.1's own scaling leaves its 131,072 positions as they are on both engines.
        let mut llama = qwen.clone();
        llama["max_position_embeddings"] = json!(131_072);
        llama["rope_scaling"] = json!({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192,
            "low_freq_factor": 1.0, "high_freq_factor": 4.0});
        let card = model_card_from_config(&llama, "config.json", "m", Some(false)).unwrap();
        assert_eq!(context_positions(&card, EngineKind::Vllm), Some(131_072));
        assert_eq!(context_positions(&card, EngineKind::Sglang), Some(131_072));
        // A malformed one is an error naming the key.
        let mut bad = qwen.clone();
        bad["rope_scaling"] = json!({"type": "yarn", "factor": "four"});
        let e = model_card_from_config(&bad, "config.json", "m", Some(false)).unwrap_err();
        assert!(e.contains("rope_scaling.factor"), "{e}");
        // A type neither Hugging Face nor vLLM knows, and a linear scaling without its factor,
        // are refused (an audit, 2026-12-07: "bogus" with factor 4 extended the context fourfold,
        // and a missing factor was read as 1).
        bad["rope_scaling"] = json!({"rope_type": "bogus", "factor": 4.0});
        let e = model_card_from_config(&bad, "config.json", "m", Some(false)).unwrap_err();
        assert!(e.contains("rope_scaling.rope_type") && e.contains("\"bogus\""), "{e}");
        bad["rope_scaling"] = json!({"rope_type": "linear"});
        let e = model_card_from_config(&bad, "config.json", "m", Some(false)).unwrap_err();
        assert!(e.contains("rope_scaling.factor: missing"), "{e}");
        bad["rope_scaling"] = json!({"type": "mrope", "mrope_section": [16, 24, 24]});
        assert!(model_card_from_config(&bad, "config.json", "m", Some(false)).is_ok());
    }

    /// What a dense card cannot describe is refused naming the config key; what only looks like it
    /// (Qwen2.5's window as long as its context, unused) is not.
    #[test]
    fn configs_a_card_cannot_describe_are_refused_naming_the_key() {
        let base = json!({"hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
            "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "max_position_embeddings": 32768,
            "model_type": "qwen2"});
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
        assert!(model_card_from_config(&qwen25, "config.json", "m", Some(false)).is_ok());
        assert!(model_card_from_config(&with("sliding_window", json!(null)), "config.json", "m", Some(false)).is_ok());
        assert!(model_card_from_config(&with("hidden_act", json!("silu")), "config.json", "m", Some(false)).is_ok());
        assert!(model_card_from_config(
            &with("layer_types", json!(vec!["full_attention"; 28])),
            "config.json",
            "m",
            Some(false)
        )
        .is_ok());
        for (c, key) in [
            (with("quantization_config", json!({"quant_method": "fp8"})), "quantization_config"),
            (with("kv_lora_rank", json!(512)), "kv_lora_rank"),
            (with("layer_types", json!(["sliding_attention", "full_attention"])), "layer_types"),
            (with("sliding_window_pattern", json!(6)), "sliding_window_pattern"),
            (with("sliding_window", json!(4096)), "sliding_window"),
            (with("hidden_act", json!("gelu")), "hidden_act"),
            // The audit of 2026-12-07: each of these was read as the dense bf16 Llama it is not.
            (with("compression_config", json!({"quant_method": "compressed-tensors"})), "compression_config"),
            (with("hidden_activation", json!("gelu_pytorch_tanh")), "hidden_activation"),
            (with("attention_chunk_size", json!(8192)), "attention_chunk_size"),
            (with("attn_layer_indices", json!([3, 7])), "attn_layer_indices"),
            (with("is_encoder_decoder", json!(true)), "is_encoder_decoder"),
            (with("layer_types", json!(["full_attention", "full_attention"])), "layer_types"),
            (with("model_type", json!("cohere")), "tie_word_embeddings"),
        ] {
            let e = model_card_from_config(&c, "config.json", "m", Some(false)).unwrap_err();
            assert!(e.starts_with(&format!("config.json: {key}:")), "{key}: {e}");
        }
        let e =
            model_card_from_config(&with("head_dim", json!(u32::MAX)), "config.json", "m", Some(false)).unwrap_err();
        assert!(e.contains("head_dim 4294967295") && e.contains("more parameters than any model"), "{e}");
        let mut no_mlp = base.clone();
        no_mlp.as_object_mut().unwrap().remove("intermediate_size");
        assert_eq!(
            model_card_from_config(&no_mlp, "config.json", "m", Some(false)).unwrap_err(),
            "config.json: no intermediate_size"
        );
        assert_eq!(
            model_card_from_config(&with("hidden_size", json!("x")), "config.json", "m", Some(false)).unwrap_err(),
            "config.json: hidden_size: expected a whole number from 1 to 4294967295, got \"x\""
        );
    }

    /// transformers 5's `rope_parameters` is read as `rope_scaling` is (until 2026-12-07 it was
    /// not read, and a YaRN-extended model ran at its unscaled context); `rope_type` "default"
    /// is none. An absent `tie_word_embeddings` is the config class's default where servesim
    /// knows it, and the attention and MLP biases a config gives are counted (o_proj's and the
    /// MLP's were not).
    #[test]
    fn rope_parameters_ties_and_biases_are_read() {
        use sim::config::{context_positions, EngineKind};
        let base = json!({"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28,
            "num_attention_heads": 28, "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064,
            "max_position_embeddings": 32768});
        let card = |c: &Value| model_card_from_config(c, "config.json", "m", Some(false));
        let mut v5 = base.clone();
        v5["rope_parameters"] = json!({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
            "rope_theta": 1000000.0});
        assert_eq!(context_positions(&card(&v5).unwrap(), EngineKind::Vllm), Some(131_072));
        v5["rope_parameters"] = json!({"rope_type": "default", "rope_theta": 1000000.0});
        assert_eq!(card(&v5).unwrap().rope_scaling, None);
        v5["rope_parameters"] = json!({"rope_type": "yarn", "factor": "four"});
        assert!(card(&v5).unwrap_err().contains("rope_parameters.factor"));
        // Ties: llama-family types untied by default, others asked for, a given value kept.
        let plain = card(&base).unwrap();
        assert_eq!(plain.tie_word_embeddings, Some(false));
        let mut gemma = base.clone();
        gemma["model_type"] = json!("gemma");
        assert!(card(&gemma).unwrap_err().starts_with("config.json: tie_word_embeddings: not given"));
        gemma["tie_word_embeddings"] = json!(true);
        assert_eq!(plain.num_parameters - card(&gemma).unwrap().num_parameters, 152_064 * 3584);
        // Biases: o_proj's with attention_bias, the MLP's with mlp_bias.
        let (h, i, l) = (3584u64, 18944u64, 28u64);
        let mut b = base.clone();
        b["model_type"] = json!("llama");
        let llama = card(&b).unwrap().num_parameters;
        b["attention_bias"] = json!(true);
        assert_eq!(card(&b).unwrap().num_parameters - llama, l * (28 * 128 + 2 * 4 * 128 + h));
        b["attention_bias"] = json!(false);
        b["mlp_bias"] = json!(true);
        assert_eq!(card(&b).unwrap().num_parameters - llama, l * (2 * i + h));
    }

    /// The config's architecture goes into the card where it names a causal LM: the engines pick
    /// code paths by it, which the served name ("m") cannot tell.
    #[test]
    fn the_configs_architecture_is_kept_for_a_causal_lm() {
        let c = |a: &str| {
            json!({"architectures": [a], "hidden_size": 4096, "num_hidden_layers": 36, "num_attention_heads": 32,
                "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 12288, "vocab_size": 151936,
                "tie_word_embeddings": false})
        };
        let card = model_card_from_config(&c("Qwen3ForCausalLM"), "config.json", "m", Some(false)).unwrap();
        assert_eq!(card.architecture.as_deref(), Some("Qwen3ForCausalLM"));
        // Another kind of model, or no name before ForCausalLM, is refused naming the key.
        for a in ["LlavaForConditionalGeneration", "MistralForSequenceClassification"] {
            let e = model_card_from_config(&c(a), "config.json", "m", Some(false)).unwrap_err();
            assert!(e.starts_with("config.json: architectures: ") && e.contains("not a causal language model"), "{e}");
        }
        for a in ["ForCausalLM", "llamaforcausallm", "MixtralForCausalLM"] {
            let e = model_card_from_config(&c(a), "config.json", "m", Some(false)).unwrap_err();
            assert!(
                e.starts_with("config.json: architectures: ") && e.ends_with("(as the card's model.architecture)"),
                "{a}: {e}"
            );
        }
    }

    /// Every key is read strictly (the fuzzing of 2026-12-06): a wrong type, a count of zero or past
    /// u32, a head size that is not whole, KV heads that do not divide the heads, an arithmetic
    /// overflow are errors naming the key, never read as absent, wrapped or truncated; a float32
    /// checkpoint is served in 16 bits; what the card check refuses is refused here, not at
    /// `simulate`.
    #[test]
    fn every_key_is_read_strictly() {
        let base = json!({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "num_hidden_layers": 32,
            "num_attention_heads": 32, "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
            "torch_dtype": "bfloat16", "max_position_embeddings": 131072, "tie_word_embeddings": false});
        let card = |c: &Value| model_card_from_config(c, "config.json", "m", Some(false));
        let good = card(&base).unwrap();
        assert_eq!(
            (good.num_layers, good.num_kv_heads, good.head_dim, good.num_parameters),
            (32, 8, 128, 8_030_261_248)
        );
        let with = |k: &str, v: Value| {
            let mut c = base.clone();
            c[k] = v;
            c
        };
        for (k, v) in [
            ("num_hidden_layers", json!(4294967297u64)),
            ("hidden_size", json!(4294971392u64)),
            ("num_hidden_layers", json!(0)),
            ("num_key_value_heads", json!("8")),
            ("num_key_value_heads", json!(-8)),
            ("num_key_value_heads", json!(8.0)),
            ("num_key_value_heads", json!(5)),
            ("num_key_value_heads", json!(64)),
            ("head_dim", json!("256")),
            ("tie_word_embeddings", json!("true")),
            ("tie_word_embeddings", json!(1)),
            ("torch_dtype", json!(16)),
            ("torch_dtype", json!("auto")),
            ("torch_dtype", json!("float8_e4m3fn")),
            ("max_position_embeddings", json!("131072")),
            ("hidden_act", json!(3)),
            ("sliding_window", json!("4096")),
            ("sliding_window", json!(-1)),
            ("layer_types", json!("sliding_attention")),
            ("architectures", json!("LlamaForCausalLM")),
            ("architectures", json!([5])),
            ("text_config", json!({"hidden_size": 4096})),
            ("block_configs", json!([{}])),
        ] {
            let e = card(&with(k, v.clone())).unwrap_err();
            assert!(e.starts_with(&format!("config.json: {k}: ")), "{k} = {v}: {e}");
        }
        // 4096 / 48 is not a whole head size.
        let e = card(&with("num_attention_heads", json!(48))).unwrap_err();
        assert!(e.starts_with("config.json: head_dim: not given"), "{e}");
        assert_eq!(
            card(&with("num_attention_heads", json!(48)).tap(|c| c["head_dim"] = json!(128))).unwrap().head_dim,
            128
        );
        // Products past u64.
        let e = card(
            &with("hidden_size", json!(4_000_000_000u64)).tap(|c| c["intermediate_size"] = json!(4_000_000_000u64)),
        )
        .unwrap_err();
        assert!(e.contains("more parameters than any model"), "{e}");
        // What only the card check knows (parameters far over the layers' count cannot arise here;
        // a vocabulary of zero can).
        assert!(card(&with("vocab_size", json!(0))).unwrap_err().starts_with("config.json: vocab_size: "));
        // float32 (or none): 16 bits, as the engines serve it; torch_dtype null falls back to dtype.
        let f32 = card(&with("torch_dtype", json!("float32"))).unwrap();
        assert_eq!(f32.dtype, "bfloat16");
        assert!(f32.notes.as_deref().unwrap().contains("a float32 checkpoint, served in 16 bits"));
        let mut none = base.clone();
        none.as_object_mut().unwrap().remove("torch_dtype");
        assert_eq!(card(&none).unwrap().dtype, "bfloat16");
        let mut new_key = with("torch_dtype", Value::Null);
        new_key["dtype"] = json!("float16");
        assert_eq!(card(&new_key).unwrap().dtype, "float16");
        // Not an object.
        for c in [json!([1]), Value::Null, json!("x")] {
            assert!(card(&c).unwrap_err().starts_with("config.json: expected a JSON object"));
        }
    }

    /// `json!` values edited in place, in an expression.
    trait Tap: Sized {
        fn tap(self, f: impl FnOnce(&mut Self)) -> Self;
    }
    impl Tap for Value {
        fn tap(mut self, f: impl FnOnce(&mut Self)) -> Self {
            f(&mut self);
            self
        }
    }
}
