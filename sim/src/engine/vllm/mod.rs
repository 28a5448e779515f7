//! vLLM's V1 engine: `Scheduler.schedule()` (one mixed batch per step under a
//! token budget), the KV cache manager and block pool with prefix caching,
//! and preemption by recompute. Read `docs/vllm.md`
//! §1–3 beside this code; names follow `vllm/v1/core/`.

pub mod block_pool;
pub mod kv_cache_manager;
pub mod scheduler;

pub use scheduler::{Policy, Scheduler, VllmBehaviour, VllmConfig};
