//! Scenario files: the user-facing, versioned boundary of the simulator.
//!
//! A scenario is JSON, strict (an unknown field is an error naming its
//! path), with a `version`. [`parse_scenario`] reads one, [`apply_set`]
//! applies a `--set PATH=VALUE` override to the raw JSON first, and
//! [`resolve`] checks every field and turns the scenario into a [`SimSpec`]:
//! engine configuration with the engine's own defaults filled in, cards,
//! cost model and workload parameters.
//!
//! Engine defaults follow `../shared/reference/engine-semantics.md` §4 for
//! the modelled version and GPU.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

use crate::cards::{GpuCard, ModelCard};
use crate::cost::{CoefficientSource, CostCoefficients, CostModel, PriorEfficiencies, COEFFICIENT_NAMES};
use crate::engine::sglang::{SchedulePolicy, SglangConfig};
use crate::engine::vllm::{Policy, VllmConfig};
use crate::engine::Version;
use crate::workload::{Dataset, OutputLenDist, TraceRow, WorkloadParams};

/// The scenario format this build reads.
pub const SCENARIO_FORMAT_VERSION: u32 = 1;
/// The vLLM releases whose scheduling is modelled.
pub const VLLM_MIN: Version = Version::new(0, 11, 0);
pub const VLLM_MAX: Version = Version::new(0, 33, 0);
/// The default vLLM version: current behaviour.
pub const VLLM_DEFAULT: &str = "0.33.0";
/// The SGLang releases whose scheduling is modelled.
pub const SGLANG_MIN: Version = Version::new(0, 4, 10);
pub const SGLANG_MAX: Version = Version::new(0, 5, 23);
pub const SGLANG_DEFAULT: &str = "0.5.23";

/// An error in a scenario, naming the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigError {
    /// Dotted path of the field (`engine.max_num_seqs`), or `""` for the whole file.
    pub path: String,
    pub message: String,
}

impl ConfigError {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError { path: path.into(), message: message.into() }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.message)
        } else {
            write!(f, "{}: {}", self.path, self.message)
        }
    }
}

impl std::error::Error for ConfigError {}

type Result<T> = std::result::Result<T, ConfigError>;

/// Which engine a scenario models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    Vllm,
    Sglang,
}

/// The `engine` section: the engine's flags in snake case.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSection {
    pub kind: Option<EngineKind>,
    /// Engine release whose behaviour is modelled (`0.28.0`).
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub max_num_seqs: Option<u32>,
    #[serde(default)]
    pub max_num_batched_tokens: Option<u32>,
    #[serde(default)]
    pub long_prefill_token_threshold: Option<u32>,
    #[serde(default)]
    pub block_size: Option<u32>,
    #[serde(default)]
    pub enable_prefix_caching: Option<bool>,
    #[serde(default)]
    pub gpu_memory_utilization: Option<f64>,
    #[serde(default)]
    pub num_gpu_blocks_override: Option<u32>,
    /// KV capacity in tokens as the start-up log prints it (`GPU KV cache size: N tokens`).
    #[serde(default)]
    pub kv_cache_tokens: Option<u64>,
    #[serde(default)]
    pub max_model_len: Option<u32>,
    #[serde(default)]
    pub policy: Option<Policy>,
    // ---- SGLang flags ----
    #[serde(default)]
    pub max_running_requests: Option<u32>,
    /// -1 disables chunked prefill.
    #[serde(default)]
    pub chunked_prefill_size: Option<i64>,
    #[serde(default)]
    pub max_prefill_tokens: Option<u32>,
    #[serde(default)]
    pub page_size: Option<u32>,
    #[serde(default)]
    pub schedule_policy: Option<String>,
    #[serde(default)]
    pub mem_fraction_static: Option<f64>,
    #[serde(default)]
    pub max_total_tokens: Option<u64>,
    #[serde(default)]
    pub schedule_conservativeness: Option<f64>,
    #[serde(default)]
    pub disable_radix_cache: Option<bool>,
    #[serde(default)]
    pub enable_mixed_chunk: Option<bool>,
    #[serde(default)]
    pub disable_overlap_schedule: Option<bool>,
    #[serde(default)]
    pub context_length: Option<u32>,
}

/// The vLLM flags of the `engine` section, with their SGLang counterparts.
const VLLM_ONLY: &[(&str, &str)] = &[
    ("max_num_seqs", "max_running_requests"),
    ("max_num_batched_tokens", "chunked_prefill_size (and max_prefill_tokens)"),
    ("long_prefill_token_threshold", "chunked_prefill_size"),
    ("block_size", "page_size"),
    ("enable_prefix_caching", "disable_radix_cache"),
    ("gpu_memory_utilization", "mem_fraction_static"),
    ("num_gpu_blocks_override", "max_total_tokens"),
    ("kv_cache_tokens", "max_total_tokens"),
    ("max_model_len", "context_length"),
    ("policy", "schedule_policy"),
];

/// The SGLang flags, with their vLLM counterparts.
const SGLANG_ONLY: &[(&str, &str)] = &[
    ("max_running_requests", "max_num_seqs"),
    ("chunked_prefill_size", "max_num_batched_tokens"),
    ("max_prefill_tokens", "max_num_batched_tokens"),
    ("page_size", "block_size"),
    ("schedule_policy", "policy"),
    ("mem_fraction_static", "gpu_memory_utilization"),
    ("max_total_tokens", "kv_cache_tokens or num_gpu_blocks_override"),
    ("schedule_conservativeness", "(none)"),
    ("disable_radix_cache", "enable_prefix_caching"),
    ("enable_mixed_chunk", "(always mixed)"),
    ("disable_overlap_schedule", "(not modelled for vLLM)"),
    ("context_length", "max_model_len"),
];

