//! Fleets (issue #14): a fleet of one is the engine; N replicas under N× the load
//! behave as one; a prefix-aware router beats round-robin on a shared-prefix
//! workload; data parallelism and disaggregated prefill/decode run and say so.

mod common;

use common::{small_vllm, spec};
use serde_json::{json, Value};
use sim::simulation::{RunOptions, StopReason};

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-12)
}

fn with_fleet(mut v: Value, fleet: Value) -> Value {
    v["fleet"] = fleet;
    v
}

#[test]
fn a_fleet_of_one_is_the_engine() {
    for kind in ["vllm", "sglang"] {
        let mut v = small_vllm(512, 64, 60, 8);
        if kind == "sglang" {
            v["engine"] = json!({"kind": "sglang", "version": "0.5.23", "max_running_requests": 256,
                                  "max_total_tokens": 200000, "context_length": 8192});
        }
        v["workload"]["random_range_ratio"] = json!(0.5);
        let one = sim::simulate(&spec(v.clone()), RunOptions::default());
        let fleet = sim::simulate(&spec(with_fleet(v, json!({"count": 1}))), RunOptions::default());
        assert_eq!(fleet.run.stop, StopReason::Completed);
        let (a, b) = (&one.metrics, &fleet.metrics);
        assert_eq!(a.ttft.mean, b.ttft.mean, "{kind}");
        assert_eq!(
            (a.itl.p50, a.itl.p90, a.itl.p95, a.itl.p99),
            (b.itl.p50, b.itl.p90, b.itl.p95, b.itl.p99),
            "{kind}"
        );
        assert_eq!(a.e2el.mean, b.e2el.mean, "{kind}");
        assert_eq!(one.run.num_steps, fleet.run.num_steps, "{kind}");
        assert_eq!(one.run.counters, fleet.run.counters, "{kind}");
        assert_eq!(one.run.gauges, fleet.run.gauges, "{kind}");
        let f = fleet.fleet.as_ref().unwrap();
        assert_eq!(f.replicas.len(), 1);
        assert_eq!(f.replicas[0].requests, 60);
    }
}

/// N identical replicas behind round-robin, sent N× the load (near-constant arrivals, so
/// round-robin hands each replica the single engine's arrival stream), match one
/// replica's metrics within 2%.
#[test]
fn n_replicas_under_n_times_the_load_match_one() {
    let base = |prompts: u32, rate: f64| {
        let mut v = small_vllm(1024, 128, prompts, 1);
        let w = v["workload"].as_object_mut().unwrap();
        w.remove("max_concurrency");
        w.insert("request_rate".into(), json!(rate));
        w.insert("burstiness".into(), json!(1000.0));
        w.insert("random_range_ratio".into(), json!(0.2));
        v
    };
    let rate = 6.0;
    let one = sim::simulate(&spec(base(400, rate)), RunOptions::default());
    for n in [2u32, 4, 8] {
        let v =
            with_fleet(base(400 * n, rate * f64::from(n)), json!({"count": n, "router": {"policy": "round_robin"}}));
        let fl = sim::simulate(&spec(v), RunOptions::default());
        assert_eq!(fl.run.stop, StopReason::Completed);
        let (a, b) = (&one.metrics, &fl.metrics);
        let checks = [
            ("output_throughput / N", b.output_throughput / f64::from(n), a.output_throughput),
            ("mean TTFT", b.ttft.mean, a.ttft.mean),
            ("median TTFT", b.ttft.median, a.ttft.median),
            ("mean TPOT", b.tpot.mean, a.tpot.mean),
            ("mean ITL", b.itl.mean, a.itl.mean),
            ("mean E2EL", b.e2el.mean, a.e2el.mean),
        ];
        for (name, got, want) in checks {
            assert!(
                rel(got, want) < 0.02,
                "N={n}: {name}: fleet {got:.3} vs one replica {want:.3} ({:.2}%)",
                100.0 * rel(got, want)
            );
        }
        let reqs: Vec<u64> = fl.fleet.as_ref().unwrap().replicas.iter().map(|r| r.requests).collect();
        assert!(reqs.iter().all(|&r| r == 400), "round-robin spreads evenly: {reqs:?}");
    }
}

