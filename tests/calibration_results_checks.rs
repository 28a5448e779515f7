//! `calibrate --from-results`: the checks of a result point against the scenario it is fitted
//! with (`calib::results::check_against_scenario`) and the traps of points whose figures
//! contradict each other (`calib::traps`).

use calib::fit::{FitPoint, TARGETS};
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
/// (without token totals they had been "cannot be checked"); the scenario's pass. A line at
/// `random_range_ratio` 1 has fixed lengths.
#[test]
fn stated_random_lengths_other_than_the_scenarios_are_refused() {
    let s = scenario("sglang", Some(4), 40);
    let p = |i: u64, o: u64| {
        point(json!({"backend": "sglang", "dataset_name": "random", "random_input_len": i, "random_output_len": o,
                     "random_range_ratio": 1.0, "max_concurrency": 4, "mean_ttft_ms": 500.0}))
    };
    let e = calib::results::check_against_scenario(&p(1024, 512), &s).unwrap_err();
    assert!(e.starts_with("random_input_len: the run was set to random_input_len 1024, random_output_len 512"), "{e}");
    assert!(e.contains("--set workload.random_input_len=1024 --set workload.random_output_len=512"), "{e}");
    let e = calib::results::check_against_scenario(&p(4096, 128), &s).unwrap_err();
    assert!(e.starts_with("random_output_len: the run was set to random_input_len 4096, random_output_len 128"), "{e}");
    calib::results::check_against_scenario(&p(4096, 512), &s).unwrap();
}

/// SGLang's `random_range_ratio` r draws lengths on [max(⌊L·r⌋, 1), L], not servesim's (vLLM's)
/// [L(1−r), L(1+r)]: a line at r is compared as servesim's L(1+r)/2 at ratio (1−r)/(1+r) (it was
/// never read: a line at r = 0.5, mean input 3,072, passed against a scenario of fixed 4,096);
/// r = 0, SGLang's default (and a line without the key), cannot be expressed and is refused.
#[test]
fn sglangs_range_ratio_is_mapped_to_servesims() {
    let line = |ds: &str, r: Option<f64>| {
        let mut m = json!({"backend": "sglang", "dataset_name": ds, "random_input_len": 4096,
                           "random_output_len": 512, "max_concurrency": 4, "mean_ttft_ms": 500.0});
        if let Some(r) = r {
            m["random_range_ratio"] = r.into();
        }
        point(m)
    };
    let fixed = scenario("sglang", Some(4), 40);
    for ds in ["random", "random-ids"] {
        let e = calib::results::check_against_scenario(&line(ds, Some(0.5)), &fixed).unwrap_err();
        assert!(e.starts_with("random_input_len: the run was set to random_input_len 4096"), "{e}");
        assert!(
            e.contains(
                "--set workload.random_input_len=3072 --set workload.random_output_len=384 --set \
                 workload.random_range_ratio=0.3333"
            ),
            "{e}"
        );
        for r in [Some(0.0), None] {
            let e = calib::results::check_against_scenario(&line(ds, r), &fixed).unwrap_err();
            assert!(e.starts_with("random_range_ratio: the line has"), "{e}");
            assert!(e.contains("--random-range-ratio 1"), "{e}");
        }
        assert!(e_of(&line(ds, None), &fixed).contains("default 0.0"));
        calib::results::check_against_scenario(&line(ds, Some(1.0)), &fixed).unwrap();
    }
    // The mapped workload passes (within a token and 0.001 of the ratio); the same lengths at
    // another ratio are refused naming it.
    let mapped = spec(json!({
        "version": 1, "engine": {"kind": "sglang"}, "model": "qwen2.5-7b-instruct", "hardware": "rtx-5090",
        "workload": {"dataset_name": "random", "random_input_len": 3072, "random_output_len": 384,
                     "random_range_ratio": 0.3333, "num_prompts": 40, "max_concurrency": 4, "ignore_eos": true}
    }));
    calib::results::check_against_scenario(&line("random", Some(0.5)), &mapped).unwrap();
    calib::results::check_against_scenario(&line("random-ids", Some(0.5)), &mapped).unwrap();
    let e = calib::results::check_against_scenario(&line("random", Some(0.6)), &mapped).unwrap_err();
    assert!(e.starts_with("random_input_len"), "{e}");
    let off = spec(json!({
        "version": 1, "engine": {"kind": "sglang"}, "model": "qwen2.5-7b-instruct", "hardware": "rtx-5090",
        "workload": {"dataset_name": "random", "random_input_len": 3072, "random_output_len": 384,
                     "random_range_ratio": 0.2, "num_prompts": 40, "max_concurrency": 4, "ignore_eos": true}
    }));
    let e = calib::results::check_against_scenario(&line("random", Some(0.5)), &off).unwrap_err();
    assert!(e.starts_with("random_range_ratio: the run was set to"), "{e}");
}

