//! The [`Router`] trait and the load-only policies.
//!
//! A router sees, for each replica, what a deployed router can see
//! ([`ReplicaView`]: its own count of outstanding requests, the engine's
//! running and waiting queues and KV usage as `/metrics` shows them, and, for
//! routers fed by KV events, how much of this prompt the replica has cached),
//! plus the request itself ([`RouteRequest`]), and answers a replica index.
//! Prefix-aware routers keep their own record of what they sent where; the
//! loop tells them when a request produced its first token and when it
//! finished.
//!
//! Policies, each following a deployed router (sources and defaults in
//! `docs/routers.md`):
//!
//! * [`RoundRobin`]: sgl-router `src/policies/round_robin.rs`, production-stack
//!   `RoundRobinRouter` (`src/vllm_router/routers/routing_logic.py`).
//! * [`LeastOutstanding`]: the shortest-queue choice of sgl-router
//!   (`src/policies/cache_aware.rs`, its fallback when load is imbalanced).
//! * [`PowerOfTwo`]: sgl-router `src/policies/power_of_two.rs`.
//! * [`KvUsage`]: llm-d's `kv-cache-utilization-scorer` alone under the
//!   `max-score-picker` (`pkg/epp/framework/plugins/scheduling/scorer/kvcacheutilization/`).
//! * [`super::sglang::CacheAware`], [`super::llmd::InferenceScheduler`],
//!   [`super::dynamo::KvRouter`], [`super::production_stack::ProductionStack`]:
//!   the prefix-aware routers as deployed.

use rand::Rng as _;

use super::dynamo::{KvRouter, KvRouterConfig};
use super::llmd::{InferenceScheduler, LlmdConfig};
use super::production_stack::{ProductionStack, RoutingLogic};
use super::sglang::{CacheAware, CacheAwareConfig};
use crate::request::RequestSpec;
use crate::rng::{stream, Rng};

/// What a router sees of one replica when a request arrives.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ReplicaView {
    /// Requests routed to this replica and not yet finished (the router's own
    /// count: sgl-router's worker `load`, production-stack's in-flight count).
    pub outstanding: u32,
    /// Requests the engine is running (`vllm:num_requests_running`).
    pub running: u32,
    /// Requests waiting in the engine's queue (`vllm:num_requests_waiting`).
    pub waiting: u32,
    /// KV cache usage in `[0, 1]` (`vllm:kv_cache_usage_perc`).
    pub kv_usage: f64,
    /// The engine's KV block (page) size in tokens; 0 if unknown.
    pub kv_block_size: u32,
    /// The engine's KV pool in blocks; 0 if unknown.
    pub kv_num_blocks: u64,
    /// Prompt tokens of this request the replica holds in its prefix cache,
    /// when the loop answers it (only for routers whose
    /// [`Router::wants_cached_prefix`] is true: Dynamo with KV events). `None`
    /// when not asked.
    pub cached_prefix_tokens: Option<u32>,
}

/// The request being routed.
#[derive(Clone, Copy, Debug)]
pub struct RouteRequest<'a> {
    /// Unique within the run; the same id comes back in
    /// [`Router::on_first_token`] and [`Router::on_finish`].
    pub id: u64,
    pub spec: &'a RequestSpec,
    /// Simulated time of arrival at the router.
    pub now_ns: u64,
    /// Session (conversation) id, for session-affinity routing.
    pub session: Option<u64>,
}

