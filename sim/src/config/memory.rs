//! Memory accounting: how each engine sizes its KV pool from the GPU's
//! memory, per GPU, per release (`docs/vllm.md` "Memory sizing",
//! `docs/sglang.md` "Memory sizing").
//!
//! **vLLM** (`v1/worker/gpu_worker.py:Worker.determine_available_memory`):
//! the KV pool gets the requested fraction of the device's memory
//! (`gpu_memory_utilization × total`) minus what the profiling run consumed
//! after the start-up snapshot: the weights, the torch activation peak of a
//! dummy forward at `max_num_batched_tokens` and of the sampler at
//! `max_num_seqs` (on the V2 runner, or the embedding table's size where larger: the
//! transient a cold torch.compile leaves in it), and memory allocated outside torch (workspaces, NCCL and
//! custom all-reduce buffers); from 0.20 it also subtracts its CUDA-graph
//! memory estimate when the V1 model runner runs (none with `enforce_eager`;
//! the V2 runner's estimate is 0). Which runner runs, and how 0.27 measures
//! the non-KV memory, is the release's [`VllmMemoryBehaviour`]. The CUDA
//! context is created before the snapshot, so it lives in the `1 −
//! gpu_memory_utilization` headroom and is not charged. The pool is then
//! cut into blocks (`kv_cache_utils.py:get_num_blocks`): `available //
//! (block_size × bytes per token per GPU)`.
//!
//! **SGLang** (`model_runner.py:profile_max_num_token`; 0.5.x
//! `kv_cache_configurator.py`): `rest = free memory after the weights −
//! memory before them × (1 − mem_fraction_static)`, where "memory before" is
//! the free memory once the CUDA context exists (0.4.10's
//! `init_torch_distributed` measures it after NCCL's set-up, 0.5.x's
//! `pre_model_load_memory` likewise), so the context is charged at
//! `mem_fraction_static`. `max_total_num_tokens = rest / cell_size`, floored
//! to the page size and capped by `max_total_tokens`. The default
//! `mem_fraction_static` is [`sglang_default_mem_fraction_static`].
//!
//! Terms derived from first principles: the weights (parameters × bytes,
//! sharded by TP), the activation peak (the tensors named below, per model
//! runner), the KV cell size, which runner runs and whether the graph
//! estimate is charged (read in each release's source). Terms that cannot be
//! derived (allocator slack, workspaces, NCCL buffers, the CUDA context,
//! CUDA-graph pools, what 0.27's free-memory measure adds) are the constants
//! marked FITTED below, each fitted on the start-up log corpus
//! (`data/published/kv-logs.csv`: the median over its group's judged rows;
//! the graph constant by least squares); `tests/kv_corpus.rs` refits them,
//! checks the code holds the fit, and reports every row's error, leave-one-out.
//! One of them, [`VLLM_WDDM_CONSUMED_PER_WEIGHT_BYTE`], is a host's, not
//! vLLM's: what 0.27's free-memory measure picks up on Windows/WSL2.

use serde::Serialize;

use super::*;

pub(crate) const MIB: u64 = 1 << 20;

/// FITTED (kv-logs corpus, vLLM rows on the V1 model runner): memory vLLM
/// allocates outside torch on each GPU during start-up and profiling at TP 1
/// (cuBLAS/attention workspaces, allocator slack), and what the V1 profile's
/// torch peak holds beyond the derived activation peak, MiB.
pub const VLLM_NON_TORCH_MIB: f64 = 960.0;
/// FITTED (kv-logs corpus, vLLM rows at TP > 1 on NVLink cards, all H100 SXM on the V1 runner):
/// extra memory outside torch with tensor parallelism (NCCL's communicators and transports; the
/// custom all-reduce's and symmetric memory's buffers are at most 64–128 MiB), MiB per GPU;
/// applied to both runners, on NVLink cards only ([`vllm_tp_non_torch_applies`]: the one PCIe
/// TP log has no room for it).
pub const VLLM_NON_TORCH_TP_MIB: f64 = 1919.0;
/// FITTED (kv-logs corpus, vLLM rows on the V2 model runner at TP 1 on Linux, releases
/// 0.24–0.31: nine rows): memory outside the derived terms at TP 1 when the V2 model runner
/// profiles (its non-torch memory, the part of its torch peak above the derived peak, and the
/// weights' allocator rounding), MiB. Replaces [`VLLM_NON_TORCH_MIB`] for that runner; the TP
/// term is shared. 514 until 2026-12-06, when the profiled peak gained the cold-compile
/// transient ([`vllm_compile_embedding_transient`]).
pub const VLLM_V2_NON_TORCH_MIB: f64 = 411.0;
/// FITTED (kv-logs corpus, vLLM ≥ 0.27 rows on Windows/WSL2 hosts): what
/// 0.27's free-memory accounting (`mem_utils.py:memory_profiling`,
/// `total_consumed` = free memory at the init snapshot − free memory after
/// profiling) charges beyond the ≤ 0.26 terms and the V2 runner's sampler state
/// ([`vllm_v2_sampler_state_bytes`]) on a WDDM host, per byte of
/// weights: free memory there drops by about this much more than the
/// weights torch allocated. On bare-metal Linux 0.27/0.28 logs the consumed
/// memory is the weights plus the ≤ 0.26 non-torch terms (`docs/vllm.md`),
/// so nothing is added there. Applied when the GPU card reports the WDDM
/// view of the device ([`wddm_host`]), where it stands in for the cold-compile transient of the
/// profiled peak too ([`vllm_v2_activation_peak_tensors`]): charged beside it, the four rows
/// need 0.058, 0.011 and about 0 per byte (`data/published/kv-logs.md`), no one ratio. 0.102
/// until 2026-12-06 (the V2 non-torch constant then 514 MiB).
pub const VLLM_WDDM_CONSUMED_PER_WEIGHT_BYTE: f64 = 0.118;
/// FITTED (the captured-graph memory vLLM 0.19 logs, "Graph capturing
/// finished ... took X GiB", corpus rows): CUDA-graph memory per layer per
/// captured batch size, MiB. vLLM ≥ 0.20 subtracts its estimate of this
/// from the KV budget when the V1 model runner runs (the V2 runner's
/// estimate is 0).
pub const VLLM_GRAPH_MIB_PER_LAYER_SIZE: f64 = 0.45;
/// The first vLLM release that sizes the KV pool after warmup and CUDA-graph capture from the
/// memory then free (the "extensible KV cache": `CacheConfig.enable_extensible_kv_cache`,
/// resolved on CUDA/ROCm by `VllmConfig._resolve_extensible_kv_cache`, 0.34.0
/// `config/vllm.py:3180`, unless `kv_cache_memory_bytes` or `num_gpu_blocks_override` is set).
pub const VLLM_EXTENSIBLE_KV_CACHE: Version = Version::new(0, 34, 0);
/// SOURCE (0.34.0 `v1/worker/extensible_kv_cache.py:64`, `KV_CACHE_MARGIN_FLOOR_BYTES`, CUDA):
/// the least margin the post-warmup sizing keeps below the device's headroom, bytes.
pub const VLLM_KV_MARGIN_FLOOR_BYTES: u64 = 1 << 30;
/// SOURCE (0.34.0 `extensible_kv_cache.py:65`, `KV_CACHE_MARGIN_FRACTION`): the margin's share
/// of the measured transient peak (`max(floor, fraction × peak)`).
pub const VLLM_KV_MARGIN_FRACTION: f64 = 0.75;
/// SOURCE (0.34.0 `v1/worker/gpu/sample/prompt_logprob.py:20`, `CHUNK_SIZE`): the rows of prompt
/// logits the V2 runner materialises at a time when computing prompt logprobs.
pub const VLLM_PROMPT_LOGPROBS_CHUNK_ROWS: u64 = 1024;
/// From the logs quoted in `config/vllm.rs` (`VLLM_MIN_USED_AT_START_MIB`), not fitted: GPU
/// memory already in use when vLLM takes its start-up snapshot (the CUDA context, cuBLAS), MiB
/// at TP 1: the mean of an A100's 0.41 GiB (78.84/79.25 GiB free, 0.31.0) and an H100's 0.53
/// GiB (78.66/79.19). Charged only by the 0.34 sizing, whose cap is the device's free memory.
pub const VLLM_USED_AT_SNAPSHOT_MIB: f64 = 481.0;
/// The same at TP > 1 (NCCL's communicators exist by then): one TP worker's log, 94.05/95.01
/// GiB free, 0.96 GiB in use, MiB.
pub const VLLM_USED_AT_SNAPSHOT_TP_MIB: f64 = 983.0;
/// FITTED (kv-logs corpus, SGLang rows: the median over three judged logs, two H100 0.5.18 on
/// Linux and one RTX 5090 0.5.21 under WSL2): the CUDA context and torch's start-up allocations
/// on each GPU before SGLang measures free memory (the card's CUDA total less the free memory
/// SGLang starts from), MiB. Logs that print that free memory show 0.72–0.74 GiB on an H100
/// (0.5.18, 0.5.19) and 0.91 GiB per GPU on an RTX 4090 at TP 4 (NCCL's communicators
/// included). 1,455 until 2026-12-07, fitted on the WSL2 log alone, where the Windows driver
/// holds more.
pub const SGLANG_CONTEXT_MIB: f64 = 929.0;

