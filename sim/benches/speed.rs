//! Simulation speed: simulated seconds per wall second and requests per wall
//! second, on the default scenario and on 10,000-request ones.
//!
//! `cargo bench -p sim --bench speed` prints a Markdown table; the figures
//! in BENCHMARKS.md come from it. (A bench, not a timed test: the numbers
//! depend on the machine.)

use std::path::PathBuf;
use std::time::Instant;

use serde_json::Value;
use sim::cards::{GpuCard, ModelCard};
use sim::config::{self, Resources};
use sim::simulation::RunOptions;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn cards<T: serde::de::DeserializeOwned>(dir: &str) -> Vec<T> {
    let mut paths: Vec<PathBuf> =
        std::fs::read_dir(root().join("models").join(dir)).unwrap().map(|e| e.unwrap().path()).collect();
    paths.sort();
    paths.iter().map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()).collect()
}

fn scenario(name: &str, sets: &[&str]) -> Value {
    let mut v: Value =
        serde_json::from_str(&std::fs::read_to_string(root().join("scenarios").join(name)).unwrap()).unwrap();
    for s in sets {
        config::apply_set(&mut v, s).unwrap();
    }
    v
}

fn main() {
    let res = Resources { models: cards::<ModelCard>("model"), gpus: cards::<GpuCard>("gpu"), ..Default::default() };
    let cases: Vec<(&str, Value)> = vec![
        ("default (RTX 5090, 4096/512, c=1, 20 requests)", scenario("rtx5090-qwen2.5-7b-vllm.json", &[])),
        (
            "default at its own concurrency (c=1), 10,000 requests",
            scenario("rtx5090-qwen2.5-7b-vllm.json", &["workload.num_prompts=10000"]),
        ),
        (
            "RTX 5090, 4096/512, c=128, 10,000 requests",
            scenario("rtx5090-qwen2.5-7b-vllm.json", &["workload.max_concurrency=128", "workload.num_prompts=10000"]),
        ),
        (
            "H100 shared prefix, c=64, 10,000 requests",
            scenario(
                "shared-prefix-llama3.1-8b-h100-vllm.json",
                &["workload.max_concurrency=64", "workload.num_prompts=10000"],
            ),
        ),
        (
            "A100 KV-starved (preempting), c=64, 10,000 requests",
            scenario("kv-starved-qwen2.5-7b-a100-vllm.json", &["workload.num_prompts=10000"]),
        ),
    ];
    println!(
        "| scenario | requests | engine steps | simulated s | wall s | simulated s / wall s | requests / wall s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (name, v) in cases {
        let s = config::from_value(v, "").unwrap();
        let spec = config::resolve(&s, &res).unwrap();
        // Best wall time of at least 3 runs and at least 0.5 s of running.
        let mut best = f64::INFINITY;
        let mut out = None;
        let started = Instant::now();
        let mut runs = 0;
        while runs < 3 || started.elapsed().as_secs_f64() < 0.5 {
            runs += 1;
            let t = Instant::now();
            let o = sim::simulate(&spec, RunOptions::default());
            best = best.min(t.elapsed().as_secs_f64());
            out = Some(o);
        }
        let o = out.unwrap();
        let simulated = o.run.end_ns as f64 / 1e9;
        let n = o.workload.requests.len();
        println!(
            "| {name} | {n} | {} | {simulated:.1} | {best:.3} | {:.0} | {:.0} |",
            o.run.num_steps,
            simulated / best,
            n as f64 / best
        );
    }
}