/// A routing policy. Deterministic given its construction (seed included)
/// and the sequence of calls.
pub trait Router {
    /// The policy's name as the deployed router spells it.
    fn name(&self) -> &'static str;
    /// Picks the replica for `req`; `replicas` is never empty and is in
    /// replica order. The returned index is `< replicas.len()`.
    fn route(&mut self, req: &RouteRequest<'_>, replicas: &[ReplicaView]) -> usize;
    /// The request's first token came out (its prefill is done).
    fn on_first_token(&mut self, _req_id: u64, _replica: usize, _now_ns: u64) {}
    /// The request finished on `replica` (completed or aborted).
    fn on_finish(&mut self, _req_id: u64, _replica: usize, _now_ns: u64) {}
    /// Whether the loop should fill [`ReplicaView::cached_prefix_tokens`]
    /// (a lookup in each engine's prefix cache, as KV events let a router do).
    fn wants_cached_prefix(&self) -> bool {
        false
    }
}

/// Index of the smallest `key` over `0..n`, first on ties.
pub(crate) fn argmin_by<K: PartialOrd>(n: usize, mut key: impl FnMut(usize) -> K) -> usize {
    let mut best = 0;
    let mut best_key = key(0);
    for i in 1..n {
        let k = key(i);
        if k < best_key {
            best = i;
            best_key = k;
        }
    }
    best
}

/// Round-robin: the `k`-th request goes to replica `k mod n`.
///
/// sgl-router `src/policies/round_robin.rs` (an atomic counter modulo the
/// healthy workers); production-stack `RoundRobinRouter` (an index per
/// endpoint set, over the URLs sorted).
#[derive(Clone, Debug, Default)]
pub struct RoundRobin {
    next: u64,
}

impl Router for RoundRobin {
    fn name(&self) -> &'static str {
        "round_robin"
    }
    fn route(&mut self, _req: &RouteRequest<'_>, replicas: &[ReplicaView]) -> usize {
        let i = (self.next % replicas.len() as u64) as usize;
        self.next += 1;
        i
    }
}

/// Least outstanding requests (shortest queue): the replica with the fewest
/// requests routed and not finished, the first of them on ties.
///
/// sgl-router `src/policies/cache_aware.rs`: what the cache-aware policy does
/// when load is imbalanced (`min_by_key` over the workers' load, the first
/// minimum).
#[derive(Clone, Debug, Default)]
pub struct LeastOutstanding;

impl Router for LeastOutstanding {
    fn name(&self) -> &'static str {
        "least_outstanding"
    }
    fn route(&mut self, _req: &RouteRequest<'_>, replicas: &[ReplicaView]) -> usize {
        argmin_by(replicas.len(), |i| replicas[i].outstanding)
    }
}

/// Power of two choices: two distinct replicas drawn at random, the one with
/// fewer outstanding requests wins, the first drawn on ties.
///
/// sgl-router `src/policies/power_of_two.rs` (`choose_multiple(2)`, then
/// `load(w1) <= load(w2)`). The draws come from the named stream `router.power_of_two`.
///
/// An idealised balancer: it compares the router's live count of requests sent and not
/// finished. The deployed policy (`PowerOfTwoPolicy::get_worker_load`) compares `cached_loads`
/// first, which `LoadMonitor::monitor_loop` (`src/core/worker_manager.rs`) refreshes once an
/// interval with each worker's `/get_load` (SGLang's, the sum of `num_tokens` over its DP
/// ranks; -1 for a worker that does not answer, such as vLLM, which has no such endpoint),
/// falling back to the worker's `load()` only for a worker missing from that map; and the
/// regular (non-PD) router raises `load()` only for `cache_aware`
/// (`src/routers/http/router.rs`, `route_typed_request`). So behind SGLang workers the real
/// choice follows a snapshot up to an interval old, and behind vLLM workers every load reads
/// -1 and the first drawn wins (a uniformly random pick). `docs/routers.md` says the same.
#[derive(Clone, Debug)]
pub struct PowerOfTwo {
    rng: Rng,
}

impl PowerOfTwo {
    pub fn new(seed: u64) -> PowerOfTwo {
        PowerOfTwo { rng: stream(seed, "router.power_of_two") }
    }
}

impl Router for PowerOfTwo {
    fn name(&self) -> &'static str {
        "power_of_two"
    }
    fn route(&mut self, _req: &RouteRequest<'_>, replicas: &[ReplicaView]) -> usize {
        let n = replicas.len();
        if n == 1 {
            return 0;
        }
        let a = self.rng.random_range(0..n);
        let mut b = self.rng.random_range(0..n - 1);
        if b >= a {
            b += 1;
        }
        if replicas[a].outstanding <= replicas[b].outstanding {
            a
        } else {
            b
        }
    }
}

/// KV-usage aware: the replica with the lowest KV cache usage, ties broken at
/// random.
///
/// llm-d `kv-cache-utilization-scorer` (score `1 − KVCacheUsagePercent`) alone
/// under the `max-score-picker`, which shuffles the endpoints before a stable
/// sort so that ties fall at random. The shuffle draws from the named stream
/// `router.kv_usage`.
#[derive(Clone, Debug)]
pub struct KvUsage {
    rng: Rng,
}

impl KvUsage {
    pub fn new(seed: u64) -> KvUsage {
        KvUsage { rng: stream(seed, "router.kv_usage") }
    }
}

