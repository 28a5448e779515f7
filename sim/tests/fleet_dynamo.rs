//! Dynamo's KV router reads the engines' real prefix caches (issue #14): the engine-side
//! query (`Engine::cached_prefix_tokens`) answers what each replica holds, changes
//! nothing, and follows evictions; the router, fed by it as Dynamo's indexer is fed by
//! KV events, stops sending a prefix to a replica that lost it, where the approximate
//! index (`use_kv_events: false`) still believes the prefix is there.

mod common;

use std::sync::Arc;

use common::{small_vllm, spec};
use serde_json::{json, Value};
use sim::engine::{Engine, StepPlan, TokenOutput};
use sim::fleet::dynamo::{KvRouter, KvRouterConfig};
use sim::fleet::{ReplicaView, RouteRequest, Router};
use sim::request::{RequestSpec, Segment};
use sim::simulation::{RunOptions, StopReason};
use sim::traces::TraceRequest;

/// A request whose prompt is the given `(key, len)` segments.
fn req(segs: &[(u64, u32)], output: u32, out_key: u64) -> RequestSpec {
    let prompt: Vec<Segment> = segs.iter().map(|&(key, len)| Segment { key, len }).collect();
    let prompt_len = prompt.iter().map(|s| s.len).sum();
    RequestSpec {
        prompt,
        prompt_len,
        max_tokens: output,
        output_len: output,
        output_key: out_key,
        arrival_ns: 0,
        priority: 0,
        ignore_eos: true,
        prompt_hashes: None,
    }
}

/// An engine as a scenario resolves it, with a KV pool of about `pool` tokens.
fn engine(kind: &str, pool: u32) -> Box<dyn Engine + Send> {
    let mut v = small_vllm(64, 8, 1, 1);
    v["engine"] = match kind {
        "vllm" => json!({"kind": "vllm", "version": "0.33.0", "max_num_batched_tokens": 2048,
                         "kv_cache_tokens": pool, "max_model_len": 4096}),
        _ => json!({"kind": "sglang", "version": "0.5.23", "max_total_tokens": pool, "context_length": 16384}),
    };
    sim::engine::build(&spec(v).engine)
}

/// Runs the engine until every request it holds has finished; returns every step's plan.
fn drain(e: &mut dyn Engine) -> Vec<String> {
    let mut plans = Vec::new();
    let mut out: Vec<TokenOutput> = Vec::new();
    while e.num_unfinished() > 0 {
        let plan: &StepPlan = e.schedule();
        plans.push(format!("{:?} {}", plan.scheduled, plan.num_preempted));
        out.clear();
        e.finish_step(&mut out);
        assert!(plans.len() < 100_000, "the engine finishes");
    }
    plans
}

const G: u64 = 1; // the shared system prompt
const N: u64 = 2; // another one

#[test]
fn engines_report_their_cached_prefix_and_lose_it_on_eviction() {
    for kind in ["vllm", "sglang"] {
        let mut e = engine(kind, 8192);
        let probe = req(&[(G, 2048), (900, 64)], 8, 901);
        assert_eq!(e.cached_prefix_tokens(&probe), 0, "{kind}: an empty cache");
        e.add_request(0, &req(&[(G, 2048), (100, 64)], 8, 101));
        drain(&mut *e);
        // The whole shared prefix is cached (2048 is a whole number of blocks and pages),
        // the other request's own suffix is not.
        assert_eq!(e.cached_prefix_tokens(&probe), 2048, "{kind}");
        // A prompt that shares only the first 1000 tokens: the whole blocks of those.
        let half = req(&[(G, 1000), (902, 1100)], 8, 903);
        let want = if kind == "vllm" { 1000 / 16 * 16 } else { 1000 };
        assert_eq!(e.cached_prefix_tokens(&half), want, "{kind}");
        // A request that needs almost the whole pool evicts the prefix.
        e.add_request(1, &req(&[(N, 7900)], 8, 102));
        drain(&mut *e);
        assert!(
            e.cached_prefix_tokens(&probe) < 2048,
            "{kind}: {} tokens still cached",
            e.cached_prefix_tokens(&probe)
        );
        let want = if kind == "vllm" { 7900 / 16 * 16 } else { 7900 };
        assert_eq!(e.cached_prefix_tokens(&req(&[(N, 7900), (903, 16)], 8, 1)), want, "{kind}");
    }
}

