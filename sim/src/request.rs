//! Requests as the workload generator makes them, and their token contents.
//!
//! A prompt is a list of [`Segment`]s: runs of pseudo-random tokens named by
//! a key. Two prompts that share a segment key share those tokens, which is
//! how shared prefixes (prefix_repetition, trace prefix groups, the initial
//! test request of `vllm bench serve`) become prefix-cache hits, and why a
//! random prompt never hits by accident. Token contents are computed on
//! demand from (key, offset), so a 10,000-request workload holds a few
//! segments per request, not millions of tokens.

use crate::rng::mix64;

/// The key of the BOS segment: the token a model's tokenizer puts before a text prompt
/// (`ModelCard::add_bos_token`), one segment of that length at the front of every generated
/// prompt of a model whose tokenizer adds one, the same token in every prompt (so SGLang's radix
/// tree shares it, as it shares the real BOS id). [`crate::workload::generate`] puts it there.
pub const BOS_KEY: u64 = 0x424f_535f_544f_4b4e;

/// A run of `len` tokens whose contents are determined by `key`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    pub key: u64,
    pub len: u32,
}

/// One request as the client sends it.
#[derive(Debug, PartialEq, Eq)]
pub struct RequestSpec {
    /// Segments whose lengths sum to `prompt_len`.
    pub prompt: Vec<Segment>,
    pub prompt_len: u32,
    /// `max_tokens` as sent in the request.
    pub max_tokens: u32,
    /// Tokens the engine will actually generate (= `max_tokens` under
    /// `ignore_eos`, otherwise where EOS falls, at most `max_tokens`).
    pub output_len: u32,
    /// Key of the output tokens' contents.
    pub output_key: u64,
    /// Offset of the client's send time from the start of its phase (open
    /// loop); 0 for all requests when the rate is infinite.
    pub arrival_ns: u64,
    /// vLLM `priority` (lower value = served first under `policy = "priority"`).
    pub priority: i32,
    /// The request was sent with `ignore_eos` (SGLang ≥ 0.5.23 reserves its
    /// whole remaining output for it).
    pub ignore_eos: bool,
    /// A memo of the hashes of the prompt's full blocks at one block size
    /// ([`PromptBlockHashes::of`]), shared between runs of the same workload
    /// (`tune`: one workload, thousands of configurations). `None`: computed on
    /// demand. The values are exactly those [`extend_block_hashes`] computes, so
    /// the memo never changes a result, only how long it takes.
    pub prompt_hashes: Option<std::sync::Arc<PromptBlockHashes>>,
}

impl Clone for RequestSpec {
    fn clone(&self) -> Self {
        RequestSpec { prompt: self.prompt.clone(), ..self.clone_without_prompt() }
    }

    /// The clone, in this spec's prompt buffer (the vLLM scheduler's arriving requests take
    /// over finished ones').
    fn clone_from(&mut self, source: &Self) {
        let mut prompt = std::mem::take(&mut self.prompt);
        prompt.clone_from(&source.prompt);
        *self = RequestSpec { prompt, ..source.clone_without_prompt() };
    }
}

impl RequestSpec {
    /// A copy with an empty prompt (every other field named: one added must be cloned here).
    fn clone_without_prompt(&self) -> RequestSpec {
        let RequestSpec {
            prompt: _,
            prompt_len,
            max_tokens,
            output_len,
            output_key,
            arrival_ns,
            priority,
            ignore_eos,
            prompt_hashes,
        } = self;
        RequestSpec {
            prompt: Vec::new(),
            prompt_len: *prompt_len,
            max_tokens: *max_tokens,
            output_len: *output_len,
            output_key: *output_key,
            arrival_ns: *arrival_ns,
            priority: *priority,
            ignore_eos: *ignore_eos,
            prompt_hashes: prompt_hashes.clone(),
        }
    }
}

/// The hashes of a prompt's full blocks of `block_size` tokens, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PromptBlockHashes {
    pub block_size: u32,
    pub hashes: Vec<u64>,
}

impl PromptBlockHashes {
    /// The full prompt blocks' hashes of `spec` at `block_size`.
    pub fn of(spec: &RequestSpec, block_size: u32) -> PromptBlockHashes {
        let mut hashes = Vec::with_capacity((spec.prompt_len / block_size.max(1)) as usize);
        extend_block_hashes(spec, block_size.max(1), spec.prompt_len, &mut hashes);
        PromptBlockHashes { block_size: block_size.max(1), hashes }
    }
}

