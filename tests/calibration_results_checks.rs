//! `calibrate --from-results`: the checks of a result point against the scenario it is fitted
//! with (`calib::results::check_against_scenario`) and the traps of points whose figures
//! contradict each other (`calib::traps`).

use calib::results::parse_results;
use serde_json::{json, Value};

use crate::common::*;

/// A small vLLM scenario (random 4096/512 prompts, concurrency `c`), with `engine` as its kind.
fn scenario(kind: &str, c: Option<u32>, prompts: u32) -> sim::config::SimSpec {
    spec(json!({
        "version": 1, "engine": {"kind": kind}, "model": "qwen2.5-7b-instruct", "hardware": "rtx-5090",
        "workload": {"dataset_name": "random", "random_input_len": 4096, "random_output_len": 512,
                     "num_prompts": prompts, "max_concurrency": c, "ignore_eos": true}
    }))
}

fn point(text: Value) -> calib::results::ResultPoint {
    parse_results(&text.to_string(), "r.json").unwrap().remove(0)
}

/// A `backend` that names another engine's endpoint is refused naming it; a generic OpenAI
/// client's says nothing.
#[test]
fn a_backend_of_another_engine_is_refused() {
    let vllm = scenario("vllm", Some(4), 40);
    let sglang = scenario("sglang", Some(4), 40);
    for b in ["sglang", "sglang-oai", "sglang-oai-chat", "sglang-native", "SGLang", "lmdeploy", "trt"] {
        let e = calib::results::check_against_scenario(
            &point(json!({"backend": b, "max_concurrency": 4, "mean_ttft_ms": 500.0})),
            &vllm,
        )
        .unwrap_err();
        assert!(e.starts_with(&format!("backend: {b:?}")), "{e}");
    }
    for b in ["vllm", "vllm-chat"] {
        let p = point(json!({"backend": b, "max_concurrency": 4, "mean_ttft_ms": 500.0}));
        assert!(calib::results::check_against_scenario(&p, &sglang).unwrap_err().starts_with("backend"));
        calib::results::check_against_scenario(&p, &vllm).unwrap();
    }
    for b in ["openai", "openai-chat", "truss"] {
        let p = point(json!({"backend": b, "max_concurrency": 4, "mean_ttft_ms": 500.0}));
        calib::results::check_against_scenario(&p, &vllm).unwrap();
        calib::results::check_against_scenario(&p, &sglang).unwrap();
    }
}

/// `sglang.bench_serving`'s stated lengths other than the scenario's are refused naming the key
/// (without token totals they had been "cannot be checked"); the scenario's pass.
#[test]
fn stated_random_lengths_other_than_the_scenarios_are_refused() {
    let s = scenario("sglang", Some(4), 40);
    let p = |i: u64, o: u64| {
        point(json!({"backend": "sglang", "dataset_name": "random", "random_input_len": i, "random_output_len": o,
                     "max_concurrency": 4, "mean_ttft_ms": 500.0}))
    };
    let e = calib::results::check_against_scenario(&p(1024, 512), &s).unwrap_err();
    assert!(e.starts_with("random_input_len: the run was set to 1024 tokens, the scenario to 4096"), "{e}");
    let e = calib::results::check_against_scenario(&p(4096, 128), &s).unwrap_err();
    assert!(e.starts_with("random_output_len: the run was set to 128 tokens, the scenario to 512"), "{e}");
    calib::results::check_against_scenario(&p(4096, 512), &s).unwrap();
}

/// No `max_concurrency` key: the scenario's limit is assumed, and said naming the key (a `null`
/// says no limit: nothing to say).
#[test]
fn an_absent_max_concurrency_is_said() {
    let s = scenario("vllm", Some(4), 40);
    let w = calib::results::check_against_scenario(&point(json!({"request_rate": 2.0, "mean_ttft_ms": 500.0})), &s)
        .unwrap();
    assert!(
        w.len() == 1 && w[0].starts_with("max_concurrency: not in the file: the scenario's max_concurrency 4"),
        "{w:?}"
    );
    let w = calib::results::check_against_scenario(
        &point(json!({"request_rate": 2.0, "max_concurrency": null, "mean_ttft_ms": 500.0})),
        &s,
    )
    .unwrap();
    assert!(w.is_empty(), "{w:?}");
}

/// A peak in flight that the limit cannot give, counted over 1-second buckets as vllm bench serve
/// counts it, is refused naming both keys; the 2 a slot a bucket can hold of 4-second requests
/// (8 at a limit of 4, as servesim's own report of this load says) is read.
#[test]
fn a_peak_in_flight_the_limit_cannot_give_is_refused() {
    let s = scenario("vllm", Some(4), 40);
    let p = |peak: u64| point(json!({"max_concurrency": 4, "max_concurrent_requests": peak, "mean_ttft_ms": 500.0}));
    let e = calib::results::check_against_scenario(&p(40), &s).unwrap_err();
    assert!(e.starts_with("max_concurrent_requests 40 is above what max_concurrency 4 allows, 8"), "{e}");
    calib::results::check_against_scenario(&p(8), &s).unwrap();
}

/// Through the command: a SGLang-native result fitted to a vLLM scenario is refused naming
/// `backend`, before any fit.
#[test]
fn the_command_refuses_a_sglang_result_on_a_vllm_scenario() {
    let f = write_temp(
        "sg_on_vllm.jsonl",
        "{\"backend\": \"sglang\", \"max_concurrency\": 1, \"request_rate\": Infinity, \"mean_ttft_ms\": 285.8, \"mean_tpot_ms\": 10.75}\n",
    );
    let scenario = root().join("scenarios/rtx5090-qwen2.5-7b-vllm.json");
    let out = scratch().join("sg_on_vllm.profile.json");
    let o = run_cli(&[
        "calibrate",
        "--from-results",
        f.to_str().unwrap(),
        "--scenario",
        scenario.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success() && err.contains("#0: backend: \"sglang\""), "{err}");
}
