//! vLLM's V1 engine: `Scheduler.schedule()` (one mixed batch per step under a
//! token budget), the KV cache manager and block pool with prefix caching,
//! and preemption by recompute. Read `docs/vllm.md`
//! §1–3 beside this code; names follow `vllm/v1/core/`.

pub mod block_pool;
pub mod kv_cache_manager;
pub mod scheduler;

pub use scheduler::{Policy, Scheduler, VllmBehaviour, VllmConfig};

use crate::request::{extend_block_hashes, RequestSpec};

/// [`crate::engine::Engine::cached_prefix_tokens`] for vLLM: the prompt's full blocks
/// hashed in order, each looked up with `BlockPool.get_cached_block` (the lookup
/// `find_longest_cache_hit` makes) until the first one not cached; the blocks found cover
/// the answer. Only `&` access: no `touch`, no counter. The hashes are computed one block
/// at a time, so a miss at block `k` costs `k + 1` hashes, not the whole prompt's.
pub(crate) fn cached_prefix_tokens(kv: &kv_cache_manager::KvCacheManager, spec: &RequestSpec) -> u32 {
    if !kv.enable_caching || kv.block_size == 0 {
        return 0;
    }
    let bs = kv.block_size;
    let full = spec.prompt_len / bs;
    let mut hashes = Vec::new();
    let mut n = 0u32;
    while n < full {
        extend_block_hashes(spec, bs, (n + 1) * bs, &mut hashes);
        if kv.pool.get_cached_block(hashes[n as usize]).is_none() {
            break;
        }
        n += 1;
    }
    n * bs
}
