//! `servesim sweep`: one simulated run per concurrency, in parallel, results
//! in input order; the knee and the KV-limited concurrency. With several
//! scenarios (or `--set engine.kind=vllm,sglang`), the engines side by side
//! with the flag alignment table.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use rayon::prelude::*;
use serde_json::{Map, Value};
use sim::config::{EngineKind, SimSpec};
use sim::report::BenchReport;
use sim::simulation::{RunOptions, StopReason};
use sim::sweep::{kv_limited_concurrency, sweep_series, SweepSeries};
use sim::SimOutput;

use crate::load::{self, RawScenario};
use crate::{align, ScenarioArgs};

#[derive(Args, Debug)]
pub struct SweepArgs {
    /// Scenario files (JSON); the built-in default if none. Several run side by side.
    pub scenarios: Vec<PathBuf>,
    /// Concurrencies to run (`workload.max_concurrency` per point), increasing.
    #[arg(long, value_name = "N,N,...", default_value = "1,16,64,128")]
    pub concurrency: String,
    /// Prompts per point (one value for all, or one per concurrency); default: the scenario's.
    #[arg(long, value_name = "N[,N,...]")]
    pub num_prompts: Option<String>,
    #[command(flatten)]
    pub common: ScenarioArgs,
    /// Print `{"points": [...], "knee": {...}, "kv_limited_concurrency": N}` (one scenario),
    /// or `{"scenarios": [...], "alignment": [...]}` (several).
    #[arg(long)]
    pub json: bool,
    /// Worker threads (default: one per core). Results do not depend on it.
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Write throughput and TTFT against concurrency, knee and KV limit marked, as SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<String>,
}

/// One scenario of a sweep, resolved at every point.
struct Series {
    label: String,
    raw: RawScenario,
    specs: Vec<SimSpec>,
    notes: Vec<String>,
}

fn expand_scenarios(a: &SweepArgs) -> Result<Vec<(String, RawScenario, Vec<String>)>, String> {
    let paths: Vec<Option<&std::path::Path>> =
        if a.scenarios.is_empty() { vec![None] } else { a.scenarios.iter().map(|p| Some(p.as_path())).collect() };
    // `--set engine.kind=vllm,sglang` runs each scenario once per engine.
    let mut kinds: Option<Vec<String>> = None;
    let mut sets = Vec::new();
    for s in &a.common.sets {
        match s.strip_prefix("engine.kind=") {
            Some(k) if k.contains(',') => kinds = Some(k.split(',').map(|x| x.trim().to_string()).collect()),
            _ => sets.push(s.clone()),
        }
    }
    let mut out = Vec::new();
    for p in paths {
        let mut raw = load::read_raw(p)?;
        match &kinds {
            None => {
                load::apply_overrides(&mut raw, &sets, a.common.seed)?;
                let label = raw.origin.clone();
                out.push((label, raw, vec![]));
            }
            Some(ks) => {
                // The overrides speak the scenario's own engine's flags: apply them, then translate.
                load::apply_overrides(&mut raw, &sets, a.common.seed)?;
                for k in ks {
                    if EngineKind::parse(k).is_none() {
                        return Err(format!("--set engine.kind: unknown engine {k:?}; expected vllm or sglang"));
                    }
                    let mut r = raw.clone();
                    let engine = r.json.get("engine").and_then(Value::as_object).cloned().unwrap_or_default();
                    let (translated, notes) =
                        align::translate_engine(&engine, k).map_err(|e| format!("{}: {e}", r.origin))?;
                    r.json["engine"] = Value::Object(translated);
                    let label = format!("{} [{k}]", raw.origin);
                    r.origin = label.clone();
                    out.push((label, r, notes));
                }
            }
        }
    }
    Ok(out)
}

