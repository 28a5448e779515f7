//! `servesim sweep` from the command line: the KV-limited concurrency's sentence and the plot's
//! mark of it.

use crate::common::*;

/// vLLM admits on the prompt alone: the KV-starved scenario's throughput grows 19% from its
/// KV-limited concurrency (10) to 16, with up to 19 running. The sentence said "throughput gains
/// nothing past it"; it now says admission goes past it, by how much in these runs, and what then.
#[test]
fn sweep_does_not_say_throughput_stops_at_the_kv_limit() {
    let o = run_cli(&[
        "sweep",
        "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json",
        "--concurrency",
        "1,4,8,10,12,16,32,64",
        "--json",
    ]);
    let r = stdout_json(&o);
    assert_eq!(r["kv_limited_concurrency"], 10);
    let s = r["kv_limit_explanation"].as_str().unwrap();
    assert!(!s.contains("gains nothing"), "{s}");
    let peak = r["points"].as_array().unwrap().iter().filter_map(|p| p["peak_running"].as_u64()).max().unwrap();
    assert!(peak > 10);
    assert!(s.contains(&format!("up to {peak} ran at once in these runs")), "{s}");
    assert!(s.contains("running ones are preempted"), "{s}");
    let at = |c: u64| {
        r["points"].as_array().unwrap().iter().find(|p| p["max_concurrency"] == c).unwrap()["output_throughput"]
            .as_f64()
            .unwrap()
    };
    assert!(at(16) > at(10) * 1.05, "throughput grows past the KV-limited concurrency");
}

/// The plot marks the KV-limited concurrency the text states (the series' own, from its point with
/// the largest request sample), not its first point's (42 against the text's 48 where the points'
/// prompt counts differ).
#[test]
fn sweep_plot_marks_the_kv_limit_the_text_states() {
    let svg = scratch().join("sweep-kv-mark.svg");
    let o = run_cli(&[
        "sweep",
        "scenarios/long-prefill-itl-llama3.1-8b-h100-vllm.json",
        "--set",
        "workload.request_rate=null",
        "--concurrency",
        "4,47",
        "--num-prompts",
        "5,2000",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&o.stdout).to_string();
    let kv: u64 = text
        .split("KV-limited concurrency: ")
        .nth(1)
        .and_then(|t| t.split('.').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{text}"));
    let drawn = std::fs::read_to_string(&svg).unwrap();
    let marked: Vec<&str> = drawn.lines().filter(|l| l.trim().starts_with("KV-limited concurrency")).collect();
    assert_eq!(marked, vec![format!("KV-limited concurrency {kv}")], "text {kv}");
}

/// A `--set` of a field the sweep sets at every point is refused (it was overwritten unsaid):
/// the concurrency, and the prompt count beside `--num-prompts` (`plan` likewise).
#[test]
fn a_set_of_what_each_point_sets_is_refused() {
    let o = run_cli(&["sweep", "--concurrency", "1,2", "--num-prompts", "4", "--set", "workload.num_prompts=10"]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--set workload.num_prompts=10 and --num-prompts both give workload.num_prompts"), "{err}");
    let o = run_cli(&["sweep", "--concurrency", "1,2", "--set", "workload.max_concurrency=4"]);
    assert_eq!(o.status.code(), Some(2));
    let o = run_cli(&["sweep", "--concurrency", "1,2", "--set", "workload.num_prompts=4", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // An engine list beside another engine.kind kept the last unsaid.
    for other in ["engine.kind=sglang,vllm", "engine.kind=sglang"] {
        let o = run_cli(&["sweep", "--concurrency", "1", "--set", "engine.kind=vllm,sglang", "--set", other]);
        assert_eq!(o.status.code(), Some(2));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("--set engine.kind: given more than once (engine.kind=vllm,sglang, then"), "{err}");
    }
}
