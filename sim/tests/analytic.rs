//! Checks against results that can be worked out by hand.

use sim::cost::StepShape;
use sim::simulation::RunOptions;

mod common;
use crate::common::*;

/// At concurrency 1 with nothing cached, TTFT is exactly: ingress + the
/// prefill steps the cost model gives for the prompt's chunks + streaming of
/// the first token. No queue.
#[test]
fn ttft_at_concurrency_1_equals_the_prefill_steps_of_the_cost_model() {
    let mut v = small_vllm(5000, 4, 5, 1);
    set(&mut v, "engine.enable_prefix_caching=false");
    // Synchronous scheduling: each step's CPU time adds to its GPU time, as the shapes below
    // are costed (async scheduling overlaps them; `sim/tests/vllm_semantics.rs` tests that).
    set(&mut v, "engine.async_scheduling=false");
    let spec = spec(v);
    let out = sim::simulate(&spec, RunOptions::default());
    let c = &spec.cost;
    // 5000 tokens under a 2048 budget: chunks 2048, 2048, 904.
    let mut expected_ns = c.ingress_ns() + c.output_token_ns();
    let mut done = 0u64;
    for n in [2048u64, 2048, 904] {
        let mut s = StepShape::default();
        s.add_prefill(done, n);
        expected_ns += c.step_ns(&s);
        done += n;
    }
    for r in &out.run.records {
        assert_eq!(out.run.first_token_ns(r).unwrap() - r.dispatch_ns, expected_ns);
        assert_eq!(r.first_scheduled_ns.unwrap(), r.engine_arrival_ns, "no queue at concurrency 1");
    }
    assert_eq!(out.metrics.ttft_breakdown.queue_wait_ms, 0.0);
    assert!((out.metrics.ttft.mean - expected_ns as f64 / 1e6).abs() < 1e-9);
}

/// Little's law on a long closed-loop run: requests in flight = throughput × latency.
#[test]
fn littles_law_holds_on_a_long_closed_loop_run() {
    let mut v = small_vllm(600, 150, 3000, 48);
    set(&mut v, "workload.random_range_ratio=0.5");
    let spec = spec(v);
    let out = sim::simulate(&spec, RunOptions::default());
    let m = &out.metrics;
    let in_flight = m.request_throughput * m.e2el.mean / 1000.0;
    assert!((in_flight - 48.0).abs() / 48.0 < 0.01, "L = λW gives {in_flight}, concurrency is 48");
    // The engine side: mean requests in the engine = throughput × mean time in the engine.
    let engine_time_s: f64 = out
        .run
        .records
        .iter()
        .map(|r| (out.run.last_token_ns(r).unwrap() - r.engine_arrival_ns) as f64 / 1e9)
        .sum::<f64>()
        / out.run.records.len() as f64;
    let l_engine = m.request_throughput * engine_time_s;
    let gauges = out.run.gauges.running_mean + out.run.gauges.waiting_mean;
    assert!((l_engine - gauges).abs() / gauges < 0.02, "engine: λW = {l_engine}, gauges = {gauges}");
}

