//! `servesim tune`: what-if tuning before touching hardware. A grid over the
//! knobs given with `--vary` (a seeded sample plus a local search when the
//! grid is large), every configuration simulated in parallel; the best one
//! that meets every SLO, the Pareto front of throughput against latency, and
//! for each rejected configuration which SLO it broke and by how much.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use rand::seq::SliceRandom;
use rayon::prelude::*;
use serde_json::{Map, Value};
use sim::simulation::RunOptions;
use sim::sweep::{SloViolation, TuneEntry, TuneInvalid, TuneRejected, TuneResult};

use crate::load::{self, RawScenario};
use crate::ScenarioArgs;

#[derive(Args, Debug)]
pub struct TuneArgs {
    /// Scenario file (JSON); the built-in default if omitted.
    pub scenario: Option<PathBuf>,
    /// A knob and its values, e.g. `--vary engine.max_num_seqs=16,32,64` (repeatable).
    #[arg(long, value_name = "PATH=V1,V2,...")]
    pub vary: Vec<String>,
    /// A service-level objective on a report key, e.g. `--slo 'p99_ttft_ms<=2000'` or `--slo 'output_throughput>=500'` (quote it: `<` and `>` are redirections in a shell).
    #[arg(long, value_name = "METRIC<=X")]
    pub slo: Vec<String>,
    /// The report key to optimise (keys ending in `_ms` are minimised, others maximised).
    #[arg(long, default_value = "output_throughput")]
    pub objective: String,
    /// The latency axis of the Pareto front.
    #[arg(long, default_value = "p99_ttft_ms")]
    pub pareto_latency: String,
    /// At most this many configurations are simulated; a larger grid is sampled and refined.
    #[arg(long, default_value_t = 256)]
    pub max_configs: usize,
    #[command(flatten)]
    pub common: ScenarioArgs,
    #[arg(long)]
    pub json: bool,
    /// Write throughput against latency, the Pareto front joined, as SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<String>,
}

#[derive(Clone, Debug)]
struct Slo {
    metric: String,
    le: bool,
    bound: f64,
    text: String,
}

fn parse_slo(s: &str) -> Result<Slo, String> {
    let (metric, le, rest) = if let Some((m, r)) = s.split_once("<=") {
        (m, true, r)
    } else if let Some((m, r)) = s.split_once(">=") {
        (m, false, r)
    } else {
        return Err(format!("--slo {s:?}: expected METRIC<=X or METRIC>=X"));
    };
    let bound: f64 = rest.trim().parse().map_err(|_| format!("--slo {s:?}: {rest:?} is not a number"))?;
    if !bound.is_finite() {
        return Err(format!("--slo {s:?}: the bound must be a finite number, got {bound}"));
    }
    if metric.trim().is_empty() {
        return Err(format!("--slo {s:?}: no metric before the comparison"));
    }
    Ok(Slo { metric: metric.trim().to_string(), le, bound, text: s.to_string() })
}

fn parse_vary(s: &str) -> Result<(String, Vec<Value>), String> {
    let (path, vals) = s.split_once('=').ok_or_else(|| format!("--vary {s:?}: expected PATH=V1,V2,..."))?;
    if vals.trim().is_empty() {
        return Err(format!("--vary {s:?}: no values"));
    }
    let mut values: Vec<Value> = Vec::new();
    for v in vals.split(',') {
        if v.trim().is_empty() {
            return Err(format!("--vary {s:?}: an empty value"));
        }
        let v = serde_json::from_str(v.trim()).unwrap_or_else(|_| Value::String(v.trim().to_string()));
        if values.contains(&v) {
            return Err(format!("--vary {s:?}: the value {v} is given twice"));
        }
        values.push(v);
    }
    let path = path.trim();
    if path.is_empty() {
        return Err(format!("--vary {s:?}: no path before '='"));
    }
    Ok((path.to_string(), values))
}

type Config = Vec<usize>;

struct Evaluated {
    config: Config,
    result: Result<Map<String, Value>, String>,
}

fn minimise(metric: &str) -> bool {
    metric.ends_with("_ms")
}

