//! The `workload` section: `vllm bench serve`'s flags, checked and resolved.

use super::*;

/// The endpoints `workload.endpoint` names (`vllm bench serve --endpoint`): the simulator
/// prices them apart (vLLM 0.11.0 parses the chat template on every chat request).
pub const COMPLETIONS_ENDPOINT: &str = "/v1/completions";
/// See [`COMPLETIONS_ENDPOINT`].
pub const CHAT_ENDPOINT: &str = "/v1/chat/completions";

/// The `workload` fields only the simulated client has (a staggered closed loop, a measured
/// window): fleets and the live commands refuse them ([`simulate_only_field`]).
pub const SIMULATE_ONLY_WORKLOAD_FIELDS: [&str; 3] = ["concurrency_ramp_s", "window_start_s", "window_duration_s"];

/// The first [`SIMULATE_ONLY_WORKLOAD_FIELDS`] field a `workload` section (a JSON object) gives
/// a value.
pub fn simulate_only_field(workload: &serde_json::Map<String, Value>) -> Option<&'static str> {
    SIMULATE_ONLY_WORKLOAD_FIELDS.into_iter().find(|f| workload.get(*f).is_some_and(|v| !v.is_null()))
}

/// Why the live client refuses a [`SIMULATE_ONLY_WORKLOAD_FIELDS`] field, after its name.
pub const LIVE_REFUSES_SIMULATE_ONLY: &str = "the live client sends vllm bench serve's load (every user at once, \
     every request measured); a staggered closed loop and a measured window are simulate's only: remove it";

/// Whether `endpoint` is one `workload.endpoint` names.
pub fn priced_endpoint(endpoint: &str) -> bool {
    endpoint == COMPLETIONS_ENDPOINT || endpoint == CHAT_ENDPOINT
}

/// Checks a `workload` section and turns it into generator parameters
/// (`res.trace` must hold the trace's rows for `dataset_name = "trace"`).
/// The field that rescales a trace's arrivals, where the scenario gives one
/// (`workload.trace_time_scale`, else `workload.trace_rate`): the one to name when a scaled
/// arrival is out of range.
fn trace_scaling_field(w: &WorkloadSection) -> Option<&'static str> {
    w.trace_time_scale.map(|_| "workload.trace_time_scale").or(w.trace_rate.map(|_| "workload.trace_rate"))
}