impl Router for KvUsage {
    fn name(&self) -> &'static str {
        "kv_usage"
    }
    fn route(&mut self, _req: &RouteRequest<'_>, replicas: &[ReplicaView]) -> usize {
        let scores: Vec<f64> = replicas.iter().map(|r| 1.0 - r.kv_usage).collect();
        max_score_pick(&scores, &mut self.rng)
    }
}

/// llm-d's `max-score-picker`: the highest score, a uniformly random one of
/// the tied highest (the real picker shuffles, then sorts stably).
pub(crate) fn max_score_pick(scores: &[f64], rng: &mut Rng) -> usize {
    let best = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let tied: Vec<usize> = (0..scores.len()).filter(|&i| scores[i] == best).collect();
    match tied.len() {
        0 => 0,
        1 => tied[0],
        n => tied[rng.random_range(0..n)],
    }
}

/// A router as a scenario names it: `{"policy": "cache_aware", "cache_threshold": 0.3, ...}`.
/// Parameter names are the deployed routers' flags in snake case.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "policy", rename_all = "snake_case", deny_unknown_fields)]
pub enum RouterSpec {
    // The parameterless policies are empty struct variants, not unit ones: serde lets a unit
    // variant of an internally tagged enum take any other key unseen (`"polcy": ...`), a
    // struct variant refuses it under `deny_unknown_fields`.
    RoundRobin {},
    LeastOutstanding {},
    PowerOfTwo {},
    KvUsage {},
    /// SGLang's router, `--policy cache_aware`.
    CacheAware(CacheAwareConfig),
    /// llm-d's inference scheduler: prefix-cache, queue and KV-utilisation scorers.
    LlmdInferenceScheduler(LlmdConfig),
    /// NVIDIA Dynamo's KV router, `--router-mode kv`.
    DynamoKv(KvRouterConfig),
    /// vLLM production-stack's router, `--routing-logic`.
    ProductionStack(RoutingLogic),
    /// vLLM's data-parallel balancer inside one engine (`data_parallel_size`).
    VllmDataParallel {},
    /// SGLang's `DataParallelController` inside one engine (`dp_size`).
    SglangDataParallel {
        #[serde(default)]
        load_balance_method: super::dp::LoadBalanceMethod,
    },
}

impl RouterSpec {
    /// Whether, with prefill and decode pools, the router counts a request against its prefill
    /// worker until the client's stream ends rather than until the prefill is done: sgl-router's
    /// PD router (`sgl-router/src/routers/http/pd_router.rs`) raises the load of both workers of
    /// the pair and lowers both when the decode stream ends (`create_streaming_response`: the
    /// spawned task decrements the prefill and the decode worker after `data: [DONE]`; without
    /// streaming, `WorkerLoadGuard::new_multi(vec![prefill, decode])` drops at the response).
    /// Its policies are `round_robin`, `power_of_two`, `cache_aware` and the shortest-queue
    /// choice `least_outstanding` stands for. The other routers keep their own accounting.
    pub fn holds_prefill_load_to_stream_end(&self) -> bool {
        matches!(
            self,
            RouterSpec::RoundRobin {}
                | RouterSpec::LeastOutstanding {}
                | RouterSpec::PowerOfTwo {}
                | RouterSpec::CacheAware(_)
        )
    }

    /// The router, its random streams derived from `seed`.
    pub fn build(&self, seed: u64) -> Box<dyn Router> {
        match self {
            RouterSpec::RoundRobin {} => Box::new(RoundRobin::default()),
            RouterSpec::LeastOutstanding {} => Box::new(LeastOutstanding),
            RouterSpec::PowerOfTwo {} => Box::new(PowerOfTwo::new(seed)),
            RouterSpec::KvUsage {} => Box::new(KvUsage::new(seed)),
            RouterSpec::CacheAware(c) => Box::new(CacheAware::new(c.clone())),
            RouterSpec::LlmdInferenceScheduler(c) => Box::new(InferenceScheduler::new(c.clone(), seed)),
            RouterSpec::DynamoKv(c) => Box::new(KvRouter::new(c.clone(), seed)),
            RouterSpec::ProductionStack(l) => Box::new(ProductionStack::new(l.clone(), seed)),
            RouterSpec::VllmDataParallel {} => Box::new(super::dp::VllmDpBalancer::default()),
            RouterSpec::SglangDataParallel { load_balance_method } => {
                Box::new(super::dp::SglangDpController::new(*load_balance_method))
            }
        }
    }
}

