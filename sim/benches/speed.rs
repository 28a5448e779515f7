//! Simulation speed: simulated seconds per wall second and requests per wall
//! second, on the default scenario and on 10,000-request ones; then wall time
//! and peak memory of 1,000,000 requests of a cheap scenario.
//!
//! `cargo bench -p sim --bench speed` prints a Markdown table; the figures
//! in BENCHMARKS.md come from it. (A bench, not a timed test: the numbers
//! depend on the machine.) The million-request run happens in a child process
//! of this bench (`SPEED_MILLION=1`), so that its peak RSS (`VmHWM` from
//! `/proc/self/status`) is its own. `SPEED_NO_FF=1` turns the fast-forward off.
//! `SPEED_RUNS=n` runs each case exactly n times (1: one run's instructions under a profiler).
//! `SPEED_FLEET=1` runs only the fleet row (64 replicas, a million trace requests);
//! `SPEED_FLEET_DIGEST=DIR` writes the outputs of 52 small fleet runs to compare two builds.

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

fn opts() -> RunOptions {
    let mut o = RunOptions::default();
    if std::env::var_os("SPEED_NO_FF").is_some() {
        o.fast_forward = false;
    }
    o
}

/// Peak resident set of this process, from `/proc/self/status` (`VmHWM`), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb / 1024.0)
}

/// The cheap scenario of the million-request run: the small vLLM engine of
/// `serve-small-vllm.json` (256 in, 32 out, concurrency 8).
fn million() -> Value {
    scenario("serve-small-vllm.json", &["workload.num_prompts=1000000"])
}

fn run_million(res: &Resources) {
    let t = Instant::now();
    let s = config::from_value(million(), "").unwrap();
    let spec = config::resolve(&s, res).unwrap();
    let o = sim::simulate(&spec, opts());
    let wall = t.elapsed().as_secs_f64();
    let simulated = o.run.end_ns as f64 / 1e9;
    let n = o.workload.requests.len();
    assert_eq!(o.metrics.completed as usize, n);
    println!(
        "| serve-small (A100, 256/32, c=8), 1,000,000 requests | {n} | {} | {simulated:.1} | {wall:.3} | {:.0} | {:.0} | {:.0} |",
        o.run.num_steps,
        simulated / wall,
        n as f64 / wall,
        peak_rss_mib().unwrap_or(f64::NAN)
    );
}

/// A million Mooncake-format requests: the 40-row sample (`data/traces/mooncake_sample.jsonl`)
/// tiled 25,000 times (each tile's hash ids shifted by `(tile mod 100) × 10,000`, so prompts
/// share prefixes within and across tiles as the real trace's do), outputs capped at 128
/// tokens, rescaled to 640 requests/s, on 64 vLLM replicas of Qwen2.5-7B on H100 behind
/// `router` (`SPEED_FLEET_ROUTER`, default `cache_aware`).
fn run_fleet_trace(res: &Resources) {
    let sample = std::fs::read_to_string(root().join("data/traces/mooncake_sample.jsonl")).unwrap();
    let rows = sim::traces::parse_mooncake(&sample).unwrap();
    let span = rows.iter().map(|r| r.timestamp).fold(0.0, f64::max) + 500.0;
    let mut text = String::new();
    for tile in 0..25_000u64 {
        for r in &rows {
            let ids: Vec<String> = r.hash_ids.iter().map(|h| (h + (tile % 100) * 10_000).to_string()).collect();
            text.push_str(&format!(
                "{{\"timestamp\": {}, \"input_length\": {}, \"output_length\": {}, \"hash_ids\": [{}]}}\n",
                r.timestamp + tile as f64 * span,
                r.input_length,
                r.output_length.min(128),
                ids.join(",")
            ));
        }
    }
    let t = Instant::now();
    let mut reqs = sim::traces::parse_requests(sim::traces::TraceFormat::Mooncake, &text, 7).unwrap();
    sim::traces::rate_scale(&mut reqs, 640.0).unwrap();
    let parse = t.elapsed().as_secs_f64();
    let router = std::env::var("SPEED_FLEET_ROUTER").unwrap_or_else(|_| "cache_aware".into());
    let v = serde_json::json!({
        "version": 1,
        "engine": {"kind": "vllm", "version": "0.33.0", "max_model_len": 16384, "kv_cache_tokens": 400000},
        "model": "qwen2.5-7b-instruct",
        "hardware": "h100-80gb",
        "workload": {"dataset_name": "trace", "trace": "mooncake-tiled.jsonl", "trace_format": "mooncake",
                     "ignore_eos": true, "initial_test_request": false},
        "fleet": {"count": 64, "router": {"policy": router}}
    });
    let mut res = res.clone();
    res.trace_requests = Some(std::sync::Arc::new(reqs));
    let s = config::from_value(v, "").unwrap();
    let spec = config::resolve(&s, &res).unwrap();
    let t = Instant::now();
    let o = sim::simulate(&spec, opts());
    let wall = t.elapsed().as_secs_f64();
    let simulated = o.run.end_ns as f64 / 1e9;
    let n = o.workload.requests.len();
    assert_eq!(o.metrics.completed as usize, n);
    println!(
        "| 64 replicas ({router}), Mooncake-format trace (sample tiled), 1,000,000 requests | {n} | {} | {simulated:.1} | {wall:.3} | {:.0} | {:.0} | {:.0} |",
        o.run.num_steps,
        simulated / wall,
        n as f64 / wall,
        peak_rss_mib().unwrap_or(f64::NAN)
    );
    eprintln!(
        "(trace generation and parsing {parse:.1} s, not counted; prefix hit rate {:.3}, mean TTFT {:.1} ms)",
        o.run.counters.prefix_cache_hits as f64 / o.run.counters.prefix_cache_queries.max(1) as f64,
        o.metrics.ttft.mean
    );
}

