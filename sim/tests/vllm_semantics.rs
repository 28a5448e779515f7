//! vLLM V1 scheduling semantics, step by step, on hand-built requests
//! (`docs/vllm.md` §1–3).

use sim::engine::vllm::{Policy, Scheduler, VllmBehaviour, VllmConfig};
use sim::engine::{Engine, TokenOutput, Version};
use sim::request::{RequestSpec, Segment};

mod common;

/// The release's behaviours, synchronous scheduling (the step-by-step tests below read
/// each step's output before the next is planned; `async_scheduling_*` turn it on).
fn cfg(version: Version, blocks: u32, budget: u32) -> VllmConfig {
    VllmConfig {
        version,
        behaviour: VllmBehaviour { async_scheduling: false, ..VllmBehaviour::of_release(version) },
        max_num_seqs: 16,
        max_num_batched_tokens: budget,
        long_prefill_token_threshold: 0,
        block_size: 16,
        enable_prefix_caching: true,
        num_gpu_blocks: blocks,
        max_model_len: 100_000,
        policy: Policy::Fcfs,
    }
}

fn req(key: u64, prompt: u32, output: u32) -> RequestSpec {
    RequestSpec {
        prompt: vec![Segment { key, len: prompt }],
        prompt_len: prompt,
        max_tokens: output,
        output_len: output,
        output_key: key ^ 0xabcd,
        arrival_ns: 0,
        priority: 0,
        ignore_eos: true,
        prompt_hashes: None,
    }
}

/// Runs one step; returns (scheduled (id, tokens), outputs).
fn step(s: &mut Scheduler) -> (Vec<(u32, u32)>, Vec<TokenOutput>, u32) {
    let plan = s.schedule();
    let sched = plan.scheduled.iter().map(|x| (x.id, x.num_tokens)).collect();
    let pre = plan.num_preempted;
    let mut out = Vec::new();
    s.finish_step(&mut out);
    s.check_invariants().unwrap();
    (sched, out, pre)
}

#[test]
fn chunked_prefill_emits_the_first_token_in_the_step_of_the_last_chunk() {
    let mut s = Scheduler::new(cfg(Version::new(0, 33, 0), 100, 100));
    s.add_request(0, &req(1, 250, 3));
    let (a, out_a, _) = step(&mut s);
    assert_eq!(a, vec![(0, 100)]);
    assert!(out_a.is_empty(), "a partial chunk samples nothing");
    assert_eq!(step(&mut s).0, vec![(0, 100)]);
    let (c, out_c, _) = step(&mut s);
    assert_eq!(c, vec![(0, 50)]);
    assert_eq!(out_c, vec![TokenOutput { id: 0, finished: false }]);
    // Decodes: one token each.
    assert_eq!(step(&mut s).0, vec![(0, 1)]);
}

#[test]
fn running_requests_claim_the_budget_before_waiting_ones() {
    let mut s = Scheduler::new(cfg(Version::new(0, 33, 0), 1000, 64));
    s.add_request(0, &req(1, 40, 10));
    step(&mut s); // prefill 40, first token
    s.add_request(1, &req(2, 200, 10));
    let (sched, _, _) = step(&mut s);
    // The decode (1 token) first, then the new prompt cut at the remaining 63.
    assert_eq!(sched, vec![(0, 1), (1, 63)]);
}

#[test]
fn full_prompt_gate_from_0_20_first_chunk_only_before() {
    // 20 usable blocks = 320 tokens; one running request holds 10 blocks.
    for (version, admitted) in [(Version::new(0, 17, 0), true), (Version::new(0, 20, 0), false)] {
        let mut s = Scheduler::new(cfg(version, 21, 64));
        s.add_request(0, &req(1, 160, 50));
        for _ in 0..3 {
            step(&mut s);
        }
        // A 240-token prompt: its first 64-token chunk fits in the 10 free
        // blocks, the whole prompt (15 blocks) does not.
        s.add_request(1, &req(2, 240, 5));
        let (sched, _, _) = step(&mut s);
        assert_eq!(sched.iter().any(|&(id, _)| id == 1), admitted, "{version}");
    }
}

