//! The lazy decode cohort (`RunOptions::lazy_decodes`, vLLM's scheduler under FCFS) is exact:
//! a run that counts its plain decodes instead of listing them and the same run with every
//! decode listed give byte-identical reports, records, counters, gauges and time series, with
//! the fast-forward on and off, on every release's scheduling (synchronous and async), prefix
//! caching on and off, shared prefixes, preempting pools, chunked prefill on and off, the
//! `long_prefill_token_threshold`, and the priority policy (which never forms a cohort).

use proptest::prelude::*;
use serde_json::{json, Value};
use sim::simulation::RunOptions;

mod common;
use crate::common::*;

/// A run's report and full debug form, and how many of its tokens the cohort decoded.
fn run_bytes(v: &Value, lazy: bool, fast_forward: bool) -> (String, String, u64) {
    let spec = spec(v.clone());
    let opts = RunOptions {
        lazy_decodes: lazy,
        fast_forward,
        check_invariants: true,
        record_timeseries: true,
        ..Default::default()
    };
    let mut out = sim::simulate(&spec, opts);
    let report = serde_json::to_string(&sim::report::PointReport::of(&spec, &out)).unwrap();
    let lazy_tokens = out.run.lazy_decoded_tokens;
    // How the run was computed differs by construction; everything it computed must not.
    out.run.fast_forwarded_steps = 0;
    out.run.lazy_decoded_tokens = 0;
    (report, format!("{:?}", out.run), lazy_tokens)
}

/// The same bytes with the cohort and without, with the fast-forward on and off; the share of
/// the run's tokens the cohort decoded (fast-forward off).
fn assert_same_with_and_without(v: &Value) -> f64 {
    let mut share = 0.0;
    for ff in [true, false] {
        let (ra, da, lazy) = run_bytes(v, true, ff);
        let (rb, db, none) = run_bytes(v, false, ff);
        assert_eq!(none, 0);
        assert_eq!(ra, rb, "reports differ with and without lazy decodes (fast-forward {ff}) for {v}");
        assert!(da == db, "runs differ with and without lazy decodes (fast-forward {ff}) for {v}");
        if !ff {
            let out = sim::simulate(
                &spec(v.clone()),
                RunOptions { lazy_decodes: false, fast_forward: false, ..Default::default() },
            );
            let tokens: usize = out.run.records.iter().map(|r| r.tokens.len()).sum();
            share = lazy as f64 / tokens.max(1) as f64;
        }
    }
    share
}

/// The bench's c=256 case, shortened: most tokens are the cohort's.
#[test]
fn the_high_concurrency_case_decodes_lazily_and_identically() {
    let mut v: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("scenarios").join("long-prefill-itl-llama3.1-8b-h100-vllm.json")).unwrap(),
    )
    .unwrap();
    for s in [
        "workload.random_input_len=1024",
        "workload.random_range_ratio=0.5",
        "workload.random_output_len=256",
        "workload.request_rate=inf",
        "workload.max_concurrency=256",
        "workload.num_prompts=600",
    ] {
        set(&mut v, s);
    }
    let share = assert_same_with_and_without(&v);
    assert!(share > 0.7, "only {:.0}% of the tokens were the cohort's", share * 100.0);
}