/// Two identical engines under the same requests in a pool small enough to evict; one is
/// asked for its cached prefixes between every step. Their plans and counters stay equal:
/// the lookup refreshes no LRU position (a refresh would change which blocks go first).
#[test]
fn asking_for_the_cached_prefix_changes_nothing() {
    for kind in ["vllm", "sglang"] {
        let mut quiet = engine(kind, 6144);
        let mut asked = engine(kind, 6144);
        let probes: Vec<RequestSpec> = (0..6u64).map(|g| req(&[(10 + g, 1024), (500 + g, 64)], 4, 600 + g)).collect();
        let (mut plans_q, mut plans_a) = (Vec::new(), Vec::new());
        for i in 0..24u32 {
            // Six prefixes in turn, each twice, 1024 + 256 tokens a request: the pool holds
            // about four requests' worth.
            let g = u64::from(i / 2 % 6);
            let r = req(&[(10 + g, 1024), (1000 + u64::from(i), 256)], 16, 2000 + u64::from(i));
            quiet.add_request(i, &r);
            asked.add_request(i, &r);
            let mut out = Vec::new();
            for _ in 0..3 {
                for p in &probes {
                    asked.cached_prefix_tokens(p);
                }
                plans_q.push(format!("{:?}", quiet.schedule().scheduled));
                plans_a.push(format!("{:?}", asked.schedule().scheduled));
                out.clear();
                quiet.finish_step(&mut out);
                out.clear();
                asked.finish_step(&mut out);
            }
        }
        plans_q.extend(drain(&mut *quiet));
        for p in &probes {
            asked.cached_prefix_tokens(p);
        }
        plans_a.extend(drain(&mut *asked));
        assert_eq!(plans_q, plans_a, "{kind}");
        assert_eq!(quiet.counters(), asked.counters(), "{kind}");
        assert!(quiet.counters().prefix_cache_hits > 0, "{kind}: prefixes were reused");
        let cached: Vec<u32> = probes.iter().map(|p| quiet.cached_prefix_tokens(p)).collect();
        assert_eq!(cached, probes.iter().map(|p| asked.cached_prefix_tokens(p)).collect::<Vec<_>>(), "{kind}");
        assert!(cached.contains(&0), "{kind}: some prefix was evicted: {cached:?}");
    }
}

fn views(engines: &[Box<dyn Engine + Send>], spec: &RequestSpec) -> Vec<ReplicaView> {
    engines
        .iter()
        .map(|e| ReplicaView {
            kv_block_size: 16,
            cached_prefix_tokens: Some(e.cached_prefix_tokens(spec)),
            ..Default::default()
        })
        .collect()
}

/// The router alone, over two real engines: replica 0 holds the whole 2048-token prefix,
/// replica 1 its first half. The prefix goes to 0 until 0 evicts it, then to 1.
#[test]
fn the_router_follows_the_engines_caches_through_an_eviction() {
    let mut engines = vec![engine("vllm", 8192), engine("vllm", 8192)];
    engines[0].add_request(0, &req(&[(G, 2048), (100, 64)], 8, 101));
    engines[1].add_request(0, &req(&[(G, 1024), (200, 64)], 8, 201));
    for e in &mut engines {
        drain(&mut **e);
    }
    let cfg = KvRouterConfig { kv_cache_block_size: 16, ..Default::default() };
    let mut router = KvRouter::new(cfg, 5);
    let ask = req(&[(G, 2048), (300, 64)], 8, 301);
    let route = |router: &mut KvRouter, engines: &[Box<dyn Engine + Send>], id: u64| {
        let v = views(engines, &ask);
        let r = router.route(&RouteRequest { id, spec: &ask, now_ns: id, session: None }, &v);
        router.on_finish(id, r, id);
        r
    };
    assert!(router.wants_cached_prefix());
    assert_eq!(route(&mut router, &engines, 1), 0, "the whole prefix is on replica 0");
    // Replica 0 runs a long prompt of its own: the prefix's blocks are evicted there.
    engines[0].add_request(1, &req(&[(N, 7900)], 8, 102));
    drain(&mut *engines[0]);
    assert!(engines[0].cached_prefix_tokens(&ask) < 1024);
    assert_eq!(engines[1].cached_prefix_tokens(&ask), 1024);
    assert_eq!(route(&mut router, &engines, 2), 1, "replica 0 lost the prefix; replica 1 still has half");
}

