//! vLLM production-stack's router (`vllm-router --routing-logic ...`).
//!
//! Follows `src/vllm_router/routers/routing_logic.py` and
//! `src/vllm_router/prefix/hashtrie.py` of `vllm-project/production-stack`;
//! flags from `src/vllm_router/parsers/parser.py` (`--session-key`,
//! `--prefix-min-match-length` default 0, `--request-stats-window` default 60 s).
//!
//! * `roundrobin`: endpoints in a fixed (sorted) order, an index modulo their number.
//! * `session`: requests carrying a session id go where a consistent-hash ring
//!   of the endpoints puts it; requests without one go to the endpoint with
//!   the lowest QPS (requests received over the stats window), an endpoint
//!   that has received none first.
//! * `prefixaware`: a trie of the prompts sent, by chunks (128 characters
//!   there; [`RoutingLogic::PrefixAware::chunk_size`] tokens here), each node
//!   holding the endpoints that were sent that prefix; the longest match among
//!   the available endpoints wins, a random one of the endpoints holding it
//!   (all endpoints when nothing matches); below `prefix_min_match_length`
//!   the lowest-QPS endpoint is taken instead. The prompt is inserted for the
//!   chosen endpoint either way. There is no eviction (the source says so).
//!
//! The ring is servesim's (160 points per endpoint, SplitMix64), not
//! uhashring's MD5 ketama: sessions stick and move as a consistent hash
//! does, but not to the same endpoints as a real deployment's. Random choices
//! draw from the named stream `router.production_stack`.

use std::collections::{BTreeSet, VecDeque};

use rand::Rng as _;

use super::blocks::{prompt_block_hashes, BlockHashMap};
use super::router::{ReplicaView, RouteRequest, Router};
use crate::rng::{mix64, stream, Rng};

/// `--routing-logic` and the flags that go with it.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "routing_logic", rename_all = "lowercase", deny_unknown_fields)]
pub enum RoutingLogic {
    /// Empty, not a unit variant: under `deny_unknown_fields` it then refuses other keys.
    Roundrobin {},
    Session {
        /// `--request-stats-window`, seconds.
        #[serde(default = "default_window")]
        request_stats_window: u64,
    },
    #[serde(rename = "prefixaware")]
    PrefixAware {
        /// `--prefix-min-match-length` (characters there; tokens here).
        #[serde(default)]
        prefix_min_match_length: u32,
        /// The trie's chunk, in tokens (`HashTrie(chunk_size=128)` characters there).
        #[serde(default = "default_chunk")]
        chunk_size: u32,
        /// `--request-stats-window`, seconds.
        #[serde(default = "default_window")]
        request_stats_window: u64,
    },
}

fn default_window() -> u64 {
    60
}
fn default_chunk() -> u32 {
    32
}

const RING_POINTS: u64 = 160;

/// production-stack's router.
#[derive(Clone, Debug)]
pub struct ProductionStack {
    logic: RoutingLogic,
    next: u64,
    /// Arrival times of the requests sent to each endpoint within the window.
    arrivals: Vec<VecDeque<u64>>,
    ever: Vec<bool>,
    /// Consistent-hash ring: (point, endpoint), sorted.
    ring: Vec<(u64, usize)>,
    /// Trie of chained chunk hashes → endpoints that were sent that prefix.
    trie: BlockHashMap<BTreeSet<usize>>,
    rng: Rng,
}

impl ProductionStack {
    pub fn new(logic: RoutingLogic, seed: u64) -> ProductionStack {
        ProductionStack {
            logic,
            next: 0,
            arrivals: Vec::new(),
            ever: Vec::new(),
            ring: Vec::new(),
            trie: BlockHashMap::default(),
            rng: stream(seed, "router.production_stack"),
        }
    }

    fn window_ns(&self) -> u64 {
        match self.logic {
            RoutingLogic::Session { request_stats_window } | RoutingLogic::PrefixAware { request_stats_window, .. } => {
                request_stats_window.saturating_mul(1_000_000_000)
            }
            RoutingLogic::Roundrobin {} => 60_000_000_000,
        }
    }

    /// `_qps_routing`: an endpoint with no requests yet, else the lowest QPS (the first on ties).
    fn qps_routing(&mut self, now_ns: u64, n: usize) -> usize {
        let window = self.window_ns();
        for q in &mut self.arrivals {
            while q.front().is_some_and(|&t| t + window < now_ns) {
                q.pop_front();
            }
        }
        if let Some(i) = (0..n).find(|&i| !self.ever[i]) {
            return i;
        }
        let mut best = 0;
        for i in 1..n {
            if self.arrivals[i].len() < self.arrivals[best].len() {
                best = i;
            }
        }
        best
    }

    fn ring_node(&mut self, session: u64, n: usize) -> usize {
        if self.ring.len() != n * RING_POINTS as usize {
            self.ring =
                (0..n).flat_map(|i| (0..RING_POINTS).map(move |v| (mix64(mix64(i as u64 + 1) ^ v), i))).collect();
            self.ring.sort_unstable();
        }
        let h = mix64(session ^ 0x5e55_1011);
        let k = self.ring.partition_point(|&(p, _)| p < h);
        self.ring[k % self.ring.len()].1
    }

    /// `longest_prefix_match`: matched tokens and the endpoints holding that match.
    fn longest_prefix_match(&self, hashes: &[u64], chunk: u32, n: usize) -> (u32, BTreeSet<usize>) {
        let mut selected: BTreeSet<usize> = (0..n).collect();
        let mut len = 0;
        for h in hashes {
            let Some(eps) = self.trie.get(h) else { break };
            let inter: BTreeSet<usize> = eps.intersection(&selected).copied().collect();
            if inter.is_empty() {
                break;
            }
            len += chunk;
            selected = inter;
        }
        (len, selected)
    }
}

