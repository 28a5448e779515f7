//! `servesim explain` from the command line: what it blames the knee on (a what-if sweep with
//! the running cap raised, as with the pool), what happens past the KV-limited concurrency, a
//! trace shorter than the sweep, and the fleet's KV sentences with shared prefixes.

use serde_json::Value;

use crate::common::*;

const SP: &str = "scenarios/shared-prefix-llama3.1-8b-h100-vllm.json";

fn explain(args: &[&str]) -> Value {
    stdout_json(&run_cli(&[&["explain"][..], args, &["--json"]].concat()))
}

fn sentences(e: &Value) -> Vec<String> {
    e["explanation"].as_array().unwrap().iter().map(|s| s.as_str().unwrap().to_string()).collect()
}

/// max_num_seqs = 1024 binds before the pool (1,708 requests), and the knee (512) sits within a
/// factor of two of it: explain said "the knee moves with max_num_seqs: raise it", untested;
/// raised to 2,048 the knee stays. It now runs the sweep with the cap doubled and says the engine
/// is out of compute; where the cap is the knee's (256), the same sweep shows the knee moving.
#[test]
fn explain_tests_the_running_cap_before_blaming_the_knee_on_it() {
    let e = explain(&[SP]);
    assert_eq!(e["binding_limit"], "max_num_seqs", "{e:#}");
    let knob = e["knob"].as_str().unwrap();
    assert!(!knob.contains("The knee moves with max_num_seqs"), "{knob}");
    assert!(knob.starts_with("A higher max_num_seqs does not move the knee (with max_num_seqs = 2048"), "{knob}");
    assert!(knob.contains("out of compute"), "{knob}");
    let e = explain(&[SP, "--set", "engine.max_num_seqs=256"]);
    let knob = e["knob"].as_str().unwrap();
    assert!(knob.starts_with("The knee moves with max_num_seqs: with max_num_seqs = 512 it is"), "{knob}");
}

/// Past the KV-limited concurrency admission goes on (vLLM admits on the prompt alone; SGLang
/// counts the running requests' outputs at new_token_ratio): explain said SGLang "reserves KV for
/// their whole output", yet 15 ran at once where the pool holds 10. It now says how far past it
/// the runs went, and what happens then.
#[test]
fn explain_says_admission_goes_past_the_kv_limit_and_by_how_much() {
    for (scenario, word) in [
        ("scenarios/kv-starved-qwen2.5-7b-a100-vllm.json", "preempted"),
        ("scenarios/kv-starved-qwen2.5-7b-a100-sglang.json", "retracted"),
    ] {
        let e = explain(&[scenario]);
        assert_eq!(e["kv_limited_concurrency"], 10, "{scenario}");
        let s = &sentences(&e)[1];
        assert!(!s.contains("reserves KV for their whole output"), "{s}");
        let peak = s
            .split("up to ")
            .nth(1)
            .and_then(|t| t.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("a peak past the limit: {s}"));
        assert!(peak > 10, "{s}");
        assert!(s.contains("more than 10 can") && s.contains(word), "{s}");
    }
}