/// With a pool that holds K requests and concurrency C > K, running never
/// exceeds K, and mean TTFT grows roughly linearly in C − K.
#[test]
fn past_the_kv_limit_running_is_capped_and_ttft_grows_linearly() {
    const K: u32 = 8;
    // 1008 + 16 = 1024 tokens = 64 blocks of 16 per request at its end.
    let run = |c: u32| {
        let mut v = small_vllm(1008, 16, 40 * c, c);
        set(&mut v, "engine.kv_cache_tokens=null");
        set(&mut v, &format!("engine.num_gpu_blocks_override={}", K * 64 + 1));
        let spec = spec(v);
        let out = sim::simulate(&spec, RunOptions { check_invariants: true, ..Default::default() });
        assert_eq!(out.run.counters.num_preemptions, 0);
        assert!(out.run.gauges.running_peak <= K, "C={c}: running peaked at {}", out.run.gauges.running_peak);
        out.metrics.ttft.mean
    };
    assert!(run(K) < 1000.0);
    let xs = [4.0, 8.0, 16.0, 32.0];
    let ys: Vec<f64> = xs.iter().map(|&d| run(K + d as u32)).collect();
    // Least-squares line through (C − K, TTFT).
    let n = xs.len() as f64;
    let (mx, my) = (xs.iter().sum::<f64>() / n, ys.iter().sum::<f64>() / n);
    let sxy: f64 = xs.iter().zip(&ys).map(|(x, y)| (x - mx) * (y - my)).sum();
    let sxx: f64 = xs.iter().map(|x| (x - mx) * (x - mx)).sum();
    let syy: f64 = ys.iter().map(|y| (y - my) * (y - my)).sum();
    let slope = sxy / sxx;
    let r2 = sxy * sxy / (sxx * syy);
    assert!(slope > 0.0 && r2 > 0.98, "TTFT vs C−K: {ys:?}, slope {slope}, R² {r2}");
}

/// prefix_repetition at concurrency 1 with a pool that never evicts: every
/// prompt after the first of its prefix hits the whole prefix, so the hit
/// rate is (N − P)·prefix / (N·(prefix + suffix)) exactly. Llama's tokenizer puts a BOS before
/// every prompt (one token, the same in all): the engine sees 1 + prefix + suffix tokens, and
/// reuses the whole blocks of the BOS and the prefix, ⌊(1 + prefix) / 16⌋ · 16 tokens (the
/// prefix itself for these, multiples of 16).
#[test]
fn prefix_repetition_hit_rate_matches_its_analytic_expectation() {
    for (prefix, suffix, p, n) in [(512u32, 64u32, 4u32, 40u32), (256, 256, 10, 100), (1024, 16, 3, 30)] {
        let v = serde_json::json!({
            "version": 1,
            "engine": {"kind": "vllm", "version": "0.33.0", "max_num_seqs": 64, "max_num_batched_tokens": 4096,
                       "kv_cache_tokens": 400000, "max_model_len": 8192},
            "model": "llama-3.1-8b-instruct", "hardware": "h100-80gb",
            "workload": {"dataset_name": "prefix_repetition", "prefix_repetition_prefix_len": prefix,
                         "prefix_repetition_suffix_len": suffix, "prefix_repetition_num_prefixes": p,
                         "prefix_repetition_output_len": 8, "num_prompts": n, "max_concurrency": 1,
                         "ignore_eos": true, "initial_test_request": false}
        });
        let out = sim::simulate(&spec(v), RunOptions::default());
        let c = out.run.counters;
        let bos = 1;
        assert_eq!(c.prefix_cache_queries, u64::from(n * (bos + prefix + suffix)));
        assert_eq!((bos + prefix) / 16 * 16, prefix);
        assert_eq!(c.prefix_cache_hits, u64::from((n - p) * prefix), "prefix {prefix} suffix {suffix}");
    }
}

