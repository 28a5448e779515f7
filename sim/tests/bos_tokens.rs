//! The BOS token a model's tokenizer puts before a text prompt (`ModelCard::add_bos_token`):
//! what the server prefills and what `vllm bench serve` counts in `total_input_tokens`, per
//! release and dataset, worked out by hand from the engine source (docs/benchmark.md §1.5):
//!
//! * `random` (`RandomDataset.get_sampling_params`, 0.11.0–0.34.0): the sampled part is drawn
//!   around `random_input_len − num_special_tokens_to_add()`, the server adds the BOS back: it
//!   prefills about `random_input_len`.
//! * `prefix_repetition` (`PrefixRepetitionRandomDataset.sample`): nothing subtracted, the
//!   server prefills `prefix + suffix + 1`.
//! * The client's count: the dataset's `prompt_len` (BOS left out) before 0.20, the server's
//!   `usage.prompt_tokens` (BOS included) from 0.20 (`endpoint_request_func.py`,
//!   `serve.py:calculate_metrics`).

mod common;

use serde_json::{json, Value};
use sim::simulation::RunOptions;

/// A small closed-loop scenario: `model` on an H100 under `engine` at `version`, `workload` over
/// the defaults (fixed lengths, no initial test request, seed 1).
fn scenario(engine: &str, version: &str, model: &str, workload: Value) -> Value {
    let mut w =
        json!({"num_prompts": 8, "max_concurrency": 4, "ignore_eos": true, "initial_test_request": false, "seed": 1});
    for (k, v) in workload.as_object().unwrap() {
        w[k] = v.clone();
    }
    let e = if engine == "vllm" {
        json!({"kind": engine, "version": version, "max_model_len": 8192, "kv_cache_tokens": 200000})
    } else {
        json!({"kind": engine, "version": version, "context_length": 8192, "max_total_num_tokens": 200000})
    };
    json!({"version": 1, "engine": e, "model": model, "hardware": "h100-80gb", "workload": w})
}

fn random(input: u32) -> Value {
    json!({"dataset_name": "random", "random_input_len": input, "random_output_len": 16})
}

const LLAMA: &str = "llama-3.1-8b-instruct";
const QWEN: &str = "qwen3-8b";

#[test]
fn the_shipped_cards_say_whether_their_tokenizer_adds_a_bos() {
    for m in &common::resources().models {
        let family_adds = m.id.starts_with("llama-") || m.id.starts_with("mistral-");
        assert_eq!(m.add_bos_token, Some(family_adds), "{}", m.id);
    }
}

/// `random` at 1,024 and 128 tokens, 8 prompts, on Llama 3.1 (a BOS): the server prefills
/// 1,024 (1,023 drawn + the BOS); 0.11–0.19 print 8 × 1,023 = 8,184 (8 × 127 = 1,016 at 128),
/// 0.20 on 8 × 1,024 = 8,192 (1,024). Qwen3 (no BOS): 8,192 (1,024) for every release.
#[test]
fn random_total_input_tokens_are_what_each_release_prints() {
    for (version, at_1024, at_128) in [
        ("0.11.0", 8184, 1016),
        ("0.14.0", 8184, 1016),
        ("0.19.0", 8184, 1016),
        ("0.20.0", 8192, 1024),
        ("0.28.0", 8192, 1024),
        ("0.34.0", 8192, 1024),
    ] {
        for (len, want) in [(1024, at_1024), (128, at_128)] {
            let spec = common::spec(scenario("vllm", version, LLAMA, random(len)));
            let out = sim::simulate(&spec, RunOptions::default());
            assert!(out.run.stop.completed().is_ok(), "{version}");
            assert_eq!(out.metrics.total_input_tokens, want, "llama, vLLM {version}, random_input_len {len}");
            // What the engine prefills: the BOS and the 1,023 (127) drawn tokens, every release.
            assert!(out.workload.requests.iter().all(|r| r.prompt_len == len && r.bos_len() == 1), "{version}");
            let qwen = common::spec(scenario("vllm", version, QWEN, random(len)));
            let out = sim::simulate(&qwen, RunOptions::default());
            assert_eq!(out.metrics.total_input_tokens, 8 * u64::from(len), "qwen3, vLLM {version}");
            assert!(out.workload.requests.iter().all(|r| r.prompt_len == len && r.bos_len() == 0));
        }
    }
}

/// The range is drawn around the length less the BOS: `random_input_len` 11 at ratio 0.3 draws
/// from [⌊10 · 0.7⌋, ⌈10 · 1.3⌉] = [7, 13] and the server prefills 8 to 14 tokens (without the
/// BOS taken off, servesim drew [⌊7.7⌋, ⌈14.3⌉] = [7, 15]); 0.19 prints the drawn part alone.
#[test]
fn a_ranged_random_length_is_drawn_around_the_length_less_the_bos() {
    let w = json!({"dataset_name": "random", "random_input_len": 11, "random_output_len": 4,
                   "random_range_ratio": 0.3, "num_prompts": 200});
    for version in ["0.19.0", "0.20.0"] {
        let spec = common::spec(scenario("vllm", version, LLAMA, w.clone()));
        let workload = sim::workload::generate(&spec.workload);
        let lens: Vec<u32> = workload.requests.iter().map(|r| r.prompt_len).collect();
        assert_eq!((lens.iter().min(), lens.iter().max()), (Some(&8), Some(&14)), "{version}");
        let counted: u64 = workload.requests.iter().map(|r| u64::from(workload.counted_prompt_len(r))).sum();
        let server: u64 = lens.iter().map(|&l| u64::from(l)).sum();
        assert_eq!(counted, if version == "0.19.0" { server - 200 } else { server }, "{version}");
    }
}

