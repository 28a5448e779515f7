//! NVIDIA Dynamo's KV router (`python -m dynamo.frontend --router-mode kv`).
//!
//! Follows `lib/kv-router/src/scheduling/selector.rs` (`DefaultWorkerSelector`:
//! the cost and the softmax sampling; formerly
//! `lib/llm/src/kv_router/scheduler.rs`) and `lib/kv-router/src/scheduling/config.rs`
//! (`KvRouterConfig` defaults: `overlap_score_weight` 1.0, `router_temperature`
//! 0.0, `use_kv_events` true, `router_ttl_secs` 120, `router_max_tree_size`
//! 2^20, `router_prune_target_ratio` 0.8).
//!
//! For each worker, with `B` the KV block size:
//!
//! * overlap: leading prompt blocks the worker holds, from KV events (the
//!   engine's real prefix cache, [`ReplicaView::cached_prefix_tokens`]) or,
//!   without events, from an approximate index of the blocks the router sent
//!   there, each assumed cached for `router_ttl_secs`;
//! * prefill tokens: the prompt tokens the worker would compute
//!   (`isl − overlap × B`) plus those of the requests it is still prefilling
//!   (until their first token);
//! * decode blocks: the distinct blocks of the requests active on the worker,
//!   plus this request's blocks not already among them;
//! * cost (logit) = `kv_overlap_score_weight × prefill_tokens / B + decode_blocks`.
//!
//! With `router_temperature` 0 the lowest cost wins (ties: the smaller
//! approximate tree, then at random); above 0 a worker is drawn with
//! probability ∝ `exp(−(cost − min) / ((max − min) × T))`. Random draws come
//! from the named stream `router.dynamo_kv`.

use std::collections::{BTreeSet, HashMap};

use rand::Rng as _;

use super::blocks::{leading_matches, prompt_block_hashes, BlockHashMap};
use super::router::{ReplicaView, RouteRequest, Router};
use crate::rng::{stream, Rng};

/// Dynamo's KV-router flags, named as its `KvRouterConfig` and CLI name them.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct KvRouterConfig {
    /// `--kv-overlap-score-weight` (`overlap_score_weight`).
    pub kv_overlap_score_weight: f64,
    /// `--router-temperature`: 0 picks the lowest cost; above, softmax sampling.
    pub router_temperature: f64,
    /// `--kv-cache-block-size`; 0 = the replicas' own KV block size.
    pub kv_cache_block_size: u32,
    /// `--use-kv-events`: overlap from the engines' caches; false = the
    /// approximate index of routed blocks (`--no-kv-events`).
    pub use_kv_events: bool,
    /// `--router-ttl-secs`: how long the approximate index keeps a block.
    pub router_ttl_secs: f64,
    /// `--router-max-tree-size`: approximate index size (blocks, all workers) that triggers pruning.
    pub router_max_tree_size: u64,
    /// `--router-prune-target-ratio`: pruning cuts the index to this share of the maximum.
    pub router_prune_target_ratio: f64,
}

impl Default for KvRouterConfig {
    fn default() -> Self {
        KvRouterConfig {
            kv_overlap_score_weight: 1.0,
            router_temperature: 0.0,
            kv_cache_block_size: 0,
            use_kv_events: true,
            router_ttl_secs: 120.0,
            router_max_tree_size: 1 << 20,
            router_prune_target_ratio: 0.8,
        }
    }
}

/// What the router remembers of a request it routed.
#[derive(Clone, Debug)]
struct Active {
    worker: usize,
    blocks: Vec<u64>,
    prefill_tokens: u64,
    prefilling: bool,
}

#[derive(Clone, Debug, Default)]
struct Worker {
    /// Distinct blocks of the active requests, with their reference counts.
    active_blocks: BlockHashMap<u32>,
    /// Prompt tokens still to prefill of the active requests.
    prefill_tokens: u64,
    /// Approximate index (no KV events): block → expiry time.
    approx: BlockHashMap<u64>,
}

/// Dynamo's KV router.
#[derive(Clone, Debug)]
pub struct KvRouter {
    cfg: KvRouterConfig,
    workers: Vec<Worker>,
    active: HashMap<u64, Active>,
    /// Approximate index entries by (expiry, worker, block), oldest first.
    expiries: BTreeSet<(u64, usize, u64)>,
    rng: Rng,
}

impl KvRouter {
    pub fn new(cfg: KvRouterConfig, seed: u64) -> KvRouter {
        KvRouter {
            cfg,
            workers: Vec::new(),
            active: HashMap::new(),
            expiries: BTreeSet::new(),
            rng: stream(seed, "router.dynamo_kv"),
        }
    }

    fn block_size(&self, replicas: &[ReplicaView]) -> u32 {
        if self.cfg.kv_cache_block_size > 0 {
            self.cfg.kv_cache_block_size
        } else {
            replicas.first().map(|r| r.kv_block_size).filter(|&b| b > 0).unwrap_or(16)
        }
    }

