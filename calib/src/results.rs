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
    /// The prompt tokens the result measured (`total_input_tokens`), where it says.
    pub total_input_tokens: Option<f64>,
    /// The output tokens it measured (`total_output_tokens`), where it says.
    pub total_output_tokens: Option<f64>,
    /// The requests those totals are over, and the field that says it: `completed`, or
    /// `num_prompts` where a file leaves `completed` out (a run whose requests did not all
    /// complete is refused when either says so); `None` where the file gives neither
    /// ([`ResultPoint::mean_lengths`] then takes the scenario's count).
    pub requests: Option<(f64, &'static str)>,
    /// The run replayed a trace's arrivals (`request_rate: "trace"`, servesim's own report).
    pub replayed_trace: bool,
    /// What the file says it ran on, where it says.
    pub stated: StatedDeployment,
    /// The file has no `max_concurrency` key at all (not `null`, which says no limit): the point
    /// runs at the scenario's, said by [`check_against_scenario`].
    pub max_concurrency_absent: bool,
    /// The client's `backend` (`vllm bench serve --backend`, `sglang.bench_serving --backend`),
    /// where the file says it.
    pub backend: Option<String>,
    /// The prompt and output lengths the client was set to (`random_input_len`,
    /// `random_output_len`, which `sglang.bench_serving` writes), with its `dataset_name`.
    pub stated_lengths: StatedLengths,
}

/// The random dataset's settings a result file states (`sglang.bench_serving` writes them).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatedLengths {
    pub dataset_name: Option<String>,
    pub random_input_len: Option<u64>,
    pub random_output_len: Option<u64>,
    /// `random_range_ratio` as the line gives it (`sglang.bench_serving` writes it in every
    /// release from 0.4.10 on; its meaning is SGLang's, not servesim's: see
    /// [`sglang_random_equivalent`]).
    pub random_range_ratio: Option<f64>,
}

/// The datasets of `sglang.bench_serving` whose lengths its `--random-input-len`,
/// `--random-output-len` and `--random-range-ratio` set (0.4.10 bench_serving.py:659; 0.5.23
/// datasets/__init__.py:26).
pub const SGLANG_RANDOM_DATASETS: [&str; 2] = ["random", "random-ids"];

/// The servesim random workload (`random_input_len`, `random_output_len`, `random_range_ratio`)
/// whose lengths are those `sglang.bench_serving` drew at `input_len`, `output_len` and range
/// ratio `r`, or `None` where servesim cannot express them. SGLang draws each prompt's length
/// uniformly among the integers `max(⌊L·r⌋, 1) ..= L` and each output's among
/// `⌊O·r⌋ ..= O` (`max(…, 1)` from 0.5.7) (0.4.10 bench_serving.py:1023-1032, 0.5.23
/// datasets/common.py:56-64): a mean of about L(1+r)/2. servesim (vLLM's rule) draws on
/// `L'(1−r') ..= L'(1+r')`: the same spread is L' = L(1+r)/2 (the bounds' midpoint, rounded),
/// r' = (1−r)/(1+r), which is below 1 (servesim's range) only for r > 0. At r = 1 the lengths
/// are fixed: (L, O, 0).
pub fn sglang_random_equivalent(input_len: u64, output_len: u64, r: f64) -> Option<(u64, u64, f64)> {
    if !(r > 0.0 && r <= 1.0) {
        return None;
    }
    let mid = |l: u64| {
        let lo = ((l as f64 * r).floor() as u64).max(1).min(l);
        ((lo + l) as f64 / 2.0).round() as u64
    };
    Some((mid(input_len), mid(output_len), (1.0 - r) / (1.0 + r)))
}

/// The deployment a results file states: `vllm bench serve` writes the served `model_id`;
/// servesim's own reports also its `engine`, `engine_version`, `hardware` and a fleet's
/// `fleet.num_replicas`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatedDeployment {
    pub engine: Option<String>,
    pub engine_version: Option<String>,
    pub model_id: Option<String>,
    pub hardware: Option<String>,
    pub num_replicas: Option<u64>,
    /// What `sglang.bench_serving` (from 0.5.6) copied from the server's `/get_server_info`
    /// into `server_info` (a disaggregated server's first `decode` entry): its `version`,
    /// `model_path` and `tp_size`.
    pub server_info: StatedServerInfo,
}

/// Whether a release a result states (`engine_version`, `server_info.version`) is the
/// scenario's: compared as releases, so that a post-release or a fourth number (SGLang's
/// `0.5.6.post2`, vLLM's `0.10.1.1`), which servesim models as its release, is not read as
/// another one (their strings had been compared, and such a file refused).
pub fn same_release(stated: &str, scenario: sim::engine::Version) -> bool {
    sim::engine::Version::parse(stated) == Some(scenario)
}

/// The fields of an SGLang line's `server_info` that say what it ran on.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StatedServerInfo {
    pub version: Option<String>,
    pub model_path: Option<String>,
    pub tp_size: Option<u64>,
}

impl StatedDeployment {
    fn of(m: &Map<String, Value>) -> StatedDeployment {
        let s = |k: &str| m.get(k).and_then(Value::as_str).map(str::to_string);
        StatedDeployment {
            // `vllm bench serve --metadata engine=vLLM` writes the name as typed: an engine's
            // name is one word whatever its case (it was refused as another engine than vllm).
            engine: s("engine").map(|e| e.to_ascii_lowercase()),
            engine_version: s("engine_version"),
            model_id: s("model_id"),
            hardware: s("hardware"),
            num_replicas: m.get("fleet").and_then(|f| f.get("num_replicas")).and_then(Value::as_u64),
            server_info: m.get("server_info").map_or_else(StatedServerInfo::default, |i| {
                let i = i.get("decode").and_then(|d| d.get(0)).unwrap_or(i);
                StatedServerInfo {
                    version: i.get("version").and_then(Value::as_str).map(str::to_string),
                    model_path: i.get("model_path").and_then(Value::as_str).map(str::to_string),
                    tp_size: i.get("tp_size").and_then(Value::as_u64),
                }
            }),
        }
    }
}

impl ResultPoint {
    /// The mean prompt and output lengths the result measured, each with what it divided by
    /// (`"total_input_tokens ÷ completed"`): its totals over its own request count, or where it
    /// gives none, over `scenario_requests` (the scenario's requests, whose count the point's
    /// load did not replace).
    pub fn mean_lengths(&self, scenario_requests: u64) -> [Option<(f64, String)>; 2] {
        let (n, by) = match self.requests {
            Some((n, k)) => (n, k.to_string()),
            None => (
                scenario_requests as f64,
                format!(
                    "the scenario's {scenario_requests} requests: the result gives neither completed nor num_prompts"
                ),
            ),
        };
        [("total_input_tokens", self.total_input_tokens), ("total_output_tokens", self.total_output_tokens)]
            .map(|(k, t)| t.filter(|_| n > 0.0).map(|t| (t / n, format!("{k} ÷ {by}"))))
    }
}

impl Metrics for ResultPoint {
    fn metric(&self, m: Metric) -> Option<f64> {
        self.metrics.iter().find(|(k, _)| *k == m).map(|(_, v)| *v)
    }
}