/// The parallel layout and numeric formats of a deployment, resolved.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Deployment {
    /// `tensor_parallel_size` / `tp_size`.
    pub tensor_parallel_size: u32,
    /// GPUs the engine runs on (= the TP size: pipeline and data parallelism are not modelled).
    pub num_gpus: u32,
    /// The KV cache's element type, resolved (`auto` becomes the model's dtype).
    pub kv_cache_dtype: String,
    pub kv_dtype_bytes: u32,
    /// `fp8` when the linear layers' weights are fp8 (checkpoint or `quantization`).
    pub quantization: Option<String>,
    /// Bytes per weight in the linear layers.
    pub linear_weight_bytes: u32,
    /// CUDA graphs captured (`enforce_eager` / `disable_cuda_graph` off).
    pub cuda_graphs: bool,
}

impl Deployment {
    /// One GPU, the model's own dtypes, CUDA graphs on.
    pub fn single(model: &ModelCard) -> Deployment {
        Deployment {
            tensor_parallel_size: 1,
            num_gpus: 1,
            kv_cache_dtype: model.activation_dtype_name().to_string(),
            kv_dtype_bytes: model.activation_dtype_bytes(),
            quantization: model.quantization.clone(),
            linear_weight_bytes: if model.quantization.is_some() { 1 } else { model.dtype_bytes().unwrap_or(2) },
            cuda_graphs: true,
        }
    }
}

/// The memory account behind a derived KV pool, for one GPU (bytes).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct MemoryAccount {
    /// The device's memory as CUDA reports it.
    pub total: u64,
    /// `total × gpu_memory_utilization` (vLLM) or `total × mem_fraction_static`
    /// (SGLang): weights + activation peak + non-torch + CUDA graphs + sampler state + context +
    /// margin + kv.
    pub requested: u64,
    /// This GPU's share of the weights.
    pub weights: u64,
    /// Torch's activation peak in the profiling run (vLLM; 0 for SGLang, whose
    /// activations live outside the static fraction).
    pub activation_peak: u64,
    /// Allocations outside torch charged to the pool (vLLM).
    pub non_torch: u64,
    /// CUDA-graph memory subtracted from the pool (vLLM ≥ 0.20).
    pub cuda_graphs: u64,
    /// The V2 model runner's persistent sampler state, charged from 0.27
    /// ([`vllm_v2_sampler_state_bytes`]; absent elsewhere).
    #[serde(skip_serializing_if = "is_zero")]
    pub sampler_state: u64,
    /// The CUDA context and start-up allocations charged to the pool (SGLang; vLLM from
    /// 0.34, where the pool is capped by the device's free memory: what was in use at vLLM's
    /// start-up snapshot).
    pub context: u64,
    /// vLLM ≥ 0.34 (extensible KV cache): the margin kept below the device's headroom,
    /// `max(1 GiB, 0.75 × transient peak)`, where it binds (absent elsewhere).
    #[serde(skip_serializing_if = "is_zero")]
    pub margin: u64,
    /// What is left for the KV pool (the pool itself is this, floored to whole blocks or pages).
    pub kv: u64,
    /// `total − requested`: memory outside the fraction (the CUDA context for
    /// vLLM, activations and CUDA graphs for SGLang, the runtime's slack).
    pub reserve: u64,
    /// Which terms are derived and which fitted, in words.
    pub derivation: &'static str,
}

/// A pool given in tokens (`kv_cache_tokens`, `num_gpu_blocks_override`, `max_total_tokens`:
/// a start-up log's figure, or a user's) must fit on the GPU beside this GPU's share of the
/// weights: a pool that cannot exist would run and look like an answer. Only this bound is
/// checked (not the activations, graphs and runtime the engine also needs), so every pool an
/// engine has logged passes.
pub fn check_pinned_pool(
    field: &str,
    tokens: u64,
    kv_bytes_per_token: u64,
    model: &ModelCard,
    gpu: &GpuCard,
    dep: &Deployment,
) -> Result<()> {
    let kv = u128::from(tokens) * u128::from(kv_bytes_per_token);
    let weights = model.weight_bytes_per_gpu(dep.tensor_parallel_size, dep.linear_weight_bytes);
    if kv + u128::from(weights) > u128::from(gpu.memory_bytes) {
        return Err(ConfigError::new(
            field,
            format!(
                "{tokens} tokens of KV cache take {:.2} GiB per GPU ({kv_bytes_per_token} bytes a token, {} KV cache, TP {}); \
                 with {} weights ({:.2} GiB per GPU) that is more than the {:.2} GiB of one {}: a pool that cannot exist \
                 (a pool logged for another setup?). Give this setup's pool{}",
                kv as f64 / (1u64 << 30) as f64,
                dep.kv_cache_dtype,
                dep.tensor_parallel_size,
                model.id,
                gib(weights),
                gib(gpu.memory_bytes),
                gpu.id,
                // The CPU test bed's card derives no pool (`vllm::cpu_host_pool_not_derived`).
                if super::vllm::is_cpu_host(gpu) {
                    " (the cpu-host card derives none: the server's start-up log gives it)"
                } else {
                    ", or leave it unset to derive it from the memory fraction"
                }
            ),
        ));
    }
    Ok(())
}

/// Bytes per KV element of `kv_cache_dtype` (`auto`: the model's activation dtype).
pub fn kv_cache_dtype(name: Option<&str>, model: &ModelCard) -> Result<(String, u32)> {
    match name.unwrap_or("auto") {
        "auto" => Ok((model.activation_dtype_name().to_string(), model.activation_dtype_bytes())),
        "bfloat16" | "bf16" => Ok(("bfloat16".into(), 2)),
        "float16" | "fp16" | "half" => Ok(("float16".into(), 2)),
        n @ ("fp8" | "fp8_e4m3" | "fp8_e5m2") => Ok((n.to_string(), 1)),
        other => Err(ConfigError::new(
            "engine.kv_cache_dtype",
            format!("unknown KV cache dtype {other:?}; expected auto, bfloat16, float16, fp8, fp8_e4m3 or fp8_e5m2"),
        )),
    }
}

/// The first SGLang release that runs fp8 weights weight-only on GPUs without FP8 tensor
/// cores by default (`Fp8LinearMethod`: `use_marlin = ... can_auto_enable_marlin_fp8()`, true
/// for compute capability 8.0–8.8; read in the 0.5.0rc2 and 0.5.1 wheels).
pub const SGLANG_FP8_MARLIN_AUTO: Version = Version::new(0, 5, 1);

/// The first vLLM release that runs a ModelOpt FP8 checkpoint below compute capability 8.9
/// (`ModelOptFp8Config.get_min_capability()` 89 → 80, its linear layers choosing among the fp8
/// kernels with FP8 Marlin first; read in 0.25.0, 0.26.0, 0.27.0, 0.28.0, 0.30.0, 0.33.0).
pub const VLLM_MODELOPT_FP8_SM80: Version = Version::new(0, 27, 0);

/// What the engine does with fp8 linear weights on a GPU without FP8 tensor cores (compute
/// capability below 8.9: the A100), read in the engines' wheels (docs/vllm.md §10):
///
/// * a ModelOpt FP8 checkpoint (`quantization_method` `modelopt`) is refused at start-up by
///   SGLang and by vLLM before 0.27.0 (`ModelOptFp8Config.get_min_capability()` is 89, checked by
///   vLLM's `VllmConfig._get_quantization_config` and SGLang's model loader): an error here too;
///   vLLM from [`VLLM_MODELOPT_FP8_SM80`] runs it weight-only like its `fp8` method;
/// * vLLM's `fp8` method (`--quantization fp8`, or an `fp8` checkpoint) and compressed-tensors
///   FP8 run the FP8 Marlin kernel, weight-only (W8A16): servesim times it so (the cost source
///   says it); so does SGLang's compressed-tensors FP8 (`CompressedTensorsW8A16Fp8`, every
///   modelled release);
/// * SGLang's `fp8` method does the same from 0.5.1 ([`SGLANG_FP8_MARLIN_AUTO`]); before it
///   it reaches W8A8 kernels that need 8.9 unless `SGLANG_FORCE_FP8_MARLIN` is set: not
///   modelled, an error.
///
/// A card without a `quantization_method` is read as the engines' own `fp8` method.
pub fn check_fp8_weights_on_gpu(
    kind: EngineKind,
    version: Version,
    e: &EngineSection,
    model: &ModelCard,
    gpu: &GpuCard,
    dep: &Deployment,
) -> Result<()> {
    if dep.quantization.as_deref() != Some("fp8") || gpu.has_fp8_tensor_cores() {
        return Ok(());
    }
    let cap = gpu.compute_capability.as_deref().unwrap_or("unstated, and no dense_fp8_flops");
    let from_card = e.quantization.is_none();
    let method = if from_card { model.quantization_method.as_deref().unwrap_or("fp8") } else { "fp8" };
    let modelopt_refused = match kind {
        EngineKind::Vllm => version < VLLM_MODELOPT_FP8_SM80,
        EngineKind::Sglang => true,
    };
    if from_card && method == "modelopt" && modelopt_refused {
        return Err(ConfigError::new(
            "model.quantization_method",
            format!(
                "{} is a ModelOpt FP8 checkpoint, which {kind} {version} refuses on a GPU below compute \
                 capability 8.9 (\"The quantization method modelopt is not supported for the current GPU. \
                 Minimum capability: 89.\"; vLLM runs it weight-only from {VLLM_MODELOPT_FP8_SM80}); {} has \
                 compute capability {cap}. Use a GPU with FP8 tensor cores (L40S, H100, H200, B200, RTX 5090, \
                 ...), the bf16 model, or vLLM {VLLM_MODELOPT_FP8_SM80} or later",
                model.hf_repo.as_deref().unwrap_or(&model.id),
                gpu.id
            ),
        ));
    }
    if kind == EngineKind::Sglang && method == "fp8" && version < SGLANG_FP8_MARLIN_AUTO {
        return Err(ConfigError::new(
            "engine.version",
            format!(
                "fp8 weights on {} (compute capability {cap}, no FP8 tensor cores) under SGLang {version} are \
                 not modelled: before {SGLANG_FP8_MARLIN_AUTO} SGLang runs them with W8A8 kernels that need \
                 compute capability 8.9 unless SGLANG_FORCE_FP8_MARLIN is set; from {SGLANG_FP8_MARLIN_AUTO} it \
                 falls back to the weight-only FP8 Marlin kernel, which servesim models",
                gpu.id
            ),
        ));
    }
    Ok(())
}

