//! SGLang: its flags in the `engine` section ([`SglangFlags`]), resolved with SGLang's
//! defaults per release and GPU into the engine's [`SglangConfig`] ([`resolve_sglang`]).
//!
//! **To add an SGLang flag**, declare it in [`SglangFlags`] (its snake-case name, type
//! and doc), give it its default and checks in [`resolve_sglang`], and put the result in
//! the config the engine code reads. If vLLM has a counterpart, name it in `flags.rs`.

use super::schema::engine_flags;
use super::vllm::is_cpu_host;
use super::*;
use crate::engine::sglang::{Overlap, SglangBehaviour};

engine_flags! {
    /// SGLang's own flags of the `engine` section: `sglang.launch_server`'s, in snake case
    /// (unset: SGLang's default for the release and GPU, as `resolve_sglang` gives it).
    /// A flag of this list in a vLLM scenario is an error naming its vLLM counterpart
    /// (`flags.rs`).
    pub struct SglangFlags {
        /// `--max-running-requests` (default: from the pool and the context length).
        max_running_requests: u32,
        /// `--chunked-prefill-size`; -1 disables chunked prefill.
        chunked_prefill_size: i64,
        /// `--max-prefill-tokens` (default 16384).
        max_prefill_tokens: u32,
        /// `--page-size`: tokens per KV page (default 1).
        page_size: u32,
        /// `--schedule-policy`: `fcfs`, `lpm`, `lof` or `random`.
        schedule_policy: String,
        /// `--random-seed`: seeds the `random` policy's shuffle (SGLang draws one at start-up when
        /// unset; servesim then takes the workload's seed, so a run is reproducible; set it to
        /// vary the engine's draw with the workload held).
        #[serde(skip_serializing_if = "Option::is_none")]
        random_seed: u64,
        /// `--mem-fraction-static`: the fraction of GPU memory for weights and the KV pool.
        mem_fraction_static: f64,
        /// `--max-total-tokens`: an upper bound on the KV pool in tokens. SGLang sizes the
        /// pool from memory first and takes the smaller (`min(profiled, max_total_tokens)`;
        /// above the profiled value it logs "… is larger than the profiled value … Use the
        /// profiled value instead.").
        max_total_tokens: u64,
        /// The KV pool in tokens as SGLang's start-up log prints it (`max_total_num_tokens=…`;
        /// also `/get_server_info`'s): pins the pool exactly (servesim's field, as vLLM's
        /// `kv_cache_tokens`; not a flag SGLang takes).
        max_total_num_tokens: u64,
        /// `--schedule-conservativeness` (default 1.0).
        schedule_conservativeness: f64,
        /// `--disable-radix-cache`.
        disable_radix_cache: bool,
        /// `--enable-mixed-chunk`: prefill chunks and decodes in one batch.
        enable_mixed_chunk: bool,
        /// `--disable-overlap-schedule`.
        disable_overlap_schedule: bool,
        /// `--context-length` (default: the model card's `max_position_embeddings`).
        context_length: u32,
        /// SGLang `--tp-size` (resolved with the deployment, `memory.rs`).
        #[serde(skip_serializing_if = "Option::is_none")]
        tp_size: u32,
        /// SGLang `--pp-size` (only 1 is modelled).
        #[serde(skip_serializing_if = "Option::is_none")]
        pp_size: u32,
        /// SGLang `--disable-cuda-graph`.
        #[serde(skip_serializing_if = "Option::is_none")]
        disable_cuda_graph: bool,
        /// SGLang `--cuda-graph-max-bs` (the largest decode batch captured; it sets the reserve
        /// of the default `mem_fraction_static` in 0.5.x).
        #[serde(skip_serializing_if = "Option::is_none")]
        cuda_graph_max_bs: u32,
        /// SGLang `--moe-runner-backend` (from 0.5.1; `auto` by default): a mixture-of-experts
        /// model's fused-MoE kernel ([`sglang_moe_kernel`]).
        #[serde(skip_serializing_if = "Option::is_none")]
        moe_runner_backend: String,
        /// SGLang `--ep-size` (also `--expert-parallel-size`, `--ep`; default 1): a MoE model's
        /// experts spread whole over `ep_size` ranks, `moe_tp_size = tp_size / ep_size`. Not
        /// modelled above 1 with a MoE card (`memory.rs:resolve_deployment`); a dense model has no
        /// experts to spread.
        #[serde(skip_serializing_if = "Option::is_none")]
        ep_size: u32,
        /// SGLang `--num-reserved-decode-tokens` (default 512): on a decode server of a
        /// disaggregated fleet, the KV its pre-allocation queue keeps for each request's decode
        /// before it pre-allocates another prompt (`DecodePreallocQueue`; docs/fleets.md).
        #[serde(skip_serializing_if = "Option::is_none")]
        num_reserved_decode_tokens: u32,
    }
}

/// SGLang's default `--num-reserved-decode-tokens` (`ServerArgs`, 0.4.10–0.5.23).
pub const SGLANG_NUM_RESERVED_DECODE_TOKENS: u32 = 512;

