//! `servesim validate`: every published measurement in the repository, run
//! uncalibrated, against what its source published.
//!
//! The corpus is `validation/published/*.json`, one file per published set:
//! the CSV it reads (`data/published/`), the scenario each row runs (a base
//! scenario, per engine column where the set has several, with `--set`-style
//! overrides per row), and, for a row servesim cannot run or a column it cannot
//! compare, why. The aiconfigurator silicon sample is read by filter
//! (`silicon`: `filter` holds column values, `columns_equal` pairs of columns a row must hold
//! equal values in): every matching row becomes a run.
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
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sim::report::{Metric, Metrics, PointReport};

/// The keys a validation set's row may hold (`prior_note` is a note for readers).
const ROW_KEYS: &[&str] = &["engine", "load", "match", "scenario", "set", "knee", "skip", "skip_metrics", "prior_note"];

use crate::load;

#[derive(Args, Debug)]
pub struct ValidateArgs {
    /// The folder of validation sets (the paths they give are resolved against the repository
    /// above it: the nearest folder holding data/published, else the current one).
    #[arg(long, default_value = "validation/published")]
    pub dir: PathBuf,
    /// Only the sets whose file name contains this.
    #[arg(long)]
    pub only: Option<String>,
    /// Override a field of every run (e.g. `--set 'cost.prior={}'`: the linear roofline prior);
    /// a field that a row sets itself (its load, its prompt count) is refused.
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

/// A family of metrics: the errors of a group and of the corpus are summarised per family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Family {
    Ttft,
    Tpot,
    Itl,
    E2el,
    Throughput,
}

impl Family {
    /// In report order.
    const ALL: [Family; 5] = [Family::Ttft, Family::Tpot, Family::Itl, Family::E2el, Family::Throughput];

    fn key(self) -> &'static str {
        match self {
            Family::Ttft => "ttft",
            Family::Tpot => "tpot",
            Family::Itl => "itl",
            Family::E2el => "e2el",
            Family::Throughput => "throughput",
        }
    }
}

/// CSV column → the report's metric, and the metric family it belongs to.
const METRICS: &[(&str, Metric, Family)] = &[
    ("mean_ttft_ms", Metric::MeanTtftMs, Family::Ttft),
    ("p50_ttft_ms", Metric::MedianTtftMs, Family::Ttft),
    ("p99_ttft_ms", Metric::P99TtftMs, Family::Ttft),
    ("mean_tpot_ms", Metric::MeanTpotMs, Family::Tpot),
    ("p50_tpot_ms", Metric::MedianTpotMs, Family::Tpot),
    ("p99_tpot_ms", Metric::P99TpotMs, Family::Tpot),
    ("mean_itl_ms", Metric::MeanItlMs, Family::Itl),
    ("p50_itl_ms", Metric::MedianItlMs, Family::Itl),
    ("p99_itl_ms", Metric::P99ItlMs, Family::Itl),
    ("mean_e2el_ms", Metric::MeanE2elMs, Family::E2el),
    ("p50_e2el_ms", Metric::MedianE2elMs, Family::E2el),
    ("p99_e2el_ms", Metric::P99E2elMs, Family::E2el),
    ("output_tok_s", Metric::OutputThroughput, Family::Throughput),
    ("req_s", Metric::RequestThroughput, Family::Throughput),
    ("total_tok_s", Metric::TotalTokenThroughput, Family::Throughput),
    // The silicon sample (statistic unstated: compared with the mean).
    ("silicon_ttft_ms", Metric::MeanTtftMs, Family::Ttft),
    ("silicon_tpot_ms", Metric::MeanTpotMs, Family::Tpot),
];

/// A published value of a row: its CSV column, the report's metric it is compared with,
/// the metric's family.
#[derive(Clone, Copy, Debug)]
struct Published {
    column: &'static str,
    metric: Metric,
    family: Family,
    value: f64,
}

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
    published: Vec<Published>,
    skip: Option<String>,
    /// The row's `skip_metrics`: column → why it is not compared (anything but an object: none).
    skip_metrics: Value,
    knee_axis: Option<f64>,
    /// The set's `apart_from_corpus` (why): its rows and groups are judged and printed, but kept
    /// out of the corpus summary and out of a written baseline, whose corpus and groups calib
    /// reads for every model's intervals and priors.
    apart: bool,
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