/// The engines count the prefill tokens they compute again after a preemption (vLLM) or a
/// retraction (SGLang). With no prefix cache the prefill past the prompts is that count plus,
/// per preemption at most, the last sampled token (never computed before it). With vLLM's cache on it does not depend on the release's
/// hit counter (before 0.27 it adds every lookup of a blocked head of queue, which `explain`'s
/// former difference of prompt tokens and hits read as recompute: 12x the 0.27 figure).
#[test]
fn recomputed_tokens_are_the_engines_own_count() {
    const PROMPTS: u32 = 60;
    let run = |v: serde_json::Value| {
        sim::simulate(&spec(v), RunOptions { check_invariants: true, ..Default::default() }).run.counters
    };
    let mut v = small_vllm(500, 300, PROMPTS, 32);
    set(&mut v, "engine.kv_cache_tokens=4000");
    set(&mut v, "engine.max_model_len=2048");
    set(&mut v, "engine.enable_prefix_caching=false");
    let c = run(v);
    assert!(c.num_preemptions > 0);
    let first_time = c.prefill_tokens_computed - u64::from(PROMPTS * 500) - c.recomputed_tokens;
    assert!(first_time <= c.num_preemptions, "{c:?}");
    assert!(c.recomputed_tokens > 10 * c.num_preemptions, "{c:?}");

    // SGLang's KV-starved scenario (512 in, 512 out, 200 prompts, no initial test request).
    let text = std::fs::read_to_string(root().join("scenarios/kv-starved-qwen2.5-7b-a100-sglang.json")).unwrap();
    let mut s: serde_json::Value = serde_json::from_str(&text).unwrap();
    set(&mut s, "engine.disable_radix_cache=true");
    let c = run(s);
    assert!(c.num_preemptions > 0);
    let first_time = c.prefill_tokens_computed - 200 * 512 - c.recomputed_tokens;
    assert!(first_time <= c.num_preemptions, "{c:?}");
    assert!(c.recomputed_tokens > 10 * c.num_preemptions, "{c:?}");

    // Shared prefixes (the hunt's case): a blocked head's lookups hit.
    let text = std::fs::read_to_string(root().join("scenarios/shared-prefix-llama3.1-8b-h100-vllm.json")).unwrap();
    let at = |version: &str| {
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        set(&mut v, "engine.num_gpu_blocks_override=400");
        set(&mut v, "engine.max_model_len=4096");
        set(&mut v, "engine.kv_cache_tokens=null");
        set(&mut v, "workload.max_concurrency=32");
        set(&mut v, &format!("engine.version={version}"));
        run(v)
    };
    let (a, b) = (at("0.26.0"), at("0.27.0"));
    assert!(a.prefix_cache_hits > b.prefix_cache_hits, "0.26 counts the blocked head's lookups");
    assert_eq!((a.recomputed_tokens, a.prefill_tokens_computed), (b.recomputed_tokens, b.prefill_tokens_computed));
    assert!(a.num_preemptions > 0 && a.recomputed_tokens > 0);
}

/// SGLang's overlap scheduler delays processing a batch's results by one iteration, never the
/// first token before the prompt's last chunk has run: a prompt of two chunks has its first
/// token after both, with or without overlap (it came one chunk early, its TTFT halved and the
/// chunk's time shown as one long ITL gap; found by the SGLang hunt).
#[test]
fn sglang_overlap_never_delivers_a_first_token_before_the_last_chunk() {
    let text = std::fs::read_to_string(root().join("scenarios/rtx5090-qwen2.5-7b-sglang.json")).unwrap();
    let run = |overlap_off: bool| {
        let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
        for a in [
            "engine.chunked_prefill_size=2048",
            "workload.num_prompts=4",
            "workload.random_input_len=4096",
            "workload.random_output_len=10",
            "workload.initial_test_request=false",
            &format!("engine.disable_overlap_schedule={overlap_off}"),
        ] {
            set(&mut v, a);
        }
        sim::simulate(&spec(v), RunOptions { check_invariants: true, ..Default::default() }).metrics
    };
    let (on, off) = (run(false), run(true));
    assert!(on.ttft.mean >= off.ttft.mean, "overlap {} ms before the last chunk: {} ms", on.ttft.mean, off.ttft.mean);
    assert!(
        on.itl.max < 2.0 * off.itl.max,
        "a chunk's time as an ITL gap: {} ms against {} ms",
        on.itl.max,
        off.itl.max
    );
}