impl EngineSection {
    fn is_set(&self, field: &str) -> bool {
        match field {
            "max_num_seqs" => self.max_num_seqs.is_some(),
            "max_num_batched_tokens" => self.max_num_batched_tokens.is_some(),
            "long_prefill_token_threshold" => self.long_prefill_token_threshold.is_some(),
            "block_size" => self.block_size.is_some(),
            "enable_prefix_caching" => self.enable_prefix_caching.is_some(),
            "gpu_memory_utilization" => self.gpu_memory_utilization.is_some(),
            "num_gpu_blocks_override" => self.num_gpu_blocks_override.is_some(),
            "kv_cache_tokens" => self.kv_cache_tokens.is_some(),
            "max_model_len" => self.max_model_len.is_some(),
            "policy" => self.policy.is_some(),
            "max_running_requests" => self.max_running_requests.is_some(),
            "chunked_prefill_size" => self.chunked_prefill_size.is_some(),
            "max_prefill_tokens" => self.max_prefill_tokens.is_some(),
            "page_size" => self.page_size.is_some(),
            "schedule_policy" => self.schedule_policy.is_some(),
            "mem_fraction_static" => self.mem_fraction_static.is_some(),
            "max_total_tokens" => self.max_total_tokens.is_some(),
            "schedule_conservativeness" => self.schedule_conservativeness.is_some(),
            "disable_radix_cache" => self.disable_radix_cache.is_some(),
            "enable_mixed_chunk" => self.enable_mixed_chunk.is_some(),
            "disable_overlap_schedule" => self.disable_overlap_schedule.is_some(),
            "context_length" => self.context_length.is_some(),
            _ => false,
        }
    }