pub fn run(a: SweepArgs) -> Result<ExitCode, String> {
    if a.jobs == Some(0) {
        return Err("--jobs: must be at least 1 (or leave it out: one thread per core)".into());
    }
    if let Some(p) = &a.plot {
        crate::plot::check_path(p)?;
    }
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
    if let Some(&c) = conc.iter().find(|&&c| c > sim::config::MAX_CONCURRENCY) {
        return Err(format!("--concurrency: {c} is above the limit of {}", sim::config::MAX_CONCURRENCY));
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

    // Resolve every point first: an error anywhere stops the sweep before it runs.
    let mut series = Vec::new();
    for (label, raw, notes) in expand_scenarios(&a)? {
        let mut specs = Vec::with_capacity(conc.len());
        for (i, &c) in conc.iter().enumerate() {
            let mut r = raw.clone();
            let mut sets = vec![format!("workload.max_concurrency={c}")];
            if let Some(p) = &prompts {
                sets.push(format!("workload.num_prompts={}", if p.len() == 1 { p[0] } else { p[i] }));
            }
            load::apply_overrides(&mut r, &sets, None)?;
            specs.push(load::resolve(&r)?.1);
        }
        series.push(Series { label, raw, specs, notes });
    }
    let all: Vec<&SimSpec> = series.iter().flat_map(|s| s.specs.iter()).collect();
    let pb = crate::plot::progress(all.len() as u64, "simulating");
    let work = || {
        all.par_iter()
            .map(|s| {
                let o = sim::simulate(s, RunOptions::default());
                pb.inc(1);
                o
            })
            .collect::<Vec<_>>()
    };
    let outs = match a.jobs {
        Some(n) => {
            rayon::ThreadPoolBuilder::new().num_threads(n).build().map_err(|e| format!("--jobs: {e}"))?.install(work)
        }
        None => work(),
    };
    let mut outs = outs.into_iter();
    let results: Vec<(Series, Vec<SimOutput>)> = series
        .into_iter()
        .map(|s| {
            let o: Vec<SimOutput> = outs.by_ref().take(s.specs.len()).collect();
            (s, o)
        })
        .collect();
    pb.finish_and_clear();
    let all_done = results.iter().all(|(_, o)| o.iter().all(|x| x.run.stop == StopReason::Completed));
    if a.json {
        // The text report prints them; with --json they are in the output and on stderr.
        for (s, o) in &results {
            for w in sim::sweep::sweep_warnings(&conc, o) {
                eprintln!("warning: {}: {w}", s.label);
            }
        }
    }
    if let Some(path) = &a.plot {
        let lines: Vec<crate::plot::Series> = results
            .iter()
            .map(|(s, o)| crate::plot::Series {
                label: format!("{} {}", s.specs[0].engine.kind(), s.specs[0].engine.version()),
                points: conc
                    .iter()
                    .zip(o)
                    .map(|(&c, x)| (f64::from(c), x.metrics.output_throughput, x.metrics.ttft.mean, x.metrics.ttft.p99))
                    .collect(),
                dashed: false,
            })
            .collect();
        let (s0, o0) = &results[0];
        let limit = kv_limited_concurrency(&s0.specs[0], &o0[0].workload);
        let mut marks = vec![(limit.concurrency as f64, format!("KV-limited concurrency {}", limit.concurrency))];
        if let Some(k) = sim::sweep::knee(&sim::sweep::knee_points(&conc, o0)) {
            marks.push((k.max_concurrency as f64, format!("knee {}", k.max_concurrency)));
        }
        crate::plot::sweep(path, &s0.label, &lines, &marks)?;
    }

    // Each series' typed result: the JSON, and what the text renders.
    let mut series: Vec<SweepSeries> = results.iter().map(|(s, o)| series_result(s, o, &conc)).collect();
    if results.len() == 1 {
        if a.json {
            println!("{}", serde_json::to_string_pretty(&series[0]).expect("serializable"));
        } else {
            print!("{}", series_text(&series[0], &conc));
        }
    } else {
        let raws: Vec<Map<String, Value>> = results
            .iter()
            .map(|(s, _)| s.raw.json.get("engine").and_then(Value::as_object).cloned().unwrap_or_default())
            .collect();
        let pairs: Vec<(&SimSpec, &Map<String, Value>)> =
            results.iter().zip(&raws).map(|((s, _), r)| (&s.specs[0], r)).collect();
        let rows = align::table(&pairs);
        let workloads: Vec<&Value> =
            results.iter().map(|(s, _)| s.raw.json.get("workload").unwrap_or(&Value::Null)).collect();
        let workloads_differ = workloads.windows(2).any(|w| w[0] != w[1]);
        let moved: Vec<&str> = rows.iter().filter(|r| r.differs).map(|r| r.knob.name).collect();
        if a.json {
            let j = align::SideBySide::new(std::mem::take(&mut series), &rows, workloads_differ);
            println!("{}", serde_json::to_string_pretty(&j).expect("serializable"));
        } else {
            let mut s = String::new();
            for ((se, _), r) in results.iter().zip(&series) {
                let sp = &se.specs[0];
                let _ = writeln!(s, "== {} ({} {}) ==", se.label, sp.engine.kind(), sp.engine.version());
                s.push_str(&series_text(r, &conc));
                for n in &se.notes {
                    let _ = writeln!(s, "note: {n}");
                }
                let _ = writeln!(s);
            }
            s.push_str(&side_by_side(&series, &conc));
            let _ = writeln!(s);
            s.push_str(&alignment_text(&results, &rows));
            if workloads_differ {
                let _ =
                    writeln!(s, "WARNING: the scenarios' workloads differ: the comparison is not of engines alone.");
            }
            if moved.len() > 1 {
                let _ = writeln!(
                    s,
                    "WARNING: this comparison moves {} knobs at once ({}): a difference in the results cannot be put down to any one of them. Align them with --set to compare one dimension at a time.",
                    moved.len(),
                    moved.join(", ")
                );
            }
            print!("{s}");
        }
    }
    Ok(if all_done { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

/// The typed result of one series (`sim::sweep::SweepSeries`).
fn series_result(s: &Series, outs: &[SimOutput], conc: &[u32]) -> SweepSeries {
    sweep_series(&s.label, conc, &s.specs, outs, s.notes.clone())
}

/// The text of one series: a line per point of its report, the knee, the KV limit.
fn series_text(r: &SweepSeries, conc: &[u32]) -> String {
    let knee = r.knee.as_ref().map(|k| k.index);
    let preempt = EngineKind::parse(&r.engine).map_or("preempt", EngineKind::preempt_verb);
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:>11} {:>8} {:>10} {:>11} {:>11} {:>11} {:>10} {:>11} {:>8} {:>8} {:>8}",
        "concurrency",
        "req/s",
        "out tok/s",
        "mean TTFT",
        "p99 TTFT",
        "mean TPOT",
        "mean ITL",
        "mean E2EL",
        preempt,
        "hit %",
        "KV pk %"
    );
    let _ = writeln!(
        t,
        "{:>11} {:>8} {:>10} {:>11} {:>11} {:>11} {:>10} {:>11}",
        "", "", "", "(ms)", "(ms)", "(ms)", "(ms)", "(ms)"
    );
    for (i, p) in r.points.iter().enumerate() {
        let m = &p.bench;
        let hr = if m.prefix_cache_queries > 0 {
            100.0 * m.prefix_cache_hits as f64 / m.prefix_cache_queries as f64
        } else {
            0.0
        };
        let mark = if knee == Some(i) { " <- knee" } else { "" };
        let _ = writeln!(
            t,
            "{:>11} {:>8.2} {:>10.1} {:>11.1} {:>11.1} {:>11.2} {:>10.2} {:>11.1} {:>8} {:>8.1} {:>8.1}{mark}",
            conc[i],
            m.request_throughput,
            m.output_throughput,
            m.ttft.mean,
            m.ttft.p99,
            m.tpot.mean,
            m.itl.mean,
            m.e2el.mean,
            m.num_preemptions,
            hr,
            100.0 * m.kv_cache_usage_peak
        );
    }
    let _ = writeln!(t);
    match knee {
        Some(i) => {
            let _ = writeln!(
                t,
                "Knee: concurrency {} (past it, added concurrency no longer comes back as throughput while TTFT keeps rising).",
                conc[i]
            );
        }
        None => {
            let _ = writeln!(
                t,
                "Knee: not reached in this sweep (throughput still grows with concurrency, or TTFT does not rise)."
            );
        }
    }
    let _ = writeln!(t, "KV-limited concurrency: {}. {}", r.kv_limited_concurrency, r.kv_limit_explanation);
    for w in &r.warnings {
        let _ = writeln!(t, "WARNING: {w}");
    }
    for (i, p) in r.points.iter().enumerate() {
        if p.bench.stop_reason != StopReason::Completed.as_str() {
            let _ = writeln!(t, "WARNING: concurrency {}: {}", conc[i], p.bench.stop_reason);
        }
    }
    t
}

/// The series' headline metrics, point by point, side by side.
fn side_by_side(results: &[SweepSeries], conc: &[u32]) -> String {
    let mut t = String::new();
    let names: Vec<String> = results
        .iter()
        .enumerate()
        .map(|(i, s)| format!("[{}] {} {}", i + 1, s.engine, s.points[0].bench.engine_version))
        .collect();
    let _ = writeln!(t, "Side by side: {}", names.join("  "));
    let metrics: [(&str, fn(&BenchReport) -> f64); 6] = [
        ("out tok/s", |r| r.output_throughput),
        ("mean TTFT ms", |r| r.ttft.mean),
        ("p99 TTFT ms", |r| r.ttft.p99),
        ("mean TPOT ms", |r| r.tpot.mean),
        ("p99 ITL ms", |r| r.itl.p99),
        ("max ITL ms", |r| r.itl.max),
    ];
    let mut head = format!("{:>11}", "concurrency");
    for (m, _) in &metrics {
        for i in 0..results.len() {
            head.push_str(&format!(" {:>14}", format!("{m} [{}]", i + 1)));
        }
    }
    let _ = writeln!(t, "{head}");
    for (k, c) in conc.iter().enumerate() {
        let mut line = format!("{c:>11}");
        for (_, f) in &metrics {
            for s in results {
                line.push_str(&format!(" {:>14.1}", f(&s.points[k].bench)));
            }
        }
        let _ = writeln!(t, "{line}");
    }
    t
}

fn alignment_text(results: &[(Series, Vec<SimOutput>)], rows: &[align::Row]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "Flag alignment (values as each side runs them; * = set in the scenario, otherwise the engine's default):"
    );
    let mut head = format!("{:<26}", "knob");
    for i in 0..results.len() {
        head.push_str(&format!(" {:<38}", format!("[{}] {}", i + 1, results[i].0.specs[0].engine.kind())));
    }
    let _ = writeln!(t, "{head} differs");
    for r in rows {
        let mut line = format!("{:<26}", r.knob.name);
        for (v, set) in &r.values {
            line.push_str(&format!(" {:<38}", format!("{v}{}", if *set { " *" } else { "" })));
        }
        line.push_str(if r.differs { " YES" } else { "" });
        let _ = writeln!(t, "{line}");
    }
    for r in rows.iter().filter(|r| r.differs && !r.knob.note.is_empty()) {
        let _ = writeln!(t, "note ({}): {}", r.knob.name, r.knob.note);
    }
    t
}