impl RequestSpec {
    /// Tokens of the leading BOS segment ([`BOS_KEY`]): what the server's tokenizer put before
    /// the prompt's text, 0 where it put nothing (a tokenizer without a BOS, prompts sent as ids,
    /// a trace's counts).
    pub fn bos_len(&self) -> u32 {
        match self.prompt.first() {
            Some(s) if s.key == BOS_KEY && self.prompt.len() > 1 => s.len,
            _ => 0,
        }
    }

    /// The prompt's leading segment as sharing goes: its first segment, or, behind a BOS
    /// segment, the next one with the BOS counted in its length (two prompts that share it share
    /// the BOS and that segment). What the KV-limit and the TTFT floor read to find a shared
    /// prefix (`random_prefix_len`, a `prefix_repetition` prefix, a trace's `prefix_group`); the
    /// BOS alone, which every prompt shares, is not one.
    pub fn lead_segment(&self) -> Option<Segment> {
        let b = self.bos_len();
        let i = usize::from(b > 0);
        self.prompt.get(i).map(|s| Segment { key: s.key, len: s.len + b })
    }

    /// Total tokens the request holds once finished.
    pub fn total_len(&self) -> u32 {
        self.prompt_len + self.output_len
    }

    /// Contents of the token at position `pos` (prompt, then output).
    pub fn token(&self, pos: u32) -> u64 {
        if pos >= self.prompt_len {
            return token_of(self.output_key, pos - self.prompt_len);
        }
        // Prompts given token by token (a live server's) index directly.
        if self.prompt.len() == self.prompt_len as usize {
            return token_of(self.prompt[pos as usize].key, 0);
        }
        let mut start = 0u32;
        for seg in &self.prompt {
            if pos < start + seg.len {
                return token_of(seg.key, pos - start);
            }
            start += seg.len;
        }
        unreachable!("prompt segments sum to prompt_len")
    }

    /// Token id in a vocabulary of `vocab` ids, avoiding the first `reserved`
    /// (special tokens): what a live client sends for this position.
    pub fn token_id(&self, pos: u32, vocab: u32, reserved: u32) -> u32 {
        let span = u64::from(vocab.saturating_sub(reserved).max(1));
        (self.token(pos) % span) as u32 + reserved
    }
}

#[inline]
pub(crate) fn token_of(key: u64, offset: u32) -> u64 {
    mix64(key ^ offset_mix(offset))
}

/// The half of [`token_of`] that depends on the offset only.
#[inline]
fn offset_mix(offset: u32) -> u64 {
    mix64(u64::from(offset).wrapping_add(0x5bd1_e995))
}

/// Hash of a full block, chained on its parent's hash, as vLLM chains
/// `hash(parent_hash, block_token_ids)`. A block's tokens are named by the
/// segment pieces they come from, `(key, first offset, length)`, so the hash
/// covers exactly the block's contents at one mix per piece instead of one
/// per token: two blocks hash alike iff they hold the same tokens.
pub fn chain_block_hash(parent: u64, pieces: impl Iterator<Item = (u64, u32, u32)>) -> u64 {
    let mut acc = chain_block_start(parent);
    for (key, start, len) in pieces {
        acc = chain_block_piece(acc, key, start, len);
    }
    acc
}

#[inline]
fn chain_block_start(parent: u64) -> u64 {
    mix64(parent ^ 0x243f_6a88_85a3_08d3)
}

#[inline]
fn chain_block_piece(acc: u64, key: u64, start: u32, len: u32) -> u64 {
    mix64(acc ^ mix64(key ^ (u64::from(start) << 24) ^ u64::from(len)))
}

/// The hash of `spec`'s first block of `block_size` tokens, if its prompt fills one: the
/// first of [`extend_block_hashes`]' values. Every later block's hash is chained on it, so two
/// requests whose first blocks differ share no block hash at all.
pub fn first_block_hash(spec: &RequestSpec, block_size: u32) -> Option<u64> {
    if block_size == 0 || spec.prompt_len < block_size {
        return None;
    }
    if let Some(p) = spec.prompt_hashes.as_deref().filter(|p| p.block_size == block_size) {
        if let Some(&h) = p.hashes.first() {
            return Some(h);
        }
    }
    Some(chain_block_hash(0, Pieces::new(spec, 0, block_size)))
}