/// The most GPUs one engine's tensor parallelism spans: one node of the cards modelled (8).
pub const MAX_TP_ONE_NODE: u32 = 8;

/// Resolves tensor parallelism, dtypes and CUDA graphs, checking that the
/// model can be sharded as the engines shard it.
pub fn resolve_deployment(
    e: &EngineSection,
    kind: EngineKind,
    model: &ModelCard,
    hardware_count: Option<u32>,
) -> Result<Deployment> {
    let (tp_field, pp_field, tp, pp) = match kind {
        EngineKind::Vllm => (
            "tensor_parallel_size",
            "pipeline_parallel_size",
            e.vllm.tensor_parallel_size,
            e.vllm.pipeline_parallel_size,
        ),
        EngineKind::Sglang => ("tp_size", "pp_size", e.sglang.tp_size, e.sglang.pp_size),
    };
    let tp = positive(&format!("engine.{tp_field}"), tp.unwrap_or(1))?;
    // The collectives are timed on one node's interconnect (NVLink or PCIe tables); TP across
    // nodes would run over the network at a fraction of that, which nothing here models.
    if tp > MAX_TP_ONE_NODE {
        return Err(ConfigError::new(
            format!("engine.{tp_field}"),
            format!(
                "{tp}: tensor parallelism past one node ({MAX_TP_ONE_NODE} GPUs) is not modelled (its all-reduces would \
                 cross the network, not NVLink); use data_parallel_size / dp_size or a fleet for more GPUs"
            ),
        ));
    }
    if let Some(pp) = pp {
        if pp == 0 {
            return Err(ConfigError::new(format!("engine.{pp_field}"), "must be at least 1 (got 0)"));
        }
        if pp != 1 {
            return Err(ConfigError::new(
                format!("engine.{pp_field}"),
                format!("pipeline parallelism ({pp}) is not modelled; servesim models tensor parallelism only (use {tp_field})"),
            ));
        }
    }
    // Expert parallelism: each rank holds whole experts and (with data parallelism) tokens are
    // dispatched to them; servesim shards every expert by TP (docs/moe.md), which the flags' off
    // state is. An unknown field before these flags were declared, now said plainly.
    let ep = match kind {
        EngineKind::Vllm => e
            .vllm
            .enable_expert_parallel
            .filter(|&on| on)
            .map(|_| ("enable_expert_parallel", "true: vLLM's --enable-expert-parallel".to_string())),
        EngineKind::Sglang => match e.sglang.ep_size {
            Some(0) => return Err(ConfigError::new("engine.ep_size", "must be at least 1 (got 0)")),
            Some(n) if n > 1 => Some(("ep_size", format!("{n}: SGLang's --ep-size (--expert-parallel-size, --ep)"))),
            _ => None,
        },
    };
    if let (Some((field, said)), Some(_)) = (ep, &model.moe) {
        return Err(ConfigError::new(
            format!("engine.{field}"),
            format!(
                "{said}: expert parallelism is not modelled; servesim shards every expert's intermediate dimension over \
                 the TP ranks (vLLM without --enable-expert-parallel, SGLang with --ep-size 1, their defaults; \
                 docs/moe.md) and has no measured table of expert-parallel MoE or its all-to-all dispatch. Leave it \
                 unset to model the TP-sharded run (its step times differ from the expert-parallel one)"
            ),
        ));
    }
    if !model.num_attention_heads.is_multiple_of(tp) {
        return Err(ConfigError::new(
            format!("engine.{tp_field}"),
            format!(
                "{tp} does not divide the model's {} attention heads (the engines require it)",
                model.num_attention_heads
            ),
        ));
    }
    if !model.num_kv_heads.is_multiple_of(tp) && !tp.is_multiple_of(model.num_kv_heads) {
        return Err(ConfigError::new(
            format!("engine.{tp_field}"),
            format!(
                "{tp} and the model's {} KV heads: one must divide the other (heads are split, or replicated past TP = heads)",
                model.num_kv_heads
            ),
        ));
    }
    if let Some(n) = hardware_count {
        if n != tp {
            return Err(ConfigError::new(
                "hardware.count",
                format!(
                    "{n} GPUs for {tp_field} = {tp}: an engine uses exactly its TP size in GPUs (set \
                     {tp_field} to {n}, or count to {tp}; several engines are engine.data_parallel_size \
                     / dp_size, with count = that × TP, or a fleet section's replicas)"
                ),
            ));
        }
    }
    // A name neither engine knows is refused here; SGLang's own choices (no `fp8`, `float16`)
    // are checked with its flags (`config::sglang`), so its error lists its own.
    let (kv_name, kv_bytes) = kv_cache_dtype(e.kv_cache_dtype.as_deref(), model).map_err(|err| match kind {
        EngineKind::Vllm => err,
        EngineKind::Sglang => ConfigError::new(
            "engine.kv_cache_dtype",
            format!(
                "unknown KV cache dtype {:?}; SGLang's --kv-cache-dtype takes auto, fp8_e4m3 or fp8_e5m2 (and bf16 or \
                 bfloat16 from 0.5.4)",
                e.kv_cache_dtype.as_deref().unwrap_or("")
            ),
        ),
    })?;
    let quantization = match e.quantization.as_deref() {
        None => model.quantization.clone(),
        Some("fp8") => Some("fp8".to_string()),
        Some(other) => {
            return Err(ConfigError::new(
                "engine.quantization",
                format!(
                    "{other:?} is not modelled; expected \"fp8\" (or leave it out for the checkpoint's own weights)"
                ),
            ))
        }
    };
    if let Some(q) = &quantization {
        if q != "fp8" {
            return Err(ConfigError::new("model.quantization", format!("{q:?} is not modelled; expected \"fp8\"")));
        }
    }
    let linear_weight_bytes = if quantization.is_some() { 1 } else { model.dtype_bytes().unwrap_or(2) };
    let eager = match kind {
        EngineKind::Vllm => e.vllm.enforce_eager.unwrap_or(false),
        EngineKind::Sglang => e.sglang.disable_cuda_graph.unwrap_or(false),
    };
    Ok(Deployment {
        tensor_parallel_size: tp,
        num_gpus: tp,
        kv_cache_dtype: kv_name,
        kv_dtype_bytes: kv_bytes,
        quantization,
        linear_weight_bytes,
        cuda_graphs: !eager,
    })
}

/// vLLM's CUDA-graph capture sizes: `[1, 2, 4] + 8..` up to
/// `min(2 × max_num_seqs, ceiling)` ([`vllm_graph_ceiling`]: 512, or 1,024 on the SM100
/// family from 0.28), in steps of 8 (0.11.0) or of 8 to 255 then 16 (from 0.11.1,
/// [`crate::cost::VLLM_GRAPH_STEP16`]; the 0.19 corpus logs capture 51 sizes up to 512,
/// `PIECEWISE=51, FULL=51`), clipped to `max_num_batched_tokens`.
pub fn vllm_capture_sizes(version: Version, gpu: &GpuCard, max_num_seqs: u32, max_batched: u32) -> u32 {
    let max = (2 * max_num_seqs).min(vllm_graph_ceiling(version, gpu)).min(max_batched);
    let mut n = [1u32, 2, 4].iter().filter(|&&s| s <= max).count() as u32;
    let mut s = 8;
    while s <= max {
        n += 1;
        s += if version >= crate::cost::VLLM_GRAPH_STEP16 && s >= 256 { 16 } else { 8 };
    }
    // The sizes appended off the grid (the releases that append them step by 16 from 256).
    let appended = crate::cost::vllm_appended_capture_sizes(version, u64::from(max), max_num_seqs, max_batched);
    n + appended.iter().filter(|&&e| e != 0).count() as u32
}

/// The first vLLM release that captures CUDA graphs up to 1,024 tokens on the SM100 family.
pub const VLLM_SM100_GRAPH_1024: Version = Version::new(0, 28, 0);

/// The largest step vLLM captures a CUDA graph for before `max_num_seqs` and the token
/// budget clip it (`VllmConfig._set_cudagraph_sizes`): `default_max_graph_size = 1024 if
/// current_platform.is_device_capability_family(100) else 512` from 0.28.0 (0.27.0: 512 on
/// every GPU).
pub fn vllm_graph_ceiling(version: Version, gpu: &GpuCard) -> u32 {
    if version >= VLLM_SM100_GRAPH_1024 && gpu.is_sm100_family() {
        1024
    } else {
        512
    }
}

/// The first vLLM release whose V2 model runner subtracts its CUDA-graph memory estimate
/// from the KV budget (0.28.0's `profile_cudagraph_memory` returns 0; 0.29.0 measures it).
/// Its size is taken as the V1 runner's ([`VLLM_GRAPH_MIB_PER_LAYER_SIZE`], fitted on V1
/// logs). The 0.29+ logs put the estimate inside the "peak activation" they print
/// (`self.peak_activation_memory = transient_peak_headroom + cudagraph_memory_estimate_applied`,
/// 0.29.0 `gpu_worker.py:601`, 0.31.0 :668): 0.51 GiB on a 0.29.0 L40S Qwen3-14B log (its
/// "equivalent to 0.9086" line) where this gives 0.90, about 0.45 GiB implied on a 0.31.0 A100
/// Llama-3.1-8B log where this gives 0.72. Two rows do not make a V2 constant; the pool is low
/// by that difference there (−4.6% and −0.9%).
pub const VLLM_V2_CUDAGRAPH_ESTIMATE: Version = Version::new(0, 29, 0);