/// The published values of a CSV row: an empty cell is a metric the source does not give; any
/// other must be a positive number (a typo or a 0 was dropped without a word, and the row then
/// judged on the rest). `at` names the row in an error (the CSV, its engine and load).
fn published_of(row: &BTreeMap<String, String>, at: &str) -> Result<Vec<Published>, String> {
    let mut out = Vec::new();
    // `vllm bench serve`'s request throughput is completed / duration; sources print it to two
    // decimals (0.06 for 100 requests in 1,783.59 s, 0.0561: 6.9% off on its own), so where the
    // row gives both, the quotient is what was measured (the audit of 2026-12-06).
    let positive =
        |c: &str| row.get(c).and_then(|v| v.trim().parse::<f64>().ok()).filter(|v| v.is_finite() && *v > 0.0);
    let req_s = positive("completed").zip(positive("duration_s")).map(|(n, d)| n / d);
    for &(column, metric, family) in METRICS {
        let Some(cell) = row.get(column).map(|v| v.trim()).filter(|v| !v.is_empty()) else { continue };
        match cell.parse::<f64>() {
            Ok(value) if value.is_finite() && value > 0.0 => {
                let value = if column == "req_s" { req_s.unwrap_or(value) } else { value };
                out.push(Published { column, metric, family, value })
            }
            _ => {
                return Err(format!(
                    "{at}: {column}: expected a positive number (or an empty cell where the source gives none), got {cell:?}"
                ))
            }
        }
    }
    Ok(out)
}

/// A column of a silicon-sample row that the run is built from; missing is an error naming it.
fn column<'a>(row: &'a BTreeMap<String, String>, name: &str, at: &str) -> Result<&'a str, String> {
    row.get(name).map(|v| v.trim()).ok_or_else(|| format!("{at}: missing column `{name}`"))
}

/// A whole number ≥ 1 of a silicon-sample row (a TP size, a batch size, a length).
fn whole_column(row: &BTreeMap<String, String>, name: &str, at: &str) -> Result<u32, String> {
    let v = column(row, name, at)?;
    v.parse::<u32>()
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| format!("{at}: {name}: expected a whole number of at least 1, got {v:?}"))
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
    let apart = match v.get("apart_from_corpus") {
        None => false,
        Some(Value::String(why)) if !why.trim().is_empty() => true,
        Some(other) => {
            return Err(format!(
                "{}: apart_from_corpus: expected the reason the set is kept out of the corpus (a string), got {other}",
                path.display()
            ))
        }
    };
    let mut jobs = Vec::new();
    if let Some(sil) = v.get("silicon") {
        // Rows by filter; each row's TP, lengths and concurrency become overrides.
        let filter = sil.get("filter").and_then(Value::as_object).cloned().unwrap_or_default();
        let base = v.get("scenario").ok_or_else(|| format!("{}: scenario: missing", path.display()))?;
        // The scenario as read (a path is read once here): its GPU and engine kind build each
        // row's overrides (read off a path's string, they were null: "no card named \"null\"").
        let base_raw = scenario_from(base, path, root)?;
        let base = &base_raw.json;
        // The load is aiperf's concurrency mode as aiconfigurator's own harnesses run it (see
        // `AIPERF_REQUESTS_PER_CLIENT`); a set may give another count per client.
        let requests_per_client =
            sil.get("aiperf_requests_per_client").and_then(Value::as_u64).unwrap_or(AIPERF_REQUESTS_PER_CLIENT);
        // Pairs of columns a row must hold equal values in (a MoE set's `tp_size` and
        // `moe_tp_size`: the experts sharded by TP, the one layout servesim models).
        let equal: Vec<(String, String)> = match sil.get("columns_equal") {
            None => Vec::new(),
            Some(Value::Array(a)) => a
                .iter()
                .map(|p| match p.as_array().map(|p| p.as_slice()) {
                    Some([Value::String(x), Value::String(y)]) => Ok((x.clone(), y.clone())),
                    _ => Err(format!(
                        "{}: silicon.columns_equal: expected pairs of column names, got {p}",
                        path.display()
                    )),
                })
                .collect::<Result<_, _>>()?,
            Some(other) => {
                return Err(format!(
                    "{}: silicon.columns_equal: expected a list of [column, column] pairs, got {other}",
                    path.display()
                ))
            }
        };
        for row in &rows {
            if !filter.iter().all(|(k, want)| row.get(k).map(String::as_str) == want.as_str()) {
                continue;
            }
            if !equal.iter().all(|(a, b)| row.get(a).is_some() && row.get(a) == row.get(b)) {
                continue;
            }
            let at = format!("{}: csv {csv_path}: row {}", path.display(), row.get("id").map_or("?", String::as_str));
            let engine = format!("{} {}", column(row, "backend", &at)?, column(row, "backend_version", &at)?);
            let tp = whole_column(row, "tp_size", &at)?;
            let conc = row.get("silicon_concurrency").and_then(|c| c.parse::<u32>().ok());
            let bs = Some(whole_column(row, "batch_size", &at)?);
            let (isl, osl) = (whole_column(row, "isl", &at)?, whole_column(row, "osl", &at)?);
            let load = format!("tp{tp} {isl}x{osl} c{}", conc.map_or("?".into(), |c| c.to_string()));
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
                format!("workload.random_input_len={isl}"),
                format!("workload.random_output_len={osl}"),
                format!("workload.max_concurrency={c}"),
                format!("workload.num_prompts={}", u64::from(c) * requests_per_client),
            ];
            jobs.push(Job {
                set: set.clone(),
                group: format!("{set} | {tp}x {gpu_label} | {engine}"),
                engine,
                load,
                scenario: Some(base_raw.clone()),
                sets,
                published: published_of(row, &at)?,
                skip,
                skip_metrics: Value::Null,
                knee_axis: None,
                apart,
            });
        }
        return Ok(jobs);
    }
    let specs = v.get("rows").and_then(Value::as_array).ok_or_else(|| format!("{}: rows: missing", path.display()))?;
    for (i, spec) in specs.iter().enumerate() {
        // A key the reader does not know (a misspelt `set` or `match`) would be dropped, and the
        // row run as if it were not there.
        let spec_obj = spec.as_object().ok_or_else(|| format!("{}: rows[{i}]: expected an object", path.display()))?;
        if let Some(k) = spec_obj.keys().find(|k| !ROW_KEYS.contains(&k.as_str())) {
            return Err(format!(
                "{}: rows[{i}].{k}: unknown key (expected one of {})",
                path.display(),
                ROW_KEYS.join(", ")
            ));
        }
        let engine = str_of(spec, "engine").ok_or_else(|| format!("{}: rows[{i}].engine: missing", path.display()))?;
        let load = str_of(spec, "load").ok_or_else(|| format!("{}: rows[{i}].load: missing", path.display()))?;
        // A load is a concurrency or rate ("4", "inf") or a label; one that reads as a number
        // must be one ("NaN" panicked the knee's sort: an audit, 2026-12-07).
        if load.trim().parse::<f64>().is_ok_and(f64::is_nan) {
            return Err(format!(
                "{}: rows[{i}].load: {load:?} is not a number; expected a concurrency or rate (e.g. \"4\", \"inf\") or a label",
                path.display()
            ));
        }
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
        // A `set` that is not a list of strings ran the row without its load (a string, or a
        // number in the list, was dropped): its error then read as the model's.
        let sets: Vec<String> = match spec.get("set") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) if a.iter().all(Value::is_string) => {
                a.iter().filter_map(Value::as_str).map(str::to_string).collect()
            }
            Some(other) => {
                return Err(format!(
                    "{}: rows[{i}].set: expected a list of \"PATH=VALUE\" strings, got {other}",
                    path.display()
                ))
            }
        };
        let skip = str_of(spec, "skip").or_else(|| scenario.is_none().then(|| "no scenario".to_string()));
        let gpu = str_of(spec, "gpu").unwrap_or_else(|| gpu_label.clone());
        let label = match extra.get("input_len").and_then(Value::as_str) {
            Some(i) => format!("{load} ({i})"),
            None => load.clone(),
        };
        let knee = spec.get("knee").and_then(Value::as_bool).unwrap_or(true);
        let published = published_of(
            row,
            &format!("{}: csv {csv_path}: the row of engine {engine:?} and load {load:?}", path.display()),
        )?;
        jobs.push(Job {
            set: set.clone(),
            group: format!("{set} | {gpu} | {engine}"),
            engine,
            knee_axis: load.parse::<f64>().ok().filter(|_| knee),
            apart,
            load: label,
            scenario,
            sets,
            published,
            skip,
            skip_metrics: spec.get("skip_metrics").cloned().unwrap_or_default(),
        });
    }
    Ok(jobs)
}

fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let x = (s.len() - 1) as f64 * q;
    let (lo, hi) = (x.floor() as usize, x.ceil() as usize);
    s[lo] + (x - lo as f64) * (s[hi] - s[lo])
}

/// A point of a group's knee series: the load, the published output throughput and TTFT,
/// the simulated ones.
type KneeRow = (f64, f64, f64, f64, f64);

/// A fraction as a percentage with one decimal (`null` when not finite).
fn pct(x: f64) -> Option<f64> {
    x.is_finite().then(|| (x * 1000.0).round() / 10.0)
}

/// One row of `--json`: the run, or why it was not run.
#[derive(Serialize)]
struct RowOut<'a> {
    set: &'a str,
    group: &'a str,
    engine: &'a str,
    load: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    skipped: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cost_source: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    metrics: Option<Vec<MetricOut<'a>>>,
}

/// A published value of a row against the simulated one, or why it is not compared.
#[derive(Serialize)]
#[serde(untagged)]
enum MetricOut<'a> {
    NotCompared {
        column: &'a str,
        published: f64,
        not_compared: &'a Value,
    },
    Compared {
        column: &'a str,
        key: Metric,
        published: f64,
        /// `null` when the run has no such number.
        simulated: f64,
        error_pct: Option<f64>,
    },
}

