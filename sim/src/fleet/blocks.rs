//! The router's view of a prompt: chained hashes of fixed-size token blocks.
//!
//! Every prefix-aware router hashes the prompt it routes into blocks, each
//! block's hash chained on the one before, so that equal hashes mean equal
//! prefixes. The deployed routers hash text (SGLang's router: characters;
//! llm-d: 4 characters per token; production-stack: 128-character chunks) or
//! token ids (Dynamo); the simulator's prompts are keyed segments
//! ([`crate::request`]), so each router here hashes token blocks of its own
//! size with [`chain_block_hash`]: two prompts get the same first `k` hashes
//! exactly when their first `k` blocks hold the same tokens.

use crate::request::{chain_block_hash, extend_block_hashes, RequestSpec};

/// Chained hashes of the prompt's full blocks of `block_size` tokens, at most
/// `max_blocks` of them; with `partial`, a last hash for the tokens after the
/// last full block (llm-d and production-stack hash that remainder too).
pub fn prompt_block_hashes(spec: &RequestSpec, block_size: u32, max_blocks: usize, partial: bool) -> Vec<u64> {
    let block_size = block_size.max(1);
    let full = ((spec.prompt_len / block_size) as usize).min(max_blocks);
    let mut hashes = Vec::with_capacity(full + 1);
    extend_block_hashes(spec, block_size, full as u32 * block_size, &mut hashes);
    let start = full as u32 * block_size;
    if partial && full < max_blocks && start < spec.prompt_len {
        let parent = hashes.last().copied().unwrap_or(0);
        hashes.push(chain_block_hash(parent, prompt_pieces(spec, start, spec.prompt_len).into_iter()));
    }
    hashes
}

/// The segment pieces `(key, first offset, length)` covering prompt positions `[start, end)`.
fn prompt_pieces(spec: &RequestSpec, start: u32, end: u32) -> Vec<(u64, u32, u32)> {
    let mut out = Vec::new();
    let mut seg_start = 0u32;
    for seg in &spec.prompt {
        let seg_end = seg_start + seg.len;
        if seg_end > start && seg_start < end {
            let from = start.max(seg_start);
            let to = end.min(seg_end);
            out.push((seg.key, from - seg_start, to - from));
        }
        if seg_end >= end {
            break;
        }
        seg_start = seg_end;
    }
    out
}

/// Block hashes are already well mixed ([`chain_block_hash`]): maps keyed by them hash by
/// identity (as `engine::vllm::block_pool` does). Such maps are only looked up, never
/// iterated, so the hasher cannot leak into a decision.
#[derive(Clone, Copy, Debug, Default)]
pub struct IdentityHasher(u64);

impl std::hash::Hasher for IdentityHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8) | u64::from(b);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = v;
    }
}

/// A hash map keyed by block hashes.
pub type BlockHashMap<V> = std::collections::HashMap<u64, V, std::hash::BuildHasherDefault<IdentityHasher>>;

/// Number of leading hashes of `hashes` for which `has` holds.
pub fn leading_matches(hashes: &[u64], mut has: impl FnMut(u64) -> bool) -> usize {
    hashes.iter().take_while(|&&h| has(h)).count()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::request::Segment;

    /// A request whose prompt is the given `(key, len)` segments.
    pub(crate) fn spec(segs: &[(u64, u32)]) -> RequestSpec {
        let prompt: Vec<Segment> = segs.iter().map(|&(key, len)| Segment { key, len }).collect();
        let prompt_len = prompt.iter().map(|s| s.len).sum();
        RequestSpec {
            prompt,
            prompt_len,
            max_tokens: 16,
            output_len: 16,
            output_key: 0xfeed,
            arrival_ns: 0,
            priority: 0,
            ignore_eos: true,
            prompt_hashes: None,
        }
    }

    #[test]
    fn shared_prefixes_share_leading_hashes_and_the_partial_block_is_hashed() {
        let a = spec(&[(1, 100), (2, 30)]);
        let b = spec(&[(1, 100), (3, 30)]);
        let ha = prompt_block_hashes(&a, 16, usize::MAX, true);
        let hb = prompt_block_hashes(&b, 16, usize::MAX, true);
        assert_eq!(ha.len(), 9, "8 full blocks of 16 and a remainder of 2");
        assert_eq!(ha[..6], hb[..6], "blocks 0..6 lie inside the shared 100 tokens");
        assert_ne!(ha[6], hb[6]);
        let full_only = prompt_block_hashes(&a, 16, usize::MAX, false);
        assert_eq!(full_only[..], ha[..8]);
        assert_eq!(prompt_block_hashes(&a, 16, 3, true).len(), 3, "capped at max_blocks");
        // The same tokens in the same place hash alike, however the segments cut them.
        let c = spec(&[(1, 100), (2, 30)]);
        assert_eq!(prompt_block_hashes(&c, 16, usize::MAX, true), ha);
    }
}