/// Many system prompts, each replica's KV pool too small to hold them all: round-robin
/// sends every prefix to every replica (each computes and caches it, evicting others),
/// SGLang's cache-aware router sends a prefix where its tree says it went before
/// (`sgl-router/src/policies/cache_aware.rs`), so each prefix is computed about once.
#[test]
fn a_prefix_aware_router_beats_round_robin_on_shared_prefixes() {
    let v = |router: Value| {
        let mut v = small_vllm(0, 64, 1600, 1);
        v["engine"]["kv_cache_tokens"] = json!(60000);
        v["workload"] = json!({"dataset_name": "prefix_repetition", "prefix_repetition_prefix_len": 2048,
            "prefix_repetition_suffix_len": 64, "prefix_repetition_num_prefixes": 64,
            "prefix_repetition_output_len": 64, "num_prompts": 1600, "request_rate": 40,
            "ignore_eos": true, "initial_test_request": false, "seed": 3});
        with_fleet(v, json!({"count": 4, "router": router}))
    };
    let rr = sim::simulate(&spec(v(json!({"policy": "round_robin"}))), RunOptions::default());
    let ca = sim::simulate(&spec(v(json!({"policy": "cache_aware"}))), RunOptions::default());
    let hits =
        |o: &sim::SimOutput| o.run.counters.prefix_cache_hits as f64 / o.run.counters.prefix_cache_queries as f64;
    let (h_rr, h_ca) = (hits(&rr), hits(&ca));
    assert!(h_ca > h_rr + 0.1, "cache-aware hit rate {h_ca:.3} vs round-robin {h_rr:.3}");
    assert!(
        ca.metrics.ttft.mean < 0.8 * rr.metrics.ttft.mean,
        "cache-aware mean TTFT {:.1} ms vs round-robin {:.1} ms",
        ca.metrics.ttft.mean,
        rr.metrics.ttft.mean
    );
    // Fewer prompt tokens computed: the mechanism, not only the outcome.
    let computed = |o: &sim::SimOutput| o.run.counters.prefill_tokens_computed;
    assert!(computed(&ca) < computed(&rr));
}

#[test]
fn fleets_are_deterministic_and_report_each_replica() {
    let mut v = small_vllm(512, 64, 300, 32);
    v = with_fleet(v, json!({"count": 3, "router": {"policy": "power_of_two"}}));
    let a = sim::simulate(&spec(v.clone()), RunOptions::default());
    let b = sim::simulate(&spec(v.clone()), RunOptions { fast_forward: false, ..Default::default() });
    let s = spec(v);
    let ja = sim::report::PointReport::of(&s, &a);
    let jb = sim::report::PointReport::of(&s, &b);
    assert_eq!(
        serde_json::to_string(&ja).unwrap(),
        serde_json::to_string(&jb).unwrap(),
        "fast-forward is exact in a fleet"
    );
    let reps = ja.replicas.as_ref().unwrap();
    assert_eq!(reps.len(), 3);
    assert_eq!(reps.iter().map(|r| r.requests).sum::<u64>(), 300);
    assert_eq!(ja.fleet.as_ref().unwrap().router, "power_of_two");
    // Invariants after every step of every replica.
    let c = sim::simulate(&s, RunOptions { check_invariants: true, ..Default::default() });
    assert_eq!(c.run.stop, StopReason::Completed);
}

#[test]
fn data_parallel_engines_share_a_front_end_and_balance() {
    let mut v = small_vllm(512, 64, 400, 64);
    v["engine"]["data_parallel_size"] = json!(4);
    let o = sim::simulate(&spec(v.clone()), RunOptions::default());
    assert_eq!(o.run.stop, StopReason::Completed);
    let f = o.fleet.as_ref().unwrap();
    assert_eq!(f.router, "vllm_data_parallel");
    assert_eq!(f.replicas.len(), 4);
    assert!(
        f.replicas.iter().all(|r| r.requests > 50),
        "{:?}",
        f.replicas.iter().map(|r| r.requests).collect::<Vec<_>>()
    );
    // SGLang's flag on vLLM is an error naming the counterpart.
    v["engine"]["dp_size"] = json!(2);
    let s: sim::config::Scenario = sim::config::from_value(v, "").unwrap();
    let e = sim::config::resolve(&s, &common::resources()).unwrap_err();
    assert!(e.message.contains("data_parallel_size"), "{e}");
    // SGLang dp_size with shortest_queue.
    let mut g = small_vllm(512, 64, 200, 32);
    g["engine"] = json!({"kind": "sglang", "version": "0.5.23", "max_total_tokens": 200000, "context_length": 8192,
                         "dp_size": 2, "load_balance_method": "shortest_queue"});
    let o = sim::simulate(&spec(g.clone()), RunOptions::default());
    assert_eq!(o.fleet.as_ref().unwrap().router, "sglang_data_parallel");
    assert_eq!(o.run.stop, StopReason::Completed);
    // SGLang's errors name SGLang's flags.
    g["hardware"] = json!({"gpu": "h100-80gb", "count": 3});
    let s: sim::config::Scenario = sim::config::from_value(g.clone(), "").unwrap();
    let e = sim::config::resolve(&s, &common::resources()).unwrap_err();
    assert!(e.message.contains("(dp_size × tp_size)") && !e.message.contains("data_parallel_size"), "{e}");
    g["hardware"] = json!("h100-80gb");
    g["fleet"] = json!({"count": 2});
    let s: sim::config::Scenario = sim::config::from_value(g, "").unwrap();
    let e = sim::config::resolve(&s, &common::resources()).unwrap_err();
    assert_eq!(e.path, "engine.dp_size", "{e}");
}