/// The load points of a results file's text (`name` names it in errors).
pub fn parse_results(text: &str, name: &str) -> Result<Vec<ResultPoint>, String> {
    let mut out = Vec::new();
    // Where each point of `out` is (its file, or file and line).
    let mut places: Vec<String> = Vec::new();
    // Python's json.dump writes NaN and ±Infinity (a statistic over no values, e.g. the ITL of
    // one-token outputs), which JSON has no word for: read each as null, a metric not given.
    let sanitised = python_non_finite_as_null(text);
    let text = sanitised.as_str();
    // Each point with where it is (the file, or the file and line of a JSONL point). A metric
    // given twice in one point is an error: JSON keeps the last, silently.
    let values: Vec<(String, Value)> = match serde_json::from_str::<Value>(text) {
        Ok(v) => {
            sim::config::no_duplicate_keys(text).map_err(|e| format!("{name}: {e}"))?;
            vec![(name.to_string(), v)]
        }
        Err(_) => text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                let at = format!("{name}:{}", i + 1);
                let v = serde_json::from_str(l).map_err(|e| format!("{at}: not JSON: {e}"))?;
                sim::config::no_duplicate_keys(l).map_err(|e| format!("{at}: {e}"))?;
                Ok((at, v))
            })
            .collect::<Result<_, String>>()?,
    };
    for (at, v) in values {
        let mut m = v.as_object().cloned().ok_or(format!("{at}: expected a JSON object"))?;
        check_fields(&m, &at)?;
        check_statistics(&m, &at)?;
        // sglang.bench_serving names E2E latency differently. A file that gives a statistic
        // under both names must give one value: which of two values was measured is not ours to
        // pick.
        for (theirs, ours) in SGLANG_E2E {
            let Some(e) = m.get(theirs).filter(|e| !e.is_null()).cloned() else { continue };
            match m.get(ours).filter(|o| !o.is_null()) {
                None => {
                    m.insert(ours.to_string(), e);
                }
                Some(o) => {
                    let (x, y) = (o.as_f64().unwrap_or(f64::NAN), e.as_f64().unwrap_or(f64::NAN));
                    if x.is_nan() || y.is_nan() || (x - y).abs() > order_slack(x, y) {
                        return Err(format!(
                            "{at}: {ours} {o} differs from {theirs} {e}: two names of one statistic must give one \
                             value; the file mixes runs"
                        ));
                    }
                }
            }
        }
        // Metrics over the requests that finished, of a run whose load was not what it was set
        // to (those that failed left early): not the scenario's run.
        let failed = match m.get("failed") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) if n.as_f64().is_some_and(|v| v >= 0.0 && v.fract() == 0.0) => n.as_f64(),
            Some(v) => {
                return Err(format!(
                    "{at}: failed: expected a whole number of requests of at least 0 (or null), got {v}"
                ))
            }
        };
        // vLLM writes `failed` only from 0.11.1: an older file says it by `completed` short of
        // `num_prompts`.
        let lost = failed.filter(|&f| f > 0.0).or_else(|| {
            match (m.get("num_prompts").and_then(Value::as_u64), m.get("completed").and_then(Value::as_u64)) {
                (Some(n), Some(c)) if c < n => Some((n - c) as f64),
                _ => None,
            }
        });
        if let (Some(n), Some(c)) =
            (m.get("num_prompts").and_then(Value::as_u64), m.get("completed").and_then(Value::as_u64))
        {
            if c > n {
                return Err(format!(
                    "{at}: completed: {c} requests completed of the {n} sent (num_prompts): more than were sent; the \
                     file mixes two runs, or one of the two fields is wrong"
                ));
            }
        }
        if let Some(lost) = lost {
            let sent = m.get("num_prompts").and_then(Value::as_u64).map_or(String::new(), |n| format!(" of {n}"));
            let field = if failed.is_some_and(|f| f > 0.0) { "failed" } else { "completed" };
            return Err(format!(
                "{at}: {field}: {lost} requests{sent} failed (or were never sent: an interrupted run): its metrics cover only those that completed, under a load that was not the one set; fit on a run where every request completed"
            ));
        }
        // sglang.bench_serving writes no `failed` or `num_prompts`: a request that failed drops
        // out of `completed`. Its `--output-details` arrays say it: an `errors` entry that is not
        // empty, or more `input_lens` (one per request sent) than `completed`.
        let failed_detail =
            match (m.get("errors").and_then(Value::as_array), m.get("input_lens").and_then(Value::as_array)) {
                (Some(errors), _) if errors.iter().any(|e| !e.is_null() && e.as_str() != Some("")) => {
                    let n = errors.iter().filter(|e| !e.is_null() && e.as_str() != Some("")).count();
                    Some(("errors", format!("{n} of the {} requests sent have an error", errors.len())))
                }
                (_, Some(lens)) => m
                    .get("completed")
                    .and_then(Value::as_u64)
                    .filter(|&c| (lens.len() as u64) > c)
                    .map(|c| ("input_lens", format!("{} requests sent, {c} completed", lens.len()))),
                _ => None,
            };
        if let Some((k, what)) = failed_detail {
            return Err(format!(
                "{at}: {k}: {what} (sglang.bench_serving --output-details): its metrics cover only those that \
                 completed, under a load that was not the one set; fit on a run where every request completed"
            ));
        }
        // Speculative decoding (SGLang's `accept_length`, the mean tokens accepted a step) emits
        // several tokens a step, which servesim does not model: its TPOT would go into the step
        // costs.
        if let Some(a) = m.get("accept_length").and_then(Value::as_f64).filter(|a| *a > 1.0) {
            return Err(format!(
                "{at}: accept_length: {a}: the server ran speculative decoding (more than one token accepted a step), \
                 which servesim does not model; fit on a run without it"
            ));
        }
        // vLLM's ramp-up (`--ramp-up-strategy`) raises the rate through the run, which servesim
        // does not model: read as a constant rate, its queueing would go into the step costs.
        if let Some(k) = ["ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps"]
            .into_iter()
            .find(|k| m.get(*k).is_some_and(|v| !v.is_null()))
        {
            return Err(format!(
                "{at}: {k}: the run ramped its request rate up (vllm bench serve --ramp-up-strategy), which servesim does not model; fit on a run at a constant rate"
            ));
        }
        // The mean lengths the run measured are its totals over its requests: `completed`, or
        // where a file leaves that out, `num_prompts` (every request completed, or the file
        // would have said otherwise above). A file without either still has its lengths
        // checked, over the scenario's count (`ResultPoint::mean_lengths`): without a count the
        // check had been skipped, silently.
        let total = |key: &str| m.get(key).and_then(Value::as_f64).filter(|t| *t > 0.0);
        let requests = ["completed", "num_prompts"]
            .into_iter()
            .find_map(|k| m.get(k).and_then(Value::as_f64).filter(|c| *c > 0.0).map(|c| (c, k)));
        // A source may publish any subset of the fitted metrics (percentiles only, throughput
        // only): the fit uses what is there. A point with none of them cannot be fitted.
        let point = ResultPoint {
            load: load_overrides(&m),
            metrics: Metric::ALL.iter().filter_map(|&k| Some((k, m.get(k.key())?.as_f64()?))).collect(),
            total_input_tokens: total("total_input_tokens"),
            total_output_tokens: total("total_output_tokens"),
            requests,
            replayed_trace: m.get("request_rate").and_then(Value::as_str) == Some("trace"),
            stated: StatedDeployment::of(&m),
            max_concurrency_absent: !m.contains_key("max_concurrency"),
            backend: m.get("backend").and_then(Value::as_str).map(str::to_string),
            stated_lengths: StatedLengths {
                dataset_name: m.get("dataset_name").and_then(Value::as_str).map(str::to_string),
                random_input_len: m.get("random_input_len").and_then(Value::as_u64),
                random_output_len: m.get("random_output_len").and_then(Value::as_u64),
                random_range_ratio: m.get("random_range_ratio").and_then(Value::as_f64),
            },
        };
        if !crate::fit::TARGETS.iter().any(|&t| point.metric(t).is_some_and(|v| v.is_finite() && v > 0.0)) {
            return Err(format!(
                "{at}: none of {}: not a vllm bench serve --save-result or sglang.bench_serving result",
                crate::fit::TARGETS.map(Metric::key).join(", ")
            ));
        }
        check_throughputs(&m, &at)?;
        // The peak in flight is a count of this run's requests: more than it sent is another run's.
        if let (Some(peak), Some((n, k))) = (point.metric(Metric::MaxConcurrentRequests), requests) {
            if peak > n {
                return Err(format!(
                    "{at}: max_concurrent_requests {peak} is above {k} {n}: no more requests can be in flight than \
                     the run sent; the file mixes runs or mislabels a field"
                ));
            }
        }
        // The same point twice (a JSONL appended to twice, two runs' lines pasted together) would
        // weigh it twice and narrow the fit's intervals as if it were two measurements: refused,
        // as a results file given twice is (`calibrate --from-results`), naming both places. Two
        // runs at one load whose figures differ are two measurements, and both are fitted.
        if let Some((first, _)) = out.iter().zip(&places).map(|(p, a)| (a, p)).find(|(_, p)| **p == point) {
            return Err(format!(
                "{at}: the same point as {first} (the same load and the same values): a point given twice would be \
                 fitted as two measurements; give each run once"
            ));
        }
        places.push(at.clone());
        out.push(point);
    }
    Ok(out)
}

