//! Per-replica KV limits (issue #14): every replica group's pool and KV-limited
//! concurrency, not the first replica's, and the fleet's total.

mod common;

use common::{small_vllm, spec};
use serde_json::json;
use sim::config::ReplicaRole;
use sim::fleet::replica_limits;

fn workload(s: &sim::config::SimSpec) -> sim::workload::Workload {
    sim::workload::generate(&s.workload)
}

#[test]
fn a_single_engine_is_one_group_with_the_sweeps_limit() {
    let s = spec(small_vllm(1000, 200, 50, 8));
    let w = workload(&s);
    let l = replica_limits(&s, &w);
    let want = sim::sweep::kv_limited_concurrency(&s, &w);
    assert_eq!(l.groups.len(), 1);
    let g = &l.groups[0];
    assert_eq!((g.kv_cache_tokens, g.request_footprint_tokens), (want.kv_capacity_tokens, want.footprint_tokens));
    assert_eq!(g.kv_limited_concurrency, want.concurrency);
    assert_eq!(l.kv_limited_concurrency, want.concurrency);
    assert_eq!(l.prefill_kv_limited_concurrency, None);
    assert_eq!(g.memory, s.kv_sizing.memory);
    assert!(l.sentences().is_empty(), "a single engine keeps explain's own sentence");
}

/// Two groups that differ in everything: 3 vLLM replicas on H100 with a 100,000-token pool
/// and 2 SGLang replicas on A100 at TP 2 with pools sized from memory.
#[test]
fn each_group_has_its_own_pool_and_limit_and_the_fleet_sums_them() {
    let mut v = small_vllm(1000, 200, 50, 8);
    v["fleet"] = json!({"replicas": [
        {"count": 3, "hardware": "h100-80gb", "engine": {"kv_cache_tokens": 100000}},
        {"count": 2, "name": "big", "hardware": {"gpu": "a100-80gb", "count": 2},
         "engine": {"kind": "sglang", "version": "0.5.23", "tp_size": 2, "context_length": 8192}}
    ]});
    let s = spec(v);
    let w = workload(&s);
    let l = replica_limits(&s, &w);
    assert_eq!(l.groups.len(), 2);
    let (a, b) = (&l.groups[0], &l.groups[1]);
    assert_eq!(a.replicas, ["mixed0", "mixed1", "mixed2"]);
    assert_eq!(b.replicas, ["big-0", "big-1"]);
    assert_eq!(
        (a.engine, a.hardware.as_str(), a.tensor_parallel_size),
        (sim::config::EngineKind::Vllm, "h100-80gb", 1)
    );
    assert_eq!(
        (b.engine, b.hardware.as_str(), b.tensor_parallel_size, b.num_gpus),
        (sim::config::EngineKind::Sglang, "a100-80gb", 2, 2)
    );
    // vLLM: 6,250 blocks of 16, less the null block; SGLang's from memory, far larger at TP 2.
    assert_eq!(a.kv_cache_tokens, 6249 * 16);
    assert!(b.kv_cache_tokens > 3 * a.kv_cache_tokens, "{} vs {}", b.kv_cache_tokens, a.kv_cache_tokens);
    // What the loop's engines report, replica by replica.
    let f = s.fleet.as_ref().unwrap();
    for r in &f.replicas {
        let g = &l.groups[r.group];
        assert_eq!(g.kv_cache_tokens, r.engine.kv_capacity_tokens());
    }
    // The footprint: mean prompt + output less the last token, never stored (1000 + 200 − 1),
    // in whole blocks (16) or pages (1).
    assert_eq!(a.request_footprint_tokens, 1200);
    assert_eq!(b.request_footprint_tokens, 1199);
    assert_eq!(a.kv_limited_concurrency, a.kv_cache_tokens / 1200);
    assert_eq!(b.kv_limited_concurrency, b.kv_cache_tokens / 1199);
    assert_eq!(a.group_kv_limited_concurrency, 3 * a.kv_limited_concurrency);
    assert_eq!(b.group_kv_limited_concurrency, 2 * b.kv_limited_concurrency);
    assert_eq!(l.kv_limited_concurrency, a.group_kv_limited_concurrency + b.group_kv_limited_concurrency);
    assert_eq!(l.kv_cache_tokens, 3 * a.kv_cache_tokens + 2 * b.kv_cache_tokens);
    assert_eq!((l.num_replicas, l.num_gpus), (5, 3 + 4));
    // Not the first replica's figures times five.
    assert_ne!(l.kv_limited_concurrency, 5 * a.kv_limited_concurrency);
    // Each group's memory account is its own: the first is the scenario's, the second (2 GPUs
    // at TP 2, another engine) another account, also derived.
    assert_eq!(a.memory, s.kv_sizing.memory);
    assert!(b.memory.is_some());
    assert_ne!(a.memory, b.memory);
    let words = l.sentences();
    assert_eq!(words.len(), 4);
    assert!(words[1].starts_with("Group 1, big-0–big-1 (2 mixed replicas, sglang 0.5.23"), "{}", words[1]);
    assert!(
        words[2].contains(&format!("{} requests at once", sim::explain::thousands(l.kv_limited_concurrency))),
        "{}",
        words[2]
    );
    // The groups' limits differ: where an even split fills the smallest (5 × the smaller limit).
    let even = 5 * a.kv_limited_concurrency.min(b.kv_limited_concurrency);
    assert_eq!(l.even_split_concurrency(), Some(even));
    assert!(
        words[3].contains(&format!("from {} concurrent requests (5 replicas", sim::explain::thousands(even))),
        "{}",
        words[3]
    );
}

