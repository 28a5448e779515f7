//! The fast-forward (`RunOptions::fast_forward`) is exact: a run with it and the same run
//! stepped one step at a time give byte-identical reports, records, counters, gauges and
//! time series, on random scenarios of both engines and on every scenario in `scenarios/`.
//! So is the work the engine skips when told the run's requests
//! (`RunOptions::expect_requests`: vLLM registers a private request's blocks only when it is
//! preempted): "both ways" here is with both on against both off.

use proptest::prelude::*;
use serde_json::{json, Value};
use sim::simulation::RunOptions;

mod common;
use crate::common::*;

/// Everything a run produced, as bytes: the JSON report and the run's full debug form
/// (every record's token times, counters, gauges, time series, stop reason).
fn run_bytes(v: &Value, fast: bool, check_invariants: bool) -> (String, String) {
    let spec = spec(v.clone());
    let opts = RunOptions {
        fast_forward: fast,
        expect_requests: fast,
        lazy_decodes: fast,
        check_invariants,
        record_timeseries: true,
        ..Default::default()
    };
    let mut out = sim::simulate(&spec, opts);
    let report = serde_json::to_string(&sim::report::PointReport::of(&spec, &out)).unwrap();
    // How the run was computed differs by construction; everything it computed must not.
    out.run.fast_forwarded_steps = 0;
    out.run.lazy_decoded_tokens = 0;
    (report, format!("{:?}", out.run))
}

/// Of a run's steps, the share the fast-forward ran.
fn fast_forwarded_share(v: &Value) -> f64 {
    let out = sim::simulate(&spec(v.clone()), RunOptions::default());
    out.run.fast_forwarded_steps as f64 / out.run.num_steps.max(1) as f64
}

/// The fast-forward must actually apply where its conditions hold: closed-loop decode-heavy
/// runs with a roomy KV pool, for every release's scheduling (vLLM synchronous before 0.14,
/// async scheduling from 0.14; SGLang with and without its overlap scheduler). A condition
/// written against the wrong bookkeeping makes the fast-forward silently never fire, which the
/// byte-identity tests alone cannot see (vLLM's async path did so until 2026-12-01).
#[test]
fn plain_decode_runs_are_fast_forwarded_on_every_release() {
    let engines = [
        json!({"kind": "vllm", "version": "0.11.0", "kv_cache_tokens": 200_000}),
        json!({"kind": "vllm", "version": "0.17.0", "kv_cache_tokens": 200_000}),
        json!({"kind": "vllm", "version": "0.28.0", "kv_cache_tokens": 200_000}),
        json!({"kind": "vllm", "version": "0.28.0", "kv_cache_tokens": 200_000, "async_scheduling": false}),
        json!({"kind": "vllm", "version": "0.33.0", "kv_cache_tokens": 200_000, "enable_prefix_caching": false}),
        json!({"kind": "sglang", "version": "0.4.10", "max_total_tokens": 200_000}),
        json!({"kind": "sglang", "version": "0.5.23", "max_total_tokens": 200_000}),
        json!({"kind": "sglang", "version": "0.5.23", "max_total_tokens": 200_000, "disable_overlap_schedule": true}),
    ];
    for engine in engines {
        let v = json!({"version": 1, "engine": engine, "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
                       "workload": {"dataset_name": "random", "random_input_len": 512, "random_output_len": 256,
                                    "num_prompts": 64, "max_concurrency": 4, "ignore_eos": true}});
        let share = fast_forwarded_share(&v);
        assert!(share > 0.8, "only {:.0}% of the steps were fast-forwarded for {engine}", share * 100.0);
    }
}

fn assert_same_both_ways(v: &Value) {
    let (ra, da) = run_bytes(v, true, true);
    let (rb, db) = run_bytes(v, false, false);
    assert_eq!(ra, rb, "reports differ with and without fast-forward for {v}");
    assert!(da == db, "runs differ with and without fast-forward for {v}");
}

