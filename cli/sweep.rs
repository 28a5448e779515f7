//! `servesim sweep`: one simulated run per concurrency, in parallel, results
//! in input order; the knee and the KV-limited concurrency. With several
//! scenarios (or `--set engine.kind=vllm,sglang`), the engines side by side
//! with the flag alignment table.
//!
//! With a profile that carries an `uncertainty` block (or `--uncertainty`), each point
//! gets `simulate`'s 90% intervals ([`Band`], shared with `tune`): the profile's
//! coefficient sets are simulated at every point in one parallel batch, results in input
//! order; member `k` of every point is the same set, so each member's own sweep gives a
//! knee, and the knee's range is their min–max.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use ::calib::uncertainty::{self as unc, Interval, ProfileUncertainty, ReportIntervals};
use clap::Args;
use rayon::prelude::*;
use serde_json::{Map, Value};
use sim::config::{EngineKind, SimSpec};
use sim::report::{BenchReport, PointReport};
use sim::simulation::{RunOptions, StopReason};
use sim::sweep::{sweep_series, SweepSeries};
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
    /// Print `{"points": [...], "knee": {...}, "kv_limited_concurrency": N, ...}` (one scenario),
    /// or `{"scenarios": [...], "alignment": [...], "knobs_moved": [...], ...}` (several); README
    /// lists every key.
    #[arg(long)]
    pub json: bool,
    /// Worker threads (default: one per core; at most one per run). Results do not depend on it.
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Write throughput and TTFT against concurrency, knee and KV limit marked, as SVG.
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<String>,
    /// Put a 90% interval on every point even without a profile (the uncalibrated model's
    /// error on the validation corpus). With a profile that carries an uncertainty block,
    /// the intervals are always given: its coefficient sets are swept too, and the knee
    /// gets its range over them.
    #[arg(long)]
    pub uncertainty: bool,
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
    let (kinds, sets) = align::split_engine_kinds(&a.common.sets)?;
    if let Some(ks) = &kinds {
        if let Some(k) = ks.iter().enumerate().find_map(|(i, k)| ks[..i].contains(k).then_some(k)) {
            return Err(format!("--set engine.kind={}: {k:?} is listed twice", ks.join(",")));
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
                let engine = raw.json.get("engine").and_then(Value::as_object).cloned().unwrap_or_default();
                for (label, translated, notes) in align::engine_variants(&engine, &raw.origin, ks)? {
                    let mut r = raw.clone();
                    r.json["engine"] = Value::Object(translated);
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
    // Each point sets workload.max_concurrency from --concurrency: a --set of it would be
    // overwritten at every point without a word.
    if let Some(s) = a.common.sets.iter().find(|s| s.trim_start().starts_with("workload.max_concurrency")) {
        return Err(format!(
            "--set {s}: a sweep sets workload.max_concurrency at each point from --concurrency; give the values there"
        ));
    }
    // Likewise --num-prompts: a --set of the count beside it was overwritten at every point.
    if let Some(s) = a
        .num_prompts
        .as_ref()
        .and_then(|_| a.common.sets.iter().find(|s| sim::config::set_path(s) == "workload.num_prompts"))
    {
        return Err(format!("--set {s} and --num-prompts both give workload.num_prompts: give one"));
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
        // Named as the flag the user typed (it was `workload.num_prompts`, the field it sets).
        if p.contains(&0) {
            return Err(format!(
                "--num-prompts: values must be at least 1, got {:?}",
                a.num_prompts.as_deref().unwrap_or("")
            ));
        }
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
    // The intervals' source per series, decided before anything runs (a bad profile stops the sweep).
    let bands: Vec<Option<Band>> =
        series.iter().map(|s| Band::of(&s.raw, &s.specs[0], a.uncertainty)).collect::<Result<_, _>>()?;
    let all: Vec<&SimSpec> = series.iter().flat_map(|s| s.specs.iter()).collect();
    // More threads than runs would only be started and left idle (ten thousand of them take
    // longer to start than the sweep takes): at most one a run.
    let pool = match a.jobs {
        Some(n) => Some(
            rayon::ThreadPoolBuilder::new()
                .num_threads(n.min(all.len().max(1)))
                .build()
                .map_err(|e| format!("--jobs: {e}"))?,
        ),
        None => None,
    };
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
    let outs = match &pool {
        Some(p) => p.install(work),
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

    // Each series' typed result: the JSON, and what the text renders.
    let mut series: Vec<SweepSeries> = results.iter().map(|(s, o)| series_result(s, o, &conc)).collect();
    // With intervals (a profile's uncertainty block, or --uncertainty): each series' own.
    let intervals: Option<Vec<Option<SeriesIntervals>>> = if bands.iter().any(Option::is_some) {
        Some(series_intervals(&results, &series, &bands, &conc, pool.as_ref()))
    } else {
        None
    };
    if let Some(path) = &a.plot {
        let lines: Vec<crate::plot::Series> = results
            .iter()
            .enumerate()
            .map(|(k, (s, o))| crate::plot::Series {
                label: format!("{} {}", s.specs[0].engine.kind(), s.specs[0].engine.version()),
                points: conc
                    .iter()
                    .zip(o)
                    .map(|(&c, x)| (f64::from(c), x.metrics.output_throughput, x.metrics.ttft.mean, x.metrics.ttft.p99))
                    .collect(),
                dashed: false,
                band: intervals
                    .as_ref()
                    .and_then(|iv| iv[k].as_ref())
                    .map(|si| {
                        let get = |r: &ReportIntervals, key: &str| {
                            r.intervals
                                .iter()
                                .find(|(n, _)| *n == key)
                                .map_or((f64::NAN, f64::NAN), |(_, i)| (i.p05, i.p95))
                        };
                        conc.iter()
                            .zip(&si.points)
                            .map(|(&c, r)| {
                                let (t0, t1) = get(r, "output_throughput");
                                let (l0, l1) = get(r, "mean_ttft_ms");
                                (f64::from(c), t0, t1, l0, l1)
                            })
                            .collect::<Vec<_>>()
                    })
                    .filter(|b| b.iter().all(|p| [p.1, p.2, p.3, p.4].iter().all(|v| v.is_finite()))),
            })
            .collect();
        // The first series' own figure, the one its text states (from its point with the largest
        // request sample; its first point's could differ where `--num-prompts` varies).
        let s0 = &results[0].0;
        let kv = series[0].kv_limited_concurrency;
        let mut marks = vec![(kv as f64, format!("KV-limited concurrency {kv}"))];
        if let Some(k) = series[0].knee.as_ref() {
            marks.push((k.max_concurrency as f64, format!("knee {}", k.max_concurrency)));
        }
        crate::plot::sweep(path, &s0.label, &lines, &marks)?;
    }
    if results.len() == 1 {
        match (a.json, intervals) {
            (true, None) => println!("{}", serde_json::to_string_pretty(&series[0]).expect("serializable")),
            (false, None) => print!("{}", series_text(&series[0], &conc)),
            (true, Some(mut iv)) => {
                let j = SeriesWithIntervals::new(series.remove(0), iv.remove(0));
                println!("{}", serde_json::to_string_pretty(&j).expect("serializable"));
            }
            (false, Some(iv)) => {
                print!("{}", series_text(&series[0], &conc));
                if let Some(i) = &iv[0] {
                    println!();
                    print!("{}", intervals_text(&series[0], i, &conc));
                }
            }
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
        let setup = align::setup_differences(&pairs);
        if a.json {
            let j = align::SideBySide::new(std::mem::take(&mut series), &rows, workloads_differ, setup);
            match intervals {
                None => println!("{}", serde_json::to_string_pretty(&j).expect("serializable")),
                Some(iv) => {
                    // Every field named: a field added to SideBySide fails to compile here until carried.
                    let align::SideBySide { scenarios, alignment, knobs_moved, workloads_differ, setup_differs } = j;
                    let j = SideBySideWithIntervals {
                        scenarios: scenarios.into_iter().zip(iv).map(|(s, i)| SeriesWithIntervals::new(s, i)).collect(),
                        alignment,
                        knobs_moved,
                        workloads_differ,
                        setup_differs,
                    };
                    println!("{}", serde_json::to_string_pretty(&j).expect("serializable"));
                }
            }
        } else {
            let mut s = String::new();
            for (k, ((se, _), r)) in results.iter().zip(&series).enumerate() {
                let sp = &se.specs[0];
                let _ = writeln!(s, "== {} ({} {}) ==", se.label, sp.engine.kind(), sp.engine.version());
                s.push_str(&series_text(r, &conc));
                if let Some(i) = intervals.as_ref().and_then(|iv| iv[k].as_ref()) {
                    let _ = writeln!(s);
                    s.push_str(&intervals_text(r, i, &conc));
                }
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
            if !setup.is_empty() {
                let _ = writeln!(s, "Also differ (beyond the aligned knobs):");
                for d in &setup {
                    let _ = writeln!(s, "  {d}");
                }
            }
            let all: Vec<String> = moved
                .iter()
                .map(|m| m.to_string())
                .chain(setup.iter().map(|d| d.split(':').next().unwrap_or(d).to_string()))
                .collect();
            if all.len() > 1 {
                let _ = writeln!(
                    s,
                    "WARNING: this comparison moves {} things at once ({}): a difference in the results cannot be put down to any one of them. Align them with --set to compare one dimension at a time.",
                    all.len(),
                    all.join(", ")
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
        let hr = match (m.prefix_cache_queries, m.prefix_cache_hits) {
            (Some(q), Some(h)) if q > 0 => 100.0 * h as f64 / q as f64,
            (Some(_), Some(_)) => 0.0,
            _ => f64::NAN,
        };
        let mark = if m.stop_reason != StopReason::Completed.as_str() {
            " <- did not complete (WARNING below)"
        } else if knee == Some(i) {
            " <- knee"
        } else {
            ""
        };
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
            m.num_preemptions.map_or_else(|| "n/a".to_string(), |n| n.to_string()),
            hr,
            100.0 * m.kv_cache_usage_peak
        );
    }
    let _ = writeln!(t);
    match knee {
        None if r.knee_note.is_some() => {
            let _ = writeln!(t, "Knee: not searched: {}.", r.knee_note.as_deref().unwrap_or_default());
        }
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
    // A caveat once per message, with the concurrencies it applies to (`sim::report::Caveat`),
    // in the order the points first give them: a message that names a point's own figures (its
    // preemptions, which of its two TTFT figures is the higher) is that point's, not the
    // sweep's.
    let mut seen: Vec<(&sim::report::Caveat, Vec<usize>)> = Vec::new();
    for (i, p) in r.points.iter().enumerate() {
        for cv in &p.caveats {
            match seen.iter_mut().find(|(s, _)| s.id == cv.id && s.message == cv.message) {
                Some((_, at)) => at.push(i),
                None => seen.push((cv, vec![i])),
            }
        }
    }
    for (cv, at) in seen {
        let names: Vec<String> = at.iter().map(|&i| conc[i].to_string()).collect();
        let _ = writeln!(t, "Caveat ({}, at concurrency {}): {}", cv.id, names.join(", "), cv.message);
        // Each of those points' own desynchronised figure (`sim::report::desynchronised_mean_ttft_ms`).
        let figures: Vec<String> = at
            .iter()
            .filter_map(|&i| {
                r.points[i]
                    .caveats
                    .iter()
                    .find(|x| x.id == cv.id)
                    .and_then(|x| x.desynchronised_mean_ttft_ms)
                    .map(|d| format!("{d:.2} ms at {}", conc[i]))
            })
            .collect();
        if !figures.is_empty() {
            let _ = writeln!(t, "  {}", sim::report::desynchronised_sentence(&figures));
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

// ---------------------------------------------------------------------------
// 90% intervals (`--uncertainty`, or a profile with an `uncertainty` block): the
// same rule as `simulate` (cli/calib.rs `intervals`), shared with `tune`.

/// Where a run's intervals come from.
pub(crate) enum Band {
    /// The profile's coefficient sets (ensemble, else drawn from its covariance): each
    /// simulated; `center`: the coefficients the profile set; `source` in `simulate`'s words.
    Members { u: Box<ProfileUncertainty>, center: sim::cost::CostCoefficients, source: String },
    /// No profile (or one without an uncertainty block), `--uncertainty` given: the
    /// uncalibrated model's error on the validation corpus for the GPU and engine.
    Uncalibrated(unc::UncalibratedSource),
}

impl Band {
    /// The band of a resolved scenario: its profile's when it has an uncertainty block;
    /// else the uncalibrated one when `asked`; else None (no intervals, output as before).
    pub(crate) fn of(raw: &RawScenario, spec: &SimSpec, asked: bool) -> Result<Option<Band>, String> {
        if let Some(path) = crate::calib::profile_path(raw) {
            let text = std::fs::read_to_string(&path).map_err(|e| format!("cost.profile {}: {e}", path.display()))?;
            let v: Value = serde_json::from_str(&text).map_err(|e| format!("cost.profile {}: {e}", path.display()))?;
            if let Some(u) = ProfileUncertainty::from_profile_json(&v)
                .map_err(|e| format!("cost.profile {}: {e}", path.display()))?
            {
                let center = unc::profile_center(spec);
                let n = u.sample(&center, unc::SAMPLES).len();
                let source = unc::profile_source(&u, n, &path.display().to_string());
                return Ok(Some(Band::Members { u: Box::new(u), center, source }));
            }
        }
        Ok(asked.then(|| Band::Uncalibrated(unc::uncalibrated_for(spec))))
    }

    /// The specs to simulate for `spec`'s interval (none for the uncalibrated band).
    pub(crate) fn member_specs(&self, spec: &SimSpec) -> Vec<SimSpec> {
        match self {
            Band::Members { u, center, .. } => unc::sampled_specs(spec, u, center),
            Band::Uncalibrated(_) => Vec::new(),
        }
    }

    /// The intervals of a prediction `center` from its members' reports.
    pub(crate) fn intervals(&self, center: &PointReport, members: &[PointReport]) -> ReportIntervals {
        let (i, source) = self.named_intervals(center, members);
        ReportIntervals::new(&i, &source)
    }

    /// The same as named intervals, with where they came from.
    pub(crate) fn named_intervals(
        &self,
        center: &PointReport,
        members: &[PointReport],
    ) -> (calib::named::Named<unc::Interval>, String) {
        match self {
            Band::Members { u, source, .. } => {
                // Members whose run did not complete are left out of the interval, and said.
                let stopped: Vec<&PointReport> =
                    members.iter().filter(|m| !sim::report::Metrics::completed(*m)).collect();
                let source = match stopped.first() {
                    None => source.clone(),
                    Some(first) => format!(
                        "{source}; {} of the {} sets did not complete ({}) and are left out",
                        stopped.len(),
                        members.len(),
                        first.bench.stop_reason
                    ),
                };
                (u.intervals(center, members), source)
            }
            Band::Uncalibrated(src) => {
                let b = &center.bench;
                let ceiling = b.last_arrival_s.map(|t| b.duration / t);
                (unc::uncalibrated_intervals(center, src, ceiling), src.source.clone())
            }
        }
    }
}

/// Simulates `specs` in parallel (on `pool` when given), reports in input order.
pub(crate) fn simulate_members(
    specs: &[SimSpec],
    pool: Option<&rayon::ThreadPool>,
    pb: &indicatif::ProgressBar,
) -> Vec<PointReport> {
    let work = || {
        specs
            .par_iter()
            .map(|s| {
                let r = unc::predict_point(s);
                pb.inc(1);
                r
            })
            .collect::<Vec<_>>()
    };
    match pool {
        Some(p) => p.install(work),
        None => work(),
    }
}

/// `412.0 [380.0–460.0]`: a value and its interval, at `prec` decimals.
pub(crate) fn with_interval(v: f64, i: Option<&Interval>, prec: usize) -> String {
    match i {
        Some(i) => format!("{v:.prec$} [{:.prec$}–{:.prec$}]", i.p05, i.p95),
        None => format!("{v:.prec$}"),
    }
}

/// One series' intervals: per point, and the knee's range over the members.
struct SeriesIntervals {
    points: Vec<ReportIntervals>,
    knee_range: Option<unc::KneeRange>,
}

/// A point of `sweep --json` with its intervals: the report's keys, then `uncertainty`
/// (as `simulate --json` writes it).
#[derive(serde::Serialize)]
struct PointWithIntervals {
    #[serde(flatten)]
    point: PointReport,
    /// Absent on a series with no intervals (side by side, beside one that has them).
    #[serde(skip_serializing_if = "Option::is_none")]
    uncertainty: Option<ReportIntervals>,
}

/// [`SweepSeries`] with each point's intervals and the knee's range: the same keys in the
/// same order, `knee_range` after `knee` (only with an ensemble).
#[derive(serde::Serialize)]
struct SeriesWithIntervals {
    scenario: String,
    engine: String,
    points: Vec<PointWithIntervals>,
    knee: Option<sim::sweep::Knee>,
    #[serde(skip_serializing_if = "Option::is_none")]
    knee_note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    knee_range: Option<unc::KneeRange>,
    kv_limited_concurrency: u64,
    kv_request_footprint_tokens: u64,
    kv_cache_tokens: u64,
    kv_limit_explanation: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    translation_notes: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    warnings: Vec<String>,
}

impl SeriesWithIntervals {
    fn new(s: SweepSeries, i: Option<SeriesIntervals>) -> SeriesWithIntervals {
        // Every field named: a field added to SweepSeries fails to compile here until it is carried.
        let SweepSeries {
            scenario,
            engine,
            points,
            knee,
            knee_note,
            kv_limited_concurrency,
            kv_request_footprint_tokens,
            kv_cache_tokens,
            kv_limit_explanation,
            translation_notes,
            warnings,
        } = s;
        let (per_point, knee_range) = match i {
            // No knee is searched in an open loop, nor in its members' sweeps.
            Some(i) => (i.points.into_iter().map(Some).collect(), i.knee_range.filter(|_| knee_note.is_none())),
            None => (vec![None; points.len()], None),
        };
        SeriesWithIntervals {
            scenario,
            engine,
            points: points
                .into_iter()
                .zip(per_point)
                .map(|(point, uncertainty)| PointWithIntervals { point, uncertainty })
                .collect(),
            knee,
            knee_note,
            knee_range,
            kv_limited_concurrency,
            kv_request_footprint_tokens,
            kv_cache_tokens,
            kv_limit_explanation,
            translation_notes,
            warnings,
        }
    }
}

/// `align::SideBySide` with each series' intervals.
#[derive(serde::Serialize)]
struct SideBySideWithIntervals {
    scenarios: Vec<SeriesWithIntervals>,
    alignment: Vec<align::AlignmentRow>,
    knobs_moved: Vec<&'static str>,
    workloads_differ: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    setup_differs: Vec<String>,
}

/// The text of a series' intervals: a table of the headline metrics, each `value [p05–p95]`,
/// then the knee's range over the members.
fn intervals_text(r: &SweepSeries, i: &SeriesIntervals, conc: &[u32]) -> String {
    let mut t = String::new();
    let source = i.points.first().map(|p| p.source.as_str()).unwrap_or("");
    let _ = writeln!(t, "90% intervals ({source}):");
    let cols: [(&str, sim::report::Metric, usize); 5] = [
        ("out tok/s", sim::report::Metric::OutputThroughput, 1),
        ("mean TTFT (ms)", sim::report::Metric::MeanTtftMs, 1),
        ("p99 TTFT (ms)", sim::report::Metric::P99TtftMs, 1),
        ("mean TPOT (ms)", sim::report::Metric::MeanTpotMs, 2),
        ("mean E2EL (ms)", sim::report::Metric::MeanE2elMs, 1),
    ];
    let cells: Vec<Vec<String>> = r
        .points
        .iter()
        .zip(&i.points)
        .map(|(p, iv)| {
            cols.iter()
                .map(|(_, k, prec)| {
                    use sim::report::Metrics as _;
                    // A figure the run has none of (TPOT where every output is one token).
                    match p.metric(*k) {
                        Some(v) => with_interval(v, iv.intervals.get(k.key()), *prec),
                        None => "n/a".to_string(),
                    }
                })
                .collect()
        })
        .collect();
    let widths: Vec<usize> = (0..cols.len())
        .map(|c| cells.iter().map(|row| row[c].chars().count()).chain([cols[c].0.len()]).max().unwrap_or(0))
        .collect();
    let mut head = format!("{:>11}", "concurrency");
    for (c, (name, _, _)) in cols.iter().enumerate() {
        head.push_str(&format!("  {name:>w$}", w = widths[c]));
    }
    let _ = writeln!(t, "{head}");
    for (k, row) in cells.iter().enumerate() {
        let mut line = format!("{:>11}", conc[k]);
        for (c, cell) in row.iter().enumerate() {
            line.push_str(&format!("  {cell:>w$}", w = widths[c]));
        }
        let _ = writeln!(t, "{line}");
    }
    match &i.knee_range {
        Some(kr) => {
            let _ = writeln!(t, "{}", kr.words(conc.last().copied().unwrap_or(0)));
        }
        None => {
            let _ = writeln!(
                t,
                "Knee range: not computed (the uncalibrated band scales each point; it has no coefficient sets to sweep)."
            );
        }
    }
    t
}

/// Each series' intervals (None for a series without a band): every member of every point
/// of every series simulated in one parallel batch, results in input order; then per point
/// the interval, and per series the knee of each member's own sweep.
fn series_intervals(
    results: &[(Series, Vec<SimOutput>)],
    series: &[SweepSeries],
    bands: &[Option<Band>],
    conc: &[u32],
    pool: Option<&rayon::ThreadPool>,
) -> Vec<Option<SeriesIntervals>> {
    // members[series][point] = that point's member specs.
    let members: Vec<Vec<Vec<SimSpec>>> = results
        .iter()
        .zip(bands)
        .map(|((s, _), b)| match b {
            Some(b) => s.specs.iter().map(|sp| b.member_specs(sp)).collect(),
            None => Vec::new(),
        })
        .collect();
    let flat: Vec<SimSpec> = members.iter().flatten().flatten().cloned().collect();
    let pb = crate::plot::progress(flat.len() as u64, "simulating coefficient sets");
    let mut reports = simulate_members(&flat, pool, &pb).into_iter();
    pb.finish_and_clear();
    members
        .iter()
        .zip(bands)
        .zip(series)
        .map(|((per_point, band), r)| {
            let band = band.as_ref()?;
            let per_point: Vec<Vec<PointReport>> =
                per_point.iter().map(|m| reports.by_ref().take(m.len()).collect()).collect();
            let points = r.points.iter().zip(&per_point).map(|(c, m)| band.intervals(c, m)).collect();
            let knee_range = match band {
                Band::Members { .. } => {
                    // Member k of every point is the same coefficient set: its own sweep.
                    let n = per_point.iter().map(Vec::len).min().unwrap_or(0);
                    let by_member: Vec<Vec<&PointReport>> =
                        (0..n).map(|k| per_point.iter().map(|m| &m[k]).collect()).collect();
                    Some(unc::knee_range(conc, &by_member))
                }
                Band::Uncalibrated(_) => None,
            };
            Some(SeriesIntervals { points, knee_range })
        })
        .collect()
}