#[test]
fn prefill_replicas_hold_the_prompt_and_decode_replicas_the_request() {
    let mut v = small_vllm(1000, 200, 50, 8);
    v["fleet"] = json!({"prefill_count": 2, "decode_count": 4});
    let s = spec(v);
    let w = workload(&s);
    let l = replica_limits(&s, &w);
    let (p, d) = (&l.groups[0], &l.groups[1]);
    assert_eq!((p.role, d.role), (ReplicaRole::Prefill, ReplicaRole::Decode));
    assert_eq!(p.request_footprint_tokens, 1008, "1000 + 1 tokens in whole blocks");
    assert_eq!(d.request_footprint_tokens, 1200);
    assert_eq!(l.kv_limited_concurrency, d.group_kv_limited_concurrency);
    assert_eq!(l.prefill_kv_limited_concurrency, Some(p.group_kv_limited_concurrency));
    assert_eq!(d.group_kv_limited_concurrency, 4 * (d.kv_cache_tokens / 1200));
    assert!(l.sentences().last().unwrap().contains("prefill replicas hold"));
}

#[test]
fn data_parallel_engines_are_one_group() {
    let mut v = small_vllm(1000, 200, 50, 8);
    v["engine"]["data_parallel_size"] = json!(4);
    let s = spec(v);
    let l = replica_limits(&s, &workload(&s));
    assert_eq!(l.groups.len(), 1);
    assert_eq!(l.groups[0].replicas.len(), 4);
    assert_eq!(l.kv_limited_concurrency, 4 * l.groups[0].kv_limited_concurrency);
}

/// A replica is a whole simulated engine: a million of them is an error naming the field, not
/// a run that eats memory until it is killed (the fuzzing of 2026-12-04); so is a fleet whose
/// groups add up past the limit.
#[test]
fn replica_counts_are_bounded() {
    let res = common::resources();
    let err = |v: serde_json::Value| {
        let s: sim::config::Scenario = sim::config::from_value(v, "").unwrap();
        sim::config::resolve(&s, &res).expect_err("refused")
    };
    let max = sim::config::MAX_REPLICAS;
    for field in ["data_parallel_size"] {
        let mut v = small_vllm(100, 10, 4, 2);
        v["engine"][field] = json!(1_000_000);
        let e = err(v);
        assert_eq!(e.path, format!("engine.{field}"));
        assert!(e.message.contains(&format!("from 1 to {max}")), "{}", e.message);
    }
    let mut v = small_vllm(100, 10, 4, 2);
    v["fleet"] = json!({"replicas": [{"count": max}, {"count": 1}]});
    let e = err(v);
    assert_eq!(e.path, "fleet.replicas[1].count");
    assert!(e.message.contains(&format!("more than {max} replicas")), "{}", e.message);
}

/// A scenario field that fails only with what a replica group changed says which group it was
/// resolved for (it named only the scenario's field before 2026-12-04's fuzzing).
#[test]
fn an_error_a_group_causes_names_the_group() {
    let mut v = small_vllm(100, 10, 4, 2);
    v["fleet"] = json!({"replicas": [{"count": 1}, {"count": 1, "engine": {"max_model_len": 64}}]});
    let s: sim::config::Scenario = sim::config::from_value(v, "").unwrap();
    let e = sim::config::resolve(&s, &common::resources()).expect_err("refused");
    assert!(e.message.contains("(resolving fleet.replicas[1])"), "{}: {}", e.path, e.message);
}