/// How a vLLM release sizes its KV budget (`docs/vllm.md` "Memory sizing"),
/// read from the source of each release.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct VllmMemoryBehaviour {
    /// The V2 model runner (`v1/worker/gpu/model_runner.py`) runs instead of
    /// V1 (`v1/worker/gpu_model_runner.py`): `VllmConfig.use_v2_model_runner`
    /// (`config/vllm.py`) with `VLLM_USE_V2_MODEL_RUNNER` unset. Default for
    /// dense `Qwen3ForCausalLM` from 0.22, plus `LlamaForCausalLM` and
    /// `MistralForCausalLM` from 0.23 (both unquantized only until 0.24),
    /// and for every dense (non-MoE, non-hybrid) generative model from 0.25.
    pub model_runner_v2: bool,
    /// The CUDA-graph memory estimate (`profile_cudagraph_memory`) is
    /// subtracted from the budget: from 0.20
    /// (`VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1`), graphs on; on the V2
    /// runner from 0.29 (its `profile_cudagraph_memory` returns 0 in 0.21–0.28;
    /// 0.29–0.33 call `v1/worker/gpu/cudagraph_utils.py:profile_cudagraph_memory`,
    /// which captures into a throwaway pool; read in the wheels).
    pub cudagraph_estimate: bool,
    /// Non-KV memory is the free-memory drop since the init snapshot plus the
    /// transient torch peak (0.27: `total_consumed + transient_peak_headroom`)
    /// instead of weights + torch peak increase + non-torch increase (≤ 0.26).
    pub consumed_from_free_memory: bool,
    /// The KV pool is sized after warmup and CUDA-graph capture from the memory then free
    /// (0.34's extensible KV cache, on by default on CUDA: [`VLLM_EXTENSIBLE_KV_CACHE`]); the
    /// graphs are then captured and measured rather than estimated (the V2 runner's
    /// `profile_cudagraph_memory` returns 0 in this mode, 0.34.0 `gpu/model_runner.py:1121`).
    /// Only where the pool is derived: a pinned pool takes the profiling path.
    pub extensible_kv_cache: bool,
}

/// The first vLLM release with `VLLM_WSL2_ENABLE_PIN_MEMORY` (0.24.0 `platforms/cuda.py`:
/// pinned memory under WSL2 on kernels from 4.19.121 when the variable is 1; off by default).
pub const VLLM_WSL2_PIN_MEMORY_VARIABLE: Version = Version::new(0, 24, 0);

/// Whether the card describes the device as a Windows (WDDM) driver shows it,
/// as under WSL2: CUDA's total is then the whole memory `nvidia-smi` reports
/// (an RTX 4090 under WSL2 logs `Free memory on device (22.45/23.99 GiB)`,
/// 24,564 MiB, its `nvidia-smi` total), where a Linux driver's total is a few
/// hundred MiB less. A card whose `memory_bytes` equals its
/// `nvidia_smi_memory_mib` is such a view.
pub fn wddm_host(gpu: &GpuCard) -> bool {
    gpu.nvidia_smi_memory_mib.is_some_and(|m| u64::from(m) * MIB == gpu.memory_bytes)
}

/// The architectures whose engine code paths servesim tells apart (a card's `architecture`, the
/// checkpoint's `architectures[0]`): vLLM's V2 model runner is its default for dense Qwen3 from
/// 0.22 and Llama/Mistral from 0.23 (every other dense model from 0.25), SGLang runs Qwen3's q/k
/// norm in every layer, and Qwen3-MoE is the one mixture-of-experts family modelled.
pub const KNOWN_ARCHITECTURES: &[&str] =
    &["LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM"];

/// The architecture family vLLM selects by (`architectures` in the checkpoint's config): the
/// card's `architecture` where it gives one of [`KNOWN_ARCHITECTURES`] (`"other"` for any other
/// name, which `config::resolve` has checked is a causal-LM architecture), else inferred from the
/// card's Hugging Face repository or id by name.
pub fn vllm_architecture(model: &ModelCard) -> &'static str {
    if let Some(a) = model.architecture.as_deref() {
        return KNOWN_ARCHITECTURES.iter().copied().find(|k| *k == a).unwrap_or("other");
    }
    let name = model.hf_repo.as_deref().unwrap_or(&model.id).to_ascii_lowercase();
    if model.moe.is_some() {
        // The only MoE family modelled (docs/moe.md).
        if name.contains("qwen3") {
            "Qwen3MoeForCausalLM"
        } else {
            "other MoE"
        }
    } else if name.contains("llama") {
        "LlamaForCausalLM"
    } else if name.contains("mistral") {
        "MistralForCausalLM"
    } else if name.contains("qwen3") {
        "Qwen3ForCausalLM"
    } else if name.contains("qwen2") {
        "Qwen2ForCausalLM"
    } else {
        "other"
    }
}

/// Whether `name` has the form of a Hugging Face causal-LM architecture a card accepts:
/// `<letters and digits>ForCausalLM` (the checkpoint's `architectures[0]`).
pub fn is_causal_lm_architecture(name: &str) -> bool {
    name.strip_suffix("ForCausalLM").is_some_and(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric()))
}

/// Checks a card's `architecture` (field `model.architecture`): a Hugging Face causal-LM
/// architecture name (`...ForCausalLM`), not a different spelling of one servesim tells apart,
/// and a mixture-of-experts architecture exactly where the card has a `moe` object. A dense
/// card may leave it out (guessed from the repo name, [`vllm_architecture`]); a MoE card must
/// name it: its `moe` object describes Qwen3-MoE's layers only, and a repo name says nothing
/// servesim checks (a `moe` object under `mistralai/Mixtral-8x7B` ran as Qwen3-MoE).
pub(crate) fn check_architecture(model: &ModelCard) -> std::result::Result<(), String> {
    let Some(a) = model.architecture.as_deref() else {
        return match model.moe {
            Some(_) => Err("missing on a card with a `moe` object: a mixture-of-experts card must name its \
                            architecture, the checkpoint's architectures[0], and the only one modelled is \
                            \"Qwen3MoeForCausalLM\" (docs/moe.md)"
                .to_string()),
            None => Ok(()),
        };
    };
    let known = KNOWN_ARCHITECTURES.join(", ");
    if let Some(k) = KNOWN_ARCHITECTURES.iter().find(|k| k.eq_ignore_ascii_case(a) && **k != a) {
        return Err(format!("{a:?}: did you mean {k:?}? (the checkpoint's architectures[0], spelt exactly)"));
    }
    let Some(stem) = a.strip_suffix("ForCausalLM").filter(|_| is_causal_lm_architecture(a)) else {
        return Err(format!(
            "{a:?}: expected a Hugging Face causal-LM architecture name, the checkpoint's architectures[0] \
             (servesim tells apart {known}; another ...ForCausalLM name runs by the engines' rules for other \
             dense models)"
        ));
    };
    // Mixture-of-experts families by name: `...Moe...`/`...moe...`, and those whose names do not say it.
    let moe_arch = stem.to_ascii_lowercase().contains("moe")
        || ["Mixtral", "DeepseekV2", "DeepseekV3", "GptOss", "Dbrx", "Grok1", "Jamba"].contains(&stem);
    match (&model.moe, moe_arch) {
        (Some(_), false) => Err(format!(
            "{a:?} with a `moe` object: a mixture-of-experts card must name its MoE architecture \
             (Qwen3MoeForCausalLM, the one modelled: docs/moe.md)"
        )),
        (Some(_), true) if a != "Qwen3MoeForCausalLM" => Err(format!(
            "{a:?}: the only mixture-of-experts architecture modelled is Qwen3MoeForCausalLM (docs/moe.md)"
        )),
        (None, true) => {
            Err(format!("{a:?} is a mixture-of-experts architecture: the card needs its `moe` object (docs/moe.md)"))
        }
        _ => Ok(()),
    }
}

impl VllmMemoryBehaviour {
    /// The release's behaviour for this (dense: servesim's cards are all
    /// dense) model, quantized or not, CUDA graphs on or off.
    pub fn of_release(v: Version, model: &ModelCard, quantized: bool, cuda_graphs: bool) -> VllmMemoryBehaviour {
        let arch = vllm_architecture(model);
        // A MoE model keeps the V1 runner: V2 is the default for dense models only.
        let model_runner_v2 = if model.moe.is_some() {
            false
        } else if v >= Version::new(0, 25, 0) {
            true
        } else if v >= Version::new(0, 24, 0) {
            matches!(arch, "Qwen3ForCausalLM" | "LlamaForCausalLM" | "MistralForCausalLM")
        } else if v >= Version::new(0, 23, 0) {
            !quantized && matches!(arch, "Qwen3ForCausalLM" | "LlamaForCausalLM" | "MistralForCausalLM")
        } else if v >= Version::new(0, 22, 0) {
            !quantized && arch == "Qwen3ForCausalLM"
        } else {
            false
        };
        VllmMemoryBehaviour {
            model_runner_v2,
            // `VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS` defaults to "1" from 0.20.0 ("0" in
            // 0.18.0 and 0.19.0; read in the wheels).
            cudagraph_estimate: cuda_graphs
                && v >= Version::new(0, 20, 0)
                && (!model_runner_v2 || v >= VLLM_V2_CUDAGRAPH_ESTIMATE),
            consumed_from_free_memory: v >= Version::new(0, 27, 0),
            extensible_kv_cache: v >= VLLM_EXTENSIBLE_KV_CACHE,
        }
    }