#[test]
fn head_of_line_blocking_stops_admission_at_the_first_request_that_does_not_fit() {
    let mut s = Scheduler::new(cfg(Version::new(0, 33, 0), 11, 2048)); // 10 blocks = 160 tokens
    s.add_request(0, &req(1, 100, 50));
    step(&mut s);
    s.add_request(1, &req(2, 150, 5)); // does not fit in the 3 free blocks
    s.add_request(2, &req(3, 10, 5)); // would fit, but is behind it
    let (sched, _, _) = step(&mut s);
    assert_eq!(sched, vec![(0, 1)]);
}

/// `enable_chunked_prefill: false` (from 0.12.0; 0.33.0 `v1/core/sched/scheduler.py:1336`):
/// a waiting prompt longer than the step's remaining budget is not cut, it waits, and the
/// walk stops there (`break`): a shorter prompt behind it waits too. With chunking the same
/// prompt is cut at the budget.
#[test]
fn without_chunked_prefill_a_prompt_over_the_remaining_budget_waits_and_blocks_the_rest() {
    for version in [Version::new(0, 12, 0), Version::new(0, 33, 0), Version::new(0, 34, 0)] {
        let mut c = cfg(version, 1000, 100);
        c.behaviour.chunked_prefill = false;
        let mut s = Scheduler::new(c);
        s.add_request(0, &req(1, 40, 10));
        s.add_request(1, &req(2, 80, 10)); // 80 > the 60 left after request 0
        s.add_request(2, &req(3, 10, 10)); // would fit, but is behind it
        assert_eq!(step(&mut s).0, vec![(0, 40)], "{version}");
        assert_eq!(s.num_waiting(), 2);
        // Next step: a decode (1), then the whole 80-token prompt and the 10-token one.
        assert_eq!(step(&mut s).0, vec![(0, 1), (1, 80), (2, 10)], "{version}");
    }
    // Chunked prefill on (the default): the 80-token prompt is cut at the 60 left.
    let mut s = Scheduler::new(cfg(Version::new(0, 33, 0), 1000, 100));
    s.add_request(0, &req(1, 40, 10));
    s.add_request(1, &req(2, 80, 10));
    s.add_request(2, &req(3, 10, 10));
    assert_eq!(step(&mut s).0, vec![(0, 40), (1, 60)]);
    assert_eq!(step(&mut s).0, vec![(0, 1), (1, 20), (2, 10)]);
}

/// Before 0.34 `long_prefill_token_threshold` caps a waiting prompt before the no-chunking
/// test, so a threshold still chunks it (0.34 drops the threshold with chunking off, at
/// config resolution: `config/vllm.rs`).
#[test]
fn without_chunked_prefill_the_threshold_still_chunks_before_0_34() {
    let mut c = cfg(Version::new(0, 33, 0), 1000, 100);
    c.behaviour.chunked_prefill = false;
    c.long_prefill_token_threshold = 50;
    let mut s = Scheduler::new(c);
    s.add_request(0, &req(1, 40, 10));
    s.add_request(1, &req(2, 80, 10));
    // Request 0's 40 fit under the threshold; request 1's 80 capped at 50 fit the 60 left.
    assert_eq!(step(&mut s).0, vec![(0, 40), (1, 50)]);
    assert_eq!(step(&mut s).0, vec![(0, 1), (1, 30)]);
}

#[test]
fn preemption_takes_the_last_running_request_and_puts_it_at_the_front_of_waiting() {
    // 9 usable blocks = 144 tokens. Three requests of 32-token prompts.
    let mut s = Scheduler::new(cfg(Version::new(0, 33, 0), 10, 2048));
    for id in 0..3 {
        s.add_request(id, &req(10 + u64::from(id), 32, 200));
    }
    let (sched, _, _) = step(&mut s);
    assert_eq!(sched, vec![(0, 32), (1, 32), (2, 32)]);
    // Each needs a third block at token 48; they outgrow 9 blocks at the
    // 49th token of the third: decode until someone is preempted.
    let mut preempted_step = None;
    for i in 0..40 {
        let (sched, _, pre) = step(&mut s);
        if pre > 0 {
            // The victim is the last admitted (2); no waiting request is admitted in that step.
            assert!(sched.iter().all(|&(id, _)| id != 2), "{sched:?}");
            assert_eq!(s.num_waiting(), 1);
            preempted_step = Some(i);
            break;
        }
    }
    assert!(preempted_step.is_some(), "no preemption happened");
    assert_eq!(s.counters().num_preemptions, 1);
}