/// A trace of 40 requests: a closed loop over it never has more in flight, so the sweep stops at
/// 40, and explain says that is why there is no knee (it swept to 1,146, eight points all the
/// same, said "throughput still grows", and advised --num-prompts, which adds no rows).
#[test]
fn explain_cuts_the_sweep_at_a_traces_length_and_says_why_there_is_no_knee() {
    let out = run_cli(&["explain", "data/plan/mooncake-fleet-llama3.1-8b-h100-vllm.json"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains(
            "up to concurrency 40: the trace has 40 requests, so a closed loop over it never has more in flight"
        ),
        "{text}"
    );
    assert!(text.contains("--set workload.trace=FILE"), "{text}");
    assert!(!text.contains("throughput still grows"), "{text}");
    assert!(!text.contains("--num-prompts"), "{text}");
    let e = explain(&["data/plan/mooncake-fleet-llama3.1-8b-h100-vllm.json"]);
    let sweep = e["knee"]["sweep"].as_array().unwrap();
    assert_eq!(sweep.last().unwrap()["max_concurrency"], 40, "{sweep:?}");
    assert!(sweep.iter().all(|p| p["max_concurrency"].as_u64().unwrap() <= 40), "{sweep:?}");
}

/// A fleet's KV sentences with shared prefixes say what the figures count: the mean request less
/// its shared prefix (the sentence said "mean prompt + output less the last token, 255 tokens",
/// a sum of 1,279), and a prefill replica's prompts with their shared prefixes held once (it
/// counted each prompt whole: 386 where the pool holds 3,416). Llama's BOS before each prompt
/// (shared, the prompt 1 + 1,024 + 128 tokens) leaves the shared whole blocks at 1,024 tokens
/// and one more token each request holds alone: 256, not 255, in the same 16 blocks.
#[test]
fn explain_fleet_kv_sentences_match_their_numbers_with_shared_prefixes() {
    let e = explain(&[SP, "--set", "fleet.count=2"]);
    let s = &sentences(&e)[0];
    assert!(
        s.contains("a request holds 256 (mean prompt + output less its shared prefix and the last token, 256 tokens"),
        "{s}"
    );
    assert!(s.contains("shared prefixes they use held once"), "{s}");
    let e = explain(&[SP, "--set", "fleet.prefill_count=1", "--set", "fleet.decode_count=1"]);
    let s = sentences(&e);
    assert!(s[0].contains("a request holds 144 (mean prompt less its shared prefix, 129 tokens"), "{}", s[0]);
    let prefill = e["replica_limits"]["prefill_kv_limited_concurrency"].as_u64().unwrap();
    assert!(prefill > 3000, "{prefill}");
    assert!(
        s[2].contains(&format!(
            "its prefill replicas hold {} prompts at once (their shared prefixes held once)",
            sim::explain::thousands(prefill)
        )),
        "{}",
        s[2]
    );
}

const V: &str = "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json";
const G: &str = "scenarios/kv-starved-qwen2.5-7b-a100-sglang.json";

/// The number after `prefix` in `s` (thousands separators allowed).
fn number_after(s: &str, prefix: &str) -> u64 {
    let t = s.split(prefix).nth(1).unwrap_or_else(|| panic!("no {prefix:?} in {s}"));
    let digits: String = t.chars().take_while(|c| c.is_ascii_digit() || *c == ',').filter(|c| *c != ',').collect();
    digits.parse().unwrap_or_else(|_| panic!("no number after {prefix:?} in {s}"))
}

/// A pool of 10,240 tokens holds one 9,716-token request, and 1.5 times it still one: the
/// what-if sweep tested nothing, yet explain said "A larger KV pool does not move the knee (with
/// 15360 tokens, room for 1 requests ...): the engine is out of compute", and "more than 1 can
/// run at once" where its runs showed at most 1. The what-if pool now holds at least one request
/// more than the pool (and the knee moves with it), and "more than 1 can run" needs a peak past 1.
#[test]
fn explain_tests_a_larger_pool_only_with_room_for_more_requests() {
    let e = explain(&[
        V,
        "--set",
        "workload.random_input_len=9700",
        "--set",
        "workload.random_output_len=16",
        "--set",
        "engine.max_model_len=10240",
        "--set",
        "engine.max_num_batched_tokens=16384",
        // The scenario's pool (a larger token budget alone drops its pin: vLLM's profiled peak
        // grows with it).
        "--set",
        "engine.num_gpu_blocks_override=641",
    ]);
    assert_eq!(e["kv_limited_concurrency"], 1, "{e:#}");
    let knob = e["knob"].as_str().unwrap();
    assert!(!knob.contains("engine is out of compute"), "{knob}");
    assert!(!knob.contains("1 requests"), "{knob}");
    let holds = number_after(knob, "(room for ");
    assert!(holds > 1, "{knob}");
    let s = &sentences(&e)[1];
    assert!(!s.contains("more than 1 can run"), "{s}");
    assert!(s.contains("at most 1 ran at once"), "{s}");
    assert!(sentences(&e)[0].contains("holds 1 request at once"), "{}", sentences(&e)[0]);
    // A running cap as high as the limit: a larger pool alone runs no more; not tested, said so.
    let e = explain(&[V, "--set", "engine.max_num_seqs=10", "--set", "engine.num_gpu_blocks_override=641"]);
    let knob = e["knob"].as_str().unwrap();
    assert!(knob.contains("Whether a larger pool would move the knee was not tested"), "{knob}");
    assert!(!knob.contains("out of compute"), "{knob}");
    assert!(!sentences(&e)[1].contains("more than 10 could run"), "{}", sentences(&e)[1]);
}

/// `--max-concurrency 64` explained a run of the scenario's 20 prompts, which never has 64 in
/// flight ("At concurrency 64, mean TTFT is 4002.2 ms ... No request was preempted") while
/// `--concurrency 64` runs 256 (14,808.3 ms, 20 preemptions). Both are now sized alike, the run
/// is simulate's of the same load byte for byte, and a changed prompt count is noted; the
/// scenario's own concurrency keeps its prompts and says it is never reached.
#[test]
fn explain_sizes_a_max_concurrency_run_as_a_concurrency_run() {
    let a = explain(&["--max-concurrency", "64"]);
    let b = explain(&["--concurrency", "64"]);
    assert_eq!(a["point"]["num_prompts"], 256, "{}", a["point"]);
    assert_eq!(a["point"], b["point"]);
    assert_eq!(a["explanation"], b["explanation"]);
    let sim = stdout_json(&run_cli(&["simulate", "--max-concurrency", "64", "--num-prompts", "256", "--json"]));
    assert_eq!(a["point"]["mean_ttft_ms"], sim["mean_ttft_ms"]);
    assert_eq!(a["point"]["num_preemptions"], sim["num_preemptions"]);
    let notes =
        |e: &Value| e["notes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap().to_string()).collect::<Vec<_>>();
    assert!(
        notes(&a).iter().any(|n| n.contains("has 256 prompts") && n.contains("not the 20 that workload.num_prompts")),
        "{:?}",
        notes(&a)
    );
    // A prompt count set on the command line and raised is noted too.
    let c = explain(&["--concurrency", "64", "--set", "workload.num_prompts=10"]);
    assert!(
        notes(&c).iter().any(|n| n.contains("has 256 prompts") && n.contains("not the 10 that workload.num_prompts")),
        "{:?}",
        notes(&c)
    );
    // The scenario's own concurrency above its prompt count: its prompts, said to be one wave.
    let d = explain(&["--set", "workload.max_concurrency=64"]);
    assert_eq!(d["point"]["num_prompts"], 20);
    let load = d["load"].as_str().unwrap();
    assert!(load.contains("never reached") && load.contains("all 20 prompts in flight at once"), "{load}");
    assert!(notes(&d).iter().any(|n| n.contains("concurrency 64 is never reached")), "{:?}", notes(&d));
}

/// On the B200 70B, the what-if pool (1,203,760 tokens) is more than the GPU holds (sweep refuses
/// it: 183.68 GiB of KV per GPU), and explain advised raising gpu_memory_utilization, which at
/// 0.92 adds at most 8% of the GPU. It now says the pool is beyond the GPU, in the numbers sweep
/// refuses it with, and ranks the ways to a larger pool by what each can add.
#[test]
fn explain_says_when_its_what_if_pool_is_beyond_the_gpu_and_ranks_the_advice() {
    let b200 = "scenarios/b200-llama3.1-70b-fp8-vllm.json";
    let e = explain(&[b200]);
    let knob = e["knob"].as_str().unwrap();
    let tokens = number_after(knob, "with a pool of ");
    assert!(knob.contains("That pool is larger than this GPU can hold"), "{knob}");
    assert!(knob.contains("183.83 GiB per GPU") && knob.contains("178.35 GiB of one b200"), "{knob}");
    // sweep refuses the same pool, with the same figures.
    let blocks = (tokens / 16 + 1).to_string();
    let o =
        run_cli(&["sweep", b200, "--concurrency", "1", "--set", &format!("engine.num_gpu_blocks_override={blocks}")]);
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    // (Its pool is a block larger, the null block of `num_gpu_blocks_override`: 183.84 GiB.)
    let gib = |t: &str| -> f64 {
        let head = t.split(" GiB per GPU").next().unwrap();
        head.rsplit(' ').next().unwrap().parse().unwrap_or_else(|_| panic!("no GiB figure in {t}"))
    };
    assert!((gib(&err) - gib(knob)).abs() < 0.02, "{err}");
    assert!(err.contains("178.35 GiB of one b200"), "{err}");
    // Ranked: twice the TP and an fp8 KV cache before the fraction's 8%; no fp8 weights (they
    // are fp8 already).
    let at = |w: &str| knob.find(w).unwrap_or_else(|| panic!("no {w:?} in {knob}"));
    assert!(at("TP 4") < at("an fp8 KV cache"), "{knob}");
    assert!(at("an fp8 KV cache") < at("a higher gpu_memory_utilization (at 0.92"), "{knob}");
    assert!(knob.contains("the remaining 8% of the GPU"), "{knob}");
    assert!(!knob.contains("fp8 weights"), "{knob}");
    // An fp8 KV cache is not advised where the KV is fp8 already.
    let e = explain(&[V, "--set", "engine.kv_cache_dtype=fp8"]);
    let knob = e["knob"].as_str().unwrap();
    assert!(!knob.contains("an fp8 KV cache"), "{knob}");
    // vLLM 0.34 at its default already takes what is free: no fraction to raise, no pin to set.
    let e = explain(&[
        "--set",
        "engine.kv_cache_tokens=null",
        "--set",
        "engine.version=0.34.0",
        "--set",
        "engine.gpu_memory_utilization=null",
    ]);
    let knob = e["knob"].as_str().unwrap();
    assert!(!knob.contains("a higher gpu_memory_utilization"), "{knob}");
    assert!(!knob.contains("num_gpu_blocks_override") && !knob.contains("kv_cache_tokens"), "{knob}");
    assert!(knob.contains("already 1.0"), "{knob}");
}

/// `cost.time_scale = 10` divides the whole step by 10, its CPU part too: the host-CPU line
/// printed the unscaled 126 µs + 4 µs (overlapped), or "0.01 ms + 0 µs" (synchronous, SGLang).
#[test]
fn explain_prints_the_host_cpu_time_as_the_time_scale_leaves_it() {
    let e = explain(&[V, "--set", "cost.time_scale=10"]);
    let c = e["step_cpu"].as_str().unwrap();
    assert!(c.contains("the CPU part 12.6 µs + 0.4 µs a running request, time scale 10 applied"), "{c}");
    let e = explain(&[G, "--set", "cost.time_scale=10"]);
    let c = e["step_cpu"].as_str().unwrap();
    assert!(c.starts_with("12.6 µs + 0.4 µs a running request"), "{c}");
}

/// The KV-limited concurrency is that of the prompts the knee's sweep runs, the figure `sweep`
/// reports over explain's own grid (it was the scenario's 20 prompts': 39 where sweep says 42).
#[test]
fn explain_limit_is_sweeps_over_the_same_grid() {
    let s = "scenarios/rtx5090-qwen2.5-7b-vllm.json";
    let e = explain(&[s, "--set", "workload.random_range_ratio=0.9"]);
    let grid: Vec<u64> =
        e["knee"]["sweep"].as_array().unwrap().iter().map(|p| p["max_concurrency"].as_u64().unwrap()).collect();
    let conc = grid.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let prompts = grid.iter().map(|c| (c * 8).to_string()).collect::<Vec<_>>().join(",");
    let sw = stdout_json(&run_cli(&[
        "sweep",
        s,
        "--set",
        "workload.random_range_ratio=0.9",
        "--concurrency",
        &conc,
        "--num-prompts",
        &prompts,
        "--json",
    ]));
    assert_eq!(e["kv_limited_concurrency"], sw["kv_limited_concurrency"]);
    assert_eq!(e["kv_request_footprint_tokens"], sw["kv_request_footprint_tokens"]);
    assert_eq!(e["knee"]["max_concurrency"], sw["knee"]["max_concurrency"]);
}

/// SGLang admits against new_token_ratio's estimates and can retract at the limit itself: its
/// limit is "about" N. The knee sentence says "close to the limit above" only where no what-if
/// cleared the limit (the shared-prefix scenario said it beside "the engine is out of compute").
/// A trace of 40 requests never reaches a limit of 382, and explain said "Past the KV limit TTFT
/// grows with the queue and requests are preempted". The TTFT split says which preemptions its
/// interleaving holds.
#[test]
fn explain_words_what_its_runs_show() {
    let e = explain(&[G]);
    assert!(
        sentences(&e)[0].contains("about 10 requests at once (SGLang begins retracting as the pool fills)"),
        "{}",
        sentences(&e)[0]
    );
    let e = explain(&[SP]);
    let knee = sentences(&e).into_iter().find(|s| s.contains("throughput knee")).unwrap();
    assert!(e["knob"].as_str().unwrap().contains("does not move the knee"), "{}", e["knob"]);
    assert!(!knee.contains("close to the limit above"), "{knee}");
    // The PCIe hint only for PCIe cards (an H100 SXM is NVLink).
    let knob = e["knob"].as_str().unwrap();
    assert!(!knob.contains("on PCIe cards") && knob.contains("try it: --set engine.tensor_parallel_size=2"), "{knob}");
    let e = explain(&["data/plan/mooncake-fleet-llama3.1-8b-h100-vllm.json"]);
    let all = sentences(&e).join(" ");
    assert!(!all.contains("Past the KV limit TTFT grows"), "{all}");
    assert!(all.contains("at this load it never does: at most 40 requests are ever in flight"), "{all}");
    let e = explain(&[V]);
    let ttft = sentences(&e).into_iter().find(|s| s.contains("mean TTFT is")).unwrap();
    assert!(ttft.contains("recompute after a preemption before the first token"), "{ttft}");
    assert!(ttft.contains("mean TTFT is 20.65 s"), "{ttft}");
}

/// The text: thousands separators, the fraction used, the step's token budget, the terms not
/// charged to the fraction said so (not "0.00 GiB"), SGLang's max_total_tokens bound as a row.
#[test]
fn explain_text_shows_the_memory_account_as_the_engines_size_it() {
    let out = run_cli(&["explain", G]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(text.contains("requested (the fraction, 0.875)"), "{text}");
    assert!(text.contains("Prefill chunk: chunked_prefill_size = 2,048 tokens"), "{text}");
    assert!(text.contains("max_total_tokens bound") && text.contains("(10,240 tokens: the pool)"), "{text}");
    assert!(!text.contains(" 0.00 GiB"), "{text}");
    assert!(text.contains("not charged to the fraction"), "{text}");
    let out = run_cli(&["explain", V]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("KV pool: 10,240 tokens") && text.contains("Token budget per step: max_num_batched_tokens = "),
        "{text}"
    );
    // The fitted profile's file is named.
    let out = run_cli(&["explain", V, "--set", "cost.profile=validation/live-20261130/vllm-profile.json"]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        text.contains("Step cost source: linear (fitted profile validation/live-20261130/vllm-profile.json)"),
        "{text}"
    );
}

/// An SGLang P/D fleet whose decode server's pool binds: the wait for the decode side to
/// pre-allocate a request's KV (before its prefill may start) is queue wait at the prefill
/// replica, and explain says where it comes from (docs/fleets.md).
#[test]
fn explain_names_the_sglang_decode_servers_pre_allocation_wait() {
    let s = write_temp(
        "explain-pd-prealloc.json",
        r#"{"version": 1, "engine": {"kind": "sglang", "version": "0.5.6", "context_length": 8192},
            "model": "llama-3.1-8b-instruct", "hardware": "h100-80gb",
            "fleet": {"replicas": [{"role": "prefill"}, {"role": "decode", "engine": {"max_total_tokens": 12000}}]},
            "workload": {"dataset_name": "random", "random_input_len": 1000, "random_output_len": 100,
                         "num_prompts": 64, "max_concurrency": 16, "ignore_eos": true, "seed": 0}}"#,
    );
    let e = explain(&[s.to_str().unwrap()]);
    let all = sentences(&e);
    let line = all.iter().find(|l| l.starts_with("Of the queue wait, ")).unwrap_or_else(|| panic!("{all:#?}"));
    assert!(line.contains("pre-allocate the request's KV before its prefill may start"), "{line}");
    assert!(line.contains("num_reserved_decode_tokens = 512"), "{line}");
    // The admission sentence is the decode server's, not new_token_ratio's; the limit counts the
    // reserve (12,000 tokens hold 7 requests of 1,099 + 512, as the runs show).
    let admits = all.iter().find(|l| l.contains("so the KV pool binds first")).unwrap_or_else(|| panic!("{all:#?}"));
    assert!(
        admits.contains("pre-allocates a request's prompt before its prefill") && !admits.contains("new_token_ratio"),
        "{admits}"
    );
    assert!(all.iter().any(|l| l.contains("so a replica holds 7 requests at once")), "{all:#?}");
}

/// A fleet whose group 0 pins its pool and whose other group derives its own: the text's pool
/// line says the fleet's total is over its groups, group 0's given by the pin (it said the whole
/// fleet's pool was "given by num_gpu_blocks_override", "nothing is derived": the robustness
/// audit of 2026-12-07), and each group's line gives its own.
#[test]
fn a_mixed_fleets_pool_line_does_not_call_every_pool_pinned() {
    let f = write_temp(
        "explain-mixed-fleet.json",
        r#"{"version": 1, "engine": {"kind": "vllm", "version": "0.33.0", "max_num_seqs": 64, "max_num_batched_tokens": 2048,
            "num_gpu_blocks_override": 641, "max_model_len": 4096}, "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
            "workload": {"dataset_name": "random", "random_input_len": 512, "random_output_len": 64, "num_prompts": 40,
                         "max_concurrency": 16, "ignore_eos": true, "seed": 0},
            "fleet": {"replicas": [{"count": 1}, {"count": 1, "hardware": "rtx-4090", "engine": {"num_gpu_blocks_override": null}}]}}"#,
    );
    let o = run_cli(&["explain", f.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    let line = text.lines().find(|l| l.starts_with("KV pool")).unwrap();
    assert!(
        line.contains(
            "tokens over the fleet's replicas; group 0's 10,240 tokens a replica given by num_gpu_blocks_override"
        ),
        "{line}"
    );
    assert!(!line.contains("nothing is derived"), "{line}");
    assert!(text.contains("Group 1, mixed1") && text.contains("its KV pool holds 107,856 tokens"), "{text}");
}

/// A fleet whose replicas' running caps differ says where an even split fills the smallest one
/// (2 H100s at max_num_seqs 1,024 and an A100 at 256 behind round-robin: from 768, not the sum
/// 2,304, which explain gave alone until 2026-12-07), and engines of both kinds name each cap by
/// its own flag (SGLang's 2,048 read as "max_num_seqs = 1024 or 2048").
#[test]
fn explain_fleet_running_caps_say_the_even_split_and_each_engines_flag() {
    let het = r#"{"replicas": [{"count": 2, "hardware": "h100-80gb"},
        {"count": 1, "hardware": "a100-80gb", "engine": {"max_num_seqs": 256}}], "router": {"policy": "round_robin"}}"#;
    let e = explain(&[SP, "--set", &format!("fleet={het}"), "--concurrency", "1200"]);
    let all = sentences(&e).join(" ");
    assert!(all.contains("max_num_seqs = 1024 or 256 by group (2304 across 3 replicas)"), "{all}");
    assert!(all.contains("fills the one with the smallest cap from 768 concurrent requests"), "{all}");
    let mixed = r#"{"replicas": [{"count": 1}, {"count": 1, "engine": {"kind": "sglang", "version": "0.5.10"}}]}"#;
    let e = explain(&[SP, "--set", &format!("fleet={mixed}")]);
    let all = sentences(&e).join(" ");
    assert!(all.contains("max_num_seqs = 1024 or max_running_requests = "), "{all}");
}

