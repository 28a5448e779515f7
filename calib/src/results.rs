//! Reading existing benchmark results for `calibrate --from-results`:
//! `vllm bench serve --save-result` JSON (or ours), `sglang.bench_serving` JSONL.

use serde_json::{Map, Value};
use sim::report::{Metric, Metrics};

/// One load point of a results file: how to reproduce its load, and the report metrics it
/// publishes (a source may publish any subset: percentiles only, throughput only).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ResultPoint {
    pub load: LoadOverrides,
    /// Each report metric the result gives as a number, in report order.
    pub metrics: Vec<(Metric, f64)>,
}

impl Metrics for ResultPoint {
    fn metric(&self, m: Metric) -> Option<f64> {
        self.metrics.iter().find(|(k, _)| *k == m).map(|(_, v)| *v)
    }
}

/// The load points of a results file's text (`name` names it in errors).
pub fn parse_results(text: &str, name: &str) -> Result<Vec<ResultPoint>, String> {
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
        for (theirs, ours) in [
            ("mean_e2e_latency_ms", "mean_e2el_ms"),
            ("median_e2e_latency_ms", "median_e2el_ms"),
            ("p99_e2e_latency_ms", "p99_e2el_ms"),
        ] {
            if let Some(e) = m.get(theirs).cloned() {
                m.entry(ours).or_insert(e);
            }
        }
        // A source may publish any subset of the fitted metrics (percentiles only, throughput
        // only): the fit uses what is there. A point with none of them cannot be fitted.
        let point = ResultPoint {
            load: load_overrides(&m),
            metrics: Metric::ALL.iter().filter_map(|&k| Some((k, m.get(k.key())?.as_f64()?))).collect(),
        };
        if !crate::fit::TARGETS.iter().any(|&t| point.metric(t).is_some_and(|v| v.is_finite() && v > 0.0)) {
            return Err(format!(
                "{name}: none of {}: not a vllm bench serve --save-result or sglang.bench_serving result",
                crate::fit::TARGETS.map(Metric::key).join(", ")
            ));
        }
        out.push(point);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_result_without_a_mean_ttft_is_read() {
        let p = parse_results(
            r#"{"output_throughput": 812.5, "p99_ttft_ms": 420.0, "p99_tpot_ms": 31.0, "max_concurrency": 8}"#,
            "r.json",
        )
        .unwrap();
        assert_eq!(p.len(), 1);
        assert!(parse_results(r#"{"max_concurrency": 8}"#, "r.json").unwrap_err().contains("none of mean_ttft_ms"));
        let sg = parse_results("{\"median_e2e_latency_ms\": 900.0}\n", "s.jsonl").unwrap();
        assert_eq!(sg[0].metric(Metric::MedianE2elMs), Some(900.0));
    }
}

/// How the scenario must change to reproduce a result's load point.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LoadOverrides {
    /// `--set` assignments (concurrency, rate, prompt count).
    pub sets: Vec<String>,
    /// The result ran without a concurrency limit: drop the scenario's.
    pub unlimited_concurrency: bool,
}

/// The overrides of one result point (the result's JSON object).
fn load_overrides(r: &Map<String, Value>) -> LoadOverrides {
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
