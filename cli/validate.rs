//! `servesim validate`: every published measurement in the repository, run
//! uncalibrated, against what its source published.
//!
//! The corpus is `validation/published/*.json`, one file per published set:
//! the CSV it reads (`data/published/`), the scenario each row runs (a base
//! scenario, per engine column where the set has several, with `--set`-style
//! overrides per row), and, for a row servesim cannot run or a column it cannot
//! compare, why. The aiconfigurator silicon sample is read by filter
//! (`silicon`): every matching row becomes a run.
//!
//! A published median is compared with the simulated median, a p99 with the
//! p99, a mean with the mean; error = simulated / published − 1. Groups are
//! source set × GPU × engine. `--baseline FILE` fails (exit 1) when a
//! group's median |error| is worse than the file's by more than
//! `--tolerance` points; `--write-baseline FILE` writes one.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use rayon::prelude::*;
use serde_json::{json, Map, Value};

use crate::load;

#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// The folder of validation sets.
    #[arg(long, default_value = "validation/published")]
    pub dir: PathBuf,
    /// Only the sets whose file name contains this.
    #[arg(long)]
    pub only: Option<String>,
    /// Override a field of every run (e.g. `--set 'cost.prior={}'`: the linear roofline prior).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub sets: Vec<String>,
    /// Print JSON (rows, groups, summary, knees).
    #[arg(long)]
    pub json: bool,
    /// Fail when a group's median |error| exceeds this baseline's by more than `--tolerance` points.
    #[arg(long)]
    pub baseline: Option<PathBuf>,
    /// Points of median |error| a group may lose against the baseline.
    #[arg(long, default_value_t = 1.0)]
    pub tolerance: f64,
    /// Write the groups' median |errors| as a baseline file.
    #[arg(long, value_name = "FILE")]
    pub write_baseline: Option<PathBuf>,
}

/// CSV column → report key, and the metric family it belongs to.
const METRICS: &[(&str, &str, &str)] = &[
    ("mean_ttft_ms", "mean_ttft_ms", "ttft"),
    ("p50_ttft_ms", "median_ttft_ms", "ttft"),
    ("p99_ttft_ms", "p99_ttft_ms", "ttft"),
    ("mean_tpot_ms", "mean_tpot_ms", "tpot"),
    ("p50_tpot_ms", "median_tpot_ms", "tpot"),
    ("p99_tpot_ms", "p99_tpot_ms", "tpot"),
    ("mean_itl_ms", "mean_itl_ms", "itl"),
    ("p50_itl_ms", "median_itl_ms", "itl"),
    ("p99_itl_ms", "p99_itl_ms", "itl"),
    ("mean_e2el_ms", "mean_e2el_ms", "e2el"),
    ("p50_e2el_ms", "median_e2el_ms", "e2el"),
    ("p99_e2el_ms", "p99_e2el_ms", "e2el"),
    ("output_tok_s", "output_throughput", "throughput"),
    ("req_s", "request_throughput", "throughput"),
    ("total_tok_s", "total_token_throughput", "throughput"),
    // The silicon sample (statistic unstated: compared with the mean).
    ("silicon_ttft_ms", "mean_ttft_ms", "ttft"),
    ("silicon_tpot_ms", "mean_tpot_ms", "tpot"),
];

/// Profiled requests per client of a silicon-sample row. The rows are aiperf runs in
/// concurrency mode (aiconfigurator's gap analysis compares its estimates "with AIPerf or other
/// silicon measurements", `docs/universe/index.html`), and every aiperf harness in
/// aiconfigurator gives `--request-count` as a multiple of the concurrency after
/// `--warmup-request-count 2×C`: 10×C in `src/aiconfigurator/eval/benchmarks/genai_perf_runner.py`
/// (2025-08 to 2026-03, when the rows were measured), 20×C in
/// `generator/.../benchmark/bench_run.sh.j2` (from 2026-02), 50×C in `k8s_bench.yaml.j2`. aiperf
/// (`aiperf/timing/credit_issuing_strategy.py`, `request_rate_strategy.py`) waits for every
/// warm-up response before the profiling phase, whose first C requests then go out at once
/// (a semaphore of C, no delay between credits): so the measured phase is a closed loop of
/// 10×C requests from an idle engine, which is what the run replays (the drained warm-up
/// leaves nothing behind that the simulator keeps: random prompts share no prefix).
const AIPERF_REQUESTS_PER_CLIENT: u64 = 10;

const FAMILIES: [&str; 5] = ["ttft", "tpot", "itl", "e2el", "throughput"];

