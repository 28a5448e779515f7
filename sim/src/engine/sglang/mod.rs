//! SGLang's scheduler: prefill-first alternation, `PrefillAdder` admission
//! by reserved KV, `new_token_ratio`, retraction, and the radix cache. Read
//! `docs/sglang.md` §1–8 beside this code; names
//! follow `python/sglang/srt/managers/` and `srt/mem_cache/`.

pub mod radix_cache;
pub mod schedule_policy;
pub mod scheduler;

pub use schedule_policy::SchedulePolicy;
pub use scheduler::{Overlap, Scheduler, SglangBehaviour, SglangConfig};

use crate::request::RequestSpec;

/// [`crate::engine::Engine::cached_prefix_tokens`] for SGLang: the prompt matched in the
/// radix tree by [`radix_cache::RadixCache::cached_prefix_len`] (`match_prefix` without its
/// side effects), page-floored; 0 with `disable_radix_cache`. The prompt's tokens are
/// materialised in growing windows (1,024 tokens, then doubling) while the match reaches
/// the window's end, so a short match does not cost the whole prompt.
pub(crate) fn cached_prefix_tokens(tree: &radix_cache::RadixCache, disabled: bool, spec: &RequestSpec) -> u32 {
    if disabled {
        return 0;
    }
    let page = tree.page_size().max(1);
    let mut key: Vec<u64> = Vec::new();
    let mut window = spec.prompt_len.min(1024);
    loop {
        while (key.len() as u32) < window {
            key.push(spec.token(key.len() as u32));
        }
        let m = tree.cached_prefix_len(&key);
        if m < window / page * page || window == spec.prompt_len {
            return m;
        }
        window = spec.prompt_len.min(window.saturating_mul(2));
    }
}