/// A throughput a file gives beside the counts it is computed from must be their quotient:
/// `vllm bench serve` and `sglang.bench_serving` both write `request_throughput` as
/// `completed ÷ duration`, `output_throughput` as `total_output_tokens ÷ duration` and (vLLM)
/// `total_token_throughput` (SGLang from 0.5.6: `total_throughput`) as `(total_input_tokens + total_output_tokens) ÷ duration`, as
/// servesim does. The room is the three values' printed rounding (half a unit of each one's last
/// decimal, [`crate::fit::rounding_half_unit`]) and 1e-6 relative; a throughput outside it
/// belongs to another run or another field (a total token throughput written as the output
/// throughput, a duration in other units had been fitted): an error naming the point, the keys and
/// their values.
fn check_throughputs(m: &Map<String, Value>, at: &str) -> Result<(), String> {
    let num = |k: &str| m.get(k).and_then(Value::as_f64).filter(|v| v.is_finite() && *v > 0.0);
    let Some(duration) = num("duration") else { return Ok(()) };
    let half = crate::fit::rounding_half_unit;
    let sum = |ks: &[&'static str]| -> Option<(f64, f64)> {
        ks.iter().try_fold((0.0, 0.0), |(v, h), k| num(k).map(|x| (v + x, h + half(x))))
    };
    for (key, counts, what) in [
        ("request_throughput", &["completed"][..], "completed"),
        ("output_throughput", &["total_output_tokens"][..], "total_output_tokens"),
        (
            "total_token_throughput",
            &["total_input_tokens", "total_output_tokens"][..],
            "(total_input_tokens + total_output_tokens)",
        ),
        // sglang.bench_serving's name of it from 0.5.6.
        (
            "total_throughput",
            &["total_input_tokens", "total_output_tokens"][..],
            "(total_input_tokens + total_output_tokens)",
        ),
    ] {
        let (Some(given), Some((count, count_half))) = (num(key), sum(counts)) else { continue };
        let expected = count / duration;
        let room = half(given) + expected * (count_half / count + half(duration) / duration) + 1e-6 * expected;
        if (given - expected).abs() > room {
            let values = counts.iter().map(|k| format!("{k} {}", m[*k])).collect::<Vec<_>>().join(", ");
            return Err(format!(
                "{at}: {key} {} is not {what} ÷ duration ({values}, duration {}: {expected:.4}): the file's \
                 figures are not of one run, or a field is mislabelled (a total token throughput given as the output \
                 throughput, a duration in other units)",
                m[key], m["duration"]
            ));
        }
    }
    Ok(())
}

/// `vllm bench serve --backend` and `sglang.bench_serving --backend` values that name the engine
/// the client spoke to (each tool's request function for that server), and the engine: a value
/// not listed (`openai`, `openai-chat`, `openai-audio`, `truss`: an OpenAI-compatible or wrapped
/// endpoint any engine may serve) says nothing. `sglang` and `sglang-native` are SGLang's own
/// `/generate`; `sglang-oai` and `sglang-oai-chat` its OpenAI API; `vllm` and `vllm-chat` a vLLM
/// server (vLLM's `--backend sglang` is the OpenAI API of an SGLang server). The others are
/// engines servesim does not model.
const BACKEND_ENGINES: [(&str, &str); 15] = [
    ("vllm", "vllm"),
    ("vllm-chat", "vllm"),
    ("sglang", "sglang"),
    ("sglang-native", "sglang"),
    ("sglang-oai", "sglang"),
    ("sglang-oai-chat", "sglang"),
    ("lmdeploy", "lmdeploy"),
    ("lmdeploy-chat", "lmdeploy"),
    ("trt", "tensorrt-llm"),
    ("tensorrt-llm", "tensorrt-llm"),
    ("tgi", "tgi"),
    ("scalellm", "scalellm"),
    ("deepspeed-mii", "deepspeed-mii"),
    ("llama.cpp", "llama.cpp"),
    ("gserver", "a custom server"),
];

