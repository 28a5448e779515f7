//! `servesim sweep --json`: each scenario's series is `sim::sweep::sweep_series`,
//! as the binary's; the expansion of `engine.kind=vllm,sglang` and the
//! side-by-side object follow `cli/sweep.rs` (one thread, no files). The
//! browser test holds the output byte-identical to the binary's.

use serde_json::{Map, Value};
use sim::config::SimSpec;
use sim::simulation::RunOptions;
use sim::sweep::{sweep_series, SweepSeries};
use sim::SimOutput;

use crate::{align, apply_overrides, read_raw, resolve_raw, RawScenario, Request};

struct Series {
    label: String,
    raw: RawScenario,
    specs: Vec<SimSpec>,
    notes: Vec<String>,
}

fn expand(req: &Request) -> Result<Vec<(String, RawScenario, Vec<String>)>, String> {
    let (kinds, sets) = align::split_engine_kinds(&req.sets)?;
    let mut out = Vec::new();
    let mut raw = read_raw(req)?;
    apply_overrides(&mut raw, &sets, req.seed)?;
    match &kinds {
        None => {
            let label = raw.origin.clone();
            out.push((label, raw, vec![]));
        }
        Some(ks) => {
            let engine = raw.json.get("engine").and_then(Value::as_object).cloned().unwrap_or_default();
            for (label, translated, notes) in align::engine_variants(&engine, &raw.origin, ks)? {
                let mut r = raw.clone();
                r.json["engine"] = Value::Object(translated);
                r.origin = label.clone();
                out.push((label, r, notes));
            }
        }
    }
    Ok(out)
}

/// What `servesim sweep --json` prints: one scenario's series, or scenarios side by side.
#[derive(Debug, serde::Serialize)]
#[serde(untagged)]
pub enum SweepJson {
    One(SweepSeries),
    SideBySide(align::SideBySide),
}

pub fn sweep(req: &Request) -> Result<SweepJson, String> {
    // The binary's checks of --concurrency, in its order (`cli/sweep.rs` `run`).
    let conc = &req.concurrencies;
    let shown = || conc.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    if conc.is_empty() {
        return Err("--concurrency: give at least one value".into());
    }
    if conc.contains(&0) {
        return Err("--concurrency: values must be at least 1".into());
    }
    if conc.windows(2).any(|w| w[0] >= w[1]) {
        return Err(format!("--concurrency: values must increase, got {}", shown()));
    }
    if let Some(&c) = conc.iter().find(|&&c| c > u64::from(sim::config::MAX_CONCURRENCY)) {
        return Err(format!("--concurrency: {c} is above the limit of {}", sim::config::MAX_CONCURRENCY));
    }
    let conc: Vec<u32> = conc.iter().map(|&c| c as u32).collect(); // each at most MAX_CONCURRENCY
    let conc = &conc;
    let prompts = (!req.num_prompts.is_empty()).then_some(&req.num_prompts);
    if let Some(p) = prompts {
        if p.len() != 1 && p.len() != conc.len() {
            return Err(format!(
                "--num-prompts: give one value or {} (one per concurrency), got {}",
                conc.len(),
                p.len()
            ));
        }
    }
    let mut series = Vec::new();
    for (label, raw, notes) in expand(req)? {
        let mut specs = Vec::with_capacity(conc.len());
        for (i, &c) in conc.iter().enumerate() {
            let mut r = raw.clone();
            let mut sets = vec![format!("workload.max_concurrency={c}")];
            if let Some(p) = prompts {
                sets.push(format!("workload.num_prompts={}", if p.len() == 1 { p[0] } else { p[i] }));
            }
            apply_overrides(&mut r, &sets, None)?;
            specs.push(resolve_raw(&r)?);
        }
        series.push(Series { label, raw, specs, notes });
    }
    let results: Vec<(Series, Vec<SimOutput>)> = series
        .into_iter()
        .map(|s| {
            let o = s.specs.iter().map(|sp| sim::simulate(sp, RunOptions::default())).collect();
            (s, o)
        })
        .collect();
    if results.len() == 1 {
        let (s, o) = &results[0];
        return Ok(SweepJson::One(series_result(s, o, conc)));
    }
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
    let scenarios = results.iter().map(|(s, o)| series_result(s, o, conc)).collect();
    let setup = align::setup_differences(&pairs);
    Ok(SweepJson::SideBySide(align::SideBySide::new(scenarios, &rows, workloads_differ, setup)))
}

fn series_result(s: &Series, outs: &[SimOutput], conc: &[u32]) -> SweepSeries {
    sweep_series(&s.label, conc, &s.specs, outs, s.notes.clone())
}