#[test]
fn a_resumed_request_reuses_its_cached_blocks_and_its_lookup_is_not_counted() {
    // 11 usable blocks; three requests of 32 + 40 tokens (5 blocks each at
    // the end): two fit together, three do not.
    let mut s = Scheduler::new(cfg(Version::new(0, 33, 0), 12, 2048));
    for id in 0..3 {
        s.add_request(id, &req(10 + u64::from(id), 32, 40));
    }
    let queries_before;
    loop {
        let (_, _, pre) = step(&mut s);
        if pre > 0 {
            queries_before = s.counters().prefix_cache_queries;
            break;
        }
    }
    // Request 2 was preempted asking for the slot of its 49th token (32 +
    // 17 outputs). Its blocks went to the back of the free queue, tail first,
    // so its first block survives the others' allocations: on resume it
    // recomputes less than its 49 tokens.
    for _ in 0..400 {
        let (sched, _, _) = step(&mut s);
        if let Some(&(_, n)) = sched.iter().find(|&&(id, _)| id == 2) {
            assert!(n <= 49 - 16, "resume recomputed {n} of 49 tokens: its cached blocks were not reused");
            assert_eq!(s.counters().prefix_cache_queries, queries_before, "preempted lookups are excluded (>= 0.12)");
            return;
        }
    }
    panic!("request 2 never resumed");
}

#[test]
fn priority_policy_preempts_the_lowest_priority_request() {
    let mut c = cfg(Version::new(0, 33, 0), 10, 2048);
    c.policy = Policy::Priority;
    let mut s = Scheduler::new(c);
    let mut r0 = req(10, 32, 200);
    r0.priority = 5; // lowest priority, admitted first
    s.add_request(0, &r0);
    s.add_request(1, &req(11, 32, 200));
    s.add_request(2, &req(12, 32, 200));
    // The heap orders waiting by (priority, arrival): 1 and 2 go before 0.
    let (sched, _, _) = step(&mut s);
    assert_eq!(sched.iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 2, 0]);
    loop {
        let (sched, _, pre) = step(&mut s);
        if pre > 0 {
            assert!(sched.iter().all(|&(id, _)| id != 0), "the priority-5 request is the victim: {sched:?}");
            break;
        }
    }
}

/// Async scheduling (`docs/vllm.md` §6): step N+1 is planned before step N's output is
/// processed, so the blocks a finishing request frees admit the next request one step
/// later than with synchronous scheduling; a request whose last token is in flight is
/// not scheduled again (no extra decode), and each step samples every running request.
#[test]
fn async_scheduling_frees_a_finished_requests_blocks_one_step_later() {
    let first_step_of_b = |async_scheduling: bool| {
        let mut c = cfg(Version::new(0, 33, 0), 7, 2048); // 6 usable blocks of 16
        c.behaviour.async_scheduling = async_scheduling;
        let mut s = Scheduler::new(c);
        s.add_request(0, &req(1, 32, 3)); // A: 2 blocks, a 3rd at its first decode
        s.add_request(1, &req(2, 16, 10)); // C: keeps the engine busy
        s.add_request(2, &req(3, 64, 1)); // B: 4 blocks, only once A has freed its 3
        let mut outputs_of_a = Vec::new();
        for k in 1..=12 {
            let (sched, out, _) = step(&mut s);
            // A is never scheduled past its last token.
            let a_tokens: u32 = sched.iter().filter(|x| x.0 == 0).map(|x| x.1).sum();
            assert!(a_tokens == 0 || k <= 3, "A scheduled in step {k}");
            outputs_of_a.extend(out.iter().filter(|o| o.id == 0).map(|o| (k, o.finished)));
            if sched.iter().any(|x| x.0 == 2) {
                assert_eq!(outputs_of_a, vec![(1, false), (2, false), (3, true)], "A emits in steps 1–3");
                return k;
            }
        }
        panic!("B never admitted");
    };
    assert_eq!(first_step_of_b(false), 4);
    assert_eq!(first_step_of_b(true), 5);
}