/// Median and p90 |error| of a family's values, in %; for the corpus, also how its errors
/// split into a part shared by a group's rows and a part that differs from row to row.
#[derive(Clone, Serialize, Deserialize)]
struct FamilyOut {
    median_abs_error_pct: Option<f64>,
    p90_abs_error_pct: Option<f64>,
    n: usize,
    /// The pooled within-group standard deviation of ln(simulated / published) over the
    /// family's means and medians (a group's rows about the group's own mean, over groups with
    /// two values or more): the error that differs from one load point of a setup to the next,
    /// which one calibrated point cannot remove. Corpus only (`calib` reads it as the model's
    /// discrepancy at a fitted point).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    within_group_sd_ln: Option<f64>,
    /// The standard deviation, over groups, of each group's mean ln(simulated / published) (the
    /// same values): the error a setup's rows share. Corpus only; for the record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    between_group_sd_ln: Option<f64>,
}

impl FamilyOut {
    fn of(v: &[f64]) -> FamilyOut {
        FamilyOut {
            median_abs_error_pct: pct(quantile(v, 0.5)),
            p90_abs_error_pct: pct(quantile(v, 0.9)),
            n: v.len(),
            within_group_sd_ln: None,
            between_group_sd_ln: None,
        }
    }
}

/// Per group, the signed ln(simulated / published) of its values: (pooled within-group sd, sd of
/// the group means). Within: Σ over groups of Σ (x − group mean)², over Σ (n − 1), for groups of
/// two or more; between: the population sd of the group means. None without such groups.
fn split_sd(groups: &BTreeMap<String, Vec<f64>>) -> (Option<f64>, Option<f64>) {
    let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len() as f64;
    let (mut ss, mut dof) = (0.0, 0usize);
    for x in groups.values().filter(|x| x.len() >= 2) {
        let m = mean(x);
        ss += x.iter().map(|v| (v - m).powi(2)).sum::<f64>();
        dof += x.len() - 1;
    }
    let within = (dof > 0).then(|| (ss / dof as f64).sqrt());
    let means: Vec<f64> = groups.values().filter(|x| !x.is_empty()).map(|x| mean(x)).collect();
    let between = (means.len() >= 2).then(|| {
        let m = mean(&means);
        (means.iter().map(|v| (v - m).powi(2)).sum::<f64>() / means.len() as f64).sqrt()
    });
    (within, between)
}

/// A metric key that is a tail percentile (p90, p95, p99), not a centre (mean, median).
fn is_tail(m: Metric) -> bool {
    m.key().starts_with("p9")
}

/// The families that have values, in [`Family::ALL`]'s order (a group's and the corpus').
#[derive(Clone, Default, Serialize, Deserialize)]
struct FamiliesOut {
    #[serde(skip_serializing_if = "Option::is_none")]
    ttft: Option<FamilyOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tpot: Option<FamilyOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    itl: Option<FamilyOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    e2el: Option<FamilyOut>,
    #[serde(skip_serializing_if = "Option::is_none")]
    throughput: Option<FamilyOut>,
}

impl FamiliesOut {
    fn slot(&mut self, f: Family) -> &mut Option<FamilyOut> {
        match f {
            Family::Ttft => &mut self.ttft,
            Family::Tpot => &mut self.tpot,
            Family::Itl => &mut self.itl,
            Family::E2el => &mut self.e2el,
            Family::Throughput => &mut self.throughput,
        }
    }

    fn set(&mut self, f: Family, v: &[f64]) {
        *self.slot(f) = Some(FamilyOut::of(v));
    }

    /// The corpus' within- and between-group sd of a family (rounded to 4 decimals, as written).
    fn set_split(&mut self, f: Family, within: Option<f64>, between: Option<f64>) {
        if let Some(s) = self.slot(f).as_mut() {
            s.within_group_sd_ln = within.map(|x| (x * 1e4).round() / 1e4);
            s.between_group_sd_ln = between.map(|x| (x * 1e4).round() / 1e4);
        }
    }
}

/// A group (set × GPU × engine): median |error| over every compared metric, and per family.
#[derive(Serialize)]
struct GroupOut {
    group: String,
    cost_source: String,
    median_abs_error_pct: Option<f64>,
    n: usize,
    #[serde(flatten)]
    families: FamiliesOut,
}

/// A group's knee, published and simulated (`null`: not reached).
#[derive(Serialize)]
struct KneeOut<'a> {
    group: &'a str,
    published: Option<f64>,
    simulated: Option<f64>,
}

/// `servesim validate --json`.
#[derive(Serialize)]
struct ValidateOut<'a> {
    rows: Vec<RowOut<'a>>,
    groups: Vec<GroupOut>,
    summary: FamiliesOut,
    knees: Vec<KneeOut<'a>>,
    baseline_failures: Vec<String>,
}