    /// A flag of the other engine is an error that names the right one.
    fn check_flags_of(&self, kind: EngineKind) -> Result<()> {
        let (foreign, this, other) = match kind {
            EngineKind::Vllm => (SGLANG_ONLY, "vllm", "SGLang"),
            EngineKind::Sglang => (VLLM_ONLY, "sglang", "vLLM"),
        };
        for (flag, counterpart) in foreign {
            if self.is_set(flag) {
                return Err(ConfigError::new(
                    format!("engine.{flag}"),
                    format!(
                        "is an {other} flag but engine.kind is \"{this}\"; the {this} counterpart is {counterpart}"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// `request_rate`: a number of requests per second, or `"inf"`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestRate(pub Option<f64>);

impl Serialize for RequestRate {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        match self.0 {
            Some(r) => s.serialize_f64(r),
            None => s.serialize_str("inf"),
        }
    }
}

impl<'de> Deserialize<'de> for RequestRate {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = RequestRate;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a positive number of requests per second, or \"inf\"")
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> std::result::Result<RequestRate, E> {
                if v.is_infinite() && v > 0.0 {
                    Ok(RequestRate(None))
                } else if v > 0.0 && v.is_finite() {
                    Ok(RequestRate(Some(v)))
                } else {
                    Err(E::custom(format!("must be > 0 requests per second or \"inf\" (got {v})")))
                }
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> std::result::Result<RequestRate, E> {
                self.visit_f64(v as f64)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> std::result::Result<RequestRate, E> {
                self.visit_f64(v as f64)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> std::result::Result<RequestRate, E> {
                match v {
                    "inf" | "Infinity" | "infinity" => Ok(RequestRate(None)),
                    _ => v
                        .parse::<f64>()
                        .map_err(|_| E::custom(format!("expected a number or \"inf\", got {v:?}")))
                        .and_then(|x| self.visit_f64(x)),
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// The dataset generator (`--dataset-name`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DatasetName {
    Random,
    PrefixRepetition,
    Trace,
}

/// The `workload` section: `vllm bench serve`'s flags in snake case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadSection {
    pub dataset_name: DatasetName,
    #[serde(default)]
    pub random_input_len: Option<u32>,
    #[serde(default)]
    pub random_output_len: Option<u32>,
    #[serde(default)]
    pub random_range_ratio: Option<f64>,
    #[serde(default)]
    pub random_prefix_len: Option<u32>,
    #[serde(default)]
    pub prefix_repetition_prefix_len: Option<u32>,
    #[serde(default)]
    pub prefix_repetition_suffix_len: Option<u32>,
    #[serde(default)]
    pub prefix_repetition_num_prefixes: Option<u32>,
    #[serde(default)]
    pub prefix_repetition_output_len: Option<u32>,
    #[serde(default)]
    pub num_prompts: Option<u32>,
    #[serde(default)]
    pub num_warmups: Option<u32>,
    #[serde(default)]
    pub max_concurrency: Option<u32>,
    #[serde(default)]
    pub request_rate: Option<RequestRate>,
    #[serde(default)]
    pub burstiness: Option<f64>,
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Where EOS ends outputs when `ignore_eos` is false.
    #[serde(default)]
    pub output_len_dist: Option<OutputLenDist>,
    /// Send `vllm bench serve`'s initial test request (the first prompt) before the run.
    #[serde(default)]
    pub initial_test_request: Option<bool>,
    #[serde(default)]
    pub seed: Option<u64>,
    /// Path of a CSV or JSONL trace (read by the command line, relative to the scenario file).
    #[serde(default)]
    pub trace: Option<String>,
}

/// The `cost` section.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CostSection {
    /// A fitted profile (JSON, from `servesim calibrate`), relative to the scenario file.
    #[serde(default)]
    pub profile: Option<String>,
    /// Coefficients set by hand; they override the profile and the prior.
    #[serde(default)]
    pub coefficients: Option<CostCoefficients>,
    /// Efficiency factors of the roofline prior.
    #[serde(default)]
    pub prior: Option<PriorEfficiencies>,
}

/// A scenario file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Scenario {
    pub version: u32,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
    pub engine: EngineSection,
    /// A card id from `models/model/`, or an inline card.
    pub model: Value,
    /// A card id from `models/gpu/`, or an inline card.
    pub hardware: Value,
    pub workload: WorkloadSection,
    #[serde(default)]
    pub cost: CostSection,
}

/// Deserializes strictly, reporting the path of the first bad field.
pub fn from_value<T: serde::de::DeserializeOwned>(v: Value, prefix: &str) -> Result<T> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let inner = e.path().to_string();
        let path = match (prefix.is_empty(), inner.as_str()) {
            (true, _) => inner.clone(),
            (false, ".") => prefix.to_string(),
            (false, _) => format!("{prefix}.{inner}"),
        };
        let path = if path == "." { String::new() } else { path };
        ConfigError::new(path, e.into_inner().to_string())
    })
}

/// Parses scenario JSON text.
pub fn parse_scenario(text: &str) -> Result<Scenario> {
    let v: Value = serde_json::from_str(text).map_err(|e| ConfigError::new("", format!("not valid JSON: {e}")))?;
    from_value(v, "")
}

/// Applies `--set PATH=VALUE` to raw scenario JSON. `VALUE` is parsed as
/// JSON if it can be (numbers, booleans, objects), else taken as a string.
pub fn apply_set(root: &mut Value, assignment: &str) -> Result<()> {
    let (path, raw) = assignment
        .split_once('=')
        .ok_or_else(|| ConfigError::new("--set", format!("expected PATH=VALUE, got {assignment:?}")))?;
    let path = path.trim();
    if path.is_empty() {
        return Err(ConfigError::new("--set", format!("empty path in {assignment:?}")));
    }
    let value: Value = serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.to_string()));
    let mut cur = root;
    let parts: Vec<&str> = path.split('.').collect();
    for (i, part) in parts.iter().enumerate() {
        let obj = match cur {
            Value::Object(m) => m,
            _ => {
                return Err(ConfigError::new(
                    parts[..i].join("."),
                    format!("is not an object, so it has no field {part:?}"),
                ))
            }
        };
        if i + 1 == parts.len() {
            obj.insert((*part).to_string(), value);
            return Ok(());
        }
        cur = obj.entry((*part).to_string()).or_insert_with(|| Value::Object(Default::default()));
        if cur.is_null() {
            *cur = Value::Object(Default::default());
        }
    }
    Ok(())
}

/// What the command line loads from disk for a scenario.
#[derive(Clone, Debug, Default)]
pub struct Resources {
    pub models: Vec<ModelCard>,
    pub gpus: Vec<GpuCard>,
    /// The profile named by `cost.profile`, loaded.
    pub profile: Option<CostCoefficients>,
    /// The rows of `workload.trace`, loaded.
    pub trace: Option<Vec<TraceRow>>,
}

/// How the KV pool's size was found.
#[derive(Clone, Debug, PartialEq)]
pub struct KvSizing {
    /// `num_gpu_blocks_override`, `kv_cache_tokens`, or `gpu_memory_utilization`.
    pub source: &'static str,
    pub kv_bytes_per_token: u64,
    /// Only when derived from memory: the accounting.
    pub memory: Option<MemoryAccount>,
}

/// The memory accounting behind a derived KV pool (bytes).
#[derive(Clone, Debug, PartialEq)]
pub struct MemoryAccount {
    pub total: u64,
    pub requested: u64,
    pub weights: u64,
    pub activation_peak: u64,
    pub non_torch: u64,
    pub kv: u64,
}

/// The resolved engine.
#[derive(Clone, Debug, PartialEq)]
pub enum EngineSpec {
    Vllm(VllmConfig),
    Sglang(SglangConfig),
}

impl EngineSpec {
    pub fn kind(&self) -> &'static str {
        match self {
            EngineSpec::Vllm(_) => "vllm",
            EngineSpec::Sglang(_) => "sglang",
        }
    }

    pub fn version(&self) -> Version {
        match self {
            EngineSpec::Vllm(c) => c.version,
            EngineSpec::Sglang(c) => c.version,
        }
    }

    /// KV allocation granularity in tokens (block or page size).
    pub fn kv_granularity(&self) -> u32 {
        match self {
            EngineSpec::Vllm(c) => c.block_size,
            EngineSpec::Sglang(c) => c.page_size,
        }
    }

    pub fn kv_capacity_tokens(&self) -> u64 {
        match self {
            EngineSpec::Vllm(c) => c.kv_capacity_tokens(),
            EngineSpec::Sglang(c) => c.max_total_tokens,
        }
    }

    /// `max_num_seqs` / `max_running_requests`.
    pub fn max_running(&self) -> u32 {
        match self {
            EngineSpec::Vllm(c) => c.max_num_seqs,
            EngineSpec::Sglang(c) => c.max_running_requests,
        }
    }
}

/// A scenario, checked and resolved: everything a run needs.
#[derive(Clone, Debug, PartialEq)]
pub struct SimSpec {
    pub name: Option<String>,
    pub engine: EngineSpec,
    pub model: ModelCard,
    pub gpu: GpuCard,
    pub cost: CostModel,
    pub workload: WorkloadParams,
    pub kv_sizing: KvSizing,
}

fn resolve_card<T: serde::de::DeserializeOwned + Clone>(
    v: &Value,
    field: &str,
    known: &[T],
    id_of: impl Fn(&T) -> &str,
    folder: &str,
) -> Result<T> {
    match v {
        Value::String(name) => known.iter().find(|c| id_of(c) == name).cloned().ok_or_else(|| {
            let ids: Vec<&str> = known.iter().map(&id_of).collect();
            ConfigError::new(field, format!("no card named {name:?} in {folder}; known: {}", ids.join(", ")))
        }),
        Value::Object(_) => from_value(v.clone(), field),
        _ => Err(ConfigError::new(
            field,
            format!("expected a card id (string) from {folder} or an inline card (object)"),
        )),
    }
}

fn positive(path: &str, v: u32) -> Result<u32> {
    if v == 0 {
        Err(ConfigError::new(path, "must be at least 1 (got 0)"))
    } else {
        Ok(v)
    }
}

/// Checks a scenario and resolves it against the loaded resources.
pub fn resolve(s: &Scenario, res: &Resources) -> Result<SimSpec> {
    if s.version != SCENARIO_FORMAT_VERSION {
        return Err(ConfigError::new(
            "version",
            format!("this servesim reads scenario format {SCENARIO_FORMAT_VERSION}; the file says {}", s.version),
        ));
    }
    let model: ModelCard = resolve_card(&s.model, "model", &res.models, |c: &ModelCard| &c.id, "models/model/")?;
    let gpu: GpuCard = resolve_card(&s.hardware, "hardware", &res.gpus, |c: &GpuCard| &c.id, "models/gpu/")?;
    if model.dtype_bytes().is_none() {
        return Err(ConfigError::new(
            "model.dtype",
            format!("unknown dtype {:?}; expected bfloat16, float16, float32 or fp8", model.dtype),
        ));
    }
    for (f, v) in [
        ("model.num_layers", model.num_layers),
        ("model.num_kv_heads", model.num_kv_heads),
        ("model.head_dim", model.head_dim),
        ("model.num_attention_heads", model.num_attention_heads),
    ] {
        positive(f, v)?;
    }
    if !(gpu.memory_bandwidth_bytes_per_s > 0.0 && gpu.dense_bf16_flops > 0.0 && gpu.memory_bytes > 0) {
        return Err(ConfigError::new(
            "hardware",
            "memory_bytes, memory_bandwidth_bytes_per_s and dense_bf16_flops must be > 0",
        ));
    }

    let kind =
        s.engine.kind.ok_or_else(|| ConfigError::new("engine.kind", "missing; expected \"vllm\" or \"sglang\""))?;
    s.engine.check_flags_of(kind)?;
    let workload = resolve_workload(&s.workload, res)?;
    let (engine, kv_sizing) = match kind {
        EngineKind::Vllm => resolve_vllm(&s.engine, &model, &gpu)?,
        EngineKind::Sglang => resolve_sglang(&s.engine, &model, &gpu, workload.seed)?,
    };

    let cost = resolve_cost(&s.cost, &model, &gpu, res)?;
    let spec = SimSpec { name: s.name.clone(), engine, model, gpu, cost, workload, kv_sizing };
    check_requests_fit(&spec)?;
    Ok(spec)
}

fn resolve_vllm(e: &EngineSection, model: &ModelCard, gpu: &GpuCard) -> Result<(EngineSpec, KvSizing)> {
    let vs = e.version.as_deref().unwrap_or(VLLM_DEFAULT);
    let version = Version::parse(vs)
        .ok_or_else(|| ConfigError::new("engine.version", format!("expected a version like \"0.28.0\", got {vs:?}")))?;
    if version < VLLM_MIN || version > VLLM_MAX {
        return Err(ConfigError::new(
            "engine.version",
            format!("servesim models vLLM {VLLM_MIN} to {VLLM_MAX} (V1 scheduler); got {version}. Use the nearest modelled release."),
        ));
    }
    let mem_gib = gpu.memory_gib();
    let big = mem_gib >= 70.0 && !gpu.is_a100();
    // `_set_default_args` / `get_batch_defaults` (API server).
    let default_batched = if mem_gib >= 160.0 && version >= Version::new(0, 29, 0) {
        16384
    } else if big {
        8192
    } else {
        2048
    };
    let default_seqs = if big { 1024 } else { 256 };
    let max_num_seqs = positive("engine.max_num_seqs", e.max_num_seqs.unwrap_or(default_seqs))?;
    let max_num_batched_tokens =
        positive("engine.max_num_batched_tokens", e.max_num_batched_tokens.unwrap_or(default_batched))?;
    if max_num_batched_tokens < max_num_seqs {
        return Err(ConfigError::new(
            "engine.max_num_batched_tokens",
            format!("vLLM requires max_num_batched_tokens ({max_num_batched_tokens}) >= max_num_seqs ({max_num_seqs})"),
        ));
    }
    let block_size = positive("engine.block_size", e.block_size.unwrap_or(16))?;
    if block_size > 4096 {
        return Err(ConfigError::new(
            "engine.block_size",
            format!("expected a block size of at most 4096 tokens, got {block_size}"),
        ));
    }
    let max_model_len = match (e.max_model_len, model.max_position_embeddings) {
        (Some(m), _) => positive("engine.max_model_len", m)?,
        (None, Some(m)) => m,
        (None, None) => {
            return Err(ConfigError::new(
                "engine.max_model_len",
                "missing, and the model card has no max_position_embeddings",
            ))
        }
    };
    let kv_dtype = model.dtype_bytes().unwrap_or(2);
    let kv_bytes_per_token = model.kv_bytes_per_token(kv_dtype);
    let (num_gpu_blocks, sizing) = if let Some(n) = e.num_gpu_blocks_override {
        if n < 2 {
            return Err(ConfigError::new(
                "engine.num_gpu_blocks_override",
                format!("must be at least 2 (block 0 is the null block), got {n}"),
            ));
        }
        (n, KvSizing { source: "num_gpu_blocks_override", kv_bytes_per_token, memory: None })
    } else if let Some(t) = e.kv_cache_tokens {
        let blocks = t / u64::from(block_size);
        if blocks < 1 {
            return Err(ConfigError::new(
                "engine.kv_cache_tokens",
                format!("{t} tokens is less than one block of {block_size}"),
            ));
        }
        // The log prints num_blocks × block_size; block 0 is then the null block.
        let blocks = u32::try_from(blocks).map_err(|_| ConfigError::new("engine.kv_cache_tokens", "too large"))?;
        (blocks.max(2), KvSizing { source: "kv_cache_tokens", kv_bytes_per_token, memory: None })
    } else {
        let util = e.gpu_memory_utilization.unwrap_or(if version >= Version::new(0, 20, 0) { 0.92 } else { 0.9 });
        if !(util > 0.0 && util <= 1.0) {
            return Err(ConfigError::new("engine.gpu_memory_utilization", format!("must be in (0, 1], got {util}")));
        }
        let acct = vllm_memory_account(model, gpu, util, max_num_batched_tokens, max_num_seqs);
        let page = kv_bytes_per_token * u64::from(block_size);
        let blocks = acct.kv / page;
        if blocks < 2 {
            return Err(ConfigError::new(
                "engine.gpu_memory_utilization",
                format!(
                    "{util} of {:.1} GiB leaves {:.2} GiB after {:.1} GiB of weights and {:.2} GiB of activations: no room for KV blocks",
                    gib(acct.total),
                    gib(acct.requested.saturating_sub(acct.weights + acct.activation_peak + acct.non_torch)),
                    gib(acct.weights),
                    gib(acct.activation_peak)
                ),
            ));
        }
        let blocks = u32::try_from(blocks).unwrap_or(u32::MAX);
        (blocks, KvSizing { source: "gpu_memory_utilization", kv_bytes_per_token, memory: Some(acct) })
    };
    let enable_prefix_caching = e.enable_prefix_caching.unwrap_or(true);
    let cfg = VllmConfig {
        version,
        max_num_seqs,
        max_num_batched_tokens,
        long_prefill_token_threshold: e.long_prefill_token_threshold.unwrap_or(0),
        block_size,
        enable_prefix_caching,
        num_gpu_blocks,
        max_model_len,
        policy: e.policy.unwrap_or(Policy::Fcfs),
    };
    Ok((EngineSpec::Vllm(cfg), sizing))
}

fn resolve_sglang(e: &EngineSection, model: &ModelCard, gpu: &GpuCard, seed: u64) -> Result<(EngineSpec, KvSizing)> {
    let vs = e.version.as_deref().unwrap_or(SGLANG_DEFAULT);
    let version = Version::parse(vs)
        .ok_or_else(|| ConfigError::new("engine.version", format!("expected a version like \"0.5.23\", got {vs:?}")))?;
    if version < SGLANG_MIN || version > SGLANG_MAX {
        return Err(ConfigError::new(
            "engine.version",
            format!(
                "servesim models SGLang {SGLANG_MIN} to {SGLANG_MAX}; got {version}. Use the nearest modelled release."
            ),
        ));
    }
    let mem_gib = gpu.memory_gib();
    let new_defaults = version >= Version::new(0, 5, 0);
    // `chunked_prefill_size` by GPU memory (server_args).
    let default_chunk: u32 = if mem_gib < 20.0 {
        2048
    } else if mem_gib < 35.0 {
        if version >= Version::new(0, 5, 23) {
            4096
        } else {
            2048
        }
    } else if mem_gib < 60.0 {
        if new_defaults {
            4096
        } else {
            8192
        }
    } else if mem_gib < 160.0 {
        8192
    } else {
        16384
    };
    let chunked_prefill_size = match e.chunked_prefill_size {
        None => Some(default_chunk),
        Some(-1) => None,
        Some(c) if c >= 1 && c <= i64::from(u32::MAX) => Some(c as u32),
        Some(c) => {
            return Err(ConfigError::new(
                "engine.chunked_prefill_size",
                format!("expected a positive number of tokens, or -1 to disable chunked prefill; got {c}"),
            ))
        }
    };
    let page_size = positive("engine.page_size", e.page_size.unwrap_or(1))?;
    if let Some(c) = chunked_prefill_size {
        if c < page_size {
            return Err(ConfigError::new(
                "engine.chunked_prefill_size",
                format!("{c} is smaller than one page ({page_size} tokens)"),
            ));
        }
    }
    let max_prefill_tokens = positive("engine.max_prefill_tokens", e.max_prefill_tokens.unwrap_or(16384))?;
    let context_length = match (e.context_length, model.max_position_embeddings) {
        (Some(m), _) => positive("engine.context_length", m)?,
        (None, Some(m)) => m,
        (None, None) => {
            return Err(ConfigError::new(
                "engine.context_length",
                "missing, and the model card has no max_position_embeddings",
            ))
        }
    };
    let schedule_policy = match e.schedule_policy.as_deref().unwrap_or("fcfs") {
        "fcfs" => SchedulePolicy::Fcfs,
        "lpm" => SchedulePolicy::Lpm,
        "lof" => SchedulePolicy::Lof,
        "random" => SchedulePolicy::Random,
        other => {
            return Err(ConfigError::new(
                "engine.schedule_policy",
                format!("{other:?} is not modelled; expected fcfs, lpm, lof or random (dfs-weight and the 0.5.23-only policies are not modelled)"),
            ))
        }
    };
    let conservativeness = e.schedule_conservativeness.unwrap_or(1.0);
    if !(conservativeness > 0.0 && conservativeness.is_finite()) {
        return Err(ConfigError::new(
            "engine.schedule_conservativeness",
            format!("must be > 0, got {conservativeness}"),
        ));
    }
    let kv_dtype = model.dtype_bytes().unwrap_or(2);
    let cell = model.kv_bytes_per_token(kv_dtype);
    let (max_total_tokens, sizing) = if let Some(t) = e.max_total_tokens {
        if t < u64::from(page_size) * 2 {
            return Err(ConfigError::new("engine.max_total_tokens", format!("{t} tokens is too small a pool")));
        }
        (
            t / u64::from(page_size) * u64::from(page_size),
            KvSizing { source: "max_total_tokens", kv_bytes_per_token: cell, memory: None },
        )
    } else {
        let mfs = e.mem_fraction_static.unwrap_or_else(|| sglang_default_mem_fraction_static(gpu));
        if !(mfs > 0.0 && mfs < 1.0) {
            return Err(ConfigError::new("engine.mem_fraction_static", format!("must be in (0, 1), got {mfs}")));
        }
        let acct = sglang_memory_account(model, gpu, mfs);
        let tokens = acct.kv / cell / u64::from(page_size) * u64::from(page_size);
        if tokens < u64::from(page_size) * 2 {
            return Err(ConfigError::new(
                "engine.mem_fraction_static",
                format!(
                    "{mfs} of {:.1} GiB leaves no room for KV after {:.1} GiB of weights",
                    gib(acct.total),
                    gib(acct.weights)
                ),
            ));
        }
        (tokens, KvSizing { source: "mem_fraction_static", kv_bytes_per_token: cell, memory: Some(acct) })
    };
    // `max_running_requests = min(max_total // 2, clamp(max_total / context_len * 512, 2048, 4096))`.
    let pool_reqs = ((max_total_tokens as f64 / f64::from(context_length) * 512.0) as u64).clamp(2048, 4096);
    let default_running = (max_total_tokens / 2).min(pool_reqs).max(1) as u32;
    let max_running_requests =
        positive("engine.max_running_requests", e.max_running_requests.unwrap_or(default_running))?;
    let cfg = SglangConfig {
        version,
        max_running_requests,
        chunked_prefill_size,
        max_prefill_tokens,
        page_size,
        schedule_policy,
        max_total_tokens,
        schedule_conservativeness: conservativeness,
        disable_radix_cache: e.disable_radix_cache.unwrap_or(false),
        enable_mixed_chunk: e.enable_mixed_chunk.unwrap_or(false),
        disable_overlap_schedule: e.disable_overlap_schedule.unwrap_or(false),
        context_length,
        seed,
    };
    Ok((EngineSpec::Sglang(cfg), sizing))
}

/// SGLang's default `mem_fraction_static`: `(gpu_mem − reserved) / gpu_mem`
/// with the reserved memory of 0.4.10's table for one GPU (TP 1): 2.9 GiB
/// below 35 GB, 10 GiB below 90 GB, 12.5 GiB below 160 GB, 32 GiB above;
/// rounded to 3 decimals. (0.5.x computes it from the chunk size and CUDA
/// graphs; for an 80 GB GPU both give about 0.875.)
pub fn sglang_default_mem_fraction_static(gpu: &GpuCard) -> f64 {
    let mem = gpu.memory_gib();
    let reserved = if mem < 35.0 {
        2.9
    } else if mem < 90.0 {
        10.0
    } else if mem < 160.0 {
        12.5
    } else {
        32.0
    };
    (((mem - reserved) / mem) * 1000.0).round() / 1000.0
}

/// `profile_max_num_token`: `rest = free after weights − total·(1 − mfs)`,
/// with "free after weights" = total − weights − 0.5 GiB outside torch (the
/// same estimate as for vLLM).
pub fn sglang_memory_account(model: &ModelCard, gpu: &GpuCard, mfs: f64) -> MemoryAccount {
    let dt = u64::from(model.dtype_bytes().unwrap_or(2));
    let total = gpu.memory_bytes;
    let weights = model.num_parameters * dt;
    let non_torch = 512u64 << 20;
    let requested = (total as f64 * mfs) as u64;
    let kv = requested.saturating_sub(weights + non_torch);
    MemoryAccount { total, requested, weights, activation_peak: 0, non_torch, kv }
}

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

/// vLLM's `determine_available_memory`, estimated: the requested fraction of
/// device memory, minus the weights, the activation peak of `profile_run` at
/// `max_num_batched_tokens` (hidden states, the MLP's intermediate, and the
/// sampler's fp32 logits over `max_num_seqs`), and memory outside torch
/// (CUDA context, allocator slack; 0.5 GiB). CUDA-graph memory is not
/// modelled. An estimate: a start-up log's KV size, given as
/// `kv_cache_tokens`, is always better.
pub fn vllm_memory_account(
    model: &ModelCard,
    gpu: &GpuCard,
    util: f64,
    max_batched: u32,
    max_seqs: u32,
) -> MemoryAccount {
    let dt = u64::from(model.dtype_bytes().unwrap_or(2));
    let total = gpu.memory_bytes;
    let requested = (total as f64 * util) as u64;
    let weights = model.num_parameters * dt;
    let inter = u64::from(model.intermediate_size.unwrap_or(model.hidden_size * 4));
    let act_tokens = u64::from(max_batched) * (4 * u64::from(model.hidden_size) + 2 * inter) * dt;
    let logits = u64::from(max_seqs.min(max_batched)) * u64::from(model.vocab_size) * 4 * 2;
    let activation_peak = act_tokens + logits;
    let non_torch = 512 << 20;
    let kv = requested.saturating_sub(weights + activation_peak + non_torch);
    MemoryAccount { total, requested, weights, activation_peak, non_torch, kv }
}

/// Checks a `workload` section and turns it into generator parameters
/// (`res.trace` must hold the trace's rows for `dataset_name = "trace"`).
pub fn resolve_workload(w: &WorkloadSection, res: &Resources) -> Result<WorkloadParams> {
    let dataset = match w.dataset_name {
        DatasetName::Random => {
            let r = w.random_range_ratio.unwrap_or(0.0);
            if !(0.0..1.0).contains(&r) {
                return Err(ConfigError::new("workload.random_range_ratio", format!("must be in [0, 1), got {r}")));
            }
            Dataset::Random {
                input_len: positive("workload.random_input_len", w.random_input_len.unwrap_or(1024))?,
                output_len: positive("workload.random_output_len", w.random_output_len.unwrap_or(128))?,
                range_ratio: r,
                prefix_len: w.random_prefix_len.unwrap_or(0),
            }
        }
        DatasetName::PrefixRepetition => {
            let num_prefixes =
                positive("workload.prefix_repetition_num_prefixes", w.prefix_repetition_num_prefixes.unwrap_or(10))?;
            let n = w.num_prompts.unwrap_or(1000);
            if n < num_prefixes {
                return Err(ConfigError::new(
                    "workload.num_prompts",
                    format!("{n} prompts over {num_prefixes} prefixes gives no prompt (prompts_per_prefix = num_prompts // num_prefixes)"),
                ));
            }
            Dataset::PrefixRepetition {
                prefix_len: positive(
                    "workload.prefix_repetition_prefix_len",
                    w.prefix_repetition_prefix_len.unwrap_or(256),
                )?,
                suffix_len: positive(
                    "workload.prefix_repetition_suffix_len",
                    w.prefix_repetition_suffix_len.unwrap_or(256),
                )?,
                num_prefixes,
                output_len: positive(
                    "workload.prefix_repetition_output_len",
                    w.prefix_repetition_output_len.unwrap_or(128),
                )?,
            }
        }
        DatasetName::Trace => {
            if w.trace.is_none() {
                return Err(ConfigError::new("workload.trace", "dataset_name is \"trace\" but no trace file is given"));
            }
            let rows =
                res.trace.clone().ok_or_else(|| ConfigError::new("workload.trace", "the trace was not loaded"))?;
            if rows.is_empty() {
                return Err(ConfigError::new("workload.trace", "the trace has no rows: an empty workload"));
            }
            for (i, r) in rows.iter().enumerate() {
                if r.input_len == 0 || r.output_len == 0 {
                    return Err(ConfigError::new(
                        format!("workload.trace[{i}]"),
                        "input_len and output_len must be at least 1",
                    ));
                }
                if !(r.arrival_time.is_finite() && r.arrival_time >= 0.0) {
                    return Err(ConfigError::new(
                        format!("workload.trace[{i}].arrival_time"),
                        format!("must be a time in seconds >= 0, got {}", r.arrival_time),
                    ));
                }
            }
            Dataset::Trace { rows }
        }
    };
    let num_prompts = match (&dataset, w.num_prompts) {
        (Dataset::Trace { rows }, None) => rows.len() as u32,
        (_, n) => positive("workload.num_prompts", n.unwrap_or(1000))?,
    };
    let burstiness = w.burstiness.unwrap_or(1.0);
    if !(burstiness > 0.0 && burstiness.is_finite()) {
        return Err(ConfigError::new("workload.burstiness", format!("must be > 0, got {burstiness}")));
    }
    if let Some(c) = w.max_concurrency {
        positive("workload.max_concurrency", c)?;
    }
    let ignore_eos = w.ignore_eos.unwrap_or(false);
    if !ignore_eos && w.output_len_dist.is_none() {
        return Err(ConfigError::new(
            "workload.ignore_eos",
            "is false (vllm bench serve's default), so output lengths depend on where the model emits EOS: \
             set ignore_eos to true for exact lengths, or describe them with workload.output_len_dist \
             ({\"kind\": \"geometric\", \"mean\": N} or {\"kind\": \"uniform\", \"min\": A, \"max\": B})",
        ));
    }
    match w.output_len_dist {
        Some(OutputLenDist::Geometric { mean }) if !(mean >= 1.0 && mean.is_finite()) => {
            return Err(ConfigError::new("workload.output_len_dist.mean", format!("must be >= 1, got {mean}")));
        }
        Some(OutputLenDist::Uniform { min, max }) if min == 0 || min > max => {
            return Err(ConfigError::new(
                "workload.output_len_dist",
                format!("needs 1 <= min <= max, got min {min}, max {max}"),
            ));
        }
        _ => {}
    }
    Ok(WorkloadParams {
        dataset,
        num_prompts,
        num_warmups: w.num_warmups.unwrap_or(0),
        request_rate: w.request_rate.unwrap_or(RequestRate(None)).0,
        burstiness,
        max_concurrency: w.max_concurrency,
        ignore_eos,
        output_len_dist: w.output_len_dist,
        initial_test_request: w.initial_test_request.unwrap_or(true),
        seed: w.seed.unwrap_or(0),
    })
}

fn resolve_cost(c: &CostSection, model: &ModelCard, gpu: &GpuCard, res: &Resources) -> Result<CostModel> {
    let prior = c.prior.clone().unwrap_or_default();
    for (name, v) in [
        ("prefill_mfu", prior.prefill_mfu),
        ("decode_mfu", prior.decode_mfu),
        ("attention_mfu", prior.attention_mfu),
        ("weight_bandwidth_eff", prior.weight_bandwidth_eff),
        ("kv_bandwidth_eff", prior.kv_bandwidth_eff),
    ] {
        if !(v > 0.0 && v <= 1.0) {
            return Err(ConfigError::new(
                format!("cost.prior.{name}"),
                format!("an efficiency must be in (0, 1], got {v}"),
            ));
        }
    }
    let mut cost = CostModel::roofline(model, gpu, &prior);
    if c.profile.is_some() {
        let p = res.profile.as_ref().ok_or_else(|| ConfigError::new("cost.profile", "the profile was not loaded"))?;
        check_coefficients(p, "cost.profile")?;
        cost.overlay(p, CoefficientSource::Profile);
    }
    if let Some(co) = &c.coefficients {
        check_coefficients(co, "cost.coefficients")?;
        cost.overlay(co, CoefficientSource::Scenario);
    }
    Ok(cost)
}

fn check_coefficients(c: &CostCoefficients, path: &str) -> Result<()> {
    for name in COEFFICIENT_NAMES {
        if let Some(v) = c.get(name) {
            if !(v.is_finite() && v >= 0.0) {
                return Err(ConfigError::new(
                    format!("{path}.{name}"),
                    format!("must be a finite number >= 0 (µs), got {v}"),
                ));
            }
        }
    }
    Ok(())
}

/// Every request must fit `max_model_len` and the whole KV pool, or it could
/// never finish (vLLM would reject it, or preempt it forever).
fn check_requests_fit(spec: &SimSpec) -> Result<()> {
    let (max_prompt, max_total) = max_request_lengths(&spec.workload);
    let field = match spec.workload.dataset {
        Dataset::Random { .. } => "workload.random_input_len",
        Dataset::PrefixRepetition { .. } => "workload.prefix_repetition_prefix_len",
        Dataset::Trace { .. } => "workload.trace",
    };
    match &spec.engine {
        EngineSpec::Vllm(c) => {
            if max_total > c.max_model_len {
                return Err(ConfigError::new(
                    field,
                    format!(
                        "a request of up to {max_prompt} prompt tokens and {} total exceeds engine.max_model_len {}",
                        max_total, c.max_model_len
                    ),
                ));
            }
            let usable = u64::from(c.num_gpu_blocks - 1);
            let need = u64::from(max_total.div_ceil(c.block_size));
            if need > usable {
                return Err(ConfigError::new(
                    field,
                    format!(
                        "a request of {max_total} tokens needs {need} KV blocks but the whole pool has {usable} usable blocks ({} tokens): it could never finish",
                        c.kv_capacity_tokens()
                    ),
                ));
            }
        }
        EngineSpec::Sglang(c) => {
            if max_total > c.context_length {
                return Err(ConfigError::new(
                    field,
                    format!("a request of up to {max_prompt} prompt tokens and {max_total} total exceeds engine.context_length {}", c.context_length),
                ));
            }
            // PrefillAdder admits iff prompt + min(max_new, 4096) (+ a page) < what is left.
            let max_new = max_total - max_prompt;
            let need = u64::from(max_prompt) + u64::from(max_new.min(4096)) + u64::from(c.page_size);
            if need >= c.max_total_tokens {
                return Err(ConfigError::new(
                    field,
                    format!(
                        "a request of {max_prompt} prompt tokens reserving {} output tokens needs {need} KV tokens; the pool (max_total_tokens) has {}: it could never be admitted",
                        max_new.min(4096),
                        c.max_total_tokens
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// Largest prompt and largest prompt + max_tokens the workload can produce.
pub fn max_request_lengths(w: &WorkloadParams) -> (u32, u32) {
    match &w.dataset {
        Dataset::Random { input_len, output_len, range_ratio, prefix_len } => {
            let i = (f64::from(*input_len) * (1.0 + range_ratio)).ceil() as u32 + prefix_len;
            let o = (f64::from(*output_len) * (1.0 + range_ratio)).ceil() as u32;
            (i, i + o)
        }
        Dataset::PrefixRepetition { prefix_len, suffix_len, output_len, .. } => {
            (prefix_len + suffix_len, prefix_len + suffix_len + output_len)
        }
        Dataset::Trace { rows } => rows
            .iter()
            .take(w.num_prompts as usize)
            .fold((0, 0), |(p, t), r| (p.max(r.input_len), t.max(r.input_len + r.output_len))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_creates_and_overrides_nested_fields() {
        let mut v: Value = serde_json::json!({"engine": {"kind": "vllm"}});
        apply_set(&mut v, "engine.max_num_seqs=64").unwrap();
        apply_set(&mut v, "cost.profile=fit.json").unwrap();
        apply_set(&mut v, "workload.request_rate=inf").unwrap();
        assert_eq!(v["engine"]["max_num_seqs"], 64);
        assert_eq!(v["cost"]["profile"], "fit.json");
        assert_eq!(v["workload"]["request_rate"], "inf");
        let e = apply_set(&mut v, "engine.kind.x=1").unwrap_err();
        assert_eq!(e.path, "engine.kind");
        assert!(apply_set(&mut v, "novalue").is_err());
    }

    #[test]
    fn unknown_fields_are_errors_naming_their_path() {
        let e = parse_scenario(r#"{"version":1,"engine":{"kind":"vllm","max_num_seq":4},"model":"m","hardware":"g","workload":{"dataset_name":"random"}}"#).unwrap_err();
        assert_eq!(e.path, "engine.max_num_seq");
        assert!(e.message.contains("unknown field `max_num_seq`"), "{e}");
        let e = parse_scenario(r#"{"version":1,"engine":{"kind":"vllm","max_num_seqs":-4},"model":"m","hardware":"g","workload":{"dataset_name":"random"}}"#).unwrap_err();
        assert_eq!(e.path, "engine.max_num_seqs");
    }
}