/// The loop end to end. Two vLLM replicas, a trace timed so that (whatever the first tie
/// draws) replica X gets the 2048-token prefix G, replica Y its first 1024 tokens, X then
/// runs an unrelated long prompt that evicts most of G, and a last G request arrives.
/// With KV events the router sees X's real cache and sends it to Y (a 1024-token hit
/// there); the approximate index still believes X holds G and sends it to X.
#[test]
fn in_a_fleet_run_the_router_stops_sending_a_prefix_to_the_replica_that_lost_it() {
    let s = |t: f64| (t * 1e9) as u64;
    let row = |t: f64, segs: &[(u64, u32)], out: u32| TraceRequest {
        arrival_ns: s(t),
        input_len: segs.iter().map(|x| x.1).sum(),
        output_len: out,
        prompt: segs.iter().map(|&(key, len)| Segment { key, len }).collect(),
    };
    let trace = vec![
        // A → X (a tie between two empty replicas).
        row(0.0, &[(G, 2048), (100, 1024)], 100),
        // B shares G's first half with A; A still decodes on X, so B's cost is lower on Y.
        row(0.3, &[(G, 1024), (200, 1088)], 600),
        // N while B decodes on Y (A is done): X.
        row(2.0, &[(N, 2048), (300, 64)], 8),
        // E hits N on X and fills X's pool: most of A's blocks, G's with them, are evicted.
        row(5.0, &[(N, 2048), (400, 5800)], 16),
        // F: G again, everything else finished.
        row(20.0, &[(G, 2048), (500, 64)], 8),
    ];
    let run = |router: Value, seed: u64| {
        let v = json!({
            "version": 1,
            "engine": {"kind": "vllm", "version": "0.33.0", "max_num_batched_tokens": 8192,
                       "kv_cache_tokens": 8192, "max_model_len": 8176},
            "model": "qwen2.5-7b-instruct",
            "hardware": "h100-80gb",
            "workload": {"dataset_name": "trace", "trace": "t.jsonl", "trace_format": "mooncake",
                         "ignore_eos": true, "initial_test_request": false, "seed": seed},
            "fleet": {"count": 2, "router": router}
        });
        let mut res = common::resources();
        res.trace_requests = Some(Arc::new(trace.clone()));
        let sc = sim::config::from_value(v, "").unwrap();
        let sp = sim::config::resolve(&sc, &res).unwrap();
        let o = sim::simulate(&sp, RunOptions { check_invariants: true, ..Default::default() });
        assert_eq!(o.run.stop, StopReason::Completed);
        let f = o.fleet.unwrap();
        let reqs: Vec<u64> = f.replicas.iter().map(|r| r.requests).collect();
        let hits: Vec<u64> = f.replicas.iter().map(|r| r.counters.prefix_cache_hits).collect();
        (reqs, hits)
    };
    // Over several seeds (the router breaks A's tie at random, and a router blind to the
    // caches would send F either way, each with even odds).
    for seed in 1..=8 {
        let (reqs, hits) = run(json!({"policy": "dynamo_kv"}), seed);
        // X got A, N and E; Y got B and F.
        let x = reqs.iter().position(|&n| n == 3).unwrap_or_else(|| panic!("seed {seed}: requests {reqs:?}"));
        let y = 1 - x;
        assert_eq!(reqs[y], 2, "seed {seed}: {reqs:?}");
        // E found N on X; F found G's first half on Y (B put it there; Y's only hit).
        assert_eq!(hits[x], 2048, "seed {seed}: {hits:?}");
        assert_eq!(hits[y], 1024, "seed {seed}: {hits:?}");
    }
    // Without KV events the router believes X still holds all of G: F goes to X, which has
    // kept only G's first blocks.
    let (reqs, hits) = run(json!({"policy": "dynamo_kv", "use_kv_events": false}), 1);
    let x = reqs.iter().position(|&n| n == 4).unwrap_or_else(|| panic!("requests per replica {reqs:?}"));
    assert_eq!(reqs[1 - x], 1, "{reqs:?}");
    assert!(hits[x] > 2048 && hits[x] < 2048 + 1024, "F's hit on X is what eviction left of G: {hits:?}");
    assert_eq!(hits[1 - x], 0, "{hits:?}");
}

/// SGLang's read-only walk against `match_prefix` on a copy of the tree: the same length for
/// random keys sharing prefixes, over inserts, locks and evictions, pages of 1 and 4; and
/// the tree asked is left as it was (its next eviction frees what the copy's does).
#[test]
fn the_radix_trees_read_only_match_is_match_prefix_without_its_side_effects() {
    use sim::engine::sglang::radix_cache::RadixCache;
    fn mix64(mut z: u64) -> u64 {
        z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    for page in [1u32, 4] {
        let mut tree = RadixCache::new(page);
        let key = |x: u64| -> Vec<u64> {
            // Up to three shared levels of a few variants each, then a private tail.
            let mut k = Vec::new();
            for l in 0..=(x % 3) {
                let v = mix64(x >> (8 * l)) % 3;
                k.extend((0..(5 + mix64(x ^ l) % 40)).map(|i| 1000 * (l * 10 + v) + i));
            }
            k.extend((0..(x % 13)).map(|i| mix64(x) ^ i));
            k
        };
        let mut matched = 0;
        for i in 0..2000u64 {
            let probe = key(mix64(i ^ 0x77));
            let mut copy = tree.clone();
            let want = copy.match_prefix(&probe).len;
            assert_eq!(tree.cached_prefix_len(&probe), want, "page {page}, step {i}");
            matched += usize::from(want > 0);
            let k = key(mix64(i));
            let (_, node) = tree.insert(&k);
            if i % 5 == 0 {
                tree.inc_lock_ref(node);
            }
            if i % 11 == 0 {
                // Asked or not, the tree evicts the same nodes: no access time was refreshed.
                let mut untouched = tree.clone();
                let probes: Vec<Vec<u64>> = (0..6).map(|j| key(mix64(i ^ (j << 20)))).collect();
                for p in &probes {
                    tree.cached_prefix_len(p);
                }
                assert_eq!(tree.evict(300), untouched.evict(300), "page {page}, step {i}");
                assert_eq!(tree.total_size(), untouched.total_size());
                for p in &probes {
                    assert_eq!(tree.cached_prefix_len(p), untouched.cached_prefix_len(p));
                }
            }
        }
        assert!(matched > 1000, "page {page}: {matched} probes matched");
    }
}
