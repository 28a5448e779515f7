//! Structural invariants, checked after every engine step: blocks conserved
//! (each block's ref count equals its holders; the free queue holds exactly
//! the blocks with ref 0), no request lost or duplicated, running ≤
//! max_num_seqs, scheduled tokens ≤ the budget, KV in use ≤ the pool.

use proptest::prelude::*;
use serde_json::Value;
use sim::simulation::{RunOptions, StopReason};

mod common;
use crate::common::*;

fn checked(v: Value) -> sim::SimOutput {
    let spec = spec(v);
    let out = sim::simulate(&spec, RunOptions { check_invariants: true, ..Default::default() });
    assert_eq!(out.run.stop, StopReason::Completed, "{}", out.run.stop.as_str());
    // No request lost or duplicated: every timed request completed, with exactly its tokens.
    assert_eq!(out.run.records.len(), out.workload.requests.len());
    for (r, s) in out.run.records.iter().zip(&out.workload.requests) {
        assert!(r.completed);
        assert_eq!(r.tokens.len() as u32, s.output_len);
        assert!(out.run.token_times(r).windows(2).all(|w| w[0] <= w[1]));
    }
    assert!(out.run.gauges.kv_usage_peak <= 1.0);
    out
}

fn scenario_file(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(root().join("scenarios").join(name)).unwrap()).unwrap()
}

/// An evicted block's watch ends with its hash: a block a fast-forward's steps evicted, gave
/// to a request and freed again went to the spare ids still watched by the head's memo (found
/// by the lazy decode cohort's audit, with the fast-forward on and the cohort off; the explicit
/// path revalidated the memo before anything read the watch, so no output moved).
#[test]
fn an_evicted_block_is_not_watched_through_a_fast_forward() {
    let v: Value = serde_json::from_str(
        r#"{"version": 1, "engine": {"kind": "vllm", "version": "0.34.0", "max_model_len": 4096,
            "max_num_batched_tokens": 8192, "kv_cache_tokens": 20000, "block_size": 16, "enable_prefix_caching": true,
            "async_scheduling": false, "max_num_seqs": 256}, "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
            "workload": {"dataset_name": "random", "random_input_len": 126, "random_output_len": 183,
            "random_range_ratio": 0.9, "num_prompts": 1000, "seed": 692608, "max_concurrency": 256, "ignore_eos": true}}"#,
    )
    .unwrap();
    for lazy_decodes in [false, true] {
        let out = sim::simulate(
            &spec(v.clone()),
            RunOptions { check_invariants: true, fast_forward: true, lazy_decodes, ..Default::default() },
        );
        assert_eq!(out.run.stop, StopReason::Completed, "lazy {lazy_decodes}: {}", out.run.stop.as_str());
    }
}

#[test]
fn kv_starved_scenario_preempts_and_keeps_every_invariant() {
    let out = checked(scenario_file("kv-starved-qwen2.5-7b-a100-vllm.json"));
    assert!(out.run.counters.num_preemptions > 0, "the KV-starved scenario must preempt");
}

#[test]
fn shared_prefix_scenario_keeps_every_invariant() {
    let mut v = scenario_file("shared-prefix-llama3.1-8b-h100-vllm.json");
    set(&mut v, "workload.num_prompts=120");
    let out = checked(v);
    assert!(out.run.counters.prefix_cache_hits > 0);
}