/// Every release's scheduling, async on and off, caching on and off, shared prefixes and
/// private prompts, a roomy pool and a preempting one, FCFS and priority.
#[test]
fn every_release_and_setting_gives_the_same_bytes() {
    for version in ["0.11.0", "0.13.0", "0.17.0", "0.23.0", "0.28.0", "0.33.0", "0.34.0"] {
        for (async_scheduling, caching, kv, shared, policy) in [
            (true, true, 200_000, false, "fcfs"),
            (false, true, 200_000, true, "fcfs"),
            (true, false, 9_000, false, "fcfs"),
            (false, false, 9_000, true, "fcfs"),
            (true, true, 9_000, true, "fcfs"),
            (false, true, 9_000, false, "fcfs"),
            (true, true, 200_000, true, "priority"),
        ] {
            let engine = json!({"kind": "vllm", "version": version, "kv_cache_tokens": kv, "max_model_len": 4096,
                                "enable_prefix_caching": caching, "policy": policy,
                                "async_scheduling": async_scheduling, "max_num_batched_tokens": 2048});
            let workload = if shared {
                json!({"dataset_name": "prefix_repetition", "prefix_repetition_prefix_len": 384,
                       "prefix_repetition_suffix_len": 128, "prefix_repetition_num_prefixes": 3,
                       "prefix_repetition_output_len": 150, "num_prompts": 80, "max_concurrency": 32,
                       "ignore_eos": true, "seed": 11})
            } else {
                json!({"dataset_name": "random", "random_input_len": 400, "random_output_len": 150,
                       "random_range_ratio": 0.5, "num_prompts": 80, "max_concurrency": 32, "ignore_eos": true,
                       "seed": 11})
            };
            let v = json!({"version": 1, "engine": engine, "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
                           "workload": workload});
            let share = assert_same_with_and_without(&v);
            if policy == "fcfs" {
                assert!(share > 0.3, "only {:.0}% of the tokens were the cohort's for {v}", share * 100.0);
            } else {
                assert_eq!(share, 0.0, "the priority policy formed a cohort");
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random vLLM scenarios: small pools (preemption), budgets below the running count,
    /// chunked prefill on and off, the long-prefill threshold, block sizes, open and closed
    /// loop, warm-ups, the initial test request, shared prefixes.
    #[test]
    fn random_vllm_scenarios_give_the_same_bytes(
        caching in any::<bool>(),
        async_scheduling in any::<bool>(),
        kv_tokens in prop_oneof![1_500u64..6_000, 6_000u64..60_000],
        block in prop_oneof![Just(16u32), Just(8u32), Just(32u32), Just(1u32)],
        budget in prop_oneof![Just(16u32), Just(256u32), Just(2048u32), Just(8192u32)],
        input in 8u32..700,
        output in 1u32..300,
        range in prop_oneof![Just(0.0f64), Just(0.5f64), Just(0.9f64)],
        prompts in 1u32..60,
        closed in any::<bool>(),
        load in 1u32..48,
        warmups in 0u32..3,
        initial in any::<bool>(),
        knob in 0u32..1000,
        seed in 0u64..1000,
    ) {
        let version = ["0.33.0", "0.28.0", "0.11.0", "0.17.0", "0.13.0", "0.34.0"][knob as usize % 6];
        let mut engine = json!({"kind": "vllm", "version": version, "max_num_seqs": 4 + knob % 29,
               "max_num_batched_tokens": budget, "kv_cache_tokens": kv_tokens, "max_model_len": 4096,
               "block_size": block, "enable_prefix_caching": caching, "async_scheduling": async_scheduling,
               "long_prefill_token_threshold": if knob % 3 == 0 { 128 } else { 0 }});
        if knob % 7 == 3 && version != "0.11.0" {
            engine["enable_chunked_prefill"] = json!(false);
        }
        let mut w = json!({"dataset_name": "random", "random_input_len": input, "random_output_len": output,
                           "random_range_ratio": range, "num_prompts": prompts, "ignore_eos": true,
                           "num_warmups": warmups, "initial_test_request": initial, "seed": seed});
        if closed {
            w["max_concurrency"] = json!(load);
        } else {
            w["request_rate"] = json!(f64::from(load) / 4.0);
        }
        if knob % 4 == 1 {
            w = json!({"dataset_name": "prefix_repetition", "prefix_repetition_prefix_len": input,
                       "prefix_repetition_suffix_len": 16 + input / 8, "prefix_repetition_num_prefixes": 1 + knob % 3,
                       "prefix_repetition_output_len": output, "num_prompts": prompts, "ignore_eos": true,
                       "num_warmups": warmups, "initial_test_request": initial, "seed": seed,
                       "max_concurrency": load});
        }
        let v = json!({"version": 1, "engine": engine, "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
                       "workload": w});
        // Scenarios the resolver rejects (a prompt longer than the pool, say) say nothing here.
        let Ok(s) = sim::config::from_value(v.clone(), "") else { return Ok(()) };
        if sim::config::resolve(&s, &resources()).is_err() {
            return Ok(());
        }
        assert_same_with_and_without(&v);
    }
}