    /// Drops expired approximate entries, then prunes the oldest down to the target ratio.
    fn expire(&mut self, now_ns: u64) {
        let max = self.cfg.router_max_tree_size as usize;
        let target = (self.cfg.router_max_tree_size as f64 * self.cfg.router_prune_target_ratio) as usize;
        while let Some(&(exp, w, h)) = self.expiries.iter().next() {
            let over = self.expiries.len() > max;
            if exp > now_ns && !over {
                break;
            }
            if over {
                // Prune to the target at once, oldest first.
                while self.expiries.len() > target {
                    let (e, w2, h2) = *self.expiries.iter().next().expect("non-empty");
                    self.expiries.remove(&(e, w2, h2));
                    self.workers[w2].approx.remove(&h2);
                }
                continue;
            }
            self.expiries.remove(&(exp, w, h));
            self.workers[w].approx.remove(&h);
        }
    }

    /// The cost of every worker for a request of `isl` tokens whose blocks are `hashes`.
    fn logits(&self, isl: u32, hashes: &[u64], bs: u32, replicas: &[ReplicaView]) -> Vec<f64> {
        (0..replicas.len())
            .map(|i| {
                let w = &self.workers[i];
                let overlap = match (self.cfg.use_kv_events, replicas[i].cached_prefix_tokens) {
                    (true, Some(t)) => (t / bs) as usize,
                    _ => leading_matches(hashes, |h| w.approx.contains_key(&h)),
                };
                let new_prefill = u64::from(isl).saturating_sub(overlap as u64 * u64::from(bs));
                let prefill_tokens = w.prefill_tokens + new_prefill;
                let new_blocks = hashes.iter().filter(|h| !w.active_blocks.contains_key(h)).count();
                let decode_blocks = (w.active_blocks.len() + new_blocks) as f64;
                self.cfg.kv_overlap_score_weight * prefill_tokens as f64 / f64::from(bs) + decode_blocks
            })
            .collect()
    }

    fn select(&mut self, logits: &[f64]) -> usize {
        let t = self.cfg.router_temperature;
        let min = logits.iter().copied().fold(f64::INFINITY, f64::min);
        if t <= 0.0 {
            let tied: Vec<usize> = (0..logits.len()).filter(|&i| logits[i] == min).collect();
            if tied.len() == 1 {
                return tied[0];
            }
            // Tie-break by the smaller tree (here: the approximate index), else at random.
            let sizes: Vec<usize> = tied.iter().map(|&i| self.workers[i].approx.len()).collect();
            if sizes.iter().all(|&s| s == sizes[0]) {
                return tied[self.rng.random_range(0..tied.len())];
            }
            let k = (0..tied.len()).min_by_key(|&k| sizes[k]).expect("non-empty");
            return tied[k];
        }
        let max = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let probs: Vec<f64> = if max == min {
            vec![1.0; logits.len()]
        } else {
            logits.iter().map(|&l| (-(l - min) / ((max - min) * t)).exp()).collect()
        };
        let sum: f64 = probs.iter().sum();
        let u: f64 = self.rng.random::<f64>();
        let mut acc = 0.0;
        for (i, p) in probs.iter().enumerate() {
            acc += p / sum;
            if u <= acc {
                return i;
            }
        }
        logits.len() - 1
    }

    fn retire(&mut self, req_id: u64) {
        if let Some(a) = self.active.remove(&req_id) {
            let w = &mut self.workers[a.worker];
            if a.prefilling {
                w.prefill_tokens -= a.prefill_tokens;
            }
            for h in a.blocks {
                if let Some(c) = w.active_blocks.get_mut(&h) {
                    *c -= 1;
                    if *c == 0 {
                        w.active_blocks.remove(&h);
                    }
                }
            }
        }
    }
}

