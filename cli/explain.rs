//! `servesim explain`: why the metrics are what they are, in words and
//! numbers: the KV-limited concurrency and what binds first, the TTFT split,
//! preemptions and what they cost, where the knee is and which knob moves it,
//! and which numbers are knobs, which are results, and which lie outside the
//! engine.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use rayon::prelude::*;
use serde_json::{json, Value};
use sim::config::SimSpec;
use sim::simulation::RunOptions;
use sim::sweep::{find_knee, kv_limited_concurrency, KneePoint};

use crate::load;
use crate::ScenarioArgs;

#[derive(Args, Debug)]
pub struct ExplainArgs {
    /// Scenario file (JSON); the built-in default if omitted.
    pub scenario: Option<PathBuf>,
    /// Explain the run at this concurrency (default: the scenario's, or twice the KV-limited concurrency).
    #[arg(long)]
    pub concurrency: Option<u32>,
    #[command(flatten)]
    pub common: ScenarioArgs,
    #[arg(long)]
    pub json: bool,
}

fn pct(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    }
}

pub fn run(a: ExplainArgs) -> Result<ExitCode, String> {
    let mut raw = load::read_raw(a.scenario.as_deref())?;
    load::apply_overrides(&mut raw, &a.common.sets, a.common.seed)?;
    let (_, base) = load::resolve(&raw)?;
    let w0 = sim::workload::generate(&base.workload);
    let limit = kv_limited_concurrency(&base, &w0);
    let engine = base.engine.kind();
    let running_knob = if engine == "sglang" { "max_running_requests" } else { "max_num_seqs" };
    let memory_knob = if engine == "sglang" {
        "mem_fraction_static (or max_total_tokens)"
    } else {
        "gpu_memory_utilization (or kv_cache_tokens / num_gpu_blocks_override)"
    };
    let max_running = u64::from(base.engine.max_running());
    let (binding, binding_at) =
        if max_running < limit.concurrency { (running_knob, max_running) } else { ("kv_pool", limit.concurrency) };
    let limit_c = binding_at.max(1);
    let conc = a.concurrency.or(base.workload.max_concurrency).unwrap_or((2 * limit_c).max(2) as u32);
    if conc == 0 {
        return Err("--concurrency: must be at least 1".into());
    }

    // The run to explain, and a sweep around the limit to find the knee.
    let with_conc = |c: u32, prompts: Option<u32>| -> Result<SimSpec, String> {
        let mut r = raw.clone();
        let mut sets = vec![format!("workload.max_concurrency={c}")];
        if let Some(p) = prompts {
            sets.push(format!("workload.num_prompts={p}"));
        }
        load::apply_overrides(&mut r, &sets, None)?;
        Ok(load::resolve(&r)?.1)
    };
    // Enough requests that the explained run reaches its steady state.
    let prompts =
        if Some(conc) == base.workload.max_concurrency { None } else { Some(base.workload.num_prompts.max(4 * conc)) };
    let spec = with_conc(conc, prompts)?;
    let mut grid: Vec<u32> = [
        1,
        limit_c / 4,
        limit_c / 2,
        limit_c * 3 / 4,
        limit_c,
        limit_c * 5 / 4,
        limit_c * 3 / 2,
        limit_c * 2,
        limit_c * 3,
    ]
    .into_iter()
    .map(|c| c.max(1) as u32)
    .collect();
    grid.sort_unstable();
    grid.dedup();
    let per = (base.workload.num_prompts / base.workload.max_concurrency.unwrap_or(1).max(1)).clamp(2, 8);
    let specs: Vec<SimSpec> = grid.iter().map(|&c| with_conc(c, Some(c.max(1) * per))).collect::<Result<_, _>>()?;
    let mut outs = specs.par_iter().map(|s| sim::simulate(s, RunOptions::default())).collect::<Vec<_>>();
    let out = sim::simulate(&spec, RunOptions::default());
    let knee_pts: Vec<KneePoint> = grid
        .iter()
        .zip(&outs)
        .map(|(&c, o)| KneePoint {
            concurrency: f64::from(c),
            output_throughput: o.metrics.output_throughput,
            mean_ttft_ms: o.metrics.ttft.mean,
        })
        .collect();
    let knee = find_knee(&knee_pts).map(|i| grid[i]);
    let sweep_json: Vec<Value> = grid
        .iter()
        .zip(outs.drain(..))
        .map(|(&c, o)| json!({"max_concurrency": c, "output_throughput": o.metrics.output_throughput, "mean_ttft_ms": o.metrics.ttft.mean, "num_preemptions": o.run.counters.num_preemptions}))
        .collect();

    let m = &out.metrics;
    let b = &m.ttft_breakdown;
    let c = &out.run.counters;
    let prompt_tokens: u64 = out.workload.requests.iter().map(|r| u64::from(r.prompt_len)).sum();
    let recomputed = c.prefill_tokens_computed.saturating_sub(prompt_tokens.saturating_sub(c.prefix_cache_hits));
    let step_us = spec.cost.prefill_token_us;
    let recompute_s = recomputed as f64 * step_us / 1e6;

    let mut why = Vec::new();
    why.push(format!(
        "The KV pool holds {} tokens; a request of this workload needs {} (mean prompt + output, {:.0} tokens, in whole {}s of {}), so the pool holds {} requests at once: the KV-limited concurrency.",
        limit.kv_capacity_tokens, limit.footprint_tokens, limit.mean_request_tokens, if engine == "sglang" { "page" } else { "block" }, base.engine.kv_granularity(), limit.concurrency
    ));
    if binding == "kv_pool" {
        why.push(format!("{running_knob} = {max_running} is above that, so the KV pool binds first: past {} concurrent requests, new ones wait for KV{}.", limit.concurrency, if engine == "sglang" { " (SGLang reserves KV for their whole output at admission)" } else { ", and running ones are preempted when they outgrow it" }));
    } else {
        why.push(format!("{running_knob} = {max_running} binds before the KV pool does: past {max_running} concurrent requests, new ones queue in the engine."));
    }
    why.push(format!(
        "At concurrency {conc}, mean TTFT is {:.1} ms: {:.1} ms ({:.0}%) queue wait before the first step, {:.1} ms ({:.0}%) of prefill steps, {:.1} ms ({:.0}%) of interleaving (waiting between chunks, and recompute after preemption), {:.1} ms ({:.0}%) outside the engine (HTTP, tokenisation, streaming).",
        m.ttft.mean,
        b.queue_wait_ms, pct(b.queue_wait_ms, m.ttft.mean),
        b.prefill_ms, pct(b.prefill_ms, m.ttft.mean),
        b.interleave_ms, pct(b.interleave_ms, m.ttft.mean),
        b.overhead_ms, pct(b.overhead_ms, m.ttft.mean)
    ));
    if c.num_preemptions > 0 {
        why.push(format!(
            "{} {} recomputed {} prompt and output tokens, about {:.1} s of prefill compute.",
            c.num_preemptions,
            if engine == "sglang" { "retractions" } else { "preemptions" },
            recomputed,
            recompute_s
        ));
    } else {
        why.push(format!(
            "No request was {} at this concurrency.",
            if engine == "sglang" { "retracted" } else { "preempted" }
        ));
    }
    match knee {
        Some(k) => why.push(format!(
            "The throughput knee is at concurrency {k}: past it output throughput grows less than 5% while TTFT keeps rising{}.",
            if u64::from(k) <= binding_at * 2 && u64::from(k) * 2 >= binding_at { ", close to the limit above" } else { "" }
        )),
        None => why.push(format!("No knee up to concurrency {}: throughput still grows.", grid.last().copied().unwrap_or(1))),
    }
    let knob = if binding == "kv_pool" {
        format!("The knee moves with the KV pool: raise {memory_knob}, serve a smaller or quantized model, or shorten requests; raising {running_knob} does not help while the pool binds.")
    } else {
        format!("The knee moves with {running_knob}: raise it (the pool has room for {} requests); past that, the KV pool binds.", limit.concurrency)
    };
    why.push(knob.clone());

    let kinds = json!({
        "knobs": [running_knob, if engine == "sglang" { "chunked_prefill_size" } else { "max_num_batched_tokens" }, memory_knob, if engine == "sglang" { "page_size" } else { "block_size" }, if engine == "sglang" { "disable_radix_cache" } else { "enable_prefix_caching" }, if engine == "sglang" { "schedule_policy" } else { "policy" }, "max_concurrency / request_rate (the load)"],
        "results": ["TTFT", "TPOT", "ITL", "E2EL", "throughput", "preemptions / retractions", "prefix cache hit rate", "KV cache usage", "running / waiting requests"],
        "outside_the_engine": {
            "GPU utilisation, SM occupancy, power": "measure with nvidia-smi dmon, DCGM (dcgm-exporter) or Nsight Systems; servesim models time, not hardware counters",
            "network and client time": "measured by the client (servesim bench reports its own CPU time)"
        }
    });
    if a.json {
        let j = json!({
            "scenario": raw.origin,
            "engine": engine,
            "max_concurrency": conc,
            "kv_cache_tokens": limit.kv_capacity_tokens,
            "kv_request_footprint_tokens": limit.footprint_tokens,
            "kv_limited_concurrency": limit.concurrency,
            "max_running": max_running,
            "binding_limit": binding,
            "ttft_breakdown": {
                "mean_ttft_ms": m.ttft.mean,
                "mean_queue_wait_ms": b.queue_wait_ms,
                "mean_prefill_ms": b.prefill_ms,
                "mean_interleave_ms": b.interleave_ms,
                "mean_overhead_ms": b.overhead_ms,
            },
            "num_preemptions": c.num_preemptions,
            "recomputed_tokens": recomputed,
            "recompute_seconds": recompute_s,
            "knee": {"max_concurrency": knee, "sweep": sweep_json},
            "knob": knob,
            "metric_kinds": kinds,
            "explanation": why,
            "point": sim::report::point_json(&spec, &out),
        });
        println!("{}", serde_json::to_string_pretty(&j).expect("json"));
    } else {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Why the metrics are what they are ({} {}, concurrency {conc}):",
            engine,
            base.engine.version()
        );
        for (i, w) in why.iter().enumerate() {
            let _ = writeln!(s, "{}. {w}", i + 1);
        }
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "Knobs (you set them): {}",
            kinds["knobs"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
                .unwrap_or_default()
        );
        let _ = writeln!(
            s,
            "Results (the engine produces them): {}",
            kinds["results"]
                .as_array()
                .map(|a| a.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
                .unwrap_or_default()
        );
        let _ = writeln!(s, "Outside the engine: GPU utilisation, SM occupancy and power are not modelled; measure them with nvidia-smi dmon, DCGM or Nsight Systems.");
        print!("{s}");
    }
    Ok(ExitCode::SUCCESS)
}