/// Under async scheduling the step's CPU time overlaps the GPU's: the kernel-composed
/// cost of a step is max(CPU, GPU) instead of their sum, and the scenario flag turns it off.
#[test]
fn async_scheduling_is_the_default_from_0_14_and_overlaps_cpu_time() {
    use sim::config::EngineSpec;
    let base = serde_json::json!({
        "version": 1,
        "engine": {"kind": "vllm", "version": "0.33.0"},
        "model": "qwen2.5-7b-instruct", "hardware": "rtx-5090",
        "workload": {"dataset_name": "random", "random_input_len": 512, "random_output_len": 64, "num_prompts": 8, "max_concurrency": 4, "ignore_eos": true}
    });
    let resolve = crate::common::spec;
    let on = resolve(base.clone());
    let EngineSpec::Vllm(c) = &on.engine else { panic!() };
    assert!(c.behaviour.async_scheduling);
    let mut old = base.clone();
    old["engine"]["version"] = "0.12.0".into();
    let EngineSpec::Vllm(c) = &resolve(old).engine else { panic!() };
    assert!(!c.behaviour.async_scheduling);
    let mut off = base.clone();
    off["engine"]["async_scheduling"] = false.into();
    let off = resolve(off);
    let mut shape = sim::cost::StepShape::decodes(4, 4 * 600);
    let sum = off.cost.step_ns(&shape);
    shape.cpu_overlapped = true;
    let max = off.cost.step_ns(&shape);
    assert!(max < sum, "overlapped {max} ns vs {sum} ns");
    for spec in [&on, &off] {
        let out = sim::simulate(spec, sim::simulation::RunOptions { check_invariants: true, ..Default::default() });
        assert_eq!(out.run.stop, sim::simulation::StopReason::Completed);
    }
}

/// vLLM 0.28 added a tier for devices of 160 GiB and more (the B200 card): the API server's
/// token budget is 16,384, and on the SM100 family CUDA graphs are captured up to 1,024 tokens
/// (512 elsewhere, and on every GPU before 0.28).
#[test]
fn b200_defaults_from_0_28_budget_and_graph_ceiling() {
    use sim::config::EngineSpec;
    let resolve = |hw: &str, version: &str| {
        let spec = crate::common::spec(serde_json::json!({
            "version": 1,
            "engine": {"kind": "vllm", "version": version},
            "model": "llama-3.1-8b-instruct", "hardware": hw,
            "workload": {"dataset_name": "random", "random_input_len": 512, "random_output_len": 64, "num_prompts": 8, "max_concurrency": 4, "ignore_eos": true}
        }));
        let EngineSpec::Vllm(c) = &spec.engine else { panic!() };
        let graphs = spec.cost.composed.as_ref().expect("tabled GPUs are kernel-timed").graphs();
        (c.max_num_batched_tokens, c.max_num_seqs, graphs, spec.cost.source())
    };
    use sim::cost::GraphRule;
    let (budget, seqs, graphs, source) = resolve("b200", "0.28.0");
    assert_eq!((budget, seqs), (16384, 1024));
    assert_eq!(graphs, GraphRule::VllmTokensStep16Above256(1024));
    assert!(source.contains("b200_sxm"), "{source}");
    let (budget, _, graphs, _) = resolve("b200", "0.27.0");
    assert_eq!(budget, 8192);
    assert_eq!(graphs, GraphRule::VllmTokensStep16Above256(512));
    let (budget, _, graphs, _) = resolve("h200", "0.33.0");
    assert_eq!(budget, 8192);
    assert_eq!(graphs, GraphRule::VllmTokensStep16Above256(512));
    let (budget, _, graphs, source) = resolve("rtx-pro-6000", "0.33.0");
    assert_eq!(budget, 8192, "95 GiB: the 70 GiB tier");
    assert_eq!(graphs, GraphRule::VllmTokensStep16Above256(512), "SM120 is not the SM100 family");
    assert!(source.contains("rtx_pro_6000_server"), "{source}");
}