#[test]
fn disaggregated_prefill_and_decode_transfer_the_kv_cache() {
    let v = |bw: f64| {
        let mut v = small_vllm(4096, 128, 200, 16);
        v["workload"].as_object_mut().unwrap().remove("max_concurrency");
        v["workload"]["request_rate"] = json!(2.0);
        with_fleet(v, json!({"prefill_count": 1, "decode_count": 1, "kv_transfer_bandwidth_bytes_per_s": bw}))
    };
    let fast = sim::simulate(&spec(v(50e9)), RunOptions { check_invariants: true, ..Default::default() });
    assert_eq!(fast.run.stop, StopReason::Completed);
    let f = fast.fleet.as_ref().unwrap();
    assert_eq!(f.kv_transfers, 200);
    // Qwen2.5-7B: 28 layers × 4 KV heads × 128 × 2 (K, V) × 2 B = 57,344 B a token; 4096 tokens at 50 GB/s.
    let want_ms = 57_344.0 * 4096.0 / 50e9 * 1e3;
    assert!(rel(f.mean_kv_transfer_ms, want_ms) < 0.01, "{} vs {want_ms}", f.mean_kv_transfer_ms);
    let slow = sim::simulate(&spec(v(1e9)), RunOptions::default());
    assert!(
        slow.metrics.ttft.mean > fast.metrics.ttft.mean + 200.0,
        "a slow link shows in TTFT: {} vs {}",
        slow.metrics.ttft.mean,
        fast.metrics.ttft.mean
    );
    // Decode replicas compute no prompts: their prefill tokens are loaded, and no step is charged for them.
    let d = &f.replicas[1];
    assert_eq!(d.role, sim::config::ReplicaRole::Decode);
    // It computes one token of each prompt chunk it schedules (the last, to sample; a 4,096-token
    // prompt runs in a few chunks of its token budget, docs/fleets.md); the rest of the prompt
    // was transferred (its engine counted all 4,096 as prefill until 2026-12-05).
    let dp = d.counters.prefill_tokens_computed;
    assert!((200..200 * 4).contains(&dp), "{dp}");
    assert_eq!(f.replicas[0].counters.prefill_tokens_computed, 200 * 4096);
    // Every output token came from the decode side.
    assert_eq!(fast.metrics.total_output_tokens, 200 * 128);

    // vLLM's connector moves only the prompt beyond what the decode side caches already: with
    // a shared 3,072-token prefix of the 4,096, every transfer after the first moves 1,024
    // tokens (it moved all 4,096 each time until 2026-12-05). SGLang's decode side keeps no
    // radix cache: the whole prompt moves.
    let mut w = v(50e9);
    w["workload"]["random_prefix_len"] = json!(3072);
    w["workload"]["random_input_len"] = json!(1024);
    let shared = sim::simulate(&spec(w), RunOptions { check_invariants: true, ..Default::default() });
    let f = shared.fleet.as_ref().unwrap();
    let suffix_ms = 57_344.0 * 1024.0 / 50e9 * 1e3;
    let want = (want_ms + 199.0 * suffix_ms) / 200.0;
    assert!(rel(f.mean_kv_transfer_ms, want) < 0.01, "{} vs {want}", f.mean_kv_transfer_ms);
    // SGLang's decode servers run a chunk cache whatever disable_radix_cache says: no hit there,
    // and every prompt moves whole.
    let mut g = v(50e9);
    g["workload"]["random_prefix_len"] = json!(3072);
    g["workload"]["random_input_len"] = json!(1024);
    g["engine"] = json!({"kind": "sglang", "version": "0.5.10", "context_length": 8192, "disable_radix_cache": false});
    let sg = sim::simulate(&spec(g), RunOptions::default());
    let f = sg.fleet.as_ref().unwrap();
    assert_eq!(f.replicas[1].counters.prefix_cache_hits, 0);
    assert!(f.replicas[0].counters.prefix_cache_hits > 0, "the prefill side keeps its radix cache");
    assert!(rel(f.mean_kv_transfer_ms, want_ms) < 0.01, "{} vs {want_ms}", f.mean_kv_transfer_ms);
}

/// The TTFT split adds up to the mean TTFT in a disaggregated fleet too. A prefill replica under
/// SGLang's overlap scheduler schedules a request once more after its prefill is done (the
/// finish is seen a step late); that step counted as prefill time, which then exceeded the time
/// from first scheduled to first token (found 2026-12-04 by checking the split on random runs).
#[test]
fn a_disaggregated_fleets_ttft_split_adds_up() {
    for (kind, version, engine_extra) in [
        ("sglang", "0.5.10", json!({"context_length": 8192, "max_total_tokens": 16000})),
        (
            "sglang",
            "0.5.10",
            json!({"context_length": 8192, "max_total_tokens": 16000, "disable_overlap_schedule": true}),
        ),
        ("vllm", "0.11.0", json!({"max_model_len": 8192, "kv_cache_tokens": 16000})),
    ] {
        for (p, d) in [(1, 1), (2, 2)] {
            let mut engine = engine_extra.clone();
            engine["kind"] = json!(kind);
            engine["version"] = json!(version);
            let s =
                spec(json!({"version": 1, "engine": engine, "model": "llama-3.1-8b-instruct", "hardware": "h100-80gb",
                "workload": {"dataset_name": "random", "num_prompts": 100, "ignore_eos": true, "seed": 135,
                             "random_input_len": 1024, "random_output_len": 16, "random_range_ratio": 0.5},
                "fleet": {"prefill_count": p, "decode_count": d}}));
            let out = sim::simulate(&s, sim::simulation::RunOptions::default());
            for (i, r) in out.run.records.iter().enumerate() {
                if let (Some(a), Some(b)) = (r.first_scheduled_ns, r.first_token_step_end_ns) {
                    assert!(
                        r.prefill_compute_ns <= b - a,
                        "{kind} {p}P{d}D request {i}: prefill {} in {}",
                        r.prefill_compute_ns,
                        b - a
                    );
                }
            }
            let m = &out.metrics;
            let b = &m.ttft_breakdown;
            let sum = b.queue_wait_ms + b.prefill_ms + b.interleave_ms + b.overhead_ms;
            assert!(
                (sum - m.ttft.mean).abs() <= 1e-6 * m.ttft.mean,
                "{kind} {p}P{d}D: parts {sum} against {}",
                m.ttft.mean
            );
        }
    }
}