/// The rows of a published CSV as header → value maps, `#` lines skipped.
fn read_csv(text: &str) -> Vec<BTreeMap<String, String>> {
    let body: String = text.lines().filter(|l| !l.starts_with('#')).map(|l| format!("{l}\n")).collect();
    let mut it = sim::traces::csv_records(&body).into_iter();
    let Some(header) = it.next() else { return Vec::new() };
    it.filter(|r| r.len() > 1).map(|r| header.iter().cloned().zip(r).collect()).collect()
}

/// One run of the corpus.
struct Job {
    set: String,
    group: String,
    /// The CSV's engine (or backend + version) and load, as the source printed them.
    engine: String,
    load: String,
    /// The scenario (raw) and its overrides.
    scenario: Option<load::RawScenario>,
    sets: Vec<String>,
    published: Vec<(&'static str, &'static str, &'static str, f64)>,
    skip: Option<String>,
    skip_metrics: Map<String, Value>,
    knee_axis: Option<f64>,
}

fn str_of(v: &Value, k: &str) -> Option<String> {
    v.get(k).and_then(Value::as_str).map(str::to_string)
}

fn scenario_from(v: &Value, set_path: &Path, root: &Path) -> Result<load::RawScenario, String> {
    match v {
        Value::String(p) => load::read_raw(Some(&root.join(p))),
        Value::Object(_) => Ok(load::RawScenario {
            origin: format!("{} (scenario)", set_path.display()),
            base_dir: root.to_path_buf(),
            json: v.clone(),
        }),
        _ => Err(format!("{}: a scenario is a path or an object", set_path.display())),
    }
}

fn published_of(row: &BTreeMap<String, String>) -> Vec<(&'static str, &'static str, &'static str, f64)> {
    METRICS
        .iter()
        .filter_map(|&(col, key, fam)| {
            row.get(col).and_then(|v| v.trim().parse::<f64>().ok()).filter(|v| *v > 0.0).map(|v| (col, key, fam, v))
        })
        .collect()
}

fn jobs_of(path: &Path, root: &Path) -> Result<Vec<Job>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let v: Value = serde_json::from_str(&text).map_err(|e| format!("{}: not valid JSON: {e}", path.display()))?;
    let set = path.file_stem().unwrap().to_string_lossy().to_string();
    let csv_path = str_of(&v, "csv").ok_or_else(|| format!("{}: csv: missing", path.display()))?;
    let csv_text = std::fs::read_to_string(root.join(&csv_path))
        .map_err(|e| format!("{}: csv: {csv_path}: {e}", path.display()))?;
    let rows = read_csv(&csv_text);
    let gpu_label = str_of(&v, "gpu").unwrap_or_default();
    let mut jobs = Vec::new();
    if let Some(sil) = v.get("silicon") {
        // Rows by filter; each row's TP, lengths and concurrency become overrides.
        let filter = sil.get("filter").and_then(Value::as_object).cloned().unwrap_or_default();
        let base = v.get("scenario").ok_or_else(|| format!("{}: scenario: missing", path.display()))?;
        // The load is aiperf's concurrency mode as aiconfigurator's own harnesses run it (see
        // `AIPERF_REQUESTS_PER_CLIENT`); a set may give another count per client.
        let requests_per_client =
            sil.get("aiperf_requests_per_client").and_then(Value::as_u64).unwrap_or(AIPERF_REQUESTS_PER_CLIENT);
        for row in &rows {
            if !filter.iter().all(|(k, want)| row.get(k).map(String::as_str) == want.as_str()) {
                continue;
            }
            let engine = format!("{} {}", row["backend"], row["backend_version"]);
            let tp = row["tp_size"].parse::<u32>().unwrap_or(1);
            let conc = row.get("silicon_concurrency").and_then(|c| c.parse::<u32>().ok());
            let bs = row["batch_size"].parse::<u32>().ok();
            let load = format!("tp{tp} {}x{} c{}", row["isl"], row["osl"], conc.map_or("?".into(), |c| c.to_string()));
            let skip = match (conc, bs) {
                (None, _) => Some("the row gives no client concurrency".to_string()),
                (Some(c), Some(b)) if b < c => Some(format!(
                    "batch_size {b} < concurrency {c}: the load was spread over replicas the row does not count"
                )),
                _ => None,
            };
            let c = conc.unwrap_or(1);
            let gpu =
                base["hardware"].as_str().map(str::to_string).unwrap_or_else(|| base["hardware"]["gpu"].to_string());
            // The scenario's engine kind, read at the boundary (raw JSON) into the one vocabulary.
            let kind = base["engine"]["kind"]
                .as_str()
                .and_then(sim::config::EngineKind::parse)
                .unwrap_or(sim::config::EngineKind::Vllm);
            let tp_flag = match kind {
                sim::config::EngineKind::Sglang => "tp_size",
                sim::config::EngineKind::Vllm => "tensor_parallel_size",
            };
            let sets = vec![
                format!("engine.{tp_flag}={tp}"),
                format!("hardware={{\"gpu\": {gpu:?}, \"count\": {tp}}}"),
                format!("workload.random_input_len={}", row["isl"]),
                format!("workload.random_output_len={}", row["osl"]),
                format!("workload.max_concurrency={c}"),
                format!("workload.num_prompts={}", u64::from(c) * requests_per_client),
            ];
            jobs.push(Job {
                set: set.clone(),
                group: format!("{set} | {tp}x {gpu_label} | {engine}"),
                engine,
                load,
                scenario: Some(scenario_from(base, path, root)?),
                sets,
                published: published_of(row),
                skip,
                skip_metrics: Map::new(),
                knee_axis: None,
            });
        }
        return Ok(jobs);
    }
    let specs = v.get("rows").and_then(Value::as_array).ok_or_else(|| format!("{}: rows: missing", path.display()))?;
    for (i, spec) in specs.iter().enumerate() {
        let engine = str_of(spec, "engine").ok_or_else(|| format!("{}: rows[{i}].engine: missing", path.display()))?;
        let load = str_of(spec, "load").ok_or_else(|| format!("{}: rows[{i}].load: missing", path.display()))?;
        let extra = spec.get("match").and_then(Value::as_object).cloned().unwrap_or_default();
        let row = rows
            .iter()
            .find(|r| {
                r.get("engine") == Some(&engine)
                    && r.get("concurrency_or_rate").map(|s| s.trim()) == Some(load.as_str())
                    && extra.iter().all(|(k, want)| r.get(k).map(String::as_str) == want.as_str())
            })
            .ok_or_else(|| {
                format!("{}: rows[{i}]: no CSV row with engine {engine:?} and load {load:?}", path.display())
            })?;
        let scenario = match spec
            .get("scenario")
            .or_else(|| v.get("scenarios").and_then(|s| s.get(&engine)))
            .or_else(|| v.get("scenario"))
        {
            Some(s) => Some(scenario_from(s, path, root)?),
            None => None,
        };
        let sets: Vec<String> = spec
            .get("set")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
            .unwrap_or_default();
        let skip = str_of(spec, "skip").or_else(|| scenario.is_none().then(|| "no scenario".to_string()));
        let gpu = str_of(spec, "gpu").unwrap_or_else(|| gpu_label.clone());
        let label = match extra.get("input_len").and_then(Value::as_str) {
            Some(i) => format!("{load} ({i})"),
            None => load.clone(),
        };
        let knee = spec.get("knee").and_then(Value::as_bool).unwrap_or(true);
        jobs.push(Job {
            set: set.clone(),
            group: format!("{set} | {gpu} | {engine}"),
            engine,
            knee_axis: load.parse::<f64>().ok().filter(|_| knee),
            load: label,
            scenario,
            sets,
            published: published_of(row),
            skip,
            skip_metrics: spec.get("skip_metrics").and_then(Value::as_object).cloned().unwrap_or_default(),
        });
    }
    Ok(jobs)
}

fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let x = (s.len() - 1) as f64 * q;
    let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
    s[lo] + (x - lo as f64) * (s[hi] - s[lo])
}

fn pct(x: f64) -> Value {
    if x.is_finite() {
        json!((x * 1000.0).round() / 10.0)
    } else {
        Value::Null
    }
}

pub fn run(a: ValidateArgs) -> Result<ExitCode, String> {
    let root = std::env::current_dir().map_err(|e| e.to_string())?;
    let dir = if a.dir.is_absolute() { a.dir.clone() } else { root.join(&a.dir) };
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter(|p| a.only.as_ref().is_none_or(|o| p.file_name().unwrap().to_string_lossy().contains(o.as_str())))
        .collect();
    files.sort();
    let mut jobs = Vec::new();
    for f in &files {
        jobs.extend(jobs_of(f, &root)?);
    }
    // Run every row (in parallel; results in corpus order).
    let results: Vec<Result<Map<String, Value>, String>> = jobs
        .par_iter()
        .map(|j| {
            if let Some(why) = &j.skip {
                return Err(why.clone());
            }
            let mut raw = j.scenario.clone().expect("a scenario");
            load::apply_overrides(&mut raw, &j.sets, None)?;
            load::apply_overrides(&mut raw, &a.sets, None)?;
            let (_, spec) = load::resolve(&raw)?;
            let out = sim::simulate(&spec, sim::simulation::RunOptions::default());
            if out.run.stop != sim::simulation::StopReason::Completed {
                return Err(format!("the run did not complete: {}", out.run.stop.as_str()));
            }
            match serde_json::to_value(sim::report::PointReport::of(&spec, &out)) {
                Ok(Value::Object(m)) => Ok(m),
                _ => unreachable!("a report serializes to an object"),
            }
        })
        .collect();

    let mut rows_json = Vec::new();
    let mut group_errs: BTreeMap<String, BTreeMap<&str, Vec<f64>>> = BTreeMap::new();
    let mut all: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut sources: BTreeMap<String, String> = BTreeMap::new();
    let mut knee_series: BTreeMap<String, Vec<(f64, f64, f64, f64, f64)>> = BTreeMap::new();
    let mut text = String::new();
    use std::fmt::Write as _;
    let _ = writeln!(
        text,
        "{:<64} {:<16} {:<14} {:>10} {:>10} {:>8}",
        "group", "load", "metric", "published", "servesim", "error"
    );
    for (j, r) in jobs.iter().zip(&results) {
        let mut metrics = Vec::new();
        match r {
            Err(why) => {
                let _ = writeln!(text, "{:<64} {:<16} cannot run: {why}", j.group, j.load);
                rows_json
                    .push(json!({"set": j.set, "group": j.group, "engine": j.engine, "load": j.load, "skipped": why}));
                continue;
            }
            Ok(p) => {
                sources.entry(j.group.clone()).or_insert_with(|| p["cost_source"].as_str().unwrap_or("").to_string());
                for &(col, key, fam, published) in &j.published {
                    if let Some(why) = j.skip_metrics.get(col) {
                        let _ = writeln!(
                            text,
                            "{:<64} {:<16} {:<14} {:>10.2} {:>10} not compared: {}",
                            j.group,
                            j.load,
                            col,
                            published,
                            "",
                            why.as_str().unwrap_or("")
                        );
                        metrics.push(json!({"column": col, "published": published, "not_compared": why}));
                        continue;
                    }
                    let sim_v = p.get(key).and_then(Value::as_f64).unwrap_or(f64::NAN);
                    let err = sim_v / published - 1.0;
                    let _ = writeln!(
                        text,
                        "{:<64} {:<16} {:<14} {:>10.2} {:>10.2} {:>+7.1}%",
                        j.group,
                        j.load,
                        col,
                        published,
                        sim_v,
                        100.0 * err
                    );
                    if err.is_finite() {
                        group_errs.entry(j.group.clone()).or_default().entry(fam).or_default().push(err.abs());
                        all.entry(fam).or_default().push(err.abs());
                    }
                    metrics.push(json!({"column": col, "key": key, "published": published, "simulated": sim_v, "error_pct": pct(err)}));
                }
                // Knee series: load, published throughput and TTFT, simulated ones.
                if let Some(x) = j.knee_axis {
                    let thr = j.published.iter().find(|m| m.0 == "output_tok_s").map(|m| m.3);
                    let ttft = j.published.iter().find(|m| m.2 == "ttft").map(|m| (m.1, m.3));
                    if let (Some(t), Some((tk, tv))) = (thr, ttft) {
                        let st = p.get("output_throughput").and_then(Value::as_f64).unwrap_or(0.0);
                        let sv = p.get(tk).and_then(Value::as_f64).unwrap_or(0.0);
                        knee_series.entry(j.group.clone()).or_default().push((x, t, tv, st, sv));
                    }
                }
                rows_json.push(json!({"set": j.set, "group": j.group, "engine": j.engine, "load": j.load,
                    "cost_source": p["cost_source"], "metrics": metrics}));
            }
        }
    }

    // Groups.
    let mut groups_json = Vec::new();
    let _ = writeln!(text, "\nPer group: median / p90 |error| per metric (n)");
    for (g, fams) in &group_errs {
        let every: Vec<f64> = fams.values().flatten().copied().collect();
        let mut gj = Map::new();
        gj.insert("group".into(), g.clone().into());
        gj.insert("cost_source".into(), sources.get(g).cloned().unwrap_or_default().into());
        gj.insert("median_abs_error_pct".into(), pct(quantile(&every, 0.5)));
        gj.insert("n".into(), every.len().into());
        let mut line = format!("{g:<64} all {:>5.1}% ({})", 100.0 * quantile(&every, 0.5), every.len());
        for f in FAMILIES {
            if let Some(v) = fams.get(f) {
                gj.insert(f.into(), json!({"median_abs_error_pct": pct(quantile(v, 0.5)), "p90_abs_error_pct": pct(quantile(v, 0.9)), "n": v.len()}));
                line.push_str(&format!(
                    " | {f} {:.1}/{:.1}% ({})",
                    100.0 * quantile(v, 0.5),
                    100.0 * quantile(v, 0.9),
                    v.len()
                ));
            }
        }
        let _ = writeln!(text, "{line}");
        groups_json.push(Value::Object(gj));
    }
    let mut summary = Map::new();
    let _ = writeln!(text, "\nCorpus: median / p90 |error| per metric");
    for f in FAMILIES {
        if let Some(v) = all.get(f) {
            summary.insert(f.into(), json!({"median_abs_error_pct": pct(quantile(v, 0.5)), "p90_abs_error_pct": pct(quantile(v, 0.9)), "n": v.len()}));
            let _ = writeln!(
                text,
                "{f:<12} {:>6.1}% {:>6.1}%  ({} values)",
                100.0 * quantile(v, 0.5),
                100.0 * quantile(v, 0.9),
                v.len()
            );
        }
    }
    // Knees.
    let mut knees = Vec::new();
    for (g, pts) in &knee_series {
        if pts.len() < 3 {
            continue;
        }
        let mut pts = pts.clone();
        pts.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
        let kp = |thr: fn(&(f64, f64, f64, f64, f64)) -> (f64, f64)| {
            let v: Vec<sim::sweep::KneePoint> = pts
                .iter()
                .map(|p| {
                    let (t, ttft) = thr(p);
                    sim::sweep::KneePoint { concurrency: p.0, output_throughput: t, mean_ttft_ms: ttft }
                })
                .collect();
            sim::sweep::find_knee(&v).map(|i| pts[i].0)
        };
        let published = kp(|p| (p.1, p.2));
        let simulated = kp(|p| (p.3, p.4));
        let show = |k: Option<f64>| k.map_or_else(|| "not reached".to_string(), |c| format!("{c}"));
        let _ = writeln!(text, "knee {g}: published {}, servesim {}", show(published), show(simulated));
        knees.push(json!({"group": g, "published": published, "simulated": simulated}));
    }

    // Baseline.
    let mut failed = Vec::new();
    if let Some(b) = &a.baseline {
        let t = std::fs::read_to_string(b).map_err(|e| format!("{}: {e}", b.display()))?;
        let base: Value = serde_json::from_str(&t).map_err(|e| format!("{}: not valid JSON: {e}", b.display()))?;
        for g in &groups_json {
            let name = g["group"].as_str().unwrap();
            let now = g["median_abs_error_pct"].as_f64().unwrap_or(f64::INFINITY);
            if let Some(was) = base["groups"][name]["median_abs_error_pct"].as_f64() {
                if now > was + a.tolerance {
                    failed.push(format!("{name}: median |error| {now:.1}% against the baseline's {was:.1}%"));
                }
            }
        }
        if let Some(m) = base["groups"].as_object() {
            for k in m.keys() {
                if !groups_json.iter().any(|g| g["group"] == k.as_str()) {
                    failed.push(format!("{k}: in the baseline but no longer measured"));
                }
            }
        }
    }
    if let Some(w) = &a.write_baseline {
        let groups: Map<String, Value> = groups_json
            .iter()
            .map(|g| {
                (g["group"].as_str().unwrap().to_string(), json!({"median_abs_error_pct": g["median_abs_error_pct"], "n": g["n"], "cost_source": g["cost_source"]}))
            })
            .collect();
        let b = json!({"about": "servesim validate: per group (published set | GPU | engine), the median |error| over every compared metric, in %. CI fails when a group gets worse by more than a point (tests/validate.rs).", "groups": groups});
        std::fs::write(w, serde_json::to_string_pretty(&b).unwrap() + "\n")
            .map_err(|e| format!("{}: {e}", w.display()))?;
    }
    if a.json {
        let out = json!({"rows": rows_json, "groups": groups_json, "summary": summary, "knees": knees, "baseline_failures": failed});
        println!("{}", serde_json::to_string_pretty(&out).unwrap());
    } else {
        print!("{text}");
        for f in &failed {
            println!("WORSE THAN BASELINE: {f}");
        }
    }
    Ok(if failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