pub fn run(a: TuneArgs) -> Result<ExitCode, String> {
    if a.vary.is_empty() {
        return Err("--vary: give at least one knob to vary, e.g. --vary engine.max_num_seqs=16,32,64".into());
    }
    if a.max_configs == 0 {
        return Err("--max-configs: must be at least 1".into());
    }
    if let Some(p) = &a.plot {
        crate::plot::check_path(p)?;
    }
    let knobs: Vec<(String, Vec<Value>)> = a.vary.iter().map(|v| parse_vary(v)).collect::<Result<_, _>>()?;
    for (i, (p, _)) in knobs.iter().enumerate() {
        if knobs[..i].iter().any(|(q, _)| q == p) {
            return Err(format!("--vary {p}: the path is given twice; give its values once (--vary {p}=A,B,...)"));
        }
    }
    let slos: Vec<Slo> = a.slo.iter().map(|s| parse_slo(s)).collect::<Result<_, _>>()?;
    let mut base = load::read_raw(a.scenario.as_deref())?;
    load::apply_overrides(&mut base, &a.common.sets, a.common.seed)?;
    let mut notes = Vec::new();
    // Varying the memory fraction means deriving the pool from it.
    if knobs.iter().any(|(p, _)| p.ends_with("gpu_memory_utilization") || p.ends_with("mem_fraction_static")) {
        if let Some(e) = base.json.get_mut("engine").and_then(Value::as_object_mut) {
            for k in ["kv_cache_tokens", "num_gpu_blocks_override", "max_total_tokens"] {
                if e.remove(k).is_some() {
                    notes.push(format!("engine.{k} was dropped: with the memory fraction varied, the KV pool is derived from it and the model and GPU cards (an estimate; see README)"));
                }
            }
        }
    }
    // Check the metrics named exist, on the base scenario.
    let (_, base_spec) = load::resolve(&base)?;
    // Every path must name a scenario field: each knob at its first value must resolve
    // (a value the scenario rejects later in the grid is listed as invalid, not an error).
    for (p, v) in &knobs {
        let mut r = base.clone();
        load::apply_overrides(&mut r, &[format!("{p}={}", v[0])], None)
            .and_then(|_| load::resolve(&r))
            .map_err(|e| format!("--vary {p}: {e}"))?;
    }
    let probe = sim::report::point_json(
        &base_spec,
        &sim::simulate(
            &{
                let mut s = base_spec.clone();
                s.workload.num_prompts = 1;
                s
            },
            RunOptions::default(),
        ),
    );
    for m in slos.iter().map(|s| &s.metric).chain([&a.objective, &a.pareto_latency]) {
        if !probe.get(m).is_some_and(Value::is_number) {
            return Err(format!("{m:?} is not a numeric report key; see `servesim simulate --json` for the keys"));
        }
    }

    let sizes: Vec<usize> = knobs.iter().map(|(_, v)| v.len()).collect();
    let total: usize = sizes.iter().product();
    let all = |i: usize| -> Config {
        let mut c = vec![0; sizes.len()];
        let mut r = i;
        for k in (0..sizes.len()).rev() {
            c[k] = r % sizes[k];
            r /= sizes[k];
        }
        c
    };
    let pb = crate::plot::progress(total.min(a.max_configs) as u64, "simulating configurations");
    let evaluate = |configs: &[Config]| -> Vec<Evaluated> {
        configs
            .par_iter()
            .inspect(|_| pb.inc(1))
            .map(|c| {
                let mut raw: RawScenario = base.clone();
                let sets: Vec<String> = c.iter().zip(&knobs).map(|(&i, (p, v))| format!("{p}={}", v[i])).collect();
                let result =
                    load::apply_overrides(&mut raw, &sets, None).and_then(|_| load::resolve(&raw)).map(|(_, spec)| {
                        let out = sim::simulate(&spec, RunOptions::default());
                        sim::report::point_json(&spec, &out)
                    });
                Evaluated { config: c.clone(), result }
            })
            .collect()
    };
    let score = |m: &Map<String, Value>| -> f64 {
        let v = m[&a.objective].as_f64().unwrap_or(f64::NAN);
        if minimise(&a.objective) {
            -v
        } else {
            v
        }
    };
    let meets = |m: &Map<String, Value>| {
        slos.iter().all(|s| m[&s.metric].as_f64().is_some_and(|v| if s.le { v <= s.bound } else { v >= s.bound }))
    };

    let mut evaluated: Vec<Evaluated>;
    let searched;
    if total <= a.max_configs {
        evaluated = evaluate(&(0..total).map(all).collect::<Vec<_>>());
        searched = format!("the full grid of {total} configurations");
    } else {
        // A seeded sample, then coordinate steps from the best feasible one until nothing improves.
        let mut rng = sim::rng::stream(base_spec.workload.seed, "tune.sample");
        let mut idx: Vec<usize> = (0..total).collect();
        idx.shuffle(&mut rng);
        let first: Vec<Config> = idx.iter().take(a.max_configs / 2).map(|&i| all(i)).collect();
        evaluated = evaluate(&first);
        loop {
            let best = evaluated
                .iter()
                .filter_map(|e| e.result.as_ref().ok().filter(|m| meets(m)).map(|m| (score(m), e.config.clone())))
                .max_by(|x, y| x.0.total_cmp(&y.0));
            let Some((_, b)) = best else { break };
            let mut neighbours = Vec::new();
            for k in 0..sizes.len() {
                for d in [-1i64, 1] {
                    let v = b[k] as i64 + d;
                    if v >= 0 && (v as usize) < sizes[k] {
                        let mut c = b.clone();
                        c[k] = v as usize;
                        if !evaluated.iter().any(|e| e.config == c) {
                            neighbours.push(c);
                        }
                    }
                }
            }
            if neighbours.is_empty() || evaluated.len() + neighbours.len() > a.max_configs {
                break;
            }
            evaluated.extend(evaluate(&neighbours));
        }
        searched = format!(
            "{} of the grid's {total} configurations (a seeded sample, refined around the best)",
            evaluated.len()
        );
    }

    pb.finish_and_clear();
    let cfg_json = |c: &Config| -> Map<String, Value> {
        let mut m = Map::new();
        for (&i, (p, v)) in c.iter().zip(&knobs) {
            m.insert(p.clone(), v[i].clone());
        }
        m
    };
    let mut best: Option<(f64, &Evaluated)> = None;
    let mut rejected = Vec::new();
    let mut invalid = Vec::new();
    for e in &evaluated {
        match &e.result {
            Err(err) => invalid.push(TuneInvalid { config: cfg_json(&e.config), error: err.clone() }),
            Ok(m) => {
                let violations: Vec<SloViolation> = slos
                    .iter()
                    .filter_map(|s| {
                        let v = m[&s.metric].as_f64()?;
                        let ok = if s.le { v <= s.bound } else { v >= s.bound };
                        (!ok).then(|| SloViolation {
                            slo: s.text.clone(),
                            value: v,
                            bound: s.bound,
                            by: (v - s.bound) / s.bound.abs().max(1e-12),
                        })
                    })
                    .collect();
                if violations.is_empty() {
                    let sc = score(m);
                    if best.as_ref().is_none_or(|(b, _)| sc > *b) {
                        best = Some((sc, e));
                    }
                } else {
                    rejected.push(TuneRejected { config: cfg_json(&e.config), violations, metrics: m.clone() });
                }
            }
        }
    }
    let entry =
        |e: &Evaluated| TuneEntry { config: cfg_json(&e.config), metrics: e.result.as_ref().expect("valid").clone() };
    // Pareto front: higher throughput, lower latency, among every valid configuration.
    let valid: Vec<(&Evaluated, f64, f64)> = evaluated
        .iter()
        .filter_map(|e| {
            let m = e.result.as_ref().ok()?;
            Some((e, m["output_throughput"].as_f64()?, m[&a.pareto_latency].as_f64()?))
        })
        .collect();
    let mut pareto: Vec<&(&Evaluated, f64, f64)> = valid
        .iter()
        .filter(|(_, t, l)| !valid.iter().any(|(_, t2, l2)| (t2 >= t && l2 <= l) && (t2 > t || l2 < l)))
        .collect();
    pareto.sort_by(|x, y| x.1.total_cmp(&y.1));
    // The knee along workload.max_concurrency, when it is varied: the other knobs as in
    // the best configuration (or the first valid one). One definition: sim::sweep::find_knee.
    let knee = knobs.iter().position(|(p, _)| p == "workload.max_concurrency").and_then(|k| {
        let anchor = best.map(|(_, e)| e).or_else(|| valid.first().map(|v| v.0))?;
        let mut line: Vec<(f64, &Map<String, Value>)> = valid
            .iter()
            .filter(|(e, _, _)| e.config.iter().enumerate().all(|(j, &v)| j == k || v == anchor.config[j]))
            .filter_map(|(e, _, _)| Some((knobs[k].1[e.config[k]].as_f64()?, e.result.as_ref().ok()?)))
            .collect();
        line.sort_by(|x, y| x.0.total_cmp(&y.0));
        let pts: Vec<sim::sweep::KneePoint> = line
            .iter()
            .map(|(c, m)| sim::sweep::KneePoint {
                concurrency: *c,
                output_throughput: m["output_throughput"].as_f64().unwrap_or(0.0),
                mean_ttft_ms: m["mean_ttft_ms"].as_f64().unwrap_or(0.0),
            })
            .collect();
        sim::sweep::knee(&pts)
    });
    if let Some(path) = &a.plot {
        let pts: Vec<(f64, f64, bool, String)> = valid
            .iter()
            .map(|(e, t, l)| (*t, *l, e.result.as_ref().is_ok_and(|m| meets(m)), config_label(&cfg_json(&e.config))))
            .collect();
        let front: Vec<(f64, f64)> = pareto.iter().map(|(_, t, l)| (*t, *l)).collect();
        let lines: Vec<(String, f64, bool)> = slos
            .iter()
            .filter(|s| s.metric == a.pareto_latency || s.metric == "output_throughput")
            .map(|s| (s.text.clone(), s.bound, s.metric == a.pareto_latency))
            .collect();
        crate::plot::pareto(path, &a.pareto_latency, &pts, &front, &lines)?;
    }
    let result = TuneResult {
        best: best.map(|(_, e)| entry(e)),
        pareto: pareto.iter().map(|(e, _, _)| entry(e)).collect(),
        rejected,
        invalid,
        searched,
        objective: a.objective.clone(),
        slos: slos.iter().map(|s| s.text.clone()).collect(),
        notes,
        knee,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&result).expect("json"));
    } else {
        print!("{}", text(&result, &a.pareto_latency, &a.slo));
    }
    Ok(ExitCode::SUCCESS)
}