/// A pool pinned in tokens at the top level is that setup's: a group on another GPU, or with
/// another TP size, derives its own from memory (it kept the RTX 5090's figure on H100s); a
/// group changing a flag that sizes the pool (its running cap) moves it by what the derived pool
/// moves, and a group's own pin wins.
#[test]
fn a_group_on_other_hardware_does_not_inherit_a_pinned_pool() {
    let v = json!({"version": 1, "engine": {"kind": "vllm", "version": "0.28.0", "max_num_seqs": 128, "max_model_len": 32768,
                    "gpu_memory_utilization": 0.85, "kv_cache_tokens": 194896},
                   "model": "qwen2.5-7b-instruct", "hardware": {"gpu": "rtx-5090", "host": "wsl2"},
                   "workload": {"dataset_name": "random", "random_input_len": 512, "random_output_len": 16, "num_prompts": 8,
                                "max_concurrency": 4, "ignore_eos": true, "seed": 0},
                   "fleet": {"replicas": [{"count": 1}, {"count": 1, "hardware": "h100-80gb"},
                                          {"count": 1, "hardware": {"gpu": "h100-80gb", "count": 2}, "engine": {"tensor_parallel_size": 2}},
                                          {"count": 1, "engine": {"max_num_seqs": 64}},
                                          {"count": 1, "hardware": "h100-80gb", "engine": {"kv_cache_tokens": 100000}},
                                          {"count": 1, "engine": {"max_model_len": 8192, "enforce_eager": false}}]}});
    let pools: Vec<u64> =
        spec(v.clone()).fleet.as_ref().unwrap().replicas.iter().map(|r| r.engine.kv_capacity_tokens()).collect();
    // The single engine's pools for the same setups, as --set hardware=… derives them.
    let one_with = |hw: serde_json::Value, tp: u32, seqs: u32| {
        let mut w = v.clone();
        w.as_object_mut().unwrap().remove("fleet");
        w["hardware"] = hw;
        w["engine"]["tensor_parallel_size"] = json!(tp);
        w["engine"]["max_num_seqs"] = json!(seqs);
        w["engine"].as_object_mut().unwrap().remove("kv_cache_tokens");
        spec(w).engine.kv_capacity_tokens()
    };
    let one = |hw: serde_json::Value, tp: u32| one_with(hw, tp, 128);
    assert_eq!(pools[0], 194880);
    assert_eq!(pools[1], one(json!("h100-80gb"), 1));
    assert_eq!(pools[2], one(json!({"gpu": "h100-80gb", "count": 2}), 2));
    assert!(pools[1] > 4 * pools[0] && pools[2] > 2 * pools[1], "{pools:?}");
    // A running cap sizes vLLM's sampler peak and CUDA graphs, so the group's pool moves by what
    // the derived pool moves, the log's offset from the account kept (`config::POOL_FLAGS`; it
    // kept the pin until 2026-12-07, and was derived until 2026-12-07).
    let wsl2 = json!({"gpu": "rtx-5090", "host": "wsl2"});
    assert_eq!(pools[3] as i64 - 194880, one_with(wsl2.clone(), 1, 64) as i64 - one_with(wsl2, 1, 128) as i64);
    assert_ne!(pools[3], 194880);
    // Each change is said (the binary warns with it), naming the group.
    let resolved = spec(v.clone());
    let said: Vec<String> = resolved.fleet.as_ref().unwrap().pin_changes.iter().map(|c| c.message("s.json")).collect();
    assert_eq!(said.len(), 3, "{said:?}");
    assert!(said[0].contains("engine.kv_cache_tokens was dropped: fleet.replicas[1]'s hardware"), "{said:?}");
    assert!(
        said[2].contains("engine.kv_cache_tokens moved from 194,896 to")
            && said[2].contains("fleet.replicas[3]'s engine.max_num_seqs"),
        "{said:?}"
    );
    assert_eq!(pools[4], 99984); // 100,000 in whole 16-token blocks, less the null block
                                 // Flags that leave the derived pool as it is (max_model_len with chunked prefill on, eager
                                 // mode at its default) keep the pin, as `--set` does on one engine.
    assert_eq!(pools[5], 194880);
    // The text report's header names every card and how each pool was sized (it said
    // "6 x rtx-5090" for two RTX 5090s and four H100s, before the test's third RTX 5090 group).
    let s = spec(v);
    let out = sim::simulate(&s, RunOptions::default());
    let text = sim::report::text(&s, &out, &Default::default());
    let header = text.lines().next().unwrap();
    assert!(
        header.contains(
            "| 3 x rtx-5090 + 4 x h100-80gb | vllm 0.28.0 | KV pool from kv_cache_tokens or gpu_memory_utilization"
        ),
        "{header}"
    );
}