pub fn resolve_workload(w: &WorkloadSection, res: &Resources) -> Result<WorkloadParams> {
    check_fields_of_dataset(w)?;
    let dataset = match w.dataset_name {
        DatasetName::Random => {
            let r = w.random_range_ratio.unwrap_or(0.0);
            if !(0.0..1.0).contains(&r) {
                return Err(ConfigError::new("workload.random_range_ratio", format!("must be in [0, 1), got {r:?}")));
            }
            let input_len = positive("workload.random_input_len", w.random_input_len.unwrap_or(1024))?;
            let prefix_len = w.random_prefix_len.unwrap_or(0);
            let in_hi = (f64::from(input_len) * (1.0 + r)).ceil();
            if f64::from(prefix_len) + in_hi > f64::from(u32::MAX) {
                return Err(ConfigError::new(
                    "workload.random_prefix_len",
                    format!(
                        "prefix {prefix_len} + input up to {in_hi} tokens does not fit a prompt length (at most {})",
                        u32::MAX
                    ),
                ));
            }
            Dataset::Random {
                input_len,
                output_len: positive("workload.random_output_len", w.random_output_len.unwrap_or(128))?,
                range_ratio: r,
                prefix_len,
            }
        }
        DatasetName::PrefixRepetition => {
            let num_prefixes =
                positive("workload.prefix_repetition_num_prefixes", w.prefix_repetition_num_prefixes.unwrap_or(10))?;
            let n = w.num_prompts.unwrap_or(1000);
            if n < num_prefixes {
                return Err(ConfigError::new(
                    "workload.num_prompts",
                    format!("{n} prompts over {num_prefixes} prefixes gives no prompt (prompts_per_prefix = num_prompts // num_prefixes)"),
                ));
            }
            Dataset::PrefixRepetition {
                prefix_len: positive(
                    "workload.prefix_repetition_prefix_len",
                    w.prefix_repetition_prefix_len.unwrap_or(256),
                )?,
                suffix_len: positive(
                    "workload.prefix_repetition_suffix_len",
                    w.prefix_repetition_suffix_len.unwrap_or(256),
                )?,
                num_prefixes,
                output_len: positive(
                    "workload.prefix_repetition_output_len",
                    w.prefix_repetition_output_len.unwrap_or(128),
                )?,
            }
        }
        DatasetName::Trace
            if matches!(
                w.trace_format,
                Some(TraceFileFormat::Mooncake | TraceFileFormat::Azure | TraceFileFormat::Burstgpt)
            ) =>
        {
            if w.trace.is_none() {
                return Err(ConfigError::new("workload.trace", "dataset_name is \"trace\" but no trace file is given"));
            }
            let requests = res
                .trace_requests
                .clone()
                .ok_or_else(|| ConfigError::new("workload.trace", "the trace was not loaded"))?;
            if requests.is_empty() {
                return Err(ConfigError::new("workload.trace", "the trace has no requests: an empty workload"));
            }
            if requests.len() > MAX_NUM_PROMPTS as usize {
                return Err(ConfigError::new(
                    "workload.trace",
                    format!("{} requests: at most {MAX_NUM_PROMPTS} a run", requests.len()),
                ));
            }
            for (i, r) in requests.iter().enumerate() {
                if r.input_len == 0 || r.output_len == 0 {
                    return Err(ConfigError::new(
                        format!("workload.trace[{i}]"),
                        "input and output lengths must be at least 1",
                    ));
                }
                if r.arrival_ns as f64 > MAX_ARRIVAL_TIME_S * 1e9 {
                    // Scaled there by the scenario's scaling field, name that; else the row.
                    return Err(match trace_scaling_field(w) {
                        Some(field) => ConfigError::new(
                            field,
                            format!("scales request {i}'s arrival past the limit of {MAX_ARRIVAL_TIME_S} s (one year)"),
                        ),
                        None => ConfigError::new(
                            format!("workload.trace[{i}]"),
                            format!("arrives after the limit of {MAX_ARRIVAL_TIME_S} s (one year)"),
                        ),
                    });
                }
            }
            if let Some(n) = w.num_prompts {
                if n as usize > requests.len() {
                    return Err(ConfigError::new(
                        "workload.num_prompts",
                        format!("{n}, but the trace has {} requests", requests.len()),
                    ));
                }
            }
            Dataset::Requests { requests }
        }
        DatasetName::Trace => {
            if w.trace.is_none() {
                return Err(ConfigError::new("workload.trace", "dataset_name is \"trace\" but no trace file is given"));
            }
            let rows =
                res.trace.clone().ok_or_else(|| ConfigError::new("workload.trace", "the trace was not loaded"))?;
            if rows.is_empty() {
                return Err(ConfigError::new("workload.trace", "the trace has no rows: an empty workload"));
            }
            if rows.len() > MAX_NUM_PROMPTS as usize {
                return Err(ConfigError::new(
                    "workload.trace",
                    format!("{} rows: at most {MAX_NUM_PROMPTS} requests a run", rows.len()),
                ));
            }
            for (i, r) in rows.iter().enumerate() {
                r.check().map_err(|(f, m)| {
                    let at =
                        if f.is_empty() { format!("workload.trace[{i}]") } else { format!("workload.trace[{i}].{f}") };
                    ConfigError::new(at, m)
                })?;
                if r.arrival_time > MAX_ARRIVAL_TIME_S {
                    // Past a year only after the scaling: the scaling field is the one to change.
                    return Err(match trace_scaling_field(w) {
                        Some(field) => ConfigError::new(
                            field,
                            format!(
                                "scales row {i}'s arrival to {:.3e} s, past the limit of {MAX_ARRIVAL_TIME_S} s (one year)",
                                r.arrival_time
                            ),
                        ),
                        None => ConfigError::new(
                            format!("workload.trace[{i}].arrival_time"),
                            format!(
                                "must be a time in seconds from 0 to {MAX_ARRIVAL_TIME_S} (one year), got {:.3e}",
                                r.arrival_time
                            ),
                        ),
                    });
                }
            }
            if let Some(n) = w.num_prompts {
                if n as usize > rows.len() {
                    return Err(ConfigError::new(
                        "workload.num_prompts",
                        format!("{n}, but the trace has {} rows (a trace replays at most its rows; leave num_prompts out to replay them all)", rows.len()),
                    ));
                }
            }
            Dataset::Trace { rows }
        }
    };
    let num_prompts = match (&dataset, w.num_prompts) {
        (Dataset::Trace { rows }, None) => rows.len() as u32,
        (Dataset::Requests { requests }, None) => requests.len() as u32,
        (_, n) => positive("workload.num_prompts", n.unwrap_or(1000))?,
    };
    if num_prompts > MAX_NUM_PROMPTS {
        return Err(ConfigError::new(
            "workload.num_prompts",
            format!("{num_prompts} is above the limit of {MAX_NUM_PROMPTS} requests a run"),
        ));
    }
    let max_output: u64 = match &dataset {
        Dataset::Random { output_len, range_ratio, .. } => (f64::from(*output_len) * (1.0 + range_ratio)).ceil() as u64,
        Dataset::PrefixRepetition { output_len, .. } => u64::from(*output_len),
        Dataset::Trace { rows } => rows.iter().map(|r| u64::from(r.output_len)).max().unwrap_or(0),
        Dataset::Requests { requests } => requests.iter().map(|r| u64::from(r.output_len)).max().unwrap_or(0),
    };
    let prior_run_prompts = w.prior_run_prompts.unwrap_or(0);
    // The prompts the run sends: `prefix_repetition` sends num_prompts rounded down to a multiple
    // of its prefixes (20 asked over 8 prefixes send 16, and a prior run of 20 was accepted).
    let sent = match &dataset {
        Dataset::PrefixRepetition { num_prefixes, .. } => num_prompts / num_prefixes * num_prefixes,
        _ => num_prompts,
    };
    if prior_run_prompts > sent {
        return Err(ConfigError::new(
            "workload.prior_run_prompts",
            format!(
                "{prior_run_prompts}, but the run sends {sent} prompts (the earlier run's prompts are the run's first ones)"
            ),
        ));
    }
    let prior_run_prefixes = w.prior_run_prefixes.unwrap_or(0);
    // Without a trace, or with one none of whose first rows has a shared prefix, nothing would
    // be sent: refused rather than run as if no earlier run had been asked for.
    if prior_run_prefixes > 0 {
        match &dataset {
            Dataset::Trace { rows }
                if !rows.iter().take(prior_run_prefixes as usize).any(|r| r.has_shared_prefix()) =>
            {
                return Err(ConfigError::new(
                    "workload.prior_run_prefixes",
                    format!(
                        "{prior_run_prefixes}, but none of the trace's first {prior_run_prefixes} rows has a prefix_group and a prefix_len above 0: there is no prefix for an earlier run to have sent"
                    ),
                ));
            }
            Dataset::Trace { .. } => {}
            _ => {
                return Err(ConfigError::new(
                    "workload.prior_run_prefixes",
                    "needs a trace with prefix_group and prefix_len columns (the prefixes an earlier run sent)",
                ))
            }
        }
    }
    if prior_run_prefixes > num_prompts {
        return Err(ConfigError::new(
            "workload.prior_run_prefixes",
            format!(
                "{prior_run_prefixes}, but the run has {num_prompts} prompts (the prefixes are the run's first rows')"
            ),
        ));
    }
    let total_output = u64::from(prior_run_prefixes)
        + match &dataset {
            Dataset::Trace { rows } => {
                rows.iter().take(num_prompts as usize).map(|r| u64::from(r.output_len)).sum::<u64>()
                    + rows.iter().take(prior_run_prompts as usize).map(|r| u64::from(r.output_len)).sum::<u64>()
            }
            Dataset::Requests { requests } => {
                requests.iter().take(num_prompts as usize).map(|r| u64::from(r.output_len)).sum::<u64>()
                    + requests.iter().take(prior_run_prompts as usize).map(|r| u64::from(r.output_len)).sum::<u64>()
            }
            _ => u64::from(num_prompts + prior_run_prompts) * max_output,
        };
    if total_output > MAX_TOTAL_OUTPUT_TOKENS {
        return Err(ConfigError::new(
            if dataset.is_trace() {
                "workload.trace"
            } else {
                "workload.num_prompts"
            },
            format!(
                "{num_prompts} requests of up to {max_output} output tokens ({total_output} in all) is above the limit of {MAX_TOTAL_OUTPUT_TOKENS} output tokens a run (each token's time is kept)"
            ),
        ));
    }
    let num_warmups = w.num_warmups.unwrap_or(0);
    if num_warmups > MAX_NUM_WARMUPS {
        return Err(ConfigError::new(
            "workload.num_warmups",
            format!("{num_warmups} is above the limit of {MAX_NUM_WARMUPS}"),
        ));
    }
    let is_trace = dataset.is_trace();
    let request_rate = match w.request_rate.unwrap_or(RequestRate(None)).0 {
        // A trace's arrival times say when requests are sent: a rate is ignored (the
        // command line warns), never reported as used.
        _ if is_trace => None,
        Some(r) if !(MIN_REQUEST_RATE..=MAX_REQUEST_RATE).contains(&r) => {
            return Err(ConfigError::new(
                "workload.request_rate",
                format!(
                    "must be from {MIN_REQUEST_RATE} to {MAX_REQUEST_RATE} requests per second, or \"inf\"; got {r:?}"
                ),
            ));
        }
        Some(r) if f64::from(num_prompts) / r > MAX_ARRIVAL_TIME_S => {
            return Err(ConfigError::new(
                "workload.request_rate",
                format!(
                    "{num_prompts} prompts at {r} requests per second are sent over {:.3e} s, above the limit of {MAX_ARRIVAL_TIME_S} s (one year)",
                    f64::from(num_prompts) / r
                ),
            ));
        }
        r => r,
    };
    let burstiness = w.burstiness.unwrap_or(1.0);
    // `inf`: fixed gaps of 1 / rate (`vllm bench serve` from 0.11.1, `get_request`).
    if !(burstiness > 0.0) {
        return Err(ConfigError::new(
            "workload.burstiness",
            format!("must be > 0 (or \"inf\": evenly spaced requests), got {burstiness:?}"),
        ));
    }
    // The gaps are gamma(shape = burstiness, scale = 1 / (rate × burstiness)): a scale that
    // underflows (or a shape the sampler refuses) cannot draw them (it panicked).
    if let Some(r) = request_rate.filter(|_| burstiness.is_finite()) {
        if rand_distr::Gamma::new(burstiness, 1.0 / (r * burstiness)).is_err() || !(1.0 / (r * burstiness)).is_normal()
        {
            return Err(ConfigError::new(
                "workload.burstiness",
                format!(
                    "{burstiness:?} at request_rate {r:?}: the gaps between requests are gamma-distributed with scale 1 / (rate × burstiness), which underflows here; use a smaller burstiness (1: Poisson; larger values approach evenly spaced requests, and \"inf\" gives them)"
                ),
            ));
        }
    }
    // `sglang.bench_serving` has no `--burstiness`: its gaps are exponential (`get_request`).
    let client = w.client.unwrap_or_default();
    if client == BenchClient::SglangBenchServing && burstiness != 1.0 {
        return Err(ConfigError::new(
            "workload.burstiness",
            format!(
                "{burstiness:?} with workload.client \"sglang_bench_serving\": that client has no burstiness (its gaps \
                 between requests are exponential, as burstiness 1 gives); drop the field, or model vllm bench serve \
                 (workload.client \"vllm_bench_serve\", the default)"
            ),
        ));
    }
    if let Some(c) = w.max_concurrency {
        positive("workload.max_concurrency", c)?;
        if c > MAX_CONCURRENCY {
            return Err(ConfigError::new(
                "workload.max_concurrency",
                format!("{c} is above the limit of {MAX_CONCURRENCY}"),
            ));
        }
    }
    let ignore_eos = w.ignore_eos.unwrap_or(false);
    if !ignore_eos && w.output_len_dist.is_none() {
        return Err(ConfigError::new(
            "workload.ignore_eos",
            "is false (vllm bench serve's default), so output lengths depend on where the model emits EOS: \
             set ignore_eos to true for exact lengths, or describe them with workload.output_len_dist \
             ({\"kind\": \"geometric\", \"mean\": N} or {\"kind\": \"uniform\", \"min\": A, \"max\": B})",
        ));
    }
    if ignore_eos && w.output_len_dist.is_some() {
        return Err(ConfigError::new(
            "workload.output_len_dist",
            "is set with ignore_eos true: every request then generates exactly its max_tokens and the \
             distribution would be ignored; drop one of the two (ignore_eos false for lengths cut where EOS falls)",
        ));
    }
    match w.output_len_dist {
        Some(OutputLenDist::Geometric { mean }) if !(mean >= 1.0 && mean.is_finite()) => {
            return Err(ConfigError::new("workload.output_len_dist.mean", format!("must be >= 1, got {mean:?}")));
        }
        Some(OutputLenDist::Uniform { min, max }) if min == 0 || min > max => {
            return Err(ConfigError::new(
                "workload.output_len_dist",
                format!("needs 1 <= min <= max, got min {min}, max {max}"),
            ));
        }
        _ => {}
    }
    let params = WorkloadParams {
        dataset,
        num_prompts,
        num_warmups,
        prior_run_prompts,
        prior_run_prefixes,
        request_rate,
        burstiness,
        client,
        max_concurrency: w.max_concurrency,
        concurrency_ramp_ns: concurrency_ramp(w, request_rate)?,
        measure_window_ns: measure_window(w)?,
        ignore_eos,
        output_len_dist: w.output_len_dist,
        // Unset: `resolve` replaces this by the modelled release's default (`default_initial_test_request`).
        initial_test_request: w.initial_test_request.unwrap_or(true),
        seed: w.seed.unwrap_or(0),
        chat: match w.endpoint.as_deref() {
            None | Some(COMPLETIONS_ENDPOINT) => false,
            Some(CHAT_ENDPOINT) => true,
            Some(other) => {
                return Err(ConfigError::new(
                    "workload.endpoint",
                    format!("expected {COMPLETIONS_ENDPOINT:?} or {CHAT_ENDPOINT:?}, got {other:?}"),
                ))
            }
        },
        // `resolve` sets it from the modelled benchmark's release (`client_times_role_chunk`).
        role_chunk: false,
        // `resolve` sets it from the engine and the endpoint (`client_misses_eos_step`).
        eos_unstreamed: false,
        // `resolve` sets it from the engine's release and context (`VLLM_CLAMPS_MAX_TOKENS`).
        context_clamp: None,
        tokenize_prompt: w.tokenize_prompt.unwrap_or(false),
        // `resolve` sets them from the model card and the modelled client (`prompt_special_tokens`,
        // `client_counts_server_prompt_tokens`), and so does `servesim bench` from its
        // `--scenario`'s card; a workload resolved without a card (bench without a scenario)
        // adds no BOS and counts what it sends.
        special_tokens: 0,
        counts_server_prompt_tokens: true,
    };
    if params.tokenize_prompt && params.chat {
        return Err(ConfigError::new(
            "workload.tokenize_prompt",
            format!("true with the chat endpoint ({CHAT_ENDPOINT}): its messages are text; token ids go to {COMPLETIONS_ENDPOINT}"),
        ));
    }
    // EOS drawn at or past every request's max_tokens never ends one: the distribution would be
    // read and have no effect (every output its max_tokens, as with ignore_eos).
    if let Some(OutputLenDist::Uniform { min, .. }) = params.output_len_dist {
        let top = super::feasibility::max_output_len(&params);
        if min >= top {
            return Err(ConfigError::new(
                "workload.output_len_dist.min",
                format!(
                    "{min} is at or above the largest max_tokens of the workload ({top}): EOS would never end an \
                     output before its max_tokens, so the distribution has no effect; lower it, or set ignore_eos true"
                ),
            ));
        }
    }
    Ok(params)
}