/// The values of SGLang's `--moe-runner-backend` (0.5.23's list, `lora_*` aside).
pub const SGLANG_MOE_RUNNER_BACKENDS: [&str; 19] = [
    "auto",
    "triton",
    "triton_kernel",
    "flashinfer_trtllm",
    "flashinfer_trtllm_routed",
    "flashinfer_cutlass",
    "flashinfer_mxfp4",
    "flashinfer_cutedsl",
    "flashinfer_megamoe",
    "deep_gemm",
    "cutlass",
    "aiter",
    "marlin",
    "experimental_sgl_trtllm",
    "experimental_sgl_marlin",
    "humming",
    "hpc_ops",
    "megamoe",
    "intel_xpu",
];

/// The first SGLang release whose Qwen3-MoE rule runs block-fp8 experts on the SM100 family with
/// FlashInfer TRT-LLM under `--moe-runner-backend auto` (`server_args.py`, 0.5.6).
pub const SGLANG_MOE_TRTLLM_FP8_SM100: Version = Version::new(0, 5, 6);
/// The first release whose rule does so for 16-bit experts too (`server_args.py`, 0.5.8).
pub const SGLANG_MOE_TRTLLM_BF16_SM100: Version = Version::new(0, 5, 8);

/// The fused-MoE kernel SGLang `version` runs for a mixture-of-experts `model`'s experts on `gpu`
/// deployed as `dep` (experts sharded by TP, no `--moe-a2a-backend`), in `--moe-runner-backend`'s
/// words; `given` is `engine.moe_runner_backend`. `None` for a dense model. Read in the released
/// wheels of every release 0.4.10–0.5.23 (docs/moe.md section 7.6): Triton's fused MoE
/// everywhere, except on the SM100 family (B200), where the Qwen3-MoE rule takes FlashInfer
/// TRT-LLM for block-fp8 experts from 0.5.6 and for 16-bit ones from 0.5.8; DeepGEMM only with
/// an all-to-all backend (expert parallelism, not modelled) or when asked for.
pub fn sglang_moe_kernel(
    version: Version,
    gpu: &GpuCard,
    model: &ModelCard,
    dep: &Deployment,
    given: Option<&str>,
) -> Result<Option<&'static str>> {
    let given =
        moe_backend_given(given, &SGLANG_MOE_RUNNER_BACKENDS, "moe_runner_backend", "SGLang's --moe-runner-backend")?;
    if model.moe.is_none() {
        return Ok(None);
    }
    let tp = dep.tensor_parallel_size.max(1);
    if let Some(b) = crate::cost::fp8_block_misfit(model, tp).filter(|_| dep.quantization.as_deref() == Some("fp8")) {
        return Err(ConfigError::new(
            "engine.tp_size",
            format!(
                "SGLang {version} refuses {} at TP {tp}: {} ({}). Use a TP whose shards are whole blocks (SGLang's \
                 --ep-size, which divides moe_tp_size = tp_size / ep_size, is not modelled)",
                model.id,
                b.what,
                if b.experts {
                    "model_runner.py:ModelRunner.check_quantized_moe_compatibility from 0.5.6, \"For quantized MoE models, \
                     please make sure (moe_intermediate_size / moe_tp_size) % weight_block_size_n == 0\"; \
                     quantization/fp8.py:Fp8MoEMethod.create_weights in every release 0.4.10-0.5.23"
                } else {
                    "quantization/fp8.py:Fp8LinearMethod.create_weights (validate_block_quant_shapes in later releases): \
                     \"Weight output_partition_size ... is not divisible by weight quantization block_n\""
                }
            ),
        ));
    }
    if given != "auto" {
        return Ok(Some(given));
    }
    let first = if crate::cost::moe_table_dtype(model, dep) == Ok("fp8_block") {
        SGLANG_MOE_TRTLLM_FP8_SM100
    } else {
        SGLANG_MOE_TRTLLM_BF16_SM100
    };
    Ok(Some(if gpu.is_sm100_family() && version >= first { "flashinfer_trtllm" } else { "triton" }))
}