/// Told the run's requests, the scheduler makes a request whose first block no other request
/// holds private: its blocks are registered in the prefix cache only when it is preempted
/// (no other request can hit them, and it looks them up only on resuming). Stepped beside a
/// scheduler not told, in a pool that preempts, both policies, two releases' prefix
/// counting: the same plans, outputs, preemptions and counters step for step, and resumed
/// private requests hit their own blocks.
#[test]
fn private_requests_register_their_blocks_when_preempted_with_the_same_steps() {
    let specs = [
        req(1, 200, 220),
        req(2, 180, 220),
        req(1, 150, 160), // shares request 0's first blocks: neither is private
        req(3, 300, 80),
        req(4, 40, 250),
        req(5, 8, 240), // no full prompt block: not private
        req(6, 90, 250),
    ];
    let refs: Vec<&RequestSpec> = specs.iter().collect();
    for version in [Version::new(0, 11, 0), Version::new(0, 28, 0)] {
        for policy in [Policy::Fcfs, Policy::Priority] {
            let c = VllmConfig { policy, ..cfg(version, 40, 256) };
            let mut told = Scheduler::new(c.clone());
            let mut plain = Scheduler::new(c);
            told.expect_requests(&refs);
            for (i, s) in specs.iter().enumerate() {
                told.add_request(i as u32, s);
                plain.add_request(i as u32, s);
            }
            let private: Vec<bool> = (0..specs.len() as u32).map(|i| told.is_private(i)).collect();
            assert_eq!(private, [false, true, false, true, true, false, true]);
            assert!((0..specs.len() as u32).all(|i| !plain.is_private(i)));
            let mut steps = 0;
            while plain.num_unfinished() > 0 {
                assert_eq!(step(&mut told), step(&mut plain), "step {steps}, {version:?} {policy:?}");
                assert_eq!(told.counters(), plain.counters());
                steps += 1;
                assert!(steps < 10_000, "the run does not finish");
            }
            assert_eq!(told.num_unfinished(), 0);
            let n = told.counters();
            assert!(n.num_preemptions > 0, "the pool must preempt: {n:?}");
            if version == Version::new(0, 11, 0) {
                // 0.11 counts a resumed request's lookup; requests 0 and 2 share 144 tokens.
                assert!(n.prefix_cache_hits > 144, "resumed requests hit their own blocks: {n:?}");
            }
        }
    }
}

/// The release each vLLM scheduling behaviour arrived in, as read in the wheels: the last
/// release without it and the first with it. Until 2026-12-04 four of these were gated at the
/// first release an earlier reading had happened to open (0.12, 0.20, 0.28, 0.32).
#[test]
fn vllm_behaviours_arrive_in_the_release_read() {
    let b = |v: (u32, u32, u32)| VllmBehaviour::of_release(Version::new(v.0, v.1, v.2));
    let gates: [(&str, fn(&VllmBehaviour) -> bool, (u32, u32, u32), (u32, u32, u32)); 7] = [
        ("skip_preempted_prefix_stats", |x| x.skip_preempted_prefix_stats, (0, 11, 0), (0, 11, 1)),
        ("async_scheduling", |x| x.async_scheduling, (0, 13, 0), (0, 14, 0)),
        ("full_prompt_admission", |x| x.full_prompt_admission, (0, 18, 0), (0, 19, 0)),
        ("prefix_stats_at_admission", |x| x.prefix_stats_at_admission, (0, 26, 0), (0, 27, 0)),
        ("long_prefill_alone_rule", |x| x.long_prefill_alone_rule, (0, 30, 0), (0, 31, 0)),
        ("priority_walk_continues", |x| x.priority_walk_continues, (0, 32, 0), (0, 33, 0)),
        ("unhashed_freed_first", |x| x.unhashed_freed_first, (0, 22, 0), (0, 23, 0)),
    ];
    for (name, get, before, from) in gates {
        assert!(!get(&b(before)), "{name} in {before:?}");
        assert!(get(&b(from)), "{name} not in {from:?}");
    }
    // 0.34.0 schedules as 0.33.0 does (scheduler, KV manager and block pool read in both wheels:
    // what servesim models is unchanged; 0.34 changes the pool's sizing and block size, memory.rs).
    assert_eq!(b((0, 34, 0)), b((0, 33, 0)));
}