/// A fleet's knee advice says that the larger-pool test was not run (explain grows a single
/// engine's pool only), where the single engine it was runs it: until 2026-12-07 the sentence
/// was dropped without a word.
#[test]
fn explain_says_a_fleets_larger_pool_was_not_tested() {
    let kv = "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json";
    let one = sentences(&explain(&[kv])).join(" ");
    assert!(one.contains("The knee moves with the KV pool") || one.contains("with a pool of"), "{one}");
    let o = run_cli(&["explain", kv, "--set", "fleet.count=1"]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(text.contains("was not tested: explain grows a single engine's pool only, and this is a fleet"), "{text}");
    assert!(text.contains("of the fleet's one replica (1 GPU in all)"), "{text}");
}

/// explain's knee comes from its own sweep of eight prompts a concurrency slot; it says so and
/// gives the sweep command that reproduces it (an audit of 2026-12-07: the same grid swept with
/// the scenario's prompt count put the knee at 15 where explain said 12, and nothing said why).
#[test]
fn explain_gives_the_sweep_that_reproduces_its_knee() {
    let s = "scenarios/kv-starved-qwen2.5-7b-a100-sglang.json";
    let e = explain(&[s]);
    // SGLang's words: a retraction, not a preemption.
    assert!(sentences(&e).join(" ").contains("recompute after a retraction"), "{e:#}");
    let knee = e["knee"]["max_concurrency"].as_u64().unwrap_or_else(|| panic!("{e:#}"));
    let all = sentences(&e).join(" ");
    // The command after "the same scenario and --set flags" (and, for an open loop, the rate
    // lifted), run with the scenario.
    let reproduce = |s: &str, all: &str, knee: u64| {
        let cmd = all
            .split("--set flags")
            .nth(1)
            .and_then(|t| t.split(" reproduces it").next())
            .map(|t| t.trim_start_matches(" and").trim())
            .unwrap_or_else(|| panic!("{all}"));
        let mut args = vec!["sweep", s];
        args.extend(cmd.split_whitespace());
        args.push("--json");
        let v = stdout_json(&run_cli(&args));
        assert_eq!(v["knee"]["max_concurrency"].as_u64(), Some(knee), "{cmd}: {v:#}");
    };
    reproduce(s, &all, knee);
    // An open-loop scenario's knee is a closed loop's: the command lifts the rate (a review,
    // 2026-12-07: without it the sweep searched no knee).
    let open = "scenarios/long-prefill-itl-llama3.1-8b-h100-vllm.json";
    let o = explain(&[open]);
    let all = sentences(&o).join(" ");
    assert!(all.contains("--set workload.request_rate=inf --concurrency"), "{all}");
    reproduce(open, &all, o["knee"]["max_concurrency"].as_u64().unwrap_or_else(|| panic!("{o:#}")));
    // Every point says its prompt count.
    assert!(e["knee"]["sweep"].as_array().unwrap().iter().all(|p| p["num_prompts"].as_u64().unwrap() >= 8), "{e:#}");
}