/// The baseline file (`validation/baseline.json`, `--write-baseline`).
#[derive(Serialize, Deserialize)]
struct Baseline {
    #[serde(default)]
    about: String,
    /// The corpus' median and p90 |error| per metric family (what `validate` prints as
    /// "Corpus"): `calib` reads them, embedded, for the uncalibrated intervals and for the
    /// prior σ of a fit that corrects the composed cost, so they move with the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    corpus: Option<FamiliesOut>,
    /// Per group, in the file's order.
    #[serde(default, with = "in_order")]
    groups: Vec<(String, BaselineGroup)>,
    /// The groups of sets kept out of the corpus (`apart_from_corpus`), judged by the same
    /// rule; apart from `groups`, which calib reads for the uncalibrated bands.
    #[serde(default, with = "in_order", skip_serializing_if = "Vec::is_empty")]
    apart_groups: Vec<(String, BaselineGroup)>,
}

/// A group of the baseline.
#[derive(Serialize, Deserialize)]
struct BaselineGroup {
    median_abs_error_pct: Option<f64>,
    #[serde(default)]
    n: Option<usize>,
    #[serde(default)]
    cost_source: Option<String>,
    /// The group's median |error| and count per metric family: `calib` scales each family's
    /// uncalibrated band by this GPU and engine's record in that family.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    families: Option<BaselineFamilies>,
}

/// A baseline group's median |error| per metric family (the families it has values of).
#[derive(Serialize, Deserialize)]
struct BaselineFamilies {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ttft: Option<BaselineFamily>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tpot: Option<BaselineFamily>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    itl: Option<BaselineFamily>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    e2el: Option<BaselineFamily>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    throughput: Option<BaselineFamily>,
}

/// One family of a baseline group: median |error| in %, over `n` values.
#[derive(Serialize, Deserialize)]
struct BaselineFamily {
    median_abs_error_pct: Option<f64>,
    n: usize,
}

impl BaselineFamilies {
    fn of(f: &FamiliesOut) -> BaselineFamilies {
        let one = |x: &Option<FamilyOut>| {
            x.as_ref().map(|x| BaselineFamily { median_abs_error_pct: x.median_abs_error_pct, n: x.n })
        };
        BaselineFamilies {
            ttft: one(&f.ttft),
            tpot: one(&f.tpot),
            itl: one(&f.itl),
            e2el: one(&f.e2el),
            throughput: one(&f.throughput),
        }
    }
}

const BASELINE_ABOUT: &str = "servesim validate: per group (published set | GPU | engine), the median |error| over every compared metric, in %. CI fails when a group gets worse by more than a point, when a group is measured that the baseline does not hold or held that is no longer measured, and when a group compares fewer values (`n`) than here (tests/validate.rs). `apart_groups`: the groups of sets kept out of the corpus (apart_from_corpus), judged alike and not read by calib. `families`: a group's median |error| and count per metric family, read by calib (each family's uncalibrated band follows its GPU and engine's record in that family). `corpus`: the median and p90 |error| per metric family over the whole corpus, read by calib (uncalibrated intervals, the composed prior's sigma), and the sd of ln(simulated / published) of means and medians within a group and between groups (calib reads the within-group sd as the model's discrepancy at a point fitted from published results).";

/// A JSON object as its entries in order.
mod in_order {
    use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
    use serde::ser::{SerializeMap, Serializer};

    pub fn serialize<S: Serializer, V: serde::Serialize>(v: &[(String, V)], s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(v.len()))?;
        for (k, x) in v {
            m.serialize_entry(k, x)?;
        }
        m.end()
    }

    pub fn deserialize<'de, D: Deserializer<'de>, V: Deserialize<'de>>(d: D) -> Result<Vec<(String, V)>, D::Error> {
        struct Entries<V>(std::marker::PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for Entries<V> {
            type Value = Vec<(String, V)>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut a: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::new();
                while let Some(e) = a.next_entry()? {
                    out.push(e);
                }
                Ok(out)
            }
        }
        d.deserialize_map(Entries(std::marker::PhantomData))
    }
}

