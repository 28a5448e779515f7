//! SGLang's router, `--policy cache_aware`, as sgl-router decides.
//!
//! Follows `sgl-router/src/policies/cache_aware.rs` (the policy) and
//! `sgl-router/src/policies/tree.rs` (the approximate radix tree), defaults
//! from the router's command line (`cache_threshold` 0.3,
//! `balance_abs_threshold` 64, `balance_rel_threshold` 1.5,
//! `eviction_interval` 120 s, `max_tree_size` 2^26).
//!
//! * The router keeps, per worker, an approximate tree of the prompts it has
//!   sent there (not the engine's real cache).
//! * Load is each worker's count of requests routed and not finished. The
//!   load is *imbalanced* when `max − min > balance_abs_threshold` and
//!   `max > min × balance_rel_threshold`; then the request goes to the least
//!   loaded worker (the first on ties), and its prompt is still recorded in
//!   that worker's tree.
//! * Otherwise the longest prefix match over the trees decides: if
//!   `matched / prompt > cache_threshold` the worker with that match wins;
//!   else the worker whose tree is smallest (most room). The prompt is then
//!   inserted in the chosen worker's tree.
//! * Every `eviction_interval_secs` each worker's tree is cut back to
//!   `max_tree_size` by removing its least recently used leaves.
//!
//! Differences, by construction: the real tree holds characters of text; this
//! one holds tokens in blocks of [`CacheAwareConfig::tree_block_size`] tokens
//! (servesim's own parameter: a match is counted in whole blocks, and sizes
//! are in tokens, not characters). Where the real tree picks among tied
//! workers by hash-map order, this one takes the lowest index. Time is the
//! simulated clock.

use std::collections::BTreeSet;

use super::blocks::{prompt_block_hashes, BlockHashMap};
use super::router::{argmin_by, ReplicaView, RouteRequest, Router};

/// `--policy cache_aware` parameters, named as sgl-router names them.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheAwareConfig {
    /// Minimum prefix match ratio for routing by match (`--cache-threshold`).
    pub cache_threshold: f64,
    /// Load difference above which the load may be imbalanced (`--balance-abs-threshold`).
    pub balance_abs_threshold: u32,
    /// Load ratio above which the load may be imbalanced (`--balance-rel-threshold`).
    pub balance_rel_threshold: f64,
    /// Seconds between evictions of the trees (`--eviction-interval`); 0 = never.
    pub eviction_interval_secs: u64,
    /// Size each worker's tree is cut back to at eviction (`--max-tree-size`;
    /// characters there, tokens here).
    pub max_tree_size: u64,
    /// servesim's granularity of the tree, in tokens (the real tree matches
    /// character by character).
    pub tree_block_size: u32,
}