fn e_of(p: &calib::results::ResultPoint, s: &sim::config::SimSpec) -> String {
    calib::results::check_against_scenario(p, s).unwrap_err()
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

fn fit_point(name: &str, c: u32, values: &[(&str, f64)]) -> FitPoint {
    let mut measured = vec![None; TARGETS.len()];
    for (k, v) in values {
        measured[TARGETS.iter().position(|t| t.key() == *k).unwrap()] = Some(*v);
    }
    FitPoint { name: name.into(), spec: scenario("vllm", Some(c), 40), measured, replay: None }
}

/// A throughput above what the requests in flight can emit at the point's own mean TPOT (a TPOT
/// in µs at concurrency 4 beside 304.6 tok/s had fitted a step cost 11.6x the prior with no
/// word): flagged, its decode figures and throughput excluded, its TTFT kept. A physical point
/// (the same throughput at TPOT 12.03 ms) is not.
#[test]
fn a_throughput_beyond_the_points_own_tpot_is_flagged() {
    let at = |k: &str| TARGETS.iter().position(|t| t.key() == k).unwrap();
    let mut pts = vec![fit_point(
        "us",
        4,
        &[
            ("mean_ttft_ms", 569.7),
            ("mean_tpot_ms", 12034.485),
            ("mean_itl_ms", 12034.485),
            ("output_throughput", 304.63),
        ],
    )];
    let traps = calib::traps::flag_throughput_beyond_tpot(&mut pts);
    assert_eq!(traps.len(), 1, "{traps:?}");
    assert_eq!(traps[0].kind, "throughput_beyond_tpot");
    assert!(traps[0].why.starts_with("output throughput 304.6 tok/s is above what 4 request(s)"), "{}", traps[0].why);
    assert!(pts[0].measured[at("mean_tpot_ms")].is_none() && pts[0].measured[at("output_throughput")].is_none());
    assert!(pts[0].measured[at("mean_itl_ms")].is_none() && pts[0].measured[at("mean_ttft_ms")].is_some());
    let mut ok =
        vec![fit_point("ms", 4, &[("mean_ttft_ms", 569.7), ("mean_tpot_ms", 12.034), ("output_throughput", 304.63)])];
    assert!(calib::traps::flag_throughput_beyond_tpot(&mut ok).is_empty());
    // At the exact bound of fixed 512-token outputs (4 × 1000 ÷ 12.034 × 512/511): not flagged.
    let mut edge = vec![fit_point("edge", 4, &[("mean_tpot_ms", 12.034), ("output_throughput", 333.0)])];
    assert!(calib::traps::flag_throughput_beyond_tpot(&mut edge).is_empty());
}

/// A TPOT that falls with load is flagged against the nearest lower-load point that has one,
/// not only a neighbour: c1, c4 without TPOT, c16 at 0.8 × c1's (it had passed).
#[test]
fn an_ordering_skips_a_point_without_the_metric() {
    let mut pts = vec![
        fit_point("c1", 1, &[("mean_tpot_ms", 10.73), ("output_throughput", 88.8)]),
        fit_point("c4", 4, &[("output_throughput", 304.6)]),
        fit_point("c16", 16, &[("mean_tpot_ms", 8.58), ("output_throughput", 673.5)]),
    ];
    let traps = calib::traps::flag(&mut pts);
    let o: Vec<_> = traps.iter().filter(|t| t.kind == "ordering").collect();
    assert_eq!(o.len(), 1, "{traps:?}");
    assert_eq!(o[0].point, "c16");
    assert!(o[0].why.starts_with("mean_tpot_ms falls from 10.73 at c1 to 8.58"), "{}", o[0].why);
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

/// An SGLang line's `server_info` (0.5.6+) is compared as a top-level `engine_version` and
/// `model_id` are (it was never read: a TP-2 run of another release was fitted as the scenario's):
/// another `version` or `tp_size` is refused naming it, another model path warned about.
#[test]
fn an_sglang_lines_server_info_is_compared_with_the_scenario() {
    let s = scenario("sglang", Some(4), 40);
    let version = s.engine.version().to_string();
    let p = |info: Value| {
        point(json!({"backend": "sglang", "max_concurrency": 4, "mean_ttft_ms": 500.0, "server_info": info}))
    };
    let same = json!({"version": version, "tp_size": 1, "model_path": "Qwen/Qwen2.5-7B-Instruct"});
    assert!(calib::results::check_against_scenario(&p(same.clone()), &s).unwrap().is_empty());
    // A post-release of the scenario's release is that release (SGLang reports `0.5.6.post2`).
    let mut post = same.clone();
    post["version"] = format!("{version}.post2").into();
    assert!(calib::results::check_against_scenario(&p(post), &s).unwrap().is_empty());
    let mut other = same.clone();
    other["version"] = "0.0.1".into();
    let e = calib::results::check_against_scenario(&p(other), &s).unwrap_err();
    assert!(e.starts_with("server_info.version: the server was SGLang 0.0.1"), "{e}");
    let mut other = same.clone();
    other["tp_size"] = 2.into();
    let e = calib::results::check_against_scenario(&p(other.clone()), &s).unwrap_err();
    assert!(e.starts_with("server_info.tp_size: the server ran on 2 GPUs"), "{e}");
    // A disaggregated server's first decode entry is read.
    let e = calib::results::check_against_scenario(&p(json!({"decode": [other]})), &s).unwrap_err();
    assert!(e.starts_with("server_info.tp_size"), "{e}");
    let mut other = same;
    other["model_path"] = "/models/Llama-3.1-8B".into();
    let w = calib::results::check_against_scenario(&p(other), &s).unwrap();
    assert!(w.len() == 1 && w[0].starts_with("server_info.model_path is \"/models/Llama-3.1-8B\""), "{w:?}");
    // A line whose server did not answer (null) says nothing.
    calib::results::check_against_scenario(&p(Value::Null), &s).unwrap();
}
