//! The vLLM ↔ SGLang flag correspondence: which `engine` fields belong to
//! which engine, and the other engine's counterpart of each.

use super::*;

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
    ("tensor_parallel_size", "tp_size"),
    ("pipeline_parallel_size", "pp_size"),
    ("enforce_eager", "disable_cuda_graph"),
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
    ("tp_size", "tensor_parallel_size"),
    ("pp_size", "pipeline_parallel_size"),
    ("disable_cuda_graph", "enforce_eager"),
    ("cuda_graph_max_bs", "(vLLM derives its capture sizes from max_num_seqs)"),
];

impl EngineSection {
    pub(super) fn is_set(&self, field: &str) -> bool {
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
            "tensor_parallel_size" => self.tensor_parallel_size.is_some(),
            "pipeline_parallel_size" => self.pipeline_parallel_size.is_some(),
            "enforce_eager" => self.enforce_eager.is_some(),
            "tp_size" => self.tp_size.is_some(),
            "pp_size" => self.pp_size.is_some(),
            "disable_cuda_graph" => self.disable_cuda_graph.is_some(),
            "cuda_graph_max_bs" => self.cuda_graph_max_bs.is_some(),
            _ => false,
        }
    }

    /// A flag of the other engine is an error that names the right one.
    pub(super) fn check_flags_of(&self, kind: EngineKind) -> Result<()> {
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