    /// [`Self::of_release`] on `gpu` as its host shows it. On a Windows/WSL2 (WDDM) host vLLM
    /// 0.22–0.23 has no pinned memory (`Platform.is_pin_memory_available` is false under WSL;
    /// `VLLM_WSL2_ENABLE_PIN_MEMORY` arrives in 0.24, read in the 0.22.0, 0.23.0 and 0.24.0
    /// wheels), and the V2 runner's request buffers need it (`UvaBuffer`: "UVA is not
    /// available"; the runner choice does not check it): the server that starts there runs the
    /// V1 runner (`VLLM_USE_V2_MODEL_RUNNER=0`), which is what servesim sizes. From 0.24 a WSL2
    /// server can run V2 with the variable set, which servesim assumes (the
    /// `wsl2_pinned_memory` caveat, `report::wsl2_pinned_memory`).
    pub fn for_card(v: Version, model: &ModelCard, gpu: &GpuCard, quantized: bool, cuda_graphs: bool) -> Self {
        let mut mb = Self::of_release(v, model, quantized, cuda_graphs);
        if mb.model_runner_v2 && wddm_host(gpu) && v < VLLM_WSL2_PIN_MEMORY_VARIABLE {
            mb = VllmMemoryBehaviour {
                model_runner_v2: false,
                cudagraph_estimate: cuda_graphs && v >= Version::new(0, 20, 0),
                ..mb
            };
        }
        mb
    }
}

/// vLLM's torch activation peak in `profile_run`: the larger of the dummy
/// forward at `max_batched` tokens (residual and hidden states, then the
/// MLP's gate/up output and its activation, TP-sharded) and the sampler run
/// over `min(max_seqs, max_batched)` rows (the kept hidden states, and per
/// vocabulary entry the bf16 logits, their fp32 copy and fp32 probabilities:
/// 10 bytes; logits are gathered to the full vocabulary).
pub fn vllm_activation_peak(model: &ModelCard, tp: u32, max_batched: u32, max_seqs: u32) -> u64 {
    let a = u64::from(model.activation_dtype_bytes());
    let h = u64::from(model.hidden_size);
    let t = u64::from(max_batched);
    let forward = t * (2 * h + mlp_activation_elems_per_token(model, tp)) * a;
    let sampler = t * h * a + u64::from(max_seqs.min(max_batched)) * u64::from(model.vocab_size) * 10;
    forward.max(sampler)
}

/// The MLP's activations a token holds at the dummy forward's peak, elements: a dense MLP's
/// gate/up output and its activation (`3 × intermediate / tp`); a MoE layer's Triton
/// `fused_experts` caches (`fused_moe.py:fused_experts_impl`: `(M, k, 2·I/tp)`, `(M·k, I/tp)` and
/// `(M, k, hidden)` for top-k `k`, docs/moe.md §2.4; the tokens are at most the 16,384 of
/// `VLLM_FUSED_MOE_CHUNK_SIZE`, above every budget servesim's scenarios use).
fn mlp_activation_elems_per_token(model: &ModelCard, tp: u32) -> u64 {
    match &model.moe {
        None => 3 * (model.effective_intermediate_size().round() as u64 / u64::from(tp.max(1))),
        Some(m) => {
            let i = u64::from(m.moe_intermediate_size) / u64::from(tp.max(1));
            u64::from(m.experts_per_token) * (3 * i + u64::from(model.hidden_size))
        }
    }
}

/// The first vLLM release whose V2 sampler leaves the logits in the model's dtype when no request
/// of the batch needs logits processing (0.26.0 `v1/worker/gpu/sample/sampler.py:162`: the
/// processing runs in place, "The ops below upcast to fp32 internally"; 0.27.0 :155
/// `_requires_logits_processing`; 0.28.0 :192 – 0.34.0 :235 `needs_logits_processing`). 0.22–0.25
/// copy every batch's logits to fp32 (0.22.0 `sampler.py:133`, 0.25.0 :157).
pub const VLLM_V2_SAMPLER_SKIPS_FP32_COPY: Version = Version::new(0, 26, 0);
/// The first vLLM release whose V2 `_dummy_sampler_run` runs the sampler a second time with
/// `SamplingParams.for_sampler_warmup()` for every row (0.33.0 `v1/worker/gpu/model_runner.py:1008`,
/// 0.34.0 :1056: "warmup_kernels (run after the KV cache is sized) pays for the fp32 logits
/// pipeline, so the profiled peak must too"), except on the CPU backend (0.33.0 :1004). 0.22–0.32
/// run only the default pass (the same function in all of them).
pub const VLLM_V2_SAMPLER_WARMUP_PASS: Version = Version::new(0, 33, 0);

/// The V2 model runner's sampler in the profiling run (`v1/worker/gpu/model_runner.py:
/// _dummy_sampler_run`): the bytes per entry of the `min(max_num_seqs, max_num_batched_tokens) ×
/// vocabulary` logits alive together at its peak, `a` the bytes of the model's dtype, which is the
/// logits' (`LogitsProcessor` projects in `head_dtype`, the model's dtype for a generative model:
/// 0.33.0 `model_executor/layers/logits_processor.py:143`, `config/model.py:_get_head_dtype`).
/// Read in the released wheels 0.22.0–0.34.0:
/// * 0.22–0.25: one pass over a dummy batch with default parameters (greedy, no top-k/top-p), whose
///   logits `Sampler.apply_sampling_params` copies to fp32 all the same: the logits and the copy,
///   `a + 4`.
/// * 0.26–0.32: the same pass, the copy skipped ([`VLLM_V2_SAMPLER_SKIPS_FP32_COPY`]): `a`.
/// * 0.33–0.34: the warmup-parameter pass after it ([`VLLM_V2_SAMPLER_WARMUP_PASS`]; temperature
///   0.9, top-k 50, top-p 0.9, min-p, penalties, logit bias, bad words, 5 logprobs:
///   0.33.0 `sampling_params.py:1477`) copies the logits to fp32 (`sampler.py:242`) and, as top-k
///   and top-p are set and no row is greedy or seeded, samples with FlashInfer where
///   `flashinfer_sampler_supported()` (`sampler.py:307`–341; CUDA, compute capability 8.0–12.1 by
///   `FlashInferBackend.supports_compute_capability`, more than 16 SMs:
///   `v1/sample/ops/topk_topp_sampler.py:102`): `top_k_top_p_sampling_from_logits` with per-row
///   top-k and top-p tensors (`topk_topp_sampler.py:664`) allocates the top-k-masked logits and
///   their softmax, both fp32, beside the copy (flashinfer 0.7.2.post1, the version 0.33.0 pins,
///   `sampling.py:1795`–1796; the same in 0.7.4): `a + 12`. Elsewhere on CUDA the Triton
///   top-k/top-p masks the fp32 copy in place (`topk_topp_triton.py:apply_top_k_top_p_triton`):
///   `a + 4`. The CPU backend skips the pass: `a`.
///
/// The Gumbel kernel's per-block maxima, the top-5 logprobs (`torch.topk` and a Triton
/// log-softmax over the model-dtype logits) and the Triton top-k/top-p's per-SM buffer are not
/// counted (small, or per SM rather than per row).
pub fn vllm_v2_sampler_bytes_per_logit(version: Version, gpu: &GpuCard, a: u64) -> u64 {
    if version < VLLM_V2_SAMPLER_SKIPS_FP32_COPY {
        a + 4
    } else if version < VLLM_V2_SAMPLER_WARMUP_PASS || super::vllm::is_cpu_host(gpu) {
        a
    } else if gpu.capability().is_none_or(|c| ((8, 0)..=(12, 1)).contains(&c)) {
        a + 12
    } else {
        a + 4
    }
}

/// The V2 model runner's torch activation peak in `profile_run`
/// (`v1/worker/gpu/model_runner.py`): the same dummy forward at `max_batched` tokens, then
/// `_dummy_sampler_run` over `r = min(max_seqs, max_batched)` rows (`_dummy_run`'s `num_reqs`,
/// 0.33.0 :862), with the forward's hidden states (`max_batched` rows) and the rows it samples
/// (`hidden_states[logits_indices]`, a copy: :989) still held by `profile_run`: the logits at
/// [`vllm_v2_sampler_bytes_per_logit`] per entry, or, at TP > 1 where that is more, the
/// all-gather that builds them (`LogitsProcessor._gather_logits`: `use_all_gather()` is true on
/// CUDA; the communicator's `all_gather` fills a `tp × r × vocab/tp` buffer and copies it into
/// `r × vocab` by `movedim` and `reshape`, beside the local shard: 0.33.0
/// `distributed/device_communicators/cuda_communicator.py:484`–490).
pub fn vllm_v2_activation_peak(
    model: &ModelCard,
    gpu: &GpuCard,
    version: Version,
    tp: u32,
    max_batched: u32,
    max_seqs: u32,
) -> u64 {
    vllm_v2_activation_peak_tensors(model, gpu, version, tp, max_batched, max_seqs)
        .max(vllm_compile_embedding_transient(model, tp))
}