/// A staggered closed loop (`workload.concurrency_ramp_s`): user k's first request is sent at
/// exactly `k · ramp / N`, every later request when one ends, and no more are in flight than
/// users have started; a ramp of 0 is the plain closed loop, byte for byte.
#[test]
fn a_staggered_closed_loop_starts_user_k_at_its_share_of_the_ramp() {
    const N: u64 = 8;
    let mut v = small_vllm(600, 200, 64, N as u32);
    let plain = sim::simulate(&spec(v.clone()), RunOptions::default());
    set(&mut v, "workload.concurrency_ramp_s=0");
    let zero = sim::simulate(&spec(v.clone()), RunOptions::default());
    assert_eq!(format!("{:?}", plain.run.records), format!("{:?}", zero.run.records), "a ramp of 0 changes nothing");
    // A ramp shorter than one request: each user's first send is its start.
    set(&mut v, "workload.concurrency_ramp_s=0.7");
    let out = sim::simulate(&spec(v), RunOptions { check_invariants: true, ..Default::default() });
    assert_eq!(out.run.stop, sim::simulation::StopReason::Completed);
    let start = out.run.bench_start_ns;
    let e2e_min = out.run.records.iter().map(|r| out.run.last_token_ns(r).unwrap() - r.dispatch_ns).min().unwrap();
    assert!(e2e_min > 700_000_000, "the test needs requests longer than the ramp ({e2e_min} ns)");
    let mut sends: Vec<u64> = out.run.records.iter().map(|r| r.dispatch_ns - start).collect();
    sends.sort_unstable();
    for k in 0..N {
        assert_eq!(sends[k as usize], 700_000_000 * k / N, "user {k}");
    }
    // Users in flight at each send never exceed those started by then.
    let recs = &out.run.records;
    for r in recs {
        let t = r.dispatch_ns;
        let started = ((t - start) as u128 * u128::from(N) / 700_000_000 + 1).min(u128::from(N)) as usize;
        let in_flight = recs.iter().filter(|o| o.dispatch_ns <= t && out.run.last_token_ns(o).unwrap() > t).count();
        assert!(in_flight <= started, "at {t}: {in_flight} in flight, {started} users started");
    }
    let first_end = recs.iter().map(|r| out.run.last_token_ns(r).unwrap()).min().unwrap();
    assert_eq!(sends[N as usize], first_end - start, "the ninth request is sent when the first one ends");
}

/// A measured window: the statistics cover exactly the requests whose last token arrived in it,
/// the request throughput is their count over its length, and the output throughput the tokens
/// streamed inside it over its length.
#[test]
fn a_measured_window_counts_what_completed_and_streamed_inside_it() {
    let mut v = small_vllm(300, 100, 200, 16);
    set(&mut v, "workload.window_start_s=2");
    set(&mut v, "workload.window_duration_s=3");
    let out = sim::simulate(&spec(v), RunOptions::default());
    assert_eq!(out.run.stop, sim::simulation::StopReason::Completed);
    let (a, b) = (out.run.bench_start_ns + 2_000_000_000, out.run.bench_start_ns + 5_000_000_000);
    let inside: Vec<_> =
        out.run.records.iter().filter(|r| (a..=b).contains(&out.run.last_token_ns(r).unwrap())).collect();
    assert!(inside.len() > 10 && inside.len() < out.run.records.len(), "{} of {}", inside.len(), out.run.records.len());
    let m = &out.metrics;
    assert_eq!(m.completed, inside.len() as u64);
    assert_eq!(m.duration_s, 3.0);
    assert!((m.request_throughput - inside.len() as f64 / 3.0).abs() < 1e-9);
    let streamed: usize =
        out.run.records.iter().map(|r| out.run.token_times(r).iter().filter(|&&t| (a..=b).contains(&t)).count()).sum();
    assert_eq!(m.total_output_tokens, streamed as u64);
    let mut e2e: Vec<f64> =
        inside.iter().map(|r| (out.run.last_token_ns(r).unwrap() - r.dispatch_ns) as f64 / 1e6).collect();
    e2e.sort_by(f64::total_cmp);
    assert!((m.e2el.mean - e2e.iter().sum::<f64>() / e2e.len() as f64).abs() < 1e-6);
}
