//! The `workload` section: `vllm bench serve`'s flags, checked and resolved.

use super::*;

/// Checks a `workload` section and turns it into generator parameters
/// (`res.trace` must hold the trace's rows for `dataset_name = "trace"`).
pub fn resolve_workload(w: &WorkloadSection, res: &Resources) -> Result<WorkloadParams> {
    let dataset = match w.dataset_name {
        DatasetName::Random => {
            let r = w.random_range_ratio.unwrap_or(0.0);
            if !(0.0..1.0).contains(&r) {
                return Err(ConfigError::new("workload.random_range_ratio", format!("must be in [0, 1), got {r}")));
            }
            Dataset::Random {
                input_len: positive("workload.random_input_len", w.random_input_len.unwrap_or(1024))?,
                output_len: positive("workload.random_output_len", w.random_output_len.unwrap_or(128))?,
                range_ratio: r,
                prefix_len: w.random_prefix_len.unwrap_or(0),
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
        DatasetName::Trace => {
            if w.trace.is_none() {
                return Err(ConfigError::new("workload.trace", "dataset_name is \"trace\" but no trace file is given"));
            }
            let rows =
                res.trace.clone().ok_or_else(|| ConfigError::new("workload.trace", "the trace was not loaded"))?;
            if rows.is_empty() {
                return Err(ConfigError::new("workload.trace", "the trace has no rows: an empty workload"));
            }
            for (i, r) in rows.iter().enumerate() {
                if r.input_len == 0 || r.output_len == 0 {
                    return Err(ConfigError::new(
                        format!("workload.trace[{i}]"),
                        "input_len and output_len must be at least 1",
                    ));
                }
                if !(r.arrival_time.is_finite() && r.arrival_time >= 0.0) {
                    return Err(ConfigError::new(
                        format!("workload.trace[{i}].arrival_time"),
                        format!("must be a time in seconds >= 0, got {}", r.arrival_time),
                    ));
                }
            }
            Dataset::Trace { rows }
        }
    };
    let num_prompts = match (&dataset, w.num_prompts) {
        (Dataset::Trace { rows }, None) => rows.len() as u32,
        (_, n) => positive("workload.num_prompts", n.unwrap_or(1000))?,
    };
    let burstiness = w.burstiness.unwrap_or(1.0);
    if !(burstiness > 0.0 && burstiness.is_finite()) {
        return Err(ConfigError::new("workload.burstiness", format!("must be > 0, got {burstiness}")));
    }
    if let Some(c) = w.max_concurrency {
        positive("workload.max_concurrency", c)?;
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
    match w.output_len_dist {
        Some(OutputLenDist::Geometric { mean }) if !(mean >= 1.0 && mean.is_finite()) => {
            return Err(ConfigError::new("workload.output_len_dist.mean", format!("must be >= 1, got {mean}")));
        }
        Some(OutputLenDist::Uniform { min, max }) if min == 0 || min > max => {
            return Err(ConfigError::new(
                "workload.output_len_dist",
                format!("needs 1 <= min <= max, got min {min}, max {max}"),
            ));
        }
        _ => {}
    }
    Ok(WorkloadParams {
        dataset,
        num_prompts,
        num_warmups: w.num_warmups.unwrap_or(0),
        request_rate: w.request_rate.unwrap_or(RequestRate(None)).0,
        burstiness,
        max_concurrency: w.max_concurrency,
        ignore_eos,
        output_len_dist: w.output_len_dist,
        initial_test_request: w.initial_test_request.unwrap_or(true),
        seed: w.seed.unwrap_or(0),
    })
}