/// From 0.23 a request's freed blocks without a hash (its partial last block) go to the front of
/// the free queue, to be reused first, its hashed ones to the back (`BlockPool.free_blocks`):
/// the partial block no longer evicts a cached prefix. 45 prefixes of two blocks reused at
/// concurrency 1 in a pool of 100 usable blocks: 53% of prompt tokens hit with 0.22's rule,
/// 84% with 0.23's (servesim used 0.22's rule for every release until 2026-12-05; the vLLM
/// source read of that day, whose replay of the two rules gave the same two figures).
#[test]
fn from_0_23_a_freed_partial_block_is_reused_before_a_cached_prefix_is_evicted() {
    let run = |version: &str| {
        let v = serde_json::json!({
            "version": 1,
            "engine": {"kind": "vllm", "version": version, "max_model_len": 64, "num_gpu_blocks_override": 101,
                       "max_num_seqs": 8, "max_num_batched_tokens": 512},
            "model": "llama-3.1-8b-instruct",
            "hardware": "h100-80gb",
            "workload": {"dataset_name": "prefix_repetition", "prefix_repetition_prefix_len": 32,
                         "prefix_repetition_suffix_len": 4, "prefix_repetition_num_prefixes": 45,
                         "prefix_repetition_output_len": 4, "num_prompts": 900, "max_concurrency": 1,
                         "ignore_eos": true, "seed": 0}
        });
        sim::simulate(&common::spec(v), sim::simulation::RunOptions::default()).run.counters.prefix_cache_hit_rate()
    };
    let (old, new) = (run("0.22.0"), run("0.23.0"));
    assert!((0.50..0.56).contains(&old), "{old}");
    assert!((0.82..0.87).contains(&new), "{new}");
}

/// `vllm bench serve` 0.11–0.32 on the chat endpoint times the stream's opening role chunk
/// (`delta: {"role": "assistant", "content": ""}`, which vLLM writes with the first output just
/// before its token) as the first token: TTFT is unchanged, each request gains one ITL of ~0
/// and one "token" in the peak-tokens buckets. 0.33's `_choice_has_streamed_output` skips it, as
/// `sglang.bench_serving` does; `/v1/completions` has no role chunk.
#[test]
fn a_chat_benchmark_before_0_33_times_the_role_chunk_as_a_token() {
    let scenario = |version: &str, endpoint: &str| {
        let mut v: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(common::root().join("scenarios/serve-small-vllm.json")).unwrap(),
        )
        .unwrap();
        common::set(&mut v, &format!("engine.version={version}"));
        common::set(&mut v, &format!("workload.endpoint={endpoint}"));
        v
    };
    const CHAT: &str = "/v1/chat/completions";
    let s32 = common::spec(scenario("0.32.0", CHAT));
    assert!(s32.workload.role_chunk);
    assert!(!common::spec(scenario("0.33.0", CHAT)).workload.role_chunk);
    assert!(!common::spec(scenario("0.32.0", "/v1/completions")).workload.role_chunk);
    let mut sglang = serde_json::from_str::<serde_json::Value>(
        &std::fs::read_to_string(common::root().join("scenarios/rtx5090-qwen2.5-7b-sglang.json")).unwrap(),
    )
    .unwrap();
    common::set(&mut sglang, &format!("workload.endpoint={CHAT}"));
    assert!(!common::spec(sglang).workload.role_chunk);

    // The same run, read by a client that times the role chunk and by one that skips it.
    let with = sim::simulate(&s32, Default::default());
    let mut skipping = s32.clone();
    skipping.workload.role_chunk = false;
    let without = sim::simulate(&skipping, Default::default());
    let (a, b) = (&with.metrics, &without.metrics);
    for (x, y) in [(&a.ttft, &b.ttft), (&a.tpot, &b.tpot), (&a.e2el, &b.e2el)] {
        assert_eq!(format!("{x:?}"), format!("{y:?}"));
    }
    // 40 requests of 32 tokens: 40 × 31 gaps, and 40 more of 0.
    assert_eq!(a.completed, 40);
    let gaps = 40.0 * 31.0;
    assert!((a.itl.mean * (gaps + 40.0) - b.itl.mean * gaps).abs() < 1e-9 * b.itl.mean * gaps, "{a:?} {b:?}");
    assert_eq!(a.itl.max, b.itl.max);
    assert!(a.itl.median <= b.itl.median);
    assert!(a.max_output_tokens_per_s > b.max_output_tokens_per_s);
    assert!(a.max_output_tokens_per_s <= b.max_output_tokens_per_s + 40.0);
    assert_eq!(a.output_throughput, b.output_throughput, "usage.completion_tokens counts no role chunk");
}