/// A group that spells out what the top level has by default (a TP size of 1, an "auto" KV dtype,
/// its card as `{"gpu": id}`) is the same setup: the pinned pool holds, as `--set` of the same
/// values keeps it (the review of 2026-12-07: each dropped a 400,000-token log for a derived
/// 446,352).
#[test]
fn a_group_spelling_out_a_default_keeps_the_pin() {
    let mut v: serde_json::Value = serde_json::from_str(
        sim::builtin::SCENARIOS.iter().find(|(n, _)| *n == "long-prefill-itl-llama3.1-8b-h100-vllm").unwrap().1,
    )
    .unwrap();
    v["workload"]["num_prompts"] = json!(4);
    v["fleet"] = json!({"replicas": [{"count": 1}, {"count": 1, "engine": {"tensor_parallel_size": 1}},
                                     {"count": 1, "engine": {"kv_cache_dtype": "auto"}},
                                     {"count": 1, "hardware": {"gpu": "h100-80gb"}}]});
    let s = spec(v);
    let f = s.fleet.as_ref().unwrap();
    assert!(
        f.replicas.iter().all(|r| r.engine.kv_capacity_tokens() == 400000 - 16),
        "{:?}",
        f.replicas.iter().map(|r| r.engine.kv_capacity_tokens()).collect::<Vec<_>>()
    );
    assert!(f.pin_changes.is_empty(), "{:?}", f.pin_changes);
}

/// Fixed step coefficients are the top level's deployment's costs: a group on another GPU or TP
/// size is refused, naming its field (the robustness audit of 2026-12-07: an RTX 4090 replica
/// beside an A100 ran the A100's steps, step for step); a group changing only an engine flag runs.
#[test]
fn a_group_on_other_hardware_is_not_timed_by_the_top_levels_fixed_coefficients() {
    let mut v = small_vllm(512, 64, 100, 16);
    v["cost"] = json!({"coefficients": {"step_us": 8000, "per_seq_us": 4, "prefill_token_us": 30,
        "decode_token_us": 150, "prefill_attention_us": 0.001, "decode_kv_us": 0.5}});
    for (group, field) in [
        (json!({"count": 1, "hardware": "rtx-4090"}), "fleet.replicas[1].hardware"),
        (
            json!({"count": 1, "hardware": {"gpu": "h100-80gb", "count": 2}, "engine": {"tensor_parallel_size": 2}}),
            "fleet.replicas[1].hardware",
        ),
    ] {
        let mut w = v.clone();
        w["fleet"] = json!({"replicas": [{"count": 1}, group]});
        let s: sim::config::Scenario = sim::config::from_value(w, "").unwrap();
        let e = sim::config::resolve(&s, &common::resources()).unwrap_err();
        assert_eq!(e.path, field, "{e}");
        assert!(
            e.message.contains("fixed coefficients (cost.coefficients: step_us, per_seq_us, prefill_token_us,"),
            "{e}"
        );
    }
    let mut w = v.clone();
    w["fleet"] = json!({"replicas": [{"count": 1}, {"count": 1, "engine": {"max_num_seqs": 8}}]});
    let s: sim::config::Scenario = sim::config::from_value(w, "").unwrap();
    assert!(sim::config::resolve(&s, &common::resources()).is_ok());
}

/// A disaggregated shorthand with one count names the one that is missing (it named
/// prefill_count whichever was given).
#[test]
fn a_lone_pd_count_names_the_missing_one() {
    for (given, missing) in [("decode_count", "fleet.prefill_count"), ("prefill_count", "fleet.decode_count")] {
        let mut v = small_vllm(512, 64, 100, 16);
        v["fleet"] = json!({ given: 1 });
        let s: sim::config::Scenario = sim::config::from_value(v, "").unwrap();
        let e = sim::config::resolve(&s, &common::resources()).unwrap_err();
        assert_eq!(e.path, missing, "{e}");
        assert!(e.message.contains(&format!("{given} is given")), "{e}");
    }
}