#[test]
fn priority_policy_old_versions_and_chunk_caps_keep_every_invariant() {
    for (version, policy, threshold) in
        [("0.11.0", "fcfs", 0), ("0.17.0", "priority", 256), ("0.33.0", "priority", 0), ("0.25.0", "fcfs", 100)]
    {
        let mut v = small_vllm(700, 300, 60, 24);
        set(&mut v, &format!("engine.version={version}"));
        set(&mut v, &format!("engine.policy={policy}"));
        set(&mut v, &format!("engine.long_prefill_token_threshold={threshold}"));
        set(&mut v, "engine.kv_cache_tokens=8000");
        // One request of max_model_len must fit the pool (vLLM refuses to start otherwise).
        set(&mut v, "engine.max_model_len=4096");
        set(&mut v, "workload.random_range_ratio=0.5");
        let out = checked(v);
        assert!(out.run.counters.num_preemptions > 0, "{version} {policy}: expected KV pressure");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    /// Random small engines and workloads: every run completes with all invariants.
    #[test]
    fn random_engines_and_workloads_complete_with_every_invariant(
        input in 1u32..600, output in 1u32..200, ratio in 0.0f64..0.9, prompts in 1u32..40, conc in 1u32..24,
        blocks in 60u32..400, block_size in prop::sample::select(vec![1u32, 8, 16, 32]),
        batched in 64u32..3000, seqs in 1u32..64, caching: bool, prefix in 0u32..200, seed in 0u64..1000,
        version in prop::sample::select(vec!["0.11.0", "0.20.0", "0.33.0"]),
    ) {
        let max_total = ((f64::from(input) * (1.0 + ratio)).ceil() as u32 + prefix) + (f64::from(output) * (1.0 + ratio)).ceil() as u32;
        prop_assume!(max_total.div_ceil(block_size) < blocks - 1);
        // max_model_len: the longest request (one of it must fit the pool, vLLM checks it); blocks
        // of 1 or 8 tokens need FlexAttention (the dense kernels page by 16).
        let mut v = serde_json::json!({
            "version": 1,
            "engine": {"kind": "vllm", "version": version, "max_num_seqs": seqs.min(batched), "max_num_batched_tokens": batched,
                       "num_gpu_blocks_override": blocks, "block_size": block_size, "enable_prefix_caching": caching,
                       "max_model_len": max_total},
            "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
            "workload": {"dataset_name": "random", "random_input_len": input, "random_output_len": output,
                         "random_range_ratio": ratio, "random_prefix_len": prefix, "num_prompts": prompts,
                         "max_concurrency": conc, "ignore_eos": true, "seed": seed}
        });
        if block_size % 16 != 0 {
            v["engine"]["attention_backend"] = "FLEX_ATTENTION".into();
        }
        checked(v);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

    /// Random small SGLang engines and workloads: every run completes, with
    /// every invariant (pool accounting, radix tree, chunk cap, no mixing
    /// without enable_mixed_chunk) after each step.
    #[test]
    fn random_sglang_engines_and_workloads_complete_with_every_invariant(
        input in 1u32..600, output in 1u32..200, ratio in 0.0f64..0.9, prompts in 1u32..40, conc in 1u32..24,
        pool in 1500u64..6000, page in prop::sample::select(vec![1u32, 4, 16]), chunk in prop::sample::select(vec![-1i64, 64, 512, 2048]),
        running in 1u32..64, radix: bool, mixed: bool, prefix in 0u32..200, seed in 0u64..1000, ignore_eos: bool,
        policy in prop::sample::select(vec!["fcfs", "lpm", "lof", "random"]),
        version in prop::sample::select(vec!["0.4.10", "0.5.3", "0.5.23"]),
    ) {
        let chunk = if chunk > 0 && (chunk as u32) < page { i64::from(page) } else { chunk };
        let v = serde_json::json!({
            "version": 1,
            "engine": {"kind": "sglang", "version": version, "max_running_requests": running, "max_total_tokens": pool,
                       "page_size": page, "chunked_prefill_size": chunk, "schedule_policy": policy,
                       "disable_radix_cache": !radix, "enable_mixed_chunk": mixed, "context_length": 8192},
            "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
            "workload": {"dataset_name": "random", "random_input_len": input, "random_output_len": output,
                         "random_range_ratio": ratio, "random_prefix_len": prefix, "num_prompts": prompts,
                         "max_concurrency": conc, "ignore_eos": ignore_eos,
                         "output_len_dist": {"kind": "geometric", "mean": 50.0}, "seed": seed}
        });
        let parsed = sim::config::from_value::<sim::config::Scenario>(v.clone(), "").unwrap();
        // Skip workloads the validator rightly rejects (a request that could never be admitted).
        prop_assume!(sim::config::resolve(&parsed, &resources()).is_ok());
        checked(v);
    }
}