impl Default for CacheAwareConfig {
    fn default() -> Self {
        CacheAwareConfig {
            cache_threshold: 0.3,
            balance_abs_threshold: 64,
            balance_rel_threshold: 1.5,
            eviction_interval_secs: 120,
            max_tree_size: 1 << 26,
            tree_block_size: 16,
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Node {
    parent: Option<u64>,
    children: u32,
    /// (time, sequence) of the last access: the LRU order. An insert refreshes the whole
    /// path it walks, so a node's access time is the latest over its subtree; it is kept
    /// lazily: an insert writes only its path's end (and the node it grows from), and a
    /// node takes the maximum of its children's as they are evicted. It is read only once
    /// the node is a leaf, when every child has passed its time up: the same value as
    /// refreshing every node of the path, and the same eviction order.
    last: (u64, u64),
}

/// One worker's approximate tree: nodes named by their chained block hash
/// (a node's hash names its whole prefix), leaves in LRU order.
#[derive(Clone, Debug, Default)]
pub struct ApproxTree {
    nodes: BlockHashMap<Node>,
    leaves: BTreeSet<((u64, u64), u64)>,
    block: u64,
    size: u64,
}

impl ApproxTree {
    fn new(block: u32) -> ApproxTree {
        ApproxTree { block: u64::from(block.max(1)), ..Default::default() }
    }

    /// Tokens held (sgl-router's `tenant_char_count`).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Leading blocks of `hashes` present.
    ///
    /// The tree is closed under prefixes: a node goes in with its whole path (the hashes are
    /// chained, so a hash names its whole prefix), and only leaves are evicted, so a node's
    /// parent outlives it. Along `hashes` the present ones are therefore a leading run, and
    /// its length is found by bisection: O(log n) lookups instead of one per matched block
    /// (the router asks every worker's tree for every request).
    pub fn match_len(&self, hashes: &[u64]) -> usize {
        hashes.partition_point(|h| self.nodes.contains_key(h))
    }

    /// Records the prompt, refreshing the access time of its whole path (lazily: see
    /// [`Node::last`]). The present part of the path is found by [`ApproxTree::match_len`];
    /// only its end and the new nodes below it are written. Returns how many of `hashes`
    /// were already present (the new ones are the rest).
    fn insert(&mut self, hashes: &[u64], at: (u64, u64)) -> usize {
        let Some(&end) = hashes.last() else { return 0 };
        let k = self.match_len(hashes);
        if k == hashes.len() {
            let node = self.nodes.get_mut(&end).expect("present");
            if node.children == 0 {
                self.leaves.remove(&(node.last, end));
                self.leaves.insert((at, end));
            }
            node.last = at;
            return k;
        }
        let mut parent = k.checked_sub(1).map(|i| hashes[i]);
        if let Some(p) = parent {
            let pn = self.nodes.get_mut(&p).expect("parent present");
            if pn.children == 0 {
                self.leaves.remove(&(pn.last, p));
            }
            pn.children += 1;
            pn.last = at;
        }
        for (j, &h) in hashes.iter().enumerate().skip(k) {
            let children = u32::from(j + 1 < hashes.len());
            self.nodes.insert(h, Node { parent, children, last: at });
            self.size += self.block;
            parent = Some(h);
        }
        self.leaves.insert((at, end));
        k
    }

    /// Whether the tree holds the block hash `h`.
    pub fn holds(&self, h: u64) -> bool {
        self.nodes.contains_key(&h)
    }

    /// Removes least recently used leaves until the tree holds at most `max` tokens,
    /// telling `removed` each hash that goes.
    fn evict_to(&mut self, max: u64, mut removed: impl FnMut(u64)) {
        while self.size > max {
            let Some(&(last, h)) = self.leaves.iter().next() else { break };
            self.leaves.remove(&(last, h));
            let node = self.nodes.remove(&h).expect("leaf present");
            removed(h);
            self.size -= self.block;
            if let Some(p) = node.parent {
                let pn = self.nodes.get_mut(&p).expect("parent present");
                pn.children -= 1;
                // The parent's access time includes its subtree's (see `Node::last`).
                pn.last = pn.last.max(node.last);
                if pn.children == 0 {
                    self.leaves.insert((pn.last, p));
                }
            }
        }
    }
}

/// SGLang's cache-aware router.
#[derive(Clone, Debug)]
pub struct CacheAware {
    cfg: CacheAwareConfig,
    trees: Vec<ApproxTree>,
    /// For each block hash, how many trees hold it: their union, which is closed under
    /// prefixes as each tree is, so the longest match over all trees is one bisection here
    /// (not one per tree).
    held: BlockHashMap<u32>,
    seq: u64,
    next_eviction_ns: u64,
}

impl CacheAware {
    pub fn new(cfg: CacheAwareConfig) -> CacheAware {
        let next_eviction_ns = cfg.eviction_interval_secs.saturating_mul(1_000_000_000);
        CacheAware { cfg, trees: Vec::new(), held: BlockHashMap::default(), seq: 0, next_eviction_ns }
    }

    /// The approximate tree the router keeps for `worker`.
    pub fn tree(&self, worker: usize) -> Option<&ApproxTree> {
        self.trees.get(worker)
    }

    fn evict_due(&mut self, now_ns: u64) {
        if self.cfg.eviction_interval_secs == 0 {
            return;
        }
        let interval = self.cfg.eviction_interval_secs.saturating_mul(1_000_000_000);
        if now_ns >= self.next_eviction_ns {
            let held = &mut self.held;
            for t in &mut self.trees {
                t.evict_to(self.cfg.max_tree_size, |h| {
                    let c = held.get_mut(&h).expect("held by this tree");
                    *c -= 1;
                    if *c == 0 {
                        held.remove(&h);
                    }
                });
            }
            // The eviction thread wakes every interval; missed wake-ups do nothing more.
            let missed = (now_ns - self.next_eviction_ns) / interval;
            self.next_eviction_ns += (missed + 1) * interval;
        }
    }

    /// The worker with the longest prefix match of `hashes` (the first of them on ties; worker
    /// 0 when nothing matches) and that match in blocks, over workers `0..n`: the longest
    /// match over all trees by bisection on their union, then the first tree that holds its
    /// last block (a tree holding it holds the whole match). The same answer as matching
    /// every tree and taking the first maximum, which it falls back to if trees beyond `n`
    /// exist.
    fn longest_match(&self, hashes: &[u64], n: usize) -> (usize, usize) {
        if self.trees.len() != n {
            let matches: Vec<usize> = (0..n).map(|i| self.trees[i].match_len(hashes)).collect();
            let best = argmin_by(n, |i| std::cmp::Reverse(matches[i]));
            return (best, matches[best]);
        }
        let longest = hashes.partition_point(|h| self.held.contains_key(h));
        if longest == 0 {
            return (0, 0);
        }
        let last = hashes[longest - 1];
        let best = (0..n).find(|&i| self.trees[i].holds(last)).expect("a tree holds every held hash");
        (best, longest)
    }

    /// Whether the load is imbalanced enough to route by load alone.
    pub fn is_imbalanced(&self, replicas: &[ReplicaView]) -> bool {
        let max = replicas.iter().map(|r| r.outstanding).max().unwrap_or(0);
        let min = replicas.iter().map(|r| r.outstanding).min().unwrap_or(0);
        max.saturating_sub(min) > self.cfg.balance_abs_threshold
            && f64::from(max) > f64::from(min) * self.cfg.balance_rel_threshold
    }
}

impl Router for CacheAware {
    fn name(&self) -> &'static str {
        "cache_aware"
    }

    fn route(&mut self, req: &RouteRequest<'_>, replicas: &[ReplicaView]) -> usize {
        let n = replicas.len();
        while self.trees.len() < n {
            self.trees.push(ApproxTree::new(self.cfg.tree_block_size));
        }
        self.evict_due(req.now_ns);
        let hashes = prompt_block_hashes(req.spec, self.cfg.tree_block_size, usize::MAX, false);
        let chosen = if self.is_imbalanced(replicas) {
            argmin_by(n, |i| replicas[i].outstanding)
        } else {
            let (best, matched) = self.longest_match(&hashes, n);
            let matched_tokens = matched as f64 * f64::from(self.cfg.tree_block_size.max(1));
            let rate = if req.spec.prompt_len == 0 { 0.0 } else { matched_tokens / f64::from(req.spec.prompt_len) };
            if rate > self.cfg.cache_threshold {
                best
            } else {
                argmin_by(n, |i| self.trees[i].size())
            }
        };
        self.seq += 1;
        let k = self.trees[chosen].insert(&hashes, (req.now_ns, self.seq));
        for &h in &hashes[k..] {
            *self.held.entry(h).or_insert(0) += 1;
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
    fn same_prefix_sticks_to_one_worker_until_the_balance_thresholds_trip() {
        let mut r = CacheAware::new(CacheAwareConfig::default());
        let mut load = vec![0u32; 3];
        let mut picks = Vec::new();
        // 200 requests with one 1024-token system prompt and distinct 64-token questions, none finishing.
        for i in 0..200u64 {
            let s = spec(&[(7, 1024), (1000 + i, 64)]);
            let p = r.route(&req(i, &s, i * 1_000_000), &views(&load));
            load[p] += 1;
            picks.push(p);
        }
        // The first goes to the smallest tree (all empty: worker 0); the next ones match it.
        // They stay there until worker 0 has 65 more outstanding than the idle ones (and 65 > 1.5 × 0).
        assert!(picks[..65].iter().all(|&p| p == 0), "{:?}", &picks[..70]);
        assert_eq!(picks[65], 1, "imbalanced: shortest queue, the first of the idle workers");
        assert_eq!(picks[66], 2);
        // Once balanced again (0: 65, 1: 1, 2: 1 → max − min = 64, not > 64) the prefix wins again,
        // and the tie between the matching trees goes to the lowest index.
        assert_eq!(picks[67], 0);
        // Worker 1 and 2 now hold the prefix too: their trees are recorded even in imbalanced mode.
        let h = prompt_block_hashes(&spec(&[(7, 1024)]), 16, usize::MAX, false);
        assert_eq!(r.tree(1).unwrap().match_len(&h), 64);
    }

    #[test]
    fn a_low_match_goes_to_the_smallest_tree() {
        let mut r = CacheAware::new(CacheAwareConfig::default());
        let v = views(&[0, 0, 0]);
        let big = spec(&[(1, 4096)]);
        assert_eq!(r.route(&req(0, &big, 0), &v), 0);
        let mid = spec(&[(2, 1024)]);
        assert_eq!(r.route(&req(1, &mid, 0), &v), 1);
        // Shares 10% of its tokens with worker 0's prompt: below cache_threshold 0.3.
        let low = spec(&[(1, 160), (3, 1440)]);
        assert_eq!(r.route(&req(2, &low, 0), &v), 2, "worker 2's tree is empty, the smallest");
        // Shares 50%: above the threshold, to worker 0.
        let high = spec(&[(1, 2048), (4, 2048)]);
        assert_eq!(r.route(&req(3, &high, 0), &v), 0);
    }

    /// The bisection in `match_len` rests on the tree being closed under prefixes: checked
    /// against the block-by-block walk over random prompts sharing prefixes, with evictions.
    #[test]
    fn match_len_by_bisection_equals_the_block_by_block_walk() {
        use crate::fleet::blocks::leading_matches;
        use crate::rng::mix64;
        let mut t = ApproxTree::new(16);
        let prompt = |x: u64| {
            // Up to three shared levels (a few keys each), then a private tail.
            let segs: Vec<(u64, u32)> = (0..3u64)
                .take(1 + (x % 3) as usize)
                .map(|l| (100 * l + mix64(x >> (8 * l)) % 4, 16 * (1 + (mix64(x ^ l) % 6) as u32)))
                .chain([(1_000_000 + x, 16 * (mix64(x) % 5) as u32 + 7)])
                .filter(|s| s.1 > 0)
                .collect();
            prompt_block_hashes(&spec(&segs), 16, usize::MAX, false)
        };
        let mut checked = 0;
        for i in 0..3000u64 {
            let x = mix64(i);
            let h = prompt(x);
            let probe = prompt(mix64(x ^ 0xabc));
            for q in [&h, &probe] {
                assert_eq!(t.match_len(q), leading_matches(q, |k| t.nodes.contains_key(&k)));
                checked += usize::from(t.match_len(q) > 0);
            }
            t.insert(&h, (i, i));
            if i % 97 == 0 {
                t.evict_to(t.size() / 2, |_| {});
            }
        }
        assert!(checked > 1000, "prefixes were shared: {checked}");
    }

    /// The shared count of holders against matching every tree: the same worker and match,
    /// over random prompts routed to 5 workers with evictions every few seconds.
    #[test]
    fn longest_match_over_the_union_equals_matching_every_tree() {
        use crate::rng::mix64;
        let cfg = CacheAwareConfig { max_tree_size: 3000, eviction_interval_secs: 2, ..Default::default() };
        let mut r = CacheAware::new(cfg);
        let load = vec![0u32; 5];
        let prompt = |x: u64| {
            let segs: Vec<(u64, u32)> = (0..3u64)
                .take(1 + (x % 3) as usize)
                .map(|l| (10 * l + mix64(x >> (8 * l)) % 3, 16 * (1 + (mix64(x ^ l) % 5) as u32) + 3))
                .collect();
            spec(&segs)
        };
        let (mut hits, mut ties) = (0, 0);
        for i in 0..3000u64 {
            let p = prompt(mix64(i));
            // Routes with the load balanced, so by match (the views' loads are all 0).
            r.route(&req(i, &p, i * 100_000_000), &views(&load));
            let q = prompt_block_hashes(&prompt(mix64(i ^ 0x55)), 16, usize::MAX, false);
            let matches: Vec<usize> = (0..5).map(|w| r.trees[w].match_len(&q)).collect();
            let best = argmin_by(5, |w| std::cmp::Reverse(matches[w]));
            assert_eq!(r.longest_match(&q, 5), (best, matches[best]), "after {i}: {matches:?}");
            hits += usize::from(matches[best] > 0);
            ties += usize::from(matches.iter().filter(|&&m| m == matches[best]).count() > 1 && matches[best] > 0);
        }
        assert!(hits > 1000 && ties > 100, "{hits} matches, {ties} ties");
        let total: usize = r.trees.iter().map(|t| t.nodes.len()).sum();
        assert_eq!(r.held.values().map(|&c| c as usize).sum::<usize>(), total, "the counts are the trees'");
    }

    /// The lazy access times against the tree that refreshes every node of the path at each
    /// insert (sgl-router's `insert` walk): the same nodes, sizes and leaves in the same LRU
    /// order after every insert and eviction.
    #[test]
    fn lazy_access_times_evict_as_refreshing_the_whole_path_does() {
        use crate::rng::mix64;
        #[derive(Default)]
        struct Eager {
            nodes: std::collections::BTreeMap<u64, Node>,
            leaves: BTreeSet<((u64, u64), u64)>,
            size: u64,
        }
        impl Eager {
            fn insert(&mut self, hashes: &[u64], at: (u64, u64)) {
                let mut parent: Option<u64> = None;
                for &h in hashes {
                    if let Some(node) = self.nodes.get_mut(&h) {
                        if node.children == 0 {
                            self.leaves.remove(&(node.last, h));
                            self.leaves.insert((at, h));
                        }
                        node.last = at;
                    } else {
                        if let Some(p) = parent {
                            let pn = self.nodes.get_mut(&p).unwrap();
                            if pn.children == 0 {
                                self.leaves.remove(&(pn.last, p));
                            }
                            pn.children += 1;
                        }
                        self.nodes.insert(h, Node { parent, children: 0, last: at });
                        self.leaves.insert((at, h));
                        self.size += 16;
                    }
                    parent = Some(h);
                }
            }
            fn evict_to(&mut self, max: u64) {
                while self.size > max {
                    let Some(&(last, h)) = self.leaves.iter().next() else { break };
                    self.leaves.remove(&(last, h));
                    let node = self.nodes.remove(&h).unwrap();
                    self.size -= 16;
                    if let Some(p) = node.parent {
                        let pn = self.nodes.get_mut(&p).unwrap();
                        pn.children -= 1;
                        if pn.children == 0 {
                            self.leaves.insert((pn.last, p));
                        }
                    }
                }
            }
        }
        let mut lazy = ApproxTree::new(16);
        let mut eager = Eager::default();
        let mut evictions = 0;
        for i in 0..4000u64 {
            let x = mix64(i);
            let segs: Vec<(u64, u32)> = (0..4u64)
                .take(1 + (x % 4) as usize)
                .map(|l| (10 * l + mix64(x >> (8 * l)) % 3, 16 * (1 + (mix64(x ^ l) % 5) as u32)))
                .collect();
            let h = prompt_block_hashes(&spec(&segs), 16, usize::MAX, false);
            lazy.insert(&h, (i / 3, i));
            eager.insert(&h, (i / 3, i));
            if x.is_multiple_of(7) {
                let max = lazy.size() * (1 + x % 3) / 4;
                lazy.evict_to(max, |_| {});
                eager.evict_to(max);
                evictions += 1;
            }
            assert_eq!(lazy.size(), eager.size);
            assert_eq!(lazy.leaves, eager.leaves, "after step {i}");
            let mut keys: Vec<u64> = lazy.nodes.keys().copied().collect();
            keys.sort_unstable();
            assert_eq!(keys, eager.nodes.keys().copied().collect::<Vec<_>>());
        }
        assert!(evictions > 300 && lazy.size() > 0);
    }

    #[test]
    fn eviction_cuts_each_tree_back_to_max_tree_size_lru_first() {
        let cfg = CacheAwareConfig { max_tree_size: 256, eviction_interval_secs: 10, ..Default::default() };
        let mut r = CacheAware::new(cfg);
        let v = views(&[0]);
        let old = spec(&[(1, 256)]);
        let new = spec(&[(2, 256)]);
        r.route(&req(0, &old, 1_000_000_000), &v);
        r.route(&req(1, &new, 2_000_000_000), &v);
        assert_eq!(r.tree(0).unwrap().size(), 512);
        // At t = 10 s the eviction runs before routing: the older prompt goes, leaf by leaf.
        let other = spec(&[(3, 16)]);
        r.route(&req(2, &other, 10_000_000_000), &v);
        let t = r.tree(0).unwrap();
        assert_eq!(t.match_len(&prompt_block_hashes(&old, 16, usize::MAX, false)), 0);
        assert_eq!(t.match_len(&prompt_block_hashes(&new, 16, usize::MAX, false)), 16);
        assert_eq!(t.size(), 256 + 16);
    }
}