/// [`vllm_v2_activation_peak`] without the compile transient: the profiled tensors alone. Used
/// where the Windows/WSL2 host term ([`VLLM_WDDM_CONSUMED_PER_WEIGHT_BYTE`]) is charged, which
/// was fitted on logs that print no peak and absorbs whatever their profiling held (their
/// excess is smaller than the embedding table on two of the four: `data/published/kv-logs.md`).
pub fn vllm_v2_activation_peak_tensors(
    model: &ModelCard,
    gpu: &GpuCard,
    version: Version,
    tp: u32,
    max_batched: u32,
    max_seqs: u32,
) -> u64 {
    let a = u64::from(model.activation_dtype_bytes());
    let h = u64::from(model.hidden_size);
    let v = u64::from(model.vocab_size);
    let t = u64::from(max_batched);
    let r = u64::from(max_seqs.min(max_batched));
    let forward = t * (2 * h + mlp_activation_elems_per_token(model, tp)) * a;
    let logits = r * v * vllm_v2_sampler_bytes_per_logit(version, gpu, a);
    let gather = if tp > 1 { 2 * r * v * a + r * v.div_ceil(u64::from(tp)) * a } else { 0 };
    forward.max(t * h * a + r * h * a + logits.max(gather))
}

/// The transient of the size of one GPU's token-embedding table (`vocab / tp × hidden` in the
/// model's dtype) that the V2 runner's profiling run holds at its peak when torch.compile
/// compiles the model inside it (a cold compile cache, a fresh server's case: the first compiled
/// call is `profile_run`'s dummy forward, inside `memory_profiling`, 0.29.0
/// `gpu_worker.py:553`). Not read in vLLM's source (it is the compiler's, not vLLM's): inferred
/// from the start-up logs, where the profiled peak at 2,048 batched tokens is the embedding
/// table's size and not the forward's 0.2 GiB (docs/vllm.md §5 item 2): Qwen3-14B 1.48 GiB
/// (table 1.45; 0.29.0, L40S, "peak activation" 1.99 less the 0.51 GiB graph estimate it
/// includes), Qwen3-8B ≤ 1.35 GiB with the non-torch memory (table 1.16; 0.24.0, RTX 5090,
/// whose next boot with the compile cache warm logged 0.95 GiB more KV cache), and at 8,192
/// tokens on an H100 (Qwen2.5-7B, 0.26.0) 1.13 GiB cold against 1.06 GiB with the compiled
/// graph loaded from cache (table 1.09 GiB, forward 0.98). The compiled region holds the
/// embedding lookup (`embed_input_ids` in the `@support_torch_compile` model's forward), and
/// vLLM turns on Inductor's `combo_kernels` with `benchmark_combo_kernel` from torch 2.9
/// (0.24.0 `config/compilation.py:957`–965, 0.29.0 :985–993), whose compile-time benchmarks
/// run generated kernels on freshly allocated arguments of the real shapes (the likely source;
/// not established here). A warm compile cache (a restarted server with its cache kept) has no
/// such transient: servesim assumes the cold start.
pub fn vllm_compile_embedding_transient(model: &ModelCard, tp: u32) -> u64 {
    let a = u64::from(model.activation_dtype_bytes());
    u64::from(model.vocab_size).div_ceil(u64::from(tp.max(1))) * u64::from(model.hidden_size) * a
}

/// Whether vLLM's extra memory outside torch at TP > 1 ([`VLLM_NON_TORCH_TP_MIB`]) applies on
/// this card: fitted on H100 SXM rows (NVLink through NVSwitch); on GPUs linked over PCIe the one
/// TP log (0.27.1, two RTX PRO 6000 over PCIe, Qwen3-32B) leaves 1.66 GiB per GPU for the
/// profiling peak, the V2 sampler state and all non-torch memory together, where this term alone
/// is 1.87 GiB. vLLM's own device buffers at TP > 1 are small on any link (custom all-reduce
/// buffers of at most 64 MiB, `all_reduce_utils.py:CUSTOM_ALL_REDUCE_MAX_SIZES`; torch
/// symmetric memory only on compute capability 9.0, 10.0 and 10.3 and at most 128 MiB,
/// `SYMM_MEM_ALL_REDUCE_MAX_SIZES`, read in 0.27.1), so the term is NCCL's, which sets up
/// NVLink-only transports (NVLS) on NVSwitch systems; on a PCIe card servesim charges none of it.
pub fn vllm_tp_non_torch_applies(gpu: &GpuCard) -> bool {
    gpu.interconnect.as_deref() != Some("pcie")
}

/// The V2 model runner's persistent sampler state (`v1/worker/gpu/model_runner.py:load_model`,
/// after the weights are measured and before profiling; 0.22–0.23 build it in
/// `GPUModelRunner.__init__`, equally outside the weights' measure): `PenaltiesState`'s
/// `output_bin_counts` (`max_num_seqs × vocab` int32; "can be very large, taking up GBs of GPU
/// memory", its own TODO) and `prompt_bin_mask` (`max_num_seqs × ⌈vocab/32⌉` int32,
/// `sample/penalties.py`, 0.22.0–0.34.0), and `StructuredOutputsWorker`'s `grammar_bitmask`
/// (`max_num_seqs × ⌈vocab/32⌉` int32 without speculative decoding, `structured_outputs.py`).
/// Allocated whatever the requests ask for. vLLM ≤ 0.26 does not charge it (it is torch memory
/// allocated before the profiling run: neither in the peak's increase nor outside torch);
/// 0.27's free-memory measure does ([`VllmMemoryBehaviour::consumed_from_free_memory`]), and
/// so does 0.34's sizing from the memory then free.
pub fn vllm_v2_sampler_state_bytes(model: &ModelCard, max_seqs: u32) -> u64 {
    let v = u64::from(model.vocab_size);
    u64::from(max_seqs) * (v * 4 + 2 * v.div_ceil(32) * 4)
}

/// The torch peak of 0.34's KV sizing step (`gpu/warmup.py:run_kv_cache_sizing_warmup`, 0.34.0
/// :483): one step of `max_batched` tokens through `execute_model`, its prompt asking for
/// `max_logprobs` (20) prompt logprobs. Its forward is the profiling run's (attention, which
/// profiling skipped, adds workspaces not modelled here); after it the step keeps the hidden
/// states of every token and computes the prompt logprobs 1,024 rows at a time
/// (`sample/prompt_logprob.py:compute_prompt_logprobs_with_chunking`): each chunk's logits in
/// the model's dtype (`LogitsProcessor`, no `head_dtype` by default), gathered to the full
/// vocabulary at TP > 1 (the local shard alive beside it), a top-20 and a log-softmax kernel
/// that materialises no full-vocabulary tensor (`sample/logprob.py:compute_token_logprobs`).
/// This returns that logits phase; the caller takes the larger of it and the profiling run's
/// peak. Not modelled: a `max_model_len` below the budget (vLLM then splits the step across
/// prompts and asks logprobs of one), and the torch reservation's growth beyond the allocated
/// peak (`_measure_sizing_step`: fragmentation), taken as no larger than the peak.
pub fn vllm_kv_sizing_step_peak(model: &ModelCard, tp: u32, max_batched: u32) -> u64 {
    let a = u64::from(model.activation_dtype_bytes());
    let h = u64::from(model.hidden_size);
    let v = u64::from(model.vocab_size);
    let t = u64::from(max_batched);
    let rows = t.min(VLLM_PROMPT_LOGPROBS_CHUNK_ROWS);
    let shard = if tp > 1 { rows * v.div_ceil(u64::from(tp)) * a } else { 0 };
    t * h * a + rows * v * a + shard
}