/// The checks of a point that need the scenario it is fitted with (`spec`: the scenario with the
/// point's load applied); the warnings to print, or an error naming the field:
/// * `backend` naming another engine than the scenario's ([`BACKEND_ENGINES`]): refused, as a
///   stated `engine` is;
/// * `server_info` (SGLang 0.5.6+): a `version` or `tp_size` other than the scenario's refused
///   naming `server_info.<field>`, a `model_path` that is neither the card's id nor its repository
///   warned about, as a top-level `engine_version` and `model_id` are;
/// * `random_input_len`, `random_output_len` and `random_range_ratio` (which
///   `sglang.bench_serving` writes, with `dataset_name` `random` or `random-ids`): mapped to the
///   servesim workload of the same lengths ([`sglang_random_equivalent`]) and refused, naming the
///   first key that differs and the `--set`s that give it, where that is not a random scenario's
///   (lengths ±1 token, ratio ±0.001), as token totals of other lengths are (the file may give no
///   totals: its lengths had been "cannot be checked"); a ratio of 0 (SGLang's default: lengths
///   from 1 up), which servesim cannot express, is refused naming `random_range_ratio`;
/// * no `max_concurrency` key (`vllm bench serve` before its `--max-concurrency`, a hand-made
///   file): the scenario's limit is assumed, and said (a `null` says no limit and is read so);
/// * a `max_concurrent_requests` the concurrency limit cannot give: `vllm bench serve` (and
///   servesim) count the requests in flight at any time within a 1-second bucket, so one slot of
///   the limit holds in one bucket the request it ends, the one it starts, and every request
///   wholly inside the second between them: at most 2 + ⌊1000 ÷ shortest E2EL in ms⌋ a slot. The
///   shortest E2EL is taken at its physical floor (`crate::traps::ttft_floor_ms` of the
///   scenario's shortest prompt plus its shortest output's decode steps at
///   `crate::traps::decode_floor_ms`, both at [`crate::traps::FLOOR_MARGIN`] and the lengths
///   ÷ [`crate::traps::LENGTH_TOLERANCE`], for another draw of the run's lengths), so a peak
///   above the bound is no measurement of this load: refused naming both keys (a peak of 40 at a
///   limit of 4 had been fitted).
pub fn check_against_scenario(r: &ResultPoint, spec: &sim::config::SimSpec) -> Result<Vec<String>, String> {
    let mut warnings = Vec::new();
    let engine = spec.engine.kind();
    if let Some(b) = r.backend.as_deref() {
        let lower = b.to_ascii_lowercase();
        if let Some((_, e)) = BACKEND_ENGINES.iter().find(|(k, _)| *k == lower).filter(|(_, e)| *e != engine) {
            return Err(format!(
                "backend: {b:?}: the benchmark client spoke to {e}'s endpoint, and the scenario's engine is {engine}: a fit \
                 would take that engine's speed for this one's; give the scenario of the measured engine"
            ));
        }
    }
    // An SGLang line's server_info (0.5.6+) says the server's release, TP size and model as a
    // top-level engine_version and model_id do (`calibrate --from-results`): another release or
    // TP size is another deployment's speed; a model path that is neither the card's id nor its
    // repository warns (a server may load a model from any folder).
    let info = &r.stated.server_info;
    let version = spec.engine.version();
    if let Some(v) = info.version.as_deref().filter(|v| !same_release(v, version)) {
        return Err(format!(
            "server_info.version: the server was SGLang {v}, the scenario's engine {engine} {version}: a fit would take \
             that release's speed for this one's; set engine.version (--set engine.version={v})"
        ));
    }
    let tp = spec.deployment.tensor_parallel_size;
    if let Some(t) = info.tp_size.filter(|t| *t != u64::from(tp)) {
        return Err(format!(
            "server_info.tp_size: the server ran on {t} GPUs (tensor parallel), the scenario on {tp}: a fit would take \
             that deployment's speed for this one's; give the scenario of the measured deployment"
        ));
    }
    if let Some(p) = info.model_path.as_deref().filter(|p| !spec.model.is_served_as(p)) {
        warnings.push(format!(
            "server_info.model_path is {p:?}, the scenario's model card {} ({}): the fit takes that run's speed for this \
             model's; check that the result measured this model",
            spec.model.id,
            spec.model.hf_repo.as_deref().unwrap_or("no hf_repo")
        ));
    }
    let w = &spec.workload;
    if let sim::workload::Dataset::Random { input_len, output_len, range_ratio, .. } = w.dataset {
        let l = &r.stated_lengths;
        let random = l.dataset_name.as_deref().is_none_or(|d| SGLANG_RANDOM_DATASETS.contains(&d));
        if random && (l.random_input_len.is_some() || l.random_output_len.is_some()) {
            // Every sglang.bench_serving release writes random_range_ratio; a line without it
            // (hand-made) is read at SGLang's default, 0.0.
            let (ratio, said) = match l.random_range_ratio {
                Some(v) => (v, format!("random_range_ratio {v}")),
                None => (0.0, "no random_range_ratio (sglang.bench_serving's default 0.0 applies)".to_string()),
            };
            if !(0.0..=1.0).contains(&ratio) {
                return Err(format!(
                    "random_range_ratio: {ratio}: sglang.bench_serving's ratio lies in [0, 1] (lengths from ⌊L·r⌋ to \
                     L): the line is not one of its runs, or the field is mislabelled"
                ));
            }
            let li = l.random_input_len.unwrap_or(u64::from(input_len));
            let lo = l.random_output_len.unwrap_or(u64::from(output_len));
            let Some((ei, eo, er)) = sglang_random_equivalent(li, lo, ratio) else {
                return Err(format!(
                    "random_range_ratio: the line has {said}: sglang.bench_serving drew each prompt's length \
                     uniformly from {} to {li} tokens and each output's from {} to {lo} (SGLang's rule: ⌊L·r⌋ to L), \
                     which servesim's random dataset (vLLM's rule: L(1−r) to L(1+r), r below 1) cannot express: its \
                     lengths never reach down to 1 token; rerun with --random-range-ratio 1 (fixed lengths), or \
                     replay the run's lengths (--output-details input_lens, output_lens) as a trace",
                    if ratio == 0.0 { "1".to_string() } else { format!("max(⌊{li}·{ratio}⌋, 1)") },
                    if ratio == 0.0 { "0 (1 from 0.5.7)".to_string() } else { format!("⌊{lo}·{ratio}⌋") },
                ));
            };
            let differs = [
                ("random_input_len", l.random_input_len.is_some() && ei.abs_diff(u64::from(input_len)) > 1),
                ("random_output_len", l.random_output_len.is_some() && eo.abs_diff(u64::from(output_len)) > 1),
                ("random_range_ratio", (er - range_ratio).abs() > 0.001),
            ]
            .into_iter()
            .find(|(_, d)| *d);
            if let Some((k, _)) = differs {
                let set = format!(
                    "--set workload.random_input_len={ei} --set workload.random_output_len={eo} --set \
                     workload.random_range_ratio={}",
                    (er * 1e4).round() / 1e4
                );
                let how = if ratio == 1.0 {
                    format!("fixed lengths, {li} and {lo} tokens")
                } else {
                    format!(
                        "{said}: SGLang draws lengths from ⌊L·r⌋ to L, servesim's equivalent is random_input_len {ei}, \
                         random_output_len {eo}, random_range_ratio {er:.4}"
                    )
                };
                return Err(format!(
                    "{k}: the run was set to random_input_len {li}, random_output_len {lo} ({how}), the scenario to \
                     random_input_len {input_len}, random_output_len {output_len}, random_range_ratio {range_ratio}: the \
                     scenario is not the measured run, and a fit would take the difference for the engine's speed; give \
                     its workload ({set})"
                ));
            }
        }
    }
    if r.max_concurrency_absent {
        let assumed = match w.max_concurrency {
            Some(c) => format!("the scenario's max_concurrency {c}"),
            None => "no concurrency limit (the scenario has none)".to_string(),
        };
        warnings.push(format!(
            "max_concurrency: not in the file: {assumed} is assumed (vllm bench serve before --max-concurrency wrote \
             none and ran without a limit: if this run had none, --set workload.max_concurrency=null)"
        ));
    }
    if let (Some(peak), Some(c)) = (r.metric(Metric::MaxConcurrentRequests), w.max_concurrency) {
        let reqs = sim::workload::generate(w);
        let tol = crate::traps::LENGTH_TOLERANCE;
        let shortest = reqs
            .requests
            .iter()
            .map(|q| {
                let prompt = (f64::from(q.prompt_len) / tol).floor().max(1.0) as u32;
                let steps = (f64::from(q.output_len) / tol - 1.0).floor().max(0.0);
                crate::traps::ttft_floor_ms(spec, prompt) + steps * crate::traps::decode_floor_ms(spec)
            })
            .fold(f64::INFINITY, f64::min)
            * crate::traps::FLOOR_MARGIN;
        if shortest.is_finite() && shortest > 0.0 {
            let per_slot = 2.0 + (1000.0 / shortest).floor();
            let bound = f64::from(c) * per_slot;
            if peak > bound {
                return Err(format!(
                    "max_concurrent_requests {peak} is above what max_concurrency {c} allows, {bound:.0}: a peak counted \
                     over 1-second buckets holds at most {per_slot:.0} requests a slot where no request can take under \
                     {shortest:.0} ms (the physical floor of the scenario's shortest request); the file mixes runs or \
                     the run had another limit (give it: --set workload.max_concurrency=N)"
                ));
            }
        }
    }
    Ok(warnings)
}

/// A published value that is there must be usable: a metric a finite number (or `null`: not
/// published), at least 0, and above 0 for a TTFT or E2E latency (not their spread) and a
/// throughput (a one-token output has a TPOT and ITL of 0, a single request a spread of 0);
/// the load fields of the types `vllm bench serve` writes; `completed` (if given) at least 1.
/// A wrong value is an error naming the point and the field, never silently dropped.
fn check_fields(m: &Map<String, Value>, at: &str) -> Result<(), String> {
    // sglang.bench_serving's names of E2E latency statistics are checked as ours: they are read
    // as ours (a negative median had been fitted).
    let keys = Metric::ALL.iter().map(|k| (k.key(), k.key())).chain(SGLANG_E2E);
    for (k, ours) in keys {
        // `failed` has its own check (a whole number of requests) in `parse_results`.
        if matches!(k, "request_rate" | "max_concurrency" | "num_prompts" | "completed" | "burstiness" | "failed") {
            continue; // below
        }
        // A seed is a label, not a measurement: any that servesim's own `--seed` takes (a u64;
        // a report of `servesim simulate --seed 4000000000` had been refused as "at most 10^9 a
        // second").
        if k == "seed" {
            match m.get(k) {
                None | Some(Value::Null) => continue,
                Some(Value::Number(n)) if n.as_u64().is_some() => continue,
                Some(v) => {
                    return Err(format!(
                        "{at}: seed: expected a whole number from 0 to {} (a seed, as --seed takes), got {v}",
                        u64::MAX
                    ))
                }
            }
        }
        // A run that completed requests lasted some time and sent and generated tokens (each
        // request at least one of each): a 0 there is no measurement, and a token total of 0
        // skipped the check of the run's lengths against the scenario's.
        let positive = (ours.ends_with("_ttft_ms") || ours.ends_with("_e2el_ms") || ours.ends_with("throughput"))
            && !ours.starts_with("std_")
            || matches!(k, "duration" | "total_input_tokens" | "total_output_tokens");
        // No benchmark point lasts a year, nor serves a billion tokens a second: a value past
        // those is a unit slip, and a fit would take it as a measurement.
        // Each bound in the field's own unit: a time, a token count, a rate, or another count or
        // ratio of the report (a peak in flight, preemptions, a cache's hit rate).
        let (ceiling, what) = match k {
            "duration" => (3.156e7, "a year (in seconds)"),
            "total_input_tokens" | "total_output_tokens" => (1e15, "10^15 tokens"),
            _ if k.ends_with("_ms") => (3.156e10, "a year"),
            _ if k.ends_with("throughput") || k.ends_with("_per_s") => (1e9, "10^9 a second"),
            _ => (1e15, "10^15"),
        };
        match m.get(k) {
            None | Some(Value::Null) => {}
            Some(Value::Number(n))
                if n.as_f64().is_some_and(|v| v.is_finite() && v <= ceiling && (v > 0.0 || !positive && v == 0.0)) => {}
            Some(v) => {
                let want = if positive { "a positive number" } else { "a number of at least 0" };
                return Err(format!("{at}: {k}: expected {want} of at most {what} (or null), got {v}"));
            }
        }
    }
    for k in ["max_concurrency", "num_prompts", "completed"] {
        match m.get(k) {
            None | Some(Value::Null) => {}
            Some(Value::Number(n)) if n.as_u64().is_some_and(|v| v >= 1) => {}
            Some(v) => return Err(format!("{at}: {k}: expected a whole number of at least 1, got {v}")),
        }
    }
    match m.get("burstiness") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.as_f64().is_some_and(|v| v.is_finite() && v > 0.0) => {}
        Some(Value::String(s)) if s == "inf" => {}
        Some(v) => return Err(format!("{at}: burstiness: expected a positive number (1: Poisson arrivals), got {v}")),
    }
    match m.get("request_rate") {
        None | Some(Value::Null) => {}
        Some(Value::Number(n)) if n.as_f64().is_some_and(|v| v.is_finite() && v > 0.0) => {}
        Some(Value::String(s)) if s == "inf" || s == "trace" => {}
        Some(v) => {
            return Err(format!("{at}: request_rate: expected a positive number, \"inf\" or \"trace\", got {v}"))
        }
    }
    Ok(())
}

