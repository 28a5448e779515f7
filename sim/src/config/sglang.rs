//! SGLang: the engine section resolved with SGLang's defaults per release and GPU.

use super::vllm::is_cpu_host;
use super::*;
use crate::engine::sglang::{Overlap, SglangBehaviour};

pub(super) fn resolve_sglang(
    e: &EngineSection,
    model: &ModelCard,
    gpu: &GpuCard,
    dep: &Deployment,
    seed: u64,
) -> Result<(EngineSpec, KvSizing)> {
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
        if version >= Version::new(0, 5, 21) {
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
    // A fraction is checked even when max_total_tokens sizes the pool.
    if let Some(m) = e.mem_fraction_static {
        if !(m > 0.0 && m < 1.0) {
            return Err(ConfigError::new("engine.mem_fraction_static", format!("must be in (0, 1), got {m}")));
        }
    }
    let cell = model.kv_bytes_per_token_per_gpu(dep.tensor_parallel_size, dep.kv_dtype_bytes);
    let (max_total_tokens, sizing) = if let Some(t) = e.max_total_tokens {
        if t < u64::from(page_size) * 2 {
            return Err(ConfigError::new("engine.max_total_tokens", format!("{t} tokens is too small a pool")));
        }
        (
            t / u64::from(page_size) * u64::from(page_size),
            KvSizing { source: "max_total_tokens", kv_bytes_per_token: cell, memory: None },
        )
    } else {
        let graph_bs = if dep.cuda_graphs {
            let d = e
                .cuda_graph_max_bs
                .unwrap_or_else(|| sglang_default_cuda_graph_max_bs(gpu, version, dep.tensor_parallel_size));
            Some(e.max_running_requests.map_or(d, |m| d.min(m)))
        } else {
            None
        };
        let mfs = match e.mem_fraction_static {
            Some(m) => m,
            None => sglang_default_mem_fraction_static(
                gpu,
                version,
                dep.tensor_parallel_size,
                chunked_prefill_size,
                max_prefill_tokens,
                graph_bs,
            ),
        };
        if !(mfs > 0.0 && mfs < 1.0) {
            return Err(ConfigError::new(
                "engine.mem_fraction_static",
                format!(
                    "must be in (0, 1), got {mfs}{}",
                    if e.mem_fraction_static.is_none() { " (SGLang's default formula for this GPU)" } else { "" }
                ),
            ));
        }
        let acct = sglang_memory_account(model, gpu, dep, version, mfs);
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
        (tokens, KvSizing { source: "mem_fraction_static", kv_bytes_per_token: cell, memory: Some(acct) })
    };
    // `max_running_requests = min(max_total // 2, clamp(max_total / context_len * 512, 2048, 4096))`.
    let pool_reqs = ((max_total_tokens as f64 / f64::from(context_length) * 512.0) as u64).clamp(2048, 4096);
    let default_running = (max_total_tokens / 2).min(pool_reqs).max(1) as u32;
    let max_running_requests =
        positive("engine.max_running_requests", e.max_running_requests.unwrap_or(default_running))?;
    let disable_overlap_schedule = e.disable_overlap_schedule.unwrap_or(false);
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
        chunked_prefill_size,
        max_prefill_tokens,
        page_size,
        schedule_policy,
        max_total_tokens,
        schedule_conservativeness: conservativeness,
        disable_radix_cache: e.disable_radix_cache.unwrap_or(false),
        enable_mixed_chunk: e.enable_mixed_chunk.unwrap_or(false),
        disable_overlap_schedule,
        context_length,
        seed,
    };
    Ok((EngineSpec::Sglang(cfg), sizing))
}

impl SglangBehaviour {
    /// The behaviours of an SGLang release (`docs/sglang.md`; each from the first release
    /// it was read in), with the overlap scheduler on as the CPU backend shows it.
    pub fn of_release(v: Version) -> SglangBehaviour {
        SglangBehaviour {
            page_floored_chunks: v >= Version::new(0, 5, 0),
            retract_until_decode_fits: v >= Version::new(0, 5, 3),
            chunked_req_always_progresses: v >= Version::new(0, 5, 21),
            ignore_eos_full_reservation: v >= Version::new(0, 5, 23),
            page_reserve_per_request: v >= Version::new(0, 5, 23),
            retract_ratio_plus_one: v >= Version::new(0, 5, 23),
            overlap: Overlap::CpuBackend,
        }
    }
}
