//! Simulated time that would pass u64 nanoseconds stops the run with a
//! reason naming the cause, instead of wrapping into a fast-looking run. The
//! scenario boundary keeps valid inputs far from it (costs ≤ 1e7 µs, send
//! times within a year), so this drives the loop with a cost model set past
//! that boundary, as only library users can.

use serde_json::json;
use sim::config;
use sim::cost::{CoefficientSource, CostCoefficients};
use sim::simulation::{RunOptions, StopReason};

#[test]
fn an_overflowing_step_stops_the_run_naming_the_step_cost() {
    let v = json!({
        "version": 1,
        "engine": {"kind": "vllm", "kv_cache_tokens": 100000, "max_model_len": 4096},
        "model": "qwen2.5-7b-instruct",
        "hardware": "a100-80gb",
        "workload": {"dataset_name": "random", "random_input_len": 64, "random_output_len": 8,
                     "num_prompts": 4, "ignore_eos": true}
    });
    let s = config::from_value(v, "").unwrap();
    let mut spec = config::resolve(&s, &sim::builtin::resources().unwrap()).unwrap();
    spec.cost.overlay(&CostCoefficients { step_us: Some(1e16), ..Default::default() }, CoefficientSource::Scenario);
    spec.cost.composed = None; // the linear model, whose step_us was just set past the boundary
    let out = sim::simulate(&spec, RunOptions::default());
    match &out.run.stop {
        StopReason::Completed => panic!("a 1e16 µs step must not complete (it would have wrapped)"),
        other => {
            let text = format!("{other:?}");
            assert!(text.to_lowercase().contains("overflow"), "{text}");
        }
    }
}

/// The largest request a workload can make saturates at u32 rather than overflowing (the fuzzer
/// found `input + output` past u32 panicking here before the limits check could name it).
#[test]
fn the_largest_request_saturates_instead_of_overflowing() {
    use sim::workload::{Dataset, WorkloadParams};
    let params = |dataset| WorkloadParams {
        dataset,
        num_prompts: 1,
        num_warmups: 0,
        prior_run_prompts: 0,
        prior_run_prefixes: 0,
        request_rate: None,
        burstiness: 1.0,
        client: sim::workload::BenchClient::VllmBenchServe,
        max_concurrency: None,
        concurrency_ramp_ns: 0,
        measure_window_ns: None,
        ignore_eos: true,
        output_len_dist: None,
        initial_test_request: false,
        seed: 0,
        chat: false,
        role_chunk: false,
        eos_unstreamed: false,
        tokenize_prompt: false,
        special_tokens: 0,
        counts_server_prompt_tokens: true,
        context_clamp: None,
    };
    let big = u32::MAX / 2 + 1;
    let random = Dataset::Random { input_len: big, output_len: big, range_ratio: 0.0, prefix_len: big };
    assert_eq!(config::max_request_lengths(&params(random)), (u32::MAX, u32::MAX));
}
