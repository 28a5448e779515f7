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
/// counted each prompt whole: 386 where the pool holds 3,416).
#[test]
fn explain_fleet_kv_sentences_match_their_numbers_with_shared_prefixes() {
    let e = explain(&[SP, "--set", "fleet.count=2"]);
    let s = &sentences(&e)[0];
    assert!(
        s.contains("a request holds 256 (mean prompt + output less its shared prefix and the last token, 255 tokens"),
        "{s}"
    );
    assert!(s.contains("shared prefixes they use held once"), "{s}");
    let e = explain(&[SP, "--set", "fleet.prefill_count=1", "--set", "fleet.decode_count=1"]);
    let s = sentences(&e);
    assert!(s[0].contains("a request holds 128 (mean prompt less its shared prefix, 128 tokens"), "{}", s[0]);
    let prefill = e["replica_limits"]["prefill_kv_limited_concurrency"].as_u64().unwrap();
    assert!(prefill > 3000, "{prefill}");
    assert!(
        s[2].contains(&format!(
            "its prefill replicas hold {prefill} prompts at once (their shared prefixes held once)"
        )),
        "{}",
        s[2]
    );
}