/// Extends `hashes` with the hashes of every full block of `block_size`
/// tokens among the first `num_tokens` tokens of `spec`.
pub fn extend_block_hashes(spec: &RequestSpec, block_size: u32, num_tokens: u32, hashes: &mut Vec<u64>) {
    let full = (num_tokens / block_size) as usize;
    if hashes.len() < full {
        if let Some(p) = spec.prompt_hashes.as_deref().filter(|p| p.block_size == block_size) {
            if hashes.len() < p.hashes.len() {
                hashes.extend_from_slice(&p.hashes[hashes.len()..full.min(p.hashes.len())]);
            }
        }
    }
    if spec.prompt.len() == spec.prompt_len as usize {
        // Prompts given token by token (`Pieces::new` starts each block at its own token).
        while hashes.len() < full {
            let k = hashes.len() as u32;
            let parent = hashes.last().copied().unwrap_or(0);
            let start = k * block_size;
            hashes.push(chain_block_hash(parent, Pieces::new(spec, start, start + block_size)));
        }
        return;
    }
    if hashes.len() >= full {
        return;
    }
    // One walk over the pieces of all the new blocks, each piece cut at block boundaries:
    // block by block the same pieces as `Pieces::new(spec, start, start + block_size)`, so
    // the same `chain_block_hash` values, without finding each block's first piece anew.
    hashes.reserve(full - hashes.len());
    let mut parent = hashes.last().copied().unwrap_or(0);
    let mut pieces = Pieces::new(spec, hashes.len() as u32 * block_size, full as u32 * block_size);
    let mut rest: Option<(u64, u32, u32)> = None;
    while hashes.len() < full {
        let mut acc = chain_block_start(parent);
        let mut left = block_size;
        while left > 0 {
            let (key, start, len) = rest.take().or_else(|| pieces.next()).expect("the pieces cover the blocks");
            let take = len.min(left);
            acc = chain_block_piece(acc, key, start, take);
            if take < len {
                rest = Some((key, start + take, len - take));
            }
            left -= take;
        }
        hashes.push(acc);
        parent = acc;
    }
}

/// The segment pieces covering positions `[pos, end)` of a request: prompt
/// segments, then the output as one segment.
struct Pieces<'a> {
    spec: &'a RequestSpec,
    pos: u32,
    end: u32,
    seg: usize,
    seg_start: u32,
}