/// `SPEED_FLEET_DIGEST=DIR`: writes, for fleet scenarios of every router, engine and shape,
/// the report JSON and digests of every request record, the time series and the fleet
/// block into `DIR/<case>.txt`. Two builds' directories compared file by file show whether
/// a change to the fleet loop or the routers left every output byte-identical.
fn records_with_times(run: &sim::simulation::RunResult) -> String {
    let mut out = String::new();
    for r in &run.records {
        out += &format!(
            "{} {} {} {} {:?} {} {:?} {} {:?}\n",
            r.prompt_len,
            r.output_len,
            r.dispatch_ns,
            r.engine_arrival_ns,
            r.first_scheduled_ns,
            r.prefill_compute_ns,
            r.first_token_step_end_ns,
            r.completed,
            run.token_times(r)
        );
    }
    out
}

fn fleet_digest(res: &Resources, dir: &str) {
    use std::hash::{Hash, Hasher};
    std::fs::create_dir_all(dir).unwrap();
    let digest = |x: &str| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        x.hash(&mut h);
        format!("{:016x}", h.finish())
    };
    let prefix_workload = serde_json::json!({"dataset_name": "prefix_repetition", "prefix_repetition_prefix_len": 1024,
        "prefix_repetition_suffix_len": 128, "prefix_repetition_num_prefixes": 24,
        "prefix_repetition_output_len": 48, "num_prompts": 1200, "request_rate": 30, "burstiness": 0.7,
        "ignore_eos": true, "seed": 5});
    let vllm = serde_json::json!({"kind": "vllm", "version": "0.33.0", "max_num_seqs": 64, "max_num_batched_tokens": 2048,
        "kv_cache_tokens": 30000, "max_model_len": 8192});
    let sglang = serde_json::json!({"kind": "sglang", "version": "0.5.23", "max_running_requests": 64,
        "max_total_tokens": 30000, "context_length": 8192});
    let routers = [
        serde_json::json!({"policy": "round_robin"}),
        serde_json::json!({"policy": "least_outstanding"}),
        serde_json::json!({"policy": "power_of_two"}),
        serde_json::json!({"policy": "kv_usage"}),
        serde_json::json!({"policy": "cache_aware"}),
        serde_json::json!({"policy": "cache_aware", "max_tree_size": 20000, "eviction_interval_secs": 5,
                           "balance_abs_threshold": 4}),
        serde_json::json!({"policy": "llmd_inference_scheduler"}),
        serde_json::json!({"policy": "dynamo_kv", "use_kv_events": false, "router_temperature": 0.5}),
        serde_json::json!({"policy": "production_stack", "routing_logic": "prefixaware"}),
        serde_json::json!({"policy": "production_stack", "routing_logic": "session"}),
    ];
    let mut cases: Vec<(String, Value)> = Vec::new();
    for (ek, engine, dp_flag) in [("vllm", &vllm, "data_parallel_size"), ("sglang", &sglang, "dp_size")] {
        for (ri, router) in routers.iter().enumerate() {
            let v = serde_json::json!({"version": 1, "engine": engine, "model": "qwen2.5-7b-instruct",
                "hardware": "a100-80gb", "workload": prefix_workload, "fleet": {"count": 5, "router": router}});
            cases.push((format!("{ek}-router{ri}"), v));
        }
        let mut dp = engine.clone();
        dp[dp_flag] = serde_json::json!(3);
        cases.push((
            format!("{ek}-dp"),
            serde_json::json!({"version": 1, "engine": dp, "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
                "workload": prefix_workload}),
        ));
        cases.push((
            format!("{ek}-pd"),
            serde_json::json!({"version": 1, "engine": engine, "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
                "workload": prefix_workload, "fleet": {"prefill_count": 2, "decode_count": 3,
                "router": {"policy": "cache_aware"}, "kv_transfer_bandwidth_bytes_per_s": 5e9}}),
        ));
        let mut closed = prefix_workload.clone();
        closed["max_concurrency"] = serde_json::json!(40);
        closed["request_rate"] = serde_json::json!("inf");
        closed["initial_test_request"] = serde_json::json!(true);
        closed["num_warmups"] = serde_json::json!(3);
        cases.push((
            format!("{ek}-closed"),
            serde_json::json!({"version": 1, "engine": engine, "model": "qwen2.5-7b-instruct", "hardware": "a100-80gb",
                "workload": closed, "fleet": {"count": 3, "router": {"policy": "cache_aware"}}}),
        ));
    }
    for (name, v) in cases {
        let s = config::from_value(v, "").unwrap_or_else(|e| panic!("{name}: {e}"));
        let spec = config::resolve(&s, res).unwrap_or_else(|e| panic!("{name}: {e}"));
        for ff in [true, false] {
            let o =
                sim::simulate(&spec, RunOptions { fast_forward: ff, record_timeseries: true, ..Default::default() });
            let json = serde_json::to_string_pretty(&sim::report::PointReport::of(&spec, &o)).unwrap();
            let text = format!(
                "{json}\nrecords {}\ntimeseries {}\nfleet {}\nstop {:?} steps {} end {}\n",
                // Each record with its token times (not the deliveries they index), so that
                // builds storing them differently compare.
                digest(&records_with_times(&o.run)),
                digest(&format!("{:?}", o.run.timeseries)),
                digest(&format!("{:?}", o.fleet)),
                o.run.stop,
                o.run.num_steps,
                o.run.end_ns
            );
            std::fs::write(format!("{dir}/{name}-ff{}.txt", u8::from(ff)), text).unwrap();
        }
        eprintln!("{name}");
    }
}