/// The wait in the decode engine's queue, from a transfer landing to the decode replica first
/// scheduling the request (`FleetRun::mean_kv_landed_to_scheduled_ms`): a step or so with room
/// on the decode side, much longer when its KV pool binds (the transfer itself starts whenever
/// none is in flight, so the decode side's shortage shows here, not in the wait for the link).
#[test]
fn the_wait_from_landing_to_the_decode_replicas_first_schedule_is_measured() {
    let v = |decode_pool: u32| {
        let mut v = small_vllm(4096, 512, 120, 48);
        v["engine"].as_object_mut().unwrap().remove("kv_cache_tokens");
        with_fleet(
            v,
            json!({"replicas": [{"role": "prefill", "engine": {"kv_cache_tokens": 200000}},
                                {"role": "decode", "engine": {"kv_cache_tokens": decode_pool}}]}),
        )
    };
    let roomy = sim::simulate(&spec(v(400_000)), RunOptions { check_invariants: true, ..Default::default() });
    let tight = sim::simulate(&spec(v(30_000)), RunOptions { check_invariants: true, ..Default::default() });
    for o in [&roomy, &tight] {
        assert_eq!(o.run.stop, StopReason::Completed);
    }
    let (r, t) = (roomy.fleet.as_ref().unwrap(), tight.fleet.as_ref().unwrap());
    assert!(r.mean_kv_landed_to_scheduled_ms < 100.0, "{}", r.mean_kv_landed_to_scheduled_ms);
    assert!(
        t.mean_kv_landed_to_scheduled_ms > 10.0 * r.mean_kv_landed_to_scheduled_ms.max(1.0),
        "a KV-starved decode replica queues landed requests: {} vs {}",
        t.mean_kv_landed_to_scheduled_ms,
        r.mean_kv_landed_to_scheduled_ms
    );
    assert!(t.mean_kv_transfer_wait_ms < t.mean_kv_landed_to_scheduled_ms, "{t:?}");
}

/// An SGLang decode replica is SGLang's decode server: it admits landed requests as a prebuilt
/// batch, each whole prompt at once, with no token budget (`disaggregation/decode.py`,
/// `get_new_prebuilt_batch`), so its own `chunked_prefill_size` changes nothing. Until
/// 2026-12-06 a landed 2,048-token prompt went through the decode engine's ordinary admission:
/// under a 256-token chunk, eight prebuilt-only steps instead of one, each the host's time.
#[test]
fn an_sglang_decode_replica_admits_landed_prompts_whatever_its_chunk_size() {
    let run = |decode_chunk: u32| {
        let mut v = small_vllm(2048, 64, 60, 16);
        v["engine"] = json!({"kind": "sglang", "version": "0.5.6", "context_length": 8192, "max_total_tokens": 200000,
                             "max_running_requests": 64});
        let v = with_fleet(
            v,
            json!({"replicas": [{"role": "prefill", "count": 2, "engine": {"chunked_prefill_size": 8192}},
                                {"role": "decode", "engine": {"chunked_prefill_size": decode_chunk}}],
                   "kv_transfer_bandwidth_bytes_per_s": 450e9}),
        );
        sim::simulate(&spec(v), RunOptions { check_invariants: true, ..Default::default() })
    };
    let (small, large) = (run(256), run(16384));
    for o in [&small, &large] {
        assert_eq!(o.run.stop, StopReason::Completed);
    }
    let (fs, fl) = (small.fleet.as_ref().unwrap(), large.fleet.as_ref().unwrap());
    assert_eq!(fs.replicas[2].role, sim::config::ReplicaRole::Decode);
    assert_eq!(fs.replicas[2].num_steps, fl.replicas[2].num_steps);
    assert_eq!(small.metrics.ttft.mean, large.metrics.ttft.mean);
    assert_eq!(small.metrics.tpot.mean, large.metrics.tpot.mean);
    // The prebuilt batch runs no forward: no landed prompt's token is computed there.
    assert_eq!(fs.replicas[2].counters.prefill_tokens_computed, 0);
}

/// The engines' own data-parallel balancers are not fleet routers: named as `fleet.router` or
/// `fleet.decode_router` they are refused, naming the field and the engine flag that gives them
/// (they ran, even SGLang's controller in front of vLLM replicas: the fleet audit of 2026-12-06).
#[test]
fn the_engines_data_parallel_balancers_are_not_fleet_routers() {
    for (field, policy, flag) in [
        ("router", json!({"policy": "vllm_data_parallel"}), "engine.data_parallel_size"),
        (
            "router",
            json!({"policy": "sglang_data_parallel", "load_balance_method": "shortest_queue"}),
            "engine.dp_size",
        ),
        ("decode_router", json!({"policy": "vllm_data_parallel"}), "engine.data_parallel_size"),
    ] {
        let mut fleet = json!({"prefill_count": 1, "decode_count": 1});
        if field == "router" {
            fleet = json!({"count": 2});
        }
        fleet[field] = policy;
        let s: sim::config::Scenario =
            sim::config::from_value(with_fleet(small_vllm(512, 64, 20, 4), fleet), "").unwrap();
        let e = sim::config::resolve(&s, &common::resources()).unwrap_err();
        assert_eq!(e.path, format!("fleet.{field}"), "{e}");
        assert!(e.message.contains("not a fleet router") && e.message.contains(flag), "{e}");
    }
}