/// `path=value, ...` of a configuration, for plots and text.
fn config_label(c: &Map<String, Value>) -> String {
    c.iter().map(|(k, v)| format!("{}={v}", k.rsplit('.').next().unwrap_or(k))).collect::<Vec<_>>().join(", ")
}

/// The text rendering of a tune result.
fn text(r: &TuneResult, pareto_latency: &str, slo_args: &[String]) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Searched {}.", r.searched);
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    let f = |m: &Map<String, Value>, k: &str| m.get(k).and_then(Value::as_f64).unwrap_or(0.0);
    match &r.best {
        None => {
            let _ = writeln!(s, "No configuration meets every SLO ({}).", slo_args.join(", "));
        }
        Some(b) => {
            let m = &b.metrics;
            let _ = writeln!(
                s,
                "Best configuration meeting every SLO (by {}): {}",
                r.objective,
                Value::Object(b.config.clone())
            );
            let _ = writeln!(
                s,
                "  output {:.1} tok/s, mean TTFT {:.1} ms, p99 TTFT {:.1} ms, mean TPOT {:.2} ms, p99 ITL {:.2} ms",
                f(m, "output_throughput"),
                f(m, "mean_ttft_ms"),
                f(m, "p99_ttft_ms"),
                f(m, "mean_tpot_ms"),
                f(m, "p99_itl_ms")
            );
        }
    }
    if let Some(k) = &r.knee {
        let _ = writeln!(
            s,
            "Knee along workload.max_concurrency (the other knobs as above): {} ({:.1} tok/s, mean TTFT {:.1} ms).",
            k.max_concurrency, k.output_throughput, k.mean_ttft_ms
        );
    }
    let _ = writeln!(s, "\nPareto front (output throughput against {pareto_latency}):");
    for p in &r.pareto {
        let _ = writeln!(
            s,
            "  {:>10.1} tok/s  {:>12.1}  {}",
            f(&p.metrics, "output_throughput"),
            f(&p.metrics, pareto_latency),
            Value::Object(p.config.clone())
        );
    }
    if !r.rejected.is_empty() {
        let _ = writeln!(s, "\nRejected ({}):", r.rejected.len());
        for x in &r.rejected {
            let v: Vec<String> =
                x.violations.iter().map(|v| format!("{} (got {:.1}, {:+.0}%)", v.slo, v.value, 100.0 * v.by)).collect();
            let _ = writeln!(s, "  {}: breaks {}", Value::Object(x.config.clone()), v.join("; "));
        }
    }
    if !r.invalid.is_empty() {
        let _ = writeln!(s, "\nInvalid ({}: the scenario's validation rejects them):", r.invalid.len());
        for i in &r.invalid {
            let _ = writeln!(s, "  {}: {}", Value::Object(i.config.clone()), i.error);
        }
    }
    s
}