/// The metric families whose statistics a result publishes, under each naming a reader accepts:
/// `vllm bench serve` and servesim (`ttft`, `tpot`, `itl`, `e2el`) and `sglang.bench_serving`'s
/// `e2e_latency`.
const STAT_FAMILIES: [&str; 5] = ["ttft", "tpot", "itl", "e2el", "e2e_latency"];

/// `sglang.bench_serving`'s names of E2E latency statistics, and ours: read as ours where the file
/// gives only theirs.
const SGLANG_E2E: [(&str, &str); 6] = [
    ("mean_e2e_latency_ms", "mean_e2el_ms"),
    ("median_e2e_latency_ms", "median_e2el_ms"),
    ("std_e2e_latency_ms", "std_e2el_ms"),
    ("p90_e2e_latency_ms", "p90_e2el_ms"),
    ("p95_e2e_latency_ms", "p95_e2el_ms"),
    ("p99_e2e_latency_ms", "p99_e2el_ms"),
];

/// The statistic a key names, and its family: `p99_ttft_ms` is (percentile 99, `ttft`),
/// `median_…` percentile 50, `min_…` 0 and `max_…` 100 (`p99.9_…`, as vLLM names a fractional
/// percentile, is 99.9); `mean_…` and `std_…` are no percentile.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Stat {
    Percentile(f64),
    Mean,
    Std,
}

fn stat_of(key: &str) -> Option<(Stat, &str)> {
    let body = key.strip_suffix("_ms")?;
    let (stat, family) = body.split_once('_')?;
    let family = STAT_FAMILIES.into_iter().find(|f| *f == family)?;
    let stat = match stat {
        "mean" => Stat::Mean,
        "std" => Stat::Std,
        "median" => Stat::Percentile(50.0),
        "min" => Stat::Percentile(0.0),
        "max" => Stat::Percentile(100.0),
        _ => {
            let p = stat.strip_prefix('p')?;
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
                return None;
            }
            let p: f64 = p.parse().ok()?;
            if !(0.0..=100.0).contains(&p) {
                return None;
            }
            Stat::Percentile(p)
        }
    };
    Some((stat, family))
}

/// How far `a` may exceed `b` when the two were published as statistics with `a ≤ b`: 1e-9
/// relative (a float sum's last bits: a mean of equal values one ulp over them), and where the
/// two are printed to different decimals, the two roundings' half-units (12.35 rounded to `12.4`
/// beside a maximum written `12.35`). Rounding to the same decimals keeps an order (it is
/// monotone), so there nothing more is allowed.
fn order_slack(a: f64, b: f64) -> f64 {
    let (ha, hb) = (crate::fit::rounding_half_unit(a), crate::fit::rounding_half_unit(b));
    1e-9 * a.abs().max(b.abs()) + if ha != hb { ha + hb } else { 0.0 }
}