/// SGLang's decode server from 0.5.10 merges landed requests into the running batch as it forms
/// it and streams their first tokens then (`get_next_disagg_decode_batch_to_run` calls
/// `process_batch_result_prebuilt`); through 0.5.9 the prebuilt batch is an iteration of its own
/// (read in the 0.5.9 and 0.5.10 wheels). With the overlap scheduler, the merged first token
/// comes about a decode step earlier: the decode replica runs no prebuilt-only steps, the wait
/// from landing to the scheduler taking the request is shorter, and so is TTFT; the tokens and
/// every invariant after every step hold (a one-token output finishes as it is merged).
#[test]
fn sglang_decode_servers_merge_the_prebuilt_batch_from_0_5_10() {
    let run = |version: &str, output: u32| {
        let mut v = small_vllm(1024, output, 120, 16);
        v["engine"] = json!({"kind": "sglang", "version": version, "max_running_requests": 64,
                              "max_total_tokens": 200000, "context_length": 8192});
        v["hardware"] = json!("h100-80gb");
        let o = sim::simulate(
            &spec(with_fleet(v, json!({"prefill_count": 1, "decode_count": 1}))),
            RunOptions { check_invariants: true, ..Default::default() },
        );
        assert_eq!(o.run.stop, StopReason::Completed, "{version}");
        assert_eq!(o.metrics.completed, 120, "{version}");
        assert_eq!(o.metrics.total_output_tokens, 120 * u64::from(output), "{version}");
        o
    };
    let (old, new) = (run("0.5.9", 64), run("0.5.10", 64));
    let (fo, fnew) = (old.fleet.as_ref().unwrap(), new.fleet.as_ref().unwrap());
    assert!(
        fnew.replicas[1].num_steps < fo.replicas[1].num_steps,
        "no prebuilt step of its own: {} vs {}",
        fnew.replicas[1].num_steps,
        fo.replicas[1].num_steps
    );
    assert!(
        fnew.mean_kv_landed_to_scheduled_ms < fo.mean_kv_landed_to_scheduled_ms,
        "{} vs {}",
        fnew.mean_kv_landed_to_scheduled_ms,
        fo.mean_kv_landed_to_scheduled_ms
    );
    assert!(new.metrics.ttft.mean < old.metrics.ttft.mean, "{} vs {}", new.metrics.ttft.mean, old.metrics.ttft.mean);
    // One-token outputs: the prefill server's token is the whole output, streamed as merged.
    let one = run("0.5.23", 1);
    assert_eq!(one.fleet.as_ref().unwrap().replicas[1].num_steps, 0, "the decode server runs no step");
}

/// SGLang's decode server reserves KV for a request before the request's prefill may start
/// (`DecodePreallocQueue.pop_preallocated`; the prefill server's bootstrap queue holds the request
/// until the decode side has said where its KV goes), keeping `num_reserved_decode_tokens` (512)
/// for each request's decode (read in the 0.4.10, 0.5.1, 0.5.6 and 0.5.23 wheels). On a
/// 4,096-token decode pool, four 1,000-token prompts sent at once: the first pass pre-allocates
/// two (4,096 → 2,584 → 1,072, and 1,512 more do not fit), and the other two wait, their prefill
/// not started, until the first two have finished (while they run, 512 are kept for each and
/// their prompts hold the pool). With the reserve at 0, three go at once. vLLM's decode side
/// reserves after the prefill, for the transfer, and reports no such wait.
#[test]
fn an_sglang_decode_server_preallocates_before_the_prefill_keeping_a_reserve() {
    let run = |kind: &str, decode: Value| -> (sim::config::SimSpec, sim::SimOutput) {
        let mut v = small_vllm(1000, 100, 4, 4);
        if kind == "sglang" {
            v["engine"] = json!({"kind": "sglang", "version": "0.5.6", "context_length": 8192,
                                 "max_total_tokens": 200000, "max_running_requests": 64});
        }
        v["hardware"] = json!("h100-80gb");
        let v = with_fleet(v, json!({"replicas": [{"role": "prefill"}, {"role": "decode", "engine": decode}]}));
        let s = spec(v);
        let o = sim::simulate(&s, RunOptions { check_invariants: true, ..Default::default() });
        assert_eq!(o.run.stop, StopReason::Completed, "{kind}");
        assert_eq!(o.metrics.completed, 4);
        (s, o)
    };
    let (tight_spec, tight) = run("sglang", json!({"max_total_tokens": 4096}));
    let (_, roomy) = run("sglang", json!({}));
    let (_, no_reserve) = run("sglang", json!({"max_total_tokens": 4096, "num_reserved_decode_tokens": 0}));
    let wait = |o: &sim::SimOutput| o.fleet.as_ref().unwrap().mean_kv_prealloc_wait_ms.unwrap();
    assert_eq!(wait(&roomy), 0.0);
    // Two of the four waited for the first two's whole lives (about half the last one's E2EL):
    // the mean wait over four is half of that.
    let e2el = tight.metrics.e2el.max;
    assert!(
        wait(&tight) > 0.2 * e2el && tight.metrics.ttft.max > 0.5 * e2el,
        "prealloc wait {} ms, TTFT max {} ms, E2EL max {} ms",
        wait(&tight),
        tight.metrics.ttft.max,
        e2el
    );
    // One waited without the reserve.
    assert!(wait(&no_reserve) > 0.0 && wait(&no_reserve) < wait(&tight), "{} vs {}", wait(&no_reserve), wait(&tight));
    let f = sim::report::FleetReport::of(tight.fleet.as_ref().unwrap());
    assert_eq!(f.mean_kv_prealloc_wait_ms, Some(wait(&tight)));
    let text = sim::report::text(&tight_spec, &tight, &Default::default());
    assert!(text.contains("Mean wait for decode pre-allocation (ms):"), "{text}");
    // (A max_model_len the 4,096-token pool holds: vLLM refuses one it cannot.)
    let (_, vllm) = run("vllm", json!({"kv_cache_tokens": 4096, "max_model_len": 4080}));
    assert_eq!(vllm.fleet.as_ref().unwrap().mean_kv_prealloc_wait_ms, None);
}