fn main() {
    let res = Resources { models: cards::<ModelCard>("model"), gpus: cards::<GpuCard>("gpu"), ..Default::default() };
    if let Ok(dir) = std::env::var("SPEED_FLEET_DIGEST") {
        fleet_digest(&res, &dir);
        return;
    }
    if std::env::var_os("SPEED_MILLION").is_some() {
        run_million(&res);
        return;
    }
    if std::env::var_os("SPEED_FLEET").is_some() {
        run_fleet_trace(&res);
        return;
    }
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
            "SGLang, RTX 5090, 4096/512, c=128, 10,000 requests",
            scenario("rtx5090-qwen2.5-7b-sglang.json", &["workload.max_concurrency=128", "workload.num_prompts=10000"]),
        ),
        (
            "Llama-3.1-8B on H100, random 1024 (range 0.5)/256, c=256, 10,000 requests",
            scenario(
                "long-prefill-itl-llama3.1-8b-h100-vllm.json",
                &[
                    "workload.random_input_len=1024",
                    "workload.random_range_ratio=0.5",
                    "workload.random_output_len=256",
                    "workload.request_rate=inf",
                    "workload.max_concurrency=256",
                    "workload.num_prompts=10000",
                ],
            ),
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
        "| scenario | requests | engine steps | fast-forwarded | simulated s | wall s | simulated s / wall s | requests / wall s |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    // `SPEED_ONLY=text`: only the cases whose name contains it (for profiling); `^text`: whose
    // name starts with it.
    let only = std::env::var("SPEED_ONLY").ok();
    for (name, v) in cases {
        let skip = |o: &String| o.strip_prefix('^').map_or(!name.contains(o.as_str()), |p| !name.starts_with(p));
        if only.as_ref().is_some_and(skip) {
            continue;
        }
        let s = config::from_value(v, "").unwrap();
        let spec = config::resolve(&s, &res).unwrap();
        // Best wall time of at least 3 runs and at least 0.5 s of running; `SPEED_RUNS=n`:
        // exactly n runs (one, to count a run's instructions under a profiler).
        let exact_runs: Option<u32> = std::env::var("SPEED_RUNS").ok().and_then(|s| s.parse().ok());
        let mut best = f64::INFINITY;
        let mut out = None;
        let started = Instant::now();
        let mut runs = 0;
        while match exact_runs {
            Some(n) => runs < n,
            None => runs < 3 || started.elapsed().as_secs_f64() < 0.5,
        } {
            runs += 1;
            let t = Instant::now();
            let o = sim::simulate(&spec, opts());
            best = best.min(t.elapsed().as_secs_f64());
            out = Some(o);
        }
        let o = out.unwrap();
        let simulated = o.run.end_ns as f64 / 1e9;
        let n = o.workload.requests.len();
        println!(
            "| {name} | {n} | {} | {:.1}% | {simulated:.1} | {best:.3} | {:.0} | {:.0} |",
            o.run.num_steps,
            100.0 * o.run.fast_forwarded_steps as f64 / (o.run.num_steps as f64).max(1.0),
            simulated / best,
            n as f64 / best
        );
    }
    if only.is_some() {
        return;
    }
    // The million-request run, in a child process of its own (its own peak RSS).
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .env("SPEED_MILLION", "1")
        .output()
        .expect("run the million-request child");
    print!("{}", String::from_utf8_lossy(&child.stdout));
    eprint!("{}", String::from_utf8_lossy(&child.stderr));
    // The fleet row: 64 replicas and a million trace requests, in a child of its own too.
    let child = std::process::Command::new(std::env::current_exe().unwrap())
        .env("SPEED_FLEET", "1")
        .output()
        .expect("run the fleet child");
    print!("{}", String::from_utf8_lossy(&child.stdout));
    eprint!("{}", String::from_utf8_lossy(&child.stderr));
    println!("\n(the last rows' last column: peak RSS in MiB, VmHWM)");
}
