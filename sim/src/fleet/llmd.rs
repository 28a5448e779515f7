//! llm-d's inference scheduler (the endpoint picker, EPP), with the
//! approximate prefix cache.
//!
//! Follows, in `llm-d/llm-d-inference-scheduler` (module `llm-d-router`):
//!
//! * `pkg/epp/framework/plugins/requestcontrol/dataproducer/approximateprefix/`
//!   (`plugin.go`, `indexer.go`, `hashing.go`, `types.go`): the prompt cut in
//!   blocks of `blockSizeTokens` (default 16, or the engines' own block size
//!   under `autoTune`), each block's hash chained on the previous one, at most
//!   `maxPrefixBlocksToMatch` (256) blocks, the remainder hashed as a last
//!   block; a per-endpoint LRU of the hashes sent there, of
//!   `lruCapacityPerServer` entries (31,250, or the engine's KV blocks under
//!   `autoTune`); the match of an endpoint counts, walking the request's
//!   hashes from the first until one is held by no endpoint, the hashes it holds.
//! * `scheduling/scorer/prefix/plugin.go` (`prefix-cache-scorer`): match / total blocks.
//! * `scheduling/scorer/queuedepth/queue.go` (`queue-scorer`):
//!   `(max − waiting) / (max − min)` over the endpoints, 1 when all are equal.
//! * `scheduling/scorer/kvcacheutilization/kvcache_utilization.go`
//!   (`kv-cache-utilization-scorer`): `1 − KV usage`.
//! * `scheduling/picker/maxscore/picker.go` (`max-score-picker`): the highest
//!   weighted sum, ties at random.
//! * Weights: `config/charts/epplib/templates/_config.yaml`, the chart's default
//!   profile: prefix-cache-scorer 3, queue-scorer 2, kv-cache-utilization-scorer 2.
//!
//! The real producer hashes text at 4 characters per token; this one hashes
//! the prompt's tokens. The selected endpoint is recorded at once (the real
//! one records it asynchronously just after scheduling). Ties are broken from
//! the named stream `router.llmd`.

use std::collections::BTreeMap;

use super::blocks::{prompt_block_hashes, BlockHashMap};
use super::router::{max_score_pick, ReplicaView, RouteRequest, Router};
use crate::rng::{stream, Rng};

/// The EPP profile: scorer weights and the approximate prefix producer's parameters.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LlmdConfig {
    /// Weight of `prefix-cache-scorer`.
    pub prefix_cache_scorer_weight: f64,
    /// Weight of `queue-scorer`.
    pub queue_scorer_weight: f64,
    /// Weight of `kv-cache-utilization-scorer`.
    pub kv_cache_utilization_scorer_weight: f64,
    /// `autoTune`: block size and LRU capacity from the engines' metrics.
    pub auto_tune: bool,
    /// `blockSizeTokens`.
    pub block_size_tokens: u32,
    /// `maxPrefixBlocksToMatch`.
    pub max_prefix_blocks_to_match: u32,
    /// `lruCapacityPerServer`.
    pub lru_capacity_per_server: u64,
}

impl Default for LlmdConfig {
    fn default() -> Self {
        LlmdConfig {
            prefix_cache_scorer_weight: 3.0,
            queue_scorer_weight: 2.0,
            kv_cache_utilization_scorer_weight: 2.0,
            auto_tune: true,
            block_size_tokens: 16,
            max_prefix_blocks_to_match: 256,
            lru_capacity_per_server: 31_250,
        }
    }
}

/// One endpoint's LRU of block hashes.
#[derive(Clone, Debug, Default)]
struct Lru {
    stamp_of: BlockHashMap<u64>,
    by_stamp: BTreeMap<u64, u64>,
    capacity: u64,
}

impl Lru {
    fn add(&mut self, h: u64, stamp: u64) {
        if let Some(old) = self.stamp_of.insert(h, stamp) {
            self.by_stamp.remove(&old);
        }
        self.by_stamp.insert(stamp, h);
        while self.by_stamp.len() as u64 > self.capacity.max(1) {
            let (&s, &old) = self.by_stamp.iter().next().expect("non-empty");
            self.by_stamp.remove(&s);
            self.stamp_of.remove(&old);
        }
    }
    fn contains(&self, h: u64) -> bool {
        self.stamp_of.contains_key(&h)
    }
}

/// llm-d's scheduler with the approximate prefix cache.
#[derive(Clone, Debug)]
pub struct InferenceScheduler {
    cfg: LlmdConfig,
    lrus: Vec<Option<Lru>>,
    stamp: u64,
    rng: Rng,
}

impl InferenceScheduler {
    pub fn new(cfg: LlmdConfig, seed: u64) -> InferenceScheduler {
        InferenceScheduler { cfg, lrus: Vec::new(), stamp: 0, rng: stream(seed, "router.llmd") }
    }

    fn block_size(&self, replicas: &[ReplicaView]) -> u32 {
        match replicas.first() {
            Some(r) if self.cfg.auto_tune && r.kv_block_size > 0 => r.kv_block_size,
            _ => self.cfg.block_size_tokens.max(1),
        }
    }

    /// Per endpoint, the blocks matched as `matchLongestPrefix` counts them.
    fn matches(&self, hashes: &[u64], n: usize) -> Vec<u32> {
        let mut m = vec![0u32; n];
        for &h in hashes {
            let mut any = false;
            for (i, lru) in self.lrus.iter().enumerate().take(n) {
                if lru.as_ref().is_some_and(|l| l.contains(h)) {
                    m[i] += 1;
                    any = true;
                }
            }
            if !any {
                break;
            }
        }
        m
    }

