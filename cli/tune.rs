//! `servesim tune`: what-if tuning before touching hardware. A grid over the
//! knobs given with `--vary` (a seeded sample plus a local search when the
//! grid is large), every configuration simulated in parallel; the best one
//! that meets every SLO, the Pareto front of throughput against latency, and
//! for each rejected configuration which SLO it broke and by how much.
//!
//! With a profile that carries an `uncertainty` block (or `--uncertainty`), the reported
//! configurations (the best, the Pareto front) get `simulate`'s 90% intervals and each SLO
//! a verdict against the interval's unfavourable edge ([`SloVerdict`]); when the best is
//! not robust, the next feasible configurations by the objective (at most
//! [`ROBUST_CANDIDATES`]) are checked for the best one that is. Nothing else gets an interval.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};

use ::calib::uncertainty::{ReportIntervals, SloCheck, SloVerdict};
use clap::Args;
use rand::seq::SliceRandom;
use rayon::prelude::*;
use serde_json::Value;
use sim::config::SimSpec;
use sim::report::{Metric, Metrics, PointReport};
use sim::simulation::{RunOptions, StopReason};
use sim::sweep::{
    SloViolation, TuneConfig, TuneEntry, TuneInvalid, TuneRejected, TuneResult, TuneShared, TuneStoppedEarly,
};
use sim::workload::{Workload, WorkloadParams};

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
    /// The report key to optimise: latencies (`_ms`), `duration`, `failed`, `num_preemptions`
    /// and waiting requests are minimised; throughputs, `completed`, prefix-cache hits and the
    /// KV pool maximised; a setting or workload property is an error.
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
    /// The result as JSON: best, pareto, rejected, invalid (and stopped_early when some were), searched,
    /// objective, slos, notes, knee; each configuration with the report keys.
    #[arg(long)]
    pub json: bool,
    /// Write throughput against latency, the Pareto front joined, as SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<String>,
    /// Run every configuration to the end, even one already certain to break a TTFT
    /// percentile SLO (such configurations then appear on the Pareto front too).
    #[arg(long)]
    pub no_early_stop: bool,
    /// Put 90% intervals on the reported configurations (the best, the Pareto front) even
    /// without a profile (the uncalibrated model's error on the validation corpus), with a
    /// verdict per SLO on whether it holds across the interval. With a profile that carries
    /// an uncertainty block, they are always given.
    #[arg(long)]
    pub uncertainty: bool,
}

/// One `--slo METRIC<=X` (or `>=`), as `tune` and `plan` read it.
#[derive(Clone, Debug)]
pub(crate) struct Slo {
    pub(crate) metric: String,
    pub(crate) le: bool,
    pub(crate) bound: f64,
    pub(crate) text: String,
}

pub(crate) fn parse_slo(s: &str) -> Result<Slo, String> {
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
    // The load and the seed are what the run was set to, not what the engine did: an SLO on
    // them judges nothing (`seed<=5` was accepted; `--objective` refuses them).
    if let Some(m) = sim::report::Metric::parse(metric.trim()).filter(|m| m.is_setting()) {
        return Err(format!(
            "--slo {s:?}: {m} is a setting of the run (its load or seed), not a result: an SLO on it judges nothing the engine does; vary it with --vary instead"
        ));
    }
    // Every metric a run reports (latencies, throughputs, counts) is 0 or more: a negative bound
    // would reject every configuration (<=) or none (>=), which is a typo, not an SLO.
    if bound < 0.0 {
        return Err(format!("--slo {s:?}: the bound must be 0 or more (every metric is), got {bound}"));
    }
    Ok(Slo { metric: metric.trim().to_string(), le, bound, text: s.to_string() })
}

