//! A point that may be a fresh vLLM server's first requests: every request sent at once with
//! nothing before it. vLLM does not warm itself up (SGLang does), so each of those TTFTs may carry
//! the server's one-off first-request costs; `calib::traps::flag_cold_server` leaves them out of
//! the fit. Issue #13, "traps in the data, flagged before the fit".

use calib::fit::{predict, FitPoint, TARGETS};
use calib::identify::linear_prior;
use calib::procedure::calibrate_from_results;
use calib::traps::flag_cold_server;
use serde_json::json;
use sim::config::{self, SimSpec};

/// Qwen2.5-7B on an A100-80GB: 4 random prompts of 512 tokens, 128 outputs, all 4 in flight,
/// no initial test request, on the engine `kind` `version`; `workload`'s keys override these.
fn spec(kind: &str, version: &str, workload: serde_json::Value) -> SimSpec {
    let mut w = json!({"dataset_name": "random", "random_input_len": 512, "random_output_len": 128,
                       "num_prompts": 4, "max_concurrency": 4, "ignore_eos": true,
                       "initial_test_request": false, "seed": 3});
    for (k, v) in workload.as_object().unwrap() {
        w[k] = v.clone();
    }
    let v = json!({"version": 1, "engine": {"kind": kind, "version": version},
                   "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb", "workload": w});
    let s = config::from_value(v, "").unwrap();
    config::resolve(&s, &sim::builtin::resources().unwrap()).unwrap()
}

fn idx(t: &str) -> usize {
    TARGETS.iter().position(|x| x.key() == t).unwrap()
}

/// The simulated point at the prior, its mean and p99 TTFT `ttft_scale` times the simulated
/// (a cold server's first requests), everything else as simulated.
fn point(s: SimSpec, ttft_scale: f64) -> FitPoint {
    let full = predict(&s, &linear_prior(&s.cost));
    let mut measured = vec![None; TARGETS.len()];
    for k in ["mean_ttft_ms", "p99_ttft_ms", "mean_tpot_ms", "mean_e2el_ms", "output_throughput"] {
        let scale = if k.contains("ttft") { ttft_scale } else { 1.0 };
        measured[idx(k)] = full[idx(k)].map(|v| v * scale);
    }
    FitPoint { name: "r.json#0".into(), spec: s, measured, replay: None }
}

#[test]
fn a_single_unwarmed_wave_on_vllm_loses_its_ttfts_and_keeps_the_rest() {
    let mut pts = vec![point(spec("vllm", "0.11.0", json!({})), 1.0)];
    let traps = flag_cold_server(&mut pts);
    assert_eq!(traps.len(), 1, "{traps:?}");
    assert_eq!((traps[0].kind, traps[0].action), ("cold_server", "excluded"));
    assert_eq!(traps[0].metrics, vec!["mean_ttft_ms".to_string(), "p99_ttft_ms".to_string()]);
    let m = &pts[0].measured;
    assert!(m[idx("mean_ttft_ms")].is_none() && m[idx("p99_ttft_ms")].is_none());
    for k in ["mean_tpot_ms", "mean_e2el_ms", "output_throughput"] {
        assert!(m[idx(k)].is_some(), "{k} kept");
    }
}

#[test]
fn a_warmed_server_a_later_wave_an_open_loop_or_sglang_is_not_flagged() {
    let cases = [
        ("sglang, which warms itself up", spec("sglang", "0.5.3", json!({}))),
        ("an initial test request", spec("vllm", "0.11.0", json!({"initial_test_request": true}))),
        ("warm-ups", spec("vllm", "0.11.0", json!({"num_warmups": 2}))),
        ("an earlier run's prompts", spec("vllm", "0.11.0", json!({"prior_run_prompts": 4}))),
        ("more prompts than the concurrency", spec("vllm", "0.11.0", json!({"num_prompts": 8}))),
        ("a request rate", spec("vllm", "0.11.0", json!({"request_rate": 2.0}))),
    ];
    for (what, s) in cases {
        let mut pts = vec![point(s, 1.0)];
        assert!(flag_cold_server(&mut pts).is_empty(), "{what}");
        assert!(pts[0].measured[idx("mean_ttft_ms")].is_some(), "{what}");
    }
}

/// A trace times its own arrivals: rows spread over time are not one wave (the llm-d exp-0
/// replay was flagged as "all 252 requests were sent at once"), rows that all arrive at 0 are.
#[test]
fn a_trace_is_one_wave_only_when_its_rows_arrive_together() {
    let flagged = |arrivals: [f64; 4]| {
        let spec_json = json!({"version": 1, "engine": {"kind": "vllm", "version": "0.11.0"},
                               "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
                               "workload": {"dataset_name": "trace", "trace": "t.csv",
                                            "num_prompts": 4, "ignore_eos": true,
                                            "initial_test_request": false, "seed": 3}});
        let mut res = sim::builtin::resources().unwrap();
        res.trace = Some(
            arrivals
                .iter()
                .map(|&arrival_time| sim::workload::TraceRow {
                    arrival_time,
                    input_len: 512,
                    output_len: 128,
                    prefix_group: None,
                    prefix_len: None,
                    priority: None,
                })
                .collect(),
        );
        let s = config::resolve(&config::from_value(spec_json, "").unwrap(), &res).unwrap();
        !flag_cold_server(&mut [point(s, 1.0)]).is_empty()
    };
    assert!(!flagged([0.0, 1.5, 3.0, 4.5]), "spread arrivals are not one wave");
    assert!(flagged([0.0, 0.0, 0.0, 0.0]), "a trace that sends everything at once is");
}

/// Through `calibrate --from-results`: a TTFT 1.6x the engine's (the cold costs) moves the
/// prefill cost when the scenario says the server was warmed, and leaves it at the prior when
/// the point is one unwarmed wave, whose profile names the trap.
#[test]
fn the_cold_ttft_does_not_reach_the_prefill_cost() {
    let fit = |s: SimSpec| {
        let p = calibrate_from_results(&[point(s, 1.6)], 300, vec!["r.json".into()], "s.json".into()).unwrap();
        let v = serde_json::to_value(&p).unwrap();
        let ratio =
            v["coefficients"]["prefill_token_us"].as_f64().unwrap() / v["prior"]["prefill_token_us"].as_f64().unwrap();
        (ratio, v["traps"].clone(), v["coefficient_sources"]["prefill_token_us"].clone())
    };
    let (warm_ratio, _, warm_source) = fit(spec("vllm", "0.11.0", json!({"prior_run_prompts": 0, "num_warmups": 1})));
    assert!(warm_ratio > 1.2, "a warmed server's slow TTFT is fitted as prefill: x{warm_ratio}");
    assert_eq!(warm_source, "data");
    let (cold_ratio, traps, cold_source) = fit(spec("vllm", "0.11.0", json!({})));
    assert!((cold_ratio - 1.0).abs() < 0.05, "the prefill cost stays at the prior: x{cold_ratio}");
    assert_eq!(cold_source, "prior");
    assert!(traps.as_array().unwrap().iter().any(|t| t["kind"] == "cold_server"), "{traps}");
}
