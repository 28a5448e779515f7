//! `servesim sweep`: one simulated run per concurrency, in parallel, results
//! in input order; the knee and the KV-limited concurrency.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use rayon::prelude::*;
use serde_json::{Map, Value};
use sim::simulation::{RunOptions, StopReason};
use sim::sweep::{find_knee, kv_limit_sentence, kv_limited_concurrency, KneePoint};

use crate::load;
use crate::ScenarioArgs;

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// Scenario file (JSON); the built-in default if omitted.
    pub scenario: Option<PathBuf>,
    /// Concurrencies to run (`workload.max_concurrency` per point), increasing.
    #[arg(long, value_name = "N,N,...", default_value = "1,16,64,128")]
    pub concurrency: String,
    /// Prompts per point (one value for all, or one per concurrency); default: the scenario's.
    #[arg(long, value_name = "N[,N,...]")]
    pub num_prompts: Option<String>,
    #[command(flatten)]
    pub common: ScenarioArgs,
    /// Print `{"points": [...], "knee": {...}, "kv_limited_concurrency": N}`.
    #[arg(long)]
    pub json: bool,
    /// Worker threads (default: one per core). Results do not depend on it.
    #[arg(long)]
    pub jobs: Option<usize>,
}

pub fn run(a: SweepArgs) -> Result<ExitCode, String> {
    let conc: Vec<u32> = crate::parse_list("--concurrency", &a.concurrency)?;
    if conc.is_empty() {
        return Err("--concurrency: give at least one value".into());
    }
    if conc.contains(&0) {
        return Err("--concurrency: values must be at least 1".into());
    }
    if conc.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("--concurrency: values must increase, got {}", a.concurrency));
    }
    let prompts: Option<Vec<u32>> =
        a.num_prompts.as_deref().map(|s| crate::parse_list("--num-prompts", s)).transpose()?;
    if let Some(p) = &prompts {
        if p.len() != 1 && p.len() != conc.len() {
            return Err(format!(
                "--num-prompts: give one value or {} (one per concurrency), got {}",
                conc.len(),
                p.len()
            ));
        }
    }
    let mut base = load::read_raw(a.scenario.as_deref())?;
    load::apply_overrides(&mut base, &a.common.sets, a.common.seed)?;

    // Resolve every point first: an error in any point stops the sweep before it runs.
    let mut specs = Vec::with_capacity(conc.len());
    for (i, &c) in conc.iter().enumerate() {
        let mut raw = base.clone();
        let mut sets = vec![format!("workload.max_concurrency={c}")];
        if let Some(p) = &prompts {
            sets.push(format!("workload.num_prompts={}", if p.len() == 1 { p[0] } else { p[i] }));
        }
        load::apply_overrides(&mut raw, &sets, None)?;
        specs.push(load::resolve(&raw)?.1);
    }
    let work = || specs.par_iter().map(|s| sim::simulate(s, RunOptions::default())).collect::<Vec<_>>();
    let outs = match a.jobs {
        Some(n) => rayon::ThreadPoolBuilder::new()
            .num_threads(n.max(1))
            .build()
            .map_err(|e| format!("--jobs: {e}"))?
            .install(work),
        None => work(),
    };

    let knee_pts: Vec<KneePoint> = conc
        .iter()
        .zip(&outs)
        .map(|(&c, o)| KneePoint {
            concurrency: f64::from(c),
            output_throughput: o.metrics.output_throughput,
            mean_ttft_ms: o.metrics.ttft.mean,
        })
        .collect();
    let knee = find_knee(&knee_pts);
    let limit = kv_limited_concurrency(&specs[0], &outs[0].workload);
    let sentence = kv_limit_sentence(&limit, specs[0].engine.max_running(), specs[0].engine.kind());
    let all_done = outs.iter().all(|o| o.run.stop == StopReason::Completed);

    if a.json {
        let points: Vec<Value> =
            specs.iter().zip(&outs).map(|(s, o)| Value::Object(sim::report::point_json(s, o))).collect();
        let mut j = Map::new();
        j.insert("points".into(), Value::Array(points));
        j.insert(
            "knee".into(),
            match knee {
                Some(i) => {
                    let mut k = Map::new();
                    k.insert("max_concurrency".into(), conc[i].into());
                    k.insert("index".into(), i.into());
                    k.insert("output_throughput".into(), knee_pts[i].output_throughput.into());
                    k.insert("mean_ttft_ms".into(), knee_pts[i].mean_ttft_ms.into());
                    Value::Object(k)
                }
                None => Value::Null,
            },
        );
        j.insert("kv_limited_concurrency".into(), limit.concurrency.into());
        j.insert("kv_request_footprint_tokens".into(), limit.footprint_tokens.into());
        j.insert("kv_cache_tokens".into(), limit.kv_capacity_tokens.into());
        j.insert("kv_limit_explanation".into(), sentence.clone().into());
        println!("{}", serde_json::to_string_pretty(&j).expect("serializable"));
    } else {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "{:>11} {:>8} {:>10} {:>11} {:>11} {:>11} {:>10} {:>11} {:>8} {:>8} {:>8}",
            "concurrency",
            "req/s",
            "out tok/s",
            "mean TTFT",
            "p99 TTFT",
            "mean TPOT",
            "mean ITL",
            "mean E2EL",
            "preempt",
            "hit %",
            "KV pk %"
        );
        let _ = writeln!(
            s,
            "{:>11} {:>8} {:>10} {:>11} {:>11} {:>11} {:>10} {:>11}",
            "", "", "", "(ms)", "(ms)", "(ms)", "(ms)", "(ms)"
        );
        for (i, o) in outs.iter().enumerate() {
            let m = &o.metrics;
            let c = &o.run.counters;
            let hr = if c.prefix_cache_queries > 0 {
                100.0 * c.prefix_cache_hits as f64 / c.prefix_cache_queries as f64
            } else {
                0.0
            };
            let mark = if knee == Some(i) { " <- knee" } else { "" };
            let _ = writeln!(
                s,
                "{:>11} {:>8.2} {:>10.1} {:>11.1} {:>11.1} {:>11.2} {:>10.2} {:>11.1} {:>8} {:>8.1} {:>8.1}{mark}",
                conc[i],
                m.request_throughput,
                m.output_throughput,
                m.ttft.mean,
                m.ttft.percentiles[3],
                m.tpot.mean,
                m.itl.mean,
                m.e2el.mean,
                c.num_preemptions,
                hr,
                100.0 * o.run.gauges.kv_usage_peak
            );
        }
        let _ = writeln!(s);
        match knee {
            Some(i) => {
                let _ = writeln!(
                    s,
                    "Knee: concurrency {} (past it output throughput grows < 5% while TTFT keeps rising).",
                    conc[i]
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "Knee: not reached in this sweep (throughput still grows >= 5%, or TTFT does not rise)."
                );
            }
        }
        let _ = writeln!(s, "KV-limited concurrency: {}. {}", limit.concurrency, sentence);
        for (i, o) in outs.iter().enumerate() {
            if o.run.stop != StopReason::Completed {
                let _ = writeln!(s, "WARNING: concurrency {}: {}", conc[i], o.run.stop.as_str());
            }
        }
        print!("{s}");
    }
    Ok(if all_done { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