pub fn run(a: ValidateArgs) -> Result<ExitCode, String> {
    if !(a.tolerance.is_finite() && a.tolerance >= 0.0) {
        return Err(format!("--tolerance: expected a finite number of points ≥ 0, got {}", a.tolerance));
    }
    let cwd = std::env::current_dir().map_err(|e| e.to_string())?;
    let dir = if a.dir.is_absolute() { a.dir.clone() } else { cwd.join(&a.dir) };
    // A set's paths (its csv, its scenarios) are the repository's: resolved against the nearest
    // folder above the sets that holds `data/published`, so `--dir` works from anywhere; else
    // against the current folder.
    let root = std::fs::canonicalize(&dir)
        .ok()
        .and_then(|d| d.ancestors().find(|a| a.join("data").join("published").is_dir()).map(Path::to_path_buf))
        .unwrap_or(cwd);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map_err(|e| format!("{}: {e}", dir.display()))?
        .map(|e| e.map(|e| e.path()).map_err(|e| format!("{}: {e}", dir.display())))
        .collect::<Result<Vec<_>, _>>()?
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter(|p| a.only.as_ref().is_none_or(|o| p.file_name().unwrap().to_string_lossy().contains(o.as_str())))
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(match &a.only {
            Some(o) => format!("--only {o:?}: no validation set in {} has it in its file name", dir.display()),
            None => format!("{}: no validation sets (*.json)", dir.display()),
        });
    }
    if a.only.is_some() && a.write_baseline.is_some() {
        return Err("--write-baseline with --only would write a baseline of those sets alone: write it from the \
                    whole corpus"
            .to_string());
    }
    // The sets run, by name: a baseline's groups of other sets are not judged under --only.
    let run_sets: Vec<String> =
        files.iter().filter_map(|f| f.file_stem().map(|s| s.to_string_lossy().into_owned())).collect();
    let mut jobs = Vec::new();
    for f in &files {
        jobs.extend(jobs_of(f, &root)?);
    }
    // A --set on a field that a row sets itself (its load, its prompt count, its own lengths)
    // would replace the row's setup in every row that sets it, and each would still be compared
    // with the published value of its own setup: refused, naming the row.
    let overlaps = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}.")) || b.starts_with(&format!("{a}."));
    for s in &a.sets {
        let p = sim::config::set_path(s);
        if let Some((j, own)) = jobs
            .iter()
            .find_map(|j| j.sets.iter().map(|x| sim::config::set_path(x)).find(|o| overlaps(p, o)).map(|o| (j, o)))
        {
            return Err(format!(
                "--set {p}: the row {} at load {} of {} sets {own} itself (the setup its published values were measured at), so \
                 every row that sets it would run another setup and still be compared with its own published \
                 values; --set may change only what no row sets",
                j.engine, j.load, j.set
            ));
        }
    }
    // Run every row (in parallel; results in corpus order).
    let results: Vec<Result<PointReport, String>> = jobs
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
            out.run.stop.completed()?;
            Ok(PointReport::of(&spec, &out))
        })
        .collect();

    let mut rows_out = Vec::new();
    let mut group_errs: BTreeMap<String, BTreeMap<Family, Vec<f64>>> = BTreeMap::new();
    let mut all: BTreeMap<Family, Vec<f64>> = BTreeMap::new();
    // Groups of sets kept out of the corpus (`apart_from_corpus`).
    let mut apart_groups: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
    // Signed ln(simulated / published) of the centre statistics, per family and group.
    let mut centre_logs: BTreeMap<Family, BTreeMap<String, Vec<f64>>> = BTreeMap::new();
    let mut sources: BTreeMap<String, String> = BTreeMap::new();
    let mut knee_series: BTreeMap<String, Vec<KneeRow>> = BTreeMap::new();
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
                rows_out.push(RowOut {
                    set: &j.set,
                    group: &j.group,
                    engine: &j.engine,
                    load: &j.load,
                    skipped: Some(why),
                    cost_source: None,
                    metrics: None,
                });
                continue;
            }
            Ok(p) => {
                sources.entry(j.group.clone()).or_insert_with(|| p.cost_source.clone());
                for m in &j.published {
                    if let Some(why) = j.skip_metrics.get(m.column) {
                        let _ = writeln!(
                            text,
                            "{:<64} {:<16} {:<14} {:>10.2} {:>10} not compared: {}",
                            j.group,
                            j.load,
                            m.column,
                            m.value,
                            "",
                            why.as_str().unwrap_or("")
                        );
                        metrics.push(MetricOut::NotCompared {
                            column: m.column,
                            published: m.value,
                            not_compared: why,
                        });
                        continue;
                    }
                    let sim_v = p.metric(m.metric).unwrap_or(f64::NAN);
                    let err = sim_v / m.value - 1.0;
                    // Requests per second to three decimals: two hid the figure compared (0.0561
                    // printed as 0.06).
                    let places = if m.column == "req_s" { 3 } else { 2 };
                    let _ = writeln!(
                        text,
                        "{:<64} {:<16} {:<14} {:>10.places$} {:>10.places$} {:>+7.1}%",
                        j.group,
                        j.load,
                        m.column,
                        m.value,
                        sim_v,
                        100.0 * err
                    );
                    if err.is_finite() {
                        group_errs.entry(j.group.clone()).or_default().entry(m.family).or_default().push(err.abs());
                        if j.apart {
                            apart_groups.insert(j.group.clone());
                        } else {
                            all.entry(m.family).or_default().push(err.abs());
                        }
                        if !j.apart && !is_tail(m.metric) && sim_v > 0.0 {
                            centre_logs
                                .entry(m.family)
                                .or_default()
                                .entry(j.group.clone())
                                .or_default()
                                .push((sim_v / m.value).ln());
                        }
                    }
                    metrics.push(MetricOut::Compared {
                        column: m.column,
                        key: m.metric,
                        published: m.value,
                        simulated: sim_v,
                        error_pct: pct(err),
                    });
                }
                // Knee series: load, published throughput and TTFT, simulated ones.
                if let Some(x) = j.knee_axis {
                    let thr = j.published.iter().find(|m| m.column == "output_tok_s").map(|m| m.value);
                    let ttft = j.published.iter().find(|m| m.family == Family::Ttft).map(|m| (m.metric, m.value));
                    if let (Some(t), Some((tm, tv))) = (thr, ttft) {
                        let st = p.metric(Metric::OutputThroughput).unwrap_or(0.0);
                        let sv = p.metric(tm).unwrap_or(0.0);
                        knee_series.entry(j.group.clone()).or_default().push((x, t, tv, st, sv));
                    }
                }
                rows_out.push(RowOut {
                    set: &j.set,
                    group: &j.group,
                    engine: &j.engine,
                    load: &j.load,
                    skipped: None,
                    cost_source: Some(&p.cost_source),
                    metrics: Some(metrics),
                });
            }
        }
    }

    // Groups.
    let mut groups_out = Vec::new();
    let _ = writeln!(text, "\nPer group: median / p90 |error| per metric (n)");
    for (g, fams) in &group_errs {
        let every: Vec<f64> = fams.values().flatten().copied().collect();
        let mut families = FamiliesOut::default();
        let mut line = format!("{g:<64} all {:>5.1}% ({})", 100.0 * quantile(&every, 0.5), every.len());
        for f in Family::ALL {
            if let Some(v) = fams.get(&f) {
                families.set(f, v);
                line.push_str(&format!(
                    " | {} {:.1}/{:.1}% ({})",
                    f.key(),
                    100.0 * quantile(v, 0.5),
                    100.0 * quantile(v, 0.9),
                    v.len()
                ));
            }
        }
        let _ = writeln!(text, "{line}");
        groups_out.push(GroupOut {
            group: g.clone(),
            cost_source: sources.get(g).cloned().unwrap_or_default(),
            median_abs_error_pct: pct(quantile(&every, 0.5)),
            n: every.len(),
            families,
        });
    }
    let mut summary = FamiliesOut::default();
    let _ = writeln!(
        text,
        "\nCorpus: median / p90 |error| per metric; sd of ln(servesim / published) of means and medians within a group and between groups{}",
        if apart_groups.is_empty() {
            String::new()
        } else {
            format!(" (without the {} group(s) of sets kept apart: apart_from_corpus)", apart_groups.len())
        }
    );
    for f in Family::ALL {
        if let Some(v) = all.get(&f) {
            summary.set(f, v);
            let (within, between) = centre_logs.get(&f).map_or((None, None), split_sd);
            summary.set_split(f, within, between);
            let sd = |x: Option<f64>| x.map_or_else(|| "—".to_string(), |x| format!("{x:.3}"));
            let _ = writeln!(
                text,
                "{:<12} {:>6.1}% {:>6.1}%  ({} values)  sd within {} between {}",
                f.key(),
                100.0 * quantile(v, 0.5),
                100.0 * quantile(v, 0.9),
                v.len(),
                sd(within),
                sd(between)
            );
        }
    }
    // Knees.
    let mut knees = Vec::new();
    for (g, pts) in &knee_series {
        // A knee needs a sweep: three loads at least (repeats of one load, a set's seeds, count once).
        let mut loads: Vec<f64> = pts.iter().map(|p| p.0).collect();
        loads.sort_by(f64::total_cmp);
        loads.dedup();
        if loads.len() < 3 {
            continue;
        }
        let mut pts = pts.clone();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let kp = |thr: fn(&KneeRow) -> (f64, f64)| {
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
        knees.push(KneeOut { group: g, published, simulated });
    }

    // Baseline.
    let mut failed = Vec::new();
    if let Some(b) = &a.baseline {
        let t = std::fs::read_to_string(b).map_err(|e| format!("{}: {e}", b.display()))?;
        let v: Value = serde_json::from_str(&t).map_err(|e| format!("{}: not valid JSON: {e}", b.display()))?;
        let base: Baseline = serde_json::from_value(v).map_err(|e| format!("{}: {e}", b.display()))?;
        if base.groups.is_empty() {
            return Err(format!(
                "{}: no \"groups\": not a baseline written by `servesim validate --write-baseline`",
                b.display()
            ));
        }
        let rewrite = "rewrite the baseline with `servesim validate --write-baseline validation/baseline.json` \
                       and say why in the commit";
        // Every group the baseline judges, the corpus' and those kept apart.
        let judged = || base.groups.iter().chain(&base.apart_groups);
        for g in &groups_out {
            let now = g.median_abs_error_pct.unwrap_or(f64::INFINITY);
            let Some((_, was)) = judged().find(|(k, _)| *k == g.group) else {
                // A new or renamed group would otherwise never be judged.
                failed.push(format!("{}: measured but not in the baseline: {rewrite}", g.group));
                continue;
            };
            if let Some(was) = was.median_abs_error_pct {
                if now > was + a.tolerance {
                    failed.push(format!("{}: median |error| {now:.1}% against the baseline's {was:.1}%", g.group));
                }
            }
            // A row or metric that stops being compared leaves the median of the rest, which can
            // improve.
            if let Some(n_was) = was.n.filter(|&n| g.n < n) {
                failed.push(format!(
                    "{}: {} values compared against the baseline's {n_was}: a row or a metric is no longer judged",
                    g.group, g.n
                ));
            }
        }
        for (k, _) in judged() {
            // Under --only, a group of a set not run is not judged; a whole run judges every group
            // (a set file deleted or renamed drops its groups).
            let set = k.split(" | ").next().unwrap_or(k);
            let run = a.only.is_none() || run_sets.iter().any(|r| r == set);
            if run && !groups_out.iter().any(|g| g.group == *k) {
                failed.push(format!("{k}: in the baseline but no longer measured"));
            }
        }
    }
    if let Some(w) = &a.write_baseline {
        let entry = |g: &GroupOut| {
            (
                g.group.clone(),
                BaselineGroup {
                    median_abs_error_pct: g.median_abs_error_pct,
                    n: Some(g.n),
                    cost_source: Some(g.cost_source.clone()),
                    families: Some(BaselineFamilies::of(&g.families)),
                },
            )
        };
        let b = Baseline {
            about: BASELINE_ABOUT.to_string(),
            corpus: Some(summary.clone()),
            groups: groups_out.iter().filter(|g| !apart_groups.contains(&g.group)).map(entry).collect(),
            apart_groups: groups_out.iter().filter(|g| apart_groups.contains(&g.group)).map(entry).collect(),
        };
        std::fs::write(w, serde_json::to_string_pretty(&b).unwrap() + "\n")
            .map_err(|e| format!("{}: {e}", w.display()))?;
    }
    // Rows the corpus itself cannot run say so and are not errors; but when every row that can
    // run failed (a `--set` every scenario refuses, say), nothing was judged, and an exit status
    // of 0 would read as a pass.
    let runnable: Vec<&Result<PointReport, String>> =
        jobs.iter().zip(&results).filter(|(j, _)| j.skip.is_none()).map(|(_, r)| r).collect();
    let none_ran = !runnable.is_empty() && runnable.iter().all(|r| r.is_err());
    let passed = failed.is_empty();
    if a.json {
        let out = ValidateOut { rows: rows_out, groups: groups_out, summary, knees, baseline_failures: failed };
        println!("{}", serde_json::to_string_pretty(&out).unwrap());
    } else {
        print!("{text}");
        for f in &failed {
            println!("WORSE THAN BASELINE: {f}");
        }
    }
    if none_ran {
        let first = runnable.iter().find_map(|r| r.as_ref().err()).cloned().unwrap_or_default();
        return Err(format!(
            "none of the {} rows that can run ran, so nothing was judged; the first: {first}",
            runnable.len()
        ));
    }
    Ok(if passed { ExitCode::SUCCESS } else { ExitCode::from(1) })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within: each group about its own mean, pooled over the groups' degrees of freedom (a
    /// group of one adds nothing); between: the spread of the group means.
    #[test]
    fn split_sd_pools_within_groups_and_spreads_the_means_between() {
        let mut g: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        g.insert("a".into(), vec![0.0, 2.0]); // mean 1, squares 1 + 1
        g.insert("b".into(), vec![3.0, 4.0, 5.0]); // mean 4, squares 1 + 0 + 1
        g.insert("c".into(), vec![7.0]); // mean 7, no within-group term
        let (w, b) = split_sd(&g);
        assert!((w.unwrap() - (4.0f64 / 3.0).sqrt()).abs() < 1e-12, "{w:?}");
        // Means 1, 4, 7: population sd sqrt(6).
        assert!((b.unwrap() - 6.0f64.sqrt()).abs() < 1e-12, "{b:?}");
        let mut one: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        one.insert("a".into(), vec![1.0]);
        assert_eq!(split_sd(&one), (None, None));
    }

    #[test]
    fn tails_are_the_p9x_statistics() {
        assert!(is_tail(Metric::P99TtftMs));
        assert!(!is_tail(Metric::MedianTtftMs));
        assert!(!is_tail(Metric::MeanTpotMs));
        assert!(!is_tail(Metric::OutputThroughput));
    }
}