#[test]
fn every_scenario_file_gives_the_same_bytes_with_and_without_fast_forward() {
    let mut names: Vec<String> = std::fs::read_dir(root().join("scenarios"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json"))
        .collect();
    names.sort();
    assert!(!names.is_empty());
    for name in names {
        let mut v: Value =
            serde_json::from_str(&std::fs::read_to_string(root().join("scenarios").join(&name)).unwrap()).unwrap();
        // Keep the long ones short enough for a test, with the same engine settings.
        if v["workload"]["num_prompts"].as_u64().is_some_and(|n| n > 120) {
            set(&mut v, "workload.num_prompts=120");
        }
        assert_same_both_ways(&v);
    }
}

#[test]
fn the_default_scenario_is_fast_forwarded_and_identical() {
    let v: Value = serde_json::from_str(
        &std::fs::read_to_string(root().join("scenarios").join("rtx5090-qwen2.5-7b-vllm.json")).unwrap(),
    )
    .unwrap();
    assert_same_both_ways(&v);
    // One 4,096-token prefill and 511 decodes per request at concurrency 1: nearly every step.
    let share = fast_forwarded_share(&v);
    assert!(share > 0.95, "only {:.1}% of the default scenario's steps were fast-forwarded", share * 100.0);
}

/// A KV pool that holds fewer requests than the client keeps in flight: vLLM's phase B tries
/// the waiting queue's head at every step and fails, and the steps between two admissions
/// are fast-forwarded while that head provably stays blocked (its lookup followed through
/// the step's evictions). On every release's counting of those lookups (0.11 counts each,
/// 0.12 all but a preempted request's, 0.28 only at admission), with and without prefix
/// caching, shared prefixes (hits on the head), FCFS and priority, async scheduling on
/// and off: the same bytes both ways, and most steps fast-forwarded.
#[test]
fn steps_behind_a_blocked_head_of_queue_are_fast_forwarded_and_identical() {
    let cases = [
        ("0.11.0", true, "fcfs", false, false),
        ("0.12.0", true, "priority", false, true),
        ("0.20.0", true, "fcfs", true, false),
        ("0.28.0", true, "fcfs", true, true),
        ("0.28.0", false, "fcfs", false, false),
        ("0.33.0", true, "priority", true, false),
        ("0.33.0", true, "fcfs", false, true),
    ];
    for (version, caching, policy, async_scheduling, shared) in cases {
        let engine = json!({"kind": "vllm", "version": version, "kv_cache_tokens": 12_000, "max_model_len": 4096,
                            "enable_prefix_caching": caching, "policy": policy,
                            "async_scheduling": async_scheduling});
        let workload = if shared {
            json!({"dataset_name": "prefix_repetition", "prefix_repetition_prefix_len": 384,
                   "prefix_repetition_suffix_len": 128, "prefix_repetition_num_prefixes": 3,
                   "prefix_repetition_output_len": 300, "num_prompts": 90, "max_concurrency": 40,
                   "ignore_eos": true, "seed": 3})
        } else {
            json!({"dataset_name": "random", "random_input_len": 512, "random_output_len": 300,
                   "random_range_ratio": 0.3, "num_prompts": 90, "max_concurrency": 40, "ignore_eos": true,
                   "seed": 3})
        };
        let v = json!({"version": 1, "engine": engine, "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
                       "workload": workload});
        assert_same_both_ways(&v);
        let share = fast_forwarded_share(&v);
        assert!(share > 0.5, "only {:.0}% of the steps were fast-forwarded for {v}", share * 100.0);
    }
}

/// Chunked prefill off (`enable_chunked_prefill: false`): a head of queue blocked by the
/// budget (a prompt near `max_model_len` behind more decodes than the budget leaves room for)
/// or by the KV pool, the same bytes both ways.
#[test]
fn chunked_prefill_off_gives_the_same_bytes_with_and_without_fast_forward() {
    for version in ["0.12.0", "0.33.0", "0.34.0"] {
        for caching in [true, false] {
            // Budget-blocked: 4,000-token prompts, a budget of max_model_len (4,030): the head
            // waits while more than 30 requests decode.
            let budget = json!({"version": 1,
                "engine": {"kind": "vllm", "version": version, "kv_cache_tokens": 400_000, "max_model_len": 4030,
                           "enable_chunked_prefill": false, "enable_prefix_caching": caching},
                "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
                "workload": {"dataset_name": "random", "random_input_len": 4000, "random_output_len": 20,
                             "random_range_ratio": 0.0, "num_prompts": 120, "max_concurrency": 60,
                             "ignore_eos": true, "seed": 5}});
            assert_same_both_ways(&budget);
            // The head blocked by the budget alone does not stop the fast-forward (synchronous
            // scheduling: about 11% of the steps, most runs ending at the next finishing request).
            if version == "0.12.0" {
                assert!(fast_forwarded_share(&budget) > 0.05, "{budget}");
            }
            // KV-blocked, as above.
            let kv = json!({"version": 1,
                "engine": {"kind": "vllm", "version": version, "kv_cache_tokens": 12_000, "max_model_len": 4096,
                           "enable_chunked_prefill": false, "enable_prefix_caching": caching},
                "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
                "workload": {"dataset_name": "random", "random_input_len": 512, "random_output_len": 300,
                             "random_range_ratio": 0.3, "num_prompts": 90, "max_concurrency": 40,
                             "ignore_eos": true, "seed": 3}});
            assert_same_both_ways(&kv);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn random_scenario(
    sglang: bool,
    caching: bool,
    kv_tokens: u64,
    granularity: u32,
    chunk: u32,
    input: u32,
    output: u32,
    range: f64,
    prompts: u32,
    closed: bool,
    load: u32,
    warmups: u32,
    initial: bool,
    knob: u32,
    seed: u64,
) -> Value {
    let engine = if sglang {
        let version = ["0.5.23", "0.5.10", "0.4.10"][knob as usize % 3];
        let policy = ["fcfs", "lpm", "lof", "random"][knob as usize / 3 % 4];
        json!({"kind": "sglang", "version": version, "max_running_requests": 4 + knob % 29,
               "chunked_prefill_size": chunk, "max_total_tokens": kv_tokens, "context_length": 4096,
               "page_size": granularity, "disable_radix_cache": !caching, "schedule_policy": policy,
               "enable_mixed_chunk": knob.is_multiple_of(5), "disable_overlap_schedule": knob.is_multiple_of(7)})
    } else {
        let version = ["0.33.0", "0.28.0", "0.11.0", "0.17.0"][knob as usize % 4];
        let policy = ["fcfs", "priority"][knob as usize / 4 % 2];
        json!({"kind": "vllm", "version": version, "max_num_seqs": 4 + knob % 29,
               "max_num_batched_tokens": chunk.max(64), "kv_cache_tokens": kv_tokens, "max_model_len": 4096,
               "block_size": if granularity == 4 { 8 } else { granularity }, "enable_prefix_caching": caching, "policy": policy,
               "long_prefill_token_threshold": if knob.is_multiple_of(3) { 128 } else { 0 }})
    };
    let mut w = json!({"dataset_name": "random", "random_input_len": input, "random_output_len": output,
                       "random_range_ratio": range, "num_prompts": prompts, "ignore_eos": true,
                       "num_warmups": warmups, "initial_test_request": initial, "seed": seed});
    if closed {
        w["max_concurrency"] = json!(load);
        // Users that start one after another (`workload.concurrency_ramp_s`): a send that waits
        // for a user's start, not a completion.
        if knob % 5 == 3 {
            w["concurrency_ramp_s"] = json!(f64::from(knob % 7) * 0.3);
        }
    } else {
        w["request_rate"] = json!(f64::from(load) / 4.0);
    }
    // An earlier run's prompts (the warm-up phase resends the run's first ones): cache hits
    // from the start of the timed phase, on both datasets.
    let prior = if knob % 6 == 2 { prompts / 2 } else { 0 };
    w["prior_run_prompts"] = json!(prior);
    if knob % 4 == 1 {
        // Shared prefixes: cache hits, and the ignore_eos-free path of SGLang's reservation.
        w = json!({"dataset_name": "prefix_repetition", "prefix_repetition_prefix_len": input,
                   "prefix_repetition_suffix_len": 16 + input / 8, "prefix_repetition_num_prefixes": 1 + knob % 3,
                   "prefix_repetition_output_len": output, "num_prompts": prompts, "ignore_eos": true,
                   "num_warmups": warmups, "initial_test_request": initial, "seed": seed,
                   "max_concurrency": load, "prior_run_prompts": prior});
    }
    json!({"version": 1, "engine": engine, "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb", "workload": w})
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    /// Random scenarios, both engines, prefix caching on and off, small KV pools
    /// (preemption, retraction), chunked prefill, open and closed loop, warm-ups and the
    /// initial test request: the same bytes with and without the fast-forward.
    #[test]
    fn random_scenarios_give_the_same_bytes_with_and_without_fast_forward(
        sglang in any::<bool>(),
        caching in any::<bool>(),
        kv_tokens in prop_oneof![1_500u64..6_000, 6_000u64..60_000],
        granularity in prop_oneof![Just(1u32), Just(16u32), Just(4u32), Just(32u32)],
        chunk in prop_oneof![Just(256u32), Just(512u32), Just(2048u32), Just(8192u32)],
        input in 8u32..700,
        output in 1u32..300,
        range in prop_oneof![Just(0.0f64), Just(0.5f64), Just(0.9f64)],
        prompts in 1u32..40,
        closed in any::<bool>(),
        load in 1u32..48,
        warmups in 0u32..3,
        initial in any::<bool>(),
        knob in 0u32..1000,
        seed in 0u64..1000,
    ) {
        let v = random_scenario(sglang, caching, kv_tokens, granularity, chunk, input, output, range, prompts,
                                closed, load, warmups, initial, knob, seed);
        // Scenarios the resolver rejects (a prompt longer than the pool, say) say nothing here.
        let Ok(s) = sim::config::from_value(v.clone(), "") else { return Ok(()) };
        if sim::config::resolve(&s, &resources()).is_err() {
            return Ok(());
        }
        assert_same_both_ways(&v);
    }
}

/// SGLang's CPU overlap (`SglangBehaviour::cpu_overlap`, off by default): every step of an
/// overlap-scheduled run on a GPU, fast-forwarded or not, has the same shape, so the same
/// bytes both ways; and its steps are no slower than without it.
#[test]
fn sglang_cpu_overlap_gives_the_same_bytes_with_and_without_fast_forward() {
    for (version, load) in [("0.5.23", 8u32), ("0.4.10", 24), ("0.5.10", 3)] {
        let v = json!({"version": 1, "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
            "engine": {"kind": "sglang", "version": version, "max_total_tokens": 20_000},
            "workload": {"dataset_name": "random", "random_input_len": 300, "random_output_len": 120,
                         "random_range_ratio": 0.5, "num_prompts": 40, "ignore_eos": true,
                         "max_concurrency": load, "seed": 7}});
        let runs: Vec<(String, String, f64)> = [false, true]
            .iter()
            .flat_map(|&ff| {
                [false, true].map(|overlap| {
                    let mut s = spec(v.clone());
                    let sim::config::EngineSpec::Sglang(c) = &mut s.engine else { panic!("an SGLang scenario") };
                    c.behaviour.cpu_overlap = overlap;
                    let opts = RunOptions { fast_forward: ff, check_invariants: !ff, ..Default::default() };
                    let out = sim::simulate(&s, opts);
                    let report = serde_json::to_string(&sim::report::PointReport::of(&s, &out)).unwrap();
                    let r = &out.run;
                    let run = format!(
                        "{:?} {:?} {:?} {:?} {} {}",
                        r.records, r.token_log, r.counters, r.gauges, r.num_steps, r.end_ns
                    );
                    (report, run, out.metrics.tpot.mean)
                })
            })
            .collect();
        // [stepped off, stepped on, ff off, ff on]
        assert_eq!(runs[0].0, runs[2].0, "{version}: without the overlap, fast-forward changes the report");
        assert_eq!(runs[1].0, runs[3].0, "{version}: with the overlap, fast-forward changes the report");
        assert!(runs[1].1 == runs[3].1, "{version}: with the overlap, fast-forward changes the run");
        assert!(runs[1].2 < runs[0].2, "{version}: the CPU overlap does not shorten the steps");
    }
}
