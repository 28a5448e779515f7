//! The command line as users and notebooks call it.

use crate::common::*;

const SAVE_RESULT_KEYS: &[&str] = &[
    "max_concurrency",
    "request_rate",
    "num_prompts",
    "completed",
    "duration",
    "total_input_tokens",
    "total_output_tokens",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "num_preemptions",
    "prefix_cache_hit_rate",
    "kv_cache_tokens",
    "kv_cache_usage_peak",
    "seed",
];

#[test]
fn simulate_without_a_scenario_runs_the_built_in_default() {
    let o = run_cli(&["simulate"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout);
    for line in [
        "============ Serving Benchmark Result ============",
        "Successful requests:                     20",
        "Maximum request concurrency:             1",
        "Total input tokens:                      81920",
        "Total generated tokens:                  10240",
        "Mean TTFT (ms):",
        "P99 ITL (ms):",
        "KV cache size (tokens):                  194880",
        "KV-limited concurrency:                  42",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}

/// `--metric-percentiles` takes any list, as `vllm bench serve` does (numpy's percentiles): the
/// text report has a line per percentile, in order, and the ones `--json` carries agree with it.
#[test]
fn any_metric_percentiles_are_reported_as_vllm_bench_serve_does() {
    let s = "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json";
    let o = run_cli(&["simulate", s, "--metric-percentiles", "25,50,99.9", "--percentile-metrics", "ttft,e2el"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let value = |label: &str| -> f64 {
        let line = text.lines().find(|l| l.starts_with(label)).unwrap_or_else(|| panic!("no {label:?} in:\n{text}"));
        line[label.len()..].trim().parse().unwrap()
    };
    let j = stdout_json(&run_cli(&["simulate", s, "--json"]));
    for (name, key) in [("TTFT", "ttft"), ("E2EL", "e2el")] {
        let (p25, p50, p999) = (
            value(&format!("P25 {name} (ms):")),
            value(&format!("P50 {name} (ms):")),
            value(&format!("P99.9 {name} (ms):")),
        );
        assert!(p25 <= p50 && p50 <= p999, "{name}: {p25} {p50} {p999}");
        let max = j[format!("max_{key}_ms")].as_f64().unwrap();
        assert!(p999 <= max && p999 >= j[format!("p99_{key}_ms")].as_f64().unwrap(), "{name}");
        assert!((p50 - j[format!("p50_{key}_ms")].as_f64().unwrap()).abs() < 0.01, "{name}");
    }
    assert!(!text.contains("P25 TPOT"), "only the metrics asked for");
    // `--json` carries the percentiles asked for beyond its own, under vLLM's keys and equal to
    // the text's (they had been dropped from it unsaid); none unless asked for.
    let jx = stdout_json(&run_cli(&["simulate", s, "--json", "--metric-percentiles", "25,99.9,0.00001"]));
    for (name, key) in [("TTFT", "ttft"), ("E2EL", "e2el")] {
        for (p, word) in [("25", "25"), ("99.9", "99.9")] {
            let v = jx[format!("p{word}_{key}_ms")].as_f64().unwrap_or_else(|| panic!("no p{word}_{key}_ms in {jx}"));
            assert!((v - value(&format!("P{p} {name} (ms):"))).abs() < 0.006, "{name} p{p}");
        }
        assert!(jx[format!("p1e-05_{key}_ms")].is_f64(), "Python's str(1e-05) names the key");
    }
    assert!(j.as_object().unwrap().keys().all(|k| !k.starts_with("p25_") && !k.starts_with("p99.9_")), "{j}");
    // A percentile given twice is one key (a key twice is a file servesim's readers refuse).
    let o = run_cli(&["simulate", s, "--json", "--metric-percentiles", "99.9,99.9"]);
    assert_eq!(String::from_utf8_lossy(&o.stdout).matches("\"p99.9_ttft_ms\"").count(), 1);
}

/// An earlier run's prompts (`prior_run_prompts`): the default scenario's 20 prompts sent
/// before it leave them cached, so each timed request prefills one block's worth at most; the
/// text report says why the TTFT is what it is.
#[test]
fn prior_run_prompts_leave_the_runs_prompts_cached() {
    let cold = stdout_json(&run_cli(&["simulate", "--json"]));
    let warm = stdout_json(&run_cli(&["simulate", "--json", "--set", "workload.prior_run_prompts=20"]));
    assert_eq!(cold["prefix_cache_hit_rate"], 0.0);
    let hit = warm["prefix_cache_hit_rate"].as_f64().unwrap();
    // Every prompt but its last, partial block: 4096 tokens of 16-token blocks, one recomputed.
    assert!(hit > 0.99 && hit < 1.0, "hit rate {hit}");
    let (c, w) = (cold["mean_ttft_ms"].as_f64().unwrap(), warm["mean_ttft_ms"].as_f64().unwrap());
    assert!(w < c / 10.0, "a cached prompt's TTFT {w} ms against {c} ms cold");
    // The timed run is otherwise the same: the same outputs, the same decode.
    assert_eq!(cold["total_output_tokens"], warm["total_output_tokens"]);
    let (ct, wt) = (cold["mean_tpot_ms"].as_f64().unwrap(), warm["mean_tpot_ms"].as_f64().unwrap());
    assert!((ct - wt).abs() < 0.01 * ct, "TPOT {wt} against {ct}");
    let o = run_cli(&["simulate", "--set", "workload.prior_run_prompts=20"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("Note: the run's first 20 prompts were sent before it"));
}

#[test]
fn simulate_json_carries_the_save_result_keys() {
    let j = stdout_json(&run_cli(&["simulate", "--json"]));
    for k in SAVE_RESULT_KEYS {
        assert!(j.get(*k).is_some(), "missing key {k}");
    }
    for m in ["ttft", "tpot", "itl", "e2el"] {
        for s in ["mean", "median", "std", "p50", "p90", "p95", "p99"] {
            let k = format!("{s}_{m}_ms");
            // At concurrency 1 with no initial test request (vLLM >= 0.14 skips it) every TTFT is the
            // same, so its standard deviation is exactly 0; every other statistic is positive.
            let ok = if s == "std" {
                j[&k].as_f64().is_some_and(|v| v >= 0.0)
            } else {
                j[&k].as_f64().is_some_and(|v| v > 0.0)
            };
            assert!(ok, "{k} = {}", j[&k]);
        }
    }
    assert_eq!(j["request_rate"], "inf");
    assert_eq!(j["completed"], 20);
    assert_eq!(j["kv_limited_concurrency"], 42);
}

#[test]
fn set_overrides_any_field_by_its_path() {
    let j = stdout_json(&run_cli(&[
        "simulate",
        "--json",
        "--set",
        "engine.max_num_seqs=64",
        "--set",
        "workload.num_prompts=5",
    ]));
    assert_eq!(j["completed"], 5);
    let j = stdout_json(&run_cli(&[
        "simulate",
        "--json",
        "--set",
        "workload.max_concurrency=4",
        "--set",
        "workload.num_prompts=8",
    ]));
    assert_eq!(j["max_concurrency"], 4);
}

#[test]
fn sweep_finds_the_knee_past_the_kv_limited_concurrency() {
    let o = run_cli(&["sweep", "--concurrency", "1,8,16,32,64,128", "--num-prompts", "24,48,96,192,384,768", "--json"]);
    let j = stdout_json(&o);
    assert_eq!(j["kv_limited_concurrency"], 42);
    let points = j["points"].as_array().unwrap();
    assert_eq!(points.len(), 6);
    for (p, c) in points.iter().zip([1, 8, 16, 32, 64, 128]) {
        assert_eq!(p["max_concurrency"], c, "points are in input order");
    }
    let knee = j["knee"]["max_concurrency"].as_u64().expect("a knee within the sweep");
    assert!((16..=64).contains(&knee), "knee at {knee}");
    // Past the KV-limited concurrency, TTFT explodes while throughput is flat.
    let ttft = |i: usize| points[i]["mean_ttft_ms"].as_f64().unwrap();
    let thr = |i: usize| points[i]["output_throughput"].as_f64().unwrap();
    assert!(ttft(5) > 5.0 * ttft(3), "TTFT at 128 {} vs at 32 {}", ttft(5), ttft(3));
    assert!(thr(5) < 1.1 * thr(4));
    assert!(points[5]["peak_running"].as_u64().unwrap() <= 128);
}

#[test]
fn sweep_text_reports_the_knee_and_the_kv_limit() {
    let o = run_cli(&["sweep", "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json", "--concurrency", "1,8,16,64"]);
    assert!(o.status.success());
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(t.contains("concurrency") && t.contains("out tok/s"));
    assert!(t.contains("KV-limited concurrency: 10."), "{t}");
    assert!(t.contains("<- knee"), "{t}");
}

#[test]
fn traces_replay_from_csv_and_jsonl() {
    let csv = write_temp(
        "trace.csv",
        "arrival_time,input_len,output_len,prefix_group,prefix_len\n0.0,512,32,1,256\n0.1,400,16,1,256\n0.25,300,8,,\n",
    );
    let jsonl = write_temp(
        "trace.jsonl",
        "{\"arrival_time\": 0.0, \"input_len\": 512, \"output_len\": 32, \"prefix_group\": 1, \"prefix_len\": 256}\n{\"arrival_time\": 0.1, \"input_len\": 400, \"output_len\": 16, \"prefix_group\": 1, \"prefix_len\": 256}\n{\"arrival_time\": 0.25, \"input_len\": 300, \"output_len\": 8}\n",
    );
    // The same trace from a spreadsheet that quotes every field (RFC 4180).
    let quoted = write_temp(
        "trace_quoted.csv",
        "\"arrival_time\",\"input_len\",\"output_len\",\"prefix_group\",\"prefix_len\"\n\"0.0\",\"512\",\"32\",\"1\",\"256\"\n0.1,400,16,1,256\n0.25,300,8,\"\",\n",
    );
    let mut outs = vec![];
    for t in [csv, jsonl, quoted] {
        let s = format!(
            r#"{{"version": 1, "engine": {{"kind": "vllm", "max_model_len": 4096}}, "model": "qwen2.5-7b-instruct", "hardware": "h100-80gb",
                "workload": {{"dataset_name": "trace", "trace": "{}", "ignore_eos": true, "initial_test_request": false}}}}"#,
            t.display()
        );
        let p = write_temp("trace_scenario.json", &s);
        let j = stdout_json(&run_cli(&["simulate", p.to_str().unwrap(), "--json"]));
        assert_eq!(j["completed"], 3);
        assert_eq!(j["total_input_tokens"], 1212);
        assert_eq!(j["total_output_tokens"], 56);
        // The second request shares a 256-token prefix with the first: 16 blocks hit.
        assert_eq!(j["prefix_cache_hits"], 256);
        outs.push(j);
    }
    assert_eq!(outs[0], outs[1], "CSV and JSONL of the same trace give the same run");
    assert_eq!(outs[0], outs[2], "quoted CSV fields read as unquoted ones");
    let bad = write_temp("bad_trace.csv", "arrival_time,input_len,output_len\n0.0,abc,3\n");
    let s = format!(
        r#"{{"version": 1, "engine": {{"kind": "vllm"}}, "model": "qwen2.5-7b-instruct", "hardware": "h100-80gb",
            "workload": {{"dataset_name": "trace", "trace": "{}", "ignore_eos": true}}}}"#,
        bad.display()
    );
    let p = write_temp("bad_trace_scenario.json", &s);
    let o = run_cli(&["simulate", p.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2));
    assert!(err.contains("bad_trace.csv:2") && err.contains("input_len"), "{err}");
}

#[test]
fn sweep_puts_engines_side_by_side_with_the_alignment_table() {
    let o = run_cli(&[
        "sweep",
        "scenarios/rtx5090-qwen2.5-7b-vllm.json",
        "scenarios/rtx5090-qwen2.5-7b-sglang.json",
        "--concurrency",
        "1,16,64",
        "--num-prompts",
        "8,32,128",
        "--json",
    ]);
    let j = stdout_json(&o);
    let sc = j["scenarios"].as_array().unwrap();
    assert_eq!(sc.len(), 2);
    assert_eq!(sc[0]["engine"], "vllm");
    assert_eq!(sc[1]["engine"], "sglang");
    assert_eq!(sc[1]["points"].as_array().unwrap().len(), 3);
    let rows = j["alignment"].as_array().unwrap();
    let row = |k: &str| rows.iter().find(|r| r["knob"] == k).unwrap_or_else(|| panic!("no row {k}"));
    assert_eq!(row("running cap")["vllm_flag"], "max_num_seqs");
    assert_eq!(row("running cap")["sglang_flag"], "max_running_requests");
    assert_eq!(row("running cap")["differs"], false);
    assert_eq!(row("KV pool (tokens)")["differs"], true, "194,880 vs 210,714");
    assert_eq!(row("KV granularity (tokens)")["differs"], true, "block 16 vs page 1");
    // Each engine's default per-step token cap on a 32 GB card: vLLM 0.28 2048 batched
    // tokens, SGLang 0.5.21 a 4096-token chunk.
    assert_eq!(row("per-step token cap")["differs"], true);
    let moved = j["knobs_moved"].as_array().unwrap();
    assert_eq!(moved.len(), 3, "{moved:?}");
    // The text form warns that three knobs moved at once.
    let t = run_cli(&[
        "sweep",
        "scenarios/rtx5090-qwen2.5-7b-vllm.json",
        "scenarios/rtx5090-qwen2.5-7b-sglang.json",
        "--concurrency",
        "1,16",
        "--num-prompts",
        "4,16",
    ]);
    let text = String::from_utf8_lossy(&t.stdout);
    // Three knobs and the client: vLLM 0.28's skips the initial test request, an SGLang
    // scenario's sends it (the first prompt is then cached on one side only).
    assert!(text.contains("Flag alignment") && text.contains("moves 4 things at once"), "{text}");
    // vLLM against SGLang on the same card and model: nothing else differs.
    assert_eq!(
        j["setup_differs"],
        serde_json::json!([
            "benchmark client before the timed run (leaves the first prompt cached): no initial test request / initial test request"
        ])
    );
}

/// Side by side, what differs beyond the aligned knobs is listed and counted: a GPU swap showed
/// as one moved knob (its default token budget) and nothing else (the invariant hunt of
/// 2026-12-04); an engine field outside the aligned knobs is listed by name.
#[test]
fn side_by_side_lists_what_differs_beyond_the_aligned_knobs() {
    let base = std::fs::read_to_string(root().join("scenarios/rtx5090-qwen2.5-7b-vllm.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&base).unwrap();
    v["hardware"] = "h100-80gb".into();
    let h100 = write_temp("side-h100.json", &v.to_string());
    let mut v: serde_json::Value = serde_json::from_str(&base).unwrap();
    v["engine"]["async_scheduling"] = true.into();
    let async_on = write_temp("side-async.json", &v.to_string());
    let base = root().join("scenarios/rtx5090-qwen2.5-7b-vllm.json");
    let sweep = |other: &std::path::Path, json: bool| {
        let mut a = vec![
            "sweep",
            base.to_str().unwrap(),
            other.to_str().unwrap(),
            "--concurrency",
            "1,8",
            "--num-prompts",
            "4,16",
        ];
        if json {
            a.push("--json");
        }
        run_cli(&a)
    };
    let j = stdout_json(&sweep(&h100, true));
    let setup: Vec<&str> = j["setup_differs"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
    assert_eq!(setup, ["hardware: rtx-5090 x1 / h100-80gb x1"]);
    let text = String::from_utf8_lossy(&sweep(&h100, false).stdout).to_string();
    assert!(text.contains("Also differ") && text.contains("moves 2 things at once"), "{text}");
    let j = stdout_json(&sweep(&async_on, true));
    let setup: Vec<&str> = j["setup_differs"].as_array().unwrap().iter().map(|x| x.as_str().unwrap()).collect();
    assert_eq!(setup, ["engine.async_scheduling: unset / true"]);
}

#[test]
fn set_engine_kind_runs_one_scenario_on_both_engines_with_translated_flags() {
    let j = stdout_json(&run_cli(&[
        "sweep",
        "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json",
        "--set",
        "engine.kind=vllm,sglang",
        "--concurrency",
        "1,16",
        "--json",
    ]));
    let sc = j["scenarios"].as_array().unwrap();
    assert_eq!(sc.len(), 2);
    assert_eq!(sc[1]["engine"], "sglang");
    // num_gpu_blocks_override 641 (block 16) became max_total_num_tokens 10,240; max_num_seqs became max_running_requests.
    assert_eq!(sc[1]["points"][0]["kv_cache_tokens"], 10240);
    assert_eq!(sc[0]["points"][0]["kv_cache_tokens"], 10240);
    let moved: Vec<&str> = j["knobs_moved"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
    assert_eq!(moved, vec!["KV granularity (tokens)"]);
    assert_eq!(j["workloads_differ"], false);
}

#[test]
fn explain_says_why_ttft_explodes_past_the_kv_limited_concurrency() {
    let j = stdout_json(&run_cli(&["explain", "--concurrency", "64", "--json"]));
    assert_eq!(j["kv_limited_concurrency"], 42);
    assert_eq!(j["binding_limit"], "kv_pool");
    let b = &j["ttft_breakdown"];
    let (ttft, queue) = (b["mean_ttft_ms"].as_f64().unwrap(), b["mean_queue_wait_ms"].as_f64().unwrap());
    assert!(queue > 0.5 * ttft, "past the limit TTFT is mostly queue wait: {queue} of {ttft}");
    let sum = queue
        + b["mean_prefill_ms"].as_f64().unwrap()
        + b["mean_interleave_ms"].as_f64().unwrap()
        + b["mean_overhead_ms"].as_f64().unwrap();
    assert!((sum - ttft).abs() < 1e-6 * ttft.max(1.0), "the split adds up: {sum} vs {ttft}");
    let knee = j["knee"]["max_concurrency"].as_u64().expect("a knee");
    assert!((21..=63).contains(&knee), "knee at {knee}");
    assert!(j["explanation"].as_array().unwrap().iter().any(|s| s.as_str().unwrap().contains("42 requests at once")));
    // The default's requests all have the same lengths: at 64 in flight the run carries the
    // lock-step caveat (`sim::report::lockstep_waves`) in its notes; one at a time, not.
    let caveat = |j: &serde_json::Value| {
        j["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().starts_with("caveat (lockstep_waves)"))
    };
    assert!(caveat(&j), "{}", j["notes"]);
    // The step's host CPU time: vLLM 0.28 hides it under the GPU (async scheduling); a
    // release before 0.14 adds it to every step.
    assert!(j["step_cpu"].as_str().unwrap().starts_with("hidden under the GPU"), "{}", j["step_cpu"]);
    let old = stdout_json(&run_cli(&["explain", "--concurrency", "1", "--set", "engine.version=\"0.12.0\"", "--json"]));
    assert!(old["step_cpu"].as_str().unwrap().starts_with("600 µs + 12 µs"), "{}", old["step_cpu"]);
    // At concurrency 1 there is no queue.
    let j1 = stdout_json(&run_cli(&["explain", "--concurrency", "1", "--json"]));
    assert_eq!(j1["ttft_breakdown"]["mean_queue_wait_ms"], 0.0);
    assert!(!caveat(&j1), "{}", j1["notes"]);
    // With a low running cap, the cap binds first.
    let j2 = stdout_json(&run_cli(&["explain", "--json", "--set", "engine.max_num_seqs=16"]));
    assert_eq!(j2["binding_limit"], "max_num_seqs");
    assert!(j2["metric_kinds"]["outside_the_engine"]
        .as_object()
        .unwrap()
        .keys()
        .any(|k| k.contains("GPU utilisation")));
}

/// Where the KV pool binds first, explain runs its sweep again with a pool half as large again
/// and says what it found (the notebooks' audit of 2026-12-06): it had said "the knee moves with
/// the KV pool" where the knee stays put with room for more requests (the engine out of compute):
/// the default's workload on an A100 with the default's pool (its knee at 31 either way); the
/// default's own knee (RTX 5090) does move, 42 → 52, and so does the KV-starved A100's.
#[test]
fn explain_tries_a_larger_pool_before_saying_the_knee_moves_with_it() {
    let a100 = ["explain", "--json", "--set", "hardware=a100-80gb", "--set", "engine.kv_cache_tokens=194880"];
    let j = stdout_json(&run_cli(&a100));
    let knob = j["knob"].as_str().unwrap();
    assert!(knob.starts_with("A larger KV pool does not move the knee (with 292,288 tokens, room for 63 requests, it is at concurrency 31)"), "{knob}");
    let j = stdout_json(&run_cli(&["explain", "--json"]));
    let knob = j["knob"].as_str().unwrap();
    assert!(knob.starts_with("The knee moves with the KV pool: with a pool of 292,320 tokens (room for 63 requests) it is at concurrency 52"), "{knob}");
    let starved = stdout_json(&run_cli(&["explain", "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json", "--json"]));
    let knob = starved["knob"].as_str().unwrap();
    assert!(
        knob.starts_with("The knee moves with the KV pool: with a pool of 15,360 tokens (room for 15 requests)"),
        "{knob}"
    );
}

/// A scenario with its own arrivals is explained at that load, and its knee is the engine's (a
/// closed loop over the same requests), not where the offered rate is met.
#[test]
fn explain_keeps_an_open_loop_load_and_finds_the_knee_in_a_closed_loop() {
    let common = ["explain", "--json", "--set", "workload.num_prompts=100"];
    let closed = stdout_json(&run_cli(&common));
    let mut args = common.to_vec();
    args.extend(["--set", "workload.max_concurrency=null", "--set", "workload.request_rate=2"]);
    let open = stdout_json(&run_cli(&args));
    assert!(open["max_concurrency"].is_null(), "{}", open["max_concurrency"]);
    assert_eq!(open["load"], "a request rate of 2 requests/s");
    assert_eq!(open["point"]["request_rate"], 2.0, "the explained run keeps the scenario's rate");
    // 2 requests/s of 512 output tokens offer ~1,000 tokens/s: a sweep under that rate would put
    // the knee where the rate is met. The closed-loop sweep is the scenario's without the rate.
    assert_eq!(open["knee"], closed["knee"]);
    assert!(open["knee"]["max_concurrency"].as_u64().is_some_and(|k| (21..=63).contains(&k)), "{}", open["knee"]);
    let why = open["explanation"].as_array().unwrap();
    assert!(why.iter().any(|s| s.as_str().unwrap().starts_with("At a request rate of 2 requests/s, mean TTFT")));
    assert!(why.iter().any(|s| s.as_str().unwrap().starts_with("The throughput knee of a closed loop")));
    assert_eq!(closed["load"], "concurrency 1");
}

#[test]
fn tune_finds_the_best_configuration_under_slos_with_its_pareto_front() {
    let args = [
        "tune",
        "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json",
        "--vary",
        "engine.max_num_seqs=4,8,16,32",
        "--vary",
        "engine.num_gpu_blocks_override=321,641,1281",
        "--set",
        "workload.num_prompts=64",
        "--set",
        "workload.max_concurrency=12",
        "--slo",
        "p99_ttft_ms<=5000",
        "--slo",
        "mean_tpot_ms<=30",
        "--json",
        // Every configuration runs to the end, so each rejected one carries all its metrics.
        "--no-early-stop",
    ];
    let j = stdout_json(&run_cli(&args));
    let best = &j["best"];
    assert!(
        best.is_object(),
        "no configuration met the SLOs; rejected: {}",
        j["rejected"].as_array().map(|r| r.len()).unwrap_or(0)
    );
    assert!(best["metrics"]["p99_ttft_ms"].as_f64().unwrap() <= 5000.0);
    assert!(best["metrics"]["mean_tpot_ms"].as_f64().unwrap() <= 30.0);
    // The best is the highest throughput among the configurations that meet the SLOs.
    let rejected = j["rejected"].as_array().unwrap();
    assert!(!rejected.is_empty());
    for r in rejected {
        let v = r["violations"].as_array().unwrap();
        assert!(!v.is_empty());
        for x in v {
            assert!(x["slo"].is_string() && x["value"].is_number() && x["by"].as_f64().unwrap() != 0.0);
        }
    }
    let pareto = j["pareto"].as_array().unwrap();
    assert!(!pareto.is_empty());
    // Along the front, throughput rises and so does latency.
    for w in pareto.windows(2) {
        let (a, b) = (&w[0]["metrics"], &w[1]["metrics"]);
        assert!(b["output_throughput"].as_f64() >= a["output_throughput"].as_f64());
        assert!(b["p99_ttft_ms"].as_f64() >= a["p99_ttft_ms"].as_f64());
    }
    // Same arguments, same answer.
    assert_eq!(run_cli(&args).stdout, run_cli(&args).stdout);
    // A grid larger than --max-configs is sampled, deterministically.
    let big = stdout_json(&run_cli(&[
        "tune",
        "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json",
        "--vary",
        "engine.max_num_seqs=4,8,16,32,64",
        "--vary",
        "engine.num_gpu_blocks_override=321,641,961,1281",
        "--vary",
        "engine.max_num_batched_tokens=512,1024,2048",
        "--set",
        "workload.num_prompts=32",
        "--slo",
        "mean_tpot_ms<=40",
        "--max-configs",
        "20",
        "--json",
    ]));
    assert!(big["searched"].as_str().unwrap().contains("of the grid's 60"), "{}", big["searched"]);
    // Bad SLOs and metrics are errors.
    let o = run_cli(&["tune", "--vary", "engine.max_num_seqs=8", "--slo", "p99_ttft_ms<2000"]);
    assert_eq!(o.status.code(), Some(2));
    let o = run_cli(&["tune", "--vary", "engine.max_num_seqs=8", "--slo", "no_such_metric<=1"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn plots_are_written_as_svg_with_the_knee_and_the_kv_limit_marked() {
    let dir = scratch().join("plots");
    std::fs::create_dir_all(&dir).unwrap();
    // The same sweep plotted without and with intervals.
    let plot = |name: &str, extra: &[&str]| {
        let path = dir.join(name);
        let mut args = vec!["sweep", "--concurrency", "1,16,42,64", "--num-prompts", "8,32,84,128"];
        args.extend_from_slice(extra);
        args.extend(["--plot", path.to_str().unwrap()]);
        let o = run_cli(&args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        std::fs::read_to_string(&path).unwrap()
    };
    let svg = plot("sweep.svg", &[]);
    assert!(svg.starts_with("<svg") && svg.contains("KV-limited concurrency 42") && svg.contains("output tok/s"));
    assert!(!svg.contains("90% interval"), "no intervals asked, none drawn");
    // With intervals, each series' 90% band is shaded (one polygon per panel).
    let with = plot("sweep-band.svg", &["--uncertainty"]);
    assert!(with.contains("shaded: 90% interval"), "the caption says so");
    assert_eq!(with.matches("<polygon").count(), svg.matches("<polygon").count() + 2, "one band per panel");
    let ts = dir.join("ts.svg");
    assert!(run_cli(&["simulate", "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json", "--plot", ts.to_str().unwrap()])
        .status
        .success());
    let svg = std::fs::read_to_string(&ts).unwrap();
    assert!(svg.contains("KV cache usage") && svg.contains("waiting"));
    let tune = dir.join("tune.svg");
    let o = run_cli(&[
        "tune",
        "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json",
        "--vary",
        "engine.max_num_seqs=4,16",
        "--set",
        "workload.num_prompts=16",
        "--plot",
        tune.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read_to_string(&tune).unwrap().contains("Pareto front"));
    // A path in no folder is an error naming the flag and the folder, before anything runs (it
    // came after the whole run, in the drawing library's words, with no report printed).
    for cmd in [&["simulate"][..], &["sweep", "--concurrency", "1,2"], &["tune", "--vary", "engine.max_num_seqs=8"]] {
        let mut args = cmd.to_vec();
        args.extend(["--plot", "/nonexistent-dir/x.svg"]);
        let o = run_cli(&args);
        assert_eq!(o.status.code(), Some(2), "{cmd:?}");
        assert!(o.stdout.is_empty(), "{cmd:?}: nothing ran");
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(err.contains("--plot /nonexistent-dir/x.svg: no folder /nonexistent-dir to write it in"), "{err}");
    }
    // A folder that exists but cannot hold the file (/proc: no new files there) is said before
    // anything runs too (it failed after the whole run, with no report printed, until 2026-12-07).
    let o = run_cli(&["sweep", "--concurrency", "1,2", "--plot", "/proc/x.svg"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty(), "nothing ran");
    assert!(String::from_utf8_lossy(&o.stderr).contains("--plot /proc/x.svg: cannot write it"));
    // The check leaves no file behind where it made one.
    let fresh = scratch().join("plot-check-fresh.svg");
    let _ = std::fs::remove_file(&fresh);
    let o = run_cli(&["simulate", "--num-prompts", "2", "--plot", fresh.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read_to_string(&fresh).unwrap().contains("<svg"));
}

/// `sweep`'s list flags name themselves in their errors, with the least value they take (a
/// fractional concurrency read "a whole number, 0 or more", then 0 was refused; a prompt count of
/// 0 named `workload.num_prompts`, the field it sets: the robustness audit of 2026-12-07).
#[test]
fn sweep_list_errors_name_the_flag() {
    let err = |args: &[&str]| {
        let o = run_cli(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let e = err(&["sweep", "--concurrency", "4.5"]);
    assert!(
        e.contains("--concurrency: cannot read \"4.5\" in \"4.5\" as a whole number") && !e.contains("0 or more"),
        "{e}"
    );
    let e = err(&["sweep", "--concurrency", "1,2", "--num-prompts", "40,0"]);
    assert!(e.contains("--num-prompts: values must be at least 1"), "{e}");
}

/// The published RTX 5090 setup with SGLang 0.5.21 runs beside the vLLM one.
#[test]
fn published_rtx5090_sglang_setup_runs_beside_vllm() {
    let j = stdout_json(&run_cli(&["simulate", "scenarios/rtx5090-qwen2.5-7b-sglang.json", "--json"]));
    assert_eq!(j["engine"], "sglang");
    assert_eq!(j["kv_cache_tokens"], 210714);
    assert_eq!(j["kv_limited_concurrency"], 45);
    assert_eq!(j["completed"], 20);
    assert!(j.get("num_retractions").is_some());
    let v = stdout_json(&run_cli(&["simulate", "--json"]));
    // Same report keys on both engines (SGLang adds num_retractions).
    for k in v.as_object().unwrap().keys() {
        assert!(j.get(k).is_some(), "SGLang report lacks {k}");
    }
}

/// A reader that stops early (`servesim validate | head -1`) ends the run as it would end
/// `cat`: by SIGPIPE, with nothing on stderr, not a panic about a failed print.
#[cfg(unix)]
#[test]
fn a_closed_stdout_ends_a_printing_command_quietly() {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let mut child = servesim()
        .args(["validate"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("servesim starts");
    let mut first = [0u8; 16];
    child.stdout.as_mut().unwrap().read_exact(&mut first).expect("validate prints");
    drop(child.stdout.take());
    let o = child.wait_with_output().expect("servesim ends");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    // validate prints tens of kilobytes after its first line: more than a pipe buffers.
    assert_eq!(o.status.signal(), Some(libc_sigpipe()), "{:?}: {stderr}", o.status);
}

#[cfg(unix)]
fn libc_sigpipe() -> i32 {
    13 // SIGPIPE on Linux and the BSDs
}

/// vLLM with prefix caching off looks nothing up (`get_computed_blocks` returns before it
/// records): its prefix-cache counters stay at 0, as the server's `/metrics` shows them.
#[test]
fn vllm_without_prefix_caching_counts_no_prefix_queries() {
    let off = stdout_json(&run_cli(&["simulate", "--set", "engine.enable_prefix_caching=false", "--json"]));
    assert_eq!((off["prefix_cache_queries"].as_u64(), off["prefix_cache_hits"].as_u64()), (Some(0), Some(0)), "{off}");
    let on = stdout_json(&run_cli(&["simulate", "--json"]));
    assert!(on["prefix_cache_queries"].as_u64().unwrap() > 0, "{on}");
}

/// vLLM 0.11.0 alone parses the chat template on every chat request, on its one API loop
/// (`docs/front-end.md`): a chat request reaches the engine that much later, one after the
/// other; 0.11.1 caches the parse, and the completions endpoint has none. A burst that can
/// outrun the loop carries the caveat that TPOT and ITL are then lower bounds.
#[test]
fn vllm_0110_chat_requests_queue_behind_the_template_parse() {
    let ttft = |v: &str, ep: &str, extra: &[&str]| {
        let mut a = vec!["simulate", "--json", "--set"];
        let ver = format!("engine.version={v}");
        let end = format!("workload.endpoint={ep}");
        a.extend([ver.as_str(), "--set", end.as_str()]);
        a.extend(extra);
        stdout_json(&run_cli(&a))
    };
    let chat = "/v1/chat/completions";
    let parse_ms = sim::engine::vllm::scheduler::VLLM_0110_CHAT_TEMPLATE_KWARGS_NS as f64 / 1e6;
    let plain = ttft("0.11.0", "/v1/completions", &[]);
    let parsed = ttft("0.11.0", chat, &[]);
    let d = parsed["mean_ttft_ms"].as_f64().unwrap() - plain["mean_ttft_ms"].as_f64().unwrap();
    assert!((d - parse_ms).abs() < 1e-6, "one parse a request at concurrency 1: {d}");
    assert_eq!(ttft("0.11.1", chat, &[])["mean_ttft_ms"], ttft("0.11.1", "/v1/completions", &[])["mean_ttft_ms"]);
    // At concurrency 1 the front end keeps up: no chat_front_end caveat (only the template's
    // tokens, said of every chat run, and the default scenario's WSL2 host).
    let ids: Vec<&str> = parsed["caveats"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["chat_template_tokens", "wsl2_step_timing"], "{parsed}");
    // 40 short requests at once (the engine is not what queues them): the k-th waits for the k
    // parses up to its own, about 20.5 of them on average.
    let burst = [
        "--set",
        "workload.max_concurrency=null",
        "--set",
        "workload.num_prompts=40",
        "--set",
        "workload.random_input_len=16",
        "--set",
        "workload.random_output_len=8",
    ];
    let b = ttft("0.11.0", chat, &burst);
    let b0 = ttft("0.11.0", "/v1/completions", &burst);
    // A request's TTFT holds at least the wait for its parse (the engine only adds to it).
    let (m, m0) = (b["mean_ttft_ms"].as_f64().unwrap(), b0["mean_ttft_ms"].as_f64().unwrap());
    assert!(m >= 20.5 * parse_ms && m > m0 + 10.0 * parse_ms, "{m} against {m0} without the parse");
    assert!(b["caveats"].as_array().unwrap().iter().any(|c| c["id"] == "chat_front_end"), "{b}");
    // Every chat run says its prompts leave out the chat template's tokens; a completions run
    // does not.
    let ids = |v: &serde_json::Value| -> Vec<String> {
        v["caveats"].as_array().map_or(vec![], |a| a.iter().map(|c| c["id"].as_str().unwrap().to_string()).collect())
    };
    assert!(ids(&b).contains(&"chat_template_tokens".to_string()), "{b}");
    assert!(!ids(&b0).contains(&"chat_template_tokens".to_string()), "{b0}");
}

/// `enable_chunked_prefill: false` end to end (docs/vllm.md §1, §4): the run completes with
/// 3,000-token prompts under a 4,096-token budget, unchunked, and differs from the chunked
/// run; a budget below `max_model_len` is refused at start-up as vLLM refuses it.
#[test]
fn simulate_with_chunked_prefill_off_runs_unchunked_and_refuses_a_small_budget() {
    let s = "scenarios/serve-small-vllm.json"; // max_model_len 4096, budget 2048
    let run = |chunked: &str| {
        stdout_json(&run_cli(&[
            "simulate",
            s,
            "--json",
            "--set",
            "engine.max_num_batched_tokens=4096",
            "--set",
            "workload.random_input_len=3000",
            "--set",
            &format!("engine.enable_chunked_prefill={chunked}"),
        ]))
    };
    let (on, off) = (run("true"), run("false"));
    assert_eq!(on["completed"], 40);
    assert_eq!(off["completed"], 40);
    assert_ne!(on["mean_ttft_ms"], off["mean_ttft_ms"], "no chunking must change the schedule");
    // The scenario's own budget (2048) is below max_model_len (4096): refused, as vLLM does.
    let o = run_cli(&["simulate", s, "--set", "engine.enable_chunked_prefill=false"]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("engine.max_num_batched_tokens"), "{err}");
    assert!(err.contains("max_num_batched_tokens (2048) is smaller than max_model_len (4096)"), "{err}");
    // Left to default, the budget becomes max_model_len.
    let j = stdout_json(&run_cli(&[
        "simulate",
        s,
        "--json",
        "--set",
        "engine.max_num_batched_tokens=null",
        "--set",
        "engine.enable_chunked_prefill=false",
    ]));
    assert_eq!(j["completed"], 40);
}

/// vLLM's V2 model runner on a WSL2 host with a derived pool: the `wsl2_pinned_memory` caveat
/// says which server servesim sized (`VLLM_WSL2_ENABLE_PIN_MEMORY=1`) and, from 0.30, what the
/// default (unset) would take from the pool; a pinned pool, a Linux host or the V1 runner
/// carries none.
#[test]
fn a_wsl2_derived_pool_states_its_pinned_memory_assumption() {
    let caveat = |extra: &[&str]| {
        let mut a = vec!["simulate", "--json", "--set", "workload.num_prompts=2"];
        for s in extra {
            a.extend(["--set", s]);
        }
        let out = stdout_json(&run_cli(&a));
        out["caveats"]
            .as_array()
            .and_then(|c| c.iter().find(|c| c["id"] == "wsl2_pinned_memory"))
            .map(|c| c["message"].as_str().unwrap().to_string())
    };
    // The default scenario (0.28, WSL2) pins its logged pool.
    assert_eq!(caveat(&[]), None);
    let m = caveat(&["engine.kv_cache_tokens=null"]).expect("0.28 V2 on WSL2, derived pool");
    assert!(m.contains("VLLM_WSL2_ENABLE_PIN_MEMORY=1") && m.contains("UVA is not available"), "{m}");
    // 0.31: 128 sequences x 32,768 tokens x 4 bytes = 16 MiB; Qwen2.5-7B's KV cell is
    // 28 layers x 4 KV heads x 128 x 2 (K, V) x 2 bytes = 57,344 bytes: 292 tokens.
    let m = caveat(&["engine.kv_cache_tokens=null", "engine.version=0.31.0", "engine.max_num_seqs=128"])
        .expect("0.31 V2 on WSL2, derived pool");
    assert!(m.contains("16 MiB a GPU") && m.contains("about 292 tokens"), "{m}");
    // Qwen3 runs on V2 from 0.22, which cannot start under WSL2 before 0.24 (no pinned memory,
    // no variable): the V1 runner that starts instead is the one sized.
    let v1 = ["engine.kv_cache_tokens=null", "engine.version=0.22.0", "model=\"qwen3-8b\""];
    let m = caveat(&v1).expect("0.22 Qwen3 on WSL2");
    assert!(m.contains("cannot start") && m.contains("VLLM_USE_V2_MODEL_RUNNER=0"), "{m}");
    let mut a = vec!["explain", "--json"];
    for s in &v1 {
        a.extend(["--set", s]);
    }
    let derivation = stdout_json(&run_cli(&a))["memory"]["derivation"].as_str().unwrap().to_string();
    assert!(derivation.contains("V1 model runner"), "{derivation}");
    // Qwen2 runs on V1 before 0.25; a Linux host has pinned memory.
    assert_eq!(caveat(&["engine.kv_cache_tokens=null", "engine.version=0.24.0"]), None);
    assert_eq!(caveat(&["engine.kv_cache_tokens=null", "hardware=\"rtx-5090\""]), None);
}

/// `servesim card`: a Hugging Face config.json becomes a card that simulates as the built-in
/// card of the same model does (its architecture kept, so vLLM's and SGLang's per-architecture
/// rules follow), and its runs say no published run judged it; what a dense full-attention card
/// cannot describe is refused naming the file and the config key, exit 2.
#[test]
fn card_derives_an_inline_card_from_a_config_json() {
    let cfg = write_temp(
        "qwen3-8b-like.config.json",
        r#"{"architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "head_dim": 128, "intermediate_size": 12288,
            "max_position_embeddings": 40960, "num_attention_heads": 32, "num_hidden_layers": 36, "num_key_value_heads": 8,
            "sliding_window": null, "use_sliding_window": false, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
            "vocab_size": 151936}"#,
    );
    let o = run_cli(&[
        "card",
        cfg.to_str().unwrap(),
        "--id",
        "acme-chat-8b",
        "--hf-repo",
        "acme/chat-8b",
        "--add-bos-token",
        "false",
    ]);
    let card = stdout_json(&o);
    assert_eq!(card["architecture"], "Qwen3ForCausalLM");
    assert_eq!(card["hf_repo"], "acme/chat-8b");
    let run = |model: &str| {
        let set = format!("model={model}");
        stdout_json(&run_cli(&[
            "simulate",
            "--set",
            &set,
            "--set",
            "hardware=\"h100-80gb\"",
            "--set",
            "engine.kv_cache_tokens=null",
            "--set",
            "workload.num_prompts=4",
            "--json",
        ]))
    };
    let derived = run(&card.to_string());
    let builtin = run("\"qwen3-8b\"");
    for k in ["mean_ttft_ms", "mean_tpot_ms", "kv_cache_tokens"] {
        let (d, b) = (derived[k].as_f64().unwrap(), builtin[k].as_f64().unwrap());
        assert!((d / b - 1.0).abs() < 1e-3, "{k}: derived card {d}, built-in {b}");
    }
    let caveat =
        |v: &serde_json::Value| v["caveats"].as_array().is_some_and(|c| c.iter().any(|c| c["id"] == "unjudged_model"));
    assert!(caveat(&derived) && !caveat(&builtin));
    // The built-in card's id and size with other figures is another model, which no published
    // run judged (the caveat had matched on id and size alone; the cards audit of 2026-12-06).
    let mut wider = serde_json::from_str::<serde_json::Value>(
        &std::fs::read_to_string(root().join("models/model/qwen3-8b.json")).unwrap(),
    )
    .unwrap();
    wider["num_kv_heads"] = 32.into();
    assert!(caveat(&run(&wider.to_string())), "an inline card under a judged id with 4x the KV heads");
    // Without its architecture the card's rules follow its name, and the run says which it took.
    let mut bare = card.clone();
    bare.as_object_mut().unwrap().remove("architecture");
    let set = format!("model={bare}");
    let o = run_cli(&["simulate", "--set", &set, "--set", "workload.num_prompts=2"]);
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("model.architecture not given: acme-chat-8b is taken as another architecture"), "{err}");
    let set = format!("model={card}");
    let o = run_cli(&["simulate", "--set", &set, "--set", "workload.num_prompts=2"]);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("model.architecture"));
    let swa = write_temp(
        "swa.config.json",
        r#"{"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "intermediate_size": 14336,
            "vocab_size": 32000, "sliding_window": 4096, "max_position_embeddings": 32768}"#,
    );
    let o = run_cli(&["card", swa.to_str().unwrap(), "--id", "m"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("swa.config.json: sliding_window:"), "{err}");
}

/// `simulate` takes `vllm bench serve`'s workload flags, each the `workload` field of its name:
/// the run is the one `--set` gives, byte for byte; a flag and a `--set` of the same field are an
/// error naming both, and a bad value names the flag the user typed.
#[test]
fn simulate_takes_vllm_bench_serve_workload_flags() {
    let s = "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json";
    let by_flags = run_cli(&[
        "simulate",
        s,
        "--json",
        "--max-concurrency",
        "6",
        "--num-prompts",
        "12",
        "--random-input-len",
        "700",
        "--random-range-ratio",
        "0.25",
        "--request-rate",
        "4",
        "--burstiness",
        "0.5",
        "--no-initial-test",
    ]);
    assert!(by_flags.status.success(), "{}", String::from_utf8_lossy(&by_flags.stderr));
    let by_sets = run_cli(&[
        "simulate",
        s,
        "--json",
        "--set",
        "workload.max_concurrency=6",
        "--set",
        "workload.num_prompts=12",
        "--set",
        "workload.random_input_len=700",
        "--set",
        "workload.random_range_ratio=0.25",
        "--set",
        "workload.request_rate=4",
        "--set",
        "workload.burstiness=0.5",
        "--set",
        "workload.initial_test_request=false",
    ]);
    assert!(by_sets.status.success(), "{}", String::from_utf8_lossy(&by_sets.stderr));
    assert_eq!(by_flags.stdout, by_sets.stdout);
    let j = stdout_json(&by_flags);
    assert_eq!((j["max_concurrency"].as_u64(), j["num_prompts"].as_u64()), (Some(6), Some(12)));
    // The scenario's own values differ, so the flags did something.
    assert_ne!(by_flags.stdout, run_cli(&["simulate", s, "--json"]).stdout);

    let both = run_cli(&["simulate", s, "--max-concurrency", "4", "--set", "workload.max_concurrency=5"]);
    assert_eq!(both.status.code(), Some(2));
    let err = String::from_utf8_lossy(&both.stderr);
    assert!(err.contains("--max-concurrency and --set workload.max_concurrency=5 both give"), "{err}");
    for (flag, value, want) in [
        ("--max-concurrency", "0", "--max-concurrency (workload.max_concurrency): must be at least 1"),
        ("--request-rate", "nan", "--request-rate: expected a number, got NaN"),
        // An infinity is no JSON number: it had read as "not given" on the live commands.
        ("--random-range-ratio", "inf", "--random-range-ratio: expected a number in [0, 1), got inf"),
        ("--dataset-name", "sonnet", "--dataset-name (workload.dataset_name): unknown variant"),
    ] {
        let o = run_cli(&["simulate", s, flag, value]);
        assert_eq!(o.status.code(), Some(2), "{flag} {value}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "want {want:?} in: {err}");
    }
}

/// A sweep's text prints a caveat once per message: the lock-step caveat names a point's own
/// preemptions and which of its two TTFT figures is the higher, and the first point's message
/// was printed for every concurrency it applied to (at 64, 116 preemptions where that point had
/// 148, and "the out-of-step figure is the higher one" where it was the lower; the audit of
/// 2026-12-06). Each line's message is one of its points' own (`--json`).
#[test]
fn a_sweep_prints_each_points_own_caveat() {
    let s = "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json";
    let text = String::from_utf8_lossy(&run_cli(&["sweep", s, "--concurrency", "1,16,64"]).stdout).into_owned();
    let j = stdout_json(&run_cli(&["sweep", s, "--concurrency", "1,16,64", "--json"]));
    let mut lines = 0;
    for l in text.lines().filter(|l| l.starts_with("Caveat (")) {
        let (head, message) = l.split_once("): ").unwrap();
        let at = head.split_once("at concurrency ").unwrap().1;
        for c in at.split(", ") {
            let i = ["1", "16", "64"].iter().position(|x| *x == c).unwrap();
            let own = j["points"][i]["caveats"].as_array().unwrap();
            assert!(own.iter().any(|cv| cv["message"] == message), "at {c}: {message}");
        }
        lines += 1;
    }
    assert!(lines >= 2, "the two loaded points' caveats differ:\n{text}");
}

/// An engine out of compute is told what more GPUs do: where its all-reduces already take a
/// large share of a step, not a higher TP size (L40S, Llama-3.2-3B: TP 4 ran at a third of TP 2's
/// throughput, and explain advised "a higher TP size"; the audit of 2026-12-06).
#[test]
fn explain_does_not_advise_a_higher_tp_where_all_reduces_dominate() {
    // One setup for explain and simulate: `--concurrency` (explain) or `--max-concurrency`.
    let run = |cmd: &str, tp: &str| {
        let tp = format!("engine.tensor_parallel_size={tp}");
        let conc = if cmd == "explain" { "--concurrency" } else { "--max-concurrency" };
        let mut a = vec![cmd, "scenarios/long-prefill-itl-llama3.1-8b-h100-vllm.json", conc, "64"];
        a.extend(["--num-prompts", "128", "--request-rate", "inf", "--random-input-len", "2000"]);
        a.extend(["--random-output-len", "100"]);
        for s in [
            "workload.random_range_ratio=0",
            "engine.max_model_len=4096",
            "model=llama-3.2-3b-instruct",
            "hardware=l40s",
            "engine.kv_cache_tokens=null",
            "engine.max_num_batched_tokens=null",
            &tp,
        ] {
            a.extend(["--set", s]);
        }
        if cmd == "simulate" {
            a.push("--json");
        }
        let o = run_cli(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        o
    };
    let tp4 = String::from_utf8_lossy(&run("explain", "4").stdout).into_owned();
    assert!(tp4.contains("a higher TP size does not: at TP 4 the all-reduces already take"), "{tp4}");
    // And the runs agree: TP 8 is slower than TP 4 there.
    let thr = |tp: &str| stdout_json(&run("simulate", tp))["output_throughput"].as_f64().unwrap();
    assert!(thr("8") < thr("4"));
}

/// `--burstiness inf` is vLLM's fixed gaps (`get_request`, from 0.11.1): it runs, its report
/// writes the burstiness as "inf" (JSON has no infinity), and that report is read back as a
/// result file whose load replays the same fixed gaps. It had been refused ("expected a finite
/// number above 0"), and a result of it refused by `calibrate --from-results`.
#[test]
fn an_infinite_burstiness_is_fixed_gaps() {
    let s = "scenarios/serve-small-vllm.json";
    let o = run_cli(&["simulate", s, "--request-rate", "4", "--burstiness", "inf", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(j["burstiness"], "inf");
    assert_eq!(j["request_rate"], 4.0);
    // 40 requests 0.25 s apart, the last sent at 10 s: the run lasts 10 s and one request.
    let d = j["duration"].as_f64().unwrap();
    assert!(d > 10.0 && d < 10.5, "{d}");
    // The same run from the scenario's field, in Python's spelling.
    let o2 = run_cli(&[
        "simulate",
        s,
        "--set",
        "workload.request_rate=4",
        "--set",
        "workload.burstiness=\"Infinity\"",
        "--json",
    ]);
    assert_eq!(o.stdout, o2.stdout, "{}", String::from_utf8_lossy(&o2.stderr));
    let f = write_temp("fixed-gaps.json", &String::from_utf8_lossy(&o.stdout));
    let out = scratch().join("fixed-gaps-profile.json");
    let c = run_cli(&[
        "calibrate",
        "--from-results",
        f.to_str().unwrap(),
        "--scenario",
        s,
        "--out",
        out.to_str().unwrap(),
        "--max-evals",
        "40",
    ]);
    assert!(c.status.success(), "{}", String::from_utf8_lossy(&c.stderr));
}

/// `tune`'s early stop counts slow first tokens over every request, which a measured window's
/// statistics do not cover: with a window every configuration runs to its end (the audit of
/// 2026-12-07: both configurations "stopped early" where the window's median met the SLO).
#[test]
fn tune_runs_a_windowed_configuration_to_its_end() {
    let p = write_temp(
        "tune_window.json",
        r#"{"version": 1, "engine": {"kind": "vllm", "max_num_seqs": 8}, "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
            "workload": {"dataset_name": "random", "ignore_eos": true, "num_prompts": 40, "random_output_len": 16,
                         "max_concurrency": 4, "window_start_s": 0.2, "window_duration_s": 0.3}}"#,
    );
    let args = ["tune", p.to_str().unwrap(), "--vary", "engine.max_num_seqs=2,8", "--slo", "median_ttft_ms<=1"];
    let with_window = run_cli(&args);
    let text = String::from_utf8_lossy(&with_window.stdout).to_string() + &String::from_utf8_lossy(&with_window.stderr);
    assert!(!text.contains("stopped early"), "{text}");
    // Without the window the same SLO is broken early, as designed.
    let plain =
        std::fs::read_to_string(&p).unwrap().replace(r#", "window_start_s": 0.2, "window_duration_s": 0.3"#, "");
    let q = write_temp("tune_no_window.json", &plain);
    let o = run_cli(&["tune", q.to_str().unwrap(), "--vary", "engine.max_num_seqs=2,8", "--slo", "median_ttft_ms<=1"]);
    let text = String::from_utf8_lossy(&o.stdout).to_string() + &String::from_utf8_lossy(&o.stderr);
    assert!(text.contains("stopped early"), "{text}");
}

/// Warm-ups resend the first prompt as the initial test request does: the cache hit they leave is
/// said alike (it was said for the test request alone).
#[test]
fn warm_ups_that_leave_the_first_prompt_cached_are_said() {
    let o = run_cli(&["simulate", "--num-prompts", "3", "--num-warmups", "2"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(text.contains("the benchmark client's 2 warm-up request(s) (--num-warmups"), "{text}");
    let o = run_cli(&["simulate", "--num-prompts", "3"]);
    assert!(!String::from_utf8_lossy(&o.stdout).contains("Note: prefix cache hits include"), "no hit, no note");
    // An earlier run's prompts are no warm-ups (their own note says them).
    let o = run_cli(&["simulate", "--num-prompts", "3", "--num-warmups", "2", "--set", "workload.prior_run_prompts=3"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("the benchmark client's 2 warm-up request(s)"), "{text}");
    let o = run_cli(&["simulate", "--num-prompts", "3", "--set", "workload.prior_run_prompts=3"]);
    assert!(!String::from_utf8_lossy(&o.stdout).contains("warm-up request(s)"), "no warm-ups were sent");
}

/// SGLang's own key is an SLO of a grid that runs SGLang from a vLLM base scenario too: the
/// vLLM configuration lacks it and is listed as invalid, as from an SGLang base (it was refused
/// outright: the docs audit of 2026-12-07).
#[test]
fn an_sglang_key_is_an_slo_of_a_grid_that_runs_sglang_from_a_vllm_base() {
    let s = write_temp(
        "tune-vllm-base.json",
        r#"{"version": 1, "engine": {"kind": "vllm"}, "model": "llama-3.1-8b-instruct", "hardware": "h100-80gb",
            "workload": {"dataset_name": "random", "random_input_len": 512, "random_output_len": 64,
                         "num_prompts": 16, "max_concurrency": 4, "ignore_eos": true}}"#,
    );
    let o = run_cli(&[
        "tune",
        s.to_str().unwrap(),
        "--vary",
        "engine.kind=vllm,sglang",
        "--slo",
        "num_retractions<=5",
        "--json",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let j = stdout_json(&o);
    assert_eq!(j["best"]["config"]["engine.kind"], "sglang", "{j}");
    let invalid = j["invalid"].to_string();
    assert!(invalid.contains("vllm") && invalid.contains("no num_retractions"), "{invalid}");
    // Without SGLang in the grid, the key is no key of it.
    let o = run_cli(&["tune", s.to_str().unwrap(), "--vary", "engine.max_num_seqs=2,4", "--slo", "num_retractions<=5"]);
    assert_eq!(o.status.code(), Some(2));
}

/// SGLang's pool derived on a WSL2 host's view carries the `wsl2_sglang_pool` caveat, whose two
/// figures are today's derivations against the log (210,714 tokens); a pinned pool or a Linux
/// host carries none.
#[test]
fn an_sglang_pool_derived_on_a_wsl2_host_says_no_log_judges_it() {
    let s = "scenarios/rtx5090-qwen2.5-7b-sglang.json";
    let run = |extra: &[&str]| {
        let mut a = vec!["simulate", s, "--num-prompts", "2", "--json"];
        a.extend_from_slice(extra);
        let o = run_cli(&a);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        stdout_json(&o)
    };
    let has = |j: &serde_json::Value| {
        j["caveats"].as_array().is_some_and(|c| c.iter().any(|c| c["id"] == "wsl2_sglang_pool"))
    };
    let wsl2 = run(&["--set", "engine.max_total_num_tokens=null"]);
    let linux = run(&["--set", "engine.max_total_num_tokens=null", "--set", "hardware=rtx-5090"]);
    assert!(has(&wsl2), "{wsl2}");
    assert!(!has(&linux) && !has(&run(&[])), "only a derived pool on the WSL2 view");
    let pct = |j: &serde_json::Value| (j["kv_cache_tokens"].as_f64().unwrap() / 210_714.0 - 1.0) * 100.0;
    let msg = wsl2["caveats"].as_array().unwrap().iter().find(|c| c["id"] == "wsl2_sglang_pool").unwrap()["message"]
        .as_str()
        .unwrap()
        .to_string();
    for (p, j) in [("Linux", &linux), ("WSL2", &wsl2)] {
        let quoted = format!("+{:.1}% on the {p}", pct(j));
        assert!(msg.contains(&quoted), "the caveat quotes {quoted:?} no more: {msg}");
    }
}

/// Trace rows the replay changes are said: BurstGPT's failed requests left out, a Mooncake row
/// whose hash_ids name more blocks than its input_length holds cut to it (both were unsaid).
#[test]
fn trace_rows_the_replay_changes_are_said() {
    let trace = |path: &str, format: &str| {
        let scenario = write_temp(
            &format!("trace-{format}.json"),
            &serde_json::json!({"version": 1, "engine": {"kind": "vllm"}, "model": "qwen2.5-7b-instruct",
                "hardware": "a100-80gb",
                "workload": {"dataset_name": "trace", "trace": path, "trace_format": format, "ignore_eos": true}})
            .to_string(),
        );
        let o = run_cli(&["simulate", scenario.to_str().unwrap(), "--json"]);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        (stdout_json(&o), String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (j, err) = trace(root().join("data/traces/burstgpt_sample.csv").to_str().unwrap(), "burstgpt");
    assert!(err.contains("2 of 40 rows are failed requests (no response tokens) and are left out"), "{err}");
    assert_eq!(j["completed"], 38, "{j}");
    let long = write_temp(
        "mooncake-cut.jsonl",
        "{\"timestamp\": 0, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [0, 1, 2]}\n\
         {\"timestamp\": 10, \"input_length\": 600, \"output_length\": 4, \"hash_ids\": [0, 1]}\n",
    );
    let (j, err) = trace(long.to_str().unwrap(), "mooncake");
    assert!(err.contains("1 of 2 rows name more hash_ids (512-token blocks) than their input_length holds"), "{err}");
    assert_eq!(j["total_input_tokens"], 1200, "each prompt its input_length: {j}");
    let (_, err) = trace(root().join("data/traces/mooncake_sample.jsonl").to_str().unwrap(), "mooncake");
    assert!(!err.contains("hash_ids"), "{err}");
}

/// `--set engine.kv_cache_memory_bytes=N` (vLLM's `--kv-cache-memory-bytes`) sizes the pool of a
/// vLLM scenario as vLLM does: N bytes per GPU in whole blocks of every layer of the rank, the
/// null block among them, replacing the scenario's own pin (`num_gpu_blocks_override` 641 here);
/// `explain --json` names it as the pool's source. By hand for Qwen2.5-7B (28 layers × 4 KV heads
/// × 128 × 2 (K and V) × 2 bytes = 57,344 bytes a token; blocks of 16 tokens, 917,504 bytes):
/// 1 GiB is 1,170 blocks at TP 1, 1,169 usable, 18,704 tokens; at TP 2 each GPU holds 2 KV heads
/// (458,752 bytes a block) in its own GiB: 2,340 blocks, 37,424 usable tokens.
#[test]
fn kv_cache_memory_bytes_sizes_the_pool_in_whole_blocks_per_gpu() {
    let s = "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json";
    let gib = "engine.kv_cache_memory_bytes=1073741824";
    let bytes: u64 = 1 << 30;
    for (tp, per_token, tokens) in [(1u64, 57_344u64, 18_704u64), (2, 28_672, 37_424)] {
        let tp_set = format!("engine.tensor_parallel_size={tp}");
        let j = stdout_json(&run_cli(&["simulate", s, "--set", gib, "--set", &tp_set, "--json"]));
        let blocks = bytes / (per_token * 16);
        assert_eq!(tokens, (blocks - 1) * 16, "the hand arithmetic");
        assert_eq!(j["kv_cache_tokens"], tokens, "TP {tp}");
        let x = stdout_json(&run_cli(&["explain", s, "--set", gib, "--set", &tp_set, "--json"]));
        assert_eq!(x["kv_sizing_source"], "kv_cache_memory_bytes", "TP {tp}");
        assert_eq!(x["kv_bytes_per_token"], per_token, "TP {tp}");
    }
    // Advice to raise a pin in bytes says the bytes too (it gave tokens alone, which read as a
    // value to set: the review of 2026-12-08).
    let o = run_cli(&["explain", s, "--set", gib]);
    let out = String::from_utf8_lossy(&o.stdout);
    let at = out.find("raise kv_cache_memory_bytes (pinned here: at most about").expect(&out);
    assert!(out[at..].split(')').next().unwrap().contains(" bytes a GPU"), "{out}");
    // vLLM reads the flag with human_readable_int: `1G` is 1024³ bytes, `1.5G` is refused as
    // vLLM refuses it, and a suffix it does not know is an error saying what it takes.
    let j = stdout_json(&run_cli(&["simulate", s, "--set", "engine.kv_cache_memory_bytes=1G", "--json"]));
    assert_eq!(j["kv_cache_tokens"], 18_704);
    for (v, want) in [("1.5G", "decimals are not allowed with binary suffixes like G"), ("1GB", "is not an integer")] {
        let o = run_cli(&["simulate", s, "--set", &format!("engine.kv_cache_memory_bytes={v}")]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.code() == Some(2) && err.contains("engine.kv_cache_memory_bytes") && err.contains(want),
            "{err}"
        );
    }
    // max_num_batched_tokens and max_model_len too: 1k is 1000 and 2K is 2048, as vLLM reads
    // them (seen in the refusal of a budget below the length without chunked prefill).
    let o = run_cli(&[
        "simulate",
        s,
        "--set",
        "engine.max_num_batched_tokens=1k",
        "--set",
        "engine.max_model_len=2K",
        "--set",
        "engine.enable_chunked_prefill=false",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("max_num_batched_tokens (1000) is smaller than max_model_len (2048)"), "{err}");
}