/// `vllm bench serve` asks for greedy sampling (`"temperature": 0.0`) before 0.15 and sends no
/// temperature from it; `sglang.bench_serving` sends 0.0 (`sim::config::client_sends_greedy`,
/// which `servesim bench` follows).
#[test]
fn the_benchmark_asks_for_greedy_sampling_before_0_15() {
    let spec_of = |path: &str, version: Option<&str>| {
        let mut v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(common::root().join(path)).unwrap()).unwrap();
        if let Some(ver) = version {
            common::set(&mut v, &format!("engine.version={ver}"));
        }
        common::spec(v)
    };
    let greedy = |path: &str, version: Option<&str>| sim::config::client_sends_greedy(&spec_of(path, version).engine);
    assert!(greedy("scenarios/serve-small-vllm.json", Some("0.14.0")));
    assert!(!greedy("scenarios/serve-small-vllm.json", Some("0.15.0")));
    assert!(!greedy("scenarios/serve-small-vllm.json", Some("0.33.0")));
    assert!(greedy("scenarios/rtx5090-qwen2.5-7b-sglang.json", None));
}

/// `--disable-custom-all-reduce`: TP's all-reduces are timed from the GPU's nccl-tests
/// `all_reduce` table instead of the custom kernel's (the RTX PRO 6000's own; the RTX 5090,
/// untabled, the same-link system's scaled by link bandwidth), the cost source says so, and
/// nothing changes at TP 1; an SGLang scenario with it is refused (a vLLM flag).
#[test]
fn disable_custom_all_reduce_times_tp_all_reduces_on_nccl() {
    let spec = |hw: &str, tp: u32, off: Option<bool>| {
        let mut engine = serde_json::json!({"kind": "vllm", "version": "0.19.0", "tensor_parallel_size": tp});
        if let Some(o) = off {
            engine["disable_custom_all_reduce"] = o.into();
        }
        crate::common::spec(serde_json::json!({
            "version": 1, "engine": engine, "model": "qwen3-8b", "hardware": {"gpu": hw, "count": tp},
            "workload": {"dataset_name": "random", "random_input_len": 512, "random_output_len": 64, "num_prompts": 8, "ignore_eos": true}
        }))
    };
    let ar = |s: &sim::config::SimSpec, m: u64| s.cost.composed.as_ref().expect("kernel-timed").allreduce_us(m);
    let tables = sim::kernels::tables("rtx_pro_6000_server", "vllm").expect("tabled");
    let hidden = 4096.0;
    let (custom, nccl) = (spec("rtx-pro-6000", 2, None), spec("rtx-pro-6000", 2, Some(true)));
    let default_off = spec("rtx-pro-6000", 2, Some(false));
    for m in [1u64, 128, 2048] {
        let c = tables.allreduce(2).unwrap().at(m as f64 * hidden) * 1e3;
        let n = tables.nccl_all_reduce(2).unwrap().at(m as f64 * hidden) * 1e3;
        let skew = ar(&custom, m) - c;
        assert!(skew > 0.0 && skew < 10.0, "the collective skew on top: {skew}");
        assert!((ar(&nccl, m) - (n + skew)).abs() < 1e-9, "m {m}: {} against {}", ar(&nccl, m), n + skew);
        assert_eq!(ar(&default_off, m), ar(&custom, m), "false is the default");
    }
    assert!(nccl
        .cost
        .source()
        .contains("TP all-reduces on NCCL (disable_custom_all_reduce), rtx_pro_6000_server nccl-tests"));
    assert!(!custom.cost.source().contains("NCCL"));
    // TP 1: nothing to reduce.
    assert_eq!(spec("rtx-pro-6000", 1, Some(true)).cost.source(), spec("rtx-pro-6000", 1, None).cost.source());
    // An untabled PCIe card: the same-link system's NCCL table, scaled by the link bandwidth.
    // (Both links 64 GB/s each way: a scale of 1.)
    let g = spec("rtx-5090", 2, Some(true));
    let n = tables.nccl_all_reduce(2).unwrap().at(128.0 * hidden) * 1e3;
    let skew = ar(&custom, 128) - tables.allreduce(2).unwrap().at(128.0 * hidden) * 1e3;
    assert!(g.cost.source().contains("rtx_pro_6000_server's, scaled by pcie link bandwidth"), "{}", g.cost.source());
    assert!((ar(&g, 128) - (n + skew)).abs() < 1e-9, "{} against {}", ar(&g, 128), n + skew);
    // Past two PCIe GPUs vLLM runs NCCL without the flag: nothing changes.
    let (c4, n4) = (spec("rtx-pro-6000", 4, None), spec("rtx-pro-6000", 4, Some(true)));
    assert_eq!(ar(&c4, 128), ar(&n4, 128));
    assert!(n4.cost.source().contains("changes nothing over PCIe past two GPUs"), "{}", n4.cost.source());
    // The steps of vLLM's all-reduce + RMSNorm fusion (H100, TP 2, 0.28: up to 64 MiB ÷ the
    // hidden state's bytes) keep the table they had; the larger ones go to NCCL.
    let h100 = |off: Option<bool>| {
        let mut engine = serde_json::json!({"kind": "vllm", "version": "0.28.0", "tensor_parallel_size": 2});
        if let Some(o) = off {
            engine["disable_custom_all_reduce"] = o.into();
        }
        crate::common::spec(serde_json::json!({
            "version": 1, "engine": engine, "model": "qwen3-8b", "hardware": {"gpu": "h100-80gb", "count": 2},
            "workload": {"dataset_name": "random", "random_input_len": 512, "random_output_len": 64, "num_prompts": 8, "ignore_eos": true}
        }))
    };
    let (hc, hn) = (h100(None), h100(Some(true)));
    let fused = sim::config::vllm_allreduce_rms_fusion_max_tokens(
        sim::engine::Version::new(0, 28, 0),
        &hc.gpu,
        2,
        true,
        4096 * 2,
    )
    .expect("the fusion runs on an H100 at TP 2");
    assert_eq!(ar(&hn, fused), ar(&hc, fused), "a fused step keeps FlashInfer's timing");
    let h = sim::kernels::tables("h100_sxm", "vllm").unwrap();
    let big = fused + 1;
    let skew = ar(&hc, big) - h.allreduce(2).unwrap().at(big as f64 * 4096.0) * 1e3;
    assert!((ar(&hn, big) - (h.nccl_all_reduce(2).unwrap().at(big as f64 * 4096.0) * 1e3 + skew)).abs() < 1e-9);
    // The linear prior has no table to switch: the flag is refused there, naming itself.
    let prior = sim::config::from_value(
        serde_json::json!({"version": 1, "engine": {"kind": "vllm", "version": "0.19.0", "tensor_parallel_size": 2,
            "disable_custom_all_reduce": true}, "model": "qwen3-8b", "hardware": {"gpu": "h100-80gb", "count": 2},
            "workload": {"dataset_name": "random", "random_input_len": 64, "random_output_len": 8, "num_prompts": 2},
            "cost": {"prior": {}}}),
        "",
    )
    .and_then(|s| sim::config::resolve(&s, &sim::builtin::resources().unwrap()).map(|_| ()));
    let e = prior.expect_err("the linear prior ignores the kernel").to_string();
    assert!(e.contains("engine.disable_custom_all_reduce") && e.contains("linear roofline prior"), "{e}");
    // An SGLang scenario with the vLLM flag is refused.
    let s = sim::config::from_value(
        serde_json::json!({"version": 1, "engine": {"kind": "sglang", "version": "0.5.5", "disable_custom_all_reduce": true},
            "model": "qwen3-8b", "hardware": "h100-80gb",
            "workload": {"dataset_name": "random", "random_input_len": 64, "random_output_len": 8, "num_prompts": 2}}),
        "",
    )
    .and_then(|s| sim::config::resolve(&s, &sim::builtin::resources().unwrap()).map(|_| ()));
    let e = s.expect_err("a vLLM flag in an SGLang scenario").to_string();
    assert!(e.contains("disable_custom_all_reduce") && e.contains("does not model it"), "{e}");
}
