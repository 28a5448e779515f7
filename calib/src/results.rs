//! Reading existing benchmark results for `calibrate --from-results`:
//! `vllm bench serve --save-result` JSON (or ours), `sglang.bench_serving` JSONL.

use serde_json::Value;

use crate::measure::Point;

/// The load points of a results file's text (`name` names it in errors).
pub fn parse_results(text: &str, name: &str) -> Result<Vec<Point>, String> {
    let mut out = Vec::new();
    let values: Vec<Value> = match serde_json::from_str::<Value>(text) {
        Ok(v) => vec![v],
        Err(_) => text
            .lines()
            .filter(|l| !l.trim().is_empty())
            .enumerate()
            .map(|(i, l)| serde_json::from_str(l).map_err(|e| format!("{name}:{}: not JSON: {e}", i + 1)))
            .collect::<Result<_, _>>()?,
    };
    for v in values {
        let mut m = v.as_object().cloned().ok_or(format!("{name}: expected a JSON object"))?;
        // sglang.bench_serving names E2E latency differently.
        if let Some(e) = m.get("mean_e2e_latency_ms").cloned() {
            m.entry("mean_e2el_ms").or_insert(e);
        }
        if !m.contains_key("mean_ttft_ms") {
            return Err(format!(
                "{name}: no mean_ttft_ms: not a vllm bench serve --save-result or sglang.bench_serving result"
            ));
        }
        out.push(m);
    }
    Ok(out)
}

/// How the scenario must change to reproduce a result's load point.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadOverrides {
    /// `--set` assignments (concurrency, rate, prompt count).
    pub sets: Vec<String>,
    /// The result ran without a concurrency limit: drop the scenario's.
    pub unlimited_concurrency: bool,
}

/// The overrides of one result point.
pub fn load_overrides(r: &Point) -> LoadOverrides {
    let mut o = LoadOverrides::default();
    match r.get("max_concurrency") {
        Some(Value::Number(n)) => o.sets.push(format!("workload.max_concurrency={n}")),
        Some(Value::Null) => o.unlimited_concurrency = true,
        _ => {}
    }
    match r.get("request_rate") {
        Some(Value::Number(n)) => o.sets.push(format!("workload.request_rate={n}")),
        Some(Value::String(s)) => o.sets.push(format!("workload.request_rate={s}")),
        _ => {}
    }
    if let Some(n) = r.get("num_prompts").or(r.get("completed")).and_then(Value::as_u64) {
        o.sets.push(format!("workload.num_prompts={n}"));
    }
    o
}
