//! Same scenario and seed → byte-identical output; parallel sweeps equal sequential ones.

use crate::common::*;

#[test]
fn same_scenario_and_seed_give_byte_identical_json() {
    for scenario in [
        None,
        Some("scenarios/kv-starved-qwen2.5-7b-a100-vllm.json"),
        Some("scenarios/shared-prefix-llama3.1-8b-h100-vllm.json"),
    ] {
        let mut args = vec!["simulate", "--json", "--seed", "7"];
        if let Some(s) = scenario {
            args.insert(1, s);
        }
        let a = run_cli(&args);
        let b = run_cli(&args);
        assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
        assert_eq!(a.stdout, b.stdout, "two runs of {scenario:?} differ");
    }
}

#[test]
fn different_seeds_give_different_workloads() {
    let s = "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json";
    let a =
        stdout_json(&run_cli(&["simulate", s, "--json", "--seed", "1", "--set", "workload.random_range_ratio=0.5"]));
    let b =
        stdout_json(&run_cli(&["simulate", s, "--json", "--seed", "2", "--set", "workload.random_range_ratio=0.5"]));
    assert_ne!(a["total_input_tokens"], b["total_input_tokens"]);
    assert_eq!(a["seed"], 1);
}

#[test]
fn a_sweep_on_one_thread_equals_the_same_sweep_on_two() {
    let s = "scenarios/kv-starved-qwen2.5-7b-a100-vllm.json";
    let one = run_cli(&["sweep", s, "--concurrency", "1,8,16,32", "--json", "--jobs", "1"]);
    let two = run_cli(&["sweep", s, "--concurrency", "1,8,16,32", "--json", "--jobs", "2"]);
    assert!(one.status.success(), "{}", String::from_utf8_lossy(&one.stderr));
    assert_eq!(one.stdout, two.stdout);
    // And each point equals a lone simulate run at that concurrency: results in input order.
    let sweep = stdout_json(&one);
    let lone = stdout_json(&run_cli(&["simulate", s, "--json", "--set", "workload.max_concurrency=16"]));
    assert_eq!(sweep["points"][2], lone);
}

/// Same scenario and seed give byte-identical output on SGLang too.
#[test]
fn sglang_runs_are_deterministic() {
    for s in
        ["scenarios/kv-starved-qwen2.5-7b-a100-sglang.json", "scenarios/shared-prefix-lpm-llama3.1-8b-h100-sglang.json"]
    {
        let a = run_cli(&[
            "simulate",
            s,
            "--json",
            "--set",
            "engine.schedule_policy=random",
            "--set",
            "workload.num_prompts=150",
        ]);
        let b = run_cli(&[
            "simulate",
            s,
            "--json",
            "--set",
            "engine.schedule_policy=random",
            "--set",
            "workload.num_prompts=150",
        ]);
        assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
        assert_eq!(a.stdout, b.stdout);
    }
}