/// `workload.concurrency_ramp_s` in nanoseconds (0 unset): a closed loop's users, started one
/// after another, so it needs `max_concurrency` and an infinite rate.
fn concurrency_ramp(w: &WorkloadSection, request_rate: Option<f64>) -> Result<u64> {
    let Some(ramp) = w.concurrency_ramp_s else { return Ok(0) };
    const F: &str = "workload.concurrency_ramp_s";
    if !(ramp.is_finite() && (0.0..=MAX_ARRIVAL_TIME_S).contains(&ramp)) {
        return Err(ConfigError::new(
            F,
            format!("must be seconds from 0 to {MAX_ARRIVAL_TIME_S} (one year), got {ramp:?}"),
        ));
    }
    if w.max_concurrency.is_none() {
        return Err(ConfigError::new(
            F,
            "starts the users of a closed loop one after another: set workload.max_concurrency (the number of users)",
        ));
    }
    if request_rate.is_some() || w.dataset_name == DatasetName::Trace {
        return Err(ConfigError::new(
            F,
            "is for a closed loop (each user sends its next request when its last ends): the request_rate must be \"inf\" and the dataset not a trace (whose rows carry their own send times)",
        ));
    }
    Ok(crate::workload::secs_to_ns(ramp))
}

/// `workload.window_start_s` and `window_duration_s` as `(start, end)` nanoseconds from the timed
/// phase's start: both or neither.
fn measure_window(w: &WorkloadSection) -> Result<Option<(u64, u64)>> {
    let (start, len) = match (w.window_start_s, w.window_duration_s) {
        (None, None) => return Ok(None),
        (Some(_), None) => {
            return Err(ConfigError::new(
                "workload.window_duration_s",
                "is missing: window_start_s opens a measured window, which needs its length",
            ))
        }
        (None, Some(_)) => return Err(ConfigError::new(
            "workload.window_start_s",
            "is missing: window_duration_s measures a window, which needs its start (0: from the timed phase's start)",
        )),
        (Some(s), Some(d)) => (s, d),
    };
    if !(start.is_finite() && (0.0..=MAX_ARRIVAL_TIME_S).contains(&start)) {
        return Err(ConfigError::new(
            "workload.window_start_s",
            format!("must be seconds from 0 to {MAX_ARRIVAL_TIME_S} (one year), got {start:?}"),
        ));
    }
    if !(len.is_finite() && len > 0.0 && len <= MAX_ARRIVAL_TIME_S) {
        return Err(ConfigError::new(
            "workload.window_duration_s",
            format!("must be seconds above 0 and at most {MAX_ARRIVAL_TIME_S} (one year), got {len:?}"),
        ));
    }
    let s = crate::workload::secs_to_ns(start);
    Ok(Some((s, s + crate::workload::secs_to_ns(len).max(1))))
}