impl RouterSpec {
    /// Each parameter in the range the deployed router accepts (or that has a meaning): a
    /// ratio above one, a negative weight or a zero granularity would run and route by a rule
    /// no router has. `path` names the section (`fleet.router`, `fleet.decode_router`).
    pub fn check(&self, path: &str) -> Result<(), crate::config::ConfigError> {
        use crate::config::ConfigError;
        let err = |field: &str, msg: String| Err(ConfigError::new(format!("{path}.{field}"), msg));
        let nonneg = |field: &str, v: f64| {
            if v.is_finite() && v >= 0.0 {
                Ok(())
            } else {
                err(field, format!("must be a finite number >= 0, got {v}"))
            }
        };
        let positive = |field: &str, v: u64| if v >= 1 { Ok(()) } else { err(field, "must be >= 1, got 0".into()) };
        match self {
            RouterSpec::CacheAware(c) => {
                if !(c.cache_threshold.is_finite() && (0.0..=1.0).contains(&c.cache_threshold)) {
                    return err(
                        "cache_threshold",
                        format!(
                            "is the share of a prompt matched in a worker's tree (sgl-router --cache-threshold): \
                             must be from 0 to 1, got {}",
                            c.cache_threshold
                        ),
                    );
                }
                if !(c.balance_rel_threshold.is_finite() && c.balance_rel_threshold > 0.0) {
                    return err(
                        "balance_rel_threshold",
                        format!("must be a finite ratio > 0, got {}", c.balance_rel_threshold),
                    );
                }
                positive("max_tree_size", c.max_tree_size)?;
                positive("tree_block_size", u64::from(c.tree_block_size))
            }
            RouterSpec::LlmdInferenceScheduler(c) => {
                nonneg("prefix_cache_scorer_weight", c.prefix_cache_scorer_weight)?;
                nonneg("queue_scorer_weight", c.queue_scorer_weight)?;
                nonneg("kv_cache_utilization_scorer_weight", c.kv_cache_utilization_scorer_weight)?;
                positive("block_size_tokens", u64::from(c.block_size_tokens))?;
                positive("max_prefix_blocks_to_match", u64::from(c.max_prefix_blocks_to_match))?;
                positive("lru_capacity_per_server", c.lru_capacity_per_server)
            }
            RouterSpec::DynamoKv(c) => {
                nonneg("kv_overlap_score_weight", c.kv_overlap_score_weight)?;
                nonneg("router_temperature", c.router_temperature)?;
                if !(c.router_ttl_secs.is_finite() && c.router_ttl_secs > 0.0) {
                    return err(
                        "router_ttl_secs",
                        format!("must be a finite number of seconds > 0, got {}", c.router_ttl_secs),
                    );
                }
                positive("router_max_tree_size", c.router_max_tree_size)?;
                if !(c.router_prune_target_ratio > 0.0 && c.router_prune_target_ratio <= 1.0) {
                    return err(
                        "router_prune_target_ratio",
                        format!(
                            "is a share of router_max_tree_size: must be above 0 and at most 1, got {}",
                            c.router_prune_target_ratio
                        ),
                    );
                }
                Ok(())
            }
            RouterSpec::ProductionStack(l) => match l {
                super::production_stack::RoutingLogic::Roundrobin {} => Ok(()),
                super::production_stack::RoutingLogic::Session { request_stats_window } => {
                    positive("request_stats_window", *request_stats_window)
                }
                super::production_stack::RoutingLogic::PrefixAware { chunk_size, request_stats_window, .. } => {
                    positive("chunk_size", u64::from(*chunk_size))?;
                    positive("request_stats_window", *request_stats_window)
                }
            },
            RouterSpec::RoundRobin {}
            | RouterSpec::LeastOutstanding {}
            | RouterSpec::PowerOfTwo {}
            | RouterSpec::KvUsage {} => Ok(()),
            // The engines' own balancers sit inside one engine, behind its one front end: not a
            // router in front of replicas of their own (they were accepted there, even in front
            // of the other engine's replicas, until 2026-12-06).
            RouterSpec::VllmDataParallel {} => Err(ConfigError::new(
                path,
                "vllm_data_parallel is vLLM's balancer inside one engine, not a fleet router: set \
                 engine.data_parallel_size on a vLLM scenario for it, or name a router of docs/routers.md"
                    .to_string(),
            )),
            RouterSpec::SglangDataParallel { .. } => Err(ConfigError::new(
                path,
                "sglang_data_parallel is SGLang's DataParallelController inside one engine, not a fleet \
                 router: set engine.dp_size (and engine.load_balance_method) on an SGLang scenario for it, \
                 or name a router of docs/routers.md"
                    .to_string(),
            )),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::fleet::blocks::tests::spec;

    pub(crate) fn views(outstanding: &[u32]) -> Vec<ReplicaView> {
        outstanding.iter().map(|&o| ReplicaView { outstanding: o, ..Default::default() }).collect()
    }

    pub(crate) fn req(id: u64, spec: &RequestSpec, now_ns: u64) -> RouteRequest<'_> {
        RouteRequest { id, spec, now_ns, session: None }
    }

    #[test]
    fn round_robin_cycles_in_replica_order() {
        let s = spec(&[(1, 10)]);
        let mut r = RoundRobin::default();
        let v = views(&[9, 0, 0]);
        let picks: Vec<usize> = (0..7).map(|i| r.route(&req(i, &s, 0), &v)).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn least_outstanding_takes_the_first_minimum() {
        let s = spec(&[(1, 10)]);
        let mut r = LeastOutstanding;
        assert_eq!(r.route(&req(0, &s, 0), &views(&[3, 1, 1, 2])), 1);
        assert_eq!(r.route(&req(1, &s, 0), &views(&[0, 1, 1, 0])), 0);
    }

    #[test]
    fn power_of_two_is_seeded_and_never_picks_the_busier_of_its_pair() {
        let s = spec(&[(1, 10)]);
        let v = views(&[5, 0, 5, 5]);
        let run = |seed| {
            let mut r = PowerOfTwo::new(seed);
            (0..64).map(|i| r.route(&req(i, &s, 0), &v)).collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7), "same seed, same choices");
        assert_ne!(run(7), run(8));
        let picks = run(7);
        // Replica 1 is idle: whenever it is drawn it wins, and it is drawn in half the pairs.
        let ones = picks.iter().filter(|&&p| p == 1).count();
        assert!((20..=44).contains(&ones), "replica 1 picked {ones} times of 64");
        // A loaded replica only wins a pair of two loaded ones.
        assert!(picks.iter().all(|&p| p < 4));
        let mut one = PowerOfTwo::new(0);
        assert_eq!(one.route(&req(0, &s, 0), &views(&[4])), 0);
    }

    #[test]
    fn kv_usage_picks_the_emptiest_pool_and_breaks_ties_at_random() {
        let s = spec(&[(1, 10)]);
        let mut r = KvUsage::new(1);
        let mut v = views(&[0, 0, 0]);
        v[0].kv_usage = 0.5;
        v[1].kv_usage = 0.2;
        v[2].kv_usage = 0.9;
        assert_eq!(r.route(&req(0, &s, 0), &v), 1);
        let tie = views(&[0, 0, 0, 0]);
        let picks: std::collections::BTreeSet<usize> = (0..40).map(|i| r.route(&req(i, &s, 0), &tie)).collect();
        assert_eq!(picks.len(), 4, "ties spread over every replica: {picks:?}");
    }

    #[test]
    fn specs_parse_with_the_deployed_flag_names_and_build() {
        let cases = [
            r#"{"policy": "round_robin"}"#,
            r#"{"policy": "cache_aware", "cache_threshold": 0.5, "balance_abs_threshold": 32}"#,
            r#"{"policy": "llmd_inference_scheduler", "prefix_cache_scorer_weight": 2.0}"#,
            r#"{"policy": "dynamo_kv", "kv_overlap_score_weight": 2.0, "router_temperature": 0.5}"#,
            r#"{"policy": "production_stack", "routing_logic": "prefixaware", "prefix_min_match_length": 64}"#,
            r#"{"policy": "production_stack", "routing_logic": "session"}"#,
        ];
        for c in cases {
            let spec: RouterSpec = serde_json::from_str(c).unwrap_or_else(|e| panic!("{c}: {e}"));
            let _ = spec.build(0);
        }
        assert!(serde_json::from_str::<RouterSpec>(r#"{"policy": "cache_aware", "cache_treshold": 0.5}"#).is_err());
    }
}