fn parse_vary(s: &str) -> Result<(String, Vec<Value>), String> {
    let (path, vals) = s.split_once('=').ok_or_else(|| format!("--vary {s:?}: expected PATH=V1,V2,..."))?;
    if vals.trim().is_empty() {
        return Err(format!("--vary {s:?}: no values"));
    }
    let mut values: Vec<Value> = Vec::new();
    for v in split_top_level(vals) {
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

/// `vals` split at the commas outside JSON objects, lists and strings: an inline card
/// (`model={"id": "m", ...}`) is one value, not cut at its own commas.
fn split_top_level(vals: &str) -> Vec<&str> {
    let (mut out, mut depth, mut in_str, mut escaped, mut start) = (Vec::new(), 0i32, false, false, 0);
    for (i, c) in vals.char_indices() {
        if in_str {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_str = true,
            '{' | '[' => depth += 1,
            '}' | ']' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&vals[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&vals[start..]);
    out
}

type Config = Vec<usize>;

struct Evaluated {
    config: Config,
    result: Result<PointReport, String>,
    /// Stopped early: the SLO certain to break, the reason in words, requests completed.
    stopped: Option<(String, String, usize)>,
}

/// The early stop of one SLO `p<P>_ttft_ms<=X` (or `median_ttft_ms<=X`).
///
/// Why it is certain: the report's percentile is numpy's linear interpolation over
/// the completed requests' TTFTs (`sim::metrics::percentile`): with `n` values sorted,
/// it lies between the values at ranks `lo = ⌊P/100·(n−1)⌋` and `lo + 1`, so it is
/// above `X` once the `n − lo` largest values are. A request's TTFT is final when it
/// completes, and a completed request stays completed, so once [`EarlyStop::need`]
/// requests (the largest `n − lo` over every `n` up to the run's request count: a
/// run that would stall completes fewer) have completed with a TTFT above `X`, the
/// final percentile is above `X` whatever the rest of the run does. "Above" keeps a
/// relative margin of 1e-9 over the bound, far above the interpolation's rounding.
/// Only TTFT percentiles with an upper bound stop early: a mean, a lower bound, or a
/// per-token metric (TPOT, ITL) is not settled by a subset of the requests like this.
#[derive(Clone, Debug)]
struct EarlyStop {
    slo: String,
    metric: String,
    p: f64,
    bound_ms: f64,
    /// The least TTFT in ns counted as above the bound.
    above_ns: u64,
}

impl EarlyStop {
    fn of(s: &Slo) -> Option<EarlyStop> {
        if !s.le {
            return None;
        }
        let p: f64 = match s.metric.as_str() {
            "median_ttft_ms" => 50.0,
            m => m.strip_prefix('p')?.strip_suffix("_ttft_ms")?.parse().ok()?,
        };
        if !(0.0..=100.0).contains(&p) || s.bound < 0.0 {
            return None;
        }
        let over = s.bound + s.bound.abs() * 1e-9 + 1e-12;
        // The least ns whose milliseconds (as the report computes them) exceed `over`.
        let ms = |ns: u64| ns as f64 / 1e6;
        let (mut lo, mut hi) = (0u64, 1u64 << 62);
        if ms(hi) <= over {
            return None;
        }
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if ms(mid) > over {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Some(EarlyStop { slo: s.text.clone(), metric: s.metric.clone(), p, bound_ms: s.bound, above_ns: lo })
    }

    /// Requests above the bound that settle the percentile for any count up to `total`.
    fn need(&self, total: usize) -> usize {
        (1..=total)
            .map(|n| {
                let pos = self.p / 100.0 * (n - 1) as f64;
                n - (pos.floor() as usize).min(n - 1)
            })
            .max()
            .unwrap_or(1)
    }
}

/// Work shared between configurations: equal step costs (and their memos), the
/// reports of configurations that resolve identically.
#[derive(Default)]
struct SharedWork {
    costs: Mutex<Vec<Arc<sim::cost::ComposedCost>>>,
    /// By a fingerprint of the resolved scenario; equal specs are confirmed with `==`.
    done: Mutex<HashMap<String, Vec<(SimSpec, Result<PointReport, String>, Option<(String, String, usize)>)>>>,
    /// Configurations that resolved and were asked for (simulated or answered by an equal one).
    resolved: std::sync::atomic::AtomicUsize,
    /// The distinct workloads asked for (by their parameters less `max_concurrency`): what the
    /// report counts, the same however the configurations fell to threads.
    workload_keys: Mutex<Vec<WorkloadParams>>,
}

/// A thread's generated workloads, by their parameters less `max_concurrency`.
type WorkloadCache = Vec<(WorkloadParams, Workload)>;

/// The workload of `p`, from the cache or generated. `generate` reads
/// `max_concurrency` only to copy it into the result (the client applies it), so
/// workloads that differ only there are the same requests.
fn take_workload(cache: &mut WorkloadCache, p: &WorkloadParams) -> Workload {
    let mut key = p.clone();
    key.max_concurrency = None;
    let mut w = match cache.iter().position(|(k, _)| *k == key) {
        Some(i) => cache.swap_remove(i).1,
        None => sim::workload::generate(&key),
    };
    w.max_concurrency = p.max_concurrency;
    w
}

fn put_workload(cache: &mut WorkloadCache, p: &WorkloadParams, w: Workload) {
    let mut key = p.clone();
    key.max_concurrency = None;
    cache.push((key, w));
    if cache.len() > 8 {
        cache.remove(0);
    }
}

/// Simulates one resolved configuration, sharing what can be shared; `early`: the
/// early-stop rules (the first that applies is used).
fn simulate_config(
    mut spec: SimSpec,
    early: Option<&EarlyStop>,
    shared: &SharedWork,
    cache: &mut WorkloadCache,
) -> (Result<PointReport, String>, Option<(String, String, usize)>) {
    if let Some(c) = &spec.cost.composed {
        let mut costs = shared.costs.lock().expect("not poisoned");
        match costs.iter().find(|x| ***x == **c) {
            Some(x) => spec.cost.composed = Some(x.clone()),
            None => costs.push(c.clone()),
        }
    }
    let fingerprint = format!(
        "{:?}|{:?}|{:?}|{:?}|{}|{}|{:?}",
        spec.engine,
        spec.workload,
        spec.deployment,
        spec.kv_sizing,
        spec.model.id,
        spec.gpu.id,
        spec.cost.coefficients()
    );
    shared.resolved.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    if let Some(v) = shared.done.lock().expect("not poisoned").get(&fingerprint) {
        if let Some((_, r, st)) = v.iter().find(|(s, _, _)| *s == spec) {
            return (r.clone(), st.clone());
        }
    }
    // Every configuration's workload counts, a fleet's too (it generates its own; until
    // 2026-12-07 a grid of fleet knobs reported "0 distinct workloads" after running).
    {
        let mut key = spec.workload.clone();
        key.max_concurrency = None;
        let mut keys = shared.workload_keys.lock().expect("not poisoned");
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    let (result, stopped) = if spec.fleet.is_some() {
        // A fleet runs its own loop: no shared workload, no early stop.
        let out = sim::simulate(&spec, RunOptions::default());
        (out.run.stop.completed().map(|()| PointReport::of(&spec, &out)), None)
    } else {
        let mut workload = take_workload(cache, &spec.workload);
        if let sim::config::EngineSpec::Vllm(c) = &spec.engine {
            if c.enable_prefix_caching {
                // Every configuration hashes the same prompts: once per workload is enough.
                workload.share_prompt_hashes(c.block_size);
            }
        }
        // A measured window judges only the requests completed in it, which the early stop's
        // count over every request cannot know: such a run is run to its end.
        let rule = early.filter(|_| workload.measure_window_ns.is_none()).map(|e| (e, e.need(workload.requests.len())));
        let opts = RunOptions { stop_after_slow_ttft: rule.map(|(e, n)| (e.above_ns, n)), ..Default::default() };
        // `sim::simulate` for one engine: the workload, the run, the metrics.
        let run = sim::run_workload(&spec.engine, &spec.cost, &workload, opts);
        if let (StopReason::StoppedEarly { completed }, Some((e, n))) = (&run.stop, rule) {
            let reason = format!(
                "stopped early: {} > {} already certain ({n} of {} requests had a TTFT above {} ms after {completed} completed)",
                e.metric,
                e.bound_ms,
                workload.requests.len(),
                e.bound_ms
            );
            let completed = *completed;
            put_workload(cache, &spec.workload, workload);
            (Err(reason.clone()), Some((e.slo.clone(), reason, completed)))
        } else if let Err(e) = run.stop.completed() {
            // Its metrics would rank a run that did not complete: it is invalid, with the reason.
            put_workload(cache, &spec.workload, workload);
            (Err(e), None)
        } else {
            let metrics = sim::metrics::bench_metrics(&run);
            let out = sim::SimOutput { workload, run, metrics, fleet: None };
            let j = PointReport::of(&spec, &out);
            put_workload(cache, &spec.workload, out.workload);
            (Ok(j), None)
        }
    };
    // Two equal configurations run at once on two threads both simulate: the map keeps one,
    // so that the counts below do not depend on how the configurations fell to threads.
    let mut done = shared.done.lock().expect("not poisoned");
    let same = done.entry(fingerprint).or_default();
    if !same.iter().any(|(s, _, _)| *s == spec) {
        same.push((spec, result.clone(), stopped.clone()));
    }
    (result, stopped)
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
    // A --set on a varied path would be overwritten by every configuration's value, unsaid.
    for s in &a.common.sets {
        let path = sim::config::set_path(s);
        if knobs.iter().any(|(p, _)| p == path) {
            return Err(format!(
                "--set {s}: {path} is also varied (--vary {path}=...): give its values in --vary only"
            ));
        }
    }
    let slos: Vec<Slo> = a.slo.iter().map(|s| parse_slo(s)).collect::<Result<_, _>>()?;
    let mut base = load::read_raw(a.scenario.as_deref())?;
    load::apply_overrides(&mut base, &a.common.sets, a.common.seed)?;
    let mut notes = Vec::new();
    // Varying the memory fraction, an engine flag the pool depends on, the model, the GPU, the TP
    // size or the KV format resizes the pool (`load::resizes_pool`), configuration by
    // configuration as `simulate --set` does (`config::apply_sets`): a pool the scenario pins
    // holds where those knobs keep the scenario's values, moves with the derived pool where only
    // flags and the fraction differ, and is derived elsewhere (vLLM's `num_gpu_blocks_override`
    // holds everywhere, as vLLM holds it); a pool pinned on the command line (`--set
    // engine.kv_cache_tokens=N`) holds in every configuration, as `simulate` with the same `--set`s
    // keeps it. (Until 2026-12-06 the pins were dropped once for the whole grid: the scenario's own
    // configuration ran on a derived pool, 10,240 tokens read as 1,080,608.)
    let path_of = |s: &String| sim::config::set_path(s).to_string();
    let user_pins: Vec<String> = a
        .common
        .sets
        .iter()
        .filter(|s| load::PINNED_POOL.iter().any(|k| path_of(s) == format!("engine.{k}")))
        .cloned()
        .collect();
    // The base scenario resolved (its metrics are checked below; its release read by the notes).
    let (_, base_spec) = load::resolve(&base)?;
    let resized: Vec<&str> = knobs.iter().map(|(p, _)| p.as_str()).filter(|p| load::resizes_pool(p)).collect();
    if !resized.is_empty() {
        let pinned_by_knob = |k: &str| knobs.iter().any(|(p, _)| *p == format!("engine.{k}"));
        let scenario_pins: Vec<&str> = load::PINNED_POOL
            .into_iter()
            .filter(|k| !pinned_by_knob(k))
            .filter(|k| base.json.get("engine").and_then(|e| e.get(*k)).is_some_and(|v| !v.is_null()))
            .collect();
        for k in scenario_pins {
            if user_pins.iter().any(|s| path_of(s) == format!("engine.{k}")) {
                notes.push(format!(
                    "engine.{k} is pinned by --set: the KV pool stays that size in every configuration, so varying {} \
                     does not resize it (as simulate with the same --set's)",
                    resized.join(", ")
                ));
            } else if sim::config::HELD_POOL.contains(&k) && resized.contains(&"engine.kind") {
                notes.push(format!(
                    "engine.{k} holds {} in the vLLM configurations (vLLM uses it in place of its memory \
                     profile) and is dropped in the SGLang ones, whose pool is derived from memory ({} varied)",
                    sim::config::held_what(k),
                    resized.join(", ")
                ));
            } else if sim::config::HELD_POOL.contains(&k) {
                notes.push(format!(
                    "engine.{k} holds {} in every configuration: vLLM uses it in place of its memory \
                     profile, so varying {} does not resize the pool from memory (--set engine.{k}=null derives it)",
                    sim::config::held_what(k),
                    resized.join(", ")
                ));
            } else {
                // An engine flag or the memory fraction moves the log's pool by what the derived
                // pool moves; the rest take another setup's pool (`config::PinChange`).
                // (vLLM 0.34's fraction only caps a pool sized after warm-up: it drops the pin.)
                let caps_only = base_spec.memory_fraction_only_caps();
                let (moving, dropping): (Vec<&str>, Vec<&str>) =
                    resized.iter().partition(|p| sim::config::moves_pin(p, caps_only));
                let mut parts = vec![format!(
                    "engine.{k} (the scenario's KV pool, a start-up log's figure) holds in the configurations that leave \
                     {} as the scenario has it (or where the pool derived from memory comes out the same)",
                    resized.join(", ")
                )];
                if !moving.is_empty() {
                    parts.push(format!(
                        "where {} {}{}, it moves by what the pool derived from memory moves, keeping the log's \
                         offset from servesim's memory account",
                        moving.join(", "),
                        if moving.len() == 1 { "differs" } else { "differ" },
                        if dropping.is_empty() { "" } else { " alone" }
                    ));
                }
                if !dropping.is_empty() {
                    parts.push(format!(
                        "where {} {}, the pool is derived from the memory fraction and the model and GPU cards \
                         (an estimate; see README)",
                        dropping.join(", "),
                        if dropping.len() == 1 { "differs" } else { "differ" }
                    ));
                }
                notes.push(format!("{}, as simulate --set does", parts.join("; ")));
            }
        }
    }
    // A configuration's assignments: the command line's pins first (so that a knob varying the
    // pool itself wins), then the knobs' values.
    let config_sets = |c: &[usize]| -> Vec<String> {
        let mut sets = user_pins.clone();
        sets.extend(c.iter().zip(&knobs).map(|(&i, (p, v))| format!("{p}={}", v[i])));
        sets
    };
    // The caveats of the base scenario's shape and of each value of a varied workload knob
    // (`sim::report::caveats`; each entry carries its own): varying the concurrency is where the
    // lock-step caveat applies, which the base, often at concurrency 1, does not show.
    let mut caveat_ids: Vec<String> = Vec::new();
    let mut add_caveats = |spec: &SimSpec, notes: &mut Vec<String>| {
        for c in sim::report::caveats(spec, &sim::workload::generate(&spec.workload)) {
            if !caveat_ids.contains(&c.id.to_string()) {
                caveat_ids.push(c.id.to_string());
                notes.push(format!("caveat ({}): {}", c.id, c.message));
            }
        }
    };
    add_caveats(&base_spec, &mut notes);
    for (p, values) in knobs.iter().filter(|(p, _)| p.starts_with("workload.")) {
        for v in values {
            let mut r = base.clone();
            if let Ok((_, spec)) =
                load::apply_overrides_quietly(&mut r, &[format!("{p}={v}")], None).and_then(|_| load::resolve(&r))
            {
                add_caveats(&spec, &mut notes);
            }
        }
    }
    // A concurrency above the prompt count never has that many requests in flight: such
    // configurations repeat the one at the prompt count (as `sweep` warns).
    let values_of = |path: &str, base_value: Option<u64>| -> Vec<u64> {
        match knobs.iter().find(|(p, _)| p == path) {
            Some((_, v)) => v.iter().filter_map(Value::as_u64).collect(),
            None => base_value.into_iter().collect(),
        }
    };
    let prompts = values_of("workload.num_prompts", Some(u64::from(base_spec.workload.num_prompts)));
    let conc = values_of("workload.max_concurrency", base_spec.workload.max_concurrency.map(u64::from));
    if let (Some(&c), Some(&n)) = (conc.iter().max(), prompts.iter().min()) {
        if c > n {
            notes.push(format!(
                "workload.max_concurrency {c} exceeds workload.num_prompts {n} in some configurations: at most {n} requests \
                 are ever in flight there, so they measure concurrency {n}; raise workload.num_prompts (several times the \
                 concurrency)"
            ));
        }
    }
    // Every path must name a scenario field: each knob at its first value must resolve
    // (a value the scenario rejects later in the grid is listed as invalid, not an error).
    // (With the command line's pins beside it, as every configuration has them: a knob alone
    // would move a pool the command line pinned as if a log had printed it.)
    // The knobs' first values are tried together first: linked knobs (a GPU count with its TP
    // size, ignore_eos with an output_len_dist) resolve only together, and each alone was
    // refused with advice to set the other, which the command line did (an audit, 2026-12-07).
    // Where together they fail, a knob that resolves alone names a field and its value is
    // judged with the grid's (listed as invalid); one that fails alone too is the error.
    let resolves = |knob_sets: Vec<String>| {
        let mut r = base.clone();
        let mut sets = user_pins.clone();
        sets.extend(knob_sets);
        load::apply_overrides_quietly(&mut r, &sets, None).and_then(|_| load::resolve(&r)).map(|_| ())
    };
    if resolves(knobs.iter().map(|(p, v)| format!("{p}={}", v[0])).collect()).is_err() {
        for (p, v) in &knobs {
            resolves(vec![format!("{p}={}", v[0])]).map_err(|e| format!("--vary {p}: {e}"))?;
        }
    }
    let probe = PointReport::of(
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
    // Each metric named, typed: a report key whose value is a number (as written: a TPOT of
    // one-token outputs is a number the run cannot judge, `one_token_outputs`, not a wrong key).
    // SGLang's own key (`num_retractions`) is one where the grid runs SGLang, whichever engine the
    // base scenario has: a vLLM configuration then lacks it and is listed as invalid (the docs
    // audit of 2026-12-07: from a vLLM base the SLO was refused outright).
    // Which engines the grid runs: the engine.kind knob's values, else the base scenario's.
    let grid_runs_sglang = match knobs.iter().find(|(p, _)| p == "engine.kind") {
        Some((_, v)) => v.iter().any(|x| x.as_str() == Some("sglang")),
        None => matches!(base_spec.engine, sim::config::EngineSpec::Sglang(_)),
    };
    let numeric = |m: &String| -> Result<Metric, String> {
        Metric::parse(m)
            .filter(|k| match k {
                Metric::NumRetractions => grid_runs_sglang,
                _ => probe.bench.num(*k).as_f64().is_some(),
            })
            .ok_or_else(|| format!("{m:?} is not a numeric report key; see `servesim simulate --json` for the keys"))
    };
    let slo_metrics: Vec<Metric> = slos
        .iter()
        .map(|s| numeric(&s.metric).map_err(|e| format!("--slo {:?}: {e}", s.text)))
        .collect::<Result<_, _>>()?;
    let objective = numeric(&a.objective).map_err(|e| format!("--objective: {e}"))?;
    let Some(minimise) = objective.lower_is_better() else {
        return Err(format!(
            "--objective: {objective} has no better direction (a setting, a property of the workload or a gauge): \
             optimise a throughput (output_throughput, request_throughput, ...), a latency (..._ms), duration, \
             num_preemptions, prefix_cache_hit_rate or kv_limited_concurrency"
        ));
    };
    let pareto_latency = numeric(&a.pareto_latency).map_err(|e| format!("--pareto-latency: {e}"))?;
    if pareto_latency.lower_is_better() != Some(true) {
        return Err(format!(
            "--pareto-latency: {pareto_latency} is not a latency (the front trades throughput against a key where lower is \
             better: p99_ttft_ms, mean_tpot_ms, ...)"
        ));
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
    pb.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed}, ETA {eta})")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    // The early stop: the first TTFT-percentile SLO with an upper bound.
    let early: Option<EarlyStop> = if a.no_early_stop { None } else { slos.iter().find_map(EarlyStop::of) };
    let shared = SharedWork::default();
    let evaluate = |configs: &[Config]| -> Vec<Evaluated> {
        configs
            .par_iter()
            .map_init(WorkloadCache::new, |cache, c| {
                let mut raw: RawScenario = base.clone();
                let sets = config_sets(c);
                let (result, stopped) =
                    match load::apply_overrides_quietly(&mut raw, &sets, None).and_then(|_| load::resolve(&raw)) {
                        Ok((_, spec)) => simulate_config(spec, early.as_ref(), &shared, cache),
                        Err(e) => (Err(e), None),
                    };
                pb.inc(1);
                Evaluated { config: c.clone(), result, stopped }
            })
            .collect()
    };
    let score = |m: &PointReport| -> f64 {
        let v = m.metric(objective).unwrap_or(f64::NAN);
        if minimise {
            -v
        } else {
            v
        }
    };
    let meets = |m: &PointReport| {
        slos.iter()
            .zip(&slo_metrics)
            .all(|(s, k)| m.metric(*k).is_some_and(|v| if s.le { v <= s.bound } else { v >= s.bound }))
    };

    let mut evaluated: Vec<Evaluated>;
    let searched;
    if total <= a.max_configs {
        evaluated = evaluate(&(0..total).map(all).collect::<Vec<_>>());
        searched = format!("the full grid of {total} configurations");
    } else {
        // A seeded sample of half the budget (at least one), then coordinate steps from the best
        // feasible configuration until nothing improves; whatever budget is left (nothing feasible
        // found, or the steps converged) goes to more of the seeded sample, and the steps resume
        // from its best. Every configuration of the budget is spent while the grid has more.
        let mut rng = sim::rng::stream(base_spec.workload.seed, "tune.sample");
        let mut idx: Vec<usize> = (0..total).collect();
        idx.shuffle(&mut rng);
        let batch = (a.max_configs / 2).max(1);
        let mut sampled = batch.min(total);
        evaluated = evaluate(&idx[..sampled].iter().map(|&i| all(i)).collect::<Vec<_>>());
        // Membership only (never iterated): which configurations have been evaluated.
        let mut seen: std::collections::HashSet<Config> = evaluated.iter().map(|e| e.config.clone()).collect();
        loop {
            let room = a.max_configs.saturating_sub(evaluated.len());
            if room == 0 {
                break;
            }
            let best = evaluated
                .iter()
                .filter_map(|e| e.result.as_ref().ok().filter(|m| meets(m)).map(|m| (score(m), e.config.clone())))
                .max_by(|x, y| x.0.total_cmp(&y.0));
            let mut neighbours = Vec::new();
            if let Some((_, b)) = best {
                for k in 0..sizes.len() {
                    for d in [-1i64, 1] {
                        let v = b[k] as i64 + d;
                        if v >= 0 && (v as usize) < sizes[k] {
                            let mut c = b.clone();
                            c[k] = v as usize;
                            if !seen.contains(&c) && !neighbours.contains(&c) {
                                neighbours.push(c);
                            }
                        }
                    }
                }
            }
            if neighbours.is_empty() {
                // More of the sample, skipping what the steps already evaluated.
                let mut more = Vec::new();
                while sampled < total && more.len() < batch.min(room) {
                    let c = all(idx[sampled]);
                    sampled += 1;
                    if !seen.contains(&c) {
                        more.push(c);
                    }
                }
                if more.is_empty() {
                    break;
                }
                seen.extend(more.iter().cloned());
                evaluated.extend(evaluate(&more));
            } else {
                neighbours.truncate(room);
                seen.extend(neighbours.iter().cloned());
                evaluated.extend(evaluate(&neighbours));
            }
        }
        searched = format!(
            "{} of the grid's {total} configurations (a seeded sample, refined around the best)",
            evaluated.len()
        );
    }

    pb.finish_and_clear();
    let cfg_json = |c: &Config| -> TuneConfig {
        TuneConfig(c.iter().zip(&knobs).map(|(&i, (p, v))| (p.clone(), v[i].clone())).collect())
    };
    let mut best: Option<(f64, &Evaluated)> = None;
    let mut rejected = Vec::new();
    let mut invalid = Vec::new();
    let mut stopped_early = Vec::new();
    for e in &evaluated {
        if let Some((slo, reason, completed)) = &e.stopped {
            stopped_early.push(TuneStoppedEarly {
                config: cfg_json(&e.config),
                slo: slo.clone(),
                reason: reason.clone(),
                completed: *completed,
            });
            continue;
        }
        // A configuration whose report has no figure for an SLO or the objective (an SGLang
        // retraction count asked of a vLLM configuration) cannot be judged on it: it neither
        // meets the SLO nor ranks (it was once the best, the SLO dropped).
        let unreported = e.result.as_ref().ok().and_then(|m| {
            slo_metrics.iter().chain(std::iter::once(&objective)).find(|k| m.metric(**k).is_none()).copied()
        });
        if let Some(k) = unreported {
            invalid.push(TuneInvalid {
                config: cfg_json(&e.config),
                error: format!(
                    "its report has no {}: an SLO or the objective on it cannot be judged for this configuration",
                    k.key()
                ),
            });
            continue;
        }
        match &e.result {
            Err(err) => invalid.push(TuneInvalid { config: cfg_json(&e.config), error: err.clone() }),
            Ok(m) => {
                let violations: Vec<SloViolation> = slos
                    .iter()
                    .zip(&slo_metrics)
                    .filter_map(|(s, k)| {
                        let v = m.metric(*k)?;
                        let ok = if s.le { v <= s.bound } else { v >= s.bound };
                        (!ok).then(|| SloViolation {
                            slo: s.text.clone(),
                            value: v,
                            bound: s.bound,
                            by: (s.bound != 0.0).then(|| (v - s.bound) / s.bound.abs()),
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
    // (A configuration listed as invalid, its report lacking an SLO's or the objective's figure,
    // is not on the front either: until 2026-12-06 it could be, beating the best.)
    let valid: Vec<(&Evaluated, f64, f64)> = evaluated
        .iter()
        .filter_map(|e| {
            let m = e.result.as_ref().ok()?;
            if slo_metrics.iter().chain(std::iter::once(&objective)).any(|k| m.metric(*k).is_none()) {
                return None;
            }
            Some((e, m.metric(Metric::OutputThroughput)?, m.metric(pareto_latency)?))
        })
        .collect();
    let mut pareto: Vec<&(&Evaluated, f64, f64)> = valid
        .iter()
        .filter(|(_, t, l)| !valid.iter().any(|(_, t2, l2)| (t2 >= t && l2 <= l) && (t2 > t || l2 < l)))
        .collect();
    pareto.sort_by(|x, y| x.1.total_cmp(&y.1));
    // The knee along workload.max_concurrency, when it is varied: the other knobs as in
    // the best configuration (or the first valid one). One definition: sim::sweep::find_knee.
    // Under an open loop (a request rate, or a trace's timestamps) throughput stops growing where
    // the load is met: no knee is searched there (sim::sweep::OPEN_LOOP_KNEE_NOTE), and a note says so.
    let anchor_open = |anchor: &Evaluated| match knobs.iter().position(|(p, _)| p == "workload.request_rate") {
        Some(r) if !base_spec.workload.dataset.is_trace() => {
            knobs[r].1[anchor.config[r]].as_f64().is_some_and(f64::is_finite)
        }
        _ => sim::sweep::open_loop(&base_spec),
    };
    let mut knee_not_searched = false;
    let mut knee_cut_short: Vec<String> = Vec::new();
    let mut knee_incomplete: Vec<String> = Vec::new();
    let knee = knobs.iter().position(|(p, _)| p == "workload.max_concurrency").and_then(|k| {
        let anchor = best.map(|(_, e)| e).or_else(|| valid.first().map(|v| v.0))?;
        if anchor_open(anchor) {
            knee_not_searched = true;
            return None;
        }
        // A concurrency of the line stopped early has no throughput to weigh: a knee drawn
        // without it would be another line's (its last point can never be one), so none is.
        knee_cut_short = evaluated
            .iter()
            .filter(|e| e.stopped.is_some())
            .filter(|e| e.config.iter().enumerate().all(|(j, &v)| j == k || v == anchor.config[j]))
            .map(|e| knobs[k].1[e.config[k]].to_string())
            .collect();
        if !knee_cut_short.is_empty() {
            return None;
        }
        // So has one that did not run to completion or was refused (listed as invalid).
        knee_incomplete = evaluated
            .iter()
            .filter(|e| e.stopped.is_none() && e.result.is_err())
            .filter(|e| e.config.iter().enumerate().all(|(j, &v)| j == k || v == anchor.config[j]))
            .map(|e| knobs[k].1[e.config[k]].to_string())
            .collect();
        if !knee_incomplete.is_empty() {
            return None;
        }
        let mut line: Vec<(f64, &PointReport)> = valid
            .iter()
            .filter(|(e, _, _)| e.config.iter().enumerate().all(|(j, &v)| j == k || v == anchor.config[j]))
            .filter_map(|(e, _, _)| Some((knobs[k].1[e.config[k]].as_f64()?, e.result.as_ref().ok()?)))
            .collect();
        line.sort_by(|x, y| x.0.total_cmp(&y.0));
        let pts: Vec<sim::sweep::KneePoint> = line
            .iter()
            .map(|(c, m)| sim::sweep::KneePoint {
                concurrency: *c,
                output_throughput: m.metric(Metric::OutputThroughput).unwrap_or(0.0),
                mean_ttft_ms: m.metric(Metric::MeanTtftMs).unwrap_or(0.0),
            })
            .collect();
        sim::sweep::knee(&pts)
    });
    if let Some(path) = &a.plot {
        let pts: Vec<(f64, f64, bool, String)> = valid
            .iter()
            .map(|(e, t, l)| (*t, *l, e.result.as_ref().is_ok_and(&meets), config_label(&cfg_json(&e.config))))
            .collect();
        let front: Vec<(f64, f64)> = pareto.iter().map(|(_, t, l)| (*t, *l)).collect();
        let lines: Vec<(String, f64, bool)> = slos
            .iter()
            .filter(|s| s.metric == a.pareto_latency || s.metric == "output_throughput")
            .map(|s| (s.text.clone(), s.bound, s.metric == a.pareto_latency))
            .collect();
        crate::plot::pareto(path, &a.pareto_latency, &pts, &front, &lines)?;
    }
    // Intervals on what is reported (the best, the Pareto front; if the best is not robust,
    // the next feasible configurations by the objective until one is): never the whole search.
    let intervals = {
        let make = |c: &Config| -> Result<(RawScenario, SimSpec), String> {
            let mut raw: RawScenario = base.clone();
            load::apply_overrides_quietly(&mut raw, &config_sets(c), None)?;
            let (_, spec) = load::resolve(&raw)?;
            Ok((raw, spec))
        };
        let (braw, bspec) = match best.map(|(_, e)| e).or_else(|| pareto.first().map(|v| v.0)) {
            Some(e) => make(&e.config)?,
            None => (base.clone(), base_spec.clone()),
        };
        if crate::sweep::Band::of(&braw, &bspec, a.uncertainty)?.is_some() {
            let mut feasible: Vec<(f64, &Evaluated)> = evaluated
                .iter()
                .filter(|e| e.stopped.is_none())
                .filter_map(|e| e.result.as_ref().ok().filter(|m| meets(m)).map(|m| (score(m), e)))
                .collect();
            feasible.sort_by(|x, y| y.0.total_cmp(&x.0));
            let ctx = IntervalCtx { cfg: &cfg_json, slos: &slos, slo_metrics: &slo_metrics, asked: a.uncertainty };
            Some(tune_intervals(
                best.map(|(_, e)| e),
                &pareto.iter().map(|(e, _, _)| *e).collect::<Vec<_>>(),
                &feasible.iter().map(|(_, e)| *e).collect::<Vec<_>>(),
                &make,
                &ctx,
            )?)
        } else {
            None
        }
    };
    if !knee_cut_short.is_empty() {
        notes.push(format!(
            "knee along workload.max_concurrency: not searched: early stopping cut concurrency {} of its line short \
             (the other knobs as in the best configuration); rerun with --no-early-stop for the knee",
            knee_cut_short.join(", ")
        ));
    }
    if !knee_incomplete.is_empty() {
        notes.push(format!(
            "knee along workload.max_concurrency: not searched: concurrency {} of its line did not run to completion \
             or was refused (listed as invalid; the other knobs as in the best configuration)",
            knee_incomplete.join(", ")
        ));
    }
    if knee_not_searched {
        notes.push(format!("knee along workload.max_concurrency: not searched: {}", sim::sweep::OPEN_LOOP_KNEE_NOTE));
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
        stopped_early,
        shared: {
            // Counted by equality, not by which thread ran what: the same for every run.
            let distinct: usize = shared.done.lock().expect("not poisoned").values().map(Vec::len).sum();
            let resolved = shared.resolved.load(std::sync::atomic::Ordering::Relaxed);
            Some(TuneShared {
                simulated: distinct,
                identical: resolved - distinct,
                distinct_workloads: shared.workload_keys.lock().expect("not poisoned").len(),
                distinct_costs: shared.costs.lock().expect("not poisoned").len(),
            })
        },
    };
    let nothing_completed = result.nothing_completed() && !result.invalid.is_empty();
    match (a.json, intervals) {
        (true, None) => println!("{}", serde_json::to_string_pretty(&result).expect("json")),
        (false, None) => print!("{}", text(&result, pareto_latency, &a.slo, None)),
        (true, Some(iv)) => {
            let robust = iv.robust.as_ref().map(|(e, i)| EntryWithIntervals::new(entry(e), i.clone()));
            let j = ResultWithIntervals::new(result, iv, robust);
            println!("{}", serde_json::to_string_pretty(&j).expect("json"));
        }
        (false, Some(iv)) => print!("{}", text(&result, pareto_latency, &a.slo, Some(&iv))),
    }
    if nothing_completed {
        // The report lists why each one is invalid; the answer is not "none meets the SLOs".
        eprintln!(
            "error: none of the configurations searched ran to completion (each one's reason is listed as invalid)"
        );
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// `path=value, ...` of a configuration, for plots and text.
fn config_label(c: &TuneConfig) -> String {
    c.0.iter().map(|(k, v)| format!("{}={v}", k.rsplit('.').next().unwrap_or(k))).collect::<Vec<_>>().join(", ")
}

/// The text rendering of a tune result (with `iv`, the reported configurations' intervals).
fn text(r: &TuneResult, pareto_latency: Metric, slo_args: &[String], iv: Option<&TuneIntervals>) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Searched {}.", r.searched);
    for n in &r.notes {
        let _ = writeln!(s, "note: {n}");
    }
    let f = |m: &PointReport, k: Metric| m.metric(k).unwrap_or(0.0);
    match &r.best {
        None if r.nothing_completed() => {
            let _ = writeln!(s, "No configuration ran to completion.");
        }
        None if r.searched.starts_with("the full grid") => {
            let _ = writeln!(s, "No configuration meets every SLO ({}).", slo_args.join(", "));
        }
        None => {
            let _ = writeln!(
                s,
                "None of the configurations searched meets every SLO ({}); the rest of the grid was not searched: \
                 raise --max-configs to search more of it.",
                slo_args.join(", ")
            );
        }
        Some(b) => {
            let m = &b.metrics;
            let _ = writeln!(s, "Best configuration meeting every SLO (by {}): {}", r.objective, b.config);
            let _ = writeln!(
                s,
                "  output {:.1} tok/s, mean TTFT {:.1} ms, p99 TTFT {:.1} ms, mean TPOT {:.2} ms, p99 ITL {:.2} ms",
                f(m, Metric::OutputThroughput),
                f(m, Metric::MeanTtftMs),
                f(m, Metric::P99TtftMs),
                f(m, Metric::MeanTpotMs),
                f(m, Metric::P99ItlMs)
            );
            if let Some(i) = iv.and_then(|iv| iv.best.as_ref()) {
                s.push_str(&config_intervals_text(i));
            }
        }
    }
    if let Some(iv) = iv {
        let _ = writeln!(s, "{}", iv.robust_note);
        if let Some((e, i)) = &iv.robust {
            let m = e.result.as_ref().expect("valid");
            let _ = writeln!(
                s,
                "  output {}, p99 TTFT {} ms",
                crate::sweep::with_interval(
                    f(m, Metric::OutputThroughput),
                    i.uncertainty.intervals.get(Metric::OutputThroughput.key()),
                    1
                ),
                crate::sweep::with_interval(
                    f(m, Metric::P99TtftMs),
                    i.uncertainty.intervals.get(Metric::P99TtftMs.key()),
                    1
                ),
            );
            s.push_str(&config_intervals_text(i));
        }
    }
    if let Some(k) = &r.knee {
        let _ = writeln!(
            s,
            "Knee along workload.max_concurrency (the other knobs as above): {} ({:.1} tok/s, mean TTFT {:.1} ms).",
            k.max_concurrency, k.output_throughput, k.mean_ttft_ms
        );
    }
    match iv {
        None => {
            let _ = writeln!(s, "\nPareto front (output throughput against {pareto_latency}):");
            for p in &r.pareto {
                let _ = writeln!(
                    s,
                    "  {:>10.1} tok/s  {:>12.1}  {}",
                    f(&p.metrics, Metric::OutputThroughput),
                    f(&p.metrics, pareto_latency),
                    p.config
                );
            }
        }
        Some(iv) => {
            let _ = writeln!(
                s,
                "\nPareto front (output throughput against {pareto_latency}, each [5th–95th percentile]; the SLOs across the interval):"
            );
            let cells: Vec<(String, String)> = r
                .pareto
                .iter()
                .zip(&iv.pareto)
                .map(|(p, i)| {
                    let g = |k: Metric| i.uncertainty.intervals.get(k.key());
                    (
                        crate::sweep::with_interval(
                            f(&p.metrics, Metric::OutputThroughput),
                            g(Metric::OutputThroughput),
                            1,
                        ),
                        crate::sweep::with_interval(f(&p.metrics, pareto_latency), g(pareto_latency), 1),
                    )
                })
                .collect();
            let w0 = cells.iter().map(|c| c.0.chars().count()).max().unwrap_or(0);
            let w1 = cells.iter().map(|c| c.1.chars().count()).max().unwrap_or(0);
            for ((p, i), (t, l)) in r.pareto.iter().zip(&iv.pareto).zip(&cells) {
                let _ = writeln!(s, "  {t:>w0$} tok/s  {l:>w1$}  {}  SLOs: {}", p.config, verdict_tag(i.slo_verdict));
            }
            if let Some(src) = iv.pareto.first().map(|i| &i.uncertainty.source) {
                let _ = writeln!(s, "  (90% intervals: {src})");
            }
        }
    }
    if !r.rejected.is_empty() {
        let _ = writeln!(s, "\nRejected ({}):", r.rejected.len());
        for x in &r.rejected {
            let v: Vec<String> = x
                .violations
                .iter()
                .map(|v| {
                    // Against a bound of 0 there is no relative excess to state.
                    match v.by {
                        None => format!("{} (got {:.1})", v.slo, v.value),
                        Some(by) => format!("{} (got {:.1}, {:+.0}%)", v.slo, v.value, 100.0 * by),
                    }
                })
                .collect();
            let _ = writeln!(s, "  {}: breaks {}", x.config, v.join("; "));
        }
    }
    if !r.stopped_early.is_empty() {
        let _ = writeln!(
            s,
            "\nStopped early ({}: each certain to break an SLO; not on the Pareto front; --no-early-stop runs them out):",
            r.stopped_early.len()
        );
        for x in &r.stopped_early {
            let _ = writeln!(s, "  {}: {}", x.config, x.reason);
        }
    }
    if !r.invalid.is_empty() {
        let _ = writeln!(
            s,
            "\nInvalid ({}: the scenario's validation rejects them, their run did not complete, or their report \
             lacks a figure an SLO or the objective needs):",
            r.invalid.len()
        );
        for i in &r.invalid {
            let _ = writeln!(s, "  {}: {}", i.config, i.error);
        }
    }
    if let Some(sh) = &r.shared {
        let _ = writeln!(
            s,
            "\n({} simulated, {} answered by an identical configuration; {} distinct workloads; {} distinct step costs)",
            sh.simulated, sh.identical, sh.distinct_workloads, sh.distinct_costs
        );
    }
    s
}

// ---------------------------------------------------------------------------
// Intervals on the reported configurations (`--uncertainty`, or a profile with an
// uncertainty block): `simulate`'s rule (crate::sweep::Band), per configuration.

/// At most this many feasible configurations after the best are checked for one whose
/// every SLO holds across its interval (each costs a simulation per coefficient set).
const ROBUST_CANDIDATES: usize = 8;

/// One configuration's intervals and its SLOs against them.
#[derive(Clone, Debug, serde::Serialize)]
struct ConfigIntervals {
    uncertainty: ReportIntervals,
    /// Each SLO: the value, its interval, the verdict ([`SloVerdict`]).
    slo_checks: Vec<SloCheck>,
    /// The weakest of the SLOs' verdicts.
    slo_verdict: SloVerdict,
}

/// The intervals of what `tune` reports.
struct TuneIntervals<'a> {
    best: Option<ConfigIntervals>,
    pareto: Vec<ConfigIntervals>,
    /// The best configuration whose every SLO holds across its interval, when the best
    /// one's do not (searched among the next [`ROBUST_CANDIDATES`] feasible ones).
    robust: Option<(&'a Evaluated, ConfigIntervals)>,
    robust_note: String,
}

/// Resolves a configuration: its raw scenario (the profile it names) and its spec.
type MakeConfig<'a> = dyn Fn(&Config) -> Result<(RawScenario, SimSpec), String> + 'a;

struct IntervalCtx<'a> {
    /// A configuration as its knobs and values.
    cfg: &'a dyn Fn(&Config) -> TuneConfig,
    slos: &'a [Slo],
    slo_metrics: &'a [Metric],
    asked: bool,
}

/// The intervals of `configs` (each simulated with its band's coefficient sets, all in
/// one parallel batch, results in input order).
fn configs_intervals(
    configs: &[&Evaluated],
    make: &MakeConfig,
    ctx: &IntervalCtx,
) -> Result<Vec<ConfigIntervals>, String> {
    let mut bands = Vec::new();
    let mut specs: Vec<Vec<SimSpec>> = Vec::new();
    // A configuration that resolves to the same scenario as an earlier one shares its members.
    let mut resolved: Vec<SimSpec> = Vec::new();
    let mut same_as: Vec<Option<usize>> = Vec::new();
    for e in configs {
        let (raw, spec) = make(&e.config)?;
        let band = crate::sweep::Band::of(&raw, &spec, ctx.asked)?;
        let earlier = resolved.iter().position(|s| *s == spec);
        same_as.push(earlier);
        specs.push(match (&band, earlier) {
            (Some(b), None) => b.member_specs(&spec),
            _ => Vec::new(),
        });
        bands.push(band);
        resolved.push(spec);
    }
    let flat: Vec<SimSpec> = specs.iter().flatten().cloned().collect();
    let pb = crate::plot::progress(flat.len() as u64, "simulating coefficient sets");
    let mut reports = crate::sweep::simulate_members(&flat, None, &pb).into_iter();
    pb.finish_and_clear();
    let mut by_config: Vec<Vec<PointReport>> = Vec::new();
    for (m, earlier) in specs.iter().zip(&same_as) {
        let members = match earlier {
            Some(i) => by_config[*i].clone(),
            None => reports.by_ref().take(m.len()).collect(),
        };
        by_config.push(members);
    }
    let mut out = Vec::new();
    for ((e, band), members) in configs.iter().zip(&bands).zip(&by_config) {
        let members = members.as_slice();
        let center = e.result.as_ref().expect("reported configurations ran");
        let uncertainty = match band {
            Some(b) => b.intervals(center, members),
            // A configuration whose profile has no uncertainty block (a varied cost.profile), no flag.
            None => ReportIntervals::new(
                &::calib::named::Named::new(),
                "no interval: no profile uncertainty block and no --uncertainty",
            ),
        };
        let slo_checks: Vec<SloCheck> = ctx
            .slos
            .iter()
            .zip(ctx.slo_metrics)
            .filter_map(|(s, k)| {
                let value = center.metric(*k)?;
                let interval = uncertainty.intervals.get(k.key()).copied();
                Some(SloCheck {
                    slo: s.text.clone(),
                    value,
                    interval,
                    verdict: SloVerdict::of(value, interval.as_ref(), s.le, s.bound),
                })
            })
            .collect();
        let slo_verdict = SloVerdict::overall(&slo_checks.iter().map(|c| c.verdict).collect::<Vec<_>>());
        out.push(ConfigIntervals { uncertainty, slo_checks, slo_verdict });
    }
    Ok(out)
}

fn tune_intervals<'a>(
    best: Option<&'a Evaluated>,
    pareto: &[&'a Evaluated],
    feasible: &[&'a Evaluated],
    make: &MakeConfig,
    ctx: &IntervalCtx,
) -> Result<TuneIntervals<'a>, String> {
    // The distinct configurations, best first, then the front in its order.
    let mut todo: Vec<&Evaluated> = Vec::new();
    for e in best.into_iter().chain(pareto.iter().copied()) {
        if !todo.iter().any(|x| x.config == e.config) {
            todo.push(e);
        }
    }
    let done = configs_intervals(&todo, make, ctx)?;
    let of = |e: &Evaluated| todo.iter().position(|x| x.config == e.config).map(|i| done[i].clone());
    let best_iv = best.and_then(of);
    let pareto_iv: Vec<ConfigIntervals> = pareto.iter().filter_map(|e| of(e)).collect();
    let (robust, robust_note) = match (&best_iv, best) {
        (None, _) | (_, None) => (None, "No configuration meets every SLO, so none meets them across its 90% interval.".to_string()),
        (Some(i), Some(_)) if i.slo_verdict == SloVerdict::Meets => {
            (None, "The best configuration meets every SLO across its 90% interval: the choice is robust to the model's uncertainty.".to_string())
        }
        // An SLO on a metric without an interval (a p95, a std): met at the estimate, its
        // robustness not judged; not "its 90% interval breaks it".
        (Some(i), Some(_)) if i.slo_verdict == SloVerdict::NoInterval => {
            (None, "The best configuration meets every SLO at its estimate; some SLO's metric has no 90% interval (intervals cover the throughputs, the means, medians and p99s, and the preemptions), so its robustness to the model's uncertainty is not judged.".to_string())
        }
        (Some(_), Some(b)) => {
            // The next feasible configurations by the objective, until one is robust.
            let next: Vec<&Evaluated> =
                feasible.iter().copied().filter(|e| e.config != b.config).take(ROBUST_CANDIDATES).collect();
            let mut cached: Vec<Option<ConfigIntervals>> = next.iter().map(|e| of(e)).collect();
            let missing: Vec<&Evaluated> =
                next.iter().zip(&cached).filter(|(_, c)| c.is_none()).map(|(e, _)| *e).collect();
            let mut fresh = configs_intervals(&missing, make, ctx)?.into_iter();
            for c in cached.iter_mut().filter(|c| c.is_none()) {
                *c = fresh.next();
            }
            let found = next
                .iter()
                .zip(cached)
                .find_map(|(e, c)| c.filter(|c| c.slo_verdict == SloVerdict::Meets).map(|c| (*e, c)));
            let note = match &found {
                Some((e, _)) => format!(
                    "The best configuration meets some SLO at its estimate only (its 90% interval breaks it). Best configuration meeting every SLO across its 90% interval (among the next {} by the objective): {}",
                    next.len(),
                    (ctx.cfg)(&e.config)
                ),
                None => format!(
                    "The best configuration meets some SLO at its estimate only (its 90% interval breaks it), and so do the next {} feasible configurations by the objective: no configuration found whose SLOs hold across the interval.",
                    next.len()
                ),
            };
            (found, note)
        }
    };
    Ok(TuneIntervals { best: best_iv, pareto: pareto_iv, robust, robust_note })
}

/// A short verdict for a row of the Pareto front.
fn verdict_tag(v: SloVerdict) -> &'static str {
    match v {
        SloVerdict::Meets => "meets across the interval",
        SloVerdict::MeetsAtEstimateOnly => "meets at the estimate only",
        SloVerdict::NoInterval => "meets at the estimate (no interval for an SLO's metric)",
        SloVerdict::MissesNoInterval => "misses at the estimate (no interval for an SLO's metric)",
        SloVerdict::MissesAtEstimateOnly => "misses at the estimate, may meet",
        SloVerdict::Misses => "misses across the interval",
    }
}

/// A configuration's intervals in text: the headline line, then each SLO's verdict.
fn config_intervals_text(i: &ConfigIntervals) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "  {}", ::calib::uncertainty::report_line(&i.uncertainty.intervals, &i.uncertainty.source));
    for c in &i.slo_checks {
        let _ = writeln!(
            s,
            "  SLO {}: {}: {}",
            c.slo,
            crate::sweep::with_interval(c.value, c.interval.as_ref(), 1),
            c.verdict.words()
        );
    }
    s
}

/// A reported configuration of `tune --json` with its intervals: `config`, `metrics`, then
/// `uncertainty` (as `simulate --json` writes it), `slo_checks` and `slo_verdict`.
#[derive(serde::Serialize)]
struct EntryWithIntervals {
    #[serde(flatten)]
    entry: TuneEntry,
    #[serde(flatten)]
    intervals: ConfigIntervals,
}

impl EntryWithIntervals {
    fn new(entry: TuneEntry, intervals: ConfigIntervals) -> EntryWithIntervals {
        EntryWithIntervals { entry, intervals }
    }
}

/// [`TuneResult`] with the reported configurations' intervals: the same keys in the same
/// order, then `robust_best` and `robust_note`.
#[derive(serde::Serialize)]
struct ResultWithIntervals {
    best: Option<EntryWithIntervals>,
    pareto: Vec<EntryWithIntervals>,
    rejected: Vec<TuneRejected>,
    invalid: Vec<TuneInvalid>,
    searched: String,
    objective: String,
    slos: Vec<String>,
    notes: Vec<String>,
    knee: Option<sim::sweep::Knee>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    stopped_early: Vec<TuneStoppedEarly>,
    /// The best configuration whose every SLO holds across its 90% interval, when the best
    /// one's do not (null when the best is robust, or none of the candidates is).
    robust_best: Option<EntryWithIntervals>,
    robust_note: String,
}

impl ResultWithIntervals {
    fn new(r: TuneResult, iv: TuneIntervals, robust_best: Option<EntryWithIntervals>) -> ResultWithIntervals {
        // Every field named: a field added to TuneResult fails to compile here until carried.
        let TuneResult {
            best,
            pareto,
            rejected,
            invalid,
            searched,
            objective,
            slos,
            notes,
            knee,
            stopped_early,
            shared: _,
        } = r;
        ResultWithIntervals {
            best: best.zip(iv.best).map(|(e, i)| EntryWithIntervals::new(e, i)),
            pareto: pareto.into_iter().zip(iv.pareto).map(|(e, i)| EntryWithIntervals::new(e, i)).collect(),
            rejected,
            invalid,
            searched,
            objective,
            slos,
            notes,
            knee,
            stopped_early,
            robust_best,
            robust_note: iv.robust_note,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An inline card or list among `--vary`'s values is one value, not cut at its own commas.
    #[test]
    fn vary_values_split_at_top_level_commas_only() {
        let (path, v) = parse_vary(r#"model=qwen3-8b,{"id": "m", "a": [1, 2], "s": "x,\"y"},[3,4]"#).unwrap();
        assert_eq!(path, "model");
        assert_eq!(v.len(), 3, "{v:?}");
        assert_eq!(v[0], "qwen3-8b");
        assert_eq!(v[1]["s"], "x,\"y");
        assert_eq!(v[2], serde_json::json!([3, 4]));
        assert_eq!(parse_vary("engine.max_num_seqs=8,16").unwrap().1.len(), 2);
        assert!(parse_vary("engine.max_num_seqs=8,,16").is_err());
    }

    /// An SLO on a setting of the run (its load or seed) judges nothing and is refused; a
    /// result, a gauge included, is an SLO (the audit of 2026-12-06: `seed<=5` was accepted).
    #[test]
    fn an_slo_on_a_setting_is_refused() {
        for s in ["seed<=5", "num_prompts>=1", "max_concurrency<=5", "request_rate>=1", "burstiness<=1"] {
            let e = parse_slo(s).unwrap_err();
            assert!(e.contains("is a setting of the run"), "{s}: {e}");
        }
        for s in ["p99_ttft_ms<=2000", "output_throughput>=100", "kv_cache_usage_peak<=0.95", "num_preemptions<=0"] {
            assert!(parse_slo(s).is_ok(), "{s}");
        }
    }
}