    /// Weighted scores of every endpoint for a request hashed to `hashes`.
    pub fn scores(&self, hashes: &[u64], replicas: &[ReplicaView]) -> Vec<f64> {
        let n = replicas.len();
        let total = hashes.len();
        let matches = self.matches(hashes, n);
        let qmin = replicas.iter().map(|r| r.waiting).min().unwrap_or(0);
        let qmax = replicas.iter().map(|r| r.waiting).max().unwrap_or(0);
        (0..n)
            .map(|i| {
                let prefix = if total == 0 { 0.0 } else { f64::from(matches[i]) / total as f64 };
                let queue =
                    if qmax == qmin { 1.0 } else { f64::from(qmax - replicas[i].waiting) / f64::from(qmax - qmin) };
                let kv = 1.0 - replicas[i].kv_usage;
                self.cfg.prefix_cache_scorer_weight * prefix
                    + self.cfg.queue_scorer_weight * queue
                    + self.cfg.kv_cache_utilization_scorer_weight * kv
            })
            .collect()
    }
}

impl Router for InferenceScheduler {
    fn name(&self) -> &'static str {
        "llm-d-inference-scheduler"
    }

    fn route(&mut self, req: &RouteRequest<'_>, replicas: &[ReplicaView]) -> usize {
        let n = replicas.len();
        if self.lrus.len() < n {
            self.lrus.resize(n, None);
        }
        let bs = self.block_size(replicas);
        // A prompt shorter than one block is not hashed at all.
        let hashes = if req.spec.prompt_len < bs {
            Vec::new()
        } else {
            prompt_block_hashes(req.spec, bs, self.cfg.max_prefix_blocks_to_match as usize, true)
        };
        let scores = self.scores(&hashes, replicas);
        let chosen = max_score_pick(&scores, &mut self.rng);
        let capacity = if self.cfg.auto_tune && replicas[chosen].kv_num_blocks > 0 {
            replicas[chosen].kv_num_blocks
        } else {
            self.cfg.lru_capacity_per_server
        };
        let lru = self.lrus[chosen].get_or_insert_with(|| Lru { capacity, ..Default::default() });
        for &h in &hashes {
            self.stamp += 1;
            lru.add(h, self.stamp);
        }
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::blocks::tests::spec;
    use crate::fleet::router::tests::{req, views};

    #[test]
    fn scores_are_the_weighted_sum_of_the_three_scorers() {
        let r = InferenceScheduler::new(LlmdConfig::default(), 0);
        let mut v = views(&[0, 0, 0]);
        v[0].waiting = 4;
        v[1].waiting = 2;
        v[2].waiting = 0;
        v[0].kv_usage = 0.5;
        let s = r.scores(&[], &v);
        assert_eq!(s, vec![3.0 * 0.0 + 2.0 * 0.0 + 2.0 * 0.5, 2.0 * 0.5 + 2.0, 2.0 + 2.0]);
    }

    #[test]
    fn same_prefix_sticks_until_queue_and_kv_scores_outweigh_it() {
        let mut r = InferenceScheduler::new(LlmdConfig { auto_tune: false, ..Default::default() }, 1);
        let mut v = views(&[0, 0]);
        let mut picks = Vec::new();
        for i in 0..12u64 {
            // 480 shared tokens and a 32-token question: 32 blocks, 30 shared.
            let s = spec(&[(5, 480), (100 + i, 32)]);
            let p = r.route(&req(i, &s, i), &v);
            // The chosen engine's queue grows by one waiting request each time.
            v[p].waiting += 1;
            picks.push(p);
        }
        let first = picks[0];
        // Request 1: prefix 3 × 30/32 = 2.81 beats the other's queue score 2 (its own is 0).
        assert_eq!(picks[1], first);
        // From then on the queue difference alone decides the queue score (0 against 2): the
        // prefix (2.81) keeps winning while the other endpoint has no prefix, so all stay.
        assert!(picks.iter().all(|&p| p == first), "{picks:?}");
        // With the KV usage of the loaded engine high, the idle one wins despite the prefix.
        v[first].kv_usage = 0.9;
        let s = spec(&[(5, 480), (999, 32)]);
        assert_ne!(r.route(&req(99, &s, 99), &v), first);
    }

    #[test]
    fn match_counts_hashes_until_no_endpoint_holds_one() {
        let mut r = InferenceScheduler::new(LlmdConfig { auto_tune: false, ..Default::default() }, 0);
        r.lrus =
            vec![Some(Lru { capacity: 100, ..Default::default() }), Some(Lru { capacity: 100, ..Default::default() })];
        let s = spec(&[(1, 64)]);
        let h = prompt_block_hashes(&s, 16, 256, true);
        assert_eq!(h.len(), 4);
        // Endpoint 0 holds blocks 0 and 2; endpoint 1 holds 0, 1, 2.
        for (i, &b) in [h[0], h[2]].iter().enumerate() {
            r.lrus[0].as_mut().unwrap().add(b, i as u64 + 1);
        }
        for (i, &b) in h[..3].iter().enumerate() {
            r.lrus[1].as_mut().unwrap().add(b, i as u64 + 10);
        }
        assert_eq!(r.matches(&h, 2), vec![2, 3], "a hole in one endpoint does not stop the walk");
    }

    #[test]
    fn the_lru_keeps_the_most_recent_capacity_hashes() {
        let mut l = Lru { capacity: 2, ..Default::default() };
        l.add(1, 1);
        l.add(2, 2);
        l.add(1, 3);
        l.add(3, 4);
        assert!(l.contains(1) && l.contains(3) && !l.contains(2));
    }
}