/// A prompt that the SGLang decode server can never pre-allocate (its prompt plus the reserve
/// exceed the pool) stalls the run with a reason naming the pre-allocation queue, not silently.
#[test]
fn a_prompt_an_sglang_decode_server_cannot_preallocate_stalls_with_a_reason() {
    let mut v = small_vllm(3800, 16, 2, 2);
    v["engine"] = json!({"kind": "sglang", "version": "0.5.23", "context_length": 8192,
                         "max_total_tokens": 200000, "max_running_requests": 64});
    v["hardware"] = json!("h100-80gb");
    let v = with_fleet(
        v,
        json!({"replicas": [{"role": "prefill"}, {"role": "decode", "engine": {"max_total_tokens": 4096}}]}),
    );
    let o = sim::simulate(&spec(v), RunOptions::default());
    match &o.run.stop {
        StopReason::Stalled { why: Some(why), .. } => {
            assert!(why.contains("pre-allocation queue") && why.contains("num_reserved_decode_tokens (512)"), "{why}")
        }
        other => panic!("{other:?}"),
    }
}

/// One-token outputs on a decode server through 0.5.9 (the prebuilt batch an iteration of its
/// own): a request whose only output is the prefill server's token finishes at its prebuilt step
/// and is freed while the batch is still held; the pre-allocation queue's view skips it (it read
/// the freed request and panicked: the P/D audit of 2026-12-07). Every request completes and every
/// invariant holds after every step.
#[test]
fn one_token_outputs_on_an_sglang_decode_server_with_a_waiting_pre_allocation_complete() {
    for version in ["0.4.10", "0.5.6", "0.5.23"] {
        let mut v = small_vllm(1000, 1, 24, 8);
        v["engine"] = json!({"kind": "sglang", "version": version, "context_length": 8192,
                             "max_total_tokens": 200000, "max_running_requests": 64});
        v["hardware"] = json!("h100-80gb");
        let v = with_fleet(
            v,
            json!({"replicas": [{"role": "prefill"}, {"role": "decode", "engine": {"max_total_tokens": 4096}}]}),
        );
        let o = sim::simulate(&spec(v), RunOptions { check_invariants: true, ..Default::default() });
        assert_eq!(o.run.stop, StopReason::Completed, "{version}");
        assert_eq!(o.metrics.completed, 24, "{version}");
        assert!(o.fleet.as_ref().unwrap().mean_kv_prealloc_wait_ms.unwrap() > 0.0, "{version}: some waited");
    }
}

/// A fleet's WSL2 caveat reads every replica's host: a group of RTX 5090s under WSL2 behind a
/// Linux H100 group carries it (it read only the first group's card), a fleet of Linux hosts
/// does not.
#[test]
fn a_fleet_with_a_wsl2_group_anywhere_carries_the_wsl2_caveat() {
    let fleet = |second: Value| {
        json!({"version": 1, "engine": {"kind": "vllm", "version": "0.28.0", "max_num_seqs": 16, "max_model_len": 4096},
               "model": "qwen2.5-7b-instruct", "hardware": "h100-80gb",
               "workload": {"dataset_name": "random", "random_input_len": 256, "random_output_len": 8, "num_prompts": 4,
                            "max_concurrency": 2, "ignore_eos": true, "seed": 0},
               "fleet": {"replicas": [{"count": 1}, {"count": 1, "hardware": second}]}})
    };
    let ids = |v: Value| {
        let s = spec(v);
        let w = sim::workload::generate(&s.workload);
        sim::report::caveats(&s, &w).into_iter().map(|c| c.id).collect::<Vec<_>>()
    };
    let wsl2 = fleet(json!({"gpu": "rtx-5090", "host": "wsl2"}));
    assert!(!spec(wsl2.clone()).fleet.as_ref().unwrap().replicas[0].wddm_host);
    assert!(spec(wsl2.clone()).fleet.as_ref().unwrap().replicas[1].wddm_host);
    assert!(ids(wsl2).contains(&sim::report::WSL2_STEP_TIMING));
    assert!(!ids(fleet(json!("rtx-5090"))).contains(&sim::report::WSL2_STEP_TIMING));
}