/// The `engine` section of an SGLang scenario, resolved: SGLang's flags ([`SglangFlags`])
/// with their defaults, checked, and the KV pool sized.
pub(super) fn resolve_sglang(
    e: &EngineSection,
    model: &ModelCard,
    gpu: &GpuCard,
    dep: &Deployment,
    seed: u64,
) -> Result<(EngineSpec, KvSizing)> {
    let f = &e.sglang;
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
    check_fp8_weights_on_gpu(EngineKind::Sglang, version, e, model, gpu, dep)?;
    // `--kv-cache-dtype`'s choices (`server_args.py`): auto, fp8_e5m2, fp8_e4m3, and bf16 /
    // bfloat16 from 0.5.4 (0.4.10–0.5.3 read without them). vLLM's `fp8` (e4m3) is not one:
    // translation from vLLM and the browser page pass `fp8_e4m3`.
    match e.kv_cache_dtype.as_deref() {
        None | Some("auto" | "fp8_e4m3" | "fp8_e5m2") => {}
        Some("fp8") => {
            return Err(ConfigError::new(
                "engine.kv_cache_dtype",
                "fp8 is vLLM's name: SGLang's --kv-cache-dtype takes fp8_e4m3 (what vLLM's fp8 is) or fp8_e5m2",
            ))
        }
        Some("bf16" | "bfloat16") if version >= SGLANG_BF16_KV_CHOICE => {}
        Some(other) => {
            return Err(ConfigError::new(
                "engine.kv_cache_dtype",
                format!(
                    "{other:?} is not among SGLang {version}'s --kv-cache-dtype choices (auto, fp8_e5m2, fp8_e4m3{}); \
                     auto is the model's own dtype",
                    if version >= SGLANG_BF16_KV_CHOICE {
                        ", bf16, bfloat16"
                    } else {
                        "; bf16 and bfloat16 from 0.5.4"
                    }
                ),
            ))
        }
    }
    // `ModelRunner.load_model` (0.4.10–0.5.23): below SM80 it runs float16 instead of bfloat16 (the
    // same bytes and speed here), and below SM75 it stops.
    if let Some(c) = gpu.capability().filter(|&c| c < (7, 5)) {
        return Err(ConfigError::new(
            "hardware.compute_capability",
            format!(
                "{} has compute capability {}.{}: SGLang refuses it at start-up (\"SGLang only supports sm75 and above.\")",
                gpu.id, c.0, c.1
            ),
        ));
    }
    // The device memory SGLang's tiers compare (`get_device_memory_capacity`: nvidia-smi's MiB
    // figure), as the cuda-graph and memory-fraction tiers read it (`memory.rs`); the chunk tier
    // read CUDA's total until 2026-12-07 (no shipped card falls between the two at a boundary).
    let mem_gib = super::memory::sglang_gpu_mem_mib(gpu) / 1024.0;
    // 0.5.3's `_handle_gpu_memory_settings` moved 35–60 GB cards to 4,096 (0.4.10–0.5.2: 8,192).
    let new_defaults = version >= SGLANG_GPU_MEMORY_SETTINGS;
    // `chunked_prefill_size` by GPU memory (server_args).
    let default_chunk: u32 = if mem_gib < 20.0 {
        2048
    } else if mem_gib < 35.0 {
        if version >= SGLANG_MID_TIER_DOUBLED {
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
    let chunked_prefill_size = match f.chunked_prefill_size {
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
    let attention_backend = sglang_run_backend(
        version,
        gpu,
        model.architecture.as_deref(),
        e.attention_backend.as_deref(),
        &dep.kv_cache_dtype,
    )?;
    let page_size = sglang_page_size(version, attention_backend.as_deref(), f.page_size)?;
    if let Some(c) = chunked_prefill_size {
        if c < page_size {
            return Err(ConfigError::new(
                "engine.chunked_prefill_size",
                format!("{c} is smaller than one page ({page_size} tokens)"),
            ));
        }
    }
    let max_prefill_tokens = positive("engine.max_prefill_tokens", f.max_prefill_tokens.unwrap_or(16384))?;
    // `--cuda-graph-max-bs` as given, else the release's default for the GPU (unset before
    // 0.5.3 on cards of 35 GB and more). The capture list it ends is built below, once the
    // request pool is known.
    // From 0.5.22 the default stops at a given `--max-running-requests`
    // (`arg_groups/memory_hook.py`, `decode_max_bs_is_default`; not in 0.5.21), which
    // shrinks the default fraction's graph reserve too.
    let default_graph_setting =
        sglang_default_cuda_graph_max_bs(gpu, version, dep.tensor_parallel_size).map(|b| {
            match f.max_running_requests.filter(|_| version >= SGLANG_DEFAULT_GRAPH_BS_STOPS_AT_RUNNING) {
                Some(m) if m >= 1 => b.min(m),
                _ => b,
            }
        });
    let graph_setting = match f.cuda_graph_max_bs {
        Some(b) => Some(positive("engine.cuda_graph_max_bs", b)?),
        None => default_graph_setting,
    };
    // What the default `mem_fraction_static` reserves for graphs: the setting, from 0.5.15 only
    // with graphs on.
    let reserve_graph_bs = if dep.cuda_graphs || version < Version::new(0, 5, 15) { graph_setting } else { None };
    // `ModelConfig.__init__` (configs/model_config.py; SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN
    // lifts the refusal).
    let context_length = context_len("engine.context_length", f.context_length, model, EngineKind::Sglang)?;
    let schedule_policy = match f.schedule_policy.as_deref().unwrap_or("fcfs") {
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
    let conservativeness = f.schedule_conservativeness.unwrap_or(1.0);
    if !(conservativeness > 0.0 && conservativeness.is_finite()) {
        return Err(ConfigError::new(
            "engine.schedule_conservativeness",
            format!("must be > 0, got {conservativeness:?}"),
        ));
    }
    // A fraction is checked even when max_total_tokens sizes the pool.
    if let Some(m) = f.mem_fraction_static {
        if !(m > 0.0 && m < 1.0) {
            return Err(ConfigError::new("engine.mem_fraction_static", format!("must be in (0, 1), got {m:?}")));
        }
    }
    let cell = model.kv_bytes_per_token_per_gpu(dep.tensor_parallel_size, dep.kv_dtype_bytes);
    // The logged pool already holds any bound the server ran with: a pool above it cannot be.
    if let (Some(logged), Some(bound)) = (f.max_total_num_tokens, f.max_total_tokens) {
        if logged / u64::from(page_size) > bound / u64::from(page_size) {
            return Err(ConfigError::new(
                "engine.max_total_num_tokens",
                format!(
                    "{logged} is above the engine.max_total_tokens bound {bound}: SGLang's pool is at most the bound \
                     (min(profiled, max_total_tokens)), so a log of this setup cannot show more; check both figures"
                ),
            ));
        }
    }
    if let Some(t) = f.max_total_tokens {
        if t < u64::from(page_size) * 2 {
            return Err(ConfigError::new(
                "engine.max_total_tokens",
                format!("{t} tokens is less than two pages of {page_size}: too small a pool"),
            ));
        }
    }
    // The pool, and the pool as profiled before `--max-total-tokens` bounds it.
    let (max_total_tokens, profiled_tokens, sizing) = if let Some(t) = f.max_total_num_tokens {
        if t < u64::from(page_size) * 2 {
            return Err(ConfigError::new("engine.max_total_num_tokens", format!("{t} tokens is too small a pool")));
        }
        check_pinned_pool("engine.max_total_num_tokens", t, cell, model, gpu, dep)?;
        let t = t / u64::from(page_size) * u64::from(page_size);
        (t, t, KvSizing { source: "max_total_num_tokens", kv_bytes_per_token: cell, memory: None, bound_given: None })
    } else {
        let mfs = match f.mem_fraction_static {
            Some(m) => m,
            None => sglang_default_mem_fraction_static(
                gpu,
                version,
                dep.tensor_parallel_size,
                chunked_prefill_size,
                max_prefill_tokens,
                reserve_graph_bs,
                sglang_piecewise_graph_reserve_mib(
                    version,
                    chunked_prefill_size,
                    f.context_length,
                    f.max_total_tokens,
                    dep.cuda_graphs,
                    !is_cpu_host(gpu),
                ),
            ),
        };
        if !(mfs > 0.0 && mfs < 1.0) {
            if f.mem_fraction_static.is_some() {
                return Err(ConfigError::new("engine.mem_fraction_static", format!("must be in (0, 1), got {mfs:?}")));
            }
            // SGLang's own formula fell outside: it reserves memory for the CUDA graphs and the
            // prefill chunk, so the flag that grew the reserve is the one to name.
            let field = if f.cuda_graph_max_bs.is_some() {
                "engine.cuda_graph_max_bs"
            } else if f.chunked_prefill_size.is_some() {
                "engine.chunked_prefill_size"
            } else {
                "engine.mem_fraction_static"
            };
            return Err(ConfigError::new(
                field,
                format!(
                    "SGLang's default mem_fraction_static for this GPU comes out at {mfs:.3}, outside (0, 1): the memory it \
                     reserves for CUDA graphs and the prefill chunk is more than the card has; lower cuda_graph_max_bs or \
                     chunked_prefill_size, or give mem_fraction_static"
                ),
            ));
        }
        let acct = sglang_memory_account(model, gpu, dep, mfs);
        let tokens = acct.kv / cell / u64::from(page_size) * u64::from(page_size);
        if tokens < u64::from(page_size) * 2 {
            return Err(ConfigError::new(
                "engine.mem_fraction_static",
                format!(
                    "{mfs} of {:.2} GiB per GPU is {:.2} GiB; the weights take {:.2} GiB per GPU (TP {}) and the CUDA context {:.2}: \
                     no room for a KV pool. Raise mem_fraction_static or tp_size, or quantize.",
                    gib(acct.total),
                    gib(acct.requested),
                    gib(acct.weights),
                    dep.tensor_parallel_size,
                    gib(acct.context)
                ),
            ));
        }
        // `--max-total-tokens` bounds the profiled pool (page-aligned, as the configurator aligns it).
        let (pool, source) = match f.max_total_tokens.map(|t| t / u64::from(page_size) * u64::from(page_size)) {
            Some(bound) if bound < tokens => (bound, "max_total_tokens"),
            _ => (tokens, "mem_fraction_static"),
        };
        // On the CPU test bed's card SGLang profiles the pool from the host's free memory at start
        // (`mem_fraction_static` × the memory available before the weights load, less what loading
        // them took; per NUMA node from 0.5.2, capped by the cgroup in 0.5.23: the SGLang CPU audit
        // of 2026-12-07), not from a card's total less a CUDA context: only the logged pool, or a
        // bound below what the card's whole memory would give (the test bed's 65,536 tokens of a
        // tiny model, far below), says what the pool is.
        if is_cpu_host(gpu) && source != "max_total_tokens" {
            return Err(ConfigError::new(
                "engine.max_total_num_tokens",
                format!(
                    "not given on the cpu-host card: SGLang's CPU backend sizes its pool from the host's free memory at \
                     start (mem_fraction_static of what is available before the weights load, less what they took), \
                     which servesim cannot know{}. Pin it with the server's start-up log (max_total_num_tokens=N, or \
                     /metrics' sglang:max_total_num_tokens): --set engine.max_total_num_tokens=N",
                    match f.max_total_tokens {
                        Some(b) => format!(
                            "; the max_total_tokens bound ({b}) is not below what servesim's GPU-style account of the card \
                             gives ({tokens}), so it may not bind there"
                        ),
                        None => String::new(),
                    }
                ),
            ));
        }
        (
            pool,
            tokens,
            KvSizing {
                source,
                kv_bytes_per_token: cell,
                memory: Some(acct),
                bound_given: f.max_total_tokens.map(|t| ("max_total_tokens", t)),
            },
        )
    };
    // `max_running_requests = min(max_total // 2, clamp(tokens / context_len * 512, 2048, 4096))`,
    // the request pool estimated, through 0.5.9, from the pool as profiled, before
    // `--max-total-tokens` bounds it (`init_memory_pool`: `max_num_reqs` is set right after
    // `profile_max_num_token`, the bound applied after it; read in the 0.4.10, 0.5.3, 0.5.6–0.5.9
    // wheels), and from 0.5.10 from the bounded pool (`_resolve_memory_pool_config` calls
    // `_resolve_max_num_reqs` after `_resolve_token_capacity`).
    let estimated_from =
        if version >= SGLANG_REQUEST_POOL_FROM_BOUNDED_POOL { max_total_tokens } else { profiled_tokens };
    let pool_reqs = ((estimated_from as f64 / f64::from(context_length) * 512.0) as u64).clamp(2048, 4096);
    let default_running = (max_total_tokens / 2).min(pool_reqs).max(1) as u32;
    let given = f.max_running_requests.map(|g| positive("engine.max_running_requests", g)).transpose()?;
    // A given `--max-running-requests` sizes the request pool as it is before 0.5.10; from
    // 0.5.10 `_resolve_max_num_reqs` caps it at the pool estimate (`min(given, clamp(…, 2048,
    // 4096))`), from 0.5.14 at half the token pool instead (`min(given, tokens // 2)`), and the
    // scheduler runs at most the request pool (read in the 0.5.8–0.5.14 and 0.5.17–0.5.23
    // wheels; `docs/sglang.md` §6).
    let max_running_requests = match given {
        None => default_running,
        Some(g) if version >= SGLANG_CAPS_GIVEN_RUNNING_AT_HALF_POOL => g.min((max_total_tokens / 2).max(1) as u32),
        Some(g) if version >= SGLANG_CAPS_GIVEN_RUNNING_AT_ESTIMATE => g.min(pool_reqs as u32),
        Some(g) => g,
    };
    // The largest decode batch captured as a CUDA graph: the last of the release's capture list,
    // which stops at the request pool (`get_batch_sizes_to_capture`: `req_to_token_pool.size`):
    // `--max-running-requests` as resolved, else the estimate, which from 0.5.10 is also capped
    // at half the token pool (`_resolve_max_num_reqs`: `min(estimated, token_capacity // 2)`;
    // through 0.5.9 `init_memory_pool` sizes the request pool at the estimate alone and the
    // scheduler applies the half-pool cap to the running batch only; read in the 0.5.9 and
    // 0.5.10 wheels). The two differ only for pools under 4,096 tokens.
    let pool = match given {
        Some(_) => max_running_requests,
        None if version >= SGLANG_REQUEST_POOL_FROM_BOUNDED_POOL => default_running,
        None => pool_reqs as u32,
    };
    let captured = sglang_capture_list(version, sglang_gpu_mem_mib(gpu), graph_setting, pool).last().copied();
    // A `--cuda-graph-max-bs` below the release's default leaves the decode batches between
    // the two eager, as `--disable-cuda-graph` leaves them all: the default's last size is the
    // forgone one (the step cost charges those batches the eager launches; a smaller setting
    // looked free, its KV pool larger and its steps no slower; the audit of 2026-12-06).
    let (cuda_graph_max_bs, forgone_cuda_graph_max_bs) = if dep.cuda_graphs {
        let default_captured =
            || sglang_capture_list(version, sglang_gpu_mem_mib(gpu), default_graph_setting, pool).last().copied();
        let shrunk = f.cuda_graph_max_bs.and_then(|_| default_captured()).filter(|d| captured.is_some_and(|c| *d > c));
        (captured, shrunk)
    } else {
        (None, captured)
    };
    let disable_overlap_schedule = f.disable_overlap_schedule.unwrap_or(false);
    let mut behaviour = SglangBehaviour::of_release(version);
    behaviour.overlap = if disable_overlap_schedule {
        Overlap::Off
    } else if is_cpu_host(gpu) {
        Overlap::CpuBackend
    } else {
        Overlap::Gpu
    };
    let cfg = SglangConfig {
        version,
        behaviour,
        max_running_requests,
        capped_max_running_requests: given.filter(|&g| g > max_running_requests),
        chunked_prefill_size,
        max_prefill_tokens,
        page_size,
        schedule_policy,
        max_total_tokens,
        schedule_conservativeness: conservativeness,
        disable_radix_cache: f.disable_radix_cache.unwrap_or(false),
        enable_mixed_chunk: f.enable_mixed_chunk.unwrap_or(false),
        disable_overlap_schedule,
        context_length,
        cuda_graph_max_bs,
        forgone_cuda_graph_max_bs,
        seed: f.random_seed.unwrap_or(seed),
        req_pool_size: pool.max(max_running_requests),
        num_reserved_decode_tokens: f.num_reserved_decode_tokens.unwrap_or(SGLANG_NUM_RESERVED_DECODE_TOKENS),
    };
    Ok((EngineSpec::Sglang(cfg), sizing))
}

/// The first SGLang release whose default attention backend on the SM100 family (B200,
/// GB200, B300) for a dense MHA model is `trtllm_mha` (0.4.10–0.5.6: `flashinfer`).
pub const SGLANG_SM100_TRTLLM_MHA: Version = Version::new(0, 5, 7);

/// The first SGLang release that caps a given `--max-running-requests` at the request-pool
/// estimate (`clamp(tokens / context_len × 512, 2048, 4096)`, `_resolve_max_num_reqs`): 0.5.9
/// takes it as given, 0.5.10 caps it.
pub const SGLANG_CAPS_GIVEN_RUNNING_AT_ESTIMATE: Version = Version::new(0, 5, 10);

/// From this release SGLang estimates its request pool from the token pool after
/// `--max-total-tokens` bounds it; before, from the pool as profiled (see `resolve`).
pub const SGLANG_REQUEST_POOL_FROM_BOUNDED_POOL: Version = Version::new(0, 5, 10);

/// The first SGLang release that caps a given `--max-running-requests` at half the token pool
/// instead (`min(requested_per_worker, token_capacity // 2)`): 0.5.13 the estimate, 0.5.14 this.
pub const SGLANG_CAPS_GIVEN_RUNNING_AT_HALF_POOL: Version = Version::new(0, 5, 14);

/// The first SGLang release whose default `--cuda-graph-max-bs` stops at a given
/// `--max-running-requests` (read in the 0.5.21–0.5.23 wheels: 0.5.21 without, 0.5.22 with).
pub const SGLANG_DEFAULT_GRAPH_BS_STOPS_AT_RUNNING: Version = Version::new(0, 5, 22);

/// Whether SGLang's default attention backend for a dense MHA model on `gpu` is `trtllm_mha`
/// (the SM100 family from 0.5.7): what pages its KV cache ([`sglang_page_size`]) and which lane
/// of the kernel tables times its attention (`config::resolve`).
pub fn sglang_default_trtllm_mha(version: Version, gpu: &GpuCard) -> bool {
    version >= SGLANG_SM100_TRTLLM_MHA && gpu.is_sm100_family()
}

/// The first SGLang release whose `trtllm_mha` prefill runs on Hopper (SM90) and SM120 as well as
/// SM100 ("TRTLLM MHA backend for prefill requires Hopper (SM90), Blackwell (SM100), or SM120
/// GPUs"): read in the wheels, 0.5.18 still SM100 only, 0.5.19 with.
pub const SGLANG_TRTLLM_MHA_PREFILL_SM90_SM120: Version = Version::new(0, 5, 19);

/// The first SGLang release whose `trtllm_mha` takes pages of 128 tokens ("only supports
/// page_size of 16, 32, 64 or 128"): read in the wheels, 0.5.16 without, 0.5.17 with.
pub const SGLANG_TRTLLM_MHA_PAGE_128: Version = Version::new(0, 5, 17);

/// The first SGLang release with `trtllm_mha` among `--attention-backend`'s choices.
pub const SGLANG_TRTLLM_MHA_CHOICE: Version = Version::new(0, 5, 1);

/// The first SGLang release that defaults to fa3 on Hopper for every MHA model (0.5.8's
/// `server_args.py`: "we choose fa3 as the default backend on Hopper MHA"); before it only for
/// [`SGLANG_FA3_DEFAULT_ARCHITECTURES`] (read in the 0.4.10, 0.5.6 and 0.5.7 wheels).
pub const SGLANG_FA3_EVERY_MHA_MODEL: Version = Version::new(0, 5, 8);

/// The dense causal-LM architectures of SGLang's `is_fa3_default_architecture` (0.4.10 through
/// 0.5.7; the list's multimodal and MoE entries aside): the models that default to fa3 on
/// Hopper before [`SGLANG_FA3_EVERY_MHA_MODEL`]. `Olmo2ForCausalLM` joined after 0.4.10.
pub const SGLANG_FA3_DEFAULT_ARCHITECTURES: &[&str] = &[
    "LlamaForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "Qwen3MoeForCausalLM",
    "Gemma2ForCausalLM",
    "Olmo2ForCausalLM",
];

/// The `--attention-backend` values servesim models for SGLang (dense MHA/GQA attention).
pub const SGLANG_ATTENTION_BACKENDS: &[&str] = &["fa3", "flashinfer", "triton", "trtllm_mha"];

/// SGLang's `--attention-backend` as it runs: `given` checked against what SGLang accepts on
/// `gpu` at `version` (its messages quoted), or the default for a dense model (released
/// wheels 0.4.10–0.5.23, docs/sglang.md §5): `trtllm_mha` on the SM100 family from 0.5.7,
/// `fa3` on Hopper (through 0.5.7 only for the architectures of `is_fa3_default_architecture`,
/// [`SGLANG_FA3_DEFAULT_ARCHITECTURES`], so Mistral ran flashinfer; every MHA model from 0.5.8),
/// `flashinfer` elsewhere. `architecture` is the model card's (a card without one is taken for
/// a Llama, as servesim reads such cards everywhere). `None` for a card that states no compute
/// capability and no backend given.
pub fn sglang_attention_backend(
    version: Version,
    gpu: &GpuCard,
    architecture: Option<&str>,
    given: Option<&str>,
) -> Result<Option<String>> {
    let cc = gpu.capability();
    let Some(b) = given else {
        let fa3_default = version >= SGLANG_FA3_EVERY_MHA_MODEL
            || architecture.is_none_or(|a| SGLANG_FA3_DEFAULT_ARCHITECTURES.contains(&a));
        return Ok(match cc {
            _ if sglang_default_trtllm_mha(version, gpu) => Some("trtllm_mha".into()),
            Some((9, _)) if fa3_default => Some("fa3".into()),
            Some(_) => Some("flashinfer".into()),
            None => None,
        });
    };
    let field = "engine.attention_backend";
    // The CPU test bed's card: SGLang's CPU backends are `intel_amx` (its default where the CPU
    // has AMX) and `torch_native` (the test bed's, and the fallback without AMX:
    // `server_args.py`, 0.4.10 `:364`; 0.5.23 `platform_hook.py:158`); the GPU kernels do not run
    // there. Until 2026-12-07 the test bed's own backend was refused on it and fa3 accepted (the
    // SGLang CPU audit). Its steps are timed by a profile or the linear prior, which no backend moves.
    if is_cpu_host(gpu) {
        return match b {
            "torch_native" | "intel_amx" => Ok(Some(b.to_string())),
            _ => Err(ConfigError::new(
                field,
                format!(
                    "{b:?} on the cpu-host card: SGLang's CPU backends are intel_amx (its default on a CPU with AMX) \
                     and torch_native; {b} is a GPU kernel"
                ),
            )),
        };
    }
    if !SGLANG_ATTENTION_BACKENDS.contains(&b) {
        return Err(ConfigError::new(
            field,
            format!(
                "{b:?} is not modelled: servesim models SGLang's dense-attention backends {} (MLA backends such as \
                 flashmla, cutlass_mla and trtllm_mla serve MLA models, which servesim has no card for)",
                SGLANG_ATTENTION_BACKENDS.join(", ")
            ),
        ));
    }
    let cc_text = gpu.compute_capability.as_deref().unwrap_or("not stated");
    match b {
        "fa3" if !matches!(cc, Some((8 | 9, _)) | None) => Err(ConfigError::new(
            field,
            format!(
                "fa3 on compute capability {cc_text}: SGLang refuses it (\"FlashAttention v3 Backend requires SM>=80 and \
                 SM<=90. Please use --attention-backend flashinfer.\")"
            ),
        )),
        "trtllm_mha" if version < SGLANG_TRTLLM_MHA_CHOICE => Err(ConfigError::new(
            field,
            format!("trtllm_mha is not among SGLang {version}'s --attention-backend choices (from {SGLANG_TRTLLM_MHA_CHOICE})"),
        )),
        "trtllm_mha"
            if cc.is_some()
                && !(gpu.is_sm100_family() || (version >= SGLANG_TRTLLM_MHA_PREFILL_SM90_SM120 && matches!(cc, Some((9 | 12, _))))) =>
        {
            Err(ConfigError::new(
                field,
                format!(
                    "trtllm_mha on compute capability {cc_text}: SGLang {version} runs its prefill on Blackwell (SM100) only \
                     (\"TRTLLM MHA backend for prefill is only supported on Blackwell GPUs (SM100)\"; from \
                     {SGLANG_TRTLLM_MHA_PREFILL_SM90_SM120} also on Hopper and SM120)"
                ),
            ))
        }
        _ => Ok(Some(b.to_string())),
    }
}

/// The first SGLang release whose `--kv-cache-dtype` takes `bf16` / `bfloat16` (read in the 0.5.3
/// and 0.5.4 wheels).
pub const SGLANG_BF16_KV_CHOICE: Version = Version::new(0, 5, 4);

/// The first SGLang release that moves fa3 with an fp8_e5m2 KV cache to triton
/// (`server_args.py`: "FlashAttention3 only supports fp8_e4m3 if using FP8; Setting attention
/// backend to triton."; read in the 0.5.4, 0.5.5 and 0.5.23 wheels, where it sits in
/// `arg_groups/overrides.py`).
pub const SGLANG_FA3_E5M2_TRITON: Version = Version::new(0, 5, 5);

/// SGLang's attention backend as it runs: [`sglang_attention_backend`] (given or its default),
/// then its fa3 → triton fallback for an fp8_e5m2 KV cache from [`SGLANG_FA3_E5M2_TRITON`];
/// before that release the combination is not modelled (an error).
pub fn sglang_run_backend(
    version: Version,
    gpu: &GpuCard,
    architecture: Option<&str>,
    given: Option<&str>,
    kv_cache_dtype: &str,
) -> Result<Option<String>> {
    let backend = sglang_attention_backend(version, gpu, architecture, given)?;
    if backend.as_deref() != Some("fa3") || kv_cache_dtype != "fp8_e5m2" {
        return Ok(backend);
    }
    if version < SGLANG_FA3_E5M2_TRITON {
        return Err(ConfigError::new(
            "engine.kv_cache_dtype",
            format!(
                "fp8_e5m2 with SGLang's fa3 attention (its default on Hopper) under {version} is not modelled: \
                 FlashAttention 3 reads an fp8 KV cache as e4m3 only, and only from {SGLANG_FA3_E5M2_TRITON} does \
                 SGLang fall back to triton for e5m2; use fp8_e4m3, or attention_backend flashinfer"
            ),
        ));
    }
    Ok(Some("triton".into()))
}

/// `--page-size` as SGLang resolves it: 1 by default; where the attention backend is
/// `trtllm_mha` (the default on the SM100 family from 0.5.7, or given), a size that backend
/// does not take becomes 64 (`_handle_attention_backend_compatibility`: "TensorRT-LLM MHA only
/// supports page_size of 16, 32 or 64, changing page_size from {page_size} to 64"; 0.5.23 also
/// takes 128), the default included. Another backend keeps the size given.
pub fn sglang_page_size(version: Version, backend: Option<&str>, given: Option<u32>) -> Result<u32> {
    if let Some(p) = given {
        positive("engine.page_size", p)?;
    }
    if backend == Some("trtllm_mha") {
        let takes = |p: u32| matches!(p, 16 | 32 | 64) || (p == 128 && version >= SGLANG_TRTLLM_MHA_PAGE_128);
        return Ok(given.filter(|&p| takes(p)).unwrap_or(64));
    }
    Ok(given.unwrap_or(1))
}

/// Whether an SGLang step on a GPU with the overlap scheduler costs max(CPU, GPU) instead of
/// their sum ([`SglangBehaviour::cpu_overlap`], `StepShape::cpu_overlapped`). The source
/// says it does (`docs/sglang.md` §7); off until `validation/baseline.json` is rewritten
/// for it: with it on, four SGLang groups of `servesim validate` get worse by 1.1–2.0
/// points (VALIDATION.md §5, "SGLang: the CPU overlap and the tokenizer", 2026-12).
pub const SGLANG_CPU_OVERLAP: bool = false;

impl SglangBehaviour {
    /// The behaviours of an SGLang release (`docs/sglang.md`; each from the first release
    /// it was read in), with the overlap scheduler on as the CPU backend shows it.
    pub fn of_release(v: Version) -> SglangBehaviour {
        SglangBehaviour {
            page_floored_chunks: v >= Version::new(0, 5, 0),
            retract_until_decode_fits: v >= Version::new(0, 5, 2),
            retract_evicts_for_remaining: v >= Version::new(0, 5, 3),
            evicts_shortfall_only: v >= Version::new(0, 5, 17),
            chunked_req_always_progresses: v >= Version::new(0, 5, 7),
            ignore_eos_full_reservation: v >= Version::new(0, 5, 22),
            page_reserve_per_request: v >= Version::new(0, 5, 11),
            page_charge_per_admission: v >= Version::new(0, 5, 10),
            max_prefill_stop_only_unchunked: v >= Version::new(0, 5, 13),
            retract_ratio_plus_one: v >= Version::new(0, 5, 4),
            admission_reserves_remaining_output: v >= Version::new(0, 5, 4),
            spent_pass_budget_stops: v >= Version::new(0, 5, 23),
            filter_running_every_step: v >= Version::new(0, 5, 23),
            skip_finishing_decode: v >= Version::new(0, 5, 22),
            prebuilt_merged: v >= Version::new(0, 5, 10),
            refresh_waiting_prefixes: v >= Version::new(0, 5, 22),
            prealloc_clips_output: v >= Version::new(0, 5, 1),
            overlap: Overlap::CpuBackend,
            cpu_overlap: SGLANG_CPU_OVERLAP,
        }
    }
}

/// The small (element-wise) kernels one decoder layer of `model` launches in an SGLang decode
/// step on a CUDA GPU (docs/sglang.md §9, read in the 0.4.10–0.5.23 wheels): `(always, more
/// in a step of two or more tokens)`. Always: the two residual add + RMSNorms
/// (`fused_add_rmsnorm`), the rotary embedding (`apply_rope_with_cos_sin_cache_inplace`) and
/// SiLU·mul, plus for Qwen3 its q/k norm on the critical path (one fused `fused_inplace_qknorm`
/// from 0.5.8; before, q's `rmsnorm`, k's running on the alternate stream). From two tokens on,
/// the copy that makes q contiguous (FA3's `q.contiguous()` on the QKV split's strided view;
/// Qwen3 before 0.5.8: q's reshape copy instead). The KV-cache write is not counted: the
/// attention tables time it (aiconfigurator's SGLang collector runs `RadixAttention.forward`
/// with `save_kv_cache`). The all-reduces are not fused with the norms for dense models.
pub fn sglang_layer_small_kernels(model: &ModelCard) -> (f64, f64) {
    if matches!(memory::vllm_architecture(model), "Qwen3ForCausalLM" | "Qwen3MoeForCausalLM") {
        (5.0, 1.0)
    } else {
        (4.0, 1.0)
    }
}
