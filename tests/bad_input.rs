//! Bad scenarios get clear errors naming the file and the field: exit status
//! 2, never a panic, never a hang.

use crate::common::*;

/// Runs `simulate` on a scenario and returns its stderr, checking the error contract.
fn rejects(name: &str, scenario: &str, expect: &[&str]) {
    let p = write_temp(name, scenario);
    let o = run_cli(&["simulate", p.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{name}: expected exit 2, got {:?}; stderr: {err}", o.status);
    assert!(!err.contains("panicked"), "{name}: panicked: {err}");
    assert!(err.contains(name), "{name}: the error does not name the file: {err}");
    for e in expect {
        assert!(err.contains(e), "{name}: expected {e:?} in: {err}");
    }
}

fn base(engine: &str, workload: &str) -> String {
    format!(
        r#"{{"version": 1, "engine": {{"kind": "vllm", {engine}}}, "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
            "workload": {{"dataset_name": "random", "ignore_eos": true, {workload}}}}}"#
    )
}

#[test]
fn unknown_fields_are_named_by_their_path() {
    rejects(
        "unknown.json",
        &base(r#""max_num_seq": 4"#, r#""num_prompts": 3"#),
        &["engine", "unknown field `max_num_seq`"],
    );
    rejects(
        "unknown_wl.json",
        &base(r#""max_num_seqs": 4"#, r#""random_input_length": 3"#),
        &["workload", "random_input_length"],
    );
}

#[test]
fn negative_and_zero_lengths_are_rejected() {
    rejects(
        "negative.json",
        &base(r#""max_num_seqs": 4"#, r#""random_input_len": -5"#),
        &["workload.random_input_len"],
    );
    rejects(
        "zero.json",
        &base(r#""max_num_seqs": 4"#, r#""random_output_len": 0"#),
        &["workload.random_output_len", "at least 1"],
    );
    rejects("zero_seqs.json", &base(r#""max_num_seqs": 0"#, r#""num_prompts": 3"#), &["engine.max_num_seqs"]);
}

#[test]
fn a_prompt_longer_than_max_model_len_or_the_pool_is_rejected() {
    rejects(
        "too_long.json",
        &base(r#""max_model_len": 2048"#, r#""random_input_len": 4000, "random_output_len": 10"#),
        &["workload.random_input_len", "max_model_len 2048"],
    );
    // vLLM 0.20 takes a pinned override without checking it against max_model_len: the request
    // is the error; from 0.21 vLLM refuses to start with such an override.
    rejects(
        "too_big_for_pool.json",
        &base(
            r#""version": "0.20.0", "max_model_len": 32768, "num_gpu_blocks_override": 100"#,
            r#""random_input_len": 4000, "random_output_len": 10"#,
        ),
        &["workload.random_input_len", "could never finish"],
    );
    // A logged pool is an engine's that started, so it held one max_model_len request (a block's
    // slack: the check saw the memory before it was cut into blocks): one that cannot is another
    // setup's, which vLLM refuses at start-up (since 2026-12-07: a pool `--set` moved there ran).
    rejects(
        "log_below_max_model_len.json",
        &base(
            r#""version": "0.20.0", "max_model_len": 32768, "kv_cache_tokens": 1600"#,
            r#""random_input_len": 4000, "random_output_len": 10"#,
        ),
        &["engine.max_model_len", "refuses to start"],
    );
    rejects(
        "pool_below_max_model_len.json",
        &base(
            r#""max_model_len": 32768, "num_gpu_blocks_override": 100"#,
            r#""random_input_len": 4000, "random_output_len": 10"#,
        ),
        &["engine.max_model_len", "refuses to start", "1584"],
    );
    // Longer than the model's positions (Qwen2.5-7B-Instruct: 32768): both engines refuse it.
    rejects(
        "beyond_positions.json",
        &base(r#""max_model_len": 65536"#, r#""random_input_len": 100, "random_output_len": 10"#),
        &["engine.max_model_len", "32768 positions"],
    );
    rejects(
        "beyond_positions_sglang.json",
        &base(r#""max_model_len": 1"#, r#""random_input_len": 100, "random_output_len": 10"#)
            .replace(r#""kind": "vllm", "max_model_len": 1"#, r#""kind": "sglang", "context_length": 65536"#),
        &["engine.context_length", "32768 positions"],
    );
    // A derived pool that cannot hold one request of max_model_len: vLLM does not start.
    // Llama-3.1-8B at its 131072 positions needs 16 GiB of KV; an RTX 5090 at 0.92 has ~10 left.
    rejects(
        "pool_below_max_model_len.json",
        &base("", r#""random_input_len": 100, "random_output_len": 10"#)
            .replace(r#""kind": "vllm", "#, r#""kind": "vllm""#)
            .replace("qwen2.5-7b-instruct", "llama-3.1-8b-instruct")
            .replace("a100-80gb", "rtx-5090"),
        &["engine.gpu_memory_utilization", "max_model_len 131072", "estimated maximum model length"],
    );
}

#[test]
fn an_empty_workload_is_rejected() {
    rejects("empty.json", &base(r#""max_num_seqs": 4"#, r#""num_prompts": 0"#), &["workload.num_prompts"]);
    let trace = write_temp("empty_trace.csv", "arrival_time,input_len,output_len\n");
    let s = format!(
        r#"{{"version": 1, "engine": {{"kind": "vllm"}}, "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
            "workload": {{"dataset_name": "trace", "trace": "{}", "ignore_eos": true}}}}"#,
        trace.display()
    );
    rejects("empty_trace.json", &s, &["workload.trace", "no rows"]);
}

/// A trace row's shared prefix is a group and a length: either alone was dropped without a word.
#[test]
fn a_trace_prefix_group_without_its_length_is_rejected() {
    for (name, body, field) in [
        (
            "group_only",
            "arrival_time,input_len,output_len,prefix_group,prefix_len\n0,100,10,1,50\n0,100,10,1,\n",
            "prefix_len",
        ),
        ("len_only", "arrival_time,input_len,output_len,prefix_len\n0,100,10,50\n", "prefix_group"),
    ] {
        let trace = write_temp(&format!("{name}.csv"), body);
        let s = format!(
            r#"{{"version": 1, "engine": {{"kind": "vllm"}}, "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
                "workload": {{"dataset_name": "trace", "trace": "{}", "ignore_eos": true}}}}"#,
            trace.display()
        );
        let file = format!("{name}.json");
        rejects(&file, &s, &[&format!("{name}.csv:"), field, "missing"]);
    }
}

#[test]
fn other_mistakes_get_clear_errors() {
    rejects("not_json.json", "{ this is not json", &["not valid JSON"]);
    rejects(
        "bad_version.json",
        &base(r#""version": "0.9.0""#, r#""num_prompts": 3"#),
        &["engine.version", "0.11.0 to 0.34.0"],
    );
    rejects(
        "bad_card.json",
        &base(r#""max_num_seqs": 4"#, r#""num_prompts": 3"#).replace("a100-80gb", "a100-90gb"),
        &["hardware", "no card named"],
    );
    // (vLLM 0.11.0: its client honours ignore_eos on the random dataset; from 0.11.1 it
    // is always sent, and false is refused: no_silent_wrong_answer.rs.)
    rejects(
        "eos.json",
        &base(r#""version": "0.11.0", "max_num_seqs": 4"#, r#""num_prompts": 3"#)
            .replace(r#""ignore_eos": true"#, r#""ignore_eos": false"#),
        &["workload.ignore_eos", "output_len_dist"],
    );
    rejects(
        "eos_dist.json",
        &base(
            r#""version": "0.11.0", "max_num_seqs": 4"#,
            r#""num_prompts": 3, "output_len_dist": {"kind": "geometric", "mean": 40}"#,
        ),
        &["workload.output_len_dist", "ignore_eos true"],
    );
    rejects(
        "eos_past_max.json",
        &base(
            r#""version": "0.11.0", "max_num_seqs": 4"#,
            r#""num_prompts": 3, "random_output_len": 512, "output_len_dist": {"kind": "uniform", "min": 600, "max": 900}"#,
        )
        .replace(r#""ignore_eos": true"#, r#""ignore_eos": false"#),
        &["workload.output_len_dist.min", "largest max_tokens of the workload (512)"],
    );
    rejects(
        "endpoint.json",
        &base(r#""max_num_seqs": 4"#, r#""num_prompts": 3, "endpoint": "/v1/chat""#),
        &["workload.endpoint", "/v1/chat/completions"],
    );
    rejects(
        "block.json",
        &base(r#""version": "0.17.0", "block_size": 24"#, r#""num_prompts": 3"#),
        &["engine.block_size", "1, 8, 16"],
    );
    rejects(
        "block16.json",
        &base(r#""block_size": 24"#, r#""num_prompts": 3"#),
        &["engine.block_size", "multiple of 16"],
    );
    rejects("rate.json", &base(r#""max_num_seqs": 4"#, r#""request_rate": -1"#), &["workload.request_rate"]);
    rejects(
        "util.json",
        &base(r#""gpu_memory_utilization": 1.5"#, r#""num_prompts": 3"#),
        &["engine.gpu_memory_utilization"],
    );
    rejects(
        "batched.json",
        &base(r#""max_num_seqs": 512, "max_num_batched_tokens": 256"#, r#""num_prompts": 3"#),
        &["engine.max_num_batched_tokens"],
    );
    rejects(
        "format.json",
        &base(r#""max_num_seqs": 4"#, r#""num_prompts": 3"#).replace(r#""version": 1"#, r#""version": 7"#),
        &["version", "format 1"],
    );
}

#[test]
fn bad_flags_and_missing_files_are_errors_not_panics() {
    for args in [
        vec!["simulate", "no/such/file.json"],
        vec!["simulate", "--set", "engine.max_num_seqs"],
        vec!["simulate", "--set", "engine.kind.x=1"],
        vec!["sweep", "--concurrency", "16,4"],
        vec!["sweep", "--concurrency", "0,4"],
        vec!["simulate", "--metric-percentiles", "101"],
        vec!["simulate", "--metric-percentiles", "-1"],
        vec!["simulate", "--metric-percentiles", "NaN"],
        vec!["simulate", "--set", "cost.profile=no/such/profile.json"],
        // --discrepancy only with --from-results, and only family=sd pairs.
        vec!["calibrate", "--base-url", "http://127.0.0.1:9", "--discrepancy", "ttft=0.4", "--out", "p.json"],
        vec!["calibrate", "--base-url", "http://127.0.0.1:9", "--model-error", "ttft=0.4", "--out", "p.json"],
    ] {
        let o = run_cli(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.starts_with("error: ") && !err.contains("panicked"), "{args:?}: {err}");
    }
}

/// `calibrate --from-results` with `flag` (a `family=value` list) refuses an unknown family,
/// a negative value (its error says `finite`, as `negative` words it) and a missing value, with
/// exit 2 and the flag named, and writes no profile.
fn bad_family_specs_are_refused(
    r: &std::path::Path,
    scen: &std::path::Path,
    out: &std::path::Path,
    flag: &str,
    negative: &str,
) {
    for (spec, expect) in [
        ("ttfx=0.1", "not a metric family"),
        ("ttft=-1", negative),
        ("ttft", "family=value"),
        ("ttft=0.1,ttft=0.2", "given twice"),
    ] {
        let o = calibrate_from_results(r, scen.to_str().unwrap(), out, &[flag, spec]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{spec}: {err}");
        assert!(err.contains(flag) && err.contains(expect) && !err.contains("panicked"), "{spec}: {err}");
    }
    assert!(!out.exists(), "no profile is written");
}

#[test]
fn a_bad_discrepancy_names_the_flag_and_what_was_expected() {
    let dir = scratch().join("disc");
    std::fs::create_dir_all(&dir).unwrap();
    let r = dir.join("r.json");
    std::fs::write(&r, r#"{"mean_ttft_ms": 100.0, "mean_tpot_ms": 10.0, "output_throughput": 500.0}"#).unwrap();
    let scen = root().join("scenarios/rtx5090-qwen2.5-7b-vllm.json");
    let out = dir.join("p.json");
    bad_family_specs_are_refused(&r, &scen, &out, "--discrepancy", "finite sd");
}

/// `--model-error`: a bad spec is refused before the fit; a good one replaces the named
/// families' model-error term in the profile's intervals and says so.
#[test]
fn model_error_replaces_the_named_families_of_the_intervals_model_error() {
    let dir = scratch().join("model-error");
    std::fs::create_dir_all(&dir).unwrap();
    let r = dir.join("r.json");
    std::fs::write(&r, r#"{"mean_ttft_ms": 400.0, "mean_tpot_ms": 12.0, "output_throughput": 80.0}"#).unwrap();
    let scen = root().join("scenarios/rtx5090-qwen2.5-7b-vllm.json");
    let out = dir.join("p.json");
    bad_family_specs_are_refused(&r, &scen, &out, "--model-error", "finite 90%");
    let plain = dir.join("plain.json");
    let o = calibrate_from_results(&r, scen.to_str().unwrap(), &plain, &[]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = calibrate_from_results(&r, scen.to_str().unwrap(), &out, &["--model-error", "ttft=0.5,tpot=0.07"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let read = |p: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
    };
    let (a, b) = (read(&plain)["uncertainty"].clone(), read(&out)["uncertainty"].clone());
    assert_eq!(b["model_error_p90"]["ttft"], 0.5);
    assert_eq!(b["model_error_p90"]["tpot"], 0.07);
    assert_eq!(b["model_error_p90"]["e2el"], a["model_error_p90"]["e2el"], "the other families stay");
    assert_ne!(a["model_error_p90"]["ttft"], 0.5);
    assert!(b["model_error_source"].as_str().unwrap().contains("given for ttft, tpot (--model-error)"));
}

/// A router parameter outside what the deployed router accepts is an error naming it, not a
/// fleet routed by a rule no router has (a match share of 2, a zero tree granularity).
#[test]
fn router_parameters_out_of_range_are_named() {
    let fleet = |router: &str| {
        base(r#""max_num_seqs": 4"#, r#""num_prompts": 3"#).trim_end().strip_suffix('}').unwrap().to_string()
            + &format!(r#", "fleet": {{"replicas": [{{"count": 2}}], "router": {router}}}}}"#)
    };
    rejects(
        "router_share.json",
        &fleet(r#"{"policy": "cache_aware", "cache_threshold": 2}"#),
        &["fleet.router.cache_threshold", "from 0 to 1"],
    );
    rejects(
        "router_block.json",
        &fleet(r#"{"policy": "llmd_inference_scheduler", "block_size_tokens": 0}"#),
        &["fleet.router.block_size_tokens", ">= 1"],
    );
    rejects(
        "router_prune.json",
        &fleet(r#"{"policy": "dynamo_kv", "router_prune_target_ratio": 5}"#),
        &["fleet.router.router_prune_target_ratio"],
    );
    rejects(
        "fleet_link.json",
        &fleet(r#"{"policy": "round_robin"}, "kv_transfer_latency_us": 1000000"#),
        &["fleet.kv_transfer_latency_us", "disaggregated serving only"],
    );
    rejects(
        "router_chunk.json",
        &fleet(r#"{"policy": "production_stack", "routing_logic": "prefixaware", "chunk_size": 0}"#),
        &["fleet.router.chunk_size"],
    );
}

/// The parameterless routers refuse other keys as the others do (serde let a unit variant of
/// the tagged section take any key unseen: a misspelt `policy` ran round-robin).
#[test]
fn parameterless_routers_refuse_unknown_keys() {
    let fleet = |router: &str| {
        base(r#""max_num_seqs": 4"#, r#""num_prompts": 3"#).trim_end().strip_suffix('}').unwrap().to_string()
            + &format!(r#", "fleet": {{"replicas": [{{"count": 2}}], "router": {router}}}}}"#)
    };
    rejects("router_rr_key.json", &fleet(r#"{"policy": "round_robin", "foo": 1}"#), &["fleet.router", "foo"]);
    rejects("router_kv_typo.json", &fleet(r#"{"policy": "kv_usage", "polcy": "cache_aware"}"#), &["polcy"]);
    rejects(
        "router_ps_rr.json",
        &fleet(r#"{"policy": "production_stack", "routing_logic": "roundrobin", "chunk_size": 5}"#),
        &["chunk_size"],
    );
    // And they still run without one.
    let p = write_temp("router_rr_ok.json", &fleet(r#"{"policy": "round_robin"}"#));
    assert!(run_cli(&["simulate", p.to_str().unwrap()]).status.success());
}

/// A GPU card's fields that select behaviour are checked against what exists: a misspelt
/// kernel-table system used to fall back to scaled tables without a word.
#[test]
fn gpu_card_names_and_totals_are_checked() {
    let card = |extra: &str| {
        format!(
            r#"{{"version": 1, "engine": {{"kind": "vllm"}}, "model": "qwen2.5-7b-instruct",
                "hardware": {{"id": "x", "memory_bytes": 85045477376, "memory_bandwidth_bytes_per_s": 3.35e12,
                              "dense_bf16_flops": 9.894e14, {extra}}},
                "workload": {{"dataset_name": "random", "ignore_eos": true, "num_prompts": 2}}}}"#
        )
    };
    rejects("card_tables.json", &card(r#""kernel_tables": "h100_sxn""#), &["hardware.kernel_tables", "h100_sxm"]);
    rejects("card_link.json", &card(r#""interconnect": "infiniband""#), &["hardware.interconnect", "nvlink"]);
    rejects(
        "card_smi.json",
        &card(r#""nvidia_smi_memory_mib": 0"#),
        &["hardware.nvidia_smi_memory_mib", "at least the CUDA total"],
    );
}

/// Data-parallel and fleet counts of zero name the field the user wrote.
#[test]
fn zero_counts_name_their_own_field() {
    let sg = |engine: &str, extra: &str| {
        format!(
            r#"{{"version": 1, "engine": {{"kind": "sglang", {engine}}}, "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
                "workload": {{"dataset_name": "random", "ignore_eos": true, "num_prompts": 2}}{extra}}}"#
        )
    };
    rejects("dp_zero.json", &sg(r#""dp_size": 0"#, ""), &["engine.dp_size"]);
    rejects("lbm.json", &sg(r#""load_balance_method": "nope""#, ""), &["engine.load_balance_method", "shortest_queue"]);
    rejects(
        "pd_zero.json",
        &sg(r#""chunked_prefill_size": 2048"#, r#", "fleet": {"prefill_count": 1, "decode_count": 0}"#),
        &["fleet.decode_count"],
    );
}

/// An error past a derived figure names the flag that drove it there: SGLang's default memory
/// fraction pushed out of (0, 1) by the graphs' reserve, a trace scaled past a year, and a tune
/// SLO with a negative bound.
#[test]
fn derived_figures_out_of_range_name_the_flag_behind_them() {
    let sg = r#"{"version": 1, "engine": {"kind": "sglang", "cuda_graph_max_bs": 100000}, "model": "qwen2.5-7b-instruct",
            "hardware": "a100-80gb", "workload": {"dataset_name": "random", "ignore_eos": true, "num_prompts": 2}}"#;
    rejects("graphs_reserve.json", sg, &["engine.cuda_graph_max_bs", "mem_fraction_static"]);
    let csv = write_temp("scaled_trace.csv", "arrival_time,input_len,output_len\n0,100,10\n1,100,10\n");
    let scaled = base(
        r#""max_num_seqs": 4"#,
        &format!(r#""dataset_name": "trace", "trace": {:?}, "trace_time_scale": 1e12"#, csv.to_str().unwrap()),
    )
    .replacen(r#""dataset_name": "random", "#, "", 1);
    rejects("scaled_trace.json", &scaled, &["workload.trace_time_scale", "one year"]);
    let fast = scaled.replace(r#""trace_time_scale": 1e12"#, r#""trace_rate": 1e12"#);
    rejects("fast_trace.json", &fast, &["workload.trace_rate", "at most"]);
    let o = run_cli(&["tune", "--vary", "engine.max_num_seqs=8,16", "--slo", "p99_ttft_ms<=-1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("0 or more"));
}

/// A trace CSV's header: a column named twice is refused (which one holds the values would be
/// a guess); a spreadsheet's byte-order mark before the first name is not part of it.
#[test]
fn a_trace_header_names_each_column_once() {
    let trace = |name: &str, csv: &str| {
        let p = write_temp(name, csv);
        base(r#""max_num_seqs": 4"#, &format!(r#""dataset_name": "trace", "trace": {:?}"#, p.to_str().unwrap()))
            .replacen(r#""dataset_name": "random", "#, "", 1)
    };
    rejects(
        "twice.json",
        &trace("twice.csv", "arrival_time,arrival_time,input_len,output_len\n0,0,100,10\n"),
        &["named twice"],
    );
    let p = write_temp("bom.json", &trace("bom.csv", "\u{feff}arrival_time,input_len,output_len\n0,100,10\n"));
    let o = run_cli(&["simulate", p.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `diff` reads run records only: a file that is not one (no `format`, another version, a
/// `setup` that is not an object) is an error naming that file and the field, never "the same
/// setup".
#[test]
fn diff_refuses_files_that_are_not_run_records_and_names_the_file() {
    let null_setup = write_temp("diff-null-setup.json", r#"{"setup":null}"#);
    let null_copy = write_temp("diff-null-setup-2.json", r#"{"setup":null}"#);
    let good = r#"{"format":"servesim-run","version":1,"setup":{"engine":{"kind":"vllm"},"seed":0}}"#;
    let ok = write_temp("diff-ok.json", good);
    let ok2 = write_temp("diff-ok-2.json", good);
    let o = run_cli(&["diff", ok.to_str().unwrap(), ok2.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let cases: [(&std::path::Path, &str); 4] = [
        (&null_setup, "format"),
        (&write_temp("diff-v7.json", &good.replace(r#""version":1"#, r#""version":7"#)), "version"),
        (&write_temp("diff-setup-null.json", &good.replace(r#"{"engine":{"kind":"vllm"},"seed":0}"#, "null")), "setup"),
        (&write_temp("diff-empty.json", "{}"), "format"),
    ];
    for (bad, field) in cases {
        // Either side: the error names the bad file (only) and the field.
        for (a, b) in [(bad, ok.as_path()), (ok.as_path(), bad)] {
            let o = run_cli(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{err}");
            assert!(err.contains(bad.to_str().unwrap()) && !err.contains(ok.to_str().unwrap()), "{err}");
            assert!(err.contains(field) && err.contains("not a servesim run record"), "{err}");
        }
    }
    let o = run_cli(&["diff", null_setup.to_str().unwrap(), null_copy.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stdout));
}

/// `bench --request-timeout 0` (or negative) is refused before any request, naming the flag,
/// instead of failing every request as a timeout; so is one past a year (1e20 s panicked in the
/// timer).
#[test]
fn a_request_timeout_of_zero_is_refused() {
    for t in ["0", "-1", "0.0001", "1e20"] {
        let flag = format!("--request-timeout={t}");
        let o = run_cli(&["bench", "--base-url", "http://127.0.0.1:9", &flag, "--num-prompts", "1"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains("--request-timeout") && err.contains("from 0.001 to 31536000"), "{err}");
    }
}

/// A workload flag of `bench`, `check` or `calibrate` out of range is refused naming the flag the
/// user typed, with the scenario path it sets (not the path alone).
#[test]
fn a_bad_workload_flag_is_named_as_the_flag() {
    for (flag, value, want) in [
        ("--max-concurrency", "0", "--max-concurrency (workload.max_concurrency)"),
        ("--random-range-ratio", "2", "--random-range-ratio (workload.random_range_ratio)"),
        // An infinity would be JSON null, read as "not given": the scenario's ratio had run.
        ("--random-range-ratio", "inf", "--random-range-ratio: expected a number in [0, 1), got inf"),
        ("--burstiness", "NaN", "--burstiness: expected a number, got NaN"),
    ] {
        let o = run_cli(&["bench", "--base-url", "http://127.0.0.1:9", flag, value, "--num-prompts", "1"]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(want), "{err}");
    }
}

/// A JSONL trace row is an object of named fields: an array was read by position (`[1, 2, 3]`
/// ran as a request sent at 1 s with 2 prompt tokens and 3 output tokens).
#[test]
fn a_jsonl_trace_row_that_is_not_an_object_is_refused() {
    let trace =
        write_temp("array-row.jsonl", "{\"arrival_time\": 0, \"input_len\": 100, \"output_len\": 5}\n[1, 2, 3]\n");
    let scenario =
        base(r#""max_num_seqs": 4"#, &format!(r#""dataset_name": "trace", "trace": {:?}"#, trace.to_str().unwrap()))
            .replacen(r#""dataset_name": "random", "#, "", 1);
    rejects("array_row.json", &scenario, &["workload.trace", "array-row.jsonl:2: expected an object", "[1,2,3]"]);
}

/// `workload.prior_run_prefixes` on a trace whose first rows carry no shared prefix would send
/// nothing and run as if no earlier run had been asked for: refused, naming the field; with a
/// prefix in those rows it runs.
#[test]
fn prior_run_prefixes_without_a_prefix_in_the_first_rows_is_refused() {
    let trace = |name: &str, csv: &str, n: u32| {
        let p = write_temp(name, csv);
        base(
            r#""max_num_seqs": 4"#,
            &format!(r#""dataset_name": "trace", "trace": {:?}, "prior_run_prefixes": {n}"#, p.to_str().unwrap()),
        )
        .replacen(r#""dataset_name": "random", "#, "", 1)
    };
    let plain = trace("no_prefix.csv", "arrival_time,input_len,output_len\n0,100,10\n0,100,10\n", 2);
    rejects("no_prefix_prior.json", &plain, &["workload.prior_run_prefixes", "prefix_group"]);
    let late = "arrival_time,input_len,output_len,prefix_group,prefix_len\n0,100,10,,\n0,100,10,,\n0,100,10,3,50\n";
    rejects("late_prefix_prior.json", &trace("late_prefix.csv", late, 2), &["workload.prior_run_prefixes"]);
    let ok = write_temp("ok_prefix_prior.json", &trace("ok_prefix.csv", late, 3));
    let o = run_cli(&["simulate", ok.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// `diff` reads a record's workload as the scenario reader does: `"inf"` and `"Infinity"` are one
/// rate and one burstiness, 5 and `"5"` one rate, an empty workload its defaults (these had been
/// reported as differing setups); a record with a key given twice is refused naming the file and
/// the key (it had been read silently with the last value).
#[test]
fn diff_reads_spellings_of_one_value_as_one_and_refuses_a_key_given_twice() {
    let rec = |name: &str, setup: &str| {
        let setup = setup.replacen('{', r#"{"engine":{"kind":"vllm"},"#, 1);
        write_temp(name, &format!(r#"{{"format":"servesim-run","version":1,"setup":{setup}}}"#))
    };
    let diff = |a: &std::path::Path, b: &std::path::Path| run_cli(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    for (a, b) in [
        (
            r#"{"workload":{"dataset_name":"random","request_rate":"inf","burstiness":"inf"}}"#,
            r#"{"workload":{"dataset_name":"random","request_rate":"Infinity","burstiness":"Infinity"}}"#,
        ),
        (r#"{"workload":{"request_rate":5}}"#, r#"{"workload":{"request_rate":"5"}}"#),
        (r#"{"workload":{}}"#, r#"{"workload":{"burstiness":1}}"#),
    ] {
        let o = diff(&rec("diff-same-a.json", a), &rec("diff-same-b.json", b));
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert!(out.contains("the same setup"), "{a} against {b}: {out}");
    }
    let ok = rec("diff-dup-ok.json", r#"{"workload":{"num_prompts":40}}"#);
    let dup = rec("diff-dup.json", r#"{"workload":{"num_prompts":40,"num_prompts":41}}"#);
    for (x, y) in [(&dup, &ok), (&ok, &dup)] {
        let o = diff(x, y);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(dup.to_str().unwrap()) && !err.contains(ok.to_str().unwrap()), "{err}");
        assert!(err.contains("setup.workload.num_prompts: given twice"), "{err}");
    }
}

/// `calibrate --from-results` refuses a result whose statistics of one metric cannot hold
/// together, naming the file, both fields and their values, and writes no profile (a p99 TTFT of
/// 20 under a median of 86, and a mean of 1000 over a max of 10, had been fitted into one).
#[test]
fn calibrate_refuses_statistics_that_cannot_hold_together() {
    let scenario = root().join("scenarios/serve-small-vllm.json");
    let point = r#""max_concurrency":8,"request_rate":"inf","num_prompts":40,"completed":40,"median_tpot_ms":10.3,"p99_tpot_ms":11.9"#;
    for (name, stats, want) in [
        ("pinv.json", r#""median_ttft_ms":86,"p99_ttft_ms":20"#, "p99_ttft_ms 20 is below median_ttft_ms 86"),
        ("minv.json", r#""mean_ttft_ms":1000,"max_ttft_ms":10"#, "mean_ttft_ms 1000 is above max_ttft_ms 10"),
    ] {
        let f = write_temp(name, &format!("{{{point},{stats}}}"));
        let out = f.with_extension("profile.json");
        let o = calibrate_from_results(
            &f,
            scenario.to_str().unwrap(),
            &out,
            &["--set", "cost.coefficients=null", "--max-evals", "100"],
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(&format!("{}: {want}", f.display())), "{err}");
        assert!(!out.exists(), "a profile was written");
    }
}

/// A staggered closed loop and a measured window: each field checked where it is read, both
/// window fields or neither, and a window the run's prompts do not outlast refused with what to
/// raise (its statistics would have measured a thinning load as the steady state).
#[test]
fn a_staggered_loop_and_a_measured_window_are_checked() {
    let s = |w: &str| base(r#""max_num_seqs": 8"#, &format!(r#""num_prompts": 40, "random_output_len": 16, {w}"#));
    rejects(
        "ramp_no_users.json",
        &s(r#""concurrency_ramp_s": 2"#),
        &["workload.concurrency_ramp_s", "max_concurrency"],
    );
    rejects(
        "ramp_rate.json",
        &s(r#""concurrency_ramp_s": 2, "max_concurrency": 4, "request_rate": 3"#),
        &["workload.concurrency_ramp_s", "\"inf\""],
    );
    rejects(
        "ramp_negative.json",
        &s(r#""concurrency_ramp_s": -1, "max_concurrency": 4"#),
        &["workload.concurrency_ramp_s", "got -1"],
    );
    rejects("window_half.json", &s(r#""window_start_s": 1"#), &["workload.window_duration_s", "missing"]);
    rejects("window_other_half.json", &s(r#""window_duration_s": 1"#), &["workload.window_start_s", "missing"]);
    rejects(
        "window_zero.json",
        &s(r#""window_start_s": 0, "window_duration_s": 0"#),
        &["workload.window_duration_s", "above 0"],
    );
    // 40 prompts at concurrency 4 are sent within seconds: a window to the 100th second outlasts them.
    rejects(
        "window_outlasts.json",
        &s(r#""max_concurrency": 4, "window_start_s": 1, "window_duration_s": 99"#),
        &["the measured window outlasts the load", "raise workload.num_prompts"],
    );
    let o = run_cli(&[
        "simulate",
        write_temp("window_outlasts.json", &s(r#""max_concurrency": 4, "window_start_s": 1, "window_duration_s": 99"#))
            .to_str()
            .unwrap(),
    ]);
    assert!(o.stdout.is_empty(), "no figures of a thinning load: {}", String::from_utf8_lossy(&o.stdout));
    // A window nothing completes in (every request here takes longer than its 0.05 s): an error.
    rejects(
        "window_empty.json",
        &s(r#""max_concurrency": 4, "window_start_s": 0, "window_duration_s": 0.05"#),
        &["no request completed in the measured window", "workload.window_start_s"],
    );
    // The live client sends neither: bench and check refuse them before any connection.
    let live =
        write_temp("window_live.json", &s(r#""max_concurrency": 4, "window_start_s": 0.2, "window_duration_s": 0.3"#));
    for cmd in [
        vec!["bench", "--base-url", "http://127.0.0.1:9", "--scenario", live.to_str().unwrap()],
        vec![
            "check",
            "--base-url",
            "http://127.0.0.1:9",
            "--scenario",
            live.to_str().unwrap(),
            "--concurrency",
            "2,4",
            "--fit-on",
            "2",
        ],
    ] {
        let o = run_cli(&cmd);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains("workload.window_start_s") && err.contains("simulate's only"),
            "{cmd:?}: {err}"
        );
    }
    // A window inside the load runs.
    let p = write_temp(
        "window_ok.json",
        &s(r#""max_concurrency": 4, "concurrency_ramp_s": 0.5, "window_start_s": 0.2, "window_duration_s": 0.3"#),
    );
    let o = run_cli(&["simulate", p.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Its figures say what they cover, and a staggered loop is not the lock-step burst.
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ids: Vec<&str> = j["caveats"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&"measured_window") && !ids.contains(&"lockstep_waves"), "{ids:?}");
    // A ramp without a window says that its start-up is in every figure.
    let no_window = ["--set", "workload.window_start_s=null", "--set", "workload.window_duration_s=null", "--json"];
    let o = run_cli(&[&["simulate", p.to_str().unwrap()][..], &no_window[..]].concat());
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let ids: Vec<&str> = j["caveats"].as_array().unwrap().iter().map(|c| c["id"].as_str().unwrap()).collect();
    assert!(ids.contains(&"staggered_start") && !ids.contains(&"measured_window"), "{ids:?}");
    // A sweep with a point whose window outlasts its prompts searches no knee and says why.
    let later = ["--set", "workload.window_start_s=2", "--set", "workload.window_duration_s=3"];
    let o = run_cli(&[&["sweep", p.to_str().unwrap(), "--concurrency", "1,4", "--json"][..], &later[..]].concat());
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(j["knee"].is_null() && j["knee_note"].as_str().unwrap().contains("did not complete"), "{j}");
}

/// `diff` refuses a record without `setup.engine` (it had compared one: 9 "differences", exit 0)
/// and a setup field of the wrong type (`random_input_len: "64"` had been shown as a
/// difference), naming the file and the field.
#[test]
fn diff_refuses_a_record_without_an_engine_or_with_a_field_of_the_wrong_type() {
    let rec = |name: &str, setup: &str| {
        write_temp(name, &format!(r#"{{"format":"servesim-run","version":1,"setup":{setup}}}"#))
    };
    let ok = rec("diff-engine-ok.json", r#"{"engine":{"kind":"vllm"},"workload":{"random_input_len":64}}"#);
    for (bad, field) in [
        (rec("diff-no-engine.json", r#"{"workload":{"random_input_len":64}}"#), "setup.engine"),
        (
            rec("diff-typed.json", r#"{"engine":{"kind":"vllm"},"workload":{"random_input_len":"64"}}"#),
            "setup.workload.random_input_len: expected a number, got \"64\"",
        ),
    ] {
        for (a, b) in [(&bad, &ok), (&ok, &bad)] {
            let o = run_cli(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
            let err = String::from_utf8_lossy(&o.stderr);
            assert_eq!(o.status.code(), Some(2), "{err}");
            assert!(err.contains(&format!("{}: ", bad.display())) && err.contains(field), "{err}");
            assert!(o.stdout.is_empty(), "{}", String::from_utf8_lossy(&o.stdout));
        }
    }
}

/// `diff` shows a value a record does not hold as what it is (a default, or a field its dataset
/// does not use), not as the run's value, and says "1 setup field differs".
#[test]
fn diff_shows_a_default_as_a_default_and_counts_in_good_grammar() {
    let rec = |name: &str, w: &str| {
        write_temp(
            name,
            &format!(
                r#"{{"format":"servesim-run","version":1,"setup":{{"engine":{{"kind":"vllm"}},"workload":{w}}}}}"#
            ),
        )
    };
    let random = rec("diff-random.json", r#"{"dataset_name":"random","random_input_len":64}"#);
    let prefix = rec("diff-prefix.json", r#"{"dataset_name":"prefix_repetition","prefix_repetition_prefix_len":100}"#);
    let o = run_cli(&["diff", random.to_str().unwrap(), prefix.to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        out.contains(
            "workload.random_input_len: A = 64, B = (not in the record: its dataset prefix_repetition does not use it)"
        ),
        "{out}"
    );
    assert!(!out.contains("B = 1024"), "{out}");
    let bare = rec("diff-bare.json", "{}");
    let o =
        run_cli(&["diff", bare.to_str().unwrap(), rec("diff-64.json", r#"{"random_input_len":64}"#).to_str().unwrap()]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("1 setup field differs between"), "{out}");
    assert!(out.contains("workload.random_input_len: A = 1024 (not in the record: the default), B = 64"), "{out}");
}

/// A `bench --save-result` result given to `diff` in place of its record is refused with where
/// the record is (`<name>.record.json` beside it).
#[test]
fn diff_of_a_bench_result_points_to_its_record() {
    let result = write_temp("diff-result.json", r#"{"completed": 4, "backend": "vllm"}"#);
    let record = result.with_file_name("diff-result.record.json");
    std::fs::write(&record, r#"{"format":"servesim-run","version":1,"setup":{"engine":{"kind":"vllm"}}}"#).unwrap();
    let o = run_cli(&["diff", result.to_str().unwrap(), record.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("no \"format\"") && err.contains(&format!("instead: {}", record.display())), "{err}");
}
