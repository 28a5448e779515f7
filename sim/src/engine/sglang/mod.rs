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
/// radix tree by [`radix_cache::RadixCache::cached_prefix_len_runs`] (`match_prefix` without
/// its side effects), page-floored; 0 with `disable_radix_cache`.
pub(crate) fn cached_prefix_tokens(tree: &radix_cache::RadixCache, disabled: bool, spec: &RequestSpec) -> u32 {
    if disabled {
        return 0;
    }
    let runs = token_runs(spec);
    tree.cached_prefix_len_runs(radix_cache::Key::new(&runs, spec.prompt_len as usize))
}

/// A request's tokens as the radix tree's runs, exactly [`RequestSpec::token`]'s values: the
/// prompt's segments (a prompt given token by token, one run a token), then its outputs
/// (a run longer than any request samples: only its first `fill_len − prompt_len` are read).
pub(crate) fn token_runs(spec: &RequestSpec) -> Vec<radix_cache::Run> {
    use radix_cache::Run;
    let mut runs: Vec<Run> = if spec.prompt.len() == spec.prompt_len as usize {
        spec.prompt.iter().map(|seg| Run::derived(seg.key, 0, 1)).collect()
    } else {
        spec.prompt.iter().filter(|seg| seg.len > 0).map(|seg| Run::derived(seg.key, 0, seg.len)).collect()
    };
    runs.push(Run::derived(spec.output_key, 0, u32::MAX / 2));
    runs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::Segment;

    /// The runs name exactly [`RequestSpec::token`]'s values at every position, for prompts of
    /// segments (an empty one included), prompts given token by token, and the edge where a
    /// segmented prompt has as many segments as tokens.
    #[test]
    fn token_runs_are_each_positions_token() {
        let mut a = RequestSpec {
            prompt: vec![Segment { key: 1, len: 10 }, Segment { key: 2, len: 0 }, Segment { key: 3, len: 30 }],
            prompt_len: 40,
            max_tokens: 12,
            output_len: 12,
            output_key: 77,
            arrival_ns: 0,
            priority: 0,
            ignore_eos: true,
            prompt_hashes: None,
        };
        let mut live = a.clone();
        live.prompt = (0..40).map(|k| Segment { key: 100 + k, len: 1 }).collect();
        let mut edge = a.clone();
        edge.prompt = vec![Segment { key: 5, len: 2 }, Segment { key: 6, len: 0 }];
        edge.prompt_len = 2;
        a.prompt_hashes = None;
        for s in [&a, &live, &edge] {
            let want: Vec<u64> = (0..s.total_len()).map(|p| s.token(p)).collect();
            let runs = token_runs(s);
            assert_eq!(radix_cache::Key::new(&runs, want.len()).tokens(), want);
        }
    }
}