/// Fields of another dataset are errors: a field the run ignores must not look used.
/// (`request_rate` with a trace is ignored, not rejected: calibration from a trace's
/// results files passes the rate the results were measured at; the command line warns.)
fn check_fields_of_dataset(w: &WorkloadSection) -> Result<()> {
    let random = [
        ("random_input_len", w.random_input_len.is_some()),
        ("random_output_len", w.random_output_len.is_some()),
        ("random_range_ratio", w.random_range_ratio.is_some()),
        ("random_prefix_len", w.random_prefix_len.is_some()),
    ];
    let prefix_rep = [
        ("prefix_repetition_prefix_len", w.prefix_repetition_prefix_len.is_some()),
        ("prefix_repetition_suffix_len", w.prefix_repetition_suffix_len.is_some()),
        ("prefix_repetition_num_prefixes", w.prefix_repetition_num_prefixes.is_some()),
        ("prefix_repetition_output_len", w.prefix_repetition_output_len.is_some()),
    ];
    let trace = [
        ("trace", w.trace.is_some()),
        ("trace_format", w.trace_format.is_some()),
        ("trace_time_scale", w.trace_time_scale.is_some()),
        ("trace_rate", w.trace_rate.is_some()),
    ];
    let (name, foreign): (&str, Vec<(&str, bool)>) = match w.dataset_name {
        DatasetName::Random => ("random", prefix_rep.iter().chain(&trace).copied().collect()),
        DatasetName::PrefixRepetition => ("prefix_repetition", random.iter().chain(&trace).copied().collect()),
        DatasetName::Trace => (
            "trace",
            random
                .iter()
                .chain(&prefix_rep)
                .copied()
                .chain([("burstiness", w.burstiness.is_some_and(|b| b != 1.0))])
                .collect(),
        ),
    };
    if w.trace_time_scale.is_some() && w.trace_rate.is_some() {
        return Err(ConfigError::new(
            "workload.trace_rate",
            "give trace_time_scale or trace_rate, not both (trace_rate sets the scale)",
        ));
    }
    for (f, v) in [("trace_time_scale", w.trace_time_scale), ("trace_rate", w.trace_rate)] {
        if let Some(x) = v {
            if !(x.is_finite() && x > 0.0) {
                return Err(ConfigError::new(format!("workload.{f}"), format!("must be a number > 0, got {x:?}")));
            }
        }
    }
    // The same ceiling as request_rate's: past it the arrivals collapse onto one instant.
    if let Some(r) = w.trace_rate.filter(|&r| r > MAX_REQUEST_RATE) {
        return Err(ConfigError::new(
            "workload.trace_rate",
            format!("must be at most {MAX_REQUEST_RATE} requests per second (as request_rate), got {r:e}"),
        ));
    }
    if let Some((f, _)) = foreign.iter().find(|(_, set)| *set) {
        return Err(ConfigError::new(
            format!("workload.{f}"),
            format!("is not used by dataset_name \"{name}\": remove it (or change dataset_name)"),
        ));
    }
    Ok(())
}