impl<'a> Pieces<'a> {
    fn new(spec: &'a RequestSpec, pos: u32, end: u32) -> Pieces<'a> {
        // Prompts given token by token: start at the right segment at once.
        if spec.prompt.len() == spec.prompt_len as usize && pos < spec.prompt_len {
            return Pieces { spec, pos, end, seg: pos as usize, seg_start: pos };
        }
        Pieces { spec, pos, end, seg: 0, seg_start: 0 }
    }
}

impl Iterator for Pieces<'_> {
    type Item = (u64, u32, u32);
    fn next(&mut self) -> Option<(u64, u32, u32)> {
        if self.pos >= self.end {
            return None;
        }
        if self.pos >= self.spec.prompt_len {
            let off = self.pos - self.spec.prompt_len;
            let len = self.end - self.pos;
            self.pos = self.end;
            return Some((self.spec.output_key, off, len));
        }
        loop {
            let seg = self.spec.prompt[self.seg];
            if self.pos < self.seg_start + seg.len {
                let off = self.pos - self.seg_start;
                let len = (seg.len - off).min(self.end - self.pos);
                self.pos += len;
                return Some((seg.key, off, len));
            }
            self.seg_start += seg.len;
            self.seg += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(prompt: Vec<Segment>, out_key: u64) -> RequestSpec {
        let prompt_len = prompt.iter().map(|s| s.len).sum();
        RequestSpec {
            prompt,
            prompt_len,
            max_tokens: 8,
            output_len: 8,
            output_key: out_key,
            arrival_ns: 0,
            priority: 0,
            ignore_eos: true,
            prompt_hashes: None,
        }
    }

    #[test]
    fn shared_prefix_segments_share_block_hashes_until_they_diverge() {
        let a = spec(vec![Segment { key: 1, len: 40 }, Segment { key: 2, len: 24 }], 10);
        let b = spec(vec![Segment { key: 1, len: 40 }, Segment { key: 3, len: 24 }], 11);
        let (mut ha, mut hb) = (vec![], vec![]);
        extend_block_hashes(&a, 16, 64, &mut ha);
        extend_block_hashes(&b, 16, 64, &mut hb);
        assert_eq!(ha.len(), 4);
        // blocks 0 and 1 lie inside the shared 40-token prefix; block 2 spans the divergence.
        assert_eq!(ha[..2], hb[..2]);
        assert_ne!(ha[2], hb[2]);
        assert_ne!(ha[3], hb[3]);
    }

    #[test]
    fn first_block_hash_is_the_first_block_hash_computed() {
        let a = spec(vec![Segment { key: 1, len: 10 }, Segment { key: 2, len: 30 }], 10);
        let mut memo = a.clone();
        memo.prompt_hashes = Some(std::sync::Arc::new(PromptBlockHashes::of(&a, 16)));
        for bs in [1, 8, 16, 40] {
            let mut h = vec![];
            extend_block_hashes(&a, bs, a.prompt_len, &mut h);
            assert_eq!(first_block_hash(&a, bs), Some(h[0]), "block size {bs}");
            assert_eq!(first_block_hash(&memo, bs), Some(h[0]), "block size {bs}, memo at 16");
        }
        // No full prompt block: none (the first block would hold output tokens).
        assert_eq!(first_block_hash(&a, 41), None);
        assert_eq!(first_block_hash(&a, 0), None);
        // Another request with the same first 16 tokens has the same first block.
        let b = spec(vec![Segment { key: 1, len: 10 }, Segment { key: 2, len: 6 }, Segment { key: 9, len: 5 }], 3);
        assert_eq!(first_block_hash(&a, 16), first_block_hash(&b, 16));
        assert_ne!(first_block_hash(&a, 20), first_block_hash(&b, 20));
    }

    #[test]
    fn memoised_prompt_hashes_are_the_computed_ones() {
        let a = spec(vec![Segment { key: 1, len: 40 }, Segment { key: 2, len: 30 }], 10);
        let mut b = a.clone();
        b.prompt_hashes = Some(std::sync::Arc::new(PromptBlockHashes::of(&a, 16)));
        assert_eq!(b.prompt_hashes.as_ref().unwrap().hashes.len(), 4);
        // Prompt blocks and blocks reaching into the output, in pieces and at once.
        for upto in [0, 15, 16, 40, 64, 70, 80, 200] {
            let (mut ha, mut hb) = (vec![], vec![]);
            extend_block_hashes(&a, 16, upto, &mut ha);
            extend_block_hashes(&b, 16, upto.min(33), &mut hb);
            extend_block_hashes(&b, 16, upto, &mut hb);
            assert_eq!(ha, hb, "up to {upto}");
        }
        // Another block size ignores the memo.
        let (mut ha, mut hb) = (vec![], vec![]);
        extend_block_hashes(&a, 8, 64, &mut ha);
        extend_block_hashes(&b, 8, 64, &mut hb);
        assert_eq!(ha, hb);
    }

    /// The block hashes, extended in one go or in steps, are those of each block's own
    /// pieces (`chain_block_hash` of `Pieces::new` per block), over segment layouts whose
    /// boundaries fall inside, on and across block boundaries, token-by-token prompts, and
    /// blocks reaching into the output.
    #[test]
    fn extended_block_hashes_are_each_blocks_chain_hash() {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = move |m: u32| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % u64::from(m)) as u32
        };
        for case in 0..400 {
            let nseg = 1 + rnd(6);
            let prompt: Vec<Segment> = if case % 10 == 0 {
                (0..1 + rnd(90)).map(|i| Segment { key: u64::from(i % 7), len: 1 }).collect()
            } else {
                // Lengths from 0: zero-length segments too.
                (0..nseg)
                    .map(|i| Segment { key: 100 + u64::from(i), len: if case % 3 == 0 { rnd(3) } else { rnd(70) } })
                    .collect()
            };
            let mut a = spec(prompt, 7 + case);
            a.output_len = rnd(100);
            // A layout whose length equals its count is read as token by token (`Pieces::new`):
            // only real token-by-token prompts are.
            let token_by_token = a.prompt.len() == a.prompt_len as usize;
            if a.prompt_len == 0 || (token_by_token && a.prompt.iter().any(|s| s.len != 1)) {
                continue;
            }
            let bs = [1, 2, 3, 16, 32][rnd(5) as usize];
            let total = a.prompt_len + a.output_len;
            let mut reference = Vec::new();
            for k in 0..total / bs {
                let parent = reference.last().copied().unwrap_or(0);
                reference.push(chain_block_hash(parent, Pieces::new(&a, k * bs, (k + 1) * bs)));
            }
            let mut at_once = Vec::new();
            extend_block_hashes(&a, bs, total, &mut at_once);
            assert_eq!(at_once, reference, "case {case}");
            let mut stepwise = Vec::new();
            let mut upto = 0;
            while upto < total {
                upto = (upto + 1 + rnd(3 * bs)).min(total);
                extend_block_hashes(&a, bs, upto, &mut stepwise);
            }
            assert_eq!(stepwise, reference, "case {case} in steps");
        }
    }

    #[test]
    fn output_tokens_are_distinct_from_prompt_tokens() {
        let a = spec(vec![Segment { key: 1, len: 4 }], 2);
        assert_ne!(a.token(0), a.token(4));
        assert_eq!(a.token(5), a.token(5));
        assert!(a.token_id(3, 1000, 3) >= 3 && a.token_id(3, 1000, 3) < 1000);
    }
}
