//! The scenario format: the JSON schema of a scenario file, strict and versioned.
//! Field names are a contract (they follow the engines' flags in snake case).

use super::*;

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
    /// vLLM `--async-scheduling` / `--no-async-scheduling` (default: on from 0.14 on a
    /// GPU, as vLLM resolves it; off on the `cpu-host` card, as calibrated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub async_scheduling: Option<bool>,
    /// vLLM `--tensor-parallel-size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor_parallel_size: Option<u32>,
    /// vLLM `--pipeline-parallel-size` (only 1 is modelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pipeline_parallel_size: Option<u32>,
    /// vLLM `--enforce-eager`: no CUDA graphs (none captured, none subtracted from the KV budget).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enforce_eager: Option<bool>,
    // ---- both engines ----
    /// `--kv-cache-dtype`: `auto` (the model's dtype), `bfloat16`, `float16`, `fp8`, `fp8_e4m3`, `fp8_e5m2`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_dtype: Option<String>,
    /// `--quantization`: `fp8` (weights quantized to fp8 at load); the model card's own
    /// `quantization` applies when this is absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantization: Option<String>,
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
    /// SGLang `--tp-size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tp_size: Option<u32>,
    /// SGLang `--pp-size` (only 1 is modelled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pp_size: Option<u32>,
    /// SGLang `--disable-cuda-graph`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disable_cuda_graph: Option<bool>,
    /// SGLang `--cuda-graph-max-bs` (the largest decode batch captured; it sets the reserve
    /// of the default `mem_fraction_static` in 0.5.x).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cuda_graph_max_bs: Option<u32>,
    // ---- data parallelism inside one engine (`docs/fleets.md`) ----
    /// vLLM `--data-parallel-size`: that many engine cores behind one API server, balanced
    /// by the engine-core client (least `4 × waiting + running`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_parallel_size: Option<u32>,
    /// SGLang `--dp-size`: that many schedulers behind one tokenizer manager, dispatched by
    /// the `DataParallelController`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dp_size: Option<u32>,
    /// SGLang `--load-balance-method`: `round_robin` (default) or `shortest_queue`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub load_balance_method: Option<String>,
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

/// Limits on the `workload` section, stated in every error that enforces them.
/// They bound a run's time and memory by its work: a run stores each timed
/// request's token times (8 bytes a token), so the output tokens of a run are
/// capped, and simulated time (`u64` nanoseconds, 584 years) must not overflow.
pub const MAX_NUM_PROMPTS: u32 = 10_000_000;
/// Warm-up requests (each resends the first prompt).
pub const MAX_NUM_WARMUPS: u32 = 100_000;
/// `max_concurrency`.
pub const MAX_CONCURRENCY: u32 = 1_000_000;
/// Requests per second: a finite rate above this is indistinguishable from `inf`.
pub const MAX_REQUEST_RATE: f64 = 1e9;
/// The smallest finite rate: the last request is sent at `num_prompts / rate`
/// seconds, which must stay within [`MAX_ARRIVAL_TIME_S`].
pub const MIN_REQUEST_RATE: f64 = 1e-6;
/// A send time (a trace's `arrival_time`, or `num_prompts / request_rate`): one year.
pub const MAX_ARRIVAL_TIME_S: f64 = 365.0 * 86_400.0;
/// Output tokens of a run (`num_prompts` × the largest output length): 4 GB of token times.
pub const MAX_TOTAL_OUTPUT_TOKENS: u64 = 500_000_000;

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
    /// The trace's format: `csv` or `jsonl` (servesim's rows; the default, told by the
    /// file's extension), or a production trace: `mooncake`, `azure`, `burstgpt`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_format: Option<TraceFileFormat>,
    /// Multiplies every inter-arrival time of the trace (2: half the rate).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_time_scale: Option<f64>,
    /// Rescales the trace's arrivals to this mean rate (requests per second), keeping its shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_rate: Option<f64>,
}

/// `workload.trace_format`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceFileFormat {
    Csv,
    Jsonl,
    Mooncake,
    Azure,
    Burstgpt,
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
    /// Several engine replicas behind a router (`docs/fleets.md`); absent: one engine.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<super::fleet::FleetSection>,
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