/// vLLM's `determine_available_memory` for one GPU (see the module docs).
pub fn vllm_memory_account(
    model: &ModelCard,
    gpu: &GpuCard,
    dep: &Deployment,
    version: Version,
    util: f64,
    max_batched: u32,
    max_seqs: u32,
) -> MemoryAccount {
    let total = gpu.memory_bytes;
    let requested = (total as f64 * util) as u64;
    let tp = dep.tensor_parallel_size;
    let weights = model.weight_bytes_per_gpu(tp, dep.linear_weight_bytes);
    let mb = VllmMemoryBehaviour::for_card(version, model, gpu, dep.quantization.is_some(), dep.cuda_graphs);
    let host = mb.consumed_from_free_memory && wddm_host(gpu);
    let profile_peak = if mb.model_runner_v2 && host {
        vllm_v2_activation_peak_tensors(model, gpu, version, tp, max_batched, max_seqs)
    } else if mb.model_runner_v2 {
        vllm_v2_activation_peak(model, gpu, version, tp, max_batched, max_seqs)
    } else {
        vllm_activation_peak(model, tp, max_batched, max_seqs)
    };
    // 0.34 (extensible KV cache; not on the CPU backend, where `is_cuda_alike()` is false):
    // the transient it keeps free is the largest measured of the profiling run's, the warmup
    // steps' and the sizing step's (`reserved_headroom_bytes`, `record_transient_peak`).
    let extensible = mb.extensible_kv_cache && !super::vllm::is_cpu_host(gpu);
    let activation_peak =
        if extensible { profile_peak.max(vllm_kv_sizing_step_peak(model, tp, max_batched)) } else { profile_peak };
    let non_torch_mib = if mb.model_runner_v2 { VLLM_V2_NON_TORCH_MIB } else { VLLM_NON_TORCH_MIB }
        + if tp > 1 && vllm_tp_non_torch_applies(gpu) { VLLM_NON_TORCH_TP_MIB } else { 0.0 };
    let wddm = if host { VLLM_WDDM_CONSUMED_PER_WEIGHT_BYTE * weights as f64 } else { 0.0 };
    let non_torch = (non_torch_mib * MIB as f64 + wddm) as u64;
    let cuda_graphs = if mb.cudagraph_estimate {
        let sizes = vllm_capture_sizes(version, gpu, max_seqs, max_batched);
        (VLLM_GRAPH_MIB_PER_LAYER_SIZE * f64::from(model.num_layers) * f64::from(sizes) * MIB as f64) as u64
    } else {
        0
    };
    let sampler_state = if mb.model_runner_v2 && mb.consumed_from_free_memory {
        vllm_v2_sampler_state_bytes(model, max_seqs)
    } else {
        0
    };
    let non_kv = weights + activation_peak + non_torch + cuda_graphs + sampler_state;
    let (context, margin, kv, derivation) = if extensible {
        // `extensible_kv_cache.py:measure_kv_cache_bytes` (0.34.0 :592): available =
        // min(requested − non-KV use, free + committed − margin) − max(peak, reservation
        // growth), the margin max(1 GiB, 0.75 × peak). Free + committed after warmup is the
        // free memory at the start-up snapshot less the non-KV use, so the headroom cap is the
        // device less what was in use at the snapshot, less the margin.
        let used_at_snapshot_mib = if tp > 1 { VLLM_USED_AT_SNAPSHOT_TP_MIB } else { VLLM_USED_AT_SNAPSHOT_MIB };
        let at_snapshot = (used_at_snapshot_mib * MIB as f64) as u64;
        let margin = VLLM_KV_MARGIN_FLOOR_BYTES.max((activation_peak as f64 * VLLM_KV_MARGIN_FRACTION) as u64);
        let headroom_cap = total.saturating_sub(at_snapshot + margin);
        // What the device headroom holds back inside the requested memory (nothing where an
        // explicit utilization is the smaller cap): the snapshot's use first, then the margin.
        let held = requested.saturating_sub(headroom_cap);
        let context = held.min(at_snapshot);
        let margin_charged = held - context;
        let kv = requested.min(headroom_cap).saturating_sub(non_kv);
        (
            context,
            margin_charged,
            kv,
            "vLLM 0.34 sizes the pool after warmup and CUDA-graph capture (extensible KV cache): \
                         min(requested, device − memory in use at start-up − margin) − weights − non-torch − CUDA \
                         graphs − transient peak, the margin max(1 GiB, 0.75 × peak) \
                         (v1/worker/extensible_kv_cache.py:measure_kv_cache_bytes). Derived: requested, weights, \
                         the transient peak (the larger of the profiling run's, V2 model runner, and the sizing \
                         step's: hidden states and one 1,024-row chunk of prompt logits), KV cell; source \
                         constants: the margin; from logs: memory in use at start-up (0.47 GiB, 0.96 at TP > 1); \
                         fitted on the start-up log corpus: V2 non-torch memory (and its extra at TP > 1), CUDA-graph \
                         memory per layer per capture size (the V1 runner's figure, taken as what capture \
                         measures), and on a Windows/WSL2 host what the free-memory measure adds per byte of weights. \
                         Derived from the source's constants; not checked against a 0.34 start-up log",
        )
    } else {
        let derivation = match (mb.model_runner_v2, host) {
            (false, false) => {
                "derived: requested, weights, activation peak (V1 model runner), KV cell; fitted on the start-up log \
             corpus: non-torch memory (TP 1 and TP > 1) and CUDA-graph memory per layer per capture size \
             (subtracted from 0.20)"
            }
            (true, false) if mb.cudagraph_estimate => {
                "derived: requested, weights, activation peak (V2 model runner: the profiled tensors, or a cold \
             torch.compile's transient the size of the embedding table where larger, inferred from start-up logs), \
             KV cell; fitted on the start-up log corpus: V2 non-torch memory (and its extra at TP > 1 on NVLink \
             cards), and CUDA-graph memory per layer per capture size (the V1 runner's figure; V2 subtracts its \
             estimate from 0.29)"
            }
            (true, false) => {
                "derived: requested, weights, activation peak (V2 model runner: the profiled tensors, or a cold \
             torch.compile's transient the size of the embedding table where larger, inferred from start-up logs; \
             no CUDA-graph estimate before 0.29), KV cell; fitted on the start-up log corpus: V2 non-torch memory \
             (and its extra at TP > 1 on NVLink cards)"
            }
            (true, true) => {
                "derived: requested, weights, activation peak (V2 model runner; its CUDA-graph estimate from 0.29, \
             the V1 runner's figure), KV cell; fitted on the start-up log corpus: V2 non-torch memory (and its \
             extra at TP > 1), and what 0.27's free-memory accounting adds per byte of weights on a \
             Windows/WSL2 (WDDM) host"
            }
            (false, true) => {
                "derived: requested, weights, activation peak (V1 model runner), KV cell; fitted on the start-up \
             log corpus: non-torch memory (TP 1 and TP > 1), CUDA-graph memory per layer per capture size \
             (subtracted from 0.20), and what 0.27's free-memory accounting adds per byte of weights on a \
             Windows/WSL2 (WDDM) host"
            }
        };
        (0, 0, requested.saturating_sub(non_kv), derivation)
    };
    MemoryAccount {
        total,
        requested,
        weights,
        activation_peak,
        non_torch,
        cuda_graphs,
        sampler_state,
        context,
        margin,
        kv,
        reserve: total - requested,
        derivation,
    }
}

/// SGLang's `profile_max_num_token` for one GPU (see the module docs).
pub fn sglang_memory_account(model: &ModelCard, gpu: &GpuCard, dep: &Deployment, mfs: f64) -> MemoryAccount {
    let total = gpu.memory_bytes;
    let ctx = (SGLANG_CONTEXT_MIB * MIB as f64) as u64;
    let weights = model.weight_bytes_per_gpu(dep.tensor_parallel_size, dep.linear_weight_bytes);
    let requested = (total as f64 * mfs) as u64;
    // rest = (total − ctx) × mfs − weights, i.e. the context charged at mfs, in every modelled
    // release: "memory before" is the free memory once the context (and NCCL) exist, in 0.4.10
    // (`init_torch_distributed`'s `min_per_gpu_memory`, passed to `profile_max_num_token`) as in
    // 0.5.x (`pre_model_load_memory`). Until 2026-12-06 0.4.x charged it in full (about 0.2 GiB
    // less pool on an H100).
    let context = (ctx as f64 * mfs) as u64;
    let kv = requested.saturating_sub(weights + context);
    MemoryAccount {
        total,
        requested,
        weights,
        activation_peak: 0,
        non_torch: 0,
        cuda_graphs: 0,
        sampler_state: 0,
        context,
        margin: 0,
        kv,
        reserve: total - requested,
        derivation: "derived: mem_fraction_static, weights, KV cell; fitted on the start-up log corpus: \
                     the CUDA context and start-up allocations",
    }
}

/// The device memory SGLang's defaults compare against: `nvidia-smi`'s
/// total in MiB (`get_device_memory_capacity`), which counts memory the
/// driver reserves; the card's `nvidia_smi_memory_mib`, else CUDA's total.
pub(super) fn sglang_gpu_mem_mib(gpu: &GpuCard) -> f64 {
    gpu.nvidia_smi_memory_mib.map(f64::from).unwrap_or(gpu.memory_bytes as f64 / MIB as f64)
}

/// SGLang's default `--cuda-graph-max-bs` for a release, GPU and TP size, or `None` where the
/// release leaves it unset.
///
/// * 0.4.10–0.5.2 (`ServerArgs.__post_init__`): set only below 35 GB of device memory (8, or
///   80 at TP ≥ 4); above, unset, and the capture list ends where the release's list does
///   ([`sglang_capture_list`]: 160 up to 90 GiB, 256 above, 512 above 160,000 MiB).
/// * 0.5.3 and later (`_handle_gpu_memory_settings`): by device memory and TP size, below.
pub fn sglang_default_cuda_graph_max_bs(gpu: &GpuCard, version: Version, tp: u32) -> Option<u32> {
    let mem = sglang_gpu_mem_mib(gpu) / 1024.0;
    let small_tp = tp < 4;
    if version < SGLANG_GPU_MEMORY_SETTINGS {
        return (mem < 35.0).then_some(if small_tp { 8 } else { 80 });
    }
    Some(if mem < 20.0 {
        8
    } else if mem < 35.0 {
        // Read in the 0.5.3–0.5.15, 0.5.18–0.5.21 and 0.5.23 wheels: 16 / 80 in 0.5.3–0.5.4,
        // 24 / 80 in 0.5.5–0.5.19, 48 / 160 from 0.5.20.
        match (version >= SGLANG_MID_TIER_DOUBLED, small_tp) {
            (true, true) => 48,
            (true, false) => 160,
            (false, true) if version >= Version::new(0, 5, 5) => 24,
            (false, true) => 16,
            (false, false) => 80,
        }
    } else if mem < 60.0 {
        if small_tp {
            32
        } else {
            160
        }
    } else if mem < 160.0 {
        if small_tp {
            256
        } else {
            512
        }
    } else {
        512
    })
}

/// The first SGLang release whose 20–35 GB tier takes 4,096-token chunks and captures decode
/// graphs to 48 (160 at TP ≥ 4), where 0.5.19 had 2,048 and 24 (80): read in the 0.5.18, 0.5.19,
/// 0.5.20, 0.5.21 and 0.5.23 wheels.
pub const SGLANG_MID_TIER_DOUBLED: Version = Version::new(0, 5, 20);

/// The first SGLang release whose `_handle_gpu_memory_settings` sets the chunked-prefill size,
/// `cuda_graph_max_bs` and the `mem_fraction_static` reserve from device memory (0.5.1 and
/// 0.5.2 still use 0.4.x's tables; there is no 0.5.0 on PyPI).
pub const SGLANG_GPU_MEMORY_SETTINGS: Version = Version::new(0, 5, 3);

/// Before 0.5.3, SGLang's capture list goes on by 8 to 256 (not 160) above this device memory
/// (nvidia-smi MiB: `gpu_mem > 90 * 1024`).
pub const SGLANG_LIST_TO_256_MIB: f64 = 90.0 * 1024.0;