impl Router for ProductionStack {
    fn name(&self) -> &'static str {
        match self.logic {
            RoutingLogic::Roundrobin {} => "roundrobin",
            RoutingLogic::Session { .. } => "session",
            RoutingLogic::PrefixAware { .. } => "prefixaware",
        }
    }

    fn route(&mut self, req: &RouteRequest<'_>, replicas: &[ReplicaView]) -> usize {
        let n = replicas.len();
        if self.arrivals.len() < n {
            self.arrivals.resize(n, VecDeque::new());
            self.ever.resize(n, false);
        }
        let chosen = match self.logic.clone() {
            RoutingLogic::Roundrobin {} => {
                let i = (self.next % n as u64) as usize;
                self.next += 1;
                i
            }
            RoutingLogic::Session { .. } => match req.session {
                Some(s) => self.ring_node(s, n),
                None => self.qps_routing(req.now_ns, n),
            },
            RoutingLogic::PrefixAware { prefix_min_match_length, chunk_size, .. } => {
                let chunk = chunk_size.max(1);
                let hashes = prompt_block_hashes(req.spec, chunk, usize::MAX, true);
                let (len, eps) = self.longest_prefix_match(&hashes, chunk, n);
                let chosen = if len < prefix_min_match_length {
                    self.qps_routing(req.now_ns, n)
                } else {
                    let v: Vec<usize> = eps.into_iter().collect();
                    v[self.rng.random_range(0..v.len())]
                };
                for h in hashes {
                    self.trie.entry(h).or_default().insert(chosen);
                }
                chosen
            }
        };
        self.arrivals[chosen].push_back(req.now_ns);
        self.ever[chosen] = true;
        chosen
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::blocks::tests::spec;
    use crate::fleet::router::tests::{req, views};

    #[test]
    fn prefixaware_sends_a_shared_prefix_to_the_endpoint_that_has_it() {
        let logic = RoutingLogic::PrefixAware { prefix_min_match_length: 0, chunk_size: 32, request_stats_window: 60 };
        let mut r = ProductionStack::new(logic, 4);
        let v = views(&[0, 0, 0, 0]);
        let first = r.route(&req(0, &spec(&[(1, 512), (100, 40)]), 0), &v);
        for i in 1..20u64 {
            let p = r.route(&req(i, &spec(&[(1, 512), (100 + i, 40)]), i), &v);
            assert_eq!(p, first, "request {i}");
        }
        // Unrelated prompts spread at random over all endpoints.
        let spread: BTreeSet<usize> =
            (0..40u64).map(|i| r.route(&req(100 + i, &spec(&[(9000 + i, 64)]), 0), &v)).collect();
        assert_eq!(spread.len(), 4);
    }

    #[test]
    fn below_the_min_match_length_it_takes_the_lowest_qps() {
        let logic =
            RoutingLogic::PrefixAware { prefix_min_match_length: 256, chunk_size: 32, request_stats_window: 60 };
        let mut r = ProductionStack::new(logic, 0);
        let v = views(&[0, 0, 0]);
        // Nothing matches: endpoints with no requests yet first, in order.
        assert_eq!(r.route(&req(0, &spec(&[(1, 128)]), 0), &v), 0);
        assert_eq!(r.route(&req(1, &spec(&[(2, 128)]), 0), &v), 1);
        assert_eq!(r.route(&req(2, &spec(&[(3, 128)]), 0), &v), 2);
        // 128 tokens match endpoint 0, under 256: lowest QPS, the first of the tied.
        assert_eq!(r.route(&req(3, &spec(&[(1, 128), (4, 128)]), 0), &v), 0);
        assert_eq!(r.route(&req(4, &spec(&[(5, 128)]), 0), &v), 1);
        // 256 matched on endpoint 0 (request 3's prompt): it goes there.
        assert_eq!(r.route(&req(5, &spec(&[(1, 128), (4, 128), (6, 8)]), 0), &v), 0);
    }

    #[test]
    fn sessions_stick_and_requests_without_one_go_by_qps() {
        let mut r = ProductionStack::new(RoutingLogic::Session { request_stats_window: 60 }, 0);
        let v = views(&[0, 0, 0]);
        let s = spec(&[(1, 16)]);
        let mut by_session = Vec::new();
        for sess in 0..30u64 {
            let a = r.route(&RouteRequest { id: sess, spec: &s, now_ns: 0, session: Some(sess) }, &v);
            let b = r.route(&RouteRequest { id: 100 + sess, spec: &s, now_ns: 1, session: Some(sess) }, &v);
            assert_eq!(a, b);
            by_session.push(a);
        }
        let used: BTreeSet<usize> = by_session.iter().copied().collect();
        assert_eq!(used.len(), 3, "the ring spreads sessions");
        let mut q = ProductionStack::new(RoutingLogic::Session { request_stats_window: 60 }, 0);
        let picks: Vec<usize> = (0..6).map(|i| q.route(&req(i, &s, 0), &v)).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
    }

    #[test]
    fn roundrobin_cycles() {
        let mut r = ProductionStack::new(RoutingLogic::Roundrobin {}, 0);
        let s = spec(&[(1, 16)]);
        let picks: Vec<usize> = (0..4).map(|i| r.route(&req(i, &s, 0), &views(&[0, 0]))).collect();
        assert_eq!(picks, [0, 1, 0, 1]);
    }
}
