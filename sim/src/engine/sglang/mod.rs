//! SGLang's scheduler: prefill-first alternation, `PrefillAdder` admission
//! by reserved KV, `new_token_ratio`, retraction, and the radix cache. Read
//! `docs/sglang.md` §1–8 beside this code; names
//! follow `python/sglang/srt/managers/` and `srt/mem_cache/`.

pub mod radix_cache;
pub mod schedule_policy;
pub mod scheduler;

pub use schedule_policy::SchedulePolicy;
pub use scheduler::{Overlap, Scheduler, SglangBehaviour, SglangConfig};