/// `prefix_repetition` with a 256-token prefix and 128-token suffixes, 8 prompts over 2 prefixes:
/// the server prefills 256 + 128 + 1 = 385 tokens a prompt (nothing is subtracted); 0.19 prints
/// 8 × 384 = 3,072, 0.20 8 × 385 = 3,080. The BOS is part of the shared prefix: the second and
/// later prompts of a prefix find ⌊257 / 16⌋ = 16 of its blocks cached (256 tokens).
#[test]
fn prefix_repetition_prefills_the_bos_and_counts_it_from_020() {
    let w = json!({"dataset_name": "prefix_repetition", "prefix_repetition_prefix_len": 256,
                   "prefix_repetition_suffix_len": 128, "prefix_repetition_num_prefixes": 2,
                   "prefix_repetition_output_len": 16, "max_concurrency": 1});
    for (version, want) in [("0.11.0", 3072), ("0.19.0", 3072), ("0.20.0", 3080), ("0.34.0", 3080)] {
        let spec = common::spec(scenario("vllm", version, LLAMA, w.clone()));
        let out = sim::simulate(&spec, RunOptions::default());
        assert!(out.workload.requests.iter().all(|r| r.prompt_len == 385 && r.bos_len() == 1), "{version}");
        assert_eq!(out.metrics.total_input_tokens, want, "vLLM {version}");
        // One at a time: 2 prefixes, each first sent cold, the other 3 hit 256 tokens.
        assert_eq!(out.run.counters.prefix_cache_hits, 6 * 256, "vLLM {version}");
    }
    let qwen = common::spec(scenario("vllm", "0.19.0", QWEN, w));
    let out = sim::simulate(&qwen, RunOptions::default());
    assert_eq!(out.metrics.total_input_tokens, 8 * 384);
    assert!(out.workload.requests.iter().all(|r| r.prompt_len == 384));
}

/// SGLang is measured as the current `vllm bench serve` measures it (the server's count), and its
/// radix tree shares the BOS every prompt begins with: each request after the first finds that
/// one token cached (page size 1), where vLLM, block by block, finds nothing.
#[test]
fn sglang_counts_the_bos_and_its_radix_tree_shares_it() {
    let spec = common::spec(scenario("sglang", "0.5.23", LLAMA, random(1024)));
    let out = sim::simulate(&spec, RunOptions::default());
    assert_eq!(out.metrics.total_input_tokens, 8 * 1024);
    assert_eq!(out.run.counters.prefix_cache_hits, 7, "one BOS token for each request after the first");
    let vllm = common::spec(scenario("vllm", "0.19.0", LLAMA, random(1024)));
    assert_eq!(sim::simulate(&vllm, RunOptions::default()).run.counters.prefix_cache_hits, 0);
}

/// Prompts sent as token ids (`tokenize_prompt`) are not tokenized: no BOS is added, nothing is
/// subtracted. A trace's `input_len` is the server's count already (ShareGPT's `prompt_len` is the
/// tokenizer's, BOS included): it is prefilled and counted as given in every release.
#[test]
fn token_id_prompts_and_traces_gain_no_bos() {
    let mut w = random(1024);
    w["tokenize_prompt"] = json!(true);
    let spec = common::spec(scenario("vllm", "0.19.0", LLAMA, w));
    let out = sim::simulate(&spec, RunOptions::default());
    assert_eq!(out.metrics.total_input_tokens, 8 * 1024);
    assert!(out.workload.requests.iter().all(|r| r.prompt_len == 1024 && r.bos_len() == 0));
    let rows: Vec<sim::workload::TraceRow> = (0..8)
        .map(|i| sim::workload::TraceRow {
            arrival_time: 0.0,
            input_len: 300 + i,
            output_len: 8,
            prefix_group: None,
            prefix_len: None,
            priority: None,
        })
        .collect();
    let v = scenario("vllm", "0.19.0", LLAMA, json!({"dataset_name": "trace", "trace": "rows.csv"}));
    let res = sim::config::Resources { trace: Some(rows), ..common::resources() };
    let spec = sim::config::resolve(&sim::config::from_value(v, "").unwrap(), &res).unwrap();
    let out = sim::simulate(&spec, RunOptions::default());
    assert_eq!(out.metrics.total_input_tokens, (300..308).sum::<u64>());
    assert!(out.workload.requests.iter().all(|r| r.bos_len() == 0));
}

/// A card that does not say whether its tokenizer adds a BOS is refused, naming the field:
/// read as absent it would be a tokenizer without one.
#[test]
fn a_card_without_add_bos_token_is_refused_naming_the_field() {
    let mut card = serde_json::to_value(common::resources().models.iter().find(|m| m.id == LLAMA).unwrap()).unwrap();
    card.as_object_mut().unwrap().remove("add_bos_token");
    card["id"] = json!("llama-without-the-field");
    let mut v = scenario("vllm", "0.19.0", LLAMA, random(128));
    v["model"] = card;
    let s = sim::config::from_value(v, "").unwrap();
    let e = sim::config::resolve(&s, &common::resources()).unwrap_err();
    assert_eq!(e.path, "model.add_bos_token", "{e}");
    assert!(e.message.contains("expected true or false"), "{e}");
}
