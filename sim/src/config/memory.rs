//! Memory accounting: how each engine sizes its KV pool from the GPU's memory.

use super::*;

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

pub(super) fn gib(b: u64) -> f64 {
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