impl Router for KvRouter {
    fn name(&self) -> &'static str {
        "kv"
    }

    fn wants_cached_prefix(&self) -> bool {
        self.cfg.use_kv_events
    }

    fn route(&mut self, req: &RouteRequest<'_>, replicas: &[ReplicaView]) -> usize {
        while self.workers.len() < replicas.len() {
            self.workers.push(Worker::default());
        }
        self.expire(req.now_ns);
        let bs = self.block_size(replicas);
        // The request's blocks: full blocks hashed, the remainder a block of its own.
        let hashes = prompt_block_hashes(req.spec, bs, usize::MAX, true);
        let logits = self.logits(req.spec.prompt_len, &hashes, bs, replicas);
        let chosen = self.select(&logits);

        let full = (req.spec.prompt_len / bs) as usize;
        let overlap = match (self.cfg.use_kv_events, replicas[chosen].cached_prefix_tokens) {
            (true, Some(t)) => (t / bs) as usize,
            _ => leading_matches(&hashes, |h| self.workers[chosen].approx.contains_key(&h)),
        };
        let prefill_tokens = u64::from(req.spec.prompt_len).saturating_sub(overlap as u64 * u64::from(bs));
        let w = &mut self.workers[chosen];
        w.prefill_tokens += prefill_tokens;
        for &h in &hashes {
            *w.active_blocks.entry(h).or_insert(0) += 1;
        }
        if !self.cfg.use_kv_events {
            let expiry = req.now_ns + (self.cfg.router_ttl_secs * 1e9) as u64;
            for &h in &hashes[..full.min(hashes.len())] {
                if let Some(old) = w.approx.insert(h, expiry) {
                    self.expiries.remove(&(old, chosen, h));
                }
                self.expiries.insert((expiry, chosen, h));
            }
        }
        self.retire(req.id);
        self.active.insert(req.id, Active { worker: chosen, blocks: hashes, prefill_tokens, prefilling: true });
        chosen
    }

    fn on_first_token(&mut self, req_id: u64, _replica: usize, _now_ns: u64) {
        if let Some(a) = self.active.get_mut(&req_id) {
            if a.prefilling {
                a.prefilling = false;
                self.workers[a.worker].prefill_tokens -= a.prefill_tokens;
            }
        }
    }

    fn on_finish(&mut self, req_id: u64, _replica: usize, _now_ns: u64) {
        self.retire(req_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::blocks::tests::spec;
    use crate::fleet::router::tests::{req, views};

    fn cfg_approx() -> KvRouterConfig {
        KvRouterConfig { use_kv_events: false, kv_cache_block_size: 16, ..Default::default() }
    }

    #[test]
    fn cost_is_weighted_prefill_blocks_plus_decode_blocks() {
        let mut r = KvRouter::new(KvRouterConfig { kv_cache_block_size: 16, ..Default::default() }, 0);
        let s = spec(&[(1, 160)]);
        let mut v = views(&[0, 0]);
        v[0].cached_prefix_tokens = Some(128); // 8 of the 10 blocks cached on worker 0
        v[1].cached_prefix_tokens = Some(0);
        r.workers = vec![Worker::default(), Worker::default()];
        let hashes = prompt_block_hashes(&s, 16, usize::MAX, true);
        let l = r.logits(160, &hashes, 16, &v);
        assert_eq!(l, vec![1.0 * 2.0 + 10.0, 1.0 * 10.0 + 10.0]);
        assert_eq!(r.route(&req(0, &s, 0), &v), 0);
        assert!(r.wants_cached_prefix());
    }

    #[test]
    fn same_prefix_follows_the_cache_until_the_load_outweighs_it() {
        let mut r = KvRouter::new(cfg_approx(), 3);
        let v = views(&[0, 0]);
        let mut picks = Vec::new();
        // A 1024-token shared prefix (64 blocks) and a 32-token question (2 blocks); none finishes.
        for i in 0..40u64 {
            let s = spec(&[(9, 1024), (500 + i, 32)]);
            let p = r.route(&req(i, &s, i), &v);
            r.on_first_token(i, p, i);
            picks.push(p);
        }
        // With i requests active on the first worker its cost is 2 prefill blocks (the question)
        // + 64 + 2i distinct active blocks + 2 new ones; the other worker would prefill and hold
        // all 66 blocks: 132. At i = 32 they tie and the smaller tree (the idle worker's) wins.
        let first = picks[0];
        let switch = picks.iter().position(|&p| p != first).expect("the load tips over");
        assert!(picks[..switch].iter().all(|&p| p == first));
        assert_eq!(switch, 32, "{picks:?}");
    }

    #[test]
    fn finishing_frees_the_decode_blocks_and_first_token_the_prefill() {
        let mut r = KvRouter::new(cfg_approx(), 0);
        let v = views(&[0, 0]);
        let s = spec(&[(1, 320)]);
        let p = r.route(&req(1, &s, 0), &v);
        assert_eq!(r.workers[p].prefill_tokens, 320);
        assert_eq!(r.workers[p].active_blocks.len(), 20);
        r.on_first_token(1, p, 5);
        assert_eq!(r.workers[p].prefill_tokens, 0);
        r.on_finish(1, p, 9);
        assert!(r.workers[p].active_blocks.is_empty());
        // The approximate index still holds the blocks until the TTL runs out.
        let again = spec(&[(1, 320)]);
        assert_eq!(r.route(&req(2, &again, 1_000_000_000), &v), p);
        r.on_finish(2, p, 2_000_000_000);
        let late = 200 * 1_000_000_000;
        r.expire(late);
        assert!(r.workers[p].approx.is_empty(), "expired after router_ttl_secs");
    }

    #[test]
    fn temperature_samples_every_worker_reproducibly() {
        let cfg = KvRouterConfig { router_temperature: 1.0, ..cfg_approx() };
        let run = |seed| {
            let mut r = KvRouter::new(cfg.clone(), seed);
            let v = views(&[0, 0, 0]);
            (0..60u64)
                .map(|i| {
                    let s = spec(&[(i, 64)]);
                    let p = r.route(&req(i, &s, i), &v);
                    r.on_finish(i, p, i);
                    p
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(run(5), run(5));
        let picks: BTreeSet<usize> = run(5).into_iter().collect();
        assert_eq!(picks.len(), 3);
    }
}