/// The statistics of one metric must hold together: its percentiles (with the median as the
/// 50th, the minimum as the 0th and the maximum as the 100th) do not decrease with the
/// percentile, its mean lies within its minimum and maximum, and its spread is at least 0. A
/// result that breaks any of these mixes runs or mislabels a field, and a fit on it would make a
/// profile that looks right: an error naming the point, the two fields and their values.
fn check_statistics(m: &Map<String, Value>, at: &str) -> Result<(), String> {
    for family in STAT_FAMILIES {
        // Each statistic the point gives as a number, with its key and its value as written.
        let stats: Vec<(Stat, &str, f64, &Value)> = m
            .iter()
            .filter_map(|(k, v)| {
                let (stat, f) = stat_of(k)?;
                (f == family).then_some(())?;
                Some((stat, k.as_str(), v.as_f64().filter(|x| x.is_finite())?, v))
            })
            .collect();
        if let Some((_, k, _, v)) = stats.iter().find(|(s, _, x, _)| *s == Stat::Std && *x < 0.0) {
            return Err(format!("{at}: {k}: expected a standard deviation of at least 0, got {v}"));
        }
        let mut pcts: Vec<(f64, &str, f64, &Value)> = stats
            .iter()
            .filter_map(|&(s, k, x, v)| match s {
                Stat::Percentile(p) => Some((p, k, x, v)),
                _ => None,
            })
            .collect();
        pcts.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(b.1)));
        for (j, &(pj, kj, xj, vj)) in pcts.iter().enumerate() {
            for &(pi, ki, xi, vi) in &pcts[..j] {
                if pi == pj && (xi - xj).abs() > order_slack(xi, xj) {
                    return Err(format!(
                        "{at}: {kj} {vj} differs from {ki} {vi}: both are the {pj}th percentile; the file mixes runs or \
                         mislabels a field"
                    ));
                }
                if xi - xj > order_slack(xi, xj) {
                    return Err(format!(
                        "{at}: {kj} {vj} is below {ki} {vi}: a metric's percentiles cannot decrease with the percentile \
                         (min ≤ median ≤ p90 ≤ p95 ≤ p99 ≤ max); the file mixes runs or mislabels a field"
                    ));
                }
            }
        }
        for &(_, k, x, v) in stats.iter().filter(|s| s.0 == Stat::Mean) {
            let lowest = pcts.first().filter(|p| p.0 == 0.0);
            let highest = pcts.last().filter(|p| p.0 == 100.0);
            if let Some(&(_, kmin, _, vmin)) = lowest.filter(|p| p.2 - x > order_slack(p.2, x)) {
                return Err(format!(
                    "{at}: {k} {v} is below {kmin} {vmin}: a mean lies between the minimum and the maximum; the file mixes \
                     runs or mislabels a field"
                ));
            }
            if let Some(&(_, kmax, _, vmax)) = highest.filter(|p| x - p.2 > order_slack(x, p.2)) {
                return Err(format!(
                    "{at}: {k} {v} is above {kmax} {vmax}: a mean lies between the minimum and the maximum; the file mixes \
                     runs or mislabels a field"
                ));
            }
        }
    }
    Ok(())
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

    /// A finite rate's burstiness is the run's (it was read as 1, Poisson: a bursty run's
    /// queueing then went into the step costs); at an infinite rate it says nothing.
    #[test]
    fn a_results_burstiness_is_its_points_load() {
        let p = parse_results(
            r#"{"mean_ttft_ms": 40, "request_rate": 25, "burstiness": 0.1, "num_prompts": 80}"#,
            "r.json",
        )
        .unwrap();
        assert!(p[0].load.sets.contains(&"workload.burstiness=0.1".to_string()), "{:?}", p[0].load.sets);
        let p = parse_results(r#"{"mean_ttft_ms": 40, "request_rate": "inf", "burstiness": 1.0}"#, "r.json").unwrap();
        assert!(!p[0].load.sets.iter().any(|s| s.contains("burstiness")), "{:?}", p[0].load.sets);
    }

    /// A line of `sglang.bench_serving` at a finite rate was sent with that client's arrivals
    /// (`workload.client`); at an infinite rate they say nothing, and `vllm bench serve`'s files
    /// keep the scenario's client.
    #[test]
    fn an_sglang_lines_finite_rate_is_sent_by_its_client() {
        let client = "workload.client=sglang_bench_serving".to_string();
        let sets = |text: &str| parse_results(text, "s.jsonl").unwrap()[0].load.sets.clone();
        let s = sets(r#"{"mean_ttft_ms": 40, "median_e2e_latency_ms": 900, "request_rate": 4.0, "completed": 80}"#);
        assert!(s.contains(&client), "{s:?}");
        let s =
            sets(r#"{"mean_ttft_ms": 40, "total_output_tokens_retokenized": 9, "request_rate": 4, "completed": 8}"#);
        assert!(s.contains(&client), "{s:?}");
        let s = sets(r#"{"mean_ttft_ms": 40, "median_e2e_latency_ms": 900, "request_rate": Infinity, "completed": 8}"#);
        assert!(!s.contains(&client), "{s:?}");
        let s = sets(
            r#"{"mean_ttft_ms": 40, "mean_e2el_ms": 900, "request_rate": 4.0, "burstiness": 1.0, "num_prompts": 8}"#,
        );
        assert!(!s.iter().any(|x| x.starts_with("workload.client")), "{s:?}");
    }

    #[test]
    fn a_wrong_value_is_an_error_naming_the_point_and_the_field() {
        let err = |text: &str, name: &str| parse_results(text, name).unwrap_err();
        let e = err(r#"{"output_throughput": 812.5, "mean_tpot_ms": "fast"}"#, "r.json");
        assert!(e.starts_with("r.json: mean_tpot_ms: expected a number of at least 0"), "{e}");
        assert!(err(r#"{"output_throughput": 0, "mean_ttft_ms": 5}"#, "r.json").contains("output_throughput"));
        assert!(err(r#"{"output_throughput": 812.5, "mean_tpot_ms": -5}"#, "r.json").contains("mean_tpot_ms"));
        assert!(err(r#"{"output_throughput": 812.5, "completed": 0}"#, "r.json").contains("completed"));
        assert!(err(r#"{"output_throughput": 812.5, "max_concurrency": "8"}"#, "r.json").contains("max_concurrency"));
        assert!(err(r#"{"output_throughput": 812.5, "request_rate": -1}"#, "r.json").contains("request_rate"));
        let e = err("{\"output_throughput\": 1.0}\n\n{\"mean_ttft_ms\": \"x\"}\n", "s.jsonl");
        assert!(e.starts_with("s.jsonl:3: mean_ttft_ms"), "{e}");
        // servesim's own report of a trace replay: the arrivals are the scenario's trace.
        let t = parse_results(r#"{"output_throughput": 812.5, "request_rate": "trace", "burstiness": null}"#, "r.json");
        assert!(t.unwrap()[0].load.sets.is_empty());
        // Not published, or a one-token output's TPOT: accepted.
        parse_results(
            r#"{"output_throughput": 812.5, "mean_ttft_ms": null, "mean_tpot_ms": 0.0, "std_ttft_ms": 0, "failed": 0,
                "request_rate": "inf", "burstiness": 1.0, "max_concurrency": null}"#,
            "r.json",
        )
        .unwrap();
    }

    /// The statistics of one metric that cannot hold together are refused, naming the point, the
    /// two fields and their values (a p99 TTFT of 20 under a median of 86 had been fitted into a
    /// profile); every family under each naming; equal values and float-level or rounding-level
    /// inversions are read.
    #[test]
    fn statistics_that_cannot_hold_together_are_refused() {
        let err = |text: &str| parse_results(text, "r.json").unwrap_err();
        let e = err(r#"{"max_concurrency": 8, "median_ttft_ms": 86, "p99_ttft_ms": 20, "median_tpot_ms": 10.3}"#);
        assert!(e.starts_with("r.json: p99_ttft_ms 20 is below median_ttft_ms 86"), "{e}");
        let e = err(r#"{"mean_ttft_ms": 1000, "max_ttft_ms": 10}"#);
        assert!(e.starts_with("r.json: mean_ttft_ms 1000 is above max_ttft_ms 10"), "{e}");
        let e = err(r#"{"mean_ttft_ms": 5, "min_ttft_ms": 10}"#);
        assert!(e.starts_with("r.json: mean_ttft_ms 5 is below min_ttft_ms 10"), "{e}");
        let e = err(r#"{"mean_ttft_ms": 50, "p50_ttft_ms": 40, "min_ttft_ms": 45}"#);
        assert!(e.starts_with("r.json: p50_ttft_ms 40 is below min_ttft_ms 45"), "{e}");
        // Each family, each step of the chain, and any percentile the file gives, in numeric order.
        for (lo, hi) in [
            ("median_tpot_ms", "p90_tpot_ms"),
            ("p90_itl_ms", "p95_itl_ms"),
            ("p95_e2el_ms", "p99_e2el_ms"),
            ("p99_ttft_ms", "max_ttft_ms"),
            ("p25_tpot_ms", "median_tpot_ms"),
            ("p75_itl_ms", "p90_itl_ms"),
            ("p99_ttft_ms", "p99.9_ttft_ms"),
            ("p99.9_ttft_ms", "max_ttft_ms"),
            ("median_e2e_latency_ms", "p90_e2e_latency_ms"),
            ("p95_e2e_latency_ms", "p99_e2e_latency_ms"),
        ] {
            let e = err(&format!(r#"{{"output_throughput": 800, "{lo}": 30.5, "{hi}": 12.25}}"#));
            assert!(e.starts_with(&format!("r.json: {hi} 12.25 is below {lo} 30.5")), "{e}");
            parse_results(&format!(r#"{{"output_throughput": 800, "{lo}": 12.25, "{hi}": 30.5}}"#), "r.json").unwrap();
        }
        // The median and p50 are one percentile.
        let e = err(r#"{"mean_ttft_ms": 40, "median_ttft_ms": 30, "p50_ttft_ms": 31}"#);
        assert!(e.contains("p50_ttft_ms 31 differs from median_ttft_ms 30"), "{e}");
        // A JSONL point is named by its line; SGLang's E2E names are checked as they are written.
        let e = parse_results(
            "{\"mean_ttft_ms\": 40}\n{\"mean_e2e_latency_ms\": 900, \"median_e2e_latency_ms\": 800, \"p99_e2e_latency_ms\": 700}\n",
            "s.jsonl",
        )
        .unwrap_err();
        assert!(e.starts_with("s.jsonl:2: p99_e2e_latency_ms 700 is below median_e2e_latency_ms 800"), "{e}");
        let e = err(r#"{"mean_ttft_ms": 40, "std_e2e_latency_ms": -1}"#);
        assert!(e.starts_with("r.json: std_e2e_latency_ms: expected a number of at least 0"), "{e}");
        let e = err(r#"{"mean_ttft_ms": 40, "median_e2e_latency_ms": -800}"#);
        assert!(e.starts_with("r.json: median_e2e_latency_ms: expected a positive number"), "{e}");
        let e = err(r#"{"mean_ttft_ms": 40, "median_e2el_ms": 800, "median_e2e_latency_ms": 900}"#);
        assert!(e.starts_with("r.json: median_e2el_ms 800 differs from median_e2e_latency_ms 900"), "{e}");
        // Held together: equal values (a tiny run's p99 is its max), a mean one ulp over its
        // equal values, a value rounded coarser than its neighbour, and statistics not given.
        parse_results(
            r#"{"mean_ttft_ms": 86.00000000000001, "min_ttft_ms": 86, "median_ttft_ms": 86, "p99_ttft_ms": 86,
                "max_ttft_ms": 86, "std_ttft_ms": 0, "p99_tpot_ms": 12.4, "max_tpot_ms": 12.35,
                "median_itl_ms": null, "p99_itl_ms": 3.0, "median_e2el_ms": 900, "median_e2e_latency_ms": 900.0}"#,
            "r.json",
        )
        .unwrap();
        // A statistic of no family, or no statistic, is not read.
        parse_results(r#"{"mean_ttft_ms": 40, "p99_queue_ms": 1, "median_queue_ms": 5, "p99_ttft": 1}"#, "r.json")
            .unwrap();
    }

    /// More requests completed than were sent is refused naming `completed`.
    #[test]
    fn more_completed_than_sent_is_an_error() {
        let e =
            parse_results(r#"{"output_throughput": 812.5, "completed": 20, "num_prompts": 10}"#, "r.json").unwrap_err();
        assert!(e.starts_with("r.json: completed: 20 requests completed of the 10 sent"), "{e}");
    }

    /// A run that completed requests took time and moved tokens: a `duration` or a token total
    /// of 0 is no measurement (the totals' 0 silently skipped the check of the run's mean lengths
    /// against the scenario's), and their bounds are said in their own units.
    #[test]
    fn a_zero_duration_or_token_total_is_an_error() {
        for k in ["duration", "total_input_tokens", "total_output_tokens"] {
            let e = parse_results(&format!(r#"{{"output_throughput": 812.5, "completed": 40, "{k}": 0}}"#), "r.json")
                .unwrap_err();
            assert!(e.starts_with(&format!("r.json: {k}: expected a positive number")), "{e}");
            assert!(!e.contains("a second"), "{e}");
        }
        let p = parse_results(
            r#"{"output_throughput": 102.4, "completed": 40, "duration": 12.5, "total_input_tokens": 10240, "total_output_tokens": 1280}"#,
            "r.json",
        )
        .unwrap();
        let means = p[0].mean_lengths(7);
        assert_eq!(
            means,
            [
                Some((256.0, "total_input_tokens ÷ completed".into())),
                Some((32.0, "total_output_tokens ÷ completed".into()))
            ]
        );
    }
}

#[cfg(test)]
mod consistency_tests {
    use super::*;

    /// A vLLM-0.11-style point at concurrency 4 (`/tmp/h-calres/base_c4.json`'s figures).
    fn c4() -> Map<String, Value> {
        serde_json::from_str(
            r#"{"backend": "vllm", "duration": 67.22880608, "completed": 40, "num_prompts": 40, "max_concurrency": 4,
                "total_input_tokens": 163840, "total_output_tokens": 20480, "request_throughput": 0.5949830486711508,
                "output_throughput": 304.6313209196292, "total_token_throughput": 2741.681888276663,
                "max_concurrent_requests": 8, "mean_ttft_ms": 569.73411615, "mean_tpot_ms": 12.03448523214286}"#,
        )
        .unwrap()
    }

    fn parse(m: &Map<String, Value>) -> Result<Vec<ResultPoint>, String> {
        parse_results(&Value::Object(m.clone()).to_string(), "r.json")
    }

    /// A throughput beside the counts and duration it is computed from must be their quotient
    /// (a total token throughput written as the output throughput, and a duration ×10, had been
    /// fitted); the file's own rounding is allowed.
    #[test]
    fn a_throughput_that_is_not_its_counts_over_the_duration_is_refused() {
        parse(&c4()).unwrap();
        let mut m = c4();
        m.insert("output_throughput".into(), 2741.681888276663.into());
        let e = parse(&m).unwrap_err();
        assert!(
            e.starts_with("r.json: output_throughput 2741.681888276663 is not total_output_tokens ÷ duration")
                && e.contains("total_output_tokens 20480")
                && e.contains("duration 67.22880608"),
            "{e}"
        );
        let mut m = c4();
        m.insert("duration".into(), 672.2880608.into());
        let e = parse(&m).unwrap_err();
        assert!(e.starts_with("r.json: request_throughput 0.5949830486711508 is not completed ÷ duration"), "{e}");
        let mut m = c4();
        m.insert("total_token_throughput".into(), 304.6313209196292.into());
        let e = parse(&m).unwrap_err();
        assert!(e.starts_with("r.json: total_token_throughput 304.6313209196292 is not (total_input_tokens"), "{e}");
        // Rounded as a table prints them: within the roundings.
        let mut m = c4();
        m.insert("duration".into(), 67.23.into());
        m.insert("output_throughput".into(), 304.6.into());
        m.insert("request_throughput".into(), 0.59.into());
        m.insert("total_token_throughput".into(), 2742.into());
        parse(&m).unwrap();
        // Without the duration, or the counts, nothing to check against.
        let mut m = c4();
        m.remove("duration");
        m.insert("output_throughput".into(), 2741.681888276663.into());
        parse(&m).unwrap();
    }

    /// SGLang 0.5.6+'s `total_throughput` is checked as `total_token_throughput` is (it was not
    /// cross-checked at all).
    #[test]
    fn sglangs_total_throughput_is_its_counts_over_the_duration() {
        let mut m = c4();
        m.remove("total_token_throughput");
        m.insert("total_throughput".into(), 2741.681888276663.into());
        parse(&m).unwrap();
        m.insert("total_throughput".into(), 304.6313209196292.into());
        let e = parse(&m).unwrap_err();
        assert!(e.starts_with("r.json: total_throughput 304.6313209196292 is not (total_input_tokens"), "{e}");
    }

    /// An SGLang line says failed requests only in its `--output-details` arrays: an error, or
    /// more `input_lens` than `completed`, is refused naming the key (both had been fitted).
    #[test]
    fn an_sglang_lines_failed_requests_in_its_details_are_refused() {
        let mut m = c4();
        m.remove("num_prompts");
        let mut ok = vec![Value::from(""); 40];
        m.insert("errors".into(), ok.clone().into());
        m.insert("input_lens".into(), vec![Value::from(4096); 40].into());
        parse(&m).unwrap();
        ok[3] = "Timeout".into();
        m.insert("errors".into(), ok.into());
        let e = parse(&m).unwrap_err();
        assert!(e.starts_with("r.json: errors: 1 of the 40 requests sent have an error"), "{e}");
        m.remove("errors");
        m.insert("input_lens".into(), vec![Value::from(4096); 42].into());
        let e = parse(&m).unwrap_err();
        assert!(e.starts_with("r.json: input_lens: 42 requests sent, 40 completed"), "{e}");
    }

    /// Speculative decoding (`accept_length` above 1) is refused naming the key; null, absent or
    /// 1 passes.
    #[test]
    fn speculative_decodings_accept_length_is_refused() {
        let mut m = c4();
        m.insert("accept_length".into(), 2.7.into());
        let e = parse(&m).unwrap_err();
        assert!(e.starts_with("r.json: accept_length: 2.7: the server ran speculative decoding"), "{e}");
        m.insert("accept_length".into(), Value::Null);
        parse(&m).unwrap();
        m.insert("accept_length".into(), 1.0.into());
        parse(&m).unwrap();
    }

    /// The peak in flight cannot exceed the requests sent.
    #[test]
    fn a_peak_in_flight_above_the_requests_sent_is_refused() {
        let mut m = c4();
        m.insert("max_concurrent_requests".into(), 41.into());
        let e = parse(&m).unwrap_err();
        assert!(e.starts_with("r.json: max_concurrent_requests 41 is above completed 40"), "{e}");
    }

    /// One point twice in a JSONL is refused naming both lines (it had been fitted as two
    /// measurements, narrowing the intervals); two runs at one load with other figures are read.
    #[test]
    fn the_same_point_twice_is_refused_naming_both_lines() {
        let line = Value::Object(c4()).to_string();
        let e = parse_results(&format!("{line}\n\n{line}\n"), "s.jsonl").unwrap_err();
        assert!(e.starts_with("s.jsonl:3: the same point as s.jsonl:1"), "{e}");
        let mut other = c4();
        other.insert("mean_ttft_ms".into(), 570.1.into());
        let two = format!("{line}\n{}\n", Value::Object(other));
        assert_eq!(parse_results(&two, "s.jsonl").unwrap().len(), 2);
    }

    /// Each field's bound is said in its own unit: a seed is any that `--seed` takes, a count of
    /// failed requests is a whole number of requests (both had been "10^9 a second").
    #[test]
    fn each_fields_error_says_its_own_unit() {
        let mut m = c4();
        m.insert("seed".into(), 4_000_000_000u64.into());
        parse(&m).unwrap();
        m.insert("seed".into(), u64::MAX.into());
        parse(&m).unwrap();
        for bad in [Value::from(-1), Value::from(1.5), Value::from("7")] {
            m.insert("seed".into(), bad.clone());
            let e = parse(&m).unwrap_err();
            assert!(e.starts_with("r.json: seed: expected a whole number from 0 to") && !e.contains("second"), "{e}");
        }
        let mut m = c4();
        m.insert("failed".into(), "0".into());
        let e = parse(&m).unwrap_err();
        assert!(e.starts_with("r.json: failed: expected a whole number of requests") && !e.contains("second"), "{e}");
        let mut m = c4();
        m.insert("num_preemptions".into(), 1e16.into());
        let e = parse(&m).unwrap_err();
        assert!(e.starts_with("r.json: num_preemptions: expected") && !e.contains("second"), "{e}");
        let mut m = c4();
        m.insert("max_output_tokens_per_s".into(), 2e9.into());
        assert!(parse(&m).unwrap_err().contains("10^9 a second"));
    }

    /// `--metadata engine=vLLM` states the engine in any case.
    #[test]
    fn a_stated_engine_is_read_in_any_case() {
        let mut m = c4();
        m.insert("engine".into(), "vLLM".into());
        assert_eq!(parse(&m).unwrap()[0].stated.engine.as_deref(), Some("vllm"));
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
        // A trace's arrivals (servesim's own report of a trace replay) are the scenario's trace.
        Some(Value::String(s)) if s != "trace" => o.sets.push(format!("workload.request_rate={s}")),
        _ => {}
    }
    // How bursty the arrivals at a finite rate were (1: Poisson); at an infinite rate it says nothing.
    // `inf` (Python's Infinity, read as the text "inf"): fixed gaps, which the scenario replays.
    match (r.get("request_rate"), r.get("burstiness")) {
        (Some(Value::Number(_)), Some(Value::Number(b))) => o.sets.push(format!("workload.burstiness={b}")),
        (Some(Value::Number(_)), Some(Value::String(b))) if b == "inf" => o.sets.push("workload.burstiness=inf".into()),
        _ => {}
    }
    // A line `sglang.bench_serving` wrote (its names of the E2E statistics, or
    // `total_output_tokens_retokenized`: in every release from 0.4.10, never in `vllm bench
    // serve`'s or servesim's files) at a finite rate was sent with that client's arrivals: the
    // first request at once, unscaled exponential gaps (`get_request`; docs/benchmark.md §2).
    let finite_rate = match r.get("request_rate") {
        Some(Value::Number(n)) => n.as_f64().is_some_and(f64::is_finite),
        Some(Value::String(s)) => s.parse::<f64>().is_ok_and(f64::is_finite),
        _ => false,
    };
    if finite_rate && is_sglang_bench_serving_line(r) {
        o.sets.push("workload.client=sglang_bench_serving".into());
    }
    if let Some(n) = r.get("num_prompts").or(r.get("completed")).and_then(Value::as_u64) {
        o.sets.push(format!("workload.num_prompts={n}"));
    }
    o
}

/// Whether a result object is a line of `sglang.bench_serving --output-file`: it names an E2E
/// statistic as that client does ([`SGLANG_E2E`]) or gives `total_output_tokens_retokenized`
/// (0.4.10 `bench_serving.py` and 0.5.23 `benchmark/serving.py`, `benchmark`'s `result`).
pub fn is_sglang_bench_serving_line(r: &Map<String, Value>) -> bool {
    SGLANG_E2E.iter().any(|(theirs, _)| r.contains_key(*theirs)) || r.contains_key("total_output_tokens_retokenized")
}

/// `text` with Python's non-JSON number words outside strings made JSON: `NaN` (a statistic
/// over no values) as `null`; `Infinity` as the value of `request_rate` or `burstiness` as the
/// string `"inf"`; any other `Infinity` or `-Infinity` as that word in a string, for the field's
/// own check to refuse; everything else as it is.
pub fn python_non_finite_as_null(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let (mut i, mut start, mut in_str, mut esc) = (0, 0, false, false);
    while i < b.len() {
        let c = b[i];
        if in_str {
            if esc {
                esc = false;
            } else if c == b'\\' {
                esc = true;
            } else if c == b'"' {
                in_str = false;
            }
            i += 1;
            continue;
        }
        if c == b'"' {
            in_str = true;
            i += 1;
            continue;
        }
        let word = ["-Infinity", "Infinity", "NaN"].into_iter().find(|w| b[i..].starts_with(w.as_bytes()));
        let boundary = |j: usize| j >= b.len() || !(b[j].is_ascii_alphanumeric() || b[j] == b'_');
        if let Some(w) = word.filter(|w| boundary(i + w.len()) && (i == 0 || boundary(i - 1))) {
            out.push_str(&text[start..i]);
            // A load's Infinity is a value, not a missing statistic: sglang.bench_serving writes
            // its default `request_rate` as Infinity, `vllm bench serve` a fixed-gap run's
            // `burstiness`. Those read as the string "inf" (as vLLM writes the rate).
            let key = out
                .trim_end()
                .strip_suffix(':')
                .map(str::trim_end)
                .and_then(|t| t.strip_suffix('"'))
                .and_then(|t| t.rfind('"').map(|q| &t[q + 1..]));
            // Elsewhere an infinity is no statistic a benchmark writes (a mean or percentile over
            // no values is NaN): it stays a word, as a string, which the field's check refuses
            // as not a number (`-Infinity` had been read as a metric not given).
            if w == "Infinity" && matches!(key, Some("request_rate" | "burstiness")) {
                out.push_str("\"inf\"");
            } else if w == "NaN" {
                out.push_str("null");
            } else {
                out.push('"');
                out.push_str(w);
                out.push('"');
            }
            i += w.len();
            start = i;
            continue;
        }
        i += 1;
    }
    out.push_str(&text[start..]);
    out
}

#[cfg(test)]
mod non_finite_tests {
    use super::*;

    #[test]
    fn python_nan_and_infinity_read_as_null_outside_strings() {
        let t = r#"{"a": NaN, "b": -Infinity, "c": Infinity, "s": "NaN Infinity", "NaNx": 1, "d": [NaN]}"#;
        let v: Value = serde_json::from_str(&python_non_finite_as_null(t)).unwrap();
        assert!(v["a"].is_null() && v["d"][0].is_null());
        assert_eq!((v["b"].as_str(), v["c"].as_str()), (Some("-Infinity"), Some("Infinity")));
        assert_eq!(v["s"], "NaN Infinity");
        assert_eq!(v["NaNx"], 1);
        // A load's Infinity is a value: sglang.bench_serving's default rate (it was read as
        // not given, and the point fitted at the scenario's rate).
        let v: Value = serde_json::from_str(&python_non_finite_as_null(
            r#"{"request_rate" : Infinity, "burstiness":Infinity, "x": Infinity}"#,
        ))
        .unwrap();
        assert_eq!((v["request_rate"].as_str(), v["burstiness"].as_str()), (Some("inf"), Some("inf")));
        assert_eq!(v["x"].as_str(), Some("Infinity"));
        let p =
            parse_results(r#"{"request_rate": Infinity, "max_concurrency": 20, "mean_ttft_ms": 3381.0}"#, "s.jsonl")
                .unwrap();
        assert!(p[0].load.sets.contains(&"workload.request_rate=inf".to_string()), "{:?}", p[0].load.sets);
        // vLLM's fixed gaps (`--burstiness inf`) are the point's load, replayed (they had been
        // refused when servesim's arrivals had no infinite burstiness).
        let p =
            parse_results(r#"{"request_rate": 0.9, "burstiness": Infinity, "mean_ttft_ms": 50.0}"#, "r.json").unwrap();
        assert!(p[0].load.sets.contains(&"workload.burstiness=inf".to_string()), "{:?}", p[0].load.sets);
        // A result with a NaN metric is read, that metric as not given.
        let r = r#"{"max_concurrency": 1, "mean_ttft_ms": 100.0, "mean_itl_ms": NaN, "std_itl_ms": NaN}"#;
        let p = parse_results(r, "r.json").unwrap();
        assert_eq!(p.len(), 1);
        // An infinite metric is no measurement: refused, naming the field (a -Infinity TTFT had
        // been read as not given, and the point fitted on the rest).
        for w in ["-Infinity", "Infinity"] {
            let e = parse_results(
                &format!(r#"{{"max_concurrency": 1, "mean_tpot_ms": 9.0, "mean_ttft_ms": {w}}}"#),
                "r.json",
            )
            .unwrap_err();
            assert!(
                e.starts_with(&format!("r.json: mean_ttft_ms: expected a positive number")) && e.contains(w),
                "{e}"
            );
        }
        let e = parse_results(r#"{"request_rate": -Infinity, "mean_ttft_ms": 50.0}"#, "r.json").unwrap_err();
        assert!(e.contains("request_rate"), "{e}");
    }
}