/// The decode batch sizes SGLang captures as CUDA graphs, ascending, for a release, the device
/// memory SGLang sees (`gpu_mem_mib`, nvidia-smi's MiB), the `--cuda-graph-max-bs` setting
/// (`None`: unset) and the request pool's size (`pool`: `--max-running-requests`, else the
/// derived `max_num_reqs`).
///
/// * 0.4.10–0.5.2 (`cuda_graph_runner.get_batch_sizes_to_capture`): `[1, 2, 4, 8] +
///   range(16, 161, 8)`, `+ range(160, 257, 8)` above 90 GiB, `+ range(256, 513, 16)` above
///   160,000 MiB; the pool's size added if the list goes past it; a setting then filters the
///   list and, if the list ends below it, extends it by 16 (`range(max, setting + 1, 16)`);
///   nothing past the pool.
/// * 0.5.3 and later (`ServerArgs._generate_cuda_graph_batch_sizes`): `[1, 2, 4, 8, 12] +
///   range(16, 257, 8) + range(272, 512, 16) + range(512, setting + 1, 32)` up to the setting,
///   the setting itself added from 0.5.10 when the list misses it; then the pool's size as
///   above (`get_batch_sizes_to_capture`).
pub fn sglang_capture_list(version: Version, gpu_mem_mib: f64, setting: Option<u32>, pool: u32) -> Vec<u32> {
    let mut bs: Vec<u32>;
    if version < SGLANG_GPU_MEMORY_SETTINGS {
        bs = [1, 2, 4, 8].into_iter().chain((16..=160).step_by(8)).collect();
        if gpu_mem_mib > SGLANG_LIST_TO_256_MIB {
            bs.extend((160..=256).step_by(8));
        }
        if gpu_mem_mib > 160.0 * 1000.0 {
            bs.extend((256..=512).step_by(16));
        }
        if bs.iter().max().is_some_and(|&m| m > pool) {
            bs.push(pool);
        }
        if let Some(s) = setting {
            bs.retain(|&b| b <= s);
            let top = bs.iter().copied().max().unwrap_or(1);
            if top < s {
                bs.extend((top..=s).step_by(16));
            }
        }
    } else {
        let s = setting.unwrap_or(160);
        bs = [1, 2, 4, 8, 12]
            .into_iter()
            .chain((16..=256).step_by(8))
            .chain((272..512).step_by(16))
            .chain((512..=s.max(512)).step_by(32))
            .filter(|&b| b <= s)
            .collect();
        if version >= Version::new(0, 5, 10) && !bs.contains(&s) {
            bs.push(s);
        }
        if bs.iter().max().is_some_and(|&m| m > pool) {
            bs.push(pool);
        }
    }
    bs.retain(|&b| b <= pool);
    bs.sort_unstable();
    bs.dedup();
    bs
}

/// The first SGLang release whose default reserve counts the prefill (piecewise) CUDA graphs:
/// `--disable-piecewise-cuda-graph` defaults to false from 0.5.10 (0.5.6–0.5.9 had an opt-in
/// `--enable-piecewise-cuda-graph` and counted nothing by default).
pub const SGLANG_PIECEWISE_GRAPH_RESERVE: Version = Version::new(0, 5, 10);

/// What SGLang's default `mem_fraction_static` reserves for the prefill (piecewise) CUDA
/// graphs of a dense text model, MiB: 8 × the number of token sizes it captures
/// (`len(piecewise_cuda_graph_tokens) * 8` in `_handle_gpu_memory_settings`, 0.5.10–0.5.13;
/// `len(prefill_cuda_graph_config.bs) * 8` from 0.5.14; `reserve_for_graph_mb` in
/// `arg_groups/memory_hook.py` from 0.5.19), added before the 10 GiB floor. The sizes are
/// `range(4, 33, 4) + range(48, 257, 16) + range(288, 513, 32) + range(576, 1025, 64) +
/// range(1280, 4097, 256) + range(4608, max + 1, 512)` up to `max` = the chunked-prefill size
/// (the same from 0.5.9 to 0.5.23), capped by `--context-length` when given in 0.5.13–0.5.16
/// and by `--max-total-tokens` when given (0.5.10 `server_args.py:1263`, "cap pcg tokens to not
/// exceed max_total_tokens"; 0.5.15 `_handle_gpu_memory_settings`; 0.5.23
/// `arg_groups/memory_hook.py:252`; servesim left this cap out until 2026-12-06); none with
/// chunked prefill off. Counted with `--disable-cuda-graph` through 0.5.13, not from
/// 0.5.14 (its prefill graph backend is then disabled). 0 before 0.5.10 and where the engine
/// has no CUDA graphs at all (`graphs_possible`: the CPU test bed). Read in every wheel from
/// 0.5.3 to 0.5.23 (docs/sglang.md §6).
pub fn sglang_piecewise_graph_reserve_mib(
    version: Version,
    chunked_prefill_size: Option<u32>,
    context_length_given: Option<u32>,
    max_total_tokens_given: Option<u64>,
    cuda_graphs: bool,
    graphs_possible: bool,
) -> f64 {
    if version < SGLANG_PIECEWISE_GRAPH_RESERVE || !graphs_possible {
        return 0.0;
    }
    if !cuda_graphs && version >= Version::new(0, 5, 14) {
        return 0.0;
    }
    let Some(mut max) = chunked_prefill_size else { return 0.0 };
    if version >= Version::new(0, 5, 13) && version <= Version::new(0, 5, 16) {
        if let Some(c) = context_length_given {
            max = max.min(c);
        }
    }
    if let Some(t) = max_total_tokens_given {
        max = u64::from(max).min(t) as u32;
    }
    let sizes = (4..=32)
        .step_by(4)
        .chain((48..=256).step_by(16))
        .chain((288..=512).step_by(32))
        .chain((576..=1024).step_by(64))
        .chain((1280..=4096).step_by(256))
        .chain((4608..=max.max(4608)).step_by(512))
        .filter(|&t| t <= max)
        .count();
    8.0 * sizes as f64
}

/// SGLang's default `mem_fraction_static`, per release (`docs/sglang.md`):
///
/// * 0.4.10–0.5.2: `(gpu_mem − reserved) / gpu_mem` with a reserve table by device
///   memory (GiB): 2.8 + p/10 below 35 GB, 9.5 + p/2 below 90 GB, 12 + p/2
///   below 160 GB, else 32; `p = tp × pp` (read in the 0.4.10, 0.5.1 and 0.5.2 wheels).
/// * 0.5.3 and later (`_handle_gpu_memory_settings`): a reserve in MiB of 512 +
///   1.5 × max(chunked_prefill_size, 2048) + 1024 × tp·pp/8 + 2 × `graph_bs`, at
///   least 10 GiB above 60 GB of device memory. `graph_bs` is the
///   `--cuda-graph-max-bs` setting (not the capture list's last size, and not capped at
///   `--max-running-requests`); the caller passes `None` where the release leaves graphs
///   out of the reserve (from 0.5.15, with graphs disabled; 0.5.3–0.5.14 count it
///   either way), plus `piecewise_mib` ([`sglang_piecewise_graph_reserve_mib`]) before the
///   floor.
///
/// Both rounded to 3 decimals; `gpu_mem` is nvidia-smi's total.
pub fn sglang_default_mem_fraction_static(
    gpu: &GpuCard,
    version: Version,
    tp: u32,
    chunked_prefill_size: Option<u32>,
    max_prefill_tokens: u32,
    graph_bs: Option<u32>,
    piecewise_mib: f64,
) -> f64 {
    let mem_mib = sglang_gpu_mem_mib(gpu);
    let p = f64::from(tp);
    let reserved_mib = if version >= SGLANG_GPU_MEMORY_SETTINGS {
        let act_tokens = f64::from(chunked_prefill_size.unwrap_or(max_prefill_tokens).max(2048));
        let mut r =
            512.0 + act_tokens * 1.5 + p / 8.0 * 1024.0 + f64::from(graph_bs.unwrap_or(0)) * 2.0 + piecewise_mib;
        if mem_mib > 60.0 * 1024.0 {
            r = r.max(10.0 * 1024.0);
        }
        r
    } else {
        let mem_gb = mem_mib / 1024.0;
        let gib = if mem_gb < 35.0 {
            2.8 + p / 10.0
        } else if mem_gb < 90.0 {
            9.5 + p / 2.0
        } else if mem_gb < 160.0 {
            12.0 + p / 2.0
        } else {
            32.0
        };
        gib * 1024.0
    };
    (((mem_mib - reserved_mib) / mem_mib) * 1000.0).round() / 1000.0
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

pub(super) fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

#[cfg(test)]
mod moe_architecture_tests {
    use super::*;

    /// A MoE card must name its architecture: without it a `moe` object under any repo name
    /// (Mixtral's, in the audit) ran as Qwen3-MoE; a dense card may still leave it out.
    #[test]
    fn a_moe_card_without_architecture_is_refused() {
        let res = crate::builtin::resources().unwrap();
        let mut m = res.models.iter().find(|m| m.id == "qwen3-30b-a3b").unwrap().clone();
        assert_eq!(check_architecture(&m), Ok(()));
        m.architecture = None;
        m.hf_repo = Some("mistralai/Mixtral-8x7B".into());
        let e = check_architecture(&m).unwrap_err();
        assert!(e.contains("missing") && e.contains("Qwen3MoeForCausalLM"), "{e}");
        let mut dense = res.models.iter().find(|m| m.id == "qwen3-32b").unwrap().clone();
        dense.architecture = None;
        assert_eq!(check_architecture(&dense), Ok(()));
    }
}
